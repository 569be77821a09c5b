//! Hosting policy components: one wasmtime [`Engine`], components compiled once and cached
//! on disk, purity checked, every guest call bounded, every failure a deny.
//!
//! The contract is the WIT package `toolward:policy` in `wit/`: version 0.1.0
//! (`wit/policy.wit`), 0.2.0 (`wit/v0.2.0/policy.wit`) and 0.3.0 (`wit/v0.3.0/policy.wit`),
//! all accepted. A component exports `rules@0.1.0` (classify tools), `policy` of any version
//! (decide calls), or both; a 0.2.0 or 0.3.0 `policy` names the policies that determined
//! each decision ([`PolicyAnswer::determined_by`]), and a component may export `validation`
//! to check its settings against the registered tools ([`Policy::validate`]). A 0.3.0
//! `policy` sees the session's labels and the principal's attributes in each call, and its
//! component may export `results@0.3.0` to review what a tool returned before the model
//! reads it ([`Policy::review`]).
//!
//! # Configured once, fresh per decision
//! `configure` runs once: the host instantiates the component (instrumented by
//! wasmtime's Wizer support), calls `configure` with the settings text, and snapshots the
//! configured instance into a new component whose memory image already holds the parsed
//! settings. Every decision then instantiates that snapshot afresh (pooling allocator,
//! copy-on-write memory images), so no state leaks from one call to the next and no
//! decision pays for parsing the settings.
//!
//! # Limits
//! Every guest call runs with fuel (an instruction budget) and a memory limit; see
//! [`GuestLimits`]. A trap, exhausted fuel, exhausted memory or a malformed answer makes
//! [`Policy::decide`] return [`Decision::Deny`] with a reason saying which: never an
//! error the caller could ignore, never an allow.

use std::fmt;
use std::path::PathBuf;

use wasmtime::{Store, Trap};

pub use toolward_policy_table::{Decision, Effect};

mod cache;
mod engine;
mod limits;
mod policy;
mod rules;
mod views;
pub mod wasi;

pub use cache::{CACHE_FOLDER, CACHE_KEY, ComponentCache, MAX_COMPILED_BYTES};
pub use engine::{ComponentHost, SlotReset};
pub use limits::{
    CORE_INSTANCES_PER_SLOT, DEFAULT_CLASSIFY_FUEL, DEFAULT_CONFIGURE_FUEL, DEFAULT_DECIDE_FUEL,
    DEFAULT_REVIEW_FUEL,
    DEFAULT_MAX_INSTANCES, DEFAULT_MAX_WASM_STACK, DEFAULT_MEMORY_BYTES, DEFAULT_READY_INSTANCES,
    GuestLimits, KEEP_RESIDENT_BYTES, MAX_DETERMINED_BY, READY_MIN_CORES, TABLE_KEEP_RESIDENT_BYTES,
    TABLES_PER_SLOT, default_ready_instances,
};
pub use policy::{LivePolicy, Policy, PolicyAnswer, ReadyStats, ReviewSettings};
pub use rules::{Classifier, Rules};
pub use views::{
    Annotations, BlockKind, BlockView, CallView, Classification, Labels, RegisteredToolView,
    ResultAction, ResultView, ReviewAnswer, Span, ToolView,
};

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "rules-and-policy",
        // Parameters of guest exports borrow (`call` and `tool` hold `&str`): lowering
        // copies them into the guest, so the host need not clone every string first.
        ownership: Borrowing {
            duplicate_if_necessary: false
        },
    });
}

use bindings::exports::toolward::policy::{policy as wit_policy, rules as wit_rules};
use bindings::toolward::policy::types as wit;

mod bindings_v2 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2.0",
        world: "validated-policy-component",
        ownership: Borrowing {
            duplicate_if_necessary: false
        },
    });
}

use bindings_v2::exports::toolward::policy::{
    facts as wit2_facts, policy as wit2_policy, validation as wit2_validation,
};
use bindings_v2::toolward::policy::types as wit2;

mod bindings_v3 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.3.0",
        world: "validated-reviewing-policy-component",
        ownership: Borrowing {
            duplicate_if_necessary: false
        },
    });
}

use bindings_v3::exports::toolward::policy0_3_0::{
    facts as wit3_facts, policy as wit3_policy, results as wit3_results,
    validation as wit3_validation,
};
use bindings_v3::toolward::policy0_3_0::types as wit3;

/// The default policy component (`guest-policy/`), prebuilt in `host/guests/policy.wasm`
/// and embedded in the library: it classifies from the operator's rules file and decides
/// from its table.
pub const DEFAULT_COMPONENT: &[u8] = include_bytes!("../guests/policy.wasm");

/// The default component built with its result reviews (`guest-policy/`, feature
/// `reviews`): what the load runs for rules that name `reviews` ([`built_in_for`]). Apart
/// from [`DEFAULT_COMPONENT`] because the reviews (the `regex` crate) make it eight times
/// larger, and every start validates and instruments the component it loads. Prebuilt in
/// `host/guests/policy-reviewing.wasm`.
pub const REVIEWING_COMPONENT: &[u8] = include_bytes!("../guests/policy-reviewing.wasm");

/// The built-in default component for a rules (or settings) text: [`REVIEWING_COMPONENT`]
/// when its top-level `reviews` names any review, else [`DEFAULT_COMPONENT`]. Text that is
/// not a JSON object gets [`DEFAULT_COMPONENT`], whose `configure` then reports the fault.
pub fn built_in_for(settings: &str) -> &'static [u8] {
    let names_reviews = serde_json::from_str::<serde_json::Value>(settings)
        .ok()
        .and_then(|value| value.get("reviews").map(|r| r.as_array().is_none_or(|r| !r.is_empty())))
        .unwrap_or(false);
    if names_reviews {
        REVIEWING_COMPONENT
    } else {
        DEFAULT_COMPONENT
    }
}

/// The built-in Cedar component (`guest-cedar/`), prebuilt in `host/guests/cedar.wasm` and
/// embedded in the library: it decides calls with the operator's Cedar policies (`policy.cedar` in the
/// config, `docs/cedar.md`), exporting `policy` and `validation` of `toolward:policy@0.2.0`.
#[cfg(feature = "cedar")]
pub const CEDAR_COMPONENT: &[u8] = include_bytes!("../guests/cedar.wasm");

/// The WIT package a component may import from; anything else is refused.
pub const WIT_PACKAGE: &str = "toolward:policy";
/// The exported interface that classifies tools.
pub const RULES_INTERFACE: &str = "toolward:policy/rules@0.1.0";
/// The exported interface that decides calls.
pub const POLICY_INTERFACE: &str = "toolward:policy/policy@0.1.0";
/// The exported interface that decides calls and names what determined each decision.
pub const POLICY_INTERFACE_V2: &str = "toolward:policy/policy@0.2.0";
/// The exported interface that checks a policy's settings against the registered tools.
pub const VALIDATION_INTERFACE: &str = "toolward:policy/validation@0.2.0";
/// The exported interface that says which facts the configured settings read.
pub const FACTS_INTERFACE: &str = "toolward:policy/facts@0.2.0";
/// The exported interface that decides calls that carry their session's labels.
pub const POLICY_INTERFACE_V3: &str = "toolward:policy/policy@0.3.0";
/// The exported interface that reviews results before the model reads them.
pub const RESULTS_INTERFACE: &str = "toolward:policy/results@0.3.0";
/// `validation` of `toolward:policy@0.3.0`.
pub const VALIDATION_INTERFACE_V3: &str = "toolward:policy/validation@0.3.0";
/// `facts` of `toolward:policy@0.3.0`.
pub const FACTS_INTERFACE_V3: &str = "toolward:policy/facts@0.3.0";
/// Errors of loading and configuring components. Decisions never return these: they deny.
#[derive(Debug, thiserror::Error)]
pub enum ComponentError {
    /// The engine could not be built from the configuration.
    #[error("cannot set up the WebAssembly engine: {0}")]
    Engine(String),
    /// The bytes are not a valid component.
    #[error("component `{origin}` is not a valid WebAssembly component: {reason}")]
    Invalid {
        /// Where the component came from (a path, or `built-in`).
        origin: String,
        /// What wasmtime said.
        reason: String,
    },
    /// The component imports something outside toolward's WIT: purity is checked.
    #[cfg_attr(
        feature = "wasi",
        error(
            "component `{origin}` imports `{import}`, which toolward does not provide: a policy component may import nothing but `toolward:policy` types and WASI 0.2 (`wasi:*@0.2.x`, which grants it nothing)"
        )
    )]
    #[cfg_attr(
        not(feature = "wasi"),
        error(
            "component `{origin}` imports `{import}`, which toolward does not provide: a policy component may import nothing but `toolward:policy` types (WASI 0.2 needs the `wasi` feature of the toolward crate, which this build leaves out)"
        )
    )]
    ForbiddenImport {
        /// Where the component came from.
        origin: String,
        /// The import's name.
        import: String,
    },
    /// The component does not export the interface asked for.
    #[error("component `{origin}` does not export `{interface}`")]
    MissingExport {
        /// Where the component came from.
        origin: String,
        /// The interface expected.
        interface: &'static str,
    },
    /// `configure` refused the settings; the message is the component's.
    #[error("component `{origin}` refused its settings: {message}")]
    Settings {
        /// Where the component came from.
        origin: String,
        /// The component's message (for the default component, the path of the fault).
        message: String,
    },
    /// `configure` trapped, ran out of fuel or memory, or the snapshot failed.
    #[error("component `{origin}` failed in `{step}`: {reason}")]
    Guest {
        /// Where the component came from.
        origin: String,
        /// The step that failed.
        step: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// The compiled-component cache's folder, key or an entry cannot be trusted (another
    /// owner, access for group or others, a symlink) or reached.
    #[error(transparent)]
    State(crate::state_dir::StateError),
    /// The compiled-component cache could not be used.
    #[error("compiled-component cache `{path}`: {reason}")]
    Cache {
        /// The cache path.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// The store data of a guest instance: its limiter, whether it hit the memory limit, and
/// for a component that imports WASI, its locked-down WASI state ([`wasi`]).
struct GuestState {
    memory_bytes: usize,
    memory_exhausted: bool,
    wasi: Option<Box<wasi::WasiState>>,
}

impl GuestState {
    /// The WASI state (made on first use: a component that imports no WASI never has one).
    fn wasi(&mut self) -> &mut wasi::WasiState {
        self.wasi
            .get_or_insert_with(|| Box::new(wasi::WasiState::locked_down()))
    }
}

#[cfg(feature = "wasi")]
impl wasmtime_wasi::WasiView for GuestState {
    fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
        wasmtime_wasi::WasiView::ctx(self.wasi())
    }
}

impl wasmtime::ResourceLimiter for GuestState {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.memory_exhausted = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// Where a compiled component may be cached, and whether it was found there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// No cache directory was configured.
    Disabled,
    /// Loaded from the cache.
    Hit,
    /// Compiled and written to the cache.
    Miss,
    /// A cache entry existed but was not used (no MAC, a wrong MAC, not loadable); it was
    /// compiled again and replaced.
    Replaced,
}

/// A checked, compiled component.
#[derive(Clone)]
pub struct LoadedComponent {
    origin: String,
    sha256: String,
    size_bytes: usize,
    exports: Vec<String>,
    imports: Vec<String>,
    /// Whether it imports WASI 0.2 (linked granting nothing, [`wasi`]).
    imports_wasi: bool,
    exports_rules: bool,
    exports_policy: bool,
    exports_policy_v2: bool,
    exports_policy_v3: bool,
    exports_results: bool,
    exports_validation: bool,
    cache: CacheOutcome,
    bytes: Vec<u8>,
}

impl fmt::Debug for LoadedComponent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedComponent")
            .field("origin", &self.origin)
            .field("sha256", &self.sha256)
            .field("exports", &self.exports)
            .finish_non_exhaustive()
    }
}

impl LoadedComponent {
    /// Where the component came from (a path, or `built-in`).
    pub fn origin(&self) -> &str {
        &self.origin
    }
    /// SHA-256 of the component's bytes, lowercase hex: in the load report and every
    /// audit record.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }
    /// Size of the component in bytes.
    pub fn size_bytes(&self) -> usize {
        self.size_bytes
    }
    /// The component's exports (interface names).
    pub fn exports(&self) -> &[String] {
        &self.exports
    }
    /// The component's imports (all within toolward's WIT, or it would not have loaded).
    pub fn imports(&self) -> &[String] {
        &self.imports
    }
    /// Whether it imports WASI 0.2 interfaces, which the host links granting nothing
    /// ([`wasi`]; what each import gets: [`wasi::grant_of`]).
    pub fn imports_wasi(&self) -> bool {
        self.imports_wasi
    }
    /// Whether it exports `rules`.
    pub fn exports_rules(&self) -> bool {
        self.exports_rules
    }
    /// Whether it exports `policy` (of either version).
    pub fn exports_policy(&self) -> bool {
        self.exports_policy
    }
    /// Whether its `policy` is `toolward:policy/policy@0.2.0` (decisions name the policies
    /// that determined them); a component exporting both versions is used as 0.2.0.
    pub fn exports_policy_v2(&self) -> bool {
        self.exports_policy_v2
    }
    /// Whether its `policy` is `toolward:policy/policy@0.3.0` (calls carry labels and
    /// attributes); a component exporting several versions is used as the newest.
    pub fn exports_policy_v3(&self) -> bool {
        self.exports_policy_v3
    }
    /// Whether it exports `toolward:policy/results@0.3.0` (reviews results).
    pub fn exports_results(&self) -> bool {
        self.exports_results
    }
    /// Whether it exports `validation` (0.2.0 or 0.3.0).
    pub fn exports_validation(&self) -> bool {
        self.exports_validation
    }
    /// Whether the compiled form came from the cache.
    pub fn cache(&self) -> CacheOutcome {
        self.cache
    }
}

fn effect_to_wit(effect: Effect) -> wit::Effect {
    match effect {
        Effect::ReadOnly => wit::Effect::ReadOnly,
        Effect::LocalChange => wit::Effect::LocalChange,
        Effect::RemoteChange => wit::Effect::RemoteChange,
        Effect::Destructive => wit::Effect::Destructive,
    }
}

fn effect_from_wit(effect: wit::Effect) -> Effect {
    match effect {
        wit::Effect::ReadOnly => Effect::ReadOnly,
        wit::Effect::LocalChange => Effect::LocalChange,
        wit::Effect::RemoteChange => Effect::RemoteChange,
        wit::Effect::Destructive => Effect::Destructive,
    }
}

/// Why a guest call failed, for deny reasons and load refusals.
fn guest_failure(
    store: &Store<GuestState>,
    error: &wasmtime::Error,
    fuel_limit: u64,
    memory_limit: usize,
) -> String {
    if store.data().memory_exhausted {
        return format!("exceeded its memory limit of {memory_limit} bytes");
    }
    if let Some(stopped) = error.downcast_ref::<wasi::Stopped>() {
        return format!("was stopped: {stopped}");
    }
    #[cfg(feature = "wasi")]
    if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return format!("exited with status {} instead of answering", exit.0);
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => format!("ran out of fuel (limit {fuel_limit} units)"),
        Some(trap) => format!("trapped: {trap}"),
        None => format!("gave no valid answer: {error:#}"),
    }
}

fn short(sha256: &str) -> &str {
    sha256.get(..12).unwrap_or(sha256)
}

