//! Flush and compaction jobs: turning sorted streams into tables.
//!
//! Both run the same merge loop (`write_merged`), which drops what no reader
//! can see any more (`docs/design.md`, "Compaction"):
//! - an entry shadowed by a newer entry of the same user key whose sequence
//!   is at or below the oldest snapshot;
//! - a tombstone at or below the oldest snapshot when no deeper level may
//!   hold the key (compaction only).
//!
//! Outputs are cut only between user keys, so that no user key spans two
//! tables of a level, at `target_file_size_bytes` or when an output would
//! overlap too much of the grandparent level (LevelDB's rule, which bounds
//! the cost of the next compaction).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::filename;
use crate::fs::{CountingFs, IoClass};
use crate::index::{CompactionPlan, IndexShape, LevelIter};
use crate::iter::{InternalIterator, MergingIterator};
use crate::key::{self, Kind, MAX_SEQUENCE};
use crate::table::builder::TableOptions;
use crate::table::{TableBuilder, TableCache};
use crate::value::log::format::{Record, KIND_PUT};
use crate::value::ValueStore;
use crate::version::{FileMeta, Version, VersionEdit};

/// Counters of one job.
#[derive(Debug, Default, Clone)]
pub(crate) struct JobStats {
    pub(crate) bytes_read: u64,
    pub(crate) bytes_written: u64,
    pub(crate) entries_in: u64,
    pub(crate) entries_dropped: u64,
    pub(crate) tables_written: u64,
    /// Bytes of value records written to the value store (separation at
    /// flush).
    pub(crate) values_separated: u64,
    /// Bytes of value log records whose pointers were dropped, per file.
    pub(crate) garbage: std::collections::BTreeMap<u64, u64>,
}

/// What the merge loop needs to know.
pub(crate) struct MergeParams<'a> {
    pub(crate) fs: &'a CountingFs,
    pub(crate) dir: &'a Path,
    pub(crate) class: IoClass,
    pub(crate) table: TableOptions,
    /// Entries at or below this sequence are visible to every reader.
    pub(crate) smallest_snapshot: u64,
    /// Cut outputs at this size (`u64::MAX`: one output).
    pub(crate) target_file_size_bytes: u64,
    /// For dropping tombstones: the version and output level, if allowed.
    pub(crate) bottom: Option<(&'a Version, &'a dyn IndexShape, usize)>,
    pub(crate) grandparents: &'a [Arc<FileMeta>],
    pub(crate) max_grandparent_overlap_bytes: u64,
    /// Allocates a file number and records it as a pending output, so the
    /// obsolete-file sweep leaves the file alone.
    pub(crate) new_file_number: &'a dyn Fn() -> u64,
    /// Set when the database shuts down: the job stops early with an error
    /// (its outputs are never installed and are swept later).
    pub(crate) cancel: &'a AtomicBool,
    /// Flushes under `separate_at_flush`: values at or above the threshold
    /// go to this store and the table keeps pointers (HashKV's write cache,
    /// seed 000 §3.2). Only entries that survive the merge are written, so
    /// versions shadowed in the memtable never reach the store.
    pub(crate) separate: Option<(&'a dyn ValueStore, usize)>,
}

struct Output {
    number: u64,
    builder: TableBuilder,
}

fn finish(out: Output, stats: &mut JobStats) -> Result<FileMeta> {
    let built = out.builder.finish()?;
    stats.bytes_written += built.file_size;
    stats.tables_written += 1;
    Ok(FileMeta {
        number: out.number,
        file_size: built.file_size,
        smallest: built.smallest,
        largest: built.largest,
        entries: built.properties.entries,
        deletions: built.properties.deletions,
    })
}

/// Writes the entries of `iter` into new tables, dropping what no reader
/// needs. Returns the tables written (synced, not yet in any version).
pub(crate) fn write_merged(
    iter: &mut dyn InternalIterator,
    p: &MergeParams<'_>,
    stats: &mut JobStats,
) -> Result<Vec<FileMeta>> {
    let mut outputs = Vec::new();
    let mut current: Option<Output> = None;
    let mut user_key: Vec<u8> = Vec::new();
    let mut has_user_key = false;
    let mut last_seq_for_key = MAX_SEQUENCE;
    let (mut gp_index, mut gp_overlap, mut gp_seen) = (0usize, 0u64, false);
    let mut pointer_key = Vec::new();

    iter.seek_to_first();
    while iter.valid() {
        let ik = iter.key();
        let uk = key::user_key(ik);
        stats.entries_in += 1;
        if stats.entries_in.is_multiple_of(1024) && p.cancel.load(Ordering::Relaxed) {
            return Err(Error::Closed);
        }
        if !has_user_key || uk != user_key.as_slice() {
            // Between user keys: the only place an output may be cut.
            let mut cut = false;
            while gp_index < p.grandparents.len()
                && key::compare(ik, &p.grandparents[gp_index].largest).is_gt()
            {
                if gp_seen {
                    gp_overlap += p.grandparents[gp_index].file_size;
                }
                gp_index += 1;
            }
            gp_seen = true;
            if gp_overlap > p.max_grandparent_overlap_bytes {
                cut = true;
            }
            if let Some(out) = &current {
                if cut || out.builder.estimated_size() >= p.target_file_size_bytes {
                    outputs.push(finish(current.take().expect("current output"), stats)?);
                    gp_overlap = 0;
                }
            }
            user_key.clear();
            user_key.extend_from_slice(uk);
            has_user_key = true;
            last_seq_for_key = MAX_SEQUENCE;
        }
        let seq = key::sequence(ik);
        let drop = if last_seq_for_key <= p.smallest_snapshot {
            true // shadowed by a newer entry every reader sees
        } else {
            key::kind_byte(ik) == Kind::Delete as u8
                && seq <= p.smallest_snapshot
                && p.bottom
                    .is_some_and(|(v, shape, level)| shape.is_bottommost_for(v, level, uk))
        };
        last_seq_for_key = seq;
        if drop {
            stats.entries_dropped += 1;
            if key::kind_byte(ik) == Kind::ValuePointer as u8 {
                if let Some(ptr) = crate::value::pointer::ValuePointer::decode(iter.value()) {
                    *stats.garbage.entry(ptr.file).or_default() += u64::from(ptr.record_len);
                }
            }
        } else {
            if current.is_none() {
                let number = (p.new_file_number)();
                let file = p.fs.create(&filename::table(p.dir, number), p.class)?;
                current = Some(Output {
                    number,
                    builder: TableBuilder::new(file, p.table),
                });
            }
            let out = current.as_mut().expect("current output");
            let kind = key::kind_byte(ik);
            match p.separate {
                Some((store, threshold))
                    if kind == Kind::Value as u8 && iter.value().len() >= threshold =>
                {
                    let ptr = store.append(&Record {
                        seq,
                        flags: KIND_PUT,
                        key: uk,
                        value: iter.value(),
                    })?;
                    stats.values_separated += u64::from(ptr.record_len);
                    key::encode_into(&mut pointer_key, uk, seq, Kind::ValuePointer as u8);
                    out.builder.add(&pointer_key, &ptr.encode())?;
                }
                _ => out.builder.add(ik, iter.value())?,
            }
        }
        iter.next();
    }
    iter.status()?;
    if let Some(out) = current.take() {
        outputs.push(finish(out, stats)?);
    }
    Ok(outputs)
}

/// Runs a (non-trivial) compaction and returns the edit that installs it.
pub(crate) fn run_compaction(
    plan: &CompactionPlan,
    tables: &Arc<TableCache>,
    params: MergeParams<'_>,
    stats: &mut JobStats,
) -> Result<VersionEdit> {
    let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
    let run = |files: Vec<Arc<FileMeta>>| -> Box<dyn InternalIterator> {
        Box::new(LevelIter::new(
            files,
            tables.clone(),
            IoClass::Compaction,
            false,
        ))
    };
    for input in plan.inputs.iter().filter(|i| !i.files.is_empty()) {
        if input.sorted_run {
            children.push(run(input.files.clone()));
        } else {
            children.extend(input.files.iter().map(|f| run(vec![f.clone()])));
        }
    }
    let mut iter = MergingIterator::new(children);
    stats.bytes_read += plan.input_bytes();
    let outputs = write_merged(&mut iter, &params, stats)?;
    let mut edit = VersionEdit::default();
    for input in &plan.inputs {
        for f in &input.files {
            edit.delete_file(input.level, f.number);
        }
    }
    for f in outputs {
        edit.add_file(plan.output_level, f);
    }
    Ok(edit)
}

/// The edit of a trivial move: the files change level, nothing is
/// rewritten.
pub(crate) fn trivial_move_edit(plan: &CompactionPlan) -> VersionEdit {
    let mut edit = VersionEdit::default();
    for input in &plan.inputs {
        for f in &input.files {
            edit.delete_file(input.level, f.number);
            edit.added.push((plan.output_level as u32, f.clone()));
        }
    }
    edit
}
