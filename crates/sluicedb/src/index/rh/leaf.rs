//! The RH-Tree's hash leaf (LightKV, ICDE, §III-B): 64-byte buckets of 4
//! signature, 4 cache and 4 offset slots, two bucket choices per key and
//! extra buckets searched in order when both are full.
//!
//! A leaf never holds keys: a signature finds candidates, and the caller
//! confirms each against the full key read at its offset. The cache slot
//! holds four bytes of the key (from the leaf's digit position), which is
//! all a split needs to decide where an entry goes.
//!
//! Format of a leaf in persistent memory: `docs/format/rh-leaf.md`.

/// Slots per bucket.
pub(crate) const SLOTS: usize = 4;
/// A bucket: one cache line.
pub(crate) const BUCKET_BYTES: usize = 64;
/// Signature 0 marks an empty slot; a key whose hash gives 0 uses this.
const SIGNATURE_OF_ZERO: u32 = 1;

/// One cache line of slots. Slot `i` is empty when `sig[i] == 0`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C, align(64))]
pub(crate) struct Bucket {
    pub(crate) sig: [u32; SLOTS],
    pub(crate) cache: [u32; SLOTS],
    pub(crate) offset: [u64; SLOTS],
}
const _: () = assert!(size_of::<Bucket>() == BUCKET_BYTES);

/// A slot's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) sig: u32,
    pub(crate) cache: u32,
    pub(crate) offset: u64,
}

/// The signature of a key hash (its low 32 bits, never 0).
pub(crate) fn signature(hash: u64) -> u32 {
    match hash as u32 {
        0 => SIGNATURE_OF_ZERO,
        s => s,
    }
}

/// The two bucket choices of a signature, among `buckets`. Derived from the
/// signature alone, so that a split can place an entry without its key.
fn choices(sig: u32, buckets: usize) -> [usize; 2] {
    let a = u64::from(sig).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let b = u64::from(sig ^ 0x5bd1_e995).wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    [
        ((a >> 32) as usize) % buckets,
        ((b >> 32) as usize) % buckets,
    ]
}

/// A hash leaf: `normal` buckets chosen by hash, then extra buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HashLeaf {
    normal: usize,
    buckets: Vec<Bucket>,
    len: usize,
}

impl HashLeaf {
    /// An empty leaf of `normal` buckets and `extra` extra ones.
    pub(crate) fn new(normal: usize, extra: usize) -> HashLeaf {
        assert!(normal > 0, "a leaf needs a bucket");
        HashLeaf {
            normal,
            buckets: vec![Bucket::default(); normal + extra],
            len: 0,
        }
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Its normal and extra buckets.
    pub(crate) fn buckets(&self) -> (usize, usize) {
        (self.normal, self.buckets.len() - self.normal)
    }

    /// Slots in all.
    pub(crate) fn capacity(&self) -> usize {
        self.buckets.len() * SLOTS
    }

    /// The buckets to search for `sig`, in order: its two choices, then the
    /// extra buckets.
    fn path(&self, sig: u32) -> impl Iterator<Item = usize> + '_ {
        let [a, b] = choices(sig, self.normal);
        let second = (b != a).then_some(b);
        std::iter::once(a)
            .chain(second)
            .chain(self.normal..self.buckets.len())
    }

    /// Offsets of the entries with signature `sig`, in search order; the
    /// caller confirms the key at each.
    pub(crate) fn candidates(&self, sig: u32) -> impl Iterator<Item = u64> + '_ {
        self.path(sig).flat_map(move |b| {
            let bucket = &self.buckets[b];
            (0..SLOTS)
                .filter(move |&i| bucket.sig[i] == sig)
                .map(move |i| bucket.offset[i])
        })
    }

    /// Points the entry whose offset `is` confirms (same key) at `offset`.
    /// Returns false when no entry of `sig` is confirmed.
    pub(crate) fn update(
        &mut self,
        sig: u32,
        offset: u64,
        mut is: impl FnMut(u64) -> bool,
    ) -> bool {
        let path: Vec<usize> = self.path(sig).collect();
        for b in path {
            let bucket = &mut self.buckets[b];
            for i in 0..SLOTS {
                if bucket.sig[i] == sig && is(bucket.offset[i]) {
                    bucket.offset[i] = offset;
                    return true;
                }
            }
        }
        false
    }

    /// Puts a new entry in the first empty slot on its path; false when
    /// there is none (the leaf must split or link).
    pub(crate) fn insert(&mut self, e: Entry) -> bool {
        let path: Vec<usize> = self.path(e.sig).collect();
        for b in path {
            let bucket = &mut self.buckets[b];
            if let Some(i) = (0..SLOTS).find(|&i| bucket.sig[i] == 0) {
                bucket.sig[i] = e.sig;
                bucket.cache[i] = e.cache;
                bucket.offset[i] = e.offset;
                self.len += 1;
                return true;
            }
        }
        false
    }

    /// Every entry, in slot order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        self.buckets.iter().flat_map(|b| {
            (0..SLOTS).filter(|&i| b.sig[i] != 0).map(|i| Entry {
                sig: b.sig[i],
                cache: b.cache[i],
                offset: b.offset[i],
            })
        })
    }

    /// Moves the entries `moves` picks to a new leaf of the same shape,
    /// each to the same bucket and slot (so a move never fails: its bucket
    /// is on its path in both leaves).
    pub(crate) fn split_off(&mut self, mut moves: impl FnMut(&Entry) -> bool) -> HashLeaf {
        let mut out = HashLeaf::new(self.normal, self.buckets.len() - self.normal);
        for (from, to) in self.buckets.iter_mut().zip(&mut out.buckets) {
            for i in 0..SLOTS {
                let e = Entry {
                    sig: from.sig[i],
                    cache: from.cache[i],
                    offset: from.offset[i],
                };
                if e.sig != 0 && moves(&e) {
                    (to.sig[i], to.cache[i], to.offset[i]) = (e.sig, e.cache, e.offset);
                    (from.sig[i], from.cache[i], from.offset[i]) = (0, 0, 0);
                    out.len += 1;
                }
            }
        }
        self.len -= out.len;
        out
    }

    /// Changes each entry's cache slot (after the leaf's digit position
    /// moved on by four bytes).
    pub(crate) fn recache(&mut self, mut cache: impl FnMut(u64) -> u32) {
        for b in &mut self.buckets {
            for i in 0..SLOTS {
                if b.sig[i] != 0 {
                    b.cache[i] = cache(b.offset[i]);
                }
            }
        }
    }

    /// The leaf's bytes as `docs/format/rh-leaf.md` lays them out.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(LEAF_HEADER_BYTES + self.buckets.len() * BUCKET_BYTES);
        out.extend_from_slice(&(self.normal as u32).to_le_bytes());
        out.extend_from_slice(&((self.buckets.len() - self.normal) as u32).to_le_bytes());
        out.extend_from_slice(&(self.len as u32).to_le_bytes());
        out.resize(LEAF_HEADER_BYTES, 0);
        for b in &self.buckets {
            b.sig
                .iter()
                .for_each(|s| out.extend_from_slice(&s.to_le_bytes()));
            b.cache
                .iter()
                .for_each(|c| out.extend_from_slice(&c.to_le_bytes()));
            b.offset
                .iter()
                .for_each(|o| out.extend_from_slice(&o.to_le_bytes()));
        }
        let crc = crc32c::crc32c(&out[LEAF_HEADER_BYTES..]);
        let crc = crc32c::crc32c_append(crc, &out[..12]);
        out[12..16].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads a leaf [`HashLeaf::encode`] wrote; `Err` names what is wrong.
    pub(crate) fn decode(bytes: &[u8]) -> Result<HashLeaf, &'static str> {
        if bytes.len() < LEAF_HEADER_BYTES {
            return Err("leaf shorter than its header");
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let (normal, extra, len) = (u32_at(0) as usize, u32_at(4) as usize, u32_at(8) as usize);
        let end = LEAF_HEADER_BYTES + (normal + extra) * BUCKET_BYTES;
        if normal == 0 || bytes.len() < end {
            return Err("leaf size out of range");
        }
        let crc =
            crc32c::crc32c_append(crc32c::crc32c(&bytes[LEAF_HEADER_BYTES..end]), &bytes[..12]);
        if crc != u32_at(12) {
            return Err("leaf checksum mismatch");
        }
        let buckets: Vec<Bucket> = bytes[LEAF_HEADER_BYTES..end]
            .chunks_exact(BUCKET_BYTES)
            .map(|c| {
                let w = |i: usize| u32::from_le_bytes(c[4 * i..4 * i + 4].try_into().expect("4"));
                let o =
                    |i: usize| u64::from_le_bytes(c[32 + 8 * i..40 + 8 * i].try_into().expect("8"));
                Bucket {
                    sig: [w(0), w(1), w(2), w(3)],
                    cache: [w(4), w(5), w(6), w(7)],
                    offset: [o(0), o(1), o(2), o(3)],
                }
            })
            .collect();
        let leaf = HashLeaf {
            normal,
            buckets,
            len,
        };
        if leaf.entries().count() != len {
            return Err("leaf entry count mismatch");
        }
        Ok(leaf)
    }
}

/// A persistent leaf's header line: normal and extra bucket counts,
/// entries, checksum, then zeros, so that buckets stay line-aligned.
pub(crate) const LEAF_HEADER_BYTES: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_leaf_uses_its_extra_bucket_then_refuses() {
        let mut leaf = HashLeaf::new(2, 1);
        // Every entry with one signature: both choices, then the extra bucket.
        let [a, b] = choices(7, 2);
        let room = if a == b { 2 * SLOTS } else { 3 * SLOTS };
        for k in 0..room as u64 {
            assert!(leaf.insert(Entry {
                sig: 7,
                cache: 0,
                offset: k
            }));
        }
        assert!(!leaf.insert(Entry {
            sig: 7,
            cache: 0,
            offset: 99
        }));
        assert_eq!(leaf.candidates(7).count(), room);
        assert!(leaf.update(7, 50, |o| o == 3));
        assert!(leaf.candidates(7).any(|o| o == 50));
        assert!(!leaf.update(8, 50, |_| true));
    }

    #[test]
    fn encode_decode_round_trip_and_damage() {
        let mut leaf = HashLeaf::new(3, 1);
        for k in 1..10u32 {
            leaf.insert(Entry {
                sig: k * 77,
                cache: k,
                offset: u64::from(k) << 33,
            });
        }
        let bytes = leaf.encode();
        assert_eq!(bytes.len(), LEAF_HEADER_BYTES + 4 * BUCKET_BYTES);
        assert_eq!(HashLeaf::decode(&bytes).unwrap(), leaf);
        let mut bad = bytes.clone();
        bad[LEAF_HEADER_BYTES + 40] ^= 1;
        assert_eq!(HashLeaf::decode(&bad), Err("leaf checksum mismatch"));
        assert!(HashLeaf::decode(&bytes[..20]).is_err());
    }

    #[test]
    fn split_off_moves_entries_to_the_same_slots() {
        let mut leaf = HashLeaf::new(4, 1);
        for k in 1..=12u32 {
            leaf.insert(Entry {
                sig: k,
                cache: k,
                offset: u64::from(k),
            });
        }
        let whole = leaf.clone();
        let moved = leaf.split_off(|e| e.cache > 6);
        assert_eq!((moved.len(), leaf.len()), (6, 6));
        assert!(leaf.entries().all(|e| e.cache <= 6));
        for k in 1..=12u32 {
            let from = if k > 6 { &moved } else { &leaf };
            assert_eq!(
                from.candidates(k).collect::<Vec<_>>(),
                whole.candidates(k).collect::<Vec<_>>()
            );
        }
        assert_eq!(leaf.capacity(), 20);
    }
}
