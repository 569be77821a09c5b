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

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::{AuditDecision, AuditError, AuditKind, AuditRecord};
use crate::component::{CallView, Decision, Effect, Policy};

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
    let verify = super::read_chain(path, |record, line| {
        if record.event.kind != AuditKind::Decision {
            return;
        }
        report.decisions += 1;
        let raw: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
        replay_one(record, &raw, policy, &mut report);
    })?;
    report.first_break = verify.first_break.map(|b| b.to_string());
    Ok(report)
}

fn replay_one(record: &AuditRecord, raw: &Value, policy: &Policy, report: &mut ReplayReport) {
    let e = &record.event;
    let Some(arguments) = &e.arguments else {
        report.without_arguments += 1;
        return;
    };
    let (Some(server), Some(tool), Some(effect), Some(principal), Some(recorded)) = (
        &e.server,
        &e.upstream_tool,
        e.effect.as_deref().and_then(Effect::parse),
        &e.principal,
        e.decision,
    ) else {
        report.incomplete += 1;
        return;
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
        labels: Default::default(),
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
        if let Some(brk) = &self.first_break {
            let _ = writeln!(
                out,
                "chain broken at {brk}: records past it were not replayed"
            );
        }
        out
    }
}
