//! `weft run` stopped by Ctrl-C (SIGINT) or SIGTERM: it exits 6 saying how to go on, and lets
//! the run go, so that `weft resume` takes it up at once and it ends as if never stopped.

use serde_json::{Value, json};

use crate::torture::{Home, Proc, run_weft, weft};

/// Naps (long enough to be stopped during it), then ends with a result.
const NAP: &str = r#"
id: nap
steps:
  - sleep: { id: nap, ms: 1500 }
  - map: { id: done, expr: '{ ok: true }' }
"#;

/// Sends `signal` (a name `kill` knows) to `proc`.
fn signal(proc: &Proc, signal: &str) {
    let sent = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(proc.child.id().to_string())
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill -{signal} failed");
}

#[test]
fn a_signal_to_weft_run_exits_6_with_how_to_go_on_and_a_resume_goes_on_at_once() {
    for sig in ["INT", "TERM"] {
        let files = Home::new();
        let nap = files.file("nap.yaml", NAP);
        let home = files.home();
        let id = format!("stopped-by-{}", sig.to_lowercase());
        let mut run = Proc::start(weft(
            &home,
            &["run", nap.to_str().expect("utf-8"), "--run-id", &id],
        ));
        run.expect_line("step-waiting nap");
        signal(&run, sig);
        let out = run.finish();
        assert_eq!(out.code, 6, "SIG{sig}: {out:?}");
        assert!(
            out.stderr.contains(&format!("weft resume {id}")),
            "SIG{sig}: {out:?}"
        );
        // Stored as it was: running, its nap not done.
        let out = run_weft(&home, &["show", &id, "--json"]);
        let record: Value = serde_json::from_str(out.stdout.trim()).expect("JSON record");
        assert_eq!(record["status"], json!("running"), "SIG{sig}: {record}");
        // Let go: the resume drives it to its end, nothing refused as driven elsewhere.
        let out = run_weft(&home, &["resume", &id, "--json"]);
        assert_eq!(out.code, 0, "SIG{sig}: {out:?}");
        let record: Value = serde_json::from_str(out.stdout.trim()).expect("JSON record");
        assert_eq!(
            record["result"],
            json!({ "ok": true }),
            "SIG{sig}: {record}"
        );
    }
}
