//! The command line (WORKFLOW-FORMAT.md §2): parsing, and each command against a runtime.
//!
//! A command runs against the process that holds the home: this one when it can open the home,
//! else the holder, reached through the control socket in the home (S118). Either way the
//! command writes through an [`Output`], so the text and exit code are the same.
//!
//! This file holds the parser ([`Cli`], [`Cmd`]), the exit codes, opening the home or
//! forwarding to its holder ([`main`]), and the dispatch of a command to its `exec`
//! ([`exec`]). Each command's arguments and `exec` are in a file of its own under `commands/`
//! (`weft new`, with its templates, under `commands/new/`); `control` is the control socket,
//! `output` where text goes, `live` the progress display on a terminal.

mod commands;
mod control;
mod live;
mod output;
pub mod telemetry;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use serde::{Deserialize, Serialize};

use crate::driver::{Runtime, RuntimeConfig, RuntimeError};
use crate::engine::expr::{DEFAULT_MEMORY_BUDGET, DEFAULT_STEP_BUDGET};
use crate::limits::{DEFAULT_MAX_RUN_BYTES, DEFAULT_MAX_VALUE_BYTES, MIB};
use crate::models::{
    DEFAULT_MODEL_MAX_EVENTS, DEFAULT_MODEL_MAX_LINE_KIB, DEFAULT_MODEL_TIMEOUT_MS, ModelConfig,
};
use crate::run_id::check_run_id;
use crate::store::StoreError;

pub use commands::bulk::{BulkCmd, FilterArgs};
pub use commands::cancel::CancelArgs;
pub use commands::dev::DevCmd;
pub use commands::graph::GraphArgs;
pub use commands::new::{self, NewArgs};
pub use commands::plugin::PluginCmd;
pub use commands::prune::PruneArgs;
pub use commands::record::exit_code;
pub use commands::resume::ResumeArgs;
pub use commands::run::RunArgs;
pub use commands::runs::RunsArgs;
pub use commands::serve::ServeArgs;
pub use commands::show::ShowArgs;
pub use commands::validate::ValidateArgs;
pub use commands::watch::WatchArgs;
pub use commands::worker::WorkerArgs;
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
#[command(
    name = "weft",
    version,
    about,
    next_help_heading = GLOBAL_OPTIONS,
    after_help = "Examples:\n  weft run examples/quickstart.yaml\n  weft runs --status suspended\n  weft serve --workflows examples\n\n`weft COMMAND --help` shows a command's options and examples."
)]
pub struct Cli {
    /// The home directory (database and plugin cache).
    #[arg(long, global = true, env = "WEFT_HOME", default_value = ".weft")]
    pub home: PathBuf,
    /// The most steps one jq expression may take before it fails; applies to the runs this
    /// process drives.
    #[arg(long, global = true, hide_short_help = true, env = "WEFT_EXPR_STEPS", default_value_t = DEFAULT_STEP_BUDGET)]
    pub expr_steps: u64,
    /// The most memory one jq expression may hold while it is evaluated, in MiB; applies to
    /// the runs this process drives.
    #[arg(
        long,
        global = true,
        hide_short_help = true,
        env = "WEFT_EXPR_MEMORY_MIB",
        default_value_t = DEFAULT_MEMORY_BUDGET / MIB
    )]
    pub expr_memory_mib: u64,
    /// The largest run input accepted, in MiB.
    #[arg(long, global = true, hide_short_help = true, default_value_t = DEFAULT_MAX_VALUE_BYTES / MIB)]
    pub max_input_mib: u64,
    /// The largest value a run makes, in MiB: what a step returns (output, payload, failure,
    /// each state patch) and what an expression yields (a map's value, a step's input). A run
    /// keeps the limit it started with.
    #[arg(long, global = true, hide_short_help = true, default_value_t = DEFAULT_MAX_VALUE_BYTES / MIB)]
    pub max_output_mib: u64,
    /// The largest a workflow file's state may grow by a step's patches, in MiB.
    #[arg(long, global = true, hide_short_help = true, default_value_t = DEFAULT_MAX_VALUE_BYTES / MIB)]
    pub max_state_mib: u64,
    /// The largest resume data accepted, in MiB.
    #[arg(long, global = true, hide_short_help = true, default_value_t = DEFAULT_MAX_VALUE_BYTES / MIB)]
    pub max_resume_mib: u64,
    /// The most records one run may write in all, in MiB: past it the run is stopped and
    /// fails with `run-limit`.
    #[arg(long, global = true, hide_short_help = true, default_value_t = DEFAULT_MAX_RUN_BYTES / MIB)]
    pub max_run_mib: u64,
    /// The memory the plugins' guests of this process may hold at once, in MiB: each invocation
    /// reserves its `limits.memory-mib` and waits while the rest is in use (default: half the
    /// machine's memory, 8 GiB where it cannot be read).
    #[arg(
        long,
        global = true,
        hide_short_help = true,
        env = "WEFT_GUEST_MEMORY_MIB",
        value_name = "MIB",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub guest_memory_mib: Option<u64>,
    /// The deadline of a model call whose step sets no `timeout-ms`, in milliseconds.
    #[arg(long, global = true, hide_short_help = true, value_name = "MS", default_value_t = DEFAULT_MODEL_TIMEOUT_MS)]
    pub model_timeout_ms: u64,
    /// The longest line of a model's event stream, in KiB; a longer one fails the call.
    #[arg(long, global = true, hide_short_help = true, value_name = "KIB", default_value_t = DEFAULT_MODEL_MAX_LINE_KIB)]
    pub model_max_line_kib: usize,
    /// The most pieces (text and tool-call fragments) one model call may stream.
    #[arg(long, global = true, hide_short_help = true, value_name = "N", default_value_t = DEFAULT_MODEL_MAX_EVENTS)]
    pub model_max_events: u64,
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

/// The heading of the options every command takes, apart from each command's own.
const GLOBAL_OPTIONS: &str = "Global options";

impl Cli {
    /// Parses this process's arguments, exiting with clap's message (and code 2) when they do not
    /// parse, as `clap::Parser::parse` does; the help of a command that opens no home (`new`,
    /// `dev`) lists none of the options about the home.
    pub fn from_args() -> Self {
        let matches = command().get_matches();
        <Self as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }

    /// The runtime settings the options give. They apply when this process holds the home; a
    /// command served by another process runs with that process's settings.
    pub fn runtime_config(&self) -> RuntimeConfig {
        RuntimeConfig {
            max_input_bytes: self.max_input_mib.saturating_mul(MIB),
            max_output_bytes: self.max_output_mib.saturating_mul(MIB),
            max_state_bytes: self.max_state_mib.saturating_mul(MIB),
            max_resume_bytes: self.max_resume_mib.saturating_mul(MIB),
            max_run_bytes: self.max_run_mib.saturating_mul(MIB),
            expr_steps: self.expr_steps,
            expr_memory_bytes: self.expr_memory_mib.saturating_mul(MIB),
            models: ModelConfig {
                timeout: std::time::Duration::from_millis(self.model_timeout_ms),
                max_line_bytes: self.model_max_line_kib.saturating_mul(1024),
                max_events: self.model_max_events,
            },
            crash_after_commits: self.crash_after_commits,
            store: self.store.clone().filter(|s| !s.is_empty()).map(Into::into),
            host: crate::plugin::HostConfig::default()
                .with_cache_dir(
                    self.plugin_cache
                        .as_ref()
                        .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone())),
                )
                .with_guest_memory_mib(self.guest_memory_mib)
                .with_compile_notice(Some(crate::plugin::CompileNotice(std::sync::Arc::new(
                    |what: &str| eprintln!("note: {what}"),
                )))),
            ..RuntimeConfig::default()
        }
    }
}

/// The commands.
#[derive(Debug, Clone, Subcommand, Serialize, Deserialize)]
pub enum Cmd {
    /// Start a run and wait until it ends or suspends; with --from-step, a new run from a step
    /// of an ended run.
    Run(RunArgs),
    /// Resume a suspended run (with no selector and no data, also recover an orphaned one).
    Resume(ResumeArgs),
    /// Cancel a pending, running or suspended run.
    Cancel(CancelArgs),
    /// List runs.
    Runs(RunsArgs),
    /// Delete ended runs older than a duration, and give their room back.
    Prune(PruneArgs),
    /// Cancel or resume every run a filter matches.
    #[command(subcommand)]
    Bulk(BulkCmd),
    /// Show one run.
    Show(ShowArgs),
    /// Print a run's events, past then live, one JSON object a line.
    Watch(WatchArgs),
    /// Check a workflow file and every file and plugin it names.
    Validate(ValidateArgs),
    /// Draw a workflow as a Mermaid flowchart or a Graphviz digraph.
    Graph(GraphArgs),
    /// Serve the HTTP API and the web view; recover every run no process drives (S101), and on
    /// a shared store go on taking up runs whose process ended, as `weft worker` does.
    Serve(ServeArgs),
    /// Drive runs no live process drives, on a store processes share (--store postgres://...):
    /// runs whose process ended or stopped answering, taken up and recovered (S101), until
    /// stopped with Ctrl-C or SIGTERM; then its runs are left for other workers.
    Worker(WorkerArgs),
    /// Plugins.
    #[command(subcommand)]
    Plugin(PluginCmd),
    /// Development aids; they need no home.
    #[command(subcommand)]
    Dev(DevCmd),
    /// Write a ready plugin project `DIR/NAME` (docs/PLUGINS.md); needs no home.
    New(NewArgs),
}

/// The command line's parser, as [`Cli::from_args`] uses it.
pub fn command() -> clap::Command {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    // Global options reach every subcommand when the parser is built; hide them, once there,
    // in the help of the commands that never open a home.
    cmd.build();
    let hide_globals =
        |sub: clap::Command| sub.mut_args(|a| if a.is_global_set() { a.hide(true) } else { a });
    let mut cmd = cmd.mut_subcommand("new", hide_globals);
    cmd = cmd.mut_subcommand("dev", |dev| {
        let names: Vec<String> = dev
            .get_subcommands()
            .map(|s| s.get_name().to_owned())
            .collect();
        names
            .iter()
            .fold(hide_globals(dev), |d, n| d.mut_subcommand(n, hide_globals))
    });
    cmd
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

/// How long a command waits, once done, for the home to close (a last checkpoint, the runs it
/// drives let go) before its process exits anyway.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Runs the command line; returns the process exit code.
pub async fn main(cli: Cli) -> i32 {
    let mut out = StdOutput;
    let config = cli.runtime_config();
    let cmd = absolutize(cli.command);
    // Development aids and `new` need no home: never open it, never forward them.
    let cmd = match cmd {
        Cmd::Dev(dev) => return commands::dev::exec(dev, &mut out).await,
        Cmd::New(args) => return new::exec(args, &mut out),
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
                let closing = async {
                    if let Some(server) = server {
                        server.finish(&mut out).await;
                    }
                    // What this process still drives is left for a `weft worker`.
                    rt.close().await;
                    // The process exits without dropping the store (tasks still hold it):
                    // leave nothing for the next one to replay.
                    if let Err(e) = rt.checkpoint().await {
                        tracing::warn!("{e}; the next weft command replays it");
                    }
                };
                // Every command ends: what it acknowledged is durable already, and what a
                // closing cut short is replayed by the next process.
                if tokio::time::timeout(CLOSE_WAIT, closing).await.is_err() {
                    tracing::warn!(
                        "closing the home took more than {} s; exiting without waiting: the \
                         next weft command replays what it held",
                        CLOSE_WAIT.as_secs()
                    );
                }
                return code;
            }
            Err(open_err) => {
                // `serve` must hold the home itself (and `dev` needs none); everything else is
                // served by the holder.
                if config.store.is_none()
                    && !matches!(cmd, Cmd::Serve(_) | Cmd::Dev(_) | Cmd::New(_))
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
        Cmd::Run(RunArgs {
            file, input_file, ..
        }) => file.iter_mut().chain(input_file.iter_mut()).for_each(abs),
        Cmd::Validate(ValidateArgs { file })
        | Cmd::Graph(GraphArgs { file, .. })
        | Cmd::Plugin(PluginCmd::Inspect { file }) => abs(file),
        Cmd::Plugin(PluginCmd::Compile { files }) => files.iter_mut().for_each(abs),
        _ => {}
    }
    cmd
}

/// Carries out one command against a runtime that holds the home.
pub async fn exec(rt: &Runtime, cmd: Cmd, out: &mut dyn Output) -> i32 {
    match cmd {
        Cmd::Run(args) => commands::run::exec(rt, args, out).await,
        Cmd::Resume(args) => commands::resume::exec(rt, args, out).await,
        Cmd::Cancel(args) => commands::cancel::exec(rt, args, out).await,
        Cmd::Runs(args) => commands::runs::exec(rt, args, out).await,
        Cmd::Prune(args) => commands::prune::exec(rt, args, out).await,
        Cmd::Bulk(cmd) => commands::bulk::exec(rt, cmd, out).await,
        Cmd::Show(args) => commands::show::exec(rt, args, out).await,
        Cmd::Watch(args) => commands::watch::exec(rt, args, out).await,
        Cmd::Validate(args) => commands::validate::exec(rt, args, out).await,
        Cmd::Graph(args) => commands::graph::exec(rt, args, out).await,
        Cmd::Serve(args) => commands::serve::exec(rt, args, out).await,
        Cmd::Worker(args) => commands::worker::exec(rt, args, out).await,
        Cmd::Plugin(plugin) => commands::plugin::exec(rt, plugin, out).await,
        Cmd::Dev(dev) => commands::dev::exec(dev, out).await,
        Cmd::New(args) => new::exec(args, out),
    }
}
