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
//!                         "decision": "hold", "limits": { "forwarded_per_minute": 30 } },
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
//!
//! **Limits.** A tool rule and a server may carry `limits`: at most so many calls
//! `forwarded_per_minute`, `forwarded_per_hour`, `held_per_minute`, `held_per_hour`, counted
//! over the tool (`tool.*` facts) or over every tool of the server (`server.*` facts) from the
//! facts the host puts in the call (`docs/facts.md`). A call whose verdict is `allow` or
//! `hold` (so it may be forwarded) is denied when a `forwarded_*` count has reached its limit;
//! a call whose verdict is `hold` is denied when a `held_*` count has reached its limit. A
//! limit whose fact is missing or is not a non-negative integer denies (fail closed). See
//! [`Rules::decide_with_facts`].
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
    /// Limits on the calls of this tool, counted by the host's `tool.*` facts.
    pub limits: Limits,
    /// The labels this tool's results bring to the session (`returns`).
    pub returns: Returns,
    /// Whether a call of this tool may go ahead once untrusted content has reached the
    /// session (`accepts_untrusted`; default true).
    pub accepts_untrusted: bool,
    /// The highest confidentiality of what the session may have seen for a call of this
    /// tool to go ahead (`accepts_confidentiality`; none: any).
    pub accepts_confidentiality: Option<String>,
    /// What a call gets whose session's labels this tool does not accept (`on_labels`,
    /// `hold` or `deny`; default `hold`).
    pub on_labels: Verdict,
}

/// The labels a tool's results bring to the session (a rule's `returns`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Returns {
    /// Its results are untrusted content (a web page, an issue someone else wrote).
    pub untrusted: bool,
    /// Their confidentiality (a level of the rules' `labels.levels`); none: unlabelled.
    pub confidentiality: Option<String>,
    /// Free tags.
    pub tags: Vec<String>,
}

/// The labels of a session as a decision sees them (WIT 0.3.0 `types.labels`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionLabels<'a> {
    /// Untrusted content has reached the session.
    pub untrusted: bool,
    /// The highest confidentiality that reached it; empty: none.
    pub confidentiality: &'a str,
}

impl Returns {
    /// Whether these labels say nothing (no `returns`, or an empty one).
    pub fn is_empty(&self) -> bool {
        *self == Returns::default()
    }
}

/// The reviews the default component can run on results (the rules' `reviews`).
pub const REVIEWS: [&str; 2] = ["secrets", "hidden-characters"];

/// The name a review answer gives a tool's `returns` labels among what determined it, and
/// that [`ResultRules::review_names`] adds when some tool has them (so that the host hands
/// every result to the component, to be labelled).
pub const LABELS_REVIEW: &str = "labels";

/// The confidentiality levels when the rules name none, lowest first.
pub const DEFAULT_LEVELS: [&str; 2] = ["public", "private"];

/// Which calls a [`Limit`] counts (the `{outcome}` part of a fact's name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Counted {
    /// Calls forwarded to the server (allowed, or held and then approved).
    Forwarded,
    /// Calls the policy held for approval.
    Held,
}

impl Counted {
    /// The spelling in fact names and limit keys: `forwarded`, `held`.
    pub fn as_str(self) -> &'static str {
        match self {
            Counted::Forwarded => "forwarded",
            Counted::Held => "held",
        }
    }
}

/// Over how long a [`Limit`] counts (the `{window}` part of a fact's name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Per {
    /// The last minute (sliding, `docs/facts.md`).
    Minute,
    /// The last hour (sliding).
    Hour,
}

impl Per {
    /// The spelling in fact names and limit keys: `minute`, `hour`.
    pub fn as_str(self) -> &'static str {
        match self {
            Per::Minute => "minute",
            Per::Hour => "hour",
        }
    }
}

/// One limit: at most `max` calls that are `counted` per `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Which calls count.
    pub counted: Counted,
    /// The window.
    pub per: Per,
    /// The most calls allowed in the window; a call is denied once the count is `max`.
    pub max: u64,
}

impl Limit {
    /// The rules file's key for this limit (`forwarded_per_minute`, ...).
    pub fn key(&self) -> String {
        format!("{}_per_{}", self.counted.as_str(), self.per.as_str())
    }
}

impl fmt::Display for Limit {
    /// `30 forwarded calls per minute`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let calls = if self.max == 1 { "call" } else { "calls" };
        write!(
            f,
            "{} {} {calls} per {}",
            self.max,
            self.counted.as_str(),
            self.per.as_str()
        )
    }
}

/// The limits of a tool or a server (`limits` in the rules file), in the order of
/// [`LIMIT_KEYS`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits(pub Vec<Limit>);

/// The keys of a `limits` object, with what each counts.
pub const LIMIT_KEYS: [(&str, Counted, Per); 4] = [
    ("forwarded_per_minute", Counted::Forwarded, Per::Minute),
    ("forwarded_per_hour", Counted::Forwarded, Per::Hour),
    ("held_per_minute", Counted::Held, Per::Minute),
    ("held_per_hour", Counted::Held, Per::Hour),
];

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ServerRules {
    tools: BTreeMap<String, ToolRule>,
    decisions: [Option<Verdict>; 4],
    limits: Limits,
}

/// A parsed rules file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    servers: BTreeMap<String, ServerRules>,
    decisions: [Option<Verdict>; 4],
    /// The reviews, the levels and each tool's `returns`.
    results: ResultRules,
}

/// What rules say about tools' results: the reviews run on every result (`reviews`, names
/// from [`REVIEWS`]), the confidentiality levels (`labels.levels`) and the labels each
/// tool's results bring to the session (its `returns`).
///
/// Every [`Rules`] holds one ([`Rules::results`]). A component that decides otherwise (the
/// Cedar component) reads one alone from settings of the rules file's shape that carry
/// only these keys ([`ResultRules::from_value`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResultRules {
    /// The reviews run on every result, in their order.
    reviews: Vec<String>,
    /// The confidentiality levels, lowest first; empty: [`DEFAULT_LEVELS`].
    levels: Vec<String>,
    /// Server, tool: the tool's `returns`, for the tools whose `returns` says something.
    returns: BTreeMap<String, BTreeMap<String, Returns>>,
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

fn limits_of(value: &Value, path: &str) -> Result<Limits, RulesError> {
    let map = object(value, path)?;
    let keys: Vec<&str> = LIMIT_KEYS.iter().map(|(key, _, _)| *key).collect();
    only_keys(map, path, &keys)?;
    let mut limits = Vec::new();
    for (key, counted, per) in LIMIT_KEYS {
        let Some(value) = map.get(key) else { continue };
        let max = value.as_u64().ok_or_else(|| {
            fault(
                &join(path, key),
                format!(
                    "expected a non-negative integer (a count of calls), found {}",
                    match value {
                        Value::Number(n) => format!("{n}"),
                        other => type_name(other).to_owned(),
                    }
                ),
            )
        })?;
        limits.push(Limit { counted, per, max });
    }
    Ok(Limits(limits))
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
            "limits",
            "returns",
            "accepts_untrusted",
            "accepts_confidentiality",
            "on_labels",
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
    let limits = match map.get("limits") {
        Some(value) => limits_of(value, &join(path, "limits"))?,
        None => Limits::default(),
    };
    let returns = match map.get("returns") {
        Some(value) => returns_of(value, &join(path, "returns"))?,
        None => Returns::default(),
    };
    let accepts_untrusted = match map.get("accepts_untrusted") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(fault(
                &join(path, "accepts_untrusted"),
                format!("expected a boolean, found {}", type_name(other)),
            ));
        }
    };
    let accepts_confidentiality = map
        .get("accepts_confidentiality")
        .map(|value| level_of(value, &join(path, "accepts_confidentiality")))
        .transpose()?;
    let on_labels = match map.get("on_labels") {
        None => Verdict::Hold,
        Some(value) => {
            let here = join(path, "on_labels");
            match verdict_of(value, &here)? {
                Verdict::Allow => {
                    return Err(fault(
                        &here,
                        "expected \"hold\" or \"deny\" (to let every call through, leave out `accepts_untrusted` and `accepts_confidentiality`)",
                    ));
                }
                verdict => verdict,
            }
        }
    };
    Ok(ToolRule {
        effect,
        deny,
        fix,
        description,
        allow_hint_mismatch,
        decision,
        limits,
        returns,
        accepts_untrusted,
        accepts_confidentiality,
        on_labels,
    })
}

fn level_of(value: &Value, path: &str) -> Result<String, RulesError> {
    match value {
        Value::String(text) if !text.is_empty() => Ok(text.clone()),
        other => Err(fault(
            path,
            format!(
                "expected a confidentiality level (a non-empty string), found {}",
                type_name(other)
            ),
        )),
    }
}

fn names_of(value: &Value, path: &str) -> Result<Vec<String>, RulesError> {
    let items = value.as_array().ok_or_else(|| {
        fault(
            path,
            format!("expected an array of names, found {}", type_name(value)),
        )
    })?;
    let mut names = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let here = format!("{path}[{i}]");
        let name = item
            .as_str()
            .filter(|name| !name.is_empty())
            .ok_or_else(|| {
                fault(
                    &here,
                    format!("expected a non-empty name, found {}", type_name(item)),
                )
            })?;
        if names.iter().any(|known| known == name) {
            return Err(fault(&here, format!("{name:?} is named twice")));
        }
        names.push(name.to_owned());
    }
    Ok(names)
}

fn returns_of(value: &Value, path: &str) -> Result<Returns, RulesError> {
    let map = object(value, path)?;
    only_keys(map, path, &["untrusted", "confidentiality", "tags"])?;
    let untrusted = match map.get("untrusted") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(fault(
                &join(path, "untrusted"),
                format!("expected a boolean, found {}", type_name(other)),
            ));
        }
    };
    let confidentiality = map
        .get("confidentiality")
        .map(|value| level_of(value, &join(path, "confidentiality")))
        .transpose()?;
    let tags = match map.get("tags") {
        Some(value) => names_of(value, &join(path, "tags"))?,
        None => Vec::new(),
    };
    Ok(Returns {
        untrusted,
        confidentiality,
        tags,
    })
}

impl ResultRules {
    /// Reads what rules say about results from settings of the rules file's shape (a JSON
    /// object) that carry only `reviews`, `labels` and, under `servers.SERVER.tools.TOOL`,
    /// `returns`; `other_keys` are keys of the root the caller reads itself (the Cedar
    /// component's `cedar`). Keys starting with `_` are comments, as in the rules file.
    ///
    /// # Errors
    /// A [`RulesError`] naming the first fault's path, as [`Rules::parse`] names them: an
    /// unknown key or review, a value of the wrong type, a level that `labels.levels` does
    /// not name.
    pub fn from_value(root: &Value, other_keys: &[&str]) -> Result<ResultRules, RulesError> {
        let map = object(root, "")?;
        let mut allowed = vec!["$schema", "reviews", "labels", "servers"];
        allowed.extend_from_slice(other_keys);
        only_keys(map, "", &allowed)?;
        let mut results = ResultRules::reviews_and_levels(map)?;
        let Some(servers) = map.get("servers") else {
            return Ok(results);
        };
        for (server, rules) in object(servers, "servers")? {
            let path = join("servers", server);
            let server_map = object(rules, &path)?;
            only_keys(server_map, &path, &["tools"])?;
            let Some(tools) = server_map.get("tools") else {
                continue;
            };
            let tools_path = join(&path, "tools");
            for (tool, rule) in object(tools, &tools_path)? {
                let here = join(&tools_path, tool);
                let rule = object(rule, &here)?;
                only_keys(rule, &here, &["returns"])?;
                if let Some(value) = rule.get("returns") {
                    let returns = returns_of(value, &join(&here, "returns"))?;
                    results.add_returns(server, tool, &returns, &here)?;
                }
            }
        }
        Ok(results)
    }

    /// `reviews` and `labels.levels` of the root object `map`, without any `returns`.
    fn reviews_and_levels(map: &Map<String, Value>) -> Result<ResultRules, RulesError> {
        let reviews = match map.get("reviews") {
            Some(value) => names_of(value, "reviews")?,
            None => Vec::new(),
        };
        if let Some((i, name)) = reviews
            .iter()
            .enumerate()
            .find(|(_, name)| !REVIEWS.contains(&name.as_str()))
        {
            return Err(fault(
                &format!("reviews[{i}]"),
                format!(
                    "unknown review {name:?} (expected one of {})",
                    REVIEWS.join(", ")
                ),
            ));
        }
        let mut levels = Vec::new();
        if let Some(value) = map.get("labels") {
            let labels = object(value, "labels")?;
            only_keys(labels, "labels", &["levels"])?;
            if let Some(value) = labels.get("levels") {
                levels = names_of(value, "labels.levels")?;
                if levels.is_empty() {
                    return Err(fault("labels.levels", "expected at least one level"));
                }
            }
        }
        Ok(ResultRules {
            reviews,
            levels,
            returns: BTreeMap::new(),
        })
    }

    /// Keeps `returns` as what `tool` of `server` returns (`path`: the tool's rule), when it
    /// says something; its level must be one of the levels.
    fn add_returns(
        &mut self,
        server: &str,
        tool: &str,
        returns: &Returns,
        path: &str,
    ) -> Result<(), RulesError> {
        self.check_level(
            returns.confidentiality.as_deref(),
            &join(path, "returns.confidentiality"),
        )?;
        if !returns.is_empty() {
            self.returns
                .entry(server.to_owned())
                .or_default()
                .insert(tool.to_owned(), returns.clone());
        }
        Ok(())
    }

    /// A level named at `path` must be one of the levels: a typo would otherwise rank above
    /// every level, and hold every call.
    fn check_level(&self, level: Option<&str>, path: &str) -> Result<(), RulesError> {
        match level {
            Some(level) if self.rank(level) > self.levels().len() => Err(fault(
                path,
                format!(
                    "unknown confidentiality level {level:?} (the levels are {}; name more in `labels.levels`)",
                    self.levels().join(", ")
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The reviews run on every result (`reviews`), in their order.
    pub fn reviews(&self) -> &[String] {
        &self.reviews
    }

    /// What a component answers to `results.reviews`: [`ResultRules::reviews`], then
    /// [`LABELS_REVIEW`] when some tool's `returns` says something. Empty: no result need
    /// reach the component.
    pub fn review_names(&self) -> Vec<String> {
        let mut names = self.reviews.clone();
        if !self.returns.is_empty() {
            names.push(LABELS_REVIEW.to_owned());
        }
        names
    }

    /// The confidentiality levels, lowest first: `labels.levels`, or [`DEFAULT_LEVELS`].
    pub fn levels(&self) -> Vec<&str> {
        if self.levels.is_empty() {
            DEFAULT_LEVELS.to_vec()
        } else {
            self.levels.iter().map(String::as_str).collect()
        }
    }

    /// The rank of `level`: 0 for none (empty), its place among [`ResultRules::levels`]
    /// from 1, above every level for an unknown one.
    pub fn rank(&self, level: &str) -> usize {
        if level.is_empty() {
            return 0;
        }
        let levels = self.levels();
        levels
            .iter()
            .position(|known| *known == level)
            .map_or(levels.len() + 1, |at| at + 1)
    }

    /// The highest level ([`ResultRules::levels`]' last): what a found secret makes a
    /// result.
    pub fn highest_level(&self) -> String {
        self.levels()
            .last()
            .map_or_else(String::new, |level| (*level).to_owned())
    }

    /// What results of `tool` of `server` return, when its `returns` says something.
    pub fn returns(&self, server: &str, tool: &str) -> Option<&Returns> {
        self.returns.get(server)?.get(tool)
    }
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
        only_keys(
            map,
            "",
            &["$schema", "decisions", "servers", "reviews", "labels"],
        )?;
        let decisions = match map.get("decisions") {
            Some(value) => table(value, "decisions")?,
            None => [None; 4],
        };
        let mut results = ResultRules::reviews_and_levels(map)?;
        let mut servers = BTreeMap::new();
        if let Some(value) = map.get("servers") {
            for (server, rules) in object(value, "servers")? {
                let path = join("servers", server);
                let server_map = object(rules, &path)?;
                only_keys(server_map, &path, &["tools", "decisions", "limits"])?;
                let decisions = match server_map.get("decisions") {
                    Some(value) => table(value, &join(&path, "decisions"))?,
                    None => [None; 4],
                };
                let limits = match server_map.get("limits") {
                    Some(value) => limits_of(value, &join(&path, "limits"))?,
                    None => Limits::default(),
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
                servers.insert(
                    server.clone(),
                    ServerRules {
                        tools,
                        decisions,
                        limits,
                    },
                );
            }
        }
        for (server, server_rules) in &servers {
            for (tool, rule) in &server_rules.tools {
                let here = format!("servers.{server}.tools.{tool}");
                results.add_returns(server, tool, &rule.returns, &here)?;
                results.check_level(
                    rule.accepts_confidentiality.as_deref(),
                    &join(&here, "accepts_confidentiality"),
                )?;
            }
        }
        Ok(Rules {
            servers,
            decisions,
            results,
        })
    }

    /// What these rules say about results: the reviews, the levels, each tool's `returns`.
    pub fn results(&self) -> &ResultRules {
        &self.results
    }

    /// The reviews these rules run on every result (`reviews`), in their order.
    pub fn reviews(&self) -> &[String] {
        self.results.reviews()
    }

    /// The confidentiality levels, lowest first: `labels.levels`, or [`DEFAULT_LEVELS`].
    pub fn levels(&self) -> Vec<&str> {
        self.results.levels()
    }

    /// The rank of `level`: 0 for none (empty), its place among [`Rules::levels`] from 1,
    /// above every level for an unknown one.
    pub fn rank(&self, level: &str) -> usize {
        self.results.rank(level)
    }

    /// The highest level ([`Rules::levels`]' last): what a found secret makes a result.
    pub fn highest_level(&self) -> String {
        self.results.highest_level()
    }

    /// Why `tool` of `server` does not accept a session with `labels`, with the verdict it
    /// gets then (`on_labels`); `None` when it accepts them (or has no rule).
    pub fn labels_refusal(
        &self,
        server: &str,
        tool: &str,
        labels: SessionLabels<'_>,
    ) -> Option<(Verdict, String)> {
        let rule = self.tool_rule(server, tool)?;
        if labels.untrusted && !rule.accepts_untrusted {
            return Some((
                rule.on_labels,
                format!(
                    "tool `{tool}` of server `{server}` does not accept untrusted content, and this session has seen some"
                ),
            ));
        }
        let highest = rule.accepts_confidentiality.as_deref()?;
        if self.rank(labels.confidentiality) > self.rank(highest) {
            return Some((
                rule.on_labels,
                format!(
                    "tool `{tool}` of server `{server}` accepts data up to `{highest}`, and this session has seen `{}` data",
                    labels.confidentiality
                ),
            ));
        }
        None
    }

    /// [`Rules::decide_with_facts`], then the session's labels: a call whose tool does not
    /// accept them ([`Rules::labels_refusal`]) is held, or denied when its rule says
    /// `on_labels: deny`. A deny of the tables or a limit comes first.
    pub fn decide_with_labels(
        &self,
        server: &str,
        tool: &str,
        effect: Effect,
        facts: &[(&str, &str)],
        labels: SessionLabels<'_>,
    ) -> Decision {
        let decision = self.decide_with_facts(server, tool, effect, facts);
        if matches!(decision, Decision::Deny(_)) {
            return decision;
        }
        match (self.labels_refusal(server, tool, labels), decision) {
            (None, decision) => decision,
            (Some((Verdict::Deny, why)), _) => Decision::Deny(why),
            (Some((_, why)), Decision::Hold(reason)) => Decision::Hold(format!("{reason}; {why}")),
            (Some((_, why)), _) => Decision::Hold(why),
        }
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

    /// The fact scopes these rules read, in the order facts are listed: `tool` when a tool
    /// rule carries `limits` (checked against the `tool.*` facts), `server` when a server
    /// does (`server.*`); empty when no rule has limits, so the host need count no call for
    /// them (`docs/facts.md`). [`Rules::decide_with_facts`] reads no other fact.
    pub fn fact_scopes(&self) -> Vec<&'static str> {
        let tool = self
            .servers
            .values()
            .any(|server| server.tools.values().any(|rule| !rule.limits.0.is_empty()));
        let server = self
            .servers
            .values()
            .any(|server| !server.limits.0.is_empty());
        [(tool, "tool"), (server, "server")]
            .into_iter()
            .filter_map(|(reads, scope)| reads.then_some(scope))
            .collect()
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

    /// The decision on a call without facts: [`Rules::decide_with_facts`] with none, so a
    /// call that a limit applies to is denied (its count cannot be checked).
    pub fn decide(&self, server: &str, tool: &str, effect: Effect) -> Decision {
        self.decide_with_facts(server, tool, effect, &[])
    }

    /// The decision on a call, with a reason that names the effect and the source of the
    /// verdict, or the limit that denied it and the count.
    ///
    /// `facts` are the call's facts (WIT `call.facts`, `docs/facts.md`): a dotted name such
    /// as `tool.forwarded.minute` and its value as JSON text. The verdict of the tables
    /// comes first: `deny` denies whatever the counts. Then, for an `allow` or `hold`
    /// verdict, the tool's limits (against the `tool.*` facts) and then the server's (against
    /// the `server.*` facts), each in the order of [`LIMIT_KEYS`]: a `forwarded_*` limit
    /// denies once its count has reached the limit; a `held_*` limit does so only for a call
    /// that would be held. A limit whose fact is absent, or whose value is not a
    /// non-negative integer in JSON's spelling, denies (fail closed).
    pub fn decide_with_facts(
        &self,
        server: &str,
        tool: &str,
        effect: Effect,
        facts: &[(&str, &str)],
    ) -> Decision {
        let (verdict, source) = self.verdict(server, tool, effect);
        if verdict == Verdict::Deny {
            return Decision::Deny(format!("effect `{effect}` is denied by {source}"));
        }
        let server_rules = self.servers.get(server);
        let tool_limits = server_rules.and_then(|s| s.tools.get(tool)).map(|rule| {
            (
                &rule.limits,
                "tool",
                format!("tool `{tool}` of server `{server}`"),
            )
        });
        let server_limits =
            server_rules.map(|s| (&s.limits, "server", format!("server `{server}`")));
        for (limits, scope, what) in tool_limits.into_iter().chain(server_limits) {
            for limit in &limits.0 {
                if limit.counted == Counted::Held && verdict != Verdict::Hold {
                    continue;
                }
                let name = format!("{scope}.{}.{}", limit.counted.as_str(), limit.per.as_str());
                let count = facts
                    .iter()
                    .find(|(fact, _)| *fact == name)
                    .map(|(_, value)| parse_count(value));
                match count {
                    Some(Some(count)) if count < limit.max => {}
                    Some(Some(count)) => {
                        return Decision::Deny(format!(
                            "limit `{limit}` on {what} reached: {count} in the last {}",
                            limit.per.as_str()
                        ));
                    }
                    Some(None) => {
                        return Decision::Deny(format!(
                            "limit `{limit}` on {what} cannot be checked: fact `{name}` is not a non-negative integer"
                        ));
                    }
                    None => {
                        return Decision::Deny(format!(
                            "limit `{limit}` on {what} cannot be checked: the host gave no fact `{name}`"
                        ));
                    }
                }
            }
        }
        match verdict {
            Verdict::Allow => Decision::Allow,
            Verdict::Hold => {
                Decision::Hold(format!("effect `{effect}` needs approval by {source}"))
            }
            Verdict::Deny => Decision::Deny(format!("effect `{effect}` is denied by {source}")),
        }
    }
}

/// A count as a fact's JSON text spells it: a non-negative integer in JSON's grammar (no
/// sign, no leading zero, no fraction or exponent) that fits `u64`.
pub fn parse_count(text: &str) -> Option<u64> {
    let digits = text.as_bytes();
    let canonical = !digits.is_empty()
        && digits.iter().all(u8::is_ascii_digit)
        && (digits.len() == 1 || digits.first() != Some(&b'0'));
    if canonical { text.parse().ok() } else { None }
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

    const LIMITED: &str = r#"{"servers": {"fs": {
        "limits": {"forwarded_per_hour": 100},
        "tools": {
          "write_file": {"effect": "local-change", "decision": "allow",
                         "limits": {"forwarded_per_minute": 30}},
          "move_file": {"effect": "local-change", "limits": {"held_per_minute": 2}},
          "delete": {"effect": "destructive", "limits": {"forwarded_per_minute": 1}}}}}}"#;

    fn facts(tool_minute: &str, server_hour: &str) -> Vec<(String, String)> {
        vec![
            ("tool.forwarded.minute".into(), tool_minute.into()),
            ("tool.held.minute".into(), "0".into()),
            ("server.forwarded.hour".into(), server_hour.into()),
        ]
    }

    fn decide(rules: &Rules, tool: &str, effect: Effect, facts: &[(String, String)]) -> Decision {
        let pairs: Vec<(&str, &str)> = facts
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        rules.decide_with_facts("fs", tool, effect, &pairs)
    }

    #[test]
    fn a_tool_limit_denies_once_its_count_is_reached_naming_the_limit_and_the_count() {
        let rules = Rules::parse(LIMITED).unwrap();
        assert_eq!(
            decide(&rules, "write_file", Effect::LocalChange, &facts("29", "5")),
            Decision::Allow
        );
        assert_eq!(
            decide(&rules, "write_file", Effect::LocalChange, &facts("30", "5")),
            Decision::Deny(
                "limit `30 forwarded calls per minute` on tool `write_file` of server `fs` reached: 30 in the last minute"
                    .into()
            )
        );
    }

    #[test]
    fn a_server_limit_counts_every_tool_of_the_server() {
        let rules = Rules::parse(LIMITED).unwrap();
        assert_eq!(
            decide(
                &rules,
                "write_file",
                Effect::LocalChange,
                &facts("0", "100")
            ),
            Decision::Deny(
                "limit `100 forwarded calls per hour` on server `fs` reached: 100 in the last hour"
                    .into()
            )
        );
    }

    #[test]
    fn a_held_limit_applies_only_to_calls_that_would_be_held() {
        let rules = Rules::parse(LIMITED).unwrap();
        let mut held = facts("0", "0");
        held[1].1 = "2".into();
        assert!(matches!(
            decide(&rules, "move_file", Effect::LocalChange, &held),
            Decision::Deny(reason) if reason.contains("`2 held calls per minute`")
        ));
        // The same count does not deny a call the table allows.
        let allowing = Rules::parse(&LIMITED.replace(
            r#""move_file": {"effect": "local-change","#,
            r#""move_file": {"effect": "local-change", "decision": "allow","#,
        ))
        .unwrap();
        assert_eq!(
            decide(&allowing, "move_file", Effect::LocalChange, &held),
            Decision::Allow
        );
    }

    #[test]
    fn a_denied_effect_is_denied_by_the_table_whatever_the_counts() {
        let rules = Rules::parse(LIMITED).unwrap();
        assert_eq!(
            decide(&rules, "delete", Effect::Destructive, &facts("0", "0")),
            Decision::Deny("effect `destructive` is denied by the default decision table".into())
        );
    }

    #[test]
    fn a_limit_without_its_fact_or_with_a_malformed_one_denies() {
        let rules = Rules::parse(LIMITED).unwrap();
        assert!(matches!(
            rules.decide("fs", "write_file", Effect::LocalChange),
            Decision::Deny(reason) if reason.contains("the host gave no fact `tool.forwarded.minute`")
        ));
        for bad in ["-1", "1.0", "01", "+1", "\"1\"", "", "18446744073709551616"] {
            assert!(
                matches!(
                    decide(&rules, "write_file", Effect::LocalChange, &facts(bad, "0")),
                    Decision::Deny(reason) if reason.contains("is not a non-negative integer")
                ),
                "{bad}"
            );
        }
        // Tools and servers without limits need no facts.
        let plain =
            Rules::parse(r#"{"servers": {"fs": {"tools": {"t": {"effect": "read-only"}}}}}"#)
                .unwrap();
        assert_eq!(plain.decide("fs", "t", Effect::ReadOnly), Decision::Allow);
    }

    #[test]
    fn rules_read_the_facts_of_exactly_the_scopes_their_limits_name() {
        let scopes = |text: &str| Rules::parse(text).unwrap().fact_scopes();
        assert!(
            scopes(r#"{"servers": {"fs": {"tools": {"t": {"effect": "read-only"}}}}}"#).is_empty()
        );
        assert!(scopes(r#"{"servers": {"fs": {"limits": {}, "tools": {"t": {"effect": "read-only", "limits": {}}}}}}"#).is_empty());
        assert_eq!(
            scopes(
                r#"{"servers": {"fs": {"tools": {"t": {"effect": "read-only", "limits": {"held_per_hour": 2}}}}}}"#
            ),
            ["tool"]
        );
        assert_eq!(
            scopes(r#"{"servers": {"fs": {"limits": {"forwarded_per_minute": 0}}}}"#),
            ["server"]
        );
        assert_eq!(
            scopes(
                r#"{"servers": {"a": {"limits": {"forwarded_per_hour": 9}}, "b": {"tools": {"t": {"effect": "read-only", "limits": {"forwarded_per_minute": 1}}}}}}"#
            ),
            ["tool", "server"]
        );
    }

    #[test]
    fn limits_take_only_known_keys_and_counts() {
        let cases = [
            (
                r#"{"servers": {"fs": {"limits": {"forwarded_per_day": 1}}}}"#,
                "servers.fs.limits.forwarded_per_day: unknown key",
            ),
            (
                r#"{"servers": {"fs": {"tools": {"t": {"effect": "read-only", "limits": {"held_per_hour": -1}}}}}}"#,
                "servers.fs.tools.t.limits.held_per_hour: expected a non-negative integer (a count of calls), found -1",
            ),
            (
                r#"{"servers": {"fs": {"tools": {"t": {"effect": "read-only", "limits": {"held_per_hour": 1.5}}}}}}"#,
                "servers.fs.tools.t.limits.held_per_hour: expected a non-negative integer",
            ),
            (
                r#"{"servers": {"fs": {"limits": []}}}"#,
                "servers.fs.limits: expected an object",
            ),
        ];
        for (text, expected) in cases {
            let err = Rules::parse(text).unwrap_err().to_string();
            assert!(err.starts_with(expected), "{text}: got {err:?}");
        }
        let rules = Rules::parse(LIMITED).unwrap();
        let limit = rules.tool_rule("fs", "write_file").unwrap().limits.0[0];
        assert_eq!(limit.to_string(), "30 forwarded calls per minute");
        assert_eq!(limit.key(), "forwarded_per_minute");
    }

    #[test]
    fn result_rules_read_alone_take_reviews_levels_and_returns_and_nothing_else() {
        let root: Value = serde_json::from_str(
            r#"{"cedar": "permit(principal, action, resource);",
                "reviews": ["secrets"],
                "labels": {"levels": ["public", "internal", "private"]},
                "servers": {"web": {"tools": {
                    "fetch": {"returns": {"untrusted": true, "confidentiality": "public"}},
                    "plain": {"returns": {}}
                }}},
                "_note": "comments are ignored"}"#,
        )
        .unwrap();
        let results = ResultRules::from_value(&root, &["cedar"]).unwrap();
        assert_eq!(results.reviews(), ["secrets"]);
        assert_eq!(results.levels(), ["public", "internal", "private"]);
        assert_eq!(results.rank(""), 0);
        assert_eq!(results.rank("internal"), 2);
        assert_eq!(results.rank("unheard-of"), 4);
        assert_eq!(results.highest_level(), "private");
        let fetch = results.returns("web", "fetch").unwrap();
        assert!(fetch.untrusted);
        assert_eq!(fetch.confidentiality.as_deref(), Some("public"));
        // A `returns` that says nothing is none.
        assert_eq!(results.returns("web", "plain"), None);
        assert_eq!(results.review_names(), ["secrets", LABELS_REVIEW]);
        // Without `returns`, no `labels` review: no result need reach the component for it.
        let root: Value = serde_json::from_str(r#"{"reviews": ["hidden-characters"]}"#).unwrap();
        let results = ResultRules::from_value(&root, &[]).unwrap();
        assert_eq!(results.review_names(), ["hidden-characters"]);
        assert_eq!(results.levels(), DEFAULT_LEVELS);
    }

    #[test]
    fn result_rules_read_alone_name_their_faults_as_the_rules_file_does() {
        for (text, path, message) in [
            (r#"{"cedar": "x"}"#, "cedar", "unknown key"),
            (
                r#"{"reviews": ["entropy"]}"#,
                "reviews[0]",
                "unknown review \"entropy\"",
            ),
            (
                r#"{"servers": {"s": {"tools": {"t": {"effect": "read-only"}}}}}"#,
                "servers.s.tools.t.effect",
                "unknown key (expected one of returns)",
            ),
            (
                r#"{"servers": {"s": {"decisions": {}}}}"#,
                "servers.s.decisions",
                "unknown key (expected one of tools)",
            ),
            (
                r#"{"servers": {"s": {"tools": {"t": {"returns": {"confidentiality": "secret"}}}}}}"#,
                "servers.s.tools.t.returns.confidentiality",
                "unknown confidentiality level \"secret\"",
            ),
            (
                r#"{"labels": {"levels": []}}"#,
                "labels.levels",
                "expected at least one level",
            ),
        ] {
            let root: Value = serde_json::from_str(text).unwrap();
            let error = ResultRules::from_value(&root, &[]).unwrap_err();
            assert_eq!(error.path, path, "{text}: {error}");
            assert!(error.message.starts_with(message), "{text}: {error}");
        }
    }

    #[test]
    fn a_rules_file_holds_the_same_result_rules() {
        let text = r#"{"reviews": ["secrets"], "labels": {"levels": ["public", "secret"]},
            "servers": {"fs": {"tools": {
                "read": {"effect": "read-only", "returns": {"confidentiality": "secret", "tags": ["fs"]}},
                "write": {"effect": "local-change", "accepts_confidentiality": "public"}
            }}}}"#;
        let rules = Rules::parse(text).unwrap();
        let results = rules.results();
        assert_eq!(results.reviews(), ["secrets"]);
        assert_eq!(results.highest_level(), "secret");
        assert_eq!(rules.highest_level(), "secret");
        assert_eq!(
            results.returns("fs", "read"),
            Some(&Returns {
                untrusted: false,
                confidentiality: Some("secret".to_owned()),
                tags: vec!["fs".to_owned()],
            })
        );
        assert_eq!(results.returns("fs", "write"), None);
        assert_eq!(results.review_names(), ["secrets", LABELS_REVIEW]);
        // Levels are checked in `accepts_confidentiality` too.
        let error = Rules::parse(
            r#"{"servers": {"fs": {"tools": {"w": {"effect": "read-only", "accepts_confidentiality": "secret"}}}}}"#,
        )
        .unwrap_err();
        assert_eq!(error.path, "servers.fs.tools.w.accepts_confidentiality");
    }
}
