//! The value store: where separated values live (the design's second
//! axis, `docs/design.md`, "Value store").
//!
//! Values at or above the separation threshold are written here and the key
//! index keeps a [`ValuePointer`] (entry kind 2). Layouts: `log` (WiscKey,
//! FAST '16, §3.3.2), `hash` (HashKV, USENIX ATC '18) and `table`
//! (Scavenger's value tables, VLDB). A layout implements four small traits:
//!
//! - [`ValueStore`], the core: append, read (one, many, for copying),
//!   sync, its files, verify;
//! - [`ValueRecovery`]: its hooks in open, recovery and a clean close;
//! - [`ValueAccounting`]: how a job's garbage and pointer counts reach
//!   the edit that installs it (defaults fit a layout that counts at once);
//! - [`ValueGc`]: its GC victims and triggers, and a [`GcProfile`] that
//!   tells the engine's GC driver how to run its steps;
//!
//! and, where the key index's merges collect its files, the optional
//! [`MergeCollection`]. The engine (`crate::db`) asks the layout nothing
//! else, and no code outside a layout's folder names its concrete type.
//! The shared record format is `record`, file access and checked reads
//! `files`.

pub(crate) mod accounting;
pub(crate) mod collection;
pub(crate) mod files;
pub(crate) mod hash;
pub(crate) mod log;
pub(crate) mod meta;
pub(crate) mod open;
pub(crate) mod table;

use std::path::Path;

use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::fs::IoClass;
use crate::key::Kind;
use crate::pointer::ValuePointer;
use crate::record::Record;
use crate::stats::ValueStats;
use crate::version::{Version, VersionEdit};
use log::reader::OwnedRecord;

pub(crate) use accounting::{Dropped, ValueAccounting, ValueTally};
pub(crate) use collection::{GcProfile, MergeCollection, ValueGc};

/// A value store layout's core (see the module's documentation for the
/// other parts, its supertraits). The engine's write path, reads, scans
/// and verify use only this, so a layout can place records where it likes
/// (a log's head, a key's hash group, a value table).
pub(crate) trait ValueStore:
    files::RecordFiles + ValueRecovery + ValueAccounting + ValueGc + Send + Sync
{
    /// Appends a record and returns where it is; it can be read at once,
    /// and is durable after the next [`ValueStore::sync`].
    fn append(&self, r: &Record<'_>) -> Result<ValuePointer>;

    /// Where one flush writes the values it separates, in key order. The
    /// log and hash layouts append to their shared heads; a layout whose
    /// files belong to one job (Scavenger's value tables, Scavenger, VLDB, §3.1)
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
    /// belongs to `key` (WiscKey, FAST '16, §3.3.3); tells a collected file apart.
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

    /// For a checkpoint (`docs/design.md`, "Checkpoints"): every file the
    /// store holds, with `None` for a sealed file (complete, synced, never
    /// written again: a checkpoint links it) and, for a head still taking
    /// appends, its length once every record appended before the call is
    /// handed to the file system (a checkpoint copies that much). Taken
    /// under the store's lock, so heads and sealed files agree. The default
    /// fits a layout without heads (every file complete when listed).
    fn checkpoint_files(&self) -> Result<Vec<(u64, Option<u64>)>> {
        let files = self.live_files();
        debug_assert!(
            files.iter().all(|&(_, sealed)| sealed),
            "a layout with heads"
        );
        Ok(files.into_iter().map(|(f, _)| (f, None)).collect())
    }

    /// Every file the store holds with its length in bytes (appends not yet
    /// written out included).
    fn file_lengths(&self) -> Vec<(u64, u64)>;

    /// Every file the store holds with the bytes of its records (the file
    /// less its header and any index): what live and garbage bytes divide.
    fn record_lengths(&self) -> Vec<(u64, u64)> {
        self.file_lengths()
            .into_iter()
            .map(|(f, len)| (f, len.saturating_sub(crate::record::FILE_HEADER_LEN as u64)))
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

    /// Where the records of `file` that may be read start: past its header,
    /// or past what [`ValueGc::release_collected`] freed; `None` once
    /// GC collected the whole file (its blocks may be punched out, or the
    /// file deleted, under a reader that listed it before).
    fn scan_start(&self, _file: u64) -> Option<u64> {
        Some(crate::record::FILE_HEADER_LEN as u64)
    }

    /// Fills the layout's section of [`ValueStats`].
    fn layout_stats(&self, _current: &Version, _stats: &mut ValueStats) {}
}

/// A layout's part in opening and closing: recovery's hooks, the clean
/// close's last edit, and the files an open must recount.
pub(crate) trait ValueRecovery {
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

    /// The engine recounted `tables` of [`ValueRecovery::to_recount`]'s
    /// files; `edit` will record the counts, and settles them here.
    fn recounted(&self, _tables: &[u64], _edit: &mut meta::ValueEdit) {}
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
/// (key-value separation, WiscKey, FAST '16, §3.1); returns the batch to journal and
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
                flags: crate::record::KIND_PUT,
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
