//! The real MCP servers installed by `tests/real-servers/install.sh` (see `REAL-SERVERS.md`
//! for their versions and quirks), as `mcpServers` entries. A test that needs one skips, with
//! a message, when it is not installed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};

/// Where the real servers are installed: `TOOLWARD_REAL_SERVERS`, else the repository's
/// `tests/real-servers/.installed`.
pub fn real_servers() -> PathBuf {
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
pub struct RealServer {
    pub name: &'static str,
    pub tools: usize,
    pub entry: Value,
    /// Kept for the test's length: the folder the server works in.
    _work: tempfile::TempDir,
}

pub fn real_server(name: &'static str) -> Option<RealServer> {
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
