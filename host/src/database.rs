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
//! | `toolward_labels` | one per session or sessionless principal that saw labels: what it has seen ([`PgLabels`](crate::store::postgres::PgLabels)) |
//! | `toolward_oauth_grants` | one per server and principal (`''` for the operator's) signed in to an HTTP server: the grant, sealed under `store.oauth_key` (`crate::oauth::postgres`) |
//! | `toolward_gateways` | one per running gateway: the state it publishes for the console ([`crate::gateways`]), as JSON text, and when it last wrote it |
//! | `toolward_checkpoints` | one per signer key, origin and login role: the latest audit checkpoint that gateway signed of the chain (a C2SP signed note), its size, and when |
//!
//! Version 2 added the fact counters, the ledger and the key; version 3 the triggers that keep
//! an answered approval as it was answered and each audit record's `seq` at the head
//! ([`TRIGGERS`]); version 4 the sessions' labels; version 5 the OAuth grants; version 6 the
//! gateways' published states and, on a held call, the channel its answer came through and
//! the answerer's groups (the console's); version 7 the gateways' signed checkpoints of the
//! chain. `migrate` takes
//! an older database to version 7 (what is missing created, the version row moved),
//! after which an older toolward refuses it: upgrade every gateway of the fleet together.
//! After migrating it reports drift ([`Drift`]): what the tables hold beyond the roles'
//! contract.
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

/// The schema version this toolward writes and reads: 7 (6 without the gateways' signed
/// checkpoints, 5 without the gateways' states and
/// the answer's channel and groups, 4 without the OAuth grants, 3
/// without the sessions' labels, 2 without the triggers that keep an answered approval and
/// the chain's `seq` as toolward writes them, 1 without the fact counters and the
/// `requestState` ledger).
pub const SCHEMA_VERSION: i32 = 7;

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
pub const ROLES: &[&str] = &[
    "toolward_gateway",
    "toolward_approver",
    "toolward_auditor",
    "toolward_console",
];

/// What each role of [`ROLES`] may do on each table, as the statements [`PgStore::migrate`]
/// runs (one a line, each ending `TO ROLE;`): docs/fleet.md shows this text, and a test keeps
/// the two the same. A schema version that adds a table adds its grants here, so `migrate`
/// extends the roles with it.
///
/// Nothing grants `DELETE`, `TRUNCATE` or a write of `line` on `toolward_audit` to anyone but
/// the owner: a gateway appends records and moves the head; an approver answers a held call
/// (the answer columns only); an auditor reads. `toolward_keys` (the `requestState` MAC
/// key), `toolward_labels` (sessions' labels: joined as results are delivered, lapsed rows
/// deleted) and `toolward_oauth_grants` (sealed OAuth grants: written by `auth login`, renewed
/// by whichever gateway needs a new token, deleted by `auth logout`) are the gateways' alone.
/// `toolward_checkpoints` (each gateway's latest signed checkpoint, a row per login: a
/// trigger keeps another login's rows from it) is written by the gateways and read by the
/// auditors and the console; nobody but the owner deletes a row.
pub const GRANTS: &str = "\
GRANT SELECT ON toolward_schema TO toolward_gateway;
GRANT SELECT, INSERT ON toolward_audit TO toolward_gateway;
GRANT SELECT, UPDATE ON toolward_audit_head TO toolward_gateway;
GRANT SELECT, INSERT, UPDATE (state) ON toolward_approvals TO toolward_gateway;
GRANT SELECT, INSERT, UPDATE, DELETE ON toolward_facts TO toolward_gateway;
GRANT SELECT, INSERT, DELETE ON toolward_request_states TO toolward_gateway;
GRANT SELECT ON toolward_keys TO toolward_gateway;
GRANT SELECT, INSERT, UPDATE, DELETE ON toolward_labels TO toolward_gateway;
GRANT SELECT, INSERT, UPDATE, DELETE ON toolward_oauth_grants TO toolward_gateway;
GRANT SELECT, INSERT, UPDATE, DELETE ON toolward_gateways TO toolward_gateway;
GRANT SELECT, INSERT, UPDATE (size, note) ON toolward_checkpoints TO toolward_gateway;
GRANT SELECT ON toolward_schema TO toolward_approver;
GRANT SELECT, UPDATE (state, reason, answerer, answerer_uid, answered_from, answered_at_ms) ON toolward_approvals TO toolward_approver;
GRANT SELECT ON toolward_schema, toolward_audit, toolward_audit_head, toolward_checkpoints TO toolward_auditor;
GRANT SELECT ON toolward_schema, toolward_audit, toolward_audit_head, toolward_gateways, toolward_checkpoints TO toolward_console;
GRANT SELECT, UPDATE (state, reason, answerer, answerer_uid, answered_from, answered_at_ms, answered_through, answerer_groups) ON toolward_approvals TO toolward_console;
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
    /// What the toolward tables hold beyond docs/fleet.md's contract, found after migrating:
    /// empty when they hold only what `migrate` made.
    pub drift: Vec<Drift>,
}

/// One thing a toolward table holds that `migrate` did not make and docs/fleet.md does not
/// give: a privilege beyond [`GRANTS`] (to `PUBLIC`, to a role other than those of [`ROLES`]
/// and the owner, a column or a grant option more than the role's), row-level security or a
/// policy, a rule, or a trigger. Shown as one line (`Display`): the table, what it is, and the
/// SQL that removes it, run as the owner. Names read from the database are escaped (in the
/// SQL as `U&"..."` identifiers), so the line is safe to print and the SQL still runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    /// The table.
    pub table: String,
    /// What it is, names quoted in backticks and escaped.
    pub what: String,
    /// The SQL that removes it, ending `;`.
    pub fix: String,
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let line = format!("{}: {}: {}", self.table, self.what, self.fix);
        f.write_str(&crate::text::escape(&line))
    }
}

/// The tables of [`SCHEMA`], which `migrate` checks for drift.
const TABLES: &[&str] = &[
    "toolward_schema",
    "toolward_audit",
    "toolward_audit_head",
    "toolward_approvals",
    "toolward_facts",
    "toolward_request_states",
    "toolward_keys",
    "toolward_labels",
    "toolward_oauth_grants",
    "toolward_gateways",
    "toolward_checkpoints",
];

/// One privilege [`GRANTS`] gives: the table, the role, the privilege (`SELECT`) and the
/// column, for a column grant (`UPDATE (state)`).
#[derive(Debug, PartialEq, Eq)]
struct Granted {
    table: &'static str,
    role: &'static str,
    privilege: &'static str,
    column: Option<&'static str>,
}

/// Every privilege of [`GRANTS`], one per table, role, privilege and column.
fn granted() -> Vec<Granted> {
    let mut out = Vec::new();
    for statement in grants() {
        let statement = statement.trim_start_matches("GRANT ");
        let Some((privileges, rest)) = statement.split_once(" ON ") else {
            continue;
        };
        let Some((tables, role)) = rest.split_once(" TO ") else {
            continue;
        };
        for privilege in split_outside_parentheses(privileges) {
            let (privilege, columns) = match privilege.split_once(" (") {
                Some((name, columns)) => (
                    name,
                    columns
                        .trim_end_matches(')')
                        .split(", ")
                        .map(Some)
                        .collect::<Vec<_>>(),
                ),
                None => (privilege, vec![None]),
            };
            for table in tables.split(", ") {
                for column in &columns {
                    out.push(Granted {
                        table,
                        role,
                        privilege,
                        column: *column,
                    });
                }
            }
        }
    }
    out
}

/// `text` split at each `, ` that is not inside parentheses.
fn split_outside_parentheses(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(text.get(start..i).unwrap_or_default().trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(text.get(start..).unwrap_or_default().trim());
    parts
}

/// `name` as an SQL identifier, given PostgreSQL's `quote_ident` of it: as it is, unless it
/// holds a character [`crate::text::escape`] would escape, then as a `U&"..."` identifier
/// with each such character written as a Unicode escape (and `\` doubled), so the SQL runs as
/// printed and prints as it runs.
fn sql_identifier(name: &str, quoted: &str) -> String {
    if !name.chars().any(crate::text::is_escaped) {
        return quoted.to_owned();
    }
    let mut out = String::from("U&\"");
    for c in name.chars() {
        match c {
            '"' => out.push_str("\"\""),
            '\\' => out.push_str("\\\\"),
            c if crate::text::is_escaped(c) => {
                let code = u32::from(c);
                if code <= 0xFFFF {
                    out.push_str(&format!("\\{code:04X}"));
                } else {
                    out.push_str(&format!("\\+{code:06X}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `name` for a message: in backticks, escaped.
fn shown(name: &str) -> String {
    format!("`{}`", crate::text::quote(name, MAX_SHOWN_NAME_BYTES))
}

/// Most bytes of a name read from the database shown in a drift line: 200 (PostgreSQL's own
/// names are at most 63).
const MAX_SHOWN_NAME_BYTES: usize = 200;

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
    /// `migrate` in a schema owned by a role other than the one running it, a superuser or
    /// the database's owner.
    #[error(
        "PostgreSQL store {store}: the tables' schema {schema} (the first valid schema of the role's `search_path`) is owned by {owner}, who could put functions there that `migrate` would run with the owner's rights (found by an attack): run `migrate` as a role whose `search_path` starts with a schema it, a superuser or the database's owner owns (docs/fleet.md)"
    )]
    SchemaOfAnother {
        /// The store.
        store: String,
        /// The schema, shown.
        schema: String,
        /// Its owner, shown.
        owner: String,
    },
    /// `migrate` of toolward tables another role owns.
    #[error(
        "PostgreSQL store {store}: {tables}: `migrate` keeps tables only of the role running it (another role made them, and may have put a key or records of its own in them, found by an attack); drop them, or hand them over with `ALTER TABLE ... OWNER TO` as docs/fleet.md's upgrade block does, then run `toolward store migrate` again"
    )]
    TablesOfAnother {
        /// The store.
        store: String,
        /// The tables and their owners, shown.
        tables: String,
    },
    /// `migrate` in a schema where roles other than its owner (and superusers) may create
    /// objects: one of them could make a function or operator that `migrate`'s own
    /// statements would call with the owner's rights.
    #[error(
        "PostgreSQL store {store}: `migrate` runs as the tables' owner, and {roles} can create objects in schema {schema}, where a function or operator of theirs would run with the owner's rights during `migrate` (found by an attack); take that right back as the schema's owner, then run `toolward store migrate` again: {fix}"
    )]
    OthersCreateInSchema {
        /// The store.
        store: String,
        /// The schema, shown.
        schema: String,
        /// The roles, shown.
        roles: String,
        /// The SQL that takes the right back.
        fix: String,
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
        self.hold_the_schema(&tx).await?;
        self.refuse_others_creating(&tx).await?;
        let from = self.read_version(&tx).await?;
        if let Some(found) = from.filter(|found| *found > SCHEMA_VERSION) {
            return Err(PgError::SchemaTooNew {
                store: self.name.to_string(),
                found,
            });
        }
        // The chain's tables first, in the order an append takes them (the head row, then the
        // records): the triggers made below lock both, and taken in the other order while a
        // gateway appends, the two transactions deadlock (the tests' shared database did).
        tx.batch_execute(
            "DO $$ BEGIN \
               IF pg_catalog.to_regclass('toolward_audit_head') IS NOT NULL \
                  AND pg_catalog.to_regclass('toolward_audit') IS NOT NULL THEN \
                 LOCK TABLE toolward_audit_head, toolward_audit IN ACCESS EXCLUSIVE MODE; \
               END IF; \
             END $$",
        )
        .await
        .map_err(|e| self.query_error("lock the audit chain's tables", e))?;
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
        let drift = self.drift(&tx).await?;
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
            drift,
        })
    }

    /// Pins this transaction's `search_path` to the schema the tables are in (after
    /// `pg_catalog`, which PostgreSQL searches first), so no statement of `migrate` finds a
    /// function, operator or table in another schema of the owner's path (found by an attack:
    /// a `public.unnest(text[])` planted by a role that could create in `public`, second on
    /// the owner's path, ran as the owner). Refuses a schema owned by a role other than the
    /// one running `migrate`, a superuser or the database's owner (an attack made a schema
    /// named after the owner role, first on its path by `"$user"`), and toolward tables
    /// owned by another role than the one running `migrate` (an attack made them before the
    /// first `migrate`, with a key of its own).
    async fn hold_the_schema(
        &self,
        tx: &impl deadpool_postgres::GenericClient,
    ) -> Result<(), PgError> {
        let Some(row) = tx
            .query_opt(
                "SELECT n.nspname::text, pg_catalog.quote_ident(n.nspname)::text, \
                        pg_catalog.pg_get_userbyid(n.nspowner)::text, \
                        (pg_catalog.pg_get_userbyid(n.nspowner) OPERATOR(pg_catalog.=) 'pg_database_owner' \
                         OR pg_catalog.pg_get_userbyid(n.nspowner) OPERATOR(pg_catalog.=) CURRENT_USER \
                         OR EXISTS (SELECT 1 FROM pg_catalog.pg_roles r \
                                    WHERE r.oid OPERATOR(pg_catalog.=) n.nspowner AND r.rolsuper)) \
                 FROM pg_catalog.pg_namespace n \
                 WHERE n.nspname OPERATOR(pg_catalog.=) pg_catalog.current_schema()",
                &[],
            )
            .await
            .map_err(|e| self.query_error("find the schema the tables are in", e))?
        else {
            return Ok(());
        };
        let schema: String = row.get(0);
        let quoted: String = row.get(1);
        let owner: String = row.get(2);
        if !row.get::<_, bool>(3) {
            return Err(PgError::SchemaOfAnother {
                store: self.name.to_string(),
                schema: shown(&schema),
                owner: shown(&owner),
            });
        }
        tx.execute(
            "SELECT pg_catalog.set_config('search_path', $1, true)",
            &[&quoted],
        )
        .await
        .map_err(|e| self.query_error("pin the search path to the tables' schema", e))?;
        let tables: &Vec<&str> = &TABLES.to_vec();
        let foreign: Vec<String> = tx
            .query(
                "SELECT c.relname::text, pg_catalog.pg_get_userbyid(c.relowner)::text \
                 FROM pg_catalog.pg_class c \
                 WHERE c.relnamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace($2) \
                   AND c.relname::text OPERATOR(pg_catalog.=) ANY ($1::text[]) \
                   AND pg_catalog.pg_get_userbyid(c.relowner) OPERATOR(pg_catalog.<>) CURRENT_USER \
                 ORDER BY 1",
                &[tables, &quoted],
            )
            .await
            .map_err(|e| self.query_error("check who owns the toolward tables", e))?
            .iter()
            .map(|row| format!("{} (owned by {})", shown(row.get(0)), shown(row.get(1))))
            .collect();
        if !foreign.is_empty() {
            return Err(PgError::TablesOfAnother {
                store: self.name.to_string(),
                tables: foreign.join(", "),
            });
        }
        Ok(())
    }

    /// Refuses to go on when a role that is neither a superuser, the role running `migrate`,
    /// nor the schema's owner (or a member of it) may create objects in the schema the tables are in: `migrate`'s
    /// statements name functions and operators that resolve through the `search_path`, so one
    /// made there (`format(text, name)`, which beats `pg_catalog.format` by its exact types)
    /// would run as the owner (found by an attack). This statement names everything it uses
    /// by its schema.
    async fn refuse_others_creating(
        &self,
        tx: &impl deadpool_postgres::GenericClient,
    ) -> Result<(), PgError> {
        let rows = tx
            .query(
                "SELECT n.nspname::text, pg_catalog.quote_ident(n.nspname)::text, r.rolname::text, \
                        pg_catalog.quote_ident(r.rolname)::text \
                 FROM pg_catalog.pg_namespace n, pg_catalog.pg_roles r \
                 WHERE n.nspname OPERATOR(pg_catalog.=) pg_catalog.current_schema() \
                   AND NOT r.rolsuper \
                   AND r.rolname OPERATOR(pg_catalog.<>) CURRENT_USER \
                   AND NOT pg_catalog.pg_has_role(r.oid, n.nspowner, 'MEMBER') \
                   AND pg_catalog.has_schema_privilege(r.oid, n.oid, 'CREATE') \
                 ORDER BY 3",
                &[],
            )
            .await
            .map_err(|e| self.query_error("check who may create objects in the schema", e))?;
        let Some(first) = rows.first() else {
            return Ok(());
        };
        let schema: String = first.get(0);
        let schema_sql = sql_identifier(&schema, first.get(1));
        let roles: Vec<String> = rows.iter().map(|row| shown(row.get(2))).collect();
        // A right given to `PUBLIC` is every role's: take it back there.
        let public = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n, \
                        pg_catalog.aclexplode(n.nspacl) a \
                 WHERE n.nspname OPERATOR(pg_catalog.=) pg_catalog.current_schema() \
                   AND a.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid \
                   AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE')",
                &[],
            )
            .await
            .map_err(|e| self.query_error("check who may create objects in the schema", e))?
            .get::<_, bool>(0);
        let from_public =
            public.then(|| format!("REVOKE CREATE ON SCHEMA {schema_sql} FROM PUBLIC;"));
        let fix: Vec<String> = from_public
            .into_iter()
            .chain(rows.iter().map(|row| {
                format!(
                    "REVOKE CREATE ON SCHEMA {schema_sql} FROM {};",
                    sql_identifier(row.get(2), row.get(3))
                )
            }))
            .collect();
        Err(PgError::OthersCreateInSchema {
            store: self.name.to_string(),
            schema: shown(&schema),
            roles: roles.join(", "),
            fix: fix.join(" "),
        })
    }

    /// What the toolward tables hold beyond the contract ([`Drift`]): privileges beyond
    /// [`GRANTS`] (the owner's own are its), row-level security and its policies, rules, and
    /// triggers other than [`OWN_TRIGGERS`].
    async fn drift(
        &self,
        tx: &impl deadpool_postgres::GenericClient,
    ) -> Result<Vec<Drift>, PgError> {
        let tables: &Vec<&str> = &TABLES.to_vec();
        let query = |sql: &'static str| async move {
            tx.query(sql, &[&tables])
                .await
                .map_err(|e| self.query_error("look for drift on the tables", e))
        };
        let mut drift = Vec::new();
        let expected = granted();
        // One row per privilege a role other than the table's owner holds: on the table, or
        // on one column (`column` set).
        for row in query(
            "WITH t AS (SELECT c.oid, c.relname, c.relowner FROM pg_class c \
                 WHERE c.oid = ANY (SELECT name::regclass FROM unnest($1::text[]) name)), \
             acl AS ( \
                 SELECT t.relname, a.grantee, a.privilege_type, a.is_grantable, NULL::name AS attname \
                 FROM t JOIN pg_class c ON c.oid = t.oid CROSS JOIN LATERAL aclexplode(c.relacl) a \
                 WHERE a.grantee <> t.relowner \
                 UNION ALL \
                 SELECT t.relname, a.grantee, a.privilege_type, a.is_grantable, att.attname \
                 FROM t JOIN pg_attribute att ON att.attrelid = t.oid AND att.attnum > 0 AND NOT att.attisdropped \
                 CROSS JOIN LATERAL aclexplode(att.attacl) a \
                 WHERE a.grantee <> t.relowner) \
             SELECT relname::text, \
                 CASE WHEN grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(grantee)::text END, \
                 CASE WHEN grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(grantee)) END, \
                 privilege_type, is_grantable, attname::text, quote_ident(attname) \
             FROM acl ORDER BY 1, 2, 6 NULLS FIRST, 4",
        )
        .await?
        {
            let table: String = row.get(0);
            let grantee: String = row.get(1);
            let grantee_sql = sql_identifier(&grantee, row.get(2));
            let privilege: String = row.get(3);
            let grantable: bool = row.get(4);
            let column: Option<String> = row.get(5);
            let column_sql = column
                .as_deref()
                .map(|name| format!(" ({})", sql_identifier(name, row.get::<_, &str>(6))));
            let public = grantee == "PUBLIC" && row.get::<_, &str>(2) == "PUBLIC";
            let contracted = !public
                && expected.iter().any(|g| {
                    g.table == table
                        && g.role == grantee
                        && g.privilege == privilege
                        && g.column == column.as_deref()
                });
            let of_column = column
                .as_deref()
                .map(|name| format!(" of {}", shown(name)))
                .unwrap_or_default();
            let to = if public {
                String::from("`PUBLIC`")
            } else {
                shown(&grantee)
            };
            let column_sql = column_sql.unwrap_or_default();
            if !contracted {
                drift.push(Drift {
                    what: format!("`{privilege}`{of_column} granted to {to}"),
                    fix: format!("REVOKE {privilege}{column_sql} ON {table} FROM {grantee_sql};"),
                    table,
                });
            } else if grantable {
                drift.push(Drift {
                    what: format!("`{privilege}`{of_column} grantable by {to}"),
                    fix: format!(
                        "REVOKE GRANT OPTION FOR {privilege}{column_sql} ON {table} FROM {grantee_sql};"
                    ),
                    table,
                });
            }
        }
        for row in query(
            "SELECT relname::text, relrowsecurity, relforcerowsecurity FROM pg_class \
             WHERE oid = ANY (SELECT name::regclass FROM unnest($1::text[]) name) \
               AND (relrowsecurity OR relforcerowsecurity) ORDER BY 1",
        )
        .await?
        {
            let table: String = row.get(0);
            if row.get::<_, bool>(1) {
                drift.push(Drift {
                    what: String::from("row-level security enabled"),
                    fix: format!("ALTER TABLE {table} DISABLE ROW LEVEL SECURITY;"),
                    table: table.clone(),
                });
            }
            if row.get::<_, bool>(2) {
                drift.push(Drift {
                    what: String::from("row-level security forced on the owner"),
                    fix: format!("ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY;"),
                    table,
                });
            }
        }
        // Policies, rules and triggers: each by its name and `quote_ident` of it.
        for (kind, sql, remove) in [
            (
                "row-level security policy",
                "SELECT c.relname::text, p.polname::text, quote_ident(p.polname) \
                 FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid \
                 WHERE c.oid = ANY (SELECT name::regclass FROM unnest($1::text[]) name) ORDER BY 1, 2",
                "DROP POLICY",
            ),
            (
                "rule",
                "SELECT c.relname::text, r.rulename::text, quote_ident(r.rulename) \
                 FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class \
                 WHERE c.oid = ANY (SELECT name::regclass FROM unnest($1::text[]) name) \
                   AND r.rulename <> '_RETURN' ORDER BY 1, 2",
                "DROP RULE",
            ),
            (
                "trigger",
                "SELECT c.relname::text, t.tgname::text, quote_ident(t.tgname) \
                 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
                 WHERE c.oid = ANY (SELECT name::regclass FROM unnest($1::text[]) name) \
                   AND NOT t.tgisinternal ORDER BY 1, 2",
                "DROP TRIGGER",
            ),
        ] {
            for row in query(sql).await? {
                let table: String = row.get(0);
                let name: String = row.get(1);
                if kind == "trigger"
                    && OWN_TRIGGERS
                        .iter()
                        .any(|(own_table, own)| *own_table == table && *own == name)
                {
                    continue;
                }
                drift.push(Drift {
                    what: format!("{kind} {} not made by `migrate`", shown(&name)),
                    fix: format!(
                        "{remove} {} ON {table};",
                        sql_identifier(&name, row.get::<_, &str>(2))
                    ),
                    table,
                });
            }
        }
        Ok(drift)
    }

    pub(crate) fn connect_error(&self, error: impl std::error::Error) -> PgError {
        PgError::Connect {
            store: self.name.to_string(),
            reason: crate::text::error_chain(&error),
        }
    }

    /// `work` within [`STATEMENT_TIMEOUT`], or an error saying `action` had no answer.
    pub(crate) async fn timed<T>(
        &self,
        action: &'static str,
        work: impl Future<Output = Result<T, PgError>>,
    ) -> Result<T, PgError> {
        tokio::time::timeout(STATEMENT_TIMEOUT, work)
            .await
            .unwrap_or_else(|_| {
                Err(PgError::Query {
                    store: self.name.to_string(),
                    action,
                    reason: format!("no answer within {} s", STATEMENT_TIMEOUT.as_secs()),
                })
            })
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

/// The tables of the schema, version [`SCHEMA_VERSION`]. Idempotent; on a version 1 to 6
/// database it adds what is missing and moves the version row (never down: [`PgStore::migrate`] refuses a
/// newer version before running it).
const SCHEMA: &str = r"
CREATE TABLE IF NOT EXISTS toolward_schema (
    id integer PRIMARY KEY CHECK (id = 1),
    version integer NOT NULL
);
INSERT INTO toolward_schema (id, version) VALUES (1, 7)
    ON CONFLICT (id) DO UPDATE SET version = 7 WHERE toolward_schema.version < 7;
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
CREATE TABLE IF NOT EXISTS toolward_labels (
    kind text NOT NULL CHECK (kind IN ('session', 'principal')),
    name text NOT NULL,
    untrusted boolean NOT NULL,
    confidentiality text NOT NULL,
    rank bigint NOT NULL CHECK (rank >= 0),
    tags text[] NOT NULL,
    at_ms bigint NOT NULL CHECK (at_ms >= 0),
    PRIMARY KEY (kind, name)
);
CREATE TABLE IF NOT EXISTS toolward_oauth_grants (
    server text NOT NULL CHECK (server <> ''),
    principal text NOT NULL,
    sealed bytea NOT NULL,
    updated_at_ms bigint NOT NULL CHECK (updated_at_ms >= 0),
    PRIMARY KEY (server, principal)
);
ALTER TABLE toolward_approvals ADD COLUMN IF NOT EXISTS answered_through text;
ALTER TABLE toolward_approvals ADD COLUMN IF NOT EXISTS answerer_groups text[];
CREATE TABLE IF NOT EXISTS toolward_gateways (
    id text PRIMARY KEY,
    state text NOT NULL,
    updated_at_ms bigint NOT NULL CHECK (updated_at_ms >= 0),
    writer text NOT NULL DEFAULT session_user
);
CREATE TABLE IF NOT EXISTS toolward_checkpoints (
    signer text NOT NULL CHECK (signer <> ''),
    origin text NOT NULL CHECK (origin <> ''),
    writer text NOT NULL DEFAULT session_user,
    size bigint NOT NULL CHECK (size >= 0),
    note text NOT NULL,
    updated_at_ms bigint NOT NULL DEFAULT 0 CHECK (updated_at_ms >= 0),
    PRIMARY KEY (signer, origin, writer)
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
/// Version 6 adds two (outside attacks on the fleet's console found what they refuse):
///
/// - `toolward_audit_head_forward`: the head row's `next_seq` never moves back, nor past
///   the last record plus one. Moved back by a role that may update it, the records past it
///   would collide with every later append; moved to the largest `bigint`, the next append
///   could not follow it: either refuses every call of the fleet.
/// - `toolward_gateways_own_row`: a gateway's row is its writer's (the login role that
///   inserted it, `session_user`, kept in `writer`, so a `SET ROLE` makes no other writer):
///   another login's update or delete of it is refused, and every
///   insert or update is stamped with the database's clock, not the writer's. One stolen
///   gateway login can neither hide another gateway's refused tools nor keep a fake row
///   live by dating it ahead.
///
/// Version 7 adds one:
///
/// - `toolward_checkpoints_own_row`: as `toolward_gateways_own_row`, for the gateways'
///   signed checkpoints: a row is its writer's (`session_user`, part of the key, so one login
///   cannot take the row of a key it does not hold before that key's gateway writes it),
///   another login's update is refused, and each write is stamped with the database's clock.
///
/// The functions only raise or stamp (`SECURITY INVOKER`) and read the head row by a `search_path` of
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
CREATE OR REPLACE FUNCTION toolward_audit_head_forward() RETURNS trigger
    LANGUAGE plpgsql SECURITY INVOKER AS $$
BEGIN
    IF NEW.next_seq < OLD.next_seq THEN
        RAISE EXCEPTION 'toolward_audit_head: the head moves forward only (next_seq % to %): moved back, every append of the fleet would collide with a record past it', OLD.next_seq, NEW.next_seq
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NEW.next_seq > OLD.next_seq
        AND NEW.next_seq > COALESCE((SELECT max(a.seq) FROM toolward_audit a), -1) + 1 THEN
        RAISE EXCEPTION 'toolward_audit_head: next_seq % is past the last record (%) plus one: the head moves past the records its transaction appended, no further', NEW.next_seq, (SELECT max(a.seq) FROM toolward_audit a)
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
CREATE OR REPLACE FUNCTION toolward_checkpoints_own_row() RETURNS trigger
    LANGUAGE plpgsql SECURITY INVOKER AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.writer := session_user;
    ELSE
        IF OLD.writer IS DISTINCT FROM session_user THEN
            RAISE EXCEPTION 'toolward_checkpoints: the checkpoint row of % is %''s: a role changes or deletes its own rows only', OLD.signer, OLD.writer
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        NEW.writer := OLD.writer;
        NEW.signer := OLD.signer;
        NEW.origin := OLD.origin;
    END IF;
    NEW.updated_at_ms := (extract(epoch from clock_timestamp()) * 1000)::bigint;
    RETURN NEW;
END
$$;
CREATE OR REPLACE FUNCTION toolward_gateways_own_row() RETURNS trigger
    LANGUAGE plpgsql SECURITY INVOKER AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.writer := session_user;
    ELSE
        IF OLD.writer IS DISTINCT FROM session_user THEN
            RAISE EXCEPTION 'toolward_gateways: the row of gateway % is %''s: a role changes or deletes its own gateways'' rows only', OLD.id, OLD.writer
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        NEW.writer := OLD.writer;
    END IF;
    NEW.updated_at_ms := (extract(epoch from clock_timestamp()) * 1000)::bigint;
    RETURN NEW;
END
$$;
DO $$
BEGIN
    EXECUTE pg_catalog.format('ALTER FUNCTION toolward_audit_at_head() SET search_path = %I, pg_temp', pg_catalog.current_schema());
    EXECUTE pg_catalog.format('ALTER FUNCTION toolward_audit_below_head() SET search_path = %I, pg_temp', pg_catalog.current_schema());
    EXECUTE pg_catalog.format('ALTER FUNCTION toolward_audit_head_forward() SET search_path = %I, pg_temp', pg_catalog.current_schema());
    EXECUTE pg_catalog.format('ALTER FUNCTION toolward_gateways_own_row() SET search_path = %I, pg_temp', pg_catalog.current_schema());
    EXECUTE pg_catalog.format('ALTER FUNCTION toolward_checkpoints_own_row() SET search_path = %I, pg_temp', pg_catalog.current_schema());
END
$$;
REVOKE ALL ON FUNCTION toolward_approvals_answered_once(), toolward_audit_at_head(), toolward_audit_below_head(), toolward_audit_head_forward(), toolward_gateways_own_row(), toolward_checkpoints_own_row() FROM PUBLIC;
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
DROP TRIGGER IF EXISTS toolward_audit_head_forward ON toolward_audit_head;
CREATE TRIGGER toolward_audit_head_forward BEFORE UPDATE ON toolward_audit_head
    FOR EACH ROW EXECUTE FUNCTION toolward_audit_head_forward();
DROP TRIGGER IF EXISTS toolward_gateways_own_row ON toolward_gateways;
CREATE TRIGGER toolward_gateways_own_row BEFORE INSERT OR UPDATE OR DELETE ON toolward_gateways
    FOR EACH ROW EXECUTE FUNCTION toolward_gateways_own_row();
DROP TRIGGER IF EXISTS toolward_checkpoints_own_row ON toolward_checkpoints;
CREATE TRIGGER toolward_checkpoints_own_row BEFORE INSERT OR UPDATE OR DELETE ON toolward_checkpoints
    FOR EACH ROW EXECUTE FUNCTION toolward_checkpoints_own_row();
";

/// The triggers [`TRIGGERS`] makes, as `(table, trigger)`: `migrate` reports any other
/// trigger on a toolward table as drift.
const OWN_TRIGGERS: &[(&str, &str)] = &[
    ("toolward_approvals", "toolward_approvals_answered_once"),
    ("toolward_audit", "toolward_audit_at_head"),
    ("toolward_audit", "toolward_audit_below_head"),
    ("toolward_audit_head", "toolward_audit_head_forward"),
    ("toolward_gateways", "toolward_gateways_own_row"),
    ("toolward_checkpoints", "toolward_checkpoints_own_row"),
];

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
    fn granted_lists_each_privilege_of_grants_per_table_and_column() {
        let granted = granted();
        for (table, role, privilege, column) in [
            ("toolward_audit", "toolward_gateway", "INSERT", None),
            (
                "toolward_approvals",
                "toolward_gateway",
                "UPDATE",
                Some("state"),
            ),
            (
                "toolward_approvals",
                "toolward_approver",
                "UPDATE",
                Some("answered_at_ms"),
            ),
            ("toolward_audit_head", "toolward_auditor", "SELECT", None),
            ("toolward_labels", "toolward_gateway", "UPDATE", None),
            ("toolward_labels", "toolward_gateway", "DELETE", None),
            ("toolward_oauth_grants", "toolward_gateway", "UPDATE", None),
        ] {
            assert!(
                granted.contains(&Granted {
                    table,
                    role,
                    privilege,
                    column
                }),
                "{table} {role} {privilege} {column:?}"
            );
        }
        assert!(!granted.iter().any(|g| g.table == "toolward_approvals"
            && g.role == "toolward_gateway"
            && g.privilege == "UPDATE"
            && g.column.is_none_or(|c| c != "state")));
        // Sessions' labels are the gateways' alone: an approver or an auditor reads none.
        assert!(
            granted
                .iter()
                .filter(|g| g.table == "toolward_labels")
                .all(|g| g.role == "toolward_gateway")
        );
        // Grants are the gateways' alone too: whoever reads the table reads sealed tokens.
        assert!(
            granted
                .iter()
                .filter(|g| g.table == "toolward_oauth_grants")
                .all(|g| g.role == "toolward_gateway")
        );
        // The console reads the gateways' states and never writes them.
        assert!(
            granted
                .iter()
                .filter(|g| g.table == "toolward_gateways" && g.privilege != "SELECT")
                .all(|g| g.role == "toolward_gateway")
        );
        // The console answers through the answer columns alone, with its channel and groups.
        assert!(
            granted
                .iter()
                .filter(|g| g.table == "toolward_approvals"
                    && g.role == "toolward_console"
                    && g.privilege == "UPDATE")
                .all(|g| g.column.is_some())
        );
        assert!(granted.contains(&Granted {
            table: "toolward_approvals",
            role: "toolward_console",
            privilege: "UPDATE",
            column: Some("answerer_groups"),
        }));
        // Checkpoints are written by gateways (their own rows, by trigger) and never deleted;
        // auditors and the console read them.
        assert!(
            granted
                .iter()
                .filter(|g| g.table == "toolward_checkpoints" && g.privilege != "SELECT")
                .all(|g| g.role == "toolward_gateway" && g.privilege != "DELETE")
        );
        for role in ["toolward_auditor", "toolward_console"] {
            assert!(granted.contains(&Granted {
                table: "toolward_checkpoints",
                role,
                privilege: "SELECT",
                column: None,
            }));
        }
        assert_eq!(granted.len(), 58);
    }

    #[test]
    fn the_schema_makes_each_table_and_trigger_the_drift_check_knows() {
        for table in TABLES {
            assert!(
                SCHEMA.contains(&format!("CREATE TABLE IF NOT EXISTS {table} (")),
                "{table}"
            );
        }
        assert_eq!(SCHEMA.matches("CREATE TABLE").count(), TABLES.len());
        for (table, trigger) in OWN_TRIGGERS {
            assert!(
                TRIGGERS.contains(&format!("DROP TRIGGER IF EXISTS {trigger} ON {table};")),
                "{trigger}"
            );
        }
        assert_eq!(
            TRIGGERS.matches("TRIGGER toolward_").count(),
            OWN_TRIGGERS.len()
        );
    }

    #[test]
    fn a_name_with_an_escaped_character_becomes_a_unicode_identifier_that_prints_safely() {
        assert_eq!(sql_identifier("plain", "plain"), "plain");
        assert_eq!(sql_identifier("Mixed", "\"Mixed\""), "\"Mixed\"");
        assert_eq!(
            sql_identifier("a\u{1b}[2K\"b\\\u{E0041}", "ignored"),
            "U&\"a\\001B[2K\"\"b\\\\\\+0E0041\""
        );
        let drift = Drift {
            table: String::from("toolward_audit"),
            what: format!("trigger {}", shown("x\u{202E}y`z")),
            fix: String::from("DROP TRIGGER x ON toolward_audit;"),
        };
        assert_eq!(
            drift.to_string(),
            "toolward_audit: trigger `x\\u{202E}y'z`: DROP TRIGGER x ON toolward_audit;"
        );
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
            "PostgreSQL store `postgres://db.internal:5433/fleet`: holds schema version 1, and this toolward needs version 7: run `toolward store migrate --config gw.json` as the role that owns the tables (docs/fleet.md)"
        );
    }
}
