//! The store's backends: where the approvals queue and the `requestState` ledger live, in the
//! state folder (the embedded default, what a single operator and `scripts/demo.sh` run) or
//! in PostgreSQL for a fleet ([`postgres`]). They sit above [`crate::approval`] and
//! [`crate::audit`], whose records and queue they keep; the state folder itself
//! ([`crate::state_dir`]), the database connection ([`crate::database`]), the audit store's
//! interface ([`crate::audit::AuditStore`]) and the fact counters ([`crate::facts`]) are on
//! lower floors.

pub mod approvals;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod request_states;

pub use crate::audit::AuditStore;
pub use crate::state_dir::{
    Key, StateDir, StateError, check_private, open_private_in, replace_private_in,
};
pub use approvals::{ApprovalStore, NoApprovals, StateDirApprovals};
pub use request_states::{
    LedgerError, LedgerFuture, MemoryLedger, Redemption, RequestStateLedger, StateDirLedger,
};
