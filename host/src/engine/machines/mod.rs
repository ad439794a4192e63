//! One machine per construct, in the style of Temporal sdk-core's `machines/`: each file drives
//! its kind of execution through one drive pass and holds its tests beside it.
//!
//! Every machine is driven through one signature, `drive(node, entry, frame, cx)`: it takes
//! what it needs of its `EntryKind` from `entry` itself, so the drive pass's `drive_node` is a
//! plain dispatch by kind. `branch` holds two, `drive` (a branch) and `drive_group` (an arm's
//! `do:` list); `step::drive_with` drives a step execution of a definition given beside the
//! entry, which is how an agent runs its model and tool calls.

pub(crate) mod agent;
pub(crate) mod branch;
pub(crate) mod foreach;
pub(crate) mod loops;
pub(crate) mod map;
pub(crate) mod nested;
pub(crate) mod parallel;
pub(crate) mod sleep;
pub(crate) mod step;
