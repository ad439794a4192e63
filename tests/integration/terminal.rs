//! What a person at a terminal sees: each command's help (its own options apart from the global
//! ones, examples), the progress of a run (a live display on a terminal, lines on a pipe), a
//! failure said once, and a note while a plugin compiles.

/// Every command and subcommand, with its path of names (`["plugin", "compile"]`).
fn commands(cmd: &clap::Command, path: Vec<String>, all: &mut Vec<(Vec<String>, clap::Command)>) {
    // clap's own `help` subcommands are not weft's.
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let mut named = path.clone();
        named.push(sub.get_name().to_owned());
        if sub.has_subcommands() {
            commands(sub, named, all);
        } else {
            all.push((named, sub.clone()));
        }
    }
}

#[test]
fn every_command_has_examples_and_its_own_options_before_the_global_ones() {
    let mut root = weft::cli::command();
    let mut all = Vec::new();
    commands(&root, Vec::new(), &mut all);
    assert!(all.len() >= 14, "{} commands", all.len());
    let top = root.render_long_help().to_string();
    assert!(top.contains("Examples:\n  weft run "), "{top}");
    for (path, mut cmd) in all {
        let name = path.join(" ");
        let help = cmd.render_long_help().to_string();
        let examples = help
            .split_once("Examples:\n")
            .map(|(_, e)| e)
            .unwrap_or_else(|| panic!("`weft {name} --help` has examples: {help}"));
        assert!(
            examples
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("weft {name}"))
                    || l.contains(&format!(" {name} "))),
            "`weft {name}`'s examples use it: {examples}"
        );
        let needs_no_home = matches!(path[0].as_str(), "new" | "dev");
        if needs_no_home {
            // A command that opens no home offers none of the options about it.
            for hidden in ["--home", "--store", "--expr-steps", "--max-run-mib"] {
                assert!(
                    !help.contains(hidden),
                    "`weft {name} --help` offers {hidden}: {help}"
                );
            }
        } else {
            // The command's own options first, the global ones under their own heading.
            let own = help.find("Options:").expect("an Options heading");
            let global = help
                .find("Global options:")
                .unwrap_or_else(|| panic!("`weft {name} --help` has a Global options heading"));
            assert!(own < global, "{help}");
            assert!(help[global..].contains("--home <HOME>"), "{help}");
            assert!(!help[..global].contains("--home"), "{help}");
            // The short help leaves the limits out.
            let short = cmd.render_help().to_string();
            assert!(
                short.contains("--store") && !short.contains("--max-run-mib"),
                "{short}"
            );
        }
    }
}
