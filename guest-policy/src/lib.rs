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
    Decision as TableDecision, Effect as TableEffect, LABELS_REVIEW, Rules, SessionLabels,
};
#[cfg(feature = "reviews")]
use toolward_result_review::{Block, BlockFinding, Reviewer};

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
#[cfg(feature = "reviews")]
use toolward::policy0_3_0::types::{BlockKind, Span};
use toolward::policy0_3_0::types::{
    Decision, Effect as Effect3, Labels, ResultAction, ReviewAnswer, ReviewSettings, Verdict,
};

/// Rules for `classify`, set by `rules.configure`.
static CLASSIFY_RULES: OnceLock<Rules> = OnceLock::new();
/// Rules for `decide`, set by `policy.configure` (its own settings text: the host may load
/// rules and policy from two components with two texts).
static DECIDE_RULES: OnceLock<Rules> = OnceLock::new();
/// The reviews the rules name, compiled in `policy.configure` (so the snapshot holds them).
#[cfg(feature = "reviews")]
static REVIEWER: OnceLock<Reviewer> = OnceLock::new();

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
        ReviewSettings {
            reviews: rules.results().review_names(),
            levels: rules.levels().into_iter().map(str::to_owned).collect(),
        }
    }

    fn review(call: Call, returned: ToolResult) -> ReviewAnswer {
        let mut labels = Labels {
            untrusted: false,
            confidentiality: String::new(),
            tags: Vec::new(),
        };
        let Some(rules) = DECIDE_RULES.get() else {
            return ReviewAnswer {
                action: ResultAction::Withhold("the policy was not configured".to_owned()),
                labels,
                determined_by: Vec::new(),
            };
        };
        let mut determined_by = Vec::new();
        if let Some(returns) = rules.results().returns(&call.server, &call.tool) {
            labels.untrusted = returns.untrusted;
            labels.confidentiality = returns.confidentiality.clone().unwrap_or_default();
            labels.tags = returns.tags.clone();
            determined_by.push(LABELS_REVIEW.to_owned());
        }
        let action = reviewed(rules, &returned, &mut labels, &mut determined_by);
        ReviewAnswer {
            action,
            labels,
            determined_by,
        }
    }
}

/// What the reviews make of `returned` (`Reviewer::review_result`, the code the Cedar
/// component runs too): its labels raised and the reviews that determined it named.
#[cfg(feature = "reviews")]
fn reviewed(
    rules: &Rules,
    returned: &ToolResult,
    labels: &mut Labels,
    determined_by: &mut Vec<String>,
) -> ResultAction {
    let Some(reviewer) = REVIEWER.get() else {
        return ResultAction::Withhold("the reviews were not configured".to_owned());
    };
    let blocks: Vec<Block<'_>> = returned
        .blocks
        .iter()
        .map(|block| Block {
            text: &block.text,
            json: json_text(block.kind),
            uri: &block.uri,
            mime_type: block.mime_type.as_deref().unwrap_or(""),
        })
        .collect();
    let found = reviewer.review_result(&blocks, &rules.highest_level());
    determined_by.extend(found.determined_by);
    if let Some(reason) = found.withhold {
        return ResultAction::Withhold(reason);
    }
    if let Some(level) = found.confidentiality {
        labels.confidentiality = level;
    }
    if found.findings.is_empty() {
        return ResultAction::Pass;
    }
    ResultAction::Redact(
        found
            .findings
            .into_iter()
            .map(|BlockFinding { block, finding }| Span {
                block: u32::try_from(block).unwrap_or(u32::MAX),
                start: u32::try_from(finding.start).unwrap_or(u32::MAX),
                end: u32::try_from(finding.end).unwrap_or(u32::MAX),
                kind: finding.kind,
            })
            .collect(),
    )
}

/// This build runs no review (rules that name one are refused in `configure`): a result is
/// only labelled.
#[cfg(not(feature = "reviews"))]
fn reviewed(
    _rules: &Rules,
    _returned: &ToolResult,
    _labels: &mut Labels,
    _determined_by: &mut Vec<String>,
) -> ResultAction {
    ResultAction::Pass
}

/// Compiles the reviews the rules name.
#[cfg(feature = "reviews")]
fn configure_reviews(rules: &Rules) -> Result<(), String> {
    let reviewer = Reviewer::named(rules.reviews())?;
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

/// Whether a block's text is JSON (its strings' control characters escaped).
#[cfg(feature = "reviews")]
fn json_text(kind: BlockKind) -> bool {
    matches!(
        kind,
        BlockKind::Structured | BlockKind::ResourceLink | BlockKind::Other
    )
}

export!(Component);
