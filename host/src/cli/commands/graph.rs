//! `weft graph`: draw a workflow as a Mermaid flowchart or a Graphviz digraph.

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

use crate::cli::{EXIT_OK, EXIT_USAGE, Output};
use crate::driver::Runtime;
use crate::engine::draw::DrawingFormat;
use crate::workflow::load_workflow;

/// The arguments of `weft graph`.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(
    after_help = "Examples:\n  weft graph examples/approval.yaml > approval.mmd\n  weft graph examples/approval.yaml --format dot | dot -Tsvg > approval.svg"
)]
pub struct GraphArgs {
    /// The workflow file.
    pub file: PathBuf,
    /// `mermaid` or `dot`.
    #[arg(long, default_value = "mermaid")]
    pub format: String,
}

/// Carries out `weft graph`.
pub(crate) async fn exec(rt: &Runtime, args: GraphArgs, out: &mut dyn Output) -> i32 {
    let GraphArgs { file, format } = args;
    let format = match format.as_str() {
        "mermaid" => DrawingFormat::Mermaid,
        "dot" => DrawingFormat::Dot,
        other => {
            out.err(&format!(
                "error: unknown format `{other}`; use mermaid or dot"
            ));
            return EXIT_USAGE;
        }
    };
    match load_workflow(&file, rt.host()).await {
        Ok(w) => {
            out.line(w.graph.draw(format).trim_end());
            EXIT_OK
        }
        Err(e) => {
            out.err(&format!("error: {e}"));
            EXIT_USAGE
        }
    }
}
