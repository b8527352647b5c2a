//! Recovery (`docs/design.md`, "Recovery" and "Value log as journal"):
//! replays what the tables do not hold yet into L0 tables, then writes a
//! fresh manifest. The source is the engine journals or, when the value log
//! is the journal, the value log from the position the manifest records
//! (seed 001 §3.4.2). Only one of them can hold unflushed writes: every
//! open ends by flushing what it replayed.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Core;
use crate::batch::WriteBatch;
use crate::compaction::JobStats;
use crate::error::{Error, Result};
use crate::filename;
use crate::fs::IoClass;
use crate::journal::engine::EngineJournal;
use crate::journal::reader::LogRecords;
use crate::journal::{read_log, Control};
use crate::journal::{Journal, JournalMark};
use crate::key::Kind;
use crate::memtable::{MemTable, WriteBuffer};
use crate::options::JournalRecovery;
use crate::policy::Separation;
use crate::value::log::format::{
    file_header, kind_of, FILE_HEADER_LEN, FLAG_GROUP_END, FLAG_INLINE, KIND_DELETE, KIND_PUT,
    KIND_RELOCATE,
};
use crate::value::log::journal::LogJournal;
use crate::value::log::reader::{scan_file, OwnedRecord};
use crate::value::log::store::LogStore;
use crate::value::pointer::{ValuePointer, STORE_LOG};
use crate::value::{PointerCheck, ValueStore};
use crate::version::VersionEdit;

/// What replay gathers: the memtable being refilled, the highest sequence
/// number seen, and the L0 tables written so far.
struct Replay {
    mem: Arc<MemTable>,
    max_seq: u64,
    edit: VersionEdit,
}

/// How replay of one source ended.
#[derive(PartialEq, Eq)]
enum Ended {
    /// Every record was applied (a torn tail may have ended the last file).
    Fully,
    /// History ends earlier: a lost write, or point-in-time recovery
    /// stopping at damage.
    Early,
}

/// The rule both replays share: a torn tail ends history. Whether a torn
/// file followed by records in a later file means lost synced data depends
/// on the source: each value log file is synced before the next one starts,
/// so there it does; a journal rotation leaves the old journal unsynced, so
/// there it is a crash point (`docs/design.md`, "Journal rotation"; seals
/// are checked by the caller).
struct TornTail {
    mode: JournalRecovery,
    later_records_prove_loss: bool,
    at: Option<(PathBuf, u64)>,
}

impl TornTail {
    fn new(mode: JournalRecovery, later_records_prove_loss: bool) -> Self {
        TornTail {
            mode,
            later_records_prove_loss,
            at: None,
        }
    }

    /// Before applying records of a later file: `Ok(true)` to go on,
    /// `Ok(false)` when history ends at the tear.
    fn later_records(&self, what: &str) -> Result<bool> {
        match (&self.at, self.mode) {
            (None, _) | (_, JournalRecovery::SkipAnyCorrupted) => Ok(true),
            (Some((p, off)), JournalRecovery::TolerateCorruptedTail)
                if self.later_records_prove_loss =>
            {
                Err(Error::corruption(p, *off, what.to_string()))
            }
            _ => Ok(false),
        }
    }

    /// Notes that `path` ends torn at `off` (`Corruption` under
    /// absolute consistency).
    fn note(&mut self, path: PathBuf, off: u64, what: &str) -> Result<()> {
        if self.mode == JournalRecovery::AbsoluteConsistency {
            return Err(Error::corruption(&path, off, what.to_string()));
        }
        self.at = Some((path, off));
        Ok(())
    }
}

/// One engine journal read for replay.
struct ReadJournal {
    number: u64,
    len: u64,
    log: LogRecords,
}

impl ReadJournal {
    /// The link its first record holds (the journal before it and that
    /// journal's length), if a rotation started it.
    fn link(&self) -> Option<(u64, u64)> {
        match self
            .log
            .records
            .first()
            .map(|(_, rec)| Control::decode(rec))
        {
            Some(Some(Ok(Control::Link { journal, len }))) => Some((journal, len)),
            _ => None,
        }
    }

    fn has_seal(&self) -> bool {
        self.log
            .records
            .iter()
            .any(|(_, rec)| matches!(Control::decode(rec), Some(Ok(Control::Seal))))
    }

    /// True when it holds write batches (not only control records).
    fn has_batches(&self) -> bool {
        self.log
            .records
            .iter()
            .any(|(_, rec)| Control::decode(rec).is_none())
    }
}

impl Core {
    /// Replays the journals (or the value log), writes what they held to L0
    /// and installs a manifest that no longer needs them.
    /// `opened` holds what opening the value store changed (new files of
    /// the hash layout's groups); it goes into the same manifest.
    /// `manifest` is the manifest recovered from (for errors).
    /// `value_log` is the log layout's store when the database has one (the
    /// value log may hold writes to replay), and `log_journal` the value
    /// log as journal, when the options ask for it; otherwise a new engine
    /// journal is created.
    pub(super) fn recover(
        &self,
        journals: &[u64],
        opened: VersionEdit,
        manifest: &Path,
        value_log: Option<Arc<LogStore>>,
        log_journal: Option<LogJournal>,
    ) -> Result<()> {
        let (max_seq, journal_from) = {
            let st = self.state.lock();
            (st.last_sequence, st.current.values.log.journal_from)
        };
        let mut r = Replay {
            mem: Arc::new(MemTable::new()),
            max_seq,
            edit: opened,
        };
        let ended = self.replay_journals(journals, &mut r)?;
        if let (Ended::Fully, Some(from)) = (ended, journal_from) {
            let store = value_log.ok_or_else(crate::value::missing_store)?;
            self.replay_value_log(&store, from, &mut r)?;
        }
        if !r.mem.is_empty() {
            self.write_level0(&r.mem, r.max_seq, &mut r.edit)?;
        }
        // Replayed pointers were checked against durable records; values
        // the recovered tables separated (separation at flush) are made
        // durable here, before the edit lists the tables.
        if let (true, Some(v)) = (self.opts.values.separate_at_flush, &self.values) {
            v.sync()?;
        }
        if let Some(store) = &self.values {
            // The replayed history is settled: the store cuts what the
            // crash tore off its newest files.
            let current = self.state.lock().current.clone();
            store.after_replay(&current, &mut r.edit)?;
        }
        let log_number = self.versions.new_file_number();
        let (journal, mark): (Box<dyn Journal>, JournalMark) = match log_journal {
            Some(j) => {
                let mark = j.head_mark();
                j.replay_from(mark, &mut r.edit);
                (Box::new(j), mark)
            }
            None => {
                if journal_from.is_some() {
                    // No longer the journal: nothing replays from it.
                    r.edit.values.log.journal = Some((0, 0));
                }
                let threshold = Separation::from_options(&self.opts).at_write();
                let j = EngineJournal::create(
                    self.dir.clone(),
                    self.fs.clone(),
                    self.versions.file_numbers(),
                    log_number,
                    self.values.clone(),
                    threshold,
                )?;
                (Box::new(j), JournalMark::File(log_number))
            }
        };
        let mut st = self.state.lock();
        let version = st.current.apply(&r.edit).map_err(|e| {
            let why = format!("the recovered state does not apply to this manifest: {e}");
            Error::corruption(manifest, 0, why)
        })?;
        let ms = self
            .versions
            .write_new_manifest(&version, log_number, r.max_seq)?;
        *self.manifest.lock() = Some(ms);
        st.current = Arc::new(version);
        st.log_number = log_number;
        st.mem_mark = mark;
        st.last_sequence = r.max_seq;
        st.pending_outputs.clear();
        st.refresh_sv();
        self.visible_seq.store(r.max_seq, Ordering::Release);
        if self.journal.set(journal).is_err() {
            unreachable!("recovery runs once per open");
        }
        Ok(())
    }

    /// Applies one recovered batch; writes an L0 table when the memtable
    /// fills.
    fn replay_batch(&self, r: &mut Replay, batch: &WriteBatch) -> Result<()> {
        let seq = batch.sequence();
        r.mem.insert_batch(batch, seq);
        r.max_seq = r.max_seq.max(seq + batch.len() as u64 - 1);
        if r.mem.approximate_memory_bytes() > self.opts.write_buffer_size_bytes {
            self.write_level0(&r.mem, r.max_seq, &mut r.edit)?;
            r.mem = Arc::new(MemTable::new());
        }
        Ok(())
    }

    fn read_journal(&self, number: u64) -> Result<ReadJournal> {
        let data = self
            .fs
            .read_all(&filename::journal(&self.dir, number), IoClass::Journal)?;
        Ok(ReadJournal {
            number,
            len: data.len() as u64,
            log: read_log(&data),
        })
    }

    /// Replays engine journals in order, per the recovery mode. A journal
    /// ends early (torn, or shorter than the next journal's link says) at a
    /// crash point unless a later journal holds a seal.
    fn replay_journals(&self, journals: &[u64], r: &mut Replay) -> Result<Ended> {
        let mode = self.opts.journal_recovery;
        let mut torn = TornTail::new(mode, false);
        let strict = matches!(
            mode,
            JournalRecovery::TolerateCorruptedTail | JournalRecovery::AbsoluteConsistency
        );
        let mut next = match journals.first() {
            Some(&n) => Some(self.read_journal(n)?),
            None => None,
        };
        for i in 0..journals.len() {
            let j = next.take().expect("journal read ahead");
            next = match journals.get(i + 1) {
                Some(&n) => Some(self.read_journal(n)?),
                None => None,
            };
            let path = filename::journal(&self.dir, j.number);
            if j.has_batches()
                && !torn.later_records("journal damaged before records of a later journal")?
            {
                return Ok(Ended::Early);
            }
            // The length this journal had when the rotation closed it.
            let expected = match next.as_ref().and_then(ReadJournal::link) {
                Some((n, len)) if n == j.number => Some(len),
                Some((n, _)) if n > j.number && strict => {
                    return Err(Error::corruption(
                        filename::journal(&self.dir, n),
                        0,
                        "journal missing: the next journal's link names it",
                    ));
                }
                _ => None,
            };
            if let (Some(len), true) = (expected, strict) {
                if j.len > len {
                    return Err(Error::corruption(
                        &path,
                        len,
                        format!(
                            "journal holds {} bytes, the next journal's link says {len}",
                            j.len
                        ),
                    ));
                }
            }
            let stop_at = match (mode, j.log.damage.first()) {
                (JournalRecovery::SkipAnyCorrupted, _) | (_, None) => u64::MAX,
                (JournalRecovery::PointInTime, Some((off, _))) => *off,
                (_, Some((off, why))) => {
                    return Err(Error::corruption(&path, *off, why.clone()));
                }
            };
            for (off, rec) in j.log.records {
                if off >= stop_at {
                    break;
                }
                let batch = match Control::decode(&rec) {
                    Some(Ok(_)) => continue,
                    Some(Err(why)) => Err(why),
                    None => WriteBatch::from_record(rec),
                };
                let batch = match batch {
                    Ok(b) => b,
                    Err(why) => match mode {
                        JournalRecovery::SkipAnyCorrupted => continue,
                        JournalRecovery::PointInTime => return Ok(Ended::Early),
                        _ => return Err(Error::corruption(&path, off, why)),
                    },
                };
                match self.check_recovered_pointers(&batch, &path, off) {
                    Ok(true) => {}
                    Ok(false) => {
                        // The value log lost this write's values: history
                        // ends before it (log appends are in order).
                        if mode == JournalRecovery::AbsoluteConsistency {
                            return Err(Error::corruption(
                                &path,
                                off,
                                "journal record's values were lost from the value log",
                            ));
                        }
                        return Ok(Ended::Early);
                    }
                    Err(e) => match mode {
                        JournalRecovery::SkipAnyCorrupted => continue,
                        JournalRecovery::PointInTime => return Ok(Ended::Early),
                        _ => return Err(e),
                    },
                }
                self.replay_batch(r, &batch)?;
            }
            if stop_at != u64::MAX {
                return Ok(Ended::Early); // point-in-time: history ends at the damage
            }
            let short = match (j.log.torn_tail_at, expected) {
                (Some(off), _) => Some((off, "incomplete record at the end")),
                (None, Some(len)) if j.len < len => Some((
                    j.len,
                    "journal ends before the length the next journal's link records",
                )),
                _ => None,
            };
            if let Some((off, what)) = short {
                let sealed = match &next {
                    Some(n) if n.has_seal() => true,
                    Some(_) => self.sealed_after(&journals[i + 2..])?,
                    None => false,
                };
                // A seal after it: these bytes had been synced, so they were
                // lost to damage, not to a crash (later batches or not).
                if sealed && mode == JournalRecovery::TolerateCorruptedTail {
                    return Err(Error::corruption(
                        &path,
                        off,
                        format!("{what}, but a later journal's seal says it was synced"),
                    ));
                }
                // Otherwise history ends here if later journals hold batches.
                torn.note(path, off, what)?;
            }
        }
        Ok(Ended::Fully)
    }

    /// True when one of these journals holds a seal (older journals were
    /// synced whole before it).
    fn sealed_after(&self, journals: &[u64]) -> Result<bool> {
        for &n in journals {
            if self.read_journal(n)?.has_seal() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Checks every value pointer of a recovered batch: `Ok(false)` if one
    /// lies past the durable end of the value log.
    fn check_recovered_pointers(&self, batch: &WriteBatch, path: &Path, off: u64) -> Result<bool> {
        for op in batch.iter() {
            let op = op.map_err(|e| Error::corruption(path, off, e))?;
            if op.kind != Kind::ValuePointer {
                continue;
            }
            let Some(store) = &self.values else {
                return Err(crate::value::missing_store());
            };
            let p = ValuePointer::decode(op.value).ok_or_else(|| {
                Error::corruption(path, off, "malformed value pointer in the journal")
            })?;
            match store.check_recovered(&p, op.key)? {
                PointerCheck::Lost => return Ok(false),
                PointerCheck::Valid | PointerCheck::Collected => {}
            }
        }
        Ok(true)
    }

    /// Replays the value log from `from` to its end (seed 001 §3.4.2): each
    /// write group becomes a batch once its last record (`FLAG_GROUP_END`)
    /// is read, so a group cut by the crash is dropped whole. GC copies are
    /// skipped; their relocations are records of their own.
    fn replay_value_log(&self, store: &LogStore, from: (u64, u64), r: &mut Replay) -> Result<()> {
        let mode = self.opts.journal_recovery;
        let mut group: Option<WriteBatch> = None;
        let mut torn = TornTail::new(mode, true);
        for file in store.sealed_from(from.0) {
            let path = filename::value_log(&self.dir, file);
            let data = store.read_file(file)?;
            if data.len() <= FILE_HEADER_LEN && file_header().starts_with(&data) {
                continue; // created, never written: holds no records
            }
            let scan = scan_file(&data, &path)?;
            let start = if file == from.0 { from.1 } else { 0 };
            let records: Vec<_> = scan
                .records
                .into_iter()
                .filter(|(off, _, rec)| *off >= start && !rec.is_gc_copy())
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
                if !self.add_replayed(store, g, &rec, &here, &path)? {
                    return Ok(()); // history ends before this group
                }
                if rec.flags & FLAG_GROUP_END != 0 {
                    let batch = group.take().expect("group in progress");
                    self.replay_batch(r, &batch)?;
                }
            }
            if let Some((off, why)) = scan.damage {
                match mode {
                    JournalRecovery::SkipAnyCorrupted => {
                        group = None;
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
    fn add_replayed(
        &self,
        store: &LogStore,
        group: &mut WriteBatch,
        rec: &OwnedRecord,
        here: &ValuePointer,
        path: &Path,
    ) -> Result<bool> {
        let kind = kind_of(rec.flags);
        match kind {
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
                        if self.opts.journal_recovery == JournalRecovery::PointInTime {
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

    fn write_level0(
        &self,
        mem: &Arc<MemTable>,
        max_seq: u64,
        edit: &mut VersionEdit,
    ) -> Result<()> {
        let mut stats = JobStats::default();
        let outputs = self.build_tables(mem.clone().iter(), max_seq, &mut stats)?;
        for f in outputs {
            edit.add_file(self.shape.flush_level(), f);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! Journal chains after rotations that left the old journal unsynced
    //! (`docs/design.md`, "Journal rotation"), written record by record.
    use std::path::Path;
    use std::sync::Arc;

    use crate::batch::WriteBatch;
    use crate::error::Error;
    use crate::filename::{self, FileKind};
    use crate::fs::{CountingFs, Fs, IoClass, MemFs};
    use crate::journal::{Control, LogWriter};
    use crate::options::{JournalRecovery, Options};
    use crate::Db;

    fn batch(seq: u64, key: &str) -> Vec<u8> {
        let mut b = WriteBatch::new();
        b.put(key, "v");
        b.set_sequence(seq);
        b.data().to_vec()
    }

    /// Writes `records` as journal `n` and returns its length.
    fn write_journal(fs: &MemFs, n: u64, records: &[Vec<u8>]) -> u64 {
        let cfs = CountingFs::new(Arc::new(fs.clone()));
        let mut w = LogWriter::new(
            cfs.create(&filename::journal(Path::new("/db"), n), IoClass::Journal)
                .unwrap(),
        );
        for r in records {
            w.add_record(r).unwrap();
        }
        w.sync().unwrap();
        w.len()
    }

    /// A fresh database and the number of its (empty) journal.
    fn fresh() -> (MemFs, u64) {
        let fs = MemFs::new();
        drop(Db::open("/db", Options::default().fs(Arc::new(fs.clone()))).unwrap());
        let journal = fs
            .list(Path::new("/db"))
            .unwrap()
            .iter()
            .find_map(|name| match filename::parse(name) {
                Some(FileKind::Journal(n)) => Some(n),
                _ => None,
            })
            .unwrap();
        (fs, journal)
    }

    fn open(fs: &MemFs, mode: JournalRecovery) -> crate::Result<Db> {
        Db::open(
            "/db",
            Options::default()
                .fs(Arc::new(fs.clone()))
                .journal_recovery(mode),
        )
    }

    fn keys(db: &Db) -> Vec<String> {
        ["k1", "k2", "k3"]
            .into_iter()
            .filter(|k| db.get(k).unwrap().is_some())
            .map(String::from)
            .collect()
    }

    /// Journal `j0` holds k1 and k2 (the whole of it, or only k1 when
    /// `cut`), journal `j0 + 1` links to its full length, optionally seals,
    /// and holds k3.
    fn chain(cut: bool, seal: bool) -> (MemFs, u64, u64) {
        let (fs, j0) = fresh();
        let short = write_journal(&fs, j0, &[batch(1, "k1")]);
        let full = write_journal(&fs, j0, &[batch(1, "k1"), batch(2, "k2")]);
        let mut next = vec![Control::Link {
            journal: j0,
            len: full,
        }
        .encode()];
        if seal {
            next.push(Control::Seal.encode());
        }
        next.push(batch(3, "k3"));
        write_journal(&fs, j0 + 1, &next);
        if cut {
            write_journal(&fs, j0, &[batch(1, "k1")]);
        }
        (fs, j0, short)
    }

    #[test]
    fn a_linked_chain_replays_whole() {
        for seal in [false, true] {
            let (fs, _, _) = chain(false, seal);
            let db = open(&fs, JournalRecovery::TolerateCorruptedTail).unwrap();
            assert_eq!(keys(&db), ["k1", "k2", "k3"], "seal {seal}");
        }
    }

    /// The old journal lost its unsynced tail on a record boundary: without
    /// the link this would replay k1 and k3, not a prefix.
    #[test]
    fn a_journal_shorter_than_its_link_ends_history_without_a_seal() {
        let (fs, _, _) = chain(true, false);
        let db = open(&fs, JournalRecovery::TolerateCorruptedTail).unwrap();
        assert_eq!(keys(&db), ["k1"]);
        drop(db);
        // The recovered database no longer needs the dropped journal.
        let db = open(&fs, JournalRecovery::TolerateCorruptedTail).unwrap();
        assert_eq!(keys(&db), ["k1"]);
        let (fs, j0, short) = chain(true, false);
        match open(&fs, JournalRecovery::AbsoluteConsistency) {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!(file, filename::journal(Path::new("/db"), j0));
                assert_eq!(offset, short);
            }
            other => panic!(
                "absolute consistency accepted a short journal: {:?}",
                other.err()
            ),
        }
    }

    /// A seal after it proves the lost bytes were synced: damage, whether
    /// or not batches follow the seal.
    #[test]
    fn a_short_journal_before_a_seal_is_corruption() {
        let (fs, j0, short) = chain(true, true);
        // The same, with nothing but the link and the seal after the cut.
        let sealed_only = fs.crash_image();
        let full = write_journal(&sealed_only, j0, &[batch(1, "k1"), batch(2, "k2")]);
        write_journal(
            &sealed_only,
            j0 + 1,
            &[
                Control::Link {
                    journal: j0,
                    len: full,
                }
                .encode(),
                Control::Seal.encode(),
            ],
        );
        write_journal(&sealed_only, j0, &[batch(1, "k1")]);
        for (fs, what) in [
            (&fs, "with a batch after the seal"),
            (&sealed_only, "seal only"),
        ] {
            match open(fs, JournalRecovery::TolerateCorruptedTail) {
                Err(Error::Corruption { file, offset, .. }) => {
                    assert_eq!(file, filename::journal(Path::new("/db"), j0), "{what}");
                    assert_eq!(offset, short, "{what}");
                }
                other => panic!("a sealed short journal opened ({what}): {:?}", other.err()),
            }
        }
        // Point in time keeps the prefix before the damage.
        let db = open(&fs, JournalRecovery::PointInTime).unwrap();
        assert_eq!(keys(&db), ["k1"]);
    }

    #[test]
    fn a_journal_longer_than_its_link_is_corruption() {
        let (fs, j0) = fresh();
        let short = write_journal(&fs, j0, &[batch(1, "k1")]);
        write_journal(&fs, j0, &[batch(1, "k1"), batch(2, "k2")]);
        let link = Control::Link {
            journal: j0,
            len: short,
        };
        write_journal(&fs, j0 + 1, &[link.encode(), batch(3, "k3")]);
        match open(&fs, JournalRecovery::TolerateCorruptedTail) {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!(file, filename::journal(Path::new("/db"), j0));
                assert_eq!(offset, short);
            }
            other => panic!("a journal longer than its link opened: {:?}", other.err()),
        }
    }
}
