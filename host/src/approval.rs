//! Approvals: a person's yes or no on a call the policy held, and who gave it through which
//! channel.
//!
//! The call path ([`crate::call`]) asks an [`Approver`] and bounds the wait with the
//! approval timeout (`limits.approval_timeout_ms`); no answer in time is a deny. Every answer
//! comes back as an [`Answer`]: the verdict and [`AnsweredBy`] (the [`Channel`] and the
//! answerer), which the `approval-answered` audit record carries as `answered_by`. Three
//! approvers come with the library:
//!
//! - [`DenyAll`]: no person is reachable, every held call is refused;
//! - [`QueueApprover`]: a pending queue in the state folder, answered from another terminal
//!   with `toolward approvals approve ID` or `deny ID` (this module's [`list_queue`] and
//!   [`answer`]); the answerer is the operating-system user who ran the command;
//! - [`FnApprover`]: a closure, for embedders and tests (`toolward call` asks on the terminal
//!   through one, naming the terminal's user).
//!
//! The gateway adds one that asks through MCP elicitation ([`crate::gateway`]); its answerer
//! is the principal of the client's connection.
//!
//! # Binding and authentication
//!
//! An approval is single-use and bound to one call: the call id (a fresh ULID per call), the
//! SHA-256 of the canonical arguments, and the tool's pins (SHA-256 of its description and of
//! its input schema). An answer in the queue counts only when it carries an HMAC-SHA256, under
//! the key `<state_dir>/approval-key` ([`APPROVAL_KEY`], made on first use, `0600`, read only
//! by `toolward`), over exactly those four values, the verdict, the reason and the answerer.
//! Any other answer file (no MAC, a wrong MAC, the MAC of another call or other arguments, a
//! file that is not an answer) is a forgery: it is removed, recorded as an `approval-forged`
//! audit record naming the file and why (at most [`MAX_FORGERIES_AUDITED`] per call), and the
//! call keeps waiting for a real answer or its timeout.
//!
//! The pending entry is MAC'd too, by the waiting process: `toolward approvals` refuses to
//! show as valid, approve or deny an entry whose MAC fails or whose `arguments` text does not
//! hash to its `arguments_sha256`, so a hand-edited entry cannot show one call and approve
//! another.
//!
//! # Files, and several processes on one queue
//!
//! `<state_dir>/approvals/pending/<call_id>.json` holds an [`ApprovalRequest`] and its MAC;
//! `<state_dir>/approvals/answers/<call_id>.json` holds the answer. Both folders are reached
//! through the state folder's [`StateDir`] (`0700`, owner checked); files are `0600` and read
//! back bounded ([`MAX_APPROVAL_FILE_BYTES`]).
//!
//! Several `toolward serve` and `toolward call` processes may share one state folder. The
//! waiting process holds an exclusive lock (`flock`) on its pending entry from before the
//! entry appears (the entry is written under a temporary name, locked, then renamed) until
//! after it is removed. A pending entry whose lock anyone can take is abandoned: its process
//! ended. [`abandon_pending`], run at every start, removes only abandoned entries, so no start
//! removes the entry of a call another process is still holding. An answer is placed with a
//! hard link from a temporary file, which fails when an answer exists: of two answers given
//! at once, the first is final.
//!
//! # Showing requests to a person
//!
//! Everything in a request comes from the model or a server. [`display_request`] (the
//! terminal of `toolward call`, `toolward approvals list`) and [`display_arguments`] (also in
//! the elicitation message) show every top-level argument name, each value cut to
//! [`MAX_DISPLAYED_VALUE_CHARS`] with its full length stated, and escape control,
//! bidirectional and invisible characters with [`text::escape`], so what a person
//! approves is what they read.

use std::fmt;
use std::future::Future;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use cap_std::fs::{Dir, MetadataExt, OpenOptions, OpenOptionsExt};
use serde::{Deserialize, Serialize};

use crate::audit::AuditStore;
use crate::audit::{AuditEvent, AuditKind};
use crate::canonical;
pub use crate::identity::{AnsweredBy, Channel, MAX_PASSWD_BYTES, OsUser, current_os_user};
use crate::state_dir::{Key, StateDir, StateError, check_private};
use crate::text;

/// How often a [`QueueApprover`] looks for an answer file.
pub const QUEUE_POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Largest request or answer file read back, in bytes: 64 MiB. A request holds one call's
/// canonical arguments; the bound keeps a stray huge file from taking unbounded memory.
pub const MAX_APPROVAL_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Most pending requests [`list_queue`] reads: far more than a person can review.
pub const MAX_PENDING_REQUESTS: usize = 1024;

/// Longest call id accepted by [`answer`], in characters. Call ids are ULIDs (26
/// characters); the bound and the character check keep an id from naming another path.
pub const MAX_CALL_ID_CHARS: usize = 64;

/// Most characters of one argument's value (its canonical JSON text) shown to a person; the
/// rest is elided and the value's full length stated. Per value, so a long `content` never
/// pushes `path` out of sight.
pub const MAX_DISPLAYED_VALUE_CHARS: usize = 512;

/// Most characters of one argument's name shown to a person; a longer name is cut and its
/// full length stated.
pub const MAX_DISPLAYED_NAME_CHARS: usize = 128;

/// Most `approval-forged` records written for one held call: a process that keeps dropping
/// answer files cannot fill the audit log. Forgeries past it are still ignored and logged.
pub const MAX_FORGERIES_AUDITED: usize = 16;

/// The key (in the state folder) that MACs pending entries and answers.
pub const APPROVAL_KEY: &str = "approval-key";

/// Pending requests, one file per held call.
const PENDING_DIR: &str = "approvals/pending";
/// Answers, one file per answered call.
const ANSWERS_DIR: &str = "approvals/answers";

/// What a pending entry's MAC starts with, so it can never pass as an answer's.
const REQUEST_MAC_DOMAIN: &[u8] = b"toolward approval request v1";
/// What an answer's MAC starts with.
const ANSWER_MAC_DOMAIN: &[u8] = b"toolward approval answer v1";

/// Errors of the approval queue. Each names the call or the file it is about.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// The call was answered already: the first answer is final.
    #[error("call `{call_id}` was answered already; the first answer is final")]
    AlreadyAnswered {
        /// The call id.
        call_id: String,
    },
    /// A call id that is not a ULID-like token (letters and digits only).
    #[error("`{call_id}` is not a call id (expected up to {MAX_CALL_ID_CHARS} letters and digits)")]
    InvalidCallId {
        /// The id as given (escaped).
        call_id: String,
    },
    /// No pending request has this call id (answered, timed out or never held).
    #[error("no call `{call_id}` is waiting for an approval")]
    NotPending {
        /// The call id.
        call_id: String,
    },
    /// The pending entry is there, but the process that held the call ended.
    #[error(
        "call `{call_id}` is not waiting any more: the process that held it ended, so it was never forwarded; the next start records it as abandoned and removes it"
    )]
    Abandoned {
        /// The call id.
        call_id: String,
    },
    /// The pending entry is not what the waiting process wrote.
    #[error(
        "the pending entry of call `{call_id}` (`{}`) is refused: {problem}; it was changed after toolward wrote it, so what it shows may not be what an answer would approve: leave it to time out (a deny) and look for who can write the state folder",
        path.display()
    )]
    Tampered {
        /// The call id.
        call_id: String,
        /// The entry's file.
        path: PathBuf,
        /// What does not match.
        problem: String,
    },
    /// The state folder, a queue folder or the key cannot be used.
    #[error(transparent)]
    State(#[from] StateError),
    /// Reading, writing, creating or removing a queue file failed.
    #[error("cannot {action} `{}`", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A queue file is larger than [`MAX_APPROVAL_FILE_BYTES`].
    #[error("approval file `{}` is larger than the limit of {limit} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// [`MAX_APPROVAL_FILE_BYTES`].
        limit: u64,
    },
    /// A queue file is not a request or answer toolward wrote.
    #[error("approval file `{}` is malformed", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

/// A held call, as a person is asked to approve it. Every field a person reads comes from the
/// model or a server: show it with `display_request`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The call's id (a ULID), unique per call.
    pub call_id: String,
    /// The tool's name as the model sees it (`server__tool`).
    pub exposed_tool: String,
    /// The server's name in the operator's config.
    pub server: String,
    /// The tool's name on its server.
    pub tool: String,
    /// The operator's effect (`read-only`, `local-change`, `remote-change`, `destructive`).
    pub effect: String,
    /// The final arguments (fixed values set), canonical JSON text.
    pub arguments: String,
    /// SHA-256 of `arguments`, lowercase hex.
    pub arguments_sha256: String,
    /// The policy's reason for holding the call.
    pub reason: String,
    /// The tool's pinned description hash.
    pub description_sha256: String,
    /// The tool's pinned input schema hash.
    pub input_schema_sha256: String,
    /// Who made the call.
    pub principal: String,
    /// The client connection.
    pub session: String,
    /// When the call was held, milliseconds since the Unix epoch.
    pub time_ms: u64,
}

/// A person's answer, or its absence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalAnswer {
    /// The call may go ahead, once.
    Approved,
    /// The call is refused, with the reason given.
    Denied(String),
    /// Nobody answered in time: a deny.
    TimedOut,
}

/// An approver's answer: the verdict and who gave it through which channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Approved, denied, or nobody answered.
    pub verdict: ApprovalAnswer,
    /// Who answered, and through which channel.
    pub by: AnsweredBy,
}

/// Something that can ask a person about a held call.
///
/// The call path bounds [`ask`](Approver::ask) with the approval timeout and drops the future
/// when it runs out or the client cancels the call; an implementation cleans up in `Drop`,
/// not after the `await`.
pub trait Approver: Send + Sync {
    /// Asks about `request` and waits for the answer. Never fails: a failure to ask is
    /// [`ApprovalAnswer::Denied`] with the reason, answered by nobody.
    fn ask(&self, request: ApprovalRequest) -> Pin<Box<dyn Future<Output = Answer> + Send + '_>>;

    /// The channel this approver asks through, recorded when nobody answers in time.
    fn channel(&self) -> Channel;
}

/// Refuses every held call: the approver when no person can be asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct DenyAll;

impl Approver for DenyAll {
    fn ask(&self, request: ApprovalRequest) -> Pin<Box<dyn Future<Output = Answer> + Send + '_>> {
        Box::pin(std::future::ready(Answer {
            verdict: ApprovalAnswer::Denied(format!(
                "tool `{}` on server `{}` needs an approval and no approver is available",
                text::escape(&request.exposed_tool),
                text::escape(&request.server)
            )),
            by: AnsweredBy::nobody(Channel::Unavailable),
        }))
    }

    fn channel(&self) -> Channel {
        Channel::Unavailable
    }
}

/// An approver from a closure returning a future: for embedders and tests. Its answers are
/// recorded as given through [`Channel::Embedder`] by an unnamed answerer, unless built with
/// [`FnApprover::answered_by`].
///
/// ```
/// use toolward::approval::{ApprovalAnswer, FnApprover};
/// let approver = FnApprover::new(|request| async move {
///     if request.effect == "local-change" { ApprovalAnswer::Approved }
///     else { ApprovalAnswer::Denied(String::from("only local changes")) }
/// });
/// # let _ = approver;
/// ```
pub struct FnApprover<F> {
    ask: F,
    by: AnsweredBy,
}

impl<F> fmt::Debug for FnApprover<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnApprover")
            .field("by", &self.by)
            .finish_non_exhaustive()
    }
}

impl<F, Fut> FnApprover<F>
where
    F: Fn(ApprovalRequest) -> Fut + Send + Sync,
    Fut: Future<Output = ApprovalAnswer> + Send + 'static,
{
    /// Wraps `ask`; its answers are recorded as the embedder's.
    pub fn new(ask: F) -> Self {
        Self {
            ask,
            by: AnsweredBy::nobody(Channel::Embedder),
        }
    }

    /// Wraps `ask`, whose answers are given by `by` (for example the terminal's user).
    pub fn answered_by(by: AnsweredBy, ask: F) -> Self {
        Self { ask, by }
    }
}

impl<F, Fut> Approver for FnApprover<F>
where
    F: Fn(ApprovalRequest) -> Fut + Send + Sync,
    Fut: Future<Output = ApprovalAnswer> + Send + 'static,
{
    fn ask(&self, request: ApprovalRequest) -> Pin<Box<dyn Future<Output = Answer> + Send + '_>> {
        let asking = (self.ask)(request);
        Box::pin(async move {
            let verdict = asking.await;
            let by = match verdict {
                ApprovalAnswer::TimedOut => AnsweredBy::nobody(self.by.channel),
                _ => self.by.clone(),
            };
            Answer { verdict, by }
        })
    }

    fn channel(&self) -> Channel {
        self.by.channel
    }
}

/// A pending entry as written: the request and the waiting process's MAC over it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PendingFile {
    #[serde(flatten)]
    request: ApprovalRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    request_mac: Option<String>,
}

/// The answer file's content: the verdict, the binding it was given for, who gave it, and the
/// MAC over all of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct AnswerFile {
    call_id: String,
    approve: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    arguments_sha256: String,
    description_sha256: String,
    input_schema_sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    answered_by: Option<AnsweredBy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mac: Option<String>,
}

/// Hands `f` the parts a pending entry's MAC covers: every field of the request, in
/// declaration order (borrowed, so the arguments are not copied to be MAC'd).
fn with_request_mac_parts<R>(request: &ApprovalRequest, f: impl FnOnce(&[&[u8]]) -> R) -> R {
    let time_ms = request.time_ms.to_string();
    f(&[
        REQUEST_MAC_DOMAIN,
        request.call_id.as_bytes(),
        request.exposed_tool.as_bytes(),
        request.server.as_bytes(),
        request.tool.as_bytes(),
        request.effect.as_bytes(),
        request.arguments.as_bytes(),
        request.arguments_sha256.as_bytes(),
        request.reason.as_bytes(),
        request.description_sha256.as_bytes(),
        request.input_schema_sha256.as_bytes(),
        request.principal.as_bytes(),
        request.session.as_bytes(),
        time_ms.as_bytes(),
    ])
}

/// Hands `f` the parts an answer's MAC covers: the request's binding (taken from the request
/// the verifier holds, not from the file), the verdict, the reason and the answerer.
fn with_answer_mac_parts<R>(
    request: &ApprovalRequest,
    approve: bool,
    reason: Option<&str>,
    by: &AnsweredBy,
    f: impl FnOnce(&[&[u8]]) -> R,
) -> R {
    let optional = |text: Option<&str>| match text {
        Some(text) => [b"1".as_slice(), text.as_bytes()].concat(),
        None => b"0".to_vec(),
    };
    let uid = by.uid.map(|uid| uid.to_string());
    let (reason, answerer, uid) = (
        optional(reason),
        optional(by.answerer.as_deref()),
        optional(uid.as_deref()),
    );
    f(&[
        ANSWER_MAC_DOMAIN,
        request.call_id.as_bytes(),
        request.arguments_sha256.as_bytes(),
        request.description_sha256.as_bytes(),
        request.input_schema_sha256.as_bytes(),
        if approve {
            b"approve".as_slice()
        } else {
            b"deny".as_slice()
        },
        &reason,
        by.channel.as_str().as_bytes(),
        &answerer,
        &uid,
    ])
}

fn answer_mac(
    key: &Key,
    request: &ApprovalRequest,
    approve: bool,
    reason: Option<&str>,
    by: &AnsweredBy,
) -> String {
    with_answer_mac_parts(request, approve, reason, by, |parts| key.mac_hex(parts))
}

/// The answer in `bytes`, when it is an authenticated answer to exactly `request`; otherwise
/// why it is a forgery.
fn verify_answer(bytes: &[u8], request: &ApprovalRequest, key: &Key) -> Result<Answer, String> {
    let file: AnswerFile = serde_json::from_slice(bytes)
        .map_err(|error| format!("it is not an answer toolward wrote ({error})"))?;
    let Some(mac) = &file.mac else {
        return Err(String::from("it carries no MAC"));
    };
    if file.call_id != request.call_id {
        return Err(format!(
            "it answers call `{}`, not this one",
            text::escape(&file.call_id)
        ));
    }
    if file.arguments_sha256 != request.arguments_sha256
        || file.description_sha256 != request.description_sha256
        || file.input_schema_sha256 != request.input_schema_sha256
    {
        return Err(String::from(
            "it was given for other arguments or another pin of the tool",
        ));
    }
    let Some(by) = file.answered_by else {
        return Err(String::from("it names no answerer"));
    };
    let verifies = with_answer_mac_parts(
        request,
        file.approve,
        file.reason.as_deref(),
        &by,
        |parts| key.verify_hex(parts, mac),
    );
    if !verifies {
        return Err(String::from(
            "its MAC does not verify under the state folder's approval key",
        ));
    }
    let verdict = if file.approve {
        ApprovalAnswer::Approved
    } else {
        ApprovalAnswer::Denied(
            file.reason
                .unwrap_or_else(|| String::from("the operator denied the call")),
        )
    };
    Ok(Answer { verdict, by })
}

/// What is wrong with a pending entry read from `<stem>.json`, if anything.
fn entry_problem(entry: &PendingFile, stem: &str, key: &Key) -> Option<String> {
    let request = &entry.request;
    if request.call_id != stem {
        return Some(format!(
            "its call id `{}` is not its file's name",
            text::escape(&request.call_id)
        ));
    }
    if canonical::sha256_hex(request.arguments.as_bytes()) != request.arguments_sha256 {
        return Some(String::from(
            "its `arguments` text does not hash to its `arguments_sha256`",
        ));
    }
    let Some(mac) = &entry.request_mac else {
        return Some(String::from("it carries no MAC"));
    };
    if !with_request_mac_parts(request, |parts| key.verify_hex(parts, mac)) {
        return Some(String::from(
            "its MAC does not verify under the state folder's approval key (a field was changed)",
        ));
    }
    None
}

/// The queue's folders and key, reached through the state folder.
struct Queue {
    state: StateDir,
    key: Key,
    pending: Dir,
    answers: Dir,
}

impl Queue {
    /// Opens the state folder at `state_dir`, the queue's folders (created `0700`) and the
    /// approval key (created on first use).
    fn open(state_dir: &Path) -> Result<Queue, ApprovalError> {
        let state = StateDir::open(state_dir)?;
        let key = state.key(APPROVAL_KEY)?;
        let pending = state.subdir(PENDING_DIR)?;
        let answers = state.subdir(ANSWERS_DIR)?;
        Ok(Queue {
            state,
            key,
            pending,
            answers,
        })
    }

    fn pending_path(&self, name: &str) -> PathBuf {
        self.state.path().join(PENDING_DIR).join(name)
    }

    fn answer_path(&self, name: &str) -> PathBuf {
        self.state.path().join(ANSWERS_DIR).join(name)
    }

    /// Writes `request`'s pending entry, locked before it appears; the returned guard keeps
    /// the lock and removes the entry (then releases the lock) when dropped.
    fn hold(&self, request: &ApprovalRequest) -> Result<PendingGuard, ApprovalError> {
        let name = entry_name(&request.call_id);
        let entry = PendingFile {
            request: request.clone(),
            request_mac: Some(with_request_mac_parts(request, |parts| {
                self.key.mac_hex(parts)
            })),
        };
        let bytes =
            serde_json::to_vec_pretty(&entry).map_err(|source| ApprovalError::Malformed {
                path: self.pending_path(&name),
                source,
            })?;
        let temporary = temporary_name(&request.call_id);
        let temporary_path = self.pending_path(&temporary);
        let lock = create_private(&self.pending, &temporary, &temporary_path)?;
        let written = lock
            .try_lock()
            .map_err(|error| match error {
                std::fs::TryLockError::Error(error) => error,
                std::fs::TryLockError::WouldBlock => io::Error::from(io::ErrorKind::WouldBlock),
            })
            .and_then(|()| (&lock).write_all(&bytes))
            .and_then(|()| lock.sync_data())
            .map_err(|source| ApprovalError::Io {
                action: "write",
                path: temporary_path.clone(),
                source,
            })
            .and_then(|()| {
                self.pending
                    .rename(&temporary, &self.pending, &name)
                    .map_err(|source| ApprovalError::Io {
                        action: "write",
                        path: self.pending_path(&name),
                        source,
                    })
            });
        if let Err(error) = written {
            let _ = self.pending.remove_file(&temporary);
            return Err(error);
        }
        let clone = |dir: &Dir, path: PathBuf| {
            dir.try_clone().map_err(|source| ApprovalError::Io {
                action: "open",
                path,
                source,
            })
        };
        Ok(PendingGuard {
            pending: clone(&self.pending, self.pending_path(""))?,
            answers: clone(&self.answers, self.answer_path(""))?,
            name,
            _lock: lock,
        })
    }

    /// Whether the pending entry `name` is still there.
    fn pending_exists(&self, name: &str) -> bool {
        !matches!(self.pending.symlink_metadata(name), Err(e) if e.kind() == io::ErrorKind::NotFound)
    }

    /// The answer file for `request`, if one is there: the authenticated answer, or why it is
    /// a forgery (with the file's identity, to remove that file and no other).
    fn read_answer(&self, request: &ApprovalRequest) -> Option<Result<Answer, Forgery>> {
        let name = entry_name(&request.call_id);
        let path = self.answer_path(&name);
        let file = match open_entry(&self.answers, &name, &path) {
            Ok(None) => return None,
            Ok(Some(file)) => file,
            Err(error) => return Some(Err((crate::text::error_chain(&error), None))),
        };
        let identity = file.metadata().ok().map(|meta| {
            use std::os::unix::fs::MetadataExt as _;
            (meta.dev(), meta.ino())
        });
        let answer = read_all(&file, &path)
            .map_err(|error| crate::text::error_chain(&error))
            .and_then(|bytes| verify_answer(&bytes, request, &self.key));
        Some(answer.map_err(|why| (why, identity)))
    }

    /// Removes the answer file `name` if it is still the file `identity` names (a real answer
    /// that replaced a forgery meanwhile stays).
    fn remove_answer(&self, name: &str, identity: Option<FileId>) {
        let current = self
            .answers
            .symlink_metadata(name)
            .ok()
            .map(|meta| (meta.dev(), meta.ino()));
        if identity.is_none() || current == identity {
            let _ = self.answers.remove_file(name);
        }
    }

    /// The names of the pending entries (`<call_id>.json`), at most [`MAX_PENDING_REQUESTS`].
    fn entry_names(&self) -> Result<Vec<String>, ApprovalError> {
        let io = |source| ApprovalError::Io {
            action: "read",
            path: self.pending_path(""),
            source,
        };
        let mut names = Vec::new();
        for entry in self.pending.entries().map_err(io)? {
            let name = entry.map_err(io)?.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') || !name.ends_with(".json") {
                continue;
            }
            names.push(name.to_owned());
            if names.len() >= MAX_PENDING_REQUESTS {
                break;
            }
        }
        Ok(names)
    }
}

/// A file's identity: device and inode.
type FileId = (u64, u64);

/// Why an answer file is a forgery, and which file it was (to remove that one and no other).
type Forgery = (String, Option<FileId>);

/// Keeps a pending entry's lock for as long as its call waits; removes the entry and its
/// answer, then releases the lock, when dropped.
struct PendingGuard {
    pending: Dir,
    answers: Dir,
    name: String,
    /// Dropped after `drop` has removed the entry: nobody can take the lock of an entry that
    /// is still there while its call waits.
    _lock: std::fs::File,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        let _ = self.pending.remove_file(&self.name);
        let _ = self.answers.remove_file(&self.name);
    }
}

fn entry_name(call_id: &str) -> String {
    format!("{call_id}.json")
}

/// A fresh name for a file written before it is renamed or linked into place; it starts
/// with `.`, so listings skip it.
fn temporary_name(call_id: &str) -> String {
    format!(".{call_id}.{}.tmp", crate::ids::new_ulid())
}

/// Creates the new file `name` in `dir`, mode `0600`, for writing.
fn create_private(dir: &Dir, name: &str, path: &Path) -> Result<std::fs::File, ApprovalError> {
    let mut options = OpenOptions::new();
    options
        .write(true)
        .create_new(true)
        .mode(crate::state_dir::FILE_MODE);
    dir.open_with(name, &options)
        .map(cap_std::fs::File::into_std)
        .map_err(|source| ApprovalError::Io {
            action: "create",
            path: path.to_owned(),
            source,
        })
}

/// Opens the queue file `name` of `dir` for reading: `None` when it does not exist; an error
/// when it is a symlink or another kind of file, or not the owner's alone.
fn open_entry(dir: &Dir, name: &str, path: &Path) -> Result<Option<std::fs::File>, ApprovalError> {
    let io = |source| ApprovalError::Io {
        action: "read",
        path: path.to_owned(),
        source,
    };
    match dir.symlink_metadata(name) {
        Ok(meta) if !meta.is_file() => {
            return Err(ApprovalError::State(StateError::Kind {
                path: path.to_owned(),
                expected: "regular file",
            }));
        }
        Ok(_) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io(error)),
    }
    let file = match dir.open(name) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io(error)),
    };
    let meta = file.metadata().map_err(io)?;
    check_private(&meta, path)?;
    Ok(Some(file.into_std()))
}

/// Reads `file` whole, refusing more than [`MAX_APPROVAL_FILE_BYTES`].
fn read_all(file: &std::fs::File, path: &Path) -> Result<Vec<u8>, ApprovalError> {
    let mut bytes = Vec::new();
    file.take(MAX_APPROVAL_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| ApprovalError::Io {
            action: "read",
            path: path.to_owned(),
            source,
        })?;
    if bytes.len() as u64 > MAX_APPROVAL_FILE_BYTES {
        return Err(ApprovalError::TooLarge {
            path: path.to_owned(),
            limit: MAX_APPROVAL_FILE_BYTES,
        });
    }
    Ok(bytes)
}

/// Whether a process holds the lock of the pending entry open as `file`. An error taking
/// the lock counts as held: an entry is called abandoned only when it surely is.
fn is_held(file: &std::fs::File) -> bool {
    match file.try_lock() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(_) => true,
    }
}

/// Asks through a pending queue in the state folder (see the module documentation); a
/// person answers with `toolward approvals approve ID` or `deny ID`, or any program with
/// `answer`.
///
/// Polls for the answer every `QUEUE_POLL_INTERVAL`. A request that cannot be written is
/// denied with the reason. A forged answer is ignored and, with an audit log
/// ([`QueueApprover::with_audit`]), recorded as `approval-forged`.
#[derive(Clone)]
pub struct QueueApprover {
    state_dir: PathBuf,
    audit: Option<Arc<dyn AuditStore>>,
}

impl fmt::Debug for QueueApprover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueApprover")
            .field("state_dir", &self.state_dir)
            .field("audit", &self.audit.as_ref().map(|store| store.name()))
            .finish()
    }
}

impl QueueApprover {
    /// A queue under `state_dir` (created on first use), recording forgeries nowhere but the
    /// log output.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
            audit: None,
        }
    }

    /// The same queue, recording each forged answer to `audit` as an `approval-forged`
    /// record.
    #[must_use]
    pub fn with_audit(mut self, audit: Option<Arc<dyn AuditStore>>) -> Self {
        self.audit = audit;
        self
    }

    /// The state folder.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Records the forged answer found for `request` (the `count`th for this call).
    fn forged(&self, queue: &Queue, request: &ApprovalRequest, why: &str, count: usize) {
        let file = queue.answer_path(&entry_name(&request.call_id));
        tracing::warn!(
            call_id = %request.call_id,
            "a forged answer for call `{}` was ignored: `{}`: {why}",
            request.call_id,
            file.display()
        );
        let Some(audit) = &self.audit else { return };
        if count > MAX_FORGERIES_AUDITED {
            return;
        }
        let mut reason = format!("answer file `{}` does not count: {why}", file.display());
        if count == MAX_FORGERIES_AUDITED {
            reason.push_str(&format!(
                "; this is the {MAX_FORGERIES_AUDITED}th for this call, later ones are not recorded"
            ));
        }
        let event = AuditEvent {
            call_id: Some(request.call_id.clone()),
            principal: Some(request.principal.clone()),
            session: Some(request.session.clone()),
            server: Some(request.server.clone()),
            tool: Some(request.exposed_tool.clone()),
            upstream_tool: Some(request.tool.clone()),
            arguments_sha256: Some(request.arguments_sha256.clone()),
            reason: Some(reason),
            detail: Some(serde_json::json!({ "file": file, "why": why })),
            ..AuditEvent::new(AuditKind::ApprovalForged)
        };
        if let Err(error) = audit.append(event) {
            tracing::error!(call_id = %request.call_id, "cannot record a forged answer for call `{}`: {error}", request.call_id);
        }
    }
}

impl Approver for QueueApprover {
    fn ask(&self, request: ApprovalRequest) -> Pin<Box<dyn Future<Output = Answer> + Send + '_>> {
        Box::pin(async move {
            let refuse = |reason: String| Answer {
                verdict: ApprovalAnswer::Denied(reason),
                by: AnsweredBy::nobody(Channel::Queue),
            };
            let call_id = request.call_id.clone();
            if let Err(error) = check_call_id(&call_id) {
                return refuse(error.to_string());
            }
            // The guard removes the entry and the answer however the wait ends, including the
            // future being dropped.
            let (queue, _guard) = match Queue::open(&self.state_dir)
                .and_then(|queue| queue.hold(&request).map(|guard| (queue, guard)))
            {
                Ok(held) => held,
                Err(error) => {
                    return refuse(format!(
                        "the approval request for tool `{}` on server `{}` could not be queued: {}",
                        text::escape(&request.exposed_tool),
                        text::escape(&request.server),
                        crate::text::error_chain(&error)
                    ));
                }
            };
            tracing::info!(
                call_id = %call_id,
                "call `{call_id}` of tool `{}` on server `{}` waits for an approval: run `toolward approvals approve {call_id}` or `toolward approvals deny {call_id}`",
                text::escape(&request.exposed_tool),
                text::escape(&request.server)
            );
            let name = entry_name(&call_id);
            let mut forgeries = 0;
            loop {
                tokio::time::sleep(QUEUE_POLL_INTERVAL).await;
                match queue.read_answer(&request) {
                    None => {}
                    Some(Ok(answer)) => return answer,
                    Some(Err((why, identity))) => {
                        queue.remove_answer(&name, identity);
                        forgeries += 1;
                        self.forged(&queue, &request, &why, forgeries);
                    }
                }
                if !queue.pending_exists(&name) {
                    return refuse(String::from("the pending approval request was removed"));
                }
            }
        })
    }

    fn channel(&self) -> Channel {
        Channel::Queue
    }
}

/// One entry of the queue, as [`list_queue`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEntry {
    /// The held call.
    pub request: ApprovalRequest,
    /// Whether the process that held the call still waits (holds the entry's lock).
    pub waiting: bool,
    /// Why the entry cannot be answered: it is not what the waiting process wrote (its MAC
    /// fails, or its arguments do not hash to its `arguments_sha256`).
    pub problem: Option<String>,
}

/// Every entry of the queue under `state_dir`, oldest first (at most
/// [`MAX_PENDING_REQUESTS`]), each with whether its call still waits and what is wrong with
/// it. Files that are not requests are skipped with a warning.
///
/// # Errors
/// [`ApprovalError::State`] when the state folder, the queue's folders or the key cannot be
/// used (wrong owner or mode, ...); [`ApprovalError::Io`] when the pending folder cannot be
/// read.
pub fn list_queue(state_dir: &Path) -> Result<Vec<PendingEntry>, ApprovalError> {
    let queue = Queue::open(state_dir)?;
    let mut entries = Vec::new();
    for name in queue.entry_names()? {
        let path = queue.pending_path(&name);
        let read = open_entry(&queue.pending, &name, &path).and_then(|file| match file {
            None => Ok(None),
            Some(file) => {
                let bytes = read_all(&file, &path)?;
                let entry: PendingFile =
                    serde_json::from_slice(&bytes).map_err(|source| ApprovalError::Malformed {
                        path: path.clone(),
                        source,
                    })?;
                Ok(Some((entry, is_held(&file))))
            }
        });
        match read {
            // Removed meanwhile: answered or timed out.
            Ok(None) => {}
            Ok(Some((entry, waiting))) => {
                let stem = name.trim_end_matches(".json");
                let problem = entry_problem(&entry, stem, &queue.key);
                entries.push(PendingEntry {
                    request: entry.request,
                    waiting,
                    problem,
                });
            }
            Err(error) => tracing::warn!("skipping pending approval: {error}"),
        }
    }
    entries.sort_by(|a, b| {
        (a.request.time_ms, &a.request.call_id).cmp(&(b.request.time_ms, &b.request.call_id))
    });
    Ok(entries)
}

/// The requests of the queue under `state_dir` that can be answered: their call still
/// waits and the entry is what the waiting process wrote. Oldest first.
///
/// # Errors
/// As [`list_queue`].
pub fn list_pending(state_dir: &Path) -> Result<Vec<ApprovalRequest>, ApprovalError> {
    Ok(list_queue(state_dir)?
        .into_iter()
        .filter(|entry| entry.waiting && entry.problem.is_none())
        .map(|entry| entry.request)
        .collect())
}

/// Removes every abandoned entry of the queue under `state_dir` (and any answer to it),
/// returning the requests: entries whose lock nobody holds, so the process that held the call
/// ended. Such a call was never forwarded. Entries of calls another process still holds, for
/// this config or another sharing the state folder, are left alone. Called at every start.
///
/// # Errors
/// As [`list_queue`], and [`ApprovalError::Io`] when a file cannot be removed.
pub fn abandon_pending(state_dir: &Path) -> Result<Vec<ApprovalRequest>, ApprovalError> {
    let queue = Queue::open(state_dir)?;
    let mut abandoned = Vec::new();
    for name in queue.entry_names()? {
        let path = queue.pending_path(&name);
        let file = match open_entry(&queue.pending, &name, &path) {
            Ok(Some(file)) => file,
            Ok(None) => continue,
            Err(error) => {
                tracing::warn!("skipping pending approval: {error}");
                continue;
            }
        };
        if file.try_lock().is_err() {
            continue;
        }
        // Locked by us now. The waiting process removes its entry before it lets the lock go,
        // so an entry that is still the file we locked is abandoned.
        let locked = file.metadata().ok().map(|meta| {
            use std::os::unix::fs::MetadataExt as _;
            (meta.dev(), meta.ino())
        });
        let current = queue
            .pending
            .symlink_metadata(&name)
            .ok()
            .map(|meta| (meta.dev(), meta.ino()));
        if locked.is_none() || current != locked {
            continue;
        }
        match read_all(&file, &path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<PendingFile>(&bytes).ok())
        {
            Some(entry) => abandoned.push(entry.request),
            None => tracing::warn!(
                "removing the abandoned pending entry `{}`, which is not a request",
                path.display()
            ),
        }
        for (dir, path) in [
            (&queue.pending, path.clone()),
            (&queue.answers, queue.answer_path(&name)),
        ] {
            match dir.remove_file(&name) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(ApprovalError::Io {
                        action: "remove",
                        path,
                        source,
                    });
                }
            }
        }
    }
    Ok(abandoned)
}

/// Answers the pending request `call_id` under `state_dir`: approve or deny, with an
/// optional reason for a deny, as the operating-system user running this process, through
/// the queue. The answer is bound to the request's call id, arguments hash and pins, names
/// the answerer, and carries the MAC that makes the waiting process count it. Returns who
/// answered.
///
/// The entry is checked first: its `arguments` must hash to its `arguments_sha256` and its
/// MAC must verify, so what a person read is what they answer; and its call must still wait.
///
/// # Errors
/// [`ApprovalError::InvalidCallId`]; [`ApprovalError::NotPending`] when no such call waits;
/// [`ApprovalError::Tampered`] for an entry changed after toolward wrote it;
/// [`ApprovalError::Abandoned`] when the process that held it ended;
/// [`ApprovalError::AlreadyAnswered`] when an authenticated answer is there already;
/// [`ApprovalError::State`] or [`ApprovalError::Io`] when the queue cannot be used;
/// [`ApprovalError::Malformed`] or [`ApprovalError::TooLarge`] when the pending file is not a
/// request.
pub fn answer(
    state_dir: &Path,
    call_id: &str,
    approve: bool,
    reason: Option<String>,
) -> Result<AnsweredBy, ApprovalError> {
    check_call_id(call_id)?;
    let queue = Queue::open(state_dir)?;
    let name = entry_name(call_id);
    let path = queue.pending_path(&name);
    let Some(file) = open_entry(&queue.pending, &name, &path)? else {
        return Err(ApprovalError::NotPending {
            call_id: call_id.to_owned(),
        });
    };
    let bytes = read_all(&file, &path)?;
    let entry: PendingFile =
        serde_json::from_slice(&bytes).map_err(|source| ApprovalError::Malformed {
            path: path.clone(),
            source,
        })?;
    if let Some(problem) = entry_problem(&entry, call_id, &queue.key) {
        return Err(ApprovalError::Tampered {
            call_id: call_id.to_owned(),
            path,
            problem,
        });
    }
    if !is_held(&file) {
        return Err(ApprovalError::Abandoned {
            call_id: call_id.to_owned(),
        });
    }
    let request = entry.request;
    let by = AnsweredBy::os_user(Channel::Queue, &current_os_user());
    let mac = answer_mac(&queue.key, &request, approve, reason.as_deref(), &by);
    let file = AnswerFile {
        call_id: request.call_id.clone(),
        approve,
        reason,
        arguments_sha256: request.arguments_sha256.clone(),
        description_sha256: request.description_sha256.clone(),
        input_schema_sha256: request.input_schema_sha256.clone(),
        answered_by: Some(by.clone()),
        mac: Some(mac),
    };
    place_answer(&queue, &request, &file)?;
    Ok(by)
}

/// Puts `file` in place as the answer to `request`, unless an authenticated answer is there:
/// written to a temporary file, then hard-linked to its name, which fails when the name
/// exists, so of two answers given at once the first is final. A forgery in the way is
/// removed.
fn place_answer(
    queue: &Queue,
    request: &ApprovalRequest,
    file: &AnswerFile,
) -> Result<(), ApprovalError> {
    let name = entry_name(&request.call_id);
    let path = queue.answer_path(&name);
    let bytes = serde_json::to_vec_pretty(file).map_err(|source| ApprovalError::Malformed {
        path: path.clone(),
        source,
    })?;
    let temporary = temporary_name(&request.call_id);
    let temporary_path = queue.answer_path(&temporary);
    let mut handle = create_private(&queue.answers, &temporary, &temporary_path)?;
    let written = handle.write_all(&bytes).and_then(|()| handle.sync_data());
    drop(handle);
    let placed = written
        .map_err(|source| ApprovalError::Io {
            action: "write",
            path: temporary_path,
            source,
        })
        .and_then(|()| {
            for _ in 0..2 {
                match queue.answers.hard_link(&temporary, &queue.answers, &name) {
                    Ok(()) => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        match queue.read_answer(request) {
                            Some(Ok(_)) => break,
                            Some(Err((_, identity))) => queue.remove_answer(&name, identity),
                            None => {}
                        }
                    }
                    Err(source) => {
                        return Err(ApprovalError::Io {
                            action: "write",
                            path: path.clone(),
                            source,
                        });
                    }
                }
            }
            Err(ApprovalError::AlreadyAnswered {
                call_id: request.call_id.clone(),
            })
        });
    let _ = queue.answers.remove_file(&temporary);
    placed
}

/// A request as lines for a person: each field on its own line, every value escaped with
/// [`text::escape`], the arguments as [`display_arguments`] shows them. The terminal of
/// `toolward call` and `toolward approvals list` show this.
pub fn display_request(request: &ApprovalRequest) -> String {
    format!(
        "call {}\n  tool:      {} (server {}, upstream tool {})\n  effect:    {}\n  reason:    {}\n  arguments (sha256 {}):\n{}\n  principal: {}, session {}",
        text::escape(&request.call_id),
        text::escape(&request.exposed_tool),
        text::escape(&request.server),
        text::escape(&request.tool),
        text::escape(&request.effect),
        text::escape(&request.reason),
        text::escape(&request.arguments_sha256),
        display_arguments(&request.arguments),
        text::escape(&request.principal),
        text::escape(&request.session),
    )
}

/// The canonical arguments text `arguments` as lines for a person, one per top-level
/// argument (`    name: value`), in the canonical order (by name): every name is shown; each
/// value (its canonical JSON text) is cut to [`MAX_DISPLAYED_VALUE_CHARS`] (its beginning and its end) and each name to
/// [`MAX_DISPLAYED_NAME_CHARS`], with the full length stated; everything is escaped with
/// [`text::escape`]. Text that is not a JSON object is shown as one cut value. The one
/// format of arguments in every place a person approves (terminal, `approvals list`,
/// elicitation).
pub fn display_arguments(arguments: &str) -> String {
    let members = match canonical::parse(arguments.as_bytes()) {
        Ok(canonical::Value::Object(members)) => members,
        _ => {
            return format!(
                "    (not a JSON object) {}",
                cut(arguments, MAX_DISPLAYED_VALUE_CHARS)
            );
        }
    };
    if members.is_empty() {
        return String::from("    (none)");
    }
    members
        .iter()
        .map(|(name, value)| {
            format!(
                "    {}: {}",
                cut(name, MAX_DISPLAYED_NAME_CHARS),
                cut(&canonical::to_canonical(value), MAX_DISPLAYED_VALUE_CHARS)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` escaped; when longer than `limit` characters, its first three quarters of `limit`
/// and its last quarter, with its full length stated. The end is always shown: a path's last
/// component, or what follows padding meant to push it out of sight, is what an approver must
/// see.
fn cut(text: &str, limit: usize) -> String {
    let total = text.chars().count();
    if total <= limit {
        return text::escape(text);
    }
    let tail = limit / 4;
    let head = limit - tail;
    let first: String = text.chars().take(head).collect();
    let last: String = text.chars().skip(total - tail).collect();
    format!(
        "{}…{} ({total} characters, the first {head} and the last {tail} shown)",
        text::escape(&first),
        text::escape(&last)
    )
}

pub(crate) fn check_call_id(call_id: &str) -> Result<(), ApprovalError> {
    let valid = !call_id.is_empty()
        && call_id.chars().count() <= MAX_CALL_ID_CHARS
        && call_id.chars().all(|c| c.is_ascii_alphanumeric());
    if valid {
        Ok(())
    } else {
        let shown: String = call_id.chars().take(MAX_CALL_ID_CHARS).collect();
        Err(ApprovalError::InvalidCallId {
            call_id: text::escape(&shown),
        })
    }
}

#[cfg(test)]
#[path = "approval/tests.rs"]
mod tests;
