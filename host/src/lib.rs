//! toolward puts the tools of third-party MCP servers behind an operator's policy.
//!
//! The data flow, one module per step:
//! config ─► transport ─► listing ─► pin (manifest) ─► load (rules component, schema
//! narrowing, hint check) ─► registry; each call ─► call (validation, policy component,
//! approval) ─► forward ─► result cap ─► client; every step ─► audit. After the load,
//! supervise watches each server (restart with backoff, pins checked again).
//!
//! # Floors
//!
//! Each module imports only from modules on lower floors (a module's own submodules
//! aside), so no two modules import each other, however indirectly. A helper used on two
//! floors lives on the lower one; a type lives with the concept that owns it, and `config`
//! reads the operator's file into the settings types of the modules below it. The table is
//! checked against the imports by a test (`floors::every_module_imports_only_from_lower_floors`).
//!
//! | floor | modules | what they are |
//! |---|---|---|
//! | 0 | text, ids, canonical | escaping for a terminal or log; ULIDs and the clock; exact JSON |
//! | 1 | identity, schema | principals and answerers; `inputSchema` checks, narrowing, validators |
//! | 2 | state_dir, transport, telemetry | the state folder; the MCP client to a server; OTLP |
//! | 3 | database, component | the PostgreSQL connection; wasmtime hosting policy components |
//! | 4 | audit, facts, registry | the audit chain and its store interface; fact counters; the tools as the model sees them |
//! | 5 | config, approval, cedar | the operator's config; held calls and answers; Cedar policies |
//! | 6 | confine, listing, manifest, store, client_config, policy_test | server confinement; `tools/list`; pins; the store's backends; MCP clients' config files; `policy test` |
//! | 7 | pin, call | pinning a server's tools; the call path |
//! | 8 | load, gateway, supervise | the load; the MCP server side; restarts |
//! | 9 | start, listen, init | the embedder's entry; `serve --listen`; `init` |
//!
//! The command line (`main.rs`, `cli`) is above every floor and reaches the library only
//! through `toolward::`.
#![deny(missing_docs)]
#![deny(rustdoc::broken_intra_doc_links)]

pub mod approval;
pub mod audit;
pub mod call;
pub mod canonical;
pub mod cedar;
pub mod client_config;
pub mod component;
pub mod config;
pub mod confine;
pub mod database;
pub mod facts;
pub mod gateway;
pub mod identity;
pub mod ids;
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
pub mod state_dir;
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

#[cfg(test)]
mod floors;
