//! The protocol-version matrix: toolward against a server built on rmcp (the official Rust
//! SDK, `tests/rmcp-server`) that speaks only one revision at a time, through pin, load and
//! a call. Revisions up to 2025-11-25 negotiate through `initialize`; 2026-07-28 has none,
//! and toolward discovers it (`server/discover`) and sends its context with every request.
//! The real servers cover the rest: the npm reference servers answer 2025-11-25 to
//! `initialize`, and the PyPI ones (`mcp` 2.3.0) answer `server/discover` with 2026-07-28
//! (`tests/all/pin.rs` records each server's version in its manifest).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;
use toolward::Toolward;
use toolward::approval::DenyAll;
use toolward::config::Config;

const RMCP_SERVER: &str = env!("CARGO_BIN_EXE_toolward-rmcp-server");

/// Pins and starts toolward in front of the rmcp server speaking `versions`, calls `echo`
/// and returns the protocol version the manifest recorded.
async fn round_trip(versions: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.json"),
        r#"{"servers": {"r": {"tools": {"echo": {"effect": "read-only"}}}}}"#,
    )
    .unwrap();
    let config = Config::from_value(
        json!({
            "mcpServers": {"r": {"command": RMCP_SERVER, "args": [versions]}},
            "rules": {"file": "rules.json"}, "manifest": "manifest.json", "state_dir": "state",
            "audit": {"file": "state/audit.jsonl", "sync": "none"}
        }),
        dir.path(),
    )
    .unwrap();
    let pinned = toolward::pin::pin(&config, None, None, BTreeMap::new())
        .await
        .unwrap();
    pinned.check().unwrap();
    pinned.manifest.write(&config.manifest).unwrap();
    let recorded = pinned.manifest.servers["r"].protocol_version.clone();
    let toolward = Toolward::start(config).await.unwrap();
    assert_eq!(
        toolward.report().servers[0]
            .identity
            .as_ref()
            .map(|identity| identity.protocol_version.clone()),
        Some(recorded.clone())
    );
    let result = toolward
        .call(
            "r__echo",
            json!({"text": "hi"}).as_object().cloned(),
            Arc::new(DenyAll),
        )
        .await;
    assert!(!result.is_error(), "{}", result.result);
    assert_eq!(result.text(), r#"{"text":"hi"}"#);
    toolward.shutdown().await;
    recorded
}

#[tokio::test]
async fn a_server_of_2024_11_05_is_pinned_loaded_and_called() {
    assert_eq!(round_trip("2024-11-05").await, "2024-11-05");
}

#[tokio::test]
async fn a_server_of_2025_03_26_is_pinned_loaded_and_called() {
    assert_eq!(round_trip("2025-03-26").await, "2025-03-26");
}

#[tokio::test]
async fn a_server_of_2025_06_18_is_pinned_loaded_and_called() {
    assert_eq!(round_trip("2025-06-18").await, "2025-06-18");
}

#[tokio::test]
async fn a_server_of_2025_11_25_is_pinned_loaded_and_called() {
    assert_eq!(round_trip("2025-11-25").await, "2025-11-25");
}

#[tokio::test]
async fn a_server_of_2026_07_28_without_initialize_is_discovered_loaded_and_called() {
    assert_eq!(round_trip("2026-07-28").await, "2026-07-28");
}

#[tokio::test]
async fn a_server_of_both_eras_is_spoken_to_in_the_newest() {
    assert_eq!(round_trip("2025-11-25,2026-07-28").await, "2026-07-28");
}

/// An rmcp client that declares form elicitation and approves every approval it is asked.
struct Approving {
    info: rmcp::model::ClientConfig,
}

impl rmcp::ClientHandler for Approving {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        self.info.clone()
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let asked = serde_json::to_value(&request).unwrap();
        assert!(
            asked["message"]
                .as_str()
                .unwrap()
                .contains("approve tool `r__echo` on server `r`"),
            "{asked}"
        );
        Ok(
            serde_json::from_value(json!({"action": "accept", "content": {"approve": true}}))
                .unwrap(),
        )
    }
}

/// toolward (as `gateway::serve` runs it for `toolward serve`) in front of the rmcp server of
/// 2025-11-25, its `echo` held for approval, spoken to by rmcp's own client in `lifecycle`;
/// calls `echo` through it, approving through elicitation. Returns the version the client
/// agreed and the audit's `approval-answered` record.
async fn held_call_from_an_rmcp_client(
    lifecycle: rmcp::service::ClientLifecycleMode,
) -> (String, serde_json::Value) {
    use rmcp::service::ClientServiceExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.json"),
        r#"{"servers": {"r": {"tools": {"echo": {"effect": "local-change"}}}}}"#,
    )
    .unwrap();
    let config = Config::from_value(
        json!({
            "mcpServers": {"r": {"command": RMCP_SERVER, "args": ["2025-11-25"]}},
            "rules": {"file": "rules.json"}, "manifest": "manifest.json", "state_dir": "state",
            "audit": {"file": "state/audit.jsonl", "sync": "none"}, "principal": "tester"
        }),
        dir.path(),
    )
    .unwrap();
    let pinned = toolward::pin::pin(&config, None, None, BTreeMap::new())
        .await
        .unwrap();
    pinned.manifest.write(&config.manifest).unwrap();
    let toolward = Toolward::start(config).await.unwrap();
    let (served, client_end) = crate::support::serve_in_memory(&toolward);
    let info = serde_json::from_value(json!({
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": {"name": "rmcp-test-client", "version": "1"},
    }))
    .unwrap();
    let client = Approving { info }
        .serve_with_lifecycle(tokio::io::split(client_end), lifecycle)
        .await
        .unwrap();
    let version = client
        .peer_info()
        .map(|info| info.protocol_version.to_string())
        .unwrap_or_default();
    let result = client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("r__echo")
                .with_arguments(json!({"text": "hi"}).as_object().cloned().unwrap()),
        )
        .await
        .unwrap();
    let result = serde_json::to_value(&result).unwrap();
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["content"][0]["text"], r#"{"text":"hi"}"#, "{result}");
    client.cancel().await.unwrap();
    let _ = served.await;
    toolward.shutdown().await;
    let answered = crate::support::audit_records(&dir.path().join("state/audit.jsonl"))
        .into_iter()
        .rfind(|record| record["kind"] == "approval-answered")
        .unwrap();
    (version, answered)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rmcp_client_of_2026_07_28_discovers_and_approves_a_held_call_through_input_required() {
    let (version, answered) =
        held_call_from_an_rmcp_client(rmcp::service::ClientLifecycleMode::Discover {
            preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        })
        .await;
    assert_eq!(version, "2026-07-28");
    assert_eq!(answered["decision"], "allow", "{answered}");
    assert_eq!(
        answered["answered_by"],
        json!({"channel": "elicitation", "answerer": "tester"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rmcp_client_of_2025_11_25_is_still_asked_through_elicitation_in_its_session() {
    let (version, answered) =
        held_call_from_an_rmcp_client(rmcp::service::ClientLifecycleMode::Initialize).await;
    assert_eq!(version, "2025-11-25");
    assert_eq!(answered["decision"], "allow", "{answered}");
    assert!(
        !answered["reason"]
            .as_str()
            .unwrap()
            .contains("input_required"),
        "{answered}"
    );
}
