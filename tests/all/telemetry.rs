//! OpenTelemetry end to end: `toolward serve` with a `telemetry` section exports to a real
//! OTLP/HTTP receiver, `oteltap` from PyPI (pinned in `tests/real-servers/install.sh`, in its
//! `otel-venv`), whose NDJSON output the test reads spans and metrics back from.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::real::real_servers;
use crate::support;

const FAKE: &str = env!("CARGO_BIN_EXE_toolward-fake-server");
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
const SECRET: &str = "argument-value-7f3a9c";

/// The Python with `oteltap`, or `None` (after saying so) when it is not installed.
fn oteltap_python() -> Option<PathBuf> {
    let python = real_servers().join("otel-venv/bin/python");
    if python.is_file() {
        Some(python)
    } else {
        eprintln!(
            "skipped: no `{}` (run tests/real-servers/install.sh)",
            python.display()
        );
        None
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Lowercase hex of `id` as OTLP JSON writes it, or base64 as protobuf's JSON mapping does.
fn id_is(value: &Value, hex: &str) -> bool {
    let Some(text) = value.as_str() else {
        return false;
    };
    if text.eq_ignore_ascii_case(hex) {
        return true;
    }
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    text == out
}

/// Every object anywhere in `value` for which `pick` holds.
fn find<'a>(value: &'a Value, pick: &dyn Fn(&Value) -> bool, out: &mut Vec<&'a Value>) {
    if pick(value) {
        out.push(value);
    }
    match value {
        Value::Array(items) => items.iter().for_each(|v| find(v, pick, out)),
        Value::Object(map) => map.values().for_each(|v| find(v, pick, out)),
        _ => {}
    }
}

fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?["value"]["stringValue"]
        .as_str()
}

#[test]
fn serve_exports_a_span_per_call_in_the_clients_trace_and_metrics_without_argument_values() {
    let Some(python) = oteltap_python() else {
        return;
    };
    let Some(bin) = support::toolward_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut receiver = Killed(
        Command::new(python)
            .args(["-u", "-m", "oteltap", "--port", &port.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let (lines, received) = mpsc::channel::<String>();
    let stdout = receiver.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let listening = received.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(listening.contains("Listening"), "oteltap said: {listening}");

    // Outside the config's folder, which confined servers may not write.
    let logs = tempfile::tempdir().unwrap();
    let meta_log = logs.path().join("meta.jsonl");
    let tool = r#"{"name":"echo","description":"Echoes.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}}"#;
    let scenario = dir.path().join("echo.json");
    std::fs::write(
        &scenario,
        json!({ "pages": [format!(r#"{{"tools":[{tool}]}}"#)], "meta_log": meta_log }).to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("rules.json"),
        json!({ "servers": { "s": { "tools": { "echo": { "effect": "read-only" } } } } })
            .to_string(),
    )
    .unwrap();
    let config = dir.path().join("toolward.json");
    std::fs::write(
        &config,
        json!({
            "mcpServers": { "s": { "command": FAKE, "args": [scenario] } },
            "rules": { "file": "rules.json" },
            "audit": { "sync": "none" },
            "principal": "tester",
            "telemetry": {
                "endpoint": format!("http://127.0.0.1:{port}"),
                "service_name": "toolward-e2e",
                "export_interval_ms": 200,
            },
        })
        .to_string(),
    )
    .unwrap();
    let pinned = Command::new(bin)
        .args(["pin", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(pinned.status.success(), "{pinned:?}");

    let mut serve = Killed(
        Command::new(bin)
            .args(["serve", "--config"])
            .arg(&config)
            .env("TOOLWARD_LOG", "error")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut input = serve.0.stdin.take().unwrap();
    let mut output = BufReader::new(serve.0.stdout.take().unwrap());
    let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    for message in [
        json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": { "name": "t", "version": "0" } } }),
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
        json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "s__echo", "arguments": { "text": SECRET },
            "_meta": { "traceparent": traceparent } } }),
    ] {
        writeln!(input, "{message}").unwrap();
    }
    input.flush().unwrap();
    let mut line = String::new();
    loop {
        line.clear();
        assert!(output.read_line(&mut line).unwrap() > 0, "serve ended");
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == 2 {
            assert!(line.contains(SECRET), "not the echo: {line}");
            break;
        }
    }

    // Exported on the timer, while serve runs (it is killed, never asked to flush).
    let mut exported: Vec<Value> = Vec::new();
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let has = |exported: &[Value], name: &str| {
        exported.iter().any(|v| {
            let mut out = Vec::new();
            find(v, &|o| o["name"] == name, &mut out);
            !out.is_empty()
        })
    };
    // The call's own span ends after its children, so it may come in a later export.
    while !(has(&exported, "forward")
        && has(&exported, "tools/call")
        && has(&exported, "toolward.calls")
        && has(&exported, "toolward.upstream.duration"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "not exported within 30 s: {text}");
        if let Ok(line) = received.recv_timeout(left) {
            text.push_str(&line);
            text.push('\n');
            if let Ok(value) = serde_json::from_str::<Value>(&line) {
                exported.push(value);
            }
        }
    }
    drop(serve);

    let all = Value::Array(exported);
    let mut spans = Vec::new();
    find(
        &all,
        &|o| o.get("spanId").is_some() && o.get("name").is_some(),
        &mut spans,
    );
    let named = |name: &str| -> &Value {
        spans
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no `{name}` span in {text}"))
    };
    let call = named("tools/call");
    assert!(id_is(&call["traceId"], CLIENT_TRACE), "{call}");
    assert!(id_is(&call["parentSpanId"], CLIENT_SPAN), "{call}");
    assert_eq!(attribute(call, "toolward.tool"), Some("s__echo"));
    assert_eq!(attribute(call, "toolward.server"), Some("s"));
    assert_eq!(attribute(call, "toolward.effect"), Some("read-only"));
    assert_eq!(attribute(call, "toolward.decision"), Some("allow"));
    assert_eq!(attribute(call, "toolward.outcome"), Some("allowed"));
    assert_eq!(attribute(call, "toolward.principal"), Some("tester"));
    for step in ["validate", "decide", "forward"] {
        let span = named(step);
        assert_eq!(span["parentSpanId"], call["spanId"], "{step}: {span}");
        assert!(id_is(&span["traceId"], CLIENT_TRACE), "{step}: {span}");
    }
    // The server received the forward span's context.
    let meta: Value =
        serde_json::from_str(std::fs::read_to_string(&meta_log).unwrap().trim()).unwrap();
    let passed = meta["traceparent"].as_str().unwrap();
    let parts: Vec<&str> = passed.split('-').collect();
    assert_eq!(parts[1], CLIENT_TRACE, "{passed}");
    assert!(id_is(&named("forward")["spanId"], parts[2]), "{passed}");
    // Metrics, by outcome and decision; never an argument value anywhere.
    let mut calls = Vec::new();
    find(&all, &|o| o["name"] == "toolward.calls", &mut calls);
    let calls = calls[0].to_string();
    assert!(
        calls.contains("allowed") && calls.contains("allow"),
        "{calls}"
    );
    assert!(
        !text.contains(SECRET),
        "an argument value was exported: {text}"
    );
}
