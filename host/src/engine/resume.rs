//! Resume selection: which suspended steps a resume names (checked into a
//! [`Selection`]), and the run's `suspended` list (S62, S66–S69).

use super::context::Selection;
use super::events::{Refusal, ResumeRequest};
use super::machines::agent::{approval_schema, approvals};
use super::model::{EntryId, EntryKind, Graph};
use super::nodes::{NodeKind, StepNode, StepWait};
use super::records::SuspendedEntry;
use super::schema::{self, Schema};
use super::state::{RunState, RunStatus};
use super::visit::visit_seq;

/// Checks a resume against the run and picks the one path it resumes, or refuses (S67–S69).
pub(crate) fn select_resume(
    run: &RunState,
    graph: &Graph,
    req: ResumeRequest,
) -> Result<Selection, Refusal> {
    if run.status != RunStatus::Suspended {
        return Err(Refusal::NotSuspended {
            run: run.run_id.clone(),
            status: run.status,
        });
    }
    if req.step.is_some() && req.label.is_some() {
        return Err(Refusal::Other(
            "--step and --label cannot be used together; pick one".into(),
        ));
    }
    let all = suspended_list(run, graph);
    let list_paths = |entries: &[&(EntryId, String, SuspendedEntry)]| {
        let mut paths: Vec<&str> = Vec::new();
        for (_, p, _) in entries {
            if !paths.contains(&p.as_str()) {
                paths.push(p);
            }
        }
        paths.join(", ")
    };
    let everything: Vec<&(EntryId, String, SuspendedEntry)> = all.iter().collect();
    let mut chosen: Vec<&(EntryId, String, SuspendedEntry)> = if let Some(step) = &req.step {
        let prefix = format!("{step}.");
        let c: Vec<_> = all
            .iter()
            .filter(|(_, p, _)| p == step || p.starts_with(&prefix))
            .collect();
        if c.is_empty() {
            return Err(Refusal::Other(format!(
                "step {step} is not suspended; suspended steps: {}",
                list_paths(&everything)
            )));
        }
        c
    } else if let Some(label) = &req.label {
        let c: Vec<_> = all
            .iter()
            .filter(|(_, _, e)| e.labels.contains(label))
            .collect();
        if c.is_empty() {
            return Err(Refusal::Other(format!(
                "no suspended step has label {label}; suspended steps: {}",
                list_paths(&everything)
            )));
        }
        c
    } else {
        everything.clone()
    };
    if let Some(n) = req.foreach_index {
        if chosen.iter().all(|(_, _, e)| e.foreach_index.is_none()) {
            return Err(Refusal::Other(format!(
                "step {} is not inside a foreach",
                list_paths(&chosen)
            )));
        }
        let kept: Vec<_> = chosen
            .iter()
            .copied()
            .filter(|(_, _, e)| e.foreach_index == Some(n))
            .collect();
        if kept.is_empty() {
            let items: Vec<String> = chosen
                .iter()
                .filter_map(|(_, _, e)| e.foreach_index.map(|i| i.to_string()))
                .collect();
            return Err(Refusal::Other(format!(
                "item {n} of {} is not suspended; suspended items: {}",
                list_paths(&chosen),
                items.join(", ")
            )));
        }
        chosen = kept;
    }
    let first_path = &chosen[0].1;
    if chosen.iter().any(|(_, p, _)| p != first_path) {
        return Err(Refusal::Other(format!(
            "ambiguous resume: suspended steps {}; pick one with --step or --label",
            list_paths(&chosen)
        )));
    }
    let entry = graph.entry(chosen[0].0);
    let mut data = req.data;
    let approval;
    let checked = match &entry.kind {
        EntryKind::Step(def) => def.schemas.resume.as_ref(),
        EntryKind::Agent(_) => {
            approval = Schema::new(approval_schema());
            Some(&approval)
        }
        _ => None,
    };
    if let Some(schema) = checked
        && let Err(violations) = schema.fill_and_check(&mut data)
    {
        return Err(Refusal::InvalidData {
            message: format!(
                "step {first_path}: resume data: {}",
                schema::summarize(&violations)
            ),
            violations,
        });
    }
    Ok(Selection {
        path: first_path.clone(),
        indexes: chosen
            .iter()
            .filter_map(|(_, _, e)| e.foreach_index)
            .collect(),
        data,
    })
}

fn suspended_list(run: &RunState, graph: &Graph) -> Vec<(EntryId, String, SuspendedEntry)> {
    let mut found = Vec::new();
    visit_seq(&run.root, None, &mut |node, index| {
        if let NodeKind::Agent(agent) = &node.kind {
            for (path, entry) in approvals(agent, index) {
                found.push((node.entry, path, entry));
            }
        }
        if let NodeKind::Step(StepNode {
            wait: StepWait::Resume { payload, labels },
            ..
        }) = &node.kind
        {
            let path = graph.entry(node.entry).path.clone();
            found.push((
                node.entry,
                path.clone(),
                SuspendedEntry {
                    path,
                    labels: labels.clone(),
                    payload: payload.clone(),
                    foreach_index: index,
                },
            ));
        }
    });
    found.sort_by_key(|(entry, _, e)| (*entry, e.foreach_index));
    found
}

/// The run's suspended list with paths, for records and events (S66).
pub(crate) fn suspended(run: &RunState, graph: &Graph) -> Vec<SuspendedEntry> {
    suspended_list(run, graph)
        .into_iter()
        .map(|(_, _, e)| e)
        .collect()
}

/// The scenarios of this file: its tests, and a part of the corpus the machines' transition
/// tables are checked against (`engine::transitions`).
#[cfg(test)]
pub(crate) mod tests {
    use serde_json::{Value, json};

    use super::super::sim::{Sim, file, foreach, parallel, step, suspend};
    use super::super::transitions::scenarios;
    use super::super::{Refusal, RunStatus};

    /// Three suspended paths: `p.a` (label x), `p.b` (labels x, y) and both items of `p.f.s`.
    fn suspended_three() -> Sim {
        Sim::new(
            file(
                "w",
                vec![parallel(
                    "p",
                    vec![
                        step("a"),
                        step("b").resume_schema(json!({"required": ["ok"]})),
                        foreach("f", 2, vec![step("s")]),
                    ],
                )],
            ),
            json!([1, 2]),
        )
        .on_call("p.a", |call| match call.resume {
            None => suspend(json!({"a": 1}), &["x"]),
            Some(_) => super::super::sim::done(json!("a")),
        })
        .on_call("p.b", |call| match call.resume {
            None => suspend(json!({"b": 1}), &["x", "y"]),
            Some(_) => super::super::sim::done(json!("b")),
        })
        .on_call("p.f.s", |call| match call.resume {
            None => suspend(json!({}), &[]),
            Some(_) => super::super::sim::done(Value::clone(&call.input)),
        })
        .started()
    }

    /// Resumes with this selection, expects a refusal with `message`, and checks nothing
    /// changed.
    fn refused(
        sim: &mut Sim,
        step: Option<&str>,
        label: Option<&str>,
        index: Option<u32>,
        message: &str,
    ) {
        let before = sim.run.clone();
        let events = sim.events.len();
        let err = sim
            .resume(step, label, index, json!({"ok": true}))
            .expect_err("refused");
        assert_eq!(err.to_string(), message);
        assert_eq!(sim.run, before, "S69: a refusal changes nothing");
        assert_eq!(sim.events.len(), events);
    }

    #[test]
    fn s69_a_run_that_is_not_suspended_is_refused() {
        let mut sim = Sim::new(file("w", vec![step("a")]), json!({}));
        refused(
            &mut sim,
            None,
            None,
            None,
            "run run is not suspended (status: pending)",
        );
        let mut sim = sim.started();
        refused(
            &mut sim,
            None,
            None,
            None,
            "run run is not suspended (status: success)",
        );
    }

    #[test]
    fn s67_step_together_with_label_is_refused() {
        let mut sim = suspended_three();
        let err = sim
            .resume(Some("p.a"), Some("x"), None, json!({}))
            .expect_err("refused");
        assert!(matches!(err, Refusal::Other(m) if m.contains("--step and --label")));
    }

    #[test]
    fn s68_a_selection_of_several_paths_is_ambiguous_and_lists_them_in_suspended_order() {
        let mut sim = suspended_three();
        refused(
            &mut sim,
            None,
            None,
            None,
            "ambiguous resume: suspended steps p.a, p.b, p.f.s; pick one with --step or --label",
        );
        refused(
            &mut sim,
            None,
            Some("x"),
            None,
            "ambiguous resume: suspended steps p.a, p.b; pick one with --step or --label",
        );
        refused(
            &mut sim,
            Some("p"),
            None,
            None,
            "ambiguous resume: suspended steps p.a, p.b, p.f.s; pick one with --step or --label",
        );
    }

    #[test]
    fn s69_a_step_label_or_item_that_is_not_suspended_is_refused_with_what_is() {
        let mut sim = suspended_three();
        refused(
            &mut sim,
            Some("p.z"),
            None,
            None,
            "step p.z is not suspended; suspended steps: p.a, p.b, p.f.s",
        );
        refused(
            &mut sim,
            None,
            Some("nope"),
            None,
            "no suspended step has label nope; suspended steps: p.a, p.b, p.f.s",
        );
        refused(
            &mut sim,
            Some("p.f.s"),
            None,
            Some(5),
            "item 5 of p.f.s is not suspended; suspended items: 0, 1",
        );
        refused(
            &mut sim,
            Some("p.a"),
            None,
            Some(0),
            "step p.a is not inside a foreach",
        );
    }

    #[test]
    fn s62_resume_data_breaking_the_resume_schema_is_refused_and_changes_nothing() {
        let mut sim = suspended_three();
        let before = sim.run.clone();
        let err = sim
            .resume(Some("p.b"), None, None, json!({}))
            .expect_err("refused");
        assert!(
            matches!(&err, Refusal::InvalidData { message, .. } if message.starts_with("step p.b: resume data:"))
        );
        assert_eq!(sim.run, before);
    }

    #[test]
    fn s67_s68_a_label_prefix_or_item_selects_exactly_what_it_names() {
        let mut sim = suspended_three();
        sim.resume(None, Some("y"), None, json!({"ok": 1}))
            .expect("label y names p.b only");
        assert_eq!(sim.status(), RunStatus::Suspended);
        assert_eq!(sim.calls_to("p.b").len(), 2);
        sim.resume(Some("p.f.s"), None, Some(1), json!({}))
            .expect("item 1");
        let items: Vec<_> = sim
            .calls_to("p.f.s")
            .iter()
            .map(|c| c.foreach_index)
            .collect();
        assert_eq!(items, [Some(0), Some(1), Some(1)]);
        sim.resume(Some("p.f"), None, None, json!({}))
            .expect("a prefix that names one path");
        sim.resume(Some("p.a"), None, None, json!({}))
            .expect("the last one");
        assert_eq!(sim.status(), RunStatus::Success);
    }

    /// Every test above, by name.
    pub(crate) const SCENARIOS: &[(&str, fn())] = scenarios![
        s69_a_run_that_is_not_suspended_is_refused,
        s67_step_together_with_label_is_refused,
        s68_a_selection_of_several_paths_is_ambiguous_and_lists_them_in_suspended_order,
        s69_a_step_label_or_item_that_is_not_suspended_is_refused_with_what_is,
        s62_resume_data_breaking_the_resume_schema_is_refused_and_changes_nothing,
        s67_s68_a_label_prefix_or_item_selects_exactly_what_it_names,
    ];
}
