//! The registry: the tools a load registered, exactly as the model will see them, with the
//! upstream connection each belongs to. Built by [`crate::load`], read by the call path and
//! the gateway. The tool set is fixed at load: a restarted server (see [`crate::supervise`])
//! gets its connection replaced, and a tool whose pin it no longer matches is withdrawn,
//! never added or changed.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::broadcast;

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
    /// parameters removed (see `crate::schema::narrow`). The same allocation as
    /// `original_schema` when nothing was removed: a registry of many tools holds each
    /// schema once (BENCHMARKS.md §6).
    pub input_schema: Arc<Value>,
    /// The server's `inputSchema` as pinned, for validating the final arguments.
    pub original_schema: Arc<Value>,
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

/// Where a loaded server's connection stands.
#[derive(Debug, Clone)]
pub enum Connection {
    /// Connected.
    Up(Upstream),
    /// Failed and being restarted: calls fail with `reason` until it is back.
    Restarting {
        /// Why it is down, and which attempt is under way.
        reason: String,
    },
    /// Failed for good: calls fail with `reason`.
    Down {
        /// Why.
        reason: String,
    },
}

/// How many messages for the client the registry keeps for a slow reader.
const CLIENT_MESSAGES: usize = 64;

/// The registered tools by exposed name, and the upstream connections by server name.
#[derive(Debug)]
pub struct Registry {
    tools: BTreeMap<String, RegisteredTool>,
    upstreams: BTreeMap<String, Arc<RwLock<Connection>>>,
    /// Tools taken out after the load (a restarted server no longer matched their pin), by
    /// exposed name, with the reason.
    withdrawn: RwLock<BTreeMap<String, String>>,
    /// What the client should hear about after the load (a server failed, restarted,
    /// changed its tool list), as one-line warnings.
    client_messages: broadcast::Sender<String>,
    /// The latest [`CLIENT_MESSAGES`] of them with their time (milliseconds since the Unix
    /// epoch), for clients that are not connected when they are said (2026-07-28 clients
    /// read them in `server/discover`).
    recent: Mutex<VecDeque<(u64, String)>>,
    /// Why a tool the load kept out is absent, by the name it would have been exposed as.
    absent: BTreeMap<String, String>,
    /// Why a server has no tools, by the prefix of its exposed names (`server` + separator).
    unavailable: BTreeMap<String, (String, String)>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry {
            tools: BTreeMap::new(),
            upstreams: BTreeMap::new(),
            withdrawn: RwLock::new(BTreeMap::new()),
            client_messages: broadcast::Sender::new(CLIENT_MESSAGES),
            recent: Mutex::new(VecDeque::with_capacity(CLIENT_MESSAGES)),
            absent: BTreeMap::new(),
            unavailable: BTreeMap::new(),
        }
    }
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
        self.upstreams.insert(
            server.to_owned(),
            Arc::new(RwLock::new(Connection::Up(upstream))),
        );
    }

    /// Registered tools, sorted by exposed name.
    pub fn tools(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.tools.values()
    }

    /// The tool the model calls `exposed_name`.
    pub fn get(&self, exposed_name: &str) -> Option<&RegisteredTool> {
        self.tools.get(exposed_name)
    }

    /// The live connection to `server`, or why there is none (`None`: the load did not
    /// connect it).
    pub fn upstream(&self, server: &str) -> Option<Result<Upstream, String>> {
        Some(match self.connection(server)? {
            Connection::Up(upstream) => Ok(upstream),
            Connection::Restarting { reason } | Connection::Down { reason } => Err(reason),
        })
    }

    /// Where `server`'s connection stands; `None` when the load did not connect it.
    pub fn connection(&self, server: &str) -> Option<Connection> {
        let slot = self.upstreams.get(server)?;
        let connection = slot.read().unwrap_or_else(PoisonError::into_inner);
        Some(connection.clone())
    }

    /// Replaces `server`'s connection (a restart). Ignored for a server the load did not
    /// connect.
    pub fn set_connection(&self, server: &str, connection: Connection) {
        if let Some(slot) = self.upstreams.get(server) {
            *slot.write().unwrap_or_else(PoisonError::into_inner) = connection;
        }
    }

    /// Marks `server` as being restarted, with the reason calls fail with meanwhile; `false`
    /// (and nothing changes) when it is down for good or unknown.
    pub fn restarting(&self, server: &str, reason: String) -> bool {
        let Some(slot) = self.upstreams.get(server) else {
            return false;
        };
        let mut connection = slot.write().unwrap_or_else(PoisonError::into_inner);
        if matches!(*connection, Connection::Down { .. }) {
            return false;
        }
        *connection = Connection::Restarting { reason };
        true
    }

    /// Puts a restarted server's connection in place, unless the registry was closed
    /// meanwhile: then the connection comes back, for the caller to close.
    ///
    /// # Errors
    /// `upstream` itself, when `server` is down for good or unknown.
    pub fn restarted(&self, server: &str, upstream: Upstream) -> Result<(), Upstream> {
        let Some(slot) = self.upstreams.get(server) else {
            return Err(upstream);
        };
        let mut connection = slot.write().unwrap_or_else(PoisonError::into_inner);
        if matches!(*connection, Connection::Down { .. }) {
            return Err(upstream);
        }
        *connection = Connection::Up(upstream);
        Ok(())
    }

    /// Server names the load connected.
    pub fn servers(&self) -> impl Iterator<Item = &str> {
        self.upstreams.keys().map(String::as_str)
    }

    /// Takes the tool exposed as `exposed_name` out of service, with the reason calls of it
    /// are refused with. The tool stays listed: the tool set is fixed at load.
    pub fn withdraw(&self, exposed_name: &str, reason: String) {
        self.withdrawn
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(exposed_name.to_owned(), reason);
    }

    /// Why the tool exposed as `exposed_name` was withdrawn, if it was.
    pub fn withdrawn(&self, exposed_name: &str) -> Option<String> {
        self.withdrawn
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(exposed_name)
            .cloned()
    }

    /// Sends a one-line warning to every client listening (see
    /// [`Registry::client_messages`]), and to the log.
    pub fn tell_clients(&self, message: String) {
        tracing::warn!("{message}");
        self.tell_clients_only(message);
    }

    /// Sends a one-line warning to every client listening, without logging it (the caller
    /// logged it already).
    pub fn tell_clients_only(&self, message: String) {
        {
            let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
            if recent.len() >= CLIENT_MESSAGES {
                recent.pop_front();
            }
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0);
            recent.push_back((now, message.clone()));
        }
        // No receiver is fine: nobody is connected to hear it.
        let _ = self.client_messages.send(message);
    }

    /// The latest warnings for clients (at most 64, oldest first), each with when it was
    /// said in milliseconds since the Unix epoch: what a client that was not connected to
    /// hear them reads (`server/discover` for 2026-07-28 clients).
    pub fn recent_client_messages(&self) -> Vec<(u64, String)> {
        self.recent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// Warnings for the client after the load: a server failed, was restarted, gave up,
    /// changed its tool list. The gateway forwards them as MCP log notifications.
    pub fn client_messages(&self) -> broadcast::Receiver<String> {
        self.client_messages.subscribe()
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

    /// Closes every upstream connection (each ends its server's process group), and marks
    /// each server down so that no restart follows.
    pub async fn close(&self) {
        for (server, slot) in &self.upstreams {
            let previous = std::mem::replace(
                &mut *slot.write().unwrap_or_else(PoisonError::into_inner),
                Connection::Down {
                    reason: format!("server `{server}` was closed"),
                },
            );
            if let Connection::Up(upstream) = previous {
                upstream.close().await;
            }
        }
    }
}
