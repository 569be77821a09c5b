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
