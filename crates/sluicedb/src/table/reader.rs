//! Opens a table file, answers point lookups and iterates it.

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::block::{Block, BlockIter, SeekDirectory};
use super::block_cache::BlockCache;
use super::bloom;
use super::builder::TableProperties;
use super::format::{
    verify_block, BlockHandle, Footer, FooterKind, BLOCK_TRAILER_LEN,
    DECOUPLED_TABLE_FORMAT_VERSION, FOOTER_LEN,
};
use super::leaf::TableLeaf;
use crate::error::{Error, Result};
use crate::fs::{CountedReader, CountingFs, IoClass};
use crate::iter::{InternalIterator, MergingIterator};
use crate::key;

/// Tells open tables apart within the process (table numbers repeat across
/// databases), for [`SortedProbes`].
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

/// Data blocks a thread's sorted probes met last, at most this many.
const MEMO_BLOCKS: usize = 16;

/// A data block a probe of this thread found through a table's index, with
/// the range of seek keys whose index seek lands on it.
struct MemoBlock {
    table: u64,
    /// Of the pointer index (index-decoupled tables), not the data index.
    pointers: bool,
    /// A seek that landed on it: the previous block's last key is smaller.
    lower: Vec<u8>,
    /// The block's last key (its index key).
    upper: Vec<u8>,
    block: Arc<Block>,
}

thread_local! {
    /// `Some` while a [`SortedProbes`] guard is alive on this thread.
    static MEMO: RefCell<Option<Vec<MemoBlock>>> = const { RefCell::new(None) };
    /// True while a [`SortedProbes::uncached`] guard is alive on this thread.
    static NO_FILL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// While alive, point lookups on this thread remember the data block each
/// table's index led them to, and a later lookup whose seek key falls in the
/// same block's range skips the index seek and the block cache. For a job
/// that probes in ascending key order and meets the same blocks many times
/// over: a flush's lookups of the versions it shadows (about 5 of its keys
/// per 4 KiB block of a pointer index's L1), a GC step's validity lookups.
/// Any order stays correct; only ascending ones hit.
pub(crate) struct SortedProbes {
    outer: Option<Vec<MemoBlock>>,
    outer_no_fill: bool,
}

impl SortedProbes {
    pub(crate) fn start() -> SortedProbes {
        Self::with_fill(true)
    }

    /// As [`SortedProbes::start`], and the blocks the probes read stay out
    /// of the block cache (they are still found there): the thread's
    /// remembered blocks serve the probes' locality. For a GC step's
    /// validity lookups, which walk a victim's keys once (RocksDB reads
    /// for compactions without filling its cache for the same reason):
    /// they filled the cache to its budget in update-only workloads, where
    /// nothing else reads, and pushed out the blocks users read.
    pub(crate) fn uncached() -> SortedProbes {
        Self::with_fill(false)
    }

    fn with_fill(fill: bool) -> SortedProbes {
        SortedProbes {
            outer: MEMO.with(|m| m.replace(Some(Vec::new()))),
            outer_no_fill: NO_FILL.with(|f| f.replace(!fill)),
        }
    }
}

impl Drop for SortedProbes {
    fn drop(&mut self) {
        MEMO.with(|m| *m.borrow_mut() = self.outer.take());
        NO_FILL.with(|f| f.set(self.outer_no_fill));
    }
}

/// The remembered block of `table`'s index (`pointers`) whose range holds
/// `seek`, if this thread remembers one.
fn memo_get(table: u64, pointers: bool, seek: &[u8]) -> Option<Arc<Block>> {
    MEMO.with(|m| {
        let m = m.borrow();
        let e = m
            .as_ref()?
            .iter()
            .find(|e| e.table == table && e.pointers == pointers)?;
        let within = key::compare(&e.lower, seek).is_le() && key::compare(seek, &e.upper).is_le();
        within.then(|| e.block.clone())
    })
}

/// Remembers that an index seek for `seek` landed on `block`, indexed under
/// `upper`, when this thread probes in sorted order.
fn memo_put(table: u64, pointers: bool, seek: &[u8], upper: &[u8], block: &Arc<Block>) {
    MEMO.with(|m| {
        let mut m = m.borrow_mut();
        let Some(memo) = m.as_mut() else {
            return;
        };
        let i = match memo
            .iter()
            .position(|e| e.table == table && e.pointers == pointers)
        {
            Some(i) => i,
            None if memo.len() < MEMO_BLOCKS => {
                memo.push(MemoBlock {
                    table,
                    pointers,
                    lower: Vec::new(),
                    upper: Vec::new(),
                    block: block.clone(),
                });
                memo.len() - 1
            }
            // The oldest entry goes.
            None => {
                memo.rotate_left(1);
                MEMO_BLOCKS - 1
            }
        };
        let e = &mut memo[i];
        e.table = table;
        e.pointers = pointers;
        e.lower.clear();
        e.lower.extend_from_slice(seek);
        e.upper.clear();
        e.upper.extend_from_slice(upper);
        e.block = block.clone();
    })
}

/// An open table. Indexes, filter and properties stay in memory; data and
/// pointer blocks go through the block cache.
pub(crate) struct Table {
    /// Unique among the tables open in this process ([`SortedProbes`]).
    id: u64,
    number: u64,
    path: Arc<PathBuf>,
    file: CountedReader,
    file_size: u64,
    index: Arc<Block>,
    /// The pointer index of an index-decoupled table (format version 3).
    pointers: Option<Arc<Block>>,
    /// Point seeks' ways through `index` and `pointers`
    /// ([`SeekDirectory`]; none for a block of another shape).
    index_dir: Option<SeekDirectory>,
    pointers_dir: Option<SeekDirectory>,
    /// The filter of the keys in the data blocks (all keys of a plain table).
    filter: Vec<u8>,
    /// The filter of the keys in the pointer blocks.
    pointer_filter: Vec<u8>,
    /// The hash leaf of a table written with one (the lightkv preset):
    /// point lookups go through it instead of filter and index.
    leaf: Option<TableLeaf>,
    properties: TableProperties,
    cache: Arc<BlockCache>,
    /// Where its index and filter bytes are counted while it is open
    /// ([`Table::count_memory_in`]).
    counted_in: std::sync::OnceLock<Arc<AtomicU64>>,
}

impl Drop for Table {
    fn drop(&mut self) {
        if let Some(c) = self.counted_in.get() {
            c.fetch_sub(self.memory_bytes(), Ordering::Relaxed);
        }
    }
}

impl Table {
    /// Bytes it holds in memory while open, outside the block cache: its
    /// index blocks and filters.
    pub(crate) fn memory_bytes(&self) -> u64 {
        let blocks = self.index.size() + self.pointers.as_ref().map_or(0, |p| p.size());
        let dirs = [&self.index_dir, &self.pointers_dir]
            .iter()
            .filter_map(|d| d.as_ref())
            .map(SeekDirectory::memory_bytes)
            .sum::<usize>();
        let leaf = self.leaf.as_ref().map_or(0, TableLeaf::memory_bytes);
        (blocks + dirs + self.filter.len() + self.pointer_filter.len() + leaf) as u64
    }

    /// Counts [`Table::memory_bytes`] in `counter` until it is dropped
    /// (once; a second call does nothing).
    pub(crate) fn count_memory_in(&self, counter: &Arc<AtomicU64>) {
        if self.counted_in.set(counter.clone()).is_ok() {
            counter.fetch_add(self.memory_bytes(), Ordering::Relaxed);
        }
    }

    pub(crate) fn open(
        fs: &CountingFs,
        path: PathBuf,
        number: u64,
        file_size: u64,
        cache: Arc<BlockCache>,
        class: IoClass,
    ) -> Result<Table> {
        let (file, path, footer) = open_footer(fs, path, file_size, FooterKind::TABLE, 0, class)?;
        let read = |h: BlockHandle| read_raw(&file, &path, file_size, h, class);
        let index = Arc::new(Block::new(
            read(footer.index)?,
            path.clone(),
            footer.index.offset,
        )?);
        let filter = if footer.filter.size > 0 {
            read(footer.filter)?
        } else {
            Vec::new()
        };
        let properties = TableProperties::decode(&read(footer.properties)?).ok_or_else(|| {
            Error::corruption(
                path.as_path(),
                footer.properties.offset,
                "bad properties block",
            )
        })?;
        let (pointers, pointer_filter) = if footer.format_version >= DECOUPLED_TABLE_FORMAT_VERSION
        {
            let (h, f) = (properties.pointer_index, properties.pointer_filter);
            if h.size == 0 || f.size == 0 {
                return Err(Error::corruption(
                    path.as_path(),
                    footer.properties.offset,
                    "index-decoupled table without a pointer index and filter",
                ));
            }
            let index = Block::new(read(h)?, path.clone(), h.offset)?;
            (Some(Arc::new(index)), read(f)?)
        } else {
            (None, Vec::new())
        };
        let leaf = match properties.leaf {
            h if h.size == 0 || pointers.is_some() => None,
            h => Some(
                TableLeaf::decode(&read(h)?, h.offset)
                    .map_err(|why| Error::corruption(path.as_path(), h.offset, why))?,
            ),
        };
        Ok(Table {
            id: NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed),
            number,
            path,
            file,
            file_size,
            index_dir: SeekDirectory::build(&index),
            pointers_dir: pointers.as_deref().and_then(SeekDirectory::build),
            index,
            pointers,
            filter,
            pointer_filter,
            leaf,
            properties,
            cache,
            counted_in: std::sync::OnceLock::new(),
        })
    }

    fn read_raw(&self, h: BlockHandle, class: IoClass) -> Result<Vec<u8>> {
        read_raw(&self.file, &self.path, self.file_size, h, class)
    }

    fn read_block(&self, h: BlockHandle, class: IoClass, fill_cache: bool) -> Result<Arc<Block>> {
        self.cache
            .get_or_read(self.number, h.offset, fill_cache, || {
                let data = self.read_raw(h, class)?;
                Ok(Arc::new(Block::new(data, self.path.clone(), h.offset)?))
            })
    }

    /// The first entry at or after `seek` (an internal key) if it has user
    /// key `user_key`; the bloom filter answers most misses without I/O.
    ///
    /// In an index-decoupled table a user key's entries are all in the
    /// pointer blocks or all in the data blocks, each stream with its own
    /// filter: a separated key reads one pointer block and no data block
    /// (GC's GetKey, Scavenger (VLDB) §3.3.2), an inline one one data block and no
    /// pointer block, but for filter false positives.
    pub(crate) fn get(
        &self,
        seek: &[u8],
        user_key: &[u8],
        hash: u64,
        class: IoClass,
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if let Some(leaf) = &self.leaf {
            return self.get_by_leaf(leaf, seek, user_key, hash, class);
        }
        let may = |filter: &[u8]| filter.is_empty() || bloom::may_contain(filter, hash);
        if let Some(pointers) = &self.pointers {
            if may(&self.pointer_filter) {
                let dir = self.pointers_dir.as_ref();
                if let Some(hit) = self.get_in(pointers, dir, true, seek, user_key, class)? {
                    return Ok(Some(hit));
                }
            }
        }
        if !may(&self.filter) {
            return Ok(None);
        }
        let dir = self.index_dir.as_ref();
        self.get_in(&self.index, dir, false, seek, user_key, class)
    }

    /// `get` through the hash leaf: each block it names for the key's
    /// signature is searched for the key (no index seek); none named is an
    /// exact miss. A key starts in the block the leaf names, so a seek
    /// there lands on the key's newest entry at or below the snapshot, or
    /// on a later key (the table has none), or past the block's end: the
    /// key's older entries may go on in the next block, and the index
    /// decides.
    fn get_by_leaf(
        &self,
        leaf: &TableLeaf,
        seek: &[u8],
        user_key: &[u8],
        hash: u64,
        class: IoClass,
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let fill = !NO_FILL.with(|f| f.get());
        for h in leaf.blocks_of(hash) {
            let block = self.read_block(h, class, fill)?;
            let mut it = block.iter();
            it.seek(seek);
            it.status()?;
            if !it.valid() {
                let dir = self.index_dir.as_ref();
                return self.get_in(&self.index, dir, false, seek, user_key, class);
            }
            if key::user_key(it.key()) == user_key {
                return Ok(Some((it.key().to_vec(), it.value().to_vec())));
            }
        }
        Ok(None)
    }

    /// `get` in the blocks under one index (the pointer index when
    /// `pointers`).
    fn get_in(
        &self,
        index: &Arc<Block>,
        dir: Option<&SeekDirectory>,
        pointers: bool,
        seek: &[u8],
        user_key: &[u8],
        class: IoClass,
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let block = match memo_get(self.id, pointers, seek) {
            Some(block) => block,
            None => {
                let mut it;
                let (last_key, handle) = match dir {
                    Some(dir) => match dir.seek(index, seek) {
                        Some(entry) => entry,
                        None => return Ok(None),
                    },
                    None => {
                        it = index.iter();
                        it.seek(seek);
                        it.status()?;
                        if !it.valid() {
                            return Ok(None);
                        }
                        (it.key(), it.value())
                    }
                };
                let h = self.decode_handle(handle)?;
                let fill = !NO_FILL.with(|f| f.get());
                let block = self.read_block(h, class, fill)?;
                memo_put(self.id, pointers, seek, last_key, &block);
                block
            }
        };
        let mut it = block.iter();
        it.seek(seek);
        it.status()?;
        if it.valid() && key::user_key(it.key()) == user_key {
            return Ok(Some((it.key().to_vec(), it.value().to_vec())));
        }
        Ok(None)
    }

    /// The table's file.
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// One line about the table's shape, for `dump`.
    pub(crate) fn describe(&self) -> String {
        let p = &self.properties;
        let shape = if self.pointers.is_some() {
            format!(
                "index-decoupled, {} data blocks, {} pointer blocks",
                p.data_blocks, p.pointer_blocks
            )
        } else {
            format!("{} data blocks", p.data_blocks)
        };
        format!(
            "table {}: {} entries ({} pointers, {} deletions), {shape}",
            self.number, p.entries, p.value_pointers, p.deletions
        )
    }

    fn decode_handle(&self, v: &[u8]) -> Result<BlockHandle> {
        BlockHandle::decode(v).ok_or_else(|| {
            Error::corruption(self.path.as_path(), 0, "bad block handle in the index")
        })
    }

    /// An iterator reading blocks for `class`; `fill_cache` off keeps
    /// compactions from flushing the cache.
    pub(crate) fn iter(self: &Arc<Self>, class: IoClass, fill_cache: bool) -> TableIter {
        let records = self.blocks_under(false, class, fill_cache);
        match &self.pointers {
            None => TableIter::Plain(records),
            Some(_) => TableIter::Decoupled(MergingIterator::new(vec![
                Box::new(records),
                Box::new(self.blocks_under(true, class, fill_cache)),
            ])),
        }
    }

    /// The blocks under the index, or under the pointer index when
    /// `pointers` (the table has one).
    fn blocks_under(
        self: &Arc<Self>,
        pointers: bool,
        class: IoClass,
        fill_cache: bool,
    ) -> TwoLevelIter {
        let index = match (&self.pointers, pointers) {
            (Some(p), true) => p,
            _ => &self.index,
        };
        TwoLevelIter {
            table: self.clone(),
            index: index.iter(),
            pointers,
            data: None,
            data_handle: None,
            class,
            fill_cache,
            status: Ok(()),
        }
    }

    /// The internal key of the first inline put (`Kind::Value`) of each of
    /// `n` data blocks spread evenly over the table (blocks in the middle
    /// of `n` equal shares of its data index; all of them when it has fewer),
    /// skipping a block that holds none. Reads at most `n` blocks, past the
    /// cache (`docs/design.md`, "What is measured": the sample of dead
    /// inline versions after an open).
    pub(crate) fn sample_inline_puts(&self, n: usize, class: IoClass) -> Result<Vec<Vec<u8>>> {
        // Every table's properties count its data blocks, the entries of
        // its data index.
        let blocks = self.properties.data_blocks as usize;
        let n = n.min(blocks);
        let mut out = Vec::with_capacity(n);
        let (mut at, mut i) = (0usize, 0usize);
        let mut index = self.index.iter();
        index.seek_to_first();
        while index.valid() && i < n {
            // The middle block of share `i`.
            if at == (2 * i + 1) * blocks / (2 * n) {
                i += 1;
                let block = self.read_block(self.decode_handle(index.value())?, class, false)?;
                let mut it = block.iter();
                it.seek_to_first();
                while it.valid() && key::kind_byte(it.key()) != key::Kind::Value as u8 {
                    it.next();
                }
                it.status()?;
                if it.valid() {
                    out.push(it.key().to_vec());
                }
            }
            at += 1;
            index.next();
        }
        index.status()?;
        Ok(out)
    }

    /// Reads every block and checks every checksum and entry (for `verify`).
    pub(crate) fn verify(self: &Arc<Self>) -> Result<u64> {
        self.verify_as(IoClass::UserRead)
    }

    /// [`Table::verify`], its reads counted as `class`'s.
    pub(crate) fn verify_as(self: &Arc<Self>, class: IoClass) -> Result<u64> {
        let mut it = self.iter(class, false);
        it.seek_to_first();
        let mut n = 0;
        let mut last: Option<Vec<u8>> = None;
        while it.valid() {
            if let Some(l) = &last {
                if key::compare(l, it.key()).is_ge() {
                    return Err(Error::corruption(
                        self.path.as_path(),
                        0,
                        "keys out of order",
                    ));
                }
            }
            last = Some(it.key().to_vec());
            n += 1;
            it.next();
        }
        it.status()?;
        if n != self.properties.entries {
            return Err(Error::corruption(
                self.path.as_path(),
                0,
                format!(
                    "table holds {n} entries, its properties say {}",
                    self.properties.entries
                ),
            ));
        }
        Ok(n)
    }
}

/// Opens a table-shaped file (a key table, or a value table with its
/// `header_len` bytes of header): checks its length against the manifest's
/// and reads and checks its footer.
pub(crate) fn open_footer(
    fs: &CountingFs,
    path: PathBuf,
    file_size: u64,
    kind: FooterKind,
    header_len: usize,
    class: IoClass,
) -> Result<(CountedReader, Arc<PathBuf>, Footer)> {
    let file = fs.open(&path)?;
    let path = Arc::new(path);
    let what = kind.what;
    if file.len() != file_size {
        return Err(Error::corruption(
            path.as_path(),
            file.len(),
            format!(
                "{what} is {} bytes, the manifest says {file_size}",
                file.len()
            ),
        ));
    }
    if file_size < (header_len + FOOTER_LEN) as u64 {
        return Err(Error::corruption(
            path.as_path(),
            0,
            format!("{what} shorter than its header and footer"),
        ));
    }
    let footer_at = file_size - FOOTER_LEN as u64;
    let raw = file.read_at(footer_at, FOOTER_LEN, class)?;
    let footer = Footer::decode_as(&raw, &path, footer_at, kind)?;
    Ok((file, path, footer))
}

/// Reads and checks a block (without the cache).
pub(crate) fn read_raw(
    file: &CountedReader,
    path: &Arc<PathBuf>,
    file_size: u64,
    h: BlockHandle,
    class: IoClass,
) -> Result<Vec<u8>> {
    let limit = file_size - FOOTER_LEN as u64;
    let end = h
        .offset
        .checked_add(h.size)
        .and_then(|e| e.checked_add(BLOCK_TRAILER_LEN as u64));
    if end.is_none_or(|e| e > limit) {
        return Err(Error::corruption(
            path.as_path(),
            h.offset,
            format!("block handle ({}, {}) outside the table", h.offset, h.size),
        ));
    }
    let raw = file.read_at(h.offset, h.size as usize + BLOCK_TRAILER_LEN, class)?;
    verify_block(raw, path, h.offset)
}

/// A table's entries in order: one two-level iterator for a plain table;
/// for an index-decoupled one, the data blocks' and the pointer blocks'
/// merged.
#[expect(
    clippy::large_enum_variant,
    reason = "plain tables are the common case; a box would cost them an allocation"
)]
pub(crate) enum TableIter {
    Plain(TwoLevelIter),
    Decoupled(MergingIterator),
}

impl TableIter {
    fn inner(&self) -> &dyn InternalIterator {
        match self {
            TableIter::Plain(i) => i,
            TableIter::Decoupled(i) => i,
        }
    }
    fn inner_mut(&mut self) -> &mut dyn InternalIterator {
        match self {
            TableIter::Plain(i) => i,
            TableIter::Decoupled(i) => i,
        }
    }
}

impl InternalIterator for TableIter {
    fn valid(&self) -> bool {
        self.inner().valid()
    }
    fn seek_to_first(&mut self) {
        self.inner_mut().seek_to_first()
    }
    fn seek_to_last(&mut self) {
        self.inner_mut().seek_to_last()
    }
    fn seek(&mut self, target: &[u8]) {
        self.inner_mut().seek(target)
    }
    fn next(&mut self) {
        self.inner_mut().next()
    }
    fn prev(&mut self) {
        self.inner_mut().prev()
    }
    fn key(&self) -> &[u8] {
        self.inner().key()
    }
    fn value(&self) -> &[u8] {
        self.inner().value()
    }
    fn status(&self) -> Result<()> {
        self.inner().status()
    }
}

/// Two-level iterator: an index block selects data (or pointer) blocks.
pub(crate) struct TwoLevelIter {
    table: Arc<Table>,
    index: BlockIter,
    /// Whether `index` is the table's pointer index (else its index).
    pointers: bool,
    data: Option<BlockIter>,
    data_handle: Option<BlockHandle>,
    class: IoClass,
    fill_cache: bool,
    status: Result<()>,
}

impl TwoLevelIter {
    fn load_block(&mut self) {
        if !self.index.valid() {
            self.data = None;
            self.data_handle = None;
            return;
        }
        let h = match self.table.decode_handle(self.index.value()) {
            Ok(h) => h,
            Err(e) => {
                self.fail(e);
                return;
            }
        };
        if self.data.is_some() && self.data_handle == Some(h) {
            return;
        }
        match self.table.read_block(h, self.class, self.fill_cache) {
            Ok(b) => {
                self.data = Some(b.iter());
                self.data_handle = Some(h);
            }
            Err(e) => self.fail(e),
        }
    }

    fn fail(&mut self, e: Error) {
        if self.status.is_ok() {
            self.status = Err(e);
        }
        self.data = None;
        self.data_handle = None;
    }

    fn data_valid(&self) -> bool {
        self.data.as_ref().is_some_and(|d| d.valid())
    }

    fn data_failed(&mut self) -> bool {
        if let Some(Err(e)) = self.data.as_ref().map(|d| d.status()) {
            self.fail(e);
            return true;
        }
        self.status.is_err()
    }

    fn skip_empty_forward(&mut self) {
        while !self.data_valid() {
            if self.data_failed() || !self.index.valid() {
                self.data = None;
                return;
            }
            self.index.next();
            self.load_block();
            if let Some(d) = self.data.as_mut() {
                d.seek_to_first();
            }
        }
    }

    fn skip_empty_backward(&mut self) {
        while !self.data_valid() {
            if self.data_failed() || !self.index.valid() {
                self.data = None;
                return;
            }
            self.index.prev();
            self.load_block();
            if let Some(d) = self.data.as_mut() {
                d.seek_to_last();
            }
        }
    }
}

impl InternalIterator for TwoLevelIter {
    fn valid(&self) -> bool {
        self.status.is_ok() && self.data_valid()
    }
    fn seek_to_first(&mut self) {
        self.index.seek_to_first();
        self.load_block();
        if let Some(d) = self.data.as_mut() {
            d.seek_to_first();
        }
        self.skip_empty_forward();
    }
    fn seek_to_last(&mut self) {
        self.index.seek_to_last();
        self.load_block();
        if let Some(d) = self.data.as_mut() {
            d.seek_to_last();
        }
        self.skip_empty_backward();
    }
    /// The index is sought through its [`SeekDirectory`] where it has one,
    /// as point lookups do: a scan's seek in each member of a lightkv
    /// partition otherwise binary-searched the index block's restarts, a
    /// cache miss a step (`docs/experiments.md`, "LightKV: seeks through
    /// the index directory and merges without a layer per table").
    fn seek(&mut self, target: &[u8]) {
        let t = &self.table;
        let (index, dir) = match (&t.pointers, self.pointers) {
            (Some(p), true) => (p, t.pointers_dir.as_ref()),
            _ => (&t.index, t.index_dir.as_ref()),
        };
        match dir {
            Some(dir) => {
                let at = dir.seek_entry(index, target);
                self.index.seek_to_entry(at);
            }
            None => self.index.seek(target),
        }
        self.load_block();
        if let Some(d) = self.data.as_mut() {
            d.seek(target);
        }
        self.skip_empty_forward();
    }
    fn next(&mut self) {
        if let Some(d) = self.data.as_mut() {
            d.next();
        }
        self.skip_empty_forward();
    }
    fn prev(&mut self) {
        if let Some(d) = self.data.as_mut() {
            d.prev();
        }
        self.skip_empty_backward();
    }
    fn key(&self) -> &[u8] {
        self.data.as_ref().expect("valid iterator").key()
    }
    fn value(&self) -> &[u8] {
        self.data.as_ref().expect("valid iterator").value()
    }
    fn status(&self) -> Result<()> {
        self.status.clone()?;
        self.index.status()?;
        match &self.data {
            Some(d) => d.status(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{Fs, MemFs};
    use crate::key::Kind;
    use crate::table::builder::{TableBuilder, TableOptions};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::path::Path;

    const OPTS: TableOptions = TableOptions {
        block_size_bytes: 256,
        restart_interval: 4,
        bloom_bits_per_key: 10,
        decoupled: false,
        hash_leaf: false,
    };
    const DECOUPLED: TableOptions = TableOptions {
        decoupled: true,
        ..OPTS
    };

    fn build(mem: &MemFs, n: usize) -> (CountingFs, u64, Vec<Vec<u8>>) {
        let fs = CountingFs::new(Arc::new(mem.clone()));
        mem.create_dir_all(Path::new("/db")).unwrap();
        let w = fs
            .create(Path::new("/db/000001.sst"), IoClass::Flush)
            .unwrap();
        let mut b = TableBuilder::new(w, OPTS);
        let mut keys = vec![];
        for i in 0..n {
            let k = key::encode(format!("k{i:05}").as_bytes(), 100 + i as u64, 1);
            b.add(&k, format!("value{i}").as_bytes()).unwrap();
            keys.push(k);
        }
        let built = b.finish().unwrap();
        assert_eq!(built.properties.entries, n as u64);
        (fs, built.file_size, keys)
    }

    #[test]
    fn open_tables_count_their_index_and_filters_until_closed() {
        let mem = MemFs::new();
        let (fs, size, _) = build(&mem, 2_000);
        let blocks = Arc::new(BlockCache::new(1 << 20));
        let tables = crate::table::cache::TableCache::new(fs, "/db".into(), 4, blocks);
        assert_eq!(tables.open_table_bytes(), 0);
        let t = tables.get(1, size, IoClass::UserRead).unwrap();
        let held = t.memory_bytes();
        // 2,000 keys: a filter of 10 bits a key and an index of some 100
        // blocks' handles.
        assert!(held > 2_000 * 10 / 8, "{held}");
        assert_eq!(tables.open_table_bytes(), held);
        // A second lookup finds it open: counted once.
        drop(tables.get(1, size, IoClass::UserRead).unwrap());
        assert_eq!(tables.open_table_bytes(), held);
        // Evicted, it stays counted while a reader holds it.
        tables.evict(1);
        assert_eq!(tables.open_table_bytes(), held);
        drop(t);
        assert_eq!(tables.open_table_bytes(), 0);
    }

    fn open(fs: &CountingFs, size: u64) -> Result<Arc<Table>> {
        Table::open(
            fs,
            "/db/000001.sst".into(),
            1,
            size,
            Arc::new(BlockCache::new(1 << 20)),
            IoClass::UserRead,
        )
        .map(Arc::new)
    }

    /// A sample of inline puts takes one from each of `n` evenly spread
    /// data blocks (a block's first put, past its tombstones), in key
    /// order, and every block's when asked for more than it has.
    #[test]
    fn a_sample_of_inline_puts_is_spread_over_the_blocks() {
        let fs = mem_tables();
        // Every third entry a tombstone.
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..600u64)
            .map(|i| {
                let kind = if i % 3 == 0 {
                    Kind::Delete
                } else {
                    Kind::Value
                };
                let k = key::encode(format!("k{i:05}").as_bytes(), 10 + i, kind as u8);
                (k, vec![b'v'; 20])
            })
            .collect();
        let t = build_entries(&fs, 1, &entries, OPTS);
        let blocks = t.properties.data_blocks as usize;
        assert!(blocks > 40, "{blocks}");
        let sample = t.sample_inline_puts(16, IoClass::Flush).unwrap();
        assert_eq!(sample.len(), 16);
        assert!(sample
            .windows(2)
            .all(|w| key::compare(&w[0], &w[1]).is_lt()));
        assert!(sample
            .iter()
            .all(|k| key::kind_byte(k) == Kind::Value as u8));
        // Spread: the first from the first share of the keys, the last
        // from the last.
        let index = |k: &Vec<u8>| entries.iter().position(|(e, _)| e == k).unwrap();
        assert!(index(&sample[0]) < 600 / 16, "{}", index(&sample[0]));
        assert!(
            index(&sample[15]) > 600 - 600 / 16,
            "{}",
            index(&sample[15])
        );
        let all = t.sample_inline_puts(10_000, IoClass::Flush).unwrap();
        assert_eq!(all.len(), blocks);
    }

    #[test]
    fn get_and_iterate() {
        let mem = MemFs::new();
        let (fs, size, keys) = build(&mem, 500);
        let t = open(&fs, size).unwrap();
        assert!(t.properties.data_blocks > 10);
        for (i, k) in keys.iter().enumerate() {
            let uk = key::user_key(k);
            let seek = key::encode(uk, key::MAX_SEQUENCE, key::KIND_SEEK);
            let got = t
                .get(&seek, uk, bloom::key_hash(uk), IoClass::UserRead)
                .unwrap()
                .unwrap();
            assert_eq!(got.1, format!("value{i}").into_bytes());
        }
        let miss = b"k00010x";
        let seek = key::encode(miss, key::MAX_SEQUENCE, key::KIND_SEEK);
        assert_eq!(
            t.get(&seek, miss, bloom::key_hash(miss), IoClass::UserRead)
                .unwrap(),
            None
        );
        let mut it = t.iter(IoClass::UserRead, true);
        it.seek_to_last();
        for k in keys.iter().rev() {
            assert_eq!(it.key(), k.as_slice());
            it.prev();
        }
        assert!(!it.valid());
        it.seek(&keys[123]);
        for k in &keys[123..] {
            assert_eq!(it.key(), k.as_slice());
            it.next();
        }
        assert!(!it.valid() && it.status().is_ok());
        assert_eq!(t.verify().unwrap(), 500);
    }

    /// Random versions of `keys` user keys, sorted: each key gets 1–3
    /// versions of random kinds (inline, pointer, tombstone), so some keys
    /// are pointers only, some records only and some mixed.
    fn random_entries(rng: &mut StdRng, keys: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        let mut seq = 1u64;
        for i in 0..keys {
            let uk = format!("key{i:05}");
            let all_pointers = rng.gen_bool(0.5);
            for _ in 0..rng.gen_range(1..=3) {
                seq += rng.gen_range(1..4);
                let kind = if all_pointers {
                    Kind::ValuePointer
                } else {
                    [Kind::Value, Kind::ValuePointer, Kind::Delete][rng.gen_range(0..3)]
                };
                let value = match kind {
                    Kind::Delete => Vec::new(),
                    _ => format!("{uk}@{seq}:{}", "v".repeat(rng.gen_range(0..40))).into_bytes(),
                };
                out.push((key::encode(uk.as_bytes(), seq, kind as u8), value));
            }
        }
        out.sort_by(|a, b| key::compare(&a.0, &b.0));
        out
    }

    fn build_entries(
        fs: &CountingFs,
        number: u64,
        entries: &[(Vec<u8>, Vec<u8>)],
        opts: TableOptions,
    ) -> Arc<Table> {
        let path = PathBuf::from(format!("/db/{number:06}.sst"));
        let w = fs.create(&path, IoClass::Flush).unwrap();
        let mut b = TableBuilder::new(w, opts);
        for (k, v) in entries {
            b.add(k, v).unwrap();
        }
        let built = b.finish().unwrap();
        assert_eq!(built.smallest, entries[0].0);
        assert_eq!(built.largest, entries[entries.len() - 1].0);
        let cache = Arc::new(BlockCache::new(1 << 20));
        Arc::new(Table::open(fs, path, number, built.file_size, cache, IoClass::UserRead).unwrap())
    }

    /// The newest version of `uk` at `snapshot` in `entries`.
    fn model_get(
        entries: &[(Vec<u8>, Vec<u8>)],
        uk: &[u8],
        snapshot: u64,
    ) -> Option<(Vec<u8>, Vec<u8>)> {
        entries
            .iter()
            .find(|(k, _)| key::user_key(k) == uk && key::sequence(k) <= snapshot)
            .cloned()
    }

    fn lookup(t: &Table, uk: &[u8], snapshot: u64) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let seek = key::encode(uk, snapshot, key::KIND_SEEK);
        t.get(&seek, uk, bloom::key_hash(uk), IoClass::UserRead)
    }

    /// An in-memory file system with the tables' directory.
    fn mem_tables() -> CountingFs {
        let mem = MemFs::new();
        mem.create_dir_all(Path::new("/db")).unwrap();
        CountingFs::new(Arc::new(mem.clone()))
    }

    type Tables = (StdRng, Vec<(Vec<u8>, Vec<u8>)>, Arc<Table>, Arc<Table>);

    /// `keys` keys of random entries (seed `seed`), in a plain and an
    /// index-decoupled table; the generator goes on from there.
    fn plain_and_decoupled(fs: &CountingFs, seed: u64, keys: usize) -> Tables {
        let mut rng = StdRng::seed_from_u64(seed);
        let entries = random_entries(&mut rng, keys);
        let plain = build_entries(fs, 2 * seed + 1, &entries, OPTS);
        let dec = build_entries(fs, 2 * seed + 2, &entries, DECOUPLED);
        (rng, entries, plain, dec)
    }

    #[test]
    fn index_decoupled_tables_answer_as_plain_ones_do() {
        let fs = mem_tables();
        for seed in 0..6u64 {
            let (mut rng, entries, plain, dec) =
                plain_and_decoupled(&fs, seed, 1 + seed as usize * 60);
            assert!(!plain.describe().contains("decoupled"), "seed {seed}");
            assert!(dec.describe().contains("index-decoupled"), "seed {seed}");
            let max_seq = entries.iter().map(|(k, _)| key::sequence(k)).max().unwrap();
            for (k, _) in &entries {
                let uk = key::user_key(k);
                for snapshot in [key::sequence(k), key::sequence(k) - 1, max_seq] {
                    let want = model_get(&entries, uk, snapshot);
                    assert_eq!(lookup(&dec, uk, snapshot).unwrap(), want, "seed {seed}");
                    assert_eq!(lookup(&plain, uk, snapshot).unwrap(), want, "seed {seed}");
                }
            }
            assert_eq!(lookup(&dec, b"key0", max_seq).unwrap(), None, "seed {seed}");
            // Iteration, both ways and from seeks, yields every entry in order.
            let mut it = dec.iter(IoClass::UserRead, true);
            it.seek_to_first();
            for (k, v) in &entries {
                assert_eq!(
                    (it.key(), it.value()),
                    (k.as_slice(), v.as_slice()),
                    "seed {seed}"
                );
                it.next();
            }
            assert!(!it.valid() && it.status().is_ok(), "seed {seed}");
            it.seek_to_last();
            for (k, _) in entries.iter().rev() {
                assert_eq!(it.key(), k.as_slice(), "seed {seed}");
                it.prev();
            }
            assert!(!it.valid(), "seed {seed}");
            let at = rng.gen_range(0..entries.len());
            it.seek(&entries[at].0);
            for (k, _) in &entries[at..] {
                assert_eq!(it.key(), k.as_slice(), "seed {seed}");
                it.next();
            }
            // A change of direction in the middle.
            it.seek(&entries[at].0);
            it.prev();
            match at {
                0 => assert!(!it.valid(), "seed {seed}"),
                _ => assert_eq!(it.key(), entries[at - 1].0.as_slice(), "seed {seed}"),
            }
            assert_eq!(dec.verify().unwrap(), entries.len() as u64, "seed {seed}");
        }
    }

    /// Lookups under [`SortedProbes`] answer as plain ones do, in ascending,
    /// descending and random order, hits and misses, over a plain and an
    /// index-decoupled table at once; ascending ones reuse blocks (with no
    /// block cache, they read fewer bytes).
    #[test]
    fn sorted_probes_answer_as_plain_lookups_do() {
        let fs = mem_tables();
        for seed in 0..4u64 {
            let (mut rng, entries, plain, dec) =
                plain_and_decoupled(&fs, seed, 50 + seed as usize * 100);
            let max_seq = entries.iter().map(|(k, _)| key::sequence(k)).max().unwrap();
            // Every key, some absent ones between them, at several snapshots.
            let mut probes: Vec<(Vec<u8>, u64)> = Vec::new();
            for (k, _) in &entries {
                let uk = key::user_key(k).to_vec();
                let mut absent = uk.clone();
                absent.push(b'!');
                probes.push((uk.clone(), max_seq));
                probes.push((uk, key::sequence(k)));
                probes.push((absent, max_seq));
            }
            probes.sort_by(|a, b| {
                let ka = key::encode(&a.0, a.1, key::KIND_SEEK);
                key::compare(&ka, &key::encode(&b.0, b.1, key::KIND_SEEK))
            });
            let mut shuffled = probes.clone();
            for i in (1..shuffled.len()).rev() {
                shuffled.swap(i, rng.gen_range(0..=i));
            }
            let descending: Vec<_> = probes.iter().rev().cloned().collect();
            for (order, list) in [
                ("ascending", &probes),
                ("descending", &descending),
                ("random", &shuffled),
            ] {
                let _sorted = SortedProbes::start();
                for (uk, snapshot) in list {
                    let want = model_get(&entries, uk, *snapshot);
                    for t in [&plain, &dec] {
                        assert_eq!(
                            lookup(t, uk, *snapshot).unwrap(),
                            want,
                            "seed {seed}, {order}, {:?} at {snapshot}",
                            String::from_utf8_lossy(uk)
                        );
                    }
                }
            }
        }
        // With no block cache every block a lookup uses is read: ascending
        // probes under the guard read each block about once.
        let mut rng = StdRng::seed_from_u64(9);
        let entries = random_entries(&mut rng, 400);
        let path = PathBuf::from("/db/000100.sst");
        let w = fs.create(&path, IoClass::Flush).unwrap();
        let mut b = TableBuilder::new(w, OPTS);
        for (k, v) in &entries {
            b.add(k, v).unwrap();
        }
        let size = b.finish().unwrap().file_size;
        let t = Table::open(
            &fs,
            path,
            100,
            size,
            Arc::new(BlockCache::new(0)),
            IoClass::UserRead,
        )
        .unwrap();
        let read = |sorted: bool| {
            let _g = sorted.then(SortedProbes::start);
            let before = fs.counters().snapshot().read(IoClass::UserRead);
            for (k, _) in &entries {
                lookup(&t, key::user_key(k), key::MAX_SEQUENCE).unwrap();
            }
            fs.counters().snapshot().read(IoClass::UserRead) - before
        };
        let (plain, sorted) = (read(false), read(true));
        assert!(sorted * 3 < plain, "sorted {sorted} bytes, plain {plain}");
    }

    /// GetKey's promise (Scavenger (VLDB) §3.3.2): the newest pointer of a key
    /// whose entries are all pointers is found without reading a data
    /// block, and an inline key's entry without reading a pointer block
    /// (but for pointer-filter false positives); shown by damaging every
    /// block of the other stream first.
    #[test]
    fn lookups_of_decoupled_tables_read_one_stream() {
        let mem = MemFs::new();
        mem.create_dir_all(Path::new("/db")).unwrap();
        let fs = CountingFs::new(Arc::new(mem.clone()));
        let seed = 7;
        let entries = random_entries(&mut StdRng::seed_from_u64(seed), 300);
        let built = build_entries(&fs, 1, &entries, DECOUPLED);
        assert!(built.properties.data_blocks > 2 && built.properties.pointer_blocks > 2);
        let path = Path::new("/db/000001.sst");
        let orig = mem.contents(path).unwrap();
        for damage_pointers in [false, true] {
            let mut bytes = orig.clone();
            let index = match (&built.pointers, damage_pointers) {
                (Some(p), true) => p,
                _ => &built.index,
            };
            let mut it = index.iter();
            it.seek_to_first();
            while it.valid() {
                let h = built.decode_handle(it.value()).unwrap();
                bytes[h.offset as usize] ^= 0x55;
                it.next();
            }
            mem.set_contents(path, bytes);
            let size = built.file_size;
            let t = Table::open(
                &fs,
                path.into(),
                1,
                size,
                Arc::new(BlockCache::new(0)),
                IoClass::UserRead,
            )
            .unwrap();
            let (mut intact, mut damaged, mut false_positives) = (0, 0, 0);
            for (k, _) in &entries {
                let uk = key::user_key(k);
                let pointers_only = entries
                    .iter()
                    .filter(|(e, _)| key::user_key(e) == uk)
                    .all(|(e, _)| key::kind_byte(e) == Kind::ValuePointer as u8);
                let got = lookup(&t, uk, key::MAX_SEQUENCE);
                if pointers_only != damage_pointers {
                    let want = model_get(&entries, uk, key::MAX_SEQUENCE);
                    match got {
                        Ok(got) => assert_eq!(got, want, "seed {seed}"),
                        // Only a filter false positive reads the other stream.
                        Err(e) if damage_pointers && e.is_corruption() => false_positives += 1,
                        Err(e) => panic!("seed {seed}: {e}"),
                    }
                    intact += 1;
                } else {
                    assert!(got.unwrap_err().is_corruption(), "seed {seed}");
                    damaged += 1;
                }
            }
            assert!(
                intact > 50 && damaged > 50 && false_positives * 20 <= intact,
                "seed {seed}: {intact} {damaged} {false_positives}"
            );
        }
    }

    #[test]
    fn every_bit_flip_is_detected_or_harmless() {
        let mem = MemFs::new();
        let (fs, _, keys) = build(&mem, 60);
        let entries: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), format!("value{i}").into_bytes()))
            .collect();
        flips_are_detected_or_harmless(&mem, &fs, &entries, OPTS);
    }

    #[test]
    fn every_bit_flip_of_a_table_with_a_hash_leaf_is_detected_or_harmless() {
        let mem = MemFs::new();
        mem.create_dir_all(Path::new("/db")).unwrap();
        let fs = CountingFs::new(Arc::new(mem.clone()));
        let entries = random_entries(&mut StdRng::seed_from_u64(5), 40);
        let opts = TableOptions {
            hash_leaf: true,
            ..OPTS
        };
        flips_are_detected_or_harmless(&mem, &fs, &entries, opts);
    }

    #[test]
    fn every_bit_flip_of_a_decoupled_table_is_detected_or_harmless() {
        let mem = MemFs::new();
        mem.create_dir_all(Path::new("/db")).unwrap();
        let fs = CountingFs::new(Arc::new(mem.clone()));
        let entries = random_entries(&mut StdRng::seed_from_u64(3), 40);
        flips_are_detected_or_harmless(&mem, &fs, &entries, DECOUPLED);
    }

    /// Flips each bit of table 1 (built from `entries`) in turn: opening,
    /// lookups and `verify` either fail with `Corruption` or give the
    /// right answers.
    fn flips_are_detected_or_harmless(
        mem: &MemFs,
        fs: &CountingFs,
        entries: &[(Vec<u8>, Vec<u8>)],
        opts: TableOptions,
    ) {
        let size = build_entries(fs, 1, entries, opts).file_size;
        let p = Path::new("/db/000001.sst");
        let orig = mem.contents(p).unwrap();
        let user_keys: Vec<&[u8]> = entries.iter().map(|(k, _)| key::user_key(k)).collect();
        for i in 0..orig.len() {
            let mut d = orig.clone();
            d[i] ^= 1 << (i % 8);
            mem.set_contents(p, d);
            match open(fs, size) {
                Err(e) => assert!(
                    e.is_corruption() || matches!(e, Error::UnsupportedVersion { .. }),
                    "{e}"
                ),
                Ok(t) => {
                    // Whatever is returned must be the right entry or an error.
                    for uk in &user_keys {
                        if let Ok(got) = lookup(&t, uk, key::MAX_SEQUENCE) {
                            let want = model_get(entries, uk, key::MAX_SEQUENCE);
                            if got.is_some() {
                                assert_eq!(got, want, "flip at {i}");
                            }
                        }
                    }
                    if t.verify().is_ok() {
                        // A flip that verify accepts must be in a harmless
                        // spot; then every key must read back.
                        for uk in &user_keys {
                            let got = lookup(&t, uk, key::MAX_SEQUENCE).unwrap();
                            let want = model_get(entries, uk, key::MAX_SEQUENCE);
                            assert_eq!(got, want, "flip at {i} lost a key but verified");
                        }
                    }
                }
            }
        }
    }

    /// Versions of keys in a table with a hash leaf, some keys with so many
    /// versions that they run over several blocks, tombstones among them:
    /// `(user key, seq, value)` sorted in table order, `None` a tombstone.
    type Entries = Vec<(Vec<u8>, u64, Option<Vec<u8>>)>;

    fn build_with_leaf(mem: &MemFs, seed: u64) -> (CountingFs, u64, Entries) {
        let fs = CountingFs::new(Arc::new(mem.clone()));
        mem.create_dir_all(Path::new("/db")).unwrap();
        let w = fs
            .create(Path::new("/db/000001.sst"), IoClass::Flush)
            .unwrap();
        let mut b = TableBuilder::new(
            w,
            TableOptions {
                hash_leaf: true,
                ..OPTS
            },
        );
        let mut rng = StdRng::seed_from_u64(seed);
        let mut entries: Entries = vec![];
        for i in 0..400u64 {
            let uk = format!("k{:05}", i * 2).into_bytes();
            let versions = if rng.gen_ratio(1, 20) {
                rng.gen_range(10..40)
            } else {
                rng.gen_range(1..4)
            };
            let mut seq = 1_000 + rng.gen_range(0..50);
            for _ in 0..versions {
                let v = (!rng.gen_ratio(1, 6)).then(|| format!("v{i}-{seq}").into_bytes());
                entries.push((uk.clone(), seq, v));
                seq -= rng.gen_range(1..20);
            }
        }
        for (uk, seq, v) in &entries {
            let kind = if v.is_some() {
                Kind::Value
            } else {
                Kind::Delete
            } as u8;
            b.add(
                &key::encode(uk, *seq, kind),
                v.as_deref().unwrap_or_default(),
            )
            .unwrap();
        }
        let built = b.finish().unwrap();
        assert!(built.properties.leaf.size > 0);
        (fs, built.file_size, entries)
    }

    /// What the table must answer for `uk` at `snapshot`: its newest entry
    /// at or below it, as `(seq, value)`.
    fn leaf_model_get(
        entries: &Entries,
        uk: &[u8],
        snapshot: u64,
    ) -> Option<(u64, Option<Vec<u8>>)> {
        entries
            .iter()
            .find(|(k, seq, _)| k == uk && *seq <= snapshot)
            .map(|(_, seq, v)| (*seq, v.clone()))
    }

    fn check_against_model(t: &Table, entries: &Entries, rng: &mut StdRng, seed: u64) {
        for _ in 0..3_000 {
            // Present keys, absent keys between them, and past both ends.
            let uk = format!("k{:05}", rng.gen_range(0..802u64)).into_bytes();
            let snapshot = if rng.gen_bool(0.5) {
                key::MAX_SEQUENCE
            } else {
                rng.gen_range(600..1_060)
            };
            let seek = key::encode(&uk, snapshot, key::KIND_SEEK);
            let got = t
                .get(&seek, &uk, bloom::key_hash(&uk), IoClass::UserRead)
                .unwrap();
            let got = got.map(|(ik, v)| {
                let tomb = key::kind_byte(&ik) == Kind::Delete as u8;
                assert_eq!(key::user_key(&ik), uk.as_slice(), "seed {seed}");
                (key::sequence(&ik), (!tomb).then_some(v))
            });
            assert_eq!(
                got,
                leaf_model_get(entries, &uk, snapshot),
                "seed {seed}, key {uk:?} at {snapshot}"
            );
        }
    }

    #[test]
    fn lookups_through_the_hash_leaf_match_a_model() {
        for seed in 0..4 {
            let mem = MemFs::new();
            let (fs, size, entries) = build_with_leaf(&mem, seed);
            let t = open(&fs, size).unwrap();
            assert!(
                t.leaf.is_some() && t.properties.data_blocks > 50,
                "seed {seed}"
            );
            let mut rng = StdRng::seed_from_u64(seed);
            check_against_model(&t, &entries, &mut rng, seed);
            // Every signature in every block: each lookup of a key the
            // table holds meets every block, and still confirms the key.
            let mut colliding = Table::open(
                &fs,
                "/db/000001.sst".into(),
                1,
                size,
                Arc::new(BlockCache::new(1 << 20)),
                IoClass::UserRead,
            )
            .unwrap();
            colliding.leaf = colliding.leaf.as_ref().map(TableLeaf::colliding);
            check_against_model(&colliding, &entries, &mut rng, seed);
        }
    }

    #[test]
    fn a_damaged_hash_leaf_is_corruption_naming_its_offset() {
        let mem = MemFs::new();
        let (fs, size, _) = build_with_leaf(&mem, 9);
        let leaf = open(&fs, size).unwrap().properties.leaf;
        let path = Path::new("/db/000001.sst");
        let mut bytes = mem.read_all(path).unwrap();
        // A slot naming a block that does not exist, under a recomputed
        // block checksum (a checksum mismatch is caught before decoding).
        // The last slot's low half is its block index.
        let last = (leaf.offset + leaf.size - 8) as usize;
        bytes[last..last + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let body = &bytes[leaf.offset as usize..(leaf.offset + leaf.size) as usize];
        let trailer = crate::table::format::block_trailer(body);
        let t = (leaf.offset + leaf.size) as usize;
        bytes[t..t + trailer.len()].copy_from_slice(&trailer);
        mem.set_contents(path, bytes);
        match open(&fs, size) {
            Err(Error::Corruption { offset, file, .. }) => {
                assert_eq!(offset, leaf.offset);
                assert!(file.ends_with("000001.sst"));
            }
            other => panic!("expected corruption, got {:?}", other.map(|_| ())),
        }
    }
}
