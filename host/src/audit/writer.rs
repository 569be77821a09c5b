//! The writer: records from every thread and every process that writes one log, in one
//! chain, with group commit and a head kept behind what is on disk.
//!
//! **One leader at a time.** A thread that appends puts its records (a *group*: the records
//! of one step of one call) in the log's queue. If no thread of this process is writing, it
//! becomes the leader: it takes the whole queue, takes the exclusive lock on the log file
//! (`flock`, [`File::lock`]), checks that the file at the log's path is still the one it
//! opened and whether another process wrote meanwhile (the byte where this process last saw
//! the records end is no longer room: then it reads forward over the other's records, each
//! checked to chain), writes every queued group in one `pwrite` over the room at the end of
//! the records (see [the room at the end](super#the-room-at-the-end)), syncs when any of
//! them asked for it, writes the head, and lets go of the lock. Groups queued meanwhile are
//! written by the next turn of the same leader, in one write and under one sync (group
//! commit across calls in flight). Threads whose group was covered return without a system
//! call of their own.
//!
//! **The timer.** Records that need not be on disk before an action (a call's result) are
//! written at once but synced by the next sync, or by the log's own thread within
//! [`SYNC_DELAY`] of the write. That thread also writes what a thread queued without waiting
//! ([`AuditLog::write`]) when it could not take the lock without blocking.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use super::head::{AuditHead, HeadFile, HeadProblem};
use super::memory::RecordStream;
use super::{
    AuditError, AuditEvent, AuditKind, AuditRecord, AuditSync, ComponentHashes, GENESIS_PREV,
    MAX_HEAD_LAG_RECORDS, MAX_RECORD_BYTES, NextLine, RECORD_PREFIX, ROOM_BYTES, TAIL_CHUNK_BYTES,
    Tail, content_end, is_room, next_line, now_ms, read_tail, tail_before_room,
};
use crate::canonical::sha256_hex;
use crate::state_dir::StateDir;

/// The longest a record written without a sync waits for one, when no other record's sync
/// covers it first: 100 ms. Bounds what a machine crash can take (see the module docs of
/// [`crate::audit`]), at ten wake-ups a second while records are being written, none when
/// idle.
pub const SYNC_DELAY: Duration = Duration::from_millis(100);

/// Mode of an audit log toolward creates: owner read and write only.
pub const LOG_MODE: u32 = 0o600;

/// An open audit log. Share it (`Arc<AuditLog>`): every method takes `&self`.
///
/// Appending is synchronous: with [`AuditSync::Always`], [`append`](Self::append) waits for
/// `fdatasync`, typically well under a millisecond on SSDs and up to tens of milliseconds on
/// slow disks. From async code, call it from `tokio::task::spawn_blocking` on a busy runtime;
/// [`write`](Self::write) never waits for a sync.
#[derive(Debug)]
pub struct AuditLog {
    shared: Arc<Shared>,
    syncer: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    path: PathBuf,
    sync: AuditSync,
    /// Written with `pwrite` at the end of the records, into the room after them.
    file: File,
    /// Device and inode of `file`, to tell when the path names another file.
    identity: (u64, u64),
    head: Option<HeadFile>,
    state: Mutex<State>,
    /// Threads waiting for their group to be written or synced.
    done: Condvar,
    /// The log's own thread.
    wake: Condvar,
    /// The chain's end: only the leader touches it, with the file lock held.
    chain: Mutex<Chain>,
    /// Subscribers to the records this process makes durable ([`AuditLog::subscribe`]).
    events: RecordStream,
}

/// The end of the chain as this process last saw it.
#[derive(Debug)]
struct Chain {
    next_seq: u64,
    prev: String,
    /// Where the records end: the length of the lines up to and including the last record.
    len: u64,
    /// The file's length: the records, then the room after them.
    size: u64,
}

/// What [`Shared::lead`] makes the turn do beyond writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flush {
    /// Write only.
    Nothing,
    /// Write the head (no sync): the timer with [`AuditSync::None`].
    Head,
    /// `fdatasync`, then write the head.
    Sync,
}

/// How a leader takes the file lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Locking {
    Block,
    /// Give up (and leave the queue to the log's thread) rather than wait.
    Try,
}

/// What a caller waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Nothing: return once the group is queued (or written, when that costs no wait).
    Queued,
    /// The group's `write` done.
    Written,
    /// On disk (with [`AuditSync::None`]: written).
    Durable,
}

#[derive(Debug)]
struct Group {
    ticket: u64,
    events: Vec<AuditEvent>,
    /// Someone waits for its first `seq`.
    report: bool,
}

#[derive(Debug, Default)]
struct State {
    queue: Vec<Group>,
    next_ticket: u64,
    /// Groups with a ticket below this are in the file.
    written: u64,
    /// Groups with a ticket below this are on disk.
    durable: u64,
    /// Groups with a ticket below this have their end in the head file.
    headed: u64,
    /// Groups with a ticket below this must be synced before their writers return.
    want_sync: u64,
    leading: bool,
    /// Threads waiting on `done`.
    waiting: usize,
    /// The log's thread is counting down [`SYNC_DELAY`] (until then it sleeps until woken).
    armed: bool,
    stopping: bool,
    components: Option<ComponentHashes>,
    /// Why the log refuses records; set once, never cleared.
    failed: Option<String>,
    /// The first `seq` of each group someone waits for, or why it was not written.
    results: HashMap<u64, Result<u64, AuditError>>,
    syncs: u64,
    writes: u64,
    head: Option<AuditHead>,
    /// Records written for a subscriber that no sync covers yet ([`AuditSync::Always`]):
    /// sent when one does.
    unsent: Vec<AuditRecord>,
}

impl State {
    /// Written records that no sync (or with [`AuditSync::None`], no head) covers yet.
    fn dirty(&self) -> bool {
        self.written > self.headed
    }
}

/// What one leader's turn did.
struct Turn {
    firsts: Vec<(u64, Result<u64, AuditError>)>,
    /// The records written, in `seq` order, when someone subscribed as the turn began.
    records: Vec<AuditRecord>,
    synced: bool,
    /// Synced, or its head written: nothing written so far waits for the timer.
    flushed: bool,
    head: Option<AuditHead>,
}

/// Why a turn did not write.
enum TurnError {
    /// [`Locking::Try`] found the file lock held by another process: the groups, unwritten.
    Busy(Vec<Group>),
    /// The log failed: nothing more may be written.
    Failed(AuditError),
}

impl From<AuditError> for TurnError {
    fn from(error: AuditError) -> Self {
        TurnError::Failed(error)
    }
}

/// What [`AuditLog::open_inner`] does about a log that does not match its head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mismatch {
    Refuse,
    /// Record it and continue (`toolward audit accept`).
    Accept,
}

impl AuditLog {
    /// Opens (creating it, mode `0600`, if needed) the log at `path` and continues its chain
    /// after the last record, without a head (tests and embedders that anchor the log
    /// otherwise). A torn last line is truncated away and a `recovered` record appended (see
    /// the module docs). Other processes may write the same log at the same time.
    ///
    /// # Errors
    ///
    /// [`AuditError::Owner`] or [`AuditError::Mode`] when the file is not the effective
    /// user's or others may read it; [`AuditError::Corrupt`] when the last complete line is
    /// not a record; [`AuditError::RecordTooLarge`] when the last line is longer than
    /// `MAX_RECORD_BYTES`; [`AuditError::Io`] for the file system.
    pub fn open(path: &Path, sync: AuditSync) -> Result<Self, AuditError> {
        Self::open_inner(path, sync, None, Mismatch::Refuse).map(|(log, _)| log)
    }

    /// As [`open`](Self::open), and checks the log against its head in `state` (written by
    /// every earlier run, see `super::head`): a log whose end does not match is refused. A
    /// log without a head gets one, from its end as it is now.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open); [`AuditError::HeadMismatch`] when the log does not match its
    /// head; [`AuditError::State`] or [`AuditError::HeadCorrupt`] for the head file.
    pub fn open_with_head(
        path: &Path,
        sync: AuditSync,
        state: &StateDir,
    ) -> Result<Self, AuditError> {
        Self::open_inner(path, sync, Some(state), Mismatch::Refuse).map(|(log, _)| log)
    }

    /// Opens the log as [`open_with_head`](Self::open_with_head), but takes a log that does
    /// not match its head as it is: appends a `recovered` record saying how it differed and
    /// makes its end the head. Returns the difference (`None`: it matched).
    ///
    /// # Errors
    ///
    /// As [`open_with_head`](Self::open_with_head), but never [`AuditError::HeadMismatch`].
    pub fn accept(
        path: &Path,
        sync: AuditSync,
        state: &StateDir,
    ) -> Result<(Self, Option<HeadProblem>), AuditError> {
        Self::open_inner(path, sync, Some(state), Mismatch::Accept)
    }

    fn open_inner(
        path: &Path,
        sync: AuditSync,
        state: Option<&StateDir>,
        mismatch: Mismatch,
    ) -> Result<(Self, Option<HeadProblem>), AuditError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(LOG_MODE)
            .open(path)
            .map_err(AuditError::io("open", path))?;
        let meta = file.metadata().map_err(AuditError::io("read", path))?;
        check_private(&meta, path)?;
        let (head_file, stored, stored_end) = match state {
            Some(state) => {
                let (file, head) = HeadFile::open(state, path)?;
                let (head, end) = head.unzip();
                (Some(file), head, end.flatten())
            }
            None => (None, None, None),
        };
        // Other processes write under the same lock: while it is held, the end is stable.
        file.lock().map_err(AuditError::io("lock", path))?;
        let opened = Self::open_locked(
            path,
            sync,
            file,
            (meta.dev(), meta.ino()),
            head_file,
            stored.as_ref().map(|head| (head, stored_end)),
            mismatch,
        );
        let (log, problem) = opened?;
        log.shared
            .file
            .unlock()
            .map_err(AuditError::io("unlock", path))?;
        Ok((log, problem))
    }

    /// The part of an open that runs with the file lock held. `stored`: the head, and where
    /// its record ends in the log when the head says.
    fn open_locked(
        path: &Path,
        sync: AuditSync,
        file: File,
        identity: (u64, u64),
        head_file: Option<HeadFile>,
        stored: Option<(&AuditHead, Option<u64>)>,
        mismatch: Mismatch,
    ) -> Result<(Self, Option<HeadProblem>), AuditError> {
        let size = file.metadata().map_err(AuditError::io("read", path))?.len();
        let resumed = stored
            .and_then(|(head, end)| resume_at_head(&file, head, end?, size, path).transpose())
            .transpose()?;
        let found_by_end = resumed.is_some();
        let (chain, torn, problem) = match resumed {
            // The head's record is where the head says: the records after it are read
            // forward, and whatever follows the last that chains was never synced.
            Some(chain) => {
                let torn = content_end(&file, size, path)?;
                let torn = (torn > chain.len).then_some((torn, Torn::AfterHead));
                (chain, torn, None)
            }
            None => {
                let (tail, end) = tail_before_room(&file, size, path)?;
                let mut chain = chain_after(&tail, path)?;
                chain.size = size;
                let problem = match (&head_file, stored) {
                    (Some(head_file), Some((head, _))) => {
                        check_against_head(&file, &tail, &chain, head, path)?
                            .map(|problem| (problem, head_file.path().to_path_buf(), head.clone()))
                    }
                    _ => None,
                };
                let torn = (tail.complete_len < end).then_some((end, Torn::LastLine));
                (chain, torn, problem)
            }
        };
        let stored = stored.map(|(head, _)| head);
        let mut chain = chain;
        let mut first = Vec::new();
        let mut accepted = None;
        if let Some((problem, head_path, head)) = problem {
            if mismatch == Mismatch::Refuse {
                return Err(AuditError::HeadMismatch {
                    path: path.to_path_buf(),
                    head_path,
                    head,
                    problem,
                });
            }
            tracing::warn!(path = %path.display(), "audit log did not match its head ({problem}); accepted as it is");
            first.push(AuditEvent {
                reason: Some(format!(
                    "accepted by the operator (`toolward audit accept`): the log did not match its head: {problem}"
                )),
                detail: Some(serde_json::json!({
                    "head_records": head.records,
                    "head_hash": head.hash,
                    "log_records": chain.next_seq,
                })),
                ..AuditEvent::new(AuditKind::Recovered)
            });
            accepted = Some(problem);
        } else if head_file.is_some() && stored.is_none() && chain.next_seq > 0 {
            tracing::warn!(path = %path.display(), "audit log had no head; its end is its head from now on");
        }
        if let Some((end, torn)) = torn {
            first.insert(0, cut_torn(&file, &mut chain, end, torn, path)?);
        }

        let shared = Arc::new(Shared {
            path: path.to_path_buf(),
            sync,
            file,
            identity,
            head: head_file,
            state: Mutex::new(State::default()),
            done: Condvar::new(),
            wake: Condvar::new(),
            chain: Mutex::new(chain),
            events: RecordStream::default(),
        });
        // What was found at open goes on disk at once, whatever the sync mode, so a loss is
        // itself on the record; an untouched log gets its head (after a sync: the previous
        // process may have left records no sync covered).
        let needs_head = shared.head.is_some()
            && (!found_by_end
                || stored.is_none_or(|head| {
                    let chain = shared.chain.lock().unwrap_or_else(PoisonError::into_inner);
                    head.records != chain.next_seq || head.hash != chain.prev
                }));
        let flush = if !first.is_empty() || needs_head {
            Flush::Sync
        } else {
            Flush::Nothing
        };
        let groups = if first.is_empty() {
            Vec::new()
        } else {
            vec![Group {
                ticket: 0,
                events: first,
                report: false,
            }]
        };
        let turn = shared
            .turn_locked(groups, flush, None, true)
            .map_err(|error| match error {
                TurnError::Failed(error) => error,
                TurnError::Busy(_) => AuditError::Failed {
                    path: path.to_path_buf(),
                    reason: String::from("the file lock was lost at open"),
                },
            })?;
        {
            let mut state = shared.lock_state();
            if shared.head.is_some() {
                state.head = turn.head.or_else(|| stored.cloned());
            }
            if !turn.firsts.is_empty() {
                state.next_ticket = 1;
                state.written = 1;
                state.durable = 1;
                state.headed = 1;
                state.writes = 1;
            }
        }
        let thread = Arc::clone(&shared);
        let syncer = std::thread::Builder::new()
            .name(String::from("toolward-audit"))
            .spawn(move || thread.run_timer())
            .map_err(|source| AuditError::Io {
                action: "start the sync thread of",
                path: path.to_path_buf(),
                source,
            })?;
        Ok((
            AuditLog {
                shared,
                syncer: Some(syncer),
            },
            accepted,
        ))
    }

    /// The log file's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// The sync mode the log was opened with.
    #[must_use]
    pub fn sync_mode(&self) -> AuditSync {
        self.shared.sync
    }

    /// The head last written (the log's end as last known on disk), when the log has one
    /// ([`open_with_head`](Self::open_with_head)). Print it at start so it can be kept
    /// elsewhere.
    #[must_use]
    pub fn head(&self) -> Option<AuditHead> {
        self.shared.lock_state().head.clone()
    }

    /// The head file's path, when the log has one.
    #[must_use]
    pub fn head_path(&self) -> Option<&Path> {
        self.shared.head.as_ref().map(HeadFile::path)
    }

    /// The `seq` the next record will get, as this process last saw the end (another process
    /// may append first).
    #[must_use]
    pub fn next_seq(&self) -> u64 {
        self.shared
            .chain
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next_seq
    }

    /// Sets the component hashes stamped on every later record whose
    /// [`components`](AuditEvent::components) is `None` (DESIGN: the SHA-256 of each component
    /// is in every audit record).
    pub fn set_components(&self, components: ComponentHashes) {
        self.shared.lock_state().components = Some(components);
    }

    /// Appends one record and returns its `seq`. With [`AuditSync::Always`] the record is on
    /// disk when this returns.
    ///
    /// # Errors
    ///
    /// [`AuditError::Io`] when writing or syncing fails (and from then on
    /// [`AuditError::Failed`]); [`AuditError::Replaced`] or [`AuditError::CutShort`] when the
    /// file at the log's path is no longer the log it wrote; [`AuditError::RecordTooLarge`]
    /// when the line would exceed `MAX_RECORD_BYTES`. On the call path an error here must
    /// refuse the call: an action that could not be recorded does not happen.
    pub fn append(&self, event: AuditEvent) -> Result<u64, AuditError> {
        let (first, _) = self.shared.submit(vec![event], Need::Durable)?;
        Ok(first)
    }

    /// Appends several records with one write and (with [`AuditSync::Always`]) one sync, and
    /// returns the `seq` of the last one (`None` when `events` is empty). Use it for the
    /// records of one step, such as a call's `call-received` and `decision`, or the per-tool
    /// records of a load.
    ///
    /// # Errors
    ///
    /// As [`append`](Self::append); no record of the batch is written when one is too large.
    pub fn append_batch(
        &self,
        events: impl IntoIterator<Item = AuditEvent>,
    ) -> Result<Option<u64>, AuditError> {
        let events: Vec<AuditEvent> = events.into_iter().collect();
        if events.is_empty() {
            return Ok(None);
        }
        let (first, count) = self.shared.submit(events, Need::Durable)?;
        Ok(count.checked_sub(1).map(|last| first + last))
    }

    /// Writes `events` (one group, in one `write`) without waiting for a sync: the next sync,
    /// or the log's thread within `SYNC_DELAY`, puts them on disk. Never waits for a lock
    /// held by another thread or process: then the group is queued and the one holding it (or
    /// the log's thread) writes it. For records no action waits for (a result, a refusal
    /// without a decision, a cancellation).
    ///
    /// # Errors
    ///
    /// [`AuditError::Failed`] when the log already refuses records; a failure of this group's
    /// own write is logged (`tracing`), since nobody waits for it.
    pub fn write(&self, events: impl IntoIterator<Item = AuditEvent>) -> Result<(), AuditError> {
        let events: Vec<AuditEvent> = events.into_iter().collect();
        if events.is_empty() {
            return Ok(());
        }
        self.shared.submit(events, Need::Queued).map(|_| ())
    }

    /// Writes `events` as [`write`](Self::write) does, but waits for the `write` itself
    /// (never for a sync), and returns the first `seq`.
    ///
    /// # Errors
    ///
    /// As [`append`](Self::append).
    pub fn write_now(
        &self,
        events: impl IntoIterator<Item = AuditEvent>,
    ) -> Result<u64, AuditError> {
        let events: Vec<AuditEvent> = events.into_iter().collect();
        self.shared
            .submit(events, Need::Written)
            .map(|(first, _)| first)
    }

    /// The records this process makes durable from now on, in `seq` order: written (with
    /// [`AuditSync::None`]) or synced (with [`AuditSync::Always`]). Records other processes
    /// append to the same log are not sent; read the file for those. A receiver that falls
    /// more than [`AUDIT_EVENTS_CAPACITY`](super::AUDIT_EVENTS_CAPACITY) records behind is told how many it missed.
    pub fn subscribe(&self) -> broadcast::Receiver<AuditRecord> {
        self.shared.events.subscribe()
    }

    /// How many `fdatasync` calls the log has made so far; beside the records written, it
    /// shows how much group commit saved.
    #[must_use]
    pub fn syncs(&self) -> u64 {
        self.shared.lock_state().syncs
    }

    /// How many `write` calls the log has made so far.
    #[must_use]
    pub fn writes(&self) -> u64 {
        self.shared.lock_state().writes
    }

    /// Puts every record written so far on disk (`fdatasync`) and writes the head, whatever
    /// the sync mode.
    ///
    /// # Errors
    ///
    /// [`AuditError::Io`] when syncing fails.
    pub fn sync(&self) -> Result<(), AuditError> {
        self.shared.flush_all()
    }
}

impl Drop for AuditLog {
    /// Writes what is queued, syncs and writes the head, and ends the log's thread.
    fn drop(&mut self) {
        {
            let mut state = self.shared.lock_state();
            state.stopping = true;
        }
        self.shared.wake.notify_all();
        if let Some(thread) = self.syncer.take() {
            let _ = thread.join();
        }
        if let Err(error) = self.shared.flush_all() {
            tracing::error!(path = %self.shared.path.display(), "cannot put the audit log on disk at close: {error}");
        }
    }
}

impl Shared {
    /// Waits, counted in `waiting`, until a leader signals `done`.
    fn wait_done<'a>(&'a self, mut state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        state.waiting += 1;
        state = self
            .done
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner);
        state.waiting -= 1;
        state
    }

    /// Sends a turn's `records` to the subscribers once they are durable: at once with
    /// [`AuditSync::None`] (written is all it promises), else when a sync covers them
    /// (`synced`, this turn's or a later one's). Called by the leader with the state locked,
    /// so subscribers see `seq` order.
    fn publish(&self, state: &mut State, records: Vec<AuditRecord>, synced: bool) {
        if self.sync == AuditSync::None {
            for record in records {
                self.events.send(record);
            }
            return;
        }
        state.unsent.extend(records);
        if synced {
            for record in state.unsent.drain(..) {
                self.events.send(record);
            }
        }
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn failed(&self, reason: &str) -> AuditError {
        AuditError::Failed {
            path: self.path.clone(),
            reason: reason.to_owned(),
        }
    }

    /// Queues `events` as one group and waits for what `need` asks. Returns the group's first
    /// `seq` and its length (`(0, 0)` for [`Need::Queued`]).
    fn submit(&self, events: Vec<AuditEvent>, need: Need) -> Result<(u64, u64), AuditError> {
        let count = events.len() as u64;
        let mut state = self.lock_state();
        if let Some(reason) = &state.failed {
            return Err(self.failed(reason));
        }
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.queue.push(Group {
            ticket,
            events,
            report: need != Need::Queued,
        });
        let must_sync = need == Need::Durable && self.sync == AuditSync::Always;
        if must_sync {
            state.want_sync = state.want_sync.max(ticket + 1);
        }
        if need == Need::Queued {
            if !state.leading {
                drop(self.lead(state, Flush::Nothing, Locking::Try));
            }
            return Ok((0, 0));
        }
        loop {
            let covered = if must_sync {
                state.durable > ticket
            } else {
                state.written > ticket
            };
            if covered || (state.failed.is_some() && state.written > ticket) {
                let result = state.results.remove(&ticket);
                if let Some(Err(error)) = result {
                    return Err(error);
                }
                if let (true, Some(reason)) = (must_sync, &state.failed) {
                    return Err(self.failed(reason));
                }
                return match result {
                    Some(result) => result.map(|first| (first, count)),
                    None => Err(self.failed(
                        state
                            .failed
                            .as_deref()
                            .unwrap_or("the outcome of a write was lost"),
                    )),
                };
            }
            if !state.leading {
                state = self.lead(state, Flush::Nothing, Locking::Block);
                continue;
            }
            state = self.wait_done(state);
        }
    }

    /// Writes every queued group (and syncs when asked), turn after turn, until the queue is
    /// empty and no waiter needs a sync. Called with `state.leading` false; returns with it
    /// false again.
    fn lead<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        mut flush: Flush,
        locking: Locking,
    ) -> MutexGuard<'a, State> {
        state.leading = true;
        loop {
            let groups = std::mem::take(&mut state.queue);
            let end = groups.last().map_or(state.written, |g| g.ticket + 1);
            // A thread that must not block (`Locking::Try`) never syncs.
            if locking == Locking::Block
                && self.sync == AuditSync::Always
                && state.want_sync > state.durable
            {
                flush = Flush::Sync;
            }
            if groups.is_empty() && flush == Flush::Nothing {
                break;
            }
            let components = state.components.clone();
            let reports: Vec<(u64, bool)> = groups.iter().map(|g| (g.ticket, g.report)).collect();
            drop(state);
            let outcome = if let Some(reason) = self.lock_state().failed.clone() {
                Err(TurnError::Failed(self.failed(&reason)))
            } else {
                self.turn(groups, flush, components.as_ref(), locking)
            };
            state = self.lock_state();
            match outcome {
                Ok(turn) => {
                    if !reports.is_empty() {
                        state.writes += 1;
                    }
                    state.written = end;
                    for (ticket, first) in turn.firsts {
                        match first {
                            Ok(first) => {
                                if reports.contains(&(ticket, true)) {
                                    state.results.insert(ticket, Ok(first));
                                }
                            }
                            Err(error) => {
                                if reports.contains(&(ticket, true)) {
                                    state.results.insert(ticket, Err(error));
                                } else {
                                    tracing::error!(path = %self.path.display(), "an audit record was not written: {error}");
                                }
                            }
                        }
                    }
                    if turn.synced {
                        state.durable = end;
                        state.syncs += 1;
                    }
                    self.publish(&mut state, turn.records, turn.synced);
                    if turn.flushed {
                        state.headed = end;
                    }
                    if let Some(head) = turn.head {
                        state.head = Some(head);
                    }
                }
                Err(TurnError::Busy(mut requeued)) => {
                    // Another process holds the lock: the log's thread waits for it instead.
                    requeued.append(&mut state.queue);
                    state.queue = requeued;
                    state.leading = false;
                    self.wake.notify_all();
                    return state;
                }
                Err(TurnError::Failed(error)) => {
                    tracing::error!(path = %self.path.display(), "the audit log refuses records from now on: {error}");
                    if state.failed.is_none() {
                        state.failed = Some(error.to_string());
                    }
                    // The first waiter of this turn hears the cause itself, the others that
                    // the log failed.
                    if let Some((ticket, _)) = reports.iter().find(|(_, report)| *report) {
                        state.results.insert(*ticket, Err(error));
                    }
                    state.written = end;
                }
            }
            if state.waiting > 0 {
                self.done.notify_all();
            }
            if state.dirty() && !state.armed {
                state.armed = true;
                self.wake.notify_all();
            }
            flush = Flush::Nothing;
            let more = !state.queue.is_empty()
                || (state.failed.is_none()
                    && locking == Locking::Block
                    && self.sync == AuditSync::Always
                    && state.want_sync > state.durable);
            if !more {
                break;
            }
        }
        state.leading = false;
        state
    }

    /// One turn: takes the file lock, writes `groups`, flushes, lets go of the lock.
    fn turn(
        &self,
        groups: Vec<Group>,
        flush: Flush,
        components: Option<&ComponentHashes>,
        locking: Locking,
    ) -> Result<Turn, TurnError> {
        match locking {
            Locking::Block => self
                .file
                .lock()
                .map_err(AuditError::io("lock", &self.path))?,
            Locking::Try => match self.file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => return Err(TurnError::Busy(groups)),
                Err(std::fs::TryLockError::Error(source)) => {
                    return Err(AuditError::io("lock", &self.path)(source).into());
                }
            },
        }
        let turn = self.turn_locked(groups, flush, components, false);
        let unlocked = self
            .file
            .unlock()
            .map_err(AuditError::io("unlock", &self.path));
        let turn = turn?;
        unlocked?;
        Ok(turn)
    }

    /// A turn with the file lock held. `opening`: the end was read a moment ago, under the
    /// same lock.
    fn turn_locked(
        &self,
        groups: Vec<Group>,
        flush: Flush,
        components: Option<&ComponentHashes>,
        opening: bool,
    ) -> Result<Turn, TurnError> {
        let mut chain = self.chain.lock().unwrap_or_else(PoisonError::into_inner);
        let mut flush = flush;
        let mut prelude = Vec::new();
        if !opening && let Some(event) = self.check_end(&mut chain)? {
            prelude.push(event);
            flush = Flush::Sync;
        }
        let time = now_ms()?;
        let mut buf = Vec::new();
        let mut firsts = Vec::with_capacity(groups.len());
        // Records are kept for the stream only when someone listens: no copy otherwise.
        let mut records = self.events.listened().then(Vec::new);
        if !prelude.is_empty() {
            self.encode(&mut chain, prelude, components, time, &mut buf, records.as_mut())
                .map_err(TurnError::Failed)?;
        }
        for group in groups {
            let mark = (buf.len(), chain.next_seq, chain.prev.clone());
            let kept = records.as_ref().map_or(0, Vec::len);
            let first = chain.next_seq;
            match self.encode(&mut chain, group.events, components, time, &mut buf, records.as_mut()) {
                Ok(()) => firsts.push((group.ticket, Ok(first))),
                Err(error) => {
                    if let Some(records) = records.as_mut() {
                        records.truncate(kept);
                    }
                    // Only this group is left out; the chain goes on from before it.
                    buf.truncate(mark.0);
                    chain.next_seq = mark.1;
                    chain.prev = mark.2;
                    firsts.push((group.ticket, Err(error)));
                }
            }
        }
        if !buf.is_empty() {
            let at = chain.len;
            let records = buf.len() as u64;
            // Records go into the room after the last record; when they would not fit, the
            // same write adds more room after them (the one write in many that changes the
            // file's size, so the one sync in many that commits a size change).
            let room = if at + records > chain.size {
                ROOM_BYTES
            } else {
                0
            };
            if let Err(source) = write_with_room(&self.file, &buf, room, at) {
                // Part of it may be in the file: the chain's end is unknown now.
                return Err(TurnError::Failed(AuditError::Io {
                    action: "write to",
                    path: self.path.clone(),
                    source,
                }));
            }
            chain.len += records;
            chain.size = chain.size.max(at + records + room);
        }
        let mut synced = false;
        if flush == Flush::Sync {
            // After a failed fsync the kernel may have dropped the dirty pages: a later sync
            // succeeding would prove nothing, so the log fails for good.
            self.file.sync_data().map_err(|source| AuditError::Io {
                action: "sync",
                path: self.path.clone(),
                source,
            })?;
            synced = true;
        }
        let mut head = None;
        if flush != Flush::Nothing
            && let Some(file) = &self.head
        {
            let now = AuditHead {
                records: chain.next_seq,
                hash: chain.prev.clone(),
            };
            file.write(&now, chain.len)?;
            head = Some(now);
        }
        Ok(Turn {
            firsts,
            records: records.unwrap_or_default(),
            synced,
            flushed: flush != Flush::Nothing,
            head,
        })
    }

    /// Encodes `events` as chained lines after `chain`'s end into `buf`, advancing `chain`.
    fn encode(
        &self,
        chain: &mut Chain,
        events: Vec<AuditEvent>,
        components: Option<&ComponentHashes>,
        time: u64,
        buf: &mut Vec<u8>,
        mut stream: Option<&mut Vec<AuditRecord>>,
    ) -> Result<(), AuditError> {
        for mut event in events {
            if event.components.is_none() {
                event.components = components.cloned();
            }
            let record = AuditRecord {
                seq: chain.next_seq,
                time,
                prev: std::mem::take(&mut chain.prev),
                event,
            };
            let start = buf.len();
            let encoded = serde_json::to_writer(&mut *buf, &record);
            let AuditRecord { seq, prev, event, .. } = record;
            chain.prev = prev;
            encoded.map_err(|source| AuditError::Encode {
                path: self.path.clone(),
                source,
            })?;
            let line = buf.get(start..).unwrap_or_default();
            if line.len() > MAX_RECORD_BYTES {
                return Err(AuditError::RecordTooLarge {
                    path: self.path.clone(),
                    bytes: line.len(),
                    limit: MAX_RECORD_BYTES,
                });
            }
            let hash = sha256_hex(line);
            if let Some(stream) = stream.as_deref_mut() {
                stream.push(AuditRecord {
                    seq,
                    time,
                    prev: std::mem::replace(&mut chain.prev, hash),
                    event,
                });
            } else {
                chain.prev = hash;
            }
            buf.push(b'\n');
            chain.next_seq = chain.next_seq.saturating_add(1);
        }
        Ok(())
    }

    /// Checks, with the file lock held, that the log's path still names the file this
    /// process writes and that no record of it went missing; follows another process's
    /// appends (and recovers a torn line one left). Returns the `recovered` record to write
    /// first, if any.
    fn check_end(&self, chain: &mut Chain) -> Result<Option<AuditEvent>, AuditError> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(AuditError::Replaced {
                    path: self.path.clone(),
                    how: "deleted",
                });
            }
            Err(source) => {
                return Err(AuditError::Io {
                    action: "read",
                    path: self.path.clone(),
                    source,
                });
            }
        };
        if (meta.dev(), meta.ino()) != self.identity {
            return Err(AuditError::Replaced {
                path: self.path.clone(),
                how: "replaced by another file",
            });
        }
        let size = meta.len();
        if size < chain.len {
            return Err(AuditError::CutShort {
                path: self.path.clone(),
                bytes: chain.len - size,
            });
        }
        chain.size = size;
        // Every writer writes at the end of the records: room there means nobody wrote.
        let mut at_end = [0u8; 1];
        if size == chain.len
            || self
                .file
                .read_exact_at(&mut at_end, chain.len)
                .map(|()| is_room(at_end[0]))
                .map_err(AuditError::io("read", &self.path))?
        {
            return Ok(None);
        }
        scan_forward(&self.file, chain, &self.path)?;
        let end = content_end(&self.file, size, &self.path)?;
        if end > chain.len {
            return cut_torn(&self.file, chain, end, Torn::LastLine, &self.path).map(Some);
        }
        Ok(None)
    }

    /// Writes what is queued, then syncs and writes the head (the shutdown flush).
    fn flush_all(&self) -> Result<(), AuditError> {
        let mut state = self.lock_state();
        while state.leading {
            state = self.wait_done(state);
        }
        if let Some(reason) = &state.failed {
            return Err(self.failed(reason));
        }
        let state = self.lead(state, Flush::Sync, Locking::Block);
        match &state.failed {
            Some(reason) => Err(self.failed(reason)),
            None => Ok(()),
        }
    }

    /// The log's thread: writes groups left queued, and within [`SYNC_DELAY`] of a write
    /// no sync covered, syncs (or, with [`AuditSync::None`], writes the head).
    fn run_timer(&self) {
        let mut state = self.lock_state();
        let mut deadline: Option<Instant> = None;
        loop {
            if state.stopping {
                return;
            }
            if !state.leading && !state.queue.is_empty() {
                state = self.lead(state, Flush::Nothing, Locking::Block);
                continue;
            }
            if !state.armed {
                deadline = None;
                state = self
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            let now = Instant::now();
            let due = *deadline.get_or_insert(now + SYNC_DELAY);
            if now < due {
                state = self
                    .wake
                    .wait_timeout(state, due - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                continue;
            }
            deadline = None;
            if state.leading {
                continue;
            }
            if state.dirty() && state.failed.is_none() {
                let flush = match self.sync {
                    AuditSync::Always => Flush::Sync,
                    AuditSync::None => Flush::Head,
                };
                state = self.lead(state, flush, Locking::Block);
            } else {
                state.armed = false;
            }
        }
    }
}

/// Spaces the room is written from, a page at a time (no buffer of the room's size).
static SPACES: [u8; 4096] = [b' '; 4096];
const _: () = assert!(ROOM_BYTES.is_multiple_of(SPACES.len() as u64) && ROOM_BYTES > 0);

/// Writes `records` at `at`, then `room` bytes of room after them (spaces, the last a
/// newline; `room` a multiple of [`SPACES`]' length, or 0), in one `pwritev` when it writes
/// them all.
fn write_with_room(file: &File, records: &[u8], room: u64, at: u64) -> std::io::Result<()> {
    let pages = usize::try_from(room).unwrap_or(0) / SPACES.len();
    let mut slices = Vec::with_capacity(pages + 2);
    slices.push(std::io::IoSlice::new(records));
    if pages > 0 {
        slices.extend((1..pages).map(|_| std::io::IoSlice::new(&SPACES)));
        slices.push(std::io::IoSlice::new(
            SPACES.get(..SPACES.len() - 1).unwrap_or_default(),
        ));
        slices.push(std::io::IoSlice::new(b"\n"));
    }
    let mut slices = slices.as_mut_slice();
    let mut offset = at;
    while !slices.is_empty() {
        let written = match rustix::io::pwritev(file, slices, offset) {
            Ok(written) => written,
            Err(rustix::io::Errno::INTR) => continue,
            Err(errno) => return Err(errno.into()),
        };
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        offset += written as u64;
        std::io::IoSlice::advance_slices(&mut slices, written);
    }
    Ok(())
}

/// The chain's end after `tail`'s last complete line (its `size` is the lines' length: set
/// it to the file's).
fn chain_after(tail: &Tail, path: &Path) -> Result<Chain, AuditError> {
    Ok(match &tail.last_line {
        None => Chain {
            next_seq: 0,
            prev: GENESIS_PREV.to_owned(),
            len: tail.complete_len,
            size: tail.complete_len,
        },
        Some(line) => {
            let record: AuditRecord =
                serde_json::from_slice(line).map_err(|source| AuditError::Corrupt {
                    path: path.to_path_buf(),
                    source,
                })?;
            Chain {
                next_seq: record.seq.saturating_add(1),
                prev: sha256_hex(line),
                len: tail.complete_len,
                size: tail.complete_len,
            }
        }
    })
}

/// The chain at the head's record, when its line ends at `end` in the log (`size` bytes)
/// and is the head's record, advanced over every record after it that chains
/// ([`scan_forward`]); `None` when the head's record is not there (the caller then reads the
/// log from its end).
fn resume_at_head(
    file: &File,
    head: &AuditHead,
    end: u64,
    size: u64,
    path: &Path,
) -> Result<Option<Chain>, AuditError> {
    if end > size {
        return Ok(None);
    }
    let Ok(tail) = read_tail(file, end, path) else {
        return Ok(None);
    };
    let Ok(mut chain) = chain_after(&tail, path) else {
        return Ok(None);
    };
    if tail.complete_len != end || chain.next_seq != head.records || chain.prev != head.hash {
        return Ok(None);
    }
    chain.size = size;
    scan_forward(file, &mut chain, path)?;
    Ok(Some(chain))
}

/// Advances `chain` over the complete lines after its end that are its next records (each
/// `seq` the next, each `prev` the hash of the line before), up to the room, a line cut off,
/// or a line that is not the next record.
fn scan_forward(file: &File, chain: &mut Chain, path: &Path) -> Result<(), AuditError> {
    let mut at = file;
    at.seek(SeekFrom::Start(chain.len))
        .map_err(AuditError::io("read", path))?;
    let mut reader = std::io::BufReader::with_capacity(
        TAIL_CHUNK_BYTES,
        at.take(chain.size.saturating_sub(chain.len)),
    );
    let mut line = Vec::new();
    while let NextLine::Line =
        next_line(&mut reader, &mut line).map_err(AuditError::io("read", path))?
    {
        let Ok(record) = serde_json::from_slice::<AuditRecord>(&line) else {
            break;
        };
        if record.seq != chain.next_seq || record.prev != chain.prev {
            break;
        }
        chain.prev = sha256_hex(&line);
        chain.next_seq = chain.next_seq.saturating_add(1);
        chain.len += line.len() as u64 + 1;
    }
    Ok(())
}

/// What [`cut_torn`] cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Torn {
    /// A last line a process left unfinished: cut only when it begins as every record does
    /// (otherwise the file is not toolward's to cut).
    LastLine,
    /// Whatever follows the records after the head's record: writes no sync covered, torn
    /// by a machine crash (their pages reach the disk in any order), or an edit.
    AfterHead,
}

/// Truncates the log to the end of its records (`chain.len`), cutting the torn bytes up to
/// `end` (and the room after them), and returns the `recovered` record that says so.
fn cut_torn(
    file: &File,
    chain: &mut Chain,
    end: u64,
    torn: Torn,
    path: &Path,
) -> Result<AuditEvent, AuditError> {
    let from = chain.len;
    let mut cut = Vec::new();
    let mut reader = file;
    reader
        .seek(SeekFrom::Start(from))
        .map_err(AuditError::io("read", path))?;
    reader
        .take((end - from).min(MAX_RECORD_BYTES as u64 + 1))
        .read_to_end(&mut cut)
        .map_err(AuditError::io("read", path))?;
    // Every line a writer starts begins with `{"seq":`; bytes that do not are not a torn
    // record (a wrong `audit.file`?), and are not toolward's to cut.
    let line = cut.trim_ascii_end();
    let ours = end - from <= MAX_RECORD_BYTES as u64
        && match torn {
            Torn::LastLine => {
                !line.contains(&b'\n')
                    && (line.starts_with(RECORD_PREFIX) || RECORD_PREFIX.starts_with(line))
            }
            Torn::AfterHead => true,
        };
    if !ours {
        return Err(AuditError::ForeignTail {
            path: path.to_path_buf(),
            bytes: end - from,
        });
    }
    file.set_len(from)
        .map_err(AuditError::io("truncate", path))?;
    chain.size = from;
    tracing::warn!(
        path = %path.display(),
        bytes = end - from,
        "audit log ended in a torn write; cut it and recorded the recovery"
    );
    Ok(AuditEvent {
        truncated_bytes: Some(end - from),
        truncated_sha256: Some(sha256_hex(&cut)),
        ..AuditEvent::new(AuditKind::Recovered)
    })
}

/// How the log (ending in `tail`, `chain`) differs from `head`; `None` when it matches. Reads
/// backwards at most [`MAX_HEAD_LAG_RECORDS`] records past the head.
fn check_against_head(
    file: &File,
    tail: &Tail,
    chain: &Chain,
    head: &AuditHead,
    path: &Path,
) -> Result<Option<HeadProblem>, AuditError> {
    let Some(last) = head.last_seq() else {
        return Ok(None);
    };
    if chain.next_seq < head.records {
        return Ok(Some(HeadProblem::Missing {
            first: chain.next_seq,
            last,
        }));
    }
    if chain.next_seq - head.records > MAX_HEAD_LAG_RECORDS {
        return Ok(Some(HeadProblem::TooFarPast {
            head_records: head.records,
            log_records: chain.next_seq,
        }));
    }
    // Walk back line by line to the head's record.
    let mut line = tail.last_line.clone();
    let mut end = tail.complete_len;
    loop {
        let Some(bytes) = line else {
            return Ok(Some(HeadProblem::Missing { first: 0, last }));
        };
        let record: AuditRecord =
            serde_json::from_slice(&bytes).map_err(|source| AuditError::Corrupt {
                path: path.to_path_buf(),
                source,
            })?;
        if record.seq == last {
            let found = sha256_hex(&bytes);
            return Ok((found != head.hash).then_some(HeadProblem::Differs { seq: last, found }));
        }
        if record.seq < last {
            return Ok(Some(HeadProblem::Differs {
                seq: last,
                found: String::from("(no record of that seq)"),
            }));
        }
        let start = end - bytes.len() as u64 - 1;
        let previous = read_tail(file, start, path)?;
        end = previous.complete_len;
        line = previous.last_line;
    }
}

/// Refuses a log that is not the effective user's or that group or others can reach.
fn check_private(meta: &std::fs::Metadata, path: &Path) -> Result<(), AuditError> {
    let euid = crate::identity::euid();
    if meta.uid() != euid {
        return Err(AuditError::Owner {
            path: path.to_path_buf(),
            owner: meta.uid(),
            euid,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(AuditError::Mode {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}
