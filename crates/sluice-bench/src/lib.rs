//! `sluice bench`: db_bench- and YCSB-style workloads against sluicedb and
//! peer engines, on identical keys, values and operation sequences (the
//! "unified framework" of HashKV's evaluation, USENIX ATC '18, §4).
//!
//! Every phase reports throughput, latency percentiles, and write, read and
//! space amplification on two yardsticks: the engine's own I/O counters
//! (sluicedb's `Fs` layer) and, for every engine alike, the process's
//! `/proc/self/io` and the data directory's allocated size. Results print
//! as db_bench result lines and a comparison table, and append to a JSON
//! lines file that [`report`] turns into an SVG.
//!
//! Keys are fixed-width decimal numbers (`--key-size` bytes, default 24);
//! values are slices of a random buffer, so they do not compress.

pub mod engine;
pub mod gen;
pub mod kill;
pub mod measure;
#[cfg(any(feature = "rocksdb", feature = "fjall"))]
pub mod peers;
pub mod report;
pub mod workload;

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

pub use engine::{BoxError, Engine, EngineKind, Result};
pub use gen::{make_key, Chooser, ValueSizes, Values};
use measure::{dir_allocated_bytes, Latency, LatencySummary, ProcIo};
pub use workload::{Body, Mix, Op, Phase, ScanLength, Workload, Ycsb};

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Each engine runs in `<db_path>/<engine name>`, emptied first
    /// unless `use_existing`.
    pub db_path: PathBuf,
    pub engines: Vec<EngineKind>,
    pub workloads: Vec<Workload>,
    /// Keys loaded.
    pub num: u64,
    /// Operations of the read, overwrite, scan and YCSB workloads
    /// (default: `num`).
    pub ops: Option<u64>,
    /// Updates per phase of the update and mixed workloads (default: `num`).
    pub update_ops: Option<u64>,
    pub key_size: usize,
    pub value_size: usize,
    /// Pairs per scan of the `scan` workload (YCSB E draws 1..=100).
    pub scan_length: usize,
    pub threads: usize,
    pub seed: u64,
    pub sync: bool,
    /// Keep the databases already there (assumed to hold keys 0..num).
    pub use_existing: bool,
    /// Flush and wait for background work after each writing phase.
    pub settle: bool,
    /// Append a JSON line per phase here.
    pub out: Option<PathBuf>,
    /// Show a progress bar on stderr when it is a terminal.
    pub progress: bool,
    /// After each engine's run, print all of its counters (sluicedb's
    /// `Stats`) instead of a few plain lines.
    pub verbose: bool,
    /// Overrides [`sluicedb::ValueOptions::scan_prefetch_threads`] (0: no
    /// read-ahead).
    pub scan_prefetch_threads: Option<usize>,
    /// Overrides [`sluicedb::HashOptions::gc_policy`].
    pub hash_gc_policy: Option<sluicedb::HashGcPolicy>,
    /// Overrides [`sluicedb::ValueOptions::separation_threshold_bytes`]
    /// (`Some(None)`: no separation); also the peers' blob threshold.
    pub separation_threshold: Option<Option<usize>>,
    /// Overrides [`sluicedb::ValueOptions::separate_at_flush`].
    pub separate_at_flush: Option<bool>,
    /// Overrides [`sluicedb::HashOptions::hotness`].
    pub hash_hotness: Option<bool>,
    /// Overrides [`sluicedb::HashOptions::gc_threads`].
    pub gc_threads: Option<usize>,
    /// Overrides [`sluicedb::GcOptions::pressure_threads`].
    pub gc_pressure_threads: Option<usize>,
    /// Overrides [`sluicedb::HashOptions::gc_overlap_steps`].
    pub gc_overlap_steps: Option<bool>,
    /// Overrides [`sluicedb::HashOptions::batch_bytes`].
    pub hash_batch_bytes: Option<usize>,
    /// Overrides [`sluicedb::IndexOptions::index_decoupled_tables`]
    /// (Scavenger's GetKey, §3.3; off is an ablation).
    pub index_decoupled_tables: Option<bool>,
    /// Overrides [`sluicedb::IndexOptions::target_file_size_bytes`].
    pub target_file_size_bytes: Option<u64>,
    /// Overrides [`sluicedb::IndexOptions::base_level_size_bytes`].
    pub base_level_size_bytes: Option<u64>,
    /// Overrides the L0 triggers ([`sluicedb::Options::l0_triggers`]).
    pub l0_compaction_trigger: Option<usize>,
    /// Overrides [`sluicedb::IndexOptions::l0_read_compaction_trigger`].
    pub l0_read_compaction_trigger: Option<usize>,
    /// Overrides [`sluicedb::TableLayoutOptions::gc_lazy_read`] (§3.2.2).
    pub table_gc_lazy_read: Option<bool>,
    /// Overrides [`sluicedb::TableLayoutOptions::gc_write_back`] (§2.2,
    /// Fig. 15: pointer write-back instead of inheritance edges).
    pub table_gc_write_back: Option<bool>,
    /// Overrides [`sluicedb::LightKvOptions::fence`]: true for
    /// `FenceMode::Cache` (a memory fence, standing in for real persistent
    /// memory), false for `FenceMode::Msync`.
    pub lightkv_fence_cache: Option<bool>,
    /// Overrides [`sluicedb::LightKvOptions::max_leaf_nodes`].
    pub lightkv_max_leaf_nodes: Option<usize>,
    /// Overrides [`sluicedb::LightKvOptions::compaction_size`].
    pub lightkv_compaction_size: Option<usize>,
    /// Overrides [`sluicedb::TableLayoutOptions::direct_io`].
    pub table_direct_io: Option<bool>,
    /// Overrides [`sluicedb::TableLayoutOptions::gc_cost_benefit`].
    pub table_gc_cost_benefit: Option<bool>,
    /// Overrides [`sluicedb::TableLayoutOptions::gc_judge_by_counts`].
    pub table_gc_judge_by_counts: Option<bool>,
    /// Overrides [`sluicedb::TableLayoutOptions::drop_cache_bytes`] (§3.4;
    /// 0 turns the DropCache and hot/cold tables off).
    pub drop_cache_bytes: Option<usize>,
    /// Overrides [`sluicedb::TableLayoutOptions::gc_ratio`].
    pub table_gc_ratio: Option<f64>,
    /// Overrides [`sluicedb::Options::memory_budget_bytes`]
    /// (`usize::MAX`: off).
    pub memory_budget: Option<usize>,
    /// Overrides [`sluicedb::GcOptions::space_limit`] (`Some(None)`: off).
    pub space_limit: Option<Option<sluicedb::SpaceLimit>>,
    /// Give the separated presets a value store capacity derived from the
    /// workload (HashKV (USENIX ATC '18) §4.2's setup: the data plus a 30% reserve). Off by
    /// default: a user cannot know the data size, so the presets run as
    /// shipped and bound space themselves (issue 17).
    pub capacity: bool,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            db_path: PathBuf::from("sluice-data"),
            engines: vec![EngineKind::Sluice(sluicedb::Preset::LevelDb)],
            workloads: vec![Workload::Update],
            num: 100_000,
            ops: None,
            update_ops: None,
            key_size: 24,
            value_size: 992,
            scan_length: 100,
            threads: 1,
            seed: 301,
            sync: false,
            use_existing: false,
            settle: true,
            out: None,
            progress: true,
            verbose: false,
            scan_prefetch_threads: None,
            hash_gc_policy: None,
            separation_threshold: None,
            separate_at_flush: None,
            hash_hotness: None,
            gc_threads: None,
            gc_pressure_threads: None,
            gc_overlap_steps: None,
            space_limit: None,
            hash_batch_bytes: None,
            index_decoupled_tables: None,
            target_file_size_bytes: None,
            base_level_size_bytes: None,
            l0_compaction_trigger: None,
            l0_read_compaction_trigger: None,
            table_gc_lazy_read: None,
            table_gc_write_back: None,
            lightkv_fence_cache: None,
            lightkv_max_leaf_nodes: None,
            lightkv_compaction_size: None,
            table_direct_io: None,
            table_gc_cost_benefit: None,
            table_gc_judge_by_counts: None,
            drop_cache_bytes: None,
            table_gc_ratio: None,
            memory_budget: None,
            capacity: false,
        }
    }
}

impl BenchConfig {
    fn ops(&self) -> u64 {
        self.ops.unwrap_or(self.num)
    }
    fn update_ops(&self) -> u64 {
        self.update_ops.unwrap_or(self.num)
    }

    /// The value store capacity the update or churn (data + 30%, HashKV,
    /// USENIX ATC '18, §4.2) or mixed (data + 50%, the space Scavenger's
    /// evaluation allows, VLDB, §4.1) workload asks for, if either runs and
    /// [`BenchConfig::capacity`] is set.
    pub fn value_store_capacity(&self) -> Option<u64> {
        if !self.capacity {
            return None;
        }
        let data = |mean: f64| self.num as f64 * (self.key_size as f64 + mean + 21.0);
        let mut cap = None;
        if self.workloads.contains(&Workload::Update) || self.workloads.contains(&Workload::Churn) {
            cap = Some(data(self.value_size as f64) * 1.3);
        }
        if self.workloads.contains(&Workload::Mixed) {
            let m = data(ValueSizes::Mixed.mean()) * 1.5;
            cap = Some(cap.map_or(m, |c: f64| c.max(m)));
        }
        cap.map(|c| c as u64)
    }

    /// The peers' key-value separation threshold.
    pub fn peer_separation_threshold(&self) -> usize {
        match self.separation_threshold {
            Some(Some(t)) => t,
            _ => engine::PEER_SEPARATION_THRESHOLD_BYTES,
        }
    }

    /// Where an engine's database lives.
    pub fn engine_dir(&self, kind: EngineKind) -> PathBuf {
        self.db_path.join(kind.name())
    }

    /// The most keys the run can insert (loads plus YCSB D and E inserts).
    fn key_capacity(&self) -> u64 {
        // Inserts are drawn at random: plan for every operation of an
        // inserting phase being one.
        let inserting = self
            .workloads
            .iter()
            .filter(|w| matches!(w, Workload::Ycsb(y) if y.insert_share() > 0.0))
            .count() as u64;
        let churning = self
            .workloads
            .iter()
            .filter(|&&w| w == Workload::Churn)
            .count() as u64;
        self.num + inserting * self.ops() + churning * 3 * self.update_ops()
    }
}

/// Seconds an engine held writes back, by reason, and the GC relocations
/// it committed: running totals ([`Engine::stalls`]), or a phase's share
/// of them ([`PhaseResult::stalls`]). They say where a phase's time went
/// when its throughput moves: the 2 GiB hashkv update runs spent 1.8,
/// 2.1 and 3.0 s of P1, P2 and P3 at the space limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseStalls {
    /// Every write buffer full: waiting for a flush.
    pub memtables_s: f64,
    /// Level 0 at its slowdown or stop trigger.
    pub level0_s: f64,
    /// The value store at its capacity, waiting for GC.
    pub value_store_s: f64,
    /// Slowed between the space limit's ratios, or waiting at the high one.
    pub space_limit_s: f64,
    /// GC relocation commits holding the writer queue.
    pub gc_commit_s: f64,
    /// GC relocations committed.
    pub relocations: u64,
}

impl PhaseStalls {
    /// What happened between `before` and `self`.
    pub fn since(&self, before: &PhaseStalls) -> PhaseStalls {
        PhaseStalls {
            memtables_s: self.memtables_s - before.memtables_s,
            level0_s: self.level0_s - before.level0_s,
            value_store_s: self.value_store_s - before.value_store_s,
            space_limit_s: self.space_limit_s - before.space_limit_s,
            gc_commit_s: self.gc_commit_s - before.gc_commit_s,
            relocations: self.relocations.saturating_sub(before.relocations),
        }
    }

    /// ` stalled 2.6s (memtables 0.5 space 2.1) gc commits 1.2s` style:
    /// the reasons that took at least 0.05 s; empty when none did.
    fn describe(&self) -> String {
        let reasons: Vec<String> = [
            ("memtables", self.memtables_s),
            ("l0", self.level0_s),
            ("store-full", self.value_store_s),
            ("space", self.space_limit_s),
        ]
        .iter()
        .filter(|(_, s)| *s >= 0.05)
        .map(|(name, s)| format!("{name} {s:.1}"))
        .collect();
        let mut out = String::new();
        if !reasons.is_empty() {
            let total = self.memtables_s + self.level0_s + self.value_store_s + self.space_limit_s;
            out += &format!(" stalled {total:.1}s ({})", reasons.join(" "));
        }
        if self.gc_commit_s >= 0.05 {
            out += &format!(" gc commits {:.1}s", self.gc_commit_s);
        }
        out
    }
}

/// The measured result of one phase on one engine: a JSON line of
/// `--out`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseResult {
    pub engine: String,
    pub workload: String,
    /// The workload's name, `update.P1` style for one of its phases, or
    /// `closed` for the space taken after the engine was closed.
    pub phase: String,
    pub threads: usize,
    pub num: u64,
    pub key_size: usize,
    /// Mean value size of the phase's writes (or of the run).
    pub value_size: f64,
    pub seed: u64,
    pub ops: u64,
    /// Reads that found their key, or pairs scanned.
    pub found: u64,
    pub elapsed_s: f64,
    pub ops_per_sec: f64,
    /// User bytes (keys and values) written and read per second.
    pub mb_per_sec: f64,
    pub user_bytes_written: u64,
    pub user_bytes_read: u64,
    pub latency: LatencySummary,
    /// The engine's own count of bytes written and read in the phase
    /// (settle included), where it keeps one.
    pub engine_bytes_written: Option<u64>,
    pub engine_bytes_read: Option<u64>,
    /// `engine_bytes_written / user_bytes_written` (writing phases).
    pub write_amp: Option<f64>,
    /// `engine_bytes_read / user_bytes_read` (reading phases).
    pub read_amp: Option<f64>,
    /// The process's `/proc/self/io` over the phase (settle included).
    pub proc_io: Option<ProcIo>,
    /// `proc_io.net_written() / user_bytes_written` (writing phases).
    pub proc_write_amp: Option<f64>,
    /// Bytes allocated under the engine's directory after the phase.
    pub disk_bytes: u64,
    /// Bytes of live keys and values after the phase.
    pub live_bytes: u64,
    /// `disk_bytes / live_bytes`.
    pub space_amp: Option<f64>,
    /// The space amplification when the phase's last operation returned,
    /// before the settle step: an engine that leaves compaction or GC
    /// behind holds its garbage until then, so `space_amp` alone credits
    /// it with space its throughput (`ops_per_sec`) did not pay for.
    #[serde(default)]
    pub space_amp_before_settle: Option<f64>,
    /// The space amplification while the phase's operations ran, sampled
    /// every 250 ms (`SpaceSamples`): its mean and its highest. A single
    /// figure at the last write falls wherever the engine's compaction or
    /// GC cycle happens to be; a leveled tree holds a compaction's inputs
    /// and outputs at once, so it swings by a third within seconds.
    #[serde(default)]
    pub space_amp_running_mean: Option<f64>,
    #[serde(default)]
    pub space_amp_running_max: Option<f64>,
    /// Seconds the settle step (flush, wait for background work) took.
    pub settle_s: Option<f64>,
    /// CPU seconds the whole process spent (every thread, user and
    /// system) while the phase's operations ran, and then in its settle
    /// step: set beside `elapsed_s` and `settle_s`, they say whether an
    /// engine is short of cores or waiting.
    #[serde(default)]
    pub cpu_s: Option<f64>,
    #[serde(default)]
    pub settle_cpu_s: Option<f64>,
    /// Bytes the engine's value GC read and wrote in the phase.
    pub gc_bytes: u64,
    /// The process's peak resident memory during the phase, settle
    /// included (`measure::peak_rss_bytes`).
    #[serde(default)]
    pub peak_rss_bytes: Option<u64>,
    /// The most memory the engine's own index held during the phase
    /// (`Engine::index_memory_bytes`, sampled every 50 ms and after the
    /// settle step).
    #[serde(default)]
    pub index_memory_bytes: Option<u64>,
    /// Where the engine held writes back while the phase's operations ran
    /// (`Engine::stalls`; sluicedb only).
    #[serde(default)]
    pub stalls: Option<PhaseStalls>,
}

impl PhaseResult {
    /// The space-once-closed row (`<workload>.closed`; `closed` in files
    /// written before it was named).
    pub fn is_closed(&self) -> bool {
        self.phase == "closed" || self.phase.ends_with(".closed")
    }

    /// Throughput with the settle step counted as part of the phase: an
    /// engine that leaves compaction or GC behind pays it here (RocksDB
    /// under a memory cap took 27-30 s per 33 s update phase to settle).
    pub fn sustained_ops_per_sec(&self) -> f64 {
        self.ops as f64 / (self.elapsed_s + self.settle_s.unwrap_or(0.0)).max(1e-9)
    }

    fn micros_per_op(&self) -> f64 {
        self.elapsed_s * 1e6 / self.ops.max(1) as f64
    }

    /// db_bench's result line, with latency and amplification appended.
    pub fn db_bench_line(&self) -> String {
        let mut s = format!("{:<14} : ", self.phase);
        if !self.is_closed() {
            s += &format!(
                "{:>10.3} micros/op {:>9.0} ops/sec; {:>7.1} MB/s; p50 {:.1} p99 {:.1} p99.9 {:.1} us;",
                self.micros_per_op(),
                self.ops_per_sec,
                self.mb_per_sec,
                self.latency.p50_us,
                self.latency.p99_us,
                self.latency.p999_us,
            );
            if self.user_bytes_read > 0 || self.user_bytes_written == 0 {
                s += &format!(" ({} found of {})", self.found, self.ops);
            }
        }
        let amp = |a: Option<f64>| a.map_or("-".to_string(), |a| format!("{a:.2}"));
        if self.write_amp.is_some() || self.proc_write_amp.is_some() {
            s += &format!(
                " write-amp {} (io {})",
                amp(self.write_amp),
                amp(self.proc_write_amp)
            );
        }
        s += &format!(" space-amp {}", amp(self.space_amp));
        if let Some(a) = self.space_amp_before_settle {
            s += &format!(" ({a:.2} before settle");
            if let (Some(m), Some(x)) = (self.space_amp_running_mean, self.space_amp_running_max) {
                s += &format!(", {m:.2} mean {x:.2} max while running");
            }
            s += ")";
        }
        if self.gc_bytes > 0 {
            s += &format!(" gc {:.1} MB", self.gc_bytes as f64 / 1048576.0);
        }
        if let Some(d) = self.settle_s {
            s += &format!(" settle {d:.2}s");
        }
        if let Some(st) = &self.stalls {
            s += &st.describe();
        }
        s
    }
}

/// What all threads of a phase share.
struct Shared<'a> {
    engine: &'a dyn Engine,
    cfg: &'a BenchConfig,
    /// Keys 0..key_count exist (or are being inserted).
    key_count: AtomicU64,
    /// Current value size per key number; 0 for absent keys.
    sizes: Vec<AtomicU32>,
    /// The churn workload's live keys: one key number per slot (empty
    /// unless it runs).
    slots: Vec<AtomicU64>,
    values: Values,
    /// Readers of a readwhilewriting phase still reading; its writer
    /// writes while this is above 0.
    readers_left: std::sync::atomic::AtomicUsize,
}

impl Shared<'_> {
    fn live_bytes(&self) -> u64 {
        self.sizes
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .filter(|&s| s > 0)
            .map(|s| u64::from(s) + self.cfg.key_size as u64)
            .sum()
    }
}

/// What one thread measured.
#[derive(Default)]
struct Tally {
    ops: u64,
    found: u64,
    written: u64,
    read: u64,
    value_bytes: u64,
    latency: Latency,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.ops += o.ops;
        self.found += o.found;
        self.written += o.written;
        self.read += o.read;
        self.value_bytes += o.value_bytes;
        self.latency.merge(&o.latency);
    }
}

/// Runs every workload on every engine, printing as it goes; returns the
/// results of all phases.
/// The keys that make `dataset_bytes` of keys and values (`--dataset-gib`): sized by the
/// Mixed workload's mean value (about 8 KiB) when it runs, by `value_size` otherwise. The
/// workloads of one run share their key count, so Mixed together with a workload that
/// loads values of `value_size` itself (fillseq, fillrandom, update, churn) cannot give
/// both the size asked for: an error naming the two.
pub fn keys_for_dataset(
    dataset_bytes: f64,
    key_size: usize,
    value_size: usize,
    workloads: &[Workload],
) -> std::result::Result<u64, String> {
    if dataset_bytes.is_nan() || dataset_bytes <= 0.0 {
        return Err(format!(
            "the dataset size must be positive, not {dataset_bytes}"
        ));
    }
    let mean = if workloads.contains(&Workload::Mixed) {
        let fixed = [
            Workload::FillSeq,
            Workload::FillRandom,
            Workload::Update,
            Workload::Churn,
        ];
        if let Some(w) = workloads.iter().find(|w| fixed.contains(w)) {
            return Err(format!(
                "a dataset size cannot size both mixed (values of about {:.0} B on average) \
                 and {} (values of {value_size} B): run them apart, or give --num",
                ValueSizes::Mixed.mean(),
                w.name()
            ));
        }
        ValueSizes::Mixed.mean()
    } else {
        value_size as f64
    };
    Ok((dataset_bytes / (key_size as f64 + mean)) as u64)
}

pub fn run(cfg: &BenchConfig) -> Result<Vec<PhaseResult>> {
    if cfg.num == 0 || cfg.key_size == 0 || cfg.threads == 0 {
        return Err("--num, --key-size and --threads must be positive".into());
    }
    if cfg.key_size < cfg.key_capacity().to_string().len() {
        return Err(format!(
            "--key-size {} is too short for {} keys",
            cfg.key_size,
            cfg.key_capacity()
        )
        .into());
    }
    if let Some(&k) = cfg.engines.iter().find(|k| !k.available()) {
        return Err(engine::unavailable(k));
    }
    let mut out = match &cfg.out {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| format!("{}: {e}", p.display()))?,
        ),
        None => None,
    };
    let mut all = Vec::new();
    for &kind in &cfg.engines {
        let results = run_engine(kind, cfg, &mut |r| {
            println!("{:<12} {}", kind.name(), r.db_bench_line());
            if let Some(f) = out.as_mut() {
                let line = serde_json::to_string(r).map_err(|e| e.to_string())?;
                writeln!(f, "{line}").map_err(|e| format!("--out: {e}"))?;
            }
            Ok(())
        })?;
        all.extend(results);
    }
    if cfg.engines.len() > 1 {
        println!("\n{}", report::table(&all));
        println!("{}", report::memory_table(&all));
    }
    Ok(all)
}

/// The file beside an engine's directory saying the benchmark made it
/// (and may empty it).
fn bench_marker(dir: &std::path::Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(".sluice-bench");
    dir.with_file_name(name)
}

/// The benchmark empties an engine's directory before it runs: only one it
/// made, an empty one, or a sluicedb database; anything else (a user's
/// files under the same name) is refused.
fn check_clearable(dir: &std::path::Path) -> Result<()> {
    // A sluicedb database: its manifest reads (another engine's does not).
    if bench_marker(dir).exists() || sluicedb::Db::recorded_preset(dir).is_ok() {
        return Ok(());
    }
    let mut entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if entries.next().is_none() {
        return Ok(());
    }
    Err(format!(
        "{} holds files the benchmark did not make; it empties the directory of each \
         engine before a run: choose another --db, or remove them yourself",
        dir.display()
    )
    .into())
}

fn run_engine(
    kind: EngineKind,
    cfg: &BenchConfig,
    emit: &mut dyn FnMut(&PhaseResult) -> Result<()>,
) -> Result<Vec<PhaseResult>> {
    let dir = cfg.engine_dir(kind);
    if !cfg.use_existing && dir.exists() {
        check_clearable(&dir)?;
        std::fs::remove_dir_all(&dir)
            .map_err(|e| format!("cannot clear {}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::fs::write(bench_marker(&dir), b"")
        .map_err(|e| format!("{}: {e}", bench_marker(&dir).display()))?;
    let engine = engine::open(kind, cfg, &dir)?;
    println!(
        "\n{} bench: keys {} B, values {} B, {} entries, {} thread(s), db {}",
        kind.name(),
        cfg.key_size,
        cfg.value_size,
        cfg.num,
        cfg.threads,
        dir.display()
    );
    let max_value = cfg
        .value_size
        .max(if cfg.workloads.contains(&Workload::Mixed) {
            ValueSizes::Mixed.max()
        } else {
            0
        });
    let shared = Shared {
        engine: engine.as_ref(),
        cfg,
        key_count: AtomicU64::new(0),
        sizes: (0..cfg.key_capacity()).map(|_| AtomicU32::new(0)).collect(),
        slots: if cfg.workloads.contains(&Workload::Churn) {
            (0..cfg.num).map(AtomicU64::new).collect()
        } else {
            Vec::new()
        },
        values: Values::new(cfg.seed, max_value),
        readers_left: std::sync::atomic::AtomicUsize::new(0),
    };
    if cfg.use_existing {
        shared.key_count.store(cfg.num, Ordering::Relaxed);
        for s in &shared.sizes[..cfg.num as usize] {
            s.store(cfg.value_size as u32, Ordering::Relaxed);
        }
    }
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut results = Vec::new();
    let mut phase_no = 0u64;
    for &w in &cfg.workloads {
        for phase in phases(w, cfg, &shared, &mut rng) {
            phase_no += 1;
            let r = run_phase(kind, &shared, &phase, phase_no)?;
            emit(&r)?;
            results.push(r);
        }
    }
    let report = if cfg.verbose {
        engine.report()
    } else {
        engine.summary()
    };
    let live = shared.live_bytes();
    drop(shared);
    drop(engine);
    if !report.is_empty() {
        println!("\n{report}");
    }
    // Space once closed: some engines drop obsolete files only then.
    let disk = dir_allocated_bytes(&dir);
    let closed = PhaseResult {
        engine: kind.name().into(),
        workload: "close".into(),
        // Named after the last workload, so that several invocations
        // appended to one file (update, then YCSB) keep a row each.
        phase: format!(
            "{}.closed",
            cfg.workloads.last().map_or("bench", |w| w.name())
        ),
        threads: cfg.threads,
        num: cfg.num,
        key_size: cfg.key_size,
        value_size: cfg.value_size as f64,
        seed: cfg.seed,
        disk_bytes: disk,
        live_bytes: live,
        space_amp: (live > 0).then(|| disk as f64 / live as f64),
        ..PhaseResult::default()
    };
    emit(&closed)?;
    results.push(closed);
    Ok(results)
}

/// The phases workload `w` runs now, given what is loaded.
fn phases(w: Workload, cfg: &BenchConfig, shared: &Shared<'_>, rng: &mut StdRng) -> Vec<Phase> {
    let shuffled = |rng: &mut StdRng| {
        let mut v: Vec<u64> = (0..cfg.num).collect();
        v.shuffle(rng);
        v
    };
    let ops = |mix, chooser, scan_length| Body::Ops {
        mix,
        chooser,
        scan_length,
    };
    let phase = |label: &str, ops: u64, body, mixed_sizes| Phase {
        workload: w,
        label: label.to_string(),
        ops,
        body,
        mixed_sizes,
    };
    let loaded = shared.key_count.load(Ordering::Relaxed) > 0;
    // A load phase first, for workloads that run on loaded data.
    let load_unless_loaded = |label: &str, rng: &mut StdRng| -> Vec<Phase> {
        if loaded {
            return Vec::new();
        }
        let keys = shuffled(rng);
        vec![phase(label, cfg.num, Body::Load { keys }, false)]
    };
    let one = ScanLength::Fixed(1);
    match w {
        Workload::FillSeq => vec![phase(
            w.name(),
            cfg.num,
            Body::Load {
                keys: (0..cfg.num).collect(),
            },
            false,
        )],
        Workload::FillRandom => vec![phase(
            w.name(),
            cfg.num,
            Body::Load {
                keys: shuffled(rng),
            },
            false,
        )],
        Workload::Overwrite => vec![phase(
            w.name(),
            cfg.ops(),
            ops(Mix::only(Op::Update), Chooser::Uniform, one),
            false,
        )],
        Workload::ReadRandom => vec![phase(
            w.name(),
            cfg.ops(),
            ops(Mix::only(Op::Read), Chooser::Uniform, one),
            false,
        )],
        Workload::SeekRandom => vec![phase(
            w.name(),
            cfg.ops(),
            ops(Mix::only(Op::Scan), Chooser::Uniform, one),
            false,
        )],
        Workload::Scan => vec![phase(
            w.name(),
            cfg.ops(),
            ops(
                Mix::only(Op::Scan),
                Chooser::Uniform,
                ScanLength::Fixed(cfg.scan_length),
            ),
            false,
        )],
        Workload::ReadSeq => vec![phase(
            w.name(),
            shared.key_count.load(Ordering::Relaxed),
            Body::ReadAll,
            false,
        )],
        Workload::Update | Workload::Mixed => {
            let mixed = w == Workload::Mixed;
            let mut v = vec![phase(
                &format!("{}.{}", w.name(), if mixed { "load" } else { "P0" }),
                cfg.num,
                Body::Load {
                    keys: shuffled(rng),
                },
                mixed,
            )];
            let zipf = Chooser::scrambled(cfg.num);
            let rounds = if mixed { 1 } else { 3 };
            for p in 1..=rounds {
                let label = if mixed {
                    format!("{}.update", w.name())
                } else {
                    format!("{}.P{p}", w.name())
                };
                v.push(phase(
                    &label,
                    cfg.update_ops(),
                    ops(Mix::only(Op::Update), zipf.clone(), one),
                    mixed,
                ));
            }
            v
        }
        Workload::Churn => {
            let mut v = vec![phase(
                "churn.P0",
                cfg.num,
                Body::Load {
                    keys: shuffled(rng),
                },
                false,
            )];
            for p in 1..=3 {
                v.push(phase(
                    &format!("churn.P{p}"),
                    cfg.update_ops(),
                    ops(Mix::only(Op::Churn), Chooser::Uniform, one),
                    false,
                ));
            }
            v
        }
        Workload::ReadWhileWriting => {
            let mut v = load_unless_loaded("readwhilewriting.load", rng);
            v.push(phase(
                w.name(),
                cfg.ops(),
                Body::ReadWhileWriting {
                    chooser: Chooser::Uniform,
                },
                false,
            ));
            v
        }
        Workload::ReadWrite => {
            let mut v = load_unless_loaded("readwrite.load", rng);
            let count = shared.key_count.load(Ordering::Relaxed).max(cfg.num);
            for read in workload::READ_WRITE_READ_PERCENTS {
                let share = f64::from(read) / 100.0;
                v.push(phase(
                    &format!("readwrite.r{read}"),
                    cfg.ops(),
                    ops(
                        Mix::default()
                            .with(Op::Read, share)
                            .with(Op::Update, 1.0 - share),
                        Chooser::scrambled(count),
                        one,
                    ),
                    false,
                ));
            }
            v
        }
        Workload::Ycsb(y) => {
            let mut v = load_unless_loaded("ycsb.load", rng);
            let (mix, scan_length) = y.mix();
            let count = shared.key_count.load(Ordering::Relaxed).max(cfg.num);
            let chooser = if y == Ycsb::D {
                Chooser::latest(count)
            } else {
                Chooser::scrambled(count)
            };
            v.push(phase(
                w.name(),
                cfg.ops(),
                ops(mix, chooser, scan_length),
                false,
            ));
            v
        }
    }
}

/// The directory's bytes and the live bytes, sampled while a writing
/// phase's operations run.
#[derive(Default)]
struct SpaceSamples {
    samples: Vec<(u64, u64)>,
}

impl SpaceSamples {
    /// Ratios of the samples taken once the store held at least half of
    /// `live`, the phase's live bytes at its end: while a load has written
    /// little, its journal and first tables over almost nothing say
    /// nothing of the engine.
    fn ratios(&self, live: u64) -> impl Iterator<Item = f64> + '_ {
        self.samples
            .iter()
            .filter(move |&&(_, l)| l > 0 && l >= live / 2)
            .map(|&(d, l)| d as f64 / l as f64)
    }

    fn mean(&self, live: u64) -> Option<f64> {
        let (n, sum) = self
            .ratios(live)
            .fold((0u32, 0.0), |(n, s), r| (n + 1, s + r));
        (n > 0).then(|| sum / f64::from(n))
    }

    fn max(&self, live: u64) -> Option<f64> {
        self.ratios(live).reduce(f64::max)
    }
}

/// Sleeps `d`, or less once `running` is false.
fn sleep_while(running: &AtomicBool, d: Duration) {
    let end = Instant::now() + d;
    while running.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= end {
            return;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(20)));
    }
}

fn run_phase(
    kind: EngineKind,
    shared: &Shared<'_>,
    phase: &Phase,
    phase_no: u64,
) -> Result<PhaseResult> {
    let cfg = shared.cfg;
    let engine = shared.engine;
    let io_before = engine.io_bytes();
    let proc_before = ProcIo::now();
    let gc_before = engine.gc_bytes();
    let stalls_before = engine.stalls();
    let bar = progress_bar(cfg, kind, phase);
    let threads = match phase.body {
        Body::ReadAll => 1,
        Body::ReadWhileWriting { .. } => cfg.threads.max(2),
        _ => cfg.threads,
    };
    shared.readers_left.store(threads - 1, Ordering::SeqCst);
    let rss_reset = measure::reset_peak_rss();
    let index_peak = AtomicU64::new(0);
    let index_known = engine.index_memory_bytes().is_some();
    let sample_index = || {
        if let Some(b) = engine.index_memory_bytes() {
            index_peak.fetch_max(b, Ordering::Relaxed);
        }
    };
    let running = AtomicBool::new(true);
    let space = std::sync::Mutex::new(SpaceSamples::default());
    let sample_space = || {
        let sample = (
            dir_allocated_bytes(&cfg.engine_dir(kind)),
            shared.live_bytes(),
        );
        space.lock().unwrap().samples.push(sample);
    };
    let space_sampled = phase.workload.writes();
    let cpu_start = measure::process_cpu_secs();
    let start = Instant::now();
    let tallies: Vec<Result<Tally>> = std::thread::scope(|s| {
        if space_sampled {
            // One sample at the start and one at the end, whatever the
            // phase's length, and one every 250 ms between.
            sample_space();
            s.spawn(|| loop {
                sleep_while(&running, Duration::from_millis(250));
                if !running.load(Ordering::Relaxed) {
                    break;
                }
                sample_space();
            });
        }
        if index_known {
            s.spawn(|| {
                while running.load(Ordering::Relaxed) {
                    sample_index();
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
        }
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let bar = &bar;
                s.spawn(move || run_thread(shared, phase, phase_no, t, threads, bar))
            })
            .collect();
        let tallies = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a benchmark thread panicked".into()))
            })
            .collect();
        if space_sampled {
            sample_space();
        }
        running.store(false, Ordering::Relaxed);
        tallies
    });
    let elapsed = start.elapsed();
    let cpu_run_end = measure::process_cpu_secs();
    let stalls = engine
        .stalls()
        .zip(stalls_before)
        .map(|(after, before)| after.since(&before));
    bar.finish_and_clear();
    let mut tally = Tally::default();
    for t in tallies {
        tally.add(&t?);
    }
    let writes = tally.written > 0;
    // Space is taken first as the phase's last write left it, before the
    // engine is given time for the flush and background work it left.
    let (disk_unsettled, settle) = if writes && cfg.settle {
        // The space sampling's last sample was taken as the last write
        // returned: the same figure.
        let last_sample = space.lock().unwrap().samples.last().map(|&(d, _)| d);
        let disk = last_sample.unwrap_or_else(|| dir_allocated_bytes(&cfg.engine_dir(kind)));
        let t = Instant::now();
        engine.settle()?;
        (Some(disk), Some(t.elapsed()))
    } else {
        (None, None)
    };
    let cpu_settle_end = measure::process_cpu_secs();
    let cpu_between = |a: Option<f64>, b: Option<f64>| Some((b? - a?).max(0.0));
    sample_index();
    let io = match (io_before, engine.io_bytes()) {
        (Some((w0, r0)), Some((w1, r1))) => Some((w1.saturating_sub(w0), r1.saturating_sub(r0))),
        _ => None,
    };
    let proc_io = match (proc_before, ProcIo::now()) {
        (Some(a), Some(b)) => Some(b.since(&a)),
        _ => None,
    };
    let disk = dir_allocated_bytes(&cfg.engine_dir(kind));
    let live = shared.live_bytes();
    let space = space.into_inner().unwrap_or_else(|e| e.into_inner());
    let ratio = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
    let secs = elapsed.as_secs_f64().max(1e-9);
    let value_size = if writes {
        tally.value_bytes as f64 / tally.ops.max(1) as f64
    } else {
        cfg.value_size as f64
    };
    Ok(PhaseResult {
        engine: kind.name().into(),
        workload: phase.workload.name().into(),
        phase: phase.label.clone(),
        threads,
        num: cfg.num,
        key_size: cfg.key_size,
        value_size,
        seed: cfg.seed,
        ops: tally.ops,
        found: tally.found,
        elapsed_s: elapsed.as_secs_f64(),
        ops_per_sec: tally.ops as f64 / secs,
        mb_per_sec: (tally.written + tally.read) as f64 / 1048576.0 / secs,
        user_bytes_written: tally.written,
        user_bytes_read: tally.read,
        latency: tally.latency.summary(),
        engine_bytes_written: io.map(|(w, _)| w),
        engine_bytes_read: io.map(|(_, r)| r),
        write_amp: io.and_then(|(w, _)| {
            if writes {
                ratio(w, tally.written)
            } else {
                None
            }
        }),
        read_amp: io.and_then(|(_, r)| ratio(r, tally.read)),
        proc_io,
        proc_write_amp: proc_io.and_then(|p| {
            if writes {
                ratio(p.net_written(), tally.written)
            } else {
                None
            }
        }),
        disk_bytes: disk,
        live_bytes: live,
        space_amp: ratio(disk, live),
        space_amp_before_settle: disk_unsettled.and_then(|d| ratio(d, live)),
        space_amp_running_mean: space.mean(live),
        space_amp_running_max: space.max(live),
        settle_s: settle.map(|d: Duration| d.as_secs_f64()),
        cpu_s: cpu_between(cpu_start, cpu_run_end),
        settle_cpu_s: settle.and(cpu_between(cpu_run_end, cpu_settle_end)),
        gc_bytes: engine.gc_bytes().saturating_sub(gc_before),
        peak_rss_bytes: if rss_reset {
            measure::peak_rss_bytes()
        } else {
            None
        },
        index_memory_bytes: index_known.then(|| index_peak.load(Ordering::Relaxed)),
        stalls,
    })
}

fn progress_bar(cfg: &BenchConfig, kind: EngineKind, phase: &Phase) -> ProgressBar {
    if !cfg.progress {
        return ProgressBar::hidden();
    }
    // Drawn only when stderr is a terminal.
    let bar = ProgressBar::with_draw_target(Some(phase.ops), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix:>24} [{bar:30}] {human_pos}/{human_len} {per_sec:>14} eta {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(format!("{} {}", kind.name(), phase.label));
    bar
}

/// Ops between progress bar updates.
const PROGRESS_STEP: u64 = 512;

fn run_thread(
    shared: &Shared<'_>,
    phase: &Phase,
    phase_no: u64,
    thread: usize,
    threads: usize,
    bar: &ProgressBar,
) -> Result<Tally> {
    let cfg = shared.cfg;
    let engine = shared.engine;
    let mut rng = StdRng::seed_from_u64(
        cfg.seed
            ^ phase_no.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ (thread as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9),
    );
    let mut values = shared.values.fork(rng.gen_range(0..1 << 20));
    let sizes = if phase.mixed_sizes {
        ValueSizes::Mixed
    } else {
        ValueSizes::Fixed(cfg.value_size)
    };
    let mut t = Tally::default();
    let key_size = cfg.key_size;
    let mut put = |t: &mut Tally, rng: &mut StdRng, n: u64| -> Result<()> {
        let k = make_key(n, key_size);
        let len = sizes.next(rng);
        let v = values.next(len);
        engine.put(&k, v)?;
        shared.sizes[n as usize].store(len as u32, Ordering::Relaxed);
        t.written += (k.len() + len) as u64;
        t.value_bytes += len as u64;
        Ok(())
    };
    match &phase.body {
        Body::Load { keys } => {
            let per = keys.len().div_ceil(threads);
            let mine = keys.chunks(per.max(1)).nth(thread).unwrap_or(&[]);
            for (i, &n) in mine.iter().enumerate() {
                let op = Instant::now();
                put(&mut t, &mut rng, n)?;
                t.latency.record(op.elapsed().as_nanos() as u64);
                t.ops += 1;
                if i as u64 % PROGRESS_STEP == PROGRESS_STEP - 1 {
                    bar.inc(PROGRESS_STEP);
                }
            }
            shared
                .key_count
                .fetch_max(keys.iter().max().map_or(0, |m| m + 1), Ordering::Relaxed);
        }
        Body::ReadWhileWriting { chooser } => {
            let mut chooser = chooser.clone();
            if thread == 0 {
                // The writer: not timed, not counted among the ops.
                while shared.readers_left.load(Ordering::Acquire) > 0 {
                    let count = shared.key_count.load(Ordering::Relaxed);
                    let key = chooser.next(count, &mut rng);
                    put(&mut t, &mut rng, key)?;
                }
                return Ok(t);
            }
            let readers = threads as u64 - 1;
            let me = thread as u64 - 1;
            let n = phase.ops / readers + u64::from(me < phase.ops % readers);
            // However the reader ends (an error, a panic), the writer stops.
            struct Done<'a>(&'a std::sync::atomic::AtomicUsize);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    self.0.fetch_sub(1, Ordering::AcqRel);
                }
            }
            let _done = Done(&shared.readers_left);
            for i in 0..n {
                let count = shared.key_count.load(Ordering::Relaxed);
                let k = make_key(chooser.next(count, &mut rng), key_size);
                let op = Instant::now();
                let got = engine.get(&k)?;
                t.latency.record(op.elapsed().as_nanos() as u64);
                if let Some(len) = got {
                    t.found += 1;
                    t.read += (k.len() + len) as u64;
                }
                t.ops += 1;
                if i % PROGRESS_STEP == PROGRESS_STEP - 1 {
                    bar.inc(PROGRESS_STEP);
                }
            }
        }
        Body::ReadAll => {
            let op = Instant::now();
            let (n, bytes) = engine.scan(b"", usize::MAX)?;
            t.latency.record(op.elapsed().as_nanos() as u64);
            t.ops = n;
            t.found = n;
            t.read = bytes;
        }
        Body::Ops {
            mix,
            chooser,
            scan_length,
        } => {
            let mut chooser = chooser.clone();
            let n = phase.ops / threads as u64
                + u64::from((thread as u64) < phase.ops % threads as u64);
            for i in 0..n {
                let kind = mix.pick(rng.gen());
                let count = shared.key_count.load(Ordering::Relaxed);
                let op = Instant::now();
                match kind {
                    Op::Read | Op::ReadModifyWrite => {
                        let key = chooser.next(count, &mut rng);
                        let k = make_key(key, key_size);
                        if let Some(len) = engine.get(&k)? {
                            t.found += 1;
                            t.read += (k.len() + len) as u64;
                        }
                        if kind == Op::ReadModifyWrite {
                            put(&mut t, &mut rng, key)?;
                        }
                    }
                    Op::Update => {
                        let key = chooser.next(count, &mut rng);
                        put(&mut t, &mut rng, key)?;
                    }
                    Op::Insert | Op::Churn => {
                        let key = shared.key_count.fetch_add(1, Ordering::Relaxed);
                        if key as usize >= shared.sizes.len() {
                            return Err("more inserts than the run planned for".into());
                        }
                        if kind == Op::Churn {
                            let slot = rng.gen_range(0..shared.slots.len());
                            let old = shared.slots[slot].swap(key, Ordering::Relaxed);
                            let k = make_key(old, key_size);
                            engine.delete(&k)?;
                            shared.sizes[old as usize].store(0, Ordering::Relaxed);
                            t.written += k.len() as u64;
                        }
                        put(&mut t, &mut rng, key)?;
                    }
                    Op::Scan => {
                        let len = match *scan_length {
                            ScanLength::Fixed(n) => n,
                            ScanLength::Uniform(max) => rng.gen_range(1..=max.max(1)),
                        };
                        let start = make_key(chooser.next(count, &mut rng), key_size);
                        let (pairs, bytes) = engine.scan(&start, len)?;
                        t.found += pairs;
                        t.read += bytes;
                    }
                }
                t.latency.record(op.elapsed().as_nanos() as u64);
                t.ops += 1;
                if i % PROGRESS_STEP == PROGRESS_STEP - 1 {
                    bar.inc(PROGRESS_STEP);
                }
            }
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests;
