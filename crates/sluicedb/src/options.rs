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
pub const DEFAULT_BLOOM_BITS_PER_KEY: u32 = crate::table::bloom::DEFAULT_BLOOM_BITS_PER_KEY;
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
/// Default value log write buffer: 256 KiB (seed 001 §3.4.1).
pub const DEFAULT_VALUE_LOG_BUFFER_BYTES: usize = 256 << 10;
/// Default bytes GC reads from the value log tail per run: 4 MiB (seed 001 §3.3.2).
pub const DEFAULT_GC_CHUNK_BYTES: u64 = 4 << 20;
/// Default garbage ratio of the value log that triggers GC: 0.3.
pub const DEFAULT_GC_GARBAGE_RATIO: f64 = 0.3;
/// Default threads reading separated values in parallel for range scans:
/// 16 (seed 001 §3.3.1 uses 32). Measured with `scripts/bench-scan.sh` on
/// this project's 2-core machine, a cold-cache scan of 4 KiB values ran at
/// 82-103 MB/s with no read-ahead, 164-194 MB/s with 4 threads and
/// 225-260 MB/s with 16; with the data in the page cache read-ahead costs
/// about 15%. The threads start on the first scan and sleep when idle.
pub const DEFAULT_SCAN_PREFETCH_THREADS: usize = 16;

/// Default main segment of a hash layout group: 64 MiB (seed 000 §3.2).
pub const DEFAULT_HASH_MAIN_SEGMENT_BYTES: u64 = 64 << 20;
/// Default log segment of the hash layout's reserve: 1 MiB (seed 000 §3.2).
pub const DEFAULT_HASH_LOG_SEGMENT_BYTES: u64 = 1 << 20;
/// Default share of the value store capacity kept as reserve for log
/// segments: 0.3 (seed 000 §4.1).
pub const DEFAULT_HASH_RESERVE_RATIO: f64 = 0.3;
/// Default segment groups without a capacity to derive them from: 16.
pub const DEFAULT_HASH_GROUPS: usize = 16;
/// Default batch write threshold of the hash layout: 64 KiB. HashKV uses
/// 4 KiB (seed 000 §3.8), trading random writes against the parallelism of
/// 32 flush threads writing to an SSD. Here a group's batch goes to the page
/// cache with one system call, so only the number of calls counts: 64 KiB
/// loaded 500k × 1 KiB pairs at 215–287k ops/s against 157–170k with 4 KiB
/// (`docs/design.md`, "Hash layout", write path).
pub const DEFAULT_HASH_BATCH_BYTES: usize = 64 << 10;
/// Default separation threshold of the `hashkv` preset: 192 B (seed 000
/// §3.5).
pub const DEFAULT_HASHKV_SEPARATION_THRESHOLD_BYTES: usize = 192;

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

/// A complete configuration of the engine's design axes (DESIGN.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Preset {
    /// Plain leveled LSM tree with values inline (LevelDB, seed 001 §2.2).
    #[default]
    LevelDb,
    /// Key-value separation into a value log (WiscKey, seed 001 §3): every
    /// value goes to the log (threshold 0), the log doubles as the journal.
    WiscKey,
    /// Hash-grouped value store (HashKV, seed 000 §3): values of 192 B and
    /// more go to segment groups chosen by key hash, collected a group at a
    /// time. Work in progress (issue 4): no hotness tagging yet.
    HashKv,
}

/// How the hash layout picks the segment group to collect (seed 000 §3.3).
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
}

/// How the value store lays out separated values (DESIGN.md axis 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ValueLayout {
    /// One log: appends at the head, GC from the tail (WiscKey).
    #[default]
    Log,
    /// Segment groups by key hash, each a main segment that grows into log
    /// segments from a reserved pool (HashKV, seed 000 §3.2).
    Hash,
}

/// Where writes are made durable before they reach tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum JournalMode {
    /// The engine's write-ahead journal (`NNNNNN.log`); separated values
    /// are written to the value store and the journal holds pointers.
    #[default]
    Journal,
    /// No journal: the value log is the journal (seed 001 §3.4.2). Every
    /// operation is a value log record; small values stay inline in the
    /// index too. Requires a value store (`separation_threshold_bytes`).
    ValueLog,
}

impl Preset {
    /// The preset's name as the CLI spells it.
    pub fn name(self) -> &'static str {
        match self {
            Preset::LevelDb => "leveldb",
            Preset::WiscKey => "wisckey",
            Preset::HashKv => "hashkv",
        }
    }

    /// Parses a CLI name.
    pub fn from_name(s: &str) -> Option<Preset> {
        match s {
            "leveldb" => Some(Preset::LevelDb),
            "wisckey" => Some(Preset::WiscKey),
            "hashkv" => Some(Preset::HashKv),
            _ => None,
        }
    }

    /// Every preset.
    pub fn all() -> &'static [Preset] {
        &[Preset::LevelDb, Preset::WiscKey, Preset::HashKv]
    }
}

/// Options for [`crate::Db::open`]. Build them with [`Options::default`]
/// or [`Options::preset`] and the setters; fields may be added in any
/// release (`#[non_exhaustive]`).
#[derive(Clone)]
#[non_exhaustive]
pub struct Options {
    /// Create the database if the directory holds none. Default: true.
    pub create_if_missing: bool,
    /// Fail if a database already exists. Default: false.
    pub error_if_exists: bool,
    /// Open without changing a byte of the directory: no new journal or
    /// value store file, no manifest roll, no deletions, no flushes,
    /// compactions or GC; writes fail with [`Error::ReadOnly`]. Recovery
    /// still runs, in memory: writes the journals hold are visible, and a
    /// crashed database reads as the next writable open would recover it.
    /// The database must exist. Default: false.
    pub read_only: bool,
    /// Bytes of memtable before it is switched to immutable and flushed
    /// ([`DEFAULT_WRITE_BUFFER_SIZE_BYTES`]). Larger: fewer, larger L0 tables
    /// and less write amplification; more memory and longer recovery.
    pub write_buffer_size_bytes: usize,
    /// Memtables kept in memory, active plus immutable
    /// ([`DEFAULT_MAX_WRITE_BUFFERS`]). More absorbs bursts while a flush
    /// runs, at the cost of memory.
    pub max_write_buffers: usize,
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
    /// Background threads for flushes and compactions
    /// ([`DEFAULT_BACKGROUND_THREADS`]). With two or more, one is kept
    /// for flushes so that a long compaction never blocks a flush.
    pub background_threads: usize,
    /// How recovery treats journal damage ([`JournalRecovery`]).
    pub journal_recovery: JournalRecovery,
    /// Manifest size that triggers a roll ([`DEFAULT_MAX_MANIFEST_BYTES`]).
    pub max_manifest_bytes: u64,
    /// Largest group of concurrent writes committed with one journal write
    /// ([`DEFAULT_MAX_WRITE_GROUP_BYTES`]).
    pub max_write_group_bytes: usize,
    /// Values of at least this many bytes are stored in the value store and
    /// the index keeps a pointer (selective KV separation, seed 000 §3.5);
    /// `None` keeps every value inline. WiscKey's behaviour is `Some(0)`.
    /// Default: `None` (preset `leveldb`).
    pub separation_threshold_bytes: Option<usize>,
    /// Journal or value-log-as-journal ([`JournalMode`]). Default: journal.
    pub journal_mode: JournalMode,
    /// Separate values when a memtable is flushed instead of when they are
    /// written: HashKV's write cache (seed 000 §3.2). The journal and the
    /// memtable hold whole values, and a flush writes to the value store
    /// only each key's newest version, so updates to a key while it is in
    /// the memtable never reach the store (under a Zipf 0.99 update load
    /// with a 64 MiB memtable, about half of them). The cost: each
    /// separated value is written twice, journal and store, where separating
    /// at write time writes it once. Needs `JournalMode::Journal`.
    /// Default: false.
    pub separate_at_flush: bool,
    /// Layout of the value store ([`ValueLayout`]). Default: log. A
    /// database keeps the layout it was created with.
    pub value_layout: ValueLayout,
    /// Hash layout: bytes of a group's main segment
    /// ([`DEFAULT_HASH_MAIN_SEGMENT_BYTES`]); beyond it a group takes log
    /// segments from the reserve.
    pub hash_main_segment_bytes: u64,
    /// Hash layout: bytes of a log segment, the unit the reserve is handed
    /// out in ([`DEFAULT_HASH_LOG_SEGMENT_BYTES`]).
    pub hash_log_segment_bytes: u64,
    /// Hash layout: share of `value_store_capacity_bytes` kept as the
    /// reserve of log segments ([`DEFAULT_HASH_RESERVE_RATIO`]).
    pub hash_reserve_ratio: f64,
    /// Hash layout: number of segment groups, fixed when the database is
    /// created. 0 derives it: capacity × (1 − reserve) ÷ main segment, or
    /// [`DEFAULT_HASH_GROUPS`] without a capacity.
    pub hash_groups: usize,
    /// Hash layout: a group's buffered records are written out once they
    /// reach this many bytes, one sequential write per batch
    /// ([`DEFAULT_HASH_BATCH_BYTES`], seed 000 §3.8).
    pub hash_batch_bytes: usize,
    /// Hash layout: how GC picks its victim group ([`HashGcPolicy`]).
    /// Default: greedy.
    pub hash_gc_policy: HashGcPolicy,
    /// Hash layout: hotness awareness (seed 000 §3.4). GC moves the values
    /// of keys not updated for a whole GC period of their group to a cold
    /// log, so
    /// later GCs of the group no longer copy them; the cold log is
    /// collected a file at a time, the file with the most known garbage
    /// first. Default: false (preset `hashkv`: true).
    pub hash_hotness: bool,
    /// Size of a value log file ([`DEFAULT_VALUE_LOG_FILE_SIZE_BYTES`]).
    /// GC frees space a whole file at a time: smaller files free space
    /// sooner, larger ones mean fewer files.
    pub value_log_file_size_bytes: u64,
    /// Value log write buffer ([`DEFAULT_VALUE_LOG_BUFFER_BYTES`]): appends
    /// reach the file system in writes of about this size.
    pub value_log_buffer_bytes: usize,
    /// Bytes GC reads from the tail per run ([`DEFAULT_GC_CHUNK_BYTES`]).
    pub gc_chunk_bytes: u64,
    /// Garbage ratio (garbage ÷ value log bytes) at which background GC
    /// runs ([`DEFAULT_GC_GARBAGE_RATIO`]); `None` runs GC only on request.
    pub gc_garbage_ratio: Option<f64>,
    /// Space the value store may use; background GC runs while it is larger
    /// (HashKV §4.2's "data plus reserve"). `None`: no size trigger.
    pub value_store_capacity_bytes: Option<u64>,
    /// Run a GC step at least this often when the value log has a file to
    /// collect (WiscKey's periodic mode). `None`: only on the triggers above
    /// and `Db::gc`.
    pub gc_interval_ms: Option<u64>,
    /// Throttle: GC reads at most this many bytes per second, sleeping
    /// between steps, so that it leaves the disk to foreground work. `None`:
    /// as fast as it can.
    pub gc_max_bytes_per_sec: Option<u64>,
    /// Threads that read separated values in parallel for range scans
    /// ([`DEFAULT_SCAN_PREFETCH_THREADS`]; seed 001 §3.3.1). A [`crate::Range`]
    /// that has returned a few pairs in a row reads the next values ahead in
    /// batches: records close together in one file with one read, the
    /// reads spread over these threads. 0 turns read-ahead off (one read
    /// per value). More threads help on devices with deep queues.
    pub scan_prefetch_threads: usize,
    /// Threads a hash layout GC step uses to read its frozen files and to
    /// look up their keys in the index (seed 000 §3.3 reads a group's
    /// segments in parallel; here the lookups are the larger cost). 1 does
    /// both on the GC's own thread. Default: 1 (preset `hashkv`: 2).
    pub gc_threads: usize,
    /// The file system. Default: [`StdFs`].
    pub fs: Arc<dyn Fs>,
    /// The preset these options came from.
    pub preset: Preset,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("preset", &self.preset)
            .field("write_buffer_size_bytes", &self.write_buffer_size_bytes)
            .field("max_write_buffers", &self.max_write_buffers)
            .field("block_size_bytes", &self.block_size_bytes)
            .field("bloom_bits_per_key", &self.bloom_bits_per_key)
            .field("block_cache_bytes", &self.block_cache_bytes)
            .field("l0_compaction_trigger", &self.l0_compaction_trigger)
            .field("base_level_size_bytes", &self.base_level_size_bytes)
            .field("target_file_size_bytes", &self.target_file_size_bytes)
            .field("background_threads", &self.background_threads)
            .field("journal_recovery", &self.journal_recovery)
            .finish_non_exhaustive()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options::preset(Preset::default())
    }
}

macro_rules! setters {
    ($($(#[$m:meta])* $name:ident: $ty:ty),* $(,)?) => {
        impl Options {
            $(
                $(#[$m])*
                #[must_use]
                pub fn $name(mut self, v: $ty) -> Self {
                    self.$name = v;
                    self
                }
            )*
        }
    };
}

setters! {
    /// Sets [`Options::create_if_missing`].
    create_if_missing: bool,
    /// Sets [`Options::error_if_exists`].
    error_if_exists: bool,
    /// Sets [`Options::read_only`].
    read_only: bool,
    /// Sets [`Options::write_buffer_size_bytes`].
    write_buffer_size_bytes: usize,
    /// Sets [`Options::max_write_buffers`].
    max_write_buffers: usize,
    /// Sets [`Options::block_size_bytes`].
    block_size_bytes: usize,
    /// Sets [`Options::block_restart_interval`].
    block_restart_interval: usize,
    /// Sets [`Options::bloom_bits_per_key`].
    bloom_bits_per_key: u32,
    /// Sets [`Options::block_cache_bytes`].
    block_cache_bytes: usize,
    /// Sets [`Options::max_open_tables`].
    max_open_tables: usize,
    /// Sets [`Options::l0_compaction_trigger`].
    l0_compaction_trigger: usize,
    /// Sets [`Options::l0_slowdown_trigger`].
    l0_slowdown_trigger: usize,
    /// Sets [`Options::l0_stop_trigger`].
    l0_stop_trigger: usize,
    /// Sets [`Options::num_levels`].
    num_levels: usize,
    /// Sets [`Options::level_size_ratio`].
    level_size_ratio: u64,
    /// Sets [`Options::base_level_size_bytes`].
    base_level_size_bytes: u64,
    /// Sets [`Options::target_file_size_bytes`].
    target_file_size_bytes: u64,
    /// Sets [`Options::background_threads`].
    background_threads: usize,
    /// Sets [`Options::journal_recovery`].
    journal_recovery: JournalRecovery,
    /// Sets [`Options::max_manifest_bytes`].
    max_manifest_bytes: u64,
    /// Sets [`Options::max_write_group_bytes`].
    max_write_group_bytes: usize,
    /// Sets [`Options::fs`].
    fs: Arc<dyn Fs>,
    /// Sets [`Options::separation_threshold_bytes`].
    separation_threshold_bytes: Option<usize>,
    /// Sets [`Options::journal_mode`].
    journal_mode: JournalMode,
    /// Sets [`Options::separate_at_flush`].
    separate_at_flush: bool,
    /// Sets [`Options::value_layout`].
    value_layout: ValueLayout,
    /// Sets [`Options::hash_main_segment_bytes`].
    hash_main_segment_bytes: u64,
    /// Sets [`Options::hash_log_segment_bytes`].
    hash_log_segment_bytes: u64,
    /// Sets [`Options::hash_reserve_ratio`].
    hash_reserve_ratio: f64,
    /// Sets [`Options::hash_groups`].
    hash_groups: usize,
    /// Sets [`Options::hash_batch_bytes`].
    hash_batch_bytes: usize,
    /// Sets [`Options::hash_gc_policy`].
    hash_gc_policy: HashGcPolicy,
    /// Sets [`Options::hash_hotness`].
    hash_hotness: bool,
    /// Sets [`Options::value_log_file_size_bytes`].
    value_log_file_size_bytes: u64,
    /// Sets [`Options::value_log_buffer_bytes`].
    value_log_buffer_bytes: usize,
    /// Sets [`Options::gc_chunk_bytes`].
    gc_chunk_bytes: u64,
    /// Sets [`Options::gc_garbage_ratio`].
    gc_garbage_ratio: Option<f64>,
    /// Sets [`Options::value_store_capacity_bytes`].
    value_store_capacity_bytes: Option<u64>,
    /// Sets [`Options::gc_interval_ms`].
    gc_interval_ms: Option<u64>,
    /// Sets [`Options::gc_max_bytes_per_sec`].
    gc_max_bytes_per_sec: Option<u64>,
    /// Sets [`Options::scan_prefetch_threads`].
    scan_prefetch_threads: usize,
    /// Sets [`Options::gc_threads`].
    gc_threads: usize,
}

impl Options {
    /// The options of a preset.
    pub fn preset(preset: Preset) -> Options {
        let base = Options::leveldb();
        match preset {
            Preset::LevelDb => base,
            Preset::WiscKey => Options {
                separation_threshold_bytes: Some(0),
                // No LSM-tree log (seed 001 §3.4.2).
                journal_mode: JournalMode::ValueLog,
                gc_garbage_ratio: Some(DEFAULT_GC_GARBAGE_RATIO),
                preset,
                ..base
            },
            Preset::HashKv => Options {
                separation_threshold_bytes: Some(DEFAULT_HASHKV_SEPARATION_THRESHOLD_BYTES),
                value_layout: ValueLayout::Hash,
                // The write cache (§3.2): updates absorbed in the memtable
                // never reach the groups.
                separate_at_flush: true,
                hash_hotness: true,
                gc_threads: 2,
                preset,
                ..base
            },
        }
    }

    /// The `leveldb` preset: every default, values inline.
    fn leveldb() -> Options {
        Options {
            create_if_missing: true,
            error_if_exists: false,
            read_only: false,
            write_buffer_size_bytes: DEFAULT_WRITE_BUFFER_SIZE_BYTES,
            max_write_buffers: DEFAULT_MAX_WRITE_BUFFERS,
            block_size_bytes: DEFAULT_BLOCK_SIZE_BYTES,
            block_restart_interval: DEFAULT_BLOCK_RESTART_INTERVAL,
            bloom_bits_per_key: DEFAULT_BLOOM_BITS_PER_KEY,
            block_cache_bytes: DEFAULT_BLOCK_CACHE_BYTES,
            max_open_tables: DEFAULT_MAX_OPEN_TABLES,
            l0_compaction_trigger: DEFAULT_L0_COMPACTION_TRIGGER,
            l0_slowdown_trigger: DEFAULT_L0_SLOWDOWN_TRIGGER,
            l0_stop_trigger: DEFAULT_L0_STOP_TRIGGER,
            num_levels: DEFAULT_NUM_LEVELS,
            level_size_ratio: DEFAULT_LEVEL_SIZE_RATIO,
            base_level_size_bytes: DEFAULT_BASE_LEVEL_SIZE_BYTES,
            target_file_size_bytes: DEFAULT_TARGET_FILE_SIZE_BYTES,
            background_threads: DEFAULT_BACKGROUND_THREADS,
            journal_recovery: JournalRecovery::default(),
            max_manifest_bytes: DEFAULT_MAX_MANIFEST_BYTES,
            max_write_group_bytes: DEFAULT_MAX_WRITE_GROUP_BYTES,
            fs: Arc::new(StdFs),
            separation_threshold_bytes: None,
            journal_mode: JournalMode::Journal,
            separate_at_flush: false,
            value_layout: ValueLayout::Log,
            hash_main_segment_bytes: DEFAULT_HASH_MAIN_SEGMENT_BYTES,
            hash_log_segment_bytes: DEFAULT_HASH_LOG_SEGMENT_BYTES,
            hash_reserve_ratio: DEFAULT_HASH_RESERVE_RATIO,
            hash_groups: 0,
            hash_batch_bytes: DEFAULT_HASH_BATCH_BYTES,
            hash_gc_policy: HashGcPolicy::Greedy,
            hash_hotness: false,
            value_log_file_size_bytes: DEFAULT_VALUE_LOG_FILE_SIZE_BYTES,
            value_log_buffer_bytes: DEFAULT_VALUE_LOG_BUFFER_BYTES,
            gc_chunk_bytes: DEFAULT_GC_CHUNK_BYTES,
            gc_garbage_ratio: None,
            value_store_capacity_bytes: None,
            gc_interval_ms: None,
            gc_max_bytes_per_sec: None,
            scan_prefetch_threads: DEFAULT_SCAN_PREFETCH_THREADS,
            gc_threads: 1,
            preset: Preset::LevelDb,
        }
    }

    /// Checks that the options make sense together.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if self.write_buffer_size_bytes < 4096 {
            return bad("write_buffer_size_bytes must be at least 4096".into());
        }
        if self.max_write_buffers < 2 {
            return bad("max_write_buffers must be at least 2".into());
        }
        if self.block_size_bytes < 64 || self.block_restart_interval == 0 {
            return bad("block_size_bytes must be >= 64 and block_restart_interval >= 1".into());
        }
        if !(1..=self.l0_slowdown_trigger).contains(&self.l0_compaction_trigger)
            || self.l0_slowdown_trigger > self.l0_stop_trigger
        {
            return bad(format!(
                "L0 triggers must satisfy 1 <= compaction ({}) <= slowdown ({}) <= stop ({})",
                self.l0_compaction_trigger, self.l0_slowdown_trigger, self.l0_stop_trigger
            ));
        }
        if !(2..=64).contains(&self.num_levels) || self.level_size_ratio < 2 {
            return bad("num_levels must be in 2..=64 and level_size_ratio >= 2".into());
        }
        if self.base_level_size_bytes == 0 || self.target_file_size_bytes == 0 {
            return bad("level and file sizes must be positive".into());
        }
        if self.gc_threads == 0 {
            return bad("gc_threads must be at least 1".into());
        }
        if self.background_threads == 0 {
            return bad("background_threads must be at least 1".into());
        }
        if self.journal_mode == JournalMode::ValueLog && self.separation_threshold_bytes.is_none() {
            return bad(
                "journal_mode ValueLog needs a value store (separation_threshold_bytes)".into(),
            );
        }
        if self.journal_mode == JournalMode::ValueLog && self.value_layout != ValueLayout::Log {
            return bad("journal_mode ValueLog needs value_layout Log".into());
        }
        if self.separate_at_flush
            && (self.journal_mode != JournalMode::Journal
                || self.separation_threshold_bytes.is_none())
        {
            return bad(
                "separate_at_flush needs journal_mode Journal and a value store \
                 (separation_threshold_bytes)"
                    .into(),
            );
        }
        if self.hash_log_segment_bytes < 4096
            || self.hash_main_segment_bytes < self.hash_log_segment_bytes
            || !(self.hash_reserve_ratio > 0.0 && self.hash_reserve_ratio < 1.0)
        {
            return bad(
                "hash layout needs log segments >= 4096 B, main segments >= log segments \
                 and a reserve ratio in (0, 1)"
                    .into(),
            );
        }
        if self.value_log_file_size_bytes < 4096 || self.gc_chunk_bytes == 0 {
            return bad("value_log_file_size_bytes must be >= 4096 and gc_chunk_bytes > 0".into());
        }
        if self.gc_interval_ms == Some(0) || self.gc_max_bytes_per_sec == Some(0) {
            return bad("gc_interval_ms and gc_max_bytes_per_sec must be positive".into());
        }
        if self.gc_garbage_ratio.is_some_and(|r| !(r > 0.0 && r < 1.0)) {
            return bad("gc_garbage_ratio must be in (0, 1)".into());
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
}
