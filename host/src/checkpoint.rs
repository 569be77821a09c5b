//! Checkpoints of the audit log that anyone can verify: the records are the leaves of an RFC
//! 6962 Merkle tree ([`crate::merkle`]; a leaf is a record's line, the exact bytes the chain
//! hashes), and a checkpoint is the tree's size and root in the C2SP `tlog-checkpoint`
//! format, signed with Ed25519 as a C2SP signed note.
//!
//! # Why
//!
//! The hash chain and its head catch a log cut or rewritten by anyone who cannot write the
//! state folder. The operator's own account can rewrite the log and its head together. A
//! checkpoint copied off the machine (a ticket, a second host, a transparency log) fixes the
//! first `size` records: `toolward audit verify --checkpoint FILE --public-key KEY` checks
//! that the log still holds them, unchanged, by a consistency proof from the checkpoint's
//! tree to the log's tree now. A key kept on the same account proves less: whoever can
//! rewrite the log can sign a new checkpoint for it with that key; what it cannot do is make
//! a checkpoint that already left the machine agree with the rewritten log.
//!
//! # The note
//!
//! ```text
//! toolward.example/audit/laptop          origin: the log's name, one line
//! 1234                                   the tree's size: records covered (decimal)
//! 4dc9...base64...=                      the tree's root (standard base64 of 32 bytes)
//!                                        a blank line
//! — toolward.example/audit/laptop Ab3x...base64(key id || Ed25519 signature)
//! ```
//!
//! The key files are those of the Go module `golang.org/x/mod/sumdb/note` (what C2SP
//! signed-note describes): a signer key `PRIVATE+KEY+<name>+<id>+<base64(0x01 || seed)>`,
//! a verifier key `<name>+<id>+<base64(0x01 || public key)>`, where `<id>` is 8 hex digits,
//! the first four bytes of `SHA-256(<name> || "\n" || 0x01 || public key)`. `toolward audit
//! keygen` makes a pair.
//!
//! # When
//!
//! With `audit.checkpoint` in the config, a gateway signs one every `interval_ms` when the
//! log grew, and one when it shuts down; `toolward audit checkpoint` signs one on demand.
//! Each covers the records up to the log's head (what is known to be on disk), so a
//! machine crash cannot take back a record a checkpoint covers; each reads the log once.
//! The latest is kept in the state folder ([`CHECKPOINTS_DIR`]); a new one is signed only
//! when the log still holds the records of the latest, unchanged.
//!
//! With `store.postgres`, the database's chain is the tree and each gateway signs with its
//! own key (`crate::store::postgres::checkpoints`): the leaves are each record's `line`,
//! the latest is kept in the state folder ([`store_latest_name`]) and in
//! `toolward_checkpoints`.

use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::audit::{self, AuditError, AuditLog, ChainBreak, head::head_name};
use crate::merkle::{self, Hash, Tree};
use crate::state_dir::{StateDir, StateError, check_private, replace_private_in};

/// The folder of the latest checkpoints, inside the state folder: one file per log,
/// `<sha256 of the log's canonical path>.checkpoint`, as the heads are named.
pub const CHECKPOINTS_DIR: &str = "audit-checkpoints";

/// Largest signed note read, in bytes: 64 KiB. A checkpoint is three lines and a signature
/// line per key; C2SP lets a verifier refuse far less.
pub const MAX_NOTE_BYTES: usize = 64 * 1024;

/// Most signature lines a note may carry: 16, as `golang.org/x/mod/sumdb/note` allows.
pub const MAX_SIGNATURES: usize = 16;

/// Largest key file read, in bytes: 4 KiB. A key is one line of well under 200.
pub const MAX_KEY_FILE_BYTES: u64 = 4096;

/// Longest key name or origin, in bytes: 256.
pub const MAX_NAME_BYTES: usize = 256;

/// The signature type byte of Ed25519 in note keys.
const ED25519: u8 = 0x01;

/// What starts each signature line: an em dash and a space.
const SIGNATURE_PREFIX: &str = "\u{2014} ";

/// Errors of checkpoints, their keys and notes.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// `audit.checkpoint` was asked of a start whose audit records go where no checkpoint
    /// covers them: neither the state folder's log nor a fleet's database.
    #[error(
        "`audit.checkpoint` signs the state folder's audit log or a fleet's database chain; this start keeps its audit records {kept}, which no checkpoint covers"
    )]
    NoLogToSign {
        /// Where the records are kept instead.
        kept: &'static str,
    },
    /// The key file cannot be read.
    #[error("cannot read checkpoint key `{path}`")]
    KeyRead {
        /// The key file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The signing key's file is not private to the user toolward runs as.
    #[error("checkpoint key `{path}` cannot be trusted")]
    KeyNotPrivate {
        /// The key file.
        path: PathBuf,
        /// Owner or mode.
        #[source]
        source: StateError,
    },
    /// The text is not a key of the kind expected.
    #[error("{what} is not a {kind} key: {reason}")]
    KeyMalformed {
        /// The file or the argument that held it.
        what: String,
        /// `signer` or `verifier`.
        kind: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A key name or origin that notes cannot carry.
    #[error("`{name}` cannot name a key or a log: {reason}")]
    BadName {
        /// The name, escaped for a terminal.
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The note is not a signed checkpoint.
    #[error("{what} is not a signed checkpoint: {reason}")]
    NoteMalformed {
        /// The file it came from, or `the note`.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// No signature of the note verifies with the key.
    #[error("{what}: no signature by key `{key}` verifies ({reason})")]
    NotSigned {
        /// The file it came from, or `the note`.
        what: String,
        /// The verifier key's name and id, `name+id`.
        key: String,
        /// What was found instead.
        reason: String,
    },
    /// The log cannot be read.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The state folder cannot be used.
    #[error(transparent)]
    State(#[from] StateError),
    /// The log's chain breaks before the records a checkpoint should cover.
    #[error(
        "audit log `{path}`: the chain breaks at {brk}, before the {records} records to cover; no checkpoint signed"
    )]
    Broken {
        /// The log file.
        path: PathBuf,
        /// The first break.
        brk: ChainBreak,
        /// The records the checkpoint would cover.
        records: u64,
    },
    /// The log does not hold its head's record.
    #[error(
        "audit log `{path}` does not match its head ({records} records, last hash {hash}): see `toolward audit verify --config`; no checkpoint signed"
    )]
    NotAtHead {
        /// The log file.
        path: PathBuf,
        /// The head's record count.
        records: u64,
        /// The head's hash.
        hash: String,
    },
    /// The log no longer holds the records of the latest checkpoint, unchanged.
    #[error(
        "audit log `{path}` no longer holds the {size} records of its latest checkpoint `{checkpoint}` unchanged: {problem}; no checkpoint signed (check it with `toolward audit verify --config --checkpoint`)"
    )]
    Inconsistent {
        /// The log file.
        path: PathBuf,
        /// The checkpoint file.
        checkpoint: PathBuf,
        /// Its size.
        size: u64,
        /// What differs.
        problem: String,
    },
    /// No randomness for a new key.
    #[error("no randomness for a new checkpoint key: {0}")]
    Random(String),
    /// The fleet's database cannot be read, or the checkpoint cannot be kept there.
    #[cfg(feature = "postgres")]
    #[error(transparent)]
    Store(#[from] crate::database::PgError),
    /// The database's chain breaks, does not end at its head row, or no longer holds the
    /// records a gateway read or its latest checkpoint covers.
    #[error("PostgreSQL store {store}: {problem}; no checkpoint signed")]
    Chain {
        /// The store, as `PgStore::name` names it.
        store: String,
        /// What is wrong.
        problem: String,
    },
}

/// A checkpoint's body: which log, how many records, and the tree's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The log's name (the first line), the signer key's name unless the config says.
    pub origin: String,
    /// Records covered: the tree's size.
    pub size: u64,
    /// The root of the tree of those records.
    pub root: Hash,
}

impl Checkpoint {
    /// The body as the note carries it: three lines, each ended by a newline.
    #[must_use]
    pub fn body(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            BASE64.encode(self.root)
        )
    }

    /// Reads a body: the origin, the size in decimal, the root in standard base64, and
    /// optional extension lines, which are ignored.
    fn parse(body: &str, what: &str) -> Result<Checkpoint, CheckpointError> {
        let bad = |reason: &str| CheckpointError::NoteMalformed {
            what: what.to_owned(),
            reason: reason.to_owned(),
        };
        let mut lines = body.split('\n');
        let (Some(origin), Some(size), Some(root)) = (lines.next(), lines.next(), lines.next())
        else {
            return Err(bad("fewer than three lines before the signatures"));
        };
        if origin.is_empty() {
            return Err(bad("the origin line is empty"));
        }
        let canonical = size == "0" || (!size.starts_with('0') && !size.is_empty());
        let size: u64 = size
            .parse()
            .ok()
            .filter(|_| canonical)
            .ok_or_else(|| bad("the second line is not a tree size in decimal"))?;
        let root: Hash = BASE64
            .decode(root)
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or_else(|| bad("the third line is not a 32-byte hash in base64"))?;
        Ok(Checkpoint {
            origin: origin.to_owned(),
            size,
            root,
        })
    }
}

/// Checks that `name` can name a key or a log in a note: not empty, at most
/// [`MAX_NAME_BYTES`], printable, no spaces and no `+`.
pub(crate) fn check_name(name: &str) -> Result<(), CheckpointError> {
    let bad = |reason| CheckpointError::BadName {
        name: crate::text::escape(name),
        reason,
    };
    if name.is_empty() {
        return Err(bad("it is empty"));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(bad("it is longer than 256 bytes"));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("it holds a space or a control character"));
    }
    if name.contains('+') {
        return Err(bad("it holds a `+`"));
    }
    Ok(())
}

/// The key id of an Ed25519 key `public` named `name`.
fn key_id(name: &str, public: &VerifyingKey) -> u32 {
    let mut hasher = Sha256::new();
    hasher.update(name.as_bytes());
    hasher.update(b"\n");
    hasher.update([ED25519]);
    hasher.update(public.as_bytes());
    let digest = hasher.finalize();
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// A signer key: signs checkpoints.
pub struct NoteSigner {
    name: String,
    id: u32,
    key: SigningKey,
}

impl fmt::Debug for NoteSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NoteSigner")
            .field("name", &self.name)
            .field("id", &format_args!("{:08x}", self.id))
            .finish_non_exhaustive()
    }
}

impl NoteSigner {
    /// A new key named `name`, from the operating system's random source.
    ///
    /// # Errors
    /// [`CheckpointError::BadName`], or [`CheckpointError::Random`].
    pub fn generate(name: &str) -> Result<NoteSigner, CheckpointError> {
        check_name(name)?;
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| CheckpointError::Random(e.to_string()))?;
        let key = SigningKey::from_bytes(&seed);
        let id = key_id(name, &key.verifying_key());
        Ok(NoteSigner {
            name: name.to_owned(),
            id,
            key,
        })
    }

    /// Reads a signer key (`PRIVATE+KEY+<name>+<id>+<base64>`); `what` names where it came
    /// from, for messages.
    ///
    /// # Errors
    /// [`CheckpointError::KeyMalformed`] or [`CheckpointError::BadName`].
    pub fn parse(text: &str, what: &str) -> Result<NoteSigner, CheckpointError> {
        let bad = |reason: &str| CheckpointError::KeyMalformed {
            what: what.to_owned(),
            kind: "signer",
            reason: reason.to_owned(),
        };
        let rest = text
            .trim_end_matches('\n')
            .strip_prefix("PRIVATE+KEY+")
            .ok_or_else(|| bad("it does not start with `PRIVATE+KEY+`"))?;
        let (name, id, key) = split_key(rest).ok_or_else(|| bad("it is not `PRIVATE+KEY+NAME+ID+KEY`"))?;
        check_name(name)?;
        let seed: [u8; 32] = key_bytes(key).ok_or_else(|| bad("its key is not an Ed25519 key"))?;
        let key = SigningKey::from_bytes(&seed);
        let want = key_id(name, &key.verifying_key());
        if id != want {
            return Err(bad("its id does not match its name and key"));
        }
        Ok(NoteSigner {
            name: name.to_owned(),
            id,
            key,
        })
    }

    /// Reads the signer key in the file `path`, which must be a regular file of the user
    /// toolward runs as, with no access for group or others.
    ///
    /// # Errors
    /// [`CheckpointError::KeyRead`], [`CheckpointError::KeyNotPrivate`], or what
    /// [`parse`](Self::parse) returns.
    pub fn read(path: &Path) -> Result<NoteSigner, CheckpointError> {
        let io = |source| CheckpointError::KeyRead {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let meta = cap_std::fs::Metadata::from_file(&file).map_err(io)?;
        if !meta.is_file() {
            return Err(CheckpointError::KeyNotPrivate {
                path: path.to_path_buf(),
                source: StateError::Kind {
                    path: path.to_path_buf(),
                    expected: "regular file",
                },
            });
        }
        check_private(&meta, path).map_err(|source| CheckpointError::KeyNotPrivate {
            path: path.to_path_buf(),
            source,
        })?;
        let mut text = String::new();
        file.take(MAX_KEY_FILE_BYTES)
            .read_to_string(&mut text)
            .map_err(io)?;
        NoteSigner::parse(&text, &format!("checkpoint key `{}`", path.display()))
    }

    /// The key as its file holds it (a secret).
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut bytes = vec![ED25519];
        bytes.extend_from_slice(self.key.as_bytes());
        format!(
            "PRIVATE+KEY+{}+{:08x}+{}",
            self.name,
            self.id,
            BASE64.encode(bytes)
        )
    }

    /// The key's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The verifier key of this signer.
    #[must_use]
    pub fn verifier(&self) -> NoteVerifier {
        NoteVerifier {
            name: self.name.clone(),
            id: self.id,
            key: self.key.verifying_key(),
        }
    }

    /// `checkpoint` as a signed note: its body, a blank line, and one signature line.
    #[must_use]
    pub fn sign(&self, checkpoint: &Checkpoint) -> String {
        self.sign_text(&checkpoint.body())
    }

    /// `body` (lines, each ended by a newline) as a signed note with one signature line.
    fn sign_text(&self, body: &str) -> String {
        let signature = self.key.sign(body.as_bytes());
        let mut blob = self.id.to_be_bytes().to_vec();
        blob.extend_from_slice(&signature.to_bytes());
        format!(
            "{body}\n{SIGNATURE_PREFIX}{} {}\n",
            self.name,
            BASE64.encode(blob)
        )
    }
}

/// `NAME+ID+KEY` split, the id read as 8 hex digits.
fn split_key(text: &str) -> Option<(&str, u32, &str)> {
    // The key's base64 may hold `+` itself: the name and id are the first two fields.
    let mut parts = text.splitn(3, '+');
    let (Some(name), Some(id), Some(key), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    if id.len() != 8 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((name, u32::from_str_radix(id, 16).ok()?, key))
}

/// The 32 bytes after the Ed25519 type byte in `base64`.
fn key_bytes(base64: &str) -> Option<[u8; 32]> {
    let bytes = BASE64.decode(base64).ok()?;
    let (kind, key) = bytes.split_first()?;
    if *kind != ED25519 {
        return None;
    }
    key.try_into().ok()
}

/// A verifier key: checks checkpoints' signatures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteVerifier {
    name: String,
    id: u32,
    key: VerifyingKey,
}

impl fmt::Display for NoteVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut bytes = vec![ED25519];
        bytes.extend_from_slice(self.key.as_bytes());
        write!(
            f,
            "{}+{:08x}+{}",
            self.name,
            self.id,
            BASE64.encode(bytes)
        )
    }
}

impl NoteVerifier {
    /// Reads a verifier key (`<name>+<id>+<base64>`); `what` names where it came from.
    ///
    /// # Errors
    /// [`CheckpointError::KeyMalformed`] or [`CheckpointError::BadName`].
    pub fn parse(text: &str, what: &str) -> Result<NoteVerifier, CheckpointError> {
        let bad = |reason: &str| CheckpointError::KeyMalformed {
            what: what.to_owned(),
            kind: "verifier",
            reason: reason.to_owned(),
        };
        let (name, id, key) = split_key(text.trim_end_matches('\n'))
            .ok_or_else(|| bad("it is not `NAME+ID+KEY`"))?;
        check_name(name)?;
        let key = key_bytes(key)
            .and_then(|bytes| VerifyingKey::from_bytes(&bytes).ok())
            .ok_or_else(|| bad("its key is not an Ed25519 public key"))?;
        if id != key_id(name, &key) {
            return Err(bad("its id does not match its name and key"));
        }
        Ok(NoteVerifier {
            name: name.to_owned(),
            id,
            key,
        })
    }

    /// The key's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Opens the signed note `note`: its signature by this key must verify; other
    /// signatures are ignored. `what` names where the note came from, for messages.
    ///
    /// # Errors
    /// [`CheckpointError::NoteMalformed`] for a note that is not a signed checkpoint,
    /// [`CheckpointError::NotSigned`] when no signature by this key verifies.
    pub fn open(&self, note: &[u8], what: &str) -> Result<Checkpoint, CheckpointError> {
        let body = self.verify_note(note, what)?;
        Checkpoint::parse(body, what)
    }

    /// The text of the signed note `note` once its signature by this key verifies.
    fn verify_note<'a>(&self, note: &'a [u8], what: &str) -> Result<&'a str, CheckpointError> {
        let bad = |reason: String| CheckpointError::NoteMalformed {
            what: what.to_owned(),
            reason,
        };
        if note.len() > MAX_NOTE_BYTES {
            return Err(bad(format!(
                "it holds {} bytes, more than the limit of {MAX_NOTE_BYTES}",
                note.len()
            )));
        }
        let note = std::str::from_utf8(note).map_err(|_| bad("it is not UTF-8".to_owned()))?;
        if note
            .chars()
            .any(|c| c != '\n' && (c.is_control() || crate::text::is_escaped(c)))
        {
            return Err(bad("it holds control or hidden characters".to_owned()));
        }
        let split = note
            .rfind("\n\n")
            .ok_or_else(|| bad("no blank line before the signatures".to_owned()))?;
        let (body, signatures) = note.split_at(split + 1);
        let signatures = signatures.get(1..).unwrap_or_default();
        let Some(signatures) = signatures.strip_suffix('\n') else {
            return Err(bad("its signatures do not end in a newline".to_owned()));
        };
        let lines: Vec<&str> = signatures.split('\n').collect();
        if lines.len() > MAX_SIGNATURES {
            return Err(bad(format!(
                "it carries {} signatures, more than the limit of {MAX_SIGNATURES}",
                lines.len()
            )));
        }
        let mut found = "it carries no signature by that name and id";
        for line in lines {
            let signature = line
                .strip_prefix(SIGNATURE_PREFIX)
                .and_then(|rest| rest.rsplit_once(' '))
                .ok_or_else(|| bad(format!("`{}` is not a signature line", crate::text::escape(line))))?;
            let (name, blob) = signature;
            let blob = BASE64
                .decode(blob)
                .map_err(|_| bad("a signature is not base64".to_owned()))?;
            let Some((id, signature)) = blob.split_first_chunk::<4>() else {
                return Err(bad("a signature is shorter than its key id".to_owned()));
            };
            if name != self.name || u32::from_be_bytes(*id) != self.id {
                continue;
            }
            let Ok(signature) = ed25519_dalek::Signature::from_slice(signature) else {
                found = "its signature by that key is not 64 bytes";
                continue;
            };
            if self
                .key
                .verify_strict(body.as_bytes(), &signature)
                .is_ok()
            {
                return Ok(body);
            }
            found = "its signature by that key does not verify";
        }
        Err(CheckpointError::NotSigned {
            what: what.to_owned(),
            key: format!("{}+{:08x}", self.name, self.id),
            reason: found.to_owned(),
        })
    }
}

/// A log read as a tree: its leaves up to a size, and what the chain said.
#[derive(Debug)]
pub struct LogTree {
    /// The leaves, one per record, each [`merkle::leaf_hash`] of the record's line.
    pub tree: Tree,
    /// Records that chained (all of them when intact), and the first break.
    pub report: audit::VerifyReport,
    /// The chain hash (SHA-256 of the line) of the last leaf.
    pub last_hash: String,
}

/// Reads the log at `path` as a tree: the leaves of its intact records, at most `upto` of
/// them when given.
///
/// # Errors
/// [`AuditError`] when the log cannot be read; a broken chain is in the report.
pub fn read_tree(path: &Path, upto: Option<u64>) -> Result<LogTree, AuditError> {
    let mut tree = Tree::new();
    let mut last_hash = audit::GENESIS_PREV.to_owned();
    let report = audit::read_chain(path, |_, line| {
        if upto.is_none_or(|upto| tree.size() < upto) {
            tree.push(merkle::leaf_hash(line));
            last_hash = crate::canonical::sha256_hex(line);
        }
    })?;
    Ok(LogTree {
        tree,
        report,
        last_hash,
    })
}

/// Where the latest checkpoint of the log at `log` is kept, relative to the state folder.
///
/// # Errors
/// [`AuditError::Io`] when the log's folder does not exist.
pub fn latest_name(log: &Path) -> Result<PathBuf, AuditError> {
    let head = head_name(log)?;
    let stem = head
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(Path::new(CHECKPOINTS_DIR).join(format!("{stem}.checkpoint")))
}

/// Where the latest checkpoint a gateway signed of the database `store` (as `PgStore::name`
/// names it) is kept, relative to the state folder: `postgres-<sha256 of the name>`.
#[must_use]
pub fn store_latest_name(store: &str) -> PathBuf {
    Path::new(CHECKPOINTS_DIR).join(format!(
        "postgres-{}.checkpoint",
        crate::canonical::sha256_hex(store.as_bytes())
    ))
}

/// The latest checkpoint of the log at `log` as its file in `state` holds it (a signed
/// note), and the file's path; `None` when none was written.
///
/// # Errors
/// [`CheckpointError::State`] when the file is not private, or cannot be read.
pub fn read_latest(
    state: &StateDir,
    log: &Path,
) -> Result<(Option<Vec<u8>>, PathBuf), CheckpointError> {
    read_latest_named(state, &latest_name(log)?)
}

/// The signed note kept at `name` in `state` ([`latest_name`], [`store_latest_name`]), and
/// the file's path; `None` when none was written.
///
/// # Errors
/// [`CheckpointError::State`] when the file is not private, or cannot be read.
pub fn read_latest_named(
    state: &StateDir,
    name: &Path,
) -> Result<(Option<Vec<u8>>, PathBuf), CheckpointError> {
    let path = state.path().join(name);
    let file = match state.open_private_file(name) {
        Ok(file) => file,
        Err(e) if e.not_found() => return Ok((None, path)),
        Err(e) => return Err(e.into()),
    };
    let mut bytes = Vec::new();
    file.into_std()
        .take(MAX_NOTE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| StateError::Io {
            path: path.clone(),
            source,
        })?;
    Ok((Some(bytes), path))
}

/// A checkpoint signed by [`sign_log`].
#[derive(Debug, Clone)]
pub struct Signed {
    /// What it says.
    pub checkpoint: Checkpoint,
    /// The signed note.
    pub note: String,
    /// Where it was kept.
    pub path: PathBuf,
    /// Whether it covers more records than the latest before it (or there was none).
    pub grew: bool,
}

/// Signs a checkpoint of the log at `log` with `signer` as `origin`, keeps it as the latest
/// in `state`, and returns it. It covers the records up to the log's head in `state` (the
/// whole intact chain when the log has no head), and is signed only when the log holds the
/// head's record and the latest checkpoint's records unchanged (one this key signed as this
/// origin; another is left aside).
///
/// # Errors
/// [`CheckpointError::Broken`], [`CheckpointError::NotAtHead`],
/// [`CheckpointError::Inconsistent`], or the log or state folder cannot be read or written.
pub fn sign_log(
    log: &Path,
    state: &StateDir,
    signer: &NoteSigner,
    origin: &str,
) -> Result<Signed, CheckpointError> {
    check_name(origin)?;
    let (head, _) = audit::read_head(state, log)?;
    let upto = head.as_ref().map(|head| head.records);
    let read = read_tree(log, upto)?;
    let size = read.tree.size();
    if let Some(records) = upto
        && size < records
    {
        return Err(match read.report.first_break {
            Some(brk) => CheckpointError::Broken {
                path: log.to_path_buf(),
                brk,
                records,
            },
            None => not_at_head(log, head.as_ref()),
        });
    }
    if let Some(head) = &head
        && head.hash != read.last_hash
    {
        return Err(not_at_head(log, Some(head)));
    }
    let (latest, latest_path) = read_latest(state, log)?;
    let verifier = signer.verifier();
    let earlier = latest.and_then(|note| {
        let opened = verifier.open(&note, "the latest checkpoint");
        match opened {
            Ok(checkpoint) if checkpoint.origin == origin => Some(checkpoint),
            Ok(_) | Err(_) => {
                tracing::warn!(
                    checkpoint = %latest_path.display(),
                    "the latest checkpoint is not one this key signed for this log; it is replaced"
                );
                None
            }
        }
    });
    if let Some(earlier) = &earlier {
        let inconsistent = |problem: String| CheckpointError::Inconsistent {
            path: log.to_path_buf(),
            checkpoint: latest_path.clone(),
            size: earlier.size,
            problem,
        };
        if earlier.size > size {
            return Err(inconsistent(format!("the log holds {size} records")));
        }
        let root = read.tree.root(earlier.size).map_err(|e| inconsistent(e.to_string()))?;
        if root != earlier.root {
            return Err(inconsistent(
                "its first records do not hash to that checkpoint's root".to_owned(),
            ));
        }
    }
    let checkpoint = Checkpoint {
        origin: origin.to_owned(),
        size,
        root: read.tree.root(size).map_err(|e| CheckpointError::NoteMalformed {
            what: "the log's tree".to_owned(),
            reason: e.to_string(),
        })?,
    };
    let note = signer.sign(&checkpoint);
    keep_latest(state, &latest_name(log)?, &note)?;
    Ok(Signed {
        grew: earlier.is_none_or(|earlier| earlier.size < size),
        checkpoint,
        note,
        path: latest_path,
    })
}

/// Keeps `note` as the latest checkpoint at `name` in `state` (a private file, replaced
/// whole) and returns its path.
///
/// # Errors
/// [`CheckpointError::State`] when the folder or file cannot be written.
pub fn keep_latest(state: &StateDir, name: &Path, note: &str) -> Result<PathBuf, CheckpointError> {
    let path = state.path().join(name);
    let dir = state.subdir(CHECKPOINTS_DIR)?;
    let file_name = name
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    replace_private_in(&dir, &file_name, note.as_bytes(), &path)?;
    Ok(path)
}

fn not_at_head(log: &Path, head: Option<&audit::AuditHead>) -> CheckpointError {
    CheckpointError::NotAtHead {
        path: log.to_path_buf(),
        records: head.map_or(0, |head| head.records),
        hash: head.map_or_else(|| audit::GENESIS_PREV.to_owned(), |head| head.hash.clone()),
    }
}

/// What [`check_log`] found: whether the log still holds the records a checkpoint covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// The checkpoint, its signature verified.
    pub checkpoint: Checkpoint,
    /// Records of the log that chained.
    pub records: u64,
    /// The root of the log's tree of those records.
    pub root: Hash,
    /// The consistency proof from the checkpoint's tree to the log's, when the log extends
    /// it.
    pub proof: Option<Vec<Hash>>,
    /// Why the log does not extend the checkpoint, when it does not.
    pub problem: Option<String>,
}

/// Checks the log read as `read` against `checkpoint`: the log must hold at least its
/// records, and the first of them must hash to its root; the consistency proof from the
/// checkpoint's tree to the log's is made and checked against both roots.
#[must_use]
pub fn check_log(read: &LogTree, checkpoint: Checkpoint) -> CheckReport {
    let records = read.tree.size();
    let root = read.tree.root(records).unwrap_or_else(|_| merkle::empty_root());
    let mut report = CheckReport {
        records,
        root,
        proof: None,
        problem: None,
        checkpoint,
    };
    let size = report.checkpoint.size;
    if records < size {
        report.problem = Some(match &read.report.first_break {
            Some(brk) => format!(
                "the chain breaks at {brk}, before the {size} records the checkpoint covers"
            ),
            None => format!(
                "the log holds {records} records, fewer than the {size} the checkpoint covers: records were removed"
            ),
        });
        return report;
    }
    let proof = read.tree.consistency_proof(size, records).unwrap_or_default();
    if merkle::verify_consistency(size, records, &report.checkpoint.root, &root, &proof) {
        report.proof = Some(proof);
    } else {
        report.problem = Some(format!(
            "the log's first {size} records do not hash to the checkpoint's root: a record it covers was changed, removed or reordered"
        ));
    }
    report
}

/// Signs checkpoints of a gateway's log on a thread of its own: every interval when the log's
/// head moved since the last one, and once more when stopped (after a sync, so the last
/// records are covered). A checkpoint that cannot be signed is logged, never a refusal of
/// calls: the log itself is intact or refuses records on its own.
#[derive(Debug)]
pub struct Checkpointer {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts signing checkpoints of `log` (its head and latest checkpoint in `state`) with
    /// `signer` as `origin`, every `interval`.
    #[must_use]
    pub fn start(
        log: Arc<AuditLog>,
        state: Arc<StateDir>,
        signer: NoteSigner,
        origin: String,
        interval: Duration,
    ) -> Checkpointer {
        let path = log.path().to_path_buf();
        let mut signed: Option<u64> = None;
        Checkpointer::spawn(interval, move |last| {
            if last && let Err(error) = log.sync() {
                tracing::error!(%error, "no audit checkpoint at shutdown");
                return;
            }
            let head = audit::read_head(&state, &path).ok().and_then(|(head, _)| head);
            if head.is_some() && head.map(|head| head.records) == signed {
                return;
            }
            match sign_log(&path, &state, &signer, &origin) {
                Ok(done) => {
                    tracing::info!(size = done.checkpoint.size, checkpoint = %done.path.display(), "signed an audit checkpoint");
                    signed = Some(done.checkpoint.size);
                }
                Err(error) => tracing::error!(%error, "no audit checkpoint signed"),
            }
        })
    }

    /// Runs `tick(false)` every `interval` on a thread of its own, and `tick(true)` once when
    /// stopped; `tick` signs a checkpoint when its log grew, and logs what it cannot sign.
    #[must_use]
    pub fn spawn(interval: Duration, mut tick: impl FnMut(bool) + Send + 'static) -> Checkpointer {
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("toolward-checkpoints".to_owned())
            .spawn(move || {
                loop {
                    match stopped.recv_timeout(interval) {
                        Err(RecvTimeoutError::Timeout) => tick(false),
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                            tick(true);
                            return;
                        }
                    }
                }
            });
        match thread {
            Ok(thread) => Checkpointer {
                stop: Some(stop),
                thread: Some(thread),
            },
            Err(error) => {
                tracing::error!(%error, "cannot start the thread that signs audit checkpoints");
                Checkpointer {
                    stop: None,
                    thread: None,
                }
            }
        }
    }

    /// Signs the last checkpoint (when the log grew since the one before) and stops.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint() -> Checkpoint {
        Checkpoint {
            origin: "toolward.test/audit".to_owned(),
            size: 3,
            root: merkle::leaf_hash(b"x"),
        }
    }

    #[test]
    fn a_signed_checkpoint_opens_with_its_verifier_and_keys_round_trip() {
        let signer = NoteSigner::generate("toolward.test/audit").unwrap();
        let again = NoteSigner::parse(&signer.to_text(), "key").unwrap();
        assert_eq!(again.verifier(), signer.verifier());
        let verifier = NoteVerifier::parse(&signer.verifier().to_string(), "vkey").unwrap();
        let note = signer.sign(&checkpoint());
        assert!(note.starts_with("toolward.test/audit\n3\n"), "{note}");
        assert!(note.contains("\n\n\u{2014} toolward.test/audit "), "{note}");
        assert_eq!(verifier.open(note.as_bytes(), "note").unwrap(), checkpoint());
    }

    #[test]
    fn the_go_note_packages_verifier_key_is_read_and_its_id_checked() {
        // From golang.org/x/mod/sumdb/note's documentation.
        let vkey = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
        let verifier = NoteVerifier::parse(vkey, "vkey").unwrap();
        assert_eq!(verifier.to_string(), vkey);
        let wrong_id = vkey.replace("c74f20a3", "c74f20a4");
        assert!(NoteVerifier::parse(&wrong_id, "vkey").is_err());
        let skey = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz";
        let signer = NoteSigner::parse(skey, "skey").unwrap();
        assert_eq!(signer.verifier().to_string(), vkey);
        assert_eq!(signer.to_text(), skey);
    }

    #[test]
    fn a_note_is_signed_and_opened_as_the_go_note_package_does() {
        // The example of golang.org/x/mod/sumdb/note's documentation, byte for byte.
        let skey = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz";
        let text = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n";
        let want = format!(
            "{text}\n\u{2014} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
        );
        let signer = NoteSigner::parse(skey, "skey").unwrap();
        assert_eq!(signer.sign_text(text), want);
        let verifier = signer.verifier();
        assert_eq!(verifier.verify_note(want.as_bytes(), "note").unwrap(), text);
        let changed = want.replace("cryptography", "cryptographY");
        assert!(verifier.verify_note(changed.as_bytes(), "note").is_err());
    }

    #[test]
    fn a_note_signed_by_another_key_or_changed_does_not_open() {
        let signer = NoteSigner::generate("toolward.test/audit").unwrap();
        let other = NoteSigner::generate("toolward.test/audit").unwrap();
        let note = other.sign(&checkpoint());
        let err = signer.verifier().open(note.as_bytes(), "note").unwrap_err();
        assert!(matches!(err, CheckpointError::NotSigned { .. }), "{err}");

        let note = signer.sign(&checkpoint()).replacen("\n3\n", "\n4\n", 1);
        let err = signer.verifier().open(note.as_bytes(), "note").unwrap_err();
        assert!(err.to_string().contains("does not verify"), "{err}");
    }
}
