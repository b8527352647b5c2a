//! Reads on a real disk failed with "value pointer outside the log file"
//! (found by `sluice bench` YCSB A, then B): a value store file's cached
//! reader kept the length the file had when it was opened, while the head
//! file it read kept growing; `MemFs` reported the current length, so the
//! suites never saw it. Worse, hash GC read a frozen segment "whole" by
//! that stale length. Reads and GC now use the store's own count, and
//! `StdFs` reports the current length as `MemFs` does.

mod common;

use common::*;
use sluicedb::fs::MemFs;
use sluicedb::Db;

#[test]
fn regression_cached_reader_of_a_growing_value_file() {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    // 1: hash layout, 3: value log as the journal, 6: hash with cold log.
    for variant in [1u64, 3, 6] {
        let dir = tempfile::tempdir().unwrap();
        let opts = tiny_options(&MemFs::new(), variant)
            .fs(Arc::new(sluicedb::fs::StdFs))
            .write_buffer_size_bytes(64 << 10)
            .hash_main_segment_bytes(64 << 10)
            .hash_log_segment_bytes(16 << 10)
            .value_log_file_size_bytes(256 << 10);
        let db = Db::open(dir.path(), opts).unwrap();
        let mut model = BTreeMap::new();
        for i in 0..3000u32 {
            let k = format!("key{:04}", (i * 7919) % 500);
            let v = format!("{i:08}").repeat(20);
            db.put(&k, &v).unwrap();
            model.insert(k, v);
            // Read back something written a while ago: its file is open for
            // reading while later writes extend it.
            let old = format!("key{:04}", (i * 31) % 500);
            let got = db
                .get(&old)
                .unwrap_or_else(|e| panic!("variant {variant}, op {i}: {e}"));
            assert_eq!(
                got.as_deref(),
                model.get(&old).map(|v| v.as_bytes()),
                "variant {variant}"
            );
            if i % 500 == 499 {
                db.gc()
                    .unwrap_or_else(|e| panic!("variant {variant}, gc at {i}: {e}"));
            }
        }
        for (k, v) in &model {
            assert_eq!(
                db.get(k).unwrap().as_deref(),
                Some(v.as_bytes()),
                "variant {variant}, {k}"
            );
        }
        db.verify().unwrap();
    }
}
