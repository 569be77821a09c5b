//! The grants: signing in (authorization code with PKCE through a loopback redirect, the
//! device authorization grant of RFC 8628, or client credentials), registering toolward as a
//! client (RFC 7591), renewing a grant and revoking it (RFC 7009). The requests are the
//! `oauth2` crate's, sent by [`OAuthHttp`].

use std::time::Duration;

use oauth2::basic::{BasicClient, BasicTokenResponse, BasicTokenType};
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken,
    DeviceAuthorizationUrl, EndpointMaybeSet, EndpointNotSet, EndpointSet, ErrorResponse,
    PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, RefreshToken, RequestTokenError,
    RevocationUrl, Scope, StandardDeviceAuthorizationResponse, StandardRevocableToken,
    TokenResponse, TokenUrl,
};
use reqwest::Url;
use reqwest::header;
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::discovery::{self, Discovered, Probe, ServerMetadata};
use super::store::{ClientAuth, Grant, GrantKind, GrantStore};
use super::{FetchError, OAuthError, OAuthHttp, now_secs, server_url};
use crate::config::{CaBundle, OAuthConfig, OAuthGrant, ServerConfig};
use crate::text::escape;

/// Default time `toolward auth login` waits for the browser to come back: 300 000 ms.
pub const DEFAULT_LOGIN_TIMEOUT: Duration = Duration::from_secs(300);

/// Largest request head read on the loopback redirect listener, in bytes: 8 KiB (a
/// browser's `GET /callback?code=...&state=...`).
pub const MAX_REDIRECT_REQUEST_BYTES: usize = 8 * 1024;

/// Time a connection to the loopback listener has to send its request head: 10 s.
const REDIRECT_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections the loopback listener reads at once; past it, new ones are closed unread.
pub const MAX_REDIRECT_CONNECTIONS: usize = 64;

/// The path of the loopback redirect URI.
pub const REDIRECT_PATH: &str = "/callback";

/// Shortest wait between two polls of the token endpoint in the device grant: 1 s, whatever
/// `interval` the authorization server names (RFC 8628 says 5 s when it names none), so an
/// `interval` of 0 does not make toolward poll in a loop.
pub const MIN_DEVICE_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Longest wait between two polls after a request failed (the `oauth2` crate doubles the
/// interval then): 30 s.
pub const MAX_DEVICE_POLL_BACKOFF: Duration = Duration::from_secs(30);

/// The `oauth2` client toolward builds: the authorization endpoint and the revocation
/// endpoint when the metadata has them, always a token endpoint.
pub(crate) type Client =
    BasicClient<EndpointMaybeSet, EndpointNotSet, EndpointNotSet, EndpointMaybeSet, EndpointSet>;

/// How sign-in ended.
#[derive(Debug)]
pub enum LoginOutcome {
    /// A grant was obtained and stored.
    SignedIn(Box<Grant>),
    /// The server answered without asking for sign-in (its HTTP status): nothing to do.
    NotNeeded(u16),
}

/// The client toolward signs in as.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) id: String,
    pub(crate) secret: Option<String>,
    pub(crate) auth: ClientAuth,
}

/// What `auth login` shows the person signing in.
#[derive(Debug)]
pub enum Prompt<'a> {
    /// The authorization code: open `url` in a browser, which comes back to `redirect`.
    Browser {
        /// The authorization request.
        url: &'a Url,
        /// The loopback redirect URI toolward listens on.
        redirect: &'a str,
    },
    /// The device authorization grant (RFC 8628, section 3.3): open `verification_uri` on
    /// any device and enter `user_code`. The authorization server wrote both: they are
    /// escaped here, and the URI passed the origin rule (`https://`, no user name).
    Device {
        /// Where to enter the code, escaped.
        verification_uri: String,
        /// The same with the code in it, when the server gave one, escaped.
        verification_uri_complete: Option<String>,
        /// The code to enter, escaped.
        user_code: String,
        /// How long toolward waits: the code's life or the login's timeout, the shorter.
        wait: Duration,
    },
}

/// What one sign-in is for: whose grant, and the scopes to ask for beyond the usual ones.
#[derive(Debug, Clone, Default)]
pub struct LoginRequest {
    /// The principal whose grant it is (`--principal`); `None`: the operator's.
    pub principal: Option<String>,
    /// Scopes to ask for beside those the sign-in asks for anyway (`--scope`, as an
    /// `insufficient_scope` answer names them): added to the configured ones (or those of the
    /// server's `401`, or its metadata's), and to those of the grant being replaced.
    pub scopes: Vec<String>,
    /// The grant to use instead of the configured `oauth.grant` (`--device`); `None`: the
    /// configured one.
    pub grant: Option<OAuthGrant>,
}

/// Signs in to HTTP server `server` and stores the grant in `store`: probes the server,
/// discovers its authorization server, then runs the configured grant (or
/// `request.grant`). For the authorization code, `show` gets the URL to open (and the
/// redirect URI) before toolward waits at most `timeout` for the browser to come back; for
/// the device grant, the verification URI and the user code before toolward polls the token
/// endpoint at most `timeout` (or the code's life, when shorter). The grant is the
/// operator's, or `request.principal`'s.
///
/// # Errors
/// Every [`OAuthError`]; nothing is stored then.
pub async fn login(
    server: &ServerConfig,
    store: &GrantStore,
    request: &LoginRequest,
    timeout: Duration,
    show: &mut (dyn FnMut(Prompt<'_>) + Send),
) -> Result<LoginOutcome, OAuthError> {
    let (url, config) = server_url(server)?;
    let http = OAuthHttp::new(&server.name, url, config.ca_file.as_ref())?;
    let resource = Url::parse(url).map_err(|_| OAuthError::Refused {
        server: server.name.clone(),
        what: String::from("the server's URL"),
        url: url.to_owned(),
        rule: String::from("it is not a URL"),
    })?;
    let challenge = match discovery::probe(&http, &resource).await? {
        Probe::Open(status) => return Ok(LoginOutcome::NotNeeded(status)),
        Probe::SignIn(challenge) => challenge,
    };
    let discovered = discovery::discover(&http, &resource, challenge.as_ref()).await?;
    let principal = request.principal.as_deref();
    // The scopes of the grant replaced are kept: signing in again for one more scope (an
    // `insufficient_scope` answer) does not lose the others. An unreadable old grant is
    // replaced as if there were none.
    let before = store
        .read(&server.name, principal)
        .await
        .ok()
        .flatten()
        .map(|grant| grant.scopes)
        .unwrap_or_default();
    let scopes = union(
        &scopes(config, &discovered),
        &[before, request.scopes.clone()].concat(),
    );
    let mut grant = match request.grant.unwrap_or(config.grant) {
        OAuthGrant::ClientCredentials => {
            client_credentials(&http, config, &discovered, &scopes).await?
        }
        OAuthGrant::AuthorizationCode => {
            authorization_code(&http, config, &discovered, &scopes, timeout, show).await?
        }
        OAuthGrant::Device => device(&http, config, &discovered, &scopes, timeout, show).await?,
    };
    grant.principal = request.principal.clone();
    store.write(&grant).await?;
    Ok(LoginOutcome::SignedIn(Box::new(grant)))
}

/// `first`, then each scope of `more` not in it, in order.
fn union(first: &[String], more: &[String]) -> Vec<String> {
    let mut all = first.to_vec();
    for scope in more {
        if !all.contains(scope) {
            all.push(scope.clone());
        }
    }
    all
}

/// The scopes to ask for: the configured ones, else those of the `401`, else the
/// protected-resource metadata's `scopes_supported` (MCP specification, "Scope Selection
/// Strategy").
fn scopes(config: &OAuthConfig, discovered: &Discovered) -> Vec<String> {
    if !config.scopes.is_empty() {
        return config.scopes.clone();
    }
    if let Some(scope) = &discovered.challenge_scope {
        return scope.split_whitespace().map(str::to_owned).collect();
    }
    discovered.resource_metadata.scopes_supported.clone()
}

/// The `oauth2` client for `identity` at the authorization server of `metadata`.
pub(crate) fn client(
    http: &OAuthHttp,
    identity: &Identity,
    token_endpoint: &str,
    authorization_endpoint: Option<&str>,
    revocation_endpoint: Option<&str>,
) -> Result<Client, OAuthError> {
    let invalid = |what: &str, url: &str| OAuthError::Metadata {
        server: http.server().to_owned(),
        what: String::from("authorization server metadata"),
        url: url.to_owned(),
        reason: format!("{what} is not a URL"),
    };
    let token = TokenUrl::new(token_endpoint.to_owned())
        .map_err(|_| invalid("the token endpoint", token_endpoint))?;
    let authorize = authorization_endpoint
        .map(|url| {
            AuthUrl::new(url.to_owned()).map_err(|_| invalid("the authorization endpoint", url))
        })
        .transpose()?;
    let revoke = revocation_endpoint
        .map(|url| {
            RevocationUrl::new(url.to_owned()).map_err(|_| invalid("the revocation endpoint", url))
        })
        .transpose()?;
    let mut client = BasicClient::new(ClientId::new(identity.id.clone()))
        .set_auth_uri_option(authorize)
        .set_token_uri(token)
        .set_revocation_url_option(revoke)
        .set_auth_type(match identity.auth {
            ClientAuth::SecretBasic => AuthType::BasicAuth,
            ClientAuth::None | ClientAuth::SecretPost => AuthType::RequestBody,
        });
    if let Some(secret) = &identity.secret {
        client = client.set_client_secret(ClientSecret::new(secret.clone()));
    }
    Ok(client)
}

/// Which client a sign-in by a person (the authorization code, the device grant) is made as.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ClientIdentity {
    /// A client the authorization server knows already: the configured `client_id`, or the
    /// URL of the operator's Client ID Metadata Document.
    Known(Identity),
    /// None: toolward registers one (RFC 7591).
    Register,
}

/// The client identity of a sign-in, in the MCP specification's order (2025-11-25,
/// "Client Registration Approaches"): the configured `oauth.client_id`; else the operator's
/// Client ID Metadata Document (`oauth.client_id_metadata_url`, the URL itself as the client
/// id of a public client) when the authorization server says it takes them
/// (`client_id_metadata_document_supported: true`); else dynamic registration.
pub(crate) fn client_identity(config: &OAuthConfig, metadata: &ServerMetadata) -> ClientIdentity {
    if let Some(identity) = configured_identity(config, metadata) {
        return ClientIdentity::Known(identity);
    }
    match &config.client_id_metadata_url {
        Some(url) if metadata.client_id_metadata_document_supported => {
            ClientIdentity::Known(Identity {
                id: url.clone(),
                secret: None,
                auth: ClientAuth::None,
            })
        }
        _ => ClientIdentity::Register,
    }
}

/// The configured client, with the authentication method the metadata offers.
fn configured_identity(config: &OAuthConfig, metadata: &ServerMetadata) -> Option<Identity> {
    let id = config.client_id.clone()?;
    let secret = config.client_secret.clone();
    let methods = &metadata.token_endpoint_auth_methods_supported;
    let auth = match &secret {
        None => ClientAuth::None,
        Some(_) if methods.is_empty() || methods.iter().any(|m| m == "client_secret_basic") => {
            ClientAuth::SecretBasic
        }
        Some(_) => ClientAuth::SecretPost,
    };
    Some(Identity { id, secret, auth })
}

/// What a registration answer holds (RFC 7591, section 3.2.1).
#[derive(Deserialize)]
struct Registered {
    client_id: String,
    client_secret: Option<String>,
    token_endpoint_auth_method: Option<String>,
}

/// Registers toolward with the authorization server as a public native client (RFC 7591):
/// for the authorization code whose redirect URI is `redirect` (RFC 8252); without one, for
/// the device grant (RFC 8628), which has no redirect.
async fn register(
    http: &OAuthHttp,
    metadata: &ServerMetadata,
    redirect: Option<&str>,
) -> Result<Identity, OAuthError> {
    let server = http.server().to_owned();
    let Some(endpoint) = &metadata.registration_endpoint else {
        return Err(OAuthError::Metadata {
            server,
            what: String::from("authorization server metadata"),
            url: metadata.issuer.clone(),
            reason: String::from(
                "it offers no dynamic client registration (`registration_endpoint`): configure `oauth.client_id` for this server",
            ),
        });
    };
    let url = Url::parse(endpoint).map_err(|_| OAuthError::Metadata {
        server: server.clone(),
        what: String::from("authorization server metadata"),
        url: metadata.issuer.clone(),
        reason: String::from("the registration endpoint is not a URL"),
    })?;
    let body = match redirect {
        Some(redirect) => json!({
            "client_name": "toolward",
            "redirect_uris": [redirect],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }),
        None => json!({
            "client_name": "toolward",
            "grant_types": [DEVICE_CODE_GRANT_TYPE, "refresh_token"],
            "response_types": [],
            "token_endpoint_auth_method": "none",
        }),
    };
    let request = http
        .post("the registration endpoint", &url)?
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json")
        .body(body.to_string())
        .build()
        .map_err(|error| OAuthError::Request {
            server: server.clone(),
            url: url.to_string(),
            reason: error.to_string(),
        })?;
    let (status, _, body) = http.send("the registration endpoint", request).await?;
    if !status.is_success() {
        return Err(OAuthError::Grant {
            server,
            grant: String::from("client registration"),
            reason: format!(
                "HTTP status {}: {}",
                status.as_u16(),
                escape(&String::from_utf8_lossy(&body))
            ),
        });
    }
    let registered: Registered =
        serde_json::from_slice(&body).map_err(|_| OAuthError::Metadata {
            server: server.clone(),
            what: String::from("the registration answer"),
            url: url.to_string(),
            reason: String::from("it has no `client_id` (RFC 7591, section 3.2.1)"),
        })?;
    let auth = match (
        registered.token_endpoint_auth_method.as_deref(),
        &registered.client_secret,
    ) {
        (_, None) | (Some("none"), _) => ClientAuth::None,
        (Some("client_secret_post"), Some(_)) => ClientAuth::SecretPost,
        (_, Some(_)) => ClientAuth::SecretBasic,
    };
    Ok(Identity {
        id: registered.client_id,
        secret: registered
            .client_secret
            .filter(|_| auth != ClientAuth::None),
        auth,
    })
}

/// The redirect's `state` and `expected`, compared in constant time.
pub fn state_matches(expected: &str, received: &str) -> bool {
    let (a, b) = (expected.as_bytes(), received.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// What the browser brought back to the loopback redirect.
#[derive(Debug, PartialEq, Eq)]
pub enum Redirect {
    /// An authorization code with the expected `state`.
    Code(String),
    /// An `error` with the expected `state` (RFC 6749, section 4.1.2.1).
    Error(String),
    /// Not for this sign-in: another path, a missing or wrong `state`, no code (the text
    /// says which); the listener keeps waiting.
    Ignored(&'static str),
}

/// The issuer an authorization response must come from (RFC 9207), against mix-ups: a
/// response whose `state` is this sign-in's but whose `iss` names another authorization
/// server came through one toolward did not send the browser to.
#[derive(Debug, Clone, Copy)]
pub struct IssuerCheck<'a> {
    /// The issuer of the authorization server this sign-in sent the browser to.
    pub issuer: &'a str,
    /// Whether its metadata says its responses carry `iss`
    /// (`authorization_response_iss_parameter_supported`): then one without it is refused.
    pub required: bool,
}

/// Reads what a request target (`/callback?code=...&state=...&iss=...`) brings back for the
/// sign-in whose `state` is `expected`, from the authorization server `issuer`.
pub fn read_redirect(target: &str, expected: &str, issuer: &IssuerCheck<'_>) -> Redirect {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if path != REDIRECT_PATH {
        return Redirect::Ignored("not the redirect path");
    }
    read_authorization_response(query, expected, issuer)
}

/// Reads an authorization response's `query` (`code=...&state=...&iss=...`, RFC 6749 section
/// 4.1.2) for the sign-in whose `state` is `expected`, from the authorization server
/// `issuer`: also the console's OpenID Connect sign-in.
pub fn read_authorization_response(
    query: &str,
    expected: &str,
    issuer: &IssuerCheck<'_>,
) -> Redirect {
    let mut code = None;
    let mut state = None;
    let mut error = None;
    let mut description = None;
    let mut iss = None;
    for (name, value) in oauth2::url::form_urlencoded::parse(query.as_bytes()) {
        let slot = match name.as_ref() {
            "code" => &mut code,
            "state" => &mut state,
            "error" => &mut error,
            "error_description" => &mut description,
            "iss" => &mut iss,
            _ => continue,
        };
        if slot.is_some() {
            // A parameter given twice is ambiguous (RFC 6749, section 3.1): not this one.
            return Redirect::Ignored("a parameter given twice");
        }
        *slot = Some(value.into_owned());
    }
    match state {
        Some(state) if state_matches(expected, &state) => {}
        Some(_) => return Redirect::Ignored("a `state` that is not this sign-in's"),
        None => return Redirect::Ignored("no `state`"),
    }
    // RFC 9207, section 2.4: compared as strings, before the code or the error is used.
    match iss {
        Some(iss) if iss != issuer.issuer => {
            return Redirect::Error(format!(
                "a response naming the issuer `{}`, not `{}`, the one this sign-in went to: \
                 a mix-up (RFC 9207), so its code is not used",
                escape(&iss),
                escape(issuer.issuer)
            ));
        }
        None if issuer.required => {
            return Redirect::Error(format!(
                "a response without `iss`, which the issuer `{}` says its responses carry \
                 (RFC 9207): a mix-up, so its code is not used",
                escape(issuer.issuer)
            ));
        }
        _ => {}
    }
    if let Some(error) = error {
        let text = match description {
            Some(description) => format!("`{}`: {}", escape(&error), escape(&description)),
            None => format!("`{}`", escape(&error)),
        };
        return Redirect::Error(text);
    }
    match code {
        Some(code) if !code.is_empty() => Redirect::Code(code),
        _ => Redirect::Ignored("no `code`"),
    }
}

/// The loopback listener of one sign-in.
#[derive(Debug)]
pub struct RedirectListener {
    listener: TcpListener,
    uri: String,
}

impl RedirectListener {
    /// Listens on `127.0.0.1:port` (`0` picks a free port).
    ///
    /// # Errors
    /// [`OAuthError::Login`] when the port cannot be bound.
    pub async fn bind(server: &str, port: u16) -> Result<RedirectListener, OAuthError> {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|error| OAuthError::Login {
                server: server.to_owned(),
                reason: format!("cannot listen on `127.0.0.1:{port}` for the redirect: {error}"),
            })?;
        let port = listener
            .local_addr()
            .map_err(|error| OAuthError::Login {
                server: server.to_owned(),
                reason: format!("the redirect listener has no address: {error}"),
            })?
            .port();
        Ok(RedirectListener {
            listener,
            uri: format!("http://127.0.0.1:{port}{REDIRECT_PATH}"),
        })
    }

    /// The redirect URI.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Waits at most `timeout` for the browser to bring back the code of the sign-in whose
    /// `state` is `expected`, from `issuer`. Requests that are not its redirect are answered
    /// `400` or `404` and waited past. Connections are read side by side (at most
    /// [`MAX_REDIRECT_CONNECTIONS`] at once), so one that sends nothing does not hold up the
    /// browser's. The browser's connection comes back with the code: it is answered once the
    /// code has been exchanged ([`answer_browser`]), so its page tells how sign-in ended.
    ///
    /// # Errors
    /// [`OAuthError::Login`]: the timeout, or an `error` in the redirect (or a mix-up).
    pub async fn wait(
        &self,
        server: &str,
        expected: &str,
        issuer: &IssuerCheck<'_>,
        timeout: Duration,
    ) -> Result<(String, TcpStream), OAuthError> {
        let waited = tokio::time::timeout(timeout, async {
            // Dropped with this future: every reader still waiting is aborted.
            let mut readers = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = self.listener.accept() => {
                        let Ok((mut stream, _)) = accepted else {
                            continue;
                        };
                        if readers.len() >= MAX_REDIRECT_CONNECTIONS {
                            continue;
                        }
                        readers.spawn(async move {
                            let target = read_target(&mut stream).await;
                            (stream, target)
                        });
                    }
                    Some(read) = readers.join_next() => {
                        let Ok((mut stream, Some(target))) = read else {
                            continue;
                        };
                        match read_redirect(&target, expected, issuer) {
                            Redirect::Code(code) => return Ok((code, stream)),
                            Redirect::Error(error) => {
                                answer(&mut stream, "200 OK", &format!("toolward: sign-in to server `{server}` failed: {error}")).await;
                                return Err(OAuthError::Login {
                                    server: server.to_owned(),
                                    reason: format!("the authorization server answered {error}"),
                                });
                            }
                            Redirect::Ignored(why) => {
                                let status = if why == "not the redirect path" { "404 Not Found" } else { "400 Bad Request" };
                                tracing::warn!(server = %server, "sign-in to server `{server}`: a request to the redirect listener was ignored: {why}");
                                answer(&mut stream, status, &format!("toolward: not this sign-in's redirect ({why})")).await;
                            }
                        }
                    }
                }
            }
        })
        .await;
        match waited {
            Ok(outcome) => outcome,
            Err(_) => Err(OAuthError::Login {
                server: server.to_owned(),
                reason: format!(
                    "the browser did not come back to `{}` within {} s",
                    self.uri,
                    timeout.as_secs()
                ),
            }),
        }
    }
}

/// Answers the browser's redirect once the code was exchanged: signed in, or why not.
pub async fn answer_browser(
    stream: &mut TcpStream,
    server: &str,
    outcome: Result<(), &OAuthError>,
) {
    let text = match outcome {
        Ok(()) => format!("toolward: signed in to server `{server}`. You can close this page."),
        Err(error) => format!("toolward: sign-in to server `{server}` failed: {error}"),
    };
    answer(stream, "200 OK", &text).await;
}

/// The request target of a `GET` on `stream`, reading at most
/// [`MAX_REDIRECT_REQUEST_BYTES`] within [`REDIRECT_READ_TIMEOUT`].
async fn read_target(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let read = tokio::time::timeout(REDIRECT_READ_TIMEOUT, async {
        let mut buffer = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REDIRECT_REQUEST_BYTES
        {
            let n = stream.read(&mut buffer).await.ok()?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(buffer.get(..n)?);
        }
        Some(())
    })
    .await;
    read.ok().flatten()?;
    let text = String::from_utf8_lossy(&head);
    let line = text.lines().next()?;
    let mut parts = line.split(' ');
    if parts.next()? != "GET" {
        return None;
    }
    parts.next().map(str::to_owned)
}

async fn answer(stream: &mut TcpStream, status: &str, text: &str) {
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The authorization code grant with PKCE `S256`, `state` and `resource`, through a
/// loopback redirect.
async fn authorization_code(
    http: &OAuthHttp,
    config: &OAuthConfig,
    discovered: &Discovered,
    scopes: &[String],
    timeout: Duration,
    show: &mut (dyn FnMut(Prompt<'_>) + Send),
) -> Result<Grant, OAuthError> {
    let server = http.server().to_owned();
    let metadata = &discovered.server_metadata;
    let Some(authorization_endpoint) = metadata.authorization_endpoint.as_deref() else {
        return Err(OAuthError::Metadata {
            server,
            what: String::from("authorization server metadata"),
            url: metadata.issuer.clone(),
            reason: String::from("it has no `authorization_endpoint`"),
        });
    };
    let listener = RedirectListener::bind(&server, config.redirect_port).await?;
    let identity = match client_identity(config, metadata) {
        ClientIdentity::Known(identity) => identity,
        ClientIdentity::Register => register(http, metadata, Some(listener.uri())).await?,
    };
    let redirect = RedirectUrl::new(listener.uri().to_owned()).map_err(|_| OAuthError::Login {
        server: server.clone(),
        reason: String::from("the redirect URI is not a URL"),
    })?;
    let client = client(
        http,
        &identity,
        &metadata.token_endpoint,
        Some(authorization_endpoint),
        metadata.revocation_endpoint.as_deref(),
    )?
    .set_redirect_uri(redirect);
    let (url, state, verifier) =
        authorization_request(&server, &client, scopes, &discovered.resource)?;
    show(Prompt::Browser {
        url: &url,
        redirect: listener.uri(),
    });
    let issuer = IssuerCheck {
        issuer: &metadata.issuer,
        required: metadata.authorization_response_iss_parameter_supported,
    };
    let (code, mut browser) = listener
        .wait(&server, state.secret(), &issuer, timeout)
        .await?;
    let grant = match client
        .exchange_code(AuthorizationCode::new(code))
        .set_pkce_verifier(verifier)
        .add_extra_param("resource", discovered.resource.clone())
        .request_async(http)
        .await
    {
        Ok(token) => new_grant(
            &server,
            discovered,
            &identity,
            GrantKind::AuthorizationCode,
            &token,
            scopes,
        ),
        Err(error) => Err(grant_error(&server, "authorization code", error)),
    };
    answer_browser(&mut browser, &server, grant.as_ref().map(|_| ())).await;
    grant
}

/// The authorization request of a sign-in: its URL (with `response_type=code`, the client
/// id, the redirect URI, `scope`, `resource`, a random `state`, and the PKCE challenge
/// `S256` of a random verifier), its `state` and the verifier.
///
/// # Errors
/// [`OAuthError::Login`] when the client has no authorization endpoint.
pub(crate) fn authorization_request(
    server: &str,
    client: &Client,
    scopes: &[String],
    resource: &str,
) -> Result<(Url, CsrfToken, PkceCodeVerifier), OAuthError> {
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let (url, state) = client
        .authorize_url(CsrfToken::new_random)
        .map_err(|error| OAuthError::Login {
            server: server.to_owned(),
            reason: error.to_string(),
        })?
        .add_scopes(scopes.iter().cloned().map(Scope::new))
        .add_extra_param("resource", resource.to_owned())
        .set_pkce_challenge(challenge)
        .url();
    Ok((url, state, verifier))
}

/// The grant type of the device grant's token requests (RFC 8628, section 3.4).
const DEVICE_CODE_GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:device_code";

/// The device authorization grant (RFC 8628): asks the device authorization endpoint for a
/// code, shows where to enter it, and polls the token endpoint at the `interval` the server
/// names (at least [`MIN_DEVICE_POLL_INTERVAL`]; 5 s more at each `slow_down`) until the
/// person signed in, the server refused, or the code's life or `timeout` (the shorter) ran
/// out. The device authorization endpoint passed the origin rule with the others
/// ([`discovery::check_endpoints`]), and every request goes through [`OAuthHttp`].
pub(crate) async fn device(
    http: &OAuthHttp,
    config: &OAuthConfig,
    discovered: &Discovered,
    scopes: &[String],
    timeout: Duration,
    show: &mut (dyn FnMut(Prompt<'_>) + Send),
) -> Result<Grant, OAuthError> {
    let server = http.server().to_owned();
    let metadata = &discovered.server_metadata;
    let no_device = |reason: &str| OAuthError::Metadata {
        server: server.clone(),
        what: String::from("authorization server metadata"),
        url: metadata.issuer.clone(),
        reason: reason.to_owned(),
    };
    let Some(endpoint) = metadata.device_authorization_endpoint.as_deref() else {
        return Err(no_device(
            "it offers no device authorization grant (no `device_authorization_endpoint`, RFC 8628): sign in with the authorization code (`auth login` without `--device`)",
        ));
    };
    let device_url = DeviceAuthorizationUrl::new(endpoint.to_owned())
        .map_err(|_| no_device("the device authorization endpoint is not a URL"))?;
    let identity = match client_identity(config, metadata) {
        ClientIdentity::Known(identity) => identity,
        ClientIdentity::Register => register(http, metadata, None).await?,
    };
    let client = client(
        http,
        &identity,
        &metadata.token_endpoint,
        None,
        metadata.revocation_endpoint.as_deref(),
    )?
    .set_device_authorization_url(device_url);
    let details: StandardDeviceAuthorizationResponse = client
        .exchange_device_code()
        .add_scopes(scopes.iter().cloned().map(Scope::new))
        .add_extra_param("resource", discovered.resource.clone())
        .request_async(http)
        .await
        .map_err(|error| grant_error(&server, "device authorization", error))?;
    // Shown, never fetched: still it must be a place toolward would go itself (`https://`,
    // no user name that makes `https://good.example@evil.example` read as the good host).
    let verification = |text: &str, what: &str| -> Result<String, OAuthError> {
        let url = Url::parse(text).map_err(|_| OAuthError::Metadata {
            server: server.clone(),
            what: String::from("the device authorization answer"),
            url: endpoint.to_owned(),
            reason: format!("{what} `{}` is not a URL", escape(text)),
        })?;
        http.origins().check(what, &url)?;
        Ok(escape(url.as_str()))
    };
    let verification_uri =
        verification(details.verification_uri().as_str(), "its verification URI")?;
    let verification_uri_complete = details
        .verification_uri_complete()
        .map(|complete| verification(complete.secret(), "its verification URI with the code"))
        .transpose()?;
    let wait = timeout.min(details.expires_in());
    show(Prompt::Device {
        verification_uri,
        verification_uri_complete,
        user_code: crate::text::quote(details.user_code().secret(), crate::text::MAX_QUOTED_BYTES),
        wait,
    });
    let poll = client
        .exchange_device_access_token(&details)
        .add_extra_param("resource", discovered.resource.clone())
        .set_max_backoff_interval(MAX_DEVICE_POLL_BACKOFF)
        .request_async(
            http,
            |interval| tokio::time::sleep(interval.max(MIN_DEVICE_POLL_INTERVAL)),
            Some(wait),
        );
    // The crate checks the time only between polls: an `interval` past the wait would
    // outlast it.
    let token = match tokio::time::timeout(wait, poll).await {
        Ok(answer) => {
            answer.map_err(|error| grant_error(&server, "device authorization", error))?
        }
        Err(_) => {
            return Err(OAuthError::Login {
                server,
                reason: format!(
                    "nobody entered the code within {} s (the code's life or `--timeout-secs`)",
                    wait.as_secs()
                ),
            });
        }
    };
    new_grant(
        &server,
        discovered,
        &identity,
        GrantKind::Device,
        &token,
        scopes,
    )
}

/// The client credentials grant with the configured client.
async fn client_credentials(
    http: &OAuthHttp,
    config: &OAuthConfig,
    discovered: &Discovered,
    scopes: &[String],
) -> Result<Grant, OAuthError> {
    let server = http.server().to_owned();
    let metadata = &discovered.server_metadata;
    let identity = configured_identity(config, metadata).ok_or_else(|| OAuthError::Login {
        server: server.clone(),
        reason: String::from(
            "`client_credentials` needs `oauth.client_id` and `oauth.client_secret`",
        ),
    })?;
    let client = client(
        http,
        &identity,
        &metadata.token_endpoint,
        None,
        metadata.revocation_endpoint.as_deref(),
    )?;
    let token = client
        .exchange_client_credentials()
        .add_scopes(scopes.iter().cloned().map(Scope::new))
        .add_extra_param("resource", discovered.resource.clone())
        .request_async(http)
        .await
        .map_err(|error| grant_error(&server, "client credentials", error))?;
    new_grant(
        &server,
        discovered,
        &identity,
        GrantKind::ClientCredentials,
        &token,
        scopes,
    )
}

/// The grant a token answer makes.
fn new_grant(
    server: &str,
    discovered: &Discovered,
    identity: &Identity,
    kind: GrantKind,
    token: &BasicTokenResponse,
    asked: &[String],
) -> Result<Grant, OAuthError> {
    let metadata = &discovered.server_metadata;
    let mut grant = Grant {
        server: server.to_owned(),
        principal: None,
        resource: discovered.resource.clone(),
        issuer: metadata.issuer.clone(),
        token_endpoint: metadata.token_endpoint.clone(),
        revocation_endpoint: metadata.revocation_endpoint.clone(),
        client_id: identity.id.clone(),
        client_secret: identity.secret.clone(),
        client_auth: identity.auth,
        kind,
        access_token: String::new(),
        refresh_token: None,
        expires_at: None,
        scopes: asked.to_vec(),
        obtained_at: now_secs(),
    };
    apply(server, &mut grant, token)?;
    Ok(grant)
}

/// Puts the tokens of `token` into `grant` (a refresh token kept when none comes).
fn apply(server: &str, grant: &mut Grant, token: &BasicTokenResponse) -> Result<(), OAuthError> {
    if *token.token_type() != BasicTokenType::Bearer {
        return Err(OAuthError::Grant {
            server: server.to_owned(),
            grant: String::from("token request"),
            reason: String::from("the token it issued is not a bearer token"),
        });
    }
    if token.access_token().secret().is_empty() {
        return Err(OAuthError::Grant {
            server: server.to_owned(),
            grant: String::from("token request"),
            reason: String::from("the token it issued is empty"),
        });
    }
    grant.access_token = token.access_token().secret().clone();
    if let Some(refresh) = token.refresh_token() {
        grant.refresh_token = Some(refresh.secret().clone());
    }
    let now = now_secs();
    grant.expires_at = token
        .expires_in()
        .map(|life| now.saturating_add(life.as_secs()));
    if let Some(scopes) = token.scopes() {
        grant.scopes = scopes.iter().map(|scope| scope.to_string()).collect();
    }
    grant.obtained_at = now;
    Ok(())
}

/// The error of a token request, without any token: the OAuth error code and description,
/// or why the request failed.
pub(crate) fn grant_error<T: ErrorResponse + std::fmt::Display + 'static>(
    server: &str,
    grant: &str,
    error: RequestTokenError<FetchError, T>,
) -> OAuthError {
    let reason = match error {
        RequestTokenError::ServerResponse(response) => escape(&response.to_string()),
        RequestTokenError::Request(error) => error.0,
        // The body is left out: it may hold a token.
        RequestTokenError::Parse(error, _) => {
            // The path names the answer's keys: the authorization server's words.
            format!(
                "its answer is not a token response (at `{}`)",
                escape(&error.path().to_string())
            )
        }
        RequestTokenError::Other(text) => escape(&text),
    };
    OAuthError::Grant {
        server: server.to_owned(),
        grant: grant.to_owned(),
        reason,
    }
}

/// The identity a stored grant signs in with.
fn grant_identity(grant: &Grant) -> Identity {
    Identity {
        id: grant.client_id.clone(),
        secret: grant.client_secret.clone(),
        auth: grant.client_auth,
    }
}

/// A new access token for `grant`: with its refresh token, or for client credentials by
/// asking again. The grant returned is the one to store.
///
/// # Errors
/// [`OAuthError::NotSignedIn`] when there is no way to renew it (no refresh token);
/// [`OAuthError::Grant`] when the authorization server refuses.
pub async fn renew(
    http: &OAuthHttp,
    config: &OAuthConfig,
    grant: &Grant,
) -> Result<Grant, OAuthError> {
    let server = http.server().to_owned();
    let identity = grant_identity(grant);
    let client = client(
        http,
        &identity,
        &grant.token_endpoint,
        None,
        grant.revocation_endpoint.as_deref(),
    )?;
    let mut renewed = grant.clone();
    let token = match (grant.kind, &grant.refresh_token) {
        (_, Some(refresh)) => client
            .exchange_refresh_token(&RefreshToken::new(refresh.clone()))
            .add_extra_param("resource", grant.resource.clone())
            .request_async(http)
            .await
            .map_err(|error| match error {
                RequestTokenError::ServerResponse(_) => OAuthError::NotSignedIn {
                    server: server.clone(),
                    principal: grant.principal.clone(),
                    reason: format!(
                        "the authorization server refused to renew its token: {}",
                        match grant_error(&server, "refresh", error) {
                            OAuthError::Grant { reason, .. } => reason,
                            other => other.to_string(),
                        }
                    ),
                },
                other => grant_error(&server, "refresh", other),
            })?,
        (GrantKind::ClientCredentials, None) => {
            let scopes = if config.scopes.is_empty() {
                grant.scopes.clone()
            } else {
                config.scopes.clone()
            };
            client
                .exchange_client_credentials()
                .add_scopes(scopes.into_iter().map(Scope::new))
                .add_extra_param("resource", grant.resource.clone())
                .request_async(http)
                .await
                .map_err(|error| grant_error(&server, "client credentials", error))?
        }
        (GrantKind::AuthorizationCode | GrantKind::Device, None) => {
            return Err(OAuthError::NotSignedIn {
                server,
                principal: grant.principal.clone(),
                reason: String::from(
                    "its token expired or was refused, and the authorization server gave no refresh token",
                ),
            });
        }
    };
    apply(&server, &mut renewed, &token)?;
    Ok(renewed)
}

/// What `auth logout` did.
#[derive(Debug)]
pub struct LogoutOutcome {
    /// Whether a grant was removed.
    pub removed: bool,
    /// Whether the tokens were revoked at the authorization server (RFC 7009): `None` when
    /// it advertises no revocation endpoint.
    pub revoked: Option<Result<(), OAuthError>>,
}

/// Revokes the tokens of `server`'s grant (the operator's, or `principal`'s) where its
/// authorization server advertises a revocation endpoint (the refresh token, then the access
/// token), then removes the grant. The grant is removed even when revocation fails (the
/// outcome says so).
///
/// # Errors
/// [`OAuthError::Store`]; a grant that cannot be opened ([`OAuthError::Tampered`]) is removed
/// unrevoked.
pub async fn logout(
    server: &ServerConfig,
    store: &GrantStore,
    principal: Option<&str>,
) -> Result<LogoutOutcome, OAuthError> {
    let grant = match store.read(&server.name, principal).await {
        Ok(grant) => grant,
        Err(OAuthError::Tampered { .. }) => None,
        Err(other) => return Err(other),
    };
    let revoked = match &grant {
        Some(grant) if grant.revocation_endpoint.is_some() => {
            let ca_file = server_url(server)
                .ok()
                .and_then(|(_, config)| config.ca_file.as_ref());
            Some(revoke(grant, ca_file).await)
        }
        _ => None,
    };
    let removed = store.remove(&server.name, principal).await?;
    Ok(LogoutOutcome { removed, revoked })
}

async fn revoke(grant: &Grant, ca_file: Option<&CaBundle>) -> Result<(), OAuthError> {
    let http = OAuthHttp::new(&grant.server, &grant.resource, ca_file)?;
    let client = client(
        &http,
        &grant_identity(grant),
        &grant.token_endpoint,
        None,
        grant.revocation_endpoint.as_deref(),
    )?;
    let mut tokens = Vec::new();
    if let Some(refresh) = &grant.refresh_token {
        tokens.push(StandardRevocableToken::RefreshToken(RefreshToken::new(
            refresh.clone(),
        )));
    }
    tokens.push(StandardRevocableToken::AccessToken(
        oauth2::AccessToken::new(grant.access_token.clone()),
    ));
    for token in tokens {
        let request = client
            .revoke_token(token)
            .map_err(|error| OAuthError::Grant {
                server: grant.server.clone(),
                grant: String::from("revocation"),
                // The `oauth2` crate sends a revocation only over `https://` (RFC 7009,
                // section 2): nothing was sent, and the tokens stay valid until they expire.
                reason: format!("not sent: {error}; the tokens stay valid until they expire"),
            })?;
        request
            .request_async(&http)
            .await
            .map_err(|error| OAuthError::Grant {
                server: grant.server.clone(),
                grant: String::from("revocation"),
                reason: match error {
                    RequestTokenError::ServerResponse(response) => escape(&response.to_string()),
                    RequestTokenError::Request(error) => error.0,
                    RequestTokenError::Parse(error, _) => {
                        format!(
                            "its answer is not understood (at `{}`)",
                            escape(&error.path().to_string())
                        )
                    }
                    RequestTokenError::Other(text) => escape(&text),
                },
            })?;
    }
    Ok(())
}
