//! The `unified` key index shape: UniKV (seed 004 §III).
//!
//! Level 0 is the **UnsortedStore**: tables flushed from memtables, values
//! inline, key ranges overlapping, found through an in-memory two-level
//! hash index ([`hash_index`], §III-B) instead of bloom filters. Level 1 is
//! the **SortedStore**: one sorted run of keys and value pointers. When the
//! UnsortedStore reaches `unsorted_limit_bytes`, all of it is merged into
//! the tables of the sorted run it overlaps, and the merge separates the
//! values it carries into the value log (partial KV separation, §III-C);
//! values already behind pointers are not moved.
//!
//! The hash index only speeds lookups up; correctness never depends on it.
//! A lookup probes, newest first, every unsorted table the index names as a
//! candidate and every unsorted table the index does not cover (a table
//! installed before its keys were indexed, or recovered and not yet
//! re-indexed); a candidate the version does not hold (merged away, or not
//! installed yet) is skipped. Flushes index their memtable's keys before
//! the table is installed, so in steady state only candidates are probed.
//!
//! Index generations follow the paper's "flushes during a merge go to a
//! fresh hash index; the frozen one is dropped when the merge commits":
//! a merge that starts freezes the generation holding its inputs, and a
//! frozen generation is dropped once the version holds none of its tables.
//!
//! Not built yet (issue 19): range partitions and their splits (§III-D),
//! the per-partition GC (§III-C; GC is the log layout's), the scan merge
//! (§III-F) and hash index checkpoints (§III-G; recovery re-reads the
//! unsorted tables' keys).

#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "hash index checkpoints (seed 004 §III-G) are the next step of issue 19"
    )
)]
pub(crate) mod hash_index;

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::RwLock;
use smallvec::SmallVec;

use self::hash_index::{HashIndex, KeyHash};
use super::{
    check_sorted_run, overlapping_then_runs, probe_table, sorted_run_table, CompactionInput,
    CompactionPlan, IndexShape, WritePressure,
};
use crate::error::Result;
use crate::fs::IoClass;
use crate::iter::InternalIterator;
use crate::key;
use crate::memtable::Lookup;
use crate::options::{Options, UNIKV_BYTES_PER_HASH_BUCKET};
use crate::table::{bloom, TableCache};
use crate::version::{FileMeta, Version};

/// The UnsortedStore's level.
pub(crate) const UNSORTED: usize = 0;
/// The SortedStore's level.
pub(crate) const SORTED: usize = 1;

/// The unified shape and its hash index generations.
pub(crate) struct Unified {
    unsorted_limit_bytes: u64,
    target_file_size_bytes: u64,
    buckets: usize,
    functions: u32,
    /// Oldest first; the last one takes new tables.
    generations: RwLock<Vec<HashIndex>>,
}

impl Unified {
    pub(crate) const NAME: &'static str = "unified";

    pub(crate) fn new(opts: &Options) -> Unified {
        let u = &opts.index.unified;
        let buckets = if u.hash_buckets > 0 {
            u.hash_buckets
        } else {
            (u.unsorted_limit_bytes / UNIKV_BYTES_PER_HASH_BUCKET).max(1) as usize
        };
        Unified {
            unsorted_limit_bytes: u.unsorted_limit_bytes,
            target_file_size_bytes: opts.index.target_file_size_bytes,
            buckets,
            functions: u.hash_functions,
            generations: RwLock::new(vec![HashIndex::new(buckets, u.hash_functions)]),
        }
    }

    /// Indexes one table's user keys (in key order) into the newest
    /// generation, starting a new one when it is full.
    fn index(&self, number: u64, keys: &[Vec<u8>]) {
        let mut gens = self.generations.write();
        if gens.iter().any(|g| g.contains_table(number)) {
            return;
        }
        if gens.last().is_none_or(HashIndex::is_full) {
            gens.push(HashIndex::new(self.buckets, self.functions));
        }
        let active = gens.last_mut().expect("an active generation");
        active
            .add_table(number, keys.iter().map(Vec::as_slice))
            .expect("a generation that is not full takes a new table");
    }

    /// The unsorted tables of `v` a lookup of `user_key` probes, newest
    /// first: the hash index's candidates, and every table no generation
    /// covers. Decided under the read lock, probed after it.
    fn unsorted_to_probe<'v>(
        &self,
        v: &'v Version,
        user_key: &[u8],
    ) -> SmallVec<[&'v Arc<FileMeta>; 8]> {
        let h = KeyHash::of(user_key);
        let gens = self.generations.read();
        let mut candidates: SmallVec<[u64; 8]> = SmallVec::new();
        for g in gens.iter() {
            candidates.extend(g.candidates_of(h));
        }
        v.levels[UNSORTED]
            .iter()
            .rev()
            .filter(|f| f.smallest_user_key() <= user_key && user_key <= f.largest_user_key())
            .filter(|f| {
                candidates.contains(&f.number) || !gens.iter().any(|g| g.contains_table(f.number))
            })
            .collect()
    }

    /// The merge of the whole UnsortedStore into the sorted run.
    fn merge_plan(&self, v: &Version, busy: &HashSet<u64>) -> Option<CompactionPlan> {
        let unsorted = &v.levels[UNSORTED];
        if unsorted.is_empty() || unsorted.iter().any(|f| busy.contains(&f.number)) {
            return None;
        }
        let lo = unsorted.iter().map(|f| f.smallest_user_key()).min()?;
        let hi = unsorted.iter().map(|f| f.largest_user_key()).max()?;
        let sorted = v.overlapping(SORTED, lo, hi);
        if sorted.iter().any(|f| busy.contains(&f.number)) {
            return None;
        }
        Some(self.merge_into_sorted_run(vec![
            CompactionInput {
                level: UNSORTED,
                files: unsorted.clone(),
                sorted_run: false,
            },
            CompactionInput {
                level: SORTED,
                files: sorted,
                sorted_run: true,
            },
        ]))
    }

    /// A merge of `inputs` into the sorted run that separates the values it
    /// carries.
    fn merge_into_sorted_run(&self, inputs: Vec<CompactionInput>) -> CompactionPlan {
        CompactionPlan {
            inputs,
            output_level: SORTED,
            target_file_size_bytes: self.target_file_size_bytes,
            overlap_limit: Vec::new(),
            max_overlap_bytes: u64::MAX,
            trivial_move: false,
            separate_values: true,
        }
    }
}

impl IndexShape for Unified {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn num_levels(&self) -> usize {
        2
    }

    fn normalize(&self, levels: &mut [Vec<Arc<FileMeta>>]) {
        // Flushes run one at a time, so file numbers are flush order.
        levels[UNSORTED].sort_by_key(|f| f.number);
        levels[SORTED].sort_by(|a, b| key::compare(&a.smallest, &b.smallest));
    }

    fn check(&self, v: &Version) -> Result<(), String> {
        check_sorted_run(&v.levels[SORTED], "in the sorted run")
    }

    fn get(
        &self,
        v: &Version,
        tables: &TableCache,
        user_key: &[u8],
        snapshot: u64,
    ) -> Result<Lookup> {
        let seek = key::encode(user_key, snapshot, key::KIND_SEEK);
        let hash = bloom::key_hash(user_key);
        for f in self.unsorted_to_probe(v, user_key) {
            if let Some(r) = probe_table(tables, f, &seek, user_key, hash)? {
                return Ok(r);
            }
        }
        // The sorted run: one table at most, by its boundary keys (§III-B).
        if let Some(f) = sorted_run_table(&v.levels[SORTED], user_key) {
            if let Some(r) = probe_table(tables, f, &seek, user_key, hash)? {
                return Ok(r);
            }
        }
        Ok(Lookup::Absent)
    }

    fn iterators(
        &self,
        v: &Arc<Version>,
        tables: &Arc<TableCache>,
    ) -> Vec<Box<dyn InternalIterator>> {
        overlapping_then_runs(v, tables)
    }

    fn pick_compaction(&self, v: &Version, busy: &HashSet<u64>) -> Option<CompactionPlan> {
        if v.level_bytes(UNSORTED) < self.unsorted_limit_bytes {
            return None;
        }
        self.merge_plan(v, busy)
    }

    /// The merge: unsorted versions meet the pointers they shadow.
    fn pick_shadow_compaction(&self, v: &Version, busy: &HashSet<u64>) -> Option<CompactionPlan> {
        self.merge_plan(v, busy)
    }

    fn pick_range_compaction(
        &self,
        v: &Version,
        level: usize,
        lo: &[u8],
        hi: &[u8],
    ) -> Option<CompactionPlan> {
        match level {
            UNSORTED => self.merge_plan(v, &HashSet::new()),
            // The sorted run is the bottom: a manual compaction rewrites
            // its tables in the range, dropping tombstones and shadowed
            // versions.
            SORTED => {
                let files = v.overlapping(SORTED, lo, hi);
                if files.is_empty() {
                    return None;
                }
                Some(self.merge_into_sorted_run(vec![CompactionInput {
                    level: SORTED,
                    files,
                    sorted_run: true,
                }]))
            }
            _ => None,
        }
    }

    fn is_bottommost_for(&self, v: &Version, level: usize, user_key: &[u8]) -> bool {
        level == SORTED || sorted_run_table(&v.levels[SORTED], user_key).is_none()
    }

    fn scores(&self, v: &Version) -> Vec<f64> {
        vec![
            v.level_bytes(UNSORTED) as f64 / self.unsorted_limit_bytes.max(1) as f64,
            0.0,
        ]
    }

    /// Writes slow down at 1.5 times the unsorted limit and stop at twice
    /// it: lookups stay cheap under the hash index, but scans merge every
    /// unsorted table and the index's memory grows with them.
    fn write_pressure(&self, v: &Version) -> WritePressure {
        let bytes = v.level_bytes(UNSORTED);
        if bytes >= self.unsorted_limit_bytes.saturating_mul(2) {
            WritePressure::Stop
        } else if bytes >= self.unsorted_limit_bytes.saturating_mul(3) / 2 {
            WritePressure::Slowdown
        } else {
            WritePressure::None
        }
    }

    fn index_flushed(&self, number: u64, entries: &mut dyn InternalIterator) -> Result<()> {
        let mut keys = Vec::new();
        entries.seek_to_first();
        while entries.valid() {
            let uk = key::user_key(entries.key());
            if keys.last().is_none_or(|k: &Vec<u8>| k.as_slice() != uk) {
                keys.push(uk.to_vec());
            }
            entries.next();
        }
        entries.status()?;
        self.index(number, &keys);
        Ok(())
    }

    fn shape_stats(&self, s: &mut crate::stats::ShapeStats) {
        let gens = self.generations.read();
        s.hash_index_bytes = gens.iter().map(|g| g.memory_bytes() as u64).sum();
        s.hash_index_generations = gens.len();
        s.hash_index_entries = gens.iter().map(HashIndex::entries).sum();
        s.hash_index_load = gens.last().map_or(0.0, HashIndex::load_factor);
    }

    fn merge_started(&self, plan: &CompactionPlan) {
        let mut gens = self.generations.write();
        let holds_input = gens
            .last()
            .is_some_and(|g| plan.input_files().any(|f| g.contains_table(f.number)));
        if holds_input {
            gens.push(HashIndex::new(self.buckets, self.functions));
        }
    }

    fn installed(&self, v: &Version) {
        let mut gens = self.generations.write();
        let last = gens.len() - 1;
        let mut i = 0;
        gens.retain(|g| {
            let keep = i == last
                || v.levels[UNSORTED]
                    .iter()
                    .any(|f| g.contains_table(f.number));
            i += 1;
            keep
        });
    }

    fn opened(&self, v: &Version, tables: &TableCache) -> Result<()> {
        for f in &v.levels[UNSORTED] {
            let t = tables.get(f.number, f.file_size)?;
            let mut it = t.iter(IoClass::Compaction, false);
            self.index_flushed(f.number, &mut it)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
