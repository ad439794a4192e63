//! Observability: OpenTelemetry traces of runs and step attempts received by a collector on
//! loopback (OTLP/HTTP with JSON bodies, as a real collector takes them), and the Prometheus
//! metrics `weft serve` answers at `/metrics`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::common::Env;
use crate::server::{http, serve};
use crate::torture::{self, Proc};

/// A minimal OTLP/HTTP collector: it answers every request `200 {}` and keeps the bodies sent
/// to `/v1/traces`.
struct Collector {
    port: u16,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Collector {
    fn start() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&bodies);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = Arc::clone(&kept);
                std::thread::spawn(move || serve_collector(stream, &kept));
            }
        });
        Collector { port, bodies }
    }

    /// Every span received, flattened out of its resource and scope.
    fn spans(&self) -> Vec<Value> {
        let bodies = self.bodies.lock().unwrap_or_else(|p| p.into_inner());
        let mut spans = Vec::new();
        for body in bodies.iter() {
            for rs in body["resourceSpans"].as_array().into_iter().flatten() {
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    spans.extend(ss["spans"].as_array().into_iter().flatten().cloned());
                }
            }
        }
        spans
    }
}

/// Answers requests on one connection until the client closes it.
fn serve_collector(stream: std::net::TcpStream, kept: &Mutex<Vec<Value>>) {
    let mut writer = stream.try_clone().expect("clone");
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        if request_line.contains("/v1/traces")
            && let Ok(v) = serde_json::from_slice(&body)
        {
            kept.lock().unwrap_or_else(|p| p.into_inner()).push(v);
        }
        let answer =
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// A span attribute's value, as a string whatever its type.
fn attr(span: &Value, key: &str) -> Option<String> {
    let a = span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?;
    let v = &a["value"];
    v["stringValue"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| v["intValue"].as_str().map(str::to_owned))
        .or_else(|| v["intValue"].as_i64().map(|i| i.to_string()))
}

const RETRIED: &str = r#"
id: traced
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: first, plugin: kit, step: inc }
  - { id: flaky, plugin: kit, step: fail, config: { succeed-on-attempt: 1 }, retry: { attempts: 2, delay-ms: 1 } }
"#;

#[test]
fn traces_hold_a_span_per_run_and_per_step_attempt_with_their_attributes() {
    let collector = Collector::start();
    let home = torture::Home::new();
    let file = home.file("traced.yaml", RETRIED);
    let endpoint = format!("http://127.0.0.1:{}", collector.port);
    let mut cmd = torture::weft(
        &home.home(),
        &[
            "--otlp-endpoint",
            &endpoint,
            "run",
            file.to_str().expect("UTF-8"),
            "--input",
            r#"{"n": 1}"#,
            "--run-id",
            "traced-1",
        ],
    );
    cmd.env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
    let out = Proc::start(cmd).finish();
    assert_eq!(out.code, 0, "{out:?}");
    // The process flushed its spans before it exited: they are all here now.
    let spans = collector.spans();
    let run = spans
        .iter()
        .find(|s| s["name"] == "run traced")
        .unwrap_or_else(|| panic!("no run span in {spans:?}"));
    assert_eq!(attr(run, "weft.run_id").as_deref(), Some("traced-1"));
    assert_eq!(attr(run, "weft.workflow_id").as_deref(), Some("traced"));
    assert_eq!(attr(run, "weft.outcome").as_deref(), Some("success"));
    let steps: Vec<&Value> = spans.iter().filter(|s| s["name"] == "step flaky").collect();
    let attempts: Vec<(Option<String>, Option<String>)> = steps
        .iter()
        .map(|s| (attr(s, "weft.step.attempt"), attr(s, "weft.outcome")))
        .collect();
    assert_eq!(
        attempts,
        [
            (Some("0".into()), Some("failed".into())),
            (Some("1".into()), Some("success".into()))
        ],
        "{steps:?}"
    );
    let first = spans.iter().filter(|s| s["name"] == "step first");
    for step in steps.iter().copied().chain(first) {
        assert_eq!(step["traceId"], run["traceId"], "one trace per run");
        assert_eq!(
            step["parentSpanId"], run["spanId"],
            "step spans sit in the run's"
        );
        assert_eq!(attr(step, "weft.run_id").as_deref(), Some("traced-1"));
    }
    assert_eq!(
        steps[0]["status"]["code"],
        json!(2),
        "a failed attempt is an error span"
    );
}

#[tokio::test]
async fn metrics_count_runs_by_status_steps_their_latency_and_store_syncs() {
    let env = Env::new();
    env.file(
        "counted.yaml",
        r#"
id: counted
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: a, plugin: kit, step: inc }
  - { id: b, plugin: kit, step: inc }
"#,
    );
    // The same steps, with a plugin that may send HTTP requests: they must not start before
    // the transitions that issue them are durable.
    env.file(
        "reaching.yaml",
        r#"
id: reaching
plugins:
  kit: { wasm: "{testkit}", grants: { http: [example.invalid] } }
steps:
  - { id: a, plugin: kit, step: inc }
"#,
    );
    let addr = serve(&env).await;
    for i in 0..3 {
        let start =
            json!({ "workflow": "counted", "input": { "n": 1 }, "run_id": format!("m{i}") });
        let (status, body) = http(addr, "POST", "/runs?wait=true", Some(start)).await;
        assert_eq!(status, 200, "{body}");
    }
    let start = json!({ "workflow": "reaching", "input": { "n": 1 }, "run_id": "r0" });
    let (status, body) = http(addr, "POST", "/runs?wait=true", Some(start)).await;
    assert_eq!(status, 200, "{body}");
    let (status, text) = http(addr, "GET", "/metrics", None).await;
    assert_eq!(status, 200, "{text}");
    let value = |name: &str| crate::common::metric(&text, name);
    assert_eq!(value("weft_runs{status=\"success\"}"), Some(4.0), "{text}");
    assert_eq!(value("weft_runs{status=\"failed\"}"), Some(0.0), "{text}");
    assert_eq!(
        value("weft_step_duration_seconds_count{outcome=\"success\"}"),
        Some(7.0),
        "{text}"
    );
    // S100: the six steps of the plugin granted nothing start while their transitions sync;
    // the step of the plugin granted a host waits for its transition.
    assert_eq!(value("weft_steps_started_early_total"), Some(6.0), "{text}");
    // Each of the seven steps was its run's only invocation, run on the run's own task.
    assert_eq!(value("weft_steps_on_run_task_total"), Some(7.0), "{text}");
    assert_eq!(value("weft_steps_in_flight"), Some(0.0), "{text}");
    assert!(
        value("weft_transitions_total").is_some_and(|n| n >= 6.0),
        "{text}"
    );
    // S100 for runs alone, one after another: a run's creation shares the sync of its first
    // transition instead of waiting for another, and a transition that only a later one's
    // effects wait on may share that one's sync (a step of `counted` ends while the next one
    // runs; a run started with `wait=true` need not sync its start before it settles), so
    // there are at most as many syncs as transitions, and at least one for each run, two for
    // `reaching`, whose step waits for the sync of its start.
    let (syncs, transitions) = (
        value("weft_store_syncs_total").unwrap_or_default(),
        value("weft_transitions_total").unwrap_or_default(),
    );
    assert!(syncs >= 5.0 && syncs <= transitions, "{text}");
    assert!(
        text.contains("# TYPE weft_step_duration_seconds histogram"),
        "{text}"
    );
}
