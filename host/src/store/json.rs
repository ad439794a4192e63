//! Reading stored JSON back at any depth.
//!
//! Records wrap user values in several levels (and a run's execution tree adds levels for
//! every nested block and workflow file), so serde_json's default recursion limit of 128 would
//! refuse runs that were accepted and stored. Stored bytes are read without that limit, on a
//! stack that grows on the heap as deep as the value needs ([`serde_stacker`]), so whatever was
//! stored can be read back without overflowing the thread's stack.

use serde::de::DeserializeOwned;

/// Parses stored JSON bytes of any depth.
pub(crate) fn from_stored<T: DeserializeOwned>(bytes: &[u8]) -> serde_json::Result<T> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    de.disable_recursion_limit();
    let value = T::deserialize(serde_stacker::Deserializer::new(&mut de))?;
    de.end()?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn values_far_deeper_than_serde_jsons_limit_read_back() {
        let depth = 5_000;
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(
            serde_json::from_str::<Value>(&text).is_err(),
            "the default refuses"
        );
        let mut value: Value = from_stored(text.as_bytes()).expect("read back");
        // Take it apart without recursion: dropping it whole would recurse as deep.
        let mut levels = 0;
        while let Value::Array(mut items) = value {
            levels += 1;
            value = items.pop().unwrap_or(Value::Null);
        }
        assert_eq!(levels, depth);
        assert!(from_stored::<Value>(b"[1] trailing").is_err());
    }
}
