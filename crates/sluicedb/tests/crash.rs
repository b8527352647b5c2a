//! Crash test: every mutating file operation of several workloads is a crash
//! point. For each, the file system as a crash would leave it (unsynced bytes
//! dropped or torn, unsynced directory entries lost) must recover to a prefix
//! of the write history that includes every write acknowledged with `sync`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use sluicedb::fs::MemFs;
use sluicedb::{Db, IndexShapeKind, JournalMode, Preset, ValueLayout, WriteOptions};

/// A write as the workload saw it, with the file-operation counter before it
/// started and after it was acknowledged.
struct Logged {
    write: Write,
    issued_at: u64,
    acked_at: u64,
    /// A kill at this operation lost the write (unsynced, and not all of
    /// it had left the process): history from then on goes without it.
    dropped_at: Option<u64>,
}

/// The writes of history as a crash after operation `op` sees it.
fn history_at(log: &[Logged], op: u64) -> Vec<&Logged> {
    log.iter()
        .filter(|l| l.dropped_at.is_none_or(|k| k > op))
        .collect()
}

#[derive(Clone, Copy, Debug)]
enum Workload {
    /// Single puts, some synced; memtable rotations, flushes, compactions.
    Puts,
    /// Batches with deletes, explicit flushes and manual compactions.
    BatchesFlushCompact,
    /// Every write synced; a tiny manifest rolls often.
    SyncedManifestRoll,
    /// Reopens in the middle, so recovery itself is crashed.
    Reopens,
    /// The writer killed in the middle (its unsynced appends stay in the
    /// page cache) and reopened on what it left, over the hash layout or
    /// the value log, by seed: recovery builds on bytes nobody synced, and
    /// is crashed at every step (it must sync them before its manifest
    /// names tables pointing into them).
    Kills,
    /// Overwrites with value separation and GC steps, so GC is crashed at
    /// every step (copies, relocation commit, tail edit, file deletion);
    /// values separated when written or when flushed, by seed.
    Gc,
    /// The same with the value log as the journal (WiscKey, FAST '16, §3.4.2).
    GcValueLog,
    /// GC of the hash layout's segment groups (HashKV, USENIX ATC '18, §3.3): new heads,
    /// copies, relocations and retired files at every crash point.
    GcHash,
    /// The hash layout with the cold log under inserts of new keys and
    /// deletes of old ones: group files of first versions are handed to
    /// the cold log whole, and the cold log's GC collects them, at every
    /// crash point.
    GcHashChurn,
    /// Value tables written at flush and collected by lazy-read GC with
    /// inheritance edges (Scavenger, VLDB, §3.2), or with pointer write-back by
    /// variant: every crash point of table writes, GC outputs, edge and
    /// pruning edits, relocation commits and retired tables.
    GcTable,
    /// The unified shape (UniKV, ICDE '20, §III): flushes indexed by the
    /// hash index, merges into the sorted run that separate values into
    /// the value log, manual compactions and log GC at every crash point.
    Unified,
    /// A preset as a user opens it (at tiny sizes, `preset_options`):
    /// values of 0-300 bytes around every preset's threshold, GC steps and
    /// full compactions, so each preset's own mix of journal, flush,
    /// compaction, GC and merges is crashed at every operation.
    Preset(Preset),
}

/// The options a workload runs (and recovers) with.
fn workload_options(w: Workload, fs: &MemFs, variant: u64) -> sluicedb::Options {
    if let Workload::Preset(p) = w {
        return preset_options(fs, p);
    }
    let opts = tiny_options(fs, variant);
    // The GC workloads choose their layout; `tiny_options`' unified variant
    // (which needs the log layout) applies to the others.
    let opts = match w {
        Workload::Gc
        | Workload::GcValueLog
        | Workload::GcHash
        | Workload::GcHashChurn
        | Workload::GcTable => opts.index_shape(IndexShapeKind::Leveled),
        _ => opts,
    };
    match w {
        Workload::SyncedManifestRoll => opts.max_manifest_bytes(512),
        // Separation at write time or at flush (the write cache), and the
        // cold log on or off, by seed. One root group of 1 KiB main
        // segments: elastic splits at most GC steps.
        Workload::GcHash => opts
            .hash_groups(1)
            .hash_main_segment_bytes(1024)
            .hash_log_segment_bytes(1024)
            .separation_threshold_bytes(Some(0))
            .value_layout(ValueLayout::Hash)
            .journal_mode(JournalMode::Journal)
            .separate_at_flush(variant.is_multiple_of(2))
            .hash_hotness((variant / 2).is_multiple_of(2)),
        Workload::GcHashChurn => opts
            .hash_groups(1)
            .hash_main_segment_bytes(1024)
            .hash_log_segment_bytes(1024)
            .separation_threshold_bytes(Some(0))
            .value_layout(ValueLayout::Hash)
            .journal_mode(JournalMode::Journal)
            .separate_at_flush(true)
            .hash_hotness(true),
        Workload::GcTable => opts
            .separation_threshold_bytes(Some(0))
            .value_layout(ValueLayout::Table)
            .journal_mode(JournalMode::Journal)
            .separate_at_flush(true)
            .value_table_bytes(4096)
            .table_gc_ratio(0.1)
            .drop_cache_bytes(if variant.is_multiple_of(2) { 4096 } else { 0 })
            .table_gc_write_back(!(variant / 2).is_multiple_of(2)),
        Workload::Gc => opts
            .separation_threshold_bytes(Some(0))
            .value_layout(ValueLayout::Log)
            .journal_mode(JournalMode::Journal)
            .separate_at_flush(variant.is_multiple_of(2))
            .value_log_file_size_bytes(4096)
            .gc_chunk_bytes(1500),
        // Every value separated or only the larger ones, by seed; a tiny
        // unsorted limit, partition size and hash index, so merges, splits
        // and overflow chains are constant.
        // Value tables collected by merges (the preset's) or the log, by
        // seed.
        Workload::Unified => opts
            .index_shape(IndexShapeKind::Unified)
            .unikv_unsorted_limit_bytes(8192)
            .unikv_partition_size_limit_bytes(16 * 1024)
            .unikv_hash_buckets(16)
            .separation_threshold_bytes(Some(if variant.is_multiple_of(2) { 0 } else { 40 }))
            .value_layout(if (variant / 2).is_multiple_of(2) {
                ValueLayout::Table
            } else {
                ValueLayout::Log
            })
            .journal_mode(JournalMode::Journal)
            .separate_at_flush(false)
            .value_log_file_size_bytes(4096)
            .value_table_bytes(4096)
            .table_gc_ratio(0.1)
            .gc_chunk_bytes(1500),
        // Hash layout, log with the engine journal, log as journal.
        Workload::Kills => opts
            .separation_threshold_bytes(Some(0))
            .value_layout(if variant.is_multiple_of(3) {
                ValueLayout::Hash
            } else {
                ValueLayout::Log
            })
            .journal_mode(if variant % 3 == 2 {
                JournalMode::ValueLog
            } else {
                JournalMode::Journal
            })
            .separate_at_flush(false)
            .hash_groups(2)
            .value_log_file_size_bytes(4096),
        Workload::GcValueLog => opts
            .separation_threshold_bytes(Some(0))
            .value_layout(ValueLayout::Log)
            .journal_mode(JournalMode::ValueLog)
            .separate_at_flush(false)
            .value_log_file_size_bytes(4096)
            .gc_chunk_bytes(1500),
        _ => opts,
    }
}

/// Runs the workload on `fs`, which a kill replaces with what the killed
/// process left.
fn run_workload(w: Workload, seed: u64, fs: &mut MemFs, variant: u64) -> Vec<Logged> {
    let mut rng = Rng::new(seed);
    let opts = workload_options(w, fs, variant);
    let mut db = Db::open("/db", opts.clone()).unwrap();
    let mut log = Vec::new();
    let mut serial = 0;
    let n = match w {
        Workload::SyncedManifestRoll => 150,
        _ => 300,
    };
    for i in 0..n {
        let mut ops = Vec::new();
        let count = match w {
            Workload::BatchesFlushCompact => 1 + rng.below(4),
            _ => 1,
        };
        for _ in 0..count {
            serial += 1;
            let gc = matches!(
                w,
                Workload::Gc
                    | Workload::GcValueLog
                    | Workload::GcHash
                    | Workload::GcTable
                    | Workload::Unified
            );
            if matches!(w, Workload::GcHashChurn) {
                // A new key, or a delete of one inserted before.
                let (k, v) = if rng.chance(30) {
                    (format!("c{:05}", rng.below(serial)), None)
                } else {
                    (format!("c{serial:05}"), Some(value(&mut rng, serial, 90)))
                };
                ops.push((k.into_bytes(), v));
                continue;
            }
            if let Workload::Preset(_) = w {
                let k = key(&mut rng, 40);
                let v = (!rng.chance(15)).then(|| value(&mut rng, serial, 300));
                ops.push((k, v));
                continue;
            }
            let k = key(&mut rng, if gc { 30 } else { 150 });
            let v = (!rng.chance(20)).then(|| value(&mut rng, serial, 90));
            ops.push((k, v));
        }
        let sync = match w {
            Workload::SyncedManifestRoll => true,
            _ => rng.chance(10),
        };
        let write = Write { ops, sync };
        let issued_at = fs.op_count();
        db.write_opt(&WriteOptions { sync }, write.batch()).unwrap();
        let acked_at = fs.op_count();
        log.push(Logged {
            write,
            issued_at,
            acked_at,
            dropped_at: None,
        });
        match w {
            Workload::BatchesFlushCompact if i % 60 == 59 => db.flush().unwrap(),
            Workload::BatchesFlushCompact if i % 100 == 99 => db.compact_range(None, None).unwrap(),
            Workload::Reopens if i % 100 == 99 => {
                drop(db);
                db = Db::open("/db", opts.clone()).unwrap();
            }
            Workload::Kills if i % 60 == 59 => {
                let killed = fs.kill_image();
                let kill_op = killed.op_count();
                drop(db); // closes the old file system, now left behind
                *fs = killed;
                db = Db::open("/db", workload_options(w, fs, variant)).unwrap();
                // What the kill lost: the writes after the prefix recovered.
                let got = read_all(&db).unwrap();
                let live: Vec<usize> = (0..log.len())
                    .filter(|&j| log[j].dropped_at.is_none())
                    .collect();
                let writes: Vec<Write> = live.iter().map(|&j| log[j].write.clone()).collect();
                let synced = writes.iter().rposition(|w| w.sync).map_or(0, |j| j + 1);
                let n = matching_prefix(&writes, synced, writes.len(), &got).unwrap_or_else(|| {
                    panic!("seed {seed}: after the kill at write {i}: not a prefix")
                });
                for &j in &live[n..] {
                    log[j].dropped_at = Some(kill_op);
                }
            }
            Workload::Gc
            | Workload::GcValueLog
            | Workload::GcHash
            | Workload::GcHashChurn
            | Workload::GcTable
                if i % 25 == 24 =>
            {
                db.gc().unwrap();
            }
            Workload::Unified | Workload::Preset(_) if i % 100 == 99 => {
                db.compact_range(None, None).unwrap()
            }
            Workload::Preset(_) if i % 25 == 24 => {
                db.gc().unwrap();
            }
            Workload::Unified if i % 25 == 24 => {
                db.gc().unwrap();
            }
            _ => {}
        }
    }
    db.wait_for_background().unwrap();
    if matches!(w, Workload::GcHash) {
        let groups = db.stats().values.hash.groups;
        assert!(groups > 1, "seed {seed}: {groups} hash group, no split ran");
    }
    if matches!(w, Workload::GcHashChurn) {
        let s = db.stats();
        assert!(
            s.values.hash.cold_handed_bytes > 0 && s.values.hash.cold_gc_runs > 0,
            "seed {seed}: no file handed to the cold log, or no cold log GC\n{s}"
        );
    }
    if matches!(w, Workload::GcTable) {
        // Whether a step kept records (and made edges) depends on timing;
        // the model and GC suites check edges.
        let runs = db.stats().gc.runs;
        assert!(runs > 0, "seed {seed}: table GC never ran");
    }
    if matches!(w, Workload::Unified) {
        let s = db.stats();
        assert!(s.compaction.compactions > 0, "seed {seed}: no merge ran");
        assert!(
            s.index.levels[1].tables > 0,
            "seed {seed}: empty sorted run"
        );
        if s.values.table.tables > 0 {
            // Value tables: merges moved records out of some (GC, §III-C).
            assert!(
                s.gc.relocations_applied > 0,
                "seed {seed}: no merge collected\n{s}"
            );
        }
    }
    drop(db);
    log
}

fn check_image(log: &[Logged], op: u64, image: &MemFs, w: Workload, variant: u64, deep: bool) {
    let log = history_at(log, op);
    let writes: Vec<Write> = log.iter().map(|l| l.write.clone()).collect();
    // An image is taken after operation `op`. A synced write acknowledged
    // at `op` did its sync there, except one that touches no file
    // (lightkv's, into its write buffer region): it came after the image.
    let pm = matches!(w, Workload::Preset(Preset::LightKv));
    let lo = log
        .iter()
        .rposition(|l| l.write.sync && (l.acked_at < op || (!pm && l.acked_at == op)))
        .map_or(0, |i| i + 1);
    let hi = log.iter().filter(|l| l.issued_at < op).count();
    let db = Db::open("/db", workload_options(w, image, variant))
        .unwrap_or_else(|e| panic!("crash after op {op}: reopen failed: {e}"));
    let got = read_all(&db).unwrap_or_else(|e| panic!("crash after op {op}: scan: {e}"));
    // Recovery cut or removed whatever the crash tore: every file checks.
    db.verify().unwrap_or_else(|e| {
        panic!("crash after op {op} ({w:?} {variant}): verify after recovery: {e}")
    });
    let n = matching_prefix(&writes, lo, hi.max(lo), &got).unwrap_or_else(|| {
        // Which keys keep each candidate prefix from matching.
        for m in lo..=hi.max(lo) {
            let want = state_after(&writes, m);
            let wrong = want.iter().filter(|(k, v)| got.get(*k) != Some(v));
            let extra = got.keys().filter(|k| !want.contains_key(*k));
            let keys: Vec<String> = (wrong.map(|(k, _)| k).chain(extra))
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect();
            eprintln!("  against prefix {m}: {} keys differ, {:?}", keys.len(), &keys[..keys.len().min(6)]);
        }
        panic!("crash after op {op} ({w:?} {variant}): state is not a prefix of history in {lo}..={hi}")
    });
    if deep {
        // The recovered database works: write, reopen, still there.
        db.put_opt(&WriteOptions::synced(), "after-crash", "ok")
            .unwrap();
        drop(db);
        let db = Db::open("/db", workload_options(w, image, variant)).unwrap();
        assert_eq!(db.get("after-crash").unwrap(), Some(b"ok".to_vec()));
        let mut want = state_after(&writes, n);
        want.insert(b"after-crash".to_vec(), b"ok".to_vec());
        assert_eq!(read_all(&db).unwrap(), want, "crash after op {op}");
    }
}

#[test]
fn crash_after_every_file_operation() {
    let total = AtomicUsize::new(0);
    let workloads = [
        Workload::Puts,
        Workload::BatchesFlushCompact,
        Workload::SyncedManifestRoll,
        Workload::Reopens,
        Workload::Kills,
        Workload::Gc,
        Workload::GcValueLog,
        Workload::GcHash,
        Workload::GcHashChurn,
        Workload::GcTable,
        Workload::Unified,
        Workload::Preset(Preset::Adaptive),
        Workload::Preset(Preset::LevelDb),
        Workload::Preset(Preset::WiscKey),
        Workload::Preset(Preset::HashKv),
        Workload::Preset(Preset::Scavenger),
        Workload::Preset(Preset::UniKv),
        Workload::Preset(Preset::LightKv),
    ];
    for_seeds(seeds(100, 5), |seed| {
        for (i, &w) in workloads.iter().enumerate() {
            let variant = seed + i as u64;
            let mut fs = MemFs::new();
            let torn = (seed + i as u64).is_multiple_of(2);
            fs.capture_images(torn);
            let log = run_workload(w, seed * 10 + i as u64, &mut fs, variant);
            let images = fs.take_images();
            let what = format!("workload {w:?} seed {seed} torn {torn}");
            check_images_on_two_threads(&images, &what, |j, op, image| {
                check_image(&log, op, image, w, variant, j.is_multiple_of(16))
            });
            eprintln!(
                "workload {w:?} seed {seed} torn {torn}: {} crash states",
                images.len()
            );
            total.fetch_add(images.len(), Ordering::Relaxed);
        }
    });
    let total = total.into_inner();
    println!("crash states checked: {total}");
    if std::env::var("SLUICE_SEED").is_err() {
        assert!(total >= 50_000, "only {total} crash states were checked");
    }
}
