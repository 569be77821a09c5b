//! `validation.validate`: the policies type-checked against `docs/toolward.cedarschema`, once
//! per registered tool with `Arguments` replaced by the tool's `inputSchema` as a Cedar type
//! (as cedar-for-agents turns MCP tool schemas into Cedar types).
//!
//! JSON Schema → Cedar type (`docs/cedar.md`, "Validation"): `string` → `String`,
//! `boolean` → `Bool`, `integer` → `Long` (always optional: an integer outside `i64` is left
//! out of the arguments), `array` with typed `items` → `Set<T>`, `object` → a record of its
//! `properties` (an attribute is required only when `required` lists it and its value is
//! always held exactly), `["T", "null"]` → `T` optional. Left out of the type (a policy
//! that reads them fails validation): `number` (a value is a `Long` or a `decimal` by its
//! text), unions (`anyOf`, `oneOf`, other type lists), `$ref`, and members an open object
//! may have beyond its `properties`. Never a wrong type.

use std::collections::BTreeMap;
use std::fmt::Display;

use cedar_policy::{
    EntityUid, Policy, PolicySet, ResourceConstraint, Schema, ValidationMode, Validator,
};
use serde_json::Value;

use crate::exports::toolward::policy0_3_0::validation::RegisteredTool;
use crate::json::MAX_DEPTH;
use crate::request::{SERVER_TYPE, TOOL_TYPE, effect_name, tool_id, uid};

/// The request's schema; its `type Arguments = {};` is replaced per tool.
const SCHEMA: &str = include_str!("../../docs/toolward.cedarschema");
/// The line of [`SCHEMA`] replaced by each tool's arguments type.
const ARGUMENTS_PLACEHOLDER: &str = "type Arguments = {};";

/// `error` with the line and column of its first label in `source`.
pub fn diagnostic_at<E: miette::Diagnostic + Display + ?Sized>(error: &E, source: &str) -> String {
    let offset = error
        .labels()
        .and_then(|mut labels| labels.next())
        .map(|label| label.offset());
    match offset {
        Some(offset) => {
            let (line, column) = line_column(source, offset);
            format!("line {line}, column {column}: {error}")
        }
        None => error.to_string(),
    }
}

fn line_column(source: &str, offset: usize) -> (usize, usize) {
    let before = source.get(..offset).unwrap_or(source);
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map_or(1, |l| l.chars().count() + 1);
    (line, column)
}

/// Problems of `set` for `tools`, each naming the policy, its place and the tools.
pub fn validate(set: &PolicySet, source: &str, tools: &[RegisteredTool]) -> Vec<String> {
    let mut problems: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let tool_ids: Vec<String> = tools.iter().map(|t| tool_id(&t.server, &t.name)).collect();
    for policy in set.policies() {
        for named in named_entities(policy) {
            let known = match named.type_name().to_string().as_str() {
                TOOL_TYPE => tool_ids.iter().any(|t| t == named.id().unescaped()),
                SERVER_TYPE => tools.iter().any(|t| t.server == named.id().unescaped()),
                _ => true,
            };
            if !known {
                problems
                    .entry((
                        policy.id().to_string(),
                        format!("names `{named}`, which no server registered"),
                    ))
                    .or_default();
            }
        }
    }
    for (tool, id) in tools.iter().zip(&tool_ids) {
        let schema = match schema_for(tool) {
            Ok(schema) => schema,
            Err(message) => {
                problems
                    .entry((String::new(), message))
                    .or_default()
                    .push(id.clone());
                continue;
            }
        };
        let mut applicable = PolicySet::new();
        for policy in set.policies().filter(|p| applies_to(p, tool)) {
            // Ids are unique in `set`, so adding to a new set cannot fail.
            let _ = applicable.add(policy.clone());
        }
        let result = Validator::new(schema).validate(&applicable, ValidationMode::Strict);
        for error in result.validation_errors() {
            problems
                .entry((error.policy_id().to_string(), diagnostic_at(error, source)))
                .or_default()
                .push(id.clone());
        }
    }
    problems
        .into_iter()
        .map(|((policy, message), tools)| {
            let subject = if policy.is_empty() {
                String::new()
            } else {
                format!("policy `{policy}`: ")
            };
            if tools.is_empty() {
                format!("{subject}{message}")
            } else {
                let tools: Vec<String> = tools.iter().map(|t| format!("`{t}`")).collect();
                format!("{subject}{message} (for tool {})", tools.join(", "))
            }
        })
        .collect()
}

/// The entities a policy's resource scope names.
fn named_entities(policy: &Policy) -> Vec<EntityUid> {
    match policy.resource_constraint() {
        ResourceConstraint::Eq(uid) | ResourceConstraint::In(uid) => vec![uid],
        ResourceConstraint::IsIn(_, uid) => vec![uid],
        ResourceConstraint::Any | ResourceConstraint::Is(_) => Vec::new(),
    }
}

/// Whether `policy`'s resource scope admits `tool`: only those policies are type-checked
/// with its arguments, so a policy scoped to one tool reads that tool's arguments typed.
fn applies_to(policy: &Policy, tool: &RegisteredTool) -> bool {
    let (Ok(tool_uid), Ok(server_uid)) = (
        uid(TOOL_TYPE, &tool_id(&tool.server, &tool.name)),
        uid(SERVER_TYPE, &tool.server),
    ) else {
        return true;
    };
    match policy.resource_constraint() {
        ResourceConstraint::Any | ResourceConstraint::Is(_) => true,
        ResourceConstraint::Eq(uid) => uid == tool_uid,
        ResourceConstraint::In(uid) | ResourceConstraint::IsIn(_, uid) => {
            uid == tool_uid || uid == server_uid
        }
    }
}

/// The request schema with `tool`'s arguments type.
fn schema_for(tool: &RegisteredTool) -> Result<Schema, String> {
    let input: Value = serde_json::from_str(&tool.input_schema)
        .map_err(|e| format!("the `inputSchema` of tool `{}` is not JSON: {e}", tool.name))?;
    let arguments = match cedar_type(&input, 0) {
        Some(CedarType { text, .. }) if text.starts_with('{') => text,
        _ => "{}".to_owned(),
    };
    let text = SCHEMA.replace(
        ARGUMENTS_PLACEHOLDER,
        &format!("type Arguments = {arguments};"),
    );
    Schema::from_cedarschema_str(&text)
        .map(|(schema, _)| schema)
        .map_err(|e| {
            format!(
                "the arguments type of tool `{}` (effect `{}`) is not a Cedar schema: {e}",
                tool.name,
                effect_name(tool.effect)
            )
        })
}

/// A Cedar type in the Cedar schema syntax, and whether a value of it is always held
/// exactly (else its attribute is optional).
struct CedarType {
    text: String,
    always: bool,
}

fn cedar_type(schema: &Value, depth: usize) -> Option<CedarType> {
    if depth > MAX_DEPTH {
        return None;
    }
    let schema = schema.as_object()?;
    if schema.contains_key("$ref") || schema.contains_key("anyOf") || schema.contains_key("oneOf") {
        return None;
    }
    let (type_name, nullable) = match schema.get("type")? {
        Value::String(name) => (name.as_str(), false),
        Value::Array(names) => {
            let names: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
            match names.as_slice() {
                [name, "null"] | ["null", name] => (*name, true),
                [name] => (*name, false),
                _ => return None,
            }
        }
        _ => return None,
    };
    let typed = match type_name {
        "string" => CedarType {
            text: "String".to_owned(),
            always: true,
        },
        "boolean" => CedarType {
            text: "Bool".to_owned(),
            always: true,
        },
        "integer" => CedarType {
            text: "Long".to_owned(),
            always: false,
        },
        "array" => {
            let items = cedar_type(schema.get("items")?, depth + 1)?;
            CedarType {
                text: format!("Set<{}>", items.text),
                always: items.always,
            }
        }
        "object" => {
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut attributes = Vec::new();
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    let Some(member) = cedar_type(property, depth + 1) else {
                        continue;
                    };
                    let optional = if required.contains(&name.as_str()) && member.always {
                        ""
                    } else {
                        "?"
                    };
                    attributes.push(format!(
                        "\"{}\"{optional}: {}",
                        name.escape_default(),
                        member.text
                    ));
                }
            }
            CedarType {
                text: format!("{{{}}}", attributes.join(", ")),
                always: true,
            }
        }
        _ => return None,
    };
    Some(CedarType {
        always: typed.always && !nullable,
        ..typed
    })
}
