//! The call path against the real `@modelcontextprotocol/server-filesystem`: validation,
//! hidden parameters, the default policy component's decisions, approvals, the result cap,
//! and the audit records of every call.
//!
//! The tests skip (with a message) when the server is not installed; run
//! `tests/real-servers/install.sh` first.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::{Map, Value as Json, json};
use toolward::approval::{self, ApprovalAnswer, Approver, DenyAll, FnApprover, QueueApprover};
use toolward::audit::{self, AuditLog, AuditSync, ComponentHashes};
use toolward::call::{CallContext, CallOutcome, CallPath, CallResult, CallSettings};
use toolward::canonical::{self, Value};
use toolward::component::{self, Annotations, ComponentHost, Effect, GuestLimits, Policy};
use toolward::registry::{RegisteredTool, Registry};
use toolward::schema::{self, Dialect};
use toolward::transport::{StdioSpec, TransportLimits, Upstream};

use crate::real::real_servers;

/// The operator's rules for the sandbox server `fs`: reads allowed (`tail` denied), writes
/// held (the default table), edits previewed only (`dryRun` fixed to `true`) and allowed.
pub const RULES: &str = r#"{
  "servers": {
    "fs": {
      "tools": {
        "read_text_file": {"effect": "read-only", "deny": ["tail"]},
        "write_file": {"effect": "local-change", "allow_hint_mismatch": true},
        "edit_file": {"effect": "local-change", "fix": {"dryRun": true},
                      "allow_hint_mismatch": true, "decision": "allow"}
      }
    }
  }
}"#;

/// A tool's rule: `(tool, effect, denied, fixed)`.
type Rule = (
    &'static str,
    Effect,
    Vec<&'static str>,
    Vec<(&'static str, Json)>,
);

/// The tools as [`RULES`] classifies them.
fn classified() -> Vec<Rule> {
    vec![
        ("read_text_file", Effect::ReadOnly, vec!["tail"], vec![]),
        ("write_file", Effect::LocalChange, vec![], vec![]),
        (
            "edit_file",
            Effect::LocalChange,
            vec![],
            vec![("dryRun", json!(true))],
        ),
    ]
}

fn filesystem_server() -> Option<PathBuf> {
    let entry =
        real_servers().join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    if entry.is_file() {
        Some(entry)
    } else {
        eprintln!(
            "skipped: {} is not installed; run tests/real-servers/install.sh",
            entry.display()
        );
        None
    }
}

/// The default policy component configured with [`RULES`], once per test binary.
pub fn policy() -> Arc<Policy> {
    static POLICY: OnceLock<Arc<Policy>> = OnceLock::new();
    POLICY
        .get_or_init(|| {
            let host = ComponentHost::new(GuestLimits::default(), None).unwrap();
            let component = host.load(component::DEFAULT_COMPONENT, "built-in").unwrap();
            Arc::new(host.configure_policy(&component, RULES).unwrap())
        })
        .clone()
}

/// A sandbox directory served by server-filesystem, its tools registered by hand as load
/// would register them, and an audit log.
pub struct Fixture {
    pub sandbox: tempfile::TempDir,
    pub state: tempfile::TempDir,
    pub registry: Arc<Registry>,
    pub upstream: Upstream,
    pub audit_path: PathBuf,
    pub audit: Arc<AuditLog>,
}

impl Fixture {
    /// `None` when the server is not installed.
    pub async fn start() -> Option<Fixture> {
        let entry = filesystem_server()?;
        let sandbox = tempfile::tempdir().unwrap();
        // The server resolves symlinks; keep paths comparable.
        let root = sandbox.path().canonicalize().unwrap();
        std::fs::write(root.join("hello.txt"), "hello from the sandbox\n").unwrap();
        let spec = StdioSpec {
            command: String::from("node"),
            args: vec![entry.display().to_string(), root.display().to_string()],
            ..StdioSpec::default()
        };
        let upstream = Upstream::connect_stdio("fs", &spec, &TransportLimits::default())
            .await
            .unwrap();
        let page = upstream.list_tools_page(None).await.unwrap();
        let listing = canonical::parse(&page).unwrap();
        let mut registry = Registry::new();
        for entry in listing.get("tools").unwrap().as_array().unwrap() {
            let name = entry.get("name").unwrap().as_str().unwrap();
            let Some((_, effect, denied, fixed)) =
                classified().into_iter().find(|(tool, ..)| *tool == name)
            else {
                continue;
            };
            registry
                .insert_tool(registered(entry, effect, &denied, &fixed))
                .unwrap();
        }
        registry.insert_upstream("fs", upstream.clone());
        let state = tempfile::tempdir().unwrap();
        // A state folder is owner-only: the approvals queue refuses one others can reach.
        std::fs::set_permissions(
            state.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let audit_path = state.path().join("audit.jsonl");
        let audit = Arc::new(AuditLog::open(&audit_path, AuditSync::Always).unwrap());
        Some(Fixture {
            sandbox,
            state,
            registry: Arc::new(registry),
            upstream,
            audit_path,
            audit,
        })
    }

    /// The sandbox path the server knows.
    pub fn root(&self) -> PathBuf {
        self.sandbox.path().canonicalize().unwrap()
    }

    pub fn call_path(&self, settings: CallSettings) -> CallPath {
        let policy = policy();
        let components = ComponentHashes {
            rules_sha256: None,
            policy_sha256: Some(policy.sha256().to_owned()),
            ..ComponentHashes::default()
        };
        CallPath::new(
            Arc::clone(&self.registry),
            policy,
            Some(Arc::clone(&self.audit) as Arc<dyn toolward::store::AuditStore>),
            settings,
            components,
        )
    }

    /// The audit records of `call_id`, as JSON objects in log order.
    pub fn records_of(&self, call_id: &str) -> Vec<Json> {
        crate::support::audit_records(&self.audit_path)
            .into_iter()
            .filter(|record| record["call_id"] == call_id)
            .collect()
    }

    pub fn kinds_of(&self, call_id: &str) -> Vec<String> {
        self.records_of(call_id)
            .iter()
            .map(|record| record["kind"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// A tool of the listing as load registers it: pins from the exact bytes, schema narrowed.
fn registered(
    entry: &Value,
    effect: Effect,
    denied: &[&str],
    fixed: &[(&str, Json)],
) -> RegisteredTool {
    let name = entry.get("name").unwrap().as_str().unwrap();
    let description = entry
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let original = entry.get("inputSchema").unwrap().clone();
    let hidden: Vec<&str> = denied
        .iter()
        .copied()
        .chain(fixed.iter().map(|(name, _)| *name))
        .collect();
    let annotations: Annotations = entry
        .get("annotations")
        .map(|a| serde_json::from_value(a.to_serde_json()).unwrap())
        .unwrap_or_default();
    RegisteredTool {
        server: String::from("fs"),
        upstream_name: name.to_owned(),
        exposed_name: format!("fs__{name}"),
        effect,
        description_sha256: canonical::sha256_hex(description.as_bytes()),
        input_schema_sha256: canonical::sha256_hex(canonical::to_canonical(&original).as_bytes()),
        description,
        input_schema: std::sync::Arc::new(schema::narrow(&original, &hidden).unwrap()),
        dialect: Dialect::of(&original).unwrap(),
        original_schema: std::sync::Arc::new(original),
        output_schema: entry.get("outputSchema").cloned(),
        denied: denied.iter().map(|d| (*d).to_owned()).collect(),
        fixed: fixed
            .iter()
            .map(|(name, value)| ((*name).to_owned(), Value::from_serde_json(value)))
            .collect(),
        annotations,
    }
}

pub fn context(approver: Arc<dyn Approver>) -> CallContext {
    CallContext {
        principal: String::from("tester"),
        principal_attributes: Vec::new(),
        session: String::from("session-1"),
        approver,
        progress: None,
        traceparent: None,
    }
}

fn args(value: Json) -> Option<Map<String, Json>> {
    match value {
        Json::Object(map) => Some(map),
        _ => panic!("arguments must be an object"),
    }
}

fn approve_all() -> Arc<dyn Approver> {
    Arc::new(FnApprover::new(|_| async { ApprovalAnswer::Approved }))
}

fn assert_tool_error(result: &CallResult, needle: &str) {
    assert!(
        result.is_error(),
        "expected a tool error: {}",
        result.result
    );
    assert!(
        result.text().contains(needle),
        "expected `{needle}` in `{}`",
        result.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_read_returns_the_file_content() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let path = fixture.call_path(CallSettings::default());
    let file = fixture.root().join("hello.txt");
    let result = path
        .call(
            "fs__read_text_file",
            args(json!({ "path": file })),
            &context(Arc::new(DenyAll)),
        )
        .await;
    assert!(!result.is_error(), "{}", result.result);
    assert_eq!(result.outcome, CallOutcome::Allowed);
    assert!(
        result.text().contains("hello from the sandbox"),
        "{}",
        result.result
    );
    assert_eq!(
        result.result["structuredContent"]["content"],
        "hello from the sandbox\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_write_approved_by_the_approver_writes_the_file() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let path = fixture.call_path(CallSettings::default());
    let file = fixture.root().join("approved.txt");
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen_by_approver = Arc::clone(&seen);
    let approver = FnApprover::new(move |request: approval::ApprovalRequest| {
        seen_by_approver.lock().unwrap().push(request);
        async { ApprovalAnswer::Approved }
    });
    let result = path
        .call(
            "fs__write_file",
            args(json!({ "path": file, "content": "approved" })),
            &context(Arc::new(approver)),
        )
        .await;
    assert!(!result.is_error(), "{}", result.result);
    assert_eq!(result.outcome, CallOutcome::Approved);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "approved");
    let requests = seen.lock().unwrap();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.exposed_tool, "fs__write_file");
    assert_eq!(request.server, "fs");
    assert_eq!(request.effect, "local-change");
    assert_eq!(
        request.arguments_sha256,
        canonical::sha256_hex(request.arguments.as_bytes())
    );
    assert_eq!(request.call_id, result.call_id);
}

/// The spans an embedder's subscriber sees made: each one's name and its fields as text.
#[derive(Clone, Default)]
struct SpansMade(Arc<std::sync::Mutex<Vec<(String, String)>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for SpansMade {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = String::new();
        attrs.record(
            &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                fields.push_str(&format!("{}={value:?} ", field.name()));
            },
        );
        self.0
            .lock()
            .unwrap()
            .push((attrs.metadata().name().to_owned(), fields));
    }
}

/// Each call runs in a `toolward.call` span of the embedder's own subscriber, naming the
/// call, the tool, the server and the principal, and the approver is asked inside it.
#[tokio::test(flavor = "current_thread")]
async fn a_call_runs_in_a_span_of_the_embedders_subscriber_with_its_call_tool_server_and_principal()
{
    use tracing_subscriber::layer::SubscriberExt as _;
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let spans = SpansMade::default();
    let _subscriber =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let path = fixture.call_path(CallSettings::default());
    let file = fixture.root().join("in-a-span.txt");
    let asked_in = Arc::new(std::sync::Mutex::new(None));
    let asked = Arc::clone(&asked_in);
    let approver = FnApprover::new(move |_request: approval::ApprovalRequest| {
        *asked.lock().unwrap() = tracing::Span::current()
            .metadata()
            .map(|metadata| metadata.name().to_owned());
        async { ApprovalAnswer::Approved }
    });
    let ctx = context(Arc::new(approver));
    let result = tracing::Instrument::instrument(
        path.call(
            "fs__write_file",
            args(json!({ "path": file, "content": "traced" })),
            &ctx,
        ),
        tracing::info_span!("the embedder's request"),
    )
    .await;
    assert!(!result.is_error(), "{}", result.result);
    let made = spans.0.lock().unwrap().clone();
    let calls: Vec<&(String, String)> = made
        .iter()
        .filter(|(name, _)| name == toolward::call::CALL_SPAN)
        .collect();
    assert_eq!(calls.len(), 1, "{made:?}");
    let fields = &calls[0].1;
    for expected in [
        format!("call_id={}", result.call_id),
        String::from("tool=fs__write_file"),
        String::from("server=fs"),
        String::from("principal=tester"),
    ] {
        assert!(fields.contains(&expected), "`{expected}` in `{fields}`");
    }
    assert_eq!(
        asked_in.lock().unwrap().as_deref(),
        Some(toolward::call::CALL_SPAN)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_write_denied_by_the_approver_is_not_written() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let path = fixture.call_path(CallSettings::default());
    let file = fixture.root().join("denied.txt");
    let approver = FnApprover::new(|_| async { ApprovalAnswer::Denied(String::from("not today")) });
    let result = path
        .call(
            "fs__write_file",
            args(json!({ "path": file, "content": "denied" })),
            &context(Arc::new(approver)),
        )
        .await;
    assert_tool_error(&result, "not today");
    assert_tool_error(&result, "`fs__write_file`");
    assert_eq!(result.outcome, CallOutcome::NotApproved);
    assert!(!file.exists());
    assert_eq!(
        fixture.kinds_of(&result.call_id),
        [
            "call-received",
            "decision",
            "approval-asked",
            "approval-answered",
            "refusal"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_write_nobody_answers_is_denied_at_the_approval_timeout() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let settings = CallSettings {
        approval_timeout: Duration::from_millis(300),
        ..CallSettings::default()
    };
    let path = fixture.call_path(settings);
    let file = fixture.root().join("late.txt");
    let approver = FnApprover::new(|_| std::future::pending::<ApprovalAnswer>());
    let result = path
        .call(
            "fs__write_file",
            args(json!({ "path": file, "content": "late" })),
            &context(Arc::new(approver)),
        )
        .await;
    assert_tool_error(&result, "no answer within 300 ms");
    assert!(!file.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_approval_covers_only_its_own_call_and_arguments() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let settings = CallSettings {
        approval_timeout: Duration::from_secs(3),
        ..CallSettings::default()
    };
    let path = Arc::new(fixture.call_path(settings));
    let state_dir = fixture.state.path().to_path_buf();
    let queue: Arc<dyn Approver> = Arc::new(QueueApprover::new(&state_dir).with_audit(Some(
        Arc::clone(&fixture.audit) as Arc<dyn toolward::store::AuditStore>,
    )));
    let first = fixture.root().join("first.txt");
    let second = fixture.root().join("second.txt");

    // Call A is held, shows up in the queue, and is approved from "another terminal".
    let call_a = {
        let (path, ctx, first) = (
            Arc::clone(&path),
            context(Arc::clone(&queue)),
            first.clone(),
        );
        tokio::spawn(async move {
            path.call(
                "fs__write_file",
                args(json!({ "path": first, "content": "A" })),
                &ctx,
            )
            .await
        })
    };
    let request_a = wait_for_pending(&state_dir).await;
    assert_eq!(request_a.exposed_tool, "fs__write_file");
    assert!(approval::display_request(&request_a).contains("fs__write_file"));
    let by = approval::answer(
        &state_dir,
        &request_a.call_id,
        true,
        None,
        &toolward::Approvers::default(),
    )
    .unwrap();
    assert_eq!(by.channel, approval::Channel::Queue);
    let result_a = call_a.await.unwrap();
    assert!(!result_a.is_error(), "{}", result_a.result);
    let answered = fixture
        .records_of(&result_a.call_id)
        .into_iter()
        .find(|record| record["kind"] == "approval-answered")
        .unwrap();
    assert_eq!(answered["answered_by"], serde_json::to_value(&by).unwrap());
    assert_eq!(std::fs::read_to_string(&first).unwrap(), "A");
    assert!(approval::list_pending(&state_dir).unwrap().is_empty());

    // Call B, other arguments: A's approval replayed under B's id does not count.
    let call_b = {
        let (path, ctx, second) = (
            Arc::clone(&path),
            context(Arc::clone(&queue)),
            second.clone(),
        );
        tokio::spawn(async move {
            path.call(
                "fs__write_file",
                args(json!({ "path": second, "content": "B" })),
                &ctx,
            )
            .await
        })
    };
    let request_b = wait_for_pending(&state_dir).await;
    assert_ne!(request_b.call_id, request_a.call_id);
    assert_ne!(request_b.arguments_sha256, request_a.arguments_sha256);
    let replayed = json!({
        "call_id": request_b.call_id,
        "approve": true,
        "arguments_sha256": request_a.arguments_sha256,
        "description_sha256": request_a.description_sha256,
        "input_schema_sha256": request_a.input_schema_sha256,
    });
    std::fs::write(
        state_dir
            .join("approvals/answers")
            .join(format!("{}.json", request_b.call_id)),
        replayed.to_string(),
    )
    .unwrap();
    let result_b = call_b.await.unwrap();
    assert_tool_error(&result_b, "no answer within");
    // The replay is on the record as a forgery.
    assert!(
        fixture
            .kinds_of(&result_b.call_id)
            .contains(&String::from("approval-forged")),
        "{:?}",
        fixture.kinds_of(&result_b.call_id)
    );
    assert_eq!(result_b.outcome, CallOutcome::NotApproved);
    assert!(!second.exists());
    assert!(approval::list_pending(&state_dir).unwrap().is_empty());
}

async fn wait_for_pending(state_dir: &Path) -> approval::ApprovalRequest {
    for _ in 0..100 {
        if let Some(request) = approval::list_pending(state_dir)
            .unwrap()
            .into_iter()
            .next()
        {
            return request;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no approval request became pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_parameter_set_by_the_call_is_a_tool_error_naming_it() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let path = fixture.call_path(CallSettings::default());
    let file = fixture.root().join("hello.txt");
    let result = path
        .call(
            "fs__read_text_file",
            args(json!({ "path": file, "tail": 1 })),
            &context(Arc::new(DenyAll)),
        )
        .await;
    assert_tool_error(&result, "parameter `tail`");
    assert_tool_error(&result, "`fs__read_text_file` on server `fs`");
    assert_eq!(result.outcome, CallOutcome::Refused);
    assert_eq!(
        fixture.kinds_of(&result.call_id),
        ["call-received", "refusal"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_parameter_set_by_the_call_is_a_tool_error_naming_it() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let path = fixture.call_path(CallSettings::default());
    let file = fixture.root().join("hello.txt");
    let edits = json!([{ "oldText": "hello", "newText": "bye" }]);
    let refused = path
        .call(
            "fs__edit_file",
            args(json!({ "path": file, "edits": edits, "dryRun": false })),
            &context(Arc::new(DenyAll)),
        )
        .await;
    assert_tool_error(&refused, "parameter `dryRun`");
    assert_tool_error(&refused, "fixed it to `true`");

    // Without it, the host sets it: the edit is only previewed.
    let previewed = path
        .call(
            "fs__edit_file",
            args(json!({ "path": file, "edits": edits })),
            &context(Arc::new(DenyAll)),
        )
        .await;
    assert!(!previewed.is_error(), "{}", previewed.result);
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "hello from the sandbox\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments_are_a_tool_error_that_quotes_no_value() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let path = fixture.call_path(CallSettings::default());
    let result = path
        .call(
            "fs__read_text_file",
            args(json!({ "path": "secret-value-123".chars().collect::<Vec<_>>() })),
            &context(Arc::new(DenyAll)),
        )
        .await;
    assert_tool_error(&result, "do not match its input schema");
    assert_tool_error(&result, "at `/path`");
    assert!(!result.text().contains("secret-value"), "{}", result.text());

    let missing = path
        .call("fs__write_file", None, &context(approve_all()))
        .await;
    assert_tool_error(&missing, "do not match its input schema");
    assert_eq!(missing.outcome, CallOutcome::Refused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_is_a_tool_error_naming_it() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let path = fixture.call_path(CallSettings::default());
    // Offered by the server, but not classified.
    let result = path
        .call("fs__move_file", None, &context(approve_all()))
        .await;
    assert_tool_error(&result, "unknown tool `fs__move_file`");
    assert_eq!(result.outcome, CallOutcome::Refused);
    assert_eq!(
        fixture.kinds_of(&result.call_id),
        ["call-received", "refusal"]
    );
}

/// Reads a file of 1,000 `x` through `fs__read_text_file` on a call path with `settings`.
async fn read_a_thousand_bytes(fixture: &Fixture, settings: CallSettings) -> CallResult {
    let path = fixture.call_path(settings);
    let file = fixture.root().join("big.txt");
    std::fs::write(&file, "x".repeat(1000)).unwrap();
    path.call(
        "fs__read_text_file",
        args(json!({ "path": file })),
        &context(Arc::new(DenyAll)),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_over_the_cap_is_truncated_with_a_marker() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let settings = CallSettings {
        max_result_bytes: 100,
        ..CallSettings::default()
    };
    let result = read_a_thousand_bytes(&fixture, settings).await;
    assert!(!result.is_error(), "{}", result.result);
    // The cap counts the JSON around the text too: `{"type":"text","text":""},` (26 bytes)
    // in `content`, `{"content":""}` (14 bytes) in `structuredContent`.
    let text = result.text();
    assert_eq!(
        text,
        format!("{}\n[toolward: truncated 926 bytes]", "x".repeat(74))
    );
    let structured = result.result["structuredContent"]["content"]
        .as_str()
        .unwrap();
    assert_eq!(
        structured,
        format!("{}\n[toolward: truncated 914 bytes]", "x".repeat(86))
    );
    let records = fixture.records_of(&result.call_id);
    assert_eq!(records.last().unwrap()["truncated"], true);
}

/// `mcpServers.NAME.limits.max_result_bytes` caps that server's results, not the top-level
/// cap (`CallSettings::from_config` fills `servers`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_own_result_cap_applies_to_its_results() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let own = toolward::ServerCallLimits {
        call_timeout: CallSettings::default().call_timeout,
        max_result_bytes: 100,
    };
    let settings = CallSettings {
        servers: std::collections::BTreeMap::from([(String::from("fs"), own)]),
        ..CallSettings::default()
    };
    assert_eq!(settings.limits_of("fs"), own);
    assert_eq!(
        settings.limits_of("other").max_result_bytes,
        CallSettings::default().max_result_bytes
    );
    let result = read_a_thousand_bytes(&fixture, settings).await;
    assert!(!result.is_error(), "{}", result.result);
    assert_eq!(
        result.text(),
        format!("{}\n[toolward: truncated 926 bytes]", "x".repeat(74))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_chain_verifies_and_the_decision_precedes_the_forwarded_record() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let path = fixture.call_path(CallSettings {
        record_arguments: true,
        ..CallSettings::default()
    });
    let file = fixture.root().join("audited.txt");
    let result = path
        .call(
            "fs__write_file",
            args(json!({ "path": file, "content": "audited" })),
            &context(approve_all()),
        )
        .await;
    assert!(!result.is_error(), "{}", result.result);
    let report = audit::verify(&fixture.audit_path).unwrap();
    assert!(report.is_intact(), "{:?}", report.first_break);
    assert_eq!(
        fixture.kinds_of(&result.call_id),
        [
            "call-received",
            "decision",
            "approval-asked",
            "approval-answered",
            "forwarded",
            "result"
        ]
    );
    let records = fixture.records_of(&result.call_id);
    let decision = &records[1];
    assert_eq!(decision["decision"], "hold");
    assert_eq!(decision["server"], "fs");
    assert_eq!(decision["tool"], "fs__write_file");
    assert_eq!(decision["upstream_tool"], "write_file");
    assert_eq!(decision["effect"], "local-change");
    assert_eq!(decision["components"]["policy_sha256"], policy().sha256());
    let arguments = decision["arguments"].as_str().unwrap();
    assert_eq!(
        decision["arguments_sha256"],
        canonical::sha256_hex(arguments.as_bytes())
    );
    assert_eq!(records[3]["decision"], "allow");
    assert_eq!(records[5]["is_error"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_sends_progress_while_it_waits() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let path = fixture.call_path(CallSettings {
        held_progress_interval: Duration::from_millis(50),
        ..CallSettings::default()
    });
    let approver = FnApprover::new(|_| async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        ApprovalAnswer::Approved
    });
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let mut ctx = context(Arc::new(approver));
    ctx.progress = Some(sender);
    let file = fixture.root().join("patient.txt");
    let result = path
        .call(
            "fs__write_file",
            args(json!({ "path": file, "content": "waited" })),
            &ctx,
        )
        .await;
    assert!(!result.is_error(), "{}", result.result);
    drop(ctx);
    let mut messages = Vec::new();
    while let Some(params) = receiver.recv().await {
        messages.push(params);
    }
    assert!(messages.len() >= 3, "{messages:?}");
    assert!(
        messages[0]["message"]
            .as_str()
            .unwrap()
            .contains("`fs__write_file`")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_to_a_server_that_died_is_a_tool_error_naming_the_server() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let path = fixture.call_path(CallSettings::default());
    fixture.upstream.clone().close().await;
    let file = fixture.root().join("hello.txt");
    let result = path
        .call(
            "fs__read_text_file",
            args(json!({ "path": file })),
            &context(Arc::new(DenyAll)),
        )
        .await;
    assert_tool_error(&result, "server `fs`");
    assert_eq!(result.outcome, CallOutcome::Allowed);
    let records = fixture.records_of(&result.call_id);
    assert_eq!(records.last().unwrap()["kind"], "result");
    assert_eq!(records.last().unwrap()["is_error"], true);
}

/// A call with no other call in flight syncs its records on its own thread: with the
/// runtime's only blocking thread taken, it still completes, its records on disk.
#[test]
fn a_lone_call_syncs_its_records_without_a_blocking_thread() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let Some(fixture) = Fixture::start().await else {
            return;
        };
        let path = fixture.call_path(CallSettings::default());
        let (release, held) = std::sync::mpsc::channel::<()>();
        let blocker = tokio::task::spawn_blocking(move || {
            let _ = held.recv_timeout(Duration::from_secs(60));
        });
        let syncs = fixture.audit.syncs();
        let file = fixture.root().join("hello.txt");
        let result = tokio::time::timeout(
            Duration::from_secs(10),
            path.call(
                "fs__read_text_file",
                args(json!({ "path": file })),
                &context(Arc::new(DenyAll)),
            ),
        )
        .await;
        release.send(()).unwrap();
        blocker.await.unwrap();
        let result = result.expect("the lone call waited for the blocking pool");
        assert_eq!(result.outcome, CallOutcome::Allowed, "{}", result.result);
        assert_eq!(fixture.audit.syncs(), syncs + 1);
        assert_eq!(
            fixture.kinds_of(&result.call_id),
            ["call-received", "decision", "forwarded", "result"]
        );
    });
}

/// Calls in flight together share syncs (group commit): 16 allowed calls at once take fewer
/// than 16 syncs. The test holds the log file's lock while the calls start, as a slow disk
/// or another gateway writing the log would, so the calls are in flight together however
/// fast this machine's sync is (on tmpfs a sync costs nothing and calls started one after
/// another need not overlap at all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_together_share_their_syncs() {
    let Some(fixture) = Fixture::start().await else {
        return;
    };
    let path = Arc::new(fixture.call_path(CallSettings::default()));
    let file = fixture.root().join("hello.txt");
    let syncs = fixture.audit.syncs();
    let lock = std::fs::File::open(&fixture.audit_path).unwrap();
    lock.lock().unwrap();
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let path = Arc::clone(&path);
            let file = file.clone();
            tokio::spawn(async move {
                path.call(
                    "fs__read_text_file",
                    args(json!({ "path": file })),
                    &context(Arc::new(DenyAll)),
                )
                .await
            })
        })
        .collect();
    // Let every call reach the log and wait behind the lock; the lock is let go from a
    // thread of its own because one call may be waiting for it on a runtime worker.
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        lock.unlock().unwrap();
    });
    for call in calls {
        let result = call.await.unwrap();
        assert_eq!(result.outcome, CallOutcome::Allowed, "{}", result.result);
    }
    let taken = fixture.audit.syncs() - syncs;
    assert!(taken < 16, "16 calls in flight took {taken} syncs");
}
