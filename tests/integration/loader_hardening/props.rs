//! The standing guard of issue 7, item 12, by property: generated and mutated workflow files
//! never make the loader panic, hang or grow without bound; generated jq expressions compile or
//! are refused, and evaluate or fail, within a small step budget; resume data of any shape never
//! corrupts a suspended run.
//!
//! Every property runs a fixed number of cases from a fixed seed ([`SEED`]), so CI sees the same
//! cases each time; a failure prints the seed and the smallest failing case it found.
//! `PROPTEST_CASES=5000 PROPTEST_RNG_SEED=N cargo test -p weft --test integration props::`
//! explores further. A case that does not end within [`CASE_LIMIT`] is a hang: the watchdog
//! prints it and ends the test process.

use std::fmt::Debug;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};
use serde_json::{Map, Value, json};
use weft::StepOutcome;
use weft::internal::MAX_ENTRIES;
use weft::internal::{Expr, ExprError, MAX_VALUE_DEPTH};
use weft::{EventKind, RunStatus};
use weft::{LoadedWorkflow, WorkflowError};
use weft::{NativeCall, NativeStep};
use weft::{Runtime, StoredEvent};

use crate::common::{config, config_for, plugin_paths};
use crate::rules::req;

/// The seed of every property unless `PROPTEST_RNG_SEED` names another.
const SEED: u64 = 712;

/// Cases per property (unless `PROPTEST_CASES` says otherwise): enough to reach every kind of
/// mutation and term many times, few enough for CI on two cores in a debug build.
const LOAD_CASES: u32 = 256;
const GEN_CASES: u32 = 256;
const EXPR_CASES: u32 = 500;
const RESUME_CASES: u32 = 40;

/// How long one case may take before it counts as a hang: far above what any case needs in a
/// debug build on a busy machine (the slowest, a YAML bomb at the reader's limits, takes
/// seconds).
const CASE_LIMIT: Duration = Duration::from_secs(120);

/// A runner for `cases` cases from [`SEED`] (or the environment's seed and cases); the seed.
fn runner(cases: u32) -> (TestRunner, u64) {
    let defaults = Config::default();
    let seed = match defaults.rng_seed {
        RngSeed::Fixed(seed) => seed,
        RngSeed::Random => SEED,
    };
    let cases = if std::env::var_os("PROPTEST_CASES").is_some() {
        defaults.cases
    } else {
        cases
    };
    let config = Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_iters: 256,
        ..defaults
    };
    (TestRunner::new(config), seed)
}

/// Fails the test with the smallest failing case and how to run it again.
fn verdict<T: Debug>(property: &str, seed: u64, result: Result<(), TestError<T>>) {
    if let Err(e) = result {
        panic!(
            "{property}: {}\n(seed {seed}: PROPTEST_RNG_SEED={seed} runs these cases again)",
            shorten(&e.to_string())
        );
    }
}

/// `text` cut to a few KiB, for messages.
fn shorten(text: &str) -> String {
    const KEEP: usize = 4000;
    match text.char_indices().nth(KEEP) {
        Some((at, _)) => format!("{}… ({} bytes in all)", &text[..at], text.len()),
        None => text.to_owned(),
    }
}

/// Ends the process, naming the case, when a case does not end within [`CASE_LIMIT`].
struct Watchdog {
    cases: Option<mpsc::Sender<String>>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    fn start(property: &'static str, seed: u64) -> Watchdog {
        let (cases, rx) = mpsc::channel::<String>();
        let thread = std::thread::spawn(move || {
            let mut case = String::from("(before the first case)");
            loop {
                match rx.recv_timeout(CASE_LIMIT) {
                    Ok(next) => case = next,
                    Err(RecvTimeoutError::Disconnected) => return,
                    Err(RecvTimeoutError::Timeout) => {
                        // Past the test harness's capture, which ending the process would lose.
                        let _ = writeln!(
                            std::io::stderr(),
                            "{property}: a case did not end within {CASE_LIMIT:?} (a hang; seed \
                             {seed}): {case}"
                        );
                        std::process::exit(101);
                    }
                }
            }
        });
        Watchdog {
            cases: Some(cases),
            thread: Some(thread),
        }
    }

    /// A new case starts: the clock starts again.
    fn case(&self, case: &impl Debug) {
        if let Some(cases) = &self.cases {
            let _ = cases.send(shorten(&format!("{case:?}")));
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.cases.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Whether `message` carries a Rust debug dump (`Nodes { nodes: 250001 }`) instead of words.
fn debug_debris(message: &str) -> bool {
    message.match_indices(" { ").any(|(at, _)| {
        let word = message[..at]
            .rsplit(|c: char| !c.is_alphanumeric())
            .next()
            .unwrap_or_default();
        let field = message[at + 3..]
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .next()
            .unwrap_or_default();
        word.starts_with(|c: char| c.is_ascii_uppercase())
            && message[at + 3 + field.len()..].starts_with(": ")
    })
}

// ---------------------------------------------------------------------------------------------
// The workflow loader

/// A workflow with every kind of entry, retry policies, schemas, a nested file and plugins.
const ALL_BLOCKS: &str = r#"
id: every-block
description: every kind of entry
input-schema: { type: object, properties: { n: { type: number, default: 1 } } }
state-schema: { type: object }
initial-state: { seen: 0 }
retry: { attempts: 2, delay-ms: 10, backoff: 2.0, max-delay-ms: 100 }
plugins:
  kit:
    wasm: "{testkit}"
    limits: { memory-mib: 64, timeout-ms: 5000, fuel: null }
    grants: { env: { A: b }, http: [ "api.example.com" ] }
steps:
  - id: first
    plugin: kit
    step: inc
    config: { by: 1, nested: { list: [1, "two", null, true] } }
    retry: { attempts: 3 }
    timeout-ms: 2000
  - parallel:
      id: both
      steps:
        - { id: left, plugin: kit, step: echo }
        - { id: right, plugin: kit, step: echo }
  - branch:
      id: route
      arms:
        - when: '.input.n > 1 and (.steps.first | type) == "object"'
          do: { id: big, plugin: kit, step: echo }
        - id: small
          when: 'try (.input.n <= 1) catch false'
          do:
            - { id: s1, plugin: kit, step: echo }
            - map: { id: s2, expr: '{ n: (.input.n // 0), xs: [range(3)] }' }
  - map: { id: list, expr: '[.steps.first, 1, "two"]' }
  - foreach:
      id: each
      concurrency: 2
      do: { id: item, plugin: kit, step: echo }
  - loop:
      id: again
      do-until: '.iteration >= 2 or (.output | length) > 0'
      max-iterations: 5
      do: { id: inner, plugin: kit, step: echo }
  - loop:
      id: while
      do-while: '.iteration < 1'
      do:
        - { id: w1, plugin: kit, step: echo }
  - sleep: { id: nap, ms: 1 }
  - sleep: { id: until, until: '"2020-01-01T00:00:00Z"' }
  - workflow: { id: sub, file: nested.yaml }
"#;

const NESTED: &str = r#"
id: nested
steps:
  - map: { id: twice, expr: '.input | { doubled: ((.n // 1) * 2) }' }
"#;

/// Lines a mutation may insert: valid and invalid YAML, at several indentations.
const YAML_LINES: &[&str] = &[
    "  - map: { id: extra, expr: '.' }",
    "  - { id: extra, plugin: kit, step: echo }",
    "  - { id: extra, native: nothing }",
    "  - { id: extra, plugin: nowhere, step: echo }",
    "  - { id: extra, plugin: kit, step: no-such-step }",
    "retry: { backoff: .nan }",
    "retry: { attempts: 0, backoff: -1 }",
    "retry: { delay-ms: 99999999999999999999999 }",
    "    retry: { attempts: 4294967296, max-delay-ms: 18446744073709551615 }",
    "    timeout-ms: -5",
    "    timeout-ms: 1e400",
    "    limits: [1, 2]",
    "    limits: { memory-mib: 1000000000000, timeout-ms: 0, fuel: -1 }",
    "    limits: { fuel: 18446744073709551616 }",
    "    grants: { dirs: [ { host: /tmp, guest: data } ] }",
    "    grants: { dirs: [ { host: ., guest: /data, mode: rwx } ] }",
    "    grants: { dirs: [ { host: ../../../../../../.., guest: /, mode: rw } ] }",
    "    grants: { env: { PATH: [1] }, http: [ \"*\", \"\", \"http://a b\" ] }",
    "    sha256: 0000000000000000000000000000000000000000000000000000000000000000",
    "    sha256: not-hex",
    "    wasm: /dev/zero",
    "    wasm: /",
    "    wasm: nested.yaml",
    "      concurrency: 0",
    "      concurrency: 18446744073709551616",
    "      max-iterations: 0",
    "      max-iterations: -1",
    "  - workflow: { id: again, file: ./sub/../nested.yaml }",
    "  - workflow: { id: self, file: workflow.yaml }",
    "  - workflow: { id: gone, file: /nonexistent/x.yaml }",
    "  - workflow: { id: dir, file: sub }",
    "  - map: { id: Caps And Spaces, expr: '.' }",
    "      id: a/b",
    "      id: ''",
    "id: \u{202e}évil\u{200b}",
    "id: [not, a, string]",
    "anchor: &a [*a]",
    "x: &x { y: *x }",
    "initial-state: &s { a: *s }",
    "initial-state: { a: &b [1, 2, 3], b: *b, c: *b, d: *b }",
    "    config: { <<: { a: 1 }, b: 2 }",
    "steps: []",
    "steps:",
    "steps: {}",
    "  -",
    "- - - -",
    "    do:",
    "        do: []",
    "  - loop: { id: l, do-while: 'true', do: [] }",
    "  - loop: { id: l, do-while: 'true', do-until: 'true', do: { id: x, plugin: kit } }",
    "  - sleep: { id: s }",
    "  - sleep: { id: s, ms: 1, until: 'now' }",
    "  - parallel: { id: p, steps: [] }",
    "  - branch: { id: b, arms: [] }",
    "  - foreach: { id: f, do: [] }",
    "---",
    "...",
    "%YAML 1.2",
    "%TAG ! tag:evil,2020:",
    "!!binary aGk=",
    "!include /etc/passwd",
    "? complex key",
    ": value",
    "\t- tab",
    "  - map: { id: deep, expr: 'reduce range(100000) as $i (0; [.])' }",
    "  - map: { id: spin, expr: 'def f: f; f' }",
    "initial-state: 1e400",
    "input-schema: { type: 12 }",
    "input-schema: { $ref: 'http://example.com/schema' }",
    "input-schema: { $ref: '#/definitions/a', definitions: { a: { $ref: '#/definitions/a' } } }",
    "input-schema: { pattern: '(a+)+$' }",
    "n: -0.0",
    "n: 0x7fffffffffffffffff",
    "n: .inf",
];

/// jq fragments a mutation may splice into the text, expressions included.
const JQ_FRAGMENTS: &[&str] = &[
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "|",
    ",",
    ".",
    "..",
    "$x",
    "$__loc__",
    "\"",
    "\\(",
    "'",
    "//",
    "?",
    "reduce ",
    " as $i ",
    "foreach ",
    "if ",
    " then ",
    " else ",
    " end",
    "try ",
    " catch ",
    "def f: f; ",
    "label $out | ",
    "break $out",
    "@base64d",
    "1e309",
    "-",
    "range(1e18)",
    "limit(3; repeat(1))",
    "halt_error",
    "env",
    "input",
    "$ENV",
    "getpath([\"a\"])",
    "..|numbers",
    "tojson|fromjson",
    "\"0x10\"|tonumber",
    "ltrimstr(\"x\")",
    "splits(\"a\")",
    "test(\"(a+)+$\")",
    "@sh",
    "@json",
    "import \"a\" as a; ",
    "include \"b\"; ",
    "\u{0}",
    "\u{feff}",
    "é",
    "𝔘",
    "\u{202e}",
    "'\"'\"'",
];

/// Characters a mutation may insert anywhere.
const ODD_CHARS: &[char] = &[
    '\0', '\t', '\r', '\u{85}', '\u{2028}', '\u{feff}', '\u{202e}', 'é', '𝔘', '💣', '"', '\'',
    '\\', ':', '-', '#', '&', '*', '!', '|', '>', '%', '@', '`', '[', ']', '{', '}', ',', '?',
];

#[derive(Debug, Clone)]
enum Mutation {
    DeleteLine(Index),
    DuplicateLine(Index),
    InsertLine(Index, &'static str),
    Splice(Index, &'static str),
    InsertChar(Index, char),
    /// Brackets nested this deep, in flow style.
    Nest(Index, usize, char),
    /// Block mappings nested this deep, as lines.
    NestLines(Index, usize),
    HugeNumber(Index, String),
    /// A scalar this many bytes long.
    HugeString(Index, usize),
    /// Anchors `levels` deep, each aliasing the one before `fanout` times, as the initial state.
    Bomb(usize, usize),
    /// Inside a jq expression: a fragment, brackets nested this deep, or a sum of this many terms.
    InExpr(Index, ExprChange),
}

#[derive(Debug, Clone)]
enum ExprChange {
    Fragment(&'static str),
    Nest(usize, char),
    Sum(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let nest = (
        any::<Index>(),
        1usize..400,
        prop::sample::select(&['(', '[', '{'][..]),
    )
        .prop_map(|(i, n, c)| Mutation::Nest(i, n, c));
    let huge = prop_oneof![
        "[0-9]{20,400}".prop_map(String::from),
        Just("1e99999".to_string()),
        Just("-9223372036854775809".to_string()),
        Just("18446744073709551616".to_string()),
    ];
    let long = prop_oneof![
        4 => 1usize..100_000,
        1 => Just(LONG_SCALAR),
    ];
    let in_expr = prop_oneof![
        prop::sample::select(JQ_FRAGMENTS).prop_map(ExprChange::Fragment),
        (1usize..1500, prop::sample::select(&['(', '['][..]))
            .prop_map(|(n, c)| ExprChange::Nest(n, c)),
        (1usize..3000).prop_map(ExprChange::Sum),
    ];
    prop_oneof![
        1 => any::<Index>().prop_map(Mutation::DeleteLine),
        1 => any::<Index>().prop_map(Mutation::DuplicateLine),
        2 => (any::<Index>(), prop::sample::select(YAML_LINES))
            .prop_map(|(i, l)| Mutation::InsertLine(i, l)),
        1 => (any::<Index>(), prop::sample::select(JQ_FRAGMENTS))
            .prop_map(|(i, f)| Mutation::Splice(i, f)),
        1 => (any::<Index>(), prop::sample::select(ODD_CHARS))
            .prop_map(|(i, c)| Mutation::InsertChar(i, c)),
        1 => nest,
        1 => (any::<Index>(), 1usize..200).prop_map(|(i, n)| Mutation::NestLines(i, n)),
        1 => (any::<Index>(), huge).prop_map(|(i, n)| Mutation::HugeNumber(i, n)),
        1 => (any::<Index>(), long).prop_map(|(i, n)| Mutation::HugeString(i, n)),
        1 => (1usize..7, 1usize..10).prop_map(|(l, f)| Mutation::Bomb(l, f)),
        3 => (any::<Index>(), in_expr).prop_map(|(i, c)| Mutation::InExpr(i, c)),
    ]
}

/// A scalar longer than an expression may be and than most of a file is: 3 MiB.
const LONG_SCALAR: usize = 3 << 20;

/// `text` with `m` applied.
fn apply(text: &str, m: &Mutation) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let at_char = |i: &Index, text: &str| {
        let bounds: Vec<usize> = text
            .char_indices()
            .map(|(b, _)| b)
            .chain([text.len()])
            .collect();
        bounds[i.index(bounds.len())]
    };
    let insert = |i: &Index, inserted: &str| {
        let at = at_char(i, text);
        format!("{}{inserted}{}", &text[..at], &text[at..])
    };
    match m {
        Mutation::DeleteLine(i) if !lines.is_empty() => {
            lines.remove(i.index(lines.len()));
        }
        Mutation::DuplicateLine(i) if !lines.is_empty() => {
            let at = i.index(lines.len());
            lines.insert(at, lines[at].clone());
        }
        Mutation::InsertLine(i, line) => lines.insert(i.index(lines.len() + 1), (*line).into()),
        Mutation::Splice(i, fragment) => return insert(i, fragment),
        Mutation::InsertChar(i, c) => return insert(i, &c.to_string()),
        Mutation::Nest(i, depth, open) => {
            let close = match open {
                '(' => ')',
                '[' => ']',
                _ => '}',
            };
            let inner = if *open == '{' { "a: 1" } else { "1" };
            let nested = format!(
                "{}{inner}{}",
                format!("{open}{}", if *open == '{' { "a: " } else { "" }).repeat(*depth),
                close.to_string().repeat(*depth)
            );
            return insert(i, &nested);
        }
        Mutation::NestLines(i, depth) => {
            let nested: Vec<String> = (0..*depth)
                .map(|d| format!("{}k{d}:", " ".repeat(2 * d)))
                .collect();
            let at = i.index(lines.len() + 1);
            lines.splice(at..at, nested);
        }
        Mutation::HugeNumber(i, n) => return insert(i, n),
        Mutation::HugeString(i, n) => return insert(i, &"x".repeat(*n)),
        Mutation::Bomb(levels, fanout) => {
            lines.push("initial-state:".into());
            lines.push(format!("  a0: &a0 [{}]", vec!["x"; *fanout].join(", ")));
            for l in 1..*levels {
                let refs = vec![format!("*a{}", l - 1); *fanout].join(", ");
                lines.push(format!("  a{l}: &a{l} [{refs}]"));
            }
        }
        Mutation::InExpr(i, change) => {
            // Just inside the opening quote of an expression.
            let starts: Vec<usize> = ["expr: '", "when: '", "until: '", "while: '"]
                .iter()
                .flat_map(|key| text.match_indices(key).map(|(at, k)| at + k.len()))
                .collect();
            if starts.is_empty() {
                return text.to_owned();
            }
            let at = starts[i.index(starts.len())];
            let inserted = match change {
                ExprChange::Fragment(f) => f.replace('\'', ""),
                ExprChange::Nest(n, open) => {
                    let close = if *open == '(' { ')' } else { ']' };
                    format!(
                        "{}1{} | ",
                        open.to_string().repeat(*n),
                        close.to_string().repeat(*n)
                    )
                }
                ExprChange::Sum(n) => format!("{} | ", vec!["1"; *n].join("+")),
            };
            return format!("{}{inserted}{}", &text[..at], &text[at..]);
        }
        _ => {}
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// The seeds: the repository's examples (their relative paths made absolute) and
/// [`ALL_BLOCKS`], each with the path it is loaded as, in `dir`.
fn seeds(dir: &Path) -> Vec<(PathBuf, String)> {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let examples = std::fs::canonicalize(&examples).expect("the examples directory");
    let mut seeds: Vec<(PathBuf, String)> = ["quickstart.yaml", "approval.yaml", "files.yaml"]
        .iter()
        .map(|name| {
            let text = std::fs::read_to_string(examples.join(name)).expect("read example");
            let text = text
                .replace(
                    "wasm: plugins/",
                    &format!("wasm: {}/plugins/", examples.display()),
                )
                .replace(
                    "host: ./data",
                    &format!("host: {}/data", examples.display()),
                );
            (dir.join(name), text)
        })
        .collect();
    std::fs::write(dir.join("nested.yaml"), NESTED).expect("write nested");
    std::fs::create_dir_all(dir.join("sub")).expect("mkdir sub");
    seeds.push((dir.join("workflow.yaml"), plugin_paths(ALL_BLOCKS)));
    seeds
}

/// How large a loaded graph may be, stored, for a file of `text_bytes` whose seed's graph was
/// `seed_graph` bytes: the seed's, plus a bounded amount per byte of text, plus what anchors
/// may expand to within the YAML reader's limit of 250 000 values (a few bytes each).
fn graph_limit(seed_graph: usize, text_bytes: usize) -> usize {
    seed_graph + 16 * text_bytes + 16 * 250_000
}

/// A file of `text_len` bytes either loaded into a bounded graph (at most [`MAX_ENTRIES`]
/// entries, at most `limit` bytes serialized) or was refused in words.
fn check_loaded(
    loaded: Result<LoadedWorkflow, WorkflowError>,
    text_len: usize,
    limit: usize,
) -> Result<(), TestCaseError> {
    match loaded {
        Ok(w) => {
            prop_assert!(weft::internal::entry_count(&w) <= MAX_ENTRIES);
            let definition = weft::internal::definition(&w)
                .map_err(|e| TestCaseError::fail(format!("the graph serializes: {e}")))?;
            prop_assert!(
                definition.bytes().len() <= limit,
                "the graph is {} bytes for a file of {text_len} (at most {limit})",
                definition.bytes().len()
            );
        }
        Err(e) => check_refusal(&e)?,
    }
    Ok(())
}

/// Checks one refusal of the loader: one short line, in words, with a fix.
fn check_refusal(e: &WorkflowError) -> Result<(), TestCaseError> {
    prop_assert!(
        e.message.len() < 4096,
        "a short message: {} bytes: {}",
        e.message.len(),
        e.message.chars().take(300).collect::<String>()
    );
    prop_assert!(!e.message.contains('\n'), "one line: {}", e.message);
    prop_assert!(!debug_debris(&e.message), "words, not a dump: {e}");
    prop_assert!(!e.message.contains("panicked"), "no panic: {e}");
    // A plugin's refusal carries its fix in its sentence, as the plugin host words it.
    prop_assert!(
        !e.fix.is_empty() || e.message.contains("plugin"),
        "a fix: {e}"
    );
    Ok(())
}

#[test]
fn mutated_workflow_files_never_panic_hang_or_grow_the_loader() {
    let tokio = tokio::runtime::Runtime::new().expect("tokio");
    let dir = tempfile::tempdir().expect("temp dir");
    let rt = Runtime::open(&dir.path().join("home"), config()).expect("open runtime");
    let seeds = seeds(dir.path());
    let mut seed_graphs = Vec::new();
    for (path, text) in &seeds {
        let loaded = tokio.block_on(rt.load_workflow_text(&path.display().to_string(), text));
        let graph = match loaded.map(|w| weft::internal::definition(&w)) {
            Ok(Ok(definition)) => definition.bytes().len(),
            other => panic!("the seed {} loads: {:?}", path.display(), other.err()),
        };
        seed_graphs.push(graph);
    }
    let (mut runner, seed) = runner(LOAD_CASES);
    let watchdog = Watchdog::start("the workflow loader", seed);
    let strategy = (
        prop::sample::select((0..seeds.len()).collect::<Vec<_>>()),
        prop::collection::vec(mutation(), 1..5),
    );
    let result = runner.run(&strategy, |(which, mutations)| {
        watchdog.case(&(which, &mutations));
        let (path, text) = &seeds[which];
        let text = mutations.iter().fold(text.clone(), |t, m| apply(&t, m));
        let loaded = tokio.block_on(rt.load_workflow_text(&path.display().to_string(), &text));
        check_loaded(
            loaded,
            text.len(),
            graph_limit(seed_graphs[which], text.len()),
        )
    });
    drop(watchdog);
    verdict("the workflow loader", seed, result);
}

/// Numbers a field of a generated file mostly holds.
const NUMBERS: &[&str] = &["1", "2", "3", "10"];

/// Numbers, and things where a number belongs, that a loader must not trust.
const HOSTILE_NUMBERS: &[&str] = &[
    "0",
    "-1",
    "2.5",
    "-0",
    "1e-400",
    "1e400",
    "-1e400",
    ".nan",
    ".inf",
    "-.inf",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999999",
    "0x10",
    "0o17",
    "1_000",
    "null",
    "~",
    "'5'",
    "true",
    "[]",
    "{}",
];

/// Ids the loader must refuse or tell apart (a generated entry mostly gets a fresh, valid one).
const HOSTILE_IDS: &[&str] = &[
    "''", "A", "'a b'", "a/b", "a.b", "é", "-", "_", "0", "steps", "input", "dup", "dup",
];

/// Paths a `file:` mostly names.
const PATHS: &[&str] = &["nested.yaml", "./sub/../nested.yaml"];

/// Paths a `wasm:` or `file:` may name that it should not: directories, devices, a pipe, a
/// huge file, a cycle, and paths that lead out of the directory.
const HOSTILE_PATHS: &[&str] = &[
    "workflow.yaml",
    "missing.yaml",
    "sub",
    ".",
    "/",
    "..",
    "../../../../../../../..",
    "/dev/zero",
    "/dev/null",
    "/proc/self/mem",
    "/etc/passwd",
    "pipe",
    "huge.yaml",
    "nested.yaml",
    "''",
    "\"\\0\"",
    "\"a\\u202eb\"",
];

/// Expressions an entry mostly holds.
const EXPRS: &[&str] = &[
    ".",
    ".input",
    "true",
    ".iteration >= 2",
    "\"2020-01-01T00:00:00Z\"",
];

/// Expressions that must be refused, or fail or end when run.
const HOSTILE_EXPRS: &[&str] = &[
    "def f: f; f",
    "reduce range(100000) as $i (0; [.])",
    "((((((((((1))))))))))",
    "halt",
    "env",
    "$ENV",
    "input",
    "\"0x10\" | tonumber",
    "{",
    "",
    "import \"a\" as a; .",
];

/// Values a `config:`, a state or a schema mostly holds.
const VALUES: &[&str] = &[
    "{}",
    "{ a: [1, { b: null }], c: 'x' }",
    "{ type: object, properties: { n: { type: number } } }",
];

/// Values a `config:`, a state or a schema should not hold.
const HOSTILE_VALUES: &[&str] = &[
    "[]",
    "null",
    "{ type: 12 }",
    "{ $ref: 'http://example.com/schema' }",
    "{ $ref: '#/definitions/a', definitions: { a: { $ref: '#/definitions/a' } } }",
    "{ pattern: '(a+)+$' }",
    "&v [1, *v]",
    "!!binary aGk=",
    "\"\\ud800\"",
    "1e400",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
];

/// One of `usual`; in a hostile file, now and then one of `hostile`.
fn pick(
    hostile_file: bool,
    usual: &'static [&'static str],
    hostile: &'static [&'static str],
) -> BoxedStrategy<&'static str> {
    if hostile_file {
        prop_oneof![
            8 => prop::sample::select(usual),
            1 => prop::sample::select(hostile),
        ]
        .boxed()
    } else {
        prop::sample::select(usual).boxed()
    }
}

/// An entry of a generated workflow; `id` is `None` for a fresh, valid one.
#[derive(Debug, Clone)]
struct GenEntry {
    id: Option<&'static str>,
    kind: GenKind,
}

#[derive(Debug, Clone)]
enum GenKind {
    Step {
        plugin: &'static str,
        step: &'static str,
        config: Option<&'static str>,
        retry: Option<Vec<(&'static str, &'static str)>>,
        timeout: Option<&'static str>,
    },
    Native(&'static str),
    Map(&'static str),
    Sleep(Option<&'static str>, Option<&'static str>),
    Workflow(&'static str),
    Parallel(Vec<GenEntry>),
    Branch(Vec<(&'static str, Option<&'static str>, Vec<GenEntry>)>),
    Foreach(Option<&'static str>, Vec<GenEntry>),
    Loop(
        &'static str,
        &'static str,
        Option<&'static str>,
        Vec<GenEntry>,
    ),
}

/// A generated workflow file: its top-level fields and its entries.
#[derive(Debug, Clone)]
struct GenFile {
    id: Option<&'static str>,
    description_bytes: usize,
    input_schema: Option<&'static str>,
    initial_state: Option<&'static str>,
    retry: Option<Vec<(&'static str, &'static str)>>,
    limits: Option<Vec<(&'static str, &'static str)>>,
    grants: Option<(&'static str, &'static str, &'static str, &'static str)>,
    other_plugin: Option<&'static str>,
    entries: Vec<GenEntry>,
}

fn some_of<T: Debug + Clone + 'static>(
    s: impl Strategy<Value = T>,
) -> impl Strategy<Value = Option<T>> {
    prop::option::weighted(0.4, s)
}

/// Up to three of `keys` with numbers, each key once (in a hostile file, now and then a key no
/// one knows or a number no one should use).
fn fields(
    hostile: bool,
    keys: &'static [&'static str],
) -> impl Strategy<Value = Vec<(&'static str, &'static str)>> {
    prop::collection::vec(
        (
            pick(hostile, keys, &["jitter"]),
            pick(hostile, NUMBERS, HOSTILE_NUMBERS),
        ),
        0..4,
    )
    .prop_map(|mut fields| {
        let mut seen = Vec::new();
        fields.retain(|(k, _)| {
            let first = !seen.contains(k);
            seen.push(*k);
            first
        });
        fields
    })
}

/// In a hostile file, one of `hostile` with probability `p`; else none.
fn now_and_then(
    hostile_file: bool,
    p: f64,
    hostile: &'static [&'static str],
) -> BoxedStrategy<Option<&'static str>> {
    if hostile_file {
        prop::option::weighted(p, prop::sample::select(hostile)).boxed()
    } else {
        Just(None).boxed()
    }
}

/// A fresh id (`None`), or in a hostile file now and then one to refuse.
fn gen_id(hostile: bool) -> BoxedStrategy<Option<&'static str>> {
    now_and_then(hostile, 0.05, HOSTILE_IDS)
}

/// At least one of `entry` (in a hostile file, now and then none).
fn gen_list(
    hostile: bool,
    entry: impl Strategy<Value = GenEntry> + Clone + 'static,
    most: usize,
) -> BoxedStrategy<Vec<GenEntry>> {
    let some = prop::collection::vec(entry, 1..most);
    if hostile {
        prop_oneof![12 => some, 1 => Just(Vec::new())].boxed()
    } else {
        some.boxed()
    }
}

fn gen_entries(h: bool) -> impl Strategy<Value = Vec<GenEntry>> {
    const RETRY: &[&str] = &["attempts", "delay-ms", "backoff", "max-delay-ms"];
    let step = (
        pick(h, &["kit"], &["nowhere", "''"]),
        pick(h, &["echo", "inc", "typed"], &["no-such-step", "''"]),
        some_of(pick(h, VALUES, HOSTILE_VALUES)),
        some_of(fields(h, RETRY)),
        some_of(pick(h, NUMBERS, HOSTILE_NUMBERS)),
    )
        .prop_map(|(plugin, step, config, retry, timeout)| GenKind::Step {
            plugin,
            step,
            config,
            retry,
            timeout,
        });
    let sleep = prop_oneof![
        6 => pick(h, NUMBERS, HOSTILE_NUMBERS).prop_map(|ms| GenKind::Sleep(Some(ms), None)),
        3 => pick(h, EXPRS, HOSTILE_EXPRS).prop_map(|until| GenKind::Sleep(None, Some(until))),
    ];
    let odd = prop_oneof![
        Just(GenKind::Sleep(None, None)),
        Just(GenKind::Sleep(Some("1"), Some("now"))),
        prop::sample::select(&["twice", "nothing", "''"][..]).prop_map(GenKind::Native),
    ];
    let usual = prop_oneof![
        6 => step,
        1 => Just(GenKind::Native("twice")),
        3 => pick(h, EXPRS, HOSTILE_EXPRS).prop_map(GenKind::Map),
        1 => sleep,
        1 => pick(h, PATHS, HOSTILE_PATHS).prop_map(GenKind::Workflow),
    ];
    let leaf = if h {
        prop_oneof![12 => usual, 1 => odd].boxed()
    } else {
        usual.boxed()
    };
    let entry = (gen_id(h), leaf).prop_map(|(id, kind)| GenEntry { id, kind });
    let tree = entry.prop_recursive(5, 48, 4, move |inner| {
        let list = gen_list(h, inner, 4);
        let arm_id = now_and_then(h, 0.05, HOSTILE_IDS);
        let kind = prop_oneof![
            list.clone().prop_map(GenKind::Parallel),
            prop::collection::vec((pick(h, EXPRS, HOSTILE_EXPRS), arm_id, list.clone()), 1..3)
                .prop_map(GenKind::Branch),
            (some_of(pick(h, NUMBERS, HOSTILE_NUMBERS)), list.clone())
                .prop_map(|(c, body)| GenKind::Foreach(c, body)),
            (
                pick(h, &["do-until", "do-while"], &["until", "while"]),
                pick(h, EXPRS, HOSTILE_EXPRS),
                some_of(pick(h, NUMBERS, HOSTILE_NUMBERS)),
                list
            )
                .prop_map(|(test, expr, max, body)| GenKind::Loop(test, expr, max, body)),
        ];
        (gen_id(h), kind).prop_map(|(id, kind)| GenEntry { id, kind })
    });
    gen_list(h, tree, 6)
}

/// A workflow file: a clean one, or one with now and then a hostile value anywhere.
fn gen_file() -> impl Strategy<Value = GenFile> {
    prop_oneof![gen_file_of(false), gen_file_of(true)]
}

fn gen_file_of(h: bool) -> impl Strategy<Value = GenFile> {
    const RETRY: &[&str] = &["attempts", "delay-ms", "backoff", "max-delay-ms"];
    const LIMITS: &[&str] = &["memory-mib", "timeout-ms", "fuel"];
    let grants = (
        pick(h, &["data"], HOSTILE_PATHS),
        pick(h, &["/data"], &["data", "/", "''", "/proc"]),
        pick(h, &["ro", "rw"], &["rwx", "''", "1"]),
        pick(
            h,
            &["[ \"api.example.com\" ]"],
            &["[ \"*\", \"\", \"http://a b\" ]", "{}"],
        ),
    );
    let shape = (
        gen_id(h),
        prop_oneof![8 => 0usize..100, 1 => 0usize..200_000],
        some_of(pick(h, VALUES, HOSTILE_VALUES)),
        some_of(pick(h, VALUES, HOSTILE_VALUES)),
        some_of(fields(h, RETRY)),
        some_of(fields(h, LIMITS)),
    );
    let other = now_and_then(h, 0.1, HOSTILE_PATHS);
    (shape, some_of(grants), other, gen_entries(h)).prop_map(
        |(
            (id, description_bytes, input_schema, initial_state, retry, limits),
            grants,
            other_plugin,
            entries,
        )| GenFile {
            id,
            description_bytes,
            input_schema,
            initial_state,
            retry,
            limits,
            grants,
            other_plugin,
            entries,
        },
    )
}

/// `expr` as a single-quoted YAML scalar.
fn quoted(expr: &str) -> String {
    format!("'{}'", expr.replace('\'', "''"))
}

/// `{ k: v, … }` of `fields`.
fn flow(fields: &[(&str, &str)]) -> String {
    let inner: Vec<String> = fields.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("{{ {} }}", inner.join(", "))
}

/// Entries as a YAML flow list, fresh ids counted by `next`.
fn render_entries(entries: &[GenEntry], next: &mut usize) -> String {
    let items: Vec<String> = entries.iter().map(|e| render_entry(e, next)).collect();
    format!("[{}]", items.join(", "))
}

fn render_entry(entry: &GenEntry, next: &mut usize) -> String {
    *next += 1;
    let id = entry.id.map_or_else(|| format!("e{next}"), str::to_owned);
    match &entry.kind {
        GenKind::Step {
            plugin,
            step,
            config,
            retry,
            timeout,
        } => {
            let mut f = vec![
                ("id".to_string(), id),
                ("plugin".into(), (*plugin).into()),
                ("step".into(), (*step).into()),
            ];
            if let Some(c) = config {
                f.push(("config".into(), (*c).into()));
            }
            if let Some(r) = retry {
                f.push(("retry".into(), flow(r)));
            }
            if let Some(t) = timeout {
                f.push(("timeout-ms".into(), (*t).into()));
            }
            let pairs: Vec<(&str, &str)> =
                f.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            flow(&pairs)
        }
        GenKind::Native(name) => flow(&[("id", &id), ("native", name)]),
        GenKind::Map(expr) => format!(
            "{{ map: {} }}",
            flow(&[("id", &id), ("expr", &quoted(expr))])
        ),
        GenKind::Sleep(ms, until) => {
            let until = until.map(quoted);
            let mut f = vec![("id", id.as_str())];
            if let Some(ms) = ms {
                f.push(("ms", ms));
            }
            if let Some(until) = &until {
                f.push(("until", until));
            }
            format!("{{ sleep: {} }}", flow(&f))
        }
        GenKind::Workflow(file) => {
            format!("{{ workflow: {} }}", flow(&[("id", &id), ("file", file)]))
        }
        GenKind::Parallel(steps) => {
            let steps = render_entries(steps, next);
            format!(
                "{{ parallel: {} }}",
                flow(&[("id", &id), ("steps", &steps)])
            )
        }
        GenKind::Branch(arms) => {
            let arms: Vec<String> = arms
                .iter()
                .map(|(when, arm_id, body)| {
                    let when = quoted(when);
                    // One entry stands alone; a list takes an id of its own (S107).
                    let (body, arm_id) = match (&body[..], arm_id) {
                        ([one], None) => (render_entry(one, next), None),
                        (_, Some(arm_id)) => (render_entries(body, next), Some(arm_id.to_string())),
                        (_, None) => {
                            *next += 1;
                            let arm_id = format!("a{next}");
                            (render_entries(body, next), Some(arm_id))
                        }
                    };
                    let mut f = vec![("when", when.as_str()), ("do", body.as_str())];
                    if let Some(arm_id) = &arm_id {
                        f.push(("id", arm_id));
                    }
                    flow(&f)
                })
                .collect();
            let arms = format!("[{}]", arms.join(", "));
            format!("{{ branch: {} }}", flow(&[("id", &id), ("arms", &arms)]))
        }
        GenKind::Foreach(concurrency, body) => {
            let body = render_entries(body, next);
            let mut f = vec![("id", id.as_str()), ("do", body.as_str())];
            if let Some(c) = concurrency {
                f.push(("concurrency", c));
            }
            format!("{{ foreach: {} }}", flow(&f))
        }
        GenKind::Loop(test, expr, max, body) => {
            let expr = quoted(expr);
            let body = render_entries(body, next);
            let mut f = vec![
                ("id", id.as_str()),
                (*test, expr.as_str()),
                ("do", body.as_str()),
            ];
            if let Some(max) = max {
                f.push(("max-iterations", max));
            }
            format!("{{ loop: {} }}", flow(&f))
        }
    }
}

/// The YAML text of `file`.
fn render(file: &GenFile) -> String {
    let mut out = format!("id: {}\n", file.id.unwrap_or("generated"));
    out.push_str(&format!(
        "description: {}\n",
        quoted(&"d".repeat(file.description_bytes))
    ));
    if let Some(v) = file.input_schema {
        out.push_str(&format!("input-schema: {v}\n"));
    }
    if let Some(v) = file.initial_state {
        out.push_str(&format!("initial-state: {v}\n"));
    }
    if let Some(r) = &file.retry {
        out.push_str(&format!("retry: {}\n", flow(r)));
    }
    out.push_str(&format!(
        "plugins:\n  kit:\n    wasm: \"{}\"\n",
        weft_guests::TESTKIT
    ));
    if let Some(l) = &file.limits {
        out.push_str(&format!("    limits: {}\n", flow(l)));
    }
    if let Some((host, guest, mode, http)) = file.grants {
        out.push_str(&format!(
            "    grants: {{ dirs: [ {{ host: {host}, guest: {guest}, mode: {mode} }} ], env: {{ A: b }}, http: {http} }}\n"
        ));
    }
    if let Some(path) = file.other_plugin {
        out.push_str(&format!("  other: {{ wasm: {path} }}\n"));
    }
    let mut next = 0;
    out.push_str(&format!(
        "steps: {}\n",
        render_entries(&file.entries, &mut next)
    ));
    out
}

/// A directory to grant, a pipe no one writes to and a sparse file larger than a workflow file
/// may be, in `dir`.
fn hostile_files(dir: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(dir.join("pipe"))
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo");
    std::fs::create_dir_all(dir.join("data")).expect("mkdir data");
    let huge = std::fs::File::create(dir.join("huge.yaml")).expect("create");
    huge.set_len(17 << 20).expect("a sparse file");
}

#[test]
fn generated_workflow_files_never_panic_hang_or_grow_the_loader() {
    let tokio = tokio::runtime::Runtime::new().expect("tokio");
    let dir = tempfile::tempdir().expect("temp dir");
    let rt = Runtime::open(&dir.path().join("home"), config()).expect("open runtime");
    rt.register(
        "twice",
        NativeStep::new(|call: NativeCall| async move {
            Ok(StepOutcome::Done(json!([
                call.call.input.clone(),
                call.call.input
            ])))
        }),
    );
    let seeds = seeds(dir.path());
    hostile_files(dir.path());
    let path = dir.path().join("workflow.yaml");
    // The graph of a file with every kind of entry and a plugin: what a file costs before its
    // own bytes.
    let base = tokio
        .block_on(rt.load_workflow_text(&path.display().to_string(), &seeds[3].1))
        .ok()
        .and_then(|w| weft::internal::definition(&w).ok())
        .map(|definition| definition.bytes().len())
        .expect("the seed with every kind of entry loads");
    let (mut runner, seed) = runner(GEN_CASES);
    let watchdog = Watchdog::start("generated workflow files", seed);
    let result = runner.run(&gen_file(), |file| {
        watchdog.case(&file);
        let text = render(&file);
        let loaded = tokio.block_on(rt.load_workflow_text(&path.display().to_string(), &text));
        check_loaded(loaded, text.len(), graph_limit(base, text.len()))
    });
    drop(watchdog);
    verdict("generated workflow files", seed, result);
}

#[test]
fn weft_validate_survives_a_few_mutated_files() {
    let dir = super::Dir::new();
    let seeds = seeds(dir.root());
    let mut runner = TestRunner::deterministic();
    let strategy = prop::collection::vec(mutation(), 1..5);
    for (n, (_, text)) in seeds.iter().enumerate() {
        let mutations: Vec<Mutation> = strategy
            .new_tree(&mut runner)
            .map(|t| t.current())
            .unwrap_or_default();
        let text = mutations.iter().fold(text.clone(), |t, m| apply(&t, m));
        let file = dir.file(&format!("mutated{n}.yaml"), &text);
        let out = dir.weft(&["validate", &file]);
        assert!(
            [0, 2].contains(&out.code),
            "{file}: {}: {out:?}",
            shorten(&format!("{mutations:?}"))
        );
        assert!(!out.stderr.contains("panicked"), "{out:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Expressions

/// The step budget of each evaluation: small, so an endless expression ends quickly.
const EXPR_STEPS: u64 = 2000;

/// Terms an expression is built from: values and paths, hostile numbers and strings, and the
/// endless, deep, huge and forbidden calls a hostile author reaches for first.
const JQ_TERMS: &[&str] = &[
    ".",
    "..",
    "null",
    "true",
    "0",
    "-0",
    "1",
    "-1",
    "1.5",
    "1e18",
    "-1e18",
    "1e309",
    "-1e309",
    "nan",
    "infinite",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551616",
    "123456789012345678901234567890",
    "\"\"",
    "\"x\"",
    "\"é𝔘💣\\u0000\\n\"",
    "\"\\ud800\"",
    "\"\\(1, 2)\"",
    "@base64 \"a\\(.)b\"",
    "[]",
    "{}",
    "[1, [2, [3]], {\"a\": null}]",
    ".input",
    ".input.n",
    ".steps.first",
    ".state",
    ".init",
    ".[0]?",
    ".a?",
    ".[\"a\"]?",
    ".[1000000000]?",
    ".[-1000000000]?",
    ".[1e300]?",
    ".[nan]?",
    ".[2:1e18]?",
    "$__loc__",
    "$__prog_args",
    "$ENV",
    "$ENV.PATH",
    "$undefined",
    "env",
    "input",
    "inputs",
    "input_line_number",
    "input_filename",
    "now",
    "empty",
    "error",
    "error(null)",
    "error({\"a\": 1})",
    "halt",
    "halt_error",
    "halt_error(1)",
    "debug",
    "stderr",
    "[range(1000)]",
    "range(1e18)",
    "range(0; 1e18; 1e-300)",
    "range(0; 10; 0)",
    "range(infinite)",
    "last(range(1e18))",
    "limit(5; repeat(1))",
    "limit(-1; 1, 2)",
    "[repeat(1)]",
    "until(false; .)",
    "[recurse(.[]?)]",
    "[paths]",
    "[..]",
    "def f: f; f",
    "def f: [f]; f",
    "def f: 1 + f; f",
    "def f(g): g | f(g); f(.)",
    "def f($n): if $n > 0 then f($n - 1) else $n end; f(1e18)",
    "reduce range(100000) as $i (0; [.])",
    "reduce range(1e18) as $i (0; . + $i)",
    "[foreach range(1e18) as $i (0; . + 1; .)]",
    "label $out | 1, break $out, 2",
    "break $out",
    "try error(\"x\") catch .",
    "\"0x10\" | fromjson",
    "\"0x10\" | tonumber",
    "\"[1,\" | fromjson",
    "\"1 2 x\" | fromjson",
    "(\"[\" * 100) | fromjson",
    "(\"[\" * 100 + \"]\" * 100) | fromjson",
    "\"1e99999\" | tonumber",
    "\"\\\"\\\\ud800\\\"\" | fromjson",
    "\"a\" * 3",
    "\"x\" * 0",
    "\"x\" * -1",
    "\"x\" * 1e18",
    "\"x\" * nan",
    "\"aGk=\" | @base64d",
    "\"%%%\" | @base64d",
    "\"a\" | test(\"(a+)+$\")",
    "\"a\" | test(\"((a{100}){100}){100}\")",
    "\"a\" | test(\"(\")",
    "\"a\" | test(\"a\"; \"gxnlsiz\")",
    "\"aaa\" | [match(\"\"; \"g\")] | length",
    "\"aaa\" | gsub(\"\"; \"x\")",
    "\"aaa\" | sub(\"(?<x>a)\"; \"\\(.x)\\(.x)\"; \"g\")",
    "\"a,b\" | [splits(\",\")]",
    "\"abc\" | indices(\"\")",
    "\"abc\" | .[1e15:]",
    "\"x\" | ltrimstr(1)",
    "[1114112] | implode",
    "[55296] | implode",
    "[-1] | implode",
    "1e300 | todate",
    "-1e18 | todate",
    "\"x\" | strptime(\"%Y\")",
    "\"2020\" | strptime(\"%Y\") | mktime",
    "1e20 | gmtime",
    "ldexp(1; 100000)",
    "1e308 | frexp",
    "nan | frexp",
    "[nan, 1] | sort",
    "[{\"a\": nan}] | group_by(.a)",
    "[[1], [range(100)]] | transpose",
    "[[1, 2], [3, 4]] | [combinations]",
    "[[[[1]]]] | flatten(1e18)",
    "[1] | flatten(-1)",
    "{} | has(1)",
    "[] | has(\"a\")",
    "getpath([\"a\", 0, \"b\"])",
    "getpath([1e300])",
    "setpath([\"a\", 0]; 1)",
    "setpath([1000000000]; 1)",
    "[] | .[1000000000] = 1",
    "[] | .[-5] = 1",
    "null | .[2:4] = [1]",
    "del(.[])",
    "delpaths([[\"a\"], [0]])",
    "to_entries",
    "with_entries(.)",
    "walk(.)",
    "tostream",
    "fromstream(tostream)",
    "[1, 2] | pick(.[1000000000])",
    "splits(null)",
    "ascii",
    "@sh",
    "@csv",
    "@tsv",
    "@uri",
    "@html",
    "@text",
    "@json",
    "@base32d",
    "significand",
    "gamma",
    "abs",
    "toarray",
    "trim",
    "ltrimstr(\"x\")",
    "tojson",
    "tostring",
    "ascii_downcase",
    "explode",
    "implode",
    "keys",
    "length",
    "utf8bytelength",
    "not",
    "type",
    "add",
    "any",
    "all",
    "min",
    "max",
    "unique",
    "reverse",
    "sort",
    "splits(\"a\")",
    "have_decnum",
    "$__loc__.line",
];

/// Expressions that wrap one smaller expression `E`.
const JQ_WRAPS: &[&str] = &[
    "[E]",
    "{a: E}",
    "{(E): 1}",
    "(E)",
    "E | length",
    "E | tostring",
    "E | tojson",
    "E | tojson | fromjson",
    "E | fromjson?",
    "try E catch .",
    "try E",
    "E?",
    "-(E)",
    "E | not",
    "E | keys?",
    "E | .[1000000000]?",
    "E | .[-1]?",
    "E | .a?",
    "E | .[1:]?",
    "first(E)",
    "limit(3; E)",
    "[E][0]",
    "E | ascii_downcase?",
    "E | explode?",
    "E | implode?",
    "E | @base64",
    "E | @base64d?",
    "E | test(\"a\")?",
    "E | ltrimstr(\"x\")",
    "E | sort?",
    "[E | tostream]",
    "[E | paths?]",
    "E | type",
    "E | add?",
    "E | flatten?",
    "E | to_entries?",
    "E | del(.a)?",
    "E | setpath([\"a\"]; 1)?",
    "E as $x | $x",
    "E as [$a, {b: $c}] | [$a, $c]",
    "def g: E; g",
    "def g(f): f | E; g(.)",
    "label $out | E | ., break $out",
    "if E then 1 else 2 end",
    "E // 0",
    "[E] | length",
    "\"\\(E)\"",
    "reduce (E) as $i (0; . + 1)",
    "[foreach (E) as $i (0; . + 1)]",
    "E | select(. != null)",
    "E | map(.)?",
    "E | walk(.)",
    "E | splits(\"a\")?",
    "E | getpath([\"a\"])?",
    "E * 2",
];

/// Expressions that combine two smaller expressions `E` and `F`.
const JQ_PAIRS: &[&str] = &[
    "E + F",
    "E - F",
    "E / F",
    "E % F",
    "E == F",
    "E < F",
    "E and F",
    "E or F",
    "E // F",
    "E, F",
    "E | F",
    "E as $x | F",
    "if E then F else . end",
    "{a: E, b: F}",
    "[E, F]",
    "E * {a: F}",
    "try E catch F",
    "reduce (E) as $i (F; . + 1)",
];

/// Bodies of an iteration (`reduce`, `foreach`, `recurse`, `repeat`, recursion). Each uses its
/// input at most once and adds at most a little: a body that uses it twice (`. + .`, `[., .]`)
/// or multiplies it (`tojson`, `. * 2`) grows a value exponentially in steps, which the step
/// budget does not bound (see [`jq_expression`]).
const JQ_BODIES: &[&str] = &[
    ". + 1",
    ". + [1]",
    ". + \"x\"",
    ". + {a: 1}",
    "[.]",
    "{a: .}",
    ".[1:]?",
    ".a?",
    "[.[]?]",
    "keys?",
    "not",
    "type",
    ". // 1",
    "length?",
    "-(.)?",
    "ascii_downcase?",
    "explode?",
    "implode?",
    "first(.[]?)",
    "del(.a)?",
    "to_entries?",
    "error",
    "empty",
];

/// How many times an iteration goes round: none, a few, many, more than any budget.
const JQ_COUNTS: &[&str] = &["0", "3", "100", "100000", "1e18", "-1", "nan"];

/// Iterations around a starting expression `E`, with body `B` and count `N`.
const JQ_LOOPS: &[&str] = &[
    "reduce range(N) as $i (E; B)",
    "[foreach range(N) as $i (E; B)]",
    "[limit(N; E | recurse(B))]",
    "[limit(N; E | repeat(B))]",
    "E | until(type == \"boolean\"; B)",
    "def r($n): if $n <= 0 then . else B | r($n - 1) end; E | r(N)",
];

/// A jq source built from [`JQ_TERMS`] by [`JQ_WRAPS`], [`JQ_PAIRS`] and [`JQ_LOOPS`], nested in
/// brackets now and then, up to beyond the nesting and length limits.
///
/// Left out on purpose: iterations whose body doubles its input, and repetitions of a string by
/// a large count. The step budget counts terms, not bytes: `"x" * 100000000000`, `reduce
/// range(40) as $i ("x"; . + .)` and `reduce range(40) as $i (0; [., .]) | tojson` exhaust
/// memory or run for hours inside a few steps, a known limit of evaluating jq in the host
/// process (README, "Limits").
fn jq_expression() -> impl Strategy<Value = String> {
    let leaf = prop::sample::select(JQ_TERMS).prop_map(str::to_owned);
    let tree = leaf.prop_recursive(6, 48, 3, |inner| {
        prop_oneof![
            3 => (prop::sample::select(JQ_WRAPS), inner.clone())
                .prop_map(|(w, e)| fill(w, &[('E', &format!("({e})"))])),
            3 => (prop::sample::select(JQ_PAIRS), inner.clone(), inner.clone()).prop_map(
                |(p, e, f)| fill(p, &[('E', &format!("({e})")), ('F', &format!("({f})"))])
            ),
            2 => (
                prop::sample::select(JQ_LOOPS),
                inner,
                prop::sample::select(JQ_BODIES),
                prop::sample::select(JQ_COUNTS),
            )
                .prop_map(|(l, e, b, n)| fill(l, &[('E', &format!("({e})")), ('B', b), ('N', n)])),
        ]
    });
    let deep = (
        tree.clone(),
        1usize..120,
        prop::sample::select(&["(", "[", "{a:", "[.[]?, "][..]),
    )
        .prop_map(|(e, n, open)| {
            let close = match open {
                "(" => ")",
                "{a:" => "}",
                _ => "]",
            };
            format!("{}{e}{}", open.repeat(n), close.repeat(n))
        });
    let long = prop_oneof![
        (1usize..6000).prop_map(|n| vec!["1"; n].join("+")),
        (1usize..6000).prop_map(|n| vec!["."; n].join(" | ")),
        (60_000usize..70_000).prop_map(|n| format!("\"{}\"", "x".repeat(n))),
    ];
    let spliced = (
        tree.clone(),
        any::<Index>(),
        prop::sample::select(JQ_FRAGMENTS),
    )
        .prop_map(|(e, at, fragment)| {
            let bounds: Vec<usize> = e.char_indices().map(|(b, _)| b).chain([e.len()]).collect();
            let at = bounds[at.index(bounds.len())];
            format!("{}{fragment}{}", &e[..at], &e[at..])
        });
    prop_oneof![
        6 => tree,
        1 => deep,
        1 => long,
        2 => spliced,
    ]
}

/// `template` with each of its hole letters replaced by its text (the texts themselves are not
/// searched for holes).
fn fill(template: &str, holes: &[(char, &str)]) -> String {
    let mut out = String::new();
    for c in template.chars() {
        match holes.iter().find(|(hole, _)| *hole == c) {
            Some((_, text)) => out.push_str(text),
            None => out.push(c),
        }
    }
    out
}

/// How deep `value` nests its arrays and objects.
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[test]
fn generated_expressions_compile_or_are_refused_and_end_within_their_budget() {
    // What an expression sees (WORKFLOW-FORMAT.md §1).
    let context = json!({
        "input": { "n": 2, "a": [1, "two", null], "s": "aaa" },
        "state": { "seen": 1 },
        "init": { "n": 2 },
        "steps": { "first": { "n": 3 } },
    });
    let (mut runner, seed) = runner(EXPR_CASES);
    let watchdog = Watchdog::start("expressions", seed);
    let result = runner.run(&jq_expression(), |source| {
        watchdog.case(&source);
        let expr = Expr::new(source.clone());
        match expr.check() {
            Ok(()) => {}
            Err(ExprError::Internal(e)) => {
                return Err(TestCaseError::fail(format!("jaq failed compiling: {e}")));
            }
            Err(e) => {
                let message = e.to_string();
                prop_assert!(!message.contains('\n'), "one line: {message}");
                prop_assert!(message.len() < 4096, "short: {message}");
                return Ok(());
            }
        }
        match expr.eval_within(&context, EXPR_STEPS, 2 << 20) {
            Ok(values) => {
                for value in values {
                    prop_assert!(depth(&value) <= MAX_VALUE_DEPTH, "too deep a value");
                }
            }
            Err(message) => {
                prop_assert!(
                    !message.contains("failed internally"),
                    "jaq panicked: {message}"
                );
                prop_assert!(!message.contains("cannot start a thread"), "{message}");
            }
        }
        Ok(())
    });
    drop(watchdog);
    verdict("expressions", seed, result);
}

// ---------------------------------------------------------------------------------------------
// Resume data

/// A suspended run: `ask` must be resumed with `{ok: bool}` (S62); then `more` suspends again
/// until it is resumed with data holding `done`.
const SUSPENDS: &str = r#"
id: asks
plugins:
  kit: { wasm: "{testkit}" }
steps:
  - { id: ask, plugin: kit, step: typed, config: { suspend-payload: { question: "ok?" } } }
  - { id: more, plugin: kit, step: suspend, config: { payload: { q: 1 }, suspend-again-unless: done } }
"#;

/// JSON of every shape: scalars, odd strings, nested containers, deep chains (beyond the depth
/// limit of 64) and large values (beyond the size limit of 2 MiB).
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "\\PC{0,40}".prop_map(Value::String),
        prop::sample::select(ODD_CHARS).prop_map(|c| Value::String(c.to_string())),
    ];
    let nested = leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map("[a-z\u{e9}\u{1d518}]{0,6}", inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().filter(|(k, _)| k != "done").collect())),
        ]
    });
    let deep = (1usize..=128, any::<bool>()).prop_map(|(depth, objects)| {
        (0..depth).fold(json!(0), |v, _| {
            if objects {
                let mut m = Map::new();
                m.insert("k".into(), v);
                Value::Object(m)
            } else {
                Value::Array(vec![v])
            }
        })
    });
    let large = prop_oneof![
        4 => (0usize..200_000).prop_map(|n| Value::String("x".repeat(n))),
        4 => (0usize..20_000).prop_map(|n| Value::Array((0..n).map(|i| json!(i)).collect())),
        1 => Just(Value::String("x".repeat((2 << 20) + 1))),
    ];
    prop_oneof![
        4 => nested.clone(),
        2 => deep,
        1 => large,
        2 => nested.prop_map(|v| json!({ "ok": v })),
    ]
}

/// Every stored event of a run that has settled, in order; an error when they do not read back
/// whole (a gap, a repeat, or a last event that is not where the run stands).
fn settled_events(rt: &Runtime, id: &str) -> Result<Vec<StoredEvent>, TestCaseError> {
    let mut rx = rt
        .watch_settled(id, 1)
        .map_err(|e| TestCaseError::fail(format!("the events of {id} do not read: {e}")))?;
    let mut events = Vec::new();
    while let Ok(event) = rx.try_recv() {
        events.push((*event).clone());
    }
    for (n, event) in events.iter().enumerate() {
        prop_assert_eq!(event.seq, n as u64 + 1, "events of {} in order, no gap", id);
    }
    prop_assert_eq!(
        events.last().map(|e| e.kind),
        Some(EventKind::RunSuspended),
        "the last event of {} is its suspension",
        id
    );
    Ok(events)
}

#[test]
fn resume_data_of_any_shape_never_corrupts_a_suspended_run() {
    let dir = super::Dir::new();
    let file = dir.file("asks.yaml", &plugin_paths(SUSPENDS));
    let tokio = tokio::runtime::Runtime::new().expect("tokio");
    let rt = Runtime::open(&dir.path("home"), config_for(&dir.path("home"))).expect("open runtime");
    // `asking` waits at `ask`, which refuses data without a boolean `ok`; `more` waits at
    // `more`, which takes any data and suspends again.
    let (asking, more) = tokio.block_on(async {
        let w = rt.load_workflow(Path::new(&file)).await.expect("load");
        let asking = rt
            .start(&w, json!({"amount": 2}), None)
            .await
            .expect("start");
        let more = rt
            .start(&w, json!({"amount": 3}), None)
            .await
            .expect("start");
        rt.wait(&asking).await.expect("wait");
        rt.wait(&more).await.expect("wait");
        let ok = req(None, None, None, json!({"ok": true}));
        rt.resume(&more, ok).await.expect("resume");
        rt.wait(&more).await.expect("wait");
        (asking, more)
    });
    let (mut runner, seed) = runner(RESUME_CASES);
    let watchdog = Watchdog::start("resume data", seed);
    let result = runner.run(&any_json(), |data| {
        watchdog.case(&data);
        tokio.block_on(async {
            // Accepted or refused, each run is still suspended, readable, and its events read
            // back whole; a refusal says why in a line.
            for id in [&asking, &more] {
                let before = settled_events(&rt, id)?.len();
                let resumed = rt.resume(id, req(None, None, None, data.clone())).await;
                if let Err(e) = &resumed {
                    let message = e.to_string();
                    prop_assert!(!message.contains('\n'), "one line: {message}");
                    prop_assert!(message.len() < 4096, "short: {}", shorten(&message));
                    prop_assert!(!debug_debris(&message), "words, not a dump: {message}");
                }
                let record = rt
                    .wait(id)
                    .await
                    .map_err(|e| TestCaseError::fail(format!("unreadable run: {e}")))?;
                prop_assert_eq!(record.status, RunStatus::Suspended);
                let shown = rt
                    .show(id)
                    .await
                    .map_err(|e| TestCaseError::fail(format!("show fails: {e}")))?;
                prop_assert_eq!(shown.status, RunStatus::Suspended);
                let after = settled_events(&rt, id)?.len();
                if resumed.is_err() {
                    prop_assert_eq!(before, after, "a refused resume stores no event");
                }
            }
            Ok(())
        })
    });
    drop(watchdog);
    verdict("resume data", seed, result);
    drop(rt);
    drop(tokio);
    // A later process reads the runs back, and valid resumes carry them to their end.
    let show = |dir: &super::Dir, id: &str| {
        let out = dir.weft(&["show", id, "--json"]);
        assert_eq!(out.code, 0, "the stored run is readable: {out:?}");
        serde_json::from_str::<Value>(out.stdout.trim()).expect("a run record")
    };
    for id in [&asking, &more] {
        assert_eq!(show(&dir, id)["status"], "suspended");
        // Text that is not JSON, or too deep for any reader, is refused and changes nothing
        // (60 000 levels: as deep as one argument of a command line may spell).
        let deep = format!("{}{}", "[".repeat(60_000), "]".repeat(60_000));
        for text in ["", "nul", "{\"a\": 1", "1e999999", &deep] {
            let out = dir.weft(&["resume", id, "--data", text]);
            assert_eq!(out.code, 2, "{}: {out:?}", shorten(text));
            assert!(!out.stderr.contains("panicked"), "{out:?}");
        }
        for data in [r#"{"ok": true}"#, r#"{"done": true}"#] {
            if show(&dir, id)["status"] == "suspended" {
                let out = dir.weft(&["resume", id, "--data", data]);
                assert!([0, 3].contains(&out.code), "{data}: {out:?}");
            }
        }
        assert_eq!(show(&dir, id)["status"], "success");
        let out = dir.weft(&["watch", id]);
        assert_eq!(out.code, 0, "the events read back: {out:?}");
        let last = out.stdout.lines().last().unwrap_or_default();
        assert!(last.contains("run-succeeded"), "{last}");
    }
}
