//! Canonical form + SHA-256 of tools' input schemas, in bytes of listing per second, beside
//! the floor measured in the same run: `serde_json::from_slice::<serde_json::Value>` of the
//! same bytes. Inputs: the real reference servers' `tools/list` results
//! (`benches/data/*.json`, captured by `benches/data/capture.py`) and synthetic listings of
//! 1,000, 10,000 and 100,000 tools (`benches/support/synthetic.rs`, one page each).
//!
//! Cases, each over the whole listing:
//! - `canonical_sha256`: [`canonical::parse`], then for each tool the canonical text of its
//!   `inputSchema` and its SHA-256, as [`listing`] computes `input_schema_sha256`;
//! - `parse_page`: [`listing::parse_page`], everything listing does to a page (the hashes
//!   above and of descriptions, the per-entry size bound on canonical text, the hidden
//!   character and depth checks);
//! - `floor_serde_json`: `serde_json::from_slice::<serde_json::Value>`.
//!
//! Times are the benchmark thread's CPU time (`support/cpu_time.rs`; `TOOLWARD_BENCH_CLOCK=wall`
//! for wall time). Run: `cargo bench --bench canonical -- --warm-up-time 1 --measurement-time 3`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a benchmark")]

#[path = "support/cpu_time.rs"]
mod cpu_time;
#[path = "support/synthetic.rs"]
mod synthetic;

use cpu_time::CpuTime;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use toolward::canonical::{self, Value};
use toolward::listing;

const REAL: &[(&str, &str)] = &[
    ("filesystem", include_str!("data/filesystem.json")),
    ("everything", include_str!("data/everything.json")),
    ("memory", include_str!("data/memory.json")),
    ("git", include_str!("data/git.json")),
    ("time", include_str!("data/time.json")),
];

fn canonical_sha256(bytes: &[u8]) -> usize {
    let page = canonical::parse(bytes).unwrap();
    let tools = page.get("tools").and_then(Value::as_array).unwrap();
    let mut hashed = 0;
    for tool in tools {
        let schema = tool.get("inputSchema").unwrap();
        let sha = canonical::sha256_hex(canonical::to_canonical(schema).as_bytes());
        hashed += sha.len();
    }
    hashed
}

fn cases(c: &mut Criterion<CpuTime>, group: &str, inputs: &[(String, Vec<u8>)], samples: usize) {
    let bounds = synthetic::unbounded();
    let mut group = c.benchmark_group(group);
    group.sample_size(samples);
    for (name, bytes) in inputs {
        // Every tool must be well-formed, or the figures would measure the error path.
        let page = listing::parse_page("bench", 1, bytes, &bounds).unwrap();
        assert!(page.entries.iter().all(|e| e.tool.is_ok()), "{name}");
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("canonical_sha256", name),
            bytes,
            |b, bytes| b.iter(|| canonical_sha256(black_box(bytes))),
        );
        group.bench_with_input(BenchmarkId::new("parse_page", name), bytes, |b, bytes| {
            b.iter(|| listing::parse_page("bench", 1, black_box(bytes), &bounds).unwrap())
        });
        group.bench_with_input(
            BenchmarkId::new("floor_serde_json", name),
            bytes,
            |b, bytes| {
                b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(bytes)).unwrap())
            },
        );
    }
    group.finish();
}

fn real(c: &mut Criterion<CpuTime>) {
    let inputs: Vec<(String, Vec<u8>)> = REAL
        .iter()
        .map(|(name, text)| ((*name).to_owned(), text.as_bytes().to_vec()))
        .collect();
    cases(c, "canonical_real", &inputs, 100);
}

fn synthetic(c: &mut Criterion<CpuTime>) {
    for (tools, samples) in [(1_000, 50), (10_000, 20), (100_000, 10)] {
        let (mut pages, _) = synthetic::listing(tools, usize::MAX);
        let bytes = pages.pop().unwrap();
        let name = format!("{}k_tools", tools / 1000);
        eprintln!("{name}: {} bytes", bytes.len());
        cases(c, "canonical_synthetic", &[(name, bytes)], samples);
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(CpuTime);
    targets = real, synthetic
}
criterion_main!(benches);
