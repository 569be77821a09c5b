//! Turning the servers of clients' configs into `mcpServers` entries of `toolward.json`:
//! which can be imported as they are, which cannot and why, and which `${VAR}` each secret
//! becomes.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::client_config::{ClientSpec, FoundClient, flatten_entry};

/// Keys of a client's server entry that `toolward.json` takes over.
const IMPORTED_KEYS: &[&str] = &["command", "args", "env", "url", "headers", "type"];
/// Keys that change how the server runs and that toolward does not support: the server is
/// not imported (see `docs/config.md`).
const BLOCKING_KEYS: &[&str] = &["cwd", "envFile"];

/// One server that can be imported.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The client it comes from (the first, when several have the same server).
    pub client: &'static ClientSpec,
    /// Other clients that have the same server under the same name.
    pub also_in: Vec<&'static str>,
    /// Its name, in the client and in `toolward.json`.
    pub name: String,
    /// The entry as the client has it, flattened ([`flatten_entry`]).
    pub entry: Map<String, Value>,
    /// Keys of the client's entry left out (the client's own settings: `timeout`,
    /// `trust`, `disabledTools`, …).
    pub dropped: Vec<String>,
}

/// A server that is not imported, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The client.
    pub client: &'static str,
    /// The server's name.
    pub name: String,
    /// Why, in one line, with what the operator can do.
    pub reason: String,
}

/// The servers of `found`, sorted into those that can be imported and those that cannot.
/// `clients` and `servers`, when not empty, choose which are looked at; a project's file is
/// looked at only when named in `clients` (it is shared with everyone on the project).
#[must_use]
pub fn candidates(
    found: &[FoundClient],
    clients: &[String],
    servers: &[String],
) -> (Vec<Candidate>, Vec<Skipped>) {
    let mut out: Vec<Candidate> = Vec::new();
    let mut skipped = Vec::new();
    // Names whose definitions differ between clients: reported, never guessed.
    let mut clashing: BTreeMap<String, Vec<&'static str>> = BTreeMap::new();
    for client in found {
        let named = clients.iter().any(|c| c == client.spec.id);
        if (client.spec.project || !clients.is_empty()) && !named {
            continue;
        }
        for server in &client.servers {
            if !servers.is_empty() && !servers.contains(&server.name) {
                continue;
            }
            if server.name == crate::client_config::TOOLWARD_ENTRY {
                continue;
            }
            let entry = flatten_entry(&server.entry);
            if let Some(reason) = blocker(&entry) {
                skipped.push(Skipped {
                    client: client.spec.id,
                    name: server.name.clone(),
                    reason,
                });
                continue;
            }
            if let Some(existing) = out.iter_mut().find(|c| c.name == server.name) {
                if same_server(&existing.entry, &entry) {
                    existing.also_in.push(client.spec.id);
                } else {
                    clashing
                        .entry(server.name.clone())
                        .or_insert_with(|| vec![existing.client.id])
                        .push(client.spec.id);
                }
                continue;
            }
            let dropped = entry
                .keys()
                .filter(|k| !IMPORTED_KEYS.contains(&k.as_str()))
                .cloned()
                .collect();
            out.push(Candidate {
                client: client.spec,
                also_in: Vec::new(),
                name: server.name.clone(),
                entry,
                dropped,
            });
        }
    }
    for (name, in_clients) in clashing {
        out.retain(|c| c.name != name);
        skipped.push(Skipped {
            client: in_clients.first().copied().unwrap_or_default(),
            name: name.clone(),
            reason: format!(
                "server `{}` is defined differently in {}: not imported; choose one with `--client`",
                crate::text::escape(&name),
                in_clients.join(", ")
            ),
        });
    }
    (out, skipped)
}

/// Why an entry cannot be imported as it is, if it cannot.
fn blocker(entry: &Map<String, Value>) -> Option<String> {
    if entry.get("disabled") == Some(&Value::Bool(true))
        || entry.get("enabled") == Some(&Value::Bool(false))
    {
        return Some("disabled in the client".to_owned());
    }
    if let Some(key) = BLOCKING_KEYS.iter().find(|k| entry.contains_key(**k)) {
        return Some(format!(
            "its `{key}` changes how it runs and toolward does not support it; add it to `toolward.json` by hand without it"
        ));
    }
    if !entry.contains_key("command") && !entry.contains_key("url") {
        return Some("it has neither `command` nor `url`".to_owned());
    }
    for key in IMPORTED_KEYS {
        let Some(value) = entry.get(*key) else {
            continue;
        };
        if let Some(variable) = client_variable(value, *key == "env") {
            return Some(format!(
                "its `{key}` uses the client's variable `{}`, which only the client can fill in; toolward does not guess it: add the server by hand",
                crate::text::escape(&variable)
            ));
        }
    }
    None
}

/// The first client variable (`${input:…}`, `${workspaceFolder}`, …) in `value`. In `env`,
/// `${env:NAME}` is allowed: the client fills it from its environment and it moves into the
/// toolward entry as it is.
fn client_variable(value: &Value, in_env: bool) -> Option<String> {
    match value {
        Value::String(text) => {
            let mut rest = text.as_str();
            while let Some(start) = rest.find("${") {
                let after = rest.get(start + 2..).unwrap_or_default();
                let end = after.find('}').unwrap_or(after.len());
                let name = after.get(..end).unwrap_or_default();
                if !(in_env && name.starts_with("env:")) {
                    return Some(format!("${{{name}}}"));
                }
                rest = after.get(end..).unwrap_or_default();
            }
            None
        }
        Value::Array(items) => items.iter().find_map(|v| client_variable(v, in_env)),
        Value::Object(map) => map.values().find_map(|v| client_variable(v, in_env)),
        _ => None,
    }
}

fn same_server(a: &Map<String, Value>, b: &Map<String, Value>) -> bool {
    ["command", "args", "url", "env", "headers"]
        .iter()
        .all(|k| a.get(*k) == b.get(*k))
}

/// The `mcpServers` of `toolward.json` for `chosen`, and the value of each `${VAR}` it uses
/// (the client's values, for pinning now; they are never written to toolward's files).
///
/// Each `env` value becomes `${NAME}` (the variable's own name) and each header
/// `${SERVER_HEADER}`, upper-cased with `_` for anything else; a name two servers would give
/// different values is prefixed with the server's name.
#[must_use]
pub fn toolward_servers(chosen: &[Candidate]) -> (Map<String, Value>, BTreeMap<String, String>) {
    // How many chosen servers give each env name a different value.
    let mut values_of: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for candidate in chosen {
        if let Some(Value::Object(env)) = candidate.entry.get("env") {
            for (name, value) in env {
                let seen = values_of.entry(name.as_str()).or_default();
                if !seen.contains(&value) {
                    seen.push(value);
                }
            }
        }
    }
    let mut servers = Map::new();
    let mut secrets = BTreeMap::new();
    for candidate in chosen {
        let mut entry = Map::new();
        for key in IMPORTED_KEYS {
            let Some(value) = candidate.entry.get(*key) else {
                continue;
            };
            let value = match (*key, value) {
                ("env" | "headers", Value::Object(values)) => {
                    let mut refs = Map::new();
                    for (name, secret) in values {
                        let shared = values_of.get(name.as_str()).is_some_and(|v| v.len() > 1);
                        let var = if *key == "headers" || shared {
                            variable_name(&format!("{}_{name}", candidate.name))
                        } else {
                            variable_name(name)
                        };
                        if let Value::String(secret) = secret {
                            secrets.insert(var.clone(), secret.clone());
                        }
                        refs.insert(name.clone(), Value::String(format!("${{{var}}}")));
                    }
                    Value::Object(refs)
                }
                ("type", Value::String(kind)) if !["stdio", "http"].contains(&kind.as_str()) => {
                    continue;
                }
                _ => value.clone(),
            };
            entry.insert((*key).to_owned(), value);
        }
        servers.insert(candidate.name.clone(), Value::Object(entry));
    }
    (servers, secrets)
}

/// `text` as an environment variable name: upper-case ASCII letters, digits and `_`, not
/// starting with a digit.
fn variable_name(text: &str) -> String {
    let mut name: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    if name.chars().next().is_none_or(|c| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client_config::{ClientServer, client_by_id};
    use serde_json::json;

    fn found(id: &str, servers: Value) -> FoundClient {
        FoundClient {
            spec: client_by_id(id).unwrap(),
            path: std::path::PathBuf::from("/x"),
            servers: servers
                .as_object()
                .unwrap()
                .iter()
                .map(|(name, entry)| ClientServer {
                    name: name.clone(),
                    entry: entry.as_object().unwrap().clone(),
                })
                .collect(),
        }
    }

    #[test]
    fn input_variables_and_clashing_names_are_reported_not_imported() {
        let clients = [
            found(
                "vscode",
                json!({
                    "gh": {"command": "docker", "env": {"TOKEN": "${input:gh-token}"}},
                    "fs": {"type": "stdio", "command": "npx", "args": ["a"]},
                    "ws": {"command": "node", "args": ["${workspaceFolder}/s.js"]},
                }),
            ),
            found(
                "cursor",
                json!({
                    "fs": {"command": "npx", "args": ["b"]},
                    "same": {"command": "x"},
                }),
            ),
            found("windsurf", json!({"same": {"command": "x"}})),
        ];
        let (chosen, skipped) = candidates(&clients, &[], &[]);
        let names: Vec<&str> = chosen.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["same"]);
        assert_eq!(chosen[0].also_in, ["windsurf"]);
        let reasons: Vec<(&str, &str)> = skipped
            .iter()
            .map(|s| (s.name.as_str(), s.reason.as_str()))
            .collect();
        assert!(
            reasons
                .iter()
                .any(|(n, r)| *n == "gh" && r.contains("${input:gh-token}"))
        );
        assert!(
            reasons
                .iter()
                .any(|(n, r)| *n == "ws" && r.contains("${workspaceFolder}"))
        );
        assert!(
            reasons
                .iter()
                .any(|(n, r)| *n == "fs" && r.contains("vscode, cursor"))
        );
    }

    #[test]
    fn env_values_become_variable_references_and_stay_out_of_the_config() {
        let clients = [found(
            "claude-desktop",
            json!({
                "a": {"command": "x", "env": {"TOKEN": "one", "PLAIN": "p"}, "timeout": 5},
                "b": {"url": "https://e/mcp", "headers": {"Authorization": "Bearer two"}, "env": {"TOKEN": "other"}},
            }),
        )];
        let (chosen, _) = candidates(&clients, &[], &[]);
        assert_eq!(chosen[0].dropped, ["timeout"]);
        let (servers, secrets) = toolward_servers(&chosen);
        let text = serde_json::to_string(&servers).unwrap();
        for secret in ["one", "two", "other"] {
            assert!(!text.contains(&format!("\"{secret}\"")), "{text}");
        }
        assert_eq!(servers["a"]["env"]["TOKEN"], "${A_TOKEN}");
        assert_eq!(servers["a"]["env"]["PLAIN"], "${PLAIN}");
        assert_eq!(
            servers["b"]["headers"]["Authorization"],
            "${B_AUTHORIZATION}"
        );
        assert_eq!(secrets["A_TOKEN"], "one");
        assert_eq!(secrets["B_TOKEN"], "other");
        assert_eq!(secrets["B_AUTHORIZATION"], "Bearer two");
    }

    #[test]
    fn a_project_file_is_imported_only_when_named() {
        let clients = [found("project", json!({"p": {"command": "x"}}))];
        assert!(candidates(&clients, &[], &[]).0.is_empty());
        assert_eq!(
            candidates(&clients, &["project".to_owned()], &[]).0.len(),
            1
        );
    }
}
