//! Pin and load of N tools without process start: the library steps on the bytes of
//! synthetic `tools/list` pages (`benches/support/synthetic.rs`, 1,000 tools a page) of one
//! server, for N = 1,000, 10,000 and 100,000, every tool classified by a rules file.
//!
//! - `pin`: the pages through [`ListingBuilder`] (what `listing::list_tools` does with each
//!   page), [`pin_server`], and the manifest's text ([`Manifest::to_json`], what
//!   `toolward pin` writes);
//! - `load`: the manifest read back ([`Manifest::parse`]), the pages listed again, then
//!   [`load::check_server`] (pin comparison, classification by the rules component in one
//!   instance, schema checks and narrowing) and [`load::register_candidates`], with no state
//!   folder (every schema's validator compiled, [`Verdicts::memory`]);
//! - `load_step/*` (10,000 tools): each step of `load` alone, to see where the time goes;
//! - `configure_rules`: the rules component configured with the rules file of N tools (once
//!   per start, before any load).
//!
//! - `ratios` (`cargo bench --bench load -- ratios`, not a criterion benchmark): the
//!   targets of issue 15 as ratios in one run. For each N of `LOAD_RATIO_TOOLS` (default
//!   `10000,100000`), `LOAD_RATIO_ROUNDS` rounds (default 5), each round timing one after
//!   another: the floor (`serde_json` parsing the listing's pages into a `Value`, nothing
//!   else), pin, load through the state folder ([`Manifest::read_through`], the manifest's
//!   compact form present, and the schema verdicts [`Verdicts::open`]: what every start after
//!   the first reads), and load reading the pretty manifest in full ([`Manifest::read`]) with
//!   every validator compiled (what a start reads with nothing kept from the one before).
//!   Medians, then `pin + load ÷ floor` and the growth per tool from the first N to the last.
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
use std::time::Duration;

use cpu_time::CpuTime;
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group};
use toolward::component::{ComponentHost, DEFAULT_COMPONENT, GuestLimits, Rules};
use toolward::config::Config;
use toolward::listing::{Listing, ListingBuilder};
use toolward::load::verdicts::Verdicts;
use toolward::load::{self, LoadReport, ServerReport};
use toolward::manifest::Manifest;
use toolward::pin::pin_server;
use toolward::registry::Registry;
use toolward::store::StateDir;
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
    let pinned = pin_server(listing, &identity()).unwrap();
    Manifest {
        components: components.clone(),
        servers: BTreeMap::from([(SERVER.to_owned(), pinned)]),
    }
    .to_json()
}

/// `check_server` and `register_candidates` on a listing against a manifest.
fn verify(
    config: &Config,
    rules: &Rules,
    manifest: &Manifest,
    listing: Listing,
    verdicts: &mut Verdicts,
) -> Registry {
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
        verdicts,
        &mut server,
    );
    report.servers.push(server);
    let mut registry = Registry::new();
    load::register_candidates(config, &pattern, candidates, &mut report, &mut registry);
    registry
}

/// Load with the manifest read from its file through its compact form in `state`, and the
/// schema verdicts kept there.
fn load_through(
    config: &Config,
    rules: &Rules,
    manifest_path: &Path,
    state: &StateDir,
    pages: &[Vec<u8>],
) -> Registry {
    let manifest = Manifest::read_through(manifest_path, state).unwrap();
    let mut verdicts = Verdicts::open(state);
    let listing = list(pages);
    let registry = verify(config, rules, &manifest, listing, &mut verdicts);
    verdicts.save();
    registry
}

/// Load with the manifest file read and verified in full, every validator compiled.
fn load_full(config: &Config, rules: &Rules, manifest_path: &Path, pages: &[Vec<u8>]) -> Registry {
    let manifest = Manifest::read(manifest_path).unwrap();
    let listing = list(pages);
    verify(config, rules, &manifest, listing, &mut Verdicts::memory())
}

fn load(config: &Config, rules: &Rules, manifest_text: &str, pages: &[Vec<u8>]) -> Registry {
    let manifest = Manifest::parse(manifest_text.as_bytes()).unwrap();
    let listing = list(pages);
    verify(config, rules, &manifest, listing, &mut Verdicts::memory())
}

/// The rules component's host and the config every measurement uses.
struct Setup {
    _dir: tempfile::TempDir,
    state: StateDir,
    host: ComponentHost,
    component: toolward::component::LoadedComponent,
    config: Config,
    components: BTreeMap<String, String>,
}

fn setup() -> Setup {
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
    let state = StateDir::open(&cache.path().join("state")).unwrap();
    let component_cache = toolward::component::ComponentCache::open(&state).unwrap();
    let host = ComponentHost::new(limits, Some(component_cache)).unwrap();
    let component = host.load(DEFAULT_COMPONENT, "built-in").unwrap();
    let config_text = format!(
        r#"{{"mcpServers":{{"{SERVER}":{{"command":"true"}}}},"rules":{{"file":"rules.json"}}}}"#
    );
    let config = Config::from_str(&config_text, Path::new("/")).unwrap();
    let components = BTreeMap::from([
        ("policy".to_owned(), component.sha256().to_owned()),
        ("rules".to_owned(), component.sha256().to_owned()),
    ]);
    Setup {
        _dir: cache,
        state,
        host,
        component,
        config,
        components,
    }
}

/// The median of `values`.
fn median(values: &mut [Duration]) -> Duration {
    values.sort();
    values[values.len() / 2]
}

/// Each step's thread CPU time, in one run (see the module documentation).
fn ratios() {
    let s = setup();
    let sizes: Vec<usize> = std::env::var("LOAD_RATIO_TOOLS")
        .unwrap_or_else(|_| String::from("10000,100000"))
        .split(',')
        .map(|n| n.trim().parse().unwrap())
        .collect();
    let rounds: usize = std::env::var("LOAD_RATIO_ROUNDS")
        .ok()
        .map_or(5, |n| n.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let manifest_path = dir.path().join("manifest.json");
    let mut per_tool = Vec::new();
    println!("N | floor | pin | load (compact) | load (full) | pin + load ÷ floor (compact; full)");
    for tools in sizes {
        let (pages, optional) = synthetic::listing(tools, PER_PAGE);
        let rules = s
            .host
            .configure_rules(&s.component, &synthetic::rules(SERVER, &optional))
            .unwrap();
        let manifest_text = pin(&pages, &s.components);
        std::fs::write(&manifest_path, &manifest_text).unwrap();
        // The first start after a pin writes the compact form and the schema verdicts; every
        // round reads them.
        let registry = load_through(&s.config, &rules, &manifest_path, &s.state, &pages);
        assert_eq!(registry.tools().count(), tools);
        drop(registry);
        let time = |f: &mut dyn FnMut()| {
            let begin = cpu_time::now();
            f();
            cpu_time::now().saturating_sub(begin)
        };
        let mut figures: [Vec<Duration>; 4] = Default::default();
        for _ in 0..rounds {
            figures[0].push(time(&mut || {
                for page in &pages {
                    black_box(serde_json::from_slice::<serde_json::Value>(page).unwrap());
                }
            }));
            figures[1].push(time(&mut || {
                black_box(pin(&pages, &s.components));
            }));
            // The registry's drop is not part of a load.
            let mut kept = None;
            figures[2].push(time(&mut || {
                kept = Some(load_through(
                    &s.config,
                    &rules,
                    &manifest_path,
                    &s.state,
                    &pages,
                ));
            }));
            drop(kept.take());
            figures[3].push(time(&mut || {
                kept = Some(load_full(&s.config, &rules, &manifest_path, &pages));
            }));
            drop(kept);
        }
        let [floor, pinned, compact, full] = figures.map(|mut f| median(&mut f));
        let ratio = |load: Duration| (pinned + load).as_secs_f64() / floor.as_secs_f64();
        println!(
            "{tools} | {floor:.1?} | {pinned:.1?} | {compact:.1?} | {full:.1?} | {:.2}× ; {:.2}×",
            ratio(compact),
            ratio(full)
        );
        per_tool.push((tools, (pinned + compact).as_secs_f64() / tools as f64));
    }
    if let (Some(first), Some(last)) = (per_tool.first(), per_tool.last())
        && first.0 != last.0
    {
        println!(
            "pin + load (compact) per tool: ×{:.2} from {} to {} tools",
            last.1 / first.1,
            first.0,
            last.0
        );
    }
}

fn bench(c: &mut Criterion<CpuTime>) {
    let Setup {
        _dir,
        state: _,
        host,
        component,
        config,
        components,
    } = setup();

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
                // The listing is the load's own (`check_server` consumes it): its copy is
                // made outside the measurement, and the registry's drop is left out too.
                b.iter_batched(
                    || listing.clone(),
                    |listing| {
                        verify(
                            &config,
                            &rules,
                            &manifest,
                            black_box(listing),
                            &mut Verdicts::memory(),
                        )
                    },
                    BatchSize::LargeInput,
                )
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
fn main() {
    if std::env::args().skip(1).any(|a| a == "ratios") {
        ratios();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
