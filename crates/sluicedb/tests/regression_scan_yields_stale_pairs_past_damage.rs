//! A scan over a damaged table returned wrong pairs before it reported the
//! damage (issue 50): the merge stepped past the failed table, so the other
//! tables' older versions of its keys, and keys it had deleted, came out
//! before the `Corruption`. Here every table of a database of each preset
//! gets a byte flipped in each of its blocks in turn (strided positions,
//! closer than a block, plus the whole tail: index block and footer), and
//! every kind of scan must yield only correct pairs, in order, with no key
//! skipped, and then either end cleanly or end with a `Corruption` naming
//! the file.

mod common;

use std::path::PathBuf;

use common::*;
use sluicedb::fs::MemFs;
use sluicedb::{Db, Error, Preset};

/// Builds a database whose newer tables shadow and delete keys of older
/// ones: a compacted base, then overwrites and deletes in later tables.
fn build(preset: Preset) -> (MemFs, State) {
    let fs = MemFs::new();
    let db = Db::open("/db", preset_options(&fs, preset)).unwrap();
    let mut state = State::new();
    let put = |state: &mut State, i: u32, round: u32| {
        let k = format!("k{i:04}").into_bytes();
        // 40 to 340 bytes: inline and separated under every threshold.
        let len = 40 + ((i * 37 + round * 101) % 300) as usize;
        let mut v = format!("v{round}:{i}:").into_bytes();
        v.resize(len, b'a' + (round % 26) as u8);
        db.put(&k, &v).unwrap();
        state.insert(k, v);
    };
    for i in 0..300 {
        put(&mut state, i, 1);
    }
    db.compact_range(None, None).unwrap();
    for i in (0..300).step_by(3) {
        put(&mut state, i, 2);
    }
    for i in (1..300).step_by(7) {
        let k = format!("k{i:04}").into_bytes();
        db.delete(&k).unwrap();
        state.remove(&k);
    }
    db.flush().unwrap();
    for i in (0..300).step_by(5) {
        put(&mut state, i, 3);
    }
    db.flush().unwrap();
    db.wait_for_background().unwrap();
    drop(db);
    (fs, state)
}

/// Positions to flip in a table of `len` bytes: one every 97 bytes (blocks
/// are 256 bytes and more, so each block gets two or more), and each of
/// the last 48 (footer, index block end).
fn positions(len: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..len).step_by(97).collect();
    v.extend(len.saturating_sub(48)..len);
    v.sort_unstable();
    v.dedup();
    v
}

type Pair = (Vec<u8>, Vec<u8>);
type Item = sluicedb::Result<Pair>;
/// A scan's name, what it returned, what it should, and its limit.
type Scan<'a> = (&'a str, Vec<Item>, &'a [Pair], usize);

/// `got` must be the first pairs of `want`, in order, followed by nothing
/// (then it must be all of `want`, up to `limit`) or by one `Corruption`
/// naming a file. Returns whether it ended in an error.
fn check_scan(what: &str, got: Vec<Item>, want: &[(Vec<u8>, Vec<u8>)], limit: usize) -> bool {
    let n = got.len();
    for (i, item) in got.into_iter().enumerate() {
        match item {
            Ok(pair) => {
                let expected = want.get(i).unwrap_or_else(|| {
                    panic!(
                        "{what}: pair {i} ({}) past the end",
                        String::from_utf8_lossy(&pair.0)
                    )
                });
                assert!(
                    &pair == expected,
                    "{what}: pair {i} is {}={}, expected {}={}",
                    String::from_utf8_lossy(&pair.0),
                    String::from_utf8_lossy(&pair.1[..pair.1.len().min(12)]),
                    String::from_utf8_lossy(&expected.0),
                    String::from_utf8_lossy(&expected.1[..expected.1.len().min(12)]),
                );
            }
            Err(Error::Corruption { file, .. }) => {
                assert!(!file.as_os_str().is_empty(), "{what}: unnamed file");
                assert_eq!(i + 1, n, "{what}: items after the error");
                return true;
            }
            Err(e) => panic!("{what}: expected Corruption, got {e}"),
        }
    }
    assert_eq!(
        n,
        want.len().min(limit),
        "{what}: scan ended early without an error"
    );
    false
}

/// The pairs of a cursor from `seek(from)` forward, to the end or an error.
fn cursor_from(db: &Db, from: &[u8]) -> Vec<Item> {
    let mut c = db.iter();
    c.seek(from);
    let mut out = Vec::new();
    while c.valid() {
        match c.value() {
            Ok(v) => out.push(Ok((c.key().to_vec(), v.to_vec()))),
            Err(e) => return [out, vec![Err(e)]].concat(),
        }
        c.next();
    }
    if let Err(e) = c.status() {
        out.push(Err(e));
    }
    out
}

/// Every scan of the damaged database; returns how many ended in an error.
fn scan_every_way(db: &Db, state: &State, what: &str) -> usize {
    let all: Vec<(Vec<u8>, Vec<u8>)> = state.clone().into_iter().collect();
    let rev: Vec<_> = all.iter().rev().cloned().collect();
    let (lo, hi) = (b"k0100".to_vec(), b"k0200".to_vec());
    let mid: Vec<_> = all
        .iter()
        .filter(|(k, _)| *k >= lo && *k < hi)
        .cloned()
        .collect();
    let mid_rev: Vec<_> = mid.iter().rev().cloned().collect();
    let from: Vec<_> = all.iter().filter(|(k, _)| *k >= hi).cloned().collect();
    let scans: Vec<Scan<'_>> = vec![
        ("forward", db.range::<&[u8]>(..).collect(), &all, usize::MAX),
        (
            "backward",
            db.range::<&[u8]>(..).rev().collect(),
            &rev,
            usize::MAX,
        ),
        (
            "bounded",
            db.range(lo.clone()..hi.clone()).collect(),
            &mid,
            usize::MAX,
        ),
        (
            "bounded backward",
            db.range(lo.clone()..hi.clone()).rev().collect(),
            &mid_rev,
            usize::MAX,
        ),
        ("limit 2", db.range::<&[u8]>(..).limit(2).collect(), &all, 2),
        (
            "limit 2 backward",
            db.range::<&[u8]>(..).limit(2).rev().collect(),
            &rev,
            2,
        ),
        ("cursor", cursor_from(db, &hi), &from, usize::MAX),
    ];
    scans
        .into_iter()
        .filter(|(name, got, want, limit)| {
            check_scan(&format!("{what}, {name} scan"), got.clone(), want, *limit)
        })
        .count()
}

fn run(preset: Preset) {
    let (fs, state) = build(preset);
    let tables: Vec<PathBuf> = fs
        .paths()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .collect();
    assert!(tables.len() >= 2, "{preset:?}: {} tables", tables.len());
    let (mut flips, mut open_failed, mut scans_failed) = (0, 0, 0);
    for path in &tables {
        let original = fs.contents(path).unwrap();
        for pos in positions(original.len()) {
            let image = fs.crash_image();
            let mut data = original.clone();
            data[pos] ^= 0x20;
            image.set_contents(path, data);
            flips += 1;
            let what = format!("{preset:?}: {} byte {pos}", path.display());
            let db = match Db::open("/db", preset_options(&image, preset)) {
                Ok(db) => db,
                Err(Error::Corruption { .. }) => {
                    open_failed += 1;
                    continue;
                }
                Err(e) => panic!("{what}: open: {e}"),
            };
            scans_failed += scan_every_way(&db, &state, &what);
        }
    }
    println!("{preset:?}: {flips} flips in {} tables: open failed {open_failed}, scans ended in an error {scans_failed}", tables.len());
    assert!(scans_failed > 0, "{preset:?}: no scan met the damage");
}

#[test]
fn leveldb_scans_stop_at_damage() {
    run(Preset::LevelDb);
}

#[test]
fn wisckey_scans_stop_at_damage() {
    run(Preset::WiscKey);
}

#[test]
fn hashkv_scans_stop_at_damage() {
    run(Preset::HashKv);
}

#[test]
fn scavenger_scans_stop_at_damage() {
    run(Preset::Scavenger);
}

#[test]
fn unikv_scans_stop_at_damage() {
    run(Preset::UniKv);
}
