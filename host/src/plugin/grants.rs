//! What a guest may reach, from its `grants:` alone: WASI with the granted directories and
//! environment (no inherited env, args, stdin or sockets), and the HTTP hosts it may call.

use std::sync::Arc;

use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder};

use super::error::one_line;
use super::events::{Emitter, Stdio};
use super::sandbox::{DirMode, Grants, HostPattern};
use super::stdio::LineStream;
use crate::engine::invocation::StepFailure;

/// The WASI context of one invocation and the HTTP hosts it may call; stdout and stderr go to
/// `out`. A grant that cannot be honoured is a `sandbox-error` (never retried).
pub(crate) fn wasi_from_grants(
    grants: &Grants,
    out: &Arc<Emitter>,
) -> Result<(WasiCtx, Arc<[HostPattern]>), StepFailure> {
    let mut wasi = WasiCtxBuilder::new();
    wasi.stdout(LineStream::new(out.clone(), Stdio::Stdout))
        .stderr(LineStream::new(out.clone(), Stdio::Stderr))
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    for (name, value) in &grants.env {
        wasi.env(name, value);
    }
    for dir in &grants.dirs {
        let perms = match dir.mode {
            DirMode::Ro => FsPerms::ReadOnly,
            DirMode::Rw => FsPerms::ReadWrite,
        };
        wasi.preopened_dir(&dir.host, &dir.guest, perms)
            .map_err(|e| {
                sandbox_error(format!(
                    "cannot open the granted directory {} (guest {}): {}; fix grants.dirs in the \
                     workflow file",
                    dir.host.display(),
                    dir.guest,
                    one_line(&e)
                ))
            })?;
    }
    let mut allowed = Vec::with_capacity(grants.http.len());
    for entry in &grants.http {
        match HostPattern::parse(entry) {
            Some(p) => allowed.push(p),
            None => {
                return Err(sandbox_error(format!(
                    "grants.http entry `{entry}` is not a host name"
                )));
            }
        }
    }
    Ok((wasi.build(), allowed.into()))
}

/// A grant that cannot be honoured.
fn sandbox_error(message: String) -> StepFailure {
    StepFailure::new("sandbox-error", message).not_retryable()
}
