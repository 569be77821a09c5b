//! Start: everything a config names, loaded and ready for calls — the entry point for
//! embedders, and what `toolward serve` and `toolward call` run.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use std::sync::Arc;
//! use toolward::approval::{ApprovalAnswer, FnApprover};
//!
//! let config = toolward::config::Config::from_path("examples/mcp/toolward.json".as_ref())?;
//! let toolward = toolward::Toolward::start(config).await?;
//! print!("{}", toolward.report().render());
//! for tool in toolward.tools() {
//!     println!("{} ({})", tool.exposed_name, tool.effect);
//! }
//! let approver = Arc::new(FnApprover::new(|_request| async { ApprovalAnswer::Approved }));
//! let arguments = serde_json::json!({"path": "hello.txt"});
//! let result = toolward
//!     .call("fs__read_text_file", arguments.as_object().cloned(), approver)
//!     .await;
//! println!("{}", result.text());
//! toolward.shutdown().await;
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::approval::Approver;
use crate::audit::{AuditEvent, AuditKind, AuditLog, ComponentHashes, MemoryAudit};
use crate::call::{CallContext, CallPath, CallResult, CallSettings};
use crate::config::{Config, StoreConfig};
use crate::facts::FactStore;
use crate::labels::{LabelSettings, LabelStore};
use crate::load::{self, LoadReport};
use crate::manifest::Manifest;
use crate::registry::RegisteredTool;
#[cfg(feature = "postgres")]
use crate::store::postgres::{PgApprovals, PgAudit, PgFacts, PgLabels, PgLedger, PgStore};
use crate::store::{
    ApprovalStore, AuditStore, NoApprovals, RequestStateLedger, StateDir, StateDirApprovals,
};
use crate::supervise::Supervisors;

mod builder;
pub use builder::ToolwardBuilder;

/// Errors that stop a start: the config's files, the components, the manifest, the audit
/// log. A server or tool that fails is in the [`LoadReport`] instead.
#[derive(Debug, thiserror::Error)]
pub enum StartFailure {
    /// What a [`ToolwardBuilder`] was given does not make a config.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Components could not be prepared.
    #[error(transparent)]
    Components(#[from] load::StartError),
    /// The manifest is missing or invalid.
    #[error("manifest `{path}`: {reason}")]
    Manifest {
        /// Its path.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The load could not name tools.
    #[error(transparent)]
    Load(#[from] load::LoadError),
    /// The audit log cannot be opened (for example, another process writes it).
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
    /// The PostgreSQL store (`store.postgres`) cannot be reached or used.
    #[error(transparent)]
    #[cfg(feature = "postgres")]
    Store(#[from] crate::database::PgError),
    /// The state folder cannot be opened or trusted (another owner, access for others).
    #[error(transparent)]
    State(#[from] crate::state_dir::StateError),
    /// The fact counters in the state folder cannot be opened (`docs/facts.md`).
    #[error(transparent)]
    Facts(#[from] crate::facts::FactError),
    /// The `requestState` ledger of a toolward without a state folder cannot be made (no
    /// random bytes for its key).
    #[error(transparent)]
    Ledger(#[from] crate::store::LedgerError),
    /// The `audit.checkpoint` key or origin cannot be used.
    #[error(transparent)]
    #[cfg(feature = "checkpoints")]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    /// The `telemetry` section's exporter cannot start.
    #[error(transparent)]
    #[cfg(feature = "otel")]
    Telemetry(#[from] crate::telemetry::TelemetryError),
    /// The config names what this build of the library leaves out: a Cargo feature of the
    /// `toolward` crate that is off (`store.postgres` needs `postgres`, `telemetry` needs
    /// `otel`, `audit.checkpoint` needs `checkpoints`).
    #[cfg(not(all(feature = "postgres", feature = "otel", feature = "checkpoints")))]
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

/// Without the `postgres` feature: the audit and approval stores a fleet would share, and
/// the fleet's store, which cannot exist.
#[cfg(not(feature = "postgres"))]
type NoFleet = (
    Arc<dyn AuditStore>,
    Arc<dyn ApprovalStore>,
    Option<std::convert::Infallible>,
);

/// Without the `postgres` feature: the fleet's counters, ledger and labels (never any).
#[cfg(not(feature = "postgres"))]
type FleetStores = (
    Arc<dyn FactStore>,
    Arc<dyn RequestStateLedger>,
    Option<Arc<dyn LabelStore>>,
);

/// What an embedder gives [`Toolward::start_from`] as values instead of files.
#[derive(Debug, Default)]
pub(crate) struct Values {
    /// The manifest, instead of reading `config.manifest`.
    pub manifest: Option<Manifest>,
    /// The audit store, instead of `audit.file` or [`MemoryAudit`].
    pub audit: Option<Arc<dyn AuditStore>>,
    /// The runtime's own OpenTelemetry providers, instead of the `telemetry` section's export.
    #[cfg(feature = "otel")]
    pub telemetry: Option<Arc<crate::telemetry::Telemetry>>,
}

/// A started toolward: the registered tools of every configured server behind the
/// configured policy, with the audit log open.
#[derive(Debug)]
pub struct Toolward {
    config: Config,
    audit: Arc<dyn AuditStore>,
    approvals: Arc<dyn ApprovalStore>,
    call_path: Arc<CallPath>,
    report: LoadReport,
    session: String,
    supervisors: std::sync::Mutex<Supervisors>,
    state: Option<Arc<StateDir>>,
    /// Signs checkpoints of the state folder's log or the database's chain (`audit.checkpoint`).
    #[cfg(feature = "checkpoints")]
    checkpointer: std::sync::Mutex<Option<crate::checkpoint::Checkpointer>>,
}

impl Toolward {
    /// Loads what `config` names: the components (configured once), the manifest, every
    /// server (pins verified, rules applied), and opens the audit log, writing a `load`
    /// record.
    ///
    /// # Errors
    /// [`StartFailure`] for a state folder that cannot be trusted (another owner, access for
    /// group or others), a missing manifest, an unreadable rules file, a component that is
    /// invalid or refuses its settings, or an audit log another process holds.
    pub async fn start(config: Config) -> Result<Toolward, StartFailure> {
        Toolward::start_from(config, Values::default()).await
    }

    /// As [`start`](Self::start), with what an embedder gave as values
    /// ([`crate::ToolwardBuilder`]): the manifest instead of `config.manifest`'s file, and
    /// the audit store instead of the one `config` names.
    pub(crate) async fn start_from(
        config: Config,
        values: Values,
    ) -> Result<Toolward, StartFailure> {
        // The one place the state folder is opened; everything in it is reached through
        // this value from here on. Without one (`StoreConfig::Memory`) nothing is written.
        let state = match config.store {
            StoreConfig::Memory => None,
            StoreConfig::StateDir | StoreConfig::Postgres { .. } => {
                Some(Arc::new(StateDir::open(&config.state_dir)?))
            }
        };
        // The shared store first: an unreachable database stops the start before any server
        // is started, with an error naming it.
        #[cfg(not(feature = "otel"))]
        if config.telemetry.is_some() {
            return Err(StartFailure::FeatureOff {
                what: "the `telemetry` section",
                feature: "otel",
            });
        }
        #[cfg(not(feature = "checkpoints"))]
        if config.audit.checkpoint.is_some() {
            return Err(StartFailure::FeatureOff {
                what: "`audit.checkpoint`",
                feature: "checkpoints",
            });
        }
        // The signer key is read before anything starts: a key that cannot be used stops
        // the start, naming it.
        #[cfg(feature = "checkpoints")]
        let mut signer = match &config.audit.checkpoint {
            None => None,
            Some(checkpoint) => {
                let signer = crate::checkpoint::NoteSigner::read(&checkpoint.key)?;
                let origin = checkpoint
                    .origin
                    .clone()
                    .unwrap_or_else(|| signer.name().to_owned());
                Some((
                    signer,
                    origin,
                    std::time::Duration::from_millis(checkpoint.interval_ms),
                ))
            }
        };
        #[cfg(not(feature = "postgres"))]
        let shared: Option<NoFleet> = match &config.store {
            StoreConfig::StateDir | StoreConfig::Memory => None,
            StoreConfig::Postgres { .. } => {
                return Err(StartFailure::FeatureOff {
                    what: "`store.postgres`",
                    feature: "postgres",
                });
            }
        };
        // Signs checkpoints of the log: the state folder's, or the database's chain.
        #[cfg(feature = "checkpoints")]
        let mut checkpointer = None;
        #[cfg(feature = "postgres")]
        let shared = match &config.store {
            StoreConfig::StateDir | StoreConfig::Memory => None,
            StoreConfig::Postgres { url, .. } => {
                let mut store = PgStore::new(url)?;
                if let Some(file) = &config.file {
                    store = store.with_config_file(file);
                }
                let pg_audit = Arc::new(PgAudit::open(&store).await?);
                // Each gateway signs the database's chain with its own key.
                #[cfg(feature = "checkpoints")]
                if let Some((signer, origin, interval)) = signer.take() {
                    let state = state.as_ref().ok_or(
                        crate::checkpoint::CheckpointError::NoLogToSign {
                            kept: "without a state folder",
                        },
                    )?;
                    checkpointer = Some(crate::store::postgres::checkpoints::start_signing(
                        Arc::clone(&pg_audit),
                        &store,
                        Arc::clone(state),
                        signer,
                        origin,
                        interval,
                    )?);
                }
                let audit: Arc<dyn AuditStore> = pg_audit;
                let approvals: Arc<dyn ApprovalStore> =
                    Arc::new(PgApprovals::new(&store, config.limits.approval_timeout())?);
                // The fleet's counters and `requestState` ledger: limits and one-use states
                // hold across every gateway on the database, not per machine.
                let facts: Arc<dyn FactStore> = Arc::new(PgFacts::open(&store).await?);
                let ledger: Arc<dyn RequestStateLedger> = Arc::new(PgLedger::open(&store).await?);
                Some((audit, approvals, Some((facts, ledger, store))))
            }
        };
        let manifest_error = |e: crate::manifest::ManifestError| StartFailure::Manifest {
            path: config.manifest.display().to_string(),
            reason: e.to_string(),
        };
        let manifest = match (values.manifest, &state) {
            (Some(manifest), _) => manifest,
            (None, _) if !config.manifest.exists() => {
                return Err(StartFailure::Manifest {
                    path: config.manifest.display().to_string(),
                    reason: "no manifest: run `toolward pin` and review what it writes"
                        .to_owned(),
                });
            }
            // Through its compact form in the state folder: the same manifest, without
            // re-verifying every hash at each start (`manifest::compact`).
            (None, Some(state)) => {
                Manifest::read_through(&config.manifest, state).map_err(manifest_error)?
            }
            (None, None) => Manifest::read(&config.manifest).map_err(manifest_error)?,
        };
        // The head lives in the state folder (opened above, first: it is created 0700, and
        // the log is often inside it); other processes on this config write the same log,
        // each under the file's lock. Opened before any server starts: a log made after a
        // server started would not be covered in its namespaces (only Landlock would withhold
        // it, and Landlock does not withhold a file's mode).
        let (audit, approvals, fleet) = match (shared, &state, values.audit) {
            (Some(shared), _, _) => shared,
            // Without a state folder: the embedder's store, or records in memory; no queue.
            (None, None, audit) => {
                let audit = audit.unwrap_or_else(|| Arc::new(MemoryAudit::new()));
                let approvals: Arc<dyn ApprovalStore> = Arc::new(NoApprovals);
                (audit, approvals, None)
            }
            (None, Some(_), Some(audit)) => {
                let approvals: Arc<dyn ApprovalStore> =
                    Arc::new(StateDirApprovals::new(config.state_dir.clone()));
                (audit, approvals, None)
            }
            (None, Some(state), None) => {
                if let Some(parent) = config.audit.file.parent() {
                    let _ = std::fs::create_dir_all(parent);
                }
                let log = Arc::new(AuditLog::open_with_head(
                    &config.audit.file,
                    config.audit.sync,
                    state,
                )?);
                #[cfg(feature = "checkpoints")]
                if let Some((signer, origin, interval)) = signer.take() {
                    checkpointer = Some(crate::checkpoint::Checkpointer::start(
                        Arc::clone(&log),
                        Arc::clone(state),
                        signer,
                        origin,
                        interval,
                    ));
                }
                let audit: Arc<dyn AuditStore> = log;
                let approvals: Arc<dyn ApprovalStore> =
                    Arc::new(StateDirApprovals::new(config.state_dir.clone()));
                (audit, approvals, None)
            }
        };
        // `audit.checkpoint` signs the state folder's log or the database's chain: records
        // kept in an embedder's own store, or in memory, are neither.
        #[cfg(feature = "checkpoints")]
        if signer.is_some() {
            return Err(crate::checkpoint::CheckpointError::NoLogToSign {
                kept: if state.is_some() {
                    "in the embedder's audit store"
                } else {
                    "in memory"
                },
            }
            .into());
        }
        let components =
            load::prepare_components(&config, config.guest.clone(), state.as_deref())?;
        // The fleet's labels, ranked by the levels of the policy's reviews (as the in-memory
        // store `CallPath::new` makes ranks them), opened before any server starts. Only
        // when the policy reviews results: otherwise nothing is ever joined, every session's
        // labels stay empty, and the in-memory store answers without a round trip.
        #[cfg(not(feature = "postgres"))]
        let fleet: Option<FleetStores> = fleet.map(|never| match never {});
        #[cfg(feature = "postgres")]
        let fleet = match fleet {
            Some((facts, ledger, store)) => {
                let reviewed = components.policy.reviews();
                let labels: Option<Arc<dyn LabelStore>> = if reviewed.reviews.is_empty() {
                    None
                } else {
                    Some(Arc::new(
                        PgLabels::open(&store, LabelSettings::from_reviews(reviewed)).await?,
                    ))
                };
                Some((facts, ledger, labels))
            }
            None => None,
        };
        let (registry, report) = load::load(
            &config,
            &components.rules,
            &manifest,
            components.digests.clone(),
            state.as_deref(),
        )
        .await?;
        let hashes = ComponentHashes {
            rules_sha256: components.digests.get("rules").cloned(),
            policy_sha256: components.digests.get("policy").cloned(),
            rules_signer: components.signers.get("rules").cloned(),
            policy_signer: components.signers.get("policy").cloned(),
            settings_digest: components.settings_digest.clone(),
            settings_signer: components.signers.get("settings").cloned(),
        };
        audit.set_components(hashes.clone());
        audit.append(AuditEvent {
            detail: serde_json::to_value(&report).ok(),
            ..AuditEvent::new(AuditKind::Load)
        })?;
        // A pending entry whose lock nobody holds was held by a process that ended (of this
        // config or another sharing the state folder); the call was never forwarded. Record
        // that, and take it out of the queue so nobody approves it. Entries of calls other
        // processes still hold are left alone.
        let abandoned = approvals.abandon_ended().await.unwrap_or_default();
        for request in abandoned {
            audit.append(AuditEvent {
                call_id: Some(request.call_id.clone()),
                server: Some(request.server.clone()),
                tool: Some(request.exposed_tool.clone()),
                upstream_tool: Some(request.tool.clone()),
                arguments_sha256: Some(request.arguments_sha256.clone()),
                reason: Some(
                    "abandoned: the process that held the call for approval ended before an answer; the call was not forwarded".to_owned(),
                ),
                ..AuditEvent::new(AuditKind::Refusal)
            })?;
        }
        // Each server's start at the load, with the confinement applied.
        let starts: Vec<AuditEvent> = registry
            .servers()
            .filter_map(|server| {
                let upstream = registry.upstream(server)?.ok()?;
                Some(crate::supervise::start_record(server, 0, &upstream))
            })
            .collect();
        if !starts.is_empty() {
            audit.append_batch(starts)?;
        }
        let registry = Arc::new(registry);
        let supervisors = Supervisors::start(&config, &registry, Some(Arc::clone(&audit)));
        #[cfg(not(feature = "otel"))]
        let telemetry = None;
        #[cfg(feature = "otel")]
        // The runtime's own providers, else the export of the `telemetry` section.
        let telemetry = match (values.telemetry, &config.telemetry) {
            (Some(own), _) => Some(own),
            (None, Some(settings)) => Some(crate::telemetry::Telemetry::start(settings)?),
            (None, None) => None,
        };
        #[cfg(feature = "otel")]
        if let Some(telemetry) = &telemetry {
            for server in report.servers.iter().filter(|s| !s.refused.is_empty()) {
                telemetry.load_refused(&server.server, server.refused.len() as u64);
            }
        }
        let call_path = CallPath::new(
            registry,
            components.policy.clone(),
            Some(Arc::clone(&audit)),
            CallSettings::from_config(&config),
            hashes,
        )
        .with_fact_scopes(components.fact_scopes)
        .with_telemetry(telemetry);
        let call_path = match fleet {
            Some((facts, ledger, labels)) => {
                let call_path = call_path.with_facts(facts).with_ledger(ledger);
                match labels {
                    Some(labels) => call_path.with_labels(labels),
                    None => call_path,
                }
            }
            None => match &state {
                Some(state) => {
                    call_path.with_facts(Arc::new(crate::facts::StateFacts::open(state)?))
                }
                // No state folder: approvals given through `input_required` are redeemed in
                // memory, under a key of this process's own.
                None => {
                    let call_path = call_path
                        .with_ledger(Arc::new(crate::store::MemoryLedger::new()?));
                    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
                    let call_path =
                        call_path.with_facts(Arc::new(crate::facts::StateFacts::in_memory()?));
                    // No anonymous file to count in: decisions get no facts, and a limit
                    // denies.
                    call_path
                }
            },
        };
        let call_path = call_path.with_queue(approvals.approver(Some(Arc::clone(&audit))));
        Ok(Toolward {
            audit,
            approvals,
            session: crate::ids::new_ulid(),
            supervisors: std::sync::Mutex::new(supervisors),
            config,
            call_path: Arc::new(call_path),
            report,
            state,
            #[cfg(feature = "checkpoints")]
            checkpointer: std::sync::Mutex::new(checkpointer),
        })
    }

    /// The audit log's head as it was after the start's records reached the disk (its
    /// record count and last hash): print it so it can be kept elsewhere, where a later
    /// `toolward audit verify` can be checked against it.
    pub fn audit_head(&self) -> Option<crate::audit::AuditHead> {
        self.audit.head()
    }

    /// The audit store as messages name it (`` audit log `PATH` `` or
    /// `` PostgreSQL store `postgres://HOST:PORT/DB` ``).
    pub fn audit_store(&self) -> String {
        self.audit.name()
    }

    /// The approvals store (the state folder's queue, or PostgreSQL's).
    pub fn approvals(&self) -> &Arc<dyn ApprovalStore> {
        &self.approvals
    }

    /// The state folder (`state_dir` of the config), opened once at start; `None` for a
    /// toolward started without one ([`StoreConfig::Memory`]).
    pub fn state(&self) -> Option<&Arc<StateDir>> {
        self.state.as_ref()
    }

    /// The audit records from now on, in `seq` order, as the audit store makes them durable,
    /// when the store offers a stream ([`AuditStore::subscribe`]). Every store toolward
    /// brings does: [`MemoryAudit`] (a toolward without a state folder), the state folder's
    /// log and PostgreSQL (the records this process writes; other processes' records on the
    /// same log or database are not sent); an embedder's own store when it implements
    /// `subscribe`. A receiver that falls more than [`crate::AUDIT_EVENTS_CAPACITY`] records
    /// behind is told how many it missed.
    pub fn audit_events(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<crate::audit::AuditRecord>> {
        self.audit.subscribe()
    }

    /// The load report.
    pub fn report(&self) -> &LoadReport {
        &self.report
    }

    /// The config it started from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The registered tools, by exposed name.
    pub fn tools(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.call_path.registry().tools()
    }

    /// The call path, for the gateway.
    pub fn call_path(&self) -> &Arc<CallPath> {
        &self.call_path
    }

    /// An approver asking through the state folder's queue (answered with `toolward
    /// approvals`), recording forged answers to this toolward's audit log.
    pub fn queue_approver(&self) -> Arc<dyn Approver> {
        self.approvals.approver(self.call_path.audit().cloned())
    }

    /// One call through the whole path (validation, policy, approval by `approver`,
    /// forward, result cap, audit) with `arguments` (MCP `tools/call` `arguments`: an object,
    /// or none), as the configured `principal`, in this toolward's one session. Never fails:
    /// refusals are tool errors in the result. Dropping the future cancels the call: the
    /// server is sent `notifications/cancelled` if it had the call, and the audit records the
    /// cancellation. [`call_with`](Self::call_with) takes a principal, a session, progress
    /// and a trace of the caller's.
    pub async fn call(
        &self,
        exposed_name: &str,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
        approver: Arc<dyn Approver>,
    ) -> CallResult {
        self.call_with(exposed_name, arguments, &self.context(approver))
            .await
    }

    /// As [`call`](Self::call), with the caller's context: the principal the policy and the
    /// audit see, the session the call belongs to (fact counters per session), where progress
    /// notifications go, and the W3C `traceparent` the call's span continues. Cancelled by
    /// dropping the future, as [`call`](Self::call).
    pub async fn call_with(
        &self,
        exposed_name: &str,
        arguments: Option<serde_json::Map<String, serde_json::Value>>,
        context: &CallContext,
    ) -> CallResult {
        self.call_path.call(exposed_name, arguments, context).await
    }

    /// The context [`call`](Self::call) uses: the configured `principal`, this toolward's
    /// session, `approver`, no progress and no trace; change any field before
    /// [`call_with`](Self::call_with).
    pub fn context(&self, approver: Arc<dyn Approver>) -> CallContext {
        CallContext {
            principal: self.config.principal.clone(),
            principal_attributes: Vec::new(),
            session: self.session.clone(),
            approver,
            progress: None,
            traceparent: None,
        }
    }

    /// Serves MCP to a client in this process, with the same policy, approvals and audit as
    /// `toolward serve` (the `gateway` feature): returns one end of an in-process duplex
    /// stream for the runtime's own rmcp client, which keeps its own `Peer<RoleClient>`; the
    /// other end is served in a task of its own until the client closes it. Each held call is
    /// asked of `approver` ([`crate::FnApprover`] for a closure), never of the client nor a
    /// queue. Every connection is a session of its own, as the configured `principal`. Call it
    /// within the Tokio runtime toolward runs on: the connection's task is spawned there.
    ///
    /// ```no_run
    /// # async fn demo(toolward: toolward::Toolward) -> anyhow::Result<()> {
    /// use std::sync::Arc;
    /// use toolward::rmcp::ServiceExt as _;
    /// use toolward::{ApprovalAnswer, FnApprover};
    ///
    /// let approver = Arc::new(FnApprover::new(|_request| async { ApprovalAnswer::Approved }));
    /// let client = ().serve(toolward.serve_in_process(approver)).await?;
    /// let tools = client.peer().list_all_tools().await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "gateway")]
    pub fn serve_in_process(&self, approver: Arc<dyn Approver>) -> tokio::io::DuplexStream {
        crate::gateway::serve_in_process(
            Arc::clone(&self.call_path),
            self.report.messages(),
            crate::gateway::GatewaySettings::from_config(&self.config),
            approver,
        )
    }

    /// Closes every server (each process group ended); no restart follows. Calls made after
    /// it fail as calls to a server that is down. With `audit.checkpoint`, signs the last
    /// checkpoint of the log. Takes `&self`, so a toolward shared behind an `Arc` can be shut
    /// down by any holder.
    pub async fn shutdown(&self) {
        self.supervisors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .stop();
        self.call_path.registry().close().await;
        // The last checkpoint, covering every record so far (the thread syncs first).
        #[cfg(feature = "checkpoints")]
        let checkpointer = self
            .checkpointer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        #[cfg(feature = "checkpoints")]
        if let Some(mut checkpointer) = checkpointer {
            let _ = tokio::task::spawn_blocking(move || checkpointer.stop()).await;
        }
    }

    /// SHA-256 of the components, by role.
    pub fn component_digests(&self) -> BTreeMap<String, String> {
        self.report.components.clone()
    }
}
