//! The machines' transition tables, and the check that the tests take every row of them.
//!
//! Every machine file opens with a table of its transitions (a section `## Transitions of
//! NAME` in its module doc): each row names a state, the event or condition that moves it,
//! the state it moves to, and the commands and events it issues. The code marks each row
//! where it takes it, with [`transition!`]: in test builds the mark records the row, in other
//! builds it is nothing at all.
//!
//! The tests below hold the tables to the code: every row has a mark and every mark names a
//! row, and the scenario corpus (every sim-based test of the machines and of cancel, resume,
//! replay and recovery, and the property tests' shapes from a fixed seed), run on the checking
//! test's own thread while it records, takes every row. A row no scenario takes fails, by
//! name.

/// Marks that a machine took a row of its transition table: `transition!("step", "start")`.
/// Recorded in test builds only (on the recording thread, see the tests); nothing otherwise.
macro_rules! transition {
    ($machine:literal, $row:literal) => {{
        #[cfg(test)]
        $crate::engine::transitions::took($machine, $row);
    }};
}

pub(crate) use transition;

/// A file's scenarios for the corpus, by name: `scenarios![s1_a, s2_b]`.
#[cfg(test)]
macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        &[$((stringify!($name), $name as fn())),*]
    };
}

#[cfg(test)]
pub(crate) use scenarios;

#[cfg(test)]
thread_local! {
    /// The rows taken on this thread while it records.
    static TAKEN: std::cell::RefCell<Option<std::collections::BTreeSet<(&'static str, &'static str)>>> =
        const { std::cell::RefCell::new(None) };
}

/// A file of the scenario corpus: its path in the engine and its scenarios, by name.
#[cfg(test)]
pub(crate) type FileScenarios = (&'static str, &'static [(&'static str, fn())]);

/// Records that `machine` took `row`, when this thread records.
#[cfg(test)]
pub(crate) fn took(machine: &'static str, row: &'static str) {
    TAKEN.with(|taken| {
        if let Some(taken) = taken.borrow_mut().as_mut() {
            taken.insert((machine, row));
        }
    });
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    use super::{FileScenarios, TAKEN};

    /// The sources that hold transition tables.
    const TABLES: &[(&str, &str)] = &[
        ("machines/step.rs", include_str!("machines/step.rs")),
        ("machines/map.rs", include_str!("machines/map.rs")),
        ("machines/sleep.rs", include_str!("machines/sleep.rs")),
        ("machines/parallel.rs", include_str!("machines/parallel.rs")),
        ("machines/branch.rs", include_str!("machines/branch.rs")),
        ("machines/foreach.rs", include_str!("machines/foreach.rs")),
        ("machines/loops.rs", include_str!("machines/loops.rs")),
        ("machines/nested.rs", include_str!("machines/nested.rs")),
        (
            "machines/agent/mod.rs",
            include_str!("machines/agent/mod.rs"),
        ),
    ];

    /// The scenario corpus: each file's scenarios, by file.
    const CORPUS: &[FileScenarios] = &[
        (
            "machines/step.rs",
            super::super::machines::step::tests::SCENARIOS,
        ),
        (
            "machines/map.rs",
            super::super::machines::map::tests::SCENARIOS,
        ),
        (
            "machines/sleep.rs",
            super::super::machines::sleep::tests::SCENARIOS,
        ),
        (
            "machines/parallel.rs",
            super::super::machines::parallel::tests::SCENARIOS,
        ),
        (
            "machines/branch.rs",
            super::super::machines::branch::tests::SCENARIOS,
        ),
        (
            "machines/foreach.rs",
            super::super::machines::foreach::tests::SCENARIOS,
        ),
        (
            "machines/loops.rs",
            super::super::machines::loops::tests::SCENARIOS,
        ),
        (
            "machines/nested.rs",
            super::super::machines::nested::tests::SCENARIOS,
        ),
        ("cancel.rs", super::super::cancel::tests::SCENARIOS),
        ("resume.rs", super::super::resume::tests::SCENARIOS),
        ("replay.rs", super::super::replay::tests::SCENARIOS),
        ("recovery_tests.rs", super::super::recovery_tests::SCENARIOS),
    ];

    /// The whole corpus: the files above and the agent's.
    fn corpus() -> impl Iterator<Item = &'static FileScenarios> {
        CORPUS
            .iter()
            .chain(super::super::machines::agent::tests::FILES)
    }

    /// The property tests' cases the corpus runs, from a fixed seed.
    const PROPERTY_CASES: u32 = 64;

    /// The rows of every table, by machine: `## Transitions of `NAME`` opens a machine's
    /// table, whose rows start with their name in backquotes.
    fn tables() -> BTreeMap<String, Vec<String>> {
        let mut tables: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (file, source) in TABLES {
            let mut machine: Option<String> = None;
            for line in source.lines() {
                let Some(doc) = line.strip_prefix("//!") else {
                    break;
                };
                let doc = doc.trim();
                if let Some(name) = doc.strip_prefix("## Transitions of `") {
                    let name = name.trim_end_matches('`').to_owned();
                    assert!(
                        tables.insert(name.clone(), Vec::new()).is_none(),
                        "{file}: a second table of {name}"
                    );
                    machine = Some(name);
                    continue;
                }
                let (Some(machine), Some(row)) = (&machine, doc.strip_prefix("| `")) else {
                    continue;
                };
                let row = row.split('`').next().unwrap_or_default().to_owned();
                let rows = tables.entry(machine.clone()).or_default();
                assert!(!rows.contains(&row), "{file}: row {machine}/{row} twice");
                rows.push(row);
            }
        }
        tables
    }

    /// Every `.rs` file below `dir`, with its path from the engine's directory.
    fn sources(dir: &Path, engine: &Path, out: &mut Vec<(String, String)>) {
        let entries = std::fs::read_dir(dir).expect("the engine's sources are readable");
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources(&path, engine, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(engine).expect("below the engine");
                let text = std::fs::read_to_string(&path).expect("readable");
                out.push((relative.display().to_string(), text));
            }
        }
    }

    /// The engine's sources but this file.
    fn engine_sources() -> Vec<(String, String)> {
        let engine = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
        let mut out = Vec::new();
        sources(&engine, &engine, &mut out);
        out.retain(|(file, _)| file != "transitions.rs");
        out.sort();
        out
    }

    /// The marks in `source`: `(machine, row)` of every `transition!("machine", "row")`.
    fn marks(source: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for piece in source.split("transition!(").skip(1) {
            let mut literals = piece.split('"');
            let (_, machine, _, row) = (
                literals.next(),
                literals.next(),
                literals.next(),
                literals.next(),
            );
            if let (Some(machine), Some(row)) = (machine, row) {
                out.push((machine.to_owned(), row.to_owned()));
            }
        }
        out
    }

    #[test]
    fn every_row_of_a_table_is_marked_in_the_code_and_every_mark_names_a_row() {
        let tables = tables();
        assert!(tables.len() >= 10, "the tables are found: {tables:?}");
        let mut marked: BTreeSet<(String, String)> = BTreeSet::new();
        let mut strays = Vec::new();
        for (file, source) in engine_sources() {
            for (machine, row) in marks(&source) {
                if !tables.get(&machine).is_some_and(|rows| rows.contains(&row)) {
                    strays.push(format!("{file}: {machine}/{row}"));
                }
                marked.insert((machine, row));
            }
        }
        assert!(strays.is_empty(), "marks that name no row: {strays:?}");
        let unmarked: Vec<String> = tables
            .iter()
            .flat_map(|(m, rows)| rows.iter().map(move |r| (m.clone(), r.clone())))
            .filter(|mr| !marked.contains(mr))
            .map(|(m, r)| format!("{m}/{r}"))
            .collect();
        assert!(unmarked.is_empty(), "rows no code marks: {unmarked:?}");
    }

    #[test]
    fn the_corpus_holds_every_test_of_the_files_it_names() {
        let sources: BTreeMap<String, String> = engine_sources().into_iter().collect();
        for (file, scenarios) in corpus() {
            let source = &sources[*file];
            let tests: Vec<&str> = source
                .split("#[test]")
                .skip(1)
                .filter_map(|after| {
                    let name = after.trim_start().strip_prefix("fn ")?;
                    name.split('(').next()
                })
                .collect();
            let listed: Vec<&str> = scenarios.iter().map(|(name, _)| *name).collect();
            assert_eq!(
                listed, tests,
                "{file}: the scenarios are its tests, in order"
            );
        }
    }

    #[test]
    fn the_scenario_corpus_takes_every_row_of_every_table() {
        TAKEN.with(|taken| *taken.borrow_mut() = Some(BTreeSet::new()));
        for (_, scenarios) in corpus() {
            for (_, scenario) in *scenarios {
                scenario();
            }
        }
        super::super::proptests::fixed_seed_cases(PROPERTY_CASES);
        let taken = TAKEN
            .with(|taken| taken.borrow_mut().take())
            .unwrap_or_default();
        let untaken: Vec<String> = tables()
            .iter()
            .flat_map(|(m, rows)| rows.iter().map(move |r| (m.clone(), r.clone())))
            .filter(|(m, r)| !taken.contains(&(m.as_str(), r.as_str())))
            .map(|(m, r)| format!("{m}/{r}"))
            .collect();
        assert!(untaken.is_empty(), "rows no scenario takes: {untaken:?}");
    }
}
