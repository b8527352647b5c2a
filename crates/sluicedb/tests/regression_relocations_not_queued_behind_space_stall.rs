//! A writer stalled for value log space as group-commit leader, while GC's
//! relocation commit (which frees the space) queued behind it: every write
//! then waited out its full stall (found by `sluice bench update`). Writers
//! now wait for space before joining the queue. Without the fix this test
//! takes minutes instead of well under a second.

mod common;

use common::*;
use sluicedb::fs::MemFs;
use sluicedb::Db;

#[test]
fn regression_relocations_not_queued_behind_space_stall() {
    let fs = MemFs::new();
    let opts = tiny_options(&fs, 3)
        .separation_threshold_bytes(Some(0))
        .value_log_file_size_bytes(4096)
        .value_store_capacity_bytes(Some(32 * 1024))
        .gc_garbage_ratio(None)
        .background_threads(2);
    let db = Db::open("/db", opts).unwrap();
    let start = std::time::Instant::now();
    for i in 0..3000u32 {
        db.put(format!("k{:02}", i % 20), vec![b'v'; 200]).unwrap();
    }
    let s = db.stats();
    assert!(s.gc.runs > 0, "{s}");
    assert!(
        s.values.bytes < 128 * 1024,
        "GC kept the log near capacity: {s}"
    );
    // A generous bound, far from the minutes the convoy took.
    assert!(start.elapsed() < std::time::Duration::from_secs(60));
}
