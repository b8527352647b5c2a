//! A whole-table bloom filter over user keys.
//!
//! ```text
//! bit array (m bits, m = max(64, n × bits_per_key) rounded up to bytes) | k: u8
//! ```
//! Probes use double hashing of xxh3-64 (`h1 + i·h2`), so one hash per key.
//! An unknown encoding (k = 0 or k > 30) answers "may contain", as LevelDB does
//! for filters it does not understand.

use xxhash_rust::xxh3::xxh3_64;

pub(crate) fn key_hash(user_key: &[u8]) -> u64 {
    xxh3_64(user_key)
}

/// Builds a filter from the hashes of the table's user keys.
pub(crate) fn build(hashes: &[u64], bits_per_key: u32) -> Vec<u8> {
    let k = ((f64::from(bits_per_key) * 0.69) as u32).clamp(1, 30);
    let bits = (hashes.len() * bits_per_key as usize).max(64);
    let bytes = bits.div_ceil(8);
    let bits = bytes * 8;
    let mut out = vec![0u8; bytes + 1];
    for &h in hashes {
        let (mut h1, h2) = (h as u32, (h >> 32) as u32 | 1);
        for _ in 0..k {
            let bit = h1 as usize % bits;
            out[bit / 8] |= 1 << (bit % 8);
            h1 = h1.wrapping_add(h2);
        }
    }
    out[bytes] = k as u8;
    out
}

/// True if the key with hash `h` may be in the set the filter was built from.
pub(crate) fn may_contain(filter: &[u8], h: u64) -> bool {
    let Some((&k, bitmap)) = filter.split_last() else {
        return true;
    };
    if k == 0 || k > 30 || bitmap.is_empty() {
        return true;
    }
    let bits = bitmap.len() * 8;
    let (mut h1, h2) = (h as u32, (h >> 32) as u32 | 1);
    for _ in 0..k {
        let bit = h1 as usize % bits;
        if bitmap[bit / 8] & (1 << (bit % 8)) == 0 {
            return false;
        }
        h1 = h1.wrapping_add(h2);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_low_false_positives() {
        let hashes: Vec<u64> = (0..10_000u32)
            .map(|i| key_hash(format!("k{i}").as_bytes()))
            .collect();
        let f = build(&hashes, crate::options::DEFAULT_BLOOM_BITS_PER_KEY);
        assert!(hashes.iter().all(|&h| may_contain(&f, h)));
        let fp = (0..10_000u32)
            .filter(|i| may_contain(&f, key_hash(format!("other{i}").as_bytes())))
            .count();
        assert!(fp < 300, "false positive rate too high: {fp}/10000");
    }

    #[test]
    fn unknown_encodings_may_contain() {
        assert!(may_contain(&[], 1));
        assert!(may_contain(&[0, 0, 0], 1));
        assert!(may_contain(&[0, 0, 31], 1));
    }
}
