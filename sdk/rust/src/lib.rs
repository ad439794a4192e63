//! Write weft plugins in Rust as plain functions.
//!
//! A weft plugin is a WebAssembly component (built for `wasm32-wasip2`) that exports workflow
//! steps, agent tools, or both, per the host's contract `wit/plugin.wit`. This crate generates
//! that contract's bindings and does the plumbing: the plugin's `describe`, JSON parsed in and
//! written out, a typed [`Context`], the host's services as methods on it, and a
//! [`Failure`] type with tripwires. The plugin's code never sees a wit-bindgen type.
//!
//! ```no_run
//! use weft_plugin::{Context, Failure, Outcome, ToolContext, export_plugin, json, step, tool};
//! use weft_plugin::json::Value;
//!
//! /// `{text}` -> `{text}` upper-cased.
//! fn shout(input: Value, ctx: &Context) -> Result<Value, Failure> {
//!     let Some(text) = input["text"].as_str() else {
//!         return Err(Failure::invalid_input("text must be a string"));
//!     };
//!     ctx.write(text);
//!     Ok(json!({"text": text.to_uppercase()}))
//! }
//!
//! /// Suspends until someone answers, then returns the answer.
//! fn ask(input: Value, ctx: &Context) -> Result<Outcome, Failure> {
//!     match ctx.resume() {
//!         None => Ok(Outcome::suspend(json!({"question": input})).label("answer")),
//!         Some(resume) => Ok(Outcome::Done(resume.data().clone())),
//!     }
//! }
//!
//! fn count_words(args: Value, _ctx: &ToolContext) -> Result<Value, Failure> {
//!     let text = args["text"].as_str().unwrap_or_default();
//!     Ok(json!({"words": text.split_whitespace().count()}))
//! }
//!
//! export_plugin! {
//!     steps: [
//!         step("shout", shout)
//!             .describe("Upper-cases {text}.")
//!             .input_schema(json!({"type": "object", "required": ["text"]})),
//!         step("ask", ask).describe("Asks a question."),
//!     ],
//!     tools: [
//!         tool("count-words", count_words).describe("Counts the words of {text}."),
//!     ],
//! }
//! ```
//!
//! # Handlers
//!
//! A step handler is any `Fn(I, &Context) -> Result<O, Failure>` where `I` is the input type
//! (`serde_json::Value`, or any `serde::Deserialize` type: input that does not fit fails with
//! code `invalid-input` before the handler runs) and `O` is an [`Outcome`] or any
//! `serde::Serialize` type (the output). A tool handler is any
//! `Fn(I, &ToolContext) -> Result<O, Failure>` with `O: Serialize`. Closures work too.
//!
//! # Exports
//!
//! [`export_plugin!`] with `steps:` only makes a component that exports `weft:plugin/steps`
//! (world `step-plugin`), with `tools:` only one that exports `weft:plugin/tools` (world
//! `tool-plugin`), with both one that exports both (world `plugin`). Call it once per crate.
//!
//! # Panics
//!
//! A panic in a handler becomes a failure with code `exception`, the panic's message and
//! details `{"type": "panic"}` ([`Failure::exception`]) wherever panics unwind: in native unit
//! tests through [`Step::run`] and [`Tool::call`], and in a component built with
//! `panic = "unwind"` and WebAssembly exception handling. Stable Rust's `wasm32-wasip2` target
//! aborts on panic (its standard library cannot unwind), so in a component built the usual way
//! a panic traps: weft records the step as failed with code `trap` and the message
//! `plugin panicked: <message>`, and the next attempt (if the retry policy allows one) gets a
//! fresh instance. Return a [`Failure`] for every failure you can foresee.
//!
//! # Lean components (no std)
//!
//! Built with the standard library (the default feature `std`), a component imports about
//! twenty WASI functions that std's runtime reaches (stdio, environment, clocks, exit) whether
//! the plugin calls them or not, and the host pays for each one at every instantiation. With
//! `default-features = false, features = ["lean"]` in a `#![no_std]` crate (`extern crate
//! alloc;` for `String`, `Vec`, `format!`), the component is one core module that imports
//! weft's interfaces only, and a trivial step runs about 1.5 times as many times per second.
//! This crate then provides:
//!
//! - the global allocator: a bump arena in the component's initial memory (an instance lives
//!   for one call, so only the last block freed is reused), growing memory past it;
//! - the panic handler: Rust's panic report goes to the plugin's stderr through
//!   `weft:plugin/log.stderr-byte`, and the step fails with code `trap` and the message
//!   `plugin panicked: <message>`;
//! - `cabi_realloc`, `memcmp` and `bcmp`, which wasi-libc gives a std build.
//!
//! Every crate of the plugin must then build without std (serde with `default-features =
//! false, features = ["derive", "alloc"]`). A plugin that allocates and frees much in one call
//! (a loop over many large documents) is better served by std's allocator, which reuses memory.
//!
//! # Outside wasm32
//!
//! The crate builds for any target, so a plugin's logic can be unit tested natively: build a
//! [`Context`] with [`Context::default`] and its `with_*` methods, and call
//! [`Step::run`] / [`Tool::call`] (or the handler itself). The helpers that reach the host do
//! nothing there (see [`Context`]).

#![cfg_attr(not(feature = "std"), no_std)]

extern crate alloc;
extern crate self as weft_plugin;

#[cfg(all(feature = "std", feature = "lean"))]
compile_error!(
    "weft-plugin: features `std` and `lean` exclude each other; a lean plugin depends on \
     weft-plugin with `default-features = false, features = [\"lean\"]`"
);

mod bindings;
mod context;
mod failure;
#[cfg(all(feature = "lean", target_arch = "wasm32"))]
mod lean;
mod outcome;
mod registry;

/// The `alloc` items the std prelude would give, for builds without std.
mod prelude {
    pub(crate) use alloc::boxed::Box;
    pub(crate) use alloc::format;
    pub(crate) use alloc::string::{String, ToString};
    pub(crate) use alloc::vec::Vec;
}

pub use context::{Context, Level, Resume, ToolContext};
pub use failure::{EXCEPTION, Failure, TRIPWIRE, Tripwire};
pub use outcome::{IntoOutcome, Outcome};
pub use registry::{Step, Tool, step, tool};
/// serde_json, re-exported: `json::Value`, `json::Map`, `json::from_value`, ...
pub use serde_json as json;
/// serde_json's `json!` macro, re-exported.
pub use serde_json::json;

/// What [`export_plugin!`] expands to refers to; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::bindings::{steps_world, tools_world};
    pub use crate::registry::{Exporter, Registry};
    pub use alloc::vec::Vec;
    pub use wit_bindgen;
}

/// Exports the registered steps and tools as the component's `weft:plugin/steps` and
/// `weft:plugin/tools`.
///
/// Takes `steps: [...]`, `tools: [...]` or both (in that order), each a list of [`Step`]s
/// (made by [`step`]) or [`Tool`]s (made by [`tool`]). Only the interfaces named are exported.
/// The lists are built at each call from the host (an instance serves one call). Call it once
/// per crate, at the top level.
///
/// ```ignore
/// export_plugin! {
///     steps: [step("shout", shout).describe("Upper-cases {text}.")],
///     tools: [tool("count-words", count_words)],
/// }
/// ```
#[macro_export]
macro_rules! export_plugin {
    (steps: [$($step:expr),* $(,)?] $(,)?) => {
        const _: () = {
            $crate::export_plugin!(@registry [$($step),*] []);
            $crate::__private::steps_world::export!(
                __WeftExport with_types_in $crate::__private::steps_world
            );
        };
    };
    (tools: [$($tool:expr),* $(,)?] $(,)?) => {
        const _: () = {
            $crate::export_plugin!(@registry [] [$($tool),*]);
            $crate::__private::tools_world::export!(
                __WeftExport with_types_in $crate::__private::tools_world
            );
        };
    };
    (steps: [$($step:expr),* $(,)?], tools: [$($tool:expr),* $(,)?] $(,)?) => {
        const _: () = {
            $crate::export_plugin!(@registry [$($step),*] [$($tool),*]);
            $crate::__private::steps_world::export!(
                __WeftExport with_types_in $crate::__private::steps_world
            );
            $crate::__private::tools_world::export!(
                __WeftExport with_types_in $crate::__private::tools_world
            );
        };
    };
    (@registry [$($step:expr),*] [$($tool:expr),*]) => {
        struct __WeftRegistry;

        impl $crate::__private::Registry for __WeftRegistry {
            fn steps() -> $crate::__private::Vec<$crate::Step> {
                $crate::__private::Vec::from([$($step),*])
            }

            fn tools() -> $crate::__private::Vec<$crate::Tool> {
                $crate::__private::Vec::from([$($tool),*])
            }
        }

        type __WeftExport = $crate::__private::Exporter<__WeftRegistry>;
    };
}
