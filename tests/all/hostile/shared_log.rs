//! One audit log, several gateways: two `toolward serve` on one config (a desktop app and an
//! editor each start one) both serve, and their records form one chain; a log cut short,
//! deleted or replaced is noticed, at start and while serving.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::*;
use crate::support::toolward_binary;

const CALLS_EACH: u64 = 500;
const IN_FLIGHT: u64 = 8;

/// A bench of one server `s` with tool `work`, its log `state/audit.jsonl` synced always and
/// recording arguments.
fn unpinned(test: &str) -> Bench {
    Bench::new(test)
        .with(
            "audit",
            json!({"file": "state/audit.jsonl", "sync": "always", "record_arguments": true}),
        )
        .server("s", json!({"pages": [page(&[&tool("work")])]}), &["work"])
}

/// [`unpinned`], pinned.
fn bench(test: &str) -> Bench {
    let bench = unpinned(test);
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(bench.pin());
    bench
}

fn send(stdin: &mut impl Write, message: &Value) {
    writeln!(stdin, "{message}").unwrap();
    stdin.flush().unwrap();
}

/// Runs `toolward serve` on `config` as client `who`: `initialize`, then `CALLS_EACH` calls
/// of `s__work` with arguments `{"who": who, "n": n}`, `IN_FLIGHT` at a time; asserts every
/// answer is a result that is not a tool error. Returns the gateway's standard error.
fn serve_calls(bin: &Path, config: &Path, who: &'static str) -> String {
    let mut gateway = Command::new(bin)
        .args(["serve", "--config"])
        .arg(config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = gateway.stdin.take().unwrap();
    let mut lines = BufReader::new(gateway.stdout.take().unwrap()).lines();
    let mut answer = || -> Value {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("gateway `{who}` closed its output"))
            .unwrap();
        serde_json::from_str(&line).unwrap()
    };
    send(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": who, "version": "1"}}}),
    );
    let first = answer();
    assert_eq!(first["id"], 0, "gateway `{who}`: {first}");
    send(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    let (mut sent, mut done) = (0, 0);
    while done < CALLS_EACH {
        while sent < CALLS_EACH && sent - done < IN_FLIGHT {
            sent += 1;
            send(
                &mut stdin,
                &json!({"jsonrpc": "2.0", "id": sent, "method": "tools/call",
                        "params": {"name": "s__work", "arguments": {"who": who, "n": sent}}}),
            );
        }
        let message = answer();
        if message.get("id").is_none() {
            continue;
        }
        assert!(
            message["result"].is_object() && message["result"]["isError"] != true,
            "gateway `{who}`: {message}"
        );
        done += 1;
    }
    drop(stdin);
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut gateway.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        gateway.wait().unwrap().success(),
        "gateway `{who}`: {stderr}"
    );
    stderr
}

#[test]
fn two_gateways_on_one_config_both_serve_and_their_500_calls_each_form_one_chain() {
    let Some(bin) = toolward_binary() else { return };
    let bench = bench("shared-log");
    let config = bench.path().join("toolward.json");
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| serve_calls(bin, &config, "a"));
        let b = scope.spawn(|| serve_calls(bin, &config, "b"));
        (a.join().unwrap(), b.join().unwrap())
    });
    // Each printed the head at start.
    for stderr in [&a, &b] {
        assert!(stderr.contains("audit log `"), "{stderr}");
        assert!(stderr.contains("head seq "), "{stderr}");
    }

    let verify = Command::new(bin)
        .args(["audit", "verify", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let verified = String::from_utf8_lossy(&verify.stdout);
    assert!(verify.status.success(), "{verified}");
    assert!(verified.contains("chain intact"), "{verified}");
    assert!(verified.contains(": matches"), "{verified}");

    // Every call decided exactly once, and forwarded once, by the gateway it went to.
    let mut decisions: BTreeMap<(String, u64), u32> = BTreeMap::new();
    let mut forwarded: BTreeMap<(String, u64), u32> = BTreeMap::new();
    let audit = crate::support::audit_records(&bench.path().join("state/audit.jsonl"));
    let mut sessions = std::collections::BTreeSet::new();
    for record in audit {
        let Some(arguments) = record["arguments"].as_str() else {
            continue;
        };
        let arguments: Value = serde_json::from_str(arguments).unwrap();
        let key = (
            arguments["who"].as_str().unwrap().to_owned(),
            arguments["n"].as_u64().unwrap(),
        );
        match record["kind"].as_str().unwrap() {
            "decision" => {
                assert_eq!(record["decision"], "allow", "{record}");
                *decisions.entry(key).or_default() += 1;
                sessions.insert(record["session"].as_str().unwrap().to_owned());
            }
            "forwarded" => *forwarded.entry(key).or_default() += 1,
            _ => {}
        }
    }
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    for who in ["a", "b"] {
        for n in 1..=CALLS_EACH {
            let key = (who.to_owned(), n);
            assert_eq!(decisions.get(&key), Some(&1), "decisions of {key:?}");
            assert_eq!(forwarded.get(&key), Some(&1), "forwarded of {key:?}");
        }
    }
    assert_eq!(decisions.len() as u64, 2 * CALLS_EACH);
    bench.assert_no_processes_left();
}

/// Runs `toolward` with `args` and returns (exit code, stdout, stderr).
fn run(bin: &Path, args: &[&str], config: &Path) -> (i32, String, String) {
    let out = Command::new(bin)
        .args(args)
        .arg(config)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_log_cut_short_is_named_by_verify_and_refused_by_serve_until_accepted() {
    let Some(bin) = toolward_binary() else { return };
    let bench = bench("cut-short");
    let config = bench.path().join("toolward.json");
    let config_text = config.display().to_string();
    // Three calls through `toolward call`, each a start of its own.
    for _ in 0..3 {
        let (code, out, err) = run(bin, &["call", "s__work", "--config"], &config);
        assert_eq!(code, 0, "{out}{err}");
    }
    let log = bench.path().join("state/audit.jsonl");
    let kept = crate::support::audit_lines(&log);
    let cut = kept.len() - 2;
    std::fs::write(&log, format!("{}\n", kept[..cut].join("\n"))).unwrap();

    let (code, out, _) = run(bin, &["audit", "verify", "--config"], &config);
    assert_eq!(code, 1, "{out}");
    let missing = format!("seq {} to {} are missing", cut, cut + 1);
    assert!(out.contains(&missing), "{out}");
    // The plain form checks the chain alone, as before.
    let (code, out, _) = run(bin, &["audit", "verify"], &log);
    assert_eq!(code, 0, "{out}");

    let mut serve = Command::new(bin)
        .args(["serve", "--config"])
        .arg(&config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_with_timeout(&mut serve, Duration::from_secs(60));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut serve.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains(&missing), "{stderr}");
    assert!(
        stderr.contains(&format!("`toolward audit accept --config {config_text}`")),
        "{stderr}"
    );

    let (code, out, err) = run(bin, &["audit", "accept", "--config"], &config);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("accepted as it is"), "{out}");
    let (code, out, err) = run(bin, &["call", "s__work", "--config"], &config);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = run(bin, &["audit", "verify", "--config"], &config);
    assert_eq!(code, 0, "{out}");
    bench.assert_no_processes_left();
}

fn wait_with_timeout(child: &mut std::process::Child, limit: Duration) -> Option<i32> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn a_log_deleted_or_replaced_while_serving_makes_calls_fail_closed() {
    for replace in [false, true] {
        let bench = unpinned(if replace {
            "log-replaced"
        } else {
            "log-deleted"
        });
        let toolward = bench.pin_and_start().await;
        let first = call(&toolward, "s__work").await;
        assert!(!first.is_error(), "{}", first.text());
        let log = bench.path().join("state/audit.jsonl");
        if replace {
            let other = bench.path().join("state/other.jsonl");
            std::fs::write(&other, b"").unwrap();
            std::fs::rename(&other, &log).unwrap();
        } else {
            std::fs::remove_file(&log).unwrap();
        }
        let refused = call(&toolward, "s__work").await;
        assert!(refused.is_error(), "{}", refused.text());
        let text = refused.text();
        assert!(text.contains("audit log"), "{text}");
        assert!(
            text.contains(if replace { "replaced" } else { "deleted" }),
            "{text}"
        );
        toolward.shutdown().await;
    }
}
