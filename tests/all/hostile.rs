//! Hostile servers through the whole host: each behaviour is one small scenario of the fake
//! server (`tests/fake-server`), run through [`Toolward::start`] and calls (or `toolward
//! serve` itself), and each test asserts which tool is refused or which call fails, with what
//! message, and that every other tool and the other server go on. Every server a test starts
//! carries a marker in its environment, so the test can count the processes left behind.

mod confine;
mod drift;
mod durability;
mod escapes;
mod facts;
mod foreign_text;
mod hidden_text;
mod js_guests;
mod listings;
mod policy_faults;
mod processes;
mod results;
mod reviews;
mod rewrites;
mod schemas;
mod shared_log;
mod unavailable;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use toolward::Toolward;
use toolward::approval::DenyAll;
use toolward::call::CallResult;
use toolward::config::Config;
use toolward::load::Refusal;

use crate::support::{FAKE_SERVER, call, unique_marker};

/// The variable that carries a test's marker into its servers' environment.
const MARKER_VARIABLE: &str = "TOOLWARD_TEST_MARKER";

/// A tool whose input schema takes any object, as raw JSON text.
fn tool(name: &str) -> String {
    format!(r#"{{"name": "{name}", "description": "{name}", "inputSchema": {{"type": "object"}}}}"#)
}

/// The raw text of one `tools/list` page holding `tools` (each raw JSON text).
fn page(tools: &[&str]) -> String {
    format!(r#"{{"tools": [{}]}}"#, tools.join(", "))
}

/// A scenario of one page of `tools`.
fn listing(tools: &[&str]) -> Value {
    json!({ "pages": [page(tools)] })
}

/// A test folder: fake servers (each a scenario file), their rules, a config, a manifest.
struct Bench {
    dir: tempfile::TempDir,
    marker: String,
    servers: Vec<String>,
    rules: BTreeMap<String, serde_json::Map<String, Value>>,
    /// Members of the rules file beside `servers` (`reviews`, `labels`).
    rules_members: serde_json::Map<String, Value>,
    settings: serde_json::Map<String, Value>,
    server_settings: BTreeMap<String, serde_json::Map<String, Value>>,
}

/// Makes the test process a child subreaper, as the `toolward` binary makes itself: a
/// descendant that leaves its server's process group and loses its parent is then reparented
/// here, and closing the server ends it.
fn become_subreaper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| toolward::transport::become_subreaper().unwrap());
}

impl Bench {
    fn new(test: &str) -> Bench {
        become_subreaper();
        Bench {
            dir: tempfile::tempdir().unwrap(),
            marker: unique_marker(test),
            servers: Vec::new(),
            rules: BTreeMap::new(),
            rules_members: serde_json::Map::new(),
            settings: serde_json::Map::new(),
            server_settings: BTreeMap::new(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Adds server `name` answering `scenario`, with `classified` classified read-only.
    fn server(mut self, name: &str, scenario: Value, classified: &[&str]) -> Bench {
        self.servers.push(name.to_owned());
        self.scenario(name, &scenario);
        let tools = classified
            .iter()
            .map(|t| ((*t).to_owned(), json!({"effect": "read-only"})))
            .collect();
        self.rules.insert(name.to_owned(), tools);
        self
    }

    /// Server `good`, whose `echo` answers.
    fn with_good_server(self) -> Bench {
        self.server("good", listing(&[&tool("echo")]), &["echo"])
    }

    /// Sets a member of the rules file beside `servers` (`reviews`, `labels`).
    fn with_rules_member(mut self, key: &str, value: Value) -> Bench {
        self.rules_members.insert(key.to_owned(), value);
        self
    }

    /// Replaces the rule of `tool` of server `name` (added by [`Bench::server`]).
    fn with_tool_rule(mut self, name: &str, tool: &str, rule: Value) -> Bench {
        self.rules
            .entry(name.to_owned())
            .or_default()
            .insert(tool.to_owned(), rule);
        self
    }

    /// Sets a config member (`limits`, `audit`, `policy`).
    fn with(mut self, key: &str, value: Value) -> Bench {
        self.settings.insert(key.to_owned(), value);
        self
    }

    /// Sets a member of server `name`'s entry (`confine`).
    fn with_server_setting(mut self, name: &str, key: &str, value: Value) -> Bench {
        let entry = self.server_settings.entry(name.to_owned()).or_default();
        entry.insert(key.to_owned(), value);
        self
    }

    /// Writes (or rewrites, between pin and load) the scenario of server `name`.
    fn scenario(&self, name: &str, scenario: &Value) {
        std::fs::write(
            self.path().join(format!("{name}.json")),
            scenario.to_string(),
        )
        .unwrap();
    }

    fn config(&self) -> Config {
        let servers: serde_json::Map<String, Value> = self
            .servers
            .iter()
            .map(|name| {
                let mut server = json!({
                    "command": FAKE_SERVER,
                    "args": [format!("{name}.json")],
                    "env": { MARKER_VARIABLE: self.server_marker(name) },
                });
                for (key, value) in self.server_settings.get(name).into_iter().flatten() {
                    server[key] = value.clone();
                }
                (name.clone(), server)
            })
            .collect();
        let rules: serde_json::Map<String, Value> = self
            .rules
            .iter()
            .map(|(server, tools)| (server.clone(), json!({ "tools": tools })))
            .collect();
        let mut rules_file = json!({ "servers": rules });
        for (key, value) in &self.rules_members {
            rules_file[key] = value.clone();
        }
        std::fs::write(self.path().join("rules.json"), rules_file.to_string()).unwrap();
        let mut config = json!({
            "mcpServers": servers,
            "rules": {"file": "rules.json"},
            "manifest": "manifest.json",
            "state_dir": "state",
            "audit": {"file": "state/audit.jsonl", "sync": "none"},
            "limits": {"call_timeout_ms": 5000}
        });
        for (key, value) in &self.settings {
            config[key] = value.clone();
        }
        std::fs::write(self.path().join("toolward.json"), config.to_string()).unwrap();
        Config::from_value(config, self.path()).unwrap()
    }

    /// Pins every server as it answers now and writes the manifest.
    async fn pin(&self) {
        let config = self.config();
        let pinned = toolward::pin::pin(&config, None, None, BTreeMap::new())
            .await
            .unwrap();
        assert!(pinned.failures.is_empty(), "{:?}", pinned.failures);
        pinned.manifest.write(&config.manifest).unwrap();
    }

    async fn start(&self) -> Toolward {
        Toolward::start(self.config()).await.unwrap()
    }

    async fn pin_and_start(&self) -> Toolward {
        self.pin().await;
        self.start().await
    }

    /// The marker in the environment of server `name` and of every process it starts.
    fn server_marker(&self, name: &str) -> String {
        format!("{}/{name}/", self.marker)
    }

    /// Asserts that no process of this test's servers is left.
    fn assert_no_processes_left(&self) {
        crate::support::assert_no_processes_left(&format!("{}/", self.marker));
    }

    /// Asserts that no process of server `name` is left.
    fn assert_no_processes_left_of(&self, name: &str) {
        crate::support::assert_no_processes_left(&self.server_marker(name));
    }
}

/// The refusal of tool `tool` of server `server` in the load report.
fn refusal<'a>(toolward: &'a Toolward, server: &str, tool: &str) -> &'a Refusal {
    let report = toolward
        .report()
        .servers
        .iter()
        .find(|s| s.server == server)
        .unwrap();
    report
        .refused
        .iter()
        .find(|r| r.tool == tool)
        .unwrap_or_else(|| panic!("`{tool}` was not refused: {report:#?}"))
}

/// Why server `server` did not load.
fn server_failure(toolward: &Toolward, server: &str) -> String {
    toolward
        .report()
        .servers
        .iter()
        .find(|s| s.server == server)
        .and_then(|s| s.failure.clone())
        .unwrap_or_else(|| panic!("server `{server}` loaded: {}", toolward.report().render()))
}

/// The exposed names of the registered tools, sorted.
fn registered(toolward: &Toolward) -> Vec<String> {
    let mut names: Vec<String> = toolward.tools().map(|t| t.exposed_name.clone()).collect();
    names.sort();
    names
}

/// Calls `tool`, whose server echoes the arguments, and asserts that it answered.
async fn assert_echoes(toolward: &Toolward, tool: &str) {
    let echo = call(toolward, tool).await;
    assert!(!echo.is_error(), "{tool}: {}", echo.result);
    assert_eq!(echo.text(), r#"{"x":1}"#);
}

async fn the_other_server_still_works(toolward: &Toolward) {
    assert_echoes(toolward, "good__echo").await;
}

/// Calls `tool` and asserts a tool error whose text holds every one of `needles`.
async fn assert_call_fails(toolward: &Toolward, tool: &str, needles: &[&str]) -> CallResult {
    let result = call(toolward, tool).await;
    assert!(result.is_error(), "{tool}: {}", result.result);
    for needle in needles {
        assert!(
            result.text().contains(needle),
            "{tool}: `{needle}` not in {}",
            result.text()
        );
    }
    result
}
