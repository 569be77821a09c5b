//! `toolward policy test`: decision cases run against a policy component, as `opa test`
//! runs tests against Rego.
//!
//! A cases file is JSON (YAML is not read: no YAML parser is among toolward's
//! dependencies), described by the JSON Schema `docs/policy-cases.schema.json`:
//!
//! ```json
//! {
//!   "settings": { "decisions": { "local-change": "allow" } },
//!   "cases": [
//!     { "name": "reads pass", "server": "fs", "tool": "read_file", "effect": "read-only",
//!       "arguments": { "path": "/srv/a" }, "expect": "allow" },
//!     { "name": "deletes are refused", "server": "fs", "tool": "rm", "effect": "destructive",
//!       "expect": "deny", "reason_contains": "destructive" }
//!   ]
//! }
//! ```
//!
//! `settings` is the settings text given to the component's `configure`, written inline
//! as JSON (it is passed on in compact form); `settings_file` names a file whose text is
//! passed on unchanged instead, relative to the cases file's folder. The command line's
//! `--rules` file overrides both.
//!
//! Each case becomes one call ([`CallView`]): its arguments in canonical JSON form with
//! their SHA-256, the principal `operator` unless given, call id `case-N` (N from 1),
//! session `policy-test`, time 0 and the case's `facts` (an object of fact name →
//! non-negative integer, such as `{"tool.forwarded.minute": 30}`; none when absent), so a
//! pure component answers every run the same. The component is configured once; each case is decided in a fresh instance of
//! the configured snapshot, exactly as `toolward serve` decides calls.
//!
//! A case may also give the session's `labels` before the call (`{"untrusted": true,
//! "confidentiality": "private", "tags": []}`) and a `result` the tool returns (a
//! `CallToolResult`: `content`, `structuredContent`, `isError`), with `expect_result`
//! (`pass`, `redact`, `withhold` or `hold`) and, optionally, the exact `delivered` result
//! after the redactions (`content` and `structuredContent`). The result is reviewed as
//! `toolward serve` reviews it (`results@0.3.0`), whatever the decision; a component whose
//! settings run no review passes every result.
//!
//! ```json
//! { "name": "tokens are redacted", "server": "fs", "tool": "read_file", "effect": "read-only",
//!   "expect": "allow",
//!   "result": { "content": [{ "type": "text", "text": "key ghp_abcdefghijklmnopqrstuvwxyz0123456789" }] },
//!   "expect_result": "redact",
//!   "delivered": { "content": [{ "type": "text", "text": "key [redacted secret:github-pat]" }] } }
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::canonical::{Value, sha256_hex, to_canonical};
use crate::component::{CallView, ComponentHost, Decision, Effect, LoadedComponent};
use crate::config::operator_file::{self, MAX_CASES_BYTES, MAX_SETTINGS_BYTES, OperatorFileError};

/// The principal of a case that names none: the config's default principal.
pub const DEFAULT_PRINCIPAL: &str = "operator";
/// The session every case's call carries.
pub const CASE_SESSION: &str = "policy-test";

/// Errors of reading a cases file.
#[derive(Debug, thiserror::Error)]
pub enum PolicyTestError {
    /// The cases file or its settings file is not a regular file, is over its limit
    /// ([`crate::config::operator_file::MAX_CASES_BYTES`],
    /// [`crate::config::operator_file::MAX_SETTINGS_BYTES`]), or cannot be read.
    #[error(transparent)]
    File(#[from] OperatorFileError),
    /// A file is not UTF-8.
    #[error("`{path}` is not UTF-8 text")]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// The cases file is not JSON of the documented shape.
    #[error("cases file `{path}` is not valid: {reason}")]
    Invalid {
        /// The cases file.
        path: PathBuf,
        /// The first fault, with its place in the file.
        reason: String,
    },
}

/// The verdict a case expects, or a decision's verdict (`allow`, `deny`, `hold`).
pub use toolward_policy_table::Verdict;

/// A decision's verdict and its reason.
fn verdict_of(decision: &Decision) -> (Verdict, Option<&str>) {
    match decision {
        Decision::Allow => (Verdict::Allow, None),
        Decision::Deny(reason) => (Verdict::Deny, Some(reason)),
        Decision::Hold(reason) => (Verdict::Hold, Some(reason)),
    }
}

/// One decision case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// Names the case in the report; unique in its file.
    pub name: String,
    /// The server's name, as in the config.
    pub server: String,
    /// The tool's name as the server knows it.
    pub tool: String,
    /// The operator's effect for the tool.
    pub effect: Effect,
    /// The call's arguments, canonical JSON (an object).
    pub arguments: String,
    /// Who asks.
    pub principal: String,
    /// The verdict the component must give.
    pub expect: Verdict,
    /// Text the reason of a deny or hold must contain.
    pub reason_contains: Option<String>,
    /// The facts the call carries (`call.facts`): name and JSON text, in name order.
    pub facts: Vec<(String, String)>,
    /// The session's labels before the call (`call.labels`).
    pub labels: crate::component::Labels,
    /// The result the tool returns, reviewed after the decision; `None`: not reviewed.
    pub result: Option<serde_json::Value>,
    /// What the review must do with `result` (`pass`, `redact`, `withhold`, `hold`).
    pub expect_result: Option<String>,
    /// The exact result after the redactions (`content`, `structuredContent`).
    pub delivered: Option<serde_json::Value>,
}

/// A parsed cases file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CasesFile {
    /// The settings text given to `configure`; `None` when the file gives none (the
    /// command line's `--rules` must then).
    pub settings: Option<String>,
    /// The cases, in file order.
    pub cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(rename = "$schema")]
    _schema: Option<String>,
    settings: Option<serde_json::Value>,
    settings_file: Option<PathBuf>,
    cases: Vec<RawCase>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    name: String,
    server: String,
    tool: String,
    effect: String,
    #[serde(default = "empty_object")]
    arguments: serde_json::Value,
    principal: Option<String>,
    expect: Verdict,
    reason_contains: Option<String>,
    #[serde(default)]
    facts: std::collections::BTreeMap<String, u64>,
    #[serde(default)]
    labels: crate::component::Labels,
    result: Option<serde_json::Value>,
    expect_result: Option<String>,
    delivered: Option<serde_json::Value>,
}

/// The actions a review can take, as cases and `result-decision` records spell them.
const RESULT_ACTIONS: [&str; 4] = ["pass", "redact", "withhold", "hold"];

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// The text of an operator's file, bounded (see [`operator_file`]), without a byte order
/// mark.
///
/// # Errors
/// [`PolicyTestError::File`], [`PolicyTestError::NotText`].
pub fn read_text(path: &Path, what: &'static str, limit: u64) -> Result<String, PolicyTestError> {
    let bytes = operator_file::read(path, what, limit)?;
    String::from_utf8(operator_file::without_bom(&bytes).to_vec()).map_err(|_| {
        PolicyTestError::NotText {
            path: path.to_owned(),
        }
    })
}

impl CasesFile {
    /// Reads a cases file; a `settings_file` in it is read relative to its folder.
    ///
    /// # Errors
    /// [`PolicyTestError::File`] when the file or its settings file cannot be read,
    /// [`PolicyTestError::Invalid`] as for [`CasesFile::parse`].
    pub fn from_path(path: &Path) -> Result<CasesFile, PolicyTestError> {
        let text = read_text(path, "cases file", MAX_CASES_BYTES)?;
        let base = path.parent().unwrap_or(Path::new("."));
        CasesFile::parse(&text, base, path)
    }

    /// Parses the text of a cases file. `base` is the folder a `settings_file` is relative
    /// to; `path` names the file in errors.
    ///
    /// # Errors
    /// [`PolicyTestError::Invalid`] for text that is not JSON of the documented shape (an
    /// unknown key, a missing field), an unknown effect, arguments that are not an object,
    /// a `reason_contains` on an `allow` case, two cases of one name, no cases, or both
    /// `settings` and `settings_file`; [`PolicyTestError::File`] when the settings file
    /// cannot be read.
    pub fn parse(text: &str, base: &Path, path: &Path) -> Result<CasesFile, PolicyTestError> {
        let invalid = |reason: String| PolicyTestError::Invalid {
            path: path.to_owned(),
            reason,
        };
        let raw: RawFile = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let settings = match (raw.settings, raw.settings_file) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "give `settings` or `settings_file`, not both".to_owned(),
                ));
            }
            (Some(value), None) => Some(value.to_string()),
            (None, Some(file)) => {
                let file = base.join(file);
                Some(read_text(&file, "policy settings", MAX_SETTINGS_BYTES)?)
            }
            (None, None) => None,
        };
        if raw.cases.is_empty() {
            return Err(invalid("`cases` is empty".to_owned()));
        }
        let mut cases: Vec<Case> = Vec::with_capacity(raw.cases.len());
        for (i, case) in raw.cases.into_iter().enumerate() {
            let here = format!("cases[{i}] (`{}`)", case.name);
            if cases.iter().any(|c| c.name == case.name) {
                return Err(invalid(format!("{here}: another case has this name")));
            }
            let effect = Effect::parse(&case.effect).ok_or_else(|| {
                invalid(format!(
                    "{here}.effect: unknown effect `{}` (expected read-only, local-change, remote-change or destructive)",
                    case.effect
                ))
            })?;
            if !case.arguments.is_object() {
                return Err(invalid(format!("{here}.arguments: expected an object")));
            }
            if case.expect == Verdict::Allow && case.reason_contains.is_some() {
                return Err(invalid(format!(
                    "{here}.reason_contains: an allow has no reason to match"
                )));
            }
            if case.result.is_some() != case.expect_result.is_some() {
                return Err(invalid(format!(
                    "{here}: `result` and `expect_result` go together"
                )));
            }
            if case.delivered.is_some() && case.expect_result.as_deref() != Some("redact") && case.expect_result.as_deref() != Some("pass") {
                return Err(invalid(format!(
                    "{here}.delivered: only a `pass` or `redact` result is delivered"
                )));
            }
            if let Some(action) = case.expect_result.as_deref().filter(|a| !RESULT_ACTIONS.contains(a)) {
                return Err(invalid(format!(
                    "{here}.expect_result: unknown action `{action}` (expected pass, redact, withhold or hold)"
                )));
            }
            if case.result.as_ref().is_some_and(|r| !r.is_object()) {
                return Err(invalid(format!("{here}.result: expected a CallToolResult object")));
            }
            cases.push(Case {
                name: case.name,
                server: case.server,
                tool: case.tool,
                effect,
                arguments: to_canonical(&Value::from_serde_json(&case.arguments)),
                principal: case
                    .principal
                    .unwrap_or_else(|| DEFAULT_PRINCIPAL.to_owned()),
                expect: case.expect,
                reason_contains: case.reason_contains,
                facts: case
                    .facts
                    .into_iter()
                    .map(|(name, value)| (name, value.to_string()))
                    .collect(),
                labels: case.labels,
                result: case.result,
                expect_result: case.expect_result,
                delivered: case.delivered,
            });
        }
        Ok(CasesFile { settings, cases })
    }

    /// The call a case makes: see the module documentation.
    pub fn call(index: usize, case: &Case) -> CallView {
        CallView {
            id: format!("case-{}", index + 1),
            server: case.server.clone(),
            tool: case.tool.clone(),
            effect: case.effect,
            arguments: case.arguments.clone(),
            arguments_sha256: sha256_hex(case.arguments.as_bytes()),
            principal: case.principal.clone(),
            session: CASE_SESSION.to_owned(),
            principal_attributes: Vec::new(),
            labels: case.labels.clone(),
            time_ms: 0,
            facts: case.facts.clone(),
        }
    }
}

/// The outcome of one case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CaseResult {
    /// The case's name.
    pub name: String,
    /// The server.
    pub server: String,
    /// The tool.
    pub tool: String,
    /// The effect, WIT spelling.
    pub effect: String,
    /// The expected verdict.
    pub expect: Verdict,
    /// The reason substring expected, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason_contains: Option<String>,
    /// The component's verdict.
    pub actual: Verdict,
    /// The component's reason (none for allow).
    pub reason: Option<String>,
    /// Whether the verdict (and the reason, when asked) matched.
    pub passed: bool,
    /// The policies that determined the decision, from a `policy@0.2.0` component (the
    /// Cedar component's policy ids); absent from a 0.1.0 component.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub determined_by: Option<Vec<String>>,
    /// What the component printed on stdout and stderr during the case (a component that
    /// imports WASI; bounded by `component::wasi::MAX_OUTPUT_BYTES`); absent when nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<crate::component::wasi::GuestOutput>,
    /// The review's action on the case's `result`; absent when the case has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_action: Option<String>,
    /// The review's reason (a withhold's or hold's), or a redaction that could not apply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_reason: Option<String>,
    /// The result as it would be delivered (after redactions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered: Option<serde_json::Value>,
}

/// The outcome of a cases file against one component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CaseReport {
    /// Where the component came from.
    pub component: String,
    /// The component's SHA-256, lowercase hex.
    pub sha256: String,
    /// Why no case could run (the component has no `policy` export, or refused its
    /// settings); then `cases` is empty and the run fails.
    pub setup_error: Option<String>,
    /// One result per case, in file order.
    pub cases: Vec<CaseResult>,
    /// Cases that passed.
    pub passed: usize,
    /// Cases that failed.
    pub failed: usize,
}

impl CaseReport {
    /// Whether the component could be configured and every case passed.
    pub fn all_passed(&self) -> bool {
        self.setup_error.is_none() && self.failed == 0
    }

    /// The report as a table: one line per case, `PASS` or `FAIL`, the call, the expected
    /// and actual verdicts and the actual reason; a summary line last. Text a component
    /// wrote (reasons, what it printed, a setup error) and the cases' names are shown with
    /// control, bidirectional and invisible characters escaped
    /// ([`crate::text::escape`]), so a policy cannot move the cursor,
    /// recolour or retitle the terminal that reads its report.
    pub fn render(&self) -> String {
        use crate::text::escape as shown;
        let mut out = String::new();
        let sha = self.sha256.get(..12).unwrap_or(&self.sha256);
        let _ = writeln!(out, "component `{}` (sha256 {sha}…)", self.component);
        if let Some(error) = &self.setup_error {
            let _ = writeln!(out, "  SETUP FAILED  {}", shown(error));
            let _ = writeln!(out, "no case ran");
            return out;
        }
        let calls: Vec<String> = self
            .cases
            .iter()
            .map(|c| shown(&format!("{}/{}", c.server, c.tool)))
            .collect();
        let names: Vec<String> = self.cases.iter().map(|c| shown(&c.name)).collect();
        let name_w = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
        let call_w = calls.iter().map(|c| c.chars().count()).max().unwrap_or(0);
        let effect_w = self.cases.iter().map(|c| c.effect.len()).max().unwrap_or(0);
        let _ = writeln!(
            out,
            "       {:name_w$}  {:call_w$}  {:effect_w$}  expect  actual  reason",
            "case", "call", "effect"
        );
        for ((case, call), name) in self.cases.iter().zip(&calls).zip(&names) {
            let mark = if case.passed { "PASS" } else { "FAIL" };
            let mut reason = case.reason.clone().unwrap_or_else(|| "-".to_owned());
            if let Some(ids) = case.determined_by.as_ref().filter(|ids| !ids.is_empty()) {
                let _ = write!(reason, " [{}]", ids.join(", "));
            }
            if !case.passed
                && let Some(want) = &case.reason_contains
                && case.actual == case.expect
            {
                let _ = write!(reason, " (expected to contain `{want}`)");
            }
            let reason = shown(&reason);
            let _ = writeln!(
                out,
                "  {mark} {name:name_w$}  {call:call_w$}  {:effect_w$}  {:6}  {:6}  {reason}",
                case.effect,
                case.expect.as_str(),
                case.actual.as_str(),
            );
            if let Some(output) = &case.output {
                let _ = writeln!(out, "         printed {}", shown(&output.for_reason()));
            }
            if let Some(action) = &case.result_action {
                let _ = writeln!(
                    out,
                    "         result: {}{}",
                    shown(action),
                    case.result_reason
                        .as_ref()
                        .map(|r| format!(" ({})", shown(r)))
                        .unwrap_or_default()
                );
            }
        }
        let _ = writeln!(out, "{} passed, {} failed", self.passed, self.failed);
        out
    }
}

/// Runs every case of `cases` against the `policy` export of `component`, configured once
/// with the file's settings.
///
/// Never fails: a component without a `policy` export, or one that refuses its settings,
/// gives a report with [`CaseReport::setup_error`] set; a guest that traps or runs out of
/// fuel on a case denies it, as in service, and the case passes only if it expected that.
pub fn run_cases(
    host: &ComponentHost,
    component: &LoadedComponent,
    cases: &CasesFile,
) -> CaseReport {
    let mut report = CaseReport {
        component: component.origin().to_owned(),
        sha256: component.sha256().to_owned(),
        setup_error: None,
        cases: Vec::new(),
        passed: 0,
        failed: 0,
    };
    let Some(settings) = &cases.settings else {
        report.setup_error = Some(
            "no settings: the cases file gives neither `settings` nor `settings_file`, and no `--rules` file was given"
                .to_owned(),
        );
        return report;
    };
    let policy = match host.configure_policy(component, settings) {
        Ok(policy) => policy,
        Err(e) => {
            report.setup_error = Some(e.to_string());
            return report;
        }
    };
    let reviews = !policy.reviews().reviews.is_empty();
    for (index, case) in cases.cases.iter().enumerate() {
        let call = CasesFile::call(index, case);
        let answer = policy.answer(&call);
        let (actual, reason) = verdict_of(&answer.decision);
        let reason_matches = match (&case.reason_contains, reason) {
            (None, _) => true,
            (Some(want), Some(got)) => got.contains(want.as_str()),
            (Some(_), None) => false,
        };
        let reviewed = case
            .result
            .as_ref()
            .map(|result| review_case(&policy, &call, result, reviews));
        let result_matches = match (&reviewed, &case.expect_result) {
            (Some((action, _, delivered)), Some(want)) => {
                action == want
                    && case
                        .delivered
                        .as_ref()
                        .is_none_or(|expected| delivered.as_ref() == Some(expected))
            }
            _ => true,
        };
        let passed = actual == case.expect && reason_matches && result_matches;
        if passed {
            report.passed += 1;
        } else {
            report.failed += 1;
        }
        report.cases.push(CaseResult {
            name: case.name.clone(),
            server: case.server.clone(),
            tool: case.tool.clone(),
            effect: case.effect.as_str().to_owned(),
            expect: case.expect,
            reason_contains: case.reason_contains.clone(),
            actual,
            reason: reason.map(str::to_owned),
            passed,
            determined_by: answer.determined_by.clone(),
            output: answer.output.filter(|o| !o.is_empty()),
            result_action: reviewed.as_ref().map(|(action, _, _)| action.clone()),
            result_reason: reviewed.as_ref().and_then(|(_, reason, _)| reason.clone()),
            delivered: reviewed.and_then(|(_, _, delivered)| delivered),
        });
    }
    report
}

/// The review of a case's `result`: the action, its reason, and what would be delivered
/// (for pass and redact). A redaction that cannot apply withholds, as in service.
fn review_case(
    policy: &crate::component::Policy,
    call: &CallView,
    result: &serde_json::Value,
    reviews: bool,
) -> (String, Option<String>, Option<serde_json::Value>) {
    use crate::component::{ResultAction, ResultView};
    let mut content = result
        .get("content")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut structured = result.get("structuredContent").cloned();
    let is_error = result.get("isError") == Some(&serde_json::Value::Bool(true));
    let delivered = |content: Vec<serde_json::Value>, structured: Option<serde_json::Value>| {
        let mut out = serde_json::Map::new();
        out.insert("content".to_owned(), serde_json::Value::Array(content));
        if let Some(structured) = structured {
            out.insert("structuredContent".to_owned(), structured);
        }
        serde_json::Value::Object(out)
    };
    if !reviews {
        return ("pass".to_owned(), None, Some(delivered(content, structured)));
    }
    let view = ResultView::of(&content, structured.as_ref(), is_error, result.to_string().len() as u64);
    match policy.review(call, &view).action {
        ResultAction::Pass => ("pass".to_owned(), None, Some(delivered(content, structured))),
        ResultAction::Withhold(reason) => ("withhold".to_owned(), Some(reason), None),
        ResultAction::Hold(reason) => ("hold".to_owned(), Some(reason), None),
        ResultAction::Redact(spans) => {
            match crate::review::redact(&view, &spans, &mut content, &mut structured) {
                Ok(_) => ("redact".to_owned(), None, Some(delivered(content, structured))),
                Err(reason) => ("withhold".to_owned(), Some(reason), None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_shows_a_components_reason_with_terminal_controls_escaped() {
        let hostile = "\u{1b}[2J\u{1b}]0;pwned\u{7}\r\u{202e}allow";
        let report = CaseReport {
            component: String::from("policy.wasm"),
            sha256: "ab".repeat(32),
            setup_error: None,
            cases: vec![CaseResult {
                name: String::from("escape\u{1b}[1A"),
                server: String::from("fs"),
                tool: String::from("write_file"),
                effect: String::from("local-change"),
                expect: Verdict::Deny,
                reason_contains: None,
                actual: Verdict::Deny,
                reason: Some(hostile.to_owned()),
                passed: true,
                determined_by: None,
                output: None,
                result_action: None,
                result_reason: None,
                delivered: None,
            }],
            passed: 1,
            failed: 0,
        };
        let shown = report.render();
        assert!(!shown.contains('\u{1b}'), "{shown:?}");
        assert!(
            !shown.contains('\u{7}') && !shown.contains('\r'),
            "{shown:?}"
        );
        assert!(!shown.contains('\u{202e}'), "{shown:?}");
        assert!(shown.contains("\\u{001B}[2J"), "{shown}");
        let failed = CaseReport {
            setup_error: Some(hostile.to_owned()),
            ..report
        };
        assert!(!failed.render().contains('\u{1b}'));
    }
}
