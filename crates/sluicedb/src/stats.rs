//! [`Stats`]: a snapshot of the engine's counters.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::fs::IoStats;

/// Per-level shape of the key index.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct LevelStats {
    /// Tables in the level.
    pub tables: usize,
    /// Bytes of those tables.
    pub bytes: u64,
    /// Compaction score (>= 1 means the level wants compaction).
    pub score: f64,
}

/// What the database was given and wrote over its life, kept in its
/// manifest (every installed flush, compaction or GC edit records them, at
/// no extra sync), so they survive reopens. They are as of the newest
/// manifest record: writes after it (the journal of a memtable not flushed
/// yet) count once a later record is written, or are lost from the totals
/// if the process ends before one. Part of [`Stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Totals {
    /// Bytes of keys and values the user wrote (puts and deletes).
    pub user_bytes_written: u64,
    /// Bytes the engine wrote to its files, every purpose.
    pub bytes_written: u64,
    /// The sequence number the counting began at: 0 when it began with the
    /// database; more for a database created before totals were recorded.
    pub since_sequence: u64,
}

impl Totals {
    /// Bytes written to files per byte the user wrote.
    pub fn write_amplification(&self) -> f64 {
        ratio(self.bytes_written, self.user_bytes_written)
    }
}

/// Counters since the database was opened, and its current shape, by
/// area (as RocksDB's properties are): writes, flushes, compactions, the
/// key index, the value store and its GC, space and I/O.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Stats {
    /// The preset the database was created with (`None`: not recorded).
    pub created_with: Option<crate::Preset>,
    /// Totals over the database's life, through reopens (a read-only open:
    /// as its manifest records them).
    pub totals: Totals,
    /// Writes: what users wrote, how they were committed, and how long they waited.
    pub writes: WriteStats,
    /// Memtables and their flushes.
    pub flush: FlushStats,
    /// Compactions of the key index.
    pub compaction: CompactionStats,
    /// The key index: its levels, the shape's in-memory indexes, its tables and their cache.
    pub index: IndexStats,
    /// Space: amplification and the live data it is measured against, and the space limit.
    pub space: SpaceStats,
    /// The value store (all zero without one), with its layout's section.
    pub values: ValueStats,
    /// Value store GC since open.
    pub gc: GcTotals,
    /// Bytes read and written per purpose.
    pub io: IoStats,
    /// Memory: the engine's own count beside the process's resident memory.
    pub memory: MemoryStats,
    /// The error that poisoned writes, if any.
    pub poisoned: Option<String>,
}

/// Memory: what the engine holds by its own count, and the process's
/// resident memory beside it (issue 53 asks where memory goes). Part of
/// [`Stats`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct MemoryStats {
    /// The engine's own count: memtables with their key filters and point
    /// indexes, the memtable blocks pooled for the next, the block cache,
    /// the open tables' index blocks and filters, the unified shape's
    /// hash indexes, and the lightkv buffer's image in memory (each also
    /// in its own section).
    pub accounted_bytes: u64,
    /// The process's resident memory now and at its peak (Linux: `VmRSS`
    /// and `VmHWM`); `None` where the system does not say. Beyond
    /// `accounted_bytes` it holds what the engine does not count: the
    /// allocator's free and fragmented memory, GC's and I/O's buffers
    /// (GC's victim reads share at most 8 MiB), thread stacks and the
    /// program itself, and whatever else the process holds (other
    /// databases among it).
    pub process_resident_bytes: Option<u64>,
    pub process_peak_resident_bytes: Option<u64>,
    /// The memory budget the memtables and the block cache share now
    /// ([`crate::Options::memory_budget_bytes`], as opened or as
    /// [`crate::Db::set_memory_budget`] set it); `None`: no budget.
    pub budget_bytes: Option<u64>,
    /// The memory limit (the process's memory cgroup's) that the default
    /// budget, block cache and write buffer follow (`docs/design.md`,
    /// "Memory", *Under a memory limit*): they are fitted into a share of
    /// it where they do not fit as set. `None`: they are the options as
    /// set.
    pub limit_bytes: Option<u64>,
    /// The write buffer the memtables switch at now (less than asked for
    /// when fitted to `limit_bytes`).
    pub write_buffer_bytes: u64,
    /// Under `limit_bytes`, the budget and sizes were fitted for a store
    /// that holds separated values, whose GC needs memory the budget does
    /// not count: 3/8 of the limit instead of 5/8 (at open, or from the
    /// first write of a value a flush will separate or the first flush
    /// after which the value store holds bytes).
    pub fitted_for_separated_values: bool,
}

/// Writes: what users wrote, how they were committed, and how long they waited. Part of [`Stats`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct WriteStats {
    /// Bytes of keys and values written by the user (puts and deletes).
    pub user_bytes_written: u64,
    /// Operations written by the user.
    pub user_ops_written: u64,
    /// Newest sequence number.
    pub last_sequence: u64,
    /// Write groups committed (one journal append each).
    pub write_groups: u64,
    /// Journal syncs issued.
    pub journal_syncs: u64,
    /// Delays writes slept: the L0 slowdown trigger's (1 ms each), and the
    /// space limit's between its ratios (each paying the delays owed by
    /// the writes since the last, a lump).
    pub write_slowdowns: u64,
    /// The lump the space limit's delays are owed up to before one write
    /// sleeps them, in microseconds: set from the rate of delays over the
    /// last 65,536 writes so that one write in 200 sleeps, from 200 µs to
    /// 2 ms, and 50 µs past that rate (`docs/design.md`, "Pressure levels").
    pub space_delay_lump_micros: u64,
    /// Times writes waited (full memtables or L0 stop trigger).
    pub write_stalls: u64,
    /// Microseconds writes spent delayed or stalled.
    pub write_stall_micros: u64,
    /// Of `write_stall_micros`, by reason: waiting for a memtable flush
    /// (all write buffers full), for L0 compaction (stop trigger, or the
    /// slowdown delay), and for value store GC (capacity reached).
    pub write_stall_micros_by_reason: StallMicros,
}

/// Memtables and their flushes. Part of [`Stats`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct FlushStats {
    /// Bytes in the active and immutable memtables.
    pub memtable_bytes: u64,
    /// Bytes of their key filters and point indexes (1/32 and 1/16 of the
    /// write buffer each, apart from `memtable_bytes`; the index's pages
    /// are touched only as keys claim its slots).
    pub memtable_filter_bytes: u64,
    /// Memtable blocks a flushed memtable left for the next ones (at most a
    /// write buffer's worth), held in the memory budget.
    pub memtable_pool_bytes: u64,
    /// Immutable memtables waiting for flush.
    pub immutable_memtables: usize,
    /// Flushes completed.
    pub flushes: u64,
    /// Microseconds immutable memtables waited for a thread to start their
    /// flush (behind a flush, compaction or GC step holding every
    /// background thread), summed over flushes.
    pub flush_wait_micros: u64,
    /// Microseconds flushes ran, summed.
    pub flush_micros: u64,
    /// Memtables switched early under space pressure, so that their flush
    /// counts the garbage their overwrites and deletes made.
    pub discovery_flushes: u64,
    /// Lookups flushes made of the versions their keys shadow (to count
    /// their garbage at once).
    pub flush_shadow_lookups: u64,
    /// Of the lookups a flush's helper thread made ahead of it, those the
    /// flush did not use (keys it had no need to look up).
    pub flush_shadow_lookups_unused: u64,
    /// Where flushes that separate values put them
    /// ([`crate::ValueOptions::separate_at_flush`]; the `adaptive`
    /// preset's decisions): into the value store, or inline under the
    /// separation threshold. Zero for databases that separate at write
    /// time or never.
    pub separation: SeparationStats,
}

/// Where flushes put the values they could separate ([`FlushStats::separation`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SeparationStats {
    /// The separation threshold the flushes applied (`None`: they separate
    /// nothing).
    pub threshold_bytes: Option<usize>,
    /// Values written to the value store, and their bytes.
    pub separated: u64,
    /// Bytes of those values.
    pub separated_bytes: u64,
    /// Values kept inline, under the threshold.
    pub kept_inline: u64,
    /// Bytes of those values.
    pub kept_inline_bytes: u64,
}

/// Compactions of the key index. Part of [`Stats`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct CompactionStats {
    /// Compactions completed (trivial moves included).
    pub compactions: u64,
    /// Of which trivial moves.
    pub trivial_moves: u64,
    /// Key ranges compactions installed before their own end, each
    /// replacing part of the next level's inputs with finished outputs
    /// (`docs/design.md`, "Compactions installed a key range at a time").
    pub ranges_installed: u64,
    /// Entries compactions dropped as exact twins of the entry before them:
    /// copies a compaction installed a key range at a time left in two
    /// levels when it stopped before its own end (a crash, an error, a
    /// close).
    pub twins_dropped: u64,
    /// Bytes compactions read and wrote.
    pub compaction_bytes_read: u64,
    /// Bytes compactions wrote.
    pub compaction_bytes_written: u64,
    /// Flushes and compactions run by a GC step waiting in the writer
    /// queue behind a writer that waited for them (`Core::help_background`).
    pub jobs_by_gc: u64,
}

/// The key index: its levels, the shape's in-memory indexes, its tables and their cache. Part of [`Stats`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct IndexStats {
    /// Levels of the key index, L0 first.
    pub levels: Vec<LevelStats>,
    /// The index shape's in-memory indexes (all zero for the leveled shape).
    pub shape: ShapeStats,
    /// Bytes of live table files.
    pub live_table_bytes: u64,
    /// Bytes held by the block cache.
    pub block_cache_bytes: u64,
    /// The block cache's capacity now: less than `block_cache_bytes` asks
    /// for while it gives way to immutable memtables under the memory
    /// budget ([`crate::Options::memory_budget_bytes`]).
    pub block_cache_capacity_bytes: u64,
    /// The block cache's size: its capacity when it gives way to nothing
    /// (the options' `block_cache_bytes`, or what the memory budget leaves
    /// beside the write buffer).
    pub block_cache_size_bytes: u64,
    /// Index blocks and filters of the open key tables, held apart from
    /// the block cache while a table is open (`max_open_tables` bounds
    /// them).
    pub open_table_bytes: u64,
}

/// Space: amplification and the live data it is measured against, and the space limit. Part of [`Stats`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SpaceStats {
    /// Space amplification when last measured (after each flush,
    /// compaction and GC step): bytes of every file ÷
    /// [`SpaceStats::live_data_bytes`]. 0 before the first measurement, and
    /// without a value store.
    pub space_amplification: f64,
    /// The user's live keys and values when space was last measured, as
    /// the space limit counts them: the value records the index points at
    /// less their headers, the keys and values tables hold inline (less
    /// [`SpaceStats::inline_garbage_bytes`]), and the memtables' newest values
    /// (`docs/design.md`, "Space-aware throttling"). Exact for values of
    /// one size; the tables' own bytes (keys a second time beside their
    /// pointers) are not the user's.
    pub live_data_bytes: u64,
    /// Of the keys and values tables hold inline, the bytes known dead when
    /// space was last measured, left out of [`SpaceStats::live_data_bytes`]:
    /// the unified shape's unsorted versions that newer ones shadow,
    /// estimated from its hash index, or the leveled shape's inline bytes
    /// above its last level times
    /// [`SpaceStats::shadow_share_of_writes_milli`] (`docs/design.md`,
    /// "Space-aware throttling"). 0 for the other shapes.
    pub inline_garbage_bytes: u64,
    /// The bytes the layout holds for the live data beside the user's keys
    /// and values when space was last measured: the tables' bytes that are
    /// not inline values (pointers, indexes, filters), the live value
    /// records' headers, and the value store's bytes that are no record.
    /// GC cannot reclaim them: the space limit judges the garbage beyond
    /// them, and lets it grow at least as large as they are
    /// (`docs/design.md`, "Space-aware throttling").
    pub layout_overhead_bytes: u64,
    /// Of the bytes the journal took lately, the share that added live
    /// data (0 for updates of existing keys, 1 for a load of new ones), in
    /// thousandths, measured over windows of 8 MiB of journal between space
    /// measurements (`docs/experiments.md`, "The live share of writes").
    pub live_share_of_writes_milli: u64,
    /// Of the bytes the last flushed memtable's writes could have made
    /// garbage, the share that shadowed an older version, in thousandths:
    /// counted by the flush's lookups, or, over a tree of inline values, by
    /// a sample of them. `None` before a flush since open measured it. The
    /// space limit counts that share of the leveled shape's inline bytes
    /// above its last level dead ([`SpaceStats::inline_garbage_bytes`]).
    pub shadow_share_of_writes_milli: Option<u64>,
    /// Why the space limit ([`crate::SpaceLimit`]) is not being held, when
    /// it is not (nothing GC can reclaim).
    pub space_limit_note: Option<String>,
}

/// The index shape's in-memory state ([`IndexStats::shape`]).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ShapeStats {
    /// The unified shape's hash indexes (UniKV, ICDE '20, §III-B): memory held,
    /// generations (one more while a merge runs), key entries, and the
    /// share of buckets whose own entry is taken in the newest one.
    pub hash_index_bytes: u64,
    pub hash_index_generations: usize,
    pub hash_index_entries: u64,
    pub hash_index_load: f64,
    /// The unified shape's range partitions (UniKV, ICDE '20, §III-D), or the
    /// partitioned shape's (LightKV, §III-F, §III-G), and the splits that
    /// made new ones since the database opened.
    pub partitions: usize,
    pub partition_splits: u64,
    /// Hash index checkpoints written since open (§III-G); at open, the
    /// unsorted tables whose keys were re-read because the checkpoint did
    /// not cover them, and whether the checkpoint was set aside as damaged
    /// or missing (everything was re-read then).
    pub hash_index_checkpoints: u64,
    pub hash_index_reindexed_at_open: usize,
    pub hash_index_checkpoint_rejected: bool,
    /// Merges of a partition's unsorted tables into one, for scans
    /// (§III-F), picked since open; for the partitioned shape (LightKV),
    /// merges of whole partitions whose scans' extra reads paid for them.
    pub scan_merges: u64,
    /// The partitioned shape (LightKV): whole-partition merges picked
    /// under the space limit's pressure since open, for the versions newer
    /// ones shadow.
    pub garbage_merges: u64,
    /// The leveled shape: merges of L0 picked below its write trigger
    /// because user reads had met its tables enough to pay for them
    /// ([`crate::IndexOptions::l0_read_compaction_trigger`]), since open.
    pub l0_read_merges: u64,
    /// LightKV: the open loaded the write buffer's tree from the image a
    /// clean shutdown left (§V) instead of scanning the buffer.
    pub lightkv_image_loaded: bool,
    /// The partitioned shape (LightKV, §III-F): each partition in key
    /// order with its tables, newest first (empty for other shapes).
    pub partition_tables: Vec<PartitionTables>,
    /// LightKV's write buffer (§III-A): its segments and how many are
    /// free, the operations it holds above its watermark, and the leaves
    /// of each of the tree's partitions in key order (the top leaf and the
    /// linked ones waiting for or in their flush); `None` for other
    /// presets.
    pub lightkv_buffer: Option<LightBufferStats>,
}

/// One partition of the partitioned shape ([`ShapeStats::partition_tables`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionTables {
    /// The partition's smallest key (empty: the first partition).
    pub smallest_key: Vec<u8>,
    /// Its tables, newest first, as (compaction weight, file bytes); a
    /// table a split left spanning two partitions is listed in both.
    pub tables: Vec<(u32, u64)>,
}

/// LightKV's write buffer ([`ShapeStats::lightkv_buffer`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LightBufferStats {
    /// Segments of the buffer's region, and those free (prepared or not).
    pub segments: u32,
    pub free_segments: u32,
    /// Operations above the watermark (not yet durable in a table).
    pub operations: u64,
    /// Per tree partition in key order: its top leaf and the linked
    /// leaves behind it (waiting for their flush, or in it).
    pub leaves_per_partition: Vec<usize>,
    /// Process memory the region is kept in beside the page cache: the
    /// emulation's image of it under `msync` fences (`docs/design.md`,
    /// "LightKV: persistent memory and its crash model"), 0 otherwise.
    pub memory_bytes: u64,
}

/// The value store's files and bytes ([`Stats::values`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ValueStats {
    /// Files of the value store (value log files, or segment group and
    /// cold log files).
    pub files: usize,
    /// Bytes of those files.
    pub bytes: u64,
    /// Bytes of value records appended since open (user writes and GC).
    pub appended_bytes: u64,
    /// Bytes of records no index entry points at (`docs/design.md`,
    /// "Space accounting"): exact, except for records a crash orphaned.
    pub garbage_bytes: u64,
    /// Bytes of records some index entry points at (any version, tables
    /// and memtables).
    pub live_bytes: u64,
    /// The hash layout's section (all zero for other layouts).
    pub hash: HashStats,
    /// The table layout's section (all zero for other layouts).
    pub table: TableStats,
}

/// The table layout's statistics ([`ValueStats::table`]; Scavenger, VLDB).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableStats {
    /// Live value tables, and how many of them hold hot values.
    pub tables: usize,
    pub hot_tables: usize,
    /// Bytes of hot and of cold value tables.
    pub hot_bytes: u64,
    pub cold_bytes: u64,
    /// Inheritance edges the store follows (collected tables some pointer
    /// may still name).
    pub edges: usize,
    /// Reads that followed an inheritance edge.
    pub edge_reads: u64,
    /// Tables this open recounted because a GC step with pointer
    /// write-back had not ended when the database last closed (a crash).
    pub recounted_tables: u64,
    /// Bytes GC read of dense indexes, and of values (lazy read, §3.2.2).
    pub gc_index_bytes: u64,
    pub gc_value_bytes: u64,
    /// Records GC judged by the DropCache alone, and by an index lookup.
    pub checked_by_drop_cache: u64,
    pub checked_by_lookup: u64,
    /// Records GC judged by the garbage counts' notes, with no lookup
    /// (`TableLayoutOptions::gc_judge_by_counts`), and the records the
    /// notes name now.
    pub checked_by_counts: u64,
    pub noted_garbage_records: u64,
    /// DropCache: keys held, their bytes, lookups that hit and missed.
    pub drop_cache_keys: u64,
    pub drop_cache_bytes: u64,
    pub drop_cache_hits: u64,
    pub drop_cache_misses: u64,
}

/// The hash layout's statistics ([`ValueStats::hash`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HashStats {
    /// Segment groups.
    pub groups: usize,
    /// Log segments of the reserve in use.
    pub log_segments_in_use: u64,
    /// Groups by fill (bytes ÷ main segment), in tenths: `[i]` counts
    /// groups filled `i`0–`i+1`0%, `[10]` those past their main segment
    /// (using log segments).
    pub group_fill: [u64; 11],
    /// Bytes of the cold log (hotness awareness).
    pub cold_log_bytes: u64,
    /// Of those, known garbage (values updated or deleted since GC moved
    /// them there).
    pub cold_garbage_bytes: u64,
    /// Bytes GC wrote to the cold log (cold values moved out of groups, and
    /// live records of collected cold log files).
    pub cold_moved_bytes: u64,
    /// Bytes of group files GC handed to the cold log whole (their live
    /// records all cold; nothing copied).
    pub cold_handed_bytes: u64,
    /// GC steps that collected a cold log file.
    pub cold_gc_runs: u64,
    /// Groups made by splits since open (elastic groups).
    pub splits: u64,
}

/// Value store GC since open ([`Stats::gc`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcTotals {
    /// GC steps run.
    pub runs: u64,
    /// Bytes GC read from the value store.
    pub bytes_read: u64,
    /// Bytes GC wrote to the value store (live values copied).
    pub bytes_written: u64,
    /// Relocations applied (the key still pointed at the moved record).
    pub relocations_applied: u64,
    /// Relocations dropped (the key was overwritten or deleted meanwhile).
    pub relocations_dropped: u64,
    /// Steps collected while the previous one was being finished
    /// (overlapped steps under the space limit's pressure, hash layout).
    pub overlapped: u64,
    /// Microseconds relocation commits held the write queue (no user
    /// write is applied meanwhile), and of those, journaling them.
    pub commit_micros: u64,
    pub commit_journal_micros: u64,
}

/// A value file whose record bytes are not the records the index points at
/// plus the garbage counted for it ([`crate::Db::check_space`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpaceMismatch {
    /// The file's number.
    pub file: u64,
    /// Bytes of its records (its length less its header, and a value
    /// table's index).
    pub bytes: u64,
    /// Bytes of its records some index entry points at.
    pub referenced: u64,
    /// Bytes counted as garbage.
    pub garbage: u64,
}

/// What one `Db::gc` call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcStats {
    /// Chunks processed.
    pub chunks: u64,
    /// Bytes read from the value log.
    pub bytes_read: u64,
    /// Records examined.
    pub records: u64,
    /// Live records copied to the head.
    pub live_records: u64,
    /// Relocations applied to the index.
    pub relocations_applied: u64,
    /// Relocations dropped because the key changed meanwhile.
    pub relocations_dropped: u64,
}

impl Stats {
    /// Bytes written to files per byte the user wrote (journal included).
    pub fn write_amplification(&self) -> f64 {
        ratio(self.io.total_written(), self.writes.user_bytes_written)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(p) = self.created_with {
            writeln!(f, "created with preset {}", p.name())?;
        }
        writeln!(
            f,
            "sequence {}  user writes {} ops / {} bytes  write amp {:.2}",
            self.writes.last_sequence,
            self.writes.user_ops_written,
            self.writes.user_bytes_written,
            self.write_amplification()
        )?;
        let t = &self.totals;
        let since = match t.since_sequence {
            0 => "since creation".to_string(),
            s => format!("since sequence {s}"),
        };
        writeln!(
            f,
            "{since}: user writes {} bytes  written {} bytes  write amp {:.2}",
            t.user_bytes_written,
            t.bytes_written,
            t.write_amplification()
        )?;
        for (i, l) in self.index.levels.iter().enumerate() {
            if l.tables > 0 || i == 0 {
                writeln!(
                    f,
                    "  L{i}: {:>4} tables {:>12} bytes  score {:.2}",
                    l.tables, l.bytes, l.score
                )?;
            }
        }
        if self.index.shape.l0_read_merges > 0 {
            writeln!(
                f,
                "  L0 merged for reads since open: {}",
                self.index.shape.l0_read_merges
            )?;
        }
        if self.index.shape.partitions > 0 {
            writeln!(
                f,
                "  partitions: {} ({} split since open), {} scan merges, {} garbage merges",
                self.index.shape.partitions,
                self.index.shape.partition_splits,
                self.index.shape.scan_merges,
                self.index.shape.garbage_merges
            )?;
        }
        if let Some(b) = &self.index.shape.lightkv_buffer {
            let linked: usize = b
                .leaves_per_partition
                .iter()
                .map(|n| n.saturating_sub(1))
                .sum();
            writeln!(
                f,
                "  write buffer: {} of {} segments free, {} operations above the watermark, {} tree partitions, {} linked leaves",
                b.free_segments,
                b.segments,
                b.operations,
                b.leaves_per_partition.len(),
                linked
            )?;
        }
        if self.index.shape.hash_index_generations > 0 {
            writeln!(
                f,
                "  hash index: {} entries in {} generation(s), {} bytes, load {:.2}; {} checkpoints, {} tables re-read at open{}",
                self.index.shape.hash_index_entries,
                self.index.shape.hash_index_generations,
                self.index.shape.hash_index_bytes,
                self.index.shape.hash_index_load,
                self.index.shape.hash_index_checkpoints,
                self.index.shape.hash_index_reindexed_at_open,
                if self.index.shape.hash_index_checkpoint_rejected {
                    " (checkpoint set aside)"
                } else {
                    ""
                }
            )?;
        }
        writeln!(
            f,
            "  memtables {} bytes ({} immutable)  flushes {} ({} us waiting for a thread, {} us running; {} to find garbage, {} shadow lookups, {} made ahead unused, {} jobs run by GC)  compactions {} ({} trivial moves, {} ranges installed early)",
            self.flush.memtable_bytes,
            self.flush.immutable_memtables,
            self.flush.flushes,
            self.flush.flush_wait_micros,
            self.flush.flush_micros,
            self.flush.discovery_flushes,
            self.flush.flush_shadow_lookups,
            self.flush.flush_shadow_lookups_unused,
            self.compaction.jobs_by_gc,
            self.compaction.compactions,
            self.compaction.trivial_moves,
            self.compaction.ranges_installed
        )?;
        let sep = &self.flush.separation;
        if let Some(t) = sep.threshold_bytes {
            writeln!(
                f,
                "  separation at flush: values of {t} bytes and more to the value store: {} values ({} bytes) separated, {} ({} bytes) kept inline",
                sep.separated, sep.separated_bytes, sep.kept_inline, sep.kept_inline_bytes
            )?;
        }
        writeln!(
            f,
            "  memory: memtables {} bytes and their key filters {}, pooled for the next {}, block cache {} of {}, open tables' index and filters {}, hash indexes {}",
            self.flush.memtable_bytes,
            self.flush.memtable_filter_bytes,
            self.flush.memtable_pool_bytes,
            self.index.block_cache_bytes,
            self.index.block_cache_capacity_bytes,
            self.index.open_table_bytes,
            self.index.shape.hash_index_bytes
        )?;
        if let (Some(now), Some(peak)) = (
            self.memory.process_resident_bytes,
            self.memory.process_peak_resident_bytes,
        ) {
            writeln!(
                f,
                "  memory counted above: {} bytes; the process's resident memory {} (peak {}), the rest the allocator's, buffers and the program's",
                self.memory.accounted_bytes, now, peak
            )?;
        }
        if let Some(budget) = self.memory.budget_bytes {
            write!(
                f,
                "  memory budget: {budget} bytes for memtables of {} and the block cache",
                self.memory.write_buffer_bytes
            )?;
            match self.memory.limit_bytes {
                Some(limit) if self.memory.fitted_for_separated_values => writeln!(
                    f,
                    ", within a memory limit of {limit} with room for GC (separated values)"
                )?,
                Some(limit) => writeln!(f, ", within a memory limit of {limit}")?,
                None => writeln!(f)?,
            }
        }
        writeln!(
            f,
            "  compaction read {} written {}  stalls {} slowdowns {} ({} us; space delays in lumps of {} us)",
            self.compaction.compaction_bytes_read,
            self.compaction.compaction_bytes_written,
            self.writes.write_stalls,
            self.writes.write_slowdowns,
            self.writes.write_stall_micros,
            self.writes.space_delay_lump_micros
        )?;
        let w = &self.writes.write_stall_micros_by_reason;
        if self.writes.write_stall_micros > 0 {
            writeln!(
                f,
                "  stalled us: memtables {} level 0 {} value store full {} space limit {}",
                w.memtables, w.level0, w.value_store, w.space_limit
            )?;
        }
        for c in crate::fs::IoClass::ALL {
            let (r, w) = (self.io.read(c), self.io.written(c));
            if r > 0 || w > 0 {
                writeln!(f, "  io {:<12} read {:>14} written {:>14}", c.name(), r, w)?;
            }
        }
        if self.values.files > 0 {
            writeln!(
                f,
                "  value store: {} files {} bytes ({} live, {} garbage), {} bytes appended",
                self.values.files,
                self.values.bytes,
                self.values.live_bytes,
                self.values.garbage_bytes,
                self.values.appended_bytes
            )?;
            if self.values.hash.groups > 0 {
                writeln!(
                    f,
                    "  hash layout: {} groups ({} made by splits since open), {} log segments \
                     in use, fill by tenths {:?}",
                    self.values.hash.groups,
                    self.values.hash.splits,
                    self.values.hash.log_segments_in_use,
                    self.values.hash.group_fill
                )?;
                writeln!(
                    f,
                    "  cold log: {} bytes ({} garbage), {} bytes moved there by GC, {} bytes of \
                     files handed over whole, {} cold GC runs",
                    self.values.hash.cold_log_bytes,
                    self.values.hash.cold_garbage_bytes,
                    self.values.hash.cold_moved_bytes,
                    self.values.hash.cold_handed_bytes,
                    self.values.hash.cold_gc_runs
                )?;
            }
            let t = &self.values.table;
            if t.tables > 0 || t.edges > 0 {
                writeln!(
                    f,
                    "  value tables: {} ({} hot: {} bytes hot, {} cold), {} inheritance edges, \
                     {} reads followed one",
                    t.tables, t.hot_tables, t.hot_bytes, t.cold_bytes, t.edges, t.edge_reads
                )?;
                writeln!(
                    f,
                    "  lazy GC: read {} index bytes and {} value bytes; records judged by \
                     the garbage counts {} (notes held {}), by DropCache {} and by lookup {}; \
                     DropCache {} keys {} bytes, hits {} misses {}",
                    t.gc_index_bytes,
                    t.gc_value_bytes,
                    t.checked_by_counts,
                    t.noted_garbage_records,
                    t.checked_by_drop_cache,
                    t.checked_by_lookup,
                    t.drop_cache_keys,
                    t.drop_cache_bytes,
                    t.drop_cache_hits,
                    t.drop_cache_misses
                )?;
            }
            writeln!(
                f,
                "  gc: {} runs ({} overlapped), read {} wrote {}, relocations applied {} dropped {} \
                 (commits held writes {} us, {} us of it journaling)",
                self.gc.runs,
                self.gc.overlapped,
                self.gc.bytes_read,
                self.gc.bytes_written,
                self.gc.relocations_applied,
                self.gc.relocations_dropped,
                self.gc.commit_micros,
                self.gc.commit_journal_micros,
            )?;
        }
        if self.space.space_amplification > 0.0 {
            writeln!(
                f,
                "  space amplification {:.2} over {} bytes of live data{}; writes add live data at {:.2} of their journal bytes{}",
                self.space.space_amplification,
                self.space.live_data_bytes,
                {
                    let (g, o) = (self.space.inline_garbage_bytes, self.space.layout_overhead_bytes);
                    let parts: Vec<String> = [
                        (g > 0).then(|| format!("{g} bytes of tables' inline values dead")),
                        (o > 0).then(|| format!("{o} bytes the layout's own")),
                    ]
                    .into_iter()
                    .flatten()
                    .collect();
                    if parts.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", parts.join(", "))
                    }
                },
                self.space.live_share_of_writes_milli as f64 / 1000.0,
                match self.space.shadow_share_of_writes_milli {
                    Some(s) => format!(", and shadow an older version at {:.2}", s as f64 / 1000.0),
                    None => String::new(),
                },
            )?;
        }
        if let Some(n) = &self.space.space_limit_note {
            writeln!(f, "  space limit: {n}")?;
        }
        if let Some(p) = &self.poisoned {
            writeln!(f, "  POISONED: {p}")?;
        }
        Ok(())
    }
}

/// Microseconds writes waited, by what they waited for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StallMicros {
    /// Every write buffer full: waiting for a flush.
    pub memtables: u64,
    /// L0 at its stop trigger, or the slowdown delay.
    pub level0: u64,
    /// The value store at its capacity: waiting for GC.
    pub value_store: u64,
    /// Space amplification between the low and high limits (slowed) or at
    /// the high limit (waiting for GC).
    pub space_limit: u64,
}

/// The engine's running counters, behind [`Stats`].
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) user_bytes: AtomicU64,
    pub(crate) user_ops: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) flush_wait_micros: AtomicU64,
    pub(crate) flush_micros: AtomicU64,
    pub(crate) discovery_flushes: AtomicU64,
    pub(crate) flush_shadow_lookups: AtomicU64,
    pub(crate) flush_shadow_lookups_unused: AtomicU64,
    pub(crate) flush_separated: AtomicU64,
    pub(crate) flush_separated_bytes: AtomicU64,
    pub(crate) flush_kept_inline: AtomicU64,
    pub(crate) flush_kept_inline_bytes: AtomicU64,
    pub(crate) jobs_by_gc: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) trivial_moves: AtomicU64,
    pub(crate) compaction_ranges: AtomicU64,
    pub(crate) compaction_twins: AtomicU64,
    pub(crate) compaction_read: AtomicU64,
    pub(crate) compaction_written: AtomicU64,
    pub(crate) slowdowns: AtomicU64,
    pub(crate) stalls: AtomicU64,
    pub(crate) stall_micros: AtomicU64,
    pub(crate) stall_memtable_micros: AtomicU64,
    pub(crate) stall_l0_micros: AtomicU64,
    pub(crate) stall_store_micros: AtomicU64,
    pub(crate) stall_space_micros: AtomicU64,
    pub(crate) journal_syncs: AtomicU64,
    pub(crate) write_groups: AtomicU64,
    pub(crate) gc_runs: AtomicU64,
    pub(crate) gc_overlapped: AtomicU64,
    pub(crate) gc_commit_micros: AtomicU64,
    pub(crate) gc_commit_journal_micros: AtomicU64,
    pub(crate) gc_bytes_read: AtomicU64,
    pub(crate) gc_bytes_written: AtomicU64,
    pub(crate) relocations_applied: AtomicU64,
    pub(crate) relocations_dropped: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}
