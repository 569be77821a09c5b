//! Step 6, the untrusted result: checked against the tool's `outputSchema`, capped,
//! reviewed by the policy component when it reviews results, and delivered or withheld.

use serde_json::{Map, Value as Json, json};

use crate::component::ResultAction;
use crate::labels::LabelKey;
use crate::review;

use super::*;

/// A result checked and capped, not yet reviewed: what the client would receive.
pub(super) struct Checked {
    content: Vec<Json>,
    /// Absent for a tool error (its text is what the client receives).
    structured: Option<Json>,
    is_error: bool,
    truncated: bool,
}

impl Checked {
    /// The result the client receives: the `CallToolResult`, or the tool error that
    /// quotes a failed call's text.
    fn delivered(self, tool: &RegisteredTool) -> Result<Json, CallError> {
        if self.is_error {
            // Already cut at the cap (`untrusted_result`); a redaction marker may lengthen
            // it by a few bytes.
            let text = content_text(&json!({ "content": self.content }));
            return Err(CallError::ToolError {
                tool: tool.exposed_name.clone(),
                server: tool.server.clone(),
                text: if text.is_empty() {
                    String::from("(no text)")
                } else {
                    text
                },
            });
        }
        let mut result = Map::new();
        result.insert(String::from("content"), Json::Array(self.content));
        if let Some(structured) = self.structured {
            result.insert(String::from("structuredContent"), structured);
        }
        result.insert(String::from("isError"), Json::Bool(false));
        Ok(Json::Object(result))
    }

    /// The JSON text of what the client would receive, for an approver and the audit.
    fn shown(&self) -> String {
        let mut result = Map::new();
        result.insert(String::from("content"), Json::Array(self.content.clone()));
        if let Some(structured) = &self.structured {
            result.insert(String::from("structuredContent"), structured.clone());
        }
        result.insert(String::from("isError"), Json::Bool(self.is_error));
        Json::Object(result).to_string()
    }
}

/// Appended to a call's id to make the id of its held result's approval: letters only, so
/// the id is still a call id the queue and `toolward approvals` take, and no answer to the
/// call (a ULID of 26 characters) can answer its result.
pub(super) const RESULT_ID_SUFFIX: &str = "result";

impl Run<'_> {
    /// Step 6: the server's answer `raw` checked, capped and (when the policy component
    /// reviews results) reviewed, then delivered, withheld, or held for an approval. Returns
    /// the result for the client and whether anything was cut at the cap.
    pub(super) async fn result(
        &self,
        raw: Json,
        tool: &RegisteredTool,
        validators: &ToolValidators,
        call: &CallView,
        received: &[u8],
    ) -> Result<(Json, bool), CallError> {
        let mut checked = self.untrusted_result(raw, tool, validators)?;
        let truncated = checked.truncated;
        if !self.path.reviews {
            return checked.delivered(tool).map(|result| (result, truncated));
        }
        let withheld = |reason: String| CallError::ResultWithheld {
            tool: tool.exposed_name.clone(),
            server: tool.server.clone(),
            reason,
        };
        let view = crate::component::ResultView::of(
            &checked.content,
            checked.structured.as_ref(),
            checked.is_error,
            received.len() as u64,
        );
        let reviewing = self.trace.step("review");
        let answer = self.path.policy.review(call, &view);
        drop(reviewing);
        let mut event = self.event(AuditKind::ResultDecision);
        if self.path.settings.record_results {
            event.result = Some(checked.shown());
        }
        event.result_sha256 = Some(canonical::sha256_hex(received));
        event.result_bytes = Some(received.len() as u64);
        event.determined_by = Some(answer.determined_by.clone());
        let key = LabelKey::of(&self.ctx.session, &self.ctx.principal);
        // What happens to the result: delivered (`Ok`), or withheld with the reason.
        let verdict: Result<(), String> = match answer.action {
            ResultAction::Pass => {
                event.result_action = Some(String::from("pass"));
                Ok(())
            }
            ResultAction::Withhold(reason) => {
                event.result_action = Some(String::from("withhold"));
                Err(reason)
            }
            ResultAction::Redact(spans) => {
                event.result_action = Some(String::from("redact"));
                match review::redact(&view, &spans, &mut checked.content, &mut checked.structured) {
                    Ok(redacted) => {
                        let mut counts = redacted.by_kind;
                        if redacted.copies > 0 {
                            counts.insert(String::from("copies elsewhere in the result"), redacted.copies);
                        }
                        event.redactions = Some(counts);
                        self.still_matches(&checked, validators)
                    }
                    Err(reason) => Err(reason),
                }
            }
            ResultAction::Hold(reason) => {
                event.result_action = Some(String::from("hold"));
                event.reason = Some(reason.clone());
                self.hold_result(&checked, tool, call, reason).await
            }
        };
        let outcome = match verdict {
            Ok(()) => {
                // Labelled before delivery: a result whose labels cannot be kept is not
                // delivered (it would launder them).
                match self.path.labels.join(&key, &answer.labels, now_ms()).await {
                    Ok(joined) => {
                        event.labels = Some(joined);
                        Ok(())
                    }
                    Err(error) => {
                        event.result_action = Some(String::from("withhold"));
                        Err(format!("the session's labels cannot be kept: {error}"))
                    }
                }
            }
            Err(reason) => {
                event.result_action = Some(String::from("withhold"));
                Err(reason)
            }
        };
        match outcome {
            Ok(()) => {
                let delivered = checked.delivered(tool);
                let text = match &delivered {
                    Ok(result) => result.to_string(),
                    Err(error) => error_result(&error.to_string()).to_string(),
                };
                event.delivered_sha256 = Some(canonical::sha256_hex(text.as_bytes()));
                self.stage(event);
                delivered.map(|result| (result, truncated))
            }
            Err(reason) => {
                event.reason = Some(reason.clone());
                self.stage(event);
                Err(withheld(reason))
            }
        }
    }

    /// After a redaction, `structuredContent` must still match the tool's `outputSchema`
    /// (a marker may not fit a `pattern` or `maxLength`): if not, the result is withheld.
    fn still_matches(&self, checked: &Checked, validators: &ToolValidators) -> Result<(), String> {
        let (Some(structured), Some(Some(validator))) = (
            &checked.structured,
            validators.output.as_ref().map(|v| v.as_ref().ok()),
        ) else {
            return Ok(());
        };
        let problems = problems(validator, structured);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "the redacted structured content no longer matches the tool's output schema ({problems})"
            ))
        }
    }

    /// A result the review held: asked of the call's approver, showing what would be
    /// delivered; `Ok` when approved. An approver that answers on a later request
    /// (2026-07-28's `input_required`) would run the tool again: the result is withheld.
    async fn hold_result(
        &self,
        checked: &Checked,
        tool: &RegisteredTool,
        call: &CallView,
        reason: String,
    ) -> Result<(), String> {
        if self.ctx.approver.answers_later() {
            return Err(format!(
                "the policy held the result for an approval ({reason}), but this client answers approvals on a later request, which would run the tool again: the result is withheld"
            ));
        }
        let request = ApprovalRequest {
            call_id: format!("{}{RESULT_ID_SUFFIX}", self.call_id),
            exposed_tool: tool.exposed_name.clone(),
            server: tool.server.clone(),
            tool: tool.upstream_name.clone(),
            effect: tool.effect.as_str().to_owned(),
            arguments: call.arguments.clone(),
            arguments_sha256: call.arguments_sha256.clone(),
            reason: format!("the result is held: {reason}"),
            description_sha256: tool.description_sha256.clone(),
            input_schema_sha256: tool.input_schema_sha256.clone(),
            principal: self.ctx.principal.clone(),
            session: self.ctx.session.clone(),
            time_ms: now_ms(),
            result: Some(checked.shown()),
        };
        let mut asked = self.event(AuditKind::ApprovalAsked);
        asked.decision = Some(AuditDecision::Hold);
        asked.reason = Some(request.reason.clone());
        if let Err(error) = self.record(asked).await {
            return Err(format!("the approval of the result cannot be recorded: {error}"));
        }
        let waiting = self.trace.step("approval wait");
        let answer = self.ask(request, tool).await;
        drop(waiting);
        let mut answered = self.event(AuditKind::ApprovalAnswered);
        let verdict = match &answer.verdict {
            ApprovalAnswer::Approved => {
                answered.decision = Some(AuditDecision::Allow);
                answered.reason = Some(format!("result approved ({})", answer.by));
                Ok(())
            }
            ApprovalAnswer::Denied(why) => {
                answered.decision = Some(AuditDecision::Deny);
                answered.reason = Some(format!("result denied ({}): {why}", answer.by));
                Err(format!("the result was held ({reason}) and denied: {why}"))
            }
            ApprovalAnswer::TimedOut => {
                answered.decision = Some(AuditDecision::Deny);
                let why = format!(
                    "no answer within {} ms",
                    self.path.settings.approval_timeout.as_millis()
                );
                answered.reason = Some(why.clone());
                Err(format!("the result was held ({reason}): {why}"))
            }
        };
        answered.answered_by = Some(answer.by);
        self.stage(answered);
        verdict
    }

    /// Checks and caps the server's result.
    fn untrusted_result(
        &self,
        raw: Json,
        tool: &RegisteredTool,
        validators: &ToolValidators,
    ) -> Result<Checked, CallError> {
        let malformed = |reason: &str| CallError::MalformedResult {
            tool: tool.exposed_name.clone(),
            server: tool.server.clone(),
            reason: reason.to_owned(),
        };
        let Json::Object(mut raw) = raw else {
            return Err(malformed("the result is not an object"));
        };
        let is_error = match raw.get("isError") {
            None | Some(Json::Null) => false,
            Some(Json::Bool(flag)) => *flag,
            Some(_) => return Err(malformed("`isError` is not a boolean")),
        };
        let mut content = match raw.remove("content") {
            None => Vec::new(),
            Some(Json::Array(items)) => items,
            Some(_) => return Err(malformed("`content` is not an array")),
        };
        if self.path.reviews {
            content.iter_mut().for_each(strip_block);
        }
        let cap = self.path.settings.limits_of(&tool.server).max_result_bytes;
        let cut_at = if self.path.reviews {
            CutAt::TokenStart
        } else {
            CutAt::Budget
        };
        if is_error {
            // The client gets the items' text joined, cut at the cap: that one text is what
            // is reviewed.
            let text = content_text(&json!({ "content": content }));
            let (text, truncated) = cut(&text, cap, cut_at);
            return Ok(Checked {
                content: vec![json!({ "type": "text", "text": text })],
                structured: None,
                is_error,
                truncated,
            });
        }
        let structured = raw.remove("structuredContent");
        if let Some(Some(validator)) = validators.output.as_ref().map(|v| v.as_ref().ok()) {
            let Some(structured) = &structured else {
                return Err(CallError::OutputMismatch {
                    tool: tool.exposed_name.clone(),
                    server: tool.server.clone(),
                    problems: String::from(
                        "the tool declares an output schema but sent no `structuredContent`",
                    ),
                });
            };
            let problems = problems(validator, structured);
            if !problems.is_empty() {
                return Err(CallError::OutputMismatch {
                    tool: tool.exposed_name.clone(),
                    server: tool.server.clone(),
                    problems,
                });
            }
        } else if let Some(Err(reason)) = &validators.output {
            return Err(CallError::Schema {
                tool: tool.exposed_name.clone(),
                server: tool.server.clone(),
                which: "output schema",
                reason: reason.clone(),
            });
        }
        let (mut content, mut truncated) = cap_content(content, cap, cut_at);
        let structured = structured.and_then(|mut structured| {
            // The structure (keys, numbers, punctuation) takes its share of the cap, the
            // strings the rest; a structure that alone is past the cap cannot be cut to fit.
            let skeleton = json_len(&structured).saturating_sub(string_values_len(&structured));
            if skeleton > cap {
                truncated = true;
                let text =
                    STRUCTURED_DROPPED_MARKER.replace("{}", &json_len(&structured).to_string());
                content.push(json!({ "type": "text", "text": text }));
                return None;
            }
            let mut budget = cap - skeleton;
            truncated |= cap_strings(&mut structured, &mut budget, cut_at);
            Some(structured)
        });
        Ok(Checked {
            content,
            structured,
            is_error,
            truncated,
        })
    }
}


/// Takes out of a content block, when the policy reviews results, what no review reads and
/// no client needs: its `_meta` (and
/// an embedded resource's), and any `annotations` member but `audience` (`user` or
/// `assistant`), `priority` (a number) and `lastModified` (an ISO 8601 date's characters
/// only). A server's string there would otherwise reach the client unreviewed.
pub(super) fn strip_block(item: &mut Json) {
    let Json::Object(block) = item else {
        return;
    };
    block.remove("_meta");
    if let Some(Json::Object(resource)) = block.get_mut("resource") {
        resource.remove("_meta");
    }
    if let Some(annotations) = block.get_mut("annotations") {
        let kept = match annotations {
            Json::Object(members) => {
                let mut kept = Map::new();
                if let Some(Json::Array(audience)) = members.get("audience") {
                    let known: Vec<Json> = audience
                        .iter()
                        .filter(|role| matches!(role.as_str(), Some("user" | "assistant")))
                        .cloned()
                        .collect();
                    kept.insert(String::from("audience"), Json::Array(known));
                }
                if let Some(priority) = members.get("priority").filter(|p| p.is_number()) {
                    kept.insert(String::from("priority"), priority.clone());
                }
                if let Some(date) = members.get("lastModified").filter(|d| {
                    d.as_str().is_some_and(|d| {
                        !d.is_empty()
                            && d.len() <= 40
                            && d.bytes().all(|b| b.is_ascii_digit() || b"-:.TZ+".contains(&b))
                    })
                }) {
                    kept.insert(String::from("lastModified"), date.clone());
                }
                kept
            }
            _ => Map::new(),
        };
        *annotations = Json::Object(kept);
    }
}

/// The text items of a result's `content`, joined by line breaks.
pub(super) fn content_text(result: &Json) -> String {
    result
        .get("content")
        .and_then(Json::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.get("text").and_then(Json::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

pub(super) fn marker(bytes: usize) -> String {
    TRUNCATION_MARKER.replace("{}", &bytes.to_string())
}

/// Where [`cut`] may cut a text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CutAt {
    /// Where the budget ends (at a character boundary).
    Budget,
    /// Where the budget ends, or when that falls inside a token (a run of ASCII letters,
    /// digits and `+/=_-.%\~:`, the characters keys, tokens, their encodings and URLs are
    /// made of), at the token's start: when results are reviewed, so that a secret's head
    /// never reaches the model without the tail a review needs to recognise it.
    TokenStart,
}

/// `text` cut to at most `budget` bytes at a character boundary (moved back as `at` says),
/// with the marker appended when anything was cut; and whether it was.
pub(super) fn cut(text: &str, budget: usize, at: CutAt) -> (String, bool) {
    if text.len() <= budget {
        return (text.to_owned(), false);
    }
    let mut end = budget;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let bytes = text.as_bytes();
    if at == CutAt::TokenStart && bytes.get(end).copied().is_some_and(token_byte) {
        while end > 0 && bytes.get(end - 1).copied().is_some_and(token_byte) {
            end -= 1;
        }
    }
    let kept = text.get(..end).unwrap_or_default();
    (format!("{kept}\n{}", marker(text.len() - end)), true)
}

/// Whether `b` may be part of a token, for [`cut`].
fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"+/=_-.%\\~:".contains(&b)
}

/// Caps `content` at `cap` bytes of JSON text: each item counts its JSON size and the comma
/// after it, a text item's `text` by its UTF-8 bytes (so the cut lands where the budget ends,
/// whatever the escapes), so a million empty blocks cost their JSON, not nothing. The text
/// item that crosses the cap is cut and marked when its envelope still fits; later items are
/// replaced by one marker.
pub(super) fn cap_content(content: Vec<Json>, cap: usize, at: CutAt) -> (Vec<Json>, bool) {
    let mut budget = cap;
    let mut kept = Vec::with_capacity(content.len().min(1024));
    let mut dropped_bytes = 0usize;
    let mut truncated = false;
    for item in content {
        let size = item_size(&item);
        if truncated {
            dropped_bytes = dropped_bytes.saturating_add(size);
            continue;
        }
        if size <= budget {
            budget -= size;
            kept.push(item);
            continue;
        }
        truncated = true;
        let text = item.get("text").and_then(Json::as_str);
        match text.map(|text| (text, size.saturating_sub(text.len()))) {
            Some((text, envelope)) if envelope < budget => {
                let (text, _) = cut(text, budget - envelope, at);
                let mut item = item;
                if let Json::Object(map) = &mut item {
                    map.insert(String::from("text"), Json::String(text));
                }
                kept.push(item);
            }
            _ => dropped_bytes = dropped_bytes.saturating_add(size),
        }
        budget = 0;
    }
    if dropped_bytes > 0 {
        kept.push(json!({ "type": "text", "text": marker(dropped_bytes) }));
    }
    (kept, truncated)
}

/// What a content item costs against the result cap: its JSON size and a comma, with a text
/// item's `text` counted by its UTF-8 bytes (and its quotes) rather than its escaped form.
pub(super) fn item_size(item: &Json) -> usize {
    let whole = json_len(item).saturating_add(1);
    match item.get("text").and_then(Json::as_str) {
        Some(text) => whole
            .saturating_sub(json_len(text))
            .saturating_add(text.len() + 2),
        None => whole,
    }
}

/// The bytes of the JSON text of every string value (not key) in `value`, between the quotes.
pub(super) fn string_values_len(value: &Json) -> usize {
    match value {
        Json::String(text) => json_len(text.as_str()).saturating_sub(2),
        Json::Array(items) => items.iter().map(string_values_len).sum(),
        Json::Object(map) => map.values().map(string_values_len).sum(),
        Json::Null | Json::Bool(_) | Json::Number(_) => 0,
    }
}

/// The length of `value`'s JSON text, counted without building it.
pub(super) fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(bytes.len());
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

/// Cuts the strings of `value`, depth first, once their bytes together pass `budget`;
/// returns whether any was cut. Structure is kept, so a string field stays a string.
pub(super) fn cap_strings(value: &mut Json, budget: &mut usize, at: CutAt) -> bool {
    match value {
        Json::String(text) => {
            if text.len() <= *budget {
                *budget -= text.len();
                false
            } else {
                let (cut_text, _) = cut(text, *budget, at);
                *text = cut_text;
                *budget = 0;
                true
            }
        }
        Json::Array(items) => items
            .iter_mut()
            .fold(false, |cut, item| cap_strings(item, budget, at) | cut),
        Json::Object(map) => map
            .values_mut()
            .fold(false, |cut, item| cap_strings(item, budget, at) | cut),
        Json::Null | Json::Bool(_) | Json::Number(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_inside_a_token_moves_back_to_its_start() {
        let token = "ghp_0123456789abcdefghijABCDEFGHIJklmnop";
        let text = format!("key: {token} more");
        let (kept, truncated) = cut(&text, 20, CutAt::TokenStart);
        assert!(truncated);
        assert_eq!(kept, format!("key: \n{}", marker(text.len() - 5)));
        // At a token's end, or between two, nothing moves.
        let (kept, _) = cut(&text, 5 + token.len(), CutAt::TokenStart);
        assert!(kept.starts_with(&format!("key: {token}\n")), "{kept}");
        // A text that is one token is cut whole.
        let (kept, _) = cut(token, 10, CutAt::TokenStart);
        assert_eq!(kept, format!("\n{}", marker(token.len())));
        // Without reviews, the cut lands where the budget ends.
        let (kept, _) = cut(token, 10, CutAt::Budget);
        assert_eq!(kept, format!("ghp_012345\n{}", marker(token.len() - 10)));
    }

    #[test]
    fn content_past_the_cap_is_cut_at_a_character_boundary_and_marked() {
        // `{"type":"text","text":""},` is 26 bytes: 5 are left for the text.
        let (content, truncated) = cap_content(
            vec![
                json!({"type": "text", "text": "ééééé"}),
                json!({"type": "image", "data": "AAAA", "mimeType": "image/png"}),
            ],
            31,
            CutAt::Budget,
        );
        assert!(truncated);
        let text = content[0]["text"].as_str().unwrap();
        assert!(
            text.starts_with("éé\n[toolward: truncated 6 bytes]"),
            "{text}"
        );
        assert!(
            content[1]["text"]
                .as_str()
                .unwrap()
                .starts_with("[toolward: truncated")
        );
    }

    #[test]
    fn every_content_item_costs_its_envelope_so_empty_blocks_cannot_pass_the_cap() {
        let empty = json!({"type": "text", "text": ""});
        let (content, truncated) = cap_content(vec![empty.clone(); 1000], 260, CutAt::Budget);
        assert!(truncated);
        assert_eq!(content.len(), 11);
        assert_eq!(content[..10], vec![empty; 10][..]);
        assert_eq!(content[10]["text"], "[toolward: truncated 25740 bytes]");
    }

    #[test]
    fn an_item_whose_envelope_does_not_fit_is_dropped_whole() {
        let (content, truncated) = cap_content(vec![json!({"type": "text", "text": "abc"})], 10, CutAt::Budget);
        assert!(truncated);
        assert_eq!(
            content,
            [json!({"type": "text", "text": "[toolward: truncated 29 bytes]"})]
        );
    }

    #[test]
    fn structured_strings_past_the_cap_are_cut_and_stay_strings() {
        let mut value = json!({"content": "abcdefgh", "n": 1});
        let mut budget = 3;
        assert!(cap_strings(&mut value, &mut budget, CutAt::Budget));
        assert_eq!(value["content"], "abc\n[toolward: truncated 5 bytes]");
        assert_eq!(value["n"], 1);
    }
}
