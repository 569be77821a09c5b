//! Sixteen bytes at a time: which bytes of a block are in a set, as a 16-bit mask (bit `i` for
//! the block's byte `i`), with WebAssembly's `simd128` in the guest and plain code elsewhere.
//!
//! The guest's scans ask for more than one byte at a time (the anchors of several searches,
//! the bytes that may start a hidden character), which `memchr` has no routine for and which
//! the compiler does not vectorize by itself. The `simd128` functions of `core::arch::wasm32`
//! are safe to call when the feature is on (`host/build.rs` builds the reviewing guest with
//! it), and a block is read as two words, which the compiler turns into one `v128.load`. A
//! set of bytes is either compared byte by byte ([`AnchorSet`]) or looked up in two tables of
//! 16 entries on a byte's high and low four bits ([`ByteSet`]) with `i8x16.swizzle`, as
//! Teddy and simdjson do. Elsewhere (natively, and in a guest without `simd128`) the masks
//! are computed one byte at a time from the same definitions and tables, which the tests
//! check; the native reviews scan with `memchr` and `regex-automata`'s prefilters instead
//! ([`VECTORS`]).

/// Bytes a block holds.
pub(crate) const BLOCK: usize = 16;

/// Whether the masks are vector code, and the reviews' scans use them: in a guest built with
/// `simd128` (the reviewing variant of the default component; not the Cedar component).
pub(crate) const VECTORS: bool = cfg!(all(target_arch = "wasm32", target_feature = "simd128"));

/// A set of bytes as two tables on a byte's high and low four bits: a byte is in the set when
/// the entries of its two halves share a bit. Each distinct high half of the set's bytes has a
/// bit of its own, set in its `high` entry and in the `low` entries of the low halves it goes
/// with, so the lookup is exact; a set has at most eight distinct high halves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ByteSet {
    high: [u8; 16],
    low: [u8; 16],
}

impl ByteSet {
    /// The set of the bytes `member` accepts, or `None` if they have more than eight distinct
    /// high halves.
    pub(crate) const fn new(member: &[bool; 256]) -> Option<ByteSet> {
        let mut set = ByteSet {
            high: [0; 16],
            low: [0; 16],
        };
        let mut bits = 0u32;
        let mut high = 0;
        while high < 16 {
            let mut low = 0;
            while low < 16 {
                if member[high * 16 + low] {
                    if set.high[high] == 0 {
                        if bits == 8 {
                            return None;
                        }
                        set.high[high] = 1 << bits;
                        bits += 1;
                    }
                    set.low[low] |= set.high[high];
                }
                low += 1;
            }
            high += 1;
        }
        Some(set)
    }

    /// The set of `bytes`, as [`ByteSet::new`].
    #[cfg(test)]
    pub(crate) fn of(bytes: &[u8]) -> Option<ByteSet> {
        let mut member = [false; 256];
        for &b in bytes {
            member[usize::from(b)] = true;
        }
        ByteSet::new(&member)
    }

    /// Whether `b` is in the set.
    #[cfg_attr(
        all(target_arch = "wasm32", target_feature = "simd128"),
        expect(dead_code, reason = "the masks are vector code there")
    )]
    pub(crate) fn contains(&self, b: u8) -> bool {
        self.high[usize::from(b >> 4)] & self.low[usize::from(b & 0x0f)] != 0
    }

    /// The mask of the bytes of `block` in the set.
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    pub(crate) fn mask(&self, block: &[u8; BLOCK]) -> u16 {
        let mut mask = 0;
        for (i, &b) in block.iter().enumerate() {
            mask |= u16::from(self.contains(b)) << i;
        }
        mask
    }
}

/// A [`ByteSet::new`] of a constant set that fits (one that does not is every byte: a scan
/// then looks at more bytes, and misses none; the tests rule it out).
const fn fits(set: Option<ByteSet>) -> ByteSet {
    match set {
        Some(set) => set,
        None => ByteSet {
            high: [0xff; 16],
            low: [0xff; 16],
        },
    }
}

/// The bytes [`crate::hidden::may_hide`] accepts (seven distinct high halves).
pub(crate) const MAY_HIDE: ByteSet = fits(ByteSet::new(&crate::hidden::MAY_HIDE));

/// What [`Anchors`](crate::search::Anchors) look for: up to [`SINGLES`] single bytes and up
/// to [`PAIRS`] pairs of consecutive bytes (a pair is at the position of its first byte).
/// Compared one by one, not looked up in a [`ByteSet`]: measured in the guest, eight
/// comparisons of a block took less time than the two table lookups.
///
/// Unused places repeat a used byte or pair; with no single byte (or no pair) at all, the
/// places hold zeros, which a scan also finds: every anchor found is checked against the
/// literals anchored on its byte, so a made-up one starts nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AnchorSet {
    pub(crate) singles: [u8; SINGLES],
    pub(crate) pairs: [[u8; 2]; PAIRS],
}

/// Most single bytes an [`AnchorSet`] holds.
pub(crate) const SINGLES: usize = 8;
/// Most pairs an [`AnchorSet`] holds.
pub(crate) const PAIRS: usize = 2;

impl AnchorSet {
    /// The set of `singles` and `pairs`, or `None` if they do not fit.
    pub(crate) fn new(singles: &[u8], pairs: &[[u8; 2]]) -> Option<AnchorSet> {
        if singles.len() > SINGLES || pairs.len() > PAIRS {
            return None;
        }
        let mut all_singles = [singles.first().copied().unwrap_or_default(); SINGLES];
        all_singles[..singles.len()].copy_from_slice(singles);
        let mut all_pairs = [pairs.first().copied().unwrap_or_default(); PAIRS];
        all_pairs[..pairs.len()].copy_from_slice(pairs);
        Some(AnchorSet {
            singles: all_singles,
            pairs: all_pairs,
        })
    }

    /// Whether an anchor of the set is at `at` in `hay` (the definition the masks follow).
    #[cfg_attr(
        all(target_arch = "wasm32", target_feature = "simd128"),
        expect(dead_code, reason = "the masks are vector code there")
    )]
    pub(crate) fn at(&self, hay: &[u8], at: usize) -> bool {
        let Some(&byte) = hay.get(at) else {
            return false;
        };
        self.singles.contains(&byte)
            || self
                .pairs
                .iter()
                .any(|&[first, second]| byte == first && hay.get(at + 1) == Some(&second))
    }

    /// The mask of the anchors at the 16 positions of `window` but its last byte, which is
    /// only read as the second byte of a pair.
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    pub(crate) fn mask(&self, window: &[u8; BLOCK + 1]) -> u16 {
        let mut mask = 0;
        for i in 0..BLOCK {
            mask |= u16::from(self.at(window, i)) << i;
        }
        mask
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm {
    use super::{AnchorSet, BLOCK, ByteSet, PAIRS, SINGLES};
    use core::arch::wasm32::{
        u8x16_bitmask, u8x16_eq, u8x16_ne, u8x16_shr, u8x16_splat, u8x16_swizzle, u64x2, v128,
        v128_and, v128_or,
    };

    /// Sixteen bytes as a vector: the compiler makes the two words one `v128.load`.
    #[inline(always)]
    fn load(bytes: &[u8; BLOCK]) -> v128 {
        let (low, high) = bytes.split_at(BLOCK / 2);
        let word = |half: &[u8]| <[u8; 8]>::try_from(half).map_or(0, u64::from_le_bytes);
        u64x2(word(low), word(high))
    }

    impl ByteSet {
        /// The mask of the bytes of `block` in the set: the two tables looked up with
        /// `i8x16.swizzle`.
        #[inline(always)]
        pub(crate) fn mask(&self, block: &[u8; BLOCK]) -> u16 {
            let v = load(block);
            let high = u8x16_swizzle(load(&self.high), u8x16_shr(v, 4));
            let low = u8x16_swizzle(load(&self.low), v128_and(v, u8x16_splat(0x0f)));
            u8x16_bitmask(u8x16_ne(v128_and(high, low), u8x16_splat(0)))
        }
    }

    /// An [`AnchorSet`] as vectors, made once for a scan.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Anchors {
        singles: [v128; SINGLES],
        pairs: [(v128, v128); PAIRS],
    }

    impl Anchors {
        #[inline(always)]
        pub(crate) fn new(set: &AnchorSet) -> Anchors {
            Anchors {
                singles: set.singles.map(|b| u8x16_splat(b)),
                pairs: set
                    .pairs
                    .map(|[first, second]| (u8x16_splat(first), u8x16_splat(second))),
            }
        }

        /// As [`AnchorSet::mask`]. The comparisons are joined with `or` at most four at a
        /// time, and the masks of the groups with `|`: after a longer chain of `or`, the
        /// compiler sign-extends every lane again before `i8x16.bitmask` (two shifts, each
        /// several instructions on x86), though every lane already is 0 or 0xFF.
        #[inline(always)]
        pub(crate) fn mask(&self, window: &[u8; BLOCK + 1]) -> u16 {
            let [here @ .., _] = window;
            let [_, next @ ..] = window;
            let (here, next) = (load(here), load(next));
            let [s0, s1, s2, s3, s4, s5, s6, s7] =
                self.singles.map(|single| u8x16_eq(here, single));
            let singles = [
                v128_or(v128_or(s0, s1), v128_or(s2, s3)),
                v128_or(v128_or(s4, s5), v128_or(s6, s7)),
            ];
            let [p0, p1] = self
                .pairs
                .map(|(first, second)| v128_and(u8x16_eq(here, first), u8x16_eq(next, second)));
            u8x16_bitmask(singles[0]) | u8x16_bitmask(singles[1]) | u8x16_bitmask(v128_or(p0, p1))
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) use wasm::Anchors as AnchorVectors;

/// An [`AnchorSet`] made ready for many masks: the vectors of its tables and bytes in the
/// guest, the set itself elsewhere.
#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
#[derive(Clone, Copy, Debug)]
pub(crate) struct AnchorVectors<'a>(&'a AnchorSet);

#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
impl<'a> AnchorVectors<'a> {
    pub(crate) fn new(set: &'a AnchorSet) -> AnchorVectors<'a> {
        AnchorVectors(set)
    }

    pub(crate) fn mask(&self, window: &[u8; BLOCK + 1]) -> u16 {
        self.0.mask(window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every byte, 16 at a time, in the mask of `set`, beside `member`.
    fn assert_masks(set: &ByteSet, member: impl Fn(u8) -> bool) {
        for first in (0..=255u8).step_by(BLOCK) {
            let block: [u8; BLOCK] = std::array::from_fn(|i| first + i as u8);
            let mask = set.mask(&block);
            for (i, &b) in block.iter().enumerate() {
                assert_eq!(mask >> i & 1 == 1, member(b), "{b:#04x}");
                assert_eq!(set.contains(b), member(b), "{b:#04x}");
            }
        }
    }

    #[test]
    fn the_constant_sets_are_their_definitions() {
        assert_masks(&MAY_HIDE, crate::hidden::may_hide);
        assert!(ByteSet::new(&crate::hidden::MAY_HIDE).is_some());
    }

    proptest! {
        #[test]
        fn a_byte_set_is_its_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let highs: std::collections::BTreeSet<u8> = bytes.iter().map(|b| b >> 4).collect();
            match ByteSet::of(&bytes) {
                Some(set) => assert_masks(&set, |b| bytes.contains(&b)),
                None => prop_assert!(highs.len() > 8),
            }
        }

        #[test]
        fn an_anchor_mask_is_the_anchors_of_its_positions(
            window in proptest::array::uniform17(prop_oneof![
                Just(b'_'), Just(b'e'), Just(b'y'), Just(b'd'), Just(b'A'), any::<u8>()
            ]),
        ) {
            for set in [
                AnchorSet::new(b"_A%", &[*b"ey", *b"da"]).unwrap(),
                AnchorSet::new(b"_A%", &[]).unwrap(),
                AnchorSet::new(b"", &[*b"ey"]).unwrap(),
            ] {
                let mask = AnchorVectors::new(&set).mask(&window);
                for i in 0..BLOCK {
                    prop_assert_eq!(mask >> i & 1 == 1, set.at(&window, i), "{}", i);
                }
            }
        }
    }

    #[test]
    fn an_anchor_set_holds_eight_bytes_and_two_pairs() {
        assert!(AnchorSet::new(b"abcdefgh", &[*b"xy", *b"zw"]).is_some());
        assert!(AnchorSet::new(b"abcdefghi", &[]).is_none());
        assert!(AnchorSet::new(b"a", &[*b"xy", *b"zw", *b"uv"]).is_none());
        let set = AnchorSet::new(b"_", &[]).unwrap();
        assert!(set.at(b"_", 0) && !set.at(b"a", 0));
        // No pair: the places hold zeros, found like anchors and checked like them.
        assert!(set.at(b"\0\0", 0));
    }
}
