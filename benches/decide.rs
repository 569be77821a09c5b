//! `decide()` as production runs it (a fresh instance of the configured snapshot per
//! decision), beside two baselines measured in the same run: a call on an already live
//! instance (the floor of a component call) and the native decision table (the test
//! oracle). Run: `cargo bench --bench decide`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a benchmark")]

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use toolward::component::{CallView, ComponentHost, DEFAULT_COMPONENT, Effect, GuestLimits};
use toolward_policy_table::Rules;

const RULES: &str = include_str!("../examples/mcp/rules.json");

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
        time_ms: 1_700_000_000_000,
        facts: Vec::new(),
    }
}

fn decide(c: &mut Criterion) {
    let host = ComponentHost::new(GuestLimits::default(), None).unwrap();
    let component = host.load(DEFAULT_COMPONENT, "built-in").unwrap();
    let policy = host.configure_policy(&component, RULES).unwrap();
    let mut live = policy.live_instance().unwrap();
    let native = Rules::parse(RULES).unwrap();
    let call = call();
    assert_eq!(policy.decide(&call), live.decide(&call));

    let mut group = c.benchmark_group("decide");
    group.bench_function("fresh_instance", |b| {
        b.iter(|| policy.decide(black_box(&call)))
    });
    group.bench_function("baseline_live_instance", |b| {
        b.iter(|| live.decide(black_box(&call)))
    });
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
