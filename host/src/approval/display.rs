//! A request as a person reads it: every argument shown, long values cut, everything escaped.

use super::{ApprovalRequest, MAX_DISPLAYED_NAME_CHARS, MAX_DISPLAYED_VALUE_CHARS};
use crate::{canonical, text};

/// A request as lines for a person: each field on its own line, every value escaped with
/// [`text::escape`], the arguments as [`display_arguments`] shows them. The terminal of
/// `toolward call` and `toolward approvals list` show this.
pub fn display_request(request: &ApprovalRequest) -> String {
    format!(
        "call {}\n  tool:      {} (server {}, upstream tool {})\n  effect:    {}\n  reason:    {}\n  arguments (sha256 {}):\n{}\n  principal: {}, session {}",
        text::escape(&request.call_id),
        text::escape(&request.exposed_tool),
        text::escape(&request.server),
        text::escape(&request.tool),
        text::escape(&request.effect),
        text::escape(&request.reason),
        text::escape(&request.arguments_sha256),
        display_arguments(&request.arguments),
        text::escape(&request.principal),
        text::escape(&request.session),
    )
}

/// The canonical arguments text `arguments` as lines for a person, one per top-level
/// argument (`    name: value`), in the canonical order (by name): every name is shown; each
/// value (its canonical JSON text) is cut to [`MAX_DISPLAYED_VALUE_CHARS`] (its beginning and its end) and each name to
/// [`MAX_DISPLAYED_NAME_CHARS`], with the full length stated; everything is escaped with
/// [`text::escape`]. Text that is not a JSON object is shown as one cut value. The one
/// format of arguments in every place a person approves (terminal, `approvals list`,
/// elicitation).
pub fn display_arguments(arguments: &str) -> String {
    let members = match canonical::parse(arguments.as_bytes()) {
        Ok(canonical::Value::Object(members)) => members,
        _ => {
            return format!(
                "    (not a JSON object) {}",
                cut(arguments, MAX_DISPLAYED_VALUE_CHARS)
            );
        }
    };
    if members.is_empty() {
        return String::from("    (none)");
    }
    members
        .iter()
        .map(|(name, value)| {
            format!(
                "    {}: {}",
                cut(name, MAX_DISPLAYED_NAME_CHARS),
                cut(&canonical::to_canonical(value), MAX_DISPLAYED_VALUE_CHARS)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` escaped; when longer than `limit` characters, its first three quarters of `limit`
/// and its last quarter, with its full length stated. The end is always shown: a path's last
/// component, or what follows padding meant to push it out of sight, is what an approver must
/// see.
fn cut(text: &str, limit: usize) -> String {
    let total = text.chars().count();
    if total <= limit {
        return text::escape(text);
    }
    let tail = limit / 4;
    let head = limit - tail;
    let first: String = text.chars().take(head).collect();
    let last: String = text.chars().skip(total - tail).collect();
    format!(
        "{}…{} ({total} characters, the first {head} and the last {tail} shown)",
        text::escape(&first),
        text::escape(&last)
    )
}
