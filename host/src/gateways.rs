//! What each running gateway publishes for the console: `toolward serve` (stdio or
//! `--listen`) writes its state into the state folder, `gateways/ID.json` (mode `0600`,
//! replaced whole, so a reader sees one version or the next, never a part), and removes it
//! when it ends cleanly. The state is the config file, the process, and per configured
//! server its connection (up, restarting, down, or unavailable since the load), how many
//! times it was restarted, its confinement as planned and as applied at its last start, the
//! tools refused at load with their reasons (and, for a changed description, the diff the
//! load made), and the tools withdrawn since.
//!
//! It is written again when something the gateway tells its clients happens (a server failed,
//! was restarted, gave up, changed its tool list, a tool was withdrawn): the registry's
//! client messages, which those events send anyway. The call path does nothing for it.
//!
//! A gateway holds an exclusive lock (`flock`) on `gateways/ID.lock` while it runs; the
//! kernel lets go of it when the process ends, however it ends. A reader that finds the
//! lock free knows the file is what a process that did not end cleanly left: [`read_all`]
//! says so ([`Published::live`] false), and the console shows it as gone.
//!
//! A fleet's gateways on PostgreSQL (`store.postgres`) publish into the database's
//! `toolward_gateways` table instead ([`publish_to_database`], [`read_database`]): a row per
//! gateway, written on the same events and every
//! [`HEARTBEAT`](crate::store::postgres::gateways::HEARTBEAT) besides, since no lock across
//! machines says a gateway still runs; a row not written for
//! [`GONE_AFTER`](crate::store::postgres::gateways::GONE_AFTER) reads as gone.

use std::io::Read as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::load::LoadReport;
use crate::registry::{Connection, Registry};
use crate::state_dir::{FILE_MODE, StateDir, StateError, open_private_in, replace_private_in};

/// The folder of the state folder the gateways publish into.
pub const GATEWAYS_DIR: &str = "gateways";

/// Largest published state read, in bytes: 4 MiB (a load's diffs of many changed tools).
pub const MAX_STATE_BYTES: u64 = 4 * 1024 * 1024;

/// Most published states read at once: 256 gateways on one state folder; past it the
/// oldest files are left unread and the console says how many.
pub const MAX_GATEWAYS: usize = 256;

/// How long a burst of events (a restart tells several) is let settle before the state is
/// written once: 100 ms.
pub const PUBLISH_SETTLE: Duration = Duration::from_millis(100);

/// One gateway's state, as published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayState {
    /// The gateway's id, a ULID made at its start.
    pub id: String,
    /// The config it started from, when it came from a file.
    pub config_file: Option<PathBuf>,
    /// Its process id.
    pub pid: u32,
    /// When it started, milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// When this state was written, milliseconds since the Unix epoch.
    pub updated_ms: u64,
    /// The address it listens on (`serve --listen`); `None` for stdio.
    pub listen: Option<String>,
    /// Every configured server, in name order.
    pub servers: Vec<ServerState>,
}

/// One server of a gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerState {
    /// The server's name in the config.
    pub server: String,
    /// `up`, `restarting`, `down` (failed for good, or closed), or `unavailable` (the load
    /// could not use it).
    pub connection: String,
    /// Why it is not up.
    pub reason: Option<String>,
    /// Restarts since the load.
    pub restarts: u64,
    /// Tools the load registered.
    pub registered: usize,
    /// How a stdio server runs; `None` for an HTTP server, or one that did not start.
    pub confinement: Option<ConfinementState>,
    /// Tools refused at load, with why.
    pub refused: Vec<RefusedTool>,
    /// Tools withdrawn after the load (a restarted server no longer matched their pin).
    pub withdrawn: Vec<WithdrawnTool>,
}

/// A stdio server's confinement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfinementState {
    /// Whether it was planned to start confined by Landlock.
    pub confined: bool,
    /// When unconfined, whether the config chose it.
    pub by_config: bool,
    /// One line: what it is denied and the Landlock ABI, or why it is unconfined.
    pub detail: String,
    /// The confinement its last start applied, as the `server-start` audit record has it
    /// (Landlock ABI, namespaces, paths withheld, network); `None` when it started
    /// unconfined.
    pub applied: Option<serde_json::Value>,
}

/// A tool refused at load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedTool {
    /// The tool's name on its server.
    pub tool: String,
    /// Why, in one line.
    pub reason: String,
    /// For a changed description: the unified diff, pinned → listed, hidden characters
    /// escaped.
    pub description_diff: Option<String>,
    /// For a changed or refused input schema: JSON Pointers of the places concerned.
    pub pointers: Vec<String>,
}

/// A tool withdrawn after the load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WithdrawnTool {
    /// The tool's name on its server.
    pub tool: String,
    /// Why.
    pub reason: String,
}

/// A published state as read, with whether its gateway still runs.
#[derive(Debug, Clone)]
pub struct Published {
    /// The state.
    pub state: GatewayState,
    /// Whether its gateway holds its lock: `false` for what a process that ended without
    /// cleaning up left.
    pub live: bool,
}

/// What stays the same for a gateway's whole run.
struct Fixed {
    id: String,
    config_file: Option<PathBuf>,
    pid: u32,
    started_ms: u64,
    listen: Option<String>,
    report: LoadReport,
}

/// A gateway publishing its state; [`Publisher::stop`] removes it.
#[derive(Debug)]
pub struct Publisher {
    sink: Arc<Sink>,
    id: String,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// Where a gateway publishes.
#[derive(Debug)]
enum Sink {
    /// The state folder's `gateways/`.
    Folder {
        dir: Arc<Dir>,
        /// Held for the run: its lock says the gateway lives.
        _lock: std::fs::File,
        /// The state file's path, for messages.
        full: PathBuf,
    },
    /// The database's `toolward_gateways`.
    #[cfg(feature = "postgres")]
    Database(Box<crate::store::postgres::gateways::PgGateways>),
}

impl Sink {
    /// Writes the state now.
    async fn write(&self, fixed: &Arc<Fixed>, registry: &Arc<Registry>) -> Result<(), String> {
        match self {
            Sink::Folder { dir, full, .. } => {
                let (dir, fixed, registry, full) = (
                    Arc::clone(dir),
                    Arc::clone(fixed),
                    Arc::clone(registry),
                    full.clone(),
                );
                tokio::task::spawn_blocking(move || write(&dir, &fixed, &registry, &full))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())
            }
            #[cfg(feature = "postgres")]
            Sink::Database(gateways) => {
                let state = snapshot(fixed, registry);
                let text = serde_json::to_string(&state).map_err(|e| e.to_string())?;
                gateways
                    .write(&fixed.id, &text)
                    .await
                    .map_err(|e| e.to_string())
            }
        }
    }

    /// How often the state is written though nothing changed: only for the database.
    fn heartbeat(&self) -> Option<Duration> {
        match self {
            Sink::Folder { .. } => None,
            #[cfg(feature = "postgres")]
            Sink::Database(_) => Some(crate::store::postgres::gateways::HEARTBEAT),
        }
    }

    /// Removes the state: the gateway ended cleanly.
    async fn remove(&self, id: &str) {
        match self {
            // The state first: a state without its lock file reads as gone, never as live.
            Sink::Folder { dir, .. } => {
                let _ = dir.remove_file(format!("{id}.json"));
                let _ = dir.remove_file(format!("{id}.lock"));
            }
            #[cfg(feature = "postgres")]
            Sink::Database(gateways) => {
                if let Err(error) = gateways.remove(id).await {
                    tracing::warn!(
                        "cannot remove the gateway's state from the database: {}",
                        crate::text::error_chain(&error)
                    );
                }
            }
        }
    }
}

/// Errors of publishing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The folder or a file in it cannot be made or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// The lock file is another process's (a gateway id made twice: never expected).
    #[error("`{path}` is locked by another process")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
}

/// Starts publishing the state of a gateway (started from `config_file`, its load's
/// `report`, its `registry`; served at `listen`, or over stdio) into the state folder
/// `state`: written now, and again after each event its clients are told of.
///
/// # Errors
/// [`PublishError`]: the `gateways` folder or the files cannot be made.
pub fn publish(
    state: &StateDir,
    config_file: Option<PathBuf>,
    report: &LoadReport,
    registry: &Arc<Registry>,
    listen: Option<SocketAddr>,
) -> Result<Publisher, PublishError> {
    let dir = Arc::new(state.subdir(GATEWAYS_DIR)?);
    let id = crate::ids::new_ulid();
    let lock_name = format!("{id}.lock");
    let lock_path = state.path().join(GATEWAYS_DIR).join(&lock_name);
    let mut options = OpenOptions::new();
    options.write(true).create_new(true).mode(FILE_MODE);
    let lock = dir
        .open_with(&lock_name, &options)
        .map(cap_std::fs::File::into_std)
        .map_err(|source| StateError::Io {
            path: lock_path.clone(),
            source,
        })?;
    if lock.try_lock().is_err() {
        return Err(PublishError::Locked { path: lock_path });
    }
    let fixed = Fixed {
        id: id.clone(),
        config_file,
        pid: std::process::id(),
        started_ms: crate::ids::now_ms(),
        listen: listen.map(|addr| addr.to_string()),
        report: report.clone(),
    };
    let full = state.path().join(GATEWAYS_DIR).join(format!("{id}.json"));
    write(&dir, &fixed, registry, &full)?;
    let sink = Sink::Folder {
        dir,
        _lock: lock,
        full,
    };
    Ok(Publisher::start(sink, Arc::new(fixed), registry))
}

/// Starts publishing the state of a gateway, as [`publish`] does, into the fleet's database
/// (`gateways`, on `store.postgres`): written now, after each event its clients are told of,
/// and every [`HEARTBEAT`](crate::store::postgres::gateways::HEARTBEAT).
///
/// # Errors
/// The database's error, as text, when the first write fails.
#[cfg(feature = "postgres")]
pub async fn publish_to_database(
    gateways: crate::store::postgres::gateways::PgGateways,
    config_file: Option<PathBuf>,
    report: &LoadReport,
    registry: &Arc<Registry>,
    listen: Option<SocketAddr>,
) -> Result<Publisher, String> {
    let fixed = Arc::new(Fixed {
        id: crate::ids::new_ulid(),
        config_file,
        pid: std::process::id(),
        started_ms: crate::ids::now_ms(),
        listen: listen.map(|addr| addr.to_string()),
        report: report.clone(),
    });
    let sink = Sink::Database(Box::new(gateways));
    sink.write(&fixed, registry).await?;
    Ok(Publisher::start(sink, fixed, registry))
}

impl Publisher {
    /// Publishing through `sink`, written again by a task of its own.
    fn start(sink: Sink, fixed: Arc<Fixed>, registry: &Arc<Registry>) -> Publisher {
        let sink = Arc::new(sink);
        let id = fixed.id.clone();
        let stop = CancellationToken::new();
        let task = tokio::spawn(republish(
            Arc::clone(&sink),
            fixed,
            Arc::clone(registry),
            stop.clone(),
        ));
        Publisher {
            sink,
            id,
            stop,
            task,
        }
    }

    /// Stops publishing and removes the state (and its lock file): the gateway ended
    /// cleanly.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
        self.sink.remove(&self.id).await;
    }
}

/// Writes the state again after each event the registry tells clients of, a burst at once,
/// and at the sink's heartbeat.
async fn republish(
    sink: Arc<Sink>,
    fixed: Arc<Fixed>,
    registry: Arc<Registry>,
    stop: CancellationToken,
) {
    let mut events = registry.client_messages();
    let heartbeat = sink.heartbeat();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = async {
                match heartbeat {
                    Some(every) => tokio::time::sleep(every).await,
                    None => std::future::pending().await,
                }
            } => {}
            event = events.recv() => match event {
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(PUBLISH_SETTLE) => {}
        }
        while !matches!(
            events.try_recv(),
            Err(tokio::sync::broadcast::error::TryRecvError::Empty
                | tokio::sync::broadcast::error::TryRecvError::Closed)
        ) {}
        if let Err(error) = sink.write(&fixed, &registry).await {
            tracing::warn!(
                "cannot publish the gateway's state for the console: {}",
                crate::text::escape(&error)
            );
        }
    }
}

fn write(dir: &Dir, fixed: &Fixed, registry: &Registry, full: &Path) -> Result<(), StateError> {
    let state = snapshot(fixed, registry);
    let bytes = serde_json::to_vec_pretty(&state).unwrap_or_default();
    replace_private_in(dir, &format!("{}.json", fixed.id), &bytes, full)
}

/// The state now: the load's report with the registry's connections, restarts and
/// withdrawals.
fn snapshot(fixed: &Fixed, registry: &Registry) -> GatewayState {
    let withdrawn = registry.withdrawn_tools();
    let servers = fixed
        .report
        .servers
        .iter()
        .map(|report| {
            let connection = registry.connection(&report.server);
            let (state, reason) = match (&report.failure, &connection) {
                (Some(failure), _) => ("unavailable", Some(failure.clone())),
                (None, Some(Connection::Up(_))) => ("up", None),
                (None, Some(Connection::Restarting { reason })) => {
                    ("restarting", Some(reason.clone()))
                }
                (None, Some(Connection::Down { reason })) => ("down", Some(reason.clone())),
                (None, None) => ("unavailable", None),
            };
            let applied = match &connection {
                Some(Connection::Up(upstream)) => upstream
                    .confinement()
                    .map(crate::supervise::confinement_detail),
                _ => None,
            };
            ServerState {
                server: report.server.clone(),
                connection: state.to_owned(),
                reason,
                restarts: registry.restarts(&report.server),
                registered: report.registered.len(),
                confinement: report.confinement.as_ref().map(|c| ConfinementState {
                    confined: c.confined,
                    by_config: c.by_config,
                    detail: c.detail.clone(),
                    applied,
                }),
                refused: report
                    .refused
                    .iter()
                    .map(|r| RefusedTool {
                        tool: r.tool.clone(),
                        reason: r.reason.clone(),
                        description_diff: r.description_diff.clone(),
                        pointers: r.pointers.clone(),
                    })
                    .collect(),
                withdrawn: withdrawn
                    .iter()
                    .filter_map(|(exposed, reason)| {
                        let tool = registry.get(exposed)?;
                        (tool.server == report.server).then(|| WithdrawnTool {
                            tool: tool.upstream_name.clone(),
                            reason: reason.clone(),
                        })
                    })
                    .collect(),
            }
        })
        .collect();
    GatewayState {
        id: fixed.id.clone(),
        config_file: fixed.config_file.clone(),
        pid: fixed.pid,
        started_ms: fixed.started_ms,
        updated_ms: crate::ids::now_ms(),
        listen: fixed.listen.clone(),
        servers,
    }
}

/// Every state published in `state`'s `gateways` folder (at most [`MAX_GATEWAYS`], the
/// newest first), each with whether its gateway still runs, and how many more were left
/// unread. A file that cannot be read or is not a state is left out with a warning in the
/// log.
///
/// # Errors
/// [`StateError`]: the folder cannot be opened or listed.
pub fn read_all(state: &StateDir) -> Result<(Vec<Published>, usize), StateError> {
    let dir = state.subdir(GATEWAYS_DIR)?;
    let base = state.path().join(GATEWAYS_DIR);
    let io = |source| StateError::Io {
        path: base.clone(),
        source,
    };
    let mut ids: Vec<String> = Vec::new();
    for entry in dir.entries().map_err(io)? {
        let name = entry.map_err(io)?.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
            continue;
        };
        // Only names a gateway makes: a ULID.
        if id.len() == 26 && id.chars().all(|c| c.is_ascii_alphanumeric()) {
            ids.push(id.to_owned());
        }
    }
    // ULIDs sort by time: the newest first.
    ids.sort_unstable_by(|a, b| b.cmp(a));
    let left = ids.len().saturating_sub(MAX_GATEWAYS);
    ids.truncate(MAX_GATEWAYS);
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let name = format!("{id}.json");
        let full = base.join(&name);
        let read = open_private_in(&dir, Path::new(&name), &full).and_then(|file| {
            let mut bytes = Vec::new();
            file.into_std()
                .take(MAX_STATE_BYTES + 1)
                .read_to_end(&mut bytes)
                .map_err(|source| StateError::Io {
                    path: full.clone(),
                    source,
                })?;
            Ok(bytes)
        });
        let parsed = match read {
            Ok(bytes) if bytes.len() as u64 > MAX_STATE_BYTES => Err(format!(
                "{} bytes or more, over the limit of {MAX_STATE_BYTES}",
                bytes.len()
            )),
            Ok(bytes) => serde_json::from_slice::<GatewayState>(&bytes).map_err(|e| e.to_string()),
            Err(error) if error.not_found() => continue,
            Err(error) => Err(error.to_string()),
        };
        match parsed {
            Ok(state) if state.id == id => out.push(Published {
                live: held(&dir, &id, &base),
                state,
            }),
            Ok(_) => tracing::warn!("`{}`: its id is not its name", full.display()),
            Err(error) => tracing::warn!(
                "`{}` is not a gateway's state: {}",
                full.display(),
                crate::text::escape(&error)
            ),
        }
    }
    Ok((out, left))
}

/// Every state published in the fleet's database (at most [`MAX_GATEWAYS`], the most
/// recently written first), each live when written within
/// [`GONE_AFTER`](crate::store::postgres::gateways::GONE_AFTER), and how many more were
/// left unread. A row that is not a state is left out with a warning in the log.
///
/// # Errors
/// The database's error.
#[cfg(feature = "postgres")]
pub async fn read_database(
    gateways: &crate::store::postgres::gateways::PgGateways,
) -> Result<(Vec<Published>, usize), crate::database::PgError> {
    let gone_after = u64::try_from(crate::store::postgres::gateways::GONE_AFTER.as_millis())
        .unwrap_or(u64::MAX);
    let (rows, total) = gateways.read(MAX_GATEWAYS, MAX_STATE_BYTES).await?;
    let left = total.saturating_sub(rows.len());
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let why = match serde_json::from_str::<GatewayState>(&row.state) {
            Ok(state) if state.id == row.id => {
                out.push(Published {
                    live: row.age_ms < gone_after,
                    state,
                });
                continue;
            }
            Ok(_) => String::from("names another id"),
            Err(error) => format!("is not a gateway's state: {error}"),
        };
        // Read every second while the console runs: said once per row.
        if first_warning(&row.id) {
            tracing::warn!(
                "{}: the row of gateway `{}` {}; left out",
                gateways.store_name(),
                crate::text::escape(&row.id),
                crate::text::escape(&why)
            );
        }
    }
    Ok((out, left))
}

/// Whether a warning about the row `id` is the first this process gives (the last 1,024 rows
/// warned about are remembered).
#[cfg(feature = "postgres")]
fn first_warning(id: &str) -> bool {
    static WARNED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut warned = WARNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if warned.iter().any(|known| known == id) {
        return false;
    }
    if warned.len() >= 1024 {
        warned.remove(0);
    }
    warned.push(id.to_owned());
    true
}

/// Whether the gateway `id` holds its lock: it still runs.
fn held(dir: &Dir, id: &str, base: &Path) -> bool {
    let name = format!("{id}.lock");
    let Ok(file) = open_private_in(dir, Path::new(&name), &base.join(&name)) else {
        return false;
    };
    let file = file.into_std();
    match file.try_lock() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_left_by_a_process_that_ended_reads_as_gone_and_a_held_one_as_live() {
        let temp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&temp.path().join("state")).unwrap();
        let dir = state.subdir(GATEWAYS_DIR).unwrap();
        let base = state.path().join(GATEWAYS_DIR);
        let mut ids = Vec::new();
        for _ in 0..2 {
            let id = crate::ids::new_ulid();
            let gateway = GatewayState {
                id: id.clone(),
                config_file: None,
                pid: 1,
                started_ms: 1,
                updated_ms: 1,
                listen: None,
                servers: Vec::new(),
            };
            let name = format!("{id}.json");
            replace_private_in(
                &dir,
                &name,
                &serde_json::to_vec(&gateway).unwrap(),
                &base.join(&name),
            )
            .unwrap();
            let mut options = OpenOptions::new();
            options.write(true).create_new(true).mode(FILE_MODE);
            let lock = dir
                .open_with(format!("{id}.lock"), &options)
                .unwrap()
                .into_std();
            ids.push((id, lock));
        }
        ids[0].1.try_lock().unwrap();
        let (read, left) = read_all(&state).unwrap();
        assert_eq!(left, 0);
        let live = |id: &str| read.iter().find(|p| p.state.id == id).unwrap().live;
        assert!(live(&ids[0].0));
        assert!(!live(&ids[1].0));
    }
}
