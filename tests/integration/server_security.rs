//! `weft serve` under hostile clients: files outside the workflows directory, cross-site forms,
//! DNS rebinding, missing tokens, slow and greedy clients. Each test holds a hole shut that
//! was open before: spoken to over loopback, over real sockets.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weft::RunStatus;
use weft::server::ServeConfig;

use crate::common::Env;
use crate::server::{APPROVAL, HANG_GUARD, exchange, http, serve, serve_with};
use crate::torture::{self, Proc};

/// A run of `approval` that waits for a resume, started through the embedding API.
async fn suspended(env: &Env, id: &str) {
    let file = env.file("approval.yaml", APPROVAL);
    let workflow = env.rt.load_workflow(&file).await.expect("load");
    env.rt
        .start(&workflow, json!({ "amount": 50 }), Some(id.into()))
        .await
        .expect("start");
    let rec = env.rt.wait(id).await.expect("wait");
    assert_eq!(rec.status, RunStatus::Suspended);
}

async fn status_of(env: &Env, id: &str) -> RunStatus {
    env.rt.show(id).await.expect("show").status
}

#[tokio::test]
async fn post_runs_reads_no_file_outside_the_workflows_directory_and_echoes_none() {
    let env = Env::new();
    let workflows = env.dir.path().join("workflows");
    std::fs::create_dir(&workflows).expect("mkdir");
    let secret = env.dir.path().join("secret.yaml");
    std::fs::write(&secret, "SECRET-FIRST-LINE: 1\n").expect("write");
    let addr = serve_with(&env, ServeConfig::default().with_workflows(&workflows)).await;
    for file in [
        secret.display().to_string(),
        "../secret.yaml".into(),
        "/etc/passwd".into(),
        "/dev/zero".into(),
    ] {
        let (status, body) = http(addr, "POST", "/runs", Some(json!({ "file": file }))).await;
        assert_eq!(status, 403, "{file}: {body}");
        assert!(
            !body.contains("SECRET") && !body.contains("root:"),
            "{body}"
        );
        assert!(
            body.contains("not a file of the workflows directory"),
            "{body}"
        );
    }
    // Without a workflows directory, nothing is started over HTTP.
    let addr = serve_with(&env, ServeConfig::default()).await;
    let (status, body) = http(
        addr,
        "POST",
        "/runs",
        Some(json!({ "file": "approval.yaml" })),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("--workflows DIR"), "{body}");
    assert!(env.rt.runs(None, None).expect("runs").is_empty());
}

#[tokio::test]
async fn a_workflow_is_started_by_its_id_and_get_workflows_lists_the_directory() {
    let env = Env::new();
    env.file("approval.yaml", APPROVAL);
    let addr = serve(&env).await;
    let (status, body) = http(addr, "GET", "/workflows", None).await;
    assert_eq!(status, 200, "{body}");
    let list: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(list, json!([{ "id": "approval", "file": "approval.yaml" }]));
    let (status, body) = http(
        addr,
        "POST",
        "/runs?wait=true",
        Some(json!({ "workflow": "approval", "input": { "amount": 5 }, "run_id": "by-id" })),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(status_of(&env, "by-id").await, RunStatus::Success);
    let (status, body) = http(addr, "POST", "/runs", Some(json!({ "workflow": "nope" }))).await;
    assert_eq!(status, 404, "{body}");
    let both = json!({ "workflow": "approval", "file": "approval.yaml" });
    let (status, body) = http(addr, "POST", "/runs", Some(both)).await;
    assert_eq!(status, 400, "{body}");
}

#[cfg(unix)]
#[tokio::test]
async fn a_named_pipe_in_the_workflows_directory_is_refused_and_blocks_nothing() {
    let env = Env::new();
    let pipe = env.dir.path().join("pipe.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&pipe)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let addr = serve(&env).await;
    let (status, body) = tokio::time::timeout(
        HANG_GUARD,
        http(addr, "POST", "/runs", Some(json!({ "file": "pipe.yaml" }))),
    )
    .await
    .expect("answered");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("not a regular file"), "{body}");
    let (status, _) = tokio::time::timeout(HANG_GUARD, http(addr, "GET", "/workflows", None))
        .await
        .expect("answered");
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_cross_site_request_cannot_cancel_a_run() {
    let env = Env::new();
    suspended(&env, "victim").await;
    let addr = serve(&env).await;
    let path = "/runs/victim/cancel";
    for headers in [
        vec![("origin", "https://evil.example")],
        vec![("origin", "null")],
        vec![("sec-fetch-site", "cross-site")],
    ] {
        let (status, _, body) = exchange(addr, "POST", path, &headers, None).await;
        assert_eq!(status, 403, "{headers:?}: {body}");
        assert_eq!(status_of(&env, "victim").await, RunStatus::Suspended);
    }
    // The server's own pages may.
    let own = format!("http://{addr}");
    let (status, _, body) = exchange(addr, "POST", path, &[("origin", &own)], None).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(status_of(&env, "victim").await, RunStatus::Cancelled);
}

#[tokio::test]
async fn a_host_the_server_does_not_answer_to_is_refused() {
    let env = Env::new();
    let addr = serve(&env).await;
    let port = addr.port();
    let rebound = format!("evil.example:{port}");
    let (status, _, body) = exchange(addr, "GET", "/runs", &[("host", &rebound)], None).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("--allow-host"), "{body}");
    let other_port = format!("127.0.0.1:{}", port.wrapping_add(1));
    let (status, _, _) = exchange(addr, "GET", "/runs", &[("host", &other_port)], None).await;
    assert_eq!(status, 403);
    let local = format!("localhost:{port}");
    let (status, _, _) = exchange(addr, "GET", "/runs", &[("host", &local)], None).await;
    assert_eq!(status, 200);
    let config = ServeConfig::default().allow_host("evil.example");
    let addr = serve_with(&env, config).await;
    let allowed = format!("EVIL.example:{}", addr.port());
    let (status, _, body) = exchange(addr, "GET", "/runs", &[("host", &allowed)], None).await;
    assert_eq!(status, 200, "{body}");
    // An allowed name may come through a proxy on the default port.
    let (status, _, body) = exchange(addr, "GET", "/runs", &[("host", "evil.example")], None).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn writes_need_the_token_when_one_is_set_and_reads_do_not() {
    let env = Env::new();
    suspended(&env, "guarded").await;
    let addr = serve_with(&env, ServeConfig::default().with_token("s3cret-token")).await;
    let path = "/runs/guarded/cancel";
    for auth in [None, Some("Bearer wrong"), Some("Basic s3cret-token")] {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let (status, head, body) = exchange(addr, "POST", path, &headers, None).await;
        assert_eq!(status, 401, "{auth:?}: {body}");
        assert!(
            head.to_ascii_lowercase()
                .contains("www-authenticate: bearer"),
            "{head}"
        );
        assert!(!body.contains("s3cret"), "{body}");
    }
    assert_eq!(status_of(&env, "guarded").await, RunStatus::Suspended);
    let (status, _) = http(addr, "GET", "/runs/guarded", None).await;
    assert_eq!(status, 200);
    let auth = [("authorization", "Bearer s3cret-token")];
    let (status, _, body) = exchange(addr, "POST", path, &auth, None).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(status_of(&env, "guarded").await, RunStatus::Cancelled);
}

#[tokio::test]
async fn cors_headers_go_only_to_allowed_origins() {
    let env = Env::new();
    let config = ServeConfig::default().cors_origin("https://ops.example");
    let addr = serve_with(&env, config).await;
    let preflight = [
        ("origin", "https://ops.example"),
        ("access-control-request-method", "POST"),
        (
            "access-control-request-headers",
            "authorization, content-type",
        ),
    ];
    let (status, head, _) = exchange(addr, "OPTIONS", "/runs", &preflight, None).await;
    assert!(status < 300, "{status} {head}");
    let head = head.to_ascii_lowercase();
    assert!(
        head.contains("access-control-allow-origin: https://ops.example"),
        "{head}"
    );
    let (status, head, _) = exchange(
        addr,
        "GET",
        "/runs",
        &[("origin", "https://ops.example")],
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("access-control-allow-origin"),
        "{head}"
    );
    let (status, head, _) = exchange(
        addr,
        "GET",
        "/runs",
        &[("origin", "https://evil.example")],
        None,
    )
    .await;
    assert_eq!(status, 403);
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("access-control-allow-origin"),
        "{head}"
    );
}

/// Reads from `stream` until the server closes it; `true` when it did (no hang).
async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(HANG_GUARD, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    let env = Env::new();
    let config = ServeConfig::default().with_header_timeout(Duration::from_millis(200));
    let addr = serve_with(&env, config).await;
    let mut slow = TcpStream::connect(addr).await.expect("connect");
    slow.write_all(b"GET /runs HTTP/1.1\r\nhost: ")
        .await
        .expect("send");
    assert!(
        closed_by_server(&mut slow).await,
        "the slow client was cut off"
    );
    let (status, _) = http(addr, "GET", "/runs", None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn connections_over_the_cap_are_closed_and_a_freed_slot_serves_again() {
    let env = Env::new();
    let config = ServeConfig::default().with_max_connections(2);
    let addr = serve_with(&env, config).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        // A request half sent holds its connection open.
        s.write_all(b"GET /runs HTTP/1.1\r\n").await.expect("send");
        held.push(s);
    }
    // Whether the server has taken the held ones yet or not, a third is closed once it has.
    let mut extra = TcpStream::connect(addr).await.expect("connect");
    let _ = extra.write_all(b"GET /runs HTTP/1.1\r\n").await;
    assert!(closed_by_server(&mut extra).await);
    drop(held);
    // Once the server has seen the held connections go, requests are served again.
    let served = tokio::time::timeout(HANG_GUARD, async {
        loop {
            let Ok(mut s) = TcpStream::connect(addr).await else {
                continue;
            };
            let request =
                format!("GET /runs HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
            if s.write_all(request.as_bytes()).await.is_err() {
                continue;
            }
            let mut answer = Vec::new();
            let _ = s.read_to_end(&mut answer).await;
            if answer.starts_with(b"HTTP/1.1 200") {
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(served.is_ok(), "a freed slot serves again");
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_with_413_and_starts_nothing() {
    let env = Env::new();
    env.file("approval.yaml", APPROVAL);
    let config = ServeConfig::default()
        .with_workflows(env.dir.path())
        .with_max_body_bytes(1024);
    let addr = serve_with(&env, config).await;
    let body = json!({ "file": "approval.yaml", "input": { "pad": "x".repeat(4096) } });
    let (status, body) = http(addr, "POST", "/runs", Some(body)).await;
    assert_eq!(status, 413, "{body}");
    assert!(env.rt.runs(None, None).expect("runs").is_empty());
}

#[tokio::test]
async fn followers_are_bounded_and_an_idle_stream_gets_heartbeats() {
    let env = Env::new();
    suspended(&env, "quiet").await;
    let config = ServeConfig::default()
        .with_max_followers(1)
        .with_heartbeat(Duration::from_millis(20));
    let addr = serve_with(&env, config).await;
    let mut follower = TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET /runs/quiet/events?follow=true HTTP/1.1\r\nhost: {addr}\r\n\r\n");
    follower.write_all(request.as_bytes()).await.expect("send");
    // The stream holds the run's events so far, then heartbeats: empty lines, each its own
    // chunk (`1\r\n\n\r\n`), while nothing happens.
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let beats = tokio::time::timeout(HANG_GUARD, async {
        loop {
            let n = follower.read(&mut buf).await.expect("read");
            assert!(n > 0, "the stream stays open");
            seen.extend_from_slice(&buf[..n]);
            if String::from_utf8_lossy(&seen)
                .matches("\r\n1\r\n\n\r\n")
                .count()
                >= 2
            {
                return;
            }
        }
    })
    .await;
    assert!(beats.is_ok(), "heartbeats arrive on an idle stream");
    let text = String::from_utf8_lossy(&seen);
    assert!(text.contains("\"run-suspended\""), "{text}");
    // The one follower slot is taken.
    let (status, body) = http(addr, "GET", "/runs/quiet/events?follow=true", None).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("--max-followers"), "{body}");
    // Reading what is stored needs no slot.
    let (status, _) = http(addr, "GET", "/runs/quiet/events", None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn run_ids_in_paths_are_checked_before_anything_is_looked_up() {
    let env = Env::new();
    let addr = serve(&env).await;
    for path in [
        "/runs/bad!id",
        "/runs/.hidden",
        "/runs/bad!id/events",
        "/runs/%2E%2E",
    ] {
        let (status, body) = http(addr, "GET", path, None).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body.contains("invalid run id"), "{path}: {body}");
    }
    let (status, body) = http(addr, "POST", "/runs/bad!id/cancel", None).await;
    assert_eq!(status, 400, "{body}");
}

/// One request over a blocking socket with `headers`; the status.
fn status_of_request(addr: std::net::SocketAddr, method: &str, path: &str, headers: &str) -> u16 {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n{headers}content-length: 0\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line")
}

#[test]
fn serve_beyond_loopback_makes_a_token_prints_it_and_takes_writes_only_with_it() {
    let home = torture::Home::new();
    let mut server = Proc::start(torture::weft(
        &home.home(),
        &["serve", "--addr", "0.0.0.0:0"],
    ));
    let line = server.expect_line("need this token");
    let token = line
        .split("Bearer ")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .expect("the token in the line")
        .to_owned();
    assert_eq!(token.len(), 64, "{line}");
    let serving = server.expect_line("serving http://");
    let port: u16 = serving
        .split("serving http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .expect("a port");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(
        status_of_request(addr, "POST", "/runs/nope/cancel", ""),
        401
    );
    let auth = format!("authorization: Bearer {token}\r\n");
    assert_eq!(
        status_of_request(addr, "POST", "/runs/nope/cancel", &auth),
        404
    );
    assert_eq!(status_of_request(addr, "GET", "/runs", ""), 200);
    server.kill();
}

#[test]
fn serve_with_a_token_variable_that_is_not_set_refuses_to_start() {
    let home = torture::Home::new();
    let out = Proc::start(torture::weft(
        &home.home(),
        &[
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--token-env",
            "WEFT_TEST_NO_SUCH_TOKEN",
        ],
    ))
    .finish();
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr
            .contains("the environment variable WEFT_TEST_NO_SUCH_TOKEN is not set or empty"),
        "{out:?}"
    );
}
