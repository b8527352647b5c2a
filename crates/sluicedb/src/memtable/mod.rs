//! The write buffer: recent writes in memory, ordered by internal key.
//!
//! [`WriteBuffer`] is the small trait the engine uses, so that a later write
//! buffer (LightKV's persistent buffer, seed 002) can take this one's place.
//! [`MemTable`] implements it on a lock-free skiplist: inserts come from the
//! single group-commit leader, reads from any thread concurrently.

use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_skiplist::SkipMap;

use crate::batch::WriteBatch;
use crate::error::Result;
use crate::iter::InternalIterator;
use crate::key::{self, InternalKey, Kind};

/// What a point lookup found in one source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The newest visible version is a value entry of `kind` with `value`.
    Found(Kind, Vec<u8>),
    /// The newest visible version is a deletion.
    Deleted,
    /// No visible version here; look further.
    Absent,
}

/// An in-memory buffer of recent writes.
pub(crate) trait WriteBuffer: Send + Sync {
    /// Inserts every operation of `batch`, the i-th with sequence `seq + i`.
    fn insert_batch(&self, batch: &WriteBatch, seq: u64);
    /// Newest version of `user_key` with sequence `<= snapshot`.
    fn get(&self, user_key: &[u8], snapshot: u64) -> Lookup;
    /// Sequence number of the newest entry for `user_key`, if any.
    fn newest_sequence(&self, user_key: &[u8]) -> Option<u64>;
    /// An iterator over all entries in internal-key order.
    fn iter(self: std::sync::Arc<Self>) -> Box<dyn InternalIterator>;
    /// Memory used, in bytes (keys, values and per-entry overhead).
    fn approximate_memory_bytes(&self) -> usize;
    /// Number of entries.
    fn len(&self) -> usize;
    /// True when nothing was inserted.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Approximate skiplist node overhead per entry (pointers, tower, headers).
const ENTRY_OVERHEAD_BYTES: usize = 64;

/// The skiplist memtable.
#[derive(Default)]
pub(crate) struct MemTable {
    map: SkipMap<InternalKey, Vec<u8>>,
    memory: AtomicUsize,
}

impl MemTable {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn add(&self, user_key: &[u8], seq: u64, kind: Kind, value: &[u8]) {
        let ikey = key::encode(user_key, seq, kind as u8);
        self.memory.fetch_add(
            ikey.len() + value.len() + ENTRY_OVERHEAD_BYTES,
            Ordering::Relaxed,
        );
        self.map.insert(InternalKey(ikey), value.to_vec());
    }
}

impl WriteBuffer for MemTable {
    fn insert_batch(&self, batch: &WriteBatch, seq: u64) {
        for (i, op) in batch.iter().enumerate() {
            // Batches are validated before they reach the memtable.
            let op = op.expect("validated batch");
            self.add(op.key, seq + i as u64, op.kind, op.value);
        }
    }

    fn get(&self, user_key: &[u8], snapshot: u64) -> Lookup {
        let seek = InternalKey(key::encode(user_key, snapshot, key::KIND_SEEK));
        let Some(e) = self.map.lower_bound(Bound::Included(&seek)) else {
            return Lookup::Absent;
        };
        let k = &e.key().0;
        if key::user_key(k) != user_key {
            return Lookup::Absent;
        }
        match Kind::from_u8(key::kind_byte(k)) {
            Some(Kind::Delete) => Lookup::Deleted,
            Some(kind) => Lookup::Found(kind, e.value().clone()),
            None => unreachable!("memtable holds only valid kinds"),
        }
    }

    fn newest_sequence(&self, user_key: &[u8]) -> Option<u64> {
        let seek = InternalKey(key::encode(user_key, key::MAX_SEQUENCE, key::KIND_SEEK));
        let e = self.map.lower_bound(Bound::Included(&seek))?;
        let k = &e.key().0;
        (key::user_key(k) == user_key).then(|| key::sequence(k))
    }

    fn iter(self: std::sync::Arc<Self>) -> Box<dyn InternalIterator> {
        Box::new(MemTableIter {
            current: None,
            table: self,
        })
    }

    fn approximate_memory_bytes(&self) -> usize {
        self.memory.load(Ordering::Relaxed)
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

type Entry<'a> = crossbeam_skiplist::map::Entry<'a, InternalKey, Vec<u8>>;

/// Cursor over a memtable, holding a skiplist entry so that stepping is O(1).
/// Entries are never removed and the map lives as long as `table`, so the
/// iterator stays valid while inserts go on.
struct MemTableIter {
    // SAFETY: `current` borrows from `*table`. It is declared first so it is
    // dropped before `table`, and `table` (an `Arc`) never moves the map, so
    // the borrow, stretched to 'static, never outlives what it points into.
    current: Option<Entry<'static>>,
    table: std::sync::Arc<MemTable>,
}

impl MemTableIter {
    fn map(&self) -> &'static SkipMap<InternalKey, Vec<u8>> {
        // SAFETY: see the field comment: the map outlives every entry we
        // keep, because the entries are dropped before the Arc that owns it.
        unsafe { &*(&self.table.map as *const SkipMap<InternalKey, Vec<u8>>) }
    }
}

impl InternalIterator for MemTableIter {
    fn valid(&self) -> bool {
        self.current.is_some()
    }
    fn seek_to_first(&mut self) {
        self.current = self.map().front();
    }
    fn seek_to_last(&mut self) {
        self.current = self.map().back();
    }
    fn seek(&mut self, target: &[u8]) {
        let t = InternalKey(target.to_vec());
        self.current = self.map().lower_bound(Bound::Included(&t));
    }
    fn next(&mut self) {
        self.current = self.current.take().and_then(|e| e.next());
    }
    fn prev(&mut self) {
        self.current = self.current.take().and_then(|e| e.prev());
    }
    fn key(&self) -> &[u8] {
        &self.current.as_ref().expect("valid iterator").key().0
    }
    fn value(&self) -> &[u8] {
        self.current.as_ref().expect("valid iterator").value()
    }
    fn status(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn get_respects_snapshots_and_deletes() {
        let m = MemTable::new();
        let mut b = WriteBatch::new();
        b.put("a", "1").put("a", "2").delete("a").put("b", "x");
        m.insert_batch(&b, 10);
        assert_eq!(m.get(b"a", 9), Lookup::Absent);
        assert_eq!(m.get(b"a", 10), Lookup::Found(Kind::Value, b"1".to_vec()));
        assert_eq!(m.get(b"a", 11), Lookup::Found(Kind::Value, b"2".to_vec()));
        assert_eq!(m.get(b"a", 12), Lookup::Deleted);
        assert_eq!(m.get(b"b", 100), Lookup::Found(Kind::Value, b"x".to_vec()));
        assert_eq!(m.get(b"c", 100), Lookup::Absent);
        assert!(m.approximate_memory_bytes() > 0);
    }

    #[test]
    fn iterator_walks_both_ways() {
        let m = Arc::new(MemTable::new());
        let mut b = WriteBatch::new();
        b.put("b", "1").put("a", "2").put("c", "3");
        m.insert_batch(&b, 1);
        let mut it = m.clone().iter();
        it.seek_to_first();
        let mut keys = vec![];
        while it.valid() {
            keys.push(key::user_key(it.key()).to_vec());
            it.next();
        }
        assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        it.seek_to_last();
        assert_eq!(key::user_key(it.key()), b"c");
        it.prev();
        assert_eq!(key::user_key(it.key()), b"b");
        it.seek(&key::encode(b"bb", 100, key::KIND_SEEK));
        assert_eq!(key::user_key(it.key()), b"c");
    }
}
