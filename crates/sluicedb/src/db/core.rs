//! `Core`: the state every flow of the database shares (`docs/design.md`,
//! "Threads and locks"), and the small helpers all of them use.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::delays::OwedDelays;
use super::queue::WriterSlot;
use crate::error::{Error, Result};
use crate::fs::CountingFs;
use crate::index::{IndexShape, WritePressure};
use crate::journal::{Journal, JournalMark};
use crate::memtable::{BlockPool, MemTable, WriteBuffer};
use crate::options::{Options, Preset, ReadOptions};
use crate::policy::Separation;
use crate::stats::Counters;
use crate::stats::{
    CompactionStats, FlushStats, GcTotals, IndexStats, LevelStats, SpaceStats, Stats, WriteStats,
};
use crate::super_version::SuperVersion;
use crate::table::builder::TableOptions;
use crate::table::{BlockCache, TableCache};
use crate::value::{MergeCollection, ValueStore};
use crate::version::{ManifestState, Version, VersionSet};

pub(super) struct Immutable {
    pub(super) mem: Arc<dyn WriteBuffer>,
    /// Where its records begin in the journal.
    pub(super) mark: JournalMark,
    /// When it was switched out: its flush's wait for a thread counts from
    /// here (`Stats::flush.flush_wait_micros`).
    pub(super) since: Instant,
    /// The last sequence number written to it: durable once it is flushed.
    pub(super) last_seq: u64,
    /// LightKV: the write buffer's leaf it is a flush unit of.
    pub(super) leaf: Option<u32>,
    /// The first sequence number of an unjournaled write in it: durable
    /// only once it is flushed.
    pub(super) unjournaled_from: Option<u64>,
}

/// What the state lock (`Core::state`) guards, in parts: the write
/// buffers and the writers' queue, the version and its readers, the
/// background jobs' bookkeeping ([`Jobs`]), and the database's health.
/// Every field is read and written under that lock only; the lock order
/// is in `docs/design.md`, "Threads and locks".
pub(super) struct State {
    // ---- write buffers and the writers' queue ----
    pub(super) mem: Arc<dyn WriteBuffer>,
    /// Where the active memtable's records begin in the journal: the
    /// replay start once older ones are flushed.
    pub(super) mem_mark: JournalMark,
    /// The first sequence number of an unjournaled write in the active
    /// memtable (`Options::skip_journal_unless_synced`).
    pub(super) mem_unjournaled_from: Option<u64>,
    pub(super) imms: VecDeque<Immutable>,
    /// LightKV: the shape's write pressure as computed for the version
    /// the first half names (a weak reference, so that its address is not
    /// reused while it is kept): the write path asks it once per group,
    /// and the partitioned shape counts every weight-0 table to answer.
    pub(super) light_pressure: Option<(Weak<Version>, WritePressure)>,
    /// The tables' block cache, which gives way to `imms` under the memory
    /// budget (`refresh_sv`).
    pub(super) block_cache: Arc<BlockCache>,
    pub(super) last_sequence: u64,
    pub(super) writers: VecDeque<Arc<WriterSlot>>,
    pub(super) memtables_switched: u64,
    pub(super) memtables_flushed: u64,

    // ---- the version and who reads it ----
    pub(super) current: Arc<Version>,
    pub(super) sv: Arc<SuperVersion>,
    /// The journal the current version's replay starts from.
    pub(super) log_number: u64,
    /// Open snapshots and iterators: sequence number and count.
    pub(super) snapshots: BTreeMap<u64, usize>,
    /// Versions readers may still hold (their files are not obsolete).
    pub(super) live_versions: Vec<Weak<Version>>,

    // ---- background work ----
    pub(super) jobs: Jobs,

    // ---- health ----
    /// Why nothing more may be written, after a failure that left the
    /// manifest uncertain (invariant I7).
    pub(super) poisoned: Option<String>,
    pub(super) closing: bool,
    /// Why the space limit cannot be held, when it cannot (for `Stats`).
    pub(super) space_note: Option<String>,
}

/// The scheduler's bookkeeping (`db/jobs/mod.rs`): which jobs run, which
/// files they hold, and what GC freed. Part of [`State`], under its lock.
pub(super) struct Jobs {
    /// Tables a running compaction reads (no other job may pick them).
    pub(super) busy: HashSet<u64>,
    /// Numbers of files jobs are writing (not obsolete though unlisted).
    pub(super) pending_outputs: HashSet<u64>,
    pub(super) flush_running: bool,
    /// A merge that moved value records is settling its garbage: no flush
    /// starts (`Core::hold_flushes`).
    pub(super) relocation_settling: bool,
    pub(super) compactions_running: usize,
    pub(super) manual_compaction: bool,
    pub(super) gc_running: bool,
    /// When the last GC step ended (for `gc_interval_ms`).
    pub(super) last_gc: Instant,
    /// What GC steps freed, released once no registered reader is older
    /// than their relocations (`docs/design.md`, "The GC driver").
    pub(super) pending_deletes: Vec<PendingFree>,
    /// The background loops the database runs, how many of them are
    /// parked because their last look found no job, and how many looks
    /// they made (`Core::wait_idle`).
    pub(super) bg_loops: usize,
    pub(super) bg_parked: usize,
    pub(super) bg_looks: u64,
    /// Threads in `Core::wait_idle`, the only waiters a loop parking with
    /// nothing to do must wake (waking the others, writers stalled on GC or
    /// a flush, made them wake the loops again: a ping-pong that ran for
    /// the whole stall, issue 53).
    pub(super) idle_waiters: usize,
}

impl Jobs {
    pub(super) fn new() -> Jobs {
        Jobs {
            busy: HashSet::new(),
            pending_outputs: HashSet::new(),
            flush_running: false,
            relocation_settling: false,
            compactions_running: 0,
            manual_compaction: false,
            gc_running: false,
            last_gc: Instant::now(),
            pending_deletes: Vec::new(),
            bg_loops: 0,
            bg_parked: 0,
            bg_looks: 0,
            idle_waiters: 0,
        }
    }
}

impl State {
    /// The first sequence number of an unjournaled write not yet flushed
    /// (`u64::MAX`: none): memtables flush in order, so the oldest one
    /// holding such a write has it.
    pub(super) fn unjournaled_floor(&self) -> u64 {
        self.imms
            .iter()
            .find_map(|i| i.unjournaled_from)
            .or(self.mem_unjournaled_from)
            .unwrap_or(u64::MAX)
    }

    pub(super) fn refresh_sv(&mut self) {
        // Every change of the immutables passes here: the block cache
        // gives way to them under the memory budget.
        let immutable: usize = self
            .imms
            .iter()
            .map(|i| i.mem.approximate_memory_bytes())
            .sum();
        self.block_cache.give_way_to(immutable as u64);
        self.sv = Arc::new(SuperVersion {
            mem: self.mem.clone(),
            imms: self.imms.iter().rev().map(|i| i.mem.clone()).collect(),
            current: self.current.clone(),
        });
    }

    pub(super) fn check_writable(&self) -> Result<()> {
        if let Some(p) = &self.poisoned {
            return Err(Error::Poisoned(p.clone()));
        }
        if self.closing {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// True while a table the current version no longer lists is still
    /// on disk because an older version holds it: a reader's (a cursor, a
    /// snapshot's view) or a job's (a flush holds the version it started
    /// on, for its shadow sample). A merge for space starting now would
    /// add its outputs to those bytes and free nothing until the holder
    /// lets go (`Core::pick_job`).
    pub(super) fn replaced_tables_held(&self) -> bool {
        let mut held = self
            .live_versions
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|v| !Arc::ptr_eq(v, &self.current))
            .peekable();
        if held.peek().is_none() {
            return false;
        }
        let current: HashSet<u64> = self.current.all_files().map(|(_, f)| f.number).collect();
        held.any(|v| v.all_files().any(|(_, f)| !current.contains(&f.number)))
    }

    pub(super) fn smallest_snapshot(&self, visible: u64) -> u64 {
        self.snapshots.keys().next().copied().unwrap_or(visible)
    }
}

/// What one GC step freed, released once no reader is older than its
/// relocations (`barrier`).
pub(super) struct PendingFree {
    pub(super) files: Vec<u64>,
    pub(super) release_to: Option<(u64, u64)>,
    pub(super) barrier: u64,
}

pub(crate) struct Core {
    // ---- configuration ----
    pub(super) dir: PathBuf,
    pub(super) opts: Options,
    /// Which values leave the index, and when: the one policy writes,
    /// flushes and merges apply.
    pub(super) separation: Separation,
    pub(super) table_opts: TableOptions,
    pub(super) fs: CountingFs,
    /// The totals the manifest held at open; this open's counters add to
    /// them (`Core::totals`).
    pub(super) totals_base: crate::stats::Totals,

    // ---- the key index, the value store and the versions ----
    pub(super) shape: Arc<dyn IndexShape>,
    pub(super) tables: Arc<TableCache>,
    /// The value store, when values are separated (or were).
    pub(super) values: Option<Arc<dyn ValueStore>>,
    pub(super) versions: VersionSet,
    /// Set by recovery, which creates it once the journals it read are
    /// replayed.
    pub(super) journal: OnceLock<Box<dyn Journal>>,
    /// LightKV ([`crate::Preset::LightKv`], or a database created under
    /// it): the write buffer stands for journal and memtable.
    pub(super) lightkv: bool,
    /// Its write buffer, set by recovery (`db/light.rs`).
    pub(super) light: OnceLock<Arc<super::light::Light>>,
    /// Memtable blocks passed on from flushed memtables to new ones.
    pub(super) block_pool: Arc<BlockPool>,
    /// The write buffer size and memory budget in force
    /// ([`Core::fit_memory_to_separated_values`] may change them).
    pub(super) sizes: crate::memory::Sizes,

    // ---- locks, in the order a thread may take them, never the reverse:
    // `file_deletion`, `gc_lock`, `flush_appends`, `merge_appends`, the value store's
    // accounting lock (the table layout's), `manifest`, `state`, then the
    // journal's and the value store's inner locks (`docs/design.md`,
    // "Threads and locks"). A lock taken out of order is only tried
    // (`try_lock`), never waited for. ----
    /// One GC at a time (background or `Db::gc`).
    pub(super) gc_lock: Mutex<()>,
    /// Held by a flush from before it appends values (separation at
    /// flush) until its tables are installed; see `Core::publish_barrier`.
    pub(super) flush_appends: Mutex<()>,
    /// Held (shared) by a merge that appends the values it separates to
    /// the value store's shared heads (the unified shape over the log
    /// layout) until its tables are installed; GC's barrier takes it
    /// exclusively, so that no record it judges was appended by a merge
    /// whose pointers it cannot see yet.
    pub(super) merge_appends: parking_lot::RwLock<()>,
    /// Held (shared) by whatever deletes or punches files (the obsolete
    /// file sweep, the release of what GC freed), and exclusively by a
    /// checkpoint from before it lists the files until it has linked or
    /// copied them (`docs/design.md`, "Checkpoints"). Deleters only try
    /// it: a sweep meanwhile leaves its files to the next one.
    pub(super) file_deletion: parking_lot::RwLock<()>,
    pub(super) manifest: Mutex<Option<ManifestState>>,
    pub(super) state: Mutex<State>,

    // ---- waiting ----
    /// Writers, stalled writers and waiters on background progress.
    pub(super) cv: Condvar,
    /// Background workers.
    pub(super) bg_cv: Condvar,

    // ---- sequence numbers and space control, read without locks ----
    pub(super) visible_seq: AtomicU64,
    /// Every version at or below this sequence is durable: in a synced
    /// journal, or in tables a flush installed (and everything an open
    /// recovered, which it flushes). GC of a layout that moves records
    /// without the write path judges them in this view, so that its step
    /// needs no journal sync (`Core::gc_view`).
    pub(super) durable_seq: AtomicU64,
    /// The first sequence number of an unjournaled write not yet flushed
    /// (`u64::MAX`: none): `durable_seq` stays below it
    /// (`Core::raise_durable`). Written under `state`.
    pub(super) unjournaled_floor: AtomicU64,
    /// The last measured space amplification, in thousandths (0: not
    /// measured yet); see `Core::measure_space`.
    pub(super) space_ratio_milli: AtomicU64,
    /// Delays the space limit's slowdown has asked of writes, owed until
    /// one write sleeps them (`Core::wait_for_space`).
    pub(super) space_delays: OwedDelays,
    /// A write since open held a value a flush separates (at or above the
    /// threshold of separation at flush): the space limit acts from then
    /// on even while the value store has no file yet
    /// (`Core::space_limit_acting`).
    pub(super) separable_written: AtomicBool,
    /// Entries flushes wrote without counting what they shadow
    /// (`JobStats::shadows_uncounted`) since a shadow compaction was last
    /// picked: under space pressure only these make one worth its I/O.
    pub(super) shadows_uncounted: AtomicU64,
    /// What the space limit compares (`db/space.rs`).
    pub(super) space_measure: crate::gc::space::SpaceMeasure,
    /// The value store's garbage share when space was last measured, in
    /// thousandths.
    pub(super) garbage_share_milli: AtomicU64,
    pub(super) shutting_down: AtomicBool,
    pub(super) counters: Counters,

    // ---- GC's threads ----
    /// Threads of a hash GC step (`HashOptions::gc_threads`), started on first
    /// use.
    pub(super) gc_pool: OnceLock<rayon::ThreadPool>,
    /// The thread overlapped GC steps are finished on (`Core::gc_pipeline`):
    /// one that lives on, not a thread per step.
    pub(super) gc_finisher: OnceLock<rayon::ThreadPool>,

    /// Runs once in the next flush, between syncing the values it appended
    /// and installing its tables (tests of what may run in between).
    #[cfg(test)]
    pub(super) flush_hook: Mutex<Option<FlushHook>>,
}

/// An empty write buffer of `bytes`, with a key filter for lookups
/// (`MemTable::with_key_filter`); with a value store whose GC commits
/// relocations through the write path, one that also keeps its keys'
/// digests for those commits (`MemTable::tracking_keys`).
pub(super) fn write_buffer_for(
    values: Option<&Arc<dyn ValueStore>>,
    bytes: usize,
    pool: &Arc<BlockPool>,
) -> Arc<dyn WriteBuffer> {
    // A layout judging in the durable view commits no relocation through
    // the write path (`GcProfile::judges_durable_only`).
    let relocates = values.is_some_and(|v| !v.gc_profile().judges_durable_only);
    let m = if relocates {
        MemTable::tracking_keys()
    } else {
        MemTable::new()
    };
    Arc::new(m.with_key_filter(bytes).with_block_pool(pool.clone()))
}

/// See `Core::flush_hook`.
#[cfg(test)]
pub(super) type FlushHook = Box<dyn FnOnce(&Core) + Send>;

impl Core {
    /// Under the memory limit the sizes follow (`Options::memory_limit_fit`),
    /// fits them again for GC's memory once the store holds separated
    /// values or a value a flush will separate was written (`crate::memory`;
    /// `docs/design.md`, "Memory", *Under a memory limit*): the cache
    /// shrinks at once, and memtables switch at the new write buffer size
    /// from now on. Once; at open, after a write of such a value
    /// ([`Core::fit_memory_if_separable_written`]) and after each flush.
    pub(super) fn fit_memory_to_separated_values(&self) {
        if !self.sizes.fit_pending() {
            return;
        }
        let separated = self.separable_written.load(Ordering::Relaxed)
            || self.values.as_ref().is_some_and(|v| v.total_bytes() > 0);
        if !separated {
            return;
        }
        if let Some(r) = self.sizes.fit_for_separated_values() {
            self.block_pool.set_cap_bytes(r.write_buffer_bytes);
            self.tables
                .block_cache()
                .set_sizes(r.cache_bytes, r.shared_bytes);
        }
    }

    /// The write path's check for [`Core::fit_memory_to_separated_values`]:
    /// two atomic loads until it is due.
    pub(super) fn fit_memory_if_separable_written(&self) {
        if self.sizes.fit_pending() && self.separable_written.load(Ordering::Relaxed) {
            self.fit_memory_to_separated_values();
        }
    }

    /// An empty write buffer for the next writes.
    pub(super) fn new_write_buffer(&self) -> Arc<dyn WriteBuffer> {
        write_buffer_for(
            self.values.as_ref(),
            self.sizes.write_buffer(),
            &self.block_pool,
        )
    }

    /// The journal (`Closed` before recovery created it).
    pub(super) fn journal(&self) -> Result<&dyn Journal> {
        self.journal.get().map(|j| j.as_ref()).ok_or(Error::Closed)
    }

    /// The value store's merge-time collection, when merges collect it
    /// (`ValueGc::merge_collection`).
    pub(super) fn merge_collection(&self) -> Option<&dyn MergeCollection> {
        self.values.as_deref()?.merge_collection()
    }

    pub(super) fn new_output_number(&self) -> u64 {
        let n = self.versions.new_file_number();
        self.state.lock().jobs.pending_outputs.insert(n);
        n
    }

    pub(super) fn read_sequence(&self, opts: &ReadOptions<'_>) -> u64 {
        match opts.snapshot {
            Some(s) => s.seq,
            None => self.visible_seq.load(Ordering::Acquire),
        }
    }

    /// Unregisters a snapshot or iterator reading at `seq`.
    pub(super) fn release_read(&self, seq: u64) {
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

    /// The totals now: those recorded at open, plus what this open's
    /// counters add (nothing on a read-only open, whose writes stay in
    /// memory).
    pub(super) fn totals(&self) -> crate::stats::Totals {
        let mut t = self.totals_base;
        if !self.opts.read_only {
            t.user_bytes_written = t
                .user_bytes_written
                .saturating_add(self.counters.user_bytes.load(Ordering::Relaxed));
            t.bytes_written = t
                .bytes_written
                .saturating_add(self.fs.counters().snapshot().total_written());
        }
        t
    }

    pub(super) fn stats(&self) -> Stats {
        let st = self.state.lock();
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let memtables = || std::iter::once(&st.mem).chain(st.imms.iter().map(|i| &i.mem));
        let scores = self.shape.scores(&st.current);
        let levels: Vec<LevelStats> = (0..st.current.levels.len())
            .map(|l| LevelStats {
                tables: st.current.num_files(l),
                bytes: st.current.level_bytes(l),
                score: scores[l],
            })
            .collect();
        let live_table_bytes = levels.iter().fold(0u64, |n, l| n.saturating_add(l.bytes));
        let mut stats = Stats {
            created_with: st.current.preset.as_deref().and_then(Preset::from_name),
            totals: self.totals(),
            io: self.fs.counters().snapshot(),
            writes: WriteStats {
                user_bytes_written: get(&c.user_bytes),
                user_ops_written: get(&c.user_ops),
                last_sequence: self.visible_seq.load(Ordering::Acquire),
                write_groups: get(&c.write_groups),
                journal_syncs: get(&c.journal_syncs),
                write_slowdowns: get(&c.slowdowns),
                space_delay_lump_micros: self.space_delays.lump().as_micros() as u64,
                write_stalls: get(&c.stalls),
                write_stall_micros: get(&c.stall_micros),
                write_stall_micros_by_reason: crate::stats::StallMicros {
                    memtables: get(&c.stall_memtable_micros),
                    level0: get(&c.stall_l0_micros),
                    value_store: get(&c.stall_store_micros),
                    space_limit: get(&c.stall_space_micros),
                },
            },
            flush: FlushStats {
                memtable_bytes: memtables()
                    .map(|m| m.approximate_memory_bytes() as u64)
                    .sum(),
                memtable_filter_bytes: memtables().map(|m| m.filter_bytes() as u64).sum(),
                memtable_pool_bytes: self.block_pool.pooled_bytes(),
                immutable_memtables: st.imms.len(),
                flushes: get(&c.flushes),
                flush_wait_micros: get(&c.flush_wait_micros),
                flush_micros: get(&c.flush_micros),
                discovery_flushes: get(&c.discovery_flushes),
                flush_shadow_lookups: get(&c.flush_shadow_lookups),
                flush_shadow_lookups_unused: get(&c.flush_shadow_lookups_unused),
                separation: crate::stats::SeparationStats {
                    threshold_bytes: self.separation.at_flush(),
                    separated: get(&c.flush_separated),
                    separated_bytes: get(&c.flush_separated_bytes),
                    kept_inline: get(&c.flush_kept_inline),
                    kept_inline_bytes: get(&c.flush_kept_inline_bytes),
                },
            },
            compaction: CompactionStats {
                compactions: get(&c.compactions),
                trivial_moves: get(&c.trivial_moves),
                ranges_installed: get(&c.compaction_ranges),
                twins_dropped: get(&c.compaction_twins),
                compaction_bytes_read: get(&c.compaction_read),
                compaction_bytes_written: get(&c.compaction_written),
                jobs_by_gc: get(&c.jobs_by_gc),
            },
            index: IndexStats {
                levels,
                live_table_bytes,
                block_cache_bytes: self.tables.block_cache().usage_bytes(),
                block_cache_capacity_bytes: self.tables.block_cache().capacity_bytes(),
                block_cache_size_bytes: self.tables.block_cache().size_bytes(),
                open_table_bytes: self.tables.open_table_bytes(),
                ..IndexStats::default()
            },
            space: SpaceStats {
                space_amplification: self.space_ratio(),
                live_data_bytes: self.space_measure.live_bytes(),
                inline_garbage_bytes: self.space_measure.inline_garbage_bytes(),
                layout_overhead_bytes: self.space_measure.layout_overhead_bytes(),
                live_share_of_writes_milli: self.space_measure.live_share_milli(),
                shadow_share_of_writes_milli: self.space_measure.learned_shadow_share_milli(),
                space_limit_note: st.space_note.clone(),
            },
            poisoned: st.poisoned.clone(),
            gc: GcTotals {
                runs: get(&c.gc_runs),
                bytes_read: get(&c.gc_bytes_read),
                bytes_written: get(&c.gc_bytes_written),
                relocations_applied: get(&c.relocations_applied),
                relocations_dropped: get(&c.relocations_dropped),
                overlapped: get(&c.gc_overlapped),
                commit_micros: get(&c.gc_commit_micros),
                commit_journal_micros: get(&c.gc_commit_journal_micros),
            },
            ..Stats::default()
        };
        self.shape.shape_stats(&st.current, &mut stats.index.shape);
        if let Some(light) = self.light.get() {
            stats.index.shape.lightkv_image_loaded = light.loaded_image();
            let (segments, free_segments) = light.segments();
            let (operations, leaves_per_partition) = light.describe();
            stats.index.shape.lightkv_buffer = Some(crate::stats::LightBufferStats {
                segments,
                free_segments,
                operations,
                leaves_per_partition,
                memory_bytes: light.memory_bytes(),
            });
        }
        if let Some(v) = &self.values {
            stats.values.files = v.file_count();
            stats.values.bytes = v.total_bytes();
            stats.values.appended_bytes = v.appended_bytes();
            let (live, garbage) = self.value_space(&st.current);
            stats.values.live_bytes = live;
            stats.values.garbage_bytes = garbage;
            v.layout_stats(&st.current, &mut stats.values);
        }
        let (f, i) = (&stats.flush, &stats.index);
        stats.memory.accounted_bytes = f.memtable_bytes
            + f.memtable_filter_bytes
            + f.memtable_pool_bytes
            + i.block_cache_bytes
            + i.open_table_bytes
            + i.shape.hash_index_bytes
            + i.shape
                .lightkv_buffer
                .as_ref()
                .map_or(0, |b| b.memory_bytes);
        let wb = self.sizes.write_buffer() as u64;
        stats.memory.write_buffer_bytes = wb;
        stats.memory.budget_bytes = self.tables.block_cache().shared_bytes().map(|s| s + wb);
        stats.memory.limit_bytes = self.opts.memory_limit_fit.map(|l| l.limit_bytes);
        stats.memory.fitted_for_separated_values = self.sizes.fitted_for_separated_values();
        if let Some((now, peak)) = crate::sysmem::process_resident_bytes() {
            stats.memory.process_resident_bytes = Some(now);
            stats.memory.process_peak_resident_bytes = Some(peak);
        }
        stats
    }
}
