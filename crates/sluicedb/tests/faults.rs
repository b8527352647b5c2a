//! I/O-error test: each file operation of a workload fails once, and from
//! then on, with EIO, ENOSPC or a failed sync. Nothing may panic; once a
//! write fails no later write is acknowledged (a failed fsync poisons); and
//! after the faults clear, reopening yields a prefix of history holding every
//! synced, acknowledged write.

mod common;

use common::*;
use sluicedb::fs::{Fault, MemFs};
use sluicedb::{Db, Error, JournalMode, Options, WriteOptions};

/// The configurations: the hash layout (mixed separation; all values,
/// separated at flush), the value log as journal, and the value log with
/// the engine journal.
const CASES: [&str; 7] = [
    "hash",
    "hash at flush",
    "log as journal",
    "log with journal",
    "tables",
    "unified",
    "unified tables",
];

fn options(fs: &MemFs, case: &str) -> Options {
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
    }
    if let Some(p) = db.stats().poisoned {
        assert!(!p.contains("panicked"), "{p}");
    }
    drop(db);
    out
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
    for case in CASES {
        fail_every_operation(case);
    }
}

fn fail_every_operation(case: &str) {
    let clean = MemFs::new();
    workload(&clean, case);
    let total_ops = clean.op_count();
    assert!(total_ops > 150, "workload too small: {total_ops} ops");
    let mut runs = 0;
    let mut fired = 0;
    for fault in [Fault::Eio, Fault::NoSpace, Fault::SyncFails] {
        for persistent in [false, true] {
            let step = if persistent { 3 } else { 1 };
            for at in (1..=total_ops).step_by(step) {
                let what = format!("{case}: {fault:?} at op {at} persistent {persistent}");
                let fs = MemFs::new();
                fs.inject(fault, at, persistent);
                let r =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| workload(&fs, case)));
                let out = r.unwrap_or_else(|e| {
                    eprintln!("panic with {what}");
                    std::panic::resume_unwind(e)
                });
                fired += usize::from(fs.fault_fired());
                fs.clear_faults();
                let image = fs.crash_image();
                check_recovery(&image, case, &out, &format!("{what} (crash image)"));
                check_recovery(&fs, case, &out, &what);
                runs += 1;
            }
        }
    }
    println!("{case}: fault runs: {runs}, faults fired: {fired}, ops per clean run: {total_ops}");
    assert!(
        fired > runs / 2,
        "most injected faults should fire ({fired}/{runs})"
    );
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
