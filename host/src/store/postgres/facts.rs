//! The fact counters in PostgreSQL, shared by every gateway of a fleet: the same names,
//! windows and reserve-then-settle guarantee as the state folder's
//! ([`crate::facts::StateFacts`]), across machines.
//!
//! # Rows
//!
//! `toolward_facts` holds one row per key, bucket width and bucket: `key` is SHA-256 over the
//! scope, a NUL and the key text (a tool's key holds a NUL, which PostgreSQL `text` cannot,
//! and a principal's may be long), `width_ms` 1,000 (the `minute` window's per-second
//! buckets) or 60,000 (the `hour` window's per-minute buckets), `bucket` the second or
//! minute since the Unix epoch, and the calls `forwarded` and `held` in it.
//!
//! # Sliding windows
//!
//! As the state folder's: the `minute` window is the current second and the 59 before it, the
//! `hour` window the current minute and the 59 before it, each by the clock of the gateway
//! that reads (the `time-ms` its policy sees). A bucket stamped later than that (another
//! gateway's clock is ahead) counts: skew between gateways can only make counts higher.
//!
//! # Concurrency
//!
//! [`FactStore::reserve`] is one transaction sent as one simple-query message (one round
//! trip; its statements run as one implicit transaction): it takes a transaction-scoped
//! advisory lock per key (`pg_advisory_xact_lock`, the first 8 bytes of the key's hash; in
//! ascending order, so two calls sharing keys cannot deadlock), sums the buckets in the
//! windows, and adds the call to the current buckets, then commits. Every write of a key's
//! rows happens under its lock, so of calls at the same moment on any gateways each sees all
//! those committed before it and none passes a `forwarded_*` limit. [`FactStore::record`]
//! takes the same locks to move or take back a reservation, in one round trip too.
//!
//! Calls sharing a key are ordered by its lock: that order is what keeps a limit from being
//! passed, and no design that sums a sliding window can drop it (a per-bucket row lock or a
//! conditional `UPDATE … RETURNING` covers one bucket, not the window across a bucket's
//! edge, and a conditional increment needs the limit, which only the default component's
//! rules state; a Cedar policy's thresholds are inside the policy). What the lock costs is
//! how long it is held: only the database's own work, since no client round trip happens
//! under it. Only the scopes the policy reads are locked (`docs/facts.md`), and a policy
//! that reads no fact takes no lock at all.
//!
//! # Bounds
//!
//! Buckets that have left their window by more than [`PRUNE_GRACE_SECONDS`] (by the
//! database's clock) are deleted, at most every [`PRUNE_INTERVAL`] per gateway (after a
//! reservation), so the table holds the keys active in the last hour, at most 120
//! per-second and 61 per-minute rows each, plus what accumulated since the last prune.

use std::time::Duration;

use deadpool_postgres::Pool;
use sha2::{Digest, Sha256};

use crate::database::{PgError, PgStore, PruneTimer};
use crate::facts::{
    Change, FactFuture, FactKeys, FactStore, Facts, MINUTE_MS, Outcome, Scope, Window,
};

/// How often one gateway deletes buckets that have left their window, at most: every 10 s,
/// after a reservation.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(10);

/// How long past its window a bucket is kept before a prune deletes it, seconds: 60 (a
/// minute for the per-second buckets, one minute for the per-minute ones). Prunes go by the
/// database's clock; the grace covers gateways whose clocks are behind it.
pub const PRUNE_GRACE_SECONDS: i64 = 60;

/// Buckets per window: 60 seconds for the minute, 60 minutes for the hour (as the state
/// folder's).
pub const BUCKETS: i64 = 60;

/// Width of the `minute` window's buckets, milliseconds.
const SECOND_BUCKET_MS: i64 = 1_000;

/// Width of the `hour` window's buckets, milliseconds.
const MINUTE_BUCKET_MS: i64 = MINUTE_MS as i64;

/// The PostgreSQL fact counters.
pub struct PgFacts {
    store: PgStore,
    pool: Pool,
    pruned: PruneTimer,
}

impl std::fmt::Debug for PgFacts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgFacts")
            .field("store", &self.store.name())
            .finish_non_exhaustive()
    }
}

/// One key of a call: its scope and the hash its rows are stored under.
struct Row {
    scope: Scope,
    hash: Vec<u8>,
    lock: i64,
}

fn rows(keys: &FactKeys) -> Vec<Row> {
    keys.iter()
        .map(|(scope, key)| {
            let mut hasher = Sha256::new();
            hasher.update(scope.as_str().as_bytes());
            hasher.update([0u8]);
            hasher.update(key.as_bytes());
            let hash = hasher.finalize().to_vec();
            let mut first = [0u8; 8];
            first.copy_from_slice(hash.get(..8).unwrap_or(&[0u8; 8]));
            Row {
                scope,
                hash,
                lock: i64::from_be_bytes(first),
            }
        })
        .collect()
}

/// The keys' hashes as a PostgreSQL `bytea[]` literal, in key order.
fn key_array(rows: &[Row]) -> String {
    let mut hashes: Vec<String> = rows
        .iter()
        .map(|row| format!("decode('{}', 'hex')", hex::encode(&row.hash)))
        .collect();
    hashes.sort_unstable();
    format!("ARRAY[{}]::bytea[]", hashes.join(", "))
}

/// `at_ms` as a PostgreSQL `bigint` (a time past year 292 million saturates).
fn millis(at_ms: u64) -> i64 {
    i64::try_from(at_ms).unwrap_or(i64::MAX)
}

impl PgFacts {
    /// The counters of `store`.
    ///
    /// # Errors
    ///
    /// As [`PgStore::check_schema`]: the database cannot be reached, or holds no schema of
    /// this toolward's version.
    pub async fn open(store: &PgStore) -> Result<PgFacts, PgError> {
        let pool = store.pool()?;
        store.check_schema(&pool).await?;
        Ok(PgFacts {
            store: store.clone(),
            pool,
            pruned: PruneTimer::default(),
        })
    }

    /// The statements that take the advisory locks of `rows`, one per lock, in ascending
    /// order (two calls sharing keys cannot deadlock), each ended by `;`.
    fn lock_statements(rows: &[Row]) -> String {
        let mut locks: Vec<i64> = rows.iter().map(|row| row.lock).collect();
        locks.sort_unstable();
        locks.dedup();
        locks
            .iter()
            .map(|lock| format!("SELECT pg_advisory_xact_lock({lock});"))
            .collect()
    }

    /// The statement adding `forwarded` and `held` to the buckets of `at_ms` of every key of
    /// `rows`: an addition creates its bucket, a taking (negative) only lowers an existing
    /// one, never below zero (a bucket already pruned has left its window). Rows are written
    /// in key order.
    fn add_statement(rows: &[Row], at_ms: u64, forwarded: i64, held: i64) -> String {
        let at = millis(at_ms);
        let second = at.div_euclid(SECOND_BUCKET_MS);
        let minute = at.div_euclid(MINUTE_BUCKET_MS);
        let keys = key_array(rows);
        if forwarded >= 0 && held >= 0 {
            format!(
                "INSERT INTO toolward_facts (key, width_ms, bucket, forwarded, held) \
                 SELECT k, w, b, {forwarded}, {held} FROM unnest({keys}) AS k \
                 CROSS JOIN (VALUES (1000::bigint, {second}::bigint), (60000::bigint, {minute}::bigint)) AS v(w, b) \
                 ORDER BY k, w \
                 ON CONFLICT (key, width_ms, bucket) DO UPDATE SET \
                 forwarded = toolward_facts.forwarded + EXCLUDED.forwarded, \
                 held = toolward_facts.held + EXCLUDED.held;"
            )
        } else {
            format!(
                "UPDATE toolward_facts SET \
                 forwarded = GREATEST(forwarded + ({forwarded}), 0), held = GREATEST(held + ({held}), 0) \
                 WHERE key = ANY({keys}) \
                 AND ((width_ms = 1000 AND bucket = {second}) OR (width_ms = 60000 AND bucket = {minute}));"
            )
        }
    }

    async fn reserve_in_db(&self, keys: &FactKeys, now_ms: u64) -> Result<Facts, PgError> {
        let store = &self.store;
        let rows = rows(keys);
        let client = self.pool.get().await.map_err(|e| store.connect_error(e))?;
        let now = millis(now_ms);
        let second = now.div_euclid(SECOND_BUCKET_MS);
        let minute = now.div_euclid(MINUTE_BUCKET_MS);
        // One simple-query message, so one round trip: its statements run as one implicit
        // transaction (the advisory locks are held until it commits), each on a snapshot
        // taken when it starts (read committed), so the sums see every reservation
        // committed before the locks were granted. No client round trip happens while the
        // locks are held: calls sharing a key queue only for the database's own work.
        // Every value in the text is a number or a hash this function formatted.
        let sql = format!(
            "{locks}\
             SELECT encode(key, 'hex'), width_ms, SUM(forwarded)::bigint, SUM(held)::bigint FROM toolward_facts \
             WHERE key = ANY({keys}) \
             AND ((width_ms = 1000 AND bucket > {second} - {BUCKETS}) \
             OR (width_ms = 60000 AND bucket > {minute} - {BUCKETS})) \
             GROUP BY key, width_ms;\
             {add}",
            locks = PgFacts::lock_statements(&rows),
            keys = key_array(&rows),
            add = PgFacts::add_statement(&rows, now_ms, 1, 0),
        );
        let messages = client
            .simple_query(&sql)
            .await
            .map_err(|e| store.query_error("reserve a call's fact counters", e))?;
        let mut facts = Facts::default();
        for row in &rows {
            for outcome in Outcome::ALL {
                for window in Window::ALL {
                    facts.set(row.scope, outcome, window, 0);
                }
            }
        }
        for message in &messages {
            let tokio_postgres::SimpleQueryMessage::Row(sum) = message else {
                continue;
            };
            if sum.len() != 4 {
                continue;
            }
            let (Some(hash), Some(width)) = (sum.get(0), sum.get(1)) else {
                continue;
            };
            let window = if width == "1000" {
                Window::Minute
            } else {
                Window::Hour
            };
            let count = |at: usize| {
                sum.get(at)
                    .and_then(|text| text.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            for row in rows.iter().filter(|row| hex::encode(&row.hash) == hash) {
                facts.set(row.scope, Outcome::Forwarded, window, count(2));
                facts.set(row.scope, Outcome::Held, window, count(3));
            }
        }
        if self.prune_due() {
            // Outside the reservation's transaction (a failed prune costs nothing but rows),
            // and by the database's clock, less a grace: a gateway whose clock is ahead must
            // not delete buckets still in the window of one whose clock is behind.
            if let Err(error) = client
                .execute(
                    "DELETE FROM toolward_facts WHERE \
                     (width_ms = 1000 AND bucket <= floor(extract(epoch FROM clock_timestamp()))::bigint - $1::bigint) \
                     OR (width_ms = 60000 AND bucket <= floor(extract(epoch FROM clock_timestamp()) / 60)::bigint - $2::bigint)",
                    &[&(BUCKETS + PRUNE_GRACE_SECONDS), &(BUCKETS + PRUNE_GRACE_SECONDS / 60)],
                )
                .await
            {
                tracing::warn!(
                    "fact counters in PostgreSQL store {}: cannot delete old buckets: {}",
                    store.name(),
                    crate::text::error_chain(&error)
                );
            }
        }
        Ok(facts)
    }

    async fn record_in_db(
        &self,
        keys: &FactKeys,
        at_ms: u64,
        change: Change,
    ) -> Result<(), PgError> {
        let store = &self.store;
        let rows = rows(keys);
        let client = self.pool.get().await.map_err(|e| store.connect_error(e))?;
        let changes = match change {
            Change::Release => PgFacts::add_statement(&rows, at_ms, -1, 0),
            Change::Hold => format!(
                "{}{}",
                PgFacts::add_statement(&rows, at_ms, -1, 0),
                PgFacts::add_statement(&rows, at_ms, 0, 1)
            ),
            Change::Forward => PgFacts::add_statement(&rows, at_ms, 1, 0),
        };
        // One round trip, one implicit transaction, under the same locks as a reservation.
        client
            .simple_query(&format!("{}{changes}", PgFacts::lock_statements(&rows)))
            .await
            .map_err(|e| store.query_error("settle a counted call", e))?;
        Ok(())
    }

    /// Whether a prune is due, marking it done when it is.
    fn prune_due(&self) -> bool {
        self.pruned.due(PRUNE_INTERVAL)
    }
}

impl FactStore for PgFacts {
    fn reserve<'a>(&'a self, keys: &'a FactKeys, now_ms: u64) -> FactFuture<'a, Facts> {
        Box::pin(async move { Ok(self.reserve_in_db(keys, now_ms).await?) })
    }

    fn record<'a>(&'a self, keys: &'a FactKeys, at_ms: u64, change: Change) -> FactFuture<'a, ()> {
        Box::pin(async move { Ok(self.record_in_db(keys, at_ms, change).await?) })
    }
}
