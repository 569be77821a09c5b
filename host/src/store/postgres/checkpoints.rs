//! Checkpoints of the fleet's chain (schema version 7): with `store.postgres` and
//! `audit.checkpoint`, each gateway signs checkpoints of the database's chain with its own
//! key ([`crate::checkpoint`]: the leaves are each record's `line`, the exact bytes the chain
//! hashes, as for the state folder's log), at its interval when the chain grew and at
//! shutdown, covering the records up to the head row. It keeps the latest in its state folder
//! ([`crate::checkpoint::store_latest_name`]) and in `toolward_checkpoints`, where the
//! fleet's auditors and console read it.
//!
//! # What a gateway reads, and what it relies on
//!
//! A gateway reads the whole chain once (its first checkpoint), keeps the tree's leaf
//! hashes in memory, and then reads only the records after them, each in one read-only
//! snapshot with the head row. Its database role cannot change a record it read:
//! `toolward_gateway` has no `UPDATE` or `DELETE` on `toolward_audit`, and the trigger
//! `toolward_audit_at_head` refuses an insert below the head (docs/fleet.md). Only the owner
//! of the tables (or a superuser) can rewrite records, and that is what a checkpoint copied
//! away catches. So a read checks, without reading the records again:
//!
//! - the last record read is still there with the same bytes (its SHA-256 is the hash the
//!   gateway holds), and the records after it chain from it up to the head row;
//! - the head row does not name fewer records than were read.
//!
//! A rewrite by the owner of every record from some point to the end changes the last record
//! read, or breaks the link to the next, and no checkpoint is signed. A rewrite of earlier
//! records alone breaks the chain inside the table, which `toolward audit verify --config`
//! reports; the checkpoints this gateway signs go on covering the records as it read them,
//! so `audit verify --checkpoint` against the rewritten database fails too. The first
//! checkpoint of a gateway (and `toolward audit checkpoint`) reads every record, and checks
//! the latest checkpoint of its key and origin, in its state folder and in the table, against
//! them: a new one is signed only when the chain still holds that one's records unchanged.
//!
//! # The table
//!
//! One row per signer key (its verifier key, `NAME+ID+KEY`), origin and writer (the login
//! role, `session_user`): the signed note, its size, and when it was written (the database's
//! clock). The trigger `toolward_checkpoints_own_row` keeps a login to its own rows. A row is
//! only what a login wrote: a reader opens the note with the verifier key it holds itself,
//! never with the row's.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;

use crate::audit::{AuditHead, ChainCheck};
use crate::canonical::sha256_hex;
use crate::checkpoint::{
    self, CheckpointError, Checkpoint, Checkpointer, NoteSigner, NoteVerifier, Signed,
};
use crate::database::{PgError, PgStore};
use crate::merkle::{self, Tree};
use crate::state_dir::StateDir;

use super::audit::EXPORT_PAGE_ROWS;

/// Most rows of one signer key and origin read back (one per login that signed with it): 16.
pub const MAX_CHECKPOINT_ROWS: i64 = 16;

/// Rows whose note is longer than a note can be ([`checkpoint::MAX_NOTE_BYTES`]) are never
/// read: a database login could write one of up to 1 GB (an outside attack made a gateway
/// read 200 MB into memory).
#[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
const MAX_ROW_NOTE_BYTES: i32 = checkpoint::MAX_NOTE_BYTES as i32;

/// The database's chain as a tree, read up to the head row and then only past what was read.
#[derive(Debug, Default)]
pub struct ChainLeaves {
    tree: Tree,
    chain: ChainCheck,
}

impl ChainLeaves {
    /// No records read yet.
    #[must_use]
    pub fn new() -> ChainLeaves {
        ChainLeaves::default()
    }

    /// The leaves read so far, one per record.
    #[must_use]
    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    /// Reads the records past those read before, up to the head row, in one read-only
    /// snapshot, and returns the head row. The last record read before must still hash as it
    /// did, the new records must chain from it, and the chain must end at the head row.
    ///
    /// # Errors
    /// [`CheckpointError::Chain`] naming what does not hold; [`CheckpointError::Store`] when
    /// the database cannot be read.
    pub async fn read_to_head(
        &mut self,
        store: &PgStore,
        pool: &Pool,
    ) -> Result<AuditHead, CheckpointError> {
        let problem = |problem: String| CheckpointError::Chain {
            store: store.name().to_owned(),
            problem,
        };
        let mut client = pool.get().await.map_err(|e| store.connect_error(e))?;
        let (tx, head) =
            super::audit::snapshot_at_head(store, &mut client, "begin reading the audit chain")
                .await?;
        // The head row's `next_seq`, which it holds as a non-negative `i64`.
        let end = i64::try_from(head.records).unwrap_or(i64::MAX);
        let held = self.chain.records();
        if head.records < held {
            return Err(problem(format!(
                "the head row names {} records, fewer than the {held} this gateway read: records were removed",
                head.records
            )));
        }
        if let Some(last) = held.checked_sub(1) {
            let seq = i64::try_from(last).unwrap_or(i64::MAX);
            let line: Option<Vec<u8>> = tx
                .query_opt("SELECT line FROM toolward_audit WHERE seq = $1", &[&seq])
                .await
                .map_err(|e| store.query_error("read an audit record", e))?
                .map(|row| row.get(0));
            let found = line.as_deref().map(sha256_hex);
            if found.as_deref() != Some(self.chain.last_hash()) {
                return Err(problem(format!(
                    "record {last} no longer hashes to {}, as it did when this gateway read it ({}): the records read were rewritten or removed",
                    self.chain.last_hash(),
                    found.map_or_else(|| "it is gone".to_owned(), |hash| format!("now {hash}"))
                )));
            }
        }
        loop {
            let from = i64::try_from(self.chain.records()).unwrap_or(i64::MAX);
            if from >= end {
                break;
            }
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
                self.chain.check(line).map_err(|brk| {
                    problem(format!(
                        "the chain breaks at {brk}, before the {} records to cover",
                        head.records
                    ))
                })?;
                self.tree.push(merkle::leaf_hash(line));
            }
        }
        if self.chain.records() < head.records {
            return Err(problem(format!(
                "the head row names {} records, the table chains {}: records are missing",
                head.records,
                self.chain.records()
            )));
        }
        if self.chain.last_hash() != head.hash {
            return Err(problem(format!(
                "the last record hashes to {}, the head row says {}: it was rewritten",
                self.chain.last_hash(),
                head.hash
            )));
        }
        Ok(head)
    }
}

/// Signs checkpoints of the database's chain with one gateway's key, keeping the tree's
/// leaves between checkpoints (see the module's docs).
pub struct ChainSigner {
    store: PgStore,
    pool: Pool,
    state: Arc<StateDir>,
    signer: NoteSigner,
    origin: String,
    leaves: ChainLeaves,
    /// Whether the schema version was checked and the latest checkpoints kept checked
    /// against the leaves (once, at the first checkpoint).
    checked: bool,
    /// The size of the latest checkpoint signed and kept.
    signed: Option<u64>,
}

impl std::fmt::Debug for ChainSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainSigner")
            .field("store", &self.store.name())
            .field("signer", &self.signer)
            .field("origin", &self.origin)
            .field("leaves", &self.leaves.tree.size())
            .finish_non_exhaustive()
    }
}

impl ChainSigner {
    /// A signer of `store`'s chain with `signer` as `origin`, keeping the latest checkpoint in
    /// `state` and in `toolward_checkpoints`. Reads nothing yet.
    ///
    /// # Errors
    /// [`CheckpointError::BadName`] for an origin notes cannot carry;
    /// [`CheckpointError::Store`] when the store's URL cannot make a pool.
    pub fn new(
        store: &PgStore,
        state: Arc<StateDir>,
        signer: NoteSigner,
        origin: String,
    ) -> Result<ChainSigner, CheckpointError> {
        checkpoint::check_name(&origin)?;
        Ok(ChainSigner {
            pool: store.pool()?,
            store: store.clone(),
            state,
            signer,
            origin,
            leaves: ChainLeaves::new(),
            checked: false,
            signed: None,
        })
    }

    /// Signs a checkpoint of the records up to the head row, keeps it, and returns it; with
    /// `only_if_grew`, returns `None` without signing when the chain holds no record past the
    /// latest this signer signed.
    ///
    /// # Errors
    /// [`CheckpointError::Chain`] when the chain breaks, does not end at its head row, no
    /// longer holds what was read, or no longer holds the records of the latest checkpoint
    /// kept; [`CheckpointError::Store`] or [`CheckpointError::State`] when the database or the
    /// state folder cannot be read or written.
    pub async fn sign(&mut self, only_if_grew: bool) -> Result<Option<Signed>, CheckpointError> {
        if !self.checked {
            self.store.check_schema(&self.pool).await?;
        }
        self.leaves.read_to_head(&self.store, &self.pool).await?;
        let tree = &self.leaves.tree;
        let size = tree.size();
        if only_if_grew && self.signed == Some(size) {
            return Ok(None);
        }
        let name = checkpoint::store_latest_name(self.store.name());
        let verifier = self.signer.verifier();
        let mut earlier = self.signed;
        if !self.checked {
            let (kept, path) = checkpoint::read_latest_named(&self.state, &name)?;
            let mut notes: Vec<(Vec<u8>, String)> = kept
                .map(|note| (note, format!("`{}`", path.display())))
                .into_iter()
                .collect();
            for (writer, note) in
                latest_rows(&self.store, &self.pool, &verifier, &self.origin).await?
            {
                notes.push((
                    note.into_bytes(),
                    format!(
                        "the row of `{}` in toolward_checkpoints",
                        crate::text::escape(&writer)
                    ),
                ));
            }
            for (note, what) in notes {
                let opened = match verifier.open(&note, &what) {
                    Ok(opened) if opened.origin == self.origin => opened,
                    Ok(_) | Err(_) => {
                        tracing::warn!(checkpoint = %what, "a latest checkpoint is not one this key signed for this origin; it is left aside");
                        continue;
                    }
                };
                let inconsistent = |problem: String| CheckpointError::Chain {
                    store: self.store.name().to_owned(),
                    problem: format!(
                        "the chain no longer holds the {} records of the latest checkpoint ({what}) unchanged: {problem} (check it with `toolward audit verify --config --checkpoint`)",
                        opened.size
                    ),
                };
                if opened.size > size {
                    return Err(inconsistent(format!("the chain holds {size} records")));
                }
                let root = tree
                    .root(opened.size)
                    .map_err(|e| inconsistent(e.to_string()))?;
                if root != opened.root {
                    return Err(inconsistent(
                        "its first records do not hash to that checkpoint's root".to_owned(),
                    ));
                }
                earlier = earlier.max(Some(opened.size));
            }
        }
        let checkpoint = Checkpoint {
            origin: self.origin.clone(),
            size,
            root: tree.root(size).map_err(|e| CheckpointError::NoteMalformed {
                what: "the chain's tree".to_owned(),
                reason: e.to_string(),
            })?,
        };
        let note = self.signer.sign(&checkpoint);
        let path = checkpoint::keep_latest(&self.state, &name, &note)?;
        publish(&self.store, &self.pool, &verifier, &checkpoint, &note).await?;
        self.checked = true;
        self.signed = Some(size);
        Ok(Some(Signed {
            grew: earlier.is_none_or(|earlier| earlier < size),
            checkpoint,
            note,
            path,
        }))
    }
}

/// Keeps `note` (a checkpoint of `checkpoint` signed by `verifier`'s key) as this login's row
/// of that key and origin in `toolward_checkpoints`.
async fn publish(
    store: &PgStore,
    pool: &Pool,
    verifier: &NoteVerifier,
    checkpoint: &Checkpoint,
    note: &str,
) -> Result<(), PgError> {
    let client = pool.get().await.map_err(|e| store.connect_error(e))?;
    let size = i64::try_from(checkpoint.size).unwrap_or(i64::MAX);
    client
        .execute(
            "INSERT INTO toolward_checkpoints (signer, origin, writer, size, note) \
             VALUES ($1, $2, session_user, $3, $4) \
             ON CONFLICT (signer, origin, writer) DO UPDATE SET size = EXCLUDED.size, note = EXCLUDED.note",
            &[&verifier.to_string(), &checkpoint.origin, &size, &note],
        )
        .await
        .map_err(|e| store.query_error("keep the audit checkpoint", e))?;
    Ok(())
}

/// The rows of `verifier`'s key and `origin` that this login wrote in `toolward_checkpoints`,
/// largest first: each writer's name and the note as it was written (unverified). Another
/// login's row is never this gateway's latest: an outside attack had a second gateway's login
/// plant, under the first's key and origin, a real note of that key from another database,
/// and the first stopped signing.
///
/// # Errors
/// [`PgError`] naming the store.
pub async fn latest_rows(
    store: &PgStore,
    pool: &Pool,
    verifier: &NoteVerifier,
    origin: &str,
) -> Result<Vec<(String, String)>, PgError> {
    let client = pool.get().await.map_err(|e| store.connect_error(e))?;
    let rows = client
        .query(
            "SELECT writer, note FROM toolward_checkpoints WHERE signer = $1 AND origin = $2 \
             AND writer = session_user AND octet_length(note) <= $4 \
             ORDER BY size DESC LIMIT $3",
            &[
                &verifier.to_string(),
                &origin,
                &MAX_CHECKPOINT_ROWS,
                &MAX_ROW_NOTE_BYTES,
            ],
        )
        .await
        .map_err(|e| store.query_error("read the audit checkpoints", e))?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// Every row of `toolward_checkpoints`, most recently written first, at most
/// [`MAX_CHECKPOINT_ROWS`] × 4: each row's writer, origin and key (`login (origin, key
/// name+id)`) and the note as it was written (unverified).
///
/// # Errors
/// [`PgError`] naming the store.
pub async fn every_latest(store: &PgStore) -> Result<Vec<(String, String)>, PgError> {
    let pool = store.pool()?;
    store.check_schema(&pool).await?;
    let client = pool.get().await.map_err(|e| store.connect_error(e))?;
    let rows = client
        .query(
            "SELECT writer, origin, signer, note FROM toolward_checkpoints \
             WHERE octet_length(note) <= $2 ORDER BY updated_at_ms DESC LIMIT $1",
            &[&(MAX_CHECKPOINT_ROWS * 4), &MAX_ROW_NOTE_BYTES],
        )
        .await
        .map_err(|e| store.query_error("read the audit checkpoints", e))?;
    Ok(rows
        .iter()
        .map(|row| {
            let (writer, origin, signer): (String, String, String) =
                (row.get(0), row.get(1), row.get(2));
            // The verifier key is `name+id+key`: its name and id tell the keys apart.
            let key: Vec<&str> = signer.splitn(3, '+').take(2).collect();
            (format!("{writer} ({origin}, {})", key.join("+")), row.get(3))
        })
        .collect())
}

/// The largest checkpoint of `verifier`'s key and `origin` that opens with it, in
/// `toolward_checkpoints`, as its note; `None` when there is none.
///
/// # Errors
/// [`PgError`] naming the store.
pub async fn latest_note(
    store: &PgStore,
    verifier: &NoteVerifier,
    origin: &str,
) -> Result<Option<String>, PgError> {
    let pool = store.pool()?;
    store.check_schema(&pool).await?;
    let mut best: Option<(u64, String)> = None;
    for (writer, note) in latest_rows(store, &pool, verifier, origin).await? {
        let what = format!("the row of `{}`", crate::text::escape(&writer));
        if let Ok(opened) = verifier.open(note.as_bytes(), &what)
            && opened.origin == origin
            && best.as_ref().is_none_or(|(size, _)| *size < opened.size)
        {
            best = Some((opened.size, note));
        }
    }
    Ok(best.map(|(_, note)| note))
}

/// Starts signing checkpoints of `store`'s chain with `signer` as `origin`, every
/// `interval` when the chain grew and once at shutdown (after `audit`, this gateway's writer,
/// committed what it queued), on a thread of its own (with its own Tokio runtime and pool). A
/// checkpoint that cannot be signed is logged, never a refusal of calls.
///
/// # Errors
/// As [`ChainSigner::new`]; [`CheckpointError::Chain`] when no runtime can be made.
pub fn start_signing(
    audit: Arc<super::PgAudit>,
    store: &PgStore,
    state: Arc<StateDir>,
    signer: NoteSigner,
    origin: String,
    interval: Duration,
) -> Result<Checkpointer, CheckpointError> {
    let mut chain = ChainSigner::new(store, state, signer, origin)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CheckpointError::Chain {
            store: store.name().to_owned(),
            problem: format!("no runtime for the checkpoint signer: {e}"),
        })?;
    Ok(Checkpointer::spawn(interval, move |last| {
        if last && let Err(error) = audit.flush() {
            tracing::error!(%error, "the last audit records may come after the shutdown checkpoint");
        }
        match runtime.block_on(chain.sign(true)) {
            Ok(Some(done)) => {
                tracing::info!(size = done.checkpoint.size, checkpoint = %done.path.display(), "signed an audit checkpoint of the database's chain");
            }
            Ok(None) => {}
            Err(error) => tracing::error!(%error, "no audit checkpoint signed"),
        }
    }))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn the_state_folder_name_of_a_stores_checkpoint_depends_on_the_store_alone() {
        let a = checkpoint::store_latest_name("`postgres://db:5432/fleet`");
        let b = checkpoint::store_latest_name("`postgres://db:5432/other`");
        assert_ne!(a, b);
        assert!(a.starts_with(Path::new(checkpoint::CHECKPOINTS_DIR)));
        assert!(a.to_string_lossy().ends_with(".checkpoint"));
    }
}
