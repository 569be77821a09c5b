//! Reading the files the operator names: the config, the rules file, policy settings,
//! components, the manifest, `policy test` cases. Every one goes through [`read`], which
//! bounds it before reading a byte:
//!
//! - the path is opened without blocking (`O_NONBLOCK`), so a FIFO with no writer cannot hold
//!   the start up, then the opened file (not the path again) is checked: anything but a
//!   regular file (a character device such as `/dev/zero`, a FIFO, a socket, a folder) is
//!   refused, naming what it is;
//! - a regular file longer than its limit is refused from its length, and the read itself
//!   stops one byte past the limit, so a file that grows while it is read is refused too.
//!
//! The config file and the rules file decide what toolward lets through, so they are read with
//! [`read_trusted`], which also checks the opened file's owner and mode
//! ([`check_owner_and_mode`]): owned by the effective user toolward runs as, or by root, and
//! writable by neither group nor others. Otherwise whoever else can write them (another local
//! user, or a server that changed their mode) would set the policy. The manifest has its own,
//! stricter check ([`crate::manifest::Manifest::read`]).
//!
//! The limits, each in bytes: [`crate::config::MAX_CONFIG_BYTES`],
//! [`MAX_RULES_BYTES`], [`MAX_SETTINGS_BYTES`], [`MAX_COMPONENT_BYTES`],
//! [`crate::manifest::MAX_MANIFEST_BYTES`], [`MAX_CASES_BYTES`].

use std::fs::{File, Metadata};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Longest rules file, in bytes: 64 MiB. A rules file of 100,000 tools with parameters is
/// about 20 MiB; past 64 MiB a path more likely names the wrong file.
pub const MAX_RULES_BYTES: u64 = 64 * 1024 * 1024;
/// Longest policy settings file (`policy.settings`), in bytes: 64 MiB, as the rules file.
pub const MAX_SETTINGS_BYTES: u64 = 64 * 1024 * 1024;
/// Longest component file (`rules.component`, `policy.component`, `policy inspect`), in
/// bytes: 128 MiB. The built-in component is under 1 MiB; a guest with a language runtime
/// inside is tens of MiB.
pub const MAX_COMPONENT_BYTES: u64 = 128 * 1024 * 1024;
/// Longest `toolward policy test` cases file, in bytes: 16 MiB.
pub const MAX_CASES_BYTES: u64 = 16 * 1024 * 1024;

/// The UTF-8 byte order mark, which some editors on Windows put at the start of a text file.
pub const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Why an operator's file was not read. Each names what the file is for and its path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorFileError {
    /// The file cannot be opened or read.
    #[error("cannot read the {what} `{}`", path.display())]
    Io {
        /// What the file is for (`rules file`, `policy component`, ...).
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// Not a regular file: it could be endless (`/dev/zero`) or block (a FIFO).
    #[error(
        "the {what} `{}` is a {kind}, not a regular file: toolward reads only regular files of at most {limit} bytes here; point it at a file",
        path.display()
    )]
    NotRegular {
        /// What the file is for.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// What it is instead (`character device`, `FIFO`, `socket`, `folder`, ...).
        kind: &'static str,
        /// The limit, bytes.
        limit: u64,
    },
    /// Longer than its limit.
    #[error(
        "the {what} `{}` holds {bytes} bytes, more than the limit of {limit} bytes",
        path.display()
    )]
    TooLarge {
        /// What the file is for.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Bytes found (at least `limit + 1` for a file that grew while read).
        bytes: u64,
        /// The limit, bytes.
        limit: u64,
    },
    /// Owned by someone other than the effective user or root.
    #[error(
        "the {what} `{}` is owned by uid {owner}, not by uid {euid} that toolward runs as nor by root: whoever owns it decides what toolward lets through; review it, then run `chown {euid} {}`",
        path.display(),
        path.display()
    )]
    Owner {
        /// What the file is for.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// The effective uid toolward runs as.
        euid: u32,
    },
    /// The folder holding it is writable by group or others.
    #[error(transparent)]
    FolderWritable(Box<FolderWritable>),
    /// Writable by group or others.
    #[error(
        "the {what} `{}` has mode {mode:04o}: group or others can change what toolward lets through; review it, then run `chmod go-w {}`",
        path.display(),
        path.display()
    )]
    Writable {
        /// What the file is for.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

/// The folder holding an operator's file is writable by group or others (and not sticky):
/// they could put another file in its place.
#[derive(Debug, thiserror::Error)]
#[error(
    "the folder `{}` holding the {what} `{}` has mode {mode:04o}: group or others could replace the file; review it, then run `chmod go-w {}`",
    folder.display(),
    path.display(),
    folder.display()
)]
pub struct FolderWritable {
    /// What the file is for.
    pub what: &'static str,
    /// The file.
    pub path: PathBuf,
    /// Its folder.
    pub folder: PathBuf,
    /// The folder's permission bits.
    pub mode: u32,
}

/// The bytes of the operator's file at `path` (what it is for in `what`, for messages), at
/// most `limit` bytes, read as the module documentation says.
///
/// # Errors
/// [`OperatorFileError`] naming `what` and `path`.
pub fn read(path: &Path, what: &'static str, limit: u64) -> Result<Vec<u8>, OperatorFileError> {
    read_with_metadata(path, what, limit).map(|(bytes, _)| bytes)
}

/// As [`read`], with the metadata of the file that was read (for owner and mode checks made
/// on the same open file, not on the path again).
///
/// # Errors
/// As [`read`].
pub fn read_with_metadata(
    path: &Path,
    what: &'static str,
    limit: u64,
) -> Result<(Vec<u8>, Metadata), OperatorFileError> {
    let io = |source| OperatorFileError::Io {
        what,
        path: path.to_owned(),
        source,
    };
    let file = open_nonblocking(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(OperatorFileError::NotRegular {
            what,
            path: path.to_owned(),
            kind: kind_of(&meta),
            limit,
        });
    }
    let bytes = read_at_most(file, meta.len(), limit)
        .map_err(io)?
        .map_err(|bytes| OperatorFileError::TooLarge {
            what,
            path: path.to_owned(),
            bytes,
            limit,
        })?;
    Ok((bytes, meta))
}

/// The bytes of `file` (whose metadata says `len`), when there are at most `limit` of them:
/// never more than `limit + 1` are read, so a file that grows while it is read is refused
/// too. `Ok(Err(n))`: `n` bytes, past the limit.
///
/// # Errors
/// The read's.
pub(crate) fn read_at_most(
    file: impl Read,
    len: u64,
    limit: u64,
) -> std::io::Result<Result<Vec<u8>, u64>> {
    if len > limit {
        return Ok(Err(len));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    Ok(if read > limit { Err(read) } else { Ok(bytes) })
}

/// As [`read`], for a file that sets policy (the config, the rules file): the opened file is
/// also checked by [`check_owner_and_mode`].
///
/// # Errors
/// As [`read`], and [`OperatorFileError::Owner`] or [`OperatorFileError::Writable`].
pub fn read_trusted(
    path: &Path,
    what: &'static str,
    limit: u64,
) -> Result<Vec<u8>, OperatorFileError> {
    let (bytes, meta) = read_with_metadata(path, what, limit)?;
    check_owner_and_mode(&meta, path, what)?;
    check_folder(path, what)?;
    Ok(bytes)
}

/// Refuses `path` when the folder holding it (as written, before any symbolic link is
/// followed: that is where a file can be put in its place) is writable by group or others
/// without the sticky bit. A confined server cannot change such a folder's mode from inside
/// (the namespaces withhold its metadata only where they apply; see SECURITY.md), and another
/// local user could otherwise swap the file for one toolward then trusts.
///
/// # Errors
/// [`OperatorFileError::FolderWritable`] naming the folder and the fix.
pub fn check_folder(path: &Path, what: &'static str) -> Result<(), OperatorFileError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let folder = match path.parent() {
            Some(folder) if !folder.as_os_str().is_empty() => folder.to_owned(),
            _ => PathBuf::from("."),
        };
        let Ok(meta) = std::fs::metadata(&folder) else {
            return Ok(());
        };
        if others_can_replace_in(meta.mode()) {
            return Err(OperatorFileError::FolderWritable(Box::new(
                FolderWritable {
                    what,
                    path: path.to_owned(),
                    folder,
                    mode: meta.mode() & 0o7777,
                },
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = (path, what);
    Ok(())
}

/// Refuses a file (`meta`, of the file opened) that is owned by neither the effective user nor
/// root, or that group or others may write (Unix; elsewhere nothing is checked). A symbolic
/// link is followed: what counts is the file read.
///
/// # Errors
/// [`OperatorFileError::Owner`] or [`OperatorFileError::Writable`], naming `what`, `path` and
/// the command that fixes it.
pub fn check_owner_and_mode(
    meta: &Metadata,
    path: &Path,
    what: &'static str,
) -> Result<(), OperatorFileError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let euid = crate::identity::euid();
        if !trusted_owner(meta.uid()) {
            return Err(OperatorFileError::Owner {
                what,
                path: path.to_owned(),
                owner: meta.uid(),
                euid,
            });
        }
        if others_can_write(meta.mode()) {
            return Err(OperatorFileError::Writable {
                what,
                path: path.to_owned(),
                mode: meta.mode() & 0o7777,
            });
        }
    }
    #[cfg(not(unix))]
    let _ = (meta, path, what);
    Ok(())
}

/// Whether a file or folder owned by `uid` is one toolward trusts: the effective user's, or
/// root's (who can change anything anyway). The one rule for what the operator's files and
/// the files toolward rewrites may be owned by.
pub fn trusted_owner(uid: u32) -> bool {
    uid == crate::identity::euid() || uid == 0
}

/// Whether permission bits `mode` let group or others write the file.
pub fn others_can_write(mode: u32) -> bool {
    mode & 0o022 != 0
}

/// Whether a folder of permission bits `mode` lets group or others put another file in the
/// place of one it holds: writable by them and not sticky (in a sticky folder such as `/tmp`
/// only a file's owner can rename or remove it).
pub fn others_can_replace_in(mode: u32) -> bool {
    others_can_write(mode) && mode & 0o1000 == 0
}

/// `bytes` without a leading UTF-8 byte order mark: JSON (RFC 8259, section 8.1) does not
/// allow one, and JSON parsers refuse it at line 1, column 1 with no word of why.
pub fn without_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes)
}

#[cfg(unix)]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

#[cfg(not(unix))]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

fn kind_of(meta: &Metadata) -> &'static str {
    let kind = meta.file_type();
    if kind.is_dir() {
        return "folder";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_char_device() {
            return "character device";
        }
        if kind.is_block_device() {
            return "block device";
        }
        if kind.is_fifo() {
            return "FIFO";
        }
        if kind.is_socket() {
            return "socket";
        }
    }
    "special file"
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Bounds of these tests: a refusal must come before any real reading happens.
    const REFUSAL_WITHIN: Duration = Duration::from_secs(2);

    #[cfg(target_os = "linux")]
    #[test]
    fn dev_zero_is_refused_before_a_byte_is_read_naming_what_it_is_and_the_limit() {
        let started = Instant::now();
        let error = read(Path::new("/dev/zero"), "rules file", MAX_RULES_BYTES).unwrap_err();
        assert!(started.elapsed() < REFUSAL_WITHIN);
        let text = error.to_string();
        assert!(
            text.contains("the rules file `/dev/zero` is a character device, not a regular file")
                && text.contains(&format!("at most {MAX_RULES_BYTES} bytes")),
            "{text}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_without_a_writer_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("rules.json");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let started = Instant::now();
        let error = read(&fifo, "rules file", MAX_RULES_BYTES).unwrap_err();
        assert!(started.elapsed() < REFUSAL_WITHIN);
        assert!(
            error.to_string().contains("is a FIFO, not a regular file"),
            "{error}"
        );
    }

    #[test]
    fn a_file_over_its_limit_is_refused_naming_its_length_and_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("settings.json");
        std::fs::write(&file, vec![b' '; 101]).unwrap();
        let error = read(&file, "policy settings", 100).unwrap_err().to_string();
        assert!(
            error.contains("holds 101 bytes, more than the limit of 100 bytes"),
            "{error}"
        );
        std::fs::write(&file, vec![b' '; 100]).unwrap();
        assert_eq!(read(&file, "policy settings", 100).unwrap().len(), 100);
    }

    #[test]
    fn a_folder_is_refused_as_a_folder() {
        let dir = tempfile::tempdir().unwrap();
        let error = read(dir.path(), "rules file", 100).unwrap_err().to_string();
        assert!(error.contains("is a folder, not a regular file"), "{error}");
    }

    #[cfg(unix)]
    #[test]
    fn a_trusted_file_writable_by_group_or_others_is_refused_naming_the_fix() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rules.json");
        std::fs::write(&file, "{}").unwrap();
        for mode in [0o664, 0o646] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            let error = read_trusted(&file, "rules file", 100)
                .unwrap_err()
                .to_string();
            assert!(
                error.starts_with(&format!(
                    "the rules file `{}` has mode {mode:04o}",
                    file.display()
                )) && error.ends_with(&format!("run `chmod go-w {}`", file.display())),
                "{error}"
            );
        }
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(read_trusted(&file, "rules file", 100).unwrap(), b"{}");
    }

    #[cfg(unix)]
    #[test]
    fn a_trusted_file_owned_by_another_user_is_refused_naming_the_fix() {
        use std::os::unix::fs::MetadataExt;
        let euid = crate::identity::euid();
        if euid != 0 {
            eprintln!("SKIPPED: needs root, to chown the file to uid 65534");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("toolward.json");
        std::fs::write(&file, "{}").unwrap();
        std::os::unix::fs::chown(&file, Some(65534), None).unwrap();
        assert_eq!(std::fs::metadata(&file).unwrap().uid(), 65534);
        let error = read_trusted(&file, "config file", 100)
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            format!(
                "the config file `{0}` is owned by uid 65534, not by uid 0 that toolward runs as nor by root: whoever owns it decides what toolward lets through; review it, then run `chown 0 {0}`",
                file.display()
            )
        );
    }

    #[test]
    fn a_byte_order_mark_is_taken_off_and_nothing_else() {
        assert_eq!(without_bom(b"\xEF\xBB\xBF{}"), b"{}");
        assert_eq!(without_bom(b"{}"), b"{}");
        assert_eq!(without_bom(b"\xEF\xBB{}"), b"\xEF\xBB{}");
    }
}
