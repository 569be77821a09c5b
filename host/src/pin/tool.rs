//! `toolward pin --tool SERVER/TOOL`: accepting one changed tool. The server is listed again
//! and only that tool's entry is taken from the new listing (pinned again, pinned for the
//! first time, or removed when the server no longer lists it); every other tool, the server's
//! identity and the components keep their pins.

use crate::config::Config;
use crate::manifest::Manifest;

/// Why one tool could not be re-pinned.
#[derive(Debug, thiserror::Error)]
pub enum ToolPinError {
    /// The manifest is missing or cannot be read.
    #[error("manifest `{path}`: {reason}")]
    Manifest {
        /// Its path.
        path: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The config has no such server.
    #[error("server `{server}` is not in the config")]
    NotInConfig {
        /// The server.
        server: String,
    },
    /// `SERVER/TOOL` was not given in that form.
    #[error("`{given}` is not `SERVER/TOOL` (for example `fs/read_file`)")]
    NotServerTool {
        /// What was given.
        given: String,
    },
    /// The server has no pins yet.
    #[error(
        "server `{server}` is not pinned yet: run `toolward pin --server {server}` and review the whole server"
    )]
    ServerNotPinned {
        /// The server.
        server: String,
    },
    /// The server's new listing could not be read.
    #[error("server `{server}` could not be listed again: {reason}")]
    NotListed {
        /// The server.
        server: String,
        /// Why.
        reason: String,
    },
    /// Neither the pins nor the new listing have the tool.
    #[error("tool `{tool}` of server `{server}` is neither pinned nor listed by the server")]
    UnknownTool {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
    },
    /// `pin` refuses the tool as the server lists it now (malformed).
    #[error("tool `{tool}` of server `{server}` is refused as listed now: {reason}")]
    Refused {
        /// The server.
        server: String,
        /// The tool.
        tool: String,
        /// Why.
        reason: String,
    },
}

/// One tool's change, ready to be accepted: the manifest as it is, the manifest with only
/// that tool pinned again, and what differs.
#[derive(Debug)]
pub struct ToolChange {
    /// The manifest as it is.
    pub existing: Manifest,
    /// The manifest with only the tool taken from the server's listing now.
    pub updated: Manifest,
    /// What accepting changes; empty when the tool matches its pin.
    pub diff: crate::manifest::ManifestDiff,
}

/// What `toolward pin --tool SERVER/TOOL` does before it asks: reads `config`'s manifest,
/// lists `server` again (with `component_hashes`, the components' hashes as the load
/// computes them, for the manifest), and takes only `tool` from the new listing
/// ([`repin_tool`]). Nothing is written: [`ToolChange::updated`] is what to write to accept
/// it.
///
/// # Errors
/// [`ToolPinError`]: no manifest or one that cannot be read, a server the config does not
/// have, a server that cannot be listed, or what [`repin_tool`] refuses.
pub async fn tool_change(
    config: &Config,
    server: &str,
    tool: &str,
    component_hashes: std::collections::BTreeMap<String, String>,
) -> Result<ToolChange, ToolPinError> {
    if !config.manifest.exists() {
        return Err(ToolPinError::Manifest {
            path: config.manifest.clone(),
            reason: String::from("there is none: run `toolward pin` and review what it writes"),
        });
    }
    let existing = Manifest::read(&config.manifest).map_err(|error| ToolPinError::Manifest {
        path: config.manifest.clone(),
        reason: crate::text::error_chain(&error),
    })?;
    if !config.servers.contains_key(server) {
        return Err(ToolPinError::NotInConfig {
            server: server.to_owned(),
        });
    }
    let outcome = crate::pin::pin(config, Some(server), Some(&existing), component_hashes)
        .await
        .map_err(|error| ToolPinError::NotListed {
            server: server.to_owned(),
            reason: crate::text::error_chain(&error),
        })?;
    if let Some(error) = outcome.failures.get(server) {
        return Err(ToolPinError::NotListed {
            server: server.to_owned(),
            reason: crate::text::error_chain(error),
        });
    }
    let updated = repin_tool(&existing, &outcome.manifest, server, tool)?;
    let diff = crate::manifest::diff(&existing, &updated);
    Ok(ToolChange {
        existing,
        updated,
        diff,
    })
}

/// `SERVER/TOOL` split at its first `/` (server names have none; a tool's may).
///
/// # Errors
///
/// [`ToolPinError::NotServerTool`] without a `/`, or with an empty side.
pub fn parse_server_tool(given: &str) -> Result<(&str, &str), ToolPinError> {
    match given.split_once('/') {
        Some((server, tool)) if !server.is_empty() && !tool.is_empty() => Ok((server, tool)),
        _ => Err(ToolPinError::NotServerTool {
            given: given.to_owned(),
        }),
    }
}

/// `existing` with only `tool` of `server` taken from `fresh` (the server pinned again).
///
/// # Errors
///
/// [`ToolPinError`]: the server not pinned in `existing` or missing from `fresh`, the tool in
/// neither, or refused in `fresh`.
pub fn repin_tool(
    existing: &Manifest,
    fresh: &Manifest,
    server: &str,
    tool: &str,
) -> Result<Manifest, ToolPinError> {
    let Some(old) = existing.servers.get(server) else {
        return Err(ToolPinError::ServerNotPinned {
            server: server.to_owned(),
        });
    };
    let Some(new) = fresh.servers.get(server) else {
        return Err(ToolPinError::NotListed {
            server: server.to_owned(),
            reason: "it failed to start or list".to_owned(),
        });
    };
    if let Some(reason) = new.refused.get(tool) {
        return Err(ToolPinError::Refused {
            server: server.to_owned(),
            tool: tool.to_owned(),
            reason: reason.clone(),
        });
    }
    let mut server_pins = old.clone();
    match new.tools.get(tool) {
        Some(pinned) => {
            server_pins.tools.insert(tool.to_owned(), pinned.clone());
        }
        None if old.tools.contains_key(tool) || old.refused.contains_key(tool) => {
            server_pins.tools.remove(tool);
        }
        None => {
            return Err(ToolPinError::UnknownTool {
                server: server.to_owned(),
                tool: tool.to_owned(),
            });
        }
    }
    server_pins.refused.remove(tool);
    let mut out = existing.clone();
    out.servers.insert(server.to_owned(), server_pins);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{PinnedServer, PinnedTool};

    fn tool(description: &str) -> PinnedTool {
        PinnedTool {
            description: description.to_owned(),
            description_sha256: crate::canonical::sha256_hex(description.as_bytes()),
            input_schema: crate::canonical::Value::from_serde_json(
                &serde_json::json!({"type": "object"}),
            ),
            input_schema_sha256: "s".to_owned(),
            output_schema_sha256: None,
            annotations: None,
        }
    }

    fn manifest(tools: &[(&str, &str)], version: &str) -> Manifest {
        let mut m = Manifest::default();
        m.servers.insert(
            "fs".to_owned(),
            PinnedServer {
                server_name: "fs".to_owned(),
                server_version: version.to_owned(),
                protocol_version: "2025-06-18".to_owned(),
                tools: tools
                    .iter()
                    .map(|(n, d)| ((*n).to_owned(), tool(d)))
                    .collect(),
                refused: Default::default(),
            },
        );
        m
    }

    #[test]
    fn repin_tool_takes_only_that_tool_and_keeps_every_other_pin() {
        let existing = manifest(&[("a", "old a"), ("b", "old b")], "1");
        let fresh = manifest(&[("a", "new a"), ("b", "new b"), ("c", "new c")], "2");
        let out = repin_tool(&existing, &fresh, "fs", "a").unwrap();
        let fs = &out.servers["fs"];
        assert_eq!(fs.tools["a"].description, "new a");
        assert_eq!(fs.tools["b"].description, "old b");
        assert!(!fs.tools.contains_key("c"));
        assert_eq!(fs.server_version, "1");
        let diff = crate::manifest::diff(&existing, &out);
        assert_eq!(diff.servers.len(), 1);
        assert_eq!(diff.servers[0].tools.len(), 1);
    }

    #[test]
    fn repin_tool_removes_a_tool_the_server_dropped_and_refuses_an_unknown_one() {
        let existing = manifest(&[("a", "a"), ("b", "b")], "1");
        let fresh = manifest(&[("a", "a")], "1");
        let out = repin_tool(&existing, &fresh, "fs", "b").unwrap();
        assert!(!out.servers["fs"].tools.contains_key("b"));
        assert!(matches!(
            repin_tool(&existing, &fresh, "fs", "zzz"),
            Err(ToolPinError::UnknownTool { .. })
        ));
        assert!(matches!(
            repin_tool(&existing, &fresh, "git", "a"),
            Err(ToolPinError::ServerNotPinned { .. })
        ));
        assert!(parse_server_tool("fs").is_err());
        assert_eq!(parse_server_tool("fs/a/b").unwrap(), ("fs", "a/b"));
    }
}
