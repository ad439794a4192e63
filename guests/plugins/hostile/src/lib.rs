//! The hostile catalog: steps that misbehave on purpose, so tests can prove the host contains
//! them. Each misbehaviour is its own step:
//!
//! `spin`, `sleep`, `membomb`, `stack-overflow`, `panic`, `exit`, `not-json`, `big-result`,
//! `writer-flood`, `stdout-spam`, `fs-escape`, `env-peek`, `tcp-connect`, `http-get`,
//! `scribble`.
//!
//! This component imports `wasi:http` (for `http-get`), so the host must link wasi:http to
//! instantiate it at all.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "step-plugin",
});

use std::hint::black_box;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use exports::weft::plugin::steps::{Failure, Guest, Outcome, StepContext, StepInfo};
use serde_json::{Value, json};
use weft::plugin::writer;

/// Every step of the catalog, with its description.
const STEPS: &[(&str, &str)] = &[
    ("spin", "Loops forever without calling the host."),
    (
        "sleep",
        "Sleeps config.ms milliseconds (default 600000), then returns {}.",
    ),
    (
        "membomb",
        "Allocates and touches 1 MiB blocks until allocation fails.",
    ),
    ("stack-overflow", "Recurses without bound."),
    ("panic", "Panics with \"boom\"."),
    ("exit", "Calls std::process::exit(3)."),
    ("not-json", "Returns output that is not JSON."),
    ("big-result", "Returns a JSON string of 64 MiB."),
    (
        "writer-flood",
        "Writes the chunk 1 config.count times (default 1000000), then returns {written}.",
    ),
    (
        "stdout-spam",
        "Prints a 100-byte line config.lines times (default 1000000), then returns {}.",
    ),
    (
        "fs-escape",
        "Tries to leave the directory granted at config.dir (default /data): .., absolute \
         paths, a symlink pointing out, a write and listing /. Returns {attempts}.",
    ),
    ("env-peek", "Returns {env, args} as the guest sees them."),
    (
        "tcp-connect",
        "Opens a TCP connection to config.addr (default 127.0.0.1:80); returns {ok, error}.",
    ),
    (
        "http-get",
        "Sends an HTTP GET to config.url through wasi:http; returns {ok, status, error}. \
         config.timeout-ms sets the connect timeout.",
    ),
    (
        "scribble",
        "Reads what earlier instances could have left in this one's memory, then leaves its \
         own: bumps a counter in its data and writes every other page of a 4 MiB zeroed \
         static. Returns {counter, dirty_pages}: both 0 in a fresh instance.",
    ),
];

/// Words per 4 KiB page.
const PAGE_WORDS: usize = 4096 / 8;

/// A counter in the component's data: a fresh instance sees it at 0.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// 4 MiB of zeroed memory in the component's image (bss).
static SCRATCH: [AtomicU64; 1024 * PAGE_WORDS] = [const { AtomicU64::new(0) }; 1024 * PAGE_WORDS];

struct Hostile;

impl Guest for Hostile {
    fn describe() -> Vec<StepInfo> {
        STEPS
            .iter()
            .map(|(name, description)| StepInfo {
                name: (*name).to_string(),
                description: (*description).to_string(),
                input_schema: None,
                output_schema: None,
                suspend_schema: None,
                resume_schema: None,
                config_schema: None,
            })
            .collect()
    }

    fn execute(name: String, ctx: StepContext) -> Result<Outcome, Failure> {
        let config: Value = serde_json::from_str(&ctx.config).map_err(|e| Failure {
            message: format!("the config is not JSON: {e}"),
            code: Some("invalid-config".to_string()),
            retryable: false,
            details: None,
            tripwire: None,
        })?;
        match name.as_str() {
            "spin" => spin(),
            "sleep" => {
                std::thread::sleep(Duration::from_millis(uint(&config, "ms", 600_000)));
                Ok(done(&json!({})))
            }
            "membomb" => membomb(),
            "stack-overflow" => {
                let depth = recurse(black_box(0));
                Ok(done(&json!({"depth": depth})))
            }
            "panic" => panic!("boom"),
            "exit" => std::process::exit(3),
            "not-json" => Ok(Outcome::Done("this is not json".to_string())),
            "big-result" => Ok(Outcome::Done(big_string(64 << 20))),
            "writer-flood" => {
                let count = uint(&config, "count", 1_000_000);
                for _ in 0..count {
                    writer::write("1");
                }
                Ok(done(&json!({"written": count})))
            }
            "stdout-spam" => Ok(done(&stdout_spam(uint(&config, "lines", 1_000_000)))),
            "fs-escape" => {
                let dir = config.get("dir").and_then(Value::as_str).unwrap_or("/data");
                Ok(done(&fs_escape(dir)))
            }
            "env-peek" => {
                let env: serde_json::Map<String, Value> = std::env::vars()
                    .map(|(k, v)| (k, Value::String(v)))
                    .collect();
                let args: Vec<String> = std::env::args().collect();
                Ok(done(&json!({"env": env, "args": args})))
            }
            "tcp-connect" => {
                let addr = config
                    .get("addr")
                    .and_then(Value::as_str)
                    .unwrap_or("127.0.0.1:80");
                Ok(done(&match std::net::TcpStream::connect(addr) {
                    Ok(_) => json!({"ok": true, "error": null}),
                    Err(e) => json!({"ok": false, "error": e.to_string()}),
                }))
            }
            "http-get" => {
                let Some(url) = config.get("url").and_then(Value::as_str) else {
                    return Ok(done(&json!({
                        "ok": false,
                        "status": null,
                        "error": "config.url must be a string"
                    })));
                };
                let timeout = config.get("timeout-ms").and_then(Value::as_u64);
                Ok(done(&match http::get(url, timeout) {
                    Ok(status) => json!({"ok": true, "status": status, "error": null}),
                    Err(e) => json!({"ok": false, "status": null, "error": e}),
                }))
            }
            "scribble" => Ok(done(&scribble())),
            other => Err(Failure {
                message: format!("no step named {other:?}"),
                code: Some("unknown-step".to_string()),
                retryable: false,
                details: None,
                tripwire: None,
            }),
        }
    }
}

fn done(value: &Value) -> Outcome {
    Outcome::Done(value.to_string())
}

/// A non-negative integer from config, or the default.
fn uint(config: &Value, key: &str, default: u64) -> u64 {
    config.get(key).and_then(Value::as_u64).unwrap_or(default)
}

fn spin() -> ! {
    let mut counter: u64 = 0;
    loop {
        counter = black_box(counter.wrapping_add(1));
    }
}

fn membomb() -> ! {
    const MIB: usize = 1 << 20;
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut block = vec![0u8; MIB];
        // Touch every page so the memory is really used.
        for i in (0..MIB).step_by(4096) {
            block[i] = 1;
        }
        blocks.push(black_box(block));
    }
}

/// The `scribble` step: counts the pages of [`SCRATCH`] an earlier instance left written,
/// then writes every other one: 512 separate regions, more than one reset scan reports.
fn scribble() -> Value {
    let counter = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dirty_pages = SCRATCH
        .chunks(PAGE_WORDS)
        .filter(|page| page.iter().any(|w| w.load(Ordering::Relaxed) != 0))
        .count();
    for page in SCRATCH.chunks(PAGE_WORDS).step_by(2) {
        page[0].store(0xA5A5_A5A5, Ordering::Relaxed);
        page[PAGE_WORDS - 1].store(0x5A5A_5A5A, Ordering::Relaxed);
    }
    json!({"counter": counter, "dirty_pages": dirty_pages})
}

/// Recursion that is not a tail call and that the optimiser cannot fold away.
fn recurse(depth: u64) -> u64 {
    let frame = black_box([depth; 32]);
    if black_box(depth) == u64::MAX {
        return frame[0];
    }
    recurse(black_box(depth + 1)).wrapping_add(frame[31])
}

/// The JSON text of a string of `len` 'a's.
fn big_string(len: usize) -> String {
    let mut text = String::with_capacity(len + 2);
    text.push('"');
    text.extend(std::iter::repeat_n('a', len));
    text.push('"');
    text
}

fn stdout_spam(lines: u64) -> Value {
    // 99 characters and the newline: 100 bytes per line.
    let line = "x".repeat(99);
    let mut out = std::io::stdout().lock();
    for written in 0..lines {
        if let Err(e) = writeln!(out, "{line}") {
            return json!({"written": written, "error": e.to_string()});
        }
    }
    match out.flush() {
        Ok(()) => json!({}),
        Err(e) => json!({"written": lines, "error": e.to_string()}),
    }
}

/// The first 100 characters of `text`.
fn head(text: &str) -> String {
    text.chars().take(100).collect()
}

fn fs_escape(dir: &str) -> Value {
    let dir = dir.trim_end_matches('/');
    let mut attempts = Vec::new();
    let mut record = |what: &str, path: &str, result: std::io::Result<Option<String>>| {
        attempts.push(match result {
            Ok(content) => json!({
                "what": what,
                "path": path,
                "ok": true,
                "error": null,
                "content": content.as_deref().map(head)
            }),
            Err(e) => json!({
                "what": what,
                "path": path,
                "ok": false,
                "error": e.to_string(),
                "content": null
            }),
        });
    };
    for (what, path) in [
        ("read-dotdot", format!("{dir}/../etc/passwd")),
        ("read-absolute", "/etc/passwd".to_string()),
        ("read-symlink", format!("{dir}/escape-link/passwd")),
    ] {
        record(what, &path, std::fs::read_to_string(&path).map(Some));
    }
    let path = format!("{dir}/new-file");
    record(
        "write",
        &path,
        std::fs::write(&path, "written by fs-escape").map(|()| None),
    );
    let listing = std::fs::read_dir("/").and_then(|entries| {
        let mut names = Vec::new();
        for entry in entries {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(Some(names.join("\n")))
    });
    record("read-dir-root", "/", listing);
    json!({"attempts": attempts})
}

/// An outbound HTTP GET through wasi:http/outgoing-handler.
mod http {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{Fields, Method, OutgoingRequest, RequestOptions, Scheme};

    /// Sends the request and waits for the response head; returns its status.
    pub fn get(url: &str, connect_timeout_ms: Option<u64>) -> Result<u16, String> {
        let (scheme, rest) = match url.split_once("://") {
            Some(("http", rest)) => (Scheme::Http, rest),
            Some(("https", rest)) => (Scheme::Https, rest),
            Some((other, rest)) => (Scheme::Other(other.to_string()), rest),
            None => return Err(format!("not an absolute URL: {url}")),
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest[i..].starts_with('/') => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_string()),
        };
        let request = OutgoingRequest::new(Fields::new());
        request
            .set_method(&Method::Get)
            .map_err(|()| "invalid method".to_string())?;
        request
            .set_scheme(Some(&scheme))
            .map_err(|()| "invalid scheme".to_string())?;
        request
            .set_authority(Some(authority))
            .map_err(|()| format!("invalid authority: {authority}"))?;
        request
            .set_path_with_query(Some(&path))
            .map_err(|()| format!("invalid path: {path}"))?;
        let options = connect_timeout_ms.map(|ms| {
            let options = RequestOptions::new();
            // A host that does not support the timeout just ignores it here.
            let _ = options.set_connect_timeout(Some(ms.saturating_mul(1_000_000)));
            options
        });
        let future =
            outgoing_handler::handle(request, options).map_err(|e| format!("refused: {e:?}"))?;
        future.subscribe().block();
        match future.get() {
            Some(Ok(Ok(response))) => Ok(response.status()),
            Some(Ok(Err(e))) => Err(format!("request failed: {e:?}")),
            Some(Err(())) => Err("the response was already taken".to_string()),
            None => Err("no response after waiting".to_string()),
        }
    }
}

export!(Hostile);
