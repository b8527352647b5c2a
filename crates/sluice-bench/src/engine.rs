//! The engines a benchmark runs, behind one small trait: sluicedb under any
//! preset, and peer engines behind cargo features (`rocksdb`, `fjall`).
//!
//! Settings shared by every engine where the engine has them: no
//! compression, a 64 MiB write buffer, a 64 MiB block cache, 10 bloom bits
//! per key, the journal on and synced only with `--sync`, two background
//! threads.

use std::path::Path;

use sluicedb::{Db, Options, Preset, WriteOptions};

use crate::BenchConfig;

/// Errors of any engine.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T> = std::result::Result<T, BoxError>;

/// Write buffer (memtable) size for every engine.
pub const WRITE_BUFFER_BYTES: usize = 64 << 20;
/// Block cache size for every engine.
pub const BLOCK_CACHE_BYTES: usize = 64 << 20;
/// Background threads for every engine.
pub const BACKGROUND_THREADS: usize = 2;
/// Bloom filter bits per key for every engine.
pub const BLOOM_BITS_PER_KEY: u32 = 10;
/// Key-value separation threshold of the peers' separated variants when
/// `--separation-threshold` gives none: below the 992-byte values of the
/// update workload (fjall's default of 1 KiB would separate nothing), and
/// above most of the small values of the mixed one.
pub const PEER_SEPARATION_THRESHOLD_BYTES: usize = 512;

/// A key-value engine under test. Implementations are shared by the
/// benchmark's threads.
pub trait Engine: Send + Sync {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Removes the key (a tombstone; absent keys too).
    fn delete(&self, key: &[u8]) -> Result<()>;
    /// The value's length when the key is found.
    fn get(&self, key: &[u8]) -> Result<Option<usize>>;
    /// Reads up to `limit` pairs from the first key at or after `start`;
    /// returns the pairs and the bytes (keys and values) read.
    fn scan(&self, start: &[u8], limit: usize) -> Result<(u64, u64)>;
    /// Flushes the write buffer and waits for background work to finish.
    fn settle(&self) -> Result<()>;
    /// The engine's own count of bytes written and read, where it keeps one.
    fn io_bytes(&self) -> Option<(u64, u64)> {
        None
    }
    /// Bytes the engine's value GC read and wrote so far.
    fn gc_bytes(&self) -> u64 {
        0
    }
    /// Bytes of the index the engine keeps in memory outside its block
    /// cache, where it says: the open tables' index and filter blocks
    /// (sluicedb's and RocksDB's table readers) and UniKV's hash indexes
    /// (UniKV, ICDE '20 Experiment 10).
    fn index_memory_bytes(&self) -> Option<u64> {
        None
    }
    /// The engine's counters, printed after its run with `--verbose`.
    fn report(&self) -> String {
        String::new()
    }
    /// A few plain lines about the run, printed after it by default.
    fn summary(&self) -> String {
        String::new()
    }
    /// Running totals of the time the engine held writes back, by reason.
    fn stalls(&self) -> Option<crate::PhaseStalls> {
        None
    }
}

/// Which engine, and how configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    Sluice(Preset),
    /// sluicedb as `Options::default()` opens it, named `default` in
    /// reports (today the preset `Preset::default()`; the benchmark matrix
    /// compares it with every preset by this name, whatever it becomes).
    Default,
    /// RocksDB, leveled compaction, values inline.
    RocksDb,
    /// RocksDB's integrated BlobDB (`enable_blob_files`, blob GC on).
    RocksDbBlob,
    /// fjall v3, values inline.
    Fjall,
    /// fjall v3 with key-value separation.
    FjallKv,
}

impl EngineKind {
    pub const PEERS: [EngineKind; 4] = [
        EngineKind::RocksDb,
        EngineKind::RocksDbBlob,
        EngineKind::Fjall,
        EngineKind::FjallKv,
    ];

    /// The name used on the command line and in reports: a preset name for
    /// sluicedb, `rocksdb`, `rocksdb-blob`, `fjall` or `fjall-kv`.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Sluice(p) => p.name(),
            EngineKind::Default => "default",
            EngineKind::RocksDb => "rocksdb",
            EngineKind::RocksDbBlob => "rocksdb-blob",
            EngineKind::Fjall => "fjall",
            EngineKind::FjallKv => "fjall-kv",
        }
    }

    pub fn from_name(s: &str) -> Option<EngineKind> {
        let s = s.strip_prefix("sluice:").unwrap_or(s);
        if let Some(p) = Preset::from_name(s) {
            return Some(EngineKind::Sluice(p));
        }
        if s == "default" {
            return Some(EngineKind::Default);
        }
        EngineKind::PEERS.into_iter().find(|k| k.name() == s)
    }

    /// Whether this build can run the engine (peers need their feature).
    pub fn available(self) -> bool {
        match self {
            EngineKind::Sluice(_) | EngineKind::Default => true,
            EngineKind::RocksDb | EngineKind::RocksDbBlob => cfg!(feature = "rocksdb"),
            EngineKind::Fjall | EngineKind::FjallKv => cfg!(feature = "fjall"),
        }
    }

    /// Every name `from_name` accepts.
    pub fn known_names() -> Vec<&'static str> {
        let mut v: Vec<&str> = Preset::all().iter().map(|p| p.name()).collect();
        v.push(EngineKind::Default.name());
        v.extend(EngineKind::PEERS.iter().map(|k| k.name()));
        v
    }
}

/// Opens (creating) the engine in `dir`.
pub fn open(kind: EngineKind, cfg: &BenchConfig, dir: &Path) -> Result<Box<dyn Engine>> {
    match kind {
        EngineKind::Sluice(p) => Ok(Box::new(SluiceEngine::open(p, cfg, dir)?)),
        EngineKind::Default => Ok(Box::new(SluiceEngine::open(Preset::default(), cfg, dir)?)),
        #[cfg(feature = "rocksdb")]
        EngineKind::RocksDb | EngineKind::RocksDbBlob => Ok(Box::new(
            crate::peers::rocks::RocksEngine::open(kind == EngineKind::RocksDbBlob, cfg, dir)?,
        )),
        #[cfg(feature = "fjall")]
        EngineKind::Fjall | EngineKind::FjallKv => Ok(Box::new(
            crate::peers::fjall::FjallEngine::open(kind == EngineKind::FjallKv, cfg, dir)?,
        )),
        #[allow(unreachable_patterns, reason = "reachable in builds without peers")]
        _ => Err(unavailable(kind)),
    }
}

/// The error for an engine this build does not have.
pub fn unavailable(kind: EngineKind) -> BoxError {
    let feature = match kind {
        EngineKind::RocksDb | EngineKind::RocksDbBlob => "rocksdb",
        _ => "fjall",
    };
    format!(
        "engine {} is not in this build: build with `--features {feature}`",
        kind.name()
    )
    .into()
}

/// sluicedb under a preset, with the benchmark's overrides.
pub struct SluiceEngine {
    db: Db,
    write: WriteOptions,
}

impl SluiceEngine {
    pub fn options(preset: Preset, cfg: &BenchConfig) -> Options {
        let mut opts = Options::preset(preset)
            .write_buffer_size_bytes(WRITE_BUFFER_BYTES)
            .block_cache_bytes(BLOCK_CACHE_BYTES)
            .background_threads(BACKGROUND_THREADS)
            .bloom_bits_per_key(BLOOM_BITS_PER_KEY);
        if let Some(t) = cfg.separation_threshold {
            opts = opts.separation_threshold_bytes(t);
        }
        if let (Some(capacity), Some(_)) = (
            cfg.value_store_capacity(),
            opts.values().separation_threshold_bytes,
        ) {
            // HashKV (USENIX ATC '18) §4.2: the value store holds the data
            // plus a 30% reserve.
            // GC frees whole files: keep them small next to the capacity,
            // so that small runs have files to collect too (with 1 MiB at
            // least, the tiny test runs rotated a file only now and then,
            // and whether GC ran in an update phase was a matter of timing).
            // Likewise at least 32 segment groups for the hash layout, so a
            // GC step rewrites 1/32 of the data or less, and at least 256
            // log segments in the reserve (1 MiB ones leave small runs only
            // a few).
            let reserve = capacity as f64 * opts.values().hash.reserve_ratio;
            let log_segment = ((reserve / 256.0) as u64).clamp(64 << 10, 1 << 20);
            let main_area = capacity as f64 - reserve;
            opts = opts
                .value_store_capacity_bytes(Some(capacity))
                .value_log_file_size_bytes((capacity / 32).clamp(64 << 10, 64 << 20))
                .hash_log_segment_bytes(log_segment)
                .hash_main_segment_bytes(((main_area / 32.0) as u64).clamp(log_segment, 64 << 20));
        }
        if let Some(t) = cfg.scan_prefetch_threads {
            opts = opts.scan_prefetch_threads(t);
        }
        if let Some(p) = cfg.hash_gc_policy {
            opts = opts.hash_gc_policy(p);
        }
        if let Some(h) = cfg.hash_hotness {
            opts = opts.hash_hotness(h);
        }
        if let Some(n) = cfg.gc_threads {
            opts = opts.gc_threads(n);
        }
        if let Some(n) = cfg.gc_pressure_threads {
            opts = opts.gc_pressure_threads(n);
        }
        if let Some(on) = cfg.gc_overlap_steps {
            opts = opts.gc_overlap_steps(on);
        }
        if let Some(l) = cfg.space_limit {
            opts = opts.space_limit(l);
        }
        if let Some(n) = cfg.hash_batch_bytes {
            opts = opts.hash_batch_bytes(n);
        }
        if let Some(b) = cfg.target_file_size_bytes {
            opts = opts.target_file_size_bytes(b);
        }
        if let Some(b) = cfg.base_level_size_bytes {
            opts = opts.base_level_size_bytes(b);
        }
        if let Some(n) = cfg.l0_compaction_trigger {
            opts = opts.l0_triggers(n);
        }
        if let Some(n) = cfg.l0_read_compaction_trigger {
            opts = opts.l0_read_compaction_trigger(n);
        }
        if let Some(d) = cfg.index_decoupled_tables {
            opts = opts.index_decoupled_tables(d);
        }
        if let Some(l) = cfg.table_gc_lazy_read {
            opts = opts.table_gc_lazy_read(l);
        }
        if let Some(d) = cfg.table_direct_io {
            opts = opts.table_direct_io(d);
        }
        if let Some(c) = cfg.table_gc_cost_benefit {
            opts = opts.table_gc_cost_benefit(c);
        }
        if let Some(j) = cfg.table_gc_judge_by_counts {
            opts = opts.table_gc_judge_by_counts(j);
        }
        if let Some(w) = cfg.table_gc_write_back {
            opts = opts.table_gc_write_back(w);
        }
        if let Some(cache) = cfg.lightkv_fence_cache {
            opts = opts.lightkv_fence(if cache {
                sluicedb::pm::FenceMode::Cache
            } else {
                sluicedb::pm::FenceMode::Msync
            });
        }
        if let Some(n) = cfg.lightkv_max_leaf_nodes {
            opts = opts.lightkv_max_leaf_nodes(n);
        }
        if let Some(n) = cfg.lightkv_compaction_size {
            opts = opts.lightkv_compaction_size(n);
        }
        if let Some(n) = cfg.drop_cache_bytes {
            opts = opts.drop_cache_bytes(n);
        }
        if let Some(r) = cfg.table_gc_ratio {
            opts = opts.table_gc_ratio(r);
        }
        if let Some(b) = cfg.memory_budget {
            opts = opts.memory_budget_bytes(Some(b));
        }
        if let Some(f) = cfg.separate_at_flush {
            opts = opts.separate_at_flush(f);
        }
        // Separation at flush has nothing to do without separation (the
        // threshold sweep's `--separation-threshold none` under `hashkv`).
        let at_flush =
            opts.values().separate_at_flush && opts.values().separation_threshold_bytes.is_some();
        opts.separate_at_flush(at_flush)
    }

    pub fn open(preset: Preset, cfg: &BenchConfig, dir: &Path) -> Result<SluiceEngine> {
        let opts = Self::options(preset, cfg);
        Ok(SluiceEngine {
            db: Db::open(dir, opts)?,
            write: WriteOptions { sync: cfg.sync },
        })
    }

    pub fn db(&self) -> &Db {
        &self.db
    }
}

impl Engine for SluiceEngine {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.db.put_opt(&self.write, key, value)?)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        Ok(self.db.delete_opt(&self.write, key)?)
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.db.get(key)?.map(|v| v.len()))
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<(u64, u64)> {
        let (mut n, mut bytes) = (0u64, 0u64);
        if limit == 1 {
            // A point seek: a cursor reads one value, no read-ahead.
            let mut it = self.db.iter();
            it.seek(start);
            if it.valid() {
                n = 1;
                bytes = (it.key().len() + it.value()?.len()) as u64;
            }
            it.status()?;
            return Ok((n, bytes));
        }
        // A range: values are read ahead (WiscKey, FAST '16, §3.3.1), exactly the
        // `limit` the scan will take.
        for pair in self.db.range(start..).limit(limit) {
            let (k, v) = pair?;
            n += 1;
            bytes += (k.len() + v.len()) as u64;
        }
        Ok((n, bytes))
    }

    fn settle(&self) -> Result<()> {
        self.db.flush()?;
        Ok(self.db.wait_for_background()?)
    }

    fn io_bytes(&self) -> Option<(u64, u64)> {
        let io = self.db.stats().io;
        Some((io.total_written(), io.total_read()))
    }

    fn gc_bytes(&self) -> u64 {
        let s = self.db.stats();
        s.gc.bytes_read + s.gc.bytes_written
    }

    /// The open tables' index blocks and filters (as RocksDB's table
    /// readers are counted), and the unified shape's hash indexes.
    fn index_memory_bytes(&self) -> Option<u64> {
        let index = self.db.stats().index;
        Some(index.open_table_bytes + index.shape.hash_index_bytes)
    }

    fn report(&self) -> String {
        self.db.stats().to_string()
    }

    fn summary(&self) -> String {
        let s = self.db.stats();
        let mb = |b: u64| format!("{:.1} MB", b as f64 / 1e6);
        let secs = |us: u64| format!("{:.1} s", us as f64 / 1e6);
        let preset = s.created_with.map_or("sluicedb", |p| p.name());
        use sluicedb::fs::IoClass;
        let w = |c: IoClass| mb(s.io.written(c));
        let mut out = format!(
            "{preset}: {} of user writes; the engine wrote {} in all: journal {}, {} flushes {}, \
             {} compactions {}, value store (GC's copies included) {}",
            mb(s.writes.user_bytes_written),
            mb(s.io.total_written()),
            w(IoClass::Journal),
            s.flush.flushes,
            w(IoClass::Flush),
            s.compaction.compactions,
            w(IoClass::Compaction),
            mb(s.io.written(IoClass::ValueStore) + s.io.written(IoClass::Gc)),
        );
        let sep = &s.flush.separation;
        if sep.threshold_bytes.is_some() {
            out += &format!(
                "\n  values separated at flush: {} ({}), kept inline: {} ({})",
                sep.separated,
                mb(sep.separated_bytes),
                sep.kept_inline,
                mb(sep.kept_inline_bytes)
            );
        }
        if s.values.files > 0 {
            out += &format!(
                "\n  value store: {} in {} files, {} of it garbage; GC ran {} steps, read {} and wrote {}",
                mb(s.values.bytes),
                s.values.files,
                mb(s.values.garbage_bytes),
                s.gc.runs,
                mb(s.gc.bytes_read),
                mb(s.gc.bytes_written)
            );
        }
        let by = &s.writes.write_stall_micros_by_reason;
        out += &format!(
            "\n  writes waited {} in all: full memtables {}, level 0 {}, value store {}, space limit {}",
            secs(s.writes.write_stall_micros),
            secs(by.memtables),
            secs(by.level0),
            secs(by.value_store),
            secs(by.space_limit)
        );
        out += "\n  (every counter: --verbose)";
        out
    }

    fn stalls(&self) -> Option<crate::PhaseStalls> {
        let s = self.db.stats();
        let secs = |us: u64| us as f64 / 1e6;
        let by = &s.writes.write_stall_micros_by_reason;
        Some(crate::PhaseStalls {
            memtables_s: secs(by.memtables),
            level0_s: secs(by.level0),
            value_store_s: secs(by.value_store),
            space_limit_s: secs(by.space_limit),
            gc_commit_s: secs(s.gc.commit_micros),
            relocations: s.gc.relocations_applied,
        })
    }
}
