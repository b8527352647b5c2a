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
    // A checkpoint holds the buffer's region: writes not yet flushed
    // are in it, and the copy opens on its own.
    for i in 0..50 {
        db.put(k(i), v(i, 3)).unwrap();
    }
    let stats = db.checkpoint("/cp").unwrap();
    assert!(stats.files_copied >= 1, "{stats:?}");
    assert!(fs.pm(Path::new("/cp/LIGHTKV.pwb")).is_some());
    drop(db);
    let cp = Db::open("/cp", preset_options(&fs, Preset::LightKv)).unwrap();
    cp.verify().unwrap();
    for i in 0..400 {
        let want = if i < 50 { Some(v(i, 3)) } else { want(i) };
        assert_eq!(cp.get(k(i)).unwrap(), want, "key {i} in the checkpoint");
    }
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

/// A merge must keep a tombstone while recovery may index again the put it
/// hides: recovery indexes every record it finds in the buffer above the
/// watermark `W` that the tables hold no version of, flushed or not, and a
/// flushed put's record outlives its leaf while a leaf split off the same
/// partition still names its segment. A pin written first into the tree's
/// other initial partition, and never again, keeps `W` at 0 (its leaf holds
/// the oldest operation and is never the fullest); every write is synced,
/// `CS` is 2, and half the writes after the first puts are deletes, so
/// merges drop tombstones with `W` below them. Every image, one after each
/// file operation, must reopen to the writes acknowledged by then; a merge
/// that dropped a tombstone above `W` brought its put back.
#[test]
fn a_merge_keeps_tombstones_above_the_watermark() {
    for_seeds(seeds(0, 4), |seed| {
        let fs = MemFs::new();
        let opts = |fs: &MemFs| preset_options(fs, Preset::LightKv).lightkv_compaction_size(2);
        let db = Db::open("/db", opts(&fs)).unwrap();
        fs.capture_images(false);
        let mut rng = Rng::new(seed);
        let mut log: Vec<(Write, u64, u64)> = Vec::new();
        let mut write = |ops: Vec<(Vec<u8>, Option<Vec<u8>>)>| {
            let w = Write { ops, sync: true };
            let issued = fs.op_count();
            db.write_opt(&WriteOptions { sync: true }, w.batch())
                .unwrap();
            log.push((w, issued, fs.op_count()));
        };
        write(vec![(b"\xf0pin".to_vec(), Some(b"pin".to_vec()))]);
        for serial in 0..300u64 {
            let k = if serial < 60 {
                format!("k{serial:05}").into_bytes()
            } else {
                key(&mut rng, 60)
            };
            let v = (serial < 60 || rng.chance(2)).then(|| value(&mut rng, serial, 40));
            write(vec![(k, v)]);
        }
        db.wait_for_background().unwrap();
        let compactions = db.stats().compaction.compactions;
        drop(db);
        assert!(compactions >= 5, "seed {seed}: {compactions} merges");
        let writes: Vec<Write> = log.iter().map(|l| l.0.clone()).collect();
        let images = fs.take_images();
        assert!(images.len() > 100, "seed {seed}: {} images", images.len());
        for (op, image) in images {
            // Synced writes: each acknowledged before the image is in it.
            let lo = log.iter().rposition(|l| l.2 < op).map_or(0, |i| i + 1);
            let hi = log.iter().filter(|l| l.1 < op).count();
            let db = Db::open("/db", opts(&image)).unwrap();
            let got = read_all(&db).unwrap();
            assert!(
                matching_prefix(&writes, lo, hi.max(lo), &got).is_some(),
                "seed {seed}: image after operation {op}: no prefix in {lo}..={hi}"
            );
        }
    });
}

/// Write `serial` over `keys` keys: a delete one time in ten, else a put
/// of up to 60 bytes; mirrored in `model`.
fn random_write(
    db: &Db,
    rng: &mut Rng,
    model: &mut std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    serial: u64,
    keys: u64,
) {
    let key = key(rng, keys);
    if rng.chance(10) {
        db.delete(&key).unwrap();
        model.remove(&key);
    } else {
        let val = value(rng, serial, 60);
        db.put(&key, &val).unwrap();
        model.insert(key, val);
    }
}

/// A clean close leaves the tree's image and the clean mark, and the next
/// open loads it instead of scanning the buffer (§V); a crash at any file
/// operation of the close (the image written, not yet synced or marked)
/// reopens by scanning, with every write; so does a damaged image, and a
/// crash after the reopen (the mark was cleared before the buffer changed).
#[test]
fn a_clean_close_loads_the_image_and_anything_else_scans() {
    for seed in 0..3u64 {
        let fs = MemFs::new();
        let db = open(&fs);
        let mut rng = Rng::new(seed);
        let mut model = std::collections::BTreeMap::new();
        // Enough for splits, linked leaves and flushes on the tiny buffer,
        // with writes left in it at the close.
        for serial in 0..900u64 {
            random_write(&db, &mut rng, &mut model, serial, 300);
        }
        assert!(!db.stats().index.shape.lightkv_image_loaded);
        // The last write synced, and no flush or merge under way: every
        // image from here on is taken by the close itself.
        let (last, val) = (b"last".to_vec(), b"synced".to_vec());
        db.put_opt(&WriteOptions { sync: true }, &last, &val)
            .unwrap();
        model.insert(last, val);
        db.wait_for_background().unwrap();
        fs.capture_images(false);
        drop(db);
        let during_close = fs.take_images();
        assert!(
            during_close.len() >= 3,
            "seed {seed}: the image's create, append, sync: {} images",
            during_close.len()
        );
        for (op, image) in during_close {
            let db = open(&image);
            assert!(
                !db.stats().index.shape.lightkv_image_loaded,
                "seed {seed}: a crash at operation {op} of the close left no mark"
            );
            let got = read_all(&db).unwrap();
            assert!(
                got == model,
                "seed {seed}: op {op}: {} pairs, {} expected",
                got.len(),
                model.len()
            );
        }
        // The close completed: the image is loaded, and reads match.
        let db = open(&fs);
        assert!(db.stats().index.shape.lightkv_image_loaded, "seed {seed}");
        assert_eq!(read_all(&db).unwrap(), model, "seed {seed}");
        for (k, v) in model.iter().step_by(7) {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "seed {seed}");
        }
        db.verify().unwrap();
        // Writes go on from the loaded tree; a crash now finds no mark.
        for serial in 900..1100u64 {
            let key = key(&mut rng, 300);
            let val = value(&mut rng, serial, 60);
            db.put_opt(&WriteOptions { sync: true }, &key, &val)
                .unwrap();
            model.insert(key, val);
        }
        let crashed = fs.crash_image();
        drop(db);
        let db = open(&crashed);
        assert!(!db.stats().index.shape.lightkv_image_loaded, "seed {seed}");
        assert_eq!(read_all(&db).unwrap(), model, "seed {seed}: after a crash");
        drop(db);
        // A damaged image is set aside: the buffer is scanned.
        let db = open(&fs);
        assert!(db.stats().index.shape.lightkv_image_loaded, "seed {seed}");
        drop(db);
        let path = Path::new("/db/LIGHTKV.image");
        let mut bytes = sluicedb::fs::Fs::read_all(&fs, path).unwrap();
        let at = rng.below(bytes.len() as u64) as usize;
        bytes[at] ^= 0x10;
        let mut f = sluicedb::fs::Fs::create(&fs, path).unwrap();
        f.append(&bytes).unwrap();
        f.sync().unwrap();
        drop(f);
        let db = open(&fs);
        assert!(
            !db.stats().index.shape.lightkv_image_loaded,
            "seed {seed}: byte {at} of the image damaged"
        );
        assert_eq!(read_all(&db).unwrap(), model, "seed {seed}: damaged image");
    }
}

/// Tables merge by weight and partitions split while a model checks every
/// read, through a reopen: the tiny options merge three tables of a weight
/// and split a partition past 6 KiB of tables.
#[test]
fn partition_compaction_merges_by_weight_and_splits() {
    for_seeds(seeds(0, 3), |seed| {
        let fs = MemFs::new();
        let mut db = open(&fs);
        let mut rng = Rng::new(seed);
        let mut model = std::collections::BTreeMap::new();
        let mut heaviest = 0;
        for serial in 0..3000u64 {
            random_write(&db, &mut rng, &mut model, serial, 600);
            if serial % 500 == 499 {
                db.wait_for_background().unwrap();
                let s = db.stats();
                heaviest = s
                    .index
                    .levels
                    .iter()
                    .rposition(|l| l.tables > 0)
                    .unwrap_or(0)
                    .max(heaviest);
                if serial == 1999 {
                    drop(db);
                    db = open(&fs);
                }
            }
        }
        db.wait_for_background().unwrap();
        let s = db.stats();
        assert!(
            heaviest >= 2,
            "seed {seed}: tables reached weight {heaviest}\n{s}"
        );
        assert!(s.compaction.compactions > 0, "seed {seed}\n{s}");
        assert!(s.index.shape.partitions > 1, "seed {seed}: no split\n{s}");
        // The operator's view (`sluice info`): every partition in key
        // order with its tables, newest first, weights never rising from
        // oldest to newest; every table of the version in some partition.
        let parts = &s.index.shape.partition_tables;
        assert_eq!(parts.len(), s.index.shape.partitions, "seed {seed}");
        assert!(parts[0].smallest_key.is_empty(), "seed {seed}");
        assert!(
            parts
                .windows(2)
                .all(|w| w[0].smallest_key < w[1].smallest_key),
            "seed {seed}"
        );
        for p in parts {
            assert!(
                p.tables.windows(2).all(|w| w[0].0 <= w[1].0),
                "seed {seed}: weights of a partition, newest first: {:?}",
                p.tables
            );
        }
        for (w, level) in s.index.levels.iter().enumerate() {
            let listed = parts
                .iter()
                .flat_map(|p| &p.tables)
                .filter(|t| t.0 as usize == w)
                .count();
            assert!(listed >= level.tables, "seed {seed}: weight {w}\n{s}");
        }
        let b = s
            .index
            .shape
            .lightkv_buffer
            .as_ref()
            .expect("a write buffer");
        assert!(
            b.free_segments <= b.segments && b.segments > 0,
            "seed {seed}: {b:?}"
        );
        assert!(
            !b.leaves_per_partition.is_empty() && b.leaves_per_partition.iter().all(|&n| n >= 1),
            "seed {seed}: {b:?}"
        );
        for k in (0..600).map(|i| format!("k{i:05}").into_bytes()) {
            assert_eq!(db.get(&k).unwrap(), model.get(&k).cloned(), "seed {seed}");
        }
        let all: Vec<_> = db.range::<Vec<u8>>(..).map(|r| r.unwrap()).collect();
        let want: Vec<_> = model.into_iter().collect();
        assert_eq!(all, want, "seed {seed}");
        db.verify().unwrap();
    });
}

/// Seeks into partitions of several tables merge them whole once their
/// extra reads pay for it (the scan merge, `docs/design.md`, "Partition
/// compaction"), while writes go on; every scan, before and after,
/// answers as the model does, and so do reads after a reopen.
#[test]
fn seeks_merge_partitions_whole_and_scans_answer_alike() {
    for_seeds(seeds(0, 3), |seed| {
        let fs = MemFs::new();
        let mut db = open(&fs);
        let mut rng = Rng::new(seed);
        let mut model = std::collections::BTreeMap::new();
        for serial in 0..2000u64 {
            random_write(&db, &mut rng, &mut model, serial, 600);
        }
        db.wait_for_background().unwrap();
        for round in 0..400u64 {
            if round % 4 == 0 {
                random_write(&db, &mut rng, &mut model, 2000 + round, 600);
            }
            let start = key(&mut rng, 600);
            let got: Vec<_> = db
                .range(start.clone()..)
                .take(5)
                .map(|r| r.unwrap())
                .collect();
            let want: Vec<_> = model
                .range(start..)
                .take(5)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(got, want, "seed {seed}, round {round}");
            if round % 100 == 99 {
                db.wait_for_background().unwrap();
            }
        }
        db.wait_for_background().unwrap();
        let s = db.stats();
        assert!(
            s.index.shape.scan_merges > 0,
            "seed {seed}: no scan merge\n{s}"
        );
        drop(db);
        db = open(&fs);
        let all: Vec<_> = db.range::<Vec<u8>>(..).map(|r| r.unwrap()).collect();
        let want: Vec<_> = model.into_iter().collect();
        assert_eq!(all, want, "seed {seed}");
        db.verify().unwrap();
    });
}

/// Under a uniform workload of new keys, the tables' write amplification
/// (bytes written by flushes and merges over bytes written by flushes)
/// follows the weight rule's `log_CS(N) + 1` for `N` flushes into one
/// partition, not the leveled shape's growth with the data. At `N = CS^k`
/// every flushed byte climbs `k` weights whatever the flushes' sizes, so
/// the figure is exact there but for the tables' own overhead; the flushes
/// are made by `Db::flush` (one leaf each) so that `N` does not depend on
/// timing.
#[test]
fn write_amplification_follows_log_cs_of_flushes_plus_one() {
    let fs = MemFs::new();
    let cs = 4u64;
    let opts = preset_options(&fs, Preset::LightKv)
        .lightkv_buffer_bytes(256 * 1024)
        .lightkv_segment_bytes(4096)
        // 128 slots: no leaf fills between flushes, so the tree does not
        // split and each flush writes one table.
        .lightkv_leaf_buckets(32)
        .lightkv_max_leaf_nodes(2)
        .lightkv_compaction_size(cs as usize)
        .lightkv_partition_split_bytes(u64::MAX);
    let db = Db::open("/db", opts).unwrap();
    let mut rng = Rng::new(7);
    // A permutation of distinct keys: nothing is shadowed, so a merge
    // writes what it reads.
    let (rounds, per_round) = (256u64, 48u64);
    let n_keys = rounds * per_round;
    for i in 0..n_keys {
        let k = (i * 7919) % n_keys;
        let val: Vec<u8> = (0..100).map(|_| rng.next() as u8).collect();
        db.put(format!("key{k:08}"), val).unwrap();
        if i % per_round == per_round - 1 {
            db.flush().unwrap();
        }
    }
    db.wait_for_background().unwrap();
    let s = db.stats();
    let flushed = s.io.written(sluicedb::fs::IoClass::Flush) as f64;
    let merged = s.io.written(sluicedb::fs::IoClass::Compaction) as f64;
    let flushes = s.flush.flushes;
    let measured = (flushed + merged) / flushed;
    let log = (flushes as f64).log(cs as f64) + 1.0;
    eprintln!("{flushes} flushes: measured {measured:.3}, log_CS(N)+1 {log:.3}");
    assert_eq!(s.index.shape.partitions, 1, "{s}");
    assert_eq!(flushes, cs.pow(4), "{s}");
    // One table of weight 4 is left.
    assert_eq!(s.index.levels[4].tables, 1, "{s}");
    assert!(
        (measured - log).abs() <= 0.05 * log,
        "measured {measured:.3}, log_CS(N)+1 {log:.3}"
    );
}

/// Recovery time against the write buffer's size (LightKV (ICDE) §V): a buffer of
/// each size is filled to about 45% with 1 KiB values (below the high-water
/// mark that starts flushes), a checkpoint copies it (the region as a crash
/// would leave it had every store been durable), and opening the checkpoint
/// rebuilds the tree by scanning the buffer; closing it cleanly and opening
/// it again loads the clean shutdown's image instead.
/// A measurement, not a check: `LIGHTKV_RECOVERY_DIR=/tmp/... cargo test -p
/// sluicedb --test lightkv -- --ignored --nocapture recovery_time` on a
/// real file system (`FenceMode::Msync`).
#[test]
#[ignore = "a measurement: minutes, a real file system"]
fn recovery_time_against_buffer_size() {
    let root = std::path::PathBuf::from(
        std::env::var("LIGHTKV_RECOVERY_DIR").unwrap_or_else(|_| "/tmp/lightkv-recovery".into()),
    );
    let mb: Vec<u64> = std::env::var("LIGHTKV_RECOVERY_MIB")
        .unwrap_or_else(|_| "16 64 256".into())
        .split_whitespace()
        .map(|s| s.parse().expect("sizes in MiB"))
        .collect();
    for size_mib in mb {
        let dir = root.join(format!("db-{size_mib}"));
        let ckpt = root.join(format!("ckpt-{size_mib}"));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&ckpt);
        std::fs::create_dir_all(&root).unwrap();
        let opts =
            || sluicedb::Options::preset(Preset::LightKv).lightkv_buffer_bytes(size_mib << 20);
        let db = Db::open(&dir, opts()).unwrap();
        let value = vec![b'v'; 1024];
        // Below the half of free segments that starts flushes.
        let n = (size_mib << 20) * 45 / 100 / 1100;
        let t = std::time::Instant::now();
        for i in 0..n {
            // Keys spread over the whole tree: every top leaf takes some.
            let key = format!("{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            db.put(key, &value).unwrap();
        }
        let write_s = t.elapsed().as_secs_f64();
        db.checkpoint(&ckpt).unwrap();
        let flushes = db.stats().flush.flushes;
        drop(db);
        let t = std::time::Instant::now();
        let db = Db::open(&ckpt, opts().create_if_missing(false)).unwrap();
        let open_s = t.elapsed().as_secs_f64();
        let key = format!("{:016x}", (n - 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        assert_eq!(db.get(&key).unwrap().as_deref(), Some(&value[..]));
        assert!(!db.stats().index.shape.lightkv_image_loaded);
        drop(db);
        let t = std::time::Instant::now();
        let db = Db::open(&ckpt, opts().create_if_missing(false)).unwrap();
        let clean_s = t.elapsed().as_secs_f64();
        assert!(db.stats().index.shape.lightkv_image_loaded);
        assert_eq!(db.get(&key).unwrap().as_deref(), Some(&value[..]));
        drop(db);
        println!(
            "buffer {size_mib} MiB: {n} writes of 1 KiB in {write_s:.2} s ({flushes} flushes \
             before the checkpoint); reopen after a crash (scan and re-index) {:.1} ms, after \
             a clean close (image) {:.1} ms",
            open_s * 1000.0,
            clean_s * 1000.0
        );
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&ckpt);
    }
}

/// A buffer larger than the memory budget is refused at open, naming both
/// sizes: when the options name the preset (checked with the options) and
/// when they do not (checked as the buffer opens), and before the region is
/// created or allocated.
#[test]
fn a_buffer_larger_than_the_memory_budget_is_refused_at_open() {
    let fs = MemFs::new();
    let buffer = preset_options(&fs, Preset::LightKv).lightkv().buffer_bytes;
    let budget = buffer as usize / 2;
    let refused = |r: sluicedb::Result<Db>| match r {
        Err(sluicedb::Error::InvalidArgument(m)) => m,
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    let m = refused(Db::open(
        "/db",
        preset_options(&fs, Preset::LightKv).memory_budget_bytes(Some(budget)),
    ));
    assert!(
        m.contains(&buffer.to_string()) && m.contains(&budget.to_string()),
        "{m}"
    );
    assert!(fs.pm(Path::new("/db/LIGHTKV.pwb")).is_none());
    // Created within the budget, then reopened under a smaller one by
    // options that name no preset.
    let db = open(&fs);
    db.put(k(1), v(1, 0)).unwrap();
    drop(db);
    let o = sluicedb::Options::default()
        .fs(std::sync::Arc::new(fs.clone()))
        .index_shape(sluicedb::IndexShapeKind::Partitioned)
        .lightkv_buffer_bytes(buffer)
        .memory_budget_bytes(Some(budget));
    let m = refused(Db::open("/db", o));
    assert!(
        m.contains(&buffer.to_string()) && m.contains(&budget.to_string()),
        "{m}"
    );
    // An exbibyte buffer is larger than any machine here: refused before
    // the in-memory file system is asked for one.
    let huge = preset_options(&fs, Preset::LightKv).lightkv_buffer_bytes(1 << 60);
    let m = refused(Db::open("/db2", huge));
    assert!(m.contains("memory this process may use"), "{m}");
    let db = open(&fs);
    assert_eq!(db.get(k(1)).unwrap(), Some(v(1, 0)));
}

/// Recovery must not index a version the tables hold a newer version of
/// (`docs/design.md`, "LightKV: the preset", Recovery). A flushed put's
/// record outlives its leaf while another leaf names its segment: here a
/// leaf split off the same partition, never written again and so never
/// flushed. The key's newer versions went to segments that only flushed
/// leaves named, which were released. A pin in the tree's other initial
/// partition keeps the watermark `W` at 0, so recovery finds the old record
/// above it. Indexed, it would be what a point read finds in the buffer
/// (a scan merges buffer and tables by sequence number and hides it). The
/// layout arises in about half of the seeds; a recovery that indexes every
/// record (the skip removed) failed this test in 10 of 10 runs.
#[test]
fn recovery_skips_a_flushed_version_whose_newer_one_left_the_buffer() {
    for_seeds(seeds(0, 8), |seed| {
        let fs = MemFs::new();
        let db = open(&fs);
        let mut rng = Rng::new(seed);
        let mut model = std::collections::BTreeMap::new();
        let mut put = |k: Vec<u8>, v: Vec<u8>| {
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        };
        put(b"\xf0pin".to_vec(), b"pin".to_vec());
        // Keys of two halves of the tree's first partition, interleaved
        // ('0' is 0b0011_0000, 'H' 0b0100_1000: they part at the second
        // bit), written once: leaves fill and split, and a split leaves a
        // segment named by both halves' leaves.
        let cold = |i: u64| format!("0{i:04}").into_bytes();
        let hot = |i: u64| format!("H{i:04}").into_bytes();
        let n = 40 + rng.below(40);
        for i in 0..n {
            put(cold(i), v(i, 0));
            put(hot(i), v(i, 0));
        }
        // Then rounds over the hot half alone: the cold half's leaves are
        // never written again, so never flushed.
        for round in 1..=12 {
            for i in 0..n {
                put(hot(i), v(i, round));
            }
        }
        // New keys of the hot half push the hot keys' newest versions
        // through flushes, and their segments are released.
        for i in 0..200 {
            put(format!("H9{i:04}").into_bytes(), v(i, 13));
        }
        db.sync().unwrap();
        let image = fs.kill_image();
        drop(db);
        let db = open(&image);
        // Point reads ask the buffer first, and stop at what it holds.
        for (k, want) in &model {
            let got = db.get(k).unwrap();
            assert!(
                got.as_ref() == Some(want),
                "seed {seed}: {} read {:?} after the kill, written {:?}",
                String::from_utf8_lossy(k),
                got.map(|g| String::from_utf8_lossy(&g).into_owned()),
                String::from_utf8_lossy(want)
            );
        }
        assert!(
            read_all(&db).unwrap() == model,
            "seed {seed}: a scan differs"
        );
    });
}

/// On a real file system under `msync` fences the buffer's region is kept
/// in the process's memory as well (`MmapPm`'s image): the stats count it,
/// and under `FenceMode::Cache`, which keeps no image, they count nothing.
#[test]
fn the_buffers_image_in_memory_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let buffer = 4u64 << 20;
    for (fence, image) in [
        (sluicedb::pm::FenceMode::Msync, buffer),
        (sluicedb::pm::FenceMode::Cache, 0),
    ] {
        let path = dir.path().join(format!("{fence:?}"));
        let db = Db::open(
            &path,
            sluicedb::Options::preset(Preset::LightKv)
                .lightkv_buffer_bytes(buffer)
                .lightkv_fence(fence),
        )
        .unwrap();
        db.put(b"k", b"v").unwrap();
        let s = db.stats();
        let counted = s.index.shape.lightkv_buffer.as_ref().unwrap().memory_bytes;
        assert_eq!(counted, image, "{fence:?}");
        assert!(s.memory.accounted_bytes >= image, "{fence:?}");
    }
}
