//! The registry: the tools a load registered, exactly as the model will see them, with the
//! upstream connection each belongs to. Built by [`crate::load`], read by the call path and
//! the gateway. Immutable after the load: the tool set is fixed until the next load.

use std::collections::BTreeMap;

use crate::canonical::Value;
use crate::component::{Annotations, Effect};
use crate::schema::Dialect;
use crate::transport::Upstream;

/// One registered tool.
#[derive(Debug, Clone)]
pub struct RegisteredTool {
    /// The server's name in the operator's config.
    pub server: String,
    /// The tool's name as the server knows it.
    pub upstream_name: String,
    /// The name the model sees: `server` + separator + `upstream_name` (default `__`).
    pub exposed_name: String,
    /// The operator's effect.
    pub effect: Effect,
    /// The description the model sees: the operator's override, or the server's text.
    pub description: String,
    /// The schema the model sees: the server's `inputSchema` with denied and fixed
    /// parameters removed (see [`crate::schema::narrow`]).
    pub input_schema: Value,
    /// The server's `inputSchema` as pinned, for validating the final arguments.
    pub original_schema: Value,
    /// The JSON Schema dialect of the input schema.
    pub dialect: Dialect,
    /// The server's `outputSchema`, when it declared one: `structuredContent` is checked
    /// against it.
    pub output_schema: Option<Value>,
    /// Parameters the model may not set.
    pub denied: Vec<String>,
    /// Parameters the host sets, with their values.
    pub fixed: Vec<(String, Value)>,
    /// The server's annotations as received.
    pub annotations: Annotations,
    /// SHA-256 of the server's description, lowercase hex (the pin).
    pub description_sha256: String,
    /// SHA-256 of the canonical input schema, lowercase hex (the pin).
    pub input_schema_sha256: String,
}

/// The registered tools by exposed name, and the live upstream connections by server name.
#[derive(Debug, Default)]
pub struct Registry {
    tools: BTreeMap<String, RegisteredTool>,
    upstreams: BTreeMap<String, Upstream>,
    /// Why a tool the load kept out is absent, by the name it would have been exposed as.
    absent: BTreeMap<String, String>,
    /// Why a server has no tools, by the prefix of its exposed names (`server` + separator).
    unavailable: BTreeMap<String, (String, String)>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds a tool under its exposed name; returns the tool back when the name is taken.
    ///
    /// # Errors
    /// The tool itself, when another tool already has its exposed name.
    pub fn insert_tool(&mut self, tool: RegisteredTool) -> Result<(), Box<RegisteredTool>> {
        if self.tools.contains_key(&tool.exposed_name) {
            return Err(Box::new(tool));
        }
        self.tools.insert(tool.exposed_name.clone(), tool);
        Ok(())
    }

    /// Removes a tool by exposed name (used when a later check refuses it).
    pub fn remove_tool(&mut self, exposed_name: &str) -> Option<RegisteredTool> {
        self.tools.remove(exposed_name)
    }

    /// Keeps the connection to `server`.
    pub fn insert_upstream(&mut self, server: &str, upstream: Upstream) {
        self.upstreams.insert(server.to_owned(), upstream);
    }

    /// Registered tools, sorted by exposed name.
    pub fn tools(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.tools.values()
    }

    /// The tool the model calls `exposed_name`.
    pub fn get(&self, exposed_name: &str) -> Option<&RegisteredTool> {
        self.tools.get(exposed_name)
    }

    /// The connection to `server`.
    pub fn upstream(&self, server: &str) -> Option<&Upstream> {
        self.upstreams.get(server)
    }

    /// Server names with a live connection.
    pub fn servers(&self) -> impl Iterator<Item = &str> {
        self.upstreams.keys().map(String::as_str)
    }

    /// Records why the tool that would be exposed as `exposed_name` is absent (refused or
    /// unclassified at load), so that a call of it is answered with the reason.
    pub fn note_absent(&mut self, exposed_name: String, why: String) {
        self.absent.insert(exposed_name, why);
    }

    /// Records why `server`, whose tools would be exposed as `{server}{separator}…`, has no
    /// tools (it did not start, or its listing was refused).
    pub fn note_unavailable(&mut self, server: &str, separator: &str, why: String) {
        self.unavailable
            .insert(format!("{server}{separator}"), (server.to_owned(), why));
    }

    /// Why `exposed_name` is not a registered tool, when the load said: the tool's refusal,
    /// or its server's failure. `None` for a name toolward knows nothing of.
    pub fn why_absent(&self, exposed_name: &str) -> Option<String> {
        if let Some(why) = self.absent.get(exposed_name) {
            return Some(why.clone());
        }
        self.unavailable
            .iter()
            .find(|(prefix, _)| exposed_name.starts_with(prefix.as_str()))
            .map(|(_, (server, why))| format!("server `{server}` did not load: {why}"))
    }

    /// Closes every upstream connection (each ends its server's process group).
    pub async fn close(self) {
        for (_, upstream) in self.upstreams {
            upstream.close().await;
        }
    }
}
