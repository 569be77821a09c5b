//! What toolward trusts on disk, through the `toolward` binary: the operator's files are read
//! bounded (an endless or blocking source is refused before it is read), the config and rules
//! files must be the operator's or root's, the manifest and the state folder the operator's
//! own, and a compiled component planted in the cache is
//! compiled again, not run.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{FAKE_SERVER, other_user, toolward_binary};

/// A refusal of an endless or blocking file must come well within this.
const REFUSAL_WITHIN: Duration = Duration::from_secs(20);

/// A folder with a fake server `s` listing `echo`, rules classifying it, and a config; the
/// manifest is pinned through the binary. Returns the folder and the config file.
fn setup(bin: &Path) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.json"),
        json!({"pages": [r#"{"tools": [{"name": "echo", "description": "Echoes.", "inputSchema": {"type": "object"}}]}"#]})
            .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("rules.json"),
        r#"{"servers": {"s": {"tools": {"echo": {"effect": "read-only"}}}}}"#,
    )
    .unwrap();
    let config = dir.path().join("toolward.json");
    write_config(&config, "rules.json");
    let pinned = run(bin, "pin", &config);
    assert!(
        pinned.status.success(),
        "{}",
        String::from_utf8_lossy(&pinned.stderr)
    );
    (dir, config)
}

fn write_config(config: &Path, rules: &str) {
    std::fs::write(
        config,
        json!({
            "mcpServers": {"s": {"command": FAKE_SERVER, "args": ["s.json"]}},
            "rules": {"file": rules},
            "manifest": "manifest.json",
            "state_dir": "state",
            "audit": {"file": "audit.jsonl", "sync": "none"},
        })
        .to_string(),
    )
    .unwrap();
}

fn run(bin: &Path, command: &str, config: &Path) -> Output {
    Command::new(bin)
        .arg(command)
        .arg("--config")
        .arg(config)
        .output()
        .unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_rules_file_naming_dev_zero_or_a_fifo_is_refused_before_it_is_read() {
    let Some(bin) = toolward_binary() else { return };
    let (dir, config) = setup(bin);

    write_config(&config, "/dev/zero");
    let started = Instant::now();
    let check = run(bin, "check", &config);
    assert!(started.elapsed() < REFUSAL_WITHIN);
    assert_eq!(check.status.code(), Some(2), "{}", stderr(&check));
    assert!(
        stderr(&check).contains("the rules file `/dev/zero` is a character device, not a regular file: toolward reads only regular files of at most 67108864 bytes here"),
        "{}",
        stderr(&check)
    );

    // A FIFO nobody writes: opening it for reading would wait for a writer forever.
    let fifo = dir.path().join("rules.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    write_config(&config, "rules.fifo");
    let started = Instant::now();
    let check = run(bin, "check", &config);
    assert!(started.elapsed() < REFUSAL_WITHIN);
    assert_eq!(check.status.code(), Some(2), "{}", stderr(&check));
    assert!(
        stderr(&check).contains("is a FIFO, not a regular file"),
        "{}",
        stderr(&check)
    );
}

#[test]
fn a_manifest_others_can_write_or_another_user_owns_is_refused_with_the_fix() {
    let Some(bin) = toolward_binary() else { return };
    let (dir, config) = setup(bin);
    let manifest = dir.path().join("manifest.json");
    assert_eq!(
        std::fs::metadata(&manifest).unwrap().permissions().mode() & 0o777,
        0o644,
        "pin writes the manifest 0644"
    );
    let check = run(bin, "check", &config);
    assert!(check.status.success(), "{}", stderr(&check));

    std::fs::set_permissions(&manifest, std::fs::Permissions::from_mode(0o664)).unwrap();
    let check = run(bin, "check", &config);
    assert_eq!(check.status.code(), Some(2));
    assert!(
        stderr(&check).contains(&format!(
            "has mode 0664: group or others can change which tools the model sees; review it, then run `chmod go-w {}`",
            manifest.display()
        )),
        "{}",
        stderr(&check)
    );
    std::fs::set_permissions(&manifest, std::fs::Permissions::from_mode(0o644)).unwrap();

    let Some(other) = other_user() else { return };
    std::os::unix::fs::chown(&manifest, Some(other), None).unwrap();
    let check = run(bin, "check", &config);
    assert_eq!(check.status.code(), Some(2));
    assert!(
        stderr(&check).contains(&format!("is owned by uid {other}, not by uid 0"))
            && stderr(&check).contains(&format!("run `chown 0 {}`", manifest.display())),
        "{}",
        stderr(&check)
    );
}

#[test]
fn a_config_or_rules_file_others_can_write_or_another_user_owns_is_refused_with_the_fix() {
    let Some(bin) = toolward_binary() else { return };
    let (dir, config) = setup(bin);
    let rules = dir.path().join("rules.json");
    for file in [&config, &rules] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o664)).unwrap();
        let check = run(bin, "check", &config);
        assert_eq!(check.status.code(), Some(2), "{}", stderr(&check));
        assert!(
            stderr(&check).contains(&format!(
                "`{}` has mode 0664: group or others can change what toolward lets through; review it, then run `chmod go-w {}`",
                file.display(),
                file.display()
            )),
            "{}",
            stderr(&check)
        );
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let check = run(bin, "check", &config);
    assert!(check.status.success(), "{}", stderr(&check));

    let Some(other) = other_user() else { return };
    for (file, what) in [(&config, "config file"), (&rules, "rules file")] {
        std::os::unix::fs::chown(file, Some(other), None).unwrap();
        let check = run(bin, "check", &config);
        assert_eq!(check.status.code(), Some(2), "{}", stderr(&check));
        assert!(
            stderr(&check).contains(&format!(
                "the {what} `{}` is owned by uid {other}, not by uid 0 that toolward runs as nor by root",
                file.display()
            )) && stderr(&check).contains(&format!("run `chown 0 {}`", file.display())),
            "{}",
            stderr(&check)
        );
        std::os::unix::fs::chown(file, Some(0), None).unwrap();
    }
}

#[test]
fn a_state_folder_others_can_reach_or_another_user_owns_is_refused_with_the_fix() {
    let Some(bin) = toolward_binary() else { return };
    let (dir, config) = setup(bin);
    let state = dir.path().join("state");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let check = run(bin, "check", &config);
    assert_eq!(check.status.code(), Some(2));
    assert!(
        stderr(&check).contains(&format!("run `chmod 0700 {}`", state.display())),
        "{}",
        stderr(&check)
    );
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();

    let Some(other) = other_user() else { return };
    let cache = state.join(toolward::component::CACHE_FOLDER);
    std::os::unix::fs::chown(&cache, Some(other), None).unwrap();
    let check = run(bin, "check", &config);
    assert_eq!(check.status.code(), Some(2));
    assert!(
        stderr(&check).contains(&format!("`{}` is owned by uid {other}", cache.display())),
        "{}",
        stderr(&check)
    );
}

#[test]
fn a_cache_entry_whose_mac_fails_is_compiled_again_and_the_log_says_so() {
    let Some(bin) = toolward_binary() else { return };
    let (dir, config) = setup(bin);
    let cache = dir
        .path()
        .join("state")
        .join(toolward::component::CACHE_FOLDER);
    let entries: Vec<PathBuf> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    assert!(!entries.is_empty());
    // Swap two entries: each is a real compiled component, with a MAC that was valid for
    // the other's name.
    let (a, b) = (&entries[0], &entries[entries.len() - 1]);
    let (bytes_a, bytes_b) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    std::fs::write(a, &bytes_b).unwrap();
    std::fs::write(b, &bytes_a).unwrap();
    let check = run(bin, "check", &config);
    assert!(check.status.success(), "{}", stderr(&check));
    assert!(
        stderr(&check).contains(&format!("compiled-component cache entry `{}`", a.display()))
            && stderr(&check).contains(
                "is not used: its MAC does not verify under the state folder's key; compiling it again"
            ),
        "{}",
        stderr(&check)
    );
}

#[test]
fn audit_show_and_tail_report_a_log_cut_after_a_record_by_its_head() {
    let Some(bin) = toolward_binary() else { return };
    let (dir, config) = setup(bin);
    for _ in 0..2 {
        let called = Command::new(bin)
            .args(["call", "--config"])
            .arg(&config)
            .args(["s__echo", "--args", "{}"])
            .output()
            .unwrap();
        assert!(called.status.success(), "{}", stderr(&called));
    }
    let audit = |command: &[&str]| {
        Command::new(bin)
            .arg("audit")
            .args(command)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap()
    };
    for command in [&["show"][..], &["tail", "-n", "1"]] {
        let intact = audit(command);
        assert!(intact.status.success(), "{command:?}: {}", stderr(&intact));
    }
    // The last call's records cut off: what is left is still a valid chain.
    let log = dir.path().join("audit.jsonl");
    let lines = crate::support::audit_lines(&log);
    let kept = lines[..lines.len() - 2].join("\n") + "\n";
    std::fs::write(&log, kept).unwrap();
    for command in [&["show"][..], &["tail", "-n", "1"]] {
        let cut = audit(command);
        assert_eq!(cut.status.code(), Some(1), "{command:?}: {}", stderr(&cut));
        assert!(
            stderr(&cut).contains("does not match its head"),
            "{command:?}: {}",
            stderr(&cut)
        );
    }
}
