//! Embedding toolward in a runtime, end to end against the real filesystem server:
//! a config built in code, pin, start (load), list the registered tools, call one with an
//! approver given as a closure, read the load report.
//!
//! Run: `bash tests/real-servers/install.sh && cargo run -p toolward --example embed`.

use std::sync::Arc;

use serde_json::json;
use toolward::{ApprovalAnswer, Config, FnApprover};

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
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("sandbox"))?;
    std::fs::write(
        dir.path().join("sandbox/hello.txt"),
        "hello from an embedder\n",
    )?;
    std::fs::write(
        dir.path().join("rules.json"),
        json!({"servers": {"fs": {"tools": {
            "read_text_file": {"effect": "read-only"},
            "write_file": {"effect": "local-change", "allow_hint_mismatch": true}
        }}}})
        .to_string(),
    )?;
    let config = Config::from_value(
        json!({
            "mcpServers": {"fs": {"command": "node", "args": [server, "sandbox"]}},
            "rules": {"file": "rules.json"},
            "manifest": "manifest.json",
            "state_dir": "state",
            "audit": {"file": "state/audit.jsonl", "sync": "none"}
        }),
        dir.path(),
    )?;

    // Pin: in a real deployment the operator reviews this manifest before it is used.
    let pinned = toolward::pin(&config, None, None, Default::default()).await?;
    pinned.manifest.write(&config.manifest)?;

    let toolward = toolward::Toolward::start(config).await?;
    print!("{}", toolward.report().render());
    for tool in toolward.tools() {
        println!("tool {} ({})", tool.exposed_name, tool.effect);
    }

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
    Ok(())
}
