//! The pure core: the workflow model, run state, events, commands and `advance`.
//!
//! Nothing in here performs I/O, reads a clock or draws random numbers: time arrives inside
//! events, and everything the outside world must do leaves as commands.

pub mod expr;
pub mod invocation;
pub mod model;
pub mod rerun;
pub mod schema;

pub mod advance;
pub mod draw;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod recovery_tests;
pub mod run;

pub use advance::{advance, check_run_input, new_run, replay, rfc3339, suspended};
pub use model::{GRAPH_FORMAT, Graph};
pub use run::*;
