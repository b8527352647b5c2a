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
use std::mem::size_of;
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
        // The first entry is always a restart: `restart(0)` answers 0
        // without reading the array, a cache line at the block's far end
        // that a point seek of a one-restart block (values of a kilobyte
        // and more) would touch for nothing else.
        if u32_at(&data, restarts_at) != 0 {
            return Err(bad("first restart not at the block's start"));
        }
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
        if i == 0 {
            return 0;
        }
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

impl Block {
    /// Entries, when every one is a restart (an index block's shape).
    fn entries_if_all_restarts(&self) -> usize {
        if self.restarts_at == 0 {
            0
        } else {
            self.num_restarts
        }
    }

    /// The entry at restart `i`, stored whole: its key, its value and where
    /// it ends; `None` when it is not whole or runs past the entries.
    fn whole_entry_at(&self, i: usize) -> Option<(&[u8], &[u8], usize)> {
        let off = self.restart(i);
        let data = self.data.get(off..self.restarts_at)?;
        let (shared, a) = get_varint32(data)?;
        let (unshared, b) = get_varint32(&data[a..])?;
        let (vlen, c) = get_varint32(&data[a + b..])?;
        let k_at = a + b + c;
        let v_at = k_at.checked_add(unshared as usize)?;
        let end = v_at.checked_add(vlen as usize)?;
        if shared != 0 || end > data.len() {
            return None;
        }
        Some((&data[k_at..v_at], &data[v_at..end], off + end))
    }
}

/// A point seek's way through an index block without its binary search
/// over restarts. That search touches a restart offset and a key far
/// apart in the block at each of its steps: some fourteen steps for the
/// 16,000 entries of a 64 MiB table's index, the last of them cache misses
/// each, which made it a fifth of `sluice serve`'s CPU under pipelined
/// `GET` (`docs/experiments.md`, "Point seeks through an index
/// directory"). The directory keeps 8 bytes of each entry's user key, the
/// ones after the prefix all entries share, in one dense array (8 keys a
/// cache line), and compares whole keys only among the entries whose 8
/// bytes tie with the target's (in practice none or one).
///
/// The 8 bytes are the user key's, big-endian, zero-padded: for user keys
/// `a <= b`, `pad(a) <= pad(b)`, so an entry whose bytes are below the
/// target's is below the target, and one whose bytes are above is above
/// it. The trailer never enters them: internal keys order it descending.
pub(crate) struct SeekDirectory {
    /// The user-key prefix of every entry (of the first and last entries,
    /// so of all between them).
    common: Box<[u8]>,
    prefixes: Box<[u64]>,
}

/// Up to 8 bytes as a big-endian number, zero-padded.
fn pad8(b: &[u8]) -> u64 {
    let mut x = [0u8; 8];
    let n = b.len().min(8);
    x[..n].copy_from_slice(&b[..n]);
    u64::from_be_bytes(x)
}

impl SeekDirectory {
    /// The directory of an index block; `None` unless every entry is a
    /// whole, valid restart entry (such a block is searched as before, and
    /// its damage reported there).
    pub(crate) fn build(block: &Block) -> Option<SeekDirectory> {
        let n = block.entries_if_all_restarts();
        let mut users = Vec::with_capacity(n);
        let mut end_before = 0;
        for i in 0..n {
            let (k, _, end) = block.whole_entry_at(i)?;
            let next = if i + 1 < n {
                block.restart(i + 1)
            } else {
                block.restarts_at
            };
            if block.restart(i) != end_before || end != next || !key::is_valid(k) {
                return None;
            }
            end_before = end;
            users.push(key::user_key(k));
        }
        let common: &[u8] = match (users.first(), users.last()) {
            (Some(first), Some(last)) => {
                let len = first.iter().zip(*last).take_while(|(a, b)| a == b).count();
                &first[..len]
            }
            _ => &[],
        };
        let prefixes = users.iter().map(|u| pad8(&u[common.len()..])).collect();
        Some(SeekDirectory {
            common: common.into(),
            prefixes,
        })
    }

    /// Bytes it holds.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.common.len() + 8 * self.prefixes.len() + size_of::<Self>()
    }

    /// The entry a seek of `block` (the one it was built from) to `target`
    /// lands on, key and value, as [`BlockIter::seek`] would; `None` past
    /// the last.
    pub(crate) fn seek<'b>(&self, block: &'b Block, target: &[u8]) -> Option<(&'b [u8], &'b [u8])> {
        let at = self.seek_entry(block, target);
        (at < self.prefixes.len()).then(|| {
            let (k, v, _) = block.whole_entry_at(at).expect("checked when built");
            (k, v)
        })
    }

    /// The number of the entry a seek of `block` (the one it was built
    /// from) to `target` lands on, as [`BlockIter::seek`] would; the
    /// number of entries past the last.
    pub(crate) fn seek_entry(&self, block: &Block, target: &[u8]) -> usize {
        let n = self.prefixes.len();
        let user = key::user_key(target);
        let c = self.common.len();
        let (lo, hi) = if user.len() >= c && user[..c] == self.common[..] {
            let t = pad8(&user[c..]);
            let lo = self.prefixes.partition_point(|&p| p < t);
            // The entries tying with the target's 8 bytes follow `lo`
            // (none or one in practice): a galloping search from there
            // reads the cache line `lo` is in, where a second binary
            // search over the rest of the array missed the cache at each
            // of its lower steps.
            let rest = &self.prefixes[lo..];
            let mut end = 1;
            while end < rest.len() && rest[end - 1] <= t {
                end *= 2;
            }
            let end = end.min(rest.len());
            (lo, lo + rest[..end].partition_point(|&p| p <= t))
        } else {
            // Apart within the shared prefix: below or above every entry.
            let m = user.len().min(c);
            match user[..m].cmp(&self.common[..m]) {
                Ordering::Greater => (n, n),
                _ => (0, 0),
            }
        };
        let entry = |i: usize| block.whole_entry_at(i).expect("checked when built");
        let (mut a, mut b) = (lo, hi);
        while a < b {
            let mid = a + (b - a) / 2;
            if key::compare(entry(mid).0, target) == Ordering::Less {
                a = mid + 1;
            } else {
                b = mid;
            }
        }
        a
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

    /// Positions on entry `i` of a block whose entries are all restarts
    /// (an index block with a [`SeekDirectory`]); invalid past the last.
    pub(crate) fn seek_to_entry(&mut self, i: usize) {
        if i >= self.block.num_restarts {
            self.current = self.block.restarts_at;
            self.next_at = self.block.restarts_at;
            self.restart_index = self.block.num_restarts;
            self.key.clear();
            return;
        }
        self.seek_to_restart(i);
        self.parse_next();
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

    /// The directory lands where the block's own seek does (and a cursor it
    /// places with it), over keys that
    /// share long prefixes, are prefixes of each other, repeat with other
    /// sequence numbers, and targets inside, between and outside them.
    #[test]
    fn a_seek_directory_lands_where_the_blocks_seek_does() {
        use rand::{Rng, SeedableRng};
        let seed: u64 = std::env::var("SEEK_DIR_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(rand::random);
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let user = |rng: &mut rand::rngs::StdRng| -> Vec<u8> {
            let mut k = match rng.gen_range(0..3) {
                0 => b"key:0000000".to_vec(),
                1 => b"key:".to_vec(),
                _ => Vec::new(),
            };
            let len = rng.gen_range(0..12);
            k.extend(
                (0..len).map(|_| *[0u8, 1, b'a', b'b', 0xff].get(rng.gen_range(0..5)).unwrap()),
            );
            k
        };
        for round in 0..300 {
            let n = rng.gen_range(0..60);
            let mut entries: Vec<(Vec<u8>, u64)> = (0..n)
                .map(|_| (user(&mut rng), rng.gen_range(1..5)))
                .collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
            entries.dedup();
            let mut b = BlockBuilder::new(1);
            for (i, (u, seq)) in entries.iter().enumerate() {
                b.add(&key::encode(u, *seq, 1), format!("v{i}").as_bytes());
            }
            let block = Arc::new(Block::new(b.finish(), Arc::new("t".into()), 0).unwrap());
            let dir = SeekDirectory::build(&block)
                .unwrap_or_else(|| panic!("seed {seed} round {round}: no directory"));
            let mut it = block.iter();
            for _ in 0..200 {
                let target = key::encode(&user(&mut rng), rng.gen_range(0..6), 1);
                it.seek(&target);
                let want = it.valid().then(|| (it.key().to_vec(), it.value().to_vec()));
                let got = dir
                    .seek(&block, &target)
                    .map(|(k, v)| (k.to_vec(), v.to_vec()));
                assert_eq!(got, want, "seed {seed} round {round}: target {target:?}");
                // A cursor placed by the directory (a table iterator's
                // seek) stands where the block's seek does, and steps on
                // from there alike.
                let mut placed = block.iter();
                placed.seek_to_entry(dir.seek_entry(&block, &target));
                for _ in 0..2 {
                    let at = placed
                        .valid()
                        .then(|| (placed.key().to_vec(), placed.value().to_vec()));
                    let want = it.valid().then(|| (it.key().to_vec(), it.value().to_vec()));
                    assert_eq!(at, want, "seed {seed} round {round}: placed at {target:?}");
                    if !it.valid() {
                        break;
                    }
                    placed.next();
                    it.next();
                }
            }
        }
        // A data block (restart interval 16) gets none.
        let (block, _) = build(40, 16);
        assert!(SeekDirectory::build(&block).is_none());
    }

    #[test]
    fn a_block_whose_first_restart_is_not_its_start_is_damaged() {
        let (block, _) = build(10, 4);
        let mut d = block.data.clone();
        let at = block.restarts_at;
        d[at] = 3;
        let e = Block::new(d, Arc::new("t".into()), 0)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("first restart"), "{e}");
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
