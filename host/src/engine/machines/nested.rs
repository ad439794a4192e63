//! The nested-workflow machine: another file as one entry, with its own input and state
//! (S41–S45).
//!
//! ## Transitions of `workflow`
//!
//! | Row | From | Event or condition | To | Issues |
//! |-----|------|--------------------|----|--------|
//! | `start` | new | its input and state pass their schemas (S41, S43) | running | record, `step-started`; the file's instance (input, state from its initial state under the parent's), its first entry |
//! | `invalid-input` | new | its input breaks the file's input schema (S41) | failed | record, `step-started`, `step-failed` (`invalid-input`) |
//! | `invalid-state` | new | its first state breaks the file's state schema | failed | record, `step-started`, `step-failed` (`invalid-state`) |
//! | `wait` | running, suspended | after a pass, its file still runs | running | — |
//! | `resumed` | suspended | its file runs again (S45) | running | record `running` |
//! | `suspend` | running | its file suspended (S45) | suspended | record `suspended` |
//! | `succeed` | running, suspended | its file succeeded (or bailed) and its steps wrote no state | succeeded | record, `step-succeeded`, `.steps` |
//! | `merge` | running, suspended | its file succeeded (or bailed) and the keys its steps wrote merge into the parent's state (S43) | succeeded | the parent's state patched; record, `step-succeeded`, `.steps` |
//! | `merge-failed` | running, suspended | the keys its steps wrote break the parent's state schema | failed | record, `step-failed` |
//! | `end` | running, suspended | its file ended otherwise: failure, tripwire, cancel (S44) | as its file | its patches dropped; record, the closing event |
//!
//! Each row is marked where the code takes it (`transition!`, see `engine::transitions`).

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::engine::context::{Cx, Frame};
use crate::engine::drive::drive_seq;
use crate::engine::lifecycle::{end_node, start_block};
use crate::engine::model::{EntryDef, EntryKind};
use crate::engine::nodes::{End, ListRef, Node, NodeKind, Phase, Seq};
use crate::engine::patches::apply_patches;
use crate::engine::records::StepStatus;
use crate::engine::schema;
use crate::engine::state::FileState;
use crate::engine::transitions::transition;

/// Starts the nested file with its own input and state, drives it, and merges the keys its
/// steps wrote into the parent state when it succeeds (S41–S45).
pub(crate) fn drive(node: &mut Node, entry: &EntryDef, frame: &Frame, cx: &mut Cx) {
    let EntryKind::Workflow { file: file_id } = &entry.kind else {
        return;
    };
    let file_id = *file_id;
    let key = format!("{}/{}", frame.scopes[0], entry.path);
    if node.phase == Phase::New {
        start_block(node, entry, frame, cx);
        let file = cx.graph.file(file_id);
        let mut input = Value::clone(&node.input);
        if let Some(schema) = &file.input_schema
            && let Err(v) = schema.fill_and_check(&mut input)
        {
            transition!("workflow", "invalid-input");
            let mut err = cx.error(
                frame,
                &entry.path,
                "invalid-input",
                format!("workflow {}: input: {}", entry.path, schema::summarize(&v)),
            );
            err.details = Some(schema::details(&v));
            end_node(node, entry, frame, cx, End::Failed(err));
            return;
        }
        let mut state = file.initial_state.clone();
        if let (Value::Object(nested), Value::Object(parent)) =
            (&mut state, &*cx.file_state(frame).state)
        {
            for (k, v) in parent {
                nested.insert(k.clone(), v.clone());
            }
        }
        if let Some(schema) = &file.state_schema
            && let Err(v) = schema.check(&state)
        {
            transition!("workflow", "invalid-state");
            let mut err = cx.error(
                frame,
                &entry.path,
                "invalid-state",
                format!("workflow {}: state: {}", entry.path, schema::summarize(&v)),
            );
            err.details = Some(schema::details(&v));
            end_node(node, entry, frame, cx, End::Failed(err));
            return;
        }
        transition!("workflow", "start");
        let input = Arc::new(input);
        cx.files.insert(
            key.clone(),
            FileState {
                input: Arc::clone(&input),
                state: Arc::new(state),
                written: Vec::new(),
                bailed: None,
            },
        );
        cx.results.insert(key.clone(), Arc::default());
        node.kind = NodeKind::Nested(Seq::new(ListRef::File(file_id), file.body[0], input));
    }
    let inner = Frame {
        file: file_id,
        file_key: key.clone(),
        scopes: vec![key.clone()],
        foreach_index: frame.foreach_index,
        iteration: frame.iteration,
        in_item: frame.in_item,
    };
    let NodeKind::Nested(seq) = &mut node.kind else {
        return;
    };
    drive_seq(seq, &inner, cx);
    match seq.phase.clone() {
        Phase::New | Phase::Running => {
            transition!("workflow", "wait");
            if node.phase == Phase::Suspended {
                transition!("workflow", "resumed");
                set_status(entry, frame, cx, StepStatus::Running);
            }
            node.phase = Phase::Running;
        }
        Phase::Suspended => {
            if node.phase != Phase::Suspended {
                transition!("workflow", "suspend");
                set_status(entry, frame, cx, StepStatus::Suspended);
            }
            node.phase = Phase::Suspended;
        }
        Phase::Done(end) => {
            let nested = cx.files.remove(&key);
            cx.results.remove(&key);
            let end = match end {
                End::Success(v) | End::Bail(v) => {
                    let patch: Map<String, Value> = nested
                        .map(|n| {
                            n.written
                                .iter()
                                .filter_map(|k| n.state.get(k).map(|v| (k.clone(), v.clone())))
                                .collect()
                        })
                        .unwrap_or_default();
                    if patch.is_empty() {
                        transition!("workflow", "succeed");
                        End::Success(v)
                    } else {
                        match apply_patches(cx, frame, entry, &[Value::Object(patch)]) {
                            Ok(()) => {
                                transition!("workflow", "merge");
                                End::Success(v)
                            }
                            Err(f) => {
                                transition!("workflow", "merge-failed");
                                let mut err = cx.error(frame, &entry.path, &f.code, f.message);
                                err.details = f.details;
                                End::Failed(err)
                            }
                        }
                    }
                }
                other => {
                    transition!("workflow", "end");
                    other
                }
            };
            end_node(node, entry, frame, cx, end);
        }
    }
}

/// Keeps the entry's record in step with its file: `suspended` while the file is, `running`
/// again once it is resumed (S45). Each enclosing `workflow:` entry follows its own file, so
/// the whole chain does, at any depth.
fn set_status(entry: &EntryDef, frame: &Frame, cx: &mut Cx, status: StepStatus) {
    cx.record(frame, entry, |rec, item| {
        rec.status = status;
        if let Some(item) = item {
            item.status = status;
        }
    });
}

/// The scenarios of this file: its tests, and a part of the corpus the machines' transition
/// tables are checked against (`engine::transitions`).
#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use crate::engine::schema::Schema;
    use crate::engine::sim::{Answer, Sim, done, fail, file, step, suspend, workflow};
    use crate::engine::transitions::scenarios;
    use crate::engine::{RunStatus, StepStatus};

    #[test]
    fn s41_a_nested_file_is_one_entry_whose_inner_records_sit_under_its_path() {
        let sim = Sim::new(
            file(
                "w",
                vec![
                    workflow("outer", file("child", vec![step("a"), step("b")])),
                    step("z"),
                ],
            ),
            json!({"n": 1}),
        )
        .on("outer.b", [done(json!("inner result"))])
        .started();
        assert_eq!(sim.status(), RunStatus::Success);
        let a = sim.calls_to("outer.a");
        assert_eq!(
            (a[0].workflow_id.as_str(), &*a[0].input),
            ("child", &json!({"n": 1}))
        );
        assert_eq!(
            sim.record("outer").output.as_deref(),
            Some(&json!("inner result"))
        );
        assert_eq!(sim.record("outer.a").status, StepStatus::Success);
        assert_eq!(*sim.calls_to("z")[0].input, json!("inner result"));
    }

    #[test]
    fn s41_an_input_breaking_the_nested_input_schema_fails_the_entry_with_invalid_input() {
        let sim = Sim::new(
            file(
                "w",
                vec![workflow(
                    "outer",
                    file("child", vec![step("a")]).input_schema(json!({"required": ["id"]})),
                )],
            ),
            json!({}),
        )
        .started();
        assert_eq!(sim.status(), RunStatus::Failed);
        let error = sim.record("outer").error.clone().expect("an error");
        assert_eq!(
            (error.code.as_str(), error.step.as_str()),
            ("invalid-input", "outer")
        );
        assert!(sim.calls_to("outer.a").is_empty());
    }

    #[test]
    fn s43_nested_state_starts_from_its_initial_state_under_the_parents_and_written_keys_merge_back()
     {
        let sim = Sim::new(
            file(
                "w",
                vec![
                    step("p"),
                    workflow(
                        "outer",
                        file("child", vec![step("a")]).initial_state(json!({"x": 0, "y": 5})),
                    ),
                    step("z"),
                ],
            ),
            json!({}),
        )
        .on("p", [done(json!(1)).patch(json!({"x": 1}))])
        .on("outer.a", [done(json!(2)).patch(json!({"y": 6, "k": 1}))])
        .started();
        assert_eq!(*sim.calls_to("outer.a")[0].state, json!({"x": 1, "y": 5}));
        assert_eq!(*sim.calls_to("z")[0].state, json!({"x": 1, "y": 6, "k": 1}));
    }

    #[test]
    fn s43_s44_an_inner_failure_drops_the_nested_patches_and_fails_the_entry_with_the_same_error() {
        let sim = Sim::new(
            file(
                "w",
                vec![workflow("outer", file("child", vec![step("a"), step("b")]))],
            ),
            json!({}),
        )
        .on("outer.a", [done(json!(1)).patch(json!({"k": 1}))])
        .on("outer.b", [fail("inner")])
        .started();
        assert_eq!(sim.status(), RunStatus::Failed);
        let error = sim.record("outer").error.clone().expect("an error");
        assert_eq!(
            (error.code.as_str(), error.step.as_str()),
            ("inner", "outer.b")
        );
        assert_eq!(sim.run.error, Some(error));
        assert_eq!(*sim.run.files[""].state, json!({}));
        assert_eq!(
            sim.calls_to("outer.b").len(),
            1,
            "S44: never retried as a whole"
        );
    }

    #[test]
    fn s45_an_inner_suspension_at_any_depth_is_listed_by_full_path_resumed_by_prefix_and_continues()
    {
        let mut sim = Sim::new(
            file(
                "w",
                vec![workflow(
                    "outer",
                    file(
                        "mid",
                        vec![workflow(
                            "inner",
                            file("leaf", vec![step("a"), step("s"), step("e")]),
                        )],
                    ),
                )],
            ),
            json!({}),
        )
        .on("outer.inner.s", [suspend(json!({"q": 1}), &["deep"])])
        .started();
        assert_eq!(sim.status(), RunStatus::Suspended);
        let listed: Vec<_> = crate::engine::suspended(&sim.run, &sim.graph)
            .into_iter()
            .map(|s| s.path)
            .collect();
        assert_eq!(listed, ["outer.inner.s"]);
        sim.resume(Some("outer"), None, None, json!({"go": 1}))
            .expect("resumed by prefix");
        assert_eq!(sim.status(), RunStatus::Success);
        assert_eq!(sim.calls_to("outer.inner.a").len(), 1, "never again");
        assert_eq!(sim.calls_to("outer.inner.e").len(), 1);
    }

    #[test]
    fn s45_every_enclosing_workflow_entry_is_suspended_while_an_inner_step_is_and_running_once_resumed()
     {
        let mut sim = Sim::new(
            file(
                "w",
                vec![workflow(
                    "outer",
                    file(
                        "mid",
                        vec![workflow("inner", file("leaf", vec![step("s")]))],
                    ),
                )],
            ),
            json!({}),
        )
        .on_call("outer.inner.s", |call| match call.resume {
            None => suspend(json!({}), &[]),
            Some(_) => Answer::Hold,
        })
        .started();
        assert_eq!(sim.status(), RunStatus::Suspended);
        for path in ["outer", "outer.inner", "outer.inner.s"] {
            assert_eq!(sim.record(path).status, StepStatus::Suspended, "{path}");
        }
        sim.resume(Some("outer"), None, None, json!({}))
            .expect("resumed");
        for path in ["outer", "outer.inner", "outer.inner.s"] {
            assert_eq!(sim.record(path).status, StepStatus::Running, "{path}");
        }
        sim.answer("outer.inner.s", None, done(json!(1)));
        for path in ["outer", "outer.inner", "outer.inner.s"] {
            assert_eq!(sim.record(path).status, StepStatus::Success, "{path}");
        }
    }

    /// Gives the file `id` of `sim`'s graph the state schema `schema`.
    fn state_schema(sim: &mut Sim, id: &str, schema: serde_json::Value) {
        if let Some(file) = sim.graph.files.iter_mut().find(|f| f.id == id) {
            file.state_schema = Some(Schema::new(schema));
        }
    }

    #[test]
    fn s43_a_nested_first_state_breaking_its_state_schema_fails_the_entry_with_invalid_state() {
        let child = file("child", vec![step("a")]).initial_state(json!({"x": "text"}));
        let mut sim = Sim::new(file("w", vec![workflow("outer", child)]), json!({}));
        state_schema(
            &mut sim,
            "child",
            json!({"properties": {"x": {"type": "integer"}}}),
        );
        let sim = sim.started();
        assert_eq!(sim.status(), RunStatus::Failed);
        assert_eq!(
            sim.record("outer").error.as_ref().map(|e| e.code.as_str()),
            Some("invalid-state")
        );
        assert!(sim.calls_to("outer.a").is_empty());
    }

    #[test]
    fn s43_keys_a_nested_file_wrote_that_break_the_parents_state_schema_fail_the_entry() {
        let mut sim = Sim::new(
            file(
                "w",
                vec![workflow("outer", file("child", vec![step("a")])), step("z")],
            ),
            json!({}),
        )
        .on("outer.a", [done(json!(1)).patch(json!({"k": "text"}))]);
        state_schema(
            &mut sim,
            "w",
            json!({"properties": {"k": {"type": "integer"}}}),
        );
        let sim = sim.started();
        assert_eq!(sim.status(), RunStatus::Failed);
        let error = sim.record("outer").error.clone().expect("an error");
        assert_eq!(
            (error.code.as_str(), error.step.as_str()),
            ("invalid-state", "outer")
        );
        assert_eq!(*sim.run.files[""].state, json!({}), "nothing merged");
        assert!(sim.calls_to("z").is_empty());
    }

    /// Every test above, by name.
    pub(crate) const SCENARIOS: &[(&str, fn())] = scenarios![
        s41_a_nested_file_is_one_entry_whose_inner_records_sit_under_its_path,
        s41_an_input_breaking_the_nested_input_schema_fails_the_entry_with_invalid_input,
        s43_nested_state_starts_from_its_initial_state_under_the_parents_and_written_keys_merge_back,
        s43_s44_an_inner_failure_drops_the_nested_patches_and_fails_the_entry_with_the_same_error,
        s45_an_inner_suspension_at_any_depth_is_listed_by_full_path_resumed_by_prefix_and_continues,
        s45_every_enclosing_workflow_entry_is_suspended_while_an_inner_step_is_and_running_once_resumed,
        s43_a_nested_first_state_breaking_its_state_schema_fails_the_entry_with_invalid_state,
        s43_keys_a_nested_file_wrote_that_break_the_parents_state_schema_fail_the_entry,
    ];
}
