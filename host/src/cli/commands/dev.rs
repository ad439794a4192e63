//! `weft dev ...`: development aids, run in this process and never forwarded to the process
//! holding the home; they need no home.

use std::path::PathBuf;

use clap::Subcommand;
use serde::{Deserialize, Serialize};

use super::service::listen;
use crate::cli::{EXIT_FAILED, EXIT_OK, EXIT_USAGE, Output};

/// `weft dev ...`: run in this process, never forwarded to the process holding the home.
#[derive(Debug, Clone, Subcommand, Serialize, Deserialize)]
pub enum DevCmd {
    /// Serve a scripted model double: an OpenAI-compatible (`/v1/chat/completions`) and
    /// Anthropic-compatible (`/v1/messages`) server replaying the script's conversations
    /// (docs/MODEL-DOUBLE.md), until Ctrl-C.
    #[command(
        after_help = "Examples:\n  weft dev model --script examples/agent/script.yaml --addr 127.0.0.1:8077\n  (then point a model's `base-url:` at http://127.0.0.1:8077/v1)"
    )]
    Model {
        /// The script (YAML).
        #[arg(long, value_name = "FILE")]
        script: PathBuf,
        /// Where to listen (port 0: any free port; the address is printed).
        #[arg(long, default_value = "127.0.0.1:0")]
        addr: String,
    },
}

/// Carries out a `weft dev` command.
pub(crate) async fn exec(cmd: DevCmd, out: &mut dyn Output) -> i32 {
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
                "model double on http://{bound} (OpenAI: /v1/chat/completions, Anthropic: /v1/messages and /v1/messages/count_tokens, both: /v1/models)"
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
