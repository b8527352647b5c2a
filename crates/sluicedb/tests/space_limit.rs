//! Space-aware throttling (seed 003 §3.5, issue 17): each separated preset,
//! opened with its defaults and no capacity, keeps the bytes of all its
//! files under the space limit's high ratio times its live bytes, plus a
//! stated slack, through overwrites and deletes.

use std::path::Path;
use std::sync::Arc;

use sluicedb::fs::{Fs, MemFs};
use sluicedb::{Db, Options, Preset, DEFAULT_SPACE_HIGH_RATIO};

const WRITE_BUFFER: usize = 64 << 10;

fn used_bytes(fs: &MemFs) -> u64 {
    let dir = Path::new("/db");
    fs.list(dir)
        .unwrap()
        .iter()
        // A file deleted since the listing (background work) holds none.
        .filter_map(|n| fs.allocated_len(&dir.join(n)).ok())
        .sum()
}

fn stays_bounded(preset: Preset) {
    let fs = MemFs::new();
    let o = Options::preset(preset)
        .fs(Arc::new(fs.clone()))
        .write_buffer_size_bytes(WRITE_BUFFER)
        .value_log_file_size_bytes(64 << 10)
        .hash_main_segment_bytes(64 << 10)
        .hash_log_segment_bytes(16 << 10)
        .hash_groups(16);
    let max_write_buffers = o.max_write_buffers as u64;
    let db = Db::open("/db", o).unwrap();
    // The engine's slack (4 MiB: small files and a small memtable's
    // journal), the journals (at most `max_write_buffers` memtables' worth,
    // which the limit counts but a check may catch before the limit reacts)
    // and the granularity of a check: one memtable's flush and a value file
    // or group head in progress per group.
    let slack = max_write_buffers * WRITE_BUFFER as u64
        + (4 << 20)
        + 2 * WRITE_BUFFER as u64
        + 16 * (64 << 10);
    let value =
        |k: u64, round: u64| vec![b'a' + ((k + round) % 26) as u8; 900 + (k % 7) as usize * 30];
    let keys = 4000u64;
    let mut worst: f64 = 0.0;
    for round in 0..8u64 {
        for i in 0..keys {
            // Rounds 0-4 overwrite every key; rounds 5-7 delete three keys
            // in four and write new ones in their place.
            let k = if round >= 5 && i % 4 != 0 {
                i + round * keys
            } else {
                i
            };
            if round >= 5 && i % 4 != 0 {
                db.delete(format!("key{:08}", i + (round - 1) * keys))
                    .unwrap();
            }
            db.put(format!("key{k:08}"), value(k, round)).unwrap();
            if i % 500 == 499 {
                let s = db.stats();
                let live = s.live_table_bytes + s.values.live_bytes;
                let used = used_bytes(&fs);
                let bound = (DEFAULT_SPACE_HIGH_RATIO * live as f64) as u64 + slack;
                worst = worst.max(used as f64 / live.max(1) as f64);
                assert!(
                    used <= bound,
                    "{preset:?} round {round} write {i}: {used} bytes, live {live}, bound {bound}\n{s}"
                );
            }
        }
    }
    let s = db.stats();
    assert!(s.gc.runs > 0, "{preset:?}: GC never ran\n{s}");
    println!(
        "{preset:?}: worst space amplification {worst:.2} at a check, {} GC runs",
        s.gc.runs
    );
}

#[test]
fn wisckey_stays_under_its_space_limit() {
    stays_bounded(Preset::WiscKey);
}

#[test]
fn hashkv_stays_under_its_space_limit() {
    stays_bounded(Preset::HashKv);
}
