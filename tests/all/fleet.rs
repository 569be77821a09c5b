//! A fleet end to end, through the `toolward` binary: two `serve --listen` gateways on one
//! PostgreSQL database (`TOOLWARD_TEST_DATABASE_URL`; see `store_contract` for when the test
//! fails or skips without it).
//!
//! - a call held on one gateway is listed and approved through the other's config;
//! - many calls alternated between the two by a client that does not care which answers
//!   (one 2025-11-25 session per gateway; a call that fails on one is made on the other),
//!   with `kill -9` of one gateway mid-run; afterwards `toolward audit verify --config`
//!   passes on the database, and every call the server received has its `decision` and
//!   `forwarded` records, in that order;
//! - the database stopped while a gateway serves: calls fail closed with a tool error naming
//!   the store, the server receives nothing, and calls go through again once it is back;
//! - what one gateway delivered labels the session (or the sessionless principal) on the
//!   other: a tool that does not accept untrusted content is held there.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolward::config::Config;
use toolward::transport::{HttpSpec, TransportLimits, Upstream};

use crate::store_contract::test_database_url;
use crate::support::{FAKE_SERVER, toolward_binary};

const TOKEN: &str = "fleet-0123456789abcdef0123456789abcdef";

/// Calls of the full run; `TOOLWARD_FLEET_CALLS` sets fewer while developing.
fn calls_in_run() -> usize {
    std::env::var("TOOLWARD_FLEET_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000)
}

/// A folder with the fake server `s` (`echo` read-only, `write` local-change: held), its
/// rules, a manifest, and configs `gw1.json`, `gw2.json` on the database `url`, each with its
/// own state folder.
pub(crate) struct Fleet {
    pub(crate) dir: tempfile::TempDir,
}

impl Fleet {
    pub(crate) async fn new(url: &str) -> Fleet {
        Fleet::with_server(url, "s").await
    }

    /// As [`Fleet::new`], the server named `server`.
    async fn with_server(url: &str, server: &str) -> Fleet {
        crate::store_contract::migrate(url).await;
        Fleet::unmigrated(url, server).await
    }

    /// As [`Fleet::with_server`], without migrating the database first.
    pub(crate) async fn unmigrated(url: &str, server: &str) -> Fleet {
        let fleet = Fleet {
            dir: tempfile::tempdir().unwrap(),
        };
        let dir = fleet.dir.path();
        // One scenario and one calls log per gateway: two servers appending to one file
        // could interleave their lines.
        for n in 1..=2 {
            std::fs::write(dir.join(format!("calls{n}.jsonl")), "").unwrap();
            std::fs::write(
                dir.join(format!("s{n}.json")),
                json!({
                    "pages": [r#"{"tools": [{"name": "echo", "description": "Echoes.", "inputSchema": {"type": "object"}}, {"name": "write", "description": "Writes.", "inputSchema": {"type": "object"}}]}"#],
                    "calls_log": dir.join(format!("calls{n}.jsonl")),
                })
                .to_string(),
            )
            .unwrap();
        }
        std::fs::write(
            dir.join("rules.json"),
            json!({"servers": {server: {"tools": {"echo": {"effect": "read-only"}, "write": {"effect": "local-change"}}}}})
                .to_string(),
        )
        .unwrap();
        for n in 1..=2 {
            let document = json!({
                "mcpServers": {server: {"command": FAKE_SERVER, "args": [format!("s{n}.json")]}},
                "rules": {"file": "rules.json"}, "manifest": "manifest.json",
                "state_dir": format!("state{n}"),
                "servers_dir": format!("servers{n}"),
                "audit": {"file": format!("state{n}/audit.jsonl"), "record_arguments": true},
                "store": {"postgres": url},
                "listen": {"tokens": {"fleet": TOKEN}},
                "limits": {"approval_timeout_ms": 30000, "call_timeout_ms": 20000},
            });
            std::fs::write(dir.join(format!("gw{n}.json")), document.to_string()).unwrap();
        }
        let config = Config::from_path(&dir.join("gw1.json")).unwrap();
        let pinned = toolward::pin::pin(&config, None, None, BTreeMap::new())
            .await
            .unwrap();
        assert!(pinned.failures.is_empty(), "{:?}", pinned.failures);
        pinned.manifest.write(&config.manifest).unwrap();
        fleet
    }

    pub(crate) fn config(&self, n: usize) -> PathBuf {
        self.dir.path().join(format!("gw{n}.json"))
    }

    /// A copy of `gw1.json` named `NAME.json`, on the database `url` (another role), with a
    /// state folder of its own.
    pub(crate) fn config_for(&self, name: &str, url: &str) -> PathBuf {
        let mut document: Value =
            serde_json::from_str(&std::fs::read_to_string(self.config(1)).unwrap()).unwrap();
        document["store"] = json!({"postgres": url});
        document["state_dir"] = json!(format!("state-{name}"));
        document["servers_dir"] = json!(format!("servers-{name}"));
        let path = self.dir.path().join(format!("{name}.json"));
        std::fs::write(&path, document.to_string()).unwrap();
        path
    }

    /// Runs `toolward ARGS --config gwN.json`; its exit status and standard output alone.
    fn toolward_stdout(&self, n: usize, args: &[&str]) -> (bool, String) {
        let output = Command::new(toolward_binary().unwrap())
            .args(args)
            .arg("--config")
            .arg(self.config(n))
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    }

    /// Runs `toolward ARGS --config gwN.json`; its exit status, standard output and error.
    fn toolward(&self, n: usize, args: &[&str]) -> (bool, String) {
        let output = Command::new(toolward_binary().unwrap())
            .args(args)
            .arg("--config")
            .arg(self.config(n))
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned()
                + &String::from_utf8_lossy(&output.stderr),
        )
    }

    /// The arguments of every call the server received.
    fn received(&self) -> Vec<Value> {
        (1..=2)
            .flat_map(|n| {
                std::fs::read_to_string(self.dir.path().join(format!("calls{n}.jsonl")))
                    .unwrap()
                    .lines()
                    .map(|line| serde_json::from_str(line).unwrap())
                    .collect::<Vec<Value>>()
            })
            .collect()
    }

    /// Every record in the database (`toolward audit export`).
    fn records(&self) -> Vec<Value> {
        let out = self.dir.path().join("export.jsonl");
        let (ok, text) = self.toolward(1, &["audit", "export", "--out", out.to_str().unwrap()]);
        assert!(ok, "audit export failed: {text}");
        std::fs::read_to_string(out)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

/// A `toolward serve --listen` process, killed when dropped.
pub(crate) struct Gateway {
    child: Child,
    url: String,
    addr: std::net::SocketAddr,
}

impl Gateway {
    pub(crate) fn start(config: &Path) -> Gateway {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(toolward_binary().unwrap())
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--config",
            ])
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (ready, wait) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if line.contains("toolward serves") {
                    let _ = ready.send(());
                }
            }
        });
        wait.recv_timeout(Duration::from_secs(60))
            .expect("the gateway did not start serving");
        Gateway {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    pub(crate) async fn client(&self) -> Upstream {
        let spec = HttpSpec {
            url: self.url.clone(),
            headers: BTreeMap::from([(String::from("Authorization"), format!("Bearer {TOKEN}"))]),
            ..HttpSpec::default()
        };
        Upstream::connect_http("gateway", &spec, &TransportLimits::default())
            .await
            .unwrap()
    }

    fn kill(&mut self) {
        // SIGKILL: no shutdown, nothing flushed that was not already committed.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}

pub(crate) async fn call(client: &Upstream, tool: &str, arguments: Value) -> Result<Value, String> {
    client
        .call_tool(
            tool,
            arguments.as_object().cloned().unwrap(),
            Duration::from_secs(40),
            None,
        )
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateways_on_one_database_keep_one_chain_through_a_kill_and_share_approvals() {
    let Some(url) = test_database_url("fleet") else {
        return;
    };
    let fleet = Fleet::new(&url).await;
    let gw1 = Gateway::start(&fleet.config(1));
    let mut gw2 = Gateway::start(&fleet.config(2));
    let c1 = Arc::new(gw1.client().await);
    let c2 = Arc::new(gw2.client().await);
    let run = toolward::ids::new_ulid();

    // A call held on gateway 1, approved through gateway 2's config.
    let held = tokio::spawn({
        let c1 = Arc::clone(&c1);
        let run = run.clone();
        async move { call(&c1, "s__write", json!({"run": run, "held": true})).await }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let call_id = loop {
        let (ok, text) = fleet.toolward_stdout(2, &["approvals", "list", "--json"]);
        assert!(ok, "approvals list failed: {text}");
        let listed: Vec<Value> = serde_json::from_str(&text).unwrap();
        if let Some(entry) = listed
            .iter()
            .find(|e| e["arguments"].as_str().is_some_and(|a| a.contains(&run)))
        {
            break entry["call_id"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "the held call was never listed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (ok, text) = fleet.toolward(2, &["approvals", "approve", &call_id]);
    assert!(ok, "approve failed: {text}");
    let (ok, _) = fleet.toolward(1, &["approvals", "approve", &call_id]);
    assert!(!ok, "a second answer was accepted");
    let result = held.await.unwrap().unwrap();
    assert_eq!(result["isError"], json!(false), "{result}");

    // Many calls, alternated, one gateway killed halfway.
    let total = calls_in_run();
    let done = Arc::new(AtomicUsize::new(0));
    let workers = 8;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (c1, c2, done, run) = (
            Arc::clone(&c1),
            Arc::clone(&c2),
            Arc::clone(&done),
            run.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut served = [0usize; 2];
            for i in (w..total).step_by(workers) {
                let arguments = json!({"run": run, "n": i});
                let first = i % 2;
                let order = [first, 1 - first];
                let mut answered = false;
                for g in order {
                    let client = if g == 0 { &c1 } else { &c2 };
                    if let Ok(result) = call(client, "s__echo", arguments.clone()).await
                        && result["isError"] == json!(false)
                    {
                        served[g] += 1;
                        answered = true;
                        break;
                    }
                }
                assert!(answered, "call {i} was answered by neither gateway");
                done.fetch_add(1, Ordering::SeqCst);
            }
            served
        }));
    }
    while done.load(Ordering::SeqCst) < total / 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    gw2.kill();
    let mut served = [0usize; 2];
    for task in tasks {
        let s = task.await.unwrap();
        served[0] += s[0];
        served[1] += s[1];
    }
    assert_eq!(served[0] + served[1], total);
    assert!(served[1] > 0 && served[0] > served[1], "served: {served:?}");

    // The chain verifies, from either gateway's config.
    let (ok, text) = fleet.toolward(1, &["audit", "verify"]);
    assert!(ok, "audit verify --config failed: {text}");
    assert!(
        text.contains("chain intact") && text.contains(": matches"),
        "{text}"
    );

    // Every call the server received has its decision and its forwarded record, in order.
    let records = fleet.records();
    let mut seen: HashMap<String, Vec<(u64, String)>> = HashMap::new();
    let mut by_arguments: HashMap<String, Vec<String>> = HashMap::new();
    for record in &records {
        let Some(id) = record["call_id"].as_str() else {
            continue;
        };
        seen.entry(id.to_owned()).or_default().push((
            record["seq"].as_u64().unwrap(),
            record["kind"].as_str().unwrap().to_owned(),
        ));
        if record["kind"] == "call-received"
            && let Some(arguments) = record["arguments"].as_str()
            && arguments.contains(&run)
        {
            by_arguments
                .entry(arguments.to_owned())
                .or_default()
                .push(id.to_owned());
        }
    }
    // Nothing forwarded without its decision before it.
    for (id, kinds) in &seen {
        let at = |kind: &str| kinds.iter().find(|(_, k)| k == kind).map(|(seq, _)| *seq);
        if let Some(forwarded) = at("forwarded") {
            let decision = at("decision")
                .unwrap_or_else(|| panic!("call {id} was forwarded without a decision"));
            assert!(
                decision < forwarded,
                "call {id}: forwarded before its decision"
            );
        }
    }
    // Every call the server received (a call retried after the kill may arrive twice, each
    // time from its own call) has a forwarded record.
    let mut received: HashMap<String, usize> = HashMap::new();
    for arguments in fleet.received().iter().filter(|a| a["run"] == json!(run)) {
        let text = toolward::canonical::to_canonical(&toolward::canonical::Value::from_serde_json(
            arguments,
        ));
        *received.entry(text).or_default() += 1;
    }
    assert_eq!(
        received.len(),
        total + 1,
        "the server received every call of the run, and the held one"
    );
    for (text, count) in &received {
        let ids = by_arguments
            .get(text)
            .unwrap_or_else(|| panic!("the server received {text} without a call-received record"));
        let forwarded = ids
            .iter()
            .filter(|id| seen[*id].iter().any(|(_, k)| k == "forwarded"))
            .count();
        assert!(
            forwarded >= *count,
            "the server received {text} {count} times, {forwarded} forwarded records"
        );
    }
    let answered = records
        .iter()
        .find(|r| r["kind"] == "approval-answered" && r["call_id"] == json!(call_id))
        .expect("no approval-answered record");
    assert_eq!(
        answered["answered_by"]["answerer"],
        json!(toolward::approval::current_os_user().name)
    );
    drop(c1);
    drop(gw1);
}

/// A PostgreSQL of the test's own (`scripts/postgres.sh` in a folder of its own), so that
/// stopping it does not stop the other tests' database. Stopped and removed when dropped.
///
/// The server runs in the foreground as this process's descendant (`postgres.sh run`), not
/// daemonized by `pg_ctl`: the test binary is a child subreaper (`hostile`, `real`), so a
/// daemonized server would be reparented to it and killed with the orphans of the next
/// server a test closes.
struct OwnDatabase {
    dir: PathBuf,
    url: String,
    server: std::sync::Mutex<Option<std::process::Child>>,
}

impl OwnDatabase {
    fn start() -> OwnDatabase {
        // Directly under /tmp: as root the server runs as `postgres`, which must reach it.
        let dir = std::env::temp_dir().join(format!("toolward-pg-{}", toolward::ids::new_ulid()));
        let output = Self::script(&dir, "start");
        let url = output
            .split('\'')
            .nth(1)
            .unwrap_or_else(|| panic!("scripts/postgres.sh start printed no URL: {output}"))
            .to_owned();
        // The database exists now; from here on the server is our descendant.
        Self::script(&dir, "pause");
        let db = OwnDatabase {
            dir,
            url,
            server: std::sync::Mutex::new(None),
        };
        db.resume();
        db
    }

    fn script(dir: &Path, command: &str) -> String {
        let output = Command::new("bash")
            .arg(crate::support::repo().join("scripts/postgres.sh"))
            .arg(command)
            .env("TOOLWARD_PG_DIR", dir)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "scripts/postgres.sh {command} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Stops the server as a crash would (`SIGKILL` to `runuser`'s child is not ours to
    /// send; `SIGQUIT` is PostgreSQL's immediate shutdown) and waits until it is gone.
    fn pause(&self) {
        if let Some(mut server) = self.server.lock().unwrap().take() {
            let postmaster = std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
                .ok()
                .and_then(|text| text.lines().next().map(str::to_owned));
            if let Some(pid) = postmaster {
                let _ = Command::new("kill").args(["-QUIT", &pid]).status();
            }
            let _ = server.wait();
        }
    }

    fn resume(&self) {
        let server = Command::new("bash")
            .arg(crate::support::repo().join("scripts/postgres.sh"))
            .arg("run")
            .env("TOOLWARD_PG_DIR", &self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        *self.server.lock().unwrap() = Some(server);
        Self::script(&self.dir, "ready");
    }
}

impl Drop for OwnDatabase {
    fn drop(&mut self) {
        self.pause();
        let _ = Command::new("bash")
            .arg(crate::support::repo().join("scripts/postgres.sh"))
            .arg("stop")
            .env("TOOLWARD_PG_DIR", &self.dir)
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_fail_closed_naming_the_store_while_the_database_is_down_and_resume_after() {
    if test_database_url("database down").is_none() {
        return;
    }
    let db = OwnDatabase::start();
    let fleet = Fleet::new(&db.url).await;
    let gw = Gateway::start(&fleet.config(1));
    let client = gw.client().await;
    let ok = call(&client, "s__echo", json!({"step": "before"}))
        .await
        .unwrap();
    assert_eq!(ok["isError"], json!(false), "{ok}");

    db.pause();
    let received = fleet.received().len();
    let port = db
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    let store = format!("PostgreSQL store `postgres://127.0.0.1:{port}/toolward`");
    for step in 0..3 {
        let refused = call(&client, "s__echo", json!({"step": "down", "n": step}))
            .await
            .unwrap();
        assert_eq!(refused["isError"], json!(true), "{refused}");
        let text = refused["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains(&store),
            "the refusal does not name the store: {text}"
        );
    }
    assert_eq!(
        fleet.received().len(),
        received,
        "a call went through without its record"
    );

    db.resume();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let result = call(&client, "s__echo", json!({"step": "after"}))
            .await
            .unwrap();
        if result["isError"] == json!(false) {
            break;
        }
        assert!(Instant::now() < deadline, "calls did not resume: {result}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (ok, text) = fleet.toolward(1, &["audit", "verify"]);
    assert!(ok, "{text}");
}

#[test]
fn start_refuses_an_unreachable_database_naming_it_without_the_password() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.json"),
        r#"{"servers": {"s": {"tools": {}}}}"#,
    )
    .unwrap();
    let config = json!({
        "mcpServers": {"s": {"command": FAKE_SERVER, "args": ["s.json"]}},
        "rules": {"file": "rules.json"}, "manifest": "manifest.json", "state_dir": "state",
        "store": {"postgres": "${FLEET_TEST_URL}"},
    });
    std::fs::write(dir.path().join("toolward.json"), config.to_string()).unwrap();
    let output = Command::new(toolward_binary().unwrap())
        .args(["serve", "--config"])
        .arg(dir.path().join("toolward.json"))
        .env(
            "FLEET_TEST_URL",
            "postgres://fleet:s3cret-pass@127.0.0.1:1/audit_db",
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("PostgreSQL store `postgres://127.0.0.1:1/audit_db`: cannot connect"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("s3cret-pass"),
        "the password was printed: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_folder_log_imported_into_an_empty_database_continues_as_one_chain() {
    if test_database_url("audit import").is_none() {
        return;
    }
    let db = OwnDatabase::start();
    let fleet = Fleet::new(&db.url).await;
    // A state folder's log of five records.
    let state = fleet.dir.path().join("old-state");
    let log = state.join("audit.jsonl");
    {
        let dir = toolward::store::StateDir::open(&state).unwrap();
        let old = toolward::audit::AuditLog::open_with_head(
            &log,
            toolward::audit::AuditSync::Always,
            &dir,
        )
        .unwrap();
        for _ in 0..5 {
            old.append(toolward::audit::AuditEvent::new(
                toolward::audit::AuditKind::Load,
            ))
            .unwrap();
        }
    }
    let before = toolward::audit::verify(&log).unwrap();
    let (ok, text) = fleet.toolward(1, &["audit", "import", log.to_str().unwrap()]);
    assert!(ok, "{text}");
    let (ok, text) = fleet.toolward(1, &["audit", "verify"]);
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!(
            "5 records, chain intact, last hash {}",
            before.last_hash
        )),
        "{text}"
    );
    // The database's chain is no longer empty: a second import is refused.
    let (ok, text) = fleet.toolward(1, &["audit", "import", log.to_str().unwrap()]);
    assert!(!ok && text.contains("already holds 5 records"), "{text}");
    // Records written after the import continue the imported chain.
    let store = toolward::store::postgres::PgStore::new(&db.url).unwrap();
    {
        use toolward::store::AuditStore as _;
        let audit = toolward::store::postgres::PgAudit::open(&store)
            .await
            .unwrap();
        let seq = audit
            .append(toolward::audit::AuditEvent::new(
                toolward::audit::AuditKind::Load,
            ))
            .unwrap();
        assert_eq!(seq, 5);
    }
    let out = fleet.dir.path().join("after.jsonl");
    let (ok, text) = fleet.toolward(1, &["audit", "export", "--out", out.to_str().unwrap()]);
    assert!(ok, "{text}");
    let report = toolward::audit::verify(&out).unwrap();
    assert!(report.is_intact() && report.records == 6, "{report:?}");
    // The export begins with the imported lines, byte for byte (the room after them left).
    let imported = crate::support::audit_lines(&log).join("\n") + "\n";
    assert!(
        std::fs::read(&out)
            .unwrap()
            .starts_with(imported.as_bytes())
    );
}

/// A per-minute limit on a tool, calls made at once through two gateways on one database:
/// exactly the limit is forwarded across both, each other call denied naming the limit; the
/// decision records carry only the facts of the scope the limit names.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateways_on_one_database_forward_no_more_than_a_limit_of_calls_made_at_once() {
    let Some(url) = test_database_url("fleet limit") else {
        return;
    };
    const LIMIT: usize = 5;
    const CALLS: usize = 24;
    // A server of its own name: the database is shared with the tests running at once, and
    // the counters key on the server and tool.
    let server = format!("l{}", toolward::ids::new_ulid().to_lowercase());
    let fleet = Fleet::with_server(&url, &server).await;
    std::fs::write(
        fleet.dir.path().join("rules.json"),
        json!({"servers": {&server: {"tools": {
            "echo": {"effect": "read-only", "limits": {"forwarded_per_minute": LIMIT}},
            "write": {"effect": "local-change"}}}}})
        .to_string(),
    )
    .unwrap();
    let tool = format!("{server}__echo");
    let gw1 = Gateway::start(&fleet.config(1));
    let gw2 = Gateway::start(&fleet.config(2));
    let clients = [Arc::new(gw1.client().await), Arc::new(gw2.client().await)];
    let start = Arc::new(tokio::sync::Barrier::new(CALLS));
    let mut tasks = Vec::new();
    for i in 0..CALLS {
        let client = Arc::clone(&clients[i % 2]);
        let start = Arc::clone(&start);
        let tool = tool.clone();
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            call(&client, &tool, json!({"n": i})).await.unwrap()
        }));
    }
    let mut forwarded = 0;
    for task in tasks {
        let result = task.await.unwrap();
        if result["isError"] == json!(true) {
            let text = result["content"][0]["text"].as_str().unwrap_or_default();
            assert!(
                text.contains(&format!(
                    "limit `5 forwarded calls per minute` on tool `echo` of server `{server}` reached"
                )),
                "{result}"
            );
        } else {
            forwarded += 1;
        }
    }
    assert_eq!(
        forwarded, LIMIT,
        "calls at once passed the limit across two gateways"
    );
    assert_eq!(fleet.received().len(), LIMIT);
    let decisions: Vec<Value> = fleet
        .records()
        .into_iter()
        .filter(|record| record["kind"] == "decision" && record["server"] == json!(server))
        .collect();
    assert_eq!(decisions.len(), CALLS);
    for record in &decisions {
        let facts = record["facts"].as_object().unwrap();
        assert!(
            facts.keys().all(|name| name.starts_with("tool.")),
            "{record}"
        );
    }
}

/// Calls per second of `clients` (a call goes to `clients[i % len]`), `workers` at once.
async fn calls_per_second(clients: &[Arc<Upstream>], total: usize, workers: usize) -> f64 {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let clients = clients.to_vec();
        tasks.push(tokio::spawn(async move {
            for i in (w..total).step_by(workers) {
                let client = &clients[i % clients.len()];
                let result = call(client, "s__echo", json!({"n": i})).await.unwrap();
                assert_eq!(result["isError"], json!(false), "{result}");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// The measurement the fleet's note reports: run with
/// `cargo test --test all calls_per_second -- --ignored --nocapture` (and
/// `TOOLWARD_FLEET_CALLS`, default 1000, `TOOLWARD_FLEET_WORKERS`, default 16). With
/// `TOOLWARD_FLEET_LIMIT=N`, `echo` has a limit of N forwarded calls per minute, so every call
/// reserves its tool's counter (without it the rules have no limits and no call touches a
/// counter).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement, not a check: run it with --ignored --nocapture"]
async fn calls_per_second_of_two_gateways_on_one_database_against_one_on_its_state_folder() {
    let Some(url) = test_database_url("calls per second") else {
        return;
    };
    let fleet = Fleet::new(&url).await;
    let limit: Option<u64> = std::env::var("TOOLWARD_FLEET_LIMIT")
        .ok()
        .and_then(|n| n.parse().ok());
    if let Some(limit) = limit {
        std::fs::write(
            fleet.dir.path().join("rules.json"),
            json!({"servers": {"s": {"tools": {
                "echo": {"effect": "read-only", "limits": {"forwarded_per_minute": limit}},
                "write": {"effect": "local-change"}}}}})
            .to_string(),
        )
        .unwrap();
    }
    let mut single: Value =
        serde_json::from_str(&std::fs::read_to_string(fleet.config(1)).unwrap()).unwrap();
    single.as_object_mut().unwrap().remove("store");
    single["state_dir"] = json!("state0");
    single["servers_dir"] = json!("servers0");
    single["audit"] = json!({"file": "state0/audit.jsonl", "sync": "always"});
    std::fs::write(fleet.dir.path().join("gw0.json"), single.to_string()).unwrap();
    let total = calls_in_run();
    let workers = std::env::var("TOOLWARD_FLEET_WORKERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(16);

    let gw0 = Gateway::start(&fleet.dir.path().join("gw0.json"));
    let c0 = Arc::new(gw0.client().await);
    calls_per_second(&[Arc::clone(&c0)], workers, workers).await; // warm up
    let state_folder = calls_per_second(&[c0], total, workers).await;
    drop(gw0);

    let gw1 = Gateway::start(&fleet.config(1));
    let gw2 = Gateway::start(&fleet.config(2));
    let clients = [Arc::new(gw1.client().await), Arc::new(gw2.client().await)];
    calls_per_second(&clients, workers, workers).await; // warm up
    let database = calls_per_second(&clients, total, workers).await;
    println!(
        "{total} calls, {workers} at once, limit {limit:?}: one gateway on its state folder (audit.sync always): {state_folder:.0} calls/s; two gateways on one PostgreSQL: {database:.0} calls/s"
    );
}

/// The rules of the label tests: `echo` returns untrusted content, `write` (read-only, so
/// allowed until then) does not accept it.
pub(crate) fn label_rules(fleet: &Fleet, server: &str) {
    std::fs::write(
        fleet.dir.path().join("rules.json"),
        json!({"servers": {server: {"tools": {
            "echo": {"effect": "read-only", "returns": {"untrusted": true, "confidentiality": "public"}},
            "write": {"effect": "read-only", "accepts_untrusted": false}}}}})
        .to_string(),
    )
    .unwrap();
}

/// A client of the 2026-07-28 revision has no session: its calls, answered by either of two
/// gateways on one database, gather labels per principal in the database. After `echo`'s
/// untrusted result is delivered by one gateway, the other holds the principal's `write`
/// (asking through `input_required`, forwarding nothing), its decision record naming the
/// labels; another principal's `write` on that gateway goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateways_on_one_database_see_the_labels_of_a_sessionless_principal_gathered_on_either()
{
    let Some(url) = test_database_url("fleet labels of a principal") else {
        return;
    };
    // Principals of their own: the database is shared with the tests running at once, and
    // a principal's labels last an hour.
    let (alice, bob) = (
        format!("alice-{}", toolward::ids::new_ulid().to_lowercase()),
        format!("bob-{}", toolward::ids::new_ulid().to_lowercase()),
    );
    const BOB_TOKEN: &str = "fleet-bob-0123456789abcdef0123456789abcd";
    let fleet = Fleet::new(&url).await;
    label_rules(&fleet, "s");
    for n in 1..=2 {
        let mut document: Value =
            serde_json::from_str(&std::fs::read_to_string(fleet.config(n)).unwrap()).unwrap();
        document["listen"]["tokens"] = json!({&alice: TOKEN, &bob: BOB_TOKEN});
        std::fs::write(fleet.config(n), document.to_string()).unwrap();
    }
    let gw1 = Gateway::start(&fleet.config(1));
    let gw2 = Gateway::start(&fleet.config(2));
    let request = |id: u64, tool: &str| {
        crate::listen::stateless::request(
            id,
            "tools/call",
            json!({"name": tool, "arguments": {"id": id}}),
            true,
        )
    };
    use crate::listen::stateless::call as post;

    let before = post(gw2.addr, TOKEN, &request(1, "s__write")).await;
    assert_eq!(before["result"]["isError"], json!(false), "{before}");
    let fetched = post(gw1.addr, TOKEN, &request(2, "s__echo")).await;
    assert_eq!(fetched["result"]["isError"], json!(false), "{fetched}");
    let held = post(gw2.addr, TOKEN, &request(3, "s__write")).await;
    assert_eq!(held["result"]["resultType"], "input_required", "{held}");
    let others = post(gw2.addr, BOB_TOKEN, &request(4, "s__write")).await;
    assert_eq!(others["result"]["isError"], json!(false), "{others}");
    drop((gw1, gw2));

    let ids: Vec<u64> = fleet
        .received()
        .iter()
        .filter_map(|arguments| arguments["id"].as_u64())
        .collect();
    let mut ids = ids;
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 4], "the held write reached the server");
    let decisions: Vec<Value> = fleet
        .records()
        .into_iter()
        .filter(|r| {
            r["kind"] == "decision"
                && (r["principal"] == json!(alice) || r["principal"] == json!(bob))
        })
        .collect();
    let hold = decisions
        .iter()
        .find(|r| r["decision"] == "hold")
        .unwrap_or_else(|| panic!("no hold: {decisions:?}"));
    assert_eq!(hold["principal"], json!(alice), "{hold}");
    assert_eq!(
        hold.get("session"),
        None,
        "a 2026-07-28 call has no session: {hold}"
    );
    assert!(
        hold["reason"].as_str().unwrap().contains(
            "tool `write` of server `s` does not accept untrusted content, and this session has seen some"
        ),
        "{hold}"
    );
    assert_eq!(
        hold["labels"],
        json!({"untrusted": true, "confidentiality": "public", "tags": []})
    );
    assert_eq!(
        decisions.iter().filter(|r| r["decision"] == "hold").count(),
        1,
        "{decisions:?}"
    );
}

/// Two gateways on one database (`Toolward::start` twice, each with its own state folder)
/// whose embedder gives both one session id: what the session was delivered on one labels
/// its calls on the other, and the approver is told what it has seen; another session on
/// that gateway has seen nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateways_on_one_database_see_one_sessions_labels() {
    let Some(url) = test_database_url("fleet labels of a session") else {
        return;
    };
    let fleet = Fleet::new(&url).await;
    label_rules(&fleet, "s");
    let one = toolward::Toolward::start(Config::from_path(&fleet.config(1)).unwrap())
        .await
        .unwrap();
    let two = toolward::Toolward::start(Config::from_path(&fleet.config(2)).unwrap())
        .await
        .unwrap();
    let asked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let approver = {
        let asked = Arc::clone(&asked);
        Arc::new(toolward::approval::FnApprover::new(
            move |request: toolward::approval::ApprovalRequest| {
                asked.lock().unwrap().push(request.reason.clone());
                async { toolward::approval::ApprovalAnswer::Denied(String::from("no")) }
            },
        ))
    };
    let session = format!("shared-{}", toolward::ids::new_ulid());
    let context = |toolward: &toolward::Toolward, session: &str| {
        let mut context = toolward.context(approver.clone());
        context.session = session.to_owned();
        context
    };
    let (on_one, on_two) = (context(&one, &session), context(&two, &session));

    let before = two.call_with("s__write", None, &on_two).await;
    assert!(!before.is_error(), "{}", before.result);
    let fetched = one.call_with("s__echo", None, &on_one).await;
    assert!(!fetched.is_error(), "{}", fetched.result);
    let held = two.call_with("s__write", None, &on_two).await;
    assert!(held.is_error(), "{}", held.result);
    assert_eq!(
        *asked.lock().unwrap(),
        [
            "tool `write` of server `s` does not accept untrusted content, and this session has seen some (this session has seen: untrusted content; public data)"
        ]
    );
    let other = context(&two, &format!("other-{}", toolward::ids::new_ulid()));
    let elsewhere = two.call_with("s__write", None, &other).await;
    assert!(!elsewhere.is_error(), "{}", elsewhere.result);
    one.shutdown().await;
    two.shutdown().await;
}
