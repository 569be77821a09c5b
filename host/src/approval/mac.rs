//! The MACs that bind a pending entry and an answer to one call, and their checks.

use serde::{Deserialize, Serialize};

use super::{Answer, AnsweredBy, ApprovalAnswer, ApprovalRequest};
use crate::canonical;
use crate::state_dir::Key;
use crate::text;

/// What a pending entry's MAC starts with, so it can never pass as an answer's.
const REQUEST_MAC_DOMAIN: &[u8] = b"toolward approval request v1";
/// What an answer's MAC starts with.
const ANSWER_MAC_DOMAIN: &[u8] = b"toolward approval answer v1";

/// A pending entry as written: the request and the waiting process's MAC over it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct PendingFile {
    #[serde(flatten)]
    pub(super) request: ApprovalRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) request_mac: Option<String>,
}

/// The answer file's content: the verdict, the binding it was given for, who gave it, and the
/// MAC over all of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct AnswerFile {
    pub(super) call_id: String,
    pub(super) approve: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) reason: Option<String>,
    pub(super) arguments_sha256: String,
    pub(super) description_sha256: String,
    pub(super) input_schema_sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) answered_by: Option<AnsweredBy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) mac: Option<String>,
}

/// Hands `f` the parts a pending entry's MAC covers: every field of the request, in
/// declaration order (borrowed, so the arguments are not copied to be MAC'd).
pub(super) fn with_request_mac_parts<R>(request: &ApprovalRequest, f: impl FnOnce(&[&[u8]]) -> R) -> R {
    let time_ms = request.time_ms.to_string();
    let parts: [&[u8]; 14] = [
        REQUEST_MAC_DOMAIN,
        request.call_id.as_bytes(),
        request.exposed_tool.as_bytes(),
        request.server.as_bytes(),
        request.tool.as_bytes(),
        request.effect.as_bytes(),
        request.arguments.as_bytes(),
        request.arguments_sha256.as_bytes(),
        request.reason.as_bytes(),
        request.description_sha256.as_bytes(),
        request.input_schema_sha256.as_bytes(),
        request.principal.as_bytes(),
        request.session.as_bytes(),
        time_ms.as_bytes(),
    ];
    // A held result's text is covered after the rest; a held call's parts are as before.
    match &request.result {
        Some(result) => f(&[&parts[..], &[b"result".as_slice(), result.as_bytes()]].concat()),
        None => f(&parts),
    }
}

/// Hands `f` the parts an answer's MAC covers: the request's binding (taken from the request
/// the verifier holds, not from the file), the verdict, the reason and the answerer.
fn with_answer_mac_parts<R>(
    request: &ApprovalRequest,
    approve: bool,
    reason: Option<&str>,
    by: &AnsweredBy,
    f: impl FnOnce(&[&[u8]]) -> R,
) -> R {
    let optional = |text: Option<&str>| match text {
        Some(text) => [b"1".as_slice(), text.as_bytes()].concat(),
        None => b"0".to_vec(),
    };
    let uid = by.uid.map(|uid| uid.to_string());
    let (reason, answerer, uid) = (
        optional(reason),
        optional(by.answerer.as_deref()),
        optional(uid.as_deref()),
    );
    let parts: [&[u8]; 10] = [
        ANSWER_MAC_DOMAIN,
        request.call_id.as_bytes(),
        request.arguments_sha256.as_bytes(),
        request.description_sha256.as_bytes(),
        request.input_schema_sha256.as_bytes(),
        if approve {
            b"approve".as_slice()
        } else {
            b"deny".as_slice()
        },
        &reason,
        by.channel.as_str().as_bytes(),
        &answerer,
        &uid,
    ];
    // A console user's groups, when they have any (an answer without them is MAC'd as
    // before): each group's length before it, so no two lists give the same bytes.
    let groups: Vec<u8> = by
        .groups
        .iter()
        .flat_map(|group| {
            let mut part = group.len().to_string().into_bytes();
            part.push(b':');
            part.extend_from_slice(group.as_bytes());
            part
        })
        .collect();
    let groups: &[&[u8]] = if by.groups.is_empty() {
        &[]
    } else {
        &[b"groups".as_slice(), &groups]
    };
    // An answer to a held result binds the result it was shown.
    match &request.result {
        Some(result) => {
            let result_sha256 = crate::canonical::sha256_hex(result.as_bytes());
            f(&[
                &parts[..],
                groups,
                &[b"result".as_slice(), result_sha256.as_bytes()],
            ]
            .concat())
        }
        None => f(&[&parts[..], groups].concat()),
    }
}

pub(super) fn answer_mac(
    key: &Key,
    request: &ApprovalRequest,
    approve: bool,
    reason: Option<&str>,
    by: &AnsweredBy,
) -> String {
    with_answer_mac_parts(request, approve, reason, by, |parts| key.mac_hex(parts))
}

/// The answer in `bytes`, when it is an authenticated answer to exactly `request`; otherwise
/// why it is a forgery.
pub(super) fn verify_answer(bytes: &[u8], request: &ApprovalRequest, key: &Key) -> Result<Answer, String> {
    let file: AnswerFile = serde_json::from_slice(bytes)
        .map_err(|error| format!("it is not an answer toolward wrote ({error})"))?;
    let Some(mac) = &file.mac else {
        return Err(String::from("it carries no MAC"));
    };
    if file.call_id != request.call_id {
        return Err(format!(
            "it answers call `{}`, not this one",
            text::escape(&file.call_id)
        ));
    }
    if file.arguments_sha256 != request.arguments_sha256
        || file.description_sha256 != request.description_sha256
        || file.input_schema_sha256 != request.input_schema_sha256
    {
        return Err(String::from(
            "it was given for other arguments or another pin of the tool",
        ));
    }
    let Some(by) = file.answered_by else {
        return Err(String::from("it names no answerer"));
    };
    let verifies = with_answer_mac_parts(
        request,
        file.approve,
        file.reason.as_deref(),
        &by,
        |parts| key.verify_hex(parts, mac),
    );
    if !verifies {
        return Err(String::from(
            "its MAC does not verify under the state folder's approval key",
        ));
    }
    let verdict = if file.approve {
        ApprovalAnswer::Approved
    } else {
        ApprovalAnswer::Denied(
            file.reason
                .unwrap_or_else(|| String::from("the operator denied the call")),
        )
    };
    Ok(Answer { verdict, by })
}

/// What is wrong with a pending entry read from `<stem>.json`, if anything.
pub(super) fn entry_problem(entry: &PendingFile, stem: &str, key: &Key) -> Option<String> {
    let request = &entry.request;
    if request.call_id != stem {
        return Some(format!(
            "its call id `{}` is not its file's name",
            text::escape(&request.call_id)
        ));
    }
    if canonical::sha256_hex(request.arguments.as_bytes()) != request.arguments_sha256 {
        return Some(String::from(
            "its `arguments` text does not hash to its `arguments_sha256`",
        ));
    }
    let Some(mac) = &entry.request_mac else {
        return Some(String::from("it carries no MAC"));
    };
    if !with_request_mac_parts(request, |parts| key.verify_hex(parts, mac)) {
        return Some(String::from(
            "its MAC does not verify under the state folder's approval key (a field was changed)",
        ));
    }
    None
}
