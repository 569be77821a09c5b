//! toolward puts the tools of third-party MCP servers behind an operator's policy.
//!
//! The data flow, one module per step:
//! config ─► transport ─► listing ─► pin (manifest) ─► load (rules component, schema
//! narrowing, hint check) ─► registry; each call ─► call (validation, policy component,
//! approval) ─► forward ─► result cap ─► client; every step ─► audit. After the load,
//! supervise watches each server (restart with backoff, pins checked again).
//!
//! # Embedding from values
//!
//! [`Toolward::start`] starts what a config file names, as `toolward serve` does.
//! [`Toolward::builder`] starts a toolward from values instead ([`ToolwardBuilder`]): the
//! servers as `mcpServers` entries, the rules text, policy components, policy settings and
//! Cedar text as bytes, the [`Manifest`] [`pin()`] returned, and an [`AuditStore`] of the
//! embedder's. Without [`ToolwardBuilder::state_dir`] and [`ToolwardBuilder::servers_dir`]
//! it writes no file: no state folder, audit log, manifest file, counters or servers' homes
//! (the audit records go to the store given, or stream from [`Toolward::audit_events`]).
//!
//! # rmcp both ways
//!
//! With the `gateway` feature, a runtime that speaks MCP through rmcp uses toolward on both
//! sides of it, in its own process:
//!
//! - **As its client's server**: [`Toolward::serve_in_process`] returns one end of an
//!   in-process duplex stream; the runtime calls rmcp's own `serve` on it (`().serve(stream)`
//!   or its own `ClientHandler`) and keeps its own `Peer<RoleClient>`. toolward serves the
//!   other end as `toolward serve` does (the same policy, approvals and audit), asking the
//!   runtime's [`Approver`] about every held call.
//! - **In front of its own servers**: [`ToolwardBuilder::server_transport`] takes an rmcp
//!   client-role transport (one end of a duplex whose other end the runtime's rmcp
//!   `ServerHandler` serves, say) beside the servers toolward starts; its tools pass the
//!   same pin, load, policy and audit. A handed-in server cannot be confined (toolward
//!   starts nothing: it runs with the runtime's authority, as the load report says) and
//!   cannot be restarted.
//! - **Types**: a [`RegisteredTool`] converts to rmcp's `Tool` and a [`CallResult`] to
//!   rmcp's `CallToolResult` (`From`), the conversions the gateway answers with; [`rmcp`] is
//!   re-exported, so the runtime names the same version.
//!
//! `examples/rmcp_agent.rs` is a small agent loop built this way, writing no file.
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
//! | 0 | text, ids, canonical, merkle, http_server | escaping for a terminal or log; ULIDs and the clock; exact JSON; RFC 6962 Merkle trees and their proofs; the accept loop of the HTTP servers |
//! | 1 | identity, schema | principals and answerers; `inputSchema` checks, narrowing, validators |
//! | 2 | state_dir | the state folder |
//! | 3 | database, component | the PostgreSQL connection; wasmtime hosting policy components |
//! | 4 | audit, facts, labels, review | the audit chain and its store interface; fact counters; sessions' labels; a result as a review sees it, and redactions applied |
//! | 5 | config, approval, checkpoint | the operator's config; held calls and answers; signed checkpoints of the audit log |
//! | 6 | confine, manifest, store, client_config, policy_test, telemetry, oauth, oci | server confinement; pins; the store's backends; MCP clients' config files; `policy test`; OTLP; signing in to HTTP servers (OAuth 2.1); components, policy settings and Cedar text from OCI registries and their cosign signatures |
//! | 7 | transport | the MCP client to a server, started confined |
//! | 8 | listing, registry | `tools/list`; the tools as the model sees them |
//! | 9 | pin, call, cedar | pinning a server's tools; the call path; Cedar policies |
//! | 10 | load, gateway, supervise | the load; the MCP server side; restarts |
//! | 11 | start, listen, init, gateways | the embedder's entry; `serve --listen`; `init`; the state each gateway publishes for the console |
//! | 12 | console | `toolward console`: held calls and the audit in a browser |
//!
//! The command line (`main.rs`, `cli`) is above every floor and reaches the library only
//! through `toolward::`.
//!
//! # Cargo features
//!
//! All on by default (the `toolward` binary and this workspace's tests build with them); an
//! embedder that sets `default-features = false` compiles the core (config, pin, load, the
//! call path with its policy components, approvals, the audit chain, stdio servers) and
//! adds what it uses. A config that names what a build leaves out is refused, naming the
//! feature, or for confinement the load report says the server runs unconfined.
//!
//! | feature | gates | dependencies |
//! |---|---|---|
//! | `gateway` | the MCP server side (`gateway`), and the state each gateway publishes for the console (`gateways`); rmcp both ways: an in-process connection for a runtime's rmcp client (`Toolward::serve_in_process`), servers handed in as rmcp transports (`ToolwardBuilder::server_transport`), tools and results as rmcp's types, and rmcp itself re-exported (`toolward::rmcp`) | rmcp, tokio-util |
//! | `listen` | `serve --listen` (`listen`); needs `gateway` | hyper, hyper-util, http-body-util, tower-service |
//! | `console` | `toolward console`, the web console over the state folder, and its notifications of held calls (`console`); needs `listen` and `http-upstream` | minijinja (templates only, autoescaping), form_urlencoded |
//! | `listen-oauth` | `listen.oauth`, the listener as an OAuth 2.1 resource server (`listen::oauth`); needs `listen` and `http-upstream` | jsonwebtoken (no crypto feature: its signatures are checked with ring, which rustls already brings) |
//! | `postgres` | the fleet's store, `store.postgres` (`database`, `store::postgres`) | tokio-postgres, deadpool-postgres, tokio-postgres-rustls, rustls, webpki-roots |
//! | `otel` | OTLP export of traces and metrics, the `telemetry` section, or traces and metrics through a runtime's own providers (`ToolwardBuilder::otel_providers`) (`telemetry`; without it, a tracer that records nothing) | opentelemetry, opentelemetry_sdk, opentelemetry-otlp |
//! | `cedar` | the built-in Cedar component, `policy.cedar` (`cedar`; `host/guests/cedar.wasm` is embedded only with it) | none |
//! | `confine` | Landlock for stdio servers, and `confine_main` (without it servers start unconfined, as the load report says) | landlock |
//! | `http-upstream` | servers over streamable HTTP, `"type": "http"` (`transport::http`), and signing in to them with OAuth 2.1 (`oauth`, `toolward auth`) | reqwest, oauth2, chacha20poly1305, rustls-webpki (the check of a `ca_file`'s certificates) |
//! | `wasi` | WASI 0.2, granting nothing, for components that import it (Python, JavaScript) | wasmtime-wasi |
//! | `checkpoints` | signed checkpoints of the audit log, `audit.checkpoint` (`checkpoint`; the Merkle tree itself, `merkle`, is always built) | ed25519-dalek (`std`, `zeroize`, `fast`: no `rand_core`, keys are made from `getrandom` bytes) |
//! | `oci` | rules and policy components, policy settings and Cedar policy text from OCI registries by digest, `oci://` in `rules.component`, `policy.component`, `policy.settings` and `policy.cedar`, their cosign signatures checked with `oci.keys` (`oci`) | oci-client and reqwest (the one it rides, for manifests read with a bound; rustls as above, no second TLS stack), p256 (`ecdsa`, `pem`, `pkcs8`) |
//! | `cli` | `cli_main` and the modules only the command line uses (`cli`, `init`, `client_config`, `policy_test`); needs `gateway`, `listen`, `listen-oauth`, `postgres`, `cedar`, `console`, `checkpoints`, `oci` | clap, toml_edit, jsonc-parser, tracing-subscriber |
#![deny(missing_docs)]
#![deny(rustdoc::broken_intra_doc_links)]
// Without `internals`, what only this workspace's tests reach (and the old paths kept for
// them) is unused from the public surface.
#![cfg_attr(not(feature = "internals"), allow(dead_code, unused_imports))]

// The modules are private: an embedder uses what is re-exported below. The `internals`
// feature makes them public for this workspace's own tests and benchmarks only (not a
// stable interface, never on by default). The command line is a private module too, behind
// one entry point ([`cli_main`]).
macro_rules! modules {
    ($($(#[$attr:meta])* $name:ident),* $(,)?) => {
        $(
            $(#[$attr])*
            #[cfg(feature = "internals")]
            pub mod $name;
            $(#[$attr])*
            #[cfg(not(feature = "internals"))]
            mod $name;
        )*
    };
}

// A module gated by a Cargo feature is named with its `cfg` (see "Cargo features" above).
modules!(
    approval,
    audit,
    call,
    canonical,
    #[cfg(feature = "cedar")]
    cedar,
    #[cfg(feature = "checkpoints")]
    checkpoint,
    #[cfg(feature = "cli")]
    client_config,
    component,
    config,
    confine,
    #[cfg(feature = "console")]
    console,
    #[cfg(feature = "postgres")]
    database,
    facts,
    #[cfg(feature = "gateway")]
    gateway,
    #[cfg(feature = "gateway")]
    gateways,
    #[cfg(feature = "listen")]
    http_server,
    identity,
    ids,
    #[cfg(feature = "cli")]
    init,
    labels,
    #[cfg(feature = "listen")]
    listen,
    listing,
    load,
    manifest,
    merkle,
    #[cfg(feature = "http-upstream")]
    oauth,
    #[cfg(feature = "oci")]
    oci,
    pin,
    #[cfg(feature = "cli")]
    policy_test,
    registry,
    review,
    schema,
    start,
    state_dir,
    store,
    supervise,
    #[cfg(feature = "otel")]
    telemetry,
    // Without OTLP, calls are traced by nothing: the same interface, doing nothing.
    #[cfg(not(feature = "otel"))]
    #[path = "telemetry/off.rs"]
    telemetry,
    text,
    transport,
);

#[cfg(feature = "cli")]
mod cli;

// The public surface: what a runtime that embeds toolward starts, configures, calls,
// answers and reads back. `host/public-api.txt` lists it; CI compares.

// Starting, listing and calling.
pub use call::{
    CALL_SPAN, CallContext, CallError, CallOutcome, CallPath, CallResult, CallSettings,
    ServerCallLimits,
};
pub use load::{
    ConfinementReport, HintOverride, IdentityReport, LoadReport, Refusal, RegisteredReport,
    ServerReport, Unclassified,
};
pub use registry::RegisteredTool;
pub use start::{StartFailure, Toolward, ToolwardBuilder};

// Text a server or a caller wrote, made safe to show the one way toolward shows it (the rule
// is `text`'s): for an embedder's own messages, so a binding (the Python package) writes no
// second, narrower escape of its own.
pub use text::{error_chain, escape};

// The operator's configuration.
pub use config::{
    AuditConfig, CaBundle, CheckpointConfig, ComponentSource, Config, ConfigError, ConfineConfig,
    HandedTransport, IntrospectionConfig, Limits, ListenConfig, ListenOAuthConfig, OAuthConfig,
    OAuthGrant, OciConfig, OciReference, PolicyConfig, PolicySource, RulesConfig, ServerConfig,
    ServerConfine, ServerTransport, StoreConfig, TelemetryConfig, TextSource,
};

// rmcp, the MCP SDK the gateway is built on, whose types tools and results convert to:
// re-exported so a runtime names the same version.
#[cfg(feature = "gateway")]
pub use rmcp;

// Pinning: the manifest of reviewed tools.
pub use manifest::{Manifest, ManifestDiff, ManifestError};
pub use pin::{PinError, PinOutcome, pin};

// Approvals: who is asked about a held call, and who answered.
pub use approval::{
    Answer, ApprovalAnswer, ApprovalRequest, Approver, DenyAll, FnApprover, QueueApprover,
};
pub use identity::{
    AnsweredBy, ApproverRule, Approvers, Channel, HeldCall, Principal, PrincipalAttributes,
};
pub use store::ApprovalStore;

// The audit chain: its records, where they go, and checking it.
pub use audit::{
    AUDIT_EVENTS_CAPACITY, AuditChain, AuditDecision, AuditError, AuditEvent, AuditHead, AuditKind,
    AuditLog, AuditRecord, AuditStore, AuditSync, ChainBreak, ComponentHashes, GENESIS_PREV,
    MemoryAudit, VerifyReport, verify, verify_with_head,
};
pub use state_dir::StateDir;

// Signed checkpoints of the audit log (`audit.checkpoint`): why one cannot be signed or
// verified.
#[cfg(feature = "checkpoints")]
pub use checkpoint::CheckpointError;

// Components, settings and Cedar text from OCI registries (`oci://` in `policy.component`,
// `policy.settings`, `policy.cedar`): why one is refused.
#[cfg(feature = "oci")]
pub use oci::OciError;

// Policy components: the effects and annotations a decision sees, and the bounds on guests.
pub use component::{Annotations, GuestLimits};

// Sessions' labels (what a session has seen, docs/results.md) and where they are kept.
pub use labels::{
    LabelError, LabelFuture, LabelKey, LabelSettings, LabelStore, Labels, MemoryLabels,
};

/// Runs the `toolward` command line with this process's arguments (the binary's `main`).
#[cfg(feature = "cli")]
pub fn cli_main() -> std::process::ExitCode {
    cli::main()
}

/// Makes an embedder's own binary the launcher of its confined servers: call it first in
/// `main`, before anything starts a thread (the async runtime included), and return its exit
/// code when it gives one.
///
/// toolward starts each confined stdio server through a launcher: a program that restricts
/// itself with Landlock and then `exec`s the server. The launcher is the running program when
/// it answers the launcher's arguments, which the `toolward` binary does and an embedder's
/// binary does once its `main` begins with this. When the process was started as the launcher
/// (its first argument is the hidden `__confine`), this confines and `exec`s the server, or
/// answers the probe, and returns the exit code (it returns only when the server could not be
/// started: 126). Otherwise it notes that the running program is its own launcher and
/// returns `None`, and `main` goes on.
///
/// Without it, an embedder names a `toolward` binary as the launcher (`confine.launcher`, or
/// the `TOOLWARD_BIN` variable), or its servers start unconfined, which the load report says.
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     if let Some(code) = toolward::confine_main() {
///         return code;
///     }
///     // ... build the async runtime, then `toolward::Toolward::start(config)` ...
///     std::process::ExitCode::SUCCESS
/// }
/// ```
#[cfg(feature = "confine")]
pub fn confine_main() -> Option<std::process::ExitCode> {
    confine::launcher_entry()
}

/// Paths of the guest components `host/build.rs` builds from source with `internals`: the
/// built-in components (to compare with `host/guests/`) and the test fixtures.
#[cfg(feature = "internals")]
pub mod guests {
    include!(concat!(env!("OUT_DIR"), "/guests.rs"));
}

#[cfg(test)]
mod floors;
#[cfg(test)]
mod tls_fixture;
