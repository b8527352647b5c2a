//! GC moved the value log tail past records whose pointers were still in
//! the journal, and deleted their file; replay then met pointers into a
//! missing file (found by the crash test's `Gc` workload). Replay now
//! accepts pointers below the tail (a later journal record shadows each), and
//! GC syncs the journal before moving the tail, so the writes that made a
//! chunk's records dead are durable even when nothing was relocated.

mod common;

use common::*;
use sluicedb::fs::MemFs;
use sluicedb::Db;

#[test]
fn regression_gc_tail_past_journaled_pointers() {
    let fs = MemFs::new();
    let opts = tiny_options(&fs, 3)
        .separation_threshold_bytes(Some(0))
        .write_buffer_size_bytes(1 << 20)
        .value_log_file_size_bytes(4096)
        .gc_garbage_ratio(None);
    let db = Db::open("/db", opts.clone()).unwrap();
    for round in 0..2u8 {
        for i in 0..20u32 {
            db.put(format!("k{i:02}"), vec![b'a' + round; 300]).unwrap();
        }
    }
    let stats = db.gc().unwrap();
    assert!(stats.records > 0);
    assert_eq!(
        stats.live_records, 0,
        "the first file holds only overwritten values"
    );
    let image = fs.crash_image();
    drop(db);
    let db = Db::open("/db", opts.fs(std::sync::Arc::new(image))).unwrap();
    for i in 0..20u32 {
        assert_eq!(db.get(format!("k{i:02}")).unwrap(), Some(vec![b'b'; 300]));
    }
}
