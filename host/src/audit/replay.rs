//! `toolward audit replay`: what another policy would have decided on the calls on record.
//!
//! Every `decision` record (the policy's verdict on one call) is decided again by the other
//! policy with exactly what the gateway gave the first: the same server, tool, effect,
//! canonical arguments and their hash, principal, session and call id; the time the policy
//! saw (`policy_time_ms`, or the record's `time` when the record has none) and the facts it
//! saw (`facts`, or none when the record has none). A decision is a function of these (the
//! guests are pure), so a replay under the same policy reproduces every decision on record.
//!
//! Records without `arguments` (`audit.record_arguments` off) are counted and skipped: the
//! arguments are never guessed. The chain is checked as it is read; records past a break
//! are not replayed.
//!
//! When the other policy reviews results (`results@0.3.0`), every `result-decision` record
//! that holds its result (`audit.record_results`) is reviewed again, with the call as its
//! decision record gave it (the labels the session had then included); the action on
//! record (`pass`, `redact`, `withhold`, `hold`) is compared with the replayed one. A
//! result not on record, or whose call's decision record was skipped, is counted and
//! skipped.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::{AuditDecision, AuditError, AuditKind, AuditRecord};
use crate::component::{CallView, Decision, Effect, Policy, ResultAction, ResultView};

/// One call whose decision would change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Changed {
    /// The record's `seq`.
    pub seq: u64,
    /// The call id.
    pub call_id: String,
    /// When the call was decided, ms since the Unix epoch.
    pub time: u64,
    /// `server/tool` (the tool's name on its server).
    pub tool: String,
    /// The principal.
    pub principal: String,
    /// The decision on record.
    pub recorded: AuditDecision,
    /// The other policy's decision.
    pub replayed: AuditDecision,
    /// The other policy's reason (none for allow).
    pub reason: Option<String>,
}

/// One result whose review would change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChangedResult {
    /// The `result-decision` record's `seq`.
    pub seq: u64,
    /// The call id.
    pub call_id: String,
    /// `server/tool`.
    pub tool: String,
    /// The action on record.
    pub recorded: String,
    /// The other policy's action.
    pub replayed: String,
    /// The other policy's reason (a withhold's or hold's), or the kinds it would redact.
    pub reason: Option<String>,
}

/// What a replay found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplayReport {
    /// `decision` records read (intact chain only).
    pub decisions: u64,
    /// Decided again.
    pub replayed: u64,
    /// Skipped: recorded without arguments.
    pub without_arguments: u64,
    /// Skipped: the record lacks the server, tool, effect or principal, or names an effect
    /// this version does not know.
    pub incomplete: u64,
    /// Replayed with the record's `time` because it has no `policy_time_ms`.
    pub without_policy_time: u64,
    /// Replayed with no facts because the record has no `facts`.
    pub without_facts: u64,
    /// The calls whose decision would change, in log order.
    pub changed: Vec<Changed>,
    /// Replayed calls by `server/tool`, then by `recorded -> replayed` decision.
    pub by_tool: BTreeMap<String, BTreeMap<String, u64>>,
    /// Where the chain breaks, if it does.
    pub first_break: Option<String>,
    /// `result-decision` records read.
    pub results: u64,
    /// Reviewed again.
    pub results_replayed: u64,
    /// Skipped: recorded without the result (`audit.record_results` off).
    pub results_without_result: u64,
    /// Skipped: the call's decision record was skipped or not found.
    pub results_without_call: u64,
    /// The results whose review would change, in log order.
    pub changed_results: Vec<ChangedResult>,
}

fn word(d: AuditDecision) -> &'static str {
    match d {
        AuditDecision::Allow => "allow",
        AuditDecision::Deny => "deny",
        AuditDecision::Hold => "hold",
    }
}

/// Re-decides every `decision` record of the log at `path` under `policy`.
///
/// # Errors
///
/// [`AuditError::Io`] when the log cannot be read; a broken chain is
/// [`ReplayReport::first_break`].
pub fn replay(path: &Path, policy: &Policy) -> Result<ReplayReport, AuditError> {
    let mut report = ReplayReport::default();
    let reviews = !policy.reviews().reviews.is_empty();
    // The calls whose result may follow, by call id (only when the policy reviews).
    let mut calls: HashMap<String, CallView> = HashMap::new();
    let verify = super::read_chain(path, |record, line| match record.event.kind {
        AuditKind::Decision => {
            report.decisions += 1;
            let raw: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
            if let Some(view) = replay_one(record, &raw, policy, &mut report)
                && reviews
                && record.event.decision != Some(AuditDecision::Deny)
            {
                calls.insert(view.id.clone(), view);
            }
        }
        AuditKind::ResultDecision if reviews => {
            report.results += 1;
            let call = record
                .event
                .call_id
                .as_ref()
                .and_then(|id| calls.remove(id));
            review_one(record, call, policy, &mut report);
        }
        _ => {}
    })?;
    report.first_break = verify.first_break.map(|b| b.to_string());
    Ok(report)
}

/// Decides one `decision` record again; returns the call as the policy saw it.
fn replay_one(
    record: &AuditRecord,
    raw: &Value,
    policy: &Policy,
    report: &mut ReplayReport,
) -> Option<CallView> {
    let e = &record.event;
    let Some(arguments) = &e.arguments else {
        report.without_arguments += 1;
        return None;
    };
    let (Some(server), Some(tool), Some(effect), Some(principal), Some(recorded)) = (
        &e.server,
        &e.upstream_tool,
        e.effect.as_deref().and_then(Effect::parse),
        &e.principal,
        e.decision,
    ) else {
        report.incomplete += 1;
        return None;
    };
    let time_ms = match raw.get("policy_time_ms").and_then(Value::as_u64) {
        Some(ms) => ms,
        None => {
            report.without_policy_time += 1;
            record.time
        }
    };
    let facts = match raw.get("facts").and_then(Value::as_object) {
        Some(facts) => facts
            .iter()
            .map(|(name, value)| (name.clone(), value.to_string()))
            .collect(),
        None => {
            report.without_facts += 1;
            Vec::new()
        }
    };
    let view = CallView {
        id: e.call_id.clone().unwrap_or_default(),
        server: server.clone(),
        tool: tool.clone(),
        effect,
        arguments: arguments.clone(),
        arguments_sha256: e
            .arguments_sha256
            .clone()
            .unwrap_or_else(|| crate::canonical::sha256_hex(arguments.as_bytes())),
        principal: principal.clone(),
        session: e.session.clone().unwrap_or_default(),
        principal_attributes: Vec::new(),
        labels: e.labels.clone().unwrap_or_default(),
        time_ms,
        facts,
    };
    let (replayed, reason) = match policy.decide(&view) {
        Decision::Allow => (AuditDecision::Allow, None),
        Decision::Deny(reason) => (AuditDecision::Deny, Some(reason)),
        Decision::Hold(reason) => (AuditDecision::Hold, Some(reason)),
    };
    report.replayed += 1;
    let name = format!("{server}/{tool}");
    *report
        .by_tool
        .entry(name.clone())
        .or_default()
        .entry(format!("{} -> {}", word(recorded), word(replayed)))
        .or_default() += 1;
    if replayed != recorded {
        report.changed.push(Changed {
            seq: record.seq,
            call_id: e.call_id.clone().unwrap_or_default(),
            time: record.time,
            tool: name,
            principal: principal.clone(),
            recorded,
            replayed,
            reason,
        });
    }
    Some(view)
}

/// The name of a review's action, as `result-decision` records spell it.
fn action_word(action: &ResultAction) -> &'static str {
    match action {
        ResultAction::Pass => "pass",
        ResultAction::Redact(_) => "redact",
        ResultAction::Withhold(_) => "withhold",
        ResultAction::Hold(_) => "hold",
    }
}

/// Reviews one `result-decision` record's result again, as `call` (its decision record's
/// call) returned it.
fn review_one(record: &AuditRecord, call: Option<CallView>, policy: &Policy, report: &mut ReplayReport) {
    let e = &record.event;
    let Some(result) = e.result.as_deref() else {
        report.results_without_result += 1;
        return;
    };
    let Some(call) = call else {
        report.results_without_call += 1;
        return;
    };
    let parsed: Value = serde_json::from_str(result).unwrap_or(Value::Null);
    let content = parsed
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let is_error = parsed.get("isError") == Some(&Value::Bool(true));
    let view = ResultView::of(
        &content,
        parsed.get("structuredContent"),
        is_error,
        e.result_bytes.unwrap_or(0),
    );
    let answer = policy.review(&call, &view);
    report.results_replayed += 1;
    let replayed = action_word(&answer.action);
    let recorded = e.result_action.clone().unwrap_or_default();
    if replayed != recorded {
        let reason = match answer.action {
            ResultAction::Withhold(reason) | ResultAction::Hold(reason) => Some(reason),
            ResultAction::Redact(spans) => {
                let mut kinds: Vec<String> = spans.into_iter().map(|span| span.kind).collect();
                kinds.sort();
                kinds.dedup();
                Some(format!("would redact {}", kinds.join(", ")))
            }
            ResultAction::Pass => None,
        };
        report.changed_results.push(ChangedResult {
            seq: record.seq,
            call_id: e.call_id.clone().unwrap_or_default(),
            tool: format!("{}/{}", call.server, call.tool),
            recorded,
            replayed: replayed.to_owned(),
            reason,
        });
    }
}

impl ReplayReport {
    /// The report for people: the changed calls, the counts by tool and decision, what was
    /// skipped and what was replayed without the time or facts it had.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::new();
        let visible = crate::text::escape;
        if self.changed.is_empty() {
            let _ = writeln!(
                out,
                "no decision would change ({} calls replayed)",
                self.replayed
            );
        } else {
            let _ = writeln!(
                out,
                "{} of {} calls would be decided differently:",
                self.changed.len(),
                self.replayed
            );
            for c in &self.changed {
                let _ = writeln!(
                    out,
                    "  {}  call {}  {}  by {}: {} -> {}{}",
                    super::read::utc(c.time),
                    visible(&c.call_id),
                    visible(&c.tool),
                    visible(&c.principal),
                    word(c.recorded),
                    word(c.replayed),
                    c.reason
                        .as_ref()
                        .map(|r| format!(" ({})", visible(r)))
                        .unwrap_or_default()
                );
            }
        }
        if !self.by_tool.is_empty() {
            let _ = writeln!(out, "by tool (recorded -> replayed):");
            for (tool, counts) in &self.by_tool {
                let counts: Vec<String> = counts.iter().map(|(k, n)| format!("{k}: {n}")).collect();
                let _ = writeln!(out, "  {:32} {}", visible(tool), counts.join(", "));
            }
        }
        if self.without_arguments > 0 {
            let _ = writeln!(
                out,
                "skipped {} calls recorded without arguments (turn on `audit.record_arguments` to replay future calls)",
                self.without_arguments
            );
        }
        if self.incomplete > 0 {
            let _ = writeln!(
                out,
                "skipped {} decision records without server, tool, effect or principal",
                self.incomplete
            );
        }
        if self.without_policy_time > 0 {
            let _ = writeln!(
                out,
                "{} calls had no `policy_time_ms` on record: replayed with the record's time",
                self.without_policy_time
            );
        }
        if self.without_facts > 0 {
            let _ = writeln!(
                out,
                "{} calls had no `facts` on record: replayed with no facts",
                self.without_facts
            );
        }
        if self.results > 0 {
            if self.changed_results.is_empty() {
                let _ = writeln!(
                    out,
                    "no result review would change ({} results reviewed again)",
                    self.results_replayed
                );
            } else {
                let _ = writeln!(
                    out,
                    "{} of {} results would be reviewed differently:",
                    self.changed_results.len(),
                    self.results_replayed
                );
                for c in &self.changed_results {
                    let _ = writeln!(
                        out,
                        "  call {}  {}: {} -> {}{}",
                        visible(&c.call_id),
                        visible(&c.tool),
                        visible(&c.recorded),
                        c.replayed,
                        c.reason
                            .as_ref()
                            .map(|r| format!(" ({})", visible(r)))
                            .unwrap_or_default()
                    );
                }
            }
            if self.results_without_result > 0 {
                let _ = writeln!(
                    out,
                    "skipped {} results not on record (turn on `audit.record_results` to review future results again)",
                    self.results_without_result
                );
            }
            if self.results_without_call > 0 {
                let _ = writeln!(
                    out,
                    "skipped {} results whose call's decision was not replayed",
                    self.results_without_call
                );
            }
        }
        if let Some(brk) = &self.first_break {
            let _ = writeln!(
                out,
                "chain broken at {brk}: records past it were not replayed"
            );
        }
        out
    }
}
