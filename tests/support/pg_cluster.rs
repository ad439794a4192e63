//! Starting a throwaway PostgreSQL cluster: shared by the tests' harness
//! (`tests/integration/backend.rs`) and the PostgreSQL benches (`benches/support/pg_bench.rs`,
//! for `benches/workers.rs` and `benches/retention.rs`), which include this file with `#[path]`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The first directory holding both `initdb` and `pg_ctl`: on `PATH`, else the highest version
/// in `/usr/lib/postgresql/*/bin`.
pub fn find_bin_dir() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(path) = std::env::var_os("PATH")
        && let Some(dir) = std::env::split_paths(&path).find(|d| has_both(d))
    {
        return Some(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            Some((version, e.path().join("bin")))
        })
        .filter(|(_, bin)| has_both(bin))
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// The user to run PostgreSQL as, which refuses root: `None` (this process's user) unless this
/// process runs as root, then `postgres`, else `nobody`.
pub fn service_user() -> Result<Option<String>, String> {
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !is_root {
        return Ok(None);
    }
    for user in ["postgres", "nobody"] {
        let exists = Command::new("id")
            .arg(user)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if exists {
            return Ok(Some(user.to_owned()));
        }
    }
    Err(
        "running as root, and there is neither a `postgres` nor a `nobody` user to run \
         PostgreSQL as (it refuses root)"
            .into(),
    )
}

/// `program` run as `user` (through `runuser`), or as this process's user for `None`.
pub fn command_as(user: Option<&str>, program: &Path) -> Command {
    match user {
        Some(user) => {
            let mut c = Command::new("runuser");
            c.args(["-u", user, "--"]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// Runs `c` to its end; its output as the error when it fails.
pub fn run(what: &str, mut c: Command) -> Result<(), String> {
    let out = c
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Makes a cluster in `dir/data` owned by `user`, with superuser `role` and trust
/// authentication, and starts it listening only on a Unix socket in `socket_dir` (which must
/// exist), with the server `settings` (`-c name=value ...`) and its log in
/// `dir/postgres.log`, which a failed start's error carries.
pub fn init_and_start(
    bin: &Path,
    dir: &Path,
    user: Option<&str>,
    role: &str,
    socket_dir: &Path,
    settings: &str,
) -> Result<(), String> {
    if let Some(user) = user {
        let mut chown = Command::new("chown");
        chown.arg("-R").arg(format!("{user}:")).arg(dir);
        run("chown", chown)?;
    }
    let data = dir.join("data");
    let mut initdb = command_as(user, &bin.join("initdb"));
    initdb
        .arg("-D")
        .arg(&data)
        .args(["-U", role, "--auth=trust", "-E", "UTF8", "--locale=C"])
        // The service user may not enter the directory this process runs in.
        .current_dir(dir);
    run("initdb", initdb)?;
    let options = format!(
        "-k '{}' -c listen_addresses='' {settings}",
        socket_dir.display()
    );
    let log = dir.join("postgres.log");
    let mut pg_ctl = command_as(user, &bin.join("pg_ctl"));
    pg_ctl
        .arg("-D")
        .arg(&data)
        .arg("-l")
        .arg(&log)
        .arg("-o")
        .arg(options)
        .args(["-w", "start"])
        .current_dir(dir);
    run("pg_ctl start", pg_ctl).map_err(|e| {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        format!("{e}\n{}:\n{text}", log.display())
    })
}
