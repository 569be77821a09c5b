//! A request as a person reads it: every argument shown, long values cut, everything escaped.

use super::{ApprovalRequest, MAX_DISPLAYED_NAME_CHARS, MAX_DISPLAYED_VALUE_CHARS};
use crate::{canonical, text};

/// A request as lines for a person: each field on its own line, every value escaped with
/// [`text::escape`], the arguments as [`display_arguments`] shows them. The terminal of
/// `toolward call` and `toolward approvals list` show this.
pub fn display_request(request: &ApprovalRequest) -> String {
    let shown = format!(
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
    );
    match &request.result {
        Some(result) => format!("{shown}\n{}", display_result(result)),
        None => shown,
    }
}

/// A held result (the JSON text of what would be delivered) as lines for a person: its
/// SHA-256, then each content block's text (and `structuredContent`'s canonical JSON) on
/// its own line, cut as [`display_arguments`] cuts values, everything escaped; binary
/// blocks by type, MIME type and size.
pub fn display_result(result: &str) -> String {
    let mut lines = vec![format!(
        "  result that would be delivered (sha256 {}):",
        canonical::sha256_hex(result.as_bytes())
    )];
    let parsed: serde_json::Value = match serde_json::from_str(result) {
        Ok(parsed) => parsed,
        Err(_) => {
            lines.push(format!("    (not JSON) {}", cut(result, MAX_DISPLAYED_VALUE_CHARS)));
            return lines.join("\n");
        }
    };
    let blocks = parsed
        .get("content")
        .and_then(serde_json::Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for block in blocks {
        let kind = block.get("type").and_then(serde_json::Value::as_str).unwrap_or("?");
        let line = match block.get("text").and_then(serde_json::Value::as_str) {
            Some(text) => format!("    {}: {}", cut(kind, MAX_DISPLAYED_NAME_CHARS), cut(text, MAX_DISPLAYED_VALUE_CHARS)),
            None => format!(
                "    {}: {}",
                cut(kind, MAX_DISPLAYED_NAME_CHARS),
                cut(&block.to_string(), MAX_DISPLAYED_VALUE_CHARS)
            ),
        };
        lines.push(line);
    }
    if let Some(structured) = parsed.get("structuredContent") {
        lines.push(format!(
            "    structuredContent: {}",
            cut(&structured.to_string(), MAX_DISPLAYED_VALUE_CHARS)
        ));
    }
    if parsed.get("isError") == Some(&serde_json::Value::Bool(true)) {
        lines.push(String::from("    (the server marked this result an error)"));
    }
    lines.join("\n")
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
