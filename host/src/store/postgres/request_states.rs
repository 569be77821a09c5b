//! The one-use ledger of 2026-07-28 `requestState`s in PostgreSQL, shared by every gateway of
//! a fleet, so that a client's retry redeemed on one gateway is a replay on every other, and
//! the key that MACs them (`toolward_keys`), so that any gateway accepts the retry.
//!
//! A redemption is one `INSERT INTO toolward_request_states ... ON CONFLICT (call_id) DO
//! NOTHING`: of any number of redemptions of one call id at once, on any gateways, the
//! primary key lets exactly one insert its row ([`Redemption::First`]); the others insert
//! nothing ([`Redemption::AlreadyUsed`]). Rows whose expiry passed more than
//! [`PRUNE_GRACE`] ago are deleted, at most every [`PRUNE_INTERVAL`] per gateway: by then the
//! gateways refuse the `requestState` by its expiry, whatever the ledger says.

use std::time::Duration;

use deadpool_postgres::Pool;

use crate::database::{PgError, PgStore, PruneTimer, REQUEST_STATE_KEY_NAME};
use crate::state_dir::KEY_BYTES;
use crate::state_dir::Key;
use crate::store::request_states::{
    LedgerError, LedgerFuture, Redemption, RequestStateLedger, check_entry_id,
};

/// How often one gateway deletes expired rows, at most: every 10 s, at a redemption.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(10);

/// How long after its expiry a row is kept, milliseconds: 10 minutes. A gateway checks a
/// `requestState`'s expiry by its own clock before redeeming it; the row outlives the expiry
/// by this much so that a gateway whose clock is behind the pruning one's (by less than this)
/// still finds it and refuses the replay.
pub const PRUNE_GRACE_MS: u64 = 600_000;

/// [`PRUNE_GRACE_MS`] as a duration.
pub const PRUNE_GRACE: Duration = Duration::from_millis(PRUNE_GRACE_MS);

/// The PostgreSQL `requestState` ledger.
pub struct PgLedger {
    store: PgStore,
    pool: Pool,
    pruned: PruneTimer,
    key: Key,
}

impl std::fmt::Debug for PgLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLedger")
            .field("store", &self.store.name())
            .finish_non_exhaustive()
    }
}

impl PgLedger {
    /// The ledger of `store`, and the fleet's key [`PgStore::migrate`] made.
    ///
    /// # Errors
    ///
    /// As [`PgStore::check_schema`]: the database cannot be reached, or holds no schema of
    /// this toolward's version; [`PgError::Query`] when the key cannot be read.
    pub async fn open(store: &PgStore) -> Result<PgLedger, PgError> {
        let pool = store.pool()?;
        store.check_schema(&pool).await?;
        let client = pool.get().await.map_err(|e| store.connect_error(e))?;
        let row = client
            .query_one(
                "SELECT key FROM toolward_keys WHERE name = $1",
                &[&REQUEST_STATE_KEY_NAME],
            )
            .await
            .map_err(|e| store.query_error("read the request-state key", e))?;
        let bytes: &[u8] = row.get(0);
        let key = <[u8; KEY_BYTES]>::try_from(bytes).map_err(|_| PgError::Query {
            store: store.name().to_string(),
            action: "read the request-state key",
            reason: format!("it holds {} bytes, not {KEY_BYTES}", bytes.len()),
        })?;
        Ok(PgLedger {
            store: store.clone(),
            pool,
            pruned: PruneTimer::default(),
            key: Key::from_bytes(key),
        })
    }

    /// The fleet's `requestState` MAC key (`toolward_keys`, made once by `migrate`): every
    /// gateway on the database MACs and verifies with it, so a client's retry is accepted by
    /// any of them without copying a file.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Whether a prune is due, marking it done when it is.
    fn prune_due(&self) -> bool {
        self.pruned.due(PRUNE_INTERVAL)
    }

    async fn redeem_in_db(
        &self,
        id: &str,
        expires_ms: u64,
        now_ms: u64,
    ) -> Result<Redemption, LedgerError> {
        check_entry_id(id)?;
        let store = &self.store;
        let client = self.pool.get().await.map_err(|e| store.connect_error(e))?;
        if self.prune_due() {
            let before = i64::try_from(now_ms.saturating_sub(PRUNE_GRACE_MS)).unwrap_or(i64::MAX);
            client
                .execute(
                    "DELETE FROM toolward_request_states WHERE expires_ms < $1",
                    &[&before],
                )
                .await
                .map_err(|e| store.query_error("prune the request-state ledger", e))?;
        }
        let expires = i64::try_from(expires_ms).unwrap_or(i64::MAX);
        let inserted = client
            .execute(
                "INSERT INTO toolward_request_states (call_id, expires_ms) VALUES ($1, $2) ON CONFLICT (call_id) DO NOTHING",
                &[&id, &expires],
            )
            .await
            .map_err(|e| store.query_error("redeem a request state", e))?;
        Ok(if inserted == 1 {
            Redemption::First
        } else {
            Redemption::AlreadyUsed
        })
    }
}

impl RequestStateLedger for PgLedger {
    fn redeem<'a>(
        &'a self,
        id: &'a str,
        expires_ms: u64,
        now_ms: u64,
    ) -> LedgerFuture<'a, Redemption> {
        Box::pin(self.redeem_in_db(id, expires_ms, now_ms))
    }

    fn key(&self) -> Option<Key> {
        Some(self.key.clone())
    }
}
