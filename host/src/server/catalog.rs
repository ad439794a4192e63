//! Where `POST /runs` takes workflows from: the directory given with `--workflows`, by a path
//! relative to it or by a workflow's `id`. Nothing outside it is opened (no absolute path, no
//! `..`, no symbolic link that leads out), only regular files are read, and a refusal repeats
//! the request's own words, never what a file holds. Its calls read the disk: run them off the
//! async workers.

use std::path::{Component, Path, PathBuf};

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use crate::limits::files::{MAX_WORKFLOW_FILE_BYTES, read_at_most};

/// The most files a scan for workflow ids reads.
const MAX_SCANNED: usize = 1000;

/// How deep below the directory a scan for workflow ids looks.
const MAX_DEPTH: usize = 4;

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
}

/// What a scan reads of a workflow file.
#[derive(Deserialize)]
struct IdOnly {
    id: String,
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
                let Some(id) = read_id(&path) else {
                    continue;
                };
                if let Ok(rel) = path.strip_prefix(dir) {
                    let file = rel
                        .components()
                        .map(|c| c.as_os_str().to_string_lossy())
                        .collect::<Vec<_>>()
                        .join("/");
                    found.push(Entry { id, file });
                }
            }
        }
        found.sort_by(|a, b| a.file.cmp(&b.file));
        Ok(found)
    }
}

/// The `id` of the workflow file at `path`, when it is one.
fn read_id(path: &Path) -> Option<String> {
    let bytes = read_at_most(path, MAX_WORKFLOW_FILE_BYTES).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    serde_saphyr::from_str::<IdOnly>(text).ok().map(|w| w.id)
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
