//! Load: list every configured server again, verify each tool against its pin, classify it
//! with the rules component, check and narrow its schema, check the server's hints against
//! the operator's effect, and register what passes. Everything else is reported, per tool,
//! with the reason; one server's failure never takes another's tools away.
//!
//! # Hints can only refuse
//! Effects are ordered read-only < local-change < remote-change < destructive. A server's
//! annotation contradicts the operator only when it claims *more* effect than the
//! operator's class (MCP spec 2025-11-25, "Tool annotations"):
//! - `destructiveHint: true` against read-only, local-change or remote-change — unless the
//!   same tool says `readOnlyHint: true`, in which case the spec says `destructiveHint` is
//!   meaningless;
//! - an explicit `readOnlyHint: false` against read-only;
//! - `openWorldHint: true` against local-change: a change made in an open world of external
//!   entities is a remote change. Against read-only it contradicts nothing: reading the
//!   open world (a search, a fetch) changes nothing.
//!
//! A contradiction refuses the tool unless its rule sets `allow_hint_mismatch`; then the
//! report records the override. A hint claiming less effect never counts, so a hint never
//! relaxes a classification, and an absent annotation contradicts nothing (a missing hint
//! is not a claim, whatever the spec's default value).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::canonical;
use crate::component::{
    Classification, ComponentCache, ComponentError, ComponentHost, Effect, GuestLimits,
    LoadedComponent, Policy, Rules, ToolView, built_in_for,
};
use crate::config::{ComponentSource, Config, IN_MEMORY, TextSource};
use crate::config::operator_file::{
    self, MAX_COMPONENT_BYTES, MAX_RULES_BYTES, MAX_SETTINGS_BYTES, OperatorFileError,
};
use crate::facts::FactScopes;
use crate::listing::{self, ListedTool, ListingBounds};
use crate::manifest::{Manifest, PinnedServer};
use crate::registry::{RegisteredTool, Registry};
use crate::schema;
use crate::state_dir::StateDir;
use crate::text;
use crate::transport::Upstream;

pub mod verdicts;
use verdicts::Verdicts;

/// Errors that stop a load as a whole (a server's or a tool's trouble never does).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// `tool_name_pattern` is not a valid regular expression.
    #[error("`tool_name_pattern` `{pattern}` is not a valid regular expression: {reason}")]
    NamePattern {
        /// The pattern.
        pattern: String,
        /// What the regex compiler said.
        reason: String,
    },
}

/// What a load did, for embedders (`--json` serializes it) and for `toolward check`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadReport {
    /// SHA-256 of the rules and policy components, by role (`rules`, `policy`).
    pub components: BTreeMap<String, String>,
    /// Component digests that differ from the manifest's: reported, not refused.
    pub component_changes: Vec<String>,
    /// One entry per configured server, in name order.
    pub servers: Vec<ServerReport>,
    /// Names in the rules file that match nothing: a server the config does not have, or a
    /// tool its server does not list (most often a misspelling; the closest name is
    /// suggested). Checked when the built-in rules component reads the rules file.
    pub rules_notes: Vec<String>,
}

/// What a load did with one server.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerReport {
    /// The server's name in the config.
    pub server: String,
    /// Why none of its tools are available (it did not start, its listing was refused, it
    /// is not pinned); `None` when it loaded.
    pub failure: Option<String>,
    /// `serverInfo` name and version, and the protocol version, when it started.
    pub identity: Option<IdentityReport>,
    /// Tools the model will see.
    pub registered: Vec<RegisteredReport>,
    /// Tools refused, with the reason.
    pub refused: Vec<Refusal>,
    /// Tools listed by the server that the manifest does not pin: ignored.
    pub unpinned: Vec<String>,
    /// Tools pinned and unchanged that no rule classifies: not registered.
    pub unclassified: Vec<Unclassified>,
    /// Hint contradictions the operator's rule allowed.
    pub overrides: Vec<HintOverride>,
    /// Changes that are reported, not refused (output schema, identity, annotations).
    pub notes: Vec<String>,
    /// How a stdio server runs: confined by Landlock, or not and why (`crate::confine`);
    /// `None` for an HTTP server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confinement: Option<ConfinementReport>,
}

/// How a stdio server runs, for the report.
#[derive(Debug, Clone, Serialize)]
pub struct ConfinementReport {
    /// Whether it starts confined by Landlock.
    pub confined: bool,
    /// When unconfined, whether the config chose it (`confine.unconfined`) rather than no
    /// launcher or no Landlock forcing it.
    pub by_config: bool,
    /// One line: what it is denied and the Landlock ABI, or why it is unconfined.
    pub detail: String,
}

impl From<&crate::confine::Plan> for ConfinementReport {
    fn from(plan: &crate::confine::Plan) -> Self {
        ConfinementReport {
            confined: plan.confinement().is_some(),
            by_config: matches!(plan, crate::confine::Plan::Unconfined { chosen: true, .. }),
            detail: plan.describe(),
        }
    }
}

/// A server's identity as it answered `initialize`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IdentityReport {
    /// `serverInfo.name`
    pub name: String,
    /// `serverInfo.version`
    pub version: String,
    /// The protocol version it answered.
    pub protocol_version: String,
}

/// A registered tool in the report.
#[derive(Debug, Clone, Serialize)]
pub struct RegisteredReport {
    /// The name the model sees.
    pub exposed_name: String,
    /// The server's name for it.
    pub tool: String,
    /// The operator's effect.
    pub effect: String,
}

/// A refused tool.
#[derive(Debug, Clone, Serialize)]
pub struct Refusal {
    /// The tool's name as the server knows it.
    pub tool: String,
    /// Why, in one line.
    pub reason: String,
    /// For a changed description: a unified text diff, pinned → listed, hidden characters
    /// made visible.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description_diff: Option<String>,
    /// For a changed or refused schema: JSON Pointers of the places concerned.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pointers: Vec<String>,
}

/// An unclassified tool, with what the operator needs to classify it.
#[derive(Debug, Clone, Serialize)]
pub struct Unclassified {
    /// The tool's name.
    pub tool: String,
    /// Its description, hidden characters made visible.
    pub description: String,
    /// Its annotations as received.
    pub annotations: crate::component::Annotations,
}

/// A hint contradiction that the rule allowed.
#[derive(Debug, Clone, Serialize)]
pub struct HintOverride {
    /// The tool.
    pub tool: String,
    /// The hint that claimed more effect (`destructiveHint: true`).
    pub hint: String,
    /// The operator's effect, which stands.
    pub effect: String,
}

impl LoadReport {
    /// Whether any tool or server was refused (the non-zero exit of `toolward check`).
    pub fn refused_anything(&self) -> bool {
        self.servers
            .iter()
            .any(|s| s.failure.is_some() || !s.refused.is_empty())
    }

    /// One line per tool or server the model will not see, and why: what the gateway
    /// tells the client in log notifications.
    pub fn messages(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.servers {
            if let Some(failure) = &s.failure {
                out.push(format!("server `{}` is unavailable: {failure}", s.server));
            }
            // A server that did not start runs nothing, confined or not.
            if let Some(c) = s
                .confinement
                .as_ref()
                .filter(|c| !c.confined && !c.by_config && s.failure.is_none())
            {
                out.push(format!("server `{}` runs {}", s.server, c.detail));
            }
            for r in &s.refused {
                out.push(format!(
                    "tool `{}` of server `{}` is refused: {}",
                    text::escape(&r.tool),
                    s.server,
                    r.reason
                ));
            }
        }
        out.extend(self.rules_notes.iter().cloned());
        out
    }

    /// The report for a person: per server, what registered, what was refused and why,
    /// with description diffs and schema pointers.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        for s in &self.servers {
            let _ = match &s.identity {
                Some(id) => writeln!(
                    out,
                    "server `{}` ({} {}, protocol {})",
                    s.server,
                    text::escape(&id.name),
                    text::escape(&id.version),
                    id.protocol_version
                ),
                None => writeln!(out, "server `{}`", s.server),
            };
            if let Some(failure) = &s.failure {
                let _ = writeln!(out, "  unavailable: {failure}");
            }
            // A server that did not start runs nothing: the line above says why.
            if let Some(c) = s
                .confinement
                .as_ref()
                .filter(|c| c.confined || s.failure.is_none())
            {
                let label = if c.confined {
                    "confined   "
                } else {
                    "UNCONFINED "
                };
                let _ = writeln!(out, "  {label} {}", c.detail);
            }
            for r in &s.registered {
                let _ = writeln!(
                    out,
                    "  registered  {}  ({}, {})",
                    r.exposed_name, r.tool, r.effect
                );
            }
            for o in &s.overrides {
                let _ = writeln!(
                    out,
                    "  override    {}: server hint `{}` contradicts effect `{}`; the rule allows it",
                    o.tool, o.hint, o.effect
                );
            }
            for r in &s.refused {
                let _ = writeln!(out, "  REFUSED     {}: {}", text::escape(&r.tool), r.reason);
                for p in &r.pointers {
                    let _ = writeln!(out, "                at `{p}`");
                }
                if let Some(diff) = &r.description_diff {
                    for line in diff.lines() {
                        let _ = writeln!(out, "                {line}");
                    }
                }
            }
            for u in &s.unclassified {
                let _ = writeln!(
                    out,
                    "  unclassified {} (not registered)",
                    text::escape(&u.tool)
                );
            }
            for u in &s.unpinned {
                let _ = writeln!(
                    out,
                    "  unpinned    {} (ignored; run `toolward pin` to review it)",
                    text::escape(u)
                );
            }
            for n in &s.notes {
                let _ = writeln!(out, "  note        {n}");
            }
        }
        for c in &self.component_changes {
            let _ = writeln!(out, "note: {c}");
        }
        for n in &self.rules_notes {
            let _ = writeln!(out, "note: {n}");
        }
        for (role, sha) in &self.components {
            let _ = writeln!(out, "{role} component sha256 {sha}");
        }
        let registered: usize = self.servers.iter().map(|s| s.registered.len()).sum();
        let refused: usize = self.servers.iter().map(|s| s.refused.len()).sum();
        let failed = self.servers.iter().filter(|s| s.failure.is_some()).count();
        let _ = writeln!(
            out,
            "{registered} tools registered, {refused} refused, {failed} servers unavailable"
        );
        out
    }
}

/// The hint of `annotations` that claims more effect than `effect`, if any (see the module
/// documentation for the rule).
pub fn contradicting_hint(
    annotations: &crate::component::Annotations,
    effect: Effect,
) -> Option<&'static str> {
    let read_only_claimed = annotations.read_only_hint == Some(true);
    if annotations.destructive_hint == Some(true)
        && !read_only_claimed
        && effect < Effect::Destructive
    {
        return Some("destructiveHint: true");
    }
    if annotations.read_only_hint == Some(false) && effect == Effect::ReadOnly {
        return Some("readOnlyHint: false");
    }
    if annotations.open_world_hint == Some(true) && effect == Effect::LocalChange {
        return Some("openWorldHint: true");
    }
    None
}

/// Connects to a configured server (as `pin` does: its own `HOME`, the same limits).
///
/// # Errors
/// A one-line reason naming the server.
pub async fn connect(config: &Config, server: &str) -> Result<Upstream, String> {
    let Some(server_config) = config.servers.get(server) else {
        return Err(format!("server `{server}` is not in the config"));
    };
    crate::pin::connect(config, server_config)
        .await
        .map_err(|e| text::error_chain(&e))
}

/// Loads every configured server against `manifest` with the configured `rules`: the
/// registry of what passed, and the report of everything.
///
/// `components` holds the SHA-256 of the components in use, by role (`rules`, `policy`);
/// they are compared with the manifest's and reported when they differ. With a state folder
/// `state`, which schemas compile into a validator is remembered there
/// ([`crate::load::verdicts`]): a load compiles only the schemas it has not seen.
///
/// # Errors
/// [`LoadError`] only for a config that cannot name tools at all; every server and tool
/// failure is in the report.
pub async fn load(
    config: &Config,
    rules: &Rules,
    manifest: &Manifest,
    components: BTreeMap<String, String>,
    state: Option<&StateDir>,
) -> Result<(Registry, LoadReport), LoadError> {
    let pattern = name_pattern(config)?;
    let mut report = LoadReport {
        component_changes: component_changes(&manifest.components, &components),
        components,
        servers: Vec::new(),
        rules_notes: Vec::new(),
    };
    let mut registry = Registry::new();
    // Servers start concurrently: a slow one does not hold up the others.
    let names: Vec<String> = config.servers.keys().cloned().collect();
    let connections = futures::future::join_all(names.iter().map(|name| async move {
        let upstream = connect(config, name).await;
        let listing = match &upstream {
            Ok(u) => {
                let bounds = config
                    .servers
                    .get(name)
                    .map(|s| ListingBounds::from(&s.limits))
                    .unwrap_or_default();
                Some(
                    listing::list_tools(u, &bounds)
                        .await
                        .map_err(|e| text::error_chain(&e)),
                )
            }
            Err(_) => None,
        };
        (upstream, listing)
    }))
    .await;

    let mut classifier = rules.classifier();
    let mut verdicts = state.map_or_else(Verdicts::memory, Verdicts::open);
    let mut candidates: Vec<RegisteredTool> = Vec::new();
    let mut listed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, (upstream, listing)) in names.iter().zip(connections) {
        let mut server_report = ServerReport {
            server: name.clone(),
            confinement: config
                .servers
                .get(name)
                .and_then(|server| crate::confine::plan(config, server))
                .map(|plan| ConfinementReport::from(&plan)),
            ..ServerReport::default()
        };
        let upstream = match upstream {
            Ok(u) => u,
            Err(reason) => {
                server_report.failure = Some(reason);
                report.servers.push(server_report);
                continue;
            }
        };
        let identity = upstream.identity();
        server_report.identity = Some(IdentityReport {
            name: identity.name.clone(),
            version: identity.version.clone(),
            protocol_version: identity.protocol_version.clone(),
        });
        let listing = match listing {
            Some(Ok(listing)) => listing,
            Some(Err(reason)) => {
                server_report.failure = Some(format!("its listing was refused: {reason}"));
                report.servers.push(server_report);
                upstream.close().await;
                continue;
            }
            None => {
                report.servers.push(server_report);
                upstream.close().await;
                continue;
            }
        };
        listed.insert(
            name.clone(),
            listing.tools.iter().map(|t| t.name.clone()).collect(),
        );
        let Some(pinned) = manifest.servers.get(name) else {
            server_report.failure = Some(format!(
                "server `{name}` is not in the manifest; run `toolward pin --server {name}` and review it"
            ));
            server_report.unpinned = listing.tools.iter().map(|t| t.name.clone()).collect();
            report.servers.push(server_report);
            upstream.close().await;
            continue;
        };
        if pinned.server_name != identity.name || pinned.server_version != identity.version {
            server_report.notes.push(format!(
                "the server now says it is `{} {}`; it was pinned as `{} {}`",
                text::escape(&identity.name),
                text::escape(&identity.version),
                text::escape(&pinned.server_name),
                text::escape(&pinned.server_version)
            ));
        }

        let classifier = match &mut classifier {
            Ok(c) => Ok(c),
            Err(reason) => Err(reason.clone()),
        };
        let server_candidates = check_server(
            config,
            name,
            pinned,
            listing,
            classifier,
            &mut verdicts,
            &mut server_report,
        );
        candidates.extend(server_candidates);
        report.servers.push(server_report);
        registry.insert_upstream(name, upstream);
    }

    verdicts.save();
    register_candidates(config, &pattern, candidates, &mut report, &mut registry);
    note_absent(config, &report, &mut registry);
    report.rules_notes = rules_notes(config, &listed, &report.servers);
    #[cfg(feature = "http-upstream")]
    for server in config.servers.values() {
        if let crate::config::ServerTransport::Http { oauth, .. } = &server.transport
            && oauth.per_principal
        {
            registry.set_per_principal(
                &server.name,
                Arc::new(GrantConnector {
                    config: config.clone(),
                    server: server.clone(),
                    grants: tokio::sync::OnceCell::new(),
                }),
            );
        }
    }
    Ok((registry, report))
}

/// Opens principals' own sessions with one HTTP server whose calls go out under each
/// principal's grant (`oauth.per_principal`; see [`crate::registry`]). The grant store is
/// opened at the first principal's call and shared by every session after it.
#[cfg(feature = "http-upstream")]
#[derive(Debug)]
struct GrantConnector {
    config: Config,
    server: crate::config::ServerConfig,
    grants: tokio::sync::OnceCell<Arc<crate::oauth::GrantStore>>,
}

#[cfg(feature = "http-upstream")]
impl crate::registry::PrincipalConnector for GrantConnector {
    fn connect<'a>(&'a self, principal: &'a str) -> crate::registry::ConnectFuture<'a> {
        use crate::registry::PrincipalRefusal;
        Box::pin(async move {
            if principal.is_empty() {
                return Err(PrincipalRefusal::SignIn(String::from(
                    "a principal without a name has no grant",
                )));
            }
            let grants = self
                .grants
                .get_or_try_init(|| async {
                    crate::oauth::GrantStore::open(&self.config)
                        .await
                        .map(Arc::new)
                })
                .await
                .map_err(|error| PrincipalRefusal::NotConnected(text::error_chain(&error)))?;
            crate::pin::connect_principal(&self.config, &self.server, grants, principal)
                .await
                .map_err(|error| match error {
                    crate::pin::PinError::Connect { source, .. }
                        if matches!(
                            *source,
                            crate::transport::TransportError::SignIn { .. }
                                | crate::transport::TransportError::InsufficientScope { .. }
                        ) =>
                    {
                        PrincipalRefusal::SignIn(source.to_string())
                    }
                    other => PrincipalRefusal::NotConnected(text::error_chain(&other)),
                })
        })
    }
}

/// The compiled `tool_name_pattern` of `config`.
///
/// # Errors
/// [`LoadError::NamePattern`] when it is not a valid regular expression.
pub fn name_pattern(config: &Config) -> Result<regex::Regex, LoadError> {
    regex::Regex::new(&config.tool_name_pattern).map_err(|e| LoadError::NamePattern {
        pattern: config.tool_name_pattern.clone(),
        reason: e.to_string(),
    })
}

/// The last pure step of [`load`]: gives each candidate of [`check_server`] its exposed
/// name, refuses a name that does not match `pattern` (see [`name_pattern`]) or that two
/// candidates share, registers the rest in `registry`, and records each in its server's
/// entry of `report` (a candidate whose server has no entry is dropped).
///
/// Public, with [`check_server`], so that `benches/load.rs` measures a load of many tools
/// without starting servers; [`load`] is these steps after listing each server.
pub fn register_candidates(
    config: &Config,
    pattern: &regex::Regex,
    candidates: Vec<RegisteredTool>,
    report: &mut LoadReport,
    registry: &mut Registry,
) {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for tool in &candidates {
        *seen.entry(tool.exposed_name.clone()).or_default() += 1;
    }
    for tool in candidates {
        let reason = if !pattern.is_match(&tool.exposed_name) {
            Some(format!(
                "its exposed name `{}` does not match `tool_name_pattern` `{}`",
                text::escape(&tool.exposed_name),
                config.tool_name_pattern
            ))
        } else if seen.get(&tool.exposed_name).copied().unwrap_or(0) > 1 {
            Some(format!(
                "its exposed name `{}` collides with another tool's",
                tool.exposed_name
            ))
        } else {
            None
        };
        let Some(server_report) = report.servers.iter_mut().find(|s| s.server == tool.server)
        else {
            continue;
        };
        match reason {
            Some(reason) => server_report.refused.push(Refusal {
                tool: tool.upstream_name.clone(),
                reason,
                description_diff: None,
                pointers: Vec::new(),
            }),
            None => {
                server_report.registered.push(RegisteredReport {
                    exposed_name: tool.exposed_name.clone(),
                    tool: tool.upstream_name.clone(),
                    effect: tool.effect.to_string(),
                });
                // Names are unique here, so the insert cannot be refused.
                let _ = registry.insert_tool(tool);
            }
        }
    }
}

/// The names in the rules file that match nothing (see [`LoadReport::rules_notes`]).
/// `listed` holds the well-formed tool names of each server whose listing loaded; a name the
/// server listed but that was refused before classification (malformed, listed twice) is
/// noted as refused, with the reason from `servers`. Only for the built-in rules component,
/// whose rules format toolward knows; empty otherwise.
fn rules_notes(
    config: &Config,
    listed: &BTreeMap<String, Vec<String>>,
    servers: &[ServerReport],
) -> Vec<String> {
    if config.rules.component.is_some() {
        return Vec::new();
    }
    // The component already accepted this text; a file changed since is not worth a note.
    let Ok(bytes) = read_rules(config) else {
        return Vec::new();
    };
    let Ok(text) = String::from_utf8(bytes) else {
        return Vec::new();
    };
    let Ok(rules) = toolward_policy_table::Rules::parse(&text) else {
        return Vec::new();
    };
    let configured: Vec<&str> = config
        .servers
        .keys()
        .chain(&config.disabled_servers)
        .map(String::as_str)
        .collect();
    let mut notes = Vec::new();
    for (server, tools) in rules.names() {
        if !configured.contains(&server) {
            notes.push(format!(
                "the rules name server `{}`, which the config does not have{}",
                text::escape(server),
                did_you_mean(server, configured.iter().copied())
            ));
            continue;
        }
        let Some(listed) = listed.get(server) else {
            continue;
        };
        let refused = servers
            .iter()
            .find(|s| s.server == server)
            .map_or(&[][..], |s| s.refused.as_slice());
        for tool in tools {
            if listed.iter().any(|name| name == tool) {
                continue;
            }
            if let Some(refusal) = refused.iter().find(|r| r.tool == tool) {
                notes.push(format!(
                    "the rules classify tool `{}` of server `{server}`, which the server lists but toolward refused: {}",
                    text::escape(tool),
                    refusal.reason
                ));
            } else {
                notes.push(format!(
                    "the rules classify tool `{}` of server `{server}`, which the server does not list{}",
                    text::escape(tool),
                    did_you_mean(tool, listed.iter().map(String::as_str))
                ));
            }
        }
    }
    notes
}

/// ` (did you mean `NAME`?)` for the candidate closest to `name`, when one is close.
fn did_you_mean<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    candidates
        .map(|candidate| (strsim::jaro_winkler(name, candidate), candidate))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| format!(" (did you mean `{}`?)", text::escape(candidate)))
        .unwrap_or_default()
}

/// Tells the registry why each tool the load kept out is absent, so that a call of one is
/// answered with the reason rather than "unknown tool".
fn note_absent(config: &Config, report: &LoadReport, registry: &mut Registry) {
    let separator = &config.separator;
    for server in &report.servers {
        let exposed = |tool: &str| format!("{}{separator}{tool}", server.server);
        if let Some(failure) = &server.failure {
            registry.note_unavailable(&server.server, separator, failure.clone());
        }
        for refusal in &server.refused {
            registry.note_absent(
                exposed(&refusal.tool),
                format!("toolward refused it at load: {}", refusal.reason),
            );
        }
        for unclassified in &server.unclassified {
            registry.note_absent(
                exposed(&unclassified.tool),
                String::from("no rule classifies it, so it is not offered"),
            );
        }
        for unpinned in &server.unpinned {
            registry.note_absent(
                exposed(unpinned),
                String::from("the manifest does not pin it (run `toolward pin` and review)"),
            );
        }
    }
}

fn component_changes(
    pinned: &BTreeMap<String, String>,
    now: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (role, sha) in now {
        match pinned.get(role) {
            Some(old) if old != sha => out.push(format!(
                "the {role} component changed since the pin: sha256 `{old}` → `{sha}`"
            )),
            None if !pinned.is_empty() => out.push(format!(
                "the {role} component (sha256 `{sha}`) is not in the manifest"
            )),
            _ => {}
        }
    }
    out
}

fn refusal(tool: &str, reason: String) -> Refusal {
    Refusal {
        tool: tool.to_owned(),
        reason,
        description_diff: None,
        pointers: Vec::new(),
    }
}

/// Verifies, classifies and narrows the tools of one server: compares `listed` (its listing)
/// with `pinned` (its manifest entry), classifies each unchanged tool with `classifier` (an
/// `Err` refuses every tool with that reason), checks and narrows its schemas. The tools
/// that pass are returned, ready for [`register_candidates`]; everything else goes into
/// `report`, with the reason. Each schema's validator is checked through `verdicts`, which
/// compiles only schemas it does not know to compile.
///
/// Pure apart from the guest calls of `classifier`: public so that `benches/load.rs`
/// measures a load of many tools without starting servers.
pub fn check_server(
    config: &Config,
    server: &str,
    pinned: &PinnedServer,
    listed: listing::Listing,
    mut classifier: Result<&mut crate::component::Classifier, String>,
    verdicts: &mut Verdicts,
    report: &mut ServerReport,
) -> Vec<RegisteredTool> {
    let mut out = Vec::new();
    for name in &listed.duplicates {
        report.refused.push(refusal(
            name,
            format!(
                "server `{server}` listed tool `{}` more than once; every entry is refused",
                text::escape(name)
            ),
        ));
    }
    for (name, reason) in &listed.malformed {
        report.refused.push(refusal(name, reason.clone()));
    }
    let offered: BTreeSet<&str> = listed
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .chain(listed.duplicates.iter().map(String::as_str))
        .chain(listed.malformed.iter().map(|(n, _)| n.as_str()))
        .collect();
    for name in pinned.tools.keys() {
        if !offered.contains(name.as_str()) {
            report.refused.push(refusal(
                name,
                format!("tool `{name}` is pinned but server `{server}` no longer offers it"),
            ));
        }
    }
    // Owned: what a registered tool keeps (its description and schemas) moves into it.
    for mut tool in listed.tools {
        let Some(pin) = pinned.tools.get(&tool.name) else {
            report.unpinned.push(tool.name.clone());
            continue;
        };
        let mut changed = false;
        if pin.description_sha256 != tool.description_sha256 {
            changed = true;
            report.refused.push(Refusal {
                tool: tool.name.clone(),
                reason: format!(
                    "the description of tool `{}` of server `{server}` changed since the pin",
                    tool.name
                ),
                description_diff: Some(text_diff(&pin.description, &tool.description)),
                pointers: Vec::new(),
            });
        }
        if pin.input_schema_sha256 != tool.input_schema_sha256 {
            changed = true;
            report.refused.push(Refusal {
                tool: tool.name.clone(),
                reason: format!(
                    "the input schema of tool `{}` of server `{server}` changed since the pin",
                    tool.name
                ),
                description_diff: None,
                pointers: schema::changed_pointers(&pin.input_schema, &tool.input_schema),
            });
        }
        if changed {
            continue;
        }
        if pin.output_schema_sha256 != tool.output_schema_sha256 {
            report.notes.push(format!(
                "the output schema of tool `{}` changed since the pin (reported, not refused)",
                tool.name
            ));
        }
        // Both parsed exactly (members sorted, numbers canonical): equal values have equal
        // canonical texts, without writing them.
        if pin.annotations != tool.annotations_raw {
            report.notes.push(format!(
                "the annotations of tool `{}` changed since the pin (checked against the rule below)",
                tool.name
            ));
        }
        let view = ToolView {
            server: server.to_owned(),
            name: tool.name.clone(),
            description: tool.description.clone(),
            input_schema: std::mem::take(&mut tool.input_schema_text),
            annotations: tool.annotations.clone(),
            description_sha256: tool.description_sha256.clone(),
            input_schema_sha256: tool.input_schema_sha256.clone(),
        };
        let classification = match &mut classifier {
            Ok(c) => c.classify(&view),
            Err(reason) => Err(reason.clone()),
        };
        let classification = match classification {
            Ok(Some(c)) => c,
            Ok(None) => {
                report.unclassified.push(Unclassified {
                    tool: tool.name.clone(),
                    description: text::escape(&tool.description),
                    annotations: tool.annotations.clone(),
                });
                continue;
            }
            Err(reason) => {
                report.refused.push(refusal(&tool.name, reason));
                continue;
            }
        };
        match register(config, server, tool, &classification, verdicts, report) {
            Ok(registered) => out.push(registered),
            Err(r) => report.refused.push(r),
        }
    }
    out
}

/// Applies a classification to a verified tool: schema checks, hint check, narrowing.
fn register(
    config: &Config,
    server: &str,
    tool: ListedTool,
    classification: &Classification,
    verdicts: &mut Verdicts,
    report: &mut ServerReport,
) -> Result<RegisteredTool, Refusal> {
    let name = &tool.name;
    let schema_refusal = |what: &str, r: schema::SchemaRefusal| Refusal {
        tool: name.clone(),
        reason: format!("the {what} of tool `{name}` of server `{server}` is refused: {r}"),
        description_diff: None,
        pointers: vec![r.pointer().to_owned()],
    };
    let dialect = schema::check_input_schema(&tool.input_schema)
        .map_err(|r| schema_refusal("input schema", r))?;
    let validator_refusal =
        |what: &str, dialect: schema::Dialect, p: crate::schema::validator::ValidatorProblem| {
            Refusal {
                tool: name.clone(),
                reason: format!(
                    "the {what} of tool `{name}` of server `{server}` is refused: it cannot be used for validation under `$schema` `{}`: {}",
                    dialect.meta_schema_uri(),
                    p.reason
                ),
                description_diff: None,
                pointers: vec![p.pointer],
            }
        };
    verdicts
        .check(&tool.input_schema, &tool.input_schema_sha256, dialect)
        .map_err(|p| validator_refusal("input schema", dialect, p))?;
    if let Some(output) = &tool.output_schema {
        let output_dialect =
            schema::check_output_schema(output).map_err(|r| schema_refusal("output schema", r))?;
        // Without its hash (never from a listing), the schema is compiled.
        let output_sha256 = tool.output_schema_sha256.as_deref().unwrap_or_default();
        verdicts
            .check(output, output_sha256, output_dialect)
            .map_err(|p| validator_refusal("output schema", output_dialect, p))?;
    }
    if let Some(hint) = contradicting_hint(&tool.annotations, classification.effect) {
        if classification.allow_hint_mismatch {
            report.overrides.push(HintOverride {
                tool: name.clone(),
                hint: hint.to_owned(),
                effect: classification.effect.to_string(),
            });
        } else {
            return Err(refusal(
                name,
                format!(
                    "server `{server}` marks tool `{name}` `{hint}`, which claims more than the rule's effect `{}`; set `allow_hint_mismatch` in the rule to accept it",
                    classification.effect
                ),
            ));
        }
    }
    let mut fixed = Vec::new();
    for (param, text) in &classification.fixed_parameters {
        let value = canonical::parse(text.as_bytes()).map_err(|e| {
            refusal(
                name,
                format!("the fixed value of parameter `{param}` of tool `{name}` is not JSON: {e}"),
            )
        })?;
        fixed.push((param.clone(), value));
    }
    // A denied parameter the server requires would make every call fail: refuse the tool
    // at load, where the operator sees it, not at each call.
    if let Some(required) = tool.input_schema.get("required").and_then(|r| r.as_array()) {
        for param in &classification.denied_parameters {
            if required.iter().any(|r| r.as_str() == Some(param.as_str())) {
                return Err(Refusal {
                    tool: name.clone(),
                    reason: format!(
                        "the rule denies parameter `{param}` of tool `{name}` of server `{server}`, which its schema requires: every call would fail; fix it instead, or leave the tool unclassified"
                    ),
                    description_diff: None,
                    pointers: vec!["/required".to_owned()],
                });
            }
        }
    }
    // A fixed value must be one the server's schema accepts for that parameter.
    for (param, value) in &fixed {
        let pointer = format!("/properties/{}", canonical::pointer_token(param));
        let Some(subschema) = tool.input_schema.pointer(&pointer) else {
            continue; // narrowing refuses a hidden name that is not a property
        };
        let mut standalone = subschema.to_serde_json();
        if let (Some(defs_owner), serde_json::Value::Object(map)) =
            (tool.input_schema.as_object(), &mut standalone)
        {
            // Keep local definitions reachable for `$ref`s inside the subschema.
            for (key, v) in defs_owner {
                if key == "$defs" || key == "definitions" {
                    map.entry(key.clone()).or_insert_with(|| v.to_serde_json());
                }
            }
        }
        let accepted = crate::schema::validator::build_validator(
            &canonical::Value::from_serde_json(&standalone),
            dialect,
        )
        .map(|v| v.is_valid(&value.to_serde_json()));
        if accepted != Ok(true) {
            return Err(Refusal {
                tool: name.clone(),
                reason: format!(
                    "the rule fixes parameter `{param}` of tool `{name}` of server `{server}` to `{}`, which its schema does not accept",
                    canonical::to_canonical(value)
                ),
                description_diff: None,
                pointers: vec![pointer],
            });
        }
    }
    let hidden: Vec<&str> = classification
        .denied_parameters
        .iter()
        .map(String::as_str)
        .chain(
            classification
                .fixed_parameters
                .iter()
                .map(|(n, _)| n.as_str()),
        )
        .collect();
    // Most tools hide nothing: then both fields share one schema, and `narrow` (which checks
    // the schema as `check_input_schema` did above, then copies it) is skipped.
    let narrowed = if hidden.is_empty() {
        None
    } else {
        Some(
            schema::narrow(&tool.input_schema, &hidden)
                .map_err(|r| schema_refusal("input schema", r))?,
        )
    };
    let original_schema = Arc::new(tool.input_schema);
    let input_schema = match narrowed {
        Some(narrowed) if narrowed != *original_schema => Arc::new(narrowed),
        _ => Arc::clone(&original_schema),
    };
    Ok(RegisteredTool {
        server: server.to_owned(),
        upstream_name: name.clone(),
        exposed_name: format!("{server}{}{name}", config.separator),
        effect: classification.effect,
        description: classification
            .description_override
            .clone()
            .unwrap_or(tool.description),
        input_schema,
        original_schema,
        dialect,
        output_schema: tool.output_schema,
        denied: classification.denied_parameters.clone(),
        fixed,
        annotations: tool.annotations,
        description_sha256: tool.description_sha256,
        input_schema_sha256: tool.input_schema_sha256,
    })
}

/// A unified diff of two descriptions, pinned → listed, line by line, each line escaped
/// ([`text::lines`]): the diff's own line breaks are the only ones in it.
pub fn text_diff(pinned: &str, listed: &str) -> String {
    let pinned = text::lines(pinned).collect::<Vec<_>>().join("\n");
    let listed = text::lines(listed).collect::<Vec<_>>().join("\n");
    similar::TextDiff::from_lines(&pinned, &listed)
        .unified_diff()
        .header("pinned", "listed")
        .to_string()
}

/// Errors of preparing the components a load needs.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A file named by the config cannot be read, is not a regular file, or is over its
    /// limit.
    #[error(transparent)]
    Read(#[from] OperatorFileError),
    /// The rules file (or policy settings file) is refused: not JSON, a duplicate key, or
    /// the component's `configure` refused it (the reason names the fault's path).
    #[error("rules `{path}`: {reason}")]
    Rules {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where in the file.
        reason: String,
    },
    /// A component failed to load.
    #[error(transparent)]
    Component(#[from] crate::component::ComponentError),
    /// A component from an OCI registry cannot be pulled, or its bytes or signature are
    /// refused (the message names the reference and the digest).
    #[cfg(feature = "oci")]
    #[error(transparent)]
    Oci(#[from] crate::oci::OciError),
    /// An artifact from an OCI registry named by a toolward started without a state folder
    /// ([`crate::StoreConfig::Memory`]): pulled artifacts are kept there.
    #[error(
        "`{reference}` is in an OCI registry, and this toolward has no state folder to pull it into: give the bytes, or a state folder"
    )]
    OciWithoutState {
        /// The reference.
        reference: String,
    },
    /// A component from an OCI registry, in a build without the `oci` feature.
    #[cfg(not(feature = "oci"))]
    #[error("components from OCI registries need the `oci` feature of the toolward crate, which this build leaves out")]
    OciFeatureOff,
    /// The config names what this build of the library leaves out: a Cargo feature of the
    /// `toolward` crate that is off (`policy.cedar` needs `cedar`).
    #[cfg(not(feature = "cedar"))]
    #[error(
        "{what} needs the `{feature}` feature of the toolward crate, which this build leaves out"
    )]
    FeatureOff {
        /// What the config names.
        what: &'static str,
        /// The feature it needs.
        feature: &'static str,
    },
}

/// The built-in Cedar component, loaded.
#[cfg(feature = "cedar")]
fn built_in_cedar(host: &ComponentHost) -> Result<LoadedComponent, StartError> {
    Ok(host.load(
        crate::component::CEDAR_COMPONENT,
        crate::cedar::BUILT_IN_CEDAR,
    )?)
}

/// Without the `cedar` feature there is no Cedar component: `policy.cedar` is refused.
#[cfg(not(feature = "cedar"))]
fn built_in_cedar(_host: &ComponentHost) -> Result<LoadedComponent, StartError> {
    Err(StartError::FeatureOff {
        what: "`policy.cedar`",
        feature: "cedar",
    })
}

/// The rules and policy a config names, loaded and configured once.
#[derive(Debug)]
pub struct Components {
    /// The wasmtime host (shared engine and compiled-component cache).
    pub host: ComponentHost,
    /// The configured `rules` export.
    pub rules: Rules,
    /// The configured `policy` export.
    pub policy: Arc<Policy>,
    /// SHA-256 of each component by role (`rules`, `policy`).
    pub digests: BTreeMap<String, String>,
    /// For each artifact from an OCI registry, by role (`rules`, `policy`, and `settings` for
    /// `policy.settings` or `policy.cedar`): the name in `oci.keys` of the key its signature
    /// verified with.
    pub signers: BTreeMap<String, String>,
    /// For policy settings or Cedar text from an OCI registry: the manifest digest pinned.
    pub settings_digest: Option<String>,
    /// The scopes whose facts the policy reads (`docs/facts.md`): from the rules' `limits`
    /// for the built-in default component, from the `facts@0.2.0` export of a component
    /// that has one (the Cedar component), every scope otherwise.
    pub fact_scopes: FactScopes,
}

/// The compiled-component cache of a config: `<state_dir>/components`
/// ([`crate::component::CACHE_FOLDER`]).
pub fn component_cache_dir(config: &Config) -> PathBuf {
    config.state_dir.join(crate::component::CACHE_FOLDER)
}

/// The config's rules: a file, bounded ([`MAX_RULES_BYTES`]), owned by the operator or root
/// and writable by no one else ([`operator_file::read_trusted`]), or the text an embedder
/// gave, bounded the same; without a byte order mark.
fn read_rules(config: &Config) -> Result<Vec<u8>, StartError> {
    let bytes = match &config.rules.text {
        TextSource::File(path) => operator_file::read_trusted(path, "rules file", MAX_RULES_BYTES)?,
        TextSource::Bytes(bytes) => {
            if bytes.len() as u64 > MAX_RULES_BYTES {
                return Err(StartError::Rules {
                    path: rules_path(config),
                    reason: format!(
                        "{} bytes, more than the limit of {MAX_RULES_BYTES} bytes",
                        bytes.len()
                    ),
                });
            }
            bytes.clone()
        }
        TextSource::Oci(_) => {
            return Err(StartError::Rules {
                path: rules_path(config),
                reason: "rules text cannot come from an OCI registry: give a file or the text"
                    .to_owned(),
            });
        }
    };
    Ok(operator_file::without_bom(&bytes).to_vec())
}

/// Where the rules are, for messages: their file, or how text given in memory is named.
fn rules_path(config: &Config) -> PathBuf {
    PathBuf::from(config.rules.text.to_string())
}

/// Loads the config's rules and policy components (the built-in default component where
/// none is named) and configures each once: the rules component with the rules file's
/// text, the policy component with `policy.settings`' text or, when none is given, the
/// rules file's text (whose decision table the default component reads).
///
/// # Errors
/// [`StartError`] when a file cannot be read, a component is invalid or impure, or
/// `configure` refuses its settings (the message names the fault's path in the file).
///
/// Without a state folder (`state` `None`, [`crate::config::StoreConfig::Memory`]) the
/// components are compiled without the cache, and one from an OCI registry is refused.
pub fn prepare_components(
    config: &Config,
    limits: GuestLimits,
    state: Option<&StateDir>,
) -> Result<Components, StartError> {
    let cache = state.map(ComponentCache::open).transpose()?;
    let host = ComponentHost::new(limits, cache)?;
    let rules_bytes = read_rules(config)?;
    // Parsers disagree on which of two equal keys wins, so a rules text with duplicate
    // keys is ambiguous to review: refuse it before any component reads it.
    canonical::parse(&rules_bytes).map_err(|e| StartError::Rules {
        path: rules_path(config),
        reason: e.to_string(),
    })?;
    let rules_text = String::from_utf8_lossy(&rules_bytes).into_owned();
    // The built-in component for these rules: its reviewing variant when they name reviews.
    let built_in = built_in_for(&rules_text);
    // Who signed each component from a registry, by role (`rules`, `policy`).
    let mut signers = BTreeMap::new();
    let mut load_component = |source: &Option<ComponentSource>,
                              what: &'static str,
                              role: &str|
     -> Result<LoadedComponent, StartError> {
        match source {
            Some(ComponentSource::File(path)) => {
                let bytes = operator_file::read(path, what, MAX_COMPONENT_BYTES)?;
                Ok(host.load(&bytes, &path.display().to_string())?)
            }
            Some(ComponentSource::Bytes(bytes)) => {
                if bytes.len() as u64 > MAX_COMPONENT_BYTES {
                    return Err(OperatorFileError::TooLarge {
                        what,
                        path: PathBuf::from(IN_MEMORY),
                        bytes: bytes.len() as u64,
                        limit: MAX_COMPONENT_BYTES,
                    }
                    .into());
                }
                Ok(host.load(bytes, IN_MEMORY)?)
            }
            Some(ComponentSource::Oci(reference)) => {
                let (bytes, signer) = fetch_oci(config, reference, OciKind::Component, state)?;
                signers.insert(role.to_owned(), signer);
                Ok(host.load(&bytes, &reference.to_string())?)
            }
            None => Ok(host.load(built_in, "built-in")?),
        }
    };
    let rules_component = load_component(&config.rules.component, "rules component", "rules")?;
    let policy_component = if config.policy.cedar.is_some() {
        built_in_cedar(&host)?
    } else if config.policy.component == config.rules.component {
        if let Some(signer) = signers.get("rules").cloned() {
            signers.insert("policy".to_owned(), signer);
        }
        rules_component.clone()
    } else {
        load_component(&config.policy.component, "policy component", "policy")?
    };
    let (settings_source, settings_kind, what) = match (&config.policy.cedar, &config.policy.settings) {
        (Some(cedar), _) => (Some(cedar), OciKind::CedarPolicies, "Cedar policy"),
        (None, settings) => (settings.as_ref(), OciKind::PolicySettings, "policy settings"),
    };
    let mut settings_digest = None;
    let policy_text = match settings_source {
        Some(TextSource::File(path)) => {
            let bytes = operator_file::read(path, what, MAX_SETTINGS_BYTES)?;
            String::from_utf8_lossy(operator_file::without_bom(&bytes)).into_owned()
        }
        Some(TextSource::Bytes(bytes)) => {
            if bytes.len() as u64 > MAX_SETTINGS_BYTES {
                return Err(OperatorFileError::TooLarge {
                    what,
                    path: PathBuf::from(IN_MEMORY),
                    bytes: bytes.len() as u64,
                    limit: MAX_SETTINGS_BYTES,
                }
                .into());
            }
            String::from_utf8_lossy(operator_file::without_bom(bytes)).into_owned()
        }
        Some(TextSource::Oci(reference)) => {
            let (bytes, signer) = fetch_oci(config, reference, settings_kind, state)?;
            signers.insert("settings".to_owned(), signer);
            settings_digest = reference.digest.clone();
            String::from_utf8_lossy(operator_file::without_bom(&bytes)).into_owned()
        }
        None => rules_text.clone(),
    };
    // The Cedar component reviews results and labels sessions as the rules file (where the
    // default component reads it) says: its reviews, levels and tools' `returns`.
    #[cfg(feature = "cedar")]
    let policy_text = if config.policy.cedar.is_some() {
        crate::cedar::settings(
            &policy_text,
            config
                .rules
                .component
                .is_none()
                .then_some(rules_text.as_str()),
        )
    } else {
        policy_text
    };
    let in_file = |path: &Path| {
        let path = path.to_owned();
        move |e: ComponentError| match e {
            ComponentError::Settings { message, .. } => StartError::Rules {
                path: path.clone(),
                reason: message,
            },
            other => StartError::Component(other),
        }
    };
    let rules = host
        .configure_rules(&rules_component, &rules_text)
        .map_err(in_file(&rules_path(config)))?;
    // Where a settings fault is, in the message: the file, or the reference it came from.
    let policy_path = match settings_source {
        Some(TextSource::File(path)) => path.clone(),
        Some(other @ (TextSource::Oci(_) | TextSource::Bytes(_))) => PathBuf::from(other.to_string()),
        None => rules_path(config),
    };
    let policy = host
        .configure_policy(&policy_component, &policy_text)
        .map_err(in_file(policy_path.as_path()))?;
    let fact_scopes = if config.policy.cedar.is_none() && config.policy.component.is_none() {
        // The built-in default component decides with this very crate's table: its limits
        // are the facts it reads. Its settings were configured above, so they parse.
        toolward_policy_table::Rules::parse(&policy_text).map_or(FactScopes::ALL, |rules| {
            FactScopes::from_names(rules.fact_scopes())
        })
    } else {
        policy.fact_scopes().map_or(FactScopes::ALL, |names| {
            FactScopes::from_names(names.iter().map(String::as_str))
        })
    };
    let digests = BTreeMap::from([
        ("policy".to_owned(), policy_component.sha256().to_owned()),
        ("rules".to_owned(), rules_component.sha256().to_owned()),
    ]);
    Ok(Components {
        host,
        rules,
        policy: Arc::new(policy),
        digests,
        signers,
        settings_digest,
        fact_scopes,
    })
}

/// The artifact of `kind` `reference` pins (a component, settings or Cedar text), from the
/// state folder's cache or pulled, with its signature verified with `oci.keys`: its bytes and
/// the name of the key that signed it.
#[cfg(feature = "oci")]
fn fetch_oci(
    config: &Config,
    reference: &crate::config::OciReference,
    kind: OciKind,
    state: Option<&StateDir>,
) -> Result<(Vec<u8>, String), StartError> {
    let state = state.ok_or_else(|| StartError::OciWithoutState {
        reference: reference.to_string(),
    })?;
    let keys = crate::oci::TrustedKeys::read(&config.oci.keys)?;
    let verified = crate::oci::fetch_verified(reference, kind, state, &keys)?;
    Ok((verified.bytes, verified.signer))
}

#[cfg(feature = "oci")]
use crate::oci::ArtifactKind as OciKind;

/// What an `oci://` field names, in a build without the `oci` feature.
#[cfg(not(feature = "oci"))]
#[derive(Debug, Clone, Copy)]
enum OciKind {
    Component,
    PolicySettings,
    CedarPolicies,
}

/// Without the `oci` feature the config reader already refuses `oci://`; refused here too.
#[cfg(not(feature = "oci"))]
fn fetch_oci(
    _config: &Config,
    _reference: &crate::config::OciReference,
    _kind: OciKind,
    _state: Option<&StateDir>,
) -> Result<(Vec<u8>, String), StartError> {
    Err(StartError::OciFeatureOff)
}
