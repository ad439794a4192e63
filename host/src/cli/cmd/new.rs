//! `weft new step|tool NAME`: writes a ready plugin project (docs/PLUGINS.md).
//!
//! The project is written whole or not at all: its files go to a hidden staging directory next
//! to the target, which is renamed into place once every file is written.

use std::fs;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};

use crate::cli::{EXIT_OK, EXIT_USAGE, Output};

/// The arguments of `weft new`.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
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
const PLUGIN_WIT: &str = include_str!("../../../../wit/plugin.wit");

/// The serde version requirement of a Rust project (with `derive`): the one the SDK and
/// `guests/plugins/sdk-demo` build with.
const SERDE_VERSION: &str = "1";

/// Templates of a Rust project; `{{...}}` placeholders are filled by [`render`].
mod rust {
    /// `Cargo.toml`.
    pub const CARGO_TOML: &str = include_str!("../templates/rust/Cargo.toml.tmpl");
    /// `build.sh`.
    pub const BUILD_SH: &str = include_str!("../templates/rust/build.sh.tmpl");
    /// `.gitignore`.
    pub const GITIGNORE: &str = include_str!("../templates/rust/gitignore.tmpl");
    /// `src/lib.rs` of a step plugin.
    pub const STEP_LIB: &str = include_str!("../templates/rust/step_lib.rs.tmpl");
    /// `workflow.yaml` running a step plugin.
    pub const STEP_WORKFLOW: &str = include_str!("../templates/rust/step_workflow.yaml.tmpl");
    /// `README.md` of a step plugin.
    pub const STEP_README: &str = include_str!("../templates/rust/step_README.md.tmpl");
    /// `src/lib.rs` of a tool plugin.
    pub const TOOL_LIB: &str = include_str!("../templates/rust/tool_lib.rs.tmpl");
    /// `workflow.yaml` calling a tool plugin.
    pub const TOOL_WORKFLOW: &str = include_str!("../templates/rust/tool_workflow.yaml.tmpl");
    /// `README.md` of a tool plugin.
    pub const TOOL_README: &str = include_str!("../templates/rust/tool_README.md.tmpl");

    /// What differs between a project built with std and a lean one (`weft new --lean`).
    pub struct Mode {
        /// `{{sdk_dependency}}` in `Cargo.toml`: the SDK's dependency line, with its comment.
        pub sdk_dependency: &'static str,
        /// `{{serde_features}}` in `Cargo.toml`: serde's features.
        pub serde_features: &'static str,
        /// The line `{{no_std}}` of a step's `src/lib.rs`.
        pub step_prelude: &'static str,
        /// The line `{{no_std}}` of a tool's `src/lib.rs`.
        pub tool_prelude: &'static str,
    }

    /// A project built with std, the default.
    pub const STD: Mode = Mode {
        sdk_dependency: "weft-plugin = { path = \"weft-plugin\" }",
        serde_features: "features = [\"derive\"]",
        step_prelude: "",
        tool_prelude: "",
    };

    /// A lean project: no std, no WASI (docs/PLUGINS-RUST-SDK.md, "Lean mode").
    pub const LEAN: Mode = Mode {
        sdk_dependency: "# Lean mode (`weft new --lean`): no std and no WASI, so the component imports weft's\n\
                         # interfaces alone and each step starts faster; every dependency must build without\n\
                         # std (see \"Lean components\" in weft-plugin/src/lib.rs).\n\
                         weft-plugin = { path = \"weft-plugin\", default-features = false, features = [\"lean\"] }",
        serde_features: "default-features = false, features = [\"derive\", \"alloc\"]",
        step_prelude: "#![no_std]\n\nextern crate alloc;\n\nuse alloc::format;\nuse alloc::string::{String, ToString};\n",
        tool_prelude: "#![no_std]\n\nextern crate alloc;\n\nuse alloc::format;\n",
    };

    /// The Rust SDK (crate `weft-plugin`, `sdk/rust`), vendored into the project as
    /// `weft-plugin/`: each file's path there and its text, copied as they are.
    pub const SDK: &[(&str, &str)] = &[
        (
            "weft-plugin/Cargo.toml",
            include_str!("../../../../sdk/rust/Cargo.toml"),
        ),
        (
            "weft-plugin/src/lib.rs",
            include_str!("../../../../sdk/rust/src/lib.rs"),
        ),
        (
            "weft-plugin/src/bindings.rs",
            include_str!("../../../../sdk/rust/src/bindings.rs"),
        ),
        (
            "weft-plugin/src/context.rs",
            include_str!("../../../../sdk/rust/src/context.rs"),
        ),
        (
            "weft-plugin/src/failure.rs",
            include_str!("../../../../sdk/rust/src/failure.rs"),
        ),
        (
            "weft-plugin/src/lean.rs",
            include_str!("../../../../sdk/rust/src/lean.rs"),
        ),
        (
            "weft-plugin/src/outcome.rs",
            include_str!("../../../../sdk/rust/src/outcome.rs"),
        ),
        (
            "weft-plugin/src/registry.rs",
            include_str!("../../../../sdk/rust/src/registry.rs"),
        ),
        // The crate's copy of the contract is the contract (a test of the SDK checks it).
        ("weft-plugin/wit/plugin.wit", super::PLUGIN_WIT),
    ];
}

/// The componentize-py version a Python project builds with (its `build.sh` and README say so).
const COMPONENTIZE_PY_VERSION: &str = "0.25.1";

/// Templates of a Python project (componentize-py); `{{...}}` placeholders are filled by
/// [`render`].
mod python {
    /// `build.sh`.
    pub const BUILD_SH: &str = include_str!("../templates/python/build.sh.tmpl");
    /// `.gitignore`.
    pub const GITIGNORE: &str = include_str!("../templates/python/gitignore.tmpl");
    /// `weft_sdk.py`: the JSON glue, the `@step`/`@tool` registry and the exception guard.
    pub const SDK: &str = include_str!("../../../../sdk/python/weft_sdk.py");
    /// `app.py` of a step plugin.
    pub const STEP_APP: &str = include_str!("../templates/python/step_app.py.tmpl");
    /// `workflow.yaml` running a step plugin.
    pub const STEP_WORKFLOW: &str = include_str!("../templates/python/step_workflow.yaml.tmpl");
    /// `README.md` of a step plugin.
    pub const STEP_README: &str = include_str!("../templates/python/step_README.md.tmpl");
    /// `app.py` of a tool plugin.
    pub const TOOL_APP: &str = include_str!("../templates/python/tool_app.py.tmpl");
    /// `workflow.yaml` calling a tool plugin.
    pub const TOOL_WORKFLOW: &str = include_str!("../templates/python/tool_workflow.yaml.tmpl");
    /// `README.md` of a tool plugin.
    pub const TOOL_README: &str = include_str!("../templates/python/tool_README.md.tmpl");
    /// `wit/worlds.wit`: the worlds `step-plugin-wasi` and `tool-plugin-wasi`, which add
    /// `wasi:http/outgoing-handler` for `weft_sdk.fetch`.
    pub const WORLDS_WIT: &str = include_str!("../templates/python/worlds.wit.tmpl");
    /// `wit/deps/*.wit`: WASI 0.2.12, which `wasi:http` needs (see templates/wasi/README.md).
    pub const WASI_DEPS: &[(&str, &str)] = &[
        (
            "wit/deps/cli.wit",
            include_str!("../templates/wasi/cli.wit"),
        ),
        (
            "wit/deps/clocks.wit",
            include_str!("../templates/wasi/clocks.wit"),
        ),
        (
            "wit/deps/filesystem.wit",
            include_str!("../templates/wasi/filesystem.wit"),
        ),
        (
            "wit/deps/http.wit",
            include_str!("../templates/wasi/http.wit"),
        ),
        ("wit/deps/io.wit", include_str!("../templates/wasi/io.wit")),
        (
            "wit/deps/random.wit",
            include_str!("../templates/wasi/random.wit"),
        ),
        (
            "wit/deps/sockets.wit",
            include_str!("../templates/wasi/sockets.wit"),
        ),
    ];
}

/// The jco version a JavaScript project builds with (pinned in its `package.json`).
const JCO_VERSION: &str = "1.35.0";

/// The componentize-js version jco [`JCO_VERSION`] depends on (`^0.22.0`), pinned exactly.
const COMPONENTIZE_JS_VERSION: &str = "0.22.0";

/// The preview2-shim version a JavaScript project pins through npm `overrides`: with 0.26.1,
/// jco 1.35.0 fails to read any WIT (`failed to get path metadata ... (os error 44)`).
const PREVIEW2_SHIM_VERSION: &str = "0.26.0";

/// Templates of a JavaScript project (jco, StarlingMonkey); `{{...}}` placeholders are filled
/// by [`render`].
mod js {
    /// `package.json`: the pinned jco, the preview2-shim override, `npm run build`.
    pub const PACKAGE_JSON: &str = include_str!("../templates/js/package.json.tmpl");
    /// `build.sh`: `npm install`, then `npm run build`.
    pub const BUILD_SH: &str = include_str!("../templates/js/build.sh.tmpl");
    /// `bundle.config.js`: keeps the host's `weft:` interfaces imports when jco bundles.
    pub const BUNDLE_CONFIG: &str = include_str!("../templates/js/bundle.config.js.tmpl");
    /// `.gitignore`.
    pub const GITIGNORE: &str = include_str!("../templates/js/gitignore.tmpl");
    /// `weft_sdk.js`: the `step`/`tool` registry, JSON in and out, failures, the host's
    /// functions.
    pub const SDK: &str = include_str!("../../../../sdk/js/weft_sdk.js");
    /// `weft_sdk.d.ts`: the SDK's types.
    pub const SDK_TYPES: &str = include_str!("../../../../sdk/js/weft_sdk.d.ts");
    /// `wit/worlds.wit`: the worlds `step-plugin-wasi` and `tool-plugin-wasi`.
    pub const WORLDS_WIT: &str = include_str!("../templates/js/worlds.wit.tmpl");
    /// `wit/deps/wasi-cli/environment.wit`: the one WASI interface those worlds add.
    pub const WASI_ENVIRONMENT_WIT: &str =
        include_str!("../templates/js/wasi_cli_environment.wit.tmpl");
    /// `app.js` of a step plugin.
    pub const STEP_APP: &str = include_str!("../templates/js/step_app.js.tmpl");
    /// `workflow.yaml` running a step plugin.
    pub const STEP_WORKFLOW: &str = include_str!("../templates/js/step_workflow.yaml.tmpl");
    /// `README.md` of a step plugin.
    pub const STEP_README: &str = include_str!("../templates/js/step_README.md.tmpl");
    /// `app.js` of a tool plugin.
    pub const TOOL_APP: &str = include_str!("../templates/js/tool_app.js.tmpl");
    /// `workflow.yaml` calling a tool plugin.
    pub const TOOL_WORKFLOW: &str = include_str!("../templates/js/tool_workflow.yaml.tmpl");
    /// `README.md` of a tool plugin.
    pub const TOOL_README: &str = include_str!("../templates/js/tool_README.md.tmpl");
}

/// The longest plugin name: a tool name may have at most 64 characters.
const MAX_NAME_LEN: usize = 64;

/// The rule a plugin name follows, as refusals state it.
const NAME_RULE: &str = "a plugin name is 1 to 64 characters of lowercase letters a-z, digits \
                         0-9 and `-`, starting with a letter and not ending with `-` \
                         (e.g. `greet` or `word-count`)";

/// Names cargo refuses for a package, or that clash with the project's own dependencies.
const RESERVED_NAMES: &[&str] = &[
    "test",
    "core",
    "std",
    "alloc",
    "proc-macro",
    "wit-bindgen",
    "serde",
    "serde-json",
    "weft-plugin",
    // Rust keywords (cargo refuses them as package names).
    "as",
    "async",
    "await",
    "box",
    "break",
    "const",
    "continue",
    "crate",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "fn",
    "for",
    "gen",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "match",
    "mod",
    "move",
    "mut",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "try",
    "type",
    "unsafe",
    "use",
    "where",
    "while",
    "yield",
    "abstract",
    "become",
    "do",
    "final",
    "macro",
    "override",
    "priv",
    "typeof",
    "unsized",
    "virtual",
];

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
        Lang::Python => python_project_files(kind, name),
        Lang::Js => js_project_files(kind, name),
        Lang::Rust => project_files(kind, name, lean),
    };
    write_project(&parent, &project, name, &files)?;
    Ok(project)
}

/// Checks a plugin name: 1 to 64 characters of lowercase letters a-z, digits 0-9 and `-`,
/// starting with a letter and not ending with `-`, and not a name cargo or the project's own
/// dependencies reserve.
pub fn check_name(name: &str) -> Result<(), String> {
    let shown: String = name.chars().take(MAX_NAME_LEN + 8).collect();
    let fits = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !fits {
        return Err(format!("invalid plugin name {shown:?}: {NAME_RULE}"));
    }
    if RESERVED_NAMES.contains(&name) {
        return Err(format!(
            "invalid plugin name {name:?}: Rust or cargo reserves it; choose another, e.g. \
             `my-{name}`"
        ));
    }
    Ok(())
}

/// Refuses a target that exists and is not an empty directory.
fn check_free(project: &Path) -> Result<(), String> {
    let shown = project.display();
    let meta = match fs::symlink_metadata(project) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("cannot read {shown}: {e}")),
    };
    if !meta.is_dir() {
        return Err(format!(
            "{shown} already exists and is not a directory; choose another name or --dir, or \
             remove it"
        ));
    }
    let mut entries =
        fs::read_dir(project).map_err(|e| format!("cannot read the directory {shown}: {e}"))?;
    if entries.next().is_some() {
        return Err(format!(
            "{shown} already exists and is not empty; nothing was written. Choose another name \
             or --dir, or remove it"
        ));
    }
    Ok(())
}

/// The files of a Rust project of this kind, filled in for `name`; `lean`: built without std
/// (the SDK's lean mode).
fn project_files(kind: PluginKind, name: &str, lean: bool) -> Vec<ProjectFile> {
    let (lib, workflow, readme) = match kind {
        PluginKind::Step => (rust::STEP_LIB, rust::STEP_WORKFLOW, rust::STEP_README),
        PluginKind::Tool => (rust::TOOL_LIB, rust::TOOL_WORKFLOW, rust::TOOL_README),
    };
    let mode = if lean { rust::LEAN } else { rust::STD };
    let file = |path, template: &str, executable| ProjectFile {
        path,
        text: render(template, kind, name)
            .replace("{{sdk_dependency}}", mode.sdk_dependency)
            .replace("{{serde_features}}", mode.serde_features)
            .replace(
                "{{no_std}}\n",
                match kind {
                    PluginKind::Step => mode.step_prelude,
                    PluginKind::Tool => mode.tool_prelude,
                },
            ),
        executable,
    };
    let mut files = vec![
        file("Cargo.toml", rust::CARGO_TOML, false),
        file("build.sh", rust::BUILD_SH, true),
        file(".gitignore", rust::GITIGNORE, false),
        file("src/lib.rs", lib, false),
        file("workflow.yaml", workflow, false),
        file("README.md", readme, false),
    ];
    // The SDK as it is, not rendered: its text is Rust, not a template.
    files.extend(rust::SDK.iter().map(|&(path, text)| ProjectFile {
        path,
        text: text.to_string(),
        executable: false,
    }));
    files
}

/// The files of a Python project of this kind, filled in for `name`.
fn python_project_files(kind: PluginKind, name: &str) -> Vec<ProjectFile> {
    let (app, workflow, readme) = match kind {
        PluginKind::Step => (python::STEP_APP, python::STEP_WORKFLOW, python::STEP_README),
        PluginKind::Tool => (python::TOOL_APP, python::TOOL_WORKFLOW, python::TOOL_README),
    };
    let file = |path, template: &str, executable| ProjectFile {
        path,
        text: render(template, kind, name),
        executable,
    };
    let mut files = vec![
        file("build.sh", python::BUILD_SH, true),
        file(".gitignore", python::GITIGNORE, false),
        file("app.py", app, false),
        file("weft_sdk.py", python::SDK, false),
        file("workflow.yaml", workflow, false),
        file("README.md", readme, false),
        ProjectFile {
            path: "wit/plugin.wit",
            text: PLUGIN_WIT.to_string(),
            executable: false,
        },
        file("wit/worlds.wit", python::WORLDS_WIT, false),
    ];
    // WASI's WIT as it is, not rendered.
    files.extend(python::WASI_DEPS.iter().map(|&(path, text)| ProjectFile {
        path,
        text: text.to_string(),
        executable: false,
    }));
    files
}

/// The files of a JavaScript project of this kind, filled in for `name`.
fn js_project_files(kind: PluginKind, name: &str) -> Vec<ProjectFile> {
    let (app, workflow, readme) = match kind {
        PluginKind::Step => (js::STEP_APP, js::STEP_WORKFLOW, js::STEP_README),
        PluginKind::Tool => (js::TOOL_APP, js::TOOL_WORKFLOW, js::TOOL_README),
    };
    let file = |path, template: &str, executable| ProjectFile {
        path,
        text: render(template, kind, name),
        executable,
    };
    vec![
        file("package.json", js::PACKAGE_JSON, false),
        file("build.sh", js::BUILD_SH, true),
        file("bundle.config.js", js::BUNDLE_CONFIG, false),
        file(".gitignore", js::GITIGNORE, false),
        file("app.js", app, false),
        file("weft_sdk.js", js::SDK, false),
        file("weft_sdk.d.ts", js::SDK_TYPES, false),
        file("workflow.yaml", workflow, false),
        file("README.md", readme, false),
        ProjectFile {
            path: "wit/plugin.wit",
            text: PLUGIN_WIT.to_string(),
            executable: false,
        },
        file("wit/worlds.wit", js::WORLDS_WIT, false),
        file(
            "wit/deps/wasi-cli/environment.wit",
            js::WASI_ENVIRONMENT_WIT,
            false,
        ),
    ]
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

/// Writes the files into a staging directory in `parent`, then renames it to `project`; on any
/// error removes what it wrote.
fn write_project(
    parent: &Path,
    project: &Path,
    name: &str,
    files: &[ProjectFile],
) -> Result<(), String> {
    fs::create_dir_all(parent).map_err(|e| {
        format!(
            "cannot create the directory {}: {e}; check --dir",
            parent.display()
        )
    })?;
    let staging = parent.join(format!(".{name}.weft-new-{}", std::process::id()));
    let written = write_files(&staging, files).and_then(|()| {
        // An empty directory is taken over: rename cannot replace it everywhere.
        if project.is_dir() {
            fs::remove_dir(project).map_err(|e| {
                format!(
                    "cannot replace the empty directory {}: {e}",
                    project.display()
                )
            })?;
        }
        fs::rename(&staging, project)
            .map_err(|e| format!("cannot move the project to {}: {e}", project.display()))
    });
    if written.is_err() {
        let _ = fs::remove_dir_all(&staging);
    }
    written
}

/// Writes each file under `root` (created fresh).
fn write_files(root: &Path, files: &[ProjectFile]) -> Result<(), String> {
    fs::create_dir(root).map_err(|e| format!("cannot create {}: {e}", root.display()))?;
    for file in files {
        let path = root.join(file.path);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        fs::write(&path, &file.text)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        if file.executable {
            make_executable(&path)?;
        }
    }
    Ok(())
}

/// Marks a file executable by everyone who may read it (Unix only).
#[cfg(unix)]
fn make_executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut perms = meta.permissions();
    perms.set_mode(perms.mode() | ((perms.mode() & 0o444) >> 2));
    fs::set_permissions(path, perms)
        .map_err(|e| format!("cannot make {} executable: {e}", path.display()))
}

/// Marks a file executable: nothing to do off Unix.
#[cfg(not(unix))]
fn make_executable(_path: &Path) -> Result<(), String> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of the project file at `path`, or "" when there is none.
    fn text_of<'a>(files: &'a [ProjectFile], path: &str) -> &'a str {
        files
            .iter()
            .find(|f| f.path == path)
            .map(|f| f.text.as_str())
            .unwrap_or_default()
    }

    #[test]
    fn names_follow_the_rule() {
        for good in ["greet", "word-count", "a1", "x"] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        let long = "a".repeat(MAX_NAME_LEN + 1);
        for bad in [
            "", "Greet", "1greet", "greet-", "my_step", "my step", "é", "../x", &long,
        ] {
            let err = check_name(bad).expect_err(bad);
            assert!(err.contains(NAME_RULE), "{err}");
        }
        for reserved in ["test", "fn", "serde-json"] {
            let err = check_name(reserved).expect_err(reserved);
            assert!(err.contains("reserves"), "{err}");
        }
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
            let files = project_files(kind, "my-plugin", false);
            let others = [
                project_files(kind, "my-plugin", true),
                python_project_files(kind, "my-plugin"),
                js_project_files(kind, "my-plugin"),
            ];
            for file in files.iter().chain(others.iter().flatten()) {
                assert_eq!(placeholder(&file.text), None, "{} of a {kind:?}", file.path);
            }
        }
        let files = project_files(PluginKind::Tool, "my-plugin", false);
        let workflow = text_of(&files, "workflow.yaml");
        assert!(workflow.contains("target/wasm32-wasip2/release/my_plugin.wasm"));
        assert!(workflow.contains("tool: my-plugin"));
    }

    /// A lean Rust project builds the SDK without std, and its code says `#![no_std]`; the
    /// default one does neither.
    #[test]
    fn lean_rust_projects_leave_std_out() {
        for kind in [PluginKind::Step, PluginKind::Tool] {
            let lean = project_files(kind, "my-plugin", true);
            let manifest = text_of(&lean, "Cargo.toml");
            assert!(
                manifest.contains(
                    "weft-plugin = { path = \"weft-plugin\", default-features = false, \
                     features = [\"lean\"] }"
                ),
                "{manifest}"
            );
            assert!(
                manifest.contains("default-features = false, features = [\"derive\", \"alloc\"]")
            );
            assert!(text_of(&lean, "src/lib.rs").contains("\n#![no_std]\n"));
            let full = project_files(kind, "my-plugin", false);
            assert!(!text_of(&full, "src/lib.rs").contains("no_std"));
            assert!(!text_of(&full, "Cargo.toml").contains("lean"));
        }
        let err = create(PluginKind::Step, "x", Lang::Python, true, None).expect_err("python");
        assert!(err.contains("--lang rust"), "{err}");
    }

    /// A JavaScript project pins jco, overrides preview2-shim, builds its kind's world, and
    /// imports `run` only when it is a step.
    #[test]
    fn js_projects_pin_jco_and_import_run_only_for_steps() {
        for kind in [PluginKind::Step, PluginKind::Tool] {
            let files = js_project_files(kind, "my-plugin");
            let text = |path: &str| text_of(&files, path);
            let package: serde_json::Value =
                serde_json::from_str(text("package.json")).expect("package.json is JSON");
            assert_eq!(package["name"], "my-plugin");
            assert_eq!(
                package["devDependencies"]["@bytecodealliance/jco"],
                JCO_VERSION
            );
            assert_eq!(
                package["devDependencies"]["@bytecodealliance/componentize-js"],
                COMPONENTIZE_JS_VERSION
            );
            assert_eq!(
                package["overrides"]["@bytecodealliance/preview2-shim"],
                PREVIEW2_SHIM_VERSION
            );
            let build = package["scripts"]["build"].as_str().unwrap_or_default();
            assert!(
                build.contains(&format!("--world-name {}-wasi", kind.world())),
                "{build}"
            );
            assert!(build.ends_with("-o my-plugin.wasm"), "{build}");
            assert!(text("wit/worlds.wit").contains(&format!("world {}-wasi", kind.world())));
            assert_eq!(
                text("weft_sdk.js").contains("from 'weft:plugin/run@0.1.0'"),
                kind == PluginKind::Step
            );
            assert_eq!(text("wit/plugin.wit"), PLUGIN_WIT);
        }
    }

    /// A Python project builds its kind's `-wasi` world, which imports `wasi:http` for
    /// `weft_sdk.fetch`, and carries the WASI packages that world needs.
    #[test]
    fn python_projects_build_a_world_with_outgoing_http() {
        for kind in [PluginKind::Step, PluginKind::Tool] {
            let files = python_project_files(kind, "my-plugin");
            let text = |path: &str| text_of(&files, path);
            let world = format!("{}-wasi", kind.world());
            assert!(
                text("build.sh").contains(&format!("-w {world} componentize")),
                "{}",
                text("build.sh")
            );
            let worlds = text("wit/worlds.wit");
            assert!(worlds.contains(&format!("world {world} {{")), "{worlds}");
            assert!(worlds.contains("import wasi:http/outgoing-handler@0.2.12;"));
            assert!(text("wit/deps/http.wit").starts_with("package wasi:http@0.2.12;"));
            for dep in ["io", "clocks", "random", "cli", "filesystem", "sockets"] {
                let wit = text(&format!("wit/deps/{dep}.wit"));
                assert!(
                    wit.starts_with(&format!("package wasi:{dep}@0.2.12;")),
                    "{dep}"
                );
            }
            assert!(text("weft_sdk.py").contains("def fetch("));
            assert_eq!(text("wit/plugin.wit"), PLUGIN_WIT);
        }
    }

    /// The generated project uses the serde the SDK's demo builds with, and the release profile
    /// of the repository's own guests.
    #[test]
    fn versions_match_the_guests() {
        let demo = include_str!("../../../../guests/plugins/sdk-demo/Cargo.toml");
        assert!(demo.contains(&format!(
            "serde = {{ version = \"{SERDE_VERSION}\", features = [\"derive\"] }}"
        )));
        let guests = include_str!("../../../../guests/plugins/Cargo.toml");
        assert!(guests.contains("opt-level = \"s\""));
    }

    /// A Rust project vendors the SDK as it is, the contract included, and depends on it by
    /// path under its own name.
    #[test]
    fn rust_projects_vendor_the_sdk() {
        for kind in [PluginKind::Step, PluginKind::Tool] {
            let files = project_files(kind, "my-plugin", false);
            let text = |path: &str| text_of(&files, path);
            assert_eq!(text("weft-plugin/wit/plugin.wit"), PLUGIN_WIT);
            assert!(text("weft-plugin/Cargo.toml").contains("name = \"weft-plugin\""));
            assert!(text("weft-plugin/src/lib.rs").contains("macro_rules! export_plugin"));
            // Every source file of the crate, so a module added to it cannot be left behind.
            let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk/rust/src");
            for entry in std::fs::read_dir(src).expect("sdk/rust/src") {
                let name = entry.expect("an entry").file_name();
                let name = name.to_string_lossy();
                assert_eq!(
                    text(&format!("weft-plugin/src/{name}")),
                    std::fs::read_to_string(format!("{src}/{name}")).expect("read"),
                    "{name}"
                );
            }
            assert!(
                text("Cargo.toml").contains("weft-plugin = { path = \"weft-plugin\" }"),
                "{kind:?}"
            );
            let lib = text("src/lib.rs");
            assert!(lib.contains("export_plugin!"), "{kind:?}");
            assert!(!lib.contains("wit_bindgen"), "{kind:?}");
            assert!(!files.iter().any(|f| f.path == "wit/plugin.wit"));
        }
    }
}
