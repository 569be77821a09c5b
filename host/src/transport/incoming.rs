//! What a server sends: responses matched to their requests, its notifications and log
//! messages (at most [`MAX_SERVER_LOG_LINES_PER_SECOND`] a second), its requests refused.

use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::client::{Payload, Shared, lock};
use super::errors::quote;
use super::{FailureReason, MAX_SERVER_LOG_LINES_PER_SECOND, TransportError, framing};
use crate::text::MAX_QUOTED_BYTES;

/// JSON-RPC "method not found", the answer to every request a server sends toolward.
const METHOD_NOT_FOUND: i64 = -32601;

/// The log lines of one server in the current second, and those dropped in it.
#[derive(Debug)]
pub(super) struct LogBudget {
    second: Instant,
    written: u32,
    dropped: u64,
}

impl LogBudget {
    pub(super) fn new(now: Instant) -> LogBudget {
        LogBudget {
            second: now,
            written: 0,
            dropped: 0,
        }
    }

    /// Whether a line at `now` is written, and how many were dropped in the seconds before it
    /// that no line has said yet.
    pub(super) fn admit(&mut self, now: Instant) -> (bool, u64) {
        let mut dropped = 0;
        if now.duration_since(self.second) >= Duration::from_secs(1) {
            dropped = std::mem::take(&mut self.dropped);
            self.second = now;
            self.written = 0;
        }
        if self.written < MAX_SERVER_LOG_LINES_PER_SECOND {
            self.written += 1;
            (true, dropped)
        } else {
            self.dropped += 1;
            (false, dropped)
        }
    }
}

pub(super) fn not_json_rpc(detail: impl Into<String>) -> FailureReason {
    FailureReason::NotJsonRpc {
        detail: detail.into(),
    }
}

/// Handles one line from the server; an error fails the server.
pub(super) fn handle_line(shared: &Shared, line: &[u8]) -> Result<(), FailureReason> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let message: Value = match serde_json::from_slice(line) {
        Ok(message) => message,
        Err(error) if is_well_formed(line) => {
            refuse_undecodable(shared, line, &error);
            return Ok(());
        }
        Err(error) => {
            // The line's start goes to the operator's log only, escaped: the reason reaches
            // the client (the tool error of every call until a restart) and the audit log,
            // and a line the result reviews never saw must not carry the server's text there.
            let start = String::from_utf8_lossy(line.get(..MAX_QUOTED_BYTES).unwrap_or(line))
                .into_owned();
            tracing::warn!(
                server = %crate::text::escape(&shared.server),
                "server `{}` sent a line that is not JSON ({error}); it starts with `{}`",
                crate::text::escape(&shared.server),
                quote(&start)
            );
            return Err(not_json_rpc(format!(
                "{error} (the line's start is in toolward's log)"
            )));
        }
    };
    let Value::Object(mut message) = message else {
        return Err(not_json_rpc(if message.is_array() {
            "a batch, which MCP no longer has"
        } else {
            "not a JSON object"
        }));
    };
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(not_json_rpc("`jsonrpc` is not `2.0`"));
    }
    let id = message.remove("id");
    match (message.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => {
            answer_server_request(shared, id, &method);
            Ok(())
        }
        (Some(Value::String(method)), None) => {
            handle_notification(shared, &method, message.remove("params"));
            Ok(())
        }
        (Some(_), _) => Err(not_json_rpc("`method` is not a string")),
        (None, Some(id)) => handle_response(shared, id, message, line),
        (None, None) => Err(not_json_rpc(
            "neither a request, a notification nor a response",
        )),
    }
}

/// Whether `line` is well-formed JSON (RFC 8259: UTF-8, the grammar), whether or not it can
/// be decoded: serde_json skips a value without decoding its strings or keeping a stack.
fn is_well_formed(line: &[u8]) -> bool {
    std::str::from_utf8(line)
        .is_ok_and(|text| serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok())
}

/// Refuses one well-formed message that cannot be decoded (see [`framing::undecodable`]):
/// the request it answers, when its `id` can be read, fails now naming why; the connection
/// goes on, since the next line starts a new message all the same. Nothing of the line is
/// quoted: a result the reviews never saw stays out of the log.
fn refuse_undecodable(shared: &Shared, line: &[u8], error: &serde_json::Error) {
    let why = match framing::undecodable(line) {
        Some(found) => found.to_string(),
        // serde_json's message names what and where, never the text; quoted all the same.
        None => quote(&error.to_string()),
    };
    let server = crate::text::escape(&shared.server);
    // Only a response answers a request: the id of the server's own request or
    // notification is no request of toolward's.
    let is_response = matches!(framing::top_level_member(line, "method"), Ok(None));
    let id = framing::top_level_member(line, "id")
        .ok()
        .flatten()
        .filter(|_| is_response)
        .and_then(|bytes| serde_json::from_slice::<u64>(bytes).ok());
    let Some(id) = id else {
        tracing::warn!(
            server = %server,
            "server `{server}` sent a message toolward cannot read ({why}) without a response `id` toolward can read: it was dropped, and a request it may answer ends at its timeout"
        );
        return;
    };
    let Some(pending) = lock(&shared.pending).remove(&id) else {
        tracing::warn!(
            server = %server,
            "server `{server}` answered request {id} with JSON toolward cannot read ({why}); no request waits for it (cancelled or timed out): dropped"
        );
        return;
    };
    tracing::warn!(
        server = %server,
        "server `{server}` answered request {id} (`{}`) with JSON toolward cannot read ({why}): that answer is refused, the server goes on",
        pending.method
    );
    let _ = pending.reply.send(Err(TransportError::UnreadableResponse {
        server: shared.server.clone(),
        method: pending.method.to_owned(),
        detail: why,
    }));
}

/// Refuses a request from the server: toolward offers servers nothing (no roots, sampling or
/// elicitation), except the answer to `ping`, which the specification requires.
fn answer_server_request(shared: &Shared, id: Value, method: &str) {
    let answer = if method == "ping" {
        json!({ "jsonrpc": "2.0", "id": id, "result": {} })
    } else {
        tracing::debug!(server = %shared.server, "server `{}` asked for `{}`; refused", shared.server, quote(method));
        json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": { "code": METHOD_NOT_FOUND, "message": format!("toolward offers servers no `{}`", quote(method)) },
        })
    };
    let _ = shared.send(&answer);
}

fn handle_notification(shared: &Shared, method: &str, params: Option<Value>) {
    match method {
        "notifications/tools/list_changed" => {
            // The operator hears of it once per connection, at a level shown by default: a
            // server that repeats it must not flood the log. (The supervisor tells the
            // client, `crate::supervise`.)
            let mut first = false;
            shared.list_changed.send_modify(|count| {
                first = *count == 0;
                *count += 1;
            });
            if first {
                tracing::warn!(server = %shared.server, "server `{}` says its tool list changed; the loaded tools stay as they are", shared.server);
            } else {
                tracing::debug!(server = %shared.server, "server `{}` says its tool list changed again", shared.server);
            }
        }
        "notifications/progress" => {
            let params = params.unwrap_or(Value::Null);
            let Some(token) = params.get("progressToken").and_then(Value::as_u64) else {
                return;
            };
            let sink = lock(&shared.pending)
                .get(&token)
                .and_then(|pending| pending.progress.clone());
            if let Some(sink) = sink {
                let _ = sink.send(params);
            }
        }
        "notifications/message" => log_server_message(shared, params.unwrap_or(Value::Null)),
        other => {
            tracing::debug!(server = %shared.server, "notification `{}` from server `{}` ignored", quote(other), shared.server)
        }
    }
}

/// A server's log message (MCP specification, "Logging") to tracing, at the server's level.
fn log_server_message(shared: &Shared, params: Value) {
    let (write, dropped) = lock(&shared.log_budget).admit(Instant::now());
    if dropped > 0 {
        tracing::warn!(
            server = %shared.server,
            "server `{}`: {dropped} log messages dropped (more than {MAX_SERVER_LOG_LINES_PER_SECOND} a second)",
            shared.server
        );
    }
    if !write {
        return;
    }
    let level = params
        .get("level")
        .and_then(Value::as_str)
        .unwrap_or("info");
    let logger = params
        .get("logger")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let data = match params.get("data") {
        Some(Value::String(text)) => quote(text),
        Some(other) => quote(&other.to_string()),
        None => String::new(),
    };
    let server = &shared.server;
    let logger = quote(logger);
    match level {
        "debug" => tracing::debug!(server = %server, logger = %logger, "{data}"),
        "info" | "notice" => tracing::info!(server = %server, logger = %logger, "{data}"),
        "warning" => tracing::warn!(server = %server, logger = %logger, "{data}"),
        _ => tracing::error!(server = %server, logger = %logger, "{data}"),
    }
}

fn handle_response(
    shared: &Shared,
    id: Value,
    mut message: Map<String, Value>,
    line: &[u8],
) -> Result<(), FailureReason> {
    let outcome = match (message.remove("result"), message.remove("error")) {
        (Some(result), None) => Ok(result),
        (None, Some(error)) => Err(error),
        (Some(_), Some(_)) => {
            return Err(not_json_rpc("a response with both `result` and `error`"));
        }
        (None, None) => return Err(not_json_rpc("a response with neither `result` nor `error`")),
    };
    let Some(id) = id.as_u64() else {
        // toolward only sends integer ids; a null id answers a message the server could not
        // parse.
        tracing::warn!(server = %shared.server, "server `{}` answered an id toolward did not send: `{}`", shared.server, quote(&id.to_string()));
        return Ok(());
    };
    let Some(pending) = lock(&shared.pending).remove(&id) else {
        // Cancelled or timed out meanwhile.
        tracing::debug!(server = %shared.server, "late answer {id} from server `{}` dropped", shared.server);
        return Ok(());
    };
    let answer = match outcome {
        Ok(result) if pending.raw => match framing::top_level_member(line, "result") {
            Ok(Some(bytes)) => Ok(Payload::Raw(bytes.to_vec())),
            Ok(None) => Ok(Payload::Decoded(result)),
            Err(error) => {
                let reason = not_json_rpc(error.to_string());
                let _ = pending.reply.send(Err(shared.failed_error(reason.clone())));
                return Err(reason);
            }
        },
        Ok(result) => Ok(Payload::Decoded(result)),
        Err(error) => {
            let code = error.get("code").and_then(Value::as_i64);
            let text = error.get("message").and_then(Value::as_str);
            let (Some(code), Some(text)) = (code, text) else {
                let reason =
                    not_json_rpc("an `error` without an integer `code` and a string `message`");
                let _ = pending.reply.send(Err(shared.failed_error(reason.clone())));
                return Err(reason);
            };
            Err(TransportError::Rpc {
                server: shared.server.clone(),
                method: pending.method.to_owned(),
                code,
                message: text.to_owned(),
                data: error.get("data").cloned(),
            })
        }
    };
    let _ = pending.reply.send(answer);
    Ok(())
}
