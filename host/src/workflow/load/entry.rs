//! An entry of any kind: one step or one block per entry, each kind built by its own function
//! (blocks in `blocks`, steps in `step`, agents in `agent`); and the entries of a `do:`.

use super::{Builder, FileCx};
use crate::engine::model::EntryId;
use crate::workflow::WorkflowError;
use crate::workflow::raw::{RawDo, RawEntry};

impl Builder<'_> {
    /// Builds entry `e` under the path `prefix`, by its kind.
    pub(super) fn entry(
        &mut self,
        e: &RawEntry,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<EntryId, WorkflowError> {
        check_one_kind(e, fcx)?;
        if let Some(p) = &e.parallel {
            return self.parallel(p, prefix, fcx);
        }
        if let Some(b) = &e.branch {
            return self.branch(b, prefix, fcx);
        }
        if let Some(f) = &e.foreach {
            return self.foreach(f, prefix, fcx);
        }
        if let Some(l) = &e.loop_ {
            return self.loop_(l, prefix, fcx);
        }
        if let Some(s) = &e.sleep {
            return self.sleep(s, prefix, fcx);
        }
        if let Some(m) = &e.map {
            return self.map(m, prefix, fcx);
        }
        if let Some(w) = &e.workflow {
            return self.nested_workflow(w, prefix, fcx);
        }
        if let Some(a) = &e.agent {
            return self.agent(a, prefix, fcx);
        }
        self.step(e, prefix, fcx)
    }

    /// The entries of a `do:` (one entry, or a list of at least one) under the path `prefix`.
    pub(super) fn list(
        &mut self,
        d: &RawDo,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<Vec<EntryId>, WorkflowError> {
        match d {
            RawDo::One(e) => Ok(vec![self.entry(e, prefix, fcx)?]),
            RawDo::List(list) => {
                if list.is_empty() {
                    return Err(WorkflowError::at(
                        fcx.path,
                        None,
                        format!("an empty `do:` list under {prefix}"),
                        "add at least one entry",
                    ));
                }
                list.iter().map(|e| self.entry(e, prefix, fcx)).collect()
            }
        }
    }
}

/// Refuses an entry that mixes a step and blocks, or several blocks.
fn check_one_kind(e: &RawEntry, fcx: &FileCx) -> Result<(), WorkflowError> {
    let blocks = [
        e.parallel.is_some(),
        e.branch.is_some(),
        e.foreach.is_some(),
        e.loop_.is_some(),
        e.sleep.is_some(),
        e.map.is_some(),
        e.workflow.is_some(),
        e.agent.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    let step_fields = e.id.is_some()
        || e.plugin.is_some()
        || e.native.is_some()
        || e.step.is_some()
        || e.tool.is_some()
        || e.model.is_some()
        || e.input.is_some()
        || e.config.is_some();
    if blocks > 1 || (blocks == 1 && step_fields) {
        let ln = e.id.as_ref().map(|i| i.referenced.line());
        return Err(WorkflowError::at(
            fcx.path,
            ln,
            "an entry mixes a step and blocks, or several blocks".into(),
            "write one step or one block per entry",
        ));
    }
    Ok(())
}
