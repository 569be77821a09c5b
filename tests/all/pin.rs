//! Pinning the real MCP servers installed by `tests/real-servers/install.sh` (see
//! `REAL-SERVERS.md` for their versions and quirks). Skipped, with a message, when they are
//! not installed.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;
use toolward::config::Config;
use toolward::manifest::Manifest;
use toolward::pin::{PinOutcome, pin};

use crate::real::{RealServer, real_server};

/// Pins `server` into a config in folder `dir`.
async fn pin_once(server: &RealServer, dir: &Path) -> PinOutcome {
    let config = Config::from_value(
        json!({
            "rules": { "file": "rules.json" },
            "state_dir": "state",
            "mcpServers": { server.name: server.entry.clone() },
        }),
        dir,
    )
    .unwrap();
    let components = BTreeMap::from([(String::from("rules"), "0".repeat(64))]);
    pin(&config, None, None, components).await.unwrap()
}

/// Pins the real server `name` twice: the tool count and the protocol version are the
/// known ones, the manifest reads back equal, and both pins write the same bytes.
async fn pins_stably(name: &'static str, protocol_version: &str) {
    let Some(server) = real_server(name) else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let first = pin_once(&server, state.path()).await;
    if let Err(error) = first.check() {
        let causes: Vec<String> = first
            .failures
            .values()
            .map(|e| {
                let mut text = e.to_string();
                let mut source = std::error::Error::source(e);
                while let Some(cause) = source {
                    text.push_str(&format!(": {cause}"));
                    source = cause.source();
                }
                text
            })
            .collect();
        panic!("{error}: {causes:?}");
    }
    let pinned = &first.manifest.servers[name];
    assert_eq!(
        pinned.tools.len(),
        server.tools,
        "{:?}",
        pinned.tools.keys().collect::<Vec<_>>()
    );
    assert!(!pinned.server_name.is_empty());
    assert_eq!(pinned.protocol_version, protocol_version);
    assert_eq!(first.diff.servers.len(), 1);

    // The server got its own private HOME, outside the state folder.
    let home = state
        .path()
        .join(".toolward-servers")
        .join(name)
        .join("home");
    assert!(home.is_dir(), "{}", home.display());

    let text = first.manifest.to_json();
    assert_eq!(Manifest::parse(text.as_bytes()).unwrap(), first.manifest);
    let path = state.path().join("manifest.json");
    first.manifest.write(&path).unwrap();

    let second = pin_once(&server, state.path()).await;
    second.check().unwrap();
    assert_eq!(
        second.manifest.to_json(),
        text,
        "the listing changed between two pins"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinning_server_filesystem_twice_gives_14_tools_and_identical_bytes() {
    pins_stably("filesystem", "2025-11-25").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinning_server_everything_twice_gives_13_tools_and_identical_bytes() {
    pins_stably("everything", "2025-11-25").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinning_server_memory_twice_gives_9_tools_and_identical_bytes() {
    pins_stably("memory", "2025-11-25").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinning_mcp_server_time_twice_gives_2_tools_over_2026_07_28_and_identical_bytes() {
    pins_stably("time", "2026-07-28").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinning_mcp_server_git_twice_gives_12_tools_over_2026_07_28_and_identical_bytes() {
    pins_stably("git", "2026-07-28").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinning_one_real_server_keeps_the_other_pins_and_reports_no_change() {
    let (Some(time), Some(memory)) = (real_server("time"), real_server("memory")) else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let config = Config::from_value(
        json!({
            "rules": { "file": "rules.json" },
            "state_dir": "state",
            "mcpServers": { "time": time.entry.clone(), "memory": memory.entry.clone() },
        }),
        state.path(),
    )
    .unwrap();
    let all = pin(&config, None, None, BTreeMap::new()).await.unwrap();
    all.check().unwrap();
    assert_eq!(all.manifest.servers.len(), 2);
    let again = pin(&config, Some("time"), Some(&all.manifest), BTreeMap::new())
        .await
        .unwrap();
    again.check().unwrap();
    assert!(again.diff.is_empty(), "{}", again.diff);
    assert_eq!(again.manifest, all.manifest);
}
