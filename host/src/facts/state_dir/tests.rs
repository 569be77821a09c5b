use std::os::unix::fs::PermissionsExt;

use super::*;

const T0: u64 = 1_700_000_000_000;

fn state() -> (tempfile::TempDir, StateDir) {
    let tmp = tempfile::tempdir().unwrap();
    let state = StateDir::open(&tmp.path().join("state")).unwrap();
    (tmp, state)
}

fn keys(tool: &str, session: &str) -> FactKeys {
    FactKeys::of("fs", tool, "alice", session)
}

#[tokio::test]
async fn a_reservation_counts_as_forwarded_for_every_scope_and_the_call_does_not_see_itself() {
    let (_tmp, state) = state();
    let facts = StateFacts::open(&state).unwrap();
    let write = keys("write_file", "s1");
    let first = facts.reserve(&write, T0).await.unwrap();
    assert_eq!(first.as_map().len(), 16, "{first:?}");
    assert!(
        first.as_map().values().all(|count| *count == 0),
        "{first:?}"
    );
    let second = facts.reserve(&write, T0 + 10).await.unwrap();
    for scope in ["tool", "server", "principal", "session"] {
        assert_eq!(second.get(&format!("{scope}.forwarded.minute")), Some(1));
        assert_eq!(second.get(&format!("{scope}.forwarded.hour")), Some(1));
        assert_eq!(second.get(&format!("{scope}.held.minute")), Some(0));
    }
    // Another tool of the server, another session: only the shared scopes count.
    let read = facts
        .reserve(&keys("read_file", "s2"), T0 + 20)
        .await
        .unwrap();
    assert_eq!(read.get("tool.forwarded.minute"), Some(0));
    assert_eq!(read.get("session.forwarded.minute"), Some(0));
    assert_eq!(read.get("server.forwarded.minute"), Some(2));
    assert_eq!(read.get("principal.forwarded.minute"), Some(2));
}

#[tokio::test]
async fn a_call_without_a_session_has_no_session_facts() {
    let (_tmp, state) = state();
    let facts = StateFacts::open(&state).unwrap();
    let seen = facts.reserve(&keys("t", ""), T0).await.unwrap();
    assert_eq!(seen.as_map().len(), 12);
    assert_eq!(seen.get("session.forwarded.minute"), None);
}

#[tokio::test]
async fn release_takes_the_reservation_back_and_hold_moves_it_to_held() {
    let (_tmp, state) = state();
    let facts = StateFacts::open(&state).unwrap();
    let call = keys("t", "s");
    facts.reserve(&call, T0).await.unwrap();
    facts.record(&call, T0, Change::Release).await.unwrap();
    facts.reserve(&call, T0 + 1).await.unwrap();
    facts.record(&call, T0 + 1, Change::Hold).await.unwrap();
    facts
        .record(&call, T0 + 5_000, Change::Forward)
        .await
        .unwrap();
    let seen = facts.reserve(&call, T0 + 6_000).await.unwrap();
    assert_eq!(seen.get("tool.forwarded.minute"), Some(1), "{seen:?}");
    assert_eq!(seen.get("tool.held.minute"), Some(1), "{seen:?}");
    assert_eq!(seen.get("tool.held.hour"), Some(1), "{seen:?}");
}

#[tokio::test]
async fn the_minute_window_is_the_current_second_and_the_59_before_it_and_the_hour_the_same_in_minutes()
 {
    let (_tmp, state) = state();
    let facts = StateFacts::open(&state).unwrap();
    let call = keys("t", "");
    // At the very end of second 0 of the test.
    let start = T0 - T0 % 60_000 + 999;
    facts.reserve(&call, start).await.unwrap();
    let probe = keys("other", "");
    let at = |ms| {
        let facts = &facts;
        let probe = &probe;
        async move {
            let seen = facts.reserve(probe, ms).await.unwrap();
            facts.record(probe, ms, Change::Release).await.unwrap();
            (
                seen.get("server.forwarded.minute").unwrap(),
                seen.get("server.forwarded.hour").unwrap(),
            )
        }
    };
    // 59.001 s later it is in second 59 after: still counted; one more millisecond, gone.
    assert_eq!(at(start + 59_000).await, (1, 1));
    assert_eq!(at(start + 59_001).await, (0, 1));
    // The hour: counted in the 59 minutes after its own, gone from the 60th.
    let minute_start = start - 999;
    assert_eq!(at(minute_start + 59 * 60_000 + 59_999).await, (0, 1));
    assert_eq!(at(minute_start + 60 * 60_000).await, (0, 0));
}

#[tokio::test]
async fn two_opens_of_one_state_folder_count_together_and_every_reservation_sees_a_distinct_count()
{
    // Two opens are two open files, so `flock` excludes them as it excludes two processes.
    let (_tmp, state) = state();
    let a = Arc::new(StateFacts::open(&state).unwrap());
    let b = Arc::new(StateFacts::open(&state).unwrap());
    let mut tasks = Vec::new();
    for i in 0..200u64 {
        let store = Arc::clone(if i % 2 == 0 { &a } else { &b });
        tasks.push(tokio::spawn(async move {
            let call = keys("t", "");
            store
                .reserve(&call, T0 + i)
                .await
                .unwrap()
                .get("tool.forwarded.minute")
                .unwrap()
        }));
    }
    let mut seen = Vec::new();
    for task in tasks {
        seen.push(task.await.unwrap());
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..200).collect::<Vec<_>>());
}

#[tokio::test]
async fn sessions_past_their_region_push_out_the_oldest_session_never_a_tool() {
    let (_tmp, state) = state();
    let layout = Layout {
        named: 4,
        session: 4,
    };
    let facts = StateFacts::open_with(&state, layout).unwrap();
    facts.reserve(&keys("t", "first"), T0).await.unwrap();
    for n in 0..20u64 {
        facts
            .reserve(&keys("t", &format!("flood-{n}")), T0 + 1 + n)
            .await
            .unwrap();
    }
    let seen = facts.reserve(&keys("t", "first"), T0 + 100).await.unwrap();
    assert_eq!(seen.get("tool.forwarded.minute"), Some(21), "{seen:?}");
    assert_eq!(seen.get("session.forwarded.minute"), Some(0), "{seen:?}");
    let len = std::fs::metadata(facts.path()).unwrap().len();
    assert_eq!(len, layout.file_bytes());
}

#[tokio::test]
async fn the_counters_file_is_private_and_one_of_another_format_is_refused_with_the_fix() {
    let (_tmp, state) = state();
    let facts = StateFacts::open(&state).unwrap();
    let path = facts.path().to_owned();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), COUNTERS_FILE_BYTES);
    drop(facts);
    std::fs::write(&path, b"not counters").unwrap();
    let error = StateFacts::open(&state).unwrap_err().to_string();
    assert!(
        error.contains("is not a counters file of this version")
            && error.contains("remove the file"),
        "{error}"
    );
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &path).unwrap();
    let error = StateFacts::open(&state).unwrap_err().to_string();
    assert!(error.contains("is not a regular file"), "{error}");
}
