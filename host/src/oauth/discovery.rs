//! Finding out how to sign in to a server: its `401` and `WWW-Authenticate` header, its
//! protected-resource metadata (RFC 9728) and its authorization server's metadata (RFC 8414,
//! OpenID Connect discovery as the fallback), in the order of the MCP specification
//! (2025-11-25, "Authorization", sections "Protected Resource Metadata Discovery" and
//! "Authorization Server Metadata Discovery").

use reqwest::header::{self, HeaderMap};
use reqwest::{StatusCode, Url};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{OAuthError, OAuthHttp};
use crate::text::escape;

/// The protocol version of the probe's `initialize`: the transport's (`crate::transport`
/// sits above this module, so the value is repeated, not imported).
const PROBE_PROTOCOL_VERSION: &str = "2025-11-25";

/// What the server's `WWW-Authenticate: Bearer` challenge says (RFC 6750, section 3; RFC
/// 9728, section 5.1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenge {
    /// `resource_metadata`: where its protected-resource metadata is.
    pub resource_metadata: Option<String>,
    /// `scope`: the scopes the request needed.
    pub scope: Option<String>,
    /// `error` (`invalid_token`, `insufficient_scope`).
    pub error: Option<String>,
}

/// The parameters of the first `Bearer` challenge among `headers`' `WWW-Authenticate`
/// values; `None` when there is none.
pub fn bearer_challenge(headers: &HeaderMap) -> Option<Challenge> {
    headers
        .get_all(header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find_map(parse_bearer)
}

/// The `Bearer` challenge of one `WWW-Authenticate` value (auth-params, quoted or not).
pub fn parse_bearer(value: &str) -> Option<Challenge> {
    let trimmed = value.trim_start();
    let scheme_end = trimmed
        .find(|c: char| c.is_whitespace())
        .unwrap_or(trimmed.len());
    let (scheme, mut rest) = trimmed.split_at(scheme_end);
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut challenge = Challenge::default();
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        let Some(eq) = rest.find('=') else { break };
        let name = rest
            .get(..eq)
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        rest = rest.get(eq + 1..).unwrap_or_default().trim_start();
        let value = if let Some(quoted) = rest.strip_prefix('"') {
            let mut out = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((at, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, next)) = chars.next() {
                            out.push(next);
                        }
                    }
                    '"' => {
                        end = at + 1;
                        break;
                    }
                    other => out.push(other),
                }
            }
            rest = quoted.get(end..).unwrap_or_default();
            out
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            let token = rest.get(..end).unwrap_or_default().trim().to_owned();
            rest = rest.get(end..).unwrap_or_default();
            token
        };
        match name.as_str() {
            "resource_metadata" => challenge.resource_metadata = Some(value),
            "scope" => challenge.scope = Some(value),
            "error" => challenge.error = Some(value),
            _ => {}
        }
    }
    Some(challenge)
}

/// The protected-resource metadata toolward reads (RFC 9728, section 2).
#[derive(Debug, Clone, Deserialize)]
pub struct ResourceMetadata {
    /// The resource identifier: must be the server's URL.
    pub resource: String,
    /// The authorization servers' issuers.
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    /// The scopes it knows.
    #[serde(default)]
    pub scopes_supported: Vec<String>,
}

/// The authorization server metadata toolward reads (RFC 8414, section 2).
#[derive(Debug, Clone, Deserialize)]
pub struct ServerMetadata {
    /// Its issuer: the URL the metadata URL was built from.
    pub issuer: String,
    /// The authorization endpoint (needed for the authorization code).
    pub authorization_endpoint: Option<String>,
    /// The token endpoint.
    pub token_endpoint: String,
    /// The registration endpoint (RFC 7591).
    pub registration_endpoint: Option<String>,
    /// The revocation endpoint (RFC 7009).
    pub revocation_endpoint: Option<String>,
    /// The device authorization endpoint (RFC 8628, section 4): the device grant needs it.
    pub device_authorization_endpoint: Option<String>,
    /// The PKCE methods it supports: `S256` must be one.
    #[serde(default)]
    pub code_challenge_methods_supported: Vec<String>,
    /// The grants it supports (RFC 8414: `authorization_code` and `implicit` when absent).
    #[serde(default)]
    pub grant_types_supported: Vec<String>,
    /// How clients authenticate at the token endpoint (`client_secret_basic` when absent).
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Vec<String>,
    /// Whether its authorization responses carry `iss` (RFC 9207): then a response without
    /// it is refused.
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
    /// Whether it takes a URL as a client id, the client's metadata fetched from it (Client
    /// ID Metadata Documents; MCP specification 2025-11-25, "Client Registration
    /// Approaches"). Only `true` counts.
    #[serde(default, deserialize_with = "only_true")]
    pub client_id_metadata_document_supported: bool,
}

/// `true` only for a JSON `true`: anything else the server wrote (`"true"`, `1`) is `false`,
/// rather than failing the whole metadata document.
fn only_true<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    let value = <serde_json::Value as serde::Deserialize>::deserialize(deserializer)?;
    Ok(value == serde_json::Value::Bool(true))
}

/// Everything sign-in needs about a server.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The server's URL: the `resource` of every request (RFC 8707).
    pub resource: String,
    /// Its protected-resource metadata.
    pub resource_metadata: ResourceMetadata,
    /// Its authorization server's metadata.
    pub server_metadata: ServerMetadata,
    /// The scopes its `401` named.
    pub challenge_scope: Option<String>,
}

/// How the server answered a request without credentials.
#[derive(Debug)]
pub enum Probe {
    /// It asked for sign-in (`401`); its `Bearer` challenge, if it sent one.
    SignIn(Option<Challenge>),
    /// It answered without asking (its HTTP status).
    Open(u16),
}

/// Sends the server an `initialize` without credentials, as the MCP specification starts
/// authorization, and says whether it asked for sign-in.
///
/// # Errors
/// [`OAuthError::Request`], [`OAuthError::Refused`].
pub async fn probe(http: &OAuthHttp, resource: &Url) -> Result<Probe, OAuthError> {
    let initialize = json!({
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": PROBE_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": { "name": "toolward", "version": env!("CARGO_PKG_VERSION") },
        },
    });
    let request = http
        .post("the server's URL", resource)?
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .body(initialize.to_string())
        .build()
        .map_err(|error| request_error(http, resource, &error))?;
    let (status, headers, _) = http.send("the server's URL", request).await?;
    if status == StatusCode::UNAUTHORIZED {
        Ok(Probe::SignIn(bearer_challenge(&headers)))
    } else {
        Ok(Probe::Open(status.as_u16()))
    }
}

fn request_error(http: &OAuthHttp, url: &Url, error: &reqwest::Error) -> OAuthError {
    OAuthError::Request {
        server: http.server().to_owned(),
        url: url.to_string(),
        reason: error.to_string(),
    }
}

/// The protected-resource metadata URLs to try for `resource`, in the specification's
/// order: the challenge's `resource_metadata`, else the well-known URI with the endpoint's
/// path, then at the root.
pub fn resource_metadata_urls(resource: &Url, challenge: Option<&Challenge>) -> Vec<Url> {
    if let Some(url) = challenge
        .and_then(|c| c.resource_metadata.as_deref())
        .and_then(|text| Url::parse(text).ok())
    {
        return vec![url];
    }
    let path = resource.path().trim_end_matches('/');
    let mut urls = Vec::new();
    if !path.is_empty() {
        let mut url = resource.clone();
        url.set_path(&format!("/.well-known/oauth-protected-resource{path}"));
        url.set_query(None);
        url.set_fragment(None);
        urls.push(url);
    }
    let mut root = resource.clone();
    root.set_path("/.well-known/oauth-protected-resource");
    root.set_query(None);
    root.set_fragment(None);
    urls.push(root);
    urls
}

/// The authorization server metadata URLs to try for `issuer`, in the specification's
/// order: with a path, RFC 8414's with the path inserted, OpenID Connect's with it inserted,
/// then appended; without, RFC 8414's then OpenID Connect's.
pub fn server_metadata_urls(issuer: &Url) -> Vec<Url> {
    let path = issuer.path().trim_end_matches('/');
    let at = |path: &str| {
        let mut url = issuer.clone();
        url.set_path(path);
        url.set_query(None);
        url.set_fragment(None);
        url
    };
    if path.is_empty() {
        vec![
            at("/.well-known/oauth-authorization-server"),
            at("/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            at(&format!("/.well-known/oauth-authorization-server{path}")),
            at(&format!("/.well-known/openid-configuration{path}")),
            at(&format!("{path}/.well-known/openid-configuration")),
        ]
    }
}

/// Reads JSON from the first of `urls` that answers `200`; `what` names the document.
async fn fetch_first(
    http: &OAuthHttp,
    what: &str,
    urls: &[Url],
) -> Result<(Url, Value), OAuthError> {
    let mut last = None;
    for url in urls {
        let request = http
            .get(what, url)?
            .build()
            .map_err(|error| request_error(http, url, &error))?;
        let (status, _, body) = http.send(what, request).await?;
        if status != StatusCode::OK {
            last = Some((url.clone(), status.as_u16()));
            continue;
        }
        let value: Value = serde_json::from_slice(&body).map_err(|_| OAuthError::Metadata {
            server: http.server().to_owned(),
            what: what.to_owned(),
            url: url.to_string(),
            reason: String::from("it is not JSON"),
        })?;
        return Ok((url.clone(), value));
    }
    let (url, status) = last.map_or_else(
        || (String::new(), 0),
        |(url, status)| (url.to_string(), status),
    );
    Err(OAuthError::Metadata {
        server: http.server().to_owned(),
        what: what.to_owned(),
        url,
        reason: format!(
            "not found (HTTP status {status}, and at every other place the specification names)"
        ),
    })
}

/// Two URLs are the same identifier when equal, a trailing `/` aside.
fn same_identifier(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// Finds out how to sign in to the server at `resource` after its `401` with `challenge`:
/// its protected-resource metadata, whose `resource` must be the server's URL, then the
/// metadata of its first authorization server, whose `issuer` must be the one named, and
/// which must support PKCE with `S256`. Every URL is checked against the origin rule
/// before it is fetched; every endpoint of the metadata before it is returned.
///
/// # Errors
/// [`OAuthError::Metadata`], [`OAuthError::Refused`], [`OAuthError::Request`].
pub async fn discover(
    http: &OAuthHttp,
    resource: &Url,
    challenge: Option<&Challenge>,
) -> Result<Discovered, OAuthError> {
    let server = http.server().to_owned();
    let what = "protected-resource metadata";
    let (url, value) =
        fetch_first(http, what, &resource_metadata_urls(resource, challenge)).await?;
    let invalid = |what: &str, url: &Url, reason: String| OAuthError::Metadata {
        server: server.clone(),
        what: what.to_owned(),
        url: url.to_string(),
        reason,
    };
    let resource_metadata: ResourceMetadata = serde_json::from_value(value).map_err(|error| {
        invalid(
            what,
            &url,
            format!("not protected-resource metadata ({error})"),
        )
    })?;
    if !same_identifier(&resource_metadata.resource, resource.as_str()) {
        return Err(invalid(
            what,
            &url,
            format!(
                "it is for the resource `{}`, not the server's URL `{resource}` (RFC 9728, section 3.3)",
                escape(&resource_metadata.resource)
            ),
        ));
    }
    let Some(issuer_text) = resource_metadata.authorization_servers.first() else {
        return Err(invalid(
            what,
            &url,
            String::from("it names no `authorization_servers`"),
        ));
    };
    let issuer = Url::parse(issuer_text).map_err(|_| {
        invalid(
            what,
            &url,
            format!("`{}` is not a URL", escape(issuer_text)),
        )
    })?;
    http.origins().check("the authorization server", &issuer)?;

    let what = "authorization server metadata";
    let (url, value) = fetch_first(http, what, &server_metadata_urls(&issuer)).await?;
    let server_metadata: ServerMetadata = serde_json::from_value(value).map_err(|error| {
        invalid(
            what,
            &url,
            format!("not authorization server metadata ({error})"),
        )
    })?;
    if !same_identifier(&server_metadata.issuer, issuer.as_str()) {
        return Err(invalid(
            what,
            &url,
            format!(
                "its `issuer` is `{}`, not `{issuer}` that the metadata URL was built from (RFC 8414, section 3.3)",
                escape(&server_metadata.issuer)
            ),
        ));
    }
    if !server_metadata
        .code_challenge_methods_supported
        .iter()
        .any(|method| method == "S256")
    {
        return Err(invalid(
            what,
            &url,
            String::from(
                "it does not list `S256` in `code_challenge_methods_supported`, so PKCE cannot be used (MCP specification: refuse)",
            ),
        ));
    }
    check_endpoints(http, &server_metadata)?;
    Ok(Discovered {
        resource: resource.to_string(),
        resource_metadata,
        server_metadata,
        challenge_scope: challenge.and_then(|c| c.scope.clone()),
    })
}

/// Checks every endpoint of `metadata` against the origin rule.
///
/// # Errors
/// [`OAuthError::Refused`], [`OAuthError::Metadata`] for an endpoint that is not a URL.
pub fn check_endpoints(http: &OAuthHttp, metadata: &ServerMetadata) -> Result<(), OAuthError> {
    let endpoints = [
        ("the token endpoint", Some(&metadata.token_endpoint)),
        (
            "the authorization endpoint",
            metadata.authorization_endpoint.as_ref(),
        ),
        (
            "the registration endpoint",
            metadata.registration_endpoint.as_ref(),
        ),
        (
            "the revocation endpoint",
            metadata.revocation_endpoint.as_ref(),
        ),
        (
            "the device authorization endpoint",
            metadata.device_authorization_endpoint.as_ref(),
        ),
    ];
    for (what, endpoint) in endpoints {
        let Some(text) = endpoint else { continue };
        let url = Url::parse(text).map_err(|_| OAuthError::Metadata {
            server: http.server().to_owned(),
            what: String::from("authorization server metadata"),
            url: metadata.issuer.clone(),
            reason: format!("{what} `{}` is not a URL", escape(text)),
        })?;
        http.origins().check(what, &url)?;
    }
    Ok(())
}
