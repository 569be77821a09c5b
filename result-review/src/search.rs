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
//! first: a prefilter (`memchr`, or Aho-Corasick for many prefixes) gives, in order, each
//! position where a pattern's literal prefix starts, and the DFA, anchored there, tells whether
//! a match starts there, where it ends, and which pattern matched (the first of the list that
//! does, as an alternation prefers). The DFA is anchored, not unanchored, because the
//! unanchored DFA of the 39 format patterns, whose counted repetitions overlap, does not fit
//! `regex-automata`'s limit on states; anchored, it is 232 KB.

use regex_automata::dfa::{Automaton, StartKind, sparse};
use regex_automata::util::prefilter::Prefilter;
use regex_automata::{Anchored, Input, MatchKind, Span};

/// A search compiled ahead of time: its patterns, and what was compiled from them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Compiled {
    /// The name of its files under `src/search/`: `<name>.dfa`, `<name>.prefixes`.
    pub(crate) name: &'static str,
    /// The patterns, in the `regex` crate's syntax without Unicode, the first preferred.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "read by the test that compiles the searches")
    )]
    pub(crate) patterns: &'static [&'static str],
    /// The sparse DFA, anchored, leftmost first, serialized little-endian.
    pub(crate) dfa: &'static [u8],
    /// The literal prefixes of the patterns, one a line: every match starts with one of them.
    pub(crate) prefixes: &'static str,
}

/// The key and token formats and the private key begin line ([`crate::secrets::FORMAT_PATTERNS`]).
pub(crate) const FORMATS: Compiled = Compiled {
    name: "formats",
    patterns: &crate::secrets::FORMAT_PATTERNS,
    dfa: include_bytes!("search/formats.dfa"),
    prefixes: include_str!("search/formats.prefixes"),
};

/// The end line of a private key block.
pub(crate) const PRIVATE_KEY_END: Compiled = Compiled {
    name: "private-key-end",
    patterns: &[crate::secrets::PRIVATE_KEY_END],
    dfa: include_bytes!("search/private-key-end.dfa"),
    prefixes: include_str!("search/private-key-end.prefixes"),
};

/// Where a JWT may start.
pub(crate) const JWT_HEADER: Compiled = Compiled {
    name: "jwt-header",
    patterns: &[crate::secrets::JWT_HEADER],
    dfa: include_bytes!("search/jwt-header.dfa"),
    prefixes: include_str!("search/jwt-header.prefixes"),
};

/// A percent escape.
pub(crate) const PERCENT_ESCAPE: Compiled = Compiled {
    name: "percent-escape",
    patterns: &[crate::encoded::PERCENT_ESCAPE],
    dfa: include_bytes!("search/percent-escape.dfa"),
    prefixes: include_str!("search/percent-escape.prefixes"),
};

/// A JSON escape that starts a JSON run.
pub(crate) const JSON_ESCAPE: Compiled = Compiled {
    name: "json-escape",
    patterns: &[crate::encoded::JSON_ESCAPE],
    dfa: include_bytes!("search/json-escape.dfa"),
    prefixes: include_str!("search/json-escape.prefixes"),
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
    prefilter: Prefilter,
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
        let prefixes: Vec<&str> = compiled.prefixes.lines().collect();
        let prefilter = Prefilter::new(MatchKind::LeftmostFirst, &prefixes)
            .ok_or_else(|| format!("the prefixes of the search `{name}` make no prefilter"))?;
        Ok(Search { dfa, prefilter })
    }

    /// The leftmost-first match in `hay` that starts at `at` or later: as the `regex` crate's
    /// `find_at` would give for the alternation of the patterns, with the pattern that matched.
    pub(crate) fn find_at(&self, hay: &[u8], mut at: usize) -> Option<Match> {
        while at < hay.len() {
            let candidate = self.prefilter.find(hay, Span::from(at..hay.len()))?;
            let start = candidate.start;
            let input = Input::new(hay).range(start..).anchored(Anchored::Yes);
            // `Search::new` checked that no byte stops the DFA, the only way it errs.
            match self.dfa.try_search_fwd(&input).ok().flatten() {
                Some(end) => {
                    return Some(Match {
                        start,
                        end: end.offset(),
                        pattern: end.pattern().as_usize(),
                    });
                }
                None => at = start + 1,
            }
        }
        None
    }
}

#[cfg(test)]
#[path = "search/tests.rs"]
mod tests;
