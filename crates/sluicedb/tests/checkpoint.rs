//! Online checkpoints (`Db::checkpoint`, `docs/design.md`, "Checkpoints"):
//! under writers and GC every checkpoint of every preset opens, verifies and
//! holds a prefix of history with every write acknowledged before the call;
//! a crash at any file operation of a checkpoint leaves the source whole and
//! the checkpoint absent or whole; links refused, refusals, and the guard
//! against punching holes in a linked value log file.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use sluicedb::fs::{Fs, MemFs};
use sluicedb::{Db, Error, Preset, WriteOptions};

/// The key every write also sets to its own index: a checkpoint's value of
/// it names the prefix of history it holds.
const LAST: &[u8] = b"~last";

/// `n` writes over a small key space (overwrites and deletes, so that GC
/// finds garbage), values up to 300 bytes (so every preset separates
/// some), each also setting [`LAST`] to its index plus one.
fn history(seed: u64, n: usize) -> Vec<Write> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let mut ops = Vec::new();
            for _ in 0..1 + rng.below(3) {
                let k = key(&mut rng, 120);
                let v = (!rng.chance(10)).then(|| value(&mut rng, i as u64, 300));
                ops.push((k, v));
            }
            ops.push((LAST.to_vec(), Some((i + 1).to_string().into_bytes())));
            Write { ops, sync: false }
        })
        .collect()
}

/// How many writes of `writes` the state `got` holds, checked to be
/// exactly that prefix's state.
fn prefix_held(writes: &[Write], got: &State) -> usize {
    let n = got
        .get(LAST)
        .map_or(0, |v| String::from_utf8_lossy(v).parse().expect("a count"));
    assert_eq!(
        &state_after(writes, n),
        got,
        "the checkpoint's state is not that of the first {n} writes"
    );
    n
}

/// Opens the checkpoint at `dir` on `fs`, verifies it, and returns how many
/// writes it holds.
fn open_and_check(fs: &MemFs, preset: Preset, dir: &Path, writes: &[Write]) -> usize {
    let db = Db::open(dir, preset_options(fs, preset).create_if_missing(false))
        .unwrap_or_else(|e| panic!("{preset:?}: checkpoint {} opens: {e}", dir.display()));
    db.verify()
        .unwrap_or_else(|e| panic!("{preset:?}: checkpoint {} verifies: {e}", dir.display()));
    prefix_held(writes, &read_all(&db).expect("checkpoint reads"))
}

#[test]
fn checkpoints_under_writes_and_gc_hold_every_acknowledged_write() {
    for_seeds(seeds(560, 3), |seed| {
        for &preset in Preset::all() {
            let fs = MemFs::new();
            let writes = Arc::new(history(seed, 1500));
            let db = Db::open("/db", preset_options(&fs, preset)).unwrap();
            let acked = Arc::new(AtomicUsize::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let writer = {
                let (db, writes, acked) = (db.clone(), writes.clone(), acked.clone());
                std::thread::spawn(move || {
                    for w in writes.iter() {
                        db.write(w.batch()).unwrap();
                        acked.fetch_add(1, Ordering::SeqCst);
                    }
                })
            };
            let collector = {
                let (db, stop) = (db.clone(), stop.clone());
                std::thread::spawn(move || {
                    let (mut steps, mut after_stop) = (0u64, 0);
                    // On after the writer stops until a step collected
                    // something (a few hundred tries at most).
                    while !stop.load(Ordering::SeqCst) || (steps == 0 && after_stop < 300) {
                        after_stop += u32::from(stop.load(Ordering::SeqCst));
                        steps += db.gc().unwrap().chunks;
                        std::thread::yield_now();
                    }
                    steps
                })
            };
            let mut taken = Vec::new();
            for i in 0..4 {
                // Checkpoints spread over the writer's run (and one after).
                while i < 3 && acked.load(Ordering::SeqCst) < (i + 1) * writes.len() / 4 {
                    std::thread::yield_now();
                }
                if i == 3 {
                    writer_done(&acked, writes.len());
                }
                let before = acked.load(Ordering::SeqCst);
                let dir = PathBuf::from(format!("/ckpt-{i}"));
                db.checkpoint(&dir)
                    .unwrap_or_else(|e| panic!("{preset:?}: checkpoint {i}: {e}"));
                taken.push((dir, before));
            }
            writer.join().unwrap();
            stop.store(true, Ordering::SeqCst);
            let gc_runs = collector.join().unwrap() + db.stats().gc.runs;
            drop(db);
            for (dir, before) in &taken {
                let held = open_and_check(&fs, preset, dir, &writes);
                assert!(
                    held >= *before,
                    "{preset:?}: {} holds {held} writes, {before} were acknowledged before it",
                    dir.display()
                );
            }
            // The last came after every write.
            assert_eq!(taken[3].1, writes.len());
            // leveldb and lightkv keep values inline: no GC.
            if !matches!(preset, Preset::LevelDb | Preset::LightKv) {
                assert!(gc_runs > 0, "{preset:?}: GC never ran");
            }
        }
    });
}

fn writer_done(acked: &AtomicUsize, n: usize) {
    while acked.load(Ordering::SeqCst) < n {
        std::thread::yield_now();
    }
}

/// Writes `writes` into a new database on `fs`, the last synced, and
/// leaves it settled.
fn filled(fs: &MemFs, preset: Preset, writes: &[Write]) -> Db {
    let db = Db::open("/db", preset_options(fs, preset)).unwrap();
    for w in writes {
        db.write(w.batch()).unwrap();
    }
    db.sync().unwrap();
    db.wait_for_background().unwrap();
    db
}

/// A crash at every file operation of a checkpoint (synced images, and
/// images with torn unsynced tails): the source reopens with every write
/// (all were synced before), and the checkpoint's directory is absent or
/// opens whole with all of them.
#[test]
fn a_crash_during_a_checkpoint_leaves_the_source_whole_and_the_checkpoint_absent_or_whole() {
    for &preset in Preset::all() {
        for torn in [false, true] {
            let fs = MemFs::new();
            let writes = history(56, 400);
            let db = filled(&fs, preset, &writes);
            let dir = Path::new("/ckpt");
            fs.capture_images(torn);
            db.checkpoint(dir).unwrap();
            let images = fs.take_images();
            drop(db);
            assert!(images.len() > 10, "{preset:?}: {} images", images.len());
            let mut whole = 0;
            for (op, image) in &images {
                let what = format!("{preset:?}, torn {torn}, crash after operation {op}");
                {
                    let db = Db::open("/db", preset_options(image, preset))
                        .unwrap_or_else(|e| panic!("{what}: the source opens: {e}"));
                    let got = read_all(&db).unwrap();
                    assert_eq!(prefix_held(&writes, &got), writes.len(), "{what}");
                }
                if image.exists(dir) {
                    let held = open_and_check(image, preset, dir, &writes);
                    assert_eq!(held, writes.len(), "{what}");
                    whole += 1;
                }
            }
            assert!(whole > 0, "{preset:?}: the last image holds the checkpoint");
        }
    }
}

/// Where the file system refuses hard links, every file is copied, and the
/// checkpoint stays whole while the source goes on writing and collecting.
#[test]
fn without_hard_links_a_checkpoint_copies_every_file() {
    for &preset in Preset::all() {
        let fs = MemFs::new();
        fs.set_hard_links(false);
        let writes = history(7, 600);
        let db = filled(&fs, preset, &writes[..300]);
        let stats = db.checkpoint("/ckpt").unwrap();
        assert_eq!(stats.files_linked, 0, "{preset:?}");
        assert!(
            stats.files_copied > 2 && stats.bytes_copied > 0,
            "{preset:?}"
        );
        for w in &writes[300..] {
            db.write(w.batch()).unwrap();
        }
        db.compact_range(None, None).unwrap();
        for _ in 0..20 {
            if db.gc().unwrap().chunks == 0 {
                break;
            }
        }
        drop(db);
        assert_eq!(
            open_and_check(&fs, preset, Path::new("/ckpt"), &writes),
            300
        );
    }
}

/// With links, the immutable files are linked, not copied; the source's
/// later GC (which punches holes in the value log's tail, WiscKey, FAST '16, §3.3.2,
/// and deletes files) leaves the checkpoint whole: a file with a second
/// name is never punched.
#[test]
fn gc_after_a_checkpoint_never_changes_its_linked_files() {
    for &preset in Preset::all() {
        let fs = MemFs::new();
        let writes = history(11, 1600);
        // Value log files of many blocks, collected a few blocks at a time,
        // so that GC's releases punch the tail's file.
        let opts = || {
            preset_options(&fs, preset)
                .value_log_file_size_bytes(64 << 10)
                .gc_chunk_bytes(8 << 10)
        };
        let db = Db::open("/db", opts()).unwrap();
        for w in &writes[..800] {
            db.write(w.batch()).unwrap();
        }
        let stats = db.checkpoint("/ckpt").unwrap();
        assert!(stats.files_linked > 0, "{preset:?}: {stats:?}");
        for w in &writes[800..] {
            db.write(w.batch()).unwrap();
        }
        db.compact_range(None, None).unwrap();
        for _ in 0..100 {
            if db.gc().unwrap().chunks == 0 {
                break;
            }
        }
        db.wait_for_background().unwrap();
        assert_eq!(
            open_and_check(&fs, preset, Path::new("/ckpt"), &writes),
            800
        );
        drop(db);
        let db = Db::open("/db", opts()).unwrap();
        db.verify().unwrap();
        assert_eq!(prefix_held(&writes, &read_all(&db).unwrap()), 1600);
    }
}

/// A file with two names is not punched; with one again, it is.
#[test]
fn a_file_with_a_second_name_is_never_punched() {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/d")).unwrap();
    let mut f = fs.create(Path::new("/d/a")).unwrap();
    f.append(&vec![7u8; 3 * 4096]).unwrap();
    f.sync().unwrap();
    fs.link(Path::new("/d/a"), Path::new("/d/b")).unwrap();
    assert!(!fs.punch_hole(Path::new("/d/a"), 0, 8192).unwrap());
    assert_eq!(fs.read_all(Path::new("/d/b")).unwrap(), vec![7u8; 3 * 4096]);
    fs.remove(Path::new("/d/b")).unwrap();
    assert!(fs.punch_hole(Path::new("/d/a"), 0, 8192).unwrap());
    assert_eq!(fs.read_all(Path::new("/d/a")).unwrap()[..8192], [0u8; 8192]);
}

#[test]
fn refusals() {
    let fs = MemFs::new();
    let writes = history(3, 50);
    let db = filled(&fs, Preset::Adaptive, &writes);
    // The directory exists.
    fs.create_dir_all(Path::new("/there")).unwrap();
    assert!(matches!(
        db.checkpoint("/there"),
        Err(Error::AlreadyExists(_))
    ));
    // Another checkpoint holds the staging directory.
    fs.create_dir_all(Path::new("/busy.checkpoint-tmp"))
        .unwrap();
    let held = fs.lock(Path::new("/busy.checkpoint-tmp/LOCK")).unwrap();
    assert!(matches!(db.checkpoint("/busy"), Err(Error::Locked(_))));
    assert!(!fs.exists(Path::new("/busy")));
    drop(held);
    // What a checkpoint cut short left is cleared, and the next one is whole.
    let mut junk = fs
        .create(Path::new("/busy.checkpoint-tmp/000001.sst"))
        .unwrap();
    junk.append(b"left by a crash").unwrap();
    drop(junk);
    db.checkpoint("/busy").unwrap();
    assert!(!fs.exists(Path::new("/busy.checkpoint-tmp")));
    assert_eq!(
        open_and_check(&fs, Preset::Adaptive, Path::new("/busy"), &writes),
        50
    );
    drop(db);
    // A read-only open writes nothing, checkpoints included.
    let ro = Db::open("/db", preset_options(&fs, Preset::Adaptive).read_only(true)).unwrap();
    assert!(matches!(ro.checkpoint("/ro"), Err(Error::ReadOnly)));
    assert!(!fs.exists(Path::new("/ro")) && !fs.exists(Path::new("/ro.checkpoint-tmp")));
}

/// On the operating system's file system: tables and sealed value files
/// are hard links (they share the inode), and the checkpoint opens.
#[test]
fn on_a_real_file_system_immutable_files_are_linked() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    for preset in [Preset::WiscKey, Preset::Adaptive] {
        let src = tmp.path().join(format!("{preset:?}"));
        let opts = || {
            sluicedb::Options::preset(preset)
                .write_buffer_size_bytes(64 << 10)
                .value_log_file_size_bytes(64 << 10)
        };
        let db = Db::open(&src, opts()).unwrap();
        for i in 0..2000u32 {
            db.put(format!("k{i:05}"), vec![b'v'; 3000]).unwrap();
        }
        db.flush().unwrap();
        db.put_opt(&WriteOptions::synced(), "last", "one").unwrap();
        let dst = tmp.path().join(format!("{preset:?}-ckpt"));
        let stats = db.checkpoint(&dst).unwrap();
        assert!(stats.files_linked > 0, "{preset:?}: {stats:?}");
        let shared = std::fs::read_dir(&dst)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().metadata().unwrap().nlink() > 1)
            .count();
        assert_eq!(shared, stats.files_linked, "{preset:?}");
        drop(db);
        let db = Db::open(&dst, opts().create_if_missing(false)).unwrap();
        db.verify().unwrap();
        assert_eq!(db.get("k01999").unwrap(), Some(vec![b'v'; 3000]));
        assert_eq!(db.get("last").unwrap(), Some(b"one".to_vec()));
    }
}
