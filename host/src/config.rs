//! The operator's configuration, `toolward.json`: which MCP servers to start, where the rules,
//! policy, manifest and audit log are, and the limits. Reference: `docs/config.md`; JSON
//! Schema: `docs/config.schema.json`.
//!
//! # Reading rules
//!
//! - Keys are `snake_case`, except inside `mcpServers`, which takes the block an MCP client
//!   keeps (Claude Desktop, Claude Code, Cursor, VS Code) unchanged: `command`, `args`, `env`,
//!   `url`, `headers`, and `type`/`transport`.
//! - An unknown key is an error naming its path (`audit.synk: unknown key ...`), because a
//!   misspelt key would otherwise silently leave a protection at its default. Inside a server
//!   entry the keys clients add for their own use ([`IGNORED_CLIENT_KEYS`]) are ignored and
//!   listed in [`Config::ignored_keys`]; `cwd` and `envFile` change how the server runs, are
//!   not supported, and are errors; `disabled: true` / `enabled: false` leave the server out
//!   (listed in [`Config::disabled_servers`]). Any other key in a server entry is an error.
//! - In config text a key given twice in one object is an error (JSON parsers differ on which
//!   one wins).
//! - `${NAME}` in a value of a server's `env` or `headers` is replaced by the variable `NAME`
//!   of toolward's own environment; `NAME` is `[A-Za-z_][A-Za-z0-9_]*` and nothing else
//!   (`${NAME:-default}` is an error). A variable that is not set is an error naming the
//!   server, key and variable. `$${` is a literal `${`; any other `$` is taken literally. No
//!   other field is expanded: `command`, `args` and `url` are passed as written.
//! - `rules.component`, `policy.component`, `policy.settings` and `policy.cedar` name a
//!   file, or an artifact in an OCI registry pinned by digest:
//!   `oci://REGISTRY/REPOSITORY@sha256:HEX` ([`ComponentSource::Oci`], [`TextSource::Oci`];
//!   a tag alone is refused, `toolward policy pull` resolves one). Such an artifact must be
//!   signed with a key of `oci.keys`, which then must name at least one.
//! - Relative paths (`rules.file`, `rules.component`, `policy.component`, `policy.settings`,
//!   `policy.cedar`,
//!   `manifest`, `audit.file`, `state_dir`, `servers_dir`, `confine.deny`,
//!   `confine.launcher`) resolve against the folder of the config file (the `base_dir` given
//!   to [`Config::from_value`]). A server's `command` resolves there too when it contains a
//!   path separator (`./bin/server`); a bare name (`npx`) is left for the `PATH` lookup. `~`
//!   is not expanded, except a leading `~/` in `confine.deny` (toolward's `HOME`).
//! - Every error names its place in the file: `mcpServers.fs.args[1]: expected a string,
//!   found a number`.

mod expand;
mod oci_reference;
pub mod operator_file;
mod reader;
pub mod rewrite;
mod sections;
mod strict_json;

use std::collections::BTreeMap;
use std::env::VarError;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::component::GuestLimits;

pub(crate) use reader::type_name;
use reader::Reader;
pub use oci_reference::{OCI_SCHEME, OciReference, is_sha256_digest};
pub use sections::{
    AuditConfig, CaBundle, CheckpointConfig, ComponentSource, ConfineConfig, PolicySource, ConsoleConfig,
    ConsoleOidcConfig, DEFAULT_CHECKPOINT_INTERVAL_MS, HandedTransport,
    DEFAULT_TELEMETRY_EXPORT_INTERVAL_MS, MIN_CHECKPOINT_INTERVAL_MS,
    DEFAULT_TELEMETRY_SERVICE_NAME, IN_MEMORY, IntrospectionConfig, Limits, ListenConfig, ListenOAuthConfig,
    NotifyConfig, OAuthConfig, OAuthGrant, OciConfig, PolicyConfig, RulesConfig, SecretSource,
    ServerConfig, ServerConfine,
    ServerTransport, StoreConfig, TelemetryConfig, TextSource,
};
pub(crate) use sections::HandedLines;
use strict_json::parse_strict;

/// Default time for a server to start and answer `initialize`: 30 000 ms. Servers started
/// through `npx` or `uvx` may download a package first; longer than that is a hung server.
pub const DEFAULT_START_TIMEOUT_MS: u64 = 30_000;
/// Default time for a server to answer one protocol request (`tools/list` pages, `ping`):
/// 60 000 ms. These requests do no real work, so a minute means the server is stuck.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 60_000;
/// Default time for a server to answer one `tools/call`: 300 000 ms. Tools do real work
/// (searches, builds, fetches) and may take minutes; past five, the model's client has
/// usually given up and the call only holds resources.
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 300_000;
/// Default time the operator has to answer an approval: 120 000 ms. A held call is refused
/// when it runs out (an unanswered approval is a no).
pub const DEFAULT_APPROVAL_TIMEOUT_MS: u64 = 120_000;
/// Default bound on `tools/list` pages per server: 64. A server that paginates past this is
/// looping or hostile; real servers send one page.
pub const DEFAULT_MAX_LISTING_PAGES: u64 = 64;
/// Default bound on tools per server: 4096. Far above any real server, low enough that
/// pinning and reviewing the listing stays bounded.
pub const DEFAULT_MAX_TOOLS: u64 = 4096;
/// Default bound on one `tools/list` response, in bytes: 16 MiB.
pub const DEFAULT_MAX_PAGE_BYTES: u64 = 16 * 1024 * 1024;
/// Default bound on all `tools/list` pages of one server together, in bytes: 64 MiB.
pub const DEFAULT_MAX_LISTING_BYTES: u64 = 64 * 1024 * 1024;
/// Default bound on one tool's entry in a listing (name, description, schemas, annotations),
/// in bytes: 256 KiB. A description is prompt text the model reads; more than this is not
/// documentation.
pub const DEFAULT_MAX_TOOL_BYTES: u64 = 256 * 1024;
/// Default cap on one call's result passed to the client, in bytes: 1 MiB. Results are
/// untrusted text placed in the model's context; content past the cap is truncated and marked.
pub const DEFAULT_MAX_RESULT_BYTES: u64 = 1024 * 1024;
/// Default number of attempts to restart a server that failed after the load: 5 in a row;
/// `0` never restarts. A restarted server's listing is checked against the pins again.
pub const DEFAULT_RESTART_ATTEMPTS: u64 = 5;
/// Default wait before the first restart attempt, in milliseconds: 500. Each further attempt
/// in a row waits twice as long, up to [`MAX_RESTART_BACKOFF_MS`].
pub const DEFAULT_RESTART_BACKOFF_MS: u64 = 500;
/// Longest wait between two restart attempts, in milliseconds: 30 s.
pub const MAX_RESTART_BACKOFF_MS: u64 = 30_000;
/// Largest accepted timeout, in milliseconds: one day. Keeps deadline arithmetic far from
/// overflow and catches seconds typed where milliseconds were meant only in one direction;
/// nothing the gateway waits for should take longer.
pub const MAX_TIMEOUT_MS: u64 = 24 * 60 * 60 * 1000;
/// Default time a `serve --listen` client has to send a request's head (request line and
/// headers), in milliseconds: 10 000. A client writes its head at once; the clock also runs
/// while a kept-alive connection waits for its next request, so a socket that sends nothing
/// holds a connection slot (and a descriptor) this long at most.
pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 10_000;
/// Default bound on open `serve --listen` connections: 256. A client holds two or three
/// (its posts and its event stream); past the bound, new connections wait in the kernel's
/// queue until one closes. Well below the usual 1024 descriptors a process may open, so
/// the servers' pipes and the audit log still get theirs.
pub const DEFAULT_MAX_CONNECTIONS: u64 = 256;
/// Default bound on live HTTP sessions (`Mcp-Session-Id`) of one principal: 64. A client
/// opens one per connection to the gateway; 64 leaves room for reconnections that never
/// closed theirs until they expire, and bounds what one token can make the gateway keep.
pub const DEFAULT_MAX_SESSIONS_PER_PRINCIPAL: u64 = 64;
/// Default time after which an HTTP session with no message in either direction is closed,
/// in milliseconds: 600 000 (ten minutes). Clients that vanish without `DELETE` leave
/// sessions behind; this returns their place under `max_sessions_per_principal`. The
/// gateway never uses less than the longest a call can take (`approval_timeout_ms` plus
/// `call_timeout_ms`), so a session is not closed under a call in flight.
pub const DEFAULT_SESSION_IDLE_TIMEOUT_MS: u64 = 600_000;
/// Default `listen.oauth.algorithms`: `RS256` and `ES256`, what authorization servers sign
/// access tokens with unless told otherwise. Others are accepted when named.
pub const DEFAULT_OAUTH_ALGORITHMS: &[&str] = &["RS256", "ES256"];
/// The algorithms `listen.oauth.algorithms` may name: the asymmetric JOSE algorithms (RFC
/// 7518, RFC 8037) a public key of the issuer verifies.
pub const OAUTH_ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];
/// Default `listen.oauth.principal_claim`: `sub`, the subject of the token.
pub const DEFAULT_PRINCIPAL_CLAIM: &str = "sub";
/// Default `console.oidc.user_claim`: `sub`, the subject of the ID token: the one claim an
/// OpenID provider promises never to reassign.
pub const DEFAULT_OIDC_USER_CLAIM: &str = "sub";
/// Default `console.oidc.groups_claim`: `groups`, where most providers put a user's groups.
pub const DEFAULT_OIDC_GROUPS_CLAIM: &str = "groups";
/// Largest `console.oidc.client_secret_file` read, in bytes: 4 KiB. A client secret is tens
/// of bytes.
pub const MAX_CLIENT_SECRET_BYTES: u64 = 4 * 1024;
/// Default `listen.oauth.leeway_ms`: 30 000. Clocks of an issuer and a gateway agree to
/// within seconds; half a minute covers a drifting one without keeping an expired token
/// alive for long.
pub const DEFAULT_OAUTH_LEEWAY_MS: u64 = 30_000;
/// Largest `ca_file` read, in bytes: 1 MiB. The whole Mozilla root bundle is about 220 KB;
/// a file past this is not a bundle of roots.
pub const MAX_CA_FILE_BYTES: u64 = 1024 * 1024;
/// Largest `listen.oauth.leeway_ms`: 300 000 (five minutes), the skew Kerberos tolerates;
/// more would keep expired tokens working.
pub const MAX_OAUTH_LEEWAY_MS: u64 = 300_000;
/// Largest config file read, in bytes: 1 MiB. A real config is a few KiB.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;
/// Longest separator, in characters: 8. The separator is part of every exposed tool name,
/// which the default pattern limits to 64 characters.
pub const MAX_SEPARATOR_CHARS: usize = 8;

/// Default separator between server name and tool name in an exposed tool name
/// (`fs__read_file`).
pub const DEFAULT_SEPARATOR: &str = "__";
/// Default pattern an exposed tool name must match: the characters and length every major
/// client accepts.
pub const DEFAULT_TOOL_NAME_PATTERN: &str = "^[a-zA-Z0-9_-]{1,64}$";
/// Default principal recorded on calls.
pub const DEFAULT_PRINCIPAL: &str = "operator";
/// Default manifest path, relative to the config folder.
pub const DEFAULT_MANIFEST: &str = "manifest.json";
/// Default audit log path, relative to the config folder.
pub const DEFAULT_AUDIT_FILE: &str = "audit.jsonl";
/// Default state folder, relative to the config folder.
pub const DEFAULT_STATE_DIR: &str = "state";
/// Default folder of the stdio servers' own `HOME` and `TMPDIR`
/// (`<servers_dir>/<server>/home` and `.../tmp`), relative to the config folder: beside the
/// state folder, never inside it.
pub const DEFAULT_SERVERS_DIR: &str = ".toolward-servers";

/// Keys MCP clients put in a server entry for their own use; toolward ignores them (its own
/// policy decides calls, its own limits apply) and lists them in [`Config::ignored_keys`].
pub const IGNORED_CLIENT_KEYS: &[&str] = &[
    "description",
    "autoApprove",
    "alwaysAllow",
    "timeout",
    "source",
    "icon",
];

/// Shortest bearer token accepted in `listen.tokens`, in characters: 32. A token is the only
/// thing between the network and the operator's tools.
pub const MIN_TOKEN_CHARS: usize = 32;
/// Errors reading a config. Every message about the content starts with the path in the
/// file (`mcpServers.fs.args[1]`), or `config` for the whole document.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file cannot be read.
    #[error("cannot read config file `{path}`")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The config file is not a regular file (`/dev/zero`, a FIFO).
    #[error(transparent)]
    File(operator_file::OperatorFileError),
    /// The config file is larger than `MAX_CONFIG_BYTES`.
    #[error("config file `{path}` is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// `MAX_CONFIG_BYTES`.
        limit: u64,
    },
    /// The text is not JSON, or an object has a key twice.
    #[error("config is not valid JSON (line {line}, column {column})")]
    Parse {
        /// Line of the problem, from 1.
        line: usize,
        /// Column of the problem, from 1.
        column: usize,
        /// The parser's message.
        #[source]
        source: serde_json::Error,
    },
    /// A value is missing, of the wrong type, out of range, or a key is unknown.
    #[error("{path}: {message}")]
    Invalid {
        /// Where in the file (`mcpServers.fs.args[1]`).
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A `${NAME}` reference names a variable that toolward's environment does not have.
    #[error(
        "{path}: environment variable `{variable}` is not set (server `{server}`, key `{key}`)"
    )]
    MissingEnvVar {
        /// Where in the file (`mcpServers.github.env.TOKEN`).
        path: String,
        /// The server.
        server: String,
        /// The `env` or `headers` key whose value refers to the variable.
        key: String,
        /// The variable.
        variable: String,
    },
    /// A `${NAME}` reference names a variable whose value is not valid Unicode.
    #[error(
        "{path}: environment variable `{variable}` is not valid unicode (server `{server}`, key `{key}`)"
    )]
    EnvVarNotUnicode {
        /// Where in the file.
        path: String,
        /// The server.
        server: String,
        /// The `env` or `headers` key whose value refers to the variable.
        key: String,
        /// The variable.
        variable: String,
    },
}

/// The operator's configuration, every default applied and every path resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The servers to start, by name (`mcpServers`), without the disabled ones.
    pub servers: BTreeMap<String, ServerConfig>,
    /// Servers the pasted block marks `"disabled": true` or `"enabled": false`: not started.
    pub disabled_servers: Vec<String>,
    /// Paths of client keys that were ignored (`mcpServers.fs.autoApprove`), for the load
    /// report.
    pub ignored_keys: Vec<String>,
    /// The rules: which tools are registered, with which effect.
    pub rules: RulesConfig,
    /// The policy that decides calls.
    pub policy: PolicyConfig,
    /// The keys that components from OCI registries are verified with (`oci`).
    pub oci: OciConfig,
    /// The pinned manifest (`manifest`, default `DEFAULT_MANIFEST`).
    pub manifest: PathBuf,
    /// The audit log.
    pub audit: AuditConfig,
    /// Where toolward keeps state between runs (`state_dir`, default `DEFAULT_STATE_DIR`).
    pub state_dir: PathBuf,
    /// The principal recorded on calls (`principal`, default `DEFAULT_PRINCIPAL`).
    pub principal: String,
    /// Who may answer held calls (`approvers`); without rules, every channel answers every
    /// call.
    pub approvers: crate::identity::Approvers,
    /// Who `toolward console` tells of held calls, refused tools and a broken chain
    /// (`notify`); empty: nobody.
    pub notify: NotifyConfig,
    /// Between server and tool name in an exposed name (`separator`, default
    /// `DEFAULT_SEPARATOR`).
    pub separator: String,
    /// The pattern every exposed tool name must match, anchored with `^` and `$`
    /// (`tool_name_pattern`, default `DEFAULT_TOOL_NAME_PATTERN`). Checked for anchoring
    /// here; compiled by the step that names tools.
    pub tool_name_pattern: String,
    /// The top-level limits (`limits`); each server's [`ServerConfig::limits`] starts from
    /// these.
    pub limits: Limits,
    /// Who may use `toolward serve --listen` (`listen`).
    pub listen: ListenConfig,
    /// What `toolward console` reads from the config (`console`): its OpenID Connect
    /// sign-in.
    pub console: ConsoleConfig,
    /// Bounds on the rules and policy components (`guest`; each field defaults to the
    /// `DEFAULT_*` constant of `crate::component`).
    pub guest: GuestLimits,
    /// What confines every stdio server (`confine`; see `crate::confine`).
    pub confine: ConfineConfig,
    /// Where each stdio server's own `HOME` and `TMPDIR` are (`servers_dir`, default
    /// `DEFAULT_SERVERS_DIR`): `<servers_dir>/<server>/home` and `.../tmp`. Never inside
    /// the state folder. `None` (only from [`crate::ToolwardBuilder`], which makes no folder
    /// unless told): stdio servers get this process's `HOME` and `TMPDIR`, as an MCP client
    /// would start them, and a confined server no folder of its own to write in.
    pub servers_dir: Option<PathBuf>,
    /// Where the audit log, the approvals queue, the fact counters and the `requestState`
    /// ledger live (`store`, default the state folder and `audit.file`).
    pub store: StoreConfig,
    /// Where traces and metrics go over OTLP/HTTP (`telemetry`); `None` (the default):
    /// nowhere, and nothing is collected.
    pub telemetry: Option<TelemetryConfig>,
    /// The config file itself, when it was read from one ([`Config::from_path`]): withheld
    /// from confined servers.
    pub file: Option<PathBuf>,
    /// The folder relative paths were resolved against.
    pub base_dir: PathBuf,
}

impl Config {
    /// Reads the config file at `path` (at most `MAX_CONFIG_BYTES`); relative paths in it
    /// resolve against its folder (made absolute from the current directory). `${NAME}`
    /// references read toolward's environment.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Read`], [`ConfigError::File`] (not a regular file: `/dev/zero`, a
    /// FIFO), [`ConfigError::TooLarge`], [`ConfigError::Parse`], and any error of
    /// [`Config::from_value`]. A leading UTF-8 byte order mark is read past.
    pub fn from_path(path: &Path) -> Result<Self, ConfigError> {
        let read_err = |source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        };
        let bytes = match operator_file::read_trusted(path, "config file", MAX_CONFIG_BYTES) {
            Ok(bytes) => bytes,
            Err(operator_file::OperatorFileError::TooLarge { .. }) => {
                return Err(ConfigError::TooLarge {
                    path: path.to_path_buf(),
                    limit: MAX_CONFIG_BYTES,
                });
            }
            Err(operator_file::OperatorFileError::Io { source, .. }) => {
                return Err(read_err(source));
            }
            Err(other) => return Err(ConfigError::File(other)),
        };
        // A byte order mark (Windows editors write one) is read past, not refused.
        let text = String::from_utf8(operator_file::without_bom(&bytes).to_vec())
            .map_err(|e| read_err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        let folder = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let base_dir = std::path::absolute(folder).map_err(read_err)?;
        let mut config = Self::from_str(&text, &base_dir)?;
        config.file = Some(std::path::absolute(path).map_err(read_err)?);
        Ok(config)
    }

    /// Parses config `text` (refusing duplicate keys); relative paths resolve against
    /// `base_dir`. `${NAME}` references read toolward's environment.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Parse`], and any error of [`Config::from_value`].
    pub fn from_str(text: &str, base_dir: &Path) -> Result<Self, ConfigError> {
        let value = parse_strict(text)?;
        Self::from_value(value, base_dir)
    }

    /// Builds a config from a JSON value, for embedders that have no file; relative paths
    /// resolve against `base_dir`. `${NAME}` references read toolward's environment.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the path of the first problem;
    /// [`ConfigError::MissingEnvVar`] and [`ConfigError::EnvVarNotUnicode`] for `${NAME}`.
    pub fn from_value(value: Value, base_dir: &Path) -> Result<Self, ConfigError> {
        Self::from_value_with_env(value, base_dir, &|name| std::env::var(name))
    }

    /// As [`Config::from_value`], with `${NAME}` references read through `env` instead of
    /// the process environment (embedders with their own secret store; tests).
    ///
    /// # Errors
    ///
    /// As [`Config::from_value`].
    pub fn from_value_with_env(
        value: Value,
        base_dir: &Path,
        env: &dyn Fn(&str) -> Result<String, VarError>,
    ) -> Result<Self, ConfigError> {
        Reader {
            base_dir,
            env,
            ignored: Vec::new(),
        }
        .config(&value)
    }

    /// The exposed name of `tool` on `server`: `server`, the separator, `tool`.
    #[must_use]
    pub fn exposed_name(&self, server: &str, tool: &str) -> String {
        format!("{server}{}{tool}", self.separator)
    }
}

#[cfg(test)]
mod tests;
