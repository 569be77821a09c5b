//! The tools and servers page: every gateway's published state ([`crate::gateways`]), and
//! "accept" of a changed tool, which does what `toolward pin --tool SERVER/TOOL` does
//! ([`tool_change`], then the manifest written) against the config the console was started
//! with, recorded as a `pin-accepted` audit record naming the signed-in user. A gateway
//! loads its pins at start: the page then says which gateways must be restarted. Where the
//! console cannot write the manifest (no config of its own, a fleet's config, or a gateway
//! that runs another config) the page shows the diff and the command to run where the
//! config is kept.
//!
//! Every string a gateway published is a server's or a config's words: escaped here with
//! [`text::escape`] (a diff line by line), then by the template's HTML autoescaping.
//!
//! [`tool_change`]: crate::pin::tool::tool_change

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use http::StatusCode;
use minijinja::context;
use serde::Serialize;

use super::pages::{Body, Shared, answerer, error_page, field, redirect};
use super::session::Session;
use crate::audit::{AuditEvent, AuditKind, AuditLog};
use crate::config::{Config, StoreConfig};
use crate::gateways::{GatewayState, Published};
use crate::identity::AnsweredBy;
use crate::manifest::Manifest;
use crate::state_dir::StateDir;
use crate::text;

/// What the tools page keeps between requests.
pub(super) struct Tools {
    /// The config the console was started with; `None`: it writes no manifest.
    config: Option<Arc<Config>>,
    /// One acceptance at a time: two would each write the manifest from what they read.
    accepting: tokio::sync::Mutex<()>,
    /// What was accepted from this console since it started, by server and tool: who, when.
    accepted: Mutex<BTreeMap<(String, String), String>>,
}

impl Tools {
    pub(super) fn new(config: Option<Config>) -> Tools {
        Tools {
            config: config.map(Arc::new),
            accepting: tokio::sync::Mutex::new(()),
            accepted: Mutex::new(BTreeMap::new()),
        }
    }

    /// The config whose manifest this console may write: one of its own on a state folder
    /// (a fleet's is kept where its operators keep it).
    fn writable(&self) -> Option<&Arc<Config>> {
        self.config
            .as_ref()
            .filter(|config| matches!(config.store, StoreConfig::StateDir))
    }
}

/// A gateway as the page shows it: every string escaped.
#[derive(Debug, Serialize)]
struct GatewayView {
    id: String,
    live: bool,
    config_file: String,
    pid: u32,
    started: String,
    updated: String,
    listen: String,
    /// The manifest was written after this gateway started: what it serves is older.
    stale_pins: bool,
    servers: Vec<ServerView>,
}

#[derive(Debug, Serialize)]
struct ServerView {
    server: String,
    connection: String,
    reason: Option<String>,
    restarts: u64,
    registered: usize,
    confinement: Option<ConfinementView>,
    refused: Vec<RefusedView>,
    withdrawn: Vec<(String, String)>,
}

#[derive(Debug, Serialize)]
struct ConfinementView {
    confined: bool,
    by_config: bool,
    detail: String,
    applied: Option<String>,
}

#[derive(Debug, Serialize)]
struct RefusedView {
    tool: String,
    reason: String,
    diff: Option<String>,
    pointers: Vec<String>,
    /// The form's values, raw (the form posts them back; autoescaped in the attribute).
    server_raw: String,
    tool_raw: String,
    /// SHA-256 of the description diff shown ([`shown_hash`]): the Accept form carries it,
    /// and Accept refuses when the server's listing now gives another.
    shown: String,
    /// Accept here: the tool is pinned in the manifest this console writes, and the gateway
    /// runs that config.
    acceptable: bool,
    /// Else, the command to run where the config is kept.
    command: String,
    /// Accepted from this console: by whom and when.
    accepted: Option<String>,
}

/// What the page needs of the console's own config: its file, its manifest's path, its
/// pinned tools and when the manifest was last written.
struct Own {
    file: Option<PathBuf>,
    manifest: PathBuf,
    pinned: BTreeSet<(String, String)>,
    written_ms: Option<u64>,
}

fn own(config: &Config) -> Own {
    let manifest = Manifest::read(&config.manifest).ok();
    let pinned = manifest
        .iter()
        .flat_map(|m| m.servers.iter())
        .flat_map(|(server, pins)| {
            pins.tools
                .keys()
                .map(move |tool| (server.clone(), tool.clone()))
        })
        .collect();
    let written_ms = std::fs::metadata(&config.manifest)
        .and_then(|meta| meta.modified())
        .ok()
        .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Own {
        file: config.file.as_deref().map(canonical),
        manifest: config.manifest.clone(),
        pinned,
        written_ms,
    }
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
}

/// `toolward pin --config CONFIG --tool SERVER/TOOL`, quoted for a shell.
fn command(config: Option<&Path>, server: &str, tool: &str) -> String {
    let quote = |s: &str| {
        if !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./:@+=".contains(c))
        {
            s.to_owned()
        } else {
            format!("'{}'", s.replace('\'', r"'\''"))
        }
    };
    let config = config.map_or_else(
        || String::from("CONFIG"),
        |path| quote(&path.display().to_string()),
    );
    text::escape(&format!(
        "toolward pin --config {config} --tool {}",
        quote(&format!("{server}/{tool}"))
    ))
}

fn view(
    published: &Published,
    own: Option<&Own>,
    accepted: &BTreeMap<(String, String), String>,
) -> GatewayView {
    let state: &GatewayState = &published.state;
    let gateway_config = state.config_file.as_deref().map(canonical);
    // Accept here only for a gateway of the console's own config, still running.
    let same_config = own.is_some_and(|own| {
        own.file.is_some() && own.file == gateway_config
    }) && published.live;
    let stale_pins = own
        .filter(|_| same_config)
        .and_then(|own| own.written_ms)
        .is_some_and(|written| written > state.started_ms);
    let servers = state
        .servers
        .iter()
        .map(|server| ServerView {
            server: text::escape(&server.server),
            connection: text::escape(&server.connection),
            reason: server.reason.as_deref().map(text::escape),
            restarts: server.restarts,
            registered: server.registered,
            confinement: server.confinement.as_ref().map(|c| ConfinementView {
                confined: c.confined,
                by_config: c.by_config,
                detail: text::escape(&c.detail),
                applied: c
                    .applied
                    .as_ref()
                    .map(|applied| text::escape(&applied.to_string())),
            }),
            refused: server
                .refused
                .iter()
                .map(|refused| {
                    let key = (server.server.clone(), refused.tool.clone());
                    let pinned = own.is_some_and(|own| own.pinned.contains(&key));
                    RefusedView {
                        tool: text::escape(&refused.tool),
                        reason: text::escape(&refused.reason),
                        diff: refused
                            .description_diff
                            .as_deref()
                            .map(|diff| text::lines(diff).collect::<Vec<_>>().join("\n")),
                        pointers: refused.pointers.iter().map(|p| text::escape(p)).collect(),
                        server_raw: server.server.clone(),
                        tool_raw: refused.tool.clone(),
                        shown: shown_hash(refused.description_diff.as_deref()),
                        // Only a changed description is accepted here: its diff is what the
                        // page shows, and Accept checks the server still lists exactly it.
                        acceptable: same_config && pinned && refused.description_diff.is_some(),
                        command: command(
                            state.config_file.as_deref(),
                            &server.server,
                            &refused.tool,
                        ),
                        accepted: accepted.get(&key).cloned(),
                    }
                })
                .collect(),
            withdrawn: server
                .withdrawn
                .iter()
                .map(|w| (text::escape(&w.tool), text::escape(&w.reason)))
                .collect(),
        })
        .collect();
    GatewayView {
        id: text::escape(&state.id),
        live: published.live,
        config_file: state
            .config_file
            .as_deref()
            .map_or_else(|| String::from("-"), |p| text::escape(&p.display().to_string())),
        pid: state.pid,
        started: crate::audit::read::utc(state.started_ms),
        updated: crate::audit::read::utc(state.updated_ms),
        listen: state
            .listen
            .as_deref()
            .map_or_else(|| String::from("stdio"), text::escape),
        stale_pins,
        servers,
    }
}

/// `GET /tools`.
pub(super) async fn page(shared: &Shared, session: &Session) -> http::Response<Body> {
    let (mut gateways, left) = match shared.store.gateways().await {
        Ok(read) => read,
        Err(error) => {
            let message = format!("the gateways' states cannot be read: {}", text::escape(&error));
            return error_page(shared, session, StatusCode::INTERNAL_SERVER_ERROR, &message);
        }
    };
    let own = match shared.tools.writable().cloned() {
        Some(config) => tokio::task::spawn_blocking(move || own(&config)).await.ok(),
        None => None,
    };
    // With approvers named, a user sees the servers a rule names them for.
    let who = answerer(session);
    for published in &mut gateways {
        published
            .state
            .servers
            .retain(|server| shared.approvers.may_read(&who, Some(&server.server)));
    }
    let accepted = shared
        .tools
        .accepted
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    // The live ones first, each group newest first (as read).
    let mut views: Vec<GatewayView> = gateways
        .iter()
        .map(|published| view(published, own.as_ref(), &accepted))
        .collect();
    views.sort_by_key(|view| !view.live);
    shared.pages.render(
        "tools.html",
        StatusCode::OK,
        context! {
            title => "Tools and servers",
            gateways => views,
            left => left,
            manifest => own.as_ref().map(|own| text::escape(&own.manifest.display().to_string())),
            user => &session.user,
            flash => &session.flash,
        },
    )
}

/// `POST /tools/accept`: what `toolward pin --tool SERVER/TOOL --yes` does, as the signed-in
/// user.
pub(super) async fn accept(
    shared: &Shared,
    id: &str,
    session: &Session,
    fields: &[(String, String)],
) -> http::Response<Body> {
    let server = field(fields, "server").unwrap_or_default().to_owned();
    let tool = field(fields, "tool").unwrap_or_default().to_owned();
    let shown = format!("{}/{}", text::escape(&server), text::escape(&tool));
    if server.is_empty() || tool.is_empty() {
        return error_page(
            shared,
            session,
            StatusCode::BAD_REQUEST,
            "the form names no server and tool",
        );
    }
    let who = answerer(session);
    if let Err(why) = shared.approvers.may_accept(&who, &server) {
        let mut detail = serde_json::Map::new();
        detail.insert(String::from("server"), server.clone().into());
        detail.insert(String::from("tool"), tool.clone().into());
        shared
            .record_refusal(&session.user, &session.groups, "accept-refused", why.clone(), detail)
            .await;
        let message = format!("`{shown}` was not accepted: {}", text::escape(&why));
        return error_page(shared, session, StatusCode::FORBIDDEN, &message);
    }
    let Some(config) = shared.tools.writable().cloned() else {
        let message = format!(
            "this console writes no manifest (it was started without a config of a state folder): run {} where the config is kept, then restart the gateways",
            command(None, &server, &tool)
        );
        return error_page(shared, session, StatusCode::CONFLICT, &message);
    };
    let _one = shared.tools.accepting.lock().await;
    // The components' hashes, as the load computes them: the manifest pins them too.
    let prepared = {
        let config = Arc::clone(&config);
        tokio::task::spawn_blocking(move || {
            let state = StateDir::open(&config.state_dir).map_err(|e| text::error_chain(&e))?;
            crate::load::prepare_components(&config, config.guest.clone(), Some(&state))
                .map(|components| (state, components.digests))
                .map_err(|e| text::error_chain(&e))
        })
        .await
    };
    let (state, digests) = match prepared {
        Ok(Ok(prepared)) => prepared,
        Ok(Err(error)) => {
            let message = format!(
                "`{shown}` was not accepted: the state folder or the components could not be prepared: {}",
                text::escape(&error)
            );
            return error_page(shared, session, StatusCode::INTERNAL_SERVER_ERROR, &message);
        }
        Err(_) => {
            return error_page(
                shared,
                session,
                StatusCode::INTERNAL_SERVER_ERROR,
                "the components could not be prepared",
            );
        }
    };
    let change = match crate::pin::tool::tool_change(&config, &server, &tool, digests).await {
        Ok(change) => change,
        Err(error) => {
            let message = format!(
                "`{shown}` was not accepted: {}",
                text::escape(&text::error_chain(&error))
            );
            return error_page(shared, session, StatusCode::CONFLICT, &message);
        }
    };
    if let Err(why) = as_shown(&change, &server, &tool, field(fields, "shown").unwrap_or_default())
    {
        let message = format!("`{shown}` was not accepted: {}", text::escape(&why));
        return error_page(shared, session, StatusCode::CONFLICT, &message);
    }
    if change.diff.is_empty() {
        shared.sessions.flash(
            id,
            format!("tool `{shown}` matches its pin: nothing to accept"),
        );
        return redirect("/tools");
    }
    let written = {
        let config = Arc::clone(&config);
        let (server, tool) = (server.clone(), tool.clone());
        tokio::task::spawn_blocking(move || record_and_write(&config, &state, &change, &who, &server, &tool))
            .await
    };
    match written {
        Ok(Ok(())) => {}
        Ok(Err(message)) => {
            return error_page(shared, session, StatusCode::INTERNAL_SERVER_ERROR, &message);
        }
        Err(_) => {
            return error_page(
                shared,
                session,
                StatusCode::INTERNAL_SERVER_ERROR,
                "the change could not be accepted",
            );
        }
    }
    let by = format!(
        "accepted by `{}` at {}",
        text::escape(&session.user),
        crate::audit::read::utc(crate::ids::now_ms())
    );
    shared
        .tools
        .accepted
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert((server.clone(), tool.clone()), by);
    tracing::info!(
        "console: `{}` accepted the change of tool `{shown}`",
        text::escape(&session.user)
    );
    shared.sessions.flash(
        id,
        format!(
            "accepted the change of tool `{shown}` into `{}`: a gateway loads its pins when it starts, so restart the gateways of this config to serve it",
            text::escape(&config.manifest.display().to_string())
        ),
    );
    redirect("/tools")
}

/// What the Accept form binds: SHA-256 of the description diff the page showed (as the
/// gateway published it), `-` without one.
fn shown_hash(diff: Option<&str>) -> String {
    diff.map_or_else(|| String::from("-"), |diff| crate::canonical::sha256_hex(diff.as_bytes()))
}

/// Whether `change` accepts exactly what the page showed: the tool is pinned already, its
/// description's diff from the pin to the server's listing now is the one shown (`shown`,
/// [`shown_hash`]), and nothing else of it changed (the input schema, the output schema and
/// the annotations are as pinned). Otherwise why not: the server listed something else
/// since the gateway's load, and the operator has not seen it.
fn as_shown(
    change: &crate::pin::tool::ToolChange,
    server: &str,
    tool: &str,
    shown: &str,
) -> Result<(), String> {
    let pinned = change
        .existing
        .servers
        .get(server)
        .and_then(|pinned| pinned.tools.get(tool));
    let listed = change
        .updated
        .servers
        .get(server)
        .and_then(|listed| listed.tools.get(tool));
    let (Some(pinned), Some(listed)) = (pinned, listed) else {
        return Err(String::from(
            "it is not a pinned tool whose change this page showed: pin a new tool with `toolward pin` and review the manifest",
        ));
    };
    let diff = crate::load::text_diff(&pinned.description, &listed.description);
    if shown_hash(Some(&diff)) != shown {
        return Err(String::from(
            "the server lists another description now than the diff this page showed: reload the page, once the gateway has restarted, to see what it lists",
        ));
    }
    if listed.input_schema_sha256 != pinned.input_schema_sha256
        || listed.output_schema_sha256 != pinned.output_schema_sha256
        || listed.annotations != pinned.annotations
    {
        return Err(String::from(
            "the server changed more than the description this page showed (its schema or annotations): review it with `toolward pin --tool` where the config is kept",
        ));
    }
    Ok(())
}

/// The audit record of the acceptance, then the manifest written: nothing is accepted that
/// the audit does not say. A message (escaped) when either fails.
fn record_and_write(
    config: &Config,
    state: &StateDir,
    change: &crate::pin::tool::ToolChange,
    by: &AnsweredBy,
    server: &str,
    tool: &str,
) -> Result<(), String> {
    let user = by.answerer.as_deref().unwrap_or_default();
    let log = AuditLog::open_with_head(&config.audit.file, config.audit.sync, state).map_err(
        |error| {
            format!(
                "not accepted: the audit log cannot be opened: {}",
                text::escape(&text::error_chain(&error))
            )
        },
    )?;
    log.append(AuditEvent {
        server: Some(server.to_owned()),
        tool: Some(format!("{server}{}{tool}", config.separator)),
        upstream_tool: Some(tool.to_owned()),
        answered_by: Some(by.clone()),
        reason: Some(format!(
            "accepted in the console by `{}`",
            text::escape(user)
        )),
        detail: Some(serde_json::json!({
            "manifest": config.manifest.display().to_string(),
            "diff": change.diff.to_string(),
        })),
        ..AuditEvent::new(AuditKind::PinAccepted)
    })
    .map_err(|error| {
        format!(
            "not accepted: the audit record cannot be written: {}",
            text::escape(&text::error_chain(&error))
        )
    })?;
    change.updated.write(&config.manifest).map_err(|error| {
        format!(
            "the audit records the acceptance, but the manifest `{}` could not be written: {}",
            text::escape(&config.manifest.display().to_string()),
            text::escape(&text::error_chain(&error))
        )
    })
}
