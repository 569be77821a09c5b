//! Gateway overhead and memory, through a client that costs next to nothing: newline-delimited
//! JSON-RPC over the stdio of a child process, one thread, no async runtime.
//!
//! Not a criterion benchmark: criterion reports means and medians of batches, and this needs
//! per-call percentiles (p50, p99 over at least 10,000 calls) and throughput with several calls
//! in flight. Each run also reports the CPU time the process under test (the fake server for
//! `direct`, the gateway otherwise, not its server) used per call, from `/proc/PID/stat`. `cargo bench --bench gateway` runs it; arguments select sections
//! (`latency`, `memory`, `start`, `syscalls`; all when none is given).
//!
//! # syscalls
//! The binary's size, and the system calls per call of each case but `direct` (`strace -f
//! -c` attached after the warm-up, `SYSCALL_CALLS` calls with one in flight).
//!
//! # latency
//! The same `tools/call` of the fake server's echo tool (`{"text": "hello"}`), over one
//! session per case, after 500 warm-up calls: `CALLS` calls (default 10,000) with 1, 8 and 64
//! in flight. Cases, run one after another in each of `ROUNDS` rounds (default 3):
//! - `direct`: `toolward-fake-server` itself (the baseline);
//! - `toolward none`: `toolward serve` with `audit.sync: none`;
//! - `toolward always`: `toolward serve` with `audit.sync: always` (each record `fdatasync`ed);
//! - `peer`: `mcp-gate run --policy P --audit F --fail closed -- <fake server>` from
//!   `mcp-gate-policy` 0.3.2 (`.peer/bin/mcp-gate`; skipped when absent), whose audit log
//!   `fsync`s every record.
//!
//! Every answer is checked (a result, not an error, echoing the arguments), so a refusal can
//! never pass for a fast call. Audit logs and state live in a temporary folder on the same
//! file system for every case.
//!
//! # memory
//! `toolward serve` in the default configuration with 5 fake servers of 100 tools each (99
//! synthetic tools and `echo`, all pinned and classified), then with one of those servers
//! (100 tools): VmRSS and VmHWM (`/proc/PID/status`) once it answered `tools/list` (idle
//! after load), and again after 1,000 calls; beside them the same two cases of the previous
//! release when `TOOLWARD_BASELINE_BIN` names it, and the peer with that one server, every
//! case in each of `MEMORY_ROUNDS` rounds (default 1). `MEMORY_KEEP=1` keeps the configs (for `heaptrack`,
//! `valgrind --tool=massif` or `smaps` by hand) and prints their paths.
//!
//! Environment: `TOOLWARD_BIN` (default `target/release/toolward`; build it with
//! `cargo build --release -p toolward --bin toolward`), `TOOLWARD_PEER` (default
//! `.peer/bin/mcp-gate`), `TOOLWARD_BASELINE_BIN` (a previous build, such as the last
//! release: the latency section adds the case `baseline always`, its default configuration
//! pinned by itself, and prints the ratio of the added p50s; the memory section measures it
//! beside this build), `CALLS`, `ROUNDS`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a benchmark"
)]

#[path = "support/synthetic.rs"]
mod synthetic;

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const FAKE: &str = env!("CARGO_BIN_EXE_toolward-fake-server");
const WARMUP: usize = 500;
/// Request ids outside the range of the calls' (0 up to `CALLS`).
const INITIALIZE_ID: u64 = 1_000_000_000;
const LIST_ID: u64 = 1_000_000_001;
const IN_FLIGHT: [usize; 3] = [1, 8, 64];
const ECHO_TOOL: &str = r#"{"name":"echo","description":"Echoes its arguments.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}"#;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn toolward_bin() -> PathBuf {
    std::env::var_os("TOOLWARD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/release/toolward"))
}

fn peer_bin() -> Option<PathBuf> {
    let path = std::env::var_os("TOOLWARD_PEER")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".peer/bin/mcp-gate"));
    path.is_file().then_some(path)
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One MCP session over a child's stdio.
struct Session {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    line: String,
}

impl Session {
    fn spawn(argv: &[String], cwd: &Path) -> Session {
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .current_dir(cwd)
            .env("TOOLWARD_LOG", "error")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {argv:?}: {e}"));
        let stdin = BufWriter::new(child.stdin.take().unwrap());
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut session = Session {
            child,
            stdin,
            stdout,
            line: String::new(),
        };
        session.request(
            INITIALIZE_ID,
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "toolward-bench", "version": "0" },
            }),
        );
        session.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        session
    }

    fn send(&mut self, message: &Value) {
        serde_json::to_writer(&mut self.stdin, message).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    fn send_call(&mut self, id: u64, tool: &str) {
        write!(
            self.stdin,
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"text":"hello"}}}}}}"#
        )
        .unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next answer (a message with an id); notifications are skipped.
    fn answer(&mut self) -> (u64, Value) {
        loop {
            self.line.clear();
            let n = self.stdout.read_line(&mut self.line).unwrap();
            assert!(n > 0, "the server closed its output");
            let message: Value = serde_json::from_str(&self.line).unwrap();
            if let Some(id) = message.get("id").and_then(Value::as_u64) {
                return (id, message);
            }
        }
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        let (got, message) = self.answer();
        assert_eq!(got, id);
        message
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("`{method}` failed: {message}"))
    }

    /// `calls` calls of `tool` with `in_flight` outstanding; each call's latency, and the
    /// wall time of them all.
    fn calls(&mut self, tool: &str, calls: usize, in_flight: usize) -> (Vec<Duration>, Duration) {
        let mut started = vec![None; calls];
        let mut latencies = Vec::with_capacity(calls);
        let begin = Instant::now();
        let mut sent = 0;
        while sent < in_flight.min(calls) {
            started[sent] = Some(Instant::now());
            self.send_call(sent as u64, tool);
            sent += 1;
        }
        while latencies.len() < calls {
            let (id, message) = self.answer();
            let now = Instant::now();
            let start = started[id as usize].take().unwrap();
            latencies.push(now - start);
            let result = message
                .get("result")
                .unwrap_or_else(|| panic!("call failed: {message}"));
            let echoed = result["content"][0]["text"].as_str().unwrap_or_default();
            assert!(
                result.get("isError") != Some(&Value::Bool(true)) && echoed.contains("hello"),
                "not an echo: {message}"
            );
            if sent < calls {
                started[sent] = Some(Instant::now());
                self.send_call(sent as u64, tool);
                sent += 1;
            }
        }
        (latencies, begin.elapsed())
    }

    /// VmRSS, VmHWM, RssAnon and RssFile of the process, in KiB.
    fn status(&self) -> (u64, u64, u64, u64) {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        };
        (
            kib("VmRSS:"),
            kib("VmHWM:"),
            kib("RssAnon:"),
            kib("RssFile:"),
        )
    }

    /// CPU time the process (all its threads, not its children) has used, in clock ticks.
    fn cpu_ticks(&self) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // Fields after the command name, which is in parentheses: utime is the 12th, stime
        // the 13th (fields 14 and 15 of proc(5)).
        let rest = &text[text.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = rest.split(' ').collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    }

    /// The mappings holding the most resident memory, largest first: (KiB, name).
    fn largest_mappings(&self, count: usize) -> Vec<(u64, String)> {
        let text = std::fs::read_to_string(format!("/proc/{}/smaps", self.child.id())).unwrap();
        let mut by_name: std::collections::BTreeMap<String, u64> = Default::default();
        let mut name = String::new();
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if let Some(first) = fields.first()
                && first.contains('-')
                && !first.ends_with(':')
            {
                name = fields.get(5).map_or("[anonymous]", |n| n).to_owned();
                name = name.rsplit('/').next().unwrap_or_default().to_owned();
            } else if fields.first() == Some(&"Rss:") {
                *by_name.entry(name.clone()).or_default() += fields[1].parse::<u64>().unwrap();
            }
        }
        let mut all: Vec<(u64, String)> = by_name.into_iter().map(|(n, k)| (k, n)).collect();
        all.sort_by(|a, b| b.cmp(a));
        all.truncate(count);
        all
    }

    fn close(mut self) {
        drop(self.stdin);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait().unwrap().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// A fake server's scenario: the echo tool alone, or `extra` tools before it.
fn scenario(dir: &Path, name: &str, extra: Option<&[u8]>) -> PathBuf {
    let page = match extra {
        None => format!(r#"{{"tools":[{ECHO_TOOL}]}}"#),
        Some(page) => {
            let text = std::str::from_utf8(page).unwrap();
            let body = text.strip_suffix("]}").unwrap();
            format!("{body},{ECHO_TOOL}]}}")
        }
    };
    let path = dir.join(format!("{name}.scenario.json"));
    std::fs::write(&path, json!({ "pages": [page] }).to_string()).unwrap();
    path
}

/// The argv of the fake server playing `scenario`.
fn fake(scenario: &Path) -> Vec<String> {
    vec![FAKE.into(), scenario.display().to_string()]
}

/// The argv of the stdlib Python echo server (`benches/python/echo_server.py`).
fn python_server() -> Vec<String> {
    vec![
        "python3".into(),
        root()
            .join("benches/python/echo_server.py")
            .display()
            .to_string(),
    ]
}

/// `toolward serve --config CONFIG`, the release binary under test.
fn serve_argv(config: &Path) -> Vec<String> {
    serve_argv_of(&toolward_bin(), config)
}

/// `bin serve --config CONFIG` (another build of toolward, such as the previous release).
fn serve_argv_of(bin: &Path, config: &Path) -> Vec<String> {
    vec![
        bin.display().to_string(),
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
    ]
}

/// A toolward config folder serving `servers` (name → fake server scenario) with `rules`,
/// pinned.
fn toolward_config(
    dir: &Path,
    servers: &[(String, PathBuf)],
    rules: &Value,
    sync: &str,
) -> PathBuf {
    toolward_config_of(&toolward_bin(), dir, servers, rules, sync)
}

/// [`toolward_config`] pinned by another build of toolward, `bin`.
fn toolward_config_of(
    bin: &Path,
    dir: &Path,
    servers: &[(String, PathBuf)],
    rules: &Value,
    sync: &str,
) -> PathBuf {
    let servers: Vec<(String, Vec<String>)> = servers
        .iter()
        .map(|(name, scenario)| (name.clone(), fake(scenario)))
        .collect();
    toolward_config_argv_of(bin, dir, &servers, rules, sync)
}

/// A toolward config folder serving `servers` (name → command and arguments) with `rules`,
/// pinned.
fn toolward_config_argv(
    dir: &Path,
    servers: &[(String, Vec<String>)],
    rules: &Value,
    sync: &str,
) -> PathBuf {
    toolward_config_argv_of(&toolward_bin(), dir, servers, rules, sync)
}

fn toolward_config_argv_of(
    bin: &Path,
    dir: &Path,
    servers: &[(String, Vec<String>)],
    rules: &Value,
    sync: &str,
) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let mcp: serde_json::Map<String, Value> = servers
        .iter()
        .map(|(name, argv)| {
            (
                name.clone(),
                json!({ "command": argv[0], "args": argv[1..] }),
            )
        })
        .collect();
    std::fs::write(dir.join("rules.json"), rules.to_string()).unwrap();
    let config = json!({
        "mcpServers": mcp,
        "rules": { "file": "rules.json" },
        "manifest": "manifest.json",
        "state_dir": "state",
        "audit": { "file": "state/audit.jsonl", "sync": sync },
        "limits": { "max_tools": 4096 },
    });
    let path = dir.join("toolward.json");
    std::fs::write(&path, config.to_string()).unwrap();
    let out = Command::new(bin)
        .args(["pin", "--config"])
        .arg(&path)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    assert!(
        out.status.success(),
        "pin failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

fn peer_argv(peer: &Path, dir: &Path, scenario: &Path) -> Vec<String> {
    peer_argv_server(peer, dir, &fake(scenario))
}

/// The peer in front of the server `server` (command and arguments).
fn peer_argv_server(peer: &Path, dir: &Path, server: &[String]) -> Vec<String> {
    let policy = dir.join("peer-policy.json");
    std::fs::write(
        &policy,
        json!({
            "name": "bench", "version": "1", "default_effect": "deny",
            "rules": [{ "id": "echo", "effect": "allow", "tools": ["echo"] }],
        })
        .to_string(),
    )
    .unwrap();
    let audit = dir.join("peer-audit.jsonl");
    let _ = std::fs::remove_file(&audit);
    [
        peer.display().to_string(),
        "run".into(),
        "--policy".into(),
        policy.display().to_string(),
        "--audit".into(),
        audit.display().to_string(),
        "--fail".into(),
        "closed".into(),
        "--".into(),
    ]
    .into_iter()
    .chain(server.iter().cloned())
    .collect()
}

struct Case {
    name: &'static str,
    argv: Vec<String>,
    tool: &'static str,
}

/// Per case, per in-flight count: p50 (µs), p99 (µs), calls/s, CPU µs per call of each round.
type Figures = Vec<Vec<[Vec<f64>; 4]>>;

/// Microseconds per clock tick of `/proc/PID/stat` (`getconf CLK_TCK` is 100 on Linux).
const TICK_US: f64 = 10_000.0;

fn latency() {
    let calls = env_usize("CALLS", 10_000);
    let rounds = env_usize("ROUNDS", 3);
    let dir = tempfile::tempdir().unwrap();
    let echo = scenario(dir.path(), "echo", None);
    let rules =
        json!({ "servers": { "fake": { "tools": { "echo": { "effect": "read-only" } } } } });
    let servers = [("fake".to_owned(), echo.clone())];
    let mut cases = vec![Case {
        name: "direct",
        argv: vec![FAKE.into(), echo.display().to_string()],
        tool: "echo",
    }];
    for sync in ["none", "always"] {
        let config = toolward_config(&dir.path().join(sync), &servers, &rules, sync);
        cases.push(Case {
            name: if sync == "none" {
                "toolward none"
            } else {
                "toolward always"
            },
            argv: serve_argv(&config),
            tool: "fake__echo",
        });
    }
    match peer_bin() {
        Some(peer) => cases.push(Case {
            name: "peer mcp-gate",
            argv: peer_argv(&peer, dir.path(), &echo),
            tool: "echo",
        }),
        None => eprintln!("peer: no .peer/bin/mcp-gate (see the module docs); skipped"),
    }
    // The previous release (`TOOLWARD_BASELINE_BIN`) in the default configuration, beside
    // this build's, in the same rounds.
    if let Some(baseline) = std::env::var_os("TOOLWARD_BASELINE_BIN").map(PathBuf::from) {
        let config = toolward_config_of(
            &baseline,
            &dir.path().join("baseline"),
            &servers,
            &rules,
            "always",
        );
        cases.push(Case {
            name: "baseline always",
            argv: serve_argv_of(&baseline, &config),
            tool: "fake__echo",
        });
    }
    // OpenTelemetry's cost (issue 17.6): `TOOLWARD_BENCH_OTLP` names a running OTLP/HTTP
    // receiver (`python -m oteltap --port N` from the tests' `otel-venv`); the case is the
    // default configuration (`always`) with a `telemetry` section exporting to it.
    if let Ok(endpoint) = std::env::var("TOOLWARD_BENCH_OTLP") {
        let config = toolward_config(&dir.path().join("otel"), &servers, &rules, "always");
        let mut document: Value =
            serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
        document["telemetry"] = json!({ "endpoint": endpoint });
        std::fs::write(&config, document.to_string()).unwrap();
        cases.push(Case {
            name: "toolward otel",
            argv: serve_argv(&config),
            tool: "fake__echo",
        });
    }
    println!(
        "gateway latency: {calls} calls per run, {rounds} rounds, after {WARMUP} warm-up calls"
    );
    let mut figures: Figures = cases
        .iter()
        .map(|_| IN_FLIGHT.iter().map(|_| Default::default()).collect())
        .collect();
    for round in 0..rounds {
        for (c, case) in cases.iter().enumerate() {
            let mut session = Session::spawn(&case.argv, dir.path());
            session.calls(case.tool, WARMUP, 1);
            for (k, &in_flight) in IN_FLIGHT.iter().enumerate() {
                let ticks = session.cpu_ticks();
                let (mut lat, wall) = session.calls(case.tool, calls, in_flight);
                let cpu_us = (session.cpu_ticks() - ticks) as f64 * TICK_US / calls as f64;
                lat.sort();
                let row = &mut figures[c][k];
                row[0].push(us(percentile(&lat, 50.0)));
                row[1].push(us(percentile(&lat, 99.0)));
                row[2].push(calls as f64 / wall.as_secs_f64());
                row[3].push(cpu_us);
                eprintln!(
                    "round {round} {:<16} in flight {in_flight:>2}: p50 {:8.1} µs  p99 {:8.1} µs  {:9.0} calls/s  {cpu_us:6.1} CPU µs/call",
                    case.name,
                    row[0].last().unwrap(),
                    row[1].last().unwrap(),
                    row[2].last().unwrap()
                );
            }
            session.close();
        }
    }
    println!(
        "\n{:<16} {:>9} {:>9} {:>9} {:>11} {:>11} {:>11} {:>9}",
        "case (median)",
        "p50 µs",
        "p99 µs",
        "added p50",
        "calls/s 1",
        "calls/s 8",
        "calls/s 64",
        "CPU µs/call"
    );
    let direct_p50 = figures[0][0][0].clone();
    let added = |c: usize| -> Vec<f64> {
        figures[c][0][0]
            .iter()
            .zip(&direct_p50)
            .map(|(a, d)| a - d)
            .collect()
    };
    for (c, case) in cases.iter().enumerate() {
        let f = &figures[c];
        println!(
            "{:<16} {:>9.1} {:>9.1} {:>9.1} {:>11.0} {:>11.0} {:>11.0} {:>9.1}",
            case.name,
            median(&mut f[0][0].clone()),
            median(&mut f[0][1].clone()),
            median(&mut added(c)),
            median(&mut f[0][2].clone()),
            median(&mut f[1][2].clone()),
            median(&mut f[2][2].clone()),
            median(&mut f[0][3].clone()),
        );
    }
    println!("\np50 / p99 in µs with 8 and 64 in flight:");
    for (c, case) in cases.iter().enumerate() {
        let f = &figures[c];
        println!(
            "{:<16} 8: {:>8.1} / {:>8.1}   64: {:>8.1} / {:>8.1}",
            case.name,
            median(&mut f[1][0].clone()),
            median(&mut f[1][1].clone()),
            median(&mut f[2][0].clone()),
            median(&mut f[2][1].clone()),
        );
    }
    let ratio = |a: Vec<f64>, b: Vec<f64>| -> f64 {
        let mut r: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x / y).collect();
        median(&mut r)
    };
    let fsync: Vec<f64> = figures[2][0][0]
        .iter()
        .zip(&figures[1][0][0])
        .map(|(a, n)| a - n)
        .collect();
    println!(
        "\nfsync cost at p50 (always − none): {:.1} µs",
        median(&mut fsync.clone())
    );
    println!(
        "toolward none added p50 / direct p50: {:.2}",
        ratio(added(1), direct_p50.clone())
    );
    if let Some(otel) = cases.iter().position(|case| case.name == "toolward otel") {
        println!(
            "OpenTelemetry's cost at p50 (otel − always): {:.1} µs; added p50 otel / always: {:.3}",
            median(
                &mut figures[otel][0][0]
                    .iter()
                    .zip(&figures[2][0][0])
                    .map(|(o, a)| o - a)
                    .collect::<Vec<f64>>()
            ),
            ratio(added(otel), added(2))
        );
    }
    if let Some(peer) = cases.iter().position(|case| case.name == "peer mcp-gate") {
        println!(
            "toolward none added p50 / peer added p50: {:.3}",
            ratio(added(1), added(peer))
        );
        println!(
            "toolward always added p50 / peer added p50 (both fsync every record): {:.3}",
            ratio(added(2), added(peer))
        );
    }
    if let Some(baseline) = cases.iter().position(|case| case.name == "baseline always") {
        println!(
            "toolward always added p50 / baseline always added p50: {:.3}; calls/s with 8 in flight: {:.3}",
            ratio(added(2), added(baseline)),
            ratio(figures[2][1][2].clone(), figures[baseline][1][2].clone())
        );
    }
}

/// System calls per call (issue 15.2) and the binary's size (issue 15.4): `strace -f -c`
/// attached to each case's process after the warm-up, over `SYSCALL_CALLS` calls (default
/// 2,000) with one in flight; skipped, saying so, without `strace`.
fn syscalls() {
    let calls = env_usize("SYSCALL_CALLS", 2_000);
    let bin = toolward_bin();
    match std::fs::metadata(&bin) {
        Ok(meta) => println!("binary `{}`: {} bytes", bin.display(), meta.len()),
        Err(e) => println!("binary `{}`: {e}", bin.display()),
    }
    if Command::new("strace").arg("-V").output().is_err() {
        println!("system calls: no `strace` on PATH; skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let echo = scenario(dir.path(), "echo", None);
    let rules =
        json!({ "servers": { "fake": { "tools": { "echo": { "effect": "read-only" } } } } });
    let servers = [("fake".to_owned(), echo.clone())];
    let mut cases = Vec::new();
    for (name, sync) in [("toolward always", "always"), ("toolward none", "none")] {
        let config = toolward_config(&dir.path().join(sync), &servers, &rules, sync);
        cases.push((name, serve_argv(&config), "fake__echo"));
    }
    if let Some(peer) = peer_bin() {
        cases.push(("peer mcp-gate", peer_argv(&peer, dir.path(), &echo), "echo"));
    }
    println!("\nsystem calls per call ({calls} calls, 1 in flight; `strace -f -c`, all threads):");
    for (name, argv, tool) in cases {
        let mut session = Session::spawn(&argv, dir.path());
        session.calls(tool, WARMUP, 1);
        let out = dir.path().join("strace.txt");
        let mut strace = Command::new("strace")
            .args(["-f", "-c", "-o"])
            .arg(&out)
            .args(["-p", &session.child.id().to_string()])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        session.calls(tool, calls, 1);
        // SIGINT: strace detaches and writes its summary.
        let _ = Command::new("kill")
            .args(["-INT", &strace.id().to_string()])
            .status();
        let _ = strace.wait();
        session.close();
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        let mut rows: Vec<(f64, String)> = text
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let count: f64 = fields.get(3)?.parse().ok()?;
                let syscall = fields.last()?;
                (fields.len() >= 5 && *syscall != "total")
                    .then(|| (count / calls as f64, (*syscall).to_owned()))
            })
            .filter(|(per_call, _)| *per_call >= 0.05)
            .collect();
        rows.sort_by(|a, b| b.0.total_cmp(&a.0));
        let total: f64 = rows.iter().map(|(n, _)| n).sum();
        let listed: Vec<String> = rows.iter().map(|(n, s)| format!("{s} {n:.2}")).collect();
        println!("{name:<16} {total:5.1}: {}", listed.join(", "));
    }
}

/// VmRSS, VmHWM, RssAnon and RssFile of a process, KiB.
type Status = (u64, u64, u64, u64);

/// The gateway's figures of `/proc/PID/status` once it listed its tools, and after 1,000
/// calls of the echo tools of `servers` (8 in flight): (VmRSS, VmHWM, RssAnon, RssFile)
/// each, KiB.
fn serve_memory(
    bin: &Path,
    config: &Path,
    cwd: &Path,
    servers: usize,
) -> (Status, Status, Vec<(u64, String)>) {
    let mut session = Session::spawn(&serve_argv_of(bin, config), cwd);
    let listed = session.request(LIST_ID, "tools/list", json!({}));
    let count = listed["tools"].as_array().map_or(0, Vec::len);
    assert_eq!(count, servers * 100, "every tool registers");
    let idle = session.status();
    for k in 0..servers {
        session.calls(&format!("s{k}__echo"), 1_000 / servers, 8);
    }
    let after = session.status();
    let largest = session.largest_mappings(6);
    session.close();
    (idle, after, largest)
}

fn memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut servers = Vec::new();
    let mut rules = serde_json::Map::new();
    for s in 0..5 {
        let name = format!("s{s}");
        let (pages, optional) = synthetic::listing(99, usize::MAX);
        let scenario = scenario(dir.path(), &name, Some(&pages[0]));
        let mut server_rules: Value =
            serde_json::from_str(&synthetic::rules(&name, &optional)).unwrap();
        let tools = &mut server_rules["servers"][&name]["tools"];
        tools["echo"] = json!({ "effect": "read-only" });
        rules.insert(name.clone(), server_rules["servers"][&name].take());
        servers.push((name, scenario));
    }
    let one_rules: serde_json::Map<String, Value> = rules
        .iter()
        .take(1)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // This build, and the previous release (`TOOLWARD_BASELINE_BIN`) beside it, each pinning
    // its own configs, in the default configuration (`audit.sync: always`).
    let mut builds = vec![("toolward", toolward_bin())];
    if let Some(baseline) = std::env::var_os("TOOLWARD_BASELINE_BIN") {
        builds.push(("baseline", PathBuf::from(baseline)));
    }
    let mut configs = Vec::new();
    for (name, bin) in &builds {
        let five = toolward_config_of(
            bin,
            &dir.path().join(format!("{name}-five")),
            &servers,
            &json!({ "servers": rules }),
            "always",
        );
        let one = toolward_config_of(
            bin,
            &dir.path().join(format!("{name}-one")),
            &servers[..1],
            &json!({ "servers": one_rules }),
            "always",
        );
        if std::env::var_os("MEMORY_KEEP").is_some() {
            // For heaptrack, massif or smaps by hand: `toolward serve --config` either file.
            eprintln!("{name} configs kept: {} {}", five.display(), one.display());
        }
        configs.push((*name, bin.clone(), five, one));
    }
    println!(
        "\nmemory (KiB; VmRSS / VmHWM, then RssAnon / RssFile, of the gateway process, not of its servers):"
    );
    let rounds = env_usize("MEMORY_ROUNDS", 1);
    for round in 0..rounds {
        for (name, bin, five, one) in &configs {
            for (label, config, count) in [
                ("5 servers, 500 tools", five, 5),
                ("1 server, 100 tools", one, 1),
            ] {
                let (idle, after, largest) = serve_memory(bin, config, dir.path(), count);
                println!(
                    "round {round}: {name} serve, {label}: idle after load {} / {}  ({} / {}); after 1,000 calls {} / {}  ({} / {})",
                    idle.0, idle.1, idle.2, idle.3, after.0, after.1, after.2, after.3
                );
                let largest: Vec<String> = largest
                    .iter()
                    .map(|(kib, name)| format!("{name} {kib}"))
                    .collect();
                println!("  largest resident mappings (KiB): {}", largest.join(", "));
            }
        }
        if let Some(peer) = peer_bin() {
            let mut session =
                Session::spawn(&peer_argv(&peer, dir.path(), &servers[0].1), dir.path());
            let listed = session.request(LIST_ID, "tools/list", json!({}));
            let count = listed["tools"].as_array().map_or(0, Vec::len);
            let idle = session.status();
            session.calls("echo", 1_000, 8);
            let after = session.status();
            println!(
                "round {round}: peer mcp-gate, 1 server, {count} tools: idle after listing {} / {}  ({} / {}); after 1,000 calls {} / {}  ({} / {})",
                idle.0, idle.1, idle.2, idle.3, after.0, after.1, after.2, after.3
            );
            session.close();
        }
    }
    if std::env::var_os("MEMORY_KEEP").is_some() {
        let _ = dir.keep();
    }
}

/// `toolward check` wall time with the compiled-component cache warm and cold, beside
/// `toolward --version` (loading the binary and nothing else), in front of one fake server
/// (which starts in about a millisecond, so this is toolward's own start). The cases
/// alternate round by round, so a load change hits each alike. `START_ROUNDS` rounds
/// (default 15). The target (issue 7): warm ≤ 50 ms plus the server's own start.
/// `benches/start.py` adds the real filesystem server (node) beside it.
fn start() {
    let rounds = env_usize("START_ROUNDS", 15);
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path(), "s", None);
    let rules = json!({ "servers": { "s": { "tools": { "echo": { "effect": "read-only" } } } } });
    let folder = dir.path().join("toolward");
    let config = toolward_config(&folder, &[("s".to_owned(), scenario)], &rules, "none");
    let cache = folder.join("state/components");
    let run = |args: &[&str]| -> f64 {
        let began = Instant::now();
        let out = Command::new(toolward_bin())
            .args(args)
            .current_dir(&folder)
            .output()
            .unwrap();
        let ms = began.elapsed().as_secs_f64() * 1000.0;
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        ms
    };
    let check = ["check", "--config", config.to_str().unwrap()];
    run(&check); // fills the cache
    let mut version = Vec::new();
    let mut warm = Vec::new();
    let mut cold = Vec::new();
    for _ in 0..rounds {
        version.push(run(&["--version"]));
        warm.push(run(&check));
        std::fs::remove_dir_all(&cache).unwrap();
        cold.push(run(&check));
    }
    println!(
        "\nstart: `toolward check`, one fake server, {rounds} rounds (ms, median and quartiles):"
    );
    for (name, values) in [
        ("toolward --version", &mut version),
        ("check, cache warm", &mut warm),
        ("check, cache cold", &mut cold),
    ] {
        let mid = median(values);
        let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
        println!("{name:<20} {mid:>8.1} ({:.1}–{:.1})", at(0.25), at(0.75));
    }
    println!(
        "warm check ÷ target of 50 ms: {:.2}; cold ÷ warm: {:.1}",
        median(&mut warm) / 50.0,
        median(&mut cold) / median(&mut warm)
    );
}

/// The Python `mcp` SDK's interpreter: `PYTHON_MCP`, or the real-server test venv's.
fn python_mcp() -> Option<PathBuf> {
    let path = std::env::var_os("PYTHON_MCP")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("tests/real-servers/.installed/venv/bin/python"));
    path.is_file().then_some(path)
}

/// Which client drives a case of [`clients`].
#[derive(Clone, Copy, PartialEq)]
enum Client {
    /// This file's [`Session`]: one thread, one `write` a message, nothing else.
    Rust,
    /// The Python `mcp` SDK's `stdio_client` and `ClientSession` (`benches/python/mcp_client.py`).
    PythonMcp,
}

/// Sequential calls of `tool` through `argv` by `client`: the latency of each (sorted) and
/// the CPU time per call of the process under test.
fn client_calls(
    client: Client,
    argv: &[String],
    tool: &str,
    calls: usize,
    dir: &Path,
) -> (Vec<Duration>, f64) {
    match client {
        Client::Rust => {
            let mut session = Session::spawn(argv, dir);
            session.calls(tool, WARMUP, 1);
            let ticks = session.cpu_ticks();
            let (mut lat, _) = session.calls(tool, calls, 1);
            let cpu_us = (session.cpu_ticks() - ticks) as f64 * TICK_US / calls as f64;
            session.close();
            lat.sort();
            (lat, cpu_us)
        }
        Client::PythonMcp => {
            let python = python_mcp().unwrap();
            let out = Command::new(python)
                .arg(root().join("benches/python/mcp_client.py"))
                .args([WARMUP.to_string(), calls.to_string(), tool.to_owned()])
                .arg("--")
                .args(argv)
                .current_dir(dir)
                .env("TOOLWARD_LOG", "error")
                .stderr(Stdio::inherit())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "the Python client failed for {argv:?}"
            );
            let report: Value = serde_json::from_slice(&out.stdout).unwrap();
            let mut lat: Vec<Duration> = report["latencies_us"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| Duration::from_secs_f64(v.as_f64().unwrap() / 1e6))
                .collect();
            lat.sort();
            (lat, report["cpu_us_per_call"].as_f64().unwrap())
        }
    }
}

/// Issue 15's harness gap: the same sequential call by two clients (this file's Rust client
/// and the Python `mcp` SDK's) to two servers (the fake server and a stdlib Python echo
/// server), each directly, through `toolward serve` (`audit.sync: none` and `always`) and
/// through the peer, every case in every round, `PY_CALLS` calls (default 2,000) after
/// `WARMUP`, one in flight. Added p50 is against the direct case of the same client and
/// server in the same round.
fn clients() {
    let calls = env_usize("PY_CALLS", 2_000);
    let rounds = env_usize("ROUNDS", 3);
    let Some(_) = python_mcp() else {
        eprintln!("clients: no Python with `mcp` (PYTHON_MCP); skipped");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let echo = scenario(dir.path(), "echo", None);
    let peer = peer_bin();
    let rules = json!({ "servers": { "s": { "tools": { "echo": { "effect": "read-only" } } } } });
    // (client, server name, path name, argv, tool)
    let mut cases: Vec<(Client, &str, &str, Vec<String>, &str)> = Vec::new();
    for (server_name, server) in [("fake", fake(&echo)), ("python", python_server())] {
        let servers = [("s".to_owned(), server.clone())];
        let mut paths = vec![("direct", server.clone(), "echo")];
        for sync in ["none", "always"] {
            let config = toolward_config_argv(
                &dir.path().join(format!("{server_name}-{sync}")),
                &servers,
                &rules,
                sync,
            );
            let argv = vec![
                toolward_bin().display().to_string(),
                "serve".into(),
                "--config".into(),
                config.display().to_string(),
            ];
            paths.push((
                if sync == "none" {
                    "toolward none"
                } else {
                    "toolward always"
                },
                argv,
                "s__echo",
            ));
        }
        if let Some(peer) = &peer {
            paths.push(("peer", peer_argv_server(peer, dir.path(), &server), "echo"));
        }
        for client in [Client::Rust, Client::PythonMcp] {
            for (path, argv, tool) in &paths {
                cases.push((client, server_name, path, argv.clone(), tool));
            }
        }
    }
    println!(
        "
clients: {calls} sequential calls per case, {rounds} rounds, after {WARMUP} warm-up calls"
    );
    // Per case: p50 µs, p99 µs, CPU µs/call, added p50 µs, per round.
    let mut figures: Vec<[Vec<f64>; 4]> = cases.iter().map(|_| Default::default()).collect();
    for round in 0..rounds {
        let mut direct_p50 = 0.0;
        for (c, (client, server, path, argv, tool)) in cases.iter().enumerate() {
            let (lat, cpu) = client_calls(*client, argv, tool, calls, dir.path());
            let p50 = us(percentile(&lat, 50.0));
            if *path == "direct" {
                direct_p50 = p50;
            }
            let row = &mut figures[c];
            row[0].push(p50);
            row[1].push(us(percentile(&lat, 99.0)));
            row[2].push(cpu);
            row[3].push(p50 - direct_p50);
            let client = if *client == Client::Rust {
                "rust"
            } else {
                "python mcp"
            };
            eprintln!(
                "round {round} {client:<10} {server:<6} {path:<15}: p50 {p50:8.1} µs  added {:8.1} µs  CPU {cpu:6.1} µs/call",
                p50 - direct_p50
            );
        }
    }
    println!(
        "
{:<10} {:<6} {:<15} {:>9} {:>9} {:>10} {:>11} {:>9}",
        "client", "server", "path (median)", "p50 µs", "p99 µs", "added p50", "÷ peer's", "CPU µs"
    );
    for (c, (client, server, path, _, _)) in cases.iter().enumerate() {
        let peer_row = cases
            .iter()
            .position(|(cl, sv, pa, _, _)| cl == client && sv == server && *pa == "peer");
        let ratio = peer_row.map(|p| {
            let mut r: Vec<f64> = figures[c][3]
                .iter()
                .zip(&figures[p][3])
                .map(|(a, b)| a / b)
                .collect();
            median(&mut r)
        });
        let client = if *client == Client::Rust {
            "rust"
        } else {
            "python mcp"
        };
        let f = &figures[c];
        println!(
            "{client:<10} {server:<6} {path:<15} {:>9.1} {:>9.1} {:>10.1} {:>11} {:>9.1}",
            median(&mut f[0].clone()),
            median(&mut f[1].clone()),
            median(&mut f[3].clone()),
            ratio.map_or("—".to_owned(), |r| format!("{r:.3}")),
            median(&mut f[2].clone()),
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; anything else names sections.
    let sections: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wants = |s: &str| sections.is_empty() || sections.iter().any(|a| a == s);
    if wants("latency") {
        latency();
    }
    if wants("memory") {
        memory();
    }
    if wants("clients") {
        clients();
    }
    if wants("start") {
        start();
    }
    if wants("syscalls") {
        syscalls();
    }
}
