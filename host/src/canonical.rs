//! Exact JSON: parse JSON text without passing numbers through `f64`, write one canonical
//! byte form, and hash it. Spec: `docs/canonical-json.md`.
//!
//! - [`parse`] reads JSON text (RFC 8259) from bytes into a [`Value`] whose numbers keep their
//!   exact decimal value and whose object members are sorted by key. It refuses invalid UTF-8,
//!   lone surrogates, duplicate keys, nesting deeper than [`MAX_JSON_DEPTH`] and trailing data.
//! - [`to_canonical`] (and `Display` for [`Value`]) writes the one canonical text of a value:
//!   keys sorted by code point, no whitespace, one string escaping, one number spelling.
//! - [`canonicalize`] does both; [`sha256_hex`] hashes bytes; [`canonical_len`] is the
//!   length of the canonical text, without writing it.
//!
//! The canonical form is this crate's own, not RFC 8785 (JCS): numbers are compared by exact
//! decimal value, never rounded to `f64`.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// Deepest nesting of arrays and objects [`parse`] accepts: a scalar at the top level has depth
/// 0 and each enclosing array or object adds 1.
///
/// Why: the parser itself keeps its own stack, but every later walk over a [`Value`] (the
/// canonical writer, the derived `Drop`, `Clone`, `PartialEq`, `Hash`, `Debug`, and callers'
/// own code) recurses once per level; 128 keeps those far from the thread's stack limit. It is
/// also `serde_json`'s default recursion limit, so no text `serde_json` reads is refused here
/// for depth.
pub const MAX_JSON_DEPTH: usize = 128;

/// Most digits an exponent of a number may have once its leading zeros are dropped.
///
/// Why: exponents are summed with digit counts in `i128`, exactly; 18 digits (below `10^18`)
/// is far beyond any meaningful value and keeps that arithmetic from overflowing. Large
/// exponents cost nothing else: the canonical text of `1e999999999` is `1e999999999`.
pub const MAX_EXPONENT_DIGITS: usize = 18;

/// Most zeros the canonical text of an integer spells out: an integer `D × 10^E` (with `D`
/// not ending in `0`) is written as plain digits when `0 ≤ E ≤ 20`, otherwise in exponent
/// form. Why: every `u64` and `i64` is plain digits, and the text stays proportional to the
/// input (at most 20 bytes of zeros that were not in it).
const MAX_PLAIN_TRAILING_ZEROS: i128 = 20;

/// Fractions `D × 10^E` (`E < 0`) are written as plain decimals when their decimal exponent
/// `E + digits(D) − 1` is at least this, so at most 5 zeros follow the point before the first
/// significant digit (`0.000001`, but `1e-7`), as JavaScript writes numbers.
const MIN_PLAIN_FRACTION_EXPONENT: i128 = -6;

/// Why JSON text could not be read, or an object could not be built.
///
/// Offsets are byte offsets into the input, counted from 0.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    /// The bytes are not UTF-8 (RFC 8259 §8.1).
    #[error("invalid UTF-8 at byte {offset}")]
    InvalidUtf8 {
        /// Offset of the first byte of the invalid sequence.
        offset: usize,
    },
    /// The text ended inside a value.
    #[error("unexpected end of JSON text at byte {offset}, expected {expected}")]
    UnexpectedEnd {
        /// Length of the input.
        offset: usize,
        /// What would have been valid here.
        expected: &'static str,
    },
    /// A character that the JSON grammar does not allow here.
    #[error("unexpected `{}` at byte {offset}, expected {expected}", found.escape_debug())]
    Unexpected {
        /// Offset of the character.
        offset: usize,
        /// The character found.
        found: char,
        /// What would have been valid here.
        expected: &'static str,
    },
    /// A number's integer part has a leading zero (`01`), which JSON forbids.
    #[error("number with a leading zero at byte {offset}")]
    LeadingZero {
        /// Offset of the zero.
        offset: usize,
    },
    /// A number's exponent has more than [`MAX_EXPONENT_DIGITS`] significant digits.
    #[error(
        "number exponent of `{digits}` digits at byte {offset}, more than the limit of `{limit}`"
    )]
    ExponentTooLarge {
        /// Offset of the number.
        offset: usize,
        /// Significant digits in the exponent.
        digits: usize,
        /// [`MAX_EXPONENT_DIGITS`].
        limit: usize,
    },
    /// A string holds a raw control character U+0000 to U+001F, which JSON requires escaped.
    #[error("unescaped control character `U+{code:04X}` in string at byte {offset}")]
    ControlCharacter {
        /// Offset of the character.
        offset: usize,
        /// Its code point.
        code: u32,
    },
    /// A backslash escape that JSON does not define, or a `\u` without four hex digits.
    #[error("invalid escape in string at byte {offset}")]
    InvalidEscape {
        /// Offset of the backslash.
        offset: usize,
    },
    /// A `\u` escape of a UTF-16 surrogate that is not half of a high-low pair: it names no
    /// Unicode scalar value, so no UTF-8 text can hold it.
    #[error("lone surrogate `\\u{code:04x}` in string at byte {offset}")]
    LoneSurrogate {
        /// Offset of the backslash.
        offset: usize,
        /// The surrogate.
        code: u32,
    },
    /// An object names one key twice; JSON leaves the meaning open (RFC 8259 §4), so it is
    /// refused as ambiguous.
    #[error("duplicate key `{}` in the object at `{}` at byte {offset}", key.escape_debug(), pointer.escape_debug())]
    DuplicateKey {
        /// The key.
        key: String,
        /// RFC 6901 JSON Pointer of the object holding it (`""` for the top level).
        pointer: String,
        /// Offset of the second occurrence of the key.
        offset: usize,
    },
    /// [`Value::object`] was given one key twice.
    #[error("duplicate key `{}` in object members", key.escape_debug())]
    DuplicateMember {
        /// The key.
        key: String,
    },
    /// Arrays and objects nest deeper than [`MAX_JSON_DEPTH`].
    #[error("nesting deeper than the limit of `{limit}` at byte {offset}")]
    TooDeep {
        /// Offset of the `[` or `{` that goes past the limit.
        offset: usize,
        /// [`MAX_JSON_DEPTH`].
        limit: usize,
    },
    /// Something other than whitespace follows the value.
    #[error("trailing data after the JSON value at byte {offset}")]
    TrailingData {
        /// Offset of the first byte after the value and its whitespace.
        offset: usize,
    },
}

impl CanonicalError {
    /// Byte offset into the input the error is about, if it is about input text.
    pub fn offset(&self) -> Option<usize> {
        match self {
            Self::InvalidUtf8 { offset }
            | Self::UnexpectedEnd { offset, .. }
            | Self::Unexpected { offset, .. }
            | Self::LeadingZero { offset }
            | Self::ExponentTooLarge { offset, .. }
            | Self::ControlCharacter { offset, .. }
            | Self::InvalidEscape { offset }
            | Self::LoneSurrogate { offset, .. }
            | Self::DuplicateKey { offset, .. }
            | Self::TooDeep { offset, .. }
            | Self::TrailingData { offset } => Some(*offset),
            Self::DuplicateMember { .. } => None,
        }
    }
}

/// A JSON value whose numbers keep their exact decimal value.
///
/// Values from [`parse`] and [`Value::object`] keep the invariants below; a value built from the
/// variants directly should keep them too, or equality and [`Value::get`] will not mean what
/// they say.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Value {
    /// `null`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// A number, exact.
    Number(Number),
    /// A string, decoded.
    String(String),
    /// An array.
    Array(Vec<Value>),
    /// An object: members sorted by key (by code point), keys unique.
    Object(Vec<(String, Value)>),
}

/// A JSON number held as its canonical decimal text (see `docs/canonical-json.md`), so that
/// two numbers are equal exactly when their decimal values are equal.
///
/// `Ord` compares decimal values exactly (`-2 < 1e-400 < 0.1 < 0.1000000000000000055511151231257827`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Number(String);

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for Value {
    /// Writes the canonical text (see [`to_canonical`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&to_canonical(self))
    }
}

/// Parses one JSON text (RFC 8259) into a [`Value`], keeping numbers exact and sorting object
/// members by key.
///
/// Whitespace is space, tab, line feed and carriage return only; a byte order mark is refused.
///
/// # Errors
///
/// A [`CanonicalError`] carrying the byte offset of the first problem: invalid UTF-8, a syntax
/// error (including leading zeros and raw control characters in strings), a lone surrogate in
/// a `\u` escape, a duplicate key (with the JSON Pointer of its object), nesting deeper than
/// [`MAX_JSON_DEPTH`], an exponent longer than [`MAX_EXPONENT_DIGITS`], or trailing data.
pub fn parse(bytes: &[u8]) -> Result<Value, CanonicalError> {
    Parser { bytes, pos: 0 }.parse_document()
}

/// Writes the canonical text of `value`: object members sorted by key by code point, no
/// whitespace, strings escaped as in `docs/canonical-json.md`, numbers in their canonical
/// spelling.
///
/// An object built from the variants directly with unsorted members is written sorted; one with
/// duplicate keys (which [`parse`] and [`Value::object`] never make) is written with both.
pub fn to_canonical(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

/// Appends the canonical text of `value` to `out` (see [`to_canonical`]), for writers that
/// embed values in a larger text.
pub fn write_canonical(out: &mut String, value: &Value) {
    write_value(out, value);
}

/// The length in bytes of [`to_canonical`]`(value)`, counted without writing the text (for
/// a size bound checked on every listed tool).
pub fn canonical_len(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(n) => n.0.len(),
        Value::String(s) => string_len(s),
        Value::Array(items) => {
            let commas = items.len().saturating_sub(1);
            2 + commas + items.iter().map(canonical_len).sum::<usize>()
        }
        Value::Object(members) => object_len(members, None),
    }
}

/// [`canonical_len`] of an object with `members`; with `known` (a key and a length), the
/// member of that key counts as that many bytes, for a caller that wrote its value's
/// canonical text already.
pub fn object_len(members: &[(String, Value)], known: Option<(&str, usize)>) -> usize {
    let commas = members.len().saturating_sub(1);
    let members: usize = members
        .iter()
        .map(|(key, value)| {
            let value_len = match known {
                Some((known_key, len)) if key == known_key => len,
                _ => canonical_len(value),
            };
            string_len(key) + 1 + value_len
        })
        .sum();
    2 + commas + members
}

/// The length in bytes of what [`write_string`] writes for `s`.
fn string_len(s: &str) -> usize {
    let bytes = s.as_bytes();
    if escapes_nothing(bytes) {
        return 2 + bytes.len();
    }
    let escapes: usize = bytes
        .iter()
        .map(|&b| match b {
            b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 1,
            0x00..=0x1f => 5,
            _ => 0,
        })
        .sum();
    2 + bytes.len() + escapes
}

/// Whether [`write_string`] writes `bytes` as they are. Most strings escape nothing: this
/// finds that out a block at a time, without an early exit inside the block so the check
/// compiles to vector compares (matching byte by byte showed in profiles of reading a page
/// and of writing canonical text).
fn escapes_nothing(bytes: &[u8]) -> bool {
    bytes.chunks(64).all(|block| {
        !block.iter().fold(false, |any, &b| {
            any | (b < 0x20) | (b == b'"') | (b == b'\\')
        })
    })
}

/// Parses JSON text and writes its canonical text: `to_canonical(&parse(bytes)?)`.
///
/// # Errors
///
/// As [`parse`].
pub fn canonicalize(bytes: &[u8]) -> Result<String, CanonicalError> {
    let value = parse(bytes)?;
    let mut out = String::with_capacity(bytes.len());
    write_value(&mut out, &value);
    Ok(out)
}

/// SHA-256 of `bytes`, as 64 lowercase hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    // `encode_to_slice`, not `hex::encode`: the latter collects an iterator of chars, which
    // showed in profiles of the call path (three audit lines and the arguments a call).
    let digest = Sha256::digest(bytes);
    let mut text = [0u8; 64];
    let hex = hex::encode_to_slice(digest, &mut text)
        .ok()
        .and_then(|()| std::str::from_utf8(&text).ok());
    match hex {
        Some(hex) => hex.to_owned(),
        None => hex::encode(digest),
    }
}

/// Escapes one reference token for an RFC 6901 JSON Pointer: `~` becomes `~0` and `/` becomes
/// `~1`. Prefix each token with `/` to build a pointer.
pub fn pointer_token(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    push_pointer_token(&mut out, token);
    out
}

/// Appends [`pointer_token`]`(token)` to `out`.
pub fn push_pointer_token(out: &mut String, token: &str) {
    for c in token.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
}

impl Value {
    /// What the value is, for messages: `null`, `a boolean`, `a number`, `a string`, `an
    /// array`, `an object`.
    #[must_use]
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }

    /// Whether some value inside this one is more than `limit` levels below it (a member or
    /// item is one level down), walked without recursion.
    pub fn nests_deeper_than(&self, limit: usize) -> bool {
        let mut stack = vec![(self, 0_usize)];
        while let Some((value, depth)) = stack.pop() {
            if depth > limit {
                return true;
            }
            match value {
                Value::Array(items) => stack.extend(items.iter().map(|item| (item, depth + 1))),
                Value::Object(members) => {
                    stack.extend(members.iter().map(|(_, item)| (item, depth + 1)));
                }
                Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
            }
        }
        false
    }

    /// Builds an object from members in any order: sorts them by key by code point.
    ///
    /// # Errors
    ///
    /// [`CanonicalError::DuplicateMember`] if a key appears twice.
    pub fn object(mut members: Vec<(String, Value)>) -> Result<Value, CanonicalError> {
        members.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(pair) = members.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(CanonicalError::DuplicateMember {
                key: pair[0].0.clone(),
            });
        }
        Ok(Value::Object(members))
    }

    /// Moves the value of member `key` out of an object, leaving `null` in its place (the
    /// member stays, so the members remain sorted and unique); `None` for a missing key or a
    /// non-object. For readers that keep parts of a parsed document without copying them.
    pub fn take_member(&mut self, key: &str) -> Option<Value> {
        let Value::Object(members) = self else {
            return None;
        };
        let at = members
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()?;
        members
            .get_mut(at)
            .map(|(_, value)| std::mem::replace(value, Value::Null))
    }

    /// The value of member `key` of an object; `None` for a missing key or a non-object.
    /// Binary search: O(log n) in the number of members.
    pub fn get(&self, key: &str) -> Option<&Value> {
        let members = self.as_object()?;
        let at = members
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()?;
        members.get(at).map(|(_, v)| v)
    }

    /// The string, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The members, sorted by key, if this is an object.
    pub fn as_object(&self) -> Option<&[(String, Value)]> {
        match self {
            Value::Object(members) => Some(members),
            _ => None,
        }
    }

    /// The items, if this is an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The boolean, if this is `true` or `false`.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The number, if this is a number.
    pub fn as_number(&self) -> Option<&Number> {
        match self {
            Value::Number(n) => Some(n),
            _ => None,
        }
    }

    /// Whether this is `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The value an RFC 6901 JSON Pointer names (`""` is the whole value, `/a/0` member `a`'s
    /// first item, `~0` and `~1` stand for `~` and `/`). `None` if the pointer is malformed
    /// (not empty and not starting with `/`, a bad `~` escape, an array index with a leading
    /// zero or `-`) or names nothing.
    pub fn pointer(&self, pointer: &str) -> Option<&Value> {
        if pointer.is_empty() {
            return Some(self);
        }
        let rest = pointer.strip_prefix('/')?;
        let mut at = self;
        for raw in rest.split('/') {
            let token = unescape_pointer_token(raw)?;
            at = match at {
                Value::Object(_) => at.get(&token)?,
                Value::Array(items) => {
                    let leading_zero = token.len() > 1 && token.starts_with('0');
                    if leading_zero || !token.bytes().all(|b| b.is_ascii_digit()) {
                        return None;
                    }
                    items.get(token.parse::<usize>().ok()?)?
                }
                _ => return None,
            };
        }
        Some(at)
    }

    /// Converts a `serde_json` value built in code. Integers convert exactly; a float converts
    /// from the shortest decimal text that `serde_json` writes for it (so `0.1_f64` becomes
    /// `0.1`, not its binary expansion). Objects are sorted; `serde_json` maps cannot hold a key
    /// twice. Recurses once per level of nesting, as building the `serde_json` value did.
    pub fn from_serde_json(value: &serde_json::Value) -> Value {
        match value {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => Value::Number(Number::from_serde_json(n)),
            serde_json::Value::String(s) => Value::String(s.clone()),
            serde_json::Value::Array(items) => {
                Value::Array(items.iter().map(Value::from_serde_json).collect())
            }
            serde_json::Value::Object(map) => {
                let mut members: Vec<(String, Value)> = map
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::from_serde_json(v)))
                    .collect();
                members.sort_by(|a, b| a.0.cmp(&b.0));
                Value::Object(members)
            }
        }
    }

    /// Converts to a `serde_json` value. Lossy for numbers: integers that fit `u64` or `i64`
    /// convert exactly; any other number becomes the nearest `f64`, and one beyond `f64`'s
    /// range (above about `1.8e308`) becomes `f64::MAX` with its sign.
    pub fn to_serde_json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(n) => serde_json::Value::Number(n.to_serde_json()),
            Value::String(s) => serde_json::Value::String(s.clone()),
            Value::Array(items) => {
                serde_json::Value::Array(items.iter().map(Value::to_serde_json).collect())
            }
            Value::Object(members) => serde_json::Value::Object(
                members
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_serde_json()))
                    .collect(),
            ),
        }
    }
}

/// Decodes one RFC 6901 reference token: `~1` is `/`, `~0` is `~`, any other `~` is malformed.
fn unescape_pointer_token(raw: &str) -> Option<std::borrow::Cow<'_, str>> {
    if !raw.contains('~') {
        return Some(std::borrow::Cow::Borrowed(raw));
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next()? {
                '0' => out.push('~'),
                '1' => out.push('/'),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(std::borrow::Cow::Owned(out))
}

impl Number {
    /// Reads one JSON number text (RFC 8259 §6 grammar, nothing around it) exactly.
    ///
    /// # Errors
    ///
    /// As [`parse`], with offsets into `text`; text that is a JSON value but not a number is
    /// [`CanonicalError::Unexpected`].
    pub fn parse(text: &str) -> Result<Number, CanonicalError> {
        let mut parser = Parser {
            bytes: text.as_bytes(),
            pos: 0,
        };
        let number = match parser.peek() {
            Some(b'-' | b'0'..=b'9') => parser.parse_number()?,
            Some(_) => return Err(parser.unexpected(0, "a number")),
            None => {
                return Err(CanonicalError::UnexpectedEnd {
                    offset: 0,
                    expected: "a number",
                });
            }
        };
        if parser.pos < text.len() {
            return Err(CanonicalError::TrailingData { offset: parser.pos });
        }
        Ok(number)
    }

    /// The canonical decimal text (`1`, `-0.5`, `1.5e-7`, `1e400`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value as `u64`, if it is an integer in `0..=u64::MAX` (exact: `1.0` and `1e1` are
    /// integers).
    pub fn as_u64(&self) -> Option<u64> {
        // Every integer with at most 20 trailing zeros is written as plain digits, and u64 has at
        // most 20 digits, so an exponent or point in the text means "not a u64".
        if self.0.bytes().all(|b| b.is_ascii_digit()) {
            self.0.parse().ok()
        } else {
            None
        }
    }

    /// The value as `i64`, if it is an integer in `i64::MIN..=i64::MAX`.
    pub fn as_i64(&self) -> Option<i64> {
        let digits = self.0.strip_prefix('-').unwrap_or(&self.0);
        if digits.bytes().all(|b| b.is_ascii_digit()) {
            self.0.parse().ok()
        } else {
            None
        }
    }

    /// The nearest `f64` (round half to even). Lossy: `9007199254740993` becomes
    /// `9007199254740992.0`, a value beyond `f64`'s range becomes an infinity with its sign,
    /// and one too small becomes zero.
    pub fn as_f64(&self) -> f64 {
        // Rust's float parsing is correctly rounded and accepts every canonical spelling.
        self.0.parse().unwrap_or(f64::NAN)
    }

    /// Whether the value is an integer (`2`, `2.0`, `1e400`; not `2.5`).
    pub fn is_integer(&self) -> bool {
        let (_, digits, exponent) = self.parts();
        // Digits d1..dn with decimal exponent X: an integer when n − 1 ≤ X.
        (digits.len() as i128) - 1 <= exponent || self.0 == "0"
    }

    /// Whether the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.0.starts_with('-')
    }

    fn from_serde_json(n: &serde_json::Number) -> Number {
        if let Some(u) = n.as_u64() {
            return Number::from(u);
        }
        if let Some(i) = n.as_i64() {
            return Number::from(i);
        }
        // serde_json holds only finite floats and writes them as JSON number text (shortest
        // round-trip digits), so this parse does not fail; zero is a fallback, not a path.
        Number::parse(&n.to_string()).unwrap_or_else(|_| Number(String::from("0")))
    }

    fn to_serde_json(&self) -> serde_json::Number {
        if let Some(u) = self.as_u64() {
            return serde_json::Number::from(u);
        }
        if let Some(i) = self.as_i64() {
            return serde_json::Number::from(i);
        }
        let f = self.as_f64();
        let f = if f.is_finite() {
            f
        } else {
            f64::MAX.copysign(f)
        };
        serde_json::Number::from_f64(f).unwrap_or_else(|| serde_json::Number::from(0_u64))
    }

    /// Sign, significant digits (ASCII, no leading zero; trailing zeros only for plain
    /// integers) and decimal exponent `X` such that the value is `d1.d2d3… × 10^X`. Zero is
    /// `(false, "0", 0)`.
    fn parts(&self) -> (bool, DigitsOf<'_>, i128) {
        let (negative, text) = match self.0.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, self.0.as_str()),
        };
        if let Some((mantissa, exponent)) = text.split_once('e') {
            let exponent = exponent.parse::<i128>().unwrap_or(0);
            return (negative, DigitsOf::split(mantissa), exponent);
        }
        if let Some((int, frac)) = text.split_once('.') {
            if int == "0" {
                let zeros = frac.bytes().take_while(|&b| b == b'0').count();
                let significant = frac.get(zeros..).unwrap_or_default();
                return (
                    negative,
                    DigitsOf {
                        head: significant,
                        tail: "",
                    },
                    -(zeros as i128) - 1,
                );
            }
            return (
                negative,
                DigitsOf {
                    head: int,
                    tail: frac,
                },
                int.len() as i128 - 1,
            );
        }
        (
            negative,
            DigitsOf {
                head: text,
                tail: "",
            },
            text.len() as i128 - 1,
        )
    }
}

/// Significant digits of a canonical number, in two pieces around a decimal point.
#[derive(Clone, Copy)]
struct DigitsOf<'a> {
    head: &'a str,
    tail: &'a str,
}

impl<'a> DigitsOf<'a> {
    fn split(mantissa: &'a str) -> Self {
        match mantissa.split_once('.') {
            Some((head, tail)) => DigitsOf { head, tail },
            None => DigitsOf {
                head: mantissa,
                tail: "",
            },
        }
    }

    fn len(self) -> usize {
        self.head.len() + self.tail.len()
    }

    fn bytes(self) -> impl Iterator<Item = u8> + 'a {
        self.head.bytes().chain(self.tail.bytes())
    }
}

impl PartialOrd for Number {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Number {
    /// Orders by exact decimal value; consistent with `Eq` because the canonical text is unique.
    fn cmp(&self, other: &Self) -> Ordering {
        let sign = |n: &Number| -> i8 {
            if n.0 == "0" {
                0
            } else if n.is_negative() {
                -1
            } else {
                1
            }
        };
        let (a_sign, b_sign) = (sign(self), sign(other));
        if a_sign != b_sign || a_sign == 0 {
            return a_sign.cmp(&b_sign);
        }
        let (_, a_digits, a_exp) = self.parts();
        let (_, b_digits, b_exp) = other.parts();
        let magnitude = a_exp.cmp(&b_exp).then_with(|| {
            // Same exponent: compare digit by digit, the shorter padded with zeros.
            let mut a = a_digits.bytes();
            let mut b = b_digits.bytes();
            loop {
                match (a.next(), b.next()) {
                    (None, None) => return Ordering::Equal,
                    (x, y) => match x.unwrap_or(b'0').cmp(&y.unwrap_or(b'0')) {
                        Ordering::Equal => {}
                        unequal => return unequal,
                    },
                }
            }
        });
        if a_sign < 0 {
            magnitude.reverse()
        } else {
            magnitude
        }
    }
}

impl FromStr for Number {
    type Err = CanonicalError;

    /// As [`Number::parse`].
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Number::parse(text)
    }
}

impl From<u64> for Number {
    fn from(n: u64) -> Self {
        Number(n.to_string())
    }
}

impl From<i64> for Number {
    fn from(n: i64) -> Self {
        Number(n.to_string())
    }
}

impl From<u32> for Number {
    fn from(n: u32) -> Self {
        Number(n.to_string())
    }
}

impl From<i32> for Number {
    fn from(n: i32) -> Self {
        Number(n.to_string())
    }
}

/// Writes the canonical text of a number given its parsed pieces: sign, integer digits,
/// fraction digits and exponent, with value `(int.frac) × 10^exponent`.
fn canonical_number(negative: bool, int: &[u8], frac: &[u8], exponent: i128) -> Number {
    let all = DigitBytes { int, frac };
    let total = int.len() + frac.len();
    let leading = all.iter().take_while(|&b| b == b'0').count();
    if leading == total {
        // -0, 0.0, 0e5: all zero, one value, written `0`.
        return Number(String::from("0"));
    }
    let trailing = (0..total).rev().take_while(|&i| all.at(i) == b'0').count();
    let significant = leading..total - trailing;
    let n = significant.len() as i128;
    // value = D × 10^e with D the significant digits
    let e = exponent - frac.len() as i128 + trailing as i128;
    // value = d1.d2…dn × 10^x
    let x = e + n - 1;

    let mut out = String::with_capacity(significant.len() + 28);
    if negative {
        out.push('-');
    }
    let push_digits = |out: &mut String, range: std::ops::Range<usize>| {
        for i in range {
            out.push(char::from(all.at(i)));
        }
    };
    if (0..=MAX_PLAIN_TRAILING_ZEROS).contains(&e) {
        push_digits(&mut out, significant.clone());
        for _ in 0..e {
            out.push('0');
        }
    } else if e < 0 && x >= MIN_PLAIN_FRACTION_EXPONENT {
        if x >= 0 {
            // x + 1 < n digits before the point, the rest after it.
            let point = leading + (x as usize) + 1;
            push_digits(&mut out, leading..point);
            out.push('.');
            push_digits(&mut out, point..significant.end);
        } else {
            out.push_str("0.");
            for _ in 0..(-x - 1) {
                out.push('0');
            }
            push_digits(&mut out, significant.clone());
        }
    } else {
        push_digits(&mut out, leading..leading + 1);
        if significant.len() > 1 {
            out.push('.');
            push_digits(&mut out, leading + 1..significant.end);
        }
        out.push('e');
        out.push_str(&x.to_string());
    }
    Number(out)
}

/// The digits of a number's integer and fraction parts, indexed as one sequence.
#[derive(Clone, Copy)]
struct DigitBytes<'a> {
    int: &'a [u8],
    frac: &'a [u8],
}

impl DigitBytes<'_> {
    fn at(self, i: usize) -> u8 {
        let byte = match i.checked_sub(self.int.len()) {
            None => self.int.get(i),
            Some(j) => self.frac.get(j),
        };
        byte.copied().unwrap_or(b'0')
    }

    fn iter(self) -> impl Iterator<Item = u8> {
        self.int.iter().chain(self.frac.iter()).copied()
    }
}

/// An array or object being read.
enum Frame {
    Array(Vec<Value>),
    /// Members so far (each with the offset of its key) and the key whose value is being read.
    Object {
        members: Vec<(String, Value, usize)>,
        key: String,
        key_offset: usize,
    },
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// The error for the character at `offset`: invalid UTF-8, or a character not allowed there.
    fn unexpected(&self, offset: usize, expected: &'static str) -> CanonicalError {
        let end = offset.saturating_add(4).min(self.bytes.len());
        let window = self.bytes.get(offset..end).unwrap_or_default();
        match window
            .utf8_chunks()
            .next()
            .and_then(|chunk| chunk.valid().chars().next())
        {
            Some(found) => CanonicalError::Unexpected {
                offset,
                found,
                expected,
            },
            None if window.is_empty() => CanonicalError::UnexpectedEnd { offset, expected },
            None => CanonicalError::InvalidUtf8 { offset },
        }
    }

    fn expect_at(&self, expected: &'static str) -> CanonicalError {
        self.unexpected(self.pos, expected)
    }

    fn parse_document(mut self) -> Result<Value, CanonicalError> {
        let value = self.parse_value_iterative()?;
        self.skip_whitespace();
        if self.pos < self.bytes.len() {
            return Err(CanonicalError::TrailingData { offset: self.pos });
        }
        Ok(value)
    }

    /// Reads one value with an explicit stack of open arrays and objects, so nesting costs heap,
    /// not call stack.
    fn parse_value_iterative(&mut self) -> Result<Value, CanonicalError> {
        let mut stack: Vec<Frame> = Vec::new();
        'value: loop {
            self.skip_whitespace();
            let mut value = match self.peek() {
                Some(b'[') => {
                    self.open(&stack)?;
                    self.skip_whitespace();
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                        Value::Array(Vec::new())
                    } else {
                        stack.push(Frame::Array(Vec::new()));
                        continue 'value;
                    }
                }
                Some(b'{') => {
                    self.open(&stack)?;
                    self.skip_whitespace();
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                        Value::Object(Vec::new())
                    } else {
                        let (key, key_offset) = self.parse_key()?;
                        stack.push(Frame::Object {
                            members: Vec::new(),
                            key,
                            key_offset,
                        });
                        continue 'value;
                    }
                }
                Some(b'"') => Value::String(self.parse_string()?),
                Some(b'-' | b'0'..=b'9') => Value::Number(self.parse_number()?),
                Some(b't') => self.parse_literal("true", Value::Bool(true))?,
                Some(b'f') => self.parse_literal("false", Value::Bool(false))?,
                Some(b'n') => self.parse_literal("null", Value::Null)?,
                _ => return Err(self.expect_at("a value")),
            };
            // Hand the finished value to the enclosing containers, closing those that end here.
            loop {
                let Some(frame) = stack.last_mut() else {
                    return Ok(value);
                };
                match frame {
                    Frame::Array(items) => {
                        items.push(value);
                        self.skip_whitespace();
                        match self.peek() {
                            Some(b',') => {
                                self.pos += 1;
                                continue 'value;
                            }
                            Some(b']') => {
                                self.pos += 1;
                                let Some(Frame::Array(items)) = stack.pop() else {
                                    return Err(self.expect_at("`,` or `]`"));
                                };
                                value = Value::Array(items);
                            }
                            _ => return Err(self.expect_at("`,` or `]`")),
                        }
                    }
                    Frame::Object {
                        members,
                        key,
                        key_offset,
                    } => {
                        members.push((std::mem::take(key), value, *key_offset));
                        self.skip_whitespace();
                        match self.peek() {
                            Some(b',') => {
                                self.pos += 1;
                                self.skip_whitespace();
                                let (next_key, next_offset) = self.parse_key()?;
                                *key = next_key;
                                *key_offset = next_offset;
                                continue 'value;
                            }
                            Some(b'}') => {
                                self.pos += 1;
                                let Some(Frame::Object { members, .. }) = stack.pop() else {
                                    return Err(self.expect_at("`,` or `}`"));
                                };
                                value = close_object(members, &stack)?;
                            }
                            _ => return Err(self.expect_at("`,` or `}`")),
                        }
                    }
                }
            }
        }
    }

    /// Steps over a `[` or `{`, refusing to nest deeper than [`MAX_JSON_DEPTH`].
    fn open(&mut self, stack: &[Frame]) -> Result<(), CanonicalError> {
        if stack.len() >= MAX_JSON_DEPTH {
            return Err(CanonicalError::TooDeep {
                offset: self.pos,
                limit: MAX_JSON_DEPTH,
            });
        }
        self.pos += 1;
        Ok(())
    }

    /// Reads `"key"` and the `:` after it (whitespace already skipped before the key).
    fn parse_key(&mut self) -> Result<(String, usize), CanonicalError> {
        let offset = self.pos;
        if self.peek() != Some(b'"') {
            return Err(self.expect_at("a string key"));
        }
        let key = self.parse_string()?;
        self.skip_whitespace();
        if self.peek() != Some(b':') {
            return Err(self.expect_at("`:`"));
        }
        self.pos += 1;
        Ok((key, offset))
    }

    fn parse_literal(&mut self, word: &'static str, value: Value) -> Result<Value, CanonicalError> {
        for expected in word.bytes() {
            if self.peek() != Some(expected) {
                return Err(self.expect_at(word));
            }
            self.pos += 1;
        }
        Ok(value)
    }

    /// Reads a string starting at its opening quote; borrows nothing, allocates once.
    fn parse_string(&mut self) -> Result<String, CanonicalError> {
        self.pos += 1;
        let mut run = self.pos;
        let mut out = String::new();
        loop {
            // Runs of plain characters are the common case: find the next byte that ends one.
            let rest = self.bytes.get(self.pos..).unwrap_or_default();
            self.pos += rest
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .unwrap_or(rest.len());
            let Some(b) = self.peek() else {
                return Err(CanonicalError::UnexpectedEnd {
                    offset: self.pos,
                    expected: "`\"`",
                });
            };
            match b {
                b'"' => {
                    self.push_run(&mut out, run)?;
                    self.pos += 1;
                    return Ok(out);
                }
                b'\\' => {
                    self.push_run(&mut out, run)?;
                    self.parse_escape(&mut out)?;
                    run = self.pos;
                }
                0x00..=0x1f => {
                    return Err(CanonicalError::ControlCharacter {
                        offset: self.pos,
                        code: u32::from(b),
                    });
                }
                _ => self.pos += 1,
            }
        }
    }

    /// Appends the raw bytes `run..pos` to `out`, checking they are UTF-8. `"`, `\` and control
    /// bytes never occur inside a multi-byte UTF-8 sequence, so runs split only between chars.
    fn push_run(&self, out: &mut String, run: usize) -> Result<(), CanonicalError> {
        let bytes = self.bytes.get(run..self.pos).unwrap_or_default();
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                if out.is_empty() {
                    out.reserve_exact(text.len());
                }
                out.push_str(text);
                Ok(())
            }
            Err(error) => Err(CanonicalError::InvalidUtf8 {
                offset: run + error.valid_up_to(),
            }),
        }
    }

    /// Reads one escape starting at its backslash.
    fn parse_escape(&mut self, out: &mut String) -> Result<(), CanonicalError> {
        let start = self.pos;
        let Some(kind) = self.bytes.get(start + 1).copied() else {
            return Err(CanonicalError::UnexpectedEnd {
                offset: self.bytes.len(),
                expected: "an escape",
            });
        };
        self.pos += 2;
        let c = match kind {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex4(start)?;
                match unit {
                    0xd800..=0xdbff => {
                        let low = if self.bytes.get(self.pos..self.pos + 2) == Some(b"\\u") {
                            self.pos += 2;
                            self.hex4(self.pos - 2)?
                        } else {
                            0
                        };
                        if !(0xdc00..=0xdfff).contains(&low) {
                            return Err(CanonicalError::LoneSurrogate {
                                offset: start,
                                code: unit,
                            });
                        }
                        let scalar = 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
                        char::from_u32(scalar).ok_or(CanonicalError::LoneSurrogate {
                            offset: start,
                            code: unit,
                        })?
                    }
                    0xdc00..=0xdfff => {
                        return Err(CanonicalError::LoneSurrogate {
                            offset: start,
                            code: unit,
                        });
                    }
                    _ => char::from_u32(unit)
                        .ok_or(CanonicalError::InvalidEscape { offset: start })?,
                }
            }
            _ => return Err(CanonicalError::InvalidEscape { offset: start }),
        };
        out.push(c);
        Ok(())
    }

    /// Reads four hex digits at `pos` (either case) as one UTF-16 code unit.
    fn hex4(&mut self, escape: usize) -> Result<u32, CanonicalError> {
        let mut unit = 0_u32;
        for _ in 0..4 {
            let digit = self
                .peek()
                .and_then(|b| char::from(b).to_digit(16))
                .ok_or(CanonicalError::InvalidEscape { offset: escape })?;
            unit = unit * 16 + digit;
            self.pos += 1;
        }
        Ok(unit)
    }

    /// Reads a number (RFC 8259 §6) exactly and normalizes it.
    fn parse_number(&mut self) -> Result<Number, CanonicalError> {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let int_start = self.pos;
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return Err(CanonicalError::LeadingZero { offset: int_start });
                }
            }
            Some(b'1'..=b'9') => self.skip_digits(),
            _ => return Err(self.expect_at("a digit")),
        }
        let int = self.bytes.get(int_start..self.pos).unwrap_or_default();
        let mut frac: &[u8] = &[];
        if self.peek() == Some(b'.') {
            self.pos += 1;
            let frac_start = self.pos;
            self.skip_digits();
            if self.pos == frac_start {
                return Err(self.expect_at("a digit"));
            }
            frac = self.bytes.get(frac_start..self.pos).unwrap_or_default();
        }
        let mut exponent: i128 = 0;
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            let exponent_negative = match self.peek() {
                Some(b'-') => {
                    self.pos += 1;
                    true
                }
                Some(b'+') => {
                    self.pos += 1;
                    false
                }
                _ => false,
            };
            let digits_start = self.pos;
            self.skip_digits();
            let digits = self.bytes.get(digits_start..self.pos).unwrap_or_default();
            if digits.is_empty() {
                return Err(self.expect_at("a digit"));
            }
            let significant = digits
                .get(digits.iter().take_while(|&&b| b == b'0').count()..)
                .unwrap_or_default();
            if significant.len() > MAX_EXPONENT_DIGITS {
                return Err(CanonicalError::ExponentTooLarge {
                    offset: start,
                    digits: significant.len(),
                    limit: MAX_EXPONENT_DIGITS,
                });
            }
            for &d in significant {
                exponent = exponent * 10 + i128::from(d - b'0');
            }
            if exponent_negative {
                exponent = -exponent;
            }
        }
        Ok(canonical_number(negative, int, frac, exponent))
    }

    fn skip_digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }
}

/// Sorts an object's members by key and refuses a key named twice; `ancestors` are the frames
/// enclosing the object, whose current keys and indexes give its JSON Pointer.
fn close_object(
    mut members: Vec<(String, Value, usize)>,
    ancestors: &[Frame],
) -> Result<Value, CanonicalError> {
    // Stable: of two equal keys the one read first stays first.
    if !members.is_sorted_by(|a, b| a.0 < b.0) {
        members.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(pair) = members.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(CanonicalError::DuplicateKey {
                key: pair[1].0.clone(),
                pointer: pointer_of(ancestors),
                offset: pair[1].2,
            });
        }
    }
    // Drops the offsets in place: the allocation is reused.
    Ok(Value::Object(
        members
            .into_iter()
            .map(|(key, value, _)| (key, value))
            .collect(),
    ))
}

/// The JSON Pointer of the value being read inside `frames`.
fn pointer_of(frames: &[Frame]) -> String {
    let mut pointer = String::new();
    for frame in frames {
        pointer.push('/');
        match frame {
            Frame::Array(items) => pointer.push_str(&items.len().to_string()),
            Frame::Object { key, .. } => pointer.push_str(&pointer_token(key)),
        }
    }
    pointer
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => out.push_str(&n.0),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(members) => {
            out.push('{');
            if members.is_sorted_by(|a, b| a.0 < b.0) {
                for (i, (key, value)) in members.iter().enumerate() {
                    write_member(out, i, key, value);
                }
            } else {
                let mut sorted: Vec<&(String, Value)> = members.iter().collect();
                sorted.sort_by(|a, b| a.0.cmp(&b.0));
                for (i, (key, value)) in sorted.into_iter().enumerate() {
                    write_member(out, i, key, value);
                }
            }
            out.push('}');
        }
    }
}

fn write_member(out: &mut String, i: usize, key: &str, value: &Value) {
    if i > 0 {
        out.push(',');
    }
    write_string(out, key);
    out.push(':');
    write_value(out, value);
}

/// Writes `s` as a JSON string: `"` and `\` escaped with a backslash, U+0008, U+0009, U+000A,
/// U+000C and U+000D as `\b \t \n \f \r`, the other controls U+0000 to U+001F as `\u00xx`
/// (lowercase hex), everything else as raw UTF-8. This is the one string escaping of the
/// canonical form; other writers of JSON text (the pinned manifest) reuse it.
pub fn write_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push('"');
    if escapes_nothing(s.as_bytes()) {
        out.push_str(s);
        out.push('"');
        return;
    }
    let mut run = 0;
    for (i, &b) in s.as_bytes().iter().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            0x09 => "\\t",
            0x0a => "\\n",
            0x0c => "\\f",
            0x0d => "\\r",
            0x00..=0x1f => "",
            _ => continue,
        };
        // ASCII bytes are char boundaries, so the slice never fails.
        out.push_str(s.get(run..i).unwrap_or_default());
        if escape.is_empty() {
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        } else {
            out.push_str(escape);
        }
        run = i + 1;
    }
    out.push_str(s.get(run..).unwrap_or_default());
    out.push('"');
}

#[cfg(test)]
#[path = "canonical/tests.rs"]
mod tests;
