//! Pin and load of N tools without process start: the library steps on the bytes of
//! synthetic `tools/list` pages (`benches/support/synthetic.rs`, 1,000 tools a page) of one
//! server, for N = 1,000, 10,000 and 100,000, every tool classified by a rules file.
//!
//! - `pin`: the pages through [`ListingBuilder`] (what `listing::list_tools` does with each
//!   page), [`pin::pin_server`], and the manifest's text ([`Manifest::to_json`], what
//!   `toolward pin` writes);
//! - `load`: the manifest read back ([`Manifest::parse`]), the pages listed again, then
//!   [`load::check_server`] (pin comparison, classification by the rules component in one
//!   instance, schema checks and narrowing) and [`load::register_candidates`];
//! - `load_step/*` (10,000 tools): each step of `load` alone, to see where the time goes;
//! - `configure_rules`: the rules component configured with the rules file of N tools (once
//!   per start, before any load).
//!
//! Listing bounds are raised past their defaults (4,096 tools, 16 MiB a page), as an
//! operator serving 10,000 tools must. Times are the benchmark thread's CPU time
//! (`support/cpu_time.rs`; `TOOLWARD_BENCH_CLOCK=wall` for wall time). Run:
//! `cargo bench --bench load -- --warm-up-time 1 --measurement-time 3`.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a benchmark")]

#[path = "support/cpu_time.rs"]
mod cpu_time;
#[path = "support/synthetic.rs"]
mod synthetic;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::Path;

use cpu_time::CpuTime;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use toolward::component::{ComponentHost, DEFAULT_COMPONENT, GuestLimits, Rules};
use toolward::config::Config;
use toolward::listing::{Listing, ListingBuilder};
use toolward::load::{self, LoadReport, ServerReport};
use toolward::manifest::Manifest;
use toolward::pin;
use toolward::registry::Registry;
use toolward::transport::ServerIdentity;

const SERVER: &str = "bench";
const PER_PAGE: usize = 1_000;

fn identity() -> ServerIdentity {
    ServerIdentity {
        name: "synthetic".into(),
        version: "1.0.0".into(),
        protocol_version: "2025-11-25".into(),
        capabilities: serde_json::json!({ "tools": {} }),
        instructions: None,
    }
}

fn list(pages: &[Vec<u8>]) -> Listing {
    let mut builder = ListingBuilder::new(SERVER, synthetic::unbounded());
    for page in pages {
        builder.push_page(page).unwrap();
    }
    builder.finish()
}

fn pin(pages: &[Vec<u8>], components: &BTreeMap<String, String>) -> String {
    let listing = list(pages);
    let pinned = pin::pin_server(&listing, &identity()).unwrap();
    Manifest {
        components: components.clone(),
        servers: BTreeMap::from([(SERVER.to_owned(), pinned)]),
    }
    .to_json()
}

/// `check_server` and `register_candidates` on a listing against a manifest.
fn verify(config: &Config, rules: &Rules, manifest: &Manifest, listing: &Listing) -> Registry {
    let pattern = load::name_pattern(config).unwrap();
    let mut classifier = rules.classifier().unwrap();
    let mut report = LoadReport::default();
    let mut server = ServerReport {
        server: SERVER.to_owned(),
        ..ServerReport::default()
    };
    let pinned = manifest.servers.get(SERVER).unwrap();
    let candidates = load::check_server(
        config,
        SERVER,
        pinned,
        listing,
        Ok(&mut classifier),
        &mut server,
    );
    report.servers.push(server);
    let mut registry = Registry::new();
    load::register_candidates(config, &pattern, candidates, &mut report, &mut registry);
    registry
}

fn load(config: &Config, rules: &Rules, manifest_text: &str, pages: &[Vec<u8>]) -> Registry {
    let manifest = Manifest::parse(manifest_text.as_bytes()).unwrap();
    let listing = list(pages);
    verify(config, rules, &manifest, &listing)
}

fn bench(c: &mut Criterion<CpuTime>) {
    // A compiled-component cache, as in production: configuring compiles nothing twice.
    let cache = tempfile::tempdir().unwrap();
    // The default component cannot configure the rules file of 100,000 tools (4 MB) within
    // the default guest limits: it runs out of `DEFAULT_CONFIGURE_FUEL` (2e9) and of
    // `DEFAULT_MEMORY_BYTES` (64 MiB). Raised here (fewer instance slots keep the pool's
    // reservation small); the configuration offers no way to raise them.
    let limits = GuestLimits {
        configure_fuel: 20 * toolward::component::DEFAULT_CONFIGURE_FUEL,
        memory_bytes: 1 << 30,
        max_instances: 8,
        ..GuestLimits::default()
    };
    let state = toolward::store::StateDir::open(&cache.path().join("state")).unwrap();
    let cache = toolward::component::ComponentCache::open(&state).unwrap();
    let host = ComponentHost::new(limits, Some(cache)).unwrap();
    let component = host.load(DEFAULT_COMPONENT, "built-in").unwrap();
    let config_text = format!(
        r#"{{"mcpServers":{{"{SERVER}":{{"command":"true"}}}},"rules":{{"file":"rules.json"}}}}"#
    );
    let config = Config::from_str(&config_text, Path::new("/")).unwrap();
    let components = BTreeMap::from([
        ("policy".to_owned(), component.sha256().to_owned()),
        ("rules".to_owned(), component.sha256().to_owned()),
    ]);

    let mut group = c.benchmark_group("pin_load");
    for (tools, samples) in [(1_000, 20), (10_000, 10), (100_000, 10)] {
        let (pages, optional) = synthetic::listing(tools, PER_PAGE);
        let bytes: usize = pages.iter().map(Vec::len).sum();
        let rules_text = synthetic::rules(SERVER, &optional);
        let rules = host.configure_rules(&component, &rules_text).unwrap();
        let manifest_text = pin(&pages, &components);
        // Every tool must register, or the figures would measure refusals.
        let registry = load(&config, &rules, &manifest_text, &pages);
        assert_eq!(registry.tools().count(), tools);
        eprintln!(
            "{tools} tools: {bytes} bytes of pages, {} bytes of manifest, {} bytes of rules",
            manifest_text.len(),
            rules_text.len()
        );

        group.sample_size(samples);
        group.throughput(Throughput::Elements(tools as u64));
        group.bench_function(BenchmarkId::new("pin", tools), |b| {
            b.iter(|| pin(black_box(&pages), &components))
        });
        group.bench_function(BenchmarkId::new("load", tools), |b| {
            // The registry is what a load keeps: its drop is not part of the load.
            b.iter_with_large_drop(|| load(&config, &rules, black_box(&manifest_text), &pages))
        });
        group.bench_function(BenchmarkId::new("configure_rules", tools), |b| {
            b.iter(|| {
                host.configure_rules(&component, black_box(&rules_text))
                    .unwrap()
            })
        });
        if tools == 10_000 {
            let manifest = Manifest::parse(manifest_text.as_bytes()).unwrap();
            let listing = list(&pages);
            group.bench_function("load_step/manifest_parse/10000", |b| {
                b.iter(|| Manifest::parse(black_box(manifest_text.as_bytes())).unwrap())
            });
            group.bench_function("load_step/listing/10000", |b| {
                b.iter(|| list(black_box(&pages)))
            });
            group.bench_function("load_step/check_and_register/10000", |b| {
                b.iter_with_large_drop(|| verify(&config, &rules, &manifest, black_box(&listing)))
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(CpuTime);
    targets = bench
}
criterion_main!(benches);
