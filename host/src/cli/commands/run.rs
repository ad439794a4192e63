//! `weft run`: start a run of a workflow file and follow it until it ends or suspends; with
//! `--from-step`, a new run from a step of an ended run; with `--detach`, only store it.

use std::path::{Path, PathBuf};

use clap::Args;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::record::follow_run;
use super::{parse_json, refuse};
use crate::cli::{EXIT_OK, EXIT_USAGE, Output, RunIdArg};
use crate::driver::{Runtime, StartOptions};
use crate::workflow::load_workflow;

/// The arguments of `weft run`.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(
    after_help = "Examples:\n  weft run examples/quickstart.yaml\n  weft run examples/quickstart.yaml --input '{\"text\": \"hello\"}'\n  weft run flow.yaml --input-file input.json --json > record.json\n  weft run --from-step route.approve --of 01JABCDEF...\n  weft run flow.yaml --tag team:payments --tag customer:acme"
)]
pub struct RunArgs {
    /// The workflow file (optional with --from-step: the source's stored definition).
    pub file: Option<PathBuf>,
    /// Re-run from this step of the run given by --of.
    #[arg(long, requires = "of")]
    pub from_step: Option<String>,
    /// The ended run to re-run from.
    #[arg(long, requires = "from_step", value_parser = RunIdArg, allow_hyphen_values = true)]
    pub of: Option<String>,
    /// The run input (JSON).
    #[arg(long, conflicts_with = "input_file")]
    pub input: Option<String>,
    /// A file holding the run input (JSON).
    #[arg(long)]
    pub input_file: Option<PathBuf>,
    /// The run's id (default: a new ULID): 1 to 128 characters of A-Z a-z 0-9 . _ -, not
    /// starting with `.`.
    #[arg(long, value_parser = RunIdArg, allow_hyphen_values = true)]
    pub run_id: Option<String>,
    /// A tag of the new run, `key:value` (repeat for more): `weft runs --tag` finds it.
    #[arg(long = "tag", value_name = "KEY:VALUE", value_parser = crate::tags::parse_tag)]
    #[serde(default)]
    pub tags: Vec<(String, String)>,
    /// Print exactly one run record on stdout.
    #[arg(long)]
    pub json: bool,
    /// Store the run for a `weft worker` to drive and print its id, without waiting (a
    /// store processes share only: --store postgres://...).
    #[arg(long, conflicts_with_all = ["from_step", "json"])]
    #[serde(default)]
    pub detach: bool,
}

/// Carries out `weft run`.
pub(crate) async fn exec(rt: &Runtime, args: RunArgs, out: &mut dyn Output) -> i32 {
    let RunArgs {
        file,
        from_step,
        of,
        input,
        input_file,
        run_id,
        tags,
        json,
        detach,
    } = args;
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
            let options = StartOptions {
                run_id,
                tags: tags.into_iter().collect(),
            };
            run(
                rt,
                &file,
                input.unwrap_or_else(|| json!({})),
                options,
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

async fn run(
    rt: &Runtime,
    file: &Path,
    input: Value,
    options: StartOptions,
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
        return match rt.submit_with(&workflow, input, options).await {
            Ok(id) => {
                out.line(&id);
                EXIT_OK
            }
            Err(e) => refuse(out, &e),
        };
    }
    let run_id = match rt.start_with(&workflow, input, options).await {
        Ok(id) => id,
        Err(e) => return refuse(out, &e),
    };
    out.started(&run_id);
    follow_run(rt, &run_id, 1, json, out).await
}
