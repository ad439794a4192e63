//! The Rust project of `weft new --lang rust`: its templates, the Rust SDK vendored into it,
//! and its files, built with std or lean (without std and WASI).
//!
//! The templates' `{{...}}` placeholders are filled by [`render`].

use super::{PLUGIN_WIT, PluginKind, ProjectFile, render};

/// The serde version requirement of a Rust project (with `derive`): the one the SDK and
/// `guests/plugins/sdk-demo` build with.
pub(super) const SERDE_VERSION: &str = "1";

/// `Cargo.toml`.
const CARGO_TOML: &str = include_str!("templates/rust/Cargo.toml.tmpl");
/// `build.sh`.
const BUILD_SH: &str = include_str!("templates/rust/build.sh.tmpl");
/// `.gitignore`.
const GITIGNORE: &str = include_str!("templates/rust/gitignore.tmpl");
/// `src/lib.rs` of a step plugin.
const STEP_LIB: &str = include_str!("templates/rust/step_lib.rs.tmpl");
/// `workflow.yaml` running a step plugin.
const STEP_WORKFLOW: &str = include_str!("templates/rust/step_workflow.yaml.tmpl");
/// `README.md` of a step plugin.
const STEP_README: &str = include_str!("templates/rust/step_README.md.tmpl");
/// `src/lib.rs` of a tool plugin.
const TOOL_LIB: &str = include_str!("templates/rust/tool_lib.rs.tmpl");
/// `workflow.yaml` calling a tool plugin.
const TOOL_WORKFLOW: &str = include_str!("templates/rust/tool_workflow.yaml.tmpl");
/// `README.md` of a tool plugin.
const TOOL_README: &str = include_str!("templates/rust/tool_README.md.tmpl");

/// What differs between a project built with std and a lean one (`weft new --lean`).
struct Mode {
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
const STD: Mode = Mode {
    sdk_dependency: "weft-plugin = { path = \"weft-plugin\" }",
    serde_features: "features = [\"derive\"]",
    step_prelude: "",
    tool_prelude: "",
};

/// A lean project: no std, no WASI (docs/PLUGINS-RUST-SDK.md, "Lean mode").
const LEAN: Mode = Mode {
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
const SDK: &[(&str, &str)] = &[
    (
        "weft-plugin/Cargo.toml",
        include_str!("../../../../../sdk/rust/Cargo.toml"),
    ),
    (
        "weft-plugin/src/lib.rs",
        include_str!("../../../../../sdk/rust/src/lib.rs"),
    ),
    (
        "weft-plugin/src/bindings.rs",
        include_str!("../../../../../sdk/rust/src/bindings.rs"),
    ),
    (
        "weft-plugin/src/context.rs",
        include_str!("../../../../../sdk/rust/src/context.rs"),
    ),
    (
        "weft-plugin/src/failure.rs",
        include_str!("../../../../../sdk/rust/src/failure.rs"),
    ),
    (
        "weft-plugin/src/lean.rs",
        include_str!("../../../../../sdk/rust/src/lean.rs"),
    ),
    (
        "weft-plugin/src/outcome.rs",
        include_str!("../../../../../sdk/rust/src/outcome.rs"),
    ),
    (
        "weft-plugin/src/registry.rs",
        include_str!("../../../../../sdk/rust/src/registry.rs"),
    ),
    // The crate's copy of the contract is the contract (a test of the SDK checks it).
    ("weft-plugin/wit/plugin.wit", PLUGIN_WIT),
];

/// The files of a Rust project of this kind, filled in for `name`; `lean`: built without std
/// (the SDK's lean mode).
pub(super) fn project_files(kind: PluginKind, name: &str, lean: bool) -> Vec<ProjectFile> {
    let (lib, workflow, readme) = match kind {
        PluginKind::Step => (STEP_LIB, STEP_WORKFLOW, STEP_README),
        PluginKind::Tool => (TOOL_LIB, TOOL_WORKFLOW, TOOL_README),
    };
    let mode = if lean { LEAN } else { STD };
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
        file("Cargo.toml", CARGO_TOML, false),
        file("build.sh", BUILD_SH, true),
        file(".gitignore", GITIGNORE, false),
        file("src/lib.rs", lib, false),
        file("workflow.yaml", workflow, false),
        file("README.md", readme, false),
    ];
    // The SDK as it is, not rendered: its text is Rust, not a template.
    files.extend(SDK.iter().map(|&(path, text)| ProjectFile {
        path,
        text: text.to_string(),
        executable: false,
    }));
    files
}

#[cfg(test)]
mod tests {
    use super::super::tests::text_of;
    use super::super::{Lang, create};
    use super::*;

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

    /// The generated project uses the serde the SDK's demo builds with, and the release profile
    /// of the repository's own guests.
    #[test]
    fn versions_match_the_guests() {
        let demo = include_str!("../../../../../guests/plugins/sdk-demo/Cargo.toml");
        assert!(demo.contains(&format!(
            "serde = {{ version = \"{SERDE_VERSION}\", features = [\"derive\"] }}"
        )));
        let guests = include_str!("../../../../../guests/plugins/Cargo.toml");
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
