//! One pass over a text that gives the candidates of several searches at once: every position
//! where one of their literal prefixes starts. The guest's prefilter ([`crate::search`]).
//!
//! In the guest, `regex-automata`'s prefilter for the 50-odd prefixes of the format rules is
//! an Aho-Corasick automaton (`aho-corasick` has no Teddy for wasm32), a table step for every
//! byte under the guest's fuel metering, and each of the other searches (`ey` for JWTs, `%`,
//! `\`) is a pass of its own: a pass over 64 KiB costs the guest 10–15 µs (BENCHMARKS.md
//! §13). Here each literal has an **anchor**: one byte at a fixed offset in it, or a pair of
//! consecutive bytes; one pass finds every anchor of every search, sixteen bytes at a time
//! ([`crate::simd`]), and each anchor found is checked against the literals anchored on its
//! byte (those whose byte before the anchor is the one in the text), which gives the position
//! where such a literal starts.
//!
//! The anchor of a literal, in this order of preference:
//!
//! 1. its first `_`, `-` or `.`: the separators of token formats (`ghp_`, `glpat-`, `SG.`),
//!    rarer in text than letters;
//! 2. else its first byte, if that is not an ASCII lower-case letter (`AKIA`, `GR1348941`,
//!    `%`, `\`);
//! 3. else its first two bytes, as a pair (`ey`, `da` of `dapi`); a literal of one lower-case
//!    letter, that letter.
//!
//! The format rules, the JWT header, and the percent and JSON escapes take 7 single bytes
//! (`_ - . A G % \`) and 2 pairs (`ey`, `da`). A rule whose literal needs more than
//! [`crate::simd::AnchorSet`] holds makes [`Anchors::new`] fail, and with it the reviewer in
//! the guest; the test `the_one_pass_looks_for_seven_bytes_and_two_pairs` fails first.
//!
//! The candidates are exactly the positions where one of a search's literals starts, in
//! increasing order (the tests compare them with a naive search), so a search that runs its
//! DFA at each finds what it would find trying every position.

use crate::simd::{AnchorSet, AnchorVectors, BLOCK};

/// How many blocks' masks [`Anchors::scan`] finds before it checks their anchors.
const CHUNK: usize = 64;

/// The separators a literal is anchored on first.
const SEPARATORS: [u8; 3] = [b'_', b'-', b'.'];

/// A literal of a search anchored on a byte: the search, the literal, the offset of the
/// anchor in it.
#[derive(Clone, Debug)]
struct Anchored {
    search: usize,
    literal: Box<[u8]>,
    offset: usize,
    /// The literal's first eight bytes as a little-endian word (zeros after a shorter
    /// literal), and the mask of those bytes: most literals are compared as one word.
    head: u64,
    head_mask: u64,
}

impl Anchored {
    fn new(search: usize, literal: &[u8], offset: usize) -> Anchored {
        let mut head = [0; 8];
        let mut mask = [0; 8];
        for (i, &b) in literal.iter().take(8).enumerate() {
            head[i] = b;
            mask[i] = 0xff;
        }
        Anchored {
            search,
            literal: literal.into(),
            offset,
            head: u64::from_le_bytes(head),
            head_mask: u64::from_le_bytes(mask),
        }
    }

    /// Whether the literal starts at `start` in `hay`: its first eight bytes compared as a
    /// word when eight bytes follow `start`, the rest (or all, near the end) byte by byte.
    #[inline]
    fn starts_at(&self, hay: &[u8], start: usize) -> bool {
        match hay.get(start..start + 8) {
            Some(word) => {
                let word = <[u8; 8]>::try_from(word).map_or(0, u64::from_le_bytes);
                word & self.head_mask == self.head
                    && (self.literal.len() <= 8
                        || hay
                            .get(start..)
                            .is_some_and(|rest| rest.starts_with(&self.literal)))
            }
            None => hay
                .get(start..)
                .is_some_and(|rest| rest.starts_with(&self.literal)),
        }
    }
}

/// The literals anchored on one byte, by the byte before the anchor: most anchors found
/// (a `.` ending a sentence, a `-` in a date) start none of the literals, and one look at the
/// byte before them says so.
#[derive(Clone, Debug)]
struct Group {
    /// For each byte, the index in `before` (plus one) of the literals that have it right
    /// before their anchor.
    by_before: [u8; 256],
    before: Vec<Vec<Anchored>>,
    /// The literals anchored on their first byte.
    first: Vec<Anchored>,
}

impl Group {
    fn new() -> Group {
        Group {
            by_before: [0; 256],
            before: Vec::new(),
            first: Vec::new(),
        }
    }

    fn push(&mut self, anchored: Anchored) -> Result<(), String> {
        let Some(before) = anchored
            .offset
            .checked_sub(1)
            .and_then(|i| anchored.literal.get(i).copied())
        else {
            self.first.push(anchored);
            return Ok(());
        };
        let k = match self.by_before[usize::from(before)] {
            0 => {
                self.before.push(Vec::new());
                self.by_before[usize::from(before)] = u8::try_from(self.before.len())
                    .map_err(|_| "more than 255 bytes before an anchor".to_owned())?;
                self.before.len() - 1
            }
            k => usize::from(k) - 1,
        };
        if let Some(list) = self.before.get_mut(k) {
            list.push(anchored);
        }
        Ok(())
    }

    /// The literals that may start at an anchor found at `at`: those anchored on their first
    /// byte, and those whose byte before the anchor is the one before `at`.
    fn candidates(&self, hay: &[u8], at: usize) -> impl Iterator<Item = &Anchored> {
        let before = at
            .checked_sub(1)
            .and_then(|i| hay.get(i))
            .map_or(0, |&b| usize::from(self.by_before[usize::from(b)]));
        let with_before = before
            .checked_sub(1)
            .and_then(|k| self.before.get(k))
            .map(Vec::as_slice)
            .unwrap_or_default();
        self.first.iter().chain(with_before)
    }
}

/// The anchors of the literal prefixes of several searches.
#[derive(Clone, Debug)]
pub(crate) struct Anchors {
    set: AnchorSet,
    /// For each byte, the index in `groups` (plus one) of the literals anchored on it.
    by_byte: [u8; 256],
    groups: Vec<Group>,
    searches: usize,
}

impl Anchors {
    /// The anchors of `searches`, each given by its literal prefixes (none empty; every
    /// match of the search starts with one of them). A literal that has another literal of
    /// the same search as a prefix is left out: where it starts, the other starts too.
    ///
    /// # Errors
    /// When a literal is empty, or the anchors do not fit an [`AnchorSet`].
    pub(crate) fn new(searches: &[Vec<&[u8]>]) -> Result<Anchors, String> {
        let mut singles: Vec<u8> = Vec::new();
        let mut pairs: Vec<[u8; 2]> = Vec::new();
        let mut by_byte = [0u8; 256];
        let mut groups: Vec<Group> = Vec::new();
        for (search, literals) in searches.iter().enumerate() {
            for (i, literal) in literals.iter().enumerate() {
                let shadowed = literals.iter().enumerate().any(|(j, other)| {
                    literal.starts_with(other) && (other.len() < literal.len() || j < i)
                });
                if shadowed {
                    continue;
                }
                let (offset, pair) = match literal.iter().position(|b| SEPARATORS.contains(b)) {
                    Some(offset) => (offset, None),
                    None => match **literal {
                        [] => return Err("an empty literal prefix".to_owned()),
                        [first, second, ..] if first.is_ascii_lowercase() => {
                            (0, Some([first, second]))
                        }
                        _ => (0, None),
                    },
                };
                let byte = literal[offset];
                match pair {
                    Some(pair) if !pairs.contains(&pair) => pairs.push(pair),
                    Some(_) => {}
                    None if !singles.contains(&byte) => singles.push(byte),
                    None => {}
                }
                let group = match by_byte[usize::from(byte)] {
                    0 => {
                        groups.push(Group::new());
                        by_byte[usize::from(byte)] = u8::try_from(groups.len())
                            .map_err(|_| "more than 255 anchor bytes".to_owned())?;
                        groups.len() - 1
                    }
                    k => usize::from(k) - 1,
                };
                if let Some(group) = groups.get_mut(group) {
                    group.push(Anchored::new(search, literal, offset))?;
                }
            }
        }
        let set = AnchorSet::new(&singles, &pairs).ok_or_else(|| {
            format!(
                "{} anchor bytes and {} pairs do not fit one pass",
                singles.len(),
                pairs.len()
            )
        })?;
        Ok(Anchors {
            set,
            by_byte,
            groups,
            searches: searches.len(),
        })
    }

    /// For each search, in the order given to [`Anchors::new`], every position in `hay` where
    /// one of its literals starts, increasing, into `starts` (whose lists are cleared first).
    pub(crate) fn scan(&self, hay: &[u8], starts: &mut Vec<Vec<usize>>) {
        starts.resize_with(self.searches, Vec::new);
        for list in starts.iter_mut() {
            list.clear();
        }
        let vectors = AnchorVectors::new(&self.set);
        let mut block = 0;
        // Sixteen positions at a time, while the byte after them (a pair's second) is there,
        // CHUNK blocks' masks at a time before any anchor is checked: a loop that calls
        // nothing keeps its vectors in registers (a call may clobber them all, and the guest's
        // compiler then reloads every one from the stack at every block).
        let mut masks = [0u16; CHUNK];
        loop {
            let first = block;
            let mut blocks = 0;
            for mask in &mut masks {
                let Some(window) = hay
                    .get(block..block + BLOCK + 1)
                    .and_then(|window| <&[u8; BLOCK + 1]>::try_from(window).ok())
                else {
                    break;
                };
                *mask = vectors.mask(window);
                block += BLOCK;
                blocks += 1;
            }
            for (i, &mask) in masks.iter().take(blocks).enumerate() {
                let mut mask = mask;
                while mask != 0 {
                    let at = first + i * BLOCK + mask.trailing_zeros() as usize;
                    mask &= mask - 1;
                    self.found(hay, at, starts);
                }
            }
            if blocks < CHUNK {
                break;
            }
        }
        // The last bytes (fewer than 17) in a block of their own, padded: an anchor the
        // padding makes up is checked against the text like any other, and starts nothing.
        let rest = hay.get(block..).unwrap_or_default();
        if !rest.is_empty() {
            let mut window = [0; BLOCK + 1];
            window[..rest.len()].copy_from_slice(rest);
            let mut mask = vectors.mask(&window);
            while mask != 0 {
                let at = block + mask.trailing_zeros() as usize;
                mask &= mask - 1;
                if at < hay.len() {
                    self.found(hay, at, starts);
                }
            }
        }
        for starts in starts.iter_mut() {
            // Each search's starts come nearly in order (anchors at different offsets).
            starts.sort_unstable();
            starts.dedup();
        }
    }

    /// Checks the literals anchored on the byte at `at`, an anchor.
    #[inline]
    fn found(&self, hay: &[u8], at: usize, starts: &mut [Vec<usize>]) {
        let Some(&byte) = hay.get(at) else { return };
        let group = usize::from(self.by_byte[usize::from(byte)]);
        let Some(group) = group.checked_sub(1).and_then(|k| self.groups.get(k)) else {
            return;
        };
        for anchored in group.candidates(hay, at) {
            if let Some(start) = at.checked_sub(anchored.offset)
                && anchored.starts_at(hay, start)
                && let Some(starts) = starts.get_mut(anchored.search)
            {
                starts.push(start);
            }
        }
    }

    /// The anchor set, for the tests.
    #[cfg(test)]
    pub(crate) fn set(&self) -> &AnchorSet {
        &self.set
    }
}
