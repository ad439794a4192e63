//! The context of one drive pass: where an execution sits ([`Frame`]), what a resume selected
//! ([`Selection`]) and what the pass may read and change ([`Cx`]): files, results, records,
//! tokens and the commands it emits.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::{Map, Value};

use super::commands::{Command, EventKind, ScopeResults, Tracking};
use super::event_data::EventData;
use super::expr::{FieldReads, Reads};
use super::invocation::InvocationResult;
use super::model::{EntryDef, FileId, Graph};
use super::nodes::{NodeKind, Seq, StepNode, StepWait};
use super::records::{ErrorInfo, ItemRecord, StepRecord, StepStatus};
use super::state::FileState;
use super::time::{Millis, rfc3339};
use super::visit::visit_seq;

/// Where an execution sits: its file instance, visible scopes, item and iteration.
#[derive(Clone)]
pub(crate) struct Frame {
    /// The file instance the execution's entry is written in.
    pub(crate) file: FileId,
    /// The key of that file instance's state in [`super::RunState::files`].
    pub(crate) file_key: String,
    /// Result scopes, innermost first.
    pub(crate) scopes: Vec<String>,
    /// The innermost enclosing foreach item.
    pub(crate) foreach_index: Option<u32>,
    /// The innermost enclosing loop iteration.
    pub(crate) iteration: Option<u32>,
    /// Inside a foreach item: records hold items, and entries emit no step events (S31).
    pub(crate) in_item: bool,
}

impl Frame {
    /// The frame of the top-level file.
    pub(crate) fn root() -> Self {
        Frame {
            file: 0,
            file_key: String::new(),
            scopes: vec![String::new()],
            foreach_index: None,
            iteration: None,
            in_item: false,
        }
    }
}

/// The suspended steps a resume selects, with its checked data (S67–S69, S62).
pub(crate) struct Selection {
    /// The one path selected (S68).
    pub(crate) path: String,
    /// The foreach items selected; empty when not inside a foreach.
    pub(crate) indexes: Vec<u32>,
    /// The resume data, defaults filled.
    pub(crate) data: Value,
}

impl Selection {
    /// Whether the execution at `path`, in the foreach item of `frame` if any, is selected.
    pub(crate) fn selects(&self, path: &str, frame: &Frame) -> bool {
        self.path == path
            && (self.indexes.is_empty()
                || frame
                    .foreach_index
                    .is_some_and(|i| self.indexes.contains(&i)))
    }
}

/// What one drive pass reads and changes: the run's parts, what the event brought, and the
/// commands gathered so far.
pub(crate) struct Cx<'a> {
    /// The run's graph.
    pub(crate) graph: &'a Graph,
    /// The event's instant.
    pub(crate) now: Millis,
    /// `now` as RFC 3339, formatted once per pass for every record it stamps.
    pub(crate) stamp: OnceCell<String>,
    /// The run's id.
    pub(crate) run_id: &'a str,
    /// File instances by key.
    pub(crate) files: &'a mut BTreeMap<String, FileState>,
    /// Visible outputs by scope key.
    pub(crate) results: &'a mut BTreeMap<String, Arc<ScopeResults>>,
    /// Records by path.
    pub(crate) records: &'a mut IndexMap<String, StepRecord, super::KeyHasher>,
    /// The next invocation or timer token.
    pub(crate) next_token: &'a mut u64,
    /// A cancel has been accepted.
    pub(crate) cancelling: bool,
    /// The invocation result the event brought, with its token: an event brings one at most.
    pub(crate) inbox: Option<(u64, InvocationResult)>,
    /// The timer the event fired.
    pub(crate) fired: Option<u64>,
    /// The most bytes a value the run makes may take ([`super::RunState::value_limit`]).
    pub(crate) value_limit: u64,
    /// The steps a resume selected.
    pub(crate) resume: Option<Selection>,
    /// A recovery: issue again what was in flight.
    pub(crate) reissue: bool,
    /// What a recovery issued again, for its log line.
    pub(crate) reissued: Vec<String>,
    /// The commands so far, in order.
    pub(crate) cmds: Vec<Command>,
}

impl Cx<'_> {
    /// A fresh invocation or timer token.
    pub(crate) fn token(&mut self) -> u64 {
        let t = *self.next_token;
        *self.next_token += 1;
        t
    }

    /// Emits a tracking event about the entry at `path`, with the frame's item and iteration.
    pub(crate) fn emit(
        &mut self,
        frame: &Frame,
        kind: EventKind,
        path: &str,
        data: impl Into<EventData>,
    ) {
        self.cmds.push(Command::Emit(Tracking {
            kind,
            path: Some(path.to_owned()),
            foreach_index: frame.foreach_index,
            iteration: frame.iteration,
            data: data.into(),
        }));
    }

    /// Whether this pass may change `seq`, which an earlier pass left waiting: a cancel, a
    /// resume or a recovery reaches every execution, and a result or a timer only the one that
    /// waits on its token. A pass drives every execution until it waits, so a sequence that
    /// waits on nothing this event brought would stay as it is: a foreach drives only the items
    /// an event touches, not all those in progress.
    pub(crate) fn touches(&self, seq: &Seq) -> bool {
        if self.cancelling || self.reissue || self.resume.is_some() {
            return true;
        }
        if self.inbox.is_none() && self.fired.is_none() {
            return false;
        }
        let mut touched = false;
        visit_seq(seq, None, &mut |node, _| match &node.kind {
            NodeKind::Step(StepNode {
                wait: StepWait::Invocation { token, .. },
                ..
            }) => touched |= self.inbox.as_ref().is_some_and(|(t, _)| t == token),
            NodeKind::Step(StepNode {
                wait: StepWait::Retry { token, .. },
                ..
            })
            | NodeKind::Sleep { token, .. } => touched |= self.fired == Some(*token),
            _ => {}
        });
        touched
    }

    /// Takes the result the event brought if it answers invocation `token`.
    pub(crate) fn take_result(&mut self, token: u64) -> Option<InvocationResult> {
        self.inbox
            .take_if(|(t, _)| *t == token)
            .map(|(_, result)| result)
    }

    /// Whether the event fired timer `token`; a fired timer is taken, as it fires once.
    pub(crate) fn take_fired(&mut self, token: u64) -> bool {
        self.fired.take_if(|t| *t == token).is_some()
    }

    /// The event's instant, RFC 3339.
    pub(crate) fn ts(&self) -> String {
        self.stamp.get_or_init(|| rfc3339(self.now)).clone()
    }

    /// The state of the frame's file instance.
    pub(crate) fn file_state(&self, frame: &Frame) -> &FileState {
        // A frame's file state exists for as long as the frame's executions do.
        &self.files[&frame.file_key]
    }

    /// The bail value of the frame's file instance, once one bailed (S79).
    pub(crate) fn bailed(&self, frame: &Frame) -> Option<Value> {
        self.files
            .get(&frame.file_key)
            .and_then(|f| f.bailed.clone())
    }

    /// The output maps of the scopes visible from `frame`, innermost first; shared, not copied.
    pub(crate) fn visible_scopes(&self, frame: &Frame) -> Vec<Arc<ScopeResults>> {
        frame
            .scopes
            .iter()
            .filter_map(|scope| self.results.get(scope).cloned())
            .collect()
    }

    /// The object expressions see (WORKFLOW-FORMAT.md §1), with only what `reads` says the
    /// expression can read of it: building the rest (every step's output, for a step late in
    /// a long sequence) for each evaluation made long runs quadratic.
    pub(crate) fn expr_input(&self, frame: &Frame, input: &Value, reads: &Reads) -> Value {
        let file = self.file_state(frame);
        let mut object = Map::new();
        for (name, value) in [
            ("input", input),
            ("state", &*file.state),
            ("init", &*file.input),
        ] {
            if let Some(picked) = reads.field(name).pick(value) {
                object.insert(name.into(), picked);
            }
        }
        let mut steps = Map::new();
        match reads.field("steps") {
            FieldReads::Nothing => return Value::Object(object),
            FieldReads::Members(names) => {
                // The innermost scope that has the name wins, as below.
                for name in names {
                    let found = frame
                        .scopes
                        .iter()
                        .find_map(|scope| self.results.get(scope)?.get(name));
                    if let Some(v) = found {
                        steps.insert(name.clone(), Value::clone(v));
                    }
                }
            }
            FieldReads::Whole => {
                // Outer scopes first, so inner ones win.
                for scope in frame.scopes.iter().rev() {
                    for (k, v) in self.results.get(scope).into_iter().flat_map(|m| m.iter()) {
                        steps.insert(k.clone(), Value::clone(v));
                    }
                }
            }
        }
        object.insert("steps".into(), Value::Object(steps));
        Value::Object(object)
    }

    /// Makes an output visible to `.steps` by id and by path (S8).
    pub(crate) fn register(&mut self, frame: &Frame, entry: &EntryDef, value: &Arc<Value>) {
        // Copied only while an invocation in flight still reads the scope's outputs.
        let scope = Arc::make_mut(self.results.entry(frame.scopes[0].clone()).or_default());
        let value = Arc::clone(value);
        scope.insert(entry.id.clone(), Arc::clone(&value));
        if entry.path != entry.id {
            scope.insert(entry.path.clone(), value);
        }
    }

    /// Opens the record of an execution that starts (S7, S31, S36).
    pub(crate) fn record_start(&mut self, frame: &Frame, entry: &EntryDef, input: &Arc<Value>) {
        let now = self.ts();
        if let (true, Some(index)) = (frame.in_item, frame.foreach_index) {
            let rec = self.put_item(entry, index, StepStatus::Running, Arc::clone(input));
            rec.status = StepStatus::Running;
            rec.started_at.get_or_insert(now);
            rec.iteration = frame.iteration;
        } else {
            let mut rec = StepRecord::new(StepStatus::Running);
            rec.input = Some(Arc::clone(input));
            rec.started_at = Some(now);
            rec.iteration = frame.iteration;
            self.records.insert(entry.path.clone(), rec);
        }
    }

    /// Records a branch arm that was not taken (S22); inside a foreach item, as that item's
    /// entry, so other items' entries stay.
    pub(crate) fn record_skipped(&mut self, frame: &Frame, entry: &EntryDef) {
        if let (true, Some(index)) = (frame.in_item, frame.foreach_index) {
            self.put_item(entry, index, StepStatus::Skipped, Arc::new(Value::Null));
        } else {
            let mut rec = StepRecord::new(StepStatus::Skipped);
            rec.iteration = frame.iteration;
            self.records.insert(entry.path.clone(), rec);
        }
    }

    /// Sets item `index` of the entry's record (made when missing) to a fresh item record.
    fn put_item(
        &mut self,
        entry: &EntryDef,
        index: u32,
        status: StepStatus,
        input: Arc<Value>,
    ) -> &mut StepRecord {
        let rec = self
            .records
            .entry(entry.path.clone())
            .or_insert_with(|| StepRecord::new(status));
        let items = rec.items.get_or_insert_with(Vec::new);
        let item = ItemRecord {
            index,
            status,
            input,
            output: None,
            error: None,
            attempts: 0,
        };
        match items.binary_search_by_key(&index, |i| i.index) {
            Ok(pos) => items[pos] = item,
            Err(pos) => items.insert(pos, item),
        }
        rec
    }

    /// Changes an execution's record: `f` sees the record and, inside an item, its item.
    pub(crate) fn record(
        &mut self,
        frame: &Frame,
        entry: &EntryDef,
        f: impl FnOnce(&mut StepRecord, Option<&mut ItemRecord>),
    ) {
        let Some(rec) = self.records.get_mut(&entry.path) else {
            return;
        };
        if let (true, Some(index)) = (frame.in_item, frame.foreach_index) {
            let mut items = rec.items.take().unwrap_or_default();
            // Kept in index order by `put_item`.
            let item = match items.binary_search_by_key(&index, |i| i.index) {
                Ok(pos) => items.get_mut(pos),
                Err(_) => None,
            };
            f(rec, item);
            rec.items = Some(items);
        } else {
            f(rec, None);
        }
    }

    /// An error at `path`, with the frame's item and iteration.
    pub(crate) fn error(
        &self,
        frame: &Frame,
        path: &str,
        code: &str,
        message: String,
    ) -> ErrorInfo {
        ErrorInfo {
            message,
            code: code.into(),
            step: path.into(),
            details: None,
            foreach_index: frame.foreach_index,
            iteration: frame.iteration,
        }
    }
}
