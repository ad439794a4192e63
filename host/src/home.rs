//! A home holds run inputs, outputs and state: what weft makes in it is its owner's alone —
//! directories `0700`, files `0600` — whatever the process's umask.
//!
//! Directories that exist already keep their mode (a home may be a directory the user made
//! and chose the mode of); everything weft creates is private.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The mode of every directory weft creates in a home.
pub(crate) const DIR_MODE: u32 = 0o700;
/// The mode of every file weft creates in a home.
pub(crate) const FILE_MODE: u32 = 0o600;

/// Creates `dir` and any missing parents, each `0700`.
pub(crate) fn create_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Creates a new file at `path`, `0600`; fails if it exists.
pub(crate) fn create_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
}

/// Makes what another program created under `dir` private: directories `0700`, files `0600`.
pub(crate) fn restrict_tree(dir: &Path) -> io::Result<()> {
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        std::fs::set_permissions(&d, Permissions::from_mode(DIR_MODE))?;
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                todo.push(entry.path());
            } else if kind.is_file() {
                std::fs::set_permissions(entry.path(), Permissions::from_mode(FILE_MODE))?;
            }
        }
    }
    Ok(())
}

/// Makes the file (or socket) at `path` private: `0600`.
#[cfg(feature = "cli")]
pub(crate) fn restrict_file(path: &Path) -> io::Result<()> {
    std::fs::set_permissions(path, Permissions::from_mode(FILE_MODE))
}
