//! Starting a stdio server in a session and process group of its own with an environment built from
//! nothing, signalling that group, and finding the descendants that left it.
//!
//! Where ambient authority is used: this file reads toolward's own environment (only the
//! variables named in [`INHERITED_VARIABLES`] and those the operator passes through), reads
//! `/proc` on Linux, and sends signals.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::process::Stdio;
use std::sync::{Mutex, PoisonError};

#[cfg(unix)]
use process_wrap::tokio::ProcessSession;
use process_wrap::tokio::{ChildWrapper, CommandWrap, KillOnDrop};

use super::StdioSpec;

/// The variables of toolward's own environment every stdio server gets: what a process needs
/// to find programs and a place to write, and no more.
#[cfg(not(windows))]
pub const INHERITED_VARIABLES: &[&str] = &["PATH", "HOME", "TMPDIR"];

/// The variables of toolward's own environment every stdio server gets: what a process needs
/// to find programs and a place to write, and what Windows needs to start a process at all.
#[cfg(windows)]
pub const INHERITED_VARIABLES: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    "SYSTEMROOT",
    "WINDIR",
    "COMSPEC",
    "PATHEXT",
    "TEMP",
    "TMP",
    "USERPROFILE",
    "APPDATA",
    "LOCALAPPDATA",
];

/// Leaders (our direct children) of every stdio server this process started and has not yet
/// reaped. The orphan sweep never touches these: reaping one would steal its exit status from
/// tokio. Held across `spawn`, so a new server cannot be mistaken for an orphan.
static LIVE_LEADERS: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

/// Whether a variable name can be given to a process (`std::env` and `Command` refuse the
/// others, some by panicking).
pub(super) fn is_valid_variable_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

/// The server's whole environment: [`INHERITED_VARIABLES`] and the passed-through variables
/// that are set in toolward's environment, then the variables set for this server (which win).
/// Names must have been checked with [`is_valid_variable_name`].
pub(super) fn environment(spec: &StdioSpec) -> BTreeMap<OsString, OsString> {
    let mut env = BTreeMap::new();
    let inherited = INHERITED_VARIABLES.iter().copied();
    for name in inherited.chain(spec.pass_env.iter().map(String::as_str)) {
        if !is_valid_variable_name(name) {
            continue;
        }
        if let Some(value) = std::env::var_os(name) {
            env.insert(OsString::from(name), value);
        }
    }
    for (name, value) in &spec.env {
        env.insert(OsString::from(name), OsString::from(value));
    }
    env
}

/// The command for `spec`: environment cleared then rebuilt, pipes on all three streams, its
/// own session and process group (Unix: `setsid`, so the server has no controlling terminal
/// even when toolward has one, and cannot push keystrokes into the operator's shell with
/// `TIOCSTI`, write to the terminal or read from it), killed if dropped. A confined server starts through the
/// launcher, which restricts itself and `exec`s the server: same process, same group.
pub(super) fn command(spec: &StdioSpec, env: &BTreeMap<OsString, OsString>) -> CommandWrap {
    let (program, args): (OsString, Vec<OsString>) = match &spec.confine {
        Some(confinement) => (
            confinement.launcher.clone().into_os_string(),
            confinement.launcher_args(&spec.command, &spec.args),
        ),
        None => (
            OsString::from(&spec.command),
            spec.args.iter().map(OsString::from).collect(),
        ),
    };
    // The launcher is started without the server's loader variables under their names: it
    // gives them back to the server once confined.
    let env = match &spec.confine {
        Some(_) => crate::confine::hide_loader_variables(env),
        None => env.clone(),
    };
    let mut command = CommandWrap::with_new(program, |command| {
        command
            .args(&args)
            .env_clear()
            .envs(&env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(cwd) = &spec.cwd {
            command.current_dir(cwd);
        }
    });
    #[cfg(unix)]
    command.wrap(ProcessSession);
    command.wrap(KillOnDrop);
    command
}

/// Spawns `command` and records its leader as live (see [`LIVE_LEADERS`]).
pub(super) fn spawn(command: &mut CommandWrap) -> io::Result<Box<dyn ChildWrapper>> {
    let mut leaders = LIVE_LEADERS.lock().unwrap_or_else(PoisonError::into_inner);
    let child = command.spawn()?;
    if let Some(pid) = child.id() {
        leaders.insert(pid);
    }
    Ok(child)
}

/// Forgets a leader once tokio has reaped it.
pub(super) fn forget_leader(pid: u32) {
    LIVE_LEADERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&pid);
}

/// `SIGTERM`, for [`signal_group`] and [`ProcessMark::signal`].
#[cfg(unix)]
pub(super) const SIGTERM: i32 = libc::SIGTERM;
/// `SIGKILL`, for [`signal_group`] and [`ProcessMark::signal`].
#[cfg(unix)]
pub(super) const SIGKILL: i32 = libc::SIGKILL;

/// Sends `signal` to every process of the group `pgid`. A group that no longer exists is not
/// an error: the point is that it ends.
#[cfg(unix)]
pub(super) fn signal_group(pgid: u32, signal: i32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    // 0 and 1 would mean our own group and init's: never ours to end.
    if pgid <= 1 {
        return;
    }
    #[expect(
        unsafe_code,
        reason = "killpg takes no pointers; no safe wrapper is among our dependencies"
    )]
    // SAFETY: plain system call on integers.
    let _ = unsafe { libc::killpg(pgid, signal) };
}

/// Sends `signal` to one process.
#[cfg(unix)]
#[cfg_attr(
    not(target_os = "linux"),
    allow(dead_code, reason = "only Linux finds descendants")
)]
fn signal_pid(pid: u32, signal: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    if pid <= 1 {
        return;
    }
    #[expect(
        unsafe_code,
        reason = "kill takes no pointers; no safe wrapper is among our dependencies"
    )]
    // SAFETY: plain system call on integers.
    let _ = unsafe { libc::kill(pid, signal) };
}

/// Whether any process of the group `pgid` is still running (zombies do not count).
#[cfg(unix)]
pub(super) fn group_alive(pgid: u32) -> bool {
    #[cfg(target_os = "linux")]
    {
        proc_fs::processes()
            .iter()
            .any(|process| process.pgrp == pgid && process.state != b'Z')
    }
    #[cfg(not(target_os = "linux"))]
    {
        let Ok(pgid) = libc::pid_t::try_from(pgid) else {
            return false;
        };
        #[expect(
            unsafe_code,
            reason = "killpg takes no pointers; no safe wrapper is among our dependencies"
        )]
        // SAFETY: plain system call on integers; signal 0 only checks existence.
        let rc = unsafe { libc::killpg(pgid, 0) };
        rc == 0
    }
}

/// A process seen at one moment, named by pid and start time so a reused pid is not mistaken
/// for it later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    not(target_os = "linux"),
    allow(dead_code, reason = "only Linux finds descendants")
)]
pub(super) struct ProcessMark {
    pid: u32,
    start_time: u64,
}

impl ProcessMark {
    /// Sends `signal` to the process if it is still the one that was seen.
    #[cfg(unix)]
    pub(super) fn signal(self, signal: i32) {
        #[cfg(target_os = "linux")]
        if proc_fs::stat(self.pid).is_some_and(|now| now.start_time == self.start_time) {
            signal_pid(self.pid, signal);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = signal;
    }
}

/// Every descendant of `root` now, found through the parent links in `/proc`: this finds the
/// descendants that left the group (`setsid`, `setpgid`) while their parent still lives. Empty
/// off Linux.
pub(super) fn descendants(root: u32) -> Vec<ProcessMark> {
    #[cfg(target_os = "linux")]
    {
        let all = proc_fs::processes();
        let mut found = Vec::new();
        let mut frontier = vec![root];
        while let Some(parent) = frontier.pop() {
            for process in all.iter().filter(|process| process.ppid == parent) {
                // A malformed /proc could loop; a pid is visited once.
                if process.pid != root
                    && !found
                        .iter()
                        .any(|mark: &ProcessMark| mark.pid == process.pid)
                {
                    found.push(ProcessMark {
                        pid: process.pid,
                        start_time: process.start_time,
                    });
                    frontier.push(process.pid);
                }
            }
        }
        found
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = root;
        Vec::new()
    }
}

#[cfg(target_os = "linux")]
static SUBREAPER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes this process the child subreaper of its descendants (Linux `prctl`
/// `PR_SET_CHILD_SUBREAPER`): a descendant whose parent dies is reparented to us instead of to
/// init, so closing a server can also end the processes it detached with `setsid` or a double
/// fork.
///
/// Call it once, from the binary's `main`, before starting servers; the library never calls
/// it, because it changes how the whole process is treated. After it, closing a server also
/// kills and reaps the processes reparented to toolward that are still in that server's group,
/// and every one reparented to toolward that left toolward's session (`setsid`), whichever
/// server it came from: once its parent is gone, nothing tells which server that was.
///
/// # Errors
///
/// The error of `prctl`; on other systems than Linux, [`io::ErrorKind::Unsupported`].
#[cfg(target_os = "linux")]
pub fn become_subreaper() -> io::Result<()> {
    #[expect(
        unsafe_code,
        reason = "prctl is variadic C; no safe wrapper is among our dependencies"
    )]
    // SAFETY: PR_SET_CHILD_SUBREAPER takes one integer argument and no pointers.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, libc::c_ulong::from(1u8)) };
    if rc == 0 {
        SUBREAPER.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes this process the child subreaper of its descendants: Linux only.
///
/// # Errors
///
/// Always [`io::ErrorKind::Unsupported`] on this system.
#[cfg(not(target_os = "linux"))]
pub fn become_subreaper() -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "child subreaper is a Linux feature",
    ))
}

/// After [`become_subreaper`]: kills and reaps the orphans of the server whose group was
/// `pgid`. An orphan is a process whose parent is now this process although we did not start
/// it (it is not a live leader); it is the closing server's when it is still in that server's
/// group, or when it left toolward's session (`setsid`): which server a process that left its
/// session came from cannot be known once its parent is gone, so every close sweeps all of
/// those. A child toolward started some other way stays in toolward's session and group and is
/// never touched. Each victim gets `SIGKILL` and is reaped by its pid (never `waitpid(-1)`,
/// which would steal the exit statuses tokio waits for), for at most `limit`.
pub(super) async fn reap_orphans(
    pgid: Option<u32>,
    limit: std::time::Duration,
    poll: std::time::Duration,
) {
    #[cfg(target_os = "linux")]
    {
        if !SUBREAPER.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let me = std::process::id();
        let Some(own_session) = proc_fs::stat(me).map(|own| own.session) else {
            return;
        };
        let mut victims: Vec<u32> = {
            let leaders = LIVE_LEADERS.lock().unwrap_or_else(PoisonError::into_inner);
            let victims: Vec<u32> = proc_fs::processes()
                .iter()
                .filter(|process| process.ppid == me && !leaders.contains(&process.pid))
                .filter(|process| Some(process.pgrp) == pgid || process.session != own_session)
                .map(|process| process.pid)
                .collect();
            for pid in &victims {
                signal_pid(*pid, SIGKILL);
            }
            victims
        };
        if !victims.is_empty() {
            tracing::debug!(
                count = victims.len(),
                "killing orphaned descendants of stdio servers"
            );
        }
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            victims.retain(|pid| !try_reap(*pid));
            if victims.is_empty() || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(poll).await;
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (pgid, limit, poll);
    }
}

/// Reaps `pid` if it has exited; true when it is gone (reaped now, or not our child).
#[cfg(target_os = "linux")]
fn try_reap(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    let mut status: libc::c_int = 0;
    #[expect(
        unsafe_code,
        reason = "waitpid has no safe wrapper among our dependencies"
    )]
    // SAFETY: `status` is a valid, writable c_int for the duration of the call.
    let rc = unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) };
    rc != 0
}

/// Reading process facts from Linux's `/proc`.
#[cfg(target_os = "linux")]
mod proc_fs {
    /// The fields of `/proc/<pid>/stat` we use (proc(5)).
    #[derive(Debug, Clone, Copy)]
    pub(super) struct Stat {
        pub(super) pid: u32,
        pub(super) state: u8,
        pub(super) ppid: u32,
        pub(super) pgrp: u32,
        pub(super) session: u32,
        pub(super) start_time: u64,
    }

    /// Every process visible now; a process that ends while we read is left out.
    pub(super) fn processes() -> Vec<Stat> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(stat)
            .collect()
    }

    /// One process's facts, if it exists.
    pub(super) fn stat(pid: u32) -> Option<Stat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name is in parentheses and may itself contain spaces and parentheses.
        let after_name = text.get(text.rfind(')')? + 1..)?;
        let fields: Vec<&str> = after_name.split_ascii_whitespace().collect();
        Some(Stat {
            pid,
            state: *fields.first()?.as_bytes().first()?,
            ppid: fields.get(1)?.parse().ok()?,
            pgrp: fields.get(2)?.parse().ok()?,
            session: fields.get(3)?.parse().ok()?,
            // Field 22 of the line; the 20th after the name.
            start_time: fields.get(19)?.parse().ok()?,
        })
    }
}
