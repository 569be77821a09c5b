//! Sixteen bytes at a time: which bytes of a block are in a set, as a 16-bit mask (bit `i` for
//! the block's byte `i`), with WebAssembly's `simd128` in the guest and plain code elsewhere.
//!
//! The guest's scans ask for more than one byte at a time (the bytes that may start a hidden
//! character), which `memchr` has no routine for and which the compiler does not vectorize by
//! itself. The `simd128` functions of `core::arch::wasm32` are safe to call when the feature
//! is on (`host/build.rs` builds the reviewing guest with it), and a block is read as two
//! words, which the compiler turns into one `v128.load`. A set of bytes is looked up in two
//! tables of 16 entries on a byte's high and low four bits ([`ByteSet`]) with
//! `i8x16.swizzle`, as Teddy and simdjson do. Elsewhere (natively, and in a guest without
//! `simd128`) the masks are computed one byte at a time from the same tables, which the tests
//! check ([`VECTORS`]).

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

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm {
    use super::{BLOCK, ByteSet};
    use core::arch::wasm32::{
        u8x16_bitmask, u8x16_ne, u8x16_shr, u8x16_splat, u8x16_swizzle, u64x2, v128, v128_and,
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
    }
}
