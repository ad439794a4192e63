//! `weft serve`: the HTTP API over a real runtime, spoken to over loopback.

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weft::RunStatus;
use weft::server::ServeConfig;

use crate::common::Env;

/// Only for a test that would otherwise hang: nothing waits on it for timing.
pub(crate) const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(120);

/// A workflow whose one step suspends for a `manager` above an amount of 10.
pub(crate) const APPROVAL: &str = r#"
id: approval
plugins:
  approval: { wasm: "{approval}" }
steps:
  - { id: approve, plugin: approval, config: { limit: 10 } }
"#;

/// One HTTP/1.1 exchange, as a same-origin client on this machine sends it; returns the status
/// code and the body.
pub(crate) async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, String) {
    let (status, _, body) = exchange(addr, method, path, &[], body).await;
    (status, body)
}

/// One HTTP/1.1 exchange with `headers` added (a `host` among them replaces the default, the
/// server's address); returns the status code, the head and the body.
pub(crate) async fn exchange(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("host: {addr}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let request = format!(
        "{head}connection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.expect("read");
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (status, head.to_owned(), body)
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
    out
}

/// Serves `env`'s runtime on loopback, starting workflows from `env`'s temp dir.
pub(crate) async fn serve(env: &Env) -> std::net::SocketAddr {
    serve_with(env, ServeConfig::default().with_workflows(env.dir.path())).await
}

/// Serves `env`'s runtime on loopback with `config`.
pub(crate) async fn serve_with(env: &Env, config: ServeConfig) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(weft::server::serve(env.rt.clone(), listener, config));
    addr
}

#[tokio::test]
async fn s70_start_suspend_resume_and_read_a_run_over_http() {
    let env = Env::new();
    env.file("approval.yaml", APPROVAL);
    let addr = serve(&env).await;
    let (status, body) = http(
        addr,
        "POST",
        "/runs?wait=true",
        Some(json!({ "file": "approval.yaml", "input": { "amount": 50 }, "run_id": "h1" })),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let record: Value = serde_json::from_str(&body).expect("record");
    assert_eq!(record["status"], "suspended");
    assert_eq!(record["suspended"][0]["labels"], json!(["manager"]));

    let (status, body) = http(
        addr,
        "POST",
        "/runs/h1/resume",
        Some(json!({ "label": "manager", "data": { "approved": true, "by": "ana" } })),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let done = env.rt.wait("h1").await.expect("wait");
    assert_eq!(done.status, RunStatus::Success);

    let (status, body) = http(addr, "GET", "/runs/h1", None).await;
    assert_eq!(status, 200);
    let record: Value = serde_json::from_str(&body).expect("record");
    assert_eq!(
        record["result"],
        json!({ "amount": 50, "approved": true, "by": "ana" })
    );

    // Events as NDJSON; with follow, through the suspension to the closing event (S106).
    let (status, body) = http(addr, "GET", "/runs/h1/events?follow=true", None).await;
    assert_eq!(status, 200);
    let events: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).expect("event"))
        .collect();
    let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        events.last().map(|e| e["type"].clone()),
        Some(json!("run-succeeded"))
    );
    assert!(events.iter().any(|e| e["type"] == "run-resumed"));

    let (status, body) = http(addr, "GET", "/runs?status=success", None).await;
    assert_eq!(status, 200);
    assert!(body.contains("\"h1\""), "{body}");
    // The web console renders in the browser from these same routes: `/` is its app shell,
    // which loads only this server's own embedded assets.
    let (status, head, page) = exchange(addr, "GET", "/", &[], None).await;
    assert_eq!(status, 200);
    let head = head.to_ascii_lowercase();
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(
        head.contains("content-security-policy: default-src 'none'"),
        "{head}"
    );
    assert!(
        page.contains("src=\"/ui/app.js\"") && page.contains("href=\"/ui/app.css\""),
        "{page}"
    );
    for (path, kind) in [
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
    ] {
        let (status, head, body) = exchange(addr, "GET", path, &[], None).await;
        assert_eq!(status, 200, "{path}");
        let head = head.to_ascii_lowercase();
        assert!(
            head.contains(&format!("content-type: {kind}")),
            "{path}: {head}"
        );
        assert!(head.contains("cache-control: no-cache"), "{path}: {head}");
        assert!(!body.is_empty(), "{path}");
        for text in [&page, &body] {
            assert!(
                !text.contains("http:") && !text.contains("https:"),
                "{path}: the console names another origin"
            );
        }
    }
}

#[tokio::test]
async fn s69_s75_refusals_over_http_say_why_and_change_nothing() {
    let env = Env::new();
    let addr = serve(&env).await;
    let (status, body) = http(addr, "GET", "/runs/nope", None).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("no run with id nope"), "{body}");

    let rec = env
        .run(
            r#"
id: quick
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: a, plugin: kit, step: inc }
"#,
            json!({ "n": 1 }),
        )
        .await;
    let id = rec.run_id;
    let (status, body) = http(addr, "POST", &format!("/runs/{id}/cancel"), None).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains(&format!("run {id} has already ended (status: success)")),
        "{body}"
    );
    let (status, body) = http(
        addr,
        "POST",
        &format!("/runs/{id}/resume"),
        Some(json!({ "data": {} })),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("is not suspended"), "{body}");
    let (status, body) = http(
        addr,
        "POST",
        "/runs",
        Some(json!({ "file": "missing.yaml" })),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body.contains("the workflows directory has no file `missing.yaml`"),
        "{body}"
    );
    assert_eq!(
        env.rt.show(&id).await.expect("show").status,
        RunStatus::Success
    );
}
