//! Which entries the launcher grants for a set of withheld paths (the file system part, with
//! no Landlock), how it is asked, and what the plan says. The kernel's refusals are tested
//! end to end in `tests/all/hostile/confine.rs`.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::*;

/// A tree: `root/a/{state/queue, sandbox/, file.txt, link -> state}`, `root/b/`.
fn tree() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(root.join("a/state")).unwrap();
    std::fs::write(root.join("a/state/queue"), "q").unwrap();
    std::fs::create_dir_all(root.join("a/sandbox")).unwrap();
    std::fs::write(root.join("a/file.txt"), "f").unwrap();
    std::fs::create_dir_all(root.join("b")).unwrap();
    std::os::unix::fs::symlink(root.join("a/state"), root.join("a/link")).unwrap();
    (dir, root)
}

/// The grants under `root`, as paths relative to it, each marked `/` when a folder.
fn under(grants: &[Grant], root: &Path) -> Vec<String> {
    let mut out: Vec<String> = grants
        .iter()
        .filter_map(|g| {
            let relative = g.path.strip_prefix(root).ok()?.display().to_string();
            Some(if g.folder {
                format!("{relative}/")
            } else {
                relative
            })
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_entry_beside_the_way_to_a_withheld_folder_is_granted_and_nothing_on_the_way() {
    let (_dir, root) = tree();
    let grants = grants(&[root.join("a/state")], &[]).unwrap();
    // `a` and `root` are on the way: not granted; `a/state` is withheld; `a/link` is a link.
    assert_eq!(under(&grants, &root), ["a/file.txt", "a/sandbox/", "b/"]);
    assert!(
        !grants
            .iter()
            .any(|g| g.path == root || g.path == root.join("a"))
    );
    // The way starts at `/`: its other entries are granted, `/` itself is not.
    assert!(!grants.iter().any(|g| g.path == Path::new("/")));
    assert!(
        grants
            .iter()
            .any(|g| g.path == Path::new("/usr") && g.folder)
    );
}

#[test]
fn a_withheld_path_reached_through_a_symbolic_link_is_withheld_where_it_is() {
    let (_dir, root) = tree();
    let grants = grants(&[root.join("a/link")], &[]).unwrap();
    assert_eq!(under(&grants, &root), ["a/file.txt", "a/sandbox/", "b/"]);
}

#[test]
fn a_withheld_file_leaves_its_neighbours_granted_as_files_and_folders() {
    let (_dir, root) = tree();
    let grants = grants(&[root.join("a/file.txt")], &[]).unwrap();
    assert_eq!(under(&grants, &root), ["a/sandbox/", "a/state/", "b/"]);
}

#[test]
fn a_withheld_path_that_does_not_exist_yet_is_withheld_where_it_would_be_created() {
    let (_dir, root) = tree();
    let grants = grants(&[root.join("a/later/x")], &[]).unwrap();
    assert_eq!(
        under(&grants, &root),
        ["a/file.txt", "a/sandbox/", "a/state/", "b/"]
    );
    assert!(!grants.iter().any(|g| g.path == root.join("a")));
}

#[test]
fn a_path_inside_a_withheld_folder_changes_nothing() {
    let (_dir, root) = tree();
    let alone = grants(&[root.join("a")], &[]).unwrap();
    let both = grants(&[root.join("a"), root.join("a/state/queue")], &[]).unwrap();
    assert_eq!(under(&alone, &root), ["b/"]);
    assert_eq!(under(&both, &root), ["b/"]);
}

#[test]
fn an_allowed_folder_beneath_a_withheld_one_is_granted_but_never_one_that_holds_it() {
    let (_dir, root) = tree();
    let grants = grants(
        &[root.join("a")],
        &[root.join("a/sandbox"), root.join("a/missing"), root.clone()],
    )
    .unwrap();
    assert_eq!(under(&grants, &root), ["a/sandbox/", "b/"]);
}

#[test]
fn with_nothing_withheld_everything_is_granted() {
    let grants = grants(&[], &[]).unwrap();
    assert_eq!(
        grants,
        [Grant {
            path: PathBuf::from("/"),
            folder: true
        }]
    );
}

#[test]
fn the_launcher_is_asked_with_each_path_then_the_program_after_a_separator() {
    let confinement = Confinement {
        launcher: PathBuf::from("/proc/self/exe"),
        launcher_shown: PathBuf::from("/bin/toolward"),
        deny: vec![PathBuf::from("/s"), PathBuf::from("/c.json")],
        allow: vec![PathBuf::from("/h/fs")],
        deny_tcp: true,
        abi: 7,
        namespaces: Err("off".to_owned()),
        deny_network: false,
        devices: vec![PathBuf::from("/dev/ttyUSB0")],
    };
    let args = confinement.launcher_args("node", &["--deny".to_owned(), "x".to_owned()]);
    let args: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
    assert_eq!(
        args,
        [
            "__confine",
            "--deny",
            "/s",
            "--deny",
            "/c.json",
            "--allow",
            "/h/fs",
            "--device",
            "/dev/ttyUSB0",
            "--deny-tcp",
            "--",
            "node",
            "--deny",
            "x"
        ]
    );
    assert!(confinement.tcp_denied());
    let old = Confinement {
        abi: 3,
        ..confinement
    };
    assert!(!old.tcp_denied());
    assert!(Plan::Confined(old).describe().contains("TCP NOT denied"));
}

fn confinement() -> Confinement {
    Confinement {
        launcher: PathBuf::from("/proc/self/exe"),
        launcher_shown: PathBuf::from("/bin/toolward"),
        deny: vec![PathBuf::from("/s"), PathBuf::from("/c.json")],
        allow: vec![PathBuf::from("/h/fs")],
        deny_tcp: true,
        abi: 6,
        namespaces: Ok(()),
        deny_network: true,
        devices: Vec::new(),
    }
}

#[test]
fn the_launcher_is_asked_for_namespaces_and_no_network_only_when_they_apply() {
    let args = |c: &Confinement| -> Vec<String> {
        c.launcher_args("node", &[])
            .iter()
            .map(|a| a.to_str().unwrap().to_owned())
            .collect()
    };
    let with = args(&confinement());
    assert!(with.contains(&"--namespaces".to_owned()));
    assert!(with.contains(&"--deny-network".to_owned()));
    let without = args(&Confinement {
        namespaces: Err("unavailable".to_owned()),
        ..confinement()
    });
    assert!(!without.contains(&"--namespaces".to_owned()));
    assert!(!without.contains(&"--deny-network".to_owned()));
}

#[test]
fn a_start_less_confined_than_the_first_is_named_and_an_equal_or_stronger_one_is_not() {
    let first = confinement();
    assert_eq!(weaker_start(Some(&first), Some(&first.clone())), None);
    assert_eq!(weaker_start(None, None), None);
    assert_eq!(weaker_start(None, Some(&first)), None);
    assert_eq!(
        weaker_start(Some(&first), None).as_deref(),
        Some("unconfined")
    );
    let cases = [
        Confinement {
            abi: 5,
            ..first.clone()
        },
        Confinement {
            namespaces: Err("unavailable".to_owned()),
            ..first.clone()
        },
        Confinement {
            deny_network: false,
            deny_tcp: false,
            ..first.clone()
        },
        Confinement {
            deny: vec![PathBuf::from("/s")],
            ..first.clone()
        },
    ];
    for weaker in &cases {
        assert!(
            weaker_start(Some(&first), Some(weaker)).is_some(),
            "{weaker:?} is weaker"
        );
    }
    let more = Confinement {
        deny: vec![
            PathBuf::from("/s"),
            PathBuf::from("/c.json"),
            PathBuf::from("/new"),
        ],
        ..first.clone()
    };
    assert_eq!(weaker_start(Some(&first), Some(&more)), None);
}

fn config(value: serde_json::Value, base: &Path) -> Config {
    Config::from_value(value, base).unwrap()
}

#[test]
fn the_state_folder_config_rules_manifest_and_audit_log_are_withheld_by_default() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    std::fs::write(dir.path().join("logs/audit.jsonl.lock"), "").unwrap();
    std::fs::write(dir.path().join("logs/other"), "").unwrap();
    let mut config = config(
        json!({
            "mcpServers": { "fs": { "command": "node" } },
            "rules": { "file": "rules.json" },
            "policy": { "settings": "settings.json" },
            "audit": { "file": "logs/audit.jsonl" },
        }),
        dir.path(),
    );
    config.file = Some(dir.path().join("toolward.json"));
    let deny = default_denied(&config);
    let base = dir.path();
    for path in [
        "state",
        "toolward.json",
        "rules.json",
        "settings.json",
        "manifest.json",
        "logs/audit.jsonl",
        "logs/audit.jsonl.lock",
        ".toolward-servers",
    ] {
        assert!(deny.contains(&base.join(path)), "`{path}` not in {deny:?}");
    }
    assert!(!deny.contains(&base.join("logs/other")));
}

#[test]
fn a_server_unconfined_by_the_config_says_why_and_an_http_server_has_no_plan() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        json!({
            "mcpServers": {
                "docker": { "command": "docker-mcp", "confine": { "unconfined": "it talks to the docker socket" } },
                "remote": { "url": "https://example.invalid/mcp" },
            },
            "rules": { "file": "rules.json" },
        }),
        dir.path(),
    );
    let plan = plan(&config, &config.servers["docker"]).unwrap();
    assert_eq!(
        plan,
        Plan::Unconfined {
            reason: "unconfined by the config: it talks to the docker socket".to_owned(),
            chosen: true
        }
    );
    assert_eq!(
        crate::confine::plan(&config, &config.servers["remote"]),
        None
    );
}

#[test]
fn a_launcher_that_cannot_be_opened_refuses_the_server_and_says_how_to_fix_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        json!({
            "mcpServers": { "fs": { "command": "node" } },
            "rules": { "file": "rules.json" },
            "confine": { "launcher": "/nonexistent/toolward" },
        }),
        dir.path(),
    );
    let plan = plan(&config, &config.servers["fs"]).unwrap();
    let Plan::Refused { reason } = plan else {
        panic!("not refused: {plan:?}");
    };
    assert!(reason.starts_with("not started, rather than started unconfined"), "{reason}");
    assert!(reason.contains("/nonexistent/toolward"), "{reason}");
    assert!(reason.contains(LAUNCHER_ENV), "{reason}");
}

#[test]
fn the_launcher_gets_a_servers_loader_variables_under_another_name_only() {
    let env: BTreeMap<OsString, OsString> = [
        ("LD_PRELOAD", "/tmp/x.so"),
        ("GLIBC_TUNABLES", "t"),
        ("PATH", "/bin"),
        ("API_KEY", "k"),
    ]
    .into_iter()
    .map(|(n, v)| (OsString::from(n), OsString::from(v)))
    .collect();
    let hidden = hide_loader_variables(&env);
    let names: Vec<&str> = hidden.keys().filter_map(|n| n.to_str()).collect();
    assert_eq!(
        names,
        [
            "API_KEY",
            "PATH",
            "TOOLWARD_SERVER_LOADER_GLIBC_TUNABLES",
            "TOOLWARD_SERVER_LOADER_LD_PRELOAD",
        ]
    );
    assert!(!is_loader_variable("LDAP_URI"));
}

#[test]
fn the_launcher_entry_reads_back_what_launcher_args_writes() {
    let confinement = Confinement {
        launcher: PathBuf::from("/proc/self/exe"),
        launcher_shown: PathBuf::from("/bin/embedder"),
        deny: vec![PathBuf::from("/s"), PathBuf::from("/c.json")],
        allow: vec![PathBuf::from("/h/fs")],
        deny_tcp: true,
        abi: 6,
        namespaces: Ok(()),
        deny_network: true,
        devices: vec![PathBuf::from("/dev/ttyUSB0")],
    };
    let args = confinement.launcher_args("node", &["--deny".to_owned(), "x".to_owned()]);
    assert_eq!(args[0], LAUNCHER_SUBCOMMAND);
    let (request, probe) = parse_launcher_args(args.into_iter().skip(1)).unwrap();
    assert!(!probe);
    assert_eq!(
        request,
        LaunchRequest {
            deny: confinement.deny.clone(),
            allow: confinement.allow.clone(),
            deny_tcp: true,
            namespaces: true,
            devices: confinement.devices.clone(),
            deny_network: true,
            command: ["node", "--deny", "x"].map(OsString::from).to_vec(),
        }
    );
    let (_, probe) = parse_launcher_args([OsString::from(PROBE_FLAG)]).unwrap();
    assert!(probe);
    assert!(parse_launcher_args([OsString::from("--deny")]).is_err());
    assert!(parse_launcher_args([OsString::from("--unknown")]).is_err());
}

#[test]
fn the_browsers_profiles_that_exist_are_withheld_and_no_others() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    std::fs::create_dir_all(home.join(".config/chromium/Default/Local Storage")).unwrap();
    std::fs::create_dir_all(home.join(".mozilla/firefox")).unwrap();
    std::fs::create_dir_all(home.join(".config/some-editor")).unwrap();
    let found = browser_profiles(home, None);
    assert_eq!(
        found,
        [home.join(".config/chromium"), home.join(".mozilla")],
        "{found:?}"
    );
    // `XDG_CONFIG_HOME` in place of `~/.config`.
    let xdg = home.join("xdg");
    std::fs::create_dir_all(xdg.join("google-chrome")).unwrap();
    assert_eq!(
        browser_profiles(home, Some(&xdg)),
        [xdg.join("google-chrome"), home.join(".mozilla")]
    );
}
