//! Ground floor: ids and time. Fresh ULIDs (call ids, session ids) and the wall clock in
//! milliseconds, for every module that stamps or names something.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Crockford's base 32 alphabet, as ULIDs spell it.
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A fresh ULID: 48 bits of milliseconds since the Unix epoch, then 80 random bits, as 26
/// characters of Crockford's base 32. Sorts by time; unique with overwhelming probability.
/// The random bits come from `/dev/urandom`, or, where it cannot be read, from the standard
/// library's randomly keyed hasher mixed with a counter.
pub fn new_ulid() -> String {
    let time = u128::from(now_ms() & ((1 << 48) - 1));
    let random = random_80() & ((1u128 << 80) - 1);
    let value = (time << 80) | random;
    (0..26)
        .map(|index| {
            let shift = 125 - 5 * index;
            let digit = usize::try_from((value >> shift) & 31).unwrap_or(0);
            char::from(CROCKFORD.get(digit).copied().unwrap_or(b'0'))
        })
        .collect()
}

fn random_80() -> u128 {
    // `getrandom(2)`: one system call, no file opened per call.
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_ok() {
        return u128::from_le_bytes(bytes);
    }
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let state = std::collections::hash_map::RandomState::new();
    let word = |salt: u64| {
        let mut hasher = state.build_hasher();
        hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        hasher.write_u64(salt);
        hasher.write_u128(Instant::now().elapsed().as_nanos());
        hasher.finish()
    };
    (u128::from(word(1)) << 64) | u128::from(word(2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulids_are_26_crockford_characters_and_differ() {
        let a = new_ulid();
        let b = new_ulid();
        assert_eq!(a.len(), 26);
        assert!(a.bytes().all(|c| CROCKFORD.contains(&c)), "{a}");
        assert_ne!(a, b);
    }
}
