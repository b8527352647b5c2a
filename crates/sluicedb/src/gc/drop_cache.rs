//! DropCache (Scavenger, VLDB, §3.4.1): the keys whose versions flushes and
//! compactions drop, each with the sequence number of the version that
//! shadowed the dropped one (the paper's "sequence information").
//!
//! Two uses, both in the `table` layout:
//! - **hotness** (§3.4.2): a key in the cache is being overwritten or
//!   deleted, so flushes and GC write its value to a hot value table and
//!   the rest to cold ones, and GC prefers hot tables;
//! - **validity without I/O** (§3.4.2, last paragraph): a version of a key
//!   is dropped only when a newer version shadows it for every reader
//!   (compaction's rule), so every record of the key below the cached
//!   sequence is garbage. GC trusts an entry only when the shadowing version
//!   is in the view it judges in (cached sequence at or below the view's),
//!   so that the cache and the index lookup it replaces give the same
//!   answer, which the table layout's exact garbage accounting relies on.
//!   This holds only where a value record keeps
//!   the sequence of the index entry that points at it (inheritance edges,
//!   no pointer write-back); with write-back a relocation gives the index a
//!   new sequence while the record keeps its old one, and the rule would
//!   throw away live copies. The layout, not this cache, decides.
//!
//! The paper describes an LRU of keys in a partitioned hash table. This is
//! quick_cache's sharded, weight-bounded cache, whose policy (CLOCK-Pro
//! style: a key must be hit again to stay) keeps a key written once and
//! never again from pushing out the hot ones, which is what the cache is
//! for. A racing pair of `record`s may keep the smaller sequence, which
//! only makes the garbage rule see less garbage: never wrong.
//!
//! Size: `drop_cache_bytes` (default
//! [`DEFAULT_DROP_CACHE_BYTES`](crate::options::DEFAULT_DROP_CACHE_BYTES)). The
//! paper gives none; it argues the hot set is small and a key costs 24 B.
//! Here an entry costs its key plus [`ENTRY_OVERHEAD_BYTES`], so 8 MiB
//! holds about 110,000 24-byte keys: under Zipf(0.99) over 2 million keys
//! (our 2 GiB benchmark) the hottest 110,000 take about 80% of updates
//! (H(110k)/H(2M) = 12.2/15.1).

use std::sync::atomic::{AtomicU64, Ordering};

use quick_cache::sync::Cache;
use quick_cache::Weighter;

/// Bytes charged per entry beyond its key: the sequence, the key's `Vec`
/// header and the cache's own slot.
pub(crate) const ENTRY_OVERHEAD_BYTES: u64 = 48;

#[derive(Clone)]
struct KeyWeighter;

impl Weighter<Vec<u8>, u64> for KeyWeighter {
    fn weight(&self, key: &Vec<u8>, _: &u64) -> u64 {
        key.len() as u64 + ENTRY_OVERHEAD_BYTES
    }
}

/// Counters of a [`DropCache`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DropCacheStats {
    /// Dropped versions recorded.
    pub(crate) recorded: u64,
    /// Lookups that found the key.
    pub(crate) hits: u64,
    /// Lookups that did not.
    pub(crate) misses: u64,
    /// Keys held now, and their charged bytes.
    pub(crate) keys: u64,
    pub(crate) bytes: u64,
}

/// The cache; capacity 0 disables it (every lookup misses).
pub(crate) struct DropCache {
    cache: Option<Cache<Vec<u8>, u64, KeyWeighter>>,
    recorded: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl DropCache {
    pub(crate) fn new(capacity_bytes: usize) -> Self {
        let cache = (capacity_bytes > 0).then(|| {
            let items = (capacity_bytes as u64 / (24 + ENTRY_OVERHEAD_BYTES)).max(16) as usize;
            Cache::with_weighter(items, capacity_bytes as u64, KeyWeighter)
        });
        DropCache {
            cache,
            recorded: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// A flush or compaction dropped a version of `key` because the
    /// version at `seq` shadows it for every reader.
    pub(crate) fn record(&self, key: &[u8], seq: u64) {
        let Some(c) = &self.cache else {
            return;
        };
        self.recorded.fetch_add(1, Ordering::Relaxed);
        match c.get(key) {
            Some(old) if old >= seq => {}
            _ => c.insert(key.to_vec(), seq),
        }
    }

    /// The newest shadowing sequence cached for `key`.
    pub(crate) fn newest_dropped(&self, key: &[u8]) -> Option<u64> {
        let found = self.cache.as_ref().and_then(|c| c.get(key));
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// True when a key's record at `seq` is garbage by the cache alone for
    /// a reader at `view`, `newest` being the key's
    /// [`Self::newest_dropped`]: a version newer than `seq`, at or below
    /// `view`, shadows it for every reader (see the module's caveat on when
    /// a layout may ask). One lookup also says whether the key is hot.
    pub(crate) fn shadows(newest: Option<u64>, seq: u64, view: u64) -> bool {
        newest.is_some_and(|d| seq < d && d <= view)
    }

    /// True when `key` is hot: some version of it was dropped recently.
    pub(crate) fn is_hot(&self, key: &[u8]) -> bool {
        self.newest_dropped(key).is_some()
    }

    pub(crate) fn stats(&self) -> DropCacheStats {
        DropCacheStats {
            recorded: self.recorded.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            keys: self.cache.as_ref().map_or(0, |c| c.len() as u64),
            bytes: self.cache.as_ref().map_or(0, |c| c.weight()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_dropped_sequence_and_judges_by_it() {
        let c = DropCache::new(1 << 20);
        assert!(!c.is_hot(b"k"));
        c.record(b"k", 10);
        c.record(b"k", 4); // an older drop reported late
        assert_eq!(c.newest_dropped(b"k"), Some(10));
        assert!(DropCache::shadows(c.newest_dropped(b"k"), 9, 100));
        assert!(DropCache::shadows(c.newest_dropped(b"k"), 3, 10));
        assert!(
            !DropCache::shadows(c.newest_dropped(b"k"), 10, 100),
            "the shadowing version itself is not garbage"
        );
        assert!(
            !DropCache::shadows(c.newest_dropped(b"k"), 3, 9),
            "a shadow newer than the view does not count"
        );
        c.record(b"k", 12);
        assert!(DropCache::shadows(c.newest_dropped(b"k"), 11, 12));
        assert!(!DropCache::shadows(c.newest_dropped(b"other"), 1, 100));
        let s = c.stats();
        assert_eq!((s.recorded, s.keys), (3, 1));
        assert_eq!(s.bytes, 1 + ENTRY_OVERHEAD_BYTES);
        assert!(s.hits >= 6 && s.misses >= 2, "{s:?}");
    }

    #[test]
    fn bounded_by_its_bytes_and_off_at_zero() {
        let cap = 64 * (24 + ENTRY_OVERHEAD_BYTES as usize);
        let c = DropCache::new(cap);
        for i in 0..10_000u64 {
            c.record(format!("key-{i:020}").as_bytes(), i);
        }
        let s = c.stats();
        assert!(s.bytes <= cap as u64, "{s:?}");
        assert!(s.keys > 0 && s.keys <= 64, "{s:?}");
        let off = DropCache::new(0);
        off.record(b"k", 1);
        assert!(!off.is_hot(b"k"));
        assert_eq!(off.stats().keys, 0);
    }

    #[test]
    fn a_key_looked_up_often_survives_a_stream_of_one_time_keys() {
        // Recorded once, then hit every 50 inserts: 20,000 one-time keys
        // pass through room for 256, so insertion order alone (FIFO) would
        // have evicted it long ago.
        let cap = 256 * (24 + ENTRY_OVERHEAD_BYTES as usize);
        let c = DropCache::new(cap);
        let hot = b"hot-key-000000000000000000".to_vec();
        c.record(&hot, 1);
        for i in 0..20_000u64 {
            if i % 50 == 0 {
                assert!(c.is_hot(&hot), "evicted after {i} one-time keys");
            }
            c.record(format!("cold-{i:020}").as_bytes(), i);
        }
        assert!(c.is_hot(&hot));
    }
}
