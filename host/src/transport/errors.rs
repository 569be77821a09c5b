//! Why a server failed and the errors of its requests, with the server text they quote.

use std::io;

use serde_json::Value;

use super::{DISCOVER_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS};
use crate::text::MAX_QUOTED_BYTES;

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
    /// Its handed-in transport ended (an rmcp transport the embedder gave): the server end
    /// closed, or a message could not be carried.
    #[error("its handed-in transport ended: {detail}")]
    HandedEnded {
        /// Why, as the transport said (escaped).
        detail: String,
    },
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
    /// The server's handed-in transport was used by an earlier connection: a handed-in
    /// server is connected once (by a pin, or by a start) and is never restarted.
    #[error(
        "server `{server}` was handed in as a transport that an earlier connection used: a handed-in server is connected once and cannot be restarted; hand in a new transport (one to pin, another to start)"
    )]
    HandedUsed {
        /// The server's name in the configuration.
        server: String,
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
    /// The server answered with well-formed JSON that toolward cannot decode (a lone
    /// surrogate escape, nesting past the decoder's limit): that answer alone was refused,
    /// and the connection goes on.
    #[error("server `{server}` answered `{method}` with JSON toolward cannot read: {detail}")]
    UnreadableResponse {
        /// The server's name in the configuration.
        server: String,
        /// The JSON-RPC method.
        method: String,
        /// What it cannot read, and where (never the server's text).
        detail: String,
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
    #[cfg(feature = "http-upstream")]
    #[error("could not set up the HTTP client for server `{server}`")]
    HttpClient {
        /// The server's name in the configuration.
        server: String,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// A message could not be sent to the HTTP server, or its answer could not be read.
    #[cfg(feature = "http-upstream")]
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
    /// The HTTP server asks for sign-in (`401`) and toolward has no grant it accepts, or the
    /// grant could not be used or renewed. Nothing interactive happens here: the operator
    /// signs in with `toolward auth login SERVER` (`--principal P` for a principal's grant).
    #[error("server `{server}` needs sign-in{} ({detail}): run `{}`", for_principal(principal.as_deref()), crate::text::login_command(server, principal.as_deref(), &[]))]
    SignIn {
        /// The server's name in the configuration.
        server: String,
        /// The principal whose upstream session it is; `None`: the operator's.
        principal: Option<String>,
        /// Why (no grant, the grant refused after a renewal, the grant unusable).
        detail: String,
    },
    /// The HTTP server answered `403` with `WWW-Authenticate: Bearer
    /// error="insufficient_scope"` (RFC 6750, section 3.1; MCP specification 2025-11-25,
    /// "Scope Challenge Handling"): the grant lacks a scope. Nothing interactive happens
    /// here: the message names the sign-in that asks for the scopes the server named.
    #[error("server `{server}` refused `{method}` for want of scope{}{}: run `{}`", for_principal(principal.as_deref()), scope_suffix(.scopes, *.unusable), crate::text::login_command(server, principal.as_deref(), scopes))]
    InsufficientScope {
        /// The server's name in the configuration.
        server: String,
        /// The principal whose upstream session it is; `None`: the operator's.
        principal: Option<String>,
        /// The JSON-RPC method.
        method: String,
        /// The scopes its challenge named (`scope`), each a scope token of RFC 6749.
        scopes: Vec<String>,
        /// Whether its challenge named a `scope` that is not a list of scope tokens (left out
        /// of the command, never quoted).
        unusable: bool,
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

/// ` for principal `P`` for a principal's upstream session, else nothing.
fn for_principal(principal: Option<&str>) -> String {
    principal.map_or_else(String::new, |principal| {
        format!(
            " for principal `{}`",
            crate::text::quote(principal, crate::text::MAX_QUOTED_BYTES)
        )
    })
}

/// What an `insufficient_scope` answer asked for, for its message.
fn scope_suffix(scopes: &[String], unusable: bool) -> String {
    match (scopes.is_empty(), unusable) {
        (_, true) => String::from(" (it named a `scope` that is not a list of scopes)"),
        (true, false) => String::from(" (it named no scope)"),
        (false, false) => format!(" (it asks for `{}`)", scopes.join(" ")),
    }
}

/// Server text for a one-line message: [`crate::text::quote`] at [`MAX_QUOTED_BYTES`].
pub(super) fn quote(text: &str) -> String {
    crate::text::quote(text, MAX_QUOTED_BYTES)
}

/// `: `…`` for a non-empty HTTP error body, else nothing.
pub(super) fn body_suffix(body: &str) -> String {
    let trimmed = body.trim();
    if trimmed.is_empty() {
        String::new()
    } else {
        format!(": `{}`", quote(trimmed))
    }
}

/// `; stderr ends with `…`` for a non-empty standard error tail, else nothing.
pub(super) fn stderr_suffix(stderr: &str) -> String {
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
pub(super) fn tail(text: &str, limit: usize) -> &str {
    let mut start = text.len().saturating_sub(limit);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text.get(start..).unwrap_or_default()
}
