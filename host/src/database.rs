//! The PostgreSQL connection of a fleet's store: the pool, the schema and the roles, below the
//! backends built on it ([`crate::store::postgres`]), through which several gateways
//! (`toolward serve --listen` behind a load balancer) share one audit chain and one approvals
//! queue.
//!
//! Configured with `"store": {"postgres": "${TOOLWARD_DATABASE_URL}"}` (a libpq URL or
//! key-value string; `${NAME}` expanded as in `env`). TLS is rustls with the `ring` provider
//! and the Mozilla roots (`webpki-roots`), as libpq's `sslmode` in the URL asks (`prefer`
//! by default: TLS when the server offers it; `require` to insist).
//!
//! # Schema
//!
//! Created and upgraded by one explicit step, `toolward store migrate` ([`PgStore::migrate`]),
//! run by the role that owns the tables: `CREATE TABLE IF NOT EXISTS` under an advisory lock,
//! version [`SCHEMA_VERSION`] kept in `toolward_schema`, and the rights of each role of
//! docs/fleet.md granted ([`GRANTS`]). Every other open ([`PgStore::check_schema`]) only reads
//! the version: it runs no DDL and writes nothing, so gateways, approvers and auditors need
//! none of the owner's rights, and it refuses a database that is missing the schema or holds an
//! older or newer version.
//!
//! | table | rows |
//! |---|---|
//! | `toolward_schema` | one: `version` |
//! | `toolward_audit` | one per record: `seq` (bigint, primary key), `line` (bytea: the exact bytes hashed) |
//! | `toolward_audit_head` | one: `next_seq`, `last_hash`: locked by every inserting transaction |
//! | `toolward_approvals` | one per held call: the request, its state and who answered |
//! | `toolward_facts` | one per key, bucket width and bucket: the calls forwarded and held ([`PgFacts`](crate::store::postgres::PgFacts)) |
//! | `toolward_request_states` | one per redeemed `requestState`: its call id and expiry ([`PgLedger`](crate::store::postgres::PgLedger)) |
//! | `toolward_keys` | one: `request-state`, the fleet's 32-byte `requestState` MAC key ([`PgLedger::key`](crate::store::postgres::PgLedger::key)) |
//!
//! Version 2 added the last two tables; version 3 the triggers that keep an answered approval
//! as it was answered and each audit record's `seq` at the head ([`TRIGGERS`]). `migrate`
//! takes an older database to version 3 (what is missing created, the version row moved),
//! after which an older toolward refuses it: upgrade every gateway of the fleet together.
//!
//! # Who the store trusts
//!
//! The database's access control is the boundary: whoever can write these tables can forge
//! an approval or rewrite the chain's tail (the chain still shows a rewrite of anything
//! before the head a verifier kept). [`GRANTS`] gives each role only what it needs, and the
//! triggers of version 3 keep what column grants cannot (rows already answered, records away
//! from the head); see docs/fleet.md and SECURITY.md.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::config::Host;

/// The schema version this toolward writes and reads: 3 (2 without the triggers that keep an
/// answered approval and the chain's `seq` as toolward writes them, 1 without the fact
/// counters and the `requestState` ledger).
pub const SCHEMA_VERSION: i32 = 3;

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

/// The roles of docs/fleet.md that [`PgStore::migrate`] grants rights to, when they exist:
/// the gateways (`toolward_gateway`), the people who answer approvals (`toolward_approver`)
/// and the auditors (`toolward_auditor`). Login roles are made members of them; the fourth
/// role, the owner of the tables (`toolward_owner` in the docs), runs `migrate` and needs no
/// grant.
pub const ROLES: &[&str] = &["toolward_gateway", "toolward_approver", "toolward_auditor"];

/// What each role of [`ROLES`] may do on each table, as the statements [`PgStore::migrate`]
/// runs (one a line, each ending `TO ROLE;`): docs/fleet.md shows this text, and a test keeps
/// the two the same. A schema version that adds a table adds its grants here, so `migrate`
/// extends the roles with it.
///
/// Nothing grants `DELETE`, `TRUNCATE` or a write of `line` on `toolward_audit` to anyone but
/// the owner: a gateway appends records and moves the head; an approver answers a held call
/// (the answer columns only); an auditor reads. `toolward_keys` (the `requestState` MAC
/// key) is the gateways' alone.
pub const GRANTS: &str = "\
GRANT SELECT ON toolward_schema TO toolward_gateway;
GRANT SELECT, INSERT ON toolward_audit TO toolward_gateway;
GRANT SELECT, UPDATE ON toolward_audit_head TO toolward_gateway;
GRANT SELECT, INSERT, UPDATE (state) ON toolward_approvals TO toolward_gateway;
GRANT SELECT, INSERT, UPDATE, DELETE ON toolward_facts TO toolward_gateway;
GRANT SELECT, INSERT, DELETE ON toolward_request_states TO toolward_gateway;
GRANT SELECT ON toolward_keys TO toolward_gateway;
GRANT SELECT ON toolward_schema TO toolward_approver;
GRANT SELECT, UPDATE (state, reason, answerer, answerer_uid, answered_from, answered_at_ms) ON toolward_approvals TO toolward_approver;
GRANT SELECT ON toolward_schema, toolward_audit, toolward_audit_head TO toolward_auditor;
";

/// The statements of [`GRANTS`], without their `;`.
fn grants() -> impl Iterator<Item = &'static str> {
    GRANTS
        .lines()
        .map(|line| line.trim().trim_end_matches(';'))
        .filter(|line| !line.is_empty())
}

/// What [`PgStore::migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// The store, as [`PgStore::name`] names it.
    pub store: String,
    /// The version found before: `None` when the database held no toolward schema.
    pub from: Option<i32>,
    /// The version now: [`SCHEMA_VERSION`].
    pub to: i32,
    /// Whether the `requestState` key was made (the first migration).
    pub key_made: bool,
    /// The roles of [`ROLES`] granted their rights.
    pub granted: Vec<&'static str>,
    /// The roles of [`ROLES`] that do not exist, so were granted nothing.
    pub missing: Vec<&'static str>,
}

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
    /// The database holds no toolward schema, or an older version than this toolward's:
    /// every open but `migrate` refuses it, since none of them runs DDL.
    #[error(
        "PostgreSQL store {store}: {}, and this toolward needs version {SCHEMA_VERSION}: run `toolward store migrate --config {config}` as the role that owns the tables (docs/fleet.md)",
        found.map_or_else(|| String::from("holds no toolward schema"), |v| format!("holds schema version {v}"))
    )]
    NotMigrated {
        /// The store.
        store: String,
        /// The version found; `None` when there is none.
        found: Option<i32>,
        /// The config file to name in the command, or `PATH`.
        config: String,
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
    config_file: Arc<str>,
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
            config_file: Arc::from("PATH"),
        })
    }

    /// The config file that names this store, for the command an error asks to run
    /// (`toolward store migrate --config FILE`); `PATH` when not given.
    #[must_use]
    pub fn with_config_file(mut self, file: &std::path::Path) -> PgStore {
        self.config_file = Arc::from(file.display().to_string());
        self
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

    /// Reads the schema version and refuses a database this toolward cannot use: what every
    /// open of the store does (gateway, approvals, audit), and all it does to the schema. It
    /// runs no DDL and writes nothing, so a role granted only what docs/fleet.md gives it
    /// passes; creating and upgrading the schema is [`PgStore::migrate`], run by the tables'
    /// owner.
    ///
    /// # Errors
    ///
    /// [`PgError::Connect`] when the database cannot be reached; [`PgError::NotMigrated`]
    /// when it holds no toolward schema or an older version; [`PgError::SchemaTooNew`];
    /// [`PgError::Query`] when the version cannot be read (the role may not `SELECT` on
    /// `toolward_schema`).
    pub async fn check_schema(&self, pool: &Pool) -> Result<(), PgError> {
        let client = pool.get().await.map_err(|e| self.connect_error(e))?;
        let found = self.read_version(&client).await?;
        match found {
            Some(found) if found > SCHEMA_VERSION => Err(PgError::SchemaTooNew {
                store: self.name.to_string(),
                found,
            }),
            Some(SCHEMA_VERSION) => Ok(()),
            found => Err(PgError::NotMigrated {
                store: self.name.to_string(),
                found,
                config: self.config_file.to_string(),
            }),
        }
    }

    /// The version row of `toolward_schema`; `None` when the table or its row is missing.
    async fn read_version(
        &self,
        client: &impl deadpool_postgres::GenericClient,
    ) -> Result<Option<i32>, PgError> {
        // Looked up first rather than caught as an error: a failed statement would abort the
        // transaction `migrate` reads it in.
        let exists: bool = client
            .query_one("SELECT to_regclass('toolward_schema') IS NOT NULL", &[])
            .await
            .map_err(|e| self.query_error("read the schema version", e))?
            .get(0);
        if !exists {
            return Ok(None);
        }
        client
            .query_opt("SELECT version FROM toolward_schema WHERE id = 1", &[])
            .await
            .map(|row| row.map(|row| row.get(0)))
            .map_err(|e| self.query_error("read the schema version", e))
    }

    /// Creates the schema, or brings an older one to [`SCHEMA_VERSION`], and grants each
    /// role of docs/fleet.md ([`ROLES`]) what it needs on every table ([`GRANTS`]), in one
    /// transaction under an advisory lock (two migrations at once do not race). Run by the
    /// role that owns the tables (`toolward store migrate`); idempotent: on a current schema
    /// it creates nothing and grants again what is already granted. A role of [`ROLES`] that
    /// does not exist is left out and named in the result.
    ///
    /// # Errors
    ///
    /// [`PgError::Connect`]; [`PgError::SchemaTooNew`]; [`PgError::Query`] when a statement
    /// fails (the role may lack `CREATE` on the schema, or not own the tables).
    pub async fn migrate(&self, pool: &Pool) -> Result<Migration, PgError> {
        let mut client = pool.get().await.map_err(|e| self.connect_error(e))?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| self.query_error("begin the schema transaction", e))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK_KEY])
            .await
            .map_err(|e| self.query_error("lock the schema", e))?;
        let from = self.read_version(&tx).await?;
        if let Some(found) = from.filter(|found| *found > SCHEMA_VERSION) {
            return Err(PgError::SchemaTooNew {
                store: self.name.to_string(),
                found,
            });
        }
        tx.batch_execute(SCHEMA)
            .await
            .map_err(|e| self.query_error("create the schema", e))?;
        tx.batch_execute(TRIGGERS)
            .await
            .map_err(|e| self.query_error("create the schema's triggers", e))?;
        // The fleet's `requestState` key, made once, inside the schema transaction and under
        // its lock.
        let key_made = tx
            .query_opt(
                "SELECT 1 FROM toolward_keys WHERE name = $1",
                &[&REQUEST_STATE_KEY_NAME],
            )
            .await
            .map_err(|e| self.query_error("read the request-state key", e))?
            .is_none();
        if key_made {
            let mut key = [0u8; crate::state_dir::KEY_BYTES];
            getrandom::fill(&mut key).map_err(|e| PgError::Query {
                store: self.name.to_string(),
                action: "make the request-state key",
                reason: e.to_string(),
            })?;
            tx.execute(
                "INSERT INTO toolward_keys (name, key) VALUES ($1, $2)",
                &[&REQUEST_STATE_KEY_NAME, &key.as_slice()],
            )
            .await
            .map_err(|e| self.query_error("store the request-state key", e))?;
        }
        let names: Vec<&str> = ROLES.to_vec();
        let existing: Vec<String> = tx
            .query(
                "SELECT rolname::text FROM pg_roles WHERE rolname = ANY($1)",
                &[&names],
            )
            .await
            .map_err(|e| self.query_error("look up the roles", e))?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let mut granted = Vec::new();
        let mut missing = Vec::new();
        for role in ROLES {
            if existing.iter().any(|name| name == role) {
                granted.push(*role);
            } else {
                missing.push(*role);
            }
        }
        for statement in grants() {
            if granted
                .iter()
                .any(|role| statement.ends_with(&format!(" TO {role}")))
            {
                tx.batch_execute(statement)
                    .await
                    .map_err(|e| self.query_error("grant the roles their rights", e))?;
            }
        }
        tx.commit()
            .await
            .map_err(|e| self.query_error("commit the schema", e))?;
        Ok(Migration {
            store: self.name.to_string(),
            from,
            to: SCHEMA_VERSION,
            key_made,
            granted,
            missing,
        })
    }

    pub(crate) fn connect_error(&self, error: impl std::error::Error) -> PgError {
        PgError::Connect {
            store: self.name.to_string(),
            reason: crate::text::error_chain(&error),
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
            reason: crate::text::error_chain(&error),
        }
    }
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

/// The tables of the schema, version [`SCHEMA_VERSION`]. Idempotent; on a version 1 or 2
/// database it adds what is missing and moves the version row (never down: [`PgStore::migrate`] refuses a
/// newer version before running it).
const SCHEMA: &str = r"
CREATE TABLE IF NOT EXISTS toolward_schema (
    id integer PRIMARY KEY CHECK (id = 1),
    version integer NOT NULL
);
INSERT INTO toolward_schema (id, version) VALUES (1, 3)
    ON CONFLICT (id) DO UPDATE SET version = 3 WHERE toolward_schema.version < 3;
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

/// The triggers of version 3, run by every [`PgStore::migrate`] after [`SCHEMA`]: each
/// function replaced and each trigger dropped and made again, so after `migrate` they are
/// exactly these (enabled, calling these functions), whatever was there before. They bind
/// every role, the owner included, since column grants cannot tell rows apart:
///
/// - `toolward_approvals_answered_once`: an `UPDATE` of a row no longer `pending` is refused
///   (an answer, once given, and an abandonment stay as written), and so is one that changes
///   the held call (`call_id`, `request`, `held_by`, `held_at_ms`, `expires_at_ms`). Every
///   `UPDATE` toolward makes has `WHERE ... state = 'pending'` and sets only the answer
///   columns, so none is refused.
/// - `toolward_audit_at_head` (before each insert) and `toolward_audit_below_head` (a
///   constraint trigger, deferred to the commit): a record's `seq` must be at or past the
///   head row's `next_seq` when it is inserted, and below it when its transaction commits.
///   The writer inserts from `next_seq` and moves the head past its last record in the same
///   transaction, so it passes; a stray insert far past the head (which would collide later
///   with the chain's own `seq` and refuse every call of the fleet) does not commit.
///
/// The functions only raise (`SECURITY INVOKER`) and read the head row by a `search_path` of
/// the schema the tables are in, then `pg_temp` last, so a temporary table of the
/// inserting session cannot stand in for the head.
const TRIGGERS: &str = r"
CREATE OR REPLACE FUNCTION toolward_approvals_answered_once() RETURNS trigger
    LANGUAGE plpgsql SECURITY INVOKER AS $$
BEGIN
    IF OLD.state <> 'pending' THEN
        RAISE EXCEPTION 'toolward_approvals: this call is % already: an answered approval is never changed', OLD.state
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.call_id IS DISTINCT FROM OLD.call_id
        OR NEW.request IS DISTINCT FROM OLD.request
        OR NEW.held_by IS DISTINCT FROM OLD.held_by
        OR NEW.held_at_ms IS DISTINCT FROM OLD.held_at_ms
        OR NEW.expires_at_ms IS DISTINCT FROM OLD.expires_at_ms THEN
        RAISE EXCEPTION 'toolward_approvals: only the answer of a held call may change, not the call'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
CREATE OR REPLACE FUNCTION toolward_audit_at_head() RETURNS trigger
    LANGUAGE plpgsql SECURITY INVOKER AS $$
DECLARE
    head bigint;
BEGIN
    SELECT next_seq INTO head FROM toolward_audit_head WHERE id = 1;
    IF head IS NULL OR NEW.seq < head THEN
        RAISE EXCEPTION 'toolward_audit: record % is before the head (next_seq %): records are appended at the head', NEW.seq, head
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
CREATE OR REPLACE FUNCTION toolward_audit_below_head() RETURNS trigger
    LANGUAGE plpgsql SECURITY INVOKER AS $$
DECLARE
    head bigint;
BEGIN
    SELECT next_seq INTO head FROM toolward_audit_head WHERE id = 1;
    IF head IS NULL OR NEW.seq >= head THEN
        RAISE EXCEPTION 'toolward_audit: record % is not below the head (next_seq %) at commit: a transaction that appends records moves the head past them', NEW.seq, head
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION toolward_audit_at_head() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION toolward_audit_below_head() SET search_path = %I, pg_temp', current_schema());
END
$$;
REVOKE ALL ON FUNCTION toolward_approvals_answered_once(), toolward_audit_at_head(), toolward_audit_below_head() FROM PUBLIC;
DROP TRIGGER IF EXISTS toolward_approvals_answered_once ON toolward_approvals;
CREATE TRIGGER toolward_approvals_answered_once BEFORE UPDATE ON toolward_approvals
    FOR EACH ROW EXECUTE FUNCTION toolward_approvals_answered_once();
DROP TRIGGER IF EXISTS toolward_audit_at_head ON toolward_audit;
CREATE TRIGGER toolward_audit_at_head BEFORE INSERT ON toolward_audit
    FOR EACH ROW EXECUTE FUNCTION toolward_audit_at_head();
DROP TRIGGER IF EXISTS toolward_audit_below_head ON toolward_audit;
CREATE CONSTRAINT TRIGGER toolward_audit_below_head AFTER INSERT ON toolward_audit
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION toolward_audit_below_head();
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
    i64::try_from(crate::ids::now_ms()).unwrap_or(i64::MAX)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grants_migrate_runs_are_the_ones_docs_fleet_md_shows() {
        let docs = include_str!("../../docs/fleet.md");
        assert!(
            docs.contains(&format!("```sql\n{GRANTS}```")),
            "docs/fleet.md's grants block differs from `GRANTS`"
        );
    }

    #[test]
    fn every_grant_names_one_role_of_roles_and_none_grants_a_rewrite_of_audit_records() {
        for statement in grants() {
            assert_eq!(
                ROLES
                    .iter()
                    .filter(|role| statement.ends_with(&format!(" TO {role}")))
                    .count(),
                1,
                "{statement}"
            );
            if statement.contains(" toolward_audit ") || statement.contains(" toolward_audit,") {
                assert!(
                    !["UPDATE", "DELETE", "TRUNCATE"]
                        .iter()
                        .any(|right| statement
                            .split(" ON ")
                            .next()
                            .is_some_and(|rights| rights.contains(right))),
                    "{statement}"
                );
            }
        }
    }

    #[test]
    fn an_unmigrated_store_names_the_migrate_command_and_the_database_without_the_password() {
        let store = PgStore::new("postgres://gw:s3cret@db.internal:5433/fleet")
            .unwrap()
            .with_config_file(std::path::Path::new("gw.json"));
        let error = PgError::NotMigrated {
            store: store.name().to_owned(),
            found: Some(1),
            config: store.config_file.to_string(),
        }
        .to_string();
        assert_eq!(
            error,
            "PostgreSQL store `postgres://db.internal:5433/fleet`: holds schema version 1, and this toolward needs version 3: run `toolward store migrate --config gw.json` as the role that owns the tables (docs/fleet.md)"
        );
    }
}
