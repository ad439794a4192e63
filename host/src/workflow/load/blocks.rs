//! Block entries, one function each: `parallel`, `branch`, `foreach`, `loop`, `sleep`, `map`,
//! and `workflow` (a nested workflow file, expanded in place).

use super::read::Resolved;
use super::{Builder, FileCx, line};
use crate::engine::model::{BranchArm, EntryId, EntryKind};
use crate::workflow::raw::{
    RawBranch, RawDo, RawForeach, RawLoop, RawMap, RawParallel, RawSleep, RawWorkflow,
};
use crate::workflow::{WorkflowError, checks};

impl Builder<'_> {
    /// Builds a `parallel:` entry: its arms, at least one.
    pub(super) fn parallel(
        &mut self,
        p: &RawParallel,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<EntryId, WorkflowError> {
        self.claim_id(&p.id, fcx)?;
        let (eid, path) = self.push(&p.id.value, prefix, fcx)?;
        let arms = p
            .steps
            .iter()
            .map(|a| self.entry(a, &path, fcx))
            .collect::<Result<Vec<_>, _>>()?;
        if arms.is_empty() {
            return Err(WorkflowError::at(
                fcx.path,
                line(&p.id.referenced),
                format!("parallel {path} has no steps"),
                "add arms under `steps:`",
            ));
        }
        self.graph.entries[eid as usize].kind = EntryKind::Parallel { arms };
        Ok(eid)
    }

    /// Builds a `branch:` entry: each arm's `when:` and its entry (a `do:` list is a group
    /// under the arm's `id:`).
    pub(super) fn branch(
        &mut self,
        b: &RawBranch,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<EntryId, WorkflowError> {
        self.claim_id(&b.id, fcx)?;
        let (eid, path) = self.push(&b.id.value, prefix, fcx)?;
        let mut arms = Vec::new();
        for arm in &b.arms {
            let when = self.expr(&arm.when, &format!("branch {path}: when"), fcx)?;
            let entry = match (&arm.do_, &arm.id) {
                (RawDo::One(one), id) => {
                    if let Some(id) = id.as_ref().filter(|id| !checks::valid_id(&id.value)) {
                        return Err(WorkflowError::at(
                            fcx.path,
                            line(&id.referenced),
                            format!("arm id `{}` is not valid", id.value),
                            "use lowercase letters, digits, `-` and `_` only (`[a-z0-9-_]+`)",
                        ));
                    }
                    self.entry(one, &path, fcx)?
                }
                (RawDo::List(_), Some(id)) => {
                    self.claim_id(id, fcx)?;
                    let (gid, gpath) = self.push(&id.value, &path, fcx)?;
                    let body = self.list(&arm.do_, &gpath, fcx)?;
                    self.graph.entries[gid as usize].kind = EntryKind::Group { body };
                    gid
                }
                (RawDo::List(_), None) => {
                    return Err(WorkflowError::at(
                        fcx.path,
                        line(&arm.when.referenced),
                        format!("an arm of branch {path} has a `do:` list but no `id:`"),
                        "give the arm an `id:` (S107)",
                    ));
                }
            };
            arms.push(BranchArm { when, entry });
        }
        self.graph.entries[eid as usize].kind = EntryKind::Branch { arms };
        Ok(eid)
    }

    /// Builds a `foreach:` entry: its concurrency (1 or more) and its body.
    pub(super) fn foreach(
        &mut self,
        f: &RawForeach,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<EntryId, WorkflowError> {
        self.claim_id(&f.id, fcx)?;
        let (eid, path) = self.push(&f.id.value, prefix, fcx)?;
        let concurrency = f.concurrency.unwrap_or(1);
        if concurrency == 0 {
            return Err(WorkflowError::at(
                fcx.path,
                line(&f.id.referenced),
                format!("foreach {path}: concurrency 0"),
                "use 1 or more",
            ));
        }
        let body = self.list(&f.do_, &path, fcx)?;
        self.graph.entries[eid as usize].kind = EntryKind::Foreach { concurrency, body };
        Ok(eid)
    }

    /// Builds a `loop:` entry: its test (exactly one of `do-while` and `do-until`) and its
    /// body.
    pub(super) fn loop_(
        &mut self,
        l: &RawLoop,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<EntryId, WorkflowError> {
        self.claim_id(&l.id, fcx)?;
        let (eid, path) = self.push(&l.id.value, prefix, fcx)?;
        let (test, until) = match (&l.do_while, &l.do_until) {
            (Some(w), None) => (self.expr(w, &format!("loop {path}: do-while"), fcx)?, false),
            (None, Some(u)) => (self.expr(u, &format!("loop {path}: do-until"), fcx)?, true),
            _ => {
                return Err(WorkflowError::at(
                    fcx.path,
                    line(&l.id.referenced),
                    format!("loop {path} needs exactly one of do-while and do-until"),
                    "keep one of them",
                ));
            }
        };
        if let Some(n) = l.max_iterations
            && n > checks::MAX_LOOP_ITERATIONS
        {
            return Err(WorkflowError::at(
                fcx.path,
                line(&l.id.referenced),
                format!(
                    "loop {path}: max-iterations is {n}; at most {MAX_LOOP_ITERATIONS} are allowed",
                    MAX_LOOP_ITERATIONS = checks::MAX_LOOP_ITERATIONS
                ),
                "use a smaller guard; a loop that must go on longer is a run started again \
                 (or a `workflow:` step per batch)",
            ));
        }
        let body = self.list(&l.do_, &path, fcx)?;
        self.graph.entries[eid as usize].kind = EntryKind::Loop {
            test,
            until,
            max_iterations: l.max_iterations,
            body,
        };
        Ok(eid)
    }

    /// Builds a `sleep:` entry: exactly one of `ms` and `until`.
    pub(super) fn sleep(
        &mut self,
        s: &RawSleep,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<EntryId, WorkflowError> {
        self.claim_id(&s.id, fcx)?;
        let (eid, path) = self.push(&s.id.value, prefix, fcx)?;
        let until = match (&s.ms, &s.until) {
            (Some(_), None) => None,
            (None, Some(u)) => Some(self.expr(u, &format!("sleep {path}: until"), fcx)?),
            _ => {
                return Err(WorkflowError::at(
                    fcx.path,
                    line(&s.id.referenced),
                    format!("sleep {path} needs exactly one of ms and until"),
                    "keep one of them",
                ));
            }
        };
        self.graph.entries[eid as usize].kind = EntryKind::Sleep { ms: s.ms, until };
        Ok(eid)
    }

    /// Builds a `map:` entry: its expression.
    pub(super) fn map(
        &mut self,
        m: &RawMap,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<EntryId, WorkflowError> {
        self.claim_id(&m.id, fcx)?;
        let (eid, path) = self.push(&m.id.value, prefix, fcx)?;
        let expr = self.expr(&m.expr, &format!("map {path}: expr"), fcx)?;
        self.graph.entries[eid as usize].kind = EntryKind::Map { expr };
        Ok(eid)
    }

    /// Builds a `workflow:` entry: the nested file, expanded under the entry's path.
    pub(super) fn nested_workflow(
        &mut self,
        w: &RawWorkflow,
        prefix: &str,
        fcx: &mut FileCx,
    ) -> Result<EntryId, WorkflowError> {
        self.claim_id(&w.id, fcx)?;
        let (eid, path) = self.push(&w.id.value, prefix, fcx)?;
        let nested = Resolved::new(&fcx.parsed.dir.join(&w.file.value));
        let file = self.file(
            &nested.key,
            path,
            Some((fcx.path, w.file.referenced.line())),
        )?;
        self.graph.entries[eid as usize].kind = EntryKind::Workflow { file };
        Ok(eid)
    }
}
