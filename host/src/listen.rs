//! Listen: the gateway over streamable HTTP (`toolward serve --listen ADDR`; MCP
//! specification 2025-11-25, "Transports", streamable HTTP), for clients that connect to a
//! running toolward instead of starting it.
//!
//! Three checks keep out whoever does not belong, before rmcp's streamable HTTP service sees
//! the request:
//!
//! 1. **Loopback**: [`serve_http`] refuses an address that is not a loopback address unless
//!    the caller says otherwise ([`ListenSettings::allow_non_loopback`]); rmcp checks the
//!    `Host` header against the loopback names as well (DNS rebinding).
//! 2. **Origin**: a request whose `Origin` header is not in `listen.allowed_origins` is
//!    answered 403, token or not (the specification's DNS-rebinding warning: a page in the
//!    operator's browser must not reach the gateway). A request without `Origin` is not from
//!    a browser and passes this check.
//! 3. **Bearer token**: `Authorization: Bearer TOKEN` must carry one of the named tokens
//!    (`listen.tokens`), else 401 with `WWW-Authenticate: Bearer`. Without named tokens, one
//!    is generated at first start into [`TOKEN_FILE`] in the state folder (owner-only
//!    permissions) and named after the configured principal. Tokens are compared by their
//!    SHA-256, in time independent of where they differ.
//!
//! 4. **OAuth** (`listen.oauth`, [`oauth`]): a bearer token that is not one of the named
//!    tokens must be a JWT access token of the configured issuer for this listener's
//!    resource; its configured claim is the principal and its configured claims the
//!    principal's attributes ([`PrincipalAttributes`]). The protected-resource metadata
//!    (RFC 9728) is served without a token, and a `401` names it in `WWW-Authenticate`.
//!    A named token is checked first: it never reaches the issuer.
//!
//! The token's name is the principal of every call made with it ([`Principal`]); a session
//! is one HTTP session (`Mcp-Session-Id`), each with its own gateway handler, all sharing
//! one tool list built at start.
//!
//! **A session belongs to the principal that opened it.** rmcp's session manager is wrapped
//! so that each session it creates is bound to the principal of the `initialize` that
//! created it, and a request naming a session (`Mcp-Session-Id`) is answered 404 before
//! rmcp sees it unless its token's principal is the session's: another token cannot call
//! in the session, open its event stream, close it, or answer the elicitations it carries
//! (rmcp numbers the gateway's requests from 0, so their ids are no secret). A session
//! that is not one's own is indistinguishable from one that does not exist.
//!
//! **A 2026-07-28 request has no session** (MCP 2026-07-28, SEP-2567): rmcp serves a
//! request that carries the revision's `_meta` and no `Mcp-Session-Id` on a handler made
//! for it alone, after checking its `Mcp-Method` and `Mcp-Name` headers against its body
//! (JSON-RPC -32020 on a mismatch); its principal is its own token's, and nothing it leaves
//! behind ties its client to this gateway (see [`crate::gateway`] and `docs/protocol.md`).
//! The session bounds below do not apply to it; the connection bounds do.
//!
//! **The listener keeps serving under abuse** ([`ListenLimits`]):
//!
//! - a client has `listen.header_read_timeout_ms` to send each request's head, also while
//!   a kept-alive connection waits for its next request: an idle socket does not hold a
//!   connection forever;
//! - at most `listen.max_connections` connections are open; past it new ones wait in the
//!   kernel's queue (the accept loop waits for one to close) instead of taking descriptors;
//! - at most `listen.max_sessions_per_principal` live sessions per principal (429 past it),
//!   and a session with no message for `listen.session_idle_timeout_ms` is closed;
//! - a failed `accept` (out of descriptors: `EMFILE`, `ENFILE`) is retried after a wait
//!   that doubles from [`ACCEPT_BACKOFF_FIRST`] to [`ACCEPT_BACKOFF_MAX`], with one warning
//!   per run of failures, instead of a loop that spins and floods the log.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};
use rmcp::transport::streamable_http_server::{
    SessionManager, StreamableHttpServerConfig, StreamableHttpService,
};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use crate::call::CallPath;
use crate::config::{ListenConfig, ListenOAuthConfig};
use crate::gateway::{Gateway, GatewaySettings};
use crate::http_server::{AcceptLimits, accept_loop};
use crate::state_dir::StateDir;

/// The file in the state folder that holds the generated token: `listen-token`.
pub const TOKEN_FILE: &str = "listen-token";

/// The path the MCP endpoint is served at: `/mcp`.
pub const ENDPOINT_PATH: &str = "/mcp";

/// The header that names a session: `Mcp-Session-Id` (MCP specification 2025-11-25,
/// "Transports", session management).
pub const SESSION_HEADER: &str = "mcp-session-id";

pub use crate::http_server::{ACCEPT_BACKOFF_FIRST, ACCEPT_BACKOFF_MAX};

/// Time added to the longest a call can take (approval timeout plus call timeout) for the
/// shortest idle timeout a session gets: 5 s, for the policy decision (fuel-bounded), the
/// audit records and the result around the two waits, which take milliseconds.
pub const CALL_IN_FLIGHT_MARGIN: Duration = Duration::from_secs(5);

pub use crate::identity::{Principal, PrincipalAttributes};

#[cfg(feature = "listen-oauth")]
pub mod oauth;
#[cfg(feature = "listen-oauth")]
mod ring_jws;

/// The bounds that keep `serve --listen` serving under abuse. Defaults (from
/// [`ListenConfig::default`]): header read timeout
/// [`DEFAULT_HEADER_READ_TIMEOUT_MS`](crate::config::DEFAULT_HEADER_READ_TIMEOUT_MS),
/// [`DEFAULT_MAX_CONNECTIONS`](crate::config::DEFAULT_MAX_CONNECTIONS) connections,
/// [`DEFAULT_MAX_SESSIONS_PER_PRINCIPAL`](crate::config::DEFAULT_MAX_SESSIONS_PER_PRINCIPAL)
/// sessions a principal, session idle timeout
/// [`DEFAULT_SESSION_IDLE_TIMEOUT_MS`](crate::config::DEFAULT_SESSION_IDLE_TIMEOUT_MS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenLimits {
    /// Time a client has to send a request's head; past it the connection is closed.
    pub header_read_timeout: Duration,
    /// Connections open at once; past it new connections wait to be accepted.
    pub max_connections: usize,
    /// Live sessions of one principal; past it `initialize` gets 429.
    pub max_sessions_per_principal: usize,
    /// Time without a message after which a session is closed. [`serve_http`] raises it to
    /// the longest a call can take plus [`CALL_IN_FLIGHT_MARGIN`].
    pub session_idle_timeout: Duration,
}

impl ListenLimits {
    /// The bounds a config's `listen` section gives.
    pub fn from_config(listen: &ListenConfig) -> ListenLimits {
        let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        ListenLimits {
            header_read_timeout: Duration::from_millis(listen.header_read_timeout_ms),
            max_connections: count(listen.max_connections),
            max_sessions_per_principal: count(listen.max_sessions_per_principal),
            session_idle_timeout: Duration::from_millis(listen.session_idle_timeout_ms),
        }
    }
}

impl Default for ListenLimits {
    fn default() -> Self {
        ListenLimits::from_config(&ListenConfig::default())
    }
}

/// What `serve --listen` needs besides the call path.
#[derive(Clone)]
pub struct ListenSettings {
    /// The address to bind.
    pub addr: SocketAddr,
    /// Accept an address that is not loopback (`--listen` with a public address reaches
    /// whoever can route to it: the token is then the only check).
    pub allow_non_loopback: bool,
    /// Tokens by name.
    pub tokens: BTreeMap<String, String>,
    /// Allowed `Origin` values, lowercase.
    pub allowed_origins: Vec<String>,
    /// The bounds on connections and sessions.
    pub limits: ListenLimits,
    /// The listener as an OAuth resource server (`listen.oauth`), beside `tokens`.
    pub oauth: Option<ListenOAuthConfig>,
}

impl std::fmt::Debug for ListenSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenSettings")
            .field("addr", &self.addr)
            .field("allow_non_loopback", &self.allow_non_loopback)
            .field("tokens", &self.tokens.keys().collect::<Vec<_>>())
            .field("allowed_origins", &self.allowed_origins)
            .field("limits", &self.limits)
            .field("oauth", &self.oauth)
            .finish()
    }
}

/// Errors of `serve --listen`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListenError {
    /// The address is not loopback and that was not allowed.
    #[error(
        "`{addr}` is not a loopback address: the gateway would be reachable from the network; bind 127.0.0.1 or ::1, or say so with --listen-non-loopback"
    )]
    NotLoopback {
        /// The address.
        addr: SocketAddr,
    },
    /// Binding failed.
    #[error("cannot listen on `{addr}`: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The system's error.
        source: std::io::Error,
    },
    /// The generated token could not be read or written.
    #[error("the token file `{}`: {reason}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// `listen.oauth` could not start: its issuer's metadata or keys could not be read, or
    /// a URL breaks the origin rule. The message names the issuer and what failed.
    #[error("{0}")]
    OAuth(String),
    /// `listen.oauth` is configured, and this build leaves the listener's OAuth out.
    #[error(
        "`listen.oauth` needs the `listen-oauth` feature of the toolward crate, which this build leaves out"
    )]
    OAuthLeftOut,
    /// A principal asked for a session past `listen.max_sessions_per_principal`.
    #[error(
        "principal `{principal}` has {limit} live sessions, the limit: close one (HTTP DELETE with its Mcp-Session-Id) or let an idle one expire, or raise `listen.max_sessions_per_principal`"
    )]
    TooManySessions {
        /// The principal.
        principal: String,
        /// `listen.max_sessions_per_principal`.
        limit: usize,
    },
    /// A session was used by a principal it does not belong to, or does not exist. The
    /// listener answers such a request 404 before rmcp sees it; this is the same check
    /// inside the session manager.
    #[error("principal `{principal}` has no session `{session}`")]
    NotYourSession {
        /// The principal of the request.
        principal: String,
        /// The session named.
        session: String,
    },
    /// rmcp asked for a session outside a request the listener let through (no principal
    /// to bind it to): refused.
    #[error("a session was asked for outside an authorized request")]
    NoPrincipal,
    /// rmcp's session manager failed.
    #[error("the http session failed")]
    Session {
        /// rmcp's error.
        #[source]
        source: LocalSessionManagerError,
    },
}

/// Longest token file read, bytes: a token is 64 hex digits and a line feed.
pub const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// The tokens of `listen`: the named ones, or the generated one (created on first use in the
/// state folder `state` as [`TOKEN_FILE`], mode `0600`, named `principal`) when there are
/// no named ones and no `listen.oauth`. Returns the tokens and, when generated, its file.
///
/// # Errors
/// [`ListenError::TokenFile`] when the file cannot be created or read, holds no token, is
/// longer than [`MAX_TOKEN_FILE_BYTES`], is a symlink, or has another owner than the
/// effective user or any access for group or others (the message says the fix).
pub fn tokens(
    listen: &ListenConfig,
    state: &StateDir,
    principal: &str,
) -> Result<(BTreeMap<String, String>, Option<PathBuf>), ListenError> {
    // With OAuth, the named tokens (if any) stand beside it: none is generated.
    if !listen.tokens.is_empty() || listen.oauth.is_some() {
        return Ok((listen.tokens.clone(), None));
    }
    let path = state.path().join(TOKEN_FILE);
    let fail = |reason: String| ListenError::TokenFile {
        path: path.clone(),
        reason,
    };
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| fail(format!("no randomness: {e}")))?;
    let line = format!("{}\n", hex::encode(bytes));
    match state.create_private_file(TOKEN_FILE, line.as_bytes()) {
        Ok(()) => {}
        Err(e) if e.already_exists() => {}
        Err(e) => return Err(fail(e.to_string())),
    }
    let file = state
        .open_private_file(TOKEN_FILE)
        .map_err(|e| fail(format!("{e}; or delete it for a new token")))?;
    let mut text = String::new();
    file.take(MAX_TOKEN_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| fail(e.to_string()))?;
    if text.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(fail(format!(
            "it is longer than {MAX_TOKEN_FILE_BYTES} bytes: delete it, and a new one is generated"
        )));
    }
    let token = text.trim().to_owned();
    if token.len() < crate::config::MIN_TOKEN_CHARS {
        return Err(fail(String::from(
            "it holds no token: delete it, and a new one is generated",
        )));
    }
    Ok((BTreeMap::from([(principal.to_owned(), token)]), Some(path)))
}

/// The checks before rmcp: Origin, then token.
#[derive(Debug)]
struct Guard {
    /// SHA-256 of each token, with its name.
    tokens: Vec<([u8; 32], String)>,
    allowed_origins: Vec<String>,
    /// The OAuth resource server, when `listen.oauth` is configured.
    #[cfg(feature = "listen-oauth")]
    oauth: Option<oauth::ResourceServer>,
}

/// Who a request is: its principal and the principal's attributes.
#[derive(Debug)]
struct Identity {
    principal: Principal,
    attributes: PrincipalAttributes,
}

type Body = BoxBody<Bytes, Infallible>;

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(format!("{text}\n"))).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Equal in time independent of where the digests differ.
fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Guard {
    /// The guard of `listen`, starting its OAuth resource server when configured.
    async fn new(listen: &ListenSettings, principal: &str) -> Result<Guard, ListenError> {
        #[cfg(feature = "listen-oauth")]
        let oauth = match &listen.oauth {
            Some(config) => {
                let mut server = oauth::ResourceServer::start(config)
                    .await
                    .map_err(|error| ListenError::OAuth(error.to_string()))?;
                server.reserve_principal(principal);
                Some(server)
            }
            None => None,
        };
        #[cfg(not(feature = "listen-oauth"))]
        let _ = principal;
        #[cfg(not(feature = "listen-oauth"))]
        if listen.oauth.is_some() {
            return Err(ListenError::OAuthLeftOut);
        }
        Ok(Guard {
            tokens: listen
                .tokens
                .iter()
                .map(|(name, token)| (Sha256::digest(token.as_bytes()).into(), name.clone()))
                .collect(),
            allowed_origins: listen.allowed_origins.clone(),
            #[cfg(feature = "listen-oauth")]
            oauth,
        })
    }

    /// The protected-resource metadata, when `listen.oauth` is configured and `path` is
    /// where it is served.
    fn metadata(&self, path: &str) -> Option<Response<Body>> {
        #[cfg(feature = "listen-oauth")]
        if let Some(server) = &self.oauth
            && server.is_metadata_path(path)
        {
            let mut response = Response::new(Full::new(server.metadata()).boxed());
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            return Some(response);
        }
        let _ = path;
        None
    }

    /// The identity of a request with `headers`, or the response that refuses it.
    async fn check(&self, headers: &http::HeaderMap) -> Result<Identity, Box<Response<Body>>> {
        if let Some(origin) = headers.get(header::ORIGIN) {
            let allowed = origin.to_str().is_ok_and(|origin| {
                let origin = origin.to_ascii_lowercase();
                self.allowed_origins.contains(&origin)
            });
            if !allowed {
                tracing::warn!(
                    "refused a request from origin `{}`: not in `listen.allowed_origins`",
                    String::from_utf8_lossy(origin.as_bytes())
                );
                return Err(Box::new(plain(
                    StatusCode::FORBIDDEN,
                    "this Origin is not allowed: add it to `listen.allowed_origins` in the toolward config",
                )));
            }
        }
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| {
                let (scheme, token) = value.split_once(' ')?;
                scheme
                    .eq_ignore_ascii_case("bearer")
                    .then(|| token.trim().to_owned())
            })
            .filter(|token| !token.is_empty());
        let unauthorized = |text: &str, challenge: &str| {
            let mut response = plain(StatusCode::UNAUTHORIZED, text);
            if let Ok(value) = http::HeaderValue::from_str(challenge) {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, value);
            }
            Box::new(response)
        };
        #[cfg(feature = "listen-oauth")]
        let challenge = |refusal: Option<&oauth::Refusal>| match &self.oauth {
            Some(server) => server.challenge(refusal),
            None => String::from("Bearer realm=\"toolward\""),
        };
        #[cfg(not(feature = "listen-oauth"))]
        let challenge = |_: Option<&()>| String::from("Bearer realm=\"toolward\"");
        let Some(presented) = presented else {
            #[cfg(feature = "listen-oauth")]
            if let Some(server) = &self.oauth {
                return Err(unauthorized(
                    &format!(
                        "a bearer token is required: an access token of issuer `{}` for this server (its protected-resource metadata is in the `WWW-Authenticate` header)",
                        server.issuer()
                    ),
                    &challenge(None),
                ));
            }
            return Err(unauthorized(
                "a bearer token is required: `Authorization: Bearer TOKEN` (see `listen.tokens`, or the token file in the state folder)",
                &challenge(None),
            ));
        };
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        // Every token is compared, so the time does not say which one nearly matched.
        let mut found = None;
        for (known, name) in &self.tokens {
            if same_digest(known, &digest) {
                found = Some(name.clone());
            }
        }
        if let Some(name) = found {
            return Ok(Identity {
                principal: Principal(name),
                attributes: PrincipalAttributes::default(),
            });
        }
        #[cfg(feature = "listen-oauth")]
        if let Some(server) = &self.oauth {
            return match server.authenticate(&presented).await {
                Ok(authenticated) => Ok(Identity {
                    principal: Principal(authenticated.principal),
                    attributes: PrincipalAttributes(authenticated.attributes),
                }),
                Err(refusal) => {
                    let header = challenge(Some(&refusal));
                    match &refusal {
                        oauth::Refusal::InvalidToken(reason) => {
                            tracing::warn!(
                                "refused a request: its access token is not valid for issuer `{}`: {reason}",
                                server.issuer()
                            );
                            Err(unauthorized(
                                &format!("the access token was refused: {reason}"),
                                &header,
                            ))
                        }
                        oauth::Refusal::InsufficientScope { principal, missing } => {
                            let text = format!(
                                "principal `{}`: the access token lacks the scopes `{}` this server requires",
                                crate::text::escape(principal),
                                crate::text::escape(&missing.join(" "))
                            );
                            tracing::warn!("refused a request: {text}");
                            let mut response = plain(StatusCode::FORBIDDEN, &text);
                            if let Ok(value) = http::HeaderValue::from_str(&header) {
                                response
                                    .headers_mut()
                                    .insert(header::WWW_AUTHENTICATE, value);
                            }
                            Err(Box::new(response))
                        }
                    }
                }
            };
        }
        tracing::warn!("refused a request with an unknown bearer token");
        Err(unauthorized(
            "this bearer token is not one of toolward's",
            &challenge(None),
        ))
    }
}

tokio::task_local! {
    /// The request rmcp is handling, as the listener let it through: rmcp's session manager
    /// is called inside it, so [`BoundSessions`] knows whose session it creates or touches.
    static REQUEST: RequestScope;
}

/// What [`BoundSessions`] needs to know about the request it is called for.
#[derive(Debug)]
struct RequestScope {
    principal: String,
    /// Set when a session was refused for [`ListenError::TooManySessions`], so the listener
    /// answers 429 in place of rmcp's 500.
    too_many_sessions: Arc<AtomicBool>,
}

/// Which principal each live session belongs to, and how many each principal has.
#[derive(Debug, Default)]
struct Owners {
    by_session: HashMap<SessionId, String>,
    /// Live and reserved sessions by principal; a principal with none has no entry.
    per_principal: HashMap<String, usize>,
}

impl Owners {
    fn release(&mut self, principal: &str) {
        if let Some(count) = self.per_principal.get_mut(principal) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_principal.remove(principal);
            }
        }
    }
}

/// rmcp's in-memory session manager, with every session bound to the principal whose
/// request created it. Every call that names a session checks that the request's principal
/// owns it, except `close_session`: rmcp calls that itself when a session's worker ends
/// (no request), and the listener checks a `DELETE` before rmcp sees it.
#[derive(Debug)]
struct BoundSessions {
    inner: LocalSessionManager,
    owners: Mutex<Owners>,
    max_per_principal: usize,
}

/// A place under the principal's session bound, given back on drop unless a session took
/// it (a request dropped half-way does not leak it).
struct Reservation<'a> {
    sessions: &'a BoundSessions,
    principal: Option<String>,
}

impl Reservation<'_> {
    fn bind(mut self, session: SessionId) {
        if let Some(principal) = self.principal.take() {
            self.sessions.owners().by_session.insert(session, principal);
        }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if let Some(principal) = self.principal.take() {
            self.sessions.owners().release(&principal);
        }
    }
}

impl BoundSessions {
    fn new(max_per_principal: usize, idle_timeout: Duration) -> BoundSessions {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = Some(idle_timeout);
        BoundSessions {
            inner,
            owners: Mutex::new(Owners::default()),
            max_per_principal,
        }
    }

    fn owners(&self) -> MutexGuard<'_, Owners> {
        // Every critical section leaves the maps consistent: a panic cannot poison them
        // half-updated.
        self.owners.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `session` is a live session of `principal`.
    fn belongs_to(&self, session: &str, principal: &str) -> bool {
        self.owners()
            .by_session
            .get(session)
            .is_some_and(|owner| owner == principal)
    }

    /// The principal of the request being handled.
    fn principal() -> Result<String, ListenError> {
        REQUEST
            .try_with(|request| request.principal.clone())
            .map_err(|_| ListenError::NoPrincipal)
    }

    /// Refuses unless the request's principal owns `session`.
    fn check(&self, session: &SessionId) -> Result<(), ListenError> {
        let principal = Self::principal()?;
        if self.belongs_to(session, &principal) {
            Ok(())
        } else {
            Err(ListenError::NotYourSession {
                principal,
                session: session.to_string(),
            })
        }
    }

    fn reserve(&self, principal: String) -> Result<Reservation<'_>, ListenError> {
        let mut owners = self.owners();
        let count = owners.per_principal.entry(principal.clone()).or_insert(0);
        if *count >= self.max_per_principal {
            // Tell the listener, which answers 429 (rmcp would answer 500).
            let _ = REQUEST.try_with(|request| {
                request.too_many_sessions.store(true, Ordering::Relaxed);
            });
            return Err(ListenError::TooManySessions {
                principal,
                limit: self.max_per_principal,
            });
        }
        *count += 1;
        Ok(Reservation {
            sessions: self,
            principal: Some(principal),
        })
    }
}

fn session_error(source: LocalSessionManagerError) -> ListenError {
    ListenError::Session { source }
}

impl SessionManager for BoundSessions {
    type Error = ListenError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), ListenError> {
        let reservation = self.reserve(Self::principal()?)?;
        let (session, transport) = self.inner.create_session().await.map_err(session_error)?;
        reservation.bind(session.clone());
        Ok((session, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, ListenError> {
        self.check(id)?;
        self.inner
            .initialize_session(id, message)
            .await
            .map_err(session_error)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, ListenError> {
        if self.check(id).is_err() {
            return Ok(false);
        }
        self.inner.has_session(id).await.map_err(session_error)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), ListenError> {
        {
            let mut owners = self.owners();
            if let Some(owner) = owners.by_session.remove(id) {
                owners.release(&owner);
            }
        }
        self.inner.close_session(id).await.map_err(session_error)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, ListenError> {
        self.check(id)?;
        self.inner
            .create_stream(id, message)
            .await
            .map_err(session_error)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), ListenError> {
        self.check(id)?;
        self.inner
            .accept_message(id, message)
            .await
            .map_err(session_error)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, ListenError> {
        self.check(id)?;
        self.inner
            .create_standalone_stream(id)
            .await
            .map_err(session_error)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, ListenError> {
        self.check(id)?;
        self.inner
            .resume(id, last_event_id)
            .await
            .map_err(session_error)
    }
}

/// What every connection's requests share.
struct Shared {
    service: StreamableHttpService<Gateway, BoundSessions>,
    sessions: Arc<BoundSessions>,
    guard: Guard,
    limits: ListenLimits,
}

/// One request: the path, then the guard, then the session's owner, then rmcp.
async fn handle(shared: Arc<Shared>, mut request: Request<Incoming>) -> Response<Body> {
    if request.uri().path() != ENDPOINT_PATH {
        // RFC 9728: the metadata is public, served without a token.
        if request.method() == http::Method::GET
            && let Some(metadata) = shared.guard.metadata(request.uri().path())
        {
            return metadata;
        }
        return plain(StatusCode::NOT_FOUND, "the MCP endpoint is /mcp");
    }
    let Identity {
        principal,
        attributes,
    } = match shared.guard.check(request.headers()).await {
        Ok(identity) => identity,
        Err(refusal) => return *refusal,
    };
    let closing = request.method() == http::Method::DELETE;
    if let Some(session) = request.headers().get(SESSION_HEADER) {
        let session = session.to_str().unwrap_or_default();
        if !shared.sessions.belongs_to(session, &principal.0) {
            let someone_elses = shared.sessions.owners().by_session.contains_key(session);
            if someone_elses {
                tracing::warn!(
                    "refused a {} from principal `{}` naming a session of another principal",
                    request.method(),
                    crate::text::escape(&principal.0)
                );
            } else {
                tracing::debug!(
                    "refused a {} from principal `{}` naming an unknown or expired session",
                    request.method(),
                    crate::text::escape(&principal.0)
                );
            }
            // The same answer either way: whether a session exists is nobody else's business.
            return plain(
                StatusCode::NOT_FOUND,
                "no such session: it expired, was closed, or was never yours; send `initialize` without `Mcp-Session-Id` for a new one",
            );
        }
    }
    let too_many_sessions = Arc::new(AtomicBool::new(false));
    let scope = RequestScope {
        principal: principal.0.clone(),
        too_many_sessions: Arc::clone(&too_many_sessions),
    };
    request.extensions_mut().insert(principal.clone());
    request.extensions_mut().insert(attributes);
    let mut service = shared.service.clone();
    let response = REQUEST.scope(scope, service.call(request)).await;
    if too_many_sessions.load(Ordering::Relaxed) {
        let error = ListenError::TooManySessions {
            principal: principal.0,
            limit: shared.limits.max_sessions_per_principal,
        };
        tracing::warn!("{error}");
        return plain(StatusCode::TOO_MANY_REQUESTS, &error.to_string());
    }
    let mut response = match response {
        Ok(response) => response,
        Err(never) => match never {},
    };
    // rmcp answers a closed session's `DELETE` 202 Accepted; the Python `mcp` client
    // accepts 200 or 204 and logs "Session termination failed: 202" otherwise. The session
    // is closed when rmcp answers: 204 No Content says so.
    if closing && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
        *response.body_mut() = Full::new(Bytes::new()).boxed();
        response.headers_mut().remove(header::CONTENT_TYPE);
        response.headers_mut().remove(header::CONTENT_LENGTH);
    }
    response
}

/// A running `--listen` server: its address, and how to stop it.
#[derive(Debug)]
pub struct Listening {
    /// The bound address (the port chosen when the setting gave 0).
    pub addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Listening {
    /// The endpoint URL clients connect to.
    pub fn url(&self) -> String {
        format!("http://{}{ENDPOINT_PATH}", self.addr)
    }

    /// Stops accepting, ends every session, and waits for the accept loop to end.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Binds `listen.addr` and serves the gateway over streamable HTTP at [`ENDPOINT_PATH`]
/// until [`Listening::stop`], within `listen.limits`. A session's idle timeout is raised to
/// at least the longest a call on `call_path` can take (its approval timeout plus its call
/// timeout) plus [`CALL_IN_FLIGHT_MARGIN`].
///
/// # Errors
/// [`ListenError::NotLoopback`], [`ListenError::Bind`]; [`ListenError::OAuth`] when
/// `listen.oauth` cannot start (its issuer's metadata or keys), [`ListenError::OAuthLeftOut`]
/// when this build has no `listen-oauth`.
pub async fn serve_http(
    call_path: Arc<CallPath>,
    load_messages: Vec<String>,
    settings: GatewaySettings,
    listen: ListenSettings,
) -> Result<Listening, ListenError> {
    if !listen.addr.ip().is_loopback() && !listen.allow_non_loopback {
        return Err(ListenError::NotLoopback { addr: listen.addr });
    }
    // Before binding: an issuer whose keys cannot be read stops the start.
    let guard = Guard::new(&listen, &settings.principal).await?;
    let listener = TcpListener::bind(listen.addr)
        .await
        .map_err(|source| ListenError::Bind {
            addr: listen.addr,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ListenError::Bind {
        addr: listen.addr,
        source,
    })?;
    let stop = CancellationToken::new();
    // Origins are checked by `Guard` first; rmcp checks them again, and `Host`.
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(stop.child_token())
        .with_allowed_origins(listen.allowed_origins.clone())
        .enforce_origin_validation();
    if listen.allow_non_loopback {
        config.allowed_hosts = Vec::new();
    }
    let limits = listen.limits;
    let longest_call = call_path.settings().approval_timeout
        + call_path.settings().longest_call_timeout()
        + CALL_IN_FLIGHT_MARGIN;
    let sessions = Arc::new(BoundSessions::new(
        limits.max_sessions_per_principal,
        limits.session_idle_timeout.max(longest_call),
    ));
    let load_messages = Arc::new(load_messages);
    let tools = crate::gateway::tool_list(&call_path);
    let states = Arc::new(crate::gateway::input_required::RequestStates::new(
        call_path.ledger().cloned(),
    ));
    let service = StreamableHttpService::new(
        move || {
            Ok(Gateway::with_tools(
                Arc::clone(&call_path),
                Arc::clone(&load_messages),
                settings.clone(),
                Arc::clone(&tools),
                Arc::clone(&states),
            ))
        },
        Arc::clone(&sessions),
        config,
    );
    let shared = Arc::new(Shared {
        service,
        sessions,
        guard,
        limits,
    });
    let accept = AcceptLimits {
        max_connections: limits.max_connections,
        header_read_timeout: limits.header_read_timeout,
        setting: "listen.max_connections",
        max_head_bytes: None,
    };
    let task = tokio::spawn(accept_loop(
        listener,
        accept,
        move |request| handle(Arc::clone(&shared), request),
        stop.clone(),
    ));
    Ok(Listening { addr, stop, task })
}
