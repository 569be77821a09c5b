//! The fact counters in PostgreSQL, shared by every gateway of a fleet: the same names,
//! windows and reserve-then-settle guarantee as the state folder's
//! ([`crate::store::facts::StateFacts`]), across machines.
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
//! [`FactStore::reserve`] is one transaction: it takes a transaction-scoped advisory lock per
//! key (`pg_advisory_xact_lock`, the first 8 bytes of the key's hash; in ascending order, so
//! two calls sharing keys cannot deadlock), sums the buckets in the windows, and adds the
//! call to the current buckets, then commits. Every write of a key's rows happens under its
//! lock, so of calls at the same moment on any gateways each sees all those committed before
//! it and none passes a `forwarded_*` limit. [`FactStore::record`] takes the same locks to
//! move or take back a reservation.
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
use tokio_postgres::types::ToSql;

use super::{PgError, PgStore, PruneTimer};
use crate::store::facts::{
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

/// `at_ms` as a PostgreSQL `bigint` (a time past year 292 million saturates).
fn millis(at_ms: u64) -> i64 {
    i64::try_from(at_ms).unwrap_or(i64::MAX)
}

impl PgFacts {
    /// The counters of `store`, its schema created when missing.
    ///
    /// # Errors
    ///
    /// As [`PgStore::prepare`]: the database cannot be reached, or holds a newer schema.
    pub async fn open(store: &PgStore) -> Result<PgFacts, PgError> {
        let pool = store.pool()?;
        store.prepare(&pool).await?;
        Ok(PgFacts {
            store: store.clone(),
            pool,
            pruned: PruneTimer::default(),
        })
    }

    /// Begins a transaction holding the advisory locks of `rows`, in ascending order.
    async fn locked<'c>(
        &self,
        client: &'c mut deadpool_postgres::Object,
        rows: &[Row],
    ) -> Result<deadpool_postgres::Transaction<'c>, PgError> {
        let store = &self.store;
        let tx = client
            .transaction()
            .await
            .map_err(|e| store.query_error("begin a fact transaction", e))?;
        let mut locks: Vec<i64> = rows.iter().map(|row| row.lock).collect();
        locks.sort_unstable();
        locks.dedup();
        // Pipelined: the statements are sent in the order polled (ascending) and the server
        // runs them in that order, in one round trip.
        let params: Vec<[&(dyn ToSql + Sync); 1]> = locks
            .iter()
            .map(|lock| [lock as &(dyn ToSql + Sync)])
            .collect();
        futures::future::try_join_all(
            params
                .iter()
                .map(|param| tx.execute("SELECT pg_advisory_xact_lock($1)", param)),
        )
        .await
        .map_err(|e| store.query_error("lock a fact counter", e))?;
        Ok(tx)
    }

    /// Adds `forwarded` and `held` to the buckets of `at_ms` of every key of `rows`: an
    /// addition creates its bucket, a taking (negative) only lowers an existing one, never
    /// below zero (a bucket already pruned has left its window).
    async fn add(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        rows: &[Row],
        at_ms: u64,
        forwarded: i64,
        held: i64,
    ) -> Result<(), PgError> {
        let hashes: Vec<&[u8]> = rows.iter().map(|row| row.hash.as_slice()).collect();
        let at = millis(at_ms);
        let second = at.div_euclid(SECOND_BUCKET_MS);
        let minute = at.div_euclid(MINUTE_BUCKET_MS);
        let store = &self.store;
        if forwarded >= 0 && held >= 0 {
            tx.execute(
                "INSERT INTO toolward_facts (key, width_ms, bucket, forwarded, held) \
                 SELECT k, w, b, $4, $5 FROM unnest($1::bytea[]) AS k \
                 CROSS JOIN (VALUES (1000::bigint, $2::bigint), (60000::bigint, $3::bigint)) AS v(w, b) \
                 ON CONFLICT (key, width_ms, bucket) DO UPDATE SET \
                 forwarded = toolward_facts.forwarded + EXCLUDED.forwarded, \
                 held = toolward_facts.held + EXCLUDED.held",
                &[&hashes, &second, &minute, &forwarded, &held],
            )
            .await
            .map_err(|e| store.query_error("count a call", e))?;
        } else {
            tx.execute(
                "UPDATE toolward_facts SET \
                 forwarded = GREATEST(forwarded + $4, 0), held = GREATEST(held + $5, 0) \
                 WHERE key = ANY($1::bytea[]) \
                 AND ((width_ms = 1000 AND bucket = $2) OR (width_ms = 60000 AND bucket = $3))",
                &[&hashes, &second, &minute, &forwarded, &held],
            )
            .await
            .map_err(|e| store.query_error("settle a counted call", e))?;
        }
        Ok(())
    }

    async fn reserve_in_db(&self, keys: &FactKeys, now_ms: u64) -> Result<Facts, PgError> {
        let store = &self.store;
        let rows = rows(keys);
        let mut client = self.pool.get().await.map_err(|e| store.connect_error(e))?;
        let tx = self.locked(&mut client, &rows).await?;
        let now = millis(now_ms);
        let second = now.div_euclid(SECOND_BUCKET_MS);
        let minute = now.div_euclid(MINUTE_BUCKET_MS);
        let hashes: Vec<&[u8]> = rows.iter().map(|row| row.hash.as_slice()).collect();
        let read_params: [&(dyn ToSql + Sync); 4] = [&hashes, &second, &minute, &BUCKETS];
        // Read committed: the sums see every reservation committed before the locks were
        // granted. Pipelined with the reservation after them (sent, and run, in this order).
        let read = tx.query(
            "SELECT key, width_ms, SUM(forwarded)::bigint, SUM(held)::bigint FROM toolward_facts \
                 WHERE key = ANY($1::bytea[]) \
                 AND ((width_ms = 1000 AND bucket > $2::bigint - $4::bigint) \
                 OR (width_ms = 60000 AND bucket > $3::bigint - $4::bigint)) \
                 GROUP BY key, width_ms",
            &read_params,
        );
        let read = async {
            read.await
                .map_err(|e| store.query_error("read the fact counters", e))
        };
        let (sums, ()) = futures::try_join!(read, self.add(&tx, &rows, now_ms, 1, 0))?;
        let mut facts = Facts::default();
        for row in &rows {
            for outcome in Outcome::ALL {
                for window in Window::ALL {
                    facts.set(row.scope, outcome, window, 0);
                }
            }
        }
        for sum in &sums {
            let hash: &[u8] = sum.get(0);
            let width: i64 = sum.get(1);
            let window = if width == SECOND_BUCKET_MS {
                Window::Minute
            } else {
                Window::Hour
            };
            let count = |at: usize| u64::try_from(sum.get::<_, i64>(at)).unwrap_or(0);
            for row in rows.iter().filter(|row| row.hash == hash) {
                facts.set(row.scope, Outcome::Forwarded, window, count(2));
                facts.set(row.scope, Outcome::Held, window, count(3));
            }
        }
        tx.commit()
            .await
            .map_err(|e| store.query_error("commit a reservation", e))?;
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
                    super::with_causes(&error)
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
        let mut client = self.pool.get().await.map_err(|e| store.connect_error(e))?;
        let tx = self.locked(&mut client, &rows).await?;
        match change {
            Change::Release => self.add(&tx, &rows, at_ms, -1, 0).await?,
            Change::Hold => {
                self.add(&tx, &rows, at_ms, -1, 0).await?;
                self.add(&tx, &rows, at_ms, 0, 1).await?;
            }
            Change::Forward => self.add(&tx, &rows, at_ms, 1, 0).await?,
        }
        tx.commit()
            .await
            .map_err(|e| store.query_error("commit a counted call", e))
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
