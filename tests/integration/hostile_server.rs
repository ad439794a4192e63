//! `weft serve` and the plugin host against the hostile probe of issue 53: clients that trickle
//! bodies, reads of a run's workflow without a token, workflow files that hold secrets, grants of
//! the kernel's pseudo-filesystems, and paging through many runs while runs are added. Each test
//! holds a hole shut that was open before, over real sockets and real files.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weft::server::ServeConfig;

use crate::common::Env;
use crate::server::{APPROVAL, HANG_GUARD, http, serve, serve_with};

/// Opens a connection to `addr` and sends the head of a `POST /runs` whose body is announced
/// as 100 000 bytes.
async fn slow_post(addr: std::net::SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /runs HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: 100000\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).await.expect("send");
    stream
}

/// Sends the body on `stream` a byte at a time, every 20 ms, until the server answers and
/// closes the connection; returns what the server sent.
async fn trickle(mut stream: TcpStream) -> String {
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            },
            // The pace of a slow client, not a wait for anything.
            _ = tokio::time::sleep(Duration::from_millis(20)) => {
                if stream.write_all(b" ").await.is_err() {
                    break;
                }
            }
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// Sends `GET /runs` to `addr` on fresh connections until one is answered 200.
async fn served(addr: std::net::SocketAddr) {
    loop {
        let Ok(mut s) = TcpStream::connect(addr).await else {
            continue;
        };
        let request = format!("GET /runs HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
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
}

#[tokio::test]
async fn clients_that_trickle_bodies_are_cut_off_and_other_clients_are_still_served() {
    let env = Env::new();
    let config = ServeConfig::default()
        .with_workflows(env.dir.path())
        .with_max_connections(2)
        .with_body_timeout(Duration::from_millis(300));
    let addr = serve_with(&env, config).await;
    // Every connection slot taken by a client that sends its body a byte at a time: connected
    // before any other, so the server accepts them first.
    let mut slow = Vec::new();
    for _ in 0..2 {
        slow.push(tokio::spawn(trickle(slow_post(addr).await)));
    }
    let normal = tokio::time::timeout(HANG_GUARD, served(addr)).await;
    assert!(normal.is_ok(), "a normal request was served meanwhile");
    for client in slow {
        let answer = tokio::time::timeout(HANG_GUARD, client)
            .await
            .expect("the slow client was cut off")
            .expect("task");
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("body-timeout"), "{answer}");
        assert!(answer.contains("--body-timeout-s"), "{answer}");
    }
    assert!(
        env.rt.runs(None, None).expect("runs").is_empty(),
        "nothing was started"
    );
}

#[tokio::test]
async fn a_body_sent_at_once_is_read_whole_within_the_body_deadline() {
    let env = Env::new();
    env.file("approval.yaml", APPROVAL);
    let config = ServeConfig::default()
        .with_workflows(env.dir.path())
        .with_body_timeout(Duration::from_secs(30));
    let addr = serve_with(&env, config).await;
    let (status, body) = http(
        addr,
        "POST",
        "/runs?wait=true",
        Some(json!({ "file": "approval.yaml", "input": { "amount": 5 }, "run_id": "quick" })),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

/// A workflow with every kind of secret its stored definition could show: a literal
/// `grants.env` value, a model's header, a granted directory and a plugin outside the
/// workflows directory, and the workflow file's own absolute path.
fn secretive(outside: &std::path::Path) -> String {
    format!(
        r#"
id: secretive
models:
  m:
    api: openai-chat
    base-url: "http://127.0.0.1:1/v1"
    model: x
    headers: {{ x-api-key: SECRET-HEADER-VALUE }}
plugins:
  kit:
    wasm: "{{testkit}}"
    grants:
      env: {{ TOKEN: SECRET-ENV-VALUE, FROM: {{ from-host: SOME_HOST_VAR }} }}
      dirs: [{{ host: "{}", guest: /data }}]
steps:
  - {{ id: inc, plugin: kit, step: inc }}
  - {{ id: ask, model: m, input: '{{prompt: "hi"}}' }}
"#,
        outside.display()
    )
}

#[tokio::test]
async fn a_runs_workflow_is_shown_without_env_values_headers_or_absolute_paths() {
    let env = Env::new();
    let workflows = env.dir.path().join("workflows");
    std::fs::create_dir(&workflows).expect("mkdir");
    let outside = tempfile::tempdir().expect("temp dir");
    let file = env.file("secretive.yaml", &secretive(outside.path()));
    std::fs::rename(&file, workflows.join("secretive.yaml")).expect("move");
    let addr = serve_with(&env, ServeConfig::default().with_workflows(&workflows)).await;
    let (status, body) = http(
        addr,
        "POST",
        "/runs",
        Some(json!({ "file": "secretive.yaml", "input": { "n": 1 }, "run_id": "sec" })),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = http(addr, "GET", "/runs/sec/workflow", None).await;
    assert_eq!(status, 200, "{body}");
    for secret in [
        "SECRET-ENV-VALUE".to_owned(),
        "SECRET-HEADER-VALUE".to_owned(),
        outside.path().display().to_string(),
        env.dir.path().display().to_string(),
        env.dir
            .path()
            .canonicalize()
            .expect("dir")
            .display()
            .to_string(),
        std::env::current_dir().expect("cwd").display().to_string(),
    ] {
        assert!(!body.contains(&secret), "`{secret}` is shown: {body}");
    }
    let shown: Value = serde_json::from_str(&body).expect("JSON");
    let graph = &shown["graph"];
    assert_eq!(graph["files"][0]["source"], "secretive.yaml", "{graph:#}");
    let grants = &graph["plugins"]["0/kit"]["sandbox"]["grants"];
    assert_eq!(grants["env"]["TOKEN"], "<redacted>", "{grants:#}");
    // The name of a host variable is no secret: the value is read at each invocation.
    assert_eq!(
        grants["env"]["FROM"],
        json!({ "from-host": "SOME_HOST_VAR" }),
        "{grants:#}"
    );
    assert_eq!(grants["dirs"][0]["host"], "<redacted>", "{grants:#}");
    assert_eq!(grants["dirs"][0]["guest"], "/data", "{grants:#}");
    assert_eq!(
        graph["models"]["0/m"]["headers"]["x-api-key"], "<redacted>",
        "{graph:#}"
    );
    assert_eq!(
        graph["plugins"]["0/kit"]["source"], "<redacted>",
        "{graph:#}"
    );
}

#[tokio::test]
async fn refusals_of_workflow_files_name_the_place_and_quote_nothing_of_the_file() {
    let env = Env::new();
    let workflows = env.dir.path().join("workflows");
    std::fs::create_dir(&workflows).expect("mkdir");
    let files = [
        ("creds.yaml", "SECRET-KEY-1: SECRET-VALUE-1\n"),
        ("type.yaml", "id: w\nsteps: SECRET-VALUE-2\n"),
        (
            "plugin.yaml",
            "id: w\nsteps:\n  - { id: s, plugin: SECRET-PLUGIN-3 }\n",
        ),
        (
            "shape.json",
            "{\"id\": \"w\", \"steps\": \"SECRET-VALUE-4\"}",
        ),
        (
            "syntax.yaml",
            "id: w\nSECRET-KEY-5: [unclosed, SECRET-VALUE-5\n",
        ),
        (
            "field.yaml",
            "id: w\nsteps: []\nSECRET-FIELD-6: { SECRET-VALUE-6: 1 }\n",
        ),
        (
            "id.yaml",
            "id: \"SECRET ID 7\"\nsteps:\n  - { id: \"SECRET STEP 7\", plugin: p }\n",
        ),
    ];
    for (name, text) in files {
        std::fs::write(workflows.join(name), text).expect("write");
    }
    let addr = serve_with(&env, ServeConfig::default().with_workflows(&workflows)).await;
    for (name, _) in files {
        let (status, body) = http(addr, "POST", "/runs", Some(json!({ "file": name }))).await;
        assert_eq!(status, 400, "{name}: {body}");
        assert!(!body.contains("SECRET"), "{name}: {body}");
        assert!(body.contains("invalid-workflow"), "{name}: {body}");
        assert!(body.contains(&format!("`{name}`")), "{name}: {body}");
        assert!(
            !body.contains(&env.dir.path().display().to_string()),
            "{name}: {body}"
        );
        assert!(body.contains("line "), "{name}: {body}");
    }
}

#[tokio::test]
async fn grants_of_proc_sys_and_dev_are_refused_before_anything_runs() {
    let env = Env::new();
    let link = env.dir.path().join("innocent");
    std::os::unix::fs::symlink("/proc/self", &link).expect("symlink");
    for (case, host, under) in [
        ("the process's own files", "/proc/self".to_owned(), "/proc"),
        ("the kernel's settings", "/sys/kernel".to_owned(), "/sys"),
        ("the devices", "/dev".to_owned(), "/dev"),
        ("a link to /proc/self", link.display().to_string(), "/proc"),
        ("the root, which holds /proc", "/".to_owned(), "/proc"),
    ] {
        let workflow = format!(
            "id: g\nplugins:\n  kit:\n    wasm: \"{{testkit}}\"\n    grants:\n      dirs: [{{ host: \"{host}\", guest: /data }}]\nsteps:\n  - {{ id: inc, plugin: kit, step: inc }}\n"
        );
        let path = env.file("grants-proc.yaml", &workflow);
        let err = match env.rt.load_workflow(&path).await {
            Ok(_) => panic!("{case}: the workflow was accepted"),
            Err(err) => err.to_string(),
        };
        for part in ["plugin `kit`", "grants.dirs", &format!("`{host}`"), under] {
            assert!(err.contains(part), "{case}: `{part}` missing from: {err}");
        }
        assert!(err.contains("grant a directory"), "{case}: {err}");
    }
    assert!(env.rt.runs(None, None).expect("runs").is_empty());
}

/// The run ids of a `GET /runs` page's body, and its `next_cursor`.
fn page_of(body: &str) -> (Vec<(String, String)>, Option<String>) {
    let page: Value = serde_json::from_str(body).expect("JSON");
    let runs = page["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| {
            (
                r["created_at"].as_str().expect("time").to_owned(),
                r["run_id"].as_str().expect("id").to_owned(),
            )
        })
        .collect();
    (runs, page["next_cursor"].as_str().map(str::to_owned))
}

#[tokio::test]
async fn paging_lists_every_run_once_in_order_while_runs_are_added() {
    let env = Env::new();
    let file = env.file("approval.yaml", APPROVAL);
    let workflow = env.rt.load_workflow(&file).await.expect("load");
    let mut before = Vec::new();
    for i in 0..60 {
        let id = format!("r{i:03}");
        env.rt
            .start(&workflow, json!({ "amount": 1 }), Some(id.clone()))
            .await
            .expect("start");
        env.rt.wait(&id).await.expect("wait");
        before.push(id);
    }
    let addr = serve(&env).await;
    for (n, (query, filtered)) in [
        ("", false),
        ("&status=success", false),
        ("&workflow=approval", false),
        ("&status=suspended", true),
        ("&workflow=nope", true),
    ]
    .into_iter()
    .enumerate()
    {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        let mut added = 0;
        loop {
            let path = match &cursor {
                Some(c) => format!("/runs?limit=7{query}&cursor={c}"),
                None => format!("/runs?limit=7{query}"),
            };
            let (status, body) = http(addr, "GET", &path, None).await;
            assert_eq!(status, 200, "{path}: {body}");
            let (runs, next) = page_of(&body);
            assert!(runs.len() <= 7, "{path}: {body}");
            seen.extend(runs);
            // A run added between pages is newer than every page so far (its id sorts after
            // every other, should it share their millisecond): it is never listed on a later
            // page, and nothing listed moves.
            let id = format!("z{n}-added-{added}");
            added += 1;
            env.rt
                .start(&workflow, json!({ "amount": 1 }), Some(id.clone()))
                .await
                .expect("start");
            env.rt.wait(&id).await.expect("wait");
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let ids: Vec<&str> = seen.iter().map(|(_, id)| id.as_str()).collect();
        let unique: HashSet<&str> = ids.iter().copied().collect();
        assert_eq!(
            unique.len(),
            ids.len(),
            "{query}: a run listed twice: {ids:?}"
        );
        let mut sorted = seen.clone();
        sorted.sort_by(|a, b| b.cmp(a));
        assert_eq!(sorted, seen, "{query}: newest first, ties by id");
        if filtered {
            assert!(ids.is_empty(), "{query}: {ids:?}");
        } else {
            for id in &before {
                assert!(unique.contains(id.as_str()), "{query}: {id} missing");
            }
            assert!(
                ids.iter().all(|id| !id.starts_with(&format!("z{n}-"))),
                "{query}: a run made after paging began is listed: {ids:?}"
            );
        }
    }
}
