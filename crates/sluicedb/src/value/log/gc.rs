//! GC of the value log (WiscKey, FAST '16, §3.3.2): a step reads a chunk at the
//! tail, keeps the records the index still points at and appends their
//! copies at the head; installing the step moves the tail past the chunk
//! and frees the files behind it. The engine's driver does the rest
//! (`crate::gc`).

use super::reader::OwnedRecord;
use super::store::{Chunk, LogStore};
use crate::error::Result;
use crate::gc::{Collected, GcHost, GcTrigger, GcVictim, Relocation, SeenView};
use crate::pointer::ValuePointer;
use crate::record::{Record, FLAG_GC_COPY, KIND_PUT};
use crate::table::reader::SortedProbes;
use crate::value::ValueStore;
use crate::version::Version;

/// Background GC runs once the log is within 1/this of its capacity, so
/// that writes seldom reach it and wait.
const GC_HEADROOM_DIVISOR: u64 = 16;

/// A chunk at the tail, read before the barrier (it lies in sealed files,
/// which no append reaches).
struct LogVictim<'a> {
    store: &'a LogStore,
    file: u64,
    chunk: Chunk,
}

impl LogStore {
    /// Where GC would start. When the value log is the journal, files from
    /// the replay start on are out of its reach: recovery reads them.
    pub(super) fn gc_start_in(&self, current: &Version) -> Option<(u64, u64)> {
        let meta = &current.values.log;
        self.gc_start(meta.tail, meta.journal_from.map(|j| j.0))
    }

    /// Reads the chunk at the tail.
    pub(super) fn gc_victim_log(
        &self,
        host: &dyn GcHost,
    ) -> Result<Option<Box<dyn GcVictim + '_>>> {
        let Some((file, offset)) = self.gc_start_in(&host.current()) else {
            return Ok(None);
        };
        let chunk = self.read_chunk(file, offset, self.gc_chunk_bytes)?;
        Ok(Some(Box::new(LogVictim {
            store: self,
            file,
            chunk,
        })))
    }

    /// Known garbage reached the ratio, the log neared its capacity, or
    /// the interval passed; and there is a sealed file to collect.
    pub(super) fn gc_wanted_log(&self, t: &GcTrigger<'_>) -> bool {
        let total = self.total_bytes();
        let garbage: u64 = t.current.values.garbage.values().sum();
        let by_ratio = t
            .garbage_ratio
            .is_some_and(|r| total > 0 && garbage as f64 >= r * total as f64);
        let by_size = t
            .capacity_bytes
            .is_some_and(|c| total > c - c / GC_HEADROOM_DIVISOR);
        (by_ratio || by_size || t.interval_due) && self.gc_start_in(t.current).is_some()
    }

    /// Past its capacity with a file GC can collect: writes wait for GC.
    pub(super) fn over_capacity_log(&self, current: &Version, capacity: u64) -> bool {
        self.total_bytes() > capacity && self.gc_start_in(current).is_some()
    }

    /// True when only the replay start (value log as journal) keeps GC from
    /// a sealed file: a flush moves it to the head.
    pub(super) fn gc_needs_flush_log(&self, current: &Version) -> bool {
        let meta = &current.values.log;
        self.gc_start(meta.tail, None).is_some() && self.gc_start_in(current).is_none()
    }
}

impl GcVictim for LogVictim<'_> {
    fn collect(&mut self, host: &dyn GcHost, view: &SeenView) -> Result<Collected> {
        let mut out = Collected {
            bytes_read: self.chunk.bytes,
            records: self.chunk.records.len() as u64,
            ..Collected::default()
        };
        let records = &self.chunk.records;
        let live = live_records(records, host, view)?;
        for ((p, rec), _) in records.iter().zip(&live).filter(|(_, &live)| live) {
            let new = self.store.append(&Record {
                seq: rec.seq,
                flags: KIND_PUT | FLAG_GC_COPY,
                key: &rec.key,
                value: &rec.value,
            })?;
            out.bytes_written += u64::from(new.record_len);
            out.moves.push(Relocation {
                key: rec.key.clone(),
                old: *p,
                new,
            });
        }
        // The copies are durable before any index entry points at them.
        self.store.sync()?;
        let next = self.chunk.next;
        out.edit.values.log.tail = Some(next);
        out.release_to = Some(next);
        if next.0 > self.file {
            out.frees = self.store.sealed_between(self.file, next.0);
        }
        Ok(out)
    }
}

/// Which of a chunk's records the index points at in `view`: one lookup
/// per distinct key (a key updated often has several records in a chunk,
/// and at most one is live), in key order, so that neighbouring lookups
/// meet the same memtable nodes and index blocks (`SortedProbes`). WiscKey
/// (FAST '16), §3.3.3, checks each record at the tail by a lookup; the
/// order of the lookups is ours. The copies keep the log's order.
fn live_records(
    records: &[(ValuePointer, OwnedRecord)],
    host: &dyn GcHost,
    view: &SeenView,
) -> Result<Vec<bool>> {
    let mut live = vec![false; records.len()];
    let mut order: Vec<usize> = (0..records.len())
        .filter(|&i| records[i].1.may_be_live())
        .collect();
    let key = |i: usize| records[i].1.key.as_slice();
    order.sort_unstable_by(|&a, &b| key(a).cmp(key(b)));
    let _sorted = SortedProbes::start();
    for run in order.chunk_by(|&a, &b| key(a) == key(b)) {
        if let Some(p) = host.pointer_of(view, key(run[0]))? {
            // Pointers name file and offset: at most one record matches.
            if let Some(&i) = run.iter().find(|&&i| records[i].0 == p) {
                live[i] = true;
            }
        }
    }
    Ok(live)
}
