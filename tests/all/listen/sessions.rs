//! A session belongs to the principal whose token opened it: any other token gets 404 for
//! it, whatever the method, so it can neither call in it, read or close it, nor answer the
//! approvals it asks (issue 13, item 1). A principal's live sessions are bounded, and an
//! idle one gives its place back.

use std::time::Duration;

use serde_json::json;

use super::{
    ALICE, BOB, Events, audit_records, initialize, open_session, send, start, start_with, text,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_answered_with_another_principals_token_gets_404_and_approves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (toolward, listening) = start(dir.path()).await;
    let addr = listening.addr;
    let alice = open_session(addr, ALICE, true).await;
    // Alice's held call asks her, by elicitation, on the call's own event stream.
    let call = send(
        addr,
        "POST",
        ALICE,
        Some(&alice),
        Some(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "s__write", "arguments": {"path": "notes.txt"}}})),
    )
    .await;
    assert_eq!(call.status(), 200);
    let mut events = Events::new(call);
    let ask = events.until(&json!(null), "elicitation/create").await;
    assert!(
        ask["params"]["message"]
            .as_str()
            .unwrap()
            .contains("s__write"),
        "{ask}"
    );
    // Bob posts the answer Alice's client would give, into her session, with his token.
    let forged = send(
        addr,
        "POST",
        BOB,
        Some(&alice),
        Some(json!({"jsonrpc": "2.0", "id": ask["id"],
            "result": {"action": "accept", "content": {"approve": true}}})),
    )
    .await;
    assert_eq!(forged.status(), 404, "{}", text(forged).await);
    // The call still waits for Alice: her own answer reaches it, and it is a no.
    let declined = send(
        addr,
        "POST",
        ALICE,
        Some(&alice),
        Some(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "decline"}})),
    )
    .await;
    assert_eq!(declined.status(), 202);
    let result = events.until(&json!(2), "").await;
    assert_eq!(result["result"]["isError"], json!(true), "{result}");
    let message = result["result"]["content"][0]["text"].as_str().unwrap();
    assert!(message.contains("declined"), "{message}");
    listening.stop().await;
    toolward.shutdown().await;

    let received = std::fs::read_to_string(dir.path().join("calls.jsonl")).unwrap_or_default();
    assert_eq!(received, "", "the held call reached the server");
    let records = audit_records(dir.path());
    let answered: Vec<_> = records
        .iter()
        .filter(|record| record["kind"] == "approval-answered")
        .collect();
    assert_eq!(answered.len(), 1, "{records:?}");
    assert_eq!(answered[0]["decision"], "deny", "{}", answered[0]);
    assert_eq!(answered[0]["principal"], "alice", "{}", answered[0]);
    for record in &records {
        assert_ne!(record["decision"], "allow", "nothing was allowed: {record}");
        assert!(
            !record.to_string().contains("bob"),
            "bob answered nothing and called nothing: {record}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_principals_post_get_and_delete_of_a_session_get_404_and_leave_it_open() {
    let dir = tempfile::tempdir().unwrap();
    let (toolward, listening) = start(dir.path()).await;
    let addr = listening.addr;
    let alice = open_session(addr, ALICE, false).await;
    let bob = open_session(addr, BOB, false).await;
    let list = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"});
    let call = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": {"name": "s__echo", "arguments": {"n": 1}}});

    let posted = send(addr, "POST", BOB, Some(&alice), Some(call.clone())).await;
    assert_eq!(posted.status(), 404);
    let refusal = text(posted).await;
    let listed = send(addr, "POST", BOB, Some(&alice), Some(list.clone())).await;
    assert_eq!(listed.status(), 404);
    let stream = send(addr, "GET", BOB, Some(&alice), None).await;
    assert_eq!(stream.status(), 404);
    let deleted = send(addr, "DELETE", BOB, Some(&alice), None).await;
    assert_eq!(deleted.status(), 404);
    // A session that does not exist gets the same answer: Bob learns nothing of Alice's.
    let unknown = send(
        addr,
        "POST",
        BOB,
        Some("0a1b2c3d-0000-4000-8000-000000000000"),
        Some(call.clone()),
    )
    .await;
    assert_eq!(unknown.status(), 404);
    assert_eq!(text(unknown).await, refusal);

    // Alice's session is still open and still hers; Bob's own works for him.
    let mine = send(addr, "POST", ALICE, Some(&alice), Some(list.clone())).await;
    assert_eq!(mine.status(), 200);
    let tools = Events::new(mine).until(&json!(7), "").await;
    assert_eq!(tools["result"]["tools"][0]["name"], "s__echo", "{tools}");
    let his = send(addr, "POST", BOB, Some(&bob), Some(call)).await;
    assert_eq!(his.status(), 200);
    let result = Events::new(his).until(&json!(8), "").await;
    assert_eq!(result["result"]["isError"], json!(false), "{result}");
    // Alice may close her own, after which it is gone for her too.
    // 204, not rmcp's 202: the Python `mcp` client logs "Session termination failed: 202"
    // at every close otherwise (it accepts 200 and 204).
    let closed = send(addr, "DELETE", ALICE, Some(&alice), None).await;
    assert_eq!(closed.status(), 204, "{}", closed.status());
    let gone = send(addr, "POST", ALICE, Some(&alice), Some(list)).await;
    assert_eq!(gone.status(), 404);
    listening.stop().await;
    toolward.shutdown().await;

    // Only Bob's own call was made, in his name.
    let decisions: Vec<_> = audit_records(dir.path())
        .into_iter()
        .filter(|record| record["kind"] == "decision")
        .collect();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0]["principal"], "bob");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_sessions_per_principal_initialize_gets_429_and_other_principals_are_unaffected() {
    let dir = tempfile::tempdir().unwrap();
    let (toolward, listening) = start_with(
        dir.path(),
        json!({"max_sessions_per_principal": 2}),
        json!({}),
    )
    .await;
    let addr = listening.addr;
    let first = open_session(addr, ALICE, false).await;
    let _second = open_session(addr, ALICE, false).await;
    let third = initialize(addr, ALICE, false).await;
    assert_eq!(third.status(), 429);
    let refusal = text(third).await;
    assert!(
        refusal.contains("principal `alice` has 2 live sessions")
            && refusal.contains("listen.max_sessions_per_principal"),
        "{refusal}"
    );
    // Bob's bound is his own.
    let _bob = open_session(addr, BOB, false).await;
    // Closing one gives its place back.
    let closed = send(addr, "DELETE", ALICE, Some(&first), None).await;
    assert!(closed.status().is_success(), "{}", closed.status());
    let _again = open_session(addr, ALICE, false).await;
    listening.stop().await;
    toolward.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_is_closed_and_gives_its_place_back() {
    let dir = tempfile::tempdir().unwrap();
    // The idle timeout is never shorter than a call can take (here 200 ms) plus
    // `CALL_IN_FLIGHT_MARGIN`.
    let (toolward, listening) = start_with(
        dir.path(),
        json!({"max_sessions_per_principal": 1, "session_idle_timeout_ms": 100}),
        json!({"call_timeout_ms": 100, "approval_timeout_ms": 100}),
    )
    .await;
    let addr = listening.addr;
    let idle = open_session(addr, ALICE, false).await;
    assert_eq!(initialize(addr, ALICE, false).await.status(), 429);
    let floor = Duration::from_millis(200) + toolward::listen::CALL_IN_FLIGHT_MARGIN;
    tokio::time::sleep(floor + Duration::from_secs(1)).await;
    let list = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"});
    let expired = send(addr, "POST", ALICE, Some(&idle), Some(list)).await;
    assert_eq!(expired.status(), 404);
    let _fresh = open_session(addr, ALICE, false).await;
    listening.stop().await;
    toolward.shutdown().await;
}
