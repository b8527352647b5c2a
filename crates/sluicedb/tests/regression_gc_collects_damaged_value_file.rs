//! GC met a damaged record at the end of the oldest sealed `.vlog`, took it
//! for a torn tail, collected the file and the damage disappeared; keys
//! pointing into it then failed (outside test of issue 15). Recovery now
//! cuts what a crash tears, so GC takes an incomplete record in a sealed
//! file for damage; and an open refuses a file shorter than the manifest
//! sealed it.

mod wisckey_files;

use sluicedb::Db;
use wisckey_files::*;

fn u32_at(data: &[u8], at: usize) -> usize {
    u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize
}

/// The offset of the last record of a value log file: after a 16-byte
/// header, records of `crc u32 | seq u64 | flags u8 | key_len u32 |
/// value_len u32 | key | value` (`docs/format/value-log.md`).
fn last_record(data: &[u8]) -> usize {
    let mut pos = 16;
    loop {
        let len = 21 + u32_at(data, pos + 13) + u32_at(data, pos + 17);
        assert!(len > 21, "records hold a key");
        if pos + len >= data.len() {
            return pos;
        }
        pos += len;
    }
}

#[test]
fn regression_gc_stops_at_an_incomplete_record_in_a_sealed_file() {
    let fs = sluicedb::fs::MemFs::new();
    let files = filled(&fs);
    drop(Db::open("/db", wisckey(&fs)).unwrap());
    // The last record's value length now reaches past the end of the
    // file: an incomplete record, the file's length unchanged.
    let oldest = &files[0];
    let mut data = fs.contents(oldest).unwrap();
    let at = last_record(&data);
    data[at + 17..at + 21].copy_from_slice(&(1u32 << 30).to_le_bytes());
    fs.set_contents(oldest, data);
    let db = Db::open("/db", wisckey(&fs)).unwrap();
    let file = corrupt_file(db.gc(), "gc of a damaged file");
    assert_eq!(&file, oldest);
    assert!(fs.contents(oldest).is_some(), "GC deleted the damaged file");
    drop(db);
    // Nothing was collected: every other key still reads.
    let db = Db::open("/db", wisckey(&fs)).unwrap();
    let readable = (0..KEYS)
        .filter(|&i| db.get(key(i)).ok().flatten() == Some(value(i)))
        .count();
    assert_eq!(readable, KEYS as usize - 1);
}

#[test]
fn regression_open_refuses_a_truncated_sealed_file() {
    let fs = sluicedb::fs::MemFs::new();
    let files = filled(&fs);
    drop(Db::open("/db", wisckey(&fs)).unwrap());
    let oldest = &files[0];
    let mut data = fs.contents(oldest).unwrap();
    // Cut on a record boundary, so that no incomplete record shows it.
    data.truncate(last_record(&data));
    fs.set_contents(oldest, data);
    let file = corrupt_file(Db::open("/db", wisckey(&fs)), "open of a truncated file");
    assert_eq!(&file, oldest);
}
