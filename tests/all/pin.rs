//! Pinning the real MCP servers installed by `tests/real-servers/install.sh` (see
//! `REAL-SERVERS.md` for their versions and quirks). Skipped, with a message, when they are
//! not installed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};
use toolward::config::Config;
use toolward::manifest::Manifest;
use toolward::pin::{PinOutcome, pin};

/// Where the real servers are installed: `TOOLWARD_REAL_SERVERS`, else the repository's
/// `tests/real-servers/.installed`.
fn real_servers() -> PathBuf {
    match std::env::var_os("TOOLWARD_REAL_SERVERS") {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real-servers/.installed"),
    }
}

/// Makes this process the reaper of the servers' orphans, once.
fn subreaper() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        #[cfg(target_os = "linux")]
        toolward::transport::become_subreaper().unwrap();
    });
}

/// The entry of `mcpServers` for each real server, with the folder each needs, or `None`
/// (after saying why) when it is not installed.
struct RealServer {
    name: &'static str,
    tools: usize,
    entry: Value,
    /// Kept for the test's length: the folder the server works in.
    _work: tempfile::TempDir,
}

fn real_server(name: &'static str) -> Option<RealServer> {
    subreaper();
    let root = real_servers();
    let node = |package: &str| {
        root.join("node_modules/@modelcontextprotocol")
            .join(package)
            .join("dist/index.js")
    };
    let work = tempfile::tempdir().unwrap();
    let (program, tools, entry) = match name {
        "filesystem" => {
            let script = node("server-filesystem");
            let entry = json!({
                "command": "node",
                "args": [script.display().to_string(), work.path().display().to_string()],
            });
            (script, 14, entry)
        }
        "everything" => {
            let script = node("server-everything");
            let entry =
                json!({ "command": "node", "args": [script.display().to_string(), "stdio"] });
            (script, 13, entry)
        }
        "memory" => {
            let script = node("server-memory");
            let memory = work.path().join("memory.jsonl");
            let entry = json!({
                "command": "node",
                "args": [script.display().to_string()],
                "env": { "MEMORY_FILE_PATH": memory.display().to_string() },
            });
            (script, 9, entry)
        }
        "time" => {
            let program = root.join("venv/bin/mcp-server-time");
            // It writes the machine's time zone into its descriptions.
            let entry = json!({ "command": program.display().to_string(), "env": { "TZ": "UTC" } });
            (program, 2, entry)
        }
        "git" => {
            let program = root.join("venv/bin/mcp-server-git");
            let status = Command::new("git")
                .args(["init", "--quiet"])
                .current_dir(work.path())
                .status()
                .unwrap();
            assert!(status.success());
            let entry = json!({
                "command": program.display().to_string(),
                "args": ["--repository", work.path().display().to_string()],
            });
            (program, 12, entry)
        }
        other => panic!("no real server `{other}`"),
    };
    if !program.is_file() {
        eprintln!(
            "skipped: {} is not installed; run tests/real-servers/install.sh",
            program.display()
        );
        return None;
    }
    Some(RealServer {
        name,
        tools,
        entry,
        _work: work,
    })
}

/// Pins `server` into a config whose state folder is `state`.
async fn pin_once(server: &RealServer, state: &Path) -> PinOutcome {
    let config = Config::from_value(
        json!({
            "rules": { "file": "rules.json" },
            "state_dir": state.display().to_string(),
            "mcpServers": { server.name: server.entry.clone() },
        }),
        state,
    )
    .unwrap();
    let components = BTreeMap::from([(String::from("rules"), "0".repeat(64))]);
    pin(&config, None, None, components).await.unwrap()
}

/// Pins the real server `name` twice: the tool count is the known one, the manifest reads
/// back equal, and both pins write the same bytes.
async fn pins_stably(name: &'static str) {
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
    assert!(!pinned.protocol_version.is_empty());
    assert_eq!(first.diff.servers.len(), 1);

    // The server got its own private HOME under the state folder.
    let home = state.path().join("home").join(name);
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
    pins_stably("filesystem").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinning_server_everything_twice_gives_13_tools_and_identical_bytes() {
    pins_stably("everything").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinning_server_memory_twice_gives_9_tools_and_identical_bytes() {
    pins_stably("memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinning_mcp_server_time_twice_gives_2_tools_and_identical_bytes() {
    pins_stably("time").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinning_mcp_server_git_twice_gives_12_tools_and_identical_bytes() {
    pins_stably("git").await;
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
            "state_dir": state.path().display().to_string(),
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
