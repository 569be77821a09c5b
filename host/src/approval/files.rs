//! The queue's folders and files: entries written locked, files made private and read
//! bounded, answers checked and removed.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, MetadataExt, OpenOptions, OpenOptionsExt};

use super::mac::{PendingFile, verify_answer, with_request_mac_parts};
use super::{APPROVAL_KEY, Answer, ApprovalError, ApprovalRequest, MAX_APPROVAL_FILE_BYTES, MAX_PENDING_REQUESTS};
use crate::state_dir::{Key, StateDir, StateError, check_private};

/// Pending requests, one file per held call.
pub(super) const PENDING_DIR: &str = "approvals/pending";
/// Answers, one file per answered call.
pub(super) const ANSWERS_DIR: &str = "approvals/answers";

/// The queue's folders and key, reached through the state folder.
pub(super) struct Queue {
    state: StateDir,
    pub(super) key: Key,
    pub(super) pending: Dir,
    pub(super) answers: Dir,
}

impl Queue {
    /// Opens the state folder at `state_dir`, the queue's folders (created `0700`) and the
    /// approval key (created on first use).
    pub(super) fn open(state_dir: &Path) -> Result<Queue, ApprovalError> {
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

    pub(super) fn pending_path(&self, name: &str) -> PathBuf {
        self.state.path().join(PENDING_DIR).join(name)
    }

    pub(super) fn answer_path(&self, name: &str) -> PathBuf {
        self.state.path().join(ANSWERS_DIR).join(name)
    }

    /// Writes `request`'s pending entry, locked before it appears; the returned guard keeps
    /// the lock and removes the entry (then releases the lock) when dropped.
    pub(super) fn hold(&self, request: &ApprovalRequest) -> Result<PendingGuard, ApprovalError> {
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
    pub(super) fn pending_exists(&self, name: &str) -> bool {
        !matches!(self.pending.symlink_metadata(name), Err(e) if e.kind() == io::ErrorKind::NotFound)
    }

    /// The answer file for `request`, if one is there: the authenticated answer, or why it is
    /// a forgery (with the file's identity, to remove that file and no other).
    pub(super) fn read_answer(&self, request: &ApprovalRequest) -> Option<Result<Answer, Forgery>> {
        let name = entry_name(&request.call_id);
        let path = self.answer_path(&name);
        let file = match open_entry(&self.answers, &name, &path) {
            Ok(None) => return None,
            Ok(Some(file)) => file,
            Err(error) => return Some(Err((crate::text::error_chain(&error), None))),
        };
        let meta = file.metadata().ok();
        let identity = meta.as_ref().map(|meta| {
            use std::os::unix::fs::MetadataExt as _;
            (meta.dev(), meta.ino())
        });
        let owner = meta.as_ref().map(|meta| {
            use std::os::unix::fs::MetadataExt as _;
            meta.uid()
        });
        let answer = read_all(&file, &path)
            .map_err(|error| crate::text::error_chain(&error))
            .and_then(|bytes| verify_answer(&bytes, request, &self.key))
            .and_then(|answer| written_by_its_user(answer, owner));
        Some(answer.map_err(|why| (why, identity)))
    }

    /// Removes the answer file `name` if it is still the file `identity` names (a real answer
    /// that replaced a forgery meanwhile stays).
    pub(super) fn remove_answer(&self, name: &str, identity: Option<FileId>) {
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
    pub(super) fn entry_names(&self) -> Result<Vec<String>, ApprovalError> {
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
pub(super) type FileId = (u64, u64);

/// Why an answer file is a forgery, and which file it was (to remove that one and no other).
pub(super) type Forgery = (String, Option<FileId>);

/// Keeps a pending entry's lock for as long as its call waits; removes the entry and its
/// answer, then releases the lock, when dropped.
pub(super) struct PendingGuard {
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

/// `answer`, when it is an operating-system user's (the queue's channel) and the answer file
/// is owned by the uid it names: the kernel set the file's owner, the process that wrote it
/// only the uid it claims. Approver rules judge such an answer by its uid
/// ([`crate::identity::Approvers`]), so a process holding the queue's key cannot answer as
/// another user.
fn written_by_its_user(answer: Answer, owner: Option<u32>) -> Result<Answer, String> {
    if answer.by.channel != crate::identity::Channel::Queue {
        return Ok(answer);
    }
    match (answer.by.uid, owner) {
        (Some(uid), Some(owner)) if uid == owner => Ok(answer),
        (Some(uid), Some(owner)) => Err(format!(
            "it names uid {uid} as its answerer, but uid {owner} wrote it"
        )),
        (None, _) => Err(String::from("it names no uid, as an answer through the queue must")),
        (Some(_), None) => Err(String::from("its owner cannot be read")),
    }
}

pub(super) fn entry_name(call_id: &str) -> String {
    format!("{call_id}.json")
}

/// A fresh name for a file written before it is renamed or linked into place; it starts
/// with `.`, so listings skip it.
pub(super) fn temporary_name(call_id: &str) -> String {
    format!(".{call_id}.{}.tmp", crate::ids::new_ulid())
}

/// Creates the new file `name` in `dir`, mode `0600`, for writing.
pub(super) fn create_private(dir: &Dir, name: &str, path: &Path) -> Result<std::fs::File, ApprovalError> {
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
pub(super) fn open_entry(dir: &Dir, name: &str, path: &Path) -> Result<Option<std::fs::File>, ApprovalError> {
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
pub(super) fn read_all(file: &std::fs::File, path: &Path) -> Result<Vec<u8>, ApprovalError> {
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
pub(super) fn is_held(file: &std::fs::File) -> bool {
    match file.try_lock() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(_) => true,
    }
}
