//! [`LogStore`]: the value log as a series of files, with the head being
//! written through a buffer and older files sealed (WiscKey, FAST '16, §3.3).
//!
//! Rules (`docs/design.md`, "Value store"): a new head file is created only
//! after the previous head is synced, and its name is made durable before
//! any pointer into it can be journaled, so after a crash the log is a
//! prefix of what was appended, across files as within one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::meta::LogMeta;
use super::reader::{check_record, copy_key, OwnedRecord};
use super::writer::VlogWriter;
use crate::error::{Error, Result};
use crate::filename::{self, FileKind};
use crate::fs::{CountingFs, IoClass, PUNCH_BLOCK};
use crate::gc::{GcHost, GcTrigger, GcVictim};
use crate::options::Options;
use crate::pointer::{ValuePointer, STORE_LOG};
use crate::record::{claimed_len, decode_record, Bad, Record, FILE_HEADER_LEN};
use crate::value::files::{check_within, cut_torn_tail, FileReaders, Located, RecordFiles};
use crate::value::{GcProfile, PointerCheck, ValueAccounting, ValueGc, ValueRecovery, ValueStore};
use crate::version::{Version, VersionEdit};

/// Sizes of the log layout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogConfig {
    /// A new head file is started past this size.
    pub(crate) file_size_bytes: u64,
    /// The head's write buffer.
    pub(crate) buffer_bytes: usize,
    /// Threads reading values ahead for scans.
    pub(crate) prefetch_threads: usize,
    /// Bytes a GC step reads from the tail (`LogOptions::gc_chunk_bytes`).
    pub(crate) gc_chunk_bytes: u64,
}

impl LogConfig {
    pub(crate) fn from_options(opts: &Options) -> LogConfig {
        LogConfig {
            file_size_bytes: opts.values.log.file_size_bytes,
            buffer_bytes: opts.values.log.buffer_bytes,
            prefetch_threads: opts.values.scan_prefetch_threads.max(1),
            gc_chunk_bytes: opts.values.log.gc_chunk_bytes,
        }
    }
}

struct Inner {
    head: VlogWriter,
    /// Sealed files and their lengths.
    sealed: BTreeMap<u64, u64>,
    /// Files below this number were collected (deleted or about to be).
    collected_below: u64,
    /// Records before this position were collected: GC's tail as of the
    /// last release (or the open). In its file, the whole blocks before it
    /// are punched out (WiscKey, FAST '16, §3.3.2), so reads start here.
    released_to: (u64, u64),
}

impl Inner {
    /// True if the record at `offset` of `file` lies behind the last
    /// release: in a deleted file, or in the released part of the tail's.
    fn behind_release(&self, file: u64, offset: u64) -> bool {
        file < self.collected_below || (file == self.released_to.0 && offset < self.released_to.1)
    }
}

/// Records read from the tail by GC.
#[derive(Debug, Default)]
pub(crate) struct Chunk {
    /// (pointer, record) for every record in the chunk.
    pub(crate) records: Vec<(ValuePointer, OwnedRecord)>,
    /// Where the next chunk starts: (file, offset).
    pub(crate) next: (u64, u64),
    /// Bytes read.
    pub(crate) bytes: u64,
}

pub(crate) struct LogStore {
    dir: PathBuf,
    fs: CountingFs,
    file_numbers: Arc<AtomicU64>,
    file_size_limit: u64,
    buffer_bytes: usize,
    pub(super) gc_chunk_bytes: u64,
    inner: Mutex<Inner>,
    readers: FileReaders,
    appended_bytes: AtomicU64,
    /// Bytes of all log files (sealed and head), kept with every change so
    /// that the write path can check the capacity without a lock.
    total_bytes: AtomicU64,
}

impl LogStore {
    /// Where a pointer found while replaying the journal stands, before
    /// its record is read: `Lost` past the end of the newest files (the
    /// crash cut it), `Collected` behind GC's tail, `None` when its record
    /// is there to read. A file missing from the middle, or a pointer past
    /// the end of a sealed file, is corruption.
    fn recovered_bounds(&self, p: &ValuePointer) -> Result<Option<PointerCheck>> {
        let path = filename::value_log(&self.dir, p.file);
        // Files created by an interrupted open hold no records; a torn file
        // may only be followed by such empty ones.
        let (len, newest_with_records) = {
            let inner = self.inner.lock();
            let newest = inner
                .sealed
                .iter()
                .filter(|(_, &len)| len > FILE_HEADER_LEN as u64)
                .map(|(&n, _)| n)
                .next_back();
            (inner.sealed.get(&p.file).copied(), newest)
        };
        // Behind GC's tail: in a deleted file, or in the part of the tail's
        // file a release may have punched out.
        if self.is_collected_at(p.file, p.offset) {
            return Ok(Some(PointerCheck::Collected));
        }
        let may_be_torn = newest_with_records.is_none_or(|n| p.file >= n);
        match len {
            None if may_be_torn => Ok(Some(PointerCheck::Lost)),
            None => Err(Error::corruption(
                &path,
                p.offset,
                "value log file referenced by the journal is missing",
            )),
            Some(len) if p.offset.saturating_add(u64::from(p.record_len)) > len => {
                if may_be_torn {
                    Ok(Some(PointerCheck::Lost))
                } else {
                    Err(Error::corruption(
                        &path,
                        p.offset,
                        "value pointer past the end of a sealed log file",
                    ))
                }
            }
            Some(_) => Ok(None),
        }
    }

    /// The copy a relocation run's pointer names, read for its key at
    /// recovery (`replay`): the run holds pointers alone.
    pub(crate) fn recovered_copy(&self, p: &ValuePointer) -> Result<RecoveredCopy> {
        match self.recovered_bounds(p)? {
            Some(PointerCheck::Collected) => Ok(RecoveredCopy::Collected),
            Some(PointerCheck::Lost) => Ok(RecoveredCopy::Lost),
            Some(PointerCheck::Valid) | None => {
                let path = self.file_path(p.file);
                let reader = self.readers().get(p.file, &path)?;
                let raw = reader.read_at(p.offset, p.record_len as usize, IoClass::Journal)?;
                copy_key(&raw, p, &path).map(RecoveredCopy::Found)
            }
        }
    }

    /// Opens the log in `dir`: existing files (from `tail_file` on) become
    /// sealed, and a new head file is started. `named` holds the sealed
    /// files the manifest records with their lengths: each must be there,
    /// whole. Files holding no record (a crash came before their header
    /// was synced) are removed; the newest file may still end torn until
    /// [`LogStore::cut_torn_tail`].
    pub(crate) fn open(
        dir: &Path,
        fs: CountingFs,
        file_numbers: Arc<AtomicU64>,
        config: LogConfig,
        tail: Option<(u64, u64)>,
        named: &BTreeMap<u64, u64>,
    ) -> Result<LogStore> {
        let collected_below = tail.map_or(0, |t| t.0);
        let mut sealed = BTreeMap::new();
        for name in fs.list(dir)? {
            if let Some(FileKind::ValueLog(n)) = filename::parse(&name) {
                let path = filename::value_log(dir, n);
                if n < collected_below {
                    // Collected before a restart; no reader can need it now.
                    fs.remove(&path)?;
                    continue;
                }
                let len = fs.open(&path)?.len();
                if len <= FILE_HEADER_LEN as u64 && !named.contains_key(&n) {
                    // No record fits: nothing can point into it.
                    fs.remove(&path)?;
                    continue;
                }
                sealed.insert(n, len);
            }
        }
        for (&n, &len) in named.range(collected_below..) {
            let path = filename::value_log(dir, n);
            match sealed.get(&n) {
                None => {
                    return Err(Error::corruption(
                        path,
                        0,
                        "value log file named in the manifest is missing",
                    ))
                }
                Some(&have) if have != len => {
                    return Err(Error::corruption(
                        path,
                        have.min(len),
                        format!(
                            "value log file holds {have} bytes; the manifest sealed it at {len}"
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        let (file_size_limit, buffer_bytes) = (config.file_size_bytes, config.buffer_bytes);
        let prefetch_threads = config.prefetch_threads;
        let number = file_numbers.fetch_add(1, Ordering::SeqCst);
        let head = Self::create_head(dir, &fs, number, buffer_bytes)?;
        let total = sealed.values().sum::<u64>() + head.len();
        Ok(LogStore {
            dir: dir.to_path_buf(),
            file_numbers,
            file_size_limit,
            buffer_bytes,
            gc_chunk_bytes: config.gc_chunk_bytes,
            inner: Mutex::new(Inner {
                head,
                sealed,
                collected_below,
                released_to: tail.unwrap_or((0, 0)),
            }),
            readers: FileReaders::new(fs.clone(), prefetch_threads),
            fs,
            appended_bytes: AtomicU64::new(0),
            total_bytes: AtomicU64::new(total),
        })
    }

    fn create_head(dir: &Path, fs: &CountingFs, number: u64, buffer: usize) -> Result<VlogWriter> {
        let f = fs.create(&filename::value_log(dir, number), IoClass::ValueStore)?;
        fs.sync_dir(dir)?;
        Ok(VlogWriter::new(f, number, buffer))
    }

    fn rotate(&self, inner: &mut Inner) -> Result<()> {
        // The old head is synced first: only the newest file may end torn.
        inner.head.sync()?;
        let number = self.file_numbers.fetch_add(1, Ordering::SeqCst);
        let head = Self::create_head(&self.dir, &self.fs, number, self.buffer_bytes)?;
        self.total_bytes.fetch_add(head.len(), Ordering::Relaxed);
        let old = std::mem::replace(&mut inner.head, head);
        inner.sealed.insert(old.number(), old.len());
        Ok(())
    }

    /// Cuts a torn tail off the newest file with records (recovery, once
    /// replay is done; see [`cut_torn_tail`]). A file the manifest names
    /// was checked whole at open and is left alone, and so are the records
    /// the manifest says were durable: a bad one there is damage, which
    /// reads, `verify` and GC report where it is (issue 50: a flipped byte
    /// in the last record was cut off as a torn write, and the tables'
    /// pointers into it read as collected).
    pub(crate) fn cut_torn_tail(&self, log: &LogMeta) -> Result<()> {
        let newest = {
            let inner = self.inner.lock();
            inner.sealed.iter().next_back().map(|(&n, &len)| (n, len))
        };
        let Some((file, len)) = newest.filter(|(n, _)| !log.sealed.contains_key(n)) else {
            return Ok(());
        };
        let floor = log.durable_floor(file, len);
        let tmp = self.file_numbers.fetch_add(1, Ordering::SeqCst);
        if let Some(cut) = cut_torn_tail(self, &self.fs, file, len, floor, tmp)? {
            self.inner.lock().sealed.insert(file, cut);
            self.total_bytes.fetch_sub(len - cut, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Sealed files holding records that `named` (the manifest) does not
    /// list yet, with their lengths: an install records them.
    pub(crate) fn unnamed_sealed(&self, named: &BTreeMap<u64, u64>) -> Vec<(u64, u64)> {
        let inner = self.inner.lock();
        inner
            .sealed
            .range(inner.collected_below..)
            .filter(|(n, &len)| len > FILE_HEADER_LEN as u64 && !named.contains_key(n))
            .map(|(&n, &len)| (n, len))
            .collect()
    }

    /// How far the log is durable: the head and how much of it the last
    /// sync covered (every older file was synced whole at its rotation).
    pub(crate) fn durable_position(&self) -> (u64, u64) {
        let inner = self.inner.lock();
        (inner.head.number(), inner.head.synced())
    }

    /// Where the next append goes: (head file, its length). Every record
    /// appended so far lies before this position.
    pub(crate) fn head_position(&self) -> (u64, u64) {
        let inner = self.inner.lock();
        (inner.head.number(), inner.head.len())
    }

    /// Sealed files numbered `from` or above, oldest first (replay).
    pub(crate) fn sealed_from(&self, from: u64) -> Vec<u64> {
        self.inner
            .lock()
            .sealed
            .range(from..)
            .map(|(&n, _)| n)
            .collect()
    }

    /// A whole log file (replay reads the value log as its journal).
    pub(crate) fn read_file(&self, file: u64) -> Result<Vec<u8>> {
        self.fs
            .read_all(&filename::value_log(&self.dir, file), IoClass::Journal)
    }

    /// The oldest position GC may read from, given the manifest's tail: the
    /// tail itself, or the start of the oldest sealed file. `None` when only
    /// the head exists (GC never touches the head), or when the oldest
    /// sealed file is numbered `before` or above (replay still needs it).
    pub(crate) fn gc_start(
        &self,
        tail: Option<(u64, u64)>,
        before: Option<u64>,
    ) -> Option<(u64, u64)> {
        let inner = self.inner.lock();
        let (&first, _) = inner
            .sealed
            .range(tail.map_or(0, |t| t.0)..)
            .next()
            .filter(|(&n, _)| before.is_none_or(|b| n < b))?;
        match tail {
            Some((f, off)) if f == first => Some((f, off.max(FILE_HEADER_LEN as u64))),
            _ => Some((first, FILE_HEADER_LEN as u64)),
        }
    }

    /// Reads whole records from `(file, offset)` of a sealed file, about
    /// `max_bytes` of them (at least one record).
    pub(crate) fn read_chunk(&self, file: u64, offset: u64, max_bytes: u64) -> Result<Chunk> {
        let path = filename::value_log(&self.dir, file);
        let (len, next_file) = {
            let inner = self.inner.lock();
            let len = *inner.sealed.get(&file).ok_or_else(|| {
                Error::corruption(&path, offset, "GC asked for a log file that is not sealed")
            })?;
            let next = inner
                .sealed
                .range(file + 1..)
                .next()
                .map_or(inner.head.number(), |(&n, _)| n);
            (len, next)
        };
        let mut out = Chunk {
            next: (next_file, FILE_HEADER_LEN as u64),
            ..Chunk::default()
        };
        if offset >= len {
            return Ok(out);
        }
        let reader = self.readers.get(file, &self.file_path(file))?;
        let mut want = max_bytes.min(len - offset).max(1);
        let mut data = reader.read_at(offset, want as usize, IoClass::Gc)?;
        if let Some(first) = claimed_len(&data).filter(|&l| l as u64 > want) {
            // A record larger than the chunk: read it whole.
            want = (first as u64).min(len - offset);
            data = reader.read_at(offset, want as usize, IoClass::Gc)?;
        }
        out.bytes = data.len() as u64;
        let mut pos = 0usize;
        while pos < data.len() {
            match decode_record(&data[pos..]) {
                Ok((r, n)) => {
                    let p = ValuePointer {
                        store: STORE_LOG,
                        file,
                        offset: offset + pos as u64,
                        record_len: n as u32,
                        record_crc: crate::coding::u32_at(&data[pos..], 0),
                    };
                    out.records.push((
                        p,
                        OwnedRecord {
                            seq: r.seq,
                            flags: r.flags,
                            key: r.key.to_vec(),
                            value: r.value.to_vec(),
                        },
                    ));
                    pos += n;
                }
                Err(Bad::Incomplete) if offset + (data.len() as u64) < len => break,
                Err(Bad::Incomplete) => {
                    // Recovery cuts what a crash tore (`cut_torn_tail`), so
                    // a sealed file ends on a record boundary: this is
                    // damage, never garbage to collect.
                    return Err(Error::corruption(
                        &path,
                        offset + pos as u64,
                        "a sealed value log file ends in an incomplete record",
                    ));
                }
                Err(Bad::Damaged(why)) => {
                    return Err(Error::corruption(&path, offset + pos as u64, why));
                }
            }
        }
        let end = offset + pos as u64;
        if end < len {
            out.next = (file, end);
        }
        Ok(out)
    }

    /// Seals the head and starts a new one (tests).
    #[cfg(test)]
    pub(crate) fn seal_head_for_test(&self) {
        let mut inner = self.inner.lock();
        self.rotate(&mut inner).unwrap();
    }

    /// Sealed files numbered `from` up to `to` (excluded).
    pub(crate) fn sealed_between(&self, from: u64, to: u64) -> Vec<u64> {
        let inner = self.inner.lock();
        inner.sealed.range(from..to).map(|(&n, _)| n).collect()
    }

    /// Marks files below `file` collected and deletes them. Callers ensure no
    /// reader can still hold a pointer into them.
    pub(crate) fn delete_below(&self, file: u64) -> Result<()> {
        let doomed: Vec<u64> = {
            let mut inner = self.inner.lock();
            inner.collected_below = inner.collected_below.max(file);
            let doomed = inner
                .sealed
                .range(..file)
                .map(|(&n, _)| n)
                .collect::<Vec<_>>();
            for n in &doomed {
                if let Some(len) = inner.sealed.remove(n) {
                    self.total_bytes.fetch_sub(len, Ordering::Relaxed);
                }
            }
            doomed
        };
        for n in doomed {
            self.readers.forget(n);
            self.fs.remove(&filename::value_log(&self.dir, n))?;
        }
        Ok(())
    }
}

impl RecordFiles for LogStore {
    /// Where the record `p` points at can be read from, after checking the
    /// pointer against the log's valid range (WiscKey, FAST '16, §3.3.3).
    fn locate(&self, p: &ValuePointer, key: &[u8]) -> Result<Located> {
        let path = || self.file_path(p.file);
        if p.store != STORE_LOG {
            return Err(Error::corruption(
                path(),
                p.offset,
                format!("pointer to unknown value store {}", p.store),
            ));
        }
        let limit = {
            let inner = self.inner.lock();
            if p.file == inner.head.number() {
                if let Some(raw) = inner.head.read_buffered(p.offset, p.record_len as usize) {
                    return check_record(&raw, p, key, &path()).map(Located::Buffered);
                }
                inner.head.written()
            } else if inner.behind_release(p.file, p.offset) {
                return Ok(Located::Collected);
            } else if let Some(&len) = inner.sealed.get(&p.file) {
                len
            } else {
                return Err(Error::corruption(
                    path(),
                    p.offset,
                    "pointer into a value log file that does not exist",
                ));
            }
        };
        check_within(p, limit, path)?;
        Ok(Located::InFile { limit })
    }

    fn is_collected(&self, file: u64) -> bool {
        file < self.inner.lock().collected_below
    }

    fn is_collected_at(&self, file: u64, offset: u64) -> bool {
        self.inner.lock().behind_release(file, offset)
    }

    fn file_path(&self, file: u64) -> PathBuf {
        filename::value_log(&self.dir, file)
    }

    fn readers(&self) -> &FileReaders {
        &self.readers
    }
}

impl ValueStore for LogStore {
    /// Appends a record at the head; the pointer is valid for reads at once.
    fn append(&self, r: &Record<'_>) -> Result<ValuePointer> {
        let mut inner = self.inner.lock();
        if inner.head.len() >= self.file_size_limit {
            self.rotate(&mut inner)?;
        }
        let before = inner.head.len();
        let p = inner.head.append(r)?;
        self.appended_bytes
            .fetch_add(u64::from(p.record_len), Ordering::Relaxed);
        self.total_bytes
            .fetch_add(inner.head.len() - before, Ordering::Relaxed);
        Ok(p)
    }

    /// Makes every record appended before the call durable. The fsync runs
    /// outside the store's lock (about 3.5 ms here), so appends and reads
    /// of other writers go on meanwhile.
    fn sync(&self) -> Result<()> {
        let (number, syncer, len) = {
            let mut inner = self.inner.lock();
            if !inner.head.is_dirty() {
                return Ok(());
            }
            let (syncer, len) = inner.head.begin_sync()?;
            (inner.head.number(), syncer, len)
        };
        let r = syncer.sync();
        let mut inner = self.inner.lock();
        // A rotation meanwhile synced the old head itself.
        if inner.head.number() == number {
            match &r {
                Ok(()) => inner.head.end_sync(len),
                // The unsynced bytes may be gone; a later sync must not
                // vouch for them.
                Err(_) => inner.head.sync_failed(),
            }
        }
        r
    }

    /// Like [`LogStore::read`], telling a collected file apart.
    /// Checks a pointer found while replaying the journal: a record past the
    /// end of the newest files was lost in the crash; one that is there but
    /// damaged, or in a file missing from the middle, is corruption.
    fn check_recovered(&self, p: &ValuePointer, key: &[u8]) -> Result<PointerCheck> {
        match self.recovered_bounds(p)? {
            Some(check) => Ok(check),
            None => self
                .read(p, key, IoClass::Journal)
                .map(|_| PointerCheck::Valid),
        }
    }

    /// Number of log files (sealed and head).
    fn file_count(&self) -> usize {
        self.inner.lock().sealed.len() + 1
    }

    fn live_files(&self) -> Vec<(u64, bool)> {
        let inner = self.inner.lock();
        let mut out: Vec<(u64, bool)> = inner.sealed.keys().map(|&f| (f, true)).collect();
        out.push((inner.head.number(), false));
        out
    }

    /// Sealed files were synced when the head moved past them.
    fn checkpoint_files(&self) -> Result<Vec<(u64, Option<u64>)>> {
        let mut inner = self.inner.lock();
        inner.head.write_out()?;
        let mut out: Vec<(u64, Option<u64>)> = inner.sealed.keys().map(|&f| (f, None)).collect();
        out.push((inner.head.number(), Some(inner.head.written())));
        Ok(out)
    }

    fn file_lengths(&self) -> Vec<(u64, u64)> {
        let inner = self.inner.lock();
        let mut out: Vec<(u64, u64)> = inner.sealed.iter().map(|(&f, &l)| (f, l)).collect();
        out.push((inner.head.number(), inner.head.len()));
        out
    }

    /// Bytes of all log files; no lock.
    fn total_bytes(&self) -> u64 {
        self.total_bytes.load(Ordering::Relaxed)
    }

    /// Bytes of records appended since open.
    fn appended_bytes(&self) -> u64 {
        self.appended_bytes.load(Ordering::Relaxed)
    }

    /// A file before the released tail's is collected whole, even while
    /// it is still listed: GC may have punched it before the tail left it.
    fn scan_start(&self, file: u64) -> Option<u64> {
        let inner = self.inner.lock();
        let released = inner.released_to;
        if file < inner.collected_below || file < released.0 {
            None
        } else if file == released.0 {
            Some(released.1.max(FILE_HEADER_LEN as u64))
        } else {
            Some(FILE_HEADER_LEN as u64)
        }
    }
}

impl ValueRecovery for LogStore {
    /// The files the manifest does not name: sealed by this open (the old
    /// head) or by rotations since the last install; the rotations synced
    /// theirs, the open did not.
    fn sync_from_before_open(&self, current: &Version) -> Result<()> {
        for (file, _) in self.unnamed_sealed(&current.values.log.sealed) {
            self.fs.sync_file(&filename::value_log(&self.dir, file))?;
        }
        Ok(())
    }

    /// The head's synced end, once the close synced it.
    fn close_edit(&self, current: &Version) -> Option<VersionEdit> {
        let durable = self.durable_position();
        (Some(durable) > current.values.log.durable_to).then(|| {
            let mut edit = VersionEdit::default();
            edit.values.log.durable = Some(durable);
            edit
        })
    }

    /// The replayed history is settled: what the crash tore at the log's
    /// end goes, and the manifest names every sealed file.
    fn after_replay(&self, current: &Version, edit: &mut VersionEdit) -> Result<()> {
        let log = &current.values.log;
        self.cut_torn_tail(log)?;
        edit.values.log.sealed = self.unnamed_sealed(&log.sealed);
        Ok(())
    }
}

impl ValueAccounting for LogStore {
    /// Sealed files the manifest does not name yet: the install names them
    /// (an open checks each is there, whole). And how far the log is
    /// durable now, if further than the manifest says: every record a
    /// table of the edit points at was synced before it (flushes, merges
    /// and GC sync the store first), so a bad record before that point is
    /// damage, never a torn write (`docs/design.md`, "Torn tails and
    /// damage").
    fn before_install(&self, base: &Version, edit: &mut VersionEdit) {
        let log = &base.values.log;
        edit.values.log.sealed = self.unnamed_sealed(&log.sealed);
        let durable = self.durable_position();
        edit.values.log.durable = (Some(durable) > log.durable_to).then_some(durable);
    }
}

impl ValueGc for LogStore {
    /// Victims are sealed log files the writers appended to: a step waits
    /// for their writes, and for a flush that separated values into them.
    fn gc_profile(&self) -> GcProfile {
        GcProfile {
            needs_barrier: true,
            waits_for_flushes: true,
            overlaps_steps: false,
            looks_up_fresh: false,
            judges_durable_only: false,
            finds_garbage: false,
            frees_whole: false,
            counts_refs: false,
        }
    }

    fn gc_victim<'a>(&'a self, host: &dyn GcHost) -> Result<Option<Box<dyn GcVictim + 'a>>> {
        self.gc_victim_log(host)
    }

    fn gc_wanted(&self, t: &GcTrigger<'_>) -> bool {
        self.gc_wanted_log(t)
    }

    fn gc_over_capacity(&self, current: &Version, capacity: u64) -> bool {
        self.over_capacity_log(current, capacity)
    }

    fn gc_has_victim(&self, current: &Version) -> bool {
        self.gc_start_in(current).is_some()
    }

    fn gc_needs_flush(&self, current: &Version) -> bool {
        self.gc_needs_flush_log(current)
    }

    /// Files behind the tail go in order: everything below the newest.
    /// GC's tail reached `tail` and no reader needs what lies before it:
    /// the whole blocks of `tail`'s file between its header's block and
    /// the tail are punched out, so space comes back a chunk at a time
    /// rather than a file at a time (WiscKey, FAST '16, §3.3.2). Where the
    /// file system cannot punch, the file goes whole once the tail passes
    /// it, as before.
    fn release_collected(&self, tail: (u64, u64)) -> Result<()> {
        {
            let mut inner = self.inner.lock();
            if tail <= inner.released_to {
                return Ok(());
            }
            inner.released_to = tail;
            if !inner.sealed.contains_key(&tail.0) {
                return Ok(());
            }
        }
        // From the file's second block (the first holds the header, which
        // names the format) to the tail's block. Blocks punched by earlier
        // releases are punched again, which costs nothing: a release the
        // crash cut short is so made up for.
        let lo = PUNCH_BLOCK;
        let hi = tail.1 / PUNCH_BLOCK * PUNCH_BLOCK;
        if hi > lo {
            self.fs
                .punch_hole(&filename::value_log(&self.dir, tail.0), lo, hi - lo)?;
        }
        Ok(())
    }

    fn delete_collected(&self, files: &[u64]) {
        if let Some(&newest) = files.iter().max() {
            // A failed delete leaves a file that the next open removes.
            let _ = self.delete_below(newest + 1);
        }
    }
}

/// A relocation run's copy at recovery ([`LogStore::recovered_copy`]).
pub(crate) enum RecoveredCopy {
    /// The copy is there: its key.
    Found(Vec<u8>),
    /// Behind GC's tail: a later relocation moved it again.
    Collected,
    /// Past the durable end: the crash cut it.
    Lost,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{Fs, MemFs, PageCache};
    use crate::record::KIND_PUT;

    fn store(mem: &MemFs, counter: &Arc<AtomicU64>) -> LogStore {
        store_of(mem, counter, 4096)
    }

    /// A log of `file_size_bytes` files in `/db`.
    fn store_of(mem: &MemFs, counter: &Arc<AtomicU64>, file_size_bytes: u64) -> LogStore {
        let fs = CountingFs::new(Arc::new(mem.clone()));
        fs.create_dir_all(Path::new("/db")).unwrap();
        let config = LogConfig {
            file_size_bytes,
            buffer_bytes: 512,
            prefetch_threads: 2,
            gc_chunk_bytes: 4096,
        };
        LogStore::open(
            Path::new("/db"),
            fs,
            counter.clone(),
            config,
            None,
            &BTreeMap::new(),
        )
        .unwrap()
    }

    fn put(s: &LogStore, i: u64) -> ValuePointer {
        let k = format!("k{i}");
        s.append(&Record {
            seq: i,
            flags: KIND_PUT,
            key: k.as_bytes(),
            value: &[b'v'; 300],
        })
        .unwrap()
    }

    #[test]
    fn appends_rotate_read_and_reopen() {
        let mem = MemFs::new();
        let counter = Arc::new(AtomicU64::new(10));
        let s = store(&mem, &counter);
        let ptrs: Vec<_> = (0..60).map(|i| put(&s, i)).collect();
        assert!(s.file_count() > 3, "files rotated");
        // The running total matches the files' lengths on disk.
        s.sync().unwrap();
        let on_disk: u64 = mem
            .paths()
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "vlog"))
            .map(|p| mem.contents(p).unwrap().len() as u64)
            .sum();
        assert_eq!(s.total_bytes(), on_disk);
        for (i, p) in ptrs.iter().enumerate() {
            let r = s
                .read(p, format!("k{i}").as_bytes(), IoClass::UserRead)
                .unwrap();
            assert_eq!(r.seq, i as u64);
        }
        s.sync().unwrap();
        drop(s);
        let s = store(&mem, &counter);
        for (i, p) in ptrs.iter().enumerate() {
            assert!(matches!(
                s.check_recovered(p, format!("k{i}").as_bytes()).unwrap(),
                PointerCheck::Valid
            ));
        }
    }

    /// A release punches out the whole blocks between the header's block
    /// and the tail (WiscKey, FAST '16, §3.3.2): the file keeps its length, fewer
    /// bytes stay allocated, a pointer before the tail is collected (a
    /// reader retries), the records from the tail on still read, and
    /// `verify` scans from the tail.
    #[test]
    fn a_release_punches_the_blocks_before_the_tail() {
        let mem = MemFs::new();
        let counter = Arc::new(AtomicU64::new(10));
        let s = store_of(&mem, &counter, 64 << 10);
        // About 11 KiB of records in the first file, then sealed.
        let ptrs: Vec<_> = (0..35).map(|i| put(&s, i)).collect();
        let file = ptrs[0].file;
        s.seal_head_for_test();
        let path = filename::value_log(Path::new("/db"), file);
        let len = mem.contents(&path).unwrap().len() as u64;
        assert_eq!(mem.allocated_len(&path).unwrap(), len);
        // The tail at the record that starts past 8 KiB: block 1 is freed
        // (block 0 holds the header, block 2 holds the tail).
        let (cut, _) = ptrs
            .iter()
            .enumerate()
            .find(|(_, p)| p.offset > 8192)
            .unwrap();
        let tail = (file, ptrs[cut].offset);
        s.release_collected(tail).unwrap();
        assert_eq!(
            mem.contents(&path).unwrap().len() as u64,
            len,
            "same length"
        );
        assert_eq!(mem.allocated_len(&path).unwrap(), len - PUNCH_BLOCK);
        assert!(mem.contents(&path).unwrap()[4096..8192]
            .iter()
            .all(|&b| b == 0));
        for (i, p) in ptrs.iter().enumerate() {
            let key = format!("k{i}");
            let got = s.read(p, key.as_bytes(), IoClass::UserRead);
            if i < cut {
                assert!(
                    matches!(s.locate(p, key.as_bytes()), Ok(Located::Collected)),
                    "record {i} before the tail"
                );
            } else {
                assert_eq!(got.unwrap().seq, i as u64, "record {i}");
            }
        }
        assert_eq!(s.scan_start(file), Some(tail.1));
        assert!(s.verify().unwrap() >= (35 - cut) as u64);
        // An older tail changes nothing; a file the tail is not in is not
        // punched.
        s.release_collected((file, 20)).unwrap();
        assert_eq!(mem.allocated_len(&path).unwrap(), len - PUNCH_BLOCK);
    }

    /// `verify` listed a file, GC punched it and moved its tail on into the
    /// next file, and `verify` then scanned the punched file from its
    /// header: a checksum mismatch below 4 KiB in a healthy database
    /// (issue 50). A file behind the released tail is collected whole.
    #[test]
    fn verify_skips_a_punched_file_the_tail_left() {
        let mem = MemFs::new();
        let counter = Arc::new(AtomicU64::new(10));
        let s = store_of(&mem, &counter, 64 << 10);
        let first: Vec<_> = (0..35).map(|i| put(&s, i)).collect();
        s.seal_head_for_test();
        let second: Vec<_> = (35..45).map(|i| put(&s, i)).collect();
        s.seal_head_for_test();
        let file = first[0].file;
        let cut = first.iter().find(|p| p.offset > 8192).unwrap();
        s.release_collected((file, cut.offset)).unwrap();
        assert!(
            s.verify().is_ok(),
            "the punched file verifies from its tail"
        );
        // The tail moves on into the next file; the punched one is still
        // listed (its delete comes later, or a reader listed it first).
        s.release_collected((second[0].file, second[2].offset))
            .unwrap();
        assert!(s.live_files().iter().any(|&(f, _)| f == file));
        assert_eq!(s.scan_start(file), None);
        let checked = s.verify().unwrap();
        assert_eq!(checked, 8, "the records from the tail on");
    }

    /// Under every page cache answer: runs read on the caller's thread
    /// (warm), on the prefetch threads (cold), or timed (unknown).
    #[test]
    fn read_many_answers_in_request_order_with_errors_per_request() {
        for page_cache in [PageCache::Warm, PageCache::Cold, PageCache::Unknown] {
            read_many_answers_in_request_order(page_cache);
        }
    }

    fn read_many_answers_in_request_order(page_cache: PageCache) {
        let mem = MemFs::new();
        mem.set_page_cache(page_cache);
        let counter = Arc::new(AtomicU64::new(10));
        let s = store(&mem, &counter);
        let ptrs: Vec<_> = (0..60).map(|i| put(&s, i)).collect();
        let keys: Vec<Vec<u8>> = (0..60).map(|i| format!("k{i}").into_bytes()).collect();
        // Every third request, backwards and across files (some records
        // still buffered in the head); one asks with the wrong key.
        let mut requests: Vec<(ValuePointer, &[u8])> = (0..60)
            .rev()
            .step_by(3)
            .map(|i| (ptrs[i], keys[i].as_slice()))
            .collect();
        requests.push((ptrs[5], b"k6"));
        requests.push((ptrs[4], b"k4"));
        let got = s.read_many(&requests, IoClass::UserRead);
        assert_eq!(got.len(), requests.len());
        for (r, (p, key)) in got.iter().zip(&requests) {
            if *key == b"k6" {
                let e = r.as_ref().unwrap_err();
                // The error names the file and offset of the record.
                let file = format!("{:06}.vlog", p.file);
                let (shown, offset) = (e.to_string(), p.offset.to_string());
                assert!(e.is_corruption() && shown.contains(&file), "{shown}");
                assert!(shown.contains(&offset), "{shown}");
                continue;
            }
            assert_eq!(
                r.as_ref().unwrap(),
                &vec![b'v'; 300],
                "{page_cache:?} {p:?}"
            );
        }
        // Neighbours coalesce into one read; other files or far records
        // start a new run.
        let sorted: Vec<usize> = (0..6).collect();
        let runs = crate::value::files::coalesce(&sorted, |i| &ptrs[i]);
        assert!(runs.len() < sorted.len(), "{runs:?}");
        assert_eq!(runs.concat(), sorted);
        for run in &runs {
            assert!(run.iter().all(|&i| ptrs[i].file == ptrs[run[0]].file));
        }
    }

    /// A whole file is left as it is (found whole from its last bytes); a
    /// torn one loses exactly its incomplete record, whatever the tear.
    #[test]
    fn cut_torn_tail_keeps_whole_records_only() {
        let mem = MemFs::new();
        let counter = Arc::new(AtomicU64::new(10));
        let s = store(&mem, &counter);
        let ptrs: Vec<_> = (0..8).map(|i| put(&s, i)).collect();
        s.sync().unwrap();
        let file = ptrs[0].file;
        assert!(ptrs.iter().all(|p| p.file == file), "one file");
        let path = filename::value_log(Path::new("/db"), file);
        let whole = mem.contents(&path).unwrap();
        drop(s);
        for cut_at in [whole.len(), whole.len() - 1, whole.len() - 200, 40] {
            let image = mem.crash_image();
            image.set_contents(&path, whole[..cut_at].to_vec());
            let s = store(&image, &counter);
            s.cut_torn_tail(&LogMeta::default()).unwrap();
            let got = image.contents(&path).unwrap();
            let kept = ptrs
                .iter()
                .filter(|p| p.offset + u64::from(p.record_len) <= cut_at as u64);
            let end = kept
                .map(|p| p.offset + u64::from(p.record_len))
                .max()
                .unwrap_or(16);
            assert_eq!(got.len() as u64, end, "cut at {cut_at}");
            assert_eq!(got[..], whole[..end as usize], "cut at {cut_at}");
            s.verify().unwrap();
        }
    }

    #[test]
    fn recovery_tells_lost_tails_from_damage() {
        let mem = MemFs::new();
        let counter = Arc::new(AtomicU64::new(10));
        let s = store(&mem, &counter);
        let synced = put(&s, 1);
        s.sync().unwrap();
        let unsynced = put(&s, 2);
        let image = mem.crash_image();
        drop(s);
        let s = store(&image, &counter);
        assert!(matches!(
            s.check_recovered(&synced, b"k1").unwrap(),
            PointerCheck::Valid
        ));
        assert!(matches!(
            s.check_recovered(&unsynced, b"k2").unwrap(),
            PointerCheck::Lost
        ));
        // Damage inside a record that is there is corruption.
        let path = filename::value_log(Path::new("/db"), synced.file);
        let mut data = image.contents(&path).unwrap();
        data[synced.offset as usize + 25] ^= 1;
        image.set_contents(&path, data);
        drop(s);
        let s = store(&image, &counter);
        assert!(s
            .check_recovered(&synced, b"k1")
            .unwrap_err()
            .is_corruption());
        let _ = image.remove(&path);
    }
}
