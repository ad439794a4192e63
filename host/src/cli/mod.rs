//! The command line (WORKFLOW-FORMAT.md §2): parsing, and each command against a runtime.
//!
//! A command runs against the process that holds the home: this one when it can open the home,
//! else the holder, reached through the control socket in the home (S118). Either way the
//! command writes through an [`Output`], so the text and exit code are the same.

mod control;
pub mod new;
mod output;
pub mod telemetry;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::driver::{Recovery, RunRecord, Runtime, RuntimeConfig, RuntimeError};
use crate::engine::draw::{Format, draw};
use crate::engine::expr::DEFAULT_STEP_BUDGET;
use crate::engine::{Refusal, ResumeRequest, RunStatus};
use crate::limits::{DEFAULT_MAX_VALUE_BYTES, MIB};
use crate::run_id::check_run_id;
use crate::store::StoreError;
use crate::workflow::load_workflow;

pub use output::{Output, StdOutput};

/// Exit code: success, or the command did its job.
pub const EXIT_OK: i32 = 0;
/// Exit code: the run failed.
pub const EXIT_FAILED: i32 = 1;
/// Exit code: bad usage or bad input; nothing was run.
pub const EXIT_USAGE: i32 = 2;
/// Exit code: the run is suspended.
pub const EXIT_SUSPENDED: i32 = 3;
/// Exit code: the run was cancelled.
pub const EXIT_CANCELLED: i32 = 4;
/// Exit code: a guardrail tripped.
pub const EXIT_TRIPWIRE: i32 = 5;
/// Exit code: the run was started, but stopped before it ended or suspended (its progress could
/// not be stored, or the process driving it died); what it did is stored, and
/// `weft resume RUN-ID` goes on with it.
pub const EXIT_INTERRUPTED: i32 = 6;

/// weft runs workflow graphs whose steps are sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "weft", version, about)]
pub struct Cli {
    /// The home directory (database and plugin cache).
    #[arg(long, global = true, env = "WEFT_HOME", default_value = ".weft")]
    pub home: PathBuf,
    /// The most steps one jq expression may take before it fails; applies to the runs this
    /// process drives.
    #[arg(long, global = true, env = "WEFT_EXPR_STEPS", default_value_t = DEFAULT_STEP_BUDGET)]
    pub expr_steps: u64,
    /// The largest run input accepted, in MiB.
    #[arg(long, global = true, default_value_t = DEFAULT_MAX_VALUE_BYTES / MIB)]
    pub max_input_mib: u64,
    /// The largest value a step may return (output, payload, failure, each state patch), in MiB.
    #[arg(long, global = true, default_value_t = DEFAULT_MAX_VALUE_BYTES / MIB)]
    pub max_output_mib: u64,
    /// The largest a workflow file's state may grow by a step's patches, in MiB.
    #[arg(long, global = true, default_value_t = DEFAULT_MAX_VALUE_BYTES / MIB)]
    pub max_state_mib: u64,
    /// The largest resume data accepted, in MiB.
    #[arg(long, global = true, default_value_t = DEFAULT_MAX_VALUE_BYTES / MIB)]
    pub max_resume_mib: u64,
    /// Where compiled plugins are cached, shared by every home that names it (default: the
    /// home's own `cache/`). A plugin compiled once (`weft plugin compile`) loads at once in
    /// every home using the same directory.
    #[arg(long, global = true, env = "WEFT_PLUGIN_CACHE", value_name = "DIR")]
    pub plugin_cache: Option<PathBuf>,
    /// Export traces of runs and step attempts over OTLP/HTTP to this collector (e.g.
    /// `http://localhost:4318`); `OTEL_EXPORTER_OTLP_PROTOCOL=http/json` picks JSON over
    /// protobuf.
    #[arg(
        long,
        global = true,
        env = "OTEL_EXPORTER_OTLP_ENDPOINT",
        value_name = "URL"
    )]
    pub otlp_endpoint: Option<String>,
    /// Where runs are stored: a PostgreSQL URL (`postgres://USER@HOST/DB`, or
    /// `host=/run/postgresql dbname=DB`; weft's own parameters `schema=` and `lease_ms=`) shared
    /// by any number of weft processes; without it, the embedded database in the home. The home
    /// still holds the compiled-plugin cache.
    #[arg(
        long,
        global = true,
        env = "WEFT_STORE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub store: Option<String>,
    /// For crash tests: abort the process right after its N-th durable commit.
    #[arg(long, global = true, env = "WEFT_CRASH_AFTER_COMMITS", hide = true)]
    pub crash_after_commits: Option<u64>,
    /// What to do.
    #[command(subcommand)]
    pub command: Cmd,
}

impl Cli {
    /// The runtime settings the options give. They apply when this process holds the home; a
    /// command served by another process runs with that process's settings.
    pub fn runtime_config(&self) -> RuntimeConfig {
        RuntimeConfig {
            max_input_bytes: self.max_input_mib.saturating_mul(MIB),
            max_output_bytes: self.max_output_mib.saturating_mul(MIB),
            max_state_bytes: self.max_state_mib.saturating_mul(MIB),
            max_resume_bytes: self.max_resume_mib.saturating_mul(MIB),
            expr_steps: self.expr_steps,
            crash_after_commits: self.crash_after_commits,
            store: self.store.clone().filter(|s| !s.is_empty()).map(Into::into),
            host: crate::plugin::HostConfig::default().with_cache_dir(
                self.plugin_cache
                    .as_ref()
                    .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone())),
            ),
            ..RuntimeConfig::default()
        }
    }
}

/// The commands.
#[derive(Debug, Clone, Subcommand, Serialize, Deserialize)]
pub enum Cmd {
    /// Start a run and wait until it ends or suspends; with --from-step, a new run from a step
    /// of an ended run.
    Run {
        /// The workflow file (optional with --from-step: the source's stored definition).
        file: Option<PathBuf>,
        /// Re-run from this step of the run given by --of.
        #[arg(long, requires = "of")]
        from_step: Option<String>,
        /// The ended run to re-run from.
        #[arg(long, requires = "from_step", value_parser = RunIdArg)]
        of: Option<String>,
        /// The run input (JSON).
        #[arg(long, conflicts_with = "input_file")]
        input: Option<String>,
        /// A file holding the run input (JSON).
        #[arg(long)]
        input_file: Option<PathBuf>,
        /// The run's id (default: a new ULID): 1 to 128 characters of A-Z a-z 0-9 . _ -, not
        /// starting with `.`.
        #[arg(long, value_parser = RunIdArg)]
        run_id: Option<String>,
        /// Print exactly one run record on stdout.
        #[arg(long)]
        json: bool,
        /// Store the run for a `weft worker` to drive and print its id, without waiting (a
        /// store processes share only: --store postgres://...).
        #[arg(long, conflicts_with_all = ["from_step", "json"])]
        #[serde(default)]
        detach: bool,
    },
    /// Resume a suspended run (with no selector and no data, also recover an orphaned one).
    Resume {
        /// The run.
        #[arg(value_parser = RunIdArg)]
        run_id: String,
        /// Select suspensions by path or path prefix.
        #[arg(long, conflicts_with = "label")]
        step: Option<String>,
        /// Select suspensions by label.
        #[arg(long)]
        label: Option<String>,
        /// Keep only this foreach item.
        #[arg(long)]
        foreach_index: Option<u32>,
        /// The resume data (JSON, default `{}`).
        #[arg(long)]
        data: Option<String>,
        /// Print exactly one run record on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a pending, running or suspended run.
    Cancel {
        /// The run.
        #[arg(value_parser = RunIdArg)]
        run_id: String,
    },
    /// List runs.
    Runs {
        /// Only runs of this workflow.
        #[arg(long)]
        workflow: Option<String>,
        /// Only runs with this status.
        #[arg(long)]
        status: Option<String>,
    },
    /// Show one run.
    Show {
        /// The run.
        #[arg(value_parser = RunIdArg)]
        run_id: String,
        /// Print the run record as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a run's events, past then live, one JSON object a line.
    Watch {
        /// The run.
        #[arg(value_parser = RunIdArg)]
        run_id: String,
        /// Start at this seq.
        #[arg(long, default_value_t = 1)]
        from_seq: u64,
        /// Keep following through suspensions until the run ends.
        #[arg(long)]
        follow: bool,
    },
    /// Check a workflow file and every file and plugin it names.
    Validate {
        /// The workflow file.
        file: PathBuf,
    },
    /// Draw a workflow as a Mermaid flowchart or a Graphviz digraph.
    Graph {
        /// The workflow file.
        file: PathBuf,
        /// `mermaid` or `dot`.
        #[arg(long, default_value = "mermaid")]
        format: String,
    },
    /// Serve the HTTP API and the web view; recover every run no process drives (S101), and on
    /// a shared store go on taking up runs whose process ended, as `weft worker` does.
    Serve {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: String,
        /// The only directory `POST /runs` starts workflows from (by `id` or by a file path
        /// relative to it); without it, runs are only read, resumed and cancelled over HTTP.
        #[arg(long, value_name = "DIR")]
        workflows: Option<PathBuf>,
        /// The environment variable holding the bearer token every write must carry. Without
        /// it, a server listening beyond loopback makes a token and prints it.
        #[arg(long, value_name = "NAME")]
        token_env: Option<String>,
        /// A host name the server is reached by (through DNS or a proxy), besides its address
        /// and, on loopback, `localhost`; requests naming another host are refused.
        #[arg(long = "allow-host", value_name = "NAME")]
        allow_hosts: Vec<String>,
        /// An origin whose pages may call the API from a browser (CORS), e.g.
        /// `https://ops.example.com`; pages of other origins are refused.
        #[arg(long = "cors-origin", value_name = "ORIGIN")]
        cors_origins: Vec<String>,
        /// Connections open at once; more are closed as they come.
        #[arg(long, default_value_t = 512)]
        max_connections: usize,
        /// Event streams following runs at once; more are refused (503).
        #[arg(long, default_value_t = 256)]
        max_followers: usize,
        /// The largest request body, in bytes.
        #[arg(long, default_value_t = 1 << 20)]
        max_body_bytes: usize,
        /// Seconds a client may take to send a request's headers.
        #[arg(long, default_value_t = 10)]
        header_timeout_s: u64,
    },
    /// Drive runs no live process drives, on a store processes share (--store postgres://...):
    /// runs whose process ended or stopped answering, taken up and recovered (S101), until
    /// stopped with Ctrl-C or SIGTERM; then its runs are left for other workers.
    Worker {
        /// Runs driven at once (pending or running) before it takes up more.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
    },
    /// Plugins.
    #[command(subcommand)]
    Plugin(PluginCmd),
    /// Development aids; they need no home.
    #[command(subcommand)]
    Dev(DevCmd),
    /// Write a ready plugin project `DIR/NAME` (docs/PLUGINS.md); needs no home.
    New {
        /// What the plugin exports: a workflow `step` or a `tool`.
        #[arg(value_enum)]
        kind: new::PluginKind,
        /// The plugin's name, also its step's or tool's, its package's and its directory's:
        /// lowercase letters, digits and `-`, starting with a letter.
        name: String,
        /// The language: `rust`, `python` (built with componentize-py) or `js` (built with jco).
        #[arg(long, value_enum, default_value = "rust")]
        lang: new::Lang,
        /// Where to make the project's directory (default: the current directory).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Rust only: a lean plugin, built without std and WASI (docs/PLUGINS-RUST-SDK.md,
        /// "Lean mode"): its steps start faster, but it can use no files, environment variables
        /// or HTTP, and its dependencies must build without std.
        #[arg(long)]
        lean: bool,
    },
}

/// `weft dev ...`: run in this process, never forwarded to the process holding the home.
#[derive(Debug, Clone, Subcommand, Serialize, Deserialize)]
pub enum DevCmd {
    /// Serve a scripted model double: an OpenAI-compatible (`/v1/chat/completions`) and
    /// Anthropic-compatible (`/v1/messages`) server replaying the script's conversations
    /// (docs/MODEL-DOUBLE.md), until Ctrl-C.
    Model {
        /// The script (YAML).
        #[arg(long, value_name = "FILE")]
        script: PathBuf,
        /// Where to listen (port 0: any free port; the address is printed).
        #[arg(long, default_value = "127.0.0.1:0")]
        addr: String,
    },
}

/// `weft plugin ...`.
#[derive(Debug, Clone, Subcommand, Serialize, Deserialize)]
pub enum PluginCmd {
    /// The steps and tools a plugin exports, with their schemas.
    Inspect {
        /// The component.
        file: PathBuf,
    },
    /// Compile components into the plugin cache ahead of their first run (with
    /// `--plugin-cache DIR`, for every home sharing that directory).
    Compile {
        /// The components.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// Parses a run id argument with [`check_run_id`]; a refusal repeats only the start of a long id.
#[derive(Debug, Clone, Copy)]
struct RunIdArg;

impl clap::builder::TypedValueParser for RunIdArg {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        let refuse = |message: String| {
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("{message}\n"),
            )
            .with_cmd(cmd)
        };
        let text = value
            .to_str()
            .ok_or_else(|| refuse(format!("invalid run id {value:?}: it is not UTF-8")))?;
        check_run_id(text).map_err(|e| refuse(e.to_string()))?;
        Ok(text.to_owned())
    }
}

/// Runs the command line; returns the process exit code.
pub async fn main(cli: Cli) -> i32 {
    let mut out = StdOutput;
    let config = cli.runtime_config();
    let cmd = absolutize(cli.command);
    // Development aids and `new` need no home: never open it, never forward them.
    let cmd = match cmd {
        Cmd::Dev(dev) => return dev_command(dev, &mut out).await,
        Cmd::New {
            kind,
            name,
            lang,
            dir,
            lean,
        } => return new::command(kind, &name, lang, lean, dir, &mut out),
        other => other,
    };
    // Another process may hold the home for a moment without serving it yet (starting up, or a
    // short command ending): try again for a while before giving up.
    let deadline = std::time::Instant::now() + config.held_home_wait;
    loop {
        match Runtime::open(&cli.home, config.clone()) {
            Ok(rt) => {
                // On a shared store, processes reach each other through the store.
                let server = if rt.is_shared() {
                    None
                } else {
                    control::serve(rt.clone())
                };
                let code = exec(&rt, cmd, &mut out).await;
                if let Some(server) = server {
                    server.finish(&mut out).await;
                }
                // What this process still drives is left for a `weft worker`.
                rt.close().await;
                // The process exits without dropping the store (tasks still hold it): leave
                // nothing for the next one to replay.
                if let Err(e) = rt.checkpoint().await {
                    tracing::warn!("{e}; the next weft command replays it");
                }
                return code;
            }
            Err(open_err) => {
                // `serve` must hold the home itself (and `dev` needs none); everything else is
                // served by the holder.
                if config.store.is_none()
                    && !matches!(cmd, Cmd::Serve { .. } | Cmd::Dev(_) | Cmd::New { .. })
                    && let Some(code) = control::forward(&cli.home, &cmd, &mut out).await
                {
                    return code;
                }
                let held = matches!(open_err, RuntimeError::Store(StoreError::Held(_)));
                if !held || std::time::Instant::now() > deadline {
                    let fix = if open_err.is_disk_full() {
                        "; free space on that disk, then try again"
                    } else {
                        ""
                    };
                    let what = match &config.store {
                        Some(url) => format!("the store {url:?}"),
                        None => format!("home {}", cli.home.display()),
                    };
                    out.err(&format!("error: cannot open {what}: {open_err}{fix}"));
                    return EXIT_USAGE;
                }
                tokio::time::sleep(config.held_home_pause).await;
            }
        }
    }
}

/// Makes every path in a command absolute, so another process can serve it.
fn absolutize(mut cmd: Cmd) -> Cmd {
    let abs = |p: &mut PathBuf| {
        if let Ok(a) = std::path::absolute(&*p) {
            *p = a;
        }
    };
    match &mut cmd {
        Cmd::Run {
            file, input_file, ..
        } => file.iter_mut().chain(input_file.iter_mut()).for_each(abs),
        Cmd::Validate { file }
        | Cmd::Graph { file, .. }
        | Cmd::Plugin(PluginCmd::Inspect { file }) => abs(file),
        Cmd::Plugin(PluginCmd::Compile { files }) => files.iter_mut().for_each(abs),
        _ => {}
    }
    cmd
}

/// Carries out one command against a runtime that holds the home.
pub async fn exec(rt: &Runtime, cmd: Cmd, out: &mut dyn Output) -> i32 {
    match cmd {
        Cmd::Run {
            file,
            from_step,
            of,
            input,
            input_file,
            run_id,
            json,
            detach,
        } => {
            // A file may hold the input pretty-printed: up to four times its compact limit.
            let most = rt.config().max_input_bytes.saturating_mul(4);
            let input = match read_input(input, input_file, most) {
                Ok(v) => v,
                Err(e) => {
                    out.err(&format!("error: {e}"));
                    return EXIT_USAGE;
                }
            };
            match (file, from_step, of) {
                (file, Some(step), Some(of)) => {
                    rerun(rt, file.as_deref(), &step, &of, input, run_id, json, out).await
                }
                (Some(file), _, _) => {
                    run(
                        rt,
                        &file,
                        input.unwrap_or_else(|| json!({})),
                        run_id,
                        json,
                        detach,
                        out,
                    )
                    .await
                }
                (None, _, _) => {
                    out.err("error: name a workflow FILE, or use --from-step PATH --of RUN-ID");
                    EXIT_USAGE
                }
            }
        }
        Cmd::Resume {
            run_id,
            step,
            label,
            foreach_index,
            data,
            json,
        } => resume(rt, &run_id, step, label, foreach_index, data, json, out).await,
        Cmd::Cancel { run_id } => match rt.cancel(&run_id).await {
            Ok(()) => {
                out.err(&format!("cancel of run {run_id} accepted"));
                EXIT_OK
            }
            Err(e) => refuse(out, &e),
        },
        Cmd::Runs { workflow, status } => {
            let status = match status.as_deref().map(|s| (s, RunStatus::parse(s))) {
                Some((s, None)) => {
                    out.err(&format!("error: unknown status `{s}`; use one of pending, running, suspended, success, failed, cancelled, tripwire"));
                    return EXIT_USAGE;
                }
                Some((_, parsed)) => parsed,
                None => None,
            };
            match rt.runs(workflow.as_deref(), status) {
                Ok(runs) => {
                    for r in runs {
                        out.line(&format!(
                            "{}  {:<24} {:<10} {}",
                            r.run_id,
                            r.workflow_id,
                            r.status,
                            crate::engine::rfc3339(r.created_at)
                        ));
                    }
                    EXIT_OK
                }
                Err(e) => refuse(out, &e),
            }
        }
        Cmd::Show { run_id, json } => match rt.show(&run_id).await {
            Ok(record) => {
                print_record(out, &record, json);
                EXIT_OK
            }
            Err(e) => refuse(out, &e),
        },
        Cmd::Watch {
            run_id,
            from_seq,
            follow,
        } => {
            let watched = if follow {
                rt.watch(&run_id, from_seq)
            } else {
                rt.watch_settled(&run_id, from_seq)
            };
            let mut rx = match watched {
                Ok(rx) => rx,
                Err(e) => return refuse(out, &e),
            };
            while let Some(ev) = rx.recv().await {
                out.line(&serde_json::to_string(&*ev).unwrap_or_default());
            }
            EXIT_OK
        }
        Cmd::Worker { concurrency } => {
            if !rt.is_shared() {
                out.err(&format!("error: {}", RuntimeError::NotShared));
                return EXIT_USAGE;
            }
            out.err(&format!(
                "worker {} driving up to {concurrency} runs",
                rt.shared_worker_id().unwrap_or_default()
            ));
            let report = |r: Recovery| print_recovery(&mut StdOutput, &r);
            match rt.work(concurrency.max(1), shutdown_signal(), report).await {
                Ok(()) => EXIT_OK,
                Err(e) => {
                    out.err(&format!("error: {e}"));
                    EXIT_FAILED
                }
            }
        }
        Cmd::Validate { file } => match load_workflow(&file, rt.host()).await {
            Ok(w) => {
                out.line(&format!(
                    "ok: {} (workflow {}, {} entries, {} plugins)",
                    file.display(),
                    w.graph.workflow_id(),
                    w.graph.entries.len(),
                    w.plugins.len()
                ));
                EXIT_OK
            }
            Err(e) => {
                out.err(&format!("error: {e}"));
                EXIT_USAGE
            }
        },
        Cmd::Graph { file, format } => {
            let format = match format.as_str() {
                "mermaid" => Format::Mermaid,
                "dot" => Format::Dot,
                other => {
                    out.err(&format!(
                        "error: unknown format `{other}`; use mermaid or dot"
                    ));
                    return EXIT_USAGE;
                }
            };
            match load_workflow(&file, rt.host()).await {
                Ok(w) => {
                    out.line(draw(&w.graph, format).trim_end());
                    EXIT_OK
                }
                Err(e) => {
                    out.err(&format!("error: {e}"));
                    EXIT_USAGE
                }
            }
        }
        Cmd::Serve {
            addr,
            workflows,
            token_env,
            allow_hosts,
            cors_origins,
            max_connections,
            max_followers,
            max_body_bytes,
            header_timeout_s,
        } => {
            let (listener, bound) = match listen(&addr).await {
                Ok(l) => l,
                Err(message) => {
                    out.err(&message);
                    return EXIT_USAGE;
                }
            };
            let token = match token_env {
                Some(name) => match std::env::var(&name) {
                    Ok(t) if !t.trim().is_empty() => Some(t.trim().to_owned()),
                    _ => {
                        out.err(&format!(
                            "error: --token-env {name}: the environment variable {name} is not set or empty; set it to the token writes must carry"
                        ));
                        return EXIT_USAGE;
                    }
                },
                None if !crate::server::is_loopback(&bound) => {
                    match crate::server::generate_token() {
                        Ok(t) => {
                            out.err(&format!(
                                "writes (start, resume, cancel) need this token: `Authorization: Bearer {t}`; give your own with --token-env NAME"
                            ));
                            Some(t)
                        }
                        Err(e) => {
                            out.err(&format!("error: cannot make a token: {e}"));
                            return EXIT_FAILED;
                        }
                    }
                }
                None => None,
            };
            let mut config = crate::server::ServeConfig::default()
                .with_max_connections(max_connections)
                .with_max_followers(max_followers)
                .with_max_body_bytes(max_body_bytes)
                .with_header_timeout(std::time::Duration::from_secs(header_timeout_s.max(1)));
            config.workflows = workflows;
            config.token = token;
            config.allowed_hosts = allow_hosts;
            config.cors_origins = cors_origins;
            match rt.recover_all().await {
                Ok(report) => print_recovery(out, &report),
                Err(e) => out.err(&format!("error: cannot list the runs to recover: {e}")),
            }
            out.err(&format!(
                "serving http://{bound} (home {})",
                rt.home().display()
            ));
            // On a shared store, the server is also a worker: it takes up runs whose process
            // ended, as it recovered them at start (S129).
            let work = async {
                if rt.is_shared() {
                    let report = |r: Recovery| print_recovery(&mut StdOutput, &r);
                    let _ = rt
                        .work(SERVE_CONCURRENCY, std::future::pending(), report)
                        .await;
                }
                std::future::pending::<()>().await;
            };
            tokio::select! {
                r = crate::server::serve(rt.clone(), listener, config) => {
                    if let Err(e) = r {
                        out.err(&format!("error: {e}"));
                        return EXIT_FAILED;
                    }
                }
                () = work => {}
                () = shutdown_signal() => out.err("stopping"),
            }
            EXIT_OK
        }
        Cmd::Dev(dev) => dev_command(dev, out).await,
        Cmd::New {
            kind,
            name,
            lang,
            dir,
            lean,
        } => new::command(kind, &name, lang, lean, dir, out),
        Cmd::Plugin(PluginCmd::Compile { files }) => {
            for file in files {
                let started = std::time::Instant::now();
                match rt.host().load_file(&file, None).await {
                    Ok(p) => out.line(&format!(
                        "{}: {} ready in {} ms",
                        file.display(),
                        p.digest(),
                        started.elapsed().as_millis()
                    )),
                    Err(e) => {
                        out.err(&format!("error: {e}"));
                        return EXIT_USAGE;
                    }
                }
            }
            EXIT_OK
        }
        Cmd::Plugin(PluginCmd::Inspect { file }) => match rt.host().load_file(&file, None).await {
            Ok(p) => {
                let info = json!({
                    "digest": p.digest(),
                    "steps": p.steps(),
                    "tools": p.tools(),
                });
                out.line(&serde_json::to_string_pretty(&info).unwrap_or_default());
                EXIT_OK
            }
            Err(e) => {
                out.err(&format!("error: {e}"));
                EXIT_USAGE
            }
        },
    }
}

/// A listener on `addr` and the address it got; the refusal to print when there is none.
async fn listen(addr: &str) -> Result<(tokio::net::TcpListener, std::net::SocketAddr), String> {
    let cannot = |e: std::io::Error| format!("error: cannot listen on {addr}: {e}");
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(cannot)?;
    let bound = listener.local_addr().map_err(cannot)?;
    Ok((listener, bound))
}

/// Carries out a `weft dev` command.
async fn dev_command(cmd: DevCmd, out: &mut dyn Output) -> i32 {
    match cmd {
        DevCmd::Model { script, addr } => {
            let script = match crate::dev_model::Script::from_file(&script) {
                Ok(s) => s,
                Err(e) => {
                    out.err(&format!("error: {e}"));
                    return EXIT_USAGE;
                }
            };
            let (listener, bound) = match listen(&addr).await {
                Ok(l) => l,
                Err(message) => {
                    out.err(&message);
                    return EXIT_USAGE;
                }
            };
            out.err(&format!(
                "model double on http://{bound} (OpenAI: /v1/chat/completions, Anthropic: /v1/messages)"
            ));
            tokio::select! {
                r = crate::dev_model::serve(listener, script) => {
                    if let Err(e) = r {
                        out.err(&format!("error: {e}"));
                        return EXIT_FAILED;
                    }
                }
                _ = tokio::signal::ctrl_c() => out.err("stopping"),
            }
            EXIT_OK
        }
    }
}

/// Tells what a recovery did: the runs recovered, and each that could not be, with what next.
fn print_recovery(out: &mut dyn Output, report: &Recovery) {
    let ids = &report.recovered;
    if !ids.is_empty() {
        out.err(&format!("recovered {} runs: {}", ids.len(), ids.join(", ")));
    }
    for failed in &report.failed {
        let then = if failed.marked_failed {
            "it is marked failed".to_owned()
        } else {
            format!(
                "it is left as it was; once the cause is fixed, recover it with `weft resume {}`",
                failed.run_id
            )
        };
        out.err(&format!(
            "error: run {} cannot be recovered: {}; {then}",
            failed.run_id, failed.error
        ));
    }
}

/// The runs `weft serve` drives at once as a worker of a shared store before it takes up more.
const SERVE_CONCURRENCY: usize = 64;

/// Completes at Ctrl-C or SIGTERM (what a service manager sends to stop a process).
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

/// Prints a refusal and gives exit code 2; invalid data lists each violation on its own line.
fn refuse(out: &mut dyn Output, e: &RuntimeError) -> i32 {
    out.err(&format!("error: {e}"));
    if let RuntimeError::Refused(Refusal::InvalidData { violations, .. }) = e {
        for v in violations {
            let path = if v.path.is_empty() { "/" } else { &v.path };
            out.err(&format!("{path}: {}", v.message));
        }
    }
    EXIT_USAGE
}

fn parse_json(text: &str, what: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("{what} is not valid JSON: {e}"))
}

/// The run input of `--input`, or of `--input-file` (a regular file of at most `most` bytes).
fn read_input(
    input: Option<String>,
    input_file: Option<PathBuf>,
    most: u64,
) -> Result<Option<Value>, String> {
    match (input, input_file) {
        (Some(text), _) => parse_json(&text, "--input").map(Some),
        (None, Some(path)) => crate::limits::files::read_at_most(&path, most)
            .map_err(|e| {
                format!(
                    "cannot read --input-file {}: {e} (four times --max-input-mib)",
                    path.display()
                )
            })
            .and_then(|bytes| {
                String::from_utf8(bytes).map_err(|_| "--input-file is not UTF-8 text".to_owned())
            })
            .and_then(|t| parse_json(&t, "--input-file"))
            .map(Some),
        (None, None) => Ok(None),
    }
}

#[allow(clippy::too_many_arguments)]
async fn rerun(
    rt: &Runtime,
    file: Option<&Path>,
    step: &str,
    of: &str,
    input: Option<Value>,
    run_id: Option<String>,
    json: bool,
    out: &mut dyn Output,
) -> i32 {
    let workflow = match file {
        Some(file) => match load_workflow(file, rt.host()).await {
            Ok(w) => Some(w),
            Err(e) => {
                out.err(&format!("error: {e}"));
                return EXIT_USAGE;
            }
        },
        None => None,
    };
    match rt.rerun(of, step, workflow.as_ref(), input, run_id).await {
        Ok(id) => {
            out.started(&id);
            follow_run(rt, &id, 1, json, out).await
        }
        Err(e) => refuse(out, &e),
    }
}

#[allow(clippy::too_many_arguments)]
async fn run(
    rt: &Runtime,
    file: &Path,
    input: Value,
    run_id: Option<String>,
    json: bool,
    detach: bool,
    out: &mut dyn Output,
) -> i32 {
    let workflow = match load_workflow(file, rt.host()).await {
        Ok(w) => w,
        Err(e) => {
            out.err(&format!("error: {e}"));
            return EXIT_USAGE;
        }
    };
    if detach {
        return match rt.submit(&workflow, input, run_id).await {
            Ok(id) => {
                out.line(&id);
                EXIT_OK
            }
            Err(e) => refuse(out, &e),
        };
    }
    let run_id = match rt.start(&workflow, input, run_id).await {
        Ok(id) => id,
        Err(e) => return refuse(out, &e),
    };
    out.started(&run_id);
    follow_run(rt, &run_id, 1, json, out).await
}

#[allow(clippy::too_many_arguments)]
async fn resume(
    rt: &Runtime,
    run_id: &str,
    step: Option<String>,
    label: Option<String>,
    foreach_index: Option<u32>,
    data: Option<String>,
    json: bool,
    out: &mut dyn Output,
) -> i32 {
    let data_value = match data.as_deref().map(|d| parse_json(d, "--data")).transpose() {
        Ok(v) => v,
        Err(e) => {
            out.err(&format!("error: {e}"));
            return EXIT_USAGE;
        }
    };
    let from = match rt.watch_settled(run_id, 1) {
        Ok(mut rx) => {
            let mut last = 0;
            while let Ok(ev) = rx.try_recv() {
                last = ev.seq;
            }
            last + 1
        }
        Err(e) => return refuse(out, &e),
    };
    let bare = step.is_none() && label.is_none() && foreach_index.is_none() && data.is_none();
    let request = (!bare).then(|| ResumeRequest {
        step,
        label,
        foreach_index,
        data: data_value.unwrap_or_else(|| json!({})),
    });
    match rt.resume_or_recover(run_id, request).await {
        Ok(()) => follow_run(rt, run_id, from, json, out).await,
        Err(e) => refuse(out, &e),
    }
}

/// Prints progress from `from` on to stderr until the run ends or suspends, then the result.
async fn follow_run(
    rt: &Runtime,
    run_id: &str,
    from: u64,
    json: bool,
    out: &mut dyn Output,
) -> i32 {
    if let Ok(mut rx) = rt.watch_settled(run_id, from) {
        let mut progress = output::Progress::default();
        while let Some(ev) = rx.recv().await {
            progress.show(out, &ev, rt.config().progress_data_bytes);
        }
        progress.end(out);
    }
    let record = match rt.wait(run_id).await {
        Ok(r) => r,
        Err(e @ RuntimeError::Halted { .. }) => {
            out.err(&format!("error: {e}"));
            return EXIT_INTERRUPTED;
        }
        Err(e) => return refuse(out, &e),
    };
    print_record(out, &record, json);
    exit_code(record.status)
}

/// The exit code of `run` and `resume` for a status (S105).
pub fn exit_code(status: RunStatus) -> i32 {
    match status {
        RunStatus::Success => EXIT_OK,
        RunStatus::Failed => EXIT_FAILED,
        RunStatus::Suspended => EXIT_SUSPENDED,
        RunStatus::Cancelled => EXIT_CANCELLED,
        RunStatus::Tripwire => EXIT_TRIPWIRE,
        RunStatus::Running | RunStatus::Pending => EXIT_OK,
    }
}

fn print_record(out: &mut dyn Output, record: &RunRecord, json: bool) {
    if json {
        out.line(&serde_json::to_string(record).unwrap_or_default());
        return;
    }
    out.line(&format!(
        "run {} ({}): {}",
        record.run_id, record.workflow_id, record.status
    ));
    for (path, step) in &record.steps {
        let status = serde_json::to_value(step.status).unwrap_or_default();
        out.line(&format!(
            "  {path:<32} {}",
            status.as_str().unwrap_or_default()
        ));
    }
    if let Some(result) = &record.result {
        out.line(&format!(
            "result: {}",
            serde_json::to_string_pretty(result).unwrap_or_default()
        ));
    }
    if let Some(error) = &record.error {
        out.line(&format!(
            "error: [{}] {} (at {})",
            error.code, error.message, error.step
        ));
    }
    if let Some(t) = &record.tripwire {
        out.line(&format!("tripwire: {}", t.reason));
    }
    if let Some(suspended) = &record.suspended {
        for s in suspended {
            out.line(&format!(
                "suspended: {}{} labels {:?} payload {}",
                s.path,
                s.foreach_index
                    .map(|i| format!(" [item {i}]"))
                    .unwrap_or_default(),
                s.labels,
                s.payload
            ));
        }
        out.line(&format!(
            "resume with: weft resume {} --data '{{...}}'",
            record.run_id
        ));
    }
}
