//! The default toolward policy component, exporting `rules` of `toolward:policy@0.1.0` and
//! `policy`, `results` and `facts` of `toolward:policy@0.3.0` (world
//! `rules-and-reviewing-policy`): it classifies tools, decides calls from the table, the
//! limits and the session's labels, and reviews results with the reviews the rules name
//! (`toolward-result-review`), labelling them as the rules say each tool returns.
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

use toolward_policy_table::{
    Decision as TableDecision, Effect as TableEffect, Rules, SessionLabels,
};
#[cfg(feature = "reviews")]
use toolward_result_review::{Review, Reviewer};

wit_bindgen::generate!({
    path: "../wit/v0.3.0",
    world: "rules-and-reviewing-policy",
    // The world imports `types@0.1.0` (for `rules@0.1.0`) beside `types@0.3.0`.
    generate_all,
});

use exports::toolward::policy0_1_0::rules::{Classification, Guest as RulesGuest, Tool};
use exports::toolward::policy0_3_0::facts::Guest as FactsGuest;
use exports::toolward::policy0_3_0::policy::{Call, Guest as PolicyGuest};
use exports::toolward::policy0_3_0::results::{Guest as ResultsGuest, ToolResult};
use toolward::policy0_1_0::types::{Effect, FixedParameter};
use toolward::policy0_3_0::types::{
    BlockKind, Decision, Effect as Effect3, Labels, ResultAction, ReviewAnswer, ReviewSettings,
    Span, Verdict,
};

/// Rules for `classify`, set by `rules.configure`.
static CLASSIFY_RULES: OnceLock<Rules> = OnceLock::new();
/// Rules for `decide`, set by `policy.configure` (its own settings text: the host may load
/// rules and policy from two components with two texts).
static DECIDE_RULES: OnceLock<Rules> = OnceLock::new();
/// The reviews the rules name, compiled in `policy.configure` (so the snapshot holds them).
#[cfg(feature = "reviews")]
static REVIEWER: OnceLock<Reviewer> = OnceLock::new();

/// The review name under which a tool's `returns` labels are reported.
const LABELS: &str = "labels";

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

fn from_wit(effect: Effect3) -> TableEffect {
    match effect {
        Effect3::ReadOnly => TableEffect::ReadOnly,
        Effect3::LocalChange => TableEffect::LocalChange,
        Effect3::RemoteChange => TableEffect::RemoteChange,
        Effect3::Destructive => TableEffect::Destructive,
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
        configure(&DECIDE_RULES, &settings)?;
        let Some(rules) = DECIDE_RULES.get() else {
            return Err("the rules were not kept".to_owned());
        };
        configure_reviews(rules)
    }

    fn decide(call: Call) -> Verdict {
        // Fail closed: a component that was never configured has no table to allow from.
        let Some(rules) = DECIDE_RULES.get() else {
            return Verdict {
                decision: Decision::Deny("the policy was not configured".to_owned()),
                determined_by: Vec::new(),
            };
        };
        let facts: Vec<(&str, &str)> = call
            .facts
            .iter()
            .map(|fact| (fact.name.as_str(), fact.value.as_str()))
            .collect();
        let labels = SessionLabels {
            untrusted: call.labels.untrusted,
            confidentiality: &call.labels.confidentiality,
        };
        let decision = match rules.decide_with_labels(
            &call.server,
            &call.tool,
            from_wit(call.effect),
            &facts,
            labels,
        ) {
            TableDecision::Allow => Decision::Allow,
            TableDecision::Deny(reason) => Decision::Deny(reason),
            TableDecision::Hold(reason) => Decision::Hold(reason),
        };
        Verdict {
            decision,
            determined_by: Vec::new(),
        }
    }
}

impl FactsGuest for Component {
    fn read_scopes() -> Vec<String> {
        DECIDE_RULES
            .get()
            .map(|rules| rules.fact_scopes().into_iter().map(str::to_owned).collect())
            .unwrap_or_default()
    }
}

impl ResultsGuest for Component {
    fn reviews() -> ReviewSettings {
        let Some(rules) = DECIDE_RULES.get() else {
            return ReviewSettings {
                reviews: Vec::new(),
                levels: Vec::new(),
            };
        };
        let mut reviews: Vec<String> = rules.reviews().to_vec();
        let labels_any = rules.names().any(|(server, tools)| {
            tools.iter().any(|tool| {
                rules
                    .tool_rule(server, tool)
                    .is_some_and(|rule| rule.returns != Default::default())
            })
        });
        if labels_any {
            reviews.push(LABELS.to_owned());
        }
        ReviewSettings {
            reviews,
            levels: rules.levels().into_iter().map(str::to_owned).collect(),
        }
    }

    fn review(call: Call, returned: ToolResult) -> ReviewAnswer {
        let mut labels = Labels {
            untrusted: false,
            confidentiality: String::new(),
            tags: Vec::new(),
        };
        let mut determined_by: Vec<String> = Vec::new();
        let Some(rules) = DECIDE_RULES.get() else {
            return ReviewAnswer {
                action: ResultAction::Withhold("the policy was not configured".to_owned()),
                labels,
                determined_by,
            };
        };
        if let Some(rule) = rules.tool_rule(&call.server, &call.tool) {
            let returns = &rule.returns;
            if *returns != Default::default() {
                labels.untrusted = returns.untrusted;
                labels.confidentiality = returns.confidentiality.clone().unwrap_or_default();
                labels.tags = returns.tags.clone();
                determined_by.push(LABELS.to_owned());
            }
        }
        let mut spans = Vec::new();
        let mut found_secret = false;
        let mut found_hidden = false;
        if !rules.reviews().is_empty() {
            // A block's URI and MIME type cannot be redacted in place: a finding there
            // withholds the result.
            for (index, block) in returned.blocks.iter().enumerate() {
                let fields = [
                    ("URI", block.uri.as_str()),
                    ("MIME type", block.mime_type.as_deref().unwrap_or("")),
                ];
                for (what, value) in fields {
                    if let Some((_, _, kind)) = findings(value).into_iter().next() {
                        determined_by.push(review_of(&kind).to_owned());
                        return ReviewAnswer {
                            action: ResultAction::Withhold(format!(
                                "the {what} of block {index} holds what the reviews redact ({kind})"
                            )),
                            labels,
                            determined_by,
                        };
                    }
                }
            }
            for (index, block) in returned.blocks.iter().enumerate() {
                if block.text.is_empty() {
                    continue;
                }
                let Ok(index) = u32::try_from(index) else {
                    break;
                };
                for (start, end, kind) in findings(&block.text) {
                    found_secret |= kind.contains("secret:");
                    found_hidden |= kind.contains("hidden:");
                    spans.push(span(index, start, end, kind));
                }
                // In JSON text a control character is escaped (`\u001b`): found here.
                if json_text(block.kind) && rules.reviews().iter().any(|r| r == "hidden-characters")
                {
                    for (start, end) in escaped_controls(&block.text) {
                        found_hidden = true;
                        spans.push(span(index, start, end, "hidden:control".to_owned()));
                    }
                }
            }
        }
        if found_secret {
            // A secret makes the result as confidential as the rules' highest level.
            labels.confidentiality = rules.highest_level();
            determined_by.push("secrets".to_owned());
        }
        if found_hidden {
            determined_by.push("hidden-characters".to_owned());
        }
        let action = if spans.is_empty() {
            ResultAction::Pass
        } else {
            ResultAction::Redact(spans)
        };
        ReviewAnswer {
            action,
            labels,
            determined_by,
        }
    }
}

/// Compiles the reviews the rules name.
#[cfg(feature = "reviews")]
fn configure_reviews(rules: &Rules) -> Result<(), String> {
    let reviews = rules
        .reviews()
        .iter()
        .map(|name| name.parse::<Review>())
        .collect::<Result<Vec<_>, _>>()?;
    let reviewer = Reviewer::new(&reviews)?;
    REVIEWER
        .set(reviewer)
        .map_err(|_| "configure was called twice".to_owned())
}

/// This build runs no review: rules that name one are refused (the host loads the
/// reviewing variant for them), never silently unreviewed.
#[cfg(not(feature = "reviews"))]
fn configure_reviews(rules: &Rules) -> Result<(), String> {
    match rules.reviews().first() {
        Some(review) => Err(format!(
            "reviews: `{review}` is named, and this build of the default component runs no review (toolward loads its reviewing variant for rules that name reviews)"
        )),
        None => Ok(()),
    }
}

/// The findings of the configured reviews in `text`: byte ranges and kinds.
#[cfg(feature = "reviews")]
fn findings(text: &str) -> Vec<(usize, usize, String)> {
    REVIEWER.get().map_or_else(Vec::new, |reviewer| {
        reviewer
            .review(text)
            .into_iter()
            .map(|f| (f.start, f.end, f.kind))
            .collect()
    })
}

#[cfg(not(feature = "reviews"))]
fn findings(_text: &str) -> Vec<(usize, usize, String)> {
    Vec::new()
}

/// The review a finding's kind comes from.
fn review_of(kind: &str) -> &'static str {
    if kind.contains("secret:") {
        "secrets"
    } else {
        "hidden-characters"
    }
}

fn span(block: u32, start: usize, end: usize, kind: String) -> Span {
    Span {
        block,
        start: u32::try_from(start).unwrap_or(u32::MAX),
        end: u32::try_from(end).unwrap_or(u32::MAX),
        kind,
    }
}

/// Whether a block's text is JSON (its strings' control characters escaped).
fn json_text(kind: BlockKind) -> bool {
    matches!(
        kind,
        BlockKind::Structured | BlockKind::ResourceLink | BlockKind::Other
    )
}

/// The `\u00XX` escapes of control characters (C0 but tab, line feed and carriage return;
/// DEL; C1) in JSON text, as byte ranges; an escaped backslash before them is skipped.
fn escaped_controls(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        if bytes[i + 1] == b'u' {
            let code = text
                .get(i + 2..i + 6)
                .and_then(|hex| u32::from_str_radix(hex, 16).ok());
            if let Some(code) = code {
                let control = (code < 0x20 && !matches!(code, 0x09 | 0x0a | 0x0d))
                    || (0x7f..=0x9f).contains(&code);
                if control {
                    found.push((i, i + 6));
                }
                i += 6;
                continue;
            }
        }
        i += 2;
    }
    found
}

export!(Component);
