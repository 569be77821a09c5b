//! Durability: `toolward serve` killed with `SIGKILL` in the middle of 2,000 pipelined calls,
//! with `audit.sync: always`. What it wrote verifies, and every call the server received has
//! its decision on the record.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::*;
use crate::support::toolward_binary;

const CALLS: u64 = 2000;
const KILL_AFTER_ANSWERS: u64 = 1000;
const IN_FLIGHT: u64 = 8;

fn send(stdin: &mut impl Write, message: &Value) -> bool {
    writeln!(stdin, "{message}")
        .and_then(|()| stdin.flush())
        .is_ok()
}

#[test]
fn a_gateway_killed_mid_run_leaves_a_verifiable_log_with_every_forwarded_call_decided() {
    let Some(bin) = toolward_binary() else { return };
    let bench = Bench::new("durability").with(
        "audit",
        json!({"file": "state/audit.jsonl", "sync": "always", "record_arguments": true}),
    );
    let calls_log = bench.path().join("calls.jsonl");
    // Made before the server starts: a confined server cannot create files directly in the
    // folder of the config it is withheld.
    std::fs::write(&calls_log, "").unwrap();
    let bench = bench.server(
        "s",
        json!({"pages": [page(&[&tool("work")])], "calls_log": calls_log}),
        &["work"],
    );
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(bench.pin());

    let mut gateway = Command::new(bin)
        .args(["serve", "--config"])
        .arg(bench.path().join("toolward.json"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = gateway.stdin.take().unwrap();
    let stdout = gateway.stdout.take().unwrap();
    let (answers, answered) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let message: Value = serde_json::from_str(&line).unwrap();
            if let Some(id) = message["id"].as_u64() {
                assert!(message.get("result").is_some(), "{message}");
                if answers.send((id, message)).is_err() {
                    return;
                }
            }
        }
    });
    let wait = |answered: &mpsc::Receiver<(u64, Value)>| {
        answered
            .recv_timeout(Duration::from_secs(30))
            .expect("the gateway answered in time")
    };

    send(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "durability-test", "version": "1"}}}),
    );
    assert_eq!(wait(&answered).0, 0);
    send(
        &mut stdin,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );

    let mut sent = 0;
    let mut done = 0;
    while done < KILL_AFTER_ANSWERS {
        while sent < CALLS && sent - done < IN_FLIGHT {
            sent += 1;
            let call = json!({"jsonrpc": "2.0", "id": sent, "method": "tools/call",
                              "params": {"name": "s__work", "arguments": {"n": sent}}});
            assert!(send(&mut stdin, &call));
        }
        let (id, answer) = wait(&answered);
        assert!(answer["result"]["isError"] != true, "call {id}: {answer}");
        done += 1;
    }
    // Calls are still in flight: kill it there.
    gateway.kill().unwrap();
    gateway.wait().unwrap();

    let audit = bench.path().join("state/audit.jsonl");
    let verify = Command::new(bin)
        .args(["audit", "verify"])
        .arg(&audit)
        .output()
        .unwrap();
    let verified = String::from_utf8_lossy(&verify.stdout);
    assert!(verify.status.success(), "{verified}");
    assert!(verified.contains("chain intact"), "{verified}");

    // Every call the server received was decided, allowed and forwarded on the record first.
    let mut decided = BTreeSet::new();
    let mut forwarded = BTreeSet::new();
    for record in crate::support::audit_records(&audit) {
        let Some(arguments) = record["arguments"].as_str() else {
            continue;
        };
        let n = serde_json::from_str::<Value>(arguments).unwrap()["n"]
            .as_u64()
            .unwrap();
        match record["kind"].as_str().unwrap() {
            "decision" if record["decision"] == "allow" => {
                decided.insert(n);
            }
            "forwarded" => {
                forwarded.insert(n);
            }
            _ => {}
        }
    }
    let received: Vec<u64> = std::fs::read_to_string(&calls_log)
        .unwrap()
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["n"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(
        received.len() as u64 >= KILL_AFTER_ANSWERS && (received.len() as u64) < CALLS,
        "{} calls received",
        received.len()
    );
    let undecided: Vec<&u64> = received.iter().filter(|n| !decided.contains(n)).collect();
    assert!(
        undecided.is_empty(),
        "received without a decision: {undecided:?}"
    );
    let unforwarded: Vec<&u64> = received.iter().filter(|n| !forwarded.contains(n)).collect();
    assert!(
        unforwarded.is_empty(),
        "received without a forwarded record: {unforwarded:?}"
    );
    // The server saw its input close and ended.
    bench.assert_no_processes_left();
}
