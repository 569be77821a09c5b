//! toolward puts the tools of third-party MCP servers behind an operator's policy.
//!
//! The data flow, one module per step:
//! config ─► transport ─► listing ─► pin (manifest) ─► load (rules component, schema
//! narrowing, hint check) ─► registry; each call ─► call (validation, policy component,
//! approval) ─► forward ─► result cap ─► client; every step ─► audit. After the load,
//! supervise watches each server (restart with backoff, pins checked again).
#![deny(missing_docs)]

pub mod approval;
pub mod audit;
pub mod call;
pub mod canonical;
pub mod cedar;
pub mod client_config;
pub mod component;
pub mod config;
pub mod confine;
pub mod gateway;
pub mod init;
pub mod listen;
pub mod listing;
pub mod load;
pub mod manifest;
pub mod pin;
pub mod policy_test;
pub mod registry;
pub mod schema;
pub mod start;
pub mod store;
pub mod supervise;
pub mod telemetry;
pub mod text;
pub mod transport;

pub use start::Toolward;

/// Paths of the guest components built by `host/build.rs`: the default policy component
/// (also embedded as [`component::DEFAULT_COMPONENT`]) and the test fixtures.
pub mod guests {
    include!(concat!(env!("OUT_DIR"), "/guests.rs"));
}
