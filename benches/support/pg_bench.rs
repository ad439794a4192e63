//! What the PostgreSQL benches share: their throwaway cluster (started with
//! `tests/support/pg_cluster.rs`, as the tests' is) and the figures of a table. Included with
//! `#[path]` by `benches/workers.rs` and `benches/retention.rs`.

use std::path::PathBuf;
use std::process::Stdio;

use serde_json::{Value, json};
use tokio_postgres::{Client, NoTls};

#[path = "../../tests/support/pg_cluster.rs"]
mod pg_cluster;

use pg_cluster::{command_as, find_bin_dir, init_and_start, service_user};

/// The role the bench connects as (made by `initdb -U`), trusted without a password.
const ROLE: &str = "weft";

/// A PostgreSQL cluster of this bench's own, stopped and removed when dropped.
pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    user: Option<String>,
    socket_dir: PathBuf,
}

impl Cluster {
    pub fn start() -> Cluster {
        let bin = find_bin_dir().expect(
            "PostgreSQL (initdb, pg_ctl) not found on PATH nor in /usr/lib/postgresql/*/bin; \
             install it (Debian: apt-get install postgresql)",
        );
        let user = service_user().unwrap_or_else(|e| panic!("{e}"));
        let dir = tempfile::Builder::new()
            .prefix("weft-bench-pg-")
            .tempdir()
            .expect("temp dir");
        let socket_dir = dir.path().join("sock");
        std::fs::create_dir(&socket_dir).expect("socket dir");
        // fsync and synchronous_commit stay on (the defaults): durable figures.
        init_and_start(
            &bin,
            dir.path(),
            user.as_deref(),
            ROLE,
            &socket_dir,
            "-c fsync=on -c synchronous_commit=on -c max_connections=200 \
             -c log_autovacuum_min_duration=0",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        Cluster {
            dir,
            bin,
            user,
            socket_dir,
        }
    }

    /// The store URL of `schema`, with `lease_ms` from `WEFT_BENCH_LEASE_MS` when set.
    pub fn url(&self, schema: &str) -> String {
        let lease = std::env::var("WEFT_BENCH_LEASE_MS")
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| {
                let ms: f64 = v
                    .parse()
                    .unwrap_or_else(|_| panic!("WEFT_BENCH_LEASE_MS={v} is not a number"));
                format!("&lease_ms={}", ms as u64)
            })
            .unwrap_or_default();
        format!(
            "postgres://{ROLE}@/postgres?host={}&schema={schema}{lease}",
            self.socket_dir.display()
        )
    }

    pub async fn client(&self) -> Client {
        let (client, connection) = tokio_postgres::connect(
            &format!(
                "host={} user={ROLE} dbname=postgres",
                self.socket_dir.display()
            ),
            NoTls,
        )
        .await
        .expect("connect to the bench's cluster");
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("bench connection: {e}");
            }
        });
        client
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut pg_ctl = command_as(self.user.as_deref(), &self.bin.join("pg_ctl"));
        pg_ctl
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "fast", "-w", "stop"])
            .current_dir(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Err(e) = pg_ctl.status() {
            eprintln!("cannot stop the bench's PostgreSQL: {e}");
        }
    }
}

/// The PostgreSQL figures of one table.
pub async fn table_stats(db: &Client, schema: &str, table: &str) -> Value {
    let row = db
        .query_opt(
            "SELECT n_dead_tup, n_live_tup, n_tup_upd, n_tup_hot_upd, autovacuum_count, \
             pg_relation_size(relid), pg_total_relation_size(relid), \
             COALESCE(EXTRACT(EPOCH FROM now() - last_autovacuum)::float8, -1) \
             FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2",
            &[&schema, &table],
        )
        .await
        .expect("pg_stat_user_tables");
    let Some(r) = row else {
        return Value::Null;
    };
    let last: f64 = r.get(7);
    json!({
        "n_dead_tup": r.get::<_, i64>(0),
        "n_live_tup": r.get::<_, i64>(1),
        "n_tup_upd": r.get::<_, i64>(2),
        "n_tup_hot_upd": r.get::<_, i64>(3),
        "autovacuums": r.get::<_, i64>(4),
        "heap_bytes": r.get::<_, i64>(5),
        "total_bytes": r.get::<_, i64>(6),
        "last_autovacuum_s_ago": if last < 0.0 { Value::Null } else { json!(last.round()) },
    })
}
