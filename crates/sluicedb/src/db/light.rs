//! LightKV in the engine (`docs/design.md`, "LightKV: the preset"): the
//! persistent write buffer under its RH-Tree ([`LightBuffer`]) stands where
//! the journal and the memtable stand.
//!
//! - **Writes**: the group-commit leader appends each group to the buffer
//!   ([`Light::append`], records and tree at once); `sync` is the buffer's
//!   fence. [`PwbJournal`] is the engine's `Journal` over it and
//!   [`LightMem`] its `WriteBuffer`; both name the same [`Light`].
//! - **Flushes**: a linked leaf is handed out as a flush unit, queued among
//!   the immutable memtables as its leaf alone ([`Versions::waiting_unit`]); the flush
//!   job copies its versions out of the buffer ([`Light::unit`]), syncs
//!   the buffer through them and writes them into tables like a memtable;
//!   once the tables are installed, [`Light::flushed`] drops the leaf and
//!   raises the watermark.
//! - **Reads** ask the buffer, which holds every leaf until its tables are
//!   installed, then the tables. A reader holds [`Light::readers`] shared
//!   from taking its super version until it has read the buffer, and
//!   `flushed` holds it exclusively: otherwise a reader whose super version
//!   predates a table could look in the buffer after that table's leaf
//!   left it, and find the version in neither.
//! - **Recovery**: the buffer rebuilds its tree from its records, skipping
//!   versions the recovered tables hold ([`Light::open`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockUpgradableReadGuard, RwLockWriteGuard};

use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::fs::{CountingFs, IoClass};
use crate::index::rh::RhParams;
use crate::iter::{Entry, Failed, InternalIterator, MergingIterator, Parts, PartsCursor};
use crate::journal::{Journal, JournalMark};
use crate::key;
use crate::key::Kind;
use crate::lightkv::buffer::{image_mark, FlushEntry, LeafRef, LightBuffer, Op};
use crate::memtable::{DigestSet, Lookup, ShadowCandidates, WriteBuffer};
use crate::options::LightKvOptions;
use crate::pwb::Pwb;
use crate::version::VersionEdit;

/// The write buffer's file in the database directory.
pub(crate) const BUFFER_FILE: &str = "LIGHTKV.pwb";

/// Records a flush unit's reads under one hold of the buffer's shared lock
/// before yielding it to a waiting writer ([`Light::unit`]): tens of
/// microseconds of reads.
const UNIT_RECORDS_PER_HOLD: usize = 64;

/// The image of the buffer's tree a clean shutdown leaves beside it
/// (`docs/format/lightkv-image.md`).
pub(crate) const IMAGE_FILE: &str = "LIGHTKV.image";

/// The path of the write buffer of the database in `dir`.
pub(crate) fn buffer_path(dir: &Path) -> PathBuf {
    dir.join(BUFFER_FILE)
}

/// The buffer and the lock that orders reads against leaves leaving it.
///
/// Locks: `hand_outs` (never under the engine's state lock), then
/// `readers`, then `buf`, then the `Pwb`'s own. No fence runs under
/// `readers` or `buf` (a read waits for both): syncs, the watermark's fence
/// and the preparation of released segments go through `pwb` after `buf`
/// is let go. The one exception is a hand-out that finds its segment not
/// yet prepared (`Pwb::prepare_free`), and a watermark raise when no leaf
/// indexes anything (`LightBuffer::make_room`).
pub(crate) struct Light {
    /// Shared by reads (and by a hand-out's reading of its leaf), so that
    /// readers do not wait for each other; exclusive for writes, links,
    /// and leaves leaving: taken exclusively through [`Light::buf_mut`]
    /// or [`Light::upgrade`], which count the change in `generation`.
    buf: RwLock<LightBuffer>,
    /// Changes made to `buf` (counted under its exclusive lock, before the
    /// change): a cursor's view of the buffer ([`Light::view`]) is current
    /// while this is.
    generation: AtomicU64,
    /// The buffer's partitions as the last cursor's view took them, with
    /// the generation then: cursors share it until the buffer changes.
    view: Mutex<Option<(u64, Arc<BufferView>)>>,
    /// The buffer's records, for fences without `buf`.
    pwb: Arc<Pwb>,
    /// Shared by a read from its super version to its look into the
    /// buffer; exclusive in [`Light::flushed`] (module documentation).
    pub(crate) readers: RwLock<()>,
    /// Held by the one hand-out of flush units under way
    /// (`Core::light_hand_out`): it keeps units queued in the order they
    /// were taken. Taken without the engine's state lock, and before it.
    pub(crate) hand_outs: Mutex<()>,
    /// For the clean shutdown's image ([`Light::close`]).
    fs: CountingFs,
    image_path: PathBuf,
    /// The open loaded the image instead of scanning the buffer.
    loaded_image: bool,
    /// Each leaf's sorted versions as a cursor last copied them, by leaf
    /// uid, with the leaf's version then: a linked leaf never changes, so
    /// it is sorted once; a top leaf again only after a write reached it.
    /// A leaf's copy goes when the leaf leaves the buffer.
    sorted: Mutex<HashMap<u32, (u64, Arc<Versions>)>>,
}

impl Light {
    /// Opens (or creates) the buffer of the database in `dir`; a version
    /// for which `in_tables(key, seq)` holds (the tables hold it or a newer
    /// one) is not indexed again.
    ///
    /// A buffer larger than `budget` (the options' memory budget, when one
    /// is set) or than the memory this process may use (`memory_limit`) is
    /// refused before anything is opened or allocated
    /// (`lightkv::memory::check_buffer_fits`).
    pub(crate) fn open(
        fs: &CountingFs,
        dir: &Path,
        opts: &LightKvOptions,
        budget: Option<usize>,
        in_tables: impl Fn(&[u8], u64) -> Result<bool> + Sync,
    ) -> Result<Light> {
        crate::lightkv::memory::check_buffer_fits(opts.buffer_bytes, budget)?;
        let pm = fs.open_pm_fenced(&buffer_path(dir), opts.buffer_bytes, opts.fence)?;
        let params = RhParams {
            leaf_buckets: opts.leaf_buckets,
            extra_buckets: opts.leaf_buckets.div_ceil(20),
            max_leaf_nodes: opts.max_leaf_nodes,
            ..RhParams::default()
        };
        let image_path = dir.join(IMAGE_FILE);
        // A missing or unreadable image is no image: the buffer is scanned.
        let image = fs.read_all(&image_path, IoClass::Journal).ok();
        let (buf, loaded_image) = LightBuffer::open_with_image(
            pm,
            opts.segment_bytes,
            params,
            image.as_deref(),
            in_tables,
        )?;
        Ok(Light {
            pwb: buf.pwb(),
            buf: RwLock::new(buf),
            generation: AtomicU64::new(0),
            view: Mutex::new(None),
            readers: RwLock::new(()),
            hand_outs: Mutex::new(()),
            fs: fs.clone(),
            image_path,
            loaded_image,
            sorted: Mutex::new(HashMap::new()),
        })
    }

    /// True when the open loaded a clean shutdown's image instead of
    /// scanning the buffer.
    pub(crate) fn loaded_image(&self) -> bool {
        self.loaded_image
    }

    /// A clean shutdown (§V): every write made durable, then the image of
    /// the tree and the buffer's state written and synced, then the clean
    /// mark (the image's hash) stored with one fence. Nothing may write to
    /// the buffer after (the engine's threads are stopped). A crash before
    /// the mark leaves no mark, and the buffer is scanned at the next open;
    /// after it, the image describes the buffer exactly.
    pub(crate) fn close(&self) -> Result<()> {
        let buf = self.buf_mut();
        self.pwb.sync()?;
        let image = buf.encode_image();
        let mut file = self.fs.create(&self.image_path, IoClass::Journal)?;
        file.append(&image)?;
        file.sync()?;
        drop(file);
        if let Some(dir) = self.image_path.parent() {
            self.fs.sync_dir(dir)?;
        }
        self.pwb.set_clean_mark(image_mark(&image))
    }

    /// The persisted watermark `W`: recovery indexes again what it finds
    /// in the buffer above it (`docs/design.md`, "The persistent write
    /// buffer", rule 6).
    pub(crate) fn watermark(&self) -> u64 {
        self.pwb.watermark()
    }

    /// The last operation the buffer holds or held.
    pub(crate) fn last_seq(&self) -> u64 {
        self.buf.read().last_seq()
    }

    /// Writes `group`, whose first operation is `seq`, synced when `sync`.
    /// False, having written nothing, when the buffer has no room for it.
    pub(crate) fn append(&self, group: &WriteBatch, seq: u64, sync: bool) -> Result<bool> {
        let mut ops: smallvec::SmallVec<[Op<'_>; 4]> =
            smallvec::SmallVec::with_capacity(group.len());
        for op in group.iter() {
            let op = op.map_err(Error::InvalidArgument)?;
            ops.push(Op {
                key: op.key,
                value: (op.kind != Kind::Delete).then_some(op.value),
            });
        }
        // Lanes and links are read, and the records stored, with the
        // buffer shared (reads go on); only the tree's update takes it
        // alone. The upgradable lock keeps every other change of the tree
        // (links, leaves leaving, hand-outs) out from the first step to the
        // last, as the steps require.
        let buf = self.buf.upgradable_read();
        let plan = buf.plan(&ops)?;
        let Some(stored) = buf.store(&ops, &plan)? else {
            return Ok(false);
        };
        let first = self.upgrade(buf).index_stored(&ops, &plan, stored)?;
        if first != seq {
            return Err(Error::InvalidArgument(format!(
                "write buffer numbered a group {first}, the engine {seq}"
            )));
        }
        if sync {
            // Covers the group: its records were stored before the fence
            // begins. Without `buf`, so reads go on meanwhile.
            self.pwb.sync()?;
        }
        Ok(true)
    }

    /// Makes every write so far durable.
    pub(crate) fn sync(&self) -> Result<()> {
        self.pwb.sync()
    }

    /// Makes every write up to `seq` durable: nothing to do when a sync
    /// already covered it.
    pub(crate) fn sync_through(&self, seq: u64) -> Result<()> {
        self.pwb.sync_through(seq)
    }

    /// The newest version of `key` at or below `seq` in the buffer.
    pub(crate) fn get(&self, key: &[u8], seq: u64) -> Result<Lookup> {
        Ok(match self.buf.read().get_versioned(key, seq)? {
            Some((s, Some(v))) => Lookup::Found(Kind::Value, v, s),
            Some((_, None)) => Lookup::Deleted,
            None => Lookup::Absent,
        })
    }

    /// The buffer, exclusively, with the change counted (`generation`).
    fn buf_mut(&self) -> RwLockWriteGuard<'_, LightBuffer> {
        let buf = self.buf.write();
        self.generation.fetch_add(1, Ordering::Relaxed);
        buf
    }

    /// `buf` upgraded to exclusive, with the change counted.
    fn upgrade<'a>(
        &self,
        buf: RwLockUpgradableReadGuard<'a, LightBuffer>,
    ) -> RwLockWriteGuard<'a, LightBuffer> {
        let buf = RwLockUpgradableReadGuard::upgrade(buf);
        self.generation.fetch_add(1, Ordering::Relaxed);
        buf
    }

    /// Every version the buffer holds for keys in `lo..=hi` (and perhaps
    /// others), as a sorted iterator over each leaf's sorted copy, taken
    /// now (the buffer may change under it) and merged lazily, partition
    /// by partition in key order. The copies come from the buffer's view
    /// ([`Light::view`]), which cursors share until the buffer changes: a
    /// cursor costs two binary searches while it does not, where taking
    /// every partition's leaves for each one cost a fifth of a 100-pair
    /// scan's time (`docs/experiments.md`, "LightKV: scans by partition").
    pub(crate) fn iter(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Box<dyn InternalIterator> {
        let view = match self.view() {
            Ok(v) => v,
            Err(e) => return Box::new(Failed(e)),
        };
        let first = lo.map_or(0, |lo| first_holding(&view, lo));
        let last = hi.map_or(view.len(), |hi| {
            (view.partition_point(|(b, _)| b.as_slice() <= hi) + 1).min(view.len())
        });
        Box::new(PartsCursor::new(BufferParts {
            view,
            first,
            last: last.max(first),
        }))
    }

    /// Every partition's lower bound and its leaves' sorted copies, newest
    /// leaf first, in key order: the view the last cursor took if the
    /// buffer has not changed since, else a new one (a leaf unchanged since
    /// a cursor sorted it keeps its copy).
    fn view(&self) -> Result<Arc<BufferView>> {
        let buf = self.buf.read();
        let generation = self.generation.load(Ordering::Relaxed);
        let mut view = self.view.lock();
        if let Some((g, v)) = &*view {
            if *g == generation {
                return Ok(v.clone());
            }
        }
        let mut sorted = self.sorted.lock();
        let mut parts = Vec::new();
        for (bound, chain) in buf.partition_leaves() {
            let mut leaves = Vec::with_capacity(chain.len());
            for leaf in chain {
                leaves.push(Self::sorted_leaf(&buf, &mut sorted, leaf)?);
            }
            parts.push((bound, leaves));
        }
        let v = Arc::new(parts);
        *view = Some((generation, v.clone()));
        Ok(v)
    }

    /// Leaf `leaf`'s sorted versions: the copy a cursor made if the leaf
    /// has not changed since, else a new one (kept for the next cursor).
    fn sorted_leaf(
        buf: &LightBuffer,
        sorted: &mut HashMap<u32, (u64, Arc<Versions>)>,
        leaf: LeafRef,
    ) -> Result<Arc<Versions>> {
        if let Some((version, v)) = sorted.get(&leaf.uid) {
            if *version == leaf.version {
                return Ok(v.clone());
            }
        }
        let v = Arc::new(Versions::new(buf.leaf_versions(leaf)?));
        sorted.insert(leaf.uid, (leaf.version, v.clone()));
        Ok(v)
    }

    /// Marks the next flush unit's leaf (the oldest linked leaf not yet
    /// handed out) handed out and returns it; `None` when no linked leaf
    /// waits. The caller holds [`Light::hand_outs`].
    ///
    /// Nothing is read here, on the writer's path: the flush job reads the
    /// leaf's versions ([`Light::unit`]). Until then (and until its table
    /// is installed) reads find them in the buffer, which keeps the leaf
    /// until [`Light::flushed`]; a copy made at the hand-out, which each
    /// writer handing out units made, was a tenth of the writer's samples
    /// (`docs/experiments.md`, "LightKV: stores by pwrite").
    pub(crate) fn hand_out_next(&self) -> Option<u32> {
        let mut buf = self.buf_mut();
        let leaf = buf.next_unit_leaf()?;
        buf.hand_out(leaf);
        Some(leaf)
    }

    /// Handed-out leaf `leaf`'s versions, sorted, with every older version
    /// a snapshot at or above `oldest_snapshot` may need: the flush job's
    /// input. A leaf handed out stays the oldest of its chain, unchanged,
    /// until it is flushed, and its records stay where they are.
    pub(crate) fn unit(&self, leaf: u32, oldest_snapshot: u64) -> Result<Arc<Versions>> {
        // Read under the shared lock (reads go on), yielded every
        // `UNIT_RECORDS_PER_HOLD` records to a writer waiting for it (and
        // the reads queued behind that writer): held for a whole leaf, it
        // held them up for milliseconds (`docs/experiments.md`, "LightKV's
        // read tail under writes").
        let mut buf = self.buf.read();
        let offsets = buf.unit_offsets(leaf).ok_or_else(|| {
            Error::InvalidArgument(format!("flush unit {leaf} is not a handed-out leaf"))
        })?;
        let mut entries = Vec::with_capacity(offsets.len());
        for chunk in offsets.chunks(UNIT_RECORDS_PER_HOLD) {
            buf.unit_collect(chunk, oldest_snapshot, &mut entries)?;
            RwLockReadGuard::bump(&mut buf);
        }
        drop(buf);
        let u = LightBuffer::unit_finish(leaf, entries);
        Ok(Arc::new(Versions::new(u.entries)))
    }

    /// True when a linked leaf waits to be handed out.
    pub(crate) fn unit_waiting(&self) -> bool {
        self.buf.read().unit_waiting()
    }

    /// Links the fullest top leaf, if no unit waits; false when nothing is
    /// indexed (the watermark then rises past every record, releasing what
    /// they held).
    pub(crate) fn make_room(&self) -> Result<bool> {
        self.buf_mut().make_room()
    }

    /// Links the fullest top leaf if no unit waits and it holds enough to
    /// be worth a table (`LightBuffer::make_room_early`).
    pub(crate) fn make_room_early(&self) -> Result<bool> {
        self.buf_mut().make_room_early()
    }

    /// Links every top leaf holding something (a full flush).
    pub(crate) fn link_all(&self) -> usize {
        self.buf_mut().link_all()
    }

    /// Chains holding a linked leaf (flushed or not yet).
    pub(crate) fn linked(&self) -> usize {
        self.buf
            .read()
            .chain_lengths()
            .iter()
            .filter(|&&n| n > 1)
            .count()
    }

    /// The process memory the buffer's region is kept in beside the page
    /// cache (`MmapPm`'s image under `msync` fences).
    pub(crate) fn memory_bytes(&self) -> u64 {
        self.pwb.memory_bytes()
    }

    /// Segments, and how many are free.
    pub(crate) fn segments(&self) -> (u32, u32) {
        self.buf.read().segments()
    }

    /// The tables of leaves `uids` are installed: the leaves leave the
    /// tree and the watermark rises as far as it may, once for all of them
    /// (one fence, not one per leaf: on a mapped file each is an `msync`).
    ///
    /// Only the leaves' removal holds `readers` and `buf`; the watermark's
    /// fence runs without them (what it covers stays readable until
    /// `release_through`, under `buf`), and so does the preparation of the
    /// released segments for reuse.
    pub(crate) fn flushed(&self, uids: &[u32]) -> Result<usize> {
        let (target, segments) = {
            let _readers = self.readers.write();
            let mut buf = self.buf_mut();
            let mut target = None;
            let mut segments = Vec::new();
            let mut sorted = self.sorted.lock();
            for &uid in uids {
                let (t, s) = buf.drop_flushed(uid)?;
                target = t.or(target);
                segments.extend(s);
                sorted.remove(&uid);
            }
            (target, segments)
        };
        if target.is_none() && segments.is_empty() {
            return Ok(0);
        }
        // One fence for the watermark and `R` (the segments' records are in
        // the installed tables, and were synced before those were listed).
        self.pwb.persist_marks(target, &segments)?;
        let released = {
            let mut buf = self.buf_mut();
            let mut n = self.pwb.release_segments(&segments);
            if let Some(target) = target {
                n += buf.release_through(target);
            }
            n
        };
        if released > 0 {
            self.pwb.prepare_released()?;
        }
        Ok(released)
    }

    /// The keys at which the buffer cuts its flush units (its partitions'
    /// smallest keys but the first), for the index shape
    /// (`IndexShape::flush_cuts`).
    pub(crate) fn partition_cuts(&self) -> Vec<Vec<u8>> {
        self.buf.read().partition_cuts()
    }

    /// The buffer's region as it stands (`Pwb::image`), for a checkpoint:
    /// `buf` is held, so no group is half written or half indexed, and no
    /// segment is released or handed out meanwhile.
    pub(crate) fn image(&self) -> Result<Vec<u8>> {
        let _buf = self.buf.read();
        self.pwb.image()
    }

    /// Operations above the watermark, the buffer's bytes in use, and the
    /// leaves per partition in key order (for `Stats`).
    pub(crate) fn describe(&self) -> (u64, Vec<usize>) {
        let buf = self.buf.read();
        (buf.operations(), buf.chain_lengths())
    }
}

/// Versions taken from the buffer, sorted by internal key: a flush unit or
/// a cursor's copy of its partitions. Built once from entries already
/// sorted by key and newest first (`LightBuffer::take_unit`,
/// `LightBuffer::leaf_versions`), so it costs one allocation per entry
/// where a memtable's skip list cost an insert and a batch per entry.
pub(crate) struct Versions {
    /// (internal key, value), in internal-key order.
    items: Vec<(Vec<u8>, Vec<u8>)>,
    last_seq: u64,
    bytes: usize,
}

impl Versions {
    /// A flush unit as it waits in the engine's queue of immutable
    /// memtables (`Core::light_hand_out`): nothing, since reads find its
    /// versions in the buffer until its tables are installed
    /// ([`Light::hand_out_next`]); its flush job reads them ([`Light::unit`]).
    pub(crate) fn waiting_unit() -> Versions {
        Versions::new(Vec::new())
    }

    /// `entries` sorted by key, then newest first.
    fn new(entries: Vec<FlushEntry>) -> Versions {
        let mut bytes = 0;
        let mut last_seq = 0;
        let items: Vec<(Vec<u8>, Vec<u8>)> = entries
            .into_iter()
            .map(|e| {
                let kind = if e.value.is_some() {
                    Kind::Value
                } else {
                    Kind::Delete
                };
                last_seq = last_seq.max(e.seq);
                let mut k = e.key;
                k.extend_from_slice(&key::pack_trailer(e.seq, kind as u8).to_le_bytes());
                let v = e.value.unwrap_or_default();
                bytes += k.len() + v.len() + 48;
                (k, v)
            })
            .collect();
        debug_assert!(items
            .windows(2)
            .all(|w| key::compare(&w[0].0, &w[1].0).is_lt()));
        Versions {
            items,
            last_seq,
            bytes,
        }
    }

    /// The first entry at or after internal key `target`.
    fn seek(&self, target: &[u8]) -> usize {
        self.items
            .partition_point(|(k, _)| key::compare(k, target).is_lt())
    }
}

impl WriteBuffer for Versions {
    fn insert_batch(&self, _batch: &WriteBatch, _seq: u64) {
        unreachable!("a flush unit or a cursor's copy is never written to");
    }

    fn insert_relocations(&self, _batch: &WriteBatch, _seq: u64, _counted: bool) {
        unreachable!("lightkv keeps values inline: no GC relocates them");
    }

    fn get(&self, user_key: &[u8], snapshot: u64) -> Lookup {
        let mut seek = user_key.to_vec();
        seek.extend_from_slice(&key::pack_trailer(snapshot, key::KIND_SEEK).to_le_bytes());
        let Some((k, v)) = self.items.get(self.seek(&seek)) else {
            return Lookup::Absent;
        };
        if key::user_key(k) != user_key {
            return Lookup::Absent;
        }
        match Kind::from_u8(key::kind_byte(k)) {
            Some(Kind::Delete) => Lookup::Deleted,
            Some(kind) => Lookup::Found(kind, v.clone(), key::sequence(k)),
            None => unreachable!("only puts and deletes are built"),
        }
    }

    fn newest_sequence(&self, user_key: &[u8]) -> Option<u64> {
        let mut seek = user_key.to_vec();
        seek.extend_from_slice(&key::pack_trailer(key::MAX_SEQUENCE, key::KIND_SEEK).to_le_bytes());
        let (k, _) = self.items.get(self.seek(&seek))?;
        (key::user_key(k) == user_key).then(|| key::sequence(k))
    }

    fn digests_newer_than(&self, _seq: u64, _out: &mut DigestSet) -> bool {
        false
    }

    fn last_sequence(&self) -> u64 {
        self.last_seq
    }

    fn iter(self: Arc<Self>) -> Box<dyn InternalIterator> {
        Box::new(VersionsIter {
            versions: self,
            pos: None,
        })
    }

    fn approximate_memory_bytes(&self) -> usize {
        self.bytes
    }

    fn filter_bytes(&self) -> usize {
        0
    }

    fn shadow_candidates(&self) -> ShadowCandidates {
        ShadowCandidates::default()
    }

    /// Held by the buffer too, which the space limit does not count
    /// either (no value store in this preset).
    fn held_live_bytes(&self) -> u64 {
        0
    }

    fn len(&self) -> usize {
        self.items.len()
    }
}

/// An iterator over [`Versions`].
struct VersionsIter {
    versions: Arc<Versions>,
    pos: Option<usize>,
}

impl InternalIterator for VersionsIter {
    fn valid(&self) -> bool {
        self.pos.is_some()
    }
    fn seek_to_first(&mut self) {
        self.pos = (!self.versions.items.is_empty()).then_some(0);
    }
    fn seek_to_last(&mut self) {
        self.pos = self.versions.items.len().checked_sub(1);
    }
    fn seek(&mut self, target: &[u8]) {
        let i = self.versions.seek(target);
        self.pos = (i < self.versions.items.len()).then_some(i);
    }
    fn next(&mut self) {
        let n = self.versions.items.len();
        self.pos = self.pos.map(|p| p + 1).filter(|&p| p < n);
    }
    fn prev(&mut self) {
        self.pos = self.pos.and_then(|p| p.checked_sub(1));
    }
    fn key(&self) -> &[u8] {
        &self.versions.items[self.pos.expect("a valid iterator")].0
    }
    fn value(&self) -> &[u8] {
        &self.versions.items[self.pos.expect("a valid iterator")].1
    }
    fn status(&self) -> Result<()> {
        Ok(())
    }
}

/// Per partition in key order, its lower bound and its leaves' sorted
/// copies, newest first ([`Light::view`]). Each partition's keys sort
/// before the next one's.
type BufferView = Vec<(Vec<u8>, Vec<Arc<Versions>>)>;

/// The buffer's partitions `first..last` a cursor goes over
/// ([`Light::iter`], a [`PartsCursor`]): each one's leaves merged (a chain
/// is short), so the cursor yields one sorted sequence.
struct BufferParts {
    view: Arc<BufferView>,
    first: usize,
    last: usize,
}

impl Parts for BufferParts {
    fn len(&self) -> usize {
        self.last - self.first
    }
    fn enter(&self, at: usize, to: Entry<'_>) -> MergingIterator {
        let leaves = &self.view[self.first + at].1;
        let children = leaves.iter().map(|v| v.clone().iter()).collect();
        let mut inner = MergingIterator::new(children);
        match to {
            Entry::At(target) => inner.seek(target),
            Entry::First => inner.seek_to_first(),
            Entry::Last => inner.seek_to_last(),
        }
        inner
    }
    fn holds(&self, _at: usize, _user_key: &[u8]) -> bool {
        true
    }
    /// The target is sought (not the first entry) in the later ones too,
    /// since it may lie inside one ([`first_holding`]).
    fn seek_start(&self, user_key: &[u8]) -> usize {
        first_holding(&self.view[self.first..self.last], user_key)
    }
}

/// The first of `parts` that may hold `user_key`: a key shorter than its
/// partition's bound sorts before it (zero padding), so one partition
/// before the one its bytes sort into.
fn first_holding(parts: &[(Vec<u8>, Vec<Arc<Versions>>)], user_key: &[u8]) -> usize {
    parts
        .partition_point(|(b, _)| b.as_slice() <= user_key)
        .saturating_sub(2)
}

/// The buffer as the engine's journal: appending is writing to it.
pub(crate) struct PwbJournal(pub(crate) Arc<Light>);

impl Journal for PwbJournal {
    fn append(
        &self,
        group: &WriteBatch,
        seq: u64,
        sync: bool,
        _separate: Option<usize>,
    ) -> Result<Option<WriteBatch>> {
        if self.0.append(group, seq, sync)? {
            Ok(None)
        } else {
            // The write path makes room before it appends (`Core::lead_group`).
            Err(Error::InvalidArgument(
                "the write buffer has no room for this group".into(),
            ))
        }
    }

    fn sync(&self) -> Result<()> {
        self.0.sync()
    }

    /// A clean close leaves the tree's image and the clean mark
    /// ([`Light::close`]).
    fn close(&self) -> Result<()> {
        self.0.close()
    }

    /// Flush units are not journal files: nothing to rotate.
    fn rotate(&self, current: JournalMark) -> Result<JournalMark> {
        Ok(current)
    }

    /// The buffer's watermark, in the buffer itself, says where recovery
    /// starts; the manifest's log number stays.
    fn replay_from(&self, _next: JournalMark, _edit: &mut VersionEdit) -> Option<u64> {
        None
    }
}

/// The buffer as the engine's active write buffer. The journal's append
/// already indexed each group, so inserting does nothing here.
pub(crate) struct LightMem(pub(crate) Arc<Light>);

impl WriteBuffer for LightMem {
    fn insert_batch(&self, _batch: &WriteBatch, _seq: u64) {}

    fn insert_relocations(&self, _batch: &WriteBatch, _seq: u64, _counted: bool) {
        unreachable!("lightkv keeps values inline: no GC relocates them");
    }

    /// `Core::lookup` reads the buffer through `Light::get`, which reports
    /// damage; this answers other callers, for which damage reads as
    /// nothing here (the lookup that follows reports it).
    fn get(&self, user_key: &[u8], snapshot: u64) -> Lookup {
        self.0.get(user_key, snapshot).unwrap_or(Lookup::Absent)
    }

    fn newest_sequence(&self, user_key: &[u8]) -> Option<u64> {
        match self.0.get(user_key, u64::MAX) {
            Ok(Lookup::Found(_, _, s)) => Some(s),
            _ => None,
        }
    }

    fn digests_newer_than(&self, _seq: u64, _out: &mut DigestSet) -> bool {
        false
    }

    fn last_sequence(&self) -> u64 {
        self.0.last_seq()
    }

    fn iter(self: Arc<Self>) -> Box<dyn InternalIterator> {
        self.0.iter(None, None)
    }

    /// The buffer lives in its own region, not on the heap.
    fn approximate_memory_bytes(&self) -> usize {
        0
    }

    fn filter_bytes(&self) -> usize {
        0
    }

    fn shadow_candidates(&self) -> ShadowCandidates {
        ShadowCandidates::default()
    }

    fn held_live_bytes(&self) -> u64 {
        0
    }

    fn len(&self) -> usize {
        self.0.describe().0 as usize
    }
}
