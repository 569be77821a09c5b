//! The pattern searches of the reviews, on DFAs compiled ahead of time.
//!
//! A policy component reviews every result in a fresh instance of its configured snapshot, so
//! nothing a review builds while it reads carries over to the next. A regex engine whose DFA is
//! built lazily (the `regex` crate's) therefore started each review with no DFA state, and
//! building the states took four times as long as the search itself (BENCHMARKS.md §13). Here
//! each search is a sparse DFA (`regex-automata`) compiled from its patterns before the crate
//! is built: the compiled DFAs and the literal prefixes of their patterns are checked in under
//! `src/search/` (the test `the_checked_in_searches_are_compiled_from_their_patterns` compiles
//! them afresh and compares, and `TOOLWARD_BLESS=1` rewrites them), and [`Search::new`] only
//! reads and validates them.
//!
//! A search finds what the `regex` crate finds for the alternation of its patterns, leftmost
//! first: a prefilter gives, in order, each position where a pattern's literal prefix starts
//! (a **candidate**), and the DFA, anchored there, tells whether a match starts there, where it
//! ends, and which pattern matched (the first of the list that does, as an alternation
//! prefers). The DFA is anchored, not unanchored, because the unanchored DFA of the 39 format
//! patterns, whose counted repetitions overlap, does not fit `regex-automata`'s limit on
//! states; anchored, it is 232 KB.
//!
//! The prefilter differs by where the reviews run, the candidates do not:
//!
//! - natively, each search has `regex-automata`'s prefilter on its short literal prefixes
//!   (`<name>.prefixes`): Teddy for the format rules' 47, `memchr` or `memmem` for one;
//! - in a guest with `simd128` ([`ONE_PASS`]), `aho-corasick` has no Teddy, and the prefilter
//!   for many prefixes would be an Aho-Corasick automaton, a table step for every byte under
//!   the guest's fuel metering; and every search's own prefilter would be a pass of its own
//!   over the text, each costing the guest about as much as the rest of the search. There the
//!   searches of [`ONE_PASS_SEARCHES`] take their candidates from **one pass** over the text,
//!   sixteen bytes at a time ([`Anchors`]), which looks for the anchors of their longer
//!   literal prefixes (`<name>.literals`) and gives each search every position where one of
//!   its literals starts.
//!
//! Both give every position where a literal prefix of the search starts, and a match starts
//! only at such a position, so a search finds the same matches either way as trying the DFA at
//! every position; the tests check the three against one another on the sample, on text made
//! of prefixes, tokens and anchors at every offset around the 16-byte blocks, and on arbitrary
//! bytes.

use regex_automata::dfa::{Automaton, StartKind, sparse};
use regex_automata::util::prefilter::Prefilter;
use regex_automata::{Anchored, Input, MatchKind, Span};

/// A search compiled ahead of time: its patterns, and what was compiled from them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Compiled {
    /// The name of its files under `src/search/`: `<name>.dfa`, `<name>.prefixes`,
    /// `<name>.literals`.
    pub(crate) name: &'static str,
    /// The patterns, in the `regex` crate's syntax without Unicode, the first preferred.
    #[cfg_attr(
        not(any(test, feature = "regex-baseline")),
        expect(dead_code, reason = "read by the test that compiles the searches")
    )]
    pub(crate) patterns: &'static [&'static str],
    /// The sparse DFA, anchored, leftmost first, serialized little-endian.
    pub(crate) dfa: &'static [u8],
    /// The literal prefixes of the patterns, one a line: every match starts with one of them.
    /// Short, as the `regex` crate picks them for its prefilter.
    pub(crate) prefixes: &'static str,
    /// Longer literal prefixes of the patterns, one a line: every match starts with one of
    /// them too. For the guest's one pass ([`Anchors`]).
    pub(crate) literals: &'static str,
}

/// The key and token formats and the private key begin line ([`crate::secrets::FORMAT_PATTERNS`]).
pub(crate) const FORMATS: Compiled = Compiled {
    name: "formats",
    patterns: &crate::secrets::FORMAT_PATTERNS,
    dfa: include_bytes!("search/formats.dfa"),
    prefixes: include_str!("search/formats.prefixes"),
    literals: include_str!("search/formats.literals"),
};

/// The end line of a private key block.
pub(crate) const PRIVATE_KEY_END: Compiled = Compiled {
    name: "private-key-end",
    patterns: &[crate::secrets::PRIVATE_KEY_END],
    dfa: include_bytes!("search/private-key-end.dfa"),
    prefixes: include_str!("search/private-key-end.prefixes"),
    literals: include_str!("search/private-key-end.literals"),
};

/// Where a JWT may start.
pub(crate) const JWT_HEADER: Compiled = Compiled {
    name: "jwt-header",
    patterns: &[crate::secrets::JWT_HEADER],
    dfa: include_bytes!("search/jwt-header.dfa"),
    prefixes: include_str!("search/jwt-header.prefixes"),
    literals: include_str!("search/jwt-header.literals"),
};

/// A percent escape.
pub(crate) const PERCENT_ESCAPE: Compiled = Compiled {
    name: "percent-escape",
    patterns: &[crate::encoded::PERCENT_ESCAPE],
    dfa: include_bytes!("search/percent-escape.dfa"),
    prefixes: include_str!("search/percent-escape.prefixes"),
    literals: include_str!("search/percent-escape.literals"),
};

/// A JSON escape that starts a JSON run.
pub(crate) const JSON_ESCAPE: Compiled = Compiled {
    name: "json-escape",
    patterns: &[crate::encoded::JSON_ESCAPE],
    dfa: include_bytes!("search/json-escape.dfa"),
    prefixes: include_str!("search/json-escape.prefixes"),
    literals: include_str!("search/json-escape.literals"),
};

/// A match: the bytes `[start, end)` and the index of the pattern that matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Match {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) pattern: usize,
}

/// A compiled search, ready to run.
#[derive(Clone, Debug)]
pub(crate) struct Search {
    dfa: sparse::DFA<&'static [u8]>,
    /// `regex-automata`'s prefilter on the literal prefixes: `memchr` or `memmem` for one,
    /// Teddy natively for many (it would be an Aho-Corasick automaton in the guest, which
    /// takes its candidates from [`Anchors`] instead). None for a search of
    /// [`ONE_PASS_SEARCHES`] when [`ONE_PASS`].
    prefilter: Option<Prefilter>,
    /// With `regex-baseline` ([`Search::on_regex`]): the `regex` crate's alternation of the
    /// patterns, which then searches instead of the DFA.
    #[cfg(feature = "regex-baseline")]
    regex: Option<regex::bytes::Regex>,
}

impl Search {
    /// Reads and validates `compiled`.
    ///
    /// # Errors
    /// A message naming the search if its DFA does not deserialize (corrupt, or serialized for
    /// the other byte order), is not anchored, has a byte that would stop a search, or its
    /// prefixes make no prefilter. The tests rule all of these out.
    pub(crate) fn new(compiled: &Compiled) -> Result<Search, String> {
        let name = compiled.name;
        let (dfa, _) = sparse::DFA::from_bytes(compiled.dfa)
            .map_err(|e| format!("the search `{name}` does not deserialize: {e}"))?;
        if dfa.start_kind() != StartKind::Anchored {
            return Err(format!("the search `{name}` is not anchored"));
        }
        // A search fails only on a quit byte, and a quit byte stops the DFA from every state,
        // so from the start state too: each byte is tried there once, here, so that
        // `find_at` cannot fail.
        for byte in 0..=u8::MAX {
            let input = Input::new(std::slice::from_ref(&byte)).anchored(Anchored::Yes);
            if dfa.try_search_fwd(&input).is_err() {
                return Err(format!("the search `{name}` stops at byte {byte}"));
            }
        }
        let one_pass = ONE_PASS && ONE_PASS_SEARCHES.iter().any(|one| one.name == name);
        let prefilter = if one_pass {
            None
        } else {
            Some(
                Prefilter::new(MatchKind::LeftmostFirst, &compiled.prefixes()).ok_or_else(
                    || format!("the prefixes of the search `{name}` make no prefilter"),
                )?,
            )
        };
        Ok(Search {
            dfa,
            prefilter,
            #[cfg(feature = "regex-baseline")]
            regex: None,
        })
    }

    /// `compiled`'s patterns on the `regex` crate: their alternation, a group for each, leftmost
    /// first, without Unicode (as the searches were before they were compiled ahead of time).
    /// The searches find the same matches (the tests compare them), by other means.
    ///
    /// # Errors
    /// As [`Search::new`], or a message naming the search if the `regex` crate refuses it.
    #[cfg(feature = "regex-baseline")]
    pub(crate) fn on_regex(compiled: &Compiled) -> Result<Search, String> {
        let mut search = Search::new(compiled)?;
        let alternation = compiled
            .patterns
            .iter()
            .map(|pattern| format!("({pattern})"))
            .collect::<Vec<_>>()
            .join("|");
        let regex = regex::bytes::RegexBuilder::new(&alternation)
            .unicode(false)
            .size_limit(32 << 20)
            .build()
            .map_err(|e| format!("the search `{}` on the regex crate: {e}", compiled.name))?;
        search.regex = Some(regex);
        Ok(search)
    }

    /// The leftmost-first match in `hay` that starts at `at` or later: as the `regex` crate's
    /// `find_at` would give for the alternation of the patterns, with the pattern that matched.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "the reviews search through cursors")
    )]
    pub(crate) fn find_at(&self, hay: &[u8], at: usize) -> Option<Match> {
        self.cursor(hay, None).find_at(at)
    }

    /// A search through `hay` for matches at positions that never decrease, trying the DFA at
    /// each of `candidates` (every position where a literal prefix starts, increasing, as
    /// [`Anchors::scan`] gives them) or, without, where the search's own prefilter says.
    pub(crate) fn cursor<'a>(
        &'a self,
        hay: &'a [u8],
        candidates: Option<&'a [usize]>,
    ) -> Cursor<'a> {
        Cursor {
            search: self,
            hay,
            candidates,
            #[cfg(feature = "regex-baseline")]
            locations: self
                .regex
                .as_ref()
                .map(regex::bytes::Regex::capture_locations),
        }
    }

    /// Whether a match starts at `start`, and where it ends.
    fn match_at(&self, hay: &[u8], start: usize) -> Option<Match> {
        let input = Input::new(hay).range(start..).anchored(Anchored::Yes);
        // `Search::new` checked that no byte stops the DFA, the only way it errs.
        let end = self.dfa.try_search_fwd(&input).ok().flatten()?;
        Some(Match {
            start,
            end: end.offset(),
            pattern: end.pattern().as_usize(),
        })
    }
}

impl Compiled {
    /// The short literal prefixes, as bytes.
    pub(crate) fn prefixes(&self) -> Vec<&'static [u8]> {
        self.prefixes.lines().map(str::as_bytes).collect()
    }

    /// The long literal prefixes, as bytes.
    pub(crate) fn literals(&self) -> Vec<&'static [u8]> {
        self.literals.lines().map(str::as_bytes).collect()
    }
}

/// A search through one text, for matches at positions that never decrease
/// ([`Search::cursor`]).
#[derive(Debug)]
pub(crate) struct Cursor<'a> {
    search: &'a Search,
    hay: &'a [u8],
    /// The candidates not yet passed, when they were given.
    candidates: Option<&'a [usize]>,
    /// The groups of a match of [`Search::on_regex`]'s alternation.
    #[cfg(feature = "regex-baseline")]
    locations: Option<regex::bytes::CaptureLocations>,
}

impl Cursor<'_> {
    /// The leftmost-first match that starts at `at` or later (as [`Search::find_at`]); `at`
    /// must not be less than in the previous call.
    pub(crate) fn find_at(&mut self, mut at: usize) -> Option<Match> {
        #[cfg(feature = "regex-baseline")]
        if let (Some(regex), Some(locations)) = (&self.search.regex, &mut self.locations) {
            let whole = regex.captures_read_at(locations, self.hay, at)?;
            let pattern = (1..locations.len()).find(|&group| locations.get(group).is_some())?;
            return Some(Match {
                start: whole.start(),
                end: whole.end(),
                pattern: pattern - 1,
            });
        }
        while at < self.hay.len() {
            let start = match &mut self.candidates {
                Some(candidates) => {
                    let passed = candidates.iter().take_while(|&&start| start < at).count();
                    *candidates = candidates.get(passed..).unwrap_or_default();
                    *candidates.first()?
                }
                None => match &self.search.prefilter {
                    Some(prefilter) => {
                        prefilter
                            .find(self.hay, Span::from(at..self.hay.len()))?
                            .start
                    }
                    // A search of the one pass run without its candidates (never, as the
                    // reviews run): every position is a candidate.
                    None => at,
                },
            };
            match self.search.match_at(self.hay, start) {
                Some(found) => return Some(found),
                None => at = start + 1,
            }
        }
        None
    }
}

/// The searches whose candidates one pass of [`Anchors`] finds, in this order: the format
/// rules, the JWT header, the percent and the JSON escapes (the private key end line is
/// looked for only after a begin line).
pub(crate) const ONE_PASS_SEARCHES: [Compiled; 4] =
    [FORMATS, JWT_HEADER, PERCENT_ESCAPE, JSON_ESCAPE];

/// The candidates of the searches of [`ONE_PASS_SEARCHES`] in one text, from one pass of
/// [`Anchors`]; or none, and each search uses its own prefilter.
#[derive(Clone, Debug, Default)]
pub(crate) struct Candidates(Option<Vec<Vec<usize>>>);

impl Candidates {
    /// The candidates in `hay`, when `anchors` are given.
    pub(crate) fn new(anchors: Option<&Anchors>, hay: &[u8]) -> Candidates {
        let mut candidates = Candidates::default();
        candidates.refill(anchors, hay);
        candidates
    }

    /// The candidates in `hay`, in the lists these held before.
    pub(crate) fn refill(&mut self, anchors: Option<&Anchors>, hay: &[u8]) {
        match anchors {
            Some(anchors) => anchors.scan(hay, self.0.get_or_insert_default()),
            None => self.0 = None,
        }
    }

    /// The candidates of the search at `index` in [`ONE_PASS_SEARCHES`].
    pub(crate) fn of(&self, index: usize) -> Option<&[usize]> {
        self.0.as_ref()?.get(index).map(Vec::as_slice)
    }
}

/// Whether the reviews take their candidates from one pass of [`Anchors`] (in a guest with
/// `simd128`, [`crate::simd::VECTORS`]) rather than from each search's prefilter: natively,
/// Teddy and `memchr`'s AVX2 routines are faster than one 16-byte pass that does it all.
pub(crate) const ONE_PASS: bool = crate::simd::VECTORS;

#[path = "search/anchors.rs"]
mod anchors;
pub(crate) use anchors::Anchors;

#[cfg(test)]
#[path = "search/tests.rs"]
mod tests;
