//! The `weft` command line.

use clap::Parser;

/// mimalloc: the store and the JSON layer allocate many small, short-lived buffers, which
/// glibc's allocator serves markedly slower (measured in `cargo bench --bench workflows`).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let cli = weft::cli::Cli::parse();
    let telemetry = weft::cli::telemetry::init(cli.otlp_endpoint.as_deref());
    let code = weft::cli::main(cli).await;
    // Spans still buffered are sent before the exit skips every destructor.
    tokio::task::spawn_blocking(move || telemetry.shutdown())
        .await
        .ok();
    std::process::exit(code);
}
