//! What a guest may reach, from its `grants:` alone: WASI with the granted directories and
//! environment (no inherited env, args, stdin or sockets), and the HTTP hosts it may call; and
//! the host's own directories (the home, the plugin cache and its key) and the kernel's
//! pseudo-filesystems (`/proc`, `/sys`, `/dev`) that no grant may expose.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder};

use super::error::one_line;
use super::events::{Emitter, Stdio};
use super::sandbox::{DirMode, Grants, HostPattern};
use super::stdio::LineStream;
use crate::engine::invocation::StepFailure;

/// The WASI context of one invocation and the HTTP hosts it may call; stdout and stderr go to
/// `out`. No context when the grants give no environment variable and no directory: the store
/// makes a [`bare_wasi`] one when the guest first calls WASI, most guests never do, and making
/// one costs a few percent of a small step. A grant that cannot be honoured is a
/// `sandbox-error` (never retried).
pub(crate) fn wasi_from_grants(
    grants: &Grants,
    out: &Arc<Emitter>,
) -> Result<(Option<WasiCtx>, Arc<[HostPattern]>), StepFailure> {
    let allowed = http_hosts(grants)?;
    if grants.env.is_empty() && grants.dirs.is_empty() {
        return Ok((None, allowed));
    }
    let mut wasi = builder(out);
    for (name, value) in &grants.env {
        wasi.env(name, value.resolve(name).map_err(sandbox_error)?);
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
    Ok((Some(wasi.build()), allowed))
}

/// The WASI context of a guest granted no environment variable and no directory.
pub(crate) fn bare_wasi(out: &Arc<Emitter>) -> WasiCtx {
    builder(out).build()
}

/// WASI with stdout and stderr to `out`, no network, and nothing else yet.
fn builder(out: &Arc<Emitter>) -> WasiCtxBuilder {
    let mut wasi = WasiCtxBuilder::new();
    wasi.stdout(LineStream::new(out.clone(), Stdio::Stdout))
        .stderr(LineStream::new(out.clone(), Stdio::Stderr))
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    wasi
}

/// The HTTP hosts the grants let the guest call.
fn http_hosts(grants: &Grants) -> Result<Arc<[HostPattern]>, StepFailure> {
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
    Ok(allowed.into())
}

/// A path of the host's own that no grant may expose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Protected {
    /// What it is, for messages: `the weft home`.
    pub(crate) what: &'static str,
    /// The path, canonical when it exists.
    pub(crate) path: PathBuf,
}

impl Protected {
    /// `path` (canonicalized when it exists) as `what`.
    pub(crate) fn new(what: &'static str, path: &Path) -> Self {
        Self {
            what,
            path: canonical(path),
        }
    }
}

/// `path` with links and `..` resolved when it exists, else as given.
fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// The kernel's pseudo-filesystems, which no grant may reach: `/proc` holds every process's
/// environment and memory (the host's own under `/proc/self`), `/sys` the kernel's settings,
/// `/dev` the devices (an endless `/dev/zero`, the disks).
const SYSTEM: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Why a granted directory exposes a protected path or one of the kernel's pseudo-filesystems,
/// when it does: it is the path, lies inside it, or contains it. The granted path is
/// canonicalized first, so a link to `/proc/self` is seen for what it is.
pub(crate) fn exposure(grants: &Grants, protected: &[Protected]) -> Option<String> {
    for dir in &grants.dirs {
        let granted = canonical(&dir.host);
        if let Some(why) = system_exposure(&dir.host, &granted) {
            return Some(why);
        }
        for p in protected {
            let relation = if granted == p.path {
                "is"
            } else if granted.starts_with(&p.path) {
                "is inside"
            } else if p.path.starts_with(&granted) {
                "contains"
            } else {
                continue;
            };
            return Some(format!(
                "grants.dirs host `{}` {relation} {} ({}): a plugin granted it could change \
                 weft's own runs and cached native code; grant a directory outside {}, or keep \
                 the home elsewhere (`--home` / WEFT_HOME)",
                dir.host.display(),
                p.what,
                p.path.display(),
                p.path.display(),
            ));
        }
    }
    None
}

/// Why the granted directory `host` (canonical: `granted`) exposes one of [`SYSTEM`], when it
/// does.
fn system_exposure(host: &Path, granted: &Path) -> Option<String> {
    SYSTEM.iter().map(Path::new).find_map(|system| {
        let relation = if granted == system {
            "is"
        } else if granted.starts_with(system) {
            "lies inside"
        } else if system.starts_with(granted) {
            "contains"
        } else {
            return None;
        };
        Some(format!(
            "grants.dirs host `{}` {relation} {}, one of the kernel's pseudo-filesystems \
             (/proc, /sys, /dev: the host's processes, environment, settings and devices), which \
             no grant may reach; grant a directory of ordinary files instead",
            host.display(),
            system.display(),
        ))
    })
}

/// A grant that cannot be honoured.
fn sandbox_error(message: String) -> StepFailure {
    StepFailure::new("sandbox-error", message).not_retryable()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::sandbox::{DirGrant, DirMode};

    fn granting(host: &Path) -> Grants {
        Grants {
            dirs: vec![DirGrant {
                host: host.to_path_buf(),
                guest: "/data".into(),
                mode: DirMode::Ro,
            }],
            ..Grants::default()
        }
    }

    #[test]
    fn grants_of_the_kernels_pseudo_filesystems_are_exposures() {
        let dir = tempfile::tempdir().expect("temp dir");
        let link = dir.path().join("self");
        std::os::unix::fs::symlink("/proc/self", &link).expect("symlink");
        for (host, says) in [
            (Path::new("/proc/self"), "lies inside /proc"),
            (Path::new("/proc"), "is /proc"),
            (Path::new("/sys/kernel"), "lies inside /sys"),
            (Path::new("/dev"), "is /dev"),
            (Path::new("/dev/shm"), "lies inside /dev"),
            (Path::new("/"), "contains /proc"),
            (link.as_path(), "lies inside /proc"),
        ] {
            let why = exposure(&granting(host), &[]).expect("refused");
            assert!(why.contains(says), "{}: {why}", host.display());
            assert!(why.contains(&format!("`{}`", host.display())), "{why}");
        }
        assert_eq!(exposure(&granting(dir.path()), &[]), None);
    }
}
