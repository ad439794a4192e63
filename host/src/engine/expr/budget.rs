//! Metered evaluation: a step budget and a stack guard that jaq cannot get past.
//!
//! jaq-core 3 has no fuel or interruption of its own, but every term it runs (and every native
//! filter it calls) first asks the context's data for the look-up table ([`HasLut::lut`]). The
//! data here carries a [`Meter`] that counts those calls and measures the stack; when either
//! limit is crossed it unwinds out of jaq with a [`Stop`] payload (`resume_unwind`, which runs no
//! panic hook), caught in [`evaluate`]. Nothing of the evaluation survives the unwind: its values
//! live only inside it.

use std::any::Any;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use jaq_core::data::HasLut;
use jaq_core::{Ctx, DataT, Lut, Vars};
use jaq_json::Val;
use serde_json::Value;

use super::{Filter, convert};

/// Values jaq works on here, with [`Data`] as its global data.
pub(super) struct Metered;

impl DataT for Metered {
    type V<'a> = Val;
    type Data<'a> = Data<'a>;
}

/// What every context carries: the filter's table and the evaluation's meter.
#[derive(Clone)]
pub(super) struct Data<'a> {
    lut: &'a Lut<Metered>,
    /// The evaluation's meter; native filters tick it for work they do without running terms.
    pub meter: &'a Meter,
}

impl<'a> HasLut<'a, Metered> for Data<'a> {
    fn lut(&self) -> &'a Lut<Metered> {
        self.meter.tick();
        self.lut
    }
}

/// Why an evaluation was stopped before it ended.
#[derive(Debug)]
pub(super) enum Stop {
    /// It took more steps than its budget.
    Steps,
    /// It held more memory than its budget.
    Memory,
    /// It recursed deeper than its stack allowance.
    Stack,
    /// jaq panicked (a bug in jaq); the text says where.
    Panicked(String),
}

/// Steps, stack and memory an evaluation has used, and may use.
pub(super) struct Meter {
    steps: Cell<u64>,
    limit: u64,
    stack_base: usize,
    stack_limit: usize,
    /// The bytes the evaluation may hold ([`super::memory_budget`]).
    pub bytes: u64,
}

impl Meter {
    /// Counts one step; unwinds with [`Stop`] past the step budget, the stack allowance or
    /// the memory budget (measured where a [`crate::limits::memory::MeteredAlloc`] is
    /// installed).
    pub(super) fn tick(&self) {
        let steps = self.steps.get() + 1;
        self.steps.set(steps);
        if steps > self.limit {
            resume_unwind(Box::new(Stop::Steps));
        }
        if stack_position().abs_diff(self.stack_base) > self.stack_limit {
            resume_unwind(Box::new(Stop::Stack));
        }
        if crate::limits::memory::held() > i64::try_from(self.bytes).unwrap_or(i64::MAX) {
            resume_unwind(Box::new(Stop::Memory));
        }
    }

    /// Unwinds with [`Stop::Memory`] unless the evaluation may hold `bytes` more: for natives
    /// that would build that much in one step.
    pub(super) fn reserve(&self, bytes: u64) {
        let held = u64::try_from(crate::limits::memory::held()).unwrap_or(0);
        if held.saturating_add(bytes) > self.bytes {
            resume_unwind(Box::new(Stop::Memory));
        }
    }
}

/// The address of a local: how deep the current thread's stack is, compared with another call.
#[inline(never)]
fn stack_position() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

/// Steps an evaluation may take on the caller's thread before it moves to its own thread.
///
/// Each step nests values at most one level deeper, and work on nested values (dropping,
/// comparing, printing) recurses once per level, at up to about 3 KiB of stack a level in a debug
/// build; 256 steps keep that under 1 MiB on stacks of unknown size (tokio's are 2 MiB).
pub(super) const INLINE_STEPS: u64 = 256;

/// Stack an evaluation may use on the caller's thread, beyond where it started.
pub(super) const INLINE_STACK: usize = 192 << 10;

/// Stack reserved per step of budget for an evaluation on its own thread: the deepest value a
/// budget can build needs this much to be printed or dropped (measured worst case: `tojson`,
/// about 2.6 KiB a level in a debug build, 0.4 KiB in a release build).
const STACK_PER_STEP: usize = if cfg!(debug_assertions) {
    4 << 10
} else {
    1 << 10
};

/// The stack of an evaluation thread for a budget of `steps`: reserved, touched only as used,
/// returned when the thread ends.
pub(super) fn stack_for(steps: u64) -> usize {
    usize::try_from(steps)
        .unwrap_or(usize::MAX)
        .saturating_mul(STACK_PER_STEP)
        .clamp(64 << 20, 8 << 30)
}

/// The part of a thread's `stack` that the evaluation's own recursion may use; the rest is for
/// work on nested values, which the step budget bounds.
pub(super) fn guard_for(stack: usize) -> usize {
    stack / 4
}

/// Runs `filter` on `input` within `steps` steps, `stack` bytes of stack beyond this call and
/// `bytes` of memory; every value it yields, or its first error, as JSON.
pub(super) fn evaluate(
    filter: &Filter,
    input: &Value,
    steps: u64,
    stack: usize,
    bytes: u64,
    value_limit: u64,
) -> Result<Result<Vec<Value>, String>, Stop> {
    let meter = Meter {
        steps: Cell::new(0),
        limit: steps,
        stack_base: stack_position(),
        stack_limit: stack,
        bytes,
    };
    let run = || -> Result<Vec<Value>, String> {
        let input = convert::to_val(input)?;
        let data = Data {
            lut: &filter.lut,
            meter: &meter,
        };
        let ctx = Ctx::<Metered>::new(data, Vars::new([]));
        let mut out = Vec::new();
        for item in filter.id.run((ctx, input)) {
            let value = item.map_err(super::describe::exception)?;
            out.push(convert::from_val(&value, value_limit)?);
        }
        Ok(out)
    };
    // Everything the evaluation allocates is freed before `metered` returns: its values live
    // only inside `run`, and what it yields is converted to JSON within it.
    let done = crate::limits::memory::metered(|| catch_unwind(AssertUnwindSafe(run)));
    done.map_err(|payload| match payload.downcast::<Stop>() {
        Ok(stop) => *stop,
        Err(other) => Stop::Panicked(panic_text(&*other)),
    })
}

/// A panic payload as a sentence.
pub(super) fn panic_text(payload: &(dyn Any + Send)) -> String {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into());
    format!("jq failed internally ({what})")
}
