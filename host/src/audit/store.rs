//! The audit store: where the call path, the start and the approvals put their audit
//! records. Three implementations: the state folder's JSONL log ([`AuditLog`], one chain per
//! log file, every process on the machine sharing it), PostgreSQL
//! ([`crate::store::postgres::PgAudit`], one chain across every gateway on the database), and
//! records in memory ([`super::MemoryAudit`], a toolward started without a state folder,
//! streaming its records to subscribers). An embedder implements it for a store of its own
//! and gives it to [`crate::ToolwardBuilder::audit_store`]; [`super::AuditChain`] seals events
//! into chained records as the others do, so keeping the contract below is calling it under
//! the store's lock and keeping what it returns.
//!
//! # Contract
//!
//! Every implementation keeps these, checked by the contract suite
//! (`tests/all/store_contract.rs`) against both:
//!
//! - records form one hash chain: `seq` from 0 up by one, each `prev` the SHA-256 of the
//!   previous record's exact bytes, whoever wrote them;
//! - [`append_batch`](AuditStore::append_batch) returns only once its records are durable
//!   (synced to disk, or committed); on the call path an error refuses the call;
//! - a record's bytes are kept as hashed, and an export ([`AuditLog`]'s file, `toolward
//!   audit export`) is JSONL that `toolward audit verify FILE` accepts;
//! - [`head`](AuditStore::head) is never ahead of what is durable.

use std::fmt;

use super::{AuditError, AuditEvent, AuditHead, AuditLog, AuditSync, ComponentHashes};

/// Where audit records go. `Send + Sync`: shared behind an `Arc` by every call in flight.
pub trait AuditStore: Send + Sync + fmt::Debug {
    /// The store as messages name it: `` audit log `PATH` `` or
    /// `` PostgreSQL store `postgres://HOST:PORT/DB` ``.
    fn name(&self) -> String;

    /// Whether [`append_batch`](Self::append_batch) waits (for a sync, or for the database):
    /// the call path then calls it on a blocking thread, not on an async worker.
    fn waits(&self) -> bool;

    /// Whether a call with no other call in flight may call
    /// [`append_batch`](Self::append_batch) on its async worker: the store waits for its
    /// own disk only (never for a network or the async runtime), so blocking the worker costs
    /// less than the hop to a blocking thread and back. Defaults to `false`.
    fn syncs_inline(&self) -> bool {
        false
    }

    /// Sets the component hashes stamped on every later record whose `components` is `None`.
    fn set_components(&self, components: ComponentHashes);

    /// Appends `events` as consecutive records and returns the last one's `seq` (`None` for
    /// no events) once they are durable. Groups of calls in flight share one sync or one
    /// transaction (group commit).
    ///
    /// # Errors
    ///
    /// [`AuditError`] naming the store when the records could not be made durable; on the
    /// call path the call is then refused.
    fn append_batch(&self, events: Vec<AuditEvent>) -> Result<Option<u64>, AuditError>;

    /// Appends one record once it is durable, returning its `seq`.
    ///
    /// # Errors
    ///
    /// As [`append_batch`](Self::append_batch).
    fn append(&self, event: AuditEvent) -> Result<u64, AuditError> {
        self.append_batch(vec![event])
            .map(Option::unwrap_or_default)
    }

    /// Queues `events` without waiting for them to be durable: for records no action waits
    /// for (a result, a cancellation). Never blocks.
    ///
    /// # Errors
    ///
    /// [`AuditError`] when the store already refuses records; a later failure of this
    /// group is logged, since nobody waits for it.
    fn write(&self, events: Vec<AuditEvent>) -> Result<(), AuditError>;

    /// The chain's end as last made durable by this process, when known.
    fn head(&self) -> Option<AuditHead>;

    /// A stream of the records this store makes durable from now on, in `seq` order, when
    /// the store offers one ([`crate::Toolward::audit_events`]). Defaults to `None`.
    fn subscribe(&self) -> Option<tokio::sync::broadcast::Receiver<super::AuditRecord>> {
        None
    }
}

impl AuditStore for AuditLog {
    fn name(&self) -> String {
        format!("audit log `{}`", self.path().display())
    }

    fn waits(&self) -> bool {
        self.sync_mode() != AuditSync::None
    }

    fn syncs_inline(&self) -> bool {
        true
    }

    fn set_components(&self, components: ComponentHashes) {
        AuditLog::set_components(self, components);
    }

    fn append_batch(&self, events: Vec<AuditEvent>) -> Result<Option<u64>, AuditError> {
        AuditLog::append_batch(self, events)
    }

    fn append(&self, event: AuditEvent) -> Result<u64, AuditError> {
        AuditLog::append(self, event)
    }

    fn write(&self, events: Vec<AuditEvent>) -> Result<(), AuditError> {
        AuditLog::write(self, events)
    }

    fn head(&self) -> Option<AuditHead> {
        AuditLog::head(self)
    }

    fn subscribe(&self) -> Option<tokio::sync::broadcast::Receiver<super::AuditRecord>> {
        Some(AuditLog::subscribe(self))
    }
}
