//! Text a server or a caller wrote, on the operator's terminal: a server's standard error
//! (in `pin`, `check` and `serve` errors), its `notifications/message`, tool and principal
//! columns of `audit show`, and `init --list`. Each carries a right-to-left override, a
//! zero-width space, a tag character, a carriage return, a line feed, a tab and an escape
//! sequence; the operator sees each escaped (`toolward::text`), none raw.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use super::*;
use crate::support::toolward_binary;

/// The hostile text: U+202E, U+200B, U+E0041, CR, LF, tab and `ESC [31m`.
const HOSTILE: &str = "pay\u{202e}txt.exe\u{200b}tag\u{e0041}cr\rlf\nFAKE LINE\tcol\u{1b}[31mred";

/// [`HOSTILE`] as the operator must see it, on one line.
const ESCAPED: &str =
    "pay\\u{202E}txt.exe\\u{200B}tag\\u{E0041}cr\\rlf\\nFAKE LINE\\tcol\\u{001B}[31mred";

/// The characters of [`HOSTILE`] that must never reach the terminal raw.
const RAW: &[char] = &['\u{202e}', '\u{200b}', '\u{e0041}', '\r', '\t', '\u{1b}'];

/// Asserts that `output` (what the operator sees of one command) shows [`HOSTILE`] escaped,
/// on one line, and holds none of its characters raw: no line starts with the text after the
/// line feed.
fn assert_escaped(what: &str, output: &str) {
    for c in RAW {
        assert!(
            !output.contains(*c),
            "{what}: raw {c:?} in the output:\n{output}"
        );
    }
    assert!(
        output.contains(ESCAPED),
        "{what}: `{ESCAPED}` not in:\n{output}"
    );
    assert!(
        !output.lines().any(|line| line.starts_with("FAKE LINE")),
        "{what}: a raw line feed in:\n{output}"
    );
}

/// Runs `toolward ARGS --config CONFIG` with no colours and no standard input.
fn toolward(bin: &Path, args: &[&str], config: &Path) -> Output {
    Command::new(bin)
        .args(args)
        .arg("--config")
        .arg(config)
        .env("NO_COLOR", "1")
        .env_remove("TOOLWARD_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Standard output and standard error together.
fn both(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test]
async fn a_servers_standard_error_reaches_pin_check_and_serve_escaped() {
    let Some(bin) = toolward_binary() else { return };
    let bench = Bench::new("foreign-stderr").server("s", listing(&[&tool("t")]), &["t"]);
    bench.pin().await;
    let config = bench.path().join("toolward.json");
    // The server now writes the hostile text to its standard error and exits at start.
    bench.scenario("s", &json!({"stderr": HOSTILE, "exit": 3}));

    let pin = toolward(bin, &["pin"], &config);
    assert!(!pin.status.success(), "{}", both(&pin));
    let stderr = String::from_utf8_lossy(&pin.stderr);
    assert!(
        stderr.contains("its standard error ends with `"),
        "{stderr}"
    );
    assert_escaped("pin", &both(&pin));

    let check = toolward(bin, &["check"], &config);
    assert_escaped("check", &both(&check));

    let serve = toolward(bin, &["serve"], &config);
    assert_escaped("serve", &both(&serve));
    bench.assert_no_processes_left();
}

#[tokio::test]
async fn a_servers_log_message_reaches_the_terminal_escaped() {
    let Some(bin) = toolward_binary() else { return };
    let scenario = json!({
        "pages": [page(&[&tool("t")])],
        "actions": {"t": {"notify": 1, "notify_text": HOSTILE, "notify_level": "warning", "notify_logger": HOSTILE}},
    });
    let bench = Bench::new("foreign-notification").server("s", scenario, &["t"]);
    bench.pin().await;
    let config = bench.path().join("toolward.json");
    let call = toolward(bin, &["call", "s__t"], &config);
    assert!(call.status.success(), "{}", both(&call));
    let stderr = String::from_utf8_lossy(&call.stderr);
    assert!(stderr.contains("WARN"), "{stderr}");
    assert_escaped("notifications/message", &stderr);
    bench.assert_no_processes_left();
}

#[tokio::test]
async fn audit_show_escapes_the_tool_and_principal_columns() {
    let Some(bin) = toolward_binary() else { return };
    let bench = Bench::new("foreign-audit")
        .server("s", listing(&[&tool("t")]), &["t"])
        .with("principal", json!(HOSTILE));
    bench.pin().await;
    let config = bench.path().join("toolward.json");
    // An unknown tool is refused and recorded under the name the caller gave.
    let call = toolward(bin, &["call", HOSTILE], &config);
    assert!(!call.status.success(), "{}", both(&call));
    assert_escaped("call", &both(&call));
    let show = toolward(bin, &["audit", "show"], &config);
    assert!(show.status.success(), "{}", both(&show));
    let stdout = String::from_utf8_lossy(&show.stdout);
    // One row holds both columns, the principal and the tool, each escaped.
    assert!(
        stdout.lines().any(|row| row.matches(ESCAPED).count() == 2),
        "{stdout}"
    );
    assert_escaped("audit show", &stdout);
    let json = toolward(bin, &["audit", "show", "--json"], &config);
    let stdout = String::from_utf8_lossy(&json.stdout);
    for c in RAW {
        assert!(
            !stdout.contains(*c),
            "audit show --json: raw {c:?}:\n{stdout}"
        );
    }
    bench.assert_no_processes_left();
}

#[test]
fn init_list_escapes_a_client_configs_server_name_command_and_variables() {
    let Some(bin) = toolward_binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let client_file = home.join(".config/Claude/claude_desktop_config.json");
    std::fs::create_dir_all(client_file.parent().unwrap()).unwrap();
    let client = json!({"mcpServers": {
        "listed": {"command": HOSTILE, "args": [HOSTILE]},
        HOSTILE: {"command": "npx", "args": ["x"]},
        "skipped": {"command": "npx", "args": [format!("${{input:{HOSTILE}}}")]},
    }});
    std::fs::write(&client_file, client.to_string()).unwrap();
    let out = Command::new(bin)
        .args(["init", "--list"])
        .env("HOME", home)
        .current_dir(home)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let shown = both(&out);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("not imported:"), "{shown}");
    assert!(shown.contains(&format!("${{input:{ESCAPED}}}")), "{shown}");
    assert_escaped("init --list", &shown);
}
