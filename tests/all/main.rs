//! toolward's integration tests: one test binary of many modules (as wasmtime does), so
//! that the suite links once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail the test by panicking"
)]

mod approvals;
mod call;
mod cedar;
mod checkpoint;
mod checkpoint_fleet;
mod cli_output;
mod component;
mod console;
mod console_oidc;
mod embed;
mod first_hour;
mod fleet;
mod fleet_roles;
mod gateway;
mod hostile;
mod http;
mod in_process;
mod js_policy;
mod listen;
mod load;
mod oauth;
mod oci;
mod pin;
mod policy_kit;
mod protocol;
mod python_policy;
mod real;
mod real_load;
mod restart;
mod state;
mod store_contract;
mod support;
mod telemetry;
