use serde_json::json;

use super::*;

fn span(block: usize, text: &str, needle: &str, kind: &str) -> Span {
    let start = text.find(needle).unwrap_or(usize::MAX);
    Span {
        block,
        start,
        end: start.saturating_add(needle.len()),
        kind: kind.to_owned(),
    }
}

#[test]
fn a_span_of_a_text_block_is_replaced_by_a_marker_naming_its_kind() {
    let mut content = vec![json!({"type": "text", "text": "key ghp_0123456789abcdefghij0123456789abcdef here"})];
    let mut structured = None;
    let view = ResultView::of(&content, None, false, 0);
    let spans = [span(0, &view.blocks[0].text, "ghp_0123456789abcdefghij0123456789abcdef", "secret:github-pat")];
    let done = redact(&view, &spans, &mut content, &mut structured);
    assert_eq!(
        content[0],
        json!({"type": "text", "text": "key [redacted secret:github-pat] here"})
    );
    assert_eq!(done.map(|d| d.by_kind), Ok([("secret:github-pat".to_owned(), 1)].into()));
}

#[test]
fn a_structured_redaction_stays_a_string_and_its_text_copy_is_redacted_alike() {
    let secret = "sk_live_0123456789abcdefGHIJ";
    let structured_value = json!({"name": "deploy", "token": secret, "count": 3});
    let mut content = vec![json!({"type": "text", "text": serde_json::to_string(&structured_value).unwrap_or_default()})];
    let mut structured = Some(structured_value.clone());
    let view = ResultView::of(&content, structured.as_ref(), false, 0);
    let block = &view.blocks[1];
    assert_eq!(block.kind, BlockKind::Structured);
    // Only the structured copy is pointed at; the text copy must follow.
    let spans = [span(1, &block.text, secret, "secret:stripe")];
    let done = redact(&view, &spans, &mut content, &mut structured);
    assert_eq!(
        structured,
        Some(json!({"name": "deploy", "token": "[redacted secret:stripe]", "count": 3}))
    );
    let text = content[0]["text"].as_str().unwrap_or_default();
    assert!(!text.contains(secret), "{text}");
    assert!(text.contains("[redacted secret:stripe]"), "{text}");
    assert_eq!(done.map(|d| d.copies), Ok(1));
}

#[test]
fn a_span_over_an_object_key_or_across_values_is_refused() {
    let mut content = Vec::new();
    let mut structured = Some(json!({"secret_name": "value", "b": "other"}));
    let view = ResultView::of(&content, structured.as_ref(), false, 0);
    let text = view.blocks[0].text.clone();
    let key = [span(0, &text, "secret_name", "k")];
    let refused = redact(&view, &key, &mut content, &mut structured);
    assert!(refused.as_ref().is_err_and(|e| e.contains("object key")), "{refused:?}");
    // Canonical order: `b` (`"other"`) comes before `secret_name` (`"value"`).
    let start = text.find("other").unwrap_or(0);
    let end = text.find("value").unwrap_or(0) + 2;
    let across = [Span { block: 0, start, end, kind: "k".into() }];
    let refused = redact(&view, &across, &mut content, &mut structured);
    assert!(refused.is_err_and(|e| e.contains("not inside one string value")));
}

#[test]
fn a_span_over_escaped_characters_replaces_the_decoded_text() {
    let mut content = Vec::new();
    let original = "line one\nsay \"hi\" \u{202E}evil";
    let mut structured = Some(json!({"note": original}));
    let view = ResultView::of(&content, structured.as_ref(), false, 0);
    let text = view.blocks[0].text.clone();
    // In canonical text the quote is escaped; the span covers `\"hi\"`.
    let spans = [span(0, &text, "\\\"hi\\\"", "quoted")];
    let done = redact(&view, &spans, &mut content, &mut structured);
    assert!(done.is_ok(), "{done:?}");
    assert_eq!(
        structured,
        Some(json!({"note": "line one\nsay [redacted quoted] \u{202E}evil"}))
    );
    // A span starting inside an escape widens to the whole escape.
    let mut structured = Some(json!({"note": original}));
    let at = text.find("\\n").unwrap_or(0) + 1;
    let spans = [Span { block: 0, start: at, end: at + 1, kind: "nl".into() }];
    let done = redact(&view, &spans, &mut content, &mut structured);
    assert!(done.is_ok(), "{done:?}");
    assert_eq!(
        structured,
        Some(json!({"note": "line one[redacted nl]say \"hi\" \u{202E}evil"}))
    );
}

#[test]
fn a_marker_cannot_carry_markup_or_controls() {
    assert_eq!(marker("secret:<b>x</b>\u{1b}[31m"), "[redacted secret:?b?x??b???31m]");
    assert_eq!(marker(&"k".repeat(100)).len(), "[redacted ]".len() + 64);
}

#[test]
fn binary_blocks_are_seen_by_type_size_and_hash_and_links_as_json() {
    let content = vec![
        json!({"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}),
        json!({"type": "resource_link", "uri": "file:///x", "name": "x", "description": "read me"}),
        json!({"type": "resource", "resource": {"uri": "file:///y", "text": "inner", "mimeType": "text/plain"}}),
    ];
    let view = ResultView::of(&content, None, true, 99);
    assert!(view.is_error);
    assert_eq!(view.received_bytes, 99);
    let image = &view.blocks[0];
    assert_eq!((image.kind, image.size, image.text.as_str()), (BlockKind::Image, 5, ""));
    assert_eq!(image.sha256, crate::canonical::sha256_hex(b"hello"));
    assert_eq!(image.mime_type.as_deref(), Some("image/png"));
    let link = &view.blocks[1];
    assert_eq!(link.kind, BlockKind::ResourceLink);
    assert_eq!(link.uri, "file:///x");
    assert!(link.text.contains("\"description\":\"read me\""), "{}", link.text);
    let resource = &view.blocks[2];
    assert_eq!((resource.kind, resource.text.as_str(), resource.uri.as_str()), (BlockKind::ResourceText, "inner", "file:///y"));
}

#[test]
fn a_resource_link_description_can_be_redacted_and_stays_a_link() {
    let mut content = vec![json!({"type": "resource_link", "uri": "file:///x", "name": "x", "description": "token AKIAABCDEFGHIJKLMNOP"})];
    let mut structured = None;
    let view = ResultView::of(&content, None, false, 0);
    let spans = [span(0, &view.blocks[0].text, "AKIAABCDEFGHIJKLMNOP", "secret:aws")];
    let done = redact(&view, &spans, &mut content, &mut structured);
    assert!(done.is_ok(), "{done:?}");
    assert_eq!(
        content[0],
        json!({"type": "resource_link", "uri": "file:///x", "name": "x", "description": "token [redacted secret:aws]"})
    );
}

#[test]
fn thousands_of_distinct_redactions_copy_over_in_one_pass_each() {
    // A text copy and a structured copy of 5,000 distinct tokens: the structured copy is
    // pointed at, each of its texts replaced in the text copy too.
    let tokens: Vec<String> = (0..5000).map(|n| format!("npm_{n:036}")).collect();
    let structured_value = json!({ "tokens": tokens });
    let mut content = vec![json!({"type": "text", "text": serde_json::to_string(&structured_value).unwrap_or_default()})];
    let mut structured = Some(structured_value);
    let view = ResultView::of(&content, structured.as_ref(), false, 0);
    let block_text = view.blocks[1].text.clone();
    let spans: Vec<Span> = tokens.iter().map(|t| span(1, &block_text, t, "secret:npm-access-token")).collect();
    let started = std::time::Instant::now();
    let done = redact(&view, &spans, &mut content, &mut structured);
    let text = content[0]["text"].as_str().unwrap_or_default();
    assert_eq!(done.map(|d| d.copies), Ok(5000));
    assert!(!text.contains("npm_0"), "{}", &text[..200]);
    assert_eq!(text.matches("[redacted secret:npm-access-token]").count(), 5000);
    // Not a timing assertion: the figure is printed for the note (`-- --nocapture`).
    eprintln!("5,000 distinct redactions copied over in {:?}", started.elapsed());
}

#[test]
fn one_long_redacted_text_with_repeats_copies_over_in_linear_time() {
    // `AKIA ESC[0m` repeated, redacted whole: its copies are looked for in the other blocks.
    let long = "AKIA\u{1b}[0m".repeat(20_000);
    let mut content = vec![
        json!({"type": "text", "text": long.clone()}),
        json!({"type": "text", "text": format!("again: {long}")}),
    ];
    let mut structured = None;
    let view = ResultView::of(&content, None, false, 0);
    let spans = [Span { block: 0, start: 0, end: long.len(), kind: "secret:aws-access-key-id".to_owned() }];
    let started = std::time::Instant::now();
    let done = redact(&view, &spans, &mut content, &mut structured);
    assert_eq!(done.map(|d| d.copies), Ok(1));
    assert_eq!(content[1]["text"], "again: [redacted secret:aws-access-key-id]");
    eprintln!("a 200 KB redacted text copied over in {:?}", started.elapsed());
}
