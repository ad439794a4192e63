//! What the long-running commands (`serve`, `worker`, `dev model`) share: a listener, the
//! signal that stops them, and the report of the runs they recovered.

use crate::cli::Output;
use crate::driver::Recovery;

/// A listener on `addr` and the address it got; the refusal to print when there is none.
pub(super) async fn listen(
    addr: &str,
) -> Result<(tokio::net::TcpListener, std::net::SocketAddr), String> {
    let cannot = |e: std::io::Error| format!("error: cannot listen on {addr}: {e}");
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(cannot)?;
    let bound = listener.local_addr().map_err(cannot)?;
    Ok((listener, bound))
}

/// Tells what a recovery did: the runs recovered, and each that could not be, with what next.
pub(super) fn print_recovery(out: &mut dyn Output, report: &Recovery) {
    let ids = &report.recovered;
    if !ids.is_empty() {
        out.err(&format!("recovered {} runs: {}", ids.len(), ids.join(", ")));
    }
    for failed in &report.failed {
        let then = if failed.marked_failed {
            "it is marked failed".to_owned()
        } else {
            format!(
                "it is left as it was; once the cause is fixed, recover it with `weft resume {}`",
                failed.run_id
            )
        };
        out.err(&format!(
            "error: run {} cannot be recovered: {}; {then}",
            failed.run_id, failed.error
        ));
    }
}

/// Completes at Ctrl-C or SIGTERM (what a service manager sends to stop a process), listened
/// for from this call on: a signal sent before the future is first polled counts too.
pub(super) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt()).ok();
    let mut term = signal(SignalKind::terminate()).ok();
    async move {
        tokio::select! {
            () = received(int.as_mut()) => {}
            () = received(term.as_mut()) => {}
        }
    }
}

/// Completes when `signal` is received; never without one.
async fn received(signal: Option<&mut tokio::signal::unix::Signal>) {
    match signal {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}
