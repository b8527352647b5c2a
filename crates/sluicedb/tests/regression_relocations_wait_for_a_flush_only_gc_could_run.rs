//! With one background thread, a GC step runs on the thread that flushes.
//! Its publish barrier and relocation commit go through the writer queue, and the group
//! leader ahead of them (or GC leading its own group) waited for memtable room,
//! that is for a flush that only the GC thread could run: every writer and
//! GC waited for each other for good. A GC step waiting in the queue, or
//! leading its own group into a full memtable, now runs the pending flush
//! or compaction itself (`Core::help_background`).
//!
//! The writes run on their own thread; a deadlock shows as a timeout
//! instead of a hung test.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::*;
use sluicedb::fs::MemFs;
use sluicedb::{Db, JournalMode, Options, ValueLayout};

fn writes_finish(opts: Options, what: &str) {
    let db = Db::open("/db", opts).unwrap();
    let (tx, rx) = mpsc::channel();
    let writer = std::thread::spawn(move || {
        for i in 0..6000u32 {
            db.put(format!("k{:03}", i % 150), vec![b'v'; 300]).unwrap();
        }
        let s = db.stats();
        tx.send(s.gc.runs).unwrap();
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(runs) => assert!(runs > 0, "{what}: no GC step ran, nothing was tested"),
        Err(_) => {
            panic!("{what}: writes did not finish in 120 s: GC and writers wait for each other")
        }
    }
    writer.join().unwrap();
}

#[test]
fn regression_relocations_wait_for_a_flush_only_gc_could_run() {
    // The log with GC on its garbage ratio, memtables of 4 KiB, two of
    // them: without the fix this one hangs.
    let fs = MemFs::new();
    writes_finish(
        tiny_options(&fs, 3)
            .separation_threshold_bytes(Some(0))
            .value_log_file_size_bytes(8 * 1024)
            .gc_chunk_bytes(4096)
            .gc_garbage_ratio(Some(0.2))
            .max_write_buffers(2)
            .background_threads(1),
        "log layout",
    );
    // The hash layout, values separated when written (its GC passes the
    // publish barrier and commits relocations too; this one did not hang
    // before the fix, it guards the same path), GC from a capacity: the
    // data is too small for the space limit's slack.
    let fs = MemFs::new();
    writes_finish(
        tiny_options(&fs, 1)
            .separation_threshold_bytes(Some(0))
            .value_layout(ValueLayout::Hash)
            .journal_mode(JournalMode::Journal)
            .separate_at_flush(false)
            .value_store_capacity_bytes(Some(256 * 1024))
            .max_write_buffers(2)
            .background_threads(1),
        "hash layout",
    );
}
