//! The store contract (`toolward::store::audit`, `toolward::store::approvals`), one suite run
//! against both implementations: the state folder and PostgreSQL.
//!
//! Each contract is a function taking a [`Stores`] factory; [`contract!`] runs it on a fresh
//! state folder and on the database of `TOOLWARD_TEST_DATABASE_URL` (`scripts/postgres.sh
//! start` prints one). Without that variable the PostgreSQL runs fail when `CI` is set, and
//! are skipped with a printed reason elsewhere. The database is shared by the tests running at
//! once, so the contracts count records relative to the head they found and use fresh call
//! ids; the chain they verify is the whole chain, everyone's records included.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use toolward::approval::{ApprovalAnswer, ApprovalRequest, Channel};
use toolward::audit::{AuditEvent, AuditHead, AuditKind, AuditLog, AuditSync};
use toolward::store::postgres::{PgApprovals, PgAudit, PgStore};
use toolward::store::{ApprovalStore, AuditStore, StateDir, StateDirApprovals};

/// The PostgreSQL URL the tests use, or why they do not run: `None` (skip, reason printed)
/// outside CI, a failure in CI.
pub fn test_database_url(test: &str) -> Option<String> {
    match std::env::var("TOOLWARD_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: TOOLWARD_TEST_DATABASE_URL is not set, and CI must run the PostgreSQL store's tests: start one with `eval \"$(bash scripts/postgres.sh start)\"`"
            );
            eprintln!(
                "{test}: skipped: TOOLWARD_TEST_DATABASE_URL is not set (start a test database with `eval \"$(bash scripts/postgres.sh start)\"`)"
            );
            None
        }
    }
}

/// Opens the stores under test, as many times as a contract needs (several gateways, or
/// several processes on one state folder).
pub enum Stores {
    /// A state folder (and its audit log) in a temporary folder.
    StateDir(tempfile::TempDir),
    /// A PostgreSQL database.
    Postgres(Box<PgStore>),
}

impl Stores {
    fn state_dir() -> Stores {
        Stores::StateDir(tempfile::tempdir().unwrap())
    }

    fn postgres(test: &str) -> Option<Stores> {
        test_database_url(test).map(|url| Stores::Postgres(Box::new(PgStore::new(&url).unwrap())))
    }

    fn state(&self) -> PathBuf {
        match self {
            Stores::StateDir(dir) => dir.path().join("state"),
            Stores::Postgres(_) => unreachable!(),
        }
    }

    fn log(&self) -> PathBuf {
        self.state().join("audit.jsonl")
    }

    /// One more writer of the chain.
    async fn audit(&self) -> Arc<dyn AuditStore> {
        match self {
            Stores::StateDir(_) => {
                let state = StateDir::open(&self.state()).unwrap();
                Arc::new(AuditLog::open_with_head(&self.log(), AuditSync::Always, &state).unwrap())
            }
            Stores::Postgres(store) => Arc::new(PgAudit::open(store).await.unwrap()),
        }
    }

    /// One more view of the approvals queue, its held calls waiting at most `timeout`.
    fn approvals(&self, timeout: Duration) -> Arc<dyn ApprovalStore> {
        match self {
            Stores::StateDir(_) => {
                StateDir::open(&self.state()).unwrap();
                Arc::new(StateDirApprovals::new(self.state()))
            }
            Stores::Postgres(store) => Arc::new(PgApprovals::new(store, timeout).unwrap()),
        }
    }

    /// Every record as JSONL (what `toolward audit export` writes) and the store's head.
    async fn export(&self) -> (Vec<u8>, Option<AuditHead>) {
        match self {
            Stores::StateDir(_) => {
                let state = StateDir::open(&self.state()).unwrap();
                let (head, _) = toolward::audit::read_head(&state, &self.log()).unwrap();
                (std::fs::read(self.log()).unwrap(), head)
            }
            Stores::Postgres(store) => {
                let mut out = Vec::new();
                let head = toolward::store::postgres::audit::export(store, &mut out)
                    .await
                    .unwrap();
                (out, Some(head))
            }
        }
    }
}

/// Runs `contract` on both stores, as `<name>_on_state_dir` and `<name>_on_postgres`.
macro_rules! contract {
    ($name:ident, $state:ident, $pg:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $state() {
            $name(&Stores::state_dir()).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $pg() {
            if let Some(stores) = Stores::postgres(stringify!($pg)) {
                $name(&stores).await;
            }
        }
    };
}

contract!(
    writers_form_one_chain_that_verifies_against_its_head,
    writers_form_one_chain_that_verifies_against_its_head_on_state_dir,
    writers_form_one_chain_that_verifies_against_its_head_on_postgres
);
contract!(
    held_call_is_listed_anywhere_and_the_first_answer_wins,
    held_call_is_listed_anywhere_and_the_first_answer_wins_on_state_dir,
    held_call_is_listed_anywhere_and_the_first_answer_wins_on_postgres
);
contract!(
    call_no_longer_waiting_cannot_be_answered,
    call_no_longer_waiting_cannot_be_answered_on_state_dir,
    call_no_longer_waiting_cannot_be_answered_on_postgres
);

/// The export written to a file, checked by `toolward::audit::verify_with_head` (what `audit
/// verify` runs): intact, matching the head.
fn verify_export(jsonl: &[u8], head: Option<&AuditHead>) -> toolward::audit::VerifyReport {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("export.jsonl");
    std::fs::write(&file, jsonl).unwrap();
    let report = match head {
        Some(head) => {
            let (report, problem) = toolward::audit::verify_with_head(&file, head).unwrap();
            assert_eq!(problem, None, "the export does not match the store's head");
            report
        }
        None => toolward::audit::verify(&file).unwrap(),
    };
    assert!(report.is_intact(), "chain broken: {:?}", report.first_break);
    report
}

/// Two writers (two gateways, or two processes on one state folder), each appending groups
/// from several threads at once: every record they were told is durable is in one chain
/// that verifies, and the head matches its end.
async fn writers_form_one_chain_that_verifies_against_its_head(stores: &Stores) {
    const THREADS: usize = 4;
    const GROUPS: usize = 25;
    let a = stores.audit().await;
    let b = stores.audit().await;
    let (before, _) = stores.export().await;
    let before = verify_export(&before, None).records;
    let run = toolward::call::new_ulid();
    let mut handles = Vec::new();
    for (w, writer) in [a, b].into_iter().enumerate() {
        for t in 0..THREADS {
            let writer = Arc::clone(&writer);
            let run = run.clone();
            handles.push(std::thread::spawn(move || {
                for g in 0..GROUPS {
                    let id = format!("{run}-{w}-{t}-{g}");
                    let event = |kind| AuditEvent {
                        call_id: Some(id.clone()),
                        ..AuditEvent::new(kind)
                    };
                    writer
                        .append_batch(vec![
                            event(AuditKind::CallReceived),
                            event(AuditKind::Decision),
                        ])
                        .unwrap();
                }
            }));
        }
    }
    for handle in handles {
        handle.join().unwrap();
    }
    let (jsonl, head) = stores.export().await;
    let report = verify_export(&jsonl, head.as_ref());
    let ours = String::from_utf8(jsonl)
        .unwrap()
        .lines()
        .filter(|line| line.contains(&run))
        .count();
    assert_eq!(ours, 2 * THREADS * GROUPS * 2);
    assert!(report.records >= before + ours as u64);
}

fn request(call_id: &str) -> ApprovalRequest {
    let arguments = r#"{"path":"a.txt"}"#.to_owned();
    ApprovalRequest {
        call_id: call_id.to_owned(),
        exposed_tool: "s__write".to_owned(),
        server: "s".to_owned(),
        tool: "write".to_owned(),
        effect: "local-change".to_owned(),
        arguments_sha256: toolward::canonical::sha256_hex(arguments.as_bytes()),
        arguments,
        reason: "held by the test".to_owned(),
        description_sha256: "d".repeat(64),
        input_schema_sha256: "e".repeat(64),
        principal: "tester".to_owned(),
        session: "session".to_owned(),
        time_ms: 1,
    }
}

/// Waits until `store` lists `call_id` as waiting.
async fn wait_listed(store: &dyn ApprovalStore, call_id: &str) {
    for _ in 0..200 {
        let entries = store.list().await.unwrap();
        if entries
            .iter()
            .any(|e| e.request.call_id == call_id && e.waiting && e.problem.is_none())
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("call `{call_id}` was never listed as waiting");
}

/// A call held through one store's approver is listed by another (another gateway, or
/// `toolward approvals` on another machine), the first answer wins, a second is refused,
/// and the waiting approver learns the answer, within a second, with who gave it.
async fn held_call_is_listed_anywhere_and_the_first_answer_wins(stores: &Stores) {
    let holder = stores.approvals(Duration::from_secs(30));
    let other = stores.approvals(Duration::from_secs(30));
    let call_id = toolward::call::new_ulid();
    let approver = holder.approver(None);
    let asked = tokio::spawn({
        let request = request(&call_id);
        async move { approver.ask(request).await }
    });
    wait_listed(other.as_ref(), &call_id).await;
    let by = other.answer(&call_id, true, None).await.unwrap();
    let answered = std::time::Instant::now();
    let second = other
        .answer(&call_id, false, Some("too late".to_owned()))
        .await;
    assert!(second.is_err(), "a second answer was accepted");
    let answer = tokio::time::timeout(Duration::from_secs(5), asked)
        .await
        .expect("the waiting approver never learned the answer")
        .unwrap();
    assert!(
        answered.elapsed() < Duration::from_secs(1),
        "the waiting approver learned the answer after {:?}",
        answered.elapsed()
    );
    assert_eq!(answer.verdict, ApprovalAnswer::Approved);
    assert_eq!(answer.by.channel, Channel::Queue);
    assert_eq!(answer.by, by);
    assert_eq!(
        answer.by.answerer.as_deref(),
        Some(toolward::approval::current_os_user().name.as_str())
    );
}

/// A held call whose wait ended (the approval timeout, a cancelled call) cannot be answered:
/// an approval given late would approve nothing, and must say so.
async fn call_no_longer_waiting_cannot_be_answered(stores: &Stores) {
    let holder = stores.approvals(Duration::from_secs(30));
    let other = stores.approvals(Duration::from_secs(30));
    let call_id = toolward::call::new_ulid();
    let approver = holder.approver(None);
    let wait = approver.ask(request(&call_id));
    let waited = tokio::time::timeout(Duration::from_millis(600), wait).await;
    assert!(waited.is_err(), "nobody answered, yet the wait ended");
    // The store records the end of the wait after the approver is dropped.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let late = other.answer(&call_id, true, None).await;
    assert!(late.is_err(), "a call no longer waiting was approved");
}
