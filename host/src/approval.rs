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
//! [`StateDir`]: crate::state_dir::StateDir
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

mod answering;
mod display;
mod files;
mod mac;
mod queue;

use std::fmt;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::identity::{AnsweredBy, Channel, MAX_PASSWD_BYTES, OsUser, current_os_user};
use crate::state_dir::StateError;
use crate::text;
pub use answering::{
    PendingEntry, abandon_pending, answer, answer_as, list_pending, list_queue,
};
pub use display::{display_arguments, display_request, display_result};
pub use queue::QueueApprover;

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
    /// The config's approvers do not let this answerer answer this call.
    #[error("call `{call_id}` cannot be answered here: {reason}")]
    NotAnApprover {
        /// The call id.
        call_id: String,
        /// Why (from [`Approvers::may_answer`](crate::identity::Approvers::may_answer)),
        /// escaped.
        reason: String,
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
    /// Of a held *result* (a `results@0.3.0` review answered hold): what would be
    /// delivered to the client, the result's JSON text; `None` for a held call. Its call id
    /// is the call's with `result` after it (`01K…result`), so an answer to the call cannot
    /// answer its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
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

    /// Whether the answer comes back on a later request rather than to this `ask` (the
    /// 2026-07-28 revision's `input_required`): such an approver cannot hold a *result*,
    /// which would need the tool run again, so a result a review holds is withheld.
    fn answers_later(&self) -> bool {
        false
    }

    /// Who will answer `request`, when that is known before asking (the principal, through
    /// elicitation; the terminal's user); `None` when it is known only from the answer (the
    /// queue, answered by whoever reaches it). With approvers named, a call whose answerer
    /// may not answer it is asked through the queue instead
    /// ([`Approvers`](crate::identity::Approvers)).
    fn answerer(&self, request: &ApprovalRequest) -> Option<AnsweredBy> {
        let _ = request;
        None
    }
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

    fn answerer(&self, _request: &ApprovalRequest) -> Option<AnsweredBy> {
        Some(self.by.clone())
    }
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
