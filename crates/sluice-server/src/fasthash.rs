//! The hasher of the server's hot maps: a transaction's staged writes and
//! the records it read, the watched keys of a stripe, the pop bounds, the
//! command table.
//!
//! The standard library's SipHash-1-3 was 5-6% of the server's CPU under
//! pipelined `INCR` (perf: each staged key hashed two or three times),
//! where XXH3 (the `xxhash-rust` crate, already used for key hashes)
//! costs a fraction of it. The seed is drawn once per process from the
//! standard library's random keys, so a client cannot choose keys that
//! collide in advance; the maps keyed by client data are bounded anyway
//! (a transaction's keys, a client's watches).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// A `HashMap` with [`Fast`] hashing.
pub type FastMap<K, V> = HashMap<K, V, Fast>;
/// A `HashSet` with [`Fast`] hashing.
pub type FastSet<K> = HashSet<K, Fast>;

/// Builds [`FastHasher`]s from the process's seed.
#[derive(Debug, Clone, Copy)]
pub struct Fast(u64);

impl Default for Fast {
    fn default() -> Fast {
        static SEED: OnceLock<u64> = OnceLock::new();
        Fast(
            *SEED.get_or_init(|| {
                std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
            }),
        )
    }
}

impl BuildHasher for Fast {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(self.0)
    }
}

/// XXH3 over each byte string written, chained through the seed; integers
/// are mixed in with a multiply, and `finish` scrambles the state
/// (MurmurHash3's finalizer) so that every bit of it depends on every
/// input bit, which the table's use of the top and low bits needs.
#[derive(Debug, Clone, Copy)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0 = xxh3_64_with_seed(bytes, self.0);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(31);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_keys_hash_equal_and_neighbours_spread() {
        let b = Fast::default();
        assert_eq!(b.hash_one(b"key".to_vec()), b.hash_one(b"key".to_vec()));
        assert_eq!(b.hash_one(7u64), Fast::default().hash_one(7u64));
        // Consecutive integers and keys differing in one byte land in
        // different buckets of a small table and differ in the top bits.
        let mut low = HashSet::new();
        let mut top = HashSet::new();
        for i in 0..64u64 {
            for h in [b.hash_one(i), b.hash_one(format!("k{i}").into_bytes())] {
                low.insert(h & 1023);
                top.insert(h >> 57);
            }
        }
        assert!(low.len() > 100, "{} of 128 low-bit buckets", low.len());
        assert!(top.len() > 60, "{} of 128 top-bit tags", top.len());
    }

    #[test]
    fn maps_work_with_it() {
        let mut m: FastMap<Vec<u8>, usize> = FastMap::default();
        for i in 0..1000 {
            m.insert(format!("key{i}").into_bytes(), i);
        }
        assert!((0..1000).all(|i| m[format!("key{i}").as_bytes()] == i));
        assert!(!m.contains_key(&b"key1000"[..]));
    }
}
