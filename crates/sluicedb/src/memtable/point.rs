//! A memtable's point index: a hash table from a key's digest to the
//! newest entry of that key in the skiplist, so that a point lookup of a
//! key the memtable holds costs a slot and the entry (two or three cache
//! lines) instead of a skiplist search (some twelve dependent cache misses
//! in a memtable of 60,000 entries, 85% of the search's samples in a
//! profile of the server's pipelined `SET`). Versions of a key are
//! neighbours at level 0, newest first, so a lookup at an older snapshot
//! steps from the newest one to the version it sees.
//!
//! What it guarantees, to a reader that relies on an insert only once the
//! sequence number published after it (or the writer queue) orders it
//! before the read, as for the key filter:
//! - [`Probe::Absent`]: the memtable holds no entry of the key.
//! - [`Probe::At`]: an entry whose key has this digest, and that is the
//!   newest entry of its key. It may be another key's (digests collide):
//!   the caller compares keys and, if they differ, searches.
//! - [`Probe::Unknown`]: the index cannot say (a full probe sequence, or
//!   an insert under way); the caller searches.
//!
//! Linear probing over [`PROBES`] slots of 16 bytes (digest, entry); a
//! slot, once claimed by a digest, keeps it for the memtable's life. An
//! insert claims the first empty slot of its sequence or updates the slot
//! of its digest, so an empty slot met before the digest's own means the
//! key was never inserted. A key whose sequence is full is not indexed,
//! and lookups of it search.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Slots a lookup or insert tries, one after another (four cache lines).
const PROBES: usize = 16;

/// The index's bytes as a share of the write buffer's: 1/this. A slot is
/// 16 bytes, so a 64 MiB buffer gets 262,144 slots: room for every key of
/// a memtable of 1 KiB values (about 60,000), and for the first of the
/// 100-byte ones, after which their keys are looked up by search.
pub(crate) const INDEX_RATIO: usize = 16;

/// A slot: the digest that claimed it (0: none yet) and the newest entry
/// of that digest's key (null until the claiming insert stores it).
#[repr(C, align(16))]
struct Slot {
    digest: AtomicU64,
    entry: AtomicPtr<u8>,
}

/// What the index says of a key's digest; see the module comment.
pub(crate) enum Probe {
    Absent,
    Unknown,
    At(*mut u8),
}

pub(crate) struct PointIndex {
    slots: Box<[Slot]>,
}

/// Digests are stored nonzero: 0 marks an empty slot.
fn stored(digest: u64) -> u64 {
    digest.max(1)
}

impl PointIndex {
    /// An index of about `bytes` (a power of two of slots, at least
    /// [`PROBES`]).
    pub(crate) fn new(bytes: usize) -> PointIndex {
        let n = (bytes / size_of::<Slot>()).max(PROBES).next_power_of_two();
        // SAFETY: n >= PROBES, and all-zero bytes are valid atomics
        // (digest 0, null entry): an empty slot.
        let slots = unsafe { super::zeroed_slice::<Slot>(n) };
        PointIndex { slots }
    }

    /// An index sized for a write buffer of `write_buffer_bytes`.
    pub(crate) fn for_write_buffer(write_buffer_bytes: usize) -> PointIndex {
        PointIndex::new(write_buffer_bytes / INDEX_RATIO)
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.slots.len() * size_of::<Slot>()
    }

    /// The slots `digest` tries, in order.
    fn sequence(&self, digest: u64) -> impl Iterator<Item = &Slot> {
        let mask = self.slots.len() - 1;
        // The high half picks the start: the key filter uses it too, but
        // for a block among far fewer.
        let start = (digest.rotate_left(32) as usize) & mask;
        (0..PROBES).map(move |i| &self.slots[(start + i) & mask])
    }

    pub(crate) fn find(&self, digest: u64) -> Probe {
        let digest = stored(digest);
        for slot in self.sequence(digest) {
            match slot.digest.load(Ordering::Acquire) {
                0 => return Probe::Absent,
                d if d == digest => {
                    let entry = slot.entry.load(Ordering::Acquire);
                    return if entry.is_null() {
                        Probe::Unknown
                    } else {
                        Probe::At(entry)
                    };
                }
                _ => {}
            }
        }
        Probe::Unknown
    }

    /// Notes `entry`, just linked into the skiplist, as the newest of its
    /// key unless the slot holds a newer entry of the same key.
    /// `newer_or_other(e)` tells whether `e` (an entry stored before) is
    /// newer than `entry` or another key's: then the slot stays as it is.
    pub(crate) fn insert(
        &self,
        digest: u64,
        entry: *mut u8,
        newer_or_other: impl Fn(*mut u8) -> bool,
    ) {
        debug_assert!(!entry.is_null());
        let digest = stored(digest);
        for slot in self.sequence(digest) {
            let mut d = slot.digest.load(Ordering::Acquire);
            if d == 0 {
                match (slot.digest).compare_exchange(0, digest, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => {
                        slot.entry.store(entry, Ordering::Release);
                        return;
                    }
                    Err(now) => d = now,
                }
            }
            if d != digest {
                continue;
            }
            // The slot of this digest: wait out an insert that claimed it
            // and has not stored its entry yet (a few instructions), so
            // that a newer entry is never overwritten by an older one.
            let mut current = slot.entry.load(Ordering::Acquire);
            while current.is_null() {
                std::thread::yield_now();
                current = slot.entry.load(Ordering::Acquire);
            }
            loop {
                if newer_or_other(current) {
                    return;
                }
                match (slot.entry).compare_exchange(
                    current,
                    entry,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return,
                    Err(now) => current = now,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_absent_or_unknown_as_their_slots_say() {
        let ix = PointIndex::new(PROBES * 16);
        assert_eq!(ix.slots.len(), PROBES);
        let a = Box::into_raw(Box::new(1u8));
        let b = Box::into_raw(Box::new(2u8));
        assert!(matches!(ix.find(7), Probe::Absent));
        ix.insert(7, a, |_| false);
        assert!(matches!(ix.find(7), Probe::At(p) if p == a));
        // A newer entry replaces it; an older one (`newer_or_other` says
        // the stored one is newer) does not.
        ix.insert(7, b, |_| false);
        assert!(matches!(ix.find(7), Probe::At(p) if p == b));
        ix.insert(7, a, |e| e == b);
        assert!(matches!(ix.find(7), Probe::At(p) if p == b));
        // Digest 0 is stored as 1: the two share a slot, and the caller
        // tells the keys apart.
        ix.insert(1, b, |_| false);
        ix.insert(0, a, |_| true);
        assert!(matches!(ix.find(0), Probe::At(p) if p == b));
        // Every slot claimed: a digest not among them is unknown, not
        // absent.
        for d in 100..100 + PROBES as u64 {
            ix.insert(d << 32, a, |_| false);
        }
        assert!(matches!(ix.find(99 << 32), Probe::Unknown));
        assert!(matches!(ix.find(100 << 32), Probe::At(p) if p == a));
        // SAFETY: made by `Box::into_raw` above, freed once.
        unsafe {
            drop(Box::from_raw(a));
            drop(Box::from_raw(b));
        }
    }
}
