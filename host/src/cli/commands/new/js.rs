//! The JavaScript project of `weft new --lang js`, built with jco (the StarlingMonkey engine):
//! its templates, the JavaScript SDK, its pinned tools, and its files.
//!
//! The templates' `{{...}}` placeholders are filled by [`render`].

use super::{PLUGIN_WIT, PluginKind, ProjectFile, render};

/// The jco version a JavaScript project builds with (pinned in its `package.json`).
pub(super) const JCO_VERSION: &str = "1.35.0";

/// The componentize-js version jco [`JCO_VERSION`] depends on (`^0.22.0`), pinned exactly.
pub(super) const COMPONENTIZE_JS_VERSION: &str = "0.22.0";

/// The preview2-shim version a JavaScript project pins through npm `overrides`: with 0.26.1,
/// jco 1.35.0 fails to read any WIT (`failed to get path metadata ... (os error 44)`).
pub(super) const PREVIEW2_SHIM_VERSION: &str = "0.26.0";

/// `package.json`: the pinned jco, the preview2-shim override, `npm run build`.
const PACKAGE_JSON: &str = include_str!("templates/js/package.json.tmpl");
/// `build.sh`: `npm install`, then `npm run build`.
const BUILD_SH: &str = include_str!("templates/js/build.sh.tmpl");
/// `bundle.config.js`: keeps the host's `weft:` interfaces imports when jco bundles.
const BUNDLE_CONFIG: &str = include_str!("templates/js/bundle.config.js.tmpl");
/// `.gitignore`.
const GITIGNORE: &str = include_str!("templates/js/gitignore.tmpl");
/// `weft_sdk.js`: the `step`/`tool` registry, JSON in and out, failures, the host's
/// functions.
const SDK: &str = include_str!("../../../../../sdk/js/weft_sdk.js");
/// `weft_sdk.d.ts`: the SDK's types.
const SDK_TYPES: &str = include_str!("../../../../../sdk/js/weft_sdk.d.ts");
/// `wit/worlds.wit`: the worlds `step-plugin-wasi` and `tool-plugin-wasi`.
const WORLDS_WIT: &str = include_str!("templates/js/worlds.wit.tmpl");
/// `wit/deps/wasi-cli/environment.wit`: the one WASI interface those worlds add.
const WASI_ENVIRONMENT_WIT: &str = include_str!("templates/js/wasi_cli_environment.wit.tmpl");
/// `app.js` of a step plugin.
const STEP_APP: &str = include_str!("templates/js/step_app.js.tmpl");
/// `workflow.yaml` running a step plugin.
const STEP_WORKFLOW: &str = include_str!("templates/js/step_workflow.yaml.tmpl");
/// `README.md` of a step plugin.
const STEP_README: &str = include_str!("templates/js/step_README.md.tmpl");
/// `app.js` of a tool plugin.
const TOOL_APP: &str = include_str!("templates/js/tool_app.js.tmpl");
/// `workflow.yaml` calling a tool plugin.
const TOOL_WORKFLOW: &str = include_str!("templates/js/tool_workflow.yaml.tmpl");
/// `README.md` of a tool plugin.
const TOOL_README: &str = include_str!("templates/js/tool_README.md.tmpl");

/// The files of a JavaScript project of this kind, filled in for `name`.
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
    vec![
        file("package.json", PACKAGE_JSON, false),
        file("build.sh", BUILD_SH, true),
        file("bundle.config.js", BUNDLE_CONFIG, false),
        file(".gitignore", GITIGNORE, false),
        file("app.js", app, false),
        file("weft_sdk.js", SDK, false),
        file("weft_sdk.d.ts", SDK_TYPES, false),
        file("workflow.yaml", workflow, false),
        file("README.md", readme, false),
        ProjectFile {
            path: "wit/plugin.wit",
            text: PLUGIN_WIT.to_string(),
            executable: false,
        },
        file("wit/worlds.wit", WORLDS_WIT, false),
        file(
            "wit/deps/wasi-cli/environment.wit",
            WASI_ENVIRONMENT_WIT,
            false,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::tests::text_of;
    use super::*;

    /// A JavaScript project pins jco, overrides preview2-shim, builds its kind's world, and
    /// imports `run` only when it is a step.
    #[test]
    fn js_projects_pin_jco_and_import_run_only_for_steps() {
        for kind in [PluginKind::Step, PluginKind::Tool] {
            let files = project_files(kind, "my-plugin");
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
}
