//! Writing a project to disk, whole or not at all: the target checked free, every file written
//! to a hidden staging directory next to it, which is then renamed into place.

use std::fs;
use std::path::Path;

use super::ProjectFile;

/// Refuses a target that exists and is not an empty directory.
pub(super) fn check_free(project: &Path) -> Result<(), String> {
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

/// Writes the files into a staging directory in `parent`, then renames it to `project`; on any
/// error removes what it wrote.
pub(super) fn write_project(
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
