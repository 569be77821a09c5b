//! A small agent loop on rmcp, with toolward in the same process and writing no file: the
//! real filesystem server started by toolward (rules as text, the manifest from `pin()` in
//! memory, the audit records in memory), the runtime's own rmcp client connected to toolward
//! in process (`Toolward::serve_in_process`), the tools listed through the client's `Peer`,
//! a read called, and a write held by the policy and answered by the runtime's approver.
//!
//! Run: `bash tests/real-servers/install.sh && cargo run -p toolward --example rmcp_agent`.

use std::sync::Arc;

use serde_json::{Value, json};
use toolward::rmcp::ServiceExt as _;
use toolward::rmcp::model::CallToolRequestParams;
use toolward::{ApprovalAnswer, ApprovalRequest, FnApprover, Toolward};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let installed = std::env::var("TOOLWARD_REAL_SERVERS").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/real-servers/.installed"
        )
        .to_owned()
    });
    let server =
        format!("{installed}/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    // The folder the agent works in, the only one the filesystem server may touch. toolward
    // writes nothing in it, nor anywhere else.
    let workspace = tempfile::tempdir()?;
    std::fs::write(workspace.path().join("task.txt"), "write a short note\n")?;
    let rules = json!({"servers": {"fs": {"tools": {
        "read_text_file": {"effect": "read-only"},
        "list_directory": {"effect": "read-only"},
        "write_file": {"effect": "local-change", "allow_hint_mismatch": true}
    }}}});
    let builder = Toolward::builder()
        .base_dir(workspace.path())
        .server("fs", json!({"command": "node", "args": [server, "."]}))
        .rules(rules.to_string());
    // Pinned here for the example; a runtime keeps the manifest its operator reviewed.
    let pinned = toolward::pin(&builder.config()?, None, None, Default::default()).await?;
    pinned.check()?;
    let toolward = builder.manifest(pinned.manifest).start().await?;

    // The runtime answers held calls itself: here it approves a write into its workspace.
    // Every field of a request comes from the model or a server: printed with `{:?}`, which
    // escapes what a terminal would act on.
    let approver = Arc::new(FnApprover::new(|request: ApprovalRequest| async move {
        let arguments: Value = serde_json::from_str(&request.arguments).unwrap_or(Value::Null);
        let path = arguments.get("path").and_then(Value::as_str).unwrap_or("/");
        let inside = !path.starts_with('/') && !path.split('/').any(|part| part == "..");
        println!(
            "held: {:?} on {:?} ({:?}): {}",
            request.exposed_tool,
            path,
            request.reason,
            if inside { "approved" } else { "denied" }
        );
        if inside {
            ApprovalAnswer::Approved
        } else {
            ApprovalAnswer::Denied("writes stay inside the workspace".to_owned())
        }
    }));
    // The runtime's own rmcp client, over an in-process duplex to toolward.
    let client = ().serve(toolward.serve_in_process(approver)).await?;
    let peer = client.peer().clone();
    let tools = peer.list_all_tools().await?;
    println!("{} tools: {}", tools.len(), {
        let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
        names.join(", ")
    });

    // The loop: a model would choose each step from the tools and the last result; this one
    // follows a script.
    let steps = [
        ("fs__read_text_file", json!({"path": "task.txt"})),
        (
            "fs__write_file",
            json!({"path": "note.txt", "content": "a short note\n"}),
        ),
        ("fs__list_directory", json!({"path": "."})),
    ];
    for (tool, arguments) in steps {
        let mut params = CallToolRequestParams::new(tool);
        if let Value::Object(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let result = peer.call_tool(params).await?;
        let text: Vec<String> = result
            .content
            .iter()
            .filter_map(|block| block.as_text().map(|text| text.text.clone()))
            .collect();
        println!(
            "{tool}{}: {}",
            if result.is_error == Some(true) {
                " (error)"
            } else {
                ""
            },
            text.join("\n")
        );
    }
    client.cancel().await?;
    toolward.shutdown().await;
    Ok(())
}
