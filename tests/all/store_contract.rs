//! The store contract (`toolward::store::audit`, `toolward::store::approvals`,
//! `toolward::facts`, `toolward::store::request_states`, `toolward::labels`), one suite run
//! against both implementations: the state folder (for labels, the gateway's memory) and
//! PostgreSQL.
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
use toolward::facts::{Change, FactKeys, FactScopes, FactStore, StateFacts};
use toolward::labels::{
    LabelKey, LabelSettings, LabelStore, Labels, MemoryLabels, SESSION_IDLE_MS,
};
use toolward::store::postgres::{PgApprovals, PgAudit, PgFacts, PgLabels, PgLedger, PgStore};
use toolward::store::{
    ApprovalStore, AuditStore, Redemption, RequestStateLedger, StateDir, StateDirApprovals,
    StateDirLedger,
};

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

/// Creates or upgrades the schema of the database at `url` (`toolward store migrate`), as the
/// role `url` names: every other open of the store refuses a database nobody migrated.
pub async fn migrate(url: &str) {
    let store = PgStore::new(url).unwrap();
    store.migrate(&store.pool().unwrap()).await.unwrap();
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

    async fn postgres(test: &str) -> Option<Stores> {
        let url = test_database_url(test)?;
        migrate(&url).await;
        Some(Stores::Postgres(Box::new(PgStore::new(&url).unwrap())))
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

    /// One more view of the fact counters (another gateway, or another process on the
    /// machine).
    async fn facts(&self) -> Arc<dyn FactStore> {
        match self {
            Stores::StateDir(_) => {
                let state = StateDir::open(&self.state()).unwrap();
                Arc::new(StateFacts::open(&state).unwrap())
            }
            Stores::Postgres(store) => Arc::new(PgFacts::open(store).await.unwrap()),
        }
    }

    /// One more view of the `requestState` ledger.
    async fn ledger(&self) -> Arc<dyn RequestStateLedger> {
        match self {
            Stores::StateDir(_) => {
                let state = StateDir::open(&self.state()).unwrap();
                Arc::new(StateDirLedger::open(&state).unwrap())
            }
            Stores::Postgres(store) => Arc::new(PgLedger::open(store).await.unwrap()),
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
            if let Some(stores) = Stores::postgres(stringify!($pg)).await {
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
    a_subscriber_hears_what_its_writer_made_durable_as_stored_in_order,
    a_subscriber_hears_what_its_writer_made_durable_as_stored_in_order_on_state_dir,
    a_subscriber_hears_what_its_writer_made_durable_as_stored_in_order_on_postgres
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

contract!(
    fact_stores_on_one_backing_count_together_so_a_limit_is_not_doubled,
    fact_stores_on_one_backing_count_together_so_a_limit_is_not_doubled_on_state_dir,
    fact_stores_on_one_backing_count_together_so_a_limit_is_not_doubled_on_postgres
);
contract!(
    reservations_of_one_scope_count_together_and_touch_no_other_scope,
    reservations_of_one_scope_count_together_and_touch_no_other_scope_on_state_dir,
    reservations_of_one_scope_count_together_and_touch_no_other_scope_on_postgres
);
contract!(
    settling_a_reservation_releases_holds_or_forwards_it,
    settling_a_reservation_releases_holds_or_forwards_it_on_state_dir,
    settling_a_reservation_releases_holds_or_forwards_it_on_postgres
);
contract!(
    a_counted_call_leaves_the_minute_after_60_seconds_and_the_hour_after_60_minutes,
    a_counted_call_leaves_the_minute_after_60_seconds_and_the_hour_after_60_minutes_on_state_dir,
    a_counted_call_leaves_the_minute_after_60_seconds_and_the_hour_after_60_minutes_on_postgres
);
contract!(
    of_many_redemptions_at_once_on_two_ledgers_exactly_one_is_first,
    of_many_redemptions_at_once_on_two_ledgers_exactly_one_is_first_on_state_dir,
    of_many_redemptions_at_once_on_two_ledgers_exactly_one_is_first_on_postgres
);
contract!(
    a_long_expired_redemption_is_pruned_and_an_unexpired_one_kept,
    a_long_expired_redemption_is_pruned_and_an_unexpired_one_kept_on_state_dir,
    a_long_expired_redemption_is_pruned_and_an_unexpired_one_kept_on_postgres
);

/// The time the fact contracts count at: now (a store prunes buckets older than the window
/// of the time it is given, and the database is shared with the tests running at once),
/// rounded down to a minute so the window edges are exact.
fn fact_time() -> u64 {
    let now = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    now - now % 60_000
}

/// The keys of a call of `tool` on a server of its own, in a session of that server's (fresh
/// for each run: the database outlives the test; none when `session` is empty).
fn fact_keys(server: &str, tool: &str, session: &str) -> FactKeys {
    let session = if session.is_empty() {
        String::new()
    } else {
        format!("{server}-{session}")
    };
    FactKeys::of(server, tool, "tester", &session)
}

/// Two stores on one backing (two gateways on one database, two processes on one state
/// folder) reserving calls at the same moment: every call sees a different count, 0 to N-1,
/// so a `forwarded` limit of L lets exactly L calls through, not L per store.
async fn fact_stores_on_one_backing_count_together_so_a_limit_is_not_doubled(stores: &Stores) {
    const CALLS: u64 = 40;
    let stores = [stores.facts().await, stores.facts().await];
    let server = toolward::ids::new_ulid();
    let now = fact_time();
    // Every call starts at once, so the reservations overlap (on PostgreSQL, each pool opens
    // several connections).
    let start = Arc::new(tokio::sync::Barrier::new(usize::try_from(CALLS).unwrap()));
    let mut tasks = Vec::new();
    for i in 0..CALLS {
        let store = Arc::clone(&stores[usize::try_from(i % 2).unwrap()]);
        let keys = fact_keys(&server, "write", &format!("session-{i}"));
        let start = Arc::clone(&start);
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let seen = store.reserve(&keys, now + i).await.unwrap();
            (
                seen.get("tool.forwarded.minute").unwrap(),
                seen.get("server.forwarded.hour").unwrap(),
                seen.get("session.forwarded.minute").unwrap(),
            )
        }));
    }
    let mut tool = Vec::new();
    for task in tasks {
        let (minute, hour, session) = task.await.unwrap();
        assert_eq!(minute, hour, "the minute and the hour disagree");
        assert_eq!(session, 0, "a fresh session saw another's calls");
        tool.push(minute);
    }
    tool.sort_unstable();
    assert_eq!(tool, (0..CALLS).collect::<Vec<_>>());
    let after = stores[0]
        .reserve(&fact_keys(&server, "read", ""), now + CALLS)
        .await
        .unwrap();
    assert_eq!(after.get("server.forwarded.minute"), Some(CALLS));
    assert_eq!(
        after.get("principal.forwarded.minute").map(|n| n >= CALLS),
        Some(true)
    );
    assert_eq!(after.get("tool.forwarded.minute"), Some(0));
}

/// A policy that reads one scope reserves only its key (`FactKeys::only`): calls at the same
/// moment on two stores still see each other (a limit on that scope holds), and the scopes
/// it does not read are not touched.
async fn reservations_of_one_scope_count_together_and_touch_no_other_scope(stores: &Stores) {
    const CALLS: u64 = 30;
    let stores = [stores.facts().await, stores.facts().await];
    let server = toolward::ids::new_ulid();
    let now = fact_time();
    let start = Arc::new(tokio::sync::Barrier::new(usize::try_from(CALLS).unwrap()));
    let mut tasks = Vec::new();
    for i in 0..CALLS {
        let store = Arc::clone(&stores[usize::try_from(i % 2).unwrap()]);
        let keys = fact_keys(&server, "write", "").only(FactScopes::from_names(["tool"]));
        let start = Arc::clone(&start);
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let seen = store.reserve(&keys, now + i).await.unwrap();
            assert_eq!(seen.get("server.forwarded.minute"), None, "{seen:?}");
            seen.get("tool.forwarded.minute").unwrap()
        }));
    }
    let mut seen = Vec::new();
    for task in tasks {
        seen.push(task.await.unwrap());
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..CALLS).collect::<Vec<_>>());
    let after = stores[1]
        .reserve(&fact_keys(&server, "write", ""), now + CALLS)
        .await
        .unwrap();
    assert_eq!(after.get("tool.forwarded.minute"), Some(CALLS));
    assert_eq!(after.get("server.forwarded.minute"), Some(0), "{after:?}");
}

/// Release takes a reservation back, hold moves it to `held`, forward counts an approved
/// call: what one store settles, the other sees.
async fn settling_a_reservation_releases_holds_or_forwards_it(stores: &Stores) {
    let (a, b) = (stores.facts().await, stores.facts().await);
    let keys = fact_keys(&toolward::ids::new_ulid(), "write", "s");
    let now = fact_time();
    let seen = |facts: toolward::facts::Facts| {
        (
            facts.get("tool.forwarded.minute").unwrap(),
            facts.get("tool.held.minute").unwrap(),
            facts.get("session.held.hour").unwrap(),
        )
    };
    a.reserve(&keys, now).await.unwrap();
    b.record(&keys, now, Change::Release).await.unwrap();
    assert_eq!(seen(b.reserve(&keys, now + 1).await.unwrap()), (0, 0, 0));
    a.record(&keys, now + 1, Change::Hold).await.unwrap();
    assert_eq!(seen(a.reserve(&keys, now + 2).await.unwrap()), (0, 1, 1));
    b.record(&keys, now + 2, Change::Release).await.unwrap();
    b.record(&keys, now + 3, Change::Forward).await.unwrap();
    assert_eq!(seen(a.reserve(&keys, now + 4).await.unwrap()), (1, 1, 1));
    // A release of a reservation nobody made does not go below zero.
    let fresh = fact_keys(&toolward::ids::new_ulid(), "write", "s");
    a.record(&fresh, now, Change::Release).await.unwrap();
    assert_eq!(seen(b.reserve(&fresh, now).await.unwrap()), (0, 0, 0));
}

/// The `minute` window is the current second and the 59 before it, the `hour` window the
/// current minute and the 59 before it (`docs/facts.md`): a call counted at a minute's first
/// millisecond counts until 59.999 s (59 min 59.999 s) later and not after.
async fn a_counted_call_leaves_the_minute_after_60_seconds_and_the_hour_after_60_minutes(
    stores: &Stores,
) {
    let store = stores.facts().await;
    let keys = fact_keys(&toolward::ids::new_ulid(), "write", "");
    let at = fact_time();
    store.reserve(&keys, at).await.unwrap();
    // Looks without counting: a reservation taken back at once.
    let look = |now: u64| {
        let (store, keys) = (Arc::clone(&store), keys.clone());
        async move {
            let facts = store.reserve(&keys, now).await.unwrap();
            store.record(&keys, now, Change::Release).await.unwrap();
            (
                facts.get("tool.forwarded.minute").unwrap(),
                facts.get("tool.forwarded.hour").unwrap(),
            )
        }
    };
    assert_eq!(look(at + 59_999).await, (1, 1));
    assert_eq!(look(at + 60_000).await, (0, 1));
    assert_eq!(look(at + 3_599_999).await, (0, 1));
    assert_eq!(look(at + 3_600_000).await, (0, 0));
}

/// Of many redemptions of one `requestState` at once, through two ledgers on one backing
/// (two gateways a client's retries alternate between), exactly one is first; the id stays
/// used until it expires, and another id is unaffected.
async fn of_many_redemptions_at_once_on_two_ledgers_exactly_one_is_first(stores: &Stores) {
    const REDEMPTIONS: usize = 16;
    let ledgers = [stores.ledger().await, stores.ledger().await];
    let id = toolward::ids::new_ulid();
    let now = fact_time();
    let mut tasks = Vec::new();
    for i in 0..REDEMPTIONS {
        let ledger = Arc::clone(&ledgers[i % 2]);
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            ledger.redeem(&id, now + 120_000, now).await.unwrap()
        }));
    }
    let mut firsts = 0;
    for task in tasks {
        if task.await.unwrap() == Redemption::First {
            firsts += 1;
        }
    }
    assert_eq!(
        firsts, 1,
        "{firsts} of {REDEMPTIONS} redemptions were first"
    );
    assert_eq!(
        ledgers[1]
            .redeem(&id, now + 120_000, now + 119_000)
            .await
            .unwrap(),
        Redemption::AlreadyUsed
    );
    let other = toolward::ids::new_ulid();
    assert_eq!(
        ledgers[0].redeem(&other, now + 120_000, now).await.unwrap(),
        Redemption::First
    );
}

/// A ledger is bounded by expiry: an entry expired for longer than any gateway's clock may
/// lag (the PostgreSQL ledger's `PRUNE_GRACE`) is removed by the next ledger's prune, and an
/// unexpired one stays used.
async fn a_long_expired_redemption_is_pruned_and_an_unexpired_one_kept(stores: &Stores) {
    let now = fact_time();
    let grace = toolward::store::postgres::request_states::PRUNE_GRACE_MS;
    let (old, young) = (toolward::ids::new_ulid(), toolward::ids::new_ulid());
    let first = stores.ledger().await;
    assert_eq!(
        first
            .redeem(&old, now - grace - 60_000, now - grace - 120_000)
            .await
            .unwrap(),
        Redemption::First
    );
    assert_eq!(
        first.redeem(&young, now + 60_000, now).await.unwrap(),
        Redemption::First
    );
    // A fresh ledger prunes at its first redemption.
    let later = stores.ledger().await;
    assert_eq!(
        later
            .redeem(&toolward::ids::new_ulid(), now + 60_000, now)
            .await
            .unwrap(),
        Redemption::First
    );
    assert_eq!(
        later.redeem(&old, now + 60_000, now).await.unwrap(),
        Redemption::First,
        "the long-expired entry was kept"
    );
    assert_eq!(
        later.redeem(&young, now + 60_000, now).await.unwrap(),
        Redemption::AlreadyUsed
    );
}

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
    let run = toolward::ids::new_ulid();
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

/// A subscriber of one writer hears every record that writer made durable, waited for
/// (`append_batch`) or not (`write`), in `seq` order and as stored; it hears none of the other
/// writer's on the same log or database.
async fn a_subscriber_hears_what_its_writer_made_durable_as_stored_in_order(stores: &Stores) {
    const GROUPS: usize = 20;
    let a = stores.audit().await;
    let b = stores.audit().await;
    let mut heard = a.subscribe().expect("the store streams its records");
    let run = toolward::ids::new_ulid();
    let (a2, b2, run2) = (Arc::clone(&a), Arc::clone(&b), run.clone());
    tokio::task::spawn_blocking(move || {
        let ev = |writer: &str, g: usize, kind| AuditEvent {
            call_id: Some(format!("{run2}-{writer}-{g}")),
            ..AuditEvent::new(kind)
        };
        for g in 0..GROUPS {
            a2.append_batch(vec![
                ev("a", g, AuditKind::CallReceived),
                ev("a", g, AuditKind::Decision),
            ])
            .unwrap();
            b2.append_batch(vec![ev("b", g, AuditKind::CallReceived)])
                .unwrap();
        }
        // Not waited for: heard once its sync (or commit) comes.
        a2.write(vec![ev("a", GROUPS, AuditKind::Result)]).unwrap();
    })
    .await
    .unwrap();
    let mut records = Vec::new();
    while records.len() < 2 * GROUPS + 1 {
        let record = tokio::time::timeout(Duration::from_secs(10), heard.recv())
            .await
            .expect("every record a's writer made durable is heard within 10 s")
            .unwrap();
        records.push(record);
    }
    let ours = |record: &toolward::audit::AuditRecord, writer: &str| {
        record
            .event
            .call_id
            .as_deref()
            .is_some_and(|id| id.starts_with(&format!("{run}-{writer}-")))
    };
    assert!(
        records.iter().all(|r| ours(r, "a")),
        "only a's own records are heard"
    );
    assert!(
        records.windows(2).all(|w| w[0].seq < w[1].seq),
        "in seq order"
    );
    assert_eq!(records.last().unwrap().event.kind, AuditKind::Result);
    // As stored: each is the record on that line of the export, byte for byte.
    let (jsonl, _) = stores.export().await;
    let stored: std::collections::HashMap<u64, toolward::audit::AuditRecord> =
        String::from_utf8(jsonl)
            .unwrap()
            .lines()
            // The log's file ends in room kept for the next records (spaces), not records.
            .filter(|line| line.starts_with('{'))
            .map(|line| serde_json::from_str::<toolward::audit::AuditRecord>(line).unwrap())
            .filter(|r| ours(r, "a") || ours(r, "b"))
            .map(|r| (r.seq, r))
            .collect();
    for record in &records {
        assert_eq!(stored.get(&record.seq), Some(record));
    }
    assert_eq!(stored.values().filter(|r| ours(r, "b")).count(), GROUPS);
    assert!(heard.try_recv().is_err(), "nothing of b's follows");
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
        result: None,
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
    let call_id = toolward::ids::new_ulid();
    let approver = holder.approver(None);
    let asked = tokio::spawn({
        let request = request(&call_id);
        async move { approver.ask(request).await }
    });
    wait_listed(other.as_ref(), &call_id).await;
    let by = other
        .answer(&call_id, true, None, &toolward::Approvers::default())
        .await
        .unwrap();
    let answered = std::time::Instant::now();
    let second = other
        .answer(
            &call_id,
            false,
            Some("too late".to_owned()),
            &toolward::Approvers::default(),
        )
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
    let call_id = toolward::ids::new_ulid();
    let approver = holder.approver(None);
    let wait = approver.ask(request(&call_id));
    let waited = tokio::time::timeout(Duration::from_millis(600), wait).await;
    assert!(waited.is_err(), "nobody answered, yet the wait ended");
    // The store records the end of the wait after the approver is dropped.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let late = other
        .answer(&call_id, true, None, &toolward::Approvers::default())
        .await;
    assert!(late.is_err(), "a call no longer waiting was approved");
}

/// Where the label contracts keep labels: the gateway's memory (one store: a gateway's
/// memory is its own, so every view of it is the same store) or a PostgreSQL database
/// (each view another gateway's store on it, with its own connections).
pub enum LabelBacking {
    /// One in-memory store, made at the first view with that view's settings.
    Memory(std::sync::Mutex<Option<Arc<MemoryLabels>>>),
    /// A PostgreSQL database.
    Postgres(Box<PgStore>),
}

impl LabelBacking {
    fn memory() -> LabelBacking {
        LabelBacking::Memory(std::sync::Mutex::new(None))
    }

    async fn postgres(test: &str) -> Option<LabelBacking> {
        let url = test_database_url(test)?;
        migrate(&url).await;
        Some(LabelBacking::Postgres(Box::new(
            PgStore::new(&url).unwrap(),
        )))
    }

    /// One more view of the labels, ranking by `settings` (every view of a contract is given
    /// the same, as every gateway of a fleet has one config).
    async fn labels(&self, settings: &LabelSettings) -> Arc<dyn LabelStore> {
        match self {
            LabelBacking::Memory(store) => {
                let mut store = store.lock().unwrap();
                let store =
                    store.get_or_insert_with(|| Arc::new(MemoryLabels::new(settings.clone())));
                Arc::clone(store) as Arc<dyn LabelStore>
            }
            LabelBacking::Postgres(store) => {
                Arc::new(PgLabels::open(store, settings.clone()).await.unwrap())
            }
        }
    }
}

/// Runs a label contract on both stores, as `<name>_in_memory` and `<name>_on_postgres`.
macro_rules! label_contract {
    ($name:ident, $memory:ident, $pg:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $memory() {
            $name(&LabelBacking::memory()).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $pg() {
            if let Some(backing) = LabelBacking::postgres(stringify!($pg)).await {
                $name(&backing).await;
            }
        }
    };
}

label_contract!(
    joins_raise_labels_never_lower_them_and_keep_each_key_apart,
    joins_raise_labels_never_lower_them_and_keep_each_key_apart_in_memory,
    joins_raise_labels_never_lower_them_and_keep_each_key_apart_on_postgres
);
label_contract!(
    labels_lapse_after_a_day_for_a_session_and_the_window_for_a_principal_without_a_delivered_result,
    labels_lapse_after_a_day_for_a_session_and_the_window_for_a_principal_without_a_delivered_result_in_memory,
    labels_lapse_after_a_day_for_a_session_and_the_window_for_a_principal_without_a_delivered_result_on_postgres
);
label_contract!(
    joins_at_once_through_two_stores_each_apply_on_top_of_the_last_and_none_is_lost,
    joins_at_once_through_two_stores_each_apply_on_top_of_the_last_and_none_is_lost_in_memory,
    joins_at_once_through_two_stores_each_apply_on_top_of_the_last_and_none_is_lost_on_postgres
);

fn labels(untrusted: bool, confidentiality: &str, tags: &[&str]) -> Labels {
    Labels {
        untrusted,
        confidentiality: confidentiality.to_owned(),
        tags: tags.iter().map(|tag| (*tag).to_owned()).collect(),
    }
}

/// Operator levels of three (`internal` between the defaults).
fn three_levels() -> LabelSettings {
    LabelSettings {
        levels: vec!["public".into(), "internal".into(), "private".into()],
        ..LabelSettings::default()
    }
}

/// Joins through two views (two gateways) raise one session's labels: untrusted once any
/// result was, the higher level by the operator's order (an unknown level above all, the
/// first of two unknown ones kept), the tags united, sorted by bytes and without duplicates;
/// never lowered. Another session, and a principal named as the session, see none of it.
async fn joins_raise_labels_never_lower_them_and_keep_each_key_apart(backing: &LabelBacking) {
    let settings = three_levels();
    let (a, b) = (
        backing.labels(&settings).await,
        backing.labels(&settings).await,
    );
    let name = toolward::ids::new_ulid();
    let session = LabelKey::Session(name.clone());
    let now = fact_time();
    assert_eq!(b.get(&session, now).await.unwrap(), Labels::default());
    assert_eq!(
        a.join(&session, &labels(false, "internal", &["b", "a", "b"]), now)
            .await
            .unwrap(),
        labels(false, "internal", &["a", "b"])
    );
    // Sorted by bytes, as Rust sorts strings (not by a locale's collation).
    assert_eq!(
        b.join(&session, &labels(true, "", &["Z", "é", "B"]), now + 1)
            .await
            .unwrap(),
        labels(true, "internal", &["B", "Z", "a", "b", "é"])
    );
    // A lower level leaves the higher one.
    assert_eq!(
        a.join(&session, &labels(false, "public", &["a"]), now + 2)
            .await
            .unwrap(),
        labels(true, "internal", &["B", "Z", "a", "b", "é"])
    );
    assert_eq!(
        b.join(&session, &labels(false, "private", &[]), now + 3)
            .await
            .unwrap()
            .confidentiality,
        "private"
    );
    // An unknown level ranks above every named one; of two unknown ones the first stays.
    assert_eq!(
        a.join(&session, &labels(false, "secret", &[]), now + 4)
            .await
            .unwrap()
            .confidentiality,
        "secret"
    );
    assert_eq!(
        b.join(&session, &labels(false, "top-secret", &[]), now + 5)
            .await
            .unwrap()
            .confidentiality,
        "secret"
    );
    let seen = labels(true, "secret", &["B", "Z", "a", "b", "é"]);
    assert_eq!(a.get(&session, now + 6).await.unwrap(), seen);
    assert_eq!(b.get(&session, now + 6).await.unwrap(), seen);
    // Keys apart: another session, and the principal of the same name.
    let other = LabelKey::Session(toolward::ids::new_ulid());
    assert_eq!(a.get(&other, now + 6).await.unwrap(), Labels::default());
    let principal = LabelKey::Principal(name);
    assert_eq!(b.get(&principal, now + 6).await.unwrap(), Labels::default());
    assert_eq!(
        a.join(&principal, &labels(false, "public", &[]), now + 7)
            .await
            .unwrap(),
        labels(false, "public", &[])
    );
    assert_eq!(b.get(&session, now + 8).await.unwrap(), seen);
}

/// A session's labels last [`SESSION_IDLE_MS`] after the last delivered result, a
/// sessionless principal's its window; a delivered result that brings no labels still
/// restarts the lapse; after it, the key reads as new and a join starts from nothing. A
/// result that brings no labels to a new key leaves it with none.
async fn labels_lapse_after_a_day_for_a_session_and_the_window_for_a_principal_without_a_delivered_result(
    backing: &LabelBacking,
) {
    const WINDOW: u64 = 60_000;
    let settings = LabelSettings {
        principal_window_ms: WINDOW,
        ..LabelSettings::default()
    };
    let (a, b) = (
        backing.labels(&settings).await,
        backing.labels(&settings).await,
    );
    let t = fact_time();
    let session = LabelKey::Session(toolward::ids::new_ulid());
    a.join(&session, &labels(true, "private", &["x"]), t)
        .await
        .unwrap();
    let seen = labels(true, "private", &["x"]);
    assert_eq!(b.get(&session, t + SESSION_IDLE_MS).await.unwrap(), seen);
    assert_eq!(
        b.get(&session, t + SESSION_IDLE_MS + 1).await.unwrap(),
        Labels::default()
    );
    // A result with no labels, delivered before the lapse, restarts it.
    let refreshed = t + SESSION_IDLE_MS - 1;
    assert_eq!(
        b.join(&session, &Labels::default(), refreshed)
            .await
            .unwrap(),
        seen
    );
    assert_eq!(
        a.get(&session, t + SESSION_IDLE_MS + 1).await.unwrap(),
        seen
    );
    assert_eq!(
        a.get(&session, refreshed + SESSION_IDLE_MS).await.unwrap(),
        seen
    );
    let lapsed = refreshed + SESSION_IDLE_MS + 1;
    assert_eq!(a.get(&session, lapsed).await.unwrap(), Labels::default());
    // Lapsed, a result with no labels does not bring the old ones back...
    assert_eq!(
        a.join(&session, &Labels::default(), lapsed).await.unwrap(),
        Labels::default()
    );
    // ...and a join starts from nothing.
    assert_eq!(
        b.join(&session, &labels(false, "public", &["y"]), lapsed + 1)
            .await
            .unwrap(),
        labels(false, "public", &["y"])
    );

    let principal = LabelKey::Principal(toolward::ids::new_ulid());
    b.join(&principal, &labels(true, "", &[]), t).await.unwrap();
    assert!(a.get(&principal, t + WINDOW).await.unwrap().untrusted);
    assert!(!a.get(&principal, t + WINDOW + 1).await.unwrap().untrusted);

    let fresh = LabelKey::Session(toolward::ids::new_ulid());
    assert_eq!(
        a.join(&fresh, &Labels::default(), t).await.unwrap(),
        Labels::default()
    );
    assert_eq!(b.get(&fresh, t + 1).await.unwrap(), Labels::default());
}

/// Joins of one session at once through two stores (two gateways, each with its own
/// connections), each bringing a tag of its own: each join returns what it applied on top
/// of, so the results hold 1, 2, ... N tags, each all of the one before and its own; the
/// session ends with every tag, the untrusted one and the highest level.
async fn joins_at_once_through_two_stores_each_apply_on_top_of_the_last_and_none_is_lost(
    backing: &LabelBacking,
) {
    const JOINS: usize = 40;
    let settings = three_levels();
    let stores = [
        backing.labels(&settings).await,
        backing.labels(&settings).await,
    ];
    let session = LabelKey::Session(toolward::ids::new_ulid());
    let now = fact_time();
    let start = Arc::new(tokio::sync::Barrier::new(JOINS));
    let mut tasks = Vec::new();
    for i in 0..JOINS {
        let store = Arc::clone(&stores[i % 2]);
        let (session, start) = (session.clone(), Arc::clone(&start));
        tasks.push(tokio::spawn(async move {
            let brought = labels(
                i == 7,
                match i {
                    13 => "private",
                    21 => "internal",
                    _ => "public",
                },
                &[&format!("t{i:02}")],
            );
            start.wait().await;
            let joined = store.join(&session, &brought, now).await.unwrap();
            (format!("t{i:02}"), joined)
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        let (own, joined) = task.await.unwrap();
        assert!(
            joined.tags.contains(&own),
            "a join lost its own tag: {joined:?}"
        );
        results.push(joined);
    }
    results.sort_by_key(|joined| joined.tags.len());
    let sizes: Vec<usize> = results.iter().map(|joined| joined.tags.len()).collect();
    assert_eq!(
        sizes,
        (1..=JOINS).collect::<Vec<_>>(),
        "two joins applied on top of the same labels"
    );
    for pair in results.windows(2) {
        assert!(
            pair[0].tags.iter().all(|tag| pair[1].tags.contains(tag)),
            "a join lost what one before it joined: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
    let all: Vec<String> = (0..JOINS).map(|i| format!("t{i:02}")).collect();
    let last = stores[0].get(&session, now).await.unwrap();
    assert_eq!(last.tags, all);
    assert!(last.untrusted);
    assert_eq!(last.confidentiality, "private");
}

/// A PostgreSQL label row lapsed for longer than any gateway's clock may lag (its lapse
/// and `PRUNE_GRACE_MS`, by the database's clock) is deleted at the next store's first
/// join; a live one is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_lapsed_label_row_is_deleted_and_a_live_one_kept_on_postgres() {
    let Some(backing) = LabelBacking::postgres(
        "a_long_lapsed_label_row_is_deleted_and_a_live_one_kept_on_postgres",
    )
    .await
    else {
        return;
    };
    let settings = LabelSettings::default();
    let now = fact_time();
    let old_at = now - SESSION_IDLE_MS - toolward::store::postgres::labels::PRUNE_GRACE_MS - 60_000;
    let (old, live) = (
        LabelKey::Session(toolward::ids::new_ulid()),
        LabelKey::Session(toolward::ids::new_ulid()),
    );
    // The first join of a store prunes (after it): this one's is of the live row.
    let first = backing.labels(&settings).await;
    first
        .join(&live, &labels(true, "", &[]), now)
        .await
        .unwrap();
    first
        .join(&old, &labels(true, "", &[]), old_at)
        .await
        .unwrap();
    assert!(
        first.get(&old, old_at).await.unwrap().untrusted,
        "the old row is there before the prune"
    );
    let later = backing.labels(&settings).await;
    later
        .join(
            &LabelKey::Session(toolward::ids::new_ulid()),
            &labels(false, "public", &[]),
            now,
        )
        .await
        .unwrap();
    assert_eq!(
        later.get(&old, old_at).await.unwrap(),
        Labels::default(),
        "the long-lapsed row was kept"
    );
    assert!(later.get(&live, now).await.unwrap().untrusted);
}

/// What a PostgreSQL row cannot hold is refused, the error naming the store and why: the
/// call path then withholds the result (its labels could not be kept) or refuses the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_or_label_postgresql_cannot_hold_is_refused_naming_the_store_and_why_on_postgres() {
    let Some(backing) = LabelBacking::postgres(
        "a_name_or_label_postgresql_cannot_hold_is_refused_naming_the_store_and_why_on_postgres",
    )
    .await
    else {
        return;
    };
    let LabelBacking::Postgres(pg) = &backing else {
        unreachable!()
    };
    let store = backing.labels(&LabelSettings::default()).await;
    let now = fact_time();
    let error = store
        .join(
            &LabelKey::Session(String::from("a\0b")),
            &labels(true, "", &[]),
            now,
        )
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        format!(
            "session labels in PostgreSQL: PostgreSQL store {}: cannot join a session's labels: the session's name holds a NUL byte, which PostgreSQL text cannot",
            pg.name()
        )
    );
    let long = LabelKey::Principal("p".repeat(2000));
    let error = store.get(&long, now).await.unwrap_err().to_string();
    assert!(
        error.contains(pg.name())
            && error.contains("cannot read a session's labels: the principal's name is 2000 bytes, more than the 1024 kept"),
        "{error}"
    );
    let error = store
        .join(
            &LabelKey::Session(toolward::ids::new_ulid()),
            &labels(false, "", &["a\0"]),
            now,
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(pg.name()) && error.contains("a label holds a NUL byte"),
        "{error}"
    );
}

/// The schema of version 1 (before the fact counters and the `requestState` ledger), as a
/// toolward of that version created it.
const SCHEMA_V1: &str = r"
CREATE TABLE toolward_schema (id integer PRIMARY KEY CHECK (id = 1), version integer NOT NULL);
INSERT INTO toolward_schema (id, version) VALUES (1, 1);
CREATE TABLE toolward_audit (seq bigint PRIMARY KEY CHECK (seq >= 0), line bytea NOT NULL);
CREATE TABLE toolward_audit_head (id integer PRIMARY KEY CHECK (id = 1), next_seq bigint NOT NULL, last_hash text NOT NULL);
";

/// A database a version 1 toolward created is refused by every open of this version, naming
/// `toolward store migrate`, until `migrate` adds the counters, ledger, labels and grants
/// tables (and the version 3 triggers) and moves the version row to 5; the counters, the
/// ledger and the labels then work on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_database_is_refused_until_migrate_takes_it_to_version_7_with_the_facts_ledger_labels_grants_gateways_and_checkpoints_tables()
 {
    let Some(url) = test_database_url(
        "a_version_1_database_is_refused_until_migrate_takes_it_to_version_7_with_the_facts_ledger_labels_grants_gateways_and_checkpoints_tables",
    ) else {
        return;
    };
    let admin_pool = PgStore::new(&url).unwrap().pool().unwrap();
    let admin = admin_pool.get().await.unwrap();
    let name = format!("toolward_v1_{}", toolward::ids::new_ulid().to_lowercase());
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let (base, _) = url.rsplit_once('/').unwrap();
    let v1_url = format!("{base}/{name}");
    let store = PgStore::new(&v1_url).unwrap();
    let v1_pool = store.pool().unwrap();
    let v1 = v1_pool.get().await.unwrap();
    v1.batch_execute(SCHEMA_V1).await.unwrap();

    let refused = PgFacts::open(&store).await.unwrap_err().to_string();
    assert!(
        refused.contains("holds schema version 1")
            && refused.contains("run `toolward store migrate --config PATH`"),
        "{refused}"
    );
    let refused = PgLabels::open(&store, LabelSettings::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("holds schema version 1, and this toolward needs version 7"),
        "{refused}"
    );
    let migration = store.migrate(&v1_pool).await.unwrap();
    assert_eq!((migration.from, migration.to), (Some(1), 7));
    let facts = PgFacts::open(&store).await.unwrap();
    let version: i32 = v1
        .query_one("SELECT version FROM toolward_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, toolward::store::postgres::SCHEMA_VERSION);
    assert_eq!(version, 7);
    let checkpoints: i64 = v1
        .query_one("SELECT count(*) FROM toolward_checkpoints", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        checkpoints, 0,
        "version 7 adds the gateways' checkpoints, empty"
    );
    let keys = fact_keys("fs", "write", "");
    let now = fact_time();
    facts.reserve(&keys, now).await.unwrap();
    let seen = facts.reserve(&keys, now + 1).await.unwrap();
    assert_eq!(seen.get("tool.forwarded.minute"), Some(1));
    let ledger = PgLedger::open(&store).await.unwrap();
    let id = toolward::ids::new_ulid();
    assert_eq!(
        ledger.redeem(&id, now + 60_000, now).await.unwrap(),
        Redemption::First
    );
    let labels_store = PgLabels::open(&store, LabelSettings::default())
        .await
        .unwrap();
    let session = LabelKey::Session(id);
    labels_store
        .join(&session, &labels(true, "private", &["t"]), now)
        .await
        .unwrap();
    assert_eq!(
        labels_store.get(&session, now).await.unwrap(),
        labels(true, "private", &["t"])
    );
    drop((facts, ledger, labels_store, v1, v1_pool));
    admin
        .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .await
        .unwrap();
}

/// A grant of `server` for `principal` (`None`: the operator's), its access token naming both.
fn oauth_grant(server: &str, principal: Option<&str>) -> toolward::oauth::Grant {
    use toolward::oauth::store::ClientAuth;
    toolward::oauth::Grant {
        server: server.to_owned(),
        principal: principal.map(str::to_owned),
        resource: String::from("https://mcp.example.com/mcp"),
        issuer: String::from("https://auth.example.com/"),
        token_endpoint: String::from("https://auth.example.com/token"),
        revocation_endpoint: None,
        client_id: String::from("client-1"),
        client_secret: None,
        client_auth: ClientAuth::None,
        kind: toolward::oauth::GrantKind::AuthorizationCode,
        access_token: format!(
            "token-{server}-{}-TOPSECRET",
            principal.unwrap_or("operator")
        ),
        refresh_token: Some(String::from("refresh-TOPSECRET")),
        expires_at: Some(4_000_000_000),
        scopes: vec![String::from("mcp:tools")],
        obtained_at: 1,
    }
}

/// What every grant store does: one grant per server and principal (the operator's apart),
/// replaced by a write, listed with its principal, removed alone.
async fn grants_contract(store: &toolward::oauth::GrantStore, server: &str) {
    let token = |grant: Option<toolward::oauth::Grant>| grant.map(|grant| grant.access_token);
    assert_eq!(store.read(server, None).await.unwrap(), None);
    for principal in [None, Some("alice"), Some("bob")] {
        store.write(&oauth_grant(server, principal)).await.unwrap();
    }
    for principal in [None, Some("alice"), Some("bob")] {
        assert_eq!(
            token(store.read(server, principal).await.unwrap()),
            Some(oauth_grant(server, principal).access_token)
        );
    }
    assert_eq!(store.read(server, Some("carol")).await.unwrap(), None);
    let mut renewed = oauth_grant(server, Some("alice"));
    renewed.access_token = String::from("renewed-TOPSECRET");
    store.write(&renewed).await.unwrap();
    assert_eq!(
        token(store.read(server, Some("alice")).await.unwrap()).as_deref(),
        Some("renewed-TOPSECRET")
    );
    let listed: Vec<(String, Option<String>)> = store
        .list()
        .await
        .unwrap()
        .into_iter()
        .filter(|entry| entry.server == server)
        .map(|entry| {
            assert!(entry.grant.is_ok(), "{:?}", entry.grant);
            (entry.server, entry.principal)
        })
        .collect();
    assert_eq!(
        listed,
        [
            (server.to_owned(), None),
            (server.to_owned(), Some(String::from("alice"))),
            (server.to_owned(), Some(String::from("bob"))),
        ]
    );
    assert!(store.remove(server, Some("alice")).await.unwrap());
    assert!(!store.remove(server, Some("alice")).await.unwrap());
    assert_eq!(store.read(server, Some("alice")).await.unwrap(), None);
    assert!(store.read(server, Some("bob")).await.unwrap().is_some());
    assert!(store.read(server, None).await.unwrap().is_some());
}

#[tokio::test]
async fn grants_in_the_state_folder_keep_one_per_server_and_principal() {
    let dir = tempfile::tempdir().unwrap();
    let store = toolward::oauth::GrantStore::StateDir(
        toolward::oauth::StateDirGrants::open(&dir.path().join("state")).unwrap(),
    );
    grants_contract(&store, "remote").await;
}

/// The key of the PostgreSQL grants in these tests.
const OAUTH_KEY: &str = "4a6f696e74206b6579206f6620746865206772616e74732074657374732e2e2e";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_in_postgresql_keep_one_per_server_and_principal_sealed_under_the_key_from_the_environment()
 {
    use toolward::oauth::postgres::PgGrants;
    use toolward::oauth::store::GrantCipher;
    let Some(url) = test_database_url(
        "grants_in_postgresql_keep_one_per_server_and_principal_sealed_under_the_key_from_the_environment",
    ) else {
        return;
    };
    migrate(&url).await;
    let store = PgStore::new(&url).unwrap();
    let server = format!("remote-{}", toolward::ids::new_ulid().to_lowercase());
    let grants = toolward::oauth::GrantStore::Postgres(Box::new(
        PgGrants::open(&store, Some(GrantCipher::from_hex(OAUTH_KEY).unwrap()))
            .await
            .unwrap(),
    ));
    grants_contract(&grants, &server).await;

    // No token in clear in the table.
    let pool = store.pool().unwrap();
    let client = pool.get().await.unwrap();
    let rows = client
        .query(
            "SELECT principal, sealed FROM toolward_oauth_grants WHERE server = $1",
            &[&server],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    for row in &rows {
        let sealed: Vec<u8> = row.get(1);
        assert!(
            !sealed.windows(9).any(|window| window == b"TOPSECRET"),
            "a token is in clear in the table"
        );
    }
    // Bob's sealed grant copied into the operator's row: every call of the load would go
    // out as Bob. Refused, naming the row and the logout.
    client
        .execute(
            "UPDATE toolward_oauth_grants SET sealed = (SELECT sealed FROM toolward_oauth_grants WHERE server = $1 AND principal = 'bob') WHERE server = $1 AND principal = ''",
            &[&server],
        )
        .await
        .unwrap();
    let error = grants.read(&server, None).await.unwrap_err().to_string();
    assert!(error.contains("cannot be decrypted"), "{error}");
    assert!(
        error.contains(&format!("toolward auth logout {server}")),
        "{error}"
    );
    assert!(grants.read(&server, Some("bob")).await.unwrap().is_some());

    // Another key opens nothing; no key reads no row, and says which setting is missing.
    let other = toolward::oauth::GrantStore::Postgres(Box::new(
        PgGrants::open(
            &store,
            Some(GrantCipher::from_hex(&OAUTH_KEY.replace('4', "5")).unwrap()),
        )
        .await
        .unwrap(),
    ));
    assert!(other.read(&server, Some("bob")).await.is_err());
    let keyless = toolward::oauth::GrantStore::Postgres(Box::new(
        PgGrants::open(&store, None).await.unwrap(),
    ));
    let error = keyless
        .read(&server, Some("bob"))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("`store.oauth_key`"), "{error}");
    assert_eq!(keyless.read(&server, Some("nobody")).await.unwrap(), None);
    assert!(
        keyless
            .write(&oauth_grant(&server, Some("carol")))
            .await
            .is_err()
    );
    client
        .execute(
            "DELETE FROM toolward_oauth_grants WHERE server = $1",
            &[&server],
        )
        .await
        .unwrap();
}
