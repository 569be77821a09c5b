//! The upstream side: start a stdio MCP server ([`Upstream::connect_stdio`]), or reach a
//! streamable HTTP one ([`Upstream::connect_http`]), and speak MCP to it as a client. Both
//! transports feed the same client (see "Client" below).
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
//!   (`webpki-roots`), not the system's store.
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

mod framing;
mod http;
mod process;
#[cfg(test)]
mod tests;

use crate::text::MAX_QUOTED_BYTES;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use process_wrap::tokio::ChildWrapper;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

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

/// `_meta` keys of the 2026-07-28 revision.
const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The JSON-RPC error code of an unsupported protocol version (2026-07-28).
const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// The `clientInfo.name` toolward gives servers.
pub const CLIENT_NAME: &str = "toolward";

/// The `clientInfo.version` toolward gives servers.
pub const CLIENT_VERSION: &str = env!("CARGO_PKG_VERSION");


/// After `SIGKILL`, how long to wait for the leader's exit status and for orphans to be
/// reaped: the kernel ends killed processes at once, so this is only a bound.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// How often closing checks whether the group has ended.
const CLOSE_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// After the server's processes have ended, how long standard error may still be drained.
const STDERR_DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);

/// When the server's standard output ends, how long to wait for its exit status before
/// failing it for the closed output.
const EXIT_STATUS_WAIT: Duration = Duration::from_millis(500);

/// Read buffer on the server's standard output (bytes).
const STDOUT_READ_BUFFER_BYTES: usize = 64 * 1024;

/// Read buffer on the server's standard error (bytes).
const STDERR_READ_BUFFER_BYTES: usize = 8 * 1024;

/// JSON-RPC "method not found", the answer to every request a server sends toolward.
const METHOD_NOT_FOUND: i64 = -32601;

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
}

impl fmt::Debug for HttpSpec {
    /// Header values are left out: they are often credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpSpec")
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish()
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

/// Why a server was marked failed. Once failed, every request to it fails with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FailureReason {
    /// A line on standard output reached the frame limit.
    #[error("it sent a line longer than the frame limit of {limit} bytes")]
    FrameTooLong {
        /// The frame limit (bytes).
        limit: usize,
    },
    /// A line on standard output is not a JSON-RPC 2.0 message.
    #[error("it sent output that is not a JSON-RPC message: {detail}")]
    NotJsonRpc {
        /// What is wrong with it.
        detail: String,
    },
    /// Its standard output reached its end.
    #[error("it closed its standard output")]
    StdoutClosed,
    /// Its process exited.
    #[error("its process exited ({status})")]
    Exited {
        /// The exit status as the system describes it.
        status: String,
    },
    /// Reading its standard output failed.
    #[error("reading its standard output failed: {message}")]
    Read {
        /// The system's message.
        message: String,
    },
    /// Writing to its standard input failed.
    #[error("writing to its standard input failed: {message}")]
    Write {
        /// The system's message.
        message: String,
    },
    /// An HTTP response body went past the body limit.
    #[error("it sent an HTTP response body past the limit of {limit} bytes ({seen} bytes read)")]
    BodyTooLarge {
        /// The body limit (bytes).
        limit: usize,
        /// How many bytes had been read when it was refused.
        seen: usize,
    },
    /// A server-sent event went past the body limit.
    #[error("it sent a server-sent event past the limit of {limit} bytes ({seen} bytes read)")]
    EventTooLarge {
        /// The body limit (bytes).
        limit: usize,
        /// How many bytes of the event had been read when it was refused.
        seen: usize,
    },
    /// It answered HTTP 404 to a request carrying its session id: the session has expired
    /// (MCP specification, "Transports", session management).
    #[error("its session expired (it answered HTTP 404 to a request with its session id)")]
    SessionExpired,
    /// It was closed by toolward.
    #[error("it was closed")]
    Closed,
}

/// Errors of the upstream transport. Each names the server it is about.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The server's process could not be started.
    #[error("could not start server `{server}` with command `{command}`")]
    Spawn {
        /// The server's name in the configuration.
        server: String,
        /// The program.
        command: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A variable name in the server's environment cannot be given to a process.
    #[error(
        "server `{server}` has the environment variable name `{name}`, which is empty or contains `=` or NUL"
    )]
    InvalidVariableName {
        /// The server's name in the configuration.
        server: String,
        /// The name as configured.
        name: String,
    },
    /// The `initialize` handshake did not finish in time.
    #[error("server `{server}` did not finish `initialize` within {timeout_ms} ms{}", stderr_suffix(.stderr))]
    StartTimeout {
        /// The server's name in the configuration.
        server: String,
        /// The start timeout (milliseconds).
        timeout_ms: u128,
        /// The end of its standard error.
        stderr: String,
    },
    /// A request was not answered in time; it was cancelled upstream.
    #[error("server `{server}` did not answer `{method}` within {timeout_ms} ms")]
    RequestTimeout {
        /// The server's name in the configuration.
        server: String,
        /// The JSON-RPC method.
        method: String,
        /// The timeout (milliseconds).
        timeout_ms: u128,
    },
    /// The server has failed (or was closed); see [`FailureReason`].
    #[error("server `{server}` failed: {reason}{}", stderr_suffix(.stderr))]
    Failed {
        /// The server's name in the configuration.
        server: String,
        /// Why.
        reason: FailureReason,
        /// The end of its standard error when it failed.
        stderr: String,
    },
    /// The server answered a request with a JSON-RPC error.
    #[error("server `{server}` answered `{method}` with error {code}: `{}`", quote(.message))]
    Rpc {
        /// The server's name in the configuration.
        server: String,
        /// The JSON-RPC method.
        method: String,
        /// The error code.
        code: i64,
        /// The error message (untrusted).
        message: String,
        /// The error data, if any (untrusted).
        data: Option<Value>,
    },
    /// The server answered `initialize` (or `server/discover`) with protocol versions
    /// toolward does not speak.
    #[error("server `{server}` answered protocol version `{}`, not one of {}, {DISCOVER_PROTOCOL_VERSION}", quote(.version), SUPPORTED_PROTOCOL_VERSIONS.join(", "))]
    UnsupportedProtocol {
        /// The server's name in the configuration.
        server: String,
        /// The version it answered (untrusted).
        version: String,
    },
    /// The server's answer has the wrong shape.
    #[error("server `{server}` answered `{method}` with a malformed result: {detail}")]
    MalformedResponse {
        /// The server's name in the configuration.
        server: String,
        /// The JSON-RPC method.
        method: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The HTTP server's `url` or `headers` cannot be used; nothing was sent.
    #[error("server `{server}` cannot be reached over HTTP as configured: {detail}")]
    InvalidHttpSpec {
        /// The server's name in the configuration.
        server: String,
        /// What is wrong (never a header value).
        detail: String,
    },
    /// The HTTP client for the server could not be set up.
    #[error("could not set up the HTTP client for server `{server}`")]
    HttpClient {
        /// The server's name in the configuration.
        server: String,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// A message could not be sent to the HTTP server, or its answer could not be read.
    #[error("could not exchange `{method}` with server `{server}` over HTTP")]
    Http {
        /// The server's name in the configuration.
        server: String,
        /// The JSON-RPC method.
        method: String,
        /// Why (the URL left out).
        #[source]
        source: reqwest::Error,
    },
    /// The HTTP server answered with a redirect, which toolward never follows: the
    /// configured `url` is the only place its messages and headers go.
    #[error("server `{server}` answered `{method}` with a redirect (HTTP status {status}) to `{}`, which toolward does not follow", quote(.location))]
    Redirect {
        /// The server's name in the configuration.
        server: String,
        /// The JSON-RPC method.
        method: String,
        /// The HTTP status.
        status: u16,
        /// The `Location` header (untrusted; empty when absent).
        location: String,
    },
    /// The HTTP server answered with an error status.
    #[error("server `{server}` answered `{method}` with HTTP status {status}{}", body_suffix(.body))]
    HttpStatus {
        /// The server's name in the configuration.
        server: String,
        /// The JSON-RPC method.
        method: String,
        /// The HTTP status.
        status: u16,
        /// The start of the body (untrusted, at most a few hundred bytes).
        body: String,
    },
    /// The HTTP server answered with a body that is neither JSON nor an event stream.
    #[error("server `{server}` answered `{method}` with content type `{}`, neither `application/json` nor `text/event-stream`", quote(.content_type))]
    ContentType {
        /// The server's name in the configuration.
        server: String,
        /// The JSON-RPC method.
        method: String,
        /// The `Content-Type` header (untrusted; empty when absent).
        content_type: String,
    },
    /// The HTTP server's answer to a request ended without the JSON-RPC response.
    #[error("server `{server}` ended its HTTP answer to `{method}` without a response")]
    NoResponse {
        /// The server's name in the configuration.
        server: String,
        /// The JSON-RPC method.
        method: String,
    },
}

/// Server text for a one-line message: [`crate::text::quote`] at [`MAX_QUOTED_BYTES`].
fn quote(text: &str) -> String {
    crate::text::quote(text, MAX_QUOTED_BYTES)
}

/// `: `…`` for a non-empty HTTP error body, else nothing.
fn body_suffix(body: &str) -> String {
    let trimmed = body.trim();
    if trimmed.is_empty() {
        String::new()
    } else {
        format!(": `{}`", quote(trimmed))
    }
}

/// `; stderr ends with `…`` for a non-empty standard error tail, else nothing.
fn stderr_suffix(stderr: &str) -> String {
    let trimmed = stderr.trim_end();
    if trimmed.is_empty() {
        String::new()
    } else {
        // Already cut to `STDERR_IN_ERROR_BYTES`, the end kept: quoted whole.
        format!(
            "; its standard error ends with `{}`",
            crate::text::quote(trimmed, trimmed.len())
        )
    }
}

/// The last `limit` bytes of `text`, cut at a character boundary.
fn tail(text: &str, limit: usize) -> &str {
    let mut start = text.len().saturating_sub(limit);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text.get(start..).unwrap_or_default()
}

/// A line to the server, or the order to close its standard input.
#[derive(Debug)]
enum Outgoing {
    Line(Vec<u8>),
    Close,
}

/// What a request waits for.
#[derive(Debug)]
enum Payload {
    /// The decoded `result`.
    Decoded(Value),
    /// The exact bytes of `result`.
    Raw(Vec<u8>),
}

type ReplySender = oneshot::Sender<Result<Payload, TransportError>>;

/// A request waiting for its answer.
#[derive(Debug)]
struct Pending {
    method: &'static str,
    raw: bool,
    progress: Option<mpsc::UnboundedSender<Value>>,
    reply: ReplySender,
}

/// The state the reader, writer, stderr and supervisor tasks (over HTTP: the dispatcher,
/// exchange and supervisor tasks) share with the handles.
#[derive(Debug)]
struct Shared {
    server: String,
    pending: Mutex<HashMap<u64, Pending>>,
    failure: Mutex<Option<FailureReason>>,
    /// How many `notifications/tools/list_changed` the server has sent.
    list_changed: watch::Sender<u64>,
    stderr: Mutex<VecDeque<u8>>,
    outgoing: mpsc::UnboundedSender<Outgoing>,
    shutdown: watch::Sender<bool>,
    next_id: AtomicU64,
    /// The `_meta` members every request carries, once `server/discover` chose the
    /// 2026-07-28 revision; unset for a server that spoke `initialize`.
    request_meta: std::sync::OnceLock<Map<String, Value>>,
    /// How many of the server's `notifications/message` this second were logged.
    log_budget: Mutex<LogBudget>,
}

/// Most `notifications/message` of one server logged in a second: 20. Past it they are
/// counted, and the next second's first line says how many were dropped, so a server cannot
/// fill the client's log or disk through toolward's stderr (an attack wrote 132 MB in 2.4 s).
pub const MAX_SERVER_LOG_LINES_PER_SECOND: u32 = 20;

/// The log lines of one server in the current second, and those dropped in it.
#[derive(Debug)]
struct LogBudget {
    second: Instant,
    written: u32,
    dropped: u64,
}

impl LogBudget {
    fn new(now: Instant) -> LogBudget {
        LogBudget {
            second: now,
            written: 0,
            dropped: 0,
        }
    }

    /// Whether a line at `now` is written, and how many were dropped in the seconds before it
    /// that no line has said yet.
    fn admit(&mut self, now: Instant) -> (bool, u64) {
        let mut dropped = 0;
        if now.duration_since(self.second) >= Duration::from_secs(1) {
            dropped = std::mem::take(&mut self.dropped);
            self.second = now;
            self.written = 0;
        }
        if self.written < MAX_SERVER_LOG_LINES_PER_SECOND {
            self.written += 1;
            (true, dropped)
        } else {
            self.dropped += 1;
            (false, dropped)
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here leaves its data consistent, so a panic elsewhere does not
    // make it unusable.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn new(
        server: &str,
        outgoing: mpsc::UnboundedSender<Outgoing>,
        shutdown: watch::Sender<bool>,
    ) -> Shared {
        Shared {
            server: server.to_owned(),
            pending: Mutex::new(HashMap::new()),
            failure: Mutex::new(None),
            list_changed: watch::Sender::new(0),
            stderr: Mutex::new(VecDeque::new()),
            outgoing,
            shutdown,
            next_id: AtomicU64::new(1),
            request_meta: std::sync::OnceLock::new(),
            log_budget: Mutex::new(LogBudget::new(Instant::now())),
        }
    }

    fn stderr_tail(&self) -> String {
        let ring = lock(&self.stderr);
        let (front, back) = ring.as_slices();
        let mut bytes = Vec::with_capacity(ring.len());
        bytes.extend_from_slice(front);
        bytes.extend_from_slice(back);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn push_stderr(&self, bytes: &[u8]) {
        let mut ring = lock(&self.stderr);
        let keep = bytes
            .get(bytes.len().saturating_sub(STDERR_TAIL_BYTES)..)
            .unwrap_or_default();
        ring.extend(keep);
        let excess = ring.len().saturating_sub(STDERR_TAIL_BYTES);
        ring.drain(..excess);
    }

    fn failure(&self) -> Option<FailureReason> {
        lock(&self.failure).clone()
    }

    fn failed_error(&self, reason: FailureReason) -> TransportError {
        TransportError::Failed {
            server: self.server.clone(),
            reason,
            stderr: tail(&self.stderr_tail(), STDERR_IN_ERROR_BYTES).to_owned(),
        }
    }

    /// Marks the server failed (the first reason wins), fails every waiting request, and
    /// starts ending its processes.
    fn fail(&self, reason: FailureReason) {
        let first = {
            let mut failure = lock(&self.failure);
            if failure.is_none() {
                *failure = Some(reason.clone());
                true
            } else {
                false
            }
        };
        if first {
            if reason != FailureReason::Closed {
                tracing::warn!(server = %self.server, "server `{}` failed: {reason}", self.server);
            }
            let waiting: Vec<Pending> = lock(&self.pending)
                .drain()
                .map(|(_, pending)| pending)
                .collect();
            for pending in waiting {
                let _ = pending.reply.send(Err(self.failed_error(reason.clone())));
            }
        }
        self.shutdown.send_replace(true);
    }

    /// Whether request `id` still waits for its answer.
    fn is_waiting(&self, id: u64) -> bool {
        lock(&self.pending).contains_key(&id)
    }

    /// Ends request `id` with `error`, if it still waits.
    fn refuse(&self, id: u64, error: TransportError) {
        if let Some(pending) = lock(&self.pending).remove(&id) {
            let _ = pending.reply.send(Err(error));
        }
    }

    fn send(&self, message: &Value) -> Result<(), TransportError> {
        let line =
            serde_json::to_vec(message).map_err(|error| TransportError::MalformedResponse {
                server: self.server.clone(),
                method: String::from("(encoding a message)"),
                detail: error.to_string(),
            })?;
        self.outgoing
            .send(Outgoing::Line(line))
            .map_err(|_| self.failed_error(self.failure().unwrap_or(FailureReason::Closed)))
    }

    fn notify(&self, method: &str, params: Option<Value>) -> Result<(), TransportError> {
        let mut message = json!({ "jsonrpc": "2.0", "method": method });
        if let (Some(params), Value::Object(object)) = (params, &mut message) {
            object.insert(String::from("params"), params);
        }
        self.send(&message)
    }

    /// Sends request `id` and waits for its answer, for at most `timeout` when given. When the
    /// wait ends without an answer (timeout, or the future dropped) and `cancellable`, the
    /// server gets `notifications/cancelled`.
    async fn request(
        self: &Arc<Self>,
        id: u64,
        method: &'static str,
        params: Value,
        options: RequestOptions,
    ) -> Result<Payload, TransportError> {
        let (reply, answer) = oneshot::channel();
        {
            let mut pending = lock(&self.pending);
            // Checked under the table's lock: `fail` drains the table after setting the reason.
            if let Some(reason) = self.failure() {
                return Err(self.failed_error(reason));
            }
            pending.insert(
                id,
                Pending {
                    method,
                    raw: options.raw,
                    progress: options.progress,
                    reply,
                },
            );
        }
        let mut guard = PendingGuard {
            shared: Arc::clone(self),
            id,
            cancellable: options.cancellable,
            reason: "the client stopped waiting",
        };
        let params = with_request_meta(params, self.request_meta.get());
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))?;
        let answer = match options.timeout {
            Some(timeout) => match tokio::time::timeout(timeout, answer).await {
                Ok(answer) => answer,
                Err(_) => {
                    guard.reason = "timeout";
                    return Err(TransportError::RequestTimeout {
                        server: self.server.clone(),
                        method: method.to_owned(),
                        timeout_ms: timeout.as_millis(),
                    });
                }
            },
            None => answer.await,
        };
        match answer {
            Ok(answer) => answer,
            Err(_) => Err(self.failed_error(self.failure().unwrap_or(FailureReason::Closed))),
        }
    }
}

#[derive(Debug)]
struct RequestOptions {
    raw: bool,
    progress: Option<mpsc::UnboundedSender<Value>>,
    timeout: Option<Duration>,
    cancellable: bool,
}

/// Removes a request from the table when its waiter goes away, and tells the server when it
/// was still unanswered (MCP specification, "Cancellation").
#[derive(Debug)]
struct PendingGuard {
    shared: Arc<Shared>,
    id: u64,
    cancellable: bool,
    reason: &'static str,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        let unanswered = lock(&self.shared.pending).remove(&self.id).is_some();
        if unanswered && self.cancellable && self.shared.failure().is_none() {
            let _ = self.shared.notify(
                "notifications/cancelled",
                Some(json!({ "requestId": self.id, "reason": self.reason })),
            );
        }
    }
}

/// The running server's tasks; dropping the last reference starts closing it.
#[derive(Debug)]
struct Connection {
    shared: Arc<Shared>,
    done: watch::Receiver<bool>,
    pid: Option<u32>,
    /// How the server was started confined, as the launcher was asked (it refuses to start a
    /// server less confined): `None` for an unconfined or HTTP server.
    confinement: Option<crate::confine::Confinement>,
}

impl Connection {
    async fn close(&self) {
        self.shared.fail(FailureReason::Closed);
        let mut done = self.done.clone();
        let _ = done.wait_for(|done| *done).await;
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.shared.fail(FailureReason::Closed);
    }
}

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
    /// Starts the stdio server `spec` as server `server` and runs the `initialize` handshake,
    /// then sends `notifications/initialized`.
    ///
    /// # Errors
    ///
    /// [`TransportError::InvalidVariableName`] before starting anything;
    /// [`TransportError::Spawn`]; [`TransportError::StartTimeout`] after
    /// [`TransportLimits::start_timeout`]; [`TransportError::UnsupportedProtocol`];
    /// [`TransportError::Rpc`] or [`TransportError::MalformedResponse`] for a refused or
    /// malformed `initialize`; [`TransportError::Failed`] when the server fails meanwhile. The
    /// server's processes have ended when an error is returned.
    pub async fn connect_stdio(
        server: &str,
        spec: &StdioSpec,
        limits: &TransportLimits,
    ) -> Result<Upstream, TransportError> {
        let names = spec.env.keys().chain(&spec.pass_env);
        if let Some(name) = names
            .into_iter()
            .find(|name| !process::is_valid_variable_name(name))
        {
            return Err(TransportError::InvalidVariableName {
                server: server.to_owned(),
                name: name.clone(),
            });
        }
        let env = process::environment(spec);
        let mut command = process::command(spec, &env);
        let spawn_error = |source| TransportError::Spawn {
            server: server.to_owned(),
            command: spec.command.clone(),
            source,
        };
        let mut child = process::spawn(&mut command).map_err(spawn_error)?;
        let pid = child.id();
        let pipes = (
            child.stdin().take(),
            child.stdout().take(),
            child.stderr().take(),
        );
        let (Some(stdin), Some(stdout), Some(stderr)) = pipes else {
            // Not reachable with piped stdio; the child is killed on drop.
            return Err(spawn_error(io::Error::other(
                "a standard stream was not piped",
            )));
        };

        let (outgoing, outgoing_rx) = mpsc::unbounded_channel();
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (done_tx, done) = watch::channel(false);
        let shared = Arc::new(Shared::new(server, outgoing, shutdown));
        let tasks = vec![
            tokio::spawn(drain_stderr(Arc::clone(&shared), stderr)),
            tokio::spawn(write_stdin(Arc::clone(&shared), stdin, outgoing_rx)),
            tokio::spawn(read_stdout(
                Arc::clone(&shared),
                stdout,
                limits.max_frame_bytes,
            )),
        ];
        tokio::spawn(supervise(
            Arc::clone(&shared),
            child,
            shutdown_rx,
            limits.close_grace,
            tasks,
            done_tx,
        ));
        let connection = Connection {
            shared,
            done,
            pid,
            confinement: spec.confine.clone(),
        };
        Upstream::handshake(connection, limits, |_| {}).await
    }

    /// Runs the lifecycle on a new connection within the start timeout (`server/discover`,
    /// else `initialize`; see [`lifecycle`]), then `agreed` with the server's identity, then
    /// `notifications/initialized` after `initialize`. Closes the connection on failure.
    async fn handshake(
        connection: Connection,
        limits: &TransportLimits,
        agreed: impl FnOnce(&ServerIdentity),
    ) -> Result<Upstream, TransportError> {
        let shared = &connection.shared;
        let handshake = tokio::time::timeout(limits.start_timeout, async {
            let identity = lifecycle(shared).await?;
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

/// The server's identity from a `server/discover` or `initialize` result: `info` is its
/// `serverInfo` object (name and version), `version` the protocol version agreed.
fn identity(result: &Map<String, Value>, info: Option<&Value>, version: &str) -> ServerIdentity {
    let text = |field: &str| {
        info.and_then(|info| info.get(field))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    ServerIdentity {
        name: text("name"),
        version: text("version"),
        protocol_version: version.to_owned(),
        capabilities: result
            .get("capabilities")
            .cloned()
            .unwrap_or_else(|| json!({})),
        instructions: result
            .get("instructions")
            .and_then(Value::as_str)
            .map(str::to_owned),
    }
}

/// `params` with the members of `meta` added to its `_meta` (a member already there wins).
fn with_request_meta(mut params: Value, meta: Option<&Map<String, Value>>) -> Value {
    let (Some(meta), Value::Object(object)) = (meta, &mut params) else {
        return params;
    };
    let target = object
        .entry(String::from("_meta"))
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(target) = target {
        for (key, value) in meta {
            target.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    params
}

/// The lifecycle: `server/discover` for a server of the 2026-07-28 revision, else the
/// `initialize` handshake. The probe comes first, as the SDKs' clients do it: a server of an
/// earlier revision answers it with an error (method not found), and `initialize` follows.
async fn lifecycle(shared: &Arc<Shared>) -> Result<ServerIdentity, TransportError> {
    if let Some(identity) = discover(shared, Some(DISCOVER_PROBE_TIMEOUT)).await? {
        return Ok(identity);
    }
    match initialize(shared).await {
        // The probe timed out, but the server has since settled on the 2026-07-28 revision.
        Err(TransportError::Rpc {
            code: UNSUPPORTED_PROTOCOL_VERSION,
            data,
            ..
        }) if supported_versions(data.as_ref())
            .iter()
            .any(|version| version == DISCOVER_PROTOCOL_VERSION) =>
        {
            match discover(shared, None).await? {
                Some(identity) => Ok(identity),
                None => Err(TransportError::MalformedResponse {
                    server: shared.server.clone(),
                    method: String::from("server/discover"),
                    detail: format!(
                        "the server refused `initialize` for {DISCOVER_PROTOCOL_VERSION}, then did not discover with it"
                    ),
                }),
            }
        }
        other => other,
    }
}

/// `data.supported` of an unsupported-protocol-version error: the versions the server speaks.
fn supported_versions(data: Option<&Value>) -> Vec<String> {
    data.and_then(|data| data.get("supported"))
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The `server/discover` probe (MCP 2026-07-28, "Lifecycle"): the server's identity when it
/// speaks [`DISCOVER_PROTOCOL_VERSION`], with every later request carrying the client's
/// context in `_meta`; `None` when it does not (an error answer, no answer within
/// `timeout`, or a result that offers only earlier versions).
///
/// # Errors
/// [`TransportError::UnsupportedProtocol`] when the server answers that it speaks only
/// versions toolward does not; [`TransportError::Failed`] when it fails meanwhile.
async fn discover(
    shared: &Arc<Shared>,
    timeout: Option<Duration>,
) -> Result<Option<ServerIdentity>, TransportError> {
    let meta = Map::from_iter([
        (
            String::from(META_PROTOCOL_VERSION),
            json!(DISCOVER_PROTOCOL_VERSION),
        ),
        (
            String::from(META_CLIENT_INFO),
            json!({ "name": CLIENT_NAME, "version": CLIENT_VERSION }),
        ),
        // No capabilities, as for `initialize` (see there).
        (String::from(META_CLIENT_CAPABILITIES), json!({})),
    ]);
    let params = json!({ "_meta": Value::Object(meta.clone()) });
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let options = RequestOptions {
        raw: false,
        progress: None,
        timeout,
        cancellable: false,
    };
    let result = match shared.request(id, "server/discover", params, options).await {
        Ok(Payload::Decoded(Value::Object(result))) => result,
        // An HTTP server of an earlier revision may refuse the probe at the HTTP layer.
        Ok(_)
        | Err(TransportError::RequestTimeout { .. })
        | Err(TransportError::HttpStatus {
            status: 400..=499, ..
        }) => return Ok(None),
        Err(TransportError::Rpc { code, data, .. }) => {
            // Only a server that names the versions it speaks, none of them toolward's,
            // is refused; any other error is an earlier revision's "method not found".
            let supported = supported_versions(data.as_ref());
            let speaks_ours = supported.iter().any(|version| {
                version == DISCOVER_PROTOCOL_VERSION
                    || SUPPORTED_PROTOCOL_VERSIONS.contains(&version.as_str())
            });
            if code == UNSUPPORTED_PROTOCOL_VERSION && !supported.is_empty() && !speaks_ours {
                return Err(TransportError::UnsupportedProtocol {
                    server: shared.server.clone(),
                    version: supported.join(", "),
                });
            }
            return Ok(None);
        }
        Err(other) => return Err(other),
    };
    let speaks_it = result
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|list| list.iter().any(|v| v == DISCOVER_PROTOCOL_VERSION));
    if !speaks_it {
        return Ok(None);
    }
    let info = result
        .get("_meta")
        .and_then(|meta| meta.get(META_SERVER_INFO))
        .or_else(|| result.get("serverInfo"));
    let _ = shared.request_meta.set(meta);
    Ok(Some(identity(&result, info, DISCOVER_PROTOCOL_VERSION)))
}

/// The `initialize` request (MCP specification, "Lifecycle", initialization); the caller
/// sends `notifications/initialized` after it.
async fn initialize(shared: &Arc<Shared>) -> Result<ServerIdentity, TransportError> {
    let params = json!({
        "protocolVersion": PROTOCOL_VERSION,
        // No roots, sampling or elicitation: servers change their tools by what the client
        // declares, and a filesystem server would trade its sandbox for the client's roots.
        "capabilities": {},
        "clientInfo": { "name": CLIENT_NAME, "version": CLIENT_VERSION },
    });
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    // The start timeout bounds the whole handshake; `initialize` must not be cancelled.
    let options = RequestOptions {
        raw: false,
        progress: None,
        timeout: None,
        cancellable: false,
    };
    let malformed = |detail: &str| TransportError::MalformedResponse {
        server: shared.server.clone(),
        method: String::from("initialize"),
        detail: detail.to_owned(),
    };
    let Payload::Decoded(Value::Object(result)) =
        shared.request(id, "initialize", params, options).await?
    else {
        return Err(malformed("`result` is not an object"));
    };
    let Some(Value::String(version)) = result.get("protocolVersion") else {
        return Err(malformed("`protocolVersion` is missing or not a string"));
    };
    if !SUPPORTED_PROTOCOL_VERSIONS.contains(&version.as_str()) {
        return Err(TransportError::UnsupportedProtocol {
            server: shared.server.clone(),
            version: version.clone(),
        });
    }
    Ok(identity(&result, result.get("serverInfo"), version))
}

/// Reads the server's standard output until it ends or breaks the framing.
async fn read_stdout(shared: Arc<Shared>, stdout: ChildStdout, limit: usize) {
    let mut lines = framing::LineReader::new(
        BufReader::with_capacity(STDOUT_READ_BUFFER_BYTES, stdout),
        limit,
    );
    loop {
        let reason = match lines.next_line().await {
            Ok(Some(line)) => match handle_line(&shared, line) {
                Ok(()) => continue,
                Err(reason) => reason,
            },
            Ok(None) => {
                // A crashed server closes its output as it exits: give the supervisor the
                // chance to report the exit status, the more useful reason.
                let mut closing = shared.shutdown.subscribe();
                let _ =
                    tokio::time::timeout(EXIT_STATUS_WAIT, closing.wait_for(|closing| *closing))
                        .await;
                FailureReason::StdoutClosed
            }
            Err(framing::FrameError::TooLong { limit }) => FailureReason::FrameTooLong { limit },
            Err(framing::FrameError::Io(error)) => FailureReason::Read {
                message: error.to_string(),
            },
        };
        shared.fail(reason);
        return;
    }
}

fn not_json_rpc(detail: impl Into<String>) -> FailureReason {
    FailureReason::NotJsonRpc {
        detail: detail.into(),
    }
}

/// Handles one line from the server; an error fails the server.
fn handle_line(shared: &Shared, line: &[u8]) -> Result<(), FailureReason> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let message: Value = serde_json::from_slice(line).map_err(|error| {
        let start =
            String::from_utf8_lossy(line.get(..MAX_QUOTED_BYTES).unwrap_or(line)).into_owned();
        not_json_rpc(format!(
            "{error}, in a line that starts with `{}`",
            quote(&start)
        ))
    })?;
    let Value::Object(mut message) = message else {
        return Err(not_json_rpc(if message.is_array() {
            "a batch, which MCP no longer has"
        } else {
            "not a JSON object"
        }));
    };
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(not_json_rpc("`jsonrpc` is not `2.0`"));
    }
    let id = message.remove("id");
    match (message.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => {
            answer_server_request(shared, id, &method);
            Ok(())
        }
        (Some(Value::String(method)), None) => {
            handle_notification(shared, &method, message.remove("params"));
            Ok(())
        }
        (Some(_), _) => Err(not_json_rpc("`method` is not a string")),
        (None, Some(id)) => handle_response(shared, id, message, line),
        (None, None) => Err(not_json_rpc(
            "neither a request, a notification nor a response",
        )),
    }
}

/// Refuses a request from the server: toolward offers servers nothing (no roots, sampling or
/// elicitation), except the answer to `ping`, which the specification requires.
fn answer_server_request(shared: &Shared, id: Value, method: &str) {
    let answer = if method == "ping" {
        json!({ "jsonrpc": "2.0", "id": id, "result": {} })
    } else {
        tracing::debug!(server = %shared.server, "server `{}` asked for `{}`; refused", shared.server, quote(method));
        json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": { "code": METHOD_NOT_FOUND, "message": format!("toolward offers servers no `{}`", quote(method)) },
        })
    };
    let _ = shared.send(&answer);
}

fn handle_notification(shared: &Shared, method: &str, params: Option<Value>) {
    match method {
        "notifications/tools/list_changed" => {
            // The operator hears of it once per connection, at a level shown by default: a
            // server that repeats it must not flood the log. (The supervisor tells the
            // client, `crate::supervise`.)
            let mut first = false;
            shared.list_changed.send_modify(|count| {
                first = *count == 0;
                *count += 1;
            });
            if first {
                tracing::warn!(server = %shared.server, "server `{}` says its tool list changed; the loaded tools stay as they are", shared.server);
            } else {
                tracing::debug!(server = %shared.server, "server `{}` says its tool list changed again", shared.server);
            }
        }
        "notifications/progress" => {
            let params = params.unwrap_or(Value::Null);
            let Some(token) = params.get("progressToken").and_then(Value::as_u64) else {
                return;
            };
            let sink = lock(&shared.pending)
                .get(&token)
                .and_then(|pending| pending.progress.clone());
            if let Some(sink) = sink {
                let _ = sink.send(params);
            }
        }
        "notifications/message" => log_server_message(shared, params.unwrap_or(Value::Null)),
        other => {
            tracing::debug!(server = %shared.server, "notification `{}` from server `{}` ignored", quote(other), shared.server)
        }
    }
}

/// A server's log message (MCP specification, "Logging") to tracing, at the server's level.
fn log_server_message(shared: &Shared, params: Value) {
    let (write, dropped) = lock(&shared.log_budget).admit(Instant::now());
    if dropped > 0 {
        tracing::warn!(
            server = %shared.server,
            "server `{}`: {dropped} log messages dropped (more than {MAX_SERVER_LOG_LINES_PER_SECOND} a second)",
            shared.server
        );
    }
    if !write {
        return;
    }
    let level = params
        .get("level")
        .and_then(Value::as_str)
        .unwrap_or("info");
    let logger = params
        .get("logger")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let data = match params.get("data") {
        Some(Value::String(text)) => quote(text),
        Some(other) => quote(&other.to_string()),
        None => String::new(),
    };
    let server = &shared.server;
    let logger = quote(logger);
    match level {
        "debug" => tracing::debug!(server = %server, logger = %logger, "{data}"),
        "info" | "notice" => tracing::info!(server = %server, logger = %logger, "{data}"),
        "warning" => tracing::warn!(server = %server, logger = %logger, "{data}"),
        _ => tracing::error!(server = %server, logger = %logger, "{data}"),
    }
}

fn handle_response(
    shared: &Shared,
    id: Value,
    mut message: Map<String, Value>,
    line: &[u8],
) -> Result<(), FailureReason> {
    let outcome = match (message.remove("result"), message.remove("error")) {
        (Some(result), None) => Ok(result),
        (None, Some(error)) => Err(error),
        (Some(_), Some(_)) => {
            return Err(not_json_rpc("a response with both `result` and `error`"));
        }
        (None, None) => return Err(not_json_rpc("a response with neither `result` nor `error`")),
    };
    let Some(id) = id.as_u64() else {
        // toolward only sends integer ids; a null id answers a message the server could not
        // parse.
        tracing::warn!(server = %shared.server, "server `{}` answered an id toolward did not send: `{}`", shared.server, quote(&id.to_string()));
        return Ok(());
    };
    let Some(pending) = lock(&shared.pending).remove(&id) else {
        // Cancelled or timed out meanwhile.
        tracing::debug!(server = %shared.server, "late answer {id} from server `{}` dropped", shared.server);
        return Ok(());
    };
    let answer = match outcome {
        Ok(result) if pending.raw => match framing::top_level_member(line, "result") {
            Ok(Some(bytes)) => Ok(Payload::Raw(bytes.to_vec())),
            Ok(None) => Ok(Payload::Decoded(result)),
            Err(error) => {
                let reason = not_json_rpc(error.to_string());
                let _ = pending.reply.send(Err(shared.failed_error(reason.clone())));
                return Err(reason);
            }
        },
        Ok(result) => Ok(Payload::Decoded(result)),
        Err(error) => {
            let code = error.get("code").and_then(Value::as_i64);
            let text = error.get("message").and_then(Value::as_str);
            let (Some(code), Some(text)) = (code, text) else {
                let reason =
                    not_json_rpc("an `error` without an integer `code` and a string `message`");
                let _ = pending.reply.send(Err(shared.failed_error(reason.clone())));
                return Err(reason);
            };
            Err(TransportError::Rpc {
                server: shared.server.clone(),
                method: pending.method.to_owned(),
                code,
                message: text.to_owned(),
                data: error.get("data").cloned(),
            })
        }
    };
    let _ = pending.reply.send(answer);
    Ok(())
}

/// Writes queued lines to the server's standard input until told to close it.
async fn write_stdin(
    shared: Arc<Shared>,
    mut stdin: ChildStdin,
    mut outgoing: mpsc::UnboundedReceiver<Outgoing>,
) {
    while let Some(Outgoing::Line(mut line)) = outgoing.recv().await {
        line.push(b'\n');
        let written = async {
            stdin.write_all(&line).await?;
            stdin.flush().await
        };
        if let Err(error) = written.await {
            // A broken pipe usually means the server exited: as for a closed standard
            // output, give the supervisor a chance to report the exit status first.
            let mut closing = shared.shutdown.subscribe();
            let _ =
                tokio::time::timeout(EXIT_STATUS_WAIT, closing.wait_for(|closing| *closing)).await;
            shared.fail(FailureReason::Write {
                message: error.to_string(),
            });
            return;
        }
    }
    // `Outgoing::Close`: dropping `stdin` closes the pipe, the polite request to exit.
}

/// Keeps the end of the server's standard error.
async fn drain_stderr(shared: Arc<Shared>, mut stderr: ChildStderr) {
    let mut buffer = vec![0u8; STDERR_READ_BUFFER_BYTES];
    loop {
        match stderr.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => shared.push_stderr(buffer.get(..read).unwrap_or_default()),
        }
    }
}

/// Kills the server's group if the supervisor is dropped before it finished (the runtime
/// shutting down): the synchronous part of closing.
#[derive(Debug)]
struct GroupKillGuard {
    pgid: Option<u32>,
}

impl Drop for GroupKillGuard {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pgid) = self.pgid {
            process::signal_group(pgid, process::SIGKILL);
        }
        #[cfg(not(unix))]
        let _ = self.pgid;
    }
}

/// Owns the server's process: waits for it to exit or for the order to close, then ends its
/// group and descendants (see the module documentation) and stops the tasks.
async fn supervise(
    shared: Arc<Shared>,
    mut child: Box<dyn ChildWrapper>,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
    tasks: Vec<JoinHandle<()>>,
    done: watch::Sender<bool>,
) {
    let pid = child.id();
    let mut guard = GroupKillGuard { pgid: pid };
    // The wrapper's own `wait` would also reap the whole group, blocking while any member
    // lives; only the leader's exit is waited for here.
    let mut exited = tokio::select! {
        status = child.inner_mut().wait() => {
            let status = status.map_or_else(|error| error.to_string(), |status| status.to_string());
            shared.fail(FailureReason::Exited { status });
            true
        }
        _ = shutdown.wait_for(|closing| *closing) => false,
    };
    // Before the leader goes, while parent links still lead from it to every descendant.
    let family = pid.map(process::descendants).unwrap_or_default();
    let _ = shared.outgoing.send(Outgoing::Close);
    if !exited {
        exited = tokio::time::timeout(grace, child.inner_mut().wait())
            .await
            .is_ok();
    }
    #[cfg(unix)]
    if let Some(pgid) = pid {
        if !exited || process::group_alive(pgid) || !family.is_empty() {
            process::signal_group(pgid, process::SIGTERM);
            family
                .iter()
                .for_each(|member| member.signal(process::SIGTERM));
            let deadline = tokio::time::Instant::now() + grace;
            loop {
                if !exited {
                    exited = matches!(child.inner_mut().try_wait(), Ok(Some(_)));
                }
                if (exited && !process::group_alive(pgid))
                    || tokio::time::Instant::now() >= deadline
                {
                    break;
                }
                tokio::time::sleep(CLOSE_POLL_INTERVAL).await;
            }
        }
        process::signal_group(pgid, process::SIGKILL);
        family
            .iter()
            .for_each(|member| member.signal(process::SIGKILL));
    }
    #[cfg(not(unix))]
    {
        // No process group off Unix: the leader alone is killed.
        let _ = (&family, child.start_kill());
    }
    if !exited {
        exited = tokio::time::timeout(KILL_WAIT, child.inner_mut().wait())
            .await
            .is_ok();
    }
    // A descendant is reparented only once its parent has exited: wait for the killed group
    // to be gone, or the sweep could run while a parent is still dying and miss its orphan.
    #[cfg(unix)]
    if let Some(pgid) = pid {
        let deadline = tokio::time::Instant::now() + KILL_WAIT;
        while process::group_alive(pgid) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(CLOSE_POLL_INTERVAL).await;
        }
    }
    process::reap_orphans(pid, KILL_WAIT, CLOSE_POLL_INTERVAL).await;
    if exited && let Some(pid) = pid {
        process::forget_leader(pid);
    }
    guard.pgid = None;
    let mut tasks = tasks.into_iter();
    if let Some(mut stderr) = tasks.next() {
        // A descendant that escaped every signal could hold the pipe open.
        if tokio::time::timeout(STDERR_DRAIN_AFTER_EXIT, &mut stderr)
            .await
            .is_err()
        {
            stderr.abort();
        }
    }
    for task in tasks {
        task.abort();
    }
    done.send_replace(true);
}
