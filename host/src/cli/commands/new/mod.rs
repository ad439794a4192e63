//! `weft new step|tool NAME`: writes a ready plugin project (docs/PLUGINS.md).
//!
//! The project is written whole or not at all: its files go to a hidden staging directory next
//! to the target, which is renamed into place once every file is written.
//!
//! This file holds the command, its arguments and the placeholders every template shares; each
//! language's templates and files are in a file of their own (`rust`, `python`, `js`), the
//! rule of plugin names in `names`, and the writing of the project in `write`.

mod js;
mod names;
mod python;
mod rust;
mod write;

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};

use crate::cli::{EXIT_OK, EXIT_USAGE, Output};
use js::{COMPONENTIZE_JS_VERSION, JCO_VERSION, PREVIEW2_SHIM_VERSION};
use names::RESERVED_NAMES;
pub use names::check_name;
use python::COMPONENTIZE_PY_VERSION;
use rust::SERDE_VERSION;
use write::{check_free, write_project};

/// The arguments of `weft new`.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(
    after_help = "Examples:\n  weft new step shout\n  weft new tool lookup --lang python --dir plugins\n  weft new step fast --lean"
)]
pub struct NewArgs {
    /// What the plugin exports: a workflow `step` or a `tool`.
    #[arg(value_enum)]
    pub kind: PluginKind,
    /// The plugin's name, also its step's or tool's, its package's and its directory's:
    /// lowercase letters, digits and `-`, starting with a letter.
    pub name: String,
    /// The language: `rust`, `python` (built with componentize-py) or `js` (built with jco).
    #[arg(long, value_enum, default_value = "rust")]
    pub lang: Lang,
    /// Where to make the project's directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Rust only: a lean plugin, built without std and WASI (docs/PLUGINS-RUST-SDK.md,
    /// "Lean mode"): its steps start faster, but it can use no files, environment variables
    /// or HTTP, and its dependencies must build without std.
    #[arg(long)]
    pub lean: bool,
}

/// Carries out `weft new` with its arguments (see [`command`]).
pub fn exec(args: NewArgs, out: &mut dyn Output) -> i32 {
    let NewArgs {
        kind,
        name,
        lang,
        dir,
        lean,
    } = args;
    command(kind, &name, lang, lean, dir, out)
}

/// What the plugin exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginKind {
    /// A workflow step (world `step-plugin`).
    Step,
    /// A tool, called by a `tool:` entry or an agent's model (world `tool-plugin`).
    Tool,
}

impl PluginKind {
    /// The word for it in messages and file names.
    fn word(self) -> &'static str {
        match self {
            PluginKind::Step => "step",
            PluginKind::Tool => "tool",
        }
    }

    /// The WIT world the project's plugin targets.
    fn world(self) -> &'static str {
        match self {
            PluginKind::Step => "step-plugin",
            PluginKind::Tool => "tool-plugin",
        }
    }

    /// The line of a JavaScript project's `weft_sdk.js` that imports `run`: the step-plugin
    /// world has that import, the tool-plugin world has not.
    fn js_run_import(self) -> &'static str {
        match self {
            PluginKind::Step => "import * as run from 'weft:plugin/run@0.1.0';",
            PluginKind::Tool => {
                "// The tool-plugin world has no `run` import (a step project's weft_sdk.js \
                 imports it here).\nconst run = null;"
            }
        }
    }

    /// A run input that suits the generated example.
    fn example_input(self) -> &'static str {
        match self {
            PluginKind::Step => r#"{"name": "Ada"}"#,
            PluginKind::Tool => r#"{"a": 2, "b": 3}"#,
        }
    }
}

/// The language the plugin is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    /// Rust, with weft's Rust SDK (crate `weft-plugin`, vendored into the project).
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with jco (the StarlingMonkey engine).
    Js,
}

impl Lang {
    /// The language's name in messages.
    fn word(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
        }
    }
}

/// The plugin contract, vendored into every project.
const PLUGIN_WIT: &str = include_str!("../../../../../wit/plugin.wit");

/// One file of a project: its path inside the project, its text, whether it is executable.
struct ProjectFile {
    /// Relative to the project directory, `/`-separated.
    path: &'static str,
    /// The file's text.
    text: String,
    /// Whether to mark it executable (on Unix).
    executable: bool,
}

/// Carries out `weft new`: writes the project `DIR/NAME` (DIR: `dir`, else the current
/// directory) and says what to do next. Exit code 0 when written, 2 when refused.
pub fn command(
    kind: PluginKind,
    name: &str,
    lang: Lang,
    lean: bool,
    dir: Option<PathBuf>,
    out: &mut dyn Output,
) -> i32 {
    match create(kind, name, lang, lean, dir) {
        Ok(project) => {
            let shown = project.display();
            out.line(&format!(
                "created the {} {} plugin project {name} in {shown}",
                lang.word(),
                kind.word()
            ));
            out.line("next:");
            out.line(&format!("  cd {shown}"));
            match lang {
                Lang::Python => out.line(&format!(
                    "  ./build.sh          # componentize-py (pip install \
                     componentize-py=={COMPONENTIZE_PY_VERSION}) builds {name}.wasm"
                )),
                Lang::Js => out.line(&format!(
                    "  ./build.sh          # npm install (jco {JCO_VERSION}), then jco \
                     componentize builds {name}.wasm; needs Node.js 20+"
                )),
                Lang::Rust => {
                    out.line("  ./build.sh          # cargo build --release --target wasm32-wasip2")
                }
            }
            out.line(&format!(
                "  weft run workflow.yaml --input '{}'",
                kind.example_input()
            ));
            if lang == Lang::Rust {
                out.line("  cargo test          # the unit tests of the logic");
            }
            EXIT_OK
        }
        Err(message) => {
            out.err(&format!("error: {message}"));
            EXIT_USAGE
        }
    }
}

/// Checks everything, then writes the project; returns its directory, or why nothing was
/// written.
fn create(
    kind: PluginKind,
    name: &str,
    lang: Lang,
    lean: bool,
    dir: Option<PathBuf>,
) -> Result<PathBuf, String> {
    if lean && lang != Lang::Rust {
        return Err(format!(
            "--lean makes a Rust plugin without std; it does not apply to a {} project: leave \
             it out, or use --lang rust",
            lang.word()
        ));
    }
    // Rust's and cargo's reserved names matter to a Rust project only.
    check_name(name).or_else(|e| {
        if lang != Lang::Rust && RESERVED_NAMES.contains(&name) {
            Ok(())
        } else {
            Err(e)
        }
    })?;
    let parent = match dir {
        Some(dir) => dir,
        None => std::env::current_dir()
            .map_err(|e| format!("cannot read the current directory: {e}; give one with --dir"))?,
    };
    let project = parent.join(name);
    check_free(&project)?;
    let files = match lang {
        Lang::Python => python::project_files(kind, name),
        Lang::Js => js::project_files(kind, name),
        Lang::Rust => rust::project_files(kind, name, lean),
    };
    write_project(&parent, &project, name, &files)?;
    Ok(project)
}

/// Fills a template's placeholders.
fn render(template: &str, kind: PluginKind, name: &str) -> String {
    template
        .replace("{{name}}", name)
        .replace("{{crate}}", &crate_file_stem(name))
        .replace("{{kind}}", kind.word())
        .replace("{{world}}", kind.world())
        .replace("{{serde}}", SERDE_VERSION)
        .replace("{{componentize_py}}", COMPONENTIZE_PY_VERSION)
        .replace("{{jco}}", JCO_VERSION)
        .replace("{{componentize_js}}", COMPONENTIZE_JS_VERSION)
        .replace("{{preview2_shim}}", PREVIEW2_SHIM_VERSION)
        .replace("{{js_run_import}}", kind.js_run_import())
}

/// The stem of the component cargo builds for package `name`: `-` becomes `_`.
pub fn crate_file_stem(name: &str) -> String {
    name.replace('-', "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of the project file at `path`, or "" when there is none.
    pub(super) fn text_of<'a>(files: &'a [ProjectFile], path: &str) -> &'a str {
        files
            .iter()
            .find(|f| f.path == path)
            .map(|f| f.text.as_str())
            .unwrap_or_default()
    }

    /// The first `{{word}}` placeholder left in `text` (JSDoc's `{{a: string}}` is not one).
    fn placeholder(text: &str) -> Option<&str> {
        text.match_indices("{{").find_map(|(at, _)| {
            let rest = &text[at + 2..];
            let end = rest.find("}}")?;
            let word = &rest[..end];
            (!word.is_empty() && word.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
                .then_some(&text[at..at + end + 4])
        })
    }

    #[test]
    fn every_placeholder_is_filled() {
        assert_eq!(placeholder("a {{name}} b"), Some("{{name}}"));
        assert_eq!(placeholder("@param {{name: string}} input"), None);
        for kind in [PluginKind::Step, PluginKind::Tool] {
            let files = rust::project_files(kind, "my-plugin", false);
            let others = [
                rust::project_files(kind, "my-plugin", true),
                python::project_files(kind, "my-plugin"),
                js::project_files(kind, "my-plugin"),
            ];
            for file in files.iter().chain(others.iter().flatten()) {
                assert_eq!(placeholder(&file.text), None, "{} of a {kind:?}", file.path);
            }
        }
        let files = rust::project_files(PluginKind::Tool, "my-plugin", false);
        let workflow = text_of(&files, "workflow.yaml");
        assert!(workflow.contains("target/wasm32-wasip2/release/my_plugin.wasm"));
        assert!(workflow.contains("tool: my-plugin"));
    }
}
