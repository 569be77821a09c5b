//! Hostile JavaScript policy components (issue 19, item 5), configured as
//! `policy.component` in front of the fake server and run through [`Toolward::start`]: the
//! guest `tests/data/js-guests/hostile.js`, built by jco with every WASI feature disabled,
//! tries one thing for tool `bomb` (its settings say which). What JavaScript can catch, the
//! guest catches and puts in its deny reason, so the test asserts what the guest saw; what
//! it cannot (a trap, exhausted fuel or memory) the host denies. Every denial is audited,
//! and the next call works.

use super::policy_faults::{assert_denied_then_next_call_works, records_of, with_policy};
use super::*;

/// The hostile guest, built (once per content, shared with `js_policy.rs`), or `None`.
fn hostile_guest(test: &str) -> Option<std::path::PathBuf> {
    crate::js_policy::js_component(
        test,
        &crate::support::repo().join("tests/data/js-guests/hostile.js"),
    )
}

/// Starts toolward on the hostile guest trying `mode` for `bomb`, calls `s__bomb` `calls`
/// times (10 ms apart), and returns the guest's own reasons, after checking that each call
/// was denied with its reason, on the record; then `s__t` goes through. `None` when the
/// guest cannot be built here.
async fn guest_saw(test: &str, mode: &str, calls: usize) -> Option<Vec<String>> {
    let wasm = hostile_guest(test)?;
    let (bench, toolward) = with_policy(test, &wasm, &format!("{mode} for bomb")).await;
    let mut reasons = Vec::new();
    for _ in 0..calls {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        let result = call(&toolward, "s__bomb").await;
        assert_eq!(
            result.outcome,
            toolward::call::CallOutcome::Denied,
            "{}",
            result.text()
        );
        let records = records_of(&bench, &result.call_id);
        let decision = records.iter().find(|r| r["kind"] == "decision").unwrap();
        assert_eq!(decision["decision"], "deny", "{decision}");
        let reason = decision["reason"].as_str().unwrap().to_owned();
        assert!(reason.starts_with(&format!("{mode}: ")), "{reason}");
        assert!(result.text().contains(&reason), "{}", result.text());
        reasons.push(reason);
    }
    assert_echoes(&toolward, "s__t").await;
    toolward.shutdown().await;
    Some(reasons)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_guest_reading_the_environment_finds_no_process_object() {
    let Some(saw) = guest_saw("js-env", "env", 1).await else {
        return;
    };
    assert_eq!(saw, ["env: threw ReferenceError: process is not defined"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_guest_opening_a_file_finds_no_require_and_no_filesystem() {
    let Some(saw) = guest_saw("js-file", "file", 1).await else {
        return;
    };
    assert_eq!(saw, ["file: threw ReferenceError: require is not defined"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_guest_reading_the_clock_gets_the_same_frozen_time_in_every_decision() {
    let Some(saw) = guest_saw("js-clock", "clock", 2).await else {
        return;
    };
    // The clock stopped when the component was built: every decision reads that instant,
    // which is before the first call (so not the call's time, which is `timeMs`).
    assert_eq!(saw[0], saw[1]);
    let frozen: u128 = saw[0]
        .strip_prefix("clock: returned ")
        .unwrap()
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    assert!(frozen < now, "{frozen} is not in the past ({now})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_guest_drawing_random_numbers_draws_the_same_one_in_every_decision() {
    let Some(saw) = guest_saw("js-random", "random", 2).await else {
        return;
    };
    assert_eq!(saw[0], saw[1]);
    let drawn: f64 = saw[0]
        .strip_prefix("random: returned ")
        .unwrap()
        .parse()
        .unwrap();
    assert!((0.0..1.0).contains(&drawn), "{drawn}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_guest_calling_fetch_traps_so_the_call_is_denied_and_the_next_call_works() {
    let Some(wasm) = hostile_guest("js-fetch") else {
        return;
    };
    let (bench, toolward) = with_policy("js-fetch", &wasm, "fetch for bomb").await;
    assert_denied_then_next_call_works(
        &bench,
        &toolward,
        "trapped: wasm trap: wasm `unreachable` instruction executed",
        "s__t",
    )
    .await;
    toolward.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_loop_in_a_javascript_guest_denies_the_call_and_the_next_call_works() {
    let Some(wasm) = hostile_guest("js-loop") else {
        return;
    };
    let (bench, toolward) = with_policy("js-loop", &wasm, "loop for bomb").await;
    assert_denied_then_next_call_works(
        &bench,
        &toolward,
        "ran out of fuel (limit 50000000 units)",
        "s__t",
    )
    .await;
    toolward.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_guest_allocating_without_end_denies_the_call_and_the_next_call_works() {
    let Some(wasm) = hostile_guest("js-alloc") else {
        return;
    };
    let (bench, toolward) = with_policy("js-alloc", &wasm, "alloc for bomb").await;
    assert_denied_then_next_call_works(
        &bench,
        &toolward,
        "exceeded its memory limit of 67108864 bytes",
        "s__t",
    )
    .await;
    toolward.shutdown().await;
}
