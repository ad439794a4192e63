//! `weft plugin inspect|compile`: what a component exports, and compiling components into the
//! plugin cache ahead of their first run.

use std::path::PathBuf;

use clap::Subcommand;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::cli::{EXIT_OK, EXIT_USAGE, Output};
use crate::driver::Runtime;

/// `weft plugin ...`.
#[derive(Debug, Clone, Subcommand, Serialize, Deserialize)]
pub enum PluginCmd {
    /// The steps and tools a plugin exports, with their schemas.
    #[command(after_help = "Examples:\n  weft plugin inspect examples/plugins/text.wasm")]
    Inspect {
        /// The component.
        file: PathBuf,
    },
    /// Compile components into the plugin cache ahead of their first run (with
    /// `--plugin-cache DIR`, for every home sharing that directory).
    #[command(
        after_help = "Examples:\n  weft plugin compile examples/plugins/*.wasm\n  weft --plugin-cache /var/cache/weft plugin compile plugins/*.wasm"
    )]
    Compile {
        /// The components.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// Carries out a `weft plugin` command.
pub(crate) async fn exec(rt: &Runtime, cmd: PluginCmd, out: &mut dyn Output) -> i32 {
    match cmd {
        PluginCmd::Compile { files } => {
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
        PluginCmd::Inspect { file } => match rt.host().load_file(&file, None).await {
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
