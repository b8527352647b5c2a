//! Data and index blocks: entries with prefix-compressed keys and restart
//! points (LevelDB's block format).
//!
//! ```text
//! entry:   shared: varint32 | unshared: varint32 | value_len: varint32
//!          | key delta (unshared bytes) | value
//! block:   entry* | restart offsets: u32 × n | n: u32
//! ```
//! Every `restart_interval`-th entry stores its whole key (shared = 0) and
//! its offset is in the restart array, so a seek binary-searches restarts.
//! Decoding is bounds-checked: a damaged block makes the iterator invalid with
//! a `Corruption` status, never a panic.

use std::cmp::Ordering;
use std::path::PathBuf;
use std::sync::Arc;

use crate::coding::{get_varint32, put_u32, put_varint32, u32_at};
use crate::error::{Error, Result};
use crate::iter::InternalIterator;
use crate::key;

/// Builds one block.
pub(crate) struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    counter: usize,
    restart_interval: usize,
    last_key: Vec<u8>,
    entries: usize,
}

impl BlockBuilder {
    pub(crate) fn new(restart_interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            counter: 0,
            restart_interval: restart_interval.max(1),
            last_key: Vec::new(),
            entries: 0,
        }
    }

    /// Adds an entry; keys must arrive in increasing internal-key order.
    pub(crate) fn add(&mut self, k: &[u8], v: &[u8]) {
        let mut shared = 0;
        if self.counter < self.restart_interval {
            shared = k
                .iter()
                .zip(self.last_key.iter())
                .take_while(|(a, b)| a == b)
                .count();
        } else {
            self.restarts.push(self.buf.len() as u32);
            self.counter = 0;
        }
        put_varint32(&mut self.buf, shared as u32);
        put_varint32(&mut self.buf, (k.len() - shared) as u32);
        put_varint32(&mut self.buf, v.len() as u32);
        self.buf.extend_from_slice(&k[shared..]);
        self.buf.extend_from_slice(v);
        self.last_key.truncate(shared);
        self.last_key.extend_from_slice(&k[shared..]);
        self.counter += 1;
        self.entries += 1;
    }

    /// Size the finished block would have.
    pub(crate) fn size_estimate(&self) -> usize {
        self.buf.len() + self.restarts.len() * 4 + 4
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries == 0
    }

    pub(crate) fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Finishes the block and resets the builder.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        for r in &self.restarts {
            put_u32(&mut out, *r);
        }
        put_u32(&mut out, self.restarts.len() as u32);
        self.restarts = vec![0];
        self.counter = 0;
        self.last_key.clear();
        self.entries = 0;
        out
    }
}

/// A decoded block: its bytes and where the restart array starts.
pub(crate) struct Block {
    data: Vec<u8>,
    restarts_at: usize,
    num_restarts: usize,
    /// File and offset, for error messages.
    file: Arc<PathBuf>,
    offset: u64,
}

impl Block {
    pub(crate) fn new(data: Vec<u8>, file: Arc<PathBuf>, offset: u64) -> Result<Self> {
        let bad = |why: &str| Error::corruption(file.as_path(), offset, why.to_string());
        if data.len() < 4 {
            return Err(bad("block too short for its restart count"));
        }
        let n = u32_at(&data, data.len() - 4) as usize;
        let max = (data.len() - 4) / 4;
        if n == 0 || n > max {
            return Err(bad("bad restart count"));
        }
        let restarts_at = data.len() - 4 - 4 * n;
        Ok(Block {
            data,
            restarts_at,
            num_restarts: n,
            file,
            offset,
        })
    }

    /// Memory charged to the block cache.
    pub(crate) fn size(&self) -> usize {
        self.data.len() + size_of::<Self>()
    }

    fn restart(&self, i: usize) -> usize {
        u32_at(&self.data, self.restarts_at + 4 * i) as usize
    }

    pub(crate) fn iter(self: &Arc<Self>) -> BlockIter {
        BlockIter {
            block: self.clone(),
            current: self.restarts_at,
            next_at: self.restarts_at,
            restart_index: self.num_restarts,
            key: Vec::new(),
            value: (0, 0),
            status: Ok(()),
        }
    }
}

/// Cursor over a block. Invalid when `current == restarts_at`.
pub(crate) struct BlockIter {
    block: Arc<Block>,
    current: usize,
    next_at: usize,
    restart_index: usize,
    key: Vec<u8>,
    value: (usize, usize),
    status: Result<()>,
}

impl BlockIter {
    fn corrupt(&mut self, why: &str) {
        self.status = Err(Error::corruption(
            self.block.file.as_path(),
            self.block.offset + self.current as u64,
            format!("block entry: {why}"),
        ));
        self.current = self.block.restarts_at;
        self.next_at = self.block.restarts_at;
        self.key.clear();
    }

    /// Decodes the entry at `next_at`; false at the end or on damage.
    fn parse_next(&mut self) -> bool {
        self.current = self.next_at;
        let limit = self.block.restarts_at;
        if self.current >= limit {
            self.current = limit;
            self.restart_index = self.block.num_restarts;
            return false;
        }
        let data = &self.block.data[self.current..limit];
        let mut pos = 0;
        let mut field = || {
            let (v, n) = get_varint32(&data[pos..])?;
            pos += n;
            Some(v as usize)
        };
        let (Some(shared), Some(unshared), Some(vlen)) = (field(), field(), field()) else {
            self.corrupt("bad varint");
            return false;
        };
        let end = pos.checked_add(unshared).and_then(|e| e.checked_add(vlen));
        if shared > self.key.len() || end.is_none_or(|e| e > data.len()) {
            self.corrupt("entry runs past the block");
            return false;
        }
        self.key.truncate(shared);
        self.key.extend_from_slice(&data[pos..pos + unshared]);
        if !key::is_valid(&self.key) {
            self.corrupt("invalid internal key");
            return false;
        }
        let vstart = self.current + pos + unshared;
        self.value = (vstart, vlen);
        self.next_at = vstart + vlen;
        while self.restart_index + 1 < self.block.num_restarts
            && self.block.restart(self.restart_index + 1) <= self.current
        {
            self.restart_index += 1;
        }
        true
    }

    fn seek_to_restart(&mut self, i: usize) {
        self.key.clear();
        self.restart_index = i;
        let off = self.block.restart(i);
        if off > self.block.restarts_at {
            self.corrupt("restart offset past the entries");
            return;
        }
        self.next_at = off;
    }

    /// The key stored whole at restart `i`, for binary search.
    fn restart_key(&self, i: usize) -> Option<&[u8]> {
        let off = self.block.restart(i);
        let data = self.block.data.get(off..self.block.restarts_at)?;
        let (shared, a) = get_varint32(data)?;
        let (unshared, b) = get_varint32(&data[a..])?;
        let (_, c) = get_varint32(&data[a + b..])?;
        if shared != 0 {
            return None;
        }
        data.get(a + b + c..a + b + c + unshared as usize)
    }
}

impl InternalIterator for BlockIter {
    fn valid(&self) -> bool {
        self.current < self.block.restarts_at && self.status.is_ok()
    }
    fn seek_to_first(&mut self) {
        self.seek_to_restart(0);
        self.parse_next();
    }
    fn seek_to_last(&mut self) {
        self.seek_to_restart(self.block.num_restarts - 1);
        while self.parse_next() && self.next_at < self.block.restarts_at {}
    }
    fn seek(&mut self, target: &[u8]) {
        // Last restart whose key is < target.
        let (mut lo, mut hi) = (0usize, self.block.num_restarts - 1);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            let Some(k) = self.restart_key(mid) else {
                self.current = self.block.restart(mid).min(self.block.restarts_at);
                self.corrupt("bad restart entry");
                return;
            };
            if !key::is_valid(k) {
                self.corrupt("invalid key at restart");
                return;
            }
            if key::compare(k, target) == Ordering::Less {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        self.seek_to_restart(lo);
        while self.parse_next() {
            if key::compare(&self.key, target) != Ordering::Less {
                return;
            }
        }
    }
    fn next(&mut self) {
        debug_assert!(self.valid());
        self.parse_next();
    }
    fn prev(&mut self) {
        debug_assert!(self.valid());
        let original = self.current;
        while self.block.restart(self.restart_index) >= original {
            if self.restart_index == 0 {
                self.current = self.block.restarts_at;
                self.next_at = self.block.restarts_at;
                self.restart_index = self.block.num_restarts;
                return;
            }
            self.restart_index -= 1;
        }
        self.seek_to_restart(self.restart_index);
        while self.parse_next() && self.next_at < original {}
    }
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn value(&self) -> &[u8] {
        &self.block.data[self.value.0..self.value.0 + self.value.1]
    }
    fn status(&self) -> Result<()> {
        self.status.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(n: usize, interval: usize) -> (Arc<Block>, Vec<Vec<u8>>) {
        let mut b = BlockBuilder::new(interval);
        let mut keys = vec![];
        for i in 0..n {
            let k = key::encode(format!("key{i:05}").as_bytes(), 7, 1);
            b.add(&k, format!("v{i}").as_bytes());
            keys.push(k);
        }
        let block = Block::new(b.finish(), Arc::new("t".into()), 0).unwrap();
        (Arc::new(block), keys)
    }

    #[test]
    fn iterate_seek_and_reverse() {
        for interval in [1, 3, 16] {
            let (block, keys) = build(100, interval);
            let mut it = block.iter();
            it.seek_to_first();
            for k in &keys {
                assert_eq!(it.key(), k.as_slice());
                it.next();
            }
            assert!(!it.valid());
            it.seek_to_last();
            for k in keys.iter().rev() {
                assert_eq!(it.key(), k.as_slice());
                it.prev();
            }
            assert!(!it.valid());
            for (i, k) in keys.iter().enumerate() {
                it.seek(k);
                assert_eq!(it.key(), k.as_slice());
                assert_eq!(it.value(), format!("v{i}").as_bytes());
            }
            it.seek(&key::encode(b"key00050x", 7, 1));
            assert_eq!(it.key(), keys[51].as_slice());
            it.seek(&key::encode(b"zzz", 7, 1));
            assert!(!it.valid());
            assert!(it.status().is_ok());
        }
    }

    #[test]
    fn damaged_blocks_never_panic() {
        let (block, _) = build(40, 4);
        let raw = block.data.clone();
        for i in 0..raw.len() {
            for bit in [0x01u8, 0x80] {
                let mut d = raw.clone();
                d[i] ^= bit;
                let Ok(b) = Block::new(d, Arc::new("t".into()), 0) else {
                    continue;
                };
                let b = Arc::new(b);
                let mut it = b.iter();
                it.seek_to_first();
                let mut steps = 0;
                while it.valid() && steps < 1000 {
                    it.next();
                    steps += 1;
                }
                it.seek(&key::encode(b"key00020", 7, 1));
                it.seek_to_last();
                while it.valid() && steps < 2000 {
                    it.prev();
                    steps += 1;
                }
            }
        }
    }
}

/// The worked example of `docs/format/sstable.md`, byte for byte.
#[cfg(test)]
mod doc_example {
    use super::*;

    #[test]
    fn sstable_md_worked_example() {
        let mut b = BlockBuilder::new(16);
        let k = key::encode(b"k1", 5, 1);
        assert_eq!(k, [0x6b, 0x31, 0x01, 0x05, 0, 0, 0, 0, 0, 0]);
        b.add(&k, b"v1");
        let block = b.finish();
        let want: Vec<u8> = [
            &[0x00, 0x0a, 0x02][..],
            &k,
            b"v1",
            &[0, 0, 0, 0],
            &[1, 0, 0, 0],
        ]
        .concat();
        assert_eq!(block, want);
        assert_eq!(block.len(), 23);
    }
}
