//! Where the console reads and answers: the state folder of one machine, or a fleet's
//! PostgreSQL database (`store.postgres`). Both give the pages the same things: the held
//! calls, an answer given as the signed-in user, the audit records that pass a filter, the
//! chain's state against its head, and the gateways' published states. The console's own
//! audit records (sign-ins, refusals) go to the state folder's log of the machine it runs
//! on, in a fleet too: the database's chain is the gateways' to append to, and a role that
//! may move its head can stop every call of the fleet (an outside attack did, with the
//! console's role, when it could).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::pages::ChainState;
use crate::approval::{AnsweredBy, ApprovalError, PendingEntry};
use crate::audit::read::{Filter, utc};
use crate::audit::{AuditEvent, AuditRecord, read_head, verify, verify_with_head};
use crate::gateways::Published;
use crate::identity::Approvers;
use crate::state_dir::StateDir;

/// The console's store.
pub(crate) enum Store {
    /// One machine's state folder and audit log.
    Folder {
        /// The state folder: its queue, its audit head, its gateways' states.
        state_dir: PathBuf,
        /// The audit log (`audit.file`).
        audit_file: PathBuf,
    },
    /// A fleet's database.
    #[cfg(feature = "postgres")]
    Database(Box<Database>),
}

/// A fleet's database, opened once when the console starts.
#[cfg(feature = "postgres")]
pub(crate) struct Database {
    store: crate::store::postgres::PgStore,
    approvals: crate::store::postgres::PgApprovals,
    gateways: crate::store::postgres::PgGateways,
    /// The console machine's state folder and log, where the console's own records go.
    state_dir: PathBuf,
    audit_file: PathBuf,
}

#[cfg(feature = "postgres")]
impl Database {
    /// Opens `store`'s queue, chain and gateways' table; each checks the schema version.
    ///
    /// # Errors
    /// The database's error, as text naming the store.
    pub(crate) async fn open(
        store: crate::store::postgres::PgStore,
        state_dir: PathBuf,
        audit_file: PathBuf,
    ) -> Result<Database, String> {
        let error = |e: crate::database::PgError| crate::text::error_chain(&e);
        // No call is held here: the approval timeout of a held call is its gateway's.
        let approvals =
            crate::store::postgres::PgApprovals::new(&store, std::time::Duration::ZERO)
                .map_err(error)?;
        approvals.check_schema().await.map_err(error)?;
        let gateways = crate::store::postgres::PgGateways::open(&store)
            .await
            .map_err(error)?;
        Ok(Database {
            store,
            approvals,
            gateways,
            state_dir,
            audit_file,
        })
    }

    /// The whole chain, checked from its first record, and its head row, in one snapshot.
    async fn read_chain(
        &self,
    ) -> Result<crate::store::postgres::audit::ReadRecords, crate::database::PgError> {
        crate::store::postgres::audit::Reader::open(&self.store)
            .await?
            .read_new()
            .await
    }
}

/// Why an answer was not given, as the page says it.
pub(crate) enum AnswerRefused {
    /// Answered already, no longer held, or its wait ended: 409.
    Conflict(String),
    /// Not a call id: 400.
    BadRequest(String),
    /// The signed-in user may not answer it: 403, recorded with `reason`.
    NotAnApprover {
        /// The message.
        message: String,
        /// Why, for the audit record.
        reason: String,
    },
    /// The store failed: 500.
    Failed(String),
}

impl AnswerRefused {
    fn of_queue(error: &ApprovalError) -> AnswerRefused {
        let message = crate::text::error_chain(error);
        match error {
            ApprovalError::AlreadyAnswered { .. }
            | ApprovalError::NotPending { .. }
            | ApprovalError::Abandoned { .. } => AnswerRefused::Conflict(message),
            ApprovalError::InvalidCallId { .. } => AnswerRefused::BadRequest(message),
            ApprovalError::NotAnApprover { reason, .. } => AnswerRefused::NotAnApprover {
                message,
                reason: reason.clone(),
            },
            _ => AnswerRefused::Failed(message),
        }
    }
}

/// The audit records a filter kept: each with its JSON, oldest first, and how many records
/// were read.
pub(crate) struct Matched {
    pub(crate) records: Vec<(AuditRecord, Value)>,
    pub(crate) read: u64,
}

impl Store {
    /// Every held call, oldest first.
    pub(crate) async fn held(&self) -> Result<Vec<PendingEntry>, String> {
        match self {
            Store::Folder { state_dir, .. } => {
                let state_dir = state_dir.clone();
                tokio::task::spawn_blocking(move || crate::approval::list_queue(&state_dir))
                    .await
                    .map_err(|_| String::from("the approvals queue could not be read"))?
                    .map_err(|e| crate::text::error_chain(&e))
            }
            #[cfg(feature = "postgres")]
            Store::Database(db) => crate::store::ApprovalStore::list(&db.approvals)
                .await
                .map_err(|e| crate::text::error_chain(&e)),
        }
    }

    /// Answers `call_id` as `by`, judged by `approvers`; the first answer of any channel wins.
    pub(crate) async fn answer(
        &self,
        call_id: &str,
        approve: bool,
        reason: Option<String>,
        by: AnsweredBy,
        approvers: &Approvers,
    ) -> Result<AnsweredBy, AnswerRefused> {
        match self {
            Store::Folder { state_dir, .. } => {
                let (state_dir, call, approvers) =
                    (state_dir.clone(), call_id.to_owned(), approvers.clone());
                tokio::task::spawn_blocking(move || {
                    crate::approval::answer_as(&state_dir, &call, approve, reason, by, &approvers)
                })
                .await
                .map_err(|_| AnswerRefused::Failed(String::from("the answer could not be given")))?
                .map_err(|e| AnswerRefused::of_queue(&e))
            }
            #[cfg(feature = "postgres")]
            Store::Database(db) => {
                use crate::store::approvals::ApprovalStoreError;
                db.approvals
                    .answer_as(call_id, approve, reason, by, approvers)
                    .await
                    .map_err(|error| match &error {
                        ApprovalStoreError::Queue(queue) => AnswerRefused::of_queue(queue),
                        ApprovalStoreError::NotPending { .. }
                        | ApprovalStoreError::AlreadyAnswered { .. }
                        | ApprovalStoreError::Expired { .. } => {
                            AnswerRefused::Conflict(crate::text::error_chain(&error))
                        }
                        _ => AnswerRefused::Failed(crate::text::error_chain(&error)),
                    })
            }
        }
    }

    /// The audit records that pass `filter`; `None` when there is no log yet.
    pub(crate) async fn audit(&self, filter: Filter) -> Result<Option<Matched>, String> {
        match self {
            Store::Folder { audit_file, .. } => {
                let audit_file = audit_file.clone();
                tokio::task::spawn_blocking(move || {
                    if !audit_file.exists() {
                        return Ok(None);
                    }
                    crate::audit::read::show(&audit_file, &filter)
                        .map(|shown| {
                            Some(Matched {
                                records: shown.records,
                                read: shown.read,
                            })
                        })
                        .map_err(|e| format!("the audit log cannot be read: {e}"))
                })
                .await
                .map_err(|_| String::from("the audit log could not be read"))?
            }
            #[cfg(feature = "postgres")]
            Store::Database(db) => {
                let read = db.read_chain().await.map_err(|e| {
                    format!("the audit chain cannot be read: {}", crate::text::error_chain(&e))
                })?;
                let total = read.records.len() as u64;
                Ok(Some(Matched {
                    records: read
                        .records
                        .into_iter()
                        .filter(|(record, _)| filter.matches(record))
                        .collect(),
                    read: total,
                }))
            }
        }
    }

    /// The chain checked from its first record, and against its head.
    pub(crate) async fn check_chain(&self) -> ChainState {
        match self {
            Store::Folder {
                state_dir,
                audit_file,
            } => {
                let (state_dir, audit_file) = (state_dir.clone(), audit_file.clone());
                tokio::task::spawn_blocking(move || check_log(&state_dir, &audit_file))
                    .await
                    .unwrap_or_else(|_| checked(String::new(), Some(String::from("the check failed"))))
            }
            #[cfg(feature = "postgres")]
            Store::Database(db) => {
                match db.read_chain().await {
                    Err(error) => checked(
                        String::new(),
                        Some(format!(
                            "the database's chain cannot be read: {}",
                            crate::text::error_chain(&error)
                        )),
                    ),
                    Ok(read) => match (read.first_break, read.head_problem) {
                        (Some(brk), _) => checked(
                            String::new(),
                            Some(format!(
                                "chain broken at {brk}, after {} intact records",
                                read.records.len()
                            )),
                        ),
                        (None, Some(problem)) => checked(
                            String::new(),
                            Some(format!("the chain does not match its head row: {problem}")),
                        ),
                        (None, None) => checked(
                            format!(
                                "{} records chained, the last one matching the database's head row",
                                read.records.len()
                            ),
                            None,
                        ),
                    },
                }
            }
        }
    }

    /// Appends `event` to the console machine's own log (the state folder's).
    pub(crate) async fn record(&self, event: AuditEvent) -> Result<(), String> {
        let (state_dir, audit_file) = match self {
            Store::Folder {
                state_dir,
                audit_file,
            } => (state_dir.clone(), audit_file.clone()),
            #[cfg(feature = "postgres")]
            Store::Database(db) => (db.state_dir.clone(), db.audit_file.clone()),
        };
        tokio::task::spawn_blocking(move || {
            let state = StateDir::open(&state_dir).map_err(|e| e.to_string())?;
            let log = crate::audit::AuditLog::open_with_head(
                &audit_file,
                crate::audit::AuditSync::Always,
                &state,
            )
            .map_err(|e| e.to_string())?;
            crate::audit::AuditStore::append(&log, event)
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|_| String::from("the record could not be written"))?
    }

    /// The gateways' published states, newest first, and how many more were left unread.
    pub(crate) async fn gateways(&self) -> Result<(Vec<Published>, usize), String> {
        match self {
            Store::Folder { state_dir, .. } => {
                let state_dir = state_dir.clone();
                tokio::task::spawn_blocking(move || {
                    StateDir::open(&state_dir).and_then(|state| crate::gateways::read_all(&state))
                })
                .await
                .map_err(|_| String::from("the gateways' states could not be read"))?
                .map_err(|e| crate::text::error_chain(&e))
            }
            #[cfg(feature = "postgres")]
            Store::Database(db) => crate::gateways::read_database(&db.gateways)
                .await
                .map_err(|e| crate::text::error_chain(&e)),
        }
    }

    /// The latest signed checkpoint of each signer, as written (unverified: the console holds
    /// no gateway's public key), with who keeps it: `this machine` for the state folder's
    /// log, or a gateway's database login for each row of `toolward_checkpoints`.
    pub(crate) async fn checkpoints(&self) -> Result<Vec<(String, String)>, String> {
        match self {
            Store::Folder {
                state_dir,
                audit_file,
            } => {
                let (state_dir, audit_file) = (state_dir.clone(), audit_file.clone());
                tokio::task::spawn_blocking(move || {
                    let state = StateDir::open(&state_dir).map_err(|e| crate::text::error_chain(&e))?;
                    let (note, _) = crate::checkpoint::read_latest(&state, &audit_file)
                        .map_err(|e| crate::text::error_chain(&e))?;
                    Ok(note
                        .map(|note| {
                            (
                                String::from("this machine"),
                                String::from_utf8_lossy(&note).into_owned(),
                            )
                        })
                        .into_iter()
                        .collect())
                })
                .await
                .map_err(|_| String::from("the audit checkpoints could not be read"))?
            }
            #[cfg(feature = "postgres")]
            Store::Database(db) => {
                crate::store::postgres::checkpoints::every_latest(&db.store)
                    .await
                    .map_err(|e| crate::text::error_chain(&e))
            }
        }
    }
}

/// A chain state checked now: `summary` when intact, else `problem`; both escaped.
fn checked(summary: String, problem: Option<String>) -> ChainState {
    ChainState {
        checked_at: utc(crate::ids::now_ms()),
        summary: crate::text::escape(&summary),
        problem: problem.map(|p| crate::text::escape(&p)),
    }
}

/// Checks the audit log `audit_file` and, when the state folder keeps one, against its head.
fn check_log(state_dir: &Path, audit_file: &Path) -> ChainState {
    if !audit_file.exists() {
        return checked(String::from("no audit log yet"), None);
    }
    let head = StateDir::open(state_dir)
        .map_err(|e| e.to_string())
        .and_then(|dir| read_head(&dir, audit_file).map_err(|e| e.to_string()));
    let result = match head {
        Err(error) => {
            return checked(String::new(), Some(format!("its head cannot be read: {error}")));
        }
        Ok((None, _)) => verify(audit_file).map(|report| (report, None, false)),
        Ok((Some(head), _)) => {
            verify_with_head(audit_file, &head).map(|(report, problem)| (report, problem, true))
        }
    };
    match result {
        Err(error) => checked(String::new(), Some(format!("the log cannot be read: {error}"))),
        Ok((report, _, _)) if report.first_break.is_some() => {
            let at = report
                .first_break
                .map(|brk| brk.to_string())
                .unwrap_or_default();
            checked(
                String::new(),
                Some(format!(
                    "chain broken at {at}, after {} intact records",
                    report.records
                )),
            )
        }
        Ok((_, Some(problem), _)) => checked(
            String::new(),
            Some(format!("the log does not match its head: {problem}")),
        ),
        Ok((report, None, with_head)) => checked(
            format!(
                "{} records chained{}",
                report.records,
                if with_head {
                    ", the last one matching the head kept in the state folder"
                } else {
                    " (no head kept yet)"
                }
            ),
            None,
        ),
    }
}
