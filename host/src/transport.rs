//! The upstream side: start a stdio MCP server ([`Upstream::connect_stdio`]), reach a
//! streamable HTTP one ([`Upstream::connect_http`]), or use an rmcp transport the embedder
//! handed in ([`Upstream::connect_handed`]), and speak MCP to it as a client. Every transport
//! feeds the same client (see "Client" below).
//!
//! # Process
//!
//! A server starts with an environment built from nothing: [`INHERITED_VARIABLES`] from
//! toolward's own environment, the variables the operator passes through
//! ([`StdioSpec::pass_env`]) and the variables set for this server ([`StdioSpec::env`]). A
//! value given to one server never reaches another. On Unix the server leads a process group
//! of its own. Closing it ([`Upstream::close`], or dropping the last handle) closes its
//! standard input, waits [`TransportLimits::close_grace`] for it to exit, sends `SIGTERM` to
//! the group and to every descendant that left the group while its parent lived, waits the
//! grace again, then sends `SIGKILL` to all of them. On Linux, after [`become_subreaper`],
//! descendants orphaned on the way (a double fork, a `setsid`) are reparented to toolward, and
//! each close kills and reaps them by pid.
//!
//! # Framing
//!
//! Standard output is read as newline-delimited JSON-RPC messages (MCP specification,
//! "Transports", stdio). A line longer than [`TransportLimits::max_frame_bytes`] is refused
//! after reading at most that many bytes; a line that is not a JSON-RPC 2.0 message (batches
//! included: no MCP version since 2025-06-18 has them) marks the server failed and ends its
//! group. toolward stays up. Standard error is drained all the time into a ring of the last
//! [`STDERR_TAIL_BYTES`] bytes, shown when the server fails.
//!
//! # Streamable HTTP
//!
//! An HTTP server (MCP specification 2025-11-25, "Transports", streamable HTTP) gets every
//! message toolward sends as a `POST` of one JSON-RPC message to its `url`, with `Content-Type:
//! application/json` and `Accept: application/json, text/event-stream`; after `initialize`, the
//! session id it gave (`Mcp-Session-Id`) and the agreed `MCP-Protocol-Version` go with every
//! request. Each request is sent at once in a task of its own, so a long `tools/call` holds up
//! nothing; a notification or a response waits for the server's `202 Accepted` (at most
//! [`TransportLimits::request_timeout`]) before the next message goes, so
//! `notifications/initialized` arrives before the requests that follow it. An answer is
//! `application/json` (one message, or a batch taken message by message) or
//! `text/event-stream` (the data of each `message` event, its `data:` lines joined by line
//! feeds); every message in it is handled exactly as a line from a stdio server, so the bytes
//! of a `tools/list` result are kept as sent. An event stream is read while its request waits
//! for its answer, and dropped when the request is cancelled. After `initialize`, a `GET`
//! opens the stream of the messages the server sends on its own; a server that answers
//! anything but an event stream (`405`) has none, and a stream that ends is not opened again.
//! Streams are never resumed (`Last-Event-ID`), and a request whose answer ends without its
//! response fails ([`TransportError::NoResponse`]).
//!
//! - **No redirect is followed.** A `3xx` answer is an error naming its status and its
//!   `Location` ([`TransportError::Redirect`]); nothing is sent to the `Location`, so the
//!   operator's headers go to the configured `url` only.
//! - **Bodies are bounded.** Every response body, and every event of an event stream, is read
//!   chunk by chunk up to [`TransportLimits::max_http_body_bytes`]; past it the server is
//!   marked failed ([`FailureReason::BodyTooLarge`], [`FailureReason::EventTooLarge`]), as
//!   for an over-long stdio line. An error status is reported with a short, escaped excerpt
//!   of its body, which is read no further ([`TransportError::HttpStatus`]).
//! - **Headers are per server.** Each server has its own HTTP client: no connection,
//!   cookie or proxy is shared, and no proxy setting is read from the environment. Its
//!   [`HttpSpec::headers`] go to it alone, are marked sensitive, and are never logged; a
//!   header toolward sets itself (`Accept`, `Mcp-Session-Id`, ...) cannot be configured.
//! - **An expired session fails the server**: a `404` to a request carrying the session id
//!   marks it failed ([`FailureReason::SessionExpired`]); it is not restarted here.
//! - `https://` certificates are checked against the Mozilla roots built into toolward
//!   (`webpki-roots`), not the system's store, and the roots of the server's own
//!   [`HttpSpec::ca_file`] when it has one.
//!
//! Closing stops every exchange, then ends the session with a `DELETE` carrying its id (a
//! `405` means the server does not let clients end sessions), waiting at most
//! [`TransportLimits::close_grace`]. [`Upstream::process_id`] is `None` and
//! [`Upstream::stderr_tail`] empty.
//!
//! # Client
//!
//! The JSON-RPC client is our own rather than rmcp's `Peer<RoleClient>`: the `tools/list`
//! result must be kept as the exact bytes the server sent (rmcp decodes numbers through `f64`
//! and reorders keys before any hook could see them), the client must declare no capability at
//! all and refuse every request from the server, and everything else the client does is a
//! request table and four notification kinds. The handshake sends `initialize` with
//! [`PROTOCOL_VERSION`], `capabilities: {}` and `clientInfo` `toolward`, accepts any of
//! [`SUPPORTED_PROTOCOL_VERSIONS`], then sends `notifications/initialized`.

mod client;
mod errors;
mod framing;
mod handed;
#[cfg(feature = "http-upstream")]
mod http;
mod incoming;
mod lifecycle;
mod process;
mod stdio;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

use client::{Connection, Payload, RequestOptions};
use errors::tail;
pub use errors::{FailureReason, TransportError};
#[cfg(feature = "gateway")]
pub(crate) use handed::rmcp_transport;

#[cfg(not(feature = "http-upstream"))]
impl Upstream {
    /// In a build without the `http-upstream` feature: refuses every streamable HTTP server,
    /// sending nothing.
    ///
    /// # Errors
    /// Always [`TransportError::InvalidHttpSpec`], naming the feature.
    pub async fn connect_http(
        server: &str,
        _spec: &HttpSpec,
        _limits: &TransportLimits,
    ) -> Result<Upstream, TransportError> {
        Err(TransportError::InvalidHttpSpec {
            server: server.to_owned(),
            detail: String::from(
                "HTTP servers need the `http-upstream` feature of the toolward crate, which this build leaves out",
            ),
        })
    }
}
pub use process::{INHERITED_VARIABLES, become_subreaper};

/// Default longest line a server may write on standard output (bytes, newline not counted):
/// large enough for any real listing or result, small enough that a runaway server cannot
/// make toolward buffer without bound.
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// Default largest HTTP response body, and largest server-sent event, accepted from a
/// streamable HTTP server (bytes): the same bound as [`MAX_FRAME_BYTES`], for the same reason.
pub const MAX_HTTP_BODY_BYTES: usize = 16 * 1024 * 1024;

/// How much of a server's standard error is kept (bytes, the most recent).
pub const STDERR_TAIL_BYTES: usize = 64 * 1024;

/// How much of the kept standard error an error message quotes (bytes, the most recent): a
/// message stays one readable line; [`Upstream::stderr_tail`] has the rest.
pub const STDERR_IN_ERROR_BYTES: usize = 2 * 1024;

/// Default time from spawning a server to the end of its `initialize` handshake: the config's
/// default ([`crate::config::DEFAULT_START_TIMEOUT_MS`]), so an embedder's transport and
/// a gateway's agree. Servers started through `npx` or `uvx` may resolve packages first.
pub const DEFAULT_START_TIMEOUT: Duration =
    Duration::from_millis(crate::config::DEFAULT_START_TIMEOUT_MS);

/// Default time a server has to answer a request other than `tools/call`: the config's
/// default ([`crate::config::DEFAULT_REQUEST_TIMEOUT_MS`]).
pub const DEFAULT_REQUEST_TIMEOUT: Duration =
    Duration::from_millis(crate::config::DEFAULT_REQUEST_TIMEOUT_MS);

/// Default time a closing server has to exit after its standard input is closed, and again
/// after `SIGTERM`, before `SIGKILL`.
pub const DEFAULT_CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The protocol version toolward asks for in `initialize`: the latest one that still has an
/// `initialize` handshake (rmcp's `ProtocolVersion::LATEST_WITH_INITIALIZE`).
pub const PROTOCOL_VERSION: &str = "2025-11-25";

/// The protocol versions toolward accepts in a server's `initialize` answer (MCP
/// specification, "Lifecycle", version negotiation).
pub const SUPPORTED_PROTOCOL_VERSIONS: &[&str] =
    &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The protocol version without an `initialize` handshake that toolward speaks (MCP
/// 2026-07-28, SEP-2575/SEP-2567): the client probes with `server/discover` and every
/// request carries its own context in `_meta`.
pub const DISCOVER_PROTOCOL_VERSION: &str = "2026-07-28";

/// How long the `server/discover` probe waits before toolward falls back to `initialize`:
/// 10 s, as rmcp's client does. A server of an older revision answers the probe with an
/// error at once (then `initialize` follows without delay); only one that ignores unknown
/// requests costs this wait. A modern server too slow to answer in time answers the
/// `initialize` that follows with the versions it speaks, and is probed again.
pub const DISCOVER_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The `clientInfo.name` toolward gives servers.
pub const CLIENT_NAME: &str = "toolward";

/// The `clientInfo.version` toolward gives servers.
pub const CLIENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// How to start a stdio server.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StdioSpec {
    /// The program, found through the server's `PATH` when it has no slash.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables set for this server only (already expanded); they win over inherited ones.
    pub env: BTreeMap<String, String>,
    /// Names of variables of toolward's environment this server also gets, when set.
    pub pass_env: Vec<String>,
    /// Working directory; toolward's own when `None`.
    pub cwd: Option<PathBuf>,
    /// Start it through the launcher, confined by Landlock ([`crate::confine`]); `None`
    /// starts it directly, unconfined.
    pub confine: Option<crate::confine::Confinement>,
}

impl fmt::Debug for StdioSpec {
    /// Variable values are left out: they are often credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StdioSpec")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("pass_env", &self.pass_env)
            .field("cwd", &self.cwd)
            .field("confine", &self.confine)
            .finish()
    }
}

/// How to reach a streamable HTTP server.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HttpSpec {
    /// The MCP endpoint, `http://` or `https://`.
    pub url: String,
    /// Headers sent to this server only, with every request (already expanded): often an
    /// `Authorization`. Never logged.
    pub headers: BTreeMap<String, String>,
    /// The server's OAuth grant ([`crate::oauth::Credentials`]): its token goes in the
    /// `Authorization` header of every request, renewed before it expires and once after a
    /// `401`. `None`: no token is sent, and a `401` is [`TransportError::SignIn`].
    #[cfg(feature = "http-upstream")]
    pub oauth: Option<Arc<crate::oauth::Credentials>>,
    /// Roots trusted beside the built-in ones for this server's TLS (the server's
    /// `oauth.ca_file`); `None`: the built-in roots only.
    pub ca_file: Option<crate::config::CaBundle>,
}

impl fmt::Debug for HttpSpec {
    /// Header values are left out: they are often credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("HttpSpec");
        debug
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>());
        #[cfg(feature = "http-upstream")]
        debug.field("oauth", &self.oauth.is_some());
        debug.field("ca_file", &self.ca_file);
        debug.finish()
    }
}

/// Limits on one upstream server.
///
/// Defaults: `start_timeout` [`DEFAULT_START_TIMEOUT`] (30 s), `request_timeout`
/// [`DEFAULT_REQUEST_TIMEOUT`] (60 s), `max_frame_bytes` [`MAX_FRAME_BYTES`] (16 MiB),
/// `max_http_body_bytes` [`MAX_HTTP_BODY_BYTES`] (16 MiB), `close_grace`
/// [`DEFAULT_CLOSE_GRACE`] (2 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportLimits {
    /// From spawn to the end of the `initialize` handshake.
    pub start_timeout: Duration,
    /// For each request other than `tools/call` (which takes its own timeout).
    pub request_timeout: Duration,
    /// Longest line accepted on the server's standard output (bytes, newline not counted).
    pub max_frame_bytes: usize,
    /// Largest HTTP response body, and largest server-sent event (its data and the line being
    /// read), accepted from an HTTP server (bytes).
    pub max_http_body_bytes: usize,
    /// How long a closing server has to exit after its standard input is closed, and again
    /// after `SIGTERM`; for an HTTP server, how long its session's `DELETE` may take.
    pub close_grace: Duration,
}

impl Default for TransportLimits {
    fn default() -> Self {
        Self {
            start_timeout: DEFAULT_START_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_frame_bytes: MAX_FRAME_BYTES,
            max_http_body_bytes: MAX_HTTP_BODY_BYTES,
            close_grace: DEFAULT_CLOSE_GRACE,
        }
    }
}

/// Who the server said it is in its `initialize` answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerIdentity {
    /// `serverInfo.name` (empty when absent).
    pub name: String,
    /// `serverInfo.version` (empty when absent).
    pub version: String,
    /// The protocol version the server answered, one of [`SUPPORTED_PROTOCOL_VERSIONS`].
    pub protocol_version: String,
    /// The server's `capabilities` object as decoded (untrusted).
    pub capabilities: Value,
    /// The server's `instructions`, if any (untrusted).
    pub instructions: Option<String>,
}

/// Most `notifications/message` of one server logged in a second: 20. Past it they are
/// counted, and the next second's first line says how many were dropped, so a server cannot
/// fill the client's log or disk through toolward's stderr (an attack wrote 132 MB in 2.4 s).
pub const MAX_SERVER_LOG_LINES_PER_SECOND: u32 = 20;

#[derive(Debug)]
struct Handle {
    connection: Connection,
    identity: ServerIdentity,
    limits: TransportLimits,
}

/// One connected upstream server. Clones share the connection; the server is closed by
/// [`Upstream::close`] or when the last clone is dropped (the same sequence, in the
/// background).
#[derive(Debug, Clone)]
pub struct Upstream {
    handle: Arc<Handle>,
}

impl Upstream {
    /// Runs the lifecycle on a new connection within the start timeout (`server/discover`,
    /// else `initialize`; see [`lifecycle::lifecycle`]), then `agreed` with the server's
    /// identity, then `notifications/initialized` after `initialize`. Closes the connection on
    /// failure.
    async fn handshake(
        connection: Connection,
        limits: &TransportLimits,
        agreed: impl FnOnce(&ServerIdentity),
    ) -> Result<Upstream, TransportError> {
        let shared = &connection.shared;
        let handshake = tokio::time::timeout(limits.start_timeout, async {
            let identity = lifecycle::lifecycle(shared).await?;
            agreed(&identity);
            // The 2026-07-28 revision has no handshake to complete.
            if identity.protocol_version != DISCOVER_PROTOCOL_VERSION {
                shared.notify("notifications/initialized", None)?;
            }
            Ok(identity)
        })
        .await;
        match handshake {
            Ok(Ok(identity)) => Ok(Upstream {
                handle: Arc::new(Handle {
                    connection,
                    identity,
                    limits: *limits,
                }),
            }),
            Ok(Err(error)) => {
                connection.close().await;
                // The standard error is complete only now that the process has ended.
                Err(match error {
                    TransportError::Failed { reason, .. } => connection.shared.failed_error(reason),
                    other => other,
                })
            }
            Err(_) => {
                connection.close().await;
                Err(TransportError::StartTimeout {
                    server: connection.shared.server.clone(),
                    timeout_ms: limits.start_timeout.as_millis(),
                    stderr: tail(&connection.shared.stderr_tail(), STDERR_IN_ERROR_BYTES)
                        .to_owned(),
                })
            }
        }
    }

    /// The server's name in the configuration.
    pub fn server(&self) -> &str {
        &self.handle.connection.shared.server
    }

    /// Who the server said it is.
    pub fn identity(&self) -> &ServerIdentity {
        &self.handle.identity
    }

    /// How the server was started confined ([`StdioSpec::confine`]); `None` for an
    /// unconfined or HTTP server.
    pub fn confinement(&self) -> Option<&crate::confine::Confinement> {
        self.handle.connection.confinement.as_ref()
    }

    /// The process id of the server's process (the leader of its group on Unix); `None` for
    /// an HTTP server.
    pub fn process_id(&self) -> Option<u32> {
        self.handle.connection.pid
    }

    /// One page of `tools/list`: the exact bytes of the answer's `result` object as the server
    /// sent them. `cursor` is the previous page's `nextCursor`.
    ///
    /// # Errors
    ///
    /// [`TransportError::RequestTimeout`] after [`TransportLimits::request_timeout`],
    /// [`TransportError::Rpc`], [`TransportError::MalformedResponse`] when `result` is not an
    /// object, [`TransportError::Failed`].
    pub async fn list_tools_page(&self, cursor: Option<&str>) -> Result<Vec<u8>, TransportError> {
        let shared = &self.handle.connection.shared;
        let params = match cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let options = RequestOptions {
            raw: true,
            progress: None,
            timeout: Some(self.handle.limits.request_timeout),
            cancellable: true,
        };
        match shared.request(id, "tools/list", params, options).await? {
            Payload::Raw(bytes) if bytes.first() == Some(&b'{') => Ok(bytes),
            Payload::Raw(_) | Payload::Decoded(_) => Err(TransportError::MalformedResponse {
                server: shared.server.clone(),
                method: String::from("tools/list"),
                detail: String::from("`result` is not an object"),
            }),
        }
    }

    /// `tools/call` of tool `name` with `arguments`; the answer's `result` object as decoded
    /// (untrusted: the caller caps it). Progress notifications for this call go to `progress`
    /// (their `params` objects); the request then carries a `progressToken`.
    ///
    /// When `timeout` passes, or the returned future is dropped first, the server gets
    /// `notifications/cancelled` for the call.
    ///
    /// # Errors
    ///
    /// [`TransportError::RequestTimeout`], [`TransportError::Rpc`],
    /// [`TransportError::MalformedResponse`] when `result` is not an object,
    /// [`TransportError::Failed`]. A tool error (`isError: true`) is a result, not an error.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
        progress: Option<mpsc::UnboundedSender<Value>>,
    ) -> Result<Value, TransportError> {
        self.call_tool_with_meta(name, arguments, timeout, progress, Map::new())
            .await
    }

    /// As [`Upstream::call_tool`], with the members of `meta` in the request's
    /// `params._meta` (the MCP specification's `_meta`, 2025-11-25 "General fields"): the
    /// W3C `traceparent` of the call's trace (see [`crate::telemetry`]). `progressToken` is
    /// toolward's own and cannot be set through `meta`.
    ///
    /// # Errors
    /// As [`Upstream::call_tool`].
    pub async fn call_tool_with_meta(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
        progress: Option<mpsc::UnboundedSender<Value>>,
        mut meta: Map<String, Value>,
    ) -> Result<Value, TransportError> {
        let shared = &self.handle.connection.shared;
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let mut params = json!({ "name": name, "arguments": arguments });
        if progress.is_some() {
            meta.insert(String::from("progressToken"), json!(id));
        }
        if !meta.is_empty()
            && let Value::Object(object) = &mut params
        {
            object.insert(String::from("_meta"), Value::Object(meta));
        }
        let options = RequestOptions {
            raw: false,
            progress,
            timeout: Some(timeout),
            cancellable: true,
        };
        match shared.request(id, "tools/call", params, options).await? {
            Payload::Decoded(result @ Value::Object(_)) => Ok(result),
            Payload::Decoded(_) | Payload::Raw(_) => Err(TransportError::MalformedResponse {
                server: shared.server.clone(),
                method: String::from("tools/call"),
                detail: String::from("`result` is not an object"),
            }),
        }
    }

    /// Whether the server has sent `notifications/tools/list_changed` since it started. The
    /// tool set stays as loaded; this is reported, not applied.
    pub fn tools_list_changed(&self) -> bool {
        self.tools_list_changed_count() > 0
    }

    /// How many `notifications/tools/list_changed` the server has sent since it started.
    pub fn tools_list_changed_count(&self) -> u64 {
        *self.handle.connection.shared.list_changed.borrow()
    }

    /// Watches the count of [`Upstream::tools_list_changed_count`]: `changed()` wakes at each
    /// `notifications/tools/list_changed`, and fails once the connection is gone.
    pub fn watch_tools_list_changed(&self) -> watch::Receiver<u64> {
        self.handle.connection.shared.list_changed.subscribe()
    }

    /// Waits until the server has failed or was closed, and says why
    /// ([`FailureReason::Closed`] after [`Upstream::close`]). Returns at once when it already
    /// has.
    pub async fn ended(&self) -> FailureReason {
        let shared = &self.handle.connection.shared;
        let mut shutdown = shared.shutdown.subscribe();
        // The sender lives in `shared`, which `self` keeps: the wait ends only by the flag.
        let _ = shutdown.wait_for(|down| *down).await;
        shared.failure().unwrap_or(FailureReason::Closed)
    }

    /// The last [`STDERR_TAIL_BYTES`] of the server's standard error (invalid UTF-8 replaced);
    /// empty for an HTTP server.
    pub fn stderr_tail(&self) -> String {
        self.handle.connection.shared.stderr_tail()
    }

    /// Why the server failed, or `None` while it works. A closed server reads `it was closed`.
    pub fn is_failed(&self) -> Option<String> {
        self.failure().map(|reason| reason.to_string())
    }

    /// Why the server failed, or `None` while it works.
    pub fn failure(&self) -> Option<FailureReason> {
        self.handle.connection.shared.failure()
    }

    /// Closes the server for every clone of this handle and waits until its processes have
    /// ended: standard input closed, [`TransportLimits::close_grace`], `SIGTERM` to its group
    /// and descendants, the grace again, `SIGKILL`, orphans reaped. For an HTTP server: its
    /// exchanges stopped, then its session ended with `DELETE` (at most the grace). Requests
    /// still waiting fail with [`FailureReason::Closed`].
    pub async fn close(self) {
        self.handle.connection.close().await;
    }
}
