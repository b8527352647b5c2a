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

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::filename;
use crate::fs::{CountingFs, FileLock};
use crate::iter::{DbIter, InternalIterator, MergingIterator};

use crate::options::{Options, Preset, ReadOptions, WriteOptions};
use crate::stats::{GcStats, SpaceMismatch, Stats};
use crate::version::VersionSet;

mod checkpoint;
mod core;
mod cursor;
mod delays;
mod gc;
mod jobs;
pub(crate) mod light;
mod open;
mod queue;
mod read;
mod recover;
pub(crate) mod space;
mod write;

pub(crate) use self::core::Core;
pub use checkpoint::{CheckpointStats, CHECKPOINT_STAGING_SUFFIX};
pub use cursor::{DbIterator, Range};
pub use read::ValueRef;

/// The least block cache [`Db::set_memory_budget`] leaves a database: a
/// budget below the write buffer and this still keeps the blocks reads
/// and merges are in.
pub const MIN_CACHE_BYTES: usize = 4 << 20;

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
        crate::memory::fit_to_limit(&mut options);
        let fs = if options.read_only {
            // Everything the open writes stays in memory (`OverlayFs`).
            options.create_if_missing = false;
            let overlay = crate::fs::OverlayFs::new(options.fs.clone());
            CountingFs::new(Arc::new(overlay))
        } else {
            CountingFs::new(options.fs.clone())
        };
        if options.create_if_missing {
            fs.create_dir_all(&dir).map_err(|e| {
                // Something by that name that is no directory (a file).
                if fs.exists(&dir) {
                    Error::InvalidArgument(format!(
                        "{}: exists and is not a directory a database can be in ({e})",
                        dir.display()
                    ))
                } else {
                    e
                }
            })?;
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
        core.state.lock().jobs.bg_loops = workers;
        let gc_workers = core.pressure_gc_threads();
        for i in 0..workers + gc_workers {
            let c = core.clone();
            let pressure_gc = i >= workers;
            let name = if pressure_gc {
                format!("sluicedb-gc-{}", i - workers)
            } else {
                format!("sluicedb-bg-{i}")
            };
            let t = std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    // A panic here is a bug; make it visible as a poisoned
                    // database instead of a silently missing worker.
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        if pressure_gc {
                            c.clone().pressure_gc_loop()
                        } else {
                            c.clone().background_loop()
                        }
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

    /// Makes every write accepted before this call durable, as if each
    /// had been written with `WriteOptions::synced()`: one journal sync
    /// (servers call it once a second, Redis's `appendfsync everysec`).
    /// After `Err` the database is poisoned like after a failed synced write.
    pub fn sync(&self) -> Result<()> {
        self.core().sync_journal()
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

    /// The values of `keys`, in their order (`None` for a key without
    /// one), all read at one point in time; the latest unless
    /// `opts.snapshot`. Cheaper than a `get_opt` per key: the keys share
    /// one read view and, in key order, one descent of each memtable.
    pub fn multi_get_opt<K: AsRef<[u8]>>(
        &self,
        opts: &ReadOptions<'_>,
        keys: &[K],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let keys: Vec<&[u8]> = keys.iter().map(AsRef::as_ref).collect();
        self.core().multi_get(opts, &keys)
    }

    /// What the index holds for `key` at `opts.snapshot` (latest if
    /// none), without reading a separated value: the value when it is
    /// kept inline, else its length ([`ValueRef`]); `None` if the key has
    /// no value. For callers that decide by a value's first bytes or its
    /// size whether they need it at all (the server asks whether a key it
    /// overwrites held a collection's small record). Costs one index
    /// lookup, as `get_opt` does before it reads the value store.
    pub fn peek_opt(
        &self,
        opts: &ReadOptions<'_>,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<ValueRef>> {
        self.core().peek(opts, key.as_ref())
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
        // LightKV: no leaf leaves the buffer between the super version and
        // the copy of the buffer below (`db/light.rs`).
        let light = core.light.get().cloned();
        let light_readers = light.as_ref().map(|l| l.readers.read());
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
        let end = |b: &std::ops::Bound<Vec<u8>>| match b {
            std::ops::Bound::Included(k) | std::ops::Bound::Excluded(k) => Some(k.clone()),
            std::ops::Bound::Unbounded => None,
        };
        let (lo, hi) = (end(&lower), end(&upper));
        let mut children: Vec<Box<dyn InternalIterator>> = vec![match &light {
            Some(l) => l.iter(lo.as_deref(), hi.as_deref()),
            None => sv.mem.clone().iter(),
        }];
        drop(light_readers);
        for m in &sv.imms {
            children.push(m.clone().iter());
        }
        if core.shape.note_scan(&sv.current) {
            // A read-only workload wakes no background thread otherwise:
            // its scans would never see the scan merge (UniKV, ICDE '20,
            // §III-F) or L0 merged for reads.
            core.wake_background_for_reads();
        }
        children.extend(core.shape.scan_iterators(
            &sv.current,
            &core.tables,
            lo.as_deref(),
            hi.as_deref(),
        ));
        let inner = DbIter::new(Box::new(MergingIterator::new(children)), seq);
        let values = core.values.clone();
        DbIterator::new(inner, Box::new((sv, guard)), values, lower, upper)
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
            self.core().opts.values.scan_prefetch_threads > 0,
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
            self.core().opts.values.scan_prefetch_threads > 0,
        )
    }

    /// Resizes the memory of a running database: the memtables and the
    /// block cache share `budget_bytes` from now on (`docs/design.md`,
    /// "Memory"): the block cache's capacity becomes the budget less the
    /// write buffer (at least [`MIN_CACHE_BYTES`]), and it gives way to
    /// immutable memtables within the budget as at open. The write buffer
    /// keeps its size. `None`: back to the sizes in force before any
    /// budget was set here (as opened, or as fitted to a memory limit,
    /// `docs/design.md`, "Memory", *Under a memory limit*). A budget set
    /// here stands: the sizes are not fitted to the limit afterwards. A
    /// database opened without a block cache keeps none.
    /// `sluice serve` calls it for `CONFIG SET maxmemory`.
    pub fn set_memory_budget(&self, budget_bytes: Option<usize>) {
        let (cache, shared) = self.core().sizes.cache_sizes(budget_bytes);
        self.core().tables.block_cache().set_sizes(cache, shared);
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

    /// Waits until the background threads find nothing to do: no flush,
    /// compaction or GC step pending or running (for benchmarks and tests
    /// that want a settled tree). The space limit's own GC threads
    /// (`GcOptions::pressure_threads`) are not waited for.
    pub fn wait_for_background(&self) -> Result<()> {
        self.core().wait_idle()
    }

    /// Garbage-collects the oldest value log file (WiscKey, FAST '16, §3.3.2): reads
    /// it from the tail, relocates live values to the head, and frees the
    /// file once no snapshot or iterator can need it. Returns what was done;
    /// a database without a value store has nothing to collect.
    pub fn gc(&self) -> Result<GcStats> {
        self.core().gc_file()
    }

    /// Makes a consistent copy of the database in the new directory `dir`
    /// while writes go on (`docs/design.md`, "Checkpoints"): it opens as a
    /// database (with the same options) holding a prefix of history that
    /// includes every write acknowledged before the call. Tables and value
    /// files nothing writes any more are hard-linked into it (copied where
    /// the file system refuses a link, as across file systems), the
    /// journal and the value store's files still taking appends copied.
    /// It is written into `DIR.checkpoint-tmp` and renamed to `dir` when
    /// whole: after a crash `dir` is absent or whole.
    ///
    /// Errors: [`Error::AlreadyExists`] if `dir` exists, [`Error::ReadOnly`]
    /// on a read-only open, [`Error::Locked`] while another checkpoint
    /// writes into `dir`. Syncs the journal first, so a failure there
    /// poisons the database as [`Db::sync`] does.
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<CheckpointStats> {
        self.core().checkpoint(dir.as_ref())
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
        Ok(open::recorded_preset(&fs, &dir)?
            .as_deref()
            .and_then(Preset::from_name))
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

    /// Recounts the value store's space (`docs/design.md`, "Space
    /// accounting"): reads every index entry and returns the value files
    /// whose bytes are not their header plus the records entries point at
    /// plus the garbage counted for them. Empty when the accounting is
    /// exact. Records a crash orphaned (some kinds are not counted yet) and
    /// databases written before the accounting show up here; they are not
    /// damage. Exact only while nothing writes, flushes, compacts or
    /// collects: call it on a quiet database (`wait_for_background`).
    pub fn check_space(&self) -> Result<Vec<SpaceMismatch>> {
        self.core().space_mismatches()
    }

    /// Checks every table block and entry, and every record of the value
    /// store's files, against their checksums; then reads every live pair,
    /// so that each separated value is checked where its index entry points
    /// (file present, record whole, of that key: WiscKey, FAST '16, §3.3.3);
    /// where the version cannot show that reads probe tables newest first
    /// (lightkv's partitions), checks it key by key. Returns
    /// the entries, records and pairs checked. Damage is `Corruption`
    /// naming file and offset. Reads the whole database.
    pub fn verify(&self) -> Result<u64> {
        let core = self.core();
        let sv = core.super_version();
        let mut n = 0;
        for (_, f) in sv.current.all_files() {
            n += core
                .tables
                .get(f.number, f.file_size, crate::fs::IoClass::UserRead)?
                .verify()?;
        }
        n += core.shape.verify_order(&sv.current, &core.tables)?;
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
        {
            // A GC step under way ends first (no new one starts): its
            // relocations go through the write path, which refuses writes
            // once closing, and a step cut there left its copies named by
            // no entry and counted by no edit (the model suite's reopens
            // found them).
            let mut st = core.state.lock();
            while st.jobs.gc_running && st.poisoned.is_none() {
                core.bg_cv.notify_all();
                core.cv
                    .wait_for(&mut st, std::time::Duration::from_millis(10));
            }
            st.closing = true;
        }
        core.bg_cv.notify_all();
        core.cv.notify_all();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        // A clean close keeps every acknowledged write, synced or not:
        // values first, then the journal that points at them, closed so
        // that recovery can tell damage in its last records from a torn
        // write; then the manifest learns how far the values are durable.
        let values_synced = core.values.as_ref().is_none_or(|v| v.sync().is_ok());
        let closed = values_synced && core.journal.get().is_some_and(|j| j.close().is_ok());
        if !closed {
            return;
        }
        let current = core.state.lock().current.clone();
        if let Some(edit) = core.values.as_ref().and_then(|v| v.close_edit(&current)) {
            // Refused when poisoned; failing, it leaves recovery's
            // judgement of the log's last records as it was before.
            let _ = core.install(edit, None, &[], |_| {});
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
struct ReadGuard {
    seq: u64,
    core: Arc<Core>,
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        self.core.release_read(self.seq);
    }
}
