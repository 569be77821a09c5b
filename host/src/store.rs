//! Where toolward keeps what outlives a process: the state folder (the embedded default, what
//! a single operator and `scripts/demo.sh` run).
//!
//! Everything toolward trusts in the state folder (the approvals queue, the compiled-component
//! cache, the listen token, keys, the audit head) is reached through one [`StateDir`], opened
//! once: a `cap_std::fs::Dir`, so no path component and no symlink inside it leads outside.
//! Owner and mode are checked on the way in ([`StateDir::open`], [`StateDir::subdir`],
//! [`check_private`]); what toolward creates is `0700` (folders) or `0600` (files).
//!
//! The fact counters ([`facts`]) live behind the [`facts::FactStore`] interface, with the
//! state folder's implementation in [`facts::state_dir`].

pub mod approvals;
pub mod audit;
pub mod facts;
pub mod postgres;
pub mod request_states;
pub mod state_dir;

pub use approvals::{ApprovalStore, StateDirApprovals};
pub use audit::AuditStore;
pub use request_states::{
    LedgerError, LedgerFuture, Redemption, RequestStateLedger, StateDirLedger,
};
pub use state_dir::{
    Key, StateDir, StateError, check_private, open_private_in, replace_private_in,
};
