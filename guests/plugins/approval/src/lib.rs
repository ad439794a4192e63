//! An example approval plugin: step `approve` passes small amounts and suspends the run for a
//! manager's decision on large ones.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "step-plugin",
});

use exports::weft::plugin::steps::Guest;
use serde_json::{Value, json};
use weft::plugin::log::{Level, log};
use weft::plugin::types::{Failure, Outcome, StepContext, StepInfo, Suspension};

/// The JSON Schema dialect of every schema here.
const SCHEMA: &str = "https://json-schema.org/draft/2020-12/schema";
/// The default of config.limit.
const DEFAULT_LIMIT: f64 = 1000.0;

struct Approval;

impl Guest for Approval {
    fn describe() -> Vec<StepInfo> {
        vec![StepInfo {
            name: "approve".to_string(),
            description: "Approves amounts up to config.limit automatically; above it, suspends \
                          the run until someone resumes it with {approved, by}."
                .to_string(),
            input_schema: Some(
                json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["amount"],
                    "properties": {"amount": {"type": "number"}}
                })
                .to_string(),
            ),
            output_schema: Some(
                json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["approved", "by", "amount"],
                    "properties": {
                        "approved": {"type": "boolean"},
                        "by": {"type": "string"},
                        "amount": {"type": "number"}
                    }
                })
                .to_string(),
            ),
            suspend_schema: Some(
                json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["amount", "limit", "reason"],
                    "properties": {
                        "amount": {"type": "number"},
                        "limit": {"type": "number"},
                        "reason": {"type": "string"}
                    }
                })
                .to_string(),
            ),
            resume_schema: Some(
                json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "required": ["approved"],
                    "properties": {
                        "approved": {"type": "boolean"},
                        "by": {"type": "string"}
                    }
                })
                .to_string(),
            ),
            config_schema: Some(
                json!({
                    "$schema": SCHEMA,
                    "type": "object",
                    "properties": {"limit": {"type": "number", "default": DEFAULT_LIMIT}}
                })
                .to_string(),
            ),
        }]
    }

    fn execute(name: String, ctx: StepContext) -> Result<Outcome, Failure> {
        if name != "approve" {
            return Err(failure("unknown-step", &format!("no step named {name:?}")));
        }
        let input = parse(&ctx.input, "input")?;
        let config = parse(&ctx.config, "config")?;
        let amount = input
            .get("amount")
            .filter(|a| a.is_number())
            .cloned()
            .ok_or_else(|| failure("invalid-input", "input.amount must be a number"))?;
        let limit = match config.get("limit") {
            None | Some(Value::Null) => json!(DEFAULT_LIMIT),
            Some(l) if l.is_number() => l.clone(),
            Some(_) => return Err(failure("invalid-config", "config.limit must be a number")),
        };
        let (amount_f, limit_f) = (
            amount.as_f64().unwrap_or(f64::INFINITY),
            limit.as_f64().unwrap_or(DEFAULT_LIMIT),
        );
        if amount_f <= limit_f {
            log(Level::Info, "auto-approved");
            return Ok(done(
                &json!({"approved": true, "by": "auto", "amount": amount}),
            ));
        }
        match ctx.resume {
            None => {
                log(Level::Info, "waiting for approval");
                Ok(Outcome::Suspend(Suspension {
                    payload: json!({
                        "amount": amount,
                        "limit": limit,
                        "reason": "amount above limit"
                    })
                    .to_string(),
                    labels: vec!["manager".to_string()],
                }))
            }
            Some(resume) => {
                let data = parse(&resume.data, "resume")?;
                let approved = data
                    .get("approved")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                let by = data.get("by").and_then(Value::as_str).unwrap_or("unknown");
                Ok(done(
                    &json!({"approved": approved, "by": by, "amount": amount}),
                ))
            }
        }
    }
}

fn done(value: &Value) -> Outcome {
    Outcome::Done(value.to_string())
}

/// A failure that retrying cannot fix.
fn failure(code: &str, message: &str) -> Failure {
    Failure {
        message: message.to_string(),
        code: Some(code.to_string()),
        retryable: false,
        details: None,
        tripwire: None,
    }
}

fn parse(text: &str, what: &str) -> Result<Value, Failure> {
    serde_json::from_str(text).map_err(|e| {
        failure(
            &format!("invalid-{what}"),
            &format!("the {what} is not JSON: {e}"),
        )
    })
}

export!(Approval);
