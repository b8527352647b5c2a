//! `sluice bench`: db_bench-style workloads against sluicedb.
//!
//! Each workload prints db_bench's result line (`micros/op`, `ops/sec`,
//! `MB/s`) plus write amplification (bytes written to files per user byte,
//! from the engine's `Fs` counters) and space amplification (bytes of the
//! files in the database directory per byte of live keys and values).
//! Keys are 16 bytes by default (`%016d` of the key number); values are
//! slices of a random buffer, so they do not compress.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use sluicedb::{Db, Options, Preset, WriteOptions};

/// A db_bench workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Keys 0..num in order.
    FillSeq,
    /// Keys 0..num, each once, in random order.
    FillRandom,
    /// num random keys of 0..num (with repeats), overwriting.
    Overwrite,
    /// num lookups of random keys of 0..num.
    ReadRandom,
    /// A forward scan over the whole database.
    ReadSeq,
    /// num seeks to random keys, reading the pair found.
    SeekRandom,
    /// HashKV §4.2 (seed 000): load num keys in random order (P0), then
    /// three phases of num updates to keys drawn from a scrambled
    /// Zipf(0.99) (P1-P3); the value store is capped at data + 30%.
    Update,
}

impl Workload {
    pub const ALL: [Workload; 7] = [
        Workload::FillSeq,
        Workload::FillRandom,
        Workload::Overwrite,
        Workload::ReadRandom,
        Workload::ReadSeq,
        Workload::SeekRandom,
        Workload::Update,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::FillSeq => "fillseq",
            Workload::FillRandom => "fillrandom",
            Workload::Overwrite => "overwrite",
            Workload::ReadRandom => "readrandom",
            Workload::ReadSeq => "readseq",
            Workload::SeekRandom => "seekrandom",
            Workload::Update => "update",
        }
    }

    pub fn from_name(s: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == s)
    }

    fn writes(self) -> bool {
        matches!(
            self,
            Workload::FillSeq | Workload::FillRandom | Workload::Overwrite | Workload::Update
        )
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub db_path: PathBuf,
    pub preset: Preset,
    pub workloads: Vec<Workload>,
    pub num: u64,
    /// Operations of read workloads (default: `num`).
    pub reads: Option<u64>,
    /// Updates per phase of the update workload (default: `num`).
    pub update_ops: Option<u64>,
    pub key_size: usize,
    pub value_size: usize,
    pub seed: u64,
    pub sync: bool,
    /// Keep the existing database instead of starting empty.
    pub use_existing: bool,
    /// Flush and wait for compactions after each write workload.
    pub settle: bool,
    /// Overrides [`Options::scan_prefetch_threads`] (0: no read-ahead).
    pub scan_prefetch_threads: Option<usize>,
    /// Overrides [`Options::hash_gc_policy`].
    pub hash_gc_policy: Option<sluicedb::HashGcPolicy>,
    /// Overrides [`Options::separation_threshold_bytes`] (`Some(None)`:
    /// no separation).
    pub separation_threshold: Option<Option<usize>>,
    /// Overrides [`Options::separate_at_flush`].
    pub separate_at_flush: Option<bool>,
    /// Overrides [`Options::hash_hotness`].
    pub hash_hotness: Option<bool>,
    /// Overrides [`Options::gc_threads`].
    pub gc_threads: Option<usize>,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            db_path: PathBuf::from("sluice-data"),
            preset: Preset::LevelDb,
            workloads: vec![
                Workload::FillRandom,
                Workload::ReadRandom,
                Workload::Overwrite,
                Workload::ReadSeq,
                Workload::SeekRandom,
            ],
            num: 100_000,
            reads: None,
            update_ops: None,
            key_size: 16,
            value_size: 1000,
            seed: 301,
            sync: false,
            use_existing: false,
            settle: true,
            scan_prefetch_threads: None,
            hash_gc_policy: None,
            separation_threshold: None,
            separate_at_flush: None,
            hash_hotness: None,
            gc_threads: None,
        }
    }
}

/// The measured result of one workload.
#[derive(Debug, Clone)]
pub struct PhaseResult {
    pub workload: Workload,
    /// The workload's name, or `update.P1` style for a phase.
    pub label: String,
    /// Bytes GC read and wrote in the phase.
    pub gc_bytes: u64,
    pub ops: u64,
    pub found: u64,
    pub elapsed: Duration,
    pub user_bytes: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub write_amp: f64,
    pub space_amp: f64,
    pub disk_bytes: u64,
    pub settle: Option<Duration>,
}

impl PhaseResult {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
    pub fn micros_per_op(&self) -> f64 {
        self.elapsed.as_secs_f64() * 1e6 / self.ops.max(1) as f64
    }
    pub fn mb_per_sec(&self) -> f64 {
        self.user_bytes as f64 / 1048576.0 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// db_bench's result line, with amplification figures appended.
    pub fn db_bench_line(&self) -> String {
        let mut s = format!(
            "{:<12} : {:>11.3} micros/op {:>8.0} ops/sec; {:>7.1} MB/s",
            self.label,
            self.micros_per_op(),
            self.ops_per_sec(),
            self.mb_per_sec()
        );
        if !self.workload.writes() {
            s += &format!(" ({} of {} found)", self.found, self.ops);
        }
        s += &format!(
            "  write-amp {:.2}  space-amp {:.2}",
            self.write_amp, self.space_amp
        );
        if self.gc_bytes > 0 {
            s += &format!("  gc {:.1} MB", self.gc_bytes as f64 / 1048576.0);
        }
        if let Some(d) = self.settle {
            s += &format!("  settle {:.2}s", d.as_secs_f64());
        }
        s
    }
}

/// Key number `n` as a fixed-width key.
pub fn make_key(n: u64, key_size: usize) -> Vec<u8> {
    let mut k = format!("{n:0width$}", width = key_size).into_bytes();
    k.truncate(key_size.max(1));
    k
}

/// A source of incompressible values (db_bench's RandomGenerator).
struct Values {
    buf: Vec<u8>,
    pos: usize,
}

impl Values {
    fn new(seed: u64, value_size: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x7a1e);
        let len = (1 << 20).max(value_size * 2);
        Values {
            buf: (0..len).map(|_| rng.gen()).collect(),
            pos: 0,
        }
    }
    fn next(&mut self, n: usize) -> &[u8] {
        if self.pos + n > self.buf.len() {
            self.pos = 0;
        }
        let v = &self.buf[self.pos..self.pos + n];
        self.pos += n.max(1) % 4099 + 1;
        v
    }
}

/// Bytes of all files in `dir` as allocated on disk.
pub fn dir_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.blocks() * 512)
                .sum()
        })
        .unwrap_or(0)
}

/// Runs the configured workloads, printing a line per workload to stdout.
pub fn run(cfg: &BenchConfig) -> sluicedb::Result<Vec<PhaseResult>> {
    if !cfg.use_existing && cfg.db_path.exists() {
        std::fs::remove_dir_all(&cfg.db_path).map_err(|e| {
            sluicedb::Error::InvalidArgument(format!("cannot clear {}: {e}", cfg.db_path.display()))
        })?;
    }
    let mut opts = Options::preset(cfg.preset);
    if let Some(t) = cfg.separation_threshold {
        opts.separation_threshold_bytes = t;
    }
    if cfg.workloads.contains(&Workload::Update) && opts.separation_threshold_bytes.is_some() {
        // HashKV §4.2: the value store holds the data plus a 30% reserve.
        let record = (cfg.key_size + cfg.value_size + 21) as f64;
        let capacity = (cfg.num as f64 * record * 1.3) as u64;
        opts.value_store_capacity_bytes = Some(capacity);
        // GC frees whole files: keep them small next to the capacity, so
        // that small runs have files to collect too.
        opts.value_log_file_size_bytes = (capacity / 32).clamp(1 << 20, 64 << 20);
        // Likewise at least 32 segment groups for the hash layout, so a GC
        // step rewrites 1/32 of the data or less, and at least 256 log
        // segments in the reserve (1 MiB ones leave small runs only a few).
        let reserve = capacity as f64 * opts.hash_reserve_ratio;
        opts.hash_log_segment_bytes = ((reserve / 256.0) as u64).clamp(64 << 10, 1 << 20);
        let main_area = capacity as f64 - reserve;
        opts.hash_main_segment_bytes =
            ((main_area / 32.0) as u64).clamp(opts.hash_log_segment_bytes, 64 << 20);
    }
    if let Some(t) = cfg.scan_prefetch_threads {
        opts.scan_prefetch_threads = t;
    }
    if let Some(p) = cfg.hash_gc_policy {
        opts.hash_gc_policy = p;
    }
    if let Some(h) = cfg.hash_hotness {
        opts.hash_hotness = h;
    }
    if let Some(n) = cfg.gc_threads {
        opts.gc_threads = n;
    }
    if let Some(f) = cfg.separate_at_flush {
        opts.separate_at_flush = f;
    }
    // Separation at flush has nothing to do without separation (the
    // threshold sweep's `--separation-threshold none` under `hashkv`).
    opts.separate_at_flush &= opts.separation_threshold_bytes.is_some();
    let db = Db::open(&cfg.db_path, opts)?;
    println!(
        "sluicedb bench: preset {}  keys {} B  values {} B  entries {}  db {}",
        cfg.preset.name(),
        cfg.key_size,
        cfg.value_size,
        cfg.num,
        cfg.db_path.display()
    );
    let mut values = Values::new(cfg.seed, cfg.value_size);
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    // Distinct keys written so far, for space amplification.
    let mut live_keys: u64 = if cfg.use_existing { cfg.num } else { 0 };
    let mut results = Vec::new();
    for &w in &cfg.workloads {
        if w == Workload::Update {
            results.extend(run_update(&db, cfg, &mut values, &mut rng, &mut live_keys)?);
            continue;
        }
        let before = db.stats().io;
        let start = Instant::now();
        let (ops, found, user_bytes) = match w {
            Workload::FillSeq | Workload::FillRandom | Workload::Overwrite => {
                let order: Vec<u64> = match w {
                    Workload::FillSeq => (0..cfg.num).collect(),
                    Workload::FillRandom => {
                        let mut v: Vec<u64> = (0..cfg.num).collect();
                        v.shuffle(&mut rng);
                        v
                    }
                    _ => (0..cfg.num).map(|_| rng.gen_range(0..cfg.num)).collect(),
                };
                let start = Instant::now(); // exclude key generation
                let bytes = put_keys(&db, cfg, &mut values, &order)?;
                if w != Workload::Overwrite {
                    live_keys = live_keys.max(cfg.num);
                }
                let elapsed = start.elapsed();
                results.push(finish(
                    &db,
                    cfg,
                    w,
                    w.name(),
                    order.len() as u64,
                    0,
                    bytes,
                    elapsed,
                    &before,
                    0,
                    live_keys,
                )?);
                continue;
            }
            Workload::ReadRandom => {
                let n = cfg.reads.unwrap_or(cfg.num);
                let mut found = 0;
                let mut bytes = 0;
                for _ in 0..n {
                    let k = make_key(rng.gen_range(0..cfg.num), cfg.key_size);
                    if let Some(v) = db.get(&k)? {
                        found += 1;
                        bytes += (k.len() + v.len()) as u64;
                    }
                }
                (n, found, bytes)
            }
            Workload::ReadSeq => {
                // A range scan: values are read ahead (seed 001 §3.3.1).
                let (mut n, mut bytes) = (0, 0);
                for pair in db.range::<&[u8]>(..) {
                    let (k, v) = pair?;
                    n += 1;
                    bytes += (k.len() + v.len()) as u64;
                }
                (n, n, bytes)
            }
            Workload::SeekRandom => {
                let n = cfg.reads.unwrap_or(cfg.num);
                let mut it = db.iter();
                let (mut found, mut bytes) = (0, 0);
                for _ in 0..n {
                    let k = make_key(rng.gen_range(0..cfg.num), cfg.key_size);
                    it.seek(&k);
                    if it.valid() {
                        if it.key() == k.as_slice() {
                            found += 1;
                        }
                        bytes += (it.key().len() + it.value()?.len()) as u64;
                    }
                }
                it.status()?;
                (n, found, bytes)
            }
            Workload::Update => unreachable!("update runs its own phases above"),
        };
        let elapsed = start.elapsed();
        results.push(finish(
            &db,
            cfg,
            w,
            w.name(),
            ops,
            found,
            user_bytes,
            elapsed,
            &before,
            0,
            live_keys,
        )?);
    }
    let s = db.stats();
    println!("\n{s}");
    Ok(results)
}

#[expect(
    clippy::too_many_arguments,
    reason = "one call site, passing one phase's measurements"
)]
fn finish(
    db: &Db,
    cfg: &BenchConfig,
    w: Workload,
    label: &str,
    ops: u64,
    found: u64,
    user_bytes: u64,
    elapsed: Duration,
    before: &sluicedb::fs::IoStats,
    gc_before: u64,
    live_keys: u64,
) -> sluicedb::Result<PhaseResult> {
    let settle = if w.writes() && cfg.settle {
        let t = Instant::now();
        db.flush()?;
        db.wait_for_background()?;
        Some(t.elapsed())
    } else {
        None
    };
    let io = db.stats().io.since(before);
    let live = live_keys * (cfg.key_size + cfg.value_size) as u64;
    let disk = dir_bytes(&cfg.db_path);
    let s = db.stats();
    let r = PhaseResult {
        workload: w,
        label: label.to_string(),
        gc_bytes: (s.gc_bytes_read + s.gc_bytes_written).saturating_sub(gc_before),
        ops,
        found,
        elapsed,
        user_bytes,
        bytes_written: io.total_written(),
        bytes_read: io.total_read(),
        write_amp: if user_bytes > 0 && w.writes() {
            io.total_written() as f64 / user_bytes as f64
        } else {
            0.0
        },
        space_amp: if live > 0 {
            disk as f64 / live as f64
        } else {
            0.0
        },
        disk_bytes: disk,
        settle,
    };
    println!("{}", r.db_bench_line());
    Ok(r)
}

/// Puts key numbers `keys` with fresh values; returns the user bytes.
fn put_keys(
    db: &Db,
    cfg: &BenchConfig,
    values: &mut Values,
    keys: &[u64],
) -> sluicedb::Result<u64> {
    let wo = WriteOptions { sync: cfg.sync };
    let mut bytes = 0;
    for &n in keys {
        let k = make_key(n, cfg.key_size);
        let v = values.next(cfg.value_size);
        bytes += (k.len() + v.len()) as u64;
        db.put_opt(&wo, &k, v)?;
    }
    Ok(bytes)
}

/// The update experiment: P0 load in random order, then P1-P3 of
/// `update_ops` (default `num`) scrambled-Zipf(0.99) updates each.
fn run_update(
    db: &Db,
    cfg: &BenchConfig,
    values: &mut Values,
    rng: &mut StdRng,
    live_keys: &mut u64,
) -> sluicedb::Result<Vec<PhaseResult>> {
    let zipf = ScrambledZipf::new(cfg.num, 0.99);
    let mut out = Vec::new();
    for phase in 0..4 {
        let keys: Vec<u64> = if phase == 0 {
            let mut v: Vec<u64> = (0..cfg.num).collect();
            v.shuffle(rng);
            v
        } else {
            let n = cfg.update_ops.unwrap_or(cfg.num);
            (0..n).map(|_| zipf.sample(rng)).collect()
        };
        let s = db.stats();
        let (before, gc_before) = (s.io, s.gc_bytes_read + s.gc_bytes_written);
        let start = Instant::now();
        let bytes = put_keys(db, cfg, values, &keys)?;
        *live_keys = cfg.num;
        let elapsed = start.elapsed();
        let label = format!("update.P{phase}");
        out.push(finish(
            db,
            cfg,
            Workload::Update,
            &label,
            keys.len() as u64,
            0,
            bytes,
            elapsed,
            &before,
            gc_before,
            *live_keys,
        )?);
    }
    Ok(out)
}

/// YCSB's scrambled Zipfian: ranks drawn from Zipf(`theta`) over `n` items,
/// then hashed, so that hot keys are spread over the key space.
pub struct ScrambledZipf {
    n: u64,
    zipf: rand_distr::Zipf<f64>,
}

impl ScrambledZipf {
    pub fn new(n: u64, theta: f64) -> Self {
        ScrambledZipf {
            n: n.max(1),
            zipf: rand_distr::Zipf::new(n.max(1), theta).expect("valid Zipf parameters"),
        }
    }

    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        use rand::distributions::Distribution;
        let rank = self.zipf.sample(rng) as u64 - 1;
        // FNV-1a of the rank, as YCSB scrambles.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in rank.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h % self.n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrambled_zipf_is_skewed_and_deterministic() {
        let z = ScrambledZipf::new(10_000, 0.99);
        let mut a = StdRng::seed_from_u64(1);
        let mut b = StdRng::seed_from_u64(1);
        let xs: Vec<u64> = (0..20_000).map(|_| z.sample(&mut a)).collect();
        let ys: Vec<u64> = (0..20_000).map(|_| z.sample(&mut b)).collect();
        assert_eq!(xs, ys, "same seed, same keys");
        assert!(xs.iter().all(|&x| x < 10_000));
        let mut counts = std::collections::HashMap::new();
        for x in &xs {
            *counts.entry(x).or_insert(0u32) += 1;
        }
        let mut top: Vec<u32> = counts.values().copied().collect();
        top.sort_unstable_by(|a, b| b.cmp(a));
        let hottest_10: u32 = top.iter().take(10).sum();
        // Zipf(0.99): the 10 hottest of 10,000 keys draw about a quarter.
        assert!(hottest_10 > 3_000, "not skewed: top 10 drew {hottest_10}");
        // Scrambling spreads the hot keys: the hottest is not key 0.
        let hottest = counts.iter().max_by_key(|(_, &c)| c).unwrap().0;
        assert_ne!(**hottest, 0);
    }

    #[test]
    fn keys_are_fixed_width_and_ordered() {
        assert_eq!(make_key(42, 16), b"0000000000000042".to_vec());
        assert!(make_key(9, 16) < make_key(10, 16));
        assert_eq!(Workload::from_name("readseq"), Some(Workload::ReadSeq));
    }

    #[test]
    fn tiny_update_run_under_wisckey_collects_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = BenchConfig {
            db_path: dir.path().join("db"),
            preset: Preset::WiscKey,
            workloads: vec![Workload::Update],
            num: 3000,
            key_size: 24,
            value_size: 992,
            ..Default::default()
        };
        let r = run(&cfg).unwrap();
        let labels: Vec<&str> = r.iter().map(|p| p.label.as_str()).collect();
        assert_eq!(labels, ["update.P0", "update.P1", "update.P2", "update.P3"]);
        // Updates beyond the 30% reserve force GC in the update phases.
        assert!(r[1..].iter().any(|p| p.gc_bytes > 0), "GC never ran");
        assert!(r.iter().all(|p| p.write_amp >= 1.0));
    }

    #[test]
    fn hashkv_without_separation_runs() {
        // The threshold sweep's baseline: the hashkv preset with its
        // separation (and so its separation at flush) turned off.
        let dir = tempfile::tempdir().unwrap();
        let cfg = BenchConfig {
            db_path: dir.path().join("db"),
            preset: Preset::HashKv,
            workloads: vec![Workload::Update],
            num: 500,
            update_ops: Some(500),
            value_size: 64,
            separation_threshold: Some(None),
            ..Default::default()
        };
        let r = run(&cfg).unwrap();
        assert_eq!(r.len(), 4);
        assert!(r.iter().all(|p| p.gc_bytes == 0), "nothing separated");
    }

    #[test]
    fn tiny_run_reports_every_workload() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = BenchConfig {
            db_path: dir.path().join("db"),
            workloads: Workload::ALL[..6].to_vec(),
            num: 2000,
            value_size: 100,
            ..Default::default()
        };
        let r = run(&cfg).unwrap();
        assert_eq!(r.len(), 6);
        let read = r
            .iter()
            .find(|p| p.workload == Workload::ReadRandom)
            .unwrap();
        assert_eq!(read.found, read.ops, "every key was loaded");
        let seq = r.iter().find(|p| p.workload == Workload::ReadSeq).unwrap();
        assert_eq!(seq.ops, 2000);
        let fill = r.iter().find(|p| p.workload == Workload::FillSeq).unwrap();
        assert!(
            fill.write_amp >= 1.0,
            "journal alone writes every byte once"
        );
        assert!(fill.space_amp > 0.5);
    }
}
