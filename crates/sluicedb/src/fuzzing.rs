//! Entry points for the fuzz targets in `fuzz/` (`docs/fuzzing.md`): one
//! function per decoder of bytes that come from disk, each taking any
//! bytes and running the crate's own decoder over them fully: a block
//! iterated every way, a table opened and read, a manifest recovered, a
//! journal replayed, and so on.
//!
//! The contract they check is the engine's: damage is a `Result` error
//! (`Corruption` naming file and offset), never a panic, a hang or an
//! allocation sized by an untrusted length. Every function returns
//! normally for any input; a panic is a bug in the decoder it drives.
//! Where a property must hold of any input (a chunked scan sees what a
//! whole-file scan sees, a decoded record encodes back to itself), it is
//! asserted, so that breaking it counts as a crash too.
//!
//! Checksums stop a fuzzer at the first byte it changes, so each function
//! runs twice when that changes anything: once on the bytes as given
//! (checksum mismatches and their classification), once with every
//! checksum the format has recomputed, so that mutations reach the parser
//! behind them. The recomputation walks the format as far as it makes
//! sense and leaves the rest alone.
//!
//! Built with the `fuzzing` feature for the fuzz targets, and in the
//! crate's tests, which replay every input fuzzing found and the seed
//! corpus through these functions (`tests` below), so a fixed finding
//! stays fixed in CI.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::coding::{masked_crc, u32_at, u64_at};
use crate::error::Result;
use crate::filename::{self, FileKind};
use crate::fs::{CountingFs, Fs, IoClass, MemFs};
use crate::index::unified::{checkpoint, hash_index::HashIndex, hash_index::KeyHash};
use crate::iter::InternalIterator;
use crate::journal::replay::{replay_journals, Source};
use crate::journal::Control;
use crate::key::{self, Kind};
use crate::logfile::format::{fragment_crc, BLOCK_SIZE, HEADER_SIZE};
use crate::logfile::read_log;
use crate::pointer::{ValuePointer, STORE_HASH, STORE_LOG};
use crate::record::{
    claimed_len, kind_of, FILE_HEADER_LEN, KIND_PUT, KIND_RELOCATE, KIND_RELOCATE_RUN,
};
use crate::table::block::Block;
use crate::table::builder::TableProperties;
use crate::table::format::{block_trailer, BlockHandle, BLOCK_TRAILER_LEN, FOOTER_LEN};
use crate::table::reader::{SortedProbes, Table};
use crate::table::BlockCache;
use crate::value::log::reader::{check_record, scan_file, visit_file};
use crate::value::table::format::{ValueTableProperties, VT_HEADER_LEN};
use crate::value::table::reader::ValueTable;
use crate::version::{VersionEdit, VersionSet};
use crate::{Db, JournalRecovery, Options, Preset, WriteBatch};

/// The directory of every file system these functions build.
const DIR: &str = "/db";

/// Most keys a function looks up or seeks to one by one: enough to reach
/// every block of a small input, few enough to keep runs fast.
const MAX_PROBES: usize = 64;

/// Runs `run` on `data`, then on a copy with `fix` applied if that copy
/// differs (see the module doc).
fn raw_then_fixed(data: &[u8], fix: impl FnOnce(&mut [u8]), run: impl Fn(&[u8])) {
    run(data);
    let mut fixed = data.to_vec();
    fix(&mut fixed);
    if fixed != data {
        run(&fixed);
    }
}

/// A counting file system over a new in-memory one holding `files`.
fn mem_fs(files: &[(PathBuf, &[u8])]) -> (MemFs, CountingFs) {
    let mem = MemFs::new();
    let fs = CountingFs::new(Arc::new(mem.clone()));
    mem.create_dir_all(Path::new(DIR)).expect("in-memory mkdir");
    for (path, data) in files {
        let mut w = fs.create(path, IoClass::Flush).expect("in-memory create");
        w.append(data).expect("in-memory append");
        w.sync().expect("in-memory sync");
    }
    (mem, fs)
}

/// Valid internal keys to seek to: the keys `found` (at most
/// [`MAX_PROBES`]) and a few made from `data`.
fn seek_targets(found: &[Vec<u8>], data: &[u8]) -> Vec<Vec<u8>> {
    let step = found.len().div_ceil(MAX_PROBES).max(1);
    let mut out: Vec<Vec<u8>> = found.iter().step_by(step).cloned().collect();
    for uk in [&b""[..], &data[..data.len().min(9)], b"key", b"\xff\xff"] {
        out.push(key::encode(uk, key::MAX_SEQUENCE, key::KIND_SEEK));
        out.push(key::encode(uk, 0, Kind::Delete as u8));
    }
    out
}

/// Walks `it` forwards, backwards and from seeks; returns the keys met
/// going forwards. Every step stays bounded by the input: a cursor that
/// does not advance shows up as a fuzzer timeout.
fn exercise(it: &mut dyn InternalIterator, data: &[u8]) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    it.seek_to_first();
    while it.valid() {
        assert!(key::is_valid(it.key()), "a valid cursor yields a short key");
        let _ = it.value();
        keys.push(it.key().to_vec());
        it.next();
    }
    let _ = it.status();
    it.seek_to_last();
    while it.valid() {
        let _ = (it.key(), it.value());
        it.prev();
    }
    let _ = it.status();
    for (i, target) in seek_targets(&keys, data).iter().enumerate() {
        it.seek(target);
        // A change of direction after a seek, then back.
        for _ in 0..2 {
            if !it.valid() {
                break;
            }
            if i % 2 == 0 {
                it.prev();
            } else {
                it.next();
            }
        }
        if it.valid() {
            it.next();
        }
        let _ = it.status();
    }
    keys
}

// ---------------------------------------------------------------- blocks

/// A data or index block of a key table (`table::block`): decoded, then
/// iterated forwards, backwards and from seeks.
pub fn block(data: &[u8]) {
    let Ok(b) = Block::new(data.to_vec(), Arc::new(PathBuf::from("/db/1.sst")), 0) else {
        return;
    };
    let b = Arc::new(b);
    exercise(&mut b.iter(), data);
}

// ---------------------------------------------------------- key tables

/// Recomputes the trailer of the block `h` names, if it lies before
/// `limit`.
fn fix_block_trailer(data: &mut [u8], h: BlockHandle, limit: usize) {
    let (Ok(at), Ok(size)) = (usize::try_from(h.offset), usize::try_from(h.size)) else {
        return;
    };
    let Some(end) = at
        .checked_add(size)
        .and_then(|e| e.checked_add(BLOCK_TRAILER_LEN))
    else {
        return;
    };
    if end > limit {
        return;
    }
    let t = block_trailer(&data[at..at + size]);
    data[at + size..end].copy_from_slice(&t);
}

/// The bytes of block `h` (without its trailer), if it lies before `limit`.
fn block_bytes(data: &[u8], h: BlockHandle, limit: usize) -> Option<&[u8]> {
    let at = usize::try_from(h.offset).ok()?;
    let end = at.checked_add(usize::try_from(h.size).ok()?)?;
    (end.checked_add(BLOCK_TRAILER_LEN)? <= limit).then(|| &data[at..end])
}

/// Recomputes the footer checksum of a table-shaped file and returns its
/// three handles (filter, properties, index) and where the footer starts.
fn fix_footer(data: &mut [u8]) -> Option<([BlockHandle; 3], usize)> {
    let f = data.len().checked_sub(FOOTER_LEN)?;
    let crc = masked_crc(&data[f..f + 52]);
    data[f + 52..f + 56].copy_from_slice(&crc.to_le_bytes());
    let h = |at: usize| BlockHandle {
        offset: u64_at(data, f + at),
        size: u64_at(data, f + at + 8),
    };
    Some(([h(0), h(16), h(32)], f))
}

/// Recomputes the trailers of an index block and of every block it
/// names.
fn fix_indexed_blocks(data: &mut [u8], index: BlockHandle, limit: usize) {
    fix_block_trailer(data, index, limit);
    let Some(raw) = block_bytes(data, index, limit) else {
        return;
    };
    let Ok(b) = Block::new(raw.to_vec(), Arc::new(PathBuf::new()), 0) else {
        return;
    };
    let b = Arc::new(b);
    let mut it = b.iter();
    it.seek_to_first();
    while it.valid() {
        if let Some(h) = BlockHandle::decode(it.value()) {
            fix_block_trailer(data, h, limit);
        }
        it.next();
    }
}

/// The checksums both table formats share: footer, filter, properties and
/// the index with the blocks it names. Returns the properties block and the
/// end of the blocks.
fn fix_footer_blocks(data: &mut [u8]) -> Option<(BlockHandle, usize)> {
    let ([filter, properties, index], limit) = fix_footer(data)?;
    fix_block_trailer(data, filter, limit);
    fix_block_trailer(data, properties, limit);
    fix_indexed_blocks(data, index, limit);
    Some((properties, limit))
}

/// Every checksum of a key table: footer, index, filter, properties,
/// data blocks and (index-decoupled tables) pointer index and blocks.
fn fix_table(data: &mut [u8]) {
    let Some((properties, limit)) = fix_footer_blocks(data) else {
        return;
    };
    let Some(p) = block_bytes(data, properties, limit).and_then(TableProperties::decode) else {
        return;
    };
    fix_block_trailer(data, p.pointer_filter, limit);
    fix_indexed_blocks(data, p.pointer_index, limit);
}

/// A key table (`.sst`, `table::reader`): opened from the bytes, iterated
/// every way, probed with point lookups (with and without sorted-probe
/// memos), and verified.
pub fn table(data: &[u8]) {
    raw_then_fixed(data, fix_table, table_once);
}

fn table_once(data: &[u8]) {
    let path = filename::table(Path::new(DIR), 1);
    let (_mem, fs) = mem_fs(&[(path.clone(), data)]);
    let cache = Arc::new(BlockCache::new(1 << 20));
    let size = data.len() as u64;
    let Ok(t) = Table::open(&fs, path, 1, size, cache, IoClass::UserRead) else {
        return;
    };
    let t = Arc::new(t);
    let _ = t.describe();
    let keys = exercise(&mut t.iter(IoClass::UserRead, true), data);
    for (i, k) in seek_targets(&keys, data).iter().enumerate() {
        let _sorted = (i % 2 == 1).then(SortedProbes::start);
        let uk = key::user_key(k);
        let hash = crate::table::bloom::key_hash(uk);
        for seq in [key::MAX_SEQUENCE, key::sequence(k)] {
            let seek = key::encode(uk, seq, key::KIND_SEEK);
            if let Ok(Some((found, _))) = t.get(&seek, uk, hash, IoClass::UserRead) {
                assert_eq!(key::user_key(&found), uk, "a lookup found another key");
            }
        }
    }
    let _ = t.verify();
}

// --------------------------------------------------------- value tables

/// Every checksum of a value table: footer, top index, partitions,
/// filter, properties and the records before the first partition.
fn fix_value_table(data: &mut [u8]) {
    let Some((properties, limit)) = fix_footer_blocks(data) else {
        return;
    };
    let records_end = block_bytes(data, properties, limit)
        .and_then(ValueTableProperties::decode)
        .map_or(limit as u64, |p| p.records_end);
    let end = usize::try_from(records_end).map_or(limit, |e| e.min(limit));
    fix_records(data, VT_HEADER_LEN, end);
}

/// A value table (`value::table::reader`): opened from the bytes, its
/// dense index read whole and probed key by key, its records read by
/// coalesced reads, and verified.
pub fn value_table(data: &[u8]) {
    raw_then_fixed(data, fix_value_table, value_table_once);
}

fn value_table_once(data: &[u8]) {
    let path = filename::value_table(Path::new(DIR), 1);
    let (_mem, fs) = mem_fs(&[(path.clone(), data)]);
    let cache = Arc::new(BlockCache::new(1 << 20));
    let Ok(t) = ValueTable::open(&fs, path, 1, data.len() as u64, cache) else {
        return;
    };
    let _ = (t.number(), t.file_size(), t.record_bytes(), t.is_hot());
    let _ = t.properties();
    if let Ok((entries, _)) = t.index_entries(IoClass::Gc) {
        for e in entries.iter().take(MAX_PROBES) {
            if let Ok(found) = t.find_all(&e.key, IoClass::UserRead) {
                assert!(
                    found.iter().all(|f| f.key == e.key),
                    "find_all returned another key's record"
                );
            }
        }
        // GC's reads: the entries in offset order, coalesced over gaps.
        let mut sorted = entries.clone();
        sorted.sort_by_key(|e| e.handle.offset);
        for gap in [0, 64, u64::MAX] {
            let _ = t.read_coalesced(&sorted, gap, IoClass::Gc, |_, _, _| Ok(()));
        }
    }
    let _ = t.verify();
}

// ------------------------------------------------------ log framing

/// Recomputes the checksum of every fragment of a log-framed file (journal
/// or manifest) whose header fits; zeroed headers (block padding) stay.
fn fix_log(data: &mut [u8]) {
    let mut pos = 0;
    while pos < data.len() {
        let left = BLOCK_SIZE - pos % BLOCK_SIZE;
        if left < HEADER_SIZE {
            pos += left;
            continue;
        }
        if pos + HEADER_SIZE > data.len() {
            return;
        }
        let len = usize::from(u16::from_le_bytes([data[pos + 4], data[pos + 5]]));
        let ty = data[pos + 6];
        let end = pos + HEADER_SIZE + len;
        if (ty == 0 && len == 0) || HEADER_SIZE + len > left || end > data.len() {
            pos += left;
            continue;
        }
        let crc = fragment_crc(ty, &data[pos + HEADER_SIZE..end]);
        data[pos..pos + 4].copy_from_slice(&crc.to_le_bytes());
        pos = end;
    }
}

// ----------------------------------------------------------- manifest

/// The index shapes a manifest may be recovered with.
fn shapes() -> [Arc<dyn crate::index::IndexShape>; 2] {
    [
        crate::index::shape_for(&Options::preset(Preset::LevelDb)),
        crate::index::shape_for(&Options::preset(Preset::UniKv)),
    ]
}

/// A manifest file (`version::set`, `version::edit`): every record
/// decoded into a [`VersionEdit`] (which must encode back to itself) and
/// the whole file recovered into a version, under each index shape, whose
/// compaction picks then run; then a database opened over it.
pub fn manifest(data: &[u8]) {
    raw_then_fixed(data, fix_log, |d| {
        // An open fails as the recovery did, so it runs only on manifests
        // that recover: that keeps the many that do not fast.
        if manifest_once(d) {
            open_image(Preset::LevelDb, ImageFile::Manifest, d);
        }
    });
}

/// True when the manifest recovers under the leveled shape.
fn manifest_once(data: &[u8]) -> bool {
    for (_, rec) in read_log(data).records {
        if let Ok(e) = VersionEdit::decode(&rec) {
            let again = VersionEdit::decode(&e.encode());
            assert_eq!(again.as_ref(), Ok(&e), "an edit does not encode back");
        }
    }
    let dir = Path::new(DIR);
    let name = filename::manifest_name(1);
    let current = format!("{name}\ncrc32c:{:08x}\n", masked_crc(name.as_bytes()));
    let (_mem, fs) = mem_fs(&[
        (filename::manifest(dir, 1), data),
        (filename::current(dir), current.as_bytes()),
    ]);
    let mut recovered = false;
    for (i, shape) in shapes().into_iter().enumerate() {
        let Ok(r) = VersionSet::recover(&fs, dir, shape.clone()) else {
            continue;
        };
        recovered |= i == 0;
        let v = &r.version;
        let _ = (shape.scores(v), shape.write_pressure(v), v.snapshot_edit());
        let busy = HashSet::new();
        let _ = shape.pick_compaction(v, &busy);
        let _ = shape.pick_shadow_compaction(v, &busy);
        for level in 0..shape.num_levels() {
            let _ = shape.pick_range_compaction(v, level, b"", b"\xff\xff\xff");
            let _ = shape.is_bottommost_for(v, level, b"key");
        }
    }
    recovered
}

// ------------------------------------------------------------ journal

/// An engine journal (`journal::reader`, `journal::replay`): every record
/// read and decoded as a control record or a [`WriteBatch`] (value
/// pointers in it decoded too), the file replayed under every recovery
/// mode, then a database opened over it.
pub fn journal(data: &[u8]) {
    raw_then_fixed(data, fix_log, |d| {
        journal_once(d);
        open_image(Preset::LevelDb, ImageFile::Journal, d);
    });
}

fn journal_once(data: &[u8]) {
    for (_, rec) in read_log(data).records {
        if Control::decode(&rec).is_some() {
            continue;
        }
        let Ok(b) = WriteBatch::from_record(rec) else {
            continue;
        };
        let _ = (
            b.sequence(),
            b.len(),
            b.user_bytes_and_largest_value(),
            b.validate(),
        );
        for op in b.iter().flatten() {
            if op.kind == Kind::ValuePointer {
                value_pointer(op.value);
            }
        }
    }
    let dir = Path::new(DIR);
    let (_mem, fs) = mem_fs(&[(filename::journal(dir, 5), data)]);
    for mode in [
        JournalRecovery::TolerateCorruptedTail,
        JournalRecovery::AbsoluteConsistency,
        JournalRecovery::PointInTime,
        JournalRecovery::SkipAnyCorrupted,
    ] {
        let src = Source {
            dir,
            fs: &fs,
            mode,
            values: None,
        };
        let mut sink = |b: &WriteBatch| -> Result<()> {
            for op in b.iter() {
                op.map_err(crate::Error::InvalidArgument)?;
            }
            Ok(())
        };
        let _ = replay_journals(&src, &[5], &mut sink);
    }
}

// ---------------------------------------------------- value log files

/// Recomputes the checksum of every record from `start` on whose claimed
/// length ends before `end`.
fn fix_records(data: &mut [u8], start: usize, end: usize) {
    let mut pos = start;
    while pos < end {
        let Some(len) = claimed_len(&data[pos..end]).filter(|&l| pos + l <= end) else {
            return;
        };
        let crc = masked_crc(&data[pos + 4..pos + len]);
        data[pos..pos + 4].copy_from_slice(&crc.to_le_bytes());
        pos += len;
    }
}

fn fix_value_file(data: &mut [u8]) {
    let end = data.len();
    if end > FILE_HEADER_LEN {
        fix_records(data, FILE_HEADER_LEN, end);
    }
}

/// Scans a value file whole and in chunks of several sizes (GC's and
/// recovery's reads): both must see the same records and the same end.
/// Each put read back by its pointer must pass the pointer checks, and
/// relocation records must hold pointers.
fn scan_value_file(data: &[u8], path: &Path, store: u8) {
    let Ok(whole) = scan_file(data, path) else {
        return;
    };
    for chunk in [1, 37, 4096, 4 << 20] {
        let mut seen = Vec::new();
        let end = visit_file(
            data.len() as u64,
            path,
            chunk,
            &mut Vec::new(),
            |off, n, buf| {
                let at = usize::try_from(off).expect("offset of an in-memory file");
                buf.clear();
                buf.extend_from_slice(data.get(at..at + n).expect("a read within the file"));
                Ok(())
            },
            |off, raw, r| seen.push((off, raw.len() as u32, r.key.to_vec(), r.value.to_vec())),
        )
        .expect("a chunked scan fails where a whole one did not");
        let want: Vec<_> = whole
            .records
            .iter()
            .map(|(o, n, r)| (*o, *n, r.key.clone(), r.value.clone()))
            .collect();
        assert_eq!(
            seen, want,
            "chunk {chunk}: records differ from a whole scan"
        );
        assert_eq!(
            (&end.torn_tail_at, &end.damage),
            (&whole.torn_tail_at, &whole.damage),
            "chunk {chunk}: the end differs from a whole scan"
        );
    }
    for (off, len, r) in &whole.records {
        let at = usize::try_from(*off).expect("offset of an in-memory file");
        let raw = &data[at..at + *len as usize];
        let p = ValuePointer {
            store,
            file: 1,
            offset: *off,
            record_len: *len,
            record_crc: u32_at(raw, 0),
        };
        let read = check_record(raw, &p, &r.key, path);
        if kind_of(r.flags) == KIND_PUT {
            assert!(read.is_ok(), "a scanned put fails its pointer's checks");
        }
        if kind_of(r.flags) == KIND_RELOCATE {
            value_pointer(&r.value);
        }
        if kind_of(r.flags) == KIND_RELOCATE_RUN {
            for p in crate::record::run_pointers(&r.value).unwrap_or_default() {
                value_pointer(p);
            }
        }
    }
}

/// A value log file (`value::log::reader`): scanned whole and in chunks,
/// its records checked by pointer; then a `wisckey` database, whose value
/// log is its journal, opened over it.
pub fn value_log(data: &[u8]) {
    raw_then_fixed(data, fix_value_file, |d| {
        scan_value_file(d, &filename::value_log(Path::new(DIR), 1), STORE_LOG);
        open_image(Preset::WiscKey, ImageFile::ValueLog, d);
    });
}

/// A segment group file of the hash layout (the value log's record
/// format, `value::hash`): scanned as GC and recovery do; then a `hashkv`
/// database opened over it (its journal's pointers are checked against
/// the segment at replay; reads and `verify` go through it).
pub fn hash_segment(data: &[u8]) {
    raw_then_fixed(data, fix_value_file, |d| {
        scan_value_file(d, &filename::value_segment(Path::new(DIR), 1), STORE_HASH);
        open_image(Preset::HashKv, ImageFile::HashSegment, d);
    });
}

// ------------------------------------------- hash index checkpoints

/// Recomputes every generation's checksum and the file's.
fn fix_checkpoint(data: &mut [u8]) {
    let Some(body) = data.len().checked_sub(4).filter(|&b| b >= 16) else {
        return;
    };
    let mut at = 16;
    let field = |at: usize| -> Option<(usize, usize)> {
        let len = usize::try_from(u32_at(data, at)).ok()?;
        let end = (at + 4).checked_add(len).filter(|&e| e <= body)?;
        Some((at + 4, end))
    };
    let mut gens = Vec::new();
    while at + 4 <= body {
        let Some((_, key_end)) = field(at) else {
            break;
        };
        if key_end + 4 > body {
            break;
        }
        let Some((g, g_end)) = field(key_end) else {
            break;
        };
        gens.push((g, g_end));
        at = g_end;
    }
    for (g, end) in gens {
        if end - g >= 4 {
            let crc = masked_crc(&data[g..end - 4]);
            data[end - 4..end].copy_from_slice(&crc.to_le_bytes());
        }
    }
    let crc = masked_crc(&data[..body]);
    data[body..].copy_from_slice(&crc.to_le_bytes());
}

/// A hash index checkpoint of the unified shape (`index::unified::
/// checkpoint`, `hash_index`): decoded (it must encode back to itself),
/// every generation probed, and a table indexed into the newest one,
/// which must then find its keys; then a `unikv` database opened with it.
pub fn hash_index_checkpoint(data: &[u8]) {
    raw_then_fixed(data, fix_checkpoint, |d| {
        // An open sets a checkpoint that does not decode aside, so it runs
        // only on those that do: that keeps the many that do not fast.
        if checkpoint_once(d) {
            open_image(Preset::UniKv, ImageFile::HashIndex, d);
        }
    });
}

/// True when the checkpoint decodes.
fn checkpoint_once(data: &[u8]) -> bool {
    let path = filename::hash_index(Path::new(DIR), 1);
    let Ok(mut all) = checkpoint::decode(data, &path) else {
        return false;
    };
    let again = checkpoint::decode(&checkpoint::encode(&all), &path).ok();
    assert!(
        again.as_ref() == Some(&all),
        "a checkpoint does not encode back"
    );
    let probes: Vec<KeyHash> = [&b""[..], b"key0001", b"apple", data]
        .iter()
        .map(|k| KeyHash::of(k))
        .collect();
    for gens in all.values_mut() {
        for g in gens.iter() {
            let again = HashIndex::decode(&g.encode(), &path).ok();
            assert!(
                again.as_ref() == Some(g),
                "a generation does not encode back"
            );
            let _ = (g.load_factor(), g.memory_bytes(), g.overflow_entries());
            let _ = (g.entries(), g.buckets(), g.functions(), g.is_full());
            let _: Vec<_> = g.shadowed().collect();
            for &h in &probes {
                let _ = g.candidates_of(h);
                let _ = g.newest_candidate_below(h, u64::MAX);
            }
        }
        let Some(newest) = gens.last_mut() else {
            continue;
        };
        let number = newest
            .tables()
            .iter()
            .max()
            .map_or(1, |n| n.wrapping_add(1));
        if newest
            .add_table_hashes(number, probes.iter().copied())
            .is_ok()
        {
            for &h in &probes {
                assert!(
                    newest.candidates_of(h).contains(&number),
                    "an indexed key does not find its table"
                );
            }
            newest.note_shadowed(number, 1);
        }
    }
    true
}

// ------------------------------------------------------ value pointers

/// A value pointer as index entries and journals hold it
/// (`value::pointer`): decoded in either form; a pointer must encode back
/// to itself.
pub fn value_pointer(data: &[u8]) {
    if let Some(p) = ValuePointer::decode(data) {
        assert_eq!(
            ValuePointer::decode(&p.encode()),
            Some(p),
            "a pointer does not encode back"
        );
    }
}

// -------------------------------------- databases opened over a file

/// Which file of a database image a fuzz input replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ImageFile {
    Manifest,
    Journal,
    ValueLog,
    HashSegment,
    HashIndex,
}

/// The options the images are made and opened with: small buffers and
/// limits so that a few hundred writes make every kind of file.
fn image_options(preset: Preset) -> Options {
    let o = Options::preset(preset)
        .background_threads(1)
        .gc_threads(1)
        .scan_prefetch_threads(1)
        .write_buffer_size_bytes(4 << 10)
        .block_size_bytes(512)
        .value_log_file_size_bytes(8 << 10);
    match preset {
        Preset::UniKv => o.unikv_unsorted_limit_bytes(12 << 10),
        Preset::HashKv => o.hash_groups(2),
        _ => o,
    }
}

/// A small database of `preset` in memory, closed cleanly with writes
/// still in its journal: the base that inputs are put into. Values of 20
/// to 660 bytes, so that each preset separates some and keeps some inline.
fn build_image(preset: Preset) -> MemFs {
    let mem = MemFs::new();
    let opts = image_options(preset).fs(Arc::new(mem.clone()));
    let db = Db::open(DIR, opts).expect("an image database opens");
    let value = |i: usize| vec![b'a' + (i % 26) as u8; 20 + (i * 97) % 640];
    for i in 0..48 {
        db.put(format!("key{i:04}"), value(i)).expect("image write");
    }
    db.flush().expect("image flush");
    for i in (0..48).step_by(5) {
        db.put(format!("key{i:04}"), value(i + 1))
            .expect("image write");
    }
    for i in (0..48).step_by(7) {
        db.delete(format!("key{i:04}")).expect("image delete");
    }
    db.sync().expect("image sync");
    drop(db);
    mem.crash_image()
}

fn image(preset: Preset) -> &'static MemFs {
    static IMAGES: [OnceLock<MemFs>; 7] = [const { OnceLock::new() }; 7];
    let slot = match preset {
        Preset::LightKv => 6,
        Preset::Adaptive => 5,
        Preset::LevelDb => 0,
        Preset::WiscKey => 1,
        Preset::HashKv => 2,
        Preset::Scavenger => 3,
        Preset::UniKv => 4,
    };
    IMAGES[slot].get_or_init(|| build_image(preset))
}

/// The file of kind `which` in `mem` that inputs replace: the live
/// manifest, the newest journal or value log file, the largest segment,
/// the newest checkpoint.
fn image_file(mem: &MemFs, which: ImageFile) -> Option<PathBuf> {
    let files: Vec<(PathBuf, FileKind)> = mem
        .paths()
        .into_iter()
        .filter_map(|p| {
            let kind = filename::parse(p.file_name()?.to_str()?)?;
            Some((p, kind))
        })
        .collect();
    let size = |p: &PathBuf| mem.contents(p).map_or(0, |c| c.len());
    let newest = |f: fn(&FileKind) -> Option<u64>| {
        files
            .iter()
            .filter_map(|(p, k)| Some((f(k)?, p)))
            .max_by_key(|(n, _)| *n)
            .map(|(_, p)| p.clone())
    };
    match which {
        ImageFile::Manifest => {
            let current = mem.contents(&filename::current(Path::new(DIR)))?;
            let name = std::str::from_utf8(&current).ok()?.lines().next()?;
            Some(Path::new(DIR).join(name))
        }
        ImageFile::Journal => newest(|k| match k {
            FileKind::Journal(n) => Some(*n),
            _ => None,
        }),
        ImageFile::ValueLog => files
            .iter()
            .filter(|(p, k)| matches!(k, FileKind::ValueLog(_)) && size(p) > FILE_HEADER_LEN)
            .map(|(p, _)| p.clone())
            .max(),
        ImageFile::HashSegment => files
            .iter()
            .filter(|(_, k)| matches!(k, FileKind::ValueSegment(_)))
            .map(|(p, _)| p.clone())
            .max_by_key(|p| size(p)),
        ImageFile::HashIndex => newest(|k| match k {
            FileKind::HashIndex(n) => Some(*n),
            _ => None,
        }),
    }
}

/// Opens a copy of `preset`'s image with the file `which` replaced by
/// `data`, under a recovery mode the input picks; then reads every pair,
/// looks each up and verifies the database.
fn open_image(preset: Preset, which: ImageFile, data: &[u8]) {
    let base = image(preset);
    let Some(path) = image_file(base, which) else {
        return;
    };
    let mem = base.crash_image();
    mem.set_contents(&path, data.to_vec());
    let mode = match data.len() % 4 {
        0 => JournalRecovery::TolerateCorruptedTail,
        1 => JournalRecovery::AbsoluteConsistency,
        2 => JournalRecovery::PointInTime,
        _ => JournalRecovery::SkipAnyCorrupted,
    };
    let opts = image_options(preset)
        .fs(Arc::new(mem))
        .journal_recovery(mode);
    let Ok(db) = Db::open(DIR, opts) else {
        return;
    };
    let mut keys = Vec::new();
    for pair in db.range::<&[u8]>(..) {
        match pair {
            Ok((k, _)) => keys.push(k),
            Err(_) => break,
        }
    }
    for (k, v) in db.range::<&[u8]>(..).rev().take(MAX_PROBES).flatten() {
        let _ = (k, v);
    }
    for k in keys.iter().take(MAX_PROBES) {
        let _ = db.get(k);
    }
    let _ = db.verify();
    let _ = db.stats();
}

// -------------------------------------------------------------- seeds

/// Seed inputs for every target, made by the engine itself: the files of
/// small databases of each preset, and blocks and pointers cut from them.
/// Returns (target, file name, bytes).
pub fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut add = |target: &'static str, name: String, bytes: Vec<u8>| {
        out.push((target, name, bytes));
    };
    for preset in [
        Preset::LevelDb,
        Preset::WiscKey,
        Preset::HashKv,
        Preset::Scavenger,
        Preset::UniKv,
    ] {
        let mem = image(preset);
        let p = preset.name();
        for path in mem.paths() {
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some(bytes) = mem.contents(&path) else {
                continue;
            };
            let seed = format!("seed-{p}-{name}");
            match filename::parse(name) {
                Some(FileKind::Table(_)) => {
                    for (i, b) in table_blocks(&bytes).into_iter().enumerate().take(3) {
                        add("block", format!("seed-{p}-{name}-{i}"), b);
                    }
                    for (i, v) in pointers_in_table(&bytes).into_iter().enumerate().take(2) {
                        add("value_pointer", format!("seed-{p}-{name}-{i}"), v);
                    }
                    add("table", seed, bytes);
                }
                Some(FileKind::Manifest(_)) => add("manifest", seed, bytes),
                Some(FileKind::Journal(_)) if bytes.len() > HEADER_SIZE => {
                    add("journal", seed, bytes)
                }
                Some(FileKind::ValueLog(_)) if bytes.len() > FILE_HEADER_LEN => {
                    add("value_log", seed, bytes)
                }
                Some(FileKind::ValueSegment(_)) if bytes.len() > FILE_HEADER_LEN => {
                    add("hash_segment", seed, bytes)
                }
                Some(FileKind::ValueTable(_)) => add("value_table", seed, bytes),
                Some(FileKind::HashIndex(_)) => add("hash_index_checkpoint", seed, bytes),
                _ => {}
            }
        }
    }
    // The retired fixed form of a pointer, still read.
    let mut fixed = vec![STORE_LOG];
    fixed.extend_from_slice(&7u64.to_le_bytes());
    fixed.extend_from_slice(&4096u64.to_le_bytes());
    fixed.extend_from_slice(&1021u32.to_le_bytes());
    fixed.extend_from_slice(&0xdead_beef_u32.to_le_bytes());
    out.push(("value_pointer", "seed-fixed-form".into(), fixed));
    out
}

/// The index block and the first data blocks of a key table.
fn table_blocks(data: &[u8]) -> Vec<Vec<u8>> {
    let mut data = data.to_vec();
    let Some(([_, _, index], limit)) = fix_footer(&mut data) else {
        return Vec::new();
    };
    let Some(raw) = block_bytes(&data, index, limit) else {
        return Vec::new();
    };
    let mut out = vec![raw.to_vec()];
    if let Ok(b) = Block::new(raw.to_vec(), Arc::new(PathBuf::new()), 0) {
        let b = Arc::new(b);
        let mut it = b.iter();
        it.seek_to_first();
        while it.valid() {
            if let Some(d) =
                BlockHandle::decode(it.value()).and_then(|h| block_bytes(&data, h, limit))
            {
                out.push(d.to_vec());
            }
            it.next();
        }
    }
    out
}

/// The value pointers a key table's entries hold.
fn pointers_in_table(data: &[u8]) -> Vec<Vec<u8>> {
    let path = filename::table(Path::new(DIR), 1);
    let (_mem, fs) = mem_fs(&[(path.clone(), data)]);
    let cache = Arc::new(BlockCache::new(0));
    let size = data.len() as u64;
    let Ok(t) = Table::open(&fs, path, 1, size, cache, IoClass::UserRead) else {
        return Vec::new();
    };
    let t = Arc::new(t);
    let mut it = t.iter(IoClass::UserRead, false);
    it.seek_to_first();
    let mut out = BTreeMap::new();
    while it.valid() {
        if key::kind_byte(it.key()) & 0x7f == Kind::ValuePointer as u8 {
            out.insert(it.value().to_vec(), ());
        }
        it.next();
    }
    out.into_keys().collect()
}

#[cfg(test)]
mod tests {
    //! Every input fuzzing found (`fuzz/artifacts-found/`, named after the
    //! target that found it) and every seed of the corpus, run through its
    //! target's function: a finding that comes back fails CI.
    use std::path::Path;

    /// A fuzz target's function.
    type Target = fn(&[u8]);

    fn target(name: &str) -> Option<Target> {
        let targets: [(&str, Target); 10] = [
            ("block", super::block),
            ("table", super::table),
            ("value_table", super::value_table),
            ("manifest", super::manifest),
            ("journal", super::journal),
            ("value_log", super::value_log),
            ("hash_segment", super::hash_segment),
            ("hash_index_checkpoint", super::hash_index_checkpoint),
            ("value_pointer", super::value_pointer),
            ("resp", |_| {}), // the server's: its own crate replays it
        ];
        // The longest target name the file's name starts with.
        (targets.iter())
            .filter(|(t, _)| name.starts_with(t) && name[t.len()..].starts_with(['-', '/']))
            .max_by_key(|(t, _)| t.len())
            .map(|&(_, f)| f)
    }

    #[test]
    fn every_finding_and_seed_runs_clean() {
        let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
        let mut inputs = Vec::new();
        for e in std::fs::read_dir(fuzz.join("artifacts-found")).unwrap() {
            let p = e.unwrap().path();
            inputs.push((p.file_name().unwrap().to_string_lossy().into_owned(), p));
        }
        let findings = inputs.len();
        for dir in std::fs::read_dir(fuzz.join("corpus")).unwrap() {
            let dir = dir.unwrap().path();
            let t = dir.file_name().unwrap().to_string_lossy().into_owned();
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                let n = p.file_name().unwrap().to_string_lossy().into_owned();
                if n.starts_with("seed-") {
                    inputs.push((format!("{t}/{n}"), p));
                }
            }
        }
        assert!(
            findings >= 9 && inputs.len() > 100,
            "{} inputs",
            inputs.len()
        );
        for (name, path) in inputs {
            let run = target(&name).unwrap_or_else(|| panic!("{name}: no target"));
            let data = std::fs::read(&path).unwrap();
            let r = std::panic::catch_unwind(|| run(&data));
            assert!(r.is_ok(), "{name} panics again");
        }
    }
}
