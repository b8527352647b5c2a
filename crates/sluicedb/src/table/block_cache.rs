//! The block cache: a byte budget of uncompressed blocks shared by all
//! tables of a database, key tables' and value tables' alike.

use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use super::block::Block;
use crate::error::Result;

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
