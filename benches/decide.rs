//! `decide()` as production runs it (a fresh instance of the configured snapshot per
//! decision), beside two baselines measured in the same run: a call on an already live
//! instance (the floor of a component call) and the native decision table (the test
//! oracle). Run: `cargo bench --bench decide`.
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
//! `cargo bench --bench decide -- cedar`.
//!
//! JavaScript (`js_example_inline`, issue 19): `examples/js-policy` built by jco beside the
//! Rust `examples/custom-policy` it mirrors (`rust_example_inline`), same settings, same
//! call, each decision a fresh instance instantiated inline; compile (cold and from the
//! cache) and configure times are printed. Set `TOOLWARD_JS_POLICY_WASM` to the built
//! component; run only these: `cargo bench --bench decide -- example`. Python
//! (`python_example_inline`) the same way, from `TOOLWARD_PYTHON_POLICY_WASM`
//! (`examples/python-policy`, built by componentize-py).
//!
//! Before the measurements, the CPU time per decision of the first and last case is
//! printed, worker thread included (`CLOCK_PROCESS_CPUTIME_ID` less the benchmark thread's
//! time outside `decide`), so that the latency of the first is not mistaken for its cost.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a benchmark")]

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::{Duration, Instant};
use toolward::component::{
    CEDAR_COMPONENT, CallView, ComponentHost, DEFAULT_COMPONENT, Decision, Effect, GuestLimits,
    Policy,
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
    let host = ComponentHost::new(limits, None).unwrap();
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
    let host = ComponentHost::new(limits.clone(), Some(cache())).unwrap();
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
    let host = ComponentHost::new(limits, None).unwrap();
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

criterion_group!(benches, decide);
criterion_main!(benches);
