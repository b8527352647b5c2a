//! The `partitioned` key index shape: LightKV's partition compaction with
//! the weight rule (LightKV, ICDE, §III-F), and its answer to skew (§III-G).
//!
//! The key space is cut into **key-range partitions** by boundary keys kept
//! in the version (`Version::boundaries`, the manifest's partition boundary
//! records, shared with the unified shape). A table's **level is its
//! compaction weight**: a flushed table has weight 0, and a merge of `CS`
//! tables of weight `w` writes weight `w + 1`. A table is a **member** of
//! every partition its key range overlaps: flushes and merges cut their
//! outputs at the boundaries, so a table spans two partitions only when a
//! split added a boundary across it.
//!
//! Invariant (checked by [`LevelRules::check`]): within each partition, the
//! members ordered oldest first are ordered by weight, heaviest first, and
//! within a weight by table number. So a lookup reads the members holding
//! its key lightest first, newest number first, and stops at the first
//! entry it finds. Why it holds:
//! - a flush adds a weight-0 table newer than every member (flushes run one
//!   at a time, oldest first, so numbers follow age);
//! - a merge takes the `CS` oldest members of the lowest weight `w` held
//!   `CS` times (`crate::lightkv::compaction::pick`), and, for every input
//!   that spans into another partition, that partition's members of weight
//!   `w` older than the input (the closure below), so in every partition it
//!   touches it takes the oldest members of weight `w`; its output, weight
//!   `w + 1`, is younger than every heavier member and older than every
//!   lighter one, and numbered after every table of weight `w + 1`. At most
//!   one merge runs among the partitions a merge touches (a busy member
//!   keeps a partition out of picks);
//! - a split adds a boundary and moves nothing: each side's members are a
//!   subset of the partition's, in the same order.
//!
//! A tombstone is dropped only where no table at the output's weight or
//! heavier holds its key ([`IndexShape::is_bottommost_for`]): those are the
//! older tables outside the merge.
//!
//! **Splits (§III-G).** The paper's RH-Tree partitions are fixed once the
//! tree has `MAX_LEAF_NODES` leaves, so a skewed key distribution grows one
//! partition's chain of tables without bound; the paper proposes a load
//! factor and leaves it. Here a partition whose share of the table bytes
//! (a spanning table counted in equal parts in each partition it spans)
//! passes `split_bytes` gets a boundary by a manifest edit alone: no byte
//! is rewritten, and merges cut the spanning tables apart later. Where the
//! boundary goes:
//! - at one of the write buffer's cuts ([`IndexShape::flush_cuts`], the
//!   lightkv buffer's partitions) inside the partition, the one nearest the
//!   median of its weight-0 members' end keys. A flushed unit holds the keys
//!   of one buffer partition, so with boundaries only at its cuts it falls
//!   into one partition whole: one table per unit, and `N` in the weight
//!   rule's `log_CS(N) + 1` counts units, not the pieces a boundary inside
//!   a unit's range would cut it into (LightKV, ICDE, §III-D and §III-F: a
//!   flushed leaf's segment is one table of its partition);
//! - inside one buffer partition only when the partition is skewed, its
//!   share at least [`SKEW_FACTOR`] times the mean share of a buffer
//!   partition: then at the median of its weight-0 members' end keys (the
//!   recent writes, so a hot range is cut where it is hot), and the units
//!   of that buffer partition are cut in pieces again. A uniform load never
//!   splits a partition that holds one buffer partition, however large;
//! - at the median, as in the last case, while no cuts are known.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::unified::range_of;
use super::{probe_in_order, CompactionInput, CompactionPlan, IndexShape, WritePressure};
use crate::error::Result;
use crate::fs::IoClass;
use crate::iter::{Entry, Failed, InternalIterator, MergingIterator, Parts, PartsCursor};
use crate::key;
use crate::lightkv::compaction::{self as weights, Weighted};
use crate::memtable::Lookup;
use crate::table::TableCache;
use crate::version::{FileMeta, LevelRules, Version};

/// Weights a table may have: a merge into the last one is never picked.
/// With `CS` 4 a partition reaches weight 15 only after 4^15 flushes.
pub(crate) const NUM_WEIGHTS: usize = 16;

/// How many times the mean share of a buffer partition a partition inside
/// one buffer partition must hold to split inside it (module
/// documentation). Under a uniform load the buffer's partitions differ by
/// about 2x (the tree splits a full leaf at its median), so 4 is skew.
pub(crate) const SKEW_FACTOR: u64 = 4;

/// Parameters of the partitioned shape (from `Options`).
#[derive(Debug)]
pub(crate) struct Partitioned {
    /// The paper's compaction size `CS`.
    pub(crate) compaction_size: usize,
    /// A partition's table bytes at which it splits (§III-G).
    pub(crate) split_bytes: u64,
    /// Weight-0 tables in one partition at which writes slow down, and
    /// stop (merges behind): `CS` plus the leveled triggers' distance past
    /// their compaction trigger ([`Partitioned::new`]).
    pub(crate) slowdown_tables: usize,
    pub(crate) stop_tables: usize,
    /// A split picked and not yet installed: picks add no other boundary
    /// until it is (a split has no inputs to mark busy).
    pending_split: Mutex<Option<Vec<u8>>>,
    /// The write buffer's cuts, sorted ([`IndexShape::flush_cuts`]); `None`
    /// until the buffer tells them.
    flush_cuts: Mutex<Option<Vec<Vec<u8>>>>,
    /// Partitions of the current version, and splits installed since open
    /// (for `Stats`).
    partitions: AtomicUsize,
    splits: AtomicU64,
    /// User scans' reads beyond one table per partition, for the scan merge
    /// ([`IndexShape::pick_scan_merge`]), and the merges picked since open.
    seek_reads: Arc<SeekReads>,
    scan_merges: AtomicU64,
    /// Whole-partition merges picked under the space limit's pressure
    /// ([`IndexShape::pick_garbage_compaction`]) since open.
    garbage_merges: AtomicU64,
}

/// Table bytes of a partition per member read its seeks made beyond one
/// table before the partition is merged whole. The rule is the ski
/// rental's: keep paying the extra reads until they have cost what the
/// merge costs, then merge, which never costs more than twice the best
/// choice made knowing the future. Both counted in bytes of I/O: a read is
/// a block (4 KiB), a merge of `S` bytes reads and writes `S`, so a
/// partition is merged once its extra reads reach `2 S / 4 KiB`, one per
/// 2 KiB of its tables (a partition of 17 MB: about 8,700 extra reads,
/// 1,600 seeks among 6 tables). LevelDB's seek compaction allows one seek
/// per 16 KiB (`db/version_set.cc`: a seek of 10 ms costs what compacting
/// 40 KB costs on a disk), counting point lookups that bloom filters now
/// answer without a read; RocksDB deprecated it for hurting reads, and
/// LevelDB's users turn it off. Here only a scan's seeks count, which no
/// filter spares, and a merge waits 8 times as long.
pub(crate) const SEEK_READ_BYTES: u64 = 2 << 10;

/// Per partition (by its smallest key), the member reads user scans made
/// there beyond one table since the partition was last merged whole, and
/// whether one may now be due.
#[derive(Debug, Default)]
struct SeekReads {
    counts: Mutex<std::collections::HashMap<Vec<u8>, u64>>,
    due: AtomicBool,
    /// A merge became due since the engine was last told
    /// ([`IndexShape::note_scan`]): one wake-up of the background per
    /// merge due, not one per cursor while it waits for a thread.
    wake: AtomicBool,
}

impl SeekReads {
    /// A user scan entered the partition starting at `lo`, whose members
    /// are `members`: each member past the first costs it a block read.
    fn entered(&self, lo: &[u8], members: &[Arc<FileMeta>]) {
        let Some(extra) = members.len().checked_sub(1).filter(|&n| n > 0) else {
            return;
        };
        let mut counts = self.counts.lock();
        let reads = match counts.get_mut(lo) {
            Some(r) => r,
            None => counts.entry(lo.to_vec()).or_default(),
        };
        *reads += extra as u64;
        let bytes: u64 = members.iter().map(|f| f.file_size).sum();
        if reads.saturating_mul(SEEK_READ_BYTES) >= bytes && !self.due.swap(true, Ordering::Relaxed)
        {
            self.wake.store(true, Ordering::Relaxed);
        }
    }
}

/// The partitions (indexes) table `f` overlaps.
fn partitions_of(boundaries: &[Vec<u8>], f: &FileMeta) -> std::ops::RangeInclusive<usize> {
    super::unified::partition_of(boundaries, f.smallest_user_key())
        ..=super::unified::partition_of(boundaries, f.largest_user_key())
}

/// A version's tables per partition, each partition's newest first: the
/// lightest weight first, then the larger number (each weight's tables are
/// in number order, `normalize`). A lookup reads its partition's list, not
/// every table of the version; built once per version, by its first lookup.
struct Members(Vec<Vec<Arc<FileMeta>>>);

impl Members {
    fn of(v: &Version) -> &Members {
        v.derived
            .get_or_init(|| {
                let mut m = vec![Vec::new(); v.boundaries.len() + 1];
                for weight in &v.levels {
                    for f in weight.iter().rev() {
                        for p in partitions_of(&v.boundaries, f) {
                            m[p].push(f.clone());
                        }
                    }
                }
                Box::new(Members(m))
            })
            .downcast_ref()
            .expect("a partitioned version derives its members")
    }
}

/// Oldest first: heaviest weight first, then by number.
fn age_order(a: &(usize, Arc<FileMeta>), b: &(usize, Arc<FileMeta>)) -> std::cmp::Ordering {
    b.0.cmp(&a.0).then(a.1.number.cmp(&b.1.number))
}

impl Partitioned {
    pub(crate) const NAME: &'static str = "partitioned";

    /// The shape for `CS` = `compaction_size`, splitting at `split_bytes`.
    /// The L0 triggers (`compaction`, `slowdown`, `stop`, as the leveled
    /// shape has them) count weight-0 tables past the merge that is due:
    /// writes slow down at `CS + slowdown - compaction` weight-0 tables in
    /// one partition and stop at `CS + stop - compaction`. A partition
    /// reaches `CS` weight-0 tables between every two merges, so
    /// thresholds not shifted by `CS` slowed every merge's wait once `CS`
    /// reached them and, from `CS` = `stop`, stopped writes for good
    /// (`docs/experiments.md`, "LightKV: compaction size 8, and write
    /// amplification at 4 GiB").
    pub(crate) fn new(
        compaction_size: usize,
        split_bytes: u64,
        [compaction, slowdown, stop]: [usize; 3],
    ) -> Partitioned {
        assert!(compaction_size >= 2, "a compaction size of at least 2");
        let past_due = |trigger: usize| compaction_size + trigger.saturating_sub(compaction).max(1);
        Partitioned {
            compaction_size,
            split_bytes,
            slowdown_tables: past_due(slowdown),
            stop_tables: past_due(stop).max(past_due(slowdown)),
            pending_split: Mutex::new(None),
            flush_cuts: Mutex::new(None),
            partitions: AtomicUsize::new(1),
            splits: AtomicU64::new(0),
            seek_reads: Arc::default(),
            scan_merges: AtomicU64::new(0),
            garbage_merges: AtomicU64::new(0),
        }
    }

    /// Every partition's members, oldest first, as (weight, table).
    fn members(v: &Version) -> Vec<Vec<(usize, Arc<FileMeta>)>> {
        let mut out = vec![Vec::new(); v.boundaries.len() + 1];
        for (w, f) in v.all_files() {
            for p in partitions_of(&v.boundaries, f) {
                out[p].push((w, f.clone()));
            }
        }
        for m in &mut out {
            m.sort_by(age_order);
        }
        out
    }

    /// Partitions `parts` and those the tables of any of them span into,
    /// until none is added, with every table of them (and its weight): a
    /// merge of all of them leaves its outputs the only members of those
    /// partitions, so the order of weights holds whatever weight it writes.
    fn closure(
        v: &Version,
        mut parts: HashSet<usize>,
    ) -> (HashSet<usize>, Vec<(usize, Arc<FileMeta>)>) {
        let b = &v.boundaries;
        loop {
            let before = parts.len();
            let files: Vec<(usize, Arc<FileMeta>)> = v
                .all_files()
                .filter(|(_, f)| partitions_of(b, f).any(|p| parts.contains(&p)))
                .map(|(w, f)| (w, f.clone()))
                .collect();
            for (_, f) in &files {
                parts.extend(partitions_of(b, f));
            }
            if parts.len() == before {
                return (parts, files);
            }
        }
    }

    /// The weight merge due in partition `p`, closed over the partitions
    /// its inputs span; `None` when none is due or a member it touches is
    /// busy.
    fn weight_merge(
        &self,
        v: &Version,
        members: &[Vec<(usize, Arc<FileMeta>)>],
        p: usize,
        busy: &HashSet<u64>,
    ) -> Option<CompactionPlan> {
        let weighted: Vec<Weighted> = members[p]
            .iter()
            .map(|(w, f)| Weighted {
                id: f.number,
                weight: *w as u32,
            })
            .collect();
        let m = weights::pick(&weighted, self.compaction_size)?;
        let w = m.weight as usize - 1;
        if w + 1 >= NUM_WEIGHTS {
            return None;
        }
        let mut inputs: Vec<Arc<FileMeta>> = members[p][m.inputs]
            .iter()
            .map(|(_, f)| f.clone())
            .collect();
        // The closure: an input spanning into partition q takes q's
        // members of weight w older than it.
        let mut touched: HashSet<usize> = [p].into_iter().collect();
        let mut i = 0;
        while i < inputs.len() {
            let f = inputs[i].clone();
            for q in partitions_of(&v.boundaries, &f) {
                touched.insert(q);
                for (qw, g) in &members[q] {
                    if *qw == w
                        && g.number < f.number
                        && !inputs.iter().any(|x| x.number == g.number)
                    {
                        inputs.push(g.clone());
                    }
                }
            }
            i += 1;
        }
        let touched_busy = touched
            .iter()
            .any(|&q| members[q].iter().any(|(_, f)| busy.contains(&f.number)));
        if touched_busy {
            return None;
        }
        inputs.sort_by_key(|f| f.number);
        Some(Self::plan(
            inputs.into_iter().map(|f| (w, f)).collect(),
            w + 1,
        ))
    }

    /// A merge of `files` (each with its weight, read on its own) into
    /// tables of weight `output_level`.
    fn plan(files: Vec<(usize, Arc<FileMeta>)>, output_level: usize) -> CompactionPlan {
        CompactionPlan {
            inputs: files
                .into_iter()
                .map(|(level, f)| CompactionInput {
                    level,
                    files: vec![f],
                    sorted_run: false,
                })
                .collect(),
            output_level,
            // One output per partition: the rule counts tables.
            target_file_size_bytes: u64::MAX,
            overlap_limit: Vec::new(),
            max_overlap_bytes: u64::MAX,
            trivial_move: false,
            separate_values: false,
            new_boundary: None,
            relocate: Vec::new(),
            output_number: None,
        }
    }

    /// A merge of every table of some partitions (`files`, a
    /// [`Partitioned::closure`]) into one table per partition of their
    /// heaviest weight, at least 1 (older than every weight-0 table to
    /// come): the outputs are the only members of those partitions, so
    /// the order of weights holds (scan merges, merges for space).
    fn whole_merge(files: Vec<(usize, Arc<FileMeta>)>) -> CompactionPlan {
        let heaviest = files.iter().map(|(w, _)| *w).max().unwrap_or(0);
        Self::plan(files, heaviest.clamp(1, NUM_WEIGHTS - 1))
    }

    /// Partition `p`'s share of the table bytes: each member's size over
    /// the number of partitions it spans.
    fn share_bytes(v: &Version, members: &[(usize, Arc<FileMeta>)]) -> u64 {
        members
            .iter()
            .map(|(_, f)| f.file_size / partitions_of(&v.boundaries, f).count() as u64)
            .sum()
    }

    /// The inline bytes of partition members `newest_first` (as
    /// [`Members`] lists them) but the oldest, each spanning table in
    /// equal parts in the partitions it spans.
    fn above_oldest_bytes(v: &Version, newest_first: &[Arc<FileMeta>]) -> u64 {
        let Some((_, above)) = newest_first.split_last() else {
            return 0;
        };
        above
            .iter()
            .map(|f| {
                let inline = f.payload.map_or(f.file_size, |p| p.inline_bytes);
                inline / partitions_of(&v.boundaries, f).count() as u64
            })
            .sum()
    }

    /// The key at which partition `p`, holding `share` of the version's
    /// `total` table bytes, splits (module documentation): at the buffer's
    /// cut inside it nearest the median of its weight-0 members' end keys
    /// (of all its members', with fewer than two weight-0 ones); at that
    /// median when it lies inside one buffer partition and is skewed, or no
    /// cuts are known. `None` when it does not split, or no key strictly
    /// inside it is at hand.
    fn split_key(
        v: &Version,
        members: &[(usize, Arc<FileMeta>)],
        p: usize,
        (share, total): (u64, u64),
        cuts: Option<&[Vec<u8>]>,
    ) -> Option<Vec<u8>> {
        let (lo, hi) = range_of(&v.boundaries, p);
        let light: Vec<&Arc<FileMeta>> = members
            .iter()
            .filter(|(w, _)| *w == 0)
            .map(|(_, f)| f)
            .collect();
        let from: Vec<&Arc<FileMeta>> = if light.len() >= 2 {
            light
        } else {
            members.iter().map(|(_, f)| f).collect()
        };
        let mut keys: Vec<&[u8]> = from
            .iter()
            .flat_map(|f| [f.smallest_user_key(), f.largest_user_key()])
            .filter(|k| *k > lo && hi.is_none_or(|h| *k < h))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let median = || keys.get(keys.len() / 2).map(|k| k.to_vec());
        let Some(cuts) = cuts else {
            return median();
        };
        let first = cuts.partition_point(|c| c.as_slice() <= lo);
        let end = hi.map_or(cuts.len(), |h| cuts.partition_point(|c| c.as_slice() < h));
        let inside = &cuts[first..end.max(first)];
        if inside.is_empty() {
            let buffer_mean = total / (cuts.len() as u64 + 1);
            return (share >= SKEW_FACTOR.saturating_mul(buffer_mean))
                .then(median)
                .flatten();
        }
        // The cut leaving the end keys most evenly on its two sides.
        let half = keys.len() / 2;
        inside
            .iter()
            .min_by_key(|c| keys.partition_point(|k| k < &c.as_slice()).abs_diff(half))
            .cloned()
    }

    fn split(
        &self,
        v: &Version,
        members: &[Vec<(usize, Arc<FileMeta>)>],
        busy: &HashSet<u64>,
    ) -> Option<CompactionPlan> {
        let mut pending = self.pending_split.lock();
        if pending.is_some() {
            return None;
        }
        let cuts = self.flush_cuts.lock();
        let total: u64 = v.all_files().map(|(_, f)| f.file_size).sum();
        let key = (0..members.len()).find_map(|p| {
            let share = Self::share_bytes(v, &members[p]);
            if share < self.split_bytes || members[p].iter().any(|(_, f)| busy.contains(&f.number))
            {
                return None;
            }
            Self::split_key(v, &members[p], p, (share, total), cuts.as_deref())
        })?;
        *pending = Some(key.clone());
        let mut plan = Self::plan(Vec::new(), 0);
        plan.trivial_move = true;
        plan.new_boundary = Some(key);
        Some(plan)
    }
}

impl LevelRules for Partitioned {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn num_levels(&self) -> usize {
        NUM_WEIGHTS
    }

    fn normalize(&self, levels: &mut [Vec<Arc<FileMeta>>]) {
        for l in levels {
            l.sort_by_key(|f| f.number);
        }
    }

    /// The rule's invariant is about the age of data (module
    /// documentation), which table numbers do not show: a merge's output
    /// is numbered after lighter tables flushed while it ran. The model,
    /// crash and race suites check it by what reads return, and `verify`
    /// key by key (`verify_order`).
    fn check(&self, _v: &Version) -> Result<(), String> {
        Ok(())
    }
}

impl IndexShape for Partitioned {
    fn get(
        &self,
        v: &Version,
        tables: &TableCache,
        user_key: &[u8],
        snapshot: u64,
        class: IoClass,
    ) -> Result<Lookup> {
        let p = super::unified::partition_of(&v.boundaries, user_key);
        let holding = Members::of(v).0[p]
            .iter()
            .filter(|f| f.holds_user_key(user_key))
            .map(|f| &**f);
        probe_in_order(tables, holding, user_key, snapshot, class)
    }

    /// A point read of the key's partition, table by table newest first,
    /// through each table's hash leaf and filter. A seek of the scan
    /// cursor per record was half of a crash recovery's time, and counted
    /// towards scan merges (`docs/experiments.md`, "LightKV: a parallel
    /// recovery scan").
    fn newest_sequence(
        &self,
        v: &Arc<Version>,
        tables: &Arc<TableCache>,
        user_key: &[u8],
    ) -> Result<Option<u64>> {
        let p = super::unified::partition_of(&v.boundaries, user_key);
        let seek = key::encode(user_key, key::MAX_SEQUENCE, key::KIND_SEEK);
        let hash = crate::table::bloom::key_hash(user_key);
        for f in Members::of(v).0[p]
            .iter()
            .filter(|f| f.holds_user_key(user_key))
        {
            let t = tables.table_of(&f.table, f.number, f.file_size, IoClass::Journal)?;
            if let Some((ik, _)) = t.get(&seek, user_key, hash, IoClass::Journal)? {
                return Ok(Some(key::sequence(&ik)));
            }
        }
        Ok(None)
    }

    /// The weight rule's invariant, checked key by key where `check`
    /// cannot (a merge's output is numbered after lighter tables flushed
    /// while it ran): in every partition, a key's versions, taken in the
    /// order point reads probe the members (`Members`: lightest weight
    /// first, then the larger number), must come newest first. Otherwise a
    /// point read answers an older version than a scan, which merges by
    /// sequence number. Reads each member once per partition it spans,
    /// merging them by hand to know which member each entry came from.
    fn verify_order(&self, v: &Arc<Version>, tables: &Arc<TableCache>) -> Result<u64> {
        let mut n = 0;
        for (p, members) in Members::of(v).0.iter().enumerate() {
            let (lo, hi) = range_of(&v.boundaries, p);
            let start = key::encode(lo, key::MAX_SEQUENCE, key::KIND_SEEK);
            let mut its = Vec::with_capacity(members.len());
            for f in members {
                let t = tables.get(f.number, f.file_size, IoClass::UserRead)?;
                let mut it = t.iter(IoClass::UserRead, false);
                it.seek(&start);
                its.push((t, it));
            }
            // The previous entry: its user key, its member's probe rank,
            // its sequence number.
            let mut last: (Vec<u8>, usize, u64) = (Vec::new(), 0, 0);
            let mut first = true;
            loop {
                let mut at: Option<usize> = None;
                for (i, (_, it)) in its.iter().enumerate() {
                    it.status()?;
                    let live = it.valid() && hi.is_none_or(|h| key::user_key(it.key()) < h);
                    if live && at.is_none_or(|a| key::compare(it.key(), its[a].1.key()).is_lt()) {
                        at = Some(i);
                    }
                }
                let Some(i) = at else { break };
                let (t, it) = &mut its[i];
                let (user_key, seq) = (key::user_key(it.key()), key::sequence(it.key()));
                if !first && last.0 == user_key && i < last.1 {
                    let why = format!(
                        "key {:?} at sequence {seq} in table {} is probed before table {} \
                         (partition {p}), which holds its newer version {}",
                        String::from_utf8_lossy(user_key),
                        members[i].number,
                        members[last.1].number,
                        last.2
                    );
                    return Err(crate::error::Error::corruption(t.path(), 0, why));
                }
                last.0.clear();
                last.0.extend_from_slice(user_key);
                (last.1, last.2, first) = (i, seq, false);
                n += 1;
                it.next();
            }
        }
        Ok(n)
    }

    /// One cursor over the partitions in range, in key order
    /// ([`TableParts`]): a seek reads the members of one partition,
    /// not every table in range. One iterator per table, as before, made
    /// each 100-pair scan seek in every table from its start key on
    /// (`docs/experiments.md`, "LightKV: scans by partition").
    fn scan_iterators(
        &self,
        v: &Arc<Version>,
        tables: &Arc<TableCache>,
        lower: Option<&[u8]>,
        upper: Option<&[u8]>,
    ) -> Vec<Box<dyn InternalIterator>> {
        vec![Box::new(PartsCursor::new(TableParts::new(
            v,
            tables,
            lower,
            upper,
            Some(self.seek_reads.clone()),
        )))]
    }

    /// Every table, partition by partition, for the engine's full scans
    /// and recounts: like a user scan, but its reads call for no merge.
    fn iterators(
        &self,
        v: &Arc<Version>,
        tables: &Arc<TableCache>,
    ) -> Vec<Box<dyn InternalIterator>> {
        vec![Box::new(PartsCursor::new(TableParts::new(
            v, tables, None, None, None,
        )))]
    }

    fn note_scan(&self, _v: &Version) -> bool {
        self.seek_reads.wake.swap(false, Ordering::Relaxed)
    }

    /// The partition whose seeks have read the most beyond one table, once
    /// they have read as many bytes too many as the partition holds
    /// ([`SeekReads`]), merged whole into one table per partition of its
    /// heaviest weight (at least 1: older than every weight-0 table to
    /// come): a seek then reads one table there. With it go the partitions
    /// its tables span into, whole ([`Partitioned::closure`]), so that the
    /// outputs are the only members of every partition the merge touches
    /// and the order of weights holds, once the extra reads of all of them
    /// have paid for all their bytes. None busy, and two tables or more.
    fn pick_scan_merge(&self, v: &Version, busy: &HashSet<u64>) -> Option<CompactionPlan> {
        if !self.seek_reads.due.swap(false, Ordering::Relaxed) {
            return None;
        }
        let members = &Members::of(v).0;
        let mut counts = self.seek_reads.counts.lock();
        let mut due: Vec<(u64, usize)> = counts
            .iter()
            .filter_map(|(lo, &reads)| {
                let p = super::unified::partition_of(&v.boundaries, lo);
                let bytes: u64 = members[p].iter().map(|f| f.file_size).sum();
                (range_of(&v.boundaries, p).0 == lo.as_slice()
                    && members[p].len() >= 2
                    && reads.saturating_mul(SEEK_READ_BYTES) >= bytes)
                    .then_some((reads, p))
            })
            .collect();
        due.sort_unstable_by_key(|&(reads, _)| std::cmp::Reverse(reads));
        for (k, &(_, p)) in due.iter().enumerate() {
            let (parts, files) = Self::closure(v, [p].into_iter().collect());
            // The merge costs the closure's bytes: the reads of all its
            // partitions must have paid for them.
            let reads: u64 = parts
                .iter()
                .filter_map(|&q| counts.get(range_of(&v.boundaries, q).0))
                .sum();
            let bytes: u64 = files.iter().map(|(_, f)| f.file_size).sum();
            if reads.saturating_mul(SEEK_READ_BYTES) < bytes
                || files.iter().any(|(_, f)| busy.contains(&f.number))
            {
                continue;
            }
            for q in parts {
                counts.remove(range_of(&v.boundaries, q).0);
            }
            if k + 1 < due.len() {
                // Another partition is due: the next pick looks again.
                self.seek_reads.due.store(true, Ordering::Relaxed);
            }
            self.scan_merges.fetch_add(1, Ordering::Relaxed);
            return Some(Self::whole_merge(files));
        }
        None
    }

    /// The inline bytes of every member of a partition but its oldest (a
    /// spanning table in equal parts in each partition it spans; a table
    /// written before the manifest recorded its payload counts whole).
    /// Under updates each entry there shadows an older version of its key
    /// further down the partition's age order, kept until a merge meets
    /// both: the space limit counts the share of them the flushes find
    /// shadowing as dead (`Core::shadowed_inline_garbage`), as it does
    /// the leveled shape's entries above its last level.
    fn inline_bytes_above_last_level(&self, v: &Version) -> u64 {
        Members::of(v)
            .0
            .iter()
            .map(|m| Self::above_oldest_bytes(v, m))
            .sum()
    }

    /// Under the space limit's pressure, while the versions counted dead
    /// above each partition's oldest member are worth reclaiming
    /// (`Core::inline_garbage_reclaimable`): the partition holding the
    /// most bytes above its oldest member, merged whole into one table per
    /// partition of its heaviest weight (at least 1), as the scan merge
    /// does and with the partitions its tables span into
    /// ([`Partitioned::closure`]): every version a newer one shadows is
    /// dropped, and the outputs are the only members of every partition
    /// the merge touches, so the order of weights holds. The weight rule
    /// alone never merges the heaviest tables of a partition with the
    /// lighter ones until `CS` of each weight accumulate, and under
    /// updates a partition so held up to twice its live data
    /// (`docs/experiments.md`, "LightKV: merges for space"). None busy,
    /// and two tables or more.
    fn merges_for_space_by_partition(&self) -> bool {
        true
    }

    fn pick_garbage_compaction(&self, v: &Version, busy: &HashSet<u64>) -> Option<CompactionPlan> {
        let members = &Members::of(v).0;
        let mut order: Vec<(u64, usize)> = members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.len() >= 2)
            .map(|(p, m)| (Self::above_oldest_bytes(v, m), p))
            .collect();
        order.sort_unstable_by_key(|&(bytes, _)| std::cmp::Reverse(bytes));
        order.into_iter().find_map(|(_, p)| {
            let (_, files) = Self::closure(v, [p].into_iter().collect());
            if files.iter().any(|(_, f)| busy.contains(&f.number)) {
                return None;
            }
            self.garbage_merges.fetch_add(1, Ordering::Relaxed);
            Some(Self::whole_merge(files))
        })
    }

    /// The partition with the most weight-0 members first; a split before
    /// merges when one is due.
    fn pick_compaction(&self, v: &Version, busy: &HashSet<u64>) -> Option<CompactionPlan> {
        let members = Self::members(v);
        if let Some(plan) = self.split(v, &members, busy) {
            return Some(plan);
        }
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by_key(|&p| {
            std::cmp::Reverse(members[p].iter().filter(|(w, _)| *w == 0).count())
        });
        order
            .into_iter()
            .find_map(|p| self.weight_merge(v, &members, p, busy))
    }

    /// Every table of every partition the range touches (closed over
    /// spanning tables) into one table per partition, heavier than all.
    fn pick_range_compaction(
        &self,
        v: &Version,
        level: usize,
        lo: &[u8],
        hi: &[u8],
    ) -> Option<CompactionPlan> {
        if level != 0 {
            return None;
        }
        let b = &v.boundaries;
        let parts =
            (super::unified::partition_of(b, lo)..=super::unified::partition_of(b, hi)).collect();
        let (_, files) = Self::closure(v, parts);
        if files.is_empty() {
            return None;
        }
        let heaviest = files.iter().map(|(w, _)| *w).max().unwrap_or(0);
        let out = (heaviest + 1).min(NUM_WEIGHTS - 1);
        Some(Self::plan(files, out))
    }

    /// True when no table of weight `level` or heavier (the older tables
    /// outside a merge into `level`) may hold `user_key`.
    fn is_bottommost_for(&self, v: &Version, level: usize, user_key: &[u8]) -> bool {
        v.levels.iter().skip(level).all(|files| {
            files
                .iter()
                .all(|f| user_key < f.smallest_user_key() || f.largest_user_key() < user_key)
        })
    }

    /// Per weight: the most tables of that weight in one partition, over
    /// `CS`.
    fn scores(&self, v: &Version) -> Vec<f64> {
        let mut s = vec![0.0; NUM_WEIGHTS];
        for m in Self::members(v) {
            for (w, score) in s.iter_mut().enumerate() {
                let n = m.iter().filter(|(mw, _)| *mw == w).count();
                *score = f64::max(*score, n as f64 / self.compaction_size as f64);
            }
        }
        s
    }

    fn write_pressure(&self, v: &Version) -> WritePressure {
        let mut counts = vec![0usize; v.boundaries.len() + 1];
        for f in &v.levels[0] {
            for p in partitions_of(&v.boundaries, f) {
                counts[p] += 1;
            }
        }
        let most = counts.into_iter().max().unwrap_or(0);
        if most >= self.stop_tables {
            WritePressure::Stop
        } else if most >= self.slowdown_tables {
            WritePressure::Slowdown
        } else {
            WritePressure::None
        }
    }

    fn installed(&self, v: &Version) {
        self.partitions
            .store(v.boundaries.len() + 1, Ordering::Relaxed);
        let mut pending = self.pending_split.lock();
        if pending
            .as_ref()
            .is_some_and(|k| v.boundaries.binary_search(k).is_ok())
        {
            *pending = None;
            self.splits.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn flush_cuts(&self, mut cuts: Vec<Vec<u8>>) {
        cuts.sort_unstable();
        cuts.dedup();
        // The empty key starts the key space; it cuts nothing.
        cuts.retain(|c| !c.is_empty());
        *self.flush_cuts.lock() = Some(cuts);
    }

    fn opened(
        &self,
        v: &Version,
        _tables: &TableCache,
        _checkpoint: Option<(&std::path::Path, Result<Vec<u8>>)>,
    ) -> Result<()> {
        self.partitions
            .store(v.boundaries.len() + 1, Ordering::Relaxed);
        Ok(())
    }

    fn shape_stats(&self, v: &Version, s: &mut crate::stats::ShapeStats) {
        let weight: std::collections::HashMap<u64, u32> =
            v.all_files().map(|(w, f)| (f.number, w as u32)).collect();
        s.partition_tables = Members::of(v)
            .0
            .iter()
            .enumerate()
            .map(|(p, m)| crate::stats::PartitionTables {
                smallest_key: range_of(&v.boundaries, p).0.to_vec(),
                tables: m.iter().map(|f| (weight[&f.number], f.file_size)).collect(),
            })
            .collect();
        s.partitions = self.partitions.load(Ordering::Relaxed);
        s.partition_splits = self.splits.load(Ordering::Relaxed);
        s.scan_merges = self.scan_merges.load(Ordering::Relaxed);
        s.garbage_merges = self.garbage_merges.load(Ordering::Relaxed);
    }
}

/// The partitions `first..first + len` of version `v` a scan goes over (a
/// [`PartsCursor`]): each one's members merged (newest first by the
/// merging iterator's sequence order), clipped to the partition's keys,
/// since a table a split left spanning two partitions is a member of both.
/// A seek so reads the members of one partition, where one iterator per
/// table read every table in range; and a partition's members are taken
/// when the cursor enters it, so a cursor costs nothing per partition it
/// does not enter, where listing every partition's members up front cost
/// a tenth of a seek's time (`docs/experiments.md`, "LightKV: scans by
/// partition").
struct TableParts {
    v: Arc<Version>,
    first: usize,
    len: usize,
    /// The scan's range: members outside it are not read.
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
    tables: Arc<TableCache>,
    /// Where a user scan counts the member reads it makes beyond one table
    /// per partition it enters; `None` for the engine's own full scans.
    seek_reads: Option<Arc<SeekReads>>,
}

impl TableParts {
    /// The partitions of `v` that keys from `lower` through `upper` (open
    /// ends `None`) belong to.
    fn new(
        v: &Arc<Version>,
        tables: &Arc<TableCache>,
        lower: Option<&[u8]>,
        upper: Option<&[u8]>,
        seek_reads: Option<Arc<SeekReads>>,
    ) -> TableParts {
        let b = &v.boundaries;
        let first = lower.map_or(0, |k| super::unified::partition_of(b, k));
        let last = upper.map_or(b.len(), |k| super::unified::partition_of(b, k));
        TableParts {
            v: v.clone(),
            first,
            len: (last + 1).saturating_sub(first),
            lower: lower.map(<[u8]>::to_vec),
            upper: upper.map(<[u8]>::to_vec),
            tables: tables.clone(),
            seek_reads,
        }
    }

    /// Partition `at`'s smallest key and the next one's (`None` for the
    /// last).
    fn range(&self, at: usize) -> (&[u8], Option<&[u8]>) {
        range_of(&self.v.boundaries, self.first + at)
    }
}

impl Parts for TableParts {
    fn len(&self) -> usize {
        self.len
    }
    fn enter(&self, at: usize, to: Entry<'_>) -> MergingIterator {
        let (lo, hi) = self.range(at);
        let members = &Members::of(&self.v).0[self.first + at];
        if let Some(reads) = &self.seek_reads {
            reads.entered(lo, members);
        }
        let children = members
            .iter()
            .filter(|f| f.meets_range(self.lower.as_deref(), self.upper.as_deref()))
            .map(|f| -> Box<dyn InternalIterator> {
                // The table's own iterator, not a run of one table: a
                // merge step asks every member for its key through it.
                match self.tables.get(f.number, f.file_size, IoClass::UserRead) {
                    Ok(t) => Box::new(t.iter(IoClass::UserRead, true)),
                    Err(e) => Box::new(Failed(e)),
                }
            })
            .collect();
        let mut inner = MergingIterator::new(children);
        let first = key::encode(lo, key::MAX_SEQUENCE, key::KIND_SEEK);
        match to {
            Entry::At(target) if key::compare(target, &first).is_gt() => inner.seek(target),
            Entry::At(_) | Entry::First => inner.seek(&first),
            Entry::Last => match hi {
                Some(hi) => {
                    inner.seek(&key::encode(hi, key::MAX_SEQUENCE, key::KIND_SEEK));
                    if inner.valid() {
                        inner.prev();
                    } else {
                        inner.seek_to_last();
                    }
                }
                None => inner.seek_to_last(),
            },
        }
        inner
    }
    fn holds(&self, at: usize, user_key: &[u8]) -> bool {
        let (lo, hi) = self.range(at);
        user_key >= lo && hi.is_none_or(|hi| user_key < hi)
    }
    /// The partition holding the key, or the first after it.
    fn seek_start(&self, user_key: &[u8]) -> usize {
        super::unified::partition_of(&self.v.boundaries, user_key)
            .saturating_sub(self.first)
            .min(self.len.saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::test_file;
    use crate::version::VersionEdit;

    /// A version with partitions starting at `boundaries`, holding weight-0
    /// tables `(number, lo, hi, size)`.
    fn version(
        s: &Arc<Partitioned>,
        boundaries: &[&str],
        files: &[(u64, &str, &str, u64)],
    ) -> Version {
        let mut e = VersionEdit {
            boundaries: boundaries.iter().map(|b| b.as_bytes().to_vec()).collect(),
            ..VersionEdit::default()
        };
        for &(n, lo, hi, size) in files {
            e.add_file(0, test_file(n, lo, hi, size));
        }
        Version::empty(s.clone()).apply(&e).unwrap()
    }

    fn split_at(s: &Partitioned, v: &Version) -> Option<String> {
        let plan = s.pick_compaction(v, &HashSet::new())?;
        // A split is the only plan without inputs.
        assert!(plan.inputs.is_empty(), "a merge, not a split");
        let key = plan.new_boundary.expect("a split names its boundary");
        *s.pending_split.lock() = None;
        Some(String::from_utf8(key).unwrap())
    }

    fn shape(cuts: Option<&[&str]>) -> Arc<Partitioned> {
        // CS 9: the four tables below never merge.
        let s = Arc::new(Partitioned::new(9, 1000, [4, 100, 200]));
        if let Some(cuts) = cuts {
            s.flush_cuts(cuts.iter().map(|c| c.as_bytes().to_vec()).collect());
        }
        s
    }

    /// Four flushed tables of 400 bytes in one partition (over its 1000).
    const TABLES: [(u64, &str, &str, u64); 4] = [
        (1, "a", "c", 400),
        (2, "d", "f", 400),
        (3, "g", "i", 400),
        (4, "j", "l", 400),
    ];

    /// Enters partition `p` of `v` as a user scan's cursor does, `times`
    /// times.
    fn enter(s: &Partitioned, v: &Version, p: usize, times: usize) {
        let members = &Members::of(v).0[p];
        for _ in 0..times {
            s.seek_reads.entered(range_of(&v.boundaries, p).0, members);
        }
    }

    #[test]
    fn seeks_merge_a_partition_whole_once_their_extra_reads_pay_for_it() {
        let s = shape(None);
        // Partition "m".. holds 4 tables of 50 KiB: 200 KiB, so 100
        // reads beyond one table (`SEEK_READ_BYTES` each) pay for its
        // merge, and each seek there makes 3.
        assert_eq!(SEEK_READ_BYTES, 2 << 10);
        let kib = 1 << 10;
        let files: Vec<(u64, &str, &str, u64)> = TABLES
            .iter()
            .map(|&(n, lo, hi, _)| (n, lo, hi, 50 * kib))
            .chain([(5, "m", "o", 50 * kib), (6, "n", "p", 50 * kib)])
            .chain([(7, "n", "q", 50 * kib), (8, "o", "r", 50 * kib)])
            .collect();
        let mut v = version(&s, &["m"], &files);
        // Table 8 is of weight 1: the output takes the heaviest weight.
        let mut e = VersionEdit::default();
        e.delete_file(0, 8);
        e.add_file(1, test_file(8, "o", "r", 50 * kib));
        v = v.apply(&e).unwrap();
        let none = HashSet::new();
        enter(&s, &v, 1, 33);
        assert!(!s.note_scan(&v), "99 extra reads are not yet due");
        assert!(s.pick_scan_merge(&v, &none).is_none());
        enter(&s, &v, 1, 1);
        assert!(s.note_scan(&v), "102 extra reads are due");
        // A busy member keeps the partition out; the next scan there
        // makes it due again.
        let busy: HashSet<u64> = [6].into_iter().collect();
        assert!(s.pick_scan_merge(&v, &busy).is_none());
        assert!(!s.note_scan(&v));
        enter(&s, &v, 1, 1);
        assert!(s.note_scan(&v), "due again");
        let plan = s.pick_scan_merge(&v, &none).expect("a scan merge");
        let mut inputs: Vec<u64> = plan.input_files().map(|f| f.number).collect();
        inputs.sort_unstable();
        assert_eq!(inputs, [5, 6, 7, 8]);
        assert_eq!(plan.output_level, 1);
        assert_eq!(s.scan_merges.load(Ordering::Relaxed), 1);
        // Its count starts again.
        assert!(s.pick_scan_merge(&v, &none).is_none());
        enter(&s, &v, 1, 33);
        assert!(!s.note_scan(&v));
        // Partition ..m, the four 50 KiB tables, all weight 0: due after
        // 34 seeks too, merged into weight 1 (older than every flush to
        // come) ...
        enter(&s, &v, 0, 34);
        let plan = s.pick_scan_merge(&v, &none).expect("a scan merge");
        assert_eq!(plan.input_files().count(), 4);
        assert_eq!(plan.output_level, 1);
        // A member spanning into the next partition takes that one whole
        // too, every table of both, once the reads of both pay for all
        // of them (a shape with no reads counted yet).
        let mut e = VersionEdit::default();
        e.add_file(0, test_file(9, "l", "n", 50 * kib));
        let v = v.apply(&e).unwrap();
        let s = shape(None);
        enter(&s, &v, 0, 32);
        assert!(s.note_scan(&v), "128 reads pay for partition ..m's 250 KiB");
        assert!(
            s.pick_scan_merge(&v, &none).is_none(),
            "but not for both partitions' 450 KiB"
        );
        enter(&s, &v, 1, 25);
        enter(&s, &v, 0, 1);
        let plan = s
            .pick_scan_merge(&v, &none)
            .expect("232 reads pay for 450 KiB");
        assert_eq!(plan.input_files().count(), 9);
        assert_eq!(plan.output_level, 1);
        // Both partitions' counts start again: 128 reads of "m".. alone
        // do not pay for both.
        enter(&s, &v, 1, 32);
        assert!(s.note_scan(&v));
        assert!(s.pick_scan_merge(&v, &none).is_none());
    }

    #[test]
    fn a_split_goes_to_the_buffer_cut_nearest_the_median() {
        // Without cuts: the median of the tables' end keys ("g").
        let s = shape(None);
        assert_eq!(
            split_at(&s, &version(&s, &[], &TABLES)).as_deref(),
            Some("g")
        );
        // With cuts: the one leaving the end keys most evenly split, not
        // the median; a cut outside the partition is never chosen.
        let s = shape(Some(&["", "b", "fz", "k", "zz"]));
        assert_eq!(
            split_at(&s, &version(&s, &[], &TABLES)).as_deref(),
            Some("fz")
        );
        // Partition "e".. holds 1000 bytes (table 2 counted half); its end
        // keys f g i j l: "fz" leaves 1 below, "k" 4, "zz" 5.
        let v = version(&s, &["e"], &TABLES[1..]);
        assert_eq!(split_at(&s, &v).as_deref(), Some("fz"));
    }

    #[test]
    fn a_partition_inside_one_buffer_partition_splits_only_when_skewed() {
        // One partition "a".."m" inside the buffer partition "a".."n" of
        // three: its 1600 bytes are 1.5x the mean buffer partition's (all
        // 3200 bytes over 3), not skew.
        let s = shape(Some(&["a", "n"]));
        let mut files = TABLES.to_vec();
        files.extend([(5, "o", "p", 800), (6, "q", "r", 800)]);
        let v = version(&s, &["a", "n"], &files);
        assert_eq!(split_at(&s, &v), None);
        // With the same data over twelve buffer partitions it is skewed
        // (1600 >= 4 x 3200 / 12): split at the median of its end keys
        // inside "a".. (c d f g i j l).
        let s = shape(Some(&[
            "a", "n", "o", "p", "q", "r", "s", "t", "u", "v", "w",
        ]));
        let v = version(&s, &["a", "n"], &files);
        assert_eq!(split_at(&s, &v).as_deref(), Some("g"));
    }

    #[test]
    fn writes_slow_down_and_stop_past_the_merge_due() {
        // Weight-0 tables in one partition: 1..=n.
        let pressure = |cs: usize, n: u64| {
            let s = Arc::new(Partitioned::new(cs, 1 << 30, [4, 8, 12]));
            let files: Vec<(u64, String)> = (1..=n).map(|i| (i, format!("k{i:03}"))).collect();
            let files: Vec<(u64, &str, &str, u64)> = files
                .iter()
                .map(|(i, k)| (*i, "a", k.as_str(), 10))
                .collect();
            s.write_pressure(&version(&s, &[], &files))
        };
        // The defaults (CS 4 and triggers 4, 8, 12): as the leveled shape.
        assert_eq!(pressure(4, 7), WritePressure::None);
        assert_eq!(pressure(4, 8), WritePressure::Slowdown);
        assert_eq!(pressure(4, 12), WritePressure::Stop);
        // CS 8: a partition holds 8 weight-0 tables whenever a merge is due,
        // which is no reason to slow writes; 16 is four past it.
        assert_eq!(pressure(8, 8), WritePressure::None);
        assert_eq!(pressure(8, 12), WritePressure::Slowdown);
        assert_eq!(pressure(8, 16), WritePressure::Stop);
        // CS 16 reaches its merge at all (writes stopped at 12 before).
        assert_eq!(pressure(16, 16), WritePressure::None);
        assert_eq!(pressure(16, 24), WritePressure::Stop);
    }
}
