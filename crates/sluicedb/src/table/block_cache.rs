//! The block cache: a byte budget of uncompressed blocks shared by all
//! tables of a database, key tables' and value tables' alike.

use std::sync::atomic::{AtomicU64, Ordering};
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
    /// The capacity it was made with (or set to, `BlockCache::set_sizes`).
    full: AtomicU64,
    /// What the cache and the immutable memtables may hold together (the
    /// memory budget less the active memtable's size); `u64::MAX`: no
    /// budget, the cache keeps `full`.
    shared: AtomicU64,
    /// The capacity now (`give_way_to`).
    capacity: AtomicU64,
    /// What it gives way to: the immutable memtables' bytes and the
    /// excess of the memtable blocks pooled for the next memtables
    /// (`give_way_to_pool`).
    immutable: AtomicU64,
    pooled: AtomicU64,
    /// Frees the pool's excess once the memtables leave it unused
    /// (`memtable::BlockPool::trim_if_idle`), tried on a miss while the
    /// excess holds the cache smaller.
    trim_pool: std::sync::OnceLock<Box<dyn Fn() -> bool + Send + Sync>>,
    /// Orders the capacity's updates, so that the last one set is the
    /// newest figures'.
    resize: parking_lot::Mutex<()>,
}

/// The least share of its capacity the cache keeps under a memory budget:
/// the blocks a flush's and a compaction's readers hold at once stay
/// cached, so that a busy read path still hits.
pub(crate) const BUDGET_FLOOR_DIVISOR: u64 = 8;

impl BlockCache {
    /// A cache holding at most `capacity_bytes` of blocks; 0 disables it.
    pub(crate) fn new(capacity_bytes: usize) -> Self {
        Self::with_budget(capacity_bytes, None)
    }

    /// A cache of `capacity_bytes` that gives way to immutable memtables
    /// when it and they would hold more than `shared` bytes
    /// ([`BlockCache::give_way_to`]); `None`: it never does.
    pub(crate) fn with_budget(capacity_bytes: usize, shared: Option<u64>) -> Self {
        let cache = (capacity_bytes > 0).then(|| {
            // Estimated item count only sizes internal tables.
            let items = (capacity_bytes / 4096).max(16);
            Cache::with_weighter(items, capacity_bytes as u64, BlockWeighter)
        });
        let full = capacity_bytes as u64;
        BlockCache {
            cache,
            full: AtomicU64::new(full),
            shared: AtomicU64::new(shared.unwrap_or(u64::MAX)),
            capacity: AtomicU64::new(full),
            immutable: AtomicU64::new(0),
            pooled: AtomicU64::new(0),
            trim_pool: std::sync::OnceLock::new(),
            resize: parking_lot::Mutex::new(()),
        }
    }

    /// Sets what frees the pooled memtable blocks' excess when they sit
    /// unused (once, at open).
    pub(crate) fn set_pool_trim(&self, trim: Box<dyn Fn() -> bool + Send + Sync>) {
        let _ = self.trim_pool.set(trim);
    }

    /// Sets the capacity for `immutable_bytes` of immutable memtables: what
    /// the budget leaves beside them, between an eighth of the full
    /// capacity and the full capacity (`docs/design.md`, "Memory"). Evicts
    /// at once when it shrinks. Called whenever the immutables change.
    pub(crate) fn give_way_to(&self, immutable_bytes: u64) {
        self.immutable.store(immutable_bytes, Ordering::Relaxed);
        self.resize();
    }

    /// As [`BlockCache::give_way_to`], for the memtable blocks pooled
    /// beyond what the active memtable can still take
    /// (`memtable::BlockPool`'s excess; the rest lies inside the active
    /// memtable's charge): memory held like an immutable memtable's.
    /// Called whenever it changes.
    pub(crate) fn give_way_to_pool(&self, excess_bytes: u64) {
        self.pooled.store(excess_bytes, Ordering::Relaxed);
        self.resize();
    }

    /// Sets the full capacity and the budget's share (as `with_budget`
    /// takes them) of a running cache; it evicts at once when it shrinks.
    /// A cache made with no capacity stays off.
    pub(crate) fn set_sizes(&self, capacity_bytes: usize, shared: Option<u64>) {
        let _order = self.resize.lock();
        self.full.store(capacity_bytes as u64, Ordering::Relaxed);
        self.shared
            .store(shared.unwrap_or(u64::MAX), Ordering::Relaxed);
        drop(_order);
        self.resize();
    }

    fn resize(&self) {
        let Some(c) = &self.cache else { return };
        let _order = self.resize.lock();
        let (full, shared) = (
            self.full.load(Ordering::Relaxed),
            self.shared.load(Ordering::Relaxed),
        );
        let held = self.immutable.load(Ordering::Relaxed) + self.pooled.load(Ordering::Relaxed);
        let floor = full / BUDGET_FLOOR_DIVISOR;
        let target = shared.saturating_sub(held).clamp(floor, full);
        if self.capacity.swap(target, Ordering::Relaxed) != target {
            c.set_capacity(target);
        }
    }

    /// What the cache and the immutable memtables may hold together (the
    /// budget less the active write buffer); `None`: no budget.
    pub(crate) fn shared_bytes(&self) -> Option<u64> {
        Some(self.shared.load(Ordering::Relaxed)).filter(|&s| s != u64::MAX)
    }

    /// The capacity now: the full one, or less while it gives way to
    /// immutable memtables.
    pub(crate) fn capacity_bytes(&self) -> u64 {
        self.capacity.load(Ordering::Relaxed)
    }

    /// The full capacity: the capacity when it gives way to nothing.
    pub(crate) fn size_bytes(&self) -> u64 {
        self.full.load(Ordering::Relaxed)
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
        if self.pooled.load(Ordering::Relaxed) > 0 {
            if let Some(trim) = self.trim_pool.get() {
                trim();
            }
        }
        if let Some(c) = &self.cache {
            c.insert((table, offset), block);
        }
    }

    /// Bytes currently held.
    pub(crate) fn usage_bytes(&self) -> u64 {
        self.cache.as_ref().map_or(0, |c| c.weight())
    }
}

#[cfg(test)]
mod tests {
    use super::super::block::BlockBuilder;
    use super::*;

    /// A block of about `bytes`: one entry of that much value.
    fn block(bytes: usize) -> Arc<Block> {
        let mut b = BlockBuilder::new(16);
        b.add(b"k", &vec![7u8; bytes]);
        Arc::new(Block::new(b.finish(), Arc::new("t".into()), 0).unwrap())
    }

    fn fill(c: &BlockCache, table: u64, blocks: u64) {
        for i in 0..blocks {
            c.insert(table, i * 4096, block(4000));
        }
    }

    #[test]
    fn the_cache_gives_way_to_immutables_down_to_its_floor_and_grows_back() {
        let full = 4 << 20;
        // The budget leaves the cache and the immutables 6 MiB together.
        let c = BlockCache::with_budget(full, Some(6 << 20));
        fill(&c, 1, 2048);
        assert!(c.usage_bytes() > 3 << 20, "filled: {}", c.usage_bytes());
        c.give_way_to(0);
        assert_eq!(c.capacity_bytes(), full as u64);
        // 3 MiB of immutables leave the cache 3 MiB; it evicts at once.
        c.give_way_to(3 << 20);
        assert_eq!(c.capacity_bytes(), 3 << 20);
        assert!(c.usage_bytes() <= 3 << 20, "{}", c.usage_bytes());
        // More than the budget: the floor, an eighth.
        c.give_way_to(64 << 20);
        assert_eq!(c.capacity_bytes(), (full / 8) as u64);
        assert!(c.usage_bytes() <= (full / 8) as u64, "{}", c.usage_bytes());
        // The flush done, the cache fills to its full size again.
        c.give_way_to(0);
        assert_eq!(c.capacity_bytes(), full as u64);
        fill(&c, 2, 2048);
        assert!(c.usage_bytes() > 3 << 20, "refilled: {}", c.usage_bytes());
    }

    #[test]
    fn pooled_memtable_blocks_beyond_the_active_ones_room_count_as_immutables() {
        let full = 4 << 20;
        let c = BlockCache::with_budget(full, Some(6 << 20));
        c.give_way_to(2 << 20);
        c.give_way_to_pool(2 << 20);
        assert_eq!(c.capacity_bytes(), 2 << 20);
        // The flush done, its blocks pooled: held all the same.
        c.give_way_to(0);
        assert_eq!(c.capacity_bytes(), 4 << 20);
        c.give_way_to_pool(3 << 20);
        assert_eq!(c.capacity_bytes(), 3 << 20);
        // The next memtable took the pooled blocks back.
        c.give_way_to_pool(0);
        assert_eq!(c.capacity_bytes(), full as u64);
    }

    #[test]
    fn without_a_budget_the_cache_keeps_its_size() {
        let c = BlockCache::with_budget(1 << 20, None);
        fill(&c, 1, 512);
        let held = c.usage_bytes();
        c.give_way_to(1 << 40);
        assert_eq!(c.capacity_bytes(), 1 << 20);
        assert_eq!(c.usage_bytes(), held);
    }
}
