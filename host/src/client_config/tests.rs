use super::*;

/// The sample file of each client (`tests/data/client-configs/`): the client's documented
/// shape, with comments where the format has them, unknown keys, and a server toolward does
/// not manage beside `fs`, the one it does.
fn sample(spec: &ClientSpec) -> String {
    let name = match spec.id {
        "vscode" => "vscode.jsonc".to_owned(),
        "zed" => "zed.jsonc".to_owned(),
        "codex" => "codex.toml".to_owned(),
        id => format!("{id}.json"),
    };
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/client-configs")
        .join(name);
    std::fs::read_to_string(&path).unwrap()
}

struct Machine {
    _dir: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
    toolward: Toolward,
}

fn machine() -> Machine {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let servers = serde_json::json!({
        "fs": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/notes"],
            "env": { "API_TOKEN": "${API_TOKEN}" }
        }
    });
    let toolward = Toolward {
        program: PathBuf::from("/usr/local/bin/toolward"),
        config: dir.path().join("tw/toolward.json"),
        servers: servers.as_object().unwrap().clone(),
        state_dir: dir.path().join("tw/state"),
    };
    Machine {
        _dir: dir,
        home,
        project,
        toolward,
    }
}

fn place(m: &Machine, spec: &ClientSpec) -> (PathBuf, String) {
    let path = client_path(spec, &m.home, &m.project);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text = sample(spec);
    std::fs::write(&path, &text).unwrap();
    (path, text)
}

fn comments(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            (l.starts_with("//") || l.starts_with('#') || l.starts_with("/*")).then_some(l)
        })
        .collect()
}

#[test]
fn every_client_sample_lists_its_servers() {
    let m = machine();
    for spec in KNOWN_CLIENTS {
        place(&m, spec);
    }
    let found = discover(&m.home, &m.project).unwrap();
    assert_eq!(found.len(), KNOWN_CLIENTS.len());
    for client in &found {
        let names: Vec<&str> = client.servers.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(&"fs"), "{}: {names:?}", client.spec.id);
        assert!(names.len() >= 2, "{}: {names:?}", client.spec.id);
        let fs = client.servers.iter().find(|s| s.name == "fs").unwrap();
        assert!(m.toolward.manages("fs", &fs.entry), "{}", client.spec.id);
    }
}

#[test]
fn connect_replaces_only_managed_servers_and_keeps_comments_and_unknown_keys() {
    for spec in KNOWN_CLIENTS {
        let m = machine();
        let (path, before) = place(&m, spec);
        let outcome = connect(spec, &path, &m.toolward, Foreign::Refuse).unwrap();
        assert_eq!(
            outcome,
            Outcome::Changed(vec!["fs".to_owned()]),
            "{}",
            spec.id
        );
        let after = std::fs::read_to_string(&path).unwrap();
        // A comment inside the replaced table goes with it (and comes back at disconnect).
        for comment in comments(&before).into_iter().filter(|c| *c != "# my notes") {
            assert!(
                after.contains(comment),
                "{}: lost `{comment}`:\n{after}",
                spec.id
            );
        }
        let servers = edit::servers(spec, &path, &after).unwrap();
        let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
        assert!(!names.contains(&"fs"), "{}: {after}", spec.id);
        let before_servers = edit::servers(spec, &path, &before).unwrap();
        for other in before_servers.iter().filter(|s| s.name != "fs") {
            let kept = servers.iter().find(|s| s.name == other.name).unwrap();
            assert_eq!(kept.entry, other.entry, "{}", spec.id);
        }
        let ours = servers.iter().find(|s| s.name == TOOLWARD_ENTRY).unwrap();
        assert_eq!(ours.entry["command"], "/usr/local/bin/toolward");
        assert_eq!(ours.entry["args"][0], "serve");
        assert_eq!(ours.entry["env"]["API_TOKEN"], "s3cret", "{}", spec.id);
        assert_eq!(ours.entry.get("type").is_some(), spec.stdio_type);
        // Every unknown top-level key survives.
        for key in [
            "globalShortcut",
            "numStartups",
            "theme",
            "vim_mode",
            "approval_policy",
        ] {
            if before.contains(key) {
                assert!(after.contains(key), "{}: lost `{key}`", spec.id);
            }
        }
    }
}

#[test]
fn connect_twice_writes_nothing_the_second_time() {
    for spec in KNOWN_CLIENTS {
        let m = machine();
        let (path, _) = place(&m, spec);
        connect(spec, &path, &m.toolward, Foreign::Refuse).unwrap();
        let once = std::fs::read(&path).unwrap();
        assert_eq!(
            connect(spec, &path, &m.toolward, Foreign::Refuse).unwrap(),
            Outcome::Unchanged
        );
        assert_eq!(std::fs::read(&path).unwrap(), once, "{}", spec.id);
    }
}

#[test]
fn disconnect_restores_the_file_byte_for_byte_when_nothing_changed_it() {
    for spec in KNOWN_CLIENTS {
        let m = machine();
        let (path, before) = place(&m, spec);
        connect(spec, &path, &m.toolward, Foreign::Refuse).unwrap();
        assert_eq!(
            disconnect(spec, &m.toolward.state_dir, Foreign::Refuse).unwrap(),
            Outcome::Restored
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            before,
            "{}",
            spec.id
        );
        assert!(matches!(
            disconnect(spec, &m.toolward.state_dir, Foreign::Refuse),
            Err(ClientConfigError::NotConnected { .. })
        ));
    }
}

#[test]
fn disconnect_after_the_client_rewrote_its_file_undoes_only_toolwards_edit() {
    for spec in KNOWN_CLIENTS {
        let m = machine();
        let (path, before) = place(&m, spec);
        connect(spec, &path, &m.toolward, Foreign::Refuse).unwrap();
        // The client adds a server of its own meanwhile.
        let connected = std::fs::read_to_string(&path).unwrap();
        let changed = match spec.format {
            FileFormat::Toml => format!("{connected}\n[mcp_servers.added]\ncommand = \"added\"\n"),
            FileFormat::Json => {
                let (root, servers) = edit::json_servers(spec, &path, &connected).unwrap();
                servers.append(
                    "added",
                    CstInputValueForTest::object(&[("command", "added")]),
                );
                root.to_string()
            }
        };
        std::fs::write(&path, &changed).unwrap();
        let outcome = disconnect(spec, &m.toolward.state_dir, Foreign::Refuse).unwrap();
        assert_eq!(
            outcome,
            Outcome::Undone(vec!["fs".to_owned()]),
            "{}",
            spec.id
        );
        let after = std::fs::read_to_string(&path).unwrap();
        let servers = edit::servers(spec, &path, &after).unwrap();
        let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(&"added"), "{}: {after}", spec.id);
        assert!(!names.contains(&TOOLWARD_ENTRY), "{}: {after}", spec.id);
        let fs = servers.iter().find(|s| s.name == "fs").unwrap();
        let original = edit::servers(spec, &path, &before).unwrap();
        let original_fs = original.iter().find(|s| s.name == "fs").unwrap();
        assert_eq!(fs.entry, original_fs.entry, "{}", spec.id);
    }
}

#[test]
fn connect_refuses_a_foreign_toolward_entry_and_a_client_with_nothing_managed() {
    let m = machine();
    let spec = client_by_id("cursor").unwrap();
    let path = client_path(spec, &m.home, &m.project);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, r#"{"mcpServers": {"other": {"command": "x"}}}"#).unwrap();
    assert!(matches!(
        connect(spec, &path, &m.toolward, Foreign::Refuse),
        Err(ClientConfigError::NothingToConnect { .. })
    ));
    std::fs::write(
        &path,
        r#"{"mcpServers": {"toolward": {"command": "x", "args": []}, "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/notes"]}}}"#,
    )
    .unwrap();
    assert!(matches!(
        connect(spec, &path, &m.toolward, Foreign::Refuse),
        Err(ClientConfigError::EntryTaken { .. })
    ));
}

#[test]
fn variable_of_takes_only_a_whole_reference() {
    assert_eq!(variable_of("${API_TOKEN}"), Some("API_TOKEN"));
    assert_eq!(variable_of("x${API_TOKEN}"), None);
    assert_eq!(variable_of("${1A}"), None);
    assert_eq!(variable_of("${input:gh}"), None);
}

/// Builds inputs for the JSON edit in tests.
struct CstInputValueForTest;

impl CstInputValueForTest {
    fn object(members: &[(&str, &str)]) -> jsonc_parser::cst::CstInputValue {
        jsonc_parser::cst::CstInputValue::Object(
            members
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).into()))
                .collect(),
        )
    }
}

/// `inner` wrapped in `depth - 1` arrays inside the top-level object, with brackets in a
/// string and a comment that must not count.
fn nested_jsonc(depth: usize, inner: &str) -> String {
    format!(
        "{{ /* [[[[ */ \"note\": \"{{{{{{{{\", \"deep\": {}{inner}{} }}",
        "[".repeat(depth - 1),
        "]".repeat(depth - 1)
    )
}

#[test]
fn a_client_file_nested_past_the_limit_is_refused_by_every_reader_naming_the_file_and_limit() {
    let m = machine();
    let spec = client_by_id("claude-desktop").unwrap();
    let path = client_path(spec, &m.home, &m.project);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let deep = nested_jsonc(200_000, "1");
    std::fs::write(&path, &deep).unwrap();
    let too_deep = |error: ClientConfigError| {
        assert!(
            matches!(
                error,
                ClientConfigError::TooDeep {
                    depth: 200_000,
                    limit: MAX_CLIENT_FILE_DEPTH,
                    ..
                }
            ),
            "{error}"
        );
        let message = error.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("limit of 128 levels"), "{message}");
    };
    too_deep(discover(&m.home, &m.project).unwrap_err());
    too_deep(connect(spec, &path, &m.toolward, Foreign::Refuse).unwrap_err());
    too_deep(edit::connect(spec, &path, &deep, &[], &edit_entry()).unwrap_err());
    too_deep(edit::disconnect(spec, &path, "{}", &deep, &[]).unwrap_err());
    too_deep(edit::disconnect(spec, &path, &deep, "{}", &[]).unwrap_err());
}

#[test]
fn a_client_file_nested_to_the_limit_is_read_and_connected_on_a_small_stack() {
    let m = machine();
    let spec = client_by_id("claude-desktop").unwrap();
    let path = client_path(spec, &m.home, &m.project);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let fs = serde_json::json!({"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/notes"], "env": {"API_TOKEN": "t"}});
    // The top-level object, `mcpServers`, `fs`, `extra`, then arrays to the limit.
    let arrays = MAX_CLIENT_FILE_DEPTH - 3;
    let text = format!(
        "{{\"mcpServers\": {{\"fs\": {fs}, \"x\": {{\"command\": \"y\", \"extra\": {}1{}}}}}}}",
        "[".repeat(arrays),
        "]".repeat(arrays)
    );
    assert_eq!(nesting::json_depth(&text), MAX_CLIENT_FILE_DEPTH);
    std::fs::write(&path, &text).unwrap();
    let (home, project, toolward) = (m.home.clone(), m.project.clone(), m.toolward.clone());
    let outcome = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || {
            assert_eq!(discover(&home, &project).unwrap()[0].servers.len(), 2);
            connect(spec, &path, &toolward, Foreign::Refuse).unwrap()
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(outcome, Outcome::Changed(vec!["fs".to_owned()]));
}

#[test]
fn a_toml_client_file_nested_past_the_limit_is_refused() {
    let m = machine();
    let spec = client_by_id("codex").unwrap();
    let path = client_path(spec, &m.home, &m.project);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let key = vec!["k"; 70].join(".");
    let text = format!(
        "a = {}1{}",
        format!("{{ {key} = ").repeat(3),
        " }".repeat(3)
    );
    std::fs::write(&path, &text).unwrap();
    let error = discover(&m.home, &m.project).unwrap_err();
    assert!(
        matches!(error, ClientConfigError::TooDeep { .. }),
        "{error}"
    );
}

fn edit_entry() -> edit::ToolwardEntry {
    edit::ToolwardEntry {
        command: "toolward".to_owned(),
        args: Vec::new(),
        env: BTreeMap::new(),
    }
}

#[test]
fn connect_refuses_to_move_two_servers_values_under_one_variable() {
    let mut m = machine();
    m.toolward.servers = serde_json::json!({
        "github": {"url": "https://e/mcp", "headers": {"Authorization": "${GITHUB_AUTHORIZATION}"}},
        "docs": {"command": "d", "env": {"GITHUB_AUTHORIZATION": "${GITHUB_AUTHORIZATION}"}},
    })
    .as_object()
    .unwrap()
    .clone();
    let spec = client_by_id("claude-desktop").unwrap();
    let path = client_path(spec, &m.home, &m.project);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let client = serde_json::json!({"mcpServers": {
        "github": {"url": "https://e/mcp", "headers": {"Authorization": "Bearer gh"}},
        "docs": {"command": "d", "env": {"GITHUB_AUTHORIZATION": "docs-value"}},
    }});
    std::fs::write(&path, client.to_string()).unwrap();
    let error = connect(spec, &path, &m.toolward, Foreign::Refuse).unwrap_err();
    assert!(
        matches!(&error, ClientConfigError::SharedVariable { variable, .. } if variable == "GITHUB_AUTHORIZATION"),
        "{error}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), client.to_string());
    // The same value under one name is one secret: nothing crosses.
    let same = serde_json::json!({"mcpServers": {
        "github": {"url": "https://e/mcp", "headers": {"Authorization": "v"}},
        "docs": {"command": "d", "env": {"GITHUB_AUTHORIZATION": "v"}},
    }});
    std::fs::write(&path, same.to_string()).unwrap();
    assert!(matches!(
        connect(spec, &path, &m.toolward, Foreign::Refuse).unwrap(),
        Outcome::Changed(_)
    ));
}

#[test]
fn connect_refuses_a_client_file_in_a_folder_others_can_write_naming_it_and_writes_nothing() {
    use std::os::unix::fs::PermissionsExt as _;
    let m = machine();
    let spec = client_by_id("project").unwrap();
    let (path, text) = place(&m, spec);
    std::fs::set_permissions(&m.project, std::fs::Permissions::from_mode(0o777)).unwrap();
    let flag = "--accept-shared-file";
    let error = connect(spec, &path, &m.toolward, Foreign::RefuseUnless(flag))
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with(&format!(
            "the folder `{}` holding `{}` is mode 0777",
            m.project.display(),
            path.display()
        )) && error.ends_with(&format!("or pass `{flag}` to write it anyway")),
        "{error}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    assert!(!m.toolward.state_dir.join("clients/project.backup").exists());
    // Accepted, it is written, and undone the same way.
    assert!(matches!(
        connect(spec, &path, &m.toolward, Foreign::Accept).unwrap(),
        Outcome::Changed(_)
    ));
    assert_eq!(
        disconnect(spec, &m.toolward.state_dir, Foreign::Accept).unwrap(),
        Outcome::Restored
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}

#[test]
fn connect_and_disconnect_drop_set_id_bits_and_keep_the_rest_of_the_mode() {
    use std::os::unix::fs::PermissionsExt as _;
    let m = machine();
    let spec = client_by_id("claude-desktop").unwrap();
    let (path, _) = place(&m, spec);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o6750)).unwrap();
    connect(spec, &path, &m.toolward, Foreign::Refuse).unwrap();
    assert_eq!(mode(&path), 0o750);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o4700)).unwrap();
    disconnect(spec, &m.toolward.state_dir, Foreign::Refuse).unwrap();
    assert_eq!(mode(&path), 0o700);
}
