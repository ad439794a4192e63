//! Which store the tests run on, and the throwaway PostgreSQL cluster they use for it.
//!
//! `WEFT_TEST_BACKEND=postgres` runs every test that builds its runtime through
//! `common::config()` (or spawns `weft` with `common::store_args()`) on PostgreSQL, each in a
//! schema of its own; otherwise they run on the embedded sled store. Tests that name PostgreSQL
//! themselves (`store_conformance`) use [`postgres_url`] in either mode.
//!
//! The cluster is this test process's own: made with `initdb` in a temporary directory on the
//! first call of [`postgres_url`], reachable only through a Unix socket in that directory, and
//! stopped and removed by a watchdog once the process has ended. When `initdb` and `pg_ctl`
//! are neither on `PATH` nor in `/usr/lib/postgresql/*/bin` (where Debian's `postgresql`
//! package puts them), PostgreSQL tests are skipped with a note on stderr, or fail when
//! `WEFT_TEST_REQUIRE_POSTGRES=1` (CI sets it, so they are never skipped there unnoticed).
//!
//! PostgreSQL refuses to run as root: when the tests run as root (as in CI containers), the
//! cluster is made and run as the `postgres` user (the one Debian's package adds), else as
//! `nobody`, through `runuser`, in a directory handed to that user.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

#[path = "../support/pg_cluster.rs"]
mod pg_cluster;

use pg_cluster::{command_as, find_bin_dir, init_and_start, service_user};

/// What is printed (or panicked with) when PostgreSQL is not installed.
const MISSING: &str = "postgres tests skipped: PostgreSQL (initdb, pg_ctl) not found; install it \
                       (Debian: apt-get install postgresql)";

/// The role the tests connect as (made by `initdb -U`), trusted without a password.
const ROLE: &str = "weft";

/// Whether the tests run on PostgreSQL (`WEFT_TEST_BACKEND=postgres`) rather than on sled.
pub fn postgres_mode() -> bool {
    std::env::var("WEFT_TEST_BACKEND").is_ok_and(|b| b == "postgres")
}

/// The store URL of a test: a fresh schema on this process's cluster in postgres mode, `None`
/// (the sled store in the test's home) otherwise.
pub fn store_url() -> Option<String> {
    if postgres_mode() {
        postgres_url()
    } else {
        None
    }
}

/// The store URL of the home `home` in postgres mode, the same on every call for one home (a
/// home reopened, or shared by several `weft` commands, finds its runs again); `None` otherwise.
pub fn store_url_for(home: &Path) -> Option<String> {
    static HOMES: Mutex<BTreeMap<PathBuf, String>> = Mutex::new(BTreeMap::new());
    if !postgres_mode() {
        return None;
    }
    let mut homes = HOMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(url) = homes.get(home) {
        return Some(url.clone());
    }
    let url = postgres_url()?;
    homes.insert(home.to_path_buf(), url.clone());
    Some(url)
}

/// A store URL naming a schema no other call gets, on this process's PostgreSQL cluster
/// (started on the first call); `None` when PostgreSQL is not installed (see the module's doc).
pub fn postgres_url() -> Option<String> {
    static SCHEMAS: AtomicU64 = AtomicU64::new(0);
    let cluster = cluster()?;
    let n = SCHEMAS.fetch_add(1, Ordering::Relaxed);
    Some(format!(
        // A short lease: a killed process's runs are taken up within seconds.
        "postgres://{ROLE}@/postgres?host={}&schema=t_{}_{n}&lease_ms=2000",
        cluster.socket_dir.display(),
        std::process::id()
    ))
}

/// Runs `statement` on the schema of `url` (a store URL [`postgres_url`] gave; `{s}` in the
/// statement stands for its schema) and returns the first column of each row, a `bytea`. For
/// tests that look at or damage what a PostgreSQL store holds, as others do with sled's files.
pub fn query_bytes(url: &str, statement: &str) -> Vec<Vec<u8>> {
    sql(url, statement, |client, statement| async move {
        let rows = client.query(&statement, &[]).await?;
        Ok(rows.iter().map(|r| r.get::<_, Vec<u8>>(0)).collect())
    })
}

/// Runs `statement` (as [`query_bytes`]) and returns how many rows it changed.
pub fn execute(url: &str, statement: &str) -> u64 {
    sql(url, statement, |client, statement| async move {
        client.execute(&statement, &[]).await
    })
}

/// Connects to this process's cluster and runs `op` with `statement`, its `{s}` replaced by the
/// schema `url` names; on a thread of its own, so async tests may call it too.
fn sql<T, F, Fut>(url: &str, statement: &str, op: F) -> T
where
    T: Send + 'static,
    F: FnOnce(tokio_postgres::Client, String) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, tokio_postgres::Error>>,
{
    let cluster = cluster().expect("a store URL was given, so the cluster runs");
    let schema = url
        .split(['?', '&'])
        .find_map(|p| p.strip_prefix("schema="))
        .unwrap_or_else(|| panic!("{url} names no schema"))
        .to_owned();
    let statement = statement.replace("{s}", &schema);
    let mut config = tokio_postgres::Config::new();
    config
        .host_path(&cluster.socket_dir)
        .user(ROLE)
        .dbname("postgres");
    std::thread::spawn(move || {
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio");
        tokio.block_on(async move {
            let (client, connection) = config
                .connect(tokio_postgres::NoTls)
                .await
                .expect("connect to the tests' cluster");
            tokio::spawn(connection);
            op(client, statement.clone())
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"))
        })
    })
    .join()
    .expect("the SQL thread")
}

/// A running cluster.
struct Cluster {
    /// The directory of its Unix socket (`-k`).
    socket_dir: PathBuf,
    /// The directory holding `initdb` and `pg_ctl` (and `psql`, with Debian's packages).
    bin: PathBuf,
    /// Its data directory (`pg_ctl -D`).
    data: PathBuf,
    /// The user it runs as (`None`: this process's).
    user: Option<String>,
}

/// This process's cluster's data directory and a `pg_ctl` command run as the cluster's user
/// (arguments still to add), for tests that stop or restart the server; `None` when
/// PostgreSQL is missing. Its log file is `postgres.log` beside the data directory.
pub fn pg_ctl() -> Option<(PathBuf, Command)> {
    let cluster = cluster()?;
    Some((
        cluster.data.clone(),
        command_as(cluster.user.as_deref(), &cluster.bin.join("pg_ctl")),
    ))
}

/// This process's cluster, started on the first call; `None` when PostgreSQL is missing.
fn cluster() -> Option<&'static Cluster> {
    static CLUSTER: OnceLock<Option<Result<Cluster, String>>> = OnceLock::new();
    let started = CLUSTER.get_or_init(|| find_bin_dir().map(|bin| start(&bin)));
    match started {
        Some(Ok(cluster)) => Some(cluster),
        // PostgreSQL is there but would not start: a failure, never a skip.
        Some(Err(e)) => panic!("the tests' PostgreSQL cluster did not start: {e}"),
        None if std::env::var("WEFT_TEST_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") => {
            panic!("{MISSING}")
        }
        None => {
            static TOLD: AtomicBool = AtomicBool::new(false);
            if !TOLD.swap(true, Ordering::Relaxed) {
                // Straight to stderr: libtest captures `eprintln!` of passing tests.
                let _ = writeln!(std::io::stderr(), "{MISSING}");
            }
            None
        }
    }
}

/// Makes a cluster in a new temporary directory and starts it; a watchdog removes both once
/// this process has ended.
fn start(bin: &Path) -> Result<Cluster, String> {
    let user = service_user()?;
    let dir = tempfile::Builder::new()
        .prefix("weft-pg-")
        .tempdir()
        .map_err(|e| format!("cannot make a temporary directory: {e}"))?
        .keep();
    let socket_dir = dir.join("sock");
    std::fs::create_dir(&socket_dir)
        .map_err(|e| format!("cannot create {}: {e}", socket_dir.display()))?;
    watchdog(&dir, bin, user.as_deref())?;
    // fsync, synchronous commits and full-page writes off: a throwaway cluster for tests only,
    // never settings for a database whose contents matter.
    init_and_start(
        bin,
        &dir,
        user.as_deref(),
        ROLE,
        &socket_dir,
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300",
    )?;
    Ok(Cluster {
        socket_dir,
        bin: bin.to_path_buf(),
        data: dir.join("data"),
        user,
    })
}

/// Starts a shell that waits for this process to end, then stops the cluster in `dir` and
/// removes `dir`: clean-up only, nothing waits for it. It runs in a process group of its own, so
/// a Ctrl-C that stops the tests does not stop it too.
fn watchdog(dir: &Path, bin: &Path, user: Option<&str>) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    const SCRIPT: &str = r#"
        pid=$1 dir=$2 pg_ctl=$3 user=$4
        while kill -0 "$pid" 2>/dev/null; do sleep 1; done
        if [ -n "$user" ]; then
            runuser -u "$user" -- "$pg_ctl" -D "$dir/data" -m immediate stop
        else
            "$pg_ctl" -D "$dir/data" -m immediate stop
        fi
        rm -rf "$dir"
    "#;
    Command::new("sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg("weft-pg-watchdog")
        .arg(std::process::id().to_string())
        .arg(dir)
        .arg(bin.join("pg_ctl"))
        .arg(user.unwrap_or_default())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map(drop)
        .map_err(|e| format!("cannot start the cluster's watchdog: {e}"))
}

#[test]
fn the_harness_starts_a_postgres_cluster_that_answers_on_its_socket() {
    let Some(url) = postgres_url() else {
        return;
    };
    let cluster = cluster().expect("started by postgres_url");
    assert!(
        url.contains(&format!("host={}", cluster.socket_dir.display())),
        "{url}"
    );
    assert_ne!(
        postgres_url(),
        Some(url),
        "every call names a schema of its own"
    );
    let psql = cluster.bin.join("psql");
    let psql = if psql.is_file() {
        psql
    } else {
        PathBuf::from("psql")
    };
    let out = Command::new(&psql)
        .arg("-h")
        .arg(&cluster.socket_dir)
        .args(["-U", ROLE, "-d", "postgres", "-tAc", "select 40 + 2"])
        .output();
    match out {
        Ok(out) => assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "42",
            "psql: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        // No client to check with: that the cluster started (`pg_ctl -w`) is all we know.
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "psql not run ({e}): the cluster is unchecked"
            );
        }
    }
}

#[test]
fn a_home_keeps_its_store_url_and_another_home_gets_its_own() {
    let (a, b) = (
        Path::new("/nonexistent/a/home"),
        Path::new("/nonexistent/b/home"),
    );
    let first = store_url_for(a);
    assert_eq!(first.is_some(), postgres_mode() && cluster().is_some());
    assert_eq!(store_url_for(a), first, "the same home, the same store");
    if first.is_some() {
        assert_ne!(store_url_for(b), first, "another home, another schema");
    }
    assert_eq!(
        crate::common::config_for(a)
            .store
            .map(|u| u.as_str().to_owned()),
        first
    );
    let args = crate::common::store_args_for(a);
    match &first {
        Some(url) => assert_eq!(args, ["--store", url.as_str()]),
        None => assert!(args.is_empty(), "{args:?}"),
    }
}

#[test]
fn a_spawned_weft_is_given_the_tests_backend() {
    let args = crate::common::store_args();
    if !postgres_mode() || cluster().is_none() {
        assert!(args.is_empty(), "{args:?}");
        return;
    }
    assert_eq!(args.len(), 2, "{args:?}");
    assert_eq!(args[0], "--store");
    assert!(args[1].starts_with("postgres://"), "{args:?}");
    assert_ne!(
        crate::common::store_args(),
        args,
        "each call names a fresh schema"
    );
}
