//! Tools the load kept out: a call of one is answered with the reason, never as an unknown
//! tool, and the rest works.

use super::*;

#[tokio::test]
async fn a_call_of_a_tool_the_load_kept_out_says_why_and_the_rest_works() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("good.json"),
        json!({"pages": [format!(r#"{{"tools": [{}, {}]}}"#, tool("echo"), tool("spare"))]})
            .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("rules.json"),
        r#"{"servers": {"good": {"tools": {"echo": {"effect": "read-only"}}}, "gone": {"tools": {"t": {"effect": "read-only"}}}}}"#,
    )
    .unwrap();
    let config = |gone: &str| {
        Config::from_value(
            json!({
                "mcpServers": {
                    "good": {"command": FAKE_SERVER, "args": ["good.json"]},
                    "gone": {"command": gone}
                },
                "rules": {"file": "rules.json"}, "manifest": "manifest.json", "state_dir": "state",
                "audit": {"file": "state/audit.jsonl", "sync": "none"}
            }),
            dir.path(),
        )
        .unwrap()
    };
    // `gone` is pinned while it runs, then its command disappears.
    std::fs::write(
        dir.path().join("gone.json"),
        json!({"pages": [format!(r#"{{"tools": [{}]}}"#, tool("t"))]}).to_string(),
    )
    .unwrap();
    let script = dir.path().join("gone.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nexec {FAKE_SERVER} gone.json\n"),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let pinning = config(&script.display().to_string());
    let pinned = toolward::pin::pin(&pinning, None, None, BTreeMap::new())
        .await
        .unwrap();
    assert!(pinned.failures.is_empty(), "{:?}", pinned.failures);
    pinned.manifest.write(&pinning.manifest).unwrap();
    std::fs::remove_file(&script).unwrap();

    let toolward = Toolward::start(config(&script.display().to_string()))
        .await
        .unwrap();
    let unclassified = call(&toolward, "good__spare").await;
    assert!(unclassified.is_error());
    assert!(
        unclassified
            .text()
            .contains("tool `good__spare` is not available: no rule classifies it"),
        "{}",
        unclassified.text()
    );
    let down = call(&toolward, "gone__t").await;
    assert!(down.is_error());
    assert!(
        down.text()
            .contains("tool `gone__t` is not available: server `gone` did not load"),
        "{}",
        down.text()
    );
    let unknown = call(&toolward, "nobody__t").await;
    assert!(
        unknown.text().contains("unknown tool `nobody__t`"),
        "{}",
        unknown.text()
    );
    the_other_server_still_works(&toolward).await;
    toolward.shutdown().await;
}
