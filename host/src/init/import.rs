//! Turning the servers of clients' configs into `mcpServers` entries of `toolward.json`:
//! which can be imported as they are, which cannot and why, and which `${VAR}` each secret
//! becomes.

use std::collections::{BTreeMap, BTreeSet};

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

/// A secret's variable named other than its first choice, because another secret of the
/// chosen servers wanted the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renamed {
    /// The server whose secret it is.
    pub server: String,
    /// Where the secret is in the server's entry: `env` or `headers`.
    pub place: &'static str,
    /// Its key there (the variable or header name).
    pub key: String,
    /// The name it would have had.
    pub wanted: String,
    /// The name it has.
    pub variable: String,
}

/// What [`toolward_servers`] makes of the chosen servers.
#[derive(Debug, Clone, Default)]
pub struct Imported {
    /// The `mcpServers` of `toolward.json`, each secret as `${VAR}`.
    pub servers: Map<String, Value>,
    /// The value of each `${VAR}` (the client's values, for pinning now; they are never
    /// written to toolward's files).
    pub secrets: BTreeMap<String, String>,
    /// The variables named with a suffix because their first choice was taken.
    pub renamed: Vec<Renamed>,
}

/// Names of the environment toolward's own process (or its loader) reads. The toolward entry's
/// `env` is that process's environment, so a server's variable by one of these names is
/// prefixed with the server's name: its value reaches that server only. Besides the loader's
/// ([`crate::confine::is_loader_variable`]): the proxies and certificates toolward's HTTP
/// client reads (a shared project's `HTTPS_PROXY` would route toolward's own requests to
/// remote servers, tokens included, through whoever wrote it), and the time zone.
const OWN_VARIABLES: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    "USER",
    "SHELL",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "TZ",
];
/// Prefixes of the same (the loader's `LD_PRELOAD`, toolward's own settings, Rust's runtime,
/// TLS certificates, the XDG folders, OpenTelemetry's exporter settings).
const OWN_PREFIXES: &[&str] = &[
    "LD_", "DYLD_", "TOOLWARD_", "RUST_", "MALLOC_", "SSL_", "XDG_", "OTEL_",
];

fn own_variable(name: &str) -> bool {
    // Proxy variables are read in either case (`https_proxy`).
    let upper = name.to_ascii_uppercase();
    OWN_VARIABLES.contains(&upper.as_str())
        || OWN_PREFIXES.iter().any(|p| upper.starts_with(p))
        || crate::confine::is_loader_variable(name)
}

/// `name`, or `SERVER_` before it when the server's name and the key make a variable a
/// process reads about itself: server `ld` and header `preload` make `LD_PRELOAD`, which
/// after `client connect` the client sets on toolward itself (found by an attack: it loaded
/// a library into the gateway, outside every confinement).
fn not_own(name: String) -> String {
    if own_variable(&name) {
        format!("SERVER_{name}")
    } else {
        name
    }
}

/// One secret of a chosen server: an `env` value or a header.
struct Secret<'c> {
    /// Index of its server in `chosen`.
    server: usize,
    server_name: &'c str,
    place: &'static str,
    key: &'c str,
    /// The name it wants.
    wanted: String,
    /// Whether `wanted` is the server's own variable name, unchanged.
    exact: bool,
}

/// The `mcpServers` of `toolward.json` for `chosen`, the value of each `${VAR}` it uses,
/// and the variables renamed.
///
/// Every secret (each `env` value and each header of each server) gets a variable of its
/// own, so that after `client connect` each server receives its own values and no other's.
/// The name wanted is the `env` key itself, or `SERVER_HEADER` for a header, upper-cased with
/// `_` for anything else; an `env` key that more than one chosen server has, or that toolward's
/// own process reads (`OWN_VARIABLES`), is prefixed with the server's name. Names are
/// compared as they end up, after that: when two secrets want the same, the one whose name is
/// its own `env` key unchanged keeps it, then the first by server, place and key; the others
/// get the first free `_2`, `_3`, … and are listed in [`Imported::renamed`].
#[must_use]
pub fn toolward_servers(chosen: &[Candidate]) -> Imported {
    // How many chosen servers have each env key.
    let mut servers_with: BTreeMap<&str, usize> = BTreeMap::new();
    for candidate in chosen {
        if let Some(Value::Object(env)) = candidate.entry.get("env") {
            for name in env.keys() {
                *servers_with.entry(name.as_str()).or_default() += 1;
            }
        }
    }
    let mut secrets_of = Vec::new();
    for (index, candidate) in chosen.iter().enumerate() {
        for place in ["env", "headers"] {
            let Some(Value::Object(values)) = candidate.entry.get(place) else {
                continue;
            };
            for key in values.keys() {
                let own = place == "env"
                    && servers_with.get(key.as_str()).is_none_or(|n| *n < 2)
                    && !own_variable(&variable_name(key));
                let wanted = if own {
                    variable_name(key)
                } else {
                    not_own(variable_name(&format!("{}_{key}", candidate.name)))
                };
                secrets_of.push(Secret {
                    server: index,
                    server_name: &candidate.name,
                    place,
                    key,
                    exact: own && wanted == *key,
                    wanted,
                });
            }
        }
    }
    secrets_of.sort_by(|a, b| {
        (!a.exact, a.server_name, a.place, a.key).cmp(&(!b.exact, b.server_name, b.place, b.key))
    });
    // A suffixed name never takes a name another secret wants as it is.
    let wanted: BTreeSet<&str> = secrets_of.iter().map(|s| s.wanted.as_str()).collect();
    let mut taken = BTreeSet::new();
    let mut variables: BTreeMap<(usize, &str, &str), String> = BTreeMap::new();
    let mut renamed = Vec::new();
    for secret in &secrets_of {
        let variable = if taken.contains(&secret.wanted) {
            let free = (2usize..)
                .map(|n| format!("{}_{n}", secret.wanted))
                .find(|name| {
                    !taken.contains(name) && !wanted.contains(name.as_str()) && !own_variable(name)
                })
                .unwrap_or_default();
            renamed.push(Renamed {
                server: secret.server_name.to_owned(),
                place: secret.place,
                key: secret.key.to_owned(),
                wanted: secret.wanted.clone(),
                variable: free.clone(),
            });
            free
        } else {
            secret.wanted.clone()
        };
        taken.insert(variable.clone());
        variables.insert((secret.server, secret.place, secret.key), variable);
    }
    renamed.sort_by(|a, b| (&a.server, a.place, &a.key).cmp(&(&b.server, b.place, &b.key)));
    let mut servers = Map::new();
    let mut secrets = BTreeMap::new();
    for (index, candidate) in chosen.iter().enumerate() {
        let mut entry = Map::new();
        for key in IMPORTED_KEYS {
            let Some(value) = candidate.entry.get(*key) else {
                continue;
            };
            let value = match (*key, value) {
                ("env" | "headers", Value::Object(values)) => {
                    let mut refs = Map::new();
                    for (name, secret) in values {
                        let Some(var) = variables.get(&(index, *key, name.as_str())) else {
                            continue;
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
    Imported {
        servers,
        secrets,
        renamed,
    }
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
        let Imported {
            servers,
            secrets,
            renamed,
        } = toolward_servers(&chosen);
        assert!(renamed.is_empty(), "{renamed:?}");
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
    fn secrets_whose_names_clash_once_normalised_each_get_their_own_variable_and_are_reported() {
        let clients = [found(
            "claude-desktop",
            json!({
                "github": {"url": "https://e/mcp", "headers": {"Authorization": "Bearer gh", "api-key": "gh-key"}},
                "docs": {"command": "d", "env": {"GITHUB_AUTHORIZATION": "docs-auth", "API_KEY": "docs-key"}},
                "notes": {"command": "n", "env": {"api-key": "notes-key", "API_KEY_2": "notes-2"}},
            }),
        )];
        let (chosen, _) = candidates(&clients, &[], &[]);
        let Imported {
            servers,
            secrets,
            renamed,
        } = toolward_servers(&chosen);
        // The server's own variable name keeps it; the derived names take a suffix, never one
        // another secret wants as it is (`API_KEY_2`).
        assert_eq!(
            servers["docs"]["env"]["GITHUB_AUTHORIZATION"],
            "${GITHUB_AUTHORIZATION}"
        );
        assert_eq!(servers["docs"]["env"]["API_KEY"], "${API_KEY}");
        assert_eq!(
            servers["github"]["headers"]["Authorization"],
            "${GITHUB_AUTHORIZATION_2}"
        );
        assert_eq!(servers["github"]["headers"]["api-key"], "${GITHUB_API_KEY}");
        assert_eq!(servers["notes"]["env"]["api-key"], "${API_KEY_3}");
        assert_eq!(servers["notes"]["env"]["API_KEY_2"], "${API_KEY_2}");
        let values: Vec<(&str, &str)> = secrets
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            values,
            [
                ("API_KEY", "docs-key"),
                ("API_KEY_2", "notes-2"),
                ("API_KEY_3", "notes-key"),
                ("GITHUB_API_KEY", "gh-key"),
                ("GITHUB_AUTHORIZATION", "docs-auth"),
                ("GITHUB_AUTHORIZATION_2", "Bearer gh"),
            ]
        );
        let renames: Vec<(&str, &str, &str, &str)> = renamed
            .iter()
            .map(|r| {
                (
                    r.server.as_str(),
                    r.key.as_str(),
                    r.wanted.as_str(),
                    r.variable.as_str(),
                )
            })
            .collect();
        assert_eq!(
            renames,
            [
                (
                    "github",
                    "Authorization",
                    "GITHUB_AUTHORIZATION",
                    "GITHUB_AUTHORIZATION_2"
                ),
                ("notes", "api-key", "API_KEY", "API_KEY_3"),
            ]
        );
    }

    #[test]
    fn variable_names_do_not_depend_on_the_order_servers_are_chosen_in() {
        let servers = json!({
            "b": {"command": "x", "env": {"a-b": "1"}},
            "a": {"command": "x", "env": {"a.b": "2"}},
            "c": {"url": "https://e", "headers": {"x": "3"}},
            "c-x": {"command": "x", "env": {"C.X": "4"}},
        });
        let (mut chosen, _) = candidates(&[found("claude-desktop", servers)], &[], &[]);
        let forward = toolward_servers(&chosen);
        chosen.reverse();
        let backward = toolward_servers(&chosen);
        assert_eq!(forward.servers, backward.servers);
        assert_eq!(forward.secrets, backward.secrets);
        assert_eq!(forward.renamed, backward.renamed);
        assert_eq!(forward.servers["a"]["env"]["a.b"], "${A_B}");
        assert_eq!(forward.servers["b"]["env"]["a-b"], "${A_B_2}");
        assert_eq!(forward.servers["c"]["headers"]["x"], "${C_X}");
        assert_eq!(forward.servers["c-x"]["env"]["C.X"], "${C_X_2}");
    }

    #[test]
    fn a_variable_toolwards_own_process_or_loader_reads_is_prefixed_with_its_server() {
        for name in ["GLIBC_TUNABLES", "GCONV_PATH", "https_proxy", "SSL_CERT_FILE", "XDG_RUNTIME_DIR", "OTEL_EXPORTER_OTLP_ENDPOINT"] {
            assert!(own_variable(name), "{name}");
        }
        assert!(!own_variable("GITHUB_TOKEN"));
    }

    #[test]
    fn a_server_name_and_key_that_make_a_variable_a_process_reads_about_itself_are_prefixed() {
        let servers = json!({
            "ld": {"url": "https://e", "headers": {"preload": "/evil.so", "audit": "/a.so"}},
            "glibc": {"url": "https://e", "headers": {"tunables": "x"}},
            "https": {"command": "x", "env": {"PROXY": "http://evil", "proxy": "http://evil2"}},
            "toolward": {"url": "https://e", "headers": {"bin": "/evil"}},
        });
        let (chosen, _) = candidates(&[found("claude-desktop", servers)], &[], &[]);
        let imported = toolward_servers(&chosen);
        assert!(!imported.secrets.is_empty());
        for name in imported.secrets.keys() {
            assert!(!own_variable(name), "{name}");
        }
        assert_eq!(
            imported.servers["ld"]["headers"]["preload"],
            "${SERVER_LD_PRELOAD}"
        );
    }

    #[test]
    fn a_variable_toolwards_own_process_reads_is_prefixed_with_its_server() {
        let clients = [found(
            "claude-desktop",
            json!({"s": {"command": "x", "env": {"PATH": "/opt/s", "LD_PRELOAD": "/x.so", "TOKEN": "t"}}}),
        )];
        let (chosen, _) = candidates(&clients, &[], &[]);
        let servers = toolward_servers(&chosen).servers;
        assert_eq!(servers["s"]["env"]["PATH"], "${S_PATH}");
        assert_eq!(servers["s"]["env"]["LD_PRELOAD"], "${S_LD_PRELOAD}");
        assert_eq!(servers["s"]["env"]["TOKEN"], "${TOKEN}");
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
