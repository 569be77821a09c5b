//! Confinement escapes (issue 27), each through the `toolward` binary as an operator runs it
//! (`pin`, then `serve` on stdio with an MCP client's messages): a confined server that
//! renames the launcher aside and puts a script in its place, then dies, comes back through
//! the binary toolward runs, still confined; it cannot `chmod` or watch what is withheld; it
//! sees only its own processes, not its siblings' command lines or environments; it gets no
//! descriptor toolward inherited. The metadata and sibling cases run as the operator and, where
//! the tests run as root, again as a second, non-root OS user (`nobody`). A config that turns
//! the namespaces off is reported as Landlock alone, per server, by `check`.
//!
//! Each test skips, saying why, where the kernel has no Landlock or no unprivileged user
//! namespaces, except in CI (`CI` set), where namespaces are required.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::*;
use crate::support::toolward_binary;

/// The uid of the second, non-root OS user.
const NOBODY: u32 = 65534;

/// The binary, when this kernel has Landlock and the namespaces; `None` (said why) when not.
fn binary() -> Option<PathBuf> {
    let bin = toolward_binary()?.to_path_buf();
    let probed = toolward::confine::landlock_abi(&bin).unwrap();
    if probed.abi == 0 {
        eprintln!("skipped: this kernel has no Landlock, so servers cannot be confined");
        return None;
    }
    if let Err(why) = &probed.namespaces {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs unprivileged user namespaces: {why}"
        );
        eprintln!("skipped: no namespaces here: {why}");
        return None;
    }
    Some(bin)
}

/// The probes the fake server answers, as tools of one scenario.
fn scenario() -> Value {
    let tools = TOOLS;
    let listed: Vec<String> = tools.iter().map(|t| tool(t)).collect();
    let listed: Vec<&str> = listed.iter().map(String::as_str).collect();
    let mut actions: serde_json::Map<String, Value> = tools
        .iter()
        .map(|t| ((*t).to_owned(), json!({ "probe": t })))
        .collect();
    actions.insert("crash".to_owned(), json!({ "exit": true }));
    json!({ "pages": [page(&listed)], "actions": actions })
}

const TOOLS: &[&str] = &[
    "read", "write", "chmod", "rename", "watch", "procs", "fds", "crash", "connect", "caps",
    "mount_ro", "tty", "environ",
];

/// `toolward serve` on stdio, initialized, as an MCP client drives it.
struct Serve {
    child: Child,
    stdin: ChildStdin,
    answers: mpsc::Receiver<Value>,
    next_id: u64,
}

impl Serve {
    fn start(mut command: Command) -> Serve {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (sender, answers) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let message: Value = serde_json::from_str(&line).unwrap();
                if message.get("id").is_some() && sender.send(message).is_err() {
                    return;
                }
            }
        });
        let mut serve = Serve {
            child,
            stdin,
            answers,
            next_id: 1,
        };
        serve.send(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "escapes-test", "version": "1"}}}),
        );
        assert_eq!(serve.answer()["id"], 0);
        serve.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        serve
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn answer(&self) -> Value {
        self.answers
            .recv_timeout(Duration::from_secs(60))
            .expect("toolward serve answered in time")
    }

    /// Calls `tool` with `arguments`: its text, and whether it is a tool error.
    fn call(&mut self, tool: &str, arguments: Value) -> (String, bool) {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}));
        let answer = self.answer();
        assert_eq!(answer["id"], id, "{answer}");
        let result = &answer["result"];
        let text = result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (text, result["isError"] == json!(true))
    }

    /// Calls a probe that must answer (not a tool error).
    fn probe(&mut self, tool: &str, arguments: Value) -> String {
        let (text, is_error) = self.call(tool, arguments);
        assert!(!is_error, "{tool}: {text}");
        text
    }

    fn close(self) {
        let Serve {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        child.wait().unwrap();
    }
}

/// The bench's config written, owned by `uid` when given (the files and folders of the
/// bench), then `toolward pin` run as that user.
fn prepared(bench: &Bench, bin: &Path, uid: Option<u32>) -> PathBuf {
    bench.config();
    let config = bench.path().join("toolward.json");
    if let Some(uid) = uid {
        chown_tree(bench.path(), uid);
    }
    let mut pin = command(bin, uid);
    pin.args(["pin", "--config"]).arg(&config);
    let output = pin.output().unwrap();
    assert!(
        output.status.success(),
        "pin: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    config
}

fn chown_tree(path: &Path, uid: u32) {
    let status = Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{uid}"))
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// The binary run as `uid` when given (std drops the supplementary groups when root sets a
/// uid).
fn command(bin: &Path, uid: Option<u32>) -> Command {
    let mut command = Command::new(bin);
    // The binary finds its launcher itself, as an operator's does.
    command.env_remove(toolward::confine::LAUNCHER_ENV);
    if let Some(uid) = uid {
        command.uid(uid).gid(uid);
        command.env("HOME", "/nonexistent");
    }
    command
}

fn serve(bin: &Path, config: &Path, uid: Option<u32>) -> Serve {
    let mut serve = command(bin, uid);
    serve.args(["serve", "--config"]).arg(config);
    Serve::start(serve)
}

/// The mode bits of `path`.
fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Whether a probe's answer is a refusal (the kernel's error), not `ok`.
fn refused(text: &str) -> bool {
    text.contains("(os error")
}

/// From inside, the state folder, its keys and queue, the config, the rules and the manifest
/// can be neither `chmod`ed nor watched, and another server's processes are out of sight.
fn metadata_watching_and_siblings_are_out_of_reach(uid: Option<u32>) {
    let Some(bin) = binary() else { return };
    let secret = "sibling-secret-0123456789";
    let bench = Bench::new("escapes-metadata")
        .server("probe", scenario(), TOOLS)
        .server("sibling", scenario(), TOOLS);
    let marker = bench.server_marker("sibling");
    let bench = bench.with_server_setting(
        "sibling",
        "env",
        json!({ "SIBLING_SECRET": secret, MARKER_VARIABLE: marker }),
    );
    let beside = bench.path().join("sandbox");
    std::fs::create_dir_all(&beside).unwrap();
    let config = prepared(&bench, &bin, uid);
    let mut serve = serve(&bin, &config, uid);
    let state = bench.path().join("state");
    let pending = state.join("approvals/pending");
    std::fs::create_dir_all(&pending).unwrap();
    if let Some(uid) = uid {
        chown_tree(&state, uid);
    }
    // The folders on the way to what is withheld keep their mode too: the config's folder
    // made writable to others for a moment would let another user swap the config.
    let folder_mode = mode(bench.path());
    let text = serve.probe("probe__chmod", json!({ "path": bench.path() }));
    assert!(refused(&text), "chmod of the config's folder: {text}");
    assert_eq!(mode(bench.path()), folder_mode);
    // What lies beside the withheld paths stays writable.
    assert_eq!(
        serve.probe("probe__write", json!({ "path": beside.join("new.txt") })),
        "ok"
    );
    let withheld: Vec<PathBuf> = [
        state.clone(),
        state.join("approval-key"),
        state.join("approvals"),
        config.clone(),
        bench.path().join("rules.json"),
        bench.path().join("manifest.json"),
    ]
    .into_iter()
    .filter(|path| path.exists())
    .collect();
    assert!(withheld.len() >= 5, "{withheld:?}");
    for path in &withheld {
        let before = mode(path);
        let text = serve.probe("probe__chmod", json!({ "path": path }));
        assert!(refused(&text), "chmod of `{}`: {text}", path.display());
        assert_eq!(mode(path), before, "`{}` changed mode", path.display());
    }
    // A watch on the queue sees nothing of a call held meanwhile.
    let writer = {
        let pending = pending.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            std::fs::write(pending.join("01JHELD.json"), "{}").unwrap();
        })
    };
    let (watched, _) = serve.call("probe__watch", json!({ "path": pending, "ms": 600 }));
    writer.join().unwrap();
    assert!(
        watched == "events: 0" || refused(&watched),
        "a watch on the queue: {watched}"
    );
    let (watched, _) = serve.call("probe__watch", json!({ "path": state, "ms": 300 }));
    assert!(
        watched == "events: 0" || refused(&watched),
        "a watch on the state folder: {watched}"
    );
    // The sibling's command line and environment are out of sight; so is toolward.
    let procs = serve.probe("probe__procs", json!({}));
    assert!(!procs.contains(secret), "{procs}");
    assert!(!procs.contains("sibling.json"), "{procs}");
    assert!(!procs.contains(" serve --config"), "{procs}");
    assert!(procs.contains("probe.json"), "it sees itself: {procs}");
    // No capability, even as root, even in its own namespace: nothing to take the covers
    // off or clone a mount without them with (`open_tree`), nor to trace init with.
    let caps = serve.probe("probe__caps", json!({}));
    assert_eq!(
        caps, "CapEff:\t0000000000000000 CapBnd:\t0000000000000000",
        "{caps}"
    );
    // What the kernel lets uid 0 write by its uid alone (`core_pattern` runs a program as
    // root outside every namespace) is read-only.
    for path in ["/proc/sys/kernel", "/sys/kernel"] {
        assert_eq!(
            serve.probe("probe__mount_ro", json!({ "path": path })),
            "ro",
            "{path}"
        );
    }
    if toolward::identity::euid() == 0 {
        machine_settings_cannot_be_opened_to_write(&mut serve);
    }
    serve.close();
    bench.assert_no_processes_left();
}

#[test]
fn as_the_operator_withheld_paths_cannot_be_chmodded_or_watched_and_siblings_are_hidden() {
    metadata_watching_and_siblings_are_out_of_reach(None);
}

#[test]
fn as_another_user_withheld_paths_cannot_be_chmodded_or_watched_and_siblings_are_hidden() {
    // As root, again as `nobody`; as anyone else the first test is this one.
    if toolward::identity::euid() != 0 {
        eprintln!("skipped: running as a second OS user needs root, to switch to uid {NOBODY}");
        return;
    }
    metadata_watching_and_siblings_are_out_of_reach(Some(NOBODY));
}

/// A server cannot rename the running toolward aside (its path is withheld: a client's next
/// `toolward` would be the server's program). When the binary is renamed aside and a script
/// that starts servers unconfined put in its place anyway (as an upgrade, or an attacker with
/// the operator's rights, would), a server that then dies is restarted through the binary
/// toolward runs: still confined, and recorded so.
#[test]
fn a_restart_after_the_launcher_is_renamed_and_replaced_runs_confined() {
    let Some(bin) = binary() else { return };
    let bench = Bench::new("escapes-restart")
        .server("probe", scenario(), TOOLS)
        .with(
            "limits",
            json!({ "call_timeout_ms": 5000, "restart_backoff_ms": 20 }),
        );
    // toolward as an operator installs it, in a folder no confinement withholds.
    let installed = bench.path().join("bin/toolward");
    std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
    std::fs::copy(&bin, &installed).unwrap();
    let config = prepared(&bench, &installed, None);
    let mut serve = serve(&installed, &config, None);
    let key = bench.path().join("state/approval-key");
    assert!(key.exists());
    assert!(refused(&serve.probe("probe__read", json!({ "path": key }))));
    let aside = bench.path().join("bin/toolward.aside");
    let renamed = serve.probe("probe__rename", json!({ "path": installed, "to": aside }));
    assert!(
        refused(&renamed),
        "the server renamed the running toolward: {renamed}"
    );
    assert!(installed.exists() && !aside.exists());
    std::fs::rename(&installed, &aside).unwrap();
    std::fs::write(
        &installed,
        "#!/bin/sh\nwhile [ \"$1\" != -- ]; do shift; done; shift; exec \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&installed, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (_, crashed) = serve.call("probe__crash", json!({}));
    assert!(crashed);
    // Back after the restart: the key is still out of reach.
    let mut answer = String::new();
    for _ in 0..200 {
        let (text, is_error) = serve.call("probe__read", json!({ "path": key }));
        if !is_error {
            answer = text;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(refused(&answer), "after the restart: {answer}");
    serve.close();
    let starts: Vec<Value> = crate::support::audit_records(&bench.path().join("state/audit.jsonl"))
        .into_iter()
        .filter(|r| r["kind"] == "server-start")
        .collect();
    assert_eq!(starts.len(), 2, "{starts:#?}");
    for (attempt, start) in starts.iter().enumerate() {
        assert_eq!(start["server"], "probe");
        assert_eq!(start["detail"]["attempt"], attempt);
        let confinement = &start["detail"]["confinement"];
        assert_eq!(confinement["namespaces"], true, "{start}");
        assert!(confinement["landlock_abi"].as_u64().unwrap() >= 1);
    }
    bench.assert_no_processes_left();
}

/// A descriptor toolward inherited without close-on-exec (a shell's pipe) is not the
/// server's.
#[test]
fn a_descriptor_toolward_inherited_does_not_reach_a_server() {
    let Some(bin) = binary() else { return };
    let bench = Bench::new("escapes-fds").server("probe", scenario(), TOOLS);
    let config = prepared(&bench, &bin, None);
    let inherited = std::fs::File::open(bench.path().join("rules.json")).unwrap();
    let mut command = command(&bin, None);
    command.args(["serve", "--config"]).arg(&config);
    {
        use std::os::fd::AsRawFd;
        let fd = inherited.as_raw_fd();
        // SAFETY: dup2 in the child before exec, onto a descriptor without close-on-exec.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(move || {
                if libc::dup2(fd, 251) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut serve = Serve::start(command);
    let fds = serve.probe("probe__fds", json!({}));
    let fds: Vec<&str> = fds.split(' ').collect();
    assert!(!fds.contains(&"251"), "{fds:?}");
    assert_eq!(&fds[..3], ["0", "1", "2"]);
    // Nor does the launcher's init hold it (nor can the server look).
    let (init, _) = serve.call("probe__fds", json!({ "pid": "1" }));
    assert!(
        refused(&init) || !init.split(' ').any(|fd| fd == "251"),
        "init: {init}"
    );
    serve.close();
    bench.assert_no_processes_left();
}

/// toolward run from a terminal (its controlling terminal): a server cannot open that
/// terminal, neither as `/dev/tty` nor by its path in `/dev/pts`, so it can neither push
/// keystrokes into the operator's shell (`TIOCSTI`) nor write to it or read from it. Found by an attack: the server approved its own held call by
/// typing `y` at the approval prompt, and ran commands in the shell after `pin` exited.
#[test]
fn a_server_has_no_controlling_terminal_even_when_toolward_has_one() {
    let Some(bin) = binary() else { return };
    let bench = Bench::new("escapes-tty").server("probe", scenario(), TOOLS);
    let config = prepared(&bench, &bin, None);
    let mut command = command(&bin, None);
    command.args(["serve", "--config"]).arg(&config);
    let mut master: libc::c_int = -1;
    let mut slave: libc::c_int = -1;
    // SAFETY: openpty writes two descriptors we own; the name, termios and size are unused.
    #[allow(unsafe_code)]
    let opened = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: in the child before exec: a session of its own, then the pty's slave as its
    // controlling terminal, as a shell gives the commands it runs.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(move || {
            if libc::setsid() < 0 || libc::ioctl(slave, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut serve = Serve::start(command);
    let tty = serve.probe("probe__tty", json!({}));
    assert!(
        refused(&tty),
        "the server opened toolward's terminal: {tty}"
    );
    // Nor by its path in `/dev/pts`, which is the operator's (found by a second attack: a
    // server drew a false approval prompt there and read the operator's answer).
    // SAFETY: ttyname returns a pointer to a static buffer, read at once.
    #[allow(unsafe_code)]
    let path = unsafe { std::ffi::CStr::from_ptr(libc::ttyname(slave)) }
        .to_string_lossy()
        .into_owned();
    assert!(path.starts_with("/dev/pts/"), "{path}");
    let by_path = serve.probe("probe__tty", json!({ "path": path }));
    assert!(refused(&by_path), "the server opened `{path}`: {by_path}");
    serve.close();
    bench.assert_no_processes_left();
    // SAFETY: both descriptors are ours and closed once.
    #[allow(unsafe_code)]
    unsafe {
        libc::close(slave);
        libc::close(master);
    }
}

/// A device node of the machine's beyond the standard ones that this process can open itself
/// (a virtual console, the kernel's log, a control node), to show a server cannot.
fn machine_device() -> Option<&'static str> {
    use std::os::unix::fs::OpenOptionsExt;
    [
        "/dev/tty1",
        "/dev/kmsg",
        "/dev/loop-control",
        "/dev/fuse",
        "/dev/net/tun",
        "/dev/console",
    ]
    .into_iter()
    .find(|path| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(path)
            .is_ok()
    })
}

/// A server opens the standard devices and those its `confine.devices` names, and no other
/// device of the machine's, with the namespaces (a private `/dev`) and without (Landlock):
/// the machine's `/dev` holds the operator's consoles and, for a root operator, raw disks
/// uid 0 reads without any capability, beneath every withheld path.
#[test]
fn a_server_opens_only_the_standard_devices_and_those_its_config_names() {
    let Some(bin) = binary() else { return };
    let Some(device) = machine_device() else {
        eprintln!("skipped: this process can open no device beyond the standard ones");
        return;
    };
    for namespaces in [true, false] {
        let bench = Bench::new("escapes-devices")
            .server("probe", scenario(), TOOLS)
            .server("hardware", scenario(), TOOLS)
            .with_server_setting("hardware", "confine", json!({ "devices": [device] }))
            .with("confine", json!({ "namespaces": namespaces }));
        let config = prepared(&bench, &bin, None);
        let mut serve = serve(&bin, &config, None);
        for standard in [
            "/dev/null",
            "/dev/zero",
            "/dev/full",
            "/dev/random",
            "/dev/urandom",
        ] {
            let opened = serve.probe("probe__tty", json!({ "path": standard }));
            assert_eq!(
                opened, "ok",
                "namespaces {namespaces}: `{standard}`: {opened}"
            );
        }
        let denied = serve.probe("probe__tty", json!({ "path": device }));
        assert!(
            refused(&denied),
            "namespaces {namespaces}: the server opened `{device}`: {denied}"
        );
        let granted = serve.probe("hardware__tty", json!({ "path": device }));
        assert_eq!(
            granted, "ok",
            "namespaces {namespaces}: `{device}` named in `confine.devices`: {granted}"
        );
        serve.close();
        bench.assert_no_processes_left();
    }
}

/// A server's loader variables (`LD_PRELOAD` in an imported client config) reach the server
/// by their names, confined, and not the launcher before it confines (found by an attack:
/// `LD_PRELOAD` ran code in the launcher, which wrote into the state folder).
#[test]
fn a_servers_loader_variables_reach_it_confined_and_not_the_launcher() {
    let Some(bin) = binary() else { return };
    let preload_marker = "/nonexistent/toolward-test-preload.so";
    let bench = Bench::new("escapes-loader")
        .server("probe", scenario(), TOOLS)
        .with_server_setting(
            "probe",
            "env",
            json!({ "LD_PRELOAD": preload_marker, "GLIBC_TUNABLES": "glibc.malloc.check=0" }),
        );
    let config = prepared(&bench, &bin, None);
    let mut serve = serve(&bin, &config, None);
    let environ = serve.probe("probe__environ", json!({}));
    assert!(
        environ.contains(&format!("LD_PRELOAD={preload_marker}"))
            && environ.contains("GLIBC_TUNABLES=glibc.malloc.check=0")
            && !environ.contains("TOOLWARD_SERVER_LOADER_"),
        "{environ}"
    );
    serve.close();
    bench.assert_no_processes_left();
}

/// With `confine.namespaces` off (as where they are unavailable), Landlock stands alone and
/// `check` says so, per server, with what is then not defended; reads stay refused.
#[test]
fn without_namespaces_check_says_landlock_alone_and_reads_stay_refused() {
    let Some(bin) = binary() else { return };
    // toolward installed in a folder nothing withholds, named as the launcher.
    let bench = Bench::new("escapes-fallback").server("probe", scenario(), TOOLS);
    let launcher = bench.path().join("bin/toolward");
    std::fs::create_dir_all(launcher.parent().unwrap()).unwrap();
    std::fs::copy(&bin, &launcher).unwrap();
    let bench = bench
        .with(
            "confine",
            json!({ "namespaces": false, "launcher": launcher }),
        )
        .with(
            "limits",
            json!({ "call_timeout_ms": 5000, "restart_backoff_ms": 20 }),
        );
    let config = prepared(&bench, &bin, None);
    let output = Command::new(&bin)
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.contains("alone, without namespaces (turned off by `confine.namespaces`)"),
        "{stdout}"
    );
    assert!(stdout.contains("metadata"), "{stdout}");
    let mut serve = serve(&bin, &config, None);
    let key = bench.path().join("state/approval-key");
    assert!(refused(&serve.probe("probe__read", json!({ "path": key }))));
    // Landlock alone does not cover metadata: the sibling's processes are in sight.
    let procs = serve.probe("probe__procs", json!({}));
    assert!(procs.contains(" serve --config"), "{procs}");
    // A root operator's server gives up its capabilities here too (with them, an attack
    // typed into the operator's terminal with `TIOCSTI`).
    if toolward::identity::euid() == 0 {
        assert_eq!(
            serve.probe("probe__caps", json!({})),
            "CapEff:\t0000000000000000 CapBnd:\t0000000000000000"
        );
        // Nor can it write what the kernel lets uid 0 write by its uid alone (found by an
        // attack: it wrote `core_pattern`, and the kernel ran its program as root with every
        // capability, outside). The probe opens for writing and writes nothing.
        machine_settings_cannot_be_opened_to_write(&mut serve);
    }
    // A launcher toolward holds by its descriptor is nothing a server can write a program
    // of its own into for the next restart (found by an attack: with it written over in
    // place, the restart ran the attacker's launcher, unconfined).
    let opened = serve.probe("probe__tty", json!({ "path": launcher }));
    assert!(
        refused(&opened),
        "the server opened the launcher to write: {opened}"
    );
    // Landlock does not govern metadata: a server may `chmod` the launcher and another
    // account then write it (found by an attack). Any such change moves its `ctime`, as this
    // `chmod` keeping the mode does: the restart after the crash is refused, not run.
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (_, crashed) = serve.call("probe__crash", json!({}));
    assert!(crashed);
    let mut after = (String::new(), false);
    for _ in 0..100 {
        after = serve.call("probe__read", json!({ "path": key }));
        if after.0.contains("changed since toolward first ran it") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        after.1 && after.0.contains("changed since toolward first ran it"),
        "a call after the refused restart: {}",
        after.0
    );
    serve.close();
    let records = std::fs::read_to_string(bench.path().join("state/audit.jsonl")).unwrap();
    assert!(
        records.contains("changed since toolward first ran it"),
        "no record says why the restart was refused: {}",
        records.lines().rev().take(4).collect::<Vec<_>>().join("\n")
    );
    let starts = records.matches("\"server-start\"").count();
    assert_eq!(
        starts, 1,
        "the server started again after its launcher changed"
    );
    bench.assert_no_processes_left();
}

/// For a root operator's server: what the kernel lets uid 0 write by its uid alone cannot be
/// opened for writing (the probe opens and writes nothing). Found by attacks: `core_pattern`
/// ran a program as root outside; a cgroup v1 `freezer.state` froze toolward and a process
/// outside; `/proc/irq/default_smp_affinity` changed the machine's interrupts.
fn machine_settings_cannot_be_opened_to_write(serve: &mut Serve) {
    let mut paths: Vec<PathBuf> = [
        "/proc/sys/kernel/core_pattern",
        "/sys/kernel/uevent_helper",
        "/proc/irq/default_smp_affinity",
        "/sys/fs/cgroup/cgroup.procs",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    // A cgroup v1 hierarchy's files are in folders of their own beneath /sys/fs/cgroup.
    if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
        for entry in entries.filter_map(Result::ok) {
            paths.push(entry.path().join("cgroup.procs"));
        }
    }
    for path in paths.iter().filter(|path| path.exists()) {
        let opened = serve.probe("probe__tty", json!({ "path": path }));
        assert!(
            refused(&opened),
            "the server opened `{}` to write: {opened}",
            path.display()
        );
    }
}

/// A server denied the network reaches no address, not even loopback; its sibling does.
#[test]
fn a_server_denied_the_network_reaches_no_address_not_even_loopback() {
    let Some(bin) = binary() else { return };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let bench = Bench::new("escapes-network")
        .server("closed", scenario(), TOOLS)
        .server("open", scenario(), TOOLS)
        .with_server_setting("closed", "confine", json!({ "deny_network": true }));
    let config = prepared(&bench, &bin, None);
    let mut serve = serve(&bin, &config, None);
    let connect = json!({ "address": address });
    let closed = serve.probe("closed__connect", connect.clone());
    assert!(refused(&closed), "{closed}");
    assert_eq!(serve.probe("open__connect", connect), "ok");
    serve.close();
    let starts = crate::support::audit_records(&bench.path().join("state/audit.jsonl"));
    let closed = starts
        .iter()
        .find(|r| r["kind"] == "server-start" && r["server"] == "closed")
        .unwrap();
    assert_eq!(closed["detail"]["confinement"]["network_denied"], true);
    bench.assert_no_processes_left();
}

/// The audit log of the default layout (`audit.jsonl` beside the config) exists, and so is
/// covered, before the first server starts: on the first run too, a server cannot `chmod` it.
#[test]
fn on_the_first_run_the_default_audit_log_is_covered_before_any_server_starts() {
    let Some(bin) = binary() else { return };
    let bench = Bench::new("escapes-first-log")
        .server("probe", scenario(), TOOLS)
        .with("audit", json!({}));
    let config = prepared(&bench, &bin, None);
    let log = bench.path().join("audit.jsonl");
    assert!(!log.exists(), "the bench starts with no log");
    let mut serve = serve(&bin, &config, None);
    let before = mode(&log);
    let text = serve.probe("probe__chmod", json!({ "path": log }));
    assert!(refused(&text), "chmod of the new log: {text}");
    assert_eq!(mode(&log), before);
    serve.close();
    bench.assert_no_processes_left();
}

/// A config folder others can write (a server that ran without namespaces could have made it
/// so, and another user then swap the config) is refused, naming the folder and the fix.
#[test]
fn a_config_folder_others_can_write_is_refused_naming_the_fix() {
    let Some(bin) = toolward_binary() else { return };
    let bench = Bench::new("escapes-folder").server("probe", scenario(), TOOLS);
    let config = prepared(&bench, bin, None);
    std::fs::set_permissions(bench.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let output = Command::new(bin)
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("run `chmod go-w {}`", bench.path().display())),
        "{stderr}"
    );
    std::fs::set_permissions(bench.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
}
