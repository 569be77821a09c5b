//! Loading the real MCP servers (issue: pin and load, "Real listings"): each loads unchanged
//! with every classified tool registered, and against a manifest changed in the test (one
//! description, one schema number past u64, one tool removed, one tool the server does not
//! offer) exactly the changed tools are kept out while the rest registers.
//!
//! Skipped, with a message, when the servers are not installed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use toolward::canonical;
use toolward::component::GuestLimits;
use toolward::config::Config;
use toolward::load::{self, LoadReport, ServerReport};
use toolward::manifest::{Manifest, PinnedTool};
use toolward::registry::Registry;

use crate::real::{RealServer, real_server};

/// The number the changed manifest puts into one tool's pinned schema: 2^64 + 1, which an
/// `f64` or a `u64` cannot hold.
const PAST_U64: &str = "18446744073709551617";

/// The keyword that carries [`PAST_U64`] (an annotation keyword: it changes no validation,
/// only the pin).
const CHANGED_KEYWORD: &str = "x-reviewed-maximum";

fn config(server: &RealServer, dir: &Path) -> Config {
    Config::from_value(
        json!({
            "mcpServers": { server.name: server.entry.clone() },
            "rules": { "file": "rules.json" },
            "manifest": "manifest.json",
            "state_dir": "state",
        }),
        dir,
    )
    .unwrap()
}

/// Rules that classify every tool named, as read-only and allowing any hint: the test is
/// about pins, not classes.
fn classify_all<'a>(server: &str, tools: impl IntoIterator<Item = &'a String>) -> String {
    let mut rules = serde_json::Map::new();
    for tool in tools {
        rules.insert(
            tool.clone(),
            json!({ "effect": "read-only", "allow_hint_mismatch": true }),
        );
    }
    json!({ "servers": { server: { "tools": rules } } }).to_string()
}

async fn load_with(config: &Config, manifest: &Manifest) -> (Registry, LoadReport, Duration) {
    let started = Instant::now();
    let state = crate::support::state_of(config);
    let components =
        load::prepare_components(config, GuestLimits::default(), Some(&state)).unwrap();
    let (registry, report) = load::load(
        config,
        &components.rules,
        manifest,
        components.digests.clone(),
        Some(&state),
    )
    .await
    .unwrap();
    (registry, report, started.elapsed())
}

fn names(list: impl IntoIterator<Item = impl AsRef<str>>) -> BTreeSet<String> {
    list.into_iter().map(|n| n.as_ref().to_owned()).collect()
}

fn registered(report: &ServerReport) -> BTreeSet<String> {
    names(report.registered.iter().map(|r| &r.tool))
}

/// `tool`'s pin with [`CHANGED_KEYWORD`]: [`PAST_U64`] added to its schema's root, hashed
/// as `toolward pin` hashes.
fn with_number_past_u64(tool: &PinnedTool) -> PinnedTool {
    let schema = canonical::to_canonical(&tool.input_schema);
    let body = schema.strip_prefix('{').unwrap();
    let separator = if body == "}" { "" } else { "," };
    let changed = format!("{{\"{CHANGED_KEYWORD}\":{PAST_U64}{separator}{body}");
    let input_schema = canonical::parse(changed.as_bytes()).unwrap();
    let input_schema_sha256 =
        canonical::sha256_hex(canonical::to_canonical(&input_schema).as_bytes());
    PinnedTool {
        input_schema,
        input_schema_sha256,
        ..tool.clone()
    }
}

/// Pins real server `name`, loads it unchanged, then loads it against a changed manifest.
async fn loads_unchanged_and_refuses_exactly_what_changed(name: &'static str) {
    let Some(server) = real_server(name) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = config(&server, dir.path());

    let started = Instant::now();
    // `prepare_components` reads the rules file, which needs the tool names: pin first
    // with an empty one.
    std::fs::write(dir.path().join("rules.json"), r#"{"servers": {}}"#).unwrap();
    let pinned = toolward::pin::pin(&config, None, None, BTreeMap::new())
        .await
        .unwrap();
    pinned.check().unwrap();
    let pin_time = started.elapsed();
    let manifest = pinned.manifest;
    let tools: Vec<String> = manifest.servers[name].tools.keys().cloned().collect();
    assert_eq!(tools.len(), server.tools, "{tools:?}");

    // Unchanged: every classified tool registers, nothing else is said.
    std::fs::write(
        dir.path().join("rules.json"),
        classify_all(name, tools.iter().chain([&String::from("ghost_tool")])),
    )
    .unwrap();
    let (registry, report, load_time) = load_with(&config, &manifest).await;
    let loaded = &report.servers[0];
    assert_eq!(loaded.failure, None);
    assert_eq!(registered(loaded), names(&tools), "{loaded:#?}");
    assert!(loaded.refused.is_empty(), "{:#?}", loaded.refused);
    assert!(loaded.unpinned.is_empty() && loaded.unclassified.is_empty());
    registry.close().await;
    eprintln!(
        "{name}: {} tools, pin {} ms, load {} ms (debug build, server start included)",
        tools.len(),
        pin_time.as_millis(),
        load_time.as_millis()
    );

    // Changed: one description, one schema number past u64, one tool removed from the
    // manifest, one pinned tool the server does not offer.
    let described = &tools[0];
    let numbered = &tools[1];
    let removed = tools.get(2);
    let mut changed = manifest.clone();
    let pins = &mut changed.servers.get_mut(name).unwrap().tools;
    let description = format!("{} (as reviewed)", pins[described].description);
    let pin = pins.get_mut(described).unwrap();
    pin.description_sha256 = canonical::sha256_hex(description.as_bytes());
    pin.description = description;
    let renumbered = with_number_past_u64(&pins[numbered]);
    pins.insert(numbered.clone(), renumbered);
    if let Some(removed) = removed {
        pins.remove(removed);
    }
    let ghost = pins[numbered].clone();
    pins.insert(String::from("ghost_tool"), ghost);
    // The changed manifest is one `toolward pin` could have written: its hashes agree.
    let changed = Manifest::parse(changed.to_json().as_bytes()).unwrap();

    let (registry, report, _) = load_with(&config, &changed).await;
    let loaded = &report.servers[0];
    let kept_out = names([described, numbered].into_iter().chain(removed));
    let expected: BTreeSet<String> = names(&tools).difference(&kept_out).cloned().collect();
    assert_eq!(registered(loaded), expected, "{loaded:#?}");
    assert_eq!(
        names(loaded.refused.iter().map(|r| &r.tool)),
        names([described.as_str(), numbered, "ghost_tool"]),
        "{:#?}",
        loaded.refused
    );
    let refusal = |tool: &str| loaded.refused.iter().find(|r| r.tool == tool).unwrap();
    let diff = refusal(described).description_diff.as_deref().unwrap_or("");
    assert!(
        diff.contains("+") && diff.contains("(as reviewed)"),
        "{diff}"
    );
    assert!(
        refusal(numbered)
            .pointers
            .contains(&format!("/{CHANGED_KEYWORD}")),
        "{:#?}",
        refusal(numbered)
    );
    assert!(
        refusal("ghost_tool").reason.contains("no longer offers it"),
        "{}",
        refusal("ghost_tool").reason
    );
    assert_eq!(
        loaded.unpinned,
        removed.into_iter().cloned().collect::<Vec<_>>()
    );
    for tool in &kept_out {
        assert!(
            registry.get(&format!("{name}__{tool}")).is_none(),
            "`{tool}` was registered"
        );
    }
    registry.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_filesystem_loads_unchanged_and_a_changed_manifest_keeps_out_exactly_the_changed_tools()
 {
    loads_unchanged_and_refuses_exactly_what_changed("filesystem").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_loads_unchanged_and_a_changed_manifest_keeps_out_exactly_the_changed_tools()
 {
    loads_unchanged_and_refuses_exactly_what_changed("everything").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_memory_loads_unchanged_and_a_changed_manifest_keeps_out_exactly_the_changed_tools()
{
    loads_unchanged_and_refuses_exactly_what_changed("memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_time_loads_unchanged_and_a_changed_manifest_keeps_out_exactly_the_changed_tools()
 {
    loads_unchanged_and_refuses_exactly_what_changed("time").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_git_loads_unchanged_and_a_changed_manifest_keeps_out_exactly_the_changed_tools()
{
    loads_unchanged_and_refuses_exactly_what_changed("git").await;
}
