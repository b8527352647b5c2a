//! A memtable's key filter: a blocked Bloom filter over the digests of the
//! keys it holds, so that a point lookup of a key the memtable does not
//! hold costs one cache line instead of a skiplist search (RocksDB's
//! `memtable_whole_key_filtering`, which puts a Bloom filter in the
//! memtable's arena for the same reason).
//!
//! Most lookups of a memtable miss it: a user's read of an older key, GC's
//! check of each record it reads (WiscKey (FAST '16), §3.3.3, looks every
//! record at the log's tail up in the LSM-tree), a flush's lookup of the
//! version an entry shadows. A search of a memtable of a million entries
//! (64 MiB of pointers) takes some twenty dependent cache misses; the
//! filter answers most misses with one.
//!
//! Each key sets [`PROBES`] bits in one 64-byte block chosen by its digest
//! (a blocked Bloom filter: Putze, Sanders and Singler, "Cache-, hash- and
//! space-efficient Bloom filters", WEA 2007). With the filter at 1/32 of
//! the write buffer's bytes ([`FILTER_RATIO`]) a memtable of 64-byte
//! entries has 16 bits a key, a false positive rate of about 0.1%; one of
//! kilobyte values, hundreds.
//!
//! Bits are set before the entry goes into the skiplist, with relaxed
//! atomics: a reader relies on an insert only once it is visible through
//! the sequence number published after it (or the writer queue), which
//! orders the bits as well as the entry.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bits set per key, in one block.
const PROBES: u32 = 6;

/// Bits a block holds (one cache line).
const BLOCK_BITS: u64 = 512;

/// The filter's bytes as a share of the write buffer's: 1/this.
pub(crate) const FILTER_RATIO: usize = 32;

/// A blocked Bloom filter whose bits may be set by several threads at once.
pub(crate) struct KeyFilter {
    blocks: Box<[[AtomicU64; 8]]>,
}

impl KeyFilter {
    /// A filter of about `bytes` (at least one block).
    pub(crate) fn new(bytes: usize) -> KeyFilter {
        let n = bytes.div_ceil(64).max(1);
        // Zeroed by the allocator: fresh pages stay unmapped until a key
        // sets a bit in them (a read-only open's memtable takes none).
        // SAFETY: n >= 1, and all-zero bytes are valid `AtomicU64`s.
        let blocks = unsafe { super::zeroed_slice::<[AtomicU64; 8]>(n) };
        KeyFilter { blocks }
    }

    /// A filter sized for a write buffer of `write_buffer_bytes`.
    pub(crate) fn for_write_buffer(write_buffer_bytes: usize) -> KeyFilter {
        KeyFilter::new(write_buffer_bytes / FILTER_RATIO)
    }

    /// The block `digest` maps to, and the bits it sets there.
    fn probes(&self, digest: u64) -> (&[AtomicU64; 8], impl Iterator<Item = u64>) {
        // The high half picks the block (a multiply-shift range reduction);
        // a second mix of the digest gives the bits in it, 9 at a time.
        let n = self.blocks.len() as u64;
        let block = &self.blocks[(((digest >> 32) * n) >> 32) as usize];
        let mixed = digest.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let bits = (0..PROBES).map(move |i| (mixed >> (64 - 9 * (i + 1))) % BLOCK_BITS);
        (block, bits)
    }

    /// Notes a key by its digest (`super::key_digest`).
    pub(crate) fn insert(&self, digest: u64) {
        let (block, bits) = self.probes(digest);
        for bit in bits {
            block[(bit / 64) as usize].fetch_or(1 << (bit % 64), Ordering::Relaxed);
        }
    }

    /// False only if no key with this digest was inserted.
    pub(crate) fn may_contain(&self, digest: u64) -> bool {
        let (block, mut bits) = self.probes(digest);
        bits.all(|bit| block[(bit / 64) as usize].load(Ordering::Relaxed) & (1 << (bit % 64)) != 0)
    }

    /// Bytes the filter takes.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.blocks.len() * 64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memtable::key_digest;

    #[test]
    fn never_denies_an_inserted_key() {
        let f = KeyFilter::new(4096);
        for i in 0..20_000u32 {
            f.insert(key_digest(format!("key{i}").as_bytes()));
        }
        for i in 0..20_000u32 {
            assert!(
                f.may_contain(key_digest(format!("key{i}").as_bytes())),
                "key{i}"
            );
        }
    }

    #[test]
    fn denies_most_keys_never_inserted() {
        // 16 bits a key, as a 64 MiB memtable of 64-byte entries has.
        let keys = 10_000u32;
        let f = KeyFilter::new(keys as usize * 2);
        for i in 0..keys {
            f.insert(key_digest(format!("key{i}").as_bytes()));
        }
        let false_positives = (0..100_000u32)
            .filter(|i| f.may_contain(key_digest(format!("other{i}").as_bytes())))
            .count();
        // About 0.1% expected; 1% would mean a broken hash mix.
        assert!(false_positives < 1_000, "{false_positives} of 100000");
    }

    #[test]
    fn a_tiny_filter_still_works() {
        let f = KeyFilter::new(0);
        assert_eq!(f.memory_bytes(), 64);
        assert!(!f.may_contain(key_digest(b"a")));
        f.insert(key_digest(b"a"));
        assert!(f.may_contain(key_digest(b"a")));
    }
}
