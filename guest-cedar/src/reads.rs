//! Which arguments (and principal attributes) each policy reads, so that a value Cedar
//! cannot hold exactly fails closed even under a `has` guard (`docs/cedar.md`, "Values Cedar
//! cannot hold"); and whether a policy uses `context.session` whole, as policies written
//! before it held the session's labels compared it with the connection's id.
//!
//! Read from each policy's syntax tree (Cedar's JSON form): every access chain rooted at
//! `context` (`context.arguments.o.mode`, `context.arguments has n`) is a path the policy
//! reads; `context` used whole (compared, passed anywhere) reads everything, and
//! `context.arguments` used whole every argument. A left-out value is read by a value the
//! policy uses when either path is a prefix of the other (`o == {…}` reads `/o/force`;
//! `o.mode` does not), and by a presence test when the value's path is a prefix of the
//! tested one (`has n` reads `/n`; `has o` does not read `/o/force`).

use cedar_policy::Policy;
use serde_json::{Map, Value};

/// What one policy reads.
#[derive(Debug, Default)]
pub struct Reads {
    /// Member paths below `context` the policy uses the value of (`.`).
    values: Vec<Vec<String>>,
    /// Member paths below `context` the policy tests the presence of (`has`).
    tests: Vec<Vec<String>>,
    /// `context` used whole: everything is read.
    whole: bool,
    /// `context.session` used whole (compared, passed anywhere) rather than through its
    /// attributes.
    pub session_whole: bool,
}

impl Reads {
    /// The arguments `policy` reads; every argument when its syntax tree cannot be had.
    pub fn of(policy: &Policy) -> Reads {
        let mut reads = Reads::default();
        match policy.to_json() {
            Ok(json) => walk(&json, &mut reads, false),
            Err(_) => reads.whole = true,
        }
        reads
    }

    /// Whether the value at `path` (below `context`: `arguments`, then member names and
    /// indexes) is read.
    ///
    /// A value used reads every value on its path and inside it; a presence test reads
    /// only the values on its path (`has o` does not depend on `o`'s members).
    pub fn reads(&self, path: &[String]) -> bool {
        self.whole
            || self.values.iter().any(|used| {
                let shared = used.len().min(path.len());
                used.get(..shared) == path.get(..shared)
            })
            || self.tests.iter().any(|tested| tested.starts_with(path))
    }
}

/// `{"Var": "context"}`.
pub fn is_context(value: &Value) -> bool {
    value.get("Var").and_then(Value::as_str) == Some("context")
}

/// The left operand, the attribute path and whether it is a test (`has`) of
/// `{".": {left, attr}}` or `{"has": {left, attr}}` (`attr` a string, or a list for
/// `has a.b.c`). Also what [`crate::facts`] reads scopes with.
pub fn access(map: &Map<String, Value>) -> Option<(&Value, Vec<&str>, bool)> {
    if map.len() != 1 {
        return None;
    }
    let (inner, test) = match (map.get("."), map.get("has")) {
        (Some(inner), _) => (inner, false),
        (None, Some(inner)) => (inner, true),
        (None, None) => return None,
    };
    let left = inner.get("left")?;
    let path = match inner.get("attr")? {
        Value::String(attr) => vec![attr.as_str()],
        Value::Array(attrs) => attrs.iter().map(Value::as_str).collect::<Option<_>>()?,
        _ => return None,
    };
    Some((left, path, test))
}

/// The attributes of `context` that `value` accesses, when it is a chain of `.` accesses
/// rooted at `context` (`context` itself: empty).
fn chain(value: &Value) -> Option<Vec<String>> {
    if is_context(value) {
        return Some(Vec::new());
    }
    let (left, path, test) = access(value.as_object()?)?;
    if test {
        return None;
    }
    let mut chain = chain(left)?;
    chain.extend(path.into_iter().map(str::to_owned));
    Some(chain)
}

/// Collects what `value` reads; `as_left` when it is the left operand of an access (so not
/// used whole).
fn walk(value: &Value, reads: &mut Reads, as_left: bool) {
    match value {
        Value::Array(items) => items.iter().for_each(|item| walk(item, reads, false)),
        Value::Object(map) => {
            if is_context(value) {
                if !as_left {
                    reads.whole = true;
                }
                return;
            }
            if let Some((left, path, test)) = access(map) {
                if let Some(mut accessed) = chain(left) {
                    accessed.extend(path.into_iter().map(str::to_owned));
                    if test {
                        reads.tests.push(accessed);
                    } else if accessed.len() > 1 || !as_left {
                        // `context.arguments` compared or passed whole reads every
                        // argument: the path `arguments` is a prefix of each.
                        reads.session_whole |= accessed == ["session"] && !as_left;
                        reads.values.push(accessed);
                    }
                    return;
                }
                walk(left, reads, true);
                return;
            }
            map.values().for_each(|item| walk(item, reads, false));
        }
        _ => {}
    }
}
