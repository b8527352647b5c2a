//! The write-ahead journal: where a write group is made durable before it
//! enters the write buffer (`docs/design.md`, "Write path").
//!
//! [`Journal`] is the seam: the engine journal (`engine.rs`, a block-framed
//! log of write batches, `docs/format/journal.md`) is one implementation;
//! the value log as journal (WiscKey, FAST '16, §3.4.2, `value/log/journal.rs`) is
//! the other; a persistent write buffer (LightKV, ICDE) would be a
//! third. Its records are framed in the log file format (`crate::logfile`),
//! which the manifest uses too.

pub(crate) mod control;
pub(crate) mod engine;
pub(crate) mod replay;

pub(crate) use crate::logfile::{read_log, LogWriter};
pub(crate) use control::Control;

use std::collections::BTreeMap;

use crate::batch::WriteBatch;
use crate::error::Result;
use crate::version::VersionEdit;

/// Where a write buffer's records begin in the journal. Once every older
/// buffer is flushed, replay starts at its mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JournalMark {
    /// An engine journal file, by number (the manifest's log number).
    File(u64),
    /// A position in the value log: file and offset.
    ValueLog(u64, u64),
}

/// A write-ahead journal. The group-commit leader is the only writer, so
/// journal order is sequence order; `sync` may come from any thread.
pub(crate) trait Journal: Send + Sync {
    /// Journals a write group whose first operation has sequence `seq`,
    /// durably when `sync`. The write path decided what is separated
    /// (`policy::Separation::at_write`) and moved those values to the
    /// value store already, except where the journal is the value store
    /// (the value log as journal): there `separate` is that threshold, and
    /// the journal returns the batch with pointers in place of the values
    /// at or above it. `None`: the write buffer gets `group` itself.
    fn append(
        &self,
        group: &WriteBatch,
        seq: u64,
        sync: bool,
        separate: Option<usize>,
    ) -> Result<Option<WriteBatch>>;

    /// True when the journal stores values itself (the value log as
    /// journal): the write path leaves their separation to it.
    fn holds_values(&self) -> bool {
        false
    }

    /// Makes every appended group durable, with the values it points at.
    fn sync(&self) -> Result<()>;

    /// A clean close: makes everything durable and marks the journal
    /// complete, so that recovery takes damage in its last records for
    /// damage, not for a write a crash tore (`docs/design.md`, "Torn tails
    /// and damage"). Nothing is appended after it.
    fn close(&self) -> Result<()> {
        self.sync()
    }

    /// Starts the records of a new write buffer (the old one, marked
    /// `current`, was switched out); returns where they begin.
    fn rotate(&self, current: JournalMark) -> Result<JournalMark>;

    /// Records in `edit` that replay now starts at `next` (every buffer
    /// before it is flushed). Returns the manifest's new log number when
    /// the mark is one; `None` keeps it.
    fn replay_from(&self, next: JournalMark, edit: &mut VersionEdit) -> Option<u64>;

    /// For a checkpoint (`docs/design.md`, "Checkpoints"): the journal
    /// file being appended to and its length, once every group journaled
    /// before the call is handed to the file system (a reader of the file
    /// finds it). Older journal files are complete. `None` where the
    /// journal is the value store's files (the value log as journal).
    fn checkpoint_end(&self) -> Result<Option<(u64, u64)>> {
        Ok(None)
    }

    /// Journals below `log_number` hold only flushed writes: they need no
    /// sync and are about to be deleted.
    fn forget_below(&self, _log_number: u64) {}

    /// Value store bytes, per file, that the journal wrote and no index
    /// entry will point at, not yet counted in the manifest (they are, by
    /// the flush that makes them unnecessary for replay).
    fn pending_garbage(&self) -> BTreeMap<u64, u64> {
        BTreeMap::new()
    }
}
