//! A manifest write that failed (its record appended, its sync failed)
//! poisoned the database, but later installs still appended to the
//! manifest: a second GC step collected the value table the first step's
//! edit had collected, so the manifest held two edits removing it, and the
//! database no longer opened ("value table 7 removed but not live";
//! found by the I/O-error loop once it ran GC, issue 50). After a failed
//! write no record goes into a log file, and a poisoned database installs
//! nothing.
//!
//! Each operation from the first GC step on fails once in turn, with EIO
//! and with a failed sync; the steps and a compaction go on after it. The
//! database as left, and a crash image of it, must reopen with every write.

mod common;

use common::*;
use sluicedb::fs::{Fault, MemFs};
use sluicedb::{Db, Options};

fn options(fs: &MemFs) -> Options {
    // Value tables, GC only when called.
    tiny_options(fs, 4)
        .table_gc_ratio(0.05)
        .gc_garbage_ratio(None)
        .gc_interval_ms(None)
        .space_limit(None)
        .background_threads(1)
}

#[test]
fn nothing_is_installed_after_a_failed_manifest_write() {
    for fault in [Fault::Eio, Fault::SyncFails] {
        let mut fired = 0;
        for at in 0..80u64 {
            let fs = MemFs::new();
            let db = Db::open("/db", options(&fs)).unwrap();
            let mut state = State::new();
            for round in 0..3u64 {
                for i in 0..30u64 {
                    let (k, v) = (format!("k{i:03}"), format!("{round}:{}", "v".repeat(60)));
                    db.put(&k, &v).unwrap();
                    state.insert(k.into_bytes(), v.into_bytes());
                }
                db.flush().unwrap();
            }
            db.wait_for_background().unwrap();
            fs.inject(fault, fs.op_count() + at, false);
            for _ in 0..3 {
                let _ = db.gc();
            }
            let _ = db.compact_range(None, None);
            fired += usize::from(fs.fault_fired());
            drop(db);
            fs.clear_faults();
            for (image, what) in [(fs.crash_image(), "crash image"), (fs.clone(), "as left")] {
                let db = Db::open("/db", options(&image))
                    .unwrap_or_else(|e| panic!("{fault:?} at +{at} ({what}): reopen failed: {e}"));
                assert_eq!(read_all(&db).unwrap(), state, "{fault:?} at +{at} ({what})");
            }
        }
        // Every operation can fail with EIO; only syncs fail to sync.
        println!("{fault:?}: fired in {fired} of 80 runs");
        assert!(fired >= 10, "{fault:?}: fired in {fired} of 80 runs");
    }
}
