//! The fact counters of the state folder: one file, `<state_dir>/facts/counters`, shared by
//! every process on the machine that uses the state folder, of a fixed size
//! ([`COUNTERS_FILE_BYTES`]), updated under an exclusive `flock` on the file.
//!
//! # Layout
//!
//! A header ([`HEADER_BYTES`]: the magic `toolward-facts-1` and the slot counts), then an
//! index of slots (per slot: the first 16 bytes of SHA-256 over the scope and key, and the
//! time the slot was last touched, milliseconds since the Unix epoch, little-endian), then the
//! slots' counters. A slot holds four series of [`BUCKETS`] buckets, `forwarded` and `held`
//! for the minute and for the hour; a bucket is a time stamp (the second, or the minute, since
//! the Unix epoch) and a count. The file is created at its full size (sparse: slots never
//! used take no disk).
//!
//! # Sliding windows
//!
//! The `minute` window is the current second and the 59 seconds before it; the `hour`
//! window is the current minute and the 59 minutes before it. So a call stops counting
//! between 59 and 60 seconds (between 59 and 60 minutes) after it was counted. A bucket
//! stamped after the current time (the clock stepped back) keeps counting until the clock
//! passes it by the window: a step back can only make counts higher.
//!
//! # Bounds
//!
//! [`NAMED_SLOTS`] slots for tools, servers and principals, and [`SESSION_SLOTS`] for
//! sessions, apart so that sessions (one per HTTP connection, as many as clients open)
//! can never push out a tool's counts. A key is looked up among [`PROBE_SLOTS`] slots from its
//! hash; a new key takes the first of them that is unused or untouched for over an hour (its
//! counts have all left their windows), else the one touched longest ago, whose counts are
//! lost: a key that comes back after that starts from zero. For tools, servers and principals
//! this takes more than [`PROBE_SLOTS`] of them active within the hour in one probe run.
//!
//! # Durability
//!
//! Nothing is synced: counts are recent history, rebuilt by the calls of the next hour. A
//! crash of a process loses nothing written; a crash of the machine may lose the counts the
//! kernel had not written back.

use std::fs::{File, TryLockError};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use cap_std::fs::{OpenOptions, OpenOptionsExt};
use sha2::{Digest, Sha256};

use super::{
    Change, FactError, FactFuture, FactKeys, FactStore, Facts, HOUR_MS, MINUTE_MS, Outcome, Scope,
    Window,
};
use crate::state_dir::{FILE_MODE, check_private};
use crate::state_dir::{StateDir, StateError};

/// The folder of the counters file inside the state folder.
pub const FACTS_DIR: &str = "facts";
/// The counters file's name inside [`FACTS_DIR`].
pub const COUNTERS_FILE: &str = "counters";
/// The first bytes of the counters file: its format and version.
pub const MAGIC: [u8; 16] = *b"toolward-facts-1";
/// Bytes before the index: [`MAGIC`], the two slot counts (`u32`, little-endian), zeros.
pub const HEADER_BYTES: u64 = 64;
/// Slots for the keys of tools, servers and principals (all processes and configs sharing
/// the state folder together).
pub const NAMED_SLOTS: u32 = 2048;
/// Slots for the keys of sessions.
pub const SESSION_SLOTS: u32 = 2048;
/// Slots a key is looked up among (from the slot its hash names, wrapping in its region).
pub const PROBE_SLOTS: u32 = 32;
/// Buckets per series: 60 seconds for the minute, 60 minutes for the hour.
pub const BUCKETS: usize = 60;
/// Bytes of one index entry: 16 bytes of the key's hash, the last touch (`u64`).
const INDEX_ENTRY_BYTES: u64 = 24;
/// Bytes of one bucket: a stamp (`u32`) and a count (`u32`).
const BUCKET_BYTES: usize = 8;
/// Series per slot: forwarded per minute, forwarded per hour, held per minute, held per hour.
const SERIES: usize = 4;
/// Bytes of one slot's counters.
const SLOT_BYTES: usize = SERIES * BUCKETS * BUCKET_BYTES;
/// The size of the counters file with the default slot counts, bytes (about 8 MiB; sparse).
pub const COUNTERS_FILE_BYTES: u64 = Layout::DEFAULT.file_bytes();

/// How many slots a counters file has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    named: u32,
    session: u32,
}

impl Layout {
    const DEFAULT: Layout = Layout {
        named: NAMED_SLOTS,
        session: SESSION_SLOTS,
    };

    const fn slots(self) -> u64 {
        self.named as u64 + self.session as u64
    }

    const fn file_bytes(self) -> u64 {
        HEADER_BYTES + self.slots() * (INDEX_ENTRY_BYTES + SLOT_BYTES as u64)
    }

    /// The first slot and the number of slots of the region of `scope`.
    fn region(self, scope: Scope) -> (u64, u64) {
        match scope {
            Scope::Session => (u64::from(self.named), u64::from(self.session)),
            Scope::Tool | Scope::Server | Scope::Principal => (0, u64::from(self.named)),
        }
    }

    fn header(self) -> [u8; HEADER_BYTES as usize] {
        let mut header = [0u8; HEADER_BYTES as usize];
        header[..16].copy_from_slice(&MAGIC);
        header[16..20].copy_from_slice(&self.named.to_le_bytes());
        header[20..24].copy_from_slice(&self.session.to_le_bytes());
        header
    }
}

/// The counters of the state folder, open. Cheap to share (`Arc` it); every process and
/// every call takes the file's lock for each step, so counts are exact across processes.
#[derive(Debug)]
pub struct StateFacts {
    path: PathBuf,
    layout: Layout,
    /// One open file for the process: `flock` excludes other processes (and other opens),
    /// the mutex the threads of this one, which share the open file and so its lock.
    file: Arc<Mutex<File>>,
}

impl StateFacts {
    /// Opens (creating on first use, mode `0600`, in a `0700` folder) the counters file of
    /// `state`.
    ///
    /// # Errors
    /// [`FactError`] naming the file: it cannot be created or opened, is a symlink or has
    /// the wrong owner or mode, or is not a counters file of this version and size.
    pub fn open(state: &StateDir) -> Result<StateFacts, FactError> {
        StateFacts::open_with(state, Layout::DEFAULT)
    }

    fn open_with(state: &StateDir, layout: Layout) -> Result<StateFacts, FactError> {
        let dir = state.subdir(FACTS_DIR)?;
        let path = state.path().join(FACTS_DIR).join(COUNTERS_FILE);
        let io = |action| {
            let path = path.clone();
            move |source| FactError::Io {
                action,
                path,
                source,
            }
        };
        let mut options = OpenOptions::new();
        options
            .read(true)
            .write(true)
            .create(true)
            .mode(FILE_MODE)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
        let file = match dir.open_with(COUNTERS_FILE, &options) {
            Ok(file) => file,
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                return Err(FactError::State(StateError::Kind {
                    path,
                    expected: "regular file",
                }));
            }
            Err(e) => return Err(io("open")(e)),
        };
        let meta = file.metadata().map_err(io("read"))?;
        if !meta.is_file() {
            return Err(FactError::State(StateError::Kind {
                path,
                expected: "regular file",
            }));
        }
        check_private(&meta, &path)?;
        let file = file.into_std();
        file.lock().map_err(io("lock"))?;
        let _held = Unlock(&file);
        let len = file.metadata().map_err(io("read"))?.len();
        let want = layout.file_bytes();
        if len == 0 {
            // The header last: a process that finds the size without the magic refuses the
            // file rather than count in one half made.
            file.set_len(want).map_err(io("write"))?;
            file.write_all_at(&layout.header(), 0)
                .map_err(io("write"))?;
        } else {
            let mut header = [0u8; HEADER_BYTES as usize];
            if len == want {
                file.read_exact_at(&mut header, 0).map_err(io("read"))?;
            }
            if header != layout.header() {
                return Err(FactError::Format {
                    path,
                    reason: format!(
                        "it is not a counters file of this version ({len} bytes, expected {want} bytes starting `toolward-facts-1`)"
                    ),
                });
            }
        }
        drop(_held);
        Ok(StateFacts {
            path,
            layout,
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Counters of this process only, in an anonymous file in memory (`memfd_create`): the
    /// same table, bounds and windows as the state folder's, no file on any file system. For
    /// a toolward started without a state folder ([`crate::config::StoreConfig::Memory`]).
    ///
    /// # Errors
    /// [`FactError::Io`] when the kernel gives no anonymous file (out of memory).
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    pub fn in_memory() -> Result<StateFacts, FactError> {
        let layout = Layout::DEFAULT;
        let path = PathBuf::from(crate::text::IN_MEMORY);
        let io = |action| {
            let path = path.clone();
            move |source: std::io::Error| FactError::Io {
                action,
                path,
                source,
            }
        };
        let fd = rustix::fs::memfd_create("toolward-facts", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| io("open")(e.into()))?;
        let file = File::from(fd);
        file.set_len(layout.file_bytes()).map_err(io("write"))?;
        file.write_all_at(&layout.header(), 0)
            .map_err(io("write"))?;
        Ok(StateFacts {
            path,
            layout,
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// The counters file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `op` with the file locked against every other thread and process: on this thread
    /// when the lock is free (the common case, microseconds), else on the blocking pool,
    /// which waits for it.
    async fn locked<T, F>(&self, op: F) -> Result<T, FactError>
    where
        T: Send + 'static,
        F: FnOnce(&Table<'_>) -> Result<T, FactError> + Send + 'static,
    {
        if let Ok(file) = self.file.try_lock() {
            match File::try_lock(&file) {
                Ok(()) => {
                    let _held = Unlock(&file);
                    return op(&self.table(&file));
                }
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(source)) => return Err(self.io("lock", source)),
            }
        }
        let shared = Arc::clone(&self.file);
        let (path, layout) = (self.path.clone(), self.layout);
        tokio::task::spawn_blocking(move || {
            let file = shared.lock().unwrap_or_else(PoisonError::into_inner);
            file.lock().map_err(|source| FactError::Io {
                action: "lock",
                path: path.clone(),
                source,
            })?;
            let _held = Unlock(&file);
            op(&Table {
                file: &file,
                path: &path,
                layout,
            })
        })
        .await
        .map_err(|e| FactError::Stopped(e.to_string()))?
    }

    fn table<'a>(&'a self, file: &'a File) -> Table<'a> {
        Table {
            file,
            path: &self.path,
            layout: self.layout,
        }
    }

    fn io(&self, action: &'static str, source: std::io::Error) -> FactError {
        FactError::Io {
            action,
            path: self.path.clone(),
            source,
        }
    }
}

impl FactStore for StateFacts {
    fn reserve<'a>(&'a self, keys: &'a FactKeys, now_ms: u64) -> FactFuture<'a, Facts> {
        let keys = keys.clone();
        Box::pin(self.locked(move |table| table.reserve(&keys, now_ms)))
    }

    fn record<'a>(&'a self, keys: &'a FactKeys, at_ms: u64, change: Change) -> FactFuture<'a, ()> {
        let keys = keys.clone();
        Box::pin(self.locked(move |table| table.record(&keys, at_ms, change)))
    }
}

/// Lets go of the file's `flock` when dropped (closing is not letting go: the file stays
/// open for the process).
struct Unlock<'a>(&'a File);

impl Drop for Unlock<'_> {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// The counters file, locked.
struct Table<'a> {
    file: &'a File,
    path: &'a Path,
    layout: Layout,
}

/// One slot's counters: `[series][bucket] = (stamp, count)`.
type Slot = [[(u32, u32); BUCKETS]; SERIES];

/// The series of `outcome` over `window`, and the length of its buckets in milliseconds.
fn series(outcome: Outcome, window: Window) -> (usize, u64) {
    let unit = match window {
        Window::Minute => 1_000,
        Window::Hour => MINUTE_MS,
    };
    let index = match (outcome, window) {
        (Outcome::Forwarded, Window::Minute) => 0,
        (Outcome::Forwarded, Window::Hour) => 1,
        (Outcome::Held, Window::Minute) => 2,
        (Outcome::Held, Window::Hour) => 3,
    };
    (index, unit)
}

/// The count of `slot`'s series `index` (buckets of `unit` ms) in the window ending at
/// `now_ms`: buckets stamped within the last [`BUCKETS`] units, or later.
fn count(slot: &Slot, index: usize, unit: u64, now_ms: u64) -> u64 {
    let now = now_ms / unit;
    slot.get(index)
        .map(|buckets| {
            buckets
                .iter()
                .filter(|(stamp, _)| u64::from(*stamp) + BUCKETS as u64 > now)
                .map(|(_, count)| u64::from(*count))
                .sum()
        })
        .unwrap_or(0)
}

/// Adds one to (`up`) or takes one from the bucket of `at_ms` in `slot`'s series `index`.
/// A bucket that holds an older stamp starts again from zero for an addition; a taking
/// from a bucket that no longer holds `at_ms` does nothing (that count has left its window).
fn bump(slot: &mut Slot, index: usize, unit: u64, at_ms: u64, up: bool) {
    let at = u32::try_from(at_ms / unit).unwrap_or(u32::MAX);
    let Some(bucket) = slot
        .get_mut(index)
        .and_then(|buckets| buckets.get_mut(at as usize % BUCKETS))
    else {
        return;
    };
    if bucket.0 == at {
        bucket.1 = if up {
            bucket.1.saturating_add(1)
        } else {
            bucket.1.saturating_sub(1)
        };
    } else if up && bucket.0 < at {
        *bucket = (at, 1);
    }
}

fn bump_outcome(slot: &mut Slot, outcome: Outcome, at_ms: u64, up: bool) {
    for window in Window::ALL {
        let (index, unit) = series(outcome, window);
        bump(slot, index, unit, at_ms, up);
    }
}

fn key_hash(scope: Scope, key: &str) -> [u8; 16] {
    let mut hasher = Sha256::new();
    hasher.update(scope.as_str().as_bytes());
    hasher.update([0u8]);
    hasher.update(key.as_bytes());
    let digest = hasher.finalize();
    let mut hash = [0u8; 16];
    hash.copy_from_slice(&digest[..16]);
    hash
}

impl Table<'_> {
    fn io(&self, action: &'static str) -> impl FnOnce(std::io::Error) -> FactError + '_ {
        move |source| FactError::Io {
            action,
            path: self.path.to_owned(),
            source,
        }
    }

    fn index_offset(&self, slot: u64) -> u64 {
        HEADER_BYTES + slot * INDEX_ENTRY_BYTES
    }

    fn slot_offset(&self, slot: u64) -> u64 {
        HEADER_BYTES + self.layout.slots() * INDEX_ENTRY_BYTES + slot * SLOT_BYTES as u64
    }

    /// The slot of `key`, claimed for it (its counters zeroed) when it has none, and the
    /// slot's last touch, read with its index entry so that [`Table::write_slot`] need not
    /// read it again.
    fn slot_of(&self, scope: Scope, key: &str, now_ms: u64) -> Result<(u64, u64), FactError> {
        let hash = key_hash(scope, key);
        let (first, len) = self.layout.region(scope);
        let probe = u64::from(PROBE_SLOTS).min(len);
        let mut home = [0u8; 8];
        home.copy_from_slice(&hash[..8]);
        let home = u64::from_le_bytes(home) % len.max(1);
        let mut best: Option<(u64, u64)> = None;
        for step in 0..probe {
            let slot = first + (home + step) % len;
            let mut entry = [0u8; INDEX_ENTRY_BYTES as usize];
            self.file
                .read_exact_at(&mut entry, self.index_offset(slot))
                .map_err(self.io("read"))?;
            let mut last = [0u8; 8];
            last.copy_from_slice(&entry[16..]);
            let last = u64::from_le_bytes(last);
            if entry[..16] == hash {
                return Ok((slot, last));
            }
            let unused = entry[..16].iter().all(|b| *b == 0);
            // Untouched for over an hour and a minute: every count has left its window.
            let expired = now_ms.saturating_sub(last) > HOUR_MS + MINUTE_MS;
            let rank = if unused || expired { 0 } else { last.max(1) };
            if best.is_none_or(|(_, best_rank)| rank < best_rank) {
                best = Some((slot, rank));
            }
        }
        let Some((slot, _)) = best else {
            return Err(FactError::Format {
                path: self.path.to_owned(),
                reason: String::from("it has no slots"),
            });
        };
        self.file
            .write_all_at(&[0u8; SLOT_BYTES], self.slot_offset(slot))
            .map_err(self.io("write"))?;
        let mut entry = [0u8; INDEX_ENTRY_BYTES as usize];
        entry[..16].copy_from_slice(&hash);
        entry[16..].copy_from_slice(&now_ms.to_le_bytes());
        self.file
            .write_all_at(&entry, self.index_offset(slot))
            .map_err(self.io("write"))?;
        Ok((slot, now_ms))
    }

    fn read_slot(&self, slot: u64) -> Result<Slot, FactError> {
        let mut bytes = [0u8; SLOT_BYTES];
        self.file
            .read_exact_at(&mut bytes, self.slot_offset(slot))
            .map_err(self.io("read"))?;
        let mut counters: Slot = [[(0, 0); BUCKETS]; SERIES];
        for (i, chunk) in bytes.chunks_exact(BUCKET_BYTES).enumerate() {
            let word = |at: usize| {
                let mut word = [0u8; 4];
                word.copy_from_slice(&chunk[at..at + 4]);
                u32::from_le_bytes(word)
            };
            if let Some(bucket) = counters
                .get_mut(i / BUCKETS)
                .and_then(|series| series.get_mut(i % BUCKETS))
            {
                *bucket = (word(0), word(4));
            }
        }
        Ok(counters)
    }

    /// Writes `counters` to `slot` and, when `at_ms` is later than its last touch `last`,
    /// `at_ms` as its last touch.
    fn write_slot(
        &self,
        slot: u64,
        counters: &Slot,
        at_ms: u64,
        last: u64,
    ) -> Result<(), FactError> {
        let mut bytes = [0u8; SLOT_BYTES];
        for (chunk, (stamp, count)) in bytes
            .chunks_exact_mut(BUCKET_BYTES)
            .zip(counters.iter().flatten())
        {
            chunk[..4].copy_from_slice(&stamp.to_le_bytes());
            chunk[4..].copy_from_slice(&count.to_le_bytes());
        }
        self.file
            .write_all_at(&bytes, self.slot_offset(slot))
            .map_err(self.io("write"))?;
        if at_ms <= last {
            return Ok(());
        }
        self.file
            .write_all_at(&at_ms.to_le_bytes(), self.index_offset(slot) + 16)
            .map_err(self.io("write"))
    }

    fn reserve(&self, keys: &FactKeys, now_ms: u64) -> Result<Facts, FactError> {
        let mut facts = Facts::default();
        for (scope, key) in keys.iter() {
            let (slot, last) = self.slot_of(scope, key, now_ms)?;
            let mut counters = self.read_slot(slot)?;
            for outcome in Outcome::ALL {
                for window in Window::ALL {
                    let (index, unit) = series(outcome, window);
                    facts.set(
                        scope,
                        outcome,
                        window,
                        count(&counters, index, unit, now_ms),
                    );
                }
            }
            bump_outcome(&mut counters, Outcome::Forwarded, now_ms, true);
            self.write_slot(slot, &counters, now_ms, last)?;
        }
        Ok(facts)
    }

    fn record(&self, keys: &FactKeys, at_ms: u64, change: Change) -> Result<(), FactError> {
        for (scope, key) in keys.iter() {
            let (slot, last) = self.slot_of(scope, key, at_ms)?;
            let mut counters = self.read_slot(slot)?;
            match change {
                Change::Release => bump_outcome(&mut counters, Outcome::Forwarded, at_ms, false),
                Change::Hold => {
                    bump_outcome(&mut counters, Outcome::Forwarded, at_ms, false);
                    bump_outcome(&mut counters, Outcome::Held, at_ms, true);
                }
                Change::Forward => bump_outcome(&mut counters, Outcome::Forwarded, at_ms, true),
            }
            self.write_slot(slot, &counters, at_ms, last)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
