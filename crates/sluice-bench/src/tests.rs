//! Tiny runs of every workload against sluicedb, checked through the JSON
//! lines they write.

use super::*;
use sluicedb::Preset;
use std::path::Path;

fn tiny(dir: &Path, engines: &[Preset], workloads: &[Workload]) -> BenchConfig {
    BenchConfig {
        db_path: dir.to_path_buf(),
        engines: engines.iter().map(|&p| EngineKind::Sluice(p)).collect(),
        workloads: workloads.to_vec(),
        num: 1500,
        ops: Some(600),
        update_ops: Some(1500),
        key_size: 16,
        value_size: 200,
        scan_length: 20,
        out: Some(dir.join("results.jsonl")),
        progress: false,
        verbose: false,
        ..Default::default()
    }
}

fn by_phase<'a>(r: &'a [PhaseResult], engine: &str, phase: &str) -> &'a PhaseResult {
    r.iter()
        .find(|p| p.engine == engine && p.phase == phase)
        .unwrap_or_else(|| {
            panic!(
                "no {engine} {phase} in {:?}",
                r.iter().map(|p| &p.phase).collect::<Vec<_>>()
            )
        })
}

#[test]
fn every_workload_runs_tiny_and_its_json_lines_read_back() {
    let dir = tempfile::tempdir().unwrap();
    // With HashKV's fixed capacity (`--capacity`), so that the tiny update
    // phases run its reserve dry and GC runs.
    let mut cfg = tiny(dir.path(), &[Preset::WiscKey], &Workload::ALL);
    cfg.capacity = true;
    let r = run(&cfg).unwrap();
    let back = report::read_jsonl(&dir.path().join("results.jsonl")).unwrap();
    assert_eq!(back, r, "the JSON lines hold every result, unchanged");
    let phases: Vec<&str> = r.iter().map(|p| p.phase.as_str()).collect();
    assert_eq!(
        phases,
        [
            "fillseq",
            "fillrandom",
            "overwrite",
            "readrandom",
            "readseq",
            "seekrandom",
            "scan",
            "update.P0",
            "update.P1",
            "update.P2",
            "update.P3",
            "ycsb-a",
            "ycsb-b",
            "ycsb-c",
            "ycsb-d",
            "ycsb-e",
            "ycsb-f",
            "mixed.load",
            "mixed.update",
            "churn.P0",
            "churn.P1",
            "churn.P2",
            "churn.P3",
            "readwrite.r30",
            "readwrite.r50",
            "readwrite.r70",
            "readwhilewriting",
            "readwhilewriting.closed"
        ]
    );
    // Only the readers' gets count (churn deleted some of the keys they
    // draw from).
    let rww = by_phase(&r, "wisckey", "readwhilewriting");
    assert_eq!(rww.ops, 600);
    assert!(rww.found > 0 && rww.found <= 600, "{} found", rww.found);
    assert!(rww.threads >= 2, "a writer and a reader at least");
    // Reads find what was loaded; readseq sees every key once.
    let rr = by_phase(&r, "wisckey", "readrandom");
    assert_eq!((rr.ops, rr.found), (600, 600));
    assert_eq!(rr.user_bytes_read, 600 * (16 + 200));
    assert_eq!(by_phase(&r, "wisckey", "readseq").found, 1500);
    let scan = by_phase(&r, "wisckey", "scan");
    assert!(
        scan.found > 600 * 10,
        "scans of 20 from uniform starts: {}",
        scan.found
    );
    // YCSB D inserts 5% new keys; E's scans then see them too.
    let d = by_phase(&r, "wisckey", "ycsb-d");
    let inserts = d.user_bytes_written / (16 + 200);
    assert!((10..60).contains(&inserts), "{inserts} inserts of 600 ops");
    assert_eq!(by_phase(&r, "wisckey", "ycsb-c").user_bytes_written, 0);
    // Writing phases have a write amplification on both yardsticks and
    // were settled; reading phases were not.
    for p in ["fillseq", "update.P1", "ycsb-a", "mixed.update"] {
        let x = by_phase(&r, "wisckey", p);
        assert!(x.write_amp.unwrap() >= 1.0, "{p}: {:?}", x.write_amp);
        assert!(x.settle_s.is_some(), "{p}");
        assert!(
            x.latency.p50_us > 0.0 && x.latency.p50_us <= x.latency.p99_us,
            "{p}"
        );
        assert!(x.space_amp.unwrap() > 0.5, "{p}");
        // Measured before the settle too: the memtable still unflushed
        // is in its journal.
        assert!(x.space_amp_before_settle.unwrap() > 0.5, "{p}");
        // Phases over a store already full are sampled from their start.
        if p != "fillseq" {
            let (mean, max) = (x.space_amp_running_mean, x.space_amp_running_max);
            assert!(mean.unwrap() > 0.5 && mean <= max, "{p}: {mean:?} {max:?}");
        }
        if let Some(io) = x.proc_io {
            assert!(io.wchar > 0, "{p}: the process wrote");
        }
    }
    let c = by_phase(&r, "wisckey", "ycsb-c");
    assert!(c.settle_s.is_none() && c.space_amp_before_settle.is_none());
    assert!(c.space_amp_running_mean.is_none() && c.space_amp_running_max.is_none());
    // The mixed phases write values of 16 KiB and 100-512 B, 1:1.
    let m = by_phase(&r, "wisckey", "mixed.load");
    assert!(
        (6000.0..10500.0).contains(&m.value_size),
        "mean {}",
        m.value_size
    );
    // Update phases run the 30% reserve dry: GC runs.
    let gc: Vec<_> = r
        .iter()
        .map(|p| (p.phase.as_str(), p.gc_bytes, p.disk_bytes))
        .collect();
    assert!(
        ["update.P1", "update.P2", "update.P3"]
            .iter()
            .any(|p| by_phase(&r, "wisckey", p).gc_bytes > 0),
        "{gc:?}"
    );
    // Each phase of a sluicedb engine says where writes were held; the
    // time of the phase's operations bounds each reason's.
    for p in ["update.P1", "update.P2", "update.P3"] {
        let x = by_phase(&r, "wisckey", p);
        let st = x
            .stalls
            .unwrap_or_else(|| panic!("{p}: a sluicedb engine reports stalls"));
        for s in [
            st.memtables_s,
            st.level0_s,
            st.value_store_s,
            st.space_limit_s,
        ] {
            assert!((0.0..=x.elapsed_s).contains(&s), "{p}: {st:?}");
        }
    }
    // Churn deletes one key and inserts one per operation: the live data
    // stays what its load left, and each operation writes two keys and a
    // value.
    let loaded = by_phase(&r, "wisckey", "churn.P0").live_bytes;
    for p in ["churn.P1", "churn.P2", "churn.P3"] {
        let x = by_phase(&r, "wisckey", p);
        assert_eq!(x.live_bytes, loaded, "{p}");
        assert_eq!(x.user_bytes_written, 1500 * (16 + 16 + 200), "{p}");
    }
    let closed = by_phase(&r, "wisckey", "readwhilewriting.closed");
    assert!(closed.disk_bytes > 0 && closed.space_amp.is_some());
}

#[test]
fn engines_run_the_same_operations_and_compare_in_one_table() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tiny(
        dir.path(),
        &[Preset::LevelDb, Preset::HashKv],
        &[Workload::Ycsb(Ycsb::A)],
    );
    cfg.threads = 2;
    let r = run(&cfg).unwrap();
    let a = by_phase(&r, "leveldb", "ycsb-a");
    let b = by_phase(&r, "hashkv", "ycsb-a");
    // Same seed, same keys: the same reads find the same keys (the loads
    // precede, so every read finds its key on both).
    assert_eq!((a.ops, a.found), (b.ops, b.found));
    assert_eq!(a.found + a.user_bytes_written / (16 + 200), 600);
    assert_eq!(a.threads, 2);
    let t = report::table(&r);
    assert!(
        t.contains("| ycsb-a | leveldb |") && t.contains("| ycsb-a | hashkv |"),
        "{t}"
    );
    assert!(t.contains("| ycsb-a.closed | hashkv |"), "{t}");
    let cells = |l: &str| l.matches('|').count();
    let header = cells(t.lines().next().unwrap());
    assert!(t.lines().all(|l| cells(l) == header), "{t}");
    // Throughput with settle counts the settle step as part of the phase.
    let settle = a.settle_s.unwrap();
    let with = a.ops as f64 / (a.elapsed_s + settle);
    assert!((a.sustained_ops_per_sec() - with).abs() < 1e-6);
    assert!(a.sustained_ops_per_sec() <= a.ops_per_sec);
    assert!(dir.path().join("leveldb").join("CURRENT").exists());
    assert!(dir.path().join("hashkv").join("CURRENT").exists());
}

#[test]
fn the_report_draws_bars_and_a_cdf() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny(
        dir.path(),
        &[Preset::LevelDb, Preset::WiscKey],
        &[Workload::FillRandom, Workload::ReadRandom],
    );
    run(&cfg).unwrap();
    let r = report::read_jsonl(&dir.path().join("results.jsonl")).unwrap();
    let svg = dir.path().join("report.svg");
    report::write_svg(&r, &svg, None).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"), "{}", &text[..100.min(text.len())]);
    for needle in [
        "throughput",
        "write amplification",
        "space amplification",
        "latency CDF, readrandom",
        "fillrandom",
        "leveldb",
        "wisckey",
    ] {
        assert!(text.contains(needle), "no {needle:?} in the SVG");
    }
    // Bars: one rectangle per engine and phase at least.
    assert!(text.matches("<rect").count() >= 4);
    assert!(report::write_svg(&r, &svg, Some("nope")).is_err());
    // A damaged line is named.
    std::fs::write(dir.path().join("bad.jsonl"), "{\"engine\": 1}\n").unwrap();
    let e = report::read_jsonl(&dir.path().join("bad.jsonl"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad.jsonl:1"), "{e}");
}

#[test]
fn hashkv_without_separation_runs() {
    // The threshold sweep's baseline: the hashkv preset with its
    // separation (and so its separation at flush) turned off.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tiny(dir.path(), &[Preset::HashKv], &[Workload::Update]);
    cfg.num = 500;
    cfg.update_ops = Some(500);
    cfg.value_size = 64;
    cfg.separation_threshold = Some(None);
    let r = run(&cfg).unwrap();
    assert_eq!(r.len(), 5);
    assert!(r.iter().all(|p| p.gc_bytes == 0), "nothing separated");
}

#[test]
fn bad_configurations_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tiny(dir.path(), &[Preset::LevelDb], &[Workload::FillSeq]);
    cfg.key_size = 2;
    assert!(run(&cfg).unwrap_err().to_string().contains("--key-size"));
    cfg.key_size = 16;
    cfg.threads = 0;
    assert!(run(&cfg).is_err());
    if !EngineKind::RocksDb.available() {
        cfg.threads = 1;
        cfg.engines = vec![EngineKind::RocksDb];
        let e = run(&cfg).unwrap_err().to_string();
        assert!(e.contains("--features rocksdb"), "{e}");
    }
}

/// UniKV's Exp. 2 (UniKV, ICDE '20, §IV-B): a load, then three phases of reads and
/// updates in the ratios 30:70, 50:50 and 70:30; each read finds its key
/// (the load came first), so reads and writes split in the stated shares.
#[test]
fn readwrite_runs_three_read_write_ratios_after_a_load() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tiny(dir.path(), &[Preset::UniKv], &[Workload::ReadWrite]);
    cfg.ops = Some(2000);
    let r = run(&cfg).unwrap();
    let load = by_phase(&r, "unikv", "readwrite.load");
    assert_eq!(load.ops, 1500);
    // Exp. 10: the load's settle flushed the memtable into a hash-indexed
    // unsorted table.
    assert!(
        load.index_memory_bytes.is_some_and(|b| b > 0),
        "{:?}",
        load.index_memory_bytes
    );
    if cfg!(target_os = "linux") {
        assert!(load.peak_rss_bytes.is_some_and(|b| b > 1 << 20));
        // The load did work on this thread: the run's CPU time is counted.
        let cpu = load.cpu_s.expect("getrusage on Linux");
        assert!(cpu > 0.0, "{cpu}");
        assert!(load.settle_cpu_s.is_some(), "the load settles");
    }
    let t = report::memory_table(&r);
    assert!(t.contains("| readwrite.load | unikv |"), "{t}");
    for read in workload::READ_WRITE_READ_PERCENTS {
        let p = by_phase(&r, "unikv", &format!("readwrite.r{read}"));
        assert_eq!(p.ops, 2000);
        let writes = p.user_bytes_written / (16 + 200);
        assert_eq!(p.found + writes, 2000, "r{read}: every read finds its key");
        let share = p.found as f64 / 2000.0;
        assert!(
            (share - f64::from(read) / 100.0).abs() < 0.05,
            "r{read}: reads were {share:.3} of the operations"
        );
    }
}

/// The leveled presets' in-memory index is their open tables' index blocks
/// and filters, which reads open.
#[test]
fn leveled_presets_report_their_open_tables_index_memory() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny(
        dir.path(),
        &[Preset::LevelDb],
        &[Workload::FillRandom, Workload::ReadRandom],
    );
    let r = run(&cfg).unwrap();
    let read = by_phase(&r, "leveldb", "readrandom");
    assert!(
        read.index_memory_bytes.is_some_and(|b| b > 0),
        "{:?}",
        read.index_memory_bytes
    );
}

#[test]
fn phase_stalls_are_the_difference_and_name_what_took_time() {
    let before = PhaseStalls {
        memtables_s: 1.0,
        space_limit_s: 2.0,
        relocations: 10,
        ..PhaseStalls::default()
    };
    let after = PhaseStalls {
        memtables_s: 1.5,
        space_limit_s: 4.5,
        gc_commit_s: 0.02,
        relocations: 25,
        ..PhaseStalls::default()
    };
    let d = after.since(&before);
    assert_eq!(d.relocations, 15);
    assert!((d.space_limit_s - 2.5).abs() < 1e-9, "{d:?}");
    let line = PhaseResult {
        phase: "update.P1".into(),
        stalls: Some(d),
        ..PhaseResult::default()
    }
    .db_bench_line();
    assert!(
        line.ends_with(" stalled 3.0s (memtables 0.5 space 2.5)"),
        "{line}"
    );
    let quiet = PhaseResult {
        stalls: Some(PhaseStalls::default()),
        ..PhaseResult::default()
    };
    assert!(!quiet.db_bench_line().contains("stalled"));
}

#[test]
fn the_default_engine_runs_under_its_own_name() {
    assert_eq!(EngineKind::from_name("default"), Some(EngineKind::Default));
    assert!(EngineKind::known_names().contains(&"default"));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tiny(
        dir.path(),
        &[],
        &[Workload::FillRandom, Workload::ReadRandom],
    );
    cfg.engines = vec![EngineKind::Default];
    let r = run(&cfg).unwrap();
    let read = by_phase(&r, "default", "readrandom");
    assert_eq!(read.found, read.ops, "every loaded key found");
    assert!(dir.path().join("default").join("CURRENT").exists());
}

/// `--dataset-gib` sized the Mixed workload by `--value-size`, so that a "1 GiB" Mixed run
/// loaded about 8.2 GiB (its values average 8,345 B, not 992): the matrix of 2026-11-28.
#[test]
fn a_dataset_size_sizes_mixed_by_its_own_values() {
    let gib = (1u64 << 30) as f64;
    let update = keys_for_dataset(gib, 24, 992, &[Workload::Update]).unwrap();
    assert_eq!(update, (gib / 1016.0) as u64);
    let mixed = keys_for_dataset(gib, 24, 992, &[Workload::Mixed]).unwrap();
    assert_eq!(mixed, (gib / (24.0 + ValueSizes::Mixed.mean())) as u64);
    assert!(mixed < update / 8, "{mixed} keys of mixed against {update}");
    // Workloads that only read or update what Mixed loaded take its size.
    assert_eq!(
        keys_for_dataset(gib, 24, 992, &[Workload::Mixed, Workload::ReadRandom]),
        Ok(mixed)
    );
    let e = keys_for_dataset(gib, 24, 992, &[Workload::Update, Workload::Mixed]).unwrap_err();
    assert!(e.contains("mixed") && e.contains("update"), "{e}");
    assert!(keys_for_dataset(0.0, 24, 992, &[Workload::Mixed]).is_err());

    // A run sized so loads about the size asked for (the seed is fixed: no flakiness).
    let dir = tempfile::tempdir().unwrap();
    let bytes = 8.0 * (1 << 20) as f64;
    let mut cfg = tiny(dir.path(), &[Preset::LevelDb], &[Workload::Mixed]);
    cfg.key_size = 24;
    cfg.num = keys_for_dataset(bytes, 24, cfg.value_size, &cfg.workloads).unwrap();
    cfg.update_ops = Some(100);
    let r = run(&cfg).unwrap();
    let loaded = by_phase(&r, "leveldb", "mixed.load").user_bytes_written as f64;
    assert!(
        (loaded / bytes - 1.0).abs() < 0.1,
        "mixed loaded {loaded} bytes for {bytes} asked"
    );
}

#[test]
fn space_while_running_counts_samples_of_a_store_at_least_half_full() {
    let s = SpaceSamples {
        // (directory bytes, live bytes): the first two are a load's start.
        samples: vec![(64, 1), (300, 40), (150, 100), (200, 100), (130, 100)],
    };
    assert_eq!(s.max(100), Some(2.0));
    assert!((s.mean(100).unwrap() - 1.6).abs() < 1e-9);
    assert_eq!(SpaceSamples::default().mean(100), None);
}
