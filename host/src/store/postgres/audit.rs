//! The audit chain in PostgreSQL: one chain across every gateway on the database.
//!
//! # How a group is written
//!
//! One writer thread per gateway, with its own Tokio runtime and pool, takes every group
//! queued while its last transaction ran (group commit: one transaction for the records of
//! all calls in flight) and, in one transaction:
//!
//! 1. `SELECT next_seq, last_hash FROM toolward_audit_head ... FOR UPDATE`: the row lock
//!    serializes every gateway's inserts, so the chain is one;
//! 2. encodes each record after that end (the same JSON the state folder's log writes) and
//!    inserts `(seq, line)`, `line` the exact bytes hashed;
//! 3. moves the head row to the new end, and commits.
//!
//! [`AuditStore::append_batch`] returns once the commit did: a record that must precede an
//! action is committed before it. A failed transaction fails every group in it, with an
//! error naming the store; the next group opens a new connection, so the store resumes when
//! the database returns.

use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use deadpool_postgres::Pool;
use tokio::sync::{broadcast, mpsc};

use crate::audit::AuditStore;
use crate::audit::{
    AuditError, AuditEvent, AuditHead, AuditRecord, ComponentHashes, MAX_RECORD_BYTES,
    RecordStream,
};
use crate::canonical::sha256_hex;
use crate::database::{PgError, PgStore, STATEMENT_TIMEOUT};
use crate::text::error_chain;

/// Most groups (one call's step each) committed in one transaction: 512.
pub const MAX_GROUPS_PER_TRANSACTION: usize = 512;

/// Rows read per query by [`export`]: 10,000.
pub const EXPORT_PAGE_ROWS: i64 = 10_000;

/// What a group's writer hears back: the first and last `seq` written, or why not.
type Reply = Result<Option<u64>, String>;

struct Job {
    events: Vec<AuditEvent>,
    reply: Option<std_mpsc::SyncSender<Reply>>,
}

/// The PostgreSQL audit store. Dropping it commits what is queued and ends its thread.
pub struct PgAudit {
    store: PgStore,
    jobs: Option<mpsc::UnboundedSender<Job>>,
    components: Mutex<Option<ComponentHashes>>,
    head: Arc<Mutex<Option<AuditHead>>>,
    thread: Option<JoinHandle<()>>,
    /// Subscribers to the records this gateway commits ([`AuditStore::subscribe`]).
    events: Arc<RecordStream>,
}

impl std::fmt::Debug for PgAudit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgAudit")
            .field("store", &self.store.name())
            .finish_non_exhaustive()
    }
}

impl PgAudit {
    /// Connects, checks the schema version ([`PgStore::check_schema`]), reads the chain's
    /// head, and starts the writer thread.
    ///
    /// # Errors
    ///
    /// [`PgError::Connect`] naming the store when the database cannot be reached within
    /// [`crate::database::CONNECT_TIMEOUT`]; [`PgError::NotMigrated`] or [`PgError::SchemaTooNew`];
    /// [`PgError::Query`] when the head cannot be read.
    pub async fn open(store: &PgStore) -> Result<PgAudit, PgError> {
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (jobs_tx, jobs_rx) = mpsc::unbounded_channel();
        let head = Arc::new(Mutex::new(None));
        let thread_store = store.clone();
        let thread_head = Arc::clone(&head);
        let events = Arc::new(RecordStream::default());
        let thread_events = Arc::clone(&events);
        let thread = std::thread::Builder::new()
            .name("toolward-pg-audit".to_owned())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = ready_tx.send(Err(thread_store.connect_error(error)));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let pool = match start(&thread_store).await {
                        Ok((pool, found)) => {
                            *thread_head.lock().unwrap_or_else(PoisonError::into_inner) =
                                Some(found);
                            let _ = ready_tx.send(Ok(()));
                            pool
                        }
                        Err(error) => {
                            let _ = ready_tx.send(Err(error));
                            return;
                        }
                    };
                    run(&thread_store, &pool, jobs_rx, &thread_head, &thread_events).await;
                });
            })
            .map_err(|e| store.connect_error(e))?;
        let ready = ready_rx.await.unwrap_or_else(|_| {
            Err(PgError::Stopped {
                store: store.name().to_owned(),
            })
        });
        let audit = PgAudit {
            store: store.clone(),
            jobs: Some(jobs_tx),
            components: Mutex::new(None),
            head,
            thread: Some(thread),
            events,
        };
        ready.map(|()| audit)
    }

    fn stamp(&self, mut events: Vec<AuditEvent>) -> Vec<AuditEvent> {
        let components = self
            .components
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for event in &mut events {
            if event.components.is_none() {
                event.components.clone_from(&components);
            }
        }
        events
    }

    /// Waits until every record queued before it is committed (or failed): the writer takes
    /// jobs in order, and an empty one commits nothing. The shutdown checkpoint waits on it
    /// so it covers the records calls did not wait for.
    ///
    /// # Errors
    /// [`AuditError::Postgres`] naming the store when the writer stopped or its transaction
    /// failed.
    pub fn flush(&self) -> Result<(), AuditError> {
        let (reply, answer) = std_mpsc::sync_channel(1);
        self.send(Job {
            events: Vec::new(),
            reply: Some(reply),
        })?;
        let store = self.store.name().to_owned();
        match answer.recv() {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(reason)) => Err(AuditError::Postgres(PgError::Query {
                store,
                action: "commit audit records",
                reason,
            })),
            Err(_) => Err(AuditError::Postgres(PgError::Stopped { store })),
        }
    }

    fn send(&self, job: Job) -> Result<(), AuditError> {
        self.jobs
            .as_ref()
            .and_then(|jobs| jobs.send(job).ok())
            .ok_or_else(|| {
                AuditError::Postgres(PgError::Stopped {
                    store: self.store.name().to_owned(),
                })
            })
    }
}

impl Drop for PgAudit {
    fn drop(&mut self) {
        // Closing the queue ends the writer once it has committed what was queued.
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl AuditStore for PgAudit {
    fn name(&self) -> String {
        format!("PostgreSQL store {}", self.store.name())
    }

    fn waits(&self) -> bool {
        true
    }

    fn set_components(&self, components: ComponentHashes) {
        *self
            .components
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(components);
    }

    fn append_batch(&self, events: Vec<AuditEvent>) -> Result<Option<u64>, AuditError> {
        if events.is_empty() {
            return Ok(None);
        }
        let (reply, answer) = std_mpsc::sync_channel(1);
        self.send(Job {
            events: self.stamp(events),
            reply: Some(reply),
        })?;
        let store = self.store.name().to_owned();
        match answer.recv() {
            Ok(Ok(last)) => Ok(last),
            Ok(Err(reason)) => Err(AuditError::Postgres(PgError::Query {
                store,
                action: "commit audit records",
                reason,
            })),
            Err(_) => Err(AuditError::Postgres(PgError::Stopped { store })),
        }
    }

    fn write(&self, events: Vec<AuditEvent>) -> Result<(), AuditError> {
        if events.is_empty() {
            return Ok(());
        }
        self.send(Job {
            events: self.stamp(events),
            reply: None,
        })
    }

    fn head(&self) -> Option<AuditHead> {
        self.head
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The records this gateway commits from now on, in `seq` order. Other gateways' records
    /// on the same database are not sent: `toolward audit tail --config` reads those.
    fn subscribe(&self) -> Option<broadcast::Receiver<AuditRecord>> {
        Some(self.events.subscribe())
    }
}

/// The pool, the schema version checked, and the head as the database has it.
async fn start(store: &PgStore) -> Result<(Pool, AuditHead), PgError> {
    let pool = store.pool()?;
    store.check_schema(&pool).await?;
    let found = read_head(store, &pool).await?;
    Ok((pool, found))
}

/// The head row: how many records the chain holds and the last one's hash.
///
/// # Errors
///
/// [`PgError`] naming the store.
pub async fn read_head(store: &PgStore, pool: &Pool) -> Result<AuditHead, PgError> {
    let client = pool.get().await.map_err(|e| store.connect_error(e))?;
    let row = client
        .query_one(
            "SELECT next_seq, last_hash FROM toolward_audit_head WHERE id = 1",
            &[],
        )
        .await
        .map_err(|e| store.query_error("read the audit head", e))?;
    let next: i64 = row.get(0);
    Ok(AuditHead {
        records: u64::try_from(next).unwrap_or_default(),
        hash: row.get(1),
    })
}

/// The writer: one transaction per batch of queued groups, until the queue closes.
async fn run(
    store: &PgStore,
    pool: &Pool,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    head: &Mutex<Option<AuditHead>>,
    events: &RecordStream,
) {
    while let Some(first) = jobs.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_GROUPS_PER_TRANSACTION {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        let outcome = tokio::time::timeout(STATEMENT_TIMEOUT, commit(store, pool, &batch, time))
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "no answer within {} s",
                    STATEMENT_TIMEOUT.as_secs()
                ))
            });
        match outcome {
            Ok((replies, new_head, lines)) => {
                *head.lock().unwrap_or_else(PoisonError::into_inner) = Some(new_head);
                // Committed: the subscribers get the records as stored, read back from their
                // bytes (only when someone listens).
                if events.listened() {
                    for line in &lines {
                        match serde_json::from_slice::<AuditRecord>(line) {
                            Ok(record) => events.send(record),
                            Err(error) => tracing::error!(
                                "an audit record committed to {} cannot be read back for its subscribers: {error}",
                                store.name()
                            ),
                        }
                    }
                }
                for (job, reply) in batch.into_iter().zip(replies) {
                    if let Some(sender) = job.reply {
                        let _ = sender.send(reply);
                    } else if let Err(reason) = reply {
                        tracing::error!("cannot record to {}: {reason}", store.name());
                    }
                }
            }
            Err(reason) => {
                for job in batch {
                    match job.reply {
                        Some(sender) => {
                            let _ = sender.send(Err(reason.clone()));
                        }
                        None => tracing::error!(
                            "cannot record {} audit records to {}: {reason}",
                            job.events.len(),
                            store.name()
                        ),
                    }
                }
            }
        }
    }
}

/// One transaction for `batch`: locks the head row, inserts each group's records after it,
/// moves the head. Returns each group's own outcome (a group whose record is too large is
/// refused alone) and the new head.
async fn commit(
    store: &PgStore,
    pool: &Pool,
    batch: &[Job],
    time: u64,
) -> Result<(Vec<Reply>, AuditHead, Vec<Vec<u8>>), String> {
    let mut client = pool
        .get()
        .await
        .map_err(|e| store.connect_error(e).to_string())?;
    let tx = client.transaction().await.map_err(|e| error_chain(&e))?;
    let row = tx
        .query_one(
            "SELECT next_seq, last_hash FROM toolward_audit_head WHERE id = 1 FOR UPDATE",
            &[],
        )
        .await
        .map_err(|e| error_chain(&e))?;
    let mut next: i64 = row.get(0);
    let mut prev: String = row.get(1);
    let mut seqs: Vec<i64> = Vec::new();
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut replies = Vec::with_capacity(batch.len());
    for job in batch {
        match encode(&job.events, next, &prev, time) {
            Ok(encoded) => {
                for line in encoded {
                    prev = sha256_hex(&line);
                    seqs.push(next);
                    lines.push(line);
                    next += 1;
                }
                replies.push(Ok(u64::try_from(next - 1).ok()));
            }
            Err(reason) => replies.push(Err(reason)),
        }
    }
    tx.execute(
        "INSERT INTO toolward_audit (seq, line) SELECT * FROM unnest($1::bigint[], $2::bytea[])",
        &[&seqs, &lines],
    )
    .await
    .map_err(|e| error_chain(&e))?;
    tx.execute(
        "UPDATE toolward_audit_head SET next_seq = $1, last_hash = $2 WHERE id = 1",
        &[&next, &prev],
    )
    .await
    .map_err(|e| error_chain(&e))?;
    tx.commit().await.map_err(|e| error_chain(&e))?;
    Ok((
        replies,
        AuditHead {
            records: u64::try_from(next).unwrap_or_default(),
            hash: prev,
        },
        lines,
    ))
}

/// The lines of `events` chained after `seq` and `prev`, each within [`MAX_RECORD_BYTES`].
fn encode(events: &[AuditEvent], seq: i64, prev: &str, time: u64) -> Result<Vec<Vec<u8>>, String> {
    let mut lines = Vec::with_capacity(events.len());
    let first = u64::try_from(seq).map_err(|e| e.to_string())?;
    let mut prev = prev.to_owned();
    for (seq, event) in (first..).zip(events) {
        let record = AuditRecord {
            seq,
            time,
            prev,
            event: event.clone(),
        };
        let line = serde_json::to_vec(&record).map_err(|e| e.to_string())?;
        if line.len() > MAX_RECORD_BYTES {
            return Err(format!(
                "a `{}` record of {} bytes is over the limit of {MAX_RECORD_BYTES} bytes",
                event.kind,
                line.len()
            ));
        }
        prev = sha256_hex(&line);
        lines.push(line);
    }
    Ok(lines)
}

/// Begins a read-only, repeatable-read transaction on `client` (`action` names it in an
/// error) and reads the head row in it: the records read in the same transaction are those
/// of one snapshot, agreeing with this head whatever gateways write meanwhile.
///
/// # Errors
/// [`PgError`] naming the store.
pub(super) async fn snapshot_at_head<'a>(
    store: &PgStore,
    client: &'a mut deadpool_postgres::Object,
    action: &'static str,
) -> Result<(deadpool_postgres::Transaction<'a>, AuditHead), PgError> {
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(|e| store.query_error(action, e))?;
    let row = tx
        .query_one(
            "SELECT next_seq, last_hash FROM toolward_audit_head WHERE id = 1",
            &[],
        )
        .await
        .map_err(|e| store.query_error("read the audit head", e))?;
    let next: i64 = row.get(0);
    let head = AuditHead {
        records: u64::try_from(next).unwrap_or_default(),
        hash: row.get(1),
    };
    Ok((tx, head))
}

/// Writes every record in the database, in `seq` order, as JSONL (each line the exact bytes
/// hashed, then a newline) to `out`, and returns the head row read in the same snapshot.
/// `toolward audit verify FILE` accepts the result.
///
/// # Errors
///
/// [`PgError`] naming the store; an I/O error of `out` as [`PgError::Query`].
pub async fn export(
    store: &PgStore,
    out: &mut (dyn std::io::Write + Send),
) -> Result<AuditHead, PgError> {
    let pool = store.pool()?;
    store.check_schema(&pool).await?;
    let mut client = pool.get().await.map_err(|e| store.connect_error(e))?;
    // One snapshot for every page and the head, so a gateway writing meanwhile does not
    // make the export disagree with itself.
    let (tx, head) = snapshot_at_head(store, &mut client, "begin the export").await?;
    let mut from: i64 = 0;
    loop {
        let rows = tx
            .query(
                "SELECT seq, line FROM toolward_audit WHERE seq >= $1 ORDER BY seq LIMIT $2",
                &[&from, &EXPORT_PAGE_ROWS],
            )
            .await
            .map_err(|e| store.query_error("read audit records", e))?;
        let Some(last) = rows.last() else {
            break;
        };
        from = last.get::<_, i64>(0) + 1;
        for row in &rows {
            let line: &[u8] = row.get(1);
            out.write_all(line)
                .and_then(|()| out.write_all(b"\n"))
                .map_err(|e| store.query_error("write the export", e))?;
        }
    }
    out.flush()
        .map_err(|e| store.query_error("write the export", e))?;
    Ok(head)
}

/// How many records are at or past the head row's `next_seq`: none in a store only
/// toolward wrote (each transaction moves the head past what it inserts), some when the
/// head was moved back or rows were put past it, which every later append collides with.
///
/// # Errors
///
/// [`PgError`] naming the store.
pub async fn past_head(store: &PgStore) -> Result<u64, PgError> {
    let pool = store.pool()?;
    let client = pool.get().await.map_err(|e| store.connect_error(e))?;
    let count: i64 = client
        .query_one(
            "SELECT count(*) FROM toolward_audit WHERE seq >= (SELECT next_seq FROM toolward_audit_head WHERE id = 1)",
            &[],
        )
        .await
        .map_err(|e| store.query_error("count the records past the audit head", e))?
        .get(0);
    Ok(u64::try_from(count).unwrap_or_default())
}

/// Starts the database's empty chain from the state folder's log at `log`: every line
/// inserted as it is (same `seq`, same bytes, so the same hashes) and the head row set to
/// the log's end, in one transaction. Returns the new head.
///
/// # Errors
///
/// [`PgError::Import`] when the log cannot be read or its chain is broken;
/// [`PgError::NotEmpty`] when the database's chain has records; [`PgError`] naming the store
/// otherwise.
pub async fn import(store: &PgStore, log: &std::path::Path) -> Result<AuditHead, PgError> {
    let import_error = |reason: String| PgError::Import {
        path: log.to_path_buf(),
        reason,
    };
    // The record lines only: not the room (spaces) the file writer keeps at the log's end.
    let mut records: Vec<Vec<u8>> = Vec::new();
    let report = crate::audit::read_chain(log, |_, line| records.push(line.to_vec()))
        .map_err(|e| import_error(e.to_string()))?;
    if let Some(brk) = &report.first_break {
        return Err(import_error(format!("its chain is broken: {brk}")));
    }
    let lines: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    let pool = store.pool()?;
    store.check_schema(&pool).await?;
    let mut client = pool.get().await.map_err(|e| store.connect_error(e))?;
    let tx = client
        .transaction()
        .await
        .map_err(|e| store.query_error("begin the import", e))?;
    let row = tx
        .query_one(
            "SELECT next_seq FROM toolward_audit_head WHERE id = 1 FOR UPDATE",
            &[],
        )
        .await
        .map_err(|e| store.query_error("lock the audit head", e))?;
    let next: i64 = row.get(0);
    if next != 0 {
        return Err(PgError::NotEmpty {
            store: store.name().to_owned(),
            records: u64::try_from(next).unwrap_or_default(),
        });
    }
    let page = usize::try_from(EXPORT_PAGE_ROWS).unwrap_or(10_000);
    for (chunk_index, chunk) in lines.chunks(page).enumerate() {
        let first = i64::try_from(chunk_index * page).unwrap_or(i64::MAX);
        let seqs: Vec<i64> = (0..chunk.len())
            .map(|i| first + i64::try_from(i).unwrap_or(i64::MAX))
            .collect();
        let rows: Vec<&[u8]> = chunk.to_vec();
        tx.execute(
            "INSERT INTO toolward_audit (seq, line) SELECT * FROM unnest($1::bigint[], $2::bytea[])",
            &[&seqs, &rows],
        )
        .await
        .map_err(|e| store.query_error("insert imported records", e))?;
    }
    let records = i64::try_from(report.records).unwrap_or(i64::MAX);
    tx.execute(
        "UPDATE toolward_audit_head SET next_seq = $1, last_hash = $2 WHERE id = 1",
        &[&records, &report.last_hash],
    )
    .await
    .map_err(|e| store.query_error("move the audit head", e))?;
    tx.commit()
        .await
        .map_err(|e| store.query_error("commit the import", e))?;
    Ok(AuditHead {
        records: report.records,
        hash: report.last_hash,
    })
}

/// What one [`Reader::read_new`] found: the records written since the last read, each
/// checked against the chain from the first record, and whether they end at the head row.
#[derive(Debug, Clone)]
pub struct ReadRecords {
    /// The records, in `seq` order, each with its JSON (as on record, so fields other
    /// versions add are kept).
    pub records: Vec<(AuditRecord, serde_json::Value)>,
    /// Where the chain breaks: nothing past it is returned, now or later.
    pub first_break: Option<crate::audit::ChainBreak>,
    /// The head row, read in the same snapshot as the records.
    pub head: AuditHead,
    /// How the chain read does not end at the head row (rows past the head missing, or the
    /// last one rewritten); `None` when it does, or the chain broke first.
    pub head_problem: Option<String>,
}

/// Reads the database's chain for people (`toolward audit show` and `audit tail [-f]` on a
/// PostgreSQL store): each [`Reader::read_new`] returns the records since the last, checked
/// as `audit verify` checks them, in one read-only snapshot with the head row.
pub struct Reader {
    store: PgStore,
    pool: Pool,
    chain: crate::audit::ChainCheck,
    broken: bool,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("store", &self.store.name())
            .field("records", &self.chain.records())
            .finish_non_exhaustive()
    }
}

impl Reader {
    /// The store, as [`PgStore::name`] names it.
    #[must_use]
    pub fn store_name(&self) -> &str {
        self.store.name()
    }

    /// A reader at the start of `store`'s chain; the schema version checked.
    ///
    /// # Errors
    ///
    /// As [`PgStore::check_schema`].
    pub async fn open(store: &PgStore) -> Result<Reader, PgError> {
        let pool = store.pool()?;
        store.check_schema(&pool).await?;
        Ok(Reader {
            store: store.clone(),
            pool,
            chain: crate::audit::ChainCheck::default(),
            broken: false,
        })
    }

    /// The records written since the last call (all of them the first time), up to the head
    /// row of the same snapshot.
    ///
    /// # Errors
    ///
    /// [`PgError`] naming the store when it cannot be read; a broken chain is
    /// [`ReadRecords::first_break`].
    pub async fn read_new(&mut self) -> Result<ReadRecords, PgError> {
        let store = &self.store;
        let mut client = self.pool.get().await.map_err(|e| store.connect_error(e))?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(|e| store.query_error("begin reading the audit chain", e))?;
        let row = tx
            .query_one(
                "SELECT next_seq, last_hash FROM toolward_audit_head WHERE id = 1",
                &[],
            )
            .await
            .map_err(|e| store.query_error("read the audit head", e))?;
        let end: i64 = row.get(0);
        let head = AuditHead {
            records: u64::try_from(end).unwrap_or_default(),
            hash: row.get(1),
        };
        let mut records = Vec::new();
        let mut first_break = None;
        while !self.broken {
            let from = i64::try_from(self.chain.records()).unwrap_or(i64::MAX);
            let rows = tx
                .query(
                    "SELECT line FROM toolward_audit WHERE seq >= $1 AND seq < $2 ORDER BY seq LIMIT $3",
                    &[&from, &end, &EXPORT_PAGE_ROWS],
                )
                .await
                .map_err(|e| store.query_error("read audit records", e))?;
            if rows.is_empty() {
                break;
            }
            for row in &rows {
                let line: &[u8] = row.get(0);
                match self.chain.check(line) {
                    Ok(record) => records.push((
                        record,
                        serde_json::from_slice(line).unwrap_or(serde_json::Value::Null),
                    )),
                    Err(brk) => {
                        first_break = Some(brk);
                        self.broken = true;
                        break;
                    }
                }
            }
        }
        // Records at or past the head row: the head was moved back (or rows planted), and
        // every append of the fleet would collide with them. The chain up to the head may be
        // intact; the store is not.
        let past_head: i64 = tx
            .query_one(
                "SELECT count(*) FROM toolward_audit WHERE seq >= $1",
                &[&end],
            )
            .await
            .map_err(|e| store.query_error("count the records past the audit head", e))?
            .get(0);
        let head_problem = if self.broken {
            None
        } else if past_head > 0 {
            Some(format!(
                "{past_head} records are at or past the head row's next_seq {end}: the head was moved back or rows were put past it, and every append will collide with them"
            ))
        } else if self.chain.records() < head.records {
            Some(format!(
                "the head row names {} records, the table chains {}: records are missing",
                head.records,
                self.chain.records()
            ))
        } else if self.chain.last_hash() != head.hash {
            Some(format!(
                "the last record hashes to {}, the head row says {}: it was rewritten",
                self.chain.last_hash(),
                head.hash
            ))
        } else {
            None
        };
        Ok(ReadRecords {
            records,
            first_break,
            head,
            head_problem,
        })
    }
}
