//! What a person at a terminal sees: each command's help (its own options apart from the global
//! ones, examples), the progress of a run (a live display on a terminal, lines on a pipe), a
//! failure said once, and a note while a plugin compiles.

use std::os::unix::ffi::OsStrExt;

use crate::cli::{Home, path_str, wait_for_socket};

/// Every command and subcommand, with its path of names (`["plugin", "compile"]`).
fn commands(cmd: &clap::Command, path: Vec<String>, all: &mut Vec<(Vec<String>, clap::Command)>) {
    // clap's own `help` subcommands are not weft's.
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let mut named = path.clone();
        named.push(sub.get_name().to_owned());
        if sub.has_subcommands() {
            commands(sub, named, all);
        } else {
            all.push((named, sub.clone()));
        }
    }
}

#[test]
fn every_command_has_examples_and_its_own_options_before_the_global_ones() {
    let mut root = weft::cli::command();
    let mut all = Vec::new();
    commands(&root, Vec::new(), &mut all);
    assert!(all.len() >= 14, "{} commands", all.len());
    let top = root.render_long_help().to_string();
    assert!(top.contains("Examples:\n  weft run "), "{top}");
    for (path, mut cmd) in all {
        let name = path.join(" ");
        let help = cmd.render_long_help().to_string();
        let examples = help
            .split_once("Examples:\n")
            .map(|(_, e)| e)
            .unwrap_or_else(|| panic!("`weft {name} --help` has examples: {help}"));
        assert!(
            examples
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("weft {name}"))
                    || l.contains(&format!(" {name} "))),
            "`weft {name}`'s examples use it: {examples}"
        );
        let needs_no_home = matches!(path[0].as_str(), "new" | "dev");
        if needs_no_home {
            // A command that opens no home offers none of the options about it.
            for hidden in ["--home", "--store", "--expr-steps", "--max-run-mib"] {
                assert!(
                    !help.contains(hidden),
                    "`weft {name} --help` offers {hidden}: {help}"
                );
            }
        } else {
            // The command's own options first, the global ones under their own heading.
            let own = help.find("Options:").expect("an Options heading");
            let global = help
                .find("Global options:")
                .unwrap_or_else(|| panic!("`weft {name} --help` has a Global options heading"));
            assert!(own < global, "{help}");
            assert!(help[global..].contains("--home <HOME>"), "{help}");
            assert!(!help[..global].contains("--home"), "{help}");
            // The short help leaves the limits out.
            let short = cmd.render_help().to_string();
            assert!(
                short.contains("--store") && !short.contains("--max-run-mib"),
                "{short}"
            );
        }
    }
}

/// A run of 120 foreach items ending in a small result; with `fail`, its last item fails.
fn foreach_file(home: &Home, fail: bool) -> std::path::PathBuf {
    let last = if fail { "{m: 1}" } else { "{n: 119}" };
    home.file(
        "each.yaml",
        &format!(
            "id: each\nplugins:\n  kit: {{ wasm: \"{{testkit}}\" }}\nsteps:\n  - map: {{ id: items, expr: '[range(119) | {{n: .}}] + [{last}]' }}\n  - foreach:\n      id: each\n      do: {{ id: inc, plugin: kit, step: inc }}\n  - map: {{ id: total, expr: '.steps.each | length' }}\n"
        ),
    )
}

/// Runs `weft ARGS...` on `home` with its stdout and stderr a terminal (a pseudo-terminal of 100
/// columns), as a person at a shell runs it; returns its exit code and all it wrote.
fn on_a_terminal(home: &Home, args: &[&str]) -> (i32, String) {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let name = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(name.as_bytes()));
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&name)
        .expect("open the terminal");
    let size = rustix::termios::Winsize {
        ws_row: 40,
        ws_col: 100,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    rustix::termios::tcsetwinsize(&tty, size).expect("size the terminal");
    let mut cmd = home.command(args);
    cmd.stdout(tty.try_clone().expect("dup")).stderr(tty);
    let mut child = cmd.spawn().expect("spawn weft");
    // Only the child holds the terminal now: reading ends when it has exited.
    drop(cmd);
    let mut master = std::fs::File::from(master);
    let mut written = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match std::io::Read::read(&mut master, &mut buf) {
            Ok(0) => break,
            Ok(n) => written.extend_from_slice(&buf[..n]),
            // EIO: every end of the terminal is closed.
            Err(_) => break,
        }
    }
    let status = child.wait().expect("wait for weft");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&written).into_owned(),
    )
}

#[test]
fn a_long_foreach_on_a_terminal_is_one_line_redrawn_and_a_line_per_event_on_a_pipe() {
    let home = Home::new();
    let file = foreach_file(&home, false);
    let (code, shown) = on_a_terminal(&home, &["run", path_str(&file)]);
    assert_eq!(code, 0, "{shown}");
    // One status line redrawn in place, the foreach's items as a bar ...
    assert!(
        shown.contains("\r\x1b[2K"),
        "the line is redrawn: {shown:?}"
    );
    assert!(shown.contains("/120 items"), "{shown:?}");
    assert!(shown.contains("3 done, 0 running in "), "{shown:?}");
    // ... and no line per event: a handful of lines in all, the record among them.
    assert!(!shown.contains("step-progress"), "{shown:?}");
    let lines = shown.lines().count();
    assert!(lines < 20, "{lines} lines on the terminal: {shown}");
    assert!(
        shown.contains("(each): success") && shown.contains("result: 120"),
        "{shown}"
    );

    // On a pipe: a line per event, as before, for scripts and logs.
    let out = home.weft(&["run", path_str(&file)]);
    assert_eq!(out.code, 0, "{out:?}");
    let progress = out
        .stderr
        .lines()
        .filter(|l| l.contains("step-progress each"))
        .count();
    assert_eq!(progress, 120, "{out:?}");
    assert!(!out.stderr.contains('\x1b'), "{out:?}");
}

#[test]
fn a_run_served_by_the_holder_of_the_home_is_shown_live_on_the_clients_terminal() {
    // The control socket of a home held by one process (S118): sled only.
    let home = Home::sled();
    let file = foreach_file(&home, false);
    let mut server = home.spawn(&["serve", "--addr", "127.0.0.1:0"]);
    wait_for_socket(&home, &mut server);
    let (code, shown) = on_a_terminal(&home, &["run", path_str(&file)]);
    assert_eq!(code, 0, "{shown}");
    assert!(
        shown.contains("\r\x1b[2K") && shown.contains("/120 items"),
        "{shown:?}"
    );
    assert!(!shown.contains("step-progress"), "{shown:?}");
    assert!(
        shown.contains("(each): success") && shown.contains("result: 120"),
        "{shown}"
    );
}

#[test]
fn a_failure_is_written_out_once() {
    let home = Home::new();
    let file = foreach_file(&home, true);
    let message = "\"n\" is a required property";
    let (code, shown) = on_a_terminal(&home, &["run", path_str(&file)]);
    assert_eq!(code, 1, "{shown}");
    assert_eq!(shown.matches(message).count(), 1, "{shown}");
    assert!(shown.contains("1 failed"), "{shown:?}");

    // On a pipe: the item's event says it, the step's and the run's name that line; the
    // record on stdout says it once.
    let out = home.weft(&["run", path_str(&file)]);
    assert_eq!(out.code, 1, "{out:?}");
    let saying: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("is a required property"))
        .collect();
    assert_eq!(saying.len(), 1, "{out:?}");
    let said = saying
        .first()
        .and_then(|l| l.get(1..4))
        .unwrap_or_default()
        .to_owned();
    for kind in ["step-failed each", "run-failed"] {
        let line = out
            .stderr
            .lines()
            .find(|l| l.contains(kind))
            .unwrap_or_default();
        assert!(
            line.ends_with(&format!("the failure of [{said}]")),
            "{line:?}: {out:?}"
        );
    }
    assert_eq!(out.stdout.matches(message).count(), 1, "{out:?}");
}

/// `section` as a custom section (id 0) named `weft-test-padding`, to append to a component.
fn custom_section(payload: &[u8]) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"weft-test-padding";
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(payload);
    let mut section = vec![0u8];
    leb(body.len(), &mut section);
    section.extend(body);
    section
}

#[test]
fn a_large_plugin_compiled_for_the_first_time_is_announced() {
    let home = Home::new();
    // testkit made as large as a Python plugin's component is, with padding no other test's
    // plugin has: it is not in the shared cache.
    let mut wasm = std::fs::read(weft_guests::TESTKIT).expect("read testkit");
    let mut padding = vec![0u8; 2 * 1024 * 1024];
    let unique = home.home().display().to_string();
    padding[..unique.len()].copy_from_slice(unique.as_bytes());
    wasm.extend(custom_section(&padding));
    let big = home.home().with_file_name("big.wasm");
    std::fs::write(&big, &wasm).expect("write big.wasm");
    let file = home.file(
        "big.yaml",
        "id: big\nplugins:\n  kit: { wasm: big.wasm }\nsteps:\n  - { id: a, plugin: kit, step: inc }\n",
    );
    let first = home.weft(&["run", path_str(&file), "--input", "{\"n\": 1}"]);
    assert_eq!(first.code, 0, "{first:?}");
    let note = first
        .stderr
        .lines()
        .find(|l| l.starts_with("note: compiling plugin "))
        .unwrap_or_else(|| panic!("the compile is announced: {first:?}"));
    assert!(
        note.contains("big.wasm (2.2 MiB) to native code, once"),
        "{note}"
    );
    // The next run loads it from the cache, in silence; a small plugin is never announced.
    let second = home.weft(&["run", path_str(&file), "--input", "{\"n\": 1}"]);
    assert_eq!(second.code, 0, "{second:?}");
    assert!(!second.stderr.contains("note: compiling"), "{second:?}");
}
