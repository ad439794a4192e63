//! One machine per construct, in the style of Temporal sdk-core's `machines/`: each file drives
//! its kind of execution through one drive pass and holds its tests beside it.

pub(crate) mod agent;
pub(crate) mod branch;
pub(crate) mod foreach;
pub(crate) mod loops;
pub(crate) mod map;
pub(crate) mod nested;
pub(crate) mod parallel;
pub(crate) mod sleep;
pub(crate) mod step;
