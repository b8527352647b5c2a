//! The `unified` key index shape: UniKV (ICDE '20, §III).
//!
//! The key space is cut into **range partitions** (§III-D) by boundary
//! keys kept in the version (`Version::boundaries`, manifest records). Each
//! partition has an **UnsortedStore** (its tables at level 0: flushed from
//! memtables, values inline, key ranges overlapping, found through an
//! in-memory two-level hash index ([`hash_index`], §III-B) instead of bloom
//! filters) and a **SortedStore** (its tables of the one sorted run at
//! level 1: keys and value pointers). Flushes and merges cut their outputs
//! at the boundaries, so a sorted table never spans two partitions and an
//! unsorted one only when a split installed while its flush ran.
//!
//! When a partition's UnsortedStore reaches `unsorted_limit_bytes`, it is
//! merged into the tables of the sorted run it overlaps, and the merge
//! separates the values it carries into the value log (partial KV
//! separation, §III-C); values already behind pointers are not moved. When
//! a partition holds `partition_size_limit_bytes`, its merge also splits it
//! at its median sorted table boundary; the values stay where they are
//! (the lazy value split).
//!
//! The hash index only speeds lookups up; correctness never depends on it.
//! A lookup probes, newest first, every unsorted table its partition's
//! index names as a candidate and every unsorted table that index does not
//! cover (a table installed before its keys were indexed, recovered and
//! not yet re-indexed, or indexed under the partition it was flushed to
//! before a split); a candidate the version does not hold (merged away, or
//! not installed yet) is skipped. Flushes index their memtable's keys
//! before the table is installed, so in steady state only candidates are
//! probed.
//!
//! Index generations follow the paper's "flushes during a merge go to a
//! fresh hash index; the frozen one is dropped when the merge commits":
//! a merge that starts freezes the generation holding its inputs, and a
//! frozen generation is dropped once the version holds none of its tables.
//!
//! Every half `unsorted_limit_bytes` of flushes, the hash indexes are
//! checkpointed to a file the manifest names (§III-G, [`checkpoint`]);
//! open loads it and re-reads only the unsorted tables it does not cover.
//!
//! Not built yet (issue 19): the per-partition GC (§III-C; GC is the log
//! layout's) and the scan merge (§III-F).

pub(crate) mod checkpoint;
pub(crate) mod hash_index;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use smallvec::SmallVec;

use self::hash_index::{HashIndex, KeyHash};
use super::{
    check_sorted_run, probe_in_order, sorted_run_table, CompactionInput, CompactionPlan,
    IndexShape, WritePressure,
};
use crate::error::Result;
use crate::fs::IoClass;
use crate::iter::InternalIterator;
use crate::key;
use crate::memtable::Lookup;
use crate::options::{Options, UNIKV_BYTES_PER_HASH_BUCKET};
use crate::table::TableCache;
use crate::version::{FileMeta, LevelRules, Version};

/// The UnsortedStores' level.
pub(crate) const UNSORTED: usize = 0;
/// The SortedStores' level: one sorted run, cut at partition boundaries.
pub(crate) const SORTED: usize = 1;

/// The partition (its index) that holds `user_key`.
pub(crate) fn partition_of(boundaries: &[Vec<u8>], user_key: &[u8]) -> usize {
    boundaries.partition_point(|b| b.as_slice() <= user_key)
}

/// Partition `i`'s smallest key (empty for the first: every key is at
/// least that) and the key that starts the next one.
pub(crate) fn range_of(boundaries: &[Vec<u8>], i: usize) -> (&[u8], Option<&[u8]>) {
    let lo = if i == 0 {
        &[][..]
    } else {
        &boundaries[i - 1][..]
    };
    (lo, boundaries.get(i).map(Vec::as_slice))
}

/// The upper end of a key range a merge gathers tables over.
#[derive(Debug, Clone)]
enum Upper {
    /// Keys below this one.
    Before(Vec<u8>),
    /// Keys up to and including this one.
    Through(Vec<u8>),
    Unbounded,
}

impl Upper {
    fn admits(&self, user_key: &[u8]) -> bool {
        match self {
            Upper::Before(k) => user_key < k.as_slice(),
            Upper::Through(k) => user_key <= k.as_slice(),
            Upper::Unbounded => true,
        }
    }
    fn widen_to(&mut self, user_key: &[u8]) {
        let wider = match self {
            Upper::Before(k) => user_key >= k.as_slice(),
            Upper::Through(k) => user_key > k.as_slice(),
            Upper::Unbounded => false,
        };
        if wider {
            *self = Upper::Through(user_key.to_vec());
        }
    }
}

/// What one partition holds, in bytes; its size, for splits, is `sorted`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PartitionLoad {
    /// Its unsorted tables (by the partition of their smallest key).
    pub(crate) unsorted: u64,
    /// Its sorted tables and the values their pointers name.
    pub(crate) sorted: u64,
    pub(crate) sorted_tables: usize,
}

/// Each partition's load in `v`.
pub(crate) fn loads(v: &Version) -> Vec<PartitionLoad> {
    let b = &v.boundaries;
    let mut out = vec![PartitionLoad::default(); b.len() + 1];
    // Saturating: sizes come from the manifest (each at most
    // `MAX_RECORDED_BYTES`, but a version may list many tables).
    for f in &v.levels[UNSORTED] {
        let l = &mut out[partition_of(b, f.smallest_user_key())];
        l.unsorted = l.unsorted.saturating_add(f.file_size);
    }
    for f in &v.levels[SORTED] {
        let l = &mut out[partition_of(b, f.smallest_user_key())];
        l.sorted = l.sorted.saturating_add(f.file_size + f.value_bytes);
        l.sorted_tables += 1;
    }
    out
}

/// The unified shape and its hash index generations.
pub(crate) struct Unified {
    unsorted_limit_bytes: u64,
    partition_size_limit_bytes: u64,
    target_file_size_bytes: u64,
    buckets: usize,
    functions: u32,
    /// Each partition's generations, oldest first (the last one takes new
    /// tables), by the partition's smallest key as it was when they were
    /// made (a split leaves them with the left half).
    generations: RwLock<BTreeMap<Vec<u8>, Vec<HashIndex>>>,
    /// Partitions of the current version, and splits installed since open.
    partitions: AtomicUsize,
    splits: AtomicU64,
    /// Bytes of tables indexed since the last checkpoint.
    since_checkpoint: AtomicU64,
    checkpoints: AtomicU64,
    /// At open: unsorted tables whose keys were re-read, and whether the
    /// checkpoint could not be used.
    reindexed: AtomicUsize,
    checkpoint_rejected: AtomicBool,
    /// Unsorted tables of a partition above which scans merge them
    /// (§III-F), user scans started since the last scan merge was picked,
    /// and scan merges picked since open.
    scan_merge_limit: usize,
    scans: AtomicU64,
    scan_merges: AtomicU64,
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
            partition_size_limit_bytes: u.partition_size_limit_bytes,
            target_file_size_bytes: opts.index.target_file_size_bytes,
            buckets,
            functions: u.hash_functions,
            generations: RwLock::new(BTreeMap::new()),
            partitions: AtomicUsize::new(1),
            splits: AtomicU64::new(0),
            since_checkpoint: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            reindexed: AtomicUsize::new(0),
            checkpoint_rejected: AtomicBool::new(false),
            scan_merge_limit: u.scan_merge_limit,
            scans: AtomicU64::new(0),
            scan_merges: AtomicU64::new(0),
        }
    }

    /// Indexes one table's user keys (distinct, in key order) into the
    /// newest generation of the partition starting at `partition`,
    /// starting a new one when it is full (or there is none). Each key the
    /// partition's index already names an older table for shadows that
    /// table's version, counted against the newest such table
    /// ([`HashIndex::note_shadowed`]; `docs/design.md`, "Space-aware
    /// throttling"). The candidates are found under the read lock, so that
    /// lookups wait only for the insert.
    fn index(&self, partition: &[u8], number: u64, keys: &[Vec<u8>]) {
        let hashes: Vec<KeyHash> = keys.iter().map(|k| KeyHash::of(k)).collect();
        let mut shadowed: BTreeMap<u64, u64> = BTreeMap::new();
        if let Some(gens) = self.generations.read().get(partition) {
            if gens.iter().any(|g| g.contains_table(number)) {
                return;
            }
            for &h in &hashes {
                let newest = gens
                    .iter()
                    .filter_map(|g| g.newest_candidate_below(h, number))
                    .max();
                if let Some(t) = newest {
                    *shadowed.entry(t).or_default() += 1;
                }
            }
        }
        let mut all = self.generations.write();
        let gens = all.entry(partition.to_vec()).or_default();
        if gens.iter().any(|g| g.contains_table(number)) {
            return;
        }
        // A table merged away since is not counted: its generation may be
        // gone, and its versions with it.
        for (t, n) in shadowed {
            gens.iter_mut().any(|g| g.note_shadowed(t, n));
        }
        if gens.last().is_none_or(HashIndex::is_full) {
            gens.push(HashIndex::new(self.buckets, self.functions));
        }
        let active = gens.last_mut().expect("an active generation");
        active
            .add_table_hashes(number, hashes)
            .expect("a generation that is not full takes a new table");
    }

    /// The unsorted tables of `v` a lookup of `user_key` probes, newest
    /// first: its partition's hash index candidates, and every table that
    /// index does not cover; and whether the index had any candidate.
    /// Decided under the read lock, probed after it. With `or_indexed`,
    /// a key the index has candidates for returns no tables: a flush's
    /// shadow lookup stops there (`get_shadowed`) without the coverage
    /// check of every unsorted table (all lookups' checks together took
    /// 5.6% of a 2 GiB load's CPU samples; a load's new keys have no
    /// candidates, an update's hot keys do).
    fn unsorted_to_probe<'v>(
        &self,
        v: &'v Version,
        user_key: &[u8],
        or_indexed: bool,
    ) -> (SmallVec<[&'v Arc<FileMeta>; 8]>, bool) {
        let h = KeyHash::of(user_key);
        let (lo, _) = range_of(&v.boundaries, partition_of(&v.boundaries, user_key));
        let all = self.generations.read();
        let gens = all.get(lo).map_or(&[][..], Vec::as_slice);
        let mut candidates: SmallVec<[u64; 8]> = SmallVec::new();
        for g in gens {
            candidates.extend(g.candidates_of(h));
        }
        if or_indexed && !candidates.is_empty() {
            return (SmallVec::new(), true);
        }
        let probe = v.levels[UNSORTED]
            .iter()
            .rev()
            .filter(|f| f.holds_user_key(user_key))
            .filter(|f| {
                candidates.contains(&f.number) || !gens.iter().any(|g| g.contains_table(f.number))
            })
            .collect();
        (probe, !candidates.is_empty())
    }

    /// The newest entry of `user_key` at `snapshot` in `unsorted` (newest
    /// first), then in the sorted run: one table at most, by its boundary
    /// keys (§III-B).
    fn probe<'v>(
        &self,
        v: &'v Version,
        tables: &TableCache,
        user_key: &[u8],
        unsorted: SmallVec<[&'v Arc<FileMeta>; 8]>,
        snapshot: u64,
        class: IoClass,
    ) -> Result<Lookup> {
        let sorted = sorted_run_table(&v.levels[SORTED], user_key);
        probe_in_order(
            tables,
            unsorted.into_iter().chain(sorted).map(|f| &**f),
            user_key,
            snapshot,
            class,
        )
    }

    /// The merge of every unsorted table overlapping `lo..upper` (and of
    /// every older one overlapping those, so that no version left unsorted
    /// is newer than one merged) into the sorted tables they overlap.
    fn merge_plan(
        &self,
        v: &Version,
        lo: &[u8],
        upper: Upper,
        busy: &HashSet<u64>,
    ) -> Option<CompactionPlan> {
        self.merge_plan_covering(v, lo, upper, None, busy)
    }

    /// [`Unified::merge_plan`], whose sorted inputs also take every sorted
    /// table overlapping `also` (inclusive user keys).
    ///
    /// Closed both ways: every unsorted table overlapping a sorted input
    /// is an input too, and every sorted table overlapping an unsorted
    /// one. A merge may move the records its sorted inputs point at (GC,
    /// `docs/design.md`, "Garbage collection"), and a flush may have
    /// counted one of those as garbage already, flagging its newer
    /// version: that version must be in the merge, which then drops the
    /// record instead of moving it. A merge over a value table's key range
    /// met sorted tables reaching past every unsorted table it took, and
    /// moved records whose newer versions lay in unsorted tables it had
    /// left out; their copies were garbage nothing counted (the accounting
    /// test of `tests/unikv.rs` found one in 2 to 8 runs of 12).
    fn merge_plan_covering(
        &self,
        v: &Version,
        lo: &[u8],
        mut upper: Upper,
        also: Option<(&[u8], &[u8])>,
        busy: &HashSet<u64>,
    ) -> Option<CompactionPlan> {
        let unsorted = &v.levels[UNSORTED];
        let mut lo = lo.to_vec();
        let mut taken = vec![false; unsorted.len()];
        let mut sorted: Vec<Arc<FileMeta>> = Vec::new();
        loop {
            let mut grew = false;
            for (i, f) in unsorted.iter().enumerate() {
                if !taken[i]
                    && f.largest_user_key() >= lo.as_slice()
                    && upper.admits(f.smallest_user_key())
                {
                    taken[i] = true;
                    grew = true;
                    if f.smallest_user_key() < lo.as_slice() {
                        lo = f.smallest_user_key().to_vec();
                    }
                    upper.widen_to(f.largest_user_key());
                }
            }
            // The sorted tables the unsorted inputs (and `also`) overlap,
            // and those the sorted inputs taken so far span.
            let taken_files = unsorted
                .iter()
                .zip(&taken)
                .filter(|(_, t)| **t)
                .map(|(f, _)| f)
                .chain(&sorted);
            let lows = taken_files
                .clone()
                .map(|f| f.smallest_user_key())
                .chain(also.map(|a| a.0));
            let highs = taken_files
                .map(|f| f.largest_user_key())
                .chain(also.map(|a| a.1));
            let now = match (lows.min(), highs.max()) {
                (Some(a), Some(b)) => v.overlapping(SORTED, a, b),
                _ => Vec::new(),
            };
            if now.len() > sorted.len() {
                grew = true;
                for f in &now {
                    if f.smallest_user_key() < lo.as_slice() {
                        lo = f.smallest_user_key().to_vec();
                    }
                    upper.widen_to(f.largest_user_key());
                }
                sorted = now;
            }
            if !grew {
                break;
            }
        }
        let files: Vec<Arc<FileMeta>> = unsorted
            .iter()
            .zip(&taken)
            .filter(|(_, t)| **t)
            .map(|(f, _)| f.clone())
            .collect();
        if also.is_some() && files.is_empty() && sorted.is_empty() {
            return None;
        }
        if files
            .iter()
            .chain(&sorted)
            .any(|f| busy.contains(&f.number))
        {
            return None;
        }
        Some(self.merge_into_sorted_run(vec![
            CompactionInput {
                level: UNSORTED,
                files,
                sorted_run: false,
            },
            CompactionInput {
                level: SORTED,
                files: sorted,
                sorted_run: true,
            },
        ]))
    }

    /// Partition `i`'s merge, splitting it when it has reached the
    /// partition size limit and can be split.
    fn partition_merge(
        &self,
        v: &Version,
        i: usize,
        load: &PartitionLoad,
        busy: &HashSet<u64>,
    ) -> Option<CompactionPlan> {
        let (lo, hi) = range_of(&v.boundaries, i);
        let upper = hi.map_or(Upper::Unbounded, |h| Upper::Before(h.to_vec()));
        let mut plan = self.merge_plan(v, lo, upper, busy)?;
        if load.sorted >= self.partition_size_limit_bytes {
            plan.new_boundary = split_key(v, i);
        }
        Some(plan)
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
            new_boundary: None,
            relocate: Vec::new(),
            output_number: None,
        }
    }

    /// The worst partition's unsorted bytes: level 0 alone, as the write
    /// path asks for every write group.
    fn max_unsorted(v: &Version) -> u64 {
        let b = &v.boundaries;
        let mut bytes = vec![0u64; b.len() + 1];
        for f in &v.levels[UNSORTED] {
            bytes[partition_of(b, f.smallest_user_key())] += f.file_size;
        }
        bytes.into_iter().max().unwrap_or(0)
    }
}

/// Where partition `i` of `v` splits (§III-D, "at the median key"): the
/// boundary between two of its sorted tables that comes nearest to halving
/// its sorted bytes, values included. Splitting between tables leaves
/// every sorted table whole; with tables of `target_file_size_bytes` the
/// halves are even to within one table. `None` when it has fewer than two.
pub(crate) fn split_key(v: &Version, i: usize) -> Option<Vec<u8>> {
    let (lo, hi) = range_of(&v.boundaries, i);
    let tables: Vec<&Arc<FileMeta>> = v.levels[SORTED]
        .iter()
        .filter(|f| f.smallest_user_key() >= lo && hi.is_none_or(|h| f.smallest_user_key() < h))
        .collect();
    let weight = |f: &FileMeta| f.file_size + f.value_bytes;
    let total: u64 = tables.iter().map(|f| weight(f)).sum();
    let mut before = 0u64;
    let mut best: Option<(u64, &Arc<FileMeta>)> = None;
    for (n, f) in tables.iter().enumerate() {
        if n > 0 {
            let off = before.abs_diff(total - before);
            if best.is_none_or(|(b, _)| off < b) {
                best = Some((off, f));
            }
        }
        before += weight(f);
    }
    best.map(|(_, f)| f.smallest_user_key().to_vec())
}

impl LevelRules for Unified {
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
        check_sorted_run(&v.levels[SORTED], "in the sorted run")?;
        let b = &v.boundaries;
        for f in &v.levels[SORTED] {
            if partition_of(b, f.smallest_user_key()) != partition_of(b, f.largest_user_key()) {
                return Err(format!(
                    "sorted table {} spans a partition boundary",
                    f.number
                ));
            }
        }
        Ok(())
    }
}

impl IndexShape for Unified {
    fn get(
        &self,
        v: &Version,
        tables: &TableCache,
        user_key: &[u8],
        snapshot: u64,
        class: IoClass,
    ) -> Result<Lookup> {
        let (unsorted, _) = self.unsorted_to_probe(v, user_key, false);
        self.probe(v, tables, user_key, unsorted, snapshot, class)
    }

    /// A key the partition's hash index holds has its newest version
    /// unsorted, where flushes keep values inline: nothing to count, and no
    /// table read. A tag false positive (about 1 in 13,000 keys with 4 hash
    /// functions) leaves a sorted pointer for its merge to count.
    /// Measured (5 GiB, 1 KiB Zipf updates, page cache capped at 853 MiB):
    /// reading the unsorted table of each flushed key took 6.5 GB of the
    /// 10.9 GB read over 6 GiB of updates, a device read per hot key.
    fn get_shadowed(&self, v: &Version, tables: &TableCache, user_key: &[u8]) -> Result<Lookup> {
        let (unsorted, indexed) = self.unsorted_to_probe(v, user_key, true);
        if indexed {
            return Ok(Lookup::Found(key::Kind::Value, Vec::new(), 0));
        }
        self.probe(
            v,
            tables,
            user_key,
            unsorted,
            key::MAX_SEQUENCE,
            IoClass::Flush,
        )
    }

    fn note_scan(&self, _v: &Version) -> bool {
        self.scans.fetch_add(1, Ordering::Relaxed) == 0
    }

    /// While scans run (one started since the last pick), the partition
    /// with the most unsorted tables, once it has more than the scan merge
    /// limit, merges them into one table that stays unsorted (values
    /// inline, §III-F: "merge all SSTables in the UnsortedStore into a big
    /// one which keeps all KV pairs fully sorted"). Only a partition whose
    /// tables lie within it (no table spans a boundary): the output is
    /// one table, numbered when picked.
    fn pick_scan_merge(&self, v: &Version, busy: &HashSet<u64>) -> Option<CompactionPlan> {
        if self.scans.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let b = &v.boundaries;
        let mut counts = vec![0usize; b.len() + 1];
        for f in &v.levels[UNSORTED] {
            counts[partition_of(b, f.smallest_user_key())] += 1;
        }
        let mut order: Vec<usize> = (0..counts.len())
            .filter(|&i| counts[i] > self.scan_merge_limit)
            .collect();
        order.sort_by_key(|&i| std::cmp::Reverse(counts[i]));
        for i in order {
            let (lo, hi) = range_of(b, i);
            let files: Vec<Arc<FileMeta>> = v.levels[UNSORTED]
                .iter()
                .filter(|f| partition_of(b, f.smallest_user_key()) == i)
                .cloned()
                .collect();
            let inside = |f: &Arc<FileMeta>| {
                f.smallest_user_key() >= lo && hi.is_none_or(|h| f.largest_user_key() < h)
            };
            // Tables of the neighbours that reach into it would have to be
            // merged too, and cut into more than one output.
            let spanned = v.levels[UNSORTED].iter().any(|f| {
                partition_of(b, f.smallest_user_key()) != i
                    && f.largest_user_key() >= lo
                    && hi.is_none_or(|h| f.smallest_user_key() < h)
            });
            if spanned
                || !files.iter().all(inside)
                || files.iter().any(|f| busy.contains(&f.number))
            {
                continue;
            }
            self.scans.store(0, Ordering::Relaxed);
            self.scan_merges.fetch_add(1, Ordering::Relaxed);
            // A merge like the others, but into one table that stays
            // unsorted, values inline.
            let mut plan = self.merge_into_sorted_run(vec![CompactionInput {
                level: UNSORTED,
                files,
                sorted_run: false,
            }]);
            plan.output_level = UNSORTED;
            plan.target_file_size_bytes = u64::MAX;
            plan.separate_values = false;
            return Some(plan);
        }
        None
    }

    /// The partition whose UnsortedStore is fullest, once it reaches the
    /// unsorted limit, or one that has reached the partition size limit and
    /// can split (its merge splits it, §III-D). A partition's size is its
    /// SortedStore's, values included: what its data comes to once merged,
    /// without the versions its UnsortedStore holds that the merge drops.
    fn pick_compaction(&self, v: &Version, busy: &HashSet<u64>) -> Option<CompactionPlan> {
        let loads = loads(v);
        let mut due: Vec<usize> = (0..loads.len())
            .filter(|&i| {
                let l = &loads[i];
                l.unsorted >= self.unsorted_limit_bytes
                    || (l.sorted >= self.partition_size_limit_bytes && l.sorted_tables >= 2)
            })
            .collect();
        due.sort_by_key(|&i| std::cmp::Reverse(loads[i].unsorted));
        due.into_iter()
            .find_map(|i| self.partition_merge(v, i, &loads[i], busy))
    }

    /// Its partition merges also separate values and collect value tables.
    fn shadow_compaction_does_more_than_count(&self) -> bool {
        true
    }

    /// The merge of the partition with the most unsorted bytes: unsorted
    /// versions meet the pointers they shadow.
    fn pick_shadow_compaction(&self, v: &Version, busy: &HashSet<u64>) -> Option<CompactionPlan> {
        let loads = loads(v);
        let mut order: Vec<usize> = (0..loads.len())
            .filter(|&i| loads[i].unsorted > 0)
            .collect();
        order.sort_by_key(|&i| std::cmp::Reverse(loads[i].unsorted));
        order
            .into_iter()
            .find_map(|i| self.partition_merge(v, i, &loads[i], busy))
    }

    fn pick_range_compaction(
        &self,
        v: &Version,
        level: usize,
        lo: &[u8],
        hi: &[u8],
    ) -> Option<CompactionPlan> {
        match level {
            // Every partition's unsorted tables in the range, at once (the
            // outputs are cut at the boundaries).
            UNSORTED => self
                .merge_plan(v, lo, Upper::Through(hi.to_vec()), &HashSet::new())
                .filter(|p| !p.inputs[0].files.is_empty()),
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

    /// Every unsorted table overlapping `lo..=hi` (closed under overlap,
    /// as a partition's merge is) and every sorted table overlapping them
    /// or the range: all the pointers into a value file of that range are
    /// in the sorted inputs, and the unsorted versions that shadow them
    /// meet them, so none of the merge's copies is of a record a newer
    /// version already made garbage (`docs/design.md`, "Garbage
    /// collection").
    fn pick_gc_compaction(
        &self,
        v: &Version,
        busy: &HashSet<u64>,
        lo: &[u8],
        hi: &[u8],
    ) -> Option<CompactionPlan> {
        self.merge_plan_covering(v, lo, Upper::Through(hi.to_vec()), Some((lo, hi)), busy)
    }

    fn is_bottommost_for(&self, v: &Version, level: usize, user_key: &[u8]) -> bool {
        level == SORTED || sorted_run_table(&v.levels[SORTED], user_key).is_none()
    }

    fn scores(&self, v: &Version) -> Vec<f64> {
        let loads = loads(v);
        let worst = |f: &dyn Fn(&PartitionLoad) -> u64, limit: u64| {
            loads.iter().map(f).max().unwrap_or(0) as f64 / limit.max(1) as f64
        };
        vec![
            worst(&|l| l.unsorted, self.unsorted_limit_bytes),
            worst(&|l| l.sorted, self.partition_size_limit_bytes),
        ]
    }

    /// Writes slow down when a partition's UnsortedStore reaches 1.5 times
    /// the unsorted limit and stop at twice it: lookups stay cheap under
    /// the hash index, but scans merge every unsorted table and the index's
    /// memory grows with them.
    fn write_pressure(&self, v: &Version) -> WritePressure {
        let bytes = Self::max_unsorted(v);
        if bytes >= self.unsorted_limit_bytes.saturating_mul(2) {
            WritePressure::Stop
        } else if bytes >= self.unsorted_limit_bytes.saturating_mul(3) / 2 {
            WritePressure::Slowdown
        } else {
            WritePressure::None
        }
    }

    fn index_flushed(
        &self,
        base: &Version,
        f: &FileMeta,
        entries: &mut dyn InternalIterator,
    ) -> Result<()> {
        let (lo, hi) = (f.smallest_user_key(), f.largest_user_key());
        let mut keys: Vec<Vec<u8>> = Vec::new();
        entries.seek(&key::encode(lo, key::MAX_SEQUENCE, key::KIND_SEEK));
        while entries.valid() {
            let uk = key::user_key(entries.key());
            if uk > hi {
                break;
            }
            if keys.last().is_none_or(|k| k.as_slice() != uk) {
                keys.push(uk.to_vec());
            }
            entries.next();
        }
        entries.status()?;
        let (partition, _) = range_of(&base.boundaries, partition_of(&base.boundaries, lo));
        self.index(partition, f.number, &keys);
        self.since_checkpoint
            .fetch_add(f.file_size, Ordering::Relaxed);
        Ok(())
    }

    /// The estimated bytes of the dead versions the unsorted tables of `v`
    /// hold: each table's shadowed keys times its mean inline entry (keys
    /// and values; exact for values of one size). A tag false positive
    /// (1 in 65,536 entries compared) counts a live version dead.
    fn inline_garbage(&self, v: &Version) -> u64 {
        let tables: std::collections::HashMap<u64, &FileMeta> = v.levels[UNSORTED]
            .iter()
            .map(|f| (f.number, &**f))
            .collect();
        let all = self.generations.read();
        let mut bytes = 0u64;
        for (number, n) in all.values().flatten().flat_map(HashIndex::shadowed) {
            let Some((f, p)) = tables.get(&number).and_then(|f| Some((f, f.payload?))) else {
                continue;
            };
            let dead = u128::from(n.min(f.entries));
            bytes += (u128::from(p.inline_bytes) * dead)
                .checked_div(u128::from(f.entries))
                .unwrap_or(0) as u64;
        }
        bytes
    }

    fn shape_stats(&self, _v: &Version, s: &mut crate::stats::ShapeStats) {
        let all = self.generations.read();
        let gens = || all.values().flatten();
        s.hash_index_bytes = gens().map(|g| g.memory_bytes() as u64).sum();
        s.hash_index_generations = gens().count();
        s.hash_index_entries = gens().map(HashIndex::entries).sum();
        s.hash_index_load = all
            .values()
            .filter_map(|g| g.last())
            .map(HashIndex::load_factor)
            .fold(0.0, f64::max);
        s.partitions = self.partitions.load(Ordering::Relaxed);
        s.partition_splits = self.splits.load(Ordering::Relaxed);
        s.hash_index_checkpoints = self.checkpoints.load(Ordering::Relaxed);
        s.hash_index_reindexed_at_open = self.reindexed.load(Ordering::Relaxed);
        s.hash_index_checkpoint_rejected = self.checkpoint_rejected.load(Ordering::Relaxed);
        s.scan_merges = self.scan_merges.load(Ordering::Relaxed);
    }

    fn merge_started(&self, plan: &CompactionPlan) {
        let mut all = self.generations.write();
        for gens in all.values_mut() {
            let holds_input = gens
                .last()
                .is_some_and(|g| plan.input_files().any(|f| g.contains_table(f.number)));
            if holds_input {
                gens.push(HashIndex::new(self.buckets, self.functions));
            }
        }
    }

    fn installed(&self, v: &Version) {
        let now = v.boundaries.len() + 1;
        let before = self.partitions.swap(now, Ordering::Relaxed);
        self.splits
            .fetch_add(now.saturating_sub(before) as u64, Ordering::Relaxed);
        let mut all = self.generations.write();
        for gens in all.values_mut() {
            let last = gens.len() - 1;
            let mut i = 0;
            gens.retain(|g| {
                let keep = (i == last && !g.tables().is_empty())
                    || v.levels[UNSORTED]
                        .iter()
                        .any(|f| g.contains_table(f.number));
                i += 1;
                keep
            });
        }
        // A partition whose tables were all merged frees its index.
        all.retain(|_, gens| !gens.is_empty());
    }

    /// Loads the checkpoint, if there is one and it reads back intact (it
    /// is an accelerator: a damaged or missing one is set aside, and
    /// `Stats` says so), then indexes every unsorted table it does not
    /// cover by reading the table's keys.
    fn opened(
        &self,
        v: &Version,
        tables: &TableCache,
        checkpoint: Option<(&Path, Result<Vec<u8>>)>,
    ) -> Result<()> {
        self.partitions
            .store(v.boundaries.len() + 1, Ordering::Relaxed);
        if let Some((path, data)) = checkpoint {
            match data.and_then(|d| checkpoint::decode(&d, path)) {
                Ok(loaded) => *self.generations.write() = loaded,
                Err(_) => self.checkpoint_rejected.store(true, Ordering::Relaxed),
            }
        }
        let mut reindexed = 0;
        for f in &v.levels[UNSORTED] {
            let covered = self
                .generations
                .read()
                .values()
                .flatten()
                .any(|g| g.contains_table(f.number));
            if covered {
                continue;
            }
            let t = tables.get(f.number, f.file_size, IoClass::Compaction)?;
            let mut it = t.iter(IoClass::Compaction, false);
            self.index_flushed(v, f, &mut it)?;
            reindexed += 1;
        }
        self.reindexed.store(reindexed, Ordering::Relaxed);
        // Generations of tables merged since the checkpoint go.
        self.installed(v);
        Ok(())
    }

    /// Every half unsorted limit of flushed bytes (§III-G).
    fn checkpoint_due(&self) -> bool {
        self.since_checkpoint.load(Ordering::Relaxed) >= self.unsorted_limit_bytes / 2
    }

    fn checkpoint(&self) -> Option<Vec<u8>> {
        let all = self.generations.read();
        self.since_checkpoint.store(0, Ordering::Relaxed);
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        Some(checkpoint::encode(&all))
    }
}

#[cfg(test)]
mod tests;
