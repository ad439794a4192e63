//! The `weft:plugin/run` import: the run's input, earlier results, and state patches.

use serde_json::Value;
use wasmtime::Result;

use super::bindings::weft::plugin::run;
use super::state::StoreState;

impl run::Host for StoreState {
    fn init_data(&mut self) -> Result<String> {
        Ok(self.run.init_data().to_string())
    }

    fn step_result(&mut self, step: String) -> Result<Option<String>> {
        Ok(self.run.step_result(&step).map(|v| v.to_string()))
    }

    fn set_state(&mut self, patch: String) -> Result<()> {
        if self.bad_patch.is_some() {
            return Ok(());
        }
        match serde_json::from_str::<Value>(&patch) {
            Ok(Value::Object(map)) => self.patches.push(Value::Object(map)),
            Ok(other) => {
                self.bad_patch = Some(format!(
                    "run.set-state was given {}, not a JSON object",
                    json_kind(&other)
                ));
            }
            Err(err) => {
                self.bad_patch = Some(format!(
                    "run.set-state was given text that is not JSON: {err}"
                ));
            }
        }
        Ok(())
    }
}

/// `an array`, `a string`, ... for messages.
pub(crate) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
