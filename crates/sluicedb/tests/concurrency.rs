//! Writers, readers with snapshots, and forced flushes and compactions, all
//! at once. Checks atomicity of batches, monotonic progress at successive
//! snapshots, agreement of scans and point reads at one snapshot, and the
//! final state.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use sluicedb::fs::MemFs;
use sluicedb::{Db, ReadOptions, WriteBatch, WriteOptions};

const WRITERS: u64 = 3;
const ROUNDS: u64 = 1500;

fn counter(v: &[u8]) -> u64 {
    std::str::from_utf8(v)
        .unwrap()
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn writers_readers_snapshots_flush_and_compaction() {
    race(&|fs| tiny_options(fs, 1));
}

/// The same under lightkv, whose readers race the leaves leaving its
/// write buffer (`docs/design.md`, "LightKV: the preset").
#[test]
fn writers_readers_snapshots_flush_and_compaction_under_lightkv() {
    let s = race(&|fs| preset_options(fs, sluicedb::Preset::LightKv));
    // Partition splits raced the flushes and merges.
    assert!(s.index.shape.partition_splits > 0, "{s}");
}

fn race(make: &dyn Fn(&MemFs) -> sluicedb::Options) -> sluicedb::Stats {
    let fs = MemFs::new();
    let db = Db::open("/db", make(&fs)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    std::thread::scope(|s| {
        for t in 0..WRITERS {
            let db = db.clone();
            s.spawn(move || {
                for i in 1..=ROUNDS {
                    // Two keys always change together; filler churns tables.
                    let v = format!("{i}:{}", "x".repeat((i % 64) as usize));
                    let mut b = WriteBatch::new();
                    b.put(format!("a{t}"), &v).put(format!("b{t}"), &v);
                    b.put(format!("fill{t}-{:04}", i % 200), &v);
                    if i % 10 == 0 {
                        b.delete(format!("fill{t}-{:04}", (i + 100) % 200));
                    }
                    db.write_opt(&WriteOptions { sync: i % 250 == 0 }, b)
                        .unwrap();
                }
            });
        }
        for r in 0..2 {
            let db = db.clone();
            let stop = stop.clone();
            s.spawn(move || {
                let mut last = [0u64; WRITERS as usize];
                let mut checks = 0u64;
                while !stop.load(Ordering::Relaxed) || checks < 20 {
                    let snap = db.snapshot();
                    let o = ReadOptions::at(&snap);
                    for t in 0..WRITERS {
                        let a = db.get_opt(&o, format!("a{t}")).unwrap();
                        let b = db.get_opt(&o, format!("b{t}")).unwrap();
                        assert_eq!(a, b, "reader {r}: batch for writer {t} seen half-applied");
                        let c = a.as_deref().map_or(0, counter);
                        assert!(c >= last[t as usize], "reader {r}: writer {t} went back");
                        last[t as usize] = c;
                    }
                    // A scan and point reads at the same snapshot agree.
                    let prefix = format!("fill{}", checks % WRITERS);
                    let scanned: Vec<_> = db.prefix_opt(&o, &prefix).map(|x| x.unwrap()).collect();
                    for (k, v) in scanned.iter().step_by(7) {
                        assert_eq!(db.get_opt(&o, k).unwrap().as_ref(), Some(v));
                    }
                    let rev: Vec<_> = db
                        .prefix_opt(&o, &prefix)
                        .rev()
                        .map(|x| x.unwrap())
                        .collect();
                    assert_eq!(
                        rev.len(),
                        scanned.len(),
                        "reader {r}: scan directions disagree"
                    );
                    checks += 1;
                }
            });
        }
        {
            let db = db.clone();
            let stop = stop.clone();
            s.spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    if n % 2 == 0 {
                        db.flush().unwrap();
                    } else {
                        db.compact_range(None, None).unwrap();
                    }
                    n += 1;
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            });
        }
        // Writers finish first; then stop the others.
        loop {
            let done = (0..WRITERS).all(|t| {
                db.get(format!("a{t}"))
                    .unwrap()
                    .is_some_and(|v| counter(&v) == ROUNDS)
            });
            if done {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let s = db.stats();
    assert!(s.flush.flushes > 0 && s.compaction.compactions > 0, "{s}");
    assert!(s.poisoned.is_none(), "{s}");
    drop(db);
    let db = Db::open("/db", make(&fs)).unwrap();
    for t in 0..WRITERS {
        let a = db.get(format!("a{t}")).unwrap().unwrap();
        assert_eq!(counter(&a), ROUNDS);
        assert_eq!(db.get(format!("b{t}")).unwrap().unwrap(), a);
    }
    // Writers use disjoint keys, so replaying each in order gives the state.
    let mut want = State::new();
    for t in 0..WRITERS {
        for i in 1..=ROUNDS {
            let v = format!("{i}:{}", "x".repeat((i % 64) as usize)).into_bytes();
            want.insert(format!("a{t}").into_bytes(), v.clone());
            want.insert(format!("b{t}").into_bytes(), v.clone());
            want.insert(format!("fill{t}-{:04}", i % 200).into_bytes(), v);
            if i % 10 == 0 {
                want.remove(format!("fill{t}-{:04}", (i + 100) % 200).as_bytes());
            }
        }
    }
    assert_eq!(read_all(&db).unwrap(), want);
    s
}
