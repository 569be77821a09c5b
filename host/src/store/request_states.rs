//! The one-use ledger of `requestState`s: the store that makes an approval given through a
//! 2026-07-28 `input_required` round trip usable once (MCP 2026-07-28, SEP-2322 "Multi
//! round-trip requests": a server that lets `requestState` authorize anything must refuse a
//! replay itself; the MAC alone cannot).
//!
//! A `requestState` names the call it was issued for (a call id, a ULID) and when it expires.
//! Redeeming it ([`RequestStateLedger::redeem`]) records that id as used until its expiry;
//! the first redemption wins, every later one is [`Redemption::AlreadyUsed`]. After its
//! expiry an entry may be pruned: the `requestState` is refused by its expiry by then.
//!
//! One implementation here, [`StateDirLedger`], for the state folder: one file per redeemed
//! call id under `<state_dir>/request-states/`, created with `O_EXCL`, so every process of
//! every config sharing the state folder sees one ledger, and of two redemptions at once the
//! kernel lets exactly one create the file. A fleet of gateways on several machines shares
//! the PostgreSQL store's ledger ([`crate::store::postgres::PgLedger`], with `store.postgres`).

use std::fmt;
use std::future::Future;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};

use crate::state_dir::{StateDir, StateError};

/// The folder of the state folder that holds redeemed call ids: `request-states`.
pub const REQUEST_STATES_DIR: &str = "request-states";

/// Most unexpired redeemed entries the state-folder ledger keeps: 65,536 (each a file of a
/// few bytes). Past it a redemption is refused (fail closed) until entries expire; with the
/// default approval timeout of 120 s that is over 500 approvals a second.
pub const MAX_LEDGER_ENTRIES: usize = 65_536;

/// How often the state-folder ledger removes expired entries, at most: every 10 s, at the
/// next redemption. Between prunes the count of entries is only added to.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(10);

/// Longest call id accepted as an entry name, in characters (ids are 26-character ULIDs).
pub const MAX_ENTRY_ID_CHARS: usize = 64;

/// Most bytes of one entry read back (its expiry, decimal milliseconds).
const MAX_ENTRY_BYTES: u64 = 64;

/// Errors of a `requestState` ledger; each names the ledger and the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The state folder, or the ledger's folder in it, cannot be used.
    #[error("the request-state ledger in the state folder cannot be used: {0}")]
    State(#[from] StateError),
    /// Creating, reading or removing an entry failed.
    #[error("the request-state ledger `{}` cannot {action}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The entry or folder.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The id is not a call id (letters and digits, at most [`MAX_ENTRY_ID_CHARS`]).
    #[error("`{id}` is not a call id (expected up to {MAX_ENTRY_ID_CHARS} letters and digits)")]
    InvalidId {
        /// The id, cut to [`MAX_ENTRY_ID_CHARS`] characters.
        id: String,
    },
    /// The ledger holds [`MAX_LEDGER_ENTRIES`] unexpired entries.
    #[error(
        "the request-state ledger `{}` holds {count} unexpired entries, the limit of {limit}: approvals given through `input_required` are refused until entries expire (lower `limits.approval_timeout_ms` to make them expire sooner)",
        path.display()
    )]
    Full {
        /// The ledger's folder.
        path: PathBuf,
        /// Entries counted.
        count: usize,
        /// [`MAX_LEDGER_ENTRIES`].
        limit: usize,
    },
    /// The PostgreSQL store's ledger cannot be reached or written.
    #[error("the request-state ledger in {0}")]
    #[cfg(feature = "postgres")]
    Postgres(#[from] crate::database::PgError),
}

/// The future [`RequestStateLedger::redeem`] returns: boxed, so the trait stays
/// dyn-compatible, and `Send`.
pub type LedgerFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, LedgerError>> + Send + 'a>>;

/// Checks that `id` can be a call id (letters and digits, at most [`MAX_ENTRY_ID_CHARS`]):
/// the state folder names a file after it, and every ledger refuses the same ids.
///
/// # Errors
/// [`LedgerError::InvalidId`].
pub fn check_entry_id(id: &str) -> Result<(), LedgerError> {
    if id.is_empty()
        || id.chars().count() > MAX_ENTRY_ID_CHARS
        || !id.chars().all(|c| c.is_ascii_alphanumeric())
    {
        return Err(LedgerError::InvalidId {
            id: id.chars().take(MAX_ENTRY_ID_CHARS).collect(),
        });
    }
    Ok(())
}

/// The outcome of a redemption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redemption {
    /// The first: the `requestState` may be used.
    First,
    /// It was redeemed before: a replay, to be refused.
    AlreadyUsed,
}

/// A one-use ledger of `requestState`s, shared by every gateway that may receive a client's
/// retry (the state folder for the processes of one machine; a database for a fleet).
pub trait RequestStateLedger: Send + Sync + fmt::Debug {
    /// Records the call id `id` as redeemed until `expires_ms` (milliseconds since the Unix
    /// epoch); `now_ms` is the caller's clock, for pruning. Atomic across every process that
    /// shares the ledger: of two redemptions of one id, exactly one is [`Redemption::First`].
    ///
    /// # Errors
    /// [`LedgerError`] when the ledger cannot be read or written, is full, or `id` is not a
    /// call id; the caller must then refuse the `requestState` (fail closed).
    fn redeem<'a>(
        &'a self,
        id: &'a str,
        expires_ms: u64,
        now_ms: u64,
    ) -> LedgerFuture<'a, Redemption>;

    /// The key that MACs the `requestState`s this ledger redeems, when the ledger keeps one
    /// for every gateway that shares it (PostgreSQL: `toolward_keys`); `None`: the state
    /// folder's `request-state-key` (the state folder's ledger).
    fn key(&self) -> Option<crate::state_dir::Key> {
        None
    }
}

/// The state folder's ledger: `<state_dir>/request-states/<call id>`, each file holding its
/// expiry in decimal milliseconds, mode `0600`, in a folder of mode `0700`.
pub struct StateDirLedger {
    dir: Dir,
    path: PathBuf,
    pruned: Mutex<Option<(Instant, usize)>>,
}

impl fmt::Debug for StateDirLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateDirLedger")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl StateDirLedger {
    /// Opens (creating it `0700`) the ledger's folder in `state`.
    ///
    /// # Errors
    /// [`LedgerError::State`] naming the folder.
    pub fn open(state: &StateDir) -> Result<StateDirLedger, LedgerError> {
        Ok(StateDirLedger {
            dir: state.subdir(REQUEST_STATES_DIR)?,
            path: state.path().join(REQUEST_STATES_DIR),
            pruned: Mutex::new(None),
        })
    }

    fn io(&self, action: &'static str, name: &str, source: std::io::Error) -> LedgerError {
        LedgerError::Io {
            action,
            path: self.path.join(name),
            source,
        }
    }

    /// Removes the entries whose expiry is before `now_ms`; the count of those left.
    fn prune(&self, now_ms: u64) -> Result<usize, LedgerError> {
        let entries = self
            .dir
            .entries()
            .map_err(|e| self.io("be listed", "", e))?;
        let mut left = 0usize;
        for entry in entries {
            let entry = entry.map_err(|e| self.io("be listed", "", e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let mut text = String::new();
            let read = self.dir.open(&name).and_then(|file| {
                file.take(MAX_ENTRY_BYTES)
                    .read_to_string(&mut text)
                    .map(|_| ())
            });
            // An entry being written (empty yet) or unreadable is kept: removing it could
            // let its id be redeemed again.
            let expired = read.is_ok()
                && text
                    .trim()
                    .parse::<u64>()
                    .is_ok_and(|expires| expires < now_ms);
            if expired {
                match self.dir.remove_file(&name) {
                    Ok(()) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(self.io("remove an expired entry", &name, e)),
                }
            }
            left += 1;
        }
        Ok(left)
    }

    /// The count of entries, pruning first when [`PRUNE_INTERVAL`] has passed.
    fn count(&self, now_ms: u64) -> Result<usize, LedgerError> {
        let mut pruned = self
            .pruned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match *pruned {
            Some((at, count)) if at.elapsed() < PRUNE_INTERVAL => Ok(count),
            _ => {
                let count = self.prune(now_ms)?;
                *pruned = Some((Instant::now(), count));
                Ok(count)
            }
        }
    }

    fn added(&self) {
        let mut pruned = self
            .pruned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, count)) = pruned.as_mut() {
            *count += 1;
        }
    }
}

impl RequestStateLedger for StateDirLedger {
    fn redeem<'a>(
        &'a self,
        id: &'a str,
        expires_ms: u64,
        now_ms: u64,
    ) -> LedgerFuture<'a, Redemption> {
        // A few small file operations: done on the caller's worker, as before the trait was
        // async.
        Box::pin(std::future::ready(self.redeem_now(id, expires_ms, now_ms)))
    }
}

impl StateDirLedger {
    fn redeem_now(
        &self,
        id: &str,
        expires_ms: u64,
        now_ms: u64,
    ) -> Result<Redemption, LedgerError> {
        check_entry_id(id)?;
        let count = self.count(now_ms)?;
        if count >= MAX_LEDGER_ENTRIES {
            return Err(LedgerError::Full {
                path: self.path.clone(),
                count,
                limit: MAX_LEDGER_ENTRIES,
            });
        }
        let mut create = OpenOptions::new();
        create.write(true).create_new(true).mode(0o600);
        let mut file = match self.dir.open_with(id, &create) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Ok(Redemption::AlreadyUsed);
            }
            Err(e) => return Err(self.io("record a redemption", id, e)),
        };
        self.added();
        // The entry exists from here on, so the id is used whatever follows; the expiry only
        // tells a later prune when it may go.
        file.write_all(expires_ms.to_string().as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| self.io("record a redemption", id, e))?;
        Ok(Redemption::First)
    }
}

/// The ledger of a toolward without a state folder ([`crate::StoreConfig::Memory`]): the
/// redeemed call ids in this process's memory, and a key of its own made at random when it
/// is made. Only this process sees it, which is all there is to see: its `requestState`s
/// are MACed with that key, so no other process could issue one it accepts.
pub struct MemoryLedger {
    key: crate::state_dir::Key,
    /// Redeemed call ids and their expiry (milliseconds since the Unix epoch).
    used: Mutex<std::collections::HashMap<String, u64>>,
}

impl fmt::Debug for MemoryLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLedger").finish_non_exhaustive()
    }
}

impl MemoryLedger {
    /// An empty ledger with a new random key.
    ///
    /// # Errors
    /// [`LedgerError::Io`] when the system has no random bytes to give.
    pub fn new() -> Result<MemoryLedger, LedgerError> {
        let mut bytes = [0u8; crate::state_dir::KEY_BYTES];
        getrandom::fill(&mut bytes).map_err(|e| LedgerError::Io {
            action: "make its key",
            path: PathBuf::from(crate::text::IN_MEMORY),
            source: std::io::Error::other(e.to_string()),
        })?;
        Ok(MemoryLedger {
            key: crate::state_dir::Key::from_bytes(bytes),
            used: Mutex::new(std::collections::HashMap::new()),
        })
    }

    fn redeem_now(
        &self,
        id: &str,
        expires_ms: u64,
        now_ms: u64,
    ) -> Result<Redemption, LedgerError> {
        check_entry_id(id)?;
        let mut used = self.used.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if used.contains_key(id) {
            return Ok(Redemption::AlreadyUsed);
        }
        if used.len() >= MAX_LEDGER_ENTRIES {
            // An entry past its expiry guards nothing: its `requestState` is refused by then.
            used.retain(|_, expires| *expires >= now_ms);
            if used.len() >= MAX_LEDGER_ENTRIES {
                return Err(LedgerError::Full {
                    path: PathBuf::from(crate::text::IN_MEMORY),
                    count: used.len(),
                    limit: MAX_LEDGER_ENTRIES,
                });
            }
        }
        used.insert(id.to_owned(), expires_ms);
        Ok(Redemption::First)
    }
}

impl RequestStateLedger for MemoryLedger {
    fn redeem<'a>(
        &'a self,
        id: &'a str,
        expires_ms: u64,
        now_ms: u64,
    ) -> LedgerFuture<'a, Redemption> {
        Box::pin(std::future::ready(self.redeem_now(id, expires_ms, now_ms)))
    }

    fn key(&self) -> Option<crate::state_dir::Key> {
        Some(self.key.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> (tempfile::TempDir, StateDir, StateDirLedger) {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("state")).unwrap();
        let ledger = StateDirLedger::open(&state).unwrap();
        (tmp, state, ledger)
    }

    #[tokio::test]
    async fn in_memory_an_id_is_redeemed_once_under_a_key_of_its_own_and_a_full_ledger_sheds_only_expired_entries()
     {
        let ledger = MemoryLedger::new().unwrap();
        let other = MemoryLedger::new().unwrap();
        let mac = |ledger: &MemoryLedger| ledger.key().unwrap().mac_hex(&[b"state"]);
        assert_eq!(mac(&ledger), mac(&ledger), "one key for the ledger's life");
        assert_ne!(mac(&ledger), mac(&other), "each makes its own key");
        assert_eq!(ledger.redeem("01A", 2_000, 1_000).await.unwrap(), Redemption::First);
        assert_eq!(ledger.redeem("01A", 2_000, 1_000).await.unwrap(), Redemption::AlreadyUsed);
        assert_eq!(other.redeem("01A", 2_000, 1_000).await.unwrap(), Redemption::First);
        assert!(matches!(
            ledger.redeem("../x", 2_000, 1_000).await,
            Err(LedgerError::InvalidId { .. })
        ));
        // Full of unexpired entries: refused, and the replay of one is still a replay.
        for i in 1..MAX_LEDGER_ENTRIES {
            ledger.redeem(&format!("id{i}"), 5_000, 1_000).await.unwrap();
        }
        assert!(matches!(
            ledger.redeem("late", 5_000, 1_000).await,
            Err(LedgerError::Full { .. })
        ));
        // Once `01A` has expired (its expiry 2,000), its room is taken by a new id; the
        // unexpired ones are kept.
        assert_eq!(ledger.redeem("late", 9_000, 3_000).await.unwrap(), Redemption::First);
        assert_eq!(ledger.redeem("id7", 5_000, 3_000).await.unwrap(), Redemption::AlreadyUsed);
    }

    #[test]
    fn an_id_is_redeemed_once_and_every_later_redemption_is_a_replay() {
        let (_tmp, _state, ledger) = ledger();
        let id = "01J0000000000000000000000A";
        assert_eq!(
            ledger.redeem_now(id, 2_000, 1_000).unwrap(),
            Redemption::First
        );
        assert_eq!(
            ledger.redeem_now(id, 2_000, 1_000).unwrap(),
            Redemption::AlreadyUsed
        );
        assert_eq!(
            ledger
                .redeem_now("01J0000000000000000000000B", 2_000, 1_000)
                .unwrap(),
            Redemption::First
        );
    }

    #[test]
    fn two_ledgers_on_one_state_folder_share_their_redemptions() {
        let (_tmp, state, ledger) = ledger();
        let other = StateDirLedger::open(&state).unwrap();
        let id = "01J0000000000000000000000C";
        assert_eq!(
            other.redeem_now(id, 2_000, 1_000).unwrap(),
            Redemption::First
        );
        assert_eq!(
            ledger.redeem_now(id, 2_000, 1_000).unwrap(),
            Redemption::AlreadyUsed
        );
    }

    #[test]
    fn of_many_redemptions_at_once_exactly_one_is_first() {
        let (_tmp, state, _ledger) = ledger();
        let state = std::sync::Arc::new(state);
        let firsts: usize = (0..8)
            .map(|_| {
                let state = std::sync::Arc::clone(&state);
                std::thread::spawn(move || {
                    let ledger = StateDirLedger::open(&state).unwrap();
                    ledger
                        .redeem_now("01J0000000000000000000000D", 2_000, 1_000)
                        .unwrap()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|thread| thread.join().unwrap())
            .filter(|redemption| *redemption == Redemption::First)
            .count();
        assert_eq!(firsts, 1);
    }

    #[test]
    fn expired_entries_are_pruned_and_unexpired_ones_kept() {
        let (_tmp, state, ledger) = ledger();
        ledger
            .redeem_now("01J0000000000000000000000E", 1_500, 1_000)
            .unwrap();
        ledger
            .redeem_now("01J0000000000000000000000F", 9_000, 1_000)
            .unwrap();
        assert_eq!(ledger.prune(2_000).unwrap(), 1);
        let left: Vec<String> = std::fs::read_dir(state.path().join(REQUEST_STATES_DIR))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, vec![String::from("01J0000000000000000000000F")]);
    }

    #[test]
    fn an_id_that_could_name_another_path_is_refused() {
        let (_tmp, _state, ledger) = ledger();
        for id in ["../escape", "", "a/b", &"A".repeat(MAX_ENTRY_ID_CHARS + 1)] {
            let error = ledger.redeem_now(id, 2_000, 1_000).unwrap_err();
            assert!(matches!(error, LedgerError::InvalidId { .. }), "{error}");
        }
    }
}
