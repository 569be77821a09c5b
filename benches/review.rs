//! Reviewing a 64 KiB text result (issue 30): the default component's `secrets` and
//! `hidden-characters` reviews in the guest, as production runs them (a fresh instance of
//! the configured snapshot per review, the result copied in, the answer copied out), beside
//! three baselines measured in the same run:
//! - `native_regex`: the same reviews, the same patterns, on the same text, natively, with
//!   every search on the `regex` crate (`Reviewer::on_regex`: the alternation of a search's
//!   patterns, a group each), as issue 30 names the baseline;
//! - `native`: the same reviews natively as the guest runs them (`toolward-result-review`,
//!   the crate the guest is built with: the DFAs compiled ahead of time, with Teddy and
//!   `memchr` natively): the stricter baseline;
//! - `copy_only`: the guest asked to review the same result with settings that run no
//!   pattern (a tool's `returns` labels only): the instance, the copy in and out.
//!
//! The target: `guest` ≤ 2 × `native_regex` + `copy_only`; printed at the end with the
//! stricter ratio against `native`, from interleaved rounds (each round times every case, so
//! that a change in the machine's load falls on all of them), median of the rounds. Times are
//! the benchmark thread's CPU time (`support/cpu_time.rs`; `TOOLWARD_BENCH_CLOCK=wall` for
//! wall time). The text is `result-review/benches/sample.rs`'s. Run: `cargo bench --bench
//! review`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a benchmark"
)]

#[path = "support/cpu_time.rs"]
mod cpu_time;

use cpu_time::CpuTime;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use std::hint::black_box;
use std::time::Duration;
use toolward::component::{
    CallView, ComponentHost, Effect, GuestLimits, Policy, REVIEWING_COMPONENT, ResultAction,
    ResultView,
};
use toolward_result_review::{Review, Reviewer};

#[path = "../result-review/benches/sample.rs"]
mod sample;

/// One case of the interleaved rounds: its name, its times, and what it runs.
type Case<'a> = (&'static str, Vec<Duration>, Box<dyn FnMut() + 'a>);

fn configured(rules: &serde_json::Value) -> Policy {
    let host = ComponentHost::new(GuestLimits::default(), None).unwrap();
    // Both configurations on the reviewing variant, so that the copy-only baseline pays for
    // the same component.
    let component = host.load(REVIEWING_COMPONENT, "built-in").unwrap();
    host.configure_policy(&component, &rules.to_string())
        .unwrap()
}

fn call() -> CallView {
    CallView {
        id: String::from("01JBENCH"),
        server: String::from("fs"),
        tool: String::from("read_text_file"),
        effect: Effect::ReadOnly,
        arguments: String::from(r#"{"path":"/srv/report.txt"}"#),
        arguments_sha256: String::new(),
        principal: String::from("operator"),
        principal_attributes: Vec::new(),
        session: String::from("s"),
        labels: Default::default(),
        time_ms: 0,
        facts: Vec::new(),
    }
}

/// Mean time of `f` over `runs`.
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

fn bench(c: &mut Criterion<CpuTime>) {
    let text = sample::text(&sample::secrets());
    let result = ResultView::of(
        &[json!({"type": "text", "text": text})],
        None,
        false,
        text.len() as u64,
    );
    let tool_rule = json!({"effect": "read-only", "returns": {"confidentiality": "private"}});
    let reviewing = configured(&json!({
        "reviews": ["secrets", "hidden-characters"],
        "servers": {"fs": {"tools": {"read_text_file": tool_rule}}}
    }));
    let copying = configured(&json!({"servers": {"fs": {"tools": {"read_text_file": tool_rule}}}}));
    let reviews = [Review::Secrets, Review::HiddenCharacters];
    let native = Reviewer::new(&reviews).unwrap();
    let native_regex = Reviewer::on_regex(&reviews).unwrap();
    let call = call();

    // The guest finds what the native reviewers find.
    let found = native.review(&text);
    assert_eq!(native_regex.review(&text), found);
    let ResultAction::Redact(spans) = reviewing.review(&call, &result).action else {
        panic!("the guest redacted nothing")
    };
    assert_eq!(spans.len(), found.len());
    assert!(matches!(
        copying.review(&call, &result).action,
        ResultAction::Pass
    ));

    let mut group = c.benchmark_group("review_64k");
    group.bench_function("native_regex", |b| {
        b.iter(|| black_box(native_regex.review(black_box(&text))))
    });
    group.bench_function("native", |b| {
        b.iter(|| black_box(native.review(black_box(&text))))
    });
    group.bench_function("copy_only", |b| {
        b.iter(|| black_box(copying.review(black_box(&call), black_box(&result))))
    });
    group.bench_function("guest", |b| {
        b.iter(|| black_box(reviewing.review(black_box(&call), black_box(&result))))
    });
    group.finish();

    // Interleaved rounds for the ratios.
    let (rounds, runs) = (15, 40);
    let mut cases: [Case<'_>; 4] = [
        (
            "native_regex",
            Vec::new(),
            Box::new(|| {
                black_box(native_regex.review(black_box(&text)));
            }),
        ),
        (
            "native",
            Vec::new(),
            Box::new(|| {
                black_box(native.review(black_box(&text)));
            }),
        ),
        (
            "copy_only",
            Vec::new(),
            Box::new(|| {
                black_box(copying.review(black_box(&call), black_box(&result)));
            }),
        ),
        (
            "guest",
            Vec::new(),
            Box::new(|| {
                black_box(reviewing.review(black_box(&call), black_box(&result)));
            }),
        ),
    ];
    for (_, _, f) in &mut cases {
        mean(runs / 4, f.as_mut());
    }
    for _ in 0..rounds {
        for (_, times, f) in &mut cases {
            times.push(mean(runs, f.as_mut()));
        }
    }
    let [regex_t, native_t, copy_t, guest_t] = cases.map(|(_, mut times, _)| median(&mut times));
    let ratio = |native: Duration| guest_t.as_secs_f64() / (native * 2 + copy_t).as_secs_f64();
    println!(
        "review_64k, median of {rounds} interleaved rounds of {runs}: guest {guest_t:?}, native_regex {regex_t:?}, native {native_t:?}, copy_only {copy_t:?}"
    );
    println!(
        "review_64k: guest / (2 × native_regex + copy_only) = {:.2} (target ≤ 1.00); guest / (2 × native + copy_only) = {:.2}; (guest - copy_only) / native = {:.2}",
        ratio(regex_t),
        ratio(native_t),
        guest_t.saturating_sub(copy_t).as_secs_f64() / native_t.as_secs_f64(),
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(CpuTime);
    targets = bench
}
criterion_main!(benches);
