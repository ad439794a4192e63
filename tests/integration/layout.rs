//! The layout stays what docs/ARCHITECTURE.md says it is: its map names every directory and
//! every top-level file of `host/src`, and no source file there grows past 800 lines (one job
//! per file; a file that outgrows that is split by concern, as its neighbours were).

use std::path::{Path, PathBuf};

/// The most lines a source file of `host/src` may have.
const MAX_LINES: usize = 800;

/// The crate's source directory.
fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every directory and `.rs` file below `dir`, but inside `templates/` (text `weft new` writes
/// into projects, not the crate's code).
fn walk(dir: &Path, dirs: &mut Vec<PathBuf>, files: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "templates") {
                dirs.push(path);
                continue;
            }
            dirs.push(path.clone());
            walk(&path, dirs, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The fenced block under `## Layout` in docs/ARCHITECTURE.md.
fn layout_map() -> String {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ARCHITECTURE.md");
    let text = std::fs::read_to_string(&doc).expect("read docs/ARCHITECTURE.md");
    let section = text
        .split_once("\n## Layout\n")
        .map(|(_, rest)| rest)
        .expect("ARCHITECTURE.md has a Layout section");
    let block = section
        .split_once("```\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .map(|(block, _)| block)
        .expect("the Layout section has a fenced map");
    block.to_owned()
}

#[test]
fn no_source_file_of_the_crate_is_longer_than_800_lines() {
    let (mut dirs, mut files) = (Vec::new(), Vec::new());
    walk(&src(), &mut dirs, &mut files);
    let long: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(path).expect("read").lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", path.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "split these by concern, below {MAX_LINES} lines each: {long:#?}"
    );
}

#[test]
fn the_architecture_map_names_every_directory_and_top_level_file_of_the_crate() {
    let map = layout_map();
    let (mut dirs, mut files) = (Vec::new(), Vec::new());
    walk(&src(), &mut dirs, &mut files);
    let root = src();
    let mut missing = Vec::new();
    for dir in &dirs {
        let relative = dir.strip_prefix(&root).expect("below src");
        let name = format!(
            "{}/",
            relative.file_name().expect("named").to_string_lossy()
        );
        let top = relative.components().count() == 1;
        let named = if top {
            map.contains(&format!("src/{name}"))
        } else {
            map.contains(&name)
        };
        if !named {
            missing.push(relative.display().to_string());
        }
    }
    for file in files.iter().filter(|f| f.parent() == Some(root.as_path())) {
        let name = file.file_name().expect("named").to_string_lossy();
        if !map.contains(&format!("src/{name}")) {
            missing.push(name.into_owned());
        }
    }
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md's Layout map does not name: {missing:?}"
    );
}
