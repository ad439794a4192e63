//! The `weft` command line.

/// mimalloc: the store and the JSON layer allocate many small, short-lived buffers, which
/// glibc's allocator serves markedly slower (measured in `cargo bench --bench workflows`);
/// metered, so that jq expressions are held to their memory budget (`--expr-memory-mib`).
#[global_allocator]
static ALLOC: weft::MeteredAlloc<mimalloc::MiMalloc> = weft::MeteredAlloc(mimalloc::MiMalloc);

#[tokio::main]
async fn main() {
    let cli = weft::cli::Cli::from_args();
    let telemetry = weft::cli::telemetry::init(cli.otlp_endpoint.as_deref());
    let code = weft::cli::main(cli).await;
    // Spans still buffered are sent before the exit skips every destructor.
    tokio::task::spawn_blocking(move || telemetry.shutdown())
        .await
        .ok();
    std::process::exit(code);
}
