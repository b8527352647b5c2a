//! The compaction job (and merges that relocate values or collect them),
//! and manual compaction of a key range.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::compaction::{self, JobStats, MergeParams};
use crate::db::core::Core;
use crate::error::Result;
use crate::fs::IoClass;
use crate::index::CompactionPlan;
use crate::iter::InternalIterator;
use crate::stats::bump;
use crate::version::FileMeta;

impl Core {
    pub(in crate::db) fn run_compaction(&self, plan: &CompactionPlan) -> Result<()> {
        if plan.trivial_move {
            self.install(compaction::trivial_move_edit(plan), None, &[], |_| {})?;
            bump(&self.counters.trivial_moves, 1);
            bump(&self.counters.compactions, 1);
            return Ok(());
        }
        let (version, mut smallest_snapshot) = {
            let st = self.state.lock();
            let visible = self.visible_seq.load(Ordering::Acquire);
            (st.current.clone(), st.smallest_snapshot(visible))
        };
        // LightKV: recovery indexes again the records it finds in the
        // buffer above `W`, flushed or not, so the merge keeps what a read
        // at `W` needs, as for a snapshot there: a tombstone above `W`
        // stays while the older put it hides may come back from the buffer.
        if let Some(light) = self.light.get() {
            smallest_snapshot = smallest_snapshot.min(light.watermark());
        }
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
            // (partial KV separation, UniKV, ICDE '20, §III-C).
            separate: match (
                &self.values,
                self.separation.at_merge().filter(|_| plan.separate_values),
            ) {
                (Some(v), Some(t)) => Some((v.as_ref(), t)),
                _ => None,
            },
            older: None,
            values: self.values.as_deref(),
            inputs_are_tables: true,
            relocate: &plan.relocate,
            by_range: None,
        };
        // Outputs installed a key range at a time, numbered here to be
        // marked busy until the job ends (`RangeOutputs`).
        let installed = RangeOutputs {
            core: self,
            numbers: std::cell::RefCell::new(Vec::new()),
            inline_bytes: std::cell::Cell::new(0),
        };
        let install_range = |outputs: Vec<FileMeta>, replaced: &[Arc<FileMeta>]| {
            self.install_range(plan.output_level, outputs, replaced, &installed)
        };
        let below = self.by_range_below(plan);
        let by_range = below.map(|below| compaction::ByRange {
            below,
            min_bytes: plan.target_file_size_bytes / 2,
            install: &install_range,
        });
        let params = MergeParams {
            by_range: by_range.as_ref(),
            ..params
        };
        let separates = params.separate.is_some();
        // Appends to shared heads are judged by GC's barrier only once
        // this merge is installed (`Core::merge_appends`).
        let _appending = match &self.values {
            Some(v) if separates && v.gc_profile().needs_barrier => Some(self.merge_appends.read()),
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
        let mut numbers: Vec<u64> = edit.added.iter().map(|(_, f)| f.number).collect();
        // Before the settle: nothing that can fail stands between it and
        // the install, which would leave the counts it handed to a GC step
        // to be taken again when the job runs again (`docs/design.md`,
        // "Judged by the counts").
        if !numbers.is_empty() {
            self.fs.sync_dir(&self.dir)?;
        }
        let _settling = (!plan.relocate.is_empty()).then(|| self.hold_flushes());
        let _settled = match (self.merge_collection(), plan.relocate.is_empty()) {
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
        // Also the number taken at pick when every entry was dropped.
        numbers.extend(plan.output_number);
        let added = installed.inline_bytes.get()
            + edit
                .added
                .iter()
                .map(|(_, f)| f.inline_bytes())
                .sum::<u64>();
        let removed: u64 = plan.input_files().map(|f| f.inline_bytes()).sum();
        let above = self.inline_bytes_above_last_level();
        // Under the state lock: a sample of the version before or after
        // sees it once (`Core::sample_shadowed_after_open`).
        self.install(edit, None, &numbers, |_| {
            if let Some(above) = above {
                self.note_inline_tables(added, removed, above, false);
            }
        })?;
        // Noted whole: a sample due after the open may go now, unless
        // another merge is part way through its ranges.
        self.sample_shadowed_after_open(1);
        // Thawed before the accounting lock goes: a job settling later
        // must count in a victim at once, not defer to this merge.
        drop(_thaw);
        bump(&self.counters.compactions, 1);
        bump(&self.counters.compaction_ranges, stats.ranges_installed);
        bump(&self.counters.compaction_twins, stats.twins_dropped);
        bump(&self.counters.compaction_read, stats.bytes_read);
        bump(&self.counters.compaction_written, stats.bytes_written);
        if stats.relocated_records > 0 {
            // The merge was a GC step too (UniKV, ICDE '20, §III-C): it counts as
            // one, its copies as applied relocations.
            bump(&self.counters.gc_runs, 1);
            bump(&self.counters.gc_bytes_read, stats.relocated_bytes);
            bump(&self.counters.gc_bytes_written, stats.relocated_bytes);
            bump(&self.counters.relocations_applied, stats.relocated_records);
        }
        Ok(())
    }

    /// The output level's inputs of a compaction that may install its
    /// outputs a key range at a time (`docs/design.md`, "Compactions
    /// installed a key range at a time"): a leveled merge of one level
    /// into the next that moves, separates and relocates nothing, over
    /// tables known to hold no pointer entries (whose garbage and pointer
    /// counts settle once, at the job's install).
    fn by_range_below<'p>(&self, plan: &'p CompactionPlan) -> Option<&'p [Arc<FileMeta>]> {
        let [upper, below] = plan.inputs.as_slice() else {
            return None;
        };
        let plain = self.shape.installs_by_range()
            && upper.level + 1 == plan.output_level
            && below.level == plan.output_level
            && below.sorted_run
            && !below.files.is_empty()
            && !plan.separate_values
            && plan.relocate.is_empty()
            && plan.new_boundary.is_none()
            && plan.output_number.is_none()
            && plan
                .input_files()
                .all(|f| f.payload.as_ref().is_some_and(|p| p.pointers == 0));
        plain.then_some(below.files.as_slice())
    }

    /// Installs a compaction's finished outputs in place of the output
    /// level's inputs they replace, and marks them busy until the job
    /// ends, so that no other compaction takes them meanwhile.
    fn install_range(
        &self,
        level: usize,
        outputs: Vec<FileMeta>,
        replaced: &[Arc<FileMeta>],
        installed: &RangeOutputs<'_>,
    ) -> Result<()> {
        let mut edit = crate::version::VersionEdit::default();
        for f in replaced {
            edit.delete_file(level, f.number);
        }
        let numbers: Vec<u64> = outputs.iter().map(|f| f.number).collect();
        let inline: u64 = outputs.iter().map(FileMeta::inline_bytes).sum();
        for f in outputs {
            edit.add_file(level, f);
        }
        if !numbers.is_empty() {
            self.fs.sync_dir(&self.dir)?;
        }
        let _settled = self.settle_job(&mut JobStats::default(), &mut edit)?;
        self.install(edit, None, &numbers, |st| {
            st.jobs.busy.extend(numbers.iter().copied());
        })?;
        installed.numbers.borrow_mut().extend(numbers);
        (installed.inline_bytes).set(installed.inline_bytes.get() + inline);
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
        st.jobs.relocation_settling = true;
        while st.jobs.flush_running && st.poisoned.is_none() && !st.closing {
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
                if let Some(p) = crate::pointer::ValuePointer::decode(it.value()) {
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

    pub(in crate::db) fn compact_range(
        &self,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Result<()> {
        self.flush()?;
        {
            let mut st = self.state.lock();
            while st.jobs.manual_compaction || st.jobs.compactions_running > 0 {
                st.check_writable()?;
                self.cv.wait_for(&mut st, Duration::from_millis(100));
            }
            st.jobs.manual_compaction = true;
        }
        let r = self.manual_compactions(begin, end);
        self.state.lock().jobs.manual_compaction = false;
        self.bg_cv.notify_all();
        r
    }

    pub(in crate::db) fn manual_compactions(
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
                        st.jobs.busy.insert(f.number);
                    }
                }
                plan
            };
            let Some(plan) = plan else { continue };
            let r = self.run_compaction(&plan);
            let mut st = self.state.lock();
            for f in plan.input_files() {
                st.jobs.busy.remove(&f.number);
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
        if let (Some(store), false) = (self.0.merge_collection(), self.1.is_empty()) {
            store.thaw(self.1);
        }
    }
}

/// Flushes may start again when it goes (`Core::hold_flushes`).
struct FlushHold<'a>(&'a Core);

impl Drop for FlushHold<'_> {
    fn drop(&mut self) {
        self.0.state.lock().jobs.relocation_settling = false;
        self.0.bg_cv.notify_all();
    }
}

/// Outputs a compaction installed a key range at a time: busy until the
/// job ends, installed or not; and their inline bytes.
struct RangeOutputs<'a> {
    core: &'a Core,
    numbers: std::cell::RefCell<Vec<u64>>,
    inline_bytes: std::cell::Cell<u64>,
}

impl Drop for RangeOutputs<'_> {
    fn drop(&mut self) {
        let numbers = self.numbers.take();
        if numbers.is_empty() {
            return;
        }
        let mut st = self.core.state.lock();
        for n in numbers {
            st.jobs.busy.remove(&n);
        }
        drop(st);
        self.core.bg_cv.notify_all();
    }
}
