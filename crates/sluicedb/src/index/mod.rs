//! Key index shapes: how the tables of a version are organised, searched and
//! compacted (`docs/design.md`, "The three axes and the presets", axis 1).
//!
//! [`IndexShape`] is the seam: the engine asks the shape for lookup order,
//! iterators and the next compaction, and never assumes levels itself.
//! `leveled` is the LevelDB design (WiscKey, FAST '16, §2.2, HashKV, USENIX ATC '18, §2.1);
//! `unified` is UniKV's range partitions; `partitioned` is LightKV's
//! partition compaction by weight.

mod level_iter;
pub(crate) mod leveled;
pub(crate) mod partitioned;
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "LightKV's index: the preset that uses it is not built yet"
    )
)]
pub(crate) mod rh;
pub(crate) mod unified;

pub(crate) use level_iter::LevelIter;

use std::collections::HashSet;
use std::sync::Arc;

use std::path::Path;

use crate::error::{Error, Result};
use crate::fs::IoClass;
use crate::iter::InternalIterator;
use crate::key::{self, Kind};
use crate::memtable::Lookup;
use crate::options::{IndexShapeKind, Options};
use crate::table::TableCache;
use crate::version::{FileMeta, LevelRules, Version};

/// Tables a compaction reads from one slot of the version (a level, for
/// the leveled shape; whatever the shape makes of slots otherwise).
#[derive(Debug, Clone)]
pub(crate) struct CompactionInput {
    pub(crate) level: usize,
    pub(crate) files: Vec<Arc<FileMeta>>,
    /// The files' key ranges do not overlap (one iterator reads them in
    /// order); otherwise each gets its own, newest first.
    pub(crate) sorted_run: bool,
}

/// A compaction chosen by a shape: merge `inputs` into new tables at
/// `output_level`, cut at `target_file_size_bytes` and wherever an output
/// would overlap more than `max_overlap_bytes` of `overlap_limit`. The
/// engine runs it the same way for every shape.
#[derive(Debug, Clone)]
pub(crate) struct CompactionPlan {
    pub(crate) inputs: Vec<CompactionInput>,
    pub(crate) output_level: usize,
    pub(crate) target_file_size_bytes: u64,
    /// Tables whose overlap with each output is bounded (LevelDB's
    /// grandparents: the level after the output level).
    pub(crate) overlap_limit: Vec<Arc<FileMeta>>,
    pub(crate) max_overlap_bytes: u64,
    /// Nothing to merge: the inputs move to `output_level` by a manifest
    /// edit alone.
    pub(crate) trivial_move: bool,
    /// The merge separates the inline values it writes into the value
    /// store (the unified shape's partial KV separation, UniKV, ICDE '20, §III-C).
    pub(crate) separate_values: bool,
    /// A range partition boundary the merge adds: its outputs end before
    /// it, and its edit records it (the unified shape's split, §III-D).
    pub(crate) new_boundary: Option<Vec<u8>>,
    /// Value files whose records the merge moves into its own (the
    /// unified shape's GC, §III-C): chosen and frozen by the value store
    /// when the merge is picked (`Core::add_relocations`).
    pub(crate) relocate: Vec<u64>,
    /// The number of its (single) output, taken when it was picked (the
    /// unified shape's scan merge, whose output must sort between its
    /// inputs and later flushes by number).
    pub(crate) output_number: Option<u64>,
}

impl CompactionPlan {
    pub(crate) fn input_files(&self) -> impl Iterator<Item = &Arc<FileMeta>> {
        self.inputs.iter().flat_map(|i| &i.files)
    }
    pub(crate) fn input_bytes(&self) -> u64 {
        (self.input_files()).fold(0u64, |n, f| n.saturating_add(f.file_size))
    }
    /// The smallest and largest user key of the inputs.
    pub(crate) fn key_range(&self) -> Option<(&[u8], &[u8])> {
        let lo = self.input_files().map(|f| f.smallest_user_key()).min()?;
        let hi = self.input_files().map(|f| f.largest_user_key()).max()?;
        Some((lo, hi))
    }
}

/// How far compaction is behind, as the write path sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WritePressure {
    None,
    /// Delay each write group a little (LevelDB's 1 ms slowdown).
    Slowdown,
    /// Stop writes until compaction catches up.
    Stop,
}

/// The newest entry of `user_key` visible at the sequence in `seek` (an
/// internal key of kind `KIND_SEEK`) in table `f`; `hash` is the key's
/// bloom hash. `None` when the table holds no visible entry of the key.
pub(crate) fn probe_table(
    tables: &TableCache,
    f: &FileMeta,
    seek: &[u8],
    user_key: &[u8],
    hash: u64,
    class: IoClass,
) -> Result<Option<Lookup>> {
    let t = tables.table_of(&f.table, f.number, f.file_size, class)?;
    let Some((ik, value)) = t.get(seek, user_key, hash, class)? else {
        return Ok(None);
    };
    Ok(Some(match Kind::from_u8(key::kind_byte(&ik)) {
        Some(Kind::Delete) => Lookup::Deleted,
        Some(k) => Lookup::Found(k, value, key::sequence(&ik)),
        None => {
            return Err(Error::corruption(
                crate::filename::table(Path::new(""), f.number),
                0,
                "entry of unknown kind",
            ))
        }
    }))
}

/// The newest entry of `user_key` visible at `snapshot` in the first of
/// `files` (in the shape's lookup order, newest first) that holds one: the
/// point lookup of every shape, which only choose the tables.
pub(crate) fn probe_in_order<'f>(
    tables: &TableCache,
    files: impl IntoIterator<Item = &'f FileMeta>,
    user_key: &[u8],
    snapshot: u64,
    class: IoClass,
) -> Result<Lookup> {
    let seek = key::encode(user_key, snapshot, key::KIND_SEEK);
    let hash = crate::table::bloom::key_hash(user_key);
    for f in files {
        if let Some(r) = probe_table(tables, f, &seek, user_key, hash, class)? {
            return Ok(r);
        }
    }
    Ok(Lookup::Absent)
}

/// The sequence number of the newest entry of `user_key` among
/// `children` (a shape's scan iterators over a range holding it), a
/// tombstone included ([`IndexShape::newest_sequence`]).
pub(crate) fn newest_by_seek(
    children: Vec<Box<dyn InternalIterator>>,
    user_key: &[u8],
) -> Result<Option<u64>> {
    let mut it = crate::iter::MergingIterator::new(children);
    it.seek(&key::encode(user_key, key::MAX_SEQUENCE, key::KIND_SEEK));
    it.status()?;
    Ok((it.valid() && key::user_key(it.key()) == user_key).then(|| key::sequence(it.key())))
}

/// The table of a sorted run (tables in key order, not overlapping) whose
/// range holds `user_key`, if any: one binary search of boundary keys.
pub(crate) fn sorted_run_table<'v>(
    files: &'v [Arc<FileMeta>],
    user_key: &[u8],
) -> Option<&'v Arc<FileMeta>> {
    let i = files.partition_point(|f| f.largest_user_key() < user_key);
    files.get(i).filter(|f| f.smallest_user_key() <= user_key)
}

/// Iterators for a user scan of a shape whose level 0 holds overlapping
/// tables (one iterator each, newest first) and whose other levels are
/// sorted runs (one iterator each): the leveled shape, and the unified
/// shape's UnsortedStore over its sorted run. A scan of user keys from
/// `lower` through `upper` (either end open when `None`) leaves out the
/// tables wholly outside the range (the unified shape's scans locate
/// their partitions by boundary keys, UniKV, ICDE '20, §III-F).
pub(crate) fn overlapping_then_runs(
    v: &Arc<Version>,
    tables: &Arc<TableCache>,
    lower: Option<&[u8]>,
    upper: Option<&[u8]>,
) -> Vec<Box<dyn InternalIterator>> {
    let within = |f: &&Arc<FileMeta>| f.meets_range(lower, upper);
    let run = |files: Vec<Arc<FileMeta>>| -> Box<dyn InternalIterator> {
        Box::new(LevelIter::new(
            files,
            tables.clone(),
            IoClass::UserRead,
            true,
        ))
    };
    let mut out: Vec<Box<dyn InternalIterator>> = v.levels[0]
        .iter()
        .rev()
        .filter(within)
        .map(|f| run(vec![f.clone()]))
        .collect();
    out.extend(
        v.levels
            .iter()
            .skip(1)
            .map(|l| l.iter().filter(within).cloned().collect::<Vec<_>>())
            .filter(|l| !l.is_empty())
            .map(run),
    );
    out
}

/// A table for shape unit tests: `lo..hi` at sequence 1, `size` bytes.
#[cfg(test)]
pub(crate) fn test_file(n: u64, lo: &str, hi: &str, size: u64) -> FileMeta {
    FileMeta {
        number: n,
        file_size: size,
        smallest: key::encode(lo.as_bytes(), 1, 1),
        largest: key::encode(hi.as_bytes(), 1, 1),
        entries: 1,
        deletions: 0,
        value_bytes: 0,
        payload: None,
        table: Default::default(),
    }
}

/// Checks that `files` form a sorted run; `what` names it in the error.
pub(crate) fn check_sorted_run(files: &[Arc<FileMeta>], what: &str) -> Result<(), String> {
    for w in files.windows(2) {
        if w[0].largest_user_key() >= w[1].smallest_user_key() {
            return Err(format!(
                "tables {} and {} overlap {what}",
                w[0].number, w[1].number
            ));
        }
    }
    Ok(())
}

/// The index shape the options ask for.
pub(crate) fn shape_for(opts: &Options) -> Arc<dyn IndexShape> {
    if opts.index.shape == IndexShapeKind::Unified {
        return Arc::new(unified::Unified::new(opts));
    }
    if opts.index.shape == IndexShapeKind::Partitioned {
        return Arc::new(partitioned::Partitioned::new(
            opts.lightkv.compaction_size,
            opts.lightkv.partition_split_bytes,
            [
                opts.index.l0_compaction_trigger,
                opts.index.l0_slowdown_trigger,
                opts.index.l0_stop_trigger,
            ],
        ));
    }
    Arc::new(leveled::Leveled {
        num_levels: opts.index.num_levels,
        l0_compaction_trigger: opts.index.l0_compaction_trigger,
        l0_slowdown_trigger: opts.index.l0_slowdown_trigger,
        l0_stop_trigger: opts.index.l0_stop_trigger,
        base_level_size_bytes: opts.index.base_level_size_bytes,
        level_size_ratio: opts.index.level_size_ratio,
        target_file_size_bytes: opts.index.target_file_size_bytes,
        l0_read_trigger: opts.index.l0_read_compaction_trigger,
        l0_reads: leveled::L0Reads::default(),
    })
}

/// The organisation of tables in a version: the rules a version keeps
/// (`LevelRules`, which the version module defines so that it imports
/// nothing from the shapes above it) and how the engine reads, compacts
/// and measures through them.
pub(crate) trait IndexShape: LevelRules {
    /// Newest visible entry of `user_key` at `snapshot` in the tables;
    /// `class` says whose reads they are (a user's, or GC's validity
    /// check).
    fn get(
        &self,
        v: &Version,
        tables: &TableCache,
        user_key: &[u8],
        snapshot: u64,
        class: IoClass,
    ) -> Result<Lookup>;
    /// The newest entry of `user_key` in the tables, for a flush counting
    /// the version its entry shadows (`compaction::Writer::finish_key`). A
    /// shape may answer an inline value without reading when it can tell
    /// that the newest version lies where values are inline: the flush
    /// counts nothing for it then and leaves its entry unflagged, so should
    /// the version be a pointer after all, the merge that drops it counts
    /// it (exact, only later).
    fn get_shadowed(&self, v: &Version, tables: &TableCache, user_key: &[u8]) -> Result<Lookup> {
        self.get(v, tables, user_key, key::MAX_SEQUENCE, IoClass::Flush)
    }
    /// The sequence number of the newest version of `user_key` the tables
    /// of `v` hold, a tombstone included (LightKV's recovery asks it of
    /// every record it finds in the buffer). By default a seek of the
    /// shape's scan iterators.
    fn newest_sequence(
        &self,
        v: &Arc<Version>,
        tables: &Arc<TableCache>,
        user_key: &[u8],
    ) -> Result<Option<u64>> {
        newest_by_seek(
            self.scan_iterators(v, tables, Some(user_key), Some(user_key)),
            user_key,
        )
    }
    /// Checks, key by key, an order that reads rely on and the version's
    /// own `check` cannot see (`Db::verify`); the entries read. By default
    /// none: the version's check covers the shape.
    fn verify_order(&self, _v: &Arc<Version>, _tables: &Arc<TableCache>) -> Result<u64> {
        Ok(0)
    }
    /// Iterators over all tables (level 0's one each, newest first, then
    /// one per sorted run): for full scans and recounts.
    fn iterators(
        &self,
        v: &Arc<Version>,
        tables: &Arc<TableCache>,
    ) -> Vec<Box<dyn InternalIterator>> {
        self.scan_iterators(v, tables, None, None)
    }
    /// Iterators for a user scan of the keys from `lower` through `upper`
    /// (open ends `None`): tables that cannot hold one are left out.
    fn scan_iterators(
        &self,
        v: &Arc<Version>,
        tables: &Arc<TableCache>,
        lower: Option<&[u8]>,
        upper: Option<&[u8]>,
    ) -> Vec<Box<dyn InternalIterator>> {
        overlapping_then_runs(v, tables, lower, upper)
    }
    /// A user scan starts over the tables of `v` (the unified shape merges
    /// a partition's unsorted tables while scans run, UniKV, ICDE '20,
    /// §III-F; the leveled one merges L0 once reads paid for it). True when
    /// the engine should look for background work now: the first scan
    /// since the last pick may make a scan merge due while no write wakes
    /// the background threads.
    fn note_scan(&self, _v: &Version) -> bool {
        false
    }
    /// A user's point read of the tables of `v` (the memtables did not
    /// answer it): [`IndexShape::get`], and true, as for
    /// [`IndexShape::note_scan`], when the read made a merge due (the
    /// leveled shape's L0 merged for reads, charged by the L0 tables the
    /// read met).
    fn read(
        &self,
        v: &Version,
        tables: &TableCache,
        user_key: &[u8],
        snapshot: u64,
    ) -> Result<(Lookup, bool)> {
        Ok((
            self.get(v, tables, user_key, snapshot, IoClass::UserRead)?,
            false,
        ))
    }
    /// A merge of one partition's unsorted tables into one sorted unsorted
    /// table, for scans (§III-F); `None` for shapes without one, when no
    /// scan ran since the last, or none is due. The engine picks it only
    /// while no flush runs, and numbers its output at once, so the output
    /// is newer than its inputs and older than every later flush.
    fn pick_scan_merge(&self, _v: &Version, _busy: &HashSet<u64>) -> Option<CompactionPlan> {
        None
    }
    /// The most urgent compaction whose files are not in `busy`, if any is
    /// needed; `manual` asks for any useful compaction of the key range.
    fn pick_compaction(&self, v: &Version, busy: &HashSet<u64>) -> Option<CompactionPlan>;
    /// Compactions covering `[lo, hi]` level by level, for `compact_range`.
    fn pick_range_compaction(
        &self,
        v: &Version,
        level: usize,
        lo: &[u8],
        hi: &[u8],
    ) -> Option<CompactionPlan>;
    /// True when no file in levels deeper than `level` may hold `user_key`:
    /// a tombstone compacted into `level` can then be dropped.
    fn is_bottommost_for(&self, v: &Version, level: usize, user_key: &[u8]) -> bool;
    /// How urgently compaction is needed (>= 1 means needed), per level.
    fn scores(&self, v: &Version) -> Vec<f64>;
    /// Under space pressure, while the inline versions counted dead above
    /// the last level ([`IndexShape::inline_bytes_above_last_level`]) are
    /// worth reclaiming: a merge that carries entries on down toward the
    /// older versions they shadow, though no level is over its size;
    /// `None` when there is none (or the shape drops its inline garbage
    /// otherwise).
    fn pick_garbage_compaction(
        &self,
        _v: &Version,
        _busy: &HashSet<u64>,
    ) -> Option<CompactionPlan> {
        None
    }
    /// True when [`IndexShape::pick_garbage_compaction`]'s merges take a
    /// partition (a bounded part of the data) and do all the shape's own
    /// merging there (the partitioned shape's whole-partition merges). Then
    /// under space pressure they go before the shape's own merges (behind a
    /// backlog of weight merges they never ran), and writes at the high
    /// ratio wait for them as for GC (`Core::wait_for_space`); the space
    /// limit acts on such a shape without a value store
    /// (`Core::space_limited`). The leveled
    /// shape's merge into its last level rewrites a large part of the
    /// data, and its own merges keep L0 short for reads and writes: writes
    /// go on at the slowest delay, and its own merges go first.
    fn merges_for_space_by_partition(&self) -> bool {
        false
    }
    /// Under space pressure: a compaction that drops entries shadowed by
    /// newer ones soonest, since the separated values they point at count
    /// as live until then (compaction-triggered garbage discovery, as
    /// BlobDB and Titan do); `None` when none would help.
    fn pick_shadow_compaction(&self, _v: &Version, _busy: &HashSet<u64>) -> Option<CompactionPlan> {
        None
    }
    /// True when [`IndexShape::pick_shadow_compaction`] helps even after
    /// every flush counted what its entries shadow (the unified shape's
    /// partition merges also separate and collect values); false when all
    /// it would do is drop versions already counted (leveled: L0 into L1).
    fn shadow_compaction_does_more_than_count(&self) -> bool {
        false
    }
    /// A merge that reads every table holding an entry of a user key in
    /// `lo..=hi`, to collect the value files of that range (the unified
    /// shape's GC, UniKV, ICDE '20, §III-C); `None` for shapes whose GC is the
    /// value store's, or when a table it needs is busy.
    fn pick_gc_compaction(
        &self,
        _v: &Version,
        _busy: &HashSet<u64>,
        _lo: &[u8],
        _hi: &[u8],
    ) -> Option<CompactionPlan> {
        None
    }
    /// The level a flush's tables go to.
    fn flush_level(&self) -> usize {
        0
    }
    /// Whether writes must slow down or stop for compaction.
    fn write_pressure(&self, v: &Version) -> WritePressure;

    /// A flush cut by the partitions of `base` wrote table `f` from
    /// `entries` (the memtable, in key order; `f` holds those in its key
    /// range) and is about to install it: a shape with an in-memory index
    /// of its tables (the unified shape's hash index) indexes the keys.
    fn index_flushed(
        &self,
        _base: &Version,
        _f: &FileMeta,
        _entries: &mut dyn InternalIterator,
    ) -> Result<()> {
        Ok(())
    }
    /// Bytes of the keys and values `v`'s tables hold inline that newer
    /// versions made garbage, as far as the shape knows them (the unified
    /// shape's hash index knows those of its unsorted tables); the space
    /// limit does not count them live.
    fn inline_garbage(&self, _v: &Version) -> u64 {
        0
    }
    /// Bytes of the keys and values `v`'s tables hold inline above the
    /// tables that hold a key's oldest versions (the leveled shape: above
    /// its last level holding tables). Each of their entries shadows an
    /// older version below with the share the flushes measure of the
    /// writes (`SpaceMeasure::shadow_share_milli`), and the space limit
    /// counts that share of them dead (`Core::measure_space`). 0 for shapes
    /// that count their inline garbage themselves.
    fn inline_bytes_above_last_level(&self, _v: &Version) -> u64 {
        0
    }
    /// Fills the shape's section of `Stats`.
    fn shape_stats(&self, _v: &Version, _s: &mut crate::stats::ShapeStats) {}
    /// A compaction of `plan` starts.
    fn merge_started(&self, _plan: &CompactionPlan) {}
    /// Whether a merge of one level into the next may install its outputs
    /// a key range at a time (`compaction::ByRange`): true where a read
    /// takes the first entry it meets going down the levels, so that an
    /// upper input still in place shadows its twin below with itself.
    fn installs_by_range(&self) -> bool {
        false
    }
    /// `v` became the current version.
    fn installed(&self, _v: &Version) {}
    /// The keys, sorted, at which the write buffer cuts what it flushes
    /// (the lightkv buffer's partitions: each flushed table holds keys of
    /// one of them). A shape that cuts the key space itself may cut there,
    /// so that a flushed table falls into one of its parts, not several.
    fn flush_cuts(&self, _cuts: Vec<Vec<u8>>) {}
    /// The database opened with `v`: build in-memory indexes of its tables,
    /// starting from `checkpoint` (the file `v` names and its bytes, or the
    /// error reading it) when there is one.
    fn opened(
        &self,
        _v: &Version,
        _tables: &TableCache,
        _checkpoint: Option<(&Path, Result<Vec<u8>>)>,
    ) -> Result<()> {
        Ok(())
    }
    /// True when the shape wants its in-memory index checkpointed
    /// ([`IndexShape::checkpoint`]); asked after each flush.
    fn checkpoint_due(&self) -> bool {
        false
    }
    /// The bytes of a checkpoint of the shape's in-memory index, if it has
    /// one.
    fn checkpoint(&self) -> Option<Vec<u8>> {
        None
    }
}
