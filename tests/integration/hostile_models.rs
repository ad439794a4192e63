//! Hostile model APIs (issue 53): a provider that redirects elsewhere, echoes the key back,
//! asks for an absurd wait, sends endless lines or floods of deltas, or never answers; and a
//! run that plants a workflow tool's child before the agent that would start it. Each case
//! ends with a clear error, or is refused, and leaks no credential.
//!
//! Most cases need a provider that does what no honest one does, so they speak the wire
//! protocol from [`Canned`]: a loopback HTTP/1.1 server that records every request's head and
//! answers with bytes the test chose.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use weft::{EventKind, RunStatus, RuntimeConfig, StepStatus};

use crate::common::{Env, config, model_double};
use crate::torture::{Home, Proc, run_weft, weft};

/// A guard against a hang, not a measurement: a run that has not ended by then is a bug.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// The API key the spawned `weft` reads from its environment.
const KEY: &str = "sk-hostile-key-0123456789";

/// A configured header's value, as secret as the key.
const HEADER_VALUE: &str = "hdr-secret-value-42";

/// One request a [`Canned`] server received.
#[derive(Debug, Clone)]
struct Seen {
    /// The request line's path.
    path: String,
    /// The headers, names lower-cased.
    headers: Vec<(String, String)>,
}

impl Seen {
    /// The value of header `name`, if sent.
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether any header's value holds `secret`.
    fn carries(&self, secret: &str) -> bool {
        self.headers.iter().any(|(_, v)| v.contains(secret))
    }
}

/// A loopback HTTP/1.1 server answering each request (the `n`-th, from 0) with the bytes
/// `answer` makes of it, then closing the connection.
struct Canned {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

type Answer = dyn Fn(&Seen, usize) -> Vec<u8> + Send + Sync;

impl Canned {
    async fn start(answer: impl Fn(&Seen, usize) -> Vec<u8> + Send + Sync + 'static) -> Canned {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let answer: Arc<Answer> = Arc::new(answer);
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (log, answer) = (log.clone(), answer.clone());
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut conn).await else {
                        return;
                    };
                    let n = {
                        let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                        log.push(request.clone());
                        log.len() - 1
                    };
                    let bytes = answer(&request, n);
                    let _ = conn.write_all(&bytes).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Canned { base, seen }
    }

    /// The requests received so far.
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Reads one request's head and body; `None` when the peer went away first.
async fn read_request(conn: &mut tokio::net::TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf.len() - end - 4;
    while body < length {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body += n;
    }
    Some(Seen { path, headers })
}

/// A response with `status`, extra `headers` and a JSON `body`.
fn respond(status: u16, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    format!("{head}\r\n{body}").into_bytes()
}

/// A `200` event stream of `body`, delimited by the connection's close.
fn sse(body: &[u8]) -> Vec<u8> {
    let mut out =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n".to_vec();
    out.extend_from_slice(body);
    out
}

/// The wire protocols, as a file's `api:` names them.
const APIS: [&str; 2] = ["openai-chat", "anthropic-messages"];

/// A whole streamed reply saying `text` in `api`'s protocol.
fn reply(api: &str, text: &str) -> String {
    let text = json!(text);
    if api == "openai-chat" {
        format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{text}}}}}]}}\n\n\
             data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n\
             data: [DONE]\n\n"
        )
    } else {
        format!(
            "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"usage\":{{\"input_tokens\":1,\"output_tokens\":0}}}}}}\n\n\
             event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n\
             event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{text}}}}}\n\n\
             event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\"}},\"usage\":{{\"output_tokens\":1}}}}\n\n\
             event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
        )
    }
}

/// An error in the middle of a stream, in `api`'s protocol, saying `message`.
fn stream_error(api: &str, message: &str) -> String {
    let message = json!(message);
    if api == "openai-chat" {
        format!("data: {{\"error\":{{\"message\":{message}}}}}\n\n")
    } else {
        format!(
            "event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":{message}}}}}\n\n"
        )
    }
}

/// A one-step workflow asking model `m` (of `api` at `base`, with `extra` fields such as a key
/// variable or headers) for `prompt`, the step's own fields `step`.
fn asking(api: &str, base: &str, extra: &str, step: &str) -> String {
    format!(
        r#"
id: asking
models:
  m: {{ api: {api}, base-url: "{base}/v1", model: hostile{extra} }}
steps:
  - {{ id: ask, model: m, input: '{{prompt: "hi"}}'{step} }}
"#
    )
}

/// The key variable and a secret header, as `asking`'s `extra`.
const KEYED: &str =
    ", api-key-env: WEFT_TEST_HOSTILE_KEY, headers: { x-tenant-secret: hdr-secret-value-42 }";

/// Runs `yaml` with `weft run` (the key in its environment) as run `id`; then the run's record
/// (`weft show --json`), and everything printed and stored, for leak checks.
fn run_keyed(home: &Home, yaml: &str, id: &str) -> (Value, String) {
    let file = home.file(&format!("{id}.yaml"), yaml);
    let path = file.to_str().expect("UTF-8");
    let mut cmd = weft(&home.home(), &["run", path, "--json", "--run-id", id]);
    cmd.env("WEFT_TEST_HOSTILE_KEY", KEY);
    let out = Proc::start(cmd).finish();
    let shown = run_weft(&home.home(), &["show", id, "--json"]);
    assert_eq!(shown.code, 0, "{shown:?}");
    let watched = run_weft(&home.home(), &["watch", id]);
    let record: Value = serde_json::from_str(&shown.stdout).expect("a run record");
    let everything = [out.stdout, out.stderr, shown.stdout, watched.stdout].join("\n");
    (record, everything)
}

// The servers run on the runtime's other thread while this one waits for the `weft` process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_to_another_origin_is_refused_and_carries_no_key_or_header_there() {
    for api in APIS {
        let elsewhere = Canned::start(move |_, _| sse(reply(api, "stolen").as_bytes())).await;
        let target = format!("{}/v1/elsewhere", elsewhere.base);
        let model =
            Canned::start(move |_, _| respond(307, &[("location", &target)], r#"{"moved": true}"#))
                .await;
        let home = Home::new();
        let (record, printed) = run_keyed(&home, &asking(api, &model.base, KEYED, ""), "r1");
        assert_eq!(model.seen().len(), 1, "{api}: the model was asked once");
        assert!(
            model.seen()[0].carries(KEY),
            "{api}: the key went to base-url"
        );
        for seen in elsewhere.seen() {
            assert!(
                !seen.carries(KEY) && !seen.carries(HEADER_VALUE),
                "{api}: the redirect carried a credential to another origin: {seen:?}"
            );
        }
        assert!(elsewhere.seen().is_empty(), "{api}: no request went there");
        assert_eq!(record["status"], "failed", "{api}: {record}");
        let error = &record["error"];
        assert_eq!(error["code"], "model-refused", "{api}: {error}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("redirect") && message.contains(&elsewhere.base),
            "{api}: the error names the redirect and where it led: {message}"
        );
        assert!(
            message.contains("base-url"),
            "{api}: and the fix: {message}"
        );
        assert!(!printed.contains(KEY), "{api}: the key leaked");
    }
}

#[tokio::test]
async fn a_redirect_within_the_origin_is_still_followed() {
    let model = Canned::start(|seen, _| {
        if seen.path.ends_with("/moved/chat/completions") {
            sse(reply("openai-chat", "here").as_bytes())
        } else {
            respond(307, &[("location", "/moved/chat/completions")], "{}")
        }
    })
    .await;
    let env = Env::new();
    let rec = env
        .run(&asking("openai-chat", &model.base, "", ""), json!({}))
        .await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
    assert_eq!(rec.result.expect("an output")["text"], "here");
    assert_eq!(model.seen().len(), 2);
}

// The servers run on the runtime's other thread while this one waits for the `weft` process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_error_echoing_the_key_or_a_header_is_stored_redacted() {
    // The provider repeats what it was sent: the key header and the configured header.
    let echo = |seen: &Seen| {
        let key = seen
            .header("x-api-key")
            .or(seen.header("authorization"))
            .unwrap_or_default()
            .to_owned();
        let header = seen.header("x-tenant-secret").unwrap_or_default();
        format!("Incorrect API key provided: {key} (tenant {header})")
    };
    for api in APIS {
        // A refusal, whose body repeats them.
        let model = Canned::start(move |seen, _| {
            let body = json!({"error": {"type": "authentication_error", "message": echo(seen)}});
            respond(401, &[], &body.to_string())
        })
        .await;
        let home = Home::new();
        let (record, printed) = run_keyed(&home, &asking(api, &model.base, KEYED, ""), "r1");
        assert!(model.seen()[0].carries(KEY), "{api}: the key was sent");
        assert_eq!(record["error"]["code"], "model-auth", "{api}: {record}");
        let message = record["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("Incorrect API key provided") && message.contains("[redacted]"),
            "{api}: the provider's words are kept, the secrets replaced: {message}"
        );
        assert!(
            !printed.contains(KEY) && !printed.contains(HEADER_VALUE),
            "{api}: a secret leaked: {printed}"
        );

        // An error in the middle of the stream, after some text.
        let model = Canned::start(move |seen, _| {
            let mut body = reply(api, "partial");
            body.truncate(body.find("\n\n").unwrap_or(0) + 2);
            body.push_str(&stream_error(api, &echo(seen)));
            sse(body.as_bytes())
        })
        .await;
        let home = Home::new();
        let (record, printed) = run_keyed(&home, &asking(api, &model.base, KEYED, ""), "r2");
        assert_eq!(
            record["error"]["code"], "model-unavailable",
            "{api}: {record}"
        );
        let message = record["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("[redacted]"), "{api}: {message}");
        assert!(
            !printed.contains(KEY) && !printed.contains(HEADER_VALUE),
            "{api}: a secret leaked: {printed}"
        );
    }
}

/// The `delay_ms` of the run's first `step-retrying`, once it is there; the run is then
/// cancelled.
async fn first_retry_wait(env: &Env, yaml: &str) -> Value {
    let path = env.file("workflow.yaml", yaml);
    let w = env.load(&path).await;
    let id = env.rt.start(&w, json!({}), None).await.expect("start");
    let mut events = env.rt.watch(&id, 1).expect("watch");
    let wait = tokio::time::timeout(HANG_GUARD, async {
        while let Some(e) = events.recv().await {
            if e.kind == EventKind::StepRetrying {
                return e.data["delay_ms"].clone();
            }
            assert!(
                !matches!(e.kind, EventKind::RunFailed | EventKind::RunSucceeded),
                "the run ended without a retry: {e:?}"
            );
        }
        panic!("the run's events ended without a retry");
    })
    .await
    .expect("a retry within the hang guard");
    env.rt.cancel(&id).await.expect("cancel");
    wait
}

#[tokio::test]
async fn an_absurd_retry_after_is_capped_by_the_default_max_delay() {
    for (api, asked) in [("openai-chat", "inf"), ("anthropic-messages", "1e12")] {
        let model = Canned::start(move |_, _| {
            respond(
                429,
                &[("retry-after", asked)],
                r#"{"error":{"message":"slow down"}}"#,
            )
        })
        .await;
        let env = Env::new();
        let retried = ", retry: { attempts: 3, delay-ms: 1 }";
        let wait = first_retry_wait(&env, &asking(api, &model.base, retried, "")).await;
        assert_eq!(
            wait,
            json!(600_000),
            "{api}: retry-after {asked} waits the default max-delay-ms, 10 minutes"
        );
        // A `max-delay-ms` of the policy caps it as it did.
        let env = Env::new();
        let capped = ", retry: { attempts: 3, delay-ms: 1, max-delay-ms: 50 }";
        let wait = first_retry_wait(&env, &asking(api, &model.base, capped, "")).await;
        assert_eq!(wait, json!(50), "{api}");
    }
}

/// An event stream whose first line is a comment of `bytes` bytes, then a whole reply.
fn long_comment_then_reply(api: &str, bytes: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(bytes + 1024);
    body.extend_from_slice(b": ");
    body.resize(bytes, b'x');
    body.extend_from_slice(b"\n\n");
    body.extend_from_slice(reply(api, "after the line").as_bytes());
    sse(&body)
}

#[tokio::test]
async fn a_line_longer_than_the_bound_fails_the_call_with_the_setting_to_raise() {
    for api in APIS {
        let model = Canned::start(move |_, _| long_comment_then_reply(api, 2 << 20)).await;
        let env = Env::new();
        let rec = env.run(&asking(api, &model.base, "", ""), json!({})).await;
        assert_eq!(rec.status, RunStatus::Failed, "{api}: {rec:?}");
        let error = rec.error.expect("an error");
        assert_eq!(error.code, "model-malformed", "{api}: {error:?}");
        assert!(
            error.message.contains("longer than 1048576 bytes")
                && error.message.contains("max_line_bytes"),
            "{api}: {}",
            error.message
        );
    }
}

#[tokio::test]
async fn a_long_line_within_a_raised_bound_is_read_in_linear_time() {
    // 20 MiB in one line: rescanning the buffer at every chunk took minutes.
    let mut settings = config();
    settings.models.max_line_bytes = 64 << 20;
    for api in APIS {
        let model = Canned::start(move |_, _| long_comment_then_reply(api, 20 << 20)).await;
        let env = Env::with_config(settings.clone());
        let rec = tokio::time::timeout(
            HANG_GUARD,
            env.run(&asking(api, &model.base, "", ""), json!({})),
        )
        .await
        .expect("the call ends within the hang guard");
        assert_eq!(rec.status, RunStatus::Success, "{api}: {rec:?}");
        assert_eq!(rec.result.expect("an output")["text"], "after the line");
    }
}

/// A model that sends the first part of its answer, then holds the rest until released.
const HOLDS: &str = r#"
conversations:
  - match: "hi"
    turns:
      - { text: "Hello there, slowly.", hold: true }
"#;

#[tokio::test]
async fn a_model_call_without_its_own_timeout_has_the_hosts_default_deadline() {
    let base = model_double(HOLDS).await;
    let mut settings = config();
    settings.models.timeout = Duration::from_millis(300);
    let env = Env::with_config(settings);
    for api in APIS {
        let rec = tokio::time::timeout(HANG_GUARD, env.run(&asking(api, &base, "", ""), json!({})))
            .await
            .expect("the call ends at the host's deadline");
        let error = rec.error.expect("an error");
        assert_eq!(error.code, "timeout", "{api}: {error:?}");
        assert!(
            error.message.contains("300 ms") && error.message.contains("models.timeout"),
            "{api}: the message names the deadline and where it is set: {}",
            error.message
        );
    }
    // A step's own `timeout-ms` is its deadline, whatever the host's default.
    let mut settings = config();
    settings.models.timeout = Duration::from_secs(3600);
    let env = Env::with_config(settings);
    let rec = tokio::time::timeout(
        HANG_GUARD,
        env.run(
            &asking("openai-chat", &base, "", ", timeout-ms: 200"),
            json!({}),
        ),
    )
    .await
    .expect("the call ends at the step's deadline");
    let error = rec.error.expect("an error");
    assert_eq!(error.code, "timeout", "{error:?}");
    assert!(error.message.contains("200 ms"), "{}", error.message);
}

#[test]
fn a_model_calls_default_deadline_and_caps_are_the_documented_ones() {
    let models = RuntimeConfig::default().models;
    assert_eq!(models.timeout, Duration::from_secs(600));
    assert_eq!(models.max_line_bytes, 1 << 20);
    assert_eq!(models.max_events, 100_000, "the plugins' limits.max-events");
}

#[tokio::test]
async fn a_flood_of_deltas_stops_at_the_event_cap_with_a_clear_error() {
    // 400 characters: 100 deltas of 4.
    let text = "word".repeat(100);
    let script =
        format!("conversations:\n  - match: hi\n    turns:\n      - {{ text: \"{text}\" }}\n");
    let base = model_double(&script).await;
    let mut settings = config();
    settings.models.max_events = 20;
    let env = Env::with_config(settings);
    for api in APIS {
        let rec = env.run(&asking(api, &base, "", ""), json!({})).await;
        assert_eq!(rec.status, RunStatus::Failed, "{api}: {rec:?}");
        let error = rec.error.expect("an error");
        assert_eq!(error.code, "output-limit", "{api}: {error:?}");
        assert!(
            error.message.contains("more than 20") && error.message.contains("max_events"),
            "{api}: {}",
            error.message
        );
        assert_eq!(rec.steps["ask"].attempts, Some(1), "{api}: not retried");
        let outputs = env
            .events(&rec.run_id)
            .into_iter()
            .filter(|e| e.kind == EventKind::StepOutput)
            .count();
        assert_eq!(outputs, 20, "{api}: the cap's worth reached watchers");
    }
    // Within the cap, the stream is as it was.
    let mut settings = config();
    settings.models.max_events = 100;
    let env = Env::with_config(settings);
    let rec = env
        .run(&asking("openai-chat", &base, "", ""), json!({}))
        .await;
    assert_eq!(rec.status, RunStatus::Success, "{rec:?}");
}

/// A workflow tool's child: it ends with what it was given.
const REPORT: &str = r#"
id: report
steps:
  - map: { id: echo, expr: '{filed: .input.title}' }
"#;

/// The model calls `report` with id `c1`, then answers.
const FILES: &str = r#"
conversations:
  - match: "file it"
    turns:
      - tool_calls:
          - { id: c1, name: report, arguments: { title: "from the model" } }
      - text: "filed"
"#;

/// An agent `helper` offering `report.yaml`, at the top level or inside the parallel `g`.
fn filer(base: &str, nested: bool) -> String {
    let agent = r#"{ agent: { id: helper, model: m, input: '{prompt: "file it"}', tools: [ { workflow: { id: report, file: report.yaml }, description: "Files a report." } ] } }"#;
    let steps = if nested {
        format!("  - parallel: {{ id: g, steps: [ {agent} ] }}\n")
    } else {
        format!("  - {agent}\n")
    };
    format!(
        "id: filer\nmodels:\n  m: {{ api: openai-chat, base-url: \"{base}/v1\", model: scripted }}\nsteps:\n{steps}"
    )
}

#[tokio::test]
async fn a_run_id_in_a_workflow_tools_child_namespace_is_refused_from_outside() {
    let env = Env::new();
    let path = env.file("report.yaml", REPORT);
    let w = env.load(&path).await;
    let digest = format!("r1.{}", "0123456789abcdef".repeat(2));
    for id in [
        "r1.helper.tool-c1",
        "r1.g.helper.tool-c1.i0",
        digest.as_str(),
    ] {
        let err = env
            .rt
            .start(&w, json!({"title": "forged"}), Some(id.into()))
            .await
            .expect_err(id);
        let text = err.to_string();
        assert!(
            text.contains("workflow tool") && text.contains("child"),
            "{id}: the refusal says why: {text}"
        );
        assert!(env.rt.show(id).await.is_err(), "{id}: nothing was stored");
        let err = env
            .rt
            .start_and_wait(&w, json!({}), Some(id.into()))
            .await
            .expect_err(id);
        assert!(err.to_string().contains("workflow tool"), "{err}");
    }
    // An id with dots elsewhere is fine.
    let id = env
        .rt
        .start(&w, json!({"title": "x"}), Some("order-42.v1.2".into()))
        .await
        .expect("a dotted id outside the namespace");
    assert_eq!(
        env.rt.wait(&id).await.expect("wait").status,
        RunStatus::Success
    );

    // Over HTTP: a 400 saying why.
    let addr = crate::server::serve(&env).await;
    let (status, body) = crate::server::http(
        addr,
        "POST",
        "/runs",
        Some(json!({ "file": "report.yaml", "input": {}, "run_id": "h1.helper.tool-c1" })),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("workflow tool"), "{body}");
}

#[test]
fn the_cli_refuses_a_run_id_in_a_child_namespace() {
    let home = Home::new();
    let file = home.file("report.yaml", REPORT);
    let out = run_weft(
        &home.home(),
        &[
            "run",
            file.to_str().expect("UTF-8"),
            "--run-id",
            "r1.helper.tool-c1",
        ],
    );
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("workflow tool"), "{out:?}");
}

#[tokio::test]
async fn an_agent_adopts_no_child_that_another_run_started_under_its_id() {
    let base = model_double(FILES).await;
    let env = Env::new();
    env.file("report.yaml", REPORT);
    // Another run, `v.g`, whose top-level agent makes call c1: its child is `v.g.helper.tool-c1`,
    // the id the victim's agent at `g.helper` will make.
    let path = env.file("attacker.yaml", &filer(&base, false));
    let w = env.load(&path).await;
    let attacker = env
        .rt
        .start_and_wait(&w, json!({}), Some("v.g".into()))
        .await
        .expect("the other run");
    assert_eq!(attacker.status, RunStatus::Success, "{attacker:?}");
    let planted = "v.g.helper.tool-c1";
    assert_eq!(
        attacker.steps["helper.tool-c1"]
            .output
            .as_deref()
            .expect("a result")["run_id"],
        planted
    );

    let path = env.file("victim.yaml", &filer(&base, true));
    let w = env.load(&path).await;
    let victim = env
        .rt
        .start_and_wait(&w, json!({}), Some("v".into()))
        .await
        .expect("the victim");
    let call = &victim.steps["g.helper.tool-c1"];
    assert_eq!(call.status, StepStatus::Failed, "{victim:?}");
    let error = call.error.as_ref().expect("an error");
    assert_eq!(error.code, "child-not-started", "{error:?}");
    assert!(
        error.message.contains(planted) && error.message.contains("not the child of this call"),
        "{}",
        error.message
    );
    // The model was told, and answered; the planted child's result never reached it.
    assert_eq!(victim.status, RunStatus::Success, "{victim:?}");
    let out = victim.result.expect("an output");
    let told = out.to_string();
    assert!(!told.contains("\"filed\":\"from the model\""), "{told}");
    assert!(told.contains("child-not-started"), "{told}");
}
