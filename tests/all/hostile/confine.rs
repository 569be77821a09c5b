//! Confinement (issue 14, item 1): a stdio server started through the `toolward` launcher is
//! refused by the kernel (Landlock) what toolward keeps, while the rest of the machine, its
//! own `HOME` and `TMPDIR`, and folders beside the state folder still work, for the fake
//! server and for the real filesystem and memory servers.
//!
//! Each test skips, saying why, only where the kernel has no Landlock.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::support::toolward_binary;

/// The `toolward` binary the tests start servers through, when this kernel has Landlock;
/// `None` (after saying why) when it has none.
fn launcher() -> Option<PathBuf> {
    let bin = toolward_binary()?.to_path_buf();
    let abi = toolward::confine::landlock_abi(&bin).unwrap().abi;
    if abi == 0 {
        eprintln!("skipped: this kernel has no Landlock, so servers cannot be confined");
        return None;
    }
    Some(bin)
}

/// A scenario whose tools `read`, `write`, `connect` and `env` are probes of the fake server.
fn probes() -> Value {
    let tools = ["read", "write", "connect", "env"];
    let listed: Vec<String> = tools.iter().map(|t| tool(t)).collect();
    let listed: Vec<&str> = listed.iter().map(String::as_str).collect();
    let actions: serde_json::Map<String, Value> = tools
        .iter()
        .map(|t| ((*t).to_owned(), json!({ "probe": t })))
        .collect();
    json!({ "pages": [page(&listed)], "actions": actions })
}

const PROBES: &[&str] = &["read", "write", "connect", "env"];

/// Calls `tool` with `arguments` and returns its text, or [`REFUSED`] for any error of the
/// kernel's; the probes answer, never fail.
async fn probe(toolward: &Toolward, tool: &str, arguments: Value) -> String {
    let result = toolward
        .call(tool, arguments.as_object().cloned(), Arc::new(DenyAll))
        .await;
    assert!(!result.is_error(), "{tool}: {}", result.result);
    let text = result.text();
    // Landlock answers `EACCES`; beneath a folder the namespaces cover, the path is not
    // there at all (`ENOENT`); a covered file is read-only (`EROFS`).
    if text.contains("(os error ") {
        REFUSED.to_owned()
    } else {
        text
    }
}

/// What a probe the kernel refused answers (see [`probe`]).
const REFUSED: &str = "refused by the kernel";

fn confinement(toolward: &Toolward, server: &str) -> toolward::load::ConfinementReport {
    toolward
        .report()
        .servers
        .iter()
        .find(|s| s.server == server)
        .and_then(|s| s.confinement.clone())
        .unwrap()
}

/// The state folder as toolward leaves it while a call waits: a pending request in the
/// queue, the answers folder, the listen token.
fn fill_state(state: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let pending = state.join("approvals/pending/01JCALL.json");
    std::fs::create_dir_all(pending.parent().unwrap()).unwrap();
    std::fs::write(&pending, r#"{"call_id": "01JCALL"}"#).unwrap();
    let answers = state.join("approvals/answers");
    std::fs::create_dir_all(&answers).unwrap();
    let token = state.join("listen-token");
    std::fs::write(&token, "0123456789abcdef0123456789abcdef").unwrap();
    // Owner-only, as toolward makes them: it refuses a state folder others can reach.
    use std::os::unix::fs::PermissionsExt;
    for (path, mode) in [
        (state.to_path_buf(), 0o700),
        (state.join("approvals"), 0o700),
        (state.join("approvals/pending"), 0o700),
        (answers.clone(), 0o700),
        (pending.clone(), 0o600),
        (token.clone(), 0o600),
    ] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    (pending, answers.join("01JCALL.json"), token)
}

#[tokio::test]
async fn a_confined_server_is_refused_the_queue_an_answer_file_and_the_listen_token() {
    let Some(launcher) = launcher() else { return };
    let bench = Bench::new("confine-state")
        .server("probe", probes(), PROBES)
        .with("confine", json!({ "launcher": launcher }));
    let (pending, answer, token) = fill_state(&bench.path().join("state"));
    // Held as a waiting process holds its entry, so the start leaves it in the queue.
    let held = std::fs::File::open(&pending).unwrap();
    held.lock().unwrap();
    let beside = bench.path().join("sandbox/notes.txt");
    std::fs::create_dir_all(beside.parent().unwrap()).unwrap();
    std::fs::write(&beside, "beside the state folder").unwrap();
    let toolward = bench.pin_and_start().await;
    let report = confinement(&toolward, "probe");
    assert!(report.confined, "{}", report.detail);

    let read = |path: &Path| json!({ "path": path });
    assert_eq!(
        probe(&toolward, "probe__read", read(&pending)).await,
        REFUSED
    );
    assert_eq!(
        probe(&toolward, "probe__write", read(&answer)).await,
        REFUSED
    );
    assert!(!answer.exists(), "the server wrote an answer");
    assert_eq!(probe(&toolward, "probe__read", read(&token)).await, REFUSED);
    assert_eq!(
        probe(
            &toolward,
            "probe__read",
            read(&bench.path().join("manifest.json"))
        )
        .await,
        REFUSED
    );
    assert_eq!(
        probe(
            &toolward,
            "probe__read",
            read(&bench.path().join("rules.json"))
        )
        .await,
        REFUSED
    );
    // A folder beside the state folder, and the rest of the machine, are the server's.
    assert_eq!(
        probe(&toolward, "probe__read", read(&beside)).await,
        "ok: 23 bytes"
    );
    assert_eq!(
        probe(
            &toolward,
            "probe__write",
            read(&bench.path().join("sandbox/new.txt"))
        )
        .await,
        "ok"
    );
    assert!(
        probe(&toolward, "probe__read", read(Path::new("/etc/passwd")))
            .await
            .starts_with("ok")
    );
    toolward.shutdown().await;
    // toolward itself still reads everything the server was refused.
    assert!(std::fs::read(&pending).is_ok() && std::fs::read(&token).is_ok());
    bench.assert_no_processes_left();
}

#[tokio::test]
async fn a_server_denied_tcp_cannot_connect_out_and_one_that_is_not_can() {
    let Some(launcher) = launcher() else { return };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let bench = Bench::new("confine-tcp")
        .server("closed", probes(), PROBES)
        .server("open", probes(), PROBES)
        .with("confine", json!({ "launcher": launcher }));
    let bench = bench.with_server_setting("closed", "confine", json!({ "deny_tcp": true }));
    let toolward = bench.pin_and_start().await;
    let closed = confinement(&toolward, "closed");
    if !closed.detail.contains("TCP denied") {
        eprintln!("skipped: {}", closed.detail);
        return;
    }
    let connect = json!({ "address": address });
    assert_eq!(
        probe(&toolward, "closed__connect", connect.clone()).await,
        REFUSED
    );
    assert_eq!(probe(&toolward, "open__connect", connect).await, "ok");
    toolward.shutdown().await;
    bench.assert_no_processes_left();
}

#[tokio::test]
async fn each_server_has_its_own_home_and_tmpdir_outside_the_state_folder_and_not_the_others() {
    let Some(launcher) = launcher() else { return };
    let bench = Bench::new("confine-homes")
        .server("one", probes(), PROBES)
        .server("two", probes(), PROBES)
        .with("confine", json!({ "launcher": launcher }));
    let toolward = bench.pin_and_start().await;
    let servers = bench.path().join(".toolward-servers");
    let env = probe(&toolward, "one__env", json!({})).await;
    assert_eq!(
        env,
        format!(
            "HOME={} TMPDIR={}",
            servers.join("one/home").display(),
            servers.join("one/tmp").display()
        )
    );
    let own = servers.join("one/tmp/scratch");
    assert_eq!(
        probe(&toolward, "one__write", json!({ "path": own })).await,
        "ok"
    );
    let theirs = servers.join("two/home/.credentials");
    std::fs::write(&theirs, "two's").unwrap();
    assert_eq!(
        probe(&toolward, "one__read", json!({ "path": theirs })).await,
        REFUSED
    );
    toolward.shutdown().await;
    bench.assert_no_processes_left();
}

#[tokio::test]
async fn a_server_the_config_leaves_unconfined_is_reported_with_its_reason() {
    let Some(launcher) = launcher() else { return };
    let bench = Bench::new("confine-opt-out")
        .server("free", probes(), PROBES)
        .with("confine", json!({ "launcher": launcher }))
        .with_server_setting(
            "free",
            "confine",
            json!({ "unconfined": "it drives docker" }),
        );
    let (_, _, token) = fill_state(&bench.path().join("state"));
    let toolward = bench.pin_and_start().await;
    let report = confinement(&toolward, "free");
    assert!(!report.confined && report.by_config);
    assert!(
        toolward
            .report()
            .render()
            .contains("UNCONFINED  unconfined by the config: it drives docker"),
        "{}",
        toolward.report().render()
    );
    assert_eq!(
        probe(&toolward, "free__read", json!({ "path": token })).await,
        "ok: 32 bytes"
    );
    toolward.shutdown().await;
}

/// A launcher that cannot be run (here, missing; in an attack, held open for writing) refuses
/// its servers, naming it: none is started unconfined, at pin or at load.
#[tokio::test]
async fn a_launcher_that_cannot_be_run_refuses_its_servers_naming_it() {
    let bench = Bench::new("confine-no-launcher")
        .server("probe", probes(), PROBES)
        .with("confine", json!({ "launcher": "/nonexistent/toolward" }));
    let config = bench.config();
    let pinned = toolward::pin::pin(&config, None, None, std::collections::BTreeMap::new())
        .await
        .unwrap();
    let failure = pinned
        .failures
        .get("probe")
        .expect("refused, not started unconfined")
        .to_string();
    assert!(
        failure.starts_with("server `probe` is not started, rather than started unconfined: the launcher `/nonexistent/toolward`"),
        "{failure}"
    );
    bench.assert_no_processes_left();
}

#[tokio::test]
async fn check_names_each_server_confined_with_the_landlock_abi() {
    let Some(launcher) = launcher() else { return };
    let bench = Bench::new("confine-check").server("probe", probes(), PROBES);
    bench.pin().await;
    let output = Command::new(&launcher)
        .args(["check", "--config"])
        .arg(bench.path().join("toolward.json"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("  confined    Landlock ABI "), "{stdout}");
}

/// Config of the real `server` confined, serving (when it serves folders) `sandbox` beside
/// the state folder.
async fn start_real(
    server: &crate::real::RealServer,
    dir: &Path,
    launcher: &Path,
    entry: Value,
) -> Toolward {
    let config = json!({
        "mcpServers": { server.name: entry },
        "rules": { "file": "rules.json" },
        "manifest": "manifest.json",
        "state_dir": "state",
        "audit": { "file": "state/audit.jsonl", "sync": "none" },
        "confine": { "launcher": launcher },
    });
    let config = Config::from_value(config, dir).unwrap();
    let pinned = toolward::pin::pin(&config, None, None, BTreeMap::new())
        .await
        .unwrap();
    assert!(pinned.failures.is_empty(), "{:?}", pinned.failures);
    let tools: serde_json::Map<String, Value> = pinned.manifest.servers[server.name]
        .tools
        .keys()
        .map(|t| {
            (
                t.clone(),
                json!({ "effect": "read-only", "allow_hint_mismatch": true }),
            )
        })
        .collect();
    std::fs::write(
        dir.join("rules.json"),
        json!({ "servers": { server.name: { "tools": tools } } }).to_string(),
    )
    .unwrap();
    pinned.manifest.write(&config.manifest).unwrap();
    let toolward = Toolward::start(config).await.unwrap();
    assert!(confinement(&toolward, server.name).confined);
    toolward
}

async fn call_ok(toolward: &Toolward, tool: &str, arguments: Value) -> String {
    let result = toolward
        .call(tool, arguments.as_object().cloned(), Arc::new(DenyAll))
        .await;
    assert!(!result.is_error(), "{tool}: {}", result.result);
    result.text()
}

#[tokio::test]
async fn the_real_filesystem_server_serves_a_folder_beside_the_state_folder_confined() {
    let Some(launcher) = launcher() else { return };
    let Some(server) = crate::real::real_server("filesystem") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sandbox = dir.path().join("sandbox");
    std::fs::create_dir_all(&sandbox).unwrap();
    std::fs::write(sandbox.join("hello.txt"), "hello").unwrap();
    fill_state(&dir.path().join("state"));
    let mut entry = server.entry.clone();
    entry["args"][1] = json!(sandbox.display().to_string());
    let toolward = start_real(&server, dir.path(), &launcher, entry).await;
    let path = |name: &str| json!({ "path": sandbox.join(name) });
    assert_eq!(
        call_ok(&toolward, "filesystem__read_text_file", path("hello.txt")).await,
        "hello"
    );
    let written = json!({ "path": sandbox.join("new.txt"), "content": "from the model" });
    call_ok(&toolward, "filesystem__write_file", written).await;
    assert_eq!(
        std::fs::read_to_string(sandbox.join("new.txt")).unwrap(),
        "from the model"
    );
    let listing = call_ok(&toolward, "filesystem__list_directory", path("")).await;
    assert!(
        listing.contains("hello.txt") && listing.contains("new.txt"),
        "{listing}"
    );
    toolward.shutdown().await;
}

#[tokio::test]
async fn the_real_memory_server_keeps_its_graph_confined() {
    let Some(launcher) = launcher() else { return };
    let Some(server) = crate::real::real_server("memory") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let entry = server.entry.clone();
    let toolward = start_real(&server, dir.path(), &launcher, entry).await;
    let entities = json!({ "entities": [
        { "name": "toolward", "entityType": "project", "observations": ["confines its servers"] }
    ] });
    call_ok(&toolward, "memory__create_entities", entities).await;
    let graph = call_ok(&toolward, "memory__read_graph", json!({})).await;
    assert!(graph.contains("confines its servers"), "{graph}");
    toolward.shutdown().await;
}
