//! Which facts the operator's policies read (the `facts@0.2.0` export): the host counts calls
//! only for the scopes named here, so it must never be told fewer than the policies can see.
//!
//! Read from each policy's syntax tree (Cedar's JSON form, in which `context.facts`,
//! `context["facts"]` and `context has facts.tool` are spelled alike): an access
//! `context.facts.SCOPE…` or a test `context.facts has SCOPE` / `context has facts.SCOPE…`
//! reads `SCOPE`; any other use of `context.facts`, and any use of `context` as a whole
//! (`context == …`, passing it anywhere), reads every scope; accesses of other attributes of
//! `context` read none.

use std::collections::BTreeSet;

use cedar_policy::PolicySet;
use serde_json::Value;

use crate::reads::{access, is_context};

/// What the host reads as "every scope": not a scope's name.
pub const EVERY_SCOPE: &str = "*";

/// The scopes whose facts the policies of `set` can read, each once, in name order;
/// [`EVERY_SCOPE`] alone when a policy reads them all or cannot be read.
pub fn read_scopes(set: &PolicySet) -> Vec<String> {
    let mut scopes = BTreeSet::new();
    for policy in set.policies() {
        match policy.to_json() {
            Ok(json) => walk(&json, &mut scopes),
            Err(_) => return vec![EVERY_SCOPE.to_owned()],
        }
    }
    if scopes.contains(EVERY_SCOPE) {
        return vec![EVERY_SCOPE.to_owned()];
    }
    scopes.into_iter().collect()
}

fn walk(value: &Value, scopes: &mut BTreeSet<String>) {
    match value {
        Value::Array(items) => items.iter().for_each(|item| walk(item, scopes)),
        Value::Object(map) => {
            if is_context(value) {
                // `context` used whole: it carries every fact.
                scopes.insert(EVERY_SCOPE.to_owned());
                return;
            }
            if let Some((left, path, _)) = access(map) {
                // `context.facts.SCOPE` / `context.facts has SCOPE`.
                if let Some((inner_left, inner_path, _)) = left.as_object().and_then(access)
                    && is_context(inner_left)
                    && inner_path == ["facts"]
                {
                    if let Some(scope) = path.first() {
                        scopes.insert((*scope).to_owned());
                    }
                    return;
                }
                if is_context(left) {
                    match path.as_slice() {
                        // `context has facts.SCOPE…`.
                        ["facts", scope, ..] => {
                            scopes.insert((*scope).to_owned());
                        }
                        // `context.facts` (or `context has facts`) used otherwise.
                        ["facts"] => {
                            scopes.insert(EVERY_SCOPE.to_owned());
                        }
                        // Another attribute of the context: no fact.
                        _ => {}
                    }
                    return;
                }
                walk(left, scopes);
                return;
            }
            map.values().for_each(|item| walk(item, scopes));
        }
        _ => {}
    }
}
