//! Approvals end to end, through the `toolward` binary and `Toolward::start`: who answered
//! and how, answers in the queue that count only with their MAC, a pending entry edited by
//! hand, the queue shared by several processes, and every argument shown to the person.
//!
//! The server is the fake one with one tool, `write`, classified `local-change`, which the
//! default policy holds for approval; it logs every call it receives, so a test can tell
//! that a refused call was never made.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolward::Toolward;
use toolward::approval::{self, ApprovalRequest};
use toolward::config::Config;

use crate::support::{FAKE_SERVER, toolward_binary};

/// A folder with the fake server, its rules, configs sharing one state folder, and a
/// manifest.
struct Bench {
    dir: tempfile::TempDir,
}

impl Bench {
    /// Writes the server, the rules and config `toolward.json` (approval timeout
    /// `approval_timeout_ms`), and pins.
    async fn new(approval_timeout_ms: u64) -> Bench {
        let bench = Bench {
            dir: tempfile::tempdir().unwrap(),
        };
        let listing = json!({"tools": [{
            "name": "write",
            "description": "writes a file",
            "inputSchema": {"type": "object", "properties": {
                "path": {"type": "string"}, "content": {"type": "string"}}},
        }]});
        // Made before the server starts: a confined server cannot create files directly in
        // the folder of the config it is withheld.
        std::fs::write(bench.path().join("calls.jsonl"), "").unwrap();
        let scenario = json!({
            "pages": [listing.to_string()],
            "calls_log": bench.path().join("calls.jsonl"),
        });
        std::fs::write(bench.path().join("s.json"), scenario.to_string()).unwrap();
        let rules = json!({"servers": {"s": {"tools": {"write": {"effect": "local-change"}}}}});
        std::fs::write(bench.path().join("rules.json"), rules.to_string()).unwrap();
        bench.config_file("toolward.json", "audit.jsonl", approval_timeout_ms);
        let config = bench.config("toolward.json");
        let pinned = toolward::pin::pin(&config, None, None, BTreeMap::new())
            .await
            .unwrap();
        assert!(pinned.failures.is_empty(), "{:?}", pinned.failures);
        pinned.manifest.write(&config.manifest).unwrap();
        bench
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn state(&self) -> PathBuf {
        self.path().join("state")
    }

    /// Writes config `name`: the bench's server and manifest, the shared state folder, its
    /// own audit log `state/<audit>`.
    fn config_file(&self, name: &str, audit: &str, approval_timeout_ms: u64) -> PathBuf {
        let config = json!({
            "mcpServers": {"s": {"command": FAKE_SERVER, "args": ["s.json"]}},
            "rules": {"file": "rules.json"},
            "manifest": "manifest.json",
            "state_dir": "state",
            "audit": {"file": format!("state/{audit}"), "sync": "none"},
            "limits": {"approval_timeout_ms": approval_timeout_ms, "call_timeout_ms": 10000},
        });
        let path = self.path().join(name);
        std::fs::write(&path, config.to_string()).unwrap();
        path
    }

    fn config(&self, name: &str) -> Config {
        Config::from_path(&self.path().join(name)).unwrap()
    }

    /// The arguments of every call the server received.
    fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path().join("calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// The records of audit log `state/<audit>`.
    fn audit(&self, audit: &str) -> Vec<Value> {
        crate::support::audit_records(&self.state().join(audit))
    }

    /// Runs `toolward approvals ARGS --config <config>`.
    fn approvals(&self, config: &str, args: &[&str]) -> Output {
        let bin = toolward_binary().unwrap();
        Command::new(bin)
            .arg("approvals")
            .args(args)
            .arg("--config")
            .arg(self.path().join(config))
            .output()
            .unwrap()
    }

    /// Waits until a call other than `known` waits in the queue; returns it.
    fn wait_for_pending(&self, known: &[&str]) -> ApprovalRequest {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(request) = approval::list_pending(&self.state())
                .unwrap()
                .into_iter()
                .find(|r| !known.contains(&r.call_id.as_str()))
            {
                return request;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no approval request became pending");
    }

    fn pending_file(&self, call_id: &str) -> PathBuf {
        self.state()
            .join(format!("approvals/pending/{call_id}.json"))
    }

    fn answer_file(&self, call_id: &str) -> PathBuf {
        self.state()
            .join(format!("approvals/answers/{call_id}.json"))
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes `value` where the queue reads answers, as a file of the operator's own (0600), so
/// only its content can make it a forgery.
fn drop_answer(path: &Path, value: &Value) {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    file.write_all(value.to_string().as_bytes()).unwrap();
}

/// Waits until `path` is gone.
fn wait_until_removed(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while path.exists() {
        assert!(
            Instant::now() < deadline,
            "`{}` was never taken away",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One call of `s__write` with `arguments` through `toolward` asking the queue, on a task.
fn spawn_call(
    toolward: &Arc<Toolward>,
    arguments: Value,
) -> tokio::task::JoinHandle<toolward::call::CallResult> {
    let toolward = Arc::clone(toolward);
    tokio::spawn(async move {
        let approver = toolward.queue_approver();
        toolward
            .call("s__write", arguments.as_object().cloned(), approver)
            .await
    })
}

async fn shutdown(toolward: Arc<Toolward>) {
    Arc::into_inner(toolward).unwrap().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_list_shows_every_argument_and_approve_refuses_a_hand_edited_entry() {
    let Some(_) = toolward_binary() else { return };
    let bench = Bench::new(4000).await;
    let toolward = Arc::new(
        Toolward::start(bench.config("toolward.json"))
            .await
            .unwrap(),
    );
    let content = format!("\u{202E}{}", "A".repeat(3072));
    let call = spawn_call(
        &toolward,
        json!({"content": content, "path": "/home/me/.bashrc"}),
    );
    let request = tokio::task::block_in_place(|| bench.wait_for_pending(&[]));

    // The 3 KB `content` sorts first; `path` is shown all the same, and the hidden character
    // that starts `content` is escaped.
    let listed = bench.approvals("toolward.json", &["list"]);
    let shown = text(&listed.stdout);
    assert!(listed.status.success(), "{shown}");
    assert!(shown.contains(r#"    path: "/home/me/.bashrc""#), "{shown}");
    assert!(
        shown.contains(r#"    content: "\u{202E}AAAA"#)
            && shown.contains("(3075 characters, the first 384 and the last 128 shown)"),
        "{shown}"
    );
    assert!(!shown.contains('\u{202E}'), "{shown}");

    // What a person reads is changed by hand, its hash left as it was.
    let path = bench.pending_file(&request.call_id);
    let mut entry: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    entry["arguments"] = json!(r#"{"content":"hello","path":"/tmp/harmless.txt"}"#);
    std::fs::write(&path, entry.to_string()).unwrap();
    let approved = bench.approvals("toolward.json", &["approve", &request.call_id]);
    let error = text(&approved.stderr);
    assert!(!approved.status.success(), "{}", text(&approved.stdout));
    assert!(
        error.contains("does not hash to its `arguments_sha256`")
            && error.contains(&request.call_id),
        "{error}"
    );
    assert!(!bench.answer_file(&request.call_id).exists());
    let listed = text(&bench.approvals("toolward.json", &["list"]).stdout);
    assert!(listed.contains("REFUSED"), "{listed}");

    let result = call.await.unwrap();
    assert!(result.is_error(), "{}", result.result);
    assert!(
        result.text().contains("no answer within"),
        "{}",
        result.text()
    );
    assert!(bench.received().is_empty(), "{:?}", bench.received());
    shutdown(toolward).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_answer_does_not_approve_the_call_is_audited_and_the_real_answer_names_its_user() {
    let Some(_) = toolward_binary() else { return };
    let bench = Bench::new(30_000).await;
    let toolward = Arc::new(
        Toolward::start(bench.config("toolward.json"))
            .await
            .unwrap(),
    );
    let call = spawn_call(&toolward, json!({"content": "x", "path": "/tmp/target"}));
    let request = {
        let bench = &bench;
        tokio::task::block_in_place(|| bench.wait_for_pending(&[]))
    };
    let answer_file = bench.answer_file(&request.call_id);
    let binding = json!({
        "call_id": request.call_id,
        "approve": true,
        "arguments_sha256": request.arguments_sha256,
        "description_sha256": request.description_sha256,
        "input_schema_sha256": request.input_schema_sha256,
    });
    // The answer format that counted before answers carried a MAC.
    drop_answer(&answer_file, &binding);
    tokio::task::block_in_place(|| wait_until_removed(&answer_file));
    // With an answerer and a MAC made without the key.
    let mut guessed = binding.clone();
    guessed["answered_by"] = json!({"channel": "queue", "answerer": "root", "uid": 0});
    guessed["mac"] = json!("00".repeat(32));
    drop_answer(&answer_file, &guessed);
    tokio::task::block_in_place(|| wait_until_removed(&answer_file));

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!call.is_finished(), "a forged answer ended the wait");
    assert!(bench.received().is_empty());

    let approved = bench.approvals("toolward.json", &["approve", &request.call_id]);
    let said = text(&approved.stdout);
    assert!(
        approved.status.success(),
        "{said}{}",
        text(&approved.stderr)
    );
    let me = approval::current_os_user();
    assert!(
        said.contains(&format!("as queue: user `{}` (uid {})", me.name, me.uid)),
        "{said}"
    );
    let result = call.await.unwrap();
    assert!(!result.is_error(), "{}", result.result);
    assert_eq!(bench.received().len(), 1);

    let records: Vec<Value> = bench
        .audit("audit.jsonl")
        .into_iter()
        .filter(|r| r["call_id"] == request.call_id.as_str())
        .collect();
    let forged: Vec<&str> = records
        .iter()
        .filter(|r| r["kind"] == "approval-forged")
        .map(|r| r["reason"].as_str().unwrap())
        .collect();
    assert_eq!(forged.len(), 2, "{records:#?}");
    assert!(
        forged
            .iter()
            .all(|r| r.contains(&answer_file.display().to_string())),
        "{forged:?}"
    );
    assert!(forged[0].contains("carries no MAC"), "{forged:?}");
    assert!(forged[1].contains("MAC does not verify"), "{forged:?}");
    let answered = records
        .iter()
        .find(|r| r["kind"] == "approval-answered")
        .unwrap();
    assert_eq!(answered["decision"], "allow");
    assert_eq!(
        answered["answered_by"],
        json!({"channel": "queue", "answerer": me.name, "uid": me.uid})
    );
    shutdown(toolward).await;
}

/// `toolward serve` on a config, spoken to over its stdin and stdout.
struct Serve {
    child: Child,
    /// Its standard input's other end: a pipe, or the master side of its terminal.
    stdin: Box<dyn Write + Send>,
    answers: mpsc::Receiver<Value>,
}

impl Serve {
    /// Starts `toolward serve --config <config>` and initializes it (without elicitation,
    /// so held calls go to the queue); returns once its start is complete.
    fn start(bench: &Bench, config: &str) -> Serve {
        let mut child = Command::new(toolward_binary().unwrap())
            .args(["serve", "--config"])
            .arg(bench.path().join(config))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = Box::new(child.stdin.take().unwrap());
        Serve::initialize(child, stdin)
    }

    /// As [`Serve::start`], with standard input a terminal (a new pseudo-terminal's slave
    /// side, as when serve runs by hand or under a terminal multiplexer), which toolward
    /// reads on a blocking thread; the test writes to its master side.
    fn start_on_terminal(bench: &Bench, config: &str) -> Serve {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        let master =
            openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let slave_path = ptsname(&master, Vec::new()).unwrap();
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(slave_path.to_str().unwrap())
            .unwrap();
        let child = Command::new(toolward_binary().unwrap())
            .args(["serve", "--config"])
            .arg(bench.path().join(config))
            .stdin(Stdio::from(slave))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Serve::initialize(child, Box::new(std::fs::File::from(master)))
    }

    fn initialize(mut child: Child, stdin: Box<dyn Write + Send>) -> Serve {
        let stdout = child.stdout.take().unwrap();
        let (sender, answers) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let message: Value = serde_json::from_str(&line).unwrap();
                if message.get("id").is_some() && sender.send(message).is_err() {
                    return;
                }
            }
        });
        let mut serve = Serve {
            child,
            stdin,
            answers,
        };
        serve.send(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "approvals-test", "version": "1"}}}),
        );
        assert_eq!(serve.answer()["id"], 0);
        serve.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        serve
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn answer(&self) -> Value {
        self.answers
            .recv_timeout(Duration::from_secs(30))
            .expect("toolward serve answered in time")
    }

    /// Sends a call of `s__write` to `path` as request `id`.
    fn call(&mut self, id: u64, path: &str) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "s__write", "arguments": {"path": path, "content": "c"}}}));
    }

    /// Closes stdin and waits for the process to end.
    fn close(self) {
        let Serve {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        child.wait().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_entries_of_live_processes_survive_every_start_and_only_an_abandoned_one_is_removed()
 {
    let Some(_) = toolward_binary() else { return };
    let bench = Bench::new(60_000).await;
    // Three configs on one state folder, each with its own audit log.
    bench.config_file("second.json", "second.jsonl", 60_000);
    bench.config_file("third.json", "third.jsonl", 60_000);

    let mut first = Serve::start(&bench, "toolward.json");
    first.call(1, "first");
    let held_first = tokio::task::block_in_place(|| bench.wait_for_pending(&[]));
    let mut second = Serve::start(&bench, "second.json");
    assert!(
        bench.pending_file(&held_first.call_id).exists(),
        "the second process's start removed the first one's pending call"
    );
    second.call(1, "second");
    let held_second =
        tokio::task::block_in_place(|| bench.wait_for_pending(&[held_first.call_id.as_str()]));

    // A third start, while both wait: neither is touched, nothing is called abandoned.
    let third = Toolward::start(bench.config("third.json")).await.unwrap();
    third.shutdown().await;
    let pending: Vec<String> = approval::list_pending(&bench.state())
        .unwrap()
        .into_iter()
        .map(|r| r.call_id)
        .collect();
    assert_eq!(pending.len(), 2, "{pending:?}");
    assert!(
        bench
            .audit("third.jsonl")
            .iter()
            .all(|r| r["kind"] != "refusal"),
        "{:#?}",
        bench.audit("third.jsonl")
    );

    // Each process gets its own answer.
    assert!(
        bench
            .approvals("toolward.json", &["approve", &held_first.call_id])
            .status
            .success()
    );
    let answered = tokio::task::block_in_place(|| first.answer());
    assert_ne!(answered["result"]["isError"], true, "{answered}");
    let denied = bench.approvals(
        "second.json",
        &["deny", &held_second.call_id, "--reason", "not now"],
    );
    assert!(denied.status.success(), "{}", text(&denied.stderr));
    let answered = tokio::task::block_in_place(|| second.answer());
    assert_eq!(answered["result"]["isError"], true, "{answered}");
    assert_eq!(bench.received().len(), 1);

    // The second process holds another call and is killed: its entry is abandoned.
    second.call(2, "orphan");
    let orphan = tokio::task::block_in_place(|| bench.wait_for_pending(&[]));
    second.child.kill().unwrap();
    second.child.wait().unwrap();
    let listed = text(&bench.approvals("toolward.json", &["list"]).stdout);
    assert!(listed.contains("ABANDONED"), "{listed}");
    let late = bench.approvals("toolward.json", &["approve", &orphan.call_id]);
    assert!(!late.status.success());
    assert!(
        text(&late.stderr).contains("is not waiting any more"),
        "{}",
        text(&late.stderr)
    );

    let third = Toolward::start(bench.config("third.json")).await.unwrap();
    third.shutdown().await;
    assert!(!bench.pending_file(&orphan.call_id).exists());
    let abandoned: Vec<Value> = bench
        .audit("third.jsonl")
        .into_iter()
        .filter(|r| r["kind"] == "refusal")
        .collect();
    assert_eq!(abandoned.len(), 1, "{abandoned:#?}");
    assert_eq!(abandoned[0]["call_id"], orphan.call_id.as_str());
    assert!(
        abandoned[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("abandoned")
    );
    first.close();
}

/// A held call whose client went away (its stdin closed) does not keep `toolward serve` from
/// a SIGTERM: it ends within seconds, long before the approval timeout, the held call is
/// recorded as ended before an answer, its pending entry is gone, and the chain verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_ends_at_sigterm_while_a_held_call_of_a_departed_client_waits() {
    let Some(_) = toolward_binary() else { return };
    let bench = Bench::new(600_000).await;
    let mut serve = Serve::start(&bench, "toolward.json");
    serve.call(1, "held");
    let held = tokio::task::block_in_place(|| bench.wait_for_pending(&[]));
    let Serve { child, stdin, .. } = serve;
    drop(stdin);
    ends_at_sigterm_with_the_held_call_on_record(&bench, child, &held);
}

/// The same when standard input is a terminal that says nothing more (its client, a person
/// or a multiplexer, went away without closing it): the read waiting on the terminal cannot
/// be cancelled, and must not keep the process from ending at SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_a_terminal_ends_at_sigterm_while_a_held_call_waits() {
    let Some(_) = toolward_binary() else { return };
    let bench = Bench::new(600_000).await;
    let mut serve = Serve::start_on_terminal(&bench, "toolward.json");
    serve.call(1, "held");
    let held = tokio::task::block_in_place(|| bench.wait_for_pending(&[]));
    let Serve { child, stdin, .. } = serve;
    ends_at_sigterm_with_the_held_call_on_record(&bench, child, &held);
    drop(stdin);
}

/// Sends `child` (a `toolward serve` holding `held`) SIGTERM and asserts that it ends within
/// 5 s, successfully, with the held call recorded as cancelled, its pending entry gone,
/// nothing forwarded, and the audit chain intact (`toolward audit verify`).
fn ends_at_sigterm_with_the_held_call_on_record(
    bench: &Bench,
    mut child: Child,
    held: &ApprovalRequest,
) {
    let bin = toolward_binary().unwrap();
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let sent = Instant::now();
    let ended = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if sent.elapsed() > Duration::from_secs(5) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("`toolward serve` was still running 5 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(ended.success(), "{ended}");
    assert!(!bench.pending_file(&held.call_id).exists());
    assert!(bench.received().is_empty(), "{:?}", bench.received());
    let records = bench.audit("audit.jsonl");
    let last = records
        .iter()
        .rev()
        .find(|r| r["call_id"] == held.call_id.as_str())
        .unwrap();
    assert_eq!(last["kind"], "refusal", "{last:#}");
    assert!(
        last["reason"]
            .as_str()
            .unwrap()
            .contains("cancelled before it finished"),
        "{last:#}"
    );
    let verify = Command::new(bin)
        .args(["audit", "verify", "--config"])
        .arg(bench.path().join("toolward.json"))
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}{}",
        text(&verify.stdout),
        text(&verify.stderr)
    );
}
