//! The audit log: one JSON record per event, one record per line (JSONL), append-only, each
//! record chained to the one before it by a SHA-256 hash.
//!
//! # Record shape
//!
//! Every line is one JSON object, written in this field order:
//!
//! | field  | meaning |
//! |--------|---------|
//! | `seq`  | position in the log, `0` for the first record, `+1` for each record after it |
//! | `time` | milliseconds since the Unix epoch (UTC), from the host's clock; the same unit the WIT `call.time` uses, so a record and the call it describes compare directly |
//! | `prev` | SHA-256, lowercase hex, of the previous line's bytes without its newline; 64 zeros for the first record |
//! | `kind` | one of [`AuditKind`] (`load`, `server-start`, `call-received`, `decision`, `approval-asked`, `approval-answered`, `approval-forged`, `forwarded`, `result`, `result-decision`, `refusal`, `recovered`, `pin-accepted`) |
//! | ...    | the event fields of [`AuditEvent`] that apply; an absent field is left out, never `null` |
//!
//! Changing, inserting or deleting a line breaks the chain at the first line after the change
//! ([`verify`] reports it). The chain cannot protect the last record on its own: keep
//! [`VerifyReport::last_hash`] somewhere else (a ticket, a second machine) to anchor it.
//!
//! # Writing
//!
//! Several processes may write one log at once (a desktop app and an editor each starting
//! `toolward serve` on one config, `toolward call` beside them): each takes an exclusive
//! advisory lock on the file (`flock`, through [`std::fs::File::lock`]) for each group of
//! records it writes, reads the last record again when another process appended since, and
//! writes its group after it, so the records of every process form one chain. Within a
//! process, groups written while a sync is under way are written together, under one sync
//! (group commit). See [`writer`]. The call path syncs a call with no other call in flight
//! on the call's own thread (no hop to a blocking thread and wake-up back), and hands the
//! records of calls in flight together to blocking threads, where they commit as a group.
//!
//! The log is created `0600`; a log that is not the effective user's, or that group or
//! others can reach, is refused, naming the path and the fix.
//!
//! # Durability
//!
//! With [`AuditSync::Always`], the records that must precede an action are on disk
//! (`fdatasync`) before it: on the call path, `call-received` and `decision` (and
//! `forwarded`) are written together in one `write` and synced once before the call is
//! forwarded; a held call's `approval-answered` is synced before the call goes on; a denied
//! call's records are synced before its answer. The records after that (`result`, a refusal
//! without a decision, a cancellation) are written at once and put on disk by the next sync or
//! within [`SYNC_DELAY`]. So a **machine crash** can lose only records written in the last
//! [`SYNC_DELAY`] that no action waited for: the `result` of calls that were answered, and
//! refusals of calls that never reached a decision; never a decision, never an approval's
//! answer, never the `forwarded` record of a call the server received. A crash of toolward
//! alone loses nothing written, and at most the groups queued in memory while another
//! group's sync was under way.
//!
//! With [`AuditSync::None`], nothing is synced until the log is closed: a machine crash can
//! lose any record of the last seconds (what the kernel had not yet written back), a crash of
//! toolward alone loses nothing written.
//!
//! # The head
//!
//! [`AuditLog::open_with_head`] keeps the log's head (its record count and last hash, see
//! [`head`]) in the state folder, written only after the sync that covers it (with
//! [`AuditSync::None`], within [`SYNC_DELAY`] of a write, unsynced), so it is never ahead of
//! what is on disk. At open a log whose end does not match its head (records cut from its
//! end, the file replaced) is refused, [`verify_with_head`] names the missing records, and
//! [`AuditLog::accept`] continues such a log with a `recovered` record saying what differed.
//! While a log is open, every group checks that the log's path still names the file it
//! opened and that the file has not shrunk: a log deleted, replaced or cut short while in use
//! makes every later record, and so every call, fail.
//!
//! # The room at the end
//!
//! The file ends in room for the next records: spaces, the last of them a newline, at most
//! [`ROOM_BYTES`] of them. A writer writes its records (`pwrite`) over the start of the room,
//! and adds [`ROOM_BYTES`] more after them, in the same write, only when they would not fit.
//! So most syncs cover data written into blocks the file already had, and `fdatasync` need
//! not commit a change of the file's size to the file system's journal (BENCHMARKS.md §10.2
//! and §11: about 50 µs of each sync on ext4). Every reader here ([`verify`], `audit show`,
//! `tail`, `replay`, `export`) stops at the room; for other tools the room is one last line
//! of spaces (`jq` skips it; `grep` does not match it). A record line never begins with a
//! space or a newline, and never ends with a space.
//!
//! # A torn last line
//!
//! A process killed while writing can leave its last line unfinished. Such a line was never
//! acknowledged: [`AuditLog::append`] returns only after the whole line, newline included,
//! has been written. On open, toolward truncates the torn bytes away (the room after them
//! with them: the next write adds room again), then appends a `recovered` record whose
//! `truncated_bytes` is their count and `truncated_sha256` their hash, and syncs it to disk
//! whatever the [`AuditSync`] mode, so the loss is itself on the record. Anything else wrong
//! with the existing log (a last complete line that is not a record) refuses the open:
//! toolward does not repair a log it did not tear.
//!
//! A machine crash can tear more than one line: the pages of writes that no sync covered
//! reach the disk in any order, so room can sit between a record and the end of a later one.
//! The head (below) says where its record's line ends; from there, [`AuditLog::open_with_head`]
//! reads forward every record that chains, and cuts whatever follows the last of them the
//! same way, with a `recovered` record (`truncated_bytes` counts from the end of the last
//! record to the last byte that is not room). Those bytes were never synced, so no action
//! waited for them; a record an action waited for was synced, and chains.

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::canonical::sha256_hex;

pub mod head;
pub mod memory;
pub mod read;
pub mod replay;
pub mod store;
pub mod writer;

pub use head::{AuditHead, HeadProblem, read_head};
pub use memory::{AUDIT_EVENTS_CAPACITY, AuditChain, MemoryAudit};
pub(crate) use memory::RecordStream;
pub use store::AuditStore;
pub use writer::{AuditLog, LOG_MODE, SYNC_DELAY};

/// The `prev` of the first record: 64 zeros (the width of a SHA-256 in hex).
pub const GENESIS_PREV: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Largest line, in bytes (newline excluded), the log writes or reads back: 64 MiB.
///
/// A record holds at most one call's arguments (when the operator records them) and
/// hashes; the call path bounds arguments well below this. The bound keeps reading back a
/// damaged log (one without newlines) from taking unbounded memory.
pub const MAX_RECORD_BYTES: usize = 64 * 1024 * 1024;

/// Most records a log may run past its head before [`AuditLog::open_with_head`] stops
/// walking back to the head's record and refuses the log ([`HeadProblem::TooFarPast`]):
/// records written after the last sync that a crash kept, ten thousand of them.
pub const MAX_HEAD_LAG_RECORDS: u64 = 10_000;

/// Bytes read per step while scanning an existing log backwards for its last line: 64 KiB.
const TAIL_CHUNK_BYTES: usize = 64 * 1024;

/// How every line the writer produces begins; a torn line begins with (a prefix of) it.
const RECORD_PREFIX: &[u8] = br#"{"seq":"#;

/// Room the writer adds at the log's end when its records reach the end of the room there:
/// 1 MiB of spaces, the last of them a newline (see [the room at the end](self#the-room-at-the-end)).
pub const ROOM_BYTES: u64 = 1024 * 1024;

/// Whether `byte` belongs to the room at the end of a log: a space or a newline. No record
/// line begins with either, and none ends with a space.
fn is_room(byte: u8) -> bool {
    byte == b' ' || byte == b'\n'
}

/// What [`next_line`] found at a reader's position.
enum NextLine {
    /// The end of the file.
    End,
    /// The room at the end of the log (nothing read).
    Room,
    /// A complete line, in the buffer without its newline.
    Line,
    /// A line cut off: by the end of the file, by the room at the end (a space before its
    /// newline), or (`too_long`) by [`MAX_RECORD_BYTES`].
    Torn {
        /// The line passed [`MAX_RECORD_BYTES`].
        too_long: bool,
    },
}

/// Reads the line at `reader`'s position into `buf` (cleared first), unless the room at the
/// end of the log begins there. Reads at most [`MAX_RECORD_BYTES`] + 2 bytes.
fn next_line(reader: &mut impl BufRead, buf: &mut Vec<u8>) -> io::Result<NextLine> {
    buf.clear();
    match reader.fill_buf()?.first() {
        None => return Ok(NextLine::End),
        Some(byte) if is_room(*byte) => return Ok(NextLine::Room),
        Some(_) => {}
    }
    // One byte over the limit, so an over-long line is seen as such, not as torn.
    let cap = MAX_RECORD_BYTES as u64 + 2;
    let n = reader.take(cap).read_until(b'\n', buf)?;
    if buf.pop_if(|byte| *byte == b'\n').is_none() {
        let cut_by_room = buf.last() == Some(&b' ');
        return Ok(NextLine::Torn {
            too_long: n as u64 >= cap && !cut_by_room,
        });
    }
    if buf.last() == Some(&b' ') {
        return Ok(NextLine::Torn { too_long: false });
    }
    Ok(NextLine::Line)
}

/// The offset just after the last byte of `0..len` that is not room ([`is_room`]); 0 when
/// there is none. Reads backwards in [`TAIL_CHUNK_BYTES`] steps.
fn content_end(file: &File, len: u64, path: &Path) -> Result<u64, AuditError> {
    let mut chunk = vec![0u8; TAIL_CHUNK_BYTES];
    let mut pos = len;
    while pos > 0 {
        let step = usize::try_from(pos).map_or(TAIL_CHUNK_BYTES, |p| p.min(TAIL_CHUNK_BYTES));
        let start = pos - step as u64;
        let buf = chunk.get_mut(..step).unwrap_or_default();
        file.read_exact_at(buf, start)
            .map_err(AuditError::io("read", path))?;
        if let Some(i) = buf.iter().rposition(|byte| !is_room(*byte)) {
            return Ok(start + i as u64 + 1);
        }
        pos = start;
    }
    Ok(0)
}

/// The last complete line of the log in `file` (`len` bytes) before the room at its end, and
/// where its content ends: bytes in `tail.complete_len..end` are a torn line.
fn tail_before_room(file: &File, len: u64, path: &Path) -> Result<(Tail, u64), AuditError> {
    let end = content_end(file, len, path)?;
    let mut after = [0u8; 1];
    let ends_line = end < len
        && file
            .read_exact_at(&mut after, end)
            .map(|()| after[0] == b'\n')
            .map_err(AuditError::io("read", path))?;
    let tail = read_tail(file, if ends_line { end + 1 } else { end }, path)?;
    Ok((tail, end))
}

/// Errors of the audit log.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The log file is owned by another user than the one toolward runs as.
    #[error(
        "audit log `{path}` is owned by uid {owner}, not by uid {euid} that toolward runs as: run `chown {euid} {path}` or point `audit.file` elsewhere"
    )]
    Owner {
        /// The log file.
        path: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// The effective uid of this process.
        euid: u32,
    },
    /// Group or others have some access to the log file.
    #[error(
        "audit log `{path}` has mode {mode:04o}, which lets other users read or change it: run `chmod 600 {path}`"
    )]
    Mode {
        /// The log file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The PostgreSQL store could not take or return records.
    #[error(transparent)]
    #[cfg(feature = "postgres")]
    Postgres(#[from] crate::database::PgError),
    /// The state folder, or the head file in it, cannot be used.
    #[error(transparent)]
    State(#[from] crate::state_dir::StateError),
    /// The head file does not hold a head.
    #[error(
        "audit head `{path}` is not a head written by toolward: check the log with `toolward audit verify LOG` against a head kept elsewhere (one an earlier start printed) before removing this file, which makes the log's end its head"
    )]
    HeadCorrupt {
        /// The head file.
        path: PathBuf,
    },
    /// The log does not end where its head says: records were cut from its end, or the
    /// file was replaced.
    #[error(
        "audit log `{path}` does not match its head in `{head_path}` ({head}): {problem}; see what is missing with `toolward audit verify --config` and this config, then continue the log as it is with `toolward audit accept --config` and this config"
    )]
    HeadMismatch {
        /// The log file.
        path: PathBuf,
        /// The head file.
        head_path: PathBuf,
        /// What the head says.
        head: AuditHead,
        /// How the log differs.
        problem: HeadProblem,
    },
    /// The log's path no longer names the file toolward writes.
    #[error(
        "audit log `{path}` was {how} while toolward wrote it; calls are refused until toolward is restarted"
    )]
    Replaced {
        /// The log file.
        path: PathBuf,
        /// `deleted` or `replaced by another file`.
        how: &'static str,
    },
    /// The log file shrank while toolward wrote it.
    #[error(
        "audit log `{path}` lost its last {bytes} bytes while toolward wrote it; calls are refused until toolward is restarted"
    )]
    CutShort {
        /// The log file.
        path: PathBuf,
        /// How many bytes went missing.
        bytes: u64,
    },
    /// Opening, locking, reading, truncating or syncing the log failed.
    #[error("cannot {action} audit log `{path}`")]
    Io {
        /// What was being done: `open`, `lock`, `read`, `truncate`, `write to`, `sync`.
        action: &'static str,
        /// The log file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The last complete line of an existing log is not an audit record, so the chain
    /// cannot be continued.
    #[error(
        "audit log `{path}` ends in a line that is not an audit record; check it with `verify` and repair it by hand"
    )]
    Corrupt {
        /// The log file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The file ends in bytes without a newline that are not the start of a record, so they
    /// are not a torn write of this log and are left alone.
    #[error(
        "audit log `{path}` ends in {bytes} bytes without a newline that are not the start of an audit record; refusing to truncate them"
    )]
    ForeignTail {
        /// The log file.
        path: PathBuf,
        /// How many bytes follow the last newline.
        bytes: u64,
    },
    /// A line is longer than `MAX_RECORD_BYTES`.
    #[error("audit record of {bytes} bytes is larger than the limit of {limit} bytes in `{path}`")]
    RecordTooLarge {
        /// The log file.
        path: PathBuf,
        /// The line's length in bytes.
        bytes: usize,
        /// `MAX_RECORD_BYTES`.
        limit: usize,
    },
    /// An event could not be encoded as JSON.
    #[error("cannot encode an audit record for `{path}`")]
    Encode {
        /// The log file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// An earlier write or sync failed (or the file was replaced or cut short), so the end
    /// of the file is unknown; the log refuses every further record rather than write one
    /// whose chain may be broken. Restart toolward (which recovers a torn line) to continue.
    #[error(
        "audit log `{path}` refuses records after an earlier failure ({reason}); restart toolward"
    )]
    Failed {
        /// The log file.
        path: PathBuf,
        /// The earlier failure.
        reason: String,
    },
    /// The system clock is before the Unix epoch.
    #[error("system clock is before the unix epoch")]
    Clock,
}

/// When the log asks the operating system to put records on disk (the `audit` module's
/// docs, "Durability", say what a crash can lose in each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditSync {
    /// `fdatasync` ([`File::sync_data`]) before [`AuditLog::append`] returns: the records an
    /// action needs on record are durable before it goes ahead; the others within
    /// `SYNC_DELAY`. The default.
    #[default]
    Always,
    /// Leave records in the page cache: they survive a crash of toolward but not of the
    /// machine. Faster. The log syncs once when it is closed.
    None,
}

/// The kind of event a record describes (`kind`, kebab-case in JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuditKind {
    /// A tool was loaded or refused at load (one record per tool, or one per load).
    Load,
    /// A client's `tools/call` arrived.
    CallReceived,
    /// The policy component decided a call.
    Decision,
    /// An approval was asked of the operator.
    ApprovalAsked,
    /// An approval was answered (or timed out); `answered_by` names who and how.
    ApprovalAnswered,
    /// An answer file in the approvals queue did not count: no MAC, a wrong MAC, or the MAC
    /// of another call; `reason` names the file and why.
    ApprovalForged,
    /// The call was forwarded to the server.
    Forwarded,
    /// The server's result came back (or the call timed out).
    Result,
    /// A policy component reviewed a result (`results@0.3.0`): `result_action` (pass,
    /// redact, withhold, hold), `redactions` by kind and count, `result_sha256` as received
    /// and `delivered_sha256` as delivered, the session's `labels` after it; never the
    /// redacted text.
    ResultDecision,
    /// toolward refused a call or a tool.
    Refusal,
    /// The log was reopened after a torn last line was truncated away.
    Recovered,
    /// A server was started, at the load or again after it failed: `server`, and in `detail`
    /// the attempt (0 at the load) and the confinement actually applied
    /// (`crate::confine::Confinement`; the launcher refuses to start a server less confined
    /// than it was asked). A restart that would have been less confined than the first start
    /// is not made: a `refusal` names the server and why.
    ServerStart,
    /// A user's action in the web console that is not an answer (answers are
    /// `approval-answered` records of the waiting gateway): a sign-in, an answer refused
    /// because the user is not an approver of the call, a changed tool accepted. `principal`
    /// is the console user; `detail` has the `action`, the user's `groups`, and what it
    /// concerned.
    Console,
    /// A person accepted a tool's change from the web console, as `toolward pin --tool`
    /// does: `server`, `upstream_tool`, `answered_by` (the channel `console` and the signed-in
    /// user), and in `detail` the manifest written and the change (`diff`).
    PinAccepted,
}

impl fmt::Display for AuditKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Load => "load",
            Self::CallReceived => "call-received",
            Self::Decision => "decision",
            Self::ApprovalAsked => "approval-asked",
            Self::ApprovalAnswered => "approval-answered",
            Self::ApprovalForged => "approval-forged",
            Self::Forwarded => "forwarded",
            Self::Result => "result",
            Self::ResultDecision => "result-decision",
            Self::Refusal => "refusal",
            Self::Recovered => "recovered",
            Self::ServerStart => "server-start",
            Self::Console => "console",
            Self::PinAccepted => "pin-accepted",
        })
    }
}

/// A decision as recorded (`decision`): the policy's verdict, or the operator's answer to an
/// approval (`allow` approved, `deny` refused or timed out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditDecision {
    /// The call may go ahead.
    Allow,
    /// The call is refused.
    Deny,
    /// The call waits for an approval.
    Hold,
}

/// The SHA-256 of each WebAssembly component in use, lowercase hex (`components`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentHashes {
    /// The component that exports `rules` (classifies tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules_sha256: Option<String>,
    /// The component that exports `policy` (decides calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_sha256: Option<String>,
    /// For a rules component from an OCI registry: the name in `oci.keys` of the key its
    /// cosign signature verified with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules_signer: Option<String>,
    /// For a policy component from an OCI registry: the name in `oci.keys` of the key its
    /// cosign signature verified with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_signer: Option<String>,
    /// For policy settings or Cedar policy text from an OCI registry (`policy.settings`,
    /// `policy.cedar`): the manifest digest the config pins, `sha256:…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings_digest: Option<String>,
    /// For policy settings or Cedar policy text from an OCI registry: the name in `oci.keys`
    /// of the key its cosign signature verified with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings_signer: Option<String>,
}

/// One event, as the caller describes it: a [`kind`](AuditKind) and whichever fields apply.
/// The log adds `seq`, `time` and `prev`.
///
/// Build one with struct update syntax:
///
/// ```ignore
/// AuditEvent { call_id: Some(id), server: Some(server), ..AuditEvent::new(AuditKind::CallReceived) }
/// ```
///
/// Hashes are SHA-256, lowercase hex. Fields that are `None` are left out of the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// What happened.
    pub kind: AuditKind,
    /// The call's id, unique within a gateway run; links the records of one call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Who made the call (the configured principal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The client session, when the transport has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The server's name in the config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The tool's name as the model sees it (`server__tool`, with the configured separator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The tool's name on its server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_tool: Option<String>,
    /// The operator's effect for the tool (`read-only`, `local-change`, `remote-change`,
    /// `destructive`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
    /// The pinned hash of the tool's description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description_sha256: Option<String>,
    /// The pinned hash of the tool's canonical input schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema_sha256: Option<String>,
    /// The hash of the call's canonical arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_sha256: Option<String>,
    /// The call's canonical arguments as JSON text, only when the operator records arguments
    /// (`audit.record_arguments`). Text rather than a JSON value so numbers stay exact and
    /// [`arguments_sha256`](Self::arguments_sha256) can be checked against it byte for byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
    /// The components in use. [`AuditLog::set_components`] fills this in for every record
    /// that leaves it `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub components: Option<ComponentHashes>,
    /// `decision` only: the `time-ms` the policy saw (milliseconds since the Unix epoch), so
    /// that the decision can be replayed exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_time_ms: Option<u64>,
    /// `decision` only: the facts the policy saw (`docs/facts.md`), fact name to count,
    /// such as `{"tool.forwarded.minute": 3, ...}`; `{}` when it was given none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<std::collections::BTreeMap<String, u64>>,
    /// The decision (policy verdict or approval answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<AuditDecision>,
    /// Why: the policy's reason, the refusal's message, the load problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `approval-answered` and `pin-accepted` only: the channel the approval went through and who answered
    /// (`{"channel": "queue", "answerer": "alice", "uid": 1000}`); no `answerer` when nobody
    /// did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<crate::identity::AnsweredBy>,
    /// Whether the server's result was a tool error (`isError`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// The hash of the result as received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_sha256: Option<String>,
    /// The result's size as received, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_bytes: Option<u64>,
    /// Whether the result was truncated at the cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    /// How long the step took, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// `recovered` only: how many torn bytes were truncated from the end of the log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated_bytes: Option<u64>,
    /// `recovered` only: the hash of the truncated bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated_sha256: Option<String>,
    /// Anything else the step wants on record (a load summary, a manifest hash), as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
    /// Of a `decision` by a `toolward:policy@0.2.0` component: the ids of the policies that
    /// determined it (for the Cedar component, the Cedar policy ids: the forbids of a deny,
    /// the `@hold` permits of a hold, the permits of an allow, the erring policies of a deny
    /// for an evaluation error; empty when no policy applied). Absent for components that do
    /// not say (`policy@0.1.0`). At most `MAX_DETERMINED_BY` (64) ids and a last
    /// `… and N more`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub determined_by: Option<Vec<String>>,
    /// Of a `result-decision`: what happened to the result (`pass`, `redact`, `withhold`,
    /// `hold`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_action: Option<String>,
    /// Of a `result-decision`: how many spans were redacted, by kind (`secret:github-pat`:
    /// 2); never what they held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redactions: Option<std::collections::BTreeMap<String, u64>>,
    /// Of a `result-decision`: SHA-256 of the result as delivered to the client (its JSON
    /// text), beside `result_sha256`, the result as received from the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_sha256: Option<String>,
    /// Of a `result-decision`: the session's labels after the result (joined with what
    /// the review found), or before it when the result was not delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<crate::component::Labels>,
    /// Of a `result-decision`, with `audit.record_results`: the result the review read, as
    /// the server sent it after the size cap (JSON text: `content`, `structuredContent`,
    /// `isError`), for `audit replay`. May hold what the review redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

impl AuditEvent {
    /// An event of `kind` with every other field `None`.
    #[must_use]
    pub fn new(kind: AuditKind) -> Self {
        Self {
            kind,
            call_id: None,
            principal: None,
            session: None,
            server: None,
            tool: None,
            upstream_tool: None,
            effect: None,
            description_sha256: None,
            input_schema_sha256: None,
            arguments_sha256: None,
            arguments: None,
            components: None,
            policy_time_ms: None,
            facts: None,
            decision: None,
            reason: None,
            answered_by: None,
            is_error: None,
            result_sha256: None,
            result_bytes: None,
            truncated: None,
            duration_ms: None,
            truncated_bytes: None,
            truncated_sha256: None,
            detail: None,
            determined_by: None,
            result_action: None,
            redactions: None,
            delivered_sha256: None,
            labels: None,
            result: None,
        }
    }
}

/// One line of the log, as written and read back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Position in the log, from 0.
    pub seq: u64,
    /// Milliseconds since the Unix epoch, UTC.
    pub time: u64,
    /// SHA-256 (lowercase hex) of the previous line without its newline; `GENESIS_PREV`
    /// for the first.
    pub prev: String,
    /// The event.
    #[serde(flatten)]
    pub event: AuditEvent,
}

/// The end of an existing log, found by [`read_tail`].
struct Tail {
    /// Length of the complete lines, in bytes: where the torn bytes, if any, begin.
    complete_len: u64,
    /// The last complete line, without its newline; `None` for an empty log.
    last_line: Option<Vec<u8>>,
}

/// Finds the end of the last complete line and that line, reading backwards from the end so
/// opening a long log does not read all of it.
fn read_tail(mut file: &File, len: u64, path: &Path) -> Result<Tail, AuditError> {
    let read_err = |source| AuditError::Io {
        action: "read",
        path: path.to_path_buf(),
        source,
    };
    // Newline positions found so far, scanning backwards: the last newline ends the last
    // complete line, the one before it (or the start of the file) begins it.
    let mut end_nl: Option<u64> = None;
    let mut pos = len;
    let mut chunk = vec![0u8; TAIL_CHUNK_BYTES];
    while pos > 0 {
        let step = usize::try_from(pos).map_or(TAIL_CHUNK_BYTES, |p| p.min(TAIL_CHUNK_BYTES));
        let start = pos - step as u64;
        let buf = chunk.get_mut(..step).unwrap_or_default();
        file.seek(SeekFrom::Start(start)).map_err(read_err)?;
        file.read_exact(buf).map_err(read_err)?;
        for (i, byte) in buf.iter().enumerate().rev() {
            if *byte != b'\n' {
                continue;
            }
            let at = start + i as u64;
            match end_nl {
                None => end_nl = Some(at),
                Some(end) => return read_line(file, at + 1, end, path),
            }
        }
        if let Some(end) = end_nl
            && end - start > MAX_RECORD_BYTES as u64
        {
            return Err(AuditError::RecordTooLarge {
                path: path.to_path_buf(),
                bytes: usize::try_from(end - start).unwrap_or(usize::MAX),
                limit: MAX_RECORD_BYTES,
            });
        }
        pos = start;
    }
    match end_nl {
        None => Ok(Tail {
            complete_len: 0,
            last_line: None,
        }),
        Some(end) => read_line(file, 0, end, path),
    }
}

/// Reads the line in `start..end` (`end` is its newline).
fn read_line(mut file: &File, start: u64, end: u64, path: &Path) -> Result<Tail, AuditError> {
    let bytes = end - start;
    if bytes > MAX_RECORD_BYTES as u64 {
        return Err(AuditError::RecordTooLarge {
            path: path.to_path_buf(),
            bytes: usize::try_from(bytes).unwrap_or(usize::MAX),
            limit: MAX_RECORD_BYTES,
        });
    }
    let read_err = |source| AuditError::Io {
        action: "read",
        path: path.to_path_buf(),
        source,
    };
    let mut line = Vec::new();
    file.seek(SeekFrom::Start(start)).map_err(read_err)?;
    file.take(bytes).read_to_end(&mut line).map_err(read_err)?;
    Ok(Tail {
        complete_len: end + 1,
        last_line: Some(line),
    })
}

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Records that chained correctly before the first break (all of them when intact).
    pub records: u64,
    /// The hash of the last line that chained correctly (`GENESIS_PREV` for an empty log):
    /// keep it elsewhere to detect a change to the last record or a cut-off end later.
    pub last_hash: String,
    /// The first break, if any; lines after it are not checked.
    pub first_break: Option<ChainBreak>,
}

impl VerifyReport {
    /// Whether every line parsed and chained.
    #[must_use]
    pub fn is_intact(&self) -> bool {
        self.first_break.is_none()
    }
}

/// Where and how the chain breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainBreak {
    /// The line number, from 1.
    pub line: u64,
    /// The line's `seq`, when it has one.
    pub seq: Option<u64>,
    /// What is wrong.
    pub problem: BreakProblem,
}

impl fmt::Display for ChainBreak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}", self.line)?;
        if let Some(seq) = self.seq {
            write!(f, " (seq {seq})")?;
        }
        write!(f, ": {}", self.problem)
    }
}

/// What is wrong at a [`ChainBreak`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BreakProblem {
    /// The line is not a JSON audit record; the parser's message.
    NotARecord(String),
    /// `seq` is not one more than the previous record's (a line was deleted, inserted or
    /// reordered).
    Seq {
        /// The `seq` the chain expects.
        expected: u64,
        /// The `seq` the line has.
        found: u64,
    },
    /// `prev` is not the hash of the previous line (that line, or this field, was changed).
    Prev {
        /// The hash of the previous line.
        expected: String,
        /// The `prev` the line has.
        found: String,
    },
    /// The last line has no newline, or is cut off by the room at the end of the log (a torn
    /// write, or one under way; [`AuditLog::open`] recovers it).
    Torn,
    /// Bytes that are not room follow the room at the end of the log (a torn write a machine
    /// crash left, until [`AuditLog::open_with_head`] recovers it, or an edit).
    AfterRoom,
    /// The line is longer than [`MAX_RECORD_BYTES`].
    TooLong,
}

impl fmt::Display for BreakProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotARecord(message) => write!(f, "not an audit record: {message}"),
            Self::Seq { expected, found } => {
                write!(
                    f,
                    "seq is `{found}`, expected `{expected}` (a record is missing or out of order)"
                )
            }
            Self::Prev { expected, found } => write!(
                f,
                "prev is `{found}`, expected `{expected}` (the previous record was changed)"
            ),
            Self::Torn => f.write_str(
                "the line is cut off: it has no newline, or spaces end it (a torn write or an edit)",
            ),
            Self::AfterRoom => f.write_str(
                "a line of room (spaces) is followed by bytes that are not room: the records should end there (a torn write or an edit)",
            ),
            Self::TooLong => write!(f, "line is longer than {MAX_RECORD_BYTES} bytes"),
        }
    }
}

/// Checks the chain of the log at `path`: every line is a record, `seq` counts up from 0
/// by one, and each `prev` is the hash of the line before. Stops at the first break.
///
/// Runs beside a gateway writing the log: it reads without a lock, and what looks cut off or
/// misplaced is read again under the shared lock (writers take it exclusive for each group),
/// so a record being written at that moment is not taken for a break.
///
/// # Errors
///
/// [`AuditError::Io`] when the file cannot be read. A broken chain is not an error: it is
/// [`VerifyReport::first_break`].
pub fn verify(path: &Path) -> Result<VerifyReport, AuditError> {
    verify_inner(path, None).map(|(report, _)| report)
}

/// As [`verify`], and checks the log against `head` (see `read_head`): the log must hold
/// the head's last record, with the head's hash. Returns how it differs, if it does; when
/// the chain breaks before the head's record, only the break is reported.
///
/// # Errors
///
/// As [`verify`].
pub fn verify_with_head(
    path: &Path,
    head: &AuditHead,
) -> Result<(VerifyReport, Option<HeadProblem>), AuditError> {
    let (report, found) = verify_inner(path, head.last_seq())?;
    let Some(last) = head.last_seq() else {
        return Ok((report, None));
    };
    let problem = match found {
        Some(found) if found == head.hash => None,
        Some(found) => Some(HeadProblem::Differs { seq: last, found }),
        None if report.is_intact() => Some(HeadProblem::Missing {
            first: report.records,
            last,
        }),
        None => None,
    };
    Ok((report, problem))
}

/// [`verify`], and the hash of the record of `seq` `want` when the chain reaches it intact.
fn verify_inner(
    path: &Path,
    want: Option<u64>,
) -> Result<(VerifyReport, Option<String>), AuditError> {
    let mut found = None;
    let report = verify_lines(path, |record, _, hash| {
        if Some(record.seq) == want {
            found = Some(hash.to_owned());
        }
    })?;
    Ok((report, found))
}

impl AuditError {
    /// [`AuditError::Io`] for `action` on the log at `path`, as the argument of a `map_err`.
    pub(crate) fn io(
        action: &'static str,
        path: &Path,
    ) -> impl FnOnce(io::Error) -> AuditError + use<> {
        let path = path.to_path_buf();
        move |source| AuditError::Io {
            action,
            path,
            source,
        }
    }
}

/// The chain check of [`verify`], one line at a time, for readers that go on where they
/// stopped (`toolward audit tail -f`): each line must be a record whose `seq` is the next
/// and whose `prev` is the hash of the line before.
#[derive(Debug, Clone)]
pub struct ChainCheck {
    prev: String,
    next_seq: u64,
    line_no: u64,
}

impl Default for ChainCheck {
    fn default() -> Self {
        Self {
            prev: GENESIS_PREV.to_owned(),
            next_seq: 0,
            line_no: 0,
        }
    }
}

impl ChainCheck {
    /// A check that goes on after `records` records that chained, the last hashing to
    /// `last_hash`: for a reader that keeps what it read (the fleet's checkpoint signer) and
    /// reads only the records after it.
    #[must_use]
    pub fn resume(records: u64, last_hash: &str) -> ChainCheck {
        ChainCheck {
            prev: last_hash.to_owned(),
            next_seq: records,
            line_no: records,
        }
    }

    /// Records that chained so far.
    #[must_use]
    pub fn records(&self) -> u64 {
        self.next_seq
    }

    /// The hash of the last line that chained ([`GENESIS_PREV`] before the first).
    #[must_use]
    pub fn last_hash(&self) -> &str {
        &self.prev
    }

    /// Checks the next complete `line` (without its newline) and returns its record.
    ///
    /// # Errors
    ///
    /// The [`ChainBreak`] at this line; the check does not advance past it.
    pub fn check(&mut self, line: &[u8]) -> Result<AuditRecord, ChainBreak> {
        let line_no = self.line_no + 1;
        let brk = |seq, problem| ChainBreak {
            line: line_no,
            seq,
            problem,
        };
        if line.len() > MAX_RECORD_BYTES {
            return Err(brk(None, BreakProblem::TooLong));
        }
        let record: AuditRecord = serde_json::from_slice(line)
            .map_err(|err| brk(None, BreakProblem::NotARecord(err.to_string())))?;
        if record.seq != self.next_seq {
            return Err(brk(
                Some(record.seq),
                BreakProblem::Seq {
                    expected: self.next_seq,
                    found: record.seq,
                },
            ));
        }
        if record.prev != self.prev {
            return Err(brk(
                Some(record.seq),
                BreakProblem::Prev {
                    expected: self.prev.clone(),
                    found: record.prev.clone(),
                },
            ));
        }
        self.prev = sha256_hex(line);
        self.next_seq = self.next_seq.saturating_add(1);
        self.line_no = line_no;
        Ok(record)
    }

    /// The break of a last line without its newline (`too_long` when it passed the limit).
    #[must_use]
    pub fn torn(&self, too_long: bool) -> ChainBreak {
        self.torn_at(if too_long {
            BreakProblem::TooLong
        } else {
            BreakProblem::Torn
        })
    }

    /// The break `problem` at the line after the last that chained.
    fn torn_at(&self, problem: BreakProblem) -> ChainBreak {
        ChainBreak {
            line: self.line_no + 1,
            seq: None,
            problem,
        }
    }
}

/// Walks the chain of the log at `path` as [`verify`] does, handing each intact record and
/// its line to `visit`; the report says where the chain breaks, if it does.
///
/// # Errors
///
/// As [`verify`].
pub fn read_chain(
    path: &Path,
    mut visit: impl FnMut(&AuditRecord, &[u8]),
) -> Result<VerifyReport, AuditError> {
    verify_lines(path, |record, line, _| visit(record, line))
}

/// Walks the chain, telling `seen` each intact record, its line and its hash. The records
/// end at the room at the end of the log; a byte after it that is not room breaks the chain.
fn verify_lines(
    path: &Path,
    mut seen: impl FnMut(&AuditRecord, &[u8], &str),
) -> Result<VerifyReport, AuditError> {
    let read = |source| AuditError::Io {
        action: "read",
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(AuditError::io("open", path))?;
    let mut reader = BufReader::with_capacity(TAIL_CHUNK_BYTES, &file);
    let mut chain = ChainCheck::default();
    let mut buf = Vec::new();
    // Where the next line begins, and whether the log is read under a shared lock.
    let mut at = 0;
    let mut locked = false;
    let report = |chain: &ChainCheck, first_break| VerifyReport {
        records: chain.records(),
        last_hash: chain.last_hash().to_owned(),
        first_break,
    };
    loop {
        let problem = match next_line(&mut reader, &mut buf).map_err(read)? {
            NextLine::End => return Ok(report(&chain, None)),
            NextLine::Line => {
                match chain.check(&buf) {
                    Ok(record) => {
                        at += buf.len() as u64 + 1;
                        seen(&record, &buf, chain.last_hash());
                    }
                    Err(brk) => return Ok(report(&chain, Some(brk))),
                }
                continue;
            }
            NextLine::Room => {
                if !has_bytes_past_room(&mut reader).map_err(read)? {
                    return Ok(report(&chain, None));
                }
                BreakProblem::AfterRoom
            }
            NextLine::Torn { too_long: true } => BreakProblem::TooLong,
            NextLine::Torn { too_long: false } => BreakProblem::Torn,
        };
        if locked || problem == BreakProblem::TooLong {
            return Ok(report(&chain, Some(chain.torn_at(problem))));
        }
        // A writer may be halfway through its write: read the rest again under the lock
        // writers take (shared), when nobody is writing.
        reader = relock(&file, at).map_err(read)?;
        locked = true;
    }
}

/// Takes the shared lock on the log `file` (writers take it exclusive, one group at a time)
/// and returns a reader from `at`: what it reads no writer is changing.
fn relock(file: &File, at: u64) -> io::Result<BufReader<&File>> {
    file.lock_shared()?;
    let mut handle = file;
    handle.seek(SeekFrom::Start(at))?;
    Ok(BufReader::with_capacity(TAIL_CHUNK_BYTES, file))
}

/// Reads `reader` to its end; `true` when a byte on the way is not room ([`is_room`]).
fn has_bytes_past_room(reader: &mut impl BufRead) -> io::Result<bool> {
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(false);
        }
        if !chunk.iter().all(|byte| is_room(*byte)) {
            return Ok(true);
        }
        let n = chunk.len();
        reader.consume(n);
    }
}

fn now_ms() -> Result<u64, AuditError> {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| AuditError::Clock)?;
    Ok(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, OpenOptions};
    use std::os::unix::fs::PermissionsExt;

    fn event(kind: AuditKind, call: &str) -> AuditEvent {
        AuditEvent {
            call_id: Some(call.to_owned()),
            server: Some("fs".to_owned()),
            tool: Some("fs__read_file".to_owned()),
            upstream_tool: Some("read_file".to_owned()),
            effect: Some("read-only".to_owned()),
            arguments_sha256: Some("ab".repeat(32)),
            ..AuditEvent::new(kind)
        }
    }

    /// A log of `n` records in a fresh directory.
    fn log_of(n: u64) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, AuditSync::Always).unwrap();
        for i in 0..n {
            log.append(event(AuditKind::CallReceived, &format!("c{i}")))
                .unwrap();
        }
        (dir, path)
    }

    /// The record lines of the log at `path`: its lines up to the room at its end.
    fn lines(path: &Path) -> Vec<String> {
        fs::read_to_string(path)
            .unwrap()
            .lines()
            .take_while(|line| !line.starts_with([' ', '\n']) && !line.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// Writes `bytes` where the next record goes (after the last record, over the room), as
    /// a writer killed in the middle of its write leaves them.
    fn write_at_end(path: &Path, bytes: &[u8]) {
        let end: usize = lines(path).iter().map(|line| line.len() + 1).sum();
        let file = OpenOptions::new().write(true).open(path).unwrap();
        file.write_all_at(bytes, end as u64).unwrap();
    }

    /// Writes `bytes` to a new file of mode 0600, as toolward creates logs.
    fn write_private(path: &Path, bytes: &[u8]) {
        fs::write(path, bytes).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
    }

    fn write_lines(path: &Path, lines: &[String]) {
        let mut text = lines.join("\n");
        text.push('\n');
        fs::write(path, text).unwrap();
    }

    #[test]
    fn a_subscriber_hears_a_record_once_durable_synced_with_always_and_written_with_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, AuditSync::Always).unwrap();
        let mut heard = log.subscribe();
        assert_eq!(log.write_now([event(AuditKind::Result, "a")]).unwrap(), 0);
        assert!(heard.try_recv().is_err(), "written, not yet synced: not heard");
        log.append(event(AuditKind::CallReceived, "b")).unwrap();
        let (first, second) = (heard.try_recv().unwrap(), heard.try_recv().unwrap());
        assert_eq!((first.seq, second.seq), (0, 1));
        assert_eq!(first.event.call_id.as_deref(), Some("a"));
        let stored = lines(&path);
        assert_eq!(serde_json::to_string(&first).unwrap(), stored[0]);
        assert_eq!(serde_json::to_string(&second).unwrap(), stored[1]);
        drop(log);

        let log = AuditLog::open(&path, AuditSync::None).unwrap();
        let mut heard = log.subscribe();
        log.write_now([event(AuditKind::Result, "c")]).unwrap();
        let third = heard.try_recv().unwrap();
        assert_eq!((third.seq, third.prev.as_str()), (2, sha256_hex(stored[1].as_bytes()).as_str()));
    }

    #[test]
    fn records_written_without_a_sync_are_covered_by_the_next_append_and_its_one_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, AuditSync::Always).unwrap();
        assert_eq!(log.write_now([event(AuditKind::Result, "a")]).unwrap(), 0);
        assert_eq!(log.syncs(), 0);
        let last = log
            .append_batch([
                event(AuditKind::CallReceived, "b"),
                event(AuditKind::Decision, "b"),
            ])
            .unwrap();
        assert_eq!(last, Some(2));
        assert_eq!((log.writes(), log.syncs()), (2, 1));
        assert_eq!(verify(&path).unwrap().records, 3);
    }

    #[test]
    fn a_record_written_without_a_sync_is_synced_by_the_timer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, AuditSync::Always).unwrap();
        log.write([event(AuditKind::Result, "a")]).unwrap();
        let deadline = std::time::Instant::now() + SYNC_DELAY * 20;
        while log.syncs() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "no sync within {:?}",
                SYNC_DELAY * 20
            );
            std::thread::sleep(SYNC_DELAY / 10);
        }
        assert_eq!(log.syncs(), 1);
    }

    #[test]
    fn the_log_is_created_owner_only_and_a_log_others_can_read_is_refused_with_the_fix() {
        let (_dir, path) = log_of(1);
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = AuditLog::open(&path, AuditSync::None).unwrap_err();
        assert!(matches!(err, AuditError::Mode { mode: 0o644, .. }), "{err}");
        let message = err.to_string();
        assert!(
            message.contains(&format!("`chmod 600 {}`", path.display())),
            "{message}"
        );
    }

    #[test]
    fn two_logs_open_on_one_file_interleave_into_one_chain() {
        let (_dir, path) = log_of(1);
        let a = AuditLog::open(&path, AuditSync::Always).unwrap();
        let b = AuditLog::open(&path, AuditSync::None).unwrap();
        for i in 0..20 {
            a.append(event(AuditKind::CallReceived, &format!("a{i}")))
                .unwrap();
            b.write_now([event(AuditKind::CallReceived, &format!("b{i}"))])
                .unwrap();
        }
        drop((a, b));
        let report = verify(&path).unwrap();
        assert!(report.is_intact(), "{:?}", report.first_break);
        assert_eq!(report.records, 41);
    }

    #[test]
    fn a_log_deleted_or_replaced_while_open_refuses_every_later_record() {
        let (_dir, path) = log_of(1);
        let log = AuditLog::open(&path, AuditSync::Always).unwrap();
        fs::remove_file(&path).unwrap();
        let err = log.append(event(AuditKind::Decision, "c1")).unwrap_err();
        assert!(
            matches!(err, AuditError::Replaced { how: "deleted", .. }),
            "{err}"
        );
        let again = log.append(event(AuditKind::Decision, "c2")).unwrap_err();
        assert!(matches!(again, AuditError::Failed { .. }), "{again}");

        let (_dir, path) = log_of(1);
        let log = AuditLog::open(&path, AuditSync::Always).unwrap();
        let other = path.with_extension("other");
        fs::write(&other, b"").unwrap();
        fs::rename(&other, &path).unwrap();
        let err = log.append(event(AuditKind::Decision, "c1")).unwrap_err();
        assert!(matches!(err, AuditError::Replaced { .. }), "{err}");
    }

    #[test]
    fn a_log_cut_short_while_open_refuses_every_later_record() {
        let (_dir, path) = log_of(2);
        let log = AuditLog::open(&path, AuditSync::Always).unwrap();
        let first = lines(&path).remove(0);
        write_lines(&path, &[first]);
        let err = log.append(event(AuditKind::Decision, "c2")).unwrap_err();
        assert!(matches!(err, AuditError::CutShort { .. }), "{err}");
    }

    /// A state folder and a log with a head in it, of `n` records.
    fn headed_log_of(n: u64) -> (tempfile::TempDir, PathBuf, crate::state_dir::StateDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let state = crate::state_dir::StateDir::open(&dir.path().join("state")).unwrap();
        let log = AuditLog::open_with_head(&path, AuditSync::Always, &state).unwrap();
        for i in 0..n {
            log.append(event(AuditKind::CallReceived, &format!("c{i}")))
                .unwrap();
        }
        drop(log);
        (dir, path, state)
    }

    /// The length of the record lines of the log at `path`, newlines included.
    fn records_len(path: &Path) -> u64 {
        lines(path).iter().map(|line| line.len() as u64 + 1).sum()
    }

    #[test]
    fn records_go_into_the_room_at_the_end_and_the_file_grows_only_when_they_fill_it() {
        let (_dir, path) = log_of(1);
        let size = fs::metadata(&path).unwrap().len();
        assert_eq!(size, records_len(&path) + ROOM_BYTES);
        let log = AuditLog::open(&path, AuditSync::Always).unwrap();
        for i in 1..20 {
            log.append(event(AuditKind::Decision, &format!("c{i}")))
                .unwrap();
            assert_eq!(fs::metadata(&path).unwrap().len(), size, "record {i}");
        }
        // The room is spaces ended by a newline, after the records.
        let bytes = fs::read(&path).unwrap();
        let room = bytes
            .get(usize::try_from(records_len(&path)).unwrap()..)
            .unwrap();
        assert!(room.iter().rev().skip(1).all(|b| *b == b' '));
        assert_eq!(room.last(), Some(&b'\n'));
        // A record larger than the room left: written after the last, with new room after it.
        let big = "x".repeat(usize::try_from(ROOM_BYTES).unwrap());
        log.append(AuditEvent {
            reason: Some(big),
            ..event(AuditKind::Refusal, "big")
        })
        .unwrap();
        drop(log);
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            records_len(&path) + ROOM_BYTES
        );
        let report = verify(&path).unwrap();
        assert!(report.is_intact(), "{:?}", report.first_break);
        assert_eq!(report.records, 21);
    }

    #[test]
    fn a_record_being_written_is_read_once_its_writer_lets_go_not_taken_for_a_break() {
        let (_dir, path) = log_of(3);
        let all = lines(&path);
        write_lines(&path, &all[..2]);
        let last = format!("{}\n", all[2]);
        let (first_half, second_half) = last.as_bytes().split_at(last.len() / 2);
        // A writer holding the lock, halfway through its write.
        let writer = OpenOptions::new().write(true).open(&path).unwrap();
        writer.lock().unwrap();
        let end = records_len(&path);
        writer.write_all_at(first_half, end).unwrap();
        let reading = {
            let path = path.clone();
            std::thread::spawn(move || {
                let report = verify(&path).unwrap();
                let followed = read::Follower::new(&path).poll().unwrap().len();
                (report, followed)
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            !reading.is_finished(),
            "the reader did not wait for the writer"
        );
        writer
            .write_all_at(second_half, end + first_half.len() as u64)
            .unwrap();
        writer.unlock().unwrap();
        let (report, followed) = reading.join().unwrap();
        assert!(report.is_intact(), "{:?}", report.first_break);
        assert_eq!((report.records, followed), (3, 3));
    }

    #[test]
    fn a_line_cut_off_by_spaces_in_the_middle_of_the_log_is_a_break_for_every_reader() {
        let (_dir, path) = log_of(3);
        let mut bytes = fs::read(&path).unwrap();
        let end = bytes.iter().position(|b| *b == b'\n').unwrap();
        // The first record's closing brace becomes a space: it reads like a record cut off.
        bytes[end - 1] = b' ';
        fs::write(&path, &bytes).unwrap();
        let brk = verify(&path).unwrap().first_break.unwrap();
        assert_eq!((brk.line, brk.problem.clone()), (1, BreakProblem::Torn));
        match read::Follower::new(&path).poll() {
            Err(read::ReadError::Broken(found)) => assert_eq!(found, brk),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_log_from_before_the_room_continues_and_gets_room() {
        let (_dir, path) = log_of(2);
        let all = lines(&path);
        write_lines(&path, &all);
        let log = AuditLog::open(&path, AuditSync::Always).unwrap();
        assert_eq!(log.next_seq(), 2);
        log.append(event(AuditKind::Decision, "c2")).unwrap();
        drop(log);
        assert_eq!(verify(&path).unwrap().records, 3);
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            records_len(&path) + ROOM_BYTES
        );
    }

    #[test]
    fn what_a_machine_crash_tore_after_the_heads_record_is_cut_at_open_and_recorded() {
        let (_dir, path, state) = headed_log_of(3);
        let kept = lines(&path);
        // After a crash, pages of writes no sync covered reach the disk in any order: here a
        // page of room where a record began, then the end of one record and a whole record
        // that chains to nothing before it.
        let mut torn = vec![b' '; 100];
        torn.extend_from_slice(b"ult\",\"is_error\":false}\n");
        torn.extend_from_slice(kept[2].as_bytes());
        torn.push(b'\n');
        write_at_end(&path, &torn);
        let broken = verify(&path).unwrap();
        assert_eq!(broken.records, 3);
        assert_eq!(broken.first_break.unwrap().problem, BreakProblem::AfterRoom);

        let log = AuditLog::open_with_head(&path, AuditSync::Always, &state).unwrap();
        assert_eq!(log.next_seq(), 4);
        log.append(event(AuditKind::Decision, "c4")).unwrap();
        drop(log);
        let report = verify(&path).unwrap();
        assert!(report.is_intact(), "{:?}", report.first_break);
        assert_eq!(report.records, 5);
        let all = lines(&path);
        assert_eq!(all[..3], kept[..]);
        let recovered: AuditRecord = serde_json::from_str(&all[3]).unwrap();
        assert_eq!(recovered.event.kind, AuditKind::Recovered);
        let cut = torn.len() as u64;
        assert_eq!(recovered.event.truncated_bytes, Some(cut - 1));
        assert_eq!(
            recovered.event.truncated_sha256,
            Some(sha256_hex(torn.get(..torn.len() - 1).unwrap()))
        );
    }

    #[test]
    fn records_after_the_heads_record_that_chain_are_kept_at_open() {
        let (_dir, path, state) = headed_log_of(3);
        let (head, _) = read_head(&state, &path).unwrap();
        // Records a second process wrote and synced, with its head write lost in a crash.
        let log = AuditLog::open(&path, AuditSync::Always).unwrap();
        log.append(event(AuditKind::Decision, "c3")).unwrap();
        drop(log);
        assert_eq!(read_head(&state, &path).unwrap().0, head);
        let log = AuditLog::open_with_head(&path, AuditSync::Always, &state).unwrap();
        assert_eq!(log.next_seq(), 4);
        assert_eq!(log.head().unwrap().records, 4);
    }

    #[test]
    fn a_head_without_its_end_still_opens_its_log_and_is_rewritten_with_it() {
        let (_dir, path, state) = headed_log_of(2);
        let (head, head_path) = read_head(&state, &path).unwrap();
        let head = head.unwrap();
        let mut old = serde_json::to_vec(&head).unwrap();
        old.resize(127, b' ');
        old.push(b'\n');
        fs::write(&head_path, &old).unwrap();
        let log = AuditLog::open_with_head(&path, AuditSync::Always, &state).unwrap();
        assert_eq!(log.next_seq(), 2);
        drop(log);
        let text = fs::read_to_string(&head_path).unwrap();
        let end = format!(r#""end":{}"#, records_len(&path));
        assert!(text.contains(&end), "{text}");
    }

    #[test]
    fn the_head_follows_every_sync_and_names_the_last_record() {
        let (_dir, path, state) = headed_log_of(3);
        let (head, head_path) = read_head(&state, &path).unwrap();
        let head = head.unwrap();
        assert_eq!(head.records, 3);
        assert_eq!(head.hash, verify(&path).unwrap().last_hash);
        assert_eq!(
            fs::metadata(&head_path).unwrap().len(),
            head::HEAD_FILE_BYTES as u64
        );
        let mode = fs::metadata(&head_path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let log = AuditLog::open_with_head(&path, AuditSync::Always, &state).unwrap();
        assert_eq!(log.head(), Some(head));
    }

    #[test]
    fn a_log_cut_short_is_refused_at_open_naming_the_missing_records_and_accept_continues_it() {
        let (_dir, path, state) = headed_log_of(5);
        let mut all = lines(&path);
        all.truncate(3);
        write_lines(&path, &all);
        let err = AuditLog::open_with_head(&path, AuditSync::Always, &state).unwrap_err();
        assert!(
            matches!(
                &err,
                AuditError::HeadMismatch {
                    problem: HeadProblem::Missing { first: 3, last: 4 },
                    ..
                }
            ),
            "{err}"
        );
        let message = err.to_string();
        assert!(message.contains("seq 3 to 4 are missing"), "{message}");
        assert!(
            message.contains("toolward audit accept --config"),
            "{message}"
        );

        let (head, _) = read_head(&state, &path).unwrap();
        let (report, problem) = verify_with_head(&path, &head.unwrap()).unwrap();
        assert!(report.is_intact());
        assert_eq!(problem, Some(HeadProblem::Missing { first: 3, last: 4 }));

        let (log, accepted) = AuditLog::accept(&path, AuditSync::Always, &state).unwrap();
        assert_eq!(accepted, Some(HeadProblem::Missing { first: 3, last: 4 }));
        drop(log);
        let recovered: AuditRecord = serde_json::from_str(&lines(&path)[3]).unwrap();
        assert_eq!(recovered.event.kind, AuditKind::Recovered);
        drop(AuditLog::open_with_head(&path, AuditSync::Always, &state).unwrap());
    }

    #[test]
    fn a_replaced_log_is_refused_at_open() {
        let (_dir, path, state) = headed_log_of(3);
        let mut all = lines(&path);
        all[2] = all[2].replace("read-only", "destructive");
        write_lines(&path, &all);
        let err = AuditLog::open_with_head(&path, AuditSync::Always, &state).unwrap_err();
        assert!(
            matches!(
                &err,
                AuditError::HeadMismatch {
                    problem: HeadProblem::Differs { seq: 2, .. },
                    ..
                }
            ),
            "{err}"
        );
        fs::remove_file(&path).unwrap();
        let err = AuditLog::open_with_head(&path, AuditSync::Always, &state).unwrap_err();
        assert!(
            matches!(
                &err,
                AuditError::HeadMismatch {
                    problem: HeadProblem::Missing { first: 0, last: 2 },
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_log_that_runs_past_its_head_opens_when_the_heads_record_is_in_it() {
        let (_dir, path, state) = headed_log_of(3);
        // Records a crash kept past the last head: written by a log without the head.
        let log = AuditLog::open(&path, AuditSync::None).unwrap();
        log.write_now([
            event(AuditKind::Result, "c3"),
            event(AuditKind::Result, "c4"),
        ])
        .unwrap();
        drop(log);
        let log = AuditLog::open_with_head(&path, AuditSync::Always, &state).unwrap();
        assert_eq!(log.head().unwrap().records, 5);
    }

    #[test]
    fn appends_from_many_threads_form_one_chain_with_at_most_one_sync_each() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, AuditSync::Always).unwrap();
        std::thread::scope(|scope| {
            for t in 0..8 {
                let log = &log;
                scope.spawn(move || {
                    for i in 0..50 {
                        log.append(event(AuditKind::CallReceived, &format!("t{t}-{i}")))
                            .unwrap();
                    }
                });
            }
        });
        let report = verify(&path).unwrap();
        assert!(report.is_intact(), "{:?}", report.first_break);
        assert_eq!(report.records, 400);
        assert!(log.syncs() <= 400, "{} syncs", log.syncs());
        eprintln!("400 records from 8 threads: {} syncs", log.syncs());
    }

    #[test]
    fn chain_of_appended_records_verifies() {
        let (_dir, path) = log_of(5);
        let report = verify(&path).unwrap();
        assert!(report.is_intact(), "{:?}", report.first_break);
        assert_eq!(report.records, 5);
        let last = lines(&path).pop().unwrap();
        assert_eq!(report.last_hash, sha256_hex(last.as_bytes()));
    }

    #[test]
    fn record_has_seq_time_prev_kind_first_and_omits_absent_fields() {
        let (_dir, path) = log_of(2);
        let all = lines(&path);
        assert!(all[0].starts_with(r#"{"seq":0,"time":"#), "{}", all[0]);
        let first: serde_json::Value = serde_json::from_str(&all[0]).unwrap();
        assert_eq!(first["prev"], GENESIS_PREV);
        assert_eq!(first["kind"], "call-received");
        assert!(first.get("decision").is_none());
        assert!(first.get("arguments").is_none());
        let second: serde_json::Value = serde_json::from_str(&all[1]).unwrap();
        assert_eq!(second["seq"], 1);
        assert_eq!(second["prev"], sha256_hex(all[0].as_bytes()));
    }

    #[test]
    fn empty_log_verifies_with_genesis_hash() {
        let (_dir, path) = log_of(0);
        let report = verify(&path).unwrap();
        assert!(report.is_intact());
        assert_eq!(report.records, 0);
        assert_eq!(report.last_hash, GENESIS_PREV);
    }

    #[test]
    fn editing_one_record_breaks_verification_at_the_next_line() {
        let (_dir, path) = log_of(5);
        let mut all = lines(&path);
        all[2] = all[2].replace("read-only", "destructive");
        write_lines(&path, &all);
        let report = verify(&path).unwrap();
        let brk = report.first_break.unwrap();
        assert_eq!(brk.line, 4);
        assert_eq!(brk.seq, Some(3));
        assert!(matches!(brk.problem, BreakProblem::Prev { .. }), "{brk}");
        assert_eq!(report.records, 3);
    }

    #[test]
    fn editing_a_records_prev_breaks_verification_at_that_line() {
        let (_dir, path) = log_of(3);
        let mut all = lines(&path);
        let original: serde_json::Value = serde_json::from_str(&all[1]).unwrap();
        let prev = original["prev"].as_str().unwrap().to_owned();
        all[1] = all[1].replace(&prev, &"f".repeat(64));
        write_lines(&path, &all);
        let brk = verify(&path).unwrap().first_break.unwrap();
        assert_eq!((brk.line, brk.seq), (2, Some(1)));
        assert!(matches!(brk.problem, BreakProblem::Prev { .. }));
    }

    #[test]
    fn deleting_a_line_breaks_verification_there() {
        let (_dir, path) = log_of(5);
        let mut all = lines(&path);
        all.remove(2);
        write_lines(&path, &all);
        let brk = verify(&path).unwrap().first_break.unwrap();
        assert_eq!(brk.line, 3);
        assert_eq!(
            brk.problem,
            BreakProblem::Seq {
                expected: 2,
                found: 3
            }
        );
        assert!(
            brk.to_string()
                .starts_with("line 3 (seq 3): seq is `3`, expected `2`"),
            "{brk}"
        );
    }

    #[test]
    fn a_line_that_is_not_a_record_breaks_verification() {
        let (_dir, path) = log_of(2);
        let mut all = lines(&path);
        all.insert(1, "not json".to_owned());
        write_lines(&path, &all);
        let brk = verify(&path).unwrap().first_break.unwrap();
        assert_eq!(brk.line, 2);
        assert!(matches!(brk.problem, BreakProblem::NotARecord(_)));
    }

    #[test]
    fn reopen_continues_the_chain() {
        let (_dir, path) = log_of(3);
        let log = AuditLog::open(&path, AuditSync::Always).unwrap();
        assert_eq!(log.next_seq(), 3);
        assert_eq!(log.append(event(AuditKind::Decision, "c3")).unwrap(), 3);
        drop(log);
        let report = verify(&path).unwrap();
        assert!(report.is_intact(), "{:?}", report.first_break);
        assert_eq!(report.records, 4);
    }

    #[test]
    fn torn_last_line_is_truncated_and_recorded_on_open() {
        let (_dir, path) = log_of(3);
        let torn = br#"{"seq":3,"time":1,"prev":"00"#;
        write_at_end(&path, torn);
        assert_eq!(
            verify(&path).unwrap().first_break.unwrap().problem,
            BreakProblem::Torn
        );

        let log = AuditLog::open(&path, AuditSync::None).unwrap();
        assert_eq!(log.next_seq(), 4);
        log.append(event(AuditKind::Result, "c3")).unwrap();
        drop(log);

        let report = verify(&path).unwrap();
        assert!(report.is_intact(), "{:?}", report.first_break);
        assert_eq!(report.records, 5);
        let recovered: AuditRecord = serde_json::from_str(&lines(&path)[3]).unwrap();
        assert_eq!(recovered.event.kind, AuditKind::Recovered);
        assert_eq!(recovered.event.truncated_bytes, Some(torn.len() as u64));
        assert_eq!(recovered.event.truncated_sha256, Some(sha256_hex(torn)));
    }

    #[test]
    fn torn_only_line_leaves_a_log_starting_with_recovered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        write_private(&path, b"{\"seq\":0");
        drop(AuditLog::open(&path, AuditSync::Always).unwrap());
        let report = verify(&path).unwrap();
        assert!(report.is_intact());
        assert_eq!(report.records, 1);
        let first: AuditRecord = serde_json::from_str(&lines(&path)[0]).unwrap();
        assert_eq!((first.seq, first.event.kind), (0, AuditKind::Recovered));
    }

    #[test]
    fn file_ending_in_bytes_that_are_not_a_torn_record_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notes.txt");
        write_private(&path, b"precious text without a newline");
        let err = AuditLog::open(&path, AuditSync::Always).unwrap_err();
        assert!(
            matches!(err, AuditError::ForeignTail { bytes: 31, .. }),
            "{err}"
        );
        assert_eq!(fs::read(&path).unwrap(), b"precious text without a newline");
    }

    #[test]
    fn log_ending_in_a_complete_line_that_is_not_a_record_is_refused() {
        let (_dir, path) = log_of(1);
        write_at_end(&path, b"garbage\n");
        let err = AuditLog::open(&path, AuditSync::Always).unwrap_err();
        assert!(matches!(err, AuditError::Corrupt { .. }), "{err}");
    }

    #[test]
    fn reopen_finds_the_last_line_across_read_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, AuditSync::None).unwrap();
        let big = "x".repeat(TAIL_CHUNK_BYTES + 10);
        for i in 0..3 {
            log.append(AuditEvent {
                reason: Some(big.clone()),
                ..event(AuditKind::Refusal, &format!("c{i}"))
            })
            .unwrap();
        }
        drop(log);
        let log = AuditLog::open(&path, AuditSync::None).unwrap();
        assert_eq!(log.next_seq(), 3);
        log.append(event(AuditKind::Refusal, "c3")).unwrap();
        drop(log);
        assert!(verify(&path).unwrap().is_intact());
    }

    #[test]
    fn batch_appends_chain_and_components_are_stamped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, AuditSync::Always).unwrap();
        log.set_components(ComponentHashes {
            rules_sha256: Some("1".repeat(64)),
            policy_sha256: Some("2".repeat(64)),
            ..ComponentHashes::default()
        });
        let batch = vec![event(AuditKind::Load, "l0"), event(AuditKind::Load, "l1")];
        assert_eq!(log.append_batch(batch).unwrap(), Some(1));
        assert_eq!(log.append_batch(Vec::new()).unwrap(), None);
        assert_eq!(log.append(event(AuditKind::CallReceived, "c0")).unwrap(), 2);
        drop(log);
        assert!(verify(&path).unwrap().is_intact());
        for line in lines(&path) {
            let record: AuditRecord = serde_json::from_str(&line).unwrap();
            assert_eq!(
                record.event.components.unwrap().policy_sha256,
                Some("2".repeat(64))
            );
        }
    }

    #[test]
    fn concurrent_appends_from_threads_keep_one_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = std::sync::Arc::new(AuditLog::open(&path, AuditSync::None).unwrap());
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for i in 0..25 {
                        log.append(event(AuditKind::Forwarded, &format!("t{t}-{i}")))
                            .unwrap();
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        log.sync().unwrap();
        drop(log);
        let report = verify(&path).unwrap();
        assert!(report.is_intact(), "{:?}", report.first_break);
        assert_eq!(report.records, 100);
    }

    #[test]
    fn records_round_trip_through_serde() {
        let record = AuditRecord {
            seq: 7,
            time: 1_700_000_000_000,
            prev: GENESIS_PREV.to_owned(),
            event: AuditEvent {
                decision: Some(AuditDecision::Hold),
                reason: Some("needs approval".to_owned()),
                arguments: Some(r#"{"path":"/tmp/x"}"#.to_owned()),
                detail: Some(serde_json::json!({"tools": 3})),
                ..event(AuditKind::Decision, "c7")
            },
        };
        let text = serde_json::to_string(&record).unwrap();
        assert!(text.contains(r#""decision":"hold""#));
        let back: AuditRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, record);
    }
}
