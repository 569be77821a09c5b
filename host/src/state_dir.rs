//! The state folder, opened once as a `cap_std::fs::Dir`, with owner and mode checks and the
//! keys toolward MACs with.
//!
//! Ambient authority is used in exactly one place: [`StateDir::open`], which creates and opens
//! the folder the config names. Everything below it is reached through the returned value.

use std::fmt;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;

use crate::identity::euid;
use cap_std::fs::{
    Dir, DirBuilder, DirBuilderExt, Metadata, MetadataExt, OpenOptions, OpenOptionsExt,
};
use hmac::{KeyInit, Mac};
use sha2::Sha256;

/// Mode of every folder toolward creates in the state folder: owner only.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file toolward creates in the state folder: owner read and write only.
pub const FILE_MODE: u32 = 0o600;
/// Length of a key file, bytes (an HMAC-SHA256 key of the hash's block-sized half).
pub const KEY_BYTES: usize = 32;

/// Why the state folder, or something in it, cannot be trusted or reached.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A file system operation failed.
    #[error("state folder: `{path}`: {source}")]
    Io {
        /// The path, as the operator would type it.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Owned by another user than the one toolward runs as.
    #[error(
        "state folder: `{path}` is owned by uid {owner}, not by uid {euid} that toolward runs as; anyone who owns it can change what toolward trusts: run `chown {euid} {path}` or point `state_dir` elsewhere"
    )]
    Owner {
        /// The path.
        path: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// The effective uid of this process.
        euid: u32,
    },
    /// Group or others have some access.
    #[error(
        "state folder: `{path}` has mode {mode:04o}, which gives other users access: run `chmod {want:04o} {path}`"
    )]
    Mode {
        /// The path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// The mode toolward creates it with.
        want: u32,
    },
    /// Not the kind of file expected (a symlink, a folder where a file belongs, ...).
    #[error("state folder: `{path}` is not a {expected}")]
    Kind {
        /// The path.
        path: PathBuf,
        /// `folder` or `regular file`.
        expected: &'static str,
    },
    /// A key file of the wrong length.
    #[error(
        "state folder: key `{path}` holds {len} bytes, not {KEY_BYTES}: remove it to make a new one"
    )]
    KeyLength {
        /// The path.
        path: PathBuf,
        /// Bytes found.
        len: usize,
    },
}

/// The state folder (`state_dir` of the config), open.
pub struct StateDir {
    path: PathBuf,
    dir: Dir,
}

impl fmt::Debug for StateDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateDir")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Checks that `meta` (of `path`) is owned by the effective user and gives group and others
/// no access at all.
///
/// # Errors
/// [`StateError::Owner`] or [`StateError::Mode`], each naming the path and the fix.
pub fn check_private(meta: &Metadata, path: &Path) -> Result<(), StateError> {
    let euid = euid();
    if meta.uid() != euid {
        return Err(StateError::Owner {
            path: path.to_owned(),
            owner: meta.uid(),
            euid,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        let want = if meta.is_dir() { DIR_MODE } else { FILE_MODE };
        return Err(StateError::Mode {
            path: path.to_owned(),
            mode,
            want,
        });
    }
    Ok(())
}

impl StateDir {
    /// Opens the state folder at `path`, creating it (mode `0700`, and its missing parents
    /// with the process's umask) if it does not exist, and checks that it is a folder owned by
    /// the effective user with no access for group or others.
    ///
    /// # Errors
    /// `StateError` naming the path: it cannot be created or opened, it is a symlink or not
    /// a folder, or its owner or mode is wrong.
    pub fn open(path: &Path) -> Result<StateDir, StateError> {
        let io = |source| StateError::Io {
            path: path.to_owned(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        match std::fs::DirBuilder::new().mode_private().create(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
        let link = std::fs::symlink_metadata(path).map_err(io)?;
        if !link.is_dir() {
            return Err(StateError::Kind {
                path: path.to_owned(),
                expected: "folder",
            });
        }
        let dir = Dir::open_ambient_dir(path, ambient_authority()).map_err(io)?;
        let meta = dir.dir_metadata().map_err(io)?;
        check_private(&meta, path)?;
        Ok(StateDir {
            path: path.to_owned(),
            dir,
        })
    }

    /// The folder's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder itself.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Opens the folder `name` (a relative path without `..`) inside the state folder,
    /// creating it and its missing parents with mode `0700`, and checks each component's kind,
    /// owner and mode.
    ///
    /// # Errors
    /// `StateError` naming the path.
    pub fn subdir(&self, name: impl AsRef<Path>) -> Result<Dir, StateError> {
        let name = name.as_ref();
        let mut current = self
            .dir
            .try_clone()
            .map_err(|source| self.io(Path::new(""), source))?;
        let mut walked = PathBuf::new();
        for component in name.components() {
            walked.push(component);
            let mut builder = DirBuilder::new();
            builder.mode(DIR_MODE);
            match self.dir.create_dir_with(&walked, &builder) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(self.io(&walked, e)),
            }
            let full = self.path.join(&walked);
            let link = current
                .symlink_metadata(component)
                .map_err(|source| self.io(&walked, source))?;
            if !link.is_dir() {
                return Err(StateError::Kind {
                    path: full,
                    expected: "folder",
                });
            }
            check_private(&link, &full)?;
            current = current
                .open_dir(component)
                .map_err(|source| self.io(&walked, source))?;
        }
        Ok(current)
    }

    /// The key named `name` in the state folder (a file of `KEY_BYTES` random bytes, mode
    /// `0600`), created from the operating system's random source on first use.
    ///
    /// # Errors
    /// `StateError` naming the path: unreadable, wrong owner or mode, wrong length, or no
    /// randomness.
    pub fn key(&self, name: &str) -> Result<Key, StateError> {
        let full = self.path.join(name);
        let mut bytes = [0u8; KEY_BYTES];
        if self.dir.symlink_metadata(name).is_err() {
            // Written whole under a name of its own, then linked into place: another process
            // never reads a key that is still being written, and of two made at once the
            // first link wins and both use it.
            getrandom::fill(&mut bytes)
                .map_err(|e| self.io(Path::new(name), std::io::Error::other(e.to_string())))?;
            let mut suffix = [0u8; 8];
            getrandom::fill(&mut suffix)
                .map_err(|e| self.io(Path::new(name), std::io::Error::other(e.to_string())))?;
            let temp = format!(".{name}.{}.tmp", hex::encode(suffix));
            let mut create = OpenOptions::new();
            create.write(true).create_new(true).mode(FILE_MODE);
            let written = self
                .dir
                .open_with(&temp, &create)
                .and_then(|mut file| file.write_all(&bytes).and_then(|()| file.sync_all()));
            let linked = written.and_then(|()| self.dir.hard_link(&temp, &self.dir, name));
            let _ = self.dir.remove_file(&temp);
            match linked {
                Ok(()) => return Ok(Key(bytes)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(self.io(Path::new(name), e)),
            }
        }
        let mut file = self.open_private_file(name)?;
        let mut read = Vec::with_capacity(KEY_BYTES + 1);
        (&mut file)
            .take(KEY_BYTES as u64 + 1)
            .read_to_end(&mut read)
            .map_err(|source| self.io(Path::new(name), source))?;
        if read.len() != KEY_BYTES {
            return Err(StateError::KeyLength {
                path: full,
                len: read.len(),
            });
        }
        bytes.copy_from_slice(&read);
        Ok(Key(bytes))
    }

    /// Opens the existing regular file `name` (relative to the state folder) for reading,
    /// refusing a symlink, another kind of file, or a wrong owner or mode (see
    /// `open_private_in`).
    ///
    /// # Errors
    /// `StateError` naming the path.
    pub fn open_private_file(
        &self,
        name: impl AsRef<Path>,
    ) -> Result<cap_std::fs::File, StateError> {
        let name = name.as_ref();
        open_private_in(&self.dir, name, &self.path.join(name))
    }

    /// Creates the regular file `name` (relative to the state folder) with `bytes`, mode
    /// `0600`, flushed to disk; an existing file is left alone and is an error of kind
    /// `AlreadyExists` (`StateError::already_exists`).
    ///
    /// # Errors
    /// `StateError` naming the path.
    pub fn create_private_file(
        &self,
        name: impl AsRef<Path>,
        bytes: &[u8],
    ) -> Result<(), StateError> {
        let name = name.as_ref();
        let mut create = OpenOptions::new();
        create.write(true).create_new(true).mode(FILE_MODE);
        let mut file = self
            .dir
            .open_with(name, &create)
            .map_err(|source| self.io(name, source))?;
        file.write_all(bytes)
            .and_then(|()| file.sync_all())
            .map_err(|source| self.io(name, source))
    }

    fn io(&self, name: &Path, source: std::io::Error) -> StateError {
        StateError::Io {
            path: self.path.join(name),
            source,
        }
    }
}

impl StateError {
    /// Whether this is a file or folder that does not exist.
    pub fn not_found(&self) -> bool {
        matches!(self, StateError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// Whether this is a file that already exists (see [`StateDir::create_private_file`]).
    pub fn already_exists(&self) -> bool {
        matches!(self, StateError::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists)
    }
}

/// Opens the existing regular file `name` of `dir` (`full` is its path, for messages) for
/// reading: a final symlink is not followed (`O_NOFOLLOW`; cap-std keeps every other
/// component inside `dir`), the open does not wait (`O_NONBLOCK`: a FIFO put there would
/// otherwise hold it until a writer came; a regular file reads as ever), and the opened file itself, not the path again, must be a regular
/// file owned by the effective user with no access for group or others ([`check_private`]).
///
/// # Errors
/// [`StateError`] naming `full`: [`StateError::not_found`] when there is no such file.
pub fn open_private_in(
    dir: &Dir,
    name: &Path,
    full: &Path,
) -> Result<cap_std::fs::File, StateError> {
    let io = |source| StateError::Io {
        path: full.to_owned(),
        source,
    };
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32);
    let file = match dir.open_with(name, &options) {
        Ok(file) => file,
        // ELOOP: the name is a symlink.
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Err(StateError::Kind {
                path: full.to_owned(),
                expected: "regular file",
            });
        }
        Err(e) => return Err(io(e)),
    };
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(StateError::Kind {
            path: full.to_owned(),
            expected: "regular file",
        });
    }
    check_private(&meta, full)?;
    Ok(file)
}

/// Writes `bytes` to the file `name` of `dir` (`full` is its path, for messages) through a
/// temporary file created there with mode `0600` and renamed over `name`, so a reader sees
/// the old file or the new one, never a part, and a symlink at `name` is replaced, never
/// followed. Not flushed to disk: for what can be made again (the compiled-component cache).
///
/// # Errors
/// [`StateError`] naming `full`; the temporary file is removed.
pub fn replace_private_in(
    dir: &Dir,
    name: &str,
    bytes: &[u8],
    full: &Path,
) -> Result<(), StateError> {
    // Unique per process and per write: threads of one process may write the same name at
    // once, and each must rename its own file.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp = format!(".{name}.{}-{n}.tmp", std::process::id());
    let io = |source| StateError::Io {
        path: full.to_owned(),
        source,
    };
    let mut create = OpenOptions::new();
    create.write(true).create_new(true).mode(FILE_MODE);
    let written = dir
        .open_with(&temp, &create)
        .and_then(|mut file| file.write_all(bytes))
        .and_then(|()| dir.rename(&temp, dir, name));
    if written.is_err() {
        // Best effort: the error that matters is the one returned.
        let _ = dir.remove_file(&temp);
    }
    written.map_err(io)
}

/// `std::fs::DirBuilder` with mode `0700` (the state folder itself, made with ambient
/// authority before it can be opened as a `Dir`).
trait PrivateDirBuilder {
    fn mode_private(&mut self) -> &mut Self;
}

impl PrivateDirBuilder for std::fs::DirBuilder {
    fn mode_private(&mut self) -> &mut Self {
        std::os::unix::fs::DirBuilderExt::mode(self, DIR_MODE)
    }
}

/// A secret key of the state folder: MACs (HMAC-SHA256) of what toolward must know it wrote
/// itself (approval answers, compiled components).
#[derive(Clone)]
pub struct Key([u8; KEY_BYTES]);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// A key from its bytes (tests, and keys kept outside the state folder).
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> Key {
        Key(bytes)
    }

    fn hmac(&self, parts: &[&[u8]]) -> hmac::Hmac<Sha256> {
        // Each part is length-prefixed, so ("ab", "c") and ("a", "bc") differ.
        let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable_key_length());
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac
    }

    /// HMAC-SHA256 over `parts` (each length-prefixed), as 64 lowercase hex digits.
    pub fn mac_hex(&self, parts: &[&[u8]]) -> String {
        hex::encode(self.hmac(parts).finalize().into_bytes())
    }

    /// Whether `tag_hex` is the MAC of `parts`, compared in constant time. Only the form
    /// [`Key::mac_hex`] writes is accepted (lowercase hex), so one MAC has one spelling and a
    /// value keyed by its text (a `requestState`) cannot be varied by case.
    pub fn verify_hex(&self, parts: &[&[u8]], tag_hex: &str) -> bool {
        if !tag_hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return false;
        }
        match hex::decode(tag_hex) {
            Ok(tag) => self.hmac(parts).verify_slice(&tag).is_ok(),
            Err(_) => false,
        }
    }
}

/// The length of [`Key::mac_hex`]'s text: 64 hex digits.
pub const MAC_HEX_BYTES: usize = 64;

/// A file of the state folder that starts with its own MAC (the compact manifest, the schema
/// verdicts): the MAC's line and the body after it, `None` when the text has no such line.
pub(crate) fn split_mac(text: &[u8]) -> Option<(&str, &[u8])> {
    let mac = text.get(..MAC_HEX_BYTES)?;
    if text.get(MAC_HEX_BYTES) != Some(&b'\n') {
        return None;
    }
    let body = text.get(MAC_HEX_BYTES + 1..)?;
    Some((std::str::from_utf8(mac).ok()?, body))
}

#[expect(
    clippy::panic,
    reason = "HMAC accepts keys of every length; this cannot run"
)]
fn unreachable_key_length() -> hmac::Hmac<Sha256> {
    panic!("HMAC refused a key")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn open_creates_the_folder_owner_only() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("state");
        let state = StateDir::open(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        state.subdir("approvals/pending").unwrap();
        let mode = std::fs::metadata(path.join("approvals/pending"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn a_folder_others_can_reach_is_refused_with_the_fix() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("state");
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let error = StateDir::open(&path).unwrap_err().to_string();
        assert!(error.contains("chmod 0700"), "{error}");
    }

    #[test]
    fn a_symlinked_subfolder_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("state");
        let state = StateDir::open(&path).unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, path.join("components")).unwrap();
        let error = state.subdir("components").unwrap_err().to_string();
        assert!(error.contains("is not a folder"), "{error}");
    }

    #[test]
    fn a_state_folder_owned_by_another_user_is_refused_with_the_fix() {
        const NOBODY: u32 = 65534;
        if euid() != 0 {
            eprintln!("SKIPPED: needs root, to chown the state folder to uid {NOBODY}");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("state");
        StateDir::open(&path).unwrap();
        std::os::unix::fs::chown(&path, Some(NOBODY), None).unwrap();
        let error = StateDir::open(&path).unwrap_err().to_string();
        assert!(
            error.contains(&format!("is owned by uid {NOBODY}, not by uid 0"))
                && error.contains(&format!("run `chown 0 {}`", path.display())),
            "{error}"
        );
    }

    #[test]
    fn a_private_file_is_replaced_whole_and_a_symlink_in_its_place_is_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("state")).unwrap();
        let dir = state.subdir("components").unwrap();
        let full = state.path().join("components/entry");
        replace_private_in(&dir, "entry", b"one", &full).unwrap();
        replace_private_in(&dir, "entry", b"two", &full).unwrap();
        let mut text = String::new();
        open_private_in(&dir, Path::new("entry"), &full)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "two");
        assert_eq!(
            std::fs::metadata(&full).unwrap().permissions().mode() & 0o777,
            0o600
        );

        let outside = tmp.path().join("outside");
        std::fs::write(&outside, b"planted").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&outside, state.path().join("components/link")).unwrap();
        let error = open_private_in(
            &dir,
            Path::new("link"),
            &state.path().join("components/link"),
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("is not a regular file"), "{error}");
        assert!(
            !open_private_in(&dir, Path::new("absent"), &full)
                .unwrap_err()
                .to_string()
                .is_empty()
        );
        assert!(
            open_private_in(&dir, Path::new("absent"), &full)
                .unwrap_err()
                .not_found()
        );
    }

    #[test]
    fn a_key_is_made_once_and_macs_verify_only_their_parts() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("state")).unwrap();
        let key = state.key("answer-key").unwrap();
        let again = state.key("answer-key").unwrap();
        let tag = key.mac_hex(&[b"ab", b"c"]);
        assert!(again.verify_hex(&[b"ab", b"c"], &tag));
        assert!(!again.verify_hex(&[b"a", b"bc"], &tag));
        assert!(
            !again.verify_hex(&[b"ab", b"c"], &tag.to_uppercase()),
            "only the lowercase spelling is the MAC"
        );
        let mode = std::fs::metadata(tmp.path().join("state/answer-key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
