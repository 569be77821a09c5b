//! [`Reviewer::review`] on 64 KiB of a tool result: prose, JSON, a log with ANSI colours, a
//! URL, some non-ASCII text, and a few secrets (a GitHub token, an AWS key id, a JWT, a
//! base64-encoded Slack token, a percent-encoded GitHub token, a private key block) and hidden
//! characters spread through it.
//!
//! Cases, each over the same text:
//! - `all`: both reviews, as a policy would run them;
//! - `secrets`, `hidden-characters`: each review alone;
//! - `all/clean`: both reviews on 64 KiB of the same prose, JSON and log without a finding.
//!
//! Run: `cargo bench -p toolward-result-review --bench review` (`-- --quick` for a short run).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a benchmark")]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use toolward_result_review::{Review, Reviewer};

#[path = "sample.rs"]
mod sample;
use sample::{secrets, text};

fn bench(c: &mut Criterion) {
    let mixed = text(&secrets());
    let clean = text(&[]);
    let all = Reviewer::new(&Review::ALL).unwrap();
    let found = all.review(&mixed);
    assert!(
        found.iter().any(|f| f.kind == "secret:github-pat"),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|f| f.kind == "secret:slack-bot-token+base64"),
        "{found:?}"
    );
    assert!(
        found.iter().any(|f| f.kind == "secret:github-pat+percent"),
        "{found:?}"
    );
    assert!(found.iter().any(|f| f.kind == "secret:jwt"), "{found:?}");
    assert!(
        found.iter().any(|f| f.kind == "secret:private-key"),
        "{found:?}"
    );
    assert!(found.iter().any(|f| f.kind == "hidden:bidi"), "{found:?}");
    assert!(
        found.iter().any(|f| f.kind == "hidden:escape-sequence"),
        "{found:?}"
    );
    let clean_found = all.review(&clean);
    assert!(
        clean_found
            .iter()
            .all(|f| f.kind == "hidden:escape-sequence"),
        "{clean_found:?}"
    );

    let mut group = c.benchmark_group("review");
    group.throughput(Throughput::Bytes(mixed.len() as u64));
    for (name, reviews) in [
        ("all", &Review::ALL[..]),
        ("secrets", &[Review::Secrets][..]),
        ("hidden-characters", &[Review::HiddenCharacters][..]),
    ] {
        let reviewer = Reviewer::new(reviews).unwrap();
        group.bench_with_input(BenchmarkId::new(name, "64KiB"), &mixed, |b, text| {
            b.iter(|| reviewer.review(black_box(text)));
        });
    }
    group.bench_with_input(BenchmarkId::new("all/clean", "64KiB"), &clean, |b, text| {
        b.iter(|| all.review(black_box(text)));
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
