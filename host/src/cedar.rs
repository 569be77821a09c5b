//! Cedar policies (`docs/cedar.md`): the built-in Cedar component
//! ([`crate::component::CEDAR_COMPONENT`], `guest-cedar/`) decides calls with the operator's
//! `.cedar` file (`policy.cedar` in the config); here, the host's side of checking those
//! policies against the registered tools (`toolward policy validate`, `toolward check`).
//!
//! The Cedar parser and type checker run inside the component (its `validation@0.2.0`
//! export), not in the host: the host links no Cedar.

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
