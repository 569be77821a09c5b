//! The registry: the tools a load registered, exactly as the model will see them, with the
//! upstream connection each belongs to. Built by [`crate::load`], read by the call path and
//! the gateway. The tool set is fixed at load: a restarted server (see [`crate::supervise`])
//! gets its connection replaced, and a tool whose pin it no longer matches is withdrawn,
//! never added or changed.
//!
//! # Principals' own sessions
//!
//! An HTTP server whose calls go out under each principal's grant (`oauth.per_principal`)
//! has, beside the operator's connection the load made (listing, pins, restarts), one
//! upstream session per principal that called it ([`Registry::principal_upstream`]): MCP
//! servers bind a session (`Mcp-Session-Id`) to the user whose token opened it, so a
//! principal's calls never ride on the operator's session with another header. A principal's
//! session is opened at its first call, by the [`PrincipalConnector`] the load installed,
//! with that principal's token on its `initialize` and every request after; it is reopened
//! when it failed, closed when no call used it for [`PRINCIPAL_SESSION_IDLE`] (swept every
//! [`PRINCIPAL_SESSION_SWEEP`] by [`crate::supervise`]) and at [`Registry::close`]. It lists
//! nothing: the tool set is the one the operator's connection gave at load. While the
//! operator's connection is down or restarting, principals' calls are refused as everyone's
//! are. There are at most as many sessions as principals with a grant: a principal without
//! one is refused before anything is sent.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// How long a principal's own upstream session stays open without a call: 10 minutes. A
/// call in flight (held for approval included) keeps it open however long it takes.
pub const PRINCIPAL_SESSION_IDLE: Duration = Duration::from_secs(600);

/// How often idle principals' sessions are looked for: every 30 s.
pub const PRINCIPAL_SESSION_SWEEP: Duration = Duration::from_secs(30);

/// Why a principal's call cannot reach its server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrincipalRefusal {
    /// The principal has no usable grant, or the server refused it: the text names the
    /// command that signs the principal in.
    SignIn(String),
    /// The server is down or restarting, or the principal's session could not be opened.
    NotConnected(String),
}

/// What opening a principal's session gives.
pub type ConnectFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Upstream, PrincipalRefusal>> + Send + 'a>>;

/// Opens principals' own sessions with one server: installed by the load, which knows the
/// config and where grants are kept.
pub trait PrincipalConnector: Send + Sync + fmt::Debug {
    /// Opens `principal`'s own session, under its own grant.
    fn connect<'a>(&'a self, principal: &'a str) -> ConnectFuture<'a>;
}

/// One principal's session with one server.
#[derive(Debug)]
struct Slot {
    /// The session; `None` before it is opened, or after an attempt failed. Locked while it
    /// is opened, so a principal's calls at once open one session.
    upstream: tokio::sync::Mutex<Option<Upstream>>,
    /// When a call last ended (or the slot was made).
    used: Mutex<Instant>,
    /// Calls using it now.
    in_flight: AtomicUsize,
}

/// The principals' sessions with one server.
#[derive(Debug)]
struct PrincipalSessions {
    connector: Arc<dyn PrincipalConnector>,
    slots: Mutex<BTreeMap<String, Arc<Slot>>>,
}

/// A principal's session in use by one call: held until the call ends, which keeps the
/// session from being closed as idle meanwhile.
#[derive(Debug)]
pub struct PrincipalUpstream {
    upstream: Option<Upstream>,
    slot: Arc<Slot>,
}

impl PrincipalUpstream {
    /// The session.
    pub fn upstream(&self) -> Option<&Upstream> {
        self.upstream.as_ref()
    }
}

impl Drop for PrincipalUpstream {
    fn drop(&mut self) {
        *self
            .slot
            .used
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        self.slot.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The registered tools by exposed name, and the upstream connections by server name.
#[derive(Debug)]
pub struct Registry {
    tools: BTreeMap<String, RegisteredTool>,
    upstreams: BTreeMap<String, Arc<RwLock<Connection>>>,
    /// Tools taken out after the load (a restarted server no longer matched their pin), by
    /// exposed name, with the reason.
    withdrawn: RwLock<BTreeMap<String, String>>,
    /// How many times each server was restarted since the load, by server.
    restarts: Mutex<BTreeMap<String, u64>>,
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
    /// The principals' own sessions of the servers whose calls go out under each principal's
    /// grant, by server.
    per_principal: BTreeMap<String, PrincipalSessions>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry {
            tools: BTreeMap::new(),
            upstreams: BTreeMap::new(),
            withdrawn: RwLock::new(BTreeMap::new()),
            restarts: Mutex::new(BTreeMap::new()),
            client_messages: broadcast::Sender::new(CLIENT_MESSAGES),
            recent: Mutex::new(VecDeque::with_capacity(CLIENT_MESSAGES)),
            absent: BTreeMap::new(),
            unavailable: BTreeMap::new(),
            per_principal: BTreeMap::new(),
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
        *self
            .restarts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(server.to_owned())
            .or_default() += 1;
        Ok(())
    }

    /// How many times `server` was restarted since the load (each restart put in place).
    pub fn restarts(&self, server: &str) -> u64 {
        self.restarts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(server)
            .copied()
            .unwrap_or(0)
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

    /// Every tool withdrawn since the load, by exposed name, with the reason.
    pub fn withdrawn_tools(&self) -> BTreeMap<String, String> {
        self.withdrawn
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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

    /// Makes `server`'s calls go out in each principal's own session, opened by `connector`
    /// (see the module documentation).
    pub fn set_per_principal(&mut self, server: &str, connector: Arc<dyn PrincipalConnector>) {
        self.per_principal.insert(
            server.to_owned(),
            PrincipalSessions {
                connector,
                slots: Mutex::new(BTreeMap::new()),
            },
        );
    }

    /// Whether some server's calls go out in principals' own sessions.
    pub fn has_per_principal(&self) -> bool {
        !self.per_principal.is_empty()
    }

    /// The principals with a session open (or being opened) with `server`, sorted.
    pub fn principal_sessions(&self, server: &str) -> Vec<String> {
        self.per_principal
            .get(server)
            .map(|sessions| {
                sessions
                    .slots
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .keys()
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `principal`'s own session with `server`, opened (or reopened, after it failed) when
    /// needed; `None` when `server`'s calls go out in the operator's connection. Refused while
    /// the operator's connection is not up (its pins are not known to hold), and when the
    /// principal cannot be signed in.
    pub async fn principal_upstream(
        &self,
        server: &str,
        principal: &str,
    ) -> Option<Result<PrincipalUpstream, PrincipalRefusal>> {
        let sessions = self.per_principal.get(server)?;
        match self.connection(server) {
            Some(Connection::Up(_)) => {}
            Some(Connection::Restarting { reason } | Connection::Down { reason }) => {
                return Some(Err(PrincipalRefusal::NotConnected(reason)));
            }
            None => {
                return Some(Err(PrincipalRefusal::NotConnected(String::from(
                    "the load did not connect it",
                ))));
            }
        }
        // Counted in flight under the map's lock: the sweep, which removes idle slots under
        // it, never closes a slot a call has taken.
        let slot = {
            let mut slots = sessions
                .slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let slot = slots.entry(principal.to_owned()).or_insert_with(|| {
                Arc::new(Slot {
                    upstream: tokio::sync::Mutex::new(None),
                    used: Mutex::new(Instant::now()),
                    in_flight: AtomicUsize::new(0),
                })
            });
            slot.in_flight.fetch_add(1, Ordering::SeqCst);
            Arc::clone(slot)
        };
        let mut held = PrincipalUpstream {
            upstream: None,
            slot: Arc::clone(&slot),
        };
        let mut current = slot.upstream.lock().await;
        if let Some(upstream) = current.as_ref()
            && upstream.failure().is_none()
        {
            held.upstream = Some(upstream.clone());
            return Some(Ok(held));
        }
        if let Some(failed) = current.take() {
            failed.close().await;
        }
        match sessions.connector.connect(principal).await {
            Ok(upstream) => {
                *current = Some(upstream.clone());
                held.upstream = Some(upstream);
                Some(Ok(held))
            }
            Err(refusal) => Some(Err(refusal)),
        }
    }

    /// Closes the principals' sessions no call used for `idle`, and forgets principals whose
    /// session could not be opened; how many sessions it closed.
    pub async fn close_idle_principal_sessions(&self, idle: Duration) -> usize {
        let mut closing = Vec::new();
        for sessions in self.per_principal.values() {
            let mut slots = sessions
                .slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            slots.retain(|_, slot| {
                let quiet = slot.in_flight.load(Ordering::SeqCst) == 0
                    && slot
                        .used
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .elapsed()
                        >= idle;
                if !quiet {
                    return true;
                }
                // Not in flight, so nobody holds its lock but a call that has not counted
                // itself, which cannot be: calls count themselves under the map's lock.
                match slot.upstream.try_lock() {
                    Ok(mut upstream) => {
                        closing.extend(upstream.take());
                        false
                    }
                    Err(_) => true,
                }
            });
        }
        let closed = closing.len();
        for upstream in closing {
            upstream.close().await;
        }
        closed
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
        // Marked down above first: no principal's session opens any more.
        self.close_idle_principal_sessions(Duration::ZERO).await;
        for sessions in self.per_principal.values() {
            let slots = std::mem::take(
                &mut *sessions
                    .slots
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            );
            for slot in slots.into_values() {
                if let Some(upstream) = slot.upstream.lock().await.take() {
                    upstream.close().await;
                }
            }
        }
    }
}
