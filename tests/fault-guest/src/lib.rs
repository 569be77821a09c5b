//! A test fixture: a policy component (world `rules-and-policy`) that misbehaves on request.
//!
//! The settings text names the fault: `loop` (never returns), `alloc` (allocates without
//! end), `trap` (executes `unreachable`), `configure-loop` (never returns from `configure`),
//! `count` (denies any call after the first one this instance saw: shows whether state
//! leaks between decisions) or `allow` (behaves: allows every call, classifies every tool
//! read-only). The fault applies to `classify` and `decide`.
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

fn misbehave() {
    match MODE.get().map(String::as_str) {
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

    fn classify(_tool: Tool) -> Option<Classification> {
        misbehave();
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
        misbehave();
        let seen = CALLS_SEEN.fetch_add(1, Ordering::Relaxed);
        if MODE.get().map(String::as_str) == Some("count") && seen > 0 {
            return Decision::Deny(format!("call `{}` saw {seen} earlier calls", call.id));
        }
        Decision::Allow
    }
}

export!(Component);
