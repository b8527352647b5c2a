//! UniKV's two-level hash index over one UnsortedStore (UniKV, ICDE '20, §III-B,
//! Fig. 6): cuckoo hashing over `N` buckets with `n` hash functions, and
//! linked overflow entries when all `n` candidate buckets are taken.
//!
//! Every entry is 8 bytes: a 2-byte key tag, a 2-byte table slot and a
//! 4-byte link to the next (older) entry of the same bucket. A key of a
//! table is inserted into the first empty bucket among `h_1(key) .. h_n(key)`
//! (no kick-outs: entries never move, so a checkpoint is a plain copy);
//! when all are taken, an overflow entry goes at the head of `h_n(key)`'s
//! chain, so a chain reads newest first. The index answers a lookup with
//! the tables that may hold the key: entries whose tag matches, probed from
//! `h_n` down to `h_1` and each chain from its head, which is newest first
//! for the versions of one key (a later version of a key can only take a
//! later candidate bucket, since buckets never empty). A tag false positive
//! costs one table probe; the table's own key comparison rejects it.
//!
//! Differences from the paper, and why:
//! - The `n` functions are double hashing over one 128-bit XXH3 (`h_i = a +
//!   i·b mod N`, Kirsch–Mitzenmacher) rather than `n` library functions:
//!   one pass over the key instead of `n`, with the same spread.
//! - The tag is 16 bits of a second, independently seeded XXH3
//!   (the paper's `h_{n+1}`).
//! - Table slots index a per-index list of file numbers (our file numbers
//!   are 64-bit); slot 0 marks an empty bucket, so an index holds at most
//!   65,535 tables, as the paper's 2-byte `SSTableID` does.
//!
//! The checkpoint format is `docs/format/unikv-hash-index.md`.

use std::path::Path;

use smallvec::SmallVec;
use xxhash_rust::xxh3::{xxh3_128_with_seed, xxh3_64_with_seed};

use crate::coding::{masked_crc, put_u32, put_u64, u16_at, u32_at, u64_at};
use crate::error::{Error, Result};

/// Seed of the bucket hash (`h_1 .. h_n`).
const BUCKET_SEED: u64 = 0x756e_696b_765f_6231;
/// Seed of the tag hash (`h_{n+1}`).
const TAG_SEED: u64 = 0x756e_696b_765f_7467;
/// The most hash functions an index may use.
pub(crate) const MAX_HASH_FUNCTIONS: u32 = 8;
/// The most tables one index may hold (slot 0 marks an empty bucket).
pub(crate) const MAX_TABLES: usize = u16::MAX as usize;

/// First eight bytes of a checkpoint: "SLUHIDX" and a format byte.
const CHECKPOINT_MAGIC: u64 = u64::from_le_bytes(*b"SLUHIDX\x01");
/// 2 adds each table's shadowed count; 1 is still read (counts 0).
const CHECKPOINT_FORMAT_VERSION: u32 = 2;
/// magic, format version, functions, buckets, overflow entries, tables,
/// key entries (u64).
const HEADER_BYTES: usize = 8 + 4 * 5 + 8;
const ENTRY_BYTES: usize = 8;

/// One 8-byte index entry (UniKV, ICDE '20 Fig. 6: keyTag, SSTableID, pointer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Entry {
    tag: u16,
    /// 1 + the table's position in `HashIndex::tables`; 0 = empty bucket.
    table: u16,
    /// 1 + the position in `HashIndex::overflow` of the next (older) entry
    /// of the bucket; 0 = end of chain.
    next: u32,
}

/// A key's hashes: where it may live and the tag that filters entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyHash {
    a: u64,
    b: u64,
    tag: u16,
}

impl KeyHash {
    pub(crate) fn of(user_key: &[u8]) -> KeyHash {
        let h = xxh3_128_with_seed(user_key, BUCKET_SEED);
        KeyHash {
            a: h as u64,
            // Odd, so the n probes of a power-of-two table are distinct.
            b: ((h >> 64) as u64) | 1,
            tag: (xxh3_64_with_seed(user_key, TAG_SEED) >> 48) as u16,
        }
    }

    /// `h_i(key) mod buckets`, for `i` in `0..n`.
    fn bucket(&self, i: u32, buckets: usize) -> usize {
        (self.a.wrapping_add(u64::from(i).wrapping_mul(self.b)) % buckets as u64) as usize
    }
}

/// Tables that may hold a key, newest first as the index saw them.
pub(crate) type Candidates = SmallVec<[u64; 4]>;

/// The in-memory hash index of one UnsortedStore.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HashIndex {
    functions: u32,
    buckets: Vec<Entry>,
    overflow: Vec<Entry>,
    /// File numbers of the indexed tables, in the order they were added.
    tables: Vec<u64>,
    /// For each of `tables`: how many of its keys a newer table indexed
    /// in this partition holds too (see [`HashIndex::newest_candidate_below`]):
    /// its versions of them are dead, garbage until a merge drops them.
    shadowed: Vec<u64>,
    /// Key entries inserted (one per distinct user key per table).
    entries: u64,
    /// Buckets whose own entry is taken.
    occupied: usize,
}

impl HashIndex {
    /// An empty index of `buckets` buckets probed with `functions` hash
    /// functions (UniKV, ICDE '20, §III-B: `N` and `n`).
    pub(crate) fn new(buckets: usize, functions: u32) -> HashIndex {
        assert!(buckets > 0, "a hash index needs at least one bucket");
        assert!(
            (1..=MAX_HASH_FUNCTIONS).contains(&functions),
            "hash functions out of range: {functions}"
        );
        HashIndex {
            functions,
            buckets: vec![Entry::default(); buckets],
            overflow: Vec::new(),
            tables: Vec::new(),
            shadowed: Vec::new(),
            entries: 0,
            occupied: 0,
        }
    }

    pub(crate) fn buckets(&self) -> usize {
        self.buckets.len()
    }
    pub(crate) fn functions(&self) -> u32 {
        self.functions
    }
    /// File numbers of the indexed tables, oldest first.
    pub(crate) fn tables(&self) -> &[u64] {
        &self.tables
    }
    pub(crate) fn contains_table(&self, number: u64) -> bool {
        self.tables.contains(&number)
    }
    /// Each indexed table's number and its keys a newer table shadows.
    pub(crate) fn shadowed(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.tables
            .iter()
            .copied()
            .zip(self.shadowed.iter().copied())
    }
    /// Counts `n` more keys of table `number` shadowed; false when this
    /// index does not hold the table.
    pub(crate) fn note_shadowed(&mut self, number: u64, n: u64) -> bool {
        match self.tables.iter().position(|&t| t == number) {
            Some(i) => {
                // Saturating: a count read from a checkpoint has no bound
                // to check it against (tag false positives may charge a
                // table for keys it lacks), and readers clamp it to the
                // table's entries anyway.
                self.shadowed[i] = self.shadowed[i].saturating_add(n);
                true
            }
            None => false,
        }
    }
    /// Key entries held (one per distinct user key per table).
    pub(crate) fn entries(&self) -> u64 {
        self.entries
    }
    /// Entries that did not fit in any of their `n` buckets.
    pub(crate) fn overflow_entries(&self) -> usize {
        self.overflow.len()
    }
    /// Share of buckets whose own entry is taken (the paper reports about
    /// 80% in its runs).
    pub(crate) fn load_factor(&self) -> f64 {
        self.occupied as f64 / self.buckets.len() as f64
    }
    /// Memory held by the entries and the table lists.
    pub(crate) fn memory_bytes(&self) -> usize {
        (self.buckets.capacity() + self.overflow.capacity()) * size_of::<Entry>()
            + (self.tables.capacity() + self.shadowed.capacity()) * 8
    }
    /// True when one more table would not fit.
    pub(crate) fn is_full(&self) -> bool {
        self.tables.len() >= MAX_TABLES
    }

    /// Indexes the user keys of table `number`. `user_keys` may repeat a key
    /// (several versions in one table); each distinct key is indexed once
    /// when repeats are adjacent, as they are in a table's key order.
    /// Errors when the index already holds `MAX_TABLES` tables or the table.
    #[cfg(test)]
    pub(crate) fn add_table<'k>(
        &mut self,
        number: u64,
        user_keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> std::result::Result<(), String> {
        let mut last: Option<&[u8]> = None;
        let hashes = user_keys.into_iter().filter_map(|key| {
            let repeat = last == Some(key);
            last = Some(key);
            (!repeat).then(|| KeyHash::of(key))
        });
        self.add_table_hashes(number, hashes)
    }

    /// `HashIndex::add_table` of keys hashed already, each distinct key
    /// once.
    pub(crate) fn add_table_hashes(
        &mut self,
        number: u64,
        hashes: impl IntoIterator<Item = KeyHash>,
    ) -> std::result::Result<(), String> {
        if self.is_full() {
            return Err(format!(
                "hash index holds {MAX_TABLES} tables; table {number} does not fit"
            ));
        }
        if self.contains_table(number) {
            return Err(format!("table {number} is already indexed"));
        }
        self.tables.push(number);
        self.shadowed.push(0);
        let slot = self.tables.len() as u16;
        for h in hashes {
            self.insert(h, slot);
        }
        Ok(())
    }

    fn insert(&mut self, h: KeyHash, slot: u16) {
        self.entries += 1;
        let n = self.buckets.len();
        for i in 0..self.functions {
            let b = h.bucket(i, n);
            let e = &mut self.buckets[b];
            if e.table == 0 {
                e.tag = h.tag;
                e.table = slot;
                self.occupied += 1;
                return;
            }
        }
        // All n candidates taken: link an overflow entry at the head of
        // h_n's chain (UniKV, ICDE '20, §III-B), so the chain reads newest first.
        let b = h.bucket(self.functions - 1, n);
        let head = self.buckets[b].next;
        assert!(
            self.overflow.len() < u32::MAX as usize,
            "hash index overflow chain space exhausted"
        );
        self.overflow.push(Entry {
            tag: h.tag,
            table: slot,
            next: head,
        });
        self.buckets[b].next = self.overflow.len() as u32;
    }

    /// The tables that may hold `user_key`, each once, in probe order: the
    /// candidate buckets from `h_n` down to `h_1`, each chain from its head
    /// before the bucket's own entry. For the versions of one key this is
    /// newest first; callers that need an order across keys' collisions
    /// sort by table age themselves.
    #[cfg(test)]
    pub(crate) fn candidates(&self, user_key: &[u8]) -> Candidates {
        self.candidates_of(KeyHash::of(user_key))
    }

    /// The newest table numbered below `number` that may hold the key of
    /// `h` (tables are numbered in the order their versions were written:
    /// flushes in turn, a scan merge's output when it is picked).
    pub(crate) fn newest_candidate_below(&self, h: KeyHash, number: u64) -> Option<u64> {
        self.candidates_of(h)
            .into_iter()
            .filter(|&t| t < number)
            .max()
    }

    pub(crate) fn candidates_of(&self, h: KeyHash) -> Candidates {
        let n = self.buckets.len();
        let mut out = Candidates::new();
        let mut seen: SmallVec<[usize; 8]> = SmallVec::new();
        let take = |e: &Entry, out: &mut Candidates| {
            if e.table != 0 && e.tag == h.tag {
                let number = self.tables[usize::from(e.table) - 1];
                if !out.contains(&number) {
                    out.push(number);
                }
            }
        };
        for i in (0..self.functions).rev() {
            let b = h.bucket(i, n);
            if seen.contains(&b) {
                continue;
            }
            seen.push(b);
            let bucket = &self.buckets[b];
            let mut link = bucket.next;
            while link != 0 {
                let e = &self.overflow[link as usize - 1];
                take(e, &mut out);
                link = e.next;
            }
            take(bucket, &mut out);
        }
        out
    }

    /// The checkpoint bytes (`docs/format/unikv-hash-index.md`).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut buf = Vec::with_capacity(
            HEADER_BYTES
                + self.tables.len() * 16
                + (self.buckets.len() + self.overflow.len()) * ENTRY_BYTES
                + 4,
        );
        put_u64(&mut buf, CHECKPOINT_MAGIC);
        put_u32(&mut buf, CHECKPOINT_FORMAT_VERSION);
        put_u32(&mut buf, self.functions);
        put_u32(&mut buf, self.buckets.len() as u32);
        put_u32(&mut buf, self.overflow.len() as u32);
        put_u32(&mut buf, self.tables.len() as u32);
        put_u64(&mut buf, self.entries);
        for &t in &self.tables {
            put_u64(&mut buf, t);
        }
        for &n in &self.shadowed {
            put_u64(&mut buf, n);
        }
        for e in self.buckets.iter().chain(&self.overflow) {
            buf.extend_from_slice(&e.tag.to_le_bytes());
            buf.extend_from_slice(&e.table.to_le_bytes());
            put_u32(&mut buf, e.next);
        }
        let crc = masked_crc(&buf);
        put_u32(&mut buf, crc);
        buf
    }

    /// Reads a checkpoint written by [`HashIndex::encode`]; `file` names it
    /// in errors. Every field is checked, so damage is a `Corruption` with
    /// the offset where it was found, never a panic or a wrong lookup.
    pub(crate) fn decode(data: &[u8], file: &Path) -> Result<HashIndex> {
        let bad = |offset: usize, reason: String| Error::corruption(file, offset as u64, reason);
        if data.len() < HEADER_BYTES + 4 {
            return Err(bad(
                0,
                format!("hash index checkpoint of {} bytes is truncated", data.len()),
            ));
        }
        if u64_at(data, 0) != CHECKPOINT_MAGIC {
            return Err(bad(0, "not a hash index checkpoint (bad magic)".into()));
        }
        let version = u32_at(data, 8);
        if !(1..=CHECKPOINT_FORMAT_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                file: file.into(),
                version,
            });
        }
        let body = data.len() - 4;
        let crc = u32_at(data, body);
        if masked_crc(&data[..body]) != crc {
            return Err(bad(body, "hash index checkpoint checksum mismatch".into()));
        }
        let functions = u32_at(data, 12);
        let buckets = u32_at(data, 16) as usize;
        let overflow = u32_at(data, 20) as usize;
        let tables = u32_at(data, 24) as usize;
        let entries = u64_at(data, 28);
        if !(1..=MAX_HASH_FUNCTIONS).contains(&functions) {
            return Err(bad(12, format!("hash functions {functions} out of range")));
        }
        if buckets == 0 {
            return Err(bad(16, "hash index of zero buckets".into()));
        }
        if tables > MAX_TABLES {
            return Err(bad(24, format!("{tables} tables exceed {MAX_TABLES}")));
        }
        // Version 1 has no shadowed counts.
        let per_table = if version == 1 { 8 } else { 16 };
        let expected = (HEADER_BYTES as u64)
            + tables as u64 * per_table
            + (buckets as u64 + overflow as u64) * ENTRY_BYTES as u64;
        if expected != body as u64 {
            return Err(bad(
                body,
                format!("checkpoint body is {body} bytes; its header implies {expected}"),
            ));
        }
        let mut at = HEADER_BYTES;
        let mut table_numbers = Vec::with_capacity(tables);
        // A set beside the list: 65,535 tables checked by a search of the
        // list each took 2 * 10^9 comparisons (the fuzzing review).
        let mut listed = std::collections::HashSet::with_capacity(tables);
        for _ in 0..tables {
            let t = u64_at(data, at);
            if !listed.insert(t) {
                return Err(bad(at, format!("table {t} listed twice")));
            }
            table_numbers.push(t);
            at += 8;
        }
        let mut shadowed = vec![0; tables];
        if version > 1 {
            for n in &mut shadowed {
                *n = u64_at(data, at);
                at += 8;
            }
        }
        let entry_at = |at: usize| Entry {
            tag: u16_at(data, at),
            table: u16_at(data, at + 2),
            next: u32_at(data, at + 4),
        };
        let check = |e: &Entry, at: usize, newest_link: u32| -> Result<()> {
            if usize::from(e.table) > tables {
                return Err(bad(at + 2, format!("entry names table slot {}", e.table)));
            }
            // A link points at an older overflow entry, so chains end.
            if e.next > newest_link {
                return Err(bad(
                    at + 4,
                    format!("entry links to overflow entry {}", e.next),
                ));
            }
            Ok(())
        };
        let mut primary = Vec::with_capacity(buckets);
        let mut occupied = 0;
        for _ in 0..buckets {
            let e = entry_at(at);
            check(&e, at, overflow as u32)?;
            if e.table != 0 {
                occupied += 1;
            }
            primary.push(e);
            at += ENTRY_BYTES;
        }
        let mut chained = Vec::with_capacity(overflow);
        for i in 0..overflow {
            let e = entry_at(at);
            check(&e, at, i as u32)?;
            if e.table == 0 {
                return Err(bad(at + 2, "overflow entry names no table".into()));
            }
            chained.push(e);
            at += ENTRY_BYTES;
        }
        // Every key entry took a bucket or an overflow entry; the count is
        // incremented on each insert, so a larger one would overflow.
        if entries != (occupied + overflow) as u64 {
            return Err(bad(
                28,
                format!(
                    "header counts {entries} key entries; the index holds {}",
                    occupied + overflow
                ),
            ));
        }
        Ok(HashIndex {
            functions,
            buckets: primary,
            overflow: chained,
            tables: table_numbers,
            shadowed,
            entries,
            occupied,
        })
    }
}

#[cfg(test)]
mod tests;
