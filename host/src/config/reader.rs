//! The reader: walks the operator's JSON by hand, checks every key and value, applies the defaults and resolves paths, naming the path of each fault.

use std::collections::BTreeMap;
use std::env::VarError;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::audit::AuditSync;
use crate::identity::{ApproverRule, Approvers};
use crate::component::GuestLimits;

use super::expand::{expand, is_var_name};
use super::sections::{
    CheckpointConfig, DEFAULT_CHECKPOINT_INTERVAL_MS, MIN_CHECKPOINT_INTERVAL_MS,
};
use super::{
    AuditConfig, CaBundle, ComponentSource, TextSource, Config, ConfigError, ConfineConfig, ConsoleConfig,
    ConsoleOidcConfig, DEFAULT_AUDIT_FILE, DEFAULT_OIDC_GROUPS_CLAIM, DEFAULT_OIDC_USER_CLAIM,
    SecretSource,
    DEFAULT_MANIFEST, DEFAULT_OAUTH_ALGORITHMS, DEFAULT_OAUTH_LEEWAY_MS, DEFAULT_PRINCIPAL,
    DEFAULT_PRINCIPAL_CLAIM, DEFAULT_SEPARATOR, DEFAULT_SERVERS_DIR, DEFAULT_STATE_DIR,
    DEFAULT_TELEMETRY_EXPORT_INTERVAL_MS, DEFAULT_TELEMETRY_SERVICE_NAME,
    DEFAULT_TOOL_NAME_PATTERN, IGNORED_CLIENT_KEYS, IntrospectionConfig, Limits, ListenConfig,
    ListenOAuthConfig, MAX_CA_FILE_BYTES, MAX_OAUTH_LEEWAY_MS, MAX_SEPARATOR_CHARS, MAX_TIMEOUT_MS,
    MIN_TOKEN_CHARS, OAUTH_ALGORITHMS, OAuthConfig, OAuthGrant, OCI_SCHEME, OciConfig,
    NotifyConfig, OciReference, PolicyConfig, RulesConfig,
    ServerConfig, ServerConfine, ServerTransport, StoreConfig, TelemetryConfig,
};

/// Keys of the top-level object. `$schema` is accepted so editors can find the schema.
pub(super) const TOP_KEYS: &[&str] = &[
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
    "oci",
    "approvers",
    "notify",
    "console",
];
/// Keys of `console` (see [`ConsoleConfig`]).
pub(super) const CONSOLE_KEYS: &[&str] = &["oidc"];
/// Keys of `console.oidc` (see [`ConsoleOidcConfig`]).
pub(super) const CONSOLE_OIDC_KEYS: &[&str] = &[
    "issuer",
    "client_id",
    "client_secret",
    "client_secret_file",
    "user_claim",
    "groups_claim",
    "scopes",
    "algorithms",
    "ca_file",
];
/// Keys of `notify` (see [`NotifyConfig`]).
pub(super) const NOTIFY_KEYS: &[&str] = &[
    "webhooks",
    "slack",
    "secret_file",
    "console_url",
    "arguments",
    "allow_private",
    "checkpoints",
];
/// Keys of `approvers` (see [`Approvers`]).
const APPROVERS_KEYS: &[&str] = &["rules", "allow_self_approval"];
/// Keys of a rule of `approvers.rules` (see [`ApproverRule`]).
const APPROVER_RULE_KEYS: &[&str] = &["users", "groups", "os_users", "servers", "effects"];
/// Keys of `oci` (see [`OciConfig`]).
const OCI_KEYS: &[&str] = &["keys"];
/// Keys of `telemetry` (see [`TelemetryConfig`]).
const TELEMETRY_KEYS: &[&str] = &["endpoint", "service_name", "export_interval_ms", "headers"];
/// Keys of `guest`, each a field of [`GuestLimits`].
pub(super) const GUEST_KEYS: &[&str] = &[
    "decide_fuel",
    "classify_fuel",
    "configure_fuel",
    "review_fuel",
    "memory_bytes",
    "max_instances",
    "ready_instances",
];
/// Keys of a server entry toolward reads (besides [`IGNORED_CLIENT_KEYS`]).
pub(super) const SERVER_KEYS: &[&str] = &[
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
    "oauth",
];
/// Keys of a server's `oauth` (see [`OAuthConfig`]).
pub(super) const OAUTH_KEYS: &[&str] = &[
    "client_id",
    "client_secret",
    "scopes",
    "grant",
    "redirect_port",
    "per_principal",
    "ca_file",
    "client_id_metadata_url",
];
/// Keys of a server entry that change how the server runs and are not supported: refused
/// rather than ignored.
pub(super) const UNSUPPORTED_SERVER_KEYS: &[&str] = &["cwd", "envFile"];
const RULES_KEYS: &[&str] = &["file", "component"];
const POLICY_KEYS: &[&str] = &["component", "settings", "cedar"];
pub(super) const AUDIT_KEYS: &[&str] = &[
    "file",
    "sync",
    "record_arguments",
    "record_results",
    "checkpoint",
];
/// The keys of `audit.checkpoint`.
pub(super) const CHECKPOINT_KEYS: &[&str] = &["key", "interval_ms", "origin"];
/// Keys of `store` (see [`StoreConfig`]).
pub(super) const STORE_KEYS: &[&str] = &["postgres", "oauth_key"];
pub(super) const LISTEN_KEYS: &[&str] = &[
    "tokens",
    "allowed_origins",
    "header_read_timeout_ms",
    "max_connections",
    "max_sessions_per_principal",
    "session_idle_timeout_ms",
    "oauth",
];
/// Keys of `listen.oauth` (see [`ListenOAuthConfig`]).
pub(super) const LISTEN_OAUTH_KEYS: &[&str] = &[
    "issuer",
    "resource",
    "jwks_uri",
    "algorithms",
    "principal_claim",
    "attribute_claims",
    "scopes_supported",
    "required_scopes",
    "leeway_ms",
    "ca_file",
    "introspection",
];
/// Keys of `listen.oauth.introspection` (see [`IntrospectionConfig`]).
pub(super) const INTROSPECTION_KEYS: &[&str] = &["endpoint", "client_id", "client_secret"];
/// Keys of the top-level `confine`: what every stdio server is denied beside the defaults.
pub(super) const CONFINE_KEYS: &[&str] =
    &["deny", "deny_tcp", "deny_network", "launcher", "namespaces"];
/// Keys of a server's `confine`.
pub(super) const SERVER_CONFINE_KEYS: &[&str] =
    &["deny", "deny_tcp", "deny_network", "devices", "unconfined"];
pub(super) const LIMIT_KEYS: &[&str] = &[
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

/// Reads `${NAME}` references: toolward's environment, or a stand-in for it.
pub(super) type EnvLookup<'a> = &'a dyn Fn(&str) -> Result<String, VarError>;

/// A place in the config document, for error messages.
#[derive(Clone)]
pub(super) struct JsonPath(String);

impl JsonPath {
    pub(super) fn root() -> Self {
        Self(String::new())
    }

    pub(super) fn key(&self, key: &str) -> Self {
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

    pub(super) fn index(&self, index: usize) -> Self {
        Self(format!("{}[{index}]", self.0))
    }

    /// The refusal of the value at this path. The message is escaped ([`crate::text::escape`]):
    /// it quotes what the config holds (a server name, a header, a URL), which an imported
    /// client config (a shared project's `.mcp.json`) may have filled with terminal escape
    /// sequences (found by an attack: `init` printed them raw).
    pub(super) fn invalid(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: crate::text::escape(&self.to_string()),
            message: crate::text::escape(&message.into()),
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

/// The list of names at `key` of `map` (`None` when absent): each a non-empty string without
/// white space or control characters, given once (a repeat is dropped).
fn names(
    map: &Map<String, Value>,
    path: &JsonPath,
    key: &str,
    what: &str,
) -> Result<Option<Vec<String>>, ConfigError> {
    let Some(value) = map.get(key) else {
        return Ok(None);
    };
    let list_path = path.key(key);
    let Some(items) = value.as_array() else {
        return Err(expected(&list_path, &format!("an array of {what}"), value));
    };
    let mut names = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = list_path.index(i);
        let name = non_empty_str(item, &item_path)?;
        if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(item_path.invalid(format!("`{name}` is not one of {what}")));
        }
        if !names.iter().any(|known| known == name) {
            names.push(name.to_owned());
        }
    }
    Ok(Some(names))
}

/// The `algorithms` of `map` (`listen.oauth`, `console.oidc`): JOSE names of asymmetric
/// algorithms, never `none` nor `HS*`; absent, [`DEFAULT_OAUTH_ALGORITHMS`].
fn algorithms(map: &Map<String, Value>, path: &JsonPath) -> Result<Vec<String>, ConfigError> {
    let Some(list) = names(map, path, "algorithms", "JOSE algorithm names")? else {
        return Ok(DEFAULT_OAUTH_ALGORITHMS
            .iter()
            .map(|name| (*name).to_owned())
            .collect());
    };
    let list_path = path.key("algorithms");
    if list.is_empty() {
        return Err(list_path.invalid(
            "names no algorithm: no token could be accepted; leave it out for `RS256` and `ES256`",
        ));
    }
    for (i, name) in list.iter().enumerate() {
        let reason = if name.eq_ignore_ascii_case("none") {
            Some("`none` is an unsigned token: anyone could write one")
        } else if name.to_ascii_uppercase().starts_with("HS") {
            Some(
                "HMAC algorithms verify with a shared secret, not the issuer's public key: accepting them lets a token signed with the public key pass (algorithm confusion)",
            )
        } else if !OAUTH_ALGORITHMS.contains(&name.as_str()) {
            Some("unknown algorithm")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(list_path.index(i).invalid(format!(
                "`{name}` is refused: {reason} (accepted: {})",
                OAUTH_ALGORITHMS.join(", ")
            )));
        }
    }
    Ok(list)
}

/// The scopes at `key` of `map`: RFC 6749 scope tokens; absent, none.
fn scopes(map: &Map<String, Value>, path: &JsonPath, key: &str) -> Result<Vec<String>, ConfigError> {
    let list = names(map, path, key, "scopes")?.unwrap_or_default();
    for (i, scope) in list.iter().enumerate() {
        // RFC 6749, section 3.3: printable ASCII without space, `"` or `\`.
        if !scope
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
        {
            return Err(path
                .key(key)
                .index(i)
                .invalid(format!("`{scope}` is not a scope (RFC 6749, section 3.3)")));
        }
    }
    Ok(list)
}

/// Whether `raw` is one `${NAME}` reference and nothing else: how a secret is given in the
/// config, never written in it.
fn is_one_variable(raw: &str) -> bool {
    raw.strip_prefix("${")
        .and_then(|rest| rest.strip_suffix('}'))
        .is_some_and(|name| !name.contains(['$', '{', '}']))
}

/// The bytes of `file`, at most `limit`; the system's message, or the limit, otherwise.
fn read_bounded(file: &Path, limit: u64) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let opened = std::fs::File::open(file).map_err(|error| error.to_string())?;
    let mut bytes = Vec::new();
    opened
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|error| error.to_string())?;
    if bytes.len() as u64 > limit {
        return Err(format!("it is larger than the limit of {limit} bytes"));
    }
    Ok(bytes)
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

/// A `confine` object's `deny` paths and its two network switches, as read.
type ConfineFields = (Vec<PathBuf>, Option<bool>, Option<bool>);

/// Walks the document by hand so every error can name its path.
pub(super) struct Reader<'a> {
    pub(super) base_dir: &'a Path,
    pub(super) env: EnvLookup<'a>,
    pub(super) ignored: Vec<String>,
}

impl Reader<'_> {
    pub(super) fn config(mut self, value: &Value) -> Result<Config, ConfigError> {
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
        let oci = match map.get("oci") {
            None => OciConfig::default(),
            Some(value) => self.oci(value, &root.key("oci"))?,
        };
        let from_registries = [
            ("rules.component", rules.component.as_ref().and_then(ComponentSource::oci)),
            ("policy.component", policy.component.as_ref().and_then(ComponentSource::oci)),
            ("policy.settings", policy.settings.as_ref().and_then(TextSource::oci)),
            ("policy.cedar", policy.cedar.as_ref().and_then(TextSource::oci)),
        ];
        for (field, reference) in from_registries {
            if let Some(reference) = reference
                && oci.keys.is_empty()
            {
                return Err(root.key("oci").key("keys").invalid(format!(
                    "`{field}` is `{reference}`, whose signature is verified with a key named here, and none is: add the publisher's public key (`\"oci\": {{\"keys\": {{\"NAME\": \"cosign.pub\"}}}}`)"
                )));
            }
        }
        let manifest = self.path_or(map, &root, "manifest", DEFAULT_MANIFEST)?;
        let state_dir = self.path_or(map, &root, "state_dir", DEFAULT_STATE_DIR)?;
        let audit = match map.get("audit") {
            None => AuditConfig {
                file: self.base_dir.join(DEFAULT_AUDIT_FILE),
                sync: AuditSync::Always,
                record_arguments: false,
                record_results: false,
                checkpoint: None,
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
        let console = match map.get("console") {
            None => ConsoleConfig::default(),
            Some(value) => self.console(value, &root.key("console"))?,
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
        let notify = match map.get("notify") {
            None => NotifyConfig::default(),
            Some(value) => self.notify(value, &root.key("notify"))?,
        };
        let approvers = match map.get("approvers") {
            None => Approvers::default(),
            Some(value) => approvers(value, &root.key("approvers"))?,
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

        for (index, rule) in approvers.rules.iter().enumerate() {
            for (at, server) in rule.servers.iter().enumerate() {
                if !servers.contains_key(server) && !disabled_servers.contains(server) {
                    return Err(root
                        .key("approvers")
                        .key("rules")
                        .index(index)
                        .key("servers")
                        .index(at)
                        .invalid(format!(
                            "`{server}` is not a server of `mcpServers`: a rule for it would never apply"
                        )));
                }
            }
        }

        Ok(Config {
            servers,
            disabled_servers,
            approvers,
            notify,
            ignored_keys: self.ignored,
            rules,
            policy,
            oci,
            manifest,
            audit,
            state_dir,
            principal,
            separator,
            tool_name_pattern,
            limits,
            listen,
            console,
            guest,
            confine,
            servers_dir: Some(servers_dir),
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
                devices: Vec::new(),
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
            if let Some(key) = ["deny", "deny_tcp", "deny_network", "devices"]
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
        let mut devices = Vec::new();
        if let Some(value) = map.get("devices") {
            let devices_path = path.key("devices");
            let Value::Array(items) = value else {
                return Err(expected(
                    &devices_path,
                    "an array of paths under `/dev`",
                    value,
                ));
            };
            for (index, item) in items.iter().enumerate() {
                devices.push(device_path(item, &devices_path.index(index))?);
            }
        }
        Ok(ServerConfine::Confined {
            deny,
            deny_tcp: deny_tcp.unwrap_or(top.deny_tcp),
            deny_network: deny_network.unwrap_or(top.deny_network),
            devices,
        })
    }

    fn path(&self, value: &Value, path: &JsonPath) -> Result<PathBuf, ConfigError> {
        let text = non_empty_str(value, path)?;
        if text.contains('\0') {
            return Err(path.invalid("path contains a NUL character"));
        }
        Ok(self.base_dir.join(text))
    }

    /// A `ca_file`: the PEM file at `value` (relative to the config's folder), read now, each
    /// of its certificates checked to be one (an X.509 certificate a trust anchor can be
    /// taken from). Every section with a `ca_file` is used only with `http-upstream`, which
    /// brings the check; a build without it reads the file's PEM and uses none of it.
    fn ca_bundle(&self, value: &Value, path: &JsonPath) -> Result<CaBundle, ConfigError> {
        use rustls_pki_types::CertificateDer;
        use rustls_pki_types::pem::PemObject as _;
        let file = self.path(value, path)?;
        let shown = crate::text::escape(&file.display().to_string());
        let bytes = read_bounded(&file, MAX_CA_FILE_BYTES)
            .map_err(|reason| path.invalid(format!("cannot read `{shown}`: {reason}")))?;
        let mut certificates = Vec::new();
        for (index, item) in CertificateDer::pem_slice_iter(&bytes).enumerate() {
            let certificate = item.map_err(|error| {
                path.invalid(format!(
                    "`{shown}` is not a PEM file of certificates (certificate {}: {error:?})",
                    index + 1
                ))
            })?;
            #[cfg(feature = "http-upstream")]
            if let Err(error) = webpki::anchor_from_trusted_cert(&certificate) {
                return Err(path.invalid(format!(
                    "`{shown}`: certificate {} is not an X.509 certificate toolward can trust ({error:?})",
                    index + 1
                )));
            }
            certificates.push(certificate.as_ref().to_vec());
        }
        if certificates.is_empty() {
            return Err(path.invalid(format!(
                "`{shown}` holds no certificate (`-----BEGIN CERTIFICATE-----`)"
            )));
        }
        Ok(CaBundle { file, certificates })
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
            text: TextSource::File(self.path(file, &path.key("file"))?),
            component: self.component_source(map, path)?,
        })
    }

    /// `component` of `rules` or `policy`: a path, or `oci://…@sha256:…`.
    fn component_source(
        &self,
        map: &Map<String, Value>,
        parent: &JsonPath,
    ) -> Result<Option<ComponentSource>, ConfigError> {
        self.text_source(map, parent, "component")
    }

    /// `key` of `parent` (`settings` or `cedar` of `policy`, and `component` through
    /// [`Self::component_source`]): a path, or `oci://…@sha256:…`.
    fn text_source(
        &self,
        map: &Map<String, Value>,
        parent: &JsonPath,
        key: &str,
    ) -> Result<Option<TextSource>, ConfigError> {
        let Some(value) = map.get(key) else {
            return Ok(None);
        };
        let path = parent.key(key);
        let text = non_empty_str(value, &path)?;
        if !text.starts_with(OCI_SCHEME) {
            return self.path(value, &path).map(|p| Some(TextSource::File(p)));
        }
        if !cfg!(feature = "oci") {
            return Err(path.invalid(format!(
                "`{}` is in an OCI registry, and this build of toolward has no `oci` feature (artifacts from registries)",
                crate::text::escape(text)
            )));
        }
        let reference = OciReference::parse(text).map_err(|reason| {
            path.invalid(format!(
                "`{}` is not an OCI reference: {reason}",
                crate::text::escape(text)
            ))
        })?;
        if reference.digest.is_none() {
            return Err(path.invalid(format!(
                "`{reference}` names a tag, which the registry can move to other bytes: pin the digest that `toolward policy pull {reference}` prints (`oci://…@sha256:…`)"
            )));
        }
        Ok(Some(TextSource::Oci(reference)))
    }

    fn oci(&self, value: &Value, path: &JsonPath) -> Result<OciConfig, ConfigError> {
        let map = as_object(value, path)?;
        check_keys(map, path, OCI_KEYS)?;
        let mut keys = BTreeMap::new();
        if let Some(value) = map.get("keys") {
            let keys_path = path.key("keys");
            for (name, file) in as_object(value, &keys_path)? {
                let key_path = keys_path.key(name);
                if name.is_empty() || name.chars().any(|c| c.is_control() || c.is_whitespace()) {
                    return Err(key_path.invalid(
                        "a key's name is recorded in the audit: no empty name, spaces or control characters",
                    ));
                }
                keys.insert(name.clone(), self.path(file, &key_path)?);
            }
        }
        Ok(OciConfig { keys })
    }

    fn notify(&self, value: &Value, path: &JsonPath) -> Result<NotifyConfig, ConfigError> {
        let map = as_object(value, path)?;
        check_keys(map, path, NOTIFY_KEYS)?;
        let urls = |key: &str| -> Result<Vec<String>, ConfigError> {
            let key_path = path.key(key);
            match map.get(key) {
                None => Ok(Vec::new()),
                Some(Value::Array(list)) => list
                    .iter()
                    .enumerate()
                    .map(|(at, url)| {
                        let url_path = key_path.index(at);
                        let raw = non_empty_str(url, &url_path)?;
                        let url = expand(raw, &url_path, "(notify)", key, self.env)?;
                        let lower = url.to_ascii_lowercase();
                        if !(lower.starts_with("https://") || lower.starts_with("http://")) {
                            return Err(url_path.invalid(
                                "not an https URL (plain http only to a loopback address written as an IP)",
                            ));
                        }
                        Ok(url)
                    })
                    .collect(),
                Some(other) => Err(expected(&key_path, "an array of URLs", other)),
            }
        };
        let webhooks = urls("webhooks")?;
        let slack = urls("slack")?;
        let secret_file = self.optional_path(map, path, "secret_file")?;
        if !webhooks.is_empty() && secret_file.is_none() {
            return Err(path.key("secret_file").invalid(
                "missing: webhooks are signed with this file's key, and a receiver can tell a post from toolward only by its signature (`head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE`)",
            ));
        }
        let console_url = match map.get("console_url") {
            None => None,
            Some(value) => {
                let url_path = path.key("console_url");
                let url = non_empty_str(value, &url_path)?;
                let lower = url.to_ascii_lowercase();
                let valid = (lower.starts_with("http://") || lower.starts_with("https://"))
                    && !url.contains(|c: char| c.is_whitespace() || c.is_control());
                if !valid {
                    return Err(url_path.invalid(format!(
                        "`{url}` is not the console's URL: write `https://HOST[:PORT]`"
                    )));
                }
                Some(url.trim_end_matches('/').to_owned())
            }
        };
        let flag = |key: &str| match map.get(key) {
            None => Ok(false),
            Some(value) => as_bool(value, &path.key(key)),
        };
        Ok(NotifyConfig {
            webhooks,
            slack,
            secret_file,
            console_url,
            arguments: flag("arguments")?,
            allow_private: flag("allow_private")?,
            checkpoints: flag("checkpoints")?,
        })
    }

    fn policy(&self, value: &Value, path: &JsonPath) -> Result<PolicyConfig, ConfigError> {
        let map = as_object(value, path)?;
        check_keys(map, path, POLICY_KEYS)?;
        let cedar = self.text_source(map, path, "cedar")?;
        if cedar.is_some() && (map.contains_key("component") || map.contains_key("settings")) {
            return Err(path.invalid(
                "`cedar` names the policy by itself: the built-in Cedar component decides with that file; drop `component` and `settings`, or `cedar`",
            ));
        }
        Ok(PolicyConfig {
            component: self.component_source(map, path)?,
            settings: self.text_source(map, path, "settings")?,
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
        let oauth = match map.get("oauth") {
            None => None,
            Some(value) => Some(self.listen_oauth(value, &path.key("oauth"))?),
        };
        let mut listen = ListenConfig {
            tokens,
            allowed_origins,
            oauth,
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

    fn listen_oauth(
        &self,
        value: &Value,
        path: &JsonPath,
    ) -> Result<ListenOAuthConfig, ConfigError> {
        let map = as_object(value, path)?;
        check_keys(map, path, LISTEN_OAUTH_KEYS)?;
        let url = |key: &str, required: bool| self.listen_url(map, path, key, required);
        let issuer = url("issuer", true)?.unwrap_or_default();
        let resource = url("resource", true)?.unwrap_or_default();
        let jwks_uri = url("jwks_uri", false)?;
        let algorithms = algorithms(map, path)?;
        let principal_claim = match map.get("principal_claim") {
            None => DEFAULT_PRINCIPAL_CLAIM.to_owned(),
            Some(value) => non_empty_str(value, &path.key("principal_claim"))?.to_owned(),
        };
        let attribute_claims =
            names(map, path, "attribute_claims", "claim names")?.unwrap_or_default();
        let scopes_supported = scopes(map, path, "scopes_supported")?;
        let required_scopes = scopes(map, path, "required_scopes")?;
        let leeway_ms = match map.get("leeway_ms") {
            None => DEFAULT_OAUTH_LEEWAY_MS,
            Some(value) => {
                let key_path = path.key("leeway_ms");
                let number = value
                    .as_u64()
                    .ok_or_else(|| expected(&key_path, "milliseconds (0 or more)", value))?;
                if number > MAX_OAUTH_LEEWAY_MS {
                    return Err(key_path.invalid(format!(
                        "`{number}` milliseconds is more than the limit of {MAX_OAUTH_LEEWAY_MS} milliseconds: expired tokens would keep working"
                    )));
                }
                number
            }
        };
        let ca_file = match map.get("ca_file") {
            None => None,
            Some(value) => Some(self.ca_bundle(value, &path.key("ca_file"))?),
        };
        let introspection = match map.get("introspection") {
            None => None,
            Some(value) => Some(self.introspection(value, &path.key("introspection"))?),
        };
        Ok(ListenOAuthConfig {
            introspection,
            ca_file,
            issuer,
            resource,
            jwks_uri,
            algorithms,
            principal_claim,
            attribute_claims,
            scopes_supported,
            required_scopes,
            leeway_ms,
        })
    }

    fn console(&self, value: &Value, path: &JsonPath) -> Result<ConsoleConfig, ConfigError> {
        let map = as_object(value, path)?;
        check_keys(map, path, CONSOLE_KEYS)?;
        let oidc = match map.get("oidc") {
            None => None,
            Some(value) => Some(self.console_oidc(value, &path.key("oidc"))?),
        };
        Ok(ConsoleConfig { oidc })
    }

    /// `console.oidc`: the OpenID provider the console signs users in with.
    fn console_oidc(
        &self,
        value: &Value,
        path: &JsonPath,
    ) -> Result<ConsoleOidcConfig, ConfigError> {
        let map = as_object(value, path)?;
        check_keys(map, path, CONSOLE_OIDC_KEYS)?;
        for key in ["issuer", "client_id"] {
            if !map.contains_key(key) {
                return Err(path.invalid(format!(
                    "names no `{key}`: `console.oidc` needs the provider's `issuer` and the `client_id` it issued to the console"
                )));
            }
        }
        let issuer = self
            .listen_url(map, path, "issuer", true)?
            .unwrap_or_default();
        let client_id_path = path.key("client_id");
        let client_id = non_empty_str(map.get("client_id").unwrap_or(&Value::Null), &client_id_path)?;
        if client_id.chars().any(char::is_control) {
            return Err(client_id_path.invalid("contains a control character"));
        }
        // Only where the secret is: it is read when the console starts (`SecretSource::read`),
        // so the gateways that read this config never need it.
        let client_secret = match (map.get("client_secret"), map.get("client_secret_file")) {
            (Some(_), Some(_)) => {
                return Err(path.invalid(
                    "names both `client_secret` and `client_secret_file`: give one",
                ));
            }
            (None, None) => None,
            (Some(secret), None) => {
                let secret_path = path.key("client_secret");
                let raw = non_empty_str(secret, &secret_path)?;
                // A secret written in the file is refused: a config file is copied, committed
                // and shown far more than a variable or a file of its own.
                let name = raw
                    .strip_prefix("${")
                    .and_then(|rest| rest.strip_suffix('}'))
                    .filter(|name| is_var_name(name));
                let Some(name) = name else {
                    return Err(secret_path.invalid(
                        "must be one variable reference such as `${TOOLWARD_CONSOLE_OIDC_SECRET}`, or give `client_secret_file`: the secret is never written in the config",
                    ));
                };
                Some(SecretSource::Variable(name.to_owned()))
            }
            (None, Some(file)) => Some(SecretSource::File(
                self.path(file, &path.key("client_secret_file"))?,
            )),
        };
        let claim = |key: &str, default: &str| -> Result<String, ConfigError> {
            let Some(value) = map.get(key) else {
                return Ok(default.to_owned());
            };
            let key_path = path.key(key);
            let name = non_empty_str(value, &key_path)?;
            if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(key_path.invalid(format!("`{name}` is not a claim name")));
            }
            Ok(name.to_owned())
        };
        let user_claim = claim("user_claim", DEFAULT_OIDC_USER_CLAIM)?;
        let groups_claim = claim("groups_claim", DEFAULT_OIDC_GROUPS_CLAIM)?;
        let mut asked = vec![String::from("openid")];
        for scope in scopes(map, path, "scopes")? {
            if !asked.contains(&scope) {
                asked.push(scope);
            }
        }
        let algorithms = algorithms(map, path)?;
        let ca_file = match map.get("ca_file") {
            None => None,
            Some(value) => Some(self.ca_bundle(value, &path.key("ca_file"))?),
        };
        Ok(ConsoleOidcConfig {
            issuer,
            client_id: client_id.to_owned(),
            client_secret,
            user_claim,
            groups_claim,
            scopes: asked,
            algorithms,
            ca_file,
        })
    }

    /// A URL of `listen.oauth` (or of its `introspection`): `https://`, or `http://` on a
    /// loopback host; a host, no user name, no fragment. `required`: its absence is an error.
    fn listen_url(
        &self,
        map: &Map<String, Value>,
        path: &JsonPath,
        key: &str,
        required: bool,
    ) -> Result<Option<String>, ConfigError> {
        let key_path = path.key(key);
        let Some(value) = map.get(key) else {
            if required {
                return Err(path.invalid(format!(
                    "names no `{key}`: `listen.oauth` needs `issuer` and `resource`"
                )));
            }
            return Ok(None);
        };
        let raw = non_empty_str(value, &key_path)?;
        let text = expand(raw, &key_path, "(listen)", key, self.env)?;
        let uri = text.parse::<http::Uri>().ok();
        let scheme = uri.as_ref().and_then(http::Uri::scheme_str);
        let host = uri
            .as_ref()
            .and_then(http::Uri::host)
            .map(str::to_ascii_lowercase)
            .unwrap_or_default();
        let has_user = uri
            .as_ref()
            .and_then(http::Uri::authority)
            .is_some_and(|authority| authority.as_str().contains('@'));
        if !matches!(scheme, Some("https" | "http"))
            || host.is_empty()
            || has_user
            || text.contains('#')
        {
            return Err(key_path.invalid(format!(
                "`{text}` is not an `https://` URL with a host and no user name or fragment"
            )));
        }
        let loopback = host == "localhost"
            || host.ends_with(".localhost")
            || host.starts_with("127.")
            || host == "[::1]";
        if scheme == Some("http") && !loopback {
            return Err(key_path.invalid(format!(
                "`{text}` is `http://`: only a loopback host may go without TLS"
            )));
        }
        Ok(Some(text))
    }

    /// `listen.oauth.introspection` (RFC 7662): where and as which client the listener asks
    /// the issuer about opaque tokens.
    fn introspection(
        &self,
        value: &Value,
        path: &JsonPath,
    ) -> Result<IntrospectionConfig, ConfigError> {
        let map = as_object(value, path)?;
        check_keys(map, path, INTROSPECTION_KEYS)?;
        let endpoint = self.listen_url(map, path, "endpoint", false)?;
        let client_id_path = path.key("client_id");
        let Some(client_id) = map.get("client_id") else {
            return Err(path.invalid(
                "names no `client_id`: the issuer answers introspection requests only from a client it knows",
            ));
        };
        let client_id = non_empty_str(client_id, &client_id_path)?;
        if client_id.chars().any(char::is_control) {
            return Err(client_id_path.invalid("contains a control character"));
        }
        let secret_path = path.key("client_secret");
        let Some(secret) = map.get("client_secret") else {
            return Err(path.invalid(
                "names no `client_secret`: give it as one variable reference such as `${TOOLWARD_INTROSPECTION_SECRET}`",
            ));
        };
        let raw = non_empty_str(secret, &secret_path)?;
        // A secret written in the file is refused: a config file is copied, committed and
        // shown far more than a variable.
        if !is_one_variable(raw) {
            return Err(secret_path.invalid(
                "must be one variable reference such as `${TOOLWARD_INTROSPECTION_SECRET}`: the secret comes from the environment, never from the file",
            ));
        }
        let client_secret = expand(raw, &secret_path, "(listen)", "client_secret", self.env)?;
        if client_secret.is_empty() || client_secret.chars().any(char::is_control) {
            return Err(secret_path.invalid("its variable is empty or holds a control character"));
        }
        Ok(IntrospectionConfig {
            endpoint,
            client_id: client_id.to_owned(),
            client_secret,
        })
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
        let oauth_key = match map.get("oauth_key") {
            None => None,
            Some(value) => {
                let key_path = path.key("oauth_key");
                let raw = non_empty_str(value, &key_path)?;
                // The key is read from the environment, never from the file: a config file is
                // copied, committed and shown far more than a variable.
                let whole_variable = raw
                    .strip_prefix("${")
                    .and_then(|rest| rest.strip_suffix('}'))
                    .is_some_and(|name| !name.contains(['$', '{', '}']));
                if !whole_variable {
                    return Err(key_path.invalid(
                        "must be one variable reference such as `${TOOLWARD_OAUTH_KEY}`: the key comes from the environment, never from the file",
                    ));
                }
                let key = expand(raw, &key_path, "(store)", "oauth_key", self.env)?;
                if key.len() != 64 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(key_path.invalid(
                        "its variable must hold 32 bytes in hex (64 hex digits; make one with `openssl rand -hex 32`)",
                    ));
                }
                Some(key)
            }
        };
        Ok(StoreConfig::Postgres { url, oauth_key })
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
        let record_results = match map.get("record_results") {
            None => false,
            Some(value) => as_bool(value, &path.key("record_results"))?,
        };
        let checkpoint = match map.get("checkpoint") {
            None => None,
            Some(value) => Some(self.checkpoint(value, &path.key("checkpoint"))?),
        };
        Ok(AuditConfig {
            file: self.path_or(map, path, "file", DEFAULT_AUDIT_FILE)?,
            sync,
            record_arguments,
            record_results,
            checkpoint,
        })
    }

    fn checkpoint(&self, value: &Value, path: &JsonPath) -> Result<CheckpointConfig, ConfigError> {
        let map = as_object(value, path)?;
        check_keys(map, path, CHECKPOINT_KEYS)?;
        let key = match map.get("key") {
            None => {
                return Err(path
                    .key("key")
                    .invalid("missing: the signer key file (`toolward audit keygen` writes one)"));
            }
            Some(value) => self.path(value, &path.key("key"))?,
        };
        let interval_ms = match map.get("interval_ms") {
            None => DEFAULT_CHECKPOINT_INTERVAL_MS,
            Some(value) => {
                let key_path = path.key("interval_ms");
                let ms = value
                    .as_u64()
                    .ok_or_else(|| expected(&key_path, "an integer (milliseconds)", value))?;
                if !(MIN_CHECKPOINT_INTERVAL_MS..=MAX_TIMEOUT_MS).contains(&ms) {
                    return Err(key_path.invalid(format!(
                        "{ms} ms is outside {MIN_CHECKPOINT_INTERVAL_MS} (one second) to {MAX_TIMEOUT_MS} (one day)"
                    )));
                }
                ms
            }
        };
        let origin = match map.get("origin") {
            None => None,
            Some(value) => {
                let origin_path = path.key("origin");
                let origin = non_empty_str(value, &origin_path)?;
                if origin.chars().any(|c| c.is_whitespace() || c.is_control() || c == '+') {
                    return Err(origin_path.invalid(
                        "a log's name holds no spaces, control characters or `+`",
                    ));
                }
                Some(origin.to_owned())
            }
        };
        Ok(CheckpointConfig {
            key,
            interval_ms,
            origin,
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
        let http_only = ["headers", "oauth"];
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
            let oauth = match map.get("oauth") {
                None => OAuthConfig::default(),
                Some(value) => self.oauth(name, value, &path.key("oauth"))?,
            };
            if oauth.per_principal
                && headers
                    .keys()
                    .any(|header| header.eq_ignore_ascii_case("authorization"))
            {
                return Err(path.key("oauth").key("per_principal").invalid(
                    "the server has an `Authorization` header, which would go with every principal's calls: remove the header, or `per_principal`",
                ));
            }
            Ok(ServerTransport::Http {
                url: url.to_owned(),
                headers,
                oauth,
            })
        }
    }

    /// A server's `oauth`: the client toolward signs in as, the scopes and the grant.
    fn oauth(
        &self,
        server: &str,
        value: &Value,
        path: &JsonPath,
    ) -> Result<OAuthConfig, ConfigError> {
        let map = as_object(value, path)?;
        check_keys(map, path, OAUTH_KEYS)?;
        let text = |key: &str| -> Result<Option<String>, ConfigError> {
            let Some(value) = map.get(key) else {
                return Ok(None);
            };
            let key_path = path.key(key);
            let raw = non_empty_str(value, &key_path)?;
            let expanded = expand(raw, &key_path, server, key, self.env)?;
            if expanded.chars().any(char::is_control) {
                return Err(key_path.invalid("contains a control character"));
            }
            Ok(Some(expanded))
        };
        let client_id = text("client_id")?;
        let client_secret = text("client_secret")?;
        if client_secret.is_some() && client_id.is_none() {
            return Err(path
                .key("client_secret")
                .invalid("needs `client_id`: a secret is issued with an id"));
        }
        let scopes = match map.get("scopes") {
            None => Vec::new(),
            Some(value) => {
                let list_path = path.key("scopes");
                let Some(items) = value.as_array() else {
                    return Err(expected(&list_path, "an array of scopes", value));
                };
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| {
                        let item_path = list_path.index(i);
                        let scope = non_empty_str(item, &item_path)?;
                        // RFC 6749, section 3.3: printable ASCII without space, `"` or `\`.
                        if !scope.bytes().all(|b| {
                            b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b)
                        }) {
                            return Err(item_path.invalid(format!(
                                "`{scope}` is not a scope (RFC 6749, section 3.3)"
                            )));
                        }
                        Ok(scope.to_owned())
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        let grant = match map.get("grant") {
            None => OAuthGrant::default(),
            Some(value) => match as_str(value, &path.key("grant"))? {
                "authorization_code" => OAuthGrant::AuthorizationCode,
                "client_credentials" => OAuthGrant::ClientCredentials,
                "device" => OAuthGrant::Device,
                other => {
                    return Err(path.key("grant").invalid(format!(
                        "unknown grant `{other}` (expected `authorization_code`, `client_credentials` or `device`)"
                    )));
                }
            },
        };
        if grant == OAuthGrant::ClientCredentials
            && (client_id.is_none() || client_secret.is_none())
        {
            return Err(path
                .key("grant")
                .invalid("`client_credentials` needs `client_id` and `client_secret`"));
        }
        let per_principal = match map.get("per_principal") {
            None => false,
            Some(value) => as_bool(value, &path.key("per_principal"))?,
        };
        let ca_file = match map.get("ca_file") {
            None => None,
            Some(value) => Some(self.ca_bundle(value, &path.key("ca_file"))?),
        };
        let client_id_metadata_url = text("client_id_metadata_url")?;
        if let Some(url) = &client_id_metadata_url {
            // The specification: an `https` URL with a path, the client id itself, so no
            // fragment and no user name.
            let uri = url.parse::<http::Uri>().ok();
            let valid = uri.as_ref().is_some_and(|uri| {
                uri.scheme_str() == Some("https")
                    && uri.host().is_some_and(|host| !host.is_empty())
                    && !uri.authority().is_some_and(|a| a.as_str().contains('@'))
                    && uri.path().len() > 1
            }) && !url.contains('#');
            if !valid {
                return Err(path.key("client_id_metadata_url").invalid(format!(
                    "`{url}` is not an `https://` URL with a path and no user name or fragment (a Client ID Metadata Document's URL)"
                )));
            }
        }
        let redirect_port = match map.get("redirect_port") {
            None => 0,
            Some(value) => {
                let port_path = path.key("redirect_port");
                value
                    .as_u64()
                    .and_then(|n| u16::try_from(n).ok())
                    .ok_or_else(|| expected(&port_path, "a port number (0 to 65535)", value))?
            }
        };
        Ok(OAuthConfig {
            client_id_metadata_url,
            client_id,
            client_secret,
            scopes,
            grant,
            redirect_port,
            per_principal,
            ca_file,
        })
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
/// `approvers`: rules of who answers which held calls, and whether a principal answers its
/// own.
fn approvers(value: &Value, path: &JsonPath) -> Result<Approvers, ConfigError> {
    let map = as_object(value, path)?;
    check_keys(map, path, APPROVERS_KEYS)?;
    let allow_self_approval = match map.get("allow_self_approval") {
        None => false,
        Some(value) => as_bool(value, &path.key("allow_self_approval"))?,
    };
    let rules_path = path.key("rules");
    let rules = match map.get("rules") {
        None => {
            return Err(rules_path.invalid(
                "missing: name who answers which calls (`[{\"users\": [\"alice\"]}]`), or drop `approvers` to let every channel answer every call",
            ));
        }
        Some(Value::Array(list)) if list.is_empty() => {
            return Err(rules_path.invalid(
                "no rules: name who answers which calls, or drop `approvers` to let every channel answer every call",
            ));
        }
        Some(Value::Array(list)) => list,
        Some(other) => return Err(expected(&rules_path, "an array of rules", other)),
    };
    let mut read = Vec::new();
    for (index, rule) in rules.iter().enumerate() {
        let rule_path = rules_path.index(index);
        let map = as_object(rule, &rule_path)?;
        check_keys(map, &rule_path, APPROVER_RULE_KEYS)?;
        let names = |key: &str| -> Result<Vec<String>, ConfigError> {
            let key_path = rule_path.key(key);
            match map.get(key) {
                None => Ok(Vec::new()),
                Some(Value::Array(list)) => list
                    .iter()
                    .enumerate()
                    .map(|(at, name)| {
                        let name_path = key_path.index(at);
                        let name = non_empty_str(name, &name_path)?;
                        if name.chars().any(char::is_control) {
                            return Err(name_path.invalid("give a printable name"));
                        }
                        Ok(name.to_owned())
                    })
                    .collect(),
                Some(other) => Err(expected(&key_path, "an array of names", other)),
            }
        };
        let rule = ApproverRule {
            users: names("users")?,
            groups: names("groups")?,
            os_users: names("os_users")?,
            servers: names("servers")?,
            effects: names("effects")?,
        };
        if rule.users.is_empty() && rule.groups.is_empty() && rule.os_users.is_empty() {
            return Err(rule_path.invalid(
                "names no answerer: give `users` (console users and principals), `groups` (the identity provider's) or `os_users` (who answer with `toolward approvals`)",
            ));
        }
        for (at, effect) in rule.effects.iter().enumerate() {
            if toolward_policy_table::Effect::parse(effect).is_none() {
                return Err(rule_path.key("effects").index(at).invalid(format!(
                    "`{effect}` is not an effect: {}",
                    one_of(&toolward_policy_table::Effect::ALL.map(|e| e.as_str()))
                )));
            }
        }
        read.push(rule);
    }
    Ok(Approvers {
        rules: read,
        allow_self_approval,
    })
}

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
            "review_fuel" => limits.review_fuel = number,
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

/// One entry of a server's `confine.devices`: an absolute path beneath `/dev`, written
/// without `.` or `..` (the private `/dev` is built from these names, and a name that left
/// `/dev` would bind something else into it).
fn device_path(value: &Value, path: &JsonPath) -> Result<PathBuf, ConfigError> {
    let text = non_empty_str(value, path)?;
    let device = Path::new(text);
    let plain = text
        .split('/')
        .skip(1)
        .all(|name| !matches!(name, "" | "." | ".."));
    if text.contains('\0') || !device.starts_with("/dev") || device == Path::new("/dev") || !plain {
        return Err(path.invalid(
            "a device is an absolute path beneath `/dev`, such as `/dev/ttyUSB0`, without `.` or `..`",
        ));
    }
    Ok(device.to_path_buf())
}
