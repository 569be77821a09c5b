//! The listener as an OAuth 2.1 resource server (`listen.oauth`; MCP specification
//! 2025-11-25, "Authorization"): a bearer token that is not one of `listen.tokens` must be a
//! JWT access token (RFC 9068) the configured issuer signed for this listener, or, with
//! `listen.oauth.introspection`, an opaque token the issuer's introspection (RFC 7662) says is
//! active and for this listener.
//!
//! # Contract
//!
//! - **Metadata.** The listener serves its protected-resource metadata (RFC 9728) without a
//!   token at [`METADATA_PATH`] followed by its resource's path (`/mcp`), and at
//!   [`METADATA_PATH`] alone: `resource` (the configured `listen.oauth.resource`),
//!   `authorization_servers` (the issuer), `bearer_methods_supported` (`header`), and
//!   `scopes_supported` when configured. A request without a usable token is answered `401`
//!   with `WWW-Authenticate: Bearer resource_metadata="…"` (RFC 9728, section 5.1), with
//!   `error="invalid_token"` and a short `error_description` when a token was given and
//!   failed (RFC 6750, section 3.1); a token without a required scope gets `403`
//!   `insufficient_scope` naming the scopes.
//! - **What a token must be.** At most [`MAX_ACCESS_TOKEN_BYTES`]; a JWS in compact form
//!   whose `alg` is one of `listen.oauth.algorithms` by name (`none` and `HS*` can never be:
//!   the config refuses them, and the verifier, [`super::ring_jws`], refuses HMAC whatever
//!   it is given); signed by a key of the issuer's JWKS whose type fits the algorithm (RSA
//!   for `RS*`/`PS*`, EC on P-256 for `ES256` and P-384 for `ES384`, Ed25519 for `EdDSA`),
//!   whose `use`, when given, is `sig`, and whose `alg`, when given, is the token's; `iss`
//!   exactly the issuer; `aud` containing the resource (RFC 8707: a token for another
//!   server is refused, so no token meant elsewhere is ever accepted here); `exp` required
//!   and `nbf` checked, both with `listen.oauth.leeway_ms`; claims of the wrong JSON type
//!   are refused, not skipped.
//! - **Opaque tokens.** With `listen.oauth.introspection`, a token that is not shaped as a
//!   JWS is sent to the introspection endpoint (configured, else the issuer's metadata's,
//!   under the origin rule) as the configured client (HTTP Basic, RFC 6749 section 2.3.1).
//!   It passes when the answer is `active: true`, its `token_type` (when given) `Bearer`, its
//!   `iss` (when given) the issuer, its `aud` (required) holds the resource, its `exp`
//!   (required) is not past and `nbf` not future; its claims then name the principal and the
//!   attributes as a JWT's do. Active answers are cached by the SHA-256 of the token until
//!   `exp`, at most [`INTROSPECTION_CACHE_TIME`] and [`MAX_INTROSPECTION_CACHE_ENTRIES`]; a
//!   failed introspection refuses the token.
//! - **Keys.** The JWKS comes from `listen.oauth.jwks_uri`, else from the `jwks_uri` of the
//!   issuer's metadata (RFC 8414's well-known URI, then OpenID Connect discovery's; its
//!   `issuer` must be the configured one), fetched at start (a failure stops the start) with
//!   toolward's OAuth HTTP client and its origin rule (`crate::oauth::origin`: `https://`
//!   except on loopback, no internal address but the issuer's own host, no redirects,
//!   bodies capped). Keys are cached; they are fetched again when older than
//!   [`JWKS_MAX_AGE`], and when a token names a key id (`kid`) the cache does not hold
//!   (the issuer rotated its keys), at most once per [`JWKS_REFETCH_INTERVAL`], so a stream
//!   of tokens with made-up key ids costs the issuer one request per interval. A failed
//!   fetch keeps the keys there were.
//! - **Who.** The principal is the `listen.oauth.principal_claim` claim (`sub` by default),
//!   a non-empty string of at most [`MAX_PRINCIPAL_CHARS`] characters without control
//!   characters; the `listen.oauth.attribute_claims` claims the token has become the
//!   principal's attributes (name and canonical JSON), which every decision sees
//!   (`principal-attributes` of WIT 0.3.0; `context.principal_attributes` in Cedar).
//! - **Never the token.** No token, nor any part of one, is logged, audited, put in an error
//!   message or a response, or sent anywhere: the inbound token ends here, and calls
//!   upstream carry the upstream's own credentials (`docs/oauth.md`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use reqwest::{StatusCode, Url};
use serde_json::{Map, Value, json};
use sha2::Digest as _;

use crate::config::ListenOAuthConfig;
use crate::oauth::discovery::server_metadata_urls;
use crate::oauth::{OAuthError, OAuthHttp};
use crate::text::escape;

/// The well-known path of the protected-resource metadata (RFC 9728, section 3).
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Largest bearer token validated, in bytes: 16 KiB. Access tokens are a few hundred bytes
/// to a few KiB; a longer one is refused before it is decoded.
pub const MAX_ACCESS_TOKEN_BYTES: usize = 16 * 1024;

/// Shortest time between two fetches of the JWKS for an unknown key id: 30 s. An issuer
/// that rotates publishes the new key before signing with it; a token with a key id the
/// issuer does not publish costs it at most one request per this interval.
pub const JWKS_REFETCH_INTERVAL: Duration = Duration::from_secs(30);

/// Age after which the cached JWKS is fetched again before use: one hour, so a key the
/// issuer withdrew stops verifying within the hour even when no new key id shows up.
pub const JWKS_MAX_AGE: Duration = Duration::from_secs(60 * 60);

/// Most keys kept from a JWKS: 64. Issuers publish two or three (the current and the next).
pub const MAX_JWKS_KEYS: usize = 64;

/// Longest principal taken from a token, in characters: 256.
pub const MAX_PRINCIPAL_CHARS: usize = 256;

/// Longest time an introspection answer is used without asking again: 60 s (never past the
/// token's `exp`). A token the issuer revoked keeps working here at most this long.
pub const INTROSPECTION_CACHE_TIME: Duration = Duration::from_secs(60);

/// Most introspection answers cached: 10 000 (past it, the expired ones are dropped, then
/// all). Each is a principal and its attributes, under the SHA-256 of its token.
pub const MAX_INTROSPECTION_CACHE_ENTRIES: usize = 10_000;

/// What a valid token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    /// The principal: the configured claim's value.
    pub principal: String,
    /// The configured claims the token has: name and canonical JSON.
    pub attributes: Vec<(String, String)>,
}

/// Why a token was refused; the reason never holds the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not a valid access token for this listener (`401`, `error="invalid_token"`).
    InvalidToken(String),
    /// Valid, but without every required scope (`403`, `error="insufficient_scope"`).
    InsufficientScope {
        /// The token's principal.
        principal: String,
        /// The required scopes it lacks.
        missing: Vec<String>,
    },
}

/// Why the resource server could not start. Every message names the issuer.
#[derive(Debug, thiserror::Error)]
#[error("`listen.oauth`: issuer `{issuer}`: {reason}")]
pub struct SetupError {
    /// The configured issuer.
    pub issuer: String,
    /// What failed.
    pub reason: String,
}

/// The cached keys of the issuer.
#[derive(Debug, Clone)]
struct KeySet {
    keys: Arc<Vec<Jwk>>,
    fetched: Instant,
}

/// The listener's token checks, built once at start.
pub struct ResourceServer {
    /// The gateway's own principal (the config's `principal`, the one of stdio and
    /// `toolward call`), which no access token may name.
    reserved_principal: Option<String>,
    issuer: String,
    resource: String,
    principal_claim: String,
    attribute_claims: Vec<String>,
    required_scopes: Vec<String>,
    leeway_s: u64,
    http: OAuthHttp,
    metadata: Bytes,
    metadata_url: String,
    metadata_paths: Vec<String>,
    keys: IssuerKeys,
    introspection: Option<Introspection>,
}

/// An issuer's signing keys (its JWKS) and the check of the JWTs it signs: the listener's
/// access tokens, and the ID tokens of the console's OpenID Connect sign-in
/// (`crate::console`). Keys are fetched at start, cached, and fetched again when older than
/// [`JWKS_MAX_AGE`] or when a token names a key id the cache does not hold, at most once per
/// refetch interval ([`JWKS_REFETCH_INTERVAL`]); a failed fetch keeps the keys there were.
pub(crate) struct IssuerKeys {
    /// The setting that names the issuer (`listen.oauth`, `console.oidc`), for messages.
    setting: &'static str,
    issuer: String,
    jwks_uri: Url,
    algorithms: Vec<Algorithm>,
    http: OAuthHttp,
    keys: Mutex<KeySet>,
    /// When the JWKS was last fetched or tried; held while fetching, so one fetch runs at
    /// a time and the others wait for its keys.
    fetching: tokio::sync::Mutex<Instant>,
    refetch_interval: Duration,
}

/// What a JWT checked by [`IssuerKeys::verify`] must be besides signed by the issuer: for
/// whom (`aud`), which claims it must have, and the clock skew tolerated on `exp` and `nbf`.
pub(crate) struct Expected<'a> {
    /// The value `aud` must hold: the listener's resource, the console's client id.
    pub(crate) audience: &'a str,
    /// What the audience is, for messages (`this resource`).
    pub(crate) audience_is: &'a str,
    /// Claims the token must have (`exp`, `iss`, `aud`, ...).
    pub(crate) required: &'a [&'a str],
    /// Clock skew tolerated, in seconds.
    pub(crate) leeway_s: u64,
}

/// Introspection (RFC 7662) of the tokens that are not JWTs: where, as which client, and the
/// answers of active tokens, by the SHA-256 of the token (no token is kept).
struct Introspection {
    endpoint: Url,
    client_id: String,
    client_secret: String,
    cache: Mutex<HashMap<[u8; 32], (Authenticated, Instant)>>,
}

impl std::fmt::Debug for ResourceServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceServer")
            .field("issuer", &self.issuer)
            .field("resource", &self.resource)
            .field("jwks_uri", &self.keys.jwks_uri.as_str())
            .field("algorithms", &self.keys.algorithms)
            .field("principal_claim", &self.principal_claim)
            .finish_non_exhaustive()
    }
}

/// An OAuth client error without the `server` it names (here always the listener's issuer,
/// which the caller's message names).
pub(crate) fn describe(error: OAuthError) -> String {
    match error {
        OAuthError::Refused {
            what, url, rule, ..
        } => {
            format!("refused to use {what} `{url}`: {rule}")
        }
        OAuthError::Request { url, reason, .. } => format!("request to `{url}` failed: {reason}"),
        OAuthError::Metadata {
            what, url, reason, ..
        } => format!("{what} at `{url}`: {reason}"),
        other => other.to_string(),
    }
}

/// The protected-resource metadata URL of `resource` (RFC 9728, section 3.1: the well-known
/// path inserted between the host and the resource's path).
fn metadata_url(resource: &Url) -> Url {
    let mut url = resource.clone();
    let path = resource.path().trim_end_matches('/');
    url.set_path(&format!("{METADATA_PATH}{path}"));
    url.set_query(None);
    url.set_fragment(None);
    url
}

impl ResourceServer {
    /// Checks `config`, finds the issuer's JWKS and fetches it.
    ///
    /// # Errors
    /// [`SetupError`] naming the issuer: a URL the origin rule refuses, metadata that cannot
    /// be read or names another issuer, a JWKS that cannot be fetched or holds no key.
    pub async fn start(config: &ListenOAuthConfig) -> Result<ResourceServer, SetupError> {
        Self::start_with(config, JWKS_REFETCH_INTERVAL).await
    }

    /// [`start`](Self::start) with another shortest time between fetches for unknown key ids
    /// (tests).
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub async fn start_with(
        config: &ListenOAuthConfig,
        refetch_interval: Duration,
    ) -> Result<ResourceServer, SetupError> {
        super::ring_jws::install();
        let fail = |reason: String| SetupError {
            issuer: config.issuer.clone(),
            reason,
        };
        let issuer = Url::parse(&config.issuer)
            .map_err(|_| fail(String::from("the issuer is not a URL")))?;
        let resource = Url::parse(&config.resource).map_err(|_| {
            fail(format!(
                "the resource `{}` is not a URL",
                escape(&config.resource)
            ))
        })?;
        let algorithms = parse_algorithms(&config.algorithms).map_err(fail)?;
        let http = OAuthHttp::new("listen.oauth", issuer.as_str(), config.ca_file.as_ref())
            .map_err(|e| fail(describe(e)))?;
        let needs_metadata = config.jwks_uri.is_none()
            || config
                .introspection
                .as_ref()
                .is_some_and(|introspection| introspection.endpoint.is_none());
        let metadata = match needs_metadata {
            true => Some(
                discover_metadata(&http, &issuer, &config.issuer)
                    .await
                    .map_err(fail)?,
            ),
            false => None,
        };
        let configured_or_discovered =
            |configured: Option<&String>, key: &str, setting: &str| -> Result<Url, SetupError> {
                match (configured, &metadata) {
                    (Some(text), _) => Url::parse(text)
                        .map_err(|_| fail(format!("`{setting}` `{}` is not a URL", escape(text)))),
                    (None, Some(metadata)) => metadata_url_of(metadata, key, setting).map_err(fail),
                    (None, None) => Err(fail(format!("no `{setting}`"))),
                }
            };
        let jwks_uri = configured_or_discovered(
            config.jwks_uri.as_ref(),
            "jwks_uri",
            "listen.oauth.jwks_uri",
        )?;
        http.origins()
            .check("the issuer's JWKS", &jwks_uri)
            .map_err(|e| fail(describe(e)))?;
        let introspection = match &config.introspection {
            None => None,
            Some(introspection) => {
                let endpoint = configured_or_discovered(
                    introspection.endpoint.as_ref(),
                    "introspection_endpoint",
                    "listen.oauth.introspection.endpoint",
                )?;
                http.origins()
                    .check("the issuer's introspection endpoint", &endpoint)
                    .map_err(|e| fail(describe(e)))?;
                Some(Introspection {
                    endpoint,
                    client_id: introspection.client_id.clone(),
                    client_secret: introspection.client_secret.clone(),
                    cache: Mutex::new(HashMap::new()),
                })
            }
        };
        let keys = IssuerKeys::fetch(
            "listen.oauth",
            &config.issuer,
            http.clone(),
            jwks_uri,
            algorithms,
            refetch_interval,
        )
        .await
        .map_err(fail)?;
        let metadata_url = metadata_url(&resource);
        let mut document = Map::new();
        document.insert("resource".into(), json!(config.resource));
        document.insert("authorization_servers".into(), json!([config.issuer]));
        document.insert("bearer_methods_supported".into(), json!(["header"]));
        if !config.scopes_supported.is_empty() {
            document.insert("scopes_supported".into(), json!(config.scopes_supported));
        }
        document.insert("resource_name".into(), json!("toolward"));
        let mut metadata_paths = vec![metadata_url.path().to_owned()];
        if metadata_url.path() != METADATA_PATH {
            metadata_paths.push(METADATA_PATH.to_owned());
        }
        Ok(ResourceServer {
            reserved_principal: None,
            issuer: config.issuer.clone(),
            resource: config.resource.clone(),
            principal_claim: config.principal_claim.clone(),
            attribute_claims: config.attribute_claims.clone(),
            required_scopes: config.required_scopes.clone(),
            leeway_s: config.leeway_ms.div_ceil(1000),
            http,
            metadata: Bytes::from(Value::Object(document).to_string()),
            metadata_url: metadata_url.to_string(),
            metadata_paths,
            keys,
            introspection,
        })
    }

    /// The issuer.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The protected-resource metadata document (JSON).
    pub fn metadata(&self) -> Bytes {
        self.metadata.clone()
    }

    /// Whether `path` is one the metadata is served at.
    pub fn is_metadata_path(&self, path: &str) -> bool {
        self.metadata_paths.iter().any(|known| known == path)
    }

    /// The `WWW-Authenticate` value of a `401` or `403`: the metadata URL, and the error
    /// when a token was refused (its description reduced to printable ASCII without quotes).
    pub fn challenge(&self, refusal: Option<&Refusal>) -> String {
        let mut value = format!("Bearer resource_metadata=\"{}\"", self.metadata_url);
        let (error, description) = match refusal {
            None => return value,
            Some(Refusal::InvalidToken(reason)) => ("invalid_token", reason.clone()),
            Some(Refusal::InsufficientScope { missing, .. }) => {
                value.push_str(&format!(", scope=\"{}\"", self.required_scopes.join(" ")));
                (
                    "insufficient_scope",
                    format!("the token lacks the scopes `{}`", missing.join(" ")),
                )
            }
        };
        let description: String = description
            .chars()
            .map(|c| match c {
                ' ' | '!' | '#'..='[' | ']'..='~' => c,
                _ => '?',
            })
            .collect();
        value.push_str(&format!(
            ", error=\"{error}\", error_description=\"{description}\""
        ));
        value
    }

    /// Refuses every token whose principal is `principal`: the gateway's own (the config's
    /// `principal`), whose grants `toolward call` and stdio use. A user the issuer lets pick
    /// that name would otherwise act upstream under the operator's own grant.
    pub fn reserve_principal(&mut self, principal: &str) {
        self.reserved_principal = Some(principal.to_owned());
    }

    /// Checks `token` (see the module documentation) and says who it is.
    ///
    /// # Errors
    /// [`Refusal`], whose reason never holds the token.
    pub async fn authenticate(&self, token: &str) -> Result<Authenticated, Refusal> {
        let invalid = |reason: String| Refusal::InvalidToken(reason);
        if token.len() > MAX_ACCESS_TOKEN_BYTES {
            return Err(invalid(format!(
                "the token is longer than the limit of {MAX_ACCESS_TOKEN_BYTES} bytes"
            )));
        }
        if let Some(introspection) = &self.introspection
            && !looks_like_jwt(token)
        {
            return self.introspect(introspection, token).await;
        }
        let expected = Expected {
            audience: &self.resource,
            audience_is: "this resource",
            required: &["exp", "iss", "aud"],
            leeway_s: self.leeway_s,
        };
        let claims = self.keys.verify(token, &expected).await.map_err(invalid)?;
        self.authenticated(&claims)
    }

    /// Who the claims of a valid token (a JWT's, or an introspection answer's) name: the
    /// principal, the attributes, and whether it has the required scopes.
    fn authenticated(&self, claims: &Map<String, Value>) -> Result<Authenticated, Refusal> {
        let invalid = |reason: String| Refusal::InvalidToken(reason);
        let principal = match claims.get(&self.principal_claim) {
            Some(Value::String(principal))
                if !principal.is_empty()
                    && principal.chars().count() <= MAX_PRINCIPAL_CHARS
                    && !principal
                        .chars()
                        .any(|c| c.is_control() || crate::text::is_escaped(c)) =>
            {
                principal.clone()
            }
            Some(_) => {
                return Err(invalid(format!(
                    "its `{}` claim (the principal) is not a non-empty string of at most {MAX_PRINCIPAL_CHARS} printable characters (no control, bidirectional, zero-width or other hidden character)",
                    self.principal_claim
                )));
            }
            None => {
                return Err(invalid(format!(
                    "it has no `{}` claim (the principal)",
                    self.principal_claim
                )));
            }
        };
        if self.reserved_principal.as_deref() == Some(principal.as_str()) {
            return Err(invalid(format!(
                "its `{}` claim names the gateway's own principal (the config's `principal`, whose grants stdio and `toolward call` use)",
                self.principal_claim
            )));
        }
        let attributes = self
            .attribute_claims
            .iter()
            .filter_map(|name| {
                let text = claims.get(name)?.to_string();
                let canonical = crate::canonical::canonicalize(text.as_bytes()).unwrap_or(text);
                Some((name.clone(), canonical))
            })
            .collect();
        let missing: Vec<String> = {
            let granted = scopes_of(claims);
            self.required_scopes
                .iter()
                .filter(|scope| !granted.contains(scope))
                .cloned()
                .collect()
        };
        if !missing.is_empty() {
            return Err(Refusal::InsufficientScope { principal, missing });
        }
        Ok(Authenticated {
            principal,
            attributes,
        })
    }

    /// Asks the issuer about an opaque token (RFC 7662), or takes its cached answer: the
    /// token must be `active`, a bearer token when the answer says its `token_type`, of this
    /// issuer when it names one (`iss`), for this resource (`aud`, required), with an `exp`
    /// not past and an `nbf` not future (with the leeway). An active answer is cached until
    /// the token expires, at most [`INTROSPECTION_CACHE_TIME`]; a failed request refuses the
    /// token (fail closed).
    async fn introspect(
        &self,
        introspection: &Introspection,
        token: &str,
    ) -> Result<Authenticated, Refusal> {
        let invalid = |reason: String| Refusal::InvalidToken(reason);
        let key: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        {
            let mut cache = introspection
                .cache
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match cache.get(&key) {
                Some((authenticated, until)) if *until > now => return Ok(authenticated.clone()),
                Some(_) => {
                    cache.remove(&key);
                }
                None => {}
            }
        }
        let what = "the issuer's introspection endpoint";
        let unavailable = |reason: String| {
            tracing::warn!(
                "listen.oauth: issuer `{}`: introspection failed, the token is refused: {reason}",
                self.issuer
            );
            invalid(String::from(
                "the issuer could not be asked about it (introspection failed)",
            ))
        };
        let request = self
            .http
            .post(what, &introspection.endpoint)
            .map_err(|error| unavailable(describe(error)))?
            .basic_auth(
                form_encode(&introspection.client_id),
                Some(form_encode(&introspection.client_secret)),
            )
            .header(reqwest::header::ACCEPT, "application/json")
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(format!(
                "token={}&token_type_hint=access_token",
                form_encode(token)
            ))
            .build()
            .map_err(|error| unavailable(error.without_url().to_string()))?;
        let (status, _, body) = self
            .http
            .send(what, request)
            .await
            .map_err(|error| unavailable(describe(error)))?;
        if status != StatusCode::OK {
            return Err(unavailable(format!(
                "`{}` answered HTTP status {}",
                introspection.endpoint,
                status.as_u16()
            )));
        }
        let Ok(Value::Object(claims)) = serde_json::from_slice::<Value>(&body) else {
            return Err(unavailable(format!(
                "`{}` answered something that is not a JSON object",
                introspection.endpoint
            )));
        };
        if claims.get("active") != Some(&Value::Bool(true)) {
            return Err(invalid(String::from(
                "the issuer says it is not active (expired, revoked or unknown)",
            )));
        }
        match claims.get("token_type") {
            None => {}
            Some(Value::String(kind)) if kind.eq_ignore_ascii_case("bearer") => {}
            Some(_) => {
                return Err(invalid(String::from(
                    "the issuer says it is not a bearer access token (`token_type`)",
                )));
            }
        }
        match claims.get("iss") {
            None => {}
            Some(Value::String(iss)) if *iss == self.issuer => {}
            Some(_) => return Err(invalid(format!("its issuer is not `{}`", self.issuer))),
        }
        let for_us = match claims.get("aud") {
            Some(Value::String(aud)) => *aud == self.resource,
            Some(Value::Array(auds)) => auds
                .iter()
                .any(|aud| aud.as_str() == Some(self.resource.as_str())),
            _ => false,
        };
        if !for_us {
            return Err(invalid(format!(
                "it is not for this resource: its `aud` does not hold `{}`",
                self.resource
            )));
        }
        let wall = crate::oauth::now_secs();
        let Some(exp) = claims.get("exp").and_then(Value::as_u64) else {
            return Err(invalid(String::from(
                "its `exp` claim is missing or of the wrong type",
            )));
        };
        if exp.saturating_add(self.leeway_s) <= wall {
            return Err(invalid(String::from("the token expired")));
        }
        match claims.get("nbf") {
            None => {}
            Some(nbf) => match nbf.as_u64() {
                Some(nbf) if nbf <= wall.saturating_add(self.leeway_s) => {}
                Some(_) => {
                    return Err(invalid(String::from("the token is not valid yet (`nbf`)")));
                }
                None => return Err(invalid(String::from("its `nbf` claim has the wrong type"))),
            },
        }
        let authenticated = self.authenticated(&claims)?;
        let life = Duration::from_secs(exp.saturating_sub(wall)).min(INTROSPECTION_CACHE_TIME);
        let mut cache = introspection
            .cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= MAX_INTROSPECTION_CACHE_ENTRIES {
            cache.retain(|_, (_, until)| *until > now);
            if cache.len() >= MAX_INTROSPECTION_CACHE_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(key, (authenticated.clone(), now + life));
        Ok(authenticated)
    }
}

impl IssuerKeys {
    /// Fetches the JWKS of `issuer` (named by `setting` in messages) at `jwks_uri` with
    /// `http`; tokens are then accepted when signed with one of `algorithms`.
    ///
    /// # Errors
    /// The fetch's failure: a URL the origin rule refuses, an answer that is not a JWK set,
    /// a set with no key or more than [`MAX_JWKS_KEYS`].
    pub(crate) async fn fetch(
        setting: &'static str,
        issuer: &str,
        http: OAuthHttp,
        jwks_uri: Url,
        algorithms: Vec<Algorithm>,
        refetch_interval: Duration,
    ) -> Result<IssuerKeys, String> {
        let keys = fetch_jwks(&http, &jwks_uri).await?;
        let now = Instant::now();
        Ok(IssuerKeys {
            setting,
            issuer: issuer.to_owned(),
            jwks_uri,
            algorithms,
            http,
            keys: Mutex::new(KeySet {
                keys: Arc::new(keys),
                fetched: now,
            }),
            fetching: tokio::sync::Mutex::new(now),
            refetch_interval,
        })
    }

    /// The claims of `token` once it passes: a JWS in compact form whose `alg` is accepted,
    /// signed by a key of the issuer's JWKS that fits the algorithm, `iss` exactly the issuer
    /// (one string), `aud` holding `expected.audience`, `expected.required` claims present,
    /// `exp` and `nbf` checked with the leeway, each claim name given once.
    ///
    /// # Errors
    /// Why the token was refused; the reason never holds the token.
    pub(crate) async fn verify(
        &self,
        token: &str,
        expected: &Expected<'_>,
    ) -> Result<Map<String, Value>, String> {
        let algorithm = self.algorithm_of(token)?;
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| String::from("the token's header is not a JWS header"))?;
        let key = self.key_for(header.kid.as_deref(), algorithm).await?;
        let decoding = DecodingKey::from_jwk(&key).map_err(|_| {
            format!(
                "the issuer's key {} cannot be used",
                key_name(key.common.key_id.as_deref())
            )
        })?;
        let mut validation = Validation::new(algorithm);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[expected.audience]);
        validation.set_required_spec_claims(expected.required);
        validation.validate_nbf = true;
        validation.leeway = expected.leeway_s;
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &decoding, &validation)
            .map_err(|error| self.why(error.kind(), key.common.key_id.as_deref(), expected))?;
        // Verified; now what serde_json let pass: a name given twice (serde_json keeps the
        // last, another reader the first, so two readers would see two identities), and an
        // `iss` that is not one string (RFC 7519; the validation takes an array).
        let payload = token.split('.').nth(1).unwrap_or_default();
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| String::from("the token's payload is not base64url"))?;
        if let Err(error) = serde_json::from_slice::<NoDuplicateNames>(&payload) {
            return Err(format!(
                "its claims are not one JSON object with each name once ({})",
                crate::text::escape(&error.to_string())
            ));
        }
        if !matches!(data.claims.get("iss"), Some(Value::String(_))) {
            return Err(String::from("its `iss` claim is not a string"));
        }
        Ok(data.claims)
    }

    /// The token's `alg`, when it is an accepted one; read before anything else is, so a
    /// refused algorithm is named as such.
    fn algorithm_of(&self, token: &str) -> Result<Algorithm, String> {
        let malformed = || String::from("the token is not a signed JWT");
        let mut parts = token.split('.');
        let (Some(header), Some(_), Some(_), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed());
        };
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(header)
            .map_err(|_| malformed())?;
        let header: Map<String, Value> = serde_json::from_slice(&bytes).map_err(|_| malformed())?;
        let Some(Value::String(name)) = header.get("alg") else {
            return Err(malformed());
        };
        let accepted = name
            .parse::<Algorithm>()
            .ok()
            .filter(|algorithm| self.algorithms.contains(algorithm));
        accepted.ok_or_else(|| {
            format!(
                "its algorithm `{}` is not one of `{}.algorithms` ({})",
                escape(name).chars().take(32).collect::<String>(),
                self.setting,
                self.algorithm_names()
            )
        })
    }

    fn algorithm_names(&self) -> String {
        self.algorithms
            .iter()
            .map(|algorithm| format!("{algorithm:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A refusal's reason for a failed `decode`.
    fn why(
        &self,
        kind: &jsonwebtoken::errors::ErrorKind,
        kid: Option<&str>,
        expected: &Expected<'_>,
    ) -> String {
        use jsonwebtoken::errors::ErrorKind;
        match kind {
            ErrorKind::ExpiredSignature => String::from("the token expired"),
            ErrorKind::ImmatureSignature => String::from("the token is not valid yet (`nbf`)"),
            ErrorKind::InvalidIssuer => format!("its issuer is not `{}`", self.issuer),
            ErrorKind::InvalidAudience => format!(
                "it is not for {}: its `aud` does not hold `{}`",
                expected.audience_is,
                escape(expected.audience)
            ),
            ErrorKind::InvalidSignature => format!(
                "its signature does not verify with the issuer's key {}",
                key_name(kid)
            ),
            // jsonwebtoken reports a required claim of the wrong type as missing.
            ErrorKind::MissingRequiredClaim(claim) => {
                format!(
                    "its `{}` claim is missing or of the wrong type",
                    escape(claim)
                )
            }
            ErrorKind::InvalidClaimFormat(claim) => {
                format!("its `{}` claim has the wrong type", escape(claim))
            }
            ErrorKind::InvalidAlgorithm | ErrorKind::InvalidKeyFormat => format!(
                "its algorithm does not fit the issuer's key {}",
                key_name(kid)
            ),
            _ => String::from("the token is malformed"),
        }
    }

    /// The key of the JWKS that verifies a token with key id `kid` and `algorithm`: fetched
    /// again when the cache is older than [`JWKS_MAX_AGE`], or does not hold `kid` and the
    /// last fetch is older than the refetch interval.
    async fn key_for(&self, kid: Option<&str>, algorithm: Algorithm) -> Result<Jwk, String> {
        let cached = self.cached();
        let fresh = cached.fetched.elapsed() < JWKS_MAX_AGE;
        if fresh && let Some(found) = select(&cached.keys, kid, algorithm) {
            return found;
        }
        let mut last_attempt = self.fetching.lock().await;
        // Another request may have fetched while this one waited.
        let cached = self.cached();
        let fresh = cached.fetched.elapsed() < JWKS_MAX_AGE;
        if fresh && let Some(found) = select(&cached.keys, kid, algorithm) {
            return found;
        }
        // Stale keys and unknown ids alike: at most one fetch per interval, so an issuer that
        // is down is not asked at every request either.
        if last_attempt.elapsed() >= self.refetch_interval {
            *last_attempt = Instant::now();
            match fetch_jwks(&self.http, &self.jwks_uri).await {
                Ok(keys) => {
                    tracing::info!(
                        "{}: fetched the keys of issuer `{}` from `{}` ({} keys)",
                        self.setting,
                        self.issuer,
                        self.jwks_uri,
                        keys.len()
                    );
                    *self.keys.lock().unwrap_or_else(PoisonError::into_inner) = KeySet {
                        keys: Arc::new(keys),
                        fetched: Instant::now(),
                    };
                }
                Err(reason) => tracing::warn!(
                    "{}: issuer `{}`: fetching its keys again failed, the cached ones stay: {reason}",
                    self.setting,
                    self.issuer
                ),
            }
        }
        drop(last_attempt);
        let cached = self.cached();
        select(&cached.keys, kid, algorithm).unwrap_or_else(|| {
            Err(format!(
                "it is signed with a key {} the issuer does not publish",
                key_name(kid)
            ))
        })
    }

    fn cached(&self) -> KeySet {
        self.keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Makes `ring` the verifier of every JWS this process checks (see `ring_jws`): the
/// listener's, and the console's ID tokens.
pub(crate) fn install_verifier() {
    super::ring_jws::install();
}

/// The algorithms named in the config (`listen.oauth.algorithms`, `console.oidc.algorithms`),
/// none of them HMAC (the config refused those; refused here again).
///
/// # Errors
/// A name that is not an accepted algorithm.
pub(crate) fn parse_algorithms(names: &[String]) -> Result<Vec<Algorithm>, String> {
    names
        .iter()
        .map(|name| {
            name.parse::<Algorithm>()
                .ok()
                .filter(|algorithm| algorithm.family() != jsonwebtoken::AlgorithmFamily::Hmac)
                .ok_or_else(|| format!("`{}` is not an accepted algorithm", escape(name)))
        })
        .collect()
}

/// Whether `token` has the shape of a JWS in compact form (three parts, the first a
/// base64url JSON object): such a token is verified with the issuer's keys, any other is
/// introspected.
fn looks_like_jwt(token: &str) -> bool {
    let mut parts = token.split('.');
    let (Some(header), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Map<String, Value>>(&bytes).ok())
        .is_some()
}

/// `text` as `application/x-www-form-urlencoded` writes it (RFC 6749, section 2.3.1, for the
/// client id and secret of HTTP Basic authentication too).
fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(char::from(byte));
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// `kid` as messages name it.
fn key_name(kid: Option<&str>) -> String {
    match kid {
        Some(kid) => format!("`{}`", escape(kid).chars().take(64).collect::<String>()),
        None => String::from("(no key id)"),
    }
}

/// The scopes a token grants: its `scope` claim (RFC 9068: space-separated), or an `scp`
/// claim (a list, or a space-separated string) as some issuers write it.
fn scopes_of(claims: &Map<String, Value>) -> Vec<String> {
    let mut scopes = Vec::new();
    for name in ["scope", "scp"] {
        match claims.get(name) {
            Some(Value::String(text)) => {
                scopes.extend(text.split(' ').filter(|s| !s.is_empty()).map(str::to_owned));
            }
            Some(Value::Array(items)) => {
                scopes.extend(items.iter().filter_map(Value::as_str).map(str::to_owned));
            }
            _ => {}
        }
    }
    scopes
}

/// The key of `keys` for a token with `kid` and `algorithm`: `None` when no key has that
/// id (or, without an id, no key fits); `Some(Err)` when the key named cannot verify that
/// algorithm, or several fit a token without an id.
fn select(keys: &[Jwk], kid: Option<&str>, algorithm: Algorithm) -> Option<Result<Jwk, String>> {
    match kid {
        Some(kid) => {
            let key = keys
                .iter()
                .find(|key| key.common.key_id.as_deref() == Some(kid))?;
            Some(
                fits(key, algorithm)
                    .map(|()| key.clone())
                    .map_err(|reason| format!("the issuer's key {} {reason}", key_name(Some(kid)))),
            )
        }
        None => {
            let fitting: Vec<&Jwk> = keys
                .iter()
                .filter(|key| fits(key, algorithm).is_ok())
                .collect();
            match fitting.as_slice() {
                [] => None,
                [key] => Some(Ok((*key).clone())),
                _ => Some(Err(format!(
                    "it names no key (`kid`) and the issuer publishes {} keys for {algorithm:?}",
                    fitting.len()
                ))),
            }
        }
    }
}

/// Whether `key` can verify `algorithm`: its type and curve, its `use` and its `alg`.
fn fits(key: &Jwk, algorithm: Algorithm) -> Result<(), String> {
    if let Some(key_use) = &key.common.public_key_use
        && *key_use != PublicKeyUse::Signature
    {
        return Err(String::from("is not a signing key (`use`)"));
    }
    if let Some(key_algorithm) = key.common.key_algorithm
        && Algorithm::try_from(key_algorithm).ok() != Some(algorithm)
    {
        return Err(format!("is for `{key_algorithm}`, not `{algorithm:?}`"));
    }
    let fits = match (&key.algorithm, algorithm) {
        (
            AlgorithmParameters::RSA(_),
            Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::PS256
            | Algorithm::PS384
            | Algorithm::PS512,
        ) => true,
        (AlgorithmParameters::EllipticCurve(ec), Algorithm::ES256) => {
            ec.curve == EllipticCurve::P256
        }
        (AlgorithmParameters::EllipticCurve(ec), Algorithm::ES384) => {
            ec.curve == EllipticCurve::P384
        }
        (AlgorithmParameters::OctetKeyPair(okp), Algorithm::EdDSA) => {
            okp.curve == EllipticCurve::Ed25519
        }
        _ => false,
    };
    if fits {
        Ok(())
    } else {
        Err(format!("is not a key for `{algorithm:?}`"))
    }
}

/// GETs `url` and reads its body as JSON, `what` naming it.
async fn get_json(http: &OAuthHttp, what: &str, url: &Url) -> Result<(StatusCode, Value), String> {
    let request = http
        .get(what, url)
        .map_err(describe)?
        .build()
        .map_err(|error| format!("{what} `{url}`: {}", error.without_url()))?;
    let (status, _, body) = http.send(what, request).await.map_err(describe)?;
    if status != StatusCode::OK {
        return Ok((status, Value::Null));
    }
    let value =
        serde_json::from_slice(&body).map_err(|_| format!("{what} at `{url}` is not JSON"))?;
    Ok((status, value))
}

/// The issuer's metadata (RFC 8414, then OpenID Connect discovery), whose `issuer` must be
/// `configured` exactly, and where it was read.
async fn discover_metadata(
    http: &OAuthHttp,
    issuer: &Url,
    configured: &str,
) -> Result<(Url, Value), String> {
    discover_metadata_at(http, server_metadata_urls(issuer), configured)
        .await
        .map_err(|tried| {
            format!(
                "the issuer's metadata was not found at {tried}: set `listen.oauth.jwks_uri` (and `introspection.endpoint`)"
            )
        })?
}

/// The first metadata document of `urls` that is found (HTTP 200), whose `issuer` must be
/// `configured` exactly. `Err` lists the URLs tried when none was found; `Ok(Err)` is a
/// document that cannot be used.
pub(crate) async fn discover_metadata_at(
    http: &OAuthHttp,
    urls: Vec<Url>,
    configured: &str,
) -> Result<Result<(Url, Value), String>, String> {
    let what = "the issuer's metadata";
    let mut tried = Vec::new();
    for url in urls {
        let (status, value) = match get_json(http, what, &url).await {
            Ok(answer) => answer,
            Err(error) => return Ok(Err(error)),
        };
        if status != StatusCode::OK {
            tried.push(format!("`{url}` (HTTP {})", status.as_u16()));
            continue;
        }
        let named = value
            .get("issuer")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if named != configured {
            return Ok(Err(format!(
                "{what} at `{url}` names the issuer `{}`, not the configured one (RFC 8414, section 3.3; OpenID Connect Discovery, section 4.3)",
                escape(named)
            )));
        }
        return Ok(Ok((url, value)));
    }
    Err(tried.join(", "))
}

/// The URL `key` of the metadata read at `url`; `setting` names the config key that gives it
/// instead.
pub(crate) fn metadata_url_of(
    metadata: &(Url, Value),
    key: &str,
    setting: &str,
) -> Result<Url, String> {
    let (url, value) = metadata;
    let Some(text) = value.get(key).and_then(Value::as_str) else {
        return Err(format!(
            "the issuer's metadata at `{url}` has no `{key}`: set `{setting}`"
        ));
    };
    Url::parse(text).map_err(|_| {
        format!(
            "the issuer's metadata at `{url}`: `{key}` `{}` is not a URL",
            escape(text)
        )
    })
}

/// The keys of the JWKS at `url`: at most [`MAX_JWKS_KEYS`], at least one.
async fn fetch_jwks(http: &OAuthHttp, url: &Url) -> Result<Vec<Jwk>, String> {
    let what = "the issuer's JWKS";
    let (status, value) = get_json(http, what, url).await?;
    if status != StatusCode::OK {
        return Err(format!(
            "{what} at `{url}`: HTTP status {}",
            status.as_u16()
        ));
    }
    let set: JwkSet = serde_json::from_value(value)
        .map_err(|error| format!("{what} at `{url}` is not a JWK set ({error})"))?;
    if set.keys.is_empty() {
        return Err(format!("{what} at `{url}` holds no key"));
    }
    if set.keys.len() > MAX_JWKS_KEYS {
        return Err(format!(
            "{what} at `{url}` holds {} keys, more than the limit of {MAX_JWKS_KEYS}",
            set.keys.len()
        ));
    }
    Ok(set.keys)
}

#[cfg(test)]
pub(crate) mod tests;

/// Reads any JSON value and fails at an object that names a member twice (after unescaping:
/// `"gr\u006fups"` is `"groups"`), at any depth.
struct NoDuplicateNames;

impl<'de> serde::Deserialize<'de> for NoDuplicateNames {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NoDuplicateNames)
    }
}

impl<'de> serde::de::Visitor<'de> for NoDuplicateNames {
    type Value = NoDuplicateNames;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<NoDuplicateNames>()?.is_some() {}
        Ok(self)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let mut names = std::collections::HashSet::new();
        while let Some(name) = map.next_key::<String>()? {
            map.next_value::<NoDuplicateNames>()?;
            if !names.insert(name) {
                return Err(serde::de::Error::custom("a name is given twice"));
            }
        }
        Ok(self)
    }
}
