//! The engine journal: a file of write batches per write buffer, rotated
//! with it (`docs/design.md`, "Journal rotation"; format in
//! `docs/format/journal.md`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Control, Journal, JournalMark, LogWriter};
use crate::batch::WriteBatch;
use crate::error::Result;
use crate::filename;
use crate::fs::{CountingFs, FileSyncer, IoClass};
use crate::value::ValueStore;
use crate::version::VersionEdit;

/// The engine journal being written, and the older journals a rotation left
/// unsynced.
pub(crate) struct EngineJournal {
    dir: PathBuf,
    fs: CountingFs,
    file_numbers: Arc<AtomicU64>,
    /// Where the write path put the values whose pointers are journaled:
    /// synced before the journal, so that no durable pointer names a lost
    /// record.
    values: Option<Arc<dyn ValueStore>>,
    inner: Mutex<Inner>,
    /// Held through a sync, and by `forget_below`: syncs run one at a
    /// time, and no journal leaves `unsynced_older` (to be deleted) while
    /// a sync may be syncing it outside `inner`. Taken before `inner`.
    syncing: Mutex<()>,
}

struct Inner {
    writer: LogWriter,
    /// The journal file `writer` appends to.
    number: u64,
    /// Older journals, by number, with bytes not yet synced and memtables
    /// not yet flushed. The next sync syncs them first and seals.
    unsynced_older: Vec<(u64, Arc<dyn FileSyncer>)>,
}

impl EngineJournal {
    /// Creates journal file `number` (and syncs the directory).
    pub(crate) fn create(
        dir: PathBuf,
        fs: CountingFs,
        file_numbers: Arc<AtomicU64>,
        number: u64,
        values: Option<Arc<dyn ValueStore>>,
    ) -> Result<EngineJournal> {
        let w = fs.create(&filename::journal(&dir, number), IoClass::Journal)?;
        fs.sync_dir(&dir)?;
        Ok(EngineJournal {
            dir,
            fs,
            file_numbers,
            values,
            inner: Mutex::new(Inner {
                writer: LogWriter::new(w),
                number,
                unsynced_older: Vec::new(),
            }),
            syncing: Mutex::new(()),
        })
    }

    /// Syncs the values, then this and older journals: a synced journal
    /// record must never point at values that are not durable. Older
    /// journals left unsynced by a rotation are synced first, then a seal
    /// record in this journal (synced with it) tells recovery that they are
    /// complete.
    ///
    /// The syncs run outside `inner`, so writes go on appending meanwhile
    /// (a sync covers what was appended before it was called, as a group
    /// commit does): only the flush of the user-space buffer and the seal's
    /// append take the lock. A rotation during the older journals' syncs
    /// makes this journal an older one; the sync then finishes under the
    /// lock ([`EngineJournal::sync_locked`]).
    fn sync_all(&self) -> Result<()> {
        let _one_at_a_time = self.syncing.lock();
        if let Some(v) = &self.values {
            v.sync()?;
        }
        let (older, current, number, mut len) = {
            let mut j = self.inner.lock();
            if j.unsynced_older.is_empty() && !j.writer.is_dirty() {
                return Ok(());
            }
            j.writer.flush()?;
            let older: Vec<Arc<dyn FileSyncer>> =
                j.unsynced_older.iter().map(|(_, s)| s.clone()).collect();
            (older, j.writer.syncer()?, j.number, j.writer.len())
        };
        if !older.is_empty() {
            for s in &older {
                s.sync()?;
            }
            let mut j = self.inner.lock();
            if j.number != number {
                return self.sync_locked(&mut j);
            }
            // Without a rotation none joined the list, and none left it
            // (`forget_below` waits for `syncing`): all are synced.
            j.unsynced_older.clear();
            j.writer.add_record(&Control::Seal.encode())?;
            j.writer.flush()?;
            len = j.writer.len();
        }
        let synced = current.sync();
        let mut j = self.inner.lock();
        if j.number == number {
            match &synced {
                Ok(()) => j.writer.mark_synced(len),
                Err(_) => j.writer.sync_failed(),
            }
        }
        synced
    }

    /// The same sync with `inner` held throughout.
    fn sync_locked(&self, j: &mut Inner) -> Result<()> {
        if let Some(v) = &self.values {
            v.sync()?;
        }
        if !j.unsynced_older.is_empty() {
            for (_, s) in &j.unsynced_older {
                s.sync()?;
            }
            j.writer.add_record(&Control::Seal.encode())?;
            j.unsynced_older.clear();
        }
        j.writer.sync()
    }
}

impl Journal for EngineJournal {
    /// Only makes the group durable: its values were separated already.
    fn append(
        &self,
        group: &WriteBatch,
        _seq: u64,
        sync: bool,
        _separate: Option<usize>,
    ) -> Result<Option<WriteBatch>> {
        self.inner.lock().writer.add_record(group.data())?;
        if sync {
            self.sync_all()?;
        }
        Ok(None)
    }

    fn sync(&self) -> Result<()> {
        self.sync_all()
    }

    /// A seal after the last batch: with a valid record after it, damage
    /// in that batch reads as damage (`docs/format/journal.md`, "Reading
    /// and damage"). Truthful as a seal too: every older journal is synced.
    fn close(&self) -> Result<()> {
        self.sync_all()?;
        let _one_at_a_time = self.syncing.lock();
        let mut j = self.inner.lock();
        if j.writer.len() > 0 {
            j.writer.add_record(&Control::Seal.encode())?;
            j.writer.sync()?;
        }
        Ok(())
    }

    /// A new journal file takes the new buffer's records. The old one is
    /// not synced here: its memtable's flush usually makes it obsolete
    /// before its pages reach the disk. The new journal opens with a link
    /// record naming the old one and giving its length, and the next sync
    /// seals it, which keeps recovery to a prefix.
    fn rotate(&self, current: JournalMark) -> Result<JournalMark> {
        let JournalMark::File(old_number) = current else {
            unreachable!("an engine journal marks buffers by file number")
        };
        let number = self.file_numbers.fetch_add(1, Ordering::SeqCst);
        let mut j = self.inner.lock();
        let w = self
            .fs
            .create(&filename::journal(&self.dir, number), IoClass::Journal)?;
        self.fs.sync_dir(&self.dir)?;
        j.writer.flush()?;
        let link = Control::Link {
            journal: old_number,
            len: j.writer.len(),
        };
        if j.writer.is_dirty() {
            let syncer = j.writer.syncer()?;
            j.unsynced_older.push((old_number, syncer));
        }
        j.writer = LogWriter::new(w);
        j.number = number;
        j.writer.add_record(&link.encode())?;
        Ok(JournalMark::File(number))
    }

    fn checkpoint_end(&self) -> Result<Option<(u64, u64)>> {
        let mut j = self.inner.lock();
        j.writer.flush()?;
        Ok(Some((j.number, j.writer.len())))
    }

    fn replay_from(&self, next: JournalMark, _edit: &mut VersionEdit) -> Option<u64> {
        match next {
            JournalMark::File(n) => Some(n),
            JournalMark::ValueLog(..) => None,
        }
    }

    fn forget_below(&self, log_number: u64) {
        let _no_sync_running = self.syncing.lock();
        self.inner
            .lock()
            .unsynced_older
            .retain(|&(n, _)| n >= log_number);
    }
}
