//! Rewriting a file for the operator without being raced into writing elsewhere: the client
//! configs `client connect` and `disconnect` edit, the manifest `pin` writes, the config and
//! rules file `init` writes, and the backup and record `connect` keeps.
//!
//! A [`HeldFile`] is the file's path resolved once:
//!
//! - symbolic links are followed at most [`MAX_LINKS`] times (a dotfile manager such as stow
//!   or chezmoi links a client's file into its own folder), each read through the folder
//!   holding it, and each owned by the effective user or root ([`trusted_owner`]);
//! - the folder holding the file at the end is opened once as a `cap_std` [`Dir`] and held: the
//!   file is read, checked and replaced through that handle, by its name in it, never by its
//!   path again. That folder and the file must be the effective user's or root's and not
//!   writable by group or others ([`others_can_write`], [`others_can_replace_in`]), otherwise
//!   whoever else can write them chooses what toolward writes over. [`Foreign::Accept`] (a flag
//!   the operator passes) takes such a file and folder anyway; the rest still holds: every
//!   folder on the way must be closed to others and every link the operator's or root's in
//!   such a folder, so an accepted shared file is that file, never where another user's
//!   link leads.
//!
//! [`HeldFile::replace`] then makes sure the name still holds the very file read (its device
//! and inode; a symbolic link put in its place is another file), writes a temporary file in
//! the held folder (created new, never through a link), flushes it, renames it over the name
//! in that same folder and flushes the folder. The new file keeps the old one's permission
//! bits and never its set-user-id, set-group-id or sticky bit ([`PERMISSION_BITS`]).
//!
//! Ambient authority is used in [`HeldFile::open`] alone: opening the folders on the way.
//!
//! A test can stop a command between its read and its replace ([`test_pause`]): only in a
//! build with the `test-pause` feature, which the release binary does not have.

use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, Metadata, MetadataExt as _, OpenOptions, OpenOptionsExt as _};

use super::operator_file::{others_can_replace_in, others_can_write, trusted_owner};

/// Most symbolic links followed from the path named to the file: 8. A dotfile manager makes
/// one (stow, chezmoi's symlink mode), a link to a link is rare; the system's own limit (40
/// on Linux) is for whole paths, far past what a config file needs.
pub const MAX_LINKS: usize = 8;

/// The mode bits a rewritten file can carry: read, write and execute for owner, group and
/// others. Never set-user-id, set-group-id or sticky: a file toolward wrote must not run as
/// someone else.
pub const PERMISSION_BITS: u32 = 0o777;

/// What to do with a file (or a link to it, or its folder) that another user owns or that
/// group or others can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foreign {
    /// Refuse it; the refusal says how to fix the owner or mode.
    Refuse,
    /// Refuse it; the refusal also names this flag, which accepts it.
    RefuseUnless(&'static str),
    /// Write it (the operator passed the flag): the file and the folder holding it only. It
    /// is still reached once, through its folder, never through a link of another user's or
    /// a link in a folder others can write, nor through a folder on the way that others can
    /// write, and not written when it changed since it was read.
    Accept,
}

/// Why a file was not rewritten. Each names the file (and the link or folder) and why.
#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    /// A file system operation failed.
    #[error("cannot {action} `{}`", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A symbolic link on the way is another user's.
    #[error(
        "`{}` is a symbolic link owned by uid {owner}, not by uid {euid} that toolward runs as nor by root: whoever owns it chooses which file toolward writes over; nothing was written{}",
        link.display(),
        accept_hint(*accept)
    )]
    LinkOwner {
        /// The link.
        link: PathBuf,
        /// Its owner.
        owner: u32,
        /// The effective uid toolward runs as.
        euid: u32,
        /// The flag that accepts it, if any.
        accept: Option<&'static str>,
    },
    /// The file is another user's.
    #[error(
        "`{}` is owned by uid {owner}, not by uid {euid} that toolward runs as nor by root: toolward does not rewrite another user's file; nothing was written; review it, then run `chown {euid} {}`{}",
        path.display(),
        path.display(),
        accept_hint(*accept)
    )]
    Owner {
        /// The file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The effective uid toolward runs as.
        euid: u32,
        /// The flag that accepts it, if any.
        accept: Option<&'static str>,
    },
    /// Group or others can write the file.
    #[error(
        "`{}` has mode {mode:04o}: group or others can write it; nothing was written; review it, then run `chmod go-w {}`{}",
        path.display(),
        path.display(),
        accept_hint(*accept)
    )]
    Writable {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// The flag that accepts it, if any.
        accept: Option<&'static str>,
    },
    /// The folder holding the file is another user's, or group or others can put another
    /// file in its place.
    #[error(transparent)]
    Folder(Box<ForeignFolder>),
    /// More links than [`MAX_LINKS`] on the way.
    #[error(
        "`{}` leads through more than {limit} symbolic links: toolward follows at most {limit}; point it at the file",
        path.display()
    )]
    TooManyLinks {
        /// The path named.
        path: PathBuf,
        /// [`MAX_LINKS`].
        limit: usize,
    },
    /// Not a regular file.
    #[error("`{}` is not a regular file: toolward rewrites regular files only", path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
    },
    /// Larger than the caller's limit.
    #[error(
        "`{}` holds {bytes} bytes, more than the limit of {limit} bytes",
        path.display()
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Bytes found (at least `limit + 1` for a file that grew while read).
        bytes: u64,
        /// The limit, bytes.
        limit: u64,
    },
    /// The name no longer holds the file read (another file, or a link, was put in its
    /// place), or a file appeared where there was none.
    #[error(
        "`{}` changed since toolward read it (another file or a link is in its place): nothing was written; check what changed it, then run the command again",
        path.display()
    )]
    Changed {
        /// The file.
        path: PathBuf,
    },
    /// A file was to be created and one is there already.
    #[error("`{}` exists: nothing was written over it", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
}

/// The folder holding a file to rewrite is another user's, or group or others can put another
/// file in its place ([`RewriteError::Folder`]).
#[derive(Debug, thiserror::Error)]
#[error(
    "the folder `{}` holding `{}` is {why}: whoever else can write it can swap the file for a link to any other; nothing was written; review it, then run `{fix}`{}",
    folder.display(),
    path.display(),
    accept_hint(*accept)
)]
pub struct ForeignFolder {
    /// The folder.
    pub folder: PathBuf,
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it (`owned by uid 65534`, `mode 0777`).
    pub why: String,
    /// The command that fixes it.
    pub fix: String,
    /// The flag that accepts it, if any.
    pub accept: Option<&'static str>,
}

fn accept_hint(accept: Option<&'static str>) -> String {
    accept.map_or_else(String::new, |flag| {
        format!(", or pass `{flag}` to write it anyway")
    })
}

/// A file as it was found: its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
}

impl Identity {
    fn of(meta: &Metadata) -> Identity {
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// A file to rewrite, its path resolved once and its folder held (see the module
/// documentation).
#[derive(Debug)]
pub struct HeldFile {
    /// The path as named, for messages.
    path: PathBuf,
    /// Where the links led, for messages.
    target: PathBuf,
    folder: Dir,
    name: OsString,
    foreign: Foreign,
    /// The file last seen at `name`: at [`HeldFile::open`], then the one read, then the one
    /// written. `None` while there is none.
    seen: Option<Identity>,
    /// Its permission bits.
    mode: Option<u32>,
}

/// Why [`walk`] stopped.
enum Walk {
    TooManyLinks,
    Refused(RewriteError),
}

/// Why someone other than the effective user or root could put another entry in place of
/// one in `folder` (at `at`): another user owns it (its owner can rename whatever is in it,
/// links of root's included), or group or others can write it without the sticky bit; `None`
/// when nobody else can, or when `check` is off. Otherwise a refusal naming `path` (the entry
/// in it) and the fix.
fn foreign_folder(
    folder: &Dir,
    at: &Path,
    path: &Path,
    check: bool,
    accept: Option<&'static str>,
) -> Option<RewriteError> {
    if !check {
        return None;
    }
    let meta = match folder.dir_metadata() {
        Ok(meta) => meta,
        Err(source) => {
            return Some(RewriteError::Io {
                action: "read",
                path: at.to_owned(),
                source,
            });
        }
    };
    let (why, fix) = if !trusted_owner(meta.uid()) {
        (
            format!("owned by uid {}", meta.uid()),
            format!("chown {} {}", crate::identity::euid(), at.display()),
        )
    } else if others_can_replace_in(meta.mode()) {
        (
            format!("mode {:04o}", meta.mode() & 0o7777),
            format!("chmod go-w {}", at.display()),
        )
    } else {
        return None;
    };
    Some(RewriteError::Folder(Box::new(ForeignFolder {
        folder: at.to_owned(),
        path: path.to_owned(),
        why,
        fix,
        accept,
    })))
}

/// The names of `path` to walk, `..` kept (the root and `.` dropped).
fn names(path: &Path) -> std::collections::VecDeque<OsString> {
    use std::path::Component;
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// Opens the folder `path` (absolute) by walking it from `/` one name at a time, each opened
/// relative to the folder before it without following a link. A link on the way is read
/// through the folder holding it and followed (counted in `followed`, at most [`MAX_LINKS`]),
/// but first it must be the effective user's or root's and sit in a folder others cannot
/// replace it in. Returns the folder and its path with every link resolved.
fn walk(path: &Path, followed: &mut usize) -> Result<(Dir, PathBuf), Walk> {
    let io = |action, path: PathBuf| {
        move |source| {
            Walk::Refused(RewriteError::Io {
                action,
                path,
                source,
            })
        }
    };
    let root = || Dir::open_ambient_dir("/", ambient_authority());
    let mut folder = root().map_err(io("open the folder", PathBuf::from("/")))?;
    let mut at = PathBuf::from("/");
    let mut ahead = names(path);
    while let Some(name) = ahead.pop_front() {
        if name == ".." {
            at.pop();
            folder = Dir::open_ambient_dir(&at, ambient_authority())
                .map_err(io("open the folder", at.clone()))?;
            continue;
        }
        let here = at.join(&name);
        // Every folder on the way must be the operator's or root's, and closed to others:
        // whoever else owns or can write one can put another folder, or a link of root's
        // moved from elsewhere, in place of the next name (found by an attack).
        if let Some(refusal) = foreign_folder(&folder, &at, &here, true, None) {
            return Err(Walk::Refused(refusal));
        }
        let meta = folder
            .symlink_metadata(&name)
            .map_err(io("open the folder", here.clone()))?;
        if meta.file_type().is_symlink() {
            if !trusted_owner(meta.uid()) {
                return Err(Walk::Refused(RewriteError::LinkOwner {
                    link: here,
                    owner: meta.uid(),
                    euid: crate::identity::euid(),
                    accept: None,
                }));
            }
            if *followed == MAX_LINKS {
                return Err(Walk::TooManyLinks);
            }
            *followed += 1;
            let target = folder
                .read_link_contents(&name)
                .map_err(io("read the link", here.clone()))?;
            let mut rest = names(&target);
            if target.is_absolute() {
                folder = root().map_err(io("open the folder", PathBuf::from("/")))?;
                at = PathBuf::from("/");
            }
            rest.extend(ahead);
            ahead = rest;
            continue;
        }
        // Not a link (checked through `folder` above; `open_dir` of a plain name in a held
        // folder does not follow one, and a link put there since is refused by the kernel).
        let mut options = OpenOptions::new();
        options
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW);
        folder = folder
            .open_with(&name, &options)
            .map(|file| Dir::from_std_file(file.into_std()))
            .map_err(io("open the folder", here.clone()))?;
        at = here;
    }
    Ok((folder, at))
}

impl HeldFile {
    /// Resolves `path` once and holds the folder of the file it leads to (see the module
    /// documentation). The file need not exist ([`HeldFile::exists`]).
    ///
    /// # Errors
    /// [`RewriteError`] naming the path, the link or the folder: a folder that cannot be
    /// opened, a link or file or folder of another user or writable by others (unless
    /// `foreign` accepts it), too many links, something other than a regular file.
    pub fn open(path: &Path, foreign: Foreign) -> Result<HeldFile, RewriteError> {
        let io = |action, path: &Path| {
            let path = path.to_owned();
            move |source| RewriteError::Io {
                action,
                path,
                source,
            }
        };
        // Absolute, so that a link's relative target joins onto the folder that held it.
        let mut next = std::path::absolute(path).map_err(io("resolve", path))?;
        let accept = match foreign {
            Foreign::Refuse => None,
            Foreign::RefuseUnless(flag) => Some(flag),
            Foreign::Accept => None,
        };
        let check = foreign != Foreign::Accept;
        let mut followed = 0;
        loop {
            let (folder_path, name) = match (next.parent(), next.file_name()) {
                (Some(folder), Some(name)) => (folder.to_owned(), name.to_owned()),
                _ => return Err(RewriteError::NotRegular { path: next }),
            };
            // The folders on the way walked one by one from `/`, each link among them
            // checked as the file's own link is: `open_ambient_dir` of the whole path would
            // follow a link some other user put on the way.
            // The folders on the way are checked even when the operator accepts a shared
            // file: the flag is for the file and the folder holding it, never for the way
            // there.
            let (folder, folder_path) =
                walk(&folder_path, &mut followed).map_err(|e| match e {
                    Walk::TooManyLinks => RewriteError::TooManyLinks {
                        path: path.to_owned(),
                        limit: MAX_LINKS,
                    },
                    Walk::Refused(error) => error,
                })?;
            let current = folder_path.join(&name);
            let meta = match folder.symlink_metadata(&name) {
                Ok(meta) => Some(meta),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(io("read", &current)(e)),
            };
            // A link is followed only when it is the operator's or root's and sits in a
            // folder nobody else can replace it in, the shared file accepted or not (found by
            // an attack: with the flag, another user's link at a shared project's
            // `.mcp.json` sent `connect` to the operator's private `~/.claude.json`).
            if let Some(link) = meta.as_ref().filter(|m| m.file_type().is_symlink()) {
                if !trusted_owner(link.uid()) {
                    return Err(RewriteError::LinkOwner {
                        link: current,
                        owner: link.uid(),
                        euid: crate::identity::euid(),
                        accept: None,
                    });
                }
                if let Some(refusal) = foreign_folder(&folder, &folder_path, &current, true, None) {
                    return Err(refusal);
                }
                if followed == MAX_LINKS {
                    break;
                }
                followed += 1;
                let target = folder
                    .read_link_contents(&name)
                    .map_err(io("read the link", &current))?;
                next = folder_path.join(target);
                continue;
            }
            let held = HeldFile {
                path: path.to_owned(),
                target: current,
                folder,
                name,
                foreign,
                seen: None,
                mode: None,
            };
            if check {
                held.check_folder(accept)?;
            }
            return match meta {
                None => Ok(held),
                Some(meta) => {
                    held.check_file(&meta)?;
                    Ok(HeldFile {
                        seen: Some(Identity::of(&meta)),
                        mode: Some(meta.mode()),
                        ..held
                    })
                }
            };
        }
        Err(RewriteError::TooManyLinks {
            path: path.to_owned(),
            limit: MAX_LINKS,
        })
    }

    /// The path as named.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file the path leads to, after its links.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Whether there was a file at the name when last looked.
    pub fn exists(&self) -> bool {
        self.seen.is_some()
    }

    fn accept(&self) -> Option<&'static str> {
        match self.foreign {
            Foreign::RefuseUnless(flag) => Some(flag),
            Foreign::Refuse | Foreign::Accept => None,
        }
    }

    fn check_folder(&self, accept: Option<&'static str>) -> Result<(), RewriteError> {
        let folder = self.target.parent().unwrap_or(Path::new("/"));
        match foreign_folder(&self.folder, folder, &self.target, true, accept) {
            Some(refusal) => Err(refusal),
            None => Ok(()),
        }
    }

    /// Checks the file at the name (`meta`, not followed): a regular file, and, unless
    /// accepted, the effective user's or root's and not writable by group or others.
    fn check_file(&self, meta: &Metadata) -> Result<(), RewriteError> {
        if !meta.is_file() {
            return Err(RewriteError::NotRegular {
                path: self.target.clone(),
            });
        }
        if self.foreign == Foreign::Accept {
            return Ok(());
        }
        if !trusted_owner(meta.uid()) {
            return Err(RewriteError::Owner {
                path: self.target.clone(),
                owner: meta.uid(),
                euid: crate::identity::euid(),
                accept: self.accept(),
            });
        }
        if others_can_write(meta.mode()) {
            return Err(RewriteError::Writable {
                path: self.target.clone(),
                mode: meta.mode() & 0o7777,
                accept: self.accept(),
            });
        }
        Ok(())
    }

    /// The file's bytes, at most `limit`, read through the held folder (a link now at the
    /// name is not followed) and checked as at [`HeldFile::open`]. [`HeldFile::replace`]
    /// writes only over this very file.
    ///
    /// # Errors
    /// [`RewriteError`] naming the file: missing, [`RewriteError::Changed`] when another
    /// file took its place since [`HeldFile::open`], [`RewriteError::TooLarge`].
    pub fn read(&mut self, limit: u64) -> Result<Vec<u8>, RewriteError> {
        let io = |source| RewriteError::Io {
            action: "read",
            path: self.target.clone(),
            source,
        };
        let mut options = OpenOptions::new();
        options.read(true).custom_flags(
            (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32,
        );
        let file = match self.folder.open_with(&self.name, &options) {
            Ok(file) => file,
            // ELOOP: a link is at the name now.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                return Err(self.changed());
            }
            Err(e) => return Err(io(e)),
        };
        let meta = file.metadata().map_err(io)?;
        self.check_file(&meta)?;
        let identity = Identity::of(&meta);
        if self.seen.is_some_and(|seen| seen != identity) {
            return Err(self.changed());
        }
        let bytes = super::operator_file::read_at_most(file, meta.len(), limit)
            .map_err(io)?
            .map_err(|bytes| RewriteError::TooLarge {
                path: self.target.clone(),
                bytes,
                limit,
            })?;
        self.seen = Some(identity);
        self.mode = Some(meta.mode());
        Ok(bytes)
    }

    fn changed(&self) -> RewriteError {
        RewriteError::Changed {
            path: self.target.clone(),
        }
    }

    /// Replaces the file with `bytes` (see the module documentation): only when the name
    /// still holds the file last seen (or still holds none), through the held folder, with
    /// the old file's permission bits (`mode` for a new file, less the umask), never a
    /// set-id bit.
    ///
    /// # Errors
    /// [`RewriteError::Changed`] when another file or a link is at the name now; otherwise
    /// [`RewriteError::Io`] naming the file (the temporary file is removed).
    pub fn replace(&mut self, bytes: &[u8], mode: u32) -> Result<(), RewriteError> {
        let now = match self.folder.symlink_metadata(&self.name) {
            Ok(meta) if meta.is_file() => Some(Identity::of(&meta)),
            Ok(_) => return Err(self.changed()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(RewriteError::Io {
                    action: "read",
                    path: self.target.clone(),
                    source,
                });
            }
        };
        if now != self.seen {
            return Err(self.changed());
        }
        let keep = self.mode.map(|m| m & PERMISSION_BITS);
        let written = write_in(
            &self.folder,
            &self.name,
            bytes,
            keep.unwrap_or(mode & PERMISSION_BITS),
            keep.is_some(),
            Place::Replace,
        );
        let identity = written.map_err(|source| RewriteError::Io {
            action: "write",
            path: self.target.clone(),
            source,
        })?;
        self.seen = Some(identity);
        self.mode = Some(keep.unwrap_or(mode & PERMISSION_BITS));
        Ok(())
    }

    /// Creates the file with `bytes` and `mode` (less the umask, never a set-id bit) where
    /// there is none: written whole under a temporary name in the held folder, then linked
    /// to its name, so a reader never sees a part and nothing already there (a file, a
    /// link) is written over or followed.
    ///
    /// # Errors
    /// [`RewriteError::Exists`] when a file (or a link) is at the name; otherwise
    /// [`RewriteError::Io`] naming the file.
    pub fn create_new(&mut self, bytes: &[u8], mode: u32) -> Result<(), RewriteError> {
        match write_in(
            &self.folder,
            &self.name,
            bytes,
            mode & PERMISSION_BITS,
            false,
            Place::New,
        ) {
            Ok(identity) => {
                self.seen = Some(identity);
                self.mode = Some(mode & PERMISSION_BITS);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(RewriteError::Exists {
                path: self.target.clone(),
            }),
            Err(source) => Err(RewriteError::Io {
                action: "write",
                path: self.target.clone(),
                source,
            }),
        }
    }
}

/// How [`write_in`] puts the temporary file at its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Renamed over whatever is at the name (the name itself, never a link's target).
    Replace,
    /// Linked to the name, which must be free.
    New,
}

/// Writes `bytes` to a new temporary file in `folder` (mode `mode` less the umask, or exactly
/// `mode` when `exact`), flushes it, puts it at `name` as `place` says and flushes `folder`;
/// the new file's device and inode. The temporary file is removed on failure.
fn write_in(
    folder: &Dir,
    name: &OsStr,
    bytes: &[u8],
    mode: u32,
    exact: bool,
    place: Place,
) -> std::io::Result<Identity> {
    let mut suffix = [0u8; 8];
    getrandom::fill(&mut suffix).map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut temp = OsString::from(".");
    temp.push(name);
    temp.push(format!(".toolward-{}.tmp", hex::encode(suffix)));
    let mut create = OpenOptions::new();
    create.write(true).create_new(true).mode(mode);
    let written = folder.open_with(&temp, &create).and_then(|mut file| {
        file.write_all(bytes)?;
        if exact {
            rustix::fs::fchmod(&file, rustix::fs::Mode::from_raw_mode(mode))?;
        }
        file.sync_all()?;
        Ok(Identity::of(&file.metadata()?))
    });
    let placed = written.and_then(|identity| {
        match place {
            Place::Replace => folder.rename(&temp, folder, name)?,
            Place::New => {
                let linked = folder.hard_link(&temp, folder, name);
                let _ = folder.remove_file(&temp);
                linked?;
            }
        }
        sync_folder(folder)?;
        Ok(identity)
    });
    if placed.is_err() {
        // Best effort: the error that matters is the one returned.
        let _ = folder.remove_file(&temp);
    }
    placed
}

/// Flushes `folder` itself, so a rename in it survives a crash. cap-std holds folders opened
/// for lookups only (`O_PATH`), which cannot be flushed: the folder is opened again, read-only,
/// through the held handle.
fn sync_folder(folder: &Dir) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let opened = rustix::fs::openat(
        folder,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    rustix::fs::fsync(&opened)?;
    Ok(())
}

/// Replaces (or creates) the file `name` of `folder`, a folder toolward holds already (its
/// state folder's `clients/`), with `bytes` and exactly `mode` (never a set-id bit), through a
/// temporary file renamed over it and flushed with the folder. `full` names it in messages.
///
/// # Errors
/// [`RewriteError::Io`] naming `full`.
pub fn replace_in(
    folder: &Dir,
    name: &str,
    bytes: &[u8],
    mode: u32,
    full: &Path,
) -> Result<(), RewriteError> {
    write_in(
        folder,
        OsStr::new(name),
        bytes,
        mode & PERMISSION_BITS,
        true,
        Place::Replace,
    )
    .map(|_| ())
    .map_err(|source| RewriteError::Io {
        action: "write",
        path: full.to_owned(),
        source,
    })
}

/// The variable that names the pause point a test stops a command at (`test-pause` builds
/// only).
pub const TEST_PAUSE_ENV: &str = "TOOLWARD_TEST_PAUSE";

/// In a build with the `test-pause` feature, when [`TEST_PAUSE_ENV`] is `point`: says
/// `toolward-test-pause: POINT` on standard error and waits for a line on standard input, so
/// a test can change a file between a command's read and its write, every time at the same
/// step. In every other build (the release binary among them) it does nothing.
pub fn test_pause(point: &str) {
    #[cfg(feature = "test-pause")]
    if std::env::var(TEST_PAUSE_ENV).is_ok_and(|wanted| wanted == point) {
        eprintln!("toolward-test-pause: {point}");
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    }
    #[cfg(not(feature = "test-pause"))]
    let _ = point;
}

#[cfg(test)]
mod tests;
