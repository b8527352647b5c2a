//! Helpers shared by the integration tests: small options, a history of
//! writes with the states it passes through, and prefix matching after
//! crashes.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use sluicedb::fs::MemFs;
use sluicedb::{Db, HashGcPolicy, IndexShapeKind, JournalMode, Options, ValueLayout, WriteBatch};

pub type State = BTreeMap<Vec<u8>, Vec<u8>>;

/// Options that make every mechanism run on tiny data: small memtables,
/// tables, blocks and levels. `variant` picks among a few shapes so tests
/// replay under several configurations (metamorphic testing).
pub fn tiny_options(fs: &MemFs, variant: u64) -> Options {
    // The plain preset: every value setting is the variant's.
    let o = tiny_tree(Options::preset(sluicedb::Preset::LevelDb).fs(Arc::new(fs.clone())))
        .write_buffer_size_bytes(4096 + 2048 * (variant % 3) as usize)
        .block_size_bytes(if variant.is_multiple_of(2) { 256 } else { 1024 })
        .block_restart_interval(1 + (variant % 4) as usize * 5)
        .block_cache_bytes(if variant % 5 == 4 { 0 } else { 64 * 1024 })
        .max_manifest_bytes(if variant % 2 == 1 { 2048 } else { 1 << 20 })
        .background_threads(1 + (variant % 2) as usize);
    // Value separation: off, mixed (small values inline), or everything
    // separated; tiny value log files and segments so they fill constantly.
    //   variant % 8:  0: off
    //                 1: hash, mixed      2: log + journal, mixed, at flush
    //                 6: hash, all, at flush, cold log, 2 GC threads
    //                 5: log as journal, mixed   3, 7: log as journal, all
    //                 4: value tables, mixed, at flush, 2 GC threads
    //   variants 2 and 4 write index-decoupled key tables; variant 12 (a
    //   4) has GC write pointers back instead of inheritance edges, and
    //   variant 10 (a 2) is the unified shape (UniKV), whose merges
    //   separate the values instead of its flushes, over the log layout;
    //   variant 26 (a 10) puts it on value tables, as the preset does
    let (separation, layout) = match variant % 8 {
        1 => (Some(32), ValueLayout::Hash),
        4 => (Some(32), ValueLayout::Table),
        2 | 5 => (Some(32), ValueLayout::Log),
        6 => (Some(0), ValueLayout::Hash),
        3 | 7 => (Some(0), ValueLayout::Log),
        _ => (None, ValueLayout::Log),
    };
    let journal_mode = match (layout, variant % 8) {
        (ValueLayout::Log, 3 | 5 | 7) => JournalMode::ValueLog,
        _ => JournalMode::Journal,
    };
    let o = o
        .separation_threshold_bytes(separation)
        .journal_mode(journal_mode)
        .separate_at_flush(matches!(variant % 8, 2 | 4 | 6))
        // Index-decoupled key tables (pointer blocks apart, Scavenger, VLDB, §3.3)
        // under value tables and under the log.
        .index_decoupled_tables(matches!(variant % 8, 2 | 4))
        .hash_hotness(variant % 8 == 6)
        .gc_threads(if matches!(variant % 8, 4 | 6) { 2 } else { 1 })
        .value_table_bytes(4096)
        .drop_cache_bytes(if variant % 16 == 4 { 0 } else { 4096 })
        // Variant 12: value tables whose GC writes pointers back.
        .table_gc_write_back(variant % 16 == 12)
        .value_layout(layout)
        // Variant 1 starts from one group of tiny main segments, so that
        // elastic splits happen constantly.
        .hash_groups(if variant % 8 == 1 { 1 } else { 4 })
        .hash_main_segment_bytes(if variant % 8 == 1 { 4096 } else { 8192 })
        .hash_log_segment_bytes(4096)
        .hash_batch_bytes(512)
        .hash_gc_policy(if variant % 8 == 6 {
            HashGcPolicy::GreedyRandom { d: 2 }
        } else {
            HashGcPolicy::Greedy
        })
        .value_log_file_size_bytes(4096)
        .value_log_buffer_bytes(512);
    let o = if variant % 16 == 10 {
        let o = o
            .index_shape(IndexShapeKind::Unified)
            .separate_at_flush(false)
            .unikv_unsorted_limit_bytes(12 * 1024)
            .unikv_partition_size_limit_bytes(24 * 1024)
            .unikv_hash_buckets(32);
        // Variant 26: the preset's value tables, which merges collect.
        if variant % 32 == 26 {
            o.value_layout(ValueLayout::Table).table_gc_ratio(0.1)
        } else {
            o
        }
    } else {
        o
    };
    if variant % 3 == 2 {
        o.bloom_bits_per_key(0)
    } else {
        o
    }
}

/// Tiny tables and levels, and L0 triggers to match.
fn tiny_tree(o: Options) -> Options {
    o.target_file_size_bytes(4096)
        .base_level_size_bytes(16 * 1024)
        .level_size_ratio(4)
        .num_levels(4)
        .l0_compaction_trigger(2)
        .l0_slowdown_trigger(4)
        .l0_stop_trigger(8)
}

/// A preset as a user opens it (its layout, journal and GC choices), with
/// the sizes of [`tiny_options`] so that every mechanism runs on tiny data.
pub fn preset_options(fs: &MemFs, preset: sluicedb::Preset) -> Options {
    let o = Options::preset(preset);
    // The tests' values are small (up to a few hundred bytes): below the
    // scavenger preset's 512 B threshold nothing would reach a value table,
    // and below the adaptive one's 2 KiB nothing would leave the index. At
    // 40 bytes the adaptive preset separates some versions of a key and
    // keeps others inline, so keys move in and out of separation.
    let o = match preset {
        sluicedb::Preset::Scavenger => o.separation_threshold_bytes(Some(32)),
        sluicedb::Preset::Adaptive => o.separation_threshold_bytes(Some(40)),
        _ => o,
    };
    tiny_tree(o.fs(Arc::new(fs.clone())))
        .write_buffer_size_bytes(4096)
        .value_table_bytes(4096)
        .block_size_bytes(256)
        .hash_groups(2)
        .hash_main_segment_bytes(4096)
        .hash_log_segment_bytes(4096)
        .hash_batch_bytes(512)
        .value_log_file_size_bytes(4096)
        .value_log_buffer_bytes(512)
        // UniKV: a merge every four tiny memtables, and partitions that
        // split every few merges.
        .unikv_unsorted_limit_bytes(16 * 1024)
        .unikv_partition_size_limit_bytes(48 * 1024)
        // LightKV: 32 segments of 1 KiB, leaves of 8 slots, at most 8
        // partitions: splits, links and flushes every few writes; merges of
        // three tables of a weight, and table partitions that split every
        // 6 KiB of tables.
        .lightkv_buffer_bytes(32 * 1024)
        .lightkv_segment_bytes(1024)
        .lightkv_leaf_buckets(2)
        .lightkv_max_leaf_nodes(8)
        .lightkv_compaction_size(3)
        .lightkv_partition_split_bytes(6 * 1024)
}

/// One acknowledged or attempted write: a batch of puts (Some) and deletes.
#[derive(Clone, Debug)]
pub struct Write {
    pub ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    pub sync: bool,
}

impl Write {
    pub fn batch(&self) -> WriteBatch {
        let mut b = WriteBatch::new();
        for (k, v) in &self.ops {
            match v {
                Some(v) => b.put(k, v),
                None => b.delete(k),
            };
        }
        b
    }
    pub fn apply(&self, s: &mut State) {
        for (k, v) in &self.ops {
            match v {
                Some(v) => s.insert(k.clone(), v.clone()),
                None => s.remove(k),
            };
        }
    }
}

/// The state after the first `n` writes.
pub fn state_after(writes: &[Write], n: usize) -> State {
    let mut s = State::new();
    for w in &writes[..n] {
        w.apply(&mut s);
    }
    s
}

/// The smallest `n` in `lo..=hi` whose state equals `got`, if any.
pub fn matching_prefix(writes: &[Write], lo: usize, hi: usize, got: &State) -> Option<usize> {
    let mut s = state_after(writes, lo);
    for n in lo..=hi {
        if n > lo {
            writes[n - 1].apply(&mut s);
        }
        if &s == got {
            return Some(n);
        }
    }
    None
}

/// Everything the database holds, read by a forward scan; also checks that
/// a backward scan and point reads agree with it.
pub fn read_all(db: &Db) -> sluicedb::Result<State> {
    let mut s = State::new();
    for r in db
        .iter_range::<&[u8]>(&Default::default(), ..)
        .into_range_all()
    {
        let (k, v) = r?;
        s.insert(k, v);
    }
    Ok(s)
}

/// Extension to scan a cursor fully.
pub trait CursorExt {
    fn into_range_all(self) -> Vec<sluicedb::Result<(Vec<u8>, Vec<u8>)>>;
}

impl CursorExt for sluicedb::DbIterator {
    fn into_range_all(mut self) -> Vec<sluicedb::Result<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        self.seek_to_first();
        while self.valid() {
            match self.value() {
                Ok(v) => out.push(Ok((self.key().to_vec(), v.to_vec()))),
                Err(e) => {
                    out.push(Err(e));
                    return out;
                }
            }
            self.next();
        }
        if let Err(e) = self.status() {
            out.push(Err(e));
        }
        out
    }
}

/// A small deterministic generator so failures replay from the seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5851_f42d_4c95_7f2d)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Runs `f(seed)` for each seed, printing the seed of a failure.
pub fn for_seeds(seeds: impl IntoIterator<Item = u64>, f: impl Fn(u64)) {
    for seed in seeds {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(seed)));
        if let Err(e) = r {
            eprintln!("FAILED with seed {seed} (rerun with SLUICE_SEED={seed})");
            std::panic::resume_unwind(e);
        }
    }
}

/// Seeds from `SLUICE_SEED` (one) or `base..base+n`.
pub fn seeds(base: u64, n: u64) -> Vec<u64> {
    match std::env::var("SLUICE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(s) => vec![s],
        None => (base..base + n).collect(),
    }
}

/// A random key from a small space (so keys are overwritten and deleted).
pub fn key(rng: &mut Rng, space: u64) -> Vec<u8> {
    format!("k{:05}", rng.below(space)).into_bytes()
}

/// A random value of 0..=max_len bytes that names its key and a serial.
pub fn value(rng: &mut Rng, serial: u64, max_len: u64) -> Vec<u8> {
    let len = rng.below(max_len + 1) as usize;
    let mut v = format!("v{serial}:").into_bytes();
    v.resize(len.max(v.len()), b'a' + (serial % 26) as u8);
    v
}

/// Checks every crash image `fs.take_images()` gave on two threads:
/// `check(j, op, image)` for the j-th image, taken after file operation
/// `op`; a failure prints `what` before it goes on unwinding.
pub fn check_images_on_two_threads(
    images: &[(u64, MemFs)],
    what: &str,
    check: impl Fn(usize, u64, &MemFs) + Sync,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let j = next.fetch_add(1, Ordering::Relaxed);
                let Some((op, image)) = images.get(j) else {
                    break;
                };
                let r =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(j, *op, image)));
                if let Err(e) = r {
                    eprintln!("{what}");
                    std::panic::resume_unwind(e);
                }
            });
        }
    });
}
