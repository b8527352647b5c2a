//! Replay of the engine journals at recovery (`docs/design.md`,
//! "Recovery protocol" and "Journal rotation"): every batch of every
//! journal from the manifest's log number on, in order, as far as history
//! is a prefix; and the torn-tail rule the value log's replay shares.

use std::path::{Path, PathBuf};

use super::{read_log, Control};
use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::filename;
use crate::fs::{CountingFs, IoClass};
use crate::key::Kind;
use crate::logfile::reader::LogRecords;
use crate::options::JournalRecovery;
use crate::pointer::ValuePointer;
use crate::value::{PointerCheck, ValueStore};

/// What a replay reads from and how it treats damage.
pub(crate) struct Source<'a> {
    pub(crate) dir: &'a Path,
    pub(crate) fs: &'a CountingFs,
    pub(crate) mode: JournalRecovery,
    /// The value store, which journaled pointers are checked against.
    pub(crate) values: Option<&'a dyn ValueStore>,
}

/// How replay of one source ended.
#[derive(PartialEq, Eq)]
pub(crate) enum Ended {
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
pub(crate) struct TornTail {
    mode: JournalRecovery,
    later_records_prove_loss: bool,
    at: Option<(PathBuf, u64)>,
}

impl TornTail {
    pub(crate) fn new(mode: JournalRecovery, later_records_prove_loss: bool) -> Self {
        TornTail {
            mode,
            later_records_prove_loss,
            at: None,
        }
    }

    /// Before applying records of a later file: `Ok(true)` to go on,
    /// `Ok(false)` when history ends at the tear.
    pub(crate) fn later_records(&self, what: &str) -> Result<bool> {
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
    pub(crate) fn note(&mut self, path: PathBuf, off: u64, what: &str) -> Result<()> {
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

fn read_journal(src: &Source<'_>, number: u64) -> Result<ReadJournal> {
    let data = src
        .fs
        .read_all(&filename::journal(src.dir, number), IoClass::Journal)?;
    Ok(ReadJournal {
        number,
        len: data.len() as u64,
        log: read_log(&data),
    })
}

/// Replays engine journals in order, per the recovery mode. A journal
/// ends early (torn, or shorter than the next journal's link says) at a
/// crash point unless a later journal holds a seal.
pub(crate) fn replay_journals(
    src: &Source<'_>,
    journals: &[u64],
    sink: &mut dyn FnMut(&WriteBatch) -> Result<()>,
) -> Result<Ended> {
    let mode = src.mode;
    let mut torn = TornTail::new(mode, false);
    let strict = matches!(
        mode,
        JournalRecovery::TolerateCorruptedTail | JournalRecovery::AbsoluteConsistency
    );
    let mut next = match journals.first() {
        Some(&n) => Some(read_journal(src, n)?),
        None => None,
    };
    for i in 0..journals.len() {
        let j = next.take().expect("journal read ahead");
        next = match journals.get(i + 1) {
            Some(&n) => Some(read_journal(src, n)?),
            None => None,
        };
        let path = filename::journal(src.dir, j.number);
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
                    filename::journal(src.dir, n),
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
                None => WriteBatch::from_record(rec).and_then(|b| b.check_sequences().map(|()| b)),
            };
            let batch = match batch {
                Ok(b) => b,
                Err(why) => match mode {
                    JournalRecovery::SkipAnyCorrupted => continue,
                    JournalRecovery::PointInTime => return Ok(Ended::Early),
                    _ => return Err(Error::corruption(&path, off, why)),
                },
            };
            match check_recovered_pointers(src, &batch, &path, off) {
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
            sink(&batch)?;
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
                Some(_) => sealed_after(src, &journals[i + 2..])?,
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
fn sealed_after(src: &Source<'_>, journals: &[u64]) -> Result<bool> {
    for &n in journals {
        if read_journal(src, n)?.has_seal() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Checks every value pointer of a recovered batch: `Ok(false)` if one
/// lies past the durable end of the value log.
fn check_recovered_pointers(
    src: &Source<'_>,
    batch: &WriteBatch,
    path: &Path,
    off: u64,
) -> Result<bool> {
    for op in batch.iter() {
        let op = op.map_err(|e| Error::corruption(path, off, e))?;
        if op.kind != Kind::ValuePointer {
            continue;
        }
        let Some(store) = src.values else {
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
