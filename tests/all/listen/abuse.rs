//! The listener keeps serving under abuse (issue 13, item 4): a connection that sends no
//! complete request head is closed after `listen.header_read_timeout_ms`; past
//! `listen.max_connections` a new connection waits for one to close; out of descriptors the
//! accept loop backs off instead of spinning, and serves again once idle sockets time out;
//! every session shares one tool list, so a session costs no copy of it; a closed session
//! gives back its memory, so opening and closing sessions in a loop does not grow the
//! gateway.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use super::{ALICE, PROTOCOL_VERSION, start_with, write_config};
use crate::support::toolward_binary;

/// An authorized `initialize` written by hand on a new connection (`Connection: close`).
fn initialize_request(addr: SocketAddr) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}})
    .to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {ALICE}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        addr.port(),
        body.len()
    )
}

/// Reads `stream` until the peer closes it or `limit` passes; what was read, and whether it
/// was closed.
fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (String, bool) {
    let deadline = Instant::now() + limit;
    let mut text = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (String::from_utf8_lossy(&text).into_owned(), false);
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut chunk) {
            Ok(0) => return (String::from_utf8_lossy(&text).into_owned(), true),
            Ok(n) => text.extend_from_slice(&chunk[..n]),
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            // Reset by the peer: closed too.
            Err(_) => return (String::from_utf8_lossy(&text).into_owned(), true),
        }
    }
}

/// The status line of an HTTP response read so far ("" when nothing came).
fn status_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_sends_no_complete_head_in_time_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (toolward, listening) = start_with(
        dir.path(),
        json!({"header_read_timeout_ms": 300}),
        json!({}),
    )
    .await;
    let addr = listening.addr;
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        // Nothing at all; half a head; a whole request, then nothing on the kept-alive
        // connection.
        let mut silent = TcpStream::connect(addr).unwrap();
        let mut partial = TcpStream::connect(addr).unwrap();
        partial
            .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: app")
            .unwrap();
        let mut kept = TcpStream::connect(addr).unwrap();
        kept.write_all(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        for (name, stream) in [
            ("silent", &mut silent),
            ("partial", &mut partial),
            ("kept-alive", &mut kept),
        ] {
            let (text, closed) = read_until_closed(stream, Duration::from_secs(5));
            assert!(closed, "the {name} connection was still open after 5 s");
            if name == "kept-alive" {
                assert!(status_line(&text).contains("401"), "{text}");
            }
        }
        let elapsed = started.elapsed();
        assert!(
            elapsed >= Duration::from_millis(250) && elapsed < Duration::from_secs(4),
            "closed after {elapsed:?}"
        );
    })
    .await
    .unwrap();
    listening.stop().await;
    toolward.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_connections_a_new_connection_waits_until_one_closes() {
    let dir = tempfile::tempdir().unwrap();
    let (toolward, listening) = start_with(
        dir.path(),
        json!({"max_connections": 2, "header_read_timeout_ms": 60_000}),
        json!({}),
    )
    .await;
    let addr = listening.addr;
    tokio::task::spawn_blocking(move || {
        let first = TcpStream::connect(addr).unwrap();
        let _second = TcpStream::connect(addr).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let mut third = TcpStream::connect(addr).unwrap();
        third
            .write_all(initialize_request(addr).as_bytes())
            .unwrap();
        let (text, closed) = read_until_closed(&mut third, Duration::from_millis(1500));
        assert!(
            text.is_empty() && !closed,
            "the third connection was served while two were open: {text}"
        );
        drop(first);
        let started = Instant::now();
        let mut text = String::new();
        while !text.contains("serverInfo") && started.elapsed() < Duration::from_secs(10) {
            let (more, closed) = read_until_closed(&mut third, Duration::from_millis(200));
            text.push_str(&more);
            if closed {
                break;
            }
        }
        assert!(status_line(&text).contains("200"), "{text}");
        assert!(text.contains("serverInfo"), "{text}");
    })
    .await
    .unwrap();
    listening.stop().await;
    toolward.shutdown().await;
}

/// `toolward serve --listen 127.0.0.1:0` for the config in `dir`, with at most `descriptors`
/// open files when given; the process (the shell `exec`s into toolward, so its pid is
/// toolward's), the bound address, and its standard error as it comes.
fn serve(
    bin: &std::path::Path,
    dir: &std::path::Path,
    descriptors: Option<u32>,
) -> (Child, SocketAddr, Arc<Mutex<String>>, Arc<AtomicUsize>) {
    let limit = descriptors.map_or(String::new(), |n| format!("ulimit -n {n} && "));
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{limit}exec \"$0\" serve --config \"$1\" --listen 127.0.0.1:0"
        ))
        .arg(bin)
        .arg(dir.join("toolward.json"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let bytes = Arc::new(AtomicUsize::new(0));
    let (found, address) = std::sync::mpsc::channel();
    {
        let log = Arc::clone(&log);
        let bytes = Arc::clone(&bytes);
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stderr);
            let mut line = String::new();
            while lines.read_line(&mut line).unwrap_or(0) > 0 {
                bytes.fetch_add(line.len(), Ordering::Relaxed);
                if let Some(rest) = line
                    .contains("toolward serves")
                    .then(|| line.split("http://").nth(1))
                    .flatten()
                {
                    let addr = rest.split('/').next().unwrap_or_default().to_owned();
                    let _ = found.send(addr);
                }
                // Keep the start of the log for messages; count the rest.
                let mut kept = log.lock().unwrap();
                if kept.len() < 64 * 1024 {
                    kept.push_str(&line);
                }
                line.clear();
            }
        });
    }
    let addr = address
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("toolward did not start: {}", log.lock().unwrap()));
    (child, addr.parse().unwrap(), log, bytes)
}

/// Ends `child` with SIGTERM, as an operator would, and waits for it.
fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The process's CPU time so far (user and system), from `/proc/PID/stat`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name (which may hold spaces) start at field 3.
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// The process's resident memory, in KiB.
fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Sends `request` on a new connection and reads until the answer holds `until` or the
/// connection closes, within `limit`.
fn exchange(addr: SocketAddr, request: &str, until: &str, limit: Duration) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let started = Instant::now();
    let mut text = String::new();
    while !text.contains(until) && started.elapsed() < limit {
        let (more, closed) = read_until_closed(&mut stream, Duration::from_millis(200));
        text.push_str(&more);
        if closed {
            break;
        }
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_listener_backs_off_without_spinning_and_serves_again() {
    let Some(bin) = toolward_binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    // `max_connections` stays at its default, above what 64 descriptors allow.
    write_config(
        dir.path(),
        json!({"header_read_timeout_ms": 1000}),
        json!({}),
    )
    .await;
    let bin = bin.to_path_buf();
    let dir_path = dir.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        let (child, addr, log, log_bytes) = serve(&bin, &dir_path, Some(64));
        let pid = child.id();
        // Twice as many idle sockets as the process may have descriptors.
        let idle: Vec<TcpStream> = (0..128)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        let ticks_per_second: u64 = String::from_utf8(
            Command::new("getconf")
                .arg("CLK_TCK")
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
        .trim()
        .parse()
        .unwrap();
        let before = cpu_ticks(pid);
        let interval = Duration::from_secs(3);
        std::thread::sleep(interval);
        let spent = cpu_ticks(pid) - before;
        let spent_ms = spent * 1000 / ticks_per_second;
        eprintln!(
            "CPU time over {interval:?} with 128 idle sockets and 64 descriptors: {spent_ms} ms"
        );
        // A loop that retries `accept` at once spends the whole interval on a core.
        assert!(
            spent_ms < 600,
            "toolward spent {spent} ticks of CPU in {interval:?} with {} idle sockets",
            idle.len()
        );
        // Once the idle sockets have timed out, an authorized request is served.
        let answer = exchange(
            addr,
            &initialize_request(addr),
            "serverInfo",
            Duration::from_secs(30),
        );
        drop(idle);
        let written = log_bytes.load(Ordering::Relaxed);
        eprintln!("standard error over the shortage: {written} bytes");
        let messages = log.lock().unwrap().clone();
        stop(child);
        assert!(status_line(&answer).contains("200"), "{answer}\n{messages}");
        assert!(answer.contains("serverInfo"), "{answer}");
        assert!(
            messages.contains("accepting a connection failed")
                && messages.contains("out of file descriptors"),
            "the process never ran out of descriptors: {messages}"
        );
        assert!(
            written < 64 * 1024,
            "{written} bytes of log for one shortage: {messages}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_session_shares_one_tool_list_so_sessions_cost_no_copy_of_it() {
    let Some(bin) = toolward_binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), json!({}), json!({})).await;
    // 1000 tools of about 2 KiB each: a tool list of about 2 MB in the server's JSON.
    let description = "Reads a thing and tells what it holds. ".repeat(24);
    let properties: serde_json::Map<String, serde_json::Value> = (0..12)
        .map(|n| {
            (
                format!("field_{n}"),
                json!({"type": "string", "description": format!("The value of field {n}.")}),
            )
        })
        .collect();
    let tools: Vec<serde_json::Value> = (0..1000)
        .map(|n| {
            json!({"name": format!("t{n}"), "description": description,
                "inputSchema": {"type": "object", "properties": properties}})
        })
        .collect();
    let rules: serde_json::Map<String, serde_json::Value> = (0..1000)
        .map(|n| (format!("t{n}"), json!({"effect": "read-only"})))
        .collect();
    std::fs::write(
        dir.path().join("s.json"),
        json!({"pages": [json!({"tools": tools}).to_string()]}).to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("rules.json"),
        json!({"servers": {"s": {"tools": rules}}}).to_string(),
    )
    .unwrap();
    let pinned = toolward::pin::pin(&config, None, None, std::collections::BTreeMap::new())
        .await
        .unwrap();
    pinned.manifest.write(&config.manifest).unwrap();
    let bin = bin.to_path_buf();
    let dir_path = dir.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        let (child, addr, log, _) = serve(&bin, &dir_path, None);
        let pid = child.id();
        let sessions = 60;
        // One session first, so what every process has once (a first tool list, buffers)
        // is in the baseline.
        let first = exchange(addr, &initialize_request(addr), "serverInfo", Duration::from_secs(30));
        assert!(first.contains("serverInfo"), "{first}");
        let before = resident_kib(pid);
        for _ in 0..sessions {
            let answer =
                exchange(addr, &initialize_request(addr), "serverInfo", Duration::from_secs(30));
            assert!(answer.contains("serverInfo"), "{answer}\n{}", log.lock().unwrap());
        }
        let after = resident_kib(pid);
        stop(child);
        let per_session = after.saturating_sub(before) / sessions;
        eprintln!(
            "resident memory: {before} KiB after one session, {after} KiB after {} ({per_session} KiB a session)",
            sessions + 1
        );
        // A copy of the tool list is about 4 MiB in memory; a session without one is tens
        // of KiB.
        assert!(
            per_session < 512,
            "{per_session} KiB a session: {before} KiB before {sessions} sessions, {after} KiB after"
        );
    })
    .await
    .unwrap();
}

/// The `Mcp-Session-Id` an answer gives, if any.
fn session_header(answer: &str) -> Option<String> {
    answer
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
}

/// Opens a session with `initialize` and `notifications/initialized`, then closes it with
/// `DELETE`; the DELETE's answer.
fn open_and_close_session(addr: SocketAddr) -> String {
    let answer = exchange(
        addr,
        &initialize_request(addr),
        "serverInfo",
        Duration::from_secs(30),
    );
    let session = session_header(&answer).unwrap_or_else(|| panic!("no session: {answer}"));
    // `initialized`, as every client sends: the session then runs what a client gets
    // while connected.
    let body = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let initialized = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {ALICE}\r\nMcp-Session-Id: {session}\r\nMcp-Protocol-Version: {PROTOCOL_VERSION}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        addr.port(),
        body.len()
    );
    let accepted = exchange(addr, &initialized, "\r\n\r\n", Duration::from_secs(30));
    assert!(status_line(&accepted).contains(" 202"), "{accepted}");
    let delete = format!(
        "DELETE /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {ALICE}\r\nMcp-Session-Id: {session}\r\nMcp-Protocol-Version: {PROTOCOL_VERSION}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        addr.port()
    );
    exchange(addr, &delete, "\r\n\r\n", Duration::from_secs(30))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_session_gives_back_its_memory_so_create_and_delete_loops_do_not_grow_the_gateway()
{
    let Some(bin) = toolward_binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), json!({}), json!({})).await;
    let bin = bin.to_path_buf();
    let dir_path = dir.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        let (child, addr, log, _) = serve(&bin, &dir_path, None);
        let pid = child.id();
        // A first round, so what every process has once (buffers, the allocator's arenas)
        // is in the baseline.
        for _ in 0..200 {
            let closed = open_and_close_session(addr);
            assert!(
                status_line(&closed).contains(" 2"),
                "{closed}\n{}",
                log.lock().unwrap()
            );
        }
        let before = resident_kib(pid);
        let sessions = 2000;
        for _ in 0..sessions {
            let closed = open_and_close_session(addr);
            assert!(
                status_line(&closed).contains(" 2"),
                "{closed}\n{}",
                log.lock().unwrap()
            );
        }
        // Whatever a closed session's worker still does, it has had time to finish.
        std::thread::sleep(Duration::from_secs(1));
        let after = resident_kib(pid);
        stop(child);
        let grown = after.saturating_sub(before);
        eprintln!(
            "resident memory: {before} KiB before {sessions} sessions opened and closed, {after} KiB after ({grown} KiB more)"
        );
        // Kept, a closed session costs about 10 KiB: 20 MiB for these.
        assert!(
            grown < 4 * 1024,
            "{grown} KiB more after {sessions} sessions opened and closed: {before} KiB before, {after} KiB after"
        );
    })
    .await
    .unwrap();
}
