use super::*;
use crate::Review;
use crate::tests::{base64, base64url, fill, reviewer_of, secret};

const ALNUM: &str = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

fn github() -> String {
    format!("ghp_{}", fill(ALNUM, 36, 1))
}

#[test]
fn a_base64_copy_is_found_as_the_whole_run() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let encoded = base64(format!("GITHUB_TOKEN={}\nUSER=me\n", github()).as_bytes());
    assert!(encoded.ends_with('='));
    let text = format!("config: {encoded} (base64)");
    assert_eq!(
        reviewer.review(&text),
        [secret(8, 8 + encoded.len(), "github-pat+base64")]
    );
    // base64url, no padding, in a URL's query.
    let encoded = base64url(format!("{{\"token\":\"{}\"}}", github()).as_bytes());
    let text = format!("https://example.com/cb?state={encoded}&x=1");
    assert_eq!(
        reviewer.review(&text),
        [secret(29, 29 + encoded.len(), "github-pat+base64")]
    );
}

#[test]
fn wrapped_base64_is_one_run() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let plain = format!("{}{}", "x".repeat(100), github());
    let encoded = base64(plain.as_bytes());
    let wrapped: Vec<&str> = encoded
        .as_bytes()
        .chunks(76)
        .map(|line| std::str::from_utf8(line).unwrap())
        .collect();
    // The token is on the second and third lines of the encoding.
    for separator in ["\n", "\r\n", "\\n"] {
        let body = wrapped.join(separator);
        let text = format!("data:\n{body}\nend");
        assert_eq!(
            reviewer.review(&text),
            [secret(6, 6 + body.len(), "github-pat+base64")],
            "{separator:?}"
        );
    }
}

#[test]
fn base64_after_a_json_escape_starts_after_it() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let encoded = base64(github().as_bytes());
    let text = format!("{{\"out\":\"line\\n{encoded}\\n\"}}");
    assert_eq!(
        reviewer.review(&text),
        [secret(14, 14 + encoded.len(), "github-pat+base64")]
    );
}

#[test]
fn short_or_misaligned_base64_is_not_decoded() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    // `AKIA` + 16: 20 bytes, 28 characters of base64; cut to 23 it is too short.
    let key = format!(
        "AKIA{}",
        fill("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", 16, 5)
    );
    let encoded = base64(key.as_bytes());
    assert_eq!(
        reviewer.review(&encoded),
        [secret(0, 28, "aws-access-key-id+base64")]
    );
    assert_eq!(reviewer.review(encoded.get(..23).unwrap()), []);
    // Glued to a word, the run decodes misaligned: a documented limit.
    assert_eq!(reviewer.review(&format!("key{encoded}")), []);
}

#[test]
fn base64_of_other_secrets_is_found() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl";
    let encoded = base64(jwt.as_bytes());
    assert_eq!(
        reviewer.review(&encoded),
        [secret(0, encoded.len(), "jwt+base64")]
    );
    let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n";
    let encoded = base64(key.as_bytes());
    assert_eq!(
        reviewer.review(&encoded),
        [secret(0, encoded.len(), "private-key+base64")]
    );
    // Binary around the secret (not UTF-8) does not matter: the decoding is reviewed as bytes.
    let mut bytes = vec![0xff, 0x00, 0xfe, 0x80];
    bytes.extend(github().as_bytes());
    let encoded = base64(&bytes);
    assert_eq!(
        reviewer.review(&encoded),
        [secret(0, encoded.len(), "github-pat+base64")]
    );
}

#[test]
fn base64_of_ordinary_text_is_not_a_finding() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let encoded = base64(b"just some ordinary configuration text, nothing secret here");
    assert_eq!(reviewer.review(&encoded), []);
    // Two levels of encoding are not decoded: a documented limit.
    let twice = base64(base64(github().as_bytes()).as_bytes());
    assert_eq!(reviewer.review(&twice), []);
}

#[test]
fn a_percent_encoded_copy_is_found_as_the_whole_run() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let token = github();
    let escaped = token.replacen('_', "%5F", 1);
    let text = format!("GET /cb?token={escaped}&page=2");
    assert_eq!(
        reviewer.review(&text),
        [secret(14, 14 + escaped.len(), "github-pat+percent")]
    );
    // A whole URL, percent-encoded in another URL's query.
    let hook = format!(
        "https%3A%2F%2Fhooks.slack.com%2Fservices%2FT{}%2FB{}%2F{}",
        fill("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", 10, 2),
        fill("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", 10, 3),
        fill(ALNUM, 24, 4)
    );
    let text = format!("https://example.com/redirect?to={hook}");
    assert_eq!(
        reviewer.review(&text),
        [secret(32, 32 + hook.len(), "slack-webhook-url+percent")]
    );
}

#[test]
fn a_secret_written_plainly_in_a_percent_run_is_found_directly() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let token = github();
    let text = format!("q=a%20b+{token}%20c");
    assert_eq!(reviewer.review(&text), [secret(8, 48, "github-pat")]);
    // `%` without two hexadecimal digits is no escape.
    let escaped = token.replacen('_', "%5G", 1);
    assert_eq!(reviewer.review(&escaped), []);
}

#[test]
fn a_json_escaped_copy_is_found_as_the_whole_run() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let token = github();
    let escaped = format!("\\u0067hp\\u005f{}", token.get(4..).unwrap());
    let text = format!("{{\"token\":\"{escaped}\"}}");
    assert_eq!(
        reviewer.review(&text),
        [secret(10, 10 + escaped.len(), "github-pat+json")]
    );
    // PHP's `\/`.
    let hook = format!(
        "https:\\/\\/hooks.slack.com\\/services\\/T{}\\/B{}\\/{}",
        fill("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", 10, 2),
        fill("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", 10, 3),
        fill(ALNUM, 24, 4)
    );
    let text = format!("{{\"url\":\"{hook}\"}}");
    assert_eq!(
        reviewer.review(&text),
        [secret(8, 8 + hook.len(), "slack-webhook-url+json")]
    );
    // An escaped backslash is not an escape: `\\u0067` is a backslash and `u0067`; but that
    // is JSON text inside a JSON string, decoded once more.
    let text = format!("\\\\u0067hp_{}", token.get(4..).unwrap());
    assert_eq!(
        reviewer.review(&text),
        [secret(0, text.len(), "github-pat+json")]
    );
    let text = format!("\\\\\\\\u0067hp_{}", token.get(4..).unwrap());
    assert_eq!(reviewer.review(&text), [], "three levels are not decoded");
}

#[test]
fn surrogate_pairs_and_lone_surrogates_decode() {
    assert_eq!(
        json_unicode_escape(b"\\ud83d\\ude00x"),
        Some(('\u{1f600}', 12))
    );
    assert_eq!(json_unicode_escape(b"\\ud83dx"), Some(('\u{fffd}', 6)));
    assert_eq!(json_unicode_escape(b"\\ude00"), Some(('\u{fffd}', 6)));
    assert_eq!(json_unicode_escape(b"\\u0041"), Some(('A', 6)));
    assert_eq!(json_unicode_escape(b"\\u004"), None);
    assert_eq!(json_unicode_escape(b"\\u00g1"), None);
}

#[test]
fn decode_base64_skips_what_is_not_base64() {
    assert_eq!(decode_base64(b"YWJj"), b"abc");
    assert_eq!(decode_base64(b"YW\nJj=="), b"abc");
    assert_eq!(decode_base64(b"YQ"), b"a");
    assert_eq!(decode_base64(b"Y"), b"");
    assert_eq!(decode_base64(b"-_8"), b"\xfb\xff");
    assert_eq!(decode_base64(b"+/8"), b"\xfb\xff");
}

/// The runs [`next_base64_line`] finds, one after the other, as `base64_runs` takes them.
fn skip_search(text: &[u8]) -> Vec<(usize, usize)> {
    let mut lines = Vec::new();
    let mut at = 0;
    while let Some((start, end)) = next_base64_line(text, at) {
        lines.push((start, end));
        at = end;
    }
    lines
}

/// The same, the plain way: every maximal run of base64 characters long enough.
fn plain_search(text: &[u8]) -> Vec<(usize, usize)> {
    let mut lines = Vec::new();
    let mut start = 0;
    for end in 0..=text.len() {
        if text.get(end).is_none_or(|&b| !is_base64(b)) {
            if end - start >= MIN_BASE64 {
                lines.push((start, end));
            }
            start = end + 1;
        }
    }
    lines
}

proptest::proptest! {
    #[test]
    fn the_skip_search_finds_every_long_run(
        text in proptest::collection::vec(proptest::sample::select(&b"aZ09+/_-=. \n%"[..]), 0..200),
        long in proptest::collection::vec(("[A-Za-z0-9]{20,40}", 0..200usize), 0..4),
    ) {
        let mut text = text;
        for (run, at) in long {
            let at = at.min(text.len());
            text.splice(at..at, run.into_bytes());
        }
        proptest::prop_assert_eq!(skip_search(&text), plain_search(&text));
    }
}

/// [`decode_base64`] a character at a time, as it was written first.
fn decode_base64_plainly(text: &[u8]) -> Vec<u8> {
    let value = |b: u8| match b {
        b'A'..=b'Z' => Some(u32::from(b - b'A')),
        b'a'..=b'z' => Some(u32::from(b - b'a') + 26),
        b'0'..=b'9' => Some(u32::from(b - b'0') + 52),
        b'+' | b'-' => Some(62),
        b'/' | b'_' => Some(63),
        _ => None,
    };
    let mut out = Vec::new();
    let mut bits: u32 = 0;
    let mut count = 0;
    for value in text.iter().filter_map(|&b| value(b)) {
        bits = (bits << 6) | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push(((bits >> count) & 0xff) as u8);
        }
    }
    out
}

proptest::proptest! {
    #[test]
    fn decode_base64_decodes_as_a_character_at_a_time(
        text in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::sample::select(&b"QZaz09+/-_=\n\r \xc3"[..]),
                proptest::num::u8::ANY,
            ],
            0..80,
        )
    ) {
        proptest::prop_assert_eq!(decode_base64(&text), decode_base64_plainly(&text));
    }
}
