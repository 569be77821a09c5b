//! The streamable HTTP transport: sending each message as a `POST`, reading its answer into
//! [`handle_line`], the `GET` stream, the session and closing. What it does and defends is
//! documented in the parent module ("Streamable HTTP").

mod sse;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Response, StatusCode};
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;

use super::client::{Connection, Outgoing, Shared, lock};
use super::incoming::handle_line;
use super::{FailureReason, HttpSpec, TransportError, TransportLimits, Upstream, framing};
use crate::text::MAX_QUOTED_BYTES;

/// The header that carries the session id (MCP specification, "Session Management").
const SESSION_ID: &str = "mcp-session-id";

/// The header that carries the agreed protocol version.
const PROTOCOL_VERSION: &str = "mcp-protocol-version";

/// The header that names a request's method, from 2026-07-28 (SEP-2243).
const MCP_METHOD: &str = "mcp-method";

/// The header that names the tool of a `tools/call` (or the prompt or resource), from
/// 2026-07-28 (SEP-2243).
const MCP_NAME: &str = "mcp-name";

/// The first protocol version whose requests carry [`MCP_METHOD`] and [`MCP_NAME`].
const STANDARD_HEADERS_VERSION: &str = "2026-07-28";

/// The media type of a JSON answer.
const JSON: &str = "application/json";

/// The media type of an event stream answer.
const EVENT_STREAM: &str = "text/event-stream";

/// What every `POST` accepts (MCP specification: both, always).
const ACCEPT_POST: &str = "application/json, text/event-stream";

/// Headers toolward sets itself or that frame the HTTP message: an operator's header of one of
/// these names is refused, rather than sent twice or left to the HTTP library to settle.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "connection",
    "content-length",
    "content-type",
    "host",
    "last-event-id",
    SESSION_ID,
    PROTOCOL_VERSION,
    MCP_METHOD,
    MCP_NAME,
    "transfer-encoding",
];

/// The `User-Agent` toolward sends.
const USER_AGENT: &str = concat!("toolward/", env!("CARGO_PKG_VERSION"));

/// Most scopes of an `insufficient_scope` challenge named in an error: 32. A server that names
/// more is named as asking for something unusable.
const MAX_CHALLENGE_SCOPES: usize = 32;

/// The method named in errors about a response toolward sends to a server's request.
const ANSWER_TO_SERVER: &str = "(an answer to a server request)";

/// One server's endpoint: its client, where it is, what goes with every request, and the
/// exchanges in flight.
#[derive(Debug)]
struct Endpoint {
    client: reqwest::Client,
    url: reqwest::Url,
    /// The operator's headers for this server, marked sensitive.
    headers: HeaderMap,
    /// The server's OAuth grant, whose token goes with every request.
    oauth: Option<Arc<crate::oauth::Credentials>>,
    session: Mutex<Option<HeaderValue>>,
    protocol_version: Mutex<Option<HeaderValue>>,
    body_limit: usize,
    request_timeout: Duration,
    /// The exchange of each request in flight, by request id.
    exchanges: Mutex<HashMap<u64, AbortHandle>>,
    /// The dispatcher and the `GET` stream.
    background: Mutex<Vec<AbortHandle>>,
}

impl Endpoint {
    fn new(
        server: &str,
        spec: &HttpSpec,
        limits: &TransportLimits,
    ) -> Result<Endpoint, TransportError> {
        let invalid = |detail: String| TransportError::InvalidHttpSpec {
            server: server.to_owned(),
            detail,
        };
        let url = reqwest::Url::parse(&spec.url)
            .map_err(|error| invalid(format!("`url` is not a URL ({error})")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(String::from(
                "`url` is not an `http://` or `https://` URL",
            )));
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &spec.headers {
            let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                invalid(format!(
                    "`{}` is not a header name",
                    super::errors::quote(name)
                ))
            })?;
            if RESERVED_HEADERS.contains(&header.as_str()) {
                return Err(invalid(format!(
                    "the header `{header}` is set by toolward and cannot be configured"
                )));
            }
            // The value is never quoted: it is often a credential.
            let mut value = HeaderValue::from_bytes(value.as_bytes()).map_err(|_| {
                invalid(format!(
                    "the value of header `{header}` has a character a header cannot hold"
                ))
            })?;
            value.set_sensitive(true);
            headers.append(header, value);
        }
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(USER_AGENT)
            .connect_timeout(limits.start_timeout);
        if let Some(bundle) = &spec.ca_file {
            builder = crate::oauth::with_roots(builder, bundle).map_err(|source| {
                TransportError::HttpClient {
                    server: server.to_owned(),
                    source,
                }
            })?;
        }
        let client = builder
            .build()
            .map_err(|source| TransportError::HttpClient {
                server: server.to_owned(),
                source,
            })?;
        Ok(Endpoint {
            client,
            url,
            headers,
            oauth: spec.oauth.clone(),
            session: Mutex::new(None),
            protocol_version: Mutex::new(None),
            body_limit: limits.max_http_body_bytes,
            request_timeout: limits.request_timeout,
            exchanges: Mutex::new(HashMap::new()),
            background: Mutex::new(Vec::new()),
        })
    }

    fn session(&self) -> Option<HeaderValue> {
        lock(&self.session).clone()
    }

    /// The principal whose grant this session uses; `None`: the operator's (or no grant).
    fn principal(&self) -> Option<String> {
        self.oauth
            .as_ref()
            .and_then(|credentials| credentials.principal().map(str::to_owned))
    }

    /// The `Authorization` value of the server's grant, renewed first when it is about to
    /// expire; `None` without a grant.
    async fn authorization(&self, server: &str) -> Result<Option<HeaderValue>, TransportError> {
        match &self.oauth {
            Some(credentials) => credentials
                .authorization()
                .await
                .map(Some)
                .map_err(|error| sign_in(server, credentials.principal(), &error)),
            None => Ok(None),
        }
    }

    /// `builder` with the grant's token, when there is a grant and its token can be had
    /// (for the `GET` stream and the closing `DELETE`, which fail quietly without it).
    async fn with_token(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.oauth {
            Some(credentials) => match credentials.authorization().await {
                Ok(value) => builder.header(header::AUTHORIZATION, value),
                Err(_) => builder,
            },
            None => builder,
        }
    }

    /// `builder` with the operator's headers, the session id and the protocol version.
    fn with_headers(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let mut builder = builder.headers(self.headers.clone());
        if let Some(session) = self.session() {
            builder = builder.header(SESSION_ID, session);
        }
        if let Some(version) = lock(&self.protocol_version).clone() {
            builder = builder.header(PROTOCOL_VERSION, version);
        }
        builder
    }

    fn post(
        &self,
        message: Vec<u8>,
        authorization: Option<HeaderValue>,
    ) -> reqwest::RequestBuilder {
        let mut builder = self.with_headers(self.client.post(self.url.clone()));
        if let Some(authorization) = authorization {
            builder = builder.header(header::AUTHORIZATION, authorization);
        }
        // Before a version is agreed, the `server/discover` probe names its version in
        // `_meta`, and the 2026-07-28 revision wants the header to say the same.
        let agreed = lock(&self.protocol_version).clone();
        let version = match agreed {
            Some(version) => Some(version),
            None => {
                let probe = probe_version(&message);
                if let Some(version) = &probe {
                    builder = builder.header(PROTOCOL_VERSION, version.clone());
                }
                probe
            }
        };
        // 2026-07-28 asks for the method and name in headers too, so that a load balancer
        // can route without reading the body; the server checks they match it.
        if version.is_some_and(|v| v.as_bytes() >= STANDARD_HEADERS_VERSION.as_bytes()) {
            for (name, value) in standard_headers(&message) {
                builder = builder.header(name, value);
            }
        }
        builder
            .header(header::CONTENT_TYPE, JSON)
            .header(header::ACCEPT, ACCEPT_POST)
            .body(message)
    }

    /// Keeps a task to abort at close (`exchange` is the request id of a `POST`), or aborts
    /// it at once if closing has begun.
    fn track(&self, shared: &Shared, exchange: Option<u64>, task: AbortHandle) {
        match exchange {
            Some(id) => {
                let mut exchanges = lock(&self.exchanges);
                exchanges.retain(|_, task| !task.is_finished());
                exchanges.insert(id, task.clone());
            }
            None => lock(&self.background).push(task.clone()),
        }
        // Checked after the task is recorded: the supervisor aborts what is recorded once
        // closing has begun.
        if *shared.shutdown.borrow() {
            task.abort();
        }
    }
}

/// The error of a server whose grant (the operator's, or `principal`'s) is missing, refused
/// or cannot be renewed.
fn sign_in(
    server: &str,
    principal: Option<&str>,
    error: &crate::oauth::OAuthError,
) -> TransportError {
    let detail = match error {
        crate::oauth::OAuthError::NotSignedIn { reason, .. } => reason.clone(),
        other => format!(
            "its grant could not be used: {}",
            crate::text::error_chain(other)
        ),
    };
    TransportError::SignIn {
        server: server.to_owned(),
        principal: principal.map(str::to_owned),
        detail,
    }
}

/// The error of a `403` whose `WWW-Authenticate: Bearer` challenge says
/// `error="insufficient_scope"`, or `None` for any other `403`. The challenge's `scope` is
/// the server's text: named in the message only when it is a list of scope tokens (RFC 6749,
/// section 3.3), so it cannot put anything else into the command the message names.
fn insufficient_scope(
    server: &str,
    principal: Option<String>,
    method: &str,
    headers: &HeaderMap,
) -> Option<TransportError> {
    let challenge = crate::oauth::discovery::bearer_challenge(headers)?;
    if challenge.error.as_deref() != Some("insufficient_scope") {
        return None;
    }
    let named: Vec<String> = challenge
        .scope
        .as_deref()
        .unwrap_or_default()
        .split(' ')
        .filter(|scope| !scope.is_empty())
        .map(str::to_owned)
        .collect();
    let unusable = named.len() > MAX_CHALLENGE_SCOPES
        || named
            .iter()
            .any(|scope| !crate::oauth::is_scope_token(scope));
    Some(TransportError::InsufficientScope {
        server: server.to_owned(),
        principal,
        method: method.to_owned(),
        scopes: if unusable { Vec::new() } else { named },
        unusable,
    })
}

/// Why an exchange ended without its answer: an error for the request alone, or a fault
/// that fails the server.
#[derive(Debug)]
enum Fault {
    Request(TransportError),
    Server(FailureReason),
}

impl Upstream {
    /// Reaches the streamable HTTP server `spec` as server `server` and runs the
    /// `initialize` handshake, then sends `notifications/initialized` and opens the stream
    /// for the server's own messages. See the [module documentation](super) ("Streamable
    /// HTTP") for how messages are exchanged and what is defended.
    ///
    /// # Errors
    ///
    /// [`TransportError::InvalidHttpSpec`] before sending anything (a `url` that is not an
    /// `http://` or `https://` URL, a header that cannot be sent or that toolward sets
    /// itself); [`TransportError::HttpClient`]; [`TransportError::StartTimeout`] after
    /// [`TransportLimits::start_timeout`]; for `initialize`: [`TransportError::Http`] when the
    /// server cannot be reached, [`TransportError::Redirect`], [`TransportError::HttpStatus`],
    /// [`TransportError::ContentType`], [`TransportError::NoResponse`],
    /// [`TransportError::Rpc`], [`TransportError::MalformedResponse`],
    /// [`TransportError::UnsupportedProtocol`]; [`TransportError::Failed`] when the server
    /// fails meanwhile (a body past the limit, output that is not JSON-RPC). The session is
    /// ended when an error is returned.
    pub async fn connect_http(
        server: &str,
        spec: &HttpSpec,
        limits: &TransportLimits,
    ) -> Result<Upstream, TransportError> {
        let endpoint = Arc::new(Endpoint::new(server, spec, limits)?);
        let (outgoing, outgoing_rx) = mpsc::unbounded_channel();
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (done_tx, done) = watch::channel(false);
        let shared = Arc::new(Shared::new(server, outgoing, shutdown));
        let dispatcher = tokio::spawn(dispatch(
            Arc::clone(&shared),
            Arc::clone(&endpoint),
            outgoing_rx,
        ));
        endpoint.track(&shared, None, dispatcher.abort_handle());
        tokio::spawn(supervise(
            Arc::clone(&shared),
            Arc::clone(&endpoint),
            shutdown_rx,
            limits.close_grace,
            done_tx,
        ));
        let connection = Connection {
            shared: Arc::clone(&shared),
            done,
            pid: None,
            confinement: None,
        };
        let upstream = Upstream::handshake(connection, limits, |identity| {
            // The identity's version is one of ours, so always a valid header value.
            *lock(&endpoint.protocol_version) =
                HeaderValue::from_str(&identity.protocol_version).ok();
        })
        .await?;
        let listener = tokio::spawn(listen(Arc::clone(&shared), Arc::clone(&endpoint)));
        endpoint.track(&shared, None, listener.abort_handle());
        Ok(upstream)
    }
}

/// What an outgoing message is, for sending it.
enum Kind {
    /// A request: its id and method.
    Request(u64, String),
    /// A notification (its method, and the request it cancels, if any) or a response.
    Other(String, Option<u64>),
}

impl Kind {
    fn of(message: &[u8]) -> Kind {
        let Ok(message) = serde_json::from_slice::<Value>(message) else {
            return Kind::Other(String::from("(a message)"), None);
        };
        let method = message.get("method").and_then(Value::as_str);
        match (method, message.get("id").and_then(Value::as_u64)) {
            (Some(method), Some(id)) => Kind::Request(id, method.to_owned()),
            (Some(method), None) => {
                let cancels = (method == "notifications/cancelled")
                    .then(|| message.pointer("/params/requestId").and_then(Value::as_u64))
                    .flatten();
                Kind::Other(method.to_owned(), cancels)
            }
            (None, _) => Kind::Other(String::from(ANSWER_TO_SERVER), None),
        }
    }
}

/// Sends each queued message: a request in an exchange task of its own, a notification or a
/// response in order (see the module documentation).
async fn dispatch(
    shared: Arc<Shared>,
    endpoint: Arc<Endpoint>,
    mut outgoing: mpsc::UnboundedReceiver<Outgoing>,
) {
    while let Some(Outgoing::Line(message)) = outgoing.recv().await {
        match Kind::of(&message) {
            Kind::Request(id, method) => {
                let task = tokio::spawn(exchange_request(
                    Arc::clone(&shared),
                    Arc::clone(&endpoint),
                    message,
                    id,
                    method,
                ));
                endpoint.track(&shared, Some(id), task.abort_handle());
            }
            Kind::Other(method, cancels) => {
                // The server answers a cancelled request no more: stop reading its stream.
                if let Some(task) = cancels.and_then(|id| lock(&endpoint.exchanges).remove(&id)) {
                    task.abort();
                }
                send_other(&shared, &endpoint, message, &method).await;
            }
        }
    }
}

/// Sends a request and handles its answer; the request ends with an error when the answer
/// does not hold its response.
/// The protocol version a request names in `_meta` (the 2026-07-28 revision's per-request
/// context), as a header value.
fn probe_version(message: &[u8]) -> Option<HeaderValue> {
    let message: serde_json::Value = serde_json::from_slice(message).ok()?;
    let version = message
        .get("params")?
        .get("_meta")?
        .get(super::lifecycle::META_PROTOCOL_VERSION)?
        .as_str()?;
    HeaderValue::from_str(version).ok()
}

/// The `Mcp-Method` and `Mcp-Name` headers of a request (SEP-2243): the method, and for
/// `tools/call` and `prompts/get` the `name` (`uri` for resources), Base64-wrapped
/// (`=?base64?…?=`) when it is not plain printable ASCII. None for a response or a
/// notification without a method.
fn standard_headers(message: &[u8]) -> Vec<(&'static str, HeaderValue)> {
    #[derive(serde::Deserialize)]
    struct Params {
        name: Option<String>,
        uri: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Message {
        method: Option<String>,
        params: Option<Params>,
    }
    let Ok(Message {
        method: Some(method),
        params,
    }) = serde_json::from_slice::<Message>(message)
    else {
        return Vec::new();
    };
    let mut headers = Vec::new();
    if let Ok(value) = HeaderValue::from_str(&method) {
        headers.push((MCP_METHOD, value));
    }
    let name = params.and_then(|params| match method.as_str() {
        "tools/call" | "prompts/get" => params.name,
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => params.uri,
        _ => None,
    });
    if let Some(name) = name {
        let wrap = name.starts_with([' ', '\t'])
            || name.ends_with([' ', '\t'])
            || !name.bytes().all(|b| (0x20..0x7f).contains(&b))
            || (name.starts_with("=?base64?") && name.ends_with("?="));
        let text = if wrap {
            format!("=?base64?{}?=", base64(name.as_bytes()))
        } else {
            name
        };
        if let Ok(value) = HeaderValue::from_str(&text) {
            headers.push((MCP_NAME, value));
        }
    }
    headers
}

/// Standard Base64 with padding (RFC 4648, section 4), for [`standard_headers`].
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (index, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if index <= chunk.len() {
                let digit = usize::try_from((n >> shift) & 63).unwrap_or(0);
                out.push(char::from(ALPHABET.get(digit).copied().unwrap_or(b'=')));
            } else {
                out.push('=');
            }
        }
    }
    out
}

async fn exchange_request(
    shared: Arc<Shared>,
    endpoint: Arc<Endpoint>,
    message: Vec<u8>,
    id: u64,
    method: String,
) {
    let error = match exchange(&shared, &endpoint, message, Some(id), &method).await {
        Ok(()) => TransportError::NoResponse {
            server: shared.server.clone(),
            method,
        },
        Err(Fault::Request(error)) => error,
        Err(Fault::Server(reason)) => {
            shared.fail(reason);
            return;
        }
    };
    shared.refuse(id, error);
}

/// Sends a notification or a response and waits for the server to accept it.
async fn send_other(shared: &Shared, endpoint: &Endpoint, message: Vec<u8>, method: &str) {
    let sent = tokio::time::timeout(
        endpoint.request_timeout,
        exchange(shared, endpoint, message, None, method),
    )
    .await;
    match sent {
        Ok(Ok(())) => {}
        Ok(Err(Fault::Server(reason))) => shared.fail(reason),
        Ok(Err(Fault::Request(error))) => {
            tracing::warn!(server = %shared.server, "{}", crate::text::error_chain(&error));
        }
        Err(_) => tracing::warn!(
            server = %shared.server,
            "server `{}` did not accept `{method}` within {} ms",
            shared.server,
            endpoint.request_timeout.as_millis()
        ),
    }
}

/// One `POST` of `message` and its answer. Each message of the answer goes to
/// [`handle_line`]; an event stream is read while request `waiting` (if any) waits.
async fn exchange(
    shared: &Shared,
    endpoint: &Endpoint,
    message: Vec<u8>,
    waiting: Option<u64>,
    method: &str,
) -> Result<(), Fault> {
    let http_error = |source: reqwest::Error| {
        Fault::Request(TransportError::Http {
            server: shared.server.clone(),
            method: method.to_owned(),
            source: source.without_url(),
        })
    };
    let body_fault = |error: BodyError| match error {
        BodyError::Server(reason) => Fault::Server(reason),
        BodyError::Read(source) => http_error(source),
    };
    let with_session = endpoint.session().is_some();
    let authorization = endpoint
        .authorization(&shared.server)
        .await
        .map_err(Fault::Request)?;
    // Kept for the one retry after a `401`, only when there is a grant to renew.
    let retry = authorization.as_ref().map(|_| message.clone());
    let mut response = endpoint
        .post(message, authorization.clone())
        .send()
        .await
        .map_err(http_error)?;
    if response.status() == StatusCode::UNAUTHORIZED {
        let (Some(credentials), Some(rejected), Some(message)) =
            (&endpoint.oauth, authorization, retry)
        else {
            let challenge = if response.headers().contains_key(header::WWW_AUTHENTICATE) {
                "it answered `401` with `WWW-Authenticate`"
            } else {
                "it answered `401`"
            };
            return Err(Fault::Request(TransportError::SignIn {
                server: shared.server.clone(),
                principal: endpoint.principal(),
                detail: format!("{challenge}, and toolward has no grant for it"),
            }));
        };
        let fresh = credentials
            .after_unauthorized(&rejected)
            .await
            .map_err(|error| {
                Fault::Request(sign_in(&shared.server, credentials.principal(), &error))
            })?;
        response = endpoint
            .post(message, Some(fresh))
            .send()
            .await
            .map_err(http_error)?;
        if response.status() == StatusCode::UNAUTHORIZED {
            return Err(Fault::Request(TransportError::SignIn {
                server: shared.server.clone(),
                principal: endpoint.principal(),
                detail: String::from("it refused the grant's token, renewed once"),
            }));
        }
    }
    let status = response.status();
    if status.is_redirection() {
        let location = response
            .headers()
            .get(header::LOCATION)
            .map(|location| String::from_utf8_lossy(location.as_bytes()).into_owned())
            .unwrap_or_default();
        return Err(Fault::Request(TransportError::Redirect {
            server: shared.server.clone(),
            method: method.to_owned(),
            status: status.as_u16(),
            location,
        }));
    }
    if status == StatusCode::NOT_FOUND && with_session {
        return Err(Fault::Server(FailureReason::SessionExpired));
    }
    if status == StatusCode::FORBIDDEN
        && let Some(error) = insufficient_scope(
            &shared.server,
            endpoint.principal(),
            method,
            response.headers(),
        )
    {
        return Err(Fault::Request(error));
    }
    if !status.is_success() {
        return Err(Fault::Request(TransportError::HttpStatus {
            server: shared.server.clone(),
            method: method.to_owned(),
            status: status.as_u16(),
            body: excerpt(&mut response).await,
        }));
    }
    if method == "initialize"
        && let Some(session) = response.headers().get(SESSION_ID)
    {
        // Whoever holds a session id may speak in the session: kept out of debug output too.
        let mut session = session.clone();
        session.set_sensitive(true);
        *lock(&endpoint.session) = Some(session);
    }
    if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
        return Ok(());
    }
    match media_type(response.headers()).as_deref() {
        Some(JSON) => {
            let body = read_body(&mut response, endpoint.body_limit)
                .await
                .map_err(body_fault)?;
            handle_json(shared, &body).map_err(Fault::Server)
        }
        Some(EVENT_STREAM) => read_events(shared, &mut response, endpoint.body_limit, waiting)
            .await
            .map_err(body_fault),
        other => {
            let content_type = other.unwrap_or_default().to_owned();
            let body = read_body(&mut response, endpoint.body_limit)
                .await
                .map_err(body_fault)?;
            if content_type.is_empty() && body.iter().all(u8::is_ascii_whitespace) {
                return Ok(());
            }
            Err(Fault::Request(TransportError::ContentType {
                server: shared.server.clone(),
                method: method.to_owned(),
                content_type,
            }))
        }
    }
}

/// The media type of `Content-Type`, lowercase and without parameters.
fn media_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::CONTENT_TYPE)?;
    let text = String::from_utf8_lossy(value.as_bytes());
    let media = text.split(';').next().unwrap_or_default().trim();
    Some(media.to_ascii_lowercase())
}

/// Why a body could not be read.
#[derive(Debug)]
enum BodyError {
    /// It went past the limit, or held something that is not JSON-RPC: the server fails.
    Server(FailureReason),
    /// Reading it failed.
    Read(reqwest::Error),
}

/// The whole body, refused as soon as it goes past `limit` bytes.
async fn read_body(response: &mut Response, limit: usize) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Read)? {
        let seen = body.len().saturating_add(chunk.len());
        if seen > limit {
            return Err(BodyError::Server(FailureReason::BodyTooLarge {
                limit,
                seen,
            }));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The start of an error answer's body, a little more than an error message quotes (so the
/// quote shows it was cut), read no further.
async fn excerpt(response: &mut Response) -> String {
    let mut body = Vec::new();
    while body.len() <= MAX_QUOTED_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(MAX_QUOTED_BYTES + 1);
    String::from_utf8_lossy(&body).into_owned()
}

/// A JSON answer: one message, or a batch of messages.
fn handle_json(shared: &Shared, body: &[u8]) -> Result<(), FailureReason> {
    let is_batch = body
        .iter()
        .find(|byte| !byte.is_ascii_whitespace())
        .is_some_and(|byte| *byte == b'[');
    if !is_batch {
        return handle_line(shared, body);
    }
    let messages = framing::array_items(body).map_err(|error| FailureReason::NotJsonRpc {
        detail: format!("a batch that is not a JSON array of messages ({error})"),
    })?;
    messages
        .into_iter()
        .try_for_each(|message| handle_line(shared, message))
}

/// Reads an event stream until it ends, or, for a request, until it no longer waits.
async fn read_events(
    shared: &Shared,
    response: &mut Response,
    limit: usize,
    waiting: Option<u64>,
) -> Result<(), BodyError> {
    let mut events = sse::EventReader::new(limit);
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Read)? {
        let messages = events.push(&chunk).map_err(|too_large| {
            BodyError::Server(FailureReason::EventTooLarge {
                limit: too_large.limit,
                seen: too_large.seen,
            })
        })?;
        for message in messages {
            handle_line(shared, &message).map_err(BodyError::Server)?;
        }
        if waiting.is_some_and(|id| !shared.is_waiting(id)) {
            break;
        }
    }
    Ok(())
}

/// The stream of the server's own messages (a `GET`), read until it ends.
async fn listen(shared: Arc<Shared>, endpoint: Arc<Endpoint>) {
    let request = endpoint
        .with_token(endpoint.with_headers(endpoint.client.get(endpoint.url.clone())))
        .await
        .header(header::ACCEPT, EVENT_STREAM);
    let mut response = match request.send().await {
        Ok(response) => response,
        Err(error) => {
            tracing::debug!(server = %shared.server, "server `{}`: no stream of its own messages: {}", shared.server, error.without_url());
            return;
        }
    };
    let status = response.status();
    if !status.is_success() || media_type(response.headers()).as_deref() != Some(EVENT_STREAM) {
        // `405 Method Not Allowed` is how a server says it has no such stream.
        tracing::debug!(server = %shared.server, "server `{}` offers no stream of its own messages (HTTP status {})", shared.server, status.as_u16());
        return;
    }
    match read_events(&shared, &mut response, endpoint.body_limit, None).await {
        Ok(()) => {}
        Err(BodyError::Server(reason)) => shared.fail(reason),
        Err(BodyError::Read(error)) => {
            tracing::debug!(server = %shared.server, "server `{}`: its stream of its own messages broke: {}", shared.server, error.without_url());
        }
    }
}

/// Waits for the order to close (or a failure), then stops every exchange and ends the
/// session (unless it expired), waiting at most `grace` for the `DELETE`.
async fn supervise(
    shared: Arc<Shared>,
    endpoint: Arc<Endpoint>,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
    done: watch::Sender<bool>,
) {
    let _ = shutdown.wait_for(|closing| *closing).await;
    for task in lock(&endpoint.background).drain(..) {
        task.abort();
    }
    for (_, task) in lock(&endpoint.exchanges).drain() {
        task.abort();
    }
    if endpoint.session().is_some() && shared.failure() != Some(FailureReason::SessionExpired) {
        // `with_headers` adds the session id.
        let request = endpoint
            .with_token(endpoint.with_headers(endpoint.client.delete(endpoint.url.clone())))
            .await;
        match tokio::time::timeout(grace, request.send()).await {
            Ok(Ok(response))
                if response.status().is_success()
                    || response.status() == StatusCode::METHOD_NOT_ALLOWED => {}
            Ok(Ok(response)) => {
                tracing::debug!(server = %shared.server, "server `{}` answered the end of its session with HTTP status {}", shared.server, response.status().as_u16())
            }
            Ok(Err(error)) => {
                tracing::debug!(server = %shared.server, "could not end the session of server `{}`: {}", shared.server, error.without_url())
            }
            Err(_) => {
                tracing::debug!(server = %shared.server, "server `{}` did not answer the end of its session within {} ms", shared.server, grace.as_millis())
            }
        }
    }
    done.send_replace(true);
}
