use crate::identity::Approvers;
use super::files::{ANSWERS_DIR, PENDING_DIR, Queue};
use super::mac::{AnswerFile, answer_mac, verify_answer};
use super::*;
use crate::canonical;
use crate::state_dir::Key;
use std::io::Write as _;
use std::path::Path;
use std::os::unix::fs::OpenOptionsExt as _;

fn request(call_id: &str, arguments: &str) -> ApprovalRequest {
    ApprovalRequest {
        call_id: call_id.to_owned(),
        exposed_tool: String::from("fs__write_file"),
        server: String::from("fs"),
        tool: String::from("write_file"),
        effect: String::from("local-change"),
        arguments: arguments.to_owned(),
        arguments_sha256: canonical::sha256_hex(arguments.as_bytes()),
        reason: String::from("needs approval"),
        description_sha256: String::from("d"),
        input_schema_sha256: String::from("s"),
        principal: String::from("tester"),
        session: String::from("session-1"),
        time_ms: 1,
        result: None,
    }
}

/// A state folder in a fresh temporary folder.
fn state() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("state");
    (tmp, path)
}

/// Writes `bytes` as a file toolward could have written (mode 0600).
fn write_private(path: &Path, bytes: &[u8]) {
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    file.write_all(bytes).unwrap();
}

#[test]
fn a_long_content_never_hides_the_path_beside_it() {
    let arguments = canonical::canonicalize(
        serde_json::json!({ "content": "x".repeat(3072), "path": "/home/me/.ssh/authorized_keys" })
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    for shown in [
        display_arguments(&arguments),
        display_request(&request("A1", &arguments)),
    ] {
        assert!(
            shown.contains(r#"    path: "/home/me/.ssh/authorized_keys""#),
            "{shown}"
        );
        assert!(
            shown.contains("(3074 characters, the first 384 and the last 128 shown)"),
            "{shown}"
        );
        assert!(
            shown.chars().count() < 2 * MAX_DISPLAYED_VALUE_CHARS + 400,
            "{shown}"
        );
    }
}

#[test]
fn every_argument_name_is_shown_however_many_long_values_come_first() {
    let mut members = serde_json::Map::new();
    for i in 0..20 {
        members.insert(
            format!("a{i:02}"),
            serde_json::Value::String("y".repeat(4000)),
        );
    }
    members.insert(
        String::from("zz_target"),
        serde_json::json!("where it goes"),
    );
    let arguments =
        canonical::canonicalize(serde_json::Value::Object(members).to_string().as_bytes()).unwrap();
    let shown = display_arguments(&arguments);
    for i in 0..20 {
        assert!(shown.contains(&format!("    a{i:02}: ")), "{shown}");
    }
    assert!(
        shown.contains(r#"    zz_target: "where it goes""#),
        "{shown}"
    );
}

#[test]
fn hidden_characters_in_argument_names_and_values_are_escaped() {
    let arguments = canonical::canonicalize(
        serde_json::json!({ "pa\u{202E}th": "safe\u{200B}.txt\u{E0041}", "n": 1 })
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    let shown = display_arguments(&arguments);
    assert!(shown.contains(r"pa\u{202E}th"), "{shown}");
    assert!(shown.contains(r"safe\u{200B}.txt\u{E0041}"), "{shown}");
    assert!(
        !shown.contains('\u{202E}') && !shown.contains('\u{200B}'),
        "{shown}"
    );
    let long_name = format!("{}\u{202E}", "n".repeat(200));
    let shown = display_arguments(&format!(r#"{{"{long_name}":1}}"#));
    assert!(
        shown.contains("(201 characters, the first 96 and the last 32 shown)"),
        "{shown}"
    );
    let shown = display_arguments("[\"not\u{202E}an object\"]");
    assert!(
        shown.contains(r"(not a JSON object)") && shown.contains(r"\u{202E}"),
        "{shown}"
    );
}

fn answer_bytes(
    key: &Key,
    request: &ApprovalRequest,
    approve: bool,
    by: &AnsweredBy,
) -> AnswerFile {
    AnswerFile {
        call_id: request.call_id.clone(),
        approve,
        reason: None,
        arguments_sha256: request.arguments_sha256.clone(),
        description_sha256: request.description_sha256.clone(),
        input_schema_sha256: request.input_schema_sha256.clone(),
        answered_by: Some(by.clone()),
        mac: Some(answer_mac(key, request, approve, None, by)),
    }
}

#[test]
fn a_queued_answer_counts_only_with_the_mac_of_its_own_call_verdict_and_answerer() {
    let key = Key::from_bytes([7; crate::state_dir::KEY_BYTES]);
    let a = request("A1", r#"{"path":"a"}"#);
    let b = request("B2", r#"{"path":"b"}"#);
    let by = AnsweredBy::os_user(
        Channel::Queue,
        &OsUser {
            uid: 1000,
            name: String::from("alice"),
        },
    );
    let genuine = answer_bytes(&key, &a, true, &by);
    let bytes = |file: &AnswerFile| serde_json::to_vec(file).unwrap();
    assert_eq!(
        verify_answer(&bytes(&genuine), &a, &key),
        Ok(Answer {
            verdict: ApprovalAnswer::Approved,
            by: by.clone()
        })
    );

    let unsigned = AnswerFile {
        mac: None,
        ..genuine.clone()
    };
    assert_eq!(
        verify_answer(&bytes(&unsigned), &a, &key),
        Err(String::from("it carries no MAC"))
    );
    let flipped = AnswerFile {
        approve: false,
        ..genuine.clone()
    };
    let why = verify_answer(&bytes(&flipped), &a, &key).unwrap_err();
    assert!(why.contains("MAC does not verify"), "{why}");
    let other_answerer = AnswerFile {
        answered_by: Some(AnsweredBy::os_user(
            Channel::Queue,
            &OsUser {
                uid: 0,
                name: String::from("root"),
            },
        )),
        ..genuine.clone()
    };
    assert!(
        verify_answer(&bytes(&other_answerer), &a, &key)
            .unwrap_err()
            .contains("MAC does not verify")
    );
    let other_key = Key::from_bytes([8; crate::state_dir::KEY_BYTES]);
    assert!(
        verify_answer(&bytes(&genuine), &a, &other_key)
            .unwrap_err()
            .contains("MAC does not verify")
    );
    // A's answer replayed for B, as is and with B's id written in.
    let why = verify_answer(&bytes(&genuine), &b, &key).unwrap_err();
    assert!(why.contains("answers call `A1`"), "{why}");
    let renamed = AnswerFile {
        call_id: b.call_id.clone(),
        arguments_sha256: b.arguments_sha256.clone(),
        ..genuine.clone()
    };
    assert!(
        verify_answer(&bytes(&renamed), &b, &key)
            .unwrap_err()
            .contains("MAC does not verify")
    );
    let why = verify_answer(b"{\"approve\": true}", &a, &key).unwrap_err();
    assert!(why.contains("not an answer toolward wrote"), "{why}");
}

#[test]
fn answer_refuses_a_call_id_that_names_a_path() {
    let (_tmp, state) = state();
    let error = answer(&state, "../x", true, None, &Approvers::default()).unwrap_err();
    assert!(
        matches!(error, ApprovalError::InvalidCallId { .. }),
        "{error}"
    );
}

#[test]
fn answer_refuses_a_call_that_is_not_pending() {
    let (_tmp, state) = state();
    let error = answer(&state, "01ABC", true, None, &Approvers::default()).unwrap_err();
    assert!(matches!(error, ApprovalError::NotPending { .. }), "{error}");
}

#[test]
fn answer_refuses_an_entry_edited_after_toolward_wrote_it() {
    let (_tmp, state) = state();
    let queue = Queue::open(&state).unwrap();
    let held = request("A1", r#"{"content":"x","path":"/home/me/.bashrc"}"#);
    let _guard = queue.hold(&held).unwrap();
    let path = state.join(PENDING_DIR).join("A1.json");
    let original = std::fs::read_to_string(&path).unwrap();

    // The text a person reads changed, its hash left as it was.
    let mut edited: serde_json::Value = serde_json::from_str(&original).unwrap();
    edited["arguments"] = serde_json::json!(r#"{"content":"x","path":"/tmp/harmless"}"#);
    std::fs::write(&path, edited.to_string()).unwrap();
    let error = answer(&state, "A1", true, None, &Approvers::default()).unwrap_err();
    assert!(matches!(error, ApprovalError::Tampered { .. }), "{error}");
    assert!(
        error
            .to_string()
            .contains("does not hash to its `arguments_sha256`"),
        "{error}"
    );

    // Text and hash changed together: the MAC catches it, as any other field.
    edited["arguments_sha256"] = serde_json::json!(canonical::sha256_hex(
        br#"{"content":"x","path":"/tmp/harmless"}"#
    ));
    std::fs::write(&path, edited.to_string()).unwrap();
    let error = answer(&state, "A1", true, None, &Approvers::default()).unwrap_err().to_string();
    assert!(error.contains("MAC does not verify"), "{error}");
    let mut renamed: serde_json::Value = serde_json::from_str(&original).unwrap();
    renamed["exposed_tool"] = serde_json::json!("fs__read_text_file");
    std::fs::write(&path, renamed.to_string()).unwrap();
    let error = answer(&state, "A1", true, None, &Approvers::default()).unwrap_err().to_string();
    assert!(error.contains("MAC does not verify"), "{error}");
    let entries = list_queue(&state).unwrap();
    assert!(
        entries[0].problem.as_deref().unwrap().contains("MAC"),
        "{entries:?}"
    );
    assert!(list_pending(&state).unwrap().is_empty());

    std::fs::write(&path, &original).unwrap();
    let by = answer(&state, "A1", true, None, &Approvers::default()).unwrap();
    assert_eq!(by.channel, Channel::Queue);
    assert_eq!(by.uid, Some(crate::identity::euid()));
}

#[test]
fn the_first_authenticated_answer_is_final_and_a_forgery_in_its_place_does_not_block_it() {
    let (_tmp, state) = state();
    let queue = Queue::open(&state).unwrap();
    let held = request("A1", r#"{"path":"a"}"#);
    let _guard = queue.hold(&held).unwrap();
    let answer_file = state.join(ANSWERS_DIR).join("A1.json");
    write_private(&answer_file, br#"{"call_id":"A1","approve":true}"#);
    answer(&state, "A1", false, Some(String::from("no")), &Approvers::default()).unwrap();
    let error = answer(&state, "A1", true, None, &Approvers::default()).unwrap_err();
    assert!(
        matches!(error, ApprovalError::AlreadyAnswered { .. }),
        "{error}"
    );
    match queue.read_answer(&held) {
        Some(Ok(Answer {
            verdict: ApprovalAnswer::Denied(reason),
            by,
        })) => {
            assert_eq!(reason, "no");
            assert_eq!(by.channel, Channel::Queue);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_start_removes_only_entries_whose_process_ended() {
    let (_tmp, state) = state();
    let queue = Queue::open(&state).unwrap();
    let live = request("LIVE1", r#"{"path":"a"}"#);
    let dead = request("DEAD1", r#"{"path":"b"}"#);
    let _live_guard = queue.hold(&live).unwrap();
    // An entry whose process ended: the file is there, nobody holds its lock.
    let dead_path = state.join(PENDING_DIR).join("DEAD1.json");
    let bytes = {
        let _dead_guard = queue.hold(&dead).unwrap();
        std::fs::read(&dead_path).unwrap()
    };
    write_private(&dead_path, &bytes);

    let entries = list_queue(&state).unwrap();
    let waiting: Vec<(&str, bool)> = entries
        .iter()
        .map(|e| (e.request.call_id.as_str(), e.waiting))
        .collect();
    assert_eq!(waiting, [("DEAD1", false), ("LIVE1", true)]);
    let error = answer(&state, "DEAD1", true, None, &Approvers::default()).unwrap_err();
    assert!(matches!(error, ApprovalError::Abandoned { .. }), "{error}");

    let abandoned = abandon_pending(&state).unwrap();
    assert_eq!(abandoned, [dead]);
    assert!(!dead_path.exists());
    assert!(state.join(PENDING_DIR).join("LIVE1.json").exists());
    assert_eq!(list_pending(&state).unwrap(), [live]);
}

/// The padding attack a security tester used on the first version: a `path` of a harmless
/// start, 520 Hangul fillers (blank on screen) and a destination at its end. The fillers are
/// escaped and the end of the value is shown.
#[test]
fn padding_of_invisible_characters_cannot_push_the_end_of_a_value_out_of_sight() {
    let path = format!(
        "/work/sandbox/notes.txt{}/../../../../etc/cron.d/evil",
        "\u{3164}".repeat(520)
    );
    let arguments = serde_json::json!({"path": path, "content": "x\u{2028}y\u{fe0f}"}).to_string();
    let shown = display_arguments(&arguments);
    assert!(shown.contains("/etc/cron.d/evil\""), "{shown}");
    assert!(shown.contains("\\u{3164}"), "{shown}");
    assert!(
        !shown.contains('\u{3164}') && !shown.contains('\u{2028}') && !shown.contains('\u{fe0f}'),
        "{shown}"
    );
}

/// An operating-system user's answer counts only from a file their uid owns: a process
/// holding the queue's key can MAC any uid, but the kernel sets the owner. Approver rules
/// judge such an answer by its uid, so this is what keeps one user from answering as another.
#[test]
fn a_queue_answer_naming_another_uid_than_its_file_owner_is_a_forgery() {
    let (_tmp, state) = state();
    let queue = Queue::open(&state).unwrap();
    let held = request("A1", r#"{"path":"a"}"#);
    let _guard = queue.hold(&held).unwrap();
    let me = crate::identity::euid();
    let other = me.wrapping_add(4242);
    let by = AnsweredBy::os_user(
        Channel::Queue,
        &crate::identity::OsUser {
            uid: other,
            name: String::from("root"),
        },
    );
    let file = AnswerFile {
        call_id: held.call_id.clone(),
        approve: true,
        reason: None,
        arguments_sha256: held.arguments_sha256.clone(),
        description_sha256: held.description_sha256.clone(),
        input_schema_sha256: held.input_schema_sha256.clone(),
        mac: Some(answer_mac(&queue.key, &held, true, None, &by)),
        answered_by: Some(by),
    };
    let answer_file = state.join(ANSWERS_DIR).join("A1.json");
    write_private(&answer_file, &serde_json::to_vec(&file).unwrap());
    match queue.read_answer(&held) {
        Some(Err((why, _))) => assert!(
            why.contains(&format!("names uid {other} as its answerer, but uid {me} wrote it")),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
}
