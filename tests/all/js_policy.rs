//! Policy components written in JavaScript, built with jco and componentize-js (issue 19):
//! `examples/js-policy` passes the Rust example's cases and decides in front of the real
//! memory server through the `toolward` binary, and the JavaScript chapter of
//! `docs/policy-authoring.md` runs from an empty folder to a deployed policy.
//!
//! The toolchain is the one `tests/real-servers/install.sh` installs from
//! `examples/js-policy/package-lock.json` (`TOOLWARD_JS_TOOLCHAIN` names another folder
//! holding `node_modules/.bin/jco`). Without it the tests say so and pass, except in CI
//! (`CI` set), where they fail: CI must build the JavaScript guests.
//!
//! Components are built once per content into one shared folder
//! ([`js_component`]), so the tests that run a guest (here and in
//! `hostile/js_guests.rs`) and later runs reuse it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use toolward::policy_test::{CasesFile, run_cases};

use crate::support::{guest_host, repo, toolward_binary};

/// The heading of the guide's JavaScript chapter: the guide test for Rust stops before it,
/// and [`the_guides_javascript_chapter_builds_tests_and_deploys_its_component`] runs it
/// alone.
pub(crate) const JS_CHAPTER: &str = "## 9. Or write the policy in JavaScript";

/// The jco and componentize-js install, or `None` after saying why (a failure in CI).
pub(crate) fn js_toolchain(test: &str) -> Option<PathBuf> {
    crate::support::guest_toolchain(
        test,
        "JavaScript",
        "TOOLWARD_JS_TOOLCHAIN",
        "js-toolchain",
        Some("node_modules/.bin/jco"),
    )
}

/// The component built from the JavaScript module `source` for world `policy-component`
/// of `wit/policy.wit`, with every WASI feature of the runtime disabled (`--disable all`),
/// so it imports nothing but toolward's `types`.
///
/// Built once per content: the file is
/// `$CARGO_TARGET_TMPDIR/js-guests/<name>-<SHA-256 of the source and the lock file>.wasm`,
/// reused by every test and every later run; builds are one at a time (each takes about a
/// minute and a few hundred MB).
pub(crate) fn js_component(test: &str, source: &Path) -> Option<PathBuf> {
    static BUILDING: Mutex<()> = Mutex::new(());
    let toolchain = js_toolchain(test)?;
    let lock = std::fs::read(repo().join("examples/js-policy/package-lock.json")).unwrap();
    let mut inputs = std::fs::read(source).unwrap();
    inputs.extend_from_slice(&lock);
    let digest = toolward::canonical::sha256_hex(&inputs);
    let name = source.file_stem().unwrap().to_string_lossy();
    let folder = Path::new(env!("CARGO_TARGET_TMPDIR")).join("js-guests");
    let wasm = folder.join(format!("{name}-{}.wasm", &digest[..16]));
    let _one_at_a_time = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    if wasm.is_file() {
        return Some(wasm);
    }
    std::fs::create_dir_all(&folder).unwrap();
    // Built in a folder of its own, under fixed names: componentize-js bakes the source's
    // path relative to the folder it runs in into the component.
    let work = tempfile::tempdir_in(&folder).unwrap();
    std::fs::copy(source, work.path().join("policy.js")).unwrap();
    std::fs::create_dir(work.path().join("wit")).unwrap();
    std::fs::copy(
        repo().join("wit/policy.wit"),
        work.path().join("wit/policy.wit"),
    )
    .unwrap();
    let out = Command::new(toolchain.join("node_modules/.bin/jco"))
        .args(["componentize", "policy.js", "--wit", "wit/policy.wit"])
        .args(["--world-name", "policy-component", "--disable", "all"])
        .args(["--out", "policy.wasm"])
        .current_dir(work.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", report(&out));
    std::fs::rename(work.path().join("policy.wasm"), &wasm).unwrap();
    Some(wasm)
}

/// The example's component, built.
fn example(test: &str) -> Option<PathBuf> {
    js_component(test, &repo().join("examples/js-policy/policy.js"))
}

fn report(out: &Output) -> String {
    format!(
        "exit {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `toolward ARGS` in `dir`, with `PATH` led by the binary's folder and the real npm
/// servers' commands.
fn run_toolward(bin: &Path, dir: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .current_dir(dir)
        .env(
            "PATH",
            crate::policy_kit::reader_path(
                bin,
                &[crate::real::real_servers().join("node_modules/.bin")],
            ),
        )
        .env_remove("TOOLWARD_LOG")
        .output()
        .unwrap()
}

/// The example's cases file, with the settings at `settings` instead of its own when given.
fn example_cases(settings: Option<&str>) -> CasesFile {
    let path = repo().join("examples/custom-policy/cases.json");
    let mut cases = CasesFile::from_path(&path).unwrap();
    if let Some(settings) = settings {
        cases.settings = Some(settings.to_owned());
    }
    cases
}

#[test]
fn the_javascript_example_imports_nothing_but_toolwards_types_and_passes_the_rust_examples_cases() {
    let test = "js-example-cases";
    let Some(wasm) = example(test) else { return };
    let host = guest_host();
    let component = host
        .load(&std::fs::read(&wasm).unwrap(), &wasm.display().to_string())
        .unwrap();
    assert_eq!(component.imports(), ["toolward:policy/types@0.1.0"]);
    assert_eq!(component.exports(), ["toolward:policy/policy@0.1.0"]);

    let report = run_cases(host, &component, &example_cases(None));
    assert!(report.all_passed(), "{}", report.render());
    assert_eq!(report.passed, 30, "{}", report.render());

    // The same cases with the root moved: the component reads its settings, so the cases
    // that allow a write under `/srv/sandbox` now deny it (this test can fail).
    let settings = std::fs::read_to_string(repo().join("examples/custom-policy/settings.json"))
        .unwrap()
        .replace("/srv/sandbox", "/srv/other");
    let report = run_cases(host, &component, &example_cases(Some(&settings)));
    assert!(!report.all_passed(), "{}", report.render());
    assert!(
        report
            .render()
            .contains("leaves the write root `/srv/other`"),
        "{}",
        report.render()
    );
}

#[test]
fn the_javascript_example_refuses_settings_naming_the_fault_as_the_rust_example_does() {
    let test = "js-example-settings";
    let Some(wasm) = example(test) else { return };
    let host = guest_host();
    let component = host
        .load(&std::fs::read(&wasm).unwrap(), &wasm.display().to_string())
        .unwrap();
    for (settings, fault) in [
        (
            r#"{"write_root": "srv"}"#,
            "write_root: expected an absolute path, found `srv`",
        ),
        (r#"{"write_rot": "/srv"}"#, "`write_rot`: unknown key"),
        (
            r#"{"write_root": "/srv", "rules": {"servers": {"fs": {"tools": {"x": {"effect": "write"}}}}}}"#,
            r#"rules.servers.fs.tools.x.effect: unknown effect "write""#,
        ),
    ] {
        let report = run_cases(host, &component, &example_cases(Some(settings)));
        let refused = report.setup_error.clone().unwrap_or_default();
        assert!(refused.contains(fault), "{fault}: {}", report.render());
    }
}

#[test]
fn the_javascript_example_decides_in_front_of_the_real_memory_server_through_toolward() {
    let test = "js-example-deployed";
    let (Some(bin), Some(wasm)) = (toolward_binary(), example(test)) else {
        return;
    };
    let Some(memory) = crate::real::real_server("memory") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let settings = repo().join("examples/custom-policy/settings.json");
    let rules = serde_json::json!({"servers": {"memory": {"tools": {
        "read_graph": {"effect": "read-only"},
        "create_entities": {"effect": "local-change"},
        "delete_entities": {"effect": "destructive"},
    }}}});
    std::fs::write(dir.path().join("rules.json"), rules.to_string()).unwrap();
    let config = serde_json::json!({
        "mcpServers": {"memory": memory.entry},
        "rules": {"file": "rules.json"},
        "policy": {"component": wasm, "settings": settings},
    });
    std::fs::write(dir.path().join("toolward.json"), config.to_string()).unwrap();
    let run = |args: &[&str]| run_toolward(bin, dir.path(), args);

    let pin = run(&["pin"]);
    assert!(pin.status.success(), "{}", report(&pin));
    let digest = toolward::canonical::sha256_hex(&std::fs::read(&wasm).unwrap());
    let check = run(&["check"]);
    let checked = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{}", report(&check));
    assert!(
        checked.contains(&format!("policy component sha256 {digest}")),
        "{checked}"
    );
    assert!(
        checked.contains("3 tools registered, 0 refused"),
        "{checked}"
    );

    // The settings' file-wide table allows local changes: the JavaScript policy lets the
    // entity through to the server, which stores it, and the read shows it.
    let entities = r#"{"entities": [{"name": "js-policy", "entityType": "note", "observations": ["decided in JavaScript"]}]}"#;
    let create = run(&["call", "memory__create_entities", "--args", entities]);
    assert!(create.status.success(), "{}", report(&create));
    let read = run(&["call", "memory__read_graph"]);
    assert!(read.status.success(), "{}", report(&read));
    assert!(
        String::from_utf8_lossy(&read.stdout).contains("decided in JavaScript"),
        "{}",
        report(&read)
    );
    // Destruction falls to the default table, which denies it, with the reason the
    // JavaScript policy wrote; the entity stays.
    let delete = run(&[
        "call",
        "memory__delete_entities",
        "--args",
        r#"{"entityNames": ["js-policy"]}"#,
    ]);
    let all = report(&delete);
    assert!(!delete.status.success(), "{all}");
    assert!(
        all.contains("effect `destructive` is denied by the default decision table"),
        "{all}"
    );
    let read = run(&["call", "memory__read_graph"]);
    assert!(
        String::from_utf8_lossy(&read.stdout).contains("decided in JavaScript"),
        "{}",
        report(&read)
    );

    // Every decision is on the record with the JavaScript component's digest.
    let audit = crate::support::audit_records(&dir.path().join("audit.jsonl"));
    let decisions: Vec<&serde_json::Value> = audit
        .iter()
        .filter(|record| record["kind"] == "decision")
        .collect();
    let verdicts: Vec<&str> = decisions
        .iter()
        .map(|d| d["decision"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, ["allow", "allow", "deny", "allow"], "{audit:?}");
    for decision in &decisions {
        assert_eq!(
            decision["components"]["policy_sha256"],
            digest.as_str(),
            "{decision}"
        );
    }
}

#[test]
fn the_guides_javascript_chapter_builds_tests_and_deploys_its_component() {
    let test = "js-guide";
    let (Some(bin), Some(_)) = (toolward_binary(), js_toolchain(test)) else {
        return;
    };
    let guide = std::fs::read_to_string(repo().join("docs/policy-authoring.md")).unwrap();
    let start = guide
        .find(JS_CHAPTER)
        .expect("the guide has its JavaScript chapter");
    let chapter = &guide[start..];
    let end = chapter[JS_CHAPTER.len()..]
        .find("\n## ")
        .map_or(chapter.len(), |end| end + JS_CHAPTER.len());
    let script = crate::policy_kit::guide_script(&chapter[..end]);
    for command in [
        "npm install",
        "jco componentize policy.js",
        "toolward policy inspect policy.wasm",
        "toolward policy test cases.json --policy policy.wasm",
        "toolward pin",
        "toolward check",
        "toolward call memory__read_graph",
    ] {
        assert!(script.contains(command), "the chapter lost `{command}`");
    }
    if !crate::real::real_servers()
        .join("node_modules/.bin/mcp-server-memory")
        .is_file()
    {
        assert!(std::env::var_os("CI").is_none(), "{test}: no memory server");
        eprintln!("{test}: skipped: the memory server is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env("TOOLWARD_REPO", repo())
        .env(
            "PATH",
            crate::policy_kit::reader_path(
                bin,
                &[crate::real::real_servers().join("node_modules/.bin")],
            ),
        )
        // Not in the guide's commands, so that the test fits CI: npm takes the packages
        // from its cache, which the toolchain's install filled, rather than the registry.
        .env("npm_config_offline", "true")
        .env("npm_config_audit", "false")
        .env("npm_config_fund", "false")
        .env_remove("TOOLWARD_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", report(&out));
    assert!(
        stdout.contains("export toolward:policy/policy@0.1.0"),
        "{stdout}"
    );
    assert!(stdout.contains("policy-component"), "{stdout}");
    assert!(stdout.contains("4 passed, 0 failed"), "{stdout}");
    let wasm = dir.path().join("my-js-policy/policy.wasm");
    crate::policy_kit::assert_guide_deployed(&stdout, &wasm, "my-policy");
}

/// The median of `times`.
fn p50(mut times: Vec<std::time::Duration>) -> std::time::Duration {
    times.sort();
    times[times.len() / 2]
}

/// A measurement, not a check (`--ignored --nocapture`): the JavaScript example's decision
/// beside the Rust example's, same settings, same call, each decision a fresh instance of the
/// configured snapshot, in one run; and each component's compile time, cold and from the
/// cache, and configure time. `cargo bench --bench decide -- example` measures the same in a
/// release build.
#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn javascript_and_rust_example_decisions_measured_side_by_side() {
    use std::time::Instant;
    use toolward::component::{CallView, ComponentHost, Effect, GuestLimits};
    let Some(js) = example("js-measure") else {
        return;
    };
    let settings =
        std::fs::read_to_string(repo().join("examples/custom-policy/settings.json")).unwrap();
    let arguments = r#"{"content":"hello","path":"notes.txt"}"#;
    let call = CallView {
        id: "01JMEASURE0000000000000000".into(),
        server: "fs".into(),
        tool: "write_file".into(),
        effect: Effect::LocalChange,
        arguments: arguments.into(),
        arguments_sha256: toolward::canonical::sha256_hex(arguments.as_bytes()),
        principal: "operator".into(),
        session: "measure".into(),
        principal_attributes: Vec::new(),
        labels: Default::default(),
        time_ms: 1_700_000_000_000,
        facts: vec![("tool.forwarded.minute".into(), "3".into())],
    };
    let limits = GuestLimits {
        ready_instances: 0,
        ..GuestLimits::default()
    };
    let js = std::fs::read(js).unwrap();
    let rust = std::fs::read(toolward::guests::CUSTOM_POLICY_WASM).unwrap();
    let mut decisions = Vec::new();
    for (name, bytes) in [("JavaScript", &js), ("Rust", &rust)] {
        let state = tempfile::tempdir().unwrap();
        let began = Instant::now();
        let host = ComponentHost::new(limits.clone(), Some(crate::support::cache_in(state.path())))
            .unwrap();
        let component = host.load(bytes, name).unwrap();
        let cold = began.elapsed();
        let warm_host =
            ComponentHost::new(limits.clone(), Some(crate::support::cache_in(state.path())))
                .unwrap();
        let began = Instant::now();
        warm_host.load(bytes, name).unwrap();
        let warm = began.elapsed();
        let began = Instant::now();
        let policy = host.configure_policy(&component, &settings).unwrap();
        let configure = began.elapsed();
        let times: Vec<_> = (0..200)
            .map(|_| {
                let began = Instant::now();
                std::hint::black_box(policy.decide(&call));
                began.elapsed()
            })
            .collect();
        let median = p50(times);
        println!(
            "{name} example ({} bytes): decision p50 {:.1} µs; compile cold {:.2} s, from the cache {:.0} ms; configure {:.0} ms",
            bytes.len(),
            median.as_secs_f64() * 1e6,
            cold.as_secs_f64(),
            warm.as_secs_f64() * 1e3,
            configure.as_secs_f64() * 1e3
        );
        decisions.push((policy.decide(&call), median));
    }
    assert_eq!(decisions[0].0, decisions[1].0);
    println!(
        "JavaScript / Rust decision p50: {:.1}x",
        decisions[0].1.as_secs_f64() / decisions[1].1.as_secs_f64()
    );
}
