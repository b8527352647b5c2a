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
use crate::fs::{CountingFs, FileSyncer, IoClass};
use crate::index::{CompactionPlan, IndexShape, LevelIter};
use crate::iter::{InternalIterator, MergingIterator};
use crate::key::{self, Kind, MAX_SEQUENCE};
use crate::memtable::Lookup;
use crate::pointer::ValuePointer;
use crate::record::{Record, FLAG_FIRST_VERSION, KIND_PUT};
use crate::table::builder::TableOptions;
use crate::table::{TableBuilder, TableCache};
use crate::value::files::CopyWindows;
use crate::value::meta::ValueEdit;
use crate::value::{Dropped, ValueSink, ValueStore, ValueTally};
use crate::version::{FileMeta, TablePayload, Version, VersionEdit};

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
    /// Values a flush that separates values separated, and their bytes.
    pub(crate) separated: (u64, u64),
    /// Values such a flush kept inline (under the threshold), and their
    /// bytes.
    pub(crate) kept_inline: (u64, u64),
    /// The garbage and pointer counts the value store settles at install.
    pub(crate) values: ValueTally,
    /// What the value store's flush sink adds to the job's edit.
    pub(crate) value_edit: ValueEdit,
    /// Records the merge copied out of `MergeParams::relocate`'s files.
    pub(crate) relocated_records: u64,
    /// Their bytes.
    pub(crate) relocated_bytes: u64,
    /// Entries a flush wrote without counting the version they shadow (a
    /// snapshot still reads it, or the lookup failed): a compaction that
    /// drops that version counts it.
    pub(crate) shadows_uncounted: u64,
    /// Lookups a flush made of the versions its entries shadow.
    pub(crate) shadow_lookups: u64,
    /// Lookups its [`look_ahead`] thread made that the merge did not use.
    pub(crate) shadow_lookups_unused: u64,
    /// The output level's input tables ([`ByRange::below`]) already
    /// replaced by installed outputs: a prefix of them.
    pub(crate) below_installed: usize,
    /// Key ranges installed before the job's own edit.
    pub(crate) ranges_installed: u64,
    /// Entries dropped as exact twins of the entry before them (left by a
    /// compaction installed a range at a time that did not finish).
    pub(crate) twins_dropped: u64,
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
    /// Sorted user keys no output spans: an output ends before each (the
    /// unified shape's range partitions, UniKV, ICDE '20, §III-D).
    pub(crate) boundaries: &'a [Vec<u8>],
    /// Allocates a file number and records it as a pending output, so the
    /// obsolete-file sweep leaves the file alone.
    pub(crate) new_file_number: &'a dyn Fn() -> u64,
    /// Set when the database shuts down: the job stops early with an error
    /// (its outputs are never installed and are swept later).
    pub(crate) cancel: &'a AtomicBool,
    /// Flushes under `separate_at_flush`: values at or above the threshold
    /// go to this store and the table keeps pointers (HashKV's write cache,
    /// HashKV, USENIX ATC '18, §3.2). Only entries that survive the merge are written, so
    /// versions shadowed in the memtable never reach the store.
    pub(crate) separate: Option<(&'a dyn ValueStore, usize)>,
    /// Flushes into a database with a value store: the tables below the
    /// memtable, whose newest version of each key the flush counts as
    /// garbage (see [`write_merged`]).
    pub(crate) older: Option<OlderTables<'a>>,
    /// The database's value store: it learns the versions a job drops
    /// (DropCache) and says how their garbage is counted.
    pub(crate) values: Option<&'a dyn ValueStore>,
    /// The job reads tables (a compaction): each pointer entry it reads
    /// leaves the version with them (`ValueTally::refs`).
    pub(crate) inputs_are_tables: bool,
    /// Value files whose records the merge moves (the unified shape's GC,
    /// UniKV, ICDE '20, §III-C): each kept pointer entry naming one is written
    /// with a pointer to a copy of its record in the merge's own value
    /// files (`separate`'s sink), and the old record counts as garbage.
    pub(crate) relocate: &'a [u64],
    /// A compaction that installs its outputs a key range at a time
    /// (`docs/design.md`, "Compactions installed a key range at a time").
    pub(crate) by_range: Option<&'a ByRange<'a>>,
}

/// How a compaction installs its outputs a key range at a time: whenever
/// the merge has passed the last key of one of the output level's input
/// tables, and at least `min_bytes` of outputs wait, it cuts its output
/// there and `install` swaps the outputs written so far for the output
/// level's inputs they replace. The other inputs stay until the job's own
/// edit; what they hold of the installed range is also in the outputs,
/// the same entries with the same sequence numbers, which later merges
/// drop as twins.
pub(crate) struct ByRange<'a> {
    /// The output level's input tables, a sorted run.
    pub(crate) below: &'a [Arc<FileMeta>],
    /// Output bytes that must wait before a range is installed.
    pub(crate) min_bytes: u64,
    /// Installs finished outputs in place of the `below` tables given.
    pub(crate) install: &'a InstallRange<'a>,
}

/// Installs finished outputs in place of the output level's inputs given.
pub(crate) type InstallRange<'a> = dyn Fn(Vec<FileMeta>, &[Arc<FileMeta>]) -> Result<()> + 'a;

/// The tables a flush's memtable lies above.
pub(crate) struct OlderTables<'a> {
    pub(crate) version: &'a Version,
    pub(crate) shape: &'a dyn IndexShape,
    pub(crate) tables: &'a TableCache,
    /// Makes another iterator over the flush's input, for a thread that
    /// looks its keys up in these tables ahead of the merge
    /// ([`look_ahead`]); without it the merge looks each key up itself.
    pub(crate) ahead: Option<&'a (dyn Fn() -> Box<dyn InternalIterator> + Sync)>,
}

/// Keys a [`look_ahead`] thread sends at a time.
const AHEAD_BATCH: usize = 256;
/// Batches a [`look_ahead`] thread may be ahead by.
const AHEAD_BATCHES: usize = 8;

/// One key's lookup made ahead of the merge: the user key and what
/// [`IndexShape::get_shadowed`] found for it.
type Looked = (Vec<u8>, Result<Lookup>);

/// A flush's lookups of the versions its keys shadow, made by another
/// thread while this one merges, separates values and builds tables: on
/// a 2 GiB hashkv update run they were 13% of the CPU, all on the flush's
/// thread, and writes wait for the flush when the memtables are full.
/// Both iterate the same memtable in the same order; a key the helper has
/// not reached (or a failed helper) falls back to the merge's own lookup,
/// which would find the same: both read the version the flush lies above.
fn look_ahead(
    older: &OlderTables<'_>,
    ahead: &(dyn Fn() -> Box<dyn InternalIterator> + Sync),
    cancel: &AtomicBool,
    tx: std::sync::mpsc::SyncSender<Vec<Looked>>,
) {
    let _sorted = crate::table::reader::SortedProbes::uncached();
    let mut it = ahead();
    it.seek_to_first();
    let mut batch = Vec::with_capacity(AHEAD_BATCH);
    // The key being passed and the flag of its oldest entry so far: the
    // merge looks up only a key whose oldest entry in the memtable is not
    // counted already (`finish_key`), so GC's relocations, flagged
    // counted, are passed over here too. Looking them up as well was
    // about a third of this thread's lookups in a 2 GiB hashkv update run
    // (3.3 million relocations beside 5.0 million lookups the merge used).
    let mut current: Option<(Vec<u8>, bool)> = None;
    loop {
        let next = it.valid().then(|| it.key());
        if let (Some((k, counted)), Some(ik)) = (&mut current, next) {
            if k.as_slice() == key::user_key(ik) {
                *counted = key::shadow_counted(ik);
                it.next();
                continue;
            }
        }
        if let Some((uk, false)) = current.take() {
            let found = older.shape.get_shadowed(older.version, older.tables, &uk);
            batch.push((uk, found));
            if batch.len() == AHEAD_BATCH {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(AHEAD_BATCH));
                // The merge ended (done, failed or cancelled).
                if tx.send(full).is_err() || cancel.load(Ordering::Relaxed) {
                    return;
                }
            }
        }
        let Some(ik) = next else {
            break;
        };
        current = Some((key::user_key(ik).to_vec(), key::shadow_counted(ik)));
        it.next();
    }
    let _ = tx.send(batch);
}

/// The merge's side of [`look_ahead`].
struct LookedAhead {
    rx: std::sync::mpsc::Receiver<Vec<Looked>>,
    batch: std::vec::IntoIter<Looked>,
    next: Option<Looked>,
    /// Lookups passed over.
    unused: u64,
}

impl LookedAhead {
    fn new(rx: std::sync::mpsc::Receiver<Vec<Looked>>) -> Self {
        LookedAhead {
            rx,
            batch: Vec::new().into_iter(),
            next: None,
            unused: 0,
        }
    }

    /// Lookups the helper made that the merge passed over, or has not
    /// taken by now (those it sent already: the helper may still be
    /// making some).
    fn unused_so_far(&self) -> u64 {
        let sent: usize = self.rx.try_iter().map(|b| b.len()).sum();
        self.unused + u64::from(self.next.is_some()) + (self.batch.len() + sent) as u64
    }

    /// The lookup of `user_key`, if the helper made it. Keys come in the
    /// merge's order, so the ones before it (which the merge did not ask
    /// for) are passed over; `None` when the helper is behind (waits for
    /// it) or done without it.
    fn take(&mut self, user_key: &[u8]) -> Option<Result<Lookup>> {
        loop {
            if self.next.is_none() {
                self.next = match self.batch.next() {
                    Some(looked) => Some(looked),
                    None => {
                        self.batch = self.rx.recv().ok()?.into_iter();
                        continue;
                    }
                };
            }
            let (k, _) = self.next.as_ref()?;
            match k.as_slice().cmp(user_key) {
                std::cmp::Ordering::Less => {
                    self.next = None;
                    self.unused += 1;
                }
                std::cmp::Ordering::Equal => return self.next.take().map(|(_, r)| r),
                std::cmp::Ordering::Greater => return None,
            }
        }
    }
}

struct Output {
    number: u64,
    builder: TableBuilder,
    /// Bytes of the records its pointer entries name.
    value_bytes: u64,
    payload: TablePayload,
}

/// Finishes `out`'s table without syncing it: its sync handle goes to
/// `unsynced`, for [`Writer::sync_outputs`].
fn finish(
    out: Output,
    stats: &mut JobStats,
    unsynced: &mut Vec<Arc<dyn FileSyncer>>,
) -> Result<FileMeta> {
    let (built, syncer) = out.builder.finish_unsynced()?;
    unsynced.push(syncer);
    stats.bytes_written += built.file_size;
    stats.tables_written += 1;
    Ok(FileMeta {
        number: out.number,
        file_size: built.file_size,
        smallest: built.smallest,
        largest: built.largest,
        entries: built.properties.entries,
        deletions: built.properties.deletions,
        value_bytes: out.value_bytes,
        payload: Some(out.payload),
        table: Default::default(),
    })
}

/// The kept entry of the current user key, held back until the next kept
/// entry or the next user key: dropping an older version of its key may
/// still change its [`key::SHADOW_COUNTED`] flag.
/// Its buffers are reused from entry to entry.
#[derive(Default)]
struct Held {
    ikey: Vec<u8>,
    value: Vec<u8>,
    present: bool,
    /// A flush found it to be its key's first version: the only entry of
    /// its key in the memtable, over nothing or a delete in the tables
    /// (`FLAG_FIRST_VERSION` on the record it separates).
    first: bool,
}

impl Held {
    fn set(&mut self, ikey: &[u8], value: &[u8]) {
        self.ikey.clear();
        self.ikey.extend_from_slice(ikey);
        self.value.clear();
        self.value.extend_from_slice(value);
        self.present = true;
        self.first = false;
    }
}

/// Writes the entries of `iter` into new tables, dropping what no reader
/// needs. Returns the tables written (synced, not yet in any version).
///
/// Garbage accounting (`docs/design.md`, "Space accounting"): a dropped
/// pointer counts as garbage unless the nearest newer version of its key
/// carries [`key::SHADOW_COUNTED`] (a flush counted it already); the kept
/// version above a dropped one takes over the dropped one's flag, since the
/// versions below now lie right under it. A flush (`p.older`) also looks up
/// each key's newest version in the tables below and counts it, flagging
/// the oldest version it writes.
pub(crate) fn write_merged(
    iter: &mut dyn InternalIterator,
    p: &MergeParams<'_>,
    stats: &mut JobStats,
) -> Result<Vec<FileMeta>> {
    let Some((older, ahead)) = p.older.as_ref().and_then(|o| o.ahead.map(|a| (o, a))) else {
        return merge(iter, p, stats, None);
    };
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel(AHEAD_BATCHES);
        let cancel = p.cancel;
        s.spawn(move || look_ahead(older, ahead, cancel, tx));
        // The receiver goes with the merge, so the helper stops at its next
        // send if the merge ends early.
        merge(iter, p, stats, Some(LookedAhead::new(rx)))
    })
}

/// [`write_merged`], with a flush's lookups made ahead when `ahead`.
fn merge(
    iter: &mut dyn InternalIterator,
    p: &MergeParams<'_>,
    stats: &mut JobStats,
    ahead: Option<LookedAhead>,
) -> Result<Vec<FileMeta>> {
    let mut w = Writer {
        ahead,
        p,
        sink: p
            .separate
            .map(|(store, threshold)| (store.flush_sink(), threshold)),
        outputs: Vec::new(),
        unsynced: Vec::new(),
        current: None,
        pointer_key: Vec::new(),
        copy_windows: CopyWindows::default(),
    };
    let mut user_key: Vec<u8> = Vec::new();
    let mut has_user_key = false;
    let mut last_seq_for_key = MAX_SEQUENCE;
    // The flag of the nearest newer version of the key in the stream.
    let mut shadow_counted = false;
    // Entries of the current user key in the stream so far.
    let mut key_entries = 0u32;
    let mut held = Held::default();
    let (mut gp_index, mut gp_overlap, mut gp_seen) = (0usize, 0u64, false);
    let mut boundary = 0usize;
    // The first of `ByRange::below` whose last key the merge has not passed.
    let mut below_next = 0usize;

    iter.seek_to_first();
    while iter.valid() {
        let ik = iter.key();
        let uk = key::user_key(ik);
        stats.entries_in += 1;
        if stats.entries_in.is_multiple_of(1024) && p.cancel.load(Ordering::Relaxed) {
            return Err(Error::Closed);
        }
        if !has_user_key || uk != user_key.as_slice() {
            if std::mem::take(&mut held.present) {
                w.finish_key(&mut held, shadow_counted, key_entries == 1, stats)?;
            }
            key_entries = 0;
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
            // Past the last key of one or more of the output level's
            // inputs: the outputs so far may replace them.
            let mut range_done = false;
            if let Some(r) = p.by_range {
                let mut crossed = false;
                while below_next < r.below.len() && uk > r.below[below_next].largest_user_key() {
                    below_next += 1;
                    crossed = true;
                }
                let waiting = || {
                    w.outputs.iter().map(|f| f.file_size).sum::<u64>()
                        + w.current.as_ref().map_or(0, |o| o.builder.estimated_size())
                };
                if crossed && waiting() >= r.min_bytes {
                    range_done = true;
                    cut = true;
                }
            }
            while p
                .boundaries
                .get(boundary)
                .is_some_and(|b| uk >= b.as_slice())
            {
                boundary += 1;
                cut = true;
            }
            if let Some(out) = &w.current {
                if cut || out.builder.estimated_size() >= p.target_file_size_bytes {
                    let out = w.current.take().expect("current output");
                    w.outputs.push(finish(out, stats, &mut w.unsynced)?);
                    gp_overlap = 0;
                }
            }
            if let (true, Some(r)) = (range_done, p.by_range) {
                w.sync_outputs()?;
                (r.install)(
                    std::mem::take(&mut w.outputs),
                    &r.below[stats.below_installed..below_next],
                )?;
                stats.below_installed = below_next;
                stats.ranges_installed += 1;
            }
            user_key.clear();
            user_key.extend_from_slice(uk);
            has_user_key = true;
            last_seq_for_key = MAX_SEQUENCE;
            shadow_counted = false;
        }
        let seq = key::sequence(ik);
        if last_seq_for_key == seq && held.present && is_twin(&held, ik, iter.value()) {
            // The same entry again (flags aside): one copy is enough.
            if p.inputs_are_tables && key::kind_byte(ik) == Kind::ValuePointer as u8 {
                count_ref(p, iter.value(), -1, stats);
            }
            stats.entries_dropped += 1;
            stats.twins_dropped += 1;
            iter.next();
            continue;
        }
        key_entries += 1;
        if p.inputs_are_tables && key::kind_byte(ik) == Kind::ValuePointer as u8 {
            count_ref(p, iter.value(), -1, stats);
        }
        let drop = if last_seq_for_key <= p.smallest_snapshot {
            true // shadowed by a newer entry every reader sees
        } else {
            key::kind_byte(ik) == Kind::Delete as u8
                && seq <= p.smallest_snapshot
                && p.bottom
                    .is_some_and(|(v, shape, level)| shape.is_bottommost_for(v, level, uk))
        };
        // The version that shadows a dropped one for every reader: the
        // next newer one, or a dropped bottom tombstone itself.
        let shadow = if last_seq_for_key == MAX_SEQUENCE {
            seq
        } else {
            last_seq_for_key
        };
        last_seq_for_key = seq;
        let flag = key::shadow_counted(ik);
        if drop {
            stats.entries_dropped += 1;
            if let Some(v) = p.values {
                v.note_dropped(uk, shadow);
            }
            if !shadow_counted && key::kind_byte(ik) == Kind::ValuePointer as u8 {
                count_pointer(
                    p.values,
                    iter.value(),
                    (uk, seq),
                    shadow,
                    p.inputs_are_tables,
                    stats,
                );
            }
            if held.present {
                key::set_shadow_counted(&mut held.ikey, flag);
            }
        } else {
            if held.present {
                w.emit(&held, stats)?;
            }
            held.set(ik, iter.value());
        }
        shadow_counted = flag;
        iter.next();
    }
    iter.status()?;
    if held.present {
        w.finish_key(&mut held, shadow_counted, key_entries == 1, stats)?;
    }
    if let Some(out) = w.current.take() {
        w.outputs.push(finish(out, stats, &mut w.unsynced)?);
    }
    w.sync_outputs()?;
    if let Some((sink, _)) = w.sink.take() {
        sink.finish(&mut stats.value_edit)?;
    }
    if let Some(a) = w.ahead.take() {
        stats.shadow_lookups_unused = a.unused_so_far();
    }
    Ok(w.outputs)
}

/// Whether `ikey` and `value` repeat the held entry: same user key,
/// sequence and kind (flags aside), and the same value bytes. A
/// compaction installed a key range at a time leaves such twins in two
/// levels when it stops before its own edit; they are one entry.
fn is_twin(held: &Held, ikey: &[u8], value: &[u8]) -> bool {
    key::user_key(&held.ikey) == key::user_key(ikey)
        && key::sequence(&held.ikey) == key::sequence(ikey)
        && key::kind_byte(&held.ikey) == key::kind_byte(ikey)
        && held.value == value
}

/// Counts the record an encoded pointer of `key` points at as garbage,
/// now or when the job installs (`ValueAccounting::counts_at_once`); `seq` is
/// the pointer entry's own sequence, `shadow` that of the version that
/// made it garbage, which is in a table when `shadow_in_tables`.
fn count_pointer(
    store: Option<&dyn ValueStore>,
    pointer: &[u8],
    (key, seq): (&[u8], u64),
    shadow: u64,
    shadow_in_tables: bool,
    stats: &mut JobStats,
) {
    let Some(ptr) = ValuePointer::decode(pointer) else {
        return;
    };
    if store.is_none_or(|s| s.counts_at_once(&ptr, shadow_in_tables)) {
        *stats.values.garbage.entry(ptr.file).or_default() += u64::from(ptr.record_len);
    } else {
        stats.values.deferred.push(Dropped {
            ptr,
            key: key.to_vec(),
            seq,
            shadow,
        });
    }
}

/// The output side of [`write_merged`].
struct Writer<'a, 'p> {
    p: &'a MergeParams<'p>,
    /// Where separated values go, and the threshold (with `p.separate`).
    sink: Option<(Box<dyn ValueSink + 'p>, usize)>,
    outputs: Vec<FileMeta>,
    /// Sync handles of the finished outputs not yet synced: every output
    /// is synced before the job returns it or installs it, all of them
    /// after the last one is written, so that no table's writing waits
    /// for another's sync and each sync finds its data already on its way
    /// to the device (a flush of LightKV units writes a table per
    /// partition the units meet, `docs/experiments.md`, "LightKV's random
    /// writes: tables synced together"). Each file still takes a sync of
    /// its own: no portable call makes several files durable at once.
    unsynced: Vec<Arc<dyn FileSyncer>>,
    current: Option<Output>,
    pointer_key: Vec<u8>,
    /// Read-ahead over the victims whose records the merge relocates.
    copy_windows: CopyWindows,
    /// A flush's lookups made by another thread ([`look_ahead`]).
    ahead: Option<LookedAhead>,
}

impl Writer<'_, '_> {
    /// Makes every finished output durable (see `unsynced`).
    fn sync_outputs(&mut self) -> Result<()> {
        for s in self.unsynced.drain(..) {
            s.sync()?;
        }
        Ok(())
    }

    /// Writes the last kept entry of a user key. A flush first counts the
    /// tables' newest version of the key, which the entry shadows, unless
    /// a snapshot still reads it (it is counted when a compaction drops
    /// it) or it was counted already (`shadow_counted`).
    /// `alone`: the entry is its key's only one in the stream; with
    /// nothing (or a delete) below, it is the key's first version.
    fn finish_key(
        &mut self,
        h: &mut Held,
        shadow_counted: bool,
        alone: bool,
        stats: &mut JobStats,
    ) -> Result<()> {
        if let (Some(older), false) = (&self.p.older, shadow_counted) {
            if key::sequence(&h.ikey) > self.p.smallest_snapshot {
                // A snapshot reads the version it shadows: left for the
                // compaction that drops it.
                stats.shadows_uncounted += 1;
            } else {
                // A table that cannot be read leaves the entry unflagged: the
                // compaction that drops the version counts it instead.
                stats.shadow_lookups += 1;
                let uk = key::user_key(&h.ikey);
                let found = match self.ahead.as_mut().and_then(|a| a.take(uk)) {
                    Some(found) => found,
                    None => older.shape.get_shadowed(older.version, older.tables, uk),
                };
                let counted = match found {
                    Ok(Lookup::Found(Kind::ValuePointer, v, own)) => {
                        let (uk, seq) = (key::user_key(&h.ikey), key::sequence(&h.ikey));
                        count_pointer(self.p.values, &v, (uk, own), seq, false, stats);
                        true
                    }
                    // An inline value counts nothing, and is not flagged
                    // as counted: the unified shape's merges may turn it
                    // into a pointer meanwhile (partial KV separation),
                    // whose record the merge dropping it must count.
                    Ok(Lookup::Found(Kind::Value, ..)) => false,
                    Ok(Lookup::Deleted) => {
                        h.first = alone;
                        true
                    }
                    Ok(Lookup::Found(..)) => true,
                    Ok(Lookup::Absent) => {
                        h.first = alone;
                        false
                    }
                    Err(_) => {
                        stats.shadows_uncounted += 1;
                        false
                    }
                };
                key::set_shadow_counted(&mut h.ikey, counted);
            }
        }
        self.emit(h, stats)
    }

    /// Adds an entry to the current output (opening one if needed),
    /// separating its value first when the flush separates values, and
    /// moving its record when it points into a file being relocated.
    fn emit(&mut self, h: &Held, stats: &mut JobStats) -> Result<()> {
        let p = self.p;
        if self.current.is_none() {
            let number = (p.new_file_number)();
            let file = p.fs.create(&filename::table(p.dir, number), p.class)?;
            self.current = Some(Output {
                number,
                builder: TableBuilder::new(file, p.table),
                value_bytes: 0,
                payload: TablePayload::default(),
            });
        }
        let out = self.current.as_mut().expect("current output");
        let kind = key::kind_byte(&h.ikey);
        let uk = key::user_key(&h.ikey);
        let moving = (kind == Kind::ValuePointer as u8)
            .then(|| relocated(&h.value, p.relocate))
            .flatten()
            .zip(p.values);
        let (ikey, value) = match (self.sink.as_mut(), moving) {
            (Some((sink, threshold)), _)
                if kind == Kind::Value as u8 && h.value.len() >= *threshold =>
            {
                let seq = key::sequence(&h.ikey);
                let first = if h.first { FLAG_FIRST_VERSION } else { 0 };
                let ptr = sink.append(&Record {
                    seq,
                    flags: KIND_PUT | first,
                    key: uk,
                    value: &h.value,
                })?;
                stats.values_separated += u64::from(ptr.record_len);
                stats.separated.0 += 1;
                stats.separated.1 += h.value.len() as u64;
                key::encode_into(&mut self.pointer_key, uk, seq, Kind::ValuePointer as u8);
                key::set_shadow_counted(&mut self.pointer_key, key::shadow_counted(&h.ikey));
                (&self.pointer_key, ptr.encode())
            }
            (Some((sink, _)), Some((old, store))) => {
                // The record is read by its pointer (checked against the
                // key and checksum) and copied with its own sequence
                // number: the same record, byte for byte (same length and
                // checksum), in a new file.
                let rec = store.read_for_copy(&old, uk, &mut self.copy_windows, IoClass::Gc)?;
                let new = sink.append(&Record {
                    seq: rec.seq,
                    flags: KIND_PUT,
                    key: uk,
                    value: &rec.value,
                })?;
                *stats.values.garbage.entry(old.file).or_default() += u64::from(old.record_len);
                stats.relocated_records += 1;
                stats.relocated_bytes += u64::from(new.record_len);
                (&h.ikey, new.encode())
            }
            _ => {
                if self.sink.is_some() && kind == Kind::Value as u8 {
                    stats.kept_inline.0 += 1;
                    stats.kept_inline.1 += h.value.len() as u64;
                }
                out.builder.add(&h.ikey, &h.value)?;
                if kind == Kind::ValuePointer as u8 {
                    count_pointer_out(p, out, &h.value, stats);
                } else if kind == Kind::Value as u8 {
                    out.payload.inline_bytes += (uk.len() + h.value.len()) as u64;
                }
                return Ok(());
            }
        };
        out.builder.add(ikey, &value)?;
        count_pointer_out(p, out, &value, stats);
        Ok(())
    }
}

/// The pointer an encoded pointer entry holds, when it names one of
/// `files`.
fn relocated(pointer: &[u8], files: &[u64]) -> Option<ValuePointer> {
    if files.is_empty() {
        return None;
    }
    ValuePointer::decode(pointer).filter(|p| files.contains(&p.file))
}

/// Counts a pointer entry written to `out`: the bytes of the record it
/// names, and one more pointer to its file.
fn count_pointer_out(p: &MergeParams<'_>, out: &mut Output, pointer: &[u8], stats: &mut JobStats) {
    if let Some(ptr) = ValuePointer::decode(pointer) {
        out.value_bytes += u64::from(ptr.record_len);
        out.payload.pointers += 1;
    }
    count_ref(p, pointer, 1, stats);
}

/// Adds `delta` to the pointer count of the file an encoded pointer names,
/// when the store counts them.
fn count_ref(p: &MergeParams<'_>, pointer: &[u8], delta: i64, stats: &mut JobStats) {
    if !p.values.is_some_and(|v| v.gc_profile().counts_refs) {
        return;
    }
    if let Some(ptr) = ValuePointer::decode(pointer) {
        *stats.values.refs.entry(ptr.file).or_default() += delta;
    }
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
        // The output level's inputs that installed ranges replaced.
        let replaced = if input.level == plan.output_level && params.by_range.is_some() {
            stats.below_installed
        } else {
            0
        };
        for f in &input.files[replaced..] {
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
    // A split by a boundary alone (the partitioned shape, LightKV (ICDE) §III-G).
    edit.boundaries.extend(plan.new_boundary.clone());
    edit
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, AtomicU64};

    use super::*;
    use crate::fs::MemFs;
    use crate::iter::testutil::VecIter;
    use crate::table::reader::Table;
    use crate::table::BlockCache;

    /// A pointer entry of key `a` at `seq` into file `seq` (so the garbage
    /// map names the versions), flagged or not.
    fn pointer(seq: u64, flagged: bool) -> (Vec<u8>, Vec<u8>) {
        let mut ik = key::encode(b"a", seq, Kind::ValuePointer as u8);
        key::set_shadow_counted(&mut ik, flagged);
        let p = ValuePointer {
            store: 0,
            file: seq,
            offset: 16,
            record_len: 100,
            record_crc: 0,
        };
        (ik, p.encode().to_vec())
    }

    /// Runs the merge loop as a compaction (every version visible to all
    /// readers, no bottom) over `entries`; returns the sequences and
    /// flags written, and the files whose records it counted as garbage.
    fn merge(entries: Vec<(Vec<u8>, Vec<u8>)>) -> (Vec<(u64, bool)>, Vec<u64>) {
        let fs = CountingFs::new(Arc::new(MemFs::new()));
        let dir = PathBuf::from("/");
        let next = AtomicU64::new(1);
        let alloc = || next.fetch_add(1, Ordering::Relaxed);
        let cancel = AtomicBool::new(false);
        let p = MergeParams {
            fs: &fs,
            dir: &dir,
            class: IoClass::Compaction,
            table: TableOptions {
                block_size_bytes: 4096,
                restart_interval: 16,
                bloom_bits_per_key: 10,
                decoupled: false,
                hash_leaf: false,
            },
            smallest_snapshot: 1000,
            target_file_size_bytes: u64::MAX,
            bottom: None,
            grandparents: &[],
            max_grandparent_overlap_bytes: u64::MAX,
            boundaries: &[],
            new_file_number: &alloc,
            cancel: &cancel,
            separate: None,
            older: None,
            values: None,
            inputs_are_tables: true,
            relocate: &[],
            by_range: None,
        };
        let mut stats = JobStats::default();
        let out = write_merged(&mut VecIter::new(entries), &p, &mut stats).unwrap();
        let mut written = Vec::new();
        for f in out {
            let t = Table::open(
                &fs,
                filename::table(&dir, f.number),
                f.number,
                f.file_size,
                Arc::new(BlockCache::new(0)),
                IoClass::Compaction,
            )
            .unwrap();
            let mut it = Arc::new(t).iter(IoClass::Compaction, false);
            it.seek_to_first();
            while it.valid() {
                written.push((key::sequence(it.key()), key::shadow_counted(it.key())));
                it.next();
            }
        }
        (written, stats.values.garbage.into_keys().collect())
    }

    /// The rule "a version right below a flagged one is counted already":
    /// a job counts a dropped version only under an unflagged one, and the
    /// kept version takes over the flag of the versions it drops, so the
    /// versions left below it (in deeper tables) are judged as before.
    #[test]
    fn dropped_versions_are_counted_once_and_flags_pass_on() {
        // Under a flagged newest version the next is counted already; the
        // one under it (unflagged above) is counted here.
        let (w, g) = merge(vec![pointer(9, true), pointer(7, false), pointer(5, false)]);
        assert_eq!((w, g), (vec![(9, false)], vec![5]));
        // The kept version takes the last dropped one's flag: the version
        // below, elsewhere, was counted by that one's flush.
        let (w, g) = merge(vec![pointer(9, false), pointer(7, true)]);
        assert_eq!((w, g), (vec![(9, true)], vec![7]));
        let (w, g) = merge(vec![pointer(9, true), pointer(7, false)]);
        assert_eq!((w, g), (vec![(9, false)], vec![]));
        // A chain of flagged versions: nothing below the newest is counted
        // again, and the newest stays flagged.
        let (w, g) = merge(vec![pointer(9, true), pointer(7, true), pointer(5, true)]);
        assert_eq!((w, g), (vec![(9, true)], vec![]));
        // Nothing dropped: flags stay as they are.
        let (w, g) = merge(vec![pointer(9, true)]);
        assert_eq!((w, g), (vec![(9, true)], vec![]));
    }

    /// A twin (the same entry again, left in two levels by a compaction
    /// installed a key range at a time) is written once, and its record is
    /// not counted as garbage: the entry kept still points at it.
    #[test]
    fn twins_are_written_once_and_not_counted() {
        let (w, g) = merge(vec![
            pointer(9, false),
            pointer(9, false),
            pointer(7, false),
        ]);
        assert_eq!((w, g), (vec![(9, false)], vec![7]));
        // As without a twin: 7 was counted under the flagged 9, whose
        // flag the kept 9 gives up for 7's.
        let (w, g) = merge(vec![pointer(9, true), pointer(9, true), pointer(7, false)]);
        assert_eq!((w, g), (vec![(9, false)], vec![]));
    }
}
