//! Resume selection: which suspended steps a resume names, and the run's `suspended` list
//! (S62, S66–S69).

use serde_json::Value;

use super::events::{Refusal, ResumeRequest};
use super::model::{EntryId, EntryKind, Graph};
use super::nodes::{NodeKind, StepNode, StepWait};
use super::records::SuspendedEntry;
use super::schema;
use super::state::{RunState, RunStatus};
use super::visit::visit_seq;

/// The suspended steps a resume selects, with its checked data (S67–S69, S62).
pub(crate) struct Selection {
    /// The one path selected (S68).
    pub(crate) path: String,
    /// The foreach items selected; empty when not inside a foreach.
    pub(crate) indexes: Vec<u32>,
    /// The resume data, defaults filled.
    pub(crate) data: Value,
}

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
    if let EntryKind::Step(def) = &entry.kind
        && let Some(schema) = &def.schemas.resume
        && let Err(violations) = schema.fill_and_check(&mut data)
    {
        return Err(Refusal::InvalidData {
            message: format!(
                "step {}: resume data: {}",
                entry.path,
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
pub fn suspended(run: &RunState, graph: &Graph) -> Vec<SuspendedEntry> {
    suspended_list(run, graph)
        .into_iter()
        .map(|(_, _, e)| e)
        .collect()
}
