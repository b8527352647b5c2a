//! The leveled shape: LevelDB's L0..Ln (WiscKey, FAST '16, §2.2, HashKV, USENIX ATC '18, §2.1).
//!
//! L0 holds flushed tables whose ranges may overlap, searched newest first;
//! each deeper level is one sorted run of non-overlapping tables and is
//! `level_size_ratio` times larger than the one above. Compaction merges an
//! L0 batch (all of L0) or one Ln table with the overlapping tables of the
//! next level. Among Ln tables it picks the one whose overlap with the next
//! level is smallest relative to its size (RocksDB's min-overlapping-ratio),
//! which writes less than LevelDB's round-robin pointer.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::{
    check_sorted_run, probe_in_order, sorted_run_table, CompactionInput, CompactionPlan,
    IndexShape, WritePressure,
};
use crate::error::Result;
use crate::fs::IoClass;
use crate::key;
use crate::memtable::Lookup;
use crate::table::TableCache;
use crate::version::{FileMeta, LevelRules, Version};

/// Parameters of the leveled shape (from `Options`).
#[derive(Debug)]
pub(crate) struct Leveled {
    pub(crate) num_levels: usize,
    pub(crate) l0_compaction_trigger: usize,
    /// L0 tables at which writes slow down, and stop.
    pub(crate) l0_slowdown_trigger: usize,
    pub(crate) l0_stop_trigger: usize,
    pub(crate) base_level_size_bytes: u64,
    pub(crate) level_size_ratio: u64,
    pub(crate) target_file_size_bytes: u64,
    /// L0 tables from which L0 is merged once user reads have met them
    /// enough ([`L0Reads`]); at or above `l0_compaction_trigger`, never.
    pub(crate) l0_read_trigger: usize,
    pub(crate) l0_reads: L0Reads,
}

/// Bytes of L0 a read's extra table pays for: a merge of L0 becomes due
/// once the extra tables user reads met, one per point read's table and
/// [`SCAN_READ_WEIGHT`] per scan's, times this, reach L0's bytes.
/// LevelDB's seek compaction allows a table one read per 16 KiB of its
/// size (`db/version_set.cc`: a seek of 10 ms costs what compacting 40 KB
/// costs on a disk).
///
/// A table is extra past `l0_read_trigger - 1` (what a shape merging at the
/// read trigger would hold). With five L0 tables of 60 MB (two extra),
/// about 9,000 point reads make the merge due: a tenth of a second of
/// a workload of half reads, while a workload of writes alone never pays
/// and one of a hundredth reads fills L0 to its write trigger first. By
/// CPU alone the merge would wait longer (an extra table costs a point
/// read about 0.1 µs, some 50 bytes of merging, `docs/experiments.md`,
/// "The default's L0 from 8 tables, with YCSB"), but the merge runs on a
/// background thread and the extra probes on the reader's; at 2 KiB per
/// read, YCSB's workload A (half reads) left its L0 merge to workload B
/// and B ran at 0.84 of L0 from 4 ("L0 merged for reads").
pub(crate) const L0_READ_BYTES: u64 = 16 << 10;

/// A scan's seek pays for `SCAN_READ_WEIGHT` point reads' worth per extra
/// L0 table: no filter spares it, and it reads a block of each table
/// (4.5 µs a table for a 100-entry scan, against a point read's 0.1 µs
/// by filter, in the same experiment).
pub(crate) const SCAN_READ_WEIGHT: u64 = 8;

/// User reads' extra L0 tables since L0's oldest table came (its number,
/// `epoch`): a merge of L0 into L1 from `l0_read_trigger` tables on, below
/// the write trigger, once they paid for it ([`L0_READ_BYTES`]). L0 from 8
/// tables spares writes a fifth of their write amplification, and reads
/// lose 3-15% to the tables they probe; with this, writes keep the first
/// and reads, once they come, lose the second for a fraction of a second
/// (`docs/design.md`, "L0 merged for reads").
#[derive(Debug, Default)]
pub(crate) struct L0Reads {
    /// The number of L0's oldest table when `paid` started: a merge of L0
    /// takes every table, so a new oldest means the merge installed.
    epoch: AtomicU64,
    /// Extra tables met since, in point reads' worth.
    paid: AtomicU64,
    /// `paid` reached L0's bytes in this epoch (set once: the read that
    /// set it wakes the background threads).
    due: AtomicBool,
    /// L0 merges picked below the write trigger because reads paid for
    /// them, since open.
    merges: AtomicU64,
}

/// The number of `v`'s oldest L0 table (0 with none).
fn l0_epoch(v: &Version) -> u64 {
    v.levels[0].iter().map(|f| f.number).min().unwrap_or(0)
}

impl Leveled {
    pub(crate) const NAME: &'static str = "leveled";

    pub(crate) fn max_bytes_for_level(&self, level: usize) -> u64 {
        let mut b = self.base_level_size_bytes;
        for _ in 1..level {
            b = b.saturating_mul(self.level_size_ratio);
        }
        b
    }

    /// [`IndexShape::get`], and how many L0 tables it probed (those whose
    /// range holds `user_key`, newest first, up to the one that answered).
    fn get_counting_l0(
        &self,
        v: &Version,
        tables: &TableCache,
        user_key: &[u8],
        snapshot: u64,
        class: IoClass,
    ) -> Result<(Lookup, usize)> {
        let met = std::cell::Cell::new(0);
        let overlapping = v.levels[0]
            .iter()
            .rev()
            .filter(|f| f.holds_user_key(user_key))
            .inspect(|_| met.set(met.get() + 1));
        let runs = v
            .levels
            .iter()
            .skip(1)
            .filter_map(|files| sorted_run_table(files, user_key));
        let found = probe_in_order(
            tables,
            overlapping.chain(runs).map(|f| &**f),
            user_key,
            snapshot,
            class,
        )?;
        Ok((found, met.get()))
    }

    /// A user read of `v`'s tables met `extra` L0 tables past the
    /// `l0_read_trigger - 1` a merge from the read trigger would leave, in
    /// point reads' worth ([`L0Reads`]). True when it made a merge due.
    fn charge_l0_read(&self, v: &Version, extra: u64) -> bool {
        let trigger = self.l0_read_trigger.max(1);
        if extra == 0 || trigger >= self.l0_compaction_trigger || v.num_files(0) < trigger {
            return false;
        }
        let r = &self.l0_reads;
        let epoch = l0_epoch(v);
        if r.epoch.load(Ordering::Relaxed) != epoch {
            // Racing readers may each reset: an estimate either way.
            r.epoch.store(epoch, Ordering::Relaxed);
            r.paid.store(0, Ordering::Relaxed);
            r.due.store(false, Ordering::Relaxed);
        }
        if r.due.load(Ordering::Relaxed) {
            return false;
        }
        let paid = r.paid.fetch_add(extra, Ordering::Relaxed) + extra;
        paid.saturating_mul(L0_READ_BYTES) >= v.level_bytes(0)
            && !r.due.swap(true, Ordering::Relaxed)
    }

    /// A user's point read met `met` of `v`'s L0 tables, newest first,
    /// before it found its key or passed L0: the ones past
    /// `l0_read_trigger - 1` are extra. A read answered by one of the
    /// newest tables pays nothing, as a read LevelDB's seek compaction
    /// charges only when it searched a table that did not hold its key
    /// (`db/version_set.cc`, `Version::Get`): under YCSB's workload D, whose
    /// reads find the newest keys, charging every read for all of L0 made
    /// merges that spared no read a table ("L0 merged for reads").
    fn note_point_read(&self, v: &Version, met: usize) -> bool {
        let extra = met.saturating_sub(self.l0_read_trigger.max(1) - 1);
        self.charge_l0_read(v, extra as u64)
    }

    /// L0's compaction trigger for `v`: the read trigger once reads paid
    /// for a merge of its tables.
    fn l0_trigger_for(&self, v: &Version) -> usize {
        let r = &self.l0_reads;
        if self.l0_read_trigger < self.l0_compaction_trigger
            && r.due.load(Ordering::Relaxed)
            && r.epoch.load(Ordering::Relaxed) == l0_epoch(v)
        {
            self.l0_read_trigger.max(1)
        } else {
            self.l0_compaction_trigger
        }
    }

    /// Grandparent overlap above which an output table is cut (LevelDB).
    pub(crate) fn max_grandparent_overlap_bytes(&self) -> u64 {
        self.target_file_size_bytes.saturating_mul(10)
    }

    fn range(files: &[Arc<FileMeta>]) -> (Vec<u8>, Vec<u8>) {
        let lo = files
            .iter()
            .map(|f| f.smallest_user_key())
            .min()
            .unwrap_or_default();
        let hi = files
            .iter()
            .map(|f| f.largest_user_key())
            .max()
            .unwrap_or_default();
        (lo.to_vec(), hi.to_vec())
    }

    fn plan(
        &self,
        v: &Version,
        level: usize,
        inputs0: Vec<Arc<FileMeta>>,
        busy: &HashSet<u64>,
    ) -> Option<CompactionPlan> {
        let output_level = level + 1;
        let (lo, hi) = Self::range(&inputs0);
        let inputs1 = v.overlapping(output_level, &lo, &hi);
        if inputs1.iter().any(|f| busy.contains(&f.number)) {
            return None;
        }
        let mut all = inputs0.clone();
        all.extend(inputs1.iter().cloned());
        let (lo, hi) = Self::range(&all);
        let grandparents = if output_level + 1 < self.num_levels {
            v.overlapping(output_level + 1, &lo, &hi)
        } else {
            Vec::new()
        };
        let gp_bytes: u64 = grandparents.iter().map(|f| f.file_size).sum();
        let trivial_move = inputs0.len() == 1
            && inputs1.is_empty()
            && gp_bytes <= self.max_grandparent_overlap_bytes();
        Some(CompactionPlan {
            inputs: vec![
                CompactionInput {
                    level,
                    files: inputs0,
                    // L0 tables overlap each other; deeper levels do not.
                    sorted_run: level > 0,
                },
                CompactionInput {
                    level: output_level,
                    files: inputs1,
                    sorted_run: true,
                },
            ],
            output_level,
            target_file_size_bytes: self.target_file_size_bytes,
            overlap_limit: grandparents,
            max_overlap_bytes: self.max_grandparent_overlap_bytes(),
            trivial_move,
            separate_values: false,
            new_boundary: None,
            relocate: Vec::new(),
            output_number: None,
        })
    }

    /// A merge out of the level of the highest score among those `eligible`
    /// (given the level and its score; L0 as a batch, a deeper level by its table of least overlap below),
    /// or of the next when that one's pick is busy.
    fn pick_fullest(
        &self,
        v: &Version,
        busy: &HashSet<u64>,
        eligible: impl Fn(usize, f64) -> bool,
    ) -> Option<CompactionPlan> {
        let scores = self.scores(v);
        let mut levels: Vec<usize> = (0..scores.len())
            .filter(|&l| eligible(l, scores[l]))
            .collect();
        levels.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
        levels.into_iter().find_map(|l| {
            if l == 0 {
                self.pick_level0(v, busy)
            } else {
                self.pick_level(v, l, busy)
            }
        })
    }

    fn pick_level0(&self, v: &Version, busy: &HashSet<u64>) -> Option<CompactionPlan> {
        let l0 = &v.levels[0];
        // Newer L0 tables must never reach L1 before older ones with the
        // same keys, so an L0 compaction takes all of L0 and runs alone.
        if l0.is_empty() || l0.iter().any(|f| busy.contains(&f.number)) {
            return None;
        }
        self.plan(v, 0, l0.clone(), busy)
    }

    fn pick_level(&self, v: &Version, level: usize, busy: &HashSet<u64>) -> Option<CompactionPlan> {
        let next = level + 1;
        let mut best: Option<(u128, &Arc<FileMeta>)> = None;
        for f in &v.levels[level] {
            if busy.contains(&f.number) {
                continue;
            }
            let overlap: u64 = v
                .overlapping(next, f.smallest_user_key(), f.largest_user_key())
                .iter()
                .map(|o| o.file_size)
                .sum();
            // overlap / size, compared without floating point.
            let ratio = (u128::from(overlap) << 32) / u128::from(f.file_size.max(1));
            if best.is_none_or(|(r, _)| ratio < r) {
                best = Some((ratio, f));
            }
        }
        let mut order: Vec<&Arc<FileMeta>> = v.levels[level].iter().collect();
        if let Some((_, f)) = best {
            order.retain(|g| g.number != f.number);
            order.insert(0, f);
        }
        order
            .into_iter()
            .filter(|f| !busy.contains(&f.number))
            .find_map(|f| self.plan(v, level, vec![f.clone()], busy))
    }
}

impl LevelRules for Leveled {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn num_levels(&self) -> usize {
        self.num_levels
    }

    fn normalize(&self, levels: &mut [Vec<Arc<FileMeta>>]) {
        levels[0].sort_by_key(|f| f.number);
        for l in levels.iter_mut().skip(1) {
            l.sort_by(|a, b| key::compare(&a.smallest, &b.smallest));
        }
    }

    fn check(&self, v: &Version) -> Result<(), String> {
        for (level, files) in v.levels.iter().enumerate().skip(1) {
            check_sorted_run(files, &format!("at level {level}"))?;
        }
        Ok(())
    }
}

impl IndexShape for Leveled {
    fn installs_by_range(&self) -> bool {
        true
    }

    /// The inline bytes of every level above the last one holding tables
    /// (a table written before the manifest recorded its payload counts
    /// whole). A version there that shadows an older one leaves that one
    /// in a deeper level until a merge meets them; tombstones hold no
    /// inline bytes, so what deletes free counts as live until then.
    fn inline_bytes_above_last_level(&self, v: &Version) -> u64 {
        let Some(last) = v.levels.iter().rposition(|l| !l.is_empty()) else {
            return 0;
        };
        v.levels[..last]
            .iter()
            .flatten()
            .map(|f| f.payload.map_or(f.file_size, |p| p.inline_bytes))
            .sum()
    }

    fn get(
        &self,
        v: &Version,
        tables: &TableCache,
        user_key: &[u8],
        snapshot: u64,
        class: IoClass,
    ) -> Result<Lookup> {
        self.get_counting_l0(v, tables, user_key, snapshot, class)
            .map(|(found, _)| found)
    }

    fn read(
        &self,
        v: &Version,
        tables: &TableCache,
        user_key: &[u8],
        snapshot: u64,
    ) -> Result<(Lookup, bool)> {
        let (found, met) =
            self.get_counting_l0(v, tables, user_key, snapshot, IoClass::UserRead)?;
        Ok((found, self.note_point_read(v, met)))
    }

    fn pick_compaction(&self, v: &Version, busy: &HashSet<u64>) -> Option<CompactionPlan> {
        let plan = self.pick_fullest(v, busy, |_, score| score >= 1.0)?;
        if plan.inputs[0].level == 0 && v.num_files(0) < self.l0_compaction_trigger {
            self.l0_reads.merges.fetch_add(1, Ordering::Relaxed);
        }
        Some(plan)
    }

    /// A scan meets every L0 table its range overlaps, and reads a block
    /// of each: all past the read trigger's are extra.
    fn note_scan(&self, v: &Version) -> bool {
        let extra = (v.num_files(0) + 1).saturating_sub(self.l0_read_trigger.max(1));
        self.charge_l0_read(v, extra as u64 * SCAN_READ_WEIGHT)
    }

    fn shape_stats(&self, _v: &Version, s: &mut crate::stats::ShapeStats) {
        s.l0_read_merges = self.l0_reads.merges.load(Ordering::Relaxed);
    }

    /// L0 into L1: the newest entries (flushed memtables) meet the older
    /// versions they shadow.
    fn pick_shadow_compaction(&self, v: &Version, busy: &HashSet<u64>) -> Option<CompactionPlan> {
        self.pick_level0(v, busy)
    }

    fn pick_range_compaction(
        &self,
        v: &Version,
        level: usize,
        lo: &[u8],
        hi: &[u8],
    ) -> Option<CompactionPlan> {
        if level + 1 >= self.num_levels {
            return None;
        }
        let inputs = v.overlapping(level, lo, hi);
        if inputs.is_empty() {
            return None;
        }
        let inputs = if level == 0 {
            v.levels[0].clone()
        } else {
            inputs
        };
        let mut p = self.plan(v, level, inputs, &HashSet::new())?;
        // A manual compaction rewrites even a lone table, so that tombstones
        // and shadowed versions in the range really go away.
        p.trivial_move = p.trivial_move && level + 2 < self.num_levels;
        Some(p)
    }

    /// The fullest level above the last one holding tables, by its score,
    /// though none is over its size (`Leveled::pick_fullest`). Each merge drops the older
    /// versions its entries meet in the next level, and brings the rest a
    /// level closer to theirs.
    fn pick_garbage_compaction(&self, v: &Version, busy: &HashSet<u64>) -> Option<CompactionPlan> {
        let last = v.levels.iter().rposition(|l| !l.is_empty())?;
        self.pick_fullest(v, busy, |l, _| l < last && !v.levels[l].is_empty())
    }

    fn is_bottommost_for(&self, v: &Version, level: usize, user_key: &[u8]) -> bool {
        v.levels
            .iter()
            .skip(level + 1)
            .all(|files| sorted_run_table(files, user_key).is_none())
    }

    fn scores(&self, v: &Version) -> Vec<f64> {
        let mut s = vec![0.0; self.num_levels];
        s[0] = v.num_files(0) as f64 / self.l0_trigger_for(v).max(1) as f64;
        for (level, score) in s.iter_mut().enumerate().take(self.num_levels - 1).skip(1) {
            *score = v.level_bytes(level) as f64 / self.max_bytes_for_level(level).max(1) as f64;
        }
        s
    }

    /// LevelDB's L0 triggers: L0 tables are searched one by one, so reads
    /// slow down as they pile up.
    fn write_pressure(&self, v: &Version) -> WritePressure {
        let l0 = v.num_files(0);
        if l0 >= self.l0_stop_trigger {
            WritePressure::Stop
        } else if l0 >= self.l0_slowdown_trigger {
            WritePressure::Slowdown
        } else {
            WritePressure::None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::test_file;
    use crate::version::VersionEdit;

    fn shape() -> Arc<Leveled> {
        shape_with_l0(1, 1)
    }

    fn shape_with_l0(compaction: usize, read: usize) -> Arc<Leveled> {
        Arc::new(Leveled {
            num_levels: 4,
            l0_compaction_trigger: compaction,
            // The write triggers keep their defaults' proportions (8 and 12
            // for the tests of the shape alone).
            l0_slowdown_trigger: (2 * compaction).max(8),
            l0_stop_trigger: (3 * compaction).max(12),
            base_level_size_bytes: 1000,
            level_size_ratio: 10,
            target_file_size_bytes: 100,
            l0_read_trigger: read,
            l0_reads: L0Reads::default(),
        })
    }

    /// `v` with L0 tables `numbers` (each `bytes`) added.
    fn with_l0(v: &Version, numbers: std::ops::RangeInclusive<u64>, bytes: u64) -> Version {
        let mut e = VersionEdit::default();
        for n in numbers {
            e.add_file(0, test_file(n, "a", "z", bytes));
        }
        v.apply(&e).unwrap()
    }

    /// Point reads that each pass all of L0 until one makes the merge
    /// due; how many it took.
    fn reads_until_due(s: &Leveled, v: &Version, most: u64) -> Option<u64> {
        (1..=most).find(|_| s.note_point_read(v, v.num_files(0)))
    }

    #[test]
    fn l0_is_merged_below_its_write_trigger_once_reads_paid_for_it() {
        let s = shape_with_l0(8, 4);
        let none = HashSet::new();
        // Six L0 tables of 240 KiB: 1,440 KiB; three extra tables per
        // point read (past the 3 a merge from 4 would leave), 48 KiB of L0
        // each.
        let v = with_l0(&Version::empty(s.clone()), 1..=6, 240 << 10);
        assert!(
            s.pick_compaction(&v, &none).is_none(),
            "6 of 8: writes alone wait"
        );
        assert_eq!(s.scores(&v)[0], 6.0 / 8.0);
        assert_eq!(
            reads_until_due(&s, &v, 100),
            Some(30),
            "30 x 48 KiB = 1,440 KiB"
        );
        assert!(
            !s.note_point_read(&v, v.num_files(0)),
            "one wake-up per merge due"
        );
        assert_eq!(s.scores(&v)[0], 6.0 / 4.0);
        let plan = s.pick_compaction(&v, &none).expect("reads paid for it");
        assert_eq!((plan.inputs[0].level, plan.inputs[0].files.len()), (0, 6));
        let mut stats = crate::stats::ShapeStats::default();
        s.shape_stats(&v, &mut stats);
        assert_eq!(stats.l0_read_merges, 1);

        // The merge installed: L0 starts again with newer tables, and its
        // reads pay again from nothing. A scan weighs 8 point reads.
        let mut e = VersionEdit::default();
        for n in 1..=6 {
            e.delete_file(0, n);
        }
        e.add_file(1, test_file(7, "a", "z", 100));
        let v = with_l0(&v.apply(&e).unwrap(), 8..=12, 240 << 10);
        assert!(
            s.pick_compaction(&v, &none).is_none(),
            "a new L0 owes nothing"
        );
        // Five tables of 240 KiB, two extra a read: 1,200 KiB is 37.5
        // reads' worth, 4.7 scans'.
        assert!((1..=4).all(|_| !s.note_scan(&v)));
        assert!(s.note_scan(&v), "the fifth scan pays for it");
        assert!(s.pick_compaction(&v, &none).is_some());

        // Below the read trigger reads owe nothing, however many.
        let s = shape_with_l0(8, 4);
        let v = with_l0(&Version::empty(s.clone()), 1..=3, 1);
        assert_eq!(reads_until_due(&s, &v, 10_000), None);
        assert!(s.pick_compaction(&v, &none).is_none());
    }

    #[test]
    fn a_read_pays_only_for_the_l0_tables_it_met_past_the_read_trigger() {
        let s = shape_with_l0(8, 4);
        // Six L0 tables of 240 KiB: 1,440 KiB, 90 extra tables' worth at
        // 16 KiB each.
        let v = with_l0(&Version::empty(s.clone()), 1..=6, 240 << 10);
        // Reads the newest three tables answered: nothing owed, however
        // many (YCSB's workload D reads the newest keys).
        for met in 0..=3 {
            assert!(
                (0..10_000).all(|_| !s.note_point_read(&v, met)),
                "met {met}"
            );
        }
        // Each read that met five of the six pays two tables: 45 of them
        // make the merge due, not the 30 of reads passing all six.
        assert_eq!(
            (1..=100).find(|_| s.note_point_read(&v, 5)),
            Some(45),
            "45 x 2 x 16 KiB = 1,440 KiB"
        );
        assert!(s.pick_compaction(&v, &HashSet::new()).is_some());
    }

    #[test]
    fn a_read_trigger_at_the_write_trigger_changes_nothing() {
        for (compaction, read) in [(4, 4), (4, 8)] {
            let s = shape_with_l0(compaction, read);
            let v = with_l0(&Version::empty(s.clone()), 1..=3, 1);
            assert_eq!(reads_until_due(&s, &v, 10_000), None);
            assert!(!s.note_scan(&v));
            assert!(s.pick_compaction(&v, &HashSet::new()).is_none());
            assert_eq!(s.scores(&v)[0], 3.0 / compaction as f64);
        }
    }

    #[test]
    fn overlapping_tables_in_a_level_are_rejected() {
        let v = Version::empty(shape());
        let mut e = VersionEdit::default();
        e.add_file(1, test_file(1, "a", "m", 10));
        e.add_file(1, test_file(2, "k", "z", 10));
        assert!(v.apply(&e).is_err());
        let mut e = VersionEdit::default();
        e.add_file(0, test_file(1, "a", "m", 10));
        e.add_file(0, test_file(2, "k", "z", 10));
        assert!(v.apply(&e).is_ok());
    }

    #[test]
    fn picks_l0_then_sizes_and_respects_busy() {
        let s = shape();
        let v = Version::empty(s.clone());
        let mut e = VersionEdit::default();
        e.add_file(0, test_file(5, "c", "f", 10));
        e.add_file(0, test_file(6, "a", "d", 10));
        e.add_file(1, test_file(3, "a", "b", 600));
        e.add_file(1, test_file(4, "e", "g", 600));
        e.add_file(1, test_file(7, "x", "y", 600));
        e.add_file(2, test_file(8, "a", "g", 100));
        let v = v.apply(&e).unwrap();
        let p = s.pick_compaction(&v, &HashSet::new()).unwrap();
        assert_eq!(p.inputs[0].level, 0);
        assert_eq!(p.inputs[0].files.len(), 2);
        // x..y does not overlap L0's range a..f.
        let l1: Vec<u64> = p.inputs[1].files.iter().map(|f| f.number).collect();
        assert_eq!(l1, vec![3, 4]);
        // L0 busy: fall through to L1 (1800 > 1000 bytes); x..y has no
        // overlap below, so it is the cheapest and a trivial move.
        let busy: HashSet<u64> = [5].into_iter().collect();
        let p = s.pick_compaction(&v, &busy).unwrap();
        assert_eq!((p.inputs[0].level, p.inputs[0].files[0].number), (1, 7));
        assert!(p.trivial_move);
        assert!(s.is_bottommost_for(&v, 1, b"x"));
        assert!(!s.is_bottommost_for(&v, 0, b"a"));
    }
}
