//! Signing in to upstream HTTP servers: toolward as an OAuth 2.1 client of the servers that
//! answer `401` (MCP specification 2025-06-18 and 2025-11-25, "Authorization").
//!
//! # Contract
//!
//! - **Discovery.** At `toolward auth login SERVER` toolward sends the server an
//!   `initialize` without credentials. A `401` leads to the server's protected-resource
//!   metadata (RFC 9728): the `resource_metadata` URL of its `WWW-Authenticate: Bearer`
//!   header, else the well-known URIs (`/.well-known/oauth-protected-resource` with the
//!   endpoint's path, then without). Its `resource` must be the server's URL. Its first
//!   `authorization_servers` entry is the issuer; its metadata is read from RFC 8414's
//!   well-known URIs, then OpenID Connect discovery's, in the specification's order, and its
//!   `issuer` must be exactly the issuer the metadata URL was built from (a trailing `/`
//!   aside). `code_challenge_methods_supported` must name `S256`, or nothing is sent.
//! - **Where toolward goes** ([`origin`]): every URL toolward fetches or posts to while
//!   signing in or renewing (metadata, registration, authorization, token and revocation
//!   endpoints) is `https://`, except on a loopback host (`localhost`, `127.0.0.0/8`,
//!   `::1`), and a loopback host only when the server itself is on one. No URL may carry a
//!   user name or password. A host that is an internal address (private, loopback,
//!   link-local such as `169.254.169.254`, carrier-grade NAT, unique-local, unspecified,
//!   multicast, reserved; also inside IPv4-mapped and NAT64 IPv6 addresses) is refused unless
//!   it is the server's own host; a host name is resolved by toolward's own resolver, which
//!   refuses the connection when a name other than the server's own resolves to such an
//!   address. Redirects are never followed and every body is read up to
//!   [`MAX_OAUTH_BODY_BYTES`]. Certificates are checked against the built-in roots and the
//!   server's `oauth.ca_file` (`listen.oauth.ca_file` for the listener's issuer).
//! - **Client identity**, in the MCP specification's order: `oauth.client_id` (and
//!   `client_secret`) when configured; else the operator's Client ID Metadata Document
//!   (`oauth.client_id_metadata_url`, the URL as the client id) where the authorization
//!   server's metadata says `client_id_metadata_document_supported: true`; else dynamic
//!   client registration (RFC 7591) at each sign-in, as a public native client
//!   (`token_endpoint_auth_method: none`) whose redirect URI is the loopback one of that
//!   sign-in (none for the device grant).
//! - **Grants.** Authorization code with PKCE `S256`, a random `state` checked on the
//!   redirect (compared in constant time) and `resource` (RFC 8707) on the authorization and
//!   every token request; the browser comes back to `http://127.0.0.1:PORT/callback`
//!   (RFC 8252, section 7.3), which toolward listens on only for the sign-in, at most the
//!   login's timeout. The device authorization grant (RFC 8628; `oauth.grant: device` or
//!   `auth login --device`) for gateways without a browser: the verification URI (checked by
//!   the origin rule, escaped) and the user code are shown, and the token endpoint polled at
//!   the server's `interval` (at least [`login::MIN_DEVICE_POLL_INTERVAL`], slower at
//!   `slow_down`) until the code's life or the login's timeout. Client credentials
//!   (`oauth.grant: client_credentials`) for gateways with no person at hand: no browser, and
//!   a new token whenever the old one expires.
//! - **Tokens** ([`store`]) are kept in the state folder, one file per server for the
//!   operator (`oauth/SERVER.grant`, mode `0600`) and one per server and principal
//!   (`oauth/SERVER.principals/SHA256.grant`), encrypted with XChaCha20-Poly1305 under a key
//!   derived from the random key file `oauth.key` (mode `0600`), with the server's name (and
//!   the principal's) as associated data: a file altered, or moved to another server's or
//!   principal's name, is refused. The confinement withholds the whole state folder from
//!   every server. With `store.postgres` they are rows of `toolward_oauth_grants` sealed the
//!   same way under `store.oauth_key`, which comes from the environment (`postgres`).
//! - **Per principal** (`oauth.per_principal`): pinning and loading use the operator's grant;
//!   each call uses its principal's own grant in an upstream session of that principal's
//!   (`crate::registry`), and a principal without one is refused naming
//!   `toolward auth login SERVER --principal P`. A client's own token never goes upstream.
//! - **More scope**: a `403` with `error="insufficient_scope"` fails that request, naming the
//!   sign-in that asks for the scopes the server named (`auth login --scope`). A token is renewed
//!   [`REFRESH_BEFORE_EXPIRY`] before it expires and once after a `401`; it goes only in the
//!   `Authorization` header of requests to the server's own configured URL (the transport
//!   follows no redirect), only when the operator configured no `Authorization` header of
//!   their own, and only while the configured URL is the one the grant was issued for. It
//!   is never logged, audited, shown, nor put in an error message; debug output of every
//!   type holding one leaves it out.
//! - **Nothing interactive in `serve`.** A server that asks for sign-in and has no usable
//!   grant fails to connect with an error naming it and `toolward auth login SERVER`
//!   ([`crate::transport::TransportError::SignIn`]); its tools are not registered.
//!
//! # The crate
//!
//! The requests of the grants (authorization URL, code exchange with the PKCE verifier,
//! client credentials, refresh, RFC 7009 revocation) are the `oauth2` crate's (version 5,
//! well kept, typed tokens whose debug output is redacted). It is used without its `reqwest`
//! feature: its requests go through [`OAuthHttp`], toolward's own reqwest 0.12 client
//! (rustls with `ring`, no redirects, capped bodies, the origin rule at every request), so
//! no second TLS stack comes in. rmcp's `auth` feature was not taken: it pulls a reqwest
//! with a TLS stack the workspace refuses, and its client would fetch metadata without the
//! origin rule. Discovery (RFC 9728, RFC 8414) and registration (RFC 7591) are small JSON
//! documents read here; `openidconnect` would add ID-token machinery toolward has no use for.

pub mod discovery;
pub mod login;
pub mod origin;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod store;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use oauth2::{HttpRequest, HttpResponse};
use reqwest::header::HeaderValue;

use crate::config::{CaBundle, OAuthConfig, ServerConfig, ServerTransport};

pub use store::{Grant, GrantKind, GrantStore, Listed, StateDirGrants};

/// Largest body read from an authorization server or a metadata URL, in bytes: 256 KiB.
/// Metadata documents and token responses are a few KiB.
pub const MAX_OAUTH_BODY_BYTES: usize = 256 * 1024;

/// How long before its expiry a token is renewed: 60 s, so a request does not leave with a
/// token that expires on the way.
pub const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(60);

/// Time to connect to an authorization server or a metadata URL: 10 s.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Time for one whole request to an authorization server or a metadata URL: 30 s.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The `User-Agent` of toolward's OAuth requests.
const USER_AGENT: &str = concat!("toolward/", env!("CARGO_PKG_VERSION"));

/// What went wrong while signing in to a server, or renewing or using its grant. Every
/// message names the server; none holds a token.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    /// The server is not an HTTP server.
    #[error("server `{server}` is not an HTTP server: only servers with a `url` sign in")]
    NotHttp {
        /// The server.
        server: String,
    },
    /// The server has no grant, or one that cannot be used any more.
    #[error("server `{server}` needs sign-in{} ({reason}): run `{}`", for_principal(principal.as_deref()), crate::text::login_command(server, principal.as_deref(), &[]))]
    NotSignedIn {
        /// The server.
        server: String,
        /// The principal whose grant it is; `None`: the operator's.
        principal: Option<String>,
        /// Why.
        reason: String,
    },
    /// A URL breaks the rule of where toolward goes (see [`origin`]).
    #[error("server `{server}`: refused to use {what} `{url}`: {rule}")]
    Refused {
        /// The server.
        server: String,
        /// Which URL (`the token endpoint`).
        what: String,
        /// The URL.
        url: String,
        /// The rule it breaks.
        rule: String,
    },
    /// A metadata document or an answer is not what the specification says.
    #[error("server `{server}`: {what} at `{url}`: {reason}")]
    Metadata {
        /// The server.
        server: String,
        /// Which document (`protected-resource metadata`).
        what: String,
        /// Where it was read.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// A request could not be sent or its answer read.
    #[error("server `{server}`: request to `{url}` failed: {reason}")]
    Request {
        /// The server.
        server: String,
        /// Where it went.
        url: String,
        /// Why (the HTTP library's message, without the URL).
        reason: String,
    },
    /// The authorization server refused a grant, or answered it with something that is not
    /// a bearer token.
    #[error("server `{server}`: the {grant} failed: {reason}")]
    Grant {
        /// The server.
        server: String,
        /// Which request (`authorization code`, `refresh`).
        grant: String,
        /// Its answer (the OAuth error code and description), escaped.
        reason: String,
    },
    /// Sign-in in the browser did not complete.
    #[error("server `{server}`: sign-in did not complete: {reason}")]
    Login {
        /// The server.
        server: String,
        /// Why (a timeout, a `state` that does not match, an `error` in the redirect).
        reason: String,
    },
    /// The grant file cannot be decrypted: altered, moved from another server's name, or
    /// the key file was replaced.
    #[error(
        "server `{server}`{}: grant {path} cannot be decrypted (altered, copied from another server or principal, or its key replaced): run `{}` and sign in again",
        for_principal(principal.as_deref()),
        crate::text::logout_command(server, principal.as_deref())
    )]
    Tampered {
        /// The server.
        server: String,
        /// The principal whose grant it is; `None`: the operator's (or not known).
        principal: Option<String>,
        /// Where it is kept (a file or a row, quoted).
        path: String,
    },
    /// The state folder or a grant file cannot be read or written.
    #[error("server `{server}`: grant store: {reason}")]
    Store {
        /// The server (`*` for the store as a whole).
        server: String,
        /// Why (the path and the system's message).
        reason: String,
    },
}

/// The HTTP client of one server's sign-in and renewals: toolward's reqwest client with no
/// redirects, no proxy, bounded time, the origin rule checked before every request and at
/// every name resolution ([`origin::Origins`]), and bodies capped at
/// [`MAX_OAUTH_BODY_BYTES`]. It is also the `oauth2` crate's HTTP client.
#[derive(Debug, Clone)]
pub struct OAuthHttp {
    server: String,
    origins: Arc<origin::Origins>,
    client: reqwest::Client,
}

/// Why one request of [`OAuthHttp`] failed, as the `oauth2` crate carries it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FetchError(pub String);

impl OAuthHttp {
    /// The client for server `server` whose MCP endpoint is `resource`, trusting the roots
    /// of `ca_file` beside the built-in ones.
    ///
    /// # Errors
    /// [`OAuthError::Refused`] for a `resource` that is not an `http(s)` URL;
    /// [`OAuthError::Request`] when the HTTP client cannot be built.
    pub fn new(
        server: &str,
        resource: &str,
        ca_file: Option<&CaBundle>,
    ) -> Result<OAuthHttp, OAuthError> {
        let origins = Arc::new(origin::Origins::for_server(server, resource)?);
        let failed = |error: reqwest::Error| OAuthError::Request {
            server: server.to_owned(),
            url: resource.to_owned(),
            reason: error.without_url().to_string(),
        };
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(USER_AGENT)
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .dns_resolver(Arc::new(origin::GuardedResolver::new(Arc::clone(&origins))));
        if let Some(bundle) = ca_file {
            builder = with_roots(builder, bundle).map_err(failed)?;
        }
        let client = builder.build().map_err(failed)?;
        Ok(OAuthHttp {
            server: server.to_owned(),
            origins,
            client,
        })
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The rule of where this client goes.
    pub fn origins(&self) -> &origin::Origins {
        &self.origins
    }

    /// Sends `request` after checking its URL against the origin rule; the answer with its
    /// body read up to [`MAX_OAUTH_BODY_BYTES`]. `what` names the URL in errors.
    ///
    /// # Errors
    /// [`OAuthError::Refused`], [`OAuthError::Request`] (also for a body past the limit).
    pub async fn send(
        &self,
        what: &str,
        request: reqwest::Request,
    ) -> Result<(reqwest::StatusCode, reqwest::header::HeaderMap, Vec<u8>), OAuthError> {
        let url = request.url().clone();
        self.origins.check(what, &url)?;
        let failed = |reason: String| OAuthError::Request {
            server: self.server.clone(),
            url: url.to_string(),
            reason,
        };
        let mut response = self
            .client
            .execute(request)
            .await
            .map_err(|error| failed(crate::text::error_chain(&error.without_url())))?;
        let status = response.status();
        let headers = response.headers().clone();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|error| failed(crate::text::error_chain(&error.without_url())))?
        {
            if body.len().saturating_add(chunk.len()) > MAX_OAUTH_BODY_BYTES {
                return Err(failed(format!(
                    "the answer is larger than the limit of {MAX_OAUTH_BODY_BYTES} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((status, headers, body))
    }

    /// A `GET` of `url` accepting JSON, once `url` passes the origin rule. Checked here, not
    /// only in [`send`](Self::send): building a request moves a URL's user name and password
    /// into an `Authorization` header and takes them out of the URL `send` sees.
    ///
    /// # Errors
    /// [`OAuthError::Refused`].
    pub(crate) fn get(
        &self,
        what: &str,
        url: &reqwest::Url,
    ) -> Result<reqwest::RequestBuilder, OAuthError> {
        self.origins.check(what, url)?;
        Ok(self
            .client
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "application/json"))
    }

    /// A `POST` to `url`, once `url` passes the origin rule (see [`get`](Self::get)).
    ///
    /// # Errors
    /// [`OAuthError::Refused`].
    pub(crate) fn post(
        &self,
        what: &str,
        url: &reqwest::Url,
    ) -> Result<reqwest::RequestBuilder, OAuthError> {
        self.origins.check(what, url)?;
        Ok(self.client.post(url.clone()))
    }
}

impl<'c> oauth2::AsyncHttpClient<'c> for OAuthHttp {
    type Error = FetchError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, FetchError>> + Send + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(async move {
            let request = reqwest::Request::try_from(request)
                .map_err(|error| FetchError(error.without_url().to_string()))?;
            let (status, headers, body) = self
                .send("the authorization server's endpoint", request)
                .await
                .map_err(|error| FetchError(error.to_string()))?;
            let mut builder = oauth2::http::Response::builder().status(status.as_u16());
            for (name, value) in &headers {
                builder = builder.header(name.as_str(), value.as_bytes());
            }
            builder
                .body(body)
                .map_err(|error| FetchError(error.to_string()))
        })
    }
}

/// `builder` trusting the certificates of `bundle` as roots, beside the built-in ones: for
/// the OAuth client here and the server's streamable HTTP transport.
///
/// # Errors
/// A certificate reqwest cannot take (the config reader checked each one already).
pub(crate) fn with_roots(
    mut builder: reqwest::ClientBuilder,
    bundle: &CaBundle,
) -> Result<reqwest::ClientBuilder, reqwest::Error> {
    for der in &bundle.certificates {
        builder = builder.add_root_certificate(reqwest::Certificate::from_der(der)?);
    }
    Ok(builder)
}

/// The MCP endpoint of `server`, for an HTTP server.
///
/// # Errors
/// [`OAuthError::NotHttp`].
pub fn server_url(server: &ServerConfig) -> Result<(&str, &OAuthConfig), OAuthError> {
    match &server.transport {
        ServerTransport::Http { url, oauth, .. } => Ok((url, oauth)),
        ServerTransport::Stdio { .. } | ServerTransport::Handed(_) => Err(OAuthError::NotHttp {
            server: server.name.clone(),
        }),
    }
}

/// Whether the operator configured an `Authorization` header for `server`: then toolward
/// sends theirs and never a grant's token.
pub fn has_own_authorization(server: &ServerConfig) -> bool {
    match &server.transport {
        ServerTransport::Http { headers, .. } => headers
            .keys()
            .any(|name| name.eq_ignore_ascii_case("authorization")),
        ServerTransport::Stdio { .. } | ServerTransport::Handed(_) => false,
    }
}

/// ` for principal `P`` for a principal's grant, else nothing.
fn for_principal(principal: Option<&str>) -> String {
    principal.map_or_else(String::new, |principal| {
        format!(
            " for principal `{}`",
            crate::text::quote(principal, crate::text::MAX_QUOTED_BYTES)
        )
    })
}

/// Whether `scope` is a scope token of RFC 6749, section 3.3: printable ASCII without space,
/// `"` or `\`.
pub fn is_scope_token(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
}

/// Seconds since the Unix epoch, now.
pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_secs())
        .unwrap_or(0)
}

/// The grant of one HTTP server in use by the transport, the operator's or a principal's: the
/// token for its requests, renewed before it expires and once after a `401`. Shared by the
/// requests of one upstream session; renewals are one at a time.
///
/// A renewal looks at the store first: a grant another gateway of the fleet (or a new `auth
/// login`) renewed meanwhile is taken as it is, and a grant deleted there (`auth logout`) is
/// not renewed, nor written back. When the authorization server refuses a refresh token
/// another holder has just used (rotated refresh tokens), the store is looked at again.
pub struct Credentials {
    server: String,
    principal: Option<String>,
    config: OAuthConfig,
    http: OAuthHttp,
    store: Arc<GrantStore>,
    grant: tokio::sync::Mutex<Grant>,
}

impl std::fmt::Debug for Credentials {
    /// The grant is left out: it holds tokens.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("server", &self.server)
            .field("principal", &self.principal)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Credentials {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Credentials {}

impl Credentials {
    /// The grant of `server` (a server of the config) for `principal` (`None`: the
    /// operator's) kept in `store`, ready for the transport; `None` when there is none, or
    /// when the operator configured an `Authorization` header of their own.
    ///
    /// # Errors
    /// [`OAuthError::Tampered`], [`OAuthError::Store`]; [`OAuthError::NotSignedIn`] when the
    /// grant was issued for another URL than the one now configured.
    pub async fn load(
        store: &Arc<GrantStore>,
        server: &ServerConfig,
        principal: Option<&str>,
    ) -> Result<Option<Arc<Credentials>>, OAuthError> {
        let (url, config) = server_url(server)?;
        if has_own_authorization(server) {
            return Ok(None);
        }
        let Some(grant) = store.read(&server.name, principal).await? else {
            return Ok(None);
        };
        if reqwest::Url::parse(&grant.resource).ok() != reqwest::Url::parse(url).ok() {
            return Err(OAuthError::NotSignedIn {
                server: server.name.clone(),
                principal: principal.map(str::to_owned),
                reason: format!(
                    "its grant was issued for `{}`, and the config now names `{url}`",
                    grant.resource
                ),
            });
        }
        Ok(Some(Arc::new(Credentials {
            server: server.name.clone(),
            principal: principal.map(str::to_owned),
            config: config.clone(),
            http: OAuthHttp::new(&server.name, url, config.ca_file.as_ref())?,
            store: Arc::clone(store),
            grant: tokio::sync::Mutex::new(grant),
        })))
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The principal whose grant it is; `None`: the operator's.
    pub fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }

    /// The scopes of the grant.
    pub async fn scopes(&self) -> Vec<String> {
        self.grant.lock().await.scopes.clone()
    }

    /// The `Authorization` value for the next request (marked sensitive), renewed first
    /// when the token expires within [`REFRESH_BEFORE_EXPIRY`].
    ///
    /// # Errors
    /// [`OAuthError::NotSignedIn`] when it expired and cannot be renewed; the errors of the
    /// renewal.
    pub async fn authorization(&self) -> Result<HeaderValue, OAuthError> {
        let mut grant = self.grant.lock().await;
        if grant.expires_within(REFRESH_BEFORE_EXPIRY) {
            self.renew(&mut grant).await?;
        }
        grant.authorization(&self.server)
    }

    /// After the server answered `401` to a request that carried `rejected`: the value to
    /// retry with once. When another request renewed the token meanwhile, that token;
    /// otherwise the grant is renewed now.
    ///
    /// # Errors
    /// [`OAuthError::NotSignedIn`] when the grant cannot be renewed (no refresh token); the
    /// errors of the renewal.
    pub async fn after_unauthorized(
        &self,
        rejected: &HeaderValue,
    ) -> Result<HeaderValue, OAuthError> {
        let mut grant = self.grant.lock().await;
        let current = grant.authorization(&self.server)?;
        if current.as_bytes() != rejected.as_bytes() {
            return Ok(current);
        }
        self.renew(&mut grant).await?;
        grant.authorization(&self.server)
    }

    fn not_signed_in(&self, reason: &str) -> OAuthError {
        OAuthError::NotSignedIn {
            server: self.server.clone(),
            principal: self.principal.clone(),
            reason: reason.to_owned(),
        }
    }

    /// The store's copy of the grant, when it holds one other than `grant` that is not about
    /// to expire (renewed elsewhere, or signed in again); `Err` when the store holds none any
    /// more (signed out). A store that cannot be read gives `Ok(None)`: the renewal goes on.
    async fn stored(&self, grant: &Grant) -> Result<Option<Grant>, OAuthError> {
        match self
            .store
            .read(&self.server, self.principal.as_deref())
            .await
        {
            Ok(None) => Err(self.not_signed_in("its grant was deleted (`toolward auth logout`)")),
            Ok(Some(stored))
                if stored.access_token != grant.access_token
                    && stored.resource == grant.resource
                    && !stored.expires_within(REFRESH_BEFORE_EXPIRY) =>
            {
                Ok(Some(stored))
            }
            Ok(Some(_)) => Ok(None),
            Err(error) => {
                tracing::warn!(server = %self.server, "server `{}`: the kept grant could not be read before renewing it: {}", self.server, crate::text::error_chain(&error));
                Ok(None)
            }
        }
    }

    /// Renews `grant` (see the type's documentation) and keeps the result.
    async fn renew(&self, grant: &mut Grant) -> Result<(), OAuthError> {
        if let Some(stored) = self.stored(grant).await? {
            *grant = stored;
            return Ok(());
        }
        match login::renew(&self.http, &self.config, grant).await {
            Ok(renewed) => {
                if let Err(error) = self.store.write(&renewed).await {
                    // The renewed token works; the next renewal tries the store again.
                    tracing::warn!(server = %self.server, "server `{}`: the renewed grant could not be kept: {}", self.server, crate::text::error_chain(&error));
                }
                *grant = renewed;
                Ok(())
            }
            Err(error) => match self.stored(grant).await {
                Ok(Some(stored)) => {
                    *grant = stored;
                    Ok(())
                }
                _ => Err(error),
            },
        }
    }
}
