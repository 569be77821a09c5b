//! The audit head: how many records a log had, and the hash of the last of them, the last
//! time toolward knew them to be on disk. Kept outside the log, in the state folder, one
//! file per log, so a log cut short (its last records deleted, or the whole file replaced)
//! no longer matches it.
//!
//! The file is `<state_dir>/audit-heads/<sha256 of the log's canonical path>.head`, mode
//! `0600`, [`HEAD_FILE_BYTES`] long: one JSON object (`{"records":N,"hash":"…","end":B}`)
//! padded with spaces and ended by a newline, rewritten in place (`pwrite` at offset 0) so an
//! update never changes the file's size. `end` is where that record's line ends in the log,
//! in bytes: where recovery after a machine crash starts reading forward (see
//! [`super::writer`]); a head without it (an earlier toolward) is found from the log's end.

use std::fmt;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use cap_std::fs::{OpenOptions, OpenOptionsExt};
use serde::{Deserialize, Serialize};

use super::{AuditError, GENESIS_PREV};
use crate::canonical::sha256_hex;
use crate::state_dir::FILE_MODE;
use crate::state_dir::{StateDir, check_private};

/// The folder of the heads, inside the state folder.
pub const HEADS_DIR: &str = "audit-heads";

/// Length of a head file, in bytes: the longest head (a 20-digit count, a 64-digit hash and a
/// 20-digit end) takes 133, the rest is padding. Heads of 128 bytes (without `end`) still read.
pub const HEAD_FILE_BYTES: usize = 160;

/// A head, and where its last record's line ends in the log (bytes) when the head says.
pub(crate) type HeadAndEnd = (AuditHead, Option<u64>);

/// A head as its file holds it.
#[derive(Serialize, Deserialize)]
struct Stored {
    #[serde(flatten)]
    head: AuditHead,
    /// Where the line of the head's last record ends in the log, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    end: Option<u64>,
}

/// The end of a log as toolward last knew it to be on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditHead {
    /// How many records the log holds up to that point (the last one's `seq` + 1); 0 for an
    /// empty log.
    pub records: u64,
    /// SHA-256 (lowercase hex) of the last of those records' line, without its newline;
    /// `GENESIS_PREV` when `records` is 0.
    pub hash: String,
}

impl AuditHead {
    /// The head of an empty log.
    #[must_use]
    pub fn empty() -> AuditHead {
        AuditHead {
            records: 0,
            hash: GENESIS_PREV.to_owned(),
        }
    }

    /// The `seq` of the last record the head names; `None` for an empty log.
    #[must_use]
    pub fn last_seq(&self) -> Option<u64> {
        self.records.checked_sub(1)
    }
}

impl fmt::Display for AuditHead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.last_seq() {
            Some(seq) => write!(f, "seq {seq}, hash {}", self.hash),
            None => f.write_str("no records yet"),
        }
    }
}

/// How a log differs from its head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadProblem {
    /// The log ends before the head: the records `first..=last` (by `seq`) are missing.
    Missing {
        /// The first missing `seq` (the log's record count).
        first: u64,
        /// The head's last `seq`.
        last: u64,
    },
    /// The log's record at the head's last `seq` is not the one the head names: the log
    /// was replaced or rewritten.
    Differs {
        /// The head's last `seq`.
        seq: u64,
        /// The hash the log's record at that `seq` has.
        found: String,
    },
    /// The log runs on past its head by more than [`super::MAX_HEAD_LAG_RECORDS`] records,
    /// so toolward did not look for the head's record at start.
    TooFarPast {
        /// The head's record count.
        head_records: u64,
        /// The log's record count.
        log_records: u64,
    },
}

impl fmt::Display for HeadProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing { first, last } if first == last => {
                write!(f, "the record of seq {first} is missing from its end")
            }
            Self::Missing { first, last } => {
                write!(
                    f,
                    "the records of seq {first} to {last} are missing from its end"
                )
            }
            Self::Differs { seq, found } => write!(
                f,
                "its record of seq {seq} has hash {found}, not the one its head names (the log was replaced or rewritten)"
            ),
            Self::TooFarPast {
                head_records,
                log_records,
            } => write!(
                f,
                "it holds {log_records} records, more than {} past the {head_records} of its head",
                super::MAX_HEAD_LAG_RECORDS
            ),
        }
    }
}

/// The open head file of one log.
#[derive(Debug)]
pub(crate) struct HeadFile {
    file: File,
    path: PathBuf,
}

/// The head file's name for the log at `log` (any path to it): the SHA-256 of its canonical
/// path (its folder's canonical path and its file name, so a log that was deleted still
/// finds its head), so every process that writes one log, whatever path its config spells,
/// finds the same head.
///
/// # Errors
/// [`AuditError::Io`] when the log's folder cannot be made canonical (it does not exist).
pub fn head_name(log: &Path) -> Result<PathBuf, AuditError> {
    let resolve = |source| AuditError::Io {
        action: "resolve the path of",
        path: log.to_path_buf(),
        source,
    };
    let absolute = std::path::absolute(log).map_err(resolve)?;
    let (Some(folder), Some(file_name)) = (absolute.parent(), absolute.file_name()) else {
        return Err(resolve(std::io::Error::from(
            std::io::ErrorKind::InvalidInput,
        )));
    };
    let canonical = std::fs::canonicalize(folder)
        .map_err(resolve)?
        .join(file_name);
    let name = format!(
        "{}.head",
        sha256_hex(canonical.as_os_str().as_encoded_bytes())
    );
    Ok(Path::new(HEADS_DIR).join(name))
}

/// Reads the head of the log at `log` from `state`, without creating anything: `None` when
/// no head was written yet. Returns the head file's path too, for messages.
///
/// # Errors
/// [`AuditError::State`] when the head file is not private or not a regular file,
/// [`AuditError::HeadCorrupt`] when it does not hold a head.
pub fn read_head(state: &StateDir, log: &Path) -> Result<(Option<AuditHead>, PathBuf), AuditError> {
    let name = head_name(log)?;
    let path = state.path().join(&name);
    match state.dir().symlink_metadata(&name) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((None, path)),
        _ => {}
    }
    let file = state.open_private_file(&name)?.into_std();
    Ok((parse(&file, &path)?.map(|(head, _)| head), path))
}

impl HeadFile {
    /// Opens the head of the log at `log` in `state` (`audit-heads/`, created `0700`),
    /// creating the file `0600` when missing; returns the head it holds (`None` for a new
    /// file) and where its record ends in the log, when the head says.
    pub(crate) fn open(
        state: &StateDir,
        log: &Path,
    ) -> Result<(HeadFile, Option<HeadAndEnd>), AuditError> {
        let name = head_name(log)?;
        let path = state.path().join(&name);
        let dir = state.subdir(HEADS_DIR)?;
        let Some(file_name) = name.file_name() else {
            return Err(AuditError::HeadCorrupt { path });
        };
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true).mode(FILE_MODE);
        let io = |source| AuditError::Io {
            action: "open",
            path: path.clone(),
            source,
        };
        if let Ok(link) = dir.symlink_metadata(file_name)
            && !link.is_file()
        {
            return Err(AuditError::State(crate::state_dir::StateError::Kind {
                path,
                expected: "regular file",
            }));
        }
        let file = dir.open_with(file_name, &options).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        check_private(&meta, &path)?;
        let file = file.into_std();
        let head = parse(&file, &path)?;
        Ok((HeadFile { file, path }, head))
    }

    /// The head file's path, for messages.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the head in place; `end`: where its last record's line ends in the log, in
    /// bytes. Not synced: the head may fall behind what is on disk after a machine crash,
    /// never ahead of it, because it is written only after the sync that covers the records
    /// it names.
    pub(crate) fn write(&self, head: &AuditHead, end: u64) -> Result<(), AuditError> {
        let stored = Stored {
            head: head.clone(),
            end: Some(end),
        };
        let mut text = serde_json::to_vec(&stored).map_err(|source| AuditError::Encode {
            path: self.path.clone(),
            source,
        })?;
        text.resize(HEAD_FILE_BYTES - 1, b' ');
        text.push(b'\n');
        self.file
            .write_all_at(&text, 0)
            .map_err(|source| AuditError::Io {
                action: "write",
                path: self.path.clone(),
                source,
            })
    }
}

/// The head in `file` and its end, `None` when it is empty.
fn parse(file: &File, path: &Path) -> Result<Option<HeadAndEnd>, AuditError> {
    let mut buf = [0u8; HEAD_FILE_BYTES + 1];
    let mut read = 0;
    while read < buf.len() {
        let slice = buf.get_mut(read..).unwrap_or_default();
        match file.read_at(slice, read as u64) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(AuditError::Io {
                    action: "read",
                    path: path.to_path_buf(),
                    source,
                });
            }
        }
    }
    let bytes = buf.get(..read).unwrap_or_default();
    if bytes.is_empty() {
        return Ok(None);
    }
    if bytes.len() > HEAD_FILE_BYTES {
        return Err(AuditError::HeadCorrupt {
            path: path.to_path_buf(),
        });
    }
    let Stored { head, end } =
        serde_json::from_slice(bytes.trim_ascii_end()).map_err(|_| AuditError::HeadCorrupt {
            path: path.to_path_buf(),
        })?;
    let hex = head.hash.len() == 64 && head.hash.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex {
        return Err(AuditError::HeadCorrupt {
            path: path.to_path_buf(),
        });
    }
    Ok(Some((head, end)))
}
