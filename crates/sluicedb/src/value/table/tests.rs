use std::path::PathBuf;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::builder::{BuiltValueTable, ValueTableBuilder, ValueTableOptions};
use super::format::{RecordHandle, VT_HEADER_LEN};
use super::reader::{CoalescedReader, IndexEntry, ValueTable};
use crate::fs::{CountingFs, IoClass, MemFs};
use crate::record::{Record, FLAG_GC_COPY, KIND_DELETE, KIND_PUT};
use crate::table::BlockCache;

const OPTS: ValueTableOptions = ValueTableOptions {
    index_block_bytes: 256,
    restart_interval: 4,
    bloom_bits_per_key: 10,
};

fn fs() -> CountingFs {
    CountingFs::new(Arc::new(MemFs::new()))
}

/// Builds `/t.vst` from `(key, seq, value)` in the given order.
fn build(
    fs: &CountingFs,
    records: &[(Vec<u8>, u64, Vec<u8>)],
    hot: bool,
) -> (BuiltValueTable, Vec<RecordHandle>) {
    let file = fs.create(&path(), IoClass::Flush).unwrap();
    let mut b = ValueTableBuilder::new(file, OPTS, hot).unwrap();
    let handles = records
        .iter()
        .map(|(k, seq, v)| {
            b.add(&Record {
                seq: *seq,
                flags: KIND_PUT,
                key: k,
                value: v,
            })
            .unwrap()
        })
        .collect();
    (b.finish().unwrap(), handles)
}

fn path() -> PathBuf {
    PathBuf::from("/t.vst")
}

fn open(fs: &CountingFs, size: u64) -> crate::error::Result<ValueTable> {
    ValueTable::open(fs, path(), 9, size, Arc::new(BlockCache::new(1 << 20)))
}

/// Sorted records: keys with one to three versions (newest first), values
/// of 0..300 bytes.
fn records(rng: &mut StdRng, keys: usize) -> Vec<(Vec<u8>, u64, Vec<u8>)> {
    let mut out = Vec::new();
    for i in 0..keys {
        let key = format!("key{:06}", i * 7).into_bytes();
        let versions = rng.gen_range(1..=3u64);
        let top = rng.gen_range(10..1_000_000u64);
        for v in 0..versions {
            let len = rng.gen_range(0..300);
            let value: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            out.push((key.clone(), top - v * 3, value));
        }
    }
    out
}

#[test]
fn lookups_index_and_coalesced_reads_match_what_was_written() {
    for seed in 0..8u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let fs = fs();
        let recs = records(&mut rng, 1 + seed as usize * 40);
        let (built, handles) = build(&fs, &recs, seed % 2 == 0);
        let t = open(&fs, built.file_size).unwrap();
        assert_eq!(t.is_hot(), seed % 2 == 0, "seed {seed}");
        assert_eq!(t.properties().records, recs.len() as u64, "seed {seed}");
        assert_eq!(t.verify().unwrap(), recs.len() as u64, "seed {seed}");
        for ((k, seq, _), h) in recs.iter().zip(&handles) {
            assert_eq!(
                t.find(k, *seq, IoClass::UserRead).unwrap(),
                Some(*h),
                "seed {seed}"
            );
            // Another sequence of the same key, and an absent key.
            assert_eq!(
                t.find(k, seq + 1, IoClass::UserRead).unwrap(),
                None,
                "seed {seed}"
            );
            let mut absent = k.clone();
            absent.push(b'x');
            assert_eq!(
                t.find(&absent, *seq, IoClass::UserRead).unwrap(),
                None,
                "seed {seed}"
            );
        }
        let (entries, index_bytes) = t.index_entries(IoClass::Gc).unwrap();
        assert!(index_bytes > 0, "seed {seed}");
        let expect: Vec<IndexEntry> = recs
            .iter()
            .zip(&handles)
            .map(|((k, seq, _), h)| IndexEntry {
                key: k.clone(),
                seq: *seq,
                handle: *h,
            })
            .collect();
        assert_eq!(entries, expect, "seed {seed}");
        // A random subset, read with coalescing: every chosen value, in
        // order, and fewer bytes than the whole record area when sparse.
        let chosen: Vec<IndexEntry> = entries
            .iter()
            .filter(|_| rng.gen_bool(0.3))
            .cloned()
            .collect();
        let mut seen = Vec::new();
        let read = t
            .read_coalesced(&chosen, 64, IoClass::Gc, |e, _, r| {
                seen.push((e.key.clone(), r.seq, r.value.to_vec()));
                Ok(())
            })
            .unwrap();
        let want: Vec<_> = recs
            .iter()
            .filter(|(k, seq, _)| chosen.iter().any(|e| &e.key == k && e.seq == *seq))
            .cloned()
            .collect();
        assert_eq!(seen, want, "seed {seed}");
        let chosen_bytes: u64 = chosen.iter().map(|e| u64::from(e.handle.len)).sum();
        assert!(read >= chosen_bytes, "seed {seed}");
        assert!(read <= built.properties.records_end, "seed {seed}");
        // A cursor held to runs of one byte reads each record alone: the
        // same records, and not a byte between them.
        let mut cursor = CoalescedReader::new(&t, &chosen, u64::MAX, IoClass::Gc).with_max_read(1);
        let mut alone = Vec::new();
        while let Some((e, _, r)) = cursor.next().unwrap() {
            assert_eq!((e.key.as_slice(), e.seq), (r.key, r.seq), "seed {seed}");
            alone.push((r.key.to_vec(), r.seq, r.value.to_vec()));
        }
        assert_eq!(alone, want, "seed {seed}");
        assert_eq!(cursor.bytes_read, chosen_bytes, "seed {seed}");
        for e in chosen.iter().take(5) {
            let r = t.read(e, IoClass::UserRead).unwrap();
            assert_eq!(
                (r.key.as_slice(), r.seq),
                (e.key.as_slice(), e.seq),
                "seed {seed}"
            );
        }
    }
}

#[test]
fn builder_refuses_disorder_non_puts_and_empty_tables() {
    let fs = fs();
    let mut b =
        ValueTableBuilder::new(fs.create(&path(), IoClass::Flush).unwrap(), OPTS, false).unwrap();
    let put = |key: &'static [u8], seq| Record {
        seq,
        flags: KIND_PUT | FLAG_GC_COPY,
        key,
        value: b"v",
    };
    b.add(&put(b"b", 5)).unwrap();
    // Same key: only an older sequence may follow.
    assert!(b.add(&put(b"b", 5)).is_err());
    assert!(b.add(&put(b"b", 6)).is_err());
    b.add(&put(b"b", 4)).unwrap();
    assert!(b.add(&put(b"a", 9)).is_err());
    let del = Record {
        seq: 1,
        flags: KIND_DELETE,
        key: b"c",
        value: b"",
    };
    assert!(b.add(&del).is_err());
    assert_eq!(b.records(), 2);
    let empty =
        ValueTableBuilder::new(fs.create(&path(), IoClass::Flush).unwrap(), OPTS, false).unwrap();
    assert!(empty.finish().is_err());
}

/// Every single-byte change is caught by `open` or `verify` as
/// `Corruption` (never a panic, never a table that verifies).
#[test]
fn every_flipped_byte_is_corruption() {
    let mut rng = StdRng::seed_from_u64(7);
    let fs = fs();
    let recs = records(&mut rng, 12);
    let (built, _) = build(&fs, &recs, true);
    let good = fs.read_all(&path(), IoClass::UserRead).unwrap();
    assert_eq!(good.len() as u64, built.file_size);
    for i in 0..good.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = good.clone();
            bad[i] ^= bit;
            let fs = fs_with(&bad);
            let outcome = open(&fs, bad.len() as u64).and_then(|t| t.verify());
            match outcome {
                Err(e) => assert!(
                    e.is_corruption()
                        || matches!(e, crate::error::Error::UnsupportedVersion { .. }),
                    "byte {i} bit {bit:#x}: {e}"
                ),
                Ok(_) => panic!("byte {i} bit {bit:#x}: a damaged table verified"),
            }
        }
    }
    // A cut table.
    for cut in [0, 10, good.len() / 2, good.len() - 1] {
        let fs = fs_with(&good[..cut]);
        assert!(open(&fs, cut as u64).is_err(), "cut at {cut}");
    }
}

/// Fuzzing found it: a properties block (checksum intact) claiming
/// `u64::MAX` records made reading the dense index reserve room for that
/// many entries, a capacity overflow panic (or an abort on a claim just
/// small enough to try), instead of a `Corruption`.
#[test]
fn a_huge_record_count_in_the_properties_is_corruption_not_an_allocation() {
    use crate::table::format::{block_trailer, BLOCK_TRAILER_LEN, FOOTER_LEN};
    use crate::value::table::format::ValueTableProperties;
    let mut rng = StdRng::seed_from_u64(11);
    let fs = fs();
    let (built, _) = build(&fs, &records(&mut rng, 20), false);
    let mut bytes = fs.read_all(&path(), IoClass::UserRead).unwrap();
    let footer = bytes.len() - FOOTER_LEN;
    let at = crate::coding::u64_at(&bytes, footer + 16) as usize;
    let size = crate::coding::u64_at(&bytes, footer + 24) as usize;
    let mut p = ValueTableProperties::decode(&bytes[at..at + size]).unwrap();
    p.records = u64::MAX;
    let encoded = p.encode();
    assert_eq!(encoded.len(), size);
    bytes[at..at + size].copy_from_slice(&encoded);
    let trailer = block_trailer(&encoded);
    bytes[at + size..at + size + BLOCK_TRAILER_LEN].copy_from_slice(&trailer);
    let t = open(&fs_with(&bytes), built.file_size).unwrap();
    let e = t.index_entries(IoClass::Gc).unwrap_err();
    assert!(
        e.is_corruption() && e.to_string().contains("records"),
        "{e}"
    );
    assert!(t.verify().unwrap_err().is_corruption());
}

fn fs_with(bytes: &[u8]) -> CountingFs {
    let fs = fs();
    let mut f = fs.create(&path(), IoClass::Flush).unwrap();
    f.append(bytes).unwrap();
    f.sync().unwrap();
    fs
}

/// The worked example of `docs/format/value-table.md`, byte for byte.
#[test]
fn worked_example_of_the_format_doc() {
    let fs = fs();
    let recs = vec![
        (b"apple".to_vec(), 7, b"red".to_vec()),
        (b"pear".to_vec(), 9, b"green".to_vec()),
    ];
    let (built, handles) = build(&fs, &recs, false);
    let bytes = fs.read_all(&path(), IoClass::UserRead).unwrap();
    // Header.
    assert_eq!(&bytes[..16], b"sluicevt\x01\x00\x00\x00\x00\x00\x00\x00");
    // Records: 21-byte header + key + value each.
    assert_eq!(
        handles[0],
        RecordHandle {
            offset: 16,
            len: 29
        }
    );
    assert_eq!(
        handles[1],
        RecordHandle {
            offset: 45,
            len: 30
        }
    );
    let r0 = &bytes[16..45];
    assert_eq!(&r0[4..12], &7u64.to_le_bytes()); // seq
    assert_eq!(r0[12], 1); // flags: put
    assert_eq!(&r0[13..21], b"\x05\x00\x00\x00\x03\x00\x00\x00"); // key_len 5, value_len 3
    assert_eq!(&r0[21..], b"applered");
    assert_eq!(built.properties.records_end, 75);
    // The one index partition: two entries, restart interval 4.
    // Entry 0: shared 0 | unshared 13 | value_len 12 | "apple" + trailer | offset 16, len 29.
    let p = &bytes[75..];
    assert_eq!(&p[..3], &[0, 13, 12]);
    assert_eq!(&p[3..8], b"apple");
    assert_eq!(&p[8..16], &((7u64 << 8) | 1).to_le_bytes());
    assert_eq!(&p[16..28], &[16, 0, 0, 0, 0, 0, 0, 0, 29, 0, 0, 0]);
    // Entry 1 shares nothing with "apple".
    assert_eq!(&p[28..31], &[0, 12, 12]);
    assert_eq!(&p[31..35], b"pear");
    assert_eq!(&p[35..43], &((9u64 << 8) | 1).to_le_bytes());
    assert_eq!(&p[43..55], &[45, 0, 0, 0, 0, 0, 0, 0, 30, 0, 0, 0]);
    // Partition = 2 entries (28 + 27 bytes) + restarts [0] + count 1 = 63
    // bytes, then the trailer (compression 0, crc): the top index at 143.
    assert_eq!(&p[55..63], &[0, 0, 0, 0, 1, 0, 0, 0]);
    assert_eq!(p[63], 0);
    assert_eq!(built.file_size, bytes.len() as u64);
    let t = open(&fs, built.file_size).unwrap();
    assert_eq!(t.index_entries(IoClass::Gc).unwrap().1, 143 - 75);
    assert_eq!(t.properties().index_partitions, 1);
    assert_eq!(
        t.find(b"pear", 9, IoClass::UserRead).unwrap(),
        Some(handles[1])
    );
    assert_eq!(&bytes[bytes.len() - 8..], b"sluicevt");
    assert_eq!(VT_HEADER_LEN, 16);
}

/// A table store over `dir` with the tables `meta` lists.
fn open_store(
    fs: &CountingFs,
    dir: &std::path::Path,
    meta: &super::meta::TableMeta,
) -> super::store::TableStore {
    let (store, _) = super::store::TableStore::open(
        dir,
        fs.clone(),
        Arc::new(std::sync::atomic::AtomicU64::new(100)),
        meta,
        super::store::TableConfig::from_options(&crate::Options::default()),
        Arc::new(BlockCache::new(1 << 20)),
    )
    .unwrap();
    store
}

/// Writes table `n` under `dir` holding one version of `k`; returns its
/// pointer and manifest entry.
fn write_one(
    fs: &CountingFs,
    dir: &std::path::Path,
    n: u64,
    seq: u64,
    value: &[u8],
) -> (crate::pointer::ValuePointer, super::meta::TableFile) {
    use crate::pointer::{ValuePointer, STORE_TABLE};
    let f = fs
        .create(&crate::filename::value_table(dir, n), IoClass::Flush)
        .unwrap();
    let mut b = ValueTableBuilder::new(f, OPTS, false).unwrap();
    let rec = Record {
        seq,
        flags: KIND_PUT,
        key: b"k",
        value,
    };
    let h = b.add(&rec).unwrap();
    let crc = b.last_crc();
    let built = b.finish().unwrap();
    let p = ValuePointer {
        store: STORE_TABLE,
        file: n,
        offset: h.offset,
        record_len: h.len,
        record_crc: crc,
    };
    let entry = super::meta::TableFile {
        size: built.file_size,
        record_bytes: built.properties.records_end - VT_HEADER_LEN as u64,
        hot: false,
    };
    (p, entry)
}

/// A table store under `/db` holding table 6, one version of `k` at
/// sequence 2 named by one pointer; returns the store and that pointer.
fn store_of_one_table(fs: &CountingFs) -> (super::store::TableStore, crate::pointer::ValuePointer) {
    let dir = std::path::Path::new("/db");
    fs.create_dir_all(dir).unwrap();
    let (p, entry) = write_one(fs, dir, 6, 2, b"value");
    let mut meta = super::meta::TableMeta {
        created: true,
        ..super::meta::TableMeta::default()
    };
    meta.tables.insert(6, entry);
    meta.refs.insert(6, 1);
    (open_store(fs, dir, &meta), p)
}

/// Garbage a flush found in a table a GC step or merge had frozen waits
/// for that step; a step that ends without installing (failed, or cut
/// short by a close) leaves it to the next job that settles, or to the
/// close. It was lost before: the flush had flagged its entry as counted,
/// so no later merge counted the record, and the model suite's space
/// check found a record neither referenced nor garbage (unikv and
/// scavenger presets, about one run in twenty-five).
#[test]
fn garbage_deferred_to_an_abandoned_step_is_counted_later() {
    use super::store::Frozen;
    use crate::value::{Dropped, ValueAccounting, ValueRecovery, ValueTally};

    for at_close in [false, true] {
        let (store, p) = store_of_one_table(&fs());
        let current =
            crate::version::Version::empty(crate::index::shape_for(&crate::Options::default()));
        // A step froze table 6; a flush shadowing its record settles.
        store.inner.write().frozen.insert(6, Frozen::Picked);
        let mut tally = ValueTally::default();
        tally.deferred.push(Dropped {
            ptr: p,
            key: b"k".to_vec(),
            seq: 2,
            shadow: 9,
        });
        let mut edit = crate::version::VersionEdit::default();
        drop(store.settle_job(&mut tally, &mut edit.values).unwrap());
        assert!(edit.values.garbage.is_empty(), "deferred to the step");
        assert_eq!(store.close_edit(&current).map(|e| e.values.garbage), None);
        // The step ends without installing: the table thaws.
        store.inner.write().frozen.remove(&6);
        let counted = if at_close {
            store.close_edit(&current).map(|e| e.values.garbage)
        } else {
            let mut edit = crate::version::VersionEdit::default();
            drop(
                store
                    .settle_job(&mut ValueTally::default(), &mut edit.values)
                    .unwrap(),
            );
            Some(edit.values.garbage)
        };
        let want = vec![(6, u64::from(p.record_len))];
        assert_eq!(counted, Some(want), "at close: {at_close}");
        assert!(store.inner.read().deferred.is_empty());
    }
}

/// A settle that fails after taking counts (here, following an edge to
/// the table holding a collected record fails to read it) loses them, so
/// GC stops judging by the notes of counted garbage: a victim's notes
/// could add up to its count and still miss the lost record. A settle
/// that succeeds notes where each count it hands out is.
#[test]
fn a_settle_that_loses_counts_stops_judging_by_the_notes() {
    use std::sync::atomic::Ordering;

    use crate::fs::Fault;
    use crate::pointer::ValuePointer;
    use crate::value::{Dropped, ValueAccounting, ValueTally};

    let mem = MemFs::new();
    let (store, p) = store_of_one_table(&CountingFs::new(Arc::new(mem.clone())));
    let dropped = |file: u64| Dropped {
        ptr: ValuePointer { file, ..p },
        key: b"k".to_vec(),
        seq: 2,
        shadow: 9,
    };
    // Counted in a live table: the edit says where the record is.
    let mut tally = ValueTally::default();
    tally.deferred.push(dropped(6));
    let mut edit = crate::version::VersionEdit::default();
    drop(store.settle_job(&mut tally, &mut edit.values).unwrap());
    assert_eq!(edit.values.garbage, vec![(6, u64::from(p.record_len))]);
    assert_eq!(edit.values.dead, vec![(6, p.offset, p.record_len)]);
    assert!(store.notes_trusted.load(Ordering::Acquire));
    // Table 5 was collected into 6; reading 6 to follow the edge fails.
    store.inner.write().edges.insert(5, vec![6]);
    let mut tally = ValueTally::default();
    tally.deferred.push(dropped(5));
    mem.inject(Fault::Eio, 0, true);
    let mut edit = crate::version::VersionEdit::default();
    assert!(store.settle_job(&mut tally, &mut edit.values).is_err());
    mem.clear_faults();
    assert!(!store.notes_trusted.load(Ordering::Acquire));
}

/// Following an inheritance edge finds a record by key, length and
/// checksum. A lone copy of the key with the same length is not enough: GC
/// may have kept a newer version and dropped the one a snapshot reads, and
/// taking the kept one for it made that read a checksum `Corruption`.
#[test]
fn an_edge_to_another_version_of_the_same_length_is_not_the_record() {
    use std::path::Path;

    use super::meta::TableMeta;
    use crate::pointer::ValuePointer;

    let fs = fs();
    let dir = Path::new("/db");
    fs.create_dir_all(dir).unwrap();
    let write = |n: u64, seq: u64, value: &[u8]| write_one(&fs, dir, n, seq, value);
    // Table 5 was collected: its old version dropped, table 6 holds the
    // newer one GC kept. The open removes 5, which the manifest no longer
    // lists.
    let (old, _) = write(5, 1, b"old!");
    let (kept, entry) = write(6, 2, b"new!");
    assert_eq!(old.record_len, kept.record_len);
    assert_ne!(old.record_crc, kept.record_crc);
    let mut meta = TableMeta {
        created: true,
        ..TableMeta::default()
    };
    meta.tables.insert(6, entry);
    meta.edges.insert(5, vec![6]);
    meta.refs.insert(5, 2);
    let store = open_store(&fs, dir, &meta);
    let inner = store.inner.read();
    let found = store
        .follow(&inner, &old, b"k", None, IoClass::UserRead)
        .unwrap();
    assert_eq!(found, None, "the dropped version is nowhere");
    // A pointer into table 5 that the kept record answers is found.
    let moved = ValuePointer { file: 5, ..kept };
    let found = store
        .follow(&inner, &moved, b"k", None, IoClass::UserRead)
        .unwrap();
    assert_eq!(found, Some(kept));
    // With the entries' sequence numbers (settling a job's garbage), the
    // dense index alone tells the versions apart: the same answers, and a
    // record is found by its sequence without reading its checksum.
    let by_seq = |p: &ValuePointer, seq: u64| {
        store
            .follow(&inner, p, b"k", Some(seq), IoClass::Compaction)
            .unwrap()
    };
    assert_eq!(by_seq(&old, 1), None, "no copy of sequence 1");
    assert_eq!(by_seq(&moved, 2), Some(kept));
    let read_before = fs.counters().snapshot().read(IoClass::Compaction);
    let unchecked = ValuePointer {
        record_crc: kept.record_crc ^ 1,
        ..moved
    };
    assert_eq!(
        by_seq(&unchecked, 2).map(|q| (q.file, q.offset)),
        Some((6, kept.offset)),
        "found by sequence"
    );
    assert_eq!(
        fs.counters().snapshot().read(IoClass::Compaction),
        read_before,
        "no record read to find it"
    );
}

/// A merge relocating a victim's records reads them through read-ahead
/// windows (`ValueStore::read_for_copy`): in file order, in any order, and
/// across several files, every record is the one `read` returns; a flipped
/// byte inside a window is `Corruption` at the record's offset.
#[test]
fn windowed_copy_reads_match_point_reads() {
    use std::path::Path;

    use super::meta::{TableFile, TableMeta};
    use crate::pointer::{ValuePointer, STORE_TABLE};
    use crate::value::files::{CopyWindows, RecordFiles};
    use crate::value::ValueStore;

    let seed = 11u64;
    let mut rng = StdRng::seed_from_u64(seed);
    let fs = fs();
    let dir = Path::new("/db");
    fs.create_dir_all(dir).unwrap();
    let mut meta = TableMeta {
        created: true,
        ..TableMeta::default()
    };
    // Two tables of about 1 MB each: several windows apiece.
    let mut pointers: Vec<(ValuePointer, Vec<u8>)> = Vec::new();
    for n in [5u64, 6] {
        let f = fs
            .create(&crate::filename::value_table(dir, n), IoClass::Flush)
            .unwrap();
        let mut b = ValueTableBuilder::new(f, OPTS, false).unwrap();
        for i in 0..2000u64 {
            let key = format!("key{n}-{i:06}").into_bytes();
            let value: Vec<u8> = (0..rng.gen_range(1..1000)).map(|_| rng.gen()).collect();
            let h = b
                .add(&Record {
                    seq: 10 + i,
                    flags: KIND_PUT,
                    key: &key,
                    value: &value,
                })
                .unwrap();
            let p = ValuePointer {
                store: STORE_TABLE,
                file: n,
                offset: h.offset,
                record_len: h.len,
                record_crc: b.last_crc(),
            };
            pointers.push((p, key));
        }
        let built = b.finish().unwrap();
        meta.tables.insert(
            n,
            TableFile {
                size: built.file_size,
                record_bytes: built.properties.records_end - VT_HEADER_LEN as u64,
                hot: false,
            },
        );
    }
    let store = open_store(&fs, dir, &meta);
    let check = |order: &[usize]| {
        let mut windows = CopyWindows::default();
        for &i in order {
            let (p, key) = &pointers[i];
            let got = store
                .read_for_copy(p, key, &mut windows, IoClass::Gc)
                .unwrap();
            let want = store.read(p, key, IoClass::UserRead).unwrap();
            assert_eq!(
                (got.seq, &got.key, &got.value),
                (want.seq, &want.key, &want.value),
                "seed {seed}, record {i}"
            );
        }
    };
    // File order, interleaving the two files as a merge's key order does.
    let interleaved: Vec<usize> = (0..2000).flat_map(|i| [i, 2000 + i]).collect();
    check(&interleaved);
    // Any order, with repeats.
    let random: Vec<usize> = (0..3000).map(|_| rng.gen_range(0..4000)).collect();
    check(&random);
    // A flipped byte in a record's value: the window read sees it.
    let (p, key) = pointers[1500].clone();
    let path = crate::filename::value_table(dir, 5);
    let mut bytes = fs.read_all(&path, IoClass::Flush).unwrap();
    bytes[(p.offset + u64::from(p.record_len) - 1) as usize] ^= 0x40;
    let mut w = fs.create(&path, IoClass::Flush).unwrap();
    w.append(&bytes).unwrap();
    w.sync().unwrap();
    drop(w);
    store.readers().forget(5);
    let mut windows = CopyWindows::default();
    let (first, first_key) = &pointers[1400];
    store
        .read_for_copy(first, first_key, &mut windows, IoClass::Gc)
        .unwrap();
    let err = store
        .read_for_copy(&p, &key, &mut windows, IoClass::Gc)
        .unwrap_err();
    assert!(
        matches!(err, crate::Error::Corruption { .. })
            && err.to_string().contains(&p.offset.to_string()),
        "seed {seed}: {err}"
    );
}

/// Cost and benefit: an old table at 39% garbage goes before a young one
/// at 41% (its space stays free), a table all garbage before everything,
/// and a young table nearly all garbage before a younger one at 41%.
#[test]
fn cost_benefit_takes_old_tables_before_young_ones_of_a_little_more_garbage() {
    use super::meta::TableFile;
    let t = TableFile {
        size: 1 << 20,
        record_bytes: 1 << 20,
        hot: true,
    };
    let mut order: Vec<(u64, TableFile, f64)> = vec![
        (700, t, 0.41),
        (100, t, 0.39),
        (710, t, 0.95),
        (720, t, 0.0),
        (719, t, 1.0),
    ];
    order.sort_by(|a, b| b.2.total_cmp(&a.2));
    super::gc::by_cost_benefit(&mut order);
    let got: Vec<u64> = order.iter().map(|c| c.0).collect();
    assert_eq!(got, [719, 100, 710, 700, 720]);
}
