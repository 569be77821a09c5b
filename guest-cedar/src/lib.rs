//! The built-in Cedar policy component (issue 16): decides calls with the operator's Cedar
//! policies and reviews results, exporting `policy`, `results`, `validation` and `facts` of
//! `toolward:policy@0.3.0` (world `validated-reviewing-policy-component`).
//!
//! Built for `wasm32-unknown-unknown` and linked by `wasm-component-ld`, so it imports
//! nothing; `host/build.rs` builds it and the host embeds it. Its settings text is the
//! operator's `.cedar` file, or a JSON object holding it beside the reviews, the
//! confidentiality levels and each tool's `returns` (`settings.rs`), parsed once in
//! `configure`; the host snapshots the configured instance, so every decision starts from a
//! parsed policy set in a fresh instance.
//!
//! The request each call becomes (with the session's labels as `context.session`), the three
//! outcomes and the JSON → Cedar mapping are specified in `docs/cedar.md`; the schema of the
//! request is `docs/toolward.cedarschema`, compiled into this component. Results are
//! reviewed as the default component reviews them (`toolward-result-review`'s
//! `Reviewer::review_result`), not by Cedar policies.
//!
//! `cedar-policy` builds only for wasm32 (see `Cargo.toml`): on other targets this crate is
//! empty, and its behaviour is tested through the host loading the built component
//! (`host/src/cedar/tests.rs`, `tests/all/cedar.rs`).
#![cfg(target_family = "wasm")]
#![allow(
    unsafe_code,
    reason = "the exports wit-bindgen generates are unsafe extern functions"
)]

mod facts;
mod json;
mod reads;
mod request;
mod review;
mod settings;
mod validate;

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;
use std::sync::OnceLock;

use cedar_policy::{AuthorizationError, Authorizer, Effect as CedarEffect, PolicyId, PolicySet};
use toolward_policy_table::ResultRules;
use toolward_result_review::Reviewer;

wit_bindgen::generate!({
    path: "../wit/v0.3.0",
    world: "validated-reviewing-policy-component",
});

use exports::toolward::policy0_3_0::facts::Guest as FactsGuest;
use exports::toolward::policy0_3_0::policy::{Call, Guest as PolicyGuest, Verdict};
use exports::toolward::policy0_3_0::results::{Guest as ResultsGuest, ToolResult};
use exports::toolward::policy0_3_0::validation::{Guest as ValidationGuest, RegisteredTool};
use toolward::policy0_3_0::types::{Decision, ReviewAnswer, ReviewSettings};

/// The annotation naming a policy (`@id("…")`): its id in reasons and `determined_by`.
const ID_ANNOTATION: &str = "id";
/// The annotation giving a forbid's deny reason (`@reason("…")`).
const REASON_ANNOTATION: &str = "reason";
/// The annotation that makes a permit hold the call for approval (`@hold("reason")`).
const HOLD_ANNOTATION: &str = "hold";

/// The policies, parsed and renamed by `configure`.
static POLICIES: OnceLock<Policies> = OnceLock::new();

struct Policies {
    set: PolicySet,
    /// What each policy does when satisfied, read from its effect and annotations.
    kinds: Kinds,
    /// The arguments and principal attributes each policy reads, by its id.
    reads: Vec<(String, reads::Reads)>,
    /// The Cedar policies' text, for line and column of validation errors.
    source: String,
    /// The reviews, the confidentiality levels and each tool's `returns`.
    results: ResultRules,
    /// The reviews, compiled (so the snapshot holds them).
    reviewer: Reviewer,
}

/// What a satisfied policy does, by its id. Read once in `configure`: Cedar's
/// `Policy::annotation` parses the annotation's name with its full parser (a lexer built per
/// call) every time it is asked, which cost a decision more than its evaluation.
type Kinds = BTreeMap<PolicyId, Kind>;

enum Kind {
    /// A forbid, with its reason (`@reason`, else its id).
    Forbid(String),
    /// A permit with `@hold("reason")`.
    Hold(String),
    /// Any other permit.
    Permit,
}

fn kinds(set: &PolicySet) -> Kinds {
    set.policies()
        .map(|policy| {
            let kind = match (policy.effect(), policy.annotation(HOLD_ANNOTATION)) {
                (CedarEffect::Forbid, _) => Kind::Forbid(
                    policy
                        .annotation(REASON_ANNOTATION)
                        .map_or_else(|| policy.id().to_string(), str::to_owned),
                ),
                (CedarEffect::Permit, Some(reason)) => Kind::Hold(reason.to_owned()),
                (CedarEffect::Permit, None) => Kind::Permit,
            };
            (policy.id().clone(), kind)
        })
        .collect()
}

struct Component;

impl PolicyGuest for Component {
    fn configure(settings: String) -> Result<(), String> {
        let settings::Settings { cedar, results } = settings::Settings::parse(&settings)?;
        let set = parse(&cedar)?;
        let reads: Vec<(String, reads::Reads)> = set
            .policies()
            .map(|p| (p.id().to_string(), reads::Reads::of(p)))
            .collect();
        if let Some((id, _)) = reads.iter().find(|(_, reads)| reads.session_whole) {
            return Err(format!(
                "policy `{id}` uses `context.session` whole: it is the session's labels, a record (`context.session.untrusted`, `.confidentiality`, `.confidentiality_rank`, `.tags`); the client connection's id is `context.session_id`"
            ));
        }
        let reviewer = Reviewer::named(results.reviews())?;
        let policies = Policies {
            kinds: kinds(&set),
            reads,
            set,
            source: cedar,
            results,
            reviewer,
        };
        // One decision before the snapshot, so that what Cedar initialises lazily on first
        // use (its extension functions, among others) is in the snapshot's memory instead
        // of being built again in every fresh instance.
        let _ = decide(&policies, &warm_up_call());
        POLICIES
            .set(policies)
            .map_err(|_| "configure was called twice".to_owned())
    }

    fn decide(call: Call) -> Verdict {
        match POLICIES.get() {
            Some(policies) => decide(policies, &call),
            None => deny(
                "the Cedar component was not configured; the call is denied".to_owned(),
                Vec::new(),
            ),
        }
    }
}

impl ResultsGuest for Component {
    fn reviews() -> ReviewSettings {
        match POLICIES.get() {
            Some(policies) => ReviewSettings {
                reviews: policies.results.review_names(),
                levels: policies
                    .results
                    .levels()
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
            },
            None => ReviewSettings {
                reviews: Vec::new(),
                levels: Vec::new(),
            },
        }
    }

    fn review(call: Call, returned: ToolResult) -> ReviewAnswer {
        match POLICIES.get() {
            Some(policies) => {
                review::review(&policies.results, &policies.reviewer, &call, &returned)
            }
            None => review::withhold("the Cedar component was not configured".to_owned()),
        }
    }
}

impl ValidationGuest for Component {
    fn validate(tools: Vec<RegisteredTool>) -> Vec<String> {
        match POLICIES.get() {
            Some(policies) => validate::validate(&policies.set, &policies.source, &tools),
            None => vec!["the Cedar component was not configured".to_owned()],
        }
    }
}

impl FactsGuest for Component {
    fn read_scopes() -> Vec<String> {
        match POLICIES.get() {
            Some(policies) => facts::read_scopes(&policies.set),
            None => vec![facts::EVERY_SCOPE.to_owned()],
        }
    }
}

export!(Component);

/// The operator's policies, each under its `@id` (else Cedar's `policy0`, `policy1`, … in
/// file order).
fn parse(text: &str) -> Result<PolicySet, String> {
    let parsed = PolicySet::from_str(text).map_err(|errors| {
        let problems: Vec<String> = errors
            .iter()
            .map(|e| validate::diagnostic_at(e, text))
            .collect();
        format!("the Cedar policies do not parse: {}", problems.join("; "))
    })?;
    if parsed.templates().next().is_some() {
        return Err(
            "the Cedar policies hold a template: toolward links none, so write each policy out"
                .to_owned(),
        );
    }
    let mut renamed = PolicySet::new();
    let mut policies: Vec<_> = parsed.policies().collect();
    // Cedar numbers policies in file order (`policy0`, …); keep that order for ids.
    policies.sort_by_key(|p| policy_number(p.id()));
    for policy in policies {
        let name = policy
            .annotation(ID_ANNOTATION)
            .map_or_else(|| policy.id().to_string(), str::to_owned);
        if name.is_empty() || name.chars().any(char::is_control) {
            return Err(format!(
                "policy {} has an `@id` that is empty or holds control characters: give it a name",
                policy.id()
            ));
        }
        // A misspelt annotation of ours would be ignored by Cedar: a `@Hold` permit would
        // allow what its author meant to hold. Refuse it instead.
        for (key, _) in policy.annotations() {
            let folded: String = key
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .map(|c| c.to_ascii_lowercase())
                .collect();
            if let Some(ours) = [ID_ANNOTATION, REASON_ANNOTATION, HOLD_ANNOTATION]
                .into_iter()
                .find(|ours| key != *ours && near_miss(&folded, ours))
            {
                return Err(format!(
                    "policy `{name}` has the annotation `@{key}`, which toolward does not read: did you mean `@{ours}`?"
                ));
            }
        }
        if policy.effect() == CedarEffect::Forbid && policy.annotation(HOLD_ANNOTATION).is_some() {
            return Err(format!(
                "policy `{name}` is a forbid with `@hold`: only a permit can hold a call; drop `@hold` or make it a permit"
            ));
        }
        renamed
            .add(policy.new_id(PolicyId::new(&name)))
            .map_err(|_| format!("two policies have the id `{name}`: give each its own `@id`"))?;
    }
    Ok(renamed)
}

/// Whether an annotation's name (`folded`: ASCII letters and digits, lower case) looks like a
/// misspelling of toolward's `ours`: equal once folded, holding it (`@on_hold`, `@holding`),
/// one of the words an author may mean by a hold (`@approval`, `@ask`), or one edit away
/// (two for `reason`; more would refuse common words: `@role` is two from `hold`): `@hodl`,
/// `@hld`, `@h0ld`, `@holds`, `@resaon`.
fn near_miss(folded: &str, ours: &str) -> bool {
    const HOLD_WORDS: [&str; 6] = ["approval", "approve", "ask", "confirm", "review", "pause"];
    if folded == ours || (ours != ID_ANNOTATION && folded.contains(ours)) {
        return true;
    }
    if ours == HOLD_ANNOTATION && HOLD_WORDS.contains(&folded) {
        return true;
    }
    let most = if ours == REASON_ANNOTATION { 2 } else { 1 };
    edits(folded, ours) <= most
}

/// The optimal-string-alignment distance between `a` and `b`: insertions, deletions,
/// substitutions and swaps of neighbours, each one edit.
fn edits(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// A call that exercises the request mapping (arguments of each kind, a principal
/// attribute, labels, facts).
fn warm_up_call() -> Call {
    use toolward::policy0_3_0::types::{Attribute, Effect, Fact, Labels};
    Call {
        id: "warm-up".to_owned(),
        server: "warm-up".to_owned(),
        tool: "warm-up".to_owned(),
        effect: Effect::ReadOnly,
        arguments: r#"{"a":"b","n":1,"d":1.5,"s":["x"],"o":{"t":true}}"#.to_owned(),
        arguments_sha256: String::new(),
        principal: "warm-up".to_owned(),
        principal_attributes: vec![Attribute {
            name: "groups".to_owned(),
            value: r#"["warm-up"]"#.to_owned(),
        }],
        session: String::new(),
        labels: Labels {
            untrusted: true,
            confidentiality: "private".to_owned(),
            tags: vec!["warm-up".to_owned()],
        },
        time_ms: 0,
        facts: vec![Fact {
            name: "tool.forwarded.minute".to_owned(),
            value: "0".to_owned(),
        }],
    }
}

fn policy_number(id: &PolicyId) -> u64 {
    id.to_string()
        .strip_prefix("policy")
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
}

fn deny(reason: String, determined_by: Vec<String>) -> Verdict {
    Verdict {
        decision: Decision::Deny(reason),
        determined_by,
    }
}

/// Three outcomes from Cedar's two effects (`docs/cedar.md`, "Outcomes").
fn decide(policies: &Policies, call: &Call) -> Verdict {
    let rank = policies.results.rank(&call.labels.confidentiality);
    let request = match request::Request::of(call, rank) {
        Ok(request) => request,
        Err(reason) => return deny(format!("{reason}; the call is denied"), Vec::new()),
    };
    if let Some(verdict) = left_out_and_read(policies, &request) {
        std::mem::forget(request);
        return verdict;
    }
    let response =
        Authorizer::new().is_authorized(&request.request, &policies.set, &request.entities);
    let verdict = verdict(&policies.kinds, call, &request, &response);
    // The instance ends with this decision (a fresh one serves the next), so freeing the
    // request's and response's values one by one would be work for nothing.
    std::mem::forget(response);
    std::mem::forget(request);
    verdict
}

/// A deny when an argument (or a principal attribute) Cedar cannot hold exactly was left
/// out and a policy reads it. Without it a guarded policy (`context.arguments has n &&
/// context.arguments.n > 100`, or a record compared whole) would see the argument as absent
/// and not apply: a forbid would fail open. Stricter than Cedar, as for evaluation errors
/// (`docs/cedar.md`).
fn left_out_and_read(policies: &Policies, request: &request::Request) -> Option<Verdict> {
    for path in &request.left_out {
        let readers: Vec<String> = policies
            .reads
            .iter()
            .filter(|(_, reads)| reads.reads(path))
            .map(|(id, _)| id.clone())
            .collect();
        if let Some(first) = readers.first() {
            return Some(deny(
                format!(
                    "{} cannot be held exactly by Cedar (null, an integer beyond 64 bits, more than four decimals, an exponent, or an array holding one) and policy `{first}` reads it; the call is denied",
                    request::left_out_name(path)
                ),
                readers,
            ));
        }
    }
    None
}

/// The outcome of Cedar's `response` to `request` for `call`.
fn verdict(
    kinds: &Kinds,
    call: &Call,
    request: &request::Request,
    response: &cedar_policy::Response,
) -> Verdict {
    let diagnostics = response.diagnostics();

    let mut forbids = Vec::new();
    let mut holds = Vec::new();
    let mut permits = Vec::new();
    let satisfied: BTreeSet<&PolicyId> = diagnostics.reason().collect();
    for id in satisfied {
        match kinds.get(id) {
            Some(Kind::Forbid(reason)) => forbids.push((id.to_string(), reason.clone())),
            Some(Kind::Hold(reason)) => holds.push((id.to_string(), reason.clone())),
            Some(Kind::Permit) => permits.push(id.to_string()),
            None => {}
        }
    }
    if let Some((_, reason)) = forbids.first() {
        let reason = reason.clone();
        return deny(reason, forbids.into_iter().map(|(id, _)| id).collect());
    }
    // Stricter than Cedar, which skips a policy whose evaluation errs: here it denies.
    let errors: Vec<(String, String)> = diagnostics
        .errors()
        .map(|e| match e {
            AuthorizationError::PolicyEvaluationError(e) => {
                (e.policy_id().to_string(), e.inner().to_string())
            }
        })
        .collect();
    if let Some((first, message)) = errors.first() {
        let ids: BTreeSet<String> = errors.iter().map(|(id, _)| id.clone()).collect();
        let mut reason =
            format!("policy `{first}` could not be evaluated ({message}); the call is denied");
        if !request.unrepresentable.is_empty() {
            reason.push_str(&format!(
                "; arguments Cedar cannot represent exactly were left out of `context.arguments`: {}",
                request
                    .unrepresentable
                    .iter()
                    .map(|p| format!("`{p}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        return deny(reason, ids.into_iter().collect());
    }

    if let Some((_, reason)) = holds.first() {
        return Verdict {
            decision: Decision::Hold(reason.clone()),
            determined_by: holds.into_iter().map(|(id, _)| id).collect(),
        };
    }
    if !permits.is_empty() {
        return Verdict {
            decision: Decision::Allow,
            determined_by: permits,
        };
    }
    deny(
        format!(
            "no Cedar policy permits calling `{}` on server `{}`",
            call.tool, call.server
        ),
        Vec::new(),
    )
}
