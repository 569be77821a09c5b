//! Policy faults through the whole path: a policy component that loops, allocates without
//! end, traps or answers nonsense, configured as `policy.component`. A real call is denied
//! with a reason naming the component and the failure, the denial is audited, and the next
//! call goes through.

use super::*;
use crate::support::nonsense_component;

/// Starts toolward with the policy component at `component` configured with `settings`, in
/// front of server `s` (`bomb`, `t`) and `good`.
pub(super) async fn with_policy(test: &str, component: &Path, settings: &str) -> (Bench, Toolward) {
    let bench = Bench::new(test)
        .server("s", listing(&[&tool("bomb"), &tool("t")]), &["bomb", "t"])
        .with_good_server()
        .with(
            "policy",
            json!({"component": component, "settings": "policy-settings.txt"}),
        );
    std::fs::write(bench.path().join("policy-settings.txt"), settings).unwrap();
    let toolward = bench.pin_and_start().await;
    (bench, toolward)
}

/// The audit records of call `call_id`.
pub(super) fn records_of(bench: &Bench, call_id: &str) -> Vec<Value> {
    crate::support::audit_records(&bench.path().join("state/audit.jsonl"))
        .into_iter()
        .filter(|record| record["call_id"] == call_id)
        .collect()
}

/// Calls `s__bomb`: denied for `failure` by the policy component, on the record; then a call
/// the policy answers goes through.
pub(super) async fn assert_denied_then_next_call_works(
    bench: &Bench,
    toolward: &Toolward,
    failure: &str,
    next: &str,
) {
    let policy_sha256 = toolward.component_digests()["policy"].clone();
    let expected = format!("policy component `{}` {failure}", &policy_sha256[..12]);
    let result = assert_call_fails(
        toolward,
        "s__bomb",
        &[&format!(
            "the policy denied the call of tool `s__bomb` on server `s`: {expected}"
        )],
    )
    .await;
    assert!(
        result.text().ends_with("; the call is denied"),
        "{}",
        result.text()
    );
    assert_eq!(result.outcome, toolward::call::CallOutcome::Denied);
    let records = records_of(bench, &result.call_id);
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["call-received", "decision", "refusal"]);
    let decision = &records[1];
    assert_eq!(decision["decision"], "deny");
    assert!(
        decision["reason"].as_str().unwrap().starts_with(&expected),
        "{decision}"
    );
    assert_eq!(
        decision["components"]["policy_sha256"],
        policy_sha256.as_str()
    );
    let began = std::time::Instant::now();
    assert_echoes(toolward, next).await;
    assert!(began.elapsed() < std::time::Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_loop_in_the_policy_denies_the_call_and_the_next_call_works() {
    let wasm = Path::new(toolward::guests::FAULT_GUEST_WASM);
    let (bench, toolward) = with_policy("policy-loop", wasm, "loop for bomb").await;
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
async fn a_memory_bomb_in_the_policy_denies_the_call_and_the_next_call_works() {
    let wasm = Path::new(toolward::guests::FAULT_GUEST_WASM);
    let (bench, toolward) = with_policy("policy-alloc", wasm, "alloc for bomb").await;
    assert_denied_then_next_call_works(
        &bench,
        &toolward,
        "exceeded its memory limit of 67108864 bytes",
        "s__t",
    )
    .await;
    toolward.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_in_the_policy_denies_the_call_and_the_next_call_works() {
    let wasm = Path::new(toolward::guests::FAULT_GUEST_WASM);
    let (bench, toolward) = with_policy("policy-trap", wasm, "trap for bomb").await;
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
async fn a_nonsense_answer_from_the_policy_denies_the_call_and_the_next_call_works() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("nonsense.wasm");
    // Nonsense for `bomb` (4 bytes), an allow for any other tool.
    std::fs::write(&wasm, nonsense_component(Some(4))).unwrap();
    let (bench, toolward) = with_policy("policy-nonsense", &wasm, "").await;
    assert_denied_then_next_call_works(
        &bench,
        &toolward,
        "gave no valid answer: unexpected discriminant: 7",
        "s__t",
    )
    .await;
    toolward.shutdown().await;
}
