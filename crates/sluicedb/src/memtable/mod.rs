//! The write buffer: recent writes in memory, ordered by internal key.
//!
//! [`WriteBuffer`] is the small trait the engine uses, so that a later write
//! buffer (LightKV's persistent buffer, LightKV, ICDE) can take this one's place.
//! [`MemTable`] implements it on an arena skiplist ([`skiplist`]): inserts
//! come from the group-commit leader (and a helper for GC's large
//! relocation batches), reads from any thread concurrently.

mod filter;
mod point;
mod skiplist;

pub(crate) use filter::KeyFilter;

use point::{PointIndex, Probe};
pub(crate) use skiplist::BlockPool;
use skiplist::{Entry, Hint, SkipList, Splice};

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A boxed slice of `n` `T`s in memory the allocator zeroed: fresh pages
/// stay unmapped until something is stored in them (the key filter's and
/// the point index's tables, most of which a small memtable never
/// touches).
///
/// # Safety
/// All-zero bytes must be a valid `T`, and `n` and `T` not zero-sized.
unsafe fn zeroed_slice<T>(n: usize) -> Box<[T]> {
    let layout = std::alloc::Layout::array::<T>(n).expect("table size");
    debug_assert!(layout.size() > 0);
    // SAFETY: the layout's size is not zero (the caller's promise); the
    // box owns memory the global allocator gave with the layout of `[T]`
    // of length n, all-zero, which the caller promises is valid, and frees
    // it with that layout.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<T>();
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n))
    }
}

use parking_lot::Mutex;
use smallvec::SmallVec;
use xxhash_rust::xxh3::xxh3_64;

use crate::batch::WriteBatch;
use crate::error::Result;
use crate::iter::InternalIterator;
use crate::key::{self, Kind};
use crate::pointer::ValuePointer;

/// What a point lookup found in one source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The newest visible version is a value entry of `kind` with `value`,
    /// written at the sequence number that follows (0 where a shape
    /// answers without reading the entry).
    Found(Kind, Vec<u8>, u64),
    /// The newest visible version is a deletion.
    Deleted,
    /// No visible version here; look further.
    Absent,
}

/// An in-memory buffer of recent writes.
pub(crate) trait WriteBuffer: Send + Sync {
    /// Inserts every operation of `batch`, the i-th with sequence `seq + i`.
    fn insert_batch(&self, batch: &WriteBatch, seq: u64);
    /// Inserts GC's relocations as [`WriteBuffer::insert_batch`] does, but
    /// not as shadow candidates: the versions they shadow point into
    /// victims GC frees whole, so their flush counts no garbage. With
    /// `counted` each entry carries [`key::SHADOW_COUNTED`], so that the
    /// flush does not look up the version it shadows either (a layout
    /// whose counts die with the freed files: `GcProfile::frees_whole`).
    fn insert_relocations(&self, batch: &WriteBatch, seq: u64, counted: bool);
    /// Newest version of `user_key` with sequence `<= snapshot`.
    fn get(&self, user_key: &[u8], snapshot: u64) -> Lookup;
    /// [`WriteBuffer::get`] of each of `keys` (ascending, repeats
    /// allowed) whose answer in `found` (one per key) is still
    /// [`Lookup::Absent`]; the others were answered by a newer source.
    fn get_sorted(&self, keys: &[&[u8]], snapshot: u64, found: &mut [Lookup]) {
        for (key, f) in keys.iter().zip(found) {
            if *f == Lookup::Absent {
                *f = self.get(key, snapshot);
            }
        }
    }
    /// Sequence number of the newest entry for `user_key`, if any.
    fn newest_sequence(&self, user_key: &[u8]) -> Option<u64>;
    /// Adds to `out` the [`key_digest`] of every key with an entry newer
    /// than `seq`, and returns true; false (and `out` unusable) for a
    /// buffer that does not keep its keys' digests.
    fn digests_newer_than(&self, seq: u64, out: &mut DigestSet) -> bool;
    /// The largest sequence number inserted (0 when empty).
    fn last_sequence(&self) -> u64;
    /// An iterator over all entries in internal-key order.
    fn iter(self: std::sync::Arc<Self>) -> Box<dyn InternalIterator>;
    /// Memory used, in bytes (keys, values and per-entry overhead).
    fn approximate_memory_bytes(&self) -> usize;
    /// Bytes of its key filter, apart from the memory above.
    fn filter_bytes(&self) -> usize;
    /// The writes that may shadow older versions.
    fn shadow_candidates(&self) -> ShadowCandidates;
    /// Bytes of keys and whole values (not pointers) this buffer holds as
    /// the newest version of their key within it: live data that only the
    /// buffer and its journal hold until the flush (the space limit counts
    /// it as live, `Core::measure_space`).
    fn held_live_bytes(&self) -> u64;
    /// Number of entries.
    fn len(&self) -> usize;
    /// True when nothing was inserted.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Relocation batches of at least this many entries are inserted on two
/// threads ([`MemTable::insert_relocations`]).
pub(crate) const PARALLEL_RELOCATIONS: usize = 4096;

/// An internal key built on the stack for a search (user keys up to 56
/// bytes need no allocation).
fn seek_key(user_key: &[u8], seq: u64, kind: u8) -> SmallVec<[u8; 64]> {
    let mut k = SmallVec::with_capacity(user_key.len() + key::TRAILER_LEN);
    k.extend_from_slice(user_key);
    k.extend_from_slice(&key::pack_trailer(seq, kind).to_le_bytes());
    k
}

/// What a write buffer's writes may have made garbage of: each overwrite
/// or delete shadows an older version, whose value is counted as garbage
/// only when the buffer is flushed (`docs/design.md`, "Counting at
/// flush"). The engine estimates from these how much garbage a buffer
/// hides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ShadowCandidates {
    /// Puts and the bytes of their values (for a pointer, the record it
    /// points at).
    pub(crate) puts: u64,
    pub(crate) value_bytes: u64,
    pub(crate) deletes: u64,
}

impl ShadowCandidates {
    /// The bytes these writes would make garbage if every one shadowed a
    /// value: a delete counts as a put of the mean value size (of these
    /// puts, or `mean_value_bytes` when there are none).
    pub(crate) fn bytes(&self, mean_value_bytes: u64) -> u64 {
        let mean = match self.puts {
            0 => mean_value_bytes,
            n => self.value_bytes / n,
        };
        self.value_bytes + self.deletes * mean
    }
}

/// A key's digest in a memtable's key log ([`MemTable::tracking_keys`]).
pub(crate) fn key_digest(user_key: &[u8]) -> u64 {
    xxh3_64(user_key)
}

/// A set of [`key_digest`]s. They are hashes already, so the set uses
/// them as they are.
pub(crate) type DigestSet = HashSet<u64, BuildHasherDefault<DigestHasher>>;

/// The identity hasher of [`DigestSet`].
#[derive(Default)]
pub(crate) struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Bytes one entry of the key log takes: digest and sequence number.
const KEY_LOG_ENTRY_BYTES: usize = 16;

/// The skiplist memtable.
#[derive(Default)]
pub(crate) struct MemTable {
    map: SkipList,
    /// With [`MemTable::tracking_keys`]: (key digest, sequence) of every
    /// entry, in insertion order. GC's relocation commit asks which keys
    /// were written since its view (`Core::commit_relocations`); a set of
    /// these answers for most keys without a skiplist search, which cost
    /// about 1.5 us a key in cache misses and held the writer queue for
    /// about a second a phase (2 GiB hashkv update run, 2026-11-25).
    key_log: Option<Mutex<Vec<(u64, u64)>>>,
    /// With [`MemTable::with_key_filter`]: the keys it holds, so that a
    /// lookup of one it does not hold skips the skiplist search.
    filter: Option<KeyFilter>,
    /// With [`MemTable::with_key_filter`]: the newest entry of each key,
    /// so that a lookup of one it holds skips the search too.
    index: Option<PointIndex>,
    /// Bytes of the key log (the entries' memory is the skiplist's arena).
    key_log_bytes: AtomicUsize,
    puts: AtomicU64,
    value_bytes: AtomicU64,
    deletes: AtomicU64,
    /// Key and value bytes of whole-value entries inserted.
    held_bytes: AtomicU64,
    /// Of those, the bytes a newer entry of the same key in this buffer
    /// shadows.
    held_shadowed_bytes: AtomicU64,
    /// The largest sequence number inserted.
    last_seq: AtomicU64,
}

impl MemTable {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A memtable that also keeps a log of its keys' digests
    /// ([`WriteBuffer::digests_newer_than`]): for engines whose GC commits
    /// relocations. 16 bytes an entry, counted in its memory.
    pub(crate) fn tracking_keys() -> Self {
        MemTable {
            key_log: Some(Mutex::new(Vec::new())),
            ..Self::default()
        }
    }

    /// The same memtable with a key filter and a point index sized for a
    /// write buffer of `write_buffer_bytes` (`filter`, `point`; outside
    /// [`WriteBuffer::approximate_memory_bytes`], a fixed 1/32 and 1/16
    /// more, the index's pages touched only as keys claim its slots).
    pub(crate) fn with_key_filter(self, write_buffer_bytes: usize) -> Self {
        MemTable {
            filter: Some(KeyFilter::for_write_buffer(write_buffer_bytes)),
            index: Some(PointIndex::for_write_buffer(write_buffer_bytes)),
            ..self
        }
    }

    /// The same (empty) memtable with its arenas' blocks from `pool`
    /// ([`BlockPool`]).
    pub(crate) fn with_block_pool(self, pool: std::sync::Arc<BlockPool>) -> Self {
        debug_assert_eq!(self.map.len(), 0, "a pool for an empty memtable");
        MemTable {
            map: SkipList::with_pool(Some(pool)),
            ..self
        }
    }

    /// One write (tests; the engine inserts batches).
    #[cfg(test)]
    fn add(&self, user_key: &[u8], seq: u64, kind: Kind, value: &[u8]) {
        let op = crate::batch::BatchOp {
            kind,
            key: user_key,
            value,
        };
        self.add_ops([op], seq, true, false);
    }

    /// What the key filter and the point index say of `user_key` at
    /// `snapshot`: `None` when they cannot say, and a search must.
    fn point_lookup(&self, user_key: &[u8], snapshot: u64) -> Option<Lookup> {
        if self.filter.is_none() && self.index.is_none() {
            return None;
        }
        let digest = key_digest(user_key);
        if (self.filter.as_ref()).is_some_and(|f| !f.may_contain(digest)) {
            return Some(Lookup::Absent);
        }
        let raw = match self.index.as_ref()?.find(digest) {
            Probe::Absent => return Some(Lookup::Absent),
            Probe::Unknown => return None,
            Probe::At(raw) => raw,
        };
        // SAFETY: the index holds only entries of this memtable's list
        // (`add_ops`).
        let mut e = unsafe { self.map.entry_at(raw) };
        if key::user_key(e.key()) != user_key {
            // Another key with the same digest.
            return None;
        }
        // The key's versions follow its newest, newest first. The walk
        // stops at the key's last version: past it come other keys, and a
        // read at a snapshot older than all of them (GC's lookups while
        // writes go on) would otherwise step through the rest of the list.
        while key::sequence(e.key()) > snapshot {
            match e.next() {
                Some(next) if key::user_key(next.key()) == user_key => e = next,
                _ => return Some(Lookup::Absent),
            }
        }
        Some(lookup_in(user_key, Some(e)))
    }

    /// Adds every operation of `batch`, the i-th at `seq + i`
    /// (`candidate` and `counted` as for [`MemTable::add_entry`]).
    fn insert_ops(&self, batch: &WriteBatch, seq: u64, candidate: bool, counted: bool) {
        // Batches are validated before they reach the memtable.
        let ops = batch.iter().map(|op| op.expect("validated batch"));
        self.add_ops(ops, seq, candidate, counted);
        self.inserted_up_to(seq, batch.len());
    }

    /// Adds `ops`, the i-th at `seq + i`. Keys go into the skiplist in
    /// key order, each search starting from where the last one's path
    /// parted from its own ([`SkipList::insert_hinted`]), unless a key
    /// comes twice: then in batch order, each from the top (the shadow
    /// counts of [`MemTable::add_entry`] expect each key's versions
    /// oldest first).
    fn add_ops<'b>(
        &self,
        ops: impl IntoIterator<Item = crate::batch::BatchOp<'b>>,
        seq: u64,
        candidate: bool,
        counted: bool,
    ) {
        let ops: SmallVec<[(u64, crate::batch::BatchOp<'b>); 16]> = (ops.into_iter().enumerate())
            .map(|(i, op)| (seq + i as u64, op))
            .collect();
        // One hash a key serves the key log, the filter and the index.
        let hashed = self.key_log.is_some() || self.filter.is_some() || self.index.is_some();
        let digests: SmallVec<[(u64, u64); 16]> = if hashed {
            ops.iter().map(|(s, op)| (key_digest(op.key), *s)).collect()
        } else {
            SmallVec::new()
        };
        // Before the entries: see `filter` on why that suffices.
        if let Some(f) = &self.filter {
            for &(d, _) in &digests {
                f.insert(d);
            }
        }
        let mut order: SmallVec<[usize; 16]> = (0..ops.len()).collect();
        order.sort_unstable_by_key(|&i| ops[i].1.key);
        let repeats = order.windows(2).any(|w| ops[w[0]].1.key == ops[w[1]].1.key);
        // Each key's hint, by batch position (none for a single op).
        let mut hints: SmallVec<[Option<Hint<'_>>; 16]> = smallvec::smallvec![None; ops.len()];
        if ops.len() >= 2 {
            let keys: SmallVec<[&[u8]; 16]> = order.iter().map(|&i| ops[i].1.key).collect();
            for (&i, h) in order.iter().zip(self.map.warm(&keys)) {
                hints[i] = Some(h);
            }
        }
        let splice = &mut self.map.splice();
        for j in 0..ops.len() {
            let i = if repeats { j } else { order[j] };
            if repeats {
                *splice = self.map.splice();
            }
            let (s, op) = ops[i];
            let entry = self.add_entry(
                (splice, hints[i]),
                op.key,
                s,
                op.kind,
                op.value,
                candidate,
                counted,
            );
            if let Some(index) = &self.index {
                let raw = entry.as_raw();
                index.insert(digests[i].0, raw, |other| {
                    // SAFETY: the index holds only entries of this list.
                    let other = unsafe { self.map.entry_at(other) }.key();
                    key::user_key(other) != op.key || key::sequence(other) > s
                });
            }
        }
        if let Some(log) = &self.key_log {
            self.key_log_bytes
                .fetch_add(digests.len() * KEY_LOG_ENTRY_BYTES, Ordering::Relaxed);
            log.lock().extend(digests);
        }
    }

    /// Notes the `n` sequence numbers from `seq` as inserted.
    fn inserted_up_to(&self, seq: u64, n: usize) {
        let last = seq + (n as u64).saturating_sub(1);
        self.last_seq.fetch_max(last, Ordering::Release);
    }

    /// Adds an entry (its key already in the key filter, [`MemTable::add_ops`]);
    /// `candidate`: it may shadow a version whose value its flush counts as
    /// garbage ([`ShadowCandidates`]).
    /// `counted`: flagged [`key::SHADOW_COUNTED`] (relocations,
    /// [`WriteBuffer::insert_relocations`]).
    #[expect(clippy::too_many_arguments, reason = "one entry's fields and flags")]
    fn add_entry(
        &self,
        (splice, hint): (&mut Splice<'_>, Option<Hint<'_>>),
        user_key: &[u8],
        seq: u64,
        kind: Kind,
        value: &[u8],
        candidate: bool,
        counted: bool,
    ) -> Entry<'_> {
        let flags = if counted { key::SHADOW_COUNTED } else { 0 };
        let trailer = key::pack_trailer(seq, kind as u8 | flags);
        let entry = self
            .map
            .insert_hinted(splice, hint, user_key, trailer, value);
        // The next entry in internal order is the key's previous version in
        // this buffer, if it has one: whole, it is live no more.
        if let Some(prev) = entry.next() {
            let k = prev.key();
            if key::user_key(k) == user_key && key::kind_byte(k) == Kind::Value as u8 {
                self.held_shadowed_bytes.fetch_add(
                    (user_key.len() + prev.value().len()) as u64,
                    Ordering::Relaxed,
                );
            }
        }
        if kind == Kind::Value {
            self.held_bytes
                .fetch_add((user_key.len() + value.len()) as u64, Ordering::Relaxed);
        }
        if candidate {
            self.count_candidate(kind, value);
        }
        entry
    }

    /// Counts a write that may shadow an older version ([`ShadowCandidates`]).
    fn count_candidate(&self, kind: Kind, value: &[u8]) {
        let value_bytes = match kind {
            Kind::Delete => {
                self.deletes.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Kind::Value => value.len() as u64,
            Kind::ValuePointer => {
                ValuePointer::decode(value).map_or(0, |p| u64::from(p.record_len))
            }
        };
        self.puts.fetch_add(1, Ordering::Relaxed);
        self.value_bytes.fetch_add(value_bytes, Ordering::Relaxed);
    }
}

impl WriteBuffer for MemTable {
    fn insert_batch(&self, batch: &WriteBatch, seq: u64) {
        self.insert_ops(batch, seq, true, false);
    }

    /// A large batch is inserted by this thread and one more, half each:
    /// the writer queue waits for it (`Core::commit_relocations`), and the
    /// skiplist takes concurrent inserts.
    fn insert_relocations(&self, batch: &WriteBatch, seq: u64, counted: bool) {
        if batch.len() < PARALLEL_RELOCATIONS {
            return self.insert_ops(batch, seq, false, counted);
        }
        // Batches are validated before they reach the memtable.
        let ops: Vec<_> = batch
            .iter()
            .map(|op| op.expect("validated batch"))
            .collect();
        crate::parallel::in_parts(&ops, 2, |half, at| {
            self.add_ops(half.iter().copied(), seq + at as u64, false, counted)
        });
        self.inserted_up_to(seq, batch.len());
    }

    fn last_sequence(&self) -> u64 {
        self.last_seq.load(Ordering::Acquire)
    }

    fn get(&self, user_key: &[u8], snapshot: u64) -> Lookup {
        if let Some(found) = self.point_lookup(user_key, snapshot) {
            return found;
        }
        let seek = seek_key(user_key, snapshot, key::KIND_SEEK);
        lookup_in(user_key, self.map.lower_bound(&seek))
    }

    /// One descent shared by neighbouring keys: each search starts where
    /// the last one's path parted from its own ([`SkipList::lower_bound_with`]).
    fn get_sorted(&self, keys: &[&[u8]], snapshot: u64, found: &mut [Lookup]) {
        let splice = &mut self.map.splice();
        for (&user_key, f) in keys.iter().zip(found) {
            if *f != Lookup::Absent {
                continue;
            }
            if let Some(found) = self.point_lookup(user_key, snapshot) {
                *f = found;
                continue;
            }
            let seek = seek_key(user_key, snapshot, key::KIND_SEEK);
            *f = lookup_in(user_key, self.map.lower_bound_with(splice, &seek));
        }
    }

    fn newest_sequence(&self, user_key: &[u8]) -> Option<u64> {
        match self.point_lookup(user_key, key::MAX_SEQUENCE) {
            Some(Lookup::Absent) => return None,
            Some(Lookup::Deleted) | None => {}
            Some(Lookup::Found(.., seq)) => return Some(seq),
        }
        let seek = seek_key(user_key, key::MAX_SEQUENCE, key::KIND_SEEK);
        let e = self.map.lower_bound(&seek)?;
        let k = e.key();
        (key::user_key(k) == user_key).then(|| key::sequence(k))
    }

    fn digests_newer_than(&self, seq: u64, out: &mut DigestSet) -> bool {
        let Some(log) = &self.key_log else {
            return false;
        };
        out.extend(
            (log.lock().iter())
                .filter(|&&(_, s)| s > seq)
                .map(|&(digest, _)| digest),
        );
        true
    }

    fn iter(self: std::sync::Arc<Self>) -> Box<dyn InternalIterator> {
        Box::new(MemTableIter {
            current: None,
            table: self,
        })
    }

    fn approximate_memory_bytes(&self) -> usize {
        // Not the key filter: its size is fixed from the start (1/32 of the
        // write buffer), and a memtable that counted it was judged worth an
        // early switch while nearly empty, and switched for ever
        // (`Core::early_switch_due`).
        self.map.memory_bytes() + self.key_log_bytes.load(Ordering::Relaxed)
    }

    /// The key filter's and the point index's.
    fn filter_bytes(&self) -> usize {
        self.filter.as_ref().map_or(0, KeyFilter::memory_bytes)
            + self.index.as_ref().map_or(0, PointIndex::memory_bytes)
    }

    fn shadow_candidates(&self) -> ShadowCandidates {
        ShadowCandidates {
            puts: self.puts.load(Ordering::Relaxed),
            value_bytes: self.value_bytes.load(Ordering::Relaxed),
            deletes: self.deletes.load(Ordering::Relaxed),
        }
    }

    fn held_live_bytes(&self) -> u64 {
        self.held_bytes
            .load(Ordering::Relaxed)
            .saturating_sub(self.held_shadowed_bytes.load(Ordering::Relaxed))
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

/// What the entry a search for `user_key` landed on says of it.
fn lookup_in(user_key: &[u8], entry: Option<Entry<'_>>) -> Lookup {
    let Some(e) = entry else {
        return Lookup::Absent;
    };
    let k = e.key();
    if key::user_key(k) != user_key {
        return Lookup::Absent;
    }
    match Kind::from_u8(key::kind_byte(k)) {
        Some(Kind::Delete) => Lookup::Deleted,
        Some(kind) => Lookup::Found(kind, e.value().to_vec(), key::sequence(k)),
        None => unreachable!("memtable holds only valid kinds"),
    }
}

/// Cursor over a memtable, holding a skiplist entry so that stepping
/// forward is O(1).
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
    fn map(&self) -> &'static SkipList {
        // SAFETY: see the field comment: the map outlives every entry we
        // keep, because the entries are dropped before the Arc that owns it.
        unsafe { &*(&self.table.map as *const SkipList) }
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
        self.current = self.map().lower_bound(target);
    }
    fn next(&mut self) {
        self.current = self.current.take().and_then(|e| e.next());
    }
    fn prev(&mut self) {
        self.current = self.current.take().and_then(|e| e.prev());
    }
    fn key(&self) -> &[u8] {
        self.current.as_ref().expect("valid iterator").key()
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
        assert_eq!(
            m.get(b"a", 10),
            Lookup::Found(Kind::Value, b"1".to_vec(), 10)
        );
        assert_eq!(
            m.get(b"a", 11),
            Lookup::Found(Kind::Value, b"2".to_vec(), 11)
        );
        assert_eq!(m.get(b"a", 12), Lookup::Deleted);
        assert_eq!(
            m.get(b"b", 100),
            Lookup::Found(Kind::Value, b"x".to_vec(), 13)
        );
        assert_eq!(m.get(b"c", 100), Lookup::Absent);
        assert!(m.approximate_memory_bytes() > 0);
    }

    /// A model test of the batch path: random batches (keys repeated
    /// within a batch or not, deletes among them) go in through
    /// `insert_batch`, which inserts keys sorted through one splice when
    /// none repeats; every key at several snapshots must read as a
    /// `BTreeMap` of its versions says, by `get` and by `get_sorted`.
    #[test]
    fn sorted_batches_and_sorted_lookups_answer_as_the_model() {
        let seed: u64 = rand::random();
        // A point index with room for every key, and one far too small.
        for buffer in [1 << 20, 16 << 10] {
            sorted_batches_and_lookups_against_the_model(seed, buffer);
        }
    }

    fn sorted_batches_and_lookups_against_the_model(seed: u64, buffer: usize) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let m = MemTable::new().with_key_filter(buffer);
        // (user key, seq) -> Some(value) or None for a delete.
        let mut model = std::collections::BTreeMap::new();
        let mut seq = 1;
        for _ in 0..300 {
            let mut b = WriteBatch::new();
            for _ in 0..rng.gen_range(1..24) {
                let k = format!("user:{}", rng.gen_range(0..400));
                let s = seq + b.len() as u64;
                if rng.gen_bool(0.15) {
                    b.delete(&k);
                    model.insert((k, s), None);
                } else {
                    let v = format!("v{s}");
                    b.put(&k, &v);
                    model.insert((k, s), Some(v.into_bytes()));
                }
            }
            m.insert_batch(&b, seq);
            seq += b.len() as u64;
        }
        let want = |k: &str, at: u64| -> Lookup {
            let newest = (model.range((k.to_string(), 0)..=(k.to_string(), at))).next_back();
            match newest {
                None => Lookup::Absent,
                Some((_, None)) => Lookup::Deleted,
                Some(((_, s), Some(v))) => Lookup::Found(Kind::Value, v.clone(), *s),
            }
        };
        for at in [seq / 4, seq / 2, seq] {
            let mut names: Vec<String> = (0..rng.gen_range(1..60))
                .map(|_| format!("user:{}", rng.gen_range(0..420)))
                .collect();
            names.sort();
            let keys: Vec<&[u8]> = names.iter().map(|k| k.as_bytes()).collect();
            let mut found = vec![Lookup::Absent; keys.len()];
            // A key answered by a newer source is left alone.
            found[0] = Lookup::Deleted;
            m.get_sorted(&keys, at, &mut found);
            assert_eq!(found[0], Lookup::Deleted, "seed {seed}");
            for (i, k) in names.iter().enumerate() {
                assert_eq!(
                    m.get(k.as_bytes(), at),
                    want(k, at),
                    "seed {seed} {k} at {at}"
                );
                if i > 0 {
                    assert_eq!(found[i], want(k, at), "seed {seed} {k} at {at}");
                }
            }
        }
    }

    /// One writer inserts batches and publishes their last sequence;
    /// readers look up at a published sequence through the point index
    /// and must see exactly the versions up to it (never a newer one the
    /// index already names, never an older one it no longer names).
    #[test]
    fn lookups_through_the_point_index_see_exactly_a_published_sequence() {
        let m = MemTable::new().with_key_filter(1 << 20);
        let rounds = 50_000u64;
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..rounds {
                    let mut b = WriteBatch::new();
                    b.put("a", i.to_le_bytes()).put("b", i.to_le_bytes());
                    m.insert_batch(&b, 1 + 2 * i);
                }
            });
            for _ in 0..2 {
                s.spawn(|| loop {
                    let v = m.last_sequence();
                    if v == 0 {
                        continue;
                    }
                    let round = (v - 2) / 2;
                    let want = |seq| Lookup::Found(Kind::Value, round.to_le_bytes().to_vec(), seq);
                    assert_eq!(m.get(b"a", v), want(v - 1), "a at {v}");
                    assert_eq!(m.get(b"b", v), want(v), "b at {v}");
                    assert_eq!(m.newest_sequence(b"c"), None);
                    if v == 2 * rounds {
                        break;
                    }
                });
            }
        });
        assert_eq!(m.newest_sequence(b"b"), Some(2 * rounds));
    }

    #[test]
    fn a_key_filter_changes_no_answer() {
        use rand::{Rng, SeedableRng};
        for seed in 0..4u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            // A filter far too small for its keys: many false positives, and
            // blocks shared by many keys.
            let filtered = MemTable::tracking_keys().with_key_filter(64 * 32);
            let plain = MemTable::new();
            let mut seq = 1;
            for _ in 0..300 {
                let mut b = WriteBatch::new();
                for _ in 0..rng.gen_range(1..8) {
                    let k = format!("k{}", rng.gen_range(0..2_000));
                    if rng.gen_bool(0.2) {
                        b.delete(&k);
                    } else {
                        b.put(&k, format!("v{seq}"));
                    }
                }
                filtered.insert_batch(&b, seq);
                plain.insert_batch(&b, seq);
                seq += b.len() as u64;
            }
            for i in 0..4_000 {
                let k = format!("k{i}");
                for at in [seq / 3, seq / 2, seq] {
                    let want = plain.get(k.as_bytes(), at);
                    assert_eq!(
                        filtered.get(k.as_bytes(), at),
                        want,
                        "seed {seed} {k} at {at}"
                    );
                }
                let want = plain.newest_sequence(k.as_bytes());
                assert_eq!(
                    filtered.newest_sequence(k.as_bytes()),
                    want,
                    "seed {seed} {k}"
                );
            }
            // The filter's block, and the point index's smallest size.
            assert_eq!(filtered.filter_bytes(), 64 + 16 * 16);
            assert_eq!(plain.filter_bytes(), 0);
        }
    }

    #[test]
    fn the_key_log_names_exactly_the_keys_written_after_a_sequence() {
        let tracking = MemTable::tracking_keys();
        let plain = MemTable::new();
        let mut b = WriteBatch::new();
        b.put("a", "1").put("b", "2");
        let mut small = WriteBatch::new();
        small.put("c", "3");
        // Large enough to be inserted on two threads.
        let mut large = WriteBatch::new();
        for i in 0..PARALLEL_RELOCATIONS + 10 {
            large.put(format!("k{i}"), "v");
        }
        for m in [&tracking, &plain] {
            m.insert_batch(&b, 10);
            m.insert_relocations(&small, 12, true);
            m.insert_relocations(&large, 100, true);
        }
        let entries = 3 + large.len();
        assert_eq!(
            tracking.approximate_memory_bytes() - tracking.map.memory_bytes(),
            entries * KEY_LOG_ENTRY_BYTES
        );
        assert_eq!(plain.approximate_memory_bytes(), plain.map.memory_bytes());
        let digests = |after: u64| {
            let mut out = DigestSet::default();
            assert!(tracking.digests_newer_than(after, &mut out));
            out
        };
        let all = digests(0);
        assert_eq!(all.len(), entries);
        let after_a = digests(10);
        assert!(!after_a.contains(&key_digest(b"a")));
        assert!(after_a.contains(&key_digest(b"b")));
        assert!(after_a.contains(&key_digest(b"c")));
        let after_c = digests(99);
        assert_eq!(after_c.len(), large.len());
        for key in ["a", "b", "c"] {
            assert!(!after_c.contains(&key_digest(key.as_bytes())), "{key}");
        }
        for i in [0, PARALLEL_RELOCATIONS / 2, PARALLEL_RELOCATIONS + 9] {
            assert!(after_c.contains(&key_digest(format!("k{i}").as_bytes())));
        }
        assert!(digests(100 + large.len() as u64).is_empty());
        assert!(!plain.digests_newer_than(0, &mut DigestSet::default()));
    }

    #[test]
    fn held_live_bytes_count_each_keys_newest_whole_value() {
        let m = MemTable::new();
        let mut b = WriteBatch::new();
        // "a": 1 + 3 bytes shadowed by 1 + 5; "b": 1 + 2 deleted; "c": a
        // pointer, held by the value store, not the buffer.
        b.put("a", "old")
            .put("b", "xy")
            .put("a", "newer")
            .delete("b");
        m.insert_batch(&b, 10);
        assert_eq!(m.held_live_bytes(), 6);
        let p = ValuePointer {
            store: 1,
            file: 7,
            offset: 0,
            record_len: 100,
            record_crc: 0,
        };
        m.add(b"c", 20, Kind::ValuePointer, &p.encode());
        assert_eq!(m.held_live_bytes(), 6);
        // A whole value over the pointer counts; the pointer shadowed
        // never did.
        m.add(b"c", 21, Kind::Value, b"1234");
        assert_eq!(m.held_live_bytes(), 11);
    }

    /// Counts the heap bytes the current thread holds (allocated less
    /// freed), so that a test can weigh what its own inserts allocate.
    struct CountingAlloc;

    thread_local! {
        static HELD: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
    }

    fn add_held(n: isize) {
        let _ = HELD.try_with(|h| h.set(h.get() + n));
    }

    // SAFETY: forwards to the system allocator unchanged.
    unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
        unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
            add_held(layout.size() as isize);
            // SAFETY: the caller's contract for `alloc`, passed on.
            unsafe { std::alloc::System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
            add_held(-(layout.size() as isize));
            // SAFETY: the caller's contract for `dealloc`, passed on.
            unsafe { std::alloc::System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static ALLOC: CountingAlloc = CountingAlloc;

    #[test]
    fn accounted_memory_covers_what_the_entries_allocate() {
        // Pointers (the separated presets' memtables), whole values, keys
        // too long to sit inline, and deletes.
        for (key_len, value_len, kind) in [
            (24, 21, Kind::ValuePointer),
            (24, 992, Kind::Value),
            (24, 100, Kind::Value),
            (60, 100, Kind::Value),
            (24, 0, Kind::Delete),
        ] {
            let warm = MemTable::new();
            warm.add(b"warm", 1, Kind::Value, b"up");
            let n = 20_000u64;
            let mut b = WriteBatch::new();
            for i in 0..n {
                let mut k = format!("{i:0key_len$}").into_bytes();
                k.truncate(key_len);
                b.add_raw(kind, &k, &vec![7u8; value_len]);
            }
            let m = MemTable::new();
            let before = HELD.with(|h| h.get());
            m.insert_batch(&b, 1);
            let allocated = (HELD.with(|h| h.get()) - before) as f64;
            let accounted = m.approximate_memory_bytes() as f64;
            let ratio = accounted / allocated;
            // All of it but the free rest of each arena's current block
            // (nodes, and values longer than 64 bytes).
            let rests = 2.0 * skiplist::MAX_BLOCK_BYTES as f64;
            assert!(
                accounted <= allocated && accounted >= allocated - rests,
                "{key_len}-byte keys, {value_len}-byte values: accounted {accounted} for \
                 {allocated} allocated ({ratio:.3})"
            );
        }
    }

    #[test]
    fn relocations_are_no_shadow_candidates() {
        let m = MemTable::new();
        let p = |file| ValuePointer {
            store: 1,
            file,
            offset: 0,
            record_len: 100,
            record_crc: 0,
        };
        let mut b = WriteBatch::new();
        b.add_raw(Kind::ValuePointer, b"a", &p(7).encode());
        b.delete("b");
        m.insert_batch(&b, 10);
        let user = ShadowCandidates {
            puts: 1,
            value_bytes: 100,
            deletes: 1,
        };
        assert_eq!(m.shadow_candidates(), user);
        let mut r = WriteBatch::new();
        r.add_raw(Kind::ValuePointer, b"c", &p(8).encode());
        m.insert_relocations(&r, 12, false);
        assert_eq!(m.shadow_candidates(), user);
        assert!(matches!(
            m.get(b"c", 12),
            Lookup::Found(Kind::ValuePointer, _, 12)
        ));
    }

    #[test]
    fn keys_longer_than_the_inline_size_keep_the_order() {
        // Keys around INLINE_KEY_BYTES, inline and spilled, sharing
        // prefixes, must sort and look up as by `key::compare`.
        let m = MemTable::new();
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for len in [1usize, 30, 39, 40, 41, 47, 48, 60, 200] {
            for last in [b'a', b'b'] {
                let mut k = vec![b'x'; len];
                *k.last_mut().unwrap() = last;
                keys.push(k);
            }
        }
        for (i, k) in keys.iter().enumerate() {
            let mut b = WriteBatch::new();
            b.put(k, i.to_string());
            m.insert_batch(&b, 1 + i as u64);
        }
        for (i, k) in keys.iter().enumerate() {
            let got = m.get(k, u64::MAX >> 8);
            let value = i.to_string().into_bytes();
            assert!(
                matches!(&got, Lookup::Found(Kind::Value, v, _) if *v == value),
                "key of {} bytes: {got:?}",
                k.len()
            );
        }
        let mut it = Arc::new(m).iter();
        it.seek_to_first();
        let mut seen = vec![];
        while it.valid() {
            seen.push(key::user_key(it.key()).to_vec());
            it.next();
        }
        keys.sort();
        assert_eq!(seen, keys);
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
