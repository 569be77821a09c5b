//! [`ToolwardBuilder`]: a toolward from values (servers, rules, policy, manifest, audit
//! store), for an embedder; files stay the command line's way.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{StartFailure, Toolward, Values};
use crate::audit::AuditStore;
use crate::config::{
    Config, ConfigError, DEFAULT_AUDIT_FILE, HandedTransport, PolicySource, ServerTransport,
    StoreConfig,
};
use crate::manifest::Manifest;
use crate::text::IN_MEMORY;

/// Top-level config keys the builder sets with methods of its own, refused by
/// [`ToolwardBuilder::setting`]: each names a file or a folder, or the servers. (`audit` is
/// a setting, less its `file`: the log is `audit.jsonl` in the state folder.)
const OWN_KEYS: &[&str] = &[
    "mcpServers",
    "servers",
    "rules",
    "policy",
    "manifest",
    "state_dir",
    "servers_dir",
    "store",
];

/// The command a handed-in server's entry is read with before it gets its transport: never
/// started.
const HANDED_PLACEHOLDER: &str = "(handed in)";

/// A toolward built from values: the servers, the rules, the policy (components, settings,
/// Cedar text as bytes), the manifest and the audit store. Nothing is read from a file and
/// nothing is written unless asked for ([`state_dir`](Self::state_dir),
/// [`servers_dir`](Self::servers_dir)).
///
/// Defaults, each the safe one:
///
/// - no servers (each started by toolward from an `mcpServers` entry with
///   [`server`](Self::server), or handed in as an rmcp transport with
///   [`server_transport`](Self::server_transport)); no rules (required:
///   [`start`](Self::start) refuses without them);
/// - the built-in default component for rules and policy, configured with the rules text;
/// - no state folder ([`StoreConfig::Memory`]): the audit records go to the store given with
///   [`audit_store`](Self::audit_store), else to a [`crate::MemoryAudit`] whose records
///   [`Toolward::audit_events`] streams; fact counters in this process's memory (an anonymous
///   file, `memfd_create`: on a system without one, such as macOS, there are no counters, so
///   a policy that reads facts gets none and a limit denies); `requestState`s redeemed in
///   memory under a key made at start; held calls asked only of the approver each call
///   names; components compiled at each start;
/// - no servers' folder: stdio servers get this process's `HOME` and `TMPDIR`, as an MCP
///   client would start them (confined ones no folder of their own to write in);
/// - relative paths in settings (a server's `cwd`-relative arguments) against the current
///   directory ([`base_dir`](Self::base_dir));
/// - every other setting as the config file's default (`docs/config.md`); change one with
///   [`setting`](Self::setting).
///
/// ```no_run
/// # async fn demo(manifest: toolward::Manifest) -> Result<(), toolward::StartFailure> {
/// use serde_json::json;
///
/// let toolward = toolward::Toolward::builder()
///     .server("fs", json!({"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."]}))
///     .rules(json!({"servers": {"fs": {"tools": {"read_text_file": {"effect": "read-only"}}}}}).to_string())
///     .manifest(manifest)
///     .start()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct ToolwardBuilder {
    servers: Map<String, Value>,
    settings: Map<String, Value>,
    rules: Option<Vec<u8>>,
    rules_component: Option<Vec<u8>>,
    policy_component: Option<Vec<u8>>,
    policy_settings: Option<Vec<u8>>,
    cedar: Option<Vec<u8>>,
    manifest: Option<Manifest>,
    audit: Option<Arc<dyn AuditStore>>,
    handed: BTreeMap<String, HandedTransport>,
    state_dir: Option<PathBuf>,
    servers_dir: Option<PathBuf>,
    base_dir: Option<PathBuf>,
    #[cfg(feature = "otel")]
    telemetry: Option<Arc<crate::telemetry::Telemetry>>,
}

impl Toolward {
    /// A builder of a toolward from values, writing no file unless told
    /// ([`ToolwardBuilder`]).
    #[must_use]
    pub fn builder() -> ToolwardBuilder {
        ToolwardBuilder::default()
    }
}

impl ToolwardBuilder {
    /// Adds the server `name`, as an entry of the config's `mcpServers` (what an MCP
    /// client's config holds: `{"command": …, "args": […], "env": {…}}` or
    /// `{"type": "http", "url": …}`). A second call with the same name replaces it.
    #[must_use]
    pub fn server(mut self, name: impl Into<String>, entry: Value) -> Self {
        let name = name.into();
        self.handed.remove(&name);
        self.servers.insert(name, entry);
        self
    }

    /// Adds the server `name` reached through `transport`, an rmcp client-role transport the
    /// runtime hands in (the `gateway` feature): anything rmcp's `serve` takes for a client,
    /// such as one end of a [`tokio::io::duplex`] whose other end an rmcp `ServerHandler` of
    /// the runtime's serves, a `(reader, writer)` pair, or an rmcp `Transport`. Its tools pass
    /// the same pin, load, policy, approvals and audit as a started server's. A second call
    /// with the same name, or [`server`](Self::server), replaces it.
    ///
    /// Unlike a started server, a handed-in one:
    ///
    /// - **cannot be confined**: toolward starts nothing, so it runs with whatever authority
    ///   the runtime gave it (in the runtime's own process, for an in-process server); the
    ///   load report says so for that server;
    /// - **is connected once**: the first connection through the transport (a
    ///   [`crate::pin()`] of this builder's [`config`](Self::config), or the
    ///   [`start`](Self::start)) uses it, and a second fails naming the server, so give the
    ///   pin and the start each a builder with a transport of its own;
    /// - **cannot be restarted**: when its transport ends, its tools answer with a tool error
    ///   naming the server and why, and it stays down until the runtime starts a toolward with
    ///   a new transport;
    /// - has no process, no standard error, and no `HOME` of its own;
    /// - is pinned as rmcp decoded and re-encoded its listing, not as bytes on a wire (for a
    ///   server written with rmcp, the same each time).
    #[cfg(feature = "gateway")]
    #[must_use]
    pub fn server_transport<T, E, A>(mut self, name: impl Into<String>, transport: T) -> Self
    where
        T: rmcp::transport::IntoTransport<rmcp::RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let name = name.into();
        self.servers.remove(&name);
        self.handed
            .insert(name, crate::transport::rmcp_transport(transport));
        self
    }

    /// The rules (the text of a rules file, `docs/rules.schema.json`): which tools are
    /// registered, with which effect. Required.
    #[must_use]
    pub fn rules(mut self, text: impl Into<Vec<u8>>) -> Self {
        self.rules = Some(text.into());
        self
    }

    /// A rules component's bytes (a WebAssembly component), instead of the built-in one.
    #[must_use]
    pub fn rules_component(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.rules_component = Some(bytes.into());
        self
    }

    /// A policy component's bytes, instead of the built-in one.
    #[must_use]
    pub fn policy_component(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.policy_component = Some(bytes.into());
        self
    }

    /// The text given to the policy component's `configure`, instead of the rules text.
    #[must_use]
    pub fn policy_settings(mut self, text: impl Into<Vec<u8>>) -> Self {
        self.policy_settings = Some(text.into());
        self
    }

    /// Cedar policies (`docs/cedar.md`): calls are decided by the built-in Cedar component
    /// with this text. Excludes [`policy_component`](Self::policy_component) and
    /// [`policy_settings`](Self::policy_settings).
    #[must_use]
    pub fn cedar(mut self, text: impl Into<Vec<u8>>) -> Self {
        self.cedar = Some(text.into());
        self
    }

    /// The manifest of reviewed tools ([`crate::pin()`] makes one from
    /// [`config`](Self::config)). Required by [`start`](Self::start).
    #[must_use]
    pub fn manifest(mut self, manifest: Manifest) -> Self {
        self.manifest = Some(manifest);
        self
    }

    /// Where the audit records go: a store of the embedder's (see [`AuditStore`] for its
    /// contract, [`crate::AuditChain`] to chain records).
    #[must_use]
    pub fn audit_store(mut self, store: Arc<dyn AuditStore>) -> Self {
        self.audit = Some(store);
        self
    }

    /// Keeps state in the folder `path` (created `0700`): the approvals queue
    /// (`toolward approvals` answers held calls), the fact counters shared by every process
    /// using it, the compiled components, and, without an
    /// [`audit_store`](Self::audit_store), the audit log `audit.jsonl` inside it.
    #[must_use]
    pub fn state_dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(path.into());
        self
    }

    /// Gives each stdio server its own `HOME` and `TMPDIR` under `path`
    /// (`<path>/<server>/home` and `.../tmp`, created `0700`), as `servers_dir` does in a
    /// config file. Never inside the state folder.
    #[must_use]
    pub fn servers_dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.servers_dir = Some(path.into());
        self
    }

    /// The folder relative paths resolve against and stdio servers start in (a config
    /// file's folder). Default: the current directory.
    #[must_use]
    pub fn base_dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.base_dir = Some(path.into());
        self
    }

    /// Traces and metrics through the runtime's own OpenTelemetry providers (the `otel`
    /// feature): toolward's tracer and meter (scope `toolward`) come from them, with the
    /// spans and metrics `telemetry` documents, and toolward starts no exporter of its own.
    /// Excludes the `telemetry` setting.
    #[cfg(feature = "otel")]
    #[must_use]
    pub fn otel_providers<T, M>(mut self, tracer_provider: &T, meter_provider: &M) -> Self
    where
        T: opentelemetry::trace::TracerProvider,
        T::Tracer: Send + Sync + 'static,
        <T::Tracer as opentelemetry::trace::Tracer>::Span: Send + Sync + 'static,
        M: opentelemetry::metrics::MeterProvider + ?Sized,
    {
        self.telemetry = Some(crate::telemetry::Telemetry::from_providers(
            tracer_provider,
            meter_provider,
        ));
        self
    }

    /// As [`otel_providers`](Self::otel_providers), with the process's global providers
    /// (`opentelemetry::global`) as they are when this is called: set them first.
    #[cfg(feature = "otel")]
    #[must_use]
    pub fn otel_global(mut self) -> Self {
        self.telemetry = Some(crate::telemetry::Telemetry::global());
        self
    }

    /// Sets a top-level config key other than those with a method here (`principal`,
    /// `limits`, `approvers`, `separator`, `tool_name_pattern`, `confine`, `guest`,
    /// `audit` without `file`, `telemetry`, …; `docs/config.md`), checked as the config
    /// file's are when the config is built.
    #[must_use]
    pub fn setting(mut self, key: impl Into<String>, value: Value) -> Self {
        self.settings.insert(key.into(), value);
        self
    }

    /// The config these values make: what [`crate::pin()`] takes, and what
    /// [`start`](Self::start) starts.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the key: no rules, a setting given by a method of
    /// its own, Cedar text with a policy component or settings, or any error of the config
    /// file's reader ([`Config::from_value`]).
    pub fn config(&self) -> Result<Config, ConfigError> {
        let invalid = |path: &str, message: &str| ConfigError::Invalid {
            path: path.to_owned(),
            message: message.to_owned(),
        };
        if let Some(key) = self.settings.keys().find(|k| OWN_KEYS.contains(&k.as_str())) {
            return Err(invalid(
                key,
                "set by a method of the builder of its own, not as a setting",
            ));
        }
        let Some(rules) = &self.rules else {
            return Err(invalid(
                "rules",
                "missing: the rules decide which tools are registered",
            ));
        };
        if self.cedar.is_some() && (self.policy_component.is_some() || self.policy_settings.is_some())
        {
            return Err(invalid(
                "policy.cedar",
                "Cedar policies are decided by the built-in Cedar component: give no policy component or settings with them",
            ));
        }
        #[cfg(feature = "otel")]
        if self.telemetry.is_some() && self.settings.contains_key("telemetry") {
            return Err(invalid(
                "telemetry",
                "the runtime's OpenTelemetry providers were given: toolward exports through them, not over OTLP of its own",
            ));
        }
        let mut document = self.settings.clone();
        // A handed-in server is read as a stdio entry (its name checked, its limits laid
        // over the top-level ones), then given its transport below.
        let mut servers = self.servers.clone();
        for name in self.handed.keys() {
            servers.insert(name.clone(), json!({"command": HANDED_PLACEHOLDER}));
        }
        document.insert("mcpServers".to_owned(), Value::Object(servers));
        // Placeholders the reader resolves; replaced by the values below.
        document.insert("rules".to_owned(), json!({"file": IN_MEMORY}));
        let audit = document
            .entry("audit")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(audit) = audit {
            if audit.contains_key("file") {
                return Err(invalid(
                    "audit.file",
                    "set by the builder: with a state folder the log is `audit.jsonl` in it, else the records go to the audit store",
                ));
            }
            if let Some(state_dir) = &self.state_dir {
                audit.insert("file".to_owned(), json!(state_dir.join(DEFAULT_AUDIT_FILE)));
            }
        }
        if let Some(state_dir) = &self.state_dir {
            document.insert("state_dir".to_owned(), json!(state_dir));
        }
        let base_dir = match &self.base_dir {
            Some(base_dir) => std::path::absolute(base_dir),
            None => std::env::current_dir(),
        }
        .map_err(|e| invalid("base_dir", &format!("cannot be made absolute: {e}")))?;
        let mut config = Config::from_value(Value::Object(document), &base_dir)?;
        for (name, handed) in &self.handed {
            if let Some(server) = config.servers.get_mut(name) {
                server.transport = ServerTransport::Handed(handed.clone());
            }
        }
        config.rules.text = PolicySource::Bytes(rules.clone());
        config.rules.component = self.rules_component.clone().map(PolicySource::Bytes);
        config.policy.component = self.policy_component.clone().map(PolicySource::Bytes);
        config.policy.settings = self.policy_settings.clone().map(PolicySource::Bytes);
        config.policy.cedar = self.cedar.clone().map(PolicySource::Bytes);
        config.store = match self.state_dir {
            Some(_) => StoreConfig::StateDir,
            None => StoreConfig::Memory,
        };
        config.servers_dir = self.servers_dir.as_ref().map(|dir| base_dir.join(dir));
        if let Some(servers_dir) = &config.servers_dir
            && self.state_dir.is_some()
            && servers_dir.starts_with(&config.state_dir)
        {
            return Err(invalid(
                "servers_dir",
                "is inside the state folder: servers are denied the state folder, so their `HOME` and `TMPDIR` must be elsewhere",
            ));
        }
        Ok(config)
    }

    /// Starts the toolward these values make ([`Toolward::start`]): loads the components,
    /// every server (pins verified against the manifest, rules applied), and writes the
    /// start's audit records.
    ///
    /// # Errors
    ///
    /// [`StartFailure::Config`] as [`config`](Self::config); [`StartFailure::Manifest`]
    /// without a manifest; otherwise as [`Toolward::start`].
    pub async fn start(self) -> Result<Toolward, StartFailure> {
        let config = self.config()?;
        let Some(manifest) = self.manifest else {
            return Err(StartFailure::Manifest {
                path: IN_MEMORY.to_owned(),
                reason: "no manifest: pin the servers (`toolward::pin`), review the manifest, and give it to the builder".to_owned(),
            });
        };
        Toolward::start_from(
            config,
            Values {
                manifest: Some(manifest),
                audit: self.audit,
                #[cfg(feature = "otel")]
                telemetry: self.telemetry,
            },
        )
        .await
    }
}
