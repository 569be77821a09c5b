//! Encoded copies of secrets: runs of base64, each decoded once, and the text's percent-decoded
//! and JSON-decoded readings, each made once when the text holds such an escape, all reviewed
//! by [`Secrets::scan_reusing`] (one level: what a decoding holds is not decoded again).
//!
//! Every scanner here is one pass over the text, and each run or reading is decoded and
//! reviewed once, so the work is linear in the text's length (a text with both kinds of
//! escape is read about three times).

use crate::search::{self, Candidates, Search};
use crate::secrets::{self, Hit, Secrets};
use crate::unescape::Unescaped;

/// Fewest base64 characters (padding not counted) a base64 run has.
pub(crate) const MIN_BASE64: usize = 24;

/// A secret found by decoding a run: the run's span and the rule id of the first secret its
/// decoding holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EncodedHit {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) rule: &'static str,
    pub(crate) encoding: Encoding,
}

/// How a run is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    Base64,
    Percent,
    Json,
}

impl Encoding {
    /// The suffix of the finding's kind: `secret:<rule>+<suffix>`.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Encoding::Base64 => "base64",
            Encoding::Percent => "percent",
            Encoding::Json => "json",
        }
    }
}

/// The value of each byte as a base64 character of either alphabet (`+` and `-` are 62, `/`
/// and `_` 63), or [`NOT_BASE64`].
const BASE64_VALUES: [u8; 256] = {
    let mut table = [NOT_BASE64; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => NOT_BASE64,
        };
        b += 1;
    }
    table
};

/// What [`BASE64_VALUES`] holds for a byte that is not a base64 character.
const NOT_BASE64: u8 = 0xff;

/// The bytes `text` encodes in base64, standard or URL-safe alphabet (both accepted, mixed
/// too): every character outside both alphabets (padding, line breaks) is skipped, and bits
/// that do not make a whole byte at the end are dropped. Four characters (three bytes) at a
/// time while they are all base64.
pub(crate) fn decode_base64(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3 + 2);
    let mut bits: u32 = 0;
    let mut count = 0;
    let mut rest = text;
    while let Some((&b, after)) = rest.split_first() {
        if count == 0
            && let Some(&[w, x, y, z]) = rest.first_chunk::<4>()
        {
            let [w, x, y, z] = [w, x, y, z].map(|b| BASE64_VALUES[usize::from(b)]);
            // A value is below 64, NOT_BASE64 is not.
            if (w | x | y | z) < 64 {
                let word =
                    u32::from(w) << 18 | u32::from(x) << 12 | u32::from(y) << 6 | u32::from(z);
                out.extend_from_slice(&[(word >> 16) as u8, (word >> 8) as u8, word as u8]);
                rest = rest.get(4..).unwrap_or_default();
                continue;
            }
        }
        rest = after;
        let value = BASE64_VALUES[usize::from(b)];
        if value == NOT_BASE64 {
            continue;
        }
        bits = (bits << 6) | u32::from(value);
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push(((bits >> count) & 0xff) as u8);
        }
    }
    out
}

/// The value of an ASCII hexadecimal digit.
pub(crate) fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// A percent escape, which starts a percent run.
pub(crate) const PERCENT_ESCAPE: &str = r"%[0-9A-Fa-f]{2}";
/// A JSON escape that starts a JSON run.
pub(crate) const JSON_ESCAPE: &str = r"\\(?:/|u[0-9A-Fa-f]{4})";

/// The escapes that start percent and JSON runs, found by searches whose prefilter is
/// `memchr` on `%` and `\`, so text without them costs one fast scan.
#[derive(Clone, Debug)]
pub(crate) struct Escapes {
    percent: Search,
    json: Search,
}

impl Escapes {
    /// The same searches on the `regex` crate ([`Search::on_regex`]).
    #[cfg(feature = "regex-baseline")]
    pub(crate) fn on_regex() -> Result<Escapes, String> {
        let on_regex = |compiled: &search::Compiled| {
            Search::on_regex(compiled).map_err(|e| format!("encoded review: {e}"))
        };
        Ok(Escapes {
            percent: on_regex(&search::PERCENT_ESCAPE)?,
            json: on_regex(&search::JSON_ESCAPE)?,
        })
    }

    pub(crate) fn new() -> Result<Escapes, String> {
        let read = |compiled: &search::Compiled| {
            Search::new(compiled).map_err(|e| format!("encoded review: {e}"))
        };
        Ok(Escapes {
            percent: read(&search::PERCENT_ESCAPE)?,
            json: read(&search::JSON_ESCAPE)?,
        })
    }
}

/// Reviews decodings for secrets.
#[derive(Debug)]
pub(crate) struct Decoder<'a> {
    secrets: &'a Secrets,
    escapes: &'a Escapes,
    hits: Vec<Hit>,
    /// Buffers reused from run to run: the candidates of a decoding, a decoded reading.
    candidates: Candidates,
    unescaped: Unescaped,
    out: Vec<EncodedHit>,
}

impl<'a> Decoder<'a> {
    pub(crate) fn new(secrets: &'a Secrets, escapes: &'a Escapes) -> Decoder<'a> {
        Decoder {
            secrets,
            escapes,
            hits: Vec::new(),
            candidates: Candidates::default(),
            unescaped: Unescaped::default(),
            out: Vec::new(),
        }
    }

    /// Every encoded secret of `text`: base64 runs, then the percent-decoded and the
    /// JSON-decoded readings. `candidates` are the secrets review's of `text`
    /// ([`Secrets::candidates`]).
    pub(crate) fn review(mut self, text: &[u8], candidates: &Candidates) -> Vec<EncodedHit> {
        self.base64_runs(text);
        self.percent_reading(text, candidates.of(secrets::PERCENT_ESCAPES));
        self.json_reading(text, candidates.of(secrets::JSON_ESCAPES));
        self.out
    }

    /// Reviews the decoding of the base64 run `[start, end)`: the first secret it holds
    /// makes the whole run a finding.
    fn review_run(&mut self, start: usize, end: usize, decoded: &[u8]) {
        self.hits.clear();
        self.secrets
            .scan_reusing(decoded, &mut self.candidates, &mut self.hits);
        if let Some(hit) = self.hits.iter().min_by_key(|hit| hit.start) {
            self.out.push(EncodedHit {
                start,
                end,
                rule: hit.rule,
                encoding: Encoding::Base64,
            });
        }
    }

    /// Base64 runs: maximal runs of `[A-Za-z0-9+/_-]` of at least [`MIN_BASE64`] characters,
    /// with up to two `=` of padding after them. A run goes on over a line break (`\n`,
    /// `\r\n`, or the JSON escapes `\n`, `\r\n`) when its line so far is at least
    /// [`MIN_BASE64`] characters long and a multiple of 4 (wrapped base64, as MIME and PEM
    /// write it). A run right after a JSON escape (`\n`, `\t`, `\u0020`…) starts after the escape's
    /// letter.
    fn base64_runs(&mut self, text: &[u8]) {
        let mut at = 0;
        while let Some((start, end)) = next_base64_line(text, at) {
            at = self.base64_run(text, start, end).max(end);
        }
    }

    /// Reviews the base64 run whose first line is `[start, end)`, and returns where it ends.
    fn base64_run(&mut self, text: &[u8], mut start: usize, mut end: usize) -> usize {
        // `…\nQUJD…` or `…\u0020QUJD…` in JSON text: the `n`, or the `u0020`, belongs to
        // the escape.
        if start > 0 && text.get(start - 1) == Some(&b'\\') {
            if text.get(start - 1..).and_then(json_unit).is_some() {
                start += 5;
            } else if matches!(text.get(start), Some(b'b' | b'f' | b'n' | b'r' | b't')) {
                start += 1;
            }
            if start >= end {
                return end;
            }
        }
        let mut line = end - start;
        let mut count = line;
        loop {
            let rest = text.get(end..).unwrap_or_default();
            let line_break = [&b"\r\n"[..], b"\n", b"\\r\\n", b"\\n"]
                .iter()
                .find(|brk| rest.starts_with(brk))
                .map_or(0, |brk| brk.len());
            let continues = line_break > 0
                && line >= MIN_BASE64
                && line.is_multiple_of(4)
                && rest.get(line_break).is_some_and(|&b| is_base64(b));
            if !continues {
                break;
            }
            line = text
                .get(end + line_break..)
                .unwrap_or_default()
                .iter()
                .take_while(|&&b| is_base64(b))
                .count();
            end += line_break + line;
            count += line;
        }
        for _ in 0..2 {
            if text.get(end) == Some(&b'=') {
                end += 1;
            }
        }
        if count >= MIN_BASE64 {
            let run = text.get(start..end).unwrap_or_default();
            // A JSON escape `\n` or `\r` inside: its letter is a base64 character, so the
            // escape is dropped before decoding.
            let decoded = if run.contains(&b'\\') {
                let mut plain = Vec::with_capacity(run.len());
                let mut k = 0;
                while k < run.len() {
                    if run.get(k) == Some(&b'\\') {
                        k += 2;
                    } else {
                        plain.extend(run.get(k).copied());
                        k += 1;
                    }
                }
                decode_base64(&plain)
            } else {
                decode_base64(run)
            };
            self.review_run(start, end, &decoded);
        }
        end
    }

    /// Percent-encoded secrets: each stretch of `text` around a percent escape `%XX`, up to a
    /// line break, a quote or an angle bracket ([`percent_window`]), is decoded
    /// ([`Unescaped::percent`]) and reviewed ([`Decoder::review_reading`]).
    fn percent_reading(&mut self, text: &[u8], candidates: Option<&[usize]>) {
        let mut percent = self.escapes.percent.cursor(text, candidates);
        let mut done = 0;
        while let Some(found) = percent.find_at(done) {
            let (start, end) = percent_window(text, done, found.start);
            let mut unescaped = std::mem::take(&mut self.unescaped);
            unescaped.percent(text, start, end);
            self.review_reading(text, end, &unescaped, None, Encoding::Percent);
            self.unescaped = unescaped;
            done = end.max(found.end);
        }
    }

    /// JSON-escaped secrets: each stretch of `text` around a JSON escape `\uXXXX` or `\/`, up
    /// to a quote or a line break ([`json_window`]: in JSON text, its string), is decoded
    /// ([`Unescaped::json`]: every JSON escape) and reviewed; and when the decoding still holds
    /// such an escape (JSON text inside a JSON string, `\\u0067hp_…`, as a text block that
    /// serializes `structuredContent` holds it), the decoding is decoded once more and reviewed.
    fn json_reading(&mut self, text: &[u8], candidates: Option<&[usize]>) {
        let mut json = self.escapes.json.cursor(text, candidates);
        let mut done = 0;
        while let Some(found) = json.find_at(done) {
            let (start, end) = json_window(text, done, found.start);
            let mut unescaped = std::mem::take(&mut self.unescaped);
            unescaped.json(text, start, end);
            self.review_reading(text, end, &unescaped, None, Encoding::Json);
            self.split_in_reading(&unescaped);
            if holds_json_escape(&unescaped.bytes) {
                let mut twice = Unescaped::default();
                twice.json(&unescaped.bytes, 0, unescaped.bytes.len());
                self.review_reading(text, end, &twice, Some(&unescaped), Encoding::Json);
            }
            self.unescaped = unescaped;
            done = end.max(found.end);
        }
    }

    /// Secrets that a decoded stretch holds broken by hidden characters its escapes decode to
    /// (`ghp_…\u200b…`, a coloured token in a JSON log line, `\u001b[0m` inside it), each
    /// over the bytes it was decoded from ([`crate::split_by_hidden`] on the decoding).
    fn split_in_reading(&mut self, unescaped: &Unescaped) {
        let Ok(decoded) = std::str::from_utf8(&unescaped.bytes) else {
            return;
        };
        let runs = crate::hidden::review(decoded);
        if runs.is_empty() {
            return;
        }
        for hit in crate::split_by_hidden(self.secrets, &unescaped.bytes, &runs) {
            let (start, end) = unescaped.original(hit.start, hit.end);
            self.out.push(EncodedHit {
                start,
                end,
                rule: hit.rule,
                encoding: Encoding::Json,
            });
        }
    }

    /// Reviews a decoded stretch of `text` that ends at `end` (`inner`, or when `outer` is
    /// given, `inner` decodes `outer`'s decoding): every secret with a byte from an escape (one
    /// written as it is was found in the text itself) is a finding over the bytes it was
    /// decoded from. A private key block whose end line is past the stretch runs on through
    /// its end line in the rest of `text` (or to its end).
    fn review_reading(
        &mut self,
        text: &[u8],
        end: usize,
        unescaped: &Unescaped,
        outer: Option<&Unescaped>,
        encoding: Encoding,
    ) {
        self.hits.clear();
        self.secrets
            .scan_reusing(&unescaped.bytes, &mut self.candidates, &mut self.hits);
        for hit in &self.hits {
            let mut escaped = unescaped.any_escaped(hit.start, hit.end);
            let (mut start, mut hit_end) = unescaped.original(hit.start, hit.end);
            if let Some(outer) = outer {
                escaped |= outer.any_escaped(start, hit_end);
                (start, hit_end) = outer.original(start, hit_end);
            }
            if !escaped {
                continue;
            }
            if hit.rule == secrets::PRIVATE_KEY
                && hit.end == unescaped.bytes.len()
                && end < text.len()
            {
                let label = secrets::private_key_label(&unescaped.bytes, hit.start);
                // Unless the stretch holds the block's end line.
                let begin_end = hit.start + 10 + label.len() + 5;
                let closed = self
                    .secrets
                    .private_key_block_end(&unescaped.bytes, begin_end, label)
                    .is_some();
                if !closed {
                    hit_end = self
                        .secrets
                        .private_key_block_end(text, end, label)
                        .unwrap_or(text.len());
                }
            }
            self.out.push(EncodedHit {
                start,
                end: hit_end,
                rule: hit.rule,
                encoding,
            });
        }
    }
}

/// Whether `bytes` holds a JSON escape `\uXXXX` or `\/`.
fn holds_json_escape(bytes: &[u8]) -> bool {
    bytes.iter().enumerate().any(|(at, &b)| {
        b == b'\\'
            && bytes
                .get(at..)
                .is_some_and(|rest| rest.starts_with(b"\\/") || json_unit(rest).is_some())
    })
}

/// How many backslashes stand right before `at`.
fn backslashes_before(text: &[u8], at: usize) -> usize {
    text.get(..at)
        .unwrap_or_default()
        .iter()
        .rev()
        .take_while(|&&b| b == b'\\')
        .count()
}

/// The stretch around the percent escape at `at` that a decoded reading covers: back to
/// `floor` or after the last line break, `"`, `<` or `>` before `at` (what ends a URL in text
/// or markup), and on to the next one or the end. Spaces do not end it: a line may mix
/// escapes and plain text (`-----BEGIN%20RSA PRIVATE KEY-----`).
fn percent_window(text: &[u8], floor: usize, at: usize) -> (usize, usize) {
    let stop = |b: &u8| matches!(b, b'\n' | b'\r' | b'"' | b'<' | b'>');
    let start = text
        .get(floor..at)
        .unwrap_or_default()
        .iter()
        .rposition(stop)
        .map_or(floor, |k| floor + k + 1);
    let end = text
        .get(at..)
        .unwrap_or_default()
        .iter()
        .position(stop)
        .map_or(text.len(), |k| at + k);
    (start, end)
}

/// The stretch around the JSON escape at `at` that a decoded reading covers: back to `floor`
/// or after the last quote not escaped or raw line break before `at`, and on to the next one
/// or the end. In JSON text, that is the string the escape is in.
fn json_window(text: &[u8], floor: usize, at: usize) -> (usize, usize) {
    let mut start = at;
    while start > floor {
        match text.get(start - 1) {
            Some(b'\n' | b'\r') => break,
            Some(b'"') if backslashes_before(text, start - 1).is_multiple_of(2) => break,
            _ => start -= 1,
        }
    }
    // Forward from the stretch's start, so that each backslash pairs with what it escapes.
    let mut end = start;
    while let Some(&b) = text.get(end) {
        match b {
            b'\\' => end += 2,
            b'"' | b'\n' | b'\r' => break,
            _ => end += 1,
        }
    }
    (start, end.min(text.len()))
}

/// Which bytes are base64 characters of either alphabet.
const BASE64: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'_' | b'-');
        b += 1;
    }
    table
};

/// Whether `b` is a base64 character of either alphabet.
fn is_base64(b: u8) -> bool {
    BASE64[usize::from(b)]
}

/// The first maximal run of base64 characters at least [`MIN_BASE64`] long that starts at or
/// after `from`, where no run crosses `from` (the byte before it, or the byte at it, is not a
/// base64 character).
///
/// A skip search: such a run holds the byte [`MIN_BASE64`]` - 1` past any start it can have,
/// so one byte is probed per window, and a probe that is not base64 skips the whole window.
/// Each byte is read about once, most of prose not at all.
fn next_base64_line(text: &[u8], from: usize) -> Option<(usize, usize)> {
    let base64_at = |i: usize| text.get(i).is_some_and(|&b| is_base64(b));
    let mut start = from;
    while start + MIN_BASE64 <= text.len() {
        let probe = start + MIN_BASE64 - 1;
        if !base64_at(probe) {
            start = probe + 1;
            continue;
        }
        // How many base64 characters end at the probe (at most the window).
        let behind = (1..MIN_BASE64)
            .find(|&k| !base64_at(probe - k))
            .unwrap_or(MIN_BASE64);
        if behind < MIN_BASE64 {
            start = probe - behind + 1;
            continue;
        }
        // The window is base64: widen it to the whole run (it cannot start before `start`).
        let mut first = probe + 1 - MIN_BASE64;
        while first > start && base64_at(first - 1) {
            first -= 1;
        }
        let mut end = probe + 1;
        while base64_at(end) {
            end += 1;
        }
        return Some((first, end));
    }
    None
}

/// The UTF-16 code unit of `\uXXXX` at the start of `text`.
pub(crate) fn json_unit(text: &[u8]) -> Option<u16> {
    match text {
        [b'\\', b'u', a, b, c, d, ..] => {
            let mut unit: u16 = 0;
            for digit in [a, b, c, d] {
                unit = unit << 4 | u16::from(hex_value(*digit)?);
            }
            Some(unit)
        }
        _ => None,
    }
}

/// The character of a JSON escape `\uXXXX` (or a pair of them for a surrogate pair) at the
/// start of `text`, and how many bytes it takes.
pub(crate) fn json_unicode_escape(text: &[u8]) -> Option<(char, usize)> {
    let unit = json_unit(text)?;
    if (0xd800..0xdc00).contains(&unit) {
        if let Some(low) = text.get(6..).and_then(json_unit)
            && (0xdc00..0xe000).contains(&low)
        {
            let c = 0x10000 + ((u32::from(unit) - 0xd800) << 10) + (u32::from(low) - 0xdc00);
            return Some((char::from_u32(c).unwrap_or('\u{fffd}'), 12));
        }
        return Some(('\u{fffd}', 6));
    }
    Some((char::from_u32(u32::from(unit)).unwrap_or('\u{fffd}'), 6))
}

#[cfg(test)]
#[path = "encoded/tests.rs"]
mod tests;
