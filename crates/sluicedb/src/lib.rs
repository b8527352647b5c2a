//! sluicedb: a persistent, embeddable key-value storage engine for
//! update-heavy workloads with real values.
//!
//! ```no_run
//! use sluicedb::{Db, Options, WriteBatch, WriteOptions};
//! # fn main() -> sluicedb::Result<()> {
//! let db = Db::open("/tmp/example-db", Options::default())?;
//! db.put("hello", "world")?;
//! let mut batch = WriteBatch::new();
//! batch.put("a", "1").delete("hello");
//! db.write_opt(&WriteOptions::synced(), batch)?;
//! assert_eq!(db.get("a")?, Some(b"1".to_vec()));
//! for pair in db.prefix("a") {
//!     let (key, value) = pair?;
//!     println!("{key:?} = {value:?}");
//! }
//! # Ok(()) }
//! ```
//!
//! The design is in `docs/design.md`; file formats in `docs/format/`.

mod batch;
mod coding;
mod compaction;
mod db;
pub mod dump;
mod error;
mod filename;
pub mod fs;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod gc;
mod index;
mod iter;
mod journal;
mod key;
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "LightKV's buffer under its RH-Tree: the preset that uses it is not built yet"
    )
)]
mod lightkv;
mod logfile;
mod memory;
mod memtable;
mod options;
mod parallel;
pub mod pm;
mod pointer;
mod policy;
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "LightKV's write buffer: the preset that uses it is not built yet"
    )
)]
mod pwb;
mod record;
mod stats;
mod super_version;
pub mod sysmem;
mod table;
mod value;
mod version;

pub use batch::{WriteBatch, MAX_KEY_BYTES, MAX_VALUE_BYTES};
pub use db::{
    CheckpointStats, Db, DbIterator, Range, Snapshot, ValueRef, CHECKPOINT_STAGING_SUFFIX,
    MIN_CACHE_BYTES,
};
pub use error::{Error, Result};
pub use key::prefix_successor;
pub use options::{
    GcOptions, HashGcPolicy, HashOptions, IndexOptions, IndexShapeKind, JournalMode,
    JournalRecovery, LightKvOptions, LogOptions, Options, Preset, ReadOptions, SpaceLimit,
    TableLayoutOptions, UnifiedOptions, ValueLayout, ValueOptions, WriteOptions,
};
pub use stats::{
    CompactionStats, FlushStats, GcStats, GcTotals, HashStats, IndexStats, LevelStats,
    LightBufferStats, MemoryStats, PartitionTables, SeparationStats, ShapeStats, SpaceMismatch,
    SpaceStats, StallMicros, Stats, TableStats, Totals, ValueStats, WriteStats,
};

/// The options' defaults and the presets' own values, each documented
/// where [`Options`] uses it.
pub mod defaults {
    pub use crate::options::{
        DEFAULT_ADAPTIVE_SEPARATION_THRESHOLD_BYTES, DEFAULT_BACKGROUND_THREADS,
        DEFAULT_BASE_LEVEL_SIZE_BYTES, DEFAULT_BLOCK_CACHE_BYTES, DEFAULT_BLOCK_RESTART_INTERVAL,
        DEFAULT_BLOCK_SIZE_BYTES, DEFAULT_BLOOM_BITS_PER_KEY, DEFAULT_DROP_CACHE_BYTES,
        DEFAULT_GC_CHUNK_BYTES, DEFAULT_GC_GARBAGE_RATIO, DEFAULT_GC_PRESSURE_THREADS,
        DEFAULT_HASHKV_SEPARATION_THRESHOLD_BYTES, DEFAULT_HASH_BATCH_BYTES, DEFAULT_HASH_GROUPS,
        DEFAULT_HASH_LOG_SEGMENT_BYTES, DEFAULT_HASH_MAIN_SEGMENT_BYTES,
        DEFAULT_HASH_RESERVE_RATIO, DEFAULT_L0_COMPACTION_TRIGGER, DEFAULT_L0_SLOWDOWN_TRIGGER,
        DEFAULT_L0_STOP_TRIGGER, DEFAULT_LEVEL_SIZE_RATIO, DEFAULT_MAX_MANIFEST_BYTES,
        DEFAULT_MAX_OPEN_TABLES, DEFAULT_MAX_WRITE_BUFFERS, DEFAULT_MAX_WRITE_GROUP_BYTES,
        DEFAULT_NUM_LEVELS, DEFAULT_SCAN_PREFETCH_THREADS,
        DEFAULT_SCAVENGER_SEPARATION_THRESHOLD_BYTES, DEFAULT_SPACE_HIGH_RATIO,
        DEFAULT_SPACE_LOW_RATIO, DEFAULT_TABLE_GC_RATIO, DEFAULT_TARGET_FILE_SIZE_BYTES,
        DEFAULT_UNIKV_HASH_FUNCTIONS, DEFAULT_UNIKV_PARTITION_SIZE_LIMIT_BYTES,
        DEFAULT_UNIKV_SCAN_MERGE_LIMIT, DEFAULT_UNIKV_TABLE_GC_RATIO,
        DEFAULT_UNIKV_UNSORTED_LIMIT_BYTES, DEFAULT_VALUE_LOG_BUFFER_BYTES,
        DEFAULT_VALUE_LOG_FILE_SIZE_BYTES, DEFAULT_VALUE_TABLE_BYTES,
        DEFAULT_WRITE_BUFFER_SIZE_BYTES, MAX_HASH_GROUPS, UNIKV_BYTES_PER_HASH_BUCKET,
        WISCKEY_SPACE_LOW_RATIO,
    };
}
