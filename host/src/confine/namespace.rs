//! The launcher's first layer (Linux): user, mount and PID namespaces, made without
//! privileges, in which each withheld path is covered by an empty read-only mount and the
//! server sees only its own processes. Landlock stays the second layer (`restrict` in `confine`).
//!
//! Landlock governs opening, reading, writing, creating and removing, but not a file's
//! metadata (`chmod`, `chown`, `utimes`, extended attributes) nor `inotify`/`fanotify`
//! watches: a server running as the operator could `chmod` the state folder's keys, or watch
//! the approvals queue. Covered by a read-only `tmpfs` (a folder) or a read-only bind of an
//! empty file (a file), a withheld path answers any of those with the cover's
//! `EROFS`/emptiness, and a watch sees nothing. The mounts cannot be taken off from inside:
//! the server is restricted by Landlock, which refuses `mount`, `umount` and `pivot_root` to a
//! restricted process, and a namespace it makes of its own copies them locked.
//!
//! # The processes
//!
//! ```text
//! toolward ─► launcher (relay, toolward's child, outside) ─► init (PID 1 inside) ─► server
//! ```
//!
//! The relay is the process toolward started: it forwards the signals toolward sends
//! ([`FORWARDED`]) to init and exits as init exits. Init reaps every process of the namespace,
//! forwards the signals to the server, and exits with the server's status (`128 + N` for a
//! server ended by signal `N`); when init exits the kernel ends every other process of the
//! namespace, so a server's descendants never outlive it. All three stay in the process group
//! toolward made, so closing the group closes them (a `SIGKILL` to init ends the namespace).
//!
//! IDs are mapped one to one (the operator's uid and gid to themselves, nothing else), so a
//! server that checks ownership (git's `safe.directory`) sees the owners it would outside.
//!
//! Where ambient authority is used: this file writes `/proc/self/{setgroups,uid_map,gid_map}`
//! and mounts over the withheld paths, inside the namespaces it made.
#![expect(
    unsafe_code,
    reason = "unshare, fork, mount, sigwaitinfo and waitpid have no safe wrappers among our dependencies"
)]

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::ConfineError;

/// The signals the relay and init pass on to the server: those toolward or a terminal sends
/// to end or nudge a process. `SIGKILL` and `SIGSTOP` cannot be caught; a `SIGKILL` to the
/// relay ends init through its parent-death signal.
pub const FORWARDED: [i32; 7] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];

/// Where the empty file that covers withheld files is made: a `tmpfs` mounted here for a
/// moment, before the namespace's own `/proc` is mounted over the same place.
const STAGING: &str = "/proc";

/// What the launcher does in the namespaces: cover `withheld` (resolved paths; those that do
/// not exist are left to Landlock), bind `allow` back where it lies beneath a covered folder,
/// and, with `network`, start the server in a network namespace of its own (no interfaces
/// but a loopback that is down: no network at all).
#[derive(Debug)]
pub struct Isolation<'a> {
    /// Resolved withheld paths, none beneath another.
    pub withheld: &'a [PathBuf],
    /// Paths granted beneath a withheld folder (the server's own folder).
    pub allow: &'a [PathBuf],
    /// Device nodes bound into the private `/dev` beside [`super::STANDARD_DEVICES`].
    pub devices: &'a [PathBuf],
    /// A network namespace of its own.
    pub network: bool,
}

fn os_error(what: &str) -> ConfineError {
    ConfineError::Namespace {
        reason: format!("{what}: {}", std::io::Error::last_os_error()),
    }
}

fn c_path(path: &Path) -> Result<CString, ConfineError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| ConfineError::Namespace {
        reason: format!("`{}` holds a NUL byte", path.display()),
    })
}

/// The signals init and the relay wait for: [`FORWARDED`] and `SIGCHLD`.
fn waited_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset write into the set we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in FORWARDED.iter().chain([&libc::SIGCHLD]) {
            libc::sigaddset(&mut set, *signal);
        }
        set
    }
}

/// Writes `text` to `/proc/self/NAME`.
fn write_proc_self(name: &str, text: &str) -> Result<(), ConfineError> {
    std::fs::write(format!("/proc/self/{name}"), text).map_err(|e| ConfineError::Namespace {
        reason: format!("cannot write `/proc/self/{name}`: {e}"),
    })
}

/// Which side of the fork a caller of [`enter`] is on.
#[derive(Debug)]
pub enum Side {
    /// The relay, outside: [`relay`] it.
    Relay(libc::pid_t),
    /// Init, PID 1 inside the namespaces, with the withheld paths covered.
    Init,
}

/// Makes the user, mount and PID (and, with `network`, network) namespaces, maps the
/// operator's ids to themselves and forks: the parent becomes the relay, the child (PID 1)
/// covers the withheld paths. Signals of `waited_signals` are blocked on both sides from
/// here on (the server's are unblocked before its `exec`).
///
/// # Errors
/// [`ConfineError::Namespace`] naming the step that failed: namespaces unavailable (a
/// container, a distribution that restricts unprivileged user namespaces) or a mount refused.
/// An error in the child is written to stderr and ends it with
/// [`super::LAUNCH_FAILED_EXIT`], which the relay passes on.
pub fn enter(isolation: &Isolation<'_>) -> Result<Side, ConfineError> {
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID;
    if isolation.network {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: unshare takes flags only; this process has one thread (the launcher runs before
    // anything starts one), which user namespaces require.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(os_error(
            "cannot make user, mount and PID namespaces (unshare)",
        ));
    }
    write_proc_self("setgroups", "deny")?;
    write_proc_self("uid_map", &format!("{uid} {uid} 1"))?;
    write_proc_self("gid_map", &format!("{gid} {gid} 1"))?;
    let signals = waited_signals();
    // SAFETY: sigprocmask with a set we own; fork in a process of one thread.
    let pid = unsafe {
        libc::sigprocmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut());
        libc::fork()
    };
    match pid {
        -1 => Err(os_error(
            "cannot start the namespace's first process (fork)",
        )),
        0 => {
            // SAFETY: prctl with integers: init ends when the relay does.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
            if let Err(e) = cover(isolation).and_then(|()| seal(uid, gid))
            {
                eprintln!("toolward: {e}");
                // SAFETY: ends this process without running the relay's destructors twice.
                unsafe { libc::_exit(i32::from(super::LAUNCH_FAILED_EXIT)) };
            }
            Ok(Side::Init)
        }
        child => Ok(Side::Relay(child)),
    }
}

/// Gives the server a `/dev` of its own ([`private_dev`]), then covers the withheld paths in
/// this mount namespace: each file by a read-only bind of an empty file, then `/proc` by the
/// PID namespace's own, then each folder by an empty read-only `tmpfs` with the allowed
/// folders beneath it bound back.
fn cover(isolation: &Isolation<'_>) -> Result<(), ConfineError> {
    let (withheld, allow) = (isolation.withheld, isolation.allow);
    // Held before the withheld folders are covered: a folder to bind back beneath one. Opened
    // here, in the new mount namespace: a mount of another namespace cannot be bound.
    let mut allowed = Vec::new();
    for path in allow {
        if !withheld.iter().any(|w| path.starts_with(w) && path != w) {
            continue;
        }
        if let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
            .open(path)
        {
            allowed.push((path.clone(), OwnedFd::from(file)));
        }
    }
    private_mounts()?;
    // First, while `/proc` is still the machine's (its `self/fd` reaches the machine's
    // `/dev`), and before the withheld paths are looked at (one may lie in `/dev`).
    private_dev(isolation.devices)?;
    let hardened = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    let mut files = Vec::new();
    let mut folders = Vec::new();
    for path in withheld {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => folders.push(path),
            Ok(_) => files.push(path),
            // Not there: Landlock withholds it where it would be created.
            Err(_) => {}
        }
    }
    hold_ancestors(withheld)?;
    let staging = Path::new(STAGING);
    if !files.is_empty() {
        mount_tmpfs(staging, hardened)?;
        let empty = staging.join("empty");
        std::fs::write(&empty, "").map_err(|e| ConfineError::Namespace {
            reason: format!("cannot make the empty file that covers withheld files: {e}"),
        })?;
        for file in &files {
            bind(&empty, file, false)?;
            remount_read_only(file, hardened)?;
        }
        umount(staging)?;
    }
    mount(c"proc", staging, Some(c"proc"), hardened, None)
        .map_err(|e| e.context("cannot mount the PID namespace's own `/proc`"))?;
    kernel_settings_read_only()?;
    for folder in folders {
        mount_tmpfs(folder, hardened)?;
        for (path, handle) in &allowed {
            let Ok(beneath) = path.strip_prefix(folder) else {
                continue;
            };
            let target = folder.join(beneath);
            std::fs::create_dir_all(&target).map_err(|e| ConfineError::Namespace {
                reason: format!("cannot make `{}` in its cover: {e}", target.display()),
            })?;
            let source = PathBuf::from(format!("/proc/self/fd/{}", handle.as_raw_fd()));
            bind(&source, &target, true)?;
        }
        remount_read_only(folder, hardened)?;
    }
    // A working folder beneath a cover would still reach what it covers: resolve it again.
    if let Ok(cwd) = std::env::current_dir() {
        let _ = std::env::set_current_dir(cwd);
    }
    Ok(())
}

/// Makes every mount of this (new) mount namespace private, so nothing mounted here
/// propagates back out.
fn private_mounts() -> Result<(), ConfineError> {
    let none = c"none";
    let root = c"/";
    // SAFETY: mount with valid C strings.
    if unsafe {
        libc::mount(
            none.as_ptr(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(os_error("cannot make the mount namespace private"));
    }
    Ok(())
}

/// The parts of `/proc` that hold settings of the whole machine, made read-only for every
/// server: Docker's read-only paths (`/proc/sys`: `core_pattern` would run a program as root
/// outside every namespace; `/proc/irq`: an attack changed `default_smp_affinity` as a root
/// operator's server holding no capability).
pub const KERNEL_SETTINGS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Makes what the kernel lets uid 0 write by its uid alone, capabilities or not, read-only in
/// this mount namespace: [`KERNEL_SETTINGS`], `/sys` and every file system mounted beneath
/// it (the cgroup hierarchies: an attack froze toolward, and a process outside, through a
/// cgroup v1 `freezer.state` as a root operator's server). For a server run by root; nothing
/// an ordinary user's server could write there anyway.
fn kernel_settings_read_only() -> Result<(), ConfineError> {
    let hardened = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    for path in KERNEL_SETTINGS {
        let path = Path::new(path);
        if path.exists() {
            bind(path, path, false)?;
            remount_read_only(path, hardened)?;
        }
    }
    for mount in mounts_at_or_beneath(Path::new("/sys")) {
        remount_read_only(&mount, locked_flags(&mount))?;
    }
    Ok(())
}

/// The mount points at or beneath `top` in this mount namespace (`/proc/self/mountinfo`'s
/// fifth field, its octal escapes undone), `top` first when it is one.
fn mounts_at_or_beneath(top: &Path) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return if top.is_dir() { vec![top.to_owned()] } else { Vec::new() };
    };
    let mut mounts: Vec<PathBuf> = Vec::new();
    for line in text.lines() {
        let Some(field) = line.split(' ').nth(4) else {
            continue;
        };
        let path = PathBuf::from(std::ffi::OsString::from_vec(unescape_mountinfo(field)));
        if path.starts_with(top) && !mounts.contains(&path) {
            mounts.push(path);
        }
    }
    mounts.sort_by_key(|path| path.components().count());
    mounts
}

/// A mountinfo field with its `\NNN` octal escapes (space, tab, newline, backslash) undone.
fn unescape_mountinfo(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(digits) = bytes.get(i + 1..i + 4)
            && digits.iter().all(|d| (b'0'..=b'7').contains(d))
        {
            out.push(digits.iter().fold(0u8, |n, d| n.wrapping_mul(8).wrapping_add(d - b'0')));
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// For a server run by root under Landlock alone (no user namespace): a mount namespace of
/// its own, made with the launcher's own capabilities before it gives them up, in which
/// [`kernel_settings_read_only`] holds (found by an attack: a root operator's server under
/// Landlock alone wrote `core_pattern` and ran a program as root with every capability,
/// outside). Where this process cannot make one (no `CAP_SYS_ADMIN`, as in a container),
/// the start is refused if `core_pattern` is writable here, never started without.
///
/// # Errors
/// [`ConfineError::Namespace`] naming the step, or why the start is refused.
pub fn hold_kernel_settings() -> Result<(), ConfineError> {
    // SAFETY: unshare takes flags only; this process has one thread.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        let why = std::io::Error::last_os_error();
        let pattern = c"/proc/sys/kernel/core_pattern";
        // SAFETY: access with a valid C string.
        if unsafe { libc::access(pattern.as_ptr(), libc::W_OK) } == 0 {
            return Err(ConfineError::Namespace {
                reason: format!(
                    "a server run by root could write `/proc/sys` (its `core_pattern` runs a program as root outside), and no mount namespace can make it read-only here (unshare: {why}): run toolward as an ordinary user"
                ),
            });
        }
        return Ok(());
    }
    private_mounts()?;
    kernel_settings_read_only()
}

/// A `/dev` of the server's own, read-only: a `tmpfs` holding the machine's
/// [`super::STANDARD_DEVICES`] and `devices` (each bound from the machine's node), a private
/// instance of devpts at `/dev/pts` with its `ptmx` bound over `/dev/ptmx`, an empty `tmpfs`
/// at `/dev/shm`, and the links `fd`, `stdin`, `stdout` and `stderr` into `/proc/self/fd`.
///
/// The machine's `/dev` holds what no server should reach: the operator's terminal (a
/// `/dev/pts` entry of the operator's uid, which a server without a controlling terminal
/// could still open by its path, draw a false approval prompt on and read the operator's keys
/// from: found by an attack), a virtual or serial console handed to whoever logs in there,
/// and, for a root operator, raw disks (`/dev/sda` is root's, and uid 0 reads a file it owns
/// without any capability: every withheld path, read off the disk) and the kernel's log. A
/// server's own pseudo-terminals (a shell tool's) still work, in its devpts instance.
fn private_dev(devices: &[PathBuf]) -> Result<(), ConfineError> {
    let dev = Path::new("/dev");
    if !dev.is_dir() {
        return Ok(());
    }
    let fail = |what: String| {
        move |e: std::io::Error| ConfineError::Namespace {
            reason: format!("{what}: {e}"),
        }
    };
    // The machine's `/dev`, held before it is covered: its nodes are bound from here.
    let machine = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dev)
        .map_err(fail("cannot open the machine's `/dev`".to_owned()))?;
    let machine = PathBuf::from(format!("/proc/self/fd/{}", machine.as_raw_fd()));
    mount(
        c"tmpfs",
        dev,
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some(c"mode=0755,size=64k,nr_inodes=256"),
    )
    .map_err(|e| e.context("cannot mount a private `/dev`"))?;
    let standard = super::STANDARD_DEVICES.iter().map(PathBuf::from);
    for device in standard.chain(devices.iter().cloned()) {
        let Ok(name) = device.strip_prefix(dev) else {
            continue;
        };
        let source = machine.join(name);
        // Not on this machine: left out, as Landlock leaves it out.
        let Ok(meta) = std::fs::metadata(&source) else {
            continue;
        };
        let target = dev.join(name);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(fail(format!("cannot make `{}`", parent.display())))?;
        }
        if meta.is_dir() {
            std::fs::create_dir_all(&target)
        } else {
            std::fs::write(&target, "")
        }
        .map_err(fail(format!("cannot make `{}`", target.display())))?;
        bind(&source, &target, meta.is_dir())?;
    }
    let pts = dev.join("pts");
    std::fs::create_dir(&pts).map_err(fail("cannot make `/dev/pts`".to_owned()))?;
    mount(
        c"devpts",
        &pts,
        Some(c"devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some(c"newinstance,ptmxmode=0666,mode=0620"),
    )
    .map_err(|e| e.context("cannot mount a private `/dev/pts`"))?;
    let ptmx = dev.join("ptmx");
    std::fs::write(&ptmx, "").map_err(fail("cannot make `/dev/ptmx`".to_owned()))?;
    bind(&pts.join("ptmx"), &ptmx, false)?;
    let shm = dev.join("shm");
    std::fs::create_dir(&shm).map_err(fail("cannot make `/dev/shm`".to_owned()))?;
    mount(
        c"tmpfs",
        &shm,
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some(c"mode=1777"),
    )
    .map_err(|e| e.context("cannot mount a private `/dev/shm`"))?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(name))
            .map_err(fail(format!("cannot make `/dev/{name}`")))?;
    }
    remount_read_only(dev, libc::MS_NOSUID | libc::MS_NOEXEC)
}

/// Makes each folder on the way to a withheld path (below `/`) read-only, with every entry in
/// it bound back as it was: the folder itself, the config's folder among them, can then be
/// neither `chmod`ed nor have its times changed from inside (a server that made the config's
/// folder writable to others for a moment let another user swap the config), while what lies
/// in it stays as writable as before. Nothing is lost: Landlock already refuses creating,
/// removing and renaming directly in these folders. A rename or link between two entries of
/// one of them now crosses a mount (`EXDEV`).
fn hold_ancestors(withheld: &[PathBuf]) -> Result<(), ConfineError> {
    let mut ancestors: Vec<&Path> = withheld
        .iter()
        .flat_map(|path| path.ancestors().skip(1))
        // Not `/`; and a folder on the way to a withheld path that does not exist yet (a state
        // folder made later) is not there to hold.
        .filter(|folder| folder.parent().is_some() && folder.is_dir())
        .collect();
    ancestors.sort();
    ancestors.dedup();
    for folder in &ancestors {
        bind(folder, folder, true)?;
        let Ok(entries) = std::fs::read_dir(folder) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = folder.join(entry.file_name());
            let kind = entry.file_type();
            if ancestors.contains(&path.as_path())
                || withheld.contains(&path)
                || kind.is_ok_and(|kind| kind.is_symlink())
            {
                continue;
            }
            // Gone since it was listed, or a kind that cannot be bound: it stays read-only.
            let _ = bind(&path, &path, true);
        }
    }
    for folder in &ancestors {
        remount_read_only(folder, locked_flags(folder))?;
    }
    Ok(())
}

/// A mount's error, to which a step's name is added.
struct MountError(std::io::Error);

impl MountError {
    fn context(self, what: &str) -> ConfineError {
        ConfineError::Namespace {
            reason: format!("{what}: {}", self.0),
        }
    }
}

fn mount(
    source: &std::ffi::CStr,
    target: &Path,
    fstype: Option<&std::ffi::CStr>,
    flags: libc::c_ulong,
    data: Option<&std::ffi::CStr>,
) -> Result<(), MountError> {
    let target = CString::new(target.as_os_str().as_bytes())
        .map_err(|_| MountError(std::io::Error::from(std::io::ErrorKind::InvalidInput)))?;
    // SAFETY: valid C strings or null pointers, as mount(2) takes them.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.map_or(std::ptr::null(), std::ffi::CStr::as_ptr),
            flags,
            data.map_or(std::ptr::null(), |d| d.as_ptr().cast()),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(MountError(std::io::Error::last_os_error()))
    }
}

/// An empty `tmpfs` over `folder`, writable until [`remount_read_only`]; its root's mode
/// `0700` keeps it the operator's alone.
fn mount_tmpfs(folder: &Path, flags: libc::c_ulong) -> Result<(), ConfineError> {
    mount(
        c"tmpfs",
        folder,
        Some(c"tmpfs"),
        flags,
        Some(c"mode=0700,size=64k,nr_inodes=64"),
    )
    .map_err(|e| e.context(&format!("cannot cover `{}`", folder.display())))
}

fn bind(source: &Path, target: &Path, recursive: bool) -> Result<(), ConfineError> {
    let source_c = c_path(source)?;
    let mut flags = libc::MS_BIND;
    if recursive {
        flags |= libc::MS_REC;
    }
    mount(&source_c, target, None, flags, None)
        .map_err(|e| e.context(&format!("cannot mount over `{}`", target.display())))
}

/// How many times a read-only remount that the kernel finds busy is tried, 5 ms apart.
const REMOUNT_BUSY_ATTEMPTS: u32 = 100;

fn remount_read_only(target: &Path, flags: libc::c_ulong) -> Result<(), ConfineError> {
    let remount = || {
        mount(
            c"none",
            target,
            None,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
            None,
        )
    };
    // The kernel refuses with EBUSY while it counts a write in progress through the mount;
    // one CI run met it once on `/dev`, under load, with nothing of ours writing there. Such a
    // write ends: try again for half a second, then fail closed (the server does not start).
    let mut outcome = remount();
    for _ in 1..REMOUNT_BUSY_ATTEMPTS {
        match &outcome {
            Err(MountError(error)) if error.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(std::time::Duration::from_millis(5));
                outcome = remount();
            }
            _ => break,
        }
    }
    outcome.map_err(|e| {
        e.context(&format!(
            "cannot make the cover of `{}` read-only",
            target.display()
        ))
    })
}

/// The flags of the mount at `path` that a remount must keep (a mount copied from the
/// parent namespace is locked: its `nosuid`, `nodev`, `noexec` and access-time flags cannot be
/// cleared, only kept).
fn locked_flags(path: &Path) -> libc::c_ulong {
    let Ok(c) = c_path(path) else { return 0 };
    // SAFETY: statvfs writes into a struct we own.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut stat) } != 0 {
        return 0;
    }
    let pairs = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ];
    pairs
        .iter()
        .filter(|(st, _)| stat.f_flag & *st != 0)
        .fold(0, |flags, (_, ms)| flags | *ms)
}

/// Locks the covers and gives up every capability, before Landlock and the server:
///
/// - a second user and mount namespace, so every mount above is a locked copy that no
///   capability in any namespace the server can make takes off or clones apart
///   (`open_tree`);
/// - no capability left, none in the bounding set, none ambient, and securebits that keep an
///   `exec` as uid 0 from giving any back: a server run by root is root by its uid (it owns
///   root's files) but holds no capability, not even in its own namespace;
/// - init not dumpable, so the server (same uid) can neither trace it nor read its `/proc`
///   entries.
fn seal(uid: libc::uid_t, gid: libc::gid_t) -> Result<(), ConfineError> {
    // SAFETY: unshare takes flags only; this process has one thread.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        return Err(os_error(
            "cannot lock the covers in a second namespace (unshare)",
        ));
    }
    write_proc_self("setgroups", "deny")?;
    write_proc_self("uid_map", &format!("{uid} {uid} 1"))?;
    write_proc_self("gid_map", &format!("{gid} {gid} 1"))?;
    give_up_capabilities()?;
    // SAFETY: prctl with integers.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    Ok(())
}

/// Gives up every capability for good: securebits locked so that no `exec` (of a set-uid
/// program, or by uid 0) gains one back, the ambient set cleared, the bounding set dropped,
/// then the effective, permitted and inheritable sets emptied. Root keeps its uid (and every
/// file root owns) but nothing the kernel grants by capability: `TIOCSTI` on a terminal, mounts,
/// raw sockets, tracing. Used in the namespaces ([`seal`]) and by Landlock alone.
///
/// # Errors
/// The step that failed.
pub fn give_up_capabilities() -> Result<(), ConfineError> {
    const SECBITS: libc::c_ulong = 0x01 // NOROOT
        | 0x02 // NOROOT_LOCKED
        | 0x04 // NO_SETUID_FIXUP
        | 0x08 // NO_SETUID_FIXUP_LOCKED
        | 0x20 // KEEP_CAPS_LOCKED (off)
        | 0x40 // NO_CAP_AMBIENT_RAISE
        | 0x80; // NO_CAP_AMBIENT_RAISE_LOCKED
    // SAFETY: prctl with integers.
    if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, SECBITS, 0, 0, 0) } != 0 {
        return Err(os_error("cannot set securebits"));
    }
    // SAFETY: prctl with integers.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    for cap in 0..64 {
        // SAFETY: prctl with integers; capabilities past the kernel's last answer EINVAL.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
    }
    #[repr(C)]
    struct CapHeader {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct CapData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let header = CapHeader {
        // _LINUX_CAPABILITY_VERSION_3: two 32-bit words of each set.
        version: 0x2008_0522,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset reads the header and two data words we own.
    if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
        return Err(os_error("cannot give up capabilities (capset)"));
    }
    Ok(())
}

fn umount(target: &Path) -> Result<(), ConfineError> {
    let target_c = c_path(target)?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(target_c.as_ptr(), 0) } != 0 {
        return Err(os_error(&format!("cannot unmount `{}`", target.display())));
    }
    Ok(())
}

/// Waits for one of [`waited_signals`] (blocked by [`enter`]).
fn wait_signal(signals: &libc::sigset_t) -> i32 {
    loop {
        // SAFETY: sigwaitinfo writes into a siginfo we own.
        let signal = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::sigwaitinfo(signals, &mut info)
        };
        if signal > 0 {
            return signal;
        }
    }
}

/// The exit code that passes on a wait status: the code, or `128 + N` for signal `N`.
fn exit_code(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        i32::from(super::LAUNCH_FAILED_EXIT)
    }
}

/// Points standard input, output and error at `/dev/null`: the relay and init must not hold
/// the server's pipes, or toolward would not see the server close its output or end.
fn release_standard_streams() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors of this process.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}

/// The relay: passes [`FORWARDED`] signals on to init and exits as it exits.
pub fn relay(init: libc::pid_t) -> ! {
    release_standard_streams();
    let signals = waited_signals();
    loop {
        let signal = wait_signal(&signals);
        if signal != libc::SIGCHLD {
            // SAFETY: kill with integers.
            unsafe { libc::kill(init, signal) };
            continue;
        }
        let mut status = 0;
        // SAFETY: waitpid writes into an integer we own.
        let pid = unsafe { libc::waitpid(init, &mut status, libc::WNOHANG) };
        if pid == init {
            // SAFETY: ends the process with init's status.
            unsafe { libc::_exit(exit_code(status)) };
        }
    }
}

/// Init: starts the server (signals unblocked, every descriptor above stderr closed at its
/// `exec`), reaps every process of the namespace, passes [`FORWARDED`] signals on to the
/// server, and exits with its status when it ends.
pub fn init(program: &OsString, args: &[OsString]) -> ConfineError {
    let signals = waited_signals();
    // SAFETY: fork in a process of one thread.
    let server = unsafe { libc::fork() };
    if server == -1 {
        return os_error("cannot start the server (fork)");
    }
    if server == 0 {
        // SAFETY: sigprocmask with a set we own.
        unsafe { libc::sigprocmask(libc::SIG_UNBLOCK, &signals, std::ptr::null_mut()) };
        let error = super::exec(program, args);
        eprintln!("toolward: {error}");
        // SAFETY: ends the child that could not become the server.
        unsafe { libc::_exit(i32::from(super::LAUNCH_FAILED_EXIT)) };
    }
    release_standard_streams();
    loop {
        let signal = wait_signal(&signals);
        if signal != libc::SIGCHLD {
            // SAFETY: kill with integers.
            unsafe { libc::kill(server, signal) };
            continue;
        }
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes into an integer we own.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
            if pid == server {
                // SAFETY: ends init; the kernel ends the namespace's other processes.
                unsafe { libc::_exit(exit_code(status)) };
            }
        }
    }
}

/// Whether this process can make the namespaces and cover a path: forks a throwaway
/// process that does what [`enter`] does (with nothing withheld) and reports.
///
/// # Errors
/// Why the namespaces are unavailable, one line.
pub fn probe() -> Result<(), String> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("cannot probe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: the descriptors pipe2 just made are ours alone.
    let (read, write) = unsafe {
        (
            <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fds[0]),
            <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fds[1]),
        )
    };
    // SAFETY: fork in a process of one thread (the probe runs before anything starts one).
    let pid = unsafe { libc::fork() };
    if pid == -1 {
        return Err(format!("cannot probe: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        drop(read);
        let mut out = std::fs::File::from(write);
        // A folder covered as a launch covers one (in this throwaway namespace only).
        let withheld = [PathBuf::from("/tmp")];
        let code = match enter(&Isolation {
            withheld: if withheld[0].is_dir() { &withheld } else { &[] },
            allow: &[],
            devices: &[],
            network: false,
        }) {
            Ok(Side::Init) => 0,
            Ok(Side::Relay(init)) => {
                drop(out);
                let mut status = 0;
                // SAFETY: waitpid writes into an integer we own.
                unsafe { libc::waitpid(init, &mut status, 0) };
                exit_code(status)
            }
            Err(e) => {
                let _ = std::io::Write::write_all(&mut out, e.to_string().as_bytes());
                1
            }
        };
        // SAFETY: ends the throwaway process.
        unsafe { libc::_exit(code) };
    }
    drop(write);
    let mut reason = String::new();
    let _ = std::io::Read::read_to_string(&mut std::fs::File::from(read), &mut reason);
    let mut status = 0;
    // SAFETY: waitpid writes into an integer we own.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if exit_code(status) == 0 {
        return Ok(());
    }
    let reason = reason.trim();
    Err(if reason.is_empty() {
        format!("the probe ended with status {}", exit_code(status))
    } else {
        crate::text::escape(reason)
    })
}
