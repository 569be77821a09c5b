use std::time::Duration;

use super::reader::{
    AUDIT_KEYS, CONFINE_KEYS, GUEST_KEYS, INTROSPECTION_KEYS, LIMIT_KEYS, LISTEN_KEYS,
    LISTEN_OAUTH_KEYS, SERVER_CONFINE_KEYS, SERVER_KEYS, STORE_KEYS, TOP_KEYS,
    UNSUPPORTED_SERVER_KEYS,
};
use super::*;
use crate::audit::AuditSync;

use serde_json::json;

fn base() -> PathBuf {
    PathBuf::from("/etc/toolward")
}

fn no_env(_: &str) -> Result<String, VarError> {
    Err(VarError::NotPresent)
}

#[test]
fn a_server_confine_adds_to_the_top_level_deny_and_its_deny_tcp_wins() {
    let home = |name: &str| match name {
        "HOME" => Ok("/home/op".to_owned()),
        _ => Err(VarError::NotPresent),
    };
    let value = json!({
        "mcpServers": {
            "fs": { "command": "node", "confine": { "deny": ["secrets"], "deny_tcp": false, "devices": ["/dev/ttyUSB0", "/dev/serial/by-id/board"] } },
            "memory": { "command": "node" },
        },
        "rules": { "file": "rules.json" },
        "confine": { "deny": ["~/.ssh", "/srv/keys"], "deny_tcp": true },
    });
    let config = Config::from_value_with_env(value, &base(), &home).unwrap();
    assert_eq!(
        config.servers["fs"].confine,
        ServerConfine::Confined {
            deny: vec![
                PathBuf::from("/home/op/.ssh"),
                PathBuf::from("/srv/keys"),
                PathBuf::from("/etc/toolward/secrets")
            ],
            deny_tcp: false,
            deny_network: false,
            devices: vec![
                PathBuf::from("/dev/ttyUSB0"),
                PathBuf::from("/dev/serial/by-id/board")
            ],
        }
    );
    assert_eq!(
        config.servers["memory"].confine,
        ServerConfine::Confined {
            deny: vec![PathBuf::from("/home/op/.ssh"), PathBuf::from("/srv/keys")],
            deny_tcp: true,
            deny_network: false,
            devices: Vec::new(),
        }
    );
    assert_eq!(
        config.servers_dir,
        Some(PathBuf::from("/etc/toolward/.toolward-servers"))
    );
}

#[test]
fn a_device_is_a_plain_absolute_path_beneath_dev() {
    for device in [
        "ttyUSB0",
        "/dev",
        "/dev/../etc/shadow",
        "/dev/./sda",
        "/home/op/dev",
        "/devices/x",
    ] {
        let text = err_text(with_servers(
            json!({ "x": { "command": "x", "confine": { "devices": [device] } } }),
        ));
        assert!(
            text.starts_with(
                "mcpServers.x.confine.devices[0]: a device is an absolute path beneath `/dev`"
            ),
            "{device}: {text}"
        );
    }
    let text = err_text(with_servers(
        json!({ "x": { "command": "x", "confine": { "unconfined": "docker", "devices": ["/dev/kvm"] } } }),
    ));
    assert!(
        text.starts_with("mcpServers.x.confine.devices: an unconfined server"),
        "{text}"
    );
}

#[test]
fn an_unconfined_server_needs_a_reason_and_is_denied_nothing() {
    let text = err_text(with_servers(
        json!({ "x": { "command": "x", "confine": { "unconfined": " " } } }),
    ));
    assert!(
        text.starts_with("mcpServers.x.confine.unconfined: give the reason"),
        "{text}"
    );
    let text = err_text(with_servers(
        json!({ "x": { "command": "x", "confine": { "unconfined": "docker", "deny": [] } } }),
    ));
    assert!(
        text.starts_with("mcpServers.x.confine.deny: an unconfined server"),
        "{text}"
    );
    let config = load(with_servers(
        json!({ "x": { "command": "x", "confine": { "unconfined": "it drives docker" } } }),
    ))
    .unwrap();
    assert_eq!(
        config.servers["x"].confine,
        ServerConfine::Unconfined {
            reason: "it drives docker".to_owned()
        }
    );
    let text = err_text(with_servers(
        json!({ "x": { "url": "https://example.invalid", "confine": { "deny_tcp": true } } }),
    ));
    assert!(
        text.starts_with("mcpServers.x.confine: only a server with"),
        "{text}"
    );
}

#[test]
fn servers_homes_inside_the_state_folder_and_a_tilde_without_home_are_refused() {
    let mut value = with_servers(json!({ "x": { "command": "x" } }));
    value["servers_dir"] = json!("state/../state/homes");
    let text = err_text(value);
    assert!(text.starts_with("servers_dir: `"), "{text}");
    assert!(text.contains("is inside the state folder"), "{text}");
    let mut value = with_servers(json!({ "x": { "command": "x" } }));
    value["confine"] = json!({ "deny": ["~/.aws"] });
    let text = err_text(value);
    assert!(text.contains("`HOME` is not set"), "{text}");
}

/// A minimal valid config with `servers` as its `mcpServers`.
fn with_servers(servers: Value) -> Value {
    json!({ "mcpServers": servers, "rules": { "file": "rules.json" } })
}

fn load(value: Value) -> Result<Config, ConfigError> {
    Config::from_value_with_env(value, &base(), &no_env)
}

fn err_text(value: Value) -> String {
    load(value).unwrap_err().to_string()
}

#[test]
fn pasted_claude_desktop_block_loads_unchanged() {
    let text = r#"{
      "mcpServers": {
        "filesystem": {
          "command": "npx",
          "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop", "/Users/me/Downloads"]
        },
        "github": {
          "command": "docker",
          "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
          "env": { "GITHUB_PERSONAL_ACCESS_TOKEN": "<YOUR_TOKEN>" }
        }
      },
      "rules": { "file": "rules.json" }
    }"#;
    let config = Config::from_str(text, &base()).unwrap();
    assert_eq!(config.servers.len(), 2);
    let fs = &config.servers["filesystem"];
    assert_eq!(
        fs.transport,
        ServerTransport::Stdio {
            command: PathBuf::from("npx"),
            args: vec![
                "-y".into(),
                "@modelcontextprotocol/server-filesystem".into(),
                "/Users/me/Desktop".into(),
                "/Users/me/Downloads".into()
            ],
            env: BTreeMap::new(),
        }
    );
    let ServerTransport::Stdio { env, .. } = &config.servers["github"].transport else {
        panic!("github is stdio");
    };
    assert_eq!(env["GITHUB_PERSONAL_ACCESS_TOKEN"], "<YOUR_TOKEN>");
    assert!(config.ignored_keys.is_empty() && config.disabled_servers.is_empty());
}

#[test]
fn pasted_claude_code_block_with_type_fields_loads() {
    let config = load(with_servers(json!({
        "local": { "type": "stdio", "command": "uvx", "args": ["mcp-server-git"], "env": {} },
        "remote": { "type": "http", "url": "https://mcp.example.com/mcp", "headers": { "X-Team": "a" } },
        "cursor": { "transport": "streamable-http", "url": "http://127.0.0.1:8080/mcp" }
    })))
    .unwrap();
    assert!(matches!(
        config.servers["local"].transport,
        ServerTransport::Stdio { .. }
    ));
    assert_eq!(
        config.servers["remote"].transport,
        ServerTransport::Http {
            url: "https://mcp.example.com/mcp".into(),
            headers: BTreeMap::from([("X-Team".to_owned(), "a".to_owned())]),
            oauth: crate::config::OAuthConfig::default(),
        }
    );
    assert!(matches!(
        config.servers["cursor"].transport,
        ServerTransport::Http { .. }
    ));
}

#[test]
fn env_var_reference_takes_value_from_toolward_environment() {
    let value = with_servers(json!({
        "gh": { "command": "gh-mcp", "env": { "PATH_COPY": "${PATH}" } },
        "api": { "url": "https://api.example.com/mcp", "headers": { "Authorization": "Bearer ${API_TOKEN}" } }
    }));
    let env = |name: &str| match name {
        "API_TOKEN" => Ok("s3cret".to_owned()),
        other => std::env::var(other),
    };
    let config = Config::from_value_with_env(value.clone(), &base(), &env).unwrap();
    let ServerTransport::Stdio { env: vars, .. } = &config.servers["gh"].transport else {
        panic!("gh is stdio");
    };
    assert_eq!(vars["PATH_COPY"], std::env::var("PATH").unwrap());
    let ServerTransport::Http { headers, .. } = &config.servers["api"].transport else {
        panic!("api is http");
    };
    assert_eq!(headers["Authorization"], "Bearer s3cret");
    // Expanded values, often credentials, stay out of debug output.
    assert!(!format!("{config:?}").contains("s3cret"));

    // The public entry point reads the real environment.
    let real = with_servers(json!({ "gh": { "command": "gh-mcp", "env": { "P": "${PATH}" } } }));
    let config = Config::from_value(real, &base()).unwrap();
    let ServerTransport::Stdio { env: vars, .. } = &config.servers["gh"].transport else {
        panic!("gh is stdio");
    };
    assert_eq!(vars["P"], std::env::var("PATH").unwrap());
}

#[test]
fn store_postgres_url_is_expanded_from_the_environment_and_kept_out_of_debug_output() {
    let mut value = with_servers(json!({ "gh": { "command": "gh-mcp" } }));
    value["store"] = json!({ "postgres": "${DATABASE_URL}" });
    let env = |name: &str| match name {
        "DATABASE_URL" => Ok("postgres://tw:s3cret@db.internal/toolward".to_owned()),
        _ => Err(VarError::NotPresent),
    };
    let config = Config::from_value_with_env(value.clone(), &base(), &env).unwrap();
    assert_eq!(
        config.store,
        StoreConfig::Postgres {
            url: "postgres://tw:s3cret@db.internal/toolward".to_owned(),
            oauth_key: None,
        }
    );
    assert!(!format!("{config:?}").contains("s3cret"));
    // Without the variable: an error naming it.
    let err = Config::from_value_with_env(value.clone(), &base(), &no_env).unwrap_err();
    assert!(
        matches!(&err, ConfigError::MissingEnvVar { variable, .. } if variable == "DATABASE_URL"),
        "{err}"
    );
    // A store that names nothing, or a key it does not know.
    value["store"] = json!({ "postgress": "x" });
    let err = Config::from_value_with_env(value, &base(), &env).unwrap_err();
    assert!(
        err.to_string().starts_with("store.postgress: unknown key"),
        "{err}"
    );
    // Absent: the state folder.
    let config = load(with_servers(json!({ "gh": { "command": "gh-mcp" } }))).unwrap();
    assert_eq!(config.store, StoreConfig::StateDir);
}

#[test]
fn missing_env_var_names_server_key_and_variable() {
    let err = load(with_servers(json!({
        "github": { "command": "gh", "env": { "GITHUB_TOKEN": "${TOOLWARD_TEST_UNSET_VARIABLE}" } }
    })))
    .unwrap_err();
    let ConfigError::MissingEnvVar {
        path,
        server,
        key,
        variable,
    } = &err
    else {
        panic!("expected MissingEnvVar, got {err}");
    };
    assert_eq!(path, "mcpServers.github.env.GITHUB_TOKEN");
    assert_eq!((server.as_str(), key.as_str()), ("github", "GITHUB_TOKEN"));
    assert_eq!(variable, "TOOLWARD_TEST_UNSET_VARIABLE");
    assert_eq!(
        err.to_string(),
        "mcpServers.github.env.GITHUB_TOKEN: environment variable `TOOLWARD_TEST_UNSET_VARIABLE` is not set (server `github`, key `GITHUB_TOKEN`)"
    );
}

#[test]
fn dollar_dollar_brace_is_a_literal_and_other_dollars_stay() {
    let config = load(with_servers(json!({
        "s": { "command": "s", "env": { "A": "$${HOME}", "B": "pa$$word$", "C": "$HOME" } }
    })))
    .unwrap();
    let ServerTransport::Stdio { env, .. } = &config.servers["s"].transport else {
        panic!("stdio");
    };
    assert_eq!(env["A"], "${HOME}");
    assert_eq!(env["B"], "pa$$word$");
    assert_eq!(env["C"], "$HOME");
}

#[test]
fn default_value_syntax_and_unclosed_references_are_refused() {
    let text = err_text(with_servers(
        json!({ "s": { "command": "s", "env": { "A": "${X:-y}" } } }),
    ));
    assert!(
        text.starts_with("mcpServers.s.env.A: `${X:-y}` is not a variable reference"),
        "{text}"
    );
    let text = err_text(with_servers(
        json!({ "s": { "command": "s", "env": { "A": "${X" } } }),
    ));
    assert!(
        text.starts_with("mcpServers.s.env.A: `${X` has no closing"),
        "{text}"
    );
}

#[test]
fn args_are_not_expanded() {
    let config = load(with_servers(
        json!({ "s": { "command": "s", "args": ["${HOME}"] } }),
    ))
    .unwrap();
    let ServerTransport::Stdio { args, .. } = &config.servers["s"].transport else {
        panic!("stdio");
    };
    assert_eq!(args, &["${HOME}".to_owned()]);
}

#[test]
fn relative_paths_resolve_against_config_folder() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("conf");
    std::fs::create_dir(&sub).unwrap();
    let file = sub.join("toolward.json");
    std::fs::write(
        &file,
        r#"{
          "mcpServers": {
            "local": { "command": "./bin/server", "args": ["./data"] },
            "npm": { "command": "npx" },
            "abs": { "command": "/usr/bin/env" }
          },
          "rules": { "file": "rules.json", "component": "wasm/rules.wasm" },
          "policy": { "component": "../policy.wasm", "settings": "settings.json" },
          "audit": { "file": "logs/audit.jsonl" }
        }"#,
    )
    .unwrap();
    let config = Config::from_path(&file).unwrap();
    assert_eq!(config.base_dir, sub);
    assert_eq!(config.rules.text, TextSource::File(sub.join("rules.json")));
    assert_eq!(
        config.rules.component,
        Some(ComponentSource::File(sub.join("wasm/rules.wasm")))
    );
    assert_eq!(
        config.policy.component,
        Some(ComponentSource::File(sub.join("../policy.wasm")))
    );
    assert_eq!(
        config.policy.settings,
        Some(TextSource::File(sub.join("settings.json")))
    );
    assert_eq!(config.audit.file, sub.join("logs/audit.jsonl"));
    assert_eq!(config.manifest, sub.join(DEFAULT_MANIFEST));
    assert_eq!(config.state_dir, sub.join(DEFAULT_STATE_DIR));
    let command = |name: &str| match &config.servers[name].transport {
        ServerTransport::Stdio { command, args, .. } => (command.clone(), args.clone()),
        ServerTransport::Http { .. } | ServerTransport::Handed(_) => panic!("stdio"),
    };
    assert_eq!(
        command("local"),
        (sub.join("./bin/server"), vec!["./data".to_owned()])
    );
    assert_eq!(command("npm").0, PathBuf::from("npx"));
    assert_eq!(command("abs").0, PathBuf::from("/usr/bin/env"));
}

#[test]
fn config_file_in_the_current_folder_resolves_against_an_absolute_folder() {
    // `toolward.json` has an empty parent; paths must not end up relative to nothing.
    let err = Config::from_path(Path::new("toolward-test-no-such-file.json")).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
    let value = with_servers(json!({ "s": { "command": "s" } }));
    let config = Config::from_value_with_env(value, Path::new("/srv/tw"), &no_env).unwrap();
    assert!(config.rules.text.file().unwrap().is_absolute());
}

#[test]
fn defaults_apply_when_keys_are_absent() {
    let config = load(with_servers(json!({ "s": { "command": "s" } }))).unwrap();
    assert_eq!(config.limits, Limits::default());
    assert_eq!(config.limits.max_page_bytes, 16 * 1024 * 1024);
    assert_eq!(config.limits.call_timeout(), Duration::from_secs(300));
    assert_eq!(config.servers["s"].limits, Limits::default());
    assert_eq!(config.audit.sync, AuditSync::Always);
    assert!(!config.audit.record_arguments);
    assert_eq!(config.audit.file, base().join("audit.jsonl"));
    assert_eq!(config.separator, "__");
    assert_eq!(config.tool_name_pattern, DEFAULT_TOOL_NAME_PATTERN);
    assert_eq!(config.principal, "operator");
    assert_eq!(config.policy, PolicyConfig::default());
    assert_eq!(config.exposed_name("s", "read"), "s__read");
}

#[test]
fn all_top_level_keys_are_read() {
    let config = load(json!({
        "$schema": "https://example.invalid/config.schema.json",
        "mcpServers": { "fs": { "command": "fs" } },
        "rules": { "file": "r.json" },
        "policy": {},
        "manifest": "/var/lib/tw/manifest.json",
        "audit": { "file": "a.jsonl", "sync": "none", "record_arguments": true },
        "state_dir": "st",
        "principal": "alice",
        "separator": "-x-",
        "tool_name_pattern": "^[a-z_-]{1,40}$",
        "limits": { "max_tools": 10 }
    }))
    .unwrap();
    assert_eq!(config.manifest, PathBuf::from("/var/lib/tw/manifest.json"));
    assert_eq!(config.audit.sync, AuditSync::None);
    assert!(config.audit.record_arguments);
    assert_eq!(config.principal, "alice");
    assert_eq!(config.exposed_name("fs", "read"), "fs-x-read");
    assert_eq!(config.limits.max_tools, 10);
    assert_eq!(config.servers["fs"].limits.max_tools, 10);
}

#[test]
fn server_limits_override_top_level_limits_per_key() {
    let mut value = with_servers(json!({
        "slow": { "command": "slow", "limits": { "call_timeout_ms": 900000, "max_result_bytes": 2048 } },
        "plain": { "command": "plain" }
    }));
    value["limits"] = json!({ "max_result_bytes": 4096, "start_timeout_ms": 5000 });
    let config = load(value).unwrap();
    let slow = config.servers["slow"].limits;
    assert_eq!(
        (
            slow.call_timeout_ms,
            slow.max_result_bytes,
            slow.start_timeout_ms
        ),
        (900_000, 2048, 5000)
    );
    let plain = config.servers["plain"].limits;
    assert_eq!(
        (plain.call_timeout_ms, plain.max_result_bytes),
        (DEFAULT_CALL_TIMEOUT_MS, 4096)
    );
}

#[test]
fn zero_negative_fractional_and_huge_limits_are_refused() {
    let bad = |limits: Value| {
        let mut value = with_servers(json!({ "s": { "command": "s" } }));
        value["limits"] = limits;
        err_text(value)
    };
    assert_eq!(
        bad(json!({ "max_tools": 0 })),
        "limits.max_tools: `0` is not a positive integer (a count)"
    );
    assert_eq!(
        bad(json!({ "max_page_bytes": 1.5 })),
        "limits.max_page_bytes: `1.5` is not a positive integer (bytes)"
    );
    assert_eq!(
        bad(json!({ "call_timeout_ms": "60s" })),
        "limits.call_timeout_ms: expected a positive integer (milliseconds), found a string"
    );
    assert!(
        bad(json!({ "call_timeout_ms": 86_400_001 }))
            .contains("more than the limit of 86400000 milliseconds")
    );
}

#[test]
fn separator_inside_server_name_is_refused() {
    let text = err_text(with_servers(json!({ "my__fs": { "command": "fs" } })));
    assert_eq!(
        text,
        "mcpServers.my__fs: server name `my__fs` contains the separator `__`, so its tool names would be ambiguous"
    );
    let mut value = with_servers(json!({ "a-b": { "command": "fs" } }));
    value["separator"] = json!("-");
    assert!(err_text(value).contains("contains the separator `-`"));
}

#[test]
fn server_name_with_other_characters_is_refused() {
    let text = err_text(with_servers(json!({ "my.fs": { "command": "fs" } })));
    assert!(
        text.starts_with(r#"mcpServers["my.fs"]: server name `my.fs` may only contain"#),
        "{text}"
    );
    let text = err_text(with_servers(json!({ "": { "command": "fs" } })));
    assert!(text.contains("must not be empty"), "{text}");
}

#[test]
fn an_audit_checkpoint_names_its_key_and_bounds_its_interval() {
    let mut value = with_servers(json!({ "s": { "command": "s" } }));
    value["audit"] = json!({ "checkpoint": { "key": "keys/checkpoint.key" } });
    let checkpoint = load(value.clone()).unwrap().audit.checkpoint.unwrap();
    assert_eq!(checkpoint.key, base().join("keys/checkpoint.key"));
    assert_eq!(checkpoint.interval_ms, DEFAULT_CHECKPOINT_INTERVAL_MS);
    assert_eq!(checkpoint.origin, None);
    assert!(
        crate::confine::default_denied(&load(value).unwrap())
            .contains(&base().join("keys/checkpoint.key")),
        "the signer key is withheld from servers"
    );

    let mut value = with_servers(json!({ "s": { "command": "s" } }));
    value["audit"] = json!({ "checkpoint": { "interval_ms": 5000 } });
    assert!(err_text(value).starts_with("audit.checkpoint.key: missing"));
    let mut value = with_servers(json!({ "s": { "command": "s" } }));
    value["audit"] = json!({ "checkpoint": { "key": "k", "interval_ms": 10 } });
    assert!(err_text(value).starts_with("audit.checkpoint.interval_ms: 10 ms is outside 1000"));
    let mut value = with_servers(json!({ "s": { "command": "s" } }));
    value["audit"] = json!({ "checkpoint": { "key": "k", "origin": "two words" } });
    assert!(err_text(value).contains("no spaces"));
}

#[test]
fn unknown_key_names_its_path() {
    let mut value = with_servers(json!({ "s": { "command": "s" } }));
    value["audit"] = json!({ "synk": "none" });
    let text = err_text(value);
    assert!(
        text.starts_with(
            "audit.synk: unknown key (expected one of `file`, `sync`, `record_arguments`, `record_results`, `checkpoint`)"
        ),
        "{text}"
    );

    let mut value = with_servers(json!({ "s": { "command": "s" } }));
    value["polcy"] = json!({});
    assert!(err_text(value).starts_with("polcy: unknown key"));

    let text = err_text(with_servers(
        json!({ "s": { "command": "s", "limits": { "call_timeout": 5 } } }),
    ));
    assert!(
        text.starts_with("mcpServers.s.limits.call_timeout: unknown key"),
        "{text}"
    );

    let text = err_text(with_servers(
        json!({ "s": { "command": "s", "pass_evn": ["A"] } }),
    ));
    assert!(
        text.starts_with("mcpServers.s.pass_evn: unknown key"),
        "{text}"
    );
}

#[test]
fn client_keys_in_a_server_entry_are_ignored_and_listed() {
    let config = load(with_servers(json!({
        "s": { "command": "s", "autoApprove": ["write_file"], "description": "files", "timeout": 60 }
    })))
    .unwrap();
    assert_eq!(
        config.ignored_keys,
        vec![
            "mcpServers.s.autoApprove",
            "mcpServers.s.description",
            "mcpServers.s.timeout"
        ]
    );
}

#[test]
fn cwd_and_env_file_are_refused_not_ignored() {
    for key in ["cwd", "envFile"] {
        let text = err_text(with_servers(json!({ "s": { "command": "s", key: "x" } })));
        assert!(
            text.starts_with(&format!("mcpServers.s.{key}: not supported")),
            "{text}"
        );
    }
}

#[test]
fn disabled_server_is_left_out() {
    let config = load(with_servers(json!({
        "on": { "command": "on" },
        "off": { "command": "off", "disabled": true },
        "zed": { "command": "zed", "enabled": false }
    })))
    .unwrap();
    assert_eq!(config.servers.keys().collect::<Vec<_>>(), vec!["on"]);
    assert_eq!(config.disabled_servers, vec!["off", "zed"]);
}

#[test]
fn listen_bounds_are_read_and_default_to_their_constants() {
    let mut value = with_servers(json!({ "fs": { "command": "npx" } }));
    let listen = load(value.clone()).unwrap().listen;
    assert_eq!(
        listen.header_read_timeout_ms,
        DEFAULT_HEADER_READ_TIMEOUT_MS
    );
    assert_eq!(listen.max_connections, DEFAULT_MAX_CONNECTIONS);
    assert_eq!(
        listen.max_sessions_per_principal,
        DEFAULT_MAX_SESSIONS_PER_PRINCIPAL
    );
    assert_eq!(
        listen.session_idle_timeout_ms,
        DEFAULT_SESSION_IDLE_TIMEOUT_MS
    );
    value["listen"] = json!({
        "header_read_timeout_ms": 2500,
        "max_connections": 32,
        "max_sessions_per_principal": 4,
        "session_idle_timeout_ms": 60000,
    });
    let listen = load(value.clone()).unwrap().listen;
    assert_eq!(listen.header_read_timeout_ms, 2500);
    assert_eq!(listen.max_connections, 32);
    assert_eq!(listen.max_sessions_per_principal, 4);
    assert_eq!(listen.session_idle_timeout_ms, 60000);
    value["listen"] = json!({ "max_connections": 0 });
    assert_eq!(
        err_text(value.clone()),
        "listen.max_connections: expected a positive integer (a count), found a number"
    );
    value["listen"] = json!({ "header_read_timeout_ms": MAX_TIMEOUT_MS + 1 });
    assert!(
        err_text(value).contains("more than the limit of 86400000 milliseconds"),
        "a timeout past a day is refused"
    );
}

#[test]
fn guest_limits_are_read_and_default_to_the_component_constants() {
    let mut value = with_servers(json!({ "fs": { "command": "npx" } }));
    assert_eq!(load(value.clone()).unwrap().guest, GuestLimits::default());
    value["guest"] = json!({
        "configure_fuel": 20_000_000_000_u64,
        "memory_bytes": 268_435_456,
        "ready_instances": 0,
    });
    let guest = load(value.clone()).unwrap().guest;
    assert_eq!(guest.configure_fuel, 20_000_000_000);
    assert_eq!(guest.memory_bytes, 268_435_456);
    assert_eq!(guest.ready_instances, 0);
    assert_eq!(
        guest.decide_fuel,
        crate::component::DEFAULT_DECIDE_FUEL,
        "fields not given keep their defaults"
    );
    value["guest"] = json!({ "decide_fuel": 0 });
    assert_eq!(
        err_text(value.clone()),
        "guest.decide_fuel: expected a positive integer (fuel, about one wasm instruction each), found a number"
    );
    value["guest"] = json!({ "max_instances": 5_000_000_000_u64 });
    assert_eq!(
        err_text(value.clone()),
        "guest.max_instances: `5000000000` is too large"
    );
    value["guest"] = json!({ "configure_fule": 1 });
    assert!(
        err_text(value).starts_with("guest.configure_fule:"),
        "an unknown key is named"
    );
}

#[test]
fn wrong_type_names_its_path() {
    let text = err_text(with_servers(
        json!({ "fs": { "command": "npx", "args": ["-y", 7] } }),
    ));
    assert_eq!(
        text,
        "mcpServers.fs.args[1]: expected a string, found a number"
    );
    let text = err_text(with_servers(
        json!({ "fs": { "command": "npx", "env": { "A": true } } }),
    ));
    assert_eq!(
        text,
        "mcpServers.fs.env.A: expected a string, found a boolean"
    );
    assert_eq!(
        err_text(json!([])),
        "config: expected an object, found an array"
    );
}

#[test]
fn server_needs_exactly_one_of_command_and_url() {
    let text = err_text(with_servers(
        json!({ "s": { "command": "s", "url": "https://x" } }),
    ));
    assert!(text.starts_with("mcpServers.s: has both"), "{text}");
    let text = err_text(with_servers(json!({ "s": { "args": [] } })));
    assert!(text.starts_with("mcpServers.s: has neither"), "{text}");
}

#[test]
fn transport_type_must_agree_with_the_entry() {
    let text = err_text(with_servers(
        json!({ "s": { "type": "stdio", "url": "https://x" } }),
    ));
    assert_eq!(
        text,
        "mcpServers.s.type: says `stdio` but the entry has `url`"
    );
    let text = err_text(with_servers(
        json!({ "s": { "type": "sse", "url": "https://x/sse" } }),
    ));
    assert!(
        text.starts_with("mcpServers.s.type: the legacy HTTP+SSE transport is not supported"),
        "{text}"
    );
    let text = err_text(with_servers(
        json!({ "s": { "url": "https://x", "env": {} } }),
    ));
    assert!(
        text.starts_with("mcpServers.s.env: only a server with `command`"),
        "{text}"
    );
    let text = err_text(with_servers(json!({ "s": { "url": "ftp://x" } })));
    assert!(
        text.starts_with("mcpServers.s.url: `ftp://x` is not"),
        "{text}"
    );
}

#[test]
fn header_value_with_line_break_is_refused() {
    let value =
        with_servers(json!({ "s": { "url": "https://x", "headers": { "X-A": "${INJECT}" } } }));
    let env = |_: &str| Ok("a\r\nHost: evil".to_owned());
    let err = Config::from_value_with_env(value, &base(), &env).unwrap_err();
    assert_eq!(
        err.to_string(),
        "mcpServers.s.headers.X-A: value contains a line break or NUL character"
    );
}

#[test]
fn pass_env_takes_variable_names() {
    let config = load(with_servers(
        json!({ "s": { "command": "s", "pass_env": ["AWS_PROFILE", "LANG"] } }),
    ))
    .unwrap();
    assert_eq!(config.servers["s"].pass_env, vec!["AWS_PROFILE", "LANG"]);
    let text = err_text(with_servers(
        json!({ "s": { "command": "s", "pass_env": ["A=B"] } }),
    ));
    assert!(
        text.starts_with("mcpServers.s.pass_env[0]: `A=B` is not a variable name"),
        "{text}"
    );
}

#[test]
fn missing_servers_or_rules_are_refused() {
    assert!(err_text(json!({ "rules": { "file": "r" } })).starts_with("mcpServers: missing"));
    assert!(
        err_text(json!({ "rules": { "file": "r" }, "mcpServers": {} }))
            .starts_with("mcpServers: no servers")
    );
    assert!(
        err_text(json!({ "mcpServers": { "s": { "command": "s" } } }))
            .starts_with("rules: missing")
    );
    assert!(
        err_text(json!({ "mcpServers": { "s": { "command": "s" } }, "rules": {} }))
            .starts_with("rules.file: missing")
    );
}

#[test]
fn unanchored_tool_name_pattern_is_refused() {
    let mut value = with_servers(json!({ "s": { "command": "s" } }));
    value["tool_name_pattern"] = json!("[a-z]+");
    assert!(err_text(value).starts_with("tool_name_pattern: pattern `[a-z]+` must be anchored"));
}

#[test]
fn bad_audit_sync_mode_is_refused() {
    let mut value = with_servers(json!({ "s": { "command": "s" } }));
    value["audit"] = json!({ "sync": "sometimes" });
    assert_eq!(
        err_text(value),
        "audit.sync: unknown sync mode `sometimes` (expected `always` or `none`)"
    );
}

#[test]
fn duplicate_key_in_text_is_refused() {
    let text = r#"{ "mcpServers": { "s": { "command": "s" } }, "rules": { "file": "r" },
                   "audit": { "sync": "always", "sync": "none" } }"#;
    let err = Config::from_str(text, &base()).unwrap_err();
    let ConfigError::Parse { line, source, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(*line, 2);
    assert!(
        source.to_string().contains("duplicate key `sync`"),
        "{source}"
    );
}

#[test]
fn a_config_that_starts_with_a_byte_order_mark_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("toolward.json");
    let text = r#"{"mcpServers": {"s": {"command": "npx"}}, "rules": {"file": "r.json"}, "principal": "bom"}"#;
    std::fs::write(
        &file,
        [b"\xEF\xBB\xBF".as_slice(), text.as_bytes()].concat(),
    )
    .unwrap();
    assert_eq!(Config::from_path(&file).unwrap().principal, "bom");
}

#[cfg(target_os = "linux")]
#[test]
fn a_config_path_naming_dev_zero_is_refused_before_reading() {
    let error = Config::from_path(Path::new("/dev/zero"))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("is a character device, not a regular file"),
        "{error}"
    );
}

#[test]
fn config_file_over_the_size_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("toolward.json");
    std::fs::write(&file, vec![b' '; MAX_CONFIG_BYTES as usize + 1]).unwrap();
    assert!(matches!(
        Config::from_path(&file).unwrap_err(),
        ConfigError::TooLarge { .. }
    ));
}

#[test]
fn json_schema_names_the_same_keys_as_the_reader() {
    let schema: Value =
        serde_json::from_str(include_str!("../../../docs/config.schema.json")).unwrap();
    let keys = |v: &Value| -> Vec<String> {
        let mut keys: Vec<String> = v["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    };
    let sorted = |list: &[&str]| -> Vec<String> {
        let mut list: Vec<String> = list.iter().map(|s| (*s).to_owned()).collect();
        list.sort();
        list
    };
    assert_eq!(keys(&schema), sorted(TOP_KEYS));
    assert_eq!(
        keys(&schema["properties"]["notify"]),
        sorted(super::reader::NOTIFY_KEYS)
    );
    assert_eq!(keys(&schema["$defs"]["limits"]), sorted(LIMIT_KEYS));
    assert_eq!(keys(&schema["$defs"]["audit"]), sorted(AUDIT_KEYS));
    assert_eq!(
        keys(&schema["$defs"]["audit"]["properties"]["checkpoint"]),
        sorted(super::reader::CHECKPOINT_KEYS)
    );
    assert_eq!(keys(&schema["$defs"]["store"]), sorted(STORE_KEYS));
    assert_eq!(keys(&schema["properties"]["confine"]), sorted(CONFINE_KEYS));
    let server_confine = &schema["$defs"]["server"]["properties"]["confine"]["oneOf"];
    let mut both = keys(&server_confine[0]);
    both.extend(keys(&server_confine[1]));
    both.sort();
    assert_eq!(both, sorted(SERVER_CONFINE_KEYS));
    let listen = &schema["$defs"]["listen"];
    assert_eq!(keys(listen), sorted(LISTEN_KEYS));
    let console = &schema["properties"]["console"];
    assert_eq!(keys(console), sorted(super::reader::CONSOLE_KEYS));
    assert_eq!(
        keys(&console["properties"]["oidc"]),
        sorted(super::reader::CONSOLE_OIDC_KEYS)
    );
    let defaults = ListenConfig::default();
    for (key, value) in [
        ("header_read_timeout_ms", defaults.header_read_timeout_ms),
        ("max_connections", defaults.max_connections),
        (
            "max_sessions_per_principal",
            defaults.max_sessions_per_principal,
        ),
        ("session_idle_timeout_ms", defaults.session_idle_timeout_ms),
    ] {
        assert_eq!(listen["properties"][key]["default"], value, "{key}");
    }
    let oauth = &listen["properties"]["oauth"];
    assert_eq!(keys(oauth), sorted(LISTEN_OAUTH_KEYS));
    assert_eq!(
        keys(&oauth["properties"]["introspection"]),
        sorted(INTROSPECTION_KEYS)
    );
    assert_eq!(
        oauth["properties"]["algorithms"]["default"],
        serde_json::json!(crate::config::DEFAULT_OAUTH_ALGORITHMS)
    );
    assert_eq!(
        oauth["properties"]["leeway_ms"]["default"],
        crate::config::DEFAULT_OAUTH_LEEWAY_MS
    );
    let guest = &schema["properties"]["guest"];
    assert_eq!(keys(guest), sorted(GUEST_KEYS));
    let defaults = GuestLimits::default();
    for (key, value) in [
        ("decide_fuel", defaults.decide_fuel),
        ("classify_fuel", defaults.classify_fuel),
        ("configure_fuel", defaults.configure_fuel),
        ("review_fuel", defaults.review_fuel),
        ("memory_bytes", defaults.memory_bytes as u64),
        ("max_instances", u64::from(defaults.max_instances)),
    ] {
        assert_eq!(guest["properties"][key]["default"], value, "{key}");
    }
    let server: Vec<&str> = SERVER_KEYS
        .iter()
        .chain(IGNORED_CLIENT_KEYS)
        .chain(UNSUPPORTED_SERVER_KEYS)
        .copied()
        .collect();
    assert_eq!(keys(&schema["$defs"]["server"]), sorted(&server));
    assert_eq!(
        schema["$defs"]["limits"]["properties"]["max_tools"]["default"],
        DEFAULT_MAX_TOOLS
    );
}

#[test]
fn an_http_servers_oauth_is_read_with_its_secret_expanded_and_kept_out_of_debug_output() {
    let value = with_servers(json!({
        "remote": { "url": "https://mcp.example.com/mcp", "oauth": {
            "client_id": "toolward-gw", "client_secret": "${OAUTH_SECRET}",
            "scopes": ["files:read", "mcp:tools"], "grant": "client_credentials", "redirect_port": 8765
        } },
        "plain": { "url": "https://other.example.com/mcp" }
    }));
    let env = |name: &str| match name {
        "OAUTH_SECRET" => Ok("s3cret-value".to_owned()),
        _ => Err(VarError::NotPresent),
    };
    let config = Config::from_value_with_env(value, &base(), &env).unwrap();
    let ServerTransport::Http { oauth, .. } = &config.servers["remote"].transport else {
        panic!("remote is http");
    };
    assert_eq!(
        *oauth,
        OAuthConfig {
            client_id: Some("toolward-gw".to_owned()),
            client_secret: Some("s3cret-value".to_owned()),
            scopes: vec!["files:read".to_owned(), "mcp:tools".to_owned()],
            grant: OAuthGrant::ClientCredentials,
            redirect_port: 8765,
            per_principal: false,
            ca_file: None,
            client_id_metadata_url: None,
        }
    );
    assert!(!format!("{config:?}").contains("s3cret"));
    let ServerTransport::Http { oauth, .. } = &config.servers["plain"].transport else {
        panic!("plain is http");
    };
    assert_eq!(*oauth, OAuthConfig::default());
}

#[test]
fn oauth_on_a_stdio_server_a_secret_without_an_id_and_an_unknown_grant_are_refused() {
    let cases = [
        (
            json!({ "s": { "command": "s", "oauth": {} } }),
            "mcpServers.s.oauth: only a server with `url` (http) takes it",
        ),
        (
            json!({ "s": { "url": "https://x", "oauth": { "client_secret": "x" } } }),
            "mcpServers.s.oauth.client_secret: needs `client_id`: a secret is issued with an id",
        ),
        (
            json!({ "s": { "url": "https://x", "oauth": { "grant": "password" } } }),
            "mcpServers.s.oauth.grant: unknown grant `password` (expected `authorization_code`, `client_credentials` or `device`)",
        ),
        (
            json!({ "s": { "url": "https://x", "oauth": { "grant": "client_credentials", "client_id": "a" } } }),
            "mcpServers.s.oauth.grant: `client_credentials` needs `client_id` and `client_secret`",
        ),
        (
            json!({ "s": { "url": "https://x", "oauth": { "scopes": ["a b"] } } }),
            "mcpServers.s.oauth.scopes[0]: `a b` is not a scope (RFC 6749, section 3.3)",
        ),
        (
            json!({ "s": { "url": "https://x", "oauth": { "redirect_port": 70000 } } }),
            "mcpServers.s.oauth.redirect_port: expected a port number (0 to 65535), found a number",
        ),
        (
            json!({ "s": { "url": "https://x", "oauth": { "client": "a" } } }),
            "mcpServers.s.oauth.client: unknown key (expected one of `client_id`, `client_secret`, `scopes`, `grant`, `redirect_port`, `per_principal`, `ca_file`, `client_id_metadata_url`)",
        ),
        (
            json!({ "s": { "url": "https://x", "oauth": { "per_principal": "yes" } } }),
            "mcpServers.s.oauth.per_principal: expected `true` or `false`, found a string",
        ),
        (
            json!({ "s": { "url": "https://x", "headers": { "authorization": "Bearer x" }, "oauth": { "per_principal": true } } }),
            "mcpServers.s.oauth.per_principal: the server has an `Authorization` header, which would go with every principal's calls: remove the header, or `per_principal`",
        ),
    ];
    for (servers, expected) in cases {
        let error =
            Config::from_value_with_env(with_servers(servers), &base(), &no_env).unwrap_err();
        assert_eq!(error.to_string(), expected);
    }
}

#[test]
fn per_principal_is_off_unless_the_operator_turns_it_on() {
    let config = load(with_servers(json!({
        "shared": { "url": "https://a.example.com/mcp" },
        "own": { "url": "https://b.example.com/mcp", "oauth": { "per_principal": true } },
    })))
    .unwrap();
    let per_principal = |name: &str| match &config.servers[name].transport {
        ServerTransport::Http { oauth, .. } => oauth.per_principal,
        ServerTransport::Stdio { .. } | ServerTransport::Handed(_) => panic!("{name} is http"),
    };
    assert!(!per_principal("shared"));
    assert!(per_principal("own"));
}

#[test]
fn store_oauth_key_comes_from_one_variable_of_32_bytes_in_hex_and_stays_out_of_debug_output() {
    let key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let env = |name: &str| match name {
        "DATABASE_URL" => Ok("postgres://db.internal/toolward".to_owned()),
        "OAUTH_KEY" => Ok(key.to_owned()),
        "SHORT_KEY" => Ok("0011".to_owned()),
        _ => Err(VarError::NotPresent),
    };
    let with_key = |oauth_key: &str| {
        let mut value = with_servers(json!({ "gh": { "command": "gh-mcp" } }));
        value["store"] = json!({ "postgres": "${DATABASE_URL}", "oauth_key": oauth_key });
        Config::from_value_with_env(value, &base(), &env)
    };
    let config = with_key("${OAUTH_KEY}").unwrap();
    assert_eq!(
        config.store,
        StoreConfig::Postgres {
            url: "postgres://db.internal/toolward".to_owned(),
            oauth_key: Some(key.to_owned()),
        }
    );
    assert!(!format!("{config:?}").contains("aabbcc"));
    // Written in the file, or anything but one variable: refused, the value never quoted.
    for written in [key, "x${OAUTH_KEY}", "${OAUTH_KEY}${OAUTH_KEY}"] {
        let error = with_key(written).unwrap_err().to_string();
        assert_eq!(
            error,
            "store.oauth_key: must be one variable reference such as `${TOOLWARD_OAUTH_KEY}`: the key comes from the environment, never from the file"
        );
    }
    let error = with_key("${SHORT_KEY}").unwrap_err().to_string();
    assert!(
        error.starts_with("store.oauth_key: its variable must hold 32 bytes in hex"),
        "{error}"
    );
    assert!(!error.contains("0011"), "{error}");
}

#[test]
fn listen_oauth_takes_its_defaults_and_refuses_none_hmac_and_plain_http_off_loopback() {
    let listen = |oauth: Value| {
        let mut document = with_servers(json!({ "x": { "command": "x" } }));
        document["listen"] = json!({ "oauth": oauth });
        document
    };
    let config = load(listen(json!({
        "issuer": "https://login.example.com/realms/team",
        "resource": "https://mcp.example.com/mcp",
    })))
    .unwrap();
    let oauth = config.listen.oauth.unwrap();
    assert_eq!(oauth.algorithms, ["RS256", "ES256"]);
    assert_eq!(oauth.principal_claim, "sub");
    assert_eq!(oauth.leeway_ms, crate::config::DEFAULT_OAUTH_LEEWAY_MS);
    assert_eq!(oauth.jwks_uri, None);
    assert!(oauth.attribute_claims.is_empty());
    let loopback = load(listen(json!({
        "issuer": "http://127.0.0.1:9000",
        "resource": "http://localhost:8080/mcp",
        "algorithms": ["EdDSA", "PS256"],
        "attribute_claims": ["groups", "scope"],
    })))
    .unwrap();
    assert_eq!(
        loopback.listen.oauth.unwrap().algorithms,
        ["EdDSA", "PS256"]
    );
    for (oauth, expected) in [
        (
            json!({"issuer": "https://i.example", "resource": "https://r.example/mcp", "algorithms": ["none"]}),
            "`none` is refused",
        ),
        (
            json!({"issuer": "https://i.example", "resource": "https://r.example/mcp", "algorithms": ["RS256", "HS256"]}),
            "algorithm confusion",
        ),
        (
            json!({"issuer": "https://i.example", "resource": "https://r.example/mcp", "algorithms": []}),
            "names no algorithm",
        ),
        (
            json!({"issuer": "http://i.example", "resource": "https://r.example/mcp"}),
            "only a loopback host may go without TLS",
        ),
        (
            json!({"issuer": "https://user@i.example", "resource": "https://r.example/mcp"}),
            "no user name",
        ),
        (
            json!({"issuer": "https://i.example"}),
            "names no `resource`",
        ),
        (
            json!({"issuer": "https://i.example", "resource": "https://r.example/mcp", "leeway_ms": 600000}),
            "expired tokens would keep working",
        ),
        (
            json!({"issuer": "https://i.example", "resource": "https://r.example/mcp", "audience": "x"}),
            "audience",
        ),
    ] {
        let text = err_text(listen(oauth.clone()));
        assert!(text.contains(expected), "{oauth}: {text}");
    }
}

#[test]
fn a_ca_file_is_read_against_the_config_folder_and_a_bad_one_is_refused_naming_key_and_file() {
    let dir = tempfile::tempdir().unwrap();
    crate::tls_fixture::make_ca(dir.path());
    std::fs::write(dir.path().join("garbage.pem"), "not a certificate\n").unwrap();
    std::fs::write(
        dir.path().join("broken.pem"),
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let config = |server_ca: &str, listen_ca: &str| {
        Config::from_value_with_env(
            json!({
                "mcpServers": { "remote": { "url": "https://mcp.internal/mcp", "oauth": { "ca_file": server_ca } } },
                "rules": { "file": "rules.json" },
                "listen": { "oauth": { "issuer": "https://login.internal", "resource": "https://gw.internal/mcp", "ca_file": listen_ca } },
            }),
            dir.path(),
            &no_env,
        )
    };
    let read = config("ca.pem", "ca.pem").unwrap();
    let ServerTransport::Http { oauth, .. } = &read.servers["remote"].transport else {
        panic!("remote is http");
    };
    let bundle = oauth.ca_file.as_ref().unwrap();
    assert_eq!(bundle.file, dir.path().join("ca.pem"));
    assert_eq!(bundle.certificates.len(), 1);
    let listen_bundle = read
        .listen
        .oauth
        .as_ref()
        .unwrap()
        .ca_file
        .as_ref()
        .unwrap();
    assert_eq!(listen_bundle, bundle);
    assert!(!format!("{read:?}").contains("certificates: ["), "{read:?}");

    let shown = dir.path().display().to_string();
    for (server_ca, listen_ca, key, file, why) in [
        (
            "missing.pem",
            "ca.pem",
            "mcpServers.remote.oauth.ca_file",
            "missing.pem",
            "cannot read",
        ),
        (
            "garbage.pem",
            "ca.pem",
            "mcpServers.remote.oauth.ca_file",
            "garbage.pem",
            "holds no certificate",
        ),
        (
            "broken.pem",
            "ca.pem",
            "mcpServers.remote.oauth.ca_file",
            "broken.pem",
            "not an X.509 certificate",
        ),
        (
            "ca.pem",
            "missing.pem",
            "listen.oauth.ca_file",
            "missing.pem",
            "cannot read",
        ),
    ] {
        let error = config(server_ca, listen_ca).unwrap_err().to_string();
        assert!(error.starts_with(&format!("{key}: ")), "{error}");
        assert!(error.contains(&format!("`{shown}/{file}`")), "{error}");
        assert!(error.contains(why), "{error}");
    }
}

#[test]
fn listen_introspection_takes_its_secret_only_from_one_variable_and_keeps_it_out_of_debug_output() {
    let env = |name: &str| match name {
        "INTROSPECTION_SECRET" => Ok("s3cret-value".to_owned()),
        _ => Err(VarError::NotPresent),
    };
    let listen = |introspection: serde_json::Value| {
        Config::from_value_with_env(
            json!({
                "mcpServers": { "s": { "command": "node" } },
                "rules": { "file": "rules.json" },
                "listen": { "oauth": { "issuer": "https://login.example.com", "resource": "https://gw.example.com/mcp", "introspection": introspection } },
            }),
            &base(),
            &env,
        )
    };
    let config =
        listen(json!({ "client_id": "gateway", "client_secret": "${INTROSPECTION_SECRET}" }))
            .unwrap();
    let introspection = config
        .listen
        .oauth
        .as_ref()
        .unwrap()
        .introspection
        .as_ref()
        .unwrap();
    assert_eq!(introspection.client_secret, "s3cret-value");
    assert_eq!(introspection.endpoint, None);
    assert!(!format!("{config:?}").contains("s3cret"));
    for (introspection, expected) in [
        (
            json!({ "client_id": "gateway", "client_secret": "s3cret-in-the-file" }),
            "listen.oauth.introspection.client_secret: must be one variable reference",
        ),
        (
            json!({ "client_id": "gateway", "client_secret": "pre-${INTROSPECTION_SECRET}" }),
            "listen.oauth.introspection.client_secret: must be one variable reference",
        ),
        (
            json!({ "client_secret": "${INTROSPECTION_SECRET}" }),
            "listen.oauth.introspection: names no `client_id`",
        ),
        (
            json!({ "client_id": "gateway", "client_secret": "${INTROSPECTION_SECRET}", "endpoint": "http://login.example.com/introspect" }),
            "listen.oauth.introspection.endpoint: `http://login.example.com/introspect` is `http://`",
        ),
    ] {
        let error = listen(introspection.clone()).unwrap_err().to_string();
        assert!(error.starts_with(expected), "{introspection}: {error}");
        assert!(!error.contains("s3cret"), "{error}");
    }
}

#[test]
fn a_client_id_metadata_url_must_be_an_https_url_with_a_path() {
    let read = |url: &str| {
        Config::from_value_with_env(
            with_servers(
                json!({ "remote": { "url": "https://mcp.example.com/mcp", "oauth": { "client_id_metadata_url": url } } }),
            ),
            &base(),
            &no_env,
        )
    };
    let config = read("https://toolward.example.com/oauth/client.json").unwrap();
    let ServerTransport::Http { oauth, .. } = &config.servers["remote"].transport else {
        panic!("remote is http");
    };
    assert_eq!(
        oauth.client_id_metadata_url.as_deref(),
        Some("https://toolward.example.com/oauth/client.json")
    );
    for url in [
        "http://toolward.example.com/client.json",
        "https://toolward.example.com",
        "https://toolward.example.com/",
        "https://user@toolward.example.com/client.json",
        "https://toolward.example.com/client.json#x",
        "client.json",
    ] {
        let error = read(url).unwrap_err().to_string();
        assert!(
            error.starts_with("mcpServers.remote.oauth.client_id_metadata_url: "),
            "{url}: {error}"
        );
    }
}

#[test]
#[cfg(feature = "oci")]
fn an_oci_component_is_read_pinned_by_digest_and_needs_a_key() {
    let digest = format!("sha256:{}", "0a".repeat(32));
    let reference = format!("oci://127.0.0.1:5000/policies/deny@{digest}");
    let value = json!({
        "mcpServers": {"fs": {"command": "node"}},
        "rules": {"file": "rules.json"},
        "policy": {"component": reference},
        "oci": {"keys": {"release": "keys/cosign.pub"}},
    });
    let config = Config::from_value_with_env(value, &base(), &no_env).unwrap();
    let Some(ComponentSource::Oci(pinned)) = &config.policy.component else {
        panic!("{:?}", config.policy.component);
    };
    assert_eq!(pinned.to_string(), reference);
    assert_eq!(pinned.digest.as_deref(), Some(digest.as_str()));
    assert_eq!(
        config.oci.keys["release"],
        PathBuf::from("/etc/toolward/keys/cosign.pub")
    );
    let without_keys = err_text(json!({
        "mcpServers": {"fs": {"command": "node"}},
        "rules": {"file": "rules.json"},
        "policy": {"component": reference},
    }));
    assert!(without_keys.starts_with("oci.keys: `policy.component` is `oci://"), "{without_keys}");
}

#[test]
#[cfg(feature = "oci")]
fn a_component_by_tag_alone_is_refused_naming_it_and_policy_pull() {
    let message = err_text(json!({
        "mcpServers": {"fs": {"command": "node"}},
        "rules": {"file": "rules.json", "component": "oci://ghcr.io/org/rules:v1"},
        "oci": {"keys": {"release": "cosign.pub"}},
    }));
    assert_eq!(
        message,
        "rules.component: `oci://ghcr.io/org/rules:v1` names a tag, which the registry can move to other bytes: pin the digest that `toolward policy pull oci://ghcr.io/org/rules:v1` prints (`oci://…@sha256:…`)"
    );
}

#[test]
#[cfg(feature = "oci")]
fn policy_settings_and_cedar_text_are_read_from_a_file_or_pinned_by_digest_and_need_a_key() {
    let digest = format!("sha256:{}", "0b".repeat(32));
    let reference = format!("oci://127.0.0.1:5000/policies/settings@{digest}");
    for field in ["settings", "cedar"] {
        let config = Config::from_value_with_env(
            json!({
                "mcpServers": {"fs": {"command": "node"}},
                "rules": {"file": "rules.json"},
                "policy": {field: reference},
                "oci": {"keys": {"release": "keys/cosign.pub"}},
            }),
            &base(),
            &no_env,
        )
        .unwrap();
        let source = match field {
            "settings" => &config.policy.settings,
            _ => &config.policy.cedar,
        };
        let Some(TextSource::Oci(pinned)) = source else {
            panic!("{field}: {source:?}");
        };
        assert_eq!(pinned.to_string(), reference);
        let without_keys = err_text(json!({
            "mcpServers": {"fs": {"command": "node"}},
            "rules": {"file": "rules.json"},
            "policy": {field: reference},
        }));
        assert!(
            without_keys.starts_with(&format!("oci.keys: `policy.{field}` is `oci://")),
            "{without_keys}"
        );
        let tagged = err_text(json!({
            "mcpServers": {"fs": {"command": "node"}},
            "rules": {"file": "rules.json"},
            "policy": {field: "oci://ghcr.io/org/p:v1"},
            "oci": {"keys": {"release": "cosign.pub"}},
        }));
        assert!(
            tagged.starts_with(&format!("policy.{field}: `oci://ghcr.io/org/p:v1` names a tag")),
            "{tagged}"
        );
    }
    let config = Config::from_value_with_env(
        json!({
            "mcpServers": {"fs": {"command": "node"}},
            "rules": {"file": "rules.json"},
            "policy": {"cedar": "team.cedar"},
        }),
        &base(),
        &no_env,
    )
    .unwrap();
    assert_eq!(
        config.policy.cedar,
        Some(TextSource::File(PathBuf::from("/etc/toolward/team.cedar")))
    );
}

#[test]
fn approvers_name_answerers_known_servers_and_effects() {
    let with = |approvers: Value| {
        json!({
            "mcpServers": { "fs": { "command": "node" } },
            "rules": { "file": "rules.json" },
            "approvers": approvers,
        })
    };
    let config = Config::from_value(
        with(json!({"rules": [
            {"users": ["alice"], "groups": ["oncall"], "servers": ["fs"], "effects": ["destructive"]},
            {"os_users": ["root"]},
        ], "allow_self_approval": true})),
        &base(),
    )
    .unwrap();
    assert!(config.approvers.named() && config.approvers.allow_self_approval);
    assert_eq!(config.approvers.rules[0].groups, ["oncall"]);
    assert_eq!(config.approvers.rules[1].os_users, ["root"]);
    // Without the section: nobody is judged (the single operator's flow).
    let none = Config::from_value(with(json!(null)).as_object().map(|m| {
        let mut m = m.clone();
        m.remove("approvers");
        Value::Object(m)
    }).unwrap(), &base()).unwrap();
    assert!(!none.approvers.named());

    for (approvers, path, says) in [
        (json!({}), "approvers.rules", "missing"),
        (json!({"rules": []}), "approvers.rules", "no rules"),
        (json!({"rules": [{"servers": ["fs"]}]}), "approvers.rules[0]", "names no answerer"),
        (json!({"rules": [{"users": ["a"], "servers": ["git"]}]}), "approvers.rules[0].servers[0]", "`git` is not a server"),
        (json!({"rules": [{"users": ["a"], "effects": ["write"]}]}), "approvers.rules[0].effects[0]", "`write` is not an effect"),
        (json!({"rules": [{"users": [""]}]}), "approvers.rules[0].users[0]", ""),
        (json!({"rules": [{"users": ["a"], "who": 1}]}), "approvers.rules[0]", "who"),
    ] {
        let error = err_text(with(approvers));
        assert!(error.contains(path) && error.contains(says), "{error}");
    }
}

#[test]
fn notify_names_https_targets_with_a_secret_for_webhooks() {
    let with = |notify: Value| {
        json!({
            "mcpServers": { "fs": { "command": "node" } },
            "rules": { "file": "rules.json" },
            "notify": notify,
        })
    };
    let env = |name: &str| match name {
        "SLACK_URL" => Ok(String::from("https://hooks.slack.com/services/T/B/secret")),
        _ => Err(VarError::NotPresent),
    };
    let config = Config::from_value_with_env(
        with(json!({
            "webhooks": ["https://hooks.example/toolward"],
            "slack": ["${SLACK_URL}"],
            "secret_file": "notify-secret",
            "console_url": "https://console.example/",
            "arguments": true,
        })),
        &base(),
        &env,
    )
    .unwrap();
    let notify = &config.notify;
    assert_eq!(notify.slack, ["https://hooks.slack.com/services/T/B/secret"]);
    assert_eq!(notify.secret_file.as_deref(), Some(base().join("notify-secret").as_path()));
    assert_eq!(notify.console_url.as_deref(), Some("https://console.example"));
    assert!(notify.arguments && !notify.allow_private);
    // A Slack URL is its own secret: never in the config's Debug.
    assert!(!format!("{config:?}").contains("hooks.slack.com"));
    for (notify, path, says) in [
        (json!({"webhooks": ["https://h.example/"]}), "notify.secret_file", "missing"),
        (json!({"slack": ["ftp://h.example/"]}), "notify.slack[0]", "not an https URL"),
        (json!({"console_url": "console.example"}), "notify.console_url", "not the console's URL"),
        (json!({"email": ["a@b"]}), "notify", "email"),
    ] {
        let error = err_text(with(notify));
        assert!(error.contains(path) && error.contains(says), "{error}");
    }
}

#[test]
fn console_oidc_takes_its_secret_from_a_variable_or_a_file_never_the_config_and_names_each_fault()
{
    let env = |name: &str| match name {
        "OIDC_SECRET" => Ok(String::from("s3cret")),
        _ => Err(VarError::NotPresent),
    };
    let with = |oidc: Value| {
        json!({
            "mcpServers": { "fs": { "command": "node" } },
            "rules": { "file": "rules.json" },
            "console": { "oidc": oidc },
        })
    };
    let config = Config::from_value_with_env(
        with(json!({
            "issuer": "https://id.example.com", "client_id": "console",
            "client_secret": "${OIDC_SECRET}", "user_claim": "email",
            "scopes": ["email", "groups", "openid"],
        })),
        &base(),
        &env,
    )
    .unwrap();
    let oidc = config.console.oidc.unwrap();
    assert_eq!(
        oidc.client_secret,
        Some(SecretSource::Variable(String::from("OIDC_SECRET")))
    );
    assert_eq!(oidc.user_claim, "email");
    assert_eq!(oidc.groups_claim, "groups");
    assert_eq!(oidc.scopes, ["openid", "email", "groups"]);
    assert_eq!(oidc.algorithms, ["RS256", "ES256"]);
    assert!(!format!("{oidc:?}").contains("s3cret"), "{oidc:?}");

    // The file is read when the console starts, not with the config (a gateway reads this
    // config too, and never needs the secret).
    let dir = tempfile::tempdir().unwrap();
    let config = Config::from_value_with_env(
        with(json!({"issuer": "http://127.0.0.1:9", "client_id": "c", "client_secret_file": "secret"})),
        dir.path(),
        &env,
    )
    .unwrap();
    let source = config.console.oidc.unwrap().client_secret.unwrap();
    assert_eq!(source, SecretSource::File(dir.path().join("secret")));
    assert!(source.read().unwrap_err().contains("cannot read"));
    std::fs::write(dir.path().join("secret"), "from-a-file\n").unwrap();
    assert_eq!(source.read().unwrap(), "from-a-file");
    std::fs::write(dir.path().join("secret"), "\n").unwrap();
    assert!(source.read().unwrap_err().contains("empty"));

    for (oidc, path, words) in [
        (json!({"client_id": "c"}), "console.oidc", "names no `issuer`"),
        (json!({"issuer": "https://id.example.com"}), "console.oidc", "names no `client_id`"),
        (json!({"issuer": "http://id.example.com", "client_id": "c"}), "console.oidc.issuer", "only a loopback host"),
        (json!({"issuer": "https://id.example.com", "client_id": "c", "client_secret": "written-here"}), "console.oidc.client_secret", "one variable reference"),
        (json!({"issuer": "https://id.example.com", "client_id": "c", "client_secret": "${OIDC_SECRET}", "client_secret_file": "secret"}), "console.oidc", "both"),
        (json!({"issuer": "https://id.example.com", "client_id": "c", "algorithms": ["HS256"]}), "console.oidc.algorithms[0]", "HMAC"),
        (json!({"issuer": "https://id.example.com", "client_id": "c", "user_claim": "a b"}), "console.oidc.user_claim", "not a claim name"),
        (json!({"issuer": "https://id.example.com", "client_id": "c", "prompt": "login"}), "console.oidc.prompt", "unknown key"),
    ] {
        let error = Config::from_value_with_env(with(oidc.clone()), dir.path(), &env)
            .unwrap_err()
            .to_string();
        assert!(error.starts_with(path) && error.contains(words), "{oidc}: {error}");
    }
}
