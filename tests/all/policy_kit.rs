//! The policy authoring kit: the shipped cases files pass against their components, a wrong
//! expectation fails showing the actual decision, the example component's path and URL
//! checks on their edge cases, `toolward policy test` and `toolward policy inspect` on the
//! built binary, and `docs/policy-authoring.md` followed from an empty folder.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use toolward::component::{ComponentHost, GuestLimits, LoadedComponent};
use toolward::policy_test::{CaseReport, CasesFile, Verdict, run_cases};

use crate::support::{repo, toolward_binary};

fn host() -> &'static ComponentHost {
    static HOST: OnceLock<ComponentHost> = OnceLock::new();
    HOST.get_or_init(|| {
        // Kept for the next run in the build's own temporary folder: a folder per process
        // in the system's left one behind at every run.
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("policy-kit-cache");
        ComponentHost::new(GuestLimits::default(), Some(crate::support::cache_in(&dir))).unwrap()
    })
}

fn load(path: &str) -> LoadedComponent {
    let bytes = std::fs::read(path).unwrap();
    host().load(&bytes, path).unwrap()
}

fn custom_component() -> LoadedComponent {
    load(toolward::guests::CUSTOM_POLICY_WASM)
}

fn default_component() -> LoadedComponent {
    load(toolward::guests::DEFAULT_POLICY_WASM)
}

fn assert_all_pass(report: &CaseReport) {
    assert!(report.all_passed(), "{}", report.render());
    assert!(!report.cases.is_empty());
}

/// The example's settings with `cases` (a JSON array) as a cases file.
fn custom_cases(cases: &str) -> CasesFile {
    let text = format!(r#"{{"settings_file": "settings.json", "cases": {cases}}}"#);
    let dir = repo().join("examples/custom-policy");
    CasesFile::parse(&text, &dir, &dir.join("inline.json")).unwrap()
}

/// One `local-change` call of `fs/write_file` with `path`, against the example.
fn write_case(path: &str, expect: &str) -> String {
    serde_json::json!({
        "name": format!("write {path}"), "server": "fs", "tool": "write_file",
        "effect": "local-change", "arguments": {"path": path}, "expect": expect,
    })
    .to_string()
}

/// One `remote-change` call of `web/post` with `url`, against the example.
fn post_case(url: &str, expect: &str) -> String {
    serde_json::json!({
        "name": format!("post {url}"), "server": "web", "tool": "post",
        "effect": "remote-change", "arguments": {"url": url}, "expect": expect,
    })
    .to_string()
}

#[test]
fn example_component_passes_its_cases_file() {
    let cases = CasesFile::from_path(&repo().join("examples/custom-policy/cases.json")).unwrap();
    assert_all_pass(&run_cases(host(), &custom_component(), &cases));
}

#[test]
fn default_component_passes_its_cases_file() {
    let cases = CasesFile::from_path(&repo().join("examples/policy-cases/default.json")).unwrap();
    let report = run_cases(host(), &default_component(), &cases);
    assert_all_pass(&report);
    for effect in ["read-only", "local-change", "remote-change", "destructive"] {
        for verdict in [Verdict::Allow, Verdict::Deny, Verdict::Hold] {
            assert!(
                report
                    .cases
                    .iter()
                    .any(|c| c.effect == effect && c.actual == verdict),
                "no case gives `{effect}` the verdict `{}`",
                verdict.as_str()
            );
        }
    }
}

#[test]
fn a_wrong_expectation_fails_and_shows_the_actual_decision() {
    let cases = custom_cases(&format!("[{}]", write_case("/etc/passwd", "allow")));
    let report = run_cases(host(), &custom_component(), &cases);
    assert!(!report.all_passed());
    assert_eq!((report.passed, report.failed), (0, 1));
    let case = &report.cases[0];
    assert_eq!(case.actual, Verdict::Deny);
    let table = report.render();
    assert!(table.contains("FAIL"), "{table}");
    assert!(table.contains("allow   deny"), "{table}");
    assert!(
        table.contains("leaves the write root `/srv/sandbox`"),
        "{table}"
    );
    assert!(table.contains("0 passed, 1 failed"), "{table}");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["cases"][0]["actual"], "deny");
    assert_eq!(json["cases"][0]["expect"], "allow");
    assert_eq!(json["failed"], 1);
}

#[test]
fn a_reason_that_lacks_the_expected_text_fails_though_the_verdict_matches() {
    let case = serde_json::json!({
        "name": "wrong reason", "server": "fs", "tool": "rm", "effect": "destructive",
        "expect": "deny", "reason_contains": "no such words",
    });
    let cases = custom_cases(&format!("[{case}]"));
    let report = run_cases(host(), &custom_component(), &cases);
    assert_eq!(report.failed, 1);
    assert!(
        report
            .render()
            .contains("(expected to contain `no such words`)"),
        "{}",
        report.render()
    );
}

#[test]
fn example_denies_paths_that_leave_the_write_root_after_normalisation() {
    let cases = [
        (
            "/srv/sandbox/../etc/passwd",
            "deny",
            Some("resolves to `/srv/etc/passwd`"),
        ),
        (
            "/srv/sandbox/../../etc/passwd",
            "deny",
            Some("resolves to `/etc/passwd`"),
        ),
        ("//srv//sandbox/./a", "allow", None),
        ("a/../../x", "deny", Some("resolves to `/srv/x`")),
        ("a/./b/../c", "allow", None),
        ("/srv/sandbox", "allow", None),
        ("/srv/sandbox/", "allow", None),
        (
            "/srv/sandboxed/a",
            "deny",
            Some("resolves to `/srv/sandboxed/a`"),
        ),
        ("/../../srv/sandbox/a", "allow", None),
        ("..", "deny", Some("resolves to `/srv`")),
        ("", "deny", Some("the path is empty")),
        ("~root/x", "deny", Some("starts with `~`")),
        ("a\\..\\..\\x", "deny", Some("backslash")),
        ("FILE:///srv/sandbox/a", "deny", Some("`file:` URL")),
    ];
    let list: Vec<String> = cases.iter().map(|(p, e, _)| write_case(p, e)).collect();
    let report = run_cases(
        host(),
        &custom_component(),
        &custom_cases(&format!("[{}]", list.join(","))),
    );
    assert_all_pass(&report);
    for ((path, _, reason), result) in cases.iter().zip(&report.cases) {
        if let Some(reason) = reason {
            let got = result.reason.as_deref().unwrap_or_default();
            assert!(got.contains(reason), "{path:?}: {got}");
            assert!(
                got.starts_with("argument `path` of tool `write_file` of server `fs`: "),
                "{got}"
            );
        }
    }
}

#[test]
fn example_reads_url_hosts_strictly() {
    let cases = [
        ("https://api.example.com/v1", "allow", None),
        ("HTTPS://API.EXAMPLE.COM:443/x", "allow", None),
        ("http://api.example.com?q=1", "allow", None),
        ("https://api.example.com#frag", "allow", None),
        (
            "https://api.example.com.evil.net/",
            "hold",
            Some("host `api.example.com.evil.net`, which is not on the allowlist"),
        ),
        ("https://EVIL.net/", "hold", Some("host `evil.net`")),
        (
            "https://user@evil.net@api.example.com/",
            "deny",
            Some("carries userinfo"),
        ),
        (
            "https://api.example.com@evil.net/",
            "deny",
            Some("carries userinfo"),
        ),
        (
            "https://api.example.com\\@evil.net/",
            "deny",
            Some("backslash"),
        ),
        (
            "https://api.example.com\t/",
            "deny",
            Some("control character"),
        ),
        ("https:///api.example.com/", "deny", Some("has no host")),
        (
            "https://api.example.com:99999/",
            "deny",
            Some("port `99999`"),
        ),
        ("https://api.example.com:/", "deny", Some("port ``")),
        ("https://[::1]:8080/", "hold", Some("host `[::1]`")),
        ("https://[::1/", "deny", Some("closing `]`")),
        ("javascript:alert(1)", "deny", Some("scheme `javascript`")),
        ("api.example.com/x", "deny", Some("has no scheme")),
        ("https://bücher.example/", "deny", Some("`xn--` form")),
    ];
    let list: Vec<String> = cases.iter().map(|(u, e, _)| post_case(u, e)).collect();
    let report = run_cases(
        host(),
        &custom_component(),
        &custom_cases(&format!("[{}]", list.join(","))),
    );
    assert_all_pass(&report);
    for ((url, _, reason), result) in cases.iter().zip(&report.cases) {
        if let Some(reason) = reason {
            let got = result.reason.as_deref().unwrap_or_default();
            assert!(got.contains(reason), "{url:?}: {got}");
        }
    }
}

#[test]
fn example_refuses_settings_that_miss_a_key_or_misspell_one() {
    let component = custom_component();
    for (settings, message) in [
        (r#"{"rules": {}}"#, "write_root: missing"),
        (
            r#"{"write_root": "srv"}"#,
            "write_root: expected an absolute path, found `srv`",
        ),
        (
            r#"{"write_root": "/srv", "alowed_hosts": []}"#,
            "`alowed_hosts`: unknown key",
        ),
        (
            r#"{"write_root": "/srv", "rules": {"decisions": {"read-only": "maybe"}}}"#,
            "rules.decisions.read-only: unknown decision",
        ),
        (
            r#"{"write_root": "/srv", "path_arguments": ["path", 3]}"#,
            "path_arguments[1]: expected a non-empty string",
        ),
    ] {
        let mut cases = custom_cases(&format!("[{}]", write_case("/srv/a", "allow")));
        cases.settings = Some(settings.to_owned());
        let report = run_cases(host(), &component, &cases);
        let error = report.setup_error.clone().unwrap_or_default();
        assert!(error.contains(message), "{settings}: {error}");
        assert!(!report.all_passed());
        assert!(report.render().contains("SETUP FAILED"));
    }
}

#[test]
fn settings_given_instead_replace_the_cases_file_settings() {
    let mut cases = custom_cases(&format!("[{}]", write_case("/tmp/a", "allow")));
    let report = run_cases(host(), &custom_component(), &cases);
    assert_eq!(report.failed, 1);
    cases.settings = Some(
        r#"{"write_root": "/tmp", "rules": {"decisions": {"local-change": "allow"}}}"#.to_owned(),
    );
    assert_all_pass(&run_cases(host(), &custom_component(), &cases));
}

#[test]
fn cases_file_refuses_what_it_cannot_mean() {
    let dir = repo();
    let file = dir.join("bad.json");
    let case = |extra: &str| {
        format!(
            r#"{{"settings": {{}}, "cases": [{{"name": "a", "server": "s", "tool": "t", "effect": "read-only", "expect": "allow"{extra}}}]}}"#
        )
    };
    for (text, message) in [
        (case(r#", "effect2": 1"#), "unknown field `effect2`"),
        (
            case(r#", "reason_contains": "x""#),
            "an allow has no reason to match",
        ),
        (
            case(r#", "arguments": [1]"#),
            "cases[0] (`a`).arguments: expected an object",
        ),
        (
            case("").replace("read-only", "reading"),
            "unknown effect `reading`",
        ),
        (
            case("").replace(
                r#""settings": {}"#,
                r#""settings": {}, "settings_file": "x""#,
            ),
            "give `settings` or `settings_file`, not both",
        ),
        (
            r#"{"settings": {}, "cases": []}"#.to_owned(),
            "`cases` is empty",
        ),
    ] {
        let error = CasesFile::parse(&text, dir, &file).unwrap_err().to_string();
        assert!(error.contains(message), "{text}: {error}");
        assert!(error.starts_with("cases file `"), "{error}");
    }
    let twice = r#"{"cases": [
        {"name": "a", "server": "s", "tool": "t", "effect": "read-only", "expect": "allow"},
        {"name": "a", "server": "s", "tool": "t", "effect": "read-only", "expect": "allow"}]}"#;
    let error = CasesFile::parse(twice, dir, &file).unwrap_err().to_string();
    assert!(error.contains("another case has this name"), "{error}");
}

#[test]
fn case_arguments_reach_the_component_in_canonical_form() {
    let text = r#"{"settings": {}, "cases": [{"name": "a", "server": "s", "tool": "t",
        "effect": "read-only", "arguments": {"b": 1.0, "a": "\u00e9"}, "expect": "allow"}]}"#;
    let cases = CasesFile::parse(text, repo(), &repo().join("x.json")).unwrap();
    let call = CasesFile::call(0, &cases.cases[0]);
    let canonical = toolward::canonical::canonicalize(br#"{"b": 1.0, "a": "\u00e9"}"#).unwrap();
    assert_eq!(call.arguments, canonical);
    assert_eq!(
        call.arguments_sha256,
        toolward::canonical::sha256_hex(canonical.as_bytes())
    );
    assert_eq!(
        (call.id.as_str(), call.principal.as_str()),
        ("case-1", "operator")
    );
}

#[test]
fn toolward_policy_test_and_inspect_answer_help_and_json() {
    let Some(bin) = toolward_binary() else { return };
    let run = |args: &[&str]| {
        let out = Command::new(bin)
            .args(args)
            .current_dir(repo())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (code, help, _) = run(&["policy", "test", "--help"]);
    assert_eq!(code, Some(0));
    for flag in ["--policy", "--rules", "--json", "<CASES>"] {
        assert!(help.contains(flag), "{help}");
    }
    let (code, help, _) = run(&["policy", "inspect", "--help"]);
    assert_eq!(code, Some(0));
    assert!(help.contains("--json"), "{help}");

    let custom = toolward::guests::CUSTOM_POLICY_WASM;
    let (code, out, err) = run(&[
        "policy",
        "test",
        "examples/custom-policy/cases.json",
        "--policy",
        custom,
        "--json",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["failed"], 0);
    assert!(report["passed"].as_u64().unwrap() > 20);

    let (code, out, err) = run(&[
        "policy",
        "test",
        "examples/policy-cases/default.json",
        "--policy",
        "built-in",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("PASS") && !out.contains("FAIL"), "{out}");

    // The default component's cases against other settings: the mismatches exit 1.
    let (code, out, _) = run(&[
        "policy",
        "test",
        "examples/policy-cases/default.json",
        "--policy",
        "built-in",
        "--rules",
        "examples/mcp/rules.json",
    ]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("FAIL"), "{out}");

    let (code, out, err) = run(&["policy", "inspect", custom, "--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let inspect: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        inspect["sha256"],
        toolward::canonical::sha256_hex(&std::fs::read(custom).unwrap())
    );
    assert!(
        inspect["worlds"]
            .as_array()
            .unwrap()
            .contains(&"rules-and-policy".into()),
        "{inspect}"
    );
}

/// The heading of the Python chapter of `docs/policy-authoring.md`, where the Rust guide ends.
pub const PYTHON_CHAPTER: &str = "## 10. Or write the policy in Python";

/// The `sh` blocks of `markdown` in order, and its `file=NAME` blocks as files, as one script.
pub fn guide_script(markdown: &str) -> String {
    let mut script = String::from("set -eux\n");
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let mut words = info.split_whitespace();
        let lang = words.next().unwrap_or_default();
        let file = words.find_map(|w| w.strip_prefix("file="));
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        match (lang, file) {
            (_, Some(file)) => {
                script.push_str(&format!(
                    "mkdir -p \"$(dirname '{file}')\"\ncat > '{file}' <<'TOOLWARD_GUIDE_EOF'\n{}\nTOOLWARD_GUIDE_EOF\n",
                    body.join("\n")
                ));
            }
            ("sh", None) => {
                script.push_str(&body.join("\n"));
                script.push('\n');
            }
            _ => {}
        }
    }
    script
}

/// Where `tests/real-servers/install.sh` put the npm servers' commands.
pub fn installed_server_commands() -> PathBuf {
    crate::real::real_servers().join("node_modules/.bin")
}

/// The `PATH` of a guide's reader: `toolward`'s folder, then `extra` (the real servers'
/// commands, a language's toolchain), then the inherited `PATH`.
pub fn reader_path(bin: &Path, extra: &[PathBuf]) -> std::ffi::OsString {
    std::env::join_paths(
        std::iter::once(bin.parent().unwrap().to_owned())
            .chain(extra.iter().cloned())
            .chain(std::env::split_paths(
                &std::env::var_os("PATH").unwrap_or_default(),
            )),
    )
    .unwrap()
}

/// What a guide's deploy step printed, checked: `check` names the component the guide
/// built (`wasm`) and the four classified tools, a read is allowed and the destructive
/// call is denied with the reason of `policy` (the guide's component name).
pub fn assert_guide_deployed(stdout: &str, wasm: &Path, policy: &str) {
    let digest = toolward::canonical::sha256_hex(&std::fs::read(wasm).unwrap());
    assert!(
        stdout.contains(&format!("policy component sha256 {digest}")),
        "{stdout}"
    );
    assert!(stdout.contains("4 tools registered, 0 refused"), "{stdout}");
    assert!(stdout.contains("\"entities\""), "{stdout}");
    assert!(
        stdout.contains(&format!("is destructive: {policy} never allows it")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("denied, as {policy} decides")),
        "{stdout}"
    );
}

#[test]
fn policy_authoring_guide_builds_inspects_tests_and_deploys_its_component() {
    let Some(bin) = toolward_binary() else { return };
    let mut guide = std::fs::read_to_string(repo().join("docs/policy-authoring.md")).unwrap();
    // The chapters of other languages have tests of their own (`js_policy.rs`,
    // `python_policy.rs`); the JavaScript one comes first.
    if let Some(end) = guide.find(crate::js_policy::JS_CHAPTER) {
        guide.truncate(end);
    }
    let servers = installed_server_commands();
    let deploy = servers.join("mcp-server-memory").is_file();
    if !deploy {
        eprintln!(
            "the guide's deploy step is skipped: {} is not installed; run tests/real-servers/install.sh",
            servers.join("mcp-server-memory").display()
        );
        let end = guide.find("## 6. Deploy it").unwrap();
        guide.truncate(end);
    }
    let script = guide_script(&guide);
    let mut commands = vec![
        "cargo new --lib",
        "cargo build --release --target wasm32-unknown-unknown",
        "toolward policy inspect policy.wasm",
        "toolward policy test cases.json --policy policy.wasm",
    ];
    if deploy {
        commands.extend([
            "toolward pin",
            "toolward check",
            "toolward call memory__read_graph",
        ]);
    }
    for command in commands {
        assert!(script.contains(command), "the guide lost `{command}`");
    }
    let dir = tempfile::tempdir().unwrap();
    // The guide's reader has `toolward` and `mcp-server-memory` on their PATH.
    let path = reader_path(bin, &[servers]);
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env("TOOLWARD_REPO", repo())
        .env("PATH", path)
        // Not in the guide's commands, so that the test fits CI: one job, and the
        // registry crates the workspace build already fetched.
        .env("CARGO_BUILD_JOBS", "1")
        .env("CARGO_NET_OFFLINE", "true")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("TOOLWARD_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("policy-component"), "{stdout}");
    assert!(stdout.contains("4 passed, 0 failed"), "{stdout}");
    let wasm = dir.path().join("my-policy/policy.wasm");
    assert!(wasm.is_file());
    if !deploy {
        return;
    }
    // Deployed: the manifest pins the component the guide built, `check` loads it with
    // the four classified tools, the read is allowed and the destructive call is denied
    // with the guide component's own reason.
    let digest = toolward::canonical::sha256_hex(&std::fs::read(&wasm).unwrap());
    let manifest = toolward::manifest::Manifest::read(&dir.path().join("manifest.json")).unwrap();
    assert_eq!(
        manifest.components.get("policy"),
        Some(&digest),
        "{manifest:?}"
    );
    assert_eq!(manifest.servers["memory"].tools.len(), 9);
    assert_guide_deployed(&stdout, &wasm, "my-policy");
}

#[test]
fn cases_review_results_and_see_labels() {
    let token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";
    let text = serde_json::json!({
        "settings": {
            "reviews": ["secrets"],
            "servers": {"web": {"tools": {
                "fetch": {"effect": "read-only", "returns": {"untrusted": true}},
                "send": {"effect": "read-only", "accepts_untrusted": false}
            }}}
        },
        "cases": [
            {"name": "a token is redacted", "server": "web", "tool": "fetch", "effect": "read-only",
             "expect": "allow",
             "result": {"content": [{"type": "text", "text": format!("key {token}")}]},
             "expect_result": "redact",
             "delivered": {"content": [{"type": "text", "text": "key [redacted secret:github-pat]"}]}},
            {"name": "clean text passes", "server": "web", "tool": "fetch", "effect": "read-only",
             "expect": "allow",
             "result": {"content": [{"type": "text", "text": "hello"}]}, "expect_result": "pass"},
            {"name": "a send after untrusted content is held", "server": "web", "tool": "send",
             "effect": "read-only", "labels": {"untrusted": true}, "expect": "hold",
             "reason_contains": "does not accept untrusted content"},
            {"name": "a send before is allowed", "server": "web", "tool": "send",
             "effect": "read-only", "expect": "allow"}
        ]
    })
    .to_string();
    let dir = std::env::temp_dir();
    let cases = CasesFile::parse(&text, &dir, &dir.join("inline.json")).unwrap();
    let reviewing = load(toolward::guests::REVIEWING_POLICY_WASM);
    let report = run_cases(host(), &reviewing, &cases);
    assert_all_pass(&report);
    // A wrong expectation of the result fails, showing what the review did.
    let wrong = text.replace(r#""expect_result":"pass""#, r#""expect_result":"withhold""#);
    let cases = CasesFile::parse(&wrong, &dir, &dir.join("inline.json")).unwrap();
    let report = run_cases(host(), &reviewing, &cases);
    assert_eq!(report.failed, 1, "{}", report.render());
    assert!(
        report.render().contains("result: pass"),
        "{}",
        report.render()
    );
}
