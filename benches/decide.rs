//! `decide()` as production runs it (a fresh instance of the configured snapshot per
//! decision), beside two baselines measured in the same run: a call on an already live
//! instance (the floor of a component call) and the native decision table (the test
//! oracle). Run: `cargo bench --features native-cedar --bench decide`.
//!
//! Three cases of the production path, because a policy keeps fresh instances ready
//! ([`GuestLimits::ready_instances`]) with a worker thread that also drops used ones:
//! - `fresh_instance`: decisions spaced out enough for the worker to keep up (each waits,
//!   untimed, until the policy's instances are all ready again), as tool calls arrive in
//!   production; the time is the decision's latency only.
//! - `fresh_instance_back_to_back`: decisions one after the other, faster than the worker
//!   prepares instances, so most instantiate inline; the split is printed.
//! - `fresh_instance_inline`: `ready_instances: 0`, every decision instantiates and drops
//!   its own instance (the path before instances were kept ready).
//!
//! Cedar (`cedar_*`, issue 16): the built-in Cedar component deciding the same call with
//! `examples/cedar/policy.cedar` plus generated policies, 10 and 200 in all, each decision
//! a fresh instance instantiated inline (compare with `fresh_instance_inline`); the time to
//! configure (parse and snapshot) 1,000 policies is printed. Run only these:
//! `cargo bench --features native-cedar --bench decide -- cedar`.
//!
//! JavaScript (`js_example_inline`, issue 19): `examples/js-policy` built by jco beside the
//! Rust `examples/custom-policy` it mirrors (`rust_example_inline`), same settings, same
//! call, each decision a fresh instance instantiated inline; compile (cold and from the
//! cache) and configure times are printed. Set `TOOLWARD_JS_POLICY_WASM` to the built
//! component; run only these: `cargo bench --features native-cedar --bench decide -- example`. Python
//! (`python_example_inline`) the same way, from `TOOLWARD_PYTHON_POLICY_WASM`
//! (`examples/python-policy`, built by componentize-py).
//!
//! Native Cedar (`native_cedar_*`, issue 34.3): `cedar-policy`, the version the component is
//! built with, deciding the same call with the same policies in this process
//! (`support/native_cedar.rs`): the request built from the call, evaluated, read into an
//! outcome, as the component does per decision; `native_cedar_*_evaluate` is Cedar's
//! `is_authorized` alone on a request built beforehand.
//!
//! `ratios` (`cargo bench --features native-cedar --bench decide -- ratios`, not a criterion benchmark): issue 34's
//! targets in one run, from interleaved rounds (each round times every case, so that a change
//! in the machine's load falls on all of them), the median of the rounds, in the benchmark
//! thread's CPU time (`support/cpu_time.rs`; `TOOLWARD_BENCH_CLOCK=wall` for wall time):
//! Cedar with 10 and 200 policies against native Cedar (targets ≤ 2× and ≤ 3×), and the
//! JavaScript and Python examples against the Rust one (≤ 5×, ≤ 10×) when their components
//! are given as above. `DECIDE_RATIO_ROUNDS` rounds (default 15); `DECIDE_RATIO_ONLY=NAME`
//! times only the cases whose names hold `NAME` (to profile one).
//!
//! Before the measurements, the CPU time per decision of the first and last case is
//! printed, worker thread included (`CLOCK_PROCESS_CPUTIME_ID` less the benchmark thread's
//! time outside `decide`), so that the latency of the first is not mistaken for its cost.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a benchmark")]

#[path = "support/cpu_time.rs"]
#[allow(
    dead_code,
    reason = "only its clock is read here, not its criterion measurement"
)]
mod cpu_time;
#[path = "support/native_cedar.rs"]
mod native_cedar;

use criterion::{Criterion, criterion_group};
use native_cedar::NativeCedar;
use std::hint::black_box;
use std::time::{Duration, Instant};
use toolward::component::{
    CEDAR_COMPONENT, CallView, ComponentHost, DEFAULT_COMPONENT, Decision, Effect, GuestLimits,
    Policy, SlotReset,
};
use toolward_policy_table::Rules;

const RULES: &str = include_str!("../examples/mcp/rules.json");
const CEDAR_EXAMPLE: &str = include_str!("../examples/cedar/policy.cedar");
/// Policies in the example: the rest of each Cedar case is generated.
const CEDAR_EXAMPLE_POLICIES: usize = 5;

/// The example's policies and generated ones, `total` in all: permits, forbids with
/// argument conditions and holds, for other tools and servers, so that each is evaluated
/// (its scope checked) and none changes the decision on `call()`.
fn cedar_policies(total: usize) -> String {
    let mut text = CEDAR_EXAMPLE.to_owned();
    for i in 0..total.saturating_sub(CEDAR_EXAMPLE_POLICIES) {
        text.push_str(&match i % 4 {
            0 => format!(
                "@id(\"g{i}\") permit(principal, action, resource == Toolward::Tool::\"s{i}/t{i}\") when {{ resource.effect == \"read-only\" }};\n"
            ),
            1 => format!(
                "@id(\"g{i}\") forbid(principal, action, resource) when {{ context.arguments has path && context.arguments.path == \"/etc/secret{i}\" }};\n"
            ),
            2 => format!(
                "@id(\"g{i}\") @hold(\"check {i}\") permit(principal, action, resource in Toolward::Server::\"s{i}\");\n"
            ),
            _ => format!(
                "@id(\"g{i}\") forbid(principal == Toolward::Principal::\"p{i}\", action, resource);\n"
            ),
        });
    }
    text
}

fn cedar_configured(limits: GuestLimits, total: usize) -> (Policy, Duration) {
    cedar_configured_with(limits, total, SlotReset::default())
}

fn cedar_configured_with(
    limits: GuestLimits,
    total: usize,
    reset: SlotReset,
) -> (Policy, Duration) {
    let host = ComponentHost::with_slot_reset(limits, None, reset).unwrap();
    let component = host.load(CEDAR_COMPONENT, "built-in-cedar").unwrap();
    let policies = cedar_policies(total);
    let began = Instant::now();
    let policy = host.configure_policy(&component, &policies).unwrap();
    (policy, began.elapsed())
}

fn call() -> CallView {
    CallView {
        id: "01JBENCH000000000000000000".into(),
        server: "fs".into(),
        tool: "write_file".into(),
        effect: Effect::LocalChange,
        arguments: r#"{"content":"hello","path":"notes.txt"}"#.into(),
        arguments_sha256: toolward::canonical::sha256_hex(
            br#"{"content":"hello","path":"notes.txt"}"#,
        ),
        principal: "operator".into(),
        session: "bench".into(),
        principal_attributes: Vec::new(),
        labels: Default::default(),
        time_ms: 1_700_000_000_000,
        facts: vec![("tool.forwarded.minute".into(), "3".into())],
    }
}

const CUSTOM_SETTINGS: &str = include_str!("../examples/custom-policy/settings.json");

/// A custom-policy component (`bytes`) configured with the example's settings, with no
/// ready instances; and its compile time cold (no cache), from the compiled-component cache,
/// and configure's time (run `configure`, snapshot, compile the snapshot).
fn custom_configured(bytes: &[u8], origin: &str) -> (Policy, (Duration, Duration, Duration)) {
    custom_configured_with(bytes, origin, SlotReset::default())
}

fn custom_configured_with(
    bytes: &[u8],
    origin: &str,
    reset: SlotReset,
) -> (Policy, (Duration, Duration, Duration)) {
    let limits = GuestLimits {
        ready_instances: 0,
        ..GuestLimits::default()
    };
    let temp = tempfile::tempdir().unwrap();
    // A state folder toolward makes itself: it refuses one others can read (mode 0700).
    let state = temp.path().join("state");
    let cache = || {
        let dir = toolward::store::StateDir::open(&state).unwrap();
        toolward::component::ComponentCache::open(&dir).unwrap()
    };
    let began = Instant::now();
    let host = ComponentHost::with_slot_reset(limits.clone(), Some(cache()), reset).unwrap();
    let component = host.load(bytes, origin).unwrap();
    let cold = began.elapsed();
    let warm_host = ComponentHost::new(limits, Some(cache())).unwrap();
    let began = Instant::now();
    warm_host.load(bytes, origin).unwrap();
    let warm = began.elapsed();
    let began = Instant::now();
    let policy = host.configure_policy(&component, CUSTOM_SETTINGS).unwrap();
    (policy, (cold, warm, began.elapsed()))
}

fn configured(limits: GuestLimits) -> Policy {
    configured_with(limits, SlotReset::default())
}

fn configured_with(limits: GuestLimits, reset: SlotReset) -> Policy {
    let host = ComponentHost::with_slot_reset(limits, None, reset).unwrap();
    let component = host.load(DEFAULT_COMPONENT, "built-in").unwrap();
    host.configure_policy(&component, RULES).unwrap()
}

#[expect(
    unsafe_code,
    reason = "clock_gettime is a libc call; its only argument is a timespec it fills"
)]
fn cpu(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Waits (untimed) until `policy` has an instance ready (none when `depth` is 0), so the
/// next decision takes one. The worker refills only once none is left (or `depth` used ones
/// wait to be dropped), so it may still be preparing the next while the decision runs, as
/// when tool calls come close together.
fn wait_ready(policy: &Policy, depth: usize) {
    let began = Instant::now();
    while depth > 0 && policy.ready_instances() == 0 {
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "the policy's worker never made {depth} instances ready"
        );
        std::thread::yield_now();
    }
}

/// CPU time per decision over `n` decisions, all threads of the process: the time of the
/// `decide` calls on this thread plus everything the other threads (the policy's worker)
/// spent meanwhile. Returns (total, of which in `decide` on this thread).
fn cpu_per_decision(
    policy: &Policy,
    depth: usize,
    call: &CallView,
    n: u32,
) -> (Duration, Duration) {
    let (process0, thread0) = (
        cpu(libc::CLOCK_PROCESS_CPUTIME_ID),
        cpu(libc::CLOCK_THREAD_CPUTIME_ID),
    );
    let mut in_decide = Duration::ZERO;
    for _ in 0..n {
        wait_ready(policy, depth);
        let t = cpu(libc::CLOCK_THREAD_CPUTIME_ID);
        black_box(policy.decide(black_box(call)));
        in_decide += cpu(libc::CLOCK_THREAD_CPUTIME_ID) - t;
    }
    // Let the worker finish the round it is in (refilling and dropping), counted below.
    wait_ready(policy, depth);
    std::thread::sleep(Duration::from_millis(20));
    let (process1, thread1) = (
        cpu(libc::CLOCK_PROCESS_CPUTIME_ID),
        cpu(libc::CLOCK_THREAD_CPUTIME_ID),
    );
    let other_threads = (process1 - process0).saturating_sub(thread1 - thread0);
    ((in_decide + other_threads) / n, in_decide / n)
}

fn decide(c: &mut Criterion) {
    // Ready instances whatever the machine's cores (the default keeps none below
    // `READY_MIN_CORES`), so the ready path is measured here too.
    let limits = GuestLimits {
        ready_instances: toolward::component::DEFAULT_READY_INSTANCES,
        ..GuestLimits::default()
    };
    let depth = limits.ready_instances.min(limits.max_instances / 8) as usize;
    let policy = configured(limits.clone());
    let inline = configured(GuestLimits {
        ready_instances: 0,
        ..limits
    });
    let mut live = policy.live_instance().unwrap();
    let native = Rules::parse(RULES).unwrap();
    let call = call();
    assert_eq!(policy.decide(&call), live.decide(&call));
    assert_eq!(inline.decide(&call), live.decide(&call));

    let (ready_total, ready_decide) = cpu_per_decision(&policy, depth, &call, 20_000);
    let (inline_total, _) = cpu_per_decision(&inline, 0, &call, 20_000);
    println!(
        "CPU per decision, all threads: ready instances {:.2} µs (in decide {:.2} µs, worker {:.2} µs); inline {:.2} µs",
        ready_total.as_secs_f64() * 1e6,
        ready_decide.as_secs_f64() * 1e6,
        (ready_total - ready_decide).as_secs_f64() * 1e6,
        inline_total.as_secs_f64() * 1e6,
    );

    let mut group = c.benchmark_group("decide");
    group.bench_function("fresh_instance", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                wait_ready(&policy, depth);
                let began = Instant::now();
                black_box(policy.decide(black_box(&call)));
                total += began.elapsed();
            }
            total
        })
    });
    let before = policy.ready_stats();
    group.bench_function("fresh_instance_back_to_back", |b| {
        b.iter(|| policy.decide(black_box(&call)))
    });
    let after = policy.ready_stats();
    println!(
        "back to back: {} decisions took a ready instance, {} instantiated inline",
        after.from_ready - before.from_ready,
        after.inline - before.inline
    );
    group.bench_function("fresh_instance_inline", |b| {
        b.iter(|| inline.decide(black_box(&call)))
    });
    group.bench_function("baseline_live_instance", |b| {
        b.iter(|| live.decide(black_box(&call)))
    });
    let inline_limits = GuestLimits {
        ready_instances: 0,
        ..GuestLimits::default()
    };
    let (cedar_10, _) = cedar_configured(inline_limits.clone(), 10);
    let (cedar_200, _) = cedar_configured(inline_limits.clone(), 200);
    let (_, configure_1000) = cedar_configured(inline_limits, 1000);
    println!(
        "Cedar: configure (parse and snapshot) of 1000 policies {:.1} ms",
        configure_1000.as_secs_f64() * 1e3
    );
    for cedar in [&cedar_10, &cedar_200] {
        assert!(
            matches!(cedar.decide(&call), Decision::Hold(_)),
            "{:?}",
            cedar.answer(&call)
        );
    }
    group.bench_function("cedar_10_policies_inline", |b| {
        b.iter(|| cedar_10.decide(black_box(&call)))
    });
    group.bench_function("cedar_200_policies_inline", |b| {
        b.iter(|| cedar_200.decide(black_box(&call)))
    });
    for (total, guest) in [(10, &cedar_10), (200, &cedar_200)] {
        let native = NativeCedar::new(&cedar_policies(total));
        assert_eq!(native.decide(&call), guest.decide(&call));
        let prepared = native.prepare(&call);
        group.bench_function(format!("native_cedar_{total}_policies"), |b| {
            b.iter(|| native.decide(black_box(&call)))
        });
        group.bench_function(format!("native_cedar_{total}_policies_evaluate"), |b| {
            b.iter(|| native.evaluate(black_box(&prepared)))
        });
    }
    // The JavaScript and Python examples (issue 19) beside the Rust example they mirror,
    // all with `examples/custom-policy/settings.json`, each decision a fresh instance
    // instantiated inline. The JavaScript component is built by `jco`
    // (`TOOLWARD_JS_POLICY_WASM` names it; the tests leave it in `target/tmp/js-guests/`),
    // the Python one by componentize-py (`TOOLWARD_PYTHON_POLICY_WASM`; the tests leave it
    // in `target/tmp/python-policy/`).
    let rust = std::fs::read(toolward::guests::CUSTOM_POLICY_WASM).unwrap();
    let mut rust_example = None;
    for (language, variable, origin, case) in [
        (
            "JavaScript",
            "TOOLWARD_JS_POLICY_WASM",
            "js-policy",
            "js_example_inline",
        ),
        (
            "Python",
            "TOOLWARD_PYTHON_POLICY_WASM",
            "python-policy",
            "python_example_inline",
        ),
    ] {
        let Some(path) = std::env::var_os(variable) else {
            println!("{language}: skipped (set {variable} to the built example component)");
            continue;
        };
        let bytes = std::fs::read(path).unwrap();
        let (policy, (cold, warm, configure)) = custom_configured(&bytes, origin);
        println!(
            "{language} example ({} bytes): compile cold {:.2} s, from the cache {:.1} ms; configure (run and snapshot) {:.1} ms",
            bytes.len(),
            cold.as_secs_f64(),
            warm.as_secs_f64() * 1e3,
            configure.as_secs_f64() * 1e3,
        );
        let rust_policy = &rust_example
            .get_or_insert_with(|| {
                let (policy, (cold, warm, configure)) = custom_configured(&rust, "custom-policy");
                println!(
                    "Rust example ({} bytes): compile cold {:.2} s, from the cache {:.1} ms; configure (run and snapshot) {:.1} ms",
                    rust.len(),
                    cold.as_secs_f64(),
                    warm.as_secs_f64() * 1e3,
                    configure.as_secs_f64() * 1e3,
                );
                policy
            });
        assert_eq!(
            policy.decide(&call),
            rust_policy.decide(&call),
            "{language}"
        );
        group.bench_function(case, |b| b.iter(|| policy.decide(black_box(&call))));
    }
    if let Some(rust_policy) = &rust_example {
        group.bench_function("rust_example_inline", |b| {
            b.iter(|| rust_policy.decide(black_box(&call)))
        });
    }
    group.bench_function("baseline_native_table", |b| {
        b.iter(|| {
            native.decide(
                black_box(&call.server),
                black_box(&call.tool),
                black_box(call.effect),
            )
        })
    });
    group.finish();
}

/// One case of the interleaved rounds: its name, its times, and what it runs.
type Case<'a> = (String, Vec<Duration>, Box<dyn FnMut() + 'a>);

/// Mean time of `f` over `runs`, on [`cpu_time::now`]'s clock.
fn mean(runs: u32, f: &mut dyn FnMut()) -> Duration {
    let began = cpu_time::now();
    for _ in 0..runs {
        f();
    }
    cpu_time::now().saturating_sub(began) / runs
}

/// The median of `times`.
fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

/// Minor page faults of this thread so far.
#[expect(
    unsafe_code,
    reason = "getrusage is a libc call; its only argument is an rusage it fills"
)]
fn minor_faults() -> i64 {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage for the call's duration.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    usage.ru_minflt
}

/// A built example component named by `variable`, if set.
fn example_bytes(variable: &str) -> Option<Vec<u8>> {
    std::env::var_os(variable).map(|path| std::fs::read(path).unwrap())
}

/// Issue 34's targets (items 3 and 4) as ratios from interleaved rounds: Cedar beside
/// native Cedar, and the JavaScript and Python examples beside the Rust one.
fn ratios() {
    let rounds: usize = std::env::var("DECIDE_RATIO_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(15);
    let inline_limits = GuestLimits {
        ready_instances: 0,
        ..GuestLimits::default()
    };
    let call = call();
    let native_10 = NativeCedar::new(&cedar_policies(10));
    let native_200 = NativeCedar::new(&cedar_policies(200));
    let (prepared_10, prepared_200) = (native_10.prepare(&call), native_200.prepare(&call));
    // The pooled slots' reset as configured, and, with `DECIDE_KEEP_RESIDENT=MEMORY:TABLES`
    // (bytes), as set there: each guest case then runs under both, in the same rounds.
    let mut resets = vec![("", SlotReset::default())];
    if let Ok(setting) = std::env::var("DECIDE_KEEP_RESIDENT") {
        let (memory, table) = setting
            .split_once(':')
            .expect("DECIDE_KEEP_RESIDENT=MEMORY:TABLES");
        let reset = SlotReset {
            memory_bytes: memory.parse().unwrap(),
            table_bytes: table.parse().unwrap(),
        };
        resets.push((" (keep-resident set)", reset));
    }
    let mut guests: Vec<(String, Policy)> = Vec::new();
    for (suffix, reset) in &resets {
        let (cedar_10, _) = cedar_configured_with(inline_limits.clone(), 10, *reset);
        let (cedar_200, _) = cedar_configured_with(inline_limits.clone(), 200, *reset);
        for (native, guest) in [(&native_10, &cedar_10), (&native_200, &cedar_200)] {
            assert_eq!(native.decide(&call), guest.decide(&call));
        }
        let rust = std::fs::read(toolward::guests::CUSTOM_POLICY_WASM).unwrap();
        let (rust_example, _) = custom_configured_with(&rust, "custom-policy", *reset);
        guests.push((
            format!("fresh_instance_inline{suffix}"),
            configured_with(inline_limits.clone(), *reset),
        ));
        for (case, variable, origin) in [
            ("js_example_inline", "TOOLWARD_JS_POLICY_WASM", "js-policy"),
            (
                "python_example_inline",
                "TOOLWARD_PYTHON_POLICY_WASM",
                "python-policy",
            ),
        ] {
            if let Some(bytes) = example_bytes(variable) {
                let (policy, _) = custom_configured_with(&bytes, origin, *reset);
                assert_eq!(policy.decide(&call), rust_example.decide(&call), "{case}");
                guests.push((format!("{case}{suffix}"), policy));
            }
        }
        guests.push((format!("rust_example_inline{suffix}"), rust_example));
        guests.push((format!("cedar_10_policies_inline{suffix}"), cedar_10));
        guests.push((format!("cedar_200_policies_inline{suffix}"), cedar_200));
    }

    let mut cases: Vec<Case<'_>> = vec![
        (
            "native_cedar_10_policies".into(),
            Vec::new(),
            Box::new(|| {
                black_box(native_10.decide(black_box(&call)));
            }),
        ),
        (
            "native_cedar_10_policies_evaluate".into(),
            Vec::new(),
            Box::new(|| {
                black_box(native_10.evaluate(black_box(&prepared_10)));
            }),
        ),
        (
            "native_cedar_200_policies".into(),
            Vec::new(),
            Box::new(|| {
                black_box(native_200.decide(black_box(&call)));
            }),
        ),
        (
            "native_cedar_200_policies_evaluate".into(),
            Vec::new(),
            Box::new(|| {
                black_box(native_200.evaluate(black_box(&prepared_200)));
            }),
        ),
    ];
    let call = &call;
    for (case, policy) in &guests {
        cases.push((
            case.clone(),
            Vec::new(),
            Box::new(move || {
                black_box(policy.decide(black_box(call)));
            }),
        ));
    }
    // `DECIDE_RATIO_ONLY=name`: only the cases whose names hold `name` (for a profile).
    if let Ok(only) = std::env::var("DECIDE_RATIO_ONLY") {
        cases.retain(|(name, _, _)| name.contains(&only));
    }
    // Runs per round: about 20 ms of each case, from a warm-up of 10 runs.
    let runs: Vec<u32> = cases
        .iter_mut()
        .map(|(_, _, f)| {
            let once = mean(10, f.as_mut()).max(Duration::from_nanos(100));
            (Duration::from_millis(20).as_nanos() / once.as_nanos()).clamp(5, 100_000) as u32
        })
        .collect();
    for _ in 0..rounds {
        for ((_, times, f), runs) in cases.iter_mut().zip(&runs) {
            times.push(mean(*runs, f.as_mut()));
        }
    }
    // Page faults per decision (minor: copy-on-write copies and zero pages): what the
    // kernel's share of a decision is made of.
    let faults: Vec<f64> = cases
        .iter_mut()
        .zip(&runs)
        .map(|((_, _, f), runs)| {
            let before = minor_faults();
            for _ in 0..*runs {
                f();
            }
            (minor_faults() - before) as f64 / f64::from(*runs)
        })
        .collect();
    let medians: Vec<(String, Duration)> = cases
        .into_iter()
        .map(|(name, mut times, _)| (name, median(&mut times)))
        .collect();
    let of = |name: &str| {
        medians
            .iter()
            .find(|(case, _)| case == name)
            .map(|(_, t)| t.as_secs_f64())
    };
    println!(
        "decide, median of {rounds} interleaved rounds (µs a decision; minor page faults a decision):"
    );
    for ((name, time), faults) in medians.iter().zip(&faults) {
        println!(
            "  {name:<36} {:>10.2} µs {faults:>8.1} faults",
            time.as_secs_f64() * 1e6
        );
    }
    let ratio = |label: &str, case: &str, base: &str, target: Option<f64>| {
        if let (Some(case), Some(base)) = (of(case), of(base)) {
            let target = target.map_or(String::new(), |t| format!(" (target ≤ {t})"));
            println!("  {label}: {:.2}×{target}", case / base);
        }
    };
    println!("ratios:");
    ratio(
        "Cedar 10 ÷ native Cedar 10",
        "cedar_10_policies_inline",
        "native_cedar_10_policies",
        Some(2.0),
    );
    ratio(
        "Cedar 200 ÷ native Cedar 200",
        "cedar_200_policies_inline",
        "native_cedar_200_policies",
        Some(3.0),
    );
    ratio(
        "Cedar 10 ÷ native evaluation alone",
        "cedar_10_policies_inline",
        "native_cedar_10_policies_evaluate",
        None,
    );
    ratio(
        "Cedar 200 ÷ native evaluation alone",
        "cedar_200_policies_inline",
        "native_cedar_200_policies_evaluate",
        None,
    );
    ratio(
        "Cedar 10 ÷ default component",
        "cedar_10_policies_inline",
        "fresh_instance_inline",
        None,
    );
    ratio(
        "JavaScript ÷ Rust example",
        "js_example_inline",
        "rust_example_inline",
        Some(5.0),
    );
    ratio(
        "Python ÷ Rust example",
        "python_example_inline",
        "rust_example_inline",
        Some(10.0),
    );
    for (suffix, reset) in resets.iter().skip(1) {
        println!("with {reset:?}:");
        for case in [
            "fresh_instance_inline",
            "rust_example_inline",
            "cedar_10_policies_inline",
            "cedar_200_policies_inline",
            "js_example_inline",
            "python_example_inline",
        ] {
            ratio(
                &format!("{case}: set ÷ configured"),
                &format!("{case}{suffix}"),
                case,
                None,
            );
        }
    }
}

criterion_group!(benches, decide);

fn main() {
    if std::env::args().skip(1).any(|a| a == "ratios") {
        ratios();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
