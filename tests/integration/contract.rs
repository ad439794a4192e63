//! The contract lives in the repository (`docs/`, `wit/`) and stays true: every rule of
//! `docs/SEMANTICS.md` is checked by a test named after it, every page the README links to
//! exists, and nothing points outside the repository for the contract.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The repository's root (the workspace holding `host/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the weft crate sits inside the workspace")
        .to_path_buf()
}

/// Every file below `dir` whose name ends with `ext`.
fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, ext, out);
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The numbers of the rules `docs/SEMANTICS.md` defines, withdrawn ones left out.
fn rules() -> BTreeSet<u32> {
    let text = read(&root().join("docs/SEMANTICS.md"));
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix("- **S") else {
            continue;
        };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if line.contains("*withdrawn*") {
            continue;
        }
        if let Ok(n) = digits.parse() {
            out.insert(n);
        }
    }
    out
}

/// The rule numbers named by test functions (`fn s12_…`, `fn s94_s95_…`).
fn tested_rules() -> BTreeSet<u32> {
    let mut sources = Vec::new();
    files(&root().join("tests"), "rs", &mut sources);
    files(&root().join("host/src"), "rs", &mut sources);
    let mut out = BTreeSet::new();
    for path in sources {
        for line in read(&path).lines() {
            let Some(at) = line.find("fn s") else {
                continue;
            };
            let name: String = line[at + 3..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            for part in name.split('_') {
                match part.strip_prefix('s').map(str::parse::<u32>) {
                    Some(Ok(n)) => {
                        out.insert(n);
                    }
                    _ => break,
                }
            }
        }
    }
    out
}

#[test]
fn every_rule_of_the_semantics_has_a_test_named_after_it() {
    let rules = rules();
    assert!(
        rules.len() >= 118,
        "docs/SEMANTICS.md lost rules: {rules:?}"
    );
    let tested = tested_rules();
    let missing: Vec<_> = rules.difference(&tested).collect();
    assert!(
        missing.is_empty(),
        "rules with no test named after them: {missing:?}"
    );
}

#[test]
fn the_readme_links_only_to_pages_that_exist() {
    let readme = read(&root().join("README.md"));
    let mut checked = 0;
    for (at, _) in readme.match_indices("](") {
        let target: String = readme[at + 2..].chars().take_while(|c| *c != ')').collect();
        if target.contains("://") || target.starts_with('#') {
            continue;
        }
        let path = root().join(target.split('#').next().unwrap_or_default());
        assert!(
            path.exists(),
            "README links to {target}, which does not exist"
        );
        checked += 1;
    }
    assert!(
        checked >= 5,
        "the README should link to the contract in docs/"
    );
    for page in ["ARCHITECTURE.md", "WORKFLOW-FORMAT.md", "SEMANTICS.md"] {
        assert!(
            readme.contains(&format!("docs/{page}")),
            "README does not link docs/{page}"
        );
    }
}

#[test]
fn nothing_points_outside_the_repository_for_the_contract() {
    let outside = ["..", "shared", ""].join("/");
    let mut sources = vec![root().join("README.md")];
    files(&root().join("docs"), "md", &mut sources);
    files(&root().join("host/src"), "rs", &mut sources);
    files(&root().join("examples"), "rs", &mut sources);
    for path in sources {
        assert!(
            !read(&path).contains(&outside),
            "{} refers to {outside}: the repository must explain itself",
            path.display()
        );
    }
}
