//! The operator's rules file and the default decision table, in plain Rust.
//!
//! The default policy component (`guest-policy`) is a thin WIT wrapper around this crate, so
//! that example components and the host's native test oracle run the very same code.
//!
//! The rules file is JSON; its JSON Schema is `docs/rules.schema.json` in the repository.
//! Keys are snake_case; effects and verdicts are spelled as in the WIT
//! (`read-only`, `local-change`, `remote-change`, `destructive`; `allow`, `deny`, `hold`).
//!
//! ```json
//! {
//!   "decisions": { "local-change": "allow" },
//!   "servers": {
//!     "fs": {
//!       "decisions": { "remote-change": "deny" },
//!       "tools": {
//!         "read_file": { "effect": "read-only" },
//!         "write_file": { "effect": "local-change", "allow_hint_mismatch": true,
//!                         "decision": "hold" },
//!         "edit_file": { "effect": "local-change", "fix": { "dryRun": true } }
//!       }
//!     }
//!   }
//! }
//! ```
//!
//! A call's verdict is the first of: the tool's `decision`, the server's `decisions` entry
//! for the effect, the file's `decisions` entry for the effect, and the built-in default
//! ([`DEFAULT_TABLE`]: read-only allow, local-change hold, remote-change hold, destructive
//! deny).
#![deny(missing_docs)]

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// What a tool can do to the world, in the order of power (WIT `types.effect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Effect {
    /// Reads only.
    ReadOnly,
    /// Changes state on this machine.
    LocalChange,
    /// Changes state elsewhere.
    RemoteChange,
    /// Destroys data.
    Destructive,
}

impl Effect {
    /// Every effect, in the order of power.
    pub const ALL: [Effect; 4] = [
        Effect::ReadOnly,
        Effect::LocalChange,
        Effect::RemoteChange,
        Effect::Destructive,
    ];

    /// The WIT spelling (`read-only`, …), which is also the rules file's.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::ReadOnly => "read-only",
            Effect::LocalChange => "local-change",
            Effect::RemoteChange => "remote-change",
            Effect::Destructive => "destructive",
        }
    }

    /// Parses the WIT spelling; `None` for anything else.
    pub fn parse(text: &str) -> Option<Effect> {
        Effect::ALL.into_iter().find(|e| e.as_str() == text)
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A verdict in the decision table, or of a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum Verdict {
    /// Forward the call.
    Allow,
    /// Refuse the call.
    Deny,
    /// Ask a person.
    Hold,
}

impl Verdict {
    /// The rules file's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
            Verdict::Hold => "hold",
        }
    }

    fn parse(text: &str) -> Option<Verdict> {
        [Verdict::Allow, Verdict::Deny, Verdict::Hold]
            .into_iter()
            .find(|v| v.as_str() == text)
    }
}

/// The built-in table, indexed by [`Effect`] order: read-only allow, local-change hold,
/// remote-change hold, destructive deny.
pub const DEFAULT_TABLE: [Verdict; 4] =
    [Verdict::Allow, Verdict::Hold, Verdict::Hold, Verdict::Deny];

/// A decision with its reason (WIT `types.decision`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Forward the call.
    Allow,
    /// Refuse, with the reason.
    Deny(String),
    /// Ask a person, with the reason.
    Hold(String),
}

/// One tool's rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRule {
    /// The operator's effect for the tool.
    pub effect: Effect,
    /// Top-level parameters hidden from the model and refused at call time.
    pub deny: Vec<String>,
    /// Top-level parameters hidden from the model and set by the host: name and JSON text.
    pub fix: Vec<(String, String)>,
    /// The description the model sees instead of the server's.
    pub description: Option<String>,
    /// Accept a server hint that claims more effect than `effect`.
    pub allow_hint_mismatch: bool,
    /// The verdict for this tool, overriding the tables.
    pub decision: Option<Verdict>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ServerRules {
    tools: BTreeMap<String, ToolRule>,
    decisions: [Option<Verdict>; 4],
}

/// A parsed rules file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    servers: BTreeMap<String, ServerRules>,
    decisions: [Option<Verdict>; 4],
}

/// A fault in a rules text: the dotted path of the fault and what is wrong there.
///
/// Displays as `servers.fs.tools.write_file.effect: unknown effect "write"`; the root is
/// shown as `(root)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulesError {
    /// Dotted path from the root of the file (`servers.fs.tools.write_file.effect`).
    pub path: String,
    /// What is wrong at that path.
    pub message: String,
}

impl fmt::Display for RulesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "(root)"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.message)
    }
}

impl std::error::Error for RulesError {}

fn fault(path: &str, message: impl Into<String>) -> RulesError {
    RulesError {
        path: path.to_owned(),
        message: message.into(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn object<'a>(value: &'a Value, path: &str) -> Result<&'a Map<String, Value>, RulesError> {
    value.as_object().ok_or_else(|| {
        fault(
            path,
            format!("expected an object, found {}", type_name(value)),
        )
    })
}

/// What a JSON value is, for messages: `null`, `a boolean`, `a number`, `a string`, `an
/// array`, `an object`.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Checks that `map` has no key outside `allowed`. Keys starting with `_` are comments
/// (`toolward check --suggest-rules` writes the server's description and hints there) and
/// are ignored.
fn only_keys(map: &Map<String, Value>, path: &str, allowed: &[&str]) -> Result<(), RulesError> {
    match map
        .keys()
        .find(|k| !k.starts_with('_') && !allowed.contains(&k.as_str()))
    {
        Some(key) => Err(fault(
            &join(path, key),
            format!("unknown key (expected one of {})", allowed.join(", ")),
        )),
        None => Ok(()),
    }
}

fn table(value: &Value, path: &str) -> Result<[Option<Verdict>; 4], RulesError> {
    let mut out = [None; 4];
    for (key, verdict) in object(value, path)? {
        let here = join(path, key);
        let effect =
            Effect::parse(key).ok_or_else(|| fault(&here, format!("unknown effect {key:?}")))?;
        out[effect as usize] = Some(verdict_of(verdict, &here)?);
    }
    Ok(out)
}

fn verdict_of(value: &Value, path: &str) -> Result<Verdict, RulesError> {
    let text = value.as_str().ok_or_else(|| {
        fault(
            path,
            format!(
                "expected \"allow\", \"deny\" or \"hold\", found {}",
                type_name(value)
            ),
        )
    })?;
    Verdict::parse(text).ok_or_else(|| {
        fault(
            path,
            format!("unknown decision {text:?} (expected allow, deny or hold)"),
        )
    })
}

/// The effect that says "not classified yet" (`{"effect": "unclassified"}`): the tool is
/// listed for the operator, who has not chosen its effect, and it is not registered, exactly
/// as a tool with no rule. `toolward init` writes every tool in this form, with its
/// description and hints beside it in `_`-prefixed comment keys.
pub const UNCLASSIFIED: &str = "unclassified";

/// Whether `value` is the unclassified form; it takes no key beside `effect` except
/// `_`-prefixed comments, so a rule half-filled (a `fix` with no effect) is an error rather
/// than silently ignored.
fn is_unclassified(value: &Value, path: &str) -> Result<bool, RulesError> {
    let map = object(value, path)?;
    if map.get("effect").and_then(Value::as_str) != Some(UNCLASSIFIED) {
        return Ok(false);
    }
    only_keys(map, path, &["effect"]).map_err(|e| RulesError {
        message: format!(
            "{} (an unclassified tool takes only `effect` and `_` comments)",
            e.message
        ),
        ..e
    })?;
    Ok(true)
}

fn tool_rule(value: &Value, path: &str) -> Result<ToolRule, RulesError> {
    let map = object(value, path)?;
    only_keys(
        map,
        path,
        &[
            "effect",
            "deny",
            "fix",
            "description",
            "allow_hint_mismatch",
            "decision",
        ],
    )?;
    let effect_path = join(path, "effect");
    let effect = match map.get("effect") {
        None => {
            return Err(fault(
                &effect_path,
                "missing (every classified tool needs an effect)",
            ));
        }
        Some(Value::String(text)) => Effect::parse(text)
            .ok_or_else(|| fault(&effect_path, format!("unknown effect {text:?}")))?,
        Some(other) => {
            return Err(fault(
                &effect_path,
                format!("expected a string, found {}", type_name(other)),
            ));
        }
    };
    let mut deny = Vec::new();
    if let Some(value) = map.get("deny") {
        let here = join(path, "deny");
        let items = value.as_array().ok_or_else(|| {
            fault(
                &here,
                format!("expected an array of names, found {}", type_name(value)),
            )
        })?;
        for (i, item) in items.iter().enumerate() {
            let name = item.as_str().ok_or_else(|| {
                fault(
                    &format!("{here}[{i}]"),
                    format!("expected a name, found {}", type_name(item)),
                )
            })?;
            if deny.iter().any(|d| d == name) {
                return Err(fault(
                    &format!("{here}[{i}]"),
                    format!("{name:?} is named twice"),
                ));
            }
            deny.push(name.to_owned());
        }
    }
    let mut fix = Vec::new();
    if let Some(value) = map.get("fix") {
        let here = join(path, "fix");
        for (name, fixed) in object(value, &here)? {
            if deny.iter().any(|d| d == name) {
                return Err(fault(
                    &join(&here, name),
                    format!("{name:?} is both denied and fixed"),
                ));
            }
            fix.push((name.clone(), fixed.to_string()));
        }
    }
    let description = match map.get("description") {
        None => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(other) => {
            return Err(fault(
                &join(path, "description"),
                format!("expected a string, found {}", type_name(other)),
            ));
        }
    };
    let allow_hint_mismatch = match map.get("allow_hint_mismatch") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(fault(
                &join(path, "allow_hint_mismatch"),
                format!("expected a boolean, found {}", type_name(other)),
            ));
        }
    };
    let decision = map
        .get("decision")
        .map(|v| verdict_of(v, &join(path, "decision")))
        .transpose()?;
    Ok(ToolRule {
        effect,
        deny,
        fix,
        description,
        allow_hint_mismatch,
        decision,
    })
}

impl Rules {
    /// Parses a rules text.
    ///
    /// # Errors
    /// A [`RulesError`] naming the first fault's path: text that is not JSON, an unknown
    /// key, an unknown effect or verdict, a value of the wrong type, a missing `effect`, a
    /// parameter both denied and fixed.
    pub fn parse(text: &str) -> Result<Rules, RulesError> {
        let root: Value =
            serde_json::from_str(text).map_err(|e| fault("", format!("not valid JSON: {e}")))?;
        let map = object(&root, "")?;
        only_keys(map, "", &["$schema", "decisions", "servers"])?;
        let decisions = match map.get("decisions") {
            Some(value) => table(value, "decisions")?,
            None => [None; 4],
        };
        let mut servers = BTreeMap::new();
        if let Some(value) = map.get("servers") {
            for (server, rules) in object(value, "servers")? {
                let path = join("servers", server);
                let server_map = object(rules, &path)?;
                only_keys(server_map, &path, &["tools", "decisions"])?;
                let decisions = match server_map.get("decisions") {
                    Some(value) => table(value, &join(&path, "decisions"))?,
                    None => [None; 4],
                };
                let mut tools = BTreeMap::new();
                if let Some(value) = server_map.get("tools") {
                    let tools_path = join(&path, "tools");
                    for (tool, rule) in object(value, &tools_path)? {
                        let here = join(&tools_path, tool);
                        if is_unclassified(rule, &here)? {
                            continue;
                        }
                        tools.insert(tool.clone(), tool_rule(rule, &here)?);
                    }
                }
                servers.insert(server.clone(), ServerRules { tools, decisions });
            }
        }
        Ok(Rules { servers, decisions })
    }

    /// The servers the rules name, each with the tools it classifies, in name order.
    pub fn names(&self) -> impl Iterator<Item = (&str, Vec<&str>)> {
        self.servers.iter().map(|(server, rules)| {
            (
                server.as_str(),
                rules.tools.keys().map(String::as_str).collect(),
            )
        })
    }

    /// The rule for `tool` of `server` (the server's name in the operator's config), or
    /// `None`: the tool is unclassified and is not registered.
    pub fn tool_rule(&self, server: &str, tool: &str) -> Option<&ToolRule> {
        self.servers.get(server)?.tools.get(tool)
    }

    /// The verdict for a call of `tool` on `server` with the operator's `effect`, and where
    /// it came from (for the reason).
    pub fn verdict(&self, server: &str, tool: &str, effect: Effect) -> (Verdict, String) {
        let server_rules = self.servers.get(server);
        if let Some(v) = server_rules
            .and_then(|s| s.tools.get(tool))
            .and_then(|r| r.decision)
        {
            return (
                v,
                format!("the rule for tool `{tool}` of server `{server}`"),
            );
        }
        if let Some(v) = server_rules.and_then(|s| s.decisions[effect as usize]) {
            return (v, format!("the decision table of server `{server}`"));
        }
        if let Some(v) = self.decisions[effect as usize] {
            return (v, "the rules file's decision table".to_owned());
        }
        (
            DEFAULT_TABLE[effect as usize],
            "the default decision table".to_owned(),
        )
    }

    /// The decision on a call, with a reason that names the effect and the source of the
    /// verdict.
    pub fn decide(&self, server: &str, tool: &str, effect: Effect) -> Decision {
        let (verdict, source) = self.verdict(server, tool, effect);
        match verdict {
            Verdict::Allow => Decision::Allow,
            Verdict::Deny => Decision::Deny(format!("effect `{effect}` is denied by {source}")),
            Verdict::Hold => {
                Decision::Hold(format!("effect `{effect}` needs approval by {source}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_table_allows_reads_holds_changes_and_denies_destruction() {
        let rules = Rules::parse("{}").unwrap();
        assert_eq!(rules.decide("s", "t", Effect::ReadOnly), Decision::Allow);
        assert!(matches!(
            rules.decide("s", "t", Effect::LocalChange),
            Decision::Hold(_)
        ));
        assert!(matches!(
            rules.decide("s", "t", Effect::RemoteChange),
            Decision::Hold(_)
        ));
        assert!(matches!(
            rules.decide("s", "t", Effect::Destructive),
            Decision::Deny(_)
        ));
    }

    #[test]
    fn unclassified_form_leaves_the_tool_without_a_rule_and_refuses_extra_keys() {
        let text = r#"{"servers": {"fs": {"tools": {
            "read": {"effect": "read-only"},
            "write": {"effect": "unclassified", "_description": "Writes a file", "_annotations": {}}
        }}}}"#;
        let rules = Rules::parse(text).unwrap();
        assert!(rules.tool_rule("fs", "read").is_some());
        assert!(rules.tool_rule("fs", "write").is_none());
        let half = r#"{"servers": {"fs": {"tools": {"write": {"effect": "unclassified", "fix": {"a": 1}}}}}}"#;
        let error = Rules::parse(half).unwrap_err();
        assert_eq!(error.path, "servers.fs.tools.write.fix");
    }

    #[test]
    fn every_effect_takes_every_verdict_from_the_file_table() {
        for effect in Effect::ALL {
            for verdict in ["allow", "deny", "hold"] {
                let text = format!(r#"{{"decisions": {{"{effect}": "{verdict}"}}}}"#);
                let rules = Rules::parse(&text).unwrap();
                let (got, source) = rules.verdict("s", "t", effect);
                assert_eq!(got.as_str(), verdict);
                assert_eq!(source, "the rules file's decision table");
            }
        }
    }

    #[test]
    fn tool_decision_beats_server_table_beats_file_table() {
        let rules = Rules::parse(
            r#"{"decisions": {"read-only": "deny"},
                "servers": {"fs": {"decisions": {"read-only": "hold"},
                  "tools": {"a": {"effect": "read-only", "decision": "allow"},
                            "b": {"effect": "read-only"}}}}}"#,
        )
        .unwrap();
        assert_eq!(rules.decide("fs", "a", Effect::ReadOnly), Decision::Allow);
        assert_eq!(
            rules.decide("fs", "b", Effect::ReadOnly),
            Decision::Hold(
                "effect `read-only` needs approval by the decision table of server `fs`".into()
            )
        );
        assert_eq!(
            rules.decide("other", "b", Effect::ReadOnly),
            Decision::Deny(
                "effect `read-only` is denied by the rules file's decision table".into()
            )
        );
    }

    #[test]
    fn unknown_effect_names_its_path() {
        let err =
            Rules::parse(r#"{"servers": {"fs": {"tools": {"write_file": {"effect": "write"}}}}}"#)
                .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"servers.fs.tools.write_file.effect: unknown effect "write""#
        );
    }

    #[test]
    fn invalid_rules_texts_name_the_fault() {
        let cases = [
            ("[]", "(root): expected an object, found an array"),
            ("{", "(root): not valid JSON"),
            (r#"{"server": {}}"#, "server: unknown key"),
            (
                r#"{"decisions": {"read-only": "maybe"}}"#,
                "decisions.read-only: unknown decision \"maybe\"",
            ),
            (
                r#"{"decisions": {"reading": "allow"}}"#,
                "decisions.reading: unknown effect \"reading\"",
            ),
            (
                r#"{"servers": {"fs": {"tools": {"t": {}}}}}"#,
                "servers.fs.tools.t.effect: missing",
            ),
            (
                r#"{"servers": {"fs": {"tools": {"t": {"effect": 3}}}}}"#,
                "servers.fs.tools.t.effect: expected a string, found a number",
            ),
            (
                r#"{"servers": {"fs": {"tools": {"t": {"effect": "read-only", "deny": ["a", 1]}}}}}"#,
                "servers.fs.tools.t.deny[1]: expected a name",
            ),
            (
                r#"{"servers": {"fs": {"tools": {"t": {"effect": "read-only", "deny": ["a"], "fix": {"a": 1}}}}}}"#,
                "servers.fs.tools.t.fix.a: \"a\" is both denied and fixed",
            ),
            (
                r#"{"servers": {"fs": {"tools": {"t": {"effect": "read-only", "allow_hint_mismatch": "yes"}}}}}"#,
                "servers.fs.tools.t.allow_hint_mismatch: expected a boolean",
            ),
            (
                r#"{"servers": {"fs": {"tool": {}}}}"#,
                "servers.fs.tool: unknown key",
            ),
        ];
        for (text, expected) in cases {
            let err = Rules::parse(text).unwrap_err().to_string();
            assert!(
                err.starts_with(expected),
                "{text}: got {err:?}, expected {expected:?}"
            );
        }
    }

    #[test]
    fn keys_starting_with_an_underscore_are_comments() {
        let rules = Rules::parse(
            r#"{"_note": "x", "servers": {"fs": {"_why": 1, "tools": {"t": {"effect": "read-only",
                "_description": "Reads.", "_annotations": {"readOnlyHint": true}}}}}}"#,
        )
        .unwrap();
        assert_eq!(rules.tool_rule("fs", "t").unwrap().effect, Effect::ReadOnly);
    }

    #[test]
    fn a_tool_rule_carries_denied_fixed_description_and_mismatch() {
        let rules = Rules::parse(
            r#"{"servers": {"fs": {"tools": {"edit_file": {"effect": "local-change",
                "deny": ["path2"], "fix": {"dryRun": true}, "description": "Preview an edit.",
                "allow_hint_mismatch": true}}}}}"#,
        )
        .unwrap();
        let rule = rules.tool_rule("fs", "edit_file").unwrap();
        assert_eq!(rule.effect, Effect::LocalChange);
        assert_eq!(rule.deny, ["path2"]);
        assert_eq!(rule.fix, [("dryRun".to_owned(), "true".to_owned())]);
        assert_eq!(rule.description.as_deref(), Some("Preview an edit."));
        assert!(rule.allow_hint_mismatch);
        assert!(rules.tool_rule("fs", "read_file").is_none());
        assert!(rules.tool_rule("other", "edit_file").is_none());
    }
}
