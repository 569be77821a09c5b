//! Cedar policies (`docs/cedar.md`): the built-in Cedar component
//! ([`crate::component::CEDAR_COMPONENT`], `guest-cedar/`) decides calls with the operator's
//! `.cedar` file (`policy.cedar` in the config); here, the host's side of checking those
//! policies against the registered tools (`toolward policy validate`, `toolward check`).
//!
//! The Cedar parser and type checker run inside the component (its `validation@0.3.0`
//! export), not in the host: the host links no Cedar. The host builds the component's
//! settings from the `.cedar` file and what the rules file says about results
//! ([`settings`]).

use serde_json::{Map, Value, json};

use crate::canonical::to_canonical;
use crate::component::{Policy, RegisteredToolView};
use crate::registry::Registry;

/// Errors of checking a policy against the registered tools.
#[derive(Debug, thiserror::Error)]
pub enum CedarError {
    /// The policy component could not validate: it trapped, ran out of fuel or memory, or
    /// could not be instantiated. The message names the component and the failure.
    #[error("the policy's settings could not be checked against the registered tools: {0}")]
    Validation(String),
}

/// The name of the built-in Cedar component on the command line (`policy inspect`,
/// `policy test --policy`) and in messages.
pub const BUILT_IN_CEDAR: &str = "built-in-cedar";

/// The file extension that makes `policy test --policy FILE` run FILE as Cedar policies.
pub const CEDAR_EXTENSION: &str = "cedar";

/// The settings text of the Cedar component (`docs/cedar.md`, "Reviews and labels"): the
/// `.cedar` file's text `policies` as it is, or, when the rules file (`rules`: its text,
/// where the default component classifies) names `reviews`, `labels` or a tool's
/// `returns`, a JSON object holding the policies under `cedar` beside those members, in the
/// rules file's shape. The Cedar component then reviews results and labels sessions as the
/// default component does. A rules text that is not a JSON object gives the policies alone
/// (the rules component has refused it already).
pub fn settings(policies: &str, rules: Option<&str>) -> String {
    let Some(Value::Object(rules)) = rules.and_then(|text| serde_json::from_str(text).ok()) else {
        return policies.to_owned();
    };
    let mut settings = Map::new();
    for key in ["reviews", "labels"] {
        if let Some(value) = rules.get(key) {
            settings.insert(key.to_owned(), value.clone());
        }
    }
    let mut servers = Map::new();
    for (server, server_rules) in rules
        .get("servers")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let returns: Map<String, Value> = server_rules
            .get("tools")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(tool, rule)| {
                let returns = rule.get("returns")?;
                Some((tool.clone(), json!({ "returns": returns })))
            })
            .collect();
        if !returns.is_empty() {
            servers.insert(server.clone(), json!({ "tools": returns }));
        }
    }
    if !servers.is_empty() {
        settings.insert("servers".to_owned(), Value::Object(servers));
    }
    if settings.is_empty() {
        return policies.to_owned();
    }
    settings.insert("cedar".to_owned(), Value::String(policies.to_owned()));
    Value::Object(settings).to_string()
}

/// The registered tools of `registry`, as the policy's `validate` sees them: each with the
/// `inputSchema` its server sent (the final arguments of a call hold the fixed parameters
/// too, so the schema before toolward narrowed it is the arguments' type).
pub fn registered_tools(registry: &Registry) -> Vec<RegisteredToolView> {
    let mut tools: Vec<RegisteredToolView> = registry
        .tools()
        .map(|tool| RegisteredToolView {
            server: tool.server.clone(),
            name: tool.upstream_name.clone(),
            effect: tool.effect,
            input_schema: to_canonical(&tool.original_schema),
        })
        .collect();
    tools.sort_by(|a, b| (&a.server, &a.name).cmp(&(&b.server, &b.name)));
    tools
}

/// The problems `policy` finds in its settings for the tools of `registry`: for the Cedar
/// component, type errors of the policies against `docs/toolward.cedarschema` with each
/// tool's arguments typed, and scopes naming tools or servers nobody registered. Empty for a
/// component without a `validation` export.
///
/// # Errors
/// [`CedarError::Validation`] naming the component when it could not validate (trapped, out
/// of fuel or memory): the operator cannot rely on the policies being checked (raise
/// `guest.configure_fuel` or `guest.memory_bytes`).
pub fn validate(policy: &Policy, registry: &Registry) -> Result<Vec<String>, CedarError> {
    if !policy.validates() {
        return Ok(Vec::new());
    }
    policy
        .validate(&registered_tools(registry))
        .map_err(CedarError::Validation)
}

#[cfg(test)]
mod tests;
