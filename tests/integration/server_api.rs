//! The HTTP API's conventions: one error shape for every refusal (axum's own included), 409 for
//! a taken run id, `Location` on 201, cursor pages of runs with RFC 3339 times, re-runs, a
//! run's definition, and events as Server-Sent Events resumed by `Last-Event-ID`.

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weft::RunStatus;

use crate::common::Env;
use crate::server::{APPROVAL, HANG_GUARD, exchange, http, serve};

const TWO: &str = r#"
id: two
steps:
  - map: { id: a, expr: '{ n: 1 }' }
  - map: { id: b, expr: '{ n: (.input.n + 1) }' }
"#;

/// The `error` member of a refusal, checked for its shape.
fn error_of(body: &str) -> (String, String) {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    let code = v["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no code: {v}"));
    let message = v["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message: {v}"));
    assert!(!message.is_empty(), "{v}");
    (code.to_owned(), message.to_owned())
}

/// Sends raw `request` text (after the request line's path) and returns status and body.
async fn raw(addr: std::net::SocketAddr, request: String) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("read");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn every_refusal_has_one_json_shape_axums_own_included() {
    let env = Env::new();
    env.file("two.yaml", TWO);
    let addr = serve(&env).await;
    let (status, body) = http(addr, "GET", "/nowhere", None).await;
    assert_eq!(
        (status, error_of(&body).0.as_str()),
        (404, "no-route"),
        "{body}"
    );
    let (status, body) = http(addr, "DELETE", "/runs", None).await;
    assert_eq!(
        (status, error_of(&body).0.as_str()),
        (405, "method-not-allowed")
    );
    let (status, body) = http(addr, "GET", "/runs?limit=many", None).await;
    assert_eq!(
        (status, error_of(&body).0.as_str()),
        (400, "bad-request"),
        "{body}"
    );
    let (status, body) = http(addr, "GET", "/runs?limit=0", None).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = http(addr, "GET", "/runs?cursor=garbage", None).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = http(addr, "GET", "/runs?status=done", None).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        error_of(&body).1.contains("unknown status `done`"),
        "{body}"
    );
    let (status, body) = http(addr, "POST", "/runs", Some(json!({ "fil": "two.yaml" }))).await;
    assert_eq!(status, 422, "{body}");
    error_of(&body);
    let not_json = format!(
        "POST /runs HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: 5\r\n\r\n{{nope"
    );
    let (status, body) = raw(addr, not_json).await;
    assert_eq!(
        (status, error_of(&body).0.as_str()),
        (400, "bad-request"),
        "{body}"
    );
    // A resume body is refused as a start body is: not JSON 415, a member it does not know 422.
    for path in ["/runs", "/runs/nope/resume"] {
        let plain = format!(
            "POST {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\n{{}}"
        );
        let (status, body) = raw(addr, plain).await;
        assert_eq!(
            (status, error_of(&body).0.as_str()),
            (415, "not-json"),
            "{path}: {body}"
        );
    }
    let (status, body) = http(addr, "GET", "/runs/nope", None).await;
    assert_eq!((status, error_of(&body).0.as_str()), (404, "unknown-run"));
    let (status, body) = http(
        addr,
        "POST",
        "/runs/nope/resume",
        Some(json!({ "stp": "a" })),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(error_of(&body).1.contains("unknown field `stp`"), "{body}");
}

#[tokio::test]
async fn a_start_answers_201_with_location_and_a_taken_run_id_409() {
    let env = Env::new();
    env.file("two.yaml", TWO);
    let addr = serve(&env).await;
    let start = json!({ "workflow": "two", "input": { "n": 1 }, "run_id": "taken" });
    let (status, head, body) = exchange(addr, "POST", "/runs", &[], Some(start.clone())).await;
    assert_eq!(status, 201, "{body}");
    assert!(
        head.to_ascii_lowercase().contains("location: /runs/taken"),
        "{head}"
    );
    env.rt.wait("taken").await.expect("wait");
    let (status, _, body) = exchange(addr, "POST", "/runs", &[], Some(start)).await;
    assert_eq!(status, 409, "{body}");
    let (code, message) = error_of(&body);
    assert_eq!(code, "run-exists");
    assert!(message.contains("pick another `run_id`"), "{message}");
}

#[tokio::test]
async fn runs_come_in_cursor_pages_newest_first_with_rfc3339_times_and_filters() {
    let env = Env::new();
    env.file("two.yaml", TWO);
    let addr = serve(&env).await;
    for i in 0..5 {
        let start = json!({ "workflow": "two", "run_id": format!("r{i}") });
        let (status, body) = http(addr, "POST", "/runs?wait=true", Some(start)).await;
        assert_eq!(status, 200, "{body}");
    }
    let all: Vec<String> = env
        .rt
        .runs(None, None)
        .expect("runs")
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    let mut paged = Vec::new();
    let mut path = "/runs?limit=2".to_owned();
    loop {
        let (status, body) = http(addr, "GET", &path, None).await;
        assert_eq!(status, 200, "{body}");
        let page: Value = serde_json::from_str(&body).expect("JSON");
        let runs = page["runs"].as_array().expect("runs");
        assert!(runs.len() <= 2);
        for r in runs {
            let at = r["created_at"].as_str().expect("a string time");
            assert!(chrono::DateTime::parse_from_rfc3339(at).is_ok(), "{at}");
            paged.push(r["run_id"].as_str().expect("id").to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(c) => path = format!("/runs?limit=2&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(
        paged, all,
        "every run once, in the store's newest-first order"
    );
    let (_, body) = http(
        addr,
        "GET",
        "/runs?status=success&workflow=two&limit=1000",
        None,
    )
    .await;
    let page: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(page["runs"].as_array().map(Vec::len), Some(5));
    let (_, body) = http(addr, "GET", "/runs?workflow=other", None).await;
    let page: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(page, json!({ "runs": [], "next_cursor": null }));
}

#[tokio::test]
async fn s94_a_rerun_over_http_starts_from_the_step_and_the_definition_is_served() {
    let env = Env::new();
    env.file("two.yaml", TWO);
    let addr = serve(&env).await;
    let start = json!({ "workflow": "two", "input": { "n": 1 }, "run_id": "first" });
    let (status, body) = http(addr, "POST", "/runs?wait=true", Some(start)).await;
    assert_eq!(status, 200, "{body}");
    let again = json!({ "from_step": "b", "input": { "n": 41 }, "run_id": "again" });
    let (status, head, body) = exchange(
        addr,
        "POST",
        "/runs/first/rerun?wait=true",
        &[],
        Some(again),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        head.to_ascii_lowercase().contains("location: /runs/again"),
        "{head}"
    );
    let record: Value = serde_json::from_str(&body).expect("record");
    assert_eq!(record["result"], json!({ "n": 42 }));
    assert_eq!(record["restarted_from"]["run_id"], "first", "{record}");
    let (status, body) = http(addr, "GET", "/runs/first/workflow", None).await;
    assert_eq!(status, 200, "{body}");
    let def: Value = serde_json::from_str(&body).expect("JSON");
    let mermaid = def["mermaid"].as_str().expect("mermaid");
    assert!(
        mermaid.starts_with("flowchart") && mermaid.contains('b'),
        "{mermaid}"
    );
    assert!(def["graph"].is_object(), "{def}");
}

/// Reads an SSE stream until `done` holds for what arrived (or the stream ends).
async fn read_sse(stream: &mut TcpStream, seen: &mut String, done: impl Fn(&str) -> bool) {
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(HANG_GUARD, async {
        while !done(seen) {
            let n = stream.read(&mut buf).await.expect("read");
            if n == 0 {
                return;
            }
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
    .await;
    assert!(read.is_ok(), "the stream delivered: {seen}");
}

/// The `id:` lines of an SSE text, in order.
fn ids(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.strip_prefix("id: ").or_else(|| l.strip_prefix("id:")))
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

#[tokio::test]
async fn events_as_server_sent_events_follow_live_and_resume_after_last_event_id() {
    let env = Env::new();
    env.file("approval.yaml", APPROVAL);
    let addr = serve(&env).await;
    let start = json!({ "workflow": "approval", "input": { "amount": 50 }, "run_id": "s" });
    let (status, body) = http(addr, "POST", "/runs?wait=true", Some(start)).await;
    assert_eq!(status, 200, "{body}");

    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request =
        format!("GET /runs/s/events HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut seen = String::new();
    read_sse(&mut stream, &mut seen, |t| {
        t.contains("event: run-suspended")
    })
    .await;
    assert!(
        seen.to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{seen}"
    );
    // Live: the resume's events arrive on the same stream, through to the closing event.
    let resume = json!({ "label": "manager", "data": { "approved": true, "by": "ana" } });
    let (status, body) = http(addr, "POST", "/runs/s/resume", Some(resume)).await;
    assert_eq!(status, 202, "{body}");
    read_sse(&mut stream, &mut seen, |t| {
        t.contains("event: run-succeeded")
    })
    .await;
    let all = ids(&seen);
    assert_eq!(all, (1..=all.len() as u64).collect::<Vec<_>>(), "{seen}");
    assert_eq!(
        env.rt.wait("s").await.expect("wait").status,
        RunStatus::Success
    );

    // A reconnect after event 2 gets 3 onwards, no gap, no duplicate.
    let mut again = TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "GET /runs/s/events HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\nlast-event-id: 2\r\nconnection: close\r\n\r\n"
    );
    again.write_all(request.as_bytes()).await.expect("send");
    let mut rest = String::new();
    read_sse(&mut again, &mut rest, |_| false).await;
    assert_eq!(
        ids(&rest),
        (3..=all.len() as u64).collect::<Vec<_>>(),
        "{rest}"
    );
    // After the last event, nothing more will come: 204 stops an EventSource.
    let last = all.len().to_string();
    let headers = [
        ("accept", "text/event-stream"),
        ("last-event-id", last.as_str()),
    ];
    let (status, _, _) = exchange(addr, "GET", "/runs/s/events", &headers, None).await;
    assert_eq!(status, 204);
}

/// Checks `body`, the answer to `method template` with `status`, against the schema the
/// OpenAPI document gives for it.
fn conforms(doc: &Value, method: &str, template: &str, status: u16, content: &str, body: &Value) {
    let schema = &doc["paths"][template][method]["responses"][status.to_string()]["content"]
        [content]["schema"];
    assert!(
        !schema.is_null(),
        "the document has no {content} schema for {method} {template} {status}"
    );
    let root = json!({ "components": doc["components"], "allOf": [schema] });
    let validator = jsonschema::draft202012::new(&root).expect("the schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {template} {status} does not match the document: {errors:?}\n{body}"
    );
}

const FAILS: &str = r#"
id: fails
steps:
  - map: { id: boom, expr: 'error("no")' }
"#;

#[tokio::test]
async fn the_openapi_document_covers_every_route_and_the_server_answers_as_it_says() {
    let env = Env::new();
    env.file("two.yaml", TWO);
    env.file("approval.yaml", APPROVAL);
    env.file("fails.yaml", FAILS);
    let addr = serve(&env).await;
    let (status, body) = http(addr, "GET", "/openapi.json", None).await;
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&body).expect("JSON");
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{doc}"
    );
    for (template, methods) in [
        ("/runs", &["get", "post"][..]),
        ("/workflows", &["get"]),
        ("/runs/{id}", &["get"]),
        ("/runs/{id}/workflow", &["get"]),
        ("/runs/{id}/events", &["get"]),
        ("/runs/{id}/resume", &["post"]),
        ("/runs/{id}/cancel", &["post"]),
        ("/runs/{id}/rerun", &["post"]),
    ] {
        for m in methods {
            assert!(
                doc["paths"][template][m].is_object(),
                "{m} {template} is documented"
            );
        }
    }

    // Writes name the bearer token, optional as the server's `--token-env` is, and its 401;
    // reads need no token.
    let scheme = &doc["components"]["securitySchemes"]["bearer"];
    assert_eq!(scheme["type"], "http", "{scheme}");
    assert_eq!(scheme["scheme"], "bearer", "{scheme}");
    for template in [
        "/runs",
        "/runs/{id}/resume",
        "/runs/{id}/cancel",
        "/runs/{id}/rerun",
    ] {
        let write = &doc["paths"][template]["post"];
        assert_eq!(
            write["security"],
            json!([{}, {"bearer": []}]),
            "post {template}"
        );
        assert!(write["responses"]["401"].is_object(), "post {template} 401");
    }
    assert!(doc["paths"]["/runs"]["get"]["security"].is_null());

    // Bodies take no member the server does not know, as `deny_unknown_fields` refuses them;
    // a start's and a re-run's in each branch of their `oneOf` (one per way of naming the
    // workflow).
    for (body, branches) in [("StartBody", 2), ("RerunBody", 3), ("ResumeBody", 0)] {
        let schema = &doc["components"]["schemas"][body];
        let each = match schema["oneOf"].as_array() {
            Some(each) => each.iter().collect(),
            None => vec![schema],
        };
        assert_eq!(each.len(), branches.max(1), "{body}: {schema}");
        for schema in each {
            assert_eq!(schema["additionalProperties"], false, "{body}: {schema}");
            assert!(
                schema["properties"]["workflow"].is_object() || body == "ResumeBody",
                "{body}: {schema}"
            );
        }
    }

    // Parameters are as strict in the document as in the server.
    let param = |template: &str, method: &str, name: &str| -> Value {
        doc["paths"][template][method]["parameters"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name).cloned())
            .unwrap_or_else(|| panic!("{method} {template} has no parameter {name}"))
    };
    let limit = param("/runs", "get", "limit");
    assert_eq!(
        (&limit["schema"]["minimum"], &limit["schema"]["maximum"]),
        (&json!(1), &json!(1000)),
        "{limit}"
    );
    let status = param("/runs", "get", "status").to_string();
    assert!(
        status.contains("#/components/schemas/RunStatus"),
        "{status}"
    );
    for (template, method) in [("/runs/{id}", "get"), ("/runs/{id}/cancel", "post")] {
        let id = param(template, method, "id");
        assert_eq!(id["schema"]["maxLength"], 128, "{id}");
        assert!(id["schema"]["pattern"].is_string(), "{id}");
    }

    // The check catches a mismatch: a run id that is a number is no answer to a start.
    let wrong = json!({ "run_id": 5 });
    let caught = std::panic::catch_unwind(|| {
        conforms(&doc, "post", "/runs", 201, "application/json", &wrong);
    });
    assert!(caught.is_err(), "a wrong answer is caught");

    // Each call: method, template, path, body; then its status and answer checked.
    let calls: Vec<(&str, &str, &str, Option<Value>, u16)> = vec![
        (
            "post",
            "/runs",
            "/runs",
            Some(json!({ "workflow": "approval", "input": { "amount": 50 }, "run_id": "o1" })),
            201,
        ),
        (
            "post",
            "/runs",
            "/runs?wait=true",
            Some(json!({ "workflow": "two", "input": { "n": 1 }, "run_id": "o2" })),
            200,
        ),
        (
            "post",
            "/runs",
            "/runs?wait=true",
            Some(json!({ "workflow": "fails", "run_id": "o3" })),
            200,
        ),
        (
            "post",
            "/runs",
            "/runs",
            Some(json!({ "workflow": "two", "run_id": "o2" })),
            409,
        ),
        (
            "post",
            "/runs",
            "/runs",
            Some(json!({ "file": "/etc/passwd" })),
            403,
        ),
        ("get", "/runs", "/runs?limit=2", None, 200),
        ("get", "/runs", "/runs?limit=0", None, 400),
        ("get", "/workflows", "/workflows", None, 200),
        ("get", "/runs/{id}", "/runs/o2", None, 200),
        ("get", "/runs/{id}", "/runs/o3", None, 200),
        ("get", "/runs/{id}", "/runs/nope", None, 404),
        ("get", "/runs/{id}", "/runs/bad!", None, 400),
        ("get", "/runs/{id}/workflow", "/runs/o2/workflow", None, 200),
        ("post", "/runs/{id}/cancel", "/runs/o2/cancel", None, 409),
        ("post", "/runs/{id}/cancel", "/runs/bad!/cancel", None, 400),
        (
            "post",
            "/runs/{id}/rerun",
            "/runs/o2/rerun?wait=true",
            Some(json!({ "from_step": "b", "run_id": "o4" })),
            200,
        ),
        (
            "post",
            "/runs/{id}/rerun",
            "/runs/o2/rerun",
            Some(json!({ "from_step": "b", "run_id": "o5" })),
            201,
        ),
        (
            "post",
            "/runs/{id}/resume",
            "/runs/o2/resume",
            Some(json!({ "data": {} })),
            409,
        ),
        // A `null` body, which the document allows, is no body: a bare resume, answered as one
        // (the run has ended), not refused as bad JSON.
        ("post", "/runs/{id}/resume", "/runs/o2/resume", None, 409),
        (
            "post",
            "/runs/{id}/resume",
            "/runs/o2/resume",
            Some(Value::Null),
            409,
        ),
    ];
    for (method, template, path, body, expected) in calls {
        if path == "/runs/o2/cancel" || template == "/runs/{id}/workflow" {
            env.rt.wait("o2").await.expect("wait");
        }
        let (status, text) = http(addr, &method.to_uppercase(), path, body).await;
        assert_eq!(status, expected, "{method} {path}: {text}");
        let answer: Value = serde_json::from_str(&text).expect("a JSON answer");
        conforms(&doc, method, template, status, "application/json", &answer);
    }
    // The suspended run's record, its resume, and its events line by line.
    let rec = env.rt.wait("o1").await.expect("wait");
    assert_eq!(rec.status, RunStatus::Suspended);
    let (status, text) = http(addr, "GET", "/runs/o1", None).await;
    let answer: Value = serde_json::from_str(&text).expect("JSON");
    conforms(
        &doc,
        "get",
        "/runs/{id}",
        status,
        "application/json",
        &answer,
    );
    let resume = json!({ "label": "manager", "data": { "approved": true, "by": "ana" } });
    let (status, text) = http(addr, "POST", "/runs/o1/resume", Some(resume)).await;
    let answer: Value = serde_json::from_str(&text).expect("JSON");
    conforms(
        &doc,
        "post",
        "/runs/{id}/resume",
        status,
        "application/json",
        &answer,
    );
    env.rt.wait("o1").await.expect("wait");
    let (status, text) = http(addr, "GET", "/runs/o1/events", None).await;
    assert_eq!(status, 200);
    for line in text.lines().filter(|l| !l.is_empty()) {
        let event: Value = serde_json::from_str(line).expect("an event");
        conforms(
            &doc,
            "get",
            "/runs/{id}/events",
            200,
            "application/x-ndjson",
            &event,
        );
    }
}

/// Whether `body` is one the schema `name` of the document's components takes.
fn takes(doc: &Value, name: &str, body: &Value) -> bool {
    let root = json!({
        "components": doc["components"],
        "allOf": [{ "$ref": format!("#/components/schemas/{name}") }],
    });
    jsonschema::draft202012::new(&root)
        .expect("the schema compiles")
        .is_valid(body)
}

/// The schema of query parameter `name` of `GET template`.
fn query_schema(doc: &Value, template: &str, name: &str) -> Value {
    doc["paths"][template]["get"]["parameters"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .map(|p| p["schema"].clone())
        .unwrap_or_else(|| panic!("GET {template} has no parameter {name}"))
}

/// Whether the string `value` matches the `pattern` of `schema`.
fn matches(schema: &Value, value: &str) -> bool {
    let root = json!({ "type": "string", "pattern": schema["pattern"] });
    jsonschema::draft202012::new(&root)
        .expect("the pattern compiles")
        .is_valid(&json!(value))
}

#[tokio::test]
async fn the_document_refuses_exactly_the_bodies_and_parameters_the_server_refuses() {
    let env = Env::new();
    env.file("two.yaml", TWO);
    let addr = serve(&env).await;
    let (_, body) = http(addr, "GET", "/openapi.json", None).await;
    let doc: Value = serde_json::from_str(&body).expect("JSON");
    let (status, body) = http(
        addr,
        "POST",
        "/runs?wait=true",
        Some(json!({ "workflow": "two", "run_id": "e" })),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // A start names exactly one of `workflow` and `file`, a re-run at most one; `null` is none.
    // Bodies the document refuses the server answers 400; those it takes, anything but 400 or
    // 422 (here 201, or 404 for a workflow or run that is not there).
    let starts = [
        (json!({}), false),
        (json!({ "workflow": null, "file": null }), false),
        (json!({ "workflow": "two", "file": "two.yaml" }), false),
        (json!({ "workflow": "two" }), true),
        (json!({ "file": "two.yaml", "workflow": null }), true),
        (json!({ "workflow": "nope", "file": null }), true),
    ];
    for (body, taken) in starts {
        assert_eq!(
            takes(&doc, "StartBody", &body),
            taken,
            "the document on {body}"
        );
        let (status, text) = http(addr, "POST", "/runs", Some(body.clone())).await;
        if taken {
            assert!(matches!(status, 201 | 404), "{body}: {status} {text}");
        } else {
            assert_eq!(status, 400, "{body}: {text}");
            assert!(
                error_of(&text).1.contains("exactly one of `workflow`"),
                "{text}"
            );
        }
    }
    let reruns = [
        (json!({ "from_step": "b" }), true),
        (
            json!({ "from_step": "b", "workflow": "two", "file": null }),
            true,
        ),
        (json!({ "from_step": "b", "file": "two.yaml" }), true),
        (
            json!({ "from_step": "b", "workflow": "two", "file": "two.yaml" }),
            false,
        ),
    ];
    for (body, taken) in reruns {
        assert_eq!(
            takes(&doc, "RerunBody", &body),
            taken,
            "the document on {body}"
        );
        let (status, text) = http(addr, "POST", "/runs/e/rerun", Some(body.clone())).await;
        assert_eq!(status == 400, !taken, "{body}: {status} {text}");
    }

    // A new run's id: the document's pattern and length are the server's rule, its child-run
    // namespace included.
    let long = "x".repeat(129);
    for (id, taken) in [
        ("", false),
        (".a", false),
        ("a b", false),
        (long.as_str(), false),
        ("a.tool-1", false),
        ("a.0123456789abcdef0123456789abcdef", false),
        ("a.tool", true),
        ("0123456789abcdef0123456789abcdef", true),
        ("r-1.x_y", true),
    ] {
        let body = json!({ "workflow": "two", "run_id": id });
        assert_eq!(
            takes(&doc, "StartBody", &body),
            taken,
            "the document on {id:?}"
        );
        let rerun = json!({ "from_step": "b", "run_id": id });
        assert_eq!(
            takes(&doc, "RerunBody", &rerun),
            taken,
            "the document on {id:?}"
        );
        let (status, text) = http(addr, "POST", "/runs", Some(body)).await;
        assert_eq!(status == 400, !taken, "{id:?}: {status} {text}");
    }

    // `foreach_index` is a JSON Schema integer: `2.0` is one (the run is not there: 404), `1.5`
    // and 2^32 are not (422).
    assert_eq!(
        doc["components"]["schemas"]["ResumeBody"]["properties"]["foreach_index"]["maximum"],
        json!(u32::MAX)
    );
    for (index, expected) in [
        (json!(2.0), 404),
        (json!(1.5), 422),
        (json!(4_294_967_296_u64), 422),
    ] {
        let body = json!({ "foreach_index": index });
        assert_eq!(takes(&doc, "ResumeBody", &body), expected == 404, "{body}");
        let (status, text) = http(addr, "POST", "/runs/nope/resume", Some(body)).await;
        assert_eq!(status, expected, "{index}: {text}");
    }

    // A cursor: a time (any whole number; one past i64 is beyond every run), `.`, a run id.
    let cursor = query_schema(&doc, "/runs", "cursor");
    for (c, taken) in [
        ("", false),
        ("5", false),
        ("5.", false),
        ("x.e", false),
        ("+5.e", false),
        ("5.a b", false),
        ("5.e", true),
        ("-5.e", true),
        ("99999999999999999999.e", true),
        ("-99999999999999999999.e", true),
    ] {
        assert_eq!(matches(&cursor, c), taken, "the document on {c:?}");
        let path = format!("/runs?cursor={}", c.replace('+', "%2B").replace(' ', "%20"));
        let (status, text) = http(addr, "GET", &path, None).await;
        assert_eq!(status, if taken { 200 } else { 400 }, "{c:?}: {text}");
    }
    let (_, text) = http(addr, "GET", "/runs?cursor=99999999999999999999.e", None).await;
    let page: Value = serde_json::from_str(&text).expect("JSON");
    assert!(!page["runs"].as_array().expect("runs").is_empty(), "{page}");

    // `from_seq` is 0 to 2^63 - 1, as the document says.
    let from = query_schema(&doc, "/runs/{id}/events", "from_seq");
    assert_eq!(
        (&from["minimum"], &from["maximum"]),
        (&json!(0), &json!(i64::MAX)),
        "{from}"
    );
    for (seq, expected) in [
        ("0", 200),
        ("9223372036854775807", 200),
        ("9223372036854775808", 400),
    ] {
        let (status, text) =
            http(addr, "GET", &format!("/runs/e/events?from_seq={seq}"), None).await;
        assert_eq!(status, expected, "{seq}: {text}");
    }
}
