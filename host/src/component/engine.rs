//! The engine: pooling setup, loading and checking components, compiling through the cache, configuring and snapshotting.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::sync::atomic::AtomicU64;
use sha2::{Digest, Sha256};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime::component::{Component, Instance, InstancePre, Linker, WasmList};
use wasmtime::component::types::ComponentItem;
use wasmtime_wizer::{ComponentInstanceState, Wizer};
use super::{CORE_INSTANCES_PER_SLOT, CacheOutcome, ComponentCache, ComponentError, DEFAULT_MAX_WASM_STACK, FACTS_INTERFACE, FACTS_INTERFACE_V3, GuestLimits, GuestState, KEEP_RESIDENT_BYTES, LoadedComponent, POLICY_INTERFACE, POLICY_INTERFACE_V2, POLICY_INTERFACE_V3, Policy, RESULTS_INTERFACE, RULES_INTERFACE, Rules, TABLES_PER_SLOT, TABLE_KEEP_RESIDENT_BYTES, VALIDATION_INTERFACE, VALIDATION_INTERFACE_V3, WIT_PACKAGE, wasi, wit2_facts, wit2_policy, wit2_validation, wit3_facts, wit3_policy, wit3_results, wit3_validation, wit_policy, wit_rules};
use super::cache::Lookup;
use super::policy::{FactsIndices, PolicyIndices, PolicyShared, ReadyQueue, ValidationIndices};

/// What a pooled slot keeps resident, reset in place, when its instance ends (where Linux
/// offers `PAGEMAP_SCAN`); the rest is returned to the kernel. Default:
/// [`KEEP_RESIDENT_BYTES`] of linear memory, [`TABLE_KEEP_RESIDENT_BYTES`] of tables.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotReset {
    /// Bytes of linear memory.
    pub memory_bytes: usize,
    /// Bytes of tables.
    pub table_bytes: usize,
}

impl Default for SlotReset {
    fn default() -> Self {
        SlotReset {
            memory_bytes: KEEP_RESIDENT_BYTES,
            table_bytes: TABLE_KEEP_RESIDENT_BYTES,
        }
    }
}

/// One wasmtime engine with its compiled-component cache: the place components are
/// loaded. Cheap to clone (shared).
#[derive(Clone)]
pub struct ComponentHost {
    pub(super) inner: Arc<HostInner>,
}

pub(super) struct HostInner {
    pub(super) engine: Engine,
    pub(super) linker: Linker<GuestState>,
    /// `linker` plus WASI 0.2 granting nothing ([`wasi`]), for components that import it;
    /// built when the first such component loads (most hosts never need it, and linking
    /// WASI's functions touched code and memory at every start).
    pub(super) wasi_linker: OnceLock<Linker<GuestState>>,
    pub(super) limits: GuestLimits,
    pub(super) cache: Option<ComponentCache>,
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
        Self::with_slot_reset(limits, cache, SlotReset::default())
    }

    /// As [`ComponentHost::new`], with what a pooled slot keeps resident when its instance
    /// ends set by `reset` instead of the defaults: for benchmarks that compare settings in
    /// one run (`benches/decide.rs`).
    ///
    /// # Errors
    /// As for [`ComponentHost::new`].
    #[doc(hidden)]
    pub fn with_slot_reset(
        limits: GuestLimits,
        cache: Option<ComponentCache>,
        reset: SlotReset,
    ) -> Result<Self, ComponentError> {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(limits.max_instances)
            .total_core_instances(limits.max_instances.saturating_mul(CORE_INSTANCES_PER_SLOT))
            .total_memories(limits.max_instances)
            .total_tables(limits.max_instances.saturating_mul(TABLES_PER_SLOT))
            .max_memory_size(limits.memory_bytes);
        if PoolingAllocationConfig::is_pagemap_scan_available() {
            pool.linear_memory_keep_resident(reset.memory_bytes)
                .table_keep_resident(reset.table_bytes)
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
            exports_policy: exports.iter().any(|e| {
                e == POLICY_INTERFACE || e == POLICY_INTERFACE_V2 || e == POLICY_INTERFACE_V3
            }),
            exports_policy_v2: exports.iter().any(|e| e == POLICY_INTERFACE_V2),
            exports_policy_v3: exports.iter().any(|e| e == POLICY_INTERFACE_V3),
            exports_results: exports.iter().any(|e| e == RESULTS_INTERFACE),
            exports_validation: exports
                .iter()
                .any(|e| e == VALIDATION_INTERFACE || e == VALIDATION_INTERFACE_V3),
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
        let v3 = component.exports_policy_v3;
        let v2 = component.exports_policy_v2 && !v3;
        let (pre, snapshot_cache) = self.snapshot(component, |store, instance, pre| {
            if v3 {
                let guest = wit3_policy::GuestIndices::new(pre)
                    .and_then(|i| i.load(&mut *store, instance))
                    .map_err(|e| e.to_string())?;
                guest
                    .call_configure(&mut *store, settings)
                    .map_err(|e| e.to_string())
            } else if v2 {
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
        let exports = |name: &str| component.exports.iter().any(|e| e == name);
        let indices = if v3 {
            PolicyIndices::V3(wit3_policy::GuestIndices::new(&pre).map_err(snapshot_err)?)
        } else if v2 {
            PolicyIndices::V2(wit2_policy::GuestIndices::new(&pre).map_err(snapshot_err)?)
        } else {
            PolicyIndices::V1(wit_policy::GuestIndices::new(&pre).map_err(snapshot_err)?)
        };
        // The 0.3.0 `validation` and `facts` go with a 0.3.0 `policy`, as 0.2.0's with 0.2.0.
        let validation = if v3 && exports(VALIDATION_INTERFACE_V3) {
            Some(ValidationIndices::V3(
                wit3_validation::GuestIndices::new(&pre).map_err(snapshot_err)?,
            ))
        } else if exports(VALIDATION_INTERFACE) {
            Some(ValidationIndices::V2(
                wit2_validation::GuestIndices::new(&pre).map_err(snapshot_err)?,
            ))
        } else {
            None
        };
        let facts = if v3 && exports(FACTS_INTERFACE_V3) {
            Some(FactsIndices::V3(
                wit3_facts::GuestIndices::new(&pre).map_err(snapshot_err)?,
            ))
        } else if exports(FACTS_INTERFACE) {
            Some(FactsIndices::V2(
                wit2_facts::GuestIndices::new(&pre).map_err(snapshot_err)?,
            ))
        } else {
            None
        };
        let results = if v3 && exports(RESULTS_INTERFACE) {
            Some(wit3_results::GuestIndices::new(&pre).map_err(snapshot_err)?)
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
                results,
                reviews: std::sync::OnceLock::new(),
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
    pub(super) fn store(&self, fuel: u64, wasi: bool) -> Store<GuestState> {
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
