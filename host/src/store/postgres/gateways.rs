//! The gateways' published states in PostgreSQL (schema version 6): the fleet's
//! `toolward console` shows every gateway's servers, restarts, confinement and refused tools
//! from one table, whichever machine each gateway runs on.
//!
//! A row is one gateway: `id` (its ULID), `state` (the JSON text [`crate::gateways`] makes;
//! this module neither reads nor checks it), `updated_at_ms`, stamped by the database's
//! clock, so gateways whose clocks disagree are judged alike, and `writer`, the role that
//! inserted it. A trigger (`toolward_gateways_own_row`) sets both, whatever the writer sent,
//! and refuses another role's update or delete of the row. A gateway writes its row when
//! something its clients are told of happens and every [`HEARTBEAT`] besides, and deletes it
//! when it ends cleanly. A gateway that ended otherwise leaves its row: one not written for
//! [`GONE_AFTER`] is read as gone, as the state folder reads a state whose lock is free.
//!
//! Rows are the gateways' to write and the console's to read (docs/fleet.md's
//! `toolward_gateway` and `toolward_console`). A row is at most
//! [`MAX_STATE_BYTES`](crate::gateways::MAX_STATE_BYTES) when read: a longer one is left out.

use std::time::Duration;

use deadpool_postgres::Pool;

use crate::database::{PgError, PgStore};

/// How often a running gateway writes its row though nothing changed: every 10 s.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// How long a row may go unwritten before its gateway is read as gone: 30 s, three
/// heartbeats.
pub const GONE_AFTER: Duration = Duration::from_secs(30);

/// Most rows read of one writer (the database role that inserted them): the 16 it wrote
/// last. A fleet's gateways each log in with a role of their own (docs/fleet.md), so one
/// stolen login's rows cannot push the others off the console's page.
pub const MAX_ROWS_PER_WRITER: i64 = 16;

/// The database's clock in milliseconds since the Unix epoch, as SQL.
const DB_NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// One row as read: the state's JSON text, and how long ago it was written.
#[derive(Debug, Clone)]
pub struct PublishedRow {
    /// The gateway's id.
    pub id: String,
    /// The JSON text the gateway wrote.
    pub state: String,
    /// Milliseconds since it was written, by the database's clock.
    pub age_ms: u64,
}

/// The table of the gateways' states.
#[derive(Clone)]
pub struct PgGateways {
    store: PgStore,
    pool: Pool,
}

impl std::fmt::Debug for PgGateways {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgGateways")
            .field("store", &self.store.name())
            .finish_non_exhaustive()
    }
}

impl PgGateways {
    /// The table of `store`; the schema version checked.
    ///
    /// # Errors
    ///
    /// As [`PgStore::check_schema`].
    pub async fn open(store: &PgStore) -> Result<PgGateways, PgError> {
        let pool = store.pool()?;
        store.check_schema(&pool).await?;
        Ok(PgGateways {
            store: store.clone(),
            pool,
        })
    }

    /// The store, as [`PgStore::name`] names it.
    #[must_use]
    pub fn store_name(&self) -> &str {
        self.store.name()
    }

    /// Writes the row of gateway `id`: `state`, stamped now.
    ///
    /// # Errors
    ///
    /// [`PgError`] naming the store.
    pub async fn write(&self, id: &str, state: &str) -> Result<(), PgError> {
        let store = &self.store;
        let client = self.pool.get().await.map_err(|e| store.connect_error(e))?;
        client
            .execute(
                &format!(
                    "INSERT INTO toolward_gateways (id, state, updated_at_ms) VALUES ($1, $2, {DB_NOW_MS}) \
                     ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, updated_at_ms = EXCLUDED.updated_at_ms"
                ),
                &[&id, &state],
            )
            .await
            .map_err(|e| store.query_error("publish the gateway's state", e))?;
        Ok(())
    }

    /// Deletes the row of gateway `id`: it ended cleanly.
    ///
    /// # Errors
    ///
    /// [`PgError`] naming the store.
    pub async fn remove(&self, id: &str) -> Result<(), PgError> {
        let store = &self.store;
        let client = self.pool.get().await.map_err(|e| store.connect_error(e))?;
        client
            .execute("DELETE FROM toolward_gateways WHERE id = $1", &[&id])
            .await
            .map_err(|e| store.query_error("remove the gateway's state", e))?;
        Ok(())
    }

    /// The newest `limit` rows, the most recently written first, at most
    /// [`MAX_ROWS_PER_WRITER`] of each writer, each at most `max_bytes` (longer ones are left
    /// out), and how many such rows there are in all.
    ///
    /// # Errors
    ///
    /// [`PgError`] naming the store.
    pub async fn read(
        &self,
        limit: usize,
        max_bytes: u64,
    ) -> Result<(Vec<PublishedRow>, usize), PgError> {
        let store = &self.store;
        let client = self.pool.get().await.map_err(|e| store.connect_error(e))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let max_bytes = i64::try_from(max_bytes).unwrap_or(i64::MAX);
        let rows = client
            .query(
                &format!(
                    "SELECT id, state, {DB_NOW_MS} - updated_at_ms, count(*) OVER () FROM ( \
                       SELECT id, state, updated_at_ms, \
                              row_number() OVER (PARTITION BY writer ORDER BY updated_at_ms DESC) AS nth \
                       FROM toolward_gateways WHERE octet_length(state)::bigint <= $2::bigint \
                     ) AS newest WHERE nth <= $3 ORDER BY updated_at_ms DESC LIMIT $1"
                ),
                &[&limit, &max_bytes, &MAX_ROWS_PER_WRITER],
            )
            .await
            .map_err(|e| store.query_error("read the gateways' states", e))?;
        let total = rows
            .first()
            .map_or(0, |row| usize::try_from(row.get::<_, i64>(3)).unwrap_or(usize::MAX));
        let read = rows
            .iter()
            .map(|row| PublishedRow {
                id: row.get(0),
                state: row.get(1),
                age_ms: u64::try_from(row.get::<_, i64>(2)).unwrap_or_default(),
            })
            .collect();
        Ok((read, total))
    }
}
