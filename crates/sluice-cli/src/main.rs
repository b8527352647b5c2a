//! The `sluice` command: benchmark and inspect sluicedb databases.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sluice_bench::{BenchConfig, Workload};
use sluicedb::{Db, HashGcPolicy, Options, Preset};

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Benchmark and operate sluicedb databases"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run db_bench-style workloads (default: a short fill/read experiment
    /// in ./sluice-data).
    Bench(BenchArgs),
    /// Print levels, tables and counters of a database.
    Info {
        #[arg(long)]
        db: PathBuf,
    },
    /// Read every table block and check every checksum.
    Verify {
        #[arg(long)]
        db: PathBuf,
    },
    /// Print the value of a key.
    Get {
        #[arg(long)]
        db: PathBuf,
        key: String,
    },
    /// Set a key (synced).
    Put {
        #[arg(long)]
        db: PathBuf,
        key: String,
        value: String,
    },
    /// Compact the whole key range.
    Compact {
        #[arg(long)]
        db: PathBuf,
    },
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Comma-separated workloads: fillseq, fillrandom, overwrite,
    /// readrandom, readseq, seekrandom.
    #[arg(
        long,
        default_value = "fillrandom,readrandom,overwrite,readseq,seekrandom"
    )]
    benchmarks: String,
    /// Number of keys.
    #[arg(long, default_value_t = 100_000)]
    num: u64,
    /// Operations of read workloads (default: --num).
    #[arg(long)]
    reads: Option<u64>,
    /// Updates per phase of the update workload (default: --num).
    #[arg(long)]
    update_ops: Option<u64>,
    /// Value size in bytes.
    #[arg(long, default_value_t = 1000)]
    value_size: usize,
    /// Key size in bytes.
    #[arg(long, default_value_t = 16)]
    key_size: usize,
    /// Engine preset.
    #[arg(long, default_value = "leveldb")]
    preset: String,
    /// Database directory (emptied first unless --use-existing).
    #[arg(long, default_value = "sluice-data")]
    db: PathBuf,
    /// Random seed.
    #[arg(long, default_value_t = 301)]
    seed: u64,
    /// Sync every write.
    #[arg(long)]
    sync: bool,
    /// Keep the database already in --db.
    #[arg(long)]
    use_existing: bool,
    /// Do not flush and wait for compactions after write workloads.
    #[arg(long)]
    no_settle: bool,
    /// Threads reading values ahead in range scans (0: off; default: the
    /// preset's).
    #[arg(long)]
    scan_prefetch_threads: Option<usize>,
    /// Hash layout GC victim policy: greedy, cba, or gra:D (greedy-random
    /// among the D most written groups). Default: the preset's.
    #[arg(long)]
    hash_gc_policy: Option<String>,
    /// Separate values of at least this many bytes, or `none` (default:
    /// the preset's).
    #[arg(long)]
    separation_threshold: Option<String>,
    /// When values are separated: `write` (into the value store as they
    /// are written) or `flush` (when the memtable is flushed, HashKV's
    /// write cache). Default: the preset's.
    #[arg(long, value_parser = ["write", "flush"])]
    separate_at: Option<String>,
    /// Hash layout: move cold values to a cold log at GC (HashKV's hotness
    /// awareness), `on` or `off`. Default: the preset's.
    #[arg(long, value_parser = ["on", "off"])]
    hotness: Option<String>,
    /// Hash layout: threads a GC step reads its files and looks up its
    /// keys with. Default: the preset's.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=64))]
    gc_threads: Option<u64>,
}

/// Parses `--hash-gc-policy`.
fn parse_policy(s: &str) -> Result<HashGcPolicy, String> {
    match s {
        "greedy" => Ok(HashGcPolicy::Greedy),
        "cba" => Ok(HashGcPolicy::CostBenefit),
        _ => s
            .strip_prefix("gra:")
            .and_then(|d| d.parse().ok())
            .filter(|&d: &usize| d > 0)
            .map(|d| HashGcPolicy::GreedyRandom { d })
            .ok_or_else(|| format!("unknown GC policy {s:?}; use greedy, cba or gra:D (D >= 1)")),
    }
}

fn bench(a: BenchArgs) -> Result<(), String> {
    let preset = Preset::from_name(&a.preset).ok_or_else(|| {
        let names: Vec<_> = Preset::all().iter().map(|p| p.name()).collect();
        format!("unknown preset {:?}; known: {}", a.preset, names.join(", "))
    })?;
    let workloads = a
        .benchmarks
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| Workload::from_name(s.trim()).ok_or_else(|| format!("unknown workload {s:?}")))
        .collect::<Result<Vec<_>, _>>()?;
    if a.num == 0 || a.key_size == 0 {
        return Err("--num and --key-size must be positive".into());
    }
    let cfg = BenchConfig {
        db_path: a.db,
        preset,
        workloads,
        num: a.num,
        reads: a.reads,
        update_ops: a.update_ops,
        key_size: a.key_size.max(a.num.to_string().len()),
        value_size: a.value_size,
        seed: a.seed,
        sync: a.sync,
        use_existing: a.use_existing,
        settle: !a.no_settle,
        scan_prefetch_threads: a.scan_prefetch_threads,
        hash_gc_policy: a.hash_gc_policy.as_deref().map(parse_policy).transpose()?,
        separate_at_flush: a.separate_at.as_deref().map(|s| s == "flush"),
        hash_hotness: a.hotness.as_deref().map(|s| s == "on"),
        gc_threads: a.gc_threads.map(|n| n as usize),
        separation_threshold: a
            .separation_threshold
            .as_deref()
            .map(|s| match s {
                "none" => Ok(None),
                n => n
                    .parse()
                    .map(Some)
                    .map_err(|_| format!("--separation-threshold takes bytes or none, not {n:?}")),
            })
            .transpose()?,
    };
    sluice_bench::run(&cfg)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn open_existing(db: &PathBuf) -> Result<Db, String> {
    Db::open(db, Options::default().create_if_missing(false)).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command =
        cli.command
            .unwrap_or_else(|| match Cli::parse_from(["sluice", "bench"]).command {
                Some(c) => c,
                None => unreachable!("bench parses"),
            });
    let r = match command {
        Command::Bench(a) => bench(a),
        Command::Info { db } => open_existing(&db).map(|d| print!("{}", d.stats())),
        Command::Verify { db } => open_existing(&db).and_then(|d| {
            d.verify()
                .map(|n| println!("ok: {n} entries checked"))
                .map_err(|e| e.to_string())
        }),
        Command::Get { db, key } => open_existing(&db).and_then(|d| match d.get(&key) {
            Ok(Some(v)) => {
                println!("{}", String::from_utf8_lossy(&v));
                Ok(())
            }
            Ok(None) => Err(format!("{key}: not found")),
            Err(e) => Err(e.to_string()),
        }),
        Command::Put { db, key, value } => Db::open(&db, Options::default())
            .and_then(|d| d.put_opt(&sluicedb::WriteOptions::synced(), key, value))
            .map_err(|e| e.to_string()),
        Command::Compact { db } => {
            open_existing(&db).and_then(|d| d.compact_range(None, None).map_err(|e| e.to_string()))
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e}");
            ExitCode::FAILURE
        }
    }
}
