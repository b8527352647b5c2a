//! [`Db`]: the database handle, its write path, background work and recovery.
//!
//! Concurrency (`docs/design.md`, "Threads and locks"):
//! - `state` (a mutex) guards the memtables, the current version, the writer
//!   queue, snapshots and the bookkeeping of background work. It is never
//!   held across table or journal I/O, except for the create and directory
//!   sync of a journal rotation (the old journal is not synced there:
//!   `docs/design.md`, "Journal rotation").
//! - Writers queue up; the one at the front is the leader: it takes the
//!   batches behind it into one group, appends the group to the journal and
//!   the memtable with `state` released, then wakes the group (group commit).
//!   Only leaders touch `journal`, so journal order is sequence order.
//! - `manifest` serialises version installation: base version, manifest
//!   append + sync, then the swap under `state`.
//! - Readers take `state` only to clone an `Arc<SuperVersion>`.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::batch::WriteBatch;
use crate::compaction::{self, JobStats, MergeParams};
use crate::error::{Error, Result};
use crate::filename::{self, FileKind};
use crate::fs::{CountingFs, FileLock, FileSyncer, IoClass};
use crate::index::leveled::Leveled;
use crate::index::{CompactionPlan, IndexShape};
use crate::iter::{DbIter, InternalIterator, MergingIterator};
use crate::iterator::{DbIterator, Range};
use crate::journal::{Control, LogWriter};
use crate::key::Kind;
use crate::memtable::{Lookup, MemTable, WriteBuffer};
use crate::options::{JournalMode, Options, Preset, ReadOptions, ValueLayout, WriteOptions};
use crate::stats::{GcStats, LevelStats, Stats};
use crate::table::builder::TableOptions;
use crate::table::{BlockCache, TableCache};
use crate::value::hash::{HashConfig, HashStore};
use crate::value::log::format::{
    Record, FLAG_GROUP_END, FLAG_INLINE, KIND_DELETE, KIND_PUT, KIND_RELOCATE,
};
use crate::value::log::store::{LogConfig, LogStore};
use crate::value::pointer::ValuePointer;
use crate::value::{Read, ValueStore};
use crate::version::{FileMeta, ManifestState, Version, VersionEdit, VersionSet};

mod gc;
mod gc_hash;
mod recover;
pub(crate) use gc::Relocations;

/// A handle to an open database. Cheap to clone; all clones share one
/// database, which closes (background work stopped, journal synced, lock
/// released) when the last clone is dropped. `Send + Sync`.
#[derive(Clone)]
pub struct Db {
    handle: Arc<Handle>,
}

struct Handle {
    core: Arc<Core>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    _lock: Box<dyn FileLock>,
}

/// What a reader needs: the memtables and the version, pinned together.
pub(crate) struct SuperVersion {
    pub(crate) mem: Arc<MemTable>,
    pub(crate) imms: Vec<Arc<MemTable>>,
    pub(crate) current: Arc<Version>,
}

struct WriterSlot {
    /// Taken by the leader when the group is committed.
    batch: Mutex<WriteBatch>,
    /// Size and sync flag, readable without taking the batch.
    size: usize,
    sync: bool,
    /// Switch the memtable (for `flush`); carries no batch.
    force_switch: bool,
    /// GC relocations, committed as a group of their own.
    relocations: Option<Relocations>,
    /// How many relocations were applied.
    relocated: AtomicU64,
    done: Mutex<Option<Result<()>>>,
}

/// The engine journal being written, and the older journals a rotation left
/// unsynced (`docs/design.md`, "Journal rotation").
struct Journal {
    writer: LogWriter,
    /// Older journals, by number, with bytes not yet synced and memtables
    /// not yet flushed. The next sync syncs them first and seals.
    unsynced_older: Vec<(u64, Arc<dyn FileSyncer>)>,
}

impl Journal {
    fn new(writer: LogWriter) -> Self {
        Journal {
            writer,
            unsynced_older: Vec::new(),
        }
    }

    /// Makes every record of this and older journals durable. Older
    /// journals left unsynced by a rotation are synced first, then a seal
    /// record in this journal (synced with it) tells recovery that they are
    /// complete.
    fn sync(&mut self) -> Result<()> {
        if !self.unsynced_older.is_empty() {
            for (_, s) in &self.unsynced_older {
                s.sync()?;
            }
            self.writer.add_record(&Control::Seal.encode())?;
            self.unsynced_older.clear();
        }
        self.writer.sync()
    }

    /// Makes `writer` the current journal. The old one, numbered
    /// `old_number`, is handed to the file system but not synced; the new
    /// one opens with a link record naming it and giving its length.
    fn rotate(&mut self, old_number: u64, writer: LogWriter) -> Result<()> {
        self.writer.flush()?;
        let link = Control::Link {
            journal: old_number,
            len: self.writer.len(),
        };
        if self.writer.is_dirty() {
            self.unsynced_older
                .push((old_number, self.writer.syncer()?));
        }
        self.writer = writer;
        self.writer.add_record(&link.encode())
    }

    /// Forgets older journals below `log_number`: their memtables are in
    /// tables, so they need no sync (and are about to be deleted).
    fn forget_below(&mut self, log_number: u64) {
        self.unsynced_older.retain(|&(n, _)| n >= log_number);
    }
}

struct Immutable {
    mem: Arc<MemTable>,
    journal: u64,
    /// Where its records start in the value log, when that is the journal.
    log_start: (u64, u64),
}

/// What a point lookup found.
enum Found {
    Value(Vec<u8>),
    Collected,
}

enum Job {
    Flush,
    Compaction(CompactionPlan),
    Gc,
}

struct State {
    mem: Arc<MemTable>,
    mem_journal: u64,
    /// Where the active memtable's records start in the value log, when
    /// that is the journal: the replay start once older ones are flushed.
    mem_log_start: (u64, u64),
    imms: VecDeque<Immutable>,
    current: Arc<Version>,
    sv: Arc<SuperVersion>,
    log_number: u64,
    last_sequence: u64,
    writers: VecDeque<Arc<WriterSlot>>,
    snapshots: BTreeMap<u64, usize>,
    busy: HashSet<u64>,
    pending_outputs: HashSet<u64>,
    live_versions: Vec<Weak<Version>>,
    flush_running: bool,
    compactions_running: usize,
    manual_compaction: bool,
    memtables_switched: u64,
    memtables_flushed: u64,
    poisoned: Option<String>,
    closing: bool,
    gc_running: bool,
    /// When the last GC step ended (for `gc_interval_ms`).
    last_gc: Instant,
    /// Value log files below `.0` may be deleted once no registered reader
    /// is older than sequence `.1` (`docs/design.md`, "Value store").
    pending_log_deletes: Vec<(u64, u64)>,
    /// Hash layout: group files GC retired, deleted once no registered
    /// reader is older than the sequence.
    pending_segment_deletes: Vec<(Vec<u64>, u64)>,
}

impl State {
    fn refresh_sv(&mut self) {
        self.sv = Arc::new(SuperVersion {
            mem: self.mem.clone(),
            imms: self.imms.iter().rev().map(|i| i.mem.clone()).collect(),
            current: self.current.clone(),
        });
    }

    fn check_writable(&self) -> Result<()> {
        if let Some(p) = &self.poisoned {
            return Err(Error::Poisoned(p.clone()));
        }
        if self.closing {
            return Err(Error::Closed);
        }
        Ok(())
    }

    fn smallest_snapshot(&self, visible: u64) -> u64 {
        self.snapshots.keys().next().copied().unwrap_or(visible)
    }
}

#[derive(Default)]
struct Counters {
    user_bytes: AtomicU64,
    user_ops: AtomicU64,
    flushes: AtomicU64,
    compactions: AtomicU64,
    trivial_moves: AtomicU64,
    compaction_read: AtomicU64,
    compaction_written: AtomicU64,
    slowdowns: AtomicU64,
    stalls: AtomicU64,
    stall_micros: AtomicU64,
    stall_memtable_micros: AtomicU64,
    stall_l0_micros: AtomicU64,
    stall_store_micros: AtomicU64,
    journal_syncs: AtomicU64,
    write_groups: AtomicU64,
    gc_runs: AtomicU64,
    gc_bytes_read: AtomicU64,
    gc_bytes_written: AtomicU64,
    cold_moved_bytes: AtomicU64,
    cold_gc_runs: AtomicU64,
    relocations_applied: AtomicU64,
    relocations_dropped: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// The hash layout's sizes from the options; the number of groups of a new
/// store comes from the capacity when it is set.
fn hash_config(opts: &Options) -> HashConfig {
    let groups = match (opts.hash_groups, opts.value_store_capacity_bytes) {
        (0, Some(cap)) => {
            let main_area = cap as f64 * (1.0 - opts.hash_reserve_ratio);
            (main_area / opts.hash_main_segment_bytes as f64).max(1.0) as u32
        }
        (0, None) => crate::options::DEFAULT_HASH_GROUPS as u32,
        (n, _) => n as u32,
    };
    HashConfig {
        main_segment_bytes: opts.hash_main_segment_bytes,
        log_segment_bytes: opts.hash_log_segment_bytes,
        batch_bytes: opts.hash_batch_bytes,
        new_groups: groups,
        prefetch_threads: opts.scan_prefetch_threads.max(1),
        policy: opts.hash_gc_policy,
        // Cold log files of a quarter main segment: GC frees space a file
        // at a time.
        cold_file_bytes: opts
            .hash_hotness
            .then(|| (opts.hash_main_segment_bytes / 4).max(opts.hash_log_segment_bytes)),
        reserve_segments: opts.value_store_capacity_bytes.map(|cap| {
            ((cap as f64 * opts.hash_reserve_ratio) as u64 / opts.hash_log_segment_bytes).max(1)
        }),
    }
}

pub(crate) struct Core {
    dir: PathBuf,
    opts: Options,
    fs: CountingFs,
    shape: Arc<dyn IndexShape>,
    tables: Arc<TableCache>,
    versions: VersionSet,
    manifest: Mutex<Option<ManifestState>>,
    state: Mutex<State>,
    /// Threads of a hash GC step (`Options::gc_threads`), started on first
    /// use.
    gc_pool: std::sync::OnceLock<rayon::ThreadPool>,
    /// Writers, stalled writers and waiters on background progress.
    cv: Condvar,
    /// Background workers.
    bg_cv: Condvar,
    journal: Mutex<Option<Journal>>,
    visible_seq: AtomicU64,
    shutting_down: AtomicBool,
    counters: Counters,
    table_opts: TableOptions,
    /// The value store, when values are separated (or were).
    values: Option<Arc<dyn ValueStore>>,
    /// The value log is the journal (seed 001 §3.4.2): no engine journal.
    journal_in_log: bool,
    /// One GC at a time (background or `Db::gc`).
    gc_lock: Mutex<()>,
    /// Held by a flush from before it appends values (separation at
    /// flush) until its tables are installed; see `Core::publish_barrier`.
    flush_appends: Mutex<()>,
}

impl Db {
    /// Opens the database in `path`, creating it if `options` allow.
    ///
    /// Recovery replays the journals into tables (`docs/design.md`,
    /// "Recovery"). Errors: [`Error::Locked`] if another handle has the
    /// directory, [`Error::NotFound`]/[`Error::AlreadyExists`] per the
    /// create options, [`Error::Corruption`] naming file and offset if
    /// the manifest or synced journal history is damaged.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Db> {
        options.validate()?;
        let dir = path.as_ref().to_path_buf();
        if dir.as_os_str().is_empty() {
            return Err(Error::InvalidArgument("empty database path".into()));
        }
        let mut options = options;
        let fs = if options.read_only {
            // Everything the open writes stays in memory (`OverlayFs`).
            options.create_if_missing = false;
            let overlay = crate::fs::OverlayFs::new(options.fs.clone());
            CountingFs::new(Arc::new(overlay))
        } else {
            CountingFs::new(options.fs.clone())
        };
        if options.create_if_missing {
            fs.create_dir_all(&dir)?;
        } else if !fs.exists(&dir) {
            return Err(Error::NotFound(dir));
        }
        let lock = fs.lock(&filename::lock(&dir))?;
        let core = Arc::new(Core::open(dir, options, fs)?);
        let mut threads = Vec::new();
        // A read-only database runs no flush, compaction or GC.
        let workers = if core.opts.read_only {
            0
        } else {
            core.opts.background_threads
        };
        for i in 0..workers {
            let c = core.clone();
            let t = std::thread::Builder::new()
                .name(format!("sluicedb-bg-{i}"))
                .spawn(move || {
                    // A panic here is a bug; make it visible as a poisoned
                    // database instead of a silently missing worker.
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        c.clone().background_loop()
                    }));
                    if let Err(e) = r {
                        let msg = e
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        c.state
                            .lock()
                            .poisoned
                            .get_or_insert(format!("background thread panicked: {msg}"));
                        c.cv.notify_all();
                    }
                })
                .map_err(|e| Error::io("spawn", "background thread", e))?;
            threads.push(t);
        }
        core.bg_cv.notify_all();
        Ok(Db {
            handle: Arc::new(Handle {
                core,
                threads: Mutex::new(threads),
                _lock: lock,
            }),
        })
    }

    fn core(&self) -> &Arc<Core> {
        &self.handle.core
    }

    /// Sets `key` to `value` (not synced; see [`Db::put_opt`]).
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.put_opt(&WriteOptions::default(), key, value)
    }

    /// Sets `key` to `value` with explicit write options.
    pub fn put_opt(
        &self,
        opts: &WriteOptions,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        let mut b = WriteBatch::with_capacity(9 + key.len() + value.len());
        b.put(key, value);
        self.write_opt(opts, b)
    }

    /// Deletes `key` (absent keys are fine).
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.delete_opt(&WriteOptions::default(), key)
    }

    /// Deletes `key` with explicit write options.
    pub fn delete_opt(&self, opts: &WriteOptions, key: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.write_opt(opts, b)
    }

    /// Applies `batch` atomically (not synced).
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        self.write_opt(&WriteOptions::default(), batch)
    }

    /// Applies `batch` atomically. With `opts.sync` the batch is durable when
    /// this returns `Ok`. After `Err(Poisoned)` nothing more is accepted.
    pub fn write_opt(&self, opts: &WriteOptions, batch: WriteBatch) -> Result<()> {
        batch.validate()?;
        if batch.is_empty() {
            return Ok(());
        }
        self.core().write(opts.sync, false, batch)
    }

    /// The value of `key`, or `None` if it has none.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.get_opt(&ReadOptions::default(), key)
    }

    /// The value of `key` at `opts.snapshot` (latest if none).
    pub fn get_opt(
        &self,
        opts: &ReadOptions<'_>,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<Vec<u8>>> {
        self.core().get(opts, key.as_ref())
    }

    /// A consistent point-in-time view for reads; released when dropped.
    pub fn snapshot(&self) -> Snapshot {
        let core = self.core().clone();
        let seq = {
            let mut st = core.state.lock();
            let seq = core.visible_seq.load(Ordering::Acquire);
            *st.snapshots.entry(seq).or_insert(0) += 1;
            seq
        };
        Snapshot { seq, core }
    }

    /// A cursor over all keys; position it with `seek*` before use.
    pub fn iter(&self) -> DbIterator {
        self.iter_opt(&ReadOptions::default())
    }

    /// A cursor over all keys at `opts.snapshot`.
    pub fn iter_opt(&self, opts: &ReadOptions<'_>) -> DbIterator {
        self.cursor(opts, std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)
    }

    /// A cursor restricted to `range`.
    pub fn iter_range<K: AsRef<[u8]>>(
        &self,
        opts: &ReadOptions<'_>,
        range: impl std::ops::RangeBounds<K>,
    ) -> DbIterator {
        let own = |b: std::ops::Bound<&K>| b.map(|k| k.as_ref().to_vec());
        self.cursor(opts, own(range.start_bound()), own(range.end_bound()))
    }

    fn cursor(
        &self,
        opts: &ReadOptions<'_>,
        lower: std::ops::Bound<Vec<u8>>,
        upper: std::ops::Bound<Vec<u8>>,
    ) -> DbIterator {
        let core = self.core();
        let (seq, sv) = {
            // Registered like a snapshot for the iterator's life: GC keeps
            // the value log files its pointers may need.
            let mut st = core.state.lock();
            let seq = opts
                .snapshot
                .map_or_else(|| core.visible_seq.load(Ordering::Acquire), |s| s.seq);
            *st.snapshots.entry(seq).or_insert(0) += 1;
            (seq, st.sv.clone())
        };
        let guard = ReadGuard {
            seq,
            core: core.clone(),
        };
        let mut children: Vec<Box<dyn InternalIterator>> = vec![sv.mem.clone().iter()];
        for m in &sv.imms {
            children.push(m.clone().iter());
        }
        children.extend(core.shape.iterators(&sv.current, &core.tables));
        let inner = DbIter::new(Box::new(MergingIterator::new(children)), seq);
        DbIterator::new(
            inner,
            sv,
            core.values.clone(),
            Box::new(guard),
            lower,
            upper,
        )
    }

    /// The key-value pairs in `range`, in order; `.rev()` walks backwards.
    pub fn range<K: AsRef<[u8]>>(&self, range: impl std::ops::RangeBounds<K>) -> Range {
        self.range_opt(&ReadOptions::default(), range)
    }

    /// Like [`Db::range`] at `opts.snapshot`.
    pub fn range_opt<K: AsRef<[u8]>>(
        &self,
        opts: &ReadOptions<'_>,
        range: impl std::ops::RangeBounds<K>,
    ) -> Range {
        let own = |b: std::ops::Bound<&K>| b.map(|k| k.as_ref().to_vec());
        let (lo, hi) = (own(range.start_bound()), own(range.end_bound()));
        Range::new(
            self.cursor(opts, lo.clone(), hi.clone()),
            self.cursor(opts, lo, hi),
            self.core().opts.scan_prefetch_threads > 0,
        )
    }

    /// The pairs whose key starts with `prefix`, in order.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Range {
        self.prefix_opt(&ReadOptions::default(), prefix)
    }

    /// Like [`Db::prefix`] at `opts.snapshot`.
    pub fn prefix_opt(&self, opts: &ReadOptions<'_>, prefix: impl AsRef<[u8]>) -> Range {
        let p = prefix.as_ref().to_vec();
        let upper = match crate::key::prefix_successor(&p) {
            Some(s) => std::ops::Bound::Excluded(s),
            None => std::ops::Bound::Unbounded,
        };
        let lower = std::ops::Bound::Included(p);
        Range::new(
            self.cursor(opts, lower.clone(), upper.clone()),
            self.cursor(opts, lower, upper),
            self.core().opts.scan_prefetch_threads > 0,
        )
    }

    /// Writes the memtable to a table and waits until it is flushed.
    pub fn flush(&self) -> Result<()> {
        self.core().flush()
    }

    /// Compacts all tables overlapping `[begin, end]` (None: unbounded) down
    /// the levels, dropping shadowed versions and tombstones no snapshot
    /// needs. Flushes the memtable first. Waits until done.
    pub fn compact_range(&self, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
        self.core().compact_range(begin, end)
    }

    /// Waits until no flush or compaction is pending or running (for
    /// benchmarks and tests that want a settled tree).
    pub fn wait_for_background(&self) -> Result<()> {
        self.core().wait_idle()
    }

    /// Garbage-collects the oldest value log file (seed 001 §3.3.2): reads
    /// it from the tail, relocates live values to the head, and frees the
    /// file once no snapshot or iterator can need it. Returns what was done;
    /// a database without a value store has nothing to collect.
    pub fn gc(&self) -> Result<GcStats> {
        self.core().gc_file()
    }

    /// Counters and the current shape of the index.
    pub fn stats(&self) -> Stats {
        self.core().stats()
    }

    /// The preset the database at `path` (on the standard file system)
    /// was created with, read from its manifest without opening it: no
    /// lock, no recovery, nothing written. Tools that open a database they
    /// did not create use it to open with the right options. `None` for
    /// databases created before the manifest recorded it.
    pub fn recorded_preset(path: impl AsRef<Path>) -> Result<Option<Preset>> {
        let dir = path.as_ref().to_path_buf();
        let fs = CountingFs::new(Arc::new(crate::fs::StdFs));
        if !VersionSet::exists(&fs, &dir) {
            return Err(Error::NotFound(dir));
        }
        let o = Options::default();
        let shape: Arc<dyn IndexShape> = Arc::new(Leveled {
            num_levels: o.num_levels,
            l0_compaction_trigger: o.l0_compaction_trigger,
            base_level_size_bytes: o.base_level_size_bytes,
            level_size_ratio: o.level_size_ratio,
            target_file_size_bytes: o.target_file_size_bytes,
        });
        let rec = VersionSet::recover(&fs, &dir, shape)?;
        Ok(rec.version.preset.as_deref().and_then(Preset::from_name))
    }

    /// The preset the database was created with, as its manifest records
    /// it (`None` for databases created before it was recorded). Tools
    /// that open a database they did not create open it with this preset.
    pub fn created_with(&self) -> Option<Preset> {
        self.core().stats().created_with
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.core().dir
    }

    /// Checks every table block and entry, and every record of the value
    /// store's files, against their checksums; then reads every live pair,
    /// so that each separated value is checked where its index entry points
    /// (file present, record whole, of that key: seed 001 §3.3.3). Returns
    /// the entries, records and pairs checked. Damage is `Corruption`
    /// naming file and offset. Reads the whole database.
    pub fn verify(&self) -> Result<u64> {
        let core = self.core();
        let sv = core.super_version();
        let mut n = 0;
        for (_, f) in sv.current.all_files() {
            n += core.tables.get(f.number, f.file_size)?.verify()?;
        }
        if let Some(values) = &core.values {
            n += values.verify()?;
            for pair in self.range::<&[u8]>(..) {
                pair?;
                n += 1;
            }
        }
        Ok(n)
    }
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("path", &self.core().dir)
            .finish()
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let core = &self.core;
        core.shutting_down.store(true, Ordering::SeqCst);
        core.state.lock().closing = true;
        core.bg_cv.notify_all();
        core.cv.notify_all();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        // A clean close keeps every acknowledged write, synced or not:
        // values first, then the journal that points at them.
        let values_synced = core.values.as_ref().is_none_or(|v| v.sync().is_ok());
        if let (true, Some(j)) = (values_synced, core.journal.lock().as_mut()) {
            let _ = j.sync();
        }
    }
}

/// A point-in-time view. Reads through [`ReadOptions::at`] see the database
/// as it was when the snapshot was taken. Compaction keeps the versions it
/// needs until it is dropped.
pub struct Snapshot {
    seq: u64,
    core: Arc<Core>,
}

impl Snapshot {
    /// The sequence number the snapshot reads at.
    pub fn sequence(&self) -> u64 {
        self.seq
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot").field("seq", &self.seq).finish()
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.core.release_read(self.seq);
    }
}

/// Keeps an iterator's sequence registered while it lives.
pub(crate) struct ReadGuard {
    seq: u64,
    core: Arc<Core>,
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        self.core.release_read(self.seq);
    }
}

impl Core {
    fn open(dir: PathBuf, opts: Options, fs: CountingFs) -> Result<Core> {
        let shape: Arc<dyn IndexShape> = Arc::new(Leveled {
            num_levels: opts.num_levels,
            l0_compaction_trigger: opts.l0_compaction_trigger,
            base_level_size_bytes: opts.base_level_size_bytes,
            level_size_ratio: opts.level_size_ratio,
            target_file_size_bytes: opts.target_file_size_bytes,
        });
        if VersionSet::exists(&fs, &dir) {
            if opts.error_if_exists {
                return Err(Error::AlreadyExists(dir));
            }
        } else {
            if !opts.create_if_missing {
                return Err(Error::NotFound(dir));
            }
            // Creation writes only a manifest and CURRENT before any table,
            // journal or value store file exists; finding one without
            // CURRENT means CURRENT was lost, and creating anew would sweep
            // the data away (with the value log as the journal, the value
            // log files alone may hold every write).
            for name in fs.list(&dir)? {
                if let Some(
                    FileKind::Table(_)
                    | FileKind::Journal(_)
                    | FileKind::ValueLog(_)
                    | FileKind::ValueSegment(_),
                ) = filename::parse(&name)
                {
                    return Err(Error::corruption(
                        filename::current(&dir),
                        0,
                        format!("CURRENT is missing but {name} exists; refusing to create a new database over it"),
                    ));
                }
            }
            let vs = VersionSet::new(
                dir.clone(),
                fs.clone(),
                shape.clone(),
                1,
                opts.max_manifest_bytes,
            );
            let mut created = Version::empty(shape.clone());
            created.preset = Some(opts.preset.name().to_string());
            vs.write_new_manifest(&created, 0, 0)?;
        }
        let rec = VersionSet::recover(&fs, &dir, shape.clone())?;
        let manifest = filename::manifest(&dir, rec.manifest_number);
        let names = fs.list(&dir)?;
        let mut present = HashSet::new();
        let mut journals = Vec::new();
        let mut max_number = rec.manifest_number;
        for name in &names {
            match filename::parse(name) {
                Some(FileKind::Table(n)) => {
                    present.insert(n);
                    max_number = max_number.max(n);
                }
                Some(FileKind::Journal(n)) => {
                    max_number = max_number.max(n);
                    if n >= rec.log_number {
                        journals.push(n);
                    }
                }
                Some(FileKind::Manifest(n) | FileKind::ValueLog(n) | FileKind::ValueSegment(n)) => {
                    max_number = max_number.max(n)
                }
                _ => {}
            }
        }
        for (_, f) in rec.version.all_files() {
            if !present.contains(&f.number) {
                return Err(Error::corruption(
                    filename::table(&dir, f.number),
                    0,
                    "table listed in the manifest is missing",
                ));
            }
        }
        journals.sort_unstable();
        let versions = VersionSet::new(
            dir.clone(),
            fs.clone(),
            shape.clone(),
            rec.next_file_number.max(max_number + 1),
            opts.max_manifest_bytes,
        );
        let block_cache = Arc::new(BlockCache::new(opts.block_cache_bytes));
        let tables = Arc::new(TableCache::new(
            fs.clone(),
            dir.clone(),
            opts.max_open_tables,
            block_cache,
        ));
        let table_opts = TableOptions {
            block_size_bytes: opts.block_size_bytes,
            restart_interval: opts.block_restart_interval,
            bloom_bits_per_key: opts.bloom_bits_per_key,
        };
        // The store opens whenever the database has or had one, so that
        // pointers written under other options still resolve.
        let has_log = names
            .iter()
            .any(|n| matches!(filename::parse(n), Some(FileKind::ValueLog(_))));
        let layout = if !rec.version.hash.groups.is_empty() {
            Some(ValueLayout::Hash)
        } else if has_log || rec.version.value_log.journal_from.is_some() {
            Some(ValueLayout::Log)
        } else {
            opts.separation_threshold_bytes.map(|_| opts.value_layout)
        };
        if let Some(l) = layout {
            if opts.separation_threshold_bytes.is_some() && l != opts.value_layout {
                return Err(Error::InvalidArgument(format!(
                    "the database's value store has layout {l:?}; the options ask for {:?}",
                    opts.value_layout
                )));
            }
        }
        let mut open_edit = VersionEdit::default();
        let mut hash_store = None;
        let values: Option<Arc<dyn ValueStore>> = match layout {
            Some(ValueLayout::Hash) => {
                let (store, e) = HashStore::open(
                    &dir,
                    fs.clone(),
                    versions.file_numbers(),
                    &rec.version.hash,
                    hash_config(&opts),
                )?;
                open_edit.hash_groups = e.groups;
                open_edit.hash_files_added = e.added;
                open_edit.hash_files_dropped = e.dropped;
                let store = Arc::new(store);
                hash_store = Some(store.clone());
                Some(store)
            }
            Some(_) => Some(Arc::new(LogStore::open(
                &dir,
                fs.clone(),
                versions.file_numbers(),
                LogConfig {
                    file_size_bytes: opts.value_log_file_size_bytes,
                    buffer_bytes: opts.value_log_buffer_bytes,
                    prefetch_threads: opts.scan_prefetch_threads.max(1),
                },
                rec.version.value_log.tail,
                &rec.version.value_log.sealed,
            )?)),
            None => None,
        };
        let journal_in_log = opts.journal_mode == JournalMode::ValueLog;
        let version = Arc::new(rec.version);
        let mem = Arc::new(MemTable::new());
        let state = State {
            mem: mem.clone(),
            mem_journal: 0,
            mem_log_start: (0, 0),
            imms: VecDeque::new(),
            current: version.clone(),
            sv: Arc::new(SuperVersion {
                mem,
                imms: Vec::new(),
                current: version,
            }),
            log_number: rec.log_number,
            last_sequence: rec.last_sequence,
            writers: VecDeque::new(),
            snapshots: BTreeMap::new(),
            busy: HashSet::new(),
            pending_outputs: HashSet::new(),
            live_versions: Vec::new(),
            flush_running: false,
            compactions_running: 0,
            manual_compaction: false,
            memtables_switched: 0,
            memtables_flushed: 0,
            poisoned: None,
            closing: false,
            gc_running: false,
            last_gc: Instant::now(),
            pending_log_deletes: Vec::new(),
            pending_segment_deletes: Vec::new(),
        };
        let core = Core {
            dir,
            opts,
            fs,
            shape,
            tables,
            versions,
            manifest: Mutex::new(None),
            state: Mutex::new(state),
            cv: Condvar::new(),
            bg_cv: Condvar::new(),
            journal: Mutex::new(None),
            visible_seq: AtomicU64::new(rec.last_sequence),
            shutting_down: AtomicBool::new(false),
            counters: Counters::default(),
            table_opts,
            values,
            journal_in_log,
            gc_lock: Mutex::new(()),
            flush_appends: Mutex::new(()),
            gc_pool: std::sync::OnceLock::new(),
        };
        core.recover(&journals, open_edit, &manifest)?;
        if let Some(h) = hash_store {
            h.remove_dropped();
        }
        core.delete_obsolete_files();
        Ok(core)
    }

    /// The value store when its layout is hash.
    pub(crate) fn hash_store(&self) -> Option<&HashStore> {
        self.values.as_deref().and_then(|v| v.as_hash())
    }

    /// The value store when its layout is the log (its GC, and the log as
    /// journal, need the concrete type).
    pub(crate) fn log_store(&self) -> Option<&LogStore> {
        self.values.as_deref().and_then(|v| v.as_log())
    }

    fn new_output_number(&self) -> u64 {
        let n = self.versions.new_file_number();
        self.state.lock().pending_outputs.insert(n);
        n
    }

    /// Writes a memtable's entries into one L0 table.
    fn build_tables(
        &self,
        mut iter: Box<dyn InternalIterator>,
        smallest_snapshot: u64,
        stats: &mut JobStats,
    ) -> Result<Vec<FileMeta>> {
        let alloc = || self.new_output_number();
        let params = MergeParams {
            fs: &self.fs,
            dir: &self.dir,
            class: IoClass::Flush,
            table: self.table_opts,
            smallest_snapshot,
            target_file_size_bytes: u64::MAX,
            bottom: None,
            grandparents: &[],
            max_grandparent_overlap_bytes: u64::MAX,
            new_file_number: &alloc,
            cancel: &self.shutting_down,
            separate: match (&self.values, self.opts.separation_threshold_bytes) {
                (Some(v), Some(t)) if self.opts.separate_at_flush => Some((v.as_ref(), t)),
                _ => None,
            },
        };
        let out = compaction::write_merged(iter.as_mut(), &params, stats)?;
        if !out.is_empty() {
            self.fs.sync_dir(&self.dir)?;
        }
        Ok(out)
    }

    fn read_sequence(&self, opts: &ReadOptions<'_>) -> u64 {
        match opts.snapshot {
            Some(s) => s.seq,
            None => self.visible_seq.load(Ordering::Acquire),
        }
    }

    /// Unregisters a snapshot or iterator reading at `seq`.
    fn release_read(&self, seq: u64) {
        let mut st = self.state.lock();
        if let Some(c) = st.snapshots.get_mut(&seq) {
            *c -= 1;
            if *c == 0 {
                st.snapshots.remove(&seq);
            }
        }
    }

    /// The sequence to read at and the memtables and tables to read, taken
    /// together under the state lock (as LevelDB's Get does). Taken apart, a
    /// flush could install between them: it may drop an entry shadowed by a
    /// newer one that the older sequence cannot see, and the reader would
    /// then find neither (the GC race test found this).
    pub(crate) fn read_view(&self, opts: &ReadOptions<'_>) -> (u64, Arc<SuperVersion>) {
        let st = self.state.lock();
        (self.read_sequence(opts), st.sv.clone())
    }

    pub(crate) fn super_version(&self) -> Arc<SuperVersion> {
        self.state.lock().sv.clone()
    }

    fn get(&self, opts: &ReadOptions<'_>, key: &[u8]) -> Result<Option<Vec<u8>>> {
        // Each retry follows a relocation that became visible before its old
        // file was deleted, so one retry suffices; the bound turns a bug into
        // an error instead of a spin.
        for _ in 0..8 {
            let (seq, sv) = self.read_view(opts);
            match self.get_at(&sv, seq, key)? {
                Some(Found::Value(v)) => return Ok(Some(v)),
                None => return Ok(None),
                // GC relocated the value and collected its old file after
                // this read chose the old pointer; the relocation is visible
                // now, so a fresh lookup finds it. A snapshot read is
                // registered and so never sees a collected file.
                Some(Found::Collected) if opts.snapshot.is_none() => continue,
                Some(Found::Collected) => break,
            }
        }
        Err(Error::corruption(
            &self.dir,
            0,
            "index entry points into a value log file that GC collected",
        ))
    }

    /// The newest entry of `key` visible at `seq`: memtable, immutable
    /// memtables newest first, then the tables (invariant I5).
    pub(crate) fn lookup(&self, sv: &SuperVersion, key: &[u8], seq: u64) -> Result<Lookup> {
        let mut found = sv.mem.get(key, seq);
        for m in &sv.imms {
            if found != Lookup::Absent {
                break;
            }
            found = m.get(key, seq);
        }
        if found == Lookup::Absent {
            found = self.shape.get(&sv.current, &self.tables, key, seq)?;
        }
        Ok(found)
    }

    fn get_at(&self, sv: &SuperVersion, seq: u64, key: &[u8]) -> Result<Option<Found>> {
        match self.lookup(sv, key, seq)? {
            Lookup::Found(Kind::Value, v) => Ok(Some(Found::Value(v))),
            Lookup::Found(Kind::ValuePointer, p) => {
                let ptr = ValuePointer::decode(&p).ok_or_else(|| {
                    Error::corruption(&self.dir, 0, "malformed value pointer in the index")
                })?;
                let store = self
                    .values
                    .as_ref()
                    .ok_or_else(crate::value::missing_store)?;
                match store.read_or_collected(&ptr, key, IoClass::UserRead)? {
                    Read::Found(r) => Ok(Some(Found::Value(r.value))),
                    Read::Collected => Ok(Some(Found::Collected)),
                }
            }
            Lookup::Found(Kind::Delete, _) => unreachable!("a lookup returns deletes as Deleted"),
            Lookup::Deleted | Lookup::Absent => Ok(None),
        }
    }

    /// Moves the group's values at or above the separation threshold into
    /// the value store; returns the batch to journal and insert (pointers
    /// instead of those values), or `None` when nothing is separated.
    fn separate(&self, group: &WriteBatch, seq: u64) -> Result<Option<WriteBatch>> {
        let (Some(store), Some(threshold)) = (&self.values, self.opts.separation_threshold_bytes)
        else {
            return Ok(None);
        };
        if self.opts.separate_at_flush {
            return Ok(None);
        }
        let big =
            |op: &crate::batch::BatchOp<'_>| op.kind == Kind::Value && op.value.len() >= threshold;
        if !group.iter().flatten().any(|op| big(&op)) {
            return Ok(None);
        }
        let mut out = WriteBatch::with_capacity(group.approximate_size());
        out.set_sequence(seq);
        for (i, op) in group.iter().enumerate() {
            let op = op.expect("validated batch");
            if big(&op) {
                let p = store.append(&Record {
                    seq: seq + i as u64,
                    flags: KIND_PUT,
                    key: op.key,
                    value: op.value,
                })?;
                out.add_raw(Kind::ValuePointer, op.key, &p.encode());
                continue;
            }
            out.add_raw(op.kind, op.key, op.value);
        }
        Ok(Some(out))
    }

    /// Appends every operation of a group to the value log, the last one
    /// flagged as the group's end (value log as journal, seed 001 §3.4.2).
    /// Returns the batch for the memtable: pointers for values at or above
    /// the threshold; small values inline, deletes and relocations as they
    /// are.
    fn append_group(
        &self,
        store: &dyn ValueStore,
        group: &WriteBatch,
        seq: u64,
    ) -> Result<WriteBatch> {
        let threshold = self.opts.separation_threshold_bytes.unwrap_or(usize::MAX);
        let mut out = WriteBatch::with_capacity(group.approximate_size());
        out.set_sequence(seq);
        let last = group.len().saturating_sub(1);
        for (i, op) in group.iter().enumerate() {
            let op = op.expect("validated batch");
            let end = if i == last { FLAG_GROUP_END } else { 0 };
            let (flags, separated) = match op.kind {
                Kind::Value if op.value.len() >= threshold => (KIND_PUT, true),
                Kind::Value => (KIND_PUT | FLAG_INLINE, false),
                Kind::Delete => (KIND_DELETE, false),
                Kind::ValuePointer => (KIND_RELOCATE, false),
            };
            let p = store.append(&Record {
                seq: seq + i as u64,
                flags: flags | end,
                key: op.key,
                value: op.value,
            })?;
            if separated {
                out.add_raw(Kind::ValuePointer, op.key, &p.encode());
            } else {
                out.add_raw(op.kind, op.key, op.value);
            }
        }
        Ok(out)
    }

    /// Makes a group durable as the journal mode says (synced when `sync`).
    /// Returns the batch to insert into the memtable when it differs from
    /// the group (pointers in place of separated values).
    pub(super) fn log_group(
        &self,
        group: &WriteBatch,
        seq: u64,
        sync: bool,
    ) -> Result<Option<WriteBatch>> {
        if self.journal_in_log {
            let store = self
                .values
                .as_deref()
                .ok_or_else(crate::value::missing_store)?;
            let out = self.append_group(store, group, seq)?;
            if sync {
                store.sync()?;
                bump(&self.counters.journal_syncs, 1);
            }
            return Ok(Some(out));
        }
        let separated = self.separate(group, seq)?;
        let record = separated.as_ref().unwrap_or(group);
        let mut j = self.journal.lock();
        let j = j.as_mut().ok_or(Error::Closed)?;
        j.writer.add_record(record.data())?;
        if sync {
            // Values first: a synced journal record must never point at
            // values that are not durable.
            if let Some(v) = &self.values {
                v.sync()?;
            }
            j.sync()?;
            bump(&self.counters.journal_syncs, 1);
        }
        Ok(separated)
    }

    // ---- write path ----

    /// Waits while the value log is over its capacity and GC can free some
    /// (bounded, so a log of all live data cannot stop writes for good).
    /// This happens before the writer queues up: GC's relocations go
    /// through the queue and must never wait behind a writer waiting for
    /// them.
    fn wait_for_log_space(&self) {
        let (Some(store), Some(cap)) = (&self.values, self.opts.value_store_capacity_bytes) else {
            return;
        };
        // The common case, under capacity, takes no lock.
        if !store.is_full(cap) {
            return;
        }
        let start = Instant::now();
        let mut st = self.state.lock();
        let mut stalled = false;
        while self.log_over_capacity(&st)
            && st.check_writable().is_ok()
            && start.elapsed() < Duration::from_secs(1)
        {
            stalled = true;
            self.bg_cv.notify_all();
            self.cv.wait_for(&mut st, Duration::from_millis(10));
        }
        if stalled {
            let us = start.elapsed().as_micros() as u64;
            bump(&self.counters.stalls, 1);
            bump(&self.counters.stall_micros, us);
            bump(&self.counters.stall_store_micros, us);
        }
    }

    fn write(&self, sync: bool, force_switch: bool, batch: WriteBatch) -> Result<()> {
        if self.opts.read_only {
            return Err(Error::ReadOnly);
        }
        if !force_switch {
            self.wait_for_log_space();
        }
        self.enqueue(WriterSlot {
            size: batch.approximate_size(),
            batch: Mutex::new(batch),
            sync,
            force_switch,
            relocations: None,
            relocated: AtomicU64::new(0),
            done: Mutex::new(None),
        })
        .map(|_| ())
    }

    /// Queues a writer and waits until its group is committed; returns the
    /// number of relocations applied (for relocation slots).
    fn enqueue(&self, slot: WriterSlot) -> Result<u64> {
        let slot = Arc::new(slot);
        let mut st = self.state.lock();
        st.writers.push_back(slot.clone());
        loop {
            if let Some(r) = slot.done.lock().take() {
                return r.map(|()| slot.relocated.load(Ordering::Relaxed));
            }
            if st.writers.front().is_some_and(|w| Arc::ptr_eq(w, &slot)) {
                break;
            }
            self.cv.wait(&mut st);
        }
        // This writer leads a group.
        let result = self.lead_group(&mut st, &slot);
        self.cv.notify_all();
        result.map(|()| slot.relocated.load(Ordering::Relaxed))
    }

    fn lead_group(&self, st: &mut MutexGuard<'_, State>, leader: &Arc<WriterSlot>) -> Result<()> {
        if let Err(e) = self.make_room_for_write(st, leader.force_switch) {
            st.writers.pop_front();
            return Err(e);
        }
        if leader.force_switch {
            st.writers.pop_front();
            return Ok(());
        }
        if let Some(relocations) = &leader.relocations {
            let r = self.commit_relocations(st, relocations);
            if let Ok(n) = r {
                leader.relocated.store(n, Ordering::Relaxed);
            }
            st.writers.pop_front();
            return r.map(|_| ());
        }
        // The leader's own batch becomes the group (no copy when alone).
        let mut group = std::mem::take(&mut *leader.batch.lock());
        let mut members = 1usize;
        let mut sync = leader.sync;
        let limit = self.opts.max_write_group_bytes;
        for w in st.writers.iter().skip(1) {
            if w.force_switch || w.relocations.is_some() || (w.sync && !leader.sync) {
                break;
            }
            if group.approximate_size() + w.size > limit {
                break;
            }
            group.append(&w.batch.lock());
            sync |= w.sync;
            members += 1;
        }
        let seq = st.last_sequence + 1;
        let count = group.len() as u64;
        group.set_sequence(seq);
        st.last_sequence += count;
        let mem = st.mem.clone();
        let result = MutexGuard::unlocked(st, || {
            let logged = self.log_group(&group, seq, sync)?;
            mem.insert_batch(logged.as_ref().unwrap_or(&group), seq);
            Ok(())
        });
        match &result {
            Ok(()) => {
                self.visible_seq.store(seq + count - 1, Ordering::Release);
                bump(&self.counters.user_bytes, group.user_bytes());
                bump(&self.counters.user_ops, count);
                bump(&self.counters.write_groups, 1);
            }
            Err(e) => {
                st.poisoned
                    .get_or_insert_with(|| format!("journal write failed: {e}"));
            }
        }
        for _ in 0..members {
            let w = st.writers.pop_front().expect("group member");
            if !Arc::ptr_eq(&w, leader) {
                *w.done.lock() = Some(result.clone());
            }
        }
        result
    }

    /// Ensures the active memtable has room, switching it (and the journal)
    /// when full or when `force` asks; delays or stalls writes while
    /// background work is behind.
    fn make_room_for_write(&self, st: &mut MutexGuard<'_, State>, mut force: bool) -> Result<()> {
        let mut allow_delay = !force;
        loop {
            st.check_writable()?;
            let l0 = st.current.num_files(0);
            if allow_delay && l0 >= self.opts.l0_slowdown_trigger {
                let t = Instant::now();
                MutexGuard::unlocked(st, || std::thread::sleep(Duration::from_millis(1)));
                let us = t.elapsed().as_micros() as u64;
                bump(&self.counters.slowdowns, 1);
                bump(&self.counters.stall_micros, us);
                bump(&self.counters.stall_l0_micros, us);
                allow_delay = false;
                continue;
            }
            if !force && st.mem.approximate_memory_bytes() < self.opts.write_buffer_size_bytes {
                return Ok(());
            }
            if force && st.mem.is_empty() {
                return Ok(());
            }
            if st.imms.len() + 1 >= self.opts.max_write_buffers || l0 >= self.opts.l0_stop_trigger {
                let t = Instant::now();
                bump(&self.counters.stalls, 1);
                self.bg_cv.notify_all();
                let l0_stop = l0 >= self.opts.l0_stop_trigger;
                self.cv.wait_for(st, Duration::from_millis(100));
                let us = t.elapsed().as_micros() as u64;
                bump(&self.counters.stall_micros, us);
                let reason = if l0_stop {
                    &self.counters.stall_l0_micros
                } else {
                    &self.counters.stall_memtable_micros
                };
                bump(reason, us);
                continue;
            }
            self.switch_memtable(st)?;
            force = false;
        }
    }

    fn switch_memtable(&self, st: &mut MutexGuard<'_, State>) -> Result<()> {
        if let (true, Some(store)) = (self.journal_in_log, self.log_store()) {
            // No journal to rotate: the new memtable's records start at the
            // log's head, and that is where replay starts once it is the
            // oldest unflushed one (the leader appends, so none is in
            // flight).
            let start = store.head_position();
            let old = std::mem::replace(&mut st.mem, Arc::new(MemTable::new()));
            let log_start = std::mem::replace(&mut st.mem_log_start, start);
            let journal = st.mem_journal;
            st.imms.push_back(Immutable {
                mem: old,
                journal,
                log_start,
            });
            st.memtables_switched += 1;
            st.refresh_sv();
            self.bg_cv.notify_all();
            return Ok(());
        }
        let number = self.versions.new_file_number();
        let r = (|| {
            let mut j = self.journal.lock();
            let j = j.as_mut().ok_or(Error::Closed)?;
            // The old journal is not synced here: its memtable's flush
            // usually makes it obsolete before its pages reach the disk.
            // The link record and seals keep recovery to a prefix.
            let w = self
                .fs
                .create(&filename::journal(&self.dir, number), IoClass::Journal)?;
            self.fs.sync_dir(&self.dir)?;
            j.rotate(st.mem_journal, LogWriter::new(w))
        })();
        if let Err(e) = r {
            st.poisoned
                .get_or_insert_with(|| format!("journal rotation failed: {e}"));
            return Err(e);
        }
        let old = std::mem::replace(&mut st.mem, Arc::new(MemTable::new()));
        let journal = std::mem::replace(&mut st.mem_journal, number);
        st.imms.push_back(Immutable {
            mem: old,
            journal,
            log_start: (0, 0),
        });
        st.memtables_switched += 1;
        st.refresh_sv();
        self.bg_cv.notify_all();
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        self.write(false, true, WriteBatch::new())?;
        let mut st = self.state.lock();
        let target = st.memtables_switched;
        while st.memtables_flushed < target {
            st.check_writable()?;
            self.bg_cv.notify_all();
            self.cv.wait_for(&mut st, Duration::from_millis(100));
        }
        Ok(())
    }

    fn wait_idle(&self) -> Result<()> {
        if self.opts.read_only {
            return Ok(()); // no background work runs
        }
        let mut st = self.state.lock();
        loop {
            st.check_writable()?;
            let pending = !st.imms.is_empty()
                || st.flush_running
                || st.compactions_running > 0
                || self.shape.pick_compaction(&st.current, &st.busy).is_some();
            if !pending {
                return Ok(());
            }
            self.bg_cv.notify_all();
            self.cv.wait_for(&mut st, Duration::from_millis(100));
        }
    }

    // ---- background work ----

    fn background_loop(self: Arc<Self>) {
        let mut st = self.state.lock();
        loop {
            if st.closing {
                return;
            }
            match self.pick_job(&mut st) {
                Some(job) => {
                    // The sweep runs before the job counts as finished, so
                    // waiters on idle background work see the files gone.
                    let r = MutexGuard::unlocked(&mut st, || {
                        let r = self.run_job(&job);
                        self.delete_obsolete_files();
                        r
                    });
                    self.finish_job(&mut st, job, r);
                    self.cv.notify_all();
                    self.bg_cv.notify_all();
                }
                // With periodic GC, wake up to check the interval.
                None => match self.opts.gc_interval_ms {
                    Some(ms) => {
                        self.bg_cv.wait_for(&mut st, Duration::from_millis(ms));
                    }
                    None => self.bg_cv.wait(&mut st),
                },
            }
        }
    }

    fn pick_job(&self, st: &mut State) -> Option<Job> {
        if st.poisoned.is_some() {
            return None;
        }
        if !st.imms.is_empty() && !st.flush_running {
            st.flush_running = true;
            return Some(Job::Flush);
        }
        if !st.gc_running && !st.manual_compaction && self.gc_wanted(st) {
            st.gc_running = true;
            return Some(Job::Gc);
        }
        let max_compactions = self.opts.background_threads.saturating_sub(1).max(1);
        if st.manual_compaction || st.compactions_running >= max_compactions {
            return None;
        }
        let plan = self.shape.pick_compaction(&st.current, &st.busy)?;
        for f in plan.input_files() {
            st.busy.insert(f.number);
        }
        st.compactions_running += 1;
        Some(Job::Compaction(plan))
    }

    fn run_job(&self, job: &Job) -> Result<()> {
        match job {
            Job::Flush => self.run_flush(),
            Job::Compaction(plan) => self.run_compaction(plan),
            Job::Gc => self.gc_once().map(|_| ()),
        }
    }

    fn finish_job(&self, st: &mut MutexGuard<'_, State>, job: Job, r: Result<()>) {
        match job {
            Job::Flush => st.flush_running = false,
            Job::Gc => st.gc_running = false,
            Job::Compaction(plan) => {
                st.compactions_running -= 1;
                for f in plan.input_files() {
                    st.busy.remove(&f.number);
                }
            }
        }
        if let Err(e) = r {
            if !self.shutting_down.load(Ordering::SeqCst) {
                st.poisoned
                    .get_or_insert_with(|| format!("background work failed: {e}"));
            }
        }
    }

    fn run_flush(&self) -> Result<()> {
        let (imm, next_journal, next_log_start, smallest_snapshot) = {
            let st = self.state.lock();
            let front = st
                .imms
                .front()
                .expect("flush picked with an immutable memtable");
            let next = st.imms.get(1).map_or(st.mem_journal, |i| i.journal);
            let next_log = st.imms.get(1).map_or(st.mem_log_start, |i| i.log_start);
            let visible = self.visible_seq.load(Ordering::Acquire);
            (
                front.mem.clone(),
                next,
                next_log,
                st.smallest_snapshot(visible),
            )
        };
        // Held until the tables are installed: GC waits for it after
        // freezing files, so that the pointers to values this flush
        // appends are in the index before GC judges them.
        let _appending = self.flush_appends.lock();
        let mut stats = JobStats::default();
        let outputs = self.build_tables(imm.clone().iter(), smallest_snapshot, &mut stats)?;
        // Tables are not replayed like the journal, so their pointers are
        // never re-checked: the values they point at (appended at write
        // time or by this flush) must be durable before the flush makes the
        // journal obsolete.
        if let Some(v) = &self.values {
            v.sync()?;
        }
        let mut edit = VersionEdit {
            value_log_garbage: std::mem::take(&mut stats.garbage).into_iter().collect(),
            // Replay now starts where the next memtable's records do.
            value_log_journal: self.journal_in_log.then_some(next_log_start),
            ..VersionEdit::default()
        };
        let numbers: Vec<u64> = outputs.iter().map(|f| f.number).collect();
        for f in outputs {
            edit.add_file(0, f);
        }
        self.install(edit, Some(next_journal), &numbers, |st| {
            let i = st.imms.pop_front().expect("flushed memtable");
            debug_assert!(Arc::ptr_eq(&i.mem, &imm));
            st.memtables_flushed += 1;
        })?;
        bump(&self.counters.flushes, 1);
        Ok(())
    }

    fn run_compaction(&self, plan: &CompactionPlan) -> Result<()> {
        if plan.trivial_move {
            self.install(compaction::trivial_move_edit(plan), None, &[], |_| {})?;
            bump(&self.counters.trivial_moves, 1);
            bump(&self.counters.compactions, 1);
            return Ok(());
        }
        let (version, smallest_snapshot) = {
            let st = self.state.lock();
            let visible = self.visible_seq.load(Ordering::Acquire);
            (st.current.clone(), st.smallest_snapshot(visible))
        };
        let alloc = || self.new_output_number();
        let leveled_overlap = self.opts.target_file_size_bytes.saturating_mul(10);
        let params = MergeParams {
            fs: &self.fs,
            dir: &self.dir,
            class: IoClass::Compaction,
            table: self.table_opts,
            smallest_snapshot,
            target_file_size_bytes: self.opts.target_file_size_bytes,
            bottom: Some((&version, self.shape.as_ref(), plan.output_level)),
            grandparents: &plan.grandparents,
            max_grandparent_overlap_bytes: leveled_overlap,
            new_file_number: &alloc,
            cancel: &self.shutting_down,
            separate: None,
        };
        let mut stats = JobStats::default();
        let mut edit = compaction::run_compaction(plan, &self.tables, params, &mut stats)?;
        edit.value_log_garbage = std::mem::take(&mut stats.garbage).into_iter().collect();
        let numbers: Vec<u64> = edit.added.iter().map(|(_, f)| f.number).collect();
        if !numbers.is_empty() {
            self.fs.sync_dir(&self.dir)?;
        }
        self.install(edit, None, &numbers, |_| {})?;
        bump(&self.counters.compactions, 1);
        bump(&self.counters.compaction_read, stats.bytes_read);
        bump(&self.counters.compaction_written, stats.bytes_written);
        Ok(())
    }

    /// Makes `edit` durable in the manifest and installs the version it
    /// produces; `then` runs under the state lock with the new version in
    /// place. A manifest failure poisons the database.
    fn install(
        &self,
        mut edit: VersionEdit,
        log_number: Option<u64>,
        outputs: &[u64],
        then: impl FnOnce(&mut State),
    ) -> Result<()> {
        let mut ms = self.manifest.lock();
        let ms = ms.as_mut().ok_or(Error::Closed)?;
        let (base, old_log, last_seq) = {
            let st = self.state.lock();
            (st.current.clone(), st.log_number, st.last_sequence)
        };
        let log_number = log_number.unwrap_or(old_log);
        if let Some(store) = self.log_store() {
            // Files sealed since the last install: an open checks them.
            edit.value_log_sealed = store.unnamed_sealed(&base.value_log.sealed);
        }
        let version = base
            .apply(&edit)
            .map_err(|e| Error::corruption(filename::manifest(&self.dir, ms.number), 0, e))?;
        if let Err(e) = self
            .versions
            .log_edit(ms, &mut edit, &version, log_number, last_seq)
        {
            let mut st = self.state.lock();
            st.poisoned
                .get_or_insert_with(|| format!("manifest write failed: {e}"));
            return Err(e);
        }
        #[cfg(feature = "invariants")]
        self.check_version(&version);
        let mut st = self.state.lock();
        let version = Arc::new(version);
        let old = std::mem::replace(&mut st.current, version);
        st.live_versions.retain(|w| w.strong_count() > 0);
        st.live_versions.push(Arc::downgrade(&old));
        st.log_number = log_number;
        for n in outputs {
            st.pending_outputs.remove(n);
        }
        then(&mut st);
        st.refresh_sv();
        Ok(())
    }

    /// Expensive whole-version check (feature `invariants`): every table
    /// reads back in order with the entry count and key range the manifest
    /// records.
    #[cfg(feature = "invariants")]
    fn check_version(&self, v: &Version) {
        for (level, f) in v.all_files() {
            let t = self
                .tables
                .get(f.number, f.file_size)
                .expect("invariants: table opens");
            let n = t.verify().expect("invariants: table verifies");
            assert_eq!(
                n, f.entries,
                "invariants: entries of table {} at L{level}",
                f.number
            );
        }
    }

    /// Deletes files no version, snapshot or iterator can read: tables in no
    /// live version and not being written, journals below the log number,
    /// manifests other than the live one, and temporary files.
    fn delete_obsolete_files(&self) {
        let ms = self.manifest.lock();
        let Some(manifest_number) = ms.as_ref().map(|m| m.number) else {
            return;
        };
        // List first, then take the live set: a file created after the
        // listing is not in it, and one in it got its number (and so its
        // pending-output entry) before it was created.
        let Ok(names) = self.fs.list(&self.dir) else {
            return;
        };
        let (live, log_number) = {
            let mut st = self.state.lock();
            st.live_versions.retain(|w| w.strong_count() > 0);
            let mut live: HashSet<u64> = st.pending_outputs.clone();
            let versions = st
                .live_versions
                .iter()
                .filter_map(Weak::upgrade)
                .chain(std::iter::once(st.current.clone()));
            for v in versions {
                live.extend(v.all_files().map(|(_, f)| f.number));
            }
            (live, st.log_number)
        };
        // Journals of flushed memtables need no sync, and none may reach a
        // journal being deleted (`state` is not held). This sweep follows
        // every flush.
        if let Some(j) = self.journal.lock().as_mut() {
            j.forget_below(log_number);
        }
        for name in names {
            let delete = match filename::parse(&name) {
                Some(FileKind::Table(n)) => {
                    let dead = !live.contains(&n);
                    if dead {
                        self.tables.evict(n);
                    }
                    dead
                }
                Some(FileKind::Journal(n)) => n < log_number,
                Some(FileKind::Manifest(n)) => n != manifest_number,
                Some(FileKind::Temp) => true,
                _ => false,
            };
            if delete {
                // A failed delete leaves garbage that the next sweep retries.
                let _ = self.fs.remove(&self.dir.join(&name));
            }
        }
    }

    fn compact_range(&self, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
        self.flush()?;
        {
            let mut st = self.state.lock();
            while st.manual_compaction || st.compactions_running > 0 {
                st.check_writable()?;
                self.cv.wait_for(&mut st, Duration::from_millis(100));
            }
            st.manual_compaction = true;
        }
        let r = self.manual_compactions(begin, end);
        self.state.lock().manual_compaction = false;
        self.bg_cv.notify_all();
        r
    }

    fn manual_compactions(&self, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
        let lo = begin.unwrap_or(&[]);
        let hi_owned;
        let hi: &[u8] = match end {
            Some(e) => e,
            None => {
                let st = self.state.lock();
                hi_owned = st
                    .current
                    .all_files()
                    .map(|(_, f)| f.largest_user_key().to_vec())
                    .max()
                    .unwrap_or_default();
                &hi_owned
            }
        };
        for level in 0..self.shape.num_levels() {
            let plan = {
                let mut st = self.state.lock();
                st.check_writable()?;
                let plan = self.shape.pick_range_compaction(&st.current, level, lo, hi);
                if let Some(p) = &plan {
                    for f in p.input_files() {
                        st.busy.insert(f.number);
                    }
                }
                plan
            };
            let Some(plan) = plan else { continue };
            let r = self.run_compaction(&plan);
            let mut st = self.state.lock();
            for f in plan.input_files() {
                st.busy.remove(&f.number);
            }
            if let Err(e) = &r {
                st.poisoned
                    .get_or_insert_with(|| format!("manual compaction failed: {e}"));
            }
            drop(st);
            r?;
            self.delete_obsolete_files();
        }
        Ok(())
    }

    fn stats(&self) -> Stats {
        let st = self.state.lock();
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let scores = self.shape.scores(&st.current);
        let levels: Vec<LevelStats> = (0..st.current.levels.len())
            .map(|l| LevelStats {
                tables: st.current.num_files(l),
                bytes: st.current.level_bytes(l),
                score: scores[l],
            })
            .collect();
        Stats {
            created_with: st.current.preset.as_deref().and_then(Preset::from_name),
            io: self.fs.counters().snapshot(),
            user_bytes_written: get(&c.user_bytes),
            user_ops_written: get(&c.user_ops),
            last_sequence: self.visible_seq.load(Ordering::Acquire),
            live_table_bytes: levels.iter().map(|l| l.bytes).sum(),
            levels,
            memtable_bytes: (st.mem.approximate_memory_bytes()
                + st.imms
                    .iter()
                    .map(|i| i.mem.approximate_memory_bytes())
                    .sum::<usize>()) as u64,
            immutable_memtables: st.imms.len(),
            flushes: get(&c.flushes),
            compactions: get(&c.compactions),
            trivial_moves: get(&c.trivial_moves),
            compaction_bytes_read: get(&c.compaction_read),
            compaction_bytes_written: get(&c.compaction_written),
            write_slowdowns: get(&c.slowdowns),
            write_stalls: get(&c.stalls),
            write_stall_micros: get(&c.stall_micros),
            write_stall_micros_by_reason: crate::stats::StallMicros {
                memtables: get(&c.stall_memtable_micros),
                level0: get(&c.stall_l0_micros),
                value_store: get(&c.stall_store_micros),
            },
            journal_syncs: get(&c.journal_syncs),
            write_groups: get(&c.write_groups),
            block_cache_bytes: self.tables.block_cache().usage_bytes(),
            poisoned: st.poisoned.clone(),
            value_log_files: self.values.as_ref().map_or(0, |v| v.file_count()),
            value_log_bytes: self.values.as_ref().map_or(0, |v| v.total_bytes()),
            value_log_appended_bytes: self.values.as_ref().map_or(0, |v| v.appended_bytes()),
            value_log_garbage_bytes: st.current.value_log.garbage.values().sum(),
            hash_groups: self
                .values
                .as_deref()
                .and_then(|v| v.as_hash())
                .map_or(0, |h| h.groups()),
            hash_log_segments_in_use: self
                .values
                .as_deref()
                .and_then(|v| v.as_hash())
                .map_or(0, |h| h.log_segments_in_use()),
            hash_group_fill: self.hash_store().map_or([0; 11], |h| h.fill_histogram()),
            hash_cold_log_bytes: self.hash_store().map_or(0, |h| h.cold_bytes()),
            hash_cold_moved_bytes: get(&c.cold_moved_bytes),
            hash_cold_gc_runs: get(&c.cold_gc_runs),
            gc_runs: get(&c.gc_runs),
            gc_bytes_read: get(&c.gc_bytes_read),
            gc_bytes_written: get(&c.gc_bytes_written),
            relocations_applied: get(&c.relocations_applied),
            relocations_dropped: get(&c.relocations_dropped),
        }
    }
}
