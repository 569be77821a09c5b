//! Helpers shared by the test modules: the repository, the `toolward` binary, a policy
//! component that answers nonsense, and counting a test's processes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The record lines of the audit log at `path`: its lines up to the room (spaces) the writer
/// keeps at its end for the next records.
pub fn audit_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .take_while(|line| !line.is_empty() && !line.starts_with(' '))
        .map(str::to_owned)
        .collect()
}

/// The records of the audit log at `path`, as JSON, in log order.
pub fn audit_records(path: &Path) -> Vec<serde_json::Value> {
    audit_lines(path)
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The scriptable fake MCP server (`tests/fake-server`).
pub const FAKE_SERVER: &str = env!("CARGO_BIN_EXE_toolward-fake-server");

/// Calls `tool` through the whole path with arguments `{"x": 1}`; a held call is denied.
pub async fn call(toolward: &toolward::Toolward, tool: &str) -> toolward::call::CallResult {
    toolward
        .call(
            tool,
            serde_json::json!({"x": 1}).as_object().cloned(),
            std::sync::Arc::new(toolward::approval::DenyAll),
        )
        .await
}

/// Serves `toolward` as `toolward serve` does (`gateway::serve`, the config's gateway
/// settings) over an in-memory duplex; returns the task and the client's end.
pub fn serve_in_memory(
    toolward: &toolward::Toolward,
) -> (
    tokio::task::JoinHandle<Result<(), toolward::gateway::GatewayError>>,
    tokio::io::DuplexStream,
) {
    let (server_end, client_end) = tokio::io::duplex(1 << 20);
    let served = tokio::spawn(toolward::gateway::serve(
        toolward.call_path().clone(),
        Vec::new(),
        toolward::gateway::GatewaySettings::from_config(toolward.config()),
        server_end,
    ));
    (served, client_end)
}

/// The repository's root folder.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The `toolward` binary: `TOOLWARD_BIN` when set (`scripts/test.sh` builds it with the
/// tests), else built here by `cargo build -p toolward --bin toolward` into the target
/// directory this test runs from (it belongs to package `toolward`, so cargo does not hand
/// this package its path).
pub fn toolward_binary() -> Option<&'static Path> {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    let bin = BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("TOOLWARD_BIN") {
            return PathBuf::from(bin);
        }
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().unwrap().parent().unwrap();
        let target_dir = profile_dir.parent().unwrap();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let mut build = Command::new(cargo);
        build
            .args(["build", "--quiet", "-p", "toolward", "--bin", "toolward"])
            .arg("--manifest-path")
            .arg(repo().join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", target_dir);
        if profile_dir.file_name() == Some("release".as_ref()) {
            build.arg("--release");
        }
        let status = build.status().unwrap();
        assert!(status.success(), "building the toolward binary failed");
        profile_dir.join(format!("toolward{}", std::env::consts::EXE_SUFFIX))
    });
    let version = Command::new(bin).arg("--version").output().unwrap();
    assert!(
        version.status.success() && !version.stdout.is_empty(),
        "`{}` does not answer `--version`",
        bin.display()
    );
    Some(bin.as_path())
}

/// A policy component whose `decide` answers a `decision` with case 7, which does not
/// exist: a Rust guest cannot return that, so it is a core module in WAT wrapped by
/// wit-component.
pub fn nonsense_component_bytes() -> Vec<u8> {
    nonsense_component(None)
}

/// Like [`nonsense_component_bytes`], but with `Some(n)` the nonsense goes only to calls of a
/// tool whose name is `n` bytes long; every other call is allowed.
pub fn nonsense_component(only_for_tool_bytes: Option<u32>) -> Vec<u8> {
    let wit = std::fs::read_to_string(repo().join("wit/policy.wit")).unwrap();
    let mut resolve = wit_parser::Resolve::default();
    let pkg = resolve.push_str("policy.wit", &wit).unwrap();
    let world = resolve
        .select_world(&[pkg], Some("policy-component"))
        .unwrap();
    // `decide` gets a pointer to the flattened `call` record: `id`, `server` and `tool` are
    // (pointer, length) pairs, so the tool name's length is at offset 20.
    let answer = match only_for_tool_bytes {
        None => "(i32.store8 (i32.const 16) (i32.const 7))".to_owned(),
        Some(n) => format!(
            "(if (i32.eq (i32.load offset=20 (local.get 0)) (i32.const {n}))
                (then (i32.store8 (i32.const 16) (i32.const 7)))
                (else (i32.store8 (i32.const 16) (i32.const 0))))"
        ),
    };
    let core = wat::parse_str(format!(
        r#"(module
            (memory (export "memory") 1)
            (global $bump (mut i32) (i32.const 1024))
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
              (local $p i32)
              ;; Aligned as asked (parameter 2), so that the host accepts the memory.
              (local.set $p (i32.and
                (i32.add (global.get $bump) (i32.sub (local.get 2) (i32.const 1)))
                (i32.sub (i32.const 0) (local.get 2))))
              (global.set $bump (i32.add (local.get $p) (local.get 3)))
              (local.get $p))
            (func (export "toolward:policy/policy@0.1.0#configure") (param i32 i32) (result i32)
              (i32.store8 (i32.const 0) (i32.const 0))
              (i32.const 0))
            (func (export "toolward:policy/policy@0.1.0#decide") (param i32) (result i32)
              {answer}
              (i32.const 16)))"#
    ))
    .unwrap();
    let mut module = core;
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .unwrap();
    wit_component::ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .validate(true)
        .encode()
        .unwrap()
}

/// A marker unique to one test, to put in the environment of the servers it starts.
pub fn unique_marker(test: &str) -> String {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("toolward-test-{test}-{}-{n}", std::process::id())
}

/// The live processes (zombies left out) whose environment or command line holds `marker`,
/// found by walking `/proc`: every process a test's servers started, however deep and
/// whatever group or session it moved to, inherits the marker from their environment.
pub fn marked_processes(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let holds = |file: &str| {
            std::fs::read(entry.path().join(file)).is_ok_and(|bytes| {
                bytes
                    .windows(marker.len())
                    .any(|window| window == marker.as_bytes())
            })
        };
        let zombie = std::fs::read_to_string(entry.path().join("stat")).map_or(true, |stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        });
        if !zombie && (holds("environ") || holds("cmdline")) {
            found.push(pid);
        }
    }
    found
}

/// Waits until `marked_processes(marker)` has `count` processes (at most 20 s).
pub fn wait_for_processes(marker: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = marked_processes(marker);
        if found.len() >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {count} processes started: {found:?}",
            found.len()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Asserts that no process carries `marker`, giving the kernel up to 2 s to finish ends
/// already under way (a process killed a moment ago can still be listed).
pub fn assert_no_processes_left(marker: &str) {
    assert_no_processes_left_within(marker, Duration::from_secs(2));
}

/// Asserts that no process carries `marker` within `limit`.
pub fn assert_no_processes_left_within(marker: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let left = marked_processes(marker);
        if left.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            let described: Vec<String> = left
                .iter()
                .map(|pid| {
                    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    format!(
                        "{pid} `{}`",
                        String::from_utf8_lossy(&cmdline).replace('\0', " ")
                    )
                })
                .collect();
            panic!("{} processes left: {}", left.len(), described.join(", "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `command` to its end with its output captured, and reads its peak resident memory
/// (`VmHWM`, a high-water mark) from `/proc` until it exits, before reaping it: the output,
/// and the peak in KiB.
pub fn run_measuring_peak_memory(command: &mut Command) -> (std::process::Output, u64) {
    use std::io::Read;
    let mut child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stdout.read_to_end(&mut bytes).unwrap();
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stderr.read_to_end(&mut bytes).unwrap();
        bytes
    });
    let mut peak = 0;
    // The process stays a zombie, its `/proc` entry without memory figures, until waited
    // for: the last figure read is the peak up to its last few milliseconds.
    while let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        let Some(line) = status.lines().find(|l| l.starts_with("VmHWM:")) else {
            break;
        };
        peak = line
            .split_whitespace()
            .nth(1)
            .and_then(|kib| kib.parse().ok())
            .unwrap_or(peak);
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = child.wait().unwrap();
    let output = std::process::Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    (output, peak)
}

/// The compiled-component cache of the state folder at `path` (created when missing).
pub fn cache_in(path: &Path) -> toolward::component::ComponentCache {
    let state = toolward::store::StateDir::open(path).unwrap();
    toolward::component::ComponentCache::open(&state).unwrap()
}

/// One component host for the tests that run large guests (the JavaScript and Python
/// policy components, ~12 to 20 MB each), with one compiled-component cache in
/// `$CARGO_TARGET_TMPDIR/guest-cache`: each component is compiled once per content, across
/// the tests of a run and across runs.
pub fn guest_host() -> &'static toolward::component::ComponentHost {
    static HOST: std::sync::OnceLock<toolward::component::ComponentHost> =
        std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        let cache = cache_in(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("guest-cache"));
        toolward::component::ComponentHost::new(
            toolward::component::GuestLimits::default(),
            Some(cache),
        )
        .unwrap()
    })
}

/// The state folder of `config`, opened.
pub fn state_of(config: &toolward::config::Config) -> toolward::store::StateDir {
    toolward::store::StateDir::open(&config.state_dir).unwrap()
}

/// The uid the ownership tests give a file to: `65534` (nobody) where the tests run as root,
/// who alone can give a file away. Elsewhere `None`, said on stderr, and the caller skips
/// the rest of its test: a non-root user cannot make a file another user's.
pub fn other_user() -> Option<u32> {
    const NOBODY: u32 = 65534;
    if toolward::identity::euid() == 0 {
        Some(NOBODY)
    } else {
        eprintln!(
            "SKIPPED: the ownership part of this test needs root, to chown a file to uid {NOBODY}"
        );
        None
    }
}

/// A guest toolchain the policy-language tests build with: `$variable`, else `default` in
/// the real servers' folder (`tests/real-servers/install.sh` installs both), when `probe`
/// (a path inside it; `None`: the path itself) is a file. Otherwise `None` after saying why
/// on stderr, so the tests pass where it is not installed, except in CI (`CI` set), where
/// `test` fails: CI must build the `language` guests.
pub fn guest_toolchain(
    test: &str,
    language: &str,
    variable: &str,
    default: &str,
    probe: Option<&str>,
) -> Option<PathBuf> {
    let path = match std::env::var_os(variable) {
        Some(path) => PathBuf::from(path),
        None => crate::real::real_servers().join(default),
    };
    let probed = probe.map_or_else(|| path.clone(), |inside| path.join(inside));
    if probed.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {} is not installed and CI must build the {language} guests: run tests/real-servers/install.sh",
        probed.display()
    );
    eprintln!(
        "{test}: skipped: {} is not installed; run tests/real-servers/install.sh",
        probed.display()
    );
    None
}
