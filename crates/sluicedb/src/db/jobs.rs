//! Background work: the worker loop, flushes, compactions, manifest
//! installs, the obsolete file sweep and manual compaction.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::MutexGuard;

use super::core::{Core, State};
use crate::compaction::{self, JobStats, MergeParams, OlderTables};
use crate::error::{Error, Result};
use crate::filename::{self, FileKind};
use crate::fs::IoClass;
use crate::gc::space::SpacePressure;
use crate::index::{CompactionPlan, WritePressure};
use crate::iter::InternalIterator;
use crate::policy::Separation;
use crate::stats::bump;
use crate::version::{FileMeta, Version, VersionEdit};

/// Value files a GC merge pick tries before giving up until the next pick
/// (each may need a table another merge holds).
const GC_MERGE_TRIES: usize = 4;

/// How often an idle pressure GC thread looks at the space ratio.
const PRESSURE_GC_POLL: Duration = Duration::from_millis(20);

pub(super) enum Job {
    Flush,
    Compaction(CompactionPlan),
    Gc,
}

impl Core {
    /// Writes a memtable's entries into one L0 table. With `below`, the
    /// version whose tables hold everything older than the memtable, the
    /// flush counts the versions its entries shadow there as garbage
    /// (`compaction::write_merged`).
    /// `ahead` makes another iterator over the input, for the thread that
    /// looks the versions it shadows up ahead of the merge (with `below`).
    pub(super) fn build_tables(
        &self,
        mut iter: Box<dyn InternalIterator>,
        ahead: Option<&(dyn Fn() -> Box<dyn InternalIterator> + Sync)>,
        smallest_snapshot: u64,
        below: Option<&Version>,
        boundaries: &[Vec<u8>],
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
            boundaries,
            new_file_number: &alloc,
            cancel: &self.shutting_down,
            separate: match (
                &self.values,
                Separation::from_options(&self.opts).at_flush(),
            ) {
                (Some(v), Some(t)) => Some((v.as_ref(), t)),
                _ => None,
            },
            older: below
                .filter(|_| self.values.is_some())
                .map(|version| OlderTables {
                    version,
                    shape: self.shape.as_ref(),
                    tables: &self.tables,
                    ahead,
                }),
            values: self.values.as_deref(),
            inputs_are_tables: false,
            relocate: &[],
        };
        let out = compaction::write_merged(iter.as_mut(), &params, stats)?;
        if !out.is_empty() {
            self.fs.sync_dir(&self.dir)?;
        }
        Ok(out)
    }

    /// Puts a job's garbage and pointer counts into its edit; the guard is
    /// held until the edit is installed (`ValueStore::settle_job`).
    pub(super) fn settle_job(
        &self,
        stats: &mut JobStats,
        edit: &mut VersionEdit,
    ) -> Result<Option<parking_lot::MutexGuard<'_, ()>>> {
        match &self.values {
            Some(v) => v.settle_job(&mut stats.values, &mut edit.values),
            None => Ok(None),
        }
    }

    pub(super) fn wait_idle(&self) -> Result<()> {
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

    pub(super) fn background_loop(self: Arc<Self>) {
        let mut st = self.state.lock();
        loop {
            if st.closing {
                return;
            }
            match self.pick_job(&mut st, true) {
                Some(job) => self.run_background_job(&mut st, job),
                // With periodic GC, wake up to check the interval.
                None => match self.opts.gc.interval_ms {
                    Some(ms) => {
                        self.bg_cv.wait_for(&mut st, Duration::from_millis(ms));
                    }
                    None => self.bg_cv.wait(&mut st),
                },
            }
        }
    }

    /// A thread of [`GcOptions::pressure_threads`](crate::GcOptions):
    /// runs GC steps while the space limit's pressure is on (the ratio at
    /// its low mark or above, seed 003 §3.5), and sleeps otherwise. The
    /// background threads leave GC under pressure to it.
    pub(super) fn pressure_gc_loop(self: Arc<Self>) {
        let mut st = self.state.lock();
        loop {
            if st.closing {
                return;
            }
            let due = st.poisoned.is_none()
                && !self.shutting_down.load(Ordering::SeqCst)
                && !st.gc_running
                && !st.manual_compaction
                && self.space_pressure() != SpacePressure::Below
                && self.gc_wanted(&st);
            if !due {
                // Writes raise the ratio without waking anyone: look again
                // now and then as well as on every job's end.
                self.bg_cv.wait_for(&mut st, PRESSURE_GC_POLL);
                continue;
            }
            st.gc_running = true;
            self.run_background_job(&mut st, Job::Gc);
        }
    }

    /// How many threads of [`GcOptions::pressure_threads`](crate::GcOptions)
    /// the database runs: none when read-only (no background work) or
    /// without a value store or a space limit to press.
    pub(super) fn pressure_gc_threads(&self) -> usize {
        if self.opts.read_only || self.values.is_none() || self.opts.gc.space_limit.is_none() {
            0
        } else {
            self.opts.gc.pressure_threads
        }
    }

    /// Runs a picked job without the state lock, then the sweep of
    /// obsolete files and the space measurement, and finishes it. The
    /// sweep runs before the job counts as finished, so waiters on idle
    /// background work see the files gone.
    fn run_background_job(&self, st: &mut MutexGuard<'_, State>, job: Job) {
        let r = MutexGuard::unlocked(st, || {
            let r = self.run_job(&job);
            self.delete_obsolete_files();
            self.measure_space();
            r
        });
        self.finish_job(st, job, r);
        self.cv.notify_all();
        self.bg_cv.notify_all();
    }

    /// The next background job; GC only with `gc` (a GC step helping
    /// out, `help_background`, must not start another).
    pub(super) fn pick_job(&self, st: &mut State, gc: bool) -> Option<Job> {
        if st.poisoned.is_some() {
            return None;
        }
        // A merge that moved records is settling its garbage: a flush
        // starting now could count garbage in a record it moved without
        // being seen (`Core::run_compaction`).
        if !st.imms.is_empty() && !st.flush_running && !st.relocation_settling {
            st.flush_running = true;
            let waited = st.imms.front().map(|i| i.since.elapsed());
            bump(
                &self.counters.flush_wait_micros,
                waited.map_or(0, |d| d.as_micros() as u64),
            );
            return Some(Job::Flush);
        }
        // Under the space limit's pressure GC is the pressure threads' own;
        // no step starts once the database is closing (`Handle::drop`).
        let gc = gc
            && !self.shutting_down.load(Ordering::SeqCst)
            && (self.pressure_gc_threads() == 0 || self.space_pressure() == SpacePressure::Below);
        if gc && !st.gc_running && !st.manual_compaction && self.gc_wanted(st) {
            st.gc_running = true;
            return Some(Job::Gc);
        }
        let max_compactions = self.opts.background_threads.saturating_sub(1).max(1);
        if st.manual_compaction || st.compactions_running >= max_compactions {
            return None;
        }
        let mut plan = self
            .shape
            .pick_compaction(&st.current, &st.busy)
            .or_else(|| self.pick_scan_merge(st))
            .or_else(|| self.pick_gc_merge(st))
            .or_else(|| {
                // Under space pressure, shadowed pointers keep their values
                // counted live until a compaction drops them: those the
                // flushes could not count. A flush counts the rest itself,
                // and merging L0 into L1 after every flush under pressure
                // only to drop versions already counted doubled the key
                // tables' compaction writes (2.4 GB against 1.2 GB on the
                // Mixed workload at 2 GiB, for 6 GB of updates).
                let uncounted = self.shadows_uncounted.load(Ordering::Relaxed);
                (self.space_pressure() != SpacePressure::Below
                    && (uncounted > 0 || self.shape.shadow_compaction_does_more_than_count()))
                .then(|| self.shape.pick_shadow_compaction(&st.current, &st.busy))
                .flatten()
                .inspect(|_| self.shadows_uncounted.store(0, Ordering::Relaxed))
            })?;
        if plan.relocate.is_empty() {
            self.add_relocations(st, &mut plan, None);
        }
        if let Some(n) = plan.output_number {
            st.pending_outputs.insert(n);
        }
        for f in plan.input_files() {
            st.busy.insert(f.number);
        }
        st.compactions_running += 1;
        Some(Job::Compaction(plan))
    }

    /// The shape's scan merge (seed 004 §III-F), while no flush runs, with
    /// its output numbered now: newer than its inputs, older than every
    /// flush to come, as level 0's order by number requires.
    fn pick_scan_merge(&self, st: &State) -> Option<CompactionPlan> {
        if st.flush_running {
            return None;
        }
        let mut plan = self.shape.pick_scan_merge(&st.current, &st.busy)?;
        plan.output_number = Some(self.versions.new_file_number());
        Some(plan)
    }

    /// When merges collect the value store (the unified shape, seed 004
    /// §III-C): a merge of the range of the value file with the most
    /// garbage, among those whose garbage ratio calls for GC, that moves
    /// its records (and those of any other such file it meets). The range
    /// of the whole file, so that the merge holds every pointer into it.
    fn pick_gc_merge(&self, st: &State) -> Option<CompactionPlan> {
        let store =
            (self.values.as_ref()).filter(|s| self.opts.gc.background && s.collects_in_merges())?;
        let pressure = self.gc_pressure(st);
        for (target, lo, hi) in store
            .merge_gc_targets(&st.current, pressure)
            .into_iter()
            .take(GC_MERGE_TRIES)
        {
            if let Some(mut plan) = self
                .shape
                .pick_gc_compaction(&st.current, &st.busy, &lo, &hi)
            {
                self.add_relocations(st, &mut plan, Some(target));
                // The target must be moved, or the same merge would be
                // picked again and again: a job is settling garbage (a
                // later pick will do).
                if plan.relocate.contains(&target) {
                    return Some(plan);
                }
                store.thaw(&plan.relocate);
                return None;
            }
        }
        None
    }

    /// True when merges collect under the space limit's pressure (a lower
    /// garbage ratio, a larger reclaim target): the ratio is at the low
    /// ratio or above and GC can reclaim space there
    /// (`Core::values_reclaimable`: the store holds at least 1/16 garbage),
    /// as background GC requires of the other layouts (`Core::gc_wanted`):
    /// a store of little garbage is over the low ratio for other reasons
    /// (a merge's outputs before it installs, a memtable's journal), and
    /// collecting it would copy live data for little space. (Not measured
    /// apart: the 5 GiB runs that moved 5 GB in one phase did so with and
    /// without it; that was the GC ratio, `DEFAULT_UNIKV_TABLE_GC_RATIO`.)
    fn gc_pressure(&self, st: &State) -> bool {
        self.space_pressure() != SpacePressure::Below && self.values_reclaimable(&st.current)
    }

    /// Chooses the value files a merge into the sorted run moves the
    /// records of (merges collecting the value store): those its key range
    /// meets with enough garbage, the most garbage first, until they hold
    /// as much garbage as the merge brings in new data from the unsorted
    /// store (twice that under space pressure), so GC keeps pace with
    /// the writes that make garbage without copying more than it must, and
    /// at most an unsorted limit of live bytes.
    ///
    /// Measured (2 GiB, 1 KiB values, page cache capped at 341 MiB,
    /// 50:50 Zipf reads and updates): with only the live-bytes bound, a
    /// merge under pressure moved tables down to 1/16 garbage, and GC
    /// wrote 4.3 GB in a phase of 1 GiB of updates (write amplification
    /// 5.8).
    fn add_relocations(&self, st: &State, plan: &mut CompactionPlan, target: Option<u64>) {
        let Some(store) = self.values.as_ref().filter(|s| s.collects_in_merges()) else {
            return;
        };
        if !plan.separate_values {
            return;
        }
        let Some((lo, hi)) = plan.key_range() else {
            return;
        };
        let pressure = self.gc_pressure(st);
        let incoming: u64 = plan
            .inputs
            .iter()
            .filter(|i| i.level == self.shape.flush_level())
            .flat_map(|i| &i.files)
            .map(|f| f.file_size)
            .sum();
        let reclaim = if pressure { 2 * incoming } else { incoming };
        plan.relocate = store.freeze_merge_victims(
            &st.current,
            lo,
            hi,
            target,
            pressure,
            reclaim.max(1),
            self.opts.index.unified.unsorted_limit_bytes,
        );
    }

    pub(super) fn run_job(&self, job: &Job) -> Result<()> {
        match job {
            Job::Flush => {
                let t = std::time::Instant::now();
                let r = self.run_flush();
                bump(&self.counters.flush_micros, t.elapsed().as_micros() as u64);
                r
            }
            Job::Compaction(plan) => self.run_compaction(plan),
            Job::Gc => {
                let overlap = self.opts.gc.overlap_steps
                    && self.values.as_ref().is_some_and(|v| v.gc_overlaps_steps());
                if overlap && self.space_pressure() != SpacePressure::Below {
                    self.gc_pipeline()
                } else {
                    self.gc_once().map(|_| ())
                }
            }
        }
    }

    pub(super) fn finish_job(&self, st: &mut MutexGuard<'_, State>, job: Job, r: Result<()>) {
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

    /// Runs the work writers wait for on the calling thread, if no
    /// background thread took it: a pending flush, or a compaction at the
    /// L0 stop trigger. For a GC step waiting in the writer queue (publish
    /// barrier or relocations) behind a writer that waits for either: with
    /// one background thread, or every one busy, that work would otherwise
    /// wait for the GC thread, which waits for the writer. Only that work,
    /// so that GC's commit does not wait out a compaction nobody waits for.
    /// Returns true if it ran a job.
    pub(super) fn help_background(&self, st: &mut MutexGuard<'_, State>) -> bool {
        let flush_due = !st.imms.is_empty() && !st.flush_running;
        let stopped = self.shape.write_pressure(&st.current) == WritePressure::Stop;
        if st.closing || !(flush_due || stopped) {
            return false;
        }
        let Some(job) = self.pick_job(st, false) else {
            return false;
        };
        let r = MutexGuard::unlocked(st, || {
            let r = self.run_job(&job);
            self.delete_obsolete_files();
            r
        });
        bump(&self.counters.jobs_by_gc, 1);
        self.finish_job(st, job, r);
        self.cv.notify_all();
        self.bg_cv.notify_all();
        true
    }

    pub(super) fn run_flush(&self) -> Result<()> {
        let (imm, next_mark, smallest_snapshot, below) = {
            let st = self.state.lock();
            let front = st
                .imms
                .front()
                .expect("flush picked with an immutable memtable");
            let next = st.imms.get(1).map_or(st.mem_mark, |i| i.mark);
            let visible = self.visible_seq.load(Ordering::Acquire);
            (
                front.mem.clone(),
                next,
                st.smallest_snapshot(visible),
                st.current.clone(),
            )
        };
        // Held until the tables are installed: GC waits for it after
        // freezing files, so that the pointers to values this flush
        // appends are in the index before GC judges them (except where
        // GC judges such records by their version instead,
        // `ValueStore::gc_waits_for_flushes`).
        let _appending = self.flush_appends.lock();
        // Its lookups of the versions it shadows go in key order (those
        // the merge makes itself, when the thread looking ahead is behind).
        let _sorted = crate::table::reader::SortedProbes::start();
        let mut stats = JobStats::default();
        // Flushes run one at a time, oldest memtable first, so `below` holds
        // every version older than this memtable's: a compaction running
        // meanwhile drops none of the newest ones (only shadowed versions
        // and bottom tombstones, which point at nothing).
        let outputs = self.build_tables(
            imm.clone().iter(),
            Some(&|| imm.clone().iter()),
            smallest_snapshot,
            Some(&below),
            // One table per range partition (seed 004 §III-D).
            &below.boundaries,
            &mut stats,
        )?;
        // Tables are not replayed like the journal, so their pointers are
        // never re-checked: the values they point at (appended at write
        // time or by this flush) must be durable before the flush makes the
        // journal obsolete.
        if let Some(v) = &self.values {
            v.sync()?;
        }
        #[cfg(test)]
        if let Some(hook) = self.flush_hook.lock().take() {
            hook(self);
        }
        self.note_flushed_shadows(imm.shadow_candidates(), stats.values.garbage.values().sum());
        self.shadows_uncounted
            .fetch_add(stats.shadows_uncounted, Ordering::Relaxed);
        bump(&self.counters.flush_shadow_lookups, stats.shadow_lookups);
        bump(
            &self.counters.flush_shadow_lookups_unused,
            stats.shadow_lookups_unused,
        );
        let mut edit = VersionEdit {
            values: std::mem::take(&mut stats.value_edit),
            ..VersionEdit::default()
        };
        // Held until the edit is installed (`ValueStore::settle_job`).
        let _settled = self.settle_job(&mut stats, &mut edit)?;
        // Replay now starts where the next memtable's records do.
        let log_number = self.journal()?.replay_from(next_mark, &mut edit);
        let numbers: Vec<u64> = outputs.iter().map(|f| f.number).collect();
        for f in outputs {
            // Indexed before it is installed, so lookups find it through
            // the shape's index at once (the unified shape's hash index).
            self.shape
                .index_flushed(&below, &f, imm.clone().iter().as_mut())?;
            edit.add_file(self.shape.flush_level(), f);
        }
        self.install(edit, log_number, &numbers, |st| {
            let i = st.imms.pop_front().expect("flushed memtable");
            debug_assert!(Arc::ptr_eq(&i.mem, &imm));
            st.memtables_flushed += 1;
            // Its versions are in synced tables, listed by a synced edit.
            self.durable_seq.fetch_max(i.last_seq, Ordering::AcqRel);
        })?;
        bump(&self.counters.flushes, 1);
        if self.shape.checkpoint_due() {
            self.write_checkpoint()?;
        }
        Ok(())
    }

    /// Writes the shape's checkpoint of its in-memory index (the unified
    /// shape's hash indexes, seed 004 §III-G) to a new file, syncs it, and
    /// records it in the manifest; the previous one becomes obsolete. A
    /// crash before the record leaves an unlisted file, swept at open.
    pub(super) fn write_checkpoint(&self) -> Result<()> {
        let Some(bytes) = self.shape.checkpoint() else {
            return Ok(());
        };
        let number = self.new_output_number();
        let mut file = self
            .fs
            .create(&filename::hash_index(&self.dir, number), IoClass::Flush)?;
        file.append(&bytes)?;
        file.sync()?;
        drop(file);
        self.fs.sync_dir(&self.dir)?;
        let edit = VersionEdit {
            hash_index_checkpoint: Some(number),
            ..VersionEdit::default()
        };
        self.install(edit, None, &[number], |_| {})
    }

    pub(super) fn run_compaction(&self, plan: &CompactionPlan) -> Result<()> {
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
        // A scan merge's output was numbered when it was picked.
        let numbered = std::cell::Cell::new(plan.output_number);
        let alloc = || numbered.take().unwrap_or_else(|| self.new_output_number());
        // Outputs end at partition boundaries, and at the one a split adds.
        let mut boundaries = (*version.boundaries).clone();
        if let Some(b) = &plan.new_boundary {
            if let Err(i) = boundaries.binary_search(b) {
                boundaries.insert(i, b.clone());
            }
        }
        let params = MergeParams {
            fs: &self.fs,
            dir: &self.dir,
            class: IoClass::Compaction,
            table: self.table_opts,
            smallest_snapshot,
            target_file_size_bytes: plan.target_file_size_bytes,
            bottom: Some((&version, self.shape.as_ref(), plan.output_level)),
            grandparents: &plan.overlap_limit,
            max_grandparent_overlap_bytes: plan.max_overlap_bytes,
            boundaries: &boundaries,
            new_file_number: &alloc,
            cancel: &self.shutting_down,
            // The unified shape's merge separates the values it carries
            // (partial KV separation, seed 004 §III-C).
            separate: match (
                &self.values,
                Separation::from_options(&self.opts)
                    .at_merge()
                    .filter(|_| plan.separate_values),
            ) {
                (Some(v), Some(t)) => Some((v.as_ref(), t)),
                _ => None,
            },
            older: None,
            values: self.values.as_deref(),
            inputs_are_tables: true,
            relocate: &plan.relocate,
        };
        let separates = params.separate.is_some();
        // Appends to shared heads are judged by GC's barrier only once
        // this merge is installed (`Core::merge_appends`).
        let _appending = match &self.values {
            Some(v) if separates && v.gc_needs_barrier() => Some(self.merge_appends.read()),
            _ => None,
        };
        // Victims thaw whatever happens, once the merge is over.
        let _thaw = Thaw(self, &plan.relocate);
        self.shape.merge_started(plan);
        let mut stats = JobStats::default();
        let mut edit = compaction::run_compaction(plan, &self.tables, params, &mut stats)?;
        edit.boundaries.extend(plan.new_boundary.clone());
        if plan.output_level == self.shape.flush_level() {
            // A scan merge's output stays unsorted: indexed before it is
            // installed, as a flush's table is.
            for (_, f) in &edit.added {
                let t = self
                    .tables
                    .get(f.number, f.file_size, IoClass::Compaction)?;
                let mut it = t.iter(IoClass::Compaction, false);
                self.shape.index_flushed(&version, f, &mut it)?;
            }
        }
        if separates {
            // The outputs point at values this merge appended: durable
            // before the edit drops the tables that held them inline.
            if let Some(v) = &self.values {
                v.sync()?;
            }
            edit.values = std::mem::take(&mut stats.value_edit);
        }
        let _settling = (!plan.relocate.is_empty()).then(|| self.hold_flushes());
        let _settled = match (&self.values, plan.relocate.is_empty()) {
            (Some(store), false) => {
                let outputs: Vec<Arc<FileMeta>> =
                    edit.added.iter().map(|(_, f)| f.clone()).collect();
                store.settle_relocating_job(
                    &plan.relocate,
                    &mut stats.values,
                    &mut edit.values,
                    &mut |d| self.copy_holder(&outputs, d),
                )?
            }
            _ => self.settle_job(&mut stats, &mut edit)?,
        };
        let mut numbers: Vec<u64> = edit.added.iter().map(|(_, f)| f.number).collect();
        if !numbers.is_empty() {
            self.fs.sync_dir(&self.dir)?;
        }
        // Also the number taken at pick when every entry was dropped.
        numbers.extend(plan.output_number);
        self.install(edit, None, &numbers, |_| {})?;
        // Thawed before the accounting lock goes: a job settling later
        // must count in a victim at once, not defer to this merge.
        drop(_thaw);
        bump(&self.counters.compactions, 1);
        bump(&self.counters.compaction_read, stats.bytes_read);
        bump(&self.counters.compaction_written, stats.bytes_written);
        if stats.relocated_records > 0 {
            // The merge was a GC step too (seed 004 §III-C): it counts as
            // one, its copies as applied relocations.
            bump(&self.counters.gc_runs, 1);
            bump(&self.counters.gc_bytes_read, stats.relocated_bytes);
            bump(&self.counters.gc_bytes_written, stats.relocated_bytes);
            bump(&self.counters.relocations_applied, stats.relocated_records);
        }
        Ok(())
    }

    /// Keeps flushes from starting until the returned guard goes, after
    /// waiting for the one under way (a merge that moved records settles
    /// its garbage then: every flush that counted garbage in a record it
    /// moved while its victims were frozen has deferred that count to it,
    /// and none counts in one of them from the version before the merge
    /// afterwards; `docs/design.md`, "Garbage collection").
    fn hold_flushes(&self) -> FlushHold<'_> {
        let mut st = self.state.lock();
        st.relocation_settling = true;
        while st.flush_running && st.poisoned.is_none() && !st.closing {
            self.cv.wait_for(&mut st, Duration::from_millis(100));
        }
        FlushHold(self)
    }

    /// The output of a relocating merge that holds the copy of the record
    /// `d` names (same key, length and checksum), if the merge moved it.
    fn copy_holder(
        &self,
        outputs: &[Arc<FileMeta>],
        d: &crate::value::Dropped,
    ) -> Result<Option<u64>> {
        // The outputs are a sorted run, in key order.
        let Some(f) = crate::index::sorted_run_table(outputs, &d.key) else {
            return Ok(None);
        };
        let t = self
            .tables
            .get(f.number, f.file_size, IoClass::Compaction)?;
        let mut it = t.iter(IoClass::Compaction, false);
        it.seek(&crate::key::encode(
            &d.key,
            crate::key::MAX_SEQUENCE,
            crate::key::KIND_SEEK,
        ));
        while it.valid() && crate::key::user_key(it.key()) == d.key.as_slice() {
            if crate::key::kind_byte(it.key()) == crate::key::Kind::ValuePointer as u8 {
                if let Some(p) = crate::value::pointer::ValuePointer::decode(it.value()) {
                    if p.file != d.ptr.file
                        && p.record_len == d.ptr.record_len
                        && p.record_crc == d.ptr.record_crc
                    {
                        return Ok(Some(p.file));
                    }
                }
            }
            it.next();
        }
        it.status()?;
        Ok(None)
    }

    /// Makes `edit` durable in the manifest and installs the version it
    /// produces; `then` runs under the state lock with the new version in
    /// place. A manifest failure poisons the database.
    pub(super) fn install(
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
            // After a failed manifest write the manifest may hold that
            // edit or not: nothing more goes in (invariant I7).
            if let Some(p) = &st.poisoned {
                return Err(Error::Poisoned(p.clone()));
            }
            (st.current.clone(), st.log_number, st.last_sequence)
        };
        let log_number = log_number.unwrap_or(old_log);
        if let Some(store) = &self.values {
            store.before_install(&base, &mut edit);
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
        self.shape.installed(&version);
        let old = std::mem::replace(&mut st.current, version);
        st.live_versions.retain(|w| w.strong_count() > 0);
        st.live_versions.push(Arc::downgrade(&old));
        st.log_number = log_number;
        for n in outputs {
            st.pending_outputs.remove(n);
        }
        then(&mut st);
        st.refresh_sv();
        // Value files the edit dropped as unreferenced go once no
        // registered reader is older than it.
        if let Some(store) = &self.values {
            let gone = store.take_unreferenced();
            if !gone.is_empty() {
                let visible = self.visible_seq.load(Ordering::Acquire);
                st.pending_deletes.push(super::core::PendingFree {
                    files: gone,
                    release_to: None,
                    barrier: visible + 1,
                });
            }
        }
        Ok(())
    }

    /// Expensive whole-version check (feature `invariants`): every table
    /// reads back in order with the entry count and key range the manifest
    /// records. A table that cannot be read (an I/O error, which the fault
    /// tests inject, or damage, which the corruption tests do) is an
    /// operating error that the engine's own reads report; only a table that
    /// reads back and disagrees with the manifest is a bug. Its reads count
    /// as background work's, as the version's install does.
    #[cfg(feature = "invariants")]
    pub(super) fn check_version(&self, v: &crate::version::Version) {
        for (level, f) in v.all_files() {
            let read = self
                .tables
                .get(f.number, f.file_size, IoClass::Compaction)
                .and_then(|t| t.verify_as(IoClass::Compaction));
            let Ok(n) = read else {
                continue;
            };
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
    pub(super) fn delete_obsolete_files(&self) {
        self.delete_collected_files();
        let ms = self.manifest.lock();
        // A poisoned database may have failed a manifest roll after CURRENT
        // already named the new manifest (its rename done, the directory
        // sync failed), while memory still holds the old one: which files
        // are obsolete is unknown, so none is deleted (the fault test saw
        // the new manifest deleted and the next open refused). Checked
        // under the manifest lock, which a failed write holds until it has
        // poisoned the database.
        if self.state.lock().poisoned.is_some() {
            return;
        }
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
                live.extend(v.hash_index_checkpoint);
            }
            (live, st.log_number)
        };
        // Journals of flushed memtables need no sync, and none may reach a
        // journal being deleted (`state` is not held). This sweep follows
        // every flush.
        if let Some(j) = self.journal.get() {
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
                Some(FileKind::HashIndex(n)) => !live.contains(&n),
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

    pub(super) fn compact_range(&self, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
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

    pub(super) fn manual_compactions(
        &self,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Result<()> {
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
}

/// Thaws a merge's relocation victims when it ends, installed or not.
struct Thaw<'a>(&'a Core, &'a [u64]);

impl Drop for Thaw<'_> {
    fn drop(&mut self) {
        if let (Some(store), false) = (&self.0.values, self.1.is_empty()) {
            store.thaw(self.1);
        }
    }
}

/// Flushes may start again when it goes (`Core::hold_flushes`).
struct FlushHold<'a>(&'a Core);

impl Drop for FlushHold<'_> {
    fn drop(&mut self) {
        self.0.state.lock().relocation_settling = false;
        self.0.bg_cv.notify_all();
    }
}
