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
//! The token's name is the principal of every call made with it ([`Principal`]); a session
//! is one HTTP session (`Mcp-Session-Id`), each with its own gateway handler.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use crate::call::CallPath;
use crate::config::ListenConfig;
use crate::gateway::{Gateway, GatewaySettings};
use crate::store::StateDir;

/// The file in the state folder that holds the generated token: `listen-token`.
pub const TOKEN_FILE: &str = "listen-token";

/// The path the MCP endpoint is served at: `/mcp`.
pub const ENDPOINT_PATH: &str = "/mcp";

/// The principal of a request: the name of the token it carried. `listen` puts it in the
/// request's extensions; the gateway reads it from there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(pub String);

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
}

impl std::fmt::Debug for ListenSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenSettings")
            .field("addr", &self.addr)
            .field("allow_non_loopback", &self.allow_non_loopback)
            .field("tokens", &self.tokens.keys().collect::<Vec<_>>())
            .field("allowed_origins", &self.allowed_origins)
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
}

/// Longest token file read, bytes: a token is 64 hex digits and a line feed.
pub const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// The tokens of `listen`: the named ones, or the generated one (created on first use in the
/// state folder `state` as [`TOKEN_FILE`], mode `0600`, named `principal`). Returns the
/// tokens and, when generated, its file.
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
    if !listen.tokens.is_empty() {
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
    fn new(tokens: &BTreeMap<String, String>, allowed_origins: &[String]) -> Guard {
        Guard {
            tokens: tokens
                .iter()
                .map(|(name, token)| (Sha256::digest(token.as_bytes()).into(), name.clone()))
                .collect(),
            allowed_origins: allowed_origins.to_vec(),
        }
    }

    /// The principal of `request`, or the response that refuses it.
    fn check<B>(&self, request: &Request<B>) -> Result<Principal, Box<Response<Body>>> {
        if let Some(origin) = request.headers().get(header::ORIGIN) {
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
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| {
                let (scheme, token) = value.split_once(' ')?;
                scheme
                    .eq_ignore_ascii_case("bearer")
                    .then(|| token.trim().to_owned())
            });
        let unauthorized = |text: &str| {
            let mut response = plain(StatusCode::UNAUTHORIZED, text);
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static("Bearer realm=\"toolward\""),
            );
            Box::new(response)
        };
        let Some(presented) = presented else {
            return Err(unauthorized(
                "a bearer token is required: `Authorization: Bearer TOKEN` (see `listen.tokens`, or the token file in the state folder)",
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
        match found {
            Some(name) => Ok(Principal(name)),
            None => {
                tracing::warn!("refused a request with an unknown bearer token");
                Err(unauthorized("this bearer token is not one of toolward's"))
            }
        }
    }
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
/// until [`Listening::stop`].
///
/// # Errors
/// [`ListenError::NotLoopback`], [`ListenError::Bind`].
pub async fn serve_http(
    call_path: Arc<CallPath>,
    load_messages: Vec<String>,
    settings: GatewaySettings,
    listen: ListenSettings,
) -> Result<Listening, ListenError> {
    if !listen.addr.ip().is_loopback() && !listen.allow_non_loopback {
        return Err(ListenError::NotLoopback { addr: listen.addr });
    }
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
    let load_messages = Arc::new(load_messages);
    let service = StreamableHttpService::new(
        move || {
            Ok(Gateway::new(
                Arc::clone(&call_path),
                Arc::clone(&load_messages),
                settings.clone(),
            ))
        },
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let guard = Arc::new(Guard::new(&listen.tokens, &listen.allowed_origins));
    let accepting = stop.clone();
    let task = tokio::spawn(async move {
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::warn!("accepting a connection failed: {error}");
                        continue;
                    }
                },
                () = accepting.cancelled() => return,
            };
            let service = service.clone();
            let guard = Arc::clone(&guard);
            let connection_stop = accepting.clone();
            tokio::spawn(async move {
                let handler = hyper::service::service_fn(move |mut request: Request<Incoming>| {
                    let mut service = service.clone();
                    let checked = guard.check(&request);
                    async move {
                        if request.uri().path() != ENDPOINT_PATH {
                            return Ok::<_, Infallible>(plain(
                                StatusCode::NOT_FOUND,
                                "the MCP endpoint is /mcp",
                            ));
                        }
                        match checked {
                            Ok(principal) => {
                                request.extensions_mut().insert(principal);
                                service.call(request).await
                            }
                            Err(refusal) => Ok(*refusal),
                        }
                    }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), handler);
                tokio::pin!(connection);
                tokio::select! {
                    served = connection.as_mut() => {
                        if let Err(error) = served {
                            tracing::debug!("connection from {peer} ended: {error}");
                        }
                    }
                    () = connection_stop.cancelled() => {
                        connection.as_mut().graceful_shutdown();
                        let _ = connection.await;
                    }
                }
            });
        }
    });
    Ok(Listening { addr, stop, task })
}
