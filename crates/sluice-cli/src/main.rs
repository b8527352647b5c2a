//! The `sluice` command: benchmark and inspect sluicedb databases.

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod allocator;
mod transfer;

use clap::{Parser, Subcommand};
use sluice_bench::{BenchConfig, EngineKind, Workload};
use sluicedb::dump::DumpOptions;
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

/// The keys a command reads: a range, a prefix, or both.
#[derive(clap::Args)]
struct KeyArgs {
    /// First key (inclusive).
    #[arg(long)]
    from: Option<String>,
    /// End key (exclusive).
    #[arg(long)]
    to: Option<String>,
    /// Only keys with this prefix (combines with --from/--to).
    #[arg(long)]
    prefix: Option<String>,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Database directory, created if missing (default: ./sluice-serve-data).
    #[arg(long)]
    db: Option<PathBuf>,
    /// Preset for a new database (default: adaptive); an existing one keeps
    /// its own.
    #[arg(long)]
    preset: Option<String>,
    /// Addresses to listen on, space separated (default 127.0.0.1 only).
    #[arg(long)]
    bind: Option<String>,
    /// TCP port (default 6379, as redis-server).
    #[arg(long)]
    port: Option<u16>,
    /// Every command but AUTH, HELLO and QUIT needs this password first.
    #[arg(long)]
    requirepass: Option<String>,
    /// always: acknowledge only synced writes; everysec: sync once a
    /// second (default); no: leave syncing to the engine. On a replicated
    /// shard it is the Raft log's, and its default is always.
    #[arg(long)]
    appendfsync: Option<String>,
    /// Most clients connected at once (default 10000, as redis-server).
    #[arg(long)]
    maxclients: Option<usize>,
    /// Close clients idle for this many seconds (0: never).
    #[arg(long)]
    timeout: Option<u64>,
    /// Memory the engine's memtables and block cache share, as
    /// redis-server's maxmemory is written (e.g. 256mb; default: the
    /// preset's 64 MiB write buffer and 64 MiB cache). Keys are never
    /// evicted: the data lives on disk.
    #[arg(long, value_name = "BYTES")]
    maxmemory: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g.
    /// 127.0.0.1:9121): per-command latency histograms, connections, and
    /// the engine's statistics.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Where SAVE and BGSAVE write checkpoints of the database (save-N
    /// directories; the newest whole one is kept). Without it they flush
    /// and sync only.
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,
    /// A redis.conf-style file of the same settings (dir, preset, bind,
    /// port, requirepass, appendfsync, maxclients, timeout, maxmemory,
    /// proto-max-bulk-len, client-query-buffer-limit, metrics,
    /// checkpoint-dir).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Serve as node N of a replicated shard (a Raft group); the database
    /// then lives in DIR/db and snapshots in DIR/raft. Ids are never
    /// reused: a node that lost its data joins with a new one.
    #[arg(long, value_name = "N", requires = "raft_addr")]
    raft_id: Option<u64>,
    /// Where this node listens for the group (HOST:PORT).
    #[arg(long, value_name = "HOST:PORT")]
    raft_addr: Option<String>,
    /// A member's raft address to ask for admission (a new node); without
    /// it a node with an empty log starts a new group of itself.
    #[arg(long, value_name = "HOST:PORT", requires = "raft_id")]
    join: Option<String>,
    /// Leader heartbeat interval (ms, default 250); elections wait 4 to 8
    /// times as long without one.
    #[arg(long, value_name = "MS", requires = "raft_id")]
    raft_heartbeat_ms: Option<u64>,
    /// Log entries between snapshots (default 20000).
    #[arg(long, value_name = "N", requires = "raft_id")]
    raft_snapshot_entries: Option<u64>,
    /// Bytes of log after the last snapshot that make a snapshot too
    /// (default 1 GiB); the log keeps as many up to it at most.
    #[arg(long, value_name = "BYTES", requires = "raft_id")]
    raft_snapshot_log_bytes: Option<u64>,
    /// Bytes of log applied after the newest snapshot beyond which a
    /// follower to be sent a snapshot gets a fresh one (default 64 MiB;
    /// 0 never builds one for it).
    #[arg(long, value_name = "BYTES", requires = "raft_id")]
    raft_fresh_snapshot_bytes: Option<u64>,
}

fn serve(a: ServeArgs) -> Result<(), String> {
    let mut c = sluice_server::Config::new("sluice-serve-data");
    if let Some(path) = &a.config {
        c.load_file(path)?;
    }
    let mut set = |name: &str, v: Option<String>| match v {
        Some(v) => c.set(name, &v),
        None => Ok(()),
    };
    set("dir", a.db.map(|p| p.display().to_string()))?;
    set("preset", a.preset)?;
    set("bind", a.bind)?;
    set("port", a.port.map(|p| p.to_string()))?;
    set("requirepass", a.requirepass)?;
    set("appendfsync", a.appendfsync)?;
    set("maxclients", a.maxclients.map(|n| n.to_string()))?;
    set("timeout", a.timeout.map(|n| n.to_string()))?;
    set("maxmemory", a.maxmemory)?;
    set("metrics", a.metrics)?;
    set(
        "checkpoint-dir",
        a.checkpoint_dir.map(|p| p.display().to_string()),
    )?;
    if let (Some(id), Some(addr)) = (a.raft_id, a.raft_addr) {
        let mut r = sluice_server::raft::RaftConfig::new(id, addr);
        r.join = a.join;
        if let Some(ms) = a.raft_heartbeat_ms {
            r.heartbeat_ms = ms.max(1);
            r.election_min_ms = 4 * r.heartbeat_ms;
            r.election_max_ms = 8 * r.heartbeat_ms;
        }
        if let Some(n) = a.raft_snapshot_entries {
            r.snapshot_entries = n.max(1);
        }
        if let Some(n) = a.raft_snapshot_log_bytes {
            r.snapshot_log_bytes = n.max(1);
            r.log_keep_bytes = n.max(1);
        }
        if let Some(n) = a.raft_fresh_snapshot_bytes {
            r.fresh_snapshot_bytes = if n == 0 { u64::MAX } else { n };
        }
        c.raft = Some(r);
    }
    c.handle_signals = true;
    let dir = c.dir.clone();
    let running = sluice_server::start(c)?;
    for addr in running.addrs() {
        eprintln!("sluice serve: {} on {addr}", dir.display());
    }
    if let Some(addr) = running.metrics_addr() {
        eprintln!("sluice serve: metrics on http://{addr}/metrics");
    }
    running.wait()?;
    eprintln!("sluice serve: shut down");
    Ok(())
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// Print the group as the node at ADDR (its Redis address) sees it.
    Status {
        #[arg(long, default_value = "127.0.0.1:6379")]
        addr: String,
    },
    /// Remove member ID from the group, asking the member whose Raft
    /// address is RAFT_ADDR (any member; it forwards to the leader). The
    /// id is never used again; stop the removed node's process after.
    Remove {
        #[arg(long)]
        raft_addr: String,
        id: u64,
    },
}

/// `sluice cluster status`: the node's `INFO replication`, as sent.
fn cluster_status(addr: &str) -> Result<(), String> {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n")
        .map_err(|e| format!("{addr}: {e}"))?;
    let mut r = BufReader::new(s);
    let mut head = String::new();
    r.read_line(&mut head).map_err(|e| format!("{addr}: {e}"))?;
    let len: usize = head
        .trim_end()
        .strip_prefix('$')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("{addr}: unexpected reply {head:?}"))?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)
        .map_err(|e| format!("{addr}: {e}"))?;
    print!("{}", String::from_utf8_lossy(&body).replace("\r\n", "\n"));
    Ok(())
}

#[derive(Subcommand)]
enum Command {
    /// Run workloads on sluicedb presets and peer engines (default: the
    /// update experiment, small, on leveldb, wisckey and hashkv in
    /// ./sluice-data), or `bench report` a results file.
    Bench(Box<BenchArgs>),
    /// Serve a database over the Redis protocol (redis-cli, redis-py,
    /// redis-benchmark...). Settings come from --config (redis.conf style:
    /// `name value` lines), then the flags.
    Serve(Box<ServeArgs>),
    /// Ask a node of a replicated shard how the group stands (its
    /// `INFO replication`): leader, term, log and applied indexes, and
    /// each member's lag; or remove a member.
    Cluster {
        #[command(subcommand)]
        what: ClusterCommand,
    },
    /// Print levels, tables and counters of a database (opens read-only).
    Info {
        /// Database directory.
        #[arg(long)]
        db: PathBuf,
    },
    /// Check every table block and value record against its checksum, and
    /// read every live pair through its pointer (opens read-only).
    Verify {
        /// Database directory.
        #[arg(long)]
        db: PathBuf,
    },
    /// Print the value of a key.
    Get {
        /// Database directory.
        #[arg(long)]
        db: PathBuf,
        key: String,
        /// KEY is hex; the value is printed as hex.
        #[arg(long)]
        hex: bool,
        /// The value's own bytes, also on a terminal (where it is escaped
        /// as `scan` escapes it otherwise).
        #[arg(long, conflicts_with = "hex")]
        raw: bool,
    },
    /// Set a key (synced). The database must exist unless --create.
    Put {
        /// Database directory.
        #[arg(long)]
        db: PathBuf,
        key: String,
        value: String,
        /// KEY and VALUE are hex.
        #[arg(long)]
        hex: bool,
        /// Create the database if it does not exist.
        #[arg(long)]
        create: bool,
        /// With --create: the preset of a new database (adaptive, the
        /// default; leveldb, wisckey, hashkv, scavenger, unikv). An existing
        /// database keeps the preset it was created with.
        #[arg(long, requires = "create")]
        preset: Option<String>,
    },
    /// Delete a key (synced).
    Delete {
        /// Database directory.
        #[arg(long)]
        db: PathBuf,
        key: String,
        /// KEY is hex.
        #[arg(long)]
        hex: bool,
    },
    /// Print keys and values in order, one pair a line, tab-separated.
    Scan {
        /// Database directory.
        #[arg(long)]
        db: PathBuf,
        #[command(flatten)]
        keys: KeyArgs,
        /// At most this many pairs.
        #[arg(long)]
        limit: Option<u64>,
        /// Keys in the arguments are hex; keys and values are printed as
        /// hex. Without it, bytes outside printable ASCII print as \xNN.
        #[arg(long)]
        hex: bool,
    },
    /// Count the keys (of a range or prefix), without reading their values
    /// (opens read-only).
    Count {
        /// Database directory.
        #[arg(long)]
        db: PathBuf,
        #[command(flatten)]
        keys: KeyArgs,
        /// Keys in the arguments are hex.
        #[arg(long)]
        hex: bool,
    },
    /// Write the pairs (of a range or prefix) to FILE or standard output:
    /// the checksummed export format (`docs/format/export.md`), or JSON
    /// lines (opens read-only).
    Export {
        /// Database directory.
        #[arg(long)]
        db: PathBuf,
        /// Where to write; `-` or none: standard output.
        file: Option<PathBuf>,
        /// `binary` (the export format) or `jsonl` (one {"key":…,"value":…}
        /// object a line; key_hex/value_hex for bytes that are not UTF-8).
        #[arg(long, default_value = "binary")]
        format: String,
        #[command(flatten)]
        keys: KeyArgs,
        /// Keys in the arguments are hex.
        #[arg(long)]
        hex: bool,
    },
    /// Put the pairs of an export (either format, found from its first
    /// bytes) from FILE or standard input, then sync. Not atomic: on damage
    /// the pairs before it stay, and running it again rewrites them.
    Import {
        /// Database directory.
        #[arg(long)]
        db: PathBuf,
        /// What to read; `-` or none: standard input.
        file: Option<PathBuf>,
        /// Create the database if it does not exist.
        #[arg(long)]
        create: bool,
        /// With --create: the preset of a new database (default: adaptive).
        #[arg(long, requires = "create")]
        preset: Option<String>,
    },
    /// Print files of a database readably: table entries, journal batches,
    /// manifest edits, value store records. Without FILEs, every file.
    /// Reads the files only (no lock; the database may be open).
    Dump {
        /// Database directory.
        #[arg(long)]
        db: PathBuf,
        /// File names inside the database directory (e.g. 000012.sst).
        files: Vec<String>,
        /// Keys and values as hex.
        #[arg(long)]
        hex: bool,
        /// At most this many lines per file (a journal batch's operations
        /// count too).
        #[arg(long)]
        limit: Option<u64>,
        /// Bytes of each value to print (0: all).
        #[arg(long, default_value_t = 32)]
        max_value_bytes: usize,
    },
    /// Make a consistent copy of a database in the new directory DIR while
    /// it may be written (hard links to immutable files where the file
    /// system allows; `docs/design.md`, "Checkpoints"). DIR opens as a
    /// database of the same preset.
    Checkpoint {
        /// Database directory.
        #[arg(long)]
        db: PathBuf,
        /// The new directory (must not exist).
        dir: PathBuf,
    },
    /// Compact the whole key range.
    Compact {
        /// Database directory.
        #[arg(long)]
        db: PathBuf,
    },
    /// Run one value store GC step and print what it did; --dry-run prints
    /// the value store's size and known garbage without collecting.
    Gc {
        /// Database directory.
        #[arg(long)]
        db: PathBuf,
        #[arg(long)]
        dry_run: bool,
    },
    /// Writes the kill test's history until killed (`tests/kill.rs`,
    /// `scripts/kill-test.sh`): prints the index of every acknowledged
    /// write, synced ones marked.
    #[command(hide = true)]
    KillWriter {
        /// Database directory.
        #[arg(long)]
        db: PathBuf,
        #[arg(long)]
        preset: String,
        /// Round number: the keys' namespace.
        #[arg(long)]
        round: u64,
    },
}

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
struct BenchArgs {
    #[command(subcommand)]
    report: Option<BenchCommand>,
    /// Comma-separated workloads: fillseq, fillrandom, overwrite,
    /// readrandom, readseq, seekrandom, scan, update, ycsb-a .. ycsb-f,
    /// ycsb (all six), mixed, churn, readwrite.
    #[arg(long, alias = "workloads", default_value = "update")]
    benchmarks: String,
    /// Comma-separated engines: sluicedb presets (adaptive, the default;
    /// leveldb, wisckey, hashkv, scavenger, unikv, lightkv),
    /// `default` (sluicedb as
    /// `Options::default()` opens it) and, when built with their features,
    /// rocksdb, rocksdb-blob, fjall, fjall-kv.
    #[arg(
        long,
        alias = "preset",
        default_value = "adaptive,leveldb,wisckey,hashkv"
    )]
    engines: String,
    /// Number of keys loaded.
    #[arg(long, default_value_t = 100_000)]
    num: u64,
    /// Size the dataset to this many GiB of keys and values instead of
    /// --num (by the mean value of mixed, about 8 KiB, when it runs; by
    /// --value-size otherwise).
    #[arg(long)]
    dataset_gib: Option<f64>,
    /// Operations of the read, overwrite, scan and YCSB workloads, and of
    /// each readwrite phase (default: --num).
    #[arg(long, alias = "reads")]
    ops: Option<u64>,
    /// Updates per phase of the update and mixed workloads, and delete +
    /// insert pairs per phase of churn (default: --num).
    #[arg(long)]
    update_ops: Option<u64>,
    /// Value size in bytes.
    #[arg(long, default_value_t = 992)]
    value_size: usize,
    /// Key size in bytes.
    #[arg(long, default_value_t = 24)]
    key_size: usize,
    /// Pairs per scan of the scan workload.
    #[arg(long, default_value_t = 100)]
    scan_length: usize,
    /// Client threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Directory holding one database per engine (each emptied first
    /// unless --use-existing).
    #[arg(long, default_value = "sluice-data")]
    db: PathBuf,
    /// Append one JSON line per phase to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Random seed.
    #[arg(long, default_value_t = 301)]
    seed: u64,
    /// Sync every write.
    #[arg(long)]
    sync: bool,
    /// Keep the databases already in --db (holding keys 0..num).
    #[arg(long)]
    use_existing: bool,
    /// Do not flush and wait for background work after writing phases.
    #[arg(long)]
    no_settle: bool,
    /// No progress bar (it is drawn only on a terminal anyway).
    #[arg(long)]
    quiet: bool,
    /// After each engine, every counter of sluicedb's statistics instead of
    /// a short summary.
    #[arg(long)]
    verbose: bool,
    /// Threads reading values ahead in range scans (0: off; default: the
    /// preset's).
    #[arg(long)]
    scan_prefetch_threads: Option<usize>,
    /// Hash layout GC victim policy: greedy, cba, garbage (the most known
    /// garbage), or gra:D (greedy-random among the D most written groups).
    /// Default: the preset's.
    #[arg(long)]
    hash_gc_policy: Option<String>,
    /// Separate values of at least this many bytes, or `none` (default:
    /// the preset's; peers: 512).
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
    /// Threads beside the background ones that run GC while the space
    /// limit's pressure is on (0: none). Default: the engine's, 1.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=16))]
    gc_pressure_threads: Option<u64>,
    /// Hash layout: under the space limit's pressure, collect each GC step
    /// while the one before is finished, `on` or `off`. Default: on.
    #[arg(long, value_parser = ["on", "off"])]
    gc_overlap: Option<String>,
    /// Hash layout: a group's records are written out in batches of this
    /// many bytes (one write system call each). Default: the preset's.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=(64 << 20)))]
    hash_batch_bytes: Option<u64>,
    /// Key tables with pointer blocks apart from inline values (Scavenger's
    /// GetKey, §3.3), `on` or `off`. Default: the preset's (on for
    /// scavenger).
    #[arg(long, value_parser = ["on", "off"])]
    index_decoupled: Option<String>,
    /// Leveled shape: size of compaction outputs in MiB. Default: the
    /// preset's.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    target_file_size_mib: Option<u64>,
    /// Leveled shape: target size of L1 in MiB. Default: the preset's.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=65536))]
    base_level_mib: Option<u64>,
    /// Leveled shape: L0 tables that start a merge into L1 (writes slow down
    /// at twice as many, stop at three times). Default: the preset's.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1000))]
    l0_trigger: Option<u64>,
    /// Leveled shape: L0 tables from which L0 merges into L1 once user reads
    /// have paid for it (`docs/design.md`, "L0 merged for reads"); at or
    /// above the L0 trigger, never. Default: the preset's (4; the L0
    /// trigger is 8 for adaptive, hashkv and scavenger, 4 for the others).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1000))]
    l0_read_trigger: Option<u64>,
    /// Table layout: GC reads only the live values of a victim (lazy read,
    /// Scavenger (VLDB) §3.2.2), `on` or `off` (read whole victims). Default: on.
    #[arg(long, value_parser = ["on", "off"])]
    lazy_read: Option<String>,
    /// Table layout: GC writes the moved values' new pointers into the
    /// index (`on`, as Titan and BlobDB do) instead of recording
    /// inheritance edges (`off`, TerarkDB; Scavenger (VLDB) §2.2). Default: off.
    #[arg(long, value_parser = ["on", "off"])]
    write_back: Option<String>,
    /// Table layout: GC judges a victim by the garbage counts, with no index
    /// lookup, when the records its counts name add up to them (`on`), or
    /// every record by the DropCache and GetKey lookups (`off`, Scavenger
    /// (VLDB) §3.2.2 and §3.4). Default: on.
    #[arg(long, value_parser = ["on", "off"])]
    judge_by_counts: Option<String>,
    /// LightKV: what a fence of the write buffer (a mapped file) does,
    /// `msync` (durable across a power loss) or `cache` (a memory fence
    /// standing in for real persistent memory; survives a process crash
    /// only, as unsynced journal writes do). Default: msync.
    #[arg(long, value_parser = ["msync", "cache"])]
    pm_fence: Option<String>,
    /// LightKV: partitions (top leaves) before a full leaf links instead of
    /// splitting, the paper's MAX_LEAF_NODES (Fig. 13a). Default: the
    /// preset's.
    #[arg(long)]
    lightkv_max_leaf_nodes: Option<usize>,
    /// LightKV: the compaction size CS, tables of one weight merged at once
    /// (Fig. 13c). Default: the preset's.
    #[arg(long)]
    lightkv_cs: Option<usize>,
    /// Table layout: value tables written, and GC's victims read, around
    /// the page cache (`O_DIRECT`) once the value store outgrows half of
    /// memory, `on` or `off`. Default: the preset's.
    #[arg(long, value_parser = ["on", "off"])]
    direct_io: Option<String>,
    /// Table layout: how GC orders its victims, `cost-benefit` (garbage
    /// ratio weighted by age, LFS) or `greedy` (garbage ratio). Default:
    /// the preset's (cost-benefit).
    #[arg(long, value_parser = ["cost-benefit", "greedy"])]
    victims: Option<String>,
    /// Table layout: DropCache bytes (Scavenger (VLDB) §3.4); 0 turns it and the
    /// hot/cold split off. Default: the preset's.
    #[arg(long)]
    drop_cache_bytes: Option<usize>,
    /// Table layout: the garbage ratio from which a value table is
    /// collected (Scavenger (VLDB) §3.2.2, 0.2). Default: the preset's.
    #[arg(long)]
    table_gc_ratio: Option<f64>,
    /// Bytes the memtables and the block cache share (the cache gives way
    /// to immutable memtables), or `off`. Default: the write buffer plus
    /// the block cache.
    #[arg(long)]
    memory_budget: Option<String>,
    /// The separated presets' space limit (space amplification relative to
    /// live data): `LOW,HIGH` (e.g. `1.2,1.3`), `HIGH` alone (low four
    /// fifths of the way from 1 to high), or `off`. Default: the preset's
    /// (1.4,1.5).
    #[arg(long)]
    space_limit: Option<String>,
    /// Give the separated presets a value store capacity from the workload
    /// (the data plus a 30% reserve, HashKV (USENIX ATC '18) §4.2). Without it they run as
    /// shipped and bound space with their space limit.
    #[arg(long)]
    capacity: bool,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Print the comparison table of a results file and draw it as SVG.
    Report {
        /// JSON lines written by `sluice bench --out`.
        results: PathBuf,
        /// Draw grouped bars (throughput, write and space amplification)
        /// and a latency CDF here.
        #[arg(long)]
        svg: Option<PathBuf>,
        /// Phase whose latency CDF is drawn (default: the last).
        #[arg(long)]
        cdf_phase: Option<String>,
    },
}

/// Parses `--hash-gc-policy`.
/// `--space-limit`: `off`, `HIGH` or `LOW,HIGH`.
fn parse_memory_budget(s: &str) -> Result<usize, String> {
    match s {
        "off" => Ok(usize::MAX),
        n => n
            .parse()
            .map_err(|_| format!("--memory-budget: {n:?} is neither bytes nor `off`")),
    }
}

fn parse_space_limit(s: &str) -> Result<Option<sluicedb::SpaceLimit>, String> {
    if s == "off" {
        return Ok(None);
    }
    let num = |x: &str| {
        x.trim()
            .parse::<f64>()
            .map_err(|_| format!("--space-limit: {x:?} is not a ratio"))
    };
    let (low, high) = match s.split_once(',') {
        Some((l, h)) => (num(l)?, num(h)?),
        None => {
            let l = sluicedb::SpaceLimit::with_high(num(s)?);
            (l.low, l.high)
        }
    };
    if !(low > 1.0 && low <= high) {
        return Err(format!(
            "--space-limit needs 1 < low <= high, not {low},{high}"
        ));
    }
    Ok(Some(sluicedb::SpaceLimit { low, high }))
}

fn parse_policy(s: &str) -> Result<HashGcPolicy, String> {
    match s {
        "greedy" => Ok(HashGcPolicy::Greedy),
        "cba" => Ok(HashGcPolicy::CostBenefit),
        "garbage" => Ok(HashGcPolicy::MostGarbage),
        _ => s
            .strip_prefix("gra:")
            .and_then(|d| d.parse().ok())
            .filter(|&d: &usize| d > 0)
            .map(|d| HashGcPolicy::GreedyRandom { d })
            .ok_or_else(|| {
                format!("unknown GC policy {s:?}; use greedy, cba, garbage or gra:D (D >= 1)")
            }),
    }
}

fn bench(a: BenchArgs) -> Result<(), String> {
    if let Some(BenchCommand::Report {
        results,
        svg,
        cdf_phase,
    }) = a.report
    {
        let r = sluice_bench::report::read_jsonl(&results).map_err(|e| e.to_string())?;
        print!("{}", sluice_bench::report::table(&r));
        print!("\n{}", sluice_bench::report::memory_table(&r));
        if let Some(svg) = svg {
            sluice_bench::report::write_svg(&r, &svg, cdf_phase.as_deref())
                .map_err(|e| e.to_string())?;
            eprintln!("wrote {}", svg.display());
        }
        return Ok(());
    }
    let engines = a
        .engines
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            EngineKind::from_name(s).ok_or_else(|| {
                format!(
                    "unknown engine {s:?}; known: {}",
                    EngineKind::known_names().join(", ")
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let workloads = Workload::parse_list(&a.benchmarks)?;
    let num = match a.dataset_gib {
        Some(g) if g > 0.0 => sluice_bench::keys_for_dataset(
            g * (1u64 << 30) as f64,
            a.key_size,
            a.value_size,
            &workloads,
        )
        .map_err(|e| format!("--dataset-gib: {e}"))?,
        Some(g) => return Err(format!("--dataset-gib must be positive, not {g}")),
        None => a.num,
    };
    let cfg = BenchConfig {
        db_path: a.db,
        engines,
        workloads,
        num,
        ops: a.ops,
        update_ops: a.update_ops,
        key_size: a.key_size,
        value_size: a.value_size,
        scan_length: a.scan_length,
        threads: a.threads,
        seed: a.seed,
        sync: a.sync,
        use_existing: a.use_existing,
        settle: !a.no_settle,
        out: a.out,
        progress: !a.quiet,
        verbose: a.verbose,
        scan_prefetch_threads: a.scan_prefetch_threads,
        hash_gc_policy: a.hash_gc_policy.as_deref().map(parse_policy).transpose()?,
        separate_at_flush: a.separate_at.as_deref().map(|s| s == "flush"),
        hash_hotness: a.hotness.as_deref().map(|s| s == "on"),
        gc_threads: a.gc_threads.map(|n| n as usize),
        gc_pressure_threads: a.gc_pressure_threads.map(|n| n as usize),
        gc_overlap_steps: a.gc_overlap.as_deref().map(|s| s == "on"),
        hash_batch_bytes: a.hash_batch_bytes.map(|n| n as usize),
        index_decoupled_tables: a.index_decoupled.as_deref().map(|s| s == "on"),
        target_file_size_bytes: a.target_file_size_mib.map(|m| m << 20),
        base_level_size_bytes: a.base_level_mib.map(|m| m << 20),
        l0_compaction_trigger: a.l0_trigger.map(|n| n as usize),
        l0_read_compaction_trigger: a.l0_read_trigger.map(|n| n as usize),
        table_gc_lazy_read: a.lazy_read.as_deref().map(|s| s == "on"),
        table_gc_write_back: a.write_back.as_deref().map(|s| s == "on"),
        table_gc_judge_by_counts: a.judge_by_counts.as_deref().map(|s| s == "on"),
        lightkv_fence_cache: a.pm_fence.as_deref().map(|s| s == "cache"),
        lightkv_max_leaf_nodes: a.lightkv_max_leaf_nodes,
        lightkv_compaction_size: a.lightkv_cs,
        table_direct_io: a.direct_io.as_deref().map(|s| s == "on"),
        table_gc_cost_benefit: a.victims.as_deref().map(|s| s == "cost-benefit"),
        drop_cache_bytes: a.drop_cache_bytes,
        table_gc_ratio: a.table_gc_ratio,
        memory_budget: a
            .memory_budget
            .as_deref()
            .map(parse_memory_budget)
            .transpose()?,
        capacity: a.capacity,
        space_limit: a
            .space_limit
            .as_deref()
            .map(parse_space_limit)
            .transpose()?,
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

/// How an operator command opens a database.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    /// `info`, `get`, `scan`, `verify`, `gc --dry-run`: recovery in
    /// memory, nothing on disk changes, no background work
    /// (`Options::read_only`).
    ReadOnly,
    /// `put`, `delete`, `compact`, `gc`.
    Write,
}

/// Opens an existing database with the preset it was created with (as
/// its manifest records it); a missing one is an error, not created.
fn open_existing(db: &Path, access: Access) -> Result<Db, String> {
    check_database(db)?;
    let at = |e: sluicedb::Error| format!("{}: {e}", db.display());
    let preset = Db::recorded_preset(db)
        .map_err(at)?
        .unwrap_or(Preset::LevelDb);
    let opts = Options::preset(preset)
        .create_if_missing(false)
        .read_only(access == Access::ReadOnly);
    Db::open(db, opts).map_err(|e| match e {
        // Most often a running `sluice serve`: its own commands reach the
        // data while it holds the database.
        sluicedb::Error::Locked(_) => format!(
            "{}; if `sluice serve` holds it, ask the server (redis-cli GET, SCAN, INFO) or stop it first",
            at(e)
        ),
        e => at(e),
    })
}

/// `sluice checkpoint`: prints what was linked and copied, and the time.
fn checkpoint(db: &Path, dir: &Path) -> Result<(), String> {
    let d = open_existing(db, Access::Write)?;
    let start = std::time::Instant::now();
    let s = d
        .checkpoint(dir)
        .map_err(|e| format!("checkpoint into {}: {e}", dir.display()))?;
    println!(
        "checkpoint {}: {} files linked, {} copied ({} bytes) in {:.3} s",
        dir.display(),
        s.files_linked,
        s.files_copied,
        s.bytes_copied,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Opens a database for writes; with `create` one that does not exist yet
/// is created with `preset` (default: the default preset). An existing
/// database opens with its own preset, `create` or not.
fn open_for_writes(db: &Path, create: bool, preset: Option<String>) -> Result<Db, String> {
    let preset = match preset {
        Some(name) => Preset::from_name(&name).ok_or_else(|| {
            let names: Vec<&str> = Preset::all().iter().map(|p| p.name()).collect();
            format!(
                "--preset: unknown preset {name:?} (one of {})",
                names.join(", ")
            )
        })?,
        None => Preset::default(),
    };
    if create && !db.join("CURRENT").exists() {
        Db::open(db, Options::preset(preset)).map_err(|e| format!("{}: {e}", db.display()))
    } else {
        open_existing(db, Access::Write)
    }
}

/// `sluice export`.
fn export(
    db: &Path,
    file: Option<PathBuf>,
    format: &str,
    keys: KeyArgs,
    hex: bool,
) -> Result<(), String> {
    let format = transfer::Format::from_name(format)?;
    let (lower, upper) = key_range(keys, hex)?;
    let d = open_existing(db, Access::ReadOnly)?;
    let pairs = d.range::<Vec<u8>>((lower, upper));
    let n = match file.filter(|f| f.as_os_str() != "-") {
        Some(path) => {
            let f = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let mut out = std::io::BufWriter::new(f);
            let n = transfer::export(pairs, format, &mut out)?;
            out.into_inner()
                .map_err(|e| e.to_string())?
                .sync_all()
                .map_err(|e| format!("{}: {e}", path.display()))?;
            n
        }
        None => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            transfer::export(pairs, format, &mut out)?
        }
    };
    eprintln!("exported {n} pairs");
    Ok(())
}

/// `sluice import`.
fn import(
    db: &Path,
    file: Option<PathBuf>,
    create: bool,
    preset: Option<String>,
) -> Result<(), String> {
    let d = open_for_writes(db, create, preset)?;
    let n = match file.filter(|f| f.as_os_str() != "-") {
        Some(path) => {
            let f = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            transfer::import(&mut std::io::BufReader::new(f), &d)
                .map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => transfer::import(&mut std::io::stdin().lock(), &d)?,
    };
    eprintln!("imported {n} pairs");
    Ok(())
}

/// An error unless `db` holds a database: says whether the directory is
/// missing, holds no database, or holds one whose `CURRENT` was lost.
fn check_database(db: &Path) -> Result<(), String> {
    if db.join("CURRENT").exists() {
        return Ok(());
    }
    let entries = match std::fs::read_dir(db) {
        Ok(entries) => entries,
        Err(_) if db.is_file() => {
            return Err(format!(
                "{}: not a database: a file, where a database is a directory",
                db.display()
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "{}: no database here (no such directory)",
                db.display()
            ))
        }
        Err(e) => return Err(format!("{}: cannot read the directory: {e}", db.display())),
    };
    let mut manifests: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("MANIFEST-"))
        .collect();
    manifests.sort();
    match manifests.last() {
        Some(m) => Err(format!(
            "{}: CURRENT is missing, but the directory holds a database ({m}); \
             CURRENT names the live manifest in one line (e.g. \"{m}\\n\"): \
             restore it to open the database",
            db.display()
        )),
        None => Err(format!("{}: no database here", db.display())),
    }
}

/// Bytes for an error message: at most 64 of them, then the length.
fn show_short(b: &[u8], hex: bool) -> String {
    const SHOWN: usize = 64;
    if b.len() <= SHOWN {
        return show(b, hex);
    }
    format!("{}... ({} bytes)", show(&b[..SHOWN], hex), b.len())
}

/// A key or value argument: as given, or decoded from hex.
fn arg_bytes(what: &str, s: &str, hex: bool) -> Result<Vec<u8>, String> {
    if hex {
        ::hex::decode(s).map_err(|e| format!("{what} {s:?} is not hex: {e}"))
    } else {
        Ok(s.as_bytes().to_vec())
    }
}

/// Bytes for printing: hex, or printable ASCII with `\xNN` escapes.
fn show(b: &[u8], hex: bool) -> String {
    sluicedb::dump::escape(b, hex)
}

fn get(db: &Path, key: &str, hex: bool, raw: bool) -> Result<(), String> {
    let k = arg_bytes("key", key, hex)?;
    let d = open_existing(db, Access::ReadOnly)?;
    match d.get(&k).map_err(|e| e.to_string())? {
        Some(v) if hex => println!("{}", ::hex::encode(v)),
        Some(v) => {
            use std::io::{IsTerminal, Write};
            let mut out = std::io::stdout().lock();
            // On a terminal escaped as `scan` shows it; into a pipe or a
            // file the value's own bytes.
            let shown = if out.is_terminal() && !raw {
                show(&v, false).into_bytes()
            } else {
                v
            };
            out.write_all(&shown)
                .and_then(|_| out.write_all(b"\n"))
                .map_err(|e| e.to_string())?;
        }
        None => return Err(format!("key {} not found", show_short(&k, hex))),
    }
    Ok(())
}

/// The smallest key greater than every key starting with `prefix`; `None`
/// when there is none (a prefix of 0xFF bytes only).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last != 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The bounds of `--from`, `--to` and `--prefix`: the prefix narrows the
/// range to exactly its keys, so that a scan seeks to it rather than walk
/// from the first key.
type KeyBounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

fn key_range(keys: KeyArgs, hex: bool) -> Result<KeyBounds, String> {
    let KeyArgs { from, to, prefix } = keys;
    let from = from.map(|s| arg_bytes("--from", &s, hex)).transpose()?;
    let to = to.map(|s| arg_bytes("--to", &s, hex)).transpose()?;
    let prefix = prefix.map(|s| arg_bytes("--prefix", &s, hex)).transpose()?;
    let end = prefix.as_deref().and_then(prefix_end);
    let from = match (from, &prefix) {
        (Some(f), Some(p)) => Some(f.max(p.clone())),
        (f, p) => f.or(p.clone()),
    };
    let to = match (to, end) {
        (Some(t), Some(e)) => Some(t.min(e)),
        (t, e) => t.or(e),
    };
    Ok((
        from.map_or(Bound::Unbounded, Bound::Included),
        to.map_or(Bound::Unbounded, Bound::Excluded),
    ))
}

/// Counts the keys of a range through a cursor, which reads no value.
fn count(db: &Path, keys: KeyArgs, hex: bool) -> Result<(), String> {
    let (lower, upper) = key_range(keys, hex)?;
    let d = open_existing(db, Access::ReadOnly)?;
    let mut it = d.iter_range(&sluicedb::ReadOptions::default(), (lower, upper));
    it.seek_to_first();
    let mut n = 0u64;
    while it.valid() {
        n += 1;
        it.next();
    }
    it.status().map_err(|e| e.to_string())?;
    println!("{n}");
    Ok(())
}

fn scan(db: &Path, keys: KeyArgs, limit: Option<u64>, hex: bool) -> Result<(), String> {
    use std::io::Write;
    let (lower, upper) = key_range(keys, hex)?;
    let d = open_existing(db, Access::ReadOnly)?;
    let mut out = std::io::stdout().lock();
    // The range holds exactly the prefix's keys (`key_range`).
    let limit = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    for pair in d.range::<Vec<u8>>((lower, upper)).take(limit) {
        let (k, v) = pair.map_err(|e| e.to_string())?;
        writeln!(out, "{}\t{}", show(&k, hex), show(&v, hex)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn dump(db: &Path, files: Vec<String>, opts: DumpOptions) -> Result<(), String> {
    check_database(db)?;
    let listed = files.is_empty();
    let names = if listed {
        let mut all: Vec<String> = std::fs::read_dir(db)
            .map_err(|e| format!("{}: {e}", db.display()))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n != "LOCK")
            .collect();
        all.sort();
        all
    } else {
        files
    };
    let mut out = std::io::stdout().lock();
    let mut damaged = Vec::new();
    for name in names {
        use std::io::Write;
        writeln!(out, "== {name}").map_err(|e| e.to_string())?;
        let path = db.join(&name);
        if let Err(e) = sluicedb::dump::dump_file(&path, opts, &mut out) {
            // `dump` takes no lock: a database open elsewhere may delete a
            // journal or a collected file while it is read.
            if listed && !path.exists() {
                writeln!(out, "-- deleted while being read (the database is open)")
                    .map_err(|e| e.to_string())?;
                continue;
            }
            writeln!(out, "!! {e}").map_err(|e| e.to_string())?;
            damaged.push(e.to_string());
        }
    }
    match damaged.len() {
        0 => Ok(()),
        1 => Err(damaged.remove(0)),
        n => Err(format!(
            "{n} files could not be read whole; first: {}",
            damaged[0]
        )),
    }
}

/// `info`: the engine's counters, then the files on disk by kind, the
/// value store's known garbage, and the space amplification that garbage
/// implies (a lower bound: overwritten versions still in the LSM-tree are
/// not counted).
fn info(db: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let d = open_existing(db, Access::ReadOnly)?;
    let s = d.stats();
    print!("{s}");
    println!(
        "(opened read-only: the counters above cover this open alone, and what its recovery wrote stayed in memory; the totals line is the database's life, as its manifest last recorded it)"
    );
    let mut by_kind: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    for e in std::fs::read_dir(db).map_err(|e| format!("{}: {e}", db.display()))? {
        let e = e.map_err(|e| format!("{}: {e}", db.display()))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(m) = e.metadata() else { continue };
        let kind = match name.rsplit_once('.').map(|(_, ext)| ext) {
            Some("sst") => "tables",
            Some("vlog") | Some("vseg") | Some("vst") => "value store",
            Some("hix") => "hash index",
            Some("log") => "journal",
            _ if name.starts_with("MANIFEST") => "manifest",
            _ => "other",
        };
        let k = by_kind.entry(kind).or_default();
        k.0 += 1;
        k.1 += m.blocks() * 512;
    }
    let total: u64 = by_kind.values().map(|k| k.1).sum();
    let kinds: Vec<String> = by_kind
        .iter()
        .map(|(k, (n, b))| format!("{k} {b} in {n}"))
        .collect();
    println!("disk: {total} bytes allocated ({})", kinds.join(", "));
    print_partitions(&s.index.shape.partition_tables);
    if s.values.bytes > 0 {
        // The space amplification itself (the directory over the user's
        // live data) is in the engine's statistics above.
        let garbage = s.values.garbage_bytes.min(total);
        println!(
            "value store garbage: {garbage} of {} bytes ({:.1}%)",
            s.values.bytes,
            100.0 * garbage as f64 / s.values.bytes as f64,
        );
    }
    Ok(())
}

/// The partitioned shape's tables (the lightkv preset), one line per
/// partition: its smallest key (escaped), then its tables newest first as
/// `weight:bytes`, and their sum. A spanning table is on both its lines.
fn print_partitions(parts: &[sluicedb::PartitionTables]) {
    if parts.is_empty() {
        return;
    }
    println!("partitions (smallest key: tables newest first as weight:bytes):");
    for p in parts {
        let key = String::from_utf8_lossy(&p.smallest_key.escape_ascii().collect::<Vec<u8>>())
            .into_owned();
        let tables: Vec<String> = p.tables.iter().map(|(w, b)| format!("{w}:{b}")).collect();
        let bytes: u64 = p.tables.iter().map(|(_, b)| b).sum();
        println!(
            "  \"{key}\": {} tables, {bytes} bytes [{}]",
            p.tables.len(),
            tables.join(" ")
        );
    }
}

fn gc(db: &Path, dry_run: bool) -> Result<(), String> {
    let access = if dry_run {
        Access::ReadOnly
    } else {
        Access::Write
    };
    let d = open_existing(db, access)?;
    let s = d.stats();
    if s.values.files == 0 {
        println!("no value store: nothing to collect");
        return Ok(());
    }
    println!(
        "value store: {} files, {} bytes, {} bytes known garbage",
        s.values.files, s.values.bytes, s.values.garbage_bytes
    );
    if dry_run {
        return Ok(());
    }
    let g = d.gc().map_err(|e| e.to_string())?;
    println!(
        "gc: read {} bytes, {} records, {} live copied, {} relocations applied, {} dropped",
        g.bytes_read, g.records, g.live_records, g.relocations_applied, g.relocations_dropped
    );
    let after = d.stats();
    println!(
        "value store: {} files, {} bytes",
        after.values.files, after.values.bytes
    );
    Ok(())
}

/// The kill test's writer: `sluice_bench::kill::op` says what write `i`
/// of a round does; every tenth is synced. Runs until killed.
fn kill_writer(db: &Path, preset: &str, round: u64) -> Result<(), String> {
    use std::io::Write;
    let preset = Preset::from_name(preset).ok_or_else(|| format!("unknown preset {preset:?}"))?;
    let d = Db::open(db, sluice_bench::kill::options(preset)).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    for i in 0.. {
        let sync = sluice_bench::kill::synced(i);
        d.write_opt(
            &sluicedb::WriteOptions { sync },
            sluice_bench::kill::op(round, i).batch(),
        )
        .map_err(|e| e.to_string())?;
        writeln!(out, "{i}{}", if sync { " s" } else { "" })
            .and_then(|_| out.flush())
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn main() -> ExitCode {
    allocator::bound_retention();
    let cli = Cli::parse();
    // Bare `sluice` shows what it can do rather than start a benchmark
    // that writes a hundred megabytes into the working directory.
    let Some(command) = cli.command else {
        let mut help = <Cli as clap::CommandFactory>::command();
        return match help.print_help() {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
    };
    let r = match command {
        Command::Bench(a) => bench(*a),
        Command::Serve(a) => serve(*a),
        Command::Cluster {
            what: ClusterCommand::Status { addr },
        } => cluster_status(&addr),
        Command::Cluster {
            what: ClusterCommand::Remove { raft_addr, id },
        } => sluice_server::raft::remove_member(&raft_addr, id).map(|()| {
            println!("node {id} removed");
        }),
        Command::Info { db } => info(&db),
        Command::Verify { db } => open_existing(&db, Access::ReadOnly).and_then(|d| {
            let n = d.verify().map_err(|e| e.to_string())?;
            println!("ok: {n} table entries, value records and pairs checked");
            // Not damage: reported, not failed (see `Db::check_space`).
            let m = d.check_space().map_err(|e| e.to_string())?;
            if m.is_empty() {
                println!("space accounting: exact");
            } else {
                println!(
                    "space accounting: {} value files differ from a recount:",
                    m.len()
                );
                for x in m {
                    println!(
                        "  file {}: {} bytes, {} referenced, {} counted as garbage",
                        x.file, x.bytes, x.referenced, x.garbage
                    );
                }
            }
            Ok(())
        }),
        Command::Get { db, key, hex, raw } => get(&db, &key, hex, raw),
        Command::Put {
            db,
            key,
            value,
            hex,
            create,
            preset,
        } => (|| {
            let k = arg_bytes("key", &key, hex)?;
            let v = arg_bytes("value", &value, hex)?;
            let d = open_for_writes(&db, create, preset)?;
            d.put_opt(&sluicedb::WriteOptions::synced(), k, v)
                .map_err(|e| e.to_string())
        })(),
        Command::Delete { db, key, hex } => arg_bytes("key", &key, hex).and_then(|k| {
            open_existing(&db, Access::Write)?
                .delete_opt(&sluicedb::WriteOptions::synced(), k)
                .map_err(|e| e.to_string())
        }),
        Command::Scan {
            db,
            keys,
            limit,
            hex,
        } => scan(&db, keys, limit, hex),
        Command::Export {
            db,
            file,
            format,
            keys,
            hex,
        } => export(&db, file, &format, keys, hex),
        Command::Import {
            db,
            file,
            create,
            preset,
        } => import(&db, file, create, preset),
        Command::Count { db, keys, hex } => count(&db, keys, hex),
        Command::Checkpoint { db, dir } => checkpoint(&db, &dir),
        Command::Compact { db } => open_existing(&db, Access::Write)
            .and_then(|d| d.compact_range(None, None).map_err(|e| e.to_string())),
        Command::Gc { db, dry_run } => gc(&db, dry_run),
        Command::KillWriter { db, preset, round } => kill_writer(&db, &preset, round),
        Command::Dump {
            db,
            files,
            hex,
            limit,
            max_value_bytes,
        } => dump(
            &db,
            files,
            DumpOptions {
                hex,
                limit,
                max_value_bytes,
            },
        ),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e}");
            ExitCode::FAILURE
        }
    }
}
