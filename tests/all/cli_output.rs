//! The printing commands when the reader of their standard output goes away, as in
//! `toolward approvals list | head -1`: each stops quietly, with the status a shell shows
//! for a process that SIGPIPE ended (141, as `cat` or `ls` get), and never panics.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::json;

use crate::support::{FAKE_SERVER, repo, toolward_binary};

/// The status a shell reports for a process SIGPIPE ended, 128 + 13, which toolward exits
/// with when its standard output's reader went away.
const READER_GONE: i32 = 141;

/// A folder with the fake server (`read`, read-only, and `write`, held for approval), its
/// manifest, and an audit log of a few calls.
async fn bench() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let tool = |name: &str| {
        json!({"name": name, "description": format!("{name}s a file"),
            "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}})
    };
    let listing = json!({"tools": [tool("read"), tool("write")]});
    let scenario = json!({"pages": [listing.to_string()]});
    std::fs::write(dir.path().join("s.json"), scenario.to_string()).unwrap();
    let rules = json!({"servers": {"s": {"tools": {
        "read": {"effect": "read-only"}, "write": {"effect": "local-change"}}}}});
    std::fs::write(dir.path().join("rules.json"), rules.to_string()).unwrap();
    let config = json!({
        "mcpServers": {"s": {"command": FAKE_SERVER, "args": ["s.json"]}},
        "rules": {"file": "rules.json"},
        "manifest": "manifest.json",
        "state_dir": "state",
        "audit": {"file": "state/audit.jsonl", "sync": "none"},
    });
    std::fs::write(dir.path().join("toolward.json"), config.to_string()).unwrap();
    let config = toolward::config::Config::from_path(&dir.path().join("toolward.json")).unwrap();
    let pinned = toolward::pin::pin(&config, None, None, BTreeMap::new())
        .await
        .unwrap();
    assert!(pinned.failures.is_empty(), "{:?}", pinned.failures);
    pinned.manifest.write(&config.manifest).unwrap();
    for n in 0..3 {
        let called = Command::new(toolward_binary().unwrap())
            .args([
                "call",
                "s__read",
                "--args",
                &format!(r#"{{"path": "{n}"}}"#),
            ])
            .arg("--config")
            .arg(dir.path().join("toolward.json"))
            .output()
            .unwrap();
        assert!(called.status.success(), "{called:?}");
    }
    dir
}

/// Runs `toolward ARGS` in `dir` with standard output a pipe whose reader is already gone,
/// so that its first write fails with `EPIPE`.
fn into_closed_pipe(dir: &Path, args: &[OsString]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(toolward_binary().unwrap())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

fn assert_quiet(args: &[OsString], output: &Output, statuses: &[i32]) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "{args:?}: {stderr}"
    );
    assert!(
        output
            .status
            .code()
            .is_some_and(|code| statuses.contains(&code)),
        "{args:?}: {} {stderr}",
        output.status
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_printing_command_whose_reader_went_away_stops_quietly() {
    let Some(_) = toolward_binary() else { return };
    let dir = bench().await;
    let config = dir.path().join("toolward.json");
    let with_config = |args: &[&str]| -> Vec<OsString> {
        let mut all: Vec<OsString> = args.iter().map(OsString::from).collect();
        all.push(OsString::from("--config"));
        all.push(config.clone().into_os_string());
        all
    };
    let cases = repo().join("examples/policy-cases/default.json");
    let commands: Vec<Vec<OsString>> = vec![
        with_config(&["approvals", "list"]),
        with_config(&["approvals", "list", "--json"]),
        with_config(&["audit", "show"]),
        with_config(&["audit", "show", "--json"]),
        with_config(&["audit", "tail", "-n", "2"]),
        with_config(&["audit", "verify"]),
        with_config(&["audit", "verify", "--json"]),
        with_config(&["audit", "export"]),
        with_config(&["audit", "replay", "--policy", "built-in"]),
        with_config(&["check"]),
        with_config(&["check", "--json"]),
        with_config(&["check", "--suggest-rules"]),
        with_config(&["pin", "--dry-run"]),
        with_config(&["policy", "validate"]),
        with_config(&["call", "s__read", "--args", r#"{"path": "x"}"#]),
        ["policy", "inspect", "built-in"]
            .iter()
            .map(OsString::from)
            .collect(),
        vec![
            OsString::from("policy"),
            OsString::from("test"),
            cases.into_os_string(),
            OsString::from("--policy"),
            OsString::from("built-in"),
        ],
    ];
    for args in &commands {
        assert_quiet(args, &into_closed_pipe(dir.path(), args), &[READER_GONE]);
    }
    // clap writes help and the version itself, ignoring a failed write: 0, and no panic.
    for args in [["--help"], ["--version"]] {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        assert_quiet(
            &args,
            &into_closed_pipe(dir.path(), &args),
            &[0, READER_GONE],
        );
    }
}
