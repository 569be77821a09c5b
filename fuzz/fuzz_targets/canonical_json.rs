//! Canonical JSON: any bytes either fail to parse or parse to a value whose canonical text
//! parses back to the same value, is its own canonical form, and hashes the same every time.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolward_fuzz::canonical::{self, Value};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = canonical::parse(data) else {
        return;
    };
    let text = canonical::to_canonical(&value);
    let again = match canonical::parse(text.as_bytes()) {
        Ok(again) => again,
        Err(error) => panic!("the canonical text `{text}` does not parse: {error}"),
    };
    assert_eq!(again, value, "parse → canonical → parse changed the value");
    assert_eq!(
        canonical::to_canonical(&again),
        text,
        "canonical text is not stable"
    );
    assert_eq!(canonical::canonicalize(data).as_deref(), Ok(text.as_str()));
    assert_eq!(
        canonical::sha256_hex(text.as_bytes()),
        canonical::sha256_hex(canonical::to_canonical(&again).as_bytes()),
    );
    // Through serde_json and back is lossy only for numbers; a value without numbers
    // survives it exactly.
    if !has_number(&value) {
        assert_eq!(Value::from_serde_json(&value.to_serde_json()), value);
    }
});

fn has_number(value: &Value) -> bool {
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::Number(_) => return true,
            Value::Array(items) => stack.extend(items),
            Value::Object(members) => stack.extend(members.iter().map(|(_, v)| v)),
            Value::Null | Value::Bool(_) | Value::String(_) => {}
        }
    }
    false
}
