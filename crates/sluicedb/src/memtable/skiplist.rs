//! The memtable's ordered map: a skiplist whose nodes, keys and values live
//! in an arena (LevelDB's `db/skiplist.h` and RocksDB's
//! `memtable/inline_skiplist.h` are the models).
//!
//! What it guarantees:
//! - Entries are internal keys (`key::compare` orders them) with their
//!   values, written once and never removed or changed; the arena is freed
//!   only with the list.
//! - Readers take no lock, epoch or reference count: a node reached through
//!   an `Acquire` load of a link was fully written (key, value and the
//!   links below the level it was reached on) before the `Release` that
//!   published it, and it stays where it is until the list is dropped.
//! - Inserts may run on several threads at once (GC's large relocation
//!   batches use two): a node is linked level by level from the bottom up,
//!   each link by compare-and-swap, and a lost race searches again from the
//!   predecessor it had found. Two entries with the same internal key are
//!   never inserted (sequence numbers are unique); if they were, both would
//!   stay, the newer first.
//!
//! Why not `crossbeam-skiplist`, which the memtable used until 2026-11-27:
//! every node and value there is an allocation of its own, freed one by one
//! when the memtable goes, and every read pins an epoch and counts
//! references on the entries it holds. In a 1 GiB hashkv update run those
//! were about a seventh of the process's CPU samples (perf: epoch pins and
//! reference counting 4.5%, dropping memtables 3.4%, plus the allocator),
//! beside the searches themselves, which any skiplist pays.

use std::marker::PhantomData;
use std::mem::{size_of, MaybeUninit};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::key;

/// Most levels a node takes: with [`BRANCHING`] 4, enough for 4^12 (16
/// million) entries before searches lengthen.
const MAX_HEIGHT: usize = 12;

/// One node in this many at a level also takes the next level.
const BRANCHING: u64 = 4;

/// The arena's first block; each next one doubles, up to
/// [`MAX_BLOCK_BYTES`].
const FIRST_BLOCK_BYTES: usize = 16 << 10;
pub(crate) const MAX_BLOCK_BYTES: usize = 1 << 20;

/// Values up to this long are kept in their node, after the key; longer
/// ones in an arena of their own ([`SkipList::values`]), so that a search,
/// which reads only nodes, meets nodes packed close together: with values
/// of 1 KiB in the nodes, each node a search passed was a cache line and a
/// page of its own (a 64 MiB memtable spans 16,000 pages), and the inserts
/// of a 1 GiB hashkv update run were 12% of its CPU samples.
const INLINE_VALUE_BYTES: usize = 64;

/// Searches [`SkipList::warm`] runs in step.
const WARM_GROUP: usize = 16;

/// Asks the processor to start loading `node`'s first two cache lines (its
/// fixed part and links, and most often its key), without waiting.
#[inline(always)]
fn prefetch(node: Option<NodePtr>) {
    #[cfg(target_arch = "x86_64")]
    if let Some(n) = node {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = n.0.as_ptr().cast::<i8>();
        // SAFETY: a prefetch is a hint: it reads nothing the program sees
        // and never faults, whatever the address (here, a live node and
        // the line after it).
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = node;
}

/// A node's fixed part. In the arena it is followed by `height` links
/// (`AtomicPtr<Node>`, level 0 first), then the key, then the value when
/// it is kept inline. The key's first bytes come first, with the links
/// right behind them: a search compares most nodes it meets by
/// [`Node::prefix`] alone and never touches their keys, which lie further
/// on, often in the next cache line.
#[repr(C)]
struct Node {
    /// The user key's first 8 bytes as a big-endian integer, zero-padded
    /// ([`key_prefix`]).
    prefix: u64,
    /// The internal key's length in the low 24 bits (keys are at most
    /// `MAX_KEY_BYTES` + 8), the node's height in the high 8.
    key_len_height: u32,
    value_len: u32,
    /// Where the value is: after the key, or in the value arena. Written
    /// before the node is published, like the rest.
    value: AtomicPtr<u8>,
}

const _: () = assert!(size_of::<Node>() == 24);
const _: () = assert!(size_of::<Node>().is_multiple_of(size_of::<AtomicPtr<Node>>()));
const _: () = assert!(align_of::<Node>() <= 8);
const _: () = assert!(crate::batch::MAX_KEY_BYTES + key::TRAILER_LEN < 1 << 24);

impl Node {
    /// Bytes of a node of `height` holding `key_len` bytes of key and
    /// `inline_len` of value.
    fn size(height: usize, key_len: usize, inline_len: usize) -> usize {
        size_of::<Node>() + height * size_of::<AtomicPtr<Node>>() + key_len + inline_len
    }
}

/// A user key's first 8 bytes as a big-endian integer, zero-padded. If two
/// keys' prefixes differ, the keys compare as their prefixes do: a shorter
/// key padded with zeros is below every longer key it begins, and so is
/// the padding. Equal prefixes decide nothing.
fn key_prefix(user_key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = user_key.len().min(8);
    b[..n].copy_from_slice(&user_key[..n]);
    u64::from_be_bytes(b)
}

/// An internal key being searched for, with its [`key_prefix`].
#[derive(Clone, Copy)]
pub(crate) struct SearchKey<'k> {
    prefix: u64,
    key: &'k [u8],
}

impl<'k> SearchKey<'k> {
    /// `ikey` must be a valid internal key (user key and trailer).
    pub(crate) fn new(ikey: &'k [u8]) -> Self {
        SearchKey {
            prefix: key_prefix(key::user_key(ikey)),
            key: ikey,
        }
    }

    /// True when `node`'s key is below this one.
    fn above(&self, node: NodePtr) -> bool {
        #[cfg(test)]
        tests::COMPARISONS.with(|c| c.set(c.get() + 1));
        match node.prefix().cmp(&self.prefix) {
            std::cmp::Ordering::Equal => key::compare(node.key(), self.key).is_lt(),
            o => o.is_lt(),
        }
    }
}

/// True when `node`'s key is above `other`'s (neither the head).
fn last_is_after(node: NodePtr, other: NodePtr) -> bool {
    SearchKey {
        prefix: node.prefix(),
        key: node.key(),
    }
    .above(other)
}

/// A published node (or the head), as a pointer that may reach its whole
/// allocation: a `&Node` would cover the fixed part alone, and the links,
/// key and value lie beyond it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct NodePtr(NonNull<Node>);

// SAFETY: a published node is immutable but for its atomic links, and it
// lives as long as its list; an `Entry` holding one borrows the list.
unsafe impl Send for NodePtr {}
// SAFETY: as above.
unsafe impl Sync for NodePtr {}

impl NodePtr {
    /// `p` must be null or point at a node written whole (by
    /// [`SkipList::insert`]) or the head.
    fn new(p: *mut Node) -> Option<NodePtr> {
        NonNull::new(p).map(NodePtr)
    }

    fn height(self) -> usize {
        // SAFETY: the fixed part was written before the node was
        // published and never changes.
        unsafe { ((*self.0.as_ptr()).key_len_height >> 24) as usize }
    }

    fn prefix(self) -> u64 {
        // SAFETY: as for the height.
        unsafe { (*self.0.as_ptr()).prefix }
    }

    fn links(self) -> *const AtomicPtr<Node> {
        // SAFETY: the links follow the fixed part in the same allocation;
        // `Node` is a multiple of the link size, so they are aligned.
        unsafe { self.0.as_ptr().add(1).cast() }
    }

    /// The link at `level`; valid while the list is.
    fn link<'a>(self, level: usize) -> &'a AtomicPtr<Node> {
        debug_assert!(level < self.height());
        // SAFETY: `level < height`, and the node's allocation holds `height`
        // initialized links, which live as long as the list.
        unsafe { &*self.links().add(level) }
    }

    fn next(self, level: usize) -> Option<NodePtr> {
        NodePtr::new(self.link(level).load(Ordering::Acquire))
    }

    fn bytes(self) -> *const u8 {
        // SAFETY: the key and value follow the links, in the allocation.
        unsafe { self.links().add(self.height()).cast() }
    }

    /// The internal key; valid while the list is.
    fn key<'a>(self) -> &'a [u8] {
        // SAFETY: written before the node was published, never changed.
        unsafe {
            let n = ((*self.0.as_ptr()).key_len_height & 0xff_ffff) as usize;
            std::slice::from_raw_parts(self.bytes(), n)
        }
    }

    fn value<'a>(self) -> &'a [u8] {
        // SAFETY: as for the key: in the node or the value arena, which
        // live as long as the list.
        unsafe {
            let node = self.0.as_ptr();
            let at = (*node).value.load(Ordering::Relaxed);
            std::slice::from_raw_parts(at, (*node).value_len as usize)
        }
    }
}

/// The head: a node of the greatest height that holds no key (it is never
/// compared).
#[repr(C)]
struct Head {
    node: Node,
    links: [AtomicPtr<Node>; MAX_HEIGHT],
}

/// An arena block, as `Box::into_raw` made it.
type RawBlock = NonNull<[MaybeUninit<u64>]>;

/// Full-size arena blocks ([`MAX_BLOCK_BYTES`]) that dropped memtables gave
/// back, for the next memtables of the same database, up to a cap (a write
/// buffer's worth). Fresh blocks cost a page fault and the kernel's zeroing
/// per 4 KiB page on first touch; a recycled block was touched already.
/// Without it, the memtable inserts of the scavenger preset's 1 KiB update
/// benchmark spent 4% of the process's CPU samples in page faults, more
/// under a memory cap, where the allocator returns freed memory at once.
///
/// What the budget counts (`docs/design.md`, "Memory"): the active memtable
/// is charged a whole write buffer from its start, and the pooled blocks it
/// will take as it grows are inside that charge. Only the pooled blocks
/// beyond the active memtable's room are held memory of their own, the
/// *excess*: pooled plus the blocks the newest memtable took (`growing`),
/// less the cap. [`BlockPool::on_change`] hears it. While writes go on the
/// excess is the next memtable's; once no block has moved for
/// [`POOL_IDLE`], [`BlockPool::trim_if_idle`] frees it, so that a database
/// that turned to reads gets its whole block cache back.
pub(crate) struct BlockPool {
    free: Mutex<Vec<RawBlock>>,
    /// A write buffer's worth of blocks ([`BlockPool::set_cap_bytes`]).
    cap_blocks: AtomicUsize,
    /// Full-size blocks the newest memtable's arenas took, pooled or fresh,
    /// since it was made ([`BlockPool::rearm`]). A memtable made before the
    /// one it follows stopped growing counts some of that one's too: more,
    /// never less, than its own.
    growing: AtomicUsize,
    /// When a block last moved in or out, in ms from `epoch`.
    last_use_ms: AtomicU64,
    epoch: std::time::Instant,
    /// [`POOL_IDLE`] (tests shorten it).
    idle_ms: AtomicU64,
    /// Told the excess pooled bytes after every change.
    on_change: Box<dyn Fn(u64) + Send + Sync>,
}

/// How long the pool's blocks stay unused before its excess is freed.
pub(crate) const POOL_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

// SAFETY: the pooled blocks are plain memory no arena refers to any more;
// they move between threads only behind the pool's mutex.
unsafe impl Send for BlockPool {}
// SAFETY: as for `Send`: every access to the blocks takes the mutex.
unsafe impl Sync for BlockPool {}

impl BlockPool {
    /// A pool of up to `cap_bytes` of blocks; `on_change` hears the excess
    /// pooled bytes after each change.
    pub(crate) fn new(cap_bytes: usize, on_change: Box<dyn Fn(u64) + Send + Sync>) -> Self {
        BlockPool {
            free: Mutex::new(Vec::new()),
            cap_blocks: AtomicUsize::new(cap_bytes / MAX_BLOCK_BYTES),
            growing: AtomicUsize::new(0),
            last_use_ms: AtomicU64::new(0),
            epoch: std::time::Instant::now(),
            idle_ms: AtomicU64::new(POOL_IDLE.as_millis() as u64),
            on_change,
        }
    }

    /// A new write buffer size: what the newest memtable may take from
    /// here on. The excess is told at the next change.
    pub(crate) fn set_cap_bytes(&self, cap_bytes: usize) {
        self.cap_blocks
            .store(cap_bytes / MAX_BLOCK_BYTES, Ordering::Relaxed);
    }

    /// Bytes of the blocks pooled now.
    pub(crate) fn pooled_bytes(&self) -> u64 {
        (self.free.lock().len() * MAX_BLOCK_BYTES) as u64
    }

    /// Pooled bytes beyond what the newest memtable can still take.
    #[cfg(test)]
    pub(crate) fn excess_bytes(&self) -> u64 {
        self.excess(self.free.lock().len())
    }

    fn excess(&self, pooled: usize) -> u64 {
        let held = pooled + self.growing.load(Ordering::Relaxed);
        let cap = self.cap_blocks.load(Ordering::Relaxed);
        (held.saturating_sub(cap) * MAX_BLOCK_BYTES) as u64
    }

    fn used_now(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_use_ms.store(ms, Ordering::Relaxed);
    }

    /// A new memtable takes its blocks from here from now on: what it
    /// takes is counted from zero.
    pub(crate) fn rearm(&self) {
        let free = self.free.lock();
        self.growing.store(0, Ordering::Relaxed);
        (self.on_change)(self.excess(free.len()));
    }

    /// A pooled block for the newest memtable, counted as taken.
    fn take(&self) -> Option<RawBlock> {
        let mut free = self.free.lock();
        let block = free.pop()?;
        // Pooled less one, taken plus one: the excess stays.
        self.growing.fetch_add(1, Ordering::Relaxed);
        self.used_now();
        Some(block)
    }

    /// The newest memtable made a fresh block (the pool had none).
    fn count_fresh(&self) {
        let free = self.free.lock();
        self.growing.fetch_add(1, Ordering::Relaxed);
        self.used_now();
        (self.on_change)(self.excess(free.len()));
    }

    /// Keeps the full-size ones of `blocks` while there is room, and frees
    /// the rest.
    fn give_back(&self, blocks: &[RawBlock]) {
        let mut free = self.free.lock();
        let before = free.len();
        for &block in blocks {
            if block.len() * size_of::<u64>() == MAX_BLOCK_BYTES
                && free.len() < self.cap_blocks.load(Ordering::Relaxed)
            {
                free.push(block);
            } else {
                // SAFETY: made by `Box::into_raw` in `Arena::new_block`,
                // freed once, here; its arena is gone.
                drop(unsafe { Box::from_raw(block.as_ptr()) });
            }
        }
        if free.len() != before {
            self.used_now();
            (self.on_change)(self.excess(free.len()));
        }
    }

    /// Frees the excess once no block has moved for [`POOL_IDLE`]; the
    /// block cache calls it on a miss while the excess holds it smaller.
    /// Returns whether it freed any.
    pub(crate) fn trim_if_idle(&self) -> bool {
        let mut free = self.free.lock();
        let excess = (self.excess(free.len()) as usize) / MAX_BLOCK_BYTES;
        let idle_ms = (self.epoch.elapsed().as_millis() as u64)
            .saturating_sub(self.last_use_ms.load(Ordering::Relaxed));
        if excess == 0 || free.is_empty() || idle_ms < self.idle_ms.load(Ordering::Relaxed) {
            return false;
        }
        for _ in 0..excess.min(free.len()) {
            let block = free.pop().expect("a pooled block");
            // SAFETY: as in `give_back`: pooled blocks belong to no arena.
            drop(unsafe { Box::from_raw(block.as_ptr()) });
        }
        (self.on_change)(self.excess(free.len()));
        true
    }

    #[cfg(test)]
    pub(crate) fn set_idle(&self, idle: std::time::Duration) {
        self.idle_ms
            .store(idle.as_millis() as u64, Ordering::Relaxed);
    }
}

impl Drop for BlockPool {
    fn drop(&mut self) {
        for &block in self.free.get_mut().iter() {
            // SAFETY: as in `give_back`: pooled blocks belong to no arena.
            drop(unsafe { Box::from_raw(block.as_ptr()) });
        }
    }
}

/// Memory handed out in 8-byte aligned pieces from blocks that are freed
/// (or pooled) only with the arena.
#[derive(Default)]
struct Arena {
    state: Mutex<ArenaState>,
    /// Bytes of the blocks allocated, less the free rest of the current
    /// one: the pieces handed out, the ends of earlier blocks too short for
    /// the next piece, and the list of blocks.
    used: AtomicUsize,
}

#[derive(Default)]
struct ArenaState {
    /// Raw, not boxes: moving a box asserts it is the only way to its
    /// memory, which the pieces handed out are not.
    blocks: Vec<RawBlock>,
    /// Free space of the current block.
    next: Option<NonNull<u8>>,
    left: usize,
    block_bytes: usize,
    /// Where full-size blocks come from when it has some, and go back to.
    pool: Option<Arc<BlockPool>>,
}

// SAFETY: the blocks are plain memory owned by the state; it moves between
// threads only behind the arena's mutex.
unsafe impl Send for ArenaState {}

impl Drop for ArenaState {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.give_back(&self.blocks);
            return;
        }
        for &block in &self.blocks {
            // SAFETY: made by `Box::into_raw` in `Arena::new_block`, freed
            // once, here; nothing refers to it once the list is dropped.
            drop(unsafe { Box::from_raw(block.as_ptr()) });
        }
    }
}

impl Arena {
    /// `bytes` (a multiple of 8) of uninitialized memory, 8-byte aligned,
    /// that stays in place until the arena is dropped.
    fn alloc(&self, bytes: usize) -> NonNull<u8> {
        debug_assert!(bytes.is_multiple_of(8));
        let mut st = self.state.lock();
        if st.block_bytes == 0 {
            st.block_bytes = FIRST_BLOCK_BYTES;
        }
        // A large piece gets a block of its own, so that the current
        // block's rest is not wasted.
        if bytes > st.block_bytes / 4 {
            return self.new_block(&mut st, bytes, true);
        }
        if st.left < bytes {
            // The old block's rest is not used again.
            self.used.fetch_add(st.left, Ordering::Relaxed);
            let size = st.block_bytes;
            st.block_bytes = (size * 2).min(MAX_BLOCK_BYTES);
            let start = self.new_block(&mut st, size, false);
            st.next = Some(start);
            st.left = size;
        }
        self.used.fetch_add(bytes, Ordering::Relaxed);
        let at = st.next.expect("a current block");
        // SAFETY: `left >= bytes`, so the piece and the new start lie in
        // the current block (or one past its end).
        st.next = Some(unsafe { NonNull::new_unchecked(at.as_ptr().add(bytes)) });
        st.left -= bytes;
        at
    }

    /// A new block of `bytes` (a multiple of 8); counted as used at once
    /// when it is a piece of its `own` (a shared block's pieces are counted
    /// as they go out).
    fn new_block(&self, st: &mut ArenaState, bytes: usize, own: bool) -> NonNull<u8> {
        let full = bytes == MAX_BLOCK_BYTES;
        let pooled = full
            .then(|| st.pool.as_ref().and_then(|p| p.take()))
            .flatten();
        let block = pooled.unwrap_or_else(|| {
            if let (true, Some(pool)) = (full, &st.pool) {
                pool.count_fresh();
            }
            let block = Box::<[u64]>::new_uninit_slice(bytes.div_ceil(8));
            NonNull::new(Box::into_raw(block)).expect("a block")
        });
        // The list's own growth is counted too: the memtable's budget is
        // memory.
        let listed = st.blocks.capacity();
        st.blocks.push(block);
        let grown = (st.blocks.capacity() - listed) * size_of::<RawBlock>();
        let own = if own { bytes } else { 0 };
        self.used.fetch_add(own + grown, Ordering::Relaxed);
        block.cast()
    }
}

/// An ordered map of internal keys to values; see the module comment.
pub(crate) struct SkipList {
    head: Box<Head>,
    /// Levels in use (at least 1).
    height: AtomicUsize,
    len: AtomicUsize,
    /// The nodes, with their keys and short values.
    arena: Arena,
    /// Values longer than [`INLINE_VALUE_BYTES`].
    values: Arena,
    /// State of the random heights (splitmix64).
    seed: AtomicU64,
}

impl Default for SkipList {
    fn default() -> Self {
        Self::with_pool(None)
    }
}

impl SkipList {
    /// An empty list whose arenas take full-size blocks from `pool` and
    /// give them back when the list is dropped; the pool counts what it
    /// takes from now on ([`BlockPool::rearm`]).
    pub(crate) fn with_pool(pool: Option<Arc<BlockPool>>) -> Self {
        if let Some(p) = &pool {
            p.rearm();
        }
        let arena = |pool: Option<Arc<BlockPool>>| Arena {
            state: Mutex::new(ArenaState {
                blocks: Vec::new(),
                next: None,
                left: 0,
                block_bytes: 0,
                pool,
            }),
            used: AtomicUsize::new(0),
        };
        SkipList {
            head: Box::new(Head {
                node: Node {
                    prefix: 0,
                    key_len_height: (MAX_HEIGHT as u32) << 24,
                    value_len: 0,
                    value: AtomicPtr::new(NonNull::dangling().as_ptr()),
                },
                links: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            }),
            height: AtomicUsize::new(1),
            len: AtomicUsize::new(0),
            arena: arena(pool.clone()),
            values: arena(pool),
            seed: AtomicU64::new(0x05ee_d0f5_ca1e),
        }
    }
}

/// Where a key goes at each level of a [`SkipList`]: the last node below
/// it and the first not below it (`None`: the end), kept from one search
/// or insert to the next of ascending keys ([`SkipList::insert_hinted`]).
pub(crate) struct Splice<'a> {
    list: &'a SkipList,
    /// Levels filled (0 for a new splice).
    height: usize,
    prev: [NodePtr; MAX_HEIGHT],
    next: [Option<NodePtr>; MAX_HEIGHT],
    /// The node inserted last through this splice: below every key that
    /// follows, so a walk at level 0 may start there.
    last: Option<NodePtr>,
}

/// Where [`SkipList::warm`]'s walk for a key ended: the last node whose
/// user key is below it (or the head), valid while the list is.
#[derive(Clone, Copy)]
pub(crate) struct Hint<'a> {
    below: NodePtr,
    _list: PhantomData<&'a SkipList>,
}

/// One entry of a [`SkipList`], valid while the list is.
#[derive(Clone, Copy)]
pub(crate) struct Entry<'a> {
    node: NodePtr,
    list: &'a SkipList,
}

impl<'a> Entry<'a> {
    /// The internal key.
    pub(crate) fn key(&self) -> &'a [u8] {
        self.node.key()
    }

    pub(crate) fn value(&self) -> &'a [u8] {
        self.node.value()
    }

    /// The entry after this one in key order.
    pub(crate) fn next(&self) -> Option<Entry<'a>> {
        self.list.entry(self.node.next(0))
    }

    /// The entry as a pointer, for [`SkipList::entry_at`].
    pub(crate) fn as_raw(&self) -> *mut u8 {
        self.node.0.as_ptr().cast()
    }

    /// The entry before this one in key order (a search from the head).
    pub(crate) fn prev(&self) -> Option<Entry<'a>> {
        self.list.entry(Some(self.list.last_below(self.key())))
    }
}

impl SkipList {
    fn head(&self) -> NodePtr {
        // From the whole head, so that the pointer reaches its links.
        NodePtr(NonNull::from(&*self.head).cast())
    }

    /// The entry of a node; `None` for none or the head.
    fn entry(&self, node: Option<NodePtr>) -> Option<Entry<'_>> {
        let node = node.filter(|&n| n != self.head())?;
        Some(Entry { node, list: self })
    }

    /// The entry `raw` points at.
    ///
    /// # Safety
    /// `raw` must come from [`Entry::as_raw`] of an entry of this list.
    pub(crate) unsafe fn entry_at(&self, raw: *mut u8) -> Entry<'_> {
        // SAFETY: the caller's promise: a published node of this list.
        let node = NodePtr(unsafe { NonNull::new_unchecked(raw.cast()) });
        Entry { node, list: self }
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Bytes the entries take in the two arenas: what they allocated, less
    /// the free rest of each one's current block (at most
    /// [`MAX_BLOCK_BYTES`] each).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.arena.used.load(Ordering::Relaxed) + self.values.used.load(Ordering::Relaxed)
    }

    fn random_height(&self) -> usize {
        let mut x = (self.seed).fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
        let mut height = 1;
        while height < MAX_HEIGHT && x.is_multiple_of(BRANCHING) {
            height += 1;
            x /= BRANCHING;
        }
        height
    }

    /// The first node at `level` from `start` on whose key is not below
    /// `key`, with the node before it: where `key` goes at that level.
    /// `stop` is a node known not to be below `key` (the one the level
    /// above stopped at): met again, it ends the walk without a
    /// comparison.
    fn splice_at(
        &self,
        key: &SearchKey<'_>,
        start: NodePtr,
        level: usize,
        stop: Option<NodePtr>,
    ) -> (NodePtr, Option<NodePtr>) {
        let mut before = start;
        loop {
            match before.next(level) {
                Some(after) if Some(after) != stop && key.above(after) => before = after,
                after => return (before, after),
            }
        }
    }

    /// The last node whose key is below `key` (or the head) and the one
    /// after it at level 0, as one search saw them. (Loading the link again
    /// could meet a node inserted since, newer than a reader's snapshot.)
    fn search(&self, key: &SearchKey<'_>) -> (NodePtr, Option<NodePtr>) {
        let mut x = self.head();
        let mut stop = None;
        for level in (0..self.height.load(Ordering::Acquire)).rev() {
            (x, stop) = self.splice_at(key, x, level, stop);
        }
        (x, stop)
    }

    /// Fills `splice` for `key` at levels `0..top`, starting from the
    /// lowest level whose bracket from the splice's last key still holds
    /// `key` (all of them, from the head, when the splice is shorter than
    /// `top`). The splice's last key must not be above `key`.
    fn search_from(&self, splice: &mut Splice<'_>, key: &SearchKey<'_>, top: usize) {
        // Levels `0..from` are searched again, from `start` on level
        // `from - 1`; `stop` is the next node of level `from`.
        let (from, mut x, mut stop) = if splice.height < top {
            splice.height = top;
            (top, self.head(), None)
        } else {
            // Checked from the top: the first level whose next node is
            // below `key`, and every level under it, are searched again.
            // Above it `prev < key <= next` holds still (`prev` was below
            // the last key, which is not above this one). Level 0 is
            // searched again in any case: its link is what a lookup
            // answers with, and this search must load it itself.
            let from = (0..top)
                .rev()
                .find(|&l| splice.next[l].is_some_and(|n| key.above(n)))
                .map_or(1, |l| l + 1);
            let stop = if from < top { splice.next[from] } else { None };
            (from, splice.prev[from - 1], stop)
        };
        for level in (0..from).rev() {
            (x, stop) = self.splice_at(key, x, level, stop);
            (splice.prev[level], splice.next[level]) = (x, stop);
        }
    }

    /// Brings into the cache the nodes that inserts of `user_keys`
    /// (ascending) will meet, before they run. A search is a chain of
    /// dependent loads, each node's address read from the node before, so
    /// one search waits for its cache misses one after another (a
    /// pipelined write's insert was ~1 µs, most of it such waits). Here the
    /// searches of up to [`WARM_GROUP`] keys advance in step, one node
    /// each per round, each prefetching the node it will compare next:
    /// their misses overlap, and the inserts that follow find their paths
    /// cached (group prefetching; Chen, Ailamaki, Gibbons and Mowry,
    /// "Improving Hash Join Performance through Prefetching", ICDE 2004).
    /// It only reads, as any reader does, and changes nothing. It returns,
    /// for each key, the last node its walk found below the key at level 0:
    /// an insert of that key whose node takes level 0 only starts there
    /// ([`SkipList::insert_hinted`]) instead of searching again.
    pub(crate) fn warm(&self, user_keys: &[&[u8]]) -> SmallVec<[Hint<'_>; WARM_GROUP]> {
        let mut hints: SmallVec<[Hint<'_>; WARM_GROUP]> = smallvec::smallvec![
            Hint {
                below: self.head(),
                _list: PhantomData,
            };
            user_keys.len()
        ];
        self.walk_in_step(user_keys, |i, n| hints[i].below = n);
        hints
    }

    /// [`SkipList::warm`]'s walks; `reached` gets each key's index and the
    /// last node whose user key is below it (or the head), where its walk
    /// ended.
    fn walk_in_step(&self, user_keys: &[&[u8]], mut reached: impl FnMut(usize, NodePtr)) {
        struct Walk<'k> {
            i: usize,
            prefix: u64,
            key: &'k [u8],
            at: NodePtr,
            level: usize,
            next: Option<NodePtr>,
        }
        let top = self.height.load(Ordering::Acquire);
        // True when `n`'s user key is below `w`'s (its versions do not
        // matter here: they lie together).
        let below = |w: &Walk<'_>, n: NodePtr| match n.prefix().cmp(&w.prefix) {
            std::cmp::Ordering::Equal => key::compare_bytes(key::user_key(n.key()), w.key).is_lt(),
            o => o.is_lt(),
        };
        for (g, group) in user_keys.chunks(WARM_GROUP).enumerate() {
            let mut walks: SmallVec<[Walk<'_>; WARM_GROUP]> = (group.iter().enumerate())
                .map(|(i, &key)| {
                    let next = self.head().next(top - 1);
                    prefetch(next);
                    Walk {
                        i: g * WARM_GROUP + i,
                        prefix: key_prefix(key),
                        key,
                        at: self.head(),
                        level: top - 1,
                        next,
                    }
                })
                .collect();
            while !walks.is_empty() {
                walks.retain(|w| {
                    match w.next {
                        Some(n) if below(w, n) => w.at = n,
                        _ if w.level == 0 => {
                            reached(w.i, w.at);
                            return false;
                        }
                        _ => w.level -= 1,
                    }
                    w.next = w.at.next(w.level);
                    prefetch(w.next);
                    true
                });
            }
        }
    }

    /// The last node whose key is below `key`, or the head.
    fn last_below(&self, key: &[u8]) -> NodePtr {
        self.search(&SearchKey::new(key)).0
    }

    /// The first entry whose key is at or above `key`.
    pub(crate) fn lower_bound(&self, key: &[u8]) -> Option<Entry<'_>> {
        self.entry(self.search(&SearchKey::new(key)).1)
    }

    /// A finger for searches and inserts of ascending keys
    /// ([`SkipList::lower_bound_with`], [`SkipList::insert_hinted`]).
    pub(crate) fn splice(&self) -> Splice<'_> {
        Splice {
            list: self,
            height: 0,
            prev: [self.head(); MAX_HEIGHT],
            next: [None; MAX_HEIGHT],
            last: None,
        }
    }

    /// [`SkipList::lower_bound`] for the next of ascending keys: `key`
    /// must not be below the last key `splice` served. The search starts
    /// where the last one's path and this one's part, so neighbouring
    /// keys share the upper levels of one descent.
    pub(crate) fn lower_bound_with(
        &self,
        splice: &mut Splice<'_>,
        key: &[u8],
    ) -> Option<Entry<'_>> {
        debug_assert!(ptr::eq(splice.list, self), "a splice of this list");
        let top = self.height.load(Ordering::Acquire);
        self.search_from(splice, &SearchKey::new(key), top);
        self.entry(splice.next[0])
    }

    pub(crate) fn front(&self) -> Option<Entry<'_>> {
        self.entry(self.head().next(0))
    }

    pub(crate) fn back(&self) -> Option<Entry<'_>> {
        let mut x = self.head();
        for level in (0..self.height.load(Ordering::Acquire)).rev() {
            while let Some(next) = x.next(level) {
                x = next;
            }
        }
        self.entry(Some(x))
    }

    /// Inserts the internal key `user_key` + `trailer` (little-endian, as
    /// `key::pack_trailer` gives it) with `value`; returns its entry.
    #[cfg(test)]
    pub(crate) fn insert(&self, user_key: &[u8], trailer: u64, value: &[u8]) -> Entry<'_> {
        self.insert_with(&mut self.splice(), user_key, trailer, value)
    }

    /// [`SkipList::insert`] for the next of ascending keys: the internal
    /// key must be above every key `splice` served before. The descent
    /// starts where the last key's path and this one's part (a batch's
    /// keys, sorted, share the upper levels of one descent).
    #[cfg(test)]
    pub(crate) fn insert_with(
        &self,
        splice: &mut Splice<'_>,
        user_key: &[u8],
        trailer: u64,
        value: &[u8],
    ) -> Entry<'_> {
        self.insert_hinted(splice, None, user_key, trailer, value)
    }

    /// Inserts the internal key `user_key` + `trailer` with `value`, the
    /// next of ascending keys: the internal key must be above every key
    /// `splice` served before. The descent starts where the last key's
    /// path and this one's part (a batch's keys, sorted, share the upper
    /// levels of one descent). With the [`Hint`] [`SkipList::warm`] gave
    /// for `user_key`, a node of height 1 (three in four) is linked
    /// by a walk at level 0 from the hint, where the nodes inserted since
    /// the warm-up (this batch's, below the key) are the only ones to pass,
    /// instead of a descent from the splice. `splice` is left as it was:
    /// its nodes are still below the keys that follow, and a descent
    /// searches level 0 again from them in any case.
    pub(crate) fn insert_hinted(
        &self,
        splice: &mut Splice<'_>,
        hint: Option<Hint<'_>>,
        user_key: &[u8],
        trailer: u64,
        value: &[u8],
    ) -> Entry<'_> {
        debug_assert!(ptr::eq(splice.list, self), "a splice of this list");
        let height = self.random_height();
        let key_len = user_key.len() + key::TRAILER_LEN;
        let inline = value.len() <= INLINE_VALUE_BYTES;
        let inline_len = if inline { value.len() } else { 0 };
        let bytes = Node::size(height, key_len, inline_len).next_multiple_of(8);
        let raw = self.arena.alloc(bytes).cast::<Node>();
        // SAFETY: `bytes` of fresh arena memory, 8-byte aligned: the fixed
        // part, `height` links, the key and an inline value; or a piece of
        // the value arena of the value's length. All written here before
        // any link to the node is published.
        unsafe {
            let links = raw.as_ptr().add(1).cast::<AtomicPtr<Node>>();
            let k = links.add(height).cast::<u8>();
            let v = if inline {
                k.add(key_len)
            } else {
                let bytes = value.len().next_multiple_of(8);
                self.values.alloc(bytes).as_ptr()
            };
            ptr::copy_nonoverlapping(value.as_ptr(), v, value.len());
            raw.as_ptr().write(Node {
                prefix: key_prefix(user_key),
                key_len_height: key_len as u32 | (height as u32) << 24,
                value_len: value.len() as u32,
                value: AtomicPtr::new(v),
            });
            for level in 0..height {
                links.add(level).write(AtomicPtr::new(ptr::null_mut()));
            }
            ptr::copy_nonoverlapping(user_key.as_ptr(), k, user_key.len());
            let t = trailer.to_le_bytes();
            ptr::copy_nonoverlapping(t.as_ptr(), k.add(user_key.len()), t.len());
        }
        let node = NodePtr(raw);
        let key = node.key();
        let mut top = self.height.load(Ordering::Acquire);
        while height > top {
            match (self.height).compare_exchange_weak(
                top,
                height,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => top = now,
            }
        }
        let top = top.max(height);
        let search = SearchKey {
            prefix: key_prefix(user_key),
            key,
        };
        // (Only a node of height 1 takes the hint; `own` holds its place.)
        let mut own = ([self.head(); 1], [None; 1]);
        let (prev, next): (&mut [NodePtr], &mut [Option<NodePtr>]) = match hint {
            Some(h) if height == 1 => {
                // The hint's user key is below this one, and nodes never
                // go away: the walk from it ends where this key goes. It
                // starts at the later of the hint and the last node this
                // splice inserted (also below this key): the batch's keys
                // inserted since the warm-up that fall in the hint's gap
                // are passed once, not once per key after them (into an
                // empty list every hint is the head, and a batch of n keys
                // walked n^2/2 nodes: GC's relocations into a fresh
                // memtable, 12 µs a key at 10,000).
                let start = match splice.last {
                    Some(last) if h.below == self.head() || last_is_after(last, h.below) => last,
                    _ => h.below,
                };
                (own.0[0], own.1[0]) = self.splice_at(&search, start, 0, None);
                (&mut own.0, &mut own.1)
            }
            _ => {
                self.search_from(splice, &search, top);
                (&mut splice.prev, &mut splice.next)
            }
        };
        // Linked bottom up: a reader that meets the node at a level can go
        // down from it.
        let as_raw = |n: Option<NodePtr>| n.map_or(ptr::null_mut(), |n| n.0.as_ptr());
        for level in 0..height {
            loop {
                node.link(level)
                    .store(as_raw(next[level]), Ordering::Relaxed);
                match prev[level].link(level).compare_exchange(
                    as_raw(next[level]),
                    raw.as_ptr(),
                    Ordering::Release,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
                    // Another insert went in between: search on from the
                    // predecessor (entries never go away).
                    Err(_) => {
                        (prev[level], next[level]) =
                            self.splice_at(&search, prev[level], level, None)
                    }
                }
            }
            // The next key, above this one, goes after it.
            prev[level] = node;
        }
        splice.last = Some(node);
        self.len.fetch_add(1, Ordering::Relaxed);
        Entry { node, list: self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    thread_local! {
        /// Key comparisons of inserts' searches on this thread.
        pub(super) static COMPARISONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    fn ikey(user: &[u8], seq: u64) -> Vec<u8> {
        key::encode(user, seq, 1)
    }

    fn keys(list: &SkipList) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut e = list.front();
        while let Some(x) = e {
            out.push(x.key().to_vec());
            e = x.next();
        }
        out
    }

    fn insert(list: &SkipList, user: &[u8], seq: u64, value: &[u8]) {
        let k = ikey(user, seq);
        let trailer = key::trailer(&k);
        let e = list.insert(user, trailer, value);
        assert_eq!(e.key(), &k[..]);
        assert_eq!(e.value(), value);
    }

    #[test]
    fn walks_in_step_end_where_a_search_of_each_key_does() {
        let seed: u64 = rand::random();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let list = SkipList::default();
        let probe = |list: &SkipList, rng: &mut rand::rngs::StdRng| {
            // Some present, some not, some sharing their first 8 bytes,
            // one below and one above every key; ascending, as inserts
            // give them.
            let mut users: Vec<Vec<u8>> = (0..40)
                .map(|_| format!("k{:04}", rng.gen_range(0..600)).into_bytes())
                .chain([b"".to_vec(), b"zz".to_vec(), b"k0001aaaa1".to_vec()])
                .collect();
            users.sort();
            let refs: Vec<&[u8]> = users.iter().map(|u| &u[..]).collect();
            let mut got = vec![None; refs.len()];
            list.walk_in_step(&refs, |i, n| got[i] = Some(n));
            for (i, u) in refs.iter().enumerate() {
                // Below every version of `u`: the newest comes first.
                let want = list.last_below(&key::encode(u, key::MAX_SEQUENCE, 1));
                assert!(got[i] == Some(want), "seed {seed}: key {u:?}");
            }
        };
        probe(&list, &mut rng);
        for seq in 0..2000u64 {
            let user = format!(
                "k{:04}{}",
                rng.gen_range(0..600),
                "aaaa".repeat(seq as usize % 3)
            );
            insert(&list, user.as_bytes(), seq, b"v");
            if seq % 500 == 0 {
                probe(&list, &mut rng);
            }
        }
        probe(&list, &mut rng);
    }

    #[test]
    fn an_empty_list_has_no_entries_and_holds_no_memory() {
        let list = SkipList::default();
        assert!(list.front().is_none() && list.back().is_none());
        assert!(list.lower_bound(&ikey(b"a", 1)).is_none());
        assert_eq!((list.len(), list.memory_bytes()), (0, 0));
    }

    #[test]
    fn entries_come_back_in_key_order_both_ways_with_their_values() {
        let seed: u64 = rand::random();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let list = SkipList::default();
        let mut model = std::collections::BTreeMap::new();
        let n = if cfg!(miri) { 300 } else { 5000 };
        for seq in 1..n {
            let user = format!("k{:04}", rng.gen_range(0..800)).into_bytes();
            let value = vec![seq as u8; rng.gen_range(0..300)];
            insert(&list, &user, seq, &value);
            model.insert(ikey(&user, seq), value);
        }
        // `key::compare` on internal keys: user key, then newest first.
        let mut want: Vec<Vec<u8>> = model.keys().cloned().collect();
        want.sort_by(|a, b| key::compare(a, b));
        assert_eq!(keys(&list), want, "seed {seed}");
        assert_eq!(list.len(), want.len());
        let mut back = Vec::new();
        let mut e = list.back();
        while let Some(x) = e {
            assert_eq!(x.value(), &model[x.key()][..], "seed {seed}");
            back.push(x.key().to_vec());
            e = x.prev();
        }
        back.reverse();
        assert_eq!(back, want, "seed {seed}");
        // lower_bound lands on the first key at or above the target.
        for _ in 0..n / 10 {
            let user = format!("k{:04}", rng.gen_range(0..820)).into_bytes();
            let target = ikey(&user, rng.gen_range(0..n + 100));
            let got = list.lower_bound(&target).map(|e| e.key().to_vec());
            let first = want.iter().find(|k| key::compare(k, &target).is_ge());
            assert_eq!(got.as_ref(), first, "seed {seed}");
        }
    }

    #[test]
    fn key_prefixes_order_keys_as_their_bytes_do_where_they_differ() {
        let keys: [&[u8]; 10] = [
            b"",
            b"\0",
            b"a",
            b"a\0",
            b"a\0\0",
            b"a\0b",
            b"ab",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefgi",
        ];
        for a in keys {
            for b in keys {
                let (pa, pb) = (key_prefix(a), key_prefix(b));
                assert!(pa == pb || pa.cmp(&pb) == a.cmp(b), "{a:?} {b:?}");
            }
        }
    }

    /// A model test of the warm-up's hints: runs of keys (sorted, some
    /// twice, as a batch may hold them) are warmed, then inserted through
    /// one splice each with their hints ([`SkipList::insert_hinted`]),
    /// with a key of another run now and then inserted between the
    /// warm-up and the run's inserts; every key must land in order.
    #[test]
    fn hinted_inserts_land_where_the_model_says() {
        let seed: u64 = rand::random();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let list = SkipList::default();
        let mut model = Vec::new();
        let user = |rng: &mut rand::rngs::StdRng| random_user_key(rng, 300);
        let mut seq = 1;
        let rounds = if cfg!(miri) { 20 } else { 400 };
        for _ in 0..rounds {
            let mut run: Vec<Vec<u8>> = (0..rng.gen_range(2..40)).map(|_| user(&mut rng)).collect();
            run.sort();
            let refs: Vec<&[u8]> = run.iter().map(Vec::as_slice).collect();
            let hints = list.warm(&refs);
            // Inserted after the warm-up: the hints must walk past them.
            for _ in 0..rng.gen_range(0..3) {
                let u = user(&mut rng);
                list.insert(&u, key::pack_trailer(seq, 1), b"between");
                model.push(ikey(&u, seq));
                seq += 1;
            }
            // Repeated keys go in batch order, each from a new splice, as
            // `MemTable::add_ops` inserts them.
            let repeats = run.windows(2).any(|w| w[0] == w[1]);
            let splice = &mut list.splice();
            for (u, h) in run.iter().zip(hints) {
                if repeats {
                    *splice = list.splice();
                }
                let hint = rng.gen_bool(0.9).then_some(h);
                let e = list.insert_hinted(splice, hint, u, key::pack_trailer(seq, 1), b"v");
                assert_eq!(e.key(), &ikey(u, seq)[..], "seed {seed}");
                model.push(ikey(u, seq));
                seq += 1;
            }
        }
        model.sort_by(|a, b| key::compare(a, b));
        assert_eq!(keys(&list), model, "seed {seed}");
        // Every level is in order too: lookups of every key find it.
        for k in &model {
            let got = list.lower_bound(k).map(|e| e.key().to_vec());
            assert_eq!(got.as_ref(), Some(k), "seed {seed}");
        }
    }

    /// A sorted batch inserted with its hints into an empty list (GC's
    /// relocations into a memtable just switched in): every hint is the
    /// head, and each walk must start past the batch's keys already
    /// inserted, not pass them all again (n^2/2 comparisons).
    #[test]
    fn a_hinted_batch_into_an_empty_list_compares_each_key_a_few_times() {
        let list = SkipList::default();
        let n: u64 = 2048;
        let run: Vec<Vec<u8>> = (0..n).map(|i| format!("{i:024}").into_bytes()).collect();
        let refs: Vec<&[u8]> = run.iter().map(Vec::as_slice).collect();
        let hints = list.warm(&refs);
        COMPARISONS.with(|c| c.set(0));
        let splice = &mut list.splice();
        for (seq, (u, h)) in (1..).zip(run.iter().zip(hints)) {
            list.insert_hinted(splice, Some(h), u, key::pack_trailer(seq, 1), b"v");
        }
        let compared = COMPARISONS.with(|c| c.get());
        assert!(compared < 8 * n, "{compared} comparisons for {n} keys");
        assert_eq!(keys(&list).len(), n as usize);
    }

    /// A user key of one of four stems (none, short, long, longer than
    /// eight bytes) and a number below `spread`: keys that share long
    /// prefixes and differ within and beyond the first 8 bytes.
    fn random_user_key(rng: &mut rand::rngs::StdRng, spread: u32) -> Vec<u8> {
        let stem = ["", "k", "key:0000", "key:00001234"][rng.gen_range(0..4)];
        let mut k = stem.as_bytes().to_vec();
        k.extend_from_slice(format!("{}", rng.gen_range(0..spread)).as_bytes());
        k
    }

    /// A model test of the finger: random runs of ascending keys inserted
    /// through one splice each ([`SkipList::insert_with`]), among plain
    /// inserts, then ascending lookups through one splice
    /// ([`SkipList::lower_bound_with`]) against a `BTreeMap`. Keys share
    /// long prefixes and differ within and beyond the first 8 bytes.
    #[test]
    fn runs_through_a_splice_insert_and_find_as_the_model_says() {
        let seed: u64 = rand::random();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let list = SkipList::default();
        let mut model = std::collections::BTreeMap::new();
        let user = |rng: &mut rand::rngs::StdRng| random_user_key(rng, 600);
        let mut seq = 1;
        let rounds = if cfg!(miri) { 20 } else { 400 };
        for _ in 0..rounds {
            let mut run: Vec<Vec<u8>> = (0..rng.gen_range(1..20)).map(|_| user(&mut rng)).collect();
            run.sort();
            run.dedup();
            let splice = &mut list.splice();
            for u in run {
                let value = vec![seq as u8; rng.gen_range(0..100)];
                let e = if rng.gen_bool(0.9) {
                    list.insert_with(splice, &u, key::pack_trailer(seq, 1), &value)
                } else {
                    list.insert(&u, key::pack_trailer(seq, 1), &value)
                };
                assert_eq!(
                    (e.key(), e.value()),
                    (&ikey(&u, seq)[..], &value[..]),
                    "seed {seed}"
                );
                model.insert(ikey(&u, seq), value);
                seq += 1;
            }
        }
        let mut want: Vec<Vec<u8>> = model.keys().cloned().collect();
        want.sort_by(|a, b| key::compare(a, b));
        assert_eq!(keys(&list), want, "seed {seed}");
        for _ in 0..rounds {
            let mut targets: Vec<Vec<u8>> = (0..rng.gen_range(1..30))
                .map(|_| ikey(&user(&mut rng), rng.gen_range(0..seq + 10)))
                .collect();
            targets.sort_by(|a, b| key::compare(a, b));
            let splice = &mut list.splice();
            for t in &targets {
                let got = list.lower_bound_with(splice, t).map(|e| e.key().to_vec());
                let first = want.iter().find(|k| key::compare(k, t).is_ge());
                assert_eq!(got.as_ref(), first, "seed {seed}");
                if let Some(k) = first {
                    let v = list.lower_bound_with(splice, t).unwrap().value();
                    assert_eq!(v, &model[k][..], "seed {seed}");
                }
            }
        }
    }

    #[test]
    fn large_values_get_blocks_of_their_own_and_all_memory_is_counted() {
        let list = SkipList::default();
        insert(&list, b"small", 1, b"v");
        // The node, and the list of blocks.
        let first = list.memory_bytes();
        assert!((40..300).contains(&first), "{first}");
        let big = vec![9u8; 100 << 10];
        insert(&list, b"big", 2, &big);
        assert!(list.memory_bytes() >= first + big.len());
        // The small ones still share the first block.
        let before = list.memory_bytes();
        insert(&list, b"small2", 3, b"w");
        assert!(list.memory_bytes() - before < 100);
        assert_eq!(
            list.lower_bound(&ikey(b"big", 9)).unwrap().value(),
            &big[..]
        );
    }

    #[test]
    fn concurrent_inserts_and_readers_see_a_consistent_order() {
        let seed: u64 = rand::random();
        let list = SkipList::default();
        let per_thread = if cfg!(miri) { 200 } else { 20_000u64 };
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let list = &list;
                s.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ t);
                    // Runs of ascending keys through a splice, as a
                    // batch goes in, racing the other threads' runs.
                    let mut i = 0;
                    while i < per_thread {
                        let n = rng.gen_range(1..16).min(per_thread - i);
                        let mut run: Vec<Vec<u8>> = (0..n)
                            .map(|_| format!("{:08}", rng.gen_range(0..1_000_000)).into_bytes())
                            .collect();
                        run.sort();
                        run.dedup();
                        let splice = &mut list.splice();
                        for user in run {
                            // Unique sequence numbers across the threads.
                            let seq = 1 + i * 3 + t;
                            let trailer = key::pack_trailer(seq, 1);
                            list.insert_with(splice, &user, trailer, &t.to_le_bytes());
                            i += 1;
                        }
                    }
                });
            }
            // A reader walking while the inserts go on sees a sorted list.
            s.spawn(|| {
                for _ in 0..if cfg!(miri) { 2 } else { 20 } {
                    let k = keys(&list);
                    assert!(k.windows(2).all(|w| key::compare(&w[0], &w[1]).is_lt()));
                }
            });
        });
        let k = keys(&list);
        assert_eq!(k.len() as u64, 3 * per_thread, "seed {seed}");
        assert!(
            k.windows(2).all(|w| key::compare(&w[0], &w[1]).is_lt()),
            "seed {seed}"
        );
        assert_eq!(list.len(), k.len());
    }

    #[test]
    /// The engine's pattern: one writer inserts a batch, then publishes its
    /// last sequence; readers search at a published sequence. A search that
    /// loaded a link twice once returned an entry newer than the snapshot
    /// (the server's concurrent INCR test saw half a transaction).
    fn readers_at_a_published_sequence_see_exactly_the_entries_up_to_it() {
        let list = SkipList::default();
        let visible = AtomicU64::new(0);
        let rounds = if cfg!(miri) { 200 } else { 200_000u64 };
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..rounds {
                    for (j, k) in [b"a", b"b"].iter().enumerate() {
                        let seq = 1 + 2 * i + j as u64;
                        list.insert(*k, key::pack_trailer(seq, 1), &i.to_le_bytes());
                    }
                    visible.store(2 * i + 2, Ordering::Release);
                }
            });
            for _ in 0..2 {
                s.spawn(|| loop {
                    let v = visible.load(Ordering::Acquire);
                    let read = |k: &[u8]| {
                        let seek = key::encode(k, v, key::KIND_SEEK);
                        list.lower_bound(&seek)
                            .map(|e| (key::user_key(e.key()).to_vec(), key::sequence(e.key())))
                    };
                    if v == 0 {
                        continue;
                    }
                    let a = read(b"a").unwrap();
                    let b = read(b"b").unwrap();
                    assert_eq!(a, (b"a".to_vec(), v - 1), "a at {v}");
                    assert_eq!(b, (b"b".to_vec(), v), "b at {v}");
                    if v == 2 * rounds {
                        break;
                    }
                });
            }
        });
    }

    #[test]
    fn the_pool_charges_only_blocks_beyond_the_active_lists_room_and_frees_them_when_idle() {
        const MIB: u64 = MAX_BLOCK_BYTES as u64;
        let heard = Arc::new(AtomicU64::new(u64::MAX));
        let h = heard.clone();
        let pool = Arc::new(BlockPool::new(
            4 * MAX_BLOCK_BYTES,
            Box::new(move |excess| h.store(excess, Ordering::Relaxed)),
        ));
        let fill = |list: &SkipList, from: u32, n: u32| {
            for i in from..from + n {
                insert(list, &i.to_be_bytes(), 1, &[7u8; 1000]);
            }
        };
        let full_blocks = |list: &SkipList| {
            [&list.arena, &list.values]
                .iter()
                .map(|a| {
                    let st = a.state.lock();
                    st.blocks
                        .iter()
                        .filter(|b| b.len() * 8 == MAX_BLOCK_BYTES)
                        .count() as u64
                })
                .sum::<u64>()
        };
        // The first list grows on fresh blocks; nothing is pooled.
        let a = SkipList::with_pool(Some(pool.clone()));
        fill(&a, 0, 6000);
        let a_blocks = full_blocks(&a);
        assert!(a_blocks >= 4, "{a_blocks} full blocks");
        assert_eq!(pool.pooled_bytes(), 0);
        // The next list (the new active memtable) grows on fresh blocks
        // while the first is flushed.
        let b = SkipList::with_pool(Some(pool.clone()));
        fill(&b, 0, 1500);
        let b_blocks = full_blocks(&b);
        assert!(b_blocks >= 1, "{b_blocks} full blocks");
        assert_eq!(heard.load(Ordering::Relaxed), 0);
        // The flushed list's blocks come back up to the cap: those beyond
        // what `b` can still take are the excess the budget charges.
        drop(a);
        assert_eq!(pool.pooled_bytes(), 4 * MIB);
        let excess = b_blocks * MIB;
        assert_eq!(pool.excess_bytes(), excess);
        assert_eq!(heard.load(Ordering::Relaxed), excess);
        // Blocks just moved: not idle, nothing freed.
        assert!(!pool.trim_if_idle());
        assert_eq!(pool.pooled_bytes(), 4 * MIB);
        // Idle: the excess is freed, the rest stays for `b`.
        pool.set_idle(std::time::Duration::ZERO);
        assert!(pool.trim_if_idle());
        assert_eq!(pool.pooled_bytes(), (4 - b_blocks) * MIB);
        assert_eq!(heard.load(Ordering::Relaxed), 0);
        assert!(!pool.trim_if_idle(), "nothing left to free");
        // `b` takes the pooled blocks as it grows: no excess appears.
        fill(&b, 1500, 2000);
        assert!(pool.pooled_bytes() < (4 - b_blocks) * MIB);
        assert_eq!(pool.excess_bytes(), 0);
        assert_eq!(heard.load(Ordering::Relaxed), 0);
    }
}
