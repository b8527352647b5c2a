//! Replay of the value log as the journal at recovery (WiscKey, FAST '16, §3.4.2;
//! `docs/design.md`, "Value log as journal"): from the position the
//! manifest records to the log's end, one write group at a time.

use std::collections::BTreeMap;
use std::path::Path;

use super::meta::LogMeta;
use super::reader::{copy_key, scan_file_from, OwnedRecord};
use super::store::{LogStore, RecoveredCopy};
use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::filename;
use crate::journal::replay::{Source, TornTail};
use crate::key::Kind;
use crate::options::JournalRecovery;
use crate::pointer::{ValuePointer, STORE_LOG};
use crate::record::{
    kind_of, run_pointers, FILE_HEADER_LEN, FLAG_GROUP_END, FLAG_INLINE, KIND_DELETE, KIND_PUT,
    KIND_RELOCATE, KIND_RELOCATE_RUN,
};
use crate::value::files::RecordFiles;
use crate::value::{PointerCheck, ValueStore};

/// Replays the value log from `from` to its end (WiscKey, FAST '16, §3.4.2): each
/// write group becomes a batch once its last record (`FLAG_GROUP_END`)
/// is read, so a group cut by the crash is dropped whole. GC copies are
/// skipped; their relocations are records of their own: a relocation run
/// per GC commit (older logs: a `relocate` record per key).
///
/// Adds to `garbage` (bytes per file) every replayed record no index entry
/// will point at once the replay is flushed: inline values, deletes and
/// relocation records, and the records of a group the crash cut (`docs/
/// design.md`, "Space accounting"). When history ends early, records after
/// that point are not counted.
///
/// A bad record where `log` says the log was durable is damage, never a
/// torn write (`docs/design.md`, "Torn tails and damage"); what lies
/// before `from` is in tables, and replay leaves it to reads and `verify`.
pub(crate) fn replay_value_log(
    src: &Source<'_>,
    store: &LogStore,
    log: &LogMeta,
    from: (u64, u64),
    sink: &mut dyn FnMut(&WriteBatch) -> Result<()>,
    garbage: &mut BTreeMap<u64, u64>,
) -> Result<()> {
    // Counted whichever way the replay ends (history may end early).
    let mut bytes = ReplayedBytes::default();
    let r = replay_records(src, store, log, from, sink, &mut bytes);
    for (file, read) in bytes.read {
        let unpointed = read - bytes.pointed.get(&file).copied().unwrap_or(0);
        if unpointed > 0 {
            *garbage.entry(file).or_default() += unpointed;
        }
    }
    r
}

/// Bytes per file of the records a replay read, of the pointed-at ones in
/// the group being read, and of those in the groups it applied.
#[derive(Default)]
struct ReplayedBytes {
    read: BTreeMap<u64, u64>,
    pointed_in_group: Vec<(u64, u64)>,
    pointed: BTreeMap<u64, u64>,
}

fn replay_records(
    src: &Source<'_>,
    store: &LogStore,
    log: &LogMeta,
    from: (u64, u64),
    sink: &mut dyn FnMut(&WriteBatch) -> Result<()>,
    bytes: &mut ReplayedBytes,
) -> Result<()> {
    let mode = src.mode;
    let mut group: Option<WriteBatch> = None;
    let mut torn = TornTail::new(mode, true);
    for file in store.sealed_from(from.0) {
        let path = filename::value_log(src.dir, file);
        let data = store.read_file(file)?;
        // A file created and never written (or with part of its header)
        // scans empty. The first is scanned from the replay start (a
        // record boundary): damage before it is no concern of replay's.
        let start = if file == from.0 { from.1 } else { 0 };
        let scan = scan_file_from(&data, &path, start.max(FILE_HEADER_LEN as u64))?;
        let records: Vec<_> = scan
            .records
            .into_iter()
            .filter(|(_, _, rec)| !rec.is_gc_copy())
            .collect();
        if !records.is_empty()
            && !torn.later_records("value log damaged before records of a later file")?
        {
            return Ok(());
        }
        for (off, len, rec) in records {
            let crc = crate::coding::u32_at(&data, off as usize);
            let here = ValuePointer {
                store: STORE_LOG,
                file,
                offset: off,
                record_len: len,
                record_crc: crc,
            };
            if rec.seq == 0 || rec.seq > crate::key::MAX_SEQUENCE {
                return Err(Error::corruption(
                    &path,
                    off,
                    format!("value log record has sequence {}, not a real one", rec.seq),
                ));
            }
            let g = group.get_or_insert_with(|| {
                let mut b = WriteBatch::new();
                b.set_sequence(rec.seq);
                b
            });
            if rec.seq != g.sequence() + g.len() as u64 {
                return Err(Error::corruption(
                    &path,
                    off,
                    format!(
                        "value log record has sequence {} inside a group expecting {}",
                        rec.seq,
                        g.sequence() + g.len() as u64
                    ),
                ));
            }
            *bytes.read.entry(file).or_default() += u64::from(len);
            if !add_replayed(src, store, g, &rec, &here, &path, &data)? {
                return Ok(()); // history ends before this group
            }
            if kind_of(rec.flags) == KIND_PUT && rec.flags & FLAG_INLINE == 0 {
                bytes.pointed_in_group.push((file, u64::from(len)));
            }
            if rec.flags & FLAG_GROUP_END != 0 {
                let batch = group.take().expect("group in progress");
                sink(&batch)?;
                for (f, n) in bytes.pointed_in_group.drain(..) {
                    *bytes.pointed.entry(f).or_default() += n;
                }
            }
        }
        // A bad last record the log had synced is damage, not a tear.
        let damage = scan.damage.or_else(|| {
            let off = scan.torn_tail_at.filter(|&off| log.is_durable(file, off))?;
            Some((
                off,
                "value record damaged where the log was synced (not a torn write)".into(),
            ))
        });
        if let Some((off, why)) = damage {
            match mode {
                JournalRecovery::SkipAnyCorrupted => {
                    group = None;
                    bytes.pointed_in_group.clear();
                    continue;
                }
                JournalRecovery::PointInTime => return Ok(()),
                _ => return Err(Error::corruption(&path, off, why)),
            }
        }
        if let Some(off) = scan.torn_tail_at {
            torn.note(path, off, "incomplete value record at the end")?;
        }
    }
    Ok(())
}

/// Adds the operation a replayed record stands for to `group`. `false`
/// when history must end before the group.
/// `data` is the file `here` lies in, from its start.
fn add_replayed(
    src: &Source<'_>,
    store: &LogStore,
    group: &mut WriteBatch,
    rec: &OwnedRecord,
    here: &ValuePointer,
    path: &Path,
    data: &[u8],
) -> Result<bool> {
    let kind = kind_of(rec.flags);
    match kind {
        KIND_RELOCATE_RUN => {
            let bad = |why: &str| Error::corruption(path, here.offset, why.to_string());
            if !group.is_empty() || rec.flags & FLAG_GROUP_END == 0 {
                return Err(bad("relocation run is not a write group of its own"));
            }
            let pointers =
                run_pointers(&rec.value).ok_or_else(|| bad("malformed relocation run"))?;
            for encoded in pointers {
                let p = ValuePointer::decode(encoded)
                    .filter(|p| p.store == STORE_LOG)
                    .ok_or_else(|| bad("malformed pointer in a relocation run"))?;
                // The copies were durable before the run was written, so
                // they lie earlier in the log, mostly in this file. A
                // collected one is shadowed by a later relocation and
                // needs no entry (nor could its key be read).
                let span = usize::try_from(p.offset)
                    .ok()
                    .and_then(|start| Some(start..start.checked_add(p.record_len as usize)?));
                let in_here = span
                    .filter(|_| p.file == here.file && !store.is_collected_at(p.file, p.offset))
                    .and_then(|span| data.get(span));
                let copy = match in_here {
                    Some(raw) => RecoveredCopy::Found(copy_key(raw, &p, path)?),
                    None => store.recovered_copy(&p)?,
                };
                match copy {
                    RecoveredCopy::Found(key) => {
                        group.add_raw(Kind::ValuePointer, &key, encoded);
                    }
                    RecoveredCopy::Collected => {}
                    RecoveredCopy::Lost => {
                        if src.mode == JournalRecovery::PointInTime {
                            return Ok(false);
                        }
                        return Err(bad(
                            "relocation run points past the durable end of the value log",
                        ));
                    }
                }
            }
        }
        KIND_PUT if rec.flags & FLAG_INLINE != 0 => {
            group.add_raw(Kind::Value, &rec.key, &rec.value)
        }
        KIND_PUT => group.add_raw(Kind::ValuePointer, &rec.key, &here.encode()),
        KIND_DELETE => group.add_raw(Kind::Delete, &rec.key, &[]),
        KIND_RELOCATE => {
            let p = ValuePointer::decode(&rec.value).ok_or_else(|| {
                Error::corruption(
                    path,
                    here.offset,
                    "malformed pointer in a relocation record",
                )
            })?;
            // The copy was made durable before this record was written,
            // so it cannot have been lost; a collected one is shadowed
            // by a later relocation.
            match store.check_recovered(&p, &rec.key)? {
                PointerCheck::Valid | PointerCheck::Collected => {}
                PointerCheck::Lost => {
                    if src.mode == JournalRecovery::PointInTime {
                        return Ok(false);
                    }
                    return Err(Error::corruption(
                        path,
                        here.offset,
                        "relocation points past the durable end of the value log",
                    ));
                }
            }
            group.add_raw(Kind::ValuePointer, &rec.key, &rec.value);
        }
        _ => {
            return Err(Error::corruption(
                path,
                here.offset,
                format!("value record kind {kind} in the log"),
            ))
        }
    }
    Ok(true)
}
