//! JSON Schema (draft 2020-12) checks and default filling (S57–S63).

use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};

/// One way a value breaks its schema (S63).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Violation {
    /// A JSON Pointer into the checked value.
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

/// A JSON Schema, compiled on first use.
#[derive(Debug, Clone)]
pub(crate) struct Schema {
    value: Value,
    compiled: OnceLock<Result<Arc<jsonschema::Validator>, String>>,
}

impl PartialEq for Schema {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl Serialize for Schema {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Schema {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(Schema::new)
    }
}

impl Schema {
    /// A schema from its JSON; [`Schema::compile`] tells whether it is a valid schema.
    pub(crate) fn new(value: Value) -> Self {
        Self {
            value,
            compiled: OnceLock::new(),
        }
    }

    /// The schema's JSON.
    pub(crate) fn value(&self) -> &Value {
        &self.value
    }

    /// Compiles the schema, or says why it is not a valid draft 2020-12 schema.
    pub(crate) fn compile(&self) -> Result<(), String> {
        self.validator().map(|_| ())
    }

    fn validator(&self) -> Result<&Arc<jsonschema::Validator>, String> {
        self.compiled
            .get_or_init(|| {
                jsonschema::draft202012::new(&self.value)
                    .map(Arc::new)
                    .map_err(|e| format!("invalid JSON Schema: {e}"))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Fills in the `default` of each absent member declared under `properties`, recursing
    /// through `properties` only (S57).
    pub(crate) fn fill_defaults(&self, value: &mut Value) {
        fill(&self.value, value);
    }

    /// Checks `value`; every violation, in document order.
    pub(crate) fn check(&self, value: &Value) -> Result<(), Vec<Violation>> {
        let validator = match self.validator() {
            Ok(v) => v,
            Err(message) => {
                return Err(vec![Violation {
                    path: String::new(),
                    message,
                }]);
            }
        };
        // A value that holds, the usual case, costs no error iterator and no allocation.
        if validator.is_valid(value) {
            return Ok(());
        }
        let violations: Vec<Violation> = validator
            .iter_errors(value)
            .map(|e| Violation {
                path: e.instance_path().as_str().to_owned(),
                message: shortened(e.to_string()),
            })
            .collect();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations)
        }
    }

    /// Fills defaults into `value`, then checks it: the usual treatment of a value weft hands
    /// over (S57).
    pub(crate) fn fill_and_check(&self, value: &mut Value) -> Result<(), Vec<Violation>> {
        self.fill_defaults(value);
        self.check(value)
    }

    /// [`Schema::fill_and_check`] on a shared value: copied only when a default is missing
    /// from it, so that a value that needs no default stays shared with where it came from.
    pub(crate) fn fill_and_check_shared(
        &self,
        value: &mut Arc<Value>,
    ) -> Result<(), Vec<Violation>> {
        if lacks_default(&self.value, value) {
            fill(&self.value, Arc::make_mut(value));
        }
        self.check(value)
    }
}

/// The longest violation message kept: messages quote the offending value, which may be large.
const MESSAGE_LIMIT: usize = 500;

fn shortened(mut message: String) -> String {
    if message.len() > MESSAGE_LIMIT {
        message.truncate(message.floor_char_boundary(MESSAGE_LIMIT));
        message.push('…');
    }
    message
}

/// Whether [`fill`] would put a default into `value`.
fn lacks_default(schema: &Value, value: &Value) -> bool {
    let (Some(props), Value::Object(obj)) = (schema.get("properties"), value) else {
        return false;
    };
    let Some(props) = props.as_object() else {
        return false;
    };
    props.iter().any(|(key, sub)| match obj.get(key) {
        None => sub.get("default").is_some(),
        Some(child) => lacks_default(sub, child),
    })
}

fn fill(schema: &Value, value: &mut Value) {
    let (Some(props), Value::Object(obj)) = (schema.get("properties"), value) else {
        return;
    };
    let Some(props) = props.as_object() else {
        return;
    };
    for (key, sub) in props {
        if !obj.contains_key(key)
            && let Some(default) = sub.get("default")
        {
            obj.insert(key.clone(), default.clone());
        }
        if let Some(child) = obj.get_mut(key) {
            fill(sub, child);
        }
    }
}

/// One line listing violations, for messages: `/amount: expected number, found string; ...`.
pub(crate) fn summarize(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| {
            if v.path.is_empty() {
                v.message.clone()
            } else {
                format!("{}: {}", v.path, v.message)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The `details` object of a validation failure (S63).
pub(crate) fn details(violations: &[Violation]) -> Value {
    json!({ "violations": violations })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed() -> Schema {
        Schema::new(json!({
            "type": "object",
            "required": ["amount"],
            "properties": {
                "amount": {"type": "number"},
                "currency": {"type": "string", "default": "EUR"},
                "meta": {"type": "object", "properties": {"tag": {"default": "x"}}, "default": {}}
            }
        }))
    }

    #[test]
    fn s57_defaults_are_filled_through_properties_only() {
        let mut v = json!({"amount": 3});
        typed().fill_defaults(&mut v);
        assert_eq!(
            v,
            json!({"amount": 3, "currency": "EUR", "meta": {"tag": "x"}})
        );
        let mut kept = json!({"amount": 3, "currency": "USD"});
        typed().fill_defaults(&mut kept);
        assert_eq!(kept["currency"], "USD");
    }

    #[test]
    fn s57_a_shared_value_is_copied_only_when_a_default_is_missing() {
        let complete = Arc::new(json!({"amount": 3, "currency": "USD", "meta": {"tag": "y"}}));
        let mut shared = Arc::clone(&complete);
        typed().fill_and_check_shared(&mut shared).expect("valid");
        assert!(
            Arc::ptr_eq(&shared, &complete),
            "nothing to fill: still shared"
        );

        let nested = Arc::new(json!({"amount": 3, "currency": "USD", "meta": {}}));
        let mut filled = Arc::clone(&nested);
        typed().fill_and_check_shared(&mut filled).expect("valid");
        assert_eq!(filled["meta"], json!({"tag": "x"}));
        assert_eq!(
            nested["meta"],
            json!({}),
            "the value it shared is left as it was"
        );

        let mut wrong = Arc::new(json!({"currency": 1}));
        let err = typed().fill_and_check_shared(&mut wrong).unwrap_err();
        assert_eq!(err.len(), 2, "both violations, after the fill: {err:?}");
    }

    #[test]
    fn s63_violations_name_a_json_pointer() {
        let err = typed().check(&json!({"amount": "ten"})).unwrap_err();
        assert_eq!(err.len(), 1);
        assert_eq!(err[0].path, "/amount");
        assert!(err[0].message.contains("number"), "{}", err[0].message);
        assert!(typed().check(&json!({"amount": 1})).is_ok());
    }

    #[test]
    fn s63_a_violation_quoting_a_large_value_is_cut_short() {
        let big = json!({"amount": "x".repeat(100_000)});
        let err = typed().check(&big).expect_err("a string is not a number");
        assert!(
            err[0].message.len() <= MESSAGE_LIMIT + '…'.len_utf8(),
            "{}",
            err[0].message.len()
        );
        assert!(err[0].message.ends_with('…'));
    }

    #[test]
    fn an_invalid_schema_is_reported() {
        assert!(Schema::new(json!({"type": 12})).compile().is_err());
    }
}
