//! Behaviour of the stdio transport against scripted fake servers and, when installed,
//! `@modelcontextprotocol/server-everything`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::incoming::LogBudget;
use super::lifecycle::{META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION};
use super::*;

/// A minimal MCP server in Python. `argv[1]` is a mode, `argv[2]` a directory for records.
const FAKE_SERVER: &str = r#"
import json, os, subprocess, sys

mode, state = sys.argv[1], sys.argv[2]

def send_raw(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()

def send(obj):
    send_raw(json.dumps(obj))

def record(name, value):
    with open(os.path.join(state, name), "a") as f:
        f.write(json.dumps(value) + "\n")

LISTING = '{"tools":[{"name":"z","description":"caf\\u00e9 \u00e9","inputSchema":{"type":"object","properties":{"n":{"type":"integer","maximum":9007199254740993,"minimum":1.0}}}}],"zeta":1, "alpha" : 2}'

if mode == "family":
    subprocess.Popen(["sh", "-c", FAMILY, "sh", os.path.join(state, "pids")])

while True:
    line = sys.stdin.readline()
    if not line:
        break
    line = line.strip()
    if not line:
        continue
    msg = json.loads(line)
    method = msg.get("method")
    mid = msg.get("id")
    if method == "server/discover":
        record("discover", msg["params"])
        if mode == "modern":
            send({"jsonrpc": "2.0", "id": mid, "result": {"supportedVersions": ["2026-07-28"],
                  "capabilities": {"tools": {}}, "resultType": "complete",
                  "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "modern", "version": "9.0"}}}})
        elif mode == "future-only":
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32022, "message": "unsupported",
                  "data": {"supported": ["2099-01-01"], "requested": "2026-07-28"}}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}})
    elif method == "initialize":
        record("initialize", msg["params"])
        version = "1999-01-01" if mode == "bad-version" else msg["params"]["protocolVersion"]
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": version,
              "capabilities": {"tools": {"listChanged": True}},
              "serverInfo": {"name": "fake", "version": "1.2.3"}}})
    elif method == "notifications/initialized":
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hello"}})
    elif method == "notifications/cancelled":
        record("cancelled", msg["params"])
    elif method == "tools/list":
        record("list_params", msg.get("params"))
        if mode == "oversize-list":
            send_raw('{"jsonrpc":"2.0","id":%d,"result":{"tools":[],"pad":"%s"}}' % (mid, "x" * (2 * 1024 * 1024)))
        elif mode == "garbage-list":
            send_raw("this is not json")
        else:
            send_raw('{"result":%s,"jsonrpc":"2.0","id":%s}' % (LISTING, json.dumps(mid)))
    elif method == "tools/call":
        name = msg["params"]["name"]
        args = msg["params"].get("arguments", {})
        if name == "env":
            with open("/proc/self/environ", "rb") as f:
                raw = f.read().decode("utf-8", "replace")
            env = dict(item.split("=", 1) for item in raw.split("\0") if item)
            text = json.dumps(env)
        elif name == "sleep":
            continue
        elif name == "progress":
            token = msg["params"]["_meta"]["progressToken"]
            for i in range(3):
                send({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": token, "progress": i + 1, "total": 3}})
            text = "done"
        elif name == "ask":
            send({"jsonrpc": "2.0", "id": "s1", "method": args["method"], "params": {}})
            text = sys.stdin.readline().strip()
        elif name == "stderr_flood":
            sys.stderr.write(("e" * 99 + "\n") * 2000 + "END-MARKER\n")
            sys.stderr.flush()
            sys.exit(3)
        elif name == "read":
            path = os.path.join(state, args["file"])
            text = open(path).read() if os.path.exists(path) else ""
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": "unknown tool `" + name + "`\nsecond line"}})
            continue
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}], "isError": False}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "nope"}})
"#;

/// Started by the `family` mode: two children in the group (one ignoring `SIGTERM`), one
/// descendant that left the group with `setsid` while its parent lives, and one that left it
/// and lost its parent (reparented to the subreaper). Each pid is written to `$1`; the last
/// one's by its parent before the parent exits, because from then on it is an orphan that
/// any concurrent close in this test process may sweep (see `process::reap_orphans`), and
/// it must be on record even if that happens before it could write it itself.
const FAMILY: &str = r#"
sleep 1000 & echo $! >> "$1"
(trap '' TERM; exec sleep 1001) & echo $! >> "$1"
setsid sh -c 'echo $$ >> "$1"; exec sleep 1002' sh "$1" &
sh -c 'setsid sh -c "trap \"\" TERM; exec sleep 1003" & echo $! >> "$1"' sh "$1"
wait
"#;

const _: () = {
    const fn shareable<T: Send + Sync + Clone>() {}
    shareable::<Upstream>();
};

const SENTINEL: &str = "TOOLWARD_SENTINEL_SECRET";
const PASSED: &str = "TOOLWARD_PASSED_THROUGH";

struct Fixture {
    python: PathBuf,
}

/// Everything that changes the test process, done once before any test spawns anything: the
/// sentinel variables, the subreaper, and the real Python interpreter (the `python3` on PATH
/// may be a pyenv shim that adds variables of its own).
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        #[allow(
            unsafe_code,
            reason = "set once before any test thread spawns a process"
        )]
        // SAFETY: every test calls `fixture()` before anything that reads the environment.
        unsafe {
            std::env::set_var(SENTINEL, "sentinel-value-must-not-leak");
            std::env::set_var(PASSED, "passed-value");
        }
        #[cfg(target_os = "linux")]
        become_subreaper().unwrap();
        let output = std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .unwrap();
        let python = PathBuf::from(String::from_utf8(output.stdout).unwrap().trim());
        Fixture { python }
    })
}

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let script = FAKE_SERVER.replace(
            "FAMILY,",
            &format!("{},", serde_json::to_string(FAMILY).unwrap()),
        );
        std::fs::write(dir.path().join("server.py"), script).unwrap();
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn python(&self, mode: &str) -> StdioSpec {
        StdioSpec {
            command: fixture().python.display().to_string(),
            args: vec![
                self.path().join("server.py").display().to_string(),
                mode.to_owned(),
                self.path().display().to_string(),
            ],
            ..StdioSpec::default()
        }
    }

    fn shell(&self, script: &str) -> StdioSpec {
        StdioSpec {
            command: String::from("sh"),
            args: vec![String::from("-c"), script.to_owned()],
            ..StdioSpec::default()
        }
    }
}

fn quick_limits() -> TransportLimits {
    TransportLimits {
        start_timeout: Duration::from_secs(20),
        request_timeout: Duration::from_secs(20),
        max_frame_bytes: MAX_FRAME_BYTES,
        max_http_body_bytes: MAX_HTTP_BODY_BYTES,
        close_grace: Duration::from_millis(300),
    }
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_declares_no_capabilities_and_names_toolward() {
    fixture();
    let scratch = Scratch::new();
    let up = Upstream::connect_stdio("fake", &scratch.python("normal"), &quick_limits())
        .await
        .unwrap();
    assert_eq!(up.identity().name, "fake");
    assert_eq!(up.identity().version, "1.2.3");
    assert_eq!(up.identity().protocol_version, PROTOCOL_VERSION);
    let sent: Value =
        serde_json::from_str(&std::fs::read_to_string(scratch.path().join("initialize")).unwrap())
            .unwrap();
    assert_eq!(sent["capabilities"], json!({}));
    assert_eq!(sent["clientInfo"]["name"], "toolward");
    assert_eq!(sent["protocolVersion"], PROTOCOL_VERSION);
    up.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_result_is_captured_as_the_exact_bytes_sent() {
    fixture();
    let scratch = Scratch::new();
    let up = Upstream::connect_stdio("fake", &scratch.python("normal"), &quick_limits())
        .await
        .unwrap();
    let page = up.list_tools_page(None).await.unwrap();
    let expected = r#"{"tools":[{"name":"z","description":"caf\u00e9 é","inputSchema":{"type":"object","properties":{"n":{"type":"integer","maximum":9007199254740993,"minimum":1.0}}}}],"zeta":1, "alpha" : 2}"#;
    assert_eq!(String::from_utf8(page).unwrap(), expected);
    // The notification was sent before the answer, so it has been handled by now.
    assert!(up.tools_list_changed());
    assert!(up.is_failed().is_none());
    up.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_answers_discover_speaks_2026_07_28_with_context_on_every_request() {
    fixture();
    let scratch = Scratch::new();
    let up = Upstream::connect_stdio("modern", &scratch.python("modern"), &quick_limits())
        .await
        .unwrap();
    assert_eq!(up.identity().protocol_version, DISCOVER_PROTOCOL_VERSION);
    assert_eq!(
        (up.identity().name.as_str(), up.identity().version.as_str()),
        ("modern", "9.0")
    );
    assert!(
        !scratch.path().join("initialize").exists(),
        "initialize was sent"
    );
    up.list_tools_page(None).await.unwrap();
    let sent: Value =
        serde_json::from_str(&std::fs::read_to_string(scratch.path().join("list_params")).unwrap())
            .unwrap();
    assert_eq!(sent["_meta"][META_PROTOCOL_VERSION], "2026-07-28");
    assert_eq!(sent["_meta"][META_CLIENT_CAPABILITIES], json!({}));
    assert_eq!(sent["_meta"][META_CLIENT_INFO]["name"], "toolward");
    up.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_know_discover_gets_initialize_and_no_request_context() {
    fixture();
    let scratch = Scratch::new();
    let up = Upstream::connect_stdio("legacy", &scratch.python("normal"), &quick_limits())
        .await
        .unwrap();
    assert_eq!(up.identity().protocol_version, PROTOCOL_VERSION);
    assert!(scratch.path().join("discover").exists(), "no probe");
    up.list_tools_page(None).await.unwrap();
    let sent: Value =
        serde_json::from_str(&std::fs::read_to_string(scratch.path().join("list_params")).unwrap())
            .unwrap();
    assert!(sent.get("_meta").is_none(), "{sent}");
    up.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_speaks_only_unknown_versions_is_refused_naming_them() {
    fixture();
    let scratch = Scratch::new();
    let error = Upstream::connect_stdio("future", &scratch.python("future-only"), &quick_limits())
        .await
        .unwrap_err();
    assert!(
        matches!(error, TransportError::UnsupportedProtocol { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("`2099-01-01`"), "{error}");
    assert!(!scratch.path().join("initialize").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_protocol_version_is_refused_naming_the_server() {
    fixture();
    let scratch = Scratch::new();
    let error = Upstream::connect_stdio("oldie", &scratch.python("bad-version"), &quick_limits())
        .await
        .unwrap_err();
    assert!(
        matches!(error, TransportError::UnsupportedProtocol { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("`oldie`"), "{error}");
    assert!(error.to_string().contains("`1999-01-01`"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_over_the_frame_limit_fails_the_server_and_names_it() {
    fixture();
    let scratch = Scratch::new();
    let limits = TransportLimits {
        max_frame_bytes: 1024 * 1024,
        ..quick_limits()
    };
    let up = Upstream::connect_stdio("big", &scratch.python("oversize-list"), &limits)
        .await
        .unwrap();
    let pid = up.process_id().unwrap();
    let error = up.list_tools_page(None).await.unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(
            &error,
            TransportError::Failed {
                reason: FailureReason::FrameTooLong { limit: 1048576 },
                ..
            }
        ),
        "{message}"
    );
    assert!(message.contains("server `big`"), "{message}");
    assert!(up.is_failed().unwrap().contains("frame limit"));
    // Its group is ended without anyone calling `close`.
    eventually("the failed server's process is gone", || !alive(pid)).await;
    let again = up.list_tools_page(None).await.unwrap_err();
    assert!(again.to_string().contains("frame limit"), "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_line_is_refused_without_being_read_whole() {
    fixture();
    let scratch = Scratch::new();
    let limits = TransportLimits {
        max_frame_bytes: 64 * 1024,
        ..quick_limits()
    };
    // An endless stream of bytes without a newline, as the first output.
    let spec = scratch.shell("exec cat /dev/zero");
    let error = Upstream::connect_stdio("endless", &spec, &limits)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            TransportError::Failed {
                reason: FailureReason::FrameTooLong { limit: 65536 },
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("`endless`"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_that_is_not_json_rpc_fails_the_server() {
    fixture();
    let scratch = Scratch::new();
    let error = Upstream::connect_stdio(
        "chatty",
        &scratch.shell("echo 'Server listening on port 3000'; sleep 30"),
        &quick_limits(),
    )
    .await
    .unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(
            &error,
            TransportError::Failed {
                reason: FailureReason::NotJsonRpc { .. },
                ..
            }
        ),
        "{message}"
    );
    // The server's text stays out of the reason (which reaches the client and the audit):
    // the log has it.
    assert!(
        message.contains("server `chatty`")
            && message.contains("the line's start is in toolward's log")
            && !message.contains("Server listening"),
        "{message}"
    );

    let up = Upstream::connect_stdio("garbled", &scratch.python("garbage-list"), &quick_limits())
        .await
        .unwrap();
    let error = up.list_tools_page(None).await.unwrap_err();
    assert!(
        matches!(
            &error,
            TransportError::Failed {
                reason: FailureReason::NotJsonRpc { .. },
                ..
            }
        ),
        "{error}"
    );
    assert!(up.is_failed().is_some());

    let error = Upstream::connect_stdio(
        "wrongversion",
        &scratch.shell(r#"echo '{"jsonrpc":"1.0","id":1,"result":{}}'; sleep 30"#),
        &quick_limits(),
    )
    .await
    .unwrap_err();
    assert!(
        error.to_string().contains("`jsonrpc` is not `2.0`"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stderr_is_kept_bounded_and_shown_when_the_server_fails() {
    fixture();
    let scratch = Scratch::new();
    let up = Upstream::connect_stdio("noisy", &scratch.python("normal"), &quick_limits())
        .await
        .unwrap();
    let error = up
        .call_tool("stderr_flood", Map::new(), Duration::from_secs(10), None)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("server `noisy` failed"),
        "{error}"
    );
    eventually("standard error is drained", || {
        up.stderr_tail().contains("END-MARKER")
    })
    .await;
    let tail = up.stderr_tail();
    assert!(tail.len() <= STDERR_TAIL_BYTES, "{} bytes kept", tail.len());
    assert!(
        tail.len() > STDERR_TAIL_BYTES - 200,
        "{} bytes kept",
        tail.len()
    );
    up.close().await;

    // A server that dies at start: its standard error is in the error, on one line.
    let error = Upstream::connect_stdio(
        "broken",
        &scratch.shell("echo 'boom: no config' >&2; echo second >&2; exit 1"),
        &quick_limits(),
    )
    .await
    .unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("server `broken`") && message.contains("boom: no config\\nsecond"),
        "{message}"
    );
    assert!(!message.contains('\n'), "{message}");
    assert!(message.contains("exit status: 1"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environment_is_built_from_nothing() {
    fixture();
    let scratch = Scratch::new();
    let mut spec_a = scratch.python("normal");
    spec_a
        .env
        .insert(String::from("SERVER_TOKEN"), String::from("token-for-a"));
    spec_a.pass_env.push(String::from(PASSED));
    let spec_b = scratch.python("normal");
    let a = Upstream::connect_stdio("a", &spec_a, &quick_limits())
        .await
        .unwrap();
    let b = Upstream::connect_stdio("b", &spec_b, &quick_limits())
        .await
        .unwrap();

    let env_of = |text: &str| -> BTreeMap<String, String> { serde_json::from_str(text).unwrap() };
    let seen_a = env_of(text_of(
        &a.call_tool("env", Map::new(), Duration::from_secs(10), None)
            .await
            .unwrap(),
    ));
    let seen_b = env_of(text_of(
        &b.call_tool("env", Map::new(), Duration::from_secs(10), None)
            .await
            .unwrap(),
    ));

    let inherited: BTreeSet<String> = INHERITED_VARIABLES
        .iter()
        .filter(|name| std::env::var_os(name).is_some())
        .map(|name| name.to_string())
        .collect();
    let mut expected_a = inherited.clone();
    expected_a.extend([String::from("SERVER_TOKEN"), String::from(PASSED)]);
    assert_eq!(seen_a.keys().cloned().collect::<BTreeSet<_>>(), expected_a);
    assert_eq!(seen_b.keys().cloned().collect::<BTreeSet<_>>(), inherited);
    assert_eq!(seen_a["SERVER_TOKEN"], "token-for-a");
    assert_eq!(seen_a[PASSED], "passed-value");
    assert_eq!(seen_a["PATH"], std::env::var("PATH").unwrap());
    // The leader's environment as the kernel has it, not as the interpreter reports it.
    let environ = std::fs::read(format!("/proc/{}/environ", b.process_id().unwrap())).unwrap();
    assert!(!String::from_utf8_lossy(&environ).contains(SENTINEL));
    a.close().await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_variable_name_is_refused_before_starting() {
    fixture();
    let scratch = Scratch::new();
    let mut spec = scratch.python("normal");
    spec.pass_env.push(String::from("A=B"));
    let error = Upstream::connect_stdio("s", &spec, &quick_limits())
        .await
        .unwrap_err();
    assert!(
        matches!(error, TransportError::InvalidVariableName { .. }),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_program_is_a_spawn_error_naming_the_server() {
    fixture();
    let spec = StdioSpec {
        command: String::from("/nonexistent/toolward-test-server"),
        ..StdioSpec::default()
    };
    let error = Upstream::connect_stdio("ghost", &spec, &quick_limits())
        .await
        .unwrap_err();
    assert!(matches!(error, TransportError::Spawn { .. }), "{error}");
    assert!(error.to_string().contains("`ghost`"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_hits_the_start_timeout() {
    fixture();
    let scratch = Scratch::new();
    let limits = TransportLimits {
        start_timeout: Duration::from_millis(300),
        ..quick_limits()
    };
    let started = Instant::now();
    let error = Upstream::connect_stdio(
        "mute",
        &scratch.shell("echo waiting >&2; exec sleep 30"),
        &limits,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, TransportError::StartTimeout { .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("server `mute`") && error.to_string().contains("waiting"),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_times_out_is_cancelled_upstream() {
    fixture();
    let scratch = Scratch::new();
    let up = Upstream::connect_stdio("slow", &scratch.python("normal"), &quick_limits())
        .await
        .unwrap();
    let error = up
        .call_tool("sleep", Map::new(), Duration::from_millis(200), None)
        .await
        .unwrap_err();
    assert!(
        matches!(error, TransportError::RequestTimeout { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("server `slow`"), "{error}");

    // A call whose future is dropped is cancelled too.
    let dropped = tokio::spawn({
        let up = up.clone();
        async move {
            up.call_tool("sleep", Map::new(), Duration::from_secs(60), None)
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    dropped.abort();
    let _ = dropped.await;

    let read = |file: &str| {
        let mut arguments = Map::new();
        arguments.insert(String::from("file"), json!(file));
        arguments
    };
    let mut cancelled = String::new();
    for _ in 0..50 {
        cancelled = text_of(
            &up.call_tool("read", read("cancelled"), Duration::from_secs(10), None)
                .await
                .unwrap(),
        )
        .to_owned();
        if cancelled.lines().count() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reasons: Vec<Value> = cancelled
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(reasons.len(), 2, "{cancelled}");
    assert_eq!(reasons[0]["reason"], "timeout");
    assert!(reasons.iter().all(|reason| reason["requestId"].is_u64()));
    assert!(up.is_failed().is_none());
    up.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_goes_to_the_caller_of_its_call() {
    fixture();
    let scratch = Scratch::new();
    let up = Upstream::connect_stdio("p", &scratch.python("normal"), &quick_limits())
        .await
        .unwrap();
    let (sink, mut progress) = mpsc::unbounded_channel();
    let result = up
        .call_tool("progress", Map::new(), Duration::from_secs(10), Some(sink))
        .await
        .unwrap();
    assert_eq!(text_of(&result), "done");
    let mut seen = Vec::new();
    while let Ok(update) = progress.try_recv() {
        seen.push(update["progress"].as_u64().unwrap());
    }
    assert_eq!(seen, [1, 2, 3]);
    up.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_from_the_server_are_refused_except_ping() {
    fixture();
    let scratch = Scratch::new();
    let up = Upstream::connect_stdio("asker", &scratch.python("normal"), &quick_limits())
        .await
        .unwrap();
    for method in ["roots/list", "sampling/createMessage", "elicitation/create"] {
        let mut arguments = Map::new();
        arguments.insert(String::from("method"), json!(method));
        let reply: Value = serde_json::from_str(text_of(
            &up.call_tool("ask", arguments, Duration::from_secs(10), None)
                .await
                .unwrap(),
        ))
        .unwrap();
        assert_eq!(reply["id"], "s1");
        assert_eq!(reply["error"]["code"], -32601, "{reply}");
        assert!(reply.get("result").is_none());
    }
    let mut arguments = Map::new();
    arguments.insert(String::from("method"), json!("ping"));
    let reply: Value = serde_json::from_str(text_of(
        &up.call_tool("ask", arguments, Duration::from_secs(10), None)
            .await
            .unwrap(),
    ))
    .unwrap();
    assert_eq!(reply["result"], json!({}));
    up.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_rpc_error_names_the_server_and_the_method_on_one_line() {
    fixture();
    let scratch = Scratch::new();
    let up = Upstream::connect_stdio("erring", &scratch.python("normal"), &quick_limits())
        .await
        .unwrap();
    let error = up
        .call_tool("no-such-tool", Map::new(), Duration::from_secs(10), None)
        .await
        .unwrap_err();
    assert!(
        matches!(error, TransportError::Rpc { code: -32602, .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("server `erring` answered `tools/call`"),
        "{message}"
    );
    assert!(
        !message.contains('\n') && message.contains("'no-such-tool'"),
        "{message}"
    );
    assert!(up.is_failed().is_none());
    up.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_is_prompt_for_a_server_that_exits_when_its_input_closes() {
    fixture();
    let scratch = Scratch::new();
    let limits = TransportLimits {
        close_grace: Duration::from_secs(5),
        ..quick_limits()
    };
    let up = Upstream::connect_stdio("polite", &scratch.python("normal"), &limits)
        .await
        .unwrap();
    let pid = up.process_id().unwrap();
    let other = up.clone();
    let started = Instant::now();
    up.close().await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(!alive(pid));
    assert_eq!(other.is_failed().as_deref(), Some("it was closed"));
    let error = other.list_tools_page(None).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("server `polite` failed: it was closed"),
        "{error}"
    );
}

fn family_pids(scratch: &Scratch) -> Vec<u32> {
    std::fs::read_to_string(scratch.path().join("pids"))
        .unwrap_or_default()
        .lines()
        .map(|line| line.trim().parse().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_ends_the_group_and_the_descendants_that_left_it() {
    fixture();
    let scratch = Scratch::new();
    let up = Upstream::connect_stdio("family", &scratch.python("family"), &quick_limits())
        .await
        .unwrap();
    eventually("all four descendants have started", || {
        family_pids(&scratch).len() == 4
    })
    .await;
    let mut pids = family_pids(&scratch);
    pids.push(up.process_id().unwrap());
    assert!(pids.iter().all(|pid| alive(*pid)), "{pids:?}");
    up.close().await;
    let survivors: Vec<u32> = pids.iter().copied().filter(|pid| alive(*pid)).collect();
    assert!(survivors.is_empty(), "survivors {survivors:?} of {pids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_handle_ends_the_group() {
    fixture();
    let scratch = Scratch::new();
    let up = Upstream::connect_stdio("dropped", &scratch.python("family"), &quick_limits())
        .await
        .unwrap();
    eventually("all four descendants have started", || {
        family_pids(&scratch).len() == 4
    })
    .await;
    let mut pids = family_pids(&scratch);
    pids.push(up.process_id().unwrap());
    drop(up);
    eventually("every process has ended", || {
        pids.iter().all(|pid| !alive(*pid))
    })
    .await;
}

/// Where the real servers are installed: `TOOLWARD_REAL_SERVERS`, else the repository's
/// `tests/real-servers/.installed`.
fn real_servers() -> PathBuf {
    match std::env::var_os("TOOLWARD_REAL_SERVERS") {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/real-servers/.installed"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_sees_no_foreign_variable_and_lists_13_tools() {
    fixture();
    let entry =
        real_servers().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !entry.is_file() {
        eprintln!(
            "skipped: {} is not installed; run tests/real-servers/install.sh",
            entry.display()
        );
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let spec = StdioSpec {
        command: String::from("node"),
        args: vec![entry.display().to_string(), String::from("stdio")],
        env: BTreeMap::from([(String::from("HOME"), home.path().display().to_string())]),
        ..StdioSpec::default()
    };
    let up = Upstream::connect_stdio("everything", &spec, &quick_limits())
        .await
        .unwrap();
    assert!(SUPPORTED_PROTOCOL_VERSIONS.contains(&up.identity().protocol_version.as_str()));

    let page = up.list_tools_page(None).await.unwrap();
    let listing: Value = serde_json::from_slice(&page).unwrap();
    let tools = listing["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 13, "{listing}");
    assert!(listing.get("nextCursor").is_none());
    assert!(tools.iter().any(|tool| tool["name"] == "get-env"));

    let result = up
        .call_tool("get-env", Map::new(), Duration::from_secs(10), None)
        .await
        .unwrap();
    let text = text_of(&result);
    assert!(!text.contains(SENTINEL), "{text}");
    assert!(!text.contains(PASSED), "{text}");
    assert!(text.contains("PATH"), "{text}");
    let pid = up.process_id().unwrap();
    up.close().await;
    assert!(!alive(pid));
}

#[test]
fn a_servers_log_lines_are_bounded_per_second_and_the_dropped_ones_counted() {
    let start = Instant::now();
    let mut budget = LogBudget::new(start);
    let written = (0..1000)
        .filter(|_| budget.admit(start).0)
        .count();
    assert_eq!(written, MAX_SERVER_LOG_LINES_PER_SECOND as usize);
    let (write, dropped) = budget.admit(start + Duration::from_millis(1001));
    assert!(write);
    assert_eq!(dropped, 1000 - u64::from(MAX_SERVER_LOG_LINES_PER_SECOND));
    assert_eq!(budget.admit(start + Duration::from_millis(1002)), (true, 0));
}
