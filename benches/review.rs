//! Reviewing a 64 KiB text result (issue 30): the default component's `secrets` and
//! `hidden-characters` reviews in the guest, as production runs them (a fresh instance of
//! the configured snapshot per review, the result copied in, the answer copied out), beside
//! two baselines measured in the same run:
//! - `native`: the same reviews, the same patterns (`toolward-result-review`, the crate the
//!   guest is built with), on the same text, natively;
//! - `copy_only`: the guest asked to review the same result with settings that run no
//!   pattern (a tool's `returns` labels only): the instance, the copy in and out.
//!
//! The target: `guest` ≤ 2 × `native` + `copy_only`. The ratio is printed at the end. The
//! text is `result-review/benches/sample.rs`'s. Run: `cargo bench --bench review`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a benchmark"
)]

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use std::hint::black_box;
use std::time::{Duration, Instant};
use toolward::component::{
    CallView, ComponentHost, Effect, GuestLimits, Policy, REVIEWING_COMPONENT, ResultAction,
    ResultView,
};
use toolward_result_review::{Review, Reviewer};

#[path = "../result-review/benches/sample.rs"]
mod sample;

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

/// Mean time of `f` over `runs` after a warm-up, for the printed ratio.
fn mean(runs: u32, mut f: impl FnMut()) -> Duration {
    for _ in 0..runs / 10 {
        f();
    }
    let began = Instant::now();
    for _ in 0..runs {
        f();
    }
    began.elapsed() / runs
}

fn bench(c: &mut Criterion) {
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
    let native = Reviewer::new(&[Review::Secrets, Review::HiddenCharacters]).unwrap();
    let call = call();

    // The guest finds what the native reviewer finds.
    let found = native.review(&text);
    let ResultAction::Redact(spans) = reviewing.review(&call, &result).action else {
        panic!("the guest redacted nothing")
    };
    assert_eq!(spans.len(), found.len());
    assert!(matches!(
        copying.review(&call, &result).action,
        ResultAction::Pass
    ));

    let mut group = c.benchmark_group("review_64k");
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

    let runs = 200;
    let native_t = mean(runs, || {
        black_box(native.review(&text));
    });
    let copy_t = mean(runs, || {
        black_box(copying.review(&call, &result));
    });
    let guest_t = mean(runs, || {
        black_box(reviewing.review(&call, &result));
    });
    let budget = native_t * 2 + copy_t;
    println!(
        "review_64k: guest {guest_t:?}, native {native_t:?}, copy only {copy_t:?}: guest / (2 × native + copy) = {:.2} (target ≤ 1.00); guest / native = {:.2}",
        guest_t.as_secs_f64() / budget.as_secs_f64(),
        guest_t.as_secs_f64() / native_t.as_secs_f64(),
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
