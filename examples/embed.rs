//! Embedding toolward in a runtime, end to end against the real filesystem server, writing
//! no file: the server, the rules and the manifest given as values (`Toolward::builder`),
//! pin, start (load), list the registered tools, call one with an approver given as a
//! closure, and follow the audit records as they are made.
//!
//! Run: `bash tests/real-servers/install.sh && cargo run -p toolward --example embed`.

use std::sync::Arc;

use serde_json::json;
use toolward::{ApprovalAnswer, FnApprover, Toolward};

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
    // The folder the filesystem server may touch: the runtime's workspace. toolward writes
    // nothing in it, nor anywhere else: no state folder, no audit log, no manifest file.
    let workspace = tempfile::tempdir()?;
    std::fs::write(
        workspace.path().join("hello.txt"),
        "hello from an embedder\n",
    )?;
    let rules = json!({"servers": {"fs": {"tools": {
        "read_text_file": {"effect": "read-only"},
        "write_file": {"effect": "local-change", "allow_hint_mismatch": true}
    }}}});
    let builder = Toolward::builder()
        .base_dir(workspace.path())
        .server("fs", json!({"command": "node", "args": [server, "."]}))
        .rules(rules.to_string());

    // Pin: in a real deployment the operator reviews this manifest before it is used (keep
    // it where the runtime keeps its settings, and give it back at each start).
    let pinned = toolward::pin(&builder.config()?, None, None, Default::default()).await?;
    let toolward = builder.manifest(pinned.manifest).start().await?;
    print!("{}", toolward.report().render());
    for tool in toolward.tools() {
        println!("tool {} ({})", tool.exposed_name, tool.effect);
    }
    // The audit records, as they are made (a runtime would keep them, or show them).
    let mut records = toolward
        .audit_events()
        .ok_or_else(|| anyhow::anyhow!("no stream of audit records"))?;

    // Held calls ask this closure; a runtime would ask its user.
    let approver = Arc::new(FnApprover::new(
        |request: toolward::ApprovalRequest| async move {
            println!(
                "approving {} with {}",
                request.exposed_tool, request.arguments
            );
            ApprovalAnswer::Approved
        },
    ));
    let read = toolward
        .call(
            "fs__read_text_file",
            json!({"path": "hello.txt"}).as_object().cloned(),
            approver.clone(),
        )
        .await;
    println!("read: {}", read.text());
    let write = toolward
        .call(
            "fs__write_file",
            json!({"path": "out.txt", "content": "ok\n"})
                .as_object()
                .cloned(),
            approver,
        )
        .await;
    println!("write: {} ({:?})", write.text(), write.outcome);
    toolward.shutdown().await;
    while let Ok(record) = records.try_recv() {
        println!("audit {} {}", record.seq, record.event.kind);
    }
    Ok(())
}
