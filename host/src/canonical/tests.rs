//! Tests of the canonical form: the examples in `docs/canonical-json.md`, every refusal, and
//! property tests of its invariants (idempotence, hash stability, hash sensitivity).

use super::*;
use proptest::prelude::*;

fn canon(text: &str) -> String {
    canonicalize(text.as_bytes()).unwrap()
}

fn hash(text: &str) -> String {
    sha256_hex(canon(text).as_bytes())
}

fn error(text: &str) -> CanonicalError {
    parse(text.as_bytes()).unwrap_err()
}

fn number(text: &str) -> Number {
    Number::parse(text).unwrap()
}

// ---- numbers -------------------------------------------------------------------------------

#[test]
fn spellings_of_one_value_are_one_number() {
    for text in [
        "1", "1.0", "1e0", "10e-1", "0.1e1", "100e-2", "1E+0", "1.000e00", "0.001e3",
    ] {
        assert_eq!(canon(text), "1", "{text}");
        assert_eq!(hash(text), hash("1"), "{text}");
    }
}

#[test]
fn minus_zero_is_zero() {
    for text in ["0", "-0", "0.0", "-0.0", "0e10", "-0e-5", "0.000E+7"] {
        assert_eq!(canon(text), "0", "{text}");
    }
}

#[test]
fn integers_past_f64_precision_keep_distinct_hashes() {
    assert_eq!(canon("9007199254740993"), "9007199254740993");
    assert_ne!(hash("9007199254740993"), hash("9007199254740992"));
}

#[test]
fn numbers_past_u64_keep_distinct_hashes() {
    assert_eq!(canon("18446744073709551617"), "18446744073709551617");
    assert_ne!(hash("18446744073709551617"), hash("18446744073709551616"));
    assert_eq!(number("18446744073709551615").as_u64(), Some(u64::MAX));
    assert_eq!(number("18446744073709551616").as_u64(), None);
}

#[test]
fn decimal_fractions_are_not_rounded_to_f64() {
    let long = "0.1000000000000000055511151231257827";
    assert_eq!(canon(long), long);
    assert_ne!(hash(long), hash("0.1"));
    // Equal as f64, distinct here.
    assert_eq!(number(long).as_f64(), number("0.1").as_f64());
}

#[test]
fn huge_integers_and_exponents_parse_exactly() {
    let digits: String = (0..400).map(|i| char::from(b'1' + (i % 9) as u8)).collect();
    assert_eq!(canon(&digits), digits);
    let mut bumped = digits.clone();
    bumped.pop();
    bumped.push('9');
    assert_ne!(hash(&digits), hash(&bumped));
    assert_eq!(canon("1e400"), "1e400");
    assert_eq!(canon("-1E-400"), "-1e-400");
    assert_ne!(hash("1e400"), hash("1e401"));
}

#[test]
fn huge_exponents_keep_the_canonical_text_short() {
    assert_eq!(canon("1e999999999"), "1e999999999");
    assert_eq!(canon("1e999999999999999999"), "1e999999999999999999");
    assert_eq!(canon("1e-000000000000000000000000005"), "0.00001");
    // The bound is on the text: even a zero's exponent is held to it.
    assert!(matches!(
        error("0e99999999999999999999999999999"),
        CanonicalError::ExponentTooLarge { digits: 29, .. }
    ));
    assert_eq!(
        error("[1e1000000000000000000]"),
        CanonicalError::ExponentTooLarge {
            offset: 1,
            digits: 19,
            limit: MAX_EXPONENT_DIGITS
        }
    );
}

#[test]
fn numbers_have_one_documented_spelling() {
    let table = [
        ("100", "100"),
        ("1e2", "100"),
        ("1.5E+3", "1500"),
        ("-7", "-7"),
        ("1e20", "100000000000000000000"),
        ("1.5e21", "1500000000000000000000"),
        ("1e21", "1e21"),
        ("12e21", "1.2e22"),
        ("123.450", "123.45"),
        ("-5e-1", "-0.5"),
        ("0.000001", "0.000001"),
        ("12345e-10", "0.0000012345"),
        ("1e-7", "1e-7"),
        ("-1.25e-7", "-1.25e-7"),
        ("0.00000012", "1.2e-7"),
        (
            "123456789012345678901234567890e-5",
            "1234567890123456789012345.6789",
        ),
        ("18446744073709551615", "18446744073709551615"),
        ("-9223372036854775808", "-9223372036854775808"),
    ];
    for (input, expected) in table {
        assert_eq!(canon(input), expected, "{input}");
        // The canonical spelling is a fixed point.
        assert_eq!(canon(expected), expected, "{expected}");
    }
}

#[test]
fn number_order_is_by_exact_value() {
    let ascending = [
        "-1e400",
        "-18446744073709551617",
        "-2",
        "-1.5",
        "-1e-400",
        "0",
        "1e-400",
        "0.000001",
        "0.1",
        "0.1000000000000000055511151231257827",
        "1",
        "1.5",
        "9007199254740992",
        "9007199254740993",
        "1e21",
        "1.2e22",
        "1e400",
    ];
    for (i, a) in ascending.iter().enumerate() {
        for (j, b) in ascending.iter().enumerate() {
            assert_eq!(number(a).cmp(&number(b)), i.cmp(&j), "{a} vs {b}");
        }
    }
}

#[test]
fn integer_accessors_are_exact() {
    assert_eq!(number("1.0").as_u64(), Some(1));
    assert_eq!(number("1e1").as_u64(), Some(10));
    assert_eq!(number("1.5").as_u64(), None);
    assert_eq!(number("-1").as_u64(), None);
    assert_eq!(number("-9223372036854775808").as_i64(), Some(i64::MIN));
    assert_eq!(number("9223372036854775808").as_i64(), None);
    assert_eq!(number("1e400").as_f64(), f64::INFINITY);
    assert_eq!(number("0.5").as_f64(), 0.5);
    assert!(number("2.0").is_integer());
    assert!(number("1e400").is_integer());
    assert!(number("0").is_integer());
    assert!(!number("2.5").is_integer());
    assert!(!number("1e-400").is_integer());
}

#[test]
fn number_parse_takes_one_number_only() {
    assert!(matches!(
        Number::parse(""),
        Err(CanonicalError::UnexpectedEnd { .. })
    ));
    assert!(matches!(
        Number::parse("1 "),
        Err(CanonicalError::TrailingData { offset: 1 })
    ));
    assert!(matches!(
        Number::parse("\"1\""),
        Err(CanonicalError::Unexpected { offset: 0, .. })
    ));
    assert_eq!("2.50".parse::<Number>().unwrap().as_str(), "2.5");
}

// ---- strings -------------------------------------------------------------------------------

#[test]
fn strings_escape_exactly_the_documented_characters() {
    let table = [
        (r#""\"""#, r#""\"""#),
        (r#""\\""#, r#""\\""#),
        (r#""\/""#, r#""/""#),
        (r#""\b\t\n\f\r""#, r#""\b\t\n\f\r""#),
        (r#""\u0008\u0009\u000A\u000c\u000D""#, r#""\b\t\n\f\r""#),
        (
            r#""\u0000\u0001\u000B\u000E\u001F""#,
            r#""\u0000\u0001\u000b\u000e\u001f""#,
        ),
        (r#""\u0020\u007f\u0080\u009F""#, "\" \u{7f}\u{80}\u{9f}\""),
        (
            r#""\u2028\u2029\uFEFF\uffff""#,
            "\"\u{2028}\u{2029}\u{feff}\u{ffff}\"",
        ),
        (r#""\ud83d\ude00\uD800\uDC00""#, "\"\u{1f600}\u{10000}\""),
        (r#""\u00e9 é""#, "\"é é\""),
    ];
    for (input, expected) in table {
        assert_eq!(canon(input), expected, "{input}");
        assert_eq!(canon(expected), expected, "{expected}");
    }
}

#[test]
fn lone_surrogates_are_refused() {
    for (text, code) in [
        (r#""ab\ud800""#, 0xd800),
        (r#""ab\udc00""#, 0xdc00),
        (r#""ab\ud800\u0041""#, 0xd800),
        (r#""ab\udbffx""#, 0xdbff),
        (r#""ab\ud800\ud800""#, 0xd800),
    ] {
        assert_eq!(
            error(text),
            CanonicalError::LoneSurrogate { offset: 3, code },
            "{text}"
        );
    }
}

#[test]
fn invalid_utf8_is_refused_at_its_offset() {
    let cases: [(&[u8], usize); 6] = [
        (b"\"ab\xff\"", 3),
        (b"\"a\xc0\x80\"", 2),
        (b"\"a\xed\xa0\x80\"", 2),
        (b"\"\xe2\x82\"", 1),
        (b"\xff", 0),
        (b"[1,\xfe]", 3),
    ];
    for (bytes, offset) in cases {
        assert_eq!(
            parse(bytes).unwrap_err(),
            CanonicalError::InvalidUtf8 { offset },
            "{bytes:?}"
        );
    }
}

#[test]
fn raw_control_characters_in_strings_are_refused() {
    assert_eq!(
        error("\"a\nb\""),
        CanonicalError::ControlCharacter {
            offset: 2,
            code: 0x0a
        }
    );
    assert_eq!(
        error("\"\u{0}\""),
        CanonicalError::ControlCharacter { offset: 1, code: 0 }
    );
    // U+007F is not a JSON control character.
    assert_eq!(canon("\"\u{7f}\""), "\"\u{7f}\"");
}

#[test]
fn undefined_escapes_are_refused() {
    for text in [
        r#""\x""#,
        r#""\u12""#,
        r#""\u12g4""#,
        r#""\U0041""#,
        r#""\'""#,
        "\"\\",
    ] {
        assert!(
            matches!(
                error(text),
                CanonicalError::InvalidEscape { offset: 1 } | CanonicalError::UnexpectedEnd { .. }
            ),
            "{text}: {:?}",
            error(text)
        );
    }
}

#[test]
fn escaped_and_raw_spellings_of_a_string_hash_alike() {
    assert_eq!(hash(r#""caf\u00e9""#), hash("\"café\""));
    assert_eq!(hash(r#"{"\u0061":1}"#), hash(r#"{"a":1}"#));
}

// ---- structure -----------------------------------------------------------------------------

#[test]
fn keys_sort_by_code_point_not_utf16() {
    let text = "{\"b\":1,\"a\":2,\"\u{e9}\":3,\"z\":4,\"\u{10000}\":5,\"\u{ffff}\":6,\"A\":7,\"\":8,\"aa\":9}";
    assert_eq!(
        canon(text),
        "{\"\":8,\"A\":7,\"a\":2,\"aa\":9,\"b\":1,\"z\":4,\"\u{e9}\":3,\"\u{ffff}\":6,\"\u{10000}\":5}"
    );
}

#[test]
fn whitespace_is_insignificant_and_limited_to_four_characters() {
    assert_eq!(
        canon(" \t\r\n[ 1 , { \"a\" : null } ]\n "),
        "[1,{\"a\":null}]"
    );
    assert!(matches!(
        error("\u{a0}1"),
        CanonicalError::Unexpected {
            found: '\u{a0}',
            ..
        }
    ));
    assert!(matches!(error("\u{c}1"), CanonicalError::Unexpected { .. }));
    assert!(matches!(
        error("\u{feff}1"),
        CanonicalError::Unexpected { offset: 0, .. }
    ));
}

#[test]
fn duplicate_keys_are_refused_naming_the_key_and_the_object() {
    let text = r#"{"a":{"x/y":[0,{"k":1,"j":0,"k":2}]}}"#;
    let err = error(text);
    assert_eq!(
        err,
        CanonicalError::DuplicateKey {
            key: "k".into(),
            pointer: "/a/x~1y/1".into(),
            offset: text.rfind("\"k\"").unwrap(),
        }
    );
    assert_eq!(
        err.to_string(),
        "duplicate key `k` in the object at `/a/x~1y/1` at byte 28"
    );
    // Spelled differently, still the same key.
    assert!(matches!(
        error(r#"{"a":1,"\u0061":2}"#),
        CanonicalError::DuplicateKey { offset: 7, .. }
    ));
    assert!(matches!(
        error(r#"{"a":1,"a":1}"#),
        CanonicalError::DuplicateKey { ref pointer, .. } if pointer.is_empty()
    ));
}

#[test]
fn nesting_to_the_depth_bound_parses_and_deeper_is_refused() {
    let at_bound = format!(
        "{}{}",
        "[".repeat(MAX_JSON_DEPTH),
        "]".repeat(MAX_JSON_DEPTH)
    );
    assert_eq!(canon(&at_bound), at_bound);
    let past = format!(
        "{}{}",
        "[".repeat(MAX_JSON_DEPTH + 1),
        "]".repeat(MAX_JSON_DEPTH + 1)
    );
    assert_eq!(
        error(&past),
        CanonicalError::TooDeep {
            offset: MAX_JSON_DEPTH,
            limit: MAX_JSON_DEPTH
        }
    );
    let objects = "{\"a\":".repeat(MAX_JSON_DEPTH + 1);
    assert!(matches!(error(&objects), CanonicalError::TooDeep { .. }));
    // A million brackets are refused without touching the call stack.
    assert!(matches!(
        error(&"[".repeat(1_000_000)),
        CanonicalError::TooDeep { .. }
    ));
}

#[test]
fn trailing_data_is_refused() {
    for (text, offset) in [
        ("1 2", 2),
        ("{} x", 3),
        ("[]]", 2),
        ("nullnull", 4),
        ("\"a\"\"b\"", 3),
    ] {
        assert_eq!(
            error(text),
            CanonicalError::TrailingData { offset },
            "{text}"
        );
    }
}

#[test]
fn malformed_text_is_refused_at_its_offset() {
    let cases = [
        ("01", 0),
        ("-01", 1),
        ("[00]", 1),
        ("1.", 2),
        ("1.e5", 2),
        (".5", 0),
        ("1e", 2),
        ("1e+", 3),
        ("+1", 0),
        ("-", 1),
        ("-a", 1),
        ("[1,]", 3),
        ("[1 2]", 3),
        ("{,}", 1),
        ("{\"a\" 1}", 5),
        ("{\"a\":1,}", 7),
        ("{a:1}", 1),
        ("", 0),
        ("   ", 3),
        ("nul", 3),
        ("trUe", 2),
        ("NaN", 0),
        ("Infinity", 0),
        ("'a'", 0),
        ("[1]/*c*/", 3),
        ("\"abc", 4),
        ("[", 1),
        ("{\"a\":", 5),
    ];
    for (text, offset) in cases {
        let err = error(text);
        assert_eq!(err.offset(), Some(offset), "{text}: {err}");
    }
    assert_eq!(error("01"), CanonicalError::LeadingZero { offset: 0 });
}

#[test]
fn error_messages_are_lowercase_single_lines_without_a_period() {
    let errors = [
        error("\"\\ud800\""),
        error("{\"a\\n\":1,\"a\\n\":2}"),
        error("[1,"),
        error("[1 x"),
        error("1e1000000000000000000"),
        Value::object(vec![("k".into(), Value::Null), ("k".into(), Value::Null)]).unwrap_err(),
    ];
    for err in errors {
        let message = err.to_string();
        assert!(!message.contains('\n'), "{message}");
        assert!(!message.ends_with('.'), "{message}");
        assert!(message.starts_with(|c: char| c.is_lowercase()), "{message}");
    }
}

#[test]
fn examples_in_the_spec_hold() {
    let table = [
        (
            r#"{ "b": [1.0, 1e0, -0], "a": "x\u00e9\/" }"#,
            "{\"a\":\"xé/\",\"b\":[1,1,0]}",
        ),
        (
            "[1.5E+3, 123.450, -5e-1, 12345e-10, 0.00000012]",
            "[1500,123.45,-0.5,0.0000012345,1.2e-7]",
        ),
        (
            "[1e20, 1e21, 12e21, 1e-400]",
            "[100000000000000000000,1e21,1.2e22,1e-400]",
        ),
        (r#""\u0001\u001F\t\u007f""#, "\"\\u0001\\u001f\\t\u{7f}\""),
        (
            r#"{"\uD800\uDC00":1,"\uFFFF":2}"#,
            "{\"\u{ffff}\":2,\"\u{10000}\":1}",
        ),
    ];
    for (input, expected) in table {
        assert_eq!(canon(input), expected, "{input}");
    }
}

// ---- API -----------------------------------------------------------------------------------

#[test]
fn accessors_and_pointers_find_members() {
    let value = parse(br#"{"b":[true,null,{"c~d":"x","e/f":2}],"a":"s","":0}"#).unwrap();
    assert_eq!(value.get("a").and_then(Value::as_str), Some("s"));
    assert_eq!(value.get("zz"), None);
    assert_eq!(value.as_object().map(<[_]>::len), Some(3));
    assert_eq!(value.as_object().unwrap()[0].0, "");
    let items = value.get("b").and_then(Value::as_array).unwrap();
    assert_eq!(items[0].as_bool(), Some(true));
    assert!(items[1].is_null());
    assert_eq!(value.pointer(""), Some(&value));
    assert_eq!(value.pointer("/"), value.get(""));
    assert_eq!(
        value.pointer("/b/2/c~0d").and_then(Value::as_str),
        Some("x")
    );
    assert_eq!(
        value
            .pointer("/b/2/e~1f")
            .and_then(Value::as_number)
            .and_then(Number::as_u64),
        Some(2)
    );
    for missing in [
        "a",
        "/b/3",
        "/b/01",
        "/b/-",
        "/b/+1",
        "/a/0",
        "/b/2/c~2d",
        "/x",
    ] {
        assert_eq!(value.pointer(missing), None, "{missing}");
    }
    let token = pointer_token("e/f");
    assert_eq!(
        value.pointer(&format!("/b/2/{token}")),
        value.pointer("/b/2/e~1f")
    );
}

#[test]
fn pointer_tokens_escape_tilde_then_slash() {
    assert_eq!(pointer_token("a/b~c"), "a~1b~0c");
    assert_eq!(pointer_token("~1"), "~01");
    assert_eq!(pointer_token("plain"), "plain");
}

#[test]
fn object_builder_sorts_and_refuses_duplicates() {
    let built = Value::object(vec![
        ("b".into(), Value::Null),
        ("a".into(), Value::Bool(true)),
    ])
    .unwrap();
    assert_eq!(built, parse(br#"{"a":true,"b":null}"#).unwrap());
    assert_eq!(
        Value::object(vec![("a".into(), Value::Null), ("a".into(), Value::Null)]),
        Err(CanonicalError::DuplicateMember { key: "a".into() })
    );
}

#[test]
fn unsorted_objects_built_by_hand_are_written_sorted() {
    let value = Value::Object(vec![("b".into(), Value::Null), ("a".into(), Value::Null)]);
    assert_eq!(to_canonical(&value), r#"{"a":null,"b":null}"#);
}

#[test]
fn display_writes_the_canonical_text() {
    let value = parse(b" { \"b\" : 1.0 , \"a\" : [ ] } ").unwrap();
    assert_eq!(value.to_string(), r#"{"a":[],"b":1}"#);
    assert_eq!(number("1.50").to_string(), "1.5");
}

#[test]
fn serde_json_values_convert_exactly() {
    let from = serde_json::json!({
        "max": u64::MAX,
        "min": i64::MIN,
        "tenth": 0.1,
        "big": 1e300,
        "small": 1.5e-7,
        "one": 1.0,
        "list": [null, false, "s"],
    });
    let value = Value::from_serde_json(&from);
    assert_eq!(
        to_canonical(&value),
        "{\"big\":1e300,\"list\":[null,false,\"s\"],\"max\":18446744073709551615,\
         \"min\":-9223372036854775808,\"one\":1,\"small\":1.5e-7,\"tenth\":0.1}"
    );
    // Back again: integral values come back as integers, so `1.0` comes back as `1`.
    let mut expected = from.clone();
    expected["one"] = serde_json::json!(1);
    assert_eq!(value.to_serde_json(), expected);
}

#[test]
fn serde_json_conversion_is_lossy_only_past_f64() {
    let value = parse(b"[9007199254740993, 18446744073709551617, 1e400, -1e400, 0.1]").unwrap();
    assert_eq!(
        value.to_serde_json(),
        serde_json::json!([
            9007199254740993_u64,
            18446744073709551616.0,
            f64::MAX,
            -f64::MAX,
            0.1
        ])
    );
}

#[test]
fn sha256_hex_is_lowercase_and_64_digits() {
    assert_eq!(
        sha256_hex(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        sha256_hex(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

// ---- properties ----------------------------------------------------------------------------

/// Deterministic choices for rendering one value many ways.
struct Choices(u64);

impl Choices {
    fn below(&mut self, n: usize) -> usize {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }

    fn coin(&mut self) -> bool {
        self.below(2) == 0
    }

    fn whitespace(&mut self, out: &mut String) {
        for _ in 0..self.below(3) {
            out.push([' ', '\t', '\n', '\r'][self.below(4)]);
        }
    }
}

/// Writes `value` as valid, non-canonical JSON text: random whitespace, member order, string
/// escapes and number spellings.
fn render(value: &Value, choices: &mut Choices, out: &mut String) {
    choices.whitespace(out);
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => render_number(n, choices, out),
        Value::String(s) => render_string(s, choices, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                render(item, choices, out);
            }
            choices.whitespace(out);
            out.push(']');
        }
        Value::Object(members) => {
            let mut order: Vec<&(String, Value)> = members.iter().collect();
            for i in (1..order.len()).rev() {
                order.swap(i, choices.below(i + 1));
            }
            out.push('{');
            for (i, (key, member)) in order.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                choices.whitespace(out);
                render_string(key, choices, out);
                choices.whitespace(out);
                out.push(':');
                render(member, choices, out);
            }
            choices.whitespace(out);
            out.push('}');
        }
    }
    choices.whitespace(out);
}

fn render_string(s: &str, choices: &mut Choices, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        let short = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '/' => Some("\\/"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            _ => None,
        };
        let must_escape = matches!(c, '"' | '\\' | '\u{0}'..='\u{1f}');
        match (short, must_escape || choices.coin()) {
            (_, false) => out.push(c),
            (Some(short), true) if choices.coin() => out.push_str(short),
            (_, true) => {
                let mut units = [0_u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    if choices.coin() {
                        out.push_str(&format!("\\u{unit:04x}"));
                    } else {
                        out.push_str(&format!("\\u{unit:04X}"));
                    }
                }
            }
        }
    }
    out.push('"');
}

/// Spells the same decimal value another way: leading and trailing zeros, a moved decimal
/// point, an exponent in `e`/`E` with or without `+`.
fn render_number(n: &Number, choices: &mut Choices, out: &mut String) {
    if n.as_str() == "0" {
        out.push_str(["0", "-0", "0.000", "0e7", "-0.0E-3"][choices.below(5)]);
        return;
    }
    let (negative, digits, x) = n.parts();
    let digits: String = digits.bytes().map(char::from).collect();
    let d = digits.trim_end_matches('0');
    let e = x - (d.len() as i128 - 1);
    let trailing = choices.below(3);
    let s = format!(
        "{}{d}{}",
        "0".repeat(choices.below(3)),
        "0".repeat(trailing)
    );
    let es = e - trailing as i128;
    let split = choices.below(s.len() + 1);
    let (int, frac) = s.split_at(split);
    let int = int.trim_start_matches('0');
    let written = es + frac.len() as i128;
    if negative {
        out.push('-');
    }
    out.push_str(if int.is_empty() { "0" } else { int });
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    if written != 0 || choices.coin() {
        out.push(if choices.coin() { 'e' } else { 'E' });
        if written >= 0 && choices.coin() {
            out.push('+');
        }
        out.push_str(&written.to_string());
    }
}

fn render_with(value: &Value, seed: u64) -> String {
    let mut out = String::new();
    render(value, &mut Choices(seed | 1), &mut out);
    out
}

/// A number `±D × 10^E`, generated from its parts so equal values can be recognized by parts.
fn arb_number_parts() -> impl Strategy<Value = (bool, String, i64)> {
    (
        any::<bool>(),
        "0|[1-9]([0-9]{0,30}[1-9])?",
        prop_oneof![4 => -30_i64..30, 1 => -2_000_000_000_i64..2_000_000_000],
    )
}

fn number_from_parts((negative, d, e): &(bool, String, i64)) -> Number {
    number(&format!("{}{d}e{e}", if *negative { "-" } else { "" }))
}

fn arb_string() -> impl Strategy<Value = String> {
    let special = prop::sample::select(vec![
        '"',
        '\\',
        '/',
        '\n',
        '\u{0}',
        '\u{1f}',
        '\u{7f}',
        '\u{80}',
        '\u{2028}',
        '~',
        'é',
        '\u{ffff}',
        '\u{10000}',
        '😀',
        'a',
        'b',
    ]);
    prop::collection::vec(prop_oneof![special, any::<char>()], 0..6).prop_map(String::from_iter)
}

fn arb_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        arb_number_parts().prop_map(|parts| Value::Number(number_from_parts(&parts))),
        arb_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(arb_string(), inner, 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

/// Changes the `target`-th leaf (number, string or object key, in document order) of `value`.
fn mutate(value: &Value, target: &mut usize, other: &Number, suffix: &str) -> Option<Value> {
    let hit = |target: &mut usize| {
        let now = *target == 0;
        *target = target.wrapping_sub(1);
        now
    };
    Some(match value {
        Value::Number(_) if hit(target) => Value::Number(other.clone()),
        Value::String(s) if hit(target) => Value::String(format!("{s}{suffix}")),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| mutate(item, target, other, suffix))
                .collect::<Option<_>>()?,
        ),
        Value::Object(members) => {
            let mut changed = Vec::with_capacity(members.len());
            for (key, member) in members {
                let key = if hit(target) {
                    format!("{key}{suffix}")
                } else {
                    key.clone()
                };
                changed.push((key, mutate(member, target, other, suffix)?));
            }
            // A renamed key may collide with another: not a valid change.
            Value::object(changed).ok()?
        }
        other => other.clone(),
    })
}

#[test]
fn canonical_len_counts_every_escape() {
    let text: String = (0_u8..0x80).map(char::from).chain(['é', '😀']).collect();
    let value = Value::Array(vec![
        Value::String(text.clone()),
        Value::object(vec![(text, Value::Bool(false))]).unwrap(),
        Value::Null,
        Value::Bool(true),
        Value::Array(Vec::new()),
    ]);
    assert_eq!(canonical_len(&value), to_canonical(&value).len());
}

#[test]
fn canonical_len_finds_an_escape_in_any_block_of_a_long_string() {
    // `string_len` checks 64 bytes at a time: an escape first, last, or only past the first
    // block, and strings of no escape around the block size, all count exactly.
    for len in [0, 1, 63, 64, 65, 127, 128, 129, 300] {
        let plain = "a".repeat(len);
        let value = Value::String(plain.clone());
        assert_eq!(canonical_len(&value), to_canonical(&value).len(), "{len}");
        for at in [0, len / 2, len.saturating_sub(1), 64, 128] {
            for escaped in ['"', '\\', '\n', '\u{1}', '\u{1f}'] {
                if at >= len {
                    continue;
                }
                let mut text = plain.clone();
                text.replace_range(at..=at, &escaped.to_string());
                let value = Value::String(text);
                assert_eq!(
                    canonical_len(&value),
                    to_canonical(&value).len(),
                    "{len} bytes, {escaped:?} at {at}"
                );
            }
        }
    }
}

proptest! {
    #[test]
    fn canonical_form_is_idempotent(value in arb_value(), seed in any::<u64>()) {
        let text = render_with(&value, seed);
        let once = canonicalize(text.as_bytes()).unwrap();
        prop_assert_eq!(canonicalize(once.as_bytes()).unwrap(), once.clone());
        prop_assert_eq!(parse(once.as_bytes()).unwrap(), value.clone());
        prop_assert_eq!(once, to_canonical(&value));
    }

    #[test]
    fn canonical_len_is_the_length_of_the_canonical_text(value in arb_value()) {
        prop_assert_eq!(canonical_len(&value), to_canonical(&value).len());
    }

    #[test]
    fn whitespace_key_order_and_spelling_never_change_the_hash(
        value in arb_value(),
        seeds in any::<(u64, u64)>(),
    ) {
        let a = canonicalize(render_with(&value, seeds.0).as_bytes()).unwrap();
        let b = canonicalize(render_with(&value, seeds.1).as_bytes()).unwrap();
        prop_assert_eq!(sha256_hex(a.as_bytes()), sha256_hex(b.as_bytes()));
    }

    #[test]
    fn changing_a_number_string_or_key_changes_the_hash(
        value in arb_value(),
        target in any::<prop::sample::Index>(),
        other in arb_number_parts(),
        suffix in arb_string().prop_map(|s| format!("{s}~")),
        seed in any::<u64>(),
    ) {
        // Beside a string, so that there is always a leaf to change.
        let value = Value::Array(vec![value, Value::String(String::new())]);
        // Counting down from usize::MAX reaches no leaf: the count is what was used up.
        let mut unused = usize::MAX;
        let _ = mutate(&value, &mut unused, &number("0"), "");
        let leaves = usize::MAX - unused;
        let other = number_from_parts(&other);
        let mut at = target.index(leaves);
        let changed = mutate(&value, &mut at, &other, &suffix);
        prop_assume!(changed.as_ref().is_some_and(|changed| *changed != value));
        let changed = changed.unwrap();
        let before = canonicalize(render_with(&value, seed).as_bytes()).unwrap();
        let after = canonicalize(render_with(&changed, seed).as_bytes()).unwrap();
        prop_assert_ne!(sha256_hex(before.as_bytes()), sha256_hex(after.as_bytes()));
    }

    #[test]
    fn numbers_are_equal_exactly_when_their_values_are(
        a in arb_number_parts(),
        b in arb_number_parts(),
    ) {
        // Normal form of the parts: no trailing zeros in D, zero without sign or exponent.
        let normal = |(negative, d, e): &(bool, String, i64)| {
            if d == "0" {
                return (false, String::from("0"), 0);
            }
            let trimmed = d.trim_end_matches('0');
            (*negative, trimmed.to_string(), *e + (d.len() - trimmed.len()) as i64)
        };
        let (na, nb) = (number_from_parts(&a), number_from_parts(&b));
        prop_assert_eq!(normal(&a) == normal(&b), na == nb);
        prop_assert_eq!(normal(&a) == normal(&b), na.as_str() == nb.as_str());
    }

    #[test]
    fn number_order_matches_exact_arithmetic(
        a in (any::<bool>(), 0_u64..10_000_000_000, -12_i64..12),
        b in (any::<bool>(), 0_u64..10_000_000_000, -12_i64..12),
    ) {
        // value × 10^12 is an integer below 10^34, exact in i128.
        let scaled = |(negative, d, e): (bool, u64, i64)| {
            let magnitude = i128::from(d) * 10_i128.pow((e + 12) as u32);
            if negative { -magnitude } else { magnitude }
        };
        let spell = |(negative, d, e): (bool, u64, i64)| {
            number(&format!("{}{d}e{e}", if negative { "-" } else { "" }))
        };
        prop_assert_eq!(spell(a).cmp(&spell(b)), scaled(a).cmp(&scaled(b)));
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_accepted_text_is_canonical_once(
        bytes in prop::collection::vec(
            prop_oneof![
                prop::sample::select(b"{}[],:\"\\ 0123456789.eE+-tfnrulasu".to_vec()),
                any::<u8>(),
            ],
            0..40,
        ),
    ) {
        if let Ok(once) = canonicalize(&bytes) {
            prop_assert_eq!(canonicalize(once.as_bytes()).unwrap(), once);
        }
    }
}
