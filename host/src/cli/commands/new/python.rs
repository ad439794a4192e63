//! The Python project of `weft new --lang python`, built with componentize-py: its templates,
//! the Python SDK, the WASI packages its worlds import, and its files.
//!
//! The templates' `{{...}}` placeholders are filled by [`render`].

use super::{PLUGIN_WIT, PluginKind, ProjectFile, render};

/// The componentize-py version a Python project builds with (its `build.sh` and README say so).
pub(super) const COMPONENTIZE_PY_VERSION: &str = "0.25.1";

/// `build.sh`.
const BUILD_SH: &str = include_str!("templates/python/build.sh.tmpl");
/// `.gitignore`.
const GITIGNORE: &str = include_str!("templates/python/gitignore.tmpl");
/// `weft_sdk.py`: the JSON glue, the `@step`/`@tool` registry and the exception guard.
const SDK: &str = include_str!("../../../../../sdk/python/weft_sdk.py");
/// `app.py` of a step plugin.
const STEP_APP: &str = include_str!("templates/python/step_app.py.tmpl");
/// `workflow.yaml` running a step plugin.
const STEP_WORKFLOW: &str = include_str!("templates/python/step_workflow.yaml.tmpl");
/// `README.md` of a step plugin.
const STEP_README: &str = include_str!("templates/python/step_README.md.tmpl");
/// `app.py` of a tool plugin.
const TOOL_APP: &str = include_str!("templates/python/tool_app.py.tmpl");
/// `workflow.yaml` calling a tool plugin.
const TOOL_WORKFLOW: &str = include_str!("templates/python/tool_workflow.yaml.tmpl");
/// `README.md` of a tool plugin.
const TOOL_README: &str = include_str!("templates/python/tool_README.md.tmpl");
/// `wit/worlds.wit`: the worlds `step-plugin-wasi` and `tool-plugin-wasi`, which add
/// `wasi:http/outgoing-handler` for `weft_sdk.fetch`.
const WORLDS_WIT: &str = include_str!("templates/python/worlds.wit.tmpl");
/// `wit/deps/*.wit`: WASI 0.2.12, which `wasi:http` needs (see templates/wasi/README.md).
const WASI_DEPS: &[(&str, &str)] = &[
    ("wit/deps/cli.wit", include_str!("templates/wasi/cli.wit")),
    (
        "wit/deps/clocks.wit",
        include_str!("templates/wasi/clocks.wit"),
    ),
    (
        "wit/deps/filesystem.wit",
        include_str!("templates/wasi/filesystem.wit"),
    ),
    ("wit/deps/http.wit", include_str!("templates/wasi/http.wit")),
    ("wit/deps/io.wit", include_str!("templates/wasi/io.wit")),
    (
        "wit/deps/random.wit",
        include_str!("templates/wasi/random.wit"),
    ),
    (
        "wit/deps/sockets.wit",
        include_str!("templates/wasi/sockets.wit"),
    ),
];

/// The files of a Python project of this kind, filled in for `name`.
pub(super) fn project_files(kind: PluginKind, name: &str) -> Vec<ProjectFile> {
    let (app, workflow, readme) = match kind {
        PluginKind::Step => (STEP_APP, STEP_WORKFLOW, STEP_README),
        PluginKind::Tool => (TOOL_APP, TOOL_WORKFLOW, TOOL_README),
    };
    let file = |path, template: &str, executable| ProjectFile {
        path,
        text: render(template, kind, name),
        executable,
    };
    let mut files = vec![
        file("build.sh", BUILD_SH, true),
        file(".gitignore", GITIGNORE, false),
        file("app.py", app, false),
        file("weft_sdk.py", SDK, false),
        file("workflow.yaml", workflow, false),
        file("README.md", readme, false),
        ProjectFile {
            path: "wit/plugin.wit",
            text: PLUGIN_WIT.to_string(),
            executable: false,
        },
        file("wit/worlds.wit", WORLDS_WIT, false),
    ];
    // WASI's WIT as it is, not rendered.
    files.extend(WASI_DEPS.iter().map(|&(path, text)| ProjectFile {
        path,
        text: text.to_string(),
        executable: false,
    }));
    files
}

#[cfg(test)]
mod tests {
    use super::super::tests::text_of;
    use super::*;

    /// A Python project builds its kind's `-wasi` world, which imports `wasi:http` for
    /// `weft_sdk.fetch`, and carries the WASI packages that world needs.
    #[test]
    fn python_projects_build_a_world_with_outgoing_http() {
        for kind in [PluginKind::Step, PluginKind::Tool] {
            let files = project_files(kind, "my-plugin");
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
}
