//! A plugin written with the Rust SDK's lean mode (`#![no_std]`, feature `lean`): the component
//! imports weft's interfaces and nothing of WASI, and is one core module. It holds the steps of
//! the benchmark's scenarios (`cargo bench --bench workflows`), and two that test the mode:
//! `boom` (a panic) and `fill` (memory past the SDK's arena).

#![no_std]

extern crate alloc;

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec;
use serde::{Deserialize, Serialize};
use weft_plugin::json::{Number, Value};
use weft_plugin::{Context, Failure, Outcome, export_plugin, json, step};

/// `{n}`, the input and output of most steps.
#[derive(Deserialize, Serialize)]
struct N {
    n: Number,
}

/// `mul`'s config.
#[derive(Deserialize)]
struct By {
    by: f64,
}

/// `n + 1`, an integer while it fits one.
fn inc(input: N, _ctx: &Context) -> Result<N, Failure> {
    let n = match input.n.as_i64().and_then(|i| i.checked_add(1)) {
        Some(i) => Number::from(i),
        None => number(input.n.as_f64().unwrap_or(f64::NAN) + 1.0)?,
    };
    Ok(N { n })
}

/// `n * config.by`.
fn mul(input: N, ctx: &Context) -> Result<N, Failure> {
    let by: By = ctx.config_as()?;
    Ok(N {
        n: number(input.n.as_f64().unwrap_or(f64::NAN) * by.by)?,
    })
}

/// The sum of the `n` of every member of an object.
fn sum(input: BTreeMap<String, N>, _ctx: &Context) -> Result<N, Failure> {
    let total = input.values().filter_map(|m| m.n.as_f64()).sum();
    Ok(N { n: number(total)? })
}

/// Twice a number.
fn double(input: f64, _ctx: &Context) -> Result<Number, Failure> {
    number(input * 2.0)
}

/// Suspends with the input as payload; resumed, returns `{resumed, payload, input}`.
fn suspend(input: Value, ctx: &Context) -> Result<Outcome, Failure> {
    Ok(match ctx.resume() {
        None => Outcome::suspend(input),
        Some(resume) => Outcome::Done(json!({
            "resumed": resume.data(),
            "payload": resume.suspend_payload(),
            "input": input,
        })),
    })
}

/// `fill`'s config.
#[derive(Deserialize)]
struct Fill {
    bytes: usize,
}

/// Panics with `config.message`.
fn boom(_input: Value, ctx: &Context) -> Result<Value, Failure> {
    let message: String = ctx.config_as::<Value>()?["message"]
        .as_str()
        .unwrap_or("boom")
        .into();
    panic!("{message}")
}

/// Fills a block of `config.bytes` bytes, then returns `{bytes, sum}` (the sum of its bytes,
/// so the block is written and read).
fn fill(_input: Value, ctx: &Context) -> Result<Value, Failure> {
    let fill: Fill = ctx.config_as()?;
    let mut block = vec![0u8; fill.bytes];
    for (i, byte) in block.iter_mut().enumerate() {
        *byte = (i % 251) as u8;
    }
    let sum: u64 = block.iter().map(|b| u64::from(*b)).sum();
    Ok(json!({"bytes": block.len(), "sum": sum}))
}

/// `x` as a JSON number: an integer when it is one below 2^53 (so exact), so `2 * 3` is `6`,
/// not `6.0`.
fn number(x: f64) -> Result<Number, Failure> {
    const LIMIT: f64 = 9_007_199_254_740_992.0;
    if x.abs() < LIMIT && (x as i64) as f64 == x {
        return Ok(Number::from(x as i64));
    }
    Number::from_f64(x).ok_or_else(|| Failure::new("invalid-output", "the result is not finite"))
}

export_plugin! {
    steps: [
        step("inc", inc)
            .describe("Input {n: number} -> {n: n + 1}.")
            .input_schema(json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "required": ["n"],
                "properties": {"n": {"type": "number"}}
            })),
        step("mul", mul).describe("Input {n: number} -> {n: n * config.by}."),
        step("sum", sum).describe("Input an object of {n: number} members -> {n: their sum}."),
        step("double", double).describe("Input a number -> twice that number."),
        step("suspend", suspend)
            .describe("Suspends with the input; resumed, returns {resumed, payload, input}."),
        step("boom", boom).describe("Panics with config.message."),
        step("fill", fill)
            .describe("Fills config.bytes bytes of memory; returns {bytes, sum of the bytes}."),
    ],
}
