//! I/O-error test (SQLite's I/O-error loops): each file operation of a
//! scripted workload fails once, and from then on, with EIO, ENOSPC or a
//! failed sync, for every N. Nothing may panic; once a write fails no later
//! write is acknowledged (a failed fsync poisons); a read that succeeds
//! returns what the acknowledged writes left; and after the faults clear,
//! reopening yields a prefix of history holding every synced, acknowledged
//! write. Run for seven configurations of the layouts and for every preset
//! as a user opens it.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use sluicedb::fs::{Fault, MemFs};
use sluicedb::{Db, Error, JournalMode, Options, Preset, WriteOptions};

/// The configurations: the hash layout (mixed separation; all values,
/// separated at flush), the value log as journal, and the value log with
/// the engine journal.
const CASES: [&str; 12] = [
    "hash",
    "hash at flush",
    "log as journal",
    "log with journal",
    "tables",
    "unified",
    "unified tables",
    "leveldb",
    "wisckey",
    "hashkv",
    "scavenger",
    "unikv",
];

fn options(fs: &MemFs, case: &str) -> Options {
    if let Some(p) = Preset::from_name(case) {
        return preset_options(fs, p);
    }
    match case {
        "hash" => tiny_options(fs, 1),
        "hash at flush" => tiny_options(fs, 6),
        "log as journal" => tiny_options(fs, 3),
        "tables" => tiny_options(fs, 4).table_gc_ratio(0.05),
        "unified" => tiny_options(fs, 10),
        "unified tables" => tiny_options(fs, 26),
        _ => tiny_options(fs, 3).journal_mode(JournalMode::Journal),
    }
}

struct Outcome {
    writes: Vec<Write>,
    /// Writes acknowledged (a prefix of `writes`).
    acked: usize,
    /// Writes acknowledged with sync: the durable lower bound.
    synced: usize,
}

fn workload(fs: &MemFs, case: &str) -> Outcome {
    let mut rng = Rng::new(7);
    let mut out = Outcome {
        writes: Vec::new(),
        acked: 0,
        synced: 0,
    };
    let Ok(db) = Db::open("/db", options(fs, case)) else {
        return out;
    };
    let mut failed = false;
    for i in 0..80u64 {
        let w = Write {
            ops: vec![(key(&mut rng, 40), Some(value(&mut rng, i, 200)))],
            sync: i % 7 == 0,
        };
        out.writes.push(w.clone());
        let r = db.write_opt(&WriteOptions { sync: w.sync }, w.batch());
        match r {
            Ok(()) => {
                assert!(
                    !failed,
                    "a write was acknowledged after an earlier one failed"
                );
                out.acked = out.writes.len();
                if w.sync {
                    out.synced = out.acked;
                }
            }
            Err(e) => {
                assert!(
                    matches!(e, Error::Io { .. } | Error::Poisoned(_)),
                    "unexpected error kind: {e}"
                );
                failed = true;
            }
        }
        if i % 30 == 29 && !failed && db.flush().is_err() {
            failed = true;
        }
        if i == 60 && !failed && db.compact_range(None, None).is_err() {
            failed = true;
        }
        // GC steps (nothing to collect without a value store), and reads,
        // under the same faults: an error is fine, a wrong answer is not.
        // A failed step need not stop writes (a read error leaves nothing
        // unknown); recovery below checks that nothing synced was lost.
        if i % 20 == 19 && !failed {
            let _ = db.gc();
        }
        if i % 10 == 9 {
            check_reads(&db, &out);
        }
    }
    if let Some(p) = db.stats().poisoned {
        assert!(!p.contains("panicked"), "{p}");
    }
    drop(db);
    out
}

/// A full scan and point reads: each that succeeds must show the state
/// after the acknowledged writes (or after one more: a write that failed
/// once in the write buffer may be visible).
fn check_reads(db: &Db, out: &Outcome) {
    let acked = state_after(&out.writes, out.acked);
    let next = state_after(&out.writes, (out.acked + 1).min(out.writes.len()));
    if let Ok(got) = read_all(db) {
        assert!(
            got == acked || got == next,
            "a scan under faults read a wrong state"
        );
    }
    for (k, v) in acked.iter().take(8) {
        if let Ok(got) = db.get(k) {
            let other = next.get(k);
            assert!(
                got.as_ref() == Some(v) || got.as_ref() == other,
                "a read under faults returned a wrong value for {}",
                String::from_utf8_lossy(k)
            );
        }
    }
}

fn check_recovery(fs: &MemFs, case: &str, out: &Outcome, what: &str) {
    let db = Db::open("/db", options(fs, case))
        .unwrap_or_else(|e| panic!("{what}: reopen after faults failed: {e}"));
    let got = read_all(&db).unwrap_or_else(|e| panic!("{what}: scan failed: {e}"));
    assert!(
        matching_prefix(&out.writes, out.synced, out.writes.len(), &got).is_some(),
        "{what}: recovered state is not a prefix holding all synced writes"
    );
}

#[test]
fn every_operation_fails_once_and_persistently() {
    let positions: usize = CASES.iter().map(|case| fail_every_operation(case)).sum();
    println!("fault positions covered in all: {positions}");
}

/// Runs the loop for one case; returns the fault positions it covered.
fn fail_every_operation(case: &str) -> usize {
    let started = std::time::Instant::now();
    let clean = MemFs::new();
    workload(&clean, case);
    let total_ops = clean.op_count();
    assert!(total_ops > 150, "workload too small: {total_ops} ops");
    // Every (fault, persistent, position), checked on two threads.
    let mut plan = Vec::new();
    for fault in [Fault::Eio, Fault::NoSpace, Fault::SyncFails] {
        for persistent in [false, true] {
            let step = if persistent { 3 } else { 1 };
            for at in (1..=total_ops).step_by(step) {
                plan.push((fault, persistent, at));
            }
        }
    }
    let runs = plan.len();
    let (next, fired) = (AtomicUsize::new(0), AtomicUsize::new(0));
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while let Some(&(fault, persistent, at)) =
                    plan.get(next.fetch_add(1, Ordering::Relaxed))
                {
                    let what = format!("{case}: {fault:?} at op {at} persistent {persistent}");
                    let fs = MemFs::new();
                    fs.inject(fault, at, persistent);
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        workload(&fs, case)
                    }));
                    let out = r.unwrap_or_else(|e| {
                        eprintln!("panic with {what}");
                        std::panic::resume_unwind(e)
                    });
                    fired.fetch_add(usize::from(fs.fault_fired()), Ordering::Relaxed);
                    fs.clear_faults();
                    let image = fs.crash_image();
                    check_recovery(&image, case, &out, &format!("{what} (crash image)"));
                    check_recovery(&fs, case, &out, &what);
                }
            });
        }
    });
    let fired = fired.into_inner();
    println!(
        "{case}: fault runs: {runs}, faults fired: {fired}, ops per clean run: {total_ops}, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        fired > runs / 2,
        "most injected faults should fire ({fired}/{runs})"
    );
    runs
}

/// A manifest roll whose directory sync fails after CURRENT was renamed to
/// name the new manifest poisons the database, which must then delete no
/// file: the sweep of obsolete files took the new manifest for an old one
/// (memory still held the previous), and the next open found CURRENT
/// naming a manifest that was gone. Every sync of a flush with a roll is
/// made to fail in turn; the database as closed must reopen with every
/// synced write.
#[test]
fn a_failed_manifest_roll_keeps_the_manifest_current_names() {
    let sync = WriteOptions { sync: true };
    let mut fired = 0;
    for at in 0..60u64 {
        let fs = MemFs::new();
        // Every edit rolls the manifest.
        let opts = tiny_options(&fs, 0).max_manifest_bytes(64);
        let db = Db::open("/db", opts.clone()).unwrap();
        for i in 0..20u32 {
            db.put_opt(&sync, format!("k{i:02}"), "v").unwrap();
        }
        fs.inject(Fault::SyncFails, fs.op_count() + at, false);
        let _ = db.flush();
        fired += usize::from(fs.fault_fired());
        drop(db);
        fs.clear_faults();
        let db = Db::open("/db", opts)
            .unwrap_or_else(|e| panic!("sync failing from op +{at}: reopen failed: {e}"));
        for i in 0..20u32 {
            assert_eq!(
                db.get(format!("k{i:02}")).unwrap().as_deref(),
                Some(&b"v"[..]),
                "sync failing from op +{at}: k{i:02}"
            );
        }
    }
    assert!(fired > 10, "faults fired in {fired} runs");
}
