use super::*;
use proptest::prelude::*;
use regex_automata::dfa::dense;
use regex_automata::nfa::thompson;
use regex_automata::util::syntax;
use regex_syntax::hir::literal::{ExtractKind, Extractor, Seq};
use std::path::Path;
use std::sync::LazyLock;

#[path = "../../benches/sample.rs"]
mod sample;

const SEARCHES: [Compiled; 5] = [
    FORMATS,
    PRIVATE_KEY_END,
    JWT_HEADER,
    PERCENT_ESCAPE,
    JSON_ESCAPE,
];

/// The sparse DFA and the prefixes of `patterns`, as `src/search/` holds them: bytes without
/// Unicode, leftmost first, anchored; the prefixes as the `regex` crate picks them for its
/// prefilter.
fn compile(patterns: &[&str]) -> (Vec<u8>, String) {
    let dfa = dense::Builder::new()
        .syntax(syntax::Config::new().unicode(false).utf8(false))
        .thompson(thompson::Config::new().utf8(false))
        .configure(
            dense::Config::new()
                .match_kind(MatchKind::LeftmostFirst)
                .start_kind(StartKind::Anchored),
        )
        .build_many(patterns)
        .unwrap();
    let sparse = dfa.to_sparse().unwrap().to_bytes_little_endian();

    let mut prefixes = Seq::empty();
    for pattern in patterns {
        let hir = regex_syntax::ParserBuilder::new()
            .unicode(false)
            .utf8(false)
            .build()
            .parse(pattern)
            .unwrap();
        prefixes.union(&mut Extractor::new().kind(ExtractKind::Prefix).extract(&hir));
    }
    prefixes.optimize_for_prefix_by_preference();
    let literals = prefixes
        .literals()
        .expect("every match starts with one of finitely many prefixes");
    let mut lines = String::new();
    for literal in literals {
        let literal = std::str::from_utf8(literal.as_bytes()).unwrap();
        assert!(
            !literal.is_empty() && !literal.contains('\n'),
            "{literal:?}"
        );
        lines.push_str(literal);
        lines.push('\n');
    }
    (sparse, lines)
}

#[test]
fn the_checked_in_searches_are_compiled_from_their_patterns() {
    let bless = std::env::var_os("TOOLWARD_BLESS").is_some();
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/search");
    for search in SEARCHES {
        let (dfa, prefixes) = compile(search.patterns);
        if bless {
            std::fs::write(folder.join(format!("{}.dfa", search.name)), &dfa).unwrap();
            std::fs::write(folder.join(format!("{}.prefixes", search.name)), &prefixes).unwrap();
            continue;
        }
        assert!(
            search.dfa == dfa.as_slice(),
            "`{}.dfa` is not compiled from its patterns: rewrite it with TOOLWARD_BLESS=1",
            search.name
        );
        assert_eq!(
            search.prefixes, prefixes,
            "`{}.prefixes`: rewrite it with TOOLWARD_BLESS=1",
            search.name
        );
    }
}

#[test]
fn compiling_the_searches_gives_the_same_bytes_each_time() {
    for search in SEARCHES {
        assert!(
            compile(search.patterns) == compile(search.patterns),
            "{}",
            search.name
        );
    }
}

#[test]
fn every_search_reads_and_validates() {
    for search in SEARCHES {
        Search::new(&search).unwrap();
    }
}

/// The alternation of `patterns` as the `regex` crate compiles it, one group per pattern.
fn alternation(patterns: &[&str]) -> regex::bytes::Regex {
    let alternation = patterns
        .iter()
        .map(|pattern| format!("({pattern})"))
        .collect::<Vec<_>>()
        .join("|");
    regex::bytes::RegexBuilder::new(&alternation)
        .unicode(false)
        .size_limit(32 << 20)
        .build()
        .unwrap()
}

/// Each search, read, beside the `regex` crate's alternation of its patterns.
static BESIDE_REGEX: LazyLock<Vec<(Compiled, Search, regex::bytes::Regex)>> = LazyLock::new(|| {
    SEARCHES
        .iter()
        .map(|search| {
            (
                *search,
                Search::new(search).unwrap(),
                alternation(search.patterns),
            )
        })
        .collect()
});

/// Every match of each search in `hay` from each start, beside the `regex` crate's.
fn assert_finds_as_regex_does(hay: &[u8]) {
    for (search, compiled, regex) in BESIDE_REGEX.iter() {
        assert_search_finds_as_regex_does(search, compiled, regex, hay);
    }
}

fn assert_search_finds_as_regex_does(
    search: &Compiled,
    compiled: &Search,
    regex: &regex::bytes::Regex,
    hay: &[u8],
) {
    let mut locations = regex.capture_locations();
    for at in 0..=hay.len() {
        let expected = regex
            .captures_read_at(&mut locations, hay, at)
            .map(|whole| {
                let pattern = (1..locations.len())
                    .find(|&group| locations.get(group).is_some())
                    .unwrap();
                Match {
                    start: whole.start(),
                    end: whole.end(),
                    pattern: pattern - 1,
                }
            });
        assert_eq!(
            compiled.find_at(hay, at),
            expected,
            "`{}` from {at} in {:?}",
            search.name,
            String::from_utf8_lossy(hay)
        );
    }
}

#[test]
fn a_search_finds_what_the_regex_crate_finds_in_the_sample() {
    let text = sample::text(&sample::secrets());
    // From every start of 64 KiB is slow in a debug build: the first 8 KiB, with a secret of
    // each kind the sample has.
    let hay = &text.as_bytes()[..8 << 10];
    assert_finds_as_regex_does(hay);
}

/// Text made of the patterns' prefixes, pieces of matches, their classes' characters and
/// separators, where matches start, fail and overlap.
fn pieces() -> impl Strategy<Value = String> {
    let known: Vec<String> = FORMATS
        .prefixes
        .lines()
        .chain([
            "glpat-",
            "-----BEGIN RSA PRIVATE KEY-----",
            "-----END RSA PRIVATE KEY-----",
            "-----END ",
            "ey",
            "eyJ",
            ".",
            "%2F",
            "%",
            "\\u0041",
            "\\/",
            "xoxb-1234567890-",
            "AKIAABCDEFGHIJ",
            "T3BlbkFJ",
        ])
        .map(str::to_owned)
        .collect();
    proptest::collection::vec(
        prop_oneof![
            proptest::sample::select(known),
            "[0-9A-Za-z_=./+-]{1,40}",
            "[ \n\"\\\\%]",
        ],
        0..24,
    )
    .prop_map(|pieces| pieces.concat())
}

proptest! {
    #[test]
    fn a_search_finds_what_the_regex_crate_finds(hay in pieces()) {
        assert_finds_as_regex_does(hay.as_bytes());
    }
}
