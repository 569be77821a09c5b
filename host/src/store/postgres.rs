//! The PostgreSQL backends of a fleet's store, on the connection of [`crate::database`]:
//! one audit chain ([`PgAudit`]), one approvals queue ([`PgApprovals`]), the fact counters
//! ([`PgFacts`]), the `requestState` ledger ([`PgLedger`]) and sessions' labels
//! ([`PgLabels`]) across every gateway, and the gateways' published states
//! ([`PgGateways`]) for the console, and the gateways' signed checkpoints of the chain
//! ([`checkpoints`], with the `checkpoints` feature).

pub mod approvals;
pub mod audit;
#[cfg(feature = "checkpoints")]
pub mod checkpoints;
pub mod facts;
pub mod gateways;
pub mod labels;
pub mod request_states;

pub use crate::database::{
    CONNECT_TIMEOUT, Drift, GRANTS, MAX_CONNECTIONS, Migration, PgError, PgStore, REQUEST_STATE_KEY_NAME,
    ROLES, SCHEMA_VERSION, STATEMENT_TIMEOUT,
};
pub use approvals::PgApprovals;
pub use audit::PgAudit;
pub use facts::PgFacts;
pub use gateways::PgGateways;
pub use labels::PgLabels;
pub use request_states::PgLedger;
