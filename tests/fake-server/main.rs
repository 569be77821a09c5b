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
//! `{"wrong_id": true}` answers with another id, then nothing; `{"lone_surrogate": true}`
//! answers a text of one lone surrogate escape (`"\ud800"`) and `{"nesting": N}` a
//! `structuredContent` of N nested arrays, both well-formed JSON a decoder may refuse;
//! `{"blocks": N}` answers N content blocks of one byte each; `{"non_utf8": true}` answers a
//! text holding bytes that are not UTF-8; `{"close_stdout": true}` closes standard output
//! and keeps running. Before any answer, `{"notify": N}` sends N `notifications/message` of `notify_bytes` bytes each
//! (default 100; `notify_text` sends that text instead, `notify_level` sets the level,
//! default `debug`, and `notify_logger` a logger), and `{"list_changed": N}` (or `true`, once) sends N
//! `notifications/tools/list_changed`.
//!
//! `{"probe": "read" | "write" | "connect" | "env"}` tries something the server's sandbox may
//! refuse and answers what happened as its text: `ok` (`ok: N bytes` for a read), or the
//! system's error (`Permission denied (os error 13)`). `read` reads the file of the call's
//! `path` argument, `write` creates or truncates it and writes to it, `connect` opens a TCP
//! connection to its `address` (`127.0.0.1:PORT`); `env` answers `HOME` and `TMPDIR`.
//! `chmod` makes `path` mode 0777 and `rename` renames `path` to `to`; `watch` puts an
//! inotify watch on `path`, waits `ms` milliseconds (default 500) and answers `events: N`;
//! `environ` answers its whole environment, one `NAME=VALUE` a line, sorted;
//! `procs` answers every process it can see, one line each: `PID CMDLINE` and, when readable,
//! `environ: ENVIRON` (NULs as spaces); `fds` answers its open descriptors (`0 1 2 ...`), or
//! those of process `pid` when given; `caps` answers its `CapEff` and `CapBnd` lines;
//! `mount_ro` answers `ro` or `rw` for the mount holding `path`.
//!
//! Top-level keys shape the process: `"exit": CODE` exits with CODE right after writing
//! `stderr`, before reading anything; `"spawn": "SCRIPT"` runs `sh -c SCRIPT` at start and
//! leaves it running (children, grandchildren); `"stderr_flood": true` writes standard error
//! without end; `"calls_log": "PATH"` appends the arguments of every `tools/call` received,
//! one JSON line each, before answering; `"meta_log": "PATH"` likewise appends its
//! `params._meta` (`null` when absent). In a page, `@PAGE@` is replaced by the number of
//! the `tools/list` request (from 1), so a last page whose `nextCursor` holds it never ends.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unsafe_code,
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
    if let Some(code) = scenario["exit"].as_i64() {
        std::process::exit(code as i32);
    }
    if let Some(script) = scenario["spawn"].as_str() {
        // Left running on purpose: the host must end it.
        #[expect(clippy::zombie_processes, reason = "the descendants are the point")]
        std::process::Command::new("sh")
            .args(["-c", script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
    }
    if scenario["stderr_flood"].as_bool() == Some(true) {
        std::thread::spawn(|| {
            let line = format!("{}\n", "e".repeat(1023));
            let mut stderr = std::io::stderr().lock();
            while stderr.write_all(line.as_bytes()).is_ok() {}
        });
    }
    let calls_log = scenario["calls_log"].as_str().map(|path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("calls log")
    });
    let meta_log = scenario["meta_log"].as_str().map(|path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("meta log")
    });
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
                page += 1;
                let text = pages[page.min(pages.len()) - 1].replace("@PAGE@", &page.to_string());
                format!(r#"{{"jsonrpc":"2.0","id":{id_text},"result":{text}}}"#)
            }
            "tools/call" => {
                let name = message["params"]["name"].as_str().unwrap_or_default();
                let action = &scenario["actions"][name];
                if let Some(mut log) = calls_log.as_ref() {
                    writeln!(log, "{}", message["params"]["arguments"]).expect("calls log");
                }
                if let Some(mut log) = meta_log.as_ref() {
                    writeln!(log, "{}", message["params"]["_meta"]).expect("meta log");
                }
                for n in 0..action["notify"].as_u64().unwrap_or(0) {
                    let data = match action["notify_text"].as_str() {
                        Some(text) => text.to_owned(),
                        None => format!(
                            "{n} {}",
                            "n".repeat(action["notify_bytes"].as_u64().unwrap_or(100) as usize)
                        ),
                    };
                    let level = action["notify_level"].as_str().unwrap_or("debug");
                    let mut params = json!({"level": level, "data": data});
                    if let Some(logger) = action["notify_logger"].as_str() {
                        params["logger"] = json!(logger);
                    }
                    let line = json!({"jsonrpc": "2.0", "method": "notifications/message",
                        "params": params});
                    if writeln!(stdout, "{line}").is_err() {
                        return;
                    }
                }
                let changed = action["list_changed"].as_u64();
                let changed = changed.unwrap_or(u64::from(action["list_changed"] == true));
                for _ in 0..changed {
                    let _ = writeln!(
                        stdout,
                        r#"{{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}}"#
                    );
                }
                if action["close_stdout"].as_bool() == Some(true) {
                    let _ = stdout.flush();
                    // SAFETY: fd 1 is standard output, which nothing here uses afterwards.
                    drop(unsafe {
                        <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(1)
                    });
                    loop {
                        std::thread::sleep(std::time::Duration::from_secs(1));
                    }
                }
                if let Some(n) = action["blocks"].as_u64() {
                    let _ = write!(
                        stdout,
                        r#"{{"jsonrpc":"2.0","id":{id_text},"result":{{"content":["#
                    );
                    for i in 0..n {
                        let comma = if i == 0 { "" } else { "," };
                        if write!(stdout, r#"{comma}{{"type":"text","text":"b"}}"#).is_err() {
                            return;
                        }
                    }
                    let _ = writeln!(stdout, "]}}}}");
                    let _ = stdout.flush();
                    continue;
                }
                if action["non_utf8"].as_bool() == Some(true) {
                    let mut line = format!(r#"{{"jsonrpc":"2.0","id":{id_text},"result":{{"content":[{{"type":"text","text":"bad "#).into_bytes();
                    line.extend_from_slice(b"\xff\xfe\xc3");
                    line.extend_from_slice(b"\"}]}}\n");
                    let _ = stdout.write_all(&line);
                    let _ = stdout.flush();
                    continue;
                }
                if let Some(probe) = action["probe"].as_str() {
                    let arguments = &message["params"]["arguments"];
                    let path = arguments["path"].as_str().unwrap_or_default();
                    let outcome = match probe {
                        "read" => {
                            std::fs::read(path).map(|bytes| format!("ok: {} bytes", bytes.len()))
                        }
                        "write" => {
                            std::fs::write(path, "written by the server").map(|()| "ok".to_owned())
                        }
                        "connect" => {
                            let address = arguments["address"].as_str().unwrap_or_default();
                            std::net::TcpStream::connect(address).map(|_| "ok".to_owned())
                        }
                        "chmod" => {
                            use std::os::unix::fs::PermissionsExt;
                            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))
                                .map(|()| "ok".to_owned())
                        }
                        "rename" => {
                            let to = arguments["to"].as_str().unwrap_or_default();
                            std::fs::rename(path, to).map(|()| "ok".to_owned())
                        }
                        "watch" => watch(path, arguments["ms"].as_u64().unwrap_or(500)),
                        "procs" => Ok(procs()),
                        "caps" => std::fs::read_to_string("/proc/self/status").map(|status| {
                            status
                                .lines()
                                .filter(|l| l.starts_with("CapEff") || l.starts_with("CapBnd"))
                                .collect::<Vec<_>>()
                                .join(" ")
                        }),
                        "mount_ro" => {
                            let c = std::ffi::CString::new(path).unwrap();
                            // SAFETY: statvfs writes into a struct we own.
                            let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
                            if unsafe { libc::statvfs(c.as_ptr(), &mut stat) } == 0 {
                                Ok(if stat.f_flag & libc::ST_RDONLY != 0 {
                                    "ro"
                                } else {
                                    "rw"
                                }
                                .to_owned())
                            } else {
                                Err(std::io::Error::last_os_error())
                            }
                        }
                        // The controlling terminal: a server that can open it can push
                        // keystrokes into the operator's shell (TIOCSTI) and write to it.
                        "tty" => {
                            use std::os::unix::fs::OpenOptionsExt;
                            let path = arguments["path"].as_str().unwrap_or("/dev/tty");
                            std::fs::OpenOptions::new()
                                .read(true)
                                .write(true)
                                .custom_flags(libc::O_NOCTTY)
                                .open(path)
                                .map(|_| "ok".to_owned())
                        }
                        "fds" => std::fs::read_dir(format!(
                            "/proc/{}/fd",
                            arguments["pid"].as_str().unwrap_or("self")
                        ))
                        .map(|entries| {
                            let mut fds: Vec<u32> = entries
                                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                                .collect();
                            fds.sort_unstable();
                            fds.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
                        }),
                        "environ" => {
                            let mut vars: Vec<String> = std::env::vars_os()
                                .map(|(name, value)| {
                                    format!(
                                        "{}={}",
                                        name.to_string_lossy(),
                                        value.to_string_lossy()
                                    )
                                })
                                .collect();
                            vars.sort();
                            Ok(vars.join("\n"))
                        }
                        _ => Ok(format!(
                            "HOME={} TMPDIR={}",
                            std::env::var("HOME").unwrap_or_default(),
                            std::env::var("TMPDIR").unwrap_or_default()
                        )),
                    };
                    let text = outcome.unwrap_or_else(|e| e.to_string());
                    let result = json!({"content": [{"type": "text", "text": text}]});
                    let _ = writeln!(
                        stdout,
                        r#"{{"jsonrpc":"2.0","id":{id_text},"result":{result}}}"#
                    );
                    let _ = stdout.flush();
                    continue;
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
                if action["lone_surrogate"].as_bool() == Some(true) {
                    let _ = writeln!(
                        stdout,
                        r#"{{"jsonrpc":"2.0","id":{id_text},"result":{{"content":[{{"type":"text","text":"\ud800"}}]}}}}"#
                    );
                    let _ = stdout.flush();
                    continue;
                }
                if let Some(depth) = action["nesting"].as_u64() {
                    let depth = depth as usize;
                    let _ = writeln!(
                        stdout,
                        r#"{{"jsonrpc":"2.0","id":{id_text},"result":{{"content":[],"structuredContent":{{"deep":{}{}}}}}}}"#,
                        "[".repeat(depth),
                        "]".repeat(depth)
                    );
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

/// Puts an inotify watch on `path` for `ms` milliseconds and counts the events it sees.
fn watch(path: &str, ms: u64) -> std::io::Result<String> {
    let path = std::ffi::CString::new(path).unwrap();
    // SAFETY: plain system calls on a descriptor this function owns.
    unsafe {
        let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::inotify_add_watch(fd, path.as_ptr(), libc::IN_ALL_EVENTS) < 0 {
            let error = std::io::Error::last_os_error();
            libc::close(fd);
            return Err(error);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(ms);
        let mut events = 0;
        let mut buffer = [0u8; 4096];
        while std::time::Instant::now() < deadline {
            let n = libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len());
            if n > 0 {
                let mut offset = 0usize;
                while offset < n as usize {
                    let event = buffer.as_ptr().add(offset).cast::<libc::inotify_event>();
                    events += 1;
                    offset += std::mem::size_of::<libc::inotify_event>()
                        + std::ptr::read_unaligned(event).len as usize;
                }
            } else {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        libc::close(fd);
        Ok(format!("events: {events}"))
    }
}

/// Every process this one can see in `/proc`: its command line and, when readable, its
/// environment.
fn procs() -> String {
    let mut out = String::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(pid) = name.to_str().filter(|n| n.parse::<u32>().is_ok()) else {
            continue;
        };
        let text = |file: &str| {
            std::fs::read(format!("/proc/{pid}/{file}"))
                .ok()
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        };
        out.push_str(&format!("{pid} {}\n", text("cmdline").unwrap_or_default()));
        if let Some(environ) = text("environ") {
            out.push_str(&format!("environ: {environ}\n"));
        }
    }
    out
}
