//! Corruption test: flip bits in every kind of file (journal, tables —
//! data, filter, properties and index blocks and footer — manifest and
//! CURRENT). Every case must end in a `Corruption` error, or in a result
//! shown harmless: every read returns exactly the expected data. A wrong
//! value or a panic fails the test.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use sluicedb::fs::{Fs, MemFs};
use sluicedb::{Db, Error, JournalMode, JournalRecovery, Options, WriteOptions};

const VARIANT: u64 = 0;

/// Builds a database with tables in two levels, a manifest with several
/// edits and a journal holding the last writes (synced, not yet flushed).
fn build() -> (MemFs, Vec<Write>) {
    let fs = MemFs::new();
    let db = Db::open("/db", tiny_options(&fs, VARIANT)).unwrap();
    let mut rng = Rng::new(42);
    let mut writes = Vec::new();
    for i in 0..260u64 {
        let w = Write {
            ops: vec![(key(&mut rng, 120), Some(value(&mut rng, i, 60)))],
            sync: true,
        };
        db.write_opt(&WriteOptions::synced(), w.batch()).unwrap();
        writes.push(w);
        if i == 200 {
            db.compact_range(None, None).unwrap();
        }
        if i == 230 {
            db.flush().unwrap();
        }
    }
    db.wait_for_background().unwrap();
    drop(db);
    (fs, writes)
}

/// Reads everything every way; `Err` if any read reported an error.
fn read_everything(fs: &MemFs, mode: JournalRecovery) -> sluicedb::Result<State> {
    let db = Db::open("/db", tiny_options(fs, VARIANT).journal_recovery(mode))?;
    let all = read_all(&db)?;
    for (k, v) in &all {
        if db.get(k)?.as_ref() != Some(v) {
            panic!("get disagrees with scan for {}", String::from_utf8_lossy(k));
        }
    }
    db.verify()?;
    Ok(all)
}

fn kind(p: &Path) -> &'static str {
    let n = p.file_name().unwrap().to_str().unwrap();
    if n == "CURRENT" {
        "current"
    } else if n.starts_with("MANIFEST") {
        "manifest"
    } else if n.ends_with(".log") {
        "journal"
    } else if n.ends_with(".sst") {
        "table"
    } else {
        "other"
    }
}

/// Positions to flip: every byte of small files, a spread over larger
/// ones, and always the last 80 bytes (footers, block trailers, tails).
fn positions(len: usize) -> Vec<usize> {
    if len <= 600 {
        return (0..len).collect();
    }
    let mut v: Vec<usize> = (0..len).step_by(len / 400 + 1).collect();
    v.extend(len.saturating_sub(80)..len);
    v.sort_unstable();
    v.dedup();
    v
}

#[test]
fn bit_flips_in_every_file_type_are_detected_or_harmless() {
    let (fs, writes) = build();
    let full = state_after(&writes, writes.len());
    assert_eq!(
        read_everything(&fs.crash_image(), JournalRecovery::default()).unwrap(),
        full
    );
    let files: Vec<PathBuf> = fs.paths();
    let mut seen = std::collections::BTreeMap::<&str, (usize, usize)>::new();
    for path in &files {
        let k = kind(path);
        if k == "other" {
            continue;
        }
        let original = fs.contents(path).unwrap();
        for pos in positions(original.len()) {
            let image = fs.crash_image();
            let mut data = original.clone();
            data[pos] ^= 1 << (pos % 8);
            image.set_contents(path, data);
            let modes: &[JournalRecovery] = if k == "journal" {
                &[
                    JournalRecovery::TolerateCorruptedTail,
                    JournalRecovery::AbsoluteConsistency,
                ]
            } else {
                &[JournalRecovery::TolerateCorruptedTail]
            };
            for &mode in modes {
                let what = format!("{} byte {pos} ({mode:?})", path.display());
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    read_everything(&image.crash_image(), mode)
                }))
                .unwrap_or_else(|_| panic!("panic with a flip at {what}"));
                let entry = seen.entry(k).or_default();
                match r {
                    Err(Error::Corruption { file, .. }) => {
                        entry.0 += 1;
                        assert!(!file.as_os_str().is_empty(), "{what}: unnamed file");
                    }
                    Err(e @ Error::UnsupportedVersion { .. }) => {
                        entry.0 += 1;
                        assert!(k == "table" || k == "manifest", "{what}: {e}");
                    }
                    Err(e) => panic!("{what}: expected Corruption, got {e}"),
                    Ok(state) if state == full => entry.1 += 1,
                    Ok(state) => {
                        // Only the default journal mode may read damage in
                        // the final record as a torn write: the result is
                        // then history without that last write.
                        let torn_ok = k == "journal"
                            && mode == JournalRecovery::TolerateCorruptedTail
                            && state == state_after(&writes, writes.len() - 1);
                        assert!(torn_ok, "{what}: wrong data returned without an error");
                        entry.1 += 1;
                    }
                }
            }
        }
    }
    println!("flips per file type (detected, harmless): {seen:?}");
    for k in ["current", "manifest", "journal", "table"] {
        let (detected, _) = seen.get(k).copied().unwrap_or_default();
        assert!(detected > 0, "no flips detected in {k} files");
    }
}

#[test]
fn missing_table_is_reported_with_its_name() {
    let (fs, _) = build();
    let table = fs.paths().into_iter().find(|p| kind(p) == "table").unwrap();
    fs.remove(&table).unwrap();
    match Db::open(
        "/db",
        Options::default().fs(std::sync::Arc::new(fs.clone())),
    ) {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, table),
        Err(e) => panic!("expected Corruption, got {e}"),
        Ok(_) => panic!("open succeeded without a table"),
    }
}

/// Flips a byte in the middle of the journal (damage with valid records
/// after it) and checks what each recovery mode makes of it.
#[test]
fn journal_recovery_modes_on_mid_journal_damage() {
    let (fs, writes) = build();
    let journal = fs
        .paths()
        .into_iter()
        .find(|p| kind(p) == "journal")
        .unwrap();
    let mut data = fs.contents(&journal).unwrap();
    assert!(data.len() > 200, "journal should hold several records");
    let at = data.len() / 2;
    data[at] ^= 0x55;
    fs.set_contents(&journal, data);
    let open = |mode| {
        Db::open(
            "/db",
            tiny_options(&fs.crash_image(), VARIANT).journal_recovery(mode),
        )
    };
    for mode in [
        JournalRecovery::TolerateCorruptedTail,
        JournalRecovery::AbsoluteConsistency,
    ] {
        match open(mode) {
            Err(Error::Corruption { file, .. }) => assert_eq!(file, journal),
            Err(e) => panic!("{mode:?}: expected Corruption, got {e}"),
            Ok(_) => panic!("{mode:?}: mid-journal damage accepted"),
        }
    }
    // Point in time: a prefix of history, shorter than all of it.
    let db = open(JournalRecovery::PointInTime).unwrap();
    let got = read_all(&db).unwrap();
    let n = matching_prefix(&writes, 0, writes.len(), &got).expect("point-in-time is a prefix");
    assert!(n < writes.len());
    drop(db);
    // Salvage: opens, and keeps records after the damage (the last write).
    let db = open(JournalRecovery::SkipAnyCorrupted).unwrap();
    let last = &writes.last().unwrap().ops[0];
    assert_eq!(db.get(&last.0).unwrap(), last.1);
}

#[test]
fn missing_current_with_data_is_refused_not_recreated() {
    let (fs, writes) = build();
    let current = Path::new("/db/CURRENT");
    let saved = fs.contents(current).unwrap();
    fs.remove(current).unwrap();
    match Db::open("/db", tiny_options(&fs, VARIANT)) {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, current),
        Err(e) => panic!("expected Corruption, got {e}"),
        Ok(_) => panic!("a new database was created over existing data"),
    }
    // Nothing was deleted: putting CURRENT back restores everything.
    let mut f = fs.create(current).unwrap();
    f.append(&saved).unwrap();
    f.sync().unwrap();
    let db = Db::open("/db", tiny_options(&fs, VARIANT)).unwrap();
    assert_eq!(read_all(&db).unwrap(), state_after(&writes, writes.len()));
}

/// Bit flips in value log files: every read either returns the right value
/// or `Corruption` naming the log file (WiscKey, FAST '16, §3.3.3: never a wrong value),
/// with the engine journal and with the value log as the journal.
#[test]
fn bit_flips_in_value_log_files_are_detected_or_harmless() {
    for mode in [JournalMode::Journal, JournalMode::ValueLog] {
        flip_value_log_bits(mode);
    }
}

/// Offset of the last record in a value log file (`docs/format/value-log.md`:
/// 16-byte file header, records with a 21-byte header holding key and value
/// lengths at bytes 13 and 17).
fn last_record_offset(data: &[u8]) -> usize {
    let u32_at = |i: usize| u32::from_le_bytes(data[i..i + 4].try_into().unwrap()) as usize;
    let (mut pos, mut last) = (16, 16);
    while pos + 21 <= data.len() {
        last = pos;
        pos += 21 + u32_at(pos + 13) + u32_at(pos + 17);
    }
    last
}

fn flip_value_log_bits(mode: JournalMode) {
    let fs = MemFs::new();
    let opts = |fs: &MemFs| {
        tiny_options(fs, VARIANT)
            .separation_threshold_bytes(Some(0))
            .journal_mode(mode)
            .value_log_file_size_bytes(4096)
            .gc_garbage_ratio(None)
            // No background GC: the files written must stay to be damaged.
            .space_limit(None)
    };
    let db = Db::open("/db", opts(&fs)).unwrap();
    let mut rng = Rng::new(9);
    let mut writes = Vec::new();
    for i in 0..150u64 {
        let w = Write {
            ops: vec![(key(&mut rng, 60), Some(value(&mut rng, i, 60)))],
            sync: false,
        };
        db.write(w.batch()).unwrap();
        writes.push(w);
        if i == 100 {
            db.flush().unwrap();
        }
    }
    drop(db);
    let full = state_after(&writes, writes.len());
    let (mut detected, mut harmless) = (0, 0);
    let logs: Vec<PathBuf> = fs
        .paths()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "vlog"))
        .collect();
    assert!(logs.len() > 2, "several value log files");
    // The newest file with records: in value-log-as-journal mode, damage in
    // its last record reads as a torn write (the journal test's rule).
    let newest = logs
        .iter()
        .filter(|p| fs.contents(p).unwrap().len() > 16)
        .max()
        .unwrap()
        .clone();
    let torn_from = last_record_offset(&fs.contents(&newest).unwrap());
    let without_last = state_after(&writes, writes.len() - 1);
    for path in &logs {
        let original = fs.contents(path).unwrap();
        for pos in positions(original.len()) {
            let image = fs.crash_image();
            let mut data = original.clone();
            data[pos] ^= 1 << (pos % 8);
            image.set_contents(path, data);
            let what = format!("{} byte {pos}", path.display());
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let db = Db::open("/db", opts(&image))?;
                let all = read_all(&db)?;
                for (k, v) in &all {
                    assert_eq!(db.get(k)?.as_ref(), Some(v), "{what}");
                }
                Ok::<_, Error>(all)
            }))
            .unwrap_or_else(|_| panic!("panic with a flip at {what}"));
            match r {
                Err(Error::Corruption { file, .. }) => {
                    assert!(
                        file.to_string_lossy().ends_with(".vlog"),
                        "{what}: {file:?}"
                    );
                    detected += 1;
                }
                Err(e) => panic!("{what}: expected Corruption, got {e}"),
                Ok(state) => {
                    let torn = mode == JournalMode::ValueLog
                        && *path == newest
                        && pos >= torn_from
                        && state == without_last;
                    assert!(state == full || torn, "{what}: wrong data without an error");
                    harmless += 1;
                }
            }
        }
    }
    println!("value log flips ({mode:?}): {detected} detected, {harmless} harmless");
    assert!(detected > harmless, "most flips hit live records");
}
