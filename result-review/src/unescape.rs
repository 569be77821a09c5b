//! Text with its escapes decoded, and where each decoded byte came from: what lets a review
//! read JSON-escaped or percent-encoded text as it means, and point its findings back at the
//! bytes the text holds.

use crate::encoded::{hex_value, json_unicode_escape};

/// Decoded text and, for each of its bytes, the range of the original text it came from
/// (the whole escape for a byte an escape gives, the byte itself for a byte written as it is).
#[derive(Clone, Debug, Default)]
pub(crate) struct Unescaped {
    pub(crate) bytes: Vec<u8>,
    from: Vec<u32>,
    to: Vec<u32>,
}

impl Unescaped {
    fn clear(&mut self) {
        self.bytes.clear();
        self.from.clear();
        self.to.clear();
    }

    /// The byte `b` of original `[from, to)`.
    fn push(&mut self, b: u8, from: usize, to: usize) {
        self.bytes.push(b);
        // A text past 4 GiB is past every result cap; its offsets saturate.
        self.from.push(u32::try_from(from).unwrap_or(u32::MAX));
        self.to.push(u32::try_from(to).unwrap_or(u32::MAX));
    }

    fn plain(&mut self, bytes: &[u8], at: usize) {
        for (k, &b) in bytes.iter().enumerate() {
            self.push(b, at + k, at + k + 1);
        }
    }

    fn escape(&mut self, bytes: &[u8], from: usize, to: usize) {
        for &b in bytes {
            self.push(b, from, to);
        }
    }

    /// The original range of the decoded range `[start, end)` (not empty).
    pub(crate) fn original(&self, start: usize, end: usize) -> (usize, usize) {
        let from = self.from.get(start).copied().unwrap_or(u32::MAX) as usize;
        let to = end
            .checked_sub(1)
            .and_then(|last| self.to.get(last))
            .copied()
            .unwrap_or(u32::MAX) as usize;
        (from, to)
    }

    /// Whether some byte of the decoded range `[start, end)` came from an escape.
    pub(crate) fn any_escaped(&self, start: usize, end: usize) -> bool {
        let (Some(from), Some(to)) = (self.from.get(start..end), self.to.get(start..end)) else {
            return false;
        };
        from.iter().zip(to).any(|(&f, &t)| t.wrapping_sub(f) != 1)
    }

    /// `text[start..end]` with every JSON escape decoded: `\uXXXX` (a surrogate pair as one
    /// character, a lone surrogate as U+FFFD), `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`.
    /// A backslash that starts none of these is kept as it is. The decoding of valid UTF-8 is
    /// valid UTF-8.
    pub(crate) fn json(&mut self, text: &[u8], start: usize, end: usize) {
        self.clear();
        let mut i = start;
        while i < end {
            let rest = text.get(i..end).unwrap_or_default();
            let plain = rest.iter().position(|&b| b == b'\\').unwrap_or(rest.len());
            if plain > 0 {
                self.plain(rest.get(..plain).unwrap_or_default(), i);
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
                self.plain(b"\\", i);
                i += 1;
            }
        }
    }

    /// `text` with every percent escape `%XX` decoded (`+` stays `+`).
    pub(crate) fn percent(&mut self, text: &[u8]) {
        self.clear();
        let mut i = 0;
        while i < text.len() {
            let rest = text.get(i..).unwrap_or_default();
            let plain = rest.iter().position(|&b| b == b'%').unwrap_or(rest.len());
            if plain > 0 {
                self.plain(rest.get(..plain).unwrap_or_default(), i);
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
                    self.plain(b"%", i);
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
        u.percent(b"a%41%g1+%");
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
