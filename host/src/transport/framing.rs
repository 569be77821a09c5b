//! Line framing of a stdio server's standard output, and the exact bytes of one member of a
//! JSON-RPC message.
//!
//! MCP's stdio transport delimits messages with newlines (MCP specification, "Transports",
//! stdio). We read lines ourselves so that a line longer than the frame limit is refused after
//! reading at most that many bytes, and so that the bytes of a `tools/list` result can be kept
//! exactly as the server sent them, before any decoding.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// A line buffer larger than this is given back to the allocator after use, so one large
/// message does not pin its memory for the life of the server (bytes).
const RETAINED_LINE_CAPACITY_BYTES: usize = 1024 * 1024;

/// Why a line could not be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum FrameError {
    /// The line reached the frame limit without a newline.
    #[error("line longer than the frame limit of {limit} bytes")]
    TooLong {
        /// The frame limit (bytes).
        limit: usize,
    },
    /// Reading the pipe failed.
    #[error("reading the pipe failed")]
    Io(#[source] std::io::Error),
}

/// Splits a byte stream into newline-terminated lines of at most `limit` bytes each.
#[derive(Debug)]
pub(super) struct LineReader<R> {
    inner: R,
    limit: usize,
    line: Vec<u8>,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    /// Reads lines from `inner`, refusing any line of more than `limit` bytes (the newline not
    /// counted).
    pub(super) fn new(inner: R, limit: usize) -> Self {
        Self {
            inner,
            limit,
            line: Vec::new(),
        }
    }

    /// The next line without its newline, or `None` at the end of the stream. A last line
    /// without a newline is returned as a line.
    ///
    /// # Errors
    ///
    /// [`FrameError::TooLong`] as soon as the line exceeds the limit (the rest of it is not
    /// read), [`FrameError::Io`] when reading fails.
    pub(super) async fn next_line(&mut self) -> Result<Option<&[u8]>, FrameError> {
        self.line.clear();
        if self.line.capacity() > RETAINED_LINE_CAPACITY_BYTES {
            self.line = Vec::new();
        }
        loop {
            let available = self.inner.fill_buf().await.map_err(FrameError::Io)?;
            if available.is_empty() {
                return Ok(if self.line.is_empty() {
                    None
                } else {
                    Some(&self.line)
                });
            }
            let newline = available.iter().position(|byte| *byte == b'\n');
            let take = newline.unwrap_or(available.len());
            if self.line.len().saturating_add(take) > self.limit {
                return Err(FrameError::TooLong { limit: self.limit });
            }
            self.line
                .extend_from_slice(available.get(..take).unwrap_or_default());
            self.inner.consume(take + usize::from(newline.is_some()));
            if newline.is_some() {
                return Ok(Some(&self.line));
            }
        }
    }
}

/// Why a member could not be located.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum SpanError {
    /// The text is not a JSON object.
    #[error("the message is not a JSON object")]
    NotAnObject,
    /// The object names the member twice, so which one counts would depend on the decoder.
    #[error("the message has the member `{name}` more than once")]
    Duplicate {
        /// The member's name.
        name: String,
    },
    /// The text ended early or is not JSON.
    #[error("the message is not well-formed JSON")]
    Malformed,
}

/// The exact bytes of the value of the top-level member `name` of the JSON object `text`, or
/// `None` when the object has no such member.
///
/// Member names are compared after unescaping (`"\u0072esult"` is `result`). The scan keeps
/// no recursion, so nesting depth costs nothing.
///
/// # Errors
///
/// [`SpanError`] when `text` is not an object, is malformed, or has the member twice.
pub(super) fn top_level_member<'a>(
    text: &'a [u8],
    name: &str,
) -> Result<Option<&'a [u8]>, SpanError> {
    let mut at = skip_whitespace(text, 0);
    if text.get(at) != Some(&b'{') {
        return Err(SpanError::NotAnObject);
    }
    at = skip_whitespace(text, at + 1);
    if text.get(at) == Some(&b'}') {
        return Ok(None);
    }
    let mut found = None;
    loop {
        if text.get(at) != Some(&b'"') {
            return Err(SpanError::Malformed);
        }
        let key_end = skip_string(text, at)?;
        let key = text.get(at..key_end).ok_or(SpanError::Malformed)?;
        at = skip_whitespace(text, key_end);
        if text.get(at) != Some(&b':') {
            return Err(SpanError::Malformed);
        }
        let value_start = skip_whitespace(text, at + 1);
        let value_end = skip_value(text, value_start)?;
        if key_is(key, name)? {
            if found.is_some() {
                return Err(SpanError::Duplicate {
                    name: name.to_owned(),
                });
            }
            found = text.get(value_start..value_end);
        }
        at = skip_whitespace(text, value_end);
        match text.get(at) {
            Some(b',') => at = skip_whitespace(text, at + 1),
            Some(b'}') => return Ok(found),
            _ => return Err(SpanError::Malformed),
        }
    }
}

/// The exact bytes of each element of the JSON array `text`: the messages of a JSON-RPC
/// batch, each kept as sent (the streamable HTTP transport may answer with one).
///
/// # Errors
///
/// [`SpanError::Malformed`] when `text` is not one well-formed array.
pub(super) fn array_items(text: &[u8]) -> Result<Vec<&[u8]>, SpanError> {
    let mut at = skip_whitespace(text, 0);
    if text.get(at) != Some(&b'[') {
        return Err(SpanError::Malformed);
    }
    at = skip_whitespace(text, at + 1);
    let mut items = Vec::new();
    if text.get(at) != Some(&b']') {
        loop {
            let end = skip_value(text, at)?;
            items.push(text.get(at..end).ok_or(SpanError::Malformed)?);
            at = skip_whitespace(text, end);
            match text.get(at) {
                Some(b',') => at = skip_whitespace(text, at + 1),
                Some(b']') => break,
                _ => return Err(SpanError::Malformed),
            }
        }
    }
    if skip_whitespace(text, at + 1) == text.len() {
        Ok(items)
    } else {
        Err(SpanError::Malformed)
    }
}

/// The deepest serde_json decodes: a value inside 127 arrays or objects. It refuses the
/// 128th level ("recursion limit exceeded"), which bounds its stack.
pub(super) const DECODER_MAX_DEPTH: usize = 127;

/// What the decoder refuses in a well-formed JSON text (RFC 8259 allows both).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum Undecodable {
    /// A `\uXXXX` escape of one half of a UTF-16 surrogate pair without its other half:
    /// it stands for no character, so the string is no Unicode text.
    #[error("a lone surrogate escape `{escape}` at column {column}, which stands for no character")]
    LoneSurrogate {
        /// The escape, `\u` and four hexadecimal digits as written.
        escape: String,
        /// Where it starts, from 1 (bytes).
        column: usize,
    },
    /// Arrays and objects nested past [`DECODER_MAX_DEPTH`].
    #[error(
        "arrays and objects nested deeper than {DECODER_MAX_DEPTH} levels (level {}, at column {column})",
        DECODER_MAX_DEPTH + 1
    )]
    TooDeep {
        /// Where the first array or object past the limit opens, from 1 (bytes).
        column: usize,
    },
}

/// The first thing in the well-formed JSON text `text` that the decoder refuses, or `None`.
/// The scan keeps no recursion.
pub(super) fn undecodable(text: &[u8]) -> Option<Undecodable> {
    let hex = |at: usize| -> Option<u16> {
        let digits = std::str::from_utf8(text.get(at..at + 4)?).ok()?;
        u16::from_str_radix(digits, 16).ok()
    };
    let is_high = |unit: u16| (0xD800..0xDC00).contains(&unit);
    let is_low = |unit: u16| (0xDC00..0xE000).contains(&unit);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut i = 0;
    while let Some(&byte) = text.get(i) {
        match (in_string, byte) {
            (false, b'"') | (true, b'"') => in_string = !in_string,
            (false, b'[' | b'{') => {
                depth += 1;
                if depth > DECODER_MAX_DEPTH {
                    return Some(Undecodable::TooDeep { column: i + 1 });
                }
            }
            (false, b']' | b'}') => depth = depth.saturating_sub(1),
            (true, b'\\') if text.get(i + 1) == Some(&b'u') => {
                let unit = hex(i + 2)?;
                let paired = is_high(unit)
                    && text.get(i + 6..i + 8) == Some(&b"\\u"[..])
                    && hex(i + 8).is_some_and(is_low);
                if paired {
                    i += 12;
                    continue;
                }
                if is_high(unit) || is_low(unit) {
                    let escape = String::from_utf8_lossy(text.get(i..i + 6)?).into_owned();
                    return Some(Undecodable::LoneSurrogate {
                        escape,
                        column: i + 1,
                    });
                }
                i += 6;
                continue;
            }
            (true, b'\\') => {
                i += 2;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Whether the quoted JSON string `key` (quotes included) denotes `name`.
fn key_is(key: &[u8], name: &str) -> Result<bool, SpanError> {
    if key.contains(&b'\\') {
        let decoded: String = serde_json::from_slice(key).map_err(|_| SpanError::Malformed)?;
        Ok(decoded == name)
    } else {
        Ok(key.get(1..key.len().saturating_sub(1)) == Some(name.as_bytes()))
    }
}

fn skip_whitespace(text: &[u8], mut at: usize) -> usize {
    while matches!(text.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// The index just past the string that starts (with its quote) at `at`.
fn skip_string(text: &[u8], at: usize) -> Result<usize, SpanError> {
    let mut i = at + 1;
    loop {
        match text.get(i) {
            Some(b'\\') => i += 2,
            Some(b'"') => return Ok(i + 1),
            Some(_) => i += 1,
            None => return Err(SpanError::Malformed),
        }
    }
}

/// The index just past the value that starts at `at`.
fn skip_value(text: &[u8], at: usize) -> Result<usize, SpanError> {
    match text.get(at) {
        Some(b'"') => skip_string(text, at),
        Some(b'{' | b'[') => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                match text.get(i) {
                    Some(b'"') => {
                        i = skip_string(text, i)?;
                        continue;
                    }
                    Some(b'{' | b'[') => depth += 1,
                    Some(b'}' | b']') => {
                        depth = depth.checked_sub(1).ok_or(SpanError::Malformed)?;
                        if depth == 0 {
                            return Ok(i + 1);
                        }
                    }
                    Some(_) => {}
                    None => return Err(SpanError::Malformed),
                }
                i += 1;
            }
        }
        Some(_) => {
            let mut i = at;
            while let Some(byte) = text.get(i) {
                if matches!(byte, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                    break;
                }
                i += 1;
            }
            if i == at {
                Err(SpanError::Malformed)
            } else {
                Ok(i)
            }
        }
        None => Err(SpanError::Malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_bytes_are_exact() {
        let text =
            br#" {"jsonrpc":"2.0", "result" : {"b":9007199254740993,"a":"\"}\u00e9"} ,"id":1}"#;
        let span = top_level_member(text, "result").unwrap().unwrap();
        assert_eq!(span, br#"{"b":9007199254740993,"a":"\"}\u00e9"}"#);
        assert_eq!(top_level_member(text, "id").unwrap(), Some(&b"1"[..]));
        assert_eq!(top_level_member(text, "error").unwrap(), None);
    }

    #[test]
    fn member_names_are_compared_unescaped() {
        let text = br#"{"\u0072esult":[1,[2]],"id":3}"#;
        assert_eq!(
            top_level_member(text, "result").unwrap(),
            Some(&b"[1,[2]]"[..])
        );
    }

    #[test]
    fn nested_members_of_the_same_name_do_not_count() {
        let text = br#"{"x":{"result":1},"result":{"result":2}}"#;
        assert_eq!(
            top_level_member(text, "result").unwrap(),
            Some(&br#"{"result":2}"#[..])
        );
    }

    #[test]
    fn a_member_given_twice_is_refused() {
        let text = br#"{"result":{},"result":{"tools":[]}}"#;
        assert!(matches!(
            top_level_member(text, "result"),
            Err(SpanError::Duplicate { .. })
        ));
    }

    #[test]
    fn non_objects_and_truncated_text_are_refused() {
        assert_eq!(
            top_level_member(b"[1]", "result"),
            Err(SpanError::NotAnObject)
        );
        assert_eq!(
            top_level_member(br#"{"result":{"a":"#, "result"),
            Err(SpanError::Malformed)
        );
    }

    #[test]
    fn array_items_are_the_exact_bytes_of_each_element() {
        let text = b" [ {\"id\":1, \"result\":{\"n\":18446744073709551617}} ,{\"a\":\"]\"}]\n";
        let items = array_items(text).unwrap();
        assert_eq!(
            items,
            [
                &br#"{"id":1, "result":{"n":18446744073709551617}}"#[..],
                &br#"{"a":"]"}"#[..]
            ]
        );
        assert_eq!(array_items(b"[]").unwrap(), Vec::<&[u8]>::new());
        assert_eq!(array_items(b"[1,]"), Err(SpanError::Malformed));
        assert_eq!(array_items(b"[1] x"), Err(SpanError::Malformed));
        assert_eq!(array_items(b"{}"), Err(SpanError::Malformed));
    }

    #[test]
    fn lone_surrogates_are_found_and_pairs_pass() {
        let found = undecodable(br#"{"a":"ok \u00e9 \ud83d\ude00","b":["\\ud800","x\ud800"]}"#);
        assert_eq!(
            found,
            Some(Undecodable::LoneSurrogate {
                escape: String::from("\\ud800"),
                column: 48
            })
        );
        assert!(matches!(
            undecodable(br#"["\uDC00\ud800"]"#),
            Some(Undecodable::LoneSurrogate { column: 3, .. })
        ));
        assert_eq!(undecodable(br#"{"a":"\ud83d\ude00 \\ud800"}"#), None);
    }

    /// The limit is serde_json's: one level less decodes, the limit's level does not, and
    /// the scan names where the first level past it opens.
    #[test]
    fn nesting_past_the_decoders_limit_is_found_where_it_opens() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let deepest = nested(DECODER_MAX_DEPTH);
        assert!(serde_json::from_str::<serde_json::Value>(&deepest).is_ok());
        assert_eq!(undecodable(deepest.as_bytes()), None);
        let past = format!(r#"{{"s":"[[[[","a":{}}}"#, nested(DECODER_MAX_DEPTH));
        assert!(serde_json::from_str::<serde_json::Value>(&past).is_err());
        assert_eq!(
            undecodable(past.as_bytes()),
            Some(Undecodable::TooDeep {
                column: 16 + DECODER_MAX_DEPTH
            })
        );
    }

    #[tokio::test]
    async fn lines_over_the_limit_are_refused_without_reading_them_whole() {
        let input: &[u8] = b"short\n0123456789abcdef\nnext";
        let mut reader = LineReader::new(input, 8);
        assert_eq!(reader.next_line().await.unwrap(), Some(&b"short"[..]));
        assert!(matches!(
            reader.next_line().await,
            Err(FrameError::TooLong { limit: 8 })
        ));
    }

    #[tokio::test]
    async fn a_last_line_without_newline_is_a_line() {
        let input: &[u8] = b"a\r\n\nb";
        let mut reader = LineReader::new(input, 8);
        assert_eq!(reader.next_line().await.unwrap(), Some(&b"a\r"[..]));
        assert_eq!(reader.next_line().await.unwrap(), Some(&b""[..]));
        assert_eq!(reader.next_line().await.unwrap(), Some(&b"b"[..]));
        assert_eq!(reader.next_line().await.unwrap(), None);
    }
}
