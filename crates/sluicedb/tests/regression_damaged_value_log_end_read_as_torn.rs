//! Bit rot at the end of the newest value log file, or of the journal,
//! was taken for a write a crash tore (issue 50, items 3 and 4): the
//! record was cut off at open, so keys whose table entries pointed into it
//! failed with "points into a value log file that GC collected" (or a
//! pointer past the file's end), and a damaged last journal record after a
//! clean close made the last write vanish without a word. Records the
//! database had synced before an installed edit, or before a clean close,
//! are never a torn tail: damage there is `Corruption` naming the file and
//! the record's offset.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use sluicedb::fs::MemFs;
use sluicedb::{Db, Error, JournalRecovery, Preset};

fn key(i: u32) -> Vec<u8> {
    format!("k{i:03}").into_bytes()
}

fn val(i: u32) -> Vec<u8> {
    vec![b'a' + (i % 26) as u8; 100 + i as usize]
}

/// The newest file with records among those ending in `ext`.
fn newest(fs: &MemFs, ext: &str) -> PathBuf {
    let mut files: Vec<PathBuf> = fs
        .paths()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .filter(|p| fs.contents(p).unwrap().len() > 16)
        .collect();
    files.sort();
    files.pop().expect("a file")
}

/// Flips a byte `back` bytes before the end of `path`.
fn flip_from_end(fs: &MemFs, path: &Path, back: usize) -> usize {
    let mut data = fs.contents(path).unwrap();
    let at = data.len() - back;
    data[at] ^= 0x04;
    fs.set_contents(path, data);
    at
}

fn corruption_in(r: sluicedb::Result<impl std::fmt::Debug>, path: &Path, what: &str) -> u64 {
    match r {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!(&file, path, "{what}: names the damaged file");
            offset
        }
        other => panic!(
            "{what}: expected Corruption in {}, got {other:?}",
            path.display()
        ),
    }
}

/// Tables point into the log's last record: it is not cut at open, the
/// key reads as damaged at its offset, every other key reads, and verify
/// names the file.
#[test]
fn a_damaged_last_value_record_that_tables_point_at_is_damage() {
    let fs = MemFs::new();
    let db = Db::open("/db", preset_options(&fs, Preset::WiscKey)).unwrap();
    for i in 0..50 {
        db.put(key(i), val(i)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_background().unwrap();
    drop(db);
    let vlog = newest(&fs, "vlog");
    let len = fs.contents(&vlog).unwrap().len();
    let at = flip_from_end(&fs, &vlog, 10);
    let db = Db::open("/db", preset_options(&fs, Preset::WiscKey)).unwrap();
    assert_eq!(
        fs.contents(&vlog).unwrap().len(),
        len,
        "the damaged record is not cut off"
    );
    let mut damaged = 0;
    for i in 0..50 {
        match db.get(key(i)) {
            Ok(v) => assert_eq!(v, Some(val(i)), "key {i}"),
            r => {
                let off = corruption_in(r, &vlog, "get");
                assert!(
                    off as usize <= at && at - (off as usize) < 200,
                    "offset {off}"
                );
                damaged += 1;
            }
        }
    }
    assert_eq!(damaged, 1, "exactly the key whose record was flipped");
    corruption_in(db.verify(), &vlog, "verify");
}

/// The log is the journal and nothing was flushed: after a clean close the
/// last record is damage (open refuses in the default mode, and point in
/// time recovers the history before it); after a crash it may be a torn
/// write, and the last write is dropped as before.
#[test]
fn a_damaged_last_value_record_after_a_clean_close_is_damage() {
    let fs = MemFs::new();
    let opts = |fs: &MemFs| preset_options(fs, Preset::WiscKey).write_buffer_size_bytes(1 << 20);
    let db = Db::open("/db", opts(&fs)).unwrap();
    for i in 0..20 {
        db.put(key(i), val(i)).unwrap();
    }
    db.flush().unwrap();
    for i in 20..30 {
        db.put(key(i), val(i)).unwrap();
    }
    let crashed = fs.crash_image(); // before the close: unsynced, torn
    drop(db);
    let vlog = newest(&fs, "vlog");
    flip_from_end(&fs, &vlog, 10);
    corruption_in(
        Db::open("/db", opts(&fs)),
        &vlog,
        "open after a clean close",
    );
    let db = Db::open(
        "/db",
        opts(&fs).journal_recovery(JournalRecovery::PointInTime),
    )
    .unwrap();
    let state = read_all(&db).unwrap();
    assert_eq!(state.len(), 29, "point in time: all but the damaged write");
    assert!(!state.contains_key(&key(29)));
    drop(db);
    // A crash without a sync: the end of the log is no one's promise.
    let db = Db::open("/db", opts(&crashed)).unwrap();
    assert!(read_all(&db).unwrap().len() >= 20);
}

/// The engine journal: its last batch damaged after a clean close is
/// `Corruption` (a seal record follows it); point in time recovers the
/// writes before it.
#[test]
fn a_damaged_last_journal_record_after_a_clean_close_is_damage() {
    let fs = MemFs::new();
    let opts = |fs: &MemFs| preset_options(fs, Preset::LevelDb).write_buffer_size_bytes(1 << 20);
    let db = Db::open("/db", opts(&fs)).unwrap();
    for i in 0..30 {
        db.put_opt(&sluicedb::WriteOptions::synced(), key(i), val(i))
            .unwrap();
    }
    drop(db);
    let journal = newest(&fs, "log");
    // The seal closing the journal is 20 bytes; flip inside the batch
    // before it.
    flip_from_end(&fs, &journal, 40);
    corruption_in(Db::open("/db", opts(&fs)), &journal, "open");
    let db = Db::open(
        "/db",
        opts(&fs).journal_recovery(JournalRecovery::PointInTime),
    )
    .unwrap();
    assert_eq!(read_all(&db).unwrap().len(), 29);
}
