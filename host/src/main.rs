//! The `weft` command line.

use std::io::IsTerminal;

use clap::Parser;

/// mimalloc: the store and the JSON layer allocate many small, short-lived buffers, which
/// glibc's allocator serves markedly slower (measured in `cargo bench --bench workflows`).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WEFT_LOG")
                // sled's own reports of a damaged database repeat what weft's refusal says.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,sled=off")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: a log file or a pipe gets plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = weft::cli::Cli::parse();
    let code = weft::cli::main(cli).await;
    std::process::exit(code);
}
