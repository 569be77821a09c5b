//! Sessions' labels in PostgreSQL, shared by every gateway of a fleet: what a session (or a
//! sessionless principal) has seen, joined on whichever gateway delivered the result, read
//! by whichever gateway decides its next call. The same semantics as the in-memory store
//! ([`crate::labels::MemoryLabels`]), across machines.
//!
//! # Rows
//!
//! `toolward_labels` holds one row per key: `kind` (`session` or `principal`) and `name`
//! (the session id or the principal), `untrusted`, `confidentiality` (the level's text) and
//! `rank` (its rank, computed by the gateway that wrote it from its levels:
//! [`LabelSettings::rank`], an unknown level above every named one), `tags` (sorted by
//! bytes, without duplicates) and `at_ms`, when a result was last delivered, by the clock
//! of the gateway that delivered it. A row whose `at_ms` is older than its lapse
//! ([`SESSION_IDLE_MS`](crate::labels::SESSION_IDLE_MS) for a session,
//! [`LabelSettings::principal_window_ms`] for a principal) by the reading gateway's clock
//! counts as no labels, as in memory. A row stamped later than that (another gateway's
//! clock is ahead) counts: skew can only keep labels longer. Every gateway of a fleet has
//! the same config, so the same levels: the ranks they store compare.
//!
//! # Concurrency
//!
//! A join is one statement, `INSERT ... ON CONFLICT (kind, name) DO UPDATE ... RETURNING`,
//! whose update computes the join in SQL from the row as it is when the statement takes
//! its lock (untrusted `OR`, the higher rank's level, the tags' union), not from anything
//! the gateway read before: of joins at once on any gateways, each applies on top of those
//! committed before it, and none is lost. A join of no labels inserts nothing: it only
//! stamps a live row (an `UPDATE` under the same row lock), so a fleet whose results bring
//! no labels writes no rows.
//!
//! # Bounds
//!
//! Rows whose lapse has passed by more than [`PRUNE_GRACE_MS`] (by the database's clock)
//! are deleted, at most every [`PRUNE_INTERVAL`] per gateway (after a join), so the table
//! holds the keys that saw labels in the last day (or principal window), plus what
//! accumulated since the last prune.

use std::time::Duration;

use deadpool_postgres::Pool;

use crate::database::{PgError, PgStore, PruneTimer, STATEMENT_TIMEOUT};
use crate::labels::{LabelFuture, LabelKey, LabelSettings, LabelStore, Labels};

/// How often one gateway deletes lapsed rows, at most: every 60 s, after a join.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(60);

/// How long past its lapse a row is kept before a prune deletes it, milliseconds: 10
/// minutes. Prunes go by the database's clock; the grace covers gateways whose clocks are
/// behind it (deleting a row that has lapsed for every gateway changes nothing).
pub const PRUNE_GRACE_MS: u64 = 600_000;

/// The longest session id or principal name kept, bytes: 1,024 (an index entry of
/// PostgreSQL holds at most a third of a page). A longer one is refused, and with it the
/// call or the result: its labels could not be kept.
pub const MAX_NAME_BYTES: usize = 1024;

/// The PostgreSQL label store.
pub struct PgLabels {
    store: PgStore,
    pool: Pool,
    settings: LabelSettings,
    pruned: PruneTimer,
}

impl std::fmt::Debug for PgLabels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLabels")
            .field("store", &self.store.name())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// `value` as a PostgreSQL `bigint` (a time past year 292 million saturates).
fn bigint(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The row of `key`: its `kind` and `name`.
fn row_of(key: &LabelKey) -> (&'static str, &str) {
    match key {
        LabelKey::Session(session) => ("session", session),
        LabelKey::Principal(principal) => ("principal", principal),
    }
}

/// The join of `key`'s row with `$3`..`$6` (untrusted, level, rank, sorted tags) at `$7`,
/// the row's lapse `$8`: a new row as given, or the row joined (a lapsed row counts as
/// empty). Every value is a parameter.
const JOIN: &str = "\
INSERT INTO toolward_labels AS l (kind, name, untrusted, confidentiality, rank, tags, at_ms) \
VALUES ($1, $2, $3, $4, $5, $6, $7) \
ON CONFLICT (kind, name) DO UPDATE SET \
    untrusted = EXCLUDED.untrusted OR (l.untrusted AND EXCLUDED.at_ms - l.at_ms <= $8), \
    confidentiality = CASE WHEN EXCLUDED.at_ms - l.at_ms > $8 OR EXCLUDED.rank > l.rank \
        THEN EXCLUDED.confidentiality ELSE l.confidentiality END, \
    rank = CASE WHEN EXCLUDED.at_ms - l.at_ms > $8 OR EXCLUDED.rank > l.rank \
        THEN EXCLUDED.rank ELSE l.rank END, \
    tags = ARRAY(SELECT DISTINCT t.tag COLLATE pg_catalog.\"C\" FROM pg_catalog.unnest( \
        CASE WHEN EXCLUDED.at_ms - l.at_ms <= $8 THEN l.tags ELSE '{}'::text[] END \
        OPERATOR(pg_catalog.||) EXCLUDED.tags) AS t(tag) ORDER BY 1), \
    at_ms = GREATEST(l.at_ms, EXCLUDED.at_ms) \
RETURNING untrusted, confidentiality, tags";

/// A join of no labels: the live row of `$1`, `$2` stamped `$3` (its lapse `$4`), as it is.
const STAMP: &str = "\
UPDATE toolward_labels SET at_ms = GREATEST(at_ms, $3) \
WHERE kind = $1 AND name = $2 AND $3 - at_ms <= $4 \
RETURNING untrusted, confidentiality, tags";

/// The live row of `$1`, `$2` at `$3` (its lapse `$4`).
const GET: &str = "\
SELECT untrusted, confidentiality, tags FROM toolward_labels \
WHERE kind = $1 AND name = $2 AND $3 - at_ms <= $4";

/// Lapsed rows, by the database's clock: older than `$1` milliseconds.
const PRUNE: &str = "\
DELETE FROM toolward_labels \
WHERE at_ms < (extract(epoch FROM clock_timestamp()) * 1000)::bigint - $1";

fn labels_of(row: &tokio_postgres::Row) -> Labels {
    Labels {
        untrusted: row.get(0),
        confidentiality: row.get(1),
        tags: row.get(2),
    }
}

impl PgLabels {
    /// The labels of `store`, ranking confidentiality and keeping principals by `settings`
    /// ([`LabelSettings::from_reviews`] of the policy's reviews, as the in-memory store).
    ///
    /// # Errors
    ///
    /// As [`PgStore::check_schema`]: the database cannot be reached, or holds no schema of
    /// this toolward's version.
    pub async fn open(store: &PgStore, settings: LabelSettings) -> Result<PgLabels, PgError> {
        let pool = store.pool()?;
        store.check_schema(&pool).await?;
        Ok(PgLabels {
            store: store.clone(),
            pool,
            settings,
            pruned: PruneTimer::default(),
        })
    }

    /// Refuses what a row cannot hold, naming it: a NUL byte (PostgreSQL `text` holds none)
    /// in the name, the level or a tag, and a name longer than [`MAX_NAME_BYTES`].
    fn check(
        &self,
        action: &'static str,
        key: &LabelKey,
        labels: Option<&Labels>,
    ) -> Result<(), PgError> {
        let refuse = |reason: String| PgError::Query {
            store: self.store.name().to_owned(),
            action,
            reason,
        };
        let (kind, name) = row_of(key);
        if name.len() > MAX_NAME_BYTES {
            return Err(refuse(format!(
                "the {kind}'s name is {} bytes, more than the {MAX_NAME_BYTES} kept",
                name.len()
            )));
        }
        if name.contains('\0') {
            return Err(refuse(format!(
                "the {kind}'s name holds a NUL byte, which PostgreSQL text cannot"
            )));
        }
        if let Some(labels) = labels
            && (labels.confidentiality.contains('\0')
                || labels.tags.iter().any(|tag| tag.contains('\0')))
        {
            return Err(refuse(String::from(
                "a label holds a NUL byte, which PostgreSQL text cannot",
            )));
        }
        Ok(())
    }

    async fn get_in_db(&self, key: &LabelKey, now_ms: u64) -> Result<Labels, PgError> {
        const ACTION: &str = "read a session's labels";
        self.check(ACTION, key, None)?;
        let store = &self.store;
        let (kind, name) = row_of(key);
        let (now, lapse) = (bigint(now_ms), bigint(self.settings.lapse_ms(key)));
        self.store
            .timed(ACTION, async {
                let client = self.pool.get().await.map_err(|e| store.connect_error(e))?;
                let row = client
                    .query_opt(GET, &[&kind, &name, &now, &lapse])
                    .await
                    .map_err(|e| store.query_error(ACTION, e))?;
                Ok(row.as_ref().map(labels_of).unwrap_or_default())
            })
            .await
    }

    async fn join_in_db(
        &self,
        key: &LabelKey,
        labels: &Labels,
        now_ms: u64,
    ) -> Result<Labels, PgError> {
        const ACTION: &str = "join a session's labels";
        self.check(ACTION, key, Some(labels))?;
        let store = &self.store;
        let (kind, name) = row_of(key);
        let (now, lapse) = (bigint(now_ms), bigint(self.settings.lapse_ms(key)));
        // The labels as a row holds them: tags sorted (by bytes, as `COLLATE "C"` sorts
        // them) without duplicates, the level with its rank.
        let incoming = self.settings.join(&Labels::default(), labels);
        let rank = bigint(self.settings.rank(&incoming.confidentiality) as u64);
        let joined = self
            .store
            .timed(ACTION, async {
                let client = self.pool.get().await.map_err(|e| store.connect_error(e))?;
                let row = if incoming == Labels::default() {
                    client.query_opt(STAMP, &[&kind, &name, &now, &lapse]).await
                } else {
                    client
                        .query_opt(
                            JOIN,
                            &[
                                &kind,
                                &name,
                                &incoming.untrusted,
                                &incoming.confidentiality,
                                &rank,
                                &incoming.tags,
                                &now,
                                &lapse,
                            ],
                        )
                        .await
                }
                .map_err(|e| store.query_error(ACTION, e))?;
                Ok((client, row.as_ref().map(labels_of).unwrap_or_default()))
            })
            .await;
        let (client, joined) = joined?;
        if self.pruned.due(PRUNE_INTERVAL) {
            // After the join, outside it (a failed prune costs nothing but rows), and by
            // the database's clock less the longest lapse and a grace: a gateway whose
            // clock is behind must not lose rows still live by its clock.
            let keep = self
                .settings
                .principal_window_ms
                .max(crate::labels::SESSION_IDLE_MS)
                .saturating_add(PRUNE_GRACE_MS);
            let pruned =
                tokio::time::timeout(STATEMENT_TIMEOUT, client.execute(PRUNE, &[&bigint(keep)]))
                    .await;
            if let Some(problem) = match pruned {
                Ok(Ok(_)) => None,
                Ok(Err(error)) => Some(crate::text::error_chain(&error)),
                Err(_) => Some(format!(
                    "no answer within {} s",
                    STATEMENT_TIMEOUT.as_secs()
                )),
            } {
                tracing::warn!(
                    "session labels in PostgreSQL store {}: cannot delete lapsed labels: {problem}",
                    store.name()
                );
            }
        }
        Ok(joined)
    }
}

impl LabelStore for PgLabels {
    fn get<'a>(&'a self, key: &'a LabelKey, now_ms: u64) -> LabelFuture<'a, Labels> {
        Box::pin(async move { Ok(self.get_in_db(key, now_ms).await?) })
    }

    fn join<'a>(
        &'a self,
        key: &'a LabelKey,
        labels: &'a Labels,
        now_ms: u64,
    ) -> LabelFuture<'a, Labels> {
        Box::pin(async move { Ok(self.join_in_db(key, labels, now_ms).await?) })
    }
}
