//! Facts drive a limit end to end: a rules file with a per-minute limit on a tool, calls
//! through `toolward serve`, the call past the limit denied naming the limit and the count;
//! two `toolward serve` on one config count together, so the limit is not doubled; rules
//! without limits touch no counter and record no facts.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use super::*;
use crate::support::toolward_binary;

/// A pinned bench of server `s` whose `work` is read-only (allowed) with at most `limit`
/// forwarded calls per minute.
fn limited(test: &str, limit: u64) -> Bench {
    let mut bench = Bench::new(test)
        .with(
            "audit",
            json!({"file": "state/audit.jsonl", "sync": "none"}),
        )
        .server("s", json!({"pages": [page(&[&tool("work")])]}), &["work"]);
    bench.rules.get_mut("s").unwrap().insert(
        "work".to_owned(),
        json!({"effect": "read-only", "limits": {"forwarded_per_minute": limit}}),
    );
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(bench.pin());
    bench
}

/// Runs `toolward serve` on `config`, makes `calls` calls of `s__work` one after the other
/// and returns each `result`.
fn serve_calls(bin: &Path, config: &Path, who: &str, calls: u64) -> Vec<Value> {
    let mut gateway = Command::new(bin)
        .args(["serve", "--config"])
        .arg(config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = gateway.stdin.take().unwrap();
    let mut lines = BufReader::new(gateway.stdout.take().unwrap()).lines();
    let mut send = |message: Value| {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    };
    let mut answer = |id: u64| -> Value {
        loop {
            let line = lines.next().unwrap().unwrap();
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": who, "version": "1"}}}),
    );
    answer(0);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let mut results = Vec::new();
    for id in 1..=calls {
        send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "s__work", "arguments": {"who": who, "n": id}}}));
        results.push(answer(id)["result"].clone());
    }
    // End of input ends the gateway.
    drop(stdin);
    gateway.wait().unwrap();
    results
}

fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The `decision` records of the log, in order.
fn decisions(bench: &Bench) -> Vec<Value> {
    crate::support::audit_records(&bench.path().join("state/audit.jsonl"))
        .into_iter()
        .filter(|record| record["kind"] == "decision")
        .collect()
}

#[test]
fn a_per_minute_limit_denies_the_call_past_it_through_toolward_serve_naming_the_limit_and_the_count()
 {
    let Some(bin) = toolward_binary() else { return };
    const LIMIT: u64 = 4;
    let bench = limited("facts-limit", LIMIT);
    let results = serve_calls(bin, &bench.path().join("toolward.json"), "a", LIMIT + 1);
    for (n, result) in results.iter().take(LIMIT as usize).enumerate() {
        assert_ne!(result["isError"], true, "call {n}: {result}");
    }
    let last = results.last().unwrap();
    assert_eq!(last["isError"], true, "{last}");
    assert!(
        text(last).contains(
            "limit `4 forwarded calls per minute` on tool `work` of server `s` reached: 4 in the last minute"
        ),
        "{last}"
    );

    // The decision records carry what the policy saw: the counts before each call, and its
    // time.
    let decisions = decisions(&bench);
    assert_eq!(decisions.len() as u64, LIMIT + 1);
    for (n, record) in decisions.iter().enumerate() {
        assert_eq!(
            record["facts"]["tool.forwarded.minute"], n as u64,
            "{record}"
        );
        // Only the scope the limit names is counted and given: the tool's four facts.
        assert_eq!(record["facts"]["tool.held.hour"], 0, "{record}");
        assert_eq!(record["facts"].as_object().unwrap().len(), 4, "{record}");
        let time = record["policy_time_ms"].as_u64().unwrap();
        assert!(
            time.abs_diff(record["time"].as_u64().unwrap()) < 10_000,
            "{record}"
        );
    }
    assert_eq!(decisions.last().unwrap()["decision"], "deny");
}

#[test]
fn two_gateways_on_one_config_count_together_so_a_limit_is_not_doubled() {
    let Some(bin) = toolward_binary() else { return };
    const LIMIT: u64 = 6;
    const EACH: u64 = 5;
    let bench = limited("facts-two", LIMIT);
    let config = bench.path().join("toolward.json");
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| serve_calls(bin, &config, "a", EACH));
        let b = scope.spawn(|| serve_calls(bin, &config, "b", EACH));
        (a.join().unwrap(), b.join().unwrap())
    });
    let all: Vec<&Value> = a.iter().chain(&b).collect();
    let forwarded = all.iter().filter(|r| r["isError"] != true).count() as u64;
    assert_eq!(forwarded, LIMIT, "a: {a:?}\nb: {b:?}");
    for denied in all.iter().filter(|r| r["isError"] == true) {
        assert!(
            text(denied).contains("limit `6 forwarded calls per minute` on tool `work`"),
            "{denied}"
        );
    }
    // Each gateway's calls were seen by the other: the forwarded calls saw the counts 0 to
    // 5, each once, across both processes; the denied ones the limit or (a denied call's
    // reservation in flight) one more.
    let mut seen: Vec<u64> = decisions(&bench)
        .iter()
        .map(|record| record["facts"]["tool.forwarded.minute"].as_u64().unwrap())
        .collect();
    seen.sort_unstable();
    assert_eq!(seen.len() as u64, 2 * EACH);
    assert_eq!(
        seen[..LIMIT as usize],
        (0..LIMIT).collect::<Vec<_>>()[..],
        "{seen:?}"
    );
    assert!(
        seen[LIMIT as usize..]
            .iter()
            .all(|n| (LIMIT..=LIMIT + 1).contains(n)),
        "{seen:?}"
    );
}

/// Rules without `limits`: the default component reads no fact, so no call touches the
/// counters file and no decision record carries `facts` (`docs/facts.md`).
#[test]
fn rules_without_limits_touch_no_counter_and_their_decision_records_carry_no_facts() {
    let Some(bin) = toolward_binary() else { return };
    let mut bench = Bench::new("facts-none")
        .with(
            "audit",
            json!({"file": "state/audit.jsonl", "sync": "none"}),
        )
        .server("s", json!({"pages": [page(&[&tool("work")])]}), &["work"]);
    bench
        .rules
        .get_mut("s")
        .unwrap()
        .insert("work".to_owned(), json!({"effect": "read-only"}));
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(bench.pin());
    let config = bench.path().join("toolward.json");
    let counters = bench.path().join("state/facts/counters");
    let first = serve_calls(bin, &config, "a", 1);
    assert_ne!(first[0]["isError"], true, "{first:?}");
    let before = std::fs::read(&counters).unwrap_or_default();
    let results = serve_calls(bin, &config, "a", 3);
    assert!(results.iter().all(|r| r["isError"] != true), "{results:?}");
    assert_eq!(
        std::fs::read(&counters).unwrap_or_default(),
        before,
        "a call changed the counters file"
    );
    let decisions = decisions(&bench);
    assert_eq!(decisions.len(), 4);
    for record in &decisions {
        assert_eq!(record["decision"], "allow", "{record}");
        assert!(record.get("facts").is_none(), "{record}");
        assert!(record["policy_time_ms"].is_u64(), "{record}");
    }
}
