//! Helpers shared by the unit tests, and the tests of the public surface: names, merging, the
//! crate docs against the rules.

use super::*;

/// `n` characters of `alphabet`, deterministic for `seed` (a linear congruential generator):
/// realistic-looking tokens that are nobody's secret.
pub(crate) fn fill(alphabet: &str, n: usize, seed: u64) -> String {
    let alphabet = alphabet.as_bytes();
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let index = (state >> 33) as usize % alphabet.len();
            char::from(alphabet[index])
        })
        .collect()
}

pub(crate) fn reviewer_of(reviews: &[Review]) -> Reviewer {
    Reviewer::new(reviews).unwrap()
}

pub(crate) fn secret(start: usize, end: usize, rule: &str) -> Finding {
    Finding {
        start,
        end,
        kind: format!("secret:{rule}"),
    }
}

pub(crate) fn hidden(start: usize, end: usize, what: &str) -> Finding {
    Finding {
        start,
        end,
        kind: format!("hidden:{what}"),
    }
}

fn encode(bytes: &[u8], alphabet: &[u8; 64], pad: bool) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(alphabet[(n >> (18 - 6 * i) & 63) as usize]));
        }
        if pad {
            for _ in chunk.len()..3 {
                out.push('=');
            }
        }
    }
    out
}

/// Standard base64 with padding.
pub(crate) fn base64(bytes: &[u8]) -> String {
    encode(
        bytes,
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        true,
    )
}

/// base64url without padding.
pub(crate) fn base64url(bytes: &[u8]) -> String {
    encode(
        bytes,
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
        false,
    )
}

#[test]
fn the_test_encoder_round_trips_through_the_decoder() {
    for text in ["", "a", "ab", "abc", "abcd", "{\"alg\":\"HS256\"}"] {
        assert_eq!(
            encoded::decode_base64(base64(text.as_bytes()).as_bytes()),
            text.as_bytes()
        );
        assert_eq!(
            encoded::decode_base64(base64url(text.as_bytes()).as_bytes()),
            text.as_bytes()
        );
    }
    assert_eq!(base64(b"ab"), "YWI=");
    assert_eq!(base64url(b"\xfb\xff"), "-_8");
}

#[test]
fn reviews_have_names() {
    for review in Review::ALL {
        assert_eq!(review.as_str().parse::<Review>(), Ok(review));
        assert_eq!(review.to_string(), review.as_str());
    }
    assert_eq!("secrets".parse::<Review>(), Ok(Review::Secrets));
    assert_eq!(
        "hidden-characters".parse::<Review>(),
        Ok(Review::HiddenCharacters)
    );
    assert_eq!(
        "Secrets".parse::<Review>(),
        Err(
            "no review named `Secrets` (the reviews are `secrets` and `hidden-characters`)"
                .to_owned()
        )
    );
}

#[test]
fn a_reviewer_runs_only_its_reviews() {
    let token = format!("ghp_{}", fill("abcdef0123456789", 36, 1));
    let text = format!("{token}\u{200b}");
    assert_eq!(reviewer_of(&[]).review(&text), []);
    assert_eq!(
        reviewer_of(&[Review::Secrets]).review(&text),
        [secret(0, 40, "github-pat")]
    );
    assert_eq!(
        reviewer_of(&[Review::HiddenCharacters]).review(&text),
        [hidden(40, 43, "zero-width")]
    );
    assert_eq!(
        reviewer_of(&[Review::HiddenCharacters, Review::Secrets, Review::Secrets]).review(&text),
        [secret(0, 40, "github-pat"), hidden(40, 43, "zero-width")]
    );
    assert_eq!(reviewer_of(&Review::ALL).review(""), []);
}

#[test]
fn overlapping_findings_merge_into_the_first() {
    let merged = merge(vec![
        hidden(10, 12, "control"),
        secret(0, 20, "private-key"),
        secret(30, 40, "jwt"),
        secret(30, 35, "github-pat+base64"),
        hidden(40, 43, "bidi"),
        secret(38, 50, "aws-access-key-id"),
        hidden(60, 61, "control"),
        hidden(55, 61, "tag"),
    ]);
    assert_eq!(
        merged,
        [
            Finding {
                start: 0,
                end: 20,
                kind: "secret:private-key,hidden:control".to_owned()
            },
            Finding {
                start: 30,
                end: 50,
                kind: "secret:jwt,secret:github-pat+base64,secret:aws-access-key-id,hidden:bidi"
                    .to_owned()
            },
            Finding {
                start: 55,
                end: 61,
                kind: "hidden:tag,hidden:control".to_owned()
            },
        ]
    );
    // A kind named twice is listed once.
    assert_eq!(
        merge(vec![
            secret(0, 5, "jwt"),
            secret(2, 8, "jwt"),
            secret(3, 9, "jwt")
        ]),
        [secret(0, 9, "jwt")]
    );
}

#[test]
fn an_escape_sequence_that_swallows_a_secret_names_both() {
    // `ESC SP g` is a whole escape sequence: the `g` of `ghp_` is in it.
    let text = "\u{1b} ghp_0123456789abcdefghijABCDEFGHIJklmnop";
    assert_eq!(
        reviewer_of(&Review::ALL).review(text),
        [Finding {
            start: 0,
            end: text.len(),
            kind: "hidden:escape-sequence,secret:github-pat".to_owned()
        }]
    );
}

#[test]
fn a_hidden_character_inside_a_private_key_block_is_merged_into_it() {
    let text = "-----BEGIN EC PRIVATE KEY-----\nMHcC\u{1b}[8mAQEE\n-----END EC PRIVATE KEY-----";
    assert_eq!(
        reviewer_of(&Review::ALL).review(text),
        [Finding {
            start: 0,
            end: text.len(),
            kind: "secret:private-key,hidden:escape-sequence".to_owned()
        }]
    );
}

#[test]
fn a_secret_split_across_two_texts_is_found_in_neither() {
    // A documented limit: each text is reviewed alone.
    let reviewer = reviewer_of(&Review::ALL);
    let token = format!("ghp_{}", fill("0123456789ABCDEFabcdef", 36, 3));
    let (first, second) = token.split_at(20);
    assert_eq!(reviewer.review(&format!("page 1: {first}")), []);
    assert_eq!(reviewer.review(&format!("{second} (page 2)")), []);
    assert_eq!(
        reviewer.review(&format!("{first}{second}")),
        [secret(0, 40, "github-pat")]
    );
    // So is a private key block cut in two: the first half is found to its end, the second
    // (no begin line) not at all.
    let key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lg\n-----END RSA PRIVATE KEY-----";
    let (first, second) = key.split_at(50);
    assert_eq!(reviewer.review(first), [secret(0, 50, "private-key")]);
    assert_eq!(reviewer.review(second), []);
}

#[test]
fn the_crate_docs_list_every_rule() {
    let docs: Vec<&str> = include_str!("lib.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//! | `"))
        .collect();
    let listed: Vec<&str> = docs
        .iter()
        .filter_map(|row| row.split('`').next())
        .filter(|id| !id.starts_with("hidden:"))
        .collect();
    let mut rules: Vec<&str> = secrets::RULES.iter().map(|rule| rule.id).collect();
    rules.extend([secrets::PRIVATE_KEY, secrets::JWT]);
    assert_eq!(listed, rules);
    // Each row of a gitleaks rule names it (its id, or the id it had there).
    for rule in secrets::RULES {
        let row = docs
            .iter()
            .find(|row| row.starts_with(&format!("{}`", rule.id)))
            .unwrap();
        match rule.gitleaks {
            Some(id) if id != rule.id => {
                assert!(row.contains(&format!("gitleaks' `{id}`")), "{row}")
            }
            Some(_) => assert!(!row.contains("not in the pinned commit"), "{row}"),
            None => assert!(row.contains("not in the pinned commit"), "{row}"),
        }
    }
}

#[test]
fn the_doc_example_holds() {
    let reviewer = reviewer_of(&Review::ALL);
    let text = "token: ghp_0123456789abcdefghijABCDEFGHIJklmnop\u{200b}!";
    assert_eq!(
        reviewer.review(text),
        [secret(7, 47, "github-pat"), hidden(47, 50, "zero-width")]
    );
}

/// A block of `text`, JSON or not, without URI or MIME type.
fn block(text: &str, json: bool) -> Block<'_> {
    Block {
        text,
        json,
        uri: "",
        mime_type: "",
    }
}

#[test]
fn a_result_is_reviewed_block_by_block_naming_what_found_something() {
    let token = format!("ghp_{}", fill("abcdef0123456789", 36, 2));
    let text = format!("key {token}");
    let json = format!(r#"{{"log":"\u001b[31m","key":"{token}"}}"#);
    // The middle one is an image: no text, nothing to review.
    let blocks = [block(&text, false), block("", false), block(&json, true)];
    let found = reviewer_of(&Review::ALL).review_result(&blocks, "secret");
    assert_eq!(
        found.findings,
        [
            BlockFinding {
                block: 0,
                finding: secret(4, 44, "github-pat"),
            },
            BlockFinding {
                block: 2,
                finding: secret(27, 67, "github-pat"),
            },
            // The escaped escape sequence of the JSON text, after the block's other findings.
            BlockFinding {
                block: 2,
                finding: hidden(8, 18, "escape-sequence"),
            },
        ]
    );
    assert_eq!(found.withhold, None);
    assert_eq!(found.confidentiality.as_deref(), Some("secret"));
    assert_eq!(found.determined_by, ["secrets", "hidden-characters"]);

    // Escaped controls are looked for only in JSON text, and only by `hidden-characters`.
    let found = reviewer_of(&Review::ALL).review_result(&[block(&json, false)], "secret");
    assert_eq!(found.determined_by, ["secrets"]);
    let found = reviewer_of(&[Review::Secrets]).review_result(&blocks[2..], "private");
    assert_eq!(found.findings.len(), 1);
    assert_eq!(found.determined_by, ["secrets"]);
    // Nothing found: no level, no name.
    let found = reviewer_of(&Review::ALL).review_result(&[block("fine", false)], "private");
    assert_eq!(found, ResultFindings::default());
}

#[test]
fn a_finding_in_a_uri_or_mime_type_withholds_the_result() {
    let token = format!("ghp_{}", fill("abcdef0123456789", 36, 4));
    let uri = format!("https://example.com/?t={token}");
    let linked = Block {
        uri: &uri,
        ..block("a link", true)
    };
    let found = reviewer_of(&Review::ALL).review_result(&[block(&token, false), linked], "private");
    assert_eq!(
        found,
        ResultFindings {
            withhold: Some(
                "the URI of block 1 holds what the reviews redact (secret:github-pat)".to_owned()
            ),
            determined_by: vec!["secrets".to_owned()],
            ..ResultFindings::default()
        }
    );
    let typed = Block {
        mime_type: "text/plain\u{200b}",
        ..block("text", false)
    };
    let found = reviewer_of(&Review::ALL).review_result(&[typed], "private");
    assert_eq!(
        found.withhold.as_deref(),
        Some("the MIME type of block 0 holds what the reviews redact (hidden:zero-width)")
    );
    assert_eq!(found.determined_by, ["hidden-characters"]);
    // A review not run finds nothing there either.
    let found = reviewer_of(&[Review::Secrets]).review_result(&[typed], "private");
    assert_eq!(found, ResultFindings::default());
}

#[test]
fn a_reviewer_is_named_by_its_reviews_names() {
    let token = format!("ghp_{}", fill("abcdef0123456789", 36, 3));
    let named = Reviewer::named(&["secrets"]).unwrap();
    assert_eq!(named.review(&token), [secret(0, 40, "github-pat")]);
    assert!(
        Reviewer::named::<&str>(&[])
            .unwrap()
            .review(&token)
            .is_empty()
    );
    assert_eq!(
        Reviewer::named(&["secrets", "entropy"]).unwrap_err(),
        "no review named `entropy` (the reviews are `secrets` and `hidden-characters`)"
    );
}

// What an outside attack on the reviews got through (issue 30), found now.

#[test]
fn a_token_after_an_escape_of_white_space_is_at_a_boundary() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let key = format!("AKIA{}", fill("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16, 9));
    for before in [
        "\\u0020", "\\u000a", "\\u000A", "\\b", "\\f", "\\n", "\\u00a0", "\\u3000", "%20", "%0A",
    ] {
        let text = format!("{{\"k\":\"x{before}{key}\"}}");
        let start = text.find(&key).unwrap();
        assert_eq!(
            reviewer.review(&text),
            [secret(start, start + key.len(), "aws-access-key-id")],
            "after {before}"
        );
    }
    // An escape of a letter, digit or `_` is no boundary, as the letter itself is none.
    for before in ["\\u0041", "%41", "%5F", "\\\\u0020x"] {
        let text = format!("x{before}{key}");
        assert_eq!(reviewer.review(&text), [], "after {before}");
    }
}

#[test]
fn a_private_key_with_an_escaped_character_in_its_begin_line_is_found_whole() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let body = fill(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        64,
        5,
    );
    let json = format!(
        "{{\"key\":\"-----BEGIN RSA PRIVATE\\u0020KEY-----\\n{body}\\n-----END RSA PRIVATE KEY-----\"}}"
    );
    let (start, end) = (8, json.len() - 2);
    assert_eq!(
        reviewer.review(&json),
        [secret(start, end, "private-key+json")]
    );
    let escaped = json.replace("-----BEGIN", "\\u002d----BEGIN");
    assert_eq!(
        reviewer.review(&escaped),
        [secret(8, escaped.len() - 2, "private-key+json")]
    );
    let percent = format!(
        "q=-----BEGIN%20RSA%20PRIVATE%20KEY-----%0A{body}%0A-----END%20RSA%20PRIVATE%20KEY-----&x=1"
    );
    assert_eq!(
        reviewer.review(&percent),
        [secret(2, percent.len() - 4, "private-key+percent")]
    );
}

#[test]
fn a_private_key_whose_escaped_begin_line_stands_alone_runs_through_its_end_line() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let body = fill(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        64,
        6,
    );
    for begin in [
        "-----BEGIN%20RSA PRIVATE KEY-----",
        "-----BEGIN RSA PRIVATE\\u0020KEY-----",
        "\"-----BEGIN RSA PRIVATE\\u0020KEY-----\"",
    ] {
        let block = format!("{begin}\n{body}\n{body}\n-----END RSA PRIVATE KEY-----");
        let text = format!("a key:\n{block}\nand after");
        let start = if begin.starts_with('"') { 8 } else { 7 };
        let end = 7 + block.len();
        let found = reviewer.review(&text);
        assert_eq!(found.len(), 1, "{begin}: {found:?}");
        assert_eq!((found[0].start, found[0].end), (start, end), "{begin}");
    }
}

#[test]
fn escaped_hidden_characters_in_json_text_are_found_decoded() {
    let reviewer = reviewer_of(&[Review::HiddenCharacters]);
    let osc = "\\u001b]8;;https://evil.example/\\u0007";
    let json = format!(
        "{{\"a\":\"x\\by\",\"b\":\"\\f\",\"c\":\"a\\rb\",\"d\":\"a\\r\\nb\",\"e\":\"{osc}link\",\"f\":\"\\u202e\",\"g\":\"\\udb40\\udc41\\udb40\\udc42\",\"h\":\"\\u001b]0;title\"}}"
    );
    let at = |needle: &str| json.find(needle).unwrap();
    let found = reviewer.review_result(&[block(&json, true)], "private");
    let spans: Vec<(usize, usize, &str)> = found
        .findings
        .iter()
        .map(|f| (f.finding.start, f.finding.end, f.finding.kind.as_str()))
        .collect();
    let osc_start = at(osc);
    let title = at("\\u001b]0;title");
    assert_eq!(
        spans,
        [
            (at("\\by"), at("\\by") + 2, "hidden:control"),
            (at("\\f"), at("\\f") + 2, "hidden:control"),
            // A lone carriage return; before a line feed it is layout.
            (at("\\rb"), at("\\rb") + 2, "hidden:control"),
            // The OSC whole, its target included.
            (osc_start, osc_start + osc.len(), "hidden:escape-sequence"),
            (at("\\u202e"), at("\\u202e") + 6, "hidden:bidi"),
            (at("\\udb40"), at("\\udb40") + 24, "hidden:tag"),
            // Unterminated: through the end of its string, not past it.
            (title, json.len() - 2, "hidden:escape-sequence"),
        ]
    );
    // In a text block, an escape is six characters anyone can see.
    let found = reviewer.review_result(&[block(&json, false)], "private");
    assert_eq!(found, ResultFindings::default());
}

#[test]
fn json_text_inside_a_json_string_is_reviewed_decoded_in_structured_content_and_in_text() {
    let reviewer = reviewer_of(&Review::ALL);
    let token = format!("ghp_{}", fill(ALNUM_CHARS, 36, 21));
    let escaped = format!("\\u0067hp_{}", token.get(4..).unwrap());
    // As the memory server keeps an observation: a string holding JSON text.
    let observation = format!("ci config: {{\"token\":\"{escaped}\"}}");
    let structured = serde_json_like_string(&observation);
    let json = format!("{{\"observations\":[{structured}]}}");
    let found = reviewer.review_result(&[block(&json, true)], "secret");
    let at = json.find("\\\\u0067").unwrap();
    let spans: Vec<(usize, usize, &str)> = found
        .findings
        .iter()
        .map(|f| (f.finding.start, f.finding.end, f.finding.kind.as_str()))
        .collect();
    assert_eq!(
        spans,
        [(at, at + escaped.len() + 1, "secret:github-pat+json")]
    );
    // A text block that serializes it (`JSON.stringify`) holds the same text.
    let found = reviewer.review_result(&[block(&json, false)], "secret");
    assert_eq!(found.findings.len(), 1, "{found:?}");
    assert_eq!(found.findings[0].finding.kind, "secret:github-pat+json");
}

const ALNUM_CHARS: &str = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// `s` as a JSON string literal, quotes included (only `"` and `\` need escaping here).
fn serde_json_like_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

#[test]
fn a_token_glued_to_the_end_of_another_is_found_too() {
    let reviewer = reviewer_of(&[Review::Secrets]);
    let rubygems = format!("rubygems_{}", fill("0123456789abcdef", 48, 22));
    let sendgrid = format!("SG.{}", fill(ALNUM_CHARS, 66, 23));
    let text = format!("{rubygems}{sendgrid}");
    assert_eq!(
        reviewer.review(&text),
        [
            secret(0, rubygems.len(), "rubygems-api-token"),
            secret(rubygems.len(), text.len(), "sendgrid-api-token"),
        ]
    );
    // Glued to a word that is no secret, a token that needs a boundary is not found.
    assert_eq!(reviewer.review(&format!("x{sendgrid}")), []);
}

#[test]
fn a_secret_broken_by_hidden_characters_is_found_over_them() {
    let reviewer = reviewer_of(&Review::ALL);
    let token = format!("ghp_{}", fill(ALNUM_CHARS, 36, 24));
    let (head, tail) = token.split_at(20);
    for inside in [
        "\u{200b}",
        "\u{1b}[0m\u{1b}[1;31m",
        "\u{e0041}\u{e0042}",
        "\u{fe0f}\u{fe0f}",
    ] {
        let text = format!("key: \u{1b}[1;32m{head}{inside}{tail}\u{1b}[0m end");
        let found = reviewer.review(&text);
        let start = text.find(head).unwrap();
        let end = start + head.len() + inside.len() + tail.len();
        assert!(
            found
                .iter()
                .any(|f| f.start <= start && end <= f.end && f.kind.contains("secret:github-pat")),
            "{inside:?}: {found:?}"
        );
    }
    // The secrets review alone finds it too.
    let text = format!("{head}\u{200b}{tail}");
    assert_eq!(
        reviewer_of(&[Review::Secrets]).review(&text),
        [secret(0, text.len(), "github-pat")]
    );
}

#[test]
fn a_token_broken_by_escaped_hidden_characters_in_json_text_is_found() {
    let reviewer = reviewer_of(&Review::ALL);
    let token = format!("ghp_{}", fill(ALNUM_CHARS, 36, 25));
    let (head, tail) = token.split_at(20);
    for inside in ["\\u200b", "\\u001b[0m\\u001b[1;31m", "\\u2060"] {
        // A JSON log line in a text block, as Docker writes coloured output.
        let text = format!("{{\"log\":\"\\u001b[1;32m{head}{inside}{tail}\\u001b[0m\\n\"}}");
        let start = text.find(head).unwrap();
        let end = start + head.len() + inside.len() + tail.len();
        let found = reviewer.review(&text);
        assert!(
            found
                .iter()
                .any(|f| f.start <= start && end <= f.end && f.kind.contains("secret:github-pat")),
            "{inside}: {found:?}"
        );
    }
}

#[test]
fn a_key_right_after_a_control_sequences_parameters_is_found() {
    let reviewer = reviewer_of(&Review::ALL);
    let key = "AKIAQWERTYUIOPASDFGH";
    for before in ["\u{1b}[1", "\u{1b}[1;32", "\u{9b}1"] {
        let text = format!("x {before}{key} y");
        let found = reviewer.review(&text);
        let start = text.find(key).unwrap();
        assert!(
            found.iter().any(|f| f.start <= start
                && start + key.len() <= f.end
                && f.kind.contains("secret:aws-access-key-id")),
            "{before:?}: {found:?}"
        );
    }
}
