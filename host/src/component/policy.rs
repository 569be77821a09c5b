//! The decision path: a configured `policy` export, its ready instances, and each decision in a fresh instance.

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use wasmtime::Store;
use wasmtime::component::InstancePre;
use super::{BlockKind, CacheOutcome, CallView, ComponentHost, Decision, Effect, GuestState, Labels, MAX_DETERMINED_BY, RegisteredToolView, ResultAction, ResultView, ReviewAnswer, Span, effect_to_wit, guest_failure, short, wasi, wit, wit2, wit2_facts, wit2_policy, wit2_validation, wit3, wit3_facts, wit3_policy, wit3_results, wit3_validation, wit_policy};

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
pub(super) struct PolicyShared {
    pub(super) host: ComponentHost,
    pub(super) pre: InstancePre<GuestState>,
    pub(super) indices: PolicyIndices,
    /// The `validation` export, when the component has one.
    pub(super) validation: Option<ValidationIndices>,
    /// The `facts` export, when the component has one.
    pub(super) facts: Option<FactsIndices>,
    /// The `results@0.3.0` export, when the component has one.
    pub(super) results: Option<wit3_results::GuestIndices>,
    /// What `results.reviews` answered, asked on first use.
    pub(super) reviews: std::sync::OnceLock<ReviewSettings>,
    pub(super) sha256: String,
    /// Whether the component imports WASI: its calls then run off the Tokio runtime
    /// ([`wasi::off_runtime`]) with the call's clock and random seed.
    pub(super) wasi: bool,
    pub(super) queue: Mutex<ReadyQueue>,
    /// Wakes the worker: no instance is left ready, the used ones reached the policy's
    /// depth, or the policy is dropping.
    pub(super) wake: Condvar,
    pub(super) from_ready: AtomicU64,
    pub(super) inline: AtomicU64,
}

/// A fresh instance of the snapshot that has run nothing yet, its fuel set for a decision.
pub(super) struct FreshInstance {
    store: Store<GuestState>,
    guest: PolicyGuest,
}

/// The `policy` export of a configured snapshot, by its WIT version.
pub(super) enum PolicyIndices {
    V1(wit_policy::GuestIndices),
    V2(wit2_policy::GuestIndices),
    V3(wit3_policy::GuestIndices),
}

/// The `validation` export of a configured snapshot, by its WIT version.
pub(super) enum ValidationIndices {
    V2(wit2_validation::GuestIndices),
    V3(wit3_validation::GuestIndices),
}

/// The `facts` export of a configured snapshot, by its WIT version.
pub(super) enum FactsIndices {
    V2(wit2_facts::GuestIndices),
    V3(wit3_facts::GuestIndices),
}

/// The `policy` export of an instance, by its WIT version.
enum PolicyGuest {
    V1(wit_policy::Guest),
    V2(wit2_policy::Guest),
    V3(wit3_policy::Guest),
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
            PolicyGuest::V3(guest) => {
                let parts = Wit3CallParts::of(call);
                let verdict = guest.call_decide(store, parts.call(call))?;
                Ok(PolicyAnswer {
                    decision: from_wit3(verdict.decision),
                    determined_by: Some(bounded_ids(verdict.determined_by)),
                    output: None,
                })
            }
        }
    }
}

/// The lists a 0.3.0 `call` borrows, built from a [`CallView`].
struct Wit3CallParts<'a> {
    facts: Vec<wit3::Fact<'a>>,
    attributes: Vec<wit3::Attribute<'a>>,
    /// Owned: the record is also a result type (of `review`), so bindgen gives it owned
    /// strings.
    labels: wit3::Labels,
}

impl<'a> Wit3CallParts<'a> {
    fn of(call: &'a CallView) -> Self {
        Wit3CallParts {
            facts: call
                .facts
                .iter()
                .map(|(name, value)| wit3::Fact { name, value })
                .collect(),
            attributes: call
                .principal_attributes
                .iter()
                .map(|(name, value)| wit3::Attribute { name, value })
                .collect(),
            labels: wit3::Labels {
                untrusted: call.labels.untrusted,
                confidentiality: call.labels.confidentiality.clone(),
                tags: call.labels.tags.clone(),
            },
        }
    }

    fn call(&'a self, call: &'a CallView) -> wit3::Call<'a> {
        wit3::Call {
            id: &call.id,
            server: &call.server,
            tool: &call.tool,
            effect: effect_to_wit3(call.effect),
            arguments: &call.arguments,
            arguments_sha256: &call.arguments_sha256,
            principal: &call.principal,
            principal_attributes: &self.attributes,
            session: &call.session,
            labels: &self.labels,
            time_ms: call.time_ms,
            facts: &self.facts,
        }
    }
}

/// What a component's settings review (`results@0.3.0`'s `review-settings`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReviewSettings {
    /// The names of the reviews run; empty: none, no result is copied into the component.
    pub reviews: Vec<String>,
    /// The confidentiality levels, lowest first; empty: `public`, `private`.
    pub levels: Vec<String>,
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

pub(super) struct ReadyQueue {
    /// Instances no decision has used, at most the policy's depth.
    pub(super) ready: Vec<FreshInstance>,
    /// Stores a decision has used, for the worker to drop; at most the policy's depth.
    pub(super) used: Vec<Store<GuestState>>,
    /// The worker waits on `wake` for work; whoever gives it work notifies and clears this.
    pub(super) worker_idle: bool,
    pub(super) shutdown: bool,
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
            PolicyIndices::V3(indices) => indices.load(&mut store, &instance).map(PolicyGuest::V3),
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
    pub(super) fn new(shared: PolicyShared, snapshot_cache: CacheOutcome) -> Policy {
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
        let scopes = match indices {
            FactsIndices::V2(indices) => indices
                .load(&mut store, &instance)
                .ok()?
                .call_read_scopes(&mut store),
            FactsIndices::V3(indices) => indices
                .load(&mut store, &instance)
                .ok()?
                .call_read_scopes(&mut store),
        };
        match scopes {
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

    /// What the configured settings review and how they rank confidentiality
    /// (`results@0.3.0`'s `reviews`, asked once in a fresh instance and remembered). No
    /// reviews (a component without `results`, or settings that run none): no result is
    /// copied into the component. A component that cannot say (it traps, runs out of fuel)
    /// is taken to review every result, named `reviews (unknown)`: failing closed, its
    /// reviews then withhold.
    pub fn reviews(&self) -> &ReviewSettings {
        self.shared.reviews.get_or_init(|| {
            let shared = &*self.shared;
            let Some(indices) = &shared.results else {
                return ReviewSettings::default();
            };
            let mut store = shared
                .host
                .store(shared.host.inner.limits.configure_fuel, shared.wasi);
            let asked = shared
                .pre
                .instantiate(&mut store)
                .and_then(|instance| indices.load(&mut store, &instance))
                .and_then(|guest| guest.call_reviews(&mut store));
            match asked {
                Ok(settings) => ReviewSettings {
                    reviews: settings.reviews,
                    levels: settings.levels,
                },
                Err(e) => {
                    tracing::warn!(
                        "policy component `{}` could not say which results it reviews ({e}); every result is reviewed",
                        short(&shared.sha256)
                    );
                    ReviewSettings {
                        reviews: vec![String::from("reviews (unknown)")],
                        levels: Vec::new(),
                    }
                }
            }
        })
    }

    /// The review of `result`, the result of `call`, in a fresh instance of the configured
    /// snapshot with [`GuestLimits::review_fuel`](super::GuestLimits::review_fuel).
    ///
    /// Fails closed: a component without `results@0.3.0` passes (it reviews nothing; the
    /// caller asks only when [`Policy::reviews`] is not empty); a trap, exhausted fuel or
    /// memory, or no free instance is [`ResultAction::Withhold`] naming the component and
    /// the failure, with `determined_by` empty.
    pub fn review(&self, call: &CallView, result: &ResultView) -> ReviewAnswer {
        let shared = &*self.shared;
        let limits = &shared.host.inner.limits;
        let withhold = |reason: String| ReviewAnswer {
            action: ResultAction::Withhold(format!(
                "policy component `{}` {reason}; the result is withheld",
                short(&shared.sha256)
            )),
            labels: Labels::default(),
            determined_by: Vec::new(),
        };
        let Some(indices) = &shared.results else {
            return ReviewAnswer {
                action: ResultAction::Pass,
                labels: Labels::default(),
                determined_by: Vec::new(),
            };
        };
        let mut store = shared.host.store(limits.review_fuel, shared.wasi);
        let guest = match shared
            .pre
            .instantiate(&mut store)
            .and_then(|instance| indices.load(&mut store, &instance))
        {
            Ok(guest) => guest,
            Err(e) => return withhold(format!("could not be instantiated for a review: {e}")),
        };
        let parts = Wit3CallParts::of(call);
        let blocks: Vec<wit3::Block<'_>> = result
            .blocks
            .iter()
            .map(|block| wit3::Block {
                kind: block_kind_to_wit3(block.kind),
                text: &block.text,
                mime_type: block.mime_type.as_deref(),
                uri: &block.uri,
                size: block.size,
                sha256: &block.sha256,
            })
            .collect();
        let returned = wit3::ToolResult {
            is_error: result.is_error,
            blocks: &blocks,
            received_bytes: result.received_bytes,
        };
        let reviewed = if shared.wasi {
            store
                .data_mut()
                .wasi()
                .begin_call(call.time_ms, call.arguments_sha256.as_bytes());
            wasi::off_runtime(|| guest.call_review(&mut store, parts.call(call), returned))
        } else {
            guest.call_review(&mut store, parts.call(call), returned)
        };
        match reviewed {
            Ok(answer) => from_wit3_review(answer, result),
            Err(e) => withhold(guest_failure(
                &store,
                &e,
                limits.review_fuel,
                limits.memory_bytes,
            )),
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
        let unusable = |e: wasmtime::Error| {
            format!(
                "policy component `{}` has an unusable `validate` export: {e}",
                short(&shared.sha256)
            )
        };
        let validated = match indices {
            ValidationIndices::V2(indices) => {
                let guest = indices.load(&mut store, &instance).map_err(unusable)?;
                let wit_tools: Vec<wit2::RegisteredTool<'_>> = tools
                    .iter()
                    .map(|tool| wit2::RegisteredTool {
                        server: &tool.server,
                        name: &tool.name,
                        effect: effect_to_wit2(tool.effect),
                        input_schema: &tool.input_schema,
                    })
                    .collect();
                if shared.wasi {
                    wasi::off_runtime(|| guest.call_validate(&mut store, &wit_tools))
                } else {
                    guest.call_validate(&mut store, &wit_tools)
                }
            }
            ValidationIndices::V3(indices) => {
                let guest = indices.load(&mut store, &instance).map_err(unusable)?;
                let wit_tools: Vec<wit3::RegisteredTool<'_>> = tools
                    .iter()
                    .map(|tool| wit3::RegisteredTool {
                        server: &tool.server,
                        name: &tool.name,
                        effect: effect_to_wit3(tool.effect),
                        input_schema: &tool.input_schema,
                    })
                    .collect();
                if shared.wasi {
                    wasi::off_runtime(|| guest.call_validate(&mut store, &wit_tools))
                } else {
                    guest.call_validate(&mut store, &wit_tools)
                }
            }
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

/// A reason a guest wrote, as the host passes it on (to the client in a tool error, to the
/// approver, to the audit): control, bidirectional and other hidden characters escaped
/// (`crate::text::escape`), so a component taken from someone else cannot drive a terminal
/// or forge a line of toolward's own output.
fn guest_text(reason: &str) -> String {
    crate::text::escape(reason)
}

/// A guest's `decision` as the host's.
fn from_wit(decision: wit::Decision) -> Decision {
    match decision {
        wit::Decision::Allow => Decision::Allow,
        wit::Decision::Deny(reason) => Decision::Deny(guest_text(&reason)),
        wit::Decision::Hold(reason) => Decision::Hold(guest_text(&reason)),
    }
}

/// A 0.2.0 guest's `decision` as the host's.
fn from_wit2(decision: wit2::Decision) -> Decision {
    match decision {
        wit2::Decision::Allow => Decision::Allow,
        wit2::Decision::Deny(reason) => Decision::Deny(guest_text(&reason)),
        wit2::Decision::Hold(reason) => Decision::Hold(guest_text(&reason)),
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

fn from_wit3(decision: wit3::Decision) -> Decision {
    match decision {
        wit3::Decision::Allow => Decision::Allow,
        wit3::Decision::Deny(reason) => Decision::Deny(guest_text(&reason)),
        wit3::Decision::Hold(reason) => Decision::Hold(guest_text(&reason)),
    }
}

fn effect_to_wit3(effect: Effect) -> wit3::Effect {
    match effect {
        Effect::ReadOnly => wit3::Effect::ReadOnly,
        Effect::LocalChange => wit3::Effect::LocalChange,
        Effect::RemoteChange => wit3::Effect::RemoteChange,
        Effect::Destructive => wit3::Effect::Destructive,
    }
}

fn block_kind_to_wit3(kind: BlockKind) -> wit3::BlockKind {
    match kind {
        BlockKind::Text => wit3::BlockKind::Text,
        BlockKind::Structured => wit3::BlockKind::Structured,
        BlockKind::ResourceText => wit3::BlockKind::ResourceText,
        BlockKind::ResourceLink => wit3::BlockKind::ResourceLink,
        BlockKind::Image => wit3::BlockKind::Image,
        BlockKind::Audio => wit3::BlockKind::Audio,
        BlockKind::Blob => wit3::BlockKind::Blob,
        BlockKind::Other => wit3::BlockKind::Other,
    }
}

/// The most spans one review may return; more withholds the result (a review that finds
/// that much to redact should withhold it itself).
pub const MAX_SPANS: usize = 10_000;

/// A guest's review as the host's; spans are checked against `result` (block index, byte
/// range inside the text, character boundaries): a span that does not fit withholds the
/// result, naming the span, since a redaction that cannot be applied must not deliver the
/// text it was meant to hide.
fn from_wit3_review(answer: wit3::ReviewAnswer, result: &ResultView) -> ReviewAnswer {
    let labels = Labels {
        untrusted: answer.labels.untrusted,
        confidentiality: answer.labels.confidentiality,
        tags: {
            let mut tags = answer.labels.tags;
            tags.sort();
            tags.dedup();
            tags
        },
    };
    let determined_by = bounded_ids(answer.determined_by);
    let action = match answer.action {
        wit3::ResultAction::Pass => ResultAction::Pass,
        wit3::ResultAction::Withhold(reason) => ResultAction::Withhold(guest_text(&reason)),
        wit3::ResultAction::Hold(reason) => ResultAction::Hold(guest_text(&reason)),
        wit3::ResultAction::Redact(spans) if spans.len() > MAX_SPANS => ResultAction::Withhold(
            format!(
                "the review asked for {} redactions, more than the {MAX_SPANS} allowed",
                spans.len()
            ),
        ),
        wit3::ResultAction::Redact(spans) => {
            let mut checked = Vec::with_capacity(spans.len());
            let mut refused = None;
            for span in spans {
                let (block, start, end) = (span.block as usize, span.start as usize, span.end as usize);
                let fits = result.blocks.get(block).is_some_and(|b| {
                    b.kind.has_text()
                        && start < end
                        && b.text.is_char_boundary(start)
                        && b.text.is_char_boundary(end)
                        && end <= b.text.len()
                });
                if !fits {
                    refused = Some(format!(
                        "the review asked to redact bytes {start}..{end} of block {block}, which is not a range of that block's text on character boundaries"
                    ));
                    break;
                }
                checked.push(Span {
                    block,
                    start,
                    end,
                    kind: span.kind,
                });
            }
            match refused {
                Some(reason) => ResultAction::Withhold(reason),
                None => ResultAction::Redact(checked),
            }
        }
    };
    ReviewAnswer {
        action,
        labels,
        determined_by,
    }
}
