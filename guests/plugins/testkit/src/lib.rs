//! The engine's test plugin: one step per behaviour the host must handle.
//!
//! Steps: `echo`, `inc`, `context`, `fail`, `set-state`, `suspend`, `bail`, `tripwire`, `emit`,
//! `step-result`, `wait-abort`, `typed`, `bad-json`. Unknown step names fail with code
//! `unknown-step`; JSON that does not parse fails with `invalid-input` / `invalid-config`.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "step-plugin",
});

use std::io::Write as _;
use std::time::{Duration, Instant};

use exports::weft::plugin::steps::Guest;
use serde_json::{Value, json};
use weft::plugin::types::{Failure, Outcome, StepContext, StepInfo, Suspension, Tripwire};
use weft::plugin::{abort, log, run, writer};

/// The JSON Schema dialect of every schema here.
const SCHEMA: &str = "https://json-schema.org/draft/2020-12/schema";

struct Testkit;

impl Guest for Testkit {
    fn describe() -> Vec<StepInfo> {
        let mut steps: Vec<StepInfo> = [
            ("echo", "Returns the input unchanged."),
            ("inc", "Input {n: number} -> {n: n + 1}."),
            ("mul", "Input {n: number} -> {n: n * config.by}."),
            ("sum", "Input an object of {n: number} members -> {n: their sum}."),
            ("double", "Input a number -> twice that number."),
            (
                "append",
                "Appends `<step_path> <attempt>` as a line to the file config.file (in a granted \
                 directory), then returns the input.",
            ),
            (
                "context",
                "Returns the step context: run_id, workflow_id, step_path, attempt, input, \
                 config, state, resume, foreach_index, iteration.",
            ),
            (
                "fail",
                "Fails with config {code, message, retryable, details}; succeeds with the input \
                 once the attempt reaches config.succeed-on-attempt.",
            ),
            (
                "set-state",
                "Calls run.set-state with each of config.patches in order, then fails with code \
                 after-patch if config.fail, else returns the input.",
            ),
            (
                "suspend",
                "Suspends with config.payload (default: the input) and config.labels; when \
                 resumed returns {resumed, payload, input}. With config.suspend-again-unless = \
                 KEY it suspends again while the resume data lacks KEY.",
            ),
            (
                "bail",
                "Ends the workflow with config.value (default: the input).",
            ),
            (
                "tripwire",
                "Fails with a tripwire {reason, retry, metadata, processor-id} from config.",
            ),
            (
                "emit",
                "Writes config.chunks, a progress event, a log line, a stdout line, a stderr \
                 line and the chunk \"last\", in that order; returns the input.",
            ),
            (
                "step-result",
                "Returns {init: run.init-data, result: run.step-result(config.step)}.",
            ),
            (
                "wait-abort",
                "Writes config.chunks, then polls abort.is-aborted every millisecond until \
                 aborted or config.max-ms (default 60000); returns {aborted, reason}. With \
                 config.ignore it spins forever.",
            ),
            (
                "typed",
                "A step with every schema: returns {total: amount * factor, currency, resumed}; \
                 config.output overrides the output, config.suspend-payload suspends first.",
            ),
            ("bad-json", "Returns output that is not JSON."),
        ]
        .into_iter()
        .map(|(name, description)| StepInfo {
            name: name.to_string(),
            description: description.to_string(),
            input_schema: None,
            output_schema: None,
            suspend_schema: None,
            resume_schema: None,
            config_schema: None,
        })
        .collect();
        if let Some(inc) = steps.iter_mut().find(|s| s.name == "inc") {
            inc.input_schema = Some(
                json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["n"],
                    "properties": {"n": {"type": "number"}}
                })
                .to_string(),
            );
        }
        if let Some(typed) = steps.iter_mut().find(|s| s.name == "typed") {
            typed.input_schema = Some(
                json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["amount"],
                    "properties": {
                        "amount": {"type": "number"},
                        "currency": {"type": "string", "default": "EUR"}
                    }
                })
                .to_string(),
            );
            typed.config_schema = Some(
                json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "properties": {"factor": {"type": "number", "default": 1}}
                })
                .to_string(),
            );
            typed.output_schema = Some(
                json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["total"],
                    "properties": {"total": {"type": "number"}}
                })
                .to_string(),
            );
            typed.suspend_schema = Some(
                json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["question"],
                    "properties": {"question": {"type": "string"}}
                })
                .to_string(),
            );
            typed.resume_schema = Some(
                json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["ok"],
                    "properties": {"ok": {"type": "boolean"}}
                })
                .to_string(),
            );
        }
        steps
    }

    fn execute(name: String, ctx: StepContext) -> Result<Outcome, Failure> {
        match name.as_str() {
            "echo" => Ok(Outcome::Done(ctx.input)),
            "inc" => inc(&ctx.input),
            "mul" => mul(&ctx),
            "sum" => sum(&ctx),
            "double" => double(&ctx),
            "append" => append(&ctx),
            "context" => context(&ctx),
            "fail" => fail(ctx),
            "set-state" => set_state(ctx),
            "suspend" => suspend(ctx),
            "bail" => {
                let config = config(&ctx)?;
                Ok(Outcome::Bail(match config.get("value") {
                    Some(value) => value.to_string(),
                    None => ctx.input,
                }))
            }
            "tripwire" => Err(tripwire(&config(&ctx)?)),
            "emit" => emit(ctx),
            "step-result" => step_result(&ctx),
            "wait-abort" => wait_abort(&config(&ctx)?),
            "typed" => typed(&ctx),
            "bad-json" => Ok(Outcome::Done("{not json".to_string())),
            other => Err(failure(
                "unknown-step",
                &format!("no step named {other:?}"),
                false,
            )),
        }
    }
}

/// A failure with a code.
fn failure(code: &str, message: &str, retryable: bool) -> Failure {
    Failure {
        message: message.to_string(),
        code: Some(code.to_string()),
        retryable,
        details: None,
        tripwire: None,
    }
}

fn done(value: &Value) -> Outcome {
    Outcome::Done(value.to_string())
}

fn input(ctx: &StepContext) -> Result<Value, Failure> {
    serde_json::from_str(&ctx.input).map_err(|e| {
        failure(
            "invalid-input",
            &format!("the input is not JSON: {e}"),
            false,
        )
    })
}

fn config(ctx: &StepContext) -> Result<Value, Failure> {
    serde_json::from_str(&ctx.config).map_err(|e| {
        failure(
            "invalid-config",
            &format!("the config is not JSON: {e}"),
            false,
        )
    })
}

/// JSON text as a value; text that does not parse is kept as a JSON string.
fn lenient(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// A config field that is present and not null.
fn field<'a>(config: &'a Value, key: &str) -> Option<&'a Value> {
    config.get(key).filter(|v| !v.is_null())
}

/// A number as JSON: integral values that fit an i64 as integers, so `2 * 1` gives `2`, not `2.0`.
fn number(x: f64) -> Value {
    const LIMIT: f64 = 9_007_199_254_740_992.0; // 2^53: every integer below is exact
    if x.fract() == 0.0 && x.abs() < LIMIT {
        // Exact: |x| < 2^53 and integral.
        return Value::from(x as i64);
    }
    Value::from(x)
}

fn field_num(v: Option<&Value>, what: &str) -> Result<f64, Failure> {
    v.and_then(Value::as_f64)
        .ok_or_else(|| failure("invalid-input", &format!("{what} must be a number"), false))
}

fn mul(ctx: &StepContext) -> Result<Outcome, Failure> {
    let n = field_num(input(ctx)?.get("n"), "input.n")?;
    let by = field_num(config(ctx)?.get("by"), "config.by")?;
    Ok(done(&json!({ "n": number(n * by) })))
}

fn sum(ctx: &StepContext) -> Result<Outcome, Failure> {
    let value = input(ctx)?;
    let members = value
        .as_object()
        .ok_or_else(|| failure("invalid-input", "input must be an object", false))?;
    let mut total = 0.0;
    for member in members.values() {
        total += field_num(member.get("n"), "each member's n")?;
    }
    Ok(done(&json!({ "n": number(total) })))
}

fn double(ctx: &StepContext) -> Result<Outcome, Failure> {
    let n = field_num(Some(&input(ctx)?), "the input")?;
    Ok(done(&number(n * 2.0)))
}

fn append(ctx: &StepContext) -> Result<Outcome, Failure> {
    use std::io::Write;
    let config = config(ctx)?;
    let file = config
        .get("file")
        .and_then(Value::as_str)
        .ok_or_else(|| failure("invalid-config", "config.file must be a path", false))?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .map_err(|e| failure("io-error", &format!("{file}: {e}"), true))?;
    // One write call, so a crash never leaves half a line.
    let line = format!("{} {}\n", ctx.step_path, ctx.attempt);
    f.write_all(line.as_bytes())
        .map_err(|e| failure("io-error", &format!("{file}: {e}"), true))?;
    Ok(Outcome::Done(ctx.input.clone()))
}

fn inc(input: &str) -> Result<Outcome, Failure> {
    let value: Value = serde_json::from_str(input).map_err(|e| {
        failure(
            "invalid-input",
            &format!("the input is not JSON: {e}"),
            false,
        )
    })?;
    let n = match value.get("n") {
        Some(Value::Number(n)) => n,
        _ => {
            return Err(failure("invalid-input", "input.n must be a number", false));
        }
    };
    let next = match n.as_i64().and_then(|i| i.checked_add(1)) {
        Some(i) => Value::from(i),
        None => Value::from(n.as_f64().unwrap_or(f64::NAN) + 1.0),
    };
    Ok(done(&json!({"n": next})))
}

fn context(ctx: &StepContext) -> Result<Outcome, Failure> {
    let resume = match &ctx.resume {
        None => Value::Null,
        Some(r) => json!({
            "data": lenient(&r.data),
            "suspend_payload": lenient(&r.suspend_payload)
        }),
    };
    Ok(done(&json!({
        "run_id": ctx.run_id,
        "workflow_id": ctx.workflow_id,
        "step_path": ctx.step_path,
        "attempt": ctx.attempt,
        "input": lenient(&ctx.input),
        "config": lenient(&ctx.config),
        "state": lenient(&ctx.state),
        "resume": resume,
        "foreach_index": ctx.foreach_index,
        "iteration": ctx.iteration
    })))
}

fn fail(ctx: StepContext) -> Result<Outcome, Failure> {
    let config = config(&ctx)?;
    if let Some(threshold) = field(&config, "succeed-on-attempt").and_then(Value::as_f64)
        && f64::from(ctx.attempt) >= threshold
    {
        return Ok(Outcome::Done(ctx.input));
    }
    Err(Failure {
        message: field(&config, "message")
            .and_then(Value::as_str)
            .unwrap_or("failed on purpose")
            .to_string(),
        code: field(&config, "code")
            .and_then(Value::as_str)
            .map(str::to_string),
        retryable: field(&config, "retryable")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        details: field(&config, "details").map(Value::to_string),
        tripwire: None,
    })
}

fn set_state(ctx: StepContext) -> Result<Outcome, Failure> {
    let config = config(&ctx)?;
    if let Some(patches) = field(&config, "patches") {
        let Some(patches) = patches.as_array() else {
            return Err(failure(
                "invalid-config",
                "config.patches must be an array",
                false,
            ));
        };
        for patch in patches {
            run::set_state(&patch.to_string());
        }
    }
    if field(&config, "fail")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        return Err(failure(
            "after-patch",
            "failed after patching the state",
            true,
        ));
    }
    Ok(Outcome::Done(ctx.input))
}

fn suspend(ctx: StepContext) -> Result<Outcome, Failure> {
    let config = config(&ctx)?;
    let suspension = || -> Result<Outcome, Failure> {
        let payload = match field(&config, "payload") {
            Some(p) => p.to_string(),
            None => ctx.input.clone(),
        };
        let labels = match field(&config, "labels") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|l| match l {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect(),
            Some(_) => {
                return Err(failure(
                    "invalid-config",
                    "config.labels must be an array of strings",
                    false,
                ));
            }
        };
        Ok(Outcome::Suspend(Suspension { payload, labels }))
    };
    let Some(resume) = &ctx.resume else {
        return suspension();
    };
    let data = lenient(&resume.data);
    if let Some(key) = field(&config, "suspend-again-unless").and_then(Value::as_str)
        && data.get(key).is_none()
    {
        return suspension();
    }
    Ok(done(&json!({
        "resumed": data,
        "payload": lenient(&resume.suspend_payload),
        "input": lenient(&ctx.input)
    })))
}

fn tripwire(config: &Value) -> Failure {
    Failure {
        message: "tripwire".to_string(),
        code: Some("tripwire".to_string()),
        retryable: false,
        details: None,
        tripwire: Some(Tripwire {
            reason: field(config, "reason")
                .and_then(Value::as_str)
                .unwrap_or("blocked")
                .to_string(),
            retry: field(config, "retry")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            metadata: field(config, "metadata").map(Value::to_string),
            processor_id: field(config, "processor-id")
                .and_then(Value::as_str)
                .map(str::to_string),
        }),
    }
}

fn emit(ctx: StepContext) -> Result<Outcome, Failure> {
    let config = config(&ctx)?;
    if let Some(chunks) = field(&config, "chunks").and_then(Value::as_array) {
        for chunk in chunks {
            writer::write(&chunk.to_string());
        }
    }
    writer::custom("progress", &json!({"n": 1}).to_string());
    log::log(log::Level::Info, "hello from emit");
    println!("stdout line");
    // Flushing cannot fail in a way this test step could act on.
    let _ = std::io::stdout().flush();
    eprintln!("stderr line");
    writer::write("\"last\"");
    Ok(Outcome::Done(ctx.input))
}

fn step_result(ctx: &StepContext) -> Result<Outcome, Failure> {
    let config = config(ctx)?;
    let Some(step) = field(&config, "step").and_then(Value::as_str) else {
        return Err(failure(
            "invalid-config",
            "config.step must be a string",
            false,
        ));
    };
    let result = run::step_result(step).map_or(Value::Null, |r| lenient(&r));
    Ok(done(&json!({
        "init": lenient(&run::init_data()),
        "result": result
    })))
}

fn wait_abort(config: &Value) -> Result<Outcome, Failure> {
    if let Some(chunks) = field(config, "chunks").and_then(Value::as_array) {
        for chunk in chunks {
            writer::write(&chunk.to_string());
        }
    }
    if field(config, "ignore")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        let mut counter: u64 = 0;
        loop {
            counter = std::hint::black_box(counter.wrapping_add(1));
        }
    }
    let max_ms = field(config, "max-ms")
        .and_then(Value::as_f64)
        .unwrap_or(60_000.0)
        .max(0.0);
    let deadline = Duration::try_from_secs_f64(max_ms / 1000.0).unwrap_or(Duration::MAX);
    let start = Instant::now();
    let mut aborted = abort::is_aborted();
    while !aborted && start.elapsed() < deadline {
        std::thread::sleep(Duration::from_millis(1));
        aborted = abort::is_aborted();
    }
    Ok(done(&json!({
        "aborted": aborted,
        "reason": abort::reason()
    })))
}

fn typed(ctx: &StepContext) -> Result<Outcome, Failure> {
    let config = config(ctx)?;
    if let Some(output) = field(&config, "output") {
        return Ok(done(output));
    }
    if ctx.resume.is_none()
        && let Some(payload) = field(&config, "suspend-payload")
    {
        return Ok(Outcome::Suspend(Suspension {
            payload: payload.to_string(),
            labels: Vec::new(),
        }));
    }
    let input = input(ctx)?;
    let Some(amount) = input.get("amount").and_then(Value::as_f64) else {
        return Err(failure(
            "invalid-input",
            "input.amount must be a number",
            false,
        ));
    };
    let factor = field(&config, "factor")
        .and_then(Value::as_f64)
        .unwrap_or(1.0);
    let currency = input
        .get("currency")
        .and_then(Value::as_str)
        .unwrap_or("EUR");
    let resumed = ctx
        .resume
        .as_ref()
        .map_or(Value::Null, |r| lenient(&r.data));
    Ok(done(&json!({
        "total": number(amount * factor),
        "currency": currency,
        "resumed": resumed
    })))
}

export!(Testkit);
