use super::*;
use crate::secrets::tests::cases;
use proptest::prelude::*;
use regex_automata::Span;
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

/// The sparse DFA, the prefixes and the literals of `patterns`, as `src/search/` holds them:
/// bytes without Unicode, leftmost first, anchored; the prefixes as the `regex` crate picks them
/// for its prefilter (each search's own, natively); the literals each pattern's literal prefixes
/// taken up to the first class of more than 4 bytes (`[sr]k_` is `sk_` and `rk_`,
/// `ghp_[0-9A-Za-z]` is `ghp_`) and not shortened, for the guest's one pass ([`anchors`]),
/// which looks for the separators in them (`github_pat_`, `hooks.slack.com/`).
fn compile(patterns: &[&str]) -> (Vec<u8>, String, String) {
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
    let mut literals = Seq::empty();
    for pattern in patterns {
        let hir = regex_syntax::ParserBuilder::new()
            .unicode(false)
            .utf8(false)
            .build()
            .parse(pattern)
            .unwrap();
        prefixes.union(&mut Extractor::new().kind(ExtractKind::Prefix).extract(&hir));
        literals.union(
            &mut Extractor::new()
                .kind(ExtractKind::Prefix)
                .limit_class(4)
                .extract(&hir),
        );
    }
    prefixes.optimize_for_prefix_by_preference();
    literals.dedup();
    (sparse, lines(&prefixes), lines(&literals))
}

/// The literals of `seq`, one a line.
fn lines(seq: &Seq) -> String {
    let literals = seq
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
    lines
}

#[test]
fn the_checked_in_searches_are_compiled_from_their_patterns() {
    let bless = std::env::var_os("TOOLWARD_BLESS").is_some();
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/search");
    for search in SEARCHES {
        let (dfa, prefixes, literals) = compile(search.patterns);
        if bless {
            std::fs::write(folder.join(format!("{}.dfa", search.name)), &dfa).unwrap();
            std::fs::write(folder.join(format!("{}.prefixes", search.name)), &prefixes).unwrap();
            std::fs::write(folder.join(format!("{}.literals", search.name)), &literals).unwrap();
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
        assert_eq!(
            search.literals, literals,
            "`{}.literals`: rewrite it with TOOLWARD_BLESS=1",
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

/// The search without its prefilter, in `hay`: for each position, the match the DFA finds
/// when tried at every position from there on (tried once at each, then looked up).
fn plain_matches(search: &Search, hay: &[u8]) -> Vec<Option<Match>> {
    let mut plain = vec![None; hay.len() + 1];
    for start in (0..hay.len()).rev() {
        plain[start] = search.match_at(hay, start).or(plain[start + 1]);
    }
    plain
}

/// Every position where one of `literals` (one a line) starts, naively.
fn literal_starts(literals: &str, hay: &[u8]) -> Vec<usize> {
    (0..hay.len())
        .filter(|&at| {
            literals
                .lines()
                .any(|literal| hay[at..].starts_with(literal.as_bytes()))
        })
        .collect()
}

/// The anchors of the searches that share one pass in the guest.
static ANCHORS: LazyLock<Anchors> =
    LazyLock::new(|| Anchors::new(&ONE_PASS_SEARCHES.map(|compiled| compiled.literals())).unwrap());

/// Each of `searches`, with its own prefilter and with the candidates of the one pass of
/// [`Anchors`], beside the plain DFA search, in `hay`: from every start alone (`find_at`) when
/// `every_start`, and as the reviews go through a text with one cursor (after a match from its
/// end, after a candidate the DFA refused from the next byte; here also from each match's
/// start plus one, so that matches overlap); and the candidates of both prefilters beside
/// every start of a literal.
fn assert_prefiltered_finds_what_plain_finds(searches: &[Compiled], hay: &[u8], every_start: bool) {
    let mut one_pass = Vec::new();
    ANCHORS.scan(hay, &mut one_pass);
    for (compiled, search, _) in BESIDE_REGEX.iter() {
        if !searches.iter().any(|wanted| wanted.name == compiled.name) {
            continue;
        }
        let plain = plain_matches(search, hay);
        let context = || format!("`{}` in {:?}", compiled.name, String::from_utf8_lossy(hay));
        if every_start {
            for (at, plain) in plain.iter().enumerate() {
                assert_eq!(search.find_at(hay, at), *plain, "from {at}: {}", context());
            }
        }
        let mut library = Vec::new();
        let mut at = 0;
        let prefilter = search.prefilter.as_ref().unwrap();
        while let Some(span) = prefilter.find(hay, Span::from(at..hay.len())) {
            library.push(span.start);
            at = span.start + 1;
        }
        assert_eq!(
            library,
            literal_starts(compiled.prefixes, hay),
            "the library's candidates: {}",
            context()
        );
        let index = ONE_PASS_SEARCHES
            .iter()
            .position(|one| one.name == compiled.name);
        let candidates = index.and_then(|index| one_pass.get(index));
        if let Some(candidates) = candidates {
            assert_eq!(
                candidates,
                &literal_starts(compiled.literals, hay),
                "one pass's candidates: {}",
                context()
            );
        }
        for candidates in [None, candidates.map(Vec::as_slice)] {
            for step_past_start in [false, true] {
                let mut cursor = search.cursor(hay, candidates);
                let mut at = 0;
                while at <= hay.len() {
                    let found = cursor.find_at(at);
                    assert_eq!(found, plain[at], "a cursor from {at}: {}", context());
                    let Some(found) = found else { break };
                    at = if step_past_start {
                        found.start + 1
                    } else {
                        found.end.max(found.start + 1)
                    };
                }
            }
        }
    }
}

/// Text for the prefilter: the literal prefixes, whole tokens of each rule, their anchors
/// (`_`, `-`, `.`, upper-case letters) on their own, non-ASCII characters, and filler, so
/// that candidates overlap, share anchors, and fall on both sides of the vector scans'
/// 16-, 32- and 64-byte blocks.
fn anchor_pieces() -> impl Strategy<Value = Vec<u8>> {
    let mut known: Vec<String> = SEARCHES
        .iter()
        .flat_map(|search| search.prefixes.lines().chain(search.literals.lines()))
        .map(str::to_owned)
        .collect();
    known.extend(cases().into_iter().map(|case| case.token));
    known.extend(
        [
            "-----BEGIN RSA PRIVATE KEY-----",
            "-----END RSA PRIVATE KEY-----",
            "ghp",
            "gh",
            "glpa",
            "xox",
            "A",
            "AK",
            "AKI",
            "G",
            "GR",
            "d",
            "da",
            "dap",
            "sk",
            "s",
            "_",
            "-",
            ".",
            "__",
            "--",
            "..",
            "-----",
            "é",
            "概",
            "\u{200b}",
            "\u{1F600}",
            "\0",
            "\u{ff}",
        ]
        .map(str::to_owned),
    );
    proptest::collection::vec(
        prop_oneof![
            3 => proptest::sample::select(known),
            2 => "[a-zA-Z0-9_.-]{1,12}",
            1 => "[ \n\"\\\\%]{1,3}",
            1 => "[\\x00-\\x7f\\u{80}-\\u{10ffff}]{1,4}",
        ],
        0..16,
    )
    .prop_map(|pieces| pieces.concat().into_bytes())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn the_prefiltered_search_finds_what_the_plain_search_finds(hay in anchor_pieces()) {
        assert_prefiltered_finds_what_plain_finds(&SEARCHES, &hay, true);
    }

    #[test]
    fn the_prefiltered_search_finds_what_the_plain_search_finds_in_any_bytes(
        hay in proptest::collection::vec(any::<u8>(), 0..200)
    ) {
        assert_prefiltered_finds_what_plain_finds(&SEARCHES, &hay, true);
    }
}

/// Each rule's token at every offset from 0 to 66 in filler of three kinds (no anchor, an
/// anchor at every byte, non-ASCII text), and two tokens at distances 0 to 23 apart: the
/// vector scans read 16, 32 or 64 bytes at a time, so a token starts, or its anchor falls,
/// at each place of a block and across the boundary of two.
#[test]
fn the_prefiltered_search_finds_what_the_plain_search_finds_at_every_offset() {
    let tokens: Vec<String> = cases().into_iter().map(|case| case.token).collect();
    for filler in [" ", "_", "é"] {
        for token in &tokens {
            for offset in 0..=66 {
                let hay = format!("{}{token}{}", filler.repeat(offset), filler.repeat(3));
                assert_prefiltered_finds_what_plain_finds(&[FORMATS], hay.as_bytes(), false);
            }
        }
    }
    for first in [&tokens[0], &tokens[14]] {
        for token in &tokens {
            for gap in 0..24 {
                let hay = format!("{first}{}{token} {token}", "-".repeat(gap));
                assert_prefiltered_finds_what_plain_finds(&[FORMATS], hay.as_bytes(), false);
            }
        }
    }
}

/// What the one pass looks for: the format rules, the JWT header and the two escapes take
/// seven bytes and two pairs, which fit one 16-byte mask ([`crate::simd::AnchorSet`]). A
/// rule whose prefix needs more makes [`Anchors::new`] fail, and the guest's reviews with it:
/// this test says so first.
#[test]
fn the_one_pass_looks_for_seven_bytes_and_two_pairs() {
    let set = ANCHORS.set();
    let mut singles = set.singles.to_vec();
    singles.sort_unstable();
    singles.dedup();
    assert_eq!(singles, b"%-.AG\\_".to_vec());
    let mut pairs = set.pairs.to_vec();
    pairs.sort_unstable();
    pairs.dedup();
    assert_eq!(pairs, [*b"da", *b"ey"]);
}
