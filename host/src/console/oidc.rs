//! Sign-in with an OpenID provider (`console.oidc`): the console as an OpenID Connect relying
//! party (OpenID Connect Core 1.0, the authorization code flow, with PKCE `S256`).
//!
//! - **Discovery** at start: `<issuer>/.well-known/openid-configuration` (OpenID Connect
//!   Discovery 1.0, section 4), whose `issuer` must be the configured one exactly; its
//!   authorization, token and JWKS endpoints pass toolward's origin rule
//!   (`crate::oauth::origin`: `https://` except on loopback, no internal address but the
//!   issuer's own host, no redirects followed, bodies capped); a
//!   `code_challenge_methods_supported` that does not name `S256` is refused. The keys are the
//!   listener's [`IssuerKeys`]: fetched now, fetched again at rotation.
//! - **The browser's binding.** A sign-in is a *flow*, made by the console (random, time,
//!   MAC: nothing is kept here, so nothing can be flooded) and kept by the page's script in
//!   the console origin's `localStorage`, never in a cookie: a browser sends a host's cookies
//!   to every port of it, and lets a page on another port set them, so a cookie could be read
//!   or planted by another program on the machine; storage is kept apart by port. The
//!   flow's `state`, `nonce` and PKCE verifier are the console's MACs of it
//!   ([`Sessions::flow_secret`](super::session::Sessions::flow_secret)). The provider sends
//!   the browser back to [`CALLBACK_PATH`], a page whose script posts the answer's query
//!   with the flow it kept to [`FINISH_PATH`] (a same-origin `POST`, so the guard's checks
//!   of `Origin` apply) and takes the code out of the address bar. An answer brought by a
//!   browser that did not start that sign-in has another `state` and is refused.
//! - **The answer** is read as `toolward auth login` reads its own (a parameter given twice
//!   refused, `state` compared in constant time, `iss` checked against mix-ups when the
//!   provider sends it or says it does, RFC 9207), then the code is exchanged at the token
//!   endpoint with the verifier, as the configured client (HTTP Basic, or the body when the
//!   provider takes only that).
//! - **The ID token** ([`check_id_token`]): signed by a key of the provider's JWKS with an
//!   algorithm of `console.oidc.algorithms`; `iss` the issuer; `aud` holding the client id,
//!   and with several audiences an `azp` that is the client id (an `azp` is always checked);
//!   `exp` not past and `nbf` not future (with [`LEEWAY`]); `iat` present, not in the
//!   future and at most [`MAX_ID_TOKEN_AGE`] old; `nonce` the flow's. The user is its
//!   `user_claim`, the groups its `groups_claim` ([`user_of`]).

use std::time::Duration;

use oauth2::basic::{
    BasicErrorResponse, BasicRevocationErrorResponse, BasicTokenIntrospectionResponse,
    BasicTokenType,
};
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointNotSet,
    EndpointSet, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope, StandardRevocableToken,
    StandardTokenResponse, TokenUrl,
};
use reqwest::Url;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config::ConsoleOidcConfig;
use crate::listen::oauth::{
    Expected, IssuerKeys, JWKS_REFETCH_INTERVAL, describe, discover_metadata_at, metadata_url_of,
    parse_algorithms,
};
use crate::oauth::OAuthHttp;
use crate::oauth::login::{IssuerCheck, Redirect, read_authorization_response};
use crate::text::escape;

use super::session::same;
use super::{MAX_GROUP_CHARS, MAX_GROUPS};

/// Where the sign-in page's provider button posts: the console makes a flow and answers
/// with the authorization request.
pub const START_PATH: &str = "/oidc/start";

/// The redirect URI's path: the provider sends the browser back here.
pub const CALLBACK_PATH: &str = "/oidc/callback";

/// Where the callback page's script posts the provider's answer with the flow it kept.
pub const FINISH_PATH: &str = "/oidc/finish";

/// Clock skew tolerated on an ID token's `exp`, `nbf` and `iat`: 30 s, as
/// `listen.oauth.leeway_ms` by default.
pub const LEEWAY: Duration = Duration::from_secs(30);

/// Oldest an ID token may be when it arrives (its `iat`): 5 minutes. It is issued at the
/// code exchange, a moment before it is checked; an older one is a replay.
pub const MAX_ID_TOKEN_AGE: Duration = Duration::from_secs(300);

/// Longest user name taken from an ID token, in characters: 256, as a listener principal.
pub const MAX_USER_CHARS: usize = crate::listen::oauth::MAX_PRINCIPAL_CHARS;

/// The token response of the code exchange: the `oauth2` crate's, with the `id_token`.
#[derive(Clone, Deserialize, Serialize)]
struct IdTokenField {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id_token: Option<String>,
}

impl std::fmt::Debug for IdTokenField {
    /// The token is left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdTokenField").finish_non_exhaustive()
    }
}

impl oauth2::ExtraTokenFields for IdTokenField {}

type TokenResponse = StandardTokenResponse<IdTokenField, BasicTokenType>;

/// The `oauth2` client of the console: an authorization and a token endpoint.
type Client = oauth2::Client<
    BasicErrorResponse,
    TokenResponse,
    BasicTokenIntrospectionResponse,
    StandardRevocableToken,
    BasicRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointSet,
>;

/// The provider, discovered at start.
pub(super) struct Provider {
    issuer: String,
    client_id: String,
    user_claim: String,
    groups_claim: String,
    scopes: Vec<String>,
    /// Whether the provider's answers carry `iss` (RFC 9207): then one without it is refused.
    iss_required: bool,
    client: Client,
    http: OAuthHttp,
    keys: IssuerKeys,
    /// Users an ID token may not name: the listener's token names (the config's users).
    reserved: Vec<String>,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// Who an ID token signs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SignedIn {
    /// The `user_claim`'s value.
    pub(super) user: String,
    /// The `groups_claim`'s strings that were kept.
    pub(super) groups: Vec<String>,
    /// What of the groups claim was left out, and why (for the log).
    pub(super) left_out: Vec<String>,
}

/// Why a sign-in failed; every message says what failed, and escapes what the provider or
/// the browser wrote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum SignInError {
    /// No flow, or one this console did not make or that expired.
    #[error(
        "this browser has no sign-in in progress here, or it began more than 10 minutes ago (no flow, or an expired one): sign in again"
    )]
    Flow,
    /// The answer's `state` is not the flow's.
    #[error(
        "state mismatch: the provider's answer is not for the sign-in this browser began ({0}); nothing was signed in"
    )]
    State(&'static str),
    /// The provider answered with an `error`, or a mix-up was found.
    #[error("the identity provider did not sign you in: {0}")]
    Provider(String),
    /// The code exchange failed.
    #[error("the provider's token endpoint did not take the code (used already, expired, or not for this sign-in): {0}")]
    Exchange(String),
    /// The ID token is missing or was refused.
    #[error("the ID token was refused: {0}")]
    IdToken(String),
}

impl Provider {
    /// Reads the provider's discovery document and keys.
    ///
    /// # Errors
    /// Why (the issuer is named by the caller): a URL the origin rule refuses, a document
    /// that cannot be read, names another issuer or lacks an endpoint, no `S256`, no keys.
    pub(super) async fn discover(
        config: &ConsoleOidcConfig,
        redirect_uri: &str,
        reserved: Vec<String>,
    ) -> Result<Provider, String> {
        crate::listen::oauth::install_verifier();
        let issuer = Url::parse(&config.issuer).map_err(|_| String::from("it is not a URL"))?;
        let algorithms = parse_algorithms(&config.algorithms)?;
        let http = OAuthHttp::new("console.oidc", issuer.as_str(), config.ca_file.as_ref())
            .map_err(describe)?;
        // OpenID Connect Discovery 1.0, section 4: the well-known path after the issuer's.
        let url = Url::parse(&format!(
            "{}/.well-known/openid-configuration",
            config.issuer.trim_end_matches('/')
        ))
        .map_err(|_| String::from("its discovery URL is not a URL"))?;
        let metadata = discover_metadata_at(&http, vec![url], &config.issuer)
            .await
            .map_err(|tried| format!("its discovery document was not found at {tried}"))??;
        let endpoint = |key: &str| -> Result<Url, String> {
            let url = metadata_url_of(&metadata, key, "console.oidc")?;
            http.origins()
                .check(&format!("the provider's `{key}`"), &url)
                .map_err(describe)?;
            Ok(url)
        };
        let authorization_endpoint = endpoint("authorization_endpoint")?;
        let token_endpoint = endpoint("token_endpoint")?;
        let jwks_uri = endpoint("jwks_uri")?;
        let document = &metadata.1;
        if let Some(methods) = document
            .get("code_challenge_methods_supported")
            .and_then(Value::as_array)
            && !methods.iter().any(|method| method.as_str() == Some("S256"))
        {
            return Err(format!(
                "its discovery document at `{}` says it does not take PKCE `S256` (`code_challenge_methods_supported`)",
                metadata.0
            ));
        }
        let iss_required = document
            .get("authorization_response_iss_parameter_supported")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        // HTTP Basic unless the provider says it takes only the body (OpenID Connect Core
        // 1.0, section 9: `client_secret_basic` is the default).
        let methods: Vec<&str> = document
            .get("token_endpoint_auth_methods_supported")
            .and_then(Value::as_array)
            .map(|methods| methods.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let auth_type = if config.client_secret.is_some()
            && (methods.is_empty() || methods.contains(&"client_secret_basic"))
        {
            AuthType::BasicAuth
        } else {
            AuthType::RequestBody
        };
        let mut client = oauth2::Client::new(ClientId::new(config.client_id.clone()))
            .set_auth_uri(AuthUrl::from_url(authorization_endpoint))
            .set_token_uri(TokenUrl::from_url(token_endpoint))
            .set_auth_type(auth_type)
            .set_redirect_uri(
                RedirectUrl::new(redirect_uri.to_owned())
                    .map_err(|_| format!("the redirect URI `{}` is not a URL", escape(redirect_uri)))?,
            );
        if let Some(source) = &config.client_secret {
            client = client.set_client_secret(ClientSecret::new(source.read()?));
        }
        let keys = IssuerKeys::fetch(
            "console.oidc",
            &config.issuer,
            http.clone(),
            jwks_uri,
            algorithms,
            JWKS_REFETCH_INTERVAL,
        )
        .await?;
        Ok(Provider {
            issuer: config.issuer.clone(),
            client_id: config.client_id.clone(),
            user_claim: config.user_claim.clone(),
            groups_claim: config.groups_claim.clone(),
            scopes: config.scopes.clone(),
            iss_required,
            client,
            http,
            keys,
            reserved,
        })
    }

    /// The issuer, as configured.
    pub(super) fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The authorization request of a flow whose `state`, `nonce` and PKCE verifier are
    /// `state`, `nonce` and `verifier`: `response_type=code`, the client id, the redirect
    /// URI, the scopes, and the challenge `S256` of the verifier.
    pub(super) fn authorization_url(&self, state: &str, nonce: &str, verifier: &str) -> Url {
        let challenge =
            PkceCodeChallenge::from_code_verifier_sha256(&PkceCodeVerifier::new(verifier.to_owned()));
        let state = state.to_owned();
        let (url, _) = self
            .client
            .authorize_url(move || CsrfToken::new(state))
            .add_scopes(self.scopes.iter().cloned().map(Scope::new))
            .add_extra_param("nonce", nonce)
            .set_pkce_challenge(challenge)
            .url();
        url
    }

    /// Ends a flow: reads the provider's answer `query` for the flow whose `state`, `nonce`
    /// and verifier are given, exchanges its code and checks the ID token.
    ///
    /// # Errors
    /// [`SignInError`], saying what failed.
    pub(super) async fn finish(
        &self,
        query: &str,
        state: &str,
        nonce: &str,
        verifier: &str,
    ) -> Result<SignedIn, SignInError> {
        let issuer = IssuerCheck {
            issuer: &self.issuer,
            required: self.iss_required,
        };
        let code = match read_authorization_response(query, state, &issuer) {
            Redirect::Code(code) => code,
            Redirect::Error(text) => return Err(SignInError::Provider(text)),
            Redirect::Ignored(why) if why.contains("state") => {
                return Err(SignInError::State(why));
            }
            Redirect::Ignored(why) => {
                return Err(SignInError::Provider(format!("its answer has {why}")));
            }
        };
        let token = self
            .client
            .exchange_code(AuthorizationCode::new(code))
            .set_pkce_verifier(PkceCodeVerifier::new(verifier.to_owned()))
            .request_async(&self.http)
            .await
            .map_err(|error| {
                let failed =
                    crate::oauth::login::grant_error("console.oidc", "authorization code", error);
                SignInError::Exchange(match failed {
                    crate::oauth::OAuthError::Grant { reason, .. } => reason,
                    other => other.to_string(),
                })
            })?;
        let Some(id_token) = token.extra_fields().id_token.as_deref() else {
            return Err(SignInError::IdToken(String::from(
                "the token endpoint answered without one (is `openid` among the scopes the client may ask for?)",
            )));
        };
        let claims = check_id_token(&self.keys, id_token, &self.client_id, nonce)
            .await
            .map_err(SignInError::IdToken)?;
        user_of(&claims, &self.user_claim, &self.groups_claim, &self.reserved)
            .map_err(SignInError::IdToken)
    }
}

/// The claims of ID token `token` for client `client_id` and the flow's `nonce`, once it
/// passes every check of the module's list.
///
/// # Errors
/// What failed; never the token.
pub(super) async fn check_id_token(
    keys: &IssuerKeys,
    token: &str,
    client_id: &str,
    nonce: &str,
) -> Result<Map<String, Value>, String> {
    let leeway_s = LEEWAY.as_secs();
    let expected = Expected {
        audience: client_id,
        audience_is: "this console's client id",
        required: &["exp", "iss", "aud", "sub"],
        leeway_s,
    };
    let claims = keys.verify(token, &expected).await?;
    // OpenID Connect Core 1.0, section 3.1.3.7, items 3 to 5: with several audiences the
    // token must say it was issued to this client (`azp`); an `azp` must be this client.
    let audiences = match claims.get("aud") {
        Some(Value::Array(items)) => items.len(),
        _ => 1,
    };
    match claims.get("azp") {
        Some(Value::String(azp)) if azp == client_id => {}
        Some(Value::String(azp)) => {
            return Err(format!(
                "it was issued to another client (`azp` is `{}`, not `{}`)",
                escape(azp),
                escape(client_id)
            ));
        }
        Some(_) => return Err(String::from("its `azp` claim is not a string")),
        None if audiences > 1 => {
            return Err(String::from(
                "it has several audiences and no `azp` saying it was issued to this console",
            ));
        }
        None => {}
    }
    let now = crate::oauth::now_secs();
    let Some(iat) = claims.get("iat").and_then(Value::as_u64) else {
        return Err(String::from("its `iat` claim is missing or not a number of seconds"));
    };
    if iat > now.saturating_add(leeway_s) {
        return Err(String::from("it was issued in the future (`iat`)"));
    }
    if now.saturating_sub(iat) > MAX_ID_TOKEN_AGE.as_secs().saturating_add(leeway_s) {
        return Err(format!(
            "it was issued {} s ago (`iat`), longer than the limit of {} s: a replayed token",
            now.saturating_sub(iat),
            MAX_ID_TOKEN_AGE.as_secs()
        ));
    }
    match claims.get("nonce") {
        Some(Value::String(given)) if same(given.as_bytes(), nonce.as_bytes()) => {}
        Some(_) => {
            return Err(String::from(
                "its `nonce` is not the one of the sign-in this browser began (a token of another sign-in)",
            ));
        }
        None => return Err(String::from("it has no `nonce`")),
    }
    Ok(claims)
}

/// The user and groups of the checked claims `claims`.
///
/// The user is `user_claim`: a non-empty string of at most [`MAX_USER_CHARS`] characters
/// without control or hidden characters, that is none of `reserved` (a name of
/// `listen.tokens`: a provider's user cannot take a token's name). When the user claim is
/// `email`, an `email_verified` that is not `true` refuses it.
///
/// The groups are `groups_claim`: an array of strings (or one string); non-strings, empty
/// strings, strings past [`MAX_GROUP_CHARS`] characters or with hidden characters, and
/// entries past [`MAX_GROUPS`] are left out, and said in `left_out`. Groups only ever let
/// a user do more (approvers are named by group), so one left out takes a right away and
/// never gives one.
///
/// # Errors
/// Why the user cannot be taken.
pub(super) fn user_of(
    claims: &Map<String, Value>,
    user_claim: &str,
    groups_claim: &str,
    reserved: &[String],
) -> Result<SignedIn, String> {
    let user = match claims.get(user_claim) {
        Some(Value::String(user)) if printable(user, MAX_USER_CHARS) => user.clone(),
        Some(_) => {
            return Err(format!(
                "its `{}` claim (the user) is not a non-empty string of at most {MAX_USER_CHARS} printable characters (no control, bidirectional, zero-width or other hidden character)",
                escape(user_claim)
            ));
        }
        None => {
            return Err(format!(
                "it has no `{}` claim (the user; is its scope among `console.oidc.scopes`?)",
                escape(user_claim)
            ));
        }
    };
    if user_claim == "email"
        && let Some(verified) = claims.get("email_verified")
        && verified != &Value::Bool(true)
    {
        return Err(String::from(
            "its `email` is not verified (`email_verified` is not true): an unverified address could be anyone's",
        ));
    }
    if reserved.contains(&user) {
        return Err(format!(
            "its user `{}` is the name of a token of `listen.tokens`: a provider's user cannot sign in as a token's user (choose a `console.oidc.user_claim` that cannot collide, or rename the token)",
            escape(&user)
        ));
    }
    let mut groups = Vec::new();
    let mut left_out = Vec::new();
    let given: Vec<&Value> = match claims.get(groups_claim) {
        None => Vec::new(),
        Some(Value::Array(items)) => items.iter().collect(),
        Some(one @ Value::String(_)) => vec![one],
        Some(_) => {
            left_out.push(format!(
                "the `{}` claim is not an array of strings",
                escape(groups_claim)
            ));
            Vec::new()
        }
    };
    for (index, value) in given.into_iter().enumerate() {
        match value {
            Value::String(group) if !printable(group, MAX_GROUP_CHARS) => left_out.push(format!(
                "group {index}: not a non-empty string of at most {MAX_GROUP_CHARS} printable characters"
            )),
            Value::String(group) if groups.len() >= MAX_GROUPS => left_out.push(format!(
                "group {index} `{}`: past the limit of {MAX_GROUPS} groups",
                escape(group)
            )),
            Value::String(group) => {
                if !groups.contains(group) {
                    groups.push(group.clone());
                }
            }
            _ => left_out.push(format!("group {index}: not a string")),
        }
    }
    Ok(SignedIn {
        user,
        groups,
        left_out,
    })
}

/// Whether `text` is non-empty, at most `max` characters, and shows as written (no control
/// or hidden character, `crate::text::is_escaped`).
fn printable(text: &str, max: usize) -> bool {
    !text.is_empty()
        && text.chars().count() <= max
        && !text
            .chars()
            .any(|c| c.is_control() || crate::text::is_escaped(c))
        // No space at either end, and no space but the ASCII one: `eve\u{00A0}` or `eve ` shows
        // as `eve` in the audit (an outside attack signed in so beside the token user `eve`).
        && !text.starts_with(char::is_whitespace)
        && !text.ends_with(char::is_whitespace)
        && !text.chars().any(|c| c.is_whitespace() && c != ' ')
        // Nor a combining mark, which draws over the letter before it (`eve\u{0332}`).
        && !text.chars().any(is_combining)
}

/// Whether `c` is a combining mark of the blocks a name would carry one from: it draws over
/// the character before it, so a name with one shows as another.
fn is_combining(c: char) -> bool {
    matches!(c,
        '\u{0300}'..='\u{036F}' | '\u{1AB0}'..='\u{1AFF}' | '\u{1DC0}'..='\u{1DFF}'
        | '\u{20D0}'..='\u{20FF}' | '\u{FE20}'..='\u{FE2F}')
}

#[cfg(test)]
mod tests;
