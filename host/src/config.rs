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
//! - Relative paths (`rules.file`, `rules.component`, `policy.component`, `policy.settings`,
//!   `manifest`, `audit.file`, `state_dir`, `servers_dir`, `confine.deny`,
//!   `confine.launcher`) resolve against the folder of the config file (the `base_dir` given
//!   to [`Config::from_value`]). A server's `command` resolves there too when it contains a
//!   path separator (`./bin/server`); a bare name (`npx`) is left for the `PATH` lookup. `~`
//!   is not expanded, except a leading `~/` in `confine.deny` (toolward's `HOME`).
//! - Every error names its place in the file: `mcpServers.fs.args[1]: expected a string,
//!   found a number`.

pub mod operator_file;
pub mod rewrite;

use std::collections::BTreeMap;
use std::env::VarError;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::audit::AuditSync;
use crate::component::GuestLimits;

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

/// Keys of the top-level object. `$schema` is accepted so editors can find the schema.
const TOP_KEYS: &[&str] = &[
    "$schema",
    "mcpServers",
    "rules",
    "policy",
    "manifest",
    "audit",
    "state_dir",
    "principal",
    "separator",
    "tool_name_pattern",
    "limits",
    "listen",
    "guest",
    "confine",
    "servers_dir",
    "store",
    "telemetry",
];
/// Keys of `telemetry` (see [`TelemetryConfig`]).
const TELEMETRY_KEYS: &[&str] = &["endpoint", "service_name", "export_interval_ms", "headers"];
/// Keys of `guest`, each a field of [`GuestLimits`].
const GUEST_KEYS: &[&str] = &[
    "decide_fuel",
    "classify_fuel",
    "configure_fuel",
    "memory_bytes",
    "max_instances",
    "ready_instances",
];
/// Keys of a server entry toolward reads (besides [`IGNORED_CLIENT_KEYS`]).
const SERVER_KEYS: &[&str] = &[
    "command",
    "args",
    "env",
    "url",
    "headers",
    "type",
    "transport",
    "pass_env",
    "limits",
    "disabled",
    "enabled",
    "confine",
];
/// Keys of a server entry that change how the server runs and are not supported: refused
/// rather than ignored.
const UNSUPPORTED_SERVER_KEYS: &[&str] = &["cwd", "envFile"];
const RULES_KEYS: &[&str] = &["file", "component"];
const POLICY_KEYS: &[&str] = &["component", "settings", "cedar"];
const AUDIT_KEYS: &[&str] = &["file", "sync", "record_arguments"];
/// Keys of `store` (see [`StoreConfig`]).
const STORE_KEYS: &[&str] = &["postgres"];
const LISTEN_KEYS: &[&str] = &[
    "tokens",
    "allowed_origins",
    "header_read_timeout_ms",
    "max_connections",
    "max_sessions_per_principal",
    "session_idle_timeout_ms",
];
/// Keys of the top-level `confine`: what every stdio server is denied beside the defaults.
const CONFINE_KEYS: &[&str] = &["deny", "deny_tcp", "deny_network", "launcher", "namespaces"];
/// Keys of a server's `confine`.
const SERVER_CONFINE_KEYS: &[&str] = &["deny", "deny_tcp", "deny_network", "unconfined"];
/// Shortest bearer token accepted in `listen.tokens`, in characters: 32. A token is the only
/// thing between the network and the operator's tools.
pub const MIN_TOKEN_CHARS: usize = 32;
const LIMIT_KEYS: &[&str] = &[
    "start_timeout_ms",
    "request_timeout_ms",
    "call_timeout_ms",
    "approval_timeout_ms",
    "max_listing_pages",
    "max_tools",
    "max_page_bytes",
    "max_listing_bytes",
    "max_tool_bytes",
    "max_result_bytes",
    "restart_attempts",
    "restart_backoff_ms",
];

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
    /// The pinned manifest (`manifest`, default `DEFAULT_MANIFEST`).
    pub manifest: PathBuf,
    /// The audit log.
    pub audit: AuditConfig,
    /// Where toolward keeps state between runs (`state_dir`, default `DEFAULT_STATE_DIR`).
    pub state_dir: PathBuf,
    /// The principal recorded on calls (`principal`, default `DEFAULT_PRINCIPAL`).
    pub principal: String,
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
    /// Bounds on the rules and policy components (`guest`; each field defaults to the
    /// `DEFAULT_*` constant of `crate::component`).
    pub guest: GuestLimits,
    /// What confines every stdio server (`confine`; see `crate::confine`).
    pub confine: ConfineConfig,
    /// Where each stdio server's own `HOME` and `TMPDIR` are (`servers_dir`, default
    /// `DEFAULT_SERVERS_DIR`): `<servers_dir>/<server>/home` and `.../tmp`. Never inside
    /// the state folder.
    pub servers_dir: PathBuf,
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
    },
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
            ServerTransport::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .finish(),
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
    /// the state folder at first start, named after [`Config::principal`].
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
            .finish()
    }
}

/// `rules`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulesConfig {
    /// The operator's rules file (`rules.file`), given to the rules component's `configure`.
    pub file: PathBuf,
    /// A rules component (`rules.component`); `None` is the default component.
    pub component: Option<PathBuf>,
}

/// `policy`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyConfig {
    /// A policy component (`policy.component`); `None` is the default component.
    pub component: Option<PathBuf>,
    /// A settings file given to the policy's `configure` (`policy.settings`); `None` gives
    /// it empty settings.
    pub settings: Option<PathBuf>,
    /// A Cedar policy file (`policy.cedar`, `docs/cedar.md`): calls are decided by the
    /// built-in Cedar component with this file's text as its settings. Excludes
    /// `component` and `settings`.
    pub cedar: Option<PathBuf>,
}

/// `store`: where the audit log, the approvals queue, the fact counters and the
/// `requestState` ledger live, for every gateway sharing them.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum StoreConfig {
    /// No `store`: the audit log at `audit.file` and the queue in `state_dir` (one machine).
    #[default]
    StateDir,
    /// `{"postgres": URL}`: one PostgreSQL database for a fleet (see
    /// `crate::store::postgres`); `URL` is a libpq URL or key-value string, `${NAME}`
    /// expanded (keep the password in a variable, not in the file).
    Postgres {
        /// The connection string, variables expanded. Never printed: it may hold a password.
        url: String,
    },
}

impl fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::StateDir => f.write_str("StateDir"),
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

    fn field_mut(&mut self, key: &str) -> Option<&mut u64> {
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

/// Reads `${NAME}` references: toolward's environment, or a stand-in for it.
type EnvLookup<'a> = &'a dyn Fn(&str) -> Result<String, VarError>;

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

/// A place in the config document, for error messages.
#[derive(Clone)]
struct JsonPath(String);

impl JsonPath {
    fn root() -> Self {
        Self(String::new())
    }

    fn key(&self, key: &str) -> Self {
        let plain = !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '$'));
        if plain {
            if self.0.is_empty() {
                Self(key.to_owned())
            } else {
                Self(format!("{}.{key}", self.0))
            }
        } else {
            let quoted = serde_json::to_string(key).unwrap_or_else(|_| format!("\"{key}\""));
            Self(format!("{}[{quoted}]", self.0))
        }
    }

    fn index(&self, index: usize) -> Self {
        Self(format!("{}[{index}]", self.0))
    }

    fn invalid(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.to_string(),
            message: message.into(),
        }
    }
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "config" } else { &self.0 })
    }
}

/// What a JSON value is, for messages (the rules file's wording, shared).
pub(crate) use toolward_policy_table::type_name;

fn expected(path: &JsonPath, what: &str, found: &Value) -> ConfigError {
    path.invalid(format!("expected {what}, found {}", type_name(found)))
}

fn as_object<'v>(value: &'v Value, path: &JsonPath) -> Result<&'v Map<String, Value>, ConfigError> {
    value
        .as_object()
        .ok_or_else(|| expected(path, "an object", value))
}

fn as_str<'v>(value: &'v Value, path: &JsonPath) -> Result<&'v str, ConfigError> {
    value
        .as_str()
        .ok_or_else(|| expected(path, "a string", value))
}

fn non_empty_str<'v>(value: &'v Value, path: &JsonPath) -> Result<&'v str, ConfigError> {
    let text = as_str(value, path)?;
    if text.is_empty() {
        return Err(path.invalid("must not be empty"));
    }
    Ok(text)
}

fn as_bool(value: &Value, path: &JsonPath) -> Result<bool, ConfigError> {
    value
        .as_bool()
        .ok_or_else(|| expected(path, "`true` or `false`", value))
}

fn one_of(keys: &[&str]) -> String {
    keys.iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn check_keys(
    map: &Map<String, Value>,
    path: &JsonPath,
    allowed: &[&str],
) -> Result<(), ConfigError> {
    match map.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(key) => Err(path
            .key(key)
            .invalid(format!("unknown key (expected one of {})", one_of(allowed)))),
        None => Ok(()),
    }
}

/// A variable name usable in `${NAME}`, `env`, and `pass_env`.
fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A `confine` object's `deny` paths and its two network switches, as read.
type ConfineFields = (Vec<PathBuf>, Option<bool>, Option<bool>);

/// Walks the document by hand so every error can name its path.
struct Reader<'a> {
    base_dir: &'a Path,
    env: EnvLookup<'a>,
    ignored: Vec<String>,
}

impl Reader<'_> {
    fn config(mut self, value: &Value) -> Result<Config, ConfigError> {
        let root = JsonPath::root();
        let map = as_object(value, &root)?;
        check_keys(map, &root, TOP_KEYS)?;
        if let Some(schema) = map.get("$schema") {
            as_str(schema, &root.key("$schema"))?;
        }

        let separator = match map.get("separator") {
            None => DEFAULT_SEPARATOR.to_owned(),
            Some(value) => separator(value, &root.key("separator"))?,
        };
        let tool_name_pattern = match map.get("tool_name_pattern") {
            None => DEFAULT_TOOL_NAME_PATTERN.to_owned(),
            Some(value) => {
                let path = root.key("tool_name_pattern");
                let pattern = non_empty_str(value, &path)?;
                if !(pattern.starts_with('^') && pattern.ends_with('$')) {
                    return Err(path.invalid(format!(
                        "pattern `{pattern}` must be anchored with `^` and `$` (an unanchored pattern accepts any name containing a match)"
                    )));
                }
                pattern.to_owned()
            }
        };
        let limits = match map.get("limits") {
            None => Limits::default(),
            Some(value) => limits(value, &root.key("limits"), Limits::default())?,
        };

        let rules_path = root.key("rules");
        let rules = match map.get("rules") {
            None => {
                return Err(rules_path
                    .invalid("missing: the rules file decides which tools are registered"));
            }
            Some(value) => self.rules(value, &rules_path)?,
        };
        let policy = match map.get("policy") {
            None => PolicyConfig::default(),
            Some(value) => self.policy(value, &root.key("policy"))?,
        };
        let manifest = self.path_or(map, &root, "manifest", DEFAULT_MANIFEST)?;
        let state_dir = self.path_or(map, &root, "state_dir", DEFAULT_STATE_DIR)?;
        let audit = match map.get("audit") {
            None => AuditConfig {
                file: self.base_dir.join(DEFAULT_AUDIT_FILE),
                sync: AuditSync::Always,
                record_arguments: false,
            },
            Some(value) => self.audit(value, &root.key("audit"))?,
        };
        let principal = match map.get("principal") {
            None => DEFAULT_PRINCIPAL.to_owned(),
            Some(value) => non_empty_str(value, &root.key("principal"))?.to_owned(),
        };
        let listen = match map.get("listen") {
            None => ListenConfig::default(),
            Some(value) => self.listen(value, &root.key("listen"))?,
        };
        let guest = match map.get("guest") {
            None => GuestLimits::default(),
            Some(value) => guest(value, &root.key("guest"))?,
        };
        let confine = match map.get("confine") {
            None => ConfineConfig::default(),
            Some(value) => self.confine(value, &root.key("confine"))?,
        };
        let telemetry = match map.get("telemetry") {
            None => None,
            Some(value) => Some(self.telemetry(value, &root.key("telemetry"))?),
        };
        let servers_dir = self.path_or(map, &root, "servers_dir", DEFAULT_SERVERS_DIR)?;
        let store = match map.get("store") {
            None => StoreConfig::StateDir,
            Some(value) => self.store(value, &root.key("store"))?,
        };
        if lexical(&servers_dir).starts_with(lexical(&state_dir)) {
            return Err(root.key("servers_dir").invalid(format!(
                "`{}` is inside the state folder `{}`: servers are denied the state folder, so their `HOME` and `TMPDIR` must be elsewhere: set `servers_dir` to a folder outside it",
                servers_dir.display(),
                state_dir.display()
            )));
        }

        let servers_path = root.key("mcpServers");
        let Some(servers_value) = map.get("mcpServers") else {
            return Err(servers_path.invalid("missing: name at least one server"));
        };
        let servers_map = as_object(servers_value, &servers_path)?;
        if servers_map.is_empty() {
            return Err(servers_path.invalid("no servers: name at least one server"));
        }
        let mut servers = BTreeMap::new();
        let mut disabled_servers = Vec::new();
        for (name, entry) in servers_map {
            let path = servers_path.key(name);
            server_name(name, &separator, &path)?;
            match self.server(name, entry, &path, &limits, &confine)? {
                Some(server) => {
                    servers.insert(name.clone(), server);
                }
                None => disabled_servers.push(name.clone()),
            }
        }

        Ok(Config {
            servers,
            disabled_servers,
            ignored_keys: self.ignored,
            rules,
            policy,
            manifest,
            audit,
            state_dir,
            principal,
            separator,
            tool_name_pattern,
            limits,
            listen,
            guest,
            confine,
            servers_dir,
            store,
            telemetry,
            file: None,
            base_dir: self.base_dir.to_path_buf(),
        })
    }

    fn telemetry(&self, value: &Value, path: &JsonPath) -> Result<TelemetryConfig, ConfigError> {
        let map = as_object(value, path)?;
        check_keys(map, path, TELEMETRY_KEYS)?;
        let endpoint_path = path.key("endpoint");
        let Some(endpoint) = map.get("endpoint") else {
            return Err(endpoint_path.invalid(
                "missing: the collector's OTLP/HTTP base URL, e.g. `http://127.0.0.1:4318`",
            ));
        };
        let endpoint = expand(
            non_empty_str(endpoint, &endpoint_path)?,
            &endpoint_path,
            "telemetry",
            "endpoint",
            self.env,
        )?;
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(endpoint_path.invalid(format!(
                "`{endpoint}` is not an `http://` or `https://` URL (OTLP over HTTP)"
            )));
        }
        let service_name = match map.get("service_name") {
            None => DEFAULT_TELEMETRY_SERVICE_NAME.to_owned(),
            Some(value) => non_empty_str(value, &path.key("service_name"))?.to_owned(),
        };
        let export_interval_ms = match map.get("export_interval_ms") {
            None => DEFAULT_TELEMETRY_EXPORT_INTERVAL_MS,
            Some(value) => {
                let key_path = path.key("export_interval_ms");
                value.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                    expected(&key_path, "a positive integer (milliseconds)", value)
                })?
            }
        };
        Ok(TelemetryConfig {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            service_name,
            export_interval_ms,
            headers: self.string_map("telemetry", map, path, "headers", check_header_entry)?,
        })
    }

    /// A path of `confine.deny`: `~/` is toolward's `HOME`, else as [`Reader::path`].
    fn deny_path(&self, value: &Value, path: &JsonPath) -> Result<PathBuf, ConfigError> {
        let text = non_empty_str(value, path)?;
        match text.strip_prefix("~/") {
            Some(rest) => {
                let home = (self.env)("HOME").map_err(|_| {
                    path.invalid(format!(
                        "`{text}` starts with `~/` but `HOME` is not set in toolward's environment: write the full path"
                    ))
                })?;
                Ok(Path::new(&home).join(rest))
            }
            None => self.path(value, path),
        }
    }

    /// `deny` and `deny_tcp` of a `confine` object (top-level or a server's).
    fn confine_fields(
        &self,
        map: &Map<String, Value>,
        path: &JsonPath,
    ) -> Result<ConfineFields, ConfigError> {
        let mut deny = Vec::new();
        if let Some(value) = map.get("deny") {
            let deny_path = path.key("deny");
            let Value::Array(items) = value else {
                return Err(expected(&deny_path, "an array of paths", value));
            };
            for (index, item) in items.iter().enumerate() {
                deny.push(self.deny_path(item, &deny_path.index(index))?);
            }
        }
        let deny_tcp = map
            .get("deny_tcp")
            .map(|value| as_bool(value, &path.key("deny_tcp")))
            .transpose()?;
        let deny_network = map
            .get("deny_network")
            .map(|value| as_bool(value, &path.key("deny_network")))
            .transpose()?;
        Ok((deny, deny_tcp, deny_network))
    }

    fn confine(&self, value: &Value, path: &JsonPath) -> Result<ConfineConfig, ConfigError> {
        let map = as_object(value, path)?;
        check_keys(map, path, CONFINE_KEYS)?;
        let (deny, deny_tcp, deny_network) = self.confine_fields(map, path)?;
        let namespaces = map
            .get("namespaces")
            .map(|value| as_bool(value, &path.key("namespaces")))
            .transpose()?;
        Ok(ConfineConfig {
            deny,
            deny_tcp: deny_tcp.unwrap_or(false),
            deny_network: deny_network.unwrap_or(false),
            namespaces: namespaces.unwrap_or(true),
            launcher: self.optional_path(map, path, "launcher")?,
        })
    }

    fn server_confine(
        &self,
        map: &Map<String, Value>,
        path: &JsonPath,
        top: &ConfineConfig,
    ) -> Result<ServerConfine, ConfigError> {
        let Some(value) = map.get("confine") else {
            return Ok(ServerConfine::Confined {
                deny: top.deny.clone(),
                deny_tcp: top.deny_tcp,
                deny_network: top.deny_network,
            });
        };
        let path = path.key("confine");
        let map = as_object(value, &path)?;
        check_keys(map, &path, SERVER_CONFINE_KEYS)?;
        if let Some(reason) = map.get("unconfined") {
            let reason_path = path.key("unconfined");
            let reason = as_str(reason, &reason_path)?.trim();
            if reason.is_empty() {
                return Err(reason_path.invalid(
                    "give the reason this server must run unconfined: it is shown in every load report",
                ));
            }
            if let Some(key) = ["deny", "deny_tcp", "deny_network"]
                .iter()
                .find(|k| map.contains_key(**k))
            {
                return Err(path
                    .key(key)
                    .invalid("an unconfined server is denied nothing"));
            }
            return Ok(ServerConfine::Unconfined {
                reason: reason.to_owned(),
            });
        }
        let (own, deny_tcp, deny_network) = self.confine_fields(map, &path)?;
        let mut deny = top.deny.clone();
        deny.extend(own);
        Ok(ServerConfine::Confined {
            deny,
            deny_tcp: deny_tcp.unwrap_or(top.deny_tcp),
            deny_network: deny_network.unwrap_or(top.deny_network),
        })
    }

    fn path(&self, value: &Value, path: &JsonPath) -> Result<PathBuf, ConfigError> {
        let text = non_empty_str(value, path)?;
        if text.contains('\0') {
            return Err(path.invalid("path contains a NUL character"));
        }
        Ok(self.base_dir.join(text))
    }

    fn path_or(
        &self,
        map: &Map<String, Value>,
        parent: &JsonPath,
        key: &str,
        default: &str,
    ) -> Result<PathBuf, ConfigError> {
        match map.get(key) {
            None => Ok(self.base_dir.join(default)),
            Some(value) => self.path(value, &parent.key(key)),
        }
    }

    fn optional_path(
        &self,
        map: &Map<String, Value>,
        parent: &JsonPath,
        key: &str,
    ) -> Result<Option<PathBuf>, ConfigError> {
        map.get(key)
            .map(|value| self.path(value, &parent.key(key)))
            .transpose()
    }

    fn rules(&self, value: &Value, path: &JsonPath) -> Result<RulesConfig, ConfigError> {
        let map = as_object(value, path)?;
        check_keys(map, path, RULES_KEYS)?;
        let Some(file) = map.get("file") else {
            return Err(path
                .key("file")
                .invalid("missing: the rules file decides which tools are registered"));
        };
        Ok(RulesConfig {
            file: self.path(file, &path.key("file"))?,
            component: self.optional_path(map, path, "component")?,
        })
    }

    fn policy(&self, value: &Value, path: &JsonPath) -> Result<PolicyConfig, ConfigError> {
        let map = as_object(value, path)?;
        check_keys(map, path, POLICY_KEYS)?;
        let cedar = self.optional_path(map, path, "cedar")?;
        if cedar.is_some() && (map.contains_key("component") || map.contains_key("settings")) {
            return Err(path.invalid(
                "`cedar` names the policy by itself: the built-in Cedar component decides with that file; drop `component` and `settings`, or `cedar`",
            ));
        }
        Ok(PolicyConfig {
            component: self.optional_path(map, path, "component")?,
            settings: self.optional_path(map, path, "settings")?,
            cedar,
        })
    }

    fn listen(&self, value: &Value, path: &JsonPath) -> Result<ListenConfig, ConfigError> {
        let map = as_object(value, path)?;
        check_keys(map, path, LISTEN_KEYS)?;
        let mut tokens = BTreeMap::new();
        if let Some(value) = map.get("tokens") {
            let tokens_path = path.key("tokens");
            for (name, token) in as_object(value, &tokens_path)? {
                let token_path = tokens_path.key(name);
                if name.is_empty() || name.chars().any(char::is_control) {
                    return Err(token_path.invalid(
                        "a token's name is the principal of its calls: give a printable name",
                    ));
                }
                let raw = as_str(token, &token_path)?;
                let token = expand(raw, &token_path, "(listen)", name, self.env)?;
                if token.chars().count() < MIN_TOKEN_CHARS
                    || token.chars().any(|c| c.is_whitespace() || c.is_control())
                {
                    return Err(token_path.invalid(format!(
                        "a token needs at least {MIN_TOKEN_CHARS} characters and no spaces (generate one with `openssl rand -hex 32`)"
                    )));
                }
                if tokens.values().any(|other| *other == token) {
                    return Err(token_path
                        .invalid("this token is also another name's: each name needs its own"));
                }
                tokens.insert(name.clone(), token);
            }
        }
        let mut allowed_origins = Vec::new();
        if let Some(value) = map.get("allowed_origins") {
            let origins_path = path.key("allowed_origins");
            let Value::Array(list) = value else {
                return Err(expected(&origins_path, "an array of origins", value));
            };
            for (index, origin) in list.iter().enumerate() {
                let origin_path = origins_path.index(index);
                let origin = as_str(origin, &origin_path)?;
                let lower = origin.to_ascii_lowercase();
                let valid = (lower.starts_with("http://") || lower.starts_with("https://"))
                    && !origin
                        .trim_end_matches('/')
                        .contains(|c: char| c.is_whitespace())
                    && origin.matches('/').count() == 2;
                if !valid {
                    return Err(origin_path.invalid(format!(
                        "`{origin}` is not an origin: write `scheme://host[:port]`, as browsers send it"
                    )));
                }
                allowed_origins.push(lower);
            }
        }
        let mut listen = ListenConfig {
            tokens,
            allowed_origins,
            ..ListenConfig::default()
        };
        for key in [
            "header_read_timeout_ms",
            "max_connections",
            "max_sessions_per_principal",
            "session_idle_timeout_ms",
        ] {
            let Some(value) = map.get(key) else {
                continue;
            };
            let key_path = path.key(key);
            let unit = if key.ends_with("_ms") {
                "milliseconds"
            } else {
                "a count"
            };
            let number = value.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
                expected(&key_path, &format!("a positive integer ({unit})"), value)
            })?;
            if key.ends_with("_ms") && number > MAX_TIMEOUT_MS {
                return Err(key_path.invalid(format!(
                    "`{number}` milliseconds is more than the limit of {MAX_TIMEOUT_MS} milliseconds"
                )));
            }
            match key {
                "header_read_timeout_ms" => listen.header_read_timeout_ms = number,
                "max_connections" => listen.max_connections = number,
                "max_sessions_per_principal" => listen.max_sessions_per_principal = number,
                _ => listen.session_idle_timeout_ms = number,
            }
        }
        Ok(listen)
    }

    fn store(&self, value: &Value, path: &JsonPath) -> Result<StoreConfig, ConfigError> {
        let map = as_object(value, path)?;
        check_keys(map, path, STORE_KEYS)?;
        let Some(url) = map.get("postgres") else {
            return Err(path.invalid(
                "names no store: write `{\"postgres\": \"${TOOLWARD_DATABASE_URL}\"}`, or leave `store` out for the state folder",
            ));
        };
        let url_path = path.key("postgres");
        let raw = non_empty_str(url, &url_path)?;
        let url = expand(raw, &url_path, "(store)", "postgres", self.env)?;
        Ok(StoreConfig::Postgres { url })
    }

    fn audit(&self, value: &Value, path: &JsonPath) -> Result<AuditConfig, ConfigError> {
        let map = as_object(value, path)?;
        check_keys(map, path, AUDIT_KEYS)?;
        let sync = match map.get("sync") {
            None => AuditSync::Always,
            Some(value) => {
                let sync_path = path.key("sync");
                match as_str(value, &sync_path)? {
                    "always" => AuditSync::Always,
                    "none" => AuditSync::None,
                    other => {
                        return Err(sync_path.invalid(format!(
                            "unknown sync mode `{other}` (expected `always` or `none`)"
                        )));
                    }
                }
            }
        };
        let record_arguments = match map.get("record_arguments") {
            None => false,
            Some(value) => as_bool(value, &path.key("record_arguments"))?,
        };
        Ok(AuditConfig {
            file: self.path_or(map, path, "file", DEFAULT_AUDIT_FILE)?,
            sync,
            record_arguments,
        })
    }

    /// One `mcpServers` entry; `None` when the entry is disabled.
    fn server(
        &mut self,
        name: &str,
        value: &Value,
        path: &JsonPath,
        top_limits: &Limits,
        top_confine: &ConfineConfig,
    ) -> Result<Option<ServerConfig>, ConfigError> {
        let map = as_object(value, path)?;
        for key in map.keys() {
            if IGNORED_CLIENT_KEYS.contains(&key.as_str()) {
                self.ignored.push(path.key(key).to_string());
            } else if UNSUPPORTED_SERVER_KEYS.contains(&key.as_str()) {
                return Err(path.key(key).invalid(
                    "not supported: toolward cannot honour it, and ignoring it would change how the server runs",
                ));
            } else if !SERVER_KEYS.contains(&key.as_str()) {
                return Err(path.key(key).invalid(format!(
                    "unknown key (expected one of {}; clients' {} are ignored)",
                    one_of(SERVER_KEYS),
                    one_of(IGNORED_CLIENT_KEYS)
                )));
            }
        }
        let disabled = match map.get("disabled") {
            Some(value) => as_bool(value, &path.key("disabled"))?,
            None => false,
        };
        let enabled = match map.get("enabled") {
            Some(value) => as_bool(value, &path.key("enabled"))?,
            None => true,
        };

        let transport = self.transport(name, map, path)?;
        let pass_env = match map.get("pass_env") {
            None => Vec::new(),
            Some(value) => {
                let list_path = path.key("pass_env");
                let Some(items) = value.as_array() else {
                    return Err(expected(&list_path, "an array of variable names", value));
                };
                let mut names = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let item_path = list_path.index(i);
                    let var = as_str(item, &item_path)?;
                    if !is_var_name(var) {
                        return Err(item_path.invalid(format!(
                            "`{var}` is not a variable name (`[A-Za-z_][A-Za-z0-9_]*`)"
                        )));
                    }
                    names.push(var.to_owned());
                }
                names
            }
        };
        let limits = match map.get("limits") {
            None => *top_limits,
            Some(value) => limits(value, &path.key("limits"), *top_limits)?,
        };
        let confine = self.server_confine(map, path, top_confine)?;
        if disabled || !enabled {
            return Ok(None);
        }
        Ok(Some(ServerConfig {
            name: name.to_owned(),
            transport,
            pass_env,
            limits,
            confine,
        }))
    }

    fn transport(
        &self,
        name: &str,
        map: &Map<String, Value>,
        path: &JsonPath,
    ) -> Result<ServerTransport, ConfigError> {
        // `type` (Claude Code, Cursor, VS Code) and `transport` (others) say the same thing.
        let mut declared: Option<(&'static str, JsonPath)> = None;
        for key in ["type", "transport"] {
            let Some(value) = map.get(key) else { continue };
            let key_path = path.key(key);
            let kind = match as_str(value, &key_path)? {
                "stdio" => "stdio",
                "http" | "streamable-http" | "streamable_http" | "streamableHttp" => "http",
                "sse" => {
                    return Err(key_path.invalid(
                        "the legacy HTTP+SSE transport is not supported (use streamable HTTP, `\"type\": \"http\"`)",
                    ));
                }
                other => {
                    return Err(key_path.invalid(format!(
                        "unknown transport `{other}` (expected `stdio` or `http`)"
                    )));
                }
            };
            if let Some((earlier, _)) = &declared
                && *earlier != kind
            {
                return Err(key_path.invalid("`type` and `transport` disagree"));
            }
            declared = Some((kind, key_path));
        }

        let has_command = map.contains_key("command");
        let has_url = map.contains_key("url");
        let kind = match (has_command, has_url) {
            (true, true) => {
                return Err(path.invalid("has both `command` (stdio) and `url` (http): give one"));
            }
            (false, false) => {
                return Err(path.invalid("has neither `command` (stdio) nor `url` (http)"));
            }
            (true, false) => "stdio",
            (false, true) => "http",
        };
        if let Some((declared, key_path)) = declared
            && declared != kind
        {
            let field = if kind == "stdio" { "command" } else { "url" };
            return Err(key_path.invalid(format!("says `{declared}` but the entry has `{field}`")));
        }
        let stdio_only = ["args", "env", "pass_env", "confine"];
        let http_only = ["headers"];
        let misplaced = if kind == "stdio" {
            &http_only[..]
        } else {
            &stdio_only[..]
        };
        if let Some(key) = misplaced.iter().find(|key| map.contains_key(**key)) {
            let needs = if kind == "stdio" {
                "`url` (http)"
            } else {
                "`command` (stdio)"
            };
            return Err(path
                .key(key)
                .invalid(format!("only a server with {needs} takes it")));
        }

        if kind == "stdio" {
            let command_path = path.key("command");
            let command = non_empty_str(map.get("command").unwrap_or(&Value::Null), &command_path)?;
            if command.contains('\0') {
                return Err(command_path.invalid("contains a NUL character"));
            }
            // A bare name is for the PATH lookup; a path is relative to the config folder.
            let command = if command.contains('/') || command.contains('\\') {
                self.base_dir.join(command)
            } else {
                PathBuf::from(command)
            };
            let args = match map.get("args") {
                None => Vec::new(),
                Some(value) => {
                    let args_path = path.key("args");
                    let Some(items) = value.as_array() else {
                        return Err(expected(&args_path, "an array of strings", value));
                    };
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, item)| {
                            let item_path = args_path.index(i);
                            let arg = as_str(item, &item_path)?;
                            if arg.contains('\0') {
                                return Err(item_path.invalid("contains a NUL character"));
                            }
                            Ok(arg.to_owned())
                        })
                        .collect::<Result<_, _>>()?
                }
            };
            let env = self.string_map(name, map, path, "env", check_env_entry)?;
            Ok(ServerTransport::Stdio { command, args, env })
        } else {
            let url_path = path.key("url");
            let url = non_empty_str(map.get("url").unwrap_or(&Value::Null), &url_path)?;
            let lower = url.to_ascii_lowercase();
            if !(lower.starts_with("http://") || lower.starts_with("https://")) {
                return Err(
                    url_path.invalid(format!("`{url}` is not an `http://` or `https://` URL"))
                );
            }
            if url.chars().any(char::is_control) || url.contains(' ') {
                return Err(
                    url_path.invalid(format!("`{url}` contains a space or control character"))
                );
            }
            let headers = self.string_map(name, map, path, "headers", check_header_entry)?;
            Ok(ServerTransport::Http {
                url: url.to_owned(),
                headers,
            })
        }
    }

    /// `env` or `headers`: an object of strings, `${NAME}` expanded, each entry checked.
    fn string_map(
        &self,
        server: &str,
        map: &Map<String, Value>,
        path: &JsonPath,
        field: &str,
        check: fn(&str, &str, &JsonPath) -> Result<(), ConfigError>,
    ) -> Result<BTreeMap<String, String>, ConfigError> {
        let Some(value) = map.get(field) else {
            return Ok(BTreeMap::new());
        };
        let field_path = path.key(field);
        let entries = as_object(value, &field_path)?;
        let mut out = BTreeMap::new();
        for (key, value) in entries {
            let entry_path = field_path.key(key);
            let raw = as_str(value, &entry_path)?;
            let expanded = expand(raw, &entry_path, server, key, self.env)?;
            check(key, &expanded, &entry_path)?;
            out.insert(key.clone(), expanded);
        }
        Ok(out)
    }
}

/// `path` with `.` and `..` components taken out, without reading the file system: to
/// compare the folders a config names.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn check_env_entry(key: &str, value: &str, path: &JsonPath) -> Result<(), ConfigError> {
    if key.is_empty() || key.contains('=') || key.contains('\0') {
        return Err(path.invalid(format!("`{key}` is not a usable variable name")));
    }
    if value.contains('\0') {
        return Err(path.invalid("value contains a NUL character"));
    }
    Ok(())
}

fn check_header_entry(key: &str, value: &str, path: &JsonPath) -> Result<(), ConfigError> {
    // RFC 9110 field name: a token.
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if key.is_empty() || !key.chars().all(token) {
        return Err(path.invalid(format!("`{key}` is not a valid header name")));
    }
    if value.chars().any(|c| c == '\r' || c == '\n' || c == '\0') {
        return Err(path.invalid("value contains a line break or NUL character"));
    }
    Ok(())
}

fn separator(value: &Value, path: &JsonPath) -> Result<String, ConfigError> {
    let text = non_empty_str(value, path)?;
    if text.chars().count() > MAX_SEPARATOR_CHARS {
        return Err(path.invalid(format!(
            "separator `{text}` is longer than the limit of {MAX_SEPARATOR_CHARS} characters"
        )));
    }
    if !text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(path.invalid(format!(
            "separator `{text}` may only contain `A-Z`, `a-z`, `0-9`, `_`, `-` and `.`"
        )));
    }
    Ok(text.to_owned())
}

fn server_name(name: &str, separator: &str, path: &JsonPath) -> Result<(), ConfigError> {
    if name.is_empty() {
        return Err(path.invalid("server name must not be empty"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
    {
        return Err(path.invalid(format!(
            "server name `{name}` may only contain `A-Z`, `a-z`, `0-9`, `_` and `-`"
        )));
    }
    if name.contains(separator) {
        return Err(path.invalid(format!(
            "server name `{name}` contains the separator `{separator}`, so its tool names would be ambiguous"
        )));
    }
    Ok(())
}

fn limits(value: &Value, path: &JsonPath, base: Limits) -> Result<Limits, ConfigError> {
    let map = as_object(value, path)?;
    check_keys(map, path, LIMIT_KEYS)?;
    let mut limits = base;
    for (key, value) in map {
        let key_path = path.key(key);
        let Some(field) = limits.field_mut(key) else {
            return Err(key_path.invalid("unknown limit"));
        };
        let unit = if key.ends_with("_ms") {
            "milliseconds"
        } else if key.ends_with("_bytes") {
            "bytes"
        } else {
            "a count"
        };
        // Only a count of restarts may be zero: a limit of nothing would refuse everything.
        let (least, kind) = if key == "restart_attempts" {
            (0, "a non-negative integer")
        } else {
            (1, "a positive integer")
        };
        let Some(number) = value.as_u64().filter(|n| *n >= least) else {
            return Err(match value {
                Value::Number(n) => key_path.invalid(format!("`{n}` is not {kind} ({unit})")),
                _ => expected(&key_path, &format!("{kind} ({unit})"), value),
            });
        };
        if key.ends_with("_ms") && number > MAX_TIMEOUT_MS {
            return Err(key_path.invalid(format!(
                "`{number}` milliseconds is more than the limit of {MAX_TIMEOUT_MS} milliseconds"
            )));
        }
        *field = number;
    }
    Ok(limits)
}

/// `guest`: bounds on the components. Fuel is wasmtime's unit (about one wasm instruction);
/// `memory_bytes` is one instance's linear memory; `max_instances` the pool's slots;
/// `ready_instances` may be 0 (decide inline), every other field must be positive.
fn guest(value: &Value, path: &JsonPath) -> Result<GuestLimits, ConfigError> {
    let map = as_object(value, path)?;
    check_keys(map, path, GUEST_KEYS)?;
    let mut limits = GuestLimits::default();
    for (key, value) in map {
        let key_path = path.key(key);
        let least = u64::from(key != "ready_instances");
        let unit = match key.as_str() {
            "memory_bytes" => "bytes",
            "max_instances" | "ready_instances" => "a count",
            _ => "fuel, about one wasm instruction each",
        };
        let number = value.as_u64().filter(|n| *n >= least).ok_or_else(|| {
            let kind = if least == 0 {
                "a non-negative integer"
            } else {
                "a positive integer"
            };
            expected(&key_path, &format!("{kind} ({unit})"), value)
        })?;
        let too_large = || key_path.invalid(format!("`{number}` is too large"));
        match key.as_str() {
            "decide_fuel" => limits.decide_fuel = number,
            "classify_fuel" => limits.classify_fuel = number,
            "configure_fuel" => limits.configure_fuel = number,
            "memory_bytes" => {
                limits.memory_bytes = usize::try_from(number).map_err(|_| too_large())?;
            }
            "max_instances" => {
                limits.max_instances = u32::try_from(number).map_err(|_| too_large())?;
            }
            _ => limits.ready_instances = u32::try_from(number).map_err(|_| too_large())?,
        }
    }
    Ok(limits)
}

/// Replaces `${NAME}` in `raw`; `$${` is a literal `${`, any other `$` is literal.
fn expand(
    raw: &str,
    path: &JsonPath,
    server: &str,
    key: &str,
    env: EnvLookup<'_>,
) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('$') {
        out.push_str(rest.get(..at).unwrap_or_default());
        let tail = rest.get(at..).unwrap_or_default();
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let Some(close) = after.find('}') else {
                return Err(path.invalid(format!(
                    "`{tail}` has no closing `}}` (write `$${{` for a literal `${{`)"
                )));
            };
            let name = after.get(..close).unwrap_or_default();
            if !is_var_name(name) {
                return Err(path.invalid(format!(
                    "`${{{name}}}` is not a variable reference: only `${{NAME}}` with `NAME` in `[A-Za-z_][A-Za-z0-9_]*` is supported (write `$${{` for a literal `${{`)"
                )));
            }
            match env(name) {
                Ok(value) => out.push_str(&value),
                Err(VarError::NotPresent) => {
                    return Err(ConfigError::MissingEnvVar {
                        path: path.to_string(),
                        server: server.to_owned(),
                        key: key.to_owned(),
                        variable: name.to_owned(),
                    });
                }
                Err(VarError::NotUnicode(_)) => {
                    return Err(ConfigError::EnvVarNotUnicode {
                        path: path.to_string(),
                        server: server.to_owned(),
                        key: key.to_owned(),
                        variable: name.to_owned(),
                    });
                }
            }
            rest = after.get(close + 1..).unwrap_or_default();
        } else {
            out.push('$');
            rest = tail.get(1..).unwrap_or_default();
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Parses JSON text, refusing an object that has a key twice.
fn parse_strict(text: &str) -> Result<Value, ConfigError> {
    serde_json::from_str::<StrictValue>(text)
        .map(|v| v.0)
        .map_err(|source| ConfigError::Parse {
            line: source.line(),
            column: source.column(),
            source,
        })
}

/// A JSON value whose objects had no repeated key.
struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            if map.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate key `{key}`")));
            }
            let StrictValue(value) = access.next_value()?;
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> PathBuf {
        PathBuf::from("/etc/toolward")
    }

    fn no_env(_: &str) -> Result<String, VarError> {
        Err(VarError::NotPresent)
    }

    #[test]
    fn a_server_confine_adds_to_the_top_level_deny_and_its_deny_tcp_wins() {
        let home = |name: &str| match name {
            "HOME" => Ok("/home/op".to_owned()),
            _ => Err(VarError::NotPresent),
        };
        let value = json!({
            "mcpServers": {
                "fs": { "command": "node", "confine": { "deny": ["secrets"], "deny_tcp": false } },
                "memory": { "command": "node" },
            },
            "rules": { "file": "rules.json" },
            "confine": { "deny": ["~/.ssh", "/srv/keys"], "deny_tcp": true },
        });
        let config = Config::from_value_with_env(value, &base(), &home).unwrap();
        assert_eq!(
            config.servers["fs"].confine,
            ServerConfine::Confined {
                deny: vec![
                    PathBuf::from("/home/op/.ssh"),
                    PathBuf::from("/srv/keys"),
                    PathBuf::from("/etc/toolward/secrets")
                ],
                deny_tcp: false,
                deny_network: false,
            }
        );
        assert_eq!(
            config.servers["memory"].confine,
            ServerConfine::Confined {
                deny: vec![PathBuf::from("/home/op/.ssh"), PathBuf::from("/srv/keys")],
                deny_tcp: true,
                deny_network: false,
            }
        );
        assert_eq!(
            config.servers_dir,
            PathBuf::from("/etc/toolward/.toolward-servers")
        );
    }

    #[test]
    fn an_unconfined_server_needs_a_reason_and_is_denied_nothing() {
        let text = err_text(with_servers(
            json!({ "x": { "command": "x", "confine": { "unconfined": " " } } }),
        ));
        assert!(
            text.starts_with("mcpServers.x.confine.unconfined: give the reason"),
            "{text}"
        );
        let text = err_text(with_servers(
            json!({ "x": { "command": "x", "confine": { "unconfined": "docker", "deny": [] } } }),
        ));
        assert!(
            text.starts_with("mcpServers.x.confine.deny: an unconfined server"),
            "{text}"
        );
        let config = load(with_servers(
            json!({ "x": { "command": "x", "confine": { "unconfined": "it drives docker" } } }),
        ))
        .unwrap();
        assert_eq!(
            config.servers["x"].confine,
            ServerConfine::Unconfined {
                reason: "it drives docker".to_owned()
            }
        );
        let text = err_text(with_servers(
            json!({ "x": { "url": "https://example.invalid", "confine": { "deny_tcp": true } } }),
        ));
        assert!(
            text.starts_with("mcpServers.x.confine: only a server with"),
            "{text}"
        );
    }

    #[test]
    fn servers_homes_inside_the_state_folder_and_a_tilde_without_home_are_refused() {
        let mut value = with_servers(json!({ "x": { "command": "x" } }));
        value["servers_dir"] = json!("state/../state/homes");
        let text = err_text(value);
        assert!(text.starts_with("servers_dir: `"), "{text}");
        assert!(text.contains("is inside the state folder"), "{text}");
        let mut value = with_servers(json!({ "x": { "command": "x" } }));
        value["confine"] = json!({ "deny": ["~/.aws"] });
        let text = err_text(value);
        assert!(text.contains("`HOME` is not set"), "{text}");
    }

    /// A minimal valid config with `servers` as its `mcpServers`.
    fn with_servers(servers: Value) -> Value {
        json!({ "mcpServers": servers, "rules": { "file": "rules.json" } })
    }

    fn load(value: Value) -> Result<Config, ConfigError> {
        Config::from_value_with_env(value, &base(), &no_env)
    }

    fn err_text(value: Value) -> String {
        load(value).unwrap_err().to_string()
    }

    #[test]
    fn pasted_claude_desktop_block_loads_unchanged() {
        let text = r#"{
          "mcpServers": {
            "filesystem": {
              "command": "npx",
              "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop", "/Users/me/Downloads"]
            },
            "github": {
              "command": "docker",
              "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
              "env": { "GITHUB_PERSONAL_ACCESS_TOKEN": "<YOUR_TOKEN>" }
            }
          },
          "rules": { "file": "rules.json" }
        }"#;
        let config = Config::from_str(text, &base()).unwrap();
        assert_eq!(config.servers.len(), 2);
        let fs = &config.servers["filesystem"];
        assert_eq!(
            fs.transport,
            ServerTransport::Stdio {
                command: PathBuf::from("npx"),
                args: vec![
                    "-y".into(),
                    "@modelcontextprotocol/server-filesystem".into(),
                    "/Users/me/Desktop".into(),
                    "/Users/me/Downloads".into()
                ],
                env: BTreeMap::new(),
            }
        );
        let ServerTransport::Stdio { env, .. } = &config.servers["github"].transport else {
            panic!("github is stdio");
        };
        assert_eq!(env["GITHUB_PERSONAL_ACCESS_TOKEN"], "<YOUR_TOKEN>");
        assert!(config.ignored_keys.is_empty() && config.disabled_servers.is_empty());
    }

    #[test]
    fn pasted_claude_code_block_with_type_fields_loads() {
        let config = load(with_servers(json!({
            "local": { "type": "stdio", "command": "uvx", "args": ["mcp-server-git"], "env": {} },
            "remote": { "type": "http", "url": "https://mcp.example.com/mcp", "headers": { "X-Team": "a" } },
            "cursor": { "transport": "streamable-http", "url": "http://127.0.0.1:8080/mcp" }
        })))
        .unwrap();
        assert!(matches!(
            config.servers["local"].transport,
            ServerTransport::Stdio { .. }
        ));
        assert_eq!(
            config.servers["remote"].transport,
            ServerTransport::Http {
                url: "https://mcp.example.com/mcp".into(),
                headers: BTreeMap::from([("X-Team".to_owned(), "a".to_owned())]),
            }
        );
        assert!(matches!(
            config.servers["cursor"].transport,
            ServerTransport::Http { .. }
        ));
    }

    #[test]
    fn env_var_reference_takes_value_from_toolward_environment() {
        let value = with_servers(json!({
            "gh": { "command": "gh-mcp", "env": { "PATH_COPY": "${PATH}" } },
            "api": { "url": "https://api.example.com/mcp", "headers": { "Authorization": "Bearer ${API_TOKEN}" } }
        }));
        let env = |name: &str| match name {
            "API_TOKEN" => Ok("s3cret".to_owned()),
            other => std::env::var(other),
        };
        let config = Config::from_value_with_env(value.clone(), &base(), &env).unwrap();
        let ServerTransport::Stdio { env: vars, .. } = &config.servers["gh"].transport else {
            panic!("gh is stdio");
        };
        assert_eq!(vars["PATH_COPY"], std::env::var("PATH").unwrap());
        let ServerTransport::Http { headers, .. } = &config.servers["api"].transport else {
            panic!("api is http");
        };
        assert_eq!(headers["Authorization"], "Bearer s3cret");
        // Expanded values, often credentials, stay out of debug output.
        assert!(!format!("{config:?}").contains("s3cret"));

        // The public entry point reads the real environment.
        let real =
            with_servers(json!({ "gh": { "command": "gh-mcp", "env": { "P": "${PATH}" } } }));
        let config = Config::from_value(real, &base()).unwrap();
        let ServerTransport::Stdio { env: vars, .. } = &config.servers["gh"].transport else {
            panic!("gh is stdio");
        };
        assert_eq!(vars["P"], std::env::var("PATH").unwrap());
    }

    #[test]
    fn store_postgres_url_is_expanded_from_the_environment_and_kept_out_of_debug_output() {
        let mut value = with_servers(json!({ "gh": { "command": "gh-mcp" } }));
        value["store"] = json!({ "postgres": "${DATABASE_URL}" });
        let env = |name: &str| match name {
            "DATABASE_URL" => Ok("postgres://tw:s3cret@db.internal/toolward".to_owned()),
            _ => Err(VarError::NotPresent),
        };
        let config = Config::from_value_with_env(value.clone(), &base(), &env).unwrap();
        assert_eq!(
            config.store,
            StoreConfig::Postgres {
                url: "postgres://tw:s3cret@db.internal/toolward".to_owned()
            }
        );
        assert!(!format!("{config:?}").contains("s3cret"));
        // Without the variable: an error naming it.
        let err = Config::from_value_with_env(value.clone(), &base(), &no_env).unwrap_err();
        assert!(
            matches!(&err, ConfigError::MissingEnvVar { variable, .. } if variable == "DATABASE_URL"),
            "{err}"
        );
        // A store that names nothing, or a key it does not know.
        value["store"] = json!({ "postgress": "x" });
        let err = Config::from_value_with_env(value, &base(), &env).unwrap_err();
        assert!(
            err.to_string().starts_with("store.postgress: unknown key"),
            "{err}"
        );
        // Absent: the state folder.
        let config = load(with_servers(json!({ "gh": { "command": "gh-mcp" } }))).unwrap();
        assert_eq!(config.store, StoreConfig::StateDir);
    }

    #[test]
    fn missing_env_var_names_server_key_and_variable() {
        let err = load(with_servers(json!({
            "github": { "command": "gh", "env": { "GITHUB_TOKEN": "${TOOLWARD_TEST_UNSET_VARIABLE}" } }
        })))
        .unwrap_err();
        let ConfigError::MissingEnvVar {
            path,
            server,
            key,
            variable,
        } = &err
        else {
            panic!("expected MissingEnvVar, got {err}");
        };
        assert_eq!(path, "mcpServers.github.env.GITHUB_TOKEN");
        assert_eq!((server.as_str(), key.as_str()), ("github", "GITHUB_TOKEN"));
        assert_eq!(variable, "TOOLWARD_TEST_UNSET_VARIABLE");
        assert_eq!(
            err.to_string(),
            "mcpServers.github.env.GITHUB_TOKEN: environment variable `TOOLWARD_TEST_UNSET_VARIABLE` is not set (server `github`, key `GITHUB_TOKEN`)"
        );
    }

    #[test]
    fn dollar_dollar_brace_is_a_literal_and_other_dollars_stay() {
        let config = load(with_servers(json!({
            "s": { "command": "s", "env": { "A": "$${HOME}", "B": "pa$$word$", "C": "$HOME" } }
        })))
        .unwrap();
        let ServerTransport::Stdio { env, .. } = &config.servers["s"].transport else {
            panic!("stdio");
        };
        assert_eq!(env["A"], "${HOME}");
        assert_eq!(env["B"], "pa$$word$");
        assert_eq!(env["C"], "$HOME");
    }

    #[test]
    fn default_value_syntax_and_unclosed_references_are_refused() {
        let text = err_text(with_servers(
            json!({ "s": { "command": "s", "env": { "A": "${X:-y}" } } }),
        ));
        assert!(
            text.starts_with("mcpServers.s.env.A: `${X:-y}` is not a variable reference"),
            "{text}"
        );
        let text = err_text(with_servers(
            json!({ "s": { "command": "s", "env": { "A": "${X" } } }),
        ));
        assert!(
            text.starts_with("mcpServers.s.env.A: `${X` has no closing"),
            "{text}"
        );
    }

    #[test]
    fn args_are_not_expanded() {
        let config = load(with_servers(
            json!({ "s": { "command": "s", "args": ["${HOME}"] } }),
        ))
        .unwrap();
        let ServerTransport::Stdio { args, .. } = &config.servers["s"].transport else {
            panic!("stdio");
        };
        assert_eq!(args, &["${HOME}".to_owned()]);
    }

    #[test]
    fn relative_paths_resolve_against_config_folder() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("conf");
        std::fs::create_dir(&sub).unwrap();
        let file = sub.join("toolward.json");
        std::fs::write(
            &file,
            r#"{
              "mcpServers": {
                "local": { "command": "./bin/server", "args": ["./data"] },
                "npm": { "command": "npx" },
                "abs": { "command": "/usr/bin/env" }
              },
              "rules": { "file": "rules.json", "component": "wasm/rules.wasm" },
              "policy": { "component": "../policy.wasm", "settings": "settings.json" },
              "audit": { "file": "logs/audit.jsonl" }
            }"#,
        )
        .unwrap();
        let config = Config::from_path(&file).unwrap();
        assert_eq!(config.base_dir, sub);
        assert_eq!(config.rules.file, sub.join("rules.json"));
        assert_eq!(config.rules.component, Some(sub.join("wasm/rules.wasm")));
        assert_eq!(config.policy.component, Some(sub.join("../policy.wasm")));
        assert_eq!(config.policy.settings, Some(sub.join("settings.json")));
        assert_eq!(config.audit.file, sub.join("logs/audit.jsonl"));
        assert_eq!(config.manifest, sub.join(DEFAULT_MANIFEST));
        assert_eq!(config.state_dir, sub.join(DEFAULT_STATE_DIR));
        let command = |name: &str| match &config.servers[name].transport {
            ServerTransport::Stdio { command, args, .. } => (command.clone(), args.clone()),
            ServerTransport::Http { .. } => panic!("stdio"),
        };
        assert_eq!(
            command("local"),
            (sub.join("./bin/server"), vec!["./data".to_owned()])
        );
        assert_eq!(command("npm").0, PathBuf::from("npx"));
        assert_eq!(command("abs").0, PathBuf::from("/usr/bin/env"));
    }

    #[test]
    fn config_file_in_the_current_folder_resolves_against_an_absolute_folder() {
        // `toolward.json` has an empty parent; paths must not end up relative to nothing.
        let err = Config::from_path(Path::new("toolward-test-no-such-file.json")).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }));
        let value = with_servers(json!({ "s": { "command": "s" } }));
        let config = Config::from_value_with_env(value, Path::new("/srv/tw"), &no_env).unwrap();
        assert!(config.rules.file.is_absolute());
    }

    #[test]
    fn defaults_apply_when_keys_are_absent() {
        let config = load(with_servers(json!({ "s": { "command": "s" } }))).unwrap();
        assert_eq!(config.limits, Limits::default());
        assert_eq!(config.limits.max_page_bytes, 16 * 1024 * 1024);
        assert_eq!(config.limits.call_timeout(), Duration::from_secs(300));
        assert_eq!(config.servers["s"].limits, Limits::default());
        assert_eq!(config.audit.sync, AuditSync::Always);
        assert!(!config.audit.record_arguments);
        assert_eq!(config.audit.file, base().join("audit.jsonl"));
        assert_eq!(config.separator, "__");
        assert_eq!(config.tool_name_pattern, DEFAULT_TOOL_NAME_PATTERN);
        assert_eq!(config.principal, "operator");
        assert_eq!(config.policy, PolicyConfig::default());
        assert_eq!(config.exposed_name("s", "read"), "s__read");
    }

    #[test]
    fn all_top_level_keys_are_read() {
        let config = load(json!({
            "$schema": "https://example.invalid/config.schema.json",
            "mcpServers": { "fs": { "command": "fs" } },
            "rules": { "file": "r.json" },
            "policy": {},
            "manifest": "/var/lib/tw/manifest.json",
            "audit": { "file": "a.jsonl", "sync": "none", "record_arguments": true },
            "state_dir": "st",
            "principal": "alice",
            "separator": "-x-",
            "tool_name_pattern": "^[a-z_-]{1,40}$",
            "limits": { "max_tools": 10 }
        }))
        .unwrap();
        assert_eq!(config.manifest, PathBuf::from("/var/lib/tw/manifest.json"));
        assert_eq!(config.audit.sync, AuditSync::None);
        assert!(config.audit.record_arguments);
        assert_eq!(config.principal, "alice");
        assert_eq!(config.exposed_name("fs", "read"), "fs-x-read");
        assert_eq!(config.limits.max_tools, 10);
        assert_eq!(config.servers["fs"].limits.max_tools, 10);
    }

    #[test]
    fn server_limits_override_top_level_limits_per_key() {
        let mut value = with_servers(json!({
            "slow": { "command": "slow", "limits": { "call_timeout_ms": 900000, "max_result_bytes": 2048 } },
            "plain": { "command": "plain" }
        }));
        value["limits"] = json!({ "max_result_bytes": 4096, "start_timeout_ms": 5000 });
        let config = load(value).unwrap();
        let slow = config.servers["slow"].limits;
        assert_eq!(
            (
                slow.call_timeout_ms,
                slow.max_result_bytes,
                slow.start_timeout_ms
            ),
            (900_000, 2048, 5000)
        );
        let plain = config.servers["plain"].limits;
        assert_eq!(
            (plain.call_timeout_ms, plain.max_result_bytes),
            (DEFAULT_CALL_TIMEOUT_MS, 4096)
        );
    }

    #[test]
    fn zero_negative_fractional_and_huge_limits_are_refused() {
        let bad = |limits: Value| {
            let mut value = with_servers(json!({ "s": { "command": "s" } }));
            value["limits"] = limits;
            err_text(value)
        };
        assert_eq!(
            bad(json!({ "max_tools": 0 })),
            "limits.max_tools: `0` is not a positive integer (a count)"
        );
        assert_eq!(
            bad(json!({ "max_page_bytes": 1.5 })),
            "limits.max_page_bytes: `1.5` is not a positive integer (bytes)"
        );
        assert_eq!(
            bad(json!({ "call_timeout_ms": "60s" })),
            "limits.call_timeout_ms: expected a positive integer (milliseconds), found a string"
        );
        assert!(
            bad(json!({ "call_timeout_ms": 86_400_001 }))
                .contains("more than the limit of 86400000 milliseconds")
        );
    }

    #[test]
    fn separator_inside_server_name_is_refused() {
        let text = err_text(with_servers(json!({ "my__fs": { "command": "fs" } })));
        assert_eq!(
            text,
            "mcpServers.my__fs: server name `my__fs` contains the separator `__`, so its tool names would be ambiguous"
        );
        let mut value = with_servers(json!({ "a-b": { "command": "fs" } }));
        value["separator"] = json!("-");
        assert!(err_text(value).contains("contains the separator `-`"));
    }

    #[test]
    fn server_name_with_other_characters_is_refused() {
        let text = err_text(with_servers(json!({ "my.fs": { "command": "fs" } })));
        assert!(
            text.starts_with(r#"mcpServers["my.fs"]: server name `my.fs` may only contain"#),
            "{text}"
        );
        let text = err_text(with_servers(json!({ "": { "command": "fs" } })));
        assert!(text.contains("must not be empty"), "{text}");
    }

    #[test]
    fn unknown_key_names_its_path() {
        let mut value = with_servers(json!({ "s": { "command": "s" } }));
        value["audit"] = json!({ "synk": "none" });
        let text = err_text(value);
        assert!(
            text.starts_with(
                "audit.synk: unknown key (expected one of `file`, `sync`, `record_arguments`)"
            ),
            "{text}"
        );

        let mut value = with_servers(json!({ "s": { "command": "s" } }));
        value["polcy"] = json!({});
        assert!(err_text(value).starts_with("polcy: unknown key"));

        let text = err_text(with_servers(
            json!({ "s": { "command": "s", "limits": { "call_timeout": 5 } } }),
        ));
        assert!(
            text.starts_with("mcpServers.s.limits.call_timeout: unknown key"),
            "{text}"
        );

        let text = err_text(with_servers(
            json!({ "s": { "command": "s", "pass_evn": ["A"] } }),
        ));
        assert!(
            text.starts_with("mcpServers.s.pass_evn: unknown key"),
            "{text}"
        );
    }

    #[test]
    fn client_keys_in_a_server_entry_are_ignored_and_listed() {
        let config = load(with_servers(json!({
            "s": { "command": "s", "autoApprove": ["write_file"], "description": "files", "timeout": 60 }
        })))
        .unwrap();
        assert_eq!(
            config.ignored_keys,
            vec![
                "mcpServers.s.autoApprove",
                "mcpServers.s.description",
                "mcpServers.s.timeout"
            ]
        );
    }

    #[test]
    fn cwd_and_env_file_are_refused_not_ignored() {
        for key in ["cwd", "envFile"] {
            let text = err_text(with_servers(json!({ "s": { "command": "s", key: "x" } })));
            assert!(
                text.starts_with(&format!("mcpServers.s.{key}: not supported")),
                "{text}"
            );
        }
    }

    #[test]
    fn disabled_server_is_left_out() {
        let config = load(with_servers(json!({
            "on": { "command": "on" },
            "off": { "command": "off", "disabled": true },
            "zed": { "command": "zed", "enabled": false }
        })))
        .unwrap();
        assert_eq!(config.servers.keys().collect::<Vec<_>>(), vec!["on"]);
        assert_eq!(config.disabled_servers, vec!["off", "zed"]);
    }

    #[test]
    fn listen_bounds_are_read_and_default_to_their_constants() {
        let mut value = with_servers(json!({ "fs": { "command": "npx" } }));
        let listen = load(value.clone()).unwrap().listen;
        assert_eq!(
            listen.header_read_timeout_ms,
            DEFAULT_HEADER_READ_TIMEOUT_MS
        );
        assert_eq!(listen.max_connections, DEFAULT_MAX_CONNECTIONS);
        assert_eq!(
            listen.max_sessions_per_principal,
            DEFAULT_MAX_SESSIONS_PER_PRINCIPAL
        );
        assert_eq!(
            listen.session_idle_timeout_ms,
            DEFAULT_SESSION_IDLE_TIMEOUT_MS
        );
        value["listen"] = json!({
            "header_read_timeout_ms": 2500,
            "max_connections": 32,
            "max_sessions_per_principal": 4,
            "session_idle_timeout_ms": 60000,
        });
        let listen = load(value.clone()).unwrap().listen;
        assert_eq!(listen.header_read_timeout_ms, 2500);
        assert_eq!(listen.max_connections, 32);
        assert_eq!(listen.max_sessions_per_principal, 4);
        assert_eq!(listen.session_idle_timeout_ms, 60000);
        value["listen"] = json!({ "max_connections": 0 });
        assert_eq!(
            err_text(value.clone()),
            "listen.max_connections: expected a positive integer (a count), found a number"
        );
        value["listen"] = json!({ "header_read_timeout_ms": MAX_TIMEOUT_MS + 1 });
        assert!(
            err_text(value).contains("more than the limit of 86400000 milliseconds"),
            "a timeout past a day is refused"
        );
    }

    #[test]
    fn guest_limits_are_read_and_default_to_the_component_constants() {
        let mut value = with_servers(json!({ "fs": { "command": "npx" } }));
        assert_eq!(load(value.clone()).unwrap().guest, GuestLimits::default());
        value["guest"] = json!({
            "configure_fuel": 20_000_000_000_u64,
            "memory_bytes": 268_435_456,
            "ready_instances": 0,
        });
        let guest = load(value.clone()).unwrap().guest;
        assert_eq!(guest.configure_fuel, 20_000_000_000);
        assert_eq!(guest.memory_bytes, 268_435_456);
        assert_eq!(guest.ready_instances, 0);
        assert_eq!(
            guest.decide_fuel,
            crate::component::DEFAULT_DECIDE_FUEL,
            "fields not given keep their defaults"
        );
        value["guest"] = json!({ "decide_fuel": 0 });
        assert_eq!(
            err_text(value.clone()),
            "guest.decide_fuel: expected a positive integer (fuel, about one wasm instruction each), found a number"
        );
        value["guest"] = json!({ "max_instances": 5_000_000_000_u64 });
        assert_eq!(
            err_text(value.clone()),
            "guest.max_instances: `5000000000` is too large"
        );
        value["guest"] = json!({ "configure_fule": 1 });
        assert!(
            err_text(value).starts_with("guest.configure_fule:"),
            "an unknown key is named"
        );
    }

    #[test]
    fn wrong_type_names_its_path() {
        let text = err_text(with_servers(
            json!({ "fs": { "command": "npx", "args": ["-y", 7] } }),
        ));
        assert_eq!(
            text,
            "mcpServers.fs.args[1]: expected a string, found a number"
        );
        let text = err_text(with_servers(
            json!({ "fs": { "command": "npx", "env": { "A": true } } }),
        ));
        assert_eq!(
            text,
            "mcpServers.fs.env.A: expected a string, found a boolean"
        );
        assert_eq!(
            err_text(json!([])),
            "config: expected an object, found an array"
        );
    }

    #[test]
    fn server_needs_exactly_one_of_command_and_url() {
        let text = err_text(with_servers(
            json!({ "s": { "command": "s", "url": "https://x" } }),
        ));
        assert!(text.starts_with("mcpServers.s: has both"), "{text}");
        let text = err_text(with_servers(json!({ "s": { "args": [] } })));
        assert!(text.starts_with("mcpServers.s: has neither"), "{text}");
    }

    #[test]
    fn transport_type_must_agree_with_the_entry() {
        let text = err_text(with_servers(
            json!({ "s": { "type": "stdio", "url": "https://x" } }),
        ));
        assert_eq!(
            text,
            "mcpServers.s.type: says `stdio` but the entry has `url`"
        );
        let text = err_text(with_servers(
            json!({ "s": { "type": "sse", "url": "https://x/sse" } }),
        ));
        assert!(
            text.starts_with("mcpServers.s.type: the legacy HTTP+SSE transport is not supported"),
            "{text}"
        );
        let text = err_text(with_servers(
            json!({ "s": { "url": "https://x", "env": {} } }),
        ));
        assert!(
            text.starts_with("mcpServers.s.env: only a server with `command`"),
            "{text}"
        );
        let text = err_text(with_servers(json!({ "s": { "url": "ftp://x" } })));
        assert!(
            text.starts_with("mcpServers.s.url: `ftp://x` is not"),
            "{text}"
        );
    }

    #[test]
    fn header_value_with_line_break_is_refused() {
        let value =
            with_servers(json!({ "s": { "url": "https://x", "headers": { "X-A": "${INJECT}" } } }));
        let env = |_: &str| Ok("a\r\nHost: evil".to_owned());
        let err = Config::from_value_with_env(value, &base(), &env).unwrap_err();
        assert_eq!(
            err.to_string(),
            "mcpServers.s.headers.X-A: value contains a line break or NUL character"
        );
    }

    #[test]
    fn pass_env_takes_variable_names() {
        let config = load(with_servers(
            json!({ "s": { "command": "s", "pass_env": ["AWS_PROFILE", "LANG"] } }),
        ))
        .unwrap();
        assert_eq!(config.servers["s"].pass_env, vec!["AWS_PROFILE", "LANG"]);
        let text = err_text(with_servers(
            json!({ "s": { "command": "s", "pass_env": ["A=B"] } }),
        ));
        assert!(
            text.starts_with("mcpServers.s.pass_env[0]: `A=B` is not a variable name"),
            "{text}"
        );
    }

    #[test]
    fn missing_servers_or_rules_are_refused() {
        assert!(err_text(json!({ "rules": { "file": "r" } })).starts_with("mcpServers: missing"));
        assert!(
            err_text(json!({ "rules": { "file": "r" }, "mcpServers": {} }))
                .starts_with("mcpServers: no servers")
        );
        assert!(
            err_text(json!({ "mcpServers": { "s": { "command": "s" } } }))
                .starts_with("rules: missing")
        );
        assert!(
            err_text(json!({ "mcpServers": { "s": { "command": "s" } }, "rules": {} }))
                .starts_with("rules.file: missing")
        );
    }

    #[test]
    fn unanchored_tool_name_pattern_is_refused() {
        let mut value = with_servers(json!({ "s": { "command": "s" } }));
        value["tool_name_pattern"] = json!("[a-z]+");
        assert!(
            err_text(value).starts_with("tool_name_pattern: pattern `[a-z]+` must be anchored")
        );
    }

    #[test]
    fn bad_audit_sync_mode_is_refused() {
        let mut value = with_servers(json!({ "s": { "command": "s" } }));
        value["audit"] = json!({ "sync": "sometimes" });
        assert_eq!(
            err_text(value),
            "audit.sync: unknown sync mode `sometimes` (expected `always` or `none`)"
        );
    }

    #[test]
    fn duplicate_key_in_text_is_refused() {
        let text = r#"{ "mcpServers": { "s": { "command": "s" } }, "rules": { "file": "r" },
                       "audit": { "sync": "always", "sync": "none" } }"#;
        let err = Config::from_str(text, &base()).unwrap_err();
        let ConfigError::Parse { line, source, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(*line, 2);
        assert!(
            source.to_string().contains("duplicate key `sync`"),
            "{source}"
        );
    }

    #[test]
    fn a_config_that_starts_with_a_byte_order_mark_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("toolward.json");
        let text = r#"{"mcpServers": {"s": {"command": "npx"}}, "rules": {"file": "r.json"}, "principal": "bom"}"#;
        std::fs::write(
            &file,
            [b"\xEF\xBB\xBF".as_slice(), text.as_bytes()].concat(),
        )
        .unwrap();
        assert_eq!(Config::from_path(&file).unwrap().principal, "bom");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_config_path_naming_dev_zero_is_refused_before_reading() {
        let error = Config::from_path(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("is a character device, not a regular file"),
            "{error}"
        );
    }

    #[test]
    fn config_file_over_the_size_limit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("toolward.json");
        std::fs::write(&file, vec![b' '; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        assert!(matches!(
            Config::from_path(&file).unwrap_err(),
            ConfigError::TooLarge { .. }
        ));
    }

    #[test]
    fn json_schema_names_the_same_keys_as_the_reader() {
        let schema: Value =
            serde_json::from_str(include_str!("../../docs/config.schema.json")).unwrap();
        let keys = |v: &Value| -> Vec<String> {
            let mut keys: Vec<String> = v["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            keys.sort();
            keys
        };
        let sorted = |list: &[&str]| -> Vec<String> {
            let mut list: Vec<String> = list.iter().map(|s| (*s).to_owned()).collect();
            list.sort();
            list
        };
        assert_eq!(keys(&schema), sorted(TOP_KEYS));
        assert_eq!(keys(&schema["$defs"]["limits"]), sorted(LIMIT_KEYS));
        assert_eq!(keys(&schema["$defs"]["audit"]), sorted(AUDIT_KEYS));
        assert_eq!(keys(&schema["$defs"]["store"]), sorted(STORE_KEYS));
        assert_eq!(keys(&schema["properties"]["confine"]), sorted(CONFINE_KEYS));
        let server_confine = &schema["$defs"]["server"]["properties"]["confine"]["oneOf"];
        let mut both = keys(&server_confine[0]);
        both.extend(keys(&server_confine[1]));
        both.sort();
        assert_eq!(both, sorted(SERVER_CONFINE_KEYS));
        let listen = &schema["$defs"]["listen"];
        assert_eq!(keys(listen), sorted(LISTEN_KEYS));
        let defaults = ListenConfig::default();
        for (key, value) in [
            ("header_read_timeout_ms", defaults.header_read_timeout_ms),
            ("max_connections", defaults.max_connections),
            (
                "max_sessions_per_principal",
                defaults.max_sessions_per_principal,
            ),
            ("session_idle_timeout_ms", defaults.session_idle_timeout_ms),
        ] {
            assert_eq!(listen["properties"][key]["default"], value, "{key}");
        }
        let guest = &schema["properties"]["guest"];
        assert_eq!(keys(guest), sorted(GUEST_KEYS));
        let defaults = GuestLimits::default();
        for (key, value) in [
            ("decide_fuel", defaults.decide_fuel),
            ("classify_fuel", defaults.classify_fuel),
            ("configure_fuel", defaults.configure_fuel),
            ("memory_bytes", defaults.memory_bytes as u64),
            ("max_instances", u64::from(defaults.max_instances)),
        ] {
            assert_eq!(guest["properties"][key]["default"], value, "{key}");
        }
        let server: Vec<&str> = SERVER_KEYS
            .iter()
            .chain(IGNORED_CLIENT_KEYS)
            .chain(UNSUPPORTED_SERVER_KEYS)
            .copied()
            .collect();
        assert_eq!(keys(&schema["$defs"]["server"]), sorted(&server));
        assert_eq!(
            schema["$defs"]["limits"]["properties"]["max_tools"]["default"],
            DEFAULT_MAX_TOOLS
        );
    }
}
