//! A flush made tables pointing at value log records that were still in the
//! log's write buffer; a crash then left pointers to nothing (found by the
//! crash test, `BatchesFlushCompact` with separation). A flush now syncs the
//! value log first.

mod common;

use common::*;
use sluicedb::fs::MemFs;
use sluicedb::Db;

#[test]
fn regression_flush_before_value_log_sync() {
    let fs = MemFs::new();
    let opts = tiny_options(&fs, 3).value_log_buffer_bytes(1 << 20);
    let db = Db::open("/db", opts).unwrap();
    for i in 0..50u32 {
        db.put(format!("k{i:03}"), vec![b'v'; 100]).unwrap();
    }
    db.flush().unwrap();
    let image = fs.crash_image();
    drop(db);
    let db = Db::open("/db", tiny_options(&image, 3)).unwrap();
    let all = read_all(&db).unwrap();
    assert_eq!(all.len(), 50, "flushed values must survive a crash");
}
