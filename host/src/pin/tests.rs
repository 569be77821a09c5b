//! How servers are started for pinning, how a listing becomes a pinned server, and how
//! failures are reported. Real servers are pinned in the integration tests (`tests/all/pin.rs`).

use std::path::Path;

use serde_json::json;

use super::*;
use crate::listing::ListingBuilder;

fn config(servers: serde_json::Value, base: &Path) -> Config {
    Config::from_value(
        json!({
            "rules": { "file": "rules.json" },
            "state_dir": "state",
            "mcpServers": servers,
        }),
        base,
    )
    .unwrap()
}

fn identity() -> ServerIdentity {
    ServerIdentity {
        name: String::from("fake"),
        version: String::from("1.2.3"),
        protocol_version: String::from("2025-06-18"),
        capabilities: json!({}),
        instructions: None,
    }
}

fn listing_of(page: &str) -> Listing {
    let mut builder = ListingBuilder::new("srv", ListingBounds::default());
    assert_eq!(builder.push_page(page.as_bytes()).unwrap(), None);
    builder.finish()
}

#[test]
fn a_server_gets_its_own_home_and_tmpdir_outside_the_state_folder() {
    let base = Path::new("/opt/toolward");
    let config = config(
        json!({ "fs": { "command": "node", "args": ["a.js"] } }),
        base,
    );
    let server = &config.servers["fs"];
    assert_eq!(
        server_home(&config, server),
        Some(PathBuf::from("/opt/toolward/.toolward-servers/fs/home"))
    );
    let spec = stdio_spec(&config, server).unwrap();
    assert_eq!(spec.command, "node");
    assert_eq!(spec.args, ["a.js"]);
    assert_eq!(spec.env["HOME"], "/opt/toolward/.toolward-servers/fs/home");
    assert_eq!(spec.env["TMPDIR"], "/opt/toolward/.toolward-servers/fs/tmp");
    for folder in [&spec.env["HOME"], &spec.env["TMPDIR"]] {
        assert!(
            !Path::new(folder).starts_with(&config.state_dir),
            "{folder}"
        );
    }
    // Relative paths in `args` resolve beside the config file.
    assert_eq!(spec.cwd.as_deref(), Some(base));
}

#[test]
fn a_home_the_operator_sets_or_passes_is_left_alone() {
    let base = Path::new("/opt/toolward");
    let config = config(
        json!({
            "set": { "command": "node", "env": { "HOME": "/home/op/x", "A": "1", "TMPDIR": "/t" } },
            "passed": { "command": "node", "pass_env": ["HOME", "TMPDIR"] },
        }),
        base,
    );
    let set = &config.servers["set"];
    assert_eq!(server_home(&config, set), None);
    let spec = stdio_spec(&config, set).unwrap();
    assert_eq!(spec.env["HOME"], "/home/op/x");
    assert_eq!(spec.env["TMPDIR"], "/t");
    assert_eq!(spec.env["A"], "1");
    let passed = &config.servers["passed"];
    assert_eq!(server_home(&config, passed), None);
    assert_eq!(server_tmp(&config, passed), None);
    let spec = stdio_spec(&config, passed).unwrap();
    assert!(!spec.env.contains_key("HOME"));
    assert!(!spec.env.contains_key("TMPDIR"));
    assert_eq!(spec.pass_env, ["HOME", "TMPDIR"]);
}

#[test]
fn an_http_server_is_reached_at_its_url_with_its_headers_and_has_no_home() {
    let config = config(
        json!({ "remote": { "url": "https://example.invalid/mcp", "headers": { "X-Team": "a" } } }),
        Path::new("/opt"),
    );
    let remote = &config.servers["remote"];
    let spec = http_spec(remote).unwrap();
    assert_eq!(spec.url, "https://example.invalid/mcp");
    assert_eq!(spec.headers["X-Team"], "a");
    // Header values stay out of debug output.
    assert!(!format!("{spec:?}").contains("\"a\""), "{spec:?}");
    assert_eq!(server_home(&config, remote), None);
    let error = stdio_spec(&config, remote).unwrap_err();
    assert_eq!(
        error.to_string(),
        "server `remote` is not started by toolward (it is reached over streamable HTTP, or was handed in as a transport): it has no command to start"
    );
}

#[cfg(unix)]
#[test]
fn the_home_and_tmp_folders_are_created_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let config = config(json!({ "fs": { "command": "node" } }), dir.path());
    let server = &config.servers["fs"];
    create_home(&config, server).unwrap();
    for folder in [
        ".toolward-servers",
        ".toolward-servers/fs",
        ".toolward-servers/fs/tmp",
    ] {
        let mode = std::fs::metadata(dir.path().join(folder))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "{folder}");
    }
    let home = dir.path().join(".toolward-servers/fs/home");
    let mode = std::fs::metadata(&home).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    // An existing folder with a looser mode is made private again.
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
    create_home(&config, server).unwrap();
    let mode = std::fs::metadata(&home).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
}

/// A link or file the server left at its `home` or `tmp` is replaced by a folder, and what
/// the link led to keeps its mode (found by an attack: toolward, unconfined, made `/tmp` mode
/// 0700 through a server's link at its restart; a file there failed every start).
#[test]
fn a_link_or_file_the_server_left_at_its_home_is_replaced_not_followed() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let config = config(json!({ "fs": { "command": "node" } }), dir.path());
    let server = &config.servers["fs"];
    create_home(&config, server).unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let home = dir.path().join(".toolward-servers/fs/home");
    let tmp = dir.path().join(".toolward-servers/fs/tmp");
    std::fs::remove_dir(&home).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &home).unwrap();
    std::fs::remove_dir(&tmp).unwrap();
    std::fs::write(&tmp, "a file").unwrap();
    create_home(&config, server).unwrap();
    let mode = std::fs::metadata(&elsewhere).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o1777, "the link's target was chmodded");
    for folder in [&home, &tmp] {
        let meta = std::fs::symlink_metadata(folder).unwrap();
        assert!(meta.is_dir(), "{}", folder.display());
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    }
}

#[test]
fn the_frame_limit_leaves_room_for_a_page_at_its_bound() {
    let small = Limits {
        max_page_bytes: 1024,
        ..Limits::default()
    };
    assert_eq!(transport_limits(&small).max_frame_bytes, MAX_FRAME_BYTES);
    assert_eq!(
        transport_limits(&small).max_http_body_bytes,
        MAX_HTTP_BODY_BYTES
    );
    let default = Limits::default();
    assert_eq!(
        transport_limits(&default).max_frame_bytes as u64,
        default.max_page_bytes + FRAME_ENVELOPE_BYTES
    );
    assert_eq!(
        transport_limits(&default).max_http_body_bytes as u64,
        default.max_page_bytes + FRAME_ENVELOPE_BYTES
    );
    let large = Limits {
        max_page_bytes: 100 * 1024 * 1024,
        ..Limits::default()
    };
    assert_eq!(
        transport_limits(&large).max_frame_bytes as u64,
        100 * 1024 * 1024 + FRAME_ENVELOPE_BYTES
    );
    assert_eq!(
        transport_limits(&large).start_timeout,
        large.start_timeout()
    );
}

#[test]
fn pin_server_records_each_tool_with_its_hashes_and_annotations() {
    let listing = listing_of(
        r#"{"tools":[{"name":"t","description":"d","inputSchema":{"type":"object"},"outputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}"#,
    );
    let pinned = pin_server(listing, &identity()).unwrap();
    assert_eq!(pinned.server_name, "fake");
    assert_eq!(pinned.server_version, "1.2.3");
    assert_eq!(pinned.protocol_version, "2025-06-18");
    let tool = &pinned.tools["t"];
    assert_eq!(tool.description, "d");
    assert_eq!(tool.description_sha256, crate::canonical::sha256_hex(b"d"));
    assert_eq!(
        tool.input_schema_sha256,
        crate::canonical::sha256_hex(br#"{"type":"object"}"#)
    );
    assert_eq!(
        tool.output_schema_sha256,
        Some(tool.input_schema_sha256.clone())
    );
    assert_eq!(
        tool.annotations
            .as_ref()
            .map(crate::canonical::to_canonical)
            .as_deref(),
        Some(r#"{"readOnlyHint":true}"#)
    );
}

#[test]
fn pin_server_fails_naming_a_tool_listed_twice() {
    let listing = listing_of(
        r#"{"tools":[{"name":"a","inputSchema":{}},{"name":"b","inputSchema":{}},{"name":"a","inputSchema":{}}]}"#,
    );
    let error = pin_server(listing, &identity()).unwrap_err();
    assert_eq!(error.to_string(), "server `srv` lists `a` more than once");
}

#[test]
fn pin_server_pins_the_rest_and_records_each_malformed_tool_with_its_reason() {
    let listing = listing_of(
        r#"{"tools":[{"name":"a"},{"name":"b","inputSchema":{}},{"name":"c\u200b","inputSchema":{}}]}"#,
    );
    let pinned = pin_server(listing, &identity()).unwrap();
    assert_eq!(pinned.tools.keys().collect::<Vec<_>>(), ["b"]);
    assert_eq!(
        pinned.refused,
        BTreeMap::from([
            (String::from("a"), String::from("it has no `inputSchema`")),
            (
                String::from("c\\u{200B}"),
                String::from(
                    "zero-width character U+200B in `name`, which a reviewer would not see"
                )
            ),
        ])
    );
}

#[tokio::test]
async fn pin_of_an_unknown_server_fails() {
    let config = config(json!({ "fs": { "command": "node" } }), Path::new("/opt"));
    let error = pin(&config, Some("nope"), None, BTreeMap::new())
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "server `nope` is not in the configuration"
    );
}

#[tokio::test]
async fn a_server_that_fails_to_start_fails_alone_and_keeps_its_existing_pin() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        json!({
            "broken": { "command": "./no-such-server" },
            "remote": { "url": "https://example.invalid/mcp" },
        }),
        dir.path(),
    );
    let old = PinnedServer {
        server_name: String::from("old"),
        ..PinnedServer::default()
    };
    let existing = Manifest {
        components: BTreeMap::new(),
        servers: BTreeMap::from([
            (String::from("broken"), old.clone()),
            (String::from("gone"), old.clone()),
        ]),
    };
    let components = BTreeMap::from([(String::from("rules"), "a".repeat(64))]);
    let outcome = pin(&config, None, Some(&existing), components.clone())
        .await
        .unwrap();
    assert!(!outcome.is_complete());
    assert_eq!(
        outcome.failures.keys().collect::<Vec<_>>(),
        ["broken", "remote"]
    );
    assert_eq!(
        outcome.failures["broken"].to_string(),
        "could not start server `broken`"
    );
    assert_eq!(
        outcome.check().unwrap_err().to_string(),
        "pin failed for `broken`, `remote`"
    );
    // The failed server keeps its reviewed pin; a server no longer configured is dropped.
    assert_eq!(
        outcome.manifest.servers.keys().collect::<Vec<_>>(),
        ["broken"]
    );
    assert_eq!(outcome.manifest.servers["broken"], old);
    assert_eq!(outcome.manifest.components, components);
    assert_eq!(outcome.diff.servers.len(), 1);
    assert_eq!(outcome.diff.servers[0].server, "gone");
}

#[tokio::test]
async fn pinning_one_server_keeps_every_other_entry() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        json!({
            "broken": { "command": "./no-such-server" },
            "other": { "command": "./no-such-server" },
        }),
        dir.path(),
    );
    let old = PinnedServer::default();
    let existing = Manifest {
        components: BTreeMap::new(),
        servers: BTreeMap::from([
            (String::from("other"), old.clone()),
            (String::from("unconfigured"), old.clone()),
        ]),
    };
    let outcome = pin(&config, Some("broken"), Some(&existing), BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(outcome.failures.keys().collect::<Vec<_>>(), ["broken"]);
    assert_eq!(
        outcome.manifest.servers.keys().collect::<Vec<_>>(),
        ["other", "unconfigured"]
    );
    assert!(outcome.diff.is_empty());
}
