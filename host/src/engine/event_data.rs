//! A tracking event's data, which may share a step's input or output with the run's state.

use std::sync::Arc;

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// The data of a [`Tracking`](super::Tracking) event.
///
/// A step's `step-started` and `step-succeeded` events carry its input and output under one
/// key. They share that value with the run's state instead of holding a copy: most events are
/// only written into the run's record and dropped, so the copy would be made for nothing. It
/// serializes as the object it stands for; [`EventData::into_value`] makes that object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum EventData {
    /// Any value.
    Value(Value),
    /// `{ key: value }`, the value shared rather than copied.
    Keyed(&'static str, Arc<Value>),
}

impl EventData {
    /// Whether the data is `null` (then it is left out of the event).
    pub(crate) fn is_null(&self) -> bool {
        matches!(self, Self::Value(Value::Null))
    }

    /// The data as a value, copying a shared one only while something else still holds it.
    pub(crate) fn into_value(self) -> Value {
        match self {
            Self::Value(v) => v,
            Self::Keyed(key, value) => object_of(key, Arc::unwrap_or_clone(value)),
        }
    }
}

impl Default for EventData {
    fn default() -> Self {
        Self::Value(Value::Null)
    }
}

impl From<Value> for EventData {
    fn from(value: Value) -> Self {
        Self::Value(value)
    }
}

impl Serialize for EventData {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Value(v) => v.serialize(s),
            Self::Keyed(key, value) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry(key, &**value)?;
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for EventData {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(Self::Value)
    }
}

/// Indexes the data as [`Value`] indexes an object: a missing key, or data that is not an
/// object, gives `null`.
impl std::ops::Index<&str> for EventData {
    type Output = Value;

    fn index(&self, key: &str) -> &Value {
        static NULL: Value = Value::Null;
        match self {
            Self::Value(v) => &v[key],
            Self::Keyed(k, v) if *k == key => v,
            Self::Keyed(..) => &NULL,
        }
    }
}

/// `{ key: value }`, built directly: `json!` would serialize a borrowed value into a copy,
/// slower than cloning it.
pub(crate) fn object_of(key: &str, value: Value) -> Value {
    let mut map = Map::with_capacity(1);
    map.insert(key.to_owned(), value);
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn s89_shared_data_serializes_as_the_object_it_stands_for() {
        let output = Arc::new(json!({"n": 1}));
        let data = EventData::Keyed("output", Arc::clone(&output));
        let written = serde_json::to_value(&data).expect("serializes");
        assert_eq!(written, json!({"output": {"n": 1}}));
        assert_eq!(data["output"], json!({"n": 1}));
        assert_eq!(data["input"], Value::Null);
        assert_eq!(data.clone().into_value(), written);
        let read: EventData = serde_json::from_value(written.clone()).expect("reads back");
        assert_eq!(read.into_value(), written);
        assert!(EventData::default().is_null() && !data.is_null());
    }
}
