//! The value store: where separated values live (DESIGN.md axis 2).
//!
//! Values at or above the separation threshold are written here and the key
//! index keeps a [`ValuePointer`] (entry kind 2). Layouts: `log` (WiscKey,
//! seed 001 §3.3.2) first; HashKV's `hash` and Scavenger's `table` later.
//! The write path, GC and the log as journal live in `crate::db`
//! (`docs/design.md`, "Value store" and "Value log as journal").

pub(crate) mod files;
pub(crate) mod hash;
pub(crate) mod log;
pub(crate) mod meta;
pub(crate) mod pointer;
pub(crate) mod record;
pub(crate) mod table;

use std::path::Path;

use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::fs::IoClass;
use crate::gc::{GcHost, GcTrigger, GcVictim};
use crate::key::Kind;
use crate::stats::ValueStats;
use crate::version::{Version, VersionEdit};
use log::reader::OwnedRecord;
use pointer::ValuePointer;
use record::Record;

/// A value store layout (DESIGN.md, axis 2). The engine's write path,
/// reads, scans and recovery use only this trait, so a layout can place
/// records where it likes (a log's head, a key's hash group, a value table)
/// and reclaim space its own way: its GC step, triggers, recovery hooks and
/// statistics are methods here too, so no code outside a layout's folder
/// names its concrete type.
pub(crate) trait ValueStore: files::RecordFiles + Send + Sync {
    /// Appends a record and returns where it is; it can be read at once,
    /// and is durable after the next [`ValueStore::sync`].
    fn append(&self, r: &Record<'_>) -> Result<ValuePointer>;

    /// Where one flush writes the values it separates, in key order. The
    /// log and hash layouts append to their shared heads; a layout whose
    /// files belong to one job (Scavenger's value tables, seed 003 §3.1)
    /// writes its own and names them in the job's edit.
    fn flush_sink(&self) -> Box<dyn ValueSink + '_> {
        Box::new(SharedHeads(self))
    }

    /// Makes every appended record durable.
    fn sync(&self) -> Result<()>;

    /// Makes durable every record appended to `files` before the call (a
    /// GC step's copies, `Collected::copies_unsynced`); a layout may sync
    /// more.
    fn sync_files(&self, _files: &[u64]) -> Result<()> {
        self.sync()
    }

    /// Reads the record `p` points at and checks that it is intact and
    /// belongs to `key` (seed 001 §3.3.3); tells a collected file apart.
    fn read_or_collected(&self, p: &ValuePointer, key: &[u8], class: IoClass) -> Result<Read> {
        files::read_one(self, p, key, class)
    }

    /// Like [`ValueStore::read_or_collected`]; a collected file is
    /// `Corruption` (for readers that hold no older view).
    fn read(&self, p: &ValuePointer, key: &[u8], class: IoClass) -> Result<OwnedRecord> {
        match self.read_or_collected(p, key, class)? {
            Read::Found(r) => Ok(r),
            Read::Collected => Err(Error::corruption(
                self.path_of(p.file),
                p.offset,
                "index entry points into a value store file that GC collected",
            )),
        }
    }

    /// Reads the record `p` points at like [`ValueStore::read`], for a job
    /// that copies records out of files in their order: through read-ahead
    /// windows where the layout keeps them ([`files::read_windowed`]).
    fn read_for_copy(
        &self,
        p: &ValuePointer,
        key: &[u8],
        windows: &mut files::CopyWindows,
        class: IoClass,
    ) -> Result<OwnedRecord> {
        files::read_windowed(self, p, key, windows, class)
    }

    /// Reads many values at once for scans (batched and parallel); results
    /// in request order, each checked like [`ValueStore::read`].
    fn read_many(
        &self,
        requests: &[(ValuePointer, &[u8])],
        class: IoClass,
    ) -> Vec<Result<Vec<u8>>> {
        files::read_many(self, requests, class)
    }

    /// Checks a pointer met while replaying the journal (see
    /// [`PointerCheck`]).
    fn check_recovered(&self, p: &ValuePointer, key: &[u8]) -> Result<PointerCheck>;

    /// The path of the store's file `number` (for error messages).
    fn path_of(&self, number: u64) -> std::path::PathBuf {
        self.file_path(number)
    }

    /// Files the store holds.
    fn file_count(&self) -> usize;

    /// Every file the store holds, with `true` for sealed files (complete)
    /// and `false` for heads still taking appends.
    fn live_files(&self) -> Vec<(u64, bool)>;

    /// Every file the store holds with its length in bytes (appends not yet
    /// written out included).
    fn file_lengths(&self) -> Vec<(u64, u64)>;

    /// Every file the store holds with the bytes of its records (the file
    /// less its header and any index): what live and garbage bytes divide.
    fn record_lengths(&self) -> Vec<(u64, u64)> {
        self.file_lengths()
            .into_iter()
            .map(|(f, len)| (f, len.saturating_sub(record::FILE_HEADER_LEN as u64)))
            .collect()
    }

    /// Reads every record of every file and checks its checksum (after
    /// writing out buffered appends); returns the records checked. Damage
    /// is `Corruption` naming the file and offset. A head may end in a
    /// record still being appended, so only a sealed file's torn tail is
    /// damage.
    fn verify(&self) -> Result<u64> {
        self.sync()?;
        let mut n = 0;
        for (file, sealed) in self.live_files() {
            let path = self.file_path(file);
            let r = match self.readers().get(file, &path) {
                Ok(r) => r,
                // Collected since the list was taken.
                Err(_) if self.scan_start(file).is_none() => continue,
                Err(Error::Io {
                    kind: std::io::ErrorKind::NotFound,
                    ..
                }) => {
                    return Err(Error::corruption(&path, 0, "value store file is missing"));
                }
                Err(e) => return Err(e),
            };
            let data = r.read_at(0, r.len() as usize, IoClass::UserRead)?;
            // Where to start is asked after the read: GC records a release
            // before it punches, so a start taken now is past every hole
            // the read may have met (issue 50: a start taken from a file
            // that GC left while the read ran sent the scan into a hole).
            let Some(start) = self.scan_start(file) else {
                continue; // collected while it was read
            };
            let scan = log::reader::scan_file_from(&data, &path, start)?;
            if let Some((off, why)) = scan.damage {
                return Err(Error::corruption(&path, off, why));
            }
            if let (true, Some(off)) = (sealed, scan.torn_tail_at) {
                return Err(Error::corruption(
                    &path,
                    off,
                    "a sealed value file ends in an incomplete or damaged record",
                ));
            }
            n += scan.records.len() as u64;
        }
        Ok(n)
    }

    /// Bytes of all its files; cheap (no lock), for the write path.
    fn total_bytes(&self) -> u64;

    /// Bytes of records appended since open.
    fn appended_bytes(&self) -> u64;

    /// True when the store has used up `capacity` (its files' bytes, by
    /// default; the hash layout counts its reserve's log segments). Cheap:
    /// the write path asks before every write.
    fn is_full(&self, capacity: u64) -> bool {
        self.total_bytes() > capacity
    }

    /// Picks what the next GC step collects and freezes it (no append
    /// reaches it afterwards); `None` when there is nothing to collect.
    /// The engine's driver runs the step (`crate::gc`).
    fn gc_victim<'a>(&'a self, _host: &dyn GcHost) -> Result<Option<Box<dyn GcVictim + 'a>>> {
        Ok(None)
    }

    /// True when a GC step must wait, before judging its victim, for the
    /// writes that appended to it to become visible (the publish barrier,
    /// `Core::publish_barrier`). A layout whose victims only hold records
    /// of installed flushes needs no wait.
    fn gc_needs_barrier(&self) -> bool {
        true
    }

    /// True when the publish barrier also waits for a flush in progress:
    /// with values separated at flush, the records a flush appended before
    /// the victim was frozen have no pointer in the index until its tables
    /// are installed. A layout whose GC takes such a record for live by
    /// its version ([`Newest::Inline`](crate::gc::Newest)) need not wait.
    fn gc_waits_for_flushes(&self) -> bool {
        true
    }

    /// True when a GC step may be frozen and collected while the previous
    /// one is still being finished (its relocations committed, its edit
    /// installed; `Core::gc_pipeline`): the layout keeps the victims of
    /// steps in flight, and the files their copies go to, from being
    /// another step's victim.
    fn gc_overlaps_steps(&self) -> bool {
        false
    }

    /// True when the layout's `GcVictim::collect` looks keys up through
    /// views of the moment (`GcHost::fresh`), not through the view it is
    /// given: the driver may trim that view before the collection, so that
    /// a step keeps no memtable a flush finishes meanwhile.
    fn gc_looks_up_fresh(&self) -> bool {
        false
    }

    /// [`ValueStore::gc_victim`] of a layout whose steps overlap
    /// ([`ValueStore::gc_overlaps_steps`]): a victim that can be finished
    /// on another thread.
    fn gc_victim_overlapping<'a>(
        &'a self,
        _host: &dyn GcHost,
    ) -> Result<Option<Box<dyn GcVictim + Send + 'a>>> {
        Ok(None)
    }

    /// True when GC judges records in the durable view (`Core::durable_seq`)
    /// rather than the visible one: a layout whose GC commits no relocation
    /// through the write path, so that a record dead only by a version not
    /// yet durable is kept (copied, and counted as garbage once that version
    /// is flushed) and the step needs no journal sync. The others must sync
    /// their relocations anyway.
    fn gc_judges_durable_only(&self) -> bool {
        false
    }

    /// True when background GC should run now.
    fn gc_wanted(&self, _trigger: &GcTrigger<'_>) -> bool {
        false
    }

    /// True when the store is past `capacity` and GC can free some: writes
    /// wait for GC then.
    fn gc_over_capacity(&self, _current: &Version, _capacity: u64) -> bool {
        false
    }

    /// True when the layout's GC finds garbage by itself (it reads what it
    /// collects and keeps only what the index points at, choosing victims
    /// by writes since their last GC), rather than relying on the garbage
    /// flushes and compactions report. Space pressure then lets it run
    /// before that garbage is known.
    fn gc_finds_garbage(&self) -> bool {
        false
    }

    /// True when the layout has something to collect (a GC step would run).
    fn gc_has_victim(&self, _current: &Version) -> bool {
        false
    }

    /// True when a flush would let GC collect what it cannot now (the
    /// value log as journal keeps its replay start).
    fn gc_needs_flush(&self, _current: &Version) -> bool {
        false
    }

    /// Deletes files a GC step freed; no registered reader can need them.
    fn delete_collected(&self, _files: &[u64]) {}

    /// GC collected every record before `to` (file, offset) and no reader
    /// needs them: the layout may free their space within the file (the
    /// log punches holes, `LogStore::release_collected`).
    fn release_collected(&self, _to: (u64, u64)) -> Result<()> {
        Ok(())
    }

    /// Where the records of `file` that may be read start: past its header,
    /// or past what [`ValueStore::release_collected`] freed; `None` once
    /// GC collected the whole file (its blocks may be punched out, or the
    /// file deleted, under a reader that listed it before).
    fn scan_start(&self, _file: u64) -> Option<u64> {
        Some(record::FILE_HEADER_LEN as u64)
    }

    /// Adds what the layout's state needs to an edit about to be installed.
    fn before_install(&self, _base: &Version, _edit: &mut VersionEdit) {}

    /// Recovery, before the recovered manifest is written: makes durable
    /// the files from before the open that may hold bytes never synced
    /// (`current` is the manifest's version). A killed process leaves its
    /// unsynced appends in the page cache; replay reads them and the
    /// recovered tables point at them, so a power loss after the open
    /// must not take them (`docs/design.md`, "Recovery protocol"). A
    /// layout whose files are all synced before any install has none.
    fn sync_from_before_open(&self, _current: &Version) -> Result<()> {
        Ok(())
    }

    /// At a clean close, after the final sync: an edit recording what the
    /// close made durable, when the manifest (`current`) does not know it
    /// yet, so that recovery takes damage there for damage, not for a torn
    /// write (the log layout's durable position; `docs/design.md`, "Torn
    /// tails and damage").
    fn close_edit(&self, _current: &Version) -> Option<VersionEdit> {
        None
    }

    /// After an edit is installed: the files [`ValueStore::before_install`]
    /// removed from it because no pointer names them any more. The caller
    /// deletes them once no registered reader is older than the edit.
    fn take_unreferenced(&self) -> Vec<u64> {
        Vec::new()
    }

    /// True when the key index's merges collect the store's files (the
    /// unified shape over the table layout, seed 004 §III-C): the store's
    /// own GC step never runs; merges move the records of the files
    /// [`ValueStore::freeze_merge_victims`] chose, and a file leaves the
    /// manifest once no pointer names it.
    fn collects_in_merges(&self) -> bool {
        false
    }

    /// Chooses and freezes the files a merge over user keys `lo..=hi`
    /// moves the records of: those whose key range meets it and whose
    /// garbage ratio calls for GC (a lower ratio under space pressure,
    /// seed 003 §3.5), the highest ratio first, until their garbage
    /// reaches `reclaim` bytes or their live bytes `budget` (one at
    /// least). `first`, a GC merge's target, comes first whatever its
    /// ratio: the merge was chosen to collect it. None when another job is
    /// between settling its garbage and installing (its garbage names
    /// files whose records this merge would move).
    #[allow(clippy::too_many_arguments)]
    fn freeze_merge_victims(
        &self,
        _current: &Version,
        _lo: &[u8],
        _hi: &[u8],
        _first: Option<u64>,
        _pressure: bool,
        _reclaim: u64,
        _budget: u64,
    ) -> Vec<u64> {
        Vec::new()
    }

    /// Files whose garbage ratio calls for GC and that no merge is
    /// collecting, with their key ranges, the most garbage bytes first:
    /// where a merge would reclaim the most space.
    fn merge_gc_targets(
        &self,
        _current: &Version,
        _pressure: bool,
    ) -> Vec<(u64, Vec<u8>, Vec<u8>)> {
        Vec::new()
    }

    /// [`ValueStore::settle_job`] for a merge that moved the records of
    /// `victims`: garbage found in them while it ran (by this job or
    /// another) is attributed to the file `locate` says holds the record
    /// now (one of the merge's copies), or to the victim when the merge
    /// did not move it.
    fn settle_relocating_job(
        &self,
        _victims: &[u64],
        tally: &mut ValueTally,
        edit: &mut meta::ValueEdit,
        _locate: &mut dyn FnMut(&Dropped) -> Result<Option<u64>>,
    ) -> Result<Option<parking_lot::MutexGuard<'_, ()>>> {
        self.settle_job(tally, edit)
    }

    /// A relocating merge installed or failed: its victims thaw.
    fn thaw(&self, _victims: &[u64]) {}

    /// After recovery replayed the journal: cuts what a crash tore off the
    /// newest files, and adds to `edit` what the manifest should record.
    fn after_replay(&self, _current: &Version, _edit: &mut VersionEdit) -> Result<()> {
        Ok(())
    }

    /// After the recovered manifest is written: removes files it dropped.
    fn after_open(&self) {}

    /// At a writable open, once recovery is done: the files whose records
    /// a GC step cut short may have left named by no entry and counted by
    /// nothing, with their records, for the engine to recount (the table
    /// layout's pending tables, `docs/design.md`, "Crash orphans").
    fn to_recount(&self, _current: &Version) -> Result<Vec<table::PendingTable>> {
        Ok(Vec::new())
    }

    /// The engine recounted `tables` of [`ValueStore::to_recount`]'s
    /// files; `edit` will record the counts, and settles them here.
    fn recounted(&self, _tables: &[u64], _edit: &mut meta::ValueEdit) {}

    /// Fills the layout's section of [`ValueStats`].
    fn layout_stats(&self, _current: &Version, _stats: &mut ValueStats) {}

    /// A flush or compaction dropped a version of `key` that the version
    /// at `shadow` hides from every reader (the table layout's DropCache,
    /// seed 003 §3.4.1).
    fn note_dropped(&self, _key: &[u8], _shadow: u64) {}

    /// True when a job may add the record `p` points at to its file's
    /// garbage as it drops the pointer; false defers it to
    /// [`ValueStore::settle_job`] (a table layout file GC is collecting or
    /// collected: the record may have moved). `shadow_in_tables`: the
    /// version that makes it garbage is in an installed table (a
    /// compaction's), not in the memtable a flush writes.
    fn counts_at_once(&self, _p: &ValuePointer, _shadow_in_tables: bool) -> bool {
        true
    }

    /// True when a GC step frees its victims whole and their garbage
    /// counts go with them: the version a relocation shadows needs no
    /// count, so relocations enter the memtable flagged as counted and
    /// their flush looks nothing up for them.
    fn gc_frees_whole(&self) -> bool {
        false
    }

    /// True when jobs count the pointer entries naming each value file
    /// (the table layout prunes inheritance edges by them).
    fn counts_refs(&self) -> bool {
        false
    }

    /// Puts a job's garbage and pointer counts into the edit that installs
    /// it. The returned guard, when there is one, is held until that edit
    /// is installed: no GC step installs in between, so the files the
    /// garbage was attributed to are still the ones holding the records.
    fn settle_job(
        &self,
        tally: &mut ValueTally,
        edit: &mut meta::ValueEdit,
    ) -> Result<Option<parking_lot::MutexGuard<'_, ()>>> {
        edit.garbage.extend(std::mem::take(&mut tally.garbage));
        debug_assert!(tally.deferred.is_empty() && tally.refs.is_empty());
        Ok(None)
    }

    /// The file that holds the record `p` of `key` now: `p.file`, except
    /// where GC moved records without rewriting pointers (inheritance
    /// edges); `None` when no file does.
    fn holder_of(&self, p: &ValuePointer, _key: &[u8]) -> Result<Option<u64>> {
        Ok(Some(p.file))
    }
}

/// What a flush or compaction learned about value files as it dropped and
/// wrote pointers, put into the edit that installs it by
/// [`ValueStore::settle_job`]. The value store's bookkeeping, carried by the
/// job (`compaction::JobStats::values`).
#[derive(Debug, Default, Clone)]
pub(crate) struct ValueTally {
    /// Bytes of value records whose pointers were dropped, per file.
    pub(crate) garbage: std::collections::BTreeMap<u64, u64>,
    /// Dropped pointers whose garbage the value store attributes when the
    /// job installs ([`ValueStore::counts_at_once`]).
    pub(crate) deferred: Vec<Dropped>,
    /// Change in the pointer entries naming each value file, when the
    /// store counts them ([`ValueStore::counts_refs`]).
    pub(crate) refs: std::collections::BTreeMap<u64, i64>,
}

/// A pointer a job dropped whose garbage the store attributes when the job
/// installs ([`ValueStore::settle_job`]).
#[derive(Debug, Clone)]
pub(crate) struct Dropped {
    pub(crate) ptr: ValuePointer,
    pub(crate) key: Vec<u8>,
    /// The sequence of the pointer entry dropped: without pointer
    /// write-back, also its record's (a flush writes the record with the
    /// entry's sequence, and GC copies keep it).
    pub(crate) seq: u64,
    /// The sequence of the version that hides it from every reader.
    pub(crate) shadow: u64,
}

/// Where one flush job writes the values it separates
/// ([`ValueStore::flush_sink`]).
pub(crate) trait ValueSink {
    /// Appends a record (keys in increasing internal-key order) and
    /// returns where it is.
    fn append(&mut self, r: &Record<'_>) -> Result<ValuePointer>;

    /// Ends the job's appends, durably, and adds to `edit` what the
    /// manifest must learn together with the job's tables.
    fn finish(self: Box<Self>, edit: &mut meta::ValueEdit) -> Result<()>;
}

/// The sink of layouts with shared heads: appends go to the store, and
/// the flush syncs the store before it installs (`Core::run_flush`).
struct SharedHeads<'a, S: ValueStore + ?Sized>(&'a S);

impl<S: ValueStore + ?Sized> ValueSink for SharedHeads<'_, S> {
    fn append(&mut self, r: &Record<'_>) -> Result<ValuePointer> {
        self.0.append(r)
    }

    fn finish(self: Box<Self>, _edit: &mut meta::ValueEdit) -> Result<()> {
        Ok(())
    }
}

/// Moves the group's values of at least `threshold` bytes into `store`
/// (key-value separation, seed 001 §3.1); returns the batch to journal and
/// insert, with pointers in place of those values, or `None` when no value
/// is that large.
pub(crate) fn separate(
    store: &dyn ValueStore,
    threshold: usize,
    group: &WriteBatch,
    seq: u64,
) -> Result<Option<WriteBatch>> {
    let big =
        |op: &crate::batch::BatchOp<'_>| op.kind == Kind::Value && op.value.len() >= threshold;
    if !group.iter().flatten().any(|op| big(&op)) {
        return Ok(None);
    }
    let mut out = WriteBatch::with_capacity(group.approximate_size());
    out.set_sequence(seq);
    for (i, op) in group.iter().enumerate() {
        let op = op.expect("validated batch");
        if big(&op) {
            let p = store.append(&Record {
                seq: seq + i as u64,
                flags: record::KIND_PUT,
                key: op.key,
                value: op.value,
            })?;
            out.add_raw(Kind::ValuePointer, op.key, &p.encode());
            continue;
        }
        out.add_raw(op.kind, op.key, op.value);
    }
    Ok(Some(out))
}

/// What recovery learns from checking a journaled pointer.
#[derive(Debug)]
pub(crate) enum PointerCheck {
    /// The record is there and belongs to the key.
    Valid,
    /// The record lies past the durable end of the log (its append was
    /// lost in a crash): history ends before the write that made it.
    Lost,
    /// The record's file was collected by GC. GC advances the tail only
    /// after the journal holds, durably, a newer entry for every key in the
    /// file (the relocation, or the write that made the record dead), so
    /// replay may apply this entry: a later record shadows it.
    Collected,
}

/// Outcome of a read by pointer.
#[derive(Debug)]
pub(crate) enum Read {
    Found(OwnedRecord),
    /// The pointer's file was collected by GC: the reader used an index
    /// entry older than a relocation and must look the key up again.
    Collected,
}

/// The value that the pointer entry `pointer` of `key` refers to.
pub(crate) fn resolve(
    store: Option<&dyn ValueStore>,
    key: &[u8],
    pointer: &[u8],
    class: IoClass,
) -> Result<Vec<u8>> {
    let p = ValuePointer::decode(pointer).ok_or_else(|| {
        Error::corruption(Path::new(""), 0, "malformed value pointer in the index")
    })?;
    match store {
        Some(s) => Ok(s.read(&p, key, class)?.value),
        None => Err(missing_store()),
    }
}

/// The error for an index entry pointing into a value store that the
/// options did not open.
pub(crate) fn missing_store() -> Error {
    Error::InvalidArgument(
        "the database holds separated values; open it with a value store \
         (separation_threshold_bytes)"
            .into(),
    )
}
