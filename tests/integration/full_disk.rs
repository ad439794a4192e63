//! A full disk on a real 2 MiB tmpfs: commands fail in bounded time with a message naming the
//! disk and the home, what was started stays recoverable (S100, S101), and the home works again
//! once there is space. A damaged snapshot of sled is repaired by itself, and a damaged database
//! is reported in words a person can read.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use weft::RunStatus;
use weft::{Runtime, RuntimeError};

// A full disk under sled's database in the home: sled only, whatever the tests' backend.
use crate::rules::req;
use crate::torture::{
    Home, http, name_of, run_weft_sled as run_weft, serve_sled as serve, workflows_of,
};

/// A tmpfs mounted on a temporary directory, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` reads it), or says why not and gives
    /// `None` (mounting needs root or CAP_SYS_ADMIN).
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(out) if out.status.success() => Some(Tmpfs { dir }),
            Ok(out) => {
                eprintln!(
                    "skipped: cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("skipped: cannot run mount: {e}");
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The bytes still free.
    fn free(&self) -> u64 {
        let fs = rustix::fs::statvfs(self.path()).expect("statvfs");
        fs.f_bavail * fs.f_frsize
    }

    /// Fills the disk until only `leave` bytes are free.
    fn fill(&self, leave: u64) {
        let filler = self.filler();
        let mut size = std::fs::metadata(&filler).map(|m| m.len()).unwrap_or(0);
        size += self.free().saturating_sub(leave);
        // A file of zeros written out (a sparse one would take no space).
        let zeros = vec![0u8; 64 << 10];
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&filler)
            .expect("filler");
        let mut written = std::fs::metadata(&filler).map(|m| m.len()).unwrap_or(0);
        while written < size {
            let n = (size - written).min(zeros.len() as u64) as usize;
            if std::io::Write::write_all(&mut f, &zeros[..n]).is_err() {
                break; // full
            }
            written += n as u64;
        }
    }

    /// Frees everything [`Tmpfs::fill`] took.
    fn empty(&self) {
        let _ = std::fs::remove_file(self.filler());
    }

    fn filler(&self) -> PathBuf {
        self.path().join("filler")
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

const SMALL: &str = r#"
id: small
steps:
  - map: { id: a, expr: '{ n: 1 }' }
  - sleep: { id: nap, ms: 1 }
  - map: { id: b, expr: '{ n: (.steps.a.n + 1) }' }
"#;

/// Writes some 40 KiB a loop iteration (a sleep makes each its own transitions), 600 KiB in all.
const GROW: &str = r#"
id: grow
steps:
  - map: { id: zero, expr: '{ n: 0 }' }
  - loop:
      id: grow
      do-until: '.output.n >= 15'
      do:
        - sleep: { id: tick, ms: 1 }
        - map: { id: pad, expr: '{ n: (.input.n + 1), pad: ("x" * 4000) }' }
  - map: { id: done, expr: '{ n: .steps.grow.n }' }
"#;

/// A home on `disk` whose database exists and has been opened twice (sled takes its first log
/// segment on disk when it opens a database again).
fn prepared_home(disk: &Tmpfs, small: &Path) -> PathBuf {
    let home = disk.path().join("home");
    let out = run_weft(&home, &["run", small.to_str().expect("utf-8")]);
    assert_eq!(out.code, 0, "{out:?}");
    let out = run_weft(&home, &["runs"]);
    assert_eq!(out.code, 0, "{out:?}");
    home
}

/// A 2 MiB disk holding a prepared home, with [`SMALL`] and [`GROW`] written beside the home;
/// `None` where no tmpfs can be mounted.
struct FullDiskCase {
    disk: Tmpfs,
    files: Home,
    small: PathBuf,
    grow: PathBuf,
    home: PathBuf,
}

impl FullDiskCase {
    fn new() -> Option<FullDiskCase> {
        let disk = Tmpfs::mount("2m")?;
        let files = Home::new();
        let small = files.file("small.yaml", SMALL);
        let grow = files.file("grow.yaml", GROW);
        let home = prepared_home(&disk, &small);
        Some(FullDiskCase {
            disk,
            files,
            small,
            grow,
            home,
        })
    }
}

#[test]
fn s100_weft_run_on_a_full_disk_fails_cleanly_and_the_run_goes_on_once_there_is_space() {
    let Some(FullDiskCase {
        disk,
        files: _files,
        small,
        grow,
        home,
    }) = FullDiskCase::new()
    else {
        return;
    };
    let home_text = home.display().to_string();
    let out = run_weft(&home, &["run", small.to_str().expect("utf-8")]);
    assert_eq!(out.code, 0, "{out:?}");

    // Nothing free: the command fails at once, naming the disk and the home. Opening the home
    // made sled write a snapshot, and it left the file empty: read as corruption at the next
    // open, until weft removed such files.
    disk.fill(0);
    let out = run_weft(&home, &["run", small.to_str().expect("utf-8")]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("disk is full"), "{out:?}");
    assert!(out.stderr.contains(&home_text), "{out:?}");
    let unfinished = std::fs::read_dir(home.join("db"))
        .expect("the database directory")
        .flatten()
        .any(|e| e.file_name().to_string_lossy().ends_with(".generating"));
    assert!(
        unfinished,
        "sled left no unfinished snapshot this time: {out:?}"
    );

    // Room to start, not to finish: the run stops, stored, with how to go on.
    disk.empty();
    disk.fill(600 << 10);
    let out = run_weft(
        &home,
        &["run", grow.to_str().expect("utf-8"), "--run-id", "grow"],
    );
    assert_eq!(out.code, 6, "{out:?}");
    assert!(out.stderr.contains("disk is full"), "{out:?}");
    assert!(out.stderr.contains(&home_text), "{out:?}");
    assert!(out.stderr.contains("weft resume grow"), "{out:?}");

    // Full again, with a log left to replay: the home opens, its log kept and read as it is
    // (sled's own writes never fail for want of space, else its flush may hang for ever), so
    // what reads it works; what writes ends, naming the disk, and lets go of the home.
    disk.fill(0);
    let out = run_weft(&home, &["runs"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("grow"), "{out:?}");
    let ended = out
        .stdout
        .lines()
        .find(|l| l.contains("small") && l.contains("success"))
        .and_then(|l| l.split_whitespace().next())
        .expect("an ended run of small")
        .to_owned();
    let out = run_weft(&home, &["show", "grow"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("running"), "{out:?}");
    // A watch of an ended run prints its events and ends.
    let out = run_weft(&home, &["watch", &ended]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("run-succeeded"), "{out:?}");
    let out = run_weft(&home, &["resume", "grow"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("disk is full"), "{out:?}");
    assert!(out.stderr.contains(&home_text), "{out:?}");

    // Space again: the home opens, and the run goes on to its result.
    disk.empty();
    let out = run_weft(&home, &["resume", "grow", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let record: Value = serde_json::from_str(out.stdout.trim()).expect("JSON record");
    assert_eq!(record["result"], json!({ "n": 15 }), "{record}");
    let out = run_weft(&home, &["run", small.to_str().expect("utf-8")]);
    assert_eq!(out.code, 0, "{out:?}");
}

/// A watch that begins after this process stopped driving a run (its store failed under it)
/// ends: nothing here will send that run's events any more. It used to wait for ever, and
/// `weft run` hung when its run stopped before it began to follow the run's events.
#[tokio::test(flavor = "multi_thread")]
async fn s100_a_watch_of_a_run_stopped_by_a_full_disk_ends() {
    let Some(case) = FullDiskCase::new() else {
        return;
    };
    case.disk.fill(600 << 10);
    let rt = Runtime::open(&case.home, crate::common::sled_config()).expect("open the home");
    let workflow = rt.load_workflow(&case.grow).await.expect("load");
    let id = rt
        .start(&workflow, json!({}), None)
        .await
        .expect("room to start");
    let stopped = rt.wait(&id).await;
    assert!(
        matches!(stopped, Err(RuntimeError::Halted { .. })),
        "{stopped:?}"
    );
    let mut events = rt.watch_settled(&id, 1).expect("watch");
    // The stored events, then the end; the timeout only turns a hang into a failure.
    let ended = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        let mut n = 0;
        while events.recv().await.is_some() {
            n += 1;
        }
        n
    })
    .await;
    assert!(
        ended.as_ref().is_ok_and(|n| *n > 0),
        "the watch of a stopped run never ended: {ended:?}"
    );
    drop(rt);
}

/// Suspends, then, once resumed, runs [`GROW`] (written beside it as `grow.yaml`).
const SUSPEND_THEN_GROW: &str = r#"
id: suspend-then-grow
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: approve, plugin: kit, step: suspend }
  - workflow: { id: grow, file: grow.yaml }
"#;

/// A resume applied before the disk filled up answers with the full disk, once: the caller of
/// `resume_and_wait` used to ask again when the run's actor stopped, and that second resume was
/// refused as if nothing were suspended, hiding the cause.
#[tokio::test(flavor = "multi_thread")]
async fn s100_resume_and_wait_of_a_run_stopped_by_a_full_disk_reports_the_full_disk() {
    let Some(case) = FullDiskCase::new() else {
        return;
    };
    let suspending = case.files.file("suspend-then-grow.yaml", SUSPEND_THEN_GROW);
    let rt = Runtime::open(&case.home, crate::common::sled_config()).expect("open the home");
    let workflow = rt.load_workflow(&suspending).await.expect("load");
    let first = rt
        .start_and_wait(&workflow, json!({}), None)
        .await
        .expect("room to start");
    assert_eq!(first.status, RunStatus::Suspended, "{first:?}");
    case.disk.fill(600 << 10);
    let stopped = rt
        .resume_and_wait(&first.run_id, req(None, None, None, json!({})))
        .await;
    match &stopped {
        Err(e @ RuntimeError::Halted { .. }) => {
            assert!(e.to_string().contains("disk is full"), "{e}");
        }
        other => panic!("not the full disk: {other:?}"),
    }
    drop(rt);
}

#[test]
fn s100_weft_serve_refuses_writes_on_a_full_disk_and_serves_again_once_there_is_space() {
    let Some(disk) = Tmpfs::mount("2m") else {
        return;
    };
    let files = Home::new();
    let small = files.file("small.yaml", SMALL);
    let grow = files.file("grow.yaml", GROW);
    let home = prepared_home(&disk, &small);
    let (mut server, addr) = serve(&home, &workflows_of(&files.home()));
    let start = |file: &Path, query: &str| {
        http(
            addr,
            "POST",
            &format!("/runs{query}"),
            &json!({ "file": name_of(file) }).to_string(),
        )
        .expect("an answer")
    };

    // Full: a new run is refused with 507 and the reason.
    disk.fill(0);
    let (status, body) = start(&small, "");
    assert_eq!(status, 507, "{body}");
    assert!(body.contains("disk is full"), "{body}");
    assert!(body.contains(&home.display().to_string()), "{body}");

    // Room to start, not to finish: the run is acknowledged, then stops.
    disk.empty();
    disk.fill(600 << 10);
    let (status, body) = start(&grow, "");
    assert_eq!(status, 201, "{body}");
    let id = serde_json::from_str::<Value>(&body).expect("JSON")["run_id"]
        .as_str()
        .expect("run_id")
        .to_owned();
    let line = server.expect_line(&format!("run {id} stopped"));
    assert!(line.contains("disk is full"), "{line}");

    // Space again: the same server starts runs, and the stopped one goes on.
    disk.empty();
    let (status, body) = start(&small, "?wait=true");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("JSON")["result"],
        json!({ "n": 2 })
    );
    let (status, body) =
        http(addr, "POST", &format!("/runs/{id}/resume"), "{}").expect("an answer");
    assert_eq!(status, 202, "{body}");
    let (status, events) =
        http(addr, "GET", &format!("/runs/{id}/events?follow=true"), "").expect("the run's events");
    assert_eq!(status, 200, "{events}");
    assert!(events.contains("\"run-succeeded\""), "{events}");
    let (_, record) = http(addr, "GET", &format!("/runs/{id}"), "").expect("record");
    let record: Value = serde_json::from_str(&record).expect("JSON");
    assert_eq!(record["result"], json!({ "n": 15 }), "{record}");
    server.kill();
}

/// sled's snapshot only indexes its log for a faster start: one with a flipped bit is dropped
/// (with a warning naming it), and sled reads its log whole; every run is there.
#[test]
fn a_flipped_bit_in_sleds_snapshot_is_repaired_by_itself_and_every_run_reads_back() {
    let files = Home::new();
    let small = files.file("small.yaml", SMALL);
    let home = files.home();
    for id in ["one", "two", "three"] {
        let out = run_weft(
            &home,
            &["run", small.to_str().expect("utf-8"), "--run-id", id],
        );
        assert_eq!(out.code, 0, "{out:?}");
    }
    let snapshot = std::fs::read_dir(home.join("db"))
        .expect("the database directory")
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("snap."))
        })
        .expect("sled wrote a snapshot");
    let mut bytes = std::fs::read(&snapshot).expect("read the snapshot");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x04;
    std::fs::write(&snapshot, &bytes).expect("write the snapshot");
    let mut cmd = crate::torture::weft_sled(&home, &["runs"]);
    cmd.env("WEFT_LOG", "warn");
    let out = crate::torture::Proc::start(cmd).finish();
    assert_eq!(out.code, 0, "{out:?}");
    for id in ["one", "two", "three"] {
        assert!(out.stdout.contains(id), "{id} is gone: {out:?}");
    }
    assert!(out.stderr.contains("weft removed it"), "{out:?}");
    assert!(
        out.stderr.contains(&snapshot.display().to_string()),
        "{out:?}"
    );
    let out = run_weft(&home, &["show", "two", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn a_damaged_database_is_reported_in_sentences_without_debug_dumps_or_colour_codes() {
    let files = Home::new();
    let small = files.file("small.yaml", SMALL);
    let home = files.home();
    let out = run_weft(&home, &["run", small.to_str().expect("utf-8")]);
    assert_eq!(out.code, 0, "{out:?}");
    // Two snapshot files sled takes for its newest, with no valid checksum: weft drops one
    // (below), not every file it finds.
    for name in ["snap.FFFFFFFFFFFFFFFF", "snap.FFFFFFFFFFFFFFFE"] {
        std::fs::write(home.join("db").join(name), b"this is not a snapshot").expect("write");
    }
    // With sled's own log on, to see that log lines are plain text too.
    let mut cmd = crate::torture::weft_sled(&home, &["runs"]);
    cmd.env("WEFT_LOG", "warn");
    let out = crate::torture::Proc::start(cmd).finish();
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains(&format!(
            "error: cannot open home {}: the database in {} is damaged (sled read corrupted data",
            home.display(),
            home.join("db").display()
        )),
        "{out:?}"
    );
    assert!(!out.stderr.contains("backtrace"), "{out:?}");
    // sled's own warning is there too, as plain text: stderr is not a terminal.
    assert!(out.stderr.contains("corrupt snapshot"), "{out:?}");
    assert!(!out.stderr.contains('\u{1b}'), "{out:?}");
}
