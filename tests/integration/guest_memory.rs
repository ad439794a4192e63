//! The host-wide guest memory budget (`HostConfig::guest_memory_mib`, `--guest-memory-mib`):
//! invocations that do not fit wait for memory instead of running, a cancel ends the wait, and
//! one larger than the whole budget fails at once. Measured with the host's counters and the
//! pooling allocator's live instances, never by timing.

use std::time::Duration;

use serde_json::json;
use weft::{PluginHost, RunStatus};

use crate::common::{Env, config};

/// A plugin step that holds its guest until its run is cancelled, at `memory-mib: mib`.
fn held(mib: u64) -> String {
    format!(
        r#"
id: held
plugins:
  kit: {{ wasm: "{{testkit}}", limits: {{ memory-mib: {mib} }} }}
steps:
  - {{ id: w, plugin: kit, step: wait-abort, config: {{ max-ms: 600000 }} }}
"#
    )
}

/// Waits (yielding, with a generous bound against a hang) until `what` holds of the host.
async fn until(host: &PluginHost, why: &str, what: impl Fn(&PluginHost) -> bool) {
    for _ in 0..60_000 {
        if what(host) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!(
        "never {why}: {} MiB in use, {} waiting",
        host.guest_memory_in_use_mib(),
        host.guest_memory_waiting()
    );
}

/// The guests the pooling allocator holds right now (`None` without pooling).
fn live_guests(host: &PluginHost) -> Option<u64> {
    host.pool_usage().map(|u| u.component_instances)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s14_invocations_beyond_the_guest_memory_budget_wait_their_turn_and_a_cancel_ends_the_wait()
{
    let mut cfg = config();
    cfg.host.guest_memory_mib = Some(128);
    let env = Env::with_config(cfg);
    let host = env.rt.host().clone();
    assert_eq!(host.guest_memory_budget_mib(), 128);
    let path = env.file("held.yaml", &held(64));
    let w = env.load(&path).await;
    assert_eq!(host.guest_memory_in_use_mib(), 0, "loading holds nothing");

    let mut runs = Vec::new();
    for n in 1..=4u64 {
        runs.push(env.rt.start(&w, json!({}), None).await.expect("start"));
        match n {
            1 | 2 => {
                until(&host, "reserved", |h| h.guest_memory_in_use_mib() == 64 * n).await;
                until(&host, "instantiated", |h| {
                    live_guests(h).is_none_or(|g| g == n)
                })
                .await;
            }
            _ => until(&host, "waiting", |h| h.guest_memory_waiting() == n - 2).await,
        }
    }
    // Two guests run, two wait for memory: no more is reserved, nor instantiated.
    assert_eq!(host.guest_memory_in_use_mib(), 128);
    if let Some(guests) = live_guests(&host) {
        assert_eq!(guests, 2, "only two in the sandbox at once");
    }

    // A cancel reaches an invocation that waits: it ends without its guest ever starting.
    env.rt.cancel(&runs[3]).await.expect("cancel");
    let rec = env.rt.wait(&runs[3]).await.expect("wait");
    assert_eq!(rec.status, RunStatus::Cancelled);
    until(&host, "one waiting", |h| h.guest_memory_waiting() == 1).await;
    assert_eq!(host.guest_memory_in_use_mib(), 128);

    // The first guest ends: its memory goes to the one that waited.
    env.rt.cancel(&runs[0]).await.expect("cancel");
    assert_eq!(
        env.rt.wait(&runs[0]).await.expect("wait").status,
        RunStatus::Cancelled
    );
    until(&host, "the waiter in", |h| h.guest_memory_waiting() == 0).await;
    assert_eq!(host.guest_memory_in_use_mib(), 128);
    until(&host, "two guests again", |h| {
        live_guests(h).is_none_or(|g| g == 2)
    })
    .await;

    for id in &runs[1..3] {
        env.rt.cancel(id).await.expect("cancel");
        assert_eq!(
            env.rt.wait(id).await.expect("wait").status,
            RunStatus::Cancelled
        );
    }
    until(&host, "all given back", |h| {
        h.guest_memory_in_use_mib() == 0
    })
    .await;
}

#[tokio::test]
async fn s14_an_invocation_larger_than_the_whole_guest_memory_budget_fails_at_once() {
    let mut cfg = config();
    cfg.host.guest_memory_mib = Some(128);
    let env = Env::with_config(cfg);
    // Were it not refused, the guest would end at once, and the run succeed.
    let rec = env.run(&held(256).replace("600000", "1"), json!({})).await;
    assert_eq!(rec.status, RunStatus::Failed, "{rec:?}");
    let err = rec.error.expect("an error");
    assert_eq!(err.code, "memory-limit");
    for part in ["256 MiB", "128 MiB", "--guest-memory-mib"] {
        assert!(err.message.contains(part), "{part}: {}", err.message);
    }
    assert_eq!(env.rt.host().guest_memory_in_use_mib(), 0);
}

#[test]
fn s14_the_command_line_sets_the_guest_memory_budget() {
    let home = crate::cli::Home::new();
    let path = home.file("held.yaml", &held(128).replace("600000", "1"));
    let path = path.to_string_lossy();
    let out = home.weft(&["--guest-memory-mib", "64", "run", &*path, "--json"]);
    assert_eq!(out.code, 1, "the run failed: {out:?}");
    let rec: serde_json::Value = serde_json::from_str(&out.stdout).expect("a record");
    assert_eq!(rec["error"]["code"], "memory-limit", "{rec}");
    let message = rec["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("128 MiB") && message.contains("budget of 64 MiB"),
        "{message}"
    );
    let zero = home.weft(&["--guest-memory-mib", "0", "run", &*path]);
    assert_eq!(zero.code, 2, "{zero:?}");
    // The default comes from the machine and lets this run.
    let ok = home.weft(&["run", &*path, "--json"]);
    assert_eq!(ok.code, 0, "{ok:?}");
}
