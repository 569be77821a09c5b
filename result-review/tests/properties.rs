//! Properties of every review's findings, for arbitrary text: sorted, not overlapping, not
//! empty, inside the text, on character boundaries, with a known kind; and no panic.
#![allow(clippy::unwrap_used, reason = "a test")]

use std::sync::OnceLock;

use proptest::prelude::*;
use toolward_result_review::{Finding, Review, Reviewer};

/// A reviewer of `reviews`, compiled once for all the cases (`Reviewer` is `Sync`).
fn reviewer(reviews: &[Review]) -> &'static Reviewer {
    static ALL: OnceLock<Reviewer> = OnceLock::new();
    static SECRETS: OnceLock<Reviewer> = OnceLock::new();
    static HIDDEN: OnceLock<Reviewer> = OnceLock::new();
    let cell = match reviews {
        [Review::Secrets] => &SECRETS,
        [Review::HiddenCharacters] => &HIDDEN,
        _ => &ALL,
    };
    cell.get_or_init(|| Reviewer::new(reviews).unwrap())
}

/// Pieces that make the reviews' paths run: prefixes of secrets, escape introducers and
/// terminators, encodings' characters, hidden characters; glued to arbitrary characters.
const PIECES: &[&str] = &[
    "ghp_",
    "0123456789abcdefABCDEF0123456789abcdef",
    "AKIA",
    "EXAMPLE",
    "glpat-",
    ".",
    "-",
    "_",
    "=",
    "%5F",
    "%",
    "\\u005f",
    "\\ud83d",
    "\\/",
    "\\n",
    "\\",
    "Z2hwX",
    "eyJhbGciOiJIUzI1NiJ9",
    "eyJ",
    "ey",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "\n",
    "\r\n",
    "\u{1b}",
    "\u{1b}[",
    "\u{1b}]",
    "\u{1b}\\",
    "\u{7}",
    "\u{9b}",
    "\u{9c}",
    "\u{9d}",
    "\u{18}",
    "\u{200b}",
    "\u{202e}",
    "\u{fe0f}",
    "\u{e0100}",
    "\u{e0041}",
    "\u{3164}",
    "é",
    "😀",
];

fn text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        proptest::sample::select(PIECES).prop_map(str::to_owned),
        any::<char>().prop_map(String::from),
        "[A-Za-z0-9+/]{1,40}",
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

fn check(text: &str, findings: &[Finding]) -> Result<(), TestCaseError> {
    let mut previous_end = 0;
    for finding in findings {
        prop_assert!(finding.start < finding.end, "empty: {finding:?}");
        prop_assert!(
            finding.start >= previous_end,
            "overlaps or unsorted: {findings:?}"
        );
        prop_assert!(finding.end <= text.len(), "outside: {finding:?}");
        prop_assert!(text.is_char_boundary(finding.start), "{finding:?}");
        prop_assert!(text.is_char_boundary(finding.end), "{finding:?}");
        prop_assert!(
            finding
                .kind
                .split(',')
                .all(|kind| kind.starts_with("secret:") || kind.starts_with("hidden:")),
            "{finding:?}"
        );
        previous_end = finding.end;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn findings_are_sorted_disjoint_and_on_boundaries(text in text()) {
        let reviewer = reviewer(&Review::ALL);
        check(&text, &reviewer.review(&text))?;
    }

    #[test]
    fn any_string_is_reviewed_without_panic(text in any::<String>()) {
        let reviewer = reviewer(&Review::ALL);
        check(&text, &reviewer.review(&text))?;
    }

    #[test]
    fn each_review_alone_keeps_the_properties(text in text()) {
        for review in Review::ALL {
            let reviewer = reviewer(&[review]);
            let findings = reviewer.review(&text);
            check(&text, &findings)?;
            let prefix = match review {
                Review::Secrets => "secret:",
                Review::HiddenCharacters => "hidden:",
            };
            prop_assert!(
                findings.iter().all(|f| f.kind.split(',').all(|kind| kind.starts_with(prefix))),
                "{findings:?}"
            );
        }
    }

    /// A secret is found wherever it is put: at any character boundary of arbitrary text, with
    /// a separator on each side, the finding covers it.
    #[test]
    fn a_token_in_arbitrary_text_is_covered(before in text(), after in text()) {
        let token = "ghp_0123456789abcdefghijABCDEFGHIJklmnop";
        let text = format!("{before} {token} {after}");
        let reviewer = reviewer(&Review::ALL);
        let findings = reviewer.review(&text);
        let start = before.len() + 1;
        let end = start + token.len();
        prop_assert!(
            findings.iter().any(|f| {
                f.start <= start && end <= f.end && f.kind.split(',').any(|kind| kind.starts_with("secret:"))
            }),
            "{findings:?}"
        );
    }
}

/// The reviews with every search on the `regex` crate (`Reviewer::on_regex`, the native
/// baseline of `cargo bench --bench review`) find exactly what the DFAs find.
#[cfg(feature = "regex-baseline")]
#[path = "../benches/sample.rs"]
mod sample;

#[cfg(feature = "regex-baseline")]
mod on_regex {
    use super::*;

    fn on_regex() -> &'static Reviewer {
        static ON_REGEX: OnceLock<Reviewer> = OnceLock::new();
        ON_REGEX.get_or_init(|| Reviewer::on_regex(&Review::ALL).unwrap())
    }

    #[test]
    fn the_benchmark_sample_is_reviewed_the_same() {
        let text = sample::text(&sample::secrets());
        let found = on_regex().review(&text);
        assert!(found.len() > 100, "{}", found.len());
        assert_eq!(found, reviewer(&Review::ALL).review(&text));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn arbitrary_text_is_reviewed_the_same(text in text()) {
            prop_assert_eq!(on_regex().review(&text), reviewer(&Review::ALL).review(&text));
        }
    }
}
