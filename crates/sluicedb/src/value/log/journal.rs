//! The value log as the journal (seed 001 §3.4.2): every operation of a
//! write group is a value log record, the last one flagged as the group's
//! end, and there is no engine journal. Small values are logged inline;
//! recovery replays the log from the position the manifest records
//! (`docs/design.md`, "Value log as journal").

use std::sync::Arc;

use super::format::{Record, FLAG_GROUP_END, FLAG_INLINE, KIND_DELETE, KIND_PUT, KIND_RELOCATE};
use super::store::LogStore;
use crate::batch::WriteBatch;
use crate::error::Result;
use crate::journal::{Journal, JournalMark};
use crate::key::Kind;
use crate::value::ValueStore;
use crate::version::VersionEdit;

/// The value log, journaling whole write groups.
pub(crate) struct LogJournal {
    store: Arc<LogStore>,
    /// Values at least this large stay in the log and the index points at
    /// them; smaller ones are copied into the index too.
    separation_threshold_bytes: usize,
}

impl LogJournal {
    pub(crate) fn new(store: Arc<LogStore>, separation_threshold_bytes: Option<usize>) -> Self {
        LogJournal {
            store,
            separation_threshold_bytes: separation_threshold_bytes.unwrap_or(usize::MAX),
        }
    }

    /// Where the next write buffer's records begin: the log's head.
    pub(crate) fn head_mark(&self) -> JournalMark {
        let (file, offset) = self.store.head_position();
        JournalMark::ValueLog(file, offset)
    }
}

impl Journal for LogJournal {
    /// Appends every operation of the group; the batch for the memtable
    /// holds pointers for values at or above the threshold, and small
    /// values, deletes and relocations as they are.
    fn append(&self, group: &WriteBatch, seq: u64, sync: bool) -> Result<Option<WriteBatch>> {
        let threshold = self.separation_threshold_bytes;
        let mut out = WriteBatch::with_capacity(group.approximate_size());
        out.set_sequence(seq);
        let last = group.len().saturating_sub(1);
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
            }
        }
        if sync {
            self.store.sync()?;
        }
        Ok(Some(out))
    }

    fn sync(&self) -> Result<()> {
        self.store.sync()
    }

    /// No file to rotate: the new buffer's records start at the log's head
    /// (the leader appends, so none is in flight).
    fn rotate(&self, _current: JournalMark) -> Result<JournalMark> {
        Ok(self.head_mark())
    }

    fn replay_from(&self, next: JournalMark, edit: &mut VersionEdit) -> Option<u64> {
        if let JournalMark::ValueLog(file, offset) = next {
            edit.values.log.journal = Some((file, offset));
        }
        None
    }
}
