//! Hosting policy components: one wasmtime [`Engine`], components compiled once and cached
//! on disk, purity checked, every guest call bounded, every failure a deny.
//!
//! The contract is the WIT package `toolward:policy@0.1.0` in `wit/`. A component exports
//! `rules` (classify tools), `policy` (decide calls), or both.
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
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Instance, InstancePre, Linker, WasmList};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap,
};
use wasmtime_wizer::{ComponentInstanceState, Wizer};

pub use toolward_policy_table::{Decision, Effect};

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

/// The default policy component (`guest-policy/`), built by `host/build.rs` and embedded in
/// the library: it classifies from the operator's rules file and decides from its table.
pub const DEFAULT_COMPONENT: &[u8] = include_bytes!(concat!(
    env!("OUT_DIR"),
    "/guests/wasm32-unknown-unknown/release/toolward_guest_policy.wasm"
));

/// The WIT package a component may import from; anything else is refused.
pub const WIT_PACKAGE: &str = "toolward:policy";
/// The exported interface that classifies tools.
pub const RULES_INTERFACE: &str = "toolward:policy/rules@0.1.0";
/// The exported interface that decides calls.
pub const POLICY_INTERFACE: &str = "toolward:policy/policy@0.1.0";

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

/// Bounds on every guest call. Defaults: the `DEFAULT_*` constants of this module.
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
}

impl Default for GuestLimits {
    fn default() -> Self {
        GuestLimits {
            decide_fuel: DEFAULT_DECIDE_FUEL,
            classify_fuel: DEFAULT_CLASSIFY_FUEL,
            configure_fuel: DEFAULT_CONFIGURE_FUEL,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            max_instances: DEFAULT_MAX_INSTANCES,
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
        "component `{origin}` imports `{import}`, which toolward does not provide: a policy component may import nothing but `toolward:policy` types"
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
    /// The compiled-component cache could not be used.
    #[error("compiled-component cache `{path}`: {reason}")]
    Cache {
        /// The cache path.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// The store data of a guest instance: its limiter, and whether it hit the memory limit.
struct GuestState {
    memory_bytes: usize,
    memory_exhausted: bool,
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
    /// A cache entry existed but failed to load; it was compiled again and replaced.
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
    limits: GuestLimits,
    cache_dir: Option<PathBuf>,
}

impl fmt::Debug for ComponentHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ComponentHost")
            .field("limits", &self.inner.limits)
            .field("cache_dir", &self.inner.cache_dir)
            .finish_non_exhaustive()
    }
}

impl ComponentHost {
    /// A host with the given limits and, when `cache_dir` is given, a compiled-component
    /// cache in that directory (created owner-only, 0700, if missing).
    ///
    /// Defaults worth knowing: the pooling allocator with [`GuestLimits::max_instances`]
    /// slots, copy-on-write memory images, slots reset in place up to
    /// [`KEEP_RESIDENT_BYTES`] (tables [`TABLE_KEEP_RESIDENT_BYTES`]) where Linux offers
    /// `PAGEMAP_SCAN`, fuel metering on, no WASI and no other host functions linked.
    ///
    /// # Errors
    /// [`ComponentError::Engine`] when wasmtime rejects the configuration,
    /// [`ComponentError::Cache`] when the cache directory cannot be created or is open to
    /// other users.
    pub fn new(limits: GuestLimits, cache_dir: Option<PathBuf>) -> Result<Self, ComponentError> {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(limits.max_instances)
            .total_core_instances(limits.max_instances.saturating_mul(4))
            .total_memories(limits.max_instances)
            .total_tables(limits.max_instances.saturating_mul(2))
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
        linker
            .instance("toolward:policy/types@0.1.0")
            .map_err(|e| ComponentError::Engine(e.to_string()))?;
        if let Some(dir) = &cache_dir {
            prepare_cache_dir(dir)?;
        }
        Ok(ComponentHost {
            inner: Arc::new(HostInner {
                engine,
                linker,
                limits,
                cache_dir,
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
    /// cache write is only logged).
    pub fn load(&self, bytes: &[u8], origin: &str) -> Result<LoadedComponent, ComponentError> {
        let sha256 = hex::encode(Sha256::digest(bytes));
        let (component, cache) = self.compile_cached(bytes, &sha256, origin)?;
        let ty = component.component_type();
        let engine = &self.inner.engine;
        let mut imports = Vec::new();
        for (name, item) in ty.imports(engine) {
            imports.push(name.to_owned());
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
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_owned()).collect();
        Ok(LoadedComponent {
            origin: origin.to_owned(),
            sha256,
            size_bytes: bytes.len(),
            exports_rules: exports.iter().any(|e| e == RULES_INTERFACE),
            exports_policy: exports.iter().any(|e| e == POLICY_INTERFACE),
            exports,
            imports,
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
        let (pre, snapshot_cache) = self.snapshot(component, |store, instance, pre| {
            let guest = wit_policy::GuestIndices::new(pre)
                .and_then(|i| i.load(&mut *store, instance))
                .map_err(|e| e.to_string())?;
            guest
                .call_configure(&mut *store, settings)
                .map_err(|e| e.to_string())
        })?;
        let indices = wit_policy::GuestIndices::new(&pre).map_err(|e| ComponentError::Guest {
            origin: component.origin.clone(),
            step: "snapshot",
            reason: e.to_string(),
        })?;
        Ok(Policy {
            host: self.clone(),
            pre,
            indices,
            sha256: component.sha256.clone(),
            snapshot_cache,
        })
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
        })
    }

    fn store(&self, fuel: u64) -> Store<GuestState> {
        let mut store = Store::new(
            &self.inner.engine,
            GuestState {
                memory_bytes: self.inner.limits.memory_bytes,
                memory_exhausted: false,
            },
        );
        store.limiter(|state| state);
        // Fuel is only unavailable when metering is off, and it is always on here.
        let _ = store.set_fuel(fuel);
        store
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
        ) -> Result<Result<(), String>, String>,
    ) -> Result<(InstancePre<GuestState>, CacheOutcome), ComponentError> {
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
            .inner
            .linker
            .instantiate_pre(&compiled)
            .map_err(|e| guest_err("instantiate", e.to_string()))?;
        let mut store = self.store(self.inner.limits.configure_fuel);
        let instance = pre
            .instantiate(&mut store)
            .map_err(|e| guest_err("instantiate", e.to_string()))?;
        match call(&mut store, &instance, &pre) {
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
                        "exceeded its memory limit of {} bytes",
                        self.inner.limits.memory_bytes
                    )
                } else if store.get_fuel().ok() == Some(0) {
                    format!(
                        "ran out of fuel (limit {} units)",
                        self.inner.limits.configure_fuel
                    )
                } else {
                    reason
                };
                return Err(guest_err("configure", reason));
            }
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
            .inner
            .linker
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
        let Some(dir) = &self.inner.cache_dir else {
            return Ok((compile()?, CacheOutcome::Disabled));
        };
        let path = dir.join(format!("{sha256}-{:016x}.cwasm", self.compat_hash()));
        let mut outcome = CacheOutcome::Miss;
        if path.is_file() {
            match load_compiled(engine, &path) {
                Ok(component) => return Ok((component, CacheOutcome::Hit)),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "compiled-component cache entry failed to load; compiling again");
                    outcome = CacheOutcome::Replaced;
                }
            }
        }
        let component = compile()?;
        let serialized = component.serialize().map_err(|e| ComponentError::Cache {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        // The cache only saves time: a failed write is logged, never a failed load.
        if let Err(e) = write_atomically(&path, &serialized) {
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

/// Loads a serialized component from the cache.
///
/// wasmtime trusts a serialized component completely: its machine code runs as is. Only
/// the operator can write the cache directory (0700, checked at start), so write access to
/// it is code execution as the operator, which SECURITY.md states.
#[expect(
    unsafe_code,
    reason = "deserializing compiled machine code is unsafe in wasmtime; the cache directory is owner-only"
)]
fn load_compiled(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
    // SAFETY: the file was written by `compile_cached` of this process or an earlier one
    // of the same operator, into a directory only the operator can write; wasmtime checks
    // the header and the engine's compatibility before using it.
    unsafe { Component::deserialize_file(engine, path) }
}

fn prepare_cache_dir(dir: &Path) -> Result<(), ComponentError> {
    let err = |reason: String| ComponentError::Cache {
        path: dir.to_owned(),
        reason,
    };
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        builder.mode(0o700);
        builder.create(dir).map_err(|e| err(e.to_string()))?;
        let mode = std::fs::metadata(dir)
            .map_err(|e| err(e.to_string()))?
            .permissions()
            .mode();
        if mode & 0o022 != 0 {
            return Err(err(format!(
                "the directory is writable by other users (mode {:o}); writing it is code execution as the operator: make it 0700",
                mode & 0o777
            )));
        }
    }
    #[cfg(not(unix))]
    builder.create(dir).map_err(|e| err(e.to_string()))?;
    Ok(())
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ComponentError> {
    let err = |reason: String| ComponentError::Cache {
        path: path.to_owned(),
        reason,
    };
    // Unique per process and per write: threads of one process may compile the same
    // component at once, and each must rename its own file.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}-{n}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| err(e.to_string()))?;
    std::fs::rename(&tmp, path).map_err(|e| err(e.to_string()))
}

/// A checked, compiled component.
#[derive(Clone)]
pub struct LoadedComponent {
    origin: String,
    sha256: String,
    size_bytes: usize,
    exports: Vec<String>,
    imports: Vec<String>,
    exports_rules: bool,
    exports_policy: bool,
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
    /// Whether it exports `rules`.
    pub fn exports_rules(&self) -> bool {
        self.exports_rules
    }
    /// Whether it exports `policy`.
    pub fn exports_policy(&self) -> bool {
        self.exports_policy
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
    match error.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => format!("ran out of fuel (limit {fuel_limit} units)"),
        Some(trap) => format!("trapped: {trap}"),
        None => format!("gave no valid answer: {error:#}"),
    }
}

/// A configured `policy` export: decides calls, each in a fresh instance of the configured
/// snapshot. `Send + Sync`; cheap to share behind an `Arc`.
pub struct Policy {
    host: ComponentHost,
    pre: InstancePre<GuestState>,
    indices: wit_policy::GuestIndices,
    sha256: String,
    snapshot_cache: CacheOutcome,
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("sha256", &self.sha256)
            .finish_non_exhaustive()
    }
}

impl Policy {
    /// SHA-256 of the component (not of the snapshot), lowercase hex.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Whether the configured snapshot's compiled form came from the cache.
    pub fn snapshot_cache(&self) -> CacheOutcome {
        self.snapshot_cache
    }

    /// One instance of the configured snapshot that decides call after call: the floor of
    /// a component call, for benchmarks only. State carries between its decisions, which
    /// the call path never allows ([`Policy::decide`] starts each from the snapshot).
    ///
    /// # Errors
    /// A reason when no instance can be made.
    pub fn live_instance(&self) -> Result<LivePolicy, String> {
        let mut store = self.host.store(u64::MAX);
        let instance = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| e.to_string())?;
        let guest = self
            .indices
            .load(&mut store, &instance)
            .map_err(|e| e.to_string())?;
        Ok(LivePolicy { store, guest })
    }

    /// The decision on `call`, from a fresh instance of the configured snapshot.
    ///
    /// Fails closed: when the guest traps, runs out of fuel or memory, cannot be
    /// instantiated (no free slot), or answers something that is not a `decision`, the
    /// result is [`Decision::Deny`] whose reason names the component and the failure.
    pub fn decide(&self, call: &CallView) -> Decision {
        let limits = &self.host.inner.limits;
        let mut store = self.host.store(limits.decide_fuel);
        let deny = |reason: String| {
            Decision::Deny(format!(
                "policy component `{}` {reason}; the call is denied",
                short(&self.sha256)
            ))
        };
        let instance = match self.pre.instantiate(&mut store) {
            Ok(i) => i,
            Err(e) => return deny(format!("could not be instantiated: {e}")),
        };
        let guest = match self.indices.load(&mut store, &instance) {
            Ok(g) => g,
            Err(e) => return deny(format!("has an unusable `decide` export: {e}")),
        };
        let facts = wit_facts(call);
        match guest.call_decide(&mut store, to_wit_call(call, &facts)) {
            Ok(wit::Decision::Allow) => Decision::Allow,
            Ok(wit::Decision::Deny(reason)) => Decision::Deny(reason),
            Ok(wit::Decision::Hold(reason)) => Decision::Hold(reason),
            Err(e) => deny(guest_failure(
                &store,
                &e,
                limits.decide_fuel,
                limits.memory_bytes,
            )),
        }
    }
}

/// A live policy instance (see [`Policy::live_instance`]); benchmarks only.
pub struct LivePolicy {
    store: Store<GuestState>,
    guest: wit_policy::Guest,
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
        let facts = wit_facts(call);
        match self
            .guest
            .call_decide(&mut self.store, to_wit_call(call, &facts))
        {
            Ok(wit::Decision::Allow) => Decision::Allow,
            Ok(wit::Decision::Deny(reason)) => Decision::Deny(reason),
            Ok(wit::Decision::Hold(reason)) => Decision::Hold(reason),
            Err(e) => Decision::Deny(e.to_string()),
        }
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
        let mut store = self.host.store(0);
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
        match self.guest.call_classify(&mut self.store, wit_tool) {
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
