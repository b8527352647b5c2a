//! A table's hash leaf: LightKV's on-disk leaf (ICDE, §III-D), through which
//! "reads of on-disk data go through the leaf's offset straight to the table
//! entry". Written by the builder when `TableOptions::hash_leaf` is set (the
//! lightkv preset), persisted in the table as a block of its own, and held
//! in memory while the table is open (`docs/format/sstable.md`, "Hash leaf").
//!
//! It maps a 32-bit signature of every user key the table holds (the high
//! half of the key's xxh3-64, the hash the filter already uses) to the data
//! block holding the key's newest entry. A lookup whose signature has no
//! slot is an exact miss: the table holds no such key. A slot names a block
//! that may hold the key; the key is always confirmed in the block, so a
//! signature collision costs a block read, never a wrong answer.

use super::format::BlockHandle;
use crate::coding::{u32_at, u64_at};

/// Bytes of a block handle in the leaf.
const HANDLE_LEN: usize = 16;
/// Bytes of a slot.
const SLOT_LEN: usize = 8;
/// Bytes of the leaf's header: block and slot counts.
const HEADER_LEN: usize = 8;
const _: () = assert!(HEADER_LEN == 2 * 4);

/// The signature a leaf keeps of a key with hash `hash` (`bloom::key_hash`).
pub(crate) fn signature(hash: u64) -> u32 {
    (hash >> 32) as u32
}

/// An empty place of the in-memory table: block index `u32::MAX` names no
/// block (`decode` refuses an index at or past the block count).
const EMPTY: u64 = u64::MAX;

/// The leaf of one table: its data blocks, and one slot per (signature,
/// block) pair, each `signature << 32 | block index`. In memory the slots
/// are an open-addressing table at most half full, placed by the
/// signature's low bits and probed linearly, so that a lookup, hit or miss,
/// usually reads one cache line (a binary search over sorted slots cost a
/// cache miss per step, and a read walks a dozen leaves); on disk they are
/// sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableLeaf {
    blocks: Vec<BlockHandle>,
    table: Vec<u64>,
    slots: usize,
}

impl TableLeaf {
    /// The leaf of a table whose data blocks are `blocks` (in file order)
    /// and whose user keys have the hashes `hashes` in key order, the first
    /// `block_ends[0]` of them starting in block 0, up to `block_ends[1]` in
    /// block 1, and so on (a key starts in the block of its newest entry).
    pub(crate) fn build(hashes: &[u64], block_ends: &[usize], blocks: Vec<BlockHandle>) -> Self {
        assert_eq!(block_ends.len(), blocks.len(), "one end per block");
        let mut slots = Vec::with_capacity(hashes.len());
        let mut start = 0;
        for (b, &end) in block_ends.iter().enumerate() {
            for &h in &hashes[start..end] {
                slots.push(u64::from(signature(h)) << 32 | b as u64);
            }
            start = end;
        }
        assert_eq!(start, hashes.len(), "every key in a block");
        slots.sort_unstable();
        slots.dedup();
        Self::with_slots(blocks, &slots)
    }

    /// The leaf of `blocks` holding `slots` (distinct).
    fn with_slots(blocks: Vec<BlockHandle>, slots: &[u64]) -> Self {
        let places = (slots.len() * 2).max(8).next_power_of_two();
        let mask = places - 1;
        let mut table = vec![EMPTY; places];
        for &s in slots {
            let mut i = (s >> 32) as usize & mask;
            while table[i] != EMPTY {
                i = (i + 1) & mask;
            }
            table[i] = s;
        }
        TableLeaf {
            blocks,
            table,
            slots: slots.len(),
        }
    }

    /// The slots, ascending (the on-disk order).
    fn sorted_slots(&self) -> Vec<u64> {
        let mut slots: Vec<u64> = self.table.iter().copied().filter(|&s| s != EMPTY).collect();
        slots.sort_unstable();
        slots
    }

    /// The handles of the blocks that may hold the key with hash `hash`
    /// (in no particular order); none when the table holds no such key.
    pub(crate) fn blocks_of(&self, hash: u64) -> impl Iterator<Item = BlockHandle> + '_ {
        let sig = signature(hash);
        let mask = self.table.len() - 1;
        let mut i = sig as usize & mask;
        std::iter::from_fn(move || loop {
            let s = self.table[i];
            if s == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
            if (s >> 32) as u32 == sig {
                return Some(self.blocks[(s & u64::from(u32::MAX)) as usize]);
            }
        })
    }

    /// Bytes it holds in memory.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.blocks.len() * size_of::<BlockHandle>() + self.table.len() * SLOT_LEN
    }

    /// ```text
    /// blocks: u32 | slots: u32 | blocks × (offset: u64, size: u64)
    ///   | slots × u64 (signature << 32 | block index), ascending
    /// ```
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(HEADER_LEN + self.blocks.len() * HANDLE_LEN + self.slots * SLOT_LEN);
        out.extend_from_slice(&(self.blocks.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.slots as u32).to_le_bytes());
        for h in &self.blocks {
            out.extend_from_slice(&h.offset.to_le_bytes());
            out.extend_from_slice(&h.size.to_le_bytes());
        }
        for s in self.sorted_slots() {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out
    }

    /// Decodes a leaf of a table whose data blocks end before `data_end`;
    /// the reason it is malformed otherwise (lengths that disagree with the
    /// counts, a block outside the data, slots out of order or naming a
    /// block that does not exist).
    pub(crate) fn decode(b: &[u8], data_end: u64) -> Result<Self, &'static str> {
        if b.len() < HEADER_LEN {
            return Err("hash leaf shorter than its header");
        }
        let (nb, ns) = (u32_at(b, 0) as usize, u32_at(b, 4) as usize);
        let want = nb
            .checked_mul(HANDLE_LEN)
            .zip(ns.checked_mul(SLOT_LEN))
            .and_then(|(x, y)| x.checked_add(y)?.checked_add(HEADER_LEN));
        if want != Some(b.len()) {
            return Err("hash leaf length disagrees with its counts");
        }
        let mut handles = Vec::with_capacity(nb);
        for i in 0..nb {
            let at = HEADER_LEN + i * HANDLE_LEN;
            let h = BlockHandle {
                offset: u64_at(b, at),
                size: u64_at(b, at + 8),
            };
            let end = h.offset.checked_add(h.size);
            if end.is_none_or(|e| e > data_end) {
                return Err("hash leaf names a block outside the table's data");
            }
            handles.push(h);
        }
        let base = HEADER_LEN + nb * HANDLE_LEN;
        let mut out = Vec::with_capacity(ns);
        for i in 0..ns {
            let s = u64_at(b, base + i * SLOT_LEN);
            if (s & u64::from(u32::MAX)) as usize >= nb {
                return Err("hash leaf slot names a block that does not exist");
            }
            if out.last().is_some_and(|&l| l >= s) {
                return Err("hash leaf slots out of order");
            }
            out.push(s);
        }
        Ok(Self::with_slots(handles, &out))
    }

    /// The same leaf with a slot for each of its signatures in every
    /// block: a lookup of any key it holds then meets every block (tests of
    /// signature collisions).
    #[cfg(test)]
    pub(crate) fn colliding(&self) -> Self {
        let mut sigs: Vec<u64> = self.sorted_slots().iter().map(|s| s >> 32).collect();
        sigs.dedup();
        let blocks = self.blocks.len() as u64;
        let slots: Vec<u64> = sigs
            .iter()
            .flat_map(|sig| (0..blocks).map(move |b| sig << 32 | b))
            .collect();
        Self::with_slots(self.blocks.clone(), &slots)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(i: u64) -> BlockHandle {
        BlockHandle {
            offset: i * 100,
            size: 90,
        }
    }

    #[test]
    fn slots_name_the_block_a_key_starts_in_and_decode_back() {
        // Keys 0..3 start in block 0, 3..4 in block 1, 4..7 in block 2;
        // keys 1 and 5 share a signature.
        let hashes = [
            1u64 << 32,
            7 << 32,
            3 << 32,
            9 << 32,
            11 << 32,
            7 << 32,
            2 << 32,
        ];
        let leaf = TableLeaf::build(&hashes, &[3, 4, 7], (0..3).map(handle).collect());
        let of = |h: u64| leaf.blocks_of(h).collect::<Vec<_>>();
        assert_eq!(of(9 << 32), vec![handle(1)]);
        let mut shared = of(7 << 32 | 5);
        shared.sort_by_key(|h| h.offset);
        assert_eq!(shared, vec![handle(0), handle(2)]);
        assert_eq!(of(2 << 32), vec![handle(2)]);
        assert!(of(4 << 32).is_empty());
        assert!(of(u64::MAX).is_empty());
        let bytes = leaf.encode();
        assert_eq!(TableLeaf::decode(&bytes, 300), Ok(leaf.clone()));
        assert!(
            TableLeaf::decode(&bytes, 289).is_err(),
            "block past the data"
        );
        assert!(TableLeaf::decode(&bytes[..bytes.len() - 1], 300).is_err());
        let mut swapped = bytes.clone();
        let base = HEADER_LEN + 3 * HANDLE_LEN;
        swapped[base..base + 16].rotate_left(8);
        assert!(
            TableLeaf::decode(&swapped, 300).is_err(),
            "slots out of order"
        );
        let mut far = bytes;
        far[base] = 9;
        assert!(TableLeaf::decode(&far, 300).is_err(), "no block 9");
    }
}
