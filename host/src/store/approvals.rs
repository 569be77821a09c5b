//! The approvals store: where a held call waits for a person's answer, and where
//! `toolward approvals list|approve|deny` find it. Two implementations: the state folder's
//! queue ([`StateDirApprovals`], MAC'd files, every process on the machine) and PostgreSQL
//! ([`crate::store::postgres::PgApprovals`], every gateway on the database).
//!
//! # Contract
//!
//! Checked by the contract suite (`tests/all/store_contract.rs`) against both:
//!
//! - a call held through [`ApprovalStore::approver`] is listed by [`ApprovalStore::list`]
//!   of any store on the same folder or database, while it waits;
//! - the first answer wins: a second [`ApprovalStore::answer`] fails, naming the call;
//! - the waiting approver returns the answer with who gave it ([`AnsweredBy`]);
//! - a call no longer waiting (timed out, cancelled) cannot be answered.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use crate::approval::{
    AnsweredBy, ApprovalError, ApprovalRequest, Approver, PendingEntry, QueueApprover,
};
use crate::audit::AuditStore;
use crate::identity::Approvers;
#[cfg(feature = "postgres")]
use crate::database::PgError;

/// A future of the approvals store.
pub type StoreFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, ApprovalStoreError>> + Send + 'a>>;

/// Errors of an approvals store.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalStoreError {
    /// The state folder's queue refused.
    #[error(transparent)]
    Queue(#[from] ApprovalError),
    /// The PostgreSQL store refused or could not be reached.
    #[error(transparent)]
    #[cfg(feature = "postgres")]
    Postgres(#[from] PgError),
    /// No call of this id is held in the store.
    #[error("no call `{call_id}` is waiting for an approval in {store}")]
    NotPending {
        /// The call id.
        call_id: String,
        /// The store.
        store: String,
    },
    /// The call was answered already (by the named answerer): the first answer is final.
    #[error("call `{call_id}` was {state} already in {store}; the first answer is final")]
    AlreadyAnswered {
        /// The call id.
        call_id: String,
        /// `approved`, `denied`, or `abandoned` (the gateway that held it gave up).
        state: String,
        /// The store.
        store: String,
    },
    /// The call's approval timeout passed, or the gateway holding it ended.
    #[error(
        "call `{call_id}` is not waiting any more in {store}: its approval timeout passed or the gateway that held it ended, so it was never forwarded"
    )]
    Expired {
        /// The call id.
        call_id: String,
        /// The store.
        store: String,
    },
}

/// Where held calls wait and are answered.
pub trait ApprovalStore: Send + Sync + fmt::Debug {
    /// The store as messages name it.
    fn name(&self) -> String;

    /// The approver a gateway asks through when the client cannot be asked itself
    /// (elicitation); `audit` takes the records the store's own checks write (forged answers
    /// in the state folder).
    fn approver(&self, audit: Option<Arc<dyn AuditStore>>) -> Arc<dyn Approver>;

    /// Every held call, oldest first, each with whether it still waits and what is wrong
    /// with it.
    ///
    /// # Errors
    ///
    /// `ApprovalStoreError` naming the store when it cannot be read.
    fn list(&self) -> StoreFuture<'_, Vec<PendingEntry>>;

    /// Answers the held call `call_id` as the operating-system user running this process:
    /// approve, or deny with `reason`. The first answer wins.
    ///
    /// # Errors
    ///
    /// `ApprovalStoreError::NotPending`, `ApprovalStoreError::AlreadyAnswered`,
    /// `ApprovalStoreError::Expired` (or the state folder's `ApprovalError` equivalents),
    /// or the store's own error.
    fn answer<'a>(
        &'a self,
        call_id: &'a str,
        approve: bool,
        reason: Option<String>,
        approvers: &'a Approvers,
    ) -> StoreFuture<'a, AnsweredBy>;

    /// Takes the calls whose holder ended out of the queue, returning them (at start, to be
    /// recorded as refused).
    ///
    /// # Errors
    ///
    /// As [`list`](Self::list).
    fn abandon_ended(&self) -> StoreFuture<'_, Vec<ApprovalRequest>>;
}

/// The state folder's queue (today's behaviour: [`crate::approval`]).
#[derive(Debug, Clone)]
pub struct StateDirApprovals {
    state_dir: PathBuf,
}

impl StateDirApprovals {
    /// The queue under `state_dir`.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
        }
    }
}

impl ApprovalStore for StateDirApprovals {
    fn name(&self) -> String {
        format!("approvals queue in `{}`", self.state_dir.display())
    }

    fn approver(&self, audit: Option<Arc<dyn AuditStore>>) -> Arc<dyn Approver> {
        Arc::new(QueueApprover::new(self.state_dir.clone()).with_audit(audit))
    }

    fn list(&self) -> StoreFuture<'_, Vec<PendingEntry>> {
        Box::pin(async move { Ok(crate::approval::list_queue(&self.state_dir)?) })
    }

    fn answer<'a>(
        &'a self,
        call_id: &'a str,
        approve: bool,
        reason: Option<String>,
        approvers: &'a Approvers,
    ) -> StoreFuture<'a, AnsweredBy> {
        Box::pin(async move {
            Ok(crate::approval::answer(
                &self.state_dir,
                call_id,
                approve,
                reason,
                approvers,
            )?)
        })
    }

    fn abandon_ended(&self) -> StoreFuture<'_, Vec<ApprovalRequest>> {
        Box::pin(async move { Ok(crate::approval::abandon_pending(&self.state_dir)?) })
    }
}

/// No queue: for a toolward started without a state folder
/// ([`crate::config::StoreConfig::Memory`]). A held call is asked only of the approver its
/// call names; nothing waits here, so the gateway's fallback approver refuses
/// ([`crate::approval::DenyAll`]), the list is empty and no call can be answered here.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoApprovals;

impl ApprovalStore for NoApprovals {
    fn name(&self) -> String {
        "no approvals queue (no state folder)".to_owned()
    }

    fn approver(&self, _audit: Option<Arc<dyn AuditStore>>) -> Arc<dyn Approver> {
        Arc::new(crate::approval::DenyAll)
    }

    fn list(&self) -> StoreFuture<'_, Vec<PendingEntry>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    fn answer<'a>(
        &'a self,
        call_id: &'a str,
        _approve: bool,
        _reason: Option<String>,
        _approvers: &'a Approvers,
    ) -> StoreFuture<'a, AnsweredBy> {
        Box::pin(std::future::ready(Err(ApprovalStoreError::NotPending {
            call_id: call_id.to_owned(),
            store: self.name(),
        })))
    }

    fn abandon_ended(&self) -> StoreFuture<'_, Vec<ApprovalRequest>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }
}
