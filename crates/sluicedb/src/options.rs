//! Options of a database, their defaults, and presets.
//!
//! Every default is a named constant that docs refer to. Setters are
//! builder-style: `Options::default().write_buffer_size_bytes(8 << 20)`.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::fs::{Fs, StdFs};

/// Default memtable size before it is switched and flushed: 64 MiB.
pub const DEFAULT_WRITE_BUFFER_SIZE_BYTES: usize = 64 << 20;
/// Default number of memtables in memory (1 active + immutable ones): 2.
pub const DEFAULT_MAX_WRITE_BUFFERS: usize = 2;
/// Default size of a table's data blocks: 4 KiB.
pub const DEFAULT_BLOCK_SIZE_BYTES: usize = 4096;
/// Default distance between restart points in a data block: 16 entries.
pub const DEFAULT_BLOCK_RESTART_INTERVAL: usize = 16;
/// Default bloom filter bits per key: 10 (about 1% false positives).
pub const DEFAULT_BLOOM_BITS_PER_KEY: u32 = 10;
/// Default block cache budget: 64 MiB.
pub const DEFAULT_BLOCK_CACHE_BYTES: usize = 64 << 20;
/// Default bound on open table files: 1000.
pub const DEFAULT_MAX_OPEN_TABLES: usize = 1000;
/// Default number of L0 tables that triggers an L0 compaction: 4.
pub const DEFAULT_L0_COMPACTION_TRIGGER: usize = 4;
/// Default number of L0 tables at which each write is delayed by 1 ms: 8.
pub const DEFAULT_L0_SLOWDOWN_TRIGGER: usize = 8;
/// Default number of L0 tables at which writes wait for compaction: 12.
pub const DEFAULT_L0_STOP_TRIGGER: usize = 12;
/// Default number of levels: 7 (L0..L6).
pub const DEFAULT_NUM_LEVELS: usize = 7;
/// Default size ratio between adjacent levels: 10.
pub const DEFAULT_LEVEL_SIZE_RATIO: u64 = 10;
/// Default target size of L1: 256 MiB (four 64 MiB flushes).
pub const DEFAULT_BASE_LEVEL_SIZE_BYTES: u64 = 256 << 20;
/// Default target size of a compaction output table: 64 MiB.
pub const DEFAULT_TARGET_FILE_SIZE_BYTES: u64 = 64 << 20;
/// Default number of background threads for flushes and compactions: 2.
pub const DEFAULT_BACKGROUND_THREADS: usize = 2;
/// Default manifest size before it is rolled into a new one: 64 MiB.
pub const DEFAULT_MAX_MANIFEST_BYTES: u64 = 64 << 20;
/// Default size of a value log file before a new one is started: 64 MiB.
pub const DEFAULT_VALUE_LOG_FILE_SIZE_BYTES: u64 = 64 << 20;
/// Default value log write buffer: 256 KiB (WiscKey, FAST '16, §3.4.1).
pub const DEFAULT_VALUE_LOG_BUFFER_BYTES: usize = 256 << 10;
/// Default bytes GC reads from the value log tail per run: 4 MiB (WiscKey, FAST '16, §3.3.2).
pub const DEFAULT_GC_CHUNK_BYTES: u64 = 4 << 20;
/// Default garbage ratio of the value log that triggers GC: 0.3.
pub const DEFAULT_GC_GARBAGE_RATIO: f64 = 0.3;

/// Space amplification (bytes of every file ÷ live bytes) at which GC takes
/// priority and writes slow down in proportion (Scavenger, VLDB, §3.5's low ratio;
/// the paper gives no value): 1.4, four fifths of the way to the high
/// ratio ([`SpaceLimit::with_high`]). The lower the ratio GC is held at,
/// the less garbage its victims hold and the more live data it copies per
/// byte freed. At 1 GiB (`sluice bench`, page cache unbounded, 2026-11-24)
/// 1.3 held the Mixed workload's update phase at 1.24-1.32 and ran the
/// scavenger preset at 14-15k ops/s, its GC victims 30-40% garbage; 1.4
/// ran it at 20k (phase end 1.39). The 1 KiB update workload's phases ended
/// at 1.38-1.49 under 1.4 for the scavenger, hashkv and wisckey presets;
/// 1.45 let one end at 1.51, over the high ratio. The wisckey preset keeps
/// [`WISCKEY_SPACE_LOW_RATIO`]. 1.45 for the hashkv preset alone was
/// measured on 2026-11-25 and not kept (`docs/experiments.md`, "hashkv's
/// low ratio at 1.45").
pub const DEFAULT_SPACE_LOW_RATIO: f64 = 1.4;

/// The wisckey preset's low ratio: 1.3. Its GC can only collect the log's
/// tail, whatever the garbage elsewhere, so it needs the wider band: at
/// 1.4, `tests/space_limit.rs` saw a 20 MB store churning past 1.5 x its
/// data plus the slack in half of its runs (the writes waiting at the high
/// ratio gave up while the tail held too little garbage to gain).
pub const WISCKEY_SPACE_LOW_RATIO: f64 = 1.3;

/// Space amplification at which writes wait for GC (Scavenger, VLDB, §3.5's high
/// ratio; its evaluation limits space to 1.5× the dataset).
pub const DEFAULT_SPACE_HIGH_RATIO: f64 = 1.5;

/// Space-aware throttling (Scavenger, VLDB, §3.5): the low and high space
/// amplification ratios. Space amplification is the bytes of every file the
/// database holds (tables, value files, journals, files not deleted yet)
/// over its live bytes (tables, and the value records the index points at).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpaceLimit {
    /// From here GC runs whatever the garbage ratio, and writes slow down
    /// in proportion to how far the ratio is toward `high`.
    pub low: f64,
    /// From here writes wait for GC while it can free space.
    pub high: f64,
}

impl Default for SpaceLimit {
    fn default() -> Self {
        SpaceLimit {
            low: DEFAULT_SPACE_LOW_RATIO,
            high: DEFAULT_SPACE_HIGH_RATIO,
        }
    }
}

impl SpaceLimit {
    /// The limit at `high` with the default's proportions: low four fifths
    /// of the way from 1 to `high` (1.4 for 1.5, 1.24 for 1.3).
    pub fn with_high(high: f64) -> SpaceLimit {
        SpaceLimit {
            low: 1.0 + (high - 1.0) * 0.8,
            high,
        }
    }
}
/// Default threads reading separated values in parallel for range scans:
/// 16 (WiscKey, FAST '16, §3.3.1 uses 32). Measured with `scripts/bench-scan.sh` on
/// this project's 2-core machine, a cold-cache scan of 4 KiB values ran at
/// 82-103 MB/s with no read-ahead, 164-194 MB/s with 4 threads and
/// 225-260 MB/s with 16; with the data in the page cache read-ahead costs
/// about 15%. The threads start on the first scan and sleep when idle.
pub const DEFAULT_SCAN_PREFETCH_THREADS: usize = 16;

/// Default main segment of a hash layout group: 64 MiB (HashKV, USENIX ATC '18, §3.2).
pub const DEFAULT_HASH_MAIN_SEGMENT_BYTES: u64 = 64 << 20;
/// Default log segment of the hash layout's reserve: 1 MiB (HashKV, USENIX ATC '18, §3.2).
pub const DEFAULT_HASH_LOG_SEGMENT_BYTES: u64 = 1 << 20;
/// Default share of the value store capacity kept as reserve for log
/// segments: 0.3 (HashKV, USENIX ATC '18, §4.1).
pub const DEFAULT_HASH_RESERVE_RATIO: f64 = 0.3;
/// Default segment groups without a capacity to derive them from: 16.
pub const DEFAULT_HASH_GROUPS: usize = 16;
/// Default batch write threshold of the hash layout: 64 KiB. HashKV uses
/// 4 KiB (HashKV, USENIX ATC '18, §3.8), trading random writes against the parallelism of
/// 32 flush threads writing to an SSD. Here a group's batch goes to the page
/// cache with one system call, so only the number of calls counts: 64 KiB
/// loaded 500k × 1 KiB pairs at 215–287k ops/s against 157–170k with 4 KiB
/// (`docs/design.md`, "Hash layout", write path).
pub const DEFAULT_HASH_BATCH_BYTES: usize = 64 << 10;
/// Default separation threshold of the `hashkv` preset: 192 B (HashKV, USENIX ATC '18,
/// §3.5).
pub const DEFAULT_HASHKV_SEPARATION_THRESHOLD_BYTES: usize = 192;
/// UniKV: bytes of an UnsortedStore at which it is merged into the
/// SortedStore (UniKV, ICDE '20, §III-C's `UnsortedLimit`; the paper's 4 GB, with
/// 64 MB memtables, is 64 of them; here 8, for a machine whose data sets
/// are ten times smaller than the paper's).
pub const DEFAULT_UNIKV_UNSORTED_LIMIT_BYTES: u64 = 512 << 20;
/// UniKV: hash functions of the UnsortedStore's cuckoo hash index
/// (UniKV, ICDE '20, §III-B: "n = 4" in its runs).
pub const DEFAULT_UNIKV_HASH_FUNCTIONS: u32 = 4;
/// UniKV: bytes of unsorted data per hash bucket when
/// [`UnifiedOptions::hash_buckets`] is 0: one bucket per KiB, the paper's
/// 4 M buckets for its 4 GB UnsortedStore.
pub const UNIKV_BYTES_PER_HASH_BUCKET: u64 = 1024;
/// UniKV: bytes of a range partition (its sorted keys and pointers and the
/// values they point at) at which its next merge splits it in two
/// at its median key (UniKV, ICDE '20, §III-D's partition size limit; the paper's
/// 40 GB is ten of its 4 GB UnsortedStores, here eight of ours: 4 GiB).
pub const DEFAULT_UNIKV_PARTITION_SIZE_LIMIT_BYTES: u64 = 4 << 30;
/// UniKV: unsorted tables of one partition above which, while scans run,
/// they are merged into one sorted table (UniKV, ICDE '20, §III-F's
/// `scanMergeLimit`, for which the paper gives no figure). A scan reads
/// every unsorted table of the partitions it crosses; at the default
/// unsorted limit a partition holds about eight memtables' tables when its
/// merge starts, so 4 halves what a scan meets at most for a rewrite of
/// at most half the unsorted limit.
pub const DEFAULT_UNIKV_SCAN_MERGE_LIMIT: usize = 4;
/// UniKV: the garbage ratio from which a merge moves a value table's
/// records on its own, 0.2 (Scavenger's) for now; below it tables are
/// collected only when the space limit asks (from its low ratio, tables at least as full of garbage
/// as the store's average). The paper triggers GC by the size of a
/// partition's logs (§III-C) and gives no ratio. Measured with 1 KiB Zipf
/// (0.99) updates, `sluice bench --benchmarks update --table-gc-ratio R`,
/// P1-P3 (each as many updates as keys; 5 GiB: 2M each, page cache capped
/// at 853 MiB):
/// - 0.2 (Scavenger's): 1 GiB 297k, 76k, 100k ops/s (29 GC merges in P2
///   and P3); at 5 GiB every table the load wrote reached the ratio in P3
///   (their records age together): merges moved 5 GB in 2 GB of updates,
///   77k ops/s and then 69 s to settle;
/// - 0.5: 1 GiB 101k, 105k, 99k (GC moved 1-1.7 GB each phase); 5 GiB
///   126k, 100k, 110k;
/// - 0.8: 1 GiB 357k, 101k, 196k (4 GC merges; space amplification
///   1.22-1.33 at the phase ends); 5 GiB 125k, 107k, 116k (1.26-1.42).
///
/// 0.8 is the fastest. (It waited on a fix: the accounting test
/// `merges_collect_value_tables_without_lookups_and_space_stays_bounded`
/// found a record no pointer named and no count held in 2 to 8 runs of 12
/// at 0.8. A merge over a value table's key range had left out unsorted
/// tables that its sorted inputs overlapped, and moved records a flush had
/// counted already; `Unified::merge_plan_covering` is closed both ways
/// now, and 0 of 54 contended runs failed.)
pub const DEFAULT_UNIKV_TABLE_GC_RATIO: f64 = 0.8;
/// Default value table size of the table layout: 64 MiB. Scavenger's vSSTs
/// are 256 MB beside a 64 MB memtable (Scavenger, VLDB, §4.1); our memtable is the
/// same 64 MiB, but GC frees space a whole table at a time and this machine
/// holds 2-4 GiB benchmarks, so tables are a quarter of the paper's.
pub const DEFAULT_VALUE_TABLE_BYTES: u64 = 64 << 20;
/// Default garbage ratio from which a value table is collected: 0.2, the
/// paper's (Scavenger, VLDB, §4.1, "GC is triggered at a garbage ratio of 0.2").
pub const DEFAULT_TABLE_GC_RATIO: f64 = 0.2;
/// Default bytes of the table layout's DropCache
/// ([`TableLayoutOptions::drop_cache_bytes`]): 8 MiB, about 110,000 keys
/// of 24 bytes.
pub const DEFAULT_DROP_CACHE_BYTES: usize = 8 << 20;
/// Most segment groups a hash layout may start with
/// ([`HashOptions::groups`]): far past any store the layout is meant for
/// (every open starts a head file in each group), and a bound on what a
/// damaged manifest can make recovery allocate.
pub const MAX_HASH_GROUPS: u32 = 1 << 20;
/// Separation threshold of the `adaptive` preset, the default: 2 KiB.
/// Where it lies comes from the benchmark matrix (`sluice bench
/// --benchmarks update --dataset-gib 1`, Zipf 0.99 updates, in memory and
/// under a page cache capped at a quarter of the data, 2026-11-28): with
/// 1 KiB values inline values win in both regimes (leveldb 151k / 138k /
/// 171k / 197k ops/s under the cap, P0-P3, against the best separated
/// preset's 206k / 156k / 101k / 118k); with 2 KiB values separating at
/// flush into value tables ties in memory (563k summed over the phases
/// against 557k) and wins under the cap (487k against 343k); with 4 KiB
/// values it wins in both (359k against 301k, and 223k against 179k).
/// `docs/experiments.md`, "The adaptive default's threshold".
pub const DEFAULT_ADAPTIVE_SEPARATION_THRESHOLD_BYTES: usize = 2 << 10;

/// Default separation threshold of the `scavenger` preset: 512 B. The
/// paper gives none; its Mixed workload's small values (100-512 B) are the
/// ones "falling below the separation threshold" (Scavenger, VLDB, §1, §2.5), so
/// they stay inline (all but those of exactly 512 B).
pub const DEFAULT_SCAVENGER_SEPARATION_THRESHOLD_BYTES: usize = 512;

/// Default largest group of writes committed together: 1 MiB.
pub const DEFAULT_MAX_WRITE_GROUP_BYTES: usize = 1 << 20;

/// How recovery treats damage in the journal (RocksDB's
/// `WALRecoveryMode`, `docs/design.md` "Recovery").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum JournalRecovery {
    /// An incomplete or damaged record at the end of the newest journal is
    /// the end of history (a crash tore it); damage anywhere else is
    /// `Corruption`. The default: never loses synced data silently.
    #[default]
    TolerateCorruptedTail,
    /// Any incomplete or damaged record is `Corruption`, even a torn tail.
    /// For applications that sync every write and want to know.
    AbsoluteConsistency,
    /// Stop at the first damage anywhere and open with the history before
    /// it. Always a prefix of history; may drop synced writes after damage.
    PointInTime,
    /// Skip damaged records and keep going. Salvage only: the result may not
    /// be a prefix of history.
    SkipAnyCorrupted,
}

/// A complete configuration of the engine's design axes (`docs/design.md`, "The three axes and the presets").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Preset {
    /// The default: the combination the benchmark matrix favours, which
    /// decides per value where it goes. A leveled index whose values stay
    /// inline while they are small (under
    /// [`DEFAULT_ADAPTIVE_SEPARATION_THRESHOLD_BYTES`], 2 KiB), where an
    /// LSM-tree rewriting them costs less than separating them; larger ones
    /// are separated when their memtable is flushed (so updates absorbed in
    /// the memtable never reach the value store, HashKV's write cache) into
    /// value tables collected by Scavenger's lazy-read GC with inheritance
    /// edges and its DropCache, the index's tables index-decoupled; the
    /// space limit (1.4 / 1.5) bounds the space used while writing. Each
    /// version of a key is placed by its own size, so a key whose value
    /// shrinks moves back inline at its next flush, and one that grows
    /// moves out (HashKV's selective separation, HashKV, USENIX ATC '18, §3.5, decided
    /// per version). A database created under another preset opened with
    /// these options keeps its value store as it is: values it separated
    /// stay readable, and new ones stay inline unless its store is value
    /// tables. `Stats::flush` counts the decisions. Level 0 is merged
    /// from 8 tables while writes flow, and from 4 once user reads have
    /// met its tables enough to pay for the merge
    /// ([`IndexOptions::l0_read_compaction_trigger`]).
    #[default]
    Adaptive,
    /// Plain leveled LSM tree with values inline (LevelDB, WiscKey, FAST '16, §2.2).
    LevelDb,
    /// Key-value separation into a value log (WiscKey, FAST '16, §3): every
    /// value goes to the log (threshold 0), the log doubles as the journal.
    WiscKey,
    /// Hash-grouped value store (HashKV, USENIX ATC '18, §3): values of 192 B and
    /// more go to segment groups chosen by key hash, collected a group at a
    /// time, with hotness awareness (cold values to a cold log, §3.4).
    /// Level 0 is compacted from 8 tables (slowdown 16, stop 24): the
    /// index holds pointers only, so its L1 is small and every L0 merge
    /// rewrites all of it; merging half as often halves that work. From 4
    /// once user reads have paid for the merge, as for the default.
    HashKv,
    /// Scavenger (VLDB, §3): values of 512 B and more go, at flush, to
    /// sorted value tables split hot and cold by the DropCache; GC reads a
    /// victim's dense index first and then only its live values, and
    /// records inheritance edges instead of rewriting the index; space
    /// bounded at 1.5x the live data.
    /// Level 0 is compacted from 8 tables, as for hashkv's index of
    /// pointers (from 4 once reads paid for it).
    Scavenger,
    /// UniKV (ICDE '20, §III): the `unified` index shape. Flushed tables
    /// keep their values inline in an UnsortedStore found through an
    /// in-memory two-level hash index (no bloom filters); at
    /// `unsorted_limit_bytes` they are merged into the partition's sorted
    /// run, whose values go to value tables of the merge's own (partial KV
    /// separation, every value, as in the paper, §III-C). The key space is
    /// cut into range partitions, each merged on its own and split at its
    /// median key past `partition_size_limit_bytes` (§III-D); merges also
    /// collect garbage, moving the live values of value tables past a
    /// garbage ratio of 0.8, and scans merge a partition's unsorted tables
    /// when there are many (§III-F).
    UniKv,
    /// LightKV (ICDE, §III): no journal; a write is durable once its record
    /// is in a persistent-memory write buffer (a mapped file here, `msync`
    /// as the fence), whose records a Radix-Hash-Tree indexes, partition by
    /// key range; a full leaf is flushed alone into a table, and tables are
    /// compacted per key-range partition by the weight rule (§III-F).
    /// Still being built (`docs/design.md`, "LightKV (being built)", "Still
    /// to build": persistent leaves, loading the tree after a clean
    /// shutdown, lazy scans of the buffer).
    LightKv,
}

/// LightKV's options ([`Options::preset`] with [`Preset::LightKv`]): the
/// persistent write buffer and the Radix-Hash-Tree over it. Named defaults,
/// scaled to this machine (`docs/design.md`, "LightKV: the preset"): the
/// paper's 4 MB segments and 2048 leaves assume a PM device of hundreds of
/// GB; here the buffer is as large as the other presets' memtable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LightKvOptions {
    /// Size of the persistent write buffer, the file `LIGHTKV.pwb`
    /// ([`DEFAULT_LIGHTKV_BUFFER_BYTES`]). Writes stall while it is full
    /// and its leaves are being flushed.
    pub buffer_bytes: u64,
    /// Its segment size, a multiple of 64 from 256 B to 2 GiB
    /// ([`DEFAULT_LIGHTKV_SEGMENT_BYTES`]): each top leaf
    /// appends to a segment of its own, so the buffer holds at most this
    /// many partitions' writes at once, and a record (key and value) must
    /// fit in one.
    pub segment_bytes: u64,
    /// Buckets of a hash leaf, 4 slots each
    /// ([`DEFAULT_LIGHTKV_LEAF_BUCKETS`]): how many keys a leaf, and so a
    /// flushed table, holds.
    pub leaf_buckets: usize,
    /// Partitions (top leaves) before a full leaf links instead of
    /// splitting, the paper's MAX_LEAF_NODES
    /// ([`DEFAULT_LIGHTKV_MAX_LEAF_NODES`]).
    pub max_leaf_nodes: usize,
    /// The paper's compaction size `CS` (§III-F): this many tables of one
    /// weight in a partition merge into one of the next weight
    /// ([`DEFAULT_LIGHTKV_COMPACTION_SIZE`]); at least 2.
    pub compaction_size: usize,
    /// A partition's share of the table bytes at which it splits (§III-G)
    /// ([`DEFAULT_LIGHTKV_PARTITION_SPLIT_BYTES`]).
    pub partition_split_bytes: u64,
    /// What a fence of the buffer does when it is a mapped file
    /// ([`crate::pm::FenceMode`], default `Msync`: durable across a power
    /// loss). `Cache` makes a fence a memory fence, standing in for real
    /// persistent memory: data then survives a process crash but not a
    /// power loss, as unsynced journal writes of the other presets do.
    /// Benchmarks say which mode ran. No effect on an in-memory file system.
    pub fence: crate::pm::FenceMode,
}

/// Default [`LightKvOptions::buffer_bytes`]: 64 MiB, the other presets'
/// memtable.
pub const DEFAULT_LIGHTKV_BUFFER_BYTES: u64 = 64 << 20;
/// Default [`LightKvOptions::segment_bytes`]: 256 KiB, 256 segments in the
/// default buffer (the paper: 4 MB).
pub const DEFAULT_LIGHTKV_SEGMENT_BYTES: u64 = 256 << 10;
/// Default [`LightKvOptions::leaf_buckets`]: 256 buckets, 1024 slots.
pub const DEFAULT_LIGHTKV_LEAF_BUCKETS: usize = 256;
/// Default [`LightKvOptions::max_leaf_nodes`]: 64 (the paper: 2048), a
/// quarter of the default buffer's segments, so that every partition's
/// top leaf has a segment to append to with room to spare.
pub const DEFAULT_LIGHTKV_MAX_LEAF_NODES: usize = 64;
/// Default [`LightKvOptions::compaction_size`]: 8 (the paper's `CS` is 4;
/// why 8: `lightkv::compaction::DEFAULT_COMPACTION_SIZE`).
pub const DEFAULT_LIGHTKV_COMPACTION_SIZE: usize =
    crate::lightkv::compaction::DEFAULT_COMPACTION_SIZE;
/// Default [`LightKvOptions::partition_split_bytes`]: 16 MiB, about 16 full
/// leaves' tables of 1 KiB values, so that a partition holds on the order
/// of the paper's dozen flushed tables before it splits.
pub const DEFAULT_LIGHTKV_PARTITION_SPLIT_BYTES: u64 = 16 << 20;

/// How the key index organises its tables (`docs/design.md`, "The three axes and the presets", axis 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum IndexShapeKind {
    /// LevelDB's levels L0..Ln (WiscKey, FAST '16, §2.2).
    #[default]
    Leveled,
    /// UniKV's UnsortedStore under a hash index over one sorted run
    /// (UniKV, ICDE '20, §III). Values stay inline until a merge separates them.
    Unified,
    /// LightKV's partition compaction (§III-F): key-range partitions whose
    /// tables merge `CS` at a time by compaction weight.
    Partitioned,
}

/// How the hash layout picks the segment group to collect (HashKV, USENIX ATC '18, §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HashGcPolicy {
    /// The group with the most bytes written since its last GC (the
    /// paper's default: it likely holds the most garbage).
    #[default]
    Greedy,
    /// Cost-benefit (CBA): prefers old groups with a low estimated share
    /// of valid data.
    CostBenefit,
    /// Greedy-random (GRA): a random one of the `d` groups with the most
    /// writes; `d = 1` is greedy, `d` ≥ groups is random.
    GreedyRandom {
        /// How many of the most-written groups to choose among.
        d: usize,
    },
    /// The group with the most garbage the space accounting knows of
    /// (flushes count an overwrite's or delete's old value at once;
    /// `docs/design.md`, "Space accounting"); by bytes written since its
    /// last GC among groups with none known. Not in the paper, whose
    /// greedy policy uses writes as the proxy for garbage because it has no
    /// count of it.
    MostGarbage,
}

/// How the value store lays out separated values (`docs/design.md`, "The three axes and the presets", axis 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ValueLayout {
    /// One log: appends at the head, GC from the tail (WiscKey).
    #[default]
    Log,
    /// Segment groups by key hash, each a main segment that grows into log
    /// segments from a reserved pool (HashKV, USENIX ATC '18, §3.2).
    Hash,
    /// Sorted value tables written at flush, collected by lazy-read GC that
    /// leaves the index alone and records inheritance edges (Scavenger,
    /// Scavenger, VLDB, §3.2; TerarkDB, §2.2). Needs `separate_at_flush`, except
    /// under the unified shape, whose merges write the tables and collect
    /// them (UniKV, ICDE '20, §III-C).
    Table,
}

/// Where writes are made durable before they reach tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum JournalMode {
    /// The engine's write-ahead journal (`NNNNNN.log`); separated values
    /// are written to the value store and the journal holds pointers.
    #[default]
    Journal,
    /// No journal: the value log is the journal (WiscKey, FAST '16, §3.4.2). Every
    /// operation is a value log record; small values stay inline in the
    /// index too. Requires a value store (`separation_threshold_bytes`).
    ValueLog,
}

impl Preset {
    /// The preset's name as the CLI spells it.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Adaptive => "adaptive",
            Preset::LevelDb => "leveldb",
            Preset::WiscKey => "wisckey",
            Preset::HashKv => "hashkv",
            Preset::Scavenger => "scavenger",
            Preset::UniKv => "unikv",
            Preset::LightKv => "lightkv",
        }
    }

    /// Parses a CLI name.
    pub fn from_name(s: &str) -> Option<Preset> {
        match s {
            "adaptive" => Some(Preset::Adaptive),
            "leveldb" => Some(Preset::LevelDb),
            "wisckey" => Some(Preset::WiscKey),
            "hashkv" => Some(Preset::HashKv),
            "scavenger" => Some(Preset::Scavenger),
            "unikv" => Some(Preset::UniKv),
            "lightkv" => Some(Preset::LightKv),
            _ => None,
        }
    }

    /// Every preset: the suites that iterate over presets run each.
    pub fn all() -> &'static [Preset] {
        &[
            Preset::Adaptive,
            Preset::LevelDb,
            Preset::WiscKey,
            Preset::HashKv,
            Preset::Scavenger,
            Preset::UniKv,
            Preset::LightKv,
        ]
    }
}

/// Options for [`crate::Db::open`]: start from [`Options::preset`] (or
/// [`Options::default`], the `adaptive` preset) and change what you need
/// with the setters, each documented with its default and trade-off:
///
/// ```
/// use sluicedb::{Options, Preset};
/// let opts = Options::preset(Preset::HashKv)
///     .write_buffer_size_bytes(64 << 20)
///     .block_cache_bytes(256 << 20);
/// assert_eq!(opts.values().hash.hotness, true);
/// ```
///
/// The settings are grouped by the design's axes, and read back through
/// [`Options::index`] ([`IndexOptions`]), [`Options::values`]
/// ([`ValueOptions`], with each layout's own options: [`LogOptions`],
/// [`HashOptions`], [`TableLayoutOptions`]) and [`Options::gc`]
/// ([`GcOptions`]); the write buffer, journal and threads are at the top.
/// Setters are flat and named for what they set (`hash_groups` sets
/// `values().hash.groups`). Combinations that cannot work are refused by
/// [`Options::validate`] (run by the open) with an error naming the
/// options. Options may be added in any release (`#[non_exhaustive]`).
#[derive(Clone)]
#[non_exhaustive]
pub struct Options {
    /// Create the database if the directory holds none. Default: true.
    pub(crate) create_if_missing: bool,
    /// Fail if a database already exists. Default: false.
    pub(crate) error_if_exists: bool,
    /// Open without changing a byte of the directory: no new journal or
    /// value store file, no manifest roll, no deletions, no flushes,
    /// compactions or GC; writes fail with [`Error::ReadOnly`]. Recovery
    /// still runs, in memory: writes the journals hold are visible, and a
    /// crashed database reads as the next writable open would recover it.
    /// The database must exist. Default: false.
    pub(crate) read_only: bool,
    /// Bytes of memtable before it is switched to immutable and flushed
    /// ([`DEFAULT_WRITE_BUFFER_SIZE_BYTES`]): heap memory, each entry
    /// counted with its skiplist node and allocator rounding, so that a
    /// memtable of small entries (value pointers) holds fewer of them than
    /// this many bytes of keys and values. Larger: fewer, larger L0 tables
    /// and less write amplification; more memory and longer recovery.
    pub(crate) write_buffer_size_bytes: usize,
    /// Memtables kept in memory, active plus immutable
    /// ([`DEFAULT_MAX_WRITE_BUFFERS`]). More absorbs bursts while a flush
    /// runs, at the cost of memory.
    pub(crate) max_write_buffers: usize,
    /// Bytes the memtables and the block cache share
    /// (`docs/design.md`, "Memory"): while immutable memtables wait for
    /// their flush, the block cache gives way to them, down to an eighth of
    /// [`IndexOptions::block_cache_bytes`], so that a flush that falls
    /// behind does not add a whole memtable to the process's memory
    /// (RocksDB's write buffer manager charging memtables to the block
    /// cache, without its stall). `None` (the default): the write buffer
    /// plus the block cache, so that one immutable memtable takes the
    /// cache's room; but when the process's memory cgroup limits it below
    /// the machine's memory and that is too little for these sizes, 5/8 of
    /// the limit (3/8 once the store holds separated values, whose GC
    /// needs memory the budget does not count), with the block cache and
    /// then the write buffer made smaller so that every write buffer full
    /// beside the cache at its floor fits, and the page cache keeps its
    /// share of the limit (`docs/design.md`, "Memory", *Under a memory
    /// limit*; [`crate::MemoryStats::limit_bytes`] says when it did). `usize::MAX`:
    /// no budget, the cache keeps its size. A budget given here stands, the
    /// sizes as set.
    pub(crate) memory_budget_bytes: Option<usize>,
    /// The memory limit the default budget is fitted to when
    /// `memory_budget_bytes` is `None` (`crate::memory`): the process's
    /// memory cgroup's, unless a test gives one.
    pub(crate) memory_limit: crate::memory::MemoryLimit,
    /// The limit the budget and sizes follow, with the sizes as set
    /// (`crate::memory::fit_to_limit` sets it at open); `None`: they are
    /// as set.
    pub(crate) memory_limit_fit: Option<crate::memory::LimitFit>,
    /// Background threads for flushes and compactions
    /// ([`DEFAULT_BACKGROUND_THREADS`]). With two or more, one is kept
    /// for flushes so that a long compaction never blocks a flush.
    pub(crate) background_threads: usize,
    /// How recovery treats journal damage ([`JournalRecovery`]).
    pub(crate) journal_recovery: JournalRecovery,
    /// Manifest size that triggers a roll ([`DEFAULT_MAX_MANIFEST_BYTES`]).
    pub(crate) max_manifest_bytes: u64,
    /// Largest group of concurrent writes committed with one journal write
    /// ([`DEFAULT_MAX_WRITE_GROUP_BYTES`]).
    pub(crate) max_write_group_bytes: usize,
    /// Journal or value-log-as-journal ([`JournalMode`]). Default: journal.
    pub(crate) journal_mode: JournalMode,
    /// Leave unsynced writes out of the journal (RocksDB's `disableWAL`,
    /// for every write without `sync`): such a write reaches the disk only
    /// with its memtable's flush ([`crate::Db::flush`], or one the engine
    /// starts), and a crash before that loses it and the unsynced writes
    /// after it. Synced writes are journaled and survive as ever; they
    /// do not make the unjournaled ones before them durable, nor does
    /// [`crate::Db::sync`]; a checkpoint flushes first. So the keys written
    /// only unsynced recover to the last flushed state, a prefix of their
    /// history. For callers that keep their writes in a durable log of
    /// their own and record in the same batches how far it was applied (a
    /// replicated state machine). Honoured where the memtable holds the
    /// values whole until its flush (the engine journal, no separation
    /// at write, no LightKV buffer) and GC judges records in the durable
    /// view; elsewhere writes are journaled as usual
    /// (`docs/design.md`, "Unjournaled writes"). Default: false.
    pub(crate) skip_journal_unless_synced: bool,
    /// The key index: levels, compaction triggers and tables
    /// (`docs/design.md`, "The three axes and the presets", axis 1).
    pub(crate) index: IndexOptions,
    /// The value store: separation and its layout (axis 2).
    pub(crate) values: ValueOptions,
    /// Garbage collection of the value store (axis 4).
    pub(crate) gc: GcOptions,
    /// LightKV's write buffer and tree ([`Preset::LightKv`] only).
    pub(crate) lightkv: LightKvOptions,
    /// The file system. Default: [`StdFs`].
    pub(crate) fs: Arc<dyn Fs>,
    /// The preset these options came from.
    pub(crate) preset: Preset,
    /// Whether the caller named `preset` ([`Options::preset`]) rather than
    /// taking the default ([`Options::default`]): a named preset other
    /// than the one the database was created with is refused at open.
    pub(crate) preset_named: bool,
}

/// The key index's options ([`Options::index`]): the leveled shape and
/// its tables.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct IndexOptions {
    /// Data block size ([`DEFAULT_BLOCK_SIZE_BYTES`]). Larger blocks: smaller
    /// index, faster scans; more bytes read per point lookup.
    pub block_size_bytes: usize,
    /// Entries between restart points ([`DEFAULT_BLOCK_RESTART_INTERVAL`]).
    /// Larger: better key prefix compression, slower seeks within a block.
    pub block_restart_interval: usize,
    /// Bloom filter bits per key, 0 for none ([`DEFAULT_BLOOM_BITS_PER_KEY`]).
    pub bloom_bits_per_key: u32,
    /// Block cache budget in bytes, 0 for none ([`DEFAULT_BLOCK_CACHE_BYTES`]).
    pub block_cache_bytes: usize,
    /// Open table files kept ([`DEFAULT_MAX_OPEN_TABLES`]).
    pub max_open_tables: usize,
    /// L0 tables that trigger compaction ([`DEFAULT_L0_COMPACTION_TRIGGER`]).
    pub l0_compaction_trigger: usize,
    /// L0 tables at which writes are slowed by 1 ms each
    /// ([`DEFAULT_L0_SLOWDOWN_TRIGGER`]).
    pub l0_slowdown_trigger: usize,
    /// L0 tables at which writes stop until compaction catches up
    /// ([`DEFAULT_L0_STOP_TRIGGER`]).
    pub l0_stop_trigger: usize,
    /// L0 tables from which L0 is merged into L1, below
    /// `l0_compaction_trigger`, once user reads have met its tables enough
    /// to pay for the merge (the leveled shape; `docs/design.md`, "L0
    /// merged for reads"). At or above `l0_compaction_trigger` it does
    /// nothing. Default [`DEFAULT_L0_COMPACTION_TRIGGER`]: the default,
    /// hashkv and scavenger merge L0 from 8 tables while writes flow and
    /// from 4 once reads come.
    pub l0_read_compaction_trigger: usize,
    /// Number of levels ([`DEFAULT_NUM_LEVELS`]).
    pub num_levels: usize,
    /// Size ratio of adjacent levels ([`DEFAULT_LEVEL_SIZE_RATIO`]). Larger:
    /// fewer levels and reads; more write amplification per level.
    pub level_size_ratio: u64,
    /// Target size of L1 in bytes ([`DEFAULT_BASE_LEVEL_SIZE_BYTES`]).
    pub base_level_size_bytes: u64,
    /// Target size of compaction outputs ([`DEFAULT_TARGET_FILE_SIZE_BYTES`]).
    /// Smaller: finer-grained compactions, more files.
    pub target_file_size_bytes: u64,
    /// Write index-decoupled tables (Scavenger (VLDB) §3.3, `docs/format/sstable.md`):
    /// value pointers go to pointer blocks of their own, apart from inline
    /// values and tombstones, so that GC's validity check and point lookups
    /// of separated keys read only pointer blocks, never a data block of
    /// inline values. Tables written either way stay readable. Default:
    /// true (the `adaptive` preset, and `scavenger`); off in the others.
    pub index_decoupled_tables: bool,
    /// How tables are organised ([`IndexShapeKind`]). Default: leveled. A
    /// database keeps the shape it was created with.
    pub shape: IndexShapeKind,
    /// The unified shape's sizes (UniKV, ICDE '20).
    pub unified: UnifiedOptions,
}

/// The unified shape's options ([`IndexOptions::unified`]; UniKV, ICDE '20, §III).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct UnifiedOptions {
    /// Bytes of flushed tables at which the UnsortedStore is merged into the
    /// SortedStore ([`DEFAULT_UNIKV_UNSORTED_LIMIT_BYTES`]; §III-C). Larger:
    /// fewer merges (each rewrites the sorted run's keys and pointers), more
    /// hash index memory and more tables for a scan to merge. Writes slow
    /// down at 1.5 times it and stop at twice it.
    pub unsorted_limit_bytes: u64,
    /// Buckets of each hash index (`N`); 0 sizes it from
    /// `unsorted_limit_bytes` ([`UNIKV_BYTES_PER_HASH_BUCKET`]).
    pub hash_buckets: usize,
    /// Hash functions of the cuckoo hashing (`n`, 1–8;
    /// [`DEFAULT_UNIKV_HASH_FUNCTIONS`]).
    pub hash_functions: u32,
    /// Bytes at which a range partition splits at its median key
    /// ([`DEFAULT_UNIKV_PARTITION_SIZE_LIMIT_BYTES`]; §III-D). Each
    /// partition merges and (later) collects garbage on its own, so smaller
    /// partitions make those steps smaller; each has its own UnsortedStore
    /// and hash index, so more partitions hold more unsorted data and
    /// memory.
    pub partition_size_limit_bytes: u64,
    /// While scans run, a partition's unsorted tables are merged into one
    /// sorted table once there are more than this many
    /// ([`DEFAULT_UNIKV_SCAN_MERGE_LIMIT`]; §III-F); at least 2.
    pub scan_merge_limit: usize,
}

/// The value store's options ([`Options::values`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ValueOptions {
    /// Values of at least this many bytes are stored in the value store and
    /// the index keeps a pointer (selective KV separation, HashKV, USENIX ATC '18, §3.5);
    /// `None` keeps every value inline. WiscKey's behaviour is `Some(0)`.
    /// Default: 2 KiB ([`DEFAULT_ADAPTIVE_SEPARATION_THRESHOLD_BYTES`], the
    /// `adaptive` preset); `None` in the `leveldb` preset.
    pub separation_threshold_bytes: Option<usize>,
    /// Separate values when a memtable is flushed instead of when they are
    /// written: HashKV's write cache (HashKV, USENIX ATC '18, §3.2). The journal and the
    /// memtable hold whole values, and a flush writes to the value store
    /// only each key's newest version, so updates to a key while it is in
    /// the memtable never reach the store (under a Zipf 0.99 update load
    /// with a 64 MiB memtable, about half of them). The cost: each
    /// separated value is written twice, journal and store, where separating
    /// at write time writes it once. Needs `JournalMode::Journal`.
    /// Default: true (the `adaptive` preset; also `hashkv` and `scavenger`).
    pub separate_at_flush: bool,
    /// Layout of the value store ([`ValueLayout`]). Default: table (the
    /// `adaptive` preset). A database keeps the layout it was created with.
    pub layout: ValueLayout,
    /// Space the value store may use; background GC runs while it is larger
    /// (HashKV (USENIX ATC '18) §4.2's "data plus reserve"). `None`: no size trigger.
    pub capacity_bytes: Option<u64>,
    /// Threads that read separated values in parallel for range scans
    /// ([`DEFAULT_SCAN_PREFETCH_THREADS`]; WiscKey, FAST '16, §3.3.1). A [`crate::Range`]
    /// that has returned a few pairs in a row reads the next values ahead in
    /// batches: records close together in one file with one read, the
    /// reads spread over these threads. 0 turns read-ahead off (one read
    /// per value). More threads help on devices with deep queues.
    pub scan_prefetch_threads: usize,
    /// The log layout's sizes.
    pub log: LogOptions,
    /// The hash layout's sizes and choices (HashKV, USENIX ATC '18).
    pub hash: HashOptions,
    /// The table layout's sizes and choices (Scavenger, VLDB).
    pub table: TableLayoutOptions,
}

/// The log layout's options ([`ValueOptions::log`]; WiscKey, FAST '16, §3.3).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LogOptions {
    /// Size of a value log file ([`DEFAULT_VALUE_LOG_FILE_SIZE_BYTES`]).
    /// GC frees space a whole file at a time: smaller files free space
    /// sooner, larger ones mean fewer files.
    pub file_size_bytes: u64,
    /// Value log write buffer ([`DEFAULT_VALUE_LOG_BUFFER_BYTES`]): appends
    /// reach the file system in writes of about this size.
    pub buffer_bytes: usize,
    /// Bytes GC reads from the tail per run ([`DEFAULT_GC_CHUNK_BYTES`]).
    pub gc_chunk_bytes: u64,
    /// Garbage ratio (garbage ÷ value log bytes) at which the log layout's
    /// background GC runs ([`DEFAULT_GC_GARBAGE_RATIO`]); `None`: not by
    /// ratio. The hash and table layouts have triggers of their own
    /// (free log segments, `TableLayoutOptions::gc_ratio`); to run GC only
    /// on request, turn [`GcOptions::background`] off.
    pub gc_garbage_ratio: Option<f64>,
}

/// The hash layout's options ([`ValueOptions::hash`]; HashKV, USENIX ATC '18).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HashOptions {
    /// Bytes of a group's main segment ([`DEFAULT_HASH_MAIN_SEGMENT_BYTES`]);
    /// beyond it a group takes log segments from the reserve.
    pub main_segment_bytes: u64,
    /// Bytes of a log segment, the unit the reserve is handed out in
    /// ([`DEFAULT_HASH_LOG_SEGMENT_BYTES`]).
    pub log_segment_bytes: u64,
    /// Share of [`ValueOptions::capacity_bytes`] kept as the reserve of
    /// log segments ([`DEFAULT_HASH_RESERVE_RATIO`]).
    pub reserve_ratio: f64,
    /// Number of segment groups, fixed when the database is created. 0
    /// derives it: capacity × (1 − reserve) ÷ main segment, or
    /// [`DEFAULT_HASH_GROUPS`] without a capacity.
    pub groups: usize,
    /// A group's buffered records are written out once they reach this
    /// many bytes, one sequential write per batch
    /// ([`DEFAULT_HASH_BATCH_BYTES`], HashKV, USENIX ATC '18, §3.8).
    pub batch_bytes: usize,
    /// How GC picks its victim group ([`HashGcPolicy`]). Default: greedy.
    pub gc_policy: HashGcPolicy,
    /// Hotness awareness (HashKV, USENIX ATC '18, §3.4). GC moves the values of keys not
    /// updated for a whole GC period of their group to a cold log, so later
    /// GCs of the group no longer copy them; the cold log is collected a
    /// file at a time, the file with the most known garbage first.
    /// Default: false (preset `hashkv`: true).
    pub hotness: bool,
    /// Elastic groups (`docs/design.md`, "Hash layout: elastic groups"):
    /// without a capacity, GC splits a group holding more than a main
    /// segment of live data by the next hash bits, so that the groups grow
    /// in number with the data and a GC step stays about one main segment.
    /// With [`ValueOptions::capacity_bytes`] the groups stay fixed, as in
    /// HashKV (USENIX ATC '18, §3.2). Default: true.
    pub elastic: bool,
    /// Threads a hash layout GC step uses to read its frozen files and to
    /// look up their keys in the index (HashKV, USENIX ATC '18, §3.3 reads a group's
    /// segments in parallel; here the lookups are the larger cost). 1 does
    /// both on the GC's own thread. Default: 1 (preset `hashkv`: 2).
    pub gc_threads: usize,
    /// Under the space limit's pressure, collect each GC step while the one
    /// before is being finished (its relocations committed, its edit
    /// installed), on a second thread; hash layout only (`docs/design.md`,
    /// "Overlapped steps"). Default: true (since 2026-11-25, once a GC
    /// step's records took a tenth of the memory they had: the 2 GiB runs
    /// under a 512 MiB memory cgroup peaked at 462 MB resident with it).
    pub gc_overlap_steps: bool,
}

/// The table layout's options ([`ValueOptions::table`]; Scavenger, VLDB, §3).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TableLayoutOptions {
    /// A flush or GC step starts a new value table past this size
    /// ([`DEFAULT_VALUE_TABLE_BYTES`]).
    pub file_bytes: u64,
    /// A value table is collected once this share of its records is
    /// garbage ([`DEFAULT_TABLE_GC_RATIO`]; the `unikv` preset's
    /// [`DEFAULT_UNIKV_TABLE_GC_RATIO`]); under space pressure tables with
    /// less may be.
    pub gc_ratio: f64,
    /// Bytes of the DropCache (Scavenger, VLDB, §3.4;
    /// [`DEFAULT_DROP_CACHE_BYTES`]). 0 turns it off: every key is cold and GC looks every
    /// record up.
    pub drop_cache_bytes: usize,
    /// Lazy read (Scavenger, VLDB, §3.2.2): GC reads a victim's dense index, judges
    /// every record, then reads only the live values. Off, GC reads the
    /// whole victim as Titan and BlobDB do: the ablation of Table 1 and
    /// Fig. 14. Default: true.
    pub gc_lazy_read: bool,
    /// Pointer write-back (the baseline of Scavenger, VLDB, §2.2 and Fig. 15, as
    /// Titan and BlobDB do): a GC step writes each moved value's new
    /// pointer into the key index through the write path, so that reads go
    /// straight to the copy. Off (default), the index is not touched and
    /// reads follow inheritance edges (TerarkDB). With write-back the
    /// DropCache only sorts hot from cold: a relocation gives the key a new
    /// sequence number while its record keeps the old one, so the cache's
    /// validity rule would throw away live copies (`docs/design.md`,
    /// "Table layout").
    pub gc_write_back: bool,
    /// Value tables are written around the page cache, and GC reads its
    /// victims likewise (`O_DIRECT` where the file system allows it;
    /// Scavenger, VLDB, §4 runs flushes and compactions with direct I/O),
    /// once the value store holds more than half the memory this process
    /// may use (its cgroup's limit, else the machine's): a flush then
    /// neither waits on the kernel's writeback nor pushes the key tables'
    /// cached blocks out, which its lookups need next. Below that the store
    /// fits in memory and its tables stay buffered, so that reads of what
    /// was written find it in the page cache. Default: true (preset
    /// `unikv`: false, not measured there); a file system without direct
    /// I/O (tmpfs) gets ordinary writes either way.
    pub direct_io: bool,
    /// GC picks victims by cost and benefit (LFS): garbage ratio `g` times
    /// the table's age, over the bytes GC moves per byte it frees,
    /// `g * age / (2 (1 - g) + 0.05)`, age counted in file numbers. Off,
    /// greedily by garbage ratio. An old table's garbage grows slowly (its
    /// hot keys are gone), so collecting it at a lower ratio frees space
    /// for good, while a young hot table is left to die further. Default:
    /// true.
    pub gc_cost_benefit: bool,
    /// GC judges a victim's records by the garbage counts alone, with no
    /// index lookup, when it can: every job that counts a record as garbage
    /// also notes where the record is, in memory, and a victim whose noted
    /// records add up to its counted garbage holds no other dead record GC
    /// could know of (`docs/design.md`, "Judged by the counts"). A victim
    /// whose notes fall short (counted before the process opened the store,
    /// or past the notes' memory bound) is judged by the DropCache and
    /// GetKey lookups, as Scavenger (VLDB), §3.2.2 and §3.4 do. Off, every
    /// victim is (the paper's path, as an ablation). Not with pointer
    /// write-back or when merges collect. Default: true.
    pub gc_judge_by_counts: bool,
}

/// Garbage collection's options ([`Options::gc`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct GcOptions {
    /// GC runs in the background when its triggers fire (default `true`);
    /// `false`: only [`crate::Db::gc`] runs it, as an operator who
    /// schedules GC for quiet hours wants (RocksDB's
    /// `disable_auto_compactions`, for GC). Needs `space_limit` `None`:
    /// writes waiting at the limit would wait for GC that never runs.
    pub background: bool,
    /// Run a GC step at least this often when the value log has a file to
    /// collect (WiscKey's periodic mode). `None`: only on the triggers above
    /// and `Db::gc`.
    pub interval_ms: Option<u64>,
    /// Throttle: GC reads at most this many bytes per second, sleeping
    /// between steps, so that it leaves the disk to foreground work. `None`:
    /// as fast as it can.
    pub max_bytes_per_sec: Option<u64>,
    /// Space-aware throttling ([`SpaceLimit`]); `None` turns it off.
    /// Default: the [`SpaceLimit::default`] ratios. It acts only on a
    /// database with a value store.
    pub space_limit: Option<SpaceLimit>,
    /// Threads beside [`Options::background_threads`] that run GC steps
    /// only while the space limit's pressure is on (Scavenger, VLDB, §3.5: past the
    /// low ratio "increasing the background GC thread"), so that GC under
    /// pressure does not take a background thread from the flush writers
    /// wait for. One GC step runs at a time either way. Default
    /// [`DEFAULT_GC_PRESSURE_THREADS`]; 0: GC runs on the background
    /// threads only.
    pub pressure_threads: usize,
}

/// Default [`GcOptions::pressure_threads`]: one (steps run one at a time).
pub const DEFAULT_GC_PRESSURE_THREADS: usize = 1;

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("preset", &self.preset)
            .field("write_buffer_size_bytes", &self.write_buffer_size_bytes)
            .field("max_write_buffers", &self.max_write_buffers)
            .field("memory_budget_bytes", &self.memory_budget_bytes)
            .field("background_threads", &self.background_threads)
            .field("journal_recovery", &self.journal_recovery)
            .field("journal_mode", &self.journal_mode)
            .field("index", &self.index)
            .field("lightkv", &self.lightkv)
            .field("values", &self.values)
            .field("gc", &self.gc)
            .finish_non_exhaustive()
    }
}

/// The default options: the `adaptive` preset's, not named, so they open a
/// database created under any preset (see [`Preset::Adaptive`] for what
/// becomes of its value store).
impl Default for Options {
    fn default() -> Self {
        Options {
            preset_named: false,
            ..Options::preset(Preset::default())
        }
    }
}

macro_rules! setters {
    ($($(#[$m:meta])* $name:ident => $($field:ident).+ : $ty:ty),* $(,)?) => {
        impl Options {
            $(
                $(#[$m])*
                #[must_use]
                pub fn $name(mut self, v: $ty) -> Self {
                    self.$($field).+ = v;
                    self
                }
            )*
        }
    };
}

setters! {
    /// Create the database if the directory holds none. Default: true.
    create_if_missing => create_if_missing: bool,
    /// Fail if a database already exists. Default: false.
    error_if_exists => error_if_exists: bool,
    /// Open without changing a byte of the directory: no new journal or
    /// value store file, no manifest roll, no deletions, no flushes,
    /// compactions or GC; writes fail with [`Error::ReadOnly`]. Recovery
    /// still runs, in memory: writes the journals hold are visible, and a
    /// crashed database reads as the next writable open would recover it.
    /// The database must exist. Default: false.
    read_only => read_only: bool,
    /// Bytes of memtable before it is switched to immutable and flushed
    /// ([`DEFAULT_WRITE_BUFFER_SIZE_BYTES`]): heap memory, each entry
    /// counted with its skiplist node and allocator rounding, so that a
    /// memtable of small entries (value pointers) holds fewer of them than
    /// this many bytes of keys and values. Larger: fewer, larger L0 tables
    /// and less write amplification; more memory and longer recovery.
    write_buffer_size_bytes => write_buffer_size_bytes: usize,
    /// Memtables kept in memory, active plus immutable
    /// ([`DEFAULT_MAX_WRITE_BUFFERS`]). More absorbs bursts while a flush
    /// runs, at the cost of memory.
    max_write_buffers => max_write_buffers: usize,
    /// Bytes the memtables and the block cache share
    /// (`docs/design.md`, "Memory"): while immutable memtables wait for
    /// their flush, the block cache gives way to them, down to an eighth of
    /// [`IndexOptions::block_cache_bytes`], so that a flush that falls
    /// behind does not add a whole memtable to the process's memory
    /// (RocksDB's write buffer manager charging memtables to the block
    /// cache, without its stall). `None` (the default): the write buffer
    /// plus the block cache, so that one immutable memtable takes the
    /// cache's room; but when the process's memory cgroup limits it below
    /// the machine's memory and that is too little for these sizes, 5/8 of
    /// the limit (3/8 once the store holds separated values, whose GC
    /// needs memory the budget does not count), with the block cache and
    /// then the write buffer made smaller so that every write buffer full
    /// beside the cache at its floor fits, and the page cache keeps its
    /// share of the limit (`docs/design.md`, "Memory", *Under a memory
    /// limit*; [`crate::MemoryStats::limit_bytes`] says when it did). `usize::MAX`:
    /// no budget, the cache keeps its size. A budget given here stands, the
    /// sizes as set.
    memory_budget_bytes => memory_budget_bytes: Option<usize>,
    /// Sets [`IndexOptions::block_size_bytes`].
    block_size_bytes => index.block_size_bytes: usize,
    /// Sets [`IndexOptions::block_restart_interval`].
    block_restart_interval => index.block_restart_interval: usize,
    /// Sets [`IndexOptions::bloom_bits_per_key`].
    bloom_bits_per_key => index.bloom_bits_per_key: u32,
    /// Sets [`IndexOptions::block_cache_bytes`].
    block_cache_bytes => index.block_cache_bytes: usize,
    /// Sets [`IndexOptions::max_open_tables`].
    max_open_tables => index.max_open_tables: usize,
    /// Sets [`IndexOptions::l0_compaction_trigger`].
    l0_compaction_trigger => index.l0_compaction_trigger: usize,
    /// Sets [`IndexOptions::l0_slowdown_trigger`].
    l0_slowdown_trigger => index.l0_slowdown_trigger: usize,
    /// Sets [`IndexOptions::l0_stop_trigger`].
    l0_stop_trigger => index.l0_stop_trigger: usize,
    /// Sets [`IndexOptions::l0_read_compaction_trigger`].
    l0_read_compaction_trigger => index.l0_read_compaction_trigger: usize,
    /// Sets [`IndexOptions::num_levels`].
    num_levels => index.num_levels: usize,
    /// Sets [`IndexOptions::level_size_ratio`].
    level_size_ratio => index.level_size_ratio: u64,
    /// Sets [`IndexOptions::base_level_size_bytes`].
    base_level_size_bytes => index.base_level_size_bytes: u64,
    /// Sets [`IndexOptions::target_file_size_bytes`].
    target_file_size_bytes => index.target_file_size_bytes: u64,
    /// Sets [`IndexOptions::index_decoupled_tables`].
    index_decoupled_tables => index.index_decoupled_tables: bool,
    /// Sets [`IndexOptions::shape`].
    index_shape => index.shape: IndexShapeKind,
    /// Sets [`UnifiedOptions::unsorted_limit_bytes`].
    unikv_unsorted_limit_bytes => index.unified.unsorted_limit_bytes: u64,
    /// Sets [`LightKvOptions::buffer_bytes`].
    lightkv_buffer_bytes => lightkv.buffer_bytes: u64,
    /// Sets [`LightKvOptions::segment_bytes`].
    lightkv_segment_bytes => lightkv.segment_bytes: u64,
    /// Sets [`LightKvOptions::leaf_buckets`].
    lightkv_leaf_buckets => lightkv.leaf_buckets: usize,
    /// Sets [`LightKvOptions::max_leaf_nodes`].
    lightkv_max_leaf_nodes => lightkv.max_leaf_nodes: usize,
    /// Sets [`LightKvOptions::compaction_size`].
    lightkv_compaction_size => lightkv.compaction_size: usize,
    /// Sets [`LightKvOptions::partition_split_bytes`].
    lightkv_partition_split_bytes => lightkv.partition_split_bytes: u64,
    /// Sets [`LightKvOptions::fence`].
    lightkv_fence => lightkv.fence: crate::pm::FenceMode,
    /// Sets [`UnifiedOptions::hash_buckets`].
    unikv_hash_buckets => index.unified.hash_buckets: usize,
    /// Sets [`UnifiedOptions::hash_functions`].
    unikv_hash_functions => index.unified.hash_functions: u32,
    /// Sets [`UnifiedOptions::partition_size_limit_bytes`].
    unikv_partition_size_limit_bytes => index.unified.partition_size_limit_bytes: u64,
    /// Sets [`UnifiedOptions::scan_merge_limit`].
    unikv_scan_merge_limit => index.unified.scan_merge_limit: usize,
    /// Background threads for flushes and compactions
    /// ([`DEFAULT_BACKGROUND_THREADS`]). With two or more, one is kept
    /// for flushes so that a long compaction never blocks a flush.
    background_threads => background_threads: usize,
    /// How recovery treats journal damage ([`JournalRecovery`]).
    journal_recovery => journal_recovery: JournalRecovery,
    /// Manifest size that triggers a roll ([`DEFAULT_MAX_MANIFEST_BYTES`]).
    max_manifest_bytes => max_manifest_bytes: u64,
    /// Largest group of concurrent writes committed with one journal write
    /// ([`DEFAULT_MAX_WRITE_GROUP_BYTES`]).
    max_write_group_bytes => max_write_group_bytes: usize,
    /// The file system. Default: [`StdFs`].
    fs => fs: Arc<dyn Fs>,
    /// Sets [`ValueOptions::separation_threshold_bytes`].
    separation_threshold_bytes => values.separation_threshold_bytes: Option<usize>,
    /// Journal or value-log-as-journal ([`JournalMode`]). Default: journal.
    journal_mode => journal_mode: JournalMode,
    /// Leave unsynced writes out of the journal (RocksDB's `disableWAL`,
    /// for every write without `sync`): such a write reaches the disk only
    /// with its memtable's flush ([`crate::Db::flush`], or one the engine
    /// starts), and a crash before that loses it and the unsynced writes
    /// after it. Synced writes are journaled and survive as ever; they
    /// do not make the unjournaled ones before them durable, nor does
    /// [`crate::Db::sync`]; a checkpoint flushes first. So the keys written
    /// only unsynced recover to the last flushed state, a prefix of their
    /// history. For callers that keep their writes in a durable log of
    /// their own and record in the same batches how far it was applied (a
    /// replicated state machine). Honoured where the memtable holds the
    /// values whole until its flush (the engine journal, no separation
    /// at write, no LightKV buffer) and GC judges records in the durable
    /// view; elsewhere writes are journaled as usual
    /// (`docs/design.md`, "Unjournaled writes"). Default: false.
    skip_journal_unless_synced => skip_journal_unless_synced: bool,
    /// Sets [`ValueOptions::separate_at_flush`].
    separate_at_flush => values.separate_at_flush: bool,
    /// Sets [`ValueOptions::layout`].
    value_layout => values.layout: ValueLayout,
    /// Sets [`HashOptions::main_segment_bytes`].
    hash_main_segment_bytes => values.hash.main_segment_bytes: u64,
    /// Sets [`HashOptions::log_segment_bytes`].
    hash_log_segment_bytes => values.hash.log_segment_bytes: u64,
    /// Sets [`HashOptions::reserve_ratio`].
    hash_reserve_ratio => values.hash.reserve_ratio: f64,
    /// Sets [`HashOptions::groups`].
    hash_groups => values.hash.groups: usize,
    /// Sets [`HashOptions::batch_bytes`].
    hash_batch_bytes => values.hash.batch_bytes: usize,
    /// Sets [`HashOptions::gc_policy`].
    hash_gc_policy => values.hash.gc_policy: HashGcPolicy,
    /// Sets [`HashOptions::hotness`].
    hash_hotness => values.hash.hotness: bool,
    /// Sets [`HashOptions::elastic`].
    hash_elastic => values.hash.elastic: bool,
    /// Sets [`TableLayoutOptions::file_bytes`].
    value_table_bytes => values.table.file_bytes: u64,
    /// Sets [`TableLayoutOptions::gc_ratio`].
    table_gc_ratio => values.table.gc_ratio: f64,
    /// Sets [`TableLayoutOptions::drop_cache_bytes`].
    drop_cache_bytes => values.table.drop_cache_bytes: usize,
    /// Sets [`TableLayoutOptions::gc_lazy_read`].
    table_gc_lazy_read => values.table.gc_lazy_read: bool,
    /// Sets [`TableLayoutOptions::gc_write_back`].
    table_gc_write_back => values.table.gc_write_back: bool,
    /// Sets [`TableLayoutOptions::direct_io`].
    table_direct_io => values.table.direct_io: bool,
    /// Sets [`TableLayoutOptions::gc_cost_benefit`].
    table_gc_cost_benefit => values.table.gc_cost_benefit: bool,
    /// Sets [`TableLayoutOptions::gc_judge_by_counts`].
    table_gc_judge_by_counts => values.table.gc_judge_by_counts: bool,
    /// Sets [`LogOptions::file_size_bytes`].
    value_log_file_size_bytes => values.log.file_size_bytes: u64,
    /// Sets [`LogOptions::buffer_bytes`].
    value_log_buffer_bytes => values.log.buffer_bytes: usize,
    /// Sets [`LogOptions::gc_chunk_bytes`].
    gc_chunk_bytes => values.log.gc_chunk_bytes: u64,
    /// Sets [`LogOptions::gc_garbage_ratio`].
    gc_garbage_ratio => values.log.gc_garbage_ratio: Option<f64>,
    /// Sets [`ValueOptions::capacity_bytes`].
    value_store_capacity_bytes => values.capacity_bytes: Option<u64>,
    /// Sets [`GcOptions::interval_ms`].
    gc_interval_ms => gc.interval_ms: Option<u64>,
    /// Sets [`GcOptions::max_bytes_per_sec`].
    gc_max_bytes_per_sec => gc.max_bytes_per_sec: Option<u64>,
    /// Sets [`ValueOptions::scan_prefetch_threads`].
    scan_prefetch_threads => values.scan_prefetch_threads: usize,
    /// Sets [`HashOptions::gc_threads`].
    gc_threads => values.hash.gc_threads: usize,
    /// Sets [`GcOptions::background`].
    gc_background => gc.background: bool,
    /// Sets [`GcOptions::space_limit`].
    space_limit => gc.space_limit: Option<SpaceLimit>,
    /// Sets [`GcOptions::pressure_threads`].
    gc_pressure_threads => gc.pressure_threads: usize,
    /// Sets [`HashOptions::gc_overlap_steps`].
    gc_overlap_steps => values.hash.gc_overlap_steps: bool,
}

impl Options {
    /// LightKV's options, as set (read only: change them with the
    /// setters).
    pub fn lightkv(&self) -> &LightKvOptions {
        &self.lightkv
    }

    /// The key index's options, as set (read only: change them with the
    /// setters).
    pub fn index(&self) -> &IndexOptions {
        &self.index
    }

    /// The value store's options, as set (read only).
    pub fn values(&self) -> &ValueOptions {
        &self.values
    }

    /// Garbage collection's options, as set (read only).
    pub fn gc(&self) -> &GcOptions {
        &self.gc
    }

    /// Memtables kept in memory ([`Options::max_write_buffers`]).
    pub fn write_buffers(&self) -> usize {
        self.max_write_buffers
    }

    /// The memory budget in bytes ([`Options::memory_budget_bytes`], its
    /// default resolved); `None`: no budget.
    pub fn memory_budget(&self) -> Option<usize> {
        match self.memory_budget_bytes {
            Some(usize::MAX) => None,
            Some(b) => Some(b),
            None => Some(self.write_buffer_size_bytes + self.index.block_cache_bytes),
        }
    }
}

impl Options {
    /// L0 merged into L1 from `compaction` tables, writes slowed down at
    /// twice as many and stopped at three times, the proportions of the
    /// defaults ([`DEFAULT_L0_COMPACTION_TRIGGER`] and the two after it).
    pub fn l0_triggers(mut self, compaction: usize) -> Self {
        self.set_l0_triggers(compaction);
        self
    }

    fn set_l0_triggers(&mut self, compaction: usize) {
        self.index.l0_compaction_trigger = compaction;
        self.index.l0_slowdown_trigger = 2 * compaction;
        self.index.l0_stop_trigger = 3 * compaction;
    }

    /// The options of a preset. A database created under another preset
    /// refuses them at open ([`Error::InvalidArgument`](crate::Error)
    /// naming both presets), for asking for one design and getting another
    /// would go unnoticed; [`Options::default`] opens a database of any
    /// preset, and [`Db::recorded_preset`](crate::Db::recorded_preset)
    /// tells a tool which preset to name.
    pub fn preset(preset: Preset) -> Options {
        let mut o = Options::leveldb();
        o.preset = preset;
        match preset {
            // Scavenger's value store, from a larger threshold.
            Preset::Adaptive => {
                o.value_tables_at_flush(DEFAULT_ADAPTIVE_SEPARATION_THRESHOLD_BYTES);
                // L0 from 8 tables while writes flow, from 4 once reads
                // come (`docs/design.md`, "L0 merged for reads").
                o.set_l0_triggers(8);
            }
            Preset::LevelDb => {}
            Preset::WiscKey => {
                o.values.separation_threshold_bytes = Some(0);
                // No LSM-tree log (WiscKey, FAST '16, §3.4.2).
                o.journal_mode = JournalMode::ValueLog;
                o.values.log.gc_garbage_ratio = Some(DEFAULT_GC_GARBAGE_RATIO);
                o.gc.space_limit = Some(SpaceLimit {
                    low: WISCKEY_SPACE_LOW_RATIO,
                    high: DEFAULT_SPACE_HIGH_RATIO,
                });
            }
            Preset::HashKv => {
                o.values.separation_threshold_bytes =
                    Some(DEFAULT_HASHKV_SEPARATION_THRESHOLD_BYTES);
                o.values.layout = ValueLayout::Hash;
                // The write cache (§3.2): updates absorbed in the memtable
                // never reach the groups.
                o.values.separate_at_flush = true;
                o.values.hash.hotness = true;
                o.values.hash.gc_threads = 2;
                o.l0_for_an_index_of_pointers();
            }
            Preset::Scavenger => {
                o.value_tables_at_flush(DEFAULT_SCAVENGER_SEPARATION_THRESHOLD_BYTES);
                o.l0_for_an_index_of_pointers();
            }
            Preset::UniKv => {
                o.index.shape = IndexShapeKind::Unified;
                // "We remove Bloom filters from all SSTables" (§III-B).
                o.index.bloom_bits_per_key = 0;
                // The paper separates every value of the SortedStore
                // (§III-C); the threshold is an option here.
                o.values.separation_threshold_bytes = Some(0);
                // Merges write the values they separate to value tables of
                // their own, and collect them: a table leaves once no
                // pointer names it, so partitions share tables after a
                // split until each moves its own values (§III-C, §III-D).
                o.values.layout = ValueLayout::Table;
                o.values.table.gc_ratio = DEFAULT_UNIKV_TABLE_GC_RATIO;
                // The DropCache (Scavenger, VLDB, §3.4) only sorts
                // hot values from cold here (GC looks nothing up): merges
                // write recently overwritten keys' values to hot tables,
                // which gather garbage fast while cold ones stay live. At
                // 1 GiB of Zipf updates it lifted P3 from 87k to 108k ops/s
                // and ended it at space amplification 1.23 instead of 1.29.
                // Its merges' value tables stay buffered: direct I/O was
                // measured on the scavenger preset only.
                o.values.table.direct_io = false;
            }
            // Values stay inline; the write buffer replaces the journal and
            // the memtable (`Core::light`); tables are compacted by
            // partition and weight (§III-F).
            Preset::LightKv => o.index.shape = IndexShapeKind::Partitioned,
        }
        o
    }

    /// L0 compacted from 8 tables (slowdown 16, stop 24): in an index of
    /// pointers L1 is small and each L0 merge rewrites it whole
    /// (`docs/design.md`, "L0 from 8 tables for hashkv and scavenger").
    fn l0_for_an_index_of_pointers(&mut self) {
        self.set_l0_triggers(8);
    }

    /// Scavenger's value store (Scavenger, VLDB, §3): values of `threshold` bytes
    /// and more go to value tables "during background flush operations"
    /// (§3.1), GC'd by lazy read on 2 threads, under index-decoupled key
    /// tables whose pointer blocks GetKey reads alone (§3.3).
    fn value_tables_at_flush(&mut self, threshold: usize) {
        self.values.separation_threshold_bytes = Some(threshold);
        self.values.layout = ValueLayout::Table;
        self.values.separate_at_flush = true;
        self.index.index_decoupled_tables = true;
        self.values.hash.gc_threads = 2;
    }

    /// The `leveldb` preset: every default, values inline.
    fn leveldb() -> Options {
        Options {
            create_if_missing: true,
            error_if_exists: false,
            read_only: false,
            write_buffer_size_bytes: DEFAULT_WRITE_BUFFER_SIZE_BYTES,
            max_write_buffers: DEFAULT_MAX_WRITE_BUFFERS,
            memory_budget_bytes: None,
            memory_limit: crate::memory::MemoryLimit::FromEnvironment,
            memory_limit_fit: None,
            background_threads: DEFAULT_BACKGROUND_THREADS,
            journal_recovery: JournalRecovery::default(),
            max_manifest_bytes: DEFAULT_MAX_MANIFEST_BYTES,
            max_write_group_bytes: DEFAULT_MAX_WRITE_GROUP_BYTES,
            journal_mode: JournalMode::Journal,
            skip_journal_unless_synced: false,
            fs: Arc::new(StdFs),
            preset: Preset::LevelDb,
            preset_named: true,
            index: IndexOptions {
                block_size_bytes: DEFAULT_BLOCK_SIZE_BYTES,
                block_restart_interval: DEFAULT_BLOCK_RESTART_INTERVAL,
                bloom_bits_per_key: DEFAULT_BLOOM_BITS_PER_KEY,
                block_cache_bytes: DEFAULT_BLOCK_CACHE_BYTES,
                max_open_tables: DEFAULT_MAX_OPEN_TABLES,
                l0_compaction_trigger: DEFAULT_L0_COMPACTION_TRIGGER,
                l0_slowdown_trigger: DEFAULT_L0_SLOWDOWN_TRIGGER,
                l0_stop_trigger: DEFAULT_L0_STOP_TRIGGER,
                l0_read_compaction_trigger: DEFAULT_L0_COMPACTION_TRIGGER,
                num_levels: DEFAULT_NUM_LEVELS,
                level_size_ratio: DEFAULT_LEVEL_SIZE_RATIO,
                base_level_size_bytes: DEFAULT_BASE_LEVEL_SIZE_BYTES,
                target_file_size_bytes: DEFAULT_TARGET_FILE_SIZE_BYTES,
                index_decoupled_tables: false,
                shape: IndexShapeKind::Leveled,
                unified: UnifiedOptions {
                    unsorted_limit_bytes: DEFAULT_UNIKV_UNSORTED_LIMIT_BYTES,
                    hash_buckets: 0,
                    hash_functions: DEFAULT_UNIKV_HASH_FUNCTIONS,
                    partition_size_limit_bytes: DEFAULT_UNIKV_PARTITION_SIZE_LIMIT_BYTES,
                    scan_merge_limit: DEFAULT_UNIKV_SCAN_MERGE_LIMIT,
                },
            },
            values: ValueOptions {
                separation_threshold_bytes: None,
                separate_at_flush: false,
                layout: ValueLayout::Log,
                capacity_bytes: None,
                scan_prefetch_threads: DEFAULT_SCAN_PREFETCH_THREADS,
                log: LogOptions {
                    file_size_bytes: DEFAULT_VALUE_LOG_FILE_SIZE_BYTES,
                    buffer_bytes: DEFAULT_VALUE_LOG_BUFFER_BYTES,
                    gc_chunk_bytes: DEFAULT_GC_CHUNK_BYTES,
                    gc_garbage_ratio: None,
                },
                hash: HashOptions {
                    main_segment_bytes: DEFAULT_HASH_MAIN_SEGMENT_BYTES,
                    log_segment_bytes: DEFAULT_HASH_LOG_SEGMENT_BYTES,
                    reserve_ratio: DEFAULT_HASH_RESERVE_RATIO,
                    groups: 0,
                    batch_bytes: DEFAULT_HASH_BATCH_BYTES,
                    gc_policy: HashGcPolicy::Greedy,
                    hotness: false,
                    elastic: true,
                    gc_threads: 1,
                    gc_overlap_steps: true,
                },
                table: TableLayoutOptions {
                    file_bytes: DEFAULT_VALUE_TABLE_BYTES,
                    gc_ratio: DEFAULT_TABLE_GC_RATIO,
                    drop_cache_bytes: DEFAULT_DROP_CACHE_BYTES,
                    gc_lazy_read: true,
                    gc_write_back: false,
                    direct_io: true,
                    gc_cost_benefit: true,
                    gc_judge_by_counts: true,
                },
            },
            lightkv: LightKvOptions {
                buffer_bytes: DEFAULT_LIGHTKV_BUFFER_BYTES,
                segment_bytes: DEFAULT_LIGHTKV_SEGMENT_BYTES,
                leaf_buckets: DEFAULT_LIGHTKV_LEAF_BUCKETS,
                max_leaf_nodes: DEFAULT_LIGHTKV_MAX_LEAF_NODES,
                compaction_size: DEFAULT_LIGHTKV_COMPACTION_SIZE,
                partition_split_bytes: DEFAULT_LIGHTKV_PARTITION_SPLIT_BYTES,
                fence: crate::pm::FenceMode::Msync,
            },
            gc: GcOptions {
                background: true,
                interval_ms: None,
                max_bytes_per_sec: None,
                space_limit: Some(SpaceLimit::default()),
                pressure_threads: DEFAULT_GC_PRESSURE_THREADS,
            },
        }
    }

    /// Checks that the options make sense together.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if self.write_buffer_size_bytes < 4096 {
            return bad("write_buffer_size_bytes must be at least 4096".into());
        }
        let l = &self.lightkv;
        if self.preset == Preset::LightKv
            && (l.segment_bytes < 256
                || l.segment_bytes > 2 << 30
                || !l.segment_bytes.is_multiple_of(64)
                || l.buffer_bytes < 4 * l.segment_bytes
                || l.leaf_buckets < 2
                || l.max_leaf_nodes < 2
                || l.compaction_size < 2)
        {
            return bad(format!(
                "lightkv options out of range: {l:?} (segments a multiple of 64 B from 256 B to \
                 2 GiB, a buffer of at least four, at least 2 leaf buckets, 2 leaves and a compaction \
                 size of 2)"
            ));
        }
        if self.preset == Preset::LightKv {
            let budget = self.memory_budget_bytes.filter(|&b| b != usize::MAX);
            crate::lightkv::memory::check_buffer_fits(l.buffer_bytes, budget)?;
        }
        if self.max_write_buffers < 2 {
            return bad("max_write_buffers must be at least 2".into());
        }
        if self.index.block_size_bytes < 64 || self.index.block_restart_interval == 0 {
            return bad("block_size_bytes must be >= 64 and block_restart_interval >= 1".into());
        }
        if !(1..=self.index.l0_slowdown_trigger).contains(&self.index.l0_compaction_trigger)
            || self.index.l0_slowdown_trigger > self.index.l0_stop_trigger
        {
            return bad(format!(
                "L0 triggers must satisfy 1 <= compaction ({}) <= slowdown ({}) <= stop ({})",
                self.index.l0_compaction_trigger,
                self.index.l0_slowdown_trigger,
                self.index.l0_stop_trigger
            ));
        }
        if self.index.l0_read_compaction_trigger == 0 {
            return bad("l0_read_compaction_trigger must be at least 1".into());
        }
        if !(2..=64).contains(&self.index.num_levels) || self.index.level_size_ratio < 2 {
            return bad("num_levels must be in 2..=64 and level_size_ratio >= 2".into());
        }
        if self.index.base_level_size_bytes == 0 || self.index.target_file_size_bytes == 0 {
            return bad("level and file sizes must be positive".into());
        }
        if self.values.hash.gc_threads == 0 {
            return bad("gc_threads must be at least 1".into());
        }
        if !self.gc.background && self.gc.space_limit.is_some() {
            return bad(
                "gc_background(false) needs space_limit(None): writes waiting at the space \
                 limit would wait for GC that never runs"
                    .into(),
            );
        }
        if self.background_threads == 0 {
            return bad("background_threads must be at least 1".into());
        }
        if self.journal_mode == JournalMode::ValueLog
            && self.values.separation_threshold_bytes.is_none()
        {
            return bad(
                "journal_mode ValueLog needs a value store (separation_threshold_bytes)".into(),
            );
        }
        if self.journal_mode == JournalMode::ValueLog && self.values.layout != ValueLayout::Log {
            return bad("journal_mode ValueLog needs value_layout Log".into());
        }
        if self.values.separate_at_flush
            && (self.journal_mode != JournalMode::Journal
                || self.values.separation_threshold_bytes.is_none())
        {
            return bad(
                "separate_at_flush needs journal_mode Journal and a value store \
                 (separation_threshold_bytes)"
                    .into(),
            );
        }
        if self.values.hash.log_segment_bytes < 1024
            || self.values.hash.main_segment_bytes < self.values.hash.log_segment_bytes
            || !(self.values.hash.reserve_ratio > 0.0 && self.values.hash.reserve_ratio < 1.0)
        {
            return bad(
                "hash layout needs log segments >= 1024 B, main segments >= log segments \
                 and a reserve ratio in (0, 1)"
                    .into(),
            );
        }
        let most_groups = MAX_HASH_GROUPS as usize;
        if self.values.hash.groups > most_groups {
            // The manifest refuses more (what a damaged record could make
            // recovery allocate): a store created with more would not open.
            return bad(format!("hash_groups must be at most {most_groups}"));
        }
        if self.values.layout == ValueLayout::Table
            && self.values.separation_threshold_bytes.is_some()
            && !self.values.separate_at_flush
            && self.index.shape != IndexShapeKind::Unified
        {
            return bad(
                "value_layout Table separates at flush (or at the unified shape's merges): \
                 set separate_at_flush"
                    .into(),
            );
        }
        if self.values.table.file_bytes < 4096
            || !(self.values.table.gc_ratio > 0.0 && self.values.table.gc_ratio < 1.0)
        {
            return bad("value tables need file_bytes >= 4096 and a gc_ratio in (0, 1)".into());
        }
        if self.values.log.file_size_bytes < 4096 || self.values.log.gc_chunk_bytes == 0 {
            return bad("value_log_file_size_bytes must be >= 4096 and gc_chunk_bytes > 0".into());
        }
        if self.gc.interval_ms == Some(0) || self.gc.max_bytes_per_sec == Some(0) {
            return bad("gc_interval_ms and gc_max_bytes_per_sec must be positive".into());
        }
        if self
            .gc
            .space_limit
            .is_some_and(|l| !(l.low > 1.0 && l.low <= l.high))
        {
            return bad("space_limit needs 1 < low <= high".into());
        }
        if self
            .values
            .log
            .gc_garbage_ratio
            .is_some_and(|r| !(r > 0.0 && r < 1.0))
        {
            return bad("gc_garbage_ratio must be in (0, 1)".into());
        }
        if self.index.shape == IndexShapeKind::Unified {
            let u = &self.index.unified;
            if u.unsorted_limit_bytes < 4096
                || !(1..=8).contains(&u.hash_functions)
                || u.partition_size_limit_bytes < 4096
                || u.scan_merge_limit < 2
            {
                return bad("the unified shape needs unsorted_limit_bytes and \
                     partition_size_limit_bytes >= 4096, 1 to 8 hash functions \
                     and a scan merge limit of at least 2"
                    .into());
            }
            // Values stay inline until a merge separates them (§III-C).
            if self.values.separate_at_flush
                || self.journal_mode != JournalMode::Journal
                || self.values.layout == ValueLayout::Hash
            {
                return bad(
                    "the unified shape separates values when it merges into the sorted \
                     run: it needs the table or log layout, journal_mode Journal and no \
                     separate_at_flush"
                        .into(),
                );
            }
        }
        if self.max_manifest_bytes == 0 || self.max_write_group_bytes == 0 {
            return bad("max_manifest_bytes and max_write_group_bytes must be positive".into());
        }
        Ok(())
    }
}

/// Options of one write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Sync the journal before acknowledging: the write survives power loss.
    /// Without it a crash may lose the write (and those after it), but never
    /// leaves a hole in history. Default: false.
    pub sync: bool,
}

impl WriteOptions {
    /// Write options with `sync` set.
    pub fn synced() -> Self {
        WriteOptions { sync: true }
    }
}

/// Options of one read.
#[derive(Clone, Default)]
pub struct ReadOptions<'a> {
    /// Read as of this snapshot instead of the latest state.
    pub snapshot: Option<&'a crate::Snapshot>,
}

impl<'a> ReadOptions<'a> {
    /// Reads at `snapshot`.
    pub fn at(snapshot: &'a crate::Snapshot) -> Self {
        ReadOptions {
            snapshot: Some(snapshot),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_values_do_not() {
        Options::default().validate().unwrap();
        assert!(Options::default().l0_stop_trigger(2).validate().is_err());
        assert!(Options::default().max_write_buffers(1).validate().is_err());
        assert!(Options::default().background_threads(0).validate().is_err());
        assert_eq!(Preset::from_name("leveldb"), Some(Preset::LevelDb));
    }

    /// `l0_triggers` keeps the defaults' proportions, and the presets over
    /// an index of pointers and the default merge L0 from 8 tables
    /// (slowdown 16, stop 24).
    #[test]
    fn l0_triggers_keep_the_defaults_proportions() {
        let triggers = |o: &Options| {
            let i = &o.index;
            (
                i.l0_compaction_trigger,
                i.l0_slowdown_trigger,
                i.l0_stop_trigger,
            )
        };
        let d = Options::preset(Preset::LevelDb);
        assert_eq!(
            triggers(&d),
            (
                DEFAULT_L0_COMPACTION_TRIGGER,
                DEFAULT_L0_SLOWDOWN_TRIGGER,
                DEFAULT_L0_STOP_TRIGGER
            )
        );
        assert_eq!(
            triggers(&d.l0_triggers(DEFAULT_L0_COMPACTION_TRIGGER)),
            triggers(&Options::preset(Preset::LevelDb))
        );
        for p in [Preset::HashKv, Preset::Scavenger, Preset::Adaptive] {
            assert_eq!(triggers(&Options::preset(p)), (8, 16, 24), "{p:?}");
        }
        // L0 merged for reads from 4 tables where writes merge it from 8;
        // where both are 4 it does nothing.
        for &p in Preset::all() {
            let i = &Options::preset(p).index;
            let on = i.l0_read_compaction_trigger < i.l0_compaction_trigger;
            let from_8 = [Preset::Adaptive, Preset::HashKv, Preset::Scavenger];
            assert_eq!(on, from_8.contains(&p), "{p:?}");
        }
        assert_eq!(
            Options::default().index.l0_read_compaction_trigger,
            DEFAULT_L0_COMPACTION_TRIGGER
        );
        assert!(Options::default()
            .l0_read_compaction_trigger(0)
            .validate()
            .is_err());
    }
}
