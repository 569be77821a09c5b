//! Confinement of stdio servers with Landlock (Linux 5.13+): a server runs as the operator,
//! so without it a server could read and write everything toolward keeps (the approvals
//! queue, the compiled-component cache, the listen token, the manifest, the audit log).
//!
//! # How
//!
//! toolward starts each stdio server through itself: the `toolward` binary's hidden
//! subcommand [`LAUNCHER_SUBCOMMAND`] (`toolward __confine --deny PATH ... [--allow PATH]
//! [--deny-tcp] -- PROGRAM ARGS`) restricts its own process with Landlock, then `exec`s the
//! server, which inherits the restriction (no `pre_exec` hook, no `unsafe`). The server keeps
//! its pid and process group, so closing it is unchanged.
//!
//! Landlock only grants; nothing beneath a granted folder can be withheld. To withhold a
//! path, the launcher grants full access to every entry, at launch, of each folder on the
//! way from `/` to it (its ancestors), except the ancestors themselves and the withheld path
//! ([`grants`]). Walking a path and `stat` are not governed by Landlock, so every other path
//! still resolves; the costs are that the ancestors cannot be listed, nothing can be created,
//! removed or renamed directly in them, and an entry created in one of them after the
//! server started is out of its reach. Symbolic links found there are not granted (what they
//! point to is granted, or not, on its own). A path granted with `--allow` is reachable even
//! beneath a withheld one: each server's own folder of [`crate::config::Config::servers_dir`].
//!
//! Withheld by default ([`default_denied`]): the state folder, the config file, the rules
//! file and components, the policy component and settings, the manifest, the audit log (and
//! the files beside it that share its name), and the other servers' folders. The operator
//! adds paths (`confine.deny`, for all servers or one) and may deny TCP
//! (`confine.deny_tcp`, Landlock ABI 4, Linux 6.7+). Where the kernel offers it (ABI 6,
//! Linux 6.12+), a server also cannot signal processes outside its sandbox (toolward, the
//! other servers) nor connect to their abstract UNIX sockets.
//!
//! # The launcher
//!
//! The launcher is the running program when it is `toolward` or an embedder's binary whose
//! `main` called `toolward::confine_main` ([`launcher_entry`]) first, else
//! [`crate::config::ConfineConfig::launcher`], else the program named by [`LAUNCHER_ENV`]
//! (embedders, tests). It is probed once per process ([`landlock_abi`]): the probe restricts
//! a throwaway process exactly as a launch would and reports the Landlock ABI obtained.
//! Without a launcher, or without Landlock, servers start unconfined and [`plan`] says why,
//! per server, for the load report.
//!
//! Where ambient authority is used: the launcher reads the folders on the way to each
//! withheld path, and the probe runs the launcher.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::config::{Config, ServerConfig, ServerConfine, ServerTransport};

/// The hidden subcommand of the `toolward` binary that confines itself and `exec`s a server.
pub const LAUNCHER_SUBCOMMAND: &str = "__confine";

/// The variable naming the `toolward` binary to use as launcher when the running program is
/// not `toolward` and [`crate::config::ConfineConfig::launcher`] is unset.
pub const LAUNCHER_ENV: &str = "TOOLWARD_BIN";

/// The flag of the launcher that only probes: restricts itself, prints [`PROBE_PREFIX`] and
/// the ABI, and exits.
pub const PROBE_FLAG: &str = "--probe";

/// What the probe prints before the Landlock ABI it obtained (`0`: none).
pub const PROBE_PREFIX: &str = "landlock-abi ";

/// The probe's line when the namespaces of the first layer can be made.
pub const NAMESPACES_OK: &str = "namespaces ok";

/// What the probe prints before why the namespaces cannot be made.
pub const NAMESPACES_UNAVAILABLE: &str = "namespaces unavailable: ";

/// The launcher's flag that makes the namespaces of the first layer ([`namespace`]).
pub const NAMESPACES_FLAG: &str = "--namespaces";

/// The launcher's flag that gives the server a network namespace of its own.
pub const DENY_NETWORK_FLAG: &str = "--deny-network";

/// The launcher's flag that grants a server one device node beside [`STANDARD_DEVICES`].
pub const DEVICE_FLAG: &str = "--device";

/// The device nodes every confined server may open: what programs open by name (the bit
/// bucket, zeros, a full disk, randomness, and `/dev/tty`, which answers a server without a
/// controlling terminal "no terminal"). Besides these a server reaches only its own
/// pseudo-terminals (`/dev/pts`, `/dev/ptmx`), shared memory (`/dev/shm`) and the devices
/// its `confine.devices` names: never the operator's terminal, a console, a raw disk (which
/// uid 0 reads without any capability, under every withheld path) or the kernel's log.
pub const STANDARD_DEVICES: [&str; 6] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// The folders and files of `/dev` a confined server reaches beside its devices: its own
/// pseudo-terminals and shared memory (private ones in the namespaces).
const DEVICE_FOLDERS: [&str; 3] = ["/dev/pts", "/dev/ptmx", "/dev/shm"];

/// Most entries the launcher grants (the entries of all the folders on the way to the
/// withheld paths): each is an open file and a system call, and a folder of more entries
/// than this on that way (a shared `/tmp`?) is better given as the config's folder.
pub const MAX_GRANTED_ENTRIES: usize = 100_000;

/// The Landlock ABI the access rights are taken from (Linux 6.12: files, TCP, signal and
/// abstract UNIX socket scopes): tested here; older kernels get what they support of it
/// (best effort), newer ones nothing more until this is raised and tested.
pub const TARGET_ABI: u32 = 6;

/// The first Landlock ABI with TCP rules (Linux 6.7).
pub const TCP_ABI: u32 = 4;

/// Exit code of the launcher when it cannot confine itself or start the server (as a shell's
/// "cannot execute").
pub const LAUNCH_FAILED_EXIT: u8 = 126;

/// Why a server cannot be confined and started. Each names the path or program.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfineError {
    /// A withheld or allowed path could not be resolved.
    #[error("confine: cannot resolve `{}`: {source}", path.display())]
    Resolve {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An entry to grant could not be opened.
    #[error("confine: cannot open `{}` to grant it: {source}", path.display())]
    Open {
        /// The entry.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The folders on the way to the withheld paths hold too many entries.
    #[error(
        "confine: the folders on the way to the withheld paths hold more than {limit} entries (at `{}`): move the config and state folder to a folder of their own",
        folder.display()
    )]
    TooManyEntries {
        /// The folder being read when the limit was passed.
        folder: PathBuf,
        /// [`MAX_GRANTED_ENTRIES`].
        limit: usize,
    },
    /// Landlock refused the rules or the restriction.
    #[error("confine: landlock: {reason}")]
    Landlock {
        /// The crate's message.
        reason: String,
    },
    /// The kernel enforced nothing.
    #[error(
        "confine: landlock is not available on this kernel (Linux 5.13+ with landlock enabled), so the server would run unconfined: not started"
    )]
    NotEnforced,
    /// The server's program could not be executed.
    #[error("confine: cannot execute `{}`: {source}", program.to_string_lossy())]
    Exec {
        /// The program.
        program: OsString,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The namespaces of the first layer could not be made or the withheld paths covered
    /// ([`namespace`]).
    #[error("confine: namespaces: {reason}")]
    Namespace {
        /// The step that failed and the kernel's answer.
        reason: String,
    },
    /// The launcher was given no program.
    #[error(
        "confine: no program to start: `toolward __confine [--deny PATH]... -- PROGRAM [ARGS]...`"
    )]
    NoProgram,
}

/// How a confined server is started: through `launcher`, which withholds `deny`, grants
/// `allow` beneath them, and denies TCP when `deny_tcp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    /// What is executed as the launcher, fixed when toolward first needed it
    /// ([`launcher`]): `/proc/self/exe` (the binary toolward itself runs, whatever has since
    /// been renamed or replaced at its path) or `/proc/self/fd/N` (a configured launcher held
    /// open). Never a path looked up again.
    pub launcher: PathBuf,
    /// The launcher's path as the operator knows it, for reports.
    pub launcher_shown: PathBuf,
    /// Absolute paths withheld from the server.
    pub deny: Vec<PathBuf>,
    /// Absolute paths granted even beneath a withheld one (the server's own folder).
    pub allow: Vec<PathBuf>,
    /// Whether TCP `bind` and `connect` are denied.
    pub deny_tcp: bool,
    /// The Landlock ABI the probe obtained (1 or more).
    pub abi: u32,
    /// The first layer: user, mount and PID namespaces in which the withheld paths are
    /// covered and siblings hidden ([`namespace`]); `Err` says why it is not applied (not
    /// available here, or turned off by `confine.namespaces`), and Landlock then stands alone.
    pub namespaces: Result<(), String>,
    /// Whether the server gets a network namespace of its own (no network at all;
    /// `confine.deny_network`). Only with [`Confinement::namespaces`].
    pub deny_network: bool,
    /// Device nodes the server may open beside [`STANDARD_DEVICES`] (the server's
    /// `confine.devices`).
    pub devices: Vec<PathBuf>,
}

impl Confinement {
    /// The launcher's arguments that start `program` with `args` confined.
    pub fn launcher_args(&self, program: &str, args: &[String]) -> Vec<OsString> {
        let mut out = vec![OsString::from(LAUNCHER_SUBCOMMAND)];
        for path in &self.deny {
            out.push("--deny".into());
            out.push(path.clone().into_os_string());
        }
        for path in &self.allow {
            out.push("--allow".into());
            out.push(path.clone().into_os_string());
        }
        for path in &self.devices {
            out.push(DEVICE_FLAG.into());
            out.push(path.clone().into_os_string());
        }
        if self.deny_tcp {
            out.push("--deny-tcp".into());
        }
        if self.namespaces.is_ok() {
            out.push(NAMESPACES_FLAG.into());
            if self.deny_network {
                out.push(DENY_NETWORK_FLAG.into());
            }
        }
        out.push("--".into());
        out.push(program.into());
        out.extend(args.iter().map(OsString::from));
        out
    }

    /// Whether TCP is really denied: asked for, and the kernel has TCP rules (or no network
    /// at all).
    pub fn tcp_denied(&self) -> bool {
        (self.deny_tcp && self.abi >= TCP_ABI) || self.network_denied()
    }

    /// Whether the server has no network at all (a network namespace of its own).
    pub fn network_denied(&self) -> bool {
        self.deny_network && self.namespaces.is_ok()
    }

    /// Why a start confined as `self` would be less confined than `first` (the server's
    /// first start): `None` when it is at least as confined. A restart is refused otherwise.
    pub fn weaker_than(&self, first: &Confinement) -> Option<String> {
        if self.abi < first.abi {
            return Some(format!(
                "Landlock ABI {} instead of {}",
                self.abi, first.abi
            ));
        }
        if first.namespaces.is_ok()
            && let Err(why) = &self.namespaces
        {
            return Some(format!("without its namespaces ({why})"));
        }
        if first.tcp_denied() && !self.tcp_denied() {
            return Some("with TCP allowed".to_owned());
        }
        if first.network_denied() && !self.network_denied() {
            return Some("with the network reachable".to_owned());
        }
        if let Some(path) = first.deny.iter().find(|path| !self.deny.contains(path)) {
            return Some(format!("with `{}` no longer withheld", path.display()));
        }
        None
    }
}

/// Why a start as `now` would be less confined than the server's first start, `first`
/// (both `None` when unconfined): `None` when it is at least as confined.
pub fn weaker_start(first: Option<&Confinement>, now: Option<&Confinement>) -> Option<String> {
    match (first, now) {
        (None, _) => None,
        (Some(_), None) => Some("unconfined".to_owned()),
        (Some(first), Some(now)) => now.weaker_than(first),
    }
}

/// How a stdio server will run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Through the launcher, confined.
    Confined(Confinement),
    /// Not started: a launcher is named or running but cannot confine (it cannot be opened,
    /// or it failed its probe), and a server is never started unconfined for a passing
    /// failure an attacker can cause (found by an outside attack: a launcher held open for
    /// writing started every server unconfined). Why, one line.
    Refused {
        /// Why, one line, naming the launcher.
        reason: String,
    },
    /// As the operator, unconfined, and why (for the load report).
    Unconfined {
        /// Why, one line.
        reason: String,
        /// Whether the operator chose it (`confine.unconfined`) rather than it being forced
        /// (no launcher, no Landlock).
        chosen: bool,
    },
}

impl Plan {
    /// The confinement, when confined.
    pub fn confinement(&self) -> Option<&Confinement> {
        match self {
            Plan::Confined(confinement) => Some(confinement),
            Plan::Refused { .. } | Plan::Unconfined { .. } => None,
        }
    }

    /// One line for the load report: what the server is denied, or why it is not confined.
    pub fn describe(&self) -> String {
        match self {
            Plan::Confined(c) => {
                let tcp = match (c.deny_tcp, c.tcp_denied()) {
                    (false, _) => "TCP allowed".to_owned(),
                    (true, true) => "TCP denied".to_owned(),
                    (true, false) => format!(
                        "TCP NOT denied: Landlock ABI {} has no TCP rules (ABI {TCP_ABI}, Linux 6.7)",
                        c.abi
                    ),
                };
                let tcp = if c.network_denied() {
                    "no network (a network namespace of its own)".to_owned()
                } else {
                    tcp
                };
                let layers = match &c.namespaces {
                    Ok(()) => format!(
                        "Landlock ABI {} and namespaces (withheld paths covered, its own PID namespace)",
                        c.abi
                    ),
                    Err(why) => format!(
                        "Landlock ABI {} alone, without namespaces ({why}): metadata of withheld paths (chmod, chown, times, attributes) and watches on them are not denied, and other processes are in sight",
                        c.abi
                    ),
                };
                format!(
                    "{layers}: {} paths withheld (the state folder, config, rules, manifest and audit log among them), {tcp}",
                    c.deny.len()
                )
            }
            Plan::Refused { reason } | Plan::Unconfined { reason, .. } => reason.clone(),
        }
    }
}

/// Why a handed-in server runs unconfined, as the load report says.
pub const HANDED_UNCONFINED: &str = "unconfined: handed in as an rmcp transport, it runs in the embedder's process or wherever the embedder reaches it, which toolward does not start and cannot confine";

/// How the stdio server `server` of `config` will run; `None` for an HTTP server; for a
/// handed-in one, unconfined ([`HANDED_UNCONFINED`]).
pub fn plan(config: &Config, server: &ServerConfig) -> Option<Plan> {
    match server.transport {
        ServerTransport::Stdio { .. } => {}
        ServerTransport::Http { .. } => return None,
        // The embedder chose it by handing the transport in.
        ServerTransport::Handed(_) => {
            return Some(Plan::Unconfined {
                reason: String::from(HANDED_UNCONFINED),
                chosen: true,
            });
        }
    }
    let (extra, deny_tcp, deny_network, devices) = match &server.confine {
        ServerConfine::Unconfined { reason } => {
            return Some(Plan::Unconfined {
                reason: format!("unconfined by the config: {reason}"),
                chosen: true,
            });
        }
        ServerConfine::Confined {
            deny,
            deny_tcp,
            deny_network,
            devices,
        } => (deny, *deny_tcp, *deny_network, devices.clone()),
    };
    if !cfg!(feature = "confine") {
        return Some(Plan::Unconfined {
            reason: "unconfined: this build of toolward leaves out the `confine` feature, so the server can reach the state folder".to_owned(),
            chosen: false,
        });
    }
    let Some(launcher) = launcher(config) else {
        return Some(Plan::Unconfined {
            reason: format!(
                "unconfined: no launcher (the running program is not `toolward`; set `{LAUNCHER_ENV}` or `confine.launcher` to the toolward binary), so the server can reach the state folder"
            ),
            chosen: false,
        });
    };
    let refused = |reason: String| {
        Some(Plan::Refused {
            reason: format!("not started, rather than started unconfined: {reason}"),
        })
    };
    let launcher = match launcher {
        Ok(launcher) => launcher,
        Err(reason) => return refused(reason),
    };
    let probed = match landlock_abi(&launcher.exec) {
        Ok(probed) => probed,
        // Named as the operator knows it, not as it is executed (`/proc/self/fd/N`).
        Err(reason) => {
            return refused(format!(
                "the launcher `{}` {reason}: set `{LAUNCHER_ENV}` or `confine.launcher` to a toolward binary of this version",
                crate::text::escape(&launcher.shown.to_string_lossy())
            ));
        }
    };
    let abi = probed.abi;
    if abi == 0 {
        return Some(Plan::Unconfined {
            reason: "unconfined: Landlock is not available on this kernel (Linux 5.13+ with Landlock enabled), so the server can read and write the state folder, the manifest and the audit log".to_owned(),
            chosen: false,
        });
    }
    let mut deny = default_denied(config);
    // A launcher held by its descriptor is a file nothing runs between starts: withheld, so
    // no server can write a program of its own into it for the next restart (found by an
    // attack under Landlock alone, with `confine.launcher` set). The running toolward
    // (`/proc/self/exe`) cannot be written while it runs.
    if launcher.exec != Path::new(RUNNING_LAUNCHER) {
        deny.push(launcher.shown.clone());
    }
    // The running toolward cannot be written while it runs, but a file can be renamed over its
    // path, and the next `toolward` a client starts is that file (found by an attack: a
    // server whose folder is on PATH replaced the binary). It is withheld like a launcher.
    // Its path as first seen: the same at every restart, even after an upgrade renamed it.
    static RUNNING: OnceLock<Option<PathBuf>> = OnceLock::new();
    if let Some(running) = RUNNING.get_or_init(|| std::env::current_exe().ok())
        && !deny.contains(running)
    {
        deny.push(running.clone());
    }
    deny.extend(extra.iter().cloned());
    let namespaces = if config.confine.namespaces {
        probed.namespaces
    } else {
        Err("turned off by `confine.namespaces`".to_owned())
    };
    // Without its own network namespace, a server denied the network is at least denied TCP.
    let deny_tcp = deny_tcp || (deny_network && namespaces.is_err());
    Some(Plan::Confined(Confinement {
        launcher: launcher.exec,
        launcher_shown: launcher.shown,
        deny,
        allow: config
            .servers_dir
            .iter()
            .map(|folder| folder.join(&server.name))
            .collect(),
        deny_tcp,
        abi,
        namespaces,
        deny_network,
        devices,
    }))
}

/// What every confined server of `config` is denied: the state folder,
/// the config file, the rules file and components, the policy component and settings, the
/// manifest, the audit log and the files beside it whose names start with its name (a lock,
/// a head), the checkpoint signer key, and the folder of the servers' homes (each server's own is allowed again by
/// [`plan`]).
pub fn default_denied(config: &Config) -> Vec<PathBuf> {
    // A toolward without a state folder (`StoreConfig::Memory`, started from values) writes
    // no state folder, audit log or manifest: their default paths, under the embedder's base
    // folder, name nothing to withhold, and withholding them would make that folder (often
    // the server's own) unlistable. A manifest file that does exist there is still withheld.
    let memory = matches!(config.store, crate::config::StoreConfig::Memory);
    // What does exist at those paths is withheld all the same: a CLI toolward's state folder
    // in the embedder's folder holds its keys (found by an attack on the Python package).
    let withheld = |path: &Path| !memory || path.exists();
    let mut deny = Vec::new();
    if withheld(&config.state_dir) {
        deny.push(config.state_dir.clone());
    }
    deny.extend(config.file.iter().cloned());
    deny.extend(config.rules.text.file().map(Path::to_path_buf));
    deny.extend(
        [&config.rules.component, &config.policy.component]
            .into_iter()
            .flatten()
            .filter_map(|source| source.file().map(Path::to_path_buf)),
    );
    deny.extend(config.oci.keys.values().cloned());
    deny.extend(
        [&config.policy.settings, &config.policy.cedar]
            .into_iter()
            .flatten()
            .filter_map(|source| source.file().map(Path::to_path_buf)),
    );
    if withheld(&config.manifest) {
        deny.push(config.manifest.clone());
    }
    if withheld(&config.audit.file) {
        deny.push(config.audit.file.clone());
    }
    deny.extend(config.audit.checkpoint.iter().map(|c| c.key.clone()));
    if withheld(&config.audit.file)
        && let (Some(folder), Some(name)) =
            (config.audit.file.parent(), config.audit.file.file_name())
        && let Ok(entries) = std::fs::read_dir(folder)
    {
        let name = name.as_encoded_bytes();
        for entry in entries.filter_map(Result::ok) {
            let other = entry.file_name();
            if other.as_encoded_bytes().starts_with(name) && other.as_encoded_bytes() != name {
                deny.push(folder.join(other));
            }
        }
    }
    deny.extend(config.servers_dir.iter().cloned());
    // The user's runtime folder: the session bus and systemd's user manager listen there, and
    // `systemd-run --user` starts a process outside every confinement.
    #[cfg(target_os = "linux")]
    deny.push(PathBuf::from(format!(
        "/run/user/{}",
        rustix::process::getuid().as_raw()
    )));
    deny.extend(multiplexer_sockets());
    if let Some(home) = std::env::var_os("HOME").filter(|home| !home.is_empty()) {
        let config_home = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from);
        deny.extend(browser_profiles(Path::new(&home), config_home.as_deref()));
    }
    deny
}

/// The profile folders of the usual browsers under `home` (with `config_home`, the
/// `XDG_CONFIG_HOME` when set, in place of `~/.config`) that exist. A browser keeps its
/// cookies and its sites' local storage there as files: a server that reads them holds the
/// web console's session key and cookie, and answers its own held calls (found by an outside
/// attack: Chromium wrote the key to disk within seconds of the sign-in). Only those that
/// exist, as for the multiplexers: a withheld path's folders take no new entries from servers.
fn browser_profiles(home: &Path, config_home: Option<&Path>) -> Vec<PathBuf> {
    let config = config_home.map_or_else(|| home.join(".config"), Path::to_path_buf);
    let mut folders: Vec<PathBuf> = [
        "chromium",
        "google-chrome",
        "google-chrome-beta",
        "google-chrome-unstable",
        "BraveSoftware",
        "microsoft-edge",
        "microsoft-edge-beta",
        "microsoft-edge-dev",
        "vivaldi",
        "opera",
        "epiphany",
    ]
    .iter()
    .map(|name| config.join(name))
    .collect();
    folders.extend(
        [
            ".mozilla",
            ".librewolf",
            ".waterfox",
            "snap/chromium",
            "snap/firefox",
            ".var/app/org.chromium.Chromium",
            ".var/app/com.google.Chrome",
            ".var/app/org.mozilla.firefox",
            ".var/app/com.brave.Browser",
        ]
        .iter()
        .map(|name| home.join(name)),
    );
    folders.retain(|folder| folder.symlink_metadata().is_ok());
    folders
}

/// The folders of the operator's terminal multiplexers' sockets that exist: tmux's
/// (`/tmp/tmux-UID`, `$TMUX_TMPDIR/tmux-UID`, the folder of the socket `$TMUX` names) and
/// GNU screen's (`$SCREENDIR`,
/// `/run/screen/S-USER`, `/tmp/screens/S-USER`). Whoever connects to one types into the
/// operator's panes and runs commands outside every confinement, with no password (found by
/// an attack: `tmux run-shell` from a confined server read the approval key). Only those that
/// exist: withholding a path in `/tmp` closes `/tmp` itself to new entries from servers (their
/// `TMPDIR` is their own).
fn multiplexer_sockets() -> Vec<PathBuf> {
    let mut folders = Vec::new();
    #[cfg(target_os = "linux")]
    {
        let uid = rustix::process::getuid().as_raw();
        // Both tmux's default and `$TMUX_TMPDIR`'s: a tmux started from another environment
        // than toolward's uses the other (found by an attack), and the socket `$TMUX` names
        // when toolward runs inside one started with `-S`.
        folders.push(PathBuf::from(format!("/tmp/tmux-{uid}")));
        if let Some(dir) = std::env::var_os("TMUX_TMPDIR").filter(|dir| !dir.is_empty()) {
            folders.push(PathBuf::from(dir).join(format!("tmux-{uid}")));
        }
        if let Some(socket) = std::env::var_os("TMUX")
            .and_then(|value| value.to_str().map(str::to_owned))
            .and_then(|value| value.split(',').next().map(PathBuf::from))
            .and_then(|socket| socket.parent().map(Path::to_path_buf))
            .filter(|folder| folder.is_absolute() && folder != Path::new("/"))
        {
            folders.push(socket);
        }
        if let Some(dir) = std::env::var_os("SCREENDIR").filter(|dir| !dir.is_empty()) {
            folders.push(PathBuf::from(dir));
        }
        let user = crate::identity::current_os_user().name;
        for base in ["/run/screen", "/var/run/screen", "/tmp/screens"] {
            folders.push(Path::new(base).join(format!("S-{user}")));
        }
    }
    folders.retain(|folder| folder.symlink_metadata().is_ok());
    folders
}

/// Set by [`launcher_entry`] (`toolward::confine_main`): the running program, whatever its
/// name, answers [`LAUNCHER_SUBCOMMAND`] and so is its own launcher.
static SELF_LAUNCHER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What is executed as the launcher when it is the running `toolward`.
const RUNNING_LAUNCHER: &str = "/proc/self/exe";

/// The launcher of a process: what is executed, and the path the operator knows it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launcher {
    /// `/proc/self/exe` or `/proc/self/fd/N`: see [`Confinement::launcher`].
    pub exec: PathBuf,
    /// Its path, for reports.
    pub shown: PathBuf,
}

/// The launcher for `config`: [`crate::config::ConfineConfig::launcher`], else the running
/// program when its name is `toolward` or it called [`launcher_entry`] first, else [`LAUNCHER_ENV`]; `None` when none is set,
/// `Some(Err)` naming the file and why when the named file cannot be opened.
///
/// It is fixed the first time it is asked for: the running program is executed as
/// `/proc/self/exe` (which a rename or replacement of the file at its path does not change),
/// and a named launcher is opened once and executed through its descriptor from then on. A
/// restart therefore runs what the first start ran, even after `cargo install` or a package
/// manager replaced the binary, or a server renamed it aside.
pub fn launcher(config: &Config) -> Option<Result<Launcher, String>> {
    if let Some(launcher) = &config.confine.launcher {
        return Some(held(launcher));
    }
    if let Ok(exe) = std::env::current_exe()
        && (exe.file_stem().is_some_and(|stem| stem == "toolward")
            || SELF_LAUNCHER.load(std::sync::atomic::Ordering::Relaxed))
    {
        return Some(Ok(Launcher {
            exec: PathBuf::from(RUNNING_LAUNCHER),
            shown: exe,
        }));
    }
    std::env::var_os(LAUNCHER_ENV)
        .filter(|value| !value.is_empty())
        .map(|value| held(Path::new(&value)))
}

/// The launcher named `path`, opened the first time and held for the process's life, and
/// refused from then on when its inode's status changed since (`ctime`: written, or its mode,
/// owner or links changed). Under Landlock alone a server may `chmod` the file it cannot
/// write, and another local account then write it (found by an attack: the restart ran that
/// account's program, unconfined); nothing sets a `ctime` back.
fn held(path: &Path) -> Result<Launcher, String> {
    use std::collections::btree_map::Entry;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    /// A launcher held open, and its `ctime` (seconds, nanoseconds) when first opened.
    type Held = (std::fs::File, (i64, i64));
    static HELD: Mutex<BTreeMap<PathBuf, Held>> = Mutex::new(BTreeMap::new());
    let changed = |file: &std::fs::File| -> Result<(i64, i64), String> {
        file.metadata()
            .map(|meta| (meta.ctime(), meta.ctime_nsec()))
            .map_err(|e| format!("the launcher `{}` cannot be read ({e})", path.display()))
    };
    let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
    let file: &std::fs::File = match held.entry(path.to_owned()) {
        Entry::Occupied(entry) => {
            let (file, first) = entry.into_mut();
            if changed(file)? != *first {
                return Err(format!(
                    "the launcher `{}` changed since toolward first ran it (written, or its mode or owner changed): a start runs only what the first start ran; restart toolward to take the new file",
                    path.display()
                ));
            }
            file
        }
        // Read-only and close-on-exec: executable through `/proc/self/fd/N` until the `exec`
        // of the launcher itself, and never inherited by a server.
        Entry::Vacant(entry) => {
            let file = std::fs::File::open(path).map_err(|e| {
                format!(
                    "the launcher `{}` cannot be opened ({e}): set `{LAUNCHER_ENV}` or `confine.launcher` to a toolward binary of this version",
                    path.display()
                )
            })?;
            let first = changed(&file)?;
            &entry.insert((file, first)).0
        }
    };
    Ok(Launcher {
        exec: PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())),
        shown: path.to_owned(),
    })
}

/// The Landlock ABI `launcher` obtains (0: Landlock is unavailable), probed once per
/// launcher and process while it succeeds: the launcher restricts a throwaway process as it
/// would a server and reports the ABI.
///
/// # Errors
/// One line, `failed its probe (why)`, when it cannot be run or does not answer the probe
/// (not a `toolward` binary, one without confinement, or one held open for writing); the
/// caller names the launcher.
pub fn landlock_abi(launcher: &Path) -> Result<Probed, String> {
    static PROBES: Mutex<BTreeMap<PathBuf, Result<Probed, String>>> = Mutex::new(BTreeMap::new());
    let mut probes = PROBES.lock().unwrap_or_else(PoisonError::into_inner);
    // Only what a probe found is kept: a failure (a launcher briefly busy, say) is probed
    // again at the next start, so one passing failure does not leave every later start of
    // this process unconfined.
    if let Some(found) = probes.get(launcher) {
        return found.clone();
    }
    let found = probe(launcher);
    if found.is_ok() {
        probes.insert(launcher.to_owned(), found.clone());
    }
    found
}

/// What the probe of a launcher found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probed {
    /// The Landlock ABI obtained (0: none).
    pub abi: u32,
    /// Whether the namespaces of the first layer can be made, or why not.
    pub namespaces: Result<(), String>,
}

fn probe(launcher: &Path) -> Result<Probed, String> {
    let failed = |why: String| format!("failed its probe ({why})");
    let run = || {
        std::process::Command::new(launcher)
            .args([LAUNCHER_SUBCOMMAND, PROBE_FLAG])
            .env_clear()
            .stdin(std::process::Stdio::null())
            .output()
    };
    // A launcher some process holds open for writing cannot be executed (`ETXTBSY`): an
    // install or upgrade in progress, or a process that wants servers started unconfined.
    // Tried again for half a second; a launcher still busy then leaves the server unconfined,
    // as the load report and `check` say (SECURITY.md).
    let mut output = run();
    for _ in 0..10 {
        match &output {
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::TXTBSY.raw_os_error()) => {
                std::thread::sleep(std::time::Duration::from_millis(50));
                output = run();
            }
            _ => break,
        }
    }
    let output = output.map_err(|e| failed(e.to_string()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let abi = stdout
        .lines()
        .find_map(|line| line.strip_prefix(PROBE_PREFIX))
        .and_then(|abi| abi.trim().parse::<u32>().ok());
    let namespaces = if stdout.lines().any(|line| line == NAMESPACES_OK) {
        Ok(())
    } else {
        Err(stdout
            .lines()
            .find_map(|line| line.strip_prefix(NAMESPACES_UNAVAILABLE))
            .map_or_else(
                || "the launcher did not say".to_owned(),
                crate::text::escape,
            ))
    };
    match abi {
        Some(abi) if output.status.success() => Ok(Probed { abi, namespaces }),
        _ => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let first = stderr.lines().next().unwrap_or_default();
            Err(failed(format!(
                "{}: {}",
                output.status,
                crate::text::escape(first)
            )))
        }
    }
}

/// One entry the launcher grants: its path, and whether it is a folder (all rights) or
/// another file (the rights of a file).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    /// The entry.
    pub path: PathBuf,
    /// A folder (not a link to one).
    pub folder: bool,
}

/// The entries to grant so that every path of `deny` is withheld and every path of `allow`
/// reachable: each entry of each folder on the way from `/` to a withheld path, except those
/// folders themselves, the withheld paths and symbolic links; then `allow`. Paths are
/// resolved first (symbolic links followed; a withheld path that does not exist yet is
/// withheld where it would be created). A withheld path beneath another is covered by it.
/// With nothing to withhold, `/` is granted.
///
/// # Errors
/// [`ConfineError::Resolve`] for a path that cannot be resolved (an allowed path that does
/// not exist is left out, not an error); [`ConfineError::TooManyEntries`] past
/// [`MAX_GRANTED_ENTRIES`].
pub fn grants(deny: &[PathBuf], allow: &[PathBuf]) -> Result<Vec<Grant>, ConfineError> {
    let withheld: BTreeSet<PathBuf> = withheld(deny)?.into_iter().collect();
    let mut ancestors: BTreeSet<PathBuf> = BTreeSet::new();
    for path in &withheld {
        ancestors.extend(path.ancestors().skip(1).map(Path::to_path_buf));
    }
    let mut out = Vec::new();
    if withheld.is_empty() {
        out.push(Grant {
            path: PathBuf::from("/"),
            folder: true,
        });
    }
    for folder in &ancestors {
        // A folder that cannot be listed grants nothing of it: fail closed.
        let Ok(entries) = std::fs::read_dir(folder) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = folder.join(entry.file_name());
            if ancestors.contains(&path) || withheld.contains(&path) {
                continue;
            }
            // The entry itself, never what a link points to.
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_symlink() {
                continue;
            }
            if out.len() >= MAX_GRANTED_ENTRIES {
                return Err(ConfineError::TooManyEntries {
                    folder: folder.clone(),
                    limit: MAX_GRANTED_ENTRIES,
                });
            }
            out.push(Grant {
                path,
                folder: kind.is_dir(),
            });
        }
    }
    for path in allow {
        let Ok(path) = std::fs::canonicalize(path) else {
            continue;
        };
        // Granting a folder grants everything beneath it: never one holding a withheld path.
        if withheld.iter().any(|w| w.starts_with(&path)) {
            continue;
        }
        let folder = path.is_dir();
        out.push(Grant { path, folder });
    }
    Ok(out)
}

/// The withheld paths of `deny`, resolved (`resolve`), sorted, none beneath another (a
/// withheld path inside another is already withheld).
///
/// # Errors
/// [`ConfineError::Resolve`].
pub fn withheld(deny: &[PathBuf]) -> Result<Vec<PathBuf>, ConfineError> {
    let mut withheld: BTreeSet<PathBuf> = BTreeSet::new();
    for path in deny {
        withheld.insert(resolve(path)?);
    }
    let outer: Vec<PathBuf> = withheld.iter().cloned().collect();
    withheld.retain(|path| !outer.iter().any(|o| o != path && path.starts_with(o)));
    Ok(withheld.into_iter().collect())
}

/// `path` made absolute with every symbolic link resolved; for a path that does not exist,
/// its deepest existing ancestor resolved and the rest appended as written (without `..`).
fn resolve(path: &Path) -> Result<PathBuf, ConfineError> {
    let error = |source| ConfineError::Resolve {
        path: path.to_owned(),
        source,
    };
    let absolute = std::path::absolute(path).map_err(error)?;
    let mut existing = absolute.as_path();
    let mut rest: Vec<Component<'_>> = Vec::new();
    loop {
        match std::fs::canonicalize(existing) {
            Ok(mut resolved) => {
                for component in rest.iter().rev() {
                    match component {
                        Component::ParentDir => {
                            resolved.pop();
                        }
                        Component::Normal(name) => resolved.push(name),
                        _ => {}
                    }
                }
                return Ok(resolved);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let (Some(parent), Some(last)) =
                    (existing.parent(), existing.components().next_back())
                else {
                    return Err(error(e));
                };
                rest.push(last);
                existing = parent;
            }
            Err(e) => return Err(error(e)),
        }
    }
}

/// What the launcher was asked (`toolward __confine ...`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchRequest {
    /// `--deny`: paths to withhold.
    pub deny: Vec<PathBuf>,
    /// `--allow`: paths to grant even beneath a withheld one.
    pub allow: Vec<PathBuf>,
    /// `--deny-tcp`.
    pub deny_tcp: bool,
    /// `--namespaces`: the first layer ([`namespace`]).
    pub namespaces: bool,
    /// `--device`: device nodes to grant beside [`STANDARD_DEVICES`].
    pub devices: Vec<PathBuf>,
    /// `--deny-network`: a network namespace of its own (with `--namespaces`).
    pub deny_network: bool,
    /// The program and its arguments, after `--`.
    pub command: Vec<OsString>,
}

/// The prefix under which a confined server's loader variables ([`is_loader_variable`])
/// reach the launcher, which gives them back their names for the server: set on the launcher
/// itself, `LD_PRELOAD` (a server's `env` from an imported client config) would run code in
/// the launcher before it confines (found by an attack).
pub const LOADER_PREFIX: &str = "TOOLWARD_SERVER_LOADER_";

/// Whether the dynamic loader or the C library acts on `name` when a program starts (glibc's
/// list of variables it ignores for set-user-id programs, and every `LD_` name): code loaded,
/// libraries searched, tunables, locales and conversion modules read.
pub fn is_loader_variable(name: &str) -> bool {
    name.starts_with("LD_")
        || [
            "GCONV_PATH",
            "GETCONF_DIR",
            "GLIBC_TUNABLES",
            "HOSTALIASES",
            "LOCALDOMAIN",
            "LOCPATH",
            "MALLOC_TRACE",
            "NIS_PATH",
            "NLSPATH",
            "RESOLV_HOST_CONF",
            "RES_OPTIONS",
            "TZDIR",
        ]
        .contains(&name)
}

/// The environment the launcher of a confined server starts with: `env` with each loader
/// variable renamed under [`LOADER_PREFIX`].
pub fn hide_loader_variables(
    env: &BTreeMap<OsString, OsString>,
) -> BTreeMap<OsString, OsString> {
    env.iter()
        .map(|(name, value)| match name.to_str() {
            Some(text) if is_loader_variable(text) => {
                (OsString::from(format!("{LOADER_PREFIX}{text}")), value.clone())
            }
            _ => (name.clone(), value.clone()),
        })
        .collect()
}

/// In the launcher, before anything else: each variable [`hide_loader_variables`] renamed
/// gets its name back (the launcher is already loaded; the server it `exec`s gets them).
fn restore_loader_variables() {
    let names: Vec<OsString> = std::env::vars_os().map(|(name, _)| name).collect();
    for name in names {
        let Some(text) = name.to_str() else { continue };
        if let Some(original) = text.strip_prefix(LOADER_PREFIX) {
            let value = std::env::var_os(&name).unwrap_or_default();
            #[expect(unsafe_code, reason = "set_var: the launcher has one thread here")]
            // SAFETY: called at the launcher's start, before any other thread exists.
            unsafe {
                std::env::remove_var(&name);
                std::env::set_var(original, value);
            }
        }
    }
}

/// The launcher: confines this process as `request` says and `exec`s its program, so this
/// returns only on failure. Must run before any other thread starts: Landlock restricts the
/// calling thread (and what it starts from then on).
///
/// # Errors
/// [`ConfineError`]: the paths, Landlock (including [`ConfineError::NotEnforced`] when the
/// kernel enforces nothing: a server is never started unconfined by the launcher), or the
/// `exec`.
pub fn launch(request: &LaunchRequest) -> ConfineError {
    let Some((program, args)) = request.command.split_first() else {
        return ConfineError::NoProgram;
    };
    restore_loader_variables();
    // Nothing above stderr that toolward inherited stays open here (init would hold it for
    // the server's whole life): the launcher opens what it needs from now on.
    #[cfg(target_os = "linux")]
    {
        #[expect(unsafe_code, reason = "close_range takes integers; no safe wrapper")]
        // SAFETY: closes descriptors this process holds and has not used.
        let _ = unsafe { libc::close_range(3, libc::c_uint::MAX, 0) };
    }
    // `/dev` is withheld but for the standard devices, the server's own and the folders of
    // pseudo-terminals and shared memory (in the namespaces, `/dev` is a private one of
    // exactly these).
    let mut deny = request.deny.clone();
    deny.push(PathBuf::from("/dev"));
    let mut allow = request.allow.clone();
    allow.extend(
        STANDARD_DEVICES
            .iter()
            .chain(DEVICE_FOLDERS.iter())
            .map(PathBuf::from)
            .chain(request.devices.iter().cloned()),
    );
    let grants = match grants(&deny, &allow) {
        Ok(grants) => grants,
        Err(e) => return e,
    };
    #[cfg(target_os = "linux")]
    if request.namespaces {
        let withheld = match withheld(&request.deny) {
            Ok(withheld) => withheld,
            Err(e) => return e,
        };
        let allow: Vec<PathBuf> = request
            .allow
            .iter()
            .filter_map(|path| std::fs::canonicalize(path).ok())
            .collect();
        let isolation = namespace::Isolation {
            withheld: &withheld,
            allow: &allow,
            devices: &request.devices,
            network: request.deny_network,
        };
        match namespace::enter(&isolation) {
            Err(e) => return e,
            Ok(namespace::Side::Relay(init)) => namespace::relay(init),
            Ok(namespace::Side::Init) => {}
        }
        // Init: Landlock as the second layer, on init and so on the server it starts.
        match restrict(&grants, request.deny_tcp) {
            Ok(0) => return ConfineError::NotEnforced,
            Ok(_) => {}
            Err(e) => return e,
        }
        return namespace::init(program, args);
    }
    // Landlock alone: a root operator's server gives up its capabilities as in the
    // namespaces (found by an attack: with them it typed into the operator's terminal).
    // (An ordinary user has none to give up, nor the right to lock securebits.)
    #[cfg(target_os = "linux")]
    if crate::identity::euid() == 0
        && let Err(e) =
            namespace::hold_kernel_settings().and_then(|()| namespace::give_up_capabilities())
    {
        return e;
    }
    match restrict(&grants, request.deny_tcp) {
        Ok(0) => return ConfineError::NotEnforced,
        Ok(_) => {}
        Err(e) => return e,
    }
    exec(program, args)
}

/// The launcher as a program: runs `request` ([`launch`]), or with `probe` the probe
/// ([`probe_self`], printing [`PROBE_PREFIX`] and the ABI), and returns the exit code. It
/// returns only when the probe ends or the launch failed ([`LAUNCH_FAILED_EXIT`]).
pub fn run_launcher(request: &LaunchRequest, probe: bool) -> std::process::ExitCode {
    if probe {
        return match probe_self() {
            Ok(abi) => {
                println!("{PROBE_PREFIX}{abi}");
                std::process::ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("toolward: {error}");
                std::process::ExitCode::from(LAUNCH_FAILED_EXIT)
            }
        };
    }
    let error = launch(request);
    eprintln!("toolward: {error}");
    std::process::ExitCode::from(LAUNCH_FAILED_EXIT)
}

/// Exit code of the launcher for arguments it does not understand (as a usage error of the
/// `toolward` command).
pub const LAUNCHER_USAGE_EXIT: u8 = 2;

/// The launcher's arguments after [`LAUNCHER_SUBCOMMAND`], as [`Confinement::launcher_args`]
/// writes them (and [`PROBE_FLAG`]): the request and whether it is the probe.
///
/// # Errors
/// A line naming the argument not understood.
pub fn parse_launcher_args(
    args: impl IntoIterator<Item = OsString>,
) -> Result<(LaunchRequest, bool), String> {
    let mut request = LaunchRequest::default();
    let mut probe = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .map(PathBuf::from)
                .ok_or_else(|| format!("`{flag}` needs a value"))
        };
        match arg.to_str() {
            Some("--deny") => request.deny.push(value("--deny")?),
            Some("--allow") => request.allow.push(value("--allow")?),
            Some(DEVICE_FLAG) => request.devices.push(value(DEVICE_FLAG)?),
            Some("--deny-tcp") => request.deny_tcp = true,
            Some(NAMESPACES_FLAG) => request.namespaces = true,
            Some(DENY_NETWORK_FLAG) => request.deny_network = true,
            Some(PROBE_FLAG) => probe = true,
            Some("--") => {
                request.command = args.collect();
                break;
            }
            _ => {
                return Err(format!(
                    "`{LAUNCHER_SUBCOMMAND}` does not take `{}`",
                    arg.to_string_lossy()
                ));
            }
        }
    }
    Ok((request, probe))
}

/// The launcher's entry for a program's `main` (`toolward::confine_main`): when this process
/// was started as the launcher (its first argument is [`LAUNCHER_SUBCOMMAND`]), confines
/// itself and `exec`s the server, or probes, and returns the exit code; otherwise marks the
/// running program as its own launcher ([`launcher`]) and returns `None`.
pub fn launcher_entry() -> Option<std::process::ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(std::ffi::OsStr::new(LAUNCHER_SUBCOMMAND)) {
        SELF_LAUNCHER.store(true, std::sync::atomic::Ordering::Relaxed);
        return None;
    }
    Some(match parse_launcher_args(args) {
        Ok((request, probe)) => run_launcher(&request, probe),
        Err(error) => {
            eprintln!("toolward: {error}");
            std::process::ExitCode::from(LAUNCHER_USAGE_EXIT)
        }
    })
}

/// The probe: restricts this process as a launch withholding nothing would, and returns the
/// Landlock ABI obtained (0: not enforced).
///
/// # Errors
/// [`ConfineError::Landlock`].
pub fn probe_self() -> Result<u32, ConfineError> {
    // The namespaces first: a process restricted by Landlock may not mount.
    #[cfg(target_os = "linux")]
    match namespace::probe() {
        Ok(()) => println!("{NAMESPACES_OK}"),
        Err(why) => println!("{NAMESPACES_UNAVAILABLE}{why}"),
    }
    #[cfg(not(target_os = "linux"))]
    println!("{NAMESPACES_UNAVAILABLE}a Linux feature");
    let root = [Grant {
        path: PathBuf::from("/"),
        folder: true,
    }];
    restrict(&root, true)
}

#[cfg(unix)]
fn exec(program: &OsString, args: &[OsString]) -> ConfineError {
    use std::os::unix::process::CommandExt;
    // Nothing above stderr reaches the server: a descriptor toolward inherited without
    // close-on-exec (a shell's pipe) is closed at the `exec`.
    #[cfg(target_os = "linux")]
    {
        #[expect(unsafe_code, reason = "close_range takes integers; no safe wrapper")]
        // SAFETY: marks descriptors close-on-exec; nothing is closed before the `exec`.
        let _ = unsafe {
            libc::close_range(
                3,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC as libc::c_int,
            )
        };
    }
    // The environment, standard streams and working directory are the launcher's: toolward
    // set them for the server.
    let source = std::process::Command::new(program).args(args).exec();
    ConfineError::Exec {
        program: program.clone(),
        source,
    }
}

#[cfg(not(unix))]
fn exec(program: &OsString, _args: &[OsString]) -> ConfineError {
    ConfineError::Exec {
        program: program.clone(),
        source: std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "confinement is a Linux feature",
        ),
    }
}

/// Restricts this thread with Landlock: `grants`, and TCP denied when `deny_tcp`. Returns
/// the ABI obtained (0: nothing enforced).
#[cfg(all(target_os = "linux", feature = "confine"))]
fn restrict(grants: &[Grant], deny_tcp: bool) -> Result<u32, ConfineError> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, LandlockStatus, PathBeneath, Ruleset, RulesetAttr,
        RulesetCreatedAttr, RulesetStatus, Scope,
    };
    use std::os::unix::fs::OpenOptionsExt;

    let refused = |e: landlock::RulesetError| ConfineError::Landlock {
        reason: e.to_string(),
    };
    let abi = ABI::V6;
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(refused)?
        .scope(Scope::from_all(abi))
        .map_err(refused)?;
    if deny_tcp {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(refused)?;
    }
    let mut created = ruleset.create().map_err(refused)?;
    for grant in grants {
        // `O_PATH | O_NOFOLLOW`: the entry itself, not what a link put there since the
        // folder was read points to.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
            .open(&grant.path);
        let file = match file {
            Ok(file) => file,
            // Gone since the folder was read: nothing to grant.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(ConfineError::Open {
                    path: grant.path.clone(),
                    source,
                });
            }
        };
        let kind = file.metadata().map_err(|source| ConfineError::Open {
            path: grant.path.clone(),
            source,
        })?;
        let access = if kind.is_dir() {
            AccessFs::from_all(abi)
        } else if kind.is_symlink() {
            continue;
        } else {
            AccessFs::from_file(abi)
        };
        created = created
            .add_rule(PathBeneath::new(file, access))
            .map_err(refused)?;
    }
    let status = created.restrict_self().map_err(refused)?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Ok(0);
    }
    Ok(match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => {
            effective_abi.to_string().parse().unwrap_or(1)
        }
        LandlockStatus::NotEnabled | LandlockStatus::NotImplemented => 0,
    })
}

/// Where Landlock is not (another system, or a build without the `confine` feature): nothing
/// is enforced.
#[cfg(not(all(target_os = "linux", feature = "confine")))]
fn restrict(_grants: &[Grant], _deny_tcp: bool) -> Result<u32, ConfineError> {
    Ok(0)
}

#[cfg(target_os = "linux")]
#[path = "confine/namespace.rs"]
pub mod namespace;

#[cfg(test)]
#[path = "confine/tests.rs"]
mod tests;
