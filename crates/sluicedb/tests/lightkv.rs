//! The lightkv preset end to end on a tiny write buffer: no journal, the
//! buffer file in the directory, leaves flushed into tables, reads and
//! scans over buffer and tables, reopen and crash recovery.

mod common;

use std::path::Path;

use common::*;
use sluicedb::fs::MemFs;
use sluicedb::{Db, Preset, WriteOptions};

fn open(fs: &MemFs) -> Db {
    Db::open("/db", preset_options(fs, Preset::LightKv)).unwrap()
}

fn k(i: u64) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn v(i: u64, round: u64) -> Vec<u8> {
    format!("value-{i}-{round}-{}", "x".repeat((i % 40) as usize)).into_bytes()
}

#[test]
fn writes_go_to_the_buffer_and_leaves_to_tables() {
    let fs = MemFs::new();
    let db = open(&fs);
    for round in 0..3 {
        for i in 0..400 {
            db.put(k(i), v(i, round)).unwrap();
        }
    }
    for i in (0..400).step_by(7) {
        db.delete(k(i)).unwrap();
    }
    let want = |i: u64| (!i.is_multiple_of(7)).then(|| v(i, 2));
    // The buffer region, and no journal file.
    assert!(fs.pm(Path::new("/db/LIGHTKV.pwb")).is_some());
    assert!(
        !fs.paths()
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == "log")),
        "{:?}",
        fs.paths()
    );
    db.wait_for_background().unwrap();
    let tables: usize = db.stats().index.levels.iter().map(|l| l.tables).sum();
    assert!(tables > 0, "leaves were flushed into tables");
    assert!(db.stats().flush.flushes > 0);
    for i in 0..400 {
        assert_eq!(db.get(k(i)).unwrap(), want(i), "key {i}");
    }
    let all: Vec<_> = db.range::<Vec<u8>>(..).map(|r| r.unwrap()).collect();
    let expect: Vec<_> = (0..400)
        .filter_map(|i| want(i).map(|x| (k(i), x)))
        .collect();
    assert_eq!(all, expect);
    let back: Vec<_> = db
        .range(k(100)..k(200))
        .rev()
        .map(|r| r.unwrap().0)
        .collect();
    let expect: Vec<_> = (100..200)
        .rev()
        .filter(|i: &u64| !i.is_multiple_of(7))
        .map(k)
        .collect();
    assert_eq!(back, expect);
    // A full flush empties the buffer into tables; reads stay right.
    db.flush().unwrap();
    for i in 0..400 {
        assert_eq!(db.get(k(i)).unwrap(), want(i), "key {i} after flush");
    }
    drop(db);
    let db = open(&fs);
    for i in 0..400 {
        assert_eq!(db.get(k(i)).unwrap(), want(i), "key {i} after reopen");
    }
    assert_eq!(db.created_with(), Some(Preset::LightKv));
    assert!(db.checkpoint("/cp").is_err(), "checkpoints refuse lightkv");
}

#[test]
fn a_crash_keeps_every_synced_write() {
    for seed in 0..6u64 {
        let fs = MemFs::new();
        let db = open(&fs);
        let mut rng = Rng::new(seed);
        let mut synced = 0;
        for i in 0..600 {
            let sync = rng.chance(10);
            db.put_opt(&WriteOptions { sync }, k(i % 150), v(i, 0))
                .unwrap();
            if sync {
                synced = i + 1;
            }
        }
        let image = fs.torn_crash_image(rng.next());
        drop(db);
        let db = open(&image);
        // A prefix: the newest surviving write of each key is the one the
        // prefix ends with, and it reaches at least the last synced write.
        let got = read_all(&db).unwrap();
        let n = (synced..=600)
            .rev()
            .find(|&n| {
                let mut m = std::collections::BTreeMap::new();
                for i in 0..n {
                    m.insert(k(i % 150), v(i, 0));
                }
                m == got
            })
            .unwrap_or_else(|| panic!("seed {seed}: no prefix from {synced} on"));
        assert!(n >= synced);
    }
}

/// Crash images taken after every file operation (the flushes' tables and
/// manifest edits), the buffer's region crashed with them: each reopens to
/// a prefix holding every write synced before the image.
#[test]
fn every_file_operation_crash_keeps_a_prefix() {
    for seed in 0..4u64 {
        let fs = MemFs::new();
        fs.capture_images(seed % 2 == 1);
        let db = open(&fs);
        let mut rng = Rng::new(seed);
        let mut log: Vec<(Write, u64, u64)> = Vec::new();
        for serial in 0..300 {
            let k = key(&mut rng, 40);
            let v = (!rng.chance(15)).then(|| value(&mut rng, serial, 300));
            let w = Write {
                ops: vec![(k, v)],
                sync: rng.chance(10),
            };
            let issued = fs.op_count();
            db.write_opt(&WriteOptions { sync: w.sync }, w.batch())
                .unwrap();
            log.push((w, issued, fs.op_count()));
        }
        drop(db);
        let writes: Vec<Write> = log.iter().map(|l| l.0.clone()).collect();
        let images = fs.take_images();
        assert!(images.len() > 20, "{} images", images.len());
        for (op, image) in images {
            // The image is taken after operation `op`; a write touches no
            // file, so one acknowledged at `op` came after it.
            let lo = log
                .iter()
                .rposition(|l| l.0.sync && l.2 < op)
                .map_or(0, |i| i + 1);
            let hi = log.iter().filter(|l| l.1 < op).count();
            let db = open(&image);
            let got = read_all(&db).unwrap();
            assert!(
                matching_prefix(&writes, lo, hi.max(lo), &got).is_some(),
                "seed {seed}: image after operation {op}: no prefix in {lo}..={hi}"
            );
        }
    }
}
