//! The value log as the journal (WiscKey, FAST '16, §3.4.2): every operation of a
//! write group is a value log record, the last one flagged as the group's
//! end, and there is no engine journal. Small values are logged inline;
//! recovery replays the log from the position the manifest records
//! (`docs/design.md`, "Value log as journal").

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;

use super::store::LogStore;
use crate::batch::WriteBatch;
use crate::error::Result;
use crate::journal::{Journal, JournalMark};
use crate::key::Kind;
use crate::record::{
    relocation_run, Record, FLAG_GROUP_END, FLAG_INLINE, KIND_DELETE, KIND_PUT, KIND_RELOCATE,
    KIND_RELOCATE_RUN,
};
use crate::value::ValueStore;
use crate::version::VersionEdit;

/// The value log, journaling whole write groups.
pub(crate) struct LogJournal {
    store: Arc<LogStore>,
    /// Bytes of records no index entry points at (inline values, deletes,
    /// relocation records), per file: garbage once the write buffer they
    /// belong to is flushed (`docs/design.md`, "Space accounting").
    unpointed: Mutex<Unpointed>,
}

#[derive(Default)]
struct Unpointed {
    /// The active write buffer's.
    active: BTreeMap<u64, u64>,
    /// Switched-out buffers', with where the next buffer's records begin.
    switched: VecDeque<((u64, u64), BTreeMap<u64, u64>)>,
}

impl LogJournal {
    pub(crate) fn new(store: Arc<LogStore>) -> Self {
        LogJournal {
            store,
            unpointed: Mutex::new(Unpointed::default()),
        }
    }

    /// Where the next write buffer's records begin: the log's head.
    pub(crate) fn head_mark(&self) -> JournalMark {
        let (file, offset) = self.store.head_position();
        JournalMark::ValueLog(file, offset)
    }
}

/// True for the write group of a GC commit: pointer puts only (users
/// write values and deletes; `Core::commit_relocations` writes these).
fn is_relocation_commit(group: &WriteBatch) -> bool {
    !group.is_empty()
        && group
            .iter()
            .all(|op| op.is_ok_and(|op| op.kind == Kind::ValuePointer))
}

impl LogJournal {
    /// Journals a GC commit as one relocation run: the new pointers
    /// without their keys, which the copies they point at hold (replay
    /// reads them). A `relocate` record per key (key, pointer and a
    /// 21-byte header: 58 bytes for a 24-byte key) made the log's own GC
    /// collect its commits again: over 128-byte values they were a third
    /// of what it copied, and GC read back 8 dead records for each
    /// update (`docs/experiments.md`, "Relocation runs"). A run takes 14
    /// bytes a key.
    fn append_run(&self, group: &WriteBatch, seq: u64, sync: bool) -> Result<Option<WriteBatch>> {
        let value = relocation_run(group.iter().map(|op| op.expect("validated batch").value));
        let p = self.store.append(&Record {
            seq,
            flags: KIND_RELOCATE_RUN | FLAG_GROUP_END,
            key: &[],
            value: &value,
        })?;
        *self.unpointed.lock().active.entry(p.file).or_default() += u64::from(p.record_len);
        if sync {
            self.store.sync()?;
        }
        // The write buffer gets the pointers as they are.
        Ok(None)
    }
}

impl Journal for LogJournal {
    /// Appends every operation of the group; the batch for the memtable
    /// holds pointers for values at or above the write path's threshold
    /// (`separate`; they stay in the log and the index points at them),
    /// and small values, deletes and relocations as they are (small values
    /// are copied into the index too).
    fn append(
        &self,
        group: &WriteBatch,
        seq: u64,
        sync: bool,
        separate: Option<usize>,
    ) -> Result<Option<WriteBatch>> {
        let threshold = separate.unwrap_or(usize::MAX);
        if is_relocation_commit(group) {
            return self.append_run(group, seq, sync);
        }
        let mut out = WriteBatch::with_capacity(group.approximate_size());
        out.set_sequence(seq);
        let last = group.len().saturating_sub(1);
        let mut unpointed = self.unpointed.lock();
        for (i, op) in group.iter().enumerate() {
            let op = op.expect("validated batch");
            let end = if i == last { FLAG_GROUP_END } else { 0 };
            let (flags, separated) = match op.kind {
                Kind::Value if op.value.len() >= threshold => (KIND_PUT, true),
                Kind::Value => (KIND_PUT | FLAG_INLINE, false),
                Kind::Delete => (KIND_DELETE, false),
                Kind::ValuePointer => (KIND_RELOCATE, false),
            };
            let p = self.store.append(&Record {
                seq: seq + i as u64,
                flags: flags | end,
                key: op.key,
                value: op.value,
            })?;
            if separated {
                out.add_raw(Kind::ValuePointer, op.key, &p.encode());
            } else {
                out.add_raw(op.kind, op.key, op.value);
                *unpointed.active.entry(p.file).or_default() += u64::from(p.record_len);
            }
        }
        drop(unpointed);
        if sync {
            self.store.sync()?;
        }
        Ok(Some(out))
    }

    fn sync(&self) -> Result<()> {
        self.store.sync()
    }

    fn holds_values(&self) -> bool {
        true
    }

    /// No file to rotate: the new buffer's records start at the log's head
    /// (the leader appends, so none is in flight).
    fn rotate(&self, _current: JournalMark) -> Result<JournalMark> {
        let (file, offset) = self.store.head_position();
        let mut u = self.unpointed.lock();
        let done = std::mem::take(&mut u.active);
        u.switched.push_back(((file, offset), done));
        Ok(JournalMark::ValueLog(file, offset))
    }

    fn pending_garbage(&self) -> BTreeMap<u64, u64> {
        let u = self.unpointed.lock();
        let mut out = u.active.clone();
        for (_, bytes) in &u.switched {
            for (&f, &b) in bytes {
                *out.entry(f).or_default() += b;
            }
        }
        out
    }

    /// The replay start moves to `next`; the records before it that no
    /// entry points at become garbage in the same edit.
    fn replay_from(&self, next: JournalMark, edit: &mut VersionEdit) -> Option<u64> {
        if let JournalMark::ValueLog(file, offset) = next {
            edit.values.log.journal = Some((file, offset));
            let mut u = self.unpointed.lock();
            while u
                .switched
                .front()
                .is_some_and(|(end, _)| *end <= (file, offset))
            {
                let (_, bytes) = u.switched.pop_front().expect("front checked");
                edit.values.garbage.extend(bytes);
            }
        }
        None
    }
}
