//! rmcp both ways: a runtime's own rmcp client served in process (`serve_in_process`), with
//! held calls answered by the runtime's approver; a runtime's own rmcp server handed in as a
//! transport (`server_transport`), through the same pin, load, policy and audit; and what
//! happens when a handed-in transport closes.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::{RequestContext, ServiceExt};
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};
use toolward::approval::{ApprovalAnswer, FnApprover};
use toolward::audit::AuditKind;
use toolward::call::CallOutcome;
use toolward::{ApprovalRequest, Toolward, ToolwardBuilder};

use crate::embed::{entries, scenario};
use crate::support::FAKE_SERVER;

/// The arguments of a call, from a JSON object.
fn arguments(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().cloned().unwrap()
}

/// The text of a result's text blocks.
fn text(result: &CallToolResult) -> String {
    let texts: Vec<String> = result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.clone()))
        .collect();
    texts.join("\n")
}

/// The runtime's own folder (where every default path of a config resolves, and nothing
/// should appear), the filesystem server's folder with `task.txt` in it, and a builder of the
/// filesystem server `fs` with rules for a read and a write.
fn filesystem() -> Option<(
    tempfile::TempDir,
    crate::real::RealServer,
    PathBuf,
    ToolwardBuilder,
)> {
    let server = crate::real::real_server("filesystem")?;
    let folder = PathBuf::from(server.entry["args"][1].as_str().unwrap());
    std::fs::write(folder.join("task.txt"), "write a short note\n").unwrap();
    let runtime = tempfile::tempdir().unwrap();
    let rules = json!({"servers": {"fs": {"tools": {
        "read_text_file": {"effect": "read-only"},
        "write_file": {"effect": "local-change", "allow_hint_mismatch": true},
    }}}});
    let builder = Toolward::builder()
        .base_dir(runtime.path())
        .server("fs", server.entry.clone())
        .rules(rules.to_string())
        .setting("principal", json!("agent"));
    Some((runtime, server, folder, builder))
}

/// An rmcp client of the runtime's, connected to toolward in process, lists the tools as
/// `Tool::from` converts them, reads, and has a write held by the policy and answered by
/// the runtime's approver (approved once, denied once); toolward writes no file in the
/// runtime's folder, and the audit records the approvals with the runtime as the answerer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_process_rmcp_client_calls_through_the_policy_and_the_runtime_answers_held_calls() {
    let Some((runtime, _server, folder, builder)) = filesystem() else {
        return;
    };
    let pinned = toolward::pin(&builder.config().unwrap(), None, None, Default::default())
        .await
        .unwrap();
    pinned.check().unwrap();
    let toolward = builder.manifest(pinned.manifest).start().await.unwrap();
    let mut records = toolward.audit_events().unwrap();
    let asked: Arc<Mutex<Vec<ApprovalRequest>>> = Arc::default();
    let approver = Arc::new(FnApprover::new({
        let asked = Arc::clone(&asked);
        move |request: ApprovalRequest| {
            let approve = request.arguments.contains("note.txt");
            asked.lock().unwrap().push(request);
            async move {
                if approve {
                    ApprovalAnswer::Approved
                } else {
                    ApprovalAnswer::Denied("the runtime keeps that file".to_owned())
                }
            }
        }
    }));

    let client = ().serve(toolward.serve_in_process(approver)).await.unwrap();
    let peer = client.peer().clone();
    let listed = peer.list_all_tools().await.unwrap();
    let converted: Vec<Tool> = toolward.tools().map(Tool::from).collect();
    assert_eq!(listed, converted);
    let names: Vec<&str> = listed.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(names, ["fs__read_text_file", "fs__write_file"]);

    let read = peer
        .call_tool(
            CallToolRequestParams::new("fs__read_text_file")
                .with_arguments(arguments(json!({"path": folder.join("task.txt")}))),
        )
        .await
        .unwrap();
    assert_ne!(read.is_error, Some(true), "{}", text(&read));
    assert!(
        text(&read).contains("write a short note"),
        "{}",
        text(&read)
    );
    assert!(asked.lock().unwrap().is_empty(), "a read is not held");

    let write = |name: &str| {
        CallToolRequestParams::new("fs__write_file").with_arguments(arguments(
            json!({"path": folder.join(name), "content": "a short note\n"}),
        ))
    };
    let approved = peer.call_tool(write("note.txt")).await.unwrap();
    assert_ne!(approved.is_error, Some(true), "{}", text(&approved));
    assert_eq!(
        std::fs::read_to_string(folder.join("note.txt")).unwrap(),
        "a short note\n"
    );
    let denied = peer.call_tool(write("kept.txt")).await.unwrap();
    assert_eq!(denied.is_error, Some(true));
    let denied_text = text(&denied);
    assert!(
        denied_text.contains("fs__write_file")
            && denied_text.contains("the runtime keeps that file"),
        "{denied_text}"
    );
    assert!(!folder.join("kept.txt").exists());
    {
        let asked = asked.lock().unwrap();
        let tools: Vec<(&str, &str, &str)> = asked
            .iter()
            .map(|r| {
                (
                    r.exposed_tool.as_str(),
                    r.server.as_str(),
                    r.principal.as_str(),
                )
            })
            .collect();
        assert_eq!(
            tools,
            [
                ("fs__write_file", "fs", "agent"),
                ("fs__write_file", "fs", "agent")
            ]
        );
    }

    client.cancel().await.unwrap();
    toolward.shutdown().await;
    assert_eq!(entries(runtime.path()), Vec::<PathBuf>::new());
    let mut answered = Vec::new();
    while let Ok(record) = records.try_recv() {
        if record.event.kind == AuditKind::ApprovalAnswered {
            answered.push(record.event);
        }
    }
    assert_eq!(answered.len(), 2, "{answered:?}");
    assert!(
        answered
            .iter()
            .all(|event| event.server.as_deref() == Some("fs")),
        "{answered:?}"
    );
}

/// A runtime's own in-process server: `read_note` (read-only), `erase_notes` (destructive),
/// `unruled` (no rule classifies it), and `hang`, which says it started and never answers.
#[derive(Clone, Default)]
struct Notes {
    /// Told when `hang` is called.
    hanging: Arc<tokio::sync::Notify>,
    /// The calls that reached the server, by tool name.
    reached: Arc<Mutex<Vec<String>>>,
}

impl ServerHandler for Notes {
    fn get_info(&self) -> InitializeResult {
        let capabilities: ServerCapabilities =
            serde_json::from_value(json!({ "tools": {} })).unwrap();
        InitializeResult::new(capabilities).with_server_info(Implementation::new("notes", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let schema = Arc::new(arguments(
            json!({"type": "object", "properties": {"id": {"type": "integer"}}}),
        ));
        let tool = |name: &'static str, hints: Value| {
            let mut tool =
                serde_json::to_value(Tool::new(name, "notes", Arc::clone(&schema))).unwrap();
            tool["annotations"] = hints;
            serde_json::from_value::<Tool>(tool).unwrap()
        };
        Ok(ListToolsResult::with_all_items(vec![
            tool("read_note", json!({"readOnlyHint": true})),
            tool("erase_notes", json!({"destructiveHint": true})),
            tool("unruled", json!({"readOnlyHint": true})),
            tool("hang", json!({"readOnlyHint": true})),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.reached.lock().unwrap().push(request.name.to_string());
        if request.name == "hang" {
            self.hanging.notify_one();
            std::future::pending::<()>().await;
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "note of {}",
            request.name
        ))])
        .into())
    }
}

/// Serves `notes` on one end of a new duplex until `close` is told; returns the other end.
fn serve(notes: Notes, close: Arc<tokio::sync::Notify>) -> tokio::io::DuplexStream {
    let (toolward_end, server_end) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        let Ok(running) = notes.serve(server_end).await else {
            return;
        };
        tokio::select! {
            _ = running.waiting() => {}
            () = close.notified() => {}
        }
    });
    toolward_end
}

/// A builder with the fake server `s` and the runtime's `notes` handed in over `transport`.
fn with_notes(
    scenario: &std::path::Path,
    base: &std::path::Path,
    transport: tokio::io::DuplexStream,
) -> ToolwardBuilder {
    let rules = json!({"servers": {
        "s": {"tools": {"read": {"effect": "read-only"}, "write": {"effect": "local-change"}}},
        "notes": {"tools": {
            "read_note": {"effect": "read-only"},
            "erase_notes": {"effect": "destructive"},
            "hang": {"effect": "read-only"},
        }},
    }});
    Toolward::builder()
        .base_dir(base)
        .server("s", json!({"command": FAKE_SERVER, "args": [scenario]}))
        .server_transport("notes", transport)
        .rules(rules.to_string())
}

/// Pins with one transport to `notes` and starts with another (each is used once).
async fn start_with_notes(
    notes: &Notes,
    close: &Arc<tokio::sync::Notify>,
) -> (Toolward, tempfile::TempDir, tempfile::TempDir) {
    let (scenario_dir, scenario) = scenario();
    let base = tempfile::tempdir().unwrap();
    let for_pin = with_notes(&scenario, base.path(), serve(notes.clone(), Arc::default()));
    let config = for_pin.config().unwrap();
    let pinned = toolward::pin(&config, None, None, Default::default())
        .await
        .unwrap();
    assert!(pinned.failures.is_empty(), "{:?}", pinned.failures);
    // The transport was used by the pin: a second connection through it is refused.
    let again = toolward::pin(&config, Some("notes"), None, Default::default())
        .await
        .unwrap();
    let refused = toolward::text::error_chain(&again.failures["notes"]);
    assert!(
        refused.contains("server `notes`") && refused.contains("cannot be restarted"),
        "{refused}"
    );
    let builder = with_notes(
        &scenario,
        base.path(),
        serve(notes.clone(), Arc::clone(close)),
    );
    let toolward = builder.manifest(pinned.manifest).start().await.unwrap();
    (toolward, scenario_dir, base)
}

/// A handed-in server's tools are pinned, classified by the rules (one without a rule is
/// not registered), decided by the policy (a read allowed, a destructive call denied without
/// reaching the server), and audited under its name; the load report says it runs
/// unconfined, because it was handed in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_in_rmcp_servers_tools_are_pinned_classified_decided_and_audited() {
    let notes = Notes::default();
    let (toolward, _scenario, base) = start_with_notes(&notes, &Arc::default()).await;
    let report = toolward.report();
    let server = report.servers.iter().find(|s| s.server == "notes").unwrap();
    assert!(server.failure.is_none(), "{:?}", server.failure);
    let confinement = server.confinement.as_ref().unwrap();
    assert!(!confinement.confined);
    assert!(
        confinement.detail.contains("handed in"),
        "{}",
        confinement.detail
    );
    assert!(
        report.render().contains("UNCONFINED"),
        "{}",
        report.render()
    );
    let unclassified: Vec<&str> = server
        .unclassified
        .iter()
        .map(|u| u.tool.as_str())
        .collect();
    assert_eq!(unclassified, ["unruled"]);
    let mut registered: Vec<&str> = toolward
        .tools()
        .filter(|tool| tool.server == "notes")
        .map(|tool| tool.exposed_name.as_str())
        .collect();
    registered.sort_unstable();
    assert_eq!(
        registered,
        ["notes__erase_notes", "notes__hang", "notes__read_note"]
    );
    let mut records = toolward.audit_events().unwrap();

    let nobody = Arc::new(toolward::approval::DenyAll);
    let read = toolward
        .call(
            "notes__read_note",
            Some(arguments(json!({"id": 1}))),
            nobody.clone(),
        )
        .await;
    assert_eq!(read.outcome, CallOutcome::Allowed, "{}", read.text());
    assert_eq!(read.text(), "note of read_note");
    assert_eq!(text(&CallToolResult::from(&read)), "note of read_note");
    let erase = toolward
        .call(
            "notes__erase_notes",
            Some(arguments(json!({"id": 1}))),
            nobody,
        )
        .await;
    assert_eq!(erase.outcome, CallOutcome::Denied, "{}", erase.text());
    assert!(
        erase.text().contains("notes__erase_notes"),
        "{}",
        erase.text()
    );
    assert_eq!(*notes.reached.lock().unwrap(), ["read_note"]);
    toolward.shutdown().await;

    let mut kinds = Vec::new();
    while let Ok(record) = records.try_recv() {
        if record.event.server.as_deref() == Some("notes") {
            kinds.push((
                record.event.tool.clone().unwrap_or_default(),
                record.event.kind,
            ));
        }
    }
    assert!(
        kinds.contains(&("notes__read_note".to_owned(), AuditKind::Forwarded)),
        "{kinds:?}"
    );
    assert!(
        kinds
            .iter()
            .any(|(tool, kind)| tool == "notes__erase_notes" && *kind == AuditKind::Decision),
        "{kinds:?}"
    );
    assert!(
        !kinds
            .iter()
            .any(|(tool, kind)| tool == "notes__erase_notes" && *kind == AuditKind::Forwarded),
        "{kinds:?}"
    );
    assert_eq!(entries(base.path()), Vec::<PathBuf>::new());
}

/// When a handed-in transport closes during a call, that call fails with a tool error
/// naming the tool and the server; the server is not restarted (later calls say so), and
/// the other server goes on answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_in_transport_closing_mid_call_fails_that_call_naming_tool_and_server() {
    let notes = Notes::default();
    let close = Arc::new(tokio::sync::Notify::new());
    let (toolward, _scenario, _base) = start_with_notes(&notes, &close).await;
    let nobody = Arc::new(toolward::approval::DenyAll);
    let call = toolward.call(
        "notes__hang",
        Some(arguments(json!({"id": 1}))),
        nobody.clone(),
    );
    let closer = async {
        notes.hanging.notified().await;
        close.notify_one();
    };
    let (hung, ()) = tokio::join!(call, closer);
    assert!(hung.is_error());
    let message = hung.text();
    assert!(
        message.contains("notes__hang") && message.contains("server `notes`"),
        "{message}"
    );
    assert!(message.contains("handed-in transport ended"), "{message}");

    // Down for good: the next call says why, naming the server.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let later = loop {
        let later = toolward
            .call(
                "notes__read_note",
                Some(arguments(json!({"id": 1}))),
                nobody.clone(),
            )
            .await;
        if later.text().contains("cannot be restarted") || std::time::Instant::now() > deadline {
            break later;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(later.is_error());
    assert!(
        later.text().contains("notes__read_note")
            && later.text().contains("`notes`")
            && later.text().contains("cannot be restarted"),
        "{}",
        later.text()
    );
    // The other server is untouched.
    let other = toolward
        .call("s__read", Some(arguments(json!({"x": 1}))), nobody)
        .await;
    assert!(!other.is_error(), "{}", other.text());
    toolward.shutdown().await;
}
