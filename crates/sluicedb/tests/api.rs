//! The public API's contract on a small database.

use std::path::Path;
use std::sync::Arc;

use sluicedb::fs::MemFs;
use sluicedb::{Db, Error, Options, Preset, ReadOptions, ValueRef, WriteBatch, WriteOptions};

fn small(fs: &MemFs) -> Options {
    Options::default()
        .fs(Arc::new(fs.clone()))
        .write_buffer_size_bytes(8 * 1024)
        .target_file_size_bytes(16 * 1024)
        .base_level_size_bytes(64 * 1024)
        .block_size_bytes(512)
}

fn k(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

#[test]
fn put_get_delete_batch_and_reopen() {
    let fs = MemFs::new();
    let db = Db::open("/db", small(&fs)).unwrap();
    db.put("a", "1").unwrap();
    db.put("b", "2").unwrap();
    db.delete("a").unwrap();
    let mut b = WriteBatch::new();
    b.put("c", "3").put("b", "22").delete("zz");
    db.write_opt(&WriteOptions::synced(), b).unwrap();
    assert_eq!(db.get("a").unwrap(), None);
    assert_eq!(db.get("b").unwrap(), Some(b"22".to_vec()));
    assert_eq!(db.get("c").unwrap(), Some(b"3".to_vec()));
    drop(db);
    let db = Db::open("/db", small(&fs)).unwrap();
    assert_eq!(db.get("a").unwrap(), None);
    assert_eq!(db.get("b").unwrap(), Some(b"22".to_vec()));
    assert_eq!(db.get("c").unwrap(), Some(b"3".to_vec()));
}

#[test]
fn lock_and_existence_options() {
    let fs = MemFs::new();
    assert!(matches!(
        Db::open("/db", small(&fs).create_if_missing(false)),
        Err(Error::NotFound(_))
    ));
    let db = Db::open("/db", small(&fs)).unwrap();
    assert!(matches!(Db::open("/db", small(&fs)), Err(Error::Locked(_))));
    drop(db);
    assert!(matches!(
        Db::open("/db", small(&fs).error_if_exists(true)),
        Err(Error::AlreadyExists(_))
    ));
    let dir = tempfile::tempdir().unwrap();
    let d1 = Db::open(dir.path(), Options::default()).unwrap();
    assert!(matches!(
        Db::open(dir.path(), Options::default()),
        Err(Error::Locked(_))
    ));
    d1.put("x", "y").unwrap();
    drop(d1);
    let d2 = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(d2.get("x").unwrap(), Some(b"y".to_vec()));
}

#[test]
fn bad_input_is_rejected_and_loses_nothing() {
    let fs = MemFs::new();
    let db = Db::open("/db", small(&fs)).unwrap();
    db.put("keep", "me").unwrap();
    let big_key = vec![0u8; sluicedb::MAX_KEY_BYTES + 1];
    assert!(matches!(
        db.put(&big_key, "v"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Db::open("/x", small(&fs).max_write_buffers(1)),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(db.get("keep").unwrap(), Some(b"me".to_vec()));
    db.put("after", "ok").unwrap();
}

#[test]
fn many_writes_flush_compact_and_survive_reopen() {
    let fs = MemFs::new();
    let db = Db::open("/db", small(&fs)).unwrap();
    for i in 0..3000 {
        db.put(k(i), format!("value-{i}-{}", "x".repeat(50)))
            .unwrap();
    }
    for i in (0..3000).step_by(3) {
        db.delete(k(i)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_background().unwrap();
    let s = db.stats();
    assert!(s.flush.flushes > 0, "{s}");
    assert!(s.compaction.compactions > 0, "{s}");
    assert!(s.index.levels.iter().skip(1).any(|l| l.tables > 0), "{s}");
    let check = |db: &Db| {
        for i in 0..3000 {
            let want = (i % 3 != 0).then(|| format!("value-{i}-{}", "x".repeat(50)).into_bytes());
            assert_eq!(db.get(k(i)).unwrap(), want, "key {i}");
        }
        assert_eq!(db.range(k(0)..k(3000)).count(), 2000);
    };
    check(&db);
    db.compact_range(None, None).unwrap();
    check(&db);
    assert!(db.verify().unwrap() > 0);
    drop(db);
    let db = Db::open("/db", small(&fs)).unwrap();
    check(&db);
}

#[test]
fn snapshots_see_the_past() {
    let fs = MemFs::new();
    let db = Db::open("/db", small(&fs)).unwrap();
    db.put("k", "old").unwrap();
    let snap = db.snapshot();
    db.put("k", "new").unwrap();
    db.delete("gone").unwrap();
    for i in 0..2000 {
        db.put(k(i), "filler-filler-filler").unwrap();
    }
    db.compact_range(None, None).unwrap();
    let at = ReadOptions::at(&snap);
    assert_eq!(db.get_opt(&at, "k").unwrap(), Some(b"old".to_vec()));
    assert_eq!(db.get("k").unwrap(), Some(b"new".to_vec()));
    assert_eq!(db.range_opt(&at, k(0)..k(9999)).count(), 0);
    drop(snap);
}

#[test]
fn iterators_ranges_prefixes_and_reverse() {
    let fs = MemFs::new();
    let db = Db::open("/db", small(&fs)).unwrap();
    for i in 0..500 {
        db.put(k(i), i.to_string()).unwrap();
        if i == 250 {
            db.flush().unwrap();
        }
    }
    db.delete(k(10)).unwrap();
    let keys: Vec<Vec<u8>> = db.range(k(5)..k(15)).map(|r| r.unwrap().0).collect();
    let want: Vec<Vec<u8>> = (5..15).filter(|&i| i != 10).map(k).collect();
    assert_eq!(keys, want);
    let rev: Vec<Vec<u8>> = db.range(k(5)..=k(15)).rev().map(|r| r.unwrap().0).collect();
    let mut want_rev: Vec<Vec<u8>> = (5..=15).filter(|&i| i != 10).map(k).collect();
    want_rev.reverse();
    assert_eq!(rev, want_rev);
    // Both ends of one Range meet without repeating.
    let mut r = db.range(k(0)..k(4));
    let a = r.next().unwrap().unwrap().0;
    let d = r.next_back().unwrap().unwrap().0;
    let b = r.next().unwrap().unwrap().0;
    let c = r.next_back().unwrap().unwrap().0;
    assert_eq!([a, b, c, d], [k(0), k(1), k(2), k(3)]);
    assert!(r.next().is_none() && r.next_back().is_none());
    assert_eq!(db.prefix("key0001").count(), 100);
    let mut it = db.iter();
    it.seek("key000100x");
    assert_eq!(it.key(), k(101).as_slice());
    it.prev();
    assert_eq!(it.key(), k(100).as_slice());
    it.seek_for_prev("key000009z");
    assert_eq!(it.key(), k(9).as_slice());
    it.next();
    assert_eq!(it.key(), k(11).as_slice());
    it.seek_to_last();
    assert_eq!(it.key(), k(499).as_slice());
    assert!(it.status().is_ok());
}

#[test]
fn real_disk_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let p: &Path = dir.path();
    let opts = Options::default().write_buffer_size_bytes(64 * 1024);
    let db = Db::open(p, opts.clone()).unwrap();
    for i in 0..2000 {
        db.put(k(i), vec![b'v'; 100]).unwrap();
    }
    db.put_opt(&WriteOptions::synced(), "last", "x").unwrap();
    drop(db);
    let db = Db::open(p, opts).unwrap();
    assert_eq!(db.range(k(0)..k(2000)).count(), 2000);
    assert_eq!(db.get("last").unwrap(), Some(b"x".to_vec()));
}

#[test]
fn db_is_clone_send_sync() {
    fn check<T: Clone + Send + Sync + 'static>() {}
    check::<Db>();
    fn send<T: Send>() {}
    send::<sluicedb::DbIterator>();
    send::<sluicedb::Snapshot>();
}

#[test]
fn iterators_pin_their_tables_across_compaction() {
    let fs = MemFs::new();
    let db = Db::open("/db", small(&fs)).unwrap();
    for i in 0..2000 {
        db.put(k(i), vec![b'a'; 40]).unwrap();
    }
    db.flush().unwrap();
    let mut it = db.iter();
    it.seek_to_first();
    // Rewrite everything and compact: the tables the cursor reads become
    // obsolete, but must stay readable until it is dropped.
    for i in 0..2000 {
        db.put(k(i), vec![b'b'; 40]).unwrap();
    }
    db.compact_range(None, None).unwrap();
    let mut n = 0;
    while it.valid() {
        assert_eq!(it.value().unwrap(), vec![b'a'; 40].as_slice());
        n += 1;
        it.next();
    }
    it.status().unwrap();
    assert_eq!(n, 2000);
    drop(it);
    db.compact_range(None, None).unwrap();
    assert_eq!(db.get(k(7)).unwrap(), Some(vec![b'b'; 40]));
}

#[test]
fn stats_count_user_bytes_and_io() {
    let fs = MemFs::new();
    let db = Db::open("/db", small(&fs)).unwrap();
    for i in 0..500 {
        db.put(k(i), vec![b'x'; 100]).unwrap();
    }
    db.flush().unwrap();
    let s = db.stats();
    assert_eq!(s.writes.user_ops_written, 500);
    assert_eq!(s.writes.user_bytes_written, 500 * (9 + 100));
    assert!(s.write_amplification() > 1.0, "{s}");
    assert!(s.io.written(sluicedb::fs::IoClass::Journal) >= s.writes.user_bytes_written);
    assert!(s.io.written(sluicedb::fs::IoClass::Flush) > 0);
}

/// The manifest records the preset a database was created with, through
/// reopens under other options and manifest rolls; a named preset other than
/// the recorded one is refused, naming both, while the default options open
/// a database of any preset.
#[test]
fn the_creating_preset_is_recorded() {
    let fs = MemFs::new();
    let opts = |p: Preset| {
        Options::preset(p)
            .fs(Arc::new(fs.clone()))
            .max_manifest_bytes(1024)
    };
    let db = Db::open("/db", opts(Preset::HashKv)).unwrap();
    assert_eq!(db.created_with(), Some(Preset::HashKv));
    // Enough flushes to roll the 1 KiB manifest several times.
    for i in 0..40u32 {
        db.put(format!("k{i}"), vec![b'x'; 300]).unwrap();
        db.flush().unwrap();
    }
    drop(db);
    for (other, read_only) in [
        (Preset::LevelDb, false),
        (Preset::Adaptive, false),
        (Preset::Scavenger, true),
        // Another index shape: still the presets named, not the shapes.
        (Preset::UniKv, false),
    ] {
        match Db::open("/db", opts(other).read_only(read_only)).err() {
            Some(Error::InvalidArgument(m)) => assert!(
                m.contains("created with preset hashkv")
                    && m.contains(&format!("name preset {}", other.name())),
                "{m}"
            ),
            e => panic!("{} opened a hashkv database: {e:?}", other.name()),
        }
    }
    // The refusals wrote nothing: the recorded preset and the data stay.
    let db = Db::open("/db", opts(Preset::HashKv)).unwrap();
    assert_eq!(db.get("k7").unwrap(), Some(vec![b'x'; 300]));
    drop(db);
    let db = Db::open(
        "/db",
        Options::default()
            .fs(Arc::new(fs.clone()))
            .max_manifest_bytes(1024),
    )
    .unwrap();
    assert_eq!(db.created_with(), Some(Preset::HashKv));
    assert_eq!(db.get("k7").unwrap(), Some(vec![b'x'; 300]));
    assert!(db
        .stats()
        .to_string()
        .starts_with("created with preset hashkv\n"));
    drop(db);
    let other = Db::open("/other", opts(Preset::WiscKey)).unwrap();
    assert_eq!(other.created_with(), Some(Preset::WiscKey));
    // Read without opening, on the standard file system.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("db");
    assert!(matches!(Db::recorded_preset(&p), Err(Error::NotFound(_))));
    drop(Db::open(&p, Options::preset(Preset::HashKv)).unwrap());
    assert_eq!(Db::recorded_preset(&p).unwrap(), Some(Preset::HashKv));
}

/// `Range::limit` returns what `take` would, from either end, and its
/// read-ahead reads the values of the pairs wanted only: far fewer value
/// bytes than growing windows, which read 16 values past the first two.
#[test]
fn limited_ranges_read_ahead_only_what_they_return() {
    use sluicedb::fs::IoClass;
    let fs = MemFs::new();
    let db = Db::open(
        "/db",
        Options::preset(Preset::WiscKey).fs(Arc::new(fs.clone())),
    )
    .unwrap();
    for i in 0..200 {
        db.put(k(i), vec![b'0' + (i % 10) as u8; 1000]).unwrap();
    }
    db.flush().unwrap();
    let take: Vec<_> = db.range(k(50)..).take(5).map(|r| r.unwrap()).collect();
    let user_read = |db: &Db| db.stats().io.read(IoClass::UserRead);
    let before = user_read(&db);
    let limited: Vec<_> = db.range(k(50)..).limit(5).map(|r| r.unwrap()).collect();
    let limited_bytes = user_read(&db) - before;
    assert_eq!(limited, take);
    let before = user_read(&db);
    let _: Vec<_> = db.range(k(50)..).take(5).map(|r| r.unwrap()).collect();
    let take_bytes = user_read(&db) - before;
    assert!(
        limited_bytes >= 5 * 1000 && limited_bytes * 2 < take_bytes,
        "limit(5) read {limited_bytes} bytes, take(5) {take_bytes}"
    );
    // From the back, both ends, and limits at and past the range's size.
    let back: Vec<_> = db
        .range(..k(150))
        .limit(7)
        .rev()
        .map(|r| r.unwrap())
        .collect();
    let want: Vec<_> = (143..150).rev().map(k).collect();
    assert_eq!(back.iter().map(|p| p.0.clone()).collect::<Vec<_>>(), want);
    let mut both = db.range(k(10)..k(20)).limit(4);
    let firsts = [both.next(), both.next_back(), both.next(), both.next_back()];
    let got: Vec<_> = firsts.into_iter().map(|p| p.unwrap().unwrap().0).collect();
    assert_eq!(got, vec![k(10), k(19), k(11), k(18)]);
    assert!(both.next().is_none() && both.next_back().is_none());
    assert_eq!(db.range(k(10)..k(20)).limit(10).count(), 10);
    assert_eq!(db.range(k(10)..k(20)).limit(50).count(), 10);
    assert_eq!(db.range(k(10)..k(20)).limit(0).count(), 0);
}

/// Reads are counted by whose they are: a flush's lookups of the versions
/// its keys shadow, compactions and GC's validity checks are not user
/// reads. Before the class reached the table lookup, every point lookup of
/// the key index counted as a user read: at 5 GiB the hashkv update phases
/// showed 28.8 GB of "user" reads and no user had read anything.
#[test]
fn background_work_reads_nothing_as_a_user() {
    use sluicedb::fs::IoClass;
    for preset in [Preset::HashKv, Preset::WiscKey, Preset::UniKv] {
        let fs = MemFs::new();
        let db = Db::open("/db", Options::preset(preset).fs(Arc::new(fs.clone()))).unwrap();
        for round in 0..4u8 {
            for i in 0..300 {
                db.put(k(i), vec![b'a' + round; 300]).unwrap();
            }
            db.flush().unwrap();
            db.gc().unwrap();
        }
        db.compact_range(None, None).unwrap();
        db.wait_for_background().unwrap();
        let s = db.stats();
        // unikv's flushes find its keys in the hash index and read
        // nothing; its merges read as compactions.
        let background = [IoClass::Flush, IoClass::Gc, IoClass::Compaction];
        assert!(
            background.iter().map(|&c| s.io.read(c)).sum::<u64>() > 0,
            "{preset:?}: no background work read anything, so nothing is tested\n{s}"
        );
        assert_eq!(s.io.read(IoClass::UserRead), 0, "{preset:?}\n{s}");
        assert_eq!(db.get(k(7)).unwrap(), Some(vec![b'd'; 300]));
        assert!(db.stats().io.read(IoClass::UserRead) > 0, "{preset:?}");
    }
}

/// The default places each version of a key by its own size: a value of
/// the threshold (2 KiB) or more leaves the index at its flush, a smaller
/// one stays inline, so a key whose value grows moves out and one whose
/// value shrinks moves back. Across crashes after synced writes the key
/// reads its newest value, and the flushes count what they decided.
#[test]
fn the_default_moves_a_key_in_and_out_of_separation_across_crashes() {
    let threshold = sluicedb::defaults::DEFAULT_ADAPTIVE_SEPARATION_THRESHOLD_BYTES;
    assert_eq!(
        Options::default().values().separation_threshold_bytes,
        Some(threshold)
    );
    let mut fs = MemFs::new();
    let sizes = [
        10,
        threshold,
        threshold - 1,
        3 * threshold,
        0,
        threshold + 1,
        100,
    ];
    let (mut separated, mut inline) = (0, 0);
    for round in 0..3u8 {
        for (i, &len) in sizes.iter().enumerate() {
            let value = vec![b'a' + round * 7 + i as u8; len];
            let db = Db::open("/db", small(&fs)).unwrap();
            db.put_opt(&WriteOptions::synced(), "moving", &value)
                .unwrap();
            // A neighbour that stays put, on either side of the threshold.
            db.put("large", vec![b'L'; 2 * threshold]).unwrap();
            db.put("small", b"s").unwrap();
            db.flush().unwrap();
            let flushed = db.stats().flush.separation;
            assert_eq!(flushed.threshold_bytes, Some(threshold));
            // This open flushed three values: the moving key's, the large
            // neighbour's and the small one's.
            let large = 1 + usize::from(len >= threshold);
            assert_eq!(flushed.separated, large as u64, "round {round} size {len}");
            assert_eq!(
                flushed.kept_inline,
                3 - large as u64,
                "round {round} size {len}"
            );
            separated += flushed.separated;
            inline += flushed.kept_inline;
            // A crash: only what was synced (and flushed) survives.
            fs = fs.crash_image();
            drop(db);
            let db = Db::open("/db", small(&fs)).unwrap();
            assert_eq!(
                db.get("moving").unwrap(),
                Some(value.clone()),
                "round {round} size {len}"
            );
            assert_eq!(db.get("large").unwrap(), Some(vec![b'L'; 2 * threshold]));
            db.verify().unwrap();
            // Garbage collected, the key still reads its newest value.
            db.gc().unwrap();
            assert_eq!(
                db.get("moving").unwrap(),
                Some(value),
                "round {round} size {len}"
            );
        }
    }
    assert!(
        separated > 0 && inline > 0,
        "{separated} separated, {inline} inline"
    );
}

/// Opening a database where a regular file is says so, and leaves the
/// file alone (it said "I/O error during mkdir ... File exists").
#[test]
fn opening_a_regular_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"data").unwrap();
    let Err(e) = Db::open(&file, Options::default()) else {
        panic!("a file is no database");
    };
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("not a directory"), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"data");
}

/// `Db::sync` is a journal sync, and `Stats` counts it as one.
#[test]
fn db_sync_is_counted_as_a_journal_sync() {
    let fs = MemFs::new();
    let db = Db::open("/db", small(&fs)).unwrap();
    db.put("k", "v").unwrap();
    let before = db.stats().writes.journal_syncs;
    db.sync().unwrap();
    db.sync().unwrap();
    assert_eq!(db.stats().writes.journal_syncs, before + 2);
}

/// The totals over a database's life (`Stats::totals`) survive reopens and
/// manifest rolls: what the user wrote counts once, what the engine wrote
/// only grows, and a read-only open reports what the manifest recorded.
#[test]
fn totals_since_creation_survive_reopens() {
    let fs = MemFs::new();
    let opts = || {
        Options::default()
            .fs(Arc::new(fs.clone()))
            .max_manifest_bytes(1024)
    };
    let db = Db::open("/db", opts()).unwrap();
    let t = db.stats().totals;
    assert_eq!((t.user_bytes_written, t.since_sequence), (0, 0));
    drop(db);
    let (mut user, mut written) = (0u64, 0u64);
    for round in 0..3 {
        let db = Db::open("/db", opts()).unwrap();
        for i in 0..40u32 {
            let key = format!("r{round}k{i}");
            db.put(&key, vec![b'v'; 200]).unwrap();
            user += key.len() as u64 + 200;
            if i % 10 == 9 {
                db.flush().unwrap();
            }
        }
        let t = db.stats().totals;
        assert_eq!(t.user_bytes_written, user, "round {round}");
        assert_eq!(t.since_sequence, 0);
        // The journal alone writes every user byte, the tables again.
        assert!(t.bytes_written > written + 40 * 200, "round {round}: {t:?}");
        assert!(t.write_amplification() > 1.0);
        drop(db);
        let ro = Db::open("/db", opts().read_only(true)).unwrap();
        let r = ro.stats().totals;
        assert_eq!(r.user_bytes_written, user, "round {round}");
        // Past the last round's; the close may record more than `t` saw.
        assert!(
            r.bytes_written > written,
            "round {round}: {r:?} after {written}"
        );
        assert!(ro.stats().to_string().contains(&format!(
            "since creation: user writes {user} bytes  written {} bytes",
            r.bytes_written
        )));
        written = r.bytes_written;
    }
}

/// `Db::peek_opt` answers a value's size under every preset, from the
/// memtable and from the tables, inline or separated: the server decides
/// by it whether a key it overwrites held a collection, and a wrong length
/// (each value layout records its own) would have it read or skip the
/// wrong records.
#[test]
fn peek_gives_the_value_size_under_every_preset() {
    for p in Preset::all() {
        let o = Options::preset(*p).fs(Arc::new(MemFs::new()));
        let db = Db::open("/db", o).unwrap();
        for n in [10usize, 600, 3000, 20000] {
            let k = format!("key{n}");
            db.put(&k, vec![7u8; n]).unwrap();
            for when in ["in the memtable", "flushed"] {
                if when == "flushed" {
                    db.flush().unwrap();
                    db.wait_for_background().unwrap();
                }
                match db.peek_opt(&ReadOptions::default(), &k).unwrap() {
                    Some(ValueRef::Inline(v)) => assert_eq!(v, vec![7u8; n], "{p:?}, {n} B {when}"),
                    Some(ValueRef::Separated { value_bytes }) => {
                        assert_eq!(value_bytes, n as u64, "{p:?}, {n} B {when}")
                    }
                    other => panic!("{p:?}, {n} B {when}: {other:?}"),
                }
            }
        }
    }
}

/// The default merges L0 from 8 tables while writes flow and from 4 once
/// user reads have paid for the merge (`docs/design.md`, "L0 merged for
/// reads"): reads alone wake the background threads for it, and the
/// merge loses nothing.
#[test]
fn reads_merge_the_l0_tables_writes_left_below_their_trigger() {
    let fs = MemFs::new();
    let db = Db::open("/db", small(&fs)).unwrap();
    let value = |round: u32, i: u32| format!("value-{round}-{i}-{}", "y".repeat(40));
    // Six flushes of 50 keys each, their ranges overlapping (under the
    // 8 KiB write buffer with the memtable's own bytes): six L0 tables,
    // below the trigger of 8. A key of round r is read past the 5 - r
    // newer tables whose ranges hold it.
    for round in 0..6 {
        for i in 0..50 {
            db.put(k(i * 6 + round), value(round, i)).unwrap();
        }
        db.flush().unwrap();
    }
    db.wait_for_background().unwrap();
    let s = db.stats();
    assert_eq!(s.flush.flushes, 6, "{s}");
    assert_eq!(s.index.levels[0].tables, 6, "{s}");
    assert_eq!(s.index.shape.l0_read_merges, 0, "{s}");
    let want = |key: u32| value(key % 6, key / 6).into_bytes();
    // Reads of the newest three rounds' keys meet at most the three tables
    // a merge from the read trigger of 4 would leave: they pay nothing,
    // however many (YCSB's workload D).
    for _ in 0..100 {
        for key in (0..300).filter(|key| key % 6 >= 3) {
            assert_eq!(db.get(k(key)).unwrap(), Some(want(key)), "key {key}");
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    let s = db.stats();
    assert_eq!(s.index.levels[0].tables, 6, "{s}");
    assert_eq!(s.index.shape.l0_read_merges, 0, "{s}");
    // Reads of every key, without waiting for the background threads:
    // their wake-up runs the merge.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut reads = 0u64;
    while db.stats().index.levels[0].tables >= 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "{reads} reads and L0 still holds its tables: {}",
            db.stats()
        );
        for key in 0..300 {
            assert_eq!(db.get(k(key)).unwrap(), Some(want(key)), "key {key}");
            reads += 1;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let s = db.stats();
    assert_eq!(s.index.shape.l0_read_merges, 1, "{s}");
    assert!(
        s.to_string().contains("L0 merged for reads since open: 1"),
        "{s}"
    );
    for key in 0..300 {
        assert_eq!(
            db.get(k(key)).unwrap(),
            Some(want(key)),
            "key {key} after the merge"
        );
    }
    assert_eq!(db.range(k(0)..k(300)).count(), 300);
}
