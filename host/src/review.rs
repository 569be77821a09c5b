//! A result as a review sees it, and a review's redactions applied to the result.
//!
//! [`ResultView::of`] (in `component`) turns a result into the blocks a `results@0.3.0`
//! review reads; [`redact`] applies the spans a review returned: in a text block, the bytes are replaced
//! by a marker naming the kind; in a block of JSON text (`structuredContent`, a resource
//! link), the span must fall inside one string value, which is replaced inside its decoded
//! text and stays a string (a span touching an object key or a non-string is refused). Then
//! every redacted text of at least [`MIN_COPY_BYTES`] bytes is also replaced wherever else
//! it appears in the result (in text, also in its JSON-escaped spelling), so the text copy
//! and the structured copy of a value come out redacted alike.

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json};

use crate::component::{BlockKind, ResultView, Span};

/// Redacted texts shorter than this are replaced only where the review pointed, not
/// searched for elsewhere in the result (a short text recurs innocently).
pub const MIN_COPY_BYTES: usize = 8;

/// The longest kind a marker names; a longer one is cut.
const MAX_KIND_CHARS: usize = 64;

/// The marker that replaces a redacted span of `kind`: `[redacted secret:github-pat]`. The
/// kind is the component's, reduced to ASCII letters, digits and `:+._,-` (anything else
/// becomes `?`) and cut to 64 characters, so a marker cannot carry markup or controls.
pub fn marker(kind: &str) -> String {
    let kind: String = kind
        .chars()
        .take(MAX_KIND_CHARS)
        .map(|c| {
            if c.is_ascii_alphanumeric() || ":+._,-".contains(c) {
                c
            } else {
                '?'
            }
        })
        .collect();
    format!("[redacted {kind}]")
}

/// What [`redact`] did: how many spans of each kind it replaced where the review pointed,
/// and how many copies it replaced elsewhere.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Redacted {
    /// Spans replaced, by kind (the component's kind, as the marker names it).
    pub by_kind: BTreeMap<String, u64>,
    /// Copies of redacted texts replaced elsewhere in the result.
    pub copies: u64,
}

/// Applies `spans` (checked against `view`: block indices and character boundaries) to
/// `content` and `structured`, the result `view` was made from.
///
/// # Errors
/// A reason naming the span when a span in a block of JSON text does not fall inside one
/// string value (it touches an object key, a number, the structure, or two strings): the
/// caller withholds the result rather than deliver what the review meant to hide.
pub fn redact(
    view: &ResultView,
    spans: &[Span],
    content: &mut [Json],
    structured: &mut Option<Json>,
) -> Result<Redacted, String> {
    let mut redacted = Redacted::default();
    // The decoded texts replaced, with their markers, to look for elsewhere.
    let mut copies: Vec<(String, String)> = Vec::new();
    let mut by_block: BTreeMap<usize, Vec<&Span>> = BTreeMap::new();
    for span in spans {
        by_block.entry(span.block).or_default().push(span);
    }
    for (index, mut block_spans) in by_block {
        let Some(block) = view.blocks.get(index) else {
            return Err(format!("a redaction names block {index}, which the result does not have"));
        };
        block_spans.sort_by_key(|span| (span.start, span.end));
        for span in &block_spans {
            *redacted.by_kind.entry(span.kind.clone()).or_insert(0) += 1;
        }
        match block.kind {
            BlockKind::Text | BlockKind::ResourceText => {
                let (new_text, found) = replace_ranges(&block.text, &block_spans);
                copies.extend(found);
                let target = content
                    .get_mut(index)
                    .and_then(|item| text_slot(item, block.kind));
                match target {
                    Some(slot) => *slot = Json::String(new_text),
                    None => return Err(format!("block {index} has no text to redact")),
                }
            }
            BlockKind::Structured | BlockKind::ResourceLink | BlockKind::Other => {
                let (new_value, found) = redact_json_text(&block.text, &block_spans)?;
                copies.extend(found);
                if block.kind == BlockKind::Structured {
                    *structured = Some(new_value);
                } else if let Some(item) = content.get_mut(index) {
                    *item = new_value;
                } else {
                    return Err(format!("block {index} is not in the result's content"));
                }
            }
            BlockKind::Image | BlockKind::Audio | BlockKind::Blob => {
                return Err(format!("a redaction names block {index}, which holds binary data"));
            }
        }
    }
    copies.retain(|(text, _)| text.len() >= MIN_COPY_BYTES);
    copies.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    copies.dedup_by(|a, b| a.0 == b.0);
    if !copies.is_empty() {
        let copies = Copies::new(&copies);
        for item in content.iter_mut() {
            redacted.copies += replace_copies_in_json(item, &copies, true);
        }
        if let Some(structured) = structured {
            redacted.copies += replace_copies_in_json(structured, &copies, false);
        }
    }
    Ok(redacted)
}

/// The text field of a `text` item or of an embedded resource's `text`.
fn text_slot(item: &mut Json, kind: BlockKind) -> Option<&mut Json> {
    match kind {
        BlockKind::Text => item.get_mut("text"),
        BlockKind::ResourceText => item.get_mut("resource")?.get_mut("text"),
        _ => None,
    }
}

/// `text` with the (sorted) spans replaced by markers, overlapping spans merged (the first
/// one's kind names the merged marker); and each replaced text with its marker.
fn replace_ranges(text: &str, spans: &[&Span]) -> (String, Vec<(String, String)>) {
    let mut merged: Vec<(usize, usize, &str)> = Vec::new();
    for span in spans {
        match merged.last_mut() {
            Some(last) if span.start < last.1 => last.1 = last.1.max(span.end),
            _ => merged.push((span.start, span.end, &span.kind)),
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut found = Vec::with_capacity(merged.len());
    let mut at = 0;
    for (start, end, kind) in merged {
        let (Some(before), Some(hidden)) = (text.get(at..start), text.get(start..end)) else {
            continue;
        };
        let mark = marker(kind);
        out.push_str(before);
        out.push_str(&mark);
        found.push((hidden.to_owned(), mark));
        at = end;
    }
    out.push_str(text.get(at..).unwrap_or_default());
    (out, found)
}

/// A string literal of canonical JSON text: the byte range of its content (inside the
/// quotes) and whether it is an object key.
struct Literal {
    start: usize,
    end: usize,
    key: bool,
}

/// The string literals of JSON text `text`.
fn literals(text: &str) -> Vec<Literal> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'"' {
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut j = start;
        while j < bytes.len() && bytes[j] != b'"' {
            j += if bytes[j] == b'\\' { 2 } else { 1 };
        }
        let end = j.min(bytes.len());
        let mut k = end + 1;
        while k < bytes.len() && bytes[k].is_ascii_whitespace() {
            k += 1;
        }
        found.push(Literal {
            start,
            end,
            key: bytes.get(k) == Some(&b':'),
        });
        i = end + 1;
    }
    found
}

/// The decoded text of a literal's escaped content, with for each escaped offset that
/// starts a unit (a character or an escape) the decoded offset it maps to; the content's
/// end maps to the decoded length.
fn decode_literal(escaped: &str) -> Option<(String, Vec<(usize, usize)>)> {
    let decoded: String = serde_json::from_str(&format!("\"{escaped}\"")).ok()?;
    // Map unit boundaries: walk the escaped text unit by unit, decoding each unit alone
    // (a surrogate pair `\uD83D\uDE00` is one unit of twelve bytes).
    let bytes = escaped.as_bytes();
    let mut map = Vec::new();
    let (mut at, mut out) = (0usize, 0usize);
    while at < bytes.len() {
        map.push((at, out));
        let unit_len = if bytes[at] == b'\\' {
            if bytes.get(at + 1) == Some(&b'u') {
                let high = escaped.get(at + 2..at + 6).and_then(|h| u16::from_str_radix(h, 16).ok());
                match high {
                    Some(h) if (0xD800..0xDC00).contains(&h) => 12,
                    _ => 6,
                }
            } else {
                2
            }
        } else {
            escaped[at..].chars().next().map_or(1, char::len_utf8)
        };
        let unit = escaped.get(at..at + unit_len)?;
        let piece: String = serde_json::from_str(&format!("\"{unit}\"")).ok()?;
        out += piece.len();
        at += unit_len;
    }
    map.push((bytes.len(), out));
    Some((decoded, map))
}

/// The decoded offset of escaped offset `at`, widened to the unit it falls in: towards the
/// unit's start for a start, its end for an end.
fn decoded_offset(map: &[(usize, usize)], at: usize, is_end: bool) -> usize {
    match map.binary_search_by_key(&at, |(escaped, _)| *escaped) {
        Ok(found) => map[found].1,
        Err(next) => {
            if is_end {
                map.get(next).map_or(0, |unit| unit.1)
            } else {
                map.get(next.saturating_sub(1)).map_or(0, |unit| unit.1)
            }
        }
    }
}

/// `text` (canonical JSON) with the spans replaced inside the string values they fall in,
/// parsed back; and each replaced text with its marker.
fn redact_json_text(text: &str, spans: &[&Span]) -> Result<(Json, Vec<(String, String)>), String> {
    let literals = literals(text);
    // Spans grouped by the literal that holds them.
    let mut per_literal: BTreeMap<usize, Vec<&Span>> = BTreeMap::new();
    for span in spans {
        // The literals are in order: the last one starting at or before the span.
        let holder = literals
            .partition_point(|literal| literal.start <= span.start)
            .checked_sub(1)
            .filter(|&at| span.end <= literals[at].end);
        match holder {
            Some(at) if !literals[at].key => per_literal.entry(at).or_default().push(span),
            Some(_) => {
                return Err(format!(
                    "the review asked to redact bytes {}..{} of a JSON block, inside an object key: only string values can be redacted",
                    span.start, span.end
                ));
            }
            None => {
                return Err(format!(
                    "the review asked to redact bytes {}..{} of a JSON block, which is not inside one string value",
                    span.start, span.end
                ));
            }
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut found = Vec::new();
    let mut at = 0;
    for (index, literal_spans) in per_literal {
        let literal = &literals[index];
        let escaped = text.get(literal.start..literal.end).unwrap_or_default();
        let Some((decoded, map)) = decode_literal(escaped) else {
            return Err(String::from("a string of the JSON block could not be decoded"));
        };
        let decoded_spans: Vec<Span> = literal_spans
            .iter()
            .map(|span| Span {
                block: span.block,
                start: decoded_offset(&map, span.start - literal.start, false),
                end: decoded_offset(&map, span.end - literal.start, true),
                kind: span.kind.clone(),
            })
            .collect();
        let refs: Vec<&Span> = decoded_spans.iter().collect();
        let (new_decoded, replaced) = replace_ranges(&decoded, &refs);
        found.extend(replaced);
        let quoted = serde_json::to_string(&new_decoded).map_err(|e| e.to_string())?;
        out.push_str(text.get(at..literal.start - 1).unwrap_or_default());
        out.push_str(&quoted);
        at = literal.end + 1;
    }
    out.push_str(text.get(at..).unwrap_or_default());
    let value = serde_json::from_str(&out)
        .map_err(|e| format!("the redacted JSON block does not parse: {e}"))?;
    Ok((value, found))
}

/// The copies [`redact`] looks for: each redacted text (and for `text` items, also its
/// JSON-escaped spelling) with its marker, found all at once (Aho-Corasick, the longest at
/// each place), so a result with thousands of redactions is read once per string, not once
/// per redacted text.
struct Copies {
    /// Every spelling; in `text` items all of them, elsewhere the first `plain`.
    all: Option<aho_corasick::AhoCorasick>,
    plain: Option<aho_corasick::AhoCorasick>,
    /// The marker of each spelling of `all`; the first `plain` are those of `plain`.
    markers: Vec<String>,
}

impl Copies {
    fn new(copies: &[(String, String)]) -> Copies {
        let mut spellings: Vec<String> = copies.iter().map(|(text, _)| text.clone()).collect();
        let mut markers: Vec<String> = copies.iter().map(|(_, mark)| mark.clone()).collect();
        let plain = spellings.len();
        for (hidden, mark) in copies {
            if let Ok(quoted) = serde_json::to_string(hidden) {
                let inner = quoted.get(1..quoted.len().saturating_sub(1)).unwrap_or_default();
                if inner != hidden {
                    spellings.push(inner.to_owned());
                    markers.push(mark.clone());
                }
            }
        }
        let build = |patterns: &[String]| {
            // The NFA, never the DFA: building a DFA from one long redacted text with
            // repeats in it (`AKIA ESC[0m` a thousand times) takes time quadratic in its length.
            aho_corasick::AhoCorasick::builder()
                .kind(Some(aho_corasick::AhoCorasickKind::NoncontiguousNFA))
                .match_kind(aho_corasick::MatchKind::LeftmostLongest)
                .build(patterns)
                .ok()
        };
        Copies {
            all: build(&spellings),
            plain: build(spellings.get(..plain).unwrap_or_default()),
            markers,
        }
    }

    /// `text` with every copy replaced, and how many were (none: `None`).
    fn replace(&self, text: &str, escaped_too: bool) -> Option<(String, u64)> {
        let search = if escaped_too { &self.all } else { &self.plain };
        let search = search.as_ref()?;
        let mut count = 0u64;
        let mut out = String::new();
        let mut at = 0;
        for found in search.find_iter(text) {
            out.push_str(text.get(at..found.start()).unwrap_or_default());
            out.push_str(self.markers.get(found.pattern().as_usize()).map_or("", String::as_str));
            at = found.end();
            count += 1;
        }
        if count == 0 {
            return None;
        }
        out.push_str(text.get(at..).unwrap_or_default());
        Some((out, count))
    }
}

/// Replaces every copy of each redacted text in the string values of `value` (not in
/// object keys), and in `text` items also its JSON-escaped spelling; returns how many.
fn replace_copies_in_json(value: &mut Json, copies: &Copies, escaped_too: bool) -> u64 {
    match value {
        Json::String(text) => match copies.replace(text, escaped_too) {
            Some((replaced, count)) => {
                *text = replaced;
                count
            }
            None => 0,
        },
        Json::Array(items) => items
            .iter_mut()
            .map(|item| replace_copies_in_json(item, copies, escaped_too))
            .sum(),
        Json::Object(members) => replace_copies_in_members(members, copies, escaped_too),
        _ => 0,
    }
}

fn replace_copies_in_members(members: &mut Map<String, Json>, copies: &Copies, escaped_too: bool) -> u64 {
    members
        .values_mut()
        .map(|value| replace_copies_in_json(value, copies, escaped_too))
        .sum()
}

#[cfg(test)]
mod tests;
