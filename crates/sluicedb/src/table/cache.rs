//! The table cache: bounds the number of open table files (the block cache
//! is `block_cache.rs`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use quick_cache::sync::Cache;

use super::block_cache::BlockCache;
use super::reader::Table;
use crate::error::Result;
use crate::filename;
use crate::fs::{CountingFs, IoClass};

/// Open tables by file number; at most `capacity` stay open, and up to
/// half as many more pinned by their versions' [`TableSlot`]s.
pub(crate) struct TableCache {
    fs: CountingFs,
    dir: PathBuf,
    tables: Cache<u64, Arc<Table>>,
    blocks: Arc<BlockCache>,
    /// Tables pinned in a [`TableSlot`] now, and the most that may be.
    pinned: Arc<AtomicUsize>,
    max_pinned: usize,
    /// Index and filter bytes of the tables it opened that are still open
    /// (in it, in a slot, or in a reader's hands): memory the block cache
    /// does not count.
    open_bytes: Arc<AtomicU64>,
}

/// A table's open reader, kept with its `FileMeta` (which every version
/// that lists the table shares) once a point lookup opened it, so that
/// later lookups reach it without the cache: its lookup, the reference
/// count on the shared `Arc` and the cache's lock were 3-4% of a hashkv
/// update run's CPU (perf, 2026-11-27; a lookup probes every level-0
/// table and one per level). It closes when the last version that lists
/// the table goes. A copy of the meta starts empty.
#[derive(Default)]
pub(crate) struct TableSlot(OnceLock<Pinned>);

struct Pinned {
    table: Arc<Table>,
    count: Arc<AtomicUsize>,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Clone for TableSlot {
    fn clone(&self) -> Self {
        TableSlot::default()
    }
}

/// Not part of what a meta says: slots never make two metas differ.
impl PartialEq for TableSlot {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for TableSlot {}

impl std::fmt::Debug for TableSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "pinned"
        } else {
            "-"
        })
    }
}

/// A table reached through its meta's slot or through the cache.
pub(crate) enum TableRef<'f> {
    Pinned(&'f Table),
    Cached(Arc<Table>),
}

impl std::ops::Deref for TableRef<'_> {
    type Target = Table;

    fn deref(&self) -> &Table {
        match self {
            TableRef::Pinned(t) => t,
            TableRef::Cached(t) => t,
        }
    }
}

impl TableCache {
    pub(crate) fn new(
        fs: CountingFs,
        dir: PathBuf,
        capacity: usize,
        blocks: Arc<BlockCache>,
    ) -> Self {
        TableCache {
            fs,
            dir,
            tables: Cache::new(capacity.max(1)),
            blocks,
            pinned: Arc::new(AtomicUsize::new(0)),
            max_pinned: capacity / 2,
            open_bytes: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Table `number` (of `file_size` bytes) for a point lookup: the one
    /// its slot (in its `FileMeta`) holds, else the cache's, which the slot
    /// then keeps while fewer than half the cache's capacity are pinned
    /// (so open files stay bounded).
    pub(crate) fn table_of<'f>(
        &self,
        slot: &'f TableSlot,
        number: u64,
        file_size: u64,
        class: IoClass,
    ) -> Result<TableRef<'f>> {
        if let Some(p) = slot.0.get() {
            return Ok(TableRef::Pinned(&p.table));
        }
        let t = self.get(number, file_size, class)?;
        if self.pinned.fetch_add(1, Ordering::Relaxed) < self.max_pinned {
            // Counted before it exists; a slot another lookup filled first
            // hands this one back, and its drop uncounts it.
            let _ = slot.0.set(Pinned {
                table: t.clone(),
                count: self.pinned.clone(),
            });
        } else {
            self.pinned.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(TableRef::Cached(t))
    }

    /// Tables pinned in slots now.
    #[cfg(test)]
    pub(crate) fn pinned_tables(&self) -> usize {
        self.pinned.load(Ordering::Relaxed)
    }

    /// The open table `number` of `file_size` bytes, opening it if needed.
    /// Table `number`, opened now if it is not open: its footer, index,
    /// filter and properties are read as `class` (whoever needs it first).
    pub(crate) fn get(&self, number: u64, file_size: u64, class: IoClass) -> Result<Arc<Table>> {
        if let Some(t) = self.tables.get(&number) {
            return Ok(t);
        }
        let path = filename::table(&self.dir, number);
        let t = Arc::new(Table::open(
            &self.fs,
            path,
            number,
            file_size,
            self.blocks.clone(),
            class,
        )?);
        t.count_memory_in(&self.open_bytes);
        self.tables.insert(number, t.clone());
        Ok(t)
    }

    /// Index and filter bytes of the open tables it opened.
    pub(crate) fn open_table_bytes(&self) -> u64 {
        self.open_bytes.load(Ordering::Relaxed)
    }

    /// Forgets a table (it is being deleted).
    pub(crate) fn evict(&self, number: u64) {
        self.tables.remove(&number);
    }

    pub(crate) fn block_cache(&self) -> &Arc<BlockCache> {
        &self.blocks
    }
}
