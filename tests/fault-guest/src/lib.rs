//! A test fixture: a policy component (world `rules-and-policy`) that misbehaves on request.
//!
//! The settings text names the fault: `loop` (never returns), `alloc` (allocates without
//! end), `trap` (executes `unreachable`), `configure-loop` (never returns from `configure`),
//! `count` (denies any call after the first one this instance saw: shows whether state
//! leaks between decisions) or `allow` (behaves: allows every call, classifies every tool
//! read-only). The fault applies to `classify` and `decide`; settings `MODE for TOOL` apply it
//! only to the tool named `TOOL` (its name on its server), and allow or classify the others
//! as `allow` does, so a test can show that one tool's fault leaves the next call whole.
#![cfg(target_family = "wasm")]
#![allow(
    unsafe_code,
    reason = "the exports wit-bindgen generates are unsafe extern functions"
)]
#![expect(clippy::panic, reason = "a trap is this fixture's purpose")]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

wit_bindgen::generate!({
    path: "../../wit",
    world: "rules-and-policy",
});

use exports::toolward::policy::policy::{Call, Decision, Guest as PolicyGuest};
use exports::toolward::policy::rules::{Classification, Guest as RulesGuest, Tool};
use toolward::policy::types::Effect;

static MODE: OnceLock<String> = OnceLock::new();
static CALLS_SEEN: AtomicU32 = AtomicU32::new(0);

struct Component;

fn configure(settings: String) -> Result<(), String> {
    if settings == "configure-loop" {
        spin();
    }
    let _ = MODE.set(settings);
    Ok(())
}

fn spin() -> ! {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

/// The mode and, for `MODE for TOOL`, the one tool it applies to.
fn mode() -> (&'static str, Option<&'static str>) {
    let settings = MODE.get().map_or("", String::as_str);
    match settings.split_once(" for ") {
        Some((mode, tool)) => (mode, Some(tool)),
        None => (settings, None),
    }
}

fn misbehave(tool: &str) {
    let (mode, only) = mode();
    if only.is_some_and(|only| only != tool) {
        return;
    }
    match Some(mode) {
        Some("loop") => spin(),
        Some("alloc") => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                // Reserve without writing, so memory, not fuel, runs out first.
                let mut block: Vec<u8> = Vec::with_capacity(16 << 20);
                block.push(1);
                hoard.push(block);
                std::hint::black_box(&hoard);
            }
        }
        Some("trap") => panic!("the fixture traps on purpose"),
        _ => {}
    }
}

impl RulesGuest for Component {
    fn configure(settings: String) -> Result<(), String> {
        configure(settings)
    }

    fn classify(tool: Tool) -> Option<Classification> {
        misbehave(&tool.name);
        Some(Classification {
            effect: Effect::ReadOnly,
            denied_parameters: Vec::new(),
            fixed_parameters: Vec::new(),
            description_override: None,
            allow_hint_mismatch: false,
        })
    }
}

impl PolicyGuest for Component {
    fn configure(settings: String) -> Result<(), String> {
        configure(settings)
    }

    fn decide(call: Call) -> Decision {
        misbehave(&call.tool);
        let seen = CALLS_SEEN.fetch_add(1, Ordering::Relaxed);
        if mode().0 == "count" && seen > 0 {
            return Decision::Deny(format!("call `{}` saw {seen} earlier calls", call.id));
        }
        Decision::Allow
    }
}

export!(Component);
