//! The home and its store against hostile or careless use: run ids, the store's key layout and
//! format, content-addressed blobs, file modes, size and depth limits, and a damaged database.
//! Real sled directories, real components, and the real `weft` binary where a process matters.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use weft::ResumeRequest;
use weft::RunSummary;
use weft::internal::{Definition, NewRun, SledStore, Store};
use weft::{Runtime, RuntimeError};

use crate::cli::{INC, Out};
use crate::common::{Env, config, plugin_paths, sled_config};
use crate::server::{http, serve};

/// Runs `weft --home HOME STORE ARGS...` in `dir` to its end; `store` is `--store URL` or
/// nothing (the sled store in the home).
fn weft(dir: &Path, home: &Path, store: &[String], args: &[&str]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .env_remove("WEFT_HOME")
        .env_remove("WEFT_LOG")
        .env_remove("WEFT_STORE")
        .current_dir(dir)
        .arg("--home")
        .arg(home)
        .args(store)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run weft");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A temporary directory with a workflow file in it, for runs of the real binary.
struct Dir {
    dir: tempfile::TempDir,
    /// `--store URL` for every command on its home in postgres mode; none on sled.
    store: Vec<String>,
}

impl Dir {
    /// A directory whose home is on the tests' backend.
    fn new() -> Dir {
        let mut dir = Dir::sled();
        dir.store = crate::common::store_args_for(&dir.home());
        dir
    }

    /// A directory whose home is on the sled store whatever the tests' backend.
    fn sled() -> Dir {
        Dir {
            dir: tempfile::tempdir().expect("temp dir"),
            store: Vec::new(),
        }
    }

    /// The PostgreSQL store of its home in postgres mode.
    fn store_url(&self) -> Option<&str> {
        self.store.get(1).map(String::as_str)
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn file(&self, name: &str, yaml: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, plugin_paths(yaml)).expect("write workflow");
        path
    }

    fn weft(&self, args: &[&str]) -> Out {
        weft(self.dir.path(), &self.home(), &self.store, args)
    }
}

/// Ids that must be refused: empty, control characters, NUL, a leading dot, a separator, and
/// one far too long.
fn bad_ids() -> Vec<String> {
    vec![
        String::new(),
        "victim\u{0}zz".into(),
        "bell\u{7}".into(),
        "new\nline".into(),
        ".hidden".into(),
        "a/b".into(),
        "x".repeat(100_000),
    ]
}

#[tokio::test]
async fn s11_the_embedding_api_refuses_bad_run_ids_and_stores_nothing() {
    let env = Env::new();
    let w = env.load(&env.file("inc.yaml", INC)).await;
    for id in bad_ids() {
        let err = env
            .rt
            .start(&w, json!({"n": 1}), Some(id.clone()))
            .await
            .expect_err("a bad id is refused");
        assert!(
            matches!(err, RuntimeError::InvalidRunId(_)),
            "{id:?}: {err}"
        );
        assert!(err.to_string().contains("1 to 128 characters"), "{err}");
        for refused in [
            env.rt.show(&id).await.map(|_| ()),
            env.rt.cancel(&id).await,
            env.rt.watch(&id, 1).map(|_| ()),
            env.rt
                .resume(
                    &id,
                    ResumeRequest {
                        step: None,
                        label: None,
                        foreach_index: None,
                        data: json!({}),
                    },
                )
                .await,
            env.rt.recover(&id).await,
        ] {
            assert!(
                matches!(refused, Err(RuntimeError::InvalidRunId(_))),
                "{id:?}: {refused:?}"
            );
        }
    }
    assert!(env.rt.runs(None, None).expect("runs").is_empty());
    // The edges of the rule are accepted.
    for id in ["a", "run-1_v2.3", &"z".repeat(128)] {
        let got = env
            .rt
            .start(&w, json!({"n": 1}), Some(id.to_owned()))
            .await
            .expect("a good id");
        assert_eq!(got, id);
        env.rt.wait(id).await.expect("wait");
    }
}

#[test]
fn s11_the_cli_refuses_bad_run_ids_before_touching_the_home() {
    let dir = Dir::new();
    let wf = dir.file("inc.yaml", INC);
    let wf = wf.to_str().expect("utf-8 path");
    // An argument cannot hold a NUL; every other bad id can be typed.
    for id in bad_ids().into_iter().filter(|id| !id.contains('\0')) {
        for args in [
            vec!["run", wf, "--input", r#"{"n":1}"#, "--run-id", &id],
            vec!["show", &id],
            vec!["resume", &id],
            vec!["cancel", &id],
            vec!["watch", &id],
            vec!["run", "--from-step", "a", "--of", &id],
        ] {
            let out = dir.weft(&args);
            assert_eq!(out.code, 2, "{args:?}: {out:?}");
            assert!(out.stderr.contains("1 to 128 characters"), "{out:?}");
            assert!(!out.stderr.contains(&"x".repeat(1000)), "the id is cut");
        }
    }
    assert!(!dir.home().exists(), "a refused command created the home");
}

/// A valid id may start with `-`: every command takes it where it takes an id, not as an option.
#[test]
fn s11_a_run_id_that_starts_with_a_dash_can_be_given_to_every_command() {
    let dir = Dir::new();
    let wf = dir.file("inc.yaml", INC);
    let wf = wf.to_str().expect("utf-8 path");
    let out = dir.weft(&["run", wf, "--input", r#"{"n":1}"#, "--run-id", "-dash"]);
    assert_eq!(out.code, 0, "{out:?}");
    for args in [
        vec!["show", "-dash"],
        vec!["watch", "-dash"],
        vec!["run", "--from-step", "a", "--of", "-dash"],
    ] {
        let out = dir.weft(&args);
        assert_eq!(out.code, 0, "{args:?}: {out:?}");
    }
    let out = dir.weft(&["show", "-dash", "--json"]);
    assert!(out.stdout.contains(r#""run_id":"-dash""#), "{out:?}");
}

#[tokio::test]
async fn s11_the_http_api_answers_400_to_bad_run_ids() {
    let env = Env::new();
    env.file("inc.yaml", INC);
    let addr = serve(&env).await;
    for id in bad_ids() {
        let body = json!({"file": "inc.yaml", "input": {"n": 1}, "run_id": id});
        let (status, text) = http(addr, "POST", "/runs?wait=true", Some(body)).await;
        assert_eq!(status, 400, "{id:?}: {text}");
        let answer: Value = serde_json::from_str(&text).expect("a JSON answer");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|e| e.contains("invalid run id")),
            "{answer}"
        );
    }
    for path in [
        "/runs/victim%00zz",
        "/runs/bell%07",
        "/runs/%2Ehidden",
        "/runs/victim%00zz/events",
    ] {
        let (status, text) = http(addr, "GET", path, None).await;
        assert_eq!(status, 400, "{path}: {text}");
        assert!(text.contains("invalid run id"), "{path}: {text}");
    }
    for path in ["/runs/victim%00zz/cancel", "/runs/victim%00zz/resume"] {
        let (status, text) = http(addr, "POST", path, Some(json!({}))).await;
        assert_eq!(status, 400, "{path}: {text}");
    }
    assert!(env.rt.runs(None, None).expect("runs").is_empty());
}

fn summary(id: &str) -> RunSummary {
    RunSummary {
        run_id: id.into(),
        workflow_id: "w".into(),
        status: weft::RunStatus::Pending,
        created_at: 0,
        updated_at: 0,
        tags: Default::default(),
    }
}

#[test]
fn no_run_id_aliases_another_in_the_store_even_unchecked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SledStore::open(&dir.path().join("home"), 8).expect("open");
    // The store does not check ids: these bypass the rule on purpose.
    for id in ["victim", "victim\u{0}zz", "victim\u{0}"] {
        store
            .create_run(NewRun {
                summary: &summary(id),
                definition: &Definition::new(b"{}".to_vec()),
                plugins: &[],
                base: id.as_bytes(),
                fresh_id: false,
            })
            .expect("create");
    }
    store
        .append("victim", (1, 0), b"victim's record")
        .expect("append");
    for seq in 2..5u64 {
        store
            .append("victim\u{0}zz", (seq, 0), b"intruder")
            .expect("append");
        store
            .append("victim\u{0}", (seq + 10, 0), b"intruder")
            .expect("append");
    }
    let records = store.records("victim", (0, 0)).expect("records");
    assert_eq!(records, vec![((1, 0), b"victim's record".to_vec())]);
    assert_eq!(store.last_record("victim").expect("last"), Some((1, 0)));
    assert_eq!(
        store.base("victim").expect("base").as_deref(),
        Some(&b"victim"[..])
    );
    assert_eq!(
        store
            .records("victim\u{0}zz", (0, 0))
            .expect("records")
            .len(),
        3
    );
    assert_eq!(store.runs().expect("runs").len(), 3);
}

/// Rewrites the store format marker of a closed home's database (`None` removes it).
fn set_format_marker(home: &Path, marker: Option<&str>) {
    let db = sled::open(home.join("db")).expect("open the database directly");
    match marker {
        Some(m) => db.insert("weft-store-format", m.as_bytes()).map(|_| ()),
        None => db.remove("weft-store-format").map(|_| ()),
    }
    .expect("rewrite the marker");
    db.flush().expect("flush");
}

#[test]
fn a_home_of_another_store_format_is_refused_with_what_to_do() {
    // The format marker of sled's database in the home: sled only.
    let dir = Dir::sled();
    let wf = dir.file("inc.yaml", INC);
    let out = dir.weft(&["run", wf.to_str().expect("utf-8"), "--input", r#"{"n":1}"#]);
    assert_eq!(out.code, 0, "{out:?}");
    // A home written before formats were marked (runs, no marker), and one from a newer weft.
    for (marker, found) in [(None, "format 1"), (Some("99"), "format 99")] {
        set_format_marker(&dir.home(), marker);
        let out = dir.weft(&["runs"]);
        assert_eq!(out.code, 2, "{out:?}");
        assert!(out.stderr.contains(found), "{out:?}");
        assert!(out.stderr.contains("move the home aside"), "{out:?}");
        assert!(
            out.stderr.contains(&dir.home().display().to_string()),
            "{out:?}"
        );
    }
    set_format_marker(&dir.home(), Some(&weft::internal::STORE_FORMAT.to_string()));
    let out = dir.weft(&["runs"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.lines().count(), 1, "{out:?}");
}

/// A run's key of `kind` in the record tree, as `store::keys` lays it out.
fn run_key(kind: u8, id: &str) -> Vec<u8> {
    let mut k = vec![kind];
    k.extend_from_slice(&u32::try_from(id.len()).expect("short id").to_be_bytes());
    k.extend_from_slice(id.as_bytes());
    k
}

/// A big-endian u32 of `b` at `i`.
fn u32_at(b: &[u8], i: usize) -> usize {
    u32::from_be_bytes(b[i..i + 4].try_into().expect("4 bytes")) as usize
}

/// Puts the value under `key`, which format 6 keeps in the home's values files with only its
/// ref in sled (`store::values`: `2 | file u32 | offset u64 | len u32`), back into sled as
/// format 5 held it; returns it.
fn inline_value(tree: &sled::Tree, home: &Path, key: &[u8]) -> Vec<u8> {
    let v = tree.get(key).expect("read").expect("stored");
    if v[0] != 2 {
        return v.to_vec();
    }
    let offset = u64::from_be_bytes(v[5..13].try_into().expect("8 bytes")) as usize;
    let file = home
        .join("values")
        .join(format!("{:08}.values", u32_at(&v, 1)));
    let bytes = std::fs::read(file).expect("the values file");
    let value = bytes[offset..offset + u32_at(&v, 13)].to_vec();
    tree.insert(key, value.as_slice()).expect("inline");
    value
}

/// Takes run `id`'s first value out of the head of its first chunk of records, where format 5
/// keeps it (`store::keys::FIRST_AT`), leaving its records as an older format held them. A chunk
/// (`store::chunk`) is `1 | count u32 | (seq u64 | sub u32 | len u32 | bytes)*`, stored under its
/// first record's key; a record alone is its bytes.
fn take_first_value(tree: &sled::Tree, home: &Path, id: &str) -> Vec<u8> {
    let record_key = |at: &[u8]| [run_key(b't', id), at.to_vec()].concat();
    let first_key = record_key(&[0; 12]);
    inline_value(tree, home, &first_key);
    let v = tree
        .remove(first_key)
        .expect("read")
        .expect("a format 5 run has its first value at record (0, 0)");
    if v[0] != 1 {
        return v.to_vec();
    }
    let (count, len) = (u32_at(&v, 1), u32_at(&v, 17));
    let rest = &v[21 + len..];
    let value = if count == 2 {
        rest[16..16 + u32_at(rest, 12)].to_vec()
    } else {
        let count = u32::try_from(count - 1).expect("small").to_be_bytes();
        [&[1][..], &count, rest].concat()
    };
    tree.insert(record_key(&rest[..12]), value)
        .expect("records");
    v[21..21 + len].to_vec()
}

/// Rewrites run `id`'s records as `format` wrote them: their tracking events as maps of their
/// members, each with the run's id and its instant (format 8 writes arrays, with neither), in
/// MessagePack for format 7 and in JSON for format 6 and earlier, each value put back inline in
/// sled; the run's first value, kept among its records since format 5, stays as it is.
fn records_as(format: u32, tree: &sled::Tree, home: &Path, id: &str) {
    let rewrite = |bytes: &[u8]| -> Vec<u8> {
        if !(0x80..=0x8f).contains(&bytes[0]) {
            return bytes.to_vec();
        }
        let mut record: Value = rmp_serde::from_slice(bytes).expect("a MessagePack record");
        let at = record["at"].clone();
        let events: Vec<Value> = record["ev"]
            .as_array()
            .expect("format 8 events")
            .iter()
            .map(|e| {
                let mut event = json!({"seq": e[0], "run_id": id, "at": at, "type": e[1]});
                for (k, name) in [
                    (2, "path"),
                    (3, "foreach_index"),
                    (4, "iteration"),
                    (5, "data"),
                ] {
                    if !e[k].is_null() {
                        event[name] = e[k].clone();
                    }
                }
                event
            })
            .collect();
        let map = record.as_object_mut().expect("a map");
        map.remove("at");
        map.remove("ev");
        map.insert("events".into(), Value::Array(events));
        // The run has only started and suspended: no plain step end (format 8's short
        // `end`, which no older format wrote) is among its records.
        assert!(!map.contains_key("end"), "{record}");
        if format == 7 {
            rmp_serde::to_vec_named(&record).expect("MessagePack")
        } else {
            serde_json::to_vec(&record).expect("JSON")
        }
    };
    let keys: Vec<Vec<u8>> = tree
        .scan_prefix(run_key(b't', id))
        .keys()
        .map(|k| k.expect("key").to_vec())
        .collect();
    assert!(!keys.is_empty(), "run {id} has records");
    for key in keys {
        let v = inline_value(tree, home, &key);
        let rewritten = if v[0] == 1 {
            // A chunk: `1 | count u32 | (seq u64 | sub u32 | len u32 | bytes)*`.
            let mut out = v[..5].to_vec();
            let mut rest = &v[5..];
            while !rest.is_empty() {
                let len = u32_at(rest, 12);
                let record = rewrite(&rest[16..16 + len]);
                out.extend_from_slice(&rest[..12]);
                out.extend_from_slice(&u32::try_from(record.len()).expect("small").to_be_bytes());
                out.extend_from_slice(&record);
                rest = &rest[16 + len..];
            }
            out
        } else {
            rewrite(&v)
        };
        tree.insert(key, rewritten).expect("records");
    }
}

#[test]
fn a_run_suspended_in_an_older_format_resumes_once_its_home_is_marked_current() {
    // Format 3 kept a run's definition digest (`d`) and first state (`b`) apart; format 4 put
    // them in one value (`f`); format 5 keeps that value among the run's records, all of them
    // in sled; format 6 keeps them in values files; every format before 7 wrote records as
    // JSON, and before 8 each tracking event as a map. Sled only: the layout is sled's.
    for format in [3, 4, 5, 6, 7] {
        let dir = Dir::sled();
        std::fs::copy(weft_guests::TESTKIT, dir.dir.path().join("kit.wasm")).expect("copy");
        let wf = dir.file("ask.yaml", ASK);
        let out = dir.weft(&["run", wf.to_str().expect("utf-8"), "--run-id", "r1"]);
        assert_eq!(out.code, 3, "{out:?}");
        {
            // Rewrite the run as the older format wrote it.
            let db = sled::open(dir.home().join("db")).expect("open the database directly");
            let tree = db.open_tree("weft").expect("tree");
            records_as(format, &tree, &dir.home(), "r1");
            if format >= 5 {
                let first = [run_key(b't', "r1"), vec![0; 12]].concat();
                inline_value(&tree, &dir.home(), &first);
            } else if format == 4 {
                let first = take_first_value(&tree, &dir.home(), "r1");
                tree.insert(run_key(b'f', "r1"), first).expect("first");
            } else {
                let first = take_first_value(&tree, &dir.home(), "r1");
                let len = u32_at(&first, 0);
                assert_eq!(len, 64, "a sha256 in hex");
                tree.insert(run_key(b'd', "r1"), &first[4..4 + len])
                    .expect("digest");
                tree.insert(run_key(b'b', "r1"), &first[4 + len..])
                    .expect("base");
            }
            db.insert("weft-store-format", format.to_string().as_bytes())
                .expect("marker");
            // No format before 9 indexed runs for the listing.
            for k in tree.scan_prefix(b"c").keys() {
                tree.remove(k.expect("key")).expect("unindex");
            }
            db.remove("weft-runs-indexed").expect("unmark");
            db.flush().expect("flush");
            // All in sled now, as the older format held it: no values files.
            std::fs::remove_dir_all(dir.home().join("values")).expect("remove the values");
        }
        let out = dir.weft(&["resume", "r1", "--data", r#"{"ok":true}"#, "--json"]);
        assert_eq!(out.code, 0, "format {format}: {out:?}");
        assert_eq!(out.json()["status"], "success", "{out:?}");
        assert_eq!(
            out.json()["steps"]["after"]["output"]["resumed"]["ok"],
            true
        );
        // The events stored in the older format read back before those stored since.
        let out = dir.weft(&["watch", "r1"]);
        assert_eq!(out.code, 0, "format {format}: {out:?}");
        let events = out.json_lines();
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
        assert_eq!(
            kinds.first(),
            Some(&"run-started"),
            "format {format}: {events:?}"
        );
        assert!(
            kinds.contains(&"run-suspended") && kinds.contains(&"run-resumed"),
            "{kinds:?}"
        );
        assert_eq!(
            kinds.last(),
            Some(&"run-succeeded"),
            "format {format}: {events:?}"
        );
        for (n, e) in events.iter().enumerate() {
            assert_eq!(e["seq"], n + 1, "format {format}: {events:?}");
            assert_eq!(e["run_id"], "r1", "format {format}: {e}");
            assert!(e["at"].as_str().is_some_and(|at| at.ends_with('Z')), "{e}");
        }
        // A re-run reads the definition through the older format's key too.
        let out = dir.weft(&["run", "--from-step", "after", "--of", "r1", "--json"]);
        assert_eq!(out.code, 0, "format {format}: {out:?}");
        // Indexed when it was opened: the listing's pages hold the old run and the new one.
        let store = SledStore::open(&dir.home(), 8).expect("open the store");
        let page = weft::internal::RunsPage {
            workflow: None,
            after: None,
            tags: &[],
            limit: 10,
        };
        let paged = store.runs_page(&page).expect("page");
        assert_eq!(paged.len(), 2, "format {format}: {paged:?}");
        assert_eq!(paged, store.runs().expect("runs"), "format {format}");
        drop(store);
        let db = sled::open(dir.home().join("db")).expect("open the database directly");
        let marker = db.get("weft-store-format").expect("read").expect("marked");
        assert_eq!(
            &marker[..],
            weft::internal::STORE_FORMAT.to_string().as_bytes()
        );
        assert_eq!(&marker[..], b"10");
    }
}

#[tokio::test]
async fn a_fresh_home_is_marked_with_the_current_format() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");
    // The format marker of sled's database in the home: sled only (no `store`).
    drop(Runtime::open(&home, sled_config()).expect("open"));
    let db = sled::open(home.join("db")).expect("open the database directly");
    let marker = db.get("weft-store-format").expect("read").expect("marked");
    assert_eq!(
        &marker[..],
        weft::internal::STORE_FORMAT.to_string().as_bytes()
    );
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("list") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

#[tokio::test]
async fn s10_many_runs_store_a_component_once_outside_the_database() {
    let (config, url) = crate::common::config_and_url();
    let env = Env::with_config(config);
    let file = env.file("inc.yaml", INC);
    for n in 0..20 {
        // Loaded afresh each time, as `weft serve` loads a workflow per request.
        let w = env.load(&file).await;
        let id = env
            .rt
            .start(&w, json!({"n": n}), None)
            .await
            .expect("start");
        assert_eq!(
            env.rt.wait(&id).await.expect("wait").result,
            Some(json!({"n": n + 1}))
        );
    }
    assert_eq!(
        env.rt.host().files_hashed(),
        1,
        "the plugin file is hashed once"
    );
    let home = env.rt.home();
    let wasm = std::fs::read(weft_guests::TESTKIT).expect("read the plugin");
    let window = &wasm[wasm.len() / 2..wasm.len() / 2 + 4096];
    if let Some(url) = &url {
        // On PostgreSQL the blobs are rows of their own table, outside the runs' rows.
        let stored = crate::backend::query_bytes(url, "SELECT bytes FROM {s}.blobs");
        assert_eq!(stored.len(), 2, "one component and one definition");
        assert!(stored.contains(&wasm), "the component is a blob");
        for column in [
            "SELECT base FROM {s}.runs",
            "SELECT snapshot FROM {s}.runs WHERE snapshot IS NOT NULL",
            "SELECT record FROM {s}.records",
        ] {
            for bytes in crate::backend::query_bytes(url, column) {
                assert!(
                    !bytes.windows(window.len()).any(|w| w == window),
                    "{column} holds the component"
                );
            }
        }
        return;
    }
    let blobs = files_under(&home.join("blobs"));
    // One component and one definition, however many runs.
    assert_eq!(blobs.len(), 2, "{blobs:?}");
    let stored: Vec<Vec<u8>> = blobs
        .iter()
        .map(|b| std::fs::read(b).expect("read"))
        .collect();
    assert!(stored.contains(&wasm), "the component is a blob");
    // The component's bytes are nowhere in the database.
    for db_file in files_under(&home.join("db")) {
        let bytes = std::fs::read(&db_file).expect("read");
        assert!(
            !bytes.windows(window.len()).any(|w| w == window),
            "{} holds the component",
            db_file.display()
        );
    }
}

const ASK: &str = r#"
id: asks
plugins:
  kit: { wasm: "kit.wasm" }
steps:
  - { id: ask, plugin: kit, step: suspend, config: { payload: { question: "ship?" } } }
  - { id: after, plugin: kit, step: echo }
"#;

#[test]
fn s10_resume_uses_the_stored_component_after_the_file_changed() {
    let dir = Dir::new();
    let kit = dir.dir.path().join("kit.wasm");
    std::fs::copy(weft_guests::TESTKIT, &kit).expect("copy the plugin");
    let wf = dir.file("ask.yaml", ASK);
    let wf = wf.to_str().expect("utf-8");
    let out = dir.weft(&["run", wf, "--run-id", "r1", "--input", r#"{"x":1}"#]);
    assert_eq!(out.code, 3, "{out:?}");
    // Another component now sits at the path; then none at all.
    std::fs::copy(weft_guests::TEXT, &kit).expect("replace the plugin");
    let out = dir.weft(&["resume", "r1", "--data", r#"{"ok":true}"#, "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    std::fs::remove_file(&kit).expect("remove the plugin");
    let out = dir.weft(&["run", "--from-step", "after", "--of", "r1", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let blobs = match dir.store_url() {
        Some(url) => crate::backend::query_bytes(url, "SELECT bytes FROM {s}.blobs").len(),
        None => files_under(&dir.home().join("blobs")).len(),
    };
    assert_eq!(blobs, 2, "one component and one definition");
}

/// The permission bits of `path`.
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Every directory under `home` (itself included) is 0700 and everything else in it 0600.
fn assert_private(home: &Path) {
    let mut todo = vec![home.to_path_buf()];
    let mut files = 0;
    while let Some(dir) = todo.pop() {
        assert_eq!(mode(&dir), 0o700, "{}", dir.display());
        for entry in std::fs::read_dir(&dir).expect("list") {
            let path = entry.expect("entry").path();
            if std::fs::symlink_metadata(&path).expect("stat").is_dir() {
                todo.push(path);
            } else {
                assert_eq!(mode(&path), 0o600, "{}", path.display());
                files += 1;
            }
        }
    }
    assert!(files > 0, "nothing was checked");
}

#[tokio::test]
async fn a_home_and_everything_in_it_are_private_to_its_owner() {
    // The files of sled's database and blobs in the home: sled only (no `store`).
    let env = Env::with_config(sled_config());
    let rec = env.run(INC, json!({"n": 1})).await;
    assert_eq!(rec.result, Some(json!({"n": 2})));
    let home = env.rt.home();
    for dir in ["db", "blobs", "blobs/sha256"] {
        assert!(home.join(dir).is_dir(), "{dir}");
    }
    assert_private(home);
}

#[test]
fn the_binary_makes_its_home_cache_and_control_socket_private() {
    use std::io::BufRead;
    // The control socket of a home held by one process: sled only (no `--store`).
    let dir = Dir::sled();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .env_remove("WEFT_HOME")
        .env_remove("WEFT_LOG")
        .env_remove("WEFT_STORE")
        .arg("--home")
        .arg(dir.home())
        .args(["serve", "--addr", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weft serve");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = std::io::BufReader::new(stderr).lines();
    // `serving ...` is printed once the home is open and the control socket listens.
    let serving = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.starts_with("serving"));
    let checked = std::panic::catch_unwind(|| {
        assert!(serving, "weft serve did not start");
        assert!(dir.home().join("control.sock").exists());
        assert!(dir.home().join("cache").is_dir());
        assert_private(&dir.home());
    });
    child.kill().expect("stop weft serve");
    child.wait().expect("reap weft serve");
    if let Err(panic) = checked {
        std::panic::resume_unwind(panic);
    }
}

/// Default settings with small value limits.
fn small_limits() -> weft::RuntimeConfig {
    let mut config = config();
    config.max_input_bytes = 4096;
    config.max_output_bytes = 4096;
    config.max_state_bytes = 4096;
    config.max_resume_bytes = 1024;
    config
}

#[tokio::test]
async fn a_run_input_over_the_limit_is_refused_with_the_limit_named() {
    let env = Env::new();
    let w = env.load(&env.file("inc.yaml", INC)).await;
    // The default limit: 2 MiB.
    let big = json!({"n": 1, "pad": "x".repeat(2 << 20)});
    let err = env.rt.start(&w, big, None).await.expect_err("refused");
    assert!(matches!(err, RuntimeError::Limit(_)), "{err}");
    assert!(
        err.to_string()
            .contains("the limit is 2097152 (RuntimeConfig::max_input_bytes / --max-input-mib)"),
        "{err}"
    );
    let env = Env::with_config(small_limits());
    let w = env.load(&env.file("inc.yaml", INC)).await;
    let err = env
        .rt
        .start(&w, json!({"n": 1, "pad": "x".repeat(5000)}), None)
        .await
        .expect_err("refused");
    assert!(
        err.to_string()
            .starts_with("run input is 5016 bytes; the limit is 4096"),
        "{err}"
    );
    let addr = serve(&env).await;
    let body = json!({"file": "inc.yaml", "input": {"pad": "x".repeat(5000)}});
    let (status, text) = http(addr, "POST", "/runs", Some(body)).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("the limit is 4096"), "{text}");
    assert!(
        env.rt.runs(None, None).expect("runs").is_empty(),
        "nothing stored"
    );
    let ok = env.run(INC, json!({"n": 1, "pad": "x".repeat(4000)})).await;
    assert_eq!(ok.status, weft::RunStatus::Success);
}

#[test]
fn the_cli_refuses_an_input_over_max_input_mib() {
    let dir = Dir::new();
    let wf = dir.file("inc.yaml", INC);
    let input = dir.dir.path().join("input.json");
    std::fs::write(
        &input,
        json!({"n": 1, "pad": "x".repeat(1 << 20)}).to_string(),
    )
    .expect("write input");
    let args = [
        "--max-input-mib",
        "1",
        "run",
        wf.to_str().expect("utf-8"),
        "--input-file",
        input.to_str().expect("utf-8"),
    ];
    let out = dir.weft(&args);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("run input is 1048592 bytes; the limit is 1048576 (RuntimeConfig::max_input_bytes / --max-input-mib)"),
        "{out:?}"
    );
    let out = dir.weft(&[
        "--max-input-mib",
        "2",
        "run",
        args[3],
        "--input-file",
        args[5],
    ]);
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn the_cli_reads_an_input_file_only_when_regular_and_bounded() {
    let dir = Dir::new();
    let wf = dir.file("inc.yaml", INC);
    let wf = wf.to_str().expect("utf-8");
    // A device never ends: refused unread.
    let out = dir.weft(&["run", wf, "--input-file", "/dev/zero"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr
            .contains("cannot read --input-file /dev/zero: it is not a regular file"),
        "{out:?}"
    );
    // A (sparse) file over four times the input limit: refused unread.
    let big = dir.dir.path().join("big.json");
    std::fs::File::create(&big)
        .and_then(|f| f.set_len(5 << 20))
        .expect("sparse file");
    let out = dir.weft(&[
        "--max-input-mib",
        "1",
        "run",
        wf,
        "--input-file",
        big.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr
            .contains("it is larger than 4 MiB, the most weft reads (four times --max-input-mib)"),
        "{out:?}"
    );
    let runs = dir.weft(&["runs"]);
    assert_eq!(runs.code, 0, "{runs:?}");
    assert!(runs.stdout.trim().is_empty(), "nothing ran: {runs:?}");
}

#[tokio::test]
async fn a_step_output_over_the_limit_fails_the_step_with_output_limit_untried_again() {
    let env = Env::with_config(small_limits().with_max_input_bytes(1 << 20));
    let rec = env
        .run(
            r#"
id: big
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: e, plugin: kit, step: echo, retry: { attempts: 3 } }
"#,
            json!({"pad": "x".repeat(4000), "more": "y".repeat(100)}),
        )
        .await;
    assert_eq!(rec.status, weft::RunStatus::Failed);
    let error = rec.error.expect("an error");
    assert_eq!(error.code, "output-limit");
    assert!(
        error.message.contains("step e: its output is 4120 bytes; the limit is 4096 (RuntimeConfig::max_output_bytes / --max-output-mib)"),
        "{}",
        error.message
    );
    assert_eq!(rec.steps["e"].attempts, Some(1), "never retried");
    assert_eq!(rec.steps["e"].output, None);
}

#[tokio::test]
async fn a_patch_that_grows_the_state_over_the_limit_fails_the_step_and_is_dropped() {
    let env = Env::with_config(small_limits());
    let yaml = format!(
        r#"
id: grows
plugins:
  kit: {{ wasm: "{{testkit}}" }}
steps:
  - {{ id: small, plugin: kit, step: set-state, config: {{ patches: [{{ keep: 1 }}] }} }}
  - {{ id: big, plugin: kit, step: set-state, config: {{ patches: [{{ a: "{a}" }}, {{ b: "{b}" }}] }} }}
"#,
        a = "a".repeat(2500),
        b = "b".repeat(2500),
    );
    let rec = env.run(&yaml, json!({})).await;
    assert_eq!(rec.status, weft::RunStatus::Failed, "{rec:?}");
    let error = rec.error.expect("an error");
    assert_eq!(error.code, "output-limit");
    assert!(error.message.starts_with("step big: the state after its patches is 5024 bytes; the limit is 4096 (RuntimeConfig::max_state_bytes / --max-state-mib)"), "{}", error.message);
    // The patch was dropped: the state is what the first step left.
    assert_eq!(rec.state, json!({"keep": 1}));
    // What is stored says the same.
    let stored = env.rt.show(&rec.run_id).await.expect("show");
    assert_eq!(stored.state, json!({"keep": 1}));
    assert_eq!(
        stored.error.map(|e| e.code).as_deref(),
        Some("output-limit")
    );
}

#[tokio::test]
async fn resume_data_over_the_limit_is_refused_and_the_run_stays_suspended() {
    let env = Env::with_config(small_limits());
    let file = env.file("ask.yaml", &ASK.replace("\"kit.wasm\"", "\"{testkit}\""));
    let w = env.load(&file).await;
    let id = env.rt.start(&w, json!({}), None).await.expect("start");
    assert_eq!(
        env.rt.wait(&id).await.expect("wait").status,
        weft::RunStatus::Suspended
    );
    let request = |data: Value| ResumeRequest {
        step: None,
        label: None,
        foreach_index: None,
        data,
    };
    let err = env
        .rt
        .resume(&id, request(json!({"pad": "x".repeat(2000)})))
        .await
        .expect_err("refused");
    assert!(
        err.to_string().starts_with("resume data is 2010 bytes; the limit is 1024 (RuntimeConfig::max_resume_bytes / --max-resume-mib)"),
        "{err}"
    );
    assert_eq!(
        env.rt.show(&id).await.expect("show").status,
        weft::RunStatus::Suspended
    );
    env.rt
        .resume(&id, request(json!({"ok": true})))
        .await
        .expect("resume");
    assert_eq!(
        env.rt.wait(&id).await.expect("wait").status,
        weft::RunStatus::Success
    );
}

/// `{"a": {"a": ... 1}}`, `levels` objects deep, as JSON text.
fn nested_object(levels: usize) -> String {
    format!("{}1{}", r#"{"a": "#.repeat(levels), "}".repeat(levels))
}

const CONTEXTS: &str = r#"
id: deep
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: c1, plugin: kit, step: context }
  - { id: c2, plugin: kit, step: context }
"#;

#[tokio::test]
async fn a_step_output_nested_too_deep_fails_with_output_limit_and_the_run_reads_back() {
    let env = Env::new();
    // `context` returns its input one object deeper: 63 levels become 64 (the most allowed),
    // then 65.
    let input: Value = serde_json::from_str(&nested_object(63)).expect("parse");
    let rec = env.run(CONTEXTS, input).await;
    assert_eq!(rec.status, weft::RunStatus::Failed, "{:?}", rec.error);
    assert_eq!(rec.steps["c1"].status, weft::StepStatus::Success);
    let error = rec.error.expect("an error");
    assert_eq!(
        (error.code.as_str(), error.step.as_str()),
        ("output-limit", "c2")
    );
    assert!(
        error
            .message
            .contains("step c2: its output nests deeper than 64 levels"),
        "{}",
        error.message
    );
    let shown = env
        .rt
        .show(&rec.run_id)
        .await
        .expect("show reads the run back");
    assert_eq!(shown.steps["c1"].output, rec.steps["c1"].output);

    // A native step returning a value 124 deep, as the issue found.
    env.rt.register(
        "deep",
        weft::NativeStep::new(|_| async {
            let deep: Value = serde_json::from_str(&nested_object(124)).unwrap_or_default();
            Ok(weft::StepOutcome::Done(deep))
        }),
    );
    let file = env.file(
        "native.yaml",
        "id: n\nsteps:\n  - { id: d, native: deep }\n",
    );
    let w = env
        .rt
        .load_workflow(&file)
        .await
        .expect("load the workflow");
    let id = env.rt.start(&w, json!({}), None).await.expect("start");
    let rec = env.rt.wait(&id).await.expect("wait");
    let error = rec.error.expect("an error");
    assert_eq!(error.code, "output-limit", "{}", error.message);
    env.rt.show(&id).await.expect("show reads the run back");
}

#[tokio::test]
async fn a_map_building_a_value_too_deep_fails_and_the_run_reads_back() {
    let env = Env::new();
    let rec = env
        .run(
            r#"
id: deepmap
steps:
  - map: { id: m, expr: "reduce range(127) as $i (0; [.])" }
"#,
            json!({}),
        )
        .await;
    assert_eq!(rec.status, weft::RunStatus::Failed, "{:?}", rec.error);
    let error = rec.error.expect("an error");
    assert!(
        error.message.contains("nests deeper than 64 levels"),
        "{}",
        error.message
    );
    let shown = env
        .rt
        .show(&rec.run_id)
        .await
        .expect("show reads the run back");
    assert_eq!(shown.status, weft::RunStatus::Failed);
}

#[tokio::test]
async fn a_run_input_nested_too_deep_is_refused() {
    let env = Env::new();
    let w = env.load(&env.file("inc.yaml", INC)).await;
    let deep: Value = serde_json::from_str(&nested_object(65)).expect("parse");
    let err = env.rt.start(&w, deep, None).await.expect_err("refused");
    assert!(
        err.to_string()
            .contains("run input nests deeper than 64 levels"),
        "{err}"
    );
}

#[test]
fn a_run_of_the_deepest_chain_of_nested_workflow_files_succeeds_and_shows_from_a_new_process() {
    // The deepest chain the loader accepts: the top file and MAX_FILE_NESTING nested ones.
    let leaf = weft::internal::MAX_FILE_NESTING + 1;
    let dir = Dir::new();
    dir.file(
        &format!("w{leaf}.yaml"),
        &format!(
            r#"
id: w{leaf}
plugins:
  kit: {{ wasm: "{{testkit}}" }}
steps:
  - {{ id: leaf, plugin: kit, step: inc }}
"#
        ),
    );
    for i in (1..leaf).rev() {
        dir.file(
            &format!("w{i}.yaml"),
            &format!(
                "id: w{i}\nsteps:\n  - workflow: {{ id: n{i}, file: w{}.yaml }}\n",
                i + 1
            ),
        );
    }
    let top = dir.dir.path().join("w1.yaml");
    let out = dir.weft(&[
        "run",
        top.to_str().expect("utf-8"),
        "--run-id",
        "deep",
        "--input",
        r#"{"n": 1}"#,
        "--json",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let out = dir.weft(&["show", "deep", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let record: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON record");
    assert_eq!(record["status"], "success");
    assert_eq!(record["result"], json!({"n": 2}));
    let out = dir.weft(&["watch", "deep"]);
    assert_eq!(out.code, 0, "{out:?}");
}

/// A home holding 40 runs (a database of several segments), closed again.
fn home_with_runs(home: &Path) {
    let tokio = tokio::runtime::Runtime::new().expect("tokio");
    tokio.block_on(async {
        // A damaged sled database: sled only (no `store`).
        let rt = Runtime::open(home, sled_config()).expect("open");
        let file = home.with_file_name("inc.yaml");
        std::fs::write(&file, plugin_paths(INC)).expect("write workflow");
        let w = rt.load_workflow(&file).await.expect("load");
        for n in 0..40 {
            let input = json!({"n": n, "pad": "x".repeat(30_000)});
            let id = rt.start(&w, input, None).await.expect("start");
            rt.wait(&id).await.expect("wait");
        }
    });
    // Dropping tokio ends every task, so nothing holds the database any more.
    drop(tokio);
}

#[test]
fn a_truncated_database_is_refused_with_what_to_do_never_a_panic() {
    // sled's database file in the home: sled only.
    let dir = Dir::sled();
    let original = dir.dir.path().join("original");
    home_with_runs(&original);
    let db_len = std::fs::metadata(original.join("db/db"))
        .expect("stat")
        .len();
    const SEGMENT: u64 = 512 << 10;
    let mut refused = 0;
    let mut outcomes = Vec::new();
    for cut in (0..=db_len / SEGMENT)
        .flat_map(|k| [k * SEGMENT, k * SEGMENT + 51_712, k * SEGMENT + 300_000])
        .filter(|&cut| cut < db_len)
    {
        let home = dir.dir.path().join(format!("cut-{cut}"));
        copy_dir(&original, &home);
        let db = std::fs::OpenOptions::new()
            .write(true)
            .open(home.join("db/db"))
            .expect("open the db file");
        db.set_len(cut).expect("truncate");
        drop(db);
        let out = weft(dir.dir.path(), &home, &[], &["runs"]);
        assert!(
            !out.stderr.contains("panicked at") && !out.stderr.contains("RUST_BACKTRACE"),
            "cut at {cut}: {out:?}"
        );
        assert!(out.code == 0 || out.code == 2, "cut at {cut}: {out:?}");
        if out.code == 2 {
            refused += 1;
            assert!(
                out.stderr.contains(&home.display().to_string())
                    && out.stderr.contains("is damaged")
                    && out.stderr.contains("Restore the home from a backup"),
                "cut at {cut}: {out:?}"
            );
        }
        outcomes.push((cut, out.code, out.stderr.contains("sled gave up")));
    }
    assert!(refused > 0, "no cut was refused: {outcomes:?}");
}

/// Copies the directory `from` to `to` (which must not exist).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create");
    for entry in std::fs::read_dir(from).expect("list") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// A values file cut short (`store::values`) leaves the run whose records it held unreadable:
/// reading it names the file and what to do, never panics, and the listing still works.
#[test]
fn a_values_file_cut_short_is_refused_naming_the_file_never_a_panic() {
    // The values files beside sled's database: sled only.
    let dir = Dir::sled();
    let wf = dir.file("inc.yaml", INC);
    let wf = wf.to_str().expect("utf-8");
    let out = dir.weft(&["run", wf, "--input", r#"{"n":1}"#, "--run-id", "r1"]);
    assert_eq!(out.code, 0, "{out:?}");
    let file = dir.home().join("values").join("00000001.values");
    let len = std::fs::metadata(&file).expect("the values file").len();
    assert!(len > 0, "the run's records are in it");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .expect("open");
    f.set_len(len / 2).expect("truncate");
    drop(f);
    let out = dir.weft(&["show", "r1"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        !out.stderr.contains("panicked at") && !out.stderr.contains("RUST_BACKTRACE"),
        "{out:?}"
    );
    assert!(
        out.stderr.contains(&file.display().to_string())
            && out.stderr.contains("restore the home from a backup"),
        "{out:?}"
    );
    let out = dir.weft(&["runs"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("r1"), "{out:?}");
}
