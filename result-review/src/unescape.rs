//! Text with its escapes decoded, and where each decoded byte came from: what lets a review
//! read JSON-escaped or percent-encoded text as it means, and point its findings back at the
//! bytes the text holds.

use crate::encoded::{hex_value, json_unicode_escape};

/// Decoded text, and where its bytes came from: the escapes, each with the decoded range it
/// gave and the original range it was written as; every other byte was written as it is.
#[derive(Clone, Debug, Default)]
pub(crate) struct Unescaped {
    pub(crate) bytes: Vec<u8>,
    /// `(decoded start, decoded end, original start, original end)` of each escape, in order.
    escapes: Vec<(usize, usize, usize, usize)>,
    /// The original offset of the first decoded byte.
    base: usize,
}

impl Unescaped {
    fn clear(&mut self, base: usize) {
        self.bytes.clear();
        self.escapes.clear();
        self.base = base;
    }

    fn escape(&mut self, bytes: &[u8], from: usize, to: usize) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(bytes);
        self.escapes.push((start, self.bytes.len(), from, to));
    }

    /// The original offset of decoded byte `d`: the start of its escape, or where it was
    /// written.
    fn original_of(&self, d: usize) -> usize {
        let before = self.escapes.partition_point(|&(start, ..)| start <= d);
        match before.checked_sub(1).and_then(|i| self.escapes.get(i)) {
            None => self.base + d,
            Some(&(_, end, from, _)) if d < end => from,
            Some(&(_, end, _, to)) => to + (d - end),
        }
    }

    /// The original range of the decoded range `[start, end)` (not empty): from the start of
    /// its first byte's escape to the end of its last byte's.
    pub(crate) fn original(&self, start: usize, end: usize) -> (usize, usize) {
        let last = end.saturating_sub(1);
        let before = self.escapes.partition_point(|&(s, ..)| s <= last);
        let to = match before.checked_sub(1).and_then(|i| self.escapes.get(i)) {
            Some(&(_, e, _, to)) if last < e => to,
            _ => self.original_of(last) + 1,
        };
        (self.original_of(start), to)
    }

    /// Whether some byte of the decoded range `[start, end)` came from an escape.
    pub(crate) fn any_escaped(&self, start: usize, end: usize) -> bool {
        // The first escape that ends after `start`.
        let first = self.escapes.partition_point(|&(_, e, ..)| e <= start);
        self.escapes.get(first).is_some_and(|&(s, ..)| s < end)
    }

    /// `text[start..end]` with every JSON escape decoded: `\uXXXX` (a surrogate pair as one
    /// character, a lone surrogate as U+FFFD), `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`.
    /// A backslash that starts none of these is kept as it is. The decoding of valid UTF-8 is
    /// valid UTF-8.
    pub(crate) fn json(&mut self, text: &[u8], start: usize, end: usize) {
        self.clear(start);
        let mut i = start;
        while i < end {
            let rest = text.get(i..end).unwrap_or_default();
            let plain = rest.iter().position(|&b| b == b'\\').unwrap_or(rest.len());
            if plain > 0 {
                self.bytes
                    .extend_from_slice(rest.get(..plain).unwrap_or_default());
                i += plain;
                continue;
            }
            let short = match rest.get(1) {
                Some(b'"') => Some(b'"'),
                Some(b'\\') => Some(b'\\'),
                Some(b'/') => Some(b'/'),
                Some(b'b') => Some(0x08),
                Some(b'f') => Some(0x0c),
                Some(b'n') => Some(b'\n'),
                Some(b'r') => Some(b'\r'),
                Some(b't') => Some(b'\t'),
                _ => None,
            };
            if let Some(b) = short {
                self.escape(&[b], i, i + 2);
                i += 2;
            } else if let Some((c, used)) = json_unicode_escape(rest) {
                let mut utf8 = [0; 4];
                self.escape(c.encode_utf8(&mut utf8).as_bytes(), i, i + used);
                i += used;
            } else {
                self.bytes.push(b'\\');
                i += 1;
            }
        }
    }

    /// `text[start..end]` without the ranges `removed` (in order, inside it): what a reader sees
    /// of it once hidden characters are taken out. Each removed range counts as an escape that
    /// decodes to nothing.
    pub(crate) fn without(
        &mut self,
        text: &[u8],
        start: usize,
        end: usize,
        removed: impl Iterator<Item = (usize, usize)>,
    ) {
        self.clear(start);
        let mut at = start;
        for (from, to) in removed {
            self.bytes
                .extend_from_slice(text.get(at..from).unwrap_or_default());
            self.escape(&[], from, to);
            at = to;
        }
        self.bytes
            .extend_from_slice(text.get(at..end).unwrap_or_default());
    }

    /// `text[start..end]` with every percent escape `%XX` decoded (`+` stays `+`).
    pub(crate) fn percent(&mut self, text: &[u8], start: usize, end: usize) {
        self.clear(start);
        let mut i = start;
        while i < end {
            let rest = text.get(i..end).unwrap_or_default();
            let plain = rest.iter().position(|&b| b == b'%').unwrap_or(rest.len());
            if plain > 0 {
                self.bytes
                    .extend_from_slice(rest.get(..plain).unwrap_or_default());
                i += plain;
                continue;
            }
            match rest {
                [b'%', high, low, ..]
                    if hex_value(*high).is_some() && hex_value(*low).is_some() =>
                {
                    let byte = hex_value(*high).unwrap_or(0) << 4 | hex_value(*low).unwrap_or(0);
                    self.escape(&[byte], i, i + 3);
                    i += 3;
                }
                _ => {
                    self.bytes.push(b'%');
                    i += 1;
                }
            }
        }
    }
}

/// The string literals of JSON text: the byte ranges of their contents, between the quotes (an
/// unterminated one runs to the end).
pub(crate) fn json_strings(text: &[u8]) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(quote) = text
        .get(i..)
        .and_then(|rest| rest.iter().position(|&b| b == b'"'))
    {
        let start = i + quote + 1;
        let mut j = start;
        while let Some(&b) = text.get(j) {
            match b {
                b'"' => break,
                b'\\' => j += 2,
                _ => j += 1,
            }
        }
        let end = j.min(text.len());
        found.push((start, end));
        i = end + 1;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes_decode_and_point_back_at_their_escape() {
        let text = br#"a\u0041\n\\\ud83d\ude00\q"#;
        let mut u = Unescaped::default();
        u.json(text, 0, text.len());
        assert_eq!(u.bytes, "aA\n\\\u{1f600}\\q".as_bytes());
        assert_eq!(u.original(0, 1), (0, 1));
        assert_eq!(u.original(1, 2), (1, 7));
        assert_eq!(u.original(2, 3), (7, 9));
        // The four bytes of the emoji come from one surrogate pair.
        assert_eq!(u.original(4, 8), (11, 23));
        assert!(!u.any_escaped(0, 1));
        assert!(u.any_escaped(0, 2));
        // An unknown escape keeps its backslash, as a plain byte.
        assert!(!u.any_escaped(8, 10));
    }

    #[test]
    fn percent_escapes_decode_and_a_bare_percent_stays() {
        let mut u = Unescaped::default();
        u.percent(b"a%41%g1+%", 0, 9);
        assert_eq!(u.bytes, b"aA%g1+%");
        assert_eq!(u.original(1, 2), (1, 4));
        assert_eq!(u.original(2, 5), (4, 7));
    }

    #[test]
    fn json_strings_are_found_with_escaped_quotes_inside() {
        let text = br#"{"a":"x\"y","b":["z"],"c":"open"#;
        let strings: Vec<&[u8]> = json_strings(text)
            .into_iter()
            .map(|(s, e)| &text[s..e])
            .collect();
        assert_eq!(strings, [&b"a"[..], b"x\\\"y", b"b", b"z", b"c", b"open"]);
    }
}
