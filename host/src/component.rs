//! Hosting policy components: one wasmtime [`Engine`], components compiled once and cached
//! on disk, purity checked, every guest call bounded, every failure a deny.
//!
//! The contract is the WIT package `toolward:policy` in `wit/`: version 0.1.0
//! (`wit/policy.wit`) and 0.2.0 (`wit/v0.2.0/policy.wit`), both accepted. A component exports
//! `rules@0.1.0` (classify tools), `policy` of either version (decide calls), or both; a
//! 0.2.0 `policy` names the policies that determined each decision
//! ([`PolicyAnswer::determined_by`]), and a component may export `validation@0.2.0` to check
//! its settings against the registered tools ([`Policy::validate`]).
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
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Instance, InstancePre, Linker, WasmList};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap,
};
use wasmtime_wizer::{ComponentInstanceState, Wizer};

pub use toolward_policy_table::{Decision, Effect};

mod cache;
pub mod wasi;

use cache::Lookup;
pub use cache::{CACHE_FOLDER, CACHE_KEY, ComponentCache, MAX_COMPILED_BYTES};

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

/// The default policy component (`guest-policy/`), built by `host/build.rs` and embedded in
/// the library: it classifies from the operator's rules file and decides from its table.
pub const DEFAULT_COMPONENT: &[u8] = include_bytes!(concat!(
    env!("OUT_DIR"),
    "/guests/wasm32-unknown-unknown/release/toolward_guest_policy.wasm"
));

/// The built-in Cedar component (`guest-cedar/`), built by `host/build.rs` and embedded in
/// the library: it decides calls with the operator's Cedar policies (`policy.cedar` in the
/// config, `docs/cedar.md`), exporting `policy` and `validation` of `toolward:policy@0.2.0`.
pub const CEDAR_COMPONENT: &[u8] = include_bytes!(concat!(
    env!("OUT_DIR"),
    "/guests/wasm32-unknown-unknown/release/toolward_guest_cedar.wasm"
));

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
/// The most policy ids of one decision kept for its audit record (`determined_by`); past
/// it the list ends with `… and N more`, so a component cannot make records unbounded.
pub const MAX_DETERMINED_BY: usize = 64;

/// Fuel for one `decide` call: about that many wasm instructions. The default table
/// decides in a few thousand; 50 million is ample for a custom policy and ends an endless
/// loop in tens of milliseconds.
pub const DEFAULT_DECIDE_FUEL: u64 = 50_000_000;
/// Fuel for one `classify` call, as for [`DEFAULT_DECIDE_FUEL`].
pub const DEFAULT_CLASSIFY_FUEL: u64 = 50_000_000;
/// Fuel for `configure`, which parses the whole settings text once (a rules file of many
/// megabytes fits).
pub const DEFAULT_CONFIGURE_FUEL: u64 = 2_000_000_000;
/// Linear memory one guest instance may grow to, in bytes. The default component needs
/// about 1.2 MiB; 64 MiB bounds a memory bomb without cramping a custom policy.
pub const DEFAULT_MEMORY_BYTES: usize = 64 << 20;
/// Instances that may be live at once (one per decision in flight, one per load). The
/// pooling allocator reserves their slots up front; beyond it a decision is a deny.
pub const DEFAULT_MAX_INSTANCES: u32 = 256;
/// Wasm stack a guest call may use, in bytes.
pub const DEFAULT_MAX_WASM_STACK: usize = 512 << 10;
/// Bytes of a pooled slot's linear memory (of its tables: [`TABLE_KEEP_RESIDENT_BYTES`])
/// that are reset in place when its instance ends (the written pages, found by Linux's
/// `PAGEMAP_SCAN`, put back to the snapshot's contents) instead of being returned to the
/// kernel with `madvise`. Why: the
/// `madvise` calls and the TLB flushes they force were more than half of a fresh-instance
/// decision (`benches/decide.rs`: 38–55 µs before, 9–11 µs after). A decision of the
/// default component writes far less than this; written pages past the bound are returned
/// with `madvise` as before. The bound is also what a used slot may keep resident after its
/// instance ends, so at most this times [`GuestLimits::max_instances`] (256 MiB with the
/// defaults). Only used where the scan is available (Linux 6.7 and later): without it
/// wasmtime would `memset` the first this many bytes of every used slot, slower than the
/// `madvise` it replaces, so there slots are returned with `madvise` alone.
pub const KEEP_RESIDENT_BYTES: usize = 1 << 20;
/// As [`KEEP_RESIDENT_BYTES`], for a pooled slot's tables: one page. A table of one page or
/// less (512 function references; the default component's has 57) is then zeroed with a
/// `memset` instead of a `PAGEMAP_SCAN` system call of its own, which cost more than the
/// `memset` (`benches/decide.rs`, BENCHMARKS.md §1). Of a larger table, the scan keeps one
/// written page and the rest is returned with `madvise`.
pub const TABLE_KEEP_RESIDENT_BYTES: usize = 4 << 10;

/// Core (module) instances the pool allows per component slot
/// ([`GuestLimits::max_instances`]): a component instance holds one per core module it
/// instantiates. Rust components (the default, Cedar, `wit-bindgen` guests) hold 1, a
/// JavaScript one (jco 1.35, componentize-js 0.23) 1, a Python one (componentize-py 0.25.1)
/// 14: this many lets every slot hold a Python instance. The total is a counter in
/// wasmtime's pooling allocator, not memory reserved up front, so the headroom costs nothing.
pub const CORE_INSTANCES_PER_SLOT: u32 = 16;

/// Tables the pool allows per component slot. Rust and JavaScript components define 1,
/// componentize-py's 2 (the rest of its modules import them).
pub const TABLES_PER_SLOT: u32 = 2;

/// Fresh instances of a policy's configured snapshot kept ready ahead of decisions, by
/// default on a machine of [`READY_MIN_CORES`] cores or more; see
/// [`GuestLimits::ready_instances`].
pub const DEFAULT_READY_INSTANCES: u32 = 2;

/// The fewest cores (`std::thread::available_parallelism`) on which instances are kept
/// ready by default. Why: the worker needs a core of its own to take the instantiation off
/// the decision's path; on 2 cores under load it competed with the gateway's thread, and
/// `benches/gateway.rs` measured the gateway adding ≈ 20 µs more a call (108–122 µs against
/// 87–102 µs inline), although a decision alone was faster (BENCHMARKS.md §1, §5).
pub const READY_MIN_CORES: usize = 4;

/// [`DEFAULT_READY_INSTANCES`] on a machine of at least [`READY_MIN_CORES`] cores, else 0
/// (every decision instantiates inline): the default of [`GuestLimits::ready_instances`].
#[must_use]
pub fn default_ready_instances() -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    if cores >= READY_MIN_CORES {
        DEFAULT_READY_INSTANCES
    } else {
        0
    }
}

/// Bounds on every guest call. Defaults: the `DEFAULT_*` constants of this module, and
/// `default_ready_instances`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestLimits {
    /// Fuel for one `decide` call.
    pub decide_fuel: u64,
    /// Fuel for one `classify` call.
    pub classify_fuel: u64,
    /// Fuel for one `configure` call.
    pub configure_fuel: u64,
    /// Linear memory one instance may grow to, in bytes.
    pub memory_bytes: usize,
    /// Instances live at once.
    pub max_instances: u32,
    /// Fresh instances of each `Policy`'s configured snapshot that a background thread of
    /// that policy prepares ahead of decisions, so that a decision is only the call. Each
    /// instance still serves exactly one decision; the same thread drops used instances,
    /// off the decision's path. When none is ready (decisions faster than the thread), a
    /// decision instantiates inline as with 0. Capped at an eighth of
    /// [`GuestLimits::max_instances`]: a policy then holds at most twice this many pool
    /// slots (ready, plus used and not yet dropped) beyond its decisions in flight. 0: no
    /// thread; every decision instantiates inline and drops its instance itself. Default:
    /// `default_ready_instances` (2 on 4 cores or more, else 0).
    pub ready_instances: u32,
}

impl Default for GuestLimits {
    fn default() -> Self {
        GuestLimits {
            decide_fuel: DEFAULT_DECIDE_FUEL,
            classify_fuel: DEFAULT_CLASSIFY_FUEL,
            configure_fuel: DEFAULT_CONFIGURE_FUEL,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            max_instances: DEFAULT_MAX_INSTANCES,
            ready_instances: default_ready_instances(),
        }
    }
}

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
    #[error(
        "component `{origin}` imports `{import}`, which toolward does not provide: a policy component may import nothing but `toolward:policy` types and WASI 0.2 (`wasi:*@0.2.x`, which grants it nothing)"
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

/// One wasmtime engine with its compiled-component cache: the place components are
/// loaded. Cheap to clone (shared).
#[derive(Clone)]
pub struct ComponentHost {
    inner: Arc<HostInner>,
}

struct HostInner {
    engine: Engine,
    linker: Linker<GuestState>,
    /// `linker` plus WASI 0.2 granting nothing ([`wasi`]), for components that import it;
    /// built when the first such component loads (most hosts never need it, and linking
    /// WASI's functions touched code and memory at every start).
    wasi_linker: OnceLock<Linker<GuestState>>,
    limits: GuestLimits,
    cache: Option<ComponentCache>,
}

impl fmt::Debug for ComponentHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ComponentHost")
            .field("limits", &self.inner.limits)
            .field("cache", &self.inner.cache)
            .finish_non_exhaustive()
    }
}

impl ComponentHost {
    /// A host with the given limits and, when `cache` is given, that compiled-component
    /// cache ([`ComponentCache::open`]; none: every component is compiled).
    ///
    /// Defaults worth knowing: the pooling allocator with [`GuestLimits::max_instances`]
    /// slots, copy-on-write memory images, slots reset in place up to
    /// [`KEEP_RESIDENT_BYTES`] (tables [`TABLE_KEEP_RESIDENT_BYTES`]) where Linux offers
    /// `PAGEMAP_SCAN`, fuel metering on, no WASI and no other host functions linked.
    ///
    /// # Errors
    /// [`ComponentError::Engine`] when wasmtime rejects the configuration.
    pub fn new(limits: GuestLimits, cache: Option<ComponentCache>) -> Result<Self, ComponentError> {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(limits.max_instances)
            .total_core_instances(limits.max_instances.saturating_mul(CORE_INSTANCES_PER_SLOT))
            .total_memories(limits.max_instances)
            .total_tables(limits.max_instances.saturating_mul(TABLES_PER_SLOT))
            .max_memory_size(limits.memory_bytes);
        if PoolingAllocationConfig::is_pagemap_scan_available() {
            pool.linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
                .table_keep_resident(TABLE_KEEP_RESIDENT_BYTES)
                .pagemap_scan(Enabled::Yes);
        }
        let mut config = Config::new();
        config
            .consume_fuel(true)
            .max_wasm_stack(DEFAULT_MAX_WASM_STACK)
            .memory_init_cow(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config).map_err(|e| ComponentError::Engine(e.to_string()))?;
        let mut linker = Linker::new(&engine);
        // The only imports a pure component can have: the type-only instance of our own
        // `types` interface, which wit-component adds for the types the exports use.
        for types in ["toolward:policy/types@0.1.0", "toolward:policy/types@0.2.0"] {
            linker
                .instance(types)
                .map_err(|e| ComponentError::Engine(e.to_string()))?;
        }
        Ok(ComponentHost {
            inner: Arc::new(HostInner {
                engine,
                linker,
                wasi_linker: OnceLock::new(),
                limits,
                cache,
            }),
        })
    }

    /// The limits every guest call runs under.
    pub fn limits(&self) -> &GuestLimits {
        &self.inner.limits
    }

    /// Checks and compiles a component (from the cache when possible).
    ///
    /// `origin` names the component in messages (a path, or `built-in`).
    ///
    /// # Errors
    /// [`ComponentError::Invalid`] for bytes that are not a component,
    /// [`ComponentError::ForbiddenImport`] naming the first import outside toolward's WIT,
    /// [`ComponentError::Cache`] when a compiled component cannot be serialized (a failed
    /// cache write is only logged), [`ComponentError::State`] when a cache entry has another
    /// owner, gives group or others access, or is a symlink.
    pub fn load(&self, bytes: &[u8], origin: &str) -> Result<LoadedComponent, ComponentError> {
        let sha256 = hex::encode(Sha256::digest(bytes));
        let (component, cache) = self.compile_cached(bytes, &sha256, origin)?;
        let ty = component.component_type();
        let engine = &self.inner.engine;
        let mut imports = Vec::new();
        let mut imports_wasi = false;
        for (name, item) in ty.imports(engine) {
            imports.push(name.to_owned());
            if wasi::is_provided(name) {
                imports_wasi = true;
                continue;
            }
            let ours = name.starts_with(&format!("{WIT_PACKAGE}/"));
            let type_only = match &item.ty {
                ComponentItem::ComponentInstance(instance) => instance
                    .exports(engine)
                    .all(|(_, e)| matches!(e.ty, ComponentItem::Type(_))),
                ComponentItem::Type(_) => true,
                _ => false,
            };
            if !(ours && type_only) {
                return Err(ComponentError::ForbiddenImport {
                    origin: origin.to_owned(),
                    import: name.to_owned(),
                });
            }
        }
        if imports_wasi {
            // Every import is WASI 0.2 or ours by name; the types must fit too (a function
            // of another signature under a WASI name is refused here, not at configure).
            self.linker(true)?
                .instantiate_pre(&component)
                .map_err(|e| ComponentError::Invalid {
                    origin: origin.to_owned(),
                    reason: format!("its WASI 0.2 imports do not link: {e:#}"),
                })?;
        }
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_owned()).collect();
        Ok(LoadedComponent {
            origin: origin.to_owned(),
            sha256,
            size_bytes: bytes.len(),
            exports_rules: exports.iter().any(|e| e == RULES_INTERFACE),
            exports_policy: exports
                .iter()
                .any(|e| e == POLICY_INTERFACE || e == POLICY_INTERFACE_V2),
            exports_policy_v2: exports.iter().any(|e| e == POLICY_INTERFACE_V2),
            exports_validation: exports.iter().any(|e| e == VALIDATION_INTERFACE),
            exports,
            imports,
            imports_wasi,
            cache,
            bytes: bytes.to_vec(),
        })
    }

    /// Configures the `policy` export of `component` with `settings` once, snapshots the
    /// configured instance, and returns the [`Policy`] that decides from that snapshot.
    ///
    /// # Errors
    /// [`ComponentError::MissingExport`], [`ComponentError::Settings`] with the component's
    /// own message, [`ComponentError::Guest`] when `configure` traps or runs out of fuel or
    /// memory.
    pub fn configure_policy(
        &self,
        component: &LoadedComponent,
        settings: &str,
    ) -> Result<Policy, ComponentError> {
        if !component.exports_policy {
            return Err(ComponentError::MissingExport {
                origin: component.origin.clone(),
                interface: POLICY_INTERFACE,
            });
        }
        let v2 = component.exports_policy_v2;
        let (pre, snapshot_cache) = self.snapshot(component, |store, instance, pre| {
            if v2 {
                let guest = wit2_policy::GuestIndices::new(pre)
                    .and_then(|i| i.load(&mut *store, instance))
                    .map_err(|e| e.to_string())?;
                guest
                    .call_configure(&mut *store, settings)
                    .map_err(|e| e.to_string())
            } else {
                let guest = wit_policy::GuestIndices::new(pre)
                    .and_then(|i| i.load(&mut *store, instance))
                    .map_err(|e| e.to_string())?;
                guest
                    .call_configure(&mut *store, settings)
                    .map_err(|e| e.to_string())
            }
        })?;
        let snapshot_err = |e: wasmtime::Error| ComponentError::Guest {
            origin: component.origin.clone(),
            step: "snapshot",
            reason: e.to_string(),
        };
        let indices = if v2 {
            PolicyIndices::V2(wit2_policy::GuestIndices::new(&pre).map_err(snapshot_err)?)
        } else {
            PolicyIndices::V1(wit_policy::GuestIndices::new(&pre).map_err(snapshot_err)?)
        };
        let validation = if component.exports_validation {
            Some(wit2_validation::GuestIndices::new(&pre).map_err(snapshot_err)?)
        } else {
            None
        };
        let facts = if component.exports.iter().any(|e| e == FACTS_INTERFACE) {
            Some(wit2_facts::GuestIndices::new(&pre).map_err(snapshot_err)?)
        } else {
            None
        };
        Ok(Policy::new(
            PolicyShared {
                host: self.clone(),
                pre,
                indices,
                validation,
                facts,
                sha256: component.sha256.clone(),
                wasi: component.imports_wasi,
                queue: Mutex::new(ReadyQueue {
                    ready: Vec::new(),
                    used: Vec::new(),
                    worker_idle: false,
                    shutdown: false,
                }),
                wake: Condvar::new(),
                from_ready: AtomicU64::new(0),
                inline: AtomicU64::new(0),
            },
            snapshot_cache,
        ))
    }

    /// Configures the `rules` export of `component` with `settings` once and returns the
    /// [`Rules`] that classify from that state.
    ///
    /// # Errors
    /// As for [`ComponentHost::configure_policy`].
    pub fn configure_rules(
        &self,
        component: &LoadedComponent,
        settings: &str,
    ) -> Result<Rules, ComponentError> {
        if !component.exports_rules {
            return Err(ComponentError::MissingExport {
                origin: component.origin.clone(),
                interface: RULES_INTERFACE,
            });
        }
        let (pre, _) = self.snapshot(component, |store, instance, pre| {
            let guest = wit_rules::GuestIndices::new(pre)
                .and_then(|i| i.load(&mut *store, instance))
                .map_err(|e| e.to_string())?;
            guest
                .call_configure(&mut *store, settings)
                .map_err(|e| e.to_string())
        })?;
        let indices = wit_rules::GuestIndices::new(&pre).map_err(|e| ComponentError::Guest {
            origin: component.origin.clone(),
            step: "snapshot",
            reason: e.to_string(),
        })?;
        Ok(Rules {
            host: self.clone(),
            pre,
            indices,
            sha256: component.sha256.clone(),
            wasi: component.imports_wasi,
        })
    }

    /// A store for one instance, holding `fuel`; with a locked-down WASI state when the
    /// component imports WASI (`wasi`).
    fn store(&self, fuel: u64, wasi: bool) -> Store<GuestState> {
        let mut store = Store::new(
            &self.inner.engine,
            GuestState {
                memory_bytes: self.inner.limits.memory_bytes,
                memory_exhausted: false,
                wasi: wasi.then(|| Box::new(wasi::WasiState::locked_down())),
            },
        );
        store.limiter(|state| state);
        // Fuel is only unavailable when metering is off, and it is always on here.
        let _ = store.set_fuel(fuel);
        store
    }

    /// The linker for a component: with WASI 0.2 granting nothing when it imports WASI.
    ///
    /// # Errors
    /// [`ComponentError::Engine`] when WASI 0.2 cannot be linked.
    fn linker(&self, wasi: bool) -> Result<&Linker<GuestState>, ComponentError> {
        if !wasi {
            return Ok(&self.inner.linker);
        }
        if let Some(linker) = self.inner.wasi_linker.get() {
            return Ok(linker);
        }
        let mut linker = self.inner.linker.clone();
        wasi::link(&mut linker, GuestState::wasi)
            .map_err(|e| ComponentError::Engine(format!("cannot link WASI 0.2: {e:#}")))?;
        Ok(self.inner.wasi_linker.get_or_init(|| linker))
    }

    /// Instruments `component`, runs `configure` through `call`, snapshots the configured
    /// instance and pre-instantiates the snapshot.
    fn snapshot(
        &self,
        component: &LoadedComponent,
        call: impl FnOnce(
            &mut Store<GuestState>,
            &Instance,
            &InstancePre<GuestState>,
        ) -> Result<Result<(), String>, String>
        + Send,
    ) -> Result<(InstancePre<GuestState>, CacheOutcome), ComponentError> {
        let wasi = component.imports_wasi;
        let origin = &component.origin;
        let guest_err = |step: &'static str, reason: String| ComponentError::Guest {
            origin: origin.clone(),
            step,
            reason,
        };
        let wizer = Wizer::new();
        let (cx, instrumented) = wizer
            .instrument_component(&component.bytes)
            .map_err(|e| guest_err("instrument", e.to_string()))?;
        let sha = hex::encode(Sha256::digest(&instrumented));
        let (compiled, _) = self.compile_cached(&instrumented, &sha, origin)?;
        let pre = self
            .linker(wasi)?
            .instantiate_pre(&compiled)
            .map_err(|e| guest_err("instantiate", format!("{e:#}")))?;
        let mut store = self.store(self.inner.limits.configure_fuel, wasi);
        let configured = if wasi {
            wasi::off_runtime(|| {
                let instance = pre.instantiate(&mut store).map_err(|e| format!("{e:#}"))?;
                let answer = call(&mut store, &instance, &pre);
                Ok((instance, answer))
            })
        } else {
            let instance = pre
                .instantiate(&mut store)
                .map_err(|e| guest_err("instantiate", e.to_string()))?;
            let answer = call(&mut store, &instance, &pre);
            Ok((instance, answer))
        };
        let printed = store.data().wasi.as_ref().map(|w| w.output());
        let with_output = |reason: String| match printed.as_ref().filter(|o| !o.is_empty()) {
            Some(output) => format!("{reason}; it printed {}", output.for_reason()),
            None => reason,
        };
        let (instance, answer) = match configured {
            Ok(done) => done,
            Err(reason) => return Err(guest_err("instantiate", with_output(reason))),
        };
        match answer {
            Ok(Ok(())) => {}
            Ok(Err(message)) => {
                return Err(ComponentError::Settings {
                    origin: origin.clone(),
                    message,
                });
            }
            Err(reason) => {
                let reason = if store.data().memory_exhausted {
                    format!(
                        "exceeded its memory limit of {} bytes (raise `guest.memory_bytes` in the config for larger settings)",
                        self.inner.limits.memory_bytes
                    )
                } else if store.get_fuel().ok() == Some(0) {
                    format!(
                        "ran out of fuel (limit {} units; raise `guest.configure_fuel` in the config for larger settings)",
                        self.inner.limits.configure_fuel
                    )
                } else {
                    reason
                };
                return Err(guest_err("configure", with_output(reason)));
            }
        }
        if let Some(state) = &store.data().wasi
            && !state.holds_nothing()
        {
            return Err(guest_err(
                "configure",
                "kept WASI handles (streams, pollables, files) open after `configure`: they would not exist in the fresh instance of each decision; close them before `configure` returns".to_owned(),
            ));
        }
        let _ = store.set_fuel(u64::MAX);
        let mut state = SyncInstanceState {
            store: &mut store,
            instance,
            failed: None,
        };
        let snapshot = futures::executor::block_on(wizer.snapshot_component(&cx, &mut state))
            .map_err(|e| guest_err("snapshot", e.to_string()))?;
        if let Some(reason) = state.failed {
            return Err(guest_err("snapshot", reason));
        }
        let snapshot_sha = hex::encode(Sha256::digest(&snapshot));
        let (snapshot_component, cache) = self.compile_cached(&snapshot, &snapshot_sha, origin)?;
        let pre = self
            .linker(wasi)?
            .instantiate_pre(&snapshot_component)
            .map_err(|e| guest_err("instantiate", e.to_string()))?;
        Ok((pre, cache))
    }

    /// Compiles `bytes`, or loads the compiled form from the cache, keyed by `sha256` and
    /// the engine's compatibility hash (wasmtime version and settings).
    fn compile_cached(
        &self,
        bytes: &[u8],
        sha256: &str,
        origin: &str,
    ) -> Result<(Component, CacheOutcome), ComponentError> {
        let engine = &self.inner.engine;
        let compile = || {
            Component::new(engine, bytes).map_err(|e| ComponentError::Invalid {
                origin: origin.to_owned(),
                reason: format!("{e:#}"),
            })
        };
        let Some(cache) = &self.inner.cache else {
            return Ok((compile()?, CacheOutcome::Disabled));
        };
        let name = format!("{sha256}-{:016x}.cwasm", self.compat_hash());
        let outcome = match cache.lookup(engine, &name)? {
            Lookup::Hit(component) => return Ok((component, CacheOutcome::Hit)),
            Lookup::Missing => CacheOutcome::Miss,
            Lookup::Rejected(reason) => {
                tracing::warn!(
                    "compiled-component cache entry `{}` of component `{origin}` is not used: {reason}; compiling it again",
                    cache.path().join(&name).display()
                );
                CacheOutcome::Replaced
            }
        };
        let component = compile()?;
        let serialized = component.serialize().map_err(|e| ComponentError::Cache {
            path: cache.path().join(&name),
            reason: e.to_string(),
        })?;
        // The cache only saves time: a failed write is logged, never a failed load.
        if let Err(e) = cache.store(&name, &serialized) {
            tracing::warn!(error = %e, "cannot write the compiled-component cache");
        }
        Ok((component, outcome))
    }

    fn compat_hash(&self) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.inner
            .engine
            .precompile_compatibility_hash()
            .hash(&mut hasher);
        hasher.finish()
    }
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
    /// Whether it exports `toolward:policy/validation@0.2.0`.
    pub fn exports_validation(&self) -> bool {
        self.exports_validation
    }
    /// Whether the compiled form came from the cache.
    pub fn cache(&self) -> CacheOutcome {
        self.cache
    }
}

/// The host's view of a tool, passed to `classify` (WIT `types.tool`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolView {
    /// The server's name in the operator's config.
    pub server: String,
    /// The tool's name as the server sent it.
    pub name: String,
    /// The description, decoded.
    pub description: String,
    /// The input schema in canonical JSON form.
    pub input_schema: String,
    /// The server's annotations.
    pub annotations: Annotations,
    /// SHA-256 of the description, lowercase hex.
    pub description_sha256: String,
    /// SHA-256 of the canonical input schema, lowercase hex.
    pub input_schema_sha256: String,
}

/// A registered tool as `validation.validate` sees it (WIT 0.2.0 `types.registered-tool`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredToolView {
    /// The server's name in the operator's config.
    pub server: String,
    /// The tool's name as the server knows it.
    pub name: String,
    /// The operator's effect.
    pub effect: Effect,
    /// The tool's `inputSchema` as the server sent it, canonical JSON.
    pub input_schema: String,
}

/// A tool's annotations as received (MCP spec, "Tool annotations"); `None` when absent.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Annotations {
    /// `title`
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `readOnlyHint`
    #[serde(rename = "readOnlyHint", skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// `destructiveHint`
    #[serde(rename = "destructiveHint", skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// `idempotentHint`
    #[serde(rename = "idempotentHint", skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// `openWorldHint`
    #[serde(rename = "openWorldHint", skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// The operator's classification of a tool, as a rules component returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    /// The operator's effect.
    pub effect: Effect,
    /// Parameters hidden and refused.
    pub denied_parameters: Vec<String>,
    /// Parameters hidden and set by the host: name and JSON text.
    pub fixed_parameters: Vec<(String, String)>,
    /// The description the model sees instead of the server's.
    pub description_override: Option<String>,
    /// Accept a hint claiming more effect than `effect`.
    pub allow_hint_mismatch: bool,
}

/// One call, as the policy sees it (WIT `types.call`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallView {
    /// Host-generated call id.
    pub id: String,
    /// The server's name in the operator's config.
    pub server: String,
    /// The tool's upstream name.
    pub tool: String,
    /// The operator's effect.
    pub effect: Effect,
    /// Final arguments, canonical JSON.
    pub arguments: String,
    /// SHA-256 of `arguments`, lowercase hex.
    pub arguments_sha256: String,
    /// Who asked.
    pub principal: String,
    /// The client connection.
    pub session: String,
    /// Milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// Host facts: name and JSON text (none in this version).
    pub facts: Vec<(String, String)>,
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
    if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return format!("exited with status {} instead of answering", exit.0);
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => format!("ran out of fuel (limit {fuel_limit} units)"),
        Some(trap) => format!("trapped: {trap}"),
        None => format!("gave no valid answer: {error:#}"),
    }
}

/// A configured `policy` export: decides calls, each in a fresh instance of the configured
/// snapshot. `Send + Sync`; cheap to share behind an `Arc`.
///
/// Unless [`GuestLimits::ready_instances`] is 0, the policy owns one background thread
/// (named `toolward-policy`) that keeps that many fresh instances ready and drops the
/// instances decisions have used; dropping the `Policy` stops and joins it and frees the
/// instances it held.
pub struct Policy {
    shared: Arc<PolicyShared>,
    /// Ready instances wanted (0: no worker thread).
    depth: usize,
    worker: Option<std::thread::JoinHandle<()>>,
    snapshot_cache: CacheOutcome,
}

/// What the decisions of a policy and its worker thread share.
struct PolicyShared {
    host: ComponentHost,
    pre: InstancePre<GuestState>,
    indices: PolicyIndices,
    /// The `validation@0.2.0` export, when the component has one.
    validation: Option<wit2_validation::GuestIndices>,
    /// The `facts@0.2.0` export, when the component has one.
    facts: Option<wit2_facts::GuestIndices>,
    sha256: String,
    /// Whether the component imports WASI: its calls then run off the Tokio runtime
    /// ([`wasi::off_runtime`]) with the call's clock and random seed.
    wasi: bool,
    queue: Mutex<ReadyQueue>,
    /// Wakes the worker: no instance is left ready, the used ones reached the policy's
    /// depth, or the policy is dropping.
    wake: Condvar,
    from_ready: AtomicU64,
    inline: AtomicU64,
}

/// A fresh instance of the snapshot that has run nothing yet, its fuel set for a decision.
struct FreshInstance {
    store: Store<GuestState>,
    guest: PolicyGuest,
}

/// The `policy` export of a configured snapshot, by its WIT version.
enum PolicyIndices {
    V1(wit_policy::GuestIndices),
    V2(wit2_policy::GuestIndices),
}

/// The `policy` export of an instance, by its WIT version.
enum PolicyGuest {
    V1(wit_policy::Guest),
    V2(wit2_policy::Guest),
}

impl PolicyGuest {
    /// `decide` on `call`, as the host's [`PolicyAnswer`].
    fn decide(
        &self,
        store: &mut Store<GuestState>,
        call: &CallView,
    ) -> wasmtime::Result<PolicyAnswer> {
        match self {
            PolicyGuest::V1(guest) => {
                let facts = wit_facts(call);
                let decision = guest.call_decide(store, to_wit_call(call, &facts))?;
                Ok(PolicyAnswer {
                    decision: from_wit(decision),
                    determined_by: None,
                    output: None,
                })
            }
            PolicyGuest::V2(guest) => {
                let facts: Vec<wit2::Fact<'_>> = call
                    .facts
                    .iter()
                    .map(|(name, value)| wit2::Fact { name, value })
                    .collect();
                let verdict = guest.call_decide(store, to_wit2_call(call, &facts))?;
                Ok(PolicyAnswer {
                    decision: from_wit2(verdict.decision),
                    determined_by: Some(bounded_ids(verdict.determined_by)),
                    output: None,
                })
            }
        }
    }
}

/// A policy's answer on one call: the decision and, from a `policy@0.2.0` component, the
/// ids of the policies that determined it (`determined_by` of the decision's audit record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyAnswer {
    /// The decision.
    pub decision: Decision,
    /// What determined it, in the component's naming (for the Cedar component, the policy
    /// ids); `None` from a `policy@0.1.0` component, which cannot say. At most
    /// [`MAX_DETERMINED_BY`] ids and a last `… and N more`.
    pub determined_by: Option<Vec<String>>,
    /// What the guest printed on stdout and stderr during the decision, bounded
    /// ([`wasi::MAX_OUTPUT_BYTES`]); `None` for a component that imports no WASI.
    pub output: Option<wasi::GuestOutput>,
}

fn bounded_ids(mut ids: Vec<String>) -> Vec<String> {
    if ids.len() > MAX_DETERMINED_BY {
        let more = ids.len() - MAX_DETERMINED_BY;
        ids.truncate(MAX_DETERMINED_BY);
        ids.push(format!("… and {more} more"));
    }
    ids
}

struct ReadyQueue {
    /// Instances no decision has used, at most the policy's depth.
    ready: Vec<FreshInstance>,
    /// Stores a decision has used, for the worker to drop; at most the policy's depth.
    used: Vec<Store<GuestState>>,
    /// The worker waits on `wake` for work; whoever gives it work notifies and clears this.
    worker_idle: bool,
    shutdown: bool,
}

/// How the decisions of a [`Policy`] got their fresh instance, counted since it was
/// configured (see [`Policy::ready_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadyStats {
    /// Decisions that took an instance the worker thread had prepared.
    pub from_ready: u64,
    /// Decisions that instantiated their own, because none was ready (or the policy keeps
    /// none ready).
    pub inline: u64,
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("sha256", &self.shared.sha256)
            .field("ready_instances", &self.depth)
            .finish_non_exhaustive()
    }
}

/// How long the worker waits before trying again when it could not instantiate (no free
/// pool slot, most likely: decisions in flight need the slots more than it does), doubled
/// after each failure in a row up to [`READY_RETRY_MAX`].
const READY_RETRY: Duration = Duration::from_millis(10);
/// The longest wait between the worker's attempts to instantiate.
const READY_RETRY_MAX: Duration = Duration::from_secs(1);

impl PolicyShared {
    fn lock(&self) -> MutexGuard<'_, ReadyQueue> {
        // Nothing panics while holding the lock; if something did, the queue is still
        // consistent (every field is valid after each single push or pop).
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh instance, or the reason (for a deny) why none could be made.
    fn instantiate(&self) -> Result<FreshInstance, String> {
        self.instantiate_with_fuel(self.host.inner.limits.decide_fuel)
    }

    /// A fresh instance of the snapshot, its store holding `fuel`.
    fn instantiate_with_fuel(&self, fuel: u64) -> Result<FreshInstance, String> {
        let mut store = self.host.store(fuel, self.wasi);
        let instance = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| format!("could not be instantiated: {e}"))?;
        let guest = match &self.indices {
            PolicyIndices::V1(indices) => indices.load(&mut store, &instance).map(PolicyGuest::V1),
            PolicyIndices::V2(indices) => indices.load(&mut store, &instance).map(PolicyGuest::V2),
        }
        .map_err(|e| format!("has an unusable `decide` export: {e}"))?;
        Ok(FreshInstance { store, guest })
    }

    fn deny(&self, reason: String) -> Decision {
        Decision::Deny(format!(
            "policy component `{}` {reason}; the call is denied",
            short(&self.sha256)
        ))
    }

    fn deny_answer(&self, reason: String) -> PolicyAnswer {
        PolicyAnswer {
            decision: self.deny(reason),
            determined_by: None,
            output: None,
        }
    }

    /// The worker thread: keeps `depth` instances ready and drops used ones, until shutdown.
    fn run_worker(&self, depth: usize) {
        yield_to_decisions();
        let mut dropping: Vec<Store<GuestState>> = Vec::with_capacity(depth);
        let mut retry_later = false;
        let mut retry_delay = READY_RETRY;
        // Busy: fill up to `depth` and drop every used instance, then sleep. Asleep: start
        // again on the condition `Policy::retire` wakes it on, so that spaced-out decisions
        // cost one wake-up per `depth` of them rather than one each.
        let mut busy = true;
        loop {
            let refill = {
                let mut queue = self.lock();
                loop {
                    if queue.shutdown {
                        return;
                    }
                    let refill = !retry_later && queue.ready.len() < depth;
                    busy = if busy {
                        refill || !queue.used.is_empty()
                    } else {
                        !retry_later && queue.ready.is_empty() || queue.used.len() >= depth
                    };
                    if busy {
                        break;
                    }
                    queue.worker_idle = true;
                    queue = if retry_later {
                        retry_later = false;
                        let waited = self.wake.wait_timeout(queue, retry_delay);
                        retry_delay = (retry_delay * 2).min(READY_RETRY_MAX);
                        waited.unwrap_or_else(PoisonError::into_inner).0
                    } else {
                        self.wake
                            .wait(queue)
                            .unwrap_or_else(PoisonError::into_inner)
                    };
                    queue.worker_idle = false;
                }
                dropping.append(&mut queue.used);
                !retry_later && queue.ready.len() < depth
            };
            // Dropping a store resets its pool slot: the cost taken off the decisions.
            dropping.clear();
            if refill {
                match self.instantiate() {
                    Ok(fresh) => {
                        let mut queue = self.lock();
                        if queue.shutdown {
                            return;
                        }
                        queue.ready.push(fresh);
                        retry_delay = READY_RETRY;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "cannot prepare a policy instance; trying again later");
                        retry_later = true;
                    }
                }
            }
        }
    }
}

/// Makes the calling thread (the worker) `SCHED_BATCH`, so that waking it never preempts
/// the decision that woke it: measured, a woken worker at normal policy took the decision's
/// core for the ≈ 7 µs of dropping and preparing instances before the decision returned.
/// It keeps its fair share of the CPU; it just waits for the next tick or a free core.
#[cfg(target_os = "linux")]
#[expect(
    unsafe_code,
    reason = "sched_setscheduler is a libc call on the calling thread with a parameter it only reads"
)]
fn yield_to_decisions() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "cannot make the policy worker SCHED_BATCH");
    }
}

#[cfg(not(target_os = "linux"))]
fn yield_to_decisions() {}

impl Policy {
    fn new(shared: PolicyShared, snapshot_cache: CacheOutcome) -> Policy {
        let limits = &shared.host.inner.limits;
        let wanted = limits.ready_instances.min(limits.max_instances / 8) as usize;
        let mut policy = Policy {
            shared: Arc::new(shared),
            depth: 0,
            worker: None,
            snapshot_cache,
        };
        if wanted == 0 {
            return policy;
        }
        policy.shared.lock().ready.reserve_exact(wanted);
        policy.shared.lock().used.reserve_exact(wanted);
        let shared = Arc::clone(&policy.shared);
        match std::thread::Builder::new()
            .name("toolward-policy".to_owned())
            .spawn(move || shared.run_worker(wanted))
        {
            Ok(worker) => {
                policy.depth = wanted;
                policy.worker = Some(worker);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the policy's worker thread; every decision will instantiate inline");
            }
        }
        policy
    }

    /// SHA-256 of the component (not of the snapshot), lowercase hex.
    pub fn sha256(&self) -> &str {
        &self.shared.sha256
    }

    /// Whether the configured snapshot's compiled form came from the cache.
    pub fn snapshot_cache(&self) -> CacheOutcome {
        self.snapshot_cache
    }

    /// Fresh instances ready now: from 0 to [`GuestLimits::ready_instances`] (capped at an
    /// eighth of [`GuestLimits::max_instances`]); always 0 for a policy that keeps none.
    pub fn ready_instances(&self) -> usize {
        self.shared.lock().ready.len()
    }

    /// How many decisions took a prepared instance and how many instantiated inline.
    pub fn ready_stats(&self) -> ReadyStats {
        ReadyStats {
            from_ready: self.shared.from_ready.load(Ordering::Relaxed),
            inline: self.shared.inline.load(Ordering::Relaxed),
        }
    }

    /// One instance of the configured snapshot that decides call after call: the floor of
    /// a component call, for benchmarks only. State carries between its decisions, which
    /// the call path never allows ([`Policy::decide`] starts each from the snapshot).
    ///
    /// # Errors
    /// A reason when no instance can be made.
    pub fn live_instance(&self) -> Result<LivePolicy, String> {
        let FreshInstance { store, guest } = self.shared.instantiate_with_fuel(u64::MAX)?;
        Ok(LivePolicy { store, guest })
    }

    /// The decision on `call`, from a fresh instance of the configured snapshot that no
    /// other decision has used: one the worker thread prepared, or, when none is ready,
    /// one instantiated here.
    ///
    /// Fails closed: when the guest traps, runs out of fuel or memory, cannot be
    /// instantiated (no free slot), or answers something that is not a `decision`, the
    /// result is [`Decision::Deny`] whose reason names the component and the failure.
    pub fn decide(&self, call: &CallView) -> Decision {
        self.answer(call).decision
    }

    /// As [`Policy::decide`], with what determined the decision when the component says
    /// (`policy@0.2.0`). A failure is a deny whose `determined_by` is `None`.
    pub fn answer(&self, call: &CallView) -> PolicyAnswer {
        let shared = &*self.shared;
        let limits = &shared.host.inner.limits;
        let ready = if self.depth > 0 {
            shared.lock().ready.pop()
        } else {
            None
        };
        let FreshInstance { mut store, guest } = match ready {
            Some(fresh) => {
                shared.from_ready.fetch_add(1, Ordering::Relaxed);
                fresh
            }
            None => {
                shared.inline.fetch_add(1, Ordering::Relaxed);
                match shared.instantiate() {
                    Ok(fresh) => fresh,
                    Err(reason) => return shared.deny_answer(reason),
                }
            }
        };
        let decided = if shared.wasi {
            store
                .data_mut()
                .wasi()
                .begin_call(call.time_ms, call.arguments_sha256.as_bytes());
            wasi::off_runtime(|| guest.decide(&mut store, call))
        } else {
            guest.decide(&mut store, call)
        };
        let output = store.data().wasi.as_ref().map(|w| w.output());
        let answer = match decided {
            Ok(answer) => PolicyAnswer { output, ..answer },
            Err(e) => {
                let mut reason = guest_failure(&store, &e, limits.decide_fuel, limits.memory_bytes);
                if let Some(printed) = output.as_ref().filter(|o| !o.is_empty()) {
                    reason = format!("{reason}; it printed {}", printed.for_reason());
                }
                PolicyAnswer {
                    output,
                    ..shared.deny_answer(reason)
                }
            }
        };
        self.retire(store);
        answer
    }

    /// The fact scopes the configured settings read, as the component's `facts@0.2.0`
    /// export names them (`tool`, `server`, `principal`, `session`; empty: none), run once
    /// in a fresh instance of the configured snapshot with the configure fuel. `None` when
    /// the component has no such export, or it trapped or ran out of fuel or memory: the
    /// caller then gives the policy every fact (`docs/facts.md`).
    pub fn fact_scopes(&self) -> Option<Vec<String>> {
        let indices = self.shared.facts.as_ref()?;
        let shared = &*self.shared;
        let mut store = shared
            .host
            .store(shared.host.inner.limits.configure_fuel, shared.wasi);
        let instance = shared.pre.instantiate(&mut store).ok()?;
        let guest = indices.load(&mut store, &instance).ok()?;
        match guest.call_read_scopes(&mut store) {
            Ok(scopes) => Some(scopes),
            Err(e) => {
                tracing::warn!(
                    "policy component `{}` could not say which facts it reads ({e}); it is given every fact",
                    short(&shared.sha256)
                );
                None
            }
        }
    }

    /// Whether the component checks its settings against the registered tools
    /// (`validation@0.2.0`; the Cedar component does).
    pub fn validates(&self) -> bool {
        self.shared.validation.is_some()
    }

    /// The problems of the configured settings for `tools`, from the component's
    /// `validation` export in a fresh instance of the configured snapshot; empty when there
    /// are none or the component has no such export ([`Policy::validates`]).
    ///
    /// # Errors
    /// A reason naming the component when it cannot be instantiated, traps, or runs out of
    /// fuel (the configure fuel: validation type-checks every policy for every tool) or
    /// memory.
    pub fn validate(&self, tools: &[RegisteredToolView]) -> Result<Vec<String>, String> {
        let Some(indices) = &self.shared.validation else {
            return Ok(Vec::new());
        };
        let shared = &*self.shared;
        let limits = &shared.host.inner.limits;
        let mut store = shared.host.store(limits.configure_fuel, shared.wasi);
        let instance = shared.pre.instantiate(&mut store).map_err(|e| {
            format!(
                "policy component `{}` could not be instantiated: {e}",
                short(&shared.sha256)
            )
        })?;
        let guest = indices.load(&mut store, &instance).map_err(|e| {
            format!(
                "policy component `{}` has an unusable `validate` export: {e}",
                short(&shared.sha256)
            )
        })?;
        let wit_tools: Vec<wit2::RegisteredTool<'_>> = tools
            .iter()
            .map(|tool| wit2::RegisteredTool {
                server: &tool.server,
                name: &tool.name,
                effect: effect_to_wit2(tool.effect),
                input_schema: &tool.input_schema,
            })
            .collect();
        let validated = if shared.wasi {
            wasi::off_runtime(|| guest.call_validate(&mut store, &wit_tools))
        } else {
            guest.call_validate(&mut store, &wit_tools)
        };
        validated.map_err(|e| {
            format!(
                "policy component `{}` {}",
                short(&shared.sha256),
                guest_failure(&store, &e, limits.configure_fuel, limits.memory_bytes)
            )
        })
    }

    /// Hands a used store to the worker to drop, or drops it here when the worker is
    /// behind (or there is none): never more than `depth` wait. Wakes the worker only when
    /// no instance is left ready or the used ones reach `depth`, so decisions spaced out
    /// pay one wake-up (a `futex` call here, a context switch there) per `depth` of them.
    fn retire(&self, store: Store<GuestState>) {
        if self.depth == 0 {
            return;
        }
        let mut queue = self.shared.lock();
        let overflow = if queue.used.len() < self.depth {
            queue.used.push(store);
            None
        } else {
            Some(store)
        };
        let wake = queue.worker_idle
            && (queue.ready.is_empty() || queue.used.len() >= self.depth)
            && std::mem::replace(&mut queue.worker_idle, false);
        drop(queue);
        if wake {
            self.shared.wake.notify_one();
        }
        drop(overflow);
    }
}

impl Drop for Policy {
    fn drop(&mut self) {
        if let Some(worker) = self.worker.take() {
            self.shared.lock().shutdown = true;
            self.shared.wake.notify_all();
            // The worker never panics; if it did, there is nothing left to stop.
            let _ = worker.join();
        }
    }
}

/// A live policy instance (see [`Policy::live_instance`]); benchmarks only.
pub struct LivePolicy {
    store: Store<GuestState>,
    guest: PolicyGuest,
}

impl fmt::Debug for LivePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LivePolicy").finish_non_exhaustive()
    }
}

impl LivePolicy {
    /// The decision on `call` in this instance; a guest failure is a deny.
    pub fn decide(&mut self, call: &CallView) -> Decision {
        let _ = self.store.set_fuel(u64::MAX);
        let (guest, store) = (&self.guest, &mut self.store);
        if let Some(state) = &mut store.data_mut().wasi {
            state.begin_call(call.time_ms, call.arguments_sha256.as_bytes());
        }
        match wasi::off_runtime(|| guest.decide(store, call)) {
            Ok(answer) => answer.decision,
            Err(e) => Decision::Deny(e.to_string()),
        }
    }
}

/// A guest's `decision` as the host's.
fn from_wit(decision: wit::Decision) -> Decision {
    match decision {
        wit::Decision::Allow => Decision::Allow,
        wit::Decision::Deny(reason) => Decision::Deny(reason),
        wit::Decision::Hold(reason) => Decision::Hold(reason),
    }
}

/// A 0.2.0 guest's `decision` as the host's.
fn from_wit2(decision: wit2::Decision) -> Decision {
    match decision {
        wit2::Decision::Allow => Decision::Allow,
        wit2::Decision::Deny(reason) => Decision::Deny(reason),
        wit2::Decision::Hold(reason) => Decision::Hold(reason),
    }
}

fn to_wit2_call<'a>(call: &'a CallView, facts: &'a [wit2::Fact<'a>]) -> wit2::Call<'a> {
    wit2::Call {
        id: &call.id,
        server: &call.server,
        tool: &call.tool,
        effect: effect_to_wit2(call.effect),
        arguments: &call.arguments,
        arguments_sha256: &call.arguments_sha256,
        principal: &call.principal,
        session: &call.session,
        time_ms: call.time_ms,
        facts,
    }
}

fn effect_to_wit2(effect: Effect) -> wit2::Effect {
    match effect {
        Effect::ReadOnly => wit2::Effect::ReadOnly,
        Effect::LocalChange => wit2::Effect::LocalChange,
        Effect::RemoteChange => wit2::Effect::RemoteChange,
        Effect::Destructive => wit2::Effect::Destructive,
    }
}

fn wit_facts(call: &CallView) -> Vec<wit::Fact<'_>> {
    call.facts
        .iter()
        .map(|(name, value)| wit::Fact { name, value })
        .collect()
}

fn to_wit_call<'a>(call: &'a CallView, facts: &'a [wit::Fact<'a>]) -> wit::Call<'a> {
    wit::Call {
        id: &call.id,
        server: &call.server,
        tool: &call.tool,
        effect: effect_to_wit(call.effect),
        arguments: &call.arguments,
        arguments_sha256: &call.arguments_sha256,
        principal: &call.principal,
        session: &call.session,
        time_ms: call.time_ms,
        facts,
    }
}

fn short(sha256: &str) -> &str {
    sha256.get(..12).unwrap_or(sha256)
}

/// A configured `rules` export.
pub struct Rules {
    host: ComponentHost,
    pre: InstancePre<GuestState>,
    indices: wit_rules::GuestIndices,
    sha256: String,
    /// Whether the component imports WASI (calls then run through [`wasi::off_runtime`]).
    wasi: bool,
}

impl fmt::Debug for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rules")
            .field("sha256", &self.sha256)
            .finish_non_exhaustive()
    }
}

impl Rules {
    /// SHA-256 of the component, lowercase hex.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// One instance of the configured snapshot for a whole load.
    ///
    /// # Errors
    /// A reason naming the component when no instance can be made.
    pub fn classifier(&self) -> Result<Classifier, String> {
        let mut store = self.host.store(0, self.wasi);
        let instance = self.pre.instantiate(&mut store).map_err(|e| {
            format!(
                "rules component `{}` could not be instantiated: {e}",
                short(&self.sha256)
            )
        })?;
        let guest = self.indices.load(&mut store, &instance).map_err(|e| {
            format!(
                "rules component `{}` has an unusable `classify` export: {e}",
                short(&self.sha256)
            )
        })?;
        Ok(Classifier {
            store,
            guest,
            sha256: self.sha256.clone(),
            fuel: self.host.inner.limits.classify_fuel,
            memory_bytes: self.host.inner.limits.memory_bytes,
            broken: None,
            wasi: self.wasi,
        })
    }
}

/// Classifies the tools of one load in one instance.
pub struct Classifier {
    store: Store<GuestState>,
    guest: wit_rules::Guest,
    sha256: String,
    fuel: u64,
    memory_bytes: usize,
    broken: Option<String>,
    wasi: bool,
}

impl fmt::Debug for Classifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Classifier")
            .field("sha256", &self.sha256)
            .finish_non_exhaustive()
    }
}

impl Classifier {
    /// The operator's classification of `tool`; `Ok(None)` when unclassified.
    ///
    /// # Errors
    /// A reason naming the component when the guest trapped, ran out of fuel or memory:
    /// the tool is refused. After a failure the instance is not trusted again, and every
    /// later tool of the load is refused with the same reason.
    pub fn classify(&mut self, tool: &ToolView) -> Result<Option<Classification>, String> {
        if let Some(reason) = &self.broken {
            return Err(reason.clone());
        }
        let _ = self.store.set_fuel(self.fuel);
        let a = &tool.annotations;
        let wit_tool = wit::Tool {
            server: &tool.server,
            name: &tool.name,
            description: &tool.description,
            input_schema: &tool.input_schema,
            annotations: wit::Annotations {
                title: a.title.as_deref(),
                read_only_hint: a.read_only_hint,
                destructive_hint: a.destructive_hint,
                idempotent_hint: a.idempotent_hint,
                open_world_hint: a.open_world_hint,
            },
            description_sha256: &tool.description_sha256,
            input_schema_sha256: &tool.input_schema_sha256,
        };
        let classified = if self.wasi {
            let (guest, store) = (&self.guest, &mut self.store);
            wasi::off_runtime(|| guest.call_classify(store, wit_tool))
        } else {
            self.guest.call_classify(&mut self.store, wit_tool)
        };
        match classified {
            Ok(None) => Ok(None),
            Ok(Some(c)) => Ok(Some(Classification {
                effect: effect_from_wit(c.effect),
                denied_parameters: c.denied_parameters,
                fixed_parameters: c
                    .fixed_parameters
                    .into_iter()
                    .map(|p| (p.name, p.value))
                    .collect(),
                description_override: c.description_override,
                allow_hint_mismatch: c.allow_hint_mismatch,
            })),
            Err(e) => {
                let reason = format!(
                    "rules component `{}` {}",
                    short(&self.sha256),
                    guest_failure(&self.store, &e, self.fuel, self.memory_bytes)
                );
                self.broken = Some(reason.clone());
                Err(reason)
            }
        }
    }
}

/// Wizer's view of a configured instance, through synchronous calls (the engine does not
/// need async support for this).
struct SyncInstanceState<'a> {
    store: &'a mut Store<GuestState>,
    instance: Instance,
    /// The first failure of an accessor call: the snapshot is then unusable.
    failed: Option<String>,
}

impl SyncInstanceState<'_> {
    fn call<R: wasmtime::component::Lift + 'static, O>(
        &mut self,
        instance: &str,
        func: &str,
        use_ret: impl FnOnce(&mut Store<GuestState>, R) -> O,
        fallback: O,
    ) -> O {
        match self.try_call(instance, func, use_ret) {
            Ok(out) => out,
            Err(reason) => {
                self.failed
                    .get_or_insert_with(|| format!("`{instance}#{func}`: {reason}"));
                fallback
            }
        }
    }

    fn try_call<R: wasmtime::component::Lift + 'static, O>(
        &mut self,
        instance: &str,
        func: &str,
        use_ret: impl FnOnce(&mut Store<GuestState>, R) -> O,
    ) -> Result<O, String> {
        let (_, instance_index) = self
            .instance
            .get_export(&mut *self.store, None, instance)
            .ok_or("no such export")?;
        let (_, func_index) = self
            .instance
            .get_export(&mut *self.store, Some(&instance_index), func)
            .ok_or("no such export")?;
        let typed = self
            .instance
            .get_typed_func::<(), (R,)>(&mut *self.store, func_index)
            .map_err(|e| e.to_string())?;
        let (ret,) = typed
            .call(&mut *self.store, ())
            .map_err(|e| e.to_string())?;
        Ok(use_ret(&mut *self.store, ret))
    }
}

impl ComponentInstanceState for SyncInstanceState<'_> {
    async fn call_func_ret_list_u8(
        &mut self,
        instance: &str,
        func: &str,
        contents: impl FnOnce(&[u8]) + Send,
    ) {
        self.call(
            instance,
            func,
            |store, list: WasmList<u8>| contents(list.as_le_slice(&*store)),
            (),
        )
    }

    async fn call_func_ret_s32(&mut self, instance: &str, func: &str) -> i32 {
        self.call(instance, func, |_, r: i32| r, 0)
    }

    async fn call_func_ret_s64(&mut self, instance: &str, func: &str) -> i64 {
        self.call(instance, func, |_, r: i64| r, 0)
    }

    async fn call_func_ret_f32(&mut self, instance: &str, func: &str) -> u32 {
        self.call(instance, func, |_, r: f32| r.to_bits(), 0)
    }

    async fn call_func_ret_f64(&mut self, instance: &str, func: &str) -> u64 {
        self.call(instance, func, |_, r: f64| r.to_bits(), 0)
    }
}
