//! The PostgreSQL store of a fleet: several gateways (`toolward serve --listen` behind a load
//! balancer) sharing one audit chain ([`PgAudit`]) and one approvals queue ([`PgApprovals`]).
//!
//! Configured with `"store": {"postgres": "${TOOLWARD_DATABASE_URL}"}` (a libpq URL or
//! key-value string; `${NAME}` expanded as in `env`). TLS is rustls with the `ring` provider
//! and the Mozilla roots (`webpki-roots`), as libpq's `sslmode` in the URL asks (`prefer`
//! by default: TLS when the server offers it; `require` to insist).
//!
//! # Schema
//!
//! Created by toolward at first connection (`CREATE TABLE IF NOT EXISTS`, under an advisory
//! lock so two gateways starting together do not race), version [`SCHEMA_VERSION`] kept in
//! `toolward_schema`; a database of a newer version is refused. See `docs/fleet.md`.
//!
//! | table | rows |
//! |---|---|
//! | `toolward_schema` | one: `version` |
//! | `toolward_audit` | one per record: `seq` (bigint, primary key), `line` (bytea: the exact bytes hashed) |
//! | `toolward_audit_head` | one: `next_seq`, `last_hash`: locked by every inserting transaction |
//! | `toolward_approvals` | one per held call: the request, its state and who answered |
//! | `toolward_facts` | one per key, bucket width and bucket: the calls forwarded and held ([`PgFacts`]) |
//! | `toolward_request_states` | one per redeemed `requestState`: its call id and expiry ([`PgLedger`]) |
//! | `toolward_keys` | one: `request-state`, the fleet's 32-byte `requestState` MAC key ([`PgLedger::key`]) |
//!
//! Version 2 added the last two tables; a version 1 database is migrated at the first
//! connection of a version 2 toolward (the tables created, the version row moved to 2), after
//! which a version 1 toolward refuses it: upgrade every gateway of the fleet together.
//!
//! # Who the store trusts
//!
//! The database's access control is the boundary: whoever can write these tables can forge
//! an approval or rewrite the chain's tail (the chain still shows a rewrite of anything
//! before the head a verifier kept). Give the gateways' role `INSERT`/`UPDATE` on these
//! tables only, and the approvers theirs; see SECURITY.md.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::config::Host;

pub mod approvals;
pub mod audit;
pub mod facts;
pub mod request_states;

pub use approvals::PgApprovals;
pub use audit::PgAudit;
pub use facts::PgFacts;
pub use request_states::PgLedger;

/// The schema version this toolward writes and reads: 2 (1 without the fact counters and the
/// `requestState` ledger).
pub const SCHEMA_VERSION: i32 = 2;

/// The name of the fleet's `requestState` MAC key in `toolward_keys`: `request-state`.
pub const REQUEST_STATE_KEY_NAME: &str = "request-state";

/// How long opening one connection may take before the store counts as unreachable: 5 s.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one statement or transaction of the call path may take before the call is
/// refused (the database is slow or gone): 10 s.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);

/// Most connections one gateway opens to the database, per pool (the audit writer and the
/// approvals each have one): 8.
pub const MAX_CONNECTIONS: usize = 8;

/// The advisory lock key taken while creating the schema (`'toolward'` in ASCII).
const SCHEMA_LOCK_KEY: i64 = 0x746f_6f6c_7761_7264;

/// Errors of the PostgreSQL store. Each names the store (host and database, never the
/// password).
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The URL is not a PostgreSQL connection string.
    #[error("store: `store.postgres` is not a PostgreSQL URL: {reason}")]
    Url {
        /// What the parser said.
        reason: String,
    },
    /// The database could not be reached or refused the connection.
    #[error(
        "PostgreSQL store {store}: cannot connect: {reason}; is the database running and the URL right?"
    )]
    Connect {
        /// The store, as [`PgStore::name`] names it.
        store: String,
        /// Why.
        reason: String,
    },
    /// A statement failed.
    #[error("PostgreSQL store {store}: cannot {action}: {reason}")]
    Query {
        /// The store.
        store: String,
        /// What was being done.
        action: &'static str,
        /// Why.
        reason: String,
    },
    /// The store's writer ended (the gateway is shutting down).
    #[error("PostgreSQL store {store}: the audit writer stopped; restart toolward")]
    Stopped {
        /// The store.
        store: String,
    },
    /// `audit import` into a database whose chain already has records.
    #[error(
        "PostgreSQL store {store}: its audit chain already holds {records} records; `audit import` only starts an empty chain: import into a new database"
    )]
    NotEmpty {
        /// The store.
        store: String,
        /// Records already there.
        records: u64,
    },
    /// `audit import` of a log that is not an intact chain.
    #[error(
        "audit log `{path}` cannot be imported: {reason}; check it with `toolward audit verify`"
    )]
    Import {
        /// The log.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// The database holds a newer schema than this toolward knows.
    #[error(
        "PostgreSQL store {store}: schema version {found} is newer than this toolward's {SCHEMA_VERSION}: upgrade toolward"
    )]
    SchemaTooNew {
        /// The store.
        store: String,
        /// The version found.
        found: i32,
    },
}

/// A PostgreSQL store: the parsed connection settings and TLS, from which each part opens
/// its own pool (on the runtime that uses it).
#[derive(Clone)]
pub struct PgStore {
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    name: Arc<str>,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Parses `url` (libpq URL or key-value form). Connects to nothing yet.
    ///
    /// # Errors
    ///
    /// [`PgError::Url`] when `url` does not parse; the message never repeats the URL (it may
    /// hold a password).
    pub fn new(url: &str) -> Result<PgStore, PgError> {
        let mut config: tokio_postgres::Config =
            url.parse()
                .map_err(|e: tokio_postgres::Error| PgError::Url {
                    reason: e.to_string(),
                })?;
        config.connect_timeout(CONNECT_TIMEOUT);
        if config.get_application_name().is_none() {
            config.application_name("toolward");
        }
        let name = Arc::from(describe(&config));
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let tls_config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| PgError::Url {
            reason: format!("TLS: {e}"),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
        Ok(PgStore {
            config,
            tls: tokio_postgres_rustls::MakeRustlsConnect::new(tls_config),
            name,
        })
    }

    /// The store as messages name it: `` `postgres://HOST:PORT/DATABASE` `` (user and password
    /// left out).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A pool of at most [`MAX_CONNECTIONS`] on the current Tokio runtime.
    ///
    /// # Errors
    ///
    /// [`PgError::Connect`] when the pool cannot be built.
    pub fn pool(&self) -> Result<Pool, PgError> {
        let manager = Manager::from_config(
            self.config.clone(),
            self.tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        Pool::builder(manager)
            .max_size(MAX_CONNECTIONS)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(STATEMENT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| self.connect_error(e))
    }

    /// One connection outside any pool (for `LISTEN`, whose notifications a pooled
    /// connection does not hand out), driven by a task on the current runtime that bumps
    /// `notify` on each notification and ends when the connection does.
    ///
    /// # Errors
    ///
    /// [`PgError::Connect`].
    pub(crate) async fn connect_listening(
        &self,
        notify: tokio::sync::watch::Sender<u64>,
    ) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), PgError> {
        let (client, mut connection) = self
            .config
            .connect(self.tls.clone())
            .await
            .map_err(|e| self.connect_error(e))?;
        let driver = tokio::spawn(async move {
            while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(tokio_postgres::AsyncMessage::Notification(_)) => {
                        notify.send_modify(|n| *n = n.wrapping_add(1));
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
        Ok((client, driver))
    }

    /// Connects once and creates the schema when it is missing: what `start` does so an
    /// unreachable database is a clear error before any server starts.
    ///
    /// # Errors
    ///
    /// [`PgError::Connect`] when the database cannot be reached; [`PgError::Query`] when the
    /// schema cannot be created; [`PgError::SchemaTooNew`].
    pub async fn prepare(&self, pool: &Pool) -> Result<(), PgError> {
        let mut client = pool.get().await.map_err(|e| self.connect_error(e))?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| self.query_error("begin the schema transaction", e))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK_KEY])
            .await
            .map_err(|e| self.query_error("lock the schema", e))?;
        tx.batch_execute(SCHEMA)
            .await
            .map_err(|e| self.query_error("create the schema", e))?;
        let found: i32 = tx
            .query_one("SELECT version FROM toolward_schema WHERE id = 1", &[])
            .await
            .map_err(|e| self.query_error("read the schema version", e))?
            .get(0);
        if found > SCHEMA_VERSION {
            return Err(PgError::SchemaTooNew {
                store: self.name.to_string(),
                found,
            });
        }
        // The fleet's `requestState` key, made once by whoever prepares the schema first
        // (read first, so that a role granted only `SELECT` on the table can prepare it
        // afterwards), inside the schema transaction and under its lock.
        let has_key = tx
            .query_opt(
                "SELECT 1 FROM toolward_keys WHERE name = $1",
                &[&REQUEST_STATE_KEY_NAME],
            )
            .await
            .map_err(|e| self.query_error("read the request-state key", e))?
            .is_some();
        if !has_key {
            let mut key = [0u8; crate::store::state_dir::KEY_BYTES];
            getrandom::fill(&mut key).map_err(|e| PgError::Query {
                store: self.name.to_string(),
                action: "make the request-state key",
                reason: e.to_string(),
            })?;
            tx.execute(
                "INSERT INTO toolward_keys (name, key) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                &[&REQUEST_STATE_KEY_NAME, &key.as_slice()],
            )
            .await
            .map_err(|e| self.query_error("store the request-state key", e))?;
        }
        tx.commit()
            .await
            .map_err(|e| self.query_error("commit the schema", e))
    }

    pub(crate) fn connect_error(&self, error: impl std::error::Error) -> PgError {
        PgError::Connect {
            store: self.name.to_string(),
            reason: with_causes(&error),
        }
    }

    pub(crate) fn query_error(
        &self,
        action: &'static str,
        error: impl std::error::Error,
    ) -> PgError {
        PgError::Query {
            store: self.name.to_string(),
            action,
            reason: with_causes(&error),
        }
    }
}

/// `error` and its causes, `: `-separated (the driver's own message often leaves out why,
/// such as `connection refused`).
pub(crate) fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let more = next.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = next.source();
    }
    text
}

/// `postgres://HOST:PORT/DATABASE`, in backticks: no user, no password.
fn describe(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => String::from("localhost"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    format!("`postgres://{host}:{port}/{db}`")
}

/// The schema, version [`SCHEMA_VERSION`]. Idempotent; on a version 1 database it adds the
/// version 2 tables and moves the version row (never down: a newer version is left for
/// [`PgStore::prepare`] to refuse).
const SCHEMA: &str = r"
CREATE TABLE IF NOT EXISTS toolward_schema (
    id integer PRIMARY KEY CHECK (id = 1),
    version integer NOT NULL
);
INSERT INTO toolward_schema (id, version) VALUES (1, 2)
    ON CONFLICT (id) DO UPDATE SET version = 2 WHERE toolward_schema.version < 2;
CREATE TABLE IF NOT EXISTS toolward_audit (
    seq bigint PRIMARY KEY CHECK (seq >= 0),
    line bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS toolward_audit_head (
    id integer PRIMARY KEY CHECK (id = 1),
    next_seq bigint NOT NULL,
    last_hash text NOT NULL
);
INSERT INTO toolward_audit_head (id, next_seq, last_hash)
    VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000')
    ON CONFLICT (id) DO NOTHING;
CREATE TABLE IF NOT EXISTS toolward_approvals (
    call_id text PRIMARY KEY,
    request text NOT NULL,
    held_by text NOT NULL,
    held_at_ms bigint NOT NULL,
    expires_at_ms bigint NOT NULL,
    state text NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'approved', 'denied', 'abandoned')),
    reason text,
    answerer text,
    answerer_uid bigint,
    answered_from text,
    answered_at_ms bigint
);
CREATE INDEX IF NOT EXISTS toolward_approvals_pending
    ON toolward_approvals (held_at_ms) WHERE state = 'pending';
CREATE TABLE IF NOT EXISTS toolward_facts (
    key bytea NOT NULL,
    width_ms bigint NOT NULL CHECK (width_ms IN (1000, 60000)),
    bucket bigint NOT NULL,
    forwarded bigint NOT NULL DEFAULT 0 CHECK (forwarded >= 0),
    held bigint NOT NULL DEFAULT 0 CHECK (held >= 0),
    PRIMARY KEY (key, width_ms, bucket)
);
CREATE TABLE IF NOT EXISTS toolward_request_states (
    call_id text PRIMARY KEY,
    expires_ms bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS toolward_keys (
    name text PRIMARY KEY,
    key bytea NOT NULL CHECK (length(key) = 32)
);
";

/// This machine and process, as the approvals table records who held a call and where an
/// answer came from: `HOSTNAME:PID`.
pub(crate) fn this_process() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| String::from("unknown-host"));
    format!("{host}:{}", std::process::id())
}

/// Milliseconds since the Unix epoch, as a PostgreSQL `bigint`.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// When a gateway last deleted a table's expired rows: pruning runs at most once per
/// interval per gateway, on the first call after it (the fact counters and the
/// `requestState` ledger each keep one).
#[derive(Debug, Default)]
pub(crate) struct PruneTimer(std::sync::Mutex<Option<std::time::Instant>>);

impl PruneTimer {
    /// Whether `interval` has passed since the last prune (always, the first time); when it
    /// has, the prune counts as done now.
    pub(crate) fn due(&self, interval: Duration) -> bool {
        let mut pruned = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match *pruned {
            Some(at) if at.elapsed() < interval => false,
            _ => {
                *pruned = Some(std::time::Instant::now());
                true
            }
        }
    }
}
