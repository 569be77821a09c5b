//! `client connect` and `disconnect` raced by another local user (issue 28): the client's file
//! is a shared project's `.mcp.json`, in a folder a second OS user (`nobody`, when the tests
//! run as root) can write. The binary stops between its read and its write (the `test-pause`
//! feature's pause point, in the debug binary the tests build and never in a release build),
//! the other user swaps the file for a link to a victim script, and the command goes on: it
//! must refuse naming the file and leave the victim as it was. Without
//! `--accept-shared-file` such a file is refused before it is read.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::json;

use crate::support::toolward_binary;

/// The uid of the second, non-root OS user.
const NOBODY: u32 = 65534;

const VICTIM: &str = "#!/bin/sh\necho victim\n";

/// A toolward config managing server `notes`, and a project whose `.mcp.json` starts it, in
/// a folder the other user owns.
struct Shared {
    _dir: tempfile::TempDir,
    home: PathBuf,
    config: PathBuf,
    project: PathBuf,
    client_file: PathBuf,
    victim: PathBuf,
}

fn shared() -> Shared {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.path().join("home");
    let tw = dir.path().join("tw");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&tw).unwrap();
    let server = json!({"command": "notes-server", "args": ["--dir", "/srv/notes"]});
    std::fs::write(
        tw.join("toolward.json"),
        json!({
            "mcpServers": {"notes": server},
            "rules": {"file": "rules.json"},
            "manifest": "manifest.json",
            "state_dir": "state",
        })
        .to_string(),
    )
    .unwrap();
    std::fs::write(tw.join("rules.json"), "{\"servers\": {}}").unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let client_file = project.join(".mcp.json");
    std::fs::write(
        &client_file,
        json!({"mcpServers": {"notes": server}}).to_string(),
    )
    .unwrap();
    std::fs::set_permissions(&client_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    if as_root() {
        std::os::unix::fs::chown(&project, Some(NOBODY), Some(NOBODY)).unwrap();
    } else {
        std::fs::set_permissions(&project, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let victim = dir.path().join("victim.sh");
    std::fs::write(&victim, VICTIM).unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o4755)).unwrap();
    Shared {
        _dir: dir,
        home,
        config: tw.join("toolward.json"),
        project,
        client_file,
        victim,
    }
}

fn as_root() -> bool {
    toolward::identity::euid() == 0
}

impl Shared {
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(toolward_binary().unwrap());
        command
            .arg("client")
            .args(args)
            .arg("project")
            .arg("--config")
            .arg(&self.config)
            .env("HOME", &self.home)
            .env_remove("TOOLWARD_TEST_PAUSE")
            .current_dir(&self.project);
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).stdin(Stdio::null()).output().unwrap()
    }

    /// Runs `args` stopped at the pause point between read and write; there, the other user
    /// swaps the client's file for a link to the victim. `None` when the binary has no pause
    /// point (built without `test-pause`).
    fn raced(&self, args: &[&str]) -> Option<Output> {
        let mut child = self
            .command(args)
            .env("TOOLWARD_TEST_PAUSE", "client-file-read")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut before = String::new();
        let mut paused = false;
        let mut line = String::new();
        while stderr.read_line(&mut line).unwrap() > 0 {
            if line.starts_with("toolward-test-pause: client-file-read") {
                paused = true;
                break;
            }
            before.push_str(&line);
            line.clear();
        }
        if !paused {
            let output = child.wait_with_output().unwrap();
            assert!(
                std::env::var_os("CI").is_none(),
                "the binary did not stop at its pause point: build it with the tests (`cargo build --workspace --bins --tests`), which turns on `test-pause`\nstatus {:?}\nstderr:\n{before}",
                output.status
            );
            eprintln!("skipped: the binary has no pause point (built without `test-pause`)");
            return None;
        }
        self.swap_for_link();
        child.stdin.take().unwrap().write_all(b"\n").unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
        let mut output = child.wait_with_output().unwrap();
        output.stderr = format!("{before}{rest}").into_bytes();
        Some(output)
    }

    /// As the other user: the client's file moved aside and a link to the victim put in its
    /// place.
    fn swap_for_link(&self) {
        let mut swap = Command::new("sh");
        swap.arg("-c")
            .arg(format!(
                "mv .mcp.json .mcp.json.aside && ln -s '{}' .mcp.json",
                self.victim.display()
            ))
            .current_dir(&self.project);
        if as_root() {
            swap.uid(NOBODY).gid(NOBODY);
        }
        assert!(swap.status().unwrap().success());
    }

    fn assert_victim_untouched(&self) {
        assert_eq!(std::fs::read_to_string(&self.victim).unwrap(), VICTIM);
        let meta = std::fs::metadata(&self.victim).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o4755);
        assert_eq!(meta.uid(), toolward::identity::euid());
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn changed_message(path: &Path) -> String {
    format!(
        "`{}` changed since toolward read it (another file or a link is in its place): nothing was written",
        path.display()
    )
}

#[test]
fn connect_refuses_a_shared_projects_file_naming_its_folder_and_the_flag_and_writes_nothing() {
    let Some(_) = toolward_binary() else { return };
    let s = shared();
    let before = std::fs::read(&s.client_file).unwrap();
    let out = s.run(&["connect"]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    let why = if as_root() {
        "owned by uid 65534".to_owned()
    } else {
        "mode 0777".to_owned()
    };
    assert!(
        text.contains(&format!(
            "the folder `{}` holding `{}` is {why}",
            s.project.display(),
            s.client_file.display()
        )) && text.contains("or pass `--accept-shared-file` to write it anyway"),
        "{text}"
    );
    assert_eq!(std::fs::read(&s.client_file).unwrap(), before);
}

#[test]
fn connect_raced_by_another_user_swapping_the_file_for_a_link_writes_nothing_through_it() {
    let Some(_) = toolward_binary() else { return };
    let s = shared();
    let Some(out) = s.raced(&["connect", "--accept-shared-file"]) else {
        return;
    };
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains(&changed_message(&s.client_file)), "{text}");
    s.assert_victim_untouched();
    assert!(
        std::fs::symlink_metadata(&s.client_file)
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn disconnect_raced_by_another_user_swapping_the_file_for_a_link_writes_nothing_through_it() {
    let Some(_) = toolward_binary() else { return };
    let s = shared();
    let out = s.run(&["connect", "--accept-shared-file"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let Some(out) = s.raced(&["disconnect", "--accept-shared-file"]) else {
        return;
    };
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains(&changed_message(&s.client_file)), "{text}");
    s.assert_victim_untouched();
}

/// With `--accept-shared-file`, the shared file is that file: another user's link put at
/// its name is not followed (found by an attack: it sent `connect` to the operator's private
/// `~/.claude.json`, whose secrets `disconnect` then wrote into the shared folder).
#[test]
fn connect_with_the_flag_follows_no_link_another_user_put_at_the_shared_file() {
    let Some(_) = toolward_binary() else { return };
    let s = shared();
    let private = s.home.join(".claude.json");
    let private_text = json!({"mcpServers": {"notes": {
        "command": "notes-server",
        "args": ["--dir", "/srv/notes"],
        "env": {"PRIVATE": "operator-only"},
    }}})
    .to_string();
    std::fs::write(&private, &private_text).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut swap = Command::new("sh");
    swap.arg("-c")
        .arg(format!(
            "mv .mcp.json .mcp.json.aside && ln -s '{}' .mcp.json",
            private.display()
        ))
        .current_dir(&s.project);
    if as_root() {
        swap.uid(NOBODY).gid(NOBODY);
    }
    assert!(swap.status().unwrap().success());
    let out = s.run(&["connect", "--accept-shared-file"]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains(&format!("`{}`", s.client_file.display())),
        "{text}"
    );
    assert!(
        !text.contains("--accept-shared-file"),
        "the flag cannot accept a link: {text}"
    );
    assert_eq!(std::fs::read_to_string(&private).unwrap(), private_text);
}

/// A config keeps one backup per client: a second project's file is refused while the
/// first is connected (found by an attack: `disconnect` wrote the first project's file,
/// secrets and all, over the second's).
#[test]
fn connect_of_a_second_projects_file_is_refused_while_the_first_is_connected() {
    let Some(_) = toolward_binary() else { return };
    let s = shared();
    let first = s.run(&["connect", "--accept-shared-file"]);
    assert!(first.status.success(), "{}", stderr(&first));
    let second = s.project.parent().unwrap().join("second");
    std::fs::create_dir(&second).unwrap();
    let second_file = second.join(".mcp.json");
    let second_text = json!({"mcpServers": {
        "notes": {"command": "notes-server", "args": ["--dir", "/srv/notes"]},
        "other": {"command": "other-server", "env": {"OTHER": "second-only"}},
    }})
    .to_string();
    std::fs::write(&second_file, &second_text).unwrap();
    let out = s
        .command(&["connect"])
        .current_dir(&second)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains(&format!(
            "`project` is already connected at `{}` by this config, not `{}`",
            s.client_file.display(),
            second_file.display()
        )),
        "{text}"
    );
    assert_eq!(std::fs::read_to_string(&second_file).unwrap(), second_text);
}
