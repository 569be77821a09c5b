//! The default toolward policy component, exporting both `rules` and `policy` of
//! `toolward:policy@0.1.0` (world `rules-and-policy`).
//!
//! Built for `wasm32-unknown-unknown` and linked by `wasm-component-ld`, so it imports
//! nothing; the host's build script builds it and embeds the `.wasm` in the `toolward`
//! binary. Its settings text is the operator's rules file, parsed once in `configure`; the
//! host snapshots the configured instance, so every decision starts from parsed rules.
//!
//! The logic lives in `toolward-policy-table`; this file only converts WIT values.
#![cfg(target_family = "wasm")]
#![allow(
    unsafe_code,
    reason = "the exports wit-bindgen generates are unsafe extern functions"
)]

use std::sync::OnceLock;

use toolward_policy_table::{Decision as TableDecision, Effect as TableEffect, Rules};

wit_bindgen::generate!({
    path: "../wit",
    world: "rules-and-policy",
});

use exports::toolward::policy::policy::{Call, Decision, Guest as PolicyGuest};
use exports::toolward::policy::rules::{Classification, Guest as RulesGuest, Tool};
use toolward::policy::types::{Effect, FixedParameter};

/// Rules for `classify`, set by `rules.configure`.
static CLASSIFY_RULES: OnceLock<Rules> = OnceLock::new();
/// Rules for `decide`, set by `policy.configure` (its own settings text: the host may load
/// rules and policy from two components with two texts).
static DECIDE_RULES: OnceLock<Rules> = OnceLock::new();

struct Component;

fn configure(cell: &OnceLock<Rules>, settings: &str) -> Result<(), String> {
    let rules = Rules::parse(settings).map_err(|e| e.to_string())?;
    cell.set(rules)
        .map_err(|_| "configure was called twice".to_owned())
}

fn to_wit(effect: TableEffect) -> Effect {
    match effect {
        TableEffect::ReadOnly => Effect::ReadOnly,
        TableEffect::LocalChange => Effect::LocalChange,
        TableEffect::RemoteChange => Effect::RemoteChange,
        TableEffect::Destructive => Effect::Destructive,
    }
}

fn from_wit(effect: Effect) -> TableEffect {
    match effect {
        Effect::ReadOnly => TableEffect::ReadOnly,
        Effect::LocalChange => TableEffect::LocalChange,
        Effect::RemoteChange => TableEffect::RemoteChange,
        Effect::Destructive => TableEffect::Destructive,
    }
}

impl RulesGuest for Component {
    fn configure(settings: String) -> Result<(), String> {
        configure(&CLASSIFY_RULES, &settings)
    }

    fn classify(tool: Tool) -> Option<Classification> {
        let rule = CLASSIFY_RULES.get()?.tool_rule(&tool.server, &tool.name)?;
        Some(Classification {
            effect: to_wit(rule.effect),
            denied_parameters: rule.deny.clone(),
            fixed_parameters: rule
                .fix
                .iter()
                .map(|(name, value)| FixedParameter {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect(),
            description_override: rule.description.clone(),
            allow_hint_mismatch: rule.allow_hint_mismatch,
        })
    }
}

impl PolicyGuest for Component {
    fn configure(settings: String) -> Result<(), String> {
        configure(&DECIDE_RULES, &settings)
    }

    fn decide(call: Call) -> Decision {
        // Fail closed: a component that was never configured has no table to allow from.
        let Some(rules) = DECIDE_RULES.get() else {
            return Decision::Deny("the policy was not configured".to_owned());
        };
        let facts: Vec<(&str, &str)> = call
            .facts
            .iter()
            .map(|fact| (fact.name.as_str(), fact.value.as_str()))
            .collect();
        match rules.decide_with_facts(&call.server, &call.tool, from_wit(call.effect), &facts) {
            TableDecision::Allow => Decision::Allow,
            TableDecision::Deny(reason) => Decision::Deny(reason),
            TableDecision::Hold(reason) => Decision::Hold(reason),
        }
    }
}

export!(Component);
