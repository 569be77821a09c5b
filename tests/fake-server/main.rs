//! A scriptable fake MCP server for tests: `toolward-fake-server SCENARIO.json`.
//!
//! It speaks MCP over stdio, one JSON-RPC message per line, and answers from the scenario
//! file, so that each behaviour a real server will not show is one small scenario:
//!
//! ```json
//! {
//!   "server_info": {"name": "fake", "version": "1.0.0"},
//!   "protocol_version": "2025-06-18",
//!   "pages": ["{\"tools\": [...], \"nextCursor\": \"2\"}", "{\"tools\": [...]}"],
//!   "results": {"some_tool": "{\"content\": [{\"type\": \"text\", \"text\": \"hi\"}]}"},
//!   "stderr": "a line for stderr at start"
//! }
//! ```
//!
//! `pages` are the raw text of each `tools/list` result, answered in order (the last one
//! again once they run out), so a test controls the exact bytes: key order, whitespace,
//! numbers past 2^64. `results` are the raw text of a `tools/call` result by tool name; a
//! tool without one is echoed: its result is one text block holding the arguments as
//! received. The scenario file is read again at every start, so a test changes the server
//! between pin and load by rewriting it.
//!
//! `actions` script hostile answers to `tools/call`, by tool name:
//! `{"exit": true}` exits in the middle of the call; `{"hang": true}` never answers;
//! `{"text_bytes": N, "is_error": false}` answers one text block of N bytes;
//! `{"line_bytes": N}` prints one line of N bytes that is not JSON-RPC (past the frame
//! limit when N is); `{"garbage": true}` prints a line that is not JSON;
//! `{"wrong_id": true}` answers with another id, then nothing; `{"notify": ["…", …]}`
//! prints each raw line (a notification, say) before the rest of the action.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test fixture"
)]

use std::io::{BufRead, Write};

use serde_json::{Value, json};

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: toolward-fake-server SCENARIO.json");
    let scenario: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("scenario file"))
            .expect("scenario JSON");
    if let Some(text) = scenario["stderr"].as_str() {
        eprintln!("{text}");
    }
    let pages: Vec<String> = scenario["pages"]
        .as_array()
        .map(|p| {
            p.iter()
                .map(|v| v.as_str().unwrap_or("{\"tools\": []}").to_owned())
                .collect()
        })
        .unwrap_or_else(|| vec!["{\"tools\": []}".to_owned()]);
    let mut page = 0usize;
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = message.get("id").cloned() else {
            continue; // a notification
        };
        let method = message["method"].as_str().unwrap_or_default();
        let id_text = id.to_string();
        let reply = match method {
            "initialize" => format!(
                r#"{{"jsonrpc":"2.0","id":{id_text},"result":{}}}"#,
                json!({
                    "protocolVersion": scenario.get("protocol_version").cloned().unwrap_or(json!("2025-06-18")),
                    "capabilities": {"tools": {"listChanged": true}},
                    "serverInfo": scenario.get("server_info").cloned().unwrap_or(json!({"name": "fake", "version": "1.0.0"})),
                })
            ),
            "tools/list" => {
                let text = pages[page.min(pages.len() - 1)].clone();
                page += 1;
                format!(r#"{{"jsonrpc":"2.0","id":{id_text},"result":{text}}}"#)
            }
            "tools/call" => {
                let name = message["params"]["name"].as_str().unwrap_or_default();
                let action = &scenario["actions"][name];
                for line in action["notify"].as_array().into_iter().flatten() {
                    let _ = writeln!(stdout, "{}", line.as_str().unwrap_or_default());
                }
                if action["exit"].as_bool() == Some(true) {
                    std::process::exit(3);
                }
                if action["hang"].as_bool() == Some(true) {
                    continue;
                }
                if action["garbage"].as_bool() == Some(true) {
                    let _ = writeln!(stdout, "this is not JSON");
                    let _ = stdout.flush();
                    continue;
                }
                if action["wrong_id"].as_bool() == Some(true) {
                    let _ = writeln!(
                        stdout,
                        r#"{{"jsonrpc":"2.0","id":"not-yours","result":{{"content":[]}}}}"#
                    );
                    let _ = stdout.flush();
                    continue;
                }
                if let Some(n) = action["line_bytes"].as_u64() {
                    let chunk = vec![b'x'; 1 << 20];
                    let mut left = n as usize;
                    while left > 0 {
                        let take = left.min(chunk.len());
                        if stdout.write_all(&chunk[..take]).is_err() {
                            return;
                        }
                        left -= take;
                    }
                    let _ = writeln!(stdout);
                    let _ = stdout.flush();
                    continue;
                }
                if let Some(n) = action["text_bytes"].as_u64() {
                    let result = json!({
                        "content": [{"type": "text", "text": "y".repeat(n as usize)}],
                        "isError": action["is_error"].as_bool().unwrap_or(false),
                    });
                    let _ = writeln!(
                        stdout,
                        r#"{{"jsonrpc":"2.0","id":{id_text},"result":{result}}}"#
                    );
                    let _ = stdout.flush();
                    continue;
                }
                let result = match scenario["results"].get(name).and_then(Value::as_str) {
                    Some(raw) => raw.to_owned(),
                    None => json!({
                        "content": [{"type": "text", "text": message["params"]["arguments"].to_string()}]
                    })
                    .to_string(),
                };
                format!(r#"{{"jsonrpc":"2.0","id":{id_text},"result":{result}}}"#)
            }
            "ping" => format!(r#"{{"jsonrpc":"2.0","id":{id_text},"result":{{}}}}"#),
            _ => format!(
                r#"{{"jsonrpc":"2.0","id":{id_text},"error":{{"code":-32601,"message":"method not found"}}}}"#
            ),
        };
        if writeln!(stdout, "{reply}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break;
        }
    }
}
