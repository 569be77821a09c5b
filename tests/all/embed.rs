//! Embedding from values (`ToolwardBuilder`): the servers, the rules and the manifest given
//! in code, no file written unless asked for, the audit records in an embedder's own store
//! and on the stream of records.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::json;
use toolward::approval::{ApprovalAnswer, FnApprover};
use toolward::audit::{AuditKind, ChainCheck};
use toolward::{
    AuditChain, AuditError, AuditEvent, AuditHead, AuditRecord, AuditStore, ComponentHashes,
    StartFailure, Toolward, ToolwardBuilder,
};

use crate::support::FAKE_SERVER;

/// The fake server's scenario, in a folder of its own (the test's, not the embedder's): a
/// `read` and a `write` tool, each echoing its arguments.
pub(crate) fn scenario() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let schema = json!({"type": "object", "properties": {"x": {"type": "integer"}}});
    let listing = json!({"tools": [
        {"name": "read", "description": "reads", "inputSchema": schema,
         "annotations": {"readOnlyHint": true}},
        {"name": "write", "description": "writes", "inputSchema": schema},
    ]});
    let path = dir.path().join("s.json");
    std::fs::write(&path, json!({"pages": [listing.to_string()]}).to_string()).unwrap();
    (dir, path)
}

/// A builder of the server `s` (the fake server with `scenario`) and its rules, with `base`
/// as the folder relative paths resolve against and the server starts in.
fn builder(scenario: &Path, base: &Path) -> ToolwardBuilder {
    let rules = json!({"servers": {"s": {"tools": {
        "read": {"effect": "read-only"},
        "write": {"effect": "local-change"},
    }}}});
    Toolward::builder()
        .base_dir(base)
        .server("s", json!({"command": FAKE_SERVER, "args": [scenario]}))
        .rules(rules.to_string())
        .setting("principal", json!("embedder"))
}

/// Pins the builder's servers and starts it with the manifest as a value.
async fn start(builder: ToolwardBuilder) -> Toolward {
    let config = builder.config().unwrap();
    let pinned = toolward::pin::pin(&config, None, None, Default::default())
        .await
        .unwrap();
    assert!(pinned.failures.is_empty(), "{:?}", pinned.failures);
    builder.manifest(pinned.manifest).start().await.unwrap()
}

fn x(n: i64) -> Option<serde_json::Map<String, serde_json::Value>> {
    json!({"x": n}).as_object().cloned()
}

/// Every entry of `dir`, recursively.
pub(crate) fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(entries(&path));
        }
        found.push(path);
    }
    found
}

/// Pin, start, a read, a held write approved by a closure, and the shutdown write nothing in
/// the folder every default path of a config resolves against (`state`, `audit.jsonl`,
/// `manifest.json`, `.toolward-servers`), and the stream carries the call's records chained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toolward_built_from_values_writes_no_file_and_streams_its_records() {
    let (_scenario_dir, scenario) = scenario();
    let embedder = tempfile::tempdir().unwrap();
    let toolward = start(builder(&scenario, embedder.path())).await;
    assert!(toolward.state().is_none());
    assert_eq!(toolward.audit_store(), "audit records in memory");
    let mut events = toolward.audit_events().unwrap();
    let start_head = toolward.audit_head().unwrap();

    let approver = Arc::new(FnApprover::new(|_| async { ApprovalAnswer::Approved }));
    let read = toolward.call("s__read", x(1), approver.clone()).await;
    assert!(!read.is_error(), "{}", read.text());
    let write = toolward.call("s__write", x(2), approver).await;
    assert!(!write.is_error(), "{}", write.text());
    toolward.shutdown().await;

    assert_eq!(entries(embedder.path()), Vec::<PathBuf>::new());

    // The records after the start's, in order, each chained to the one before.
    let mut prev = start_head.hash;
    let mut seen = Vec::new();
    while let Ok(record) = events.try_recv() {
        assert_eq!(record.seq, start_head.records + seen.len() as u64);
        assert_eq!(record.prev, prev, "record {}", record.seq);
        prev = toolward::canonical::sha256_hex(&serde_json::to_vec(&record).unwrap());
        seen.push(record);
    }
    for call in [&read, &write] {
        let kinds: Vec<AuditKind> = seen
            .iter()
            .filter(|r| r.event.call_id.as_deref() == Some(call.call_id.as_str()))
            .map(|r| r.event.kind)
            .collect();
        assert_eq!(kinds.first(), Some(&AuditKind::CallReceived), "{kinds:?}");
        assert!(kinds.contains(&AuditKind::Forwarded), "{kinds:?}");
    }
    let write_kinds: Vec<AuditKind> = seen
        .iter()
        .filter(|r| r.event.call_id.as_deref() == Some(write.call_id.as_str()))
        .map(|r| r.event.kind)
        .collect();
    assert!(
        write_kinds.contains(&AuditKind::ApprovalAnswered),
        "{write_kinds:?}"
    );
}

/// Each record an embedder's store keeps, with its exact bytes.
type Kept = Vec<(AuditRecord, Vec<u8>)>;

/// An embedder's audit store: every record kept in memory, with its bytes.
#[derive(Debug, Default)]
struct KeptRecords(Mutex<(AuditChain, Kept)>);

impl AuditStore for KeptRecords {
    fn name(&self) -> String {
        "the embedder's records".to_owned()
    }

    fn waits(&self) -> bool {
        false
    }

    fn set_components(&self, components: ComponentHashes) {
        self.0.lock().unwrap().0.set_components(components);
    }

    fn append_batch(&self, events: Vec<AuditEvent>) -> Result<Option<u64>, AuditError> {
        let mut kept = self.0.lock().unwrap();
        let sealed = kept.0.seal(events, 0)?;
        let last = sealed.last().map(|(record, _)| record.seq);
        kept.1.extend(sealed);
        Ok(last)
    }

    fn write(&self, events: Vec<AuditEvent>) -> Result<(), AuditError> {
        self.append_batch(events).map(|_| ())
    }

    fn head(&self) -> Option<AuditHead> {
        Some(self.0.lock().unwrap().0.head())
    }
}

/// The store an embedder gives receives every record: the start's and each call's, in
/// order, one hash chain from the first (as `toolward audit verify` checks a log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedders_audit_store_receives_every_record_of_a_call_in_order_and_chained() {
    let (_scenario_dir, scenario) = scenario();
    let embedder = tempfile::tempdir().unwrap();
    let store = Arc::new(KeptRecords::default());
    let toolward = start(builder(&scenario, embedder.path()).audit_store(store.clone())).await;
    assert_eq!(toolward.audit_store(), "the embedder's records");
    let denied = toolward
        .call("s__write", x(3), Arc::new(toolward::approval::DenyAll))
        .await;
    assert!(denied.is_error());
    toolward.shutdown().await;

    let kept = store.0.lock().unwrap();
    let mut check = ChainCheck::default();
    for (record, bytes) in &kept.1 {
        assert_eq!(&check.check(bytes).unwrap(), record);
    }
    assert_eq!(check.records(), kept.1.len() as u64);
    let kinds: Vec<AuditKind> = kept.1.iter().map(|(r, _)| r.event.kind).collect();
    assert_eq!(kinds.first(), Some(&AuditKind::Load), "{kinds:?}");
    let call: Vec<AuditKind> = kept
        .1
        .iter()
        .filter(|(r, _)| r.event.call_id.as_deref() == Some(denied.call_id.as_str()))
        .map(|(r, _)| r.event.kind)
        .collect();
    assert_eq!(call.first(), Some(&AuditKind::CallReceived), "{call:?}");
    assert!(call.contains(&AuditKind::ApprovalAnswered), "{call:?}");
    assert!(!call.contains(&AuditKind::Forwarded), "{call:?}");
    assert!(entries(embedder.path()).is_empty());
}

/// Asked for a state folder, the builder keeps the audit log and the state there, and only
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_builder_given_a_state_folder_keeps_the_audit_log_in_it() {
    let (_scenario_dir, scenario) = scenario();
    let embedder = tempfile::tempdir().unwrap();
    let toolward = start(builder(&scenario, embedder.path()).state_dir("kept")).await;
    let read = crate::support::call(&toolward, "s__read").await;
    assert!(!read.is_error(), "{}", read.text());
    toolward.shutdown().await;
    let top: Vec<PathBuf> = std::fs::read_dir(embedder.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(top, vec![embedder.path().join("kept")]);
    let records = crate::support::audit_records(&embedder.path().join("kept/audit.jsonl"));
    assert!(records.iter().any(|r| r["call_id"] == json!(read.call_id)));
}

/// Without rules, or without a manifest, the builder refuses to start, naming what is
/// missing; Cedar text with a policy component is refused too.
#[tokio::test(flavor = "current_thread")]
async fn a_builder_refuses_what_is_missing_or_contradictory_naming_it() {
    let no_rules = Toolward::builder().config().unwrap_err().to_string();
    assert!(no_rules.starts_with("rules: missing"), "{no_rules}");
    let both = Toolward::builder()
        .rules("{}")
        .cedar("permit(principal, action, resource);")
        .policy_component(Vec::new())
        .config()
        .unwrap_err()
        .to_string();
    assert!(both.starts_with("policy.cedar: "), "{both}");
    let own = Toolward::builder()
        .rules("{}")
        .setting("state_dir", json!("elsewhere"))
        .config()
        .unwrap_err()
        .to_string();
    assert!(own.starts_with("state_dir: "), "{own}");
    let log = Toolward::builder()
        .rules("{}")
        .setting("audit", json!({"file": "audit.jsonl"}))
        .config()
        .unwrap_err()
        .to_string();
    assert!(log.starts_with("audit.file: "), "{log}");
    let Err(no_manifest) = Toolward::builder()
        .server("s", json!({"command": FAKE_SERVER}))
        .rules("{}")
        .start()
        .await
    else {
        panic!("started without a manifest");
    };
    assert!(
        matches!(no_manifest, StartFailure::Manifest { .. }),
        "{no_manifest}"
    );
    assert!(
        no_manifest.to_string().contains("no manifest"),
        "{no_manifest}"
    );
}

/// With the runtime's own OpenTelemetry providers (exporting to memory here), a call's span
/// with its steps as children, and the call's metrics, arrive through them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_span_and_metrics_arrive_through_the_runtimes_own_opentelemetry_providers() {
    use opentelemetry::Value as OtelValue;
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    let spans = InMemorySpanExporter::default();
    let tracer_provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let metrics = InMemoryMetricExporter::default();
    let meter_provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(metrics.clone()).build())
        .build();
    let (_scenario_dir, scenario) = scenario();
    let embedder = tempfile::tempdir().unwrap();
    let toolward = start(
        builder(&scenario, embedder.path()).otel_providers(&tracer_provider, &meter_provider),
    )
    .await;
    let read = crate::support::call(&toolward, "s__read").await;
    assert!(!read.is_error(), "{}", read.text());
    toolward.shutdown().await;
    tracer_provider.force_flush().unwrap();
    meter_provider.force_flush().unwrap();

    let finished = spans.get_finished_spans().unwrap();
    let call = finished
        .iter()
        .find(|span| span.name == "tools/call")
        .unwrap_or_else(|| panic!("no `tools/call` span in {finished:?}"));
    let attribute = |key: &str| {
        call.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.clone())
    };
    assert_eq!(attribute("toolward.tool"), Some(OtelValue::from("s__read")));
    assert_eq!(
        attribute("toolward.principal"),
        Some(OtelValue::from("embedder"))
    );
    assert_eq!(
        attribute("toolward.outcome"),
        Some(OtelValue::from("allowed"))
    );
    let steps: Vec<&str> = finished
        .iter()
        .filter(|span| span.parent_span_id == call.span_context.span_id())
        .map(|span| span.name.as_ref())
        .collect();
    for step in ["validate", "decide", "forward"] {
        assert!(steps.contains(&step), "`{step}` in {steps:?}");
    }

    let exported = metrics.get_finished_metrics().unwrap();
    let names: Vec<String> = exported
        .iter()
        .flat_map(|resource| resource.scope_metrics())
        .filter(|scope| scope.scope().name() == "toolward")
        .flat_map(|scope| scope.metrics())
        .map(|metric| metric.name().to_owned())
        .collect();
    for metric in ["toolward.calls", "toolward.upstream.duration"] {
        assert!(names.iter().any(|n| n == metric), "`{metric}` in {names:?}");
    }
    assert!(entries(embedder.path()).is_empty());
}
