//! The answering side of the queue: its entries listed, the abandoned removed, one answered.

use std::io::{self, Write};
use std::path::Path;

use cap_std::fs::MetadataExt;

use super::files::{Queue, create_private, entry_name, is_held, open_entry, read_all, temporary_name};
use super::mac::{AnswerFile, PendingFile, answer_mac, entry_problem};
use super::{
AnsweredBy, ApprovalError, ApprovalRequest, Channel, check_call_id, current_os_user,
};
use crate::identity::{Approvers, HeldCall};

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
/// [`MAX_PENDING_REQUESTS`]: super::MAX_PENDING_REQUESTS
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
                Ok(Some((read_pending(&file, &path)?, is_held(&file))))
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
/// request; [`ApprovalError::NotAnApprover`] when `approvers` do not let this user answer
/// the call (the waiting gateway would not count the answer either).
pub fn answer(
    state_dir: &Path,
    call_id: &str,
    approve: bool,
    reason: Option<String>,
    approvers: &Approvers,
) -> Result<AnsweredBy, ApprovalError> {
    let by = AnsweredBy::os_user(Channel::Queue, &current_os_user());
    answer_as(state_dir, call_id, approve, reason, by, approvers)
}

/// As [`answer`], given by `by` instead of the operating-system user through the queue: the
/// web console answers as its signed-in user through [`Channel::Console`]. The same checks,
/// the same MAC'd answer file, the same rule that the first answer is final.
///
/// # Errors
/// As [`answer`].
pub fn answer_as(
    state_dir: &Path,
    call_id: &str,
    approve: bool,
    reason: Option<String>,
    by: AnsweredBy,
    approvers: &Approvers,
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
    let entry = read_pending(&file, &path)?;
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
    // The entry's owner is the gateway holding the call: an operating-system user answers
    // their own call when that is their uid.
    let holder_uid = file.metadata().ok().map(|meta| {
        use std::os::unix::fs::MetadataExt as _;
        meta.uid()
    });
    let held = HeldCall {
        server: &request.server,
        effect: &request.effect,
        principal: &request.principal,
        holder_uid,
    };
    if let Err(reason) = approvers.may_answer(&by, &held) {
        return Err(ApprovalError::NotAnApprover {
            call_id: call_id.to_owned(),
            reason,
        });
    }
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

/// A pending entry's file read whole (bounded) and parsed; `Malformed` naming `path` when it
/// is not an entry.
fn read_pending(file: &std::fs::File, path: &Path) -> Result<PendingFile, ApprovalError> {
    let bytes = read_all(file, path)?;
    serde_json::from_slice(&bytes).map_err(|source| ApprovalError::Malformed {
        path: path.to_owned(),
        source,
    })
}
