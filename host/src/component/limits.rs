//! The bounds on guests: fuel, memory, pooled instances and ready instances, with their defaults.

/// The most policy ids of one decision kept for its audit record (`determined_by`); past
/// it the list ends with `… and N more`, so a component cannot make records unbounded.
pub const MAX_DETERMINED_BY: usize = 64;

/// Fuel for one `decide` call: about that many wasm instructions. The default table
/// decides in a few thousand; 50 million is ample for a custom policy and ends an endless
/// loop in tens of milliseconds.
pub const DEFAULT_DECIDE_FUEL: u64 = 50_000_000;
/// Fuel for one `classify` call, as for [`DEFAULT_DECIDE_FUEL`].
pub const DEFAULT_CLASSIFY_FUEL: u64 = 50_000_000;
/// Fuel for one result review: a review reads every byte of the result (up to the size
/// cap, 1 MiB by default) with each of its patterns.
pub const DEFAULT_REVIEW_FUEL: u64 = 1_000_000_000;
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
/// As [`KEEP_RESIDENT_BYTES`], for a pooled slot's tables: 256 KiB (32,768 function
/// references). A table of one page or less (512 references; the default component's has
/// 57) is still zeroed with a `memset` (wasmtime bounds this by the table's size, and skips
/// the `PAGEMAP_SCAN` system call for one page, which cost more than the `memset`:
/// BENCHMARKS.md §1). A larger table's written pages are found by the scan and reset in
/// place: with one page kept, the Cedar component's other written table pages were returned
/// with `madvise` and faulted back by every decision (2 faults), and keeping them took its
/// decision with 10 policies from 66.9 to 55.6 µs and 66.7 to 54.6 µs in two runs
/// (`cargo bench --bench decide -- ratios`, BENCHMARKS.md §14.2), the default component's
/// unchanged. Two tables a slot ([`TABLES_PER_SLOT`]): at most 512 KiB a used slot keeps
/// resident for its tables, of pages a decision wrote.
pub const TABLE_KEEP_RESIDENT_BYTES: usize = 256 << 10;

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
    /// Fuel for one result `review` call (`results@0.3.0`): a review reads the whole
    /// result, up to the size cap, so it gets more than a decision.
    pub review_fuel: u64,
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
            review_fuel: DEFAULT_REVIEW_FUEL,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            max_instances: DEFAULT_MAX_INSTANCES,
            ready_instances: default_ready_instances(),
        }
    }
}
