//! Approvals: a person's yes or no on a call the policy held.
//!
//! The call path ([`crate::call`]) asks an [`Approver`] and bounds the wait with the
//! approval timeout (`limits.approval_timeout_ms`); no answer in time is a deny. Three
//! approvers come with the library:
//!
//! - [`DenyAll`]: no person is reachable, every held call is refused;
//! - [`QueueApprover`]: a pending queue in the state directory, answered from another
//!   terminal with `toolward approvals approve ID` or `deny ID` (this module's [`list_pending`]
//!   and [`answer`]);
//! - [`FnApprover`]: a closure, for embedders and tests.
//!
//! The gateway adds one that asks through MCP elicitation ([`crate::gateway`]).
//!
//! # Binding
//!
//! An approval is single-use and bound to one call: the call id (a fresh ULID per call), the
//! SHA-256 of the canonical arguments, and the tool's pins (SHA-256 of its description and of
//! its input schema). An answer file counts only when it carries the same call id,
//! `arguments_sha256`, `description_sha256` and `input_schema_sha256` as the pending request;
//! any other answer file is ignored (and removed), so an approval cannot be spent on other
//! arguments, on another call, or on a tool whose pin changed. Both files are removed when the
//! call stops waiting, answered or not.
//!
//! # Files
//!
//! `<state_dir>/approvals/pending/<call_id>.json` holds an [`ApprovalRequest`];
//! `<state_dir>/approvals/answers/<call_id>.json` holds the answer. Directories are created
//! owner-only (0700) and files are written owner-only (0600) on Unix: arguments may be
//! secret. Answer files are written to a temporary name and renamed, so the waiting call never
//! reads half of one.
//!
//! # Showing requests to a person
//!
//! Everything in a request comes from the model or a server. [`display_request`] and
//! [`escape_for_display`] escape control, bidirectional-override and invisible characters, so
//! what a person approves is what they read.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::future::Future;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How often a [`QueueApprover`] looks for an answer file.
pub const QUEUE_POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Largest request or answer file read back, in bytes: 64 MiB. A request holds one call's
/// canonical arguments; the bound keeps a stray huge file from taking unbounded memory.
pub const MAX_APPROVAL_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Most pending requests [`list_pending`] reads: far more than a person can review.
pub const MAX_PENDING_REQUESTS: usize = 1024;

/// Longest call id accepted by [`answer`], in characters. Call ids are ULIDs (26
/// characters); the bound and the character check keep an id from naming another path.
pub const MAX_CALL_ID_CHARS: usize = 64;

/// Most characters of the arguments [`display_request`] shows; the rest is elided with a
/// count.
pub const MAX_DISPLAYED_ARGUMENT_CHARS: usize = 4096;

/// The folder under the state directory that holds the queue.
const APPROVALS_DIR: &str = "approvals";
/// Pending requests, one file per held call.
const PENDING_DIR: &str = "pending";
/// Answers, one file per answered call.
const ANSWERS_DIR: &str = "answers";

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
/// model or a server: show it with [`display_request`].
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

/// Something that can ask a person about a held call.
///
/// The call path bounds [`ask`](Approver::ask) with the approval timeout and drops the future
/// when it runs out or the client cancels the call; an implementation cleans up in `Drop`,
/// not after the `await`.
pub trait Approver: Send + Sync {
    /// Asks about `request` and waits for the answer. Never fails: a failure to ask is
    /// [`ApprovalAnswer::Denied`] with the reason.
    fn ask(
        &self,
        request: ApprovalRequest,
    ) -> Pin<Box<dyn Future<Output = ApprovalAnswer> + Send + '_>>;
}

/// Refuses every held call: the approver when no person can be asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct DenyAll;

impl Approver for DenyAll {
    fn ask(
        &self,
        request: ApprovalRequest,
    ) -> Pin<Box<dyn Future<Output = ApprovalAnswer> + Send + '_>> {
        Box::pin(std::future::ready(ApprovalAnswer::Denied(format!(
            "tool `{}` on server `{}` needs an approval and no approver is available",
            escape_for_display(&request.exposed_tool),
            escape_for_display(&request.server)
        ))))
    }
}

/// An approver from a closure returning a future: for embedders and tests.
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
}

impl<F> fmt::Debug for FnApprover<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnApprover").finish_non_exhaustive()
    }
}

impl<F, Fut> FnApprover<F>
where
    F: Fn(ApprovalRequest) -> Fut + Send + Sync,
    Fut: Future<Output = ApprovalAnswer> + Send + 'static,
{
    /// Wraps `ask`.
    pub fn new(ask: F) -> Self {
        Self { ask }
    }
}

impl<F, Fut> Approver for FnApprover<F>
where
    F: Fn(ApprovalRequest) -> Fut + Send + Sync,
    Fut: Future<Output = ApprovalAnswer> + Send + 'static,
{
    fn ask(
        &self,
        request: ApprovalRequest,
    ) -> Pin<Box<dyn Future<Output = ApprovalAnswer> + Send + '_>> {
        Box::pin((self.ask)(request))
    }
}

/// The answer file's content: the verdict and the binding it was given for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct AnswerFile {
    call_id: String,
    approve: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    arguments_sha256: String,
    description_sha256: String,
    input_schema_sha256: String,
}

impl AnswerFile {
    /// Whether this answer was given for exactly `request`.
    fn binds(&self, request: &ApprovalRequest) -> bool {
        self.call_id == request.call_id
            && self.arguments_sha256 == request.arguments_sha256
            && self.description_sha256 == request.description_sha256
            && self.input_schema_sha256 == request.input_schema_sha256
    }
}

/// Asks through a pending queue in the state directory (see the module documentation); a
/// person answers with `toolward approvals approve ID` or `deny ID`, or any program with
/// [`answer`].
///
/// Polls for the answer every [`QUEUE_POLL_INTERVAL`]. A request that cannot be written is
/// denied with the reason.
#[derive(Debug, Clone)]
pub struct QueueApprover {
    state_dir: PathBuf,
}

impl QueueApprover {
    /// A queue under `state_dir` (created on first use).
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
        }
    }

    /// The state directory.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }
}

impl Approver for QueueApprover {
    fn ask(
        &self,
        request: ApprovalRequest,
    ) -> Pin<Box<dyn Future<Output = ApprovalAnswer> + Send + '_>> {
        Box::pin(async move {
            let call_id = request.call_id.clone();
            if let Err(error) = check_call_id(&call_id) {
                return ApprovalAnswer::Denied(error.to_string());
            }
            let pending = pending_path(&self.state_dir, &call_id);
            let answer_path = answer_path(&self.state_dir, &call_id);
            // Removes both files however the wait ends, including the future being dropped.
            let _cleanup = RemoveOnDrop(vec![pending.clone(), answer_path.clone()]);
            if let Err(error) = write_request(&self.state_dir, &request) {
                return ApprovalAnswer::Denied(format!(
                    "the approval request for tool `{}` on server `{}` could not be queued: {error}",
                    escape_for_display(&request.exposed_tool),
                    escape_for_display(&request.server)
                ));
            }
            tracing::info!(
                call_id = %call_id,
                "call `{call_id}` of tool `{}` on server `{}` waits for an approval: run `toolward approvals approve {call_id}` or `toolward approvals deny {call_id}`",
                escape_for_display(&request.exposed_tool),
                escape_for_display(&request.server)
            );
            loop {
                tokio::time::sleep(QUEUE_POLL_INTERVAL).await;
                match read_json::<AnswerFile>(&answer_path) {
                    Ok(Some(answer)) if answer.binds(&request) => {
                        return if answer.approve {
                            ApprovalAnswer::Approved
                        } else {
                            ApprovalAnswer::Denied(
                                answer.reason.unwrap_or_else(|| {
                                    String::from("the operator denied the call")
                                }),
                            )
                        };
                    }
                    Ok(Some(_)) => {
                        tracing::warn!(
                            call_id = %call_id,
                            "an answer for call `{call_id}` was given for other arguments or another pin; it does not count"
                        );
                        let _ = fs::remove_file(&answer_path);
                    }
                    Ok(None) => {}
                    Err(error) => {
                        tracing::warn!(call_id = %call_id, "ignoring an unreadable answer for call `{call_id}`: {error}");
                        let _ = fs::remove_file(&answer_path);
                    }
                }
                if !pending.exists() {
                    return ApprovalAnswer::Denied(String::from(
                        "the pending approval request was removed",
                    ));
                }
            }
        })
    }
}

/// Removes files when dropped.
struct RemoveOnDrop(Vec<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = fs::remove_file(path);
        }
    }
}

/// The requests waiting in the queue under `state_dir`, oldest first (at most
/// [`MAX_PENDING_REQUESTS`]). Files that are not requests are skipped with a warning.
///
/// # Errors
/// [`ApprovalError::Io`] when the pending folder exists but cannot be read. A missing folder
/// is an empty queue.
pub fn list_pending(state_dir: &Path) -> Result<Vec<ApprovalRequest>, ApprovalError> {
    let dir = state_dir.join(APPROVALS_DIR).join(PENDING_DIR);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ApprovalError::Io {
                action: "read",
                path: dir,
                source,
            });
        }
    };
    let mut requests = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ApprovalError::Io {
            action: "read",
            path: dir.clone(),
            source,
        })?;
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        match read_json::<ApprovalRequest>(&path) {
            Ok(Some(request)) => requests.push(request),
            // Removed meanwhile: answered or timed out.
            Ok(None) => {}
            Err(error) => tracing::warn!("skipping pending approval: {error}"),
        }
        if requests.len() >= MAX_PENDING_REQUESTS {
            break;
        }
    }
    requests.sort_by(|a, b| (a.time_ms, &a.call_id).cmp(&(b.time_ms, &b.call_id)));
    Ok(requests)
}

/// Removes every pending request (and any answer to it) under `state_dir`, returning them:
/// called at start, while the audit log's lock shows no other process serves this config,
/// so each is a call whose process ended while it was held. Such a call was never forwarded.
///
/// # Errors
/// As [`list_pending`], and [`ApprovalError::Io`] when a file cannot be removed.
pub fn abandon_pending(state_dir: &Path) -> Result<Vec<ApprovalRequest>, ApprovalError> {
    let pending = list_pending(state_dir)?;
    for request in &pending {
        for path in [
            pending_path(state_dir, &request.call_id),
            answer_path(state_dir, &request.call_id),
        ] {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
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
    Ok(pending)
}

/// Answers the pending request `call_id` under `state_dir`: approve or deny, with an
/// optional reason for a deny. The answer is bound to the request's arguments hash and pins.
///
/// # Errors
/// [`ApprovalError::InvalidCallId`], [`ApprovalError::NotPending`] when no such call waits,
/// [`ApprovalError::Io`] when the answer cannot be written, [`ApprovalError::Malformed`] or
/// [`ApprovalError::TooLarge`] when the pending file is not a request.
pub fn answer(
    state_dir: &Path,
    call_id: &str,
    approve: bool,
    reason: Option<String>,
) -> Result<(), ApprovalError> {
    check_call_id(call_id)?;
    let pending = pending_path(state_dir, call_id);
    let Some(request) = read_json::<ApprovalRequest>(&pending)? else {
        return Err(ApprovalError::NotPending {
            call_id: call_id.to_owned(),
        });
    };
    let file = AnswerFile {
        call_id: request.call_id,
        approve,
        reason,
        arguments_sha256: request.arguments_sha256,
        description_sha256: request.description_sha256,
        input_schema_sha256: request.input_schema_sha256,
    };
    let answers = state_dir.join(APPROVALS_DIR).join(ANSWERS_DIR);
    create_private_dir(&answers)?;
    // The first answer is final: a deny the operator confirmed must not be turned into an
    // approval by a later command (nor the reverse).
    let path = answer_path(state_dir, call_id);
    if path.exists() {
        return Err(ApprovalError::AlreadyAnswered {
            call_id: call_id.to_owned(),
        });
    }
    write_private_atomic(&path, &file)
}

/// A request as lines for a person: each field on its own line, every value escaped with
/// [`escape_for_display`], the arguments cut at [`MAX_DISPLAYED_ARGUMENT_CHARS`].
pub fn display_request(request: &ApprovalRequest) -> String {
    let arguments = escape_for_display(&request.arguments);
    let shown: String = arguments
        .chars()
        .take(MAX_DISPLAYED_ARGUMENT_CHARS)
        .collect();
    let elided = arguments
        .chars()
        .count()
        .saturating_sub(MAX_DISPLAYED_ARGUMENT_CHARS);
    let arguments = if elided > 0 {
        format!("{shown}… ({elided} more characters)")
    } else {
        shown
    };
    format!(
        "call {}\n  tool:      {} (server {}, upstream tool {})\n  effect:    {}\n  reason:    {}\n  arguments: {}\n  arguments sha256: {}\n  principal: {}, session {}",
        escape_for_display(&request.call_id),
        escape_for_display(&request.exposed_tool),
        escape_for_display(&request.server),
        escape_for_display(&request.tool),
        escape_for_display(&request.effect),
        escape_for_display(&request.reason),
        arguments,
        escape_for_display(&request.arguments_sha256),
        escape_for_display(&request.principal),
        escape_for_display(&request.session),
    )
}

/// `text` with every character a person could not see, or that changes how the rest reads,
/// escaped as `\u{…}`: control characters (line breaks included), bidirectional embeddings,
/// overrides and isolates (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C), zero-width
/// and invisible characters (U+200B–U+200D, U+2060–U+2064, U+FEFF, U+00AD, U+180E, U+034F),
/// and tag characters (U+E0000–U+E007F).
pub fn escape_for_display(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_hidden(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{FEFF}'
                | '\u{E0000}'..='\u{E007F}'
        )
}

fn check_call_id(call_id: &str) -> Result<(), ApprovalError> {
    let valid = !call_id.is_empty()
        && call_id.chars().count() <= MAX_CALL_ID_CHARS
        && call_id.chars().all(|c| c.is_ascii_alphanumeric());
    if valid {
        Ok(())
    } else {
        let shown: String = call_id.chars().take(MAX_CALL_ID_CHARS).collect();
        Err(ApprovalError::InvalidCallId {
            call_id: escape_for_display(&shown),
        })
    }
}

fn pending_path(state_dir: &Path, call_id: &str) -> PathBuf {
    state_dir
        .join(APPROVALS_DIR)
        .join(PENDING_DIR)
        .join(format!("{call_id}.json"))
}

fn answer_path(state_dir: &Path, call_id: &str) -> PathBuf {
    state_dir
        .join(APPROVALS_DIR)
        .join(ANSWERS_DIR)
        .join(format!("{call_id}.json"))
}

fn write_request(state_dir: &Path, request: &ApprovalRequest) -> Result<(), ApprovalError> {
    create_private_dir(&state_dir.join(APPROVALS_DIR).join(PENDING_DIR))?;
    create_private_dir(&state_dir.join(APPROVALS_DIR).join(ANSWERS_DIR))?;
    write_private_atomic(&pending_path(state_dir, &request.call_id), request)
}

/// Creates `dir` and its parents, owner-only on Unix.
fn create_private_dir(dir: &Path) -> Result<(), ApprovalError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(|source| ApprovalError::Io {
        action: "create",
        path: dir.to_path_buf(),
        source,
    })
}

/// Writes `value` as JSON to a fresh owner-only temporary file beside `path`, then renames it
/// over `path`.
fn write_private_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), ApprovalError> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|source| ApprovalError::Malformed {
        path: path.to_path_buf(),
        source,
    })?;
    let temporary = path.with_extension("json.tmp");
    let io_error = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source| ApprovalError::Io {
            action,
            path,
            source,
        }
    };
    let _ = fs::remove_file(&temporary);
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&temporary)
        .map_err(io_error("create", &temporary))?;
    let written = file.write_all(&bytes).and_then(|()| file.sync_data());
    drop(file);
    if let Err(source) = written {
        let _ = fs::remove_file(&temporary);
        return Err(io_error("write", &temporary)(source));
    }
    fs::rename(&temporary, path).map_err(|source| {
        let _ = fs::remove_file(&temporary);
        io_error("write", path)(source)
    })
}

/// Reads a JSON file; `None` when it does not exist.
fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, ApprovalError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ApprovalError::Io {
                action: "read",
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let mut bytes = Vec::new();
    file.take(MAX_APPROVAL_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| ApprovalError::Io {
            action: "read",
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > MAX_APPROVAL_FILE_BYTES {
        return Err(ApprovalError::TooLarge {
            path: path.to_path_buf(),
            limit: MAX_APPROVAL_FILE_BYTES,
        });
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| ApprovalError::Malformed {
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_for_display_shows_bidi_overrides_and_line_breaks() {
        assert_eq!(
            escape_for_display("a\u{202E}b\nc\u{200B}d"),
            "a\\u{202e}b\\u{a}c\\u{200b}d"
        );
        assert_eq!(escape_for_display("plain é ✓"), "plain é ✓");
    }

    #[test]
    fn answer_refuses_a_call_id_that_names_a_path() {
        let dir = tempfile::tempdir().unwrap();
        let error = answer(dir.path(), "../x", true, None).unwrap_err();
        assert!(
            matches!(error, ApprovalError::InvalidCallId { .. }),
            "{error}"
        );
    }

    #[test]
    fn answer_refuses_a_call_that_is_not_pending() {
        let dir = tempfile::tempdir().unwrap();
        let error = answer(dir.path(), "01ABC", true, None).unwrap_err();
        assert!(matches!(error, ApprovalError::NotPending { .. }), "{error}");
    }
}
