//! Python policy components under the WASI that grants nothing (issue 19): the example
//! (`examples/python-policy`) passes the Rust example's cases, and hostile guests
//! (`python_policy/hostile.py`) get nothing from sockets, files or the environment, are
//! denied within their bounds when they loop, allocate or wait on a clock, and have their
//! output captured and bounded.
//!
//! The components are built with componentize-py (`tests/real-servers/install.sh` installs
//! it, pinned; `TOOLWARD_COMPONENTIZE_PY` overrides its path) once per source, into
//! `CARGO_TARGET_TMPDIR/python-policy`, and every test loads them through one
//! [`ComponentHost`] whose compile cache lives there too: an 18 MB component is compiled
//! once, not once per test. Without componentize-py the tests say so and pass.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use toolward::component::{CallView, ComponentHost, Decision, Effect, GuestLimits, Policy};
use toolward::policy_test::{CasesFile, run_cases};

use crate::support::repo;

/// The folder the built components and the compile cache are kept in, across runs.
fn shared_folder() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-policy")
}

/// componentize-py: `TOOLWARD_COMPONENTIZE_PY`, else the pinned one `install.sh` puts in the
/// real servers' folder; without it the tests say so and pass, except in CI (`CI` set), where
/// they fail.
fn componentize_py() -> Option<PathBuf> {
    crate::support::guest_toolchain(
        "python_policy",
        "Python",
        "TOOLWARD_COMPONENTIZE_PY",
        "componentize-venv/bin/componentize-py",
        None,
    )
}

/// Builds module `module` of folder `dir` (world `policy-component` of `wit/`) into the
/// shared folder, named by the digest of its source, unless that build is there already.
fn build(dir: &Path, module: &str) -> Option<PathBuf> {
    static BUILDING: Mutex<()> = Mutex::new(());
    let componentize = componentize_py()?;
    let _one_at_a_time = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let source = std::fs::read(dir.join(format!("{module}.py"))).unwrap();
    let wit = std::fs::read(repo().join("wit/policy.wit")).unwrap();
    let digest = toolward::canonical::sha256_hex(&[source, wit].concat());
    let out = shared_folder().join(format!("{module}-{}.wasm", &digest[..16]));
    if out.is_file() {
        return Some(out);
    }
    std::fs::create_dir_all(shared_folder()).unwrap();
    let partial = out.with_extension("partial");
    let status = Command::new(componentize)
        .args(["-d"])
        .arg(repo().join("wit"))
        .args(["-w", "policy-component", "componentize", "-p"])
        .arg(dir)
        .arg(module)
        .arg("-o")
        .arg(&partial)
        .current_dir(shared_folder())
        .status()
        .unwrap();
    assert!(status.success(), "componentize-py failed on {module}");
    std::fs::rename(&partial, &out).unwrap();
    Some(out)
}

/// The host every test here loads through, its compile cache in the shared folder.
fn host() -> &'static ComponentHost {
    static HOST: OnceLock<ComponentHost> = OnceLock::new();
    HOST.get_or_init(|| {
        let cache = shared_folder().join("state");
        std::fs::create_dir_all(&cache).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        ComponentHost::new(
            GuestLimits::default(),
            Some(crate::support::cache_in(&cache)),
        )
        .unwrap()
    })
}

/// The example policy, built once.
fn example() -> Option<PathBuf> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| build(&repo().join("examples/python-policy"), "app"))
        .clone()
}

/// The hostile guest, configured once with `settings`.
fn hostile(settings: &str) -> Option<Policy> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    let path = BUILT
        .get_or_init(|| build(&repo().join("tests/all/python_policy"), "hostile"))
        .clone()?;
    let loaded = host()
        .load(&std::fs::read(&path).unwrap(), "hostile.py")
        .unwrap();
    Some(host().configure_policy(&loaded, settings).unwrap())
}

fn call(tool: &str, arguments: &str) -> CallView {
    CallView {
        id: "c1".into(),
        server: "probe".into(),
        tool: tool.into(),
        effect: Effect::ReadOnly,
        arguments: arguments.into(),
        arguments_sha256: toolward::canonical::sha256_hex(arguments.as_bytes()),
        principal: "operator".into(),
        session: "s1".into(),
        principal_attributes: Vec::new(),
        labels: Default::default(),
        time_ms: 1_700_000_000_123,
        facts: Vec::new(),
    }
}

fn deny_reason(decision: Decision) -> String {
    match decision {
        Decision::Deny(reason) => reason,
        other => panic!("expected a deny, got {other:?}"),
    }
}

#[test]
fn python_example_passes_the_rust_examples_cases() {
    let Some(wasm) = example() else { return };
    let loaded = host()
        .load(&std::fs::read(&wasm).unwrap(), "python-policy")
        .unwrap();
    assert!(loaded.imports_wasi(), "{:?}", loaded.imports());
    let cases = CasesFile::from_path(&repo().join("examples/custom-policy/cases.json")).unwrap();
    let report = run_cases(host(), &loaded, &cases);
    assert!(report.all_passed(), "{}", report.render());
    assert_eq!(report.passed, cases.cases.len());
}

#[test]
fn python_guest_opening_a_socket_or_looking_up_a_name_fails() {
    let Some(policy) = hostile("") else { return };
    let socket = deny_reason(policy.decide(&call("socket", "{}")));
    assert!(socket.starts_with("socket: failed with"), "{socket}");
    let lookup = deny_reason(policy.decide(&call("lookup", "{}")));
    assert!(lookup.starts_with("lookup: failed with"), "{lookup}");
}

#[test]
fn python_guest_reading_a_file_or_listing_a_folder_fails() {
    let Some(policy) = hostile("") else { return };
    let file = deny_reason(policy.decide(&call("file", "{}")));
    assert!(file.starts_with("file: failed with"), "{file}");
    let listing = deny_reason(policy.decide(&call("listdir", "{}")));
    assert!(listing.starts_with("listdir: failed with"), "{listing}");
}

#[test]
fn python_guest_reading_the_environment_sees_none() {
    let Some(policy) = hostile("") else { return };
    // The host's environment is not empty (cargo sets many variables): the guest sees none.
    assert!(std::env::vars().next().is_some());
    assert_eq!(
        deny_reason(policy.decide(&call("env", "{}"))),
        "env: got {}"
    );
}

#[test]
fn python_guest_looping_forever_is_denied_for_fuel_and_the_next_decision_works() {
    let Some(policy) = hostile("") else { return };
    let reason = deny_reason(policy.decide(&call("loop", "{}")));
    assert!(reason.contains("ran out of fuel"), "{reason}");
    assert_eq!(policy.decide(&call("nothing", "{}")), Decision::Allow);
}

#[test]
fn python_guest_allocating_without_end_is_denied_at_its_memory_limit_and_the_next_decision_works() {
    let Some(policy) = hostile("") else { return };
    let reason = deny_reason(policy.decide(&call("allocate", "{}")));
    assert!(reason.contains("exceeded its memory limit"), "{reason}");
    assert_eq!(policy.decide(&call("nothing", "{}")), Decision::Allow);
}

#[test]
fn python_guest_writing_globals_finds_them_unwritten_at_every_decision() {
    // `remember` denies when a global holds what an earlier decision wrote (a list, and
    // 4 MiB of pages, more than a pooled slot resets in place); each decision must start
    // from the configured snapshot.
    let Some(policy) = hostile("") else { return };
    for _ in 0..5 {
        assert_eq!(policy.decide(&call("remember", "{}")), Decision::Allow);
    }
}

#[test]
fn python_guest_waiting_on_a_clock_is_trapped_not_hung() {
    let Some(policy) = hostile("") else { return };
    let started = std::time::Instant::now();
    let reason = deny_reason(policy.decide(&call("sleep", "{}")));
    assert!(reason.contains("does not run in a policy"), "{reason}");
    // `time.sleep(1)`: a real wait would take the whole second.
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
}

#[test]
fn python_guest_printing_a_lot_is_captured_and_bounded() {
    let Some(policy) = hostile("") else { return };
    let answer = policy.answer(&call("print", "{}"));
    assert_eq!(answer.decision, Decision::Allow);
    let output = answer.output.unwrap();
    // 10,000 lines of 100 bytes: the first 64 KiB kept, the rest counted.
    assert_eq!(
        output.text.len(),
        toolward::component::wasi::MAX_OUTPUT_BYTES
    );
    assert_eq!(
        output.dropped_bytes,
        1_000_000 - toolward::component::wasi::MAX_OUTPUT_BYTES as u64
    );
    assert!(output.text.starts_with(&"x".repeat(99)));
}

#[test]
fn python_guest_sees_the_calls_time_a_stopped_clock_and_random_seeded_by_its_arguments() {
    let Some(policy) = hostile("") else { return };
    let first = deny_reason(policy.decide(&call("clock", r#"{"a":1}"#)));
    let again = deny_reason(policy.decide(&call("clock", r#"{"a":1}"#)));
    let other = deny_reason(policy.decide(&call("clock", r#"{"a":2}"#)));
    assert!(
        first.starts_with("wall=1700000000123000000 monotonic=0 random="),
        "{first}"
    );
    assert_eq!(first, again);
    assert_ne!(first, other);
}

#[test]
fn python_policy_guide_builds_tests_and_deploys_its_component() {
    let Some(bin) = crate::support::toolward_binary() else {
        return;
    };
    let Some(componentize) = componentize_py() else {
        return;
    };
    let servers = crate::policy_kit::installed_server_commands();
    if !servers.join("mcp-server-memory").is_file() {
        eprintln!("skipped: mcp-server-memory is not installed; run tests/real-servers/install.sh");
        return;
    }
    let guide = std::fs::read_to_string(repo().join("docs/policy-authoring.md")).unwrap();
    let start = guide.find(crate::policy_kit::PYTHON_CHAPTER).unwrap();
    let chapter = &guide[start..];
    // The chapter ends at the next chapter of the same level, if any.
    let chapter = match chapter[3..].find("\n## ") {
        Some(end) => &chapter[..end + 3],
        None => chapter,
    };
    let script = crate::policy_kit::guide_script(chapter);
    for command in [
        "componentize-py -d wit -w policy-component componentize app -o policy.wasm",
        "toolward policy inspect policy.wasm",
        "toolward policy test cases.json --policy policy.wasm",
        "toolward pin",
        "toolward check",
        "toolward call memory__read_graph",
    ] {
        assert!(script.contains(command), "the chapter lost `{command}`");
    }
    let dir = tempfile::tempdir().unwrap();
    // The reader has `toolward`, componentize-py and `mcp-server-memory` on their PATH.
    let path =
        crate::policy_kit::reader_path(bin, &[componentize.parent().unwrap().to_owned(), servers]);
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env("TOOLWARD_REPO", repo())
        .env("PATH", path)
        .env_remove("TOOLWARD_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // inspect lists the WASI imports and what each gets.
    assert!(stdout.contains("policy-component"), "{stdout}");
    assert!(stdout.contains("wasi:filesystem/preopens@"), "{stdout}");
    assert!(stdout.contains("captured"), "{stdout}");
    assert!(stdout.contains("4 passed, 0 failed"), "{stdout}");
    let wasm = dir.path().join("my-python-policy/policy.wasm");
    crate::policy_kit::assert_guide_deployed(&stdout, &wasm, "my-python-policy");
}
