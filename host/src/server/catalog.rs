//! Where `POST /runs` takes workflows from: the directory given with `--workflows`, by a path
//! relative to it or by a workflow's `id`; `GET /workflows` lists them with their description
//! and input schema, which the web console turns into a form. Nothing outside it is opened (no absolute path, no
//! `..`, no symbolic link that leads out), only regular files are read, and a refusal repeats
//! the request's own words, never what a file holds. Its calls read the disk: run them off the
//! async workers.

use std::path::{Component, Path, PathBuf};

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::ApiError;
use crate::limits::files::{MAX_WORKFLOW_FILE_BYTES, read_at_most};
use crate::workflow::WorkflowError;

/// The most files a scan for workflow ids reads.
const MAX_SCANNED: usize = 1000;

/// How deep below the directory a scan for workflow ids looks.
const MAX_DEPTH: usize = 4;

/// The longest description a listing repeats, in characters; a longer one is cut.
const MAX_DESCRIPTION_CHARS: usize = 2000;

/// The largest input schema a listing repeats, as JSON bytes; a larger one is left out (the
/// console then asks for the input as JSON), so the listing stays small.
const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// The workflows a server may start.
pub(crate) struct Catalog {
    /// The directory, canonical; `None` when none was given.
    dir: Option<PathBuf>,
}

/// A workflow file of the directory.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct Entry {
    /// The workflow's `id`.
    pub(crate) id: String,
    /// Its file, relative to the directory, with `/` between parts.
    pub(crate) file: String,
    /// The workflow's `description:`, when it has one (cut at 2000 characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    /// The workflow's `input-schema:` (JSON Schema), when it has one of at most 64 KiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub(crate) input_schema: Option<Value>,
    /// Why the workflow cannot start as it is (a plugin's component is not built); absent when
    /// nothing is known to stop it. A start of it is refused with the loader's words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) problem: Option<String>,
    /// How long its ended runs are kept (its `retention:`, as written, e.g. `30d`), when it
    /// says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) retention: Option<String>,
}

/// What a scan reads of a workflow file; the rest of it is skipped.
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Head {
    /// The workflow's `id:`.
    id: String,
    /// Its `description:`.
    #[serde(default)]
    description: Option<String>,
    /// Its `input-schema:`.
    #[serde(default)]
    input_schema: Option<Value>,
    /// Its `plugins:`, by alias, as written.
    #[serde(default)]
    plugins: Option<serde_json::Map<String, Value>>,
    /// Its `retention:`, as written.
    #[serde(default)]
    retention: Option<String>,
}

impl Catalog {
    /// The catalog of `dir`; an error when it is given but is not a readable directory.
    pub(crate) fn new(dir: Option<&Path>) -> std::io::Result<Self> {
        let dir = match dir {
            Some(d) => {
                let canonical = d.canonicalize()?;
                if !canonical.is_dir() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("{} is not a directory", d.display()),
                    ));
                }
                Some(canonical)
            }
            None => None,
        };
        Ok(Catalog { dir })
    }

    /// The directory, canonical, when the server has one.
    pub(crate) fn dir_if_any(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    fn dir(&self) -> Result<&Path, ApiError> {
        self.dir.as_deref().ok_or_else(|| {
            ApiError::new(
                StatusCode::FORBIDDEN,
                "no-workflows-directory",
                "this server starts no workflow over HTTP: start it with `weft serve --workflows \
                 DIR`, then name a workflow by its `id` or by its file relative to DIR",
            )
        })
    }

    /// The workflow file `name` names, relative to the directory.
    pub(crate) fn file(&self, name: &str) -> Result<PathBuf, ApiError> {
        let dir = self.dir()?;
        let shown: String = name.chars().take(200).collect();
        let outside = || {
            ApiError::new(
                StatusCode::FORBIDDEN,
                "outside-workflows-directory",
                format!(
                    "`{shown}` is not a file of the workflows directory: name a file relative to \
                     it, with no `..` and no leading `/`"
                ),
            )
        };
        let rel = Path::new(name);
        if name.is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(outside());
        }
        let path = dir.join(rel).canonicalize().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    "unknown-workflow",
                    format!("the workflows directory has no file `{shown}`"),
                )
            } else {
                outside()
            }
        })?;
        if !path.starts_with(dir) {
            return Err(outside());
        }
        if !path.is_file() {
            return Err(ApiError::bad_request(format!(
                "`{shown}` is not a regular file"
            )));
        }
        Ok(path)
    }

    /// The file of the workflow whose `id` is `id`.
    pub(crate) fn by_id(&self, id: &str) -> Result<PathBuf, ApiError> {
        let dir = self.dir()?;
        let shown: String = id.chars().take(200).collect();
        let found: Vec<Entry> = self.list()?.into_iter().filter(|e| e.id == id).collect();
        match found.as_slice() {
            [one] => Ok(dir.join(&one.file)),
            [] => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown-workflow",
                format!(
                    "no workflow file in the workflows directory has id `{shown}`; \
                     `GET /workflows` lists those it has"
                ),
            )),
            many => Err(ApiError::new(
                StatusCode::CONFLICT,
                "ambiguous-workflow",
                format!(
                    "workflow id `{shown}` is in several files ({}): name the file instead",
                    many.iter()
                        .map(|e| e.file.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    /// Every workflow file of the directory (`.yaml`, `.yml`, `.json`, down to a few levels),
    /// sorted by file; files that are not workflows are left out.
    pub(crate) fn list(&self) -> Result<Vec<Entry>, ApiError> {
        let dir = self.dir()?;
        let mut found = Vec::new();
        let mut scanned = 0;
        let mut todo = vec![(dir.to_path_buf(), 0)];
        while let Some((at, depth)) = todo.pop() {
            let Ok(entries) = std::fs::read_dir(&at) else {
                continue;
            };
            for entry in entries.flatten() {
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                let path = entry.path();
                if kind.is_dir() && depth < MAX_DEPTH {
                    todo.push((path, depth + 1));
                    continue;
                }
                let workflow = kind.is_file()
                    && path
                        .extension()
                        .and_then(|e| e.to_str())
                        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
                if !workflow || scanned >= MAX_SCANNED {
                    continue;
                }
                scanned += 1;
                let Some(head) = read_head(&path) else {
                    continue;
                };
                if let Ok(rel) = path.strip_prefix(dir) {
                    let file = rel
                        .components()
                        .map(|c| c.as_os_str().to_string_lossy())
                        .collect::<Vec<_>>()
                        .join("/");
                    found.push(head.entry(file, path.parent().unwrap_or(dir)));
                }
            }
        }
        found.sort_by(|a, b| a.file.cmp(&b.file));
        Ok(found)
    }
}

impl Catalog {
    /// The refusal of a workflow file of the directory that does not load: the file (relative
    /// to the directory), the line and column, and what is wrong with every quote of the file
    /// left out (`…`), so that a file holding secrets is never echoed over HTTP.
    pub(crate) fn refusal(&self, e: &WorkflowError) -> ApiError {
        let file = self.shown(&e.file);
        let at = match (e.line, e.column) {
            (Some(line), Some(column)) => format!(" at line {line}, column {column}"),
            (Some(line), None) => format!(" at line {line}"),
            _ => String::new(),
        };
        let mut message = format!(
            "`{file}`{at} is not a workflow weft can start: {}",
            unquoted(&self.without_paths(&e.message))
        );
        if !e.fix.is_empty() {
            message.push_str("; fix: ");
            message.push_str(&unquoted(&self.without_paths(&e.fix)));
        }
        ApiError::new(StatusCode::BAD_REQUEST, "invalid-workflow", message)
    }

    /// `text` with each absolute path in it (a word starting with `/`) named as [`Catalog::shown`]
    /// names a file: the server's own directories never reach a client.
    fn without_paths(&self, text: &str) -> String {
        text.split(' ')
            .map(|word| {
                let path = word.trim_end_matches([':', ',', ';', ')', '.']);
                if path.len() > 1 && path.starts_with('/') {
                    format!("{}{}", self.shown(Path::new(path)), &word[path.len()..])
                } else {
                    word.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// `path` as a refusal names it: relative to the directory when it is inside, else by its
    /// file name alone.
    fn shown(&self, path: &Path) -> String {
        let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let inside = self.dir.as_deref().and_then(|dir| {
            canonical
                .strip_prefix(dir)
                .ok()
                .or_else(|| path.strip_prefix(dir).ok())
        });
        match inside {
            Some(rel) => rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/"),
            None => path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    }
}

/// `text` with whatever it quotes, between backquotes or double quotes (a key, an id, a value of
/// the file), replaced by `…`.
fn unquoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quote: Option<char> = None;
    for c in text.chars() {
        match quote {
            Some(q) if c == q => {
                out.push('…');
                out.push(c);
                quote = None;
            }
            Some(_) => {}
            None => {
                out.push(c);
                if c == '`' || c == '"' {
                    quote = Some(c);
                }
            }
        }
    }
    if quote.is_some() {
        // A quote that never closes: what follows it is left out too.
        out.push('…');
    }
    out
}

impl Catalog {
    /// Gives `rt` the `retention:` of every workflow served, so that it applies from the
    /// start rather than from each one's first run (a malformed one is refused at its start).
    pub(crate) fn keep_retentions(&self, rt: &crate::driver::Runtime) {
        for entry in self.list().unwrap_or_default() {
            let retention = entry.retention.as_deref().map(crate::age::parse_age);
            if let Some(Ok(r)) = retention {
                rt.set_workflow_retention(&entry.id, Some(r));
            }
        }
    }
}

/// The `id`, description and input schema of the workflow file at `path`, when it is one; read
/// as the loader reads it (YAML 1.2 booleans only, so a property named `n` stays a string).
fn read_head(path: &Path) -> Option<Head> {
    let bytes = read_at_most(path, MAX_WORKFLOW_FILE_BYTES).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    serde_saphyr::from_str_with_options::<Head>(text, options).ok()
}

impl Head {
    /// Why the workflow cannot start, when one of its plugins names a component (`wasm:`,
    /// relative to `dir`, the file's directory) that is not a regular file: not built yet.
    fn missing_plugin(&self, dir: &Path) -> Option<String> {
        let plugins = self.plugins.as_ref()?;
        plugins.iter().find_map(|(alias, plugin)| {
            let wasm = plugin.get("wasm")?.as_str()?;
            let there = std::fs::metadata(dir.join(wasm)).is_ok_and(|m| m.is_file());
            (!there).then(|| {
                format!(
                    "plugin {alias}: its component (`wasm:`) is not there; build the plugin \
                     (its README says how), then start the workflow"
                )
            })
        })
    }

    /// The listing's entry for this head, read from `file` in `dir`: the description cut, an
    /// oversized or non-object schema left out, and what stops it from starting.
    fn entry(self, file: String, dir: &Path) -> Entry {
        let problem = self.missing_plugin(dir);
        let description = self.description.map(|d| {
            if d.chars().count() > MAX_DESCRIPTION_CHARS {
                let mut cut: String = d.chars().take(MAX_DESCRIPTION_CHARS).collect();
                cut.push('…');
                cut
            } else {
                d
            }
        });
        let input_schema = self.input_schema.filter(|s| {
            (s.is_object() || s.is_boolean())
                && serde_json::to_vec(s).is_ok_and(|b| b.len() <= MAX_SCHEMA_BYTES)
        });
        Entry {
            id: self.id,
            file,
            description,
            input_schema,
            problem,
            retention: self.retention,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> (tempfile::TempDir, Catalog) {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("nested")).expect("mkdir");
        std::fs::write(dir.path().join("a.yaml"), "id: alpha\nsteps: []\n").expect("write");
        std::fs::write(dir.path().join("nested/b.yml"), "id: beta\nsteps: []\n").expect("write");
        std::fs::write(dir.path().join("notes.txt"), "id: gamma\n").expect("write");
        std::fs::write(dir.path().join("bad.yaml"), ": not yaml [").expect("write");
        let catalog = Catalog::new(Some(dir.path())).expect("catalog");
        (dir, catalog)
    }

    #[test]
    fn files_inside_the_directory_are_found_by_path_and_by_id() {
        let (dir, catalog) = catalog();
        let root = dir.path().canonicalize().expect("canonical");
        assert_eq!(catalog.file("a.yaml").expect("a"), root.join("a.yaml"));
        assert_eq!(
            catalog.file("nested/b.yml").expect("b"),
            root.join("nested/b.yml")
        );
        assert_eq!(
            catalog.by_id("beta").expect("beta"),
            root.join("nested/b.yml")
        );
        let ids: Vec<_> = catalog
            .list()
            .expect("list")
            .into_iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(ids, ["alpha", "beta"]);
    }

    #[test]
    fn the_listing_carries_each_description_and_input_schema_within_bounds() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("a.yaml"),
            "id: alpha\ndescription: Does a.\ninput-schema:\n  type: object\n  required: [n]\n  \
             properties:\n    n: { type: number }\nsteps: []\n",
        )
        .expect("write");
        let huge = format!(
            "{{\"id\": \"big\", \"description\": \"{}\", \"input-schema\": {{\"description\": \"{}\"}}, \"steps\": []}}",
            "d".repeat(MAX_DESCRIPTION_CHARS + 10),
            "s".repeat(MAX_SCHEMA_BYTES),
        );
        std::fs::write(dir.path().join("big.json"), huge).expect("write");
        std::fs::write(dir.path().join("plain.yaml"), "id: plain\nsteps: []\n").expect("write");
        let catalog = Catalog::new(Some(dir.path())).expect("catalog");
        let list = catalog.list().expect("list");
        let [a, big, plain] = list.as_slice() else {
            panic!("three workflows: {list:?}");
        };
        assert_eq!(a.description.as_deref(), Some("Does a."));
        assert_eq!(
            a.input_schema,
            Some(serde_json::json!({
                "type": "object", "required": ["n"], "properties": { "n": { "type": "number" } }
            }))
        );
        assert_eq!(
            big.description.as_ref().map(|d| d.chars().count()),
            Some(MAX_DESCRIPTION_CHARS + 1)
        );
        assert_eq!(big.input_schema, None, "an oversized schema is left out");
        assert_eq!(
            (plain.description.as_ref(), plain.input_schema.as_ref()),
            (None, None)
        );
        let json = serde_json::to_value(plain).expect("json");
        assert_eq!(
            json,
            serde_json::json!({ "id": "plain", "file": "plain.yaml" })
        );
    }

    #[test]
    fn nothing_outside_the_directory_is_reached() {
        let (dir, catalog) = catalog();
        let outside = tempfile::tempdir().expect("temp dir");
        std::fs::write(outside.path().join("secret.yaml"), "id: secret\n").expect("write");
        #[cfg(unix)]
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).expect("symlink");
        let absolute = outside.path().join("secret.yaml");
        for name in [
            "/etc/passwd",
            absolute.to_str().expect("utf-8"),
            "../secret.yaml",
            "nested/../../secret.yaml",
            "./a.yaml",
            "link/secret.yaml",
            "",
        ] {
            let err = catalog.file(name).expect_err(name);
            assert_eq!(err.status(), StatusCode::FORBIDDEN, "{name}");
        }
        assert_eq!(
            catalog.file("missing.yaml").expect_err("missing").status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            catalog.file("nested").expect_err("a directory").status(),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            catalog.by_id("secret").expect_err("outside").status(),
            StatusCode::NOT_FOUND
        );
    }

    #[test]
    fn refusals_leave_out_every_quote_of_the_file() {
        assert_eq!(
            unquoted("unknown field `SECRET`, expected \"x y\" or `id`"),
            "unknown field `…`, expected \"…\" or `…`"
        );
        assert_eq!(unquoted("cut `SECRET and more"), "cut `…");
        assert_eq!(unquoted("nothing quoted"), "nothing quoted");
        let (dir, catalog) = catalog();
        let root = dir.path().canonicalize().expect("canonical");
        let e = WorkflowError {
            file: root.join("nested/b.yml"),
            line: Some(3),
            column: Some(7),
            message: "step `SECRET` is wrong".into(),
            fix: "rename `SECRET`".into(),
            source_line: None,
        };
        let refusal = catalog.refusal(&e);
        assert_eq!(refusal.status(), StatusCode::BAD_REQUEST);
        let text = format!("{refusal:?}");
        assert!(
            text.contains("`nested/b.yml` at line 3, column 7"),
            "{text}"
        );
        assert!(!text.contains("SECRET"), "{text}");
        assert!(!text.contains(&root.display().to_string()), "{text}");
    }

    #[test]
    fn refusals_and_listings_name_no_path_of_the_server() {
        let (dir, catalog) = catalog();
        let root = dir.path().canonicalize().expect("canonical");
        let e = WorkflowError {
            file: root.join("a.yaml"),
            line: Some(3),
            column: None,
            message: format!(
                "cannot read plugin {}: No such file or directory (os error 2)",
                root.join("../x/kit.wasm").display()
            ),
            fix: "also /etc/weft/secret.wasm, then".into(),
            source_line: None,
        };
        let text = format!("{:?}", catalog.refusal(&e));
        assert!(
            text.contains("cannot read plugin ../x/kit.wasm: No such"),
            "{text}"
        );
        assert!(text.contains("also secret.wasm, then"), "{text}");
        assert!(!text.contains(&root.display().to_string()), "{text}");
        std::fs::write(
            root.join("unbuilt.yaml"),
            "id: unbuilt\nplugins:\n  kit: { wasm: nowhere/kit.wasm }\nsteps:\n  - { id: s, plugin: kit, step: x }\n",
        )
        .expect("write");
        std::fs::create_dir_all(root.join("built")).expect("dir");
        std::fs::write(root.join("built/kit.wasm"), b"\0asm").expect("write");
        std::fs::write(
            root.join("built.yaml"),
            "id: built\nplugins:\n  kit: { wasm: built/kit.wasm }\nsteps:\n  - { id: s, plugin: kit, step: x }\n",
        )
        .expect("write");
        let list = catalog.list().expect("list");
        let problem = |id: &str| {
            list.iter()
                .find(|e| e.id == id)
                .unwrap_or_else(|| panic!("{id} listed"))
                .problem
                .clone()
        };
        let unbuilt = problem("unbuilt").expect("a problem");
        assert!(unbuilt.contains("plugin kit: its component"), "{unbuilt}");
        assert!(!unbuilt.contains(&root.display().to_string()), "{unbuilt}");
        assert_eq!(problem("built"), None);
    }

    #[test]
    fn without_a_directory_nothing_is_started() {
        let catalog = Catalog::new(None).expect("catalog");
        assert_eq!(
            catalog.file("a.yaml").expect_err("none").status(),
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            catalog.by_id("alpha").expect_err("none").status(),
            StatusCode::FORBIDDEN
        );
    }
}
