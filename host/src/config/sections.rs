//! The settings of each section of the config: telemetry, confinement, servers, listen, rules, policy, store, audit and limits.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::audit::AuditSync;

use super::oci_reference::OciReference;

use super::{
    DEFAULT_APPROVAL_TIMEOUT_MS, DEFAULT_CALL_TIMEOUT_MS, DEFAULT_HEADER_READ_TIMEOUT_MS,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_LISTING_BYTES, DEFAULT_MAX_LISTING_PAGES,
    DEFAULT_MAX_PAGE_BYTES, DEFAULT_MAX_RESULT_BYTES, DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
    DEFAULT_MAX_TOOL_BYTES, DEFAULT_MAX_TOOLS, DEFAULT_REQUEST_TIMEOUT_MS,
    DEFAULT_RESTART_ATTEMPTS, DEFAULT_RESTART_BACKOFF_MS, DEFAULT_SESSION_IDLE_TIMEOUT_MS,
    DEFAULT_START_TIMEOUT_MS,
};

/// The default `telemetry.service_name`: the OpenTelemetry resource's `service.name`.
pub const DEFAULT_TELEMETRY_SERVICE_NAME: &str = "toolward";

/// The default `telemetry.export_interval_ms`: how often spans and metrics are sent, in
/// milliseconds. A stdio gateway is killed by its client, never exits cleanly, so what it
/// collected is only ever sent on this timer: at most this much is lost when it is killed.
pub const DEFAULT_TELEMETRY_EXPORT_INTERVAL_MS: u64 = 5_000;

/// The top-level `telemetry`: OpenTelemetry traces and metrics over OTLP/HTTP (protobuf),
/// see `crate::telemetry`.
#[derive(Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// The collector's base URL (`telemetry.endpoint`, `http://` or `https://`, e.g.
    /// `http://127.0.0.1:4318`): spans go to `<endpoint>/v1/traces`, metrics to
    /// `<endpoint>/v1/metrics` (the OTLP/HTTP paths).
    pub endpoint: String,
    /// The resource's `service.name` (`telemetry.service_name`, default
    /// `DEFAULT_TELEMETRY_SERVICE_NAME`).
    pub service_name: String,
    /// How often spans and metrics are exported, in milliseconds
    /// (`telemetry.export_interval_ms`, default `DEFAULT_TELEMETRY_EXPORT_INTERVAL_MS`).
    pub export_interval_ms: u64,
    /// Headers sent with every export (`telemetry.headers`, `${NAME}` expanded), e.g. a
    /// collector's API key.
    pub headers: BTreeMap<String, String>,
}

impl fmt::Debug for TelemetryConfig {
    /// Header values are left out: they usually hold a key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryConfig")
            .field("endpoint", &self.endpoint)
            .field("service_name", &self.service_name)
            .field("export_interval_ms", &self.export_interval_ms)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The top-level `confine`: what every confined stdio server is denied besides the defaults
/// of `crate::confine` (the state folder, the config, rules, manifest and audit log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfineConfig {
    /// Paths every server is denied (`confine.deny`; a leading `~/` is toolward's `HOME`,
    /// other relative paths resolve against the config folder). Empty by default; `~/.ssh`
    /// and `~/.aws` are the documented suggestion.
    pub deny: Vec<PathBuf>,
    /// Whether servers are denied TCP (`confine.deny_tcp`, default `false`); a server's own
    /// `confine.deny_tcp` wins.
    pub deny_tcp: bool,
    /// Whether servers get a network namespace of their own, with no network at all
    /// (`confine.deny_network`, default `false`); a server's own `confine.deny_network` wins.
    /// Needs [`ConfineConfig::namespaces`]; without them, TCP is denied by Landlock instead.
    pub deny_network: bool,
    /// Whether confined servers run in user, mount and PID namespaces as well as under
    /// Landlock (`confine.namespaces`, default `true`): each withheld path covered by an empty
    /// read-only mount, the other servers' processes out of sight (`crate::confine`).
    /// `false` leaves Landlock alone, as where the namespaces are unavailable.
    pub namespaces: bool,
    /// The `toolward` binary that starts confined servers (`confine.launcher`). `None`: the
    /// running program when it is `toolward`, else the `TOOLWARD_BIN` variable (embedders,
    /// tests); with neither, servers start unconfined and the load report says so.
    pub launcher: Option<PathBuf>,
}

impl Default for ConfineConfig {
    /// Nothing denied beside the defaults, TCP and the network allowed, namespaces on, the
    /// launcher found as `crate::confine::launcher` says.
    fn default() -> Self {
        ConfineConfig {
            deny: Vec::new(),
            deny_tcp: false,
            deny_network: false,
            namespaces: true,
            launcher: None,
        }
    }
}

/// How one stdio server is confined (its `confine`, over the top-level one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerConfine {
    /// Confined with Landlock: the defaults of `crate::confine`, plus these paths.
    Confined {
        /// The top-level `confine.deny` followed by the server's own.
        deny: Vec<PathBuf>,
        /// The server's `confine.deny_tcp`, else the top-level one.
        deny_tcp: bool,
        /// The server's `confine.deny_network`, else the top-level one.
        deny_network: bool,
        /// The server's `confine.devices`: device nodes under `/dev` it may open beside the
        /// standard ones every server gets (`crate::confine::STANDARD_DEVICES`), for a server
        /// that drives hardware (`/dev/ttyUSB0`). Empty by default.
        devices: Vec<PathBuf>,
    },
    /// Started as the operator, unconfined (`confine.unconfined`, a stated reason).
    Unconfined {
        /// Why, as the operator wrote it: shown in the load report.
        reason: String,
    },
}

impl Default for ServerConfine {
    fn default() -> Self {
        ServerConfine::Confined {
            deny: Vec::new(),
            deny_tcp: false,
            deny_network: false,
            devices: Vec::new(),
        }
    }
}

/// One server of `mcpServers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The server's name: the key in `mcpServers`, `[A-Za-z0-9_-]+`, without the separator.
    pub name: String,
    /// How to reach it.
    pub transport: ServerTransport,
    /// Variables of toolward's environment passed to a stdio server beside `PATH`, `HOME`
    /// and `TMPDIR` (`pass_env`); one that is not set is not passed.
    pub pass_env: Vec<String>,
    /// The top-level limits with this server's `limits` laid over them.
    pub limits: Limits,
    /// How a stdio server is confined (`confine`); unused for an HTTP server.
    pub confine: ServerConfine,
}

/// How toolward reaches a server. Its debug output leaves out the values of `env` and
/// `headers`: they are often credentials.
#[derive(Clone, PartialEq, Eq)]
pub enum ServerTransport {
    /// A child process speaking MCP over stdin/stdout.
    Stdio {
        /// The program: a bare name looked up in `PATH`, or a path.
        command: PathBuf,
        /// Its arguments, as written.
        args: Vec<String>,
        /// Variables set for it, `${NAME}` references replaced.
        env: BTreeMap<String, String>,
    },
    /// A streamable HTTP endpoint.
    Http {
        /// The endpoint, `http://` or `https://`.
        url: String,
        /// Headers sent with every request, `${NAME}` references replaced.
        headers: BTreeMap<String, String>,
        /// How toolward signs in to it when it asks (`oauth`; the defaults when absent).
        oauth: OAuthConfig,
    },
    /// An rmcp client-role transport the embedder handed in (`ToolwardBuilder::server_transport`,
    /// the `gateway` feature): a server in the embedder's own process, or reached however the
    /// embedder reaches it. toolward starts nothing, so it cannot confine it, and cannot
    /// restart it: the transport is connected once.
    Handed(HandedTransport),
}

/// What a handed-in transport is given to carry: toolward's JSON-RPC messages to the server,
/// one per item, and back the server's, or at the end why the transport ended.
#[derive(Debug)]
pub(crate) struct HandedLines {
    /// toolward's messages to the server, each one JSON-RPC message as bytes; closed when
    /// toolward closes the server.
    pub(crate) to_server: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
    /// The server's messages, each one JSON-RPC message as bytes, then `Err` with why the
    /// transport ended.
    pub(crate) from_server: tokio::sync::mpsc::UnboundedSender<Result<Vec<u8>, String>>,
}

/// Runs a handed-in transport over [`HandedLines`] until either side ends.
pub(crate) type HandedPump = Box<
    dyn FnOnce(HandedLines) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send,
>;

/// A transport an embedder handed in, used by the first connection only: clones share it,
/// and once a pin, a load or anything else has connected through it, connecting again fails
/// naming the server. Equal only to its clones.
#[derive(Clone)]
pub struct HandedTransport {
    pump: std::sync::Arc<std::sync::Mutex<Option<HandedPump>>>,
}

impl HandedTransport {
    /// A transport carried by `pump`.
    pub(crate) fn new(pump: HandedPump) -> HandedTransport {
        HandedTransport {
            pump: std::sync::Arc::new(std::sync::Mutex::new(Some(pump))),
        }
    }

    /// The transport, the first time; `None` once it was taken.
    pub(crate) fn take(&self) -> Option<HandedPump> {
        self.pump
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// Whether a connection has used it already.
    pub fn is_used(&self) -> bool {
        self.pump
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_none()
    }
}

impl PartialEq for HandedTransport {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.pump, &other.pump)
    }
}

impl Eq for HandedTransport {}

impl fmt::Debug for HandedTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandedTransport")
            .field("used", &self.is_used())
            .finish()
    }
}

/// The grant toolward asks an HTTP server's authorization server for (`oauth.grant`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OAuthGrant {
    /// `authorization_code` (the default): a person signs in through a browser at
    /// `toolward auth login`, with PKCE and a loopback redirect.
    #[default]
    AuthorizationCode,
    /// `client_credentials`: toolward signs in as itself with the configured `client_id` and
    /// `client_secret`, at `auth login` and again whenever the token expires; for gateways
    /// with no person at hand.
    ClientCredentials,
    /// `device`: the device authorization grant (RFC 8628) for a gateway without a browser:
    /// `toolward auth login` shows a URL and a code to enter on any device, and waits. Needs
    /// the authorization server's `device_authorization_endpoint`.
    Device,
}

/// `oauth` of an HTTP server: how toolward signs in to a server that answers `401` (the MCP
/// specification's authorization, OAuth 2.1). Every field is optional: by default toolward
/// registers itself with the authorization server (dynamic client registration, RFC 7591)
/// and asks for the scopes the server names. Its debug output leaves out the secret.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct OAuthConfig {
    /// A client id issued to toolward by the authorization server (`oauth.client_id`); `None`
    /// registers one at each sign-in.
    pub client_id: Option<String>,
    /// Its secret (`oauth.client_secret`, `${NAME}` expanded); `None` for a public client.
    pub client_secret: Option<String>,
    /// The `https://` URL of a Client ID Metadata Document the operator hosts
    /// (`oauth.client_id_metadata_url`; MCP specification 2025-11-25): without `client_id`,
    /// used as the client id where the authorization server says it takes such documents
    /// (`client_id_metadata_document_supported`), instead of registering. `None`: register.
    pub client_id_metadata_url: Option<String>,
    /// The scopes to ask for (`oauth.scopes`); empty: those of the server's `401`, else its
    /// protected-resource metadata's `scopes_supported`.
    pub scopes: Vec<String>,
    /// The grant (`oauth.grant`: `authorization_code`, the default, `client_credentials` or
    /// `device`).
    pub grant: OAuthGrant,
    /// The loopback port the browser is sent back to (`oauth.redirect_port`, `0`, the
    /// default, picks a free one): for a client id registered with a fixed redirect URI.
    pub redirect_port: u16,
    /// Whether each principal's calls go out under that principal's own grant
    /// (`oauth.per_principal`, default `false`). `false`: every call uses the operator's
    /// grant (`toolward auth login SERVER`), one shared identity upstream. `true`: a call
    /// uses the grant of its principal (`toolward auth login SERVER --principal P`) in an
    /// upstream session of that principal's own, opened at its first call; a principal
    /// without a grant gets a tool error naming that command. Pinning and loading always use
    /// the operator's grant.
    pub per_principal: bool,
    /// Roots trusted beside the built-in ones (`oauth.ca_file`, a PEM file, relative to the
    /// config's folder), for the server's MCP requests and for every request of its sign-in
    /// and renewals: for a server or an authorization server behind a private CA. `None`:
    /// the built-in roots only.
    pub ca_file: Option<CaBundle>,
}

/// A PEM file of certificates trusted as roots beside the built-in ones (`oauth.ca_file`,
/// `listen.oauth.ca_file`), read and checked when the config is read: a file that cannot be
/// read, holds no certificate or a certificate that is not one is a config error.
#[derive(Clone, PartialEq, Eq)]
pub struct CaBundle {
    /// The file, resolved against the config's folder.
    pub file: PathBuf,
    /// Its certificates, DER, in the file's order.
    pub certificates: Vec<Vec<u8>>,
}

impl fmt::Debug for CaBundle {
    /// The file and how many certificates, not their bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaBundle")
            .field("file", &self.file)
            .field("certificates", &self.certificates.len())
            .finish()
    }
}

impl fmt::Debug for OAuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthConfig")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| ".."))
            .field("client_id_metadata_url", &self.client_id_metadata_url)
            .field("scopes", &self.scopes)
            .field("grant", &self.grant)
            .field("redirect_port", &self.redirect_port)
            .field("per_principal", &self.per_principal)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

impl fmt::Debug for ServerTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerTransport::Stdio { command, args, env } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &env.keys().collect::<Vec<_>>())
                .finish(),
            ServerTransport::Http {
                url,
                headers,
                oauth,
            } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .field("oauth", oauth)
                .finish(),
            ServerTransport::Handed(handed) => f.debug_tuple("Handed").field(handed).finish(),
        }
    }
}

/// `listen`: who may use the gateway over streamable HTTP (`toolward serve --listen`), and
/// the bounds that keep it serving under abuse. Defaults: no tokens, no origins, and the
/// `DEFAULT_` constants of this module for the rest.
#[derive(Clone, PartialEq, Eq)]
pub struct ListenConfig {
    /// Bearer tokens by name (`listen.tokens`, `${NAME}` expanded); a call made with one has
    /// the token's name as its principal. Empty: `serve --listen` generates one token into
    /// the state folder at first start, named after
    /// [`Config::principal`](super::Config::principal).
    pub tokens: BTreeMap<String, String>,
    /// Browser origins allowed to call (`listen.allowed_origins`, `scheme://host:port`); a
    /// request whose `Origin` is another answers 403 (MCP specification, "Transports",
    /// security warning: DNS rebinding). A request without `Origin` (not from a browser)
    /// passes this check.
    pub allowed_origins: Vec<String>,
    /// Time a client has to send a request's head, in milliseconds
    /// (`listen.header_read_timeout_ms`, `DEFAULT_HEADER_READ_TIMEOUT_MS`); past it the
    /// connection is closed.
    pub header_read_timeout_ms: u64,
    /// Open connections at once (`listen.max_connections`, `DEFAULT_MAX_CONNECTIONS`);
    /// past it, new connections wait to be accepted.
    pub max_connections: u64,
    /// Live sessions of one principal (`listen.max_sessions_per_principal`,
    /// `DEFAULT_MAX_SESSIONS_PER_PRINCIPAL`); past it, `initialize` gets 429.
    pub max_sessions_per_principal: u64,
    /// Time without a message after which a session is closed, in milliseconds
    /// (`listen.session_idle_timeout_ms`, `DEFAULT_SESSION_IDLE_TIMEOUT_MS`).
    pub session_idle_timeout_ms: u64,
    /// The listener as an OAuth 2.1 resource server (`listen.oauth`); `None`: only the named
    /// tokens.
    pub oauth: Option<ListenOAuthConfig>,
}

impl Default for ListenConfig {
    fn default() -> Self {
        Self {
            tokens: BTreeMap::new(),
            allowed_origins: Vec::new(),
            header_read_timeout_ms: DEFAULT_HEADER_READ_TIMEOUT_MS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_sessions_per_principal: DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
            session_idle_timeout_ms: DEFAULT_SESSION_IDLE_TIMEOUT_MS,
            oauth: None,
        }
    }
}

impl std::fmt::Debug for ListenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Token values are secrets: only their names are shown.
        f.debug_struct("ListenConfig")
            .field("tokens", &self.tokens.keys().collect::<Vec<_>>())
            .field("allowed_origins", &self.allowed_origins)
            .field("header_read_timeout_ms", &self.header_read_timeout_ms)
            .field("max_connections", &self.max_connections)
            .field(
                "max_sessions_per_principal",
                &self.max_sessions_per_principal,
            )
            .field("session_idle_timeout_ms", &self.session_idle_timeout_ms)
            .field("oauth", &self.oauth)
            .finish()
    }
}

/// `listen.oauth`: `serve --listen` as an OAuth 2.1 resource server (MCP specification
/// 2025-11-25, "Authorization"; `docs/oauth.md`, "The listener"). A bearer token that is
/// not one of `listen.tokens` must be a JWT access token of `issuer` for `resource`; its
/// `principal_claim` is the principal, its `attribute_claims` the principal's attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenOAuthConfig {
    /// The authorization server's issuer identifier (`listen.oauth.issuer`): a token's `iss`
    /// must be exactly this string. `https://`, or `http://` on a loopback host.
    pub issuer: String,
    /// This listener's resource identifier (`listen.oauth.resource`): the public URL of its
    /// MCP endpoint as clients reach it (`https://mcp.example.com/mcp`). The `resource` of its
    /// protected-resource metadata (RFC 9728); a token's `aud` must contain it (RFC 8707).
    pub resource: String,
    /// Where the issuer's keys are (`listen.oauth.jwks_uri`); `None`: the `jwks_uri` of the
    /// issuer's metadata (RFC 8414, then OpenID Connect discovery).
    pub jwks_uri: Option<String>,
    /// The signature algorithms accepted, by their JOSE names (`listen.oauth.algorithms`,
    /// default `DEFAULT_OAUTH_ALGORITHMS`: `RS256`, `ES256`): among `RS256`, `RS384`,
    /// `RS512`, `PS256`, `PS384`, `PS512`, `ES256`, `ES384`, `EdDSA`. Never `none`, never
    /// `HS*` (a shared secret, not the issuer's public key).
    pub algorithms: Vec<String>,
    /// The claim naming the principal (`listen.oauth.principal_claim`, default `sub`): a
    /// non-empty string without control characters.
    pub principal_claim: String,
    /// Claims handed to the policy as the principal's attributes, by name
    /// (`listen.oauth.attribute_claims`: `["groups", "scope"]`); a claim the token lacks is
    /// left out.
    pub attribute_claims: Vec<String>,
    /// `scopes_supported` of the protected-resource metadata (`listen.oauth.scopes_supported`).
    pub scopes_supported: Vec<String>,
    /// Scopes every token must carry (`listen.oauth.required_scopes`, in its `scope` claim);
    /// a token without one is answered 403 `insufficient_scope`.
    pub required_scopes: Vec<String>,
    /// Clock skew tolerated on `exp` and `nbf`, in milliseconds (`listen.oauth.leeway_ms`,
    /// default `DEFAULT_OAUTH_LEEWAY_MS`, 30 000); counted in whole seconds, rounded up, as
    /// the claims are.
    pub leeway_ms: u64,
    /// Roots trusted beside the built-in ones for the requests to the issuer (metadata,
    /// keys, introspection) (`listen.oauth.ca_file`, a PEM file); `None`: the built-in roots
    /// only.
    pub ca_file: Option<CaBundle>,
    /// Token introspection (RFC 7662) for opaque tokens (`listen.oauth.introspection`);
    /// `None`: only JWT access tokens pass.
    pub introspection: Option<IntrospectionConfig>,
}

/// `listen.oauth.introspection`: how the listener asks the issuer about a token that is not a
/// JWT (RFC 7662). Its debug output leaves out the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct IntrospectionConfig {
    /// The introspection endpoint (`endpoint`); `None`: the `introspection_endpoint` of the
    /// issuer's metadata.
    pub endpoint: Option<String>,
    /// The client the listener authenticates as (`client_id`).
    pub client_id: String,
    /// Its secret (`client_secret`): only ever one `${NAME}` reference in the file, expanded.
    pub client_secret: String,
}

impl fmt::Debug for IntrospectionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntrospectionConfig")
            .field("endpoint", &self.endpoint)
            .field("client_id", &self.client_id)
            .field("client_secret", &"..")
            .finish()
    }
}

/// The top-level `console`: what `toolward console` reads from the config beside its flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsoleConfig {
    /// Sign-in with an OpenID provider (`console.oidc`); `None`: only the listener's named
    /// tokens sign in.
    pub oidc: Option<ConsoleOidcConfig>,
}

/// `console.oidc`: the console as an OpenID Connect relying party (authorization code with
/// PKCE, the ID token verified; `docs/console.md`, "Signing in and who answers"). A user
/// signed in this way is the ID token's `user_claim`, with the groups of its `groups_claim`.
/// Its debug output leaves out the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ConsoleOidcConfig {
    /// The provider's issuer identifier (`console.oidc.issuer`): its discovery document is
    /// read at `<issuer>/.well-known/openid-configuration` and must name exactly this
    /// issuer, as must every ID token's `iss`. `https://`, or `http://` on a loopback host.
    pub issuer: String,
    /// The client id the provider issued to the console (`console.oidc.client_id`); every
    /// ID token's `aud` must hold it.
    pub client_id: String,
    /// Where its secret is (`console.oidc.client_secret`, one `${NAME}` reference, or
    /// `console.oidc.client_secret_file`); `None`: a public client, PKCE alone. Read when
    /// the console starts, not with the config: the gateways (`serve`, started by MCP clients
    /// with an environment of their own) read this config too and never need it.
    pub client_secret: Option<SecretSource>,
    /// The claim naming the user (`console.oidc.user_claim`, default `sub`; `email`,
    /// `preferred_username`): a non-empty string without control or hidden characters.
    pub user_claim: String,
    /// The claim listing the user's groups (`console.oidc.groups_claim`, default `groups`):
    /// an array of strings (or one string); a user without it has no groups.
    pub groups_claim: String,
    /// The scopes asked for (`console.oidc.scopes`); `openid` is always asked for, first.
    /// Default: `openid` alone; a provider may need `email`, `profile` or `groups` for the
    /// claims named above.
    pub scopes: Vec<String>,
    /// The ID token signature algorithms accepted (`console.oidc.algorithms`, default
    /// `DEFAULT_OAUTH_ALGORITHMS`), as for `listen.oauth.algorithms`: never `none` or `HS*`.
    pub algorithms: Vec<String>,
    /// Roots trusted beside the built-in ones for the requests to the provider
    /// (`console.oidc.ca_file`, a PEM file); `None`: the built-in roots only.
    pub ca_file: Option<CaBundle>,
}

/// Where a secret is kept: never in the config's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// The environment variable of this name (`${NAME}` in the config).
    Variable(String),
    /// This file's content, trimmed (resolved against the config's folder).
    File(PathBuf),
}

impl SecretSource {
    /// The secret: the variable's value, or the file's content trimmed (at most
    /// `MAX_CLIENT_SECRET_BYTES`).
    ///
    /// # Errors
    /// A variable that is not set, a file that cannot be read or is too large, a secret that
    /// is empty or holds a control character; the message names the variable or the file.
    pub fn read(&self) -> Result<String, String> {
        let secret = match self {
            SecretSource::Variable(name) => std::env::var(name)
                .map_err(|_| format!("the variable `{name}` (its client secret) is not set"))?,
            SecretSource::File(file) => {
                use std::io::Read as _;
                let shown = crate::text::escape(&file.display().to_string());
                let mut bytes = Vec::new();
                std::fs::File::open(file)
                    .and_then(|opened| {
                        opened
                            .take(super::MAX_CLIENT_SECRET_BYTES.saturating_add(1))
                            .read_to_end(&mut bytes)
                    })
                    .map_err(|error| format!("cannot read its client secret file `{shown}`: {error}"))?;
                if bytes.len() as u64 > super::MAX_CLIENT_SECRET_BYTES {
                    return Err(format!(
                        "its client secret file `{shown}` is larger than the limit of {} bytes",
                        super::MAX_CLIENT_SECRET_BYTES
                    ));
                }
                String::from_utf8(bytes)
                    .map_err(|_| format!("its client secret file `{shown}` is not UTF-8 text"))?
                    .trim()
                    .to_owned()
            }
        };
        if secret.is_empty() || secret.chars().any(char::is_control) {
            return Err(String::from("its client secret is empty or holds a control character"));
        }
        Ok(secret)
    }
}

impl fmt::Debug for ConsoleOidcConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsoleOidcConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret)
            .field("user_claim", &self.user_claim)
            .field("groups_claim", &self.groups_claim)
            .field("scopes", &self.scopes)
            .field("algorithms", &self.algorithms)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// `rules`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulesConfig {
    /// The operator's rules (`rules.file`), given to the rules component's `configure`: a
    /// file, or the text itself ([`PolicySource::Bytes`], from [`crate::ToolwardBuilder`]).
    pub text: TextSource,
    /// A rules component (`rules.component`); `None` is the default component.
    pub component: Option<ComponentSource>,
}

/// Where a part of the policy comes from: a rules or policy component (`rules.component`,
/// `policy.component`), policy settings or Cedar policy text (`policy.settings`,
/// `policy.cedar`). Which kind of artifact a reference must hold is the field's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySource {
    /// A file, its path resolved against the config's folder.
    File(PathBuf),
    /// `oci://REGISTRY/REPOSITORY@sha256:HEX`: the artifact published at that manifest
    /// digest (a reference by tag alone is refused when the config is read), pulled into the
    /// state folder and used only with a signature that verifies with a key of `oci.keys`
    /// (`docs/registries.md`).
    Oci(OciReference),
    /// The bytes themselves, given by an embedder ([`crate::ToolwardBuilder`]): nothing is
    /// read from a file. The config file has no way to say this.
    Bytes(Vec<u8>),
}

pub use crate::text::IN_MEMORY;

/// Where a rules or policy component comes from (`rules.component`, `policy.component`).
pub type ComponentSource = PolicySource;

/// Where policy settings or Cedar policy text come from (`policy.settings`, `policy.cedar`).
pub type TextSource = PolicySource;

impl PolicySource {
    /// The file, for a part read from one.
    #[must_use]
    pub fn file(&self) -> Option<&Path> {
        match self {
            Self::File(path) => Some(path),
            Self::Oci(_) | Self::Bytes(_) => None,
        }
    }

    /// The reference, for a part from an OCI registry.
    #[must_use]
    pub fn oci(&self) -> Option<&OciReference> {
        match self {
            Self::File(_) | Self::Bytes(_) => None,
            Self::Oci(reference) => Some(reference),
        }
    }
}

impl fmt::Display for PolicySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Oci(reference) => write!(f, "{reference}"),
            Self::Bytes(_) => f.write_str(IN_MEMORY),
        }
    }
}

/// `oci`: what artifacts from OCI registries (components, policy settings, Cedar policy text)
/// are trusted with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OciConfig {
    /// The public keys an artifact's cosign signature may verify with, by name (`oci.keys`:
    /// `{"release-2026": "keys/cosign.pub"}`, PEM `PUBLIC KEY` files of ECDSA P-256 keys,
    /// relative to the config's folder). Several are accepted at once, so a key is rotated by
    /// adding the new one before removing the old. The name of the key that verified is
    /// recorded in the audit.
    pub keys: BTreeMap<String, PathBuf>,
}

/// `notify`: who `toolward console` tells of a held call, a tool refused at load and a broken
/// audit chain (docs/console.md, "Notifications"). The flags of `toolward console` add to it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct NotifyConfig {
    /// URLs posted a JSON body signed with `secret_file` (`notify.webhooks`, `${NAME}`
    /// expanded).
    pub webhooks: Vec<String>,
    /// Slack-compatible incoming-webhook URLs (`notify.slack`, `${NAME}` expanded: such a
    /// URL is its own secret).
    pub slack: Vec<String>,
    /// The file holding the webhooks' HMAC key, at least 32 bytes, readable by its owner only
    /// (`notify.secret_file`); required with `webhooks`.
    pub secret_file: Option<PathBuf>,
    /// The console's URL the links are built from (`notify.console_url`,
    /// `https://console.example`); absent: its first `--public-origin`, else its own address.
    pub console_url: Option<String>,
    /// Include a held call's arguments (`notify.arguments`, default false).
    pub arguments: bool,
    /// Post to targets resolving to private addresses (`notify.allow_private`, default false).
    pub allow_private: bool,
    /// Post each new signed checkpoint of the audit log (`notify.checkpoints`, default
    /// false): the state folder's latest, or each fleet gateway's, for keeping elsewhere.
    pub checkpoints: bool,
}

impl std::fmt::Debug for NotifyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A Slack URL is its own secret, and a webhook's may carry one.
        f.debug_struct("NotifyConfig")
            .field("webhooks", &self.webhooks.len())
            .field("slack", &self.slack.len())
            .field("secret_file", &self.secret_file)
            .field("console_url", &self.console_url)
            .field("arguments", &self.arguments)
            .field("allow_private", &self.allow_private)
            .field("checkpoints", &self.checkpoints)
            .finish()
    }
}

/// `policy`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyConfig {
    /// A policy component (`policy.component`); `None` is the default component.
    pub component: Option<ComponentSource>,
    /// The settings given to the policy's `configure` (`policy.settings`): a file, or an
    /// `oci://…@sha256:…` settings artifact; `None` gives it the rules file's text.
    pub settings: Option<TextSource>,
    /// Cedar policies (`policy.cedar`, `docs/cedar.md`): calls are decided by the built-in
    /// Cedar component with this text as its settings. A `.cedar` file, or an
    /// `oci://…@sha256:…` Cedar artifact. Excludes `component` and `settings`.
    pub cedar: Option<TextSource>,
}

/// `store`: where the audit log, the approvals queue, the fact counters and the
/// `requestState` ledger live, for every gateway sharing them.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum StoreConfig {
    /// No `store`: the audit log at `audit.file` and the queue in `state_dir` (one machine).
    #[default]
    StateDir,
    /// Nothing on disk, for an embedder ([`crate::ToolwardBuilder`] without a state folder;
    /// the config file has no way to say this): no state folder is opened (`state_dir` is
    /// not used), the audit records go to the embedder's [`crate::AuditStore`] or to
    /// [`crate::MemoryAudit`], the fact counters are this process's, held calls are asked
    /// only of the approver each call names (no queue), and components are compiled at each
    /// start (no cache). Components, settings and Cedar text from OCI registries need a
    /// state folder and are refused.
    Memory,
    /// `{"postgres": URL}`: one PostgreSQL database for a fleet (see
    /// `crate::store::postgres`); `URL` is a libpq URL or key-value string, `${NAME}`
    /// expanded (keep the password in a variable, not in the file).
    Postgres {
        /// The connection string, variables expanded. Never printed: it may hold a password.
        url: String,
        /// The key OAuth grants are encrypted under in the database (`store.oauth_key`, 32
        /// bytes in hex, given as `${NAME}` so it comes from the environment and never sits in
        /// the file); `None`: no grant can be kept there. Never printed.
        oauth_key: Option<String>,
    },
}

impl fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::StateDir => f.write_str("StateDir"),
            Self::Memory => f.write_str("Memory"),
            Self::Postgres { .. } => f.write_str("Postgres { url: <redacted> }"),
        }
    }
}

/// `audit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// The log (`audit.file`, default `DEFAULT_AUDIT_FILE`).
    pub file: PathBuf,
    /// When records reach the disk (`audit.sync`, `always` or `none`, default `always`).
    pub sync: AuditSync,
    /// Whether records hold each call's arguments, not only their hash
    /// (`audit.record_arguments`, default `false`: arguments may hold secrets).
    pub record_arguments: bool,
    /// Whether each `result-decision` record holds the result the review read, as
    /// received (after the size cap), so `audit replay` can review it again
    /// (`audit.record_results`, default `false`: results may hold secrets, which the
    /// review redacted from what the client got but not from this record).
    pub record_results: bool,
    /// Signed checkpoints of the log (`audit.checkpoint`), when the operator keeps a key.
    pub checkpoint: Option<CheckpointConfig>,
}

/// Default `audit.checkpoint.interval_ms`: 600 000 (ten minutes). Each checkpoint reads the
/// log once; a checkpoint copied away every few minutes leaves little that a rewrite could
/// hide.
pub const DEFAULT_CHECKPOINT_INTERVAL_MS: u64 = 600_000;

/// Shortest `audit.checkpoint.interval_ms`: 1000 (one second). Each checkpoint reads the
/// whole log.
pub const MIN_CHECKPOINT_INTERVAL_MS: u64 = 1000;

/// Signed checkpoints of the audit log (`audit.checkpoint`): the records as the leaves of a
/// Merkle tree, its size and root signed with Ed25519 (`toolward audit checkpoint`,
/// `toolward audit verify --checkpoint`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// The signer key file (`audit.checkpoint.key`, required): a note signer key as
    /// `toolward audit keygen` writes it, mode `0600`. Withheld from confined servers.
    pub key: PathBuf,
    /// How often a gateway signs a checkpoint when the log grew, in milliseconds
    /// (`audit.checkpoint.interval_ms`, default 600 000: `DEFAULT_CHECKPOINT_INTERVAL_MS`); one is
    /// also signed at shutdown.
    pub interval_ms: u64,
    /// The log's name on the checkpoint's first line (`audit.checkpoint.origin`, default the
    /// key's name).
    pub origin: Option<String>,
}

/// Listing and call limits. Every field has its unit in its name; every default is a
/// `DEFAULT_` constant of this module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `DEFAULT_START_TIMEOUT_MS`.
    pub start_timeout_ms: u64,
    /// `DEFAULT_REQUEST_TIMEOUT_MS`.
    pub request_timeout_ms: u64,
    /// `DEFAULT_CALL_TIMEOUT_MS`.
    pub call_timeout_ms: u64,
    /// `DEFAULT_APPROVAL_TIMEOUT_MS`.
    pub approval_timeout_ms: u64,
    /// `DEFAULT_MAX_LISTING_PAGES`.
    pub max_listing_pages: u64,
    /// `DEFAULT_MAX_TOOLS`.
    pub max_tools: u64,
    /// `DEFAULT_MAX_PAGE_BYTES`.
    pub max_page_bytes: u64,
    /// `DEFAULT_MAX_LISTING_BYTES`.
    pub max_listing_bytes: u64,
    /// `DEFAULT_MAX_TOOL_BYTES`.
    pub max_tool_bytes: u64,
    /// `DEFAULT_MAX_RESULT_BYTES`.
    pub max_result_bytes: u64,
    /// `DEFAULT_RESTART_ATTEMPTS`; `0` never restarts.
    pub restart_attempts: u64,
    /// `DEFAULT_RESTART_BACKOFF_MS`.
    pub restart_backoff_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            start_timeout_ms: DEFAULT_START_TIMEOUT_MS,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            call_timeout_ms: DEFAULT_CALL_TIMEOUT_MS,
            approval_timeout_ms: DEFAULT_APPROVAL_TIMEOUT_MS,
            max_listing_pages: DEFAULT_MAX_LISTING_PAGES,
            max_tools: DEFAULT_MAX_TOOLS,
            max_page_bytes: DEFAULT_MAX_PAGE_BYTES,
            max_listing_bytes: DEFAULT_MAX_LISTING_BYTES,
            max_tool_bytes: DEFAULT_MAX_TOOL_BYTES,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            restart_attempts: DEFAULT_RESTART_ATTEMPTS,
            restart_backoff_ms: DEFAULT_RESTART_BACKOFF_MS,
        }
    }
}

impl Limits {
    /// `start_timeout_ms` as a duration.
    #[must_use]
    pub fn start_timeout(&self) -> Duration {
        Duration::from_millis(self.start_timeout_ms)
    }
    /// `request_timeout_ms` as a duration.
    #[must_use]
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }
    /// `call_timeout_ms` as a duration.
    #[must_use]
    pub fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms)
    }
    /// `restart_backoff_ms` as a duration.
    #[must_use]
    pub fn restart_backoff(&self) -> Duration {
        Duration::from_millis(self.restart_backoff_ms)
    }
    /// `approval_timeout_ms` as a duration.
    #[must_use]
    pub fn approval_timeout(&self) -> Duration {
        Duration::from_millis(self.approval_timeout_ms)
    }

    pub(super) fn field_mut(&mut self, key: &str) -> Option<&mut u64> {
        Some(match key {
            "start_timeout_ms" => &mut self.start_timeout_ms,
            "request_timeout_ms" => &mut self.request_timeout_ms,
            "call_timeout_ms" => &mut self.call_timeout_ms,
            "approval_timeout_ms" => &mut self.approval_timeout_ms,
            "max_listing_pages" => &mut self.max_listing_pages,
            "max_tools" => &mut self.max_tools,
            "max_page_bytes" => &mut self.max_page_bytes,
            "max_listing_bytes" => &mut self.max_listing_bytes,
            "max_tool_bytes" => &mut self.max_tool_bytes,
            "max_result_bytes" => &mut self.max_result_bytes,
            "restart_attempts" => &mut self.restart_attempts,
            "restart_backoff_ms" => &mut self.restart_backoff_ms,
            _ => return None,
        })
    }
}
