//! The block cache (a byte budget shared by all tables of a database) and the
//! table cache (bounds the number of open table files).

use std::path::PathBuf;
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use super::block::Block;
use super::reader::Table;
use crate::error::Result;
use crate::filename;
use crate::fs::{CountingFs, IoClass};

#[derive(Clone)]
struct BlockWeighter;

impl Weighter<(u64, u64), Arc<Block>> for BlockWeighter {
    fn weight(&self, _: &(u64, u64), b: &Arc<Block>) -> u64 {
        b.size() as u64
    }
}

/// Uncompressed blocks keyed by (table number, block offset).
pub(crate) struct BlockCache {
    cache: Option<Cache<(u64, u64), Arc<Block>, BlockWeighter>>,
}

impl BlockCache {
    /// A cache holding at most `capacity_bytes` of blocks; 0 disables it.
    pub(crate) fn new(capacity_bytes: usize) -> Self {
        let cache = (capacity_bytes > 0).then(|| {
            // Estimated item count only sizes internal tables.
            let items = (capacity_bytes / 4096).max(16);
            Cache::with_weighter(items, capacity_bytes as u64, BlockWeighter)
        });
        BlockCache { cache }
    }

    pub(crate) fn get(&self, table: u64, offset: u64) -> Option<Arc<Block>> {
        self.cache.as_ref()?.get(&(table, offset))
    }

    /// The cached block at `offset` of `table`, else `read()`'s (cached
    /// when `fill`): key and value tables read their blocks through here.
    pub(crate) fn get_or_read(
        &self,
        table: u64,
        offset: u64,
        fill: bool,
        read: impl FnOnce() -> Result<Arc<Block>>,
    ) -> Result<Arc<Block>> {
        if let Some(b) = self.get(table, offset) {
            return Ok(b);
        }
        let b = read()?;
        if fill {
            self.insert(table, offset, b.clone());
        }
        Ok(b)
    }

    pub(crate) fn insert(&self, table: u64, offset: u64, block: Arc<Block>) {
        if let Some(c) = &self.cache {
            c.insert((table, offset), block);
        }
    }

    /// Bytes currently held.
    pub(crate) fn usage_bytes(&self) -> u64 {
        self.cache.as_ref().map_or(0, |c| c.weight())
    }
}

/// Open tables by file number; at most `capacity` stay open.
pub(crate) struct TableCache {
    fs: CountingFs,
    dir: PathBuf,
    tables: Cache<u64, Arc<Table>>,
    blocks: Arc<BlockCache>,
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
        }
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
        self.tables.insert(number, t.clone());
        Ok(t)
    }

    /// Forgets a table (it is being deleted).
    pub(crate) fn evict(&self, number: u64) {
        self.tables.remove(&number);
    }

    pub(crate) fn block_cache(&self) -> &Arc<BlockCache> {
        &self.blocks
    }
}
