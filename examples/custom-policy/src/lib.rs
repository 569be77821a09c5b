//! An example toolward policy component that decides on a call's arguments, not only on its
//! effect (world `rules-and-policy` of `toolward:policy@0.1.0`).
//!
//! - A `local-change` or `destructive` call whose path argument leaves the configured
//!   `write_root`, after lexical normalisation, is denied (module `path`).
//! - A `remote-change` call whose URL argument names a host off the configured allowlist is
//!   held for approval; a URL it cannot read unambiguously is denied (module `url`).
//! - Everything else is decided by the default decision table (`toolward-policy-table`),
//!   from the `rules` object of the settings, exactly as the default component decides.
//!
//! The checks only ever tighten the table: the answer is the stricter of the check's and
//! the table's (deny over hold over allow), so a path inside `write_root` is not allowed by
//! that alone, and a server whose table denies remote changes stays denied even when the
//! URL's host is off the allowlist (which alone would only hold).
//!
//! # Settings
//! `policy.configure` receives the operator's settings text (`policy.settings` in
//! `toolward.json`), a JSON object; its keys are in module `settings`:
//!
//! ```json
//! {
//!   "rules": { "decisions": { "local-change": "allow", "remote-change": "allow" } },
//!   "write_root": "/srv/sandbox",
//!   "path_arguments": ["path", "destination"],
//!   "allowed_hosts": ["api.example.com"],
//!   "url_arguments": ["url"]
//! }
//! ```
//!
//! `rules.configure` receives the operator's rules file, as for the default component, and
//! `classify` answers from it: this component changes decisions, not classification.
//!
//! # Reading arguments
//! The call's arguments arrive as canonical JSON text. Module `arguments` walks only the
//! top level of that object with `serde_json`'s borrowing deserializer, skips every member it
//! was not asked for without building it, and hands back the asked-for strings borrowed
//! from the text (a string is copied only when it holds an escape such as `\"`).
#![cfg(target_family = "wasm")]
#![allow(
    unsafe_code,
    reason = "the exports wit-bindgen generates are unsafe extern functions"
)]

mod arguments;
mod path;
mod settings;
mod url;

use std::sync::OnceLock;

use toolward_policy_table::{Decision as TableDecision, Effect as TableEffect, Rules};

use crate::arguments::Arg;
use crate::settings::Settings;

wit_bindgen::generate!({
    path: "../../wit",
    world: "rules-and-policy",
});

use exports::toolward::policy::policy::{Call, Decision, Guest as PolicyGuest};
use exports::toolward::policy::rules::{Classification, Guest as RulesGuest, Tool};
use toolward::policy::types::{Effect, FixedParameter};

/// The rules file for `classify`, set by `rules.configure`.
static CLASSIFY_RULES: OnceLock<Rules> = OnceLock::new();
/// The settings for `decide`, set by `policy.configure`. The host snapshots the configured
/// instance, so every decision starts with them parsed.
static SETTINGS: OnceLock<Settings> = OnceLock::new();

struct Component;

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
        let rules = Rules::parse(&settings).map_err(|e| e.to_string())?;
        CLASSIFY_RULES
            .set(rules)
            .map_err(|_| "configure was called twice".to_owned())
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
        let settings = Settings::parse(&settings)?;
        SETTINGS
            .set(settings)
            .map_err(|_| "configure was called twice".to_owned())
    }

    fn decide(call: Call) -> Decision {
        // Fail closed: without settings there is neither a root nor a table to allow from.
        let Some(settings) = SETTINGS.get() else {
            return Decision::Deny("the policy was not configured".to_owned());
        };
        let facts: Vec<(&str, &str)> = call
            .facts
            .iter()
            .map(|fact| (fact.name.as_str(), fact.value.as_str()))
            .collect();
        let table = settings.rules.decide_with_facts(
            &call.server,
            &call.tool,
            from_wit(call.effect),
            &facts,
        );
        let own = match call.effect {
            Effect::LocalChange | Effect::Destructive => check_paths(settings, &call),
            Effect::RemoteChange => check_urls(settings, &call),
            Effect::ReadOnly => None,
        };
        match stricter(own, table) {
            TableDecision::Allow => Decision::Allow,
            TableDecision::Deny(reason) => Decision::Deny(reason),
            TableDecision::Hold(reason) => Decision::Hold(reason),
        }
    }
}

/// The stricter of the argument check's answer and the table's; on a tie the check's, whose
/// reason is the more specific.
fn stricter(own: Option<TableDecision>, table: TableDecision) -> TableDecision {
    fn rank(d: &TableDecision) -> u8 {
        match d {
            TableDecision::Allow => 0,
            TableDecision::Hold(_) => 1,
            TableDecision::Deny(_) => 2,
        }
    }
    match own {
        Some(own) if rank(&own) >= rank(&table) => own,
        _ => table,
    }
}

/// Where a call's arguments cannot be read, the call is denied: a policy that cannot see
/// the path cannot say it stays inside.
fn unreadable(call: &Call, error: &serde_json::Error) -> TableDecision {
    TableDecision::Deny(format!(
        "the arguments of tool `{}` of server `{}` are not a JSON object: {error}",
        call.tool, call.server
    ))
}

/// Names an argument in a reason; built only when there is a reason to give, so that a
/// call that passes the checks allocates nothing but the list of members found.
fn argument(name: &str, call: &Call) -> String {
    format!(
        "argument `{name}` of tool `{}` of server `{}`",
        call.tool, call.server
    )
}

/// Denies the call when any path argument is not a string or leaves `write_root`.
fn check_paths(settings: &Settings, call: &Call) -> Option<TableDecision> {
    let found = match arguments::find(&call.arguments, &settings.path_arguments) {
        Ok(found) => found,
        Err(e) => return Some(unreadable(call, &e)),
    };
    for (index, value) in found {
        let name = settings
            .path_arguments
            .get(index)
            .map_or("", String::as_str);
        let here = || argument(name, call);
        let reason = match value {
            Arg::NotText(kind) => format!("{} is {kind}, not a path", here()),
            Arg::Text(text) => match path::check(&settings.write_root, &text) {
                Ok(()) => continue,
                Err(fault) => format!("{}: {fault}", here()),
            },
        };
        return Some(TableDecision::Deny(reason));
    }
    None
}

/// Holds the call when a URL argument's host is off the allowlist; denies it when a URL
/// argument is not a string or cannot be read unambiguously.
fn check_urls(settings: &Settings, call: &Call) -> Option<TableDecision> {
    let found = match arguments::find(&call.arguments, &settings.url_arguments) {
        Ok(found) => found,
        Err(e) => return Some(unreadable(call, &e)),
    };
    let mut hold = None;
    for (index, value) in found {
        let name = settings.url_arguments.get(index).map_or("", String::as_str);
        let here = || argument(name, call);
        let text = match value {
            Arg::NotText(kind) => {
                return Some(TableDecision::Deny(format!(
                    "{} is {kind}, not a URL",
                    here()
                )));
            }
            Arg::Text(text) => text,
        };
        match url::host(&text) {
            Err(fault) => {
                return Some(TableDecision::Deny(format!(
                    "{}: URL `{text}` {fault}",
                    here()
                )));
            }
            Ok(host) if settings.host_allowed(host) => {}
            Ok(host) => {
                hold.get_or_insert_with(|| {
                    TableDecision::Hold(format!(
                        "{} names host `{}`, which is not on the allowlist",
                        here(),
                        host.to_ascii_lowercase()
                    ))
                });
            }
        }
    }
    hold
}

export!(Component);
