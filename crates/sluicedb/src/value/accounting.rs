//! A layout's space accounting: how the garbage and pointer counts a
//! flush or compaction finds reach the edit that installs it, and where a
//! record lives once GC moved it (`docs/design.md`, "Space accounting").

use parking_lot::MutexGuard;

use super::meta::ValueEdit;
use crate::error::Result;
use crate::pointer::ValuePointer;
use crate::version::{Version, VersionEdit};

/// The accounting part of a value store layout. Every method has the
/// answer of a layout whose files hold records in place and count garbage
/// at once (the log); a layout that moves records without rewriting
/// pointers, or defers counts to its GC steps, says so here.
pub(crate) trait ValueAccounting {
    /// Adds what the layout's state needs to an edit about to be installed.
    fn before_install(&self, _base: &Version, _edit: &mut VersionEdit) {}

    /// After an edit is installed: the files [`ValueAccounting::before_install`]
    /// removed from it because no pointer names them any more. The caller
    /// deletes them once no registered reader is older than the edit.
    fn take_unreferenced(&self) -> Vec<u64> {
        Vec::new()
    }

    /// After an edit is installed, under the state lock: the layout learns
    /// what it holds beside the counts (the table layout, where the records
    /// counted as garbage are).
    fn installed(&self, _edit: &ValueEdit) {}

    /// A flush or compaction dropped a version of `key` that the version
    /// at `shadow` hides from every reader (the table layout's DropCache,
    /// Scavenger, VLDB, §3.4.1).
    fn note_dropped(&self, _key: &[u8], _shadow: u64) {}

    /// True when a job may add the record `p` points at to its file's
    /// garbage as it drops the pointer; false defers it to
    /// [`ValueAccounting::settle_job`] (a table layout file GC is collecting or
    /// collected: the record may have moved). `shadow_in_tables`: the
    /// version that makes it garbage is in an installed table (a
    /// compaction's), not in the memtable a flush writes.
    fn counts_at_once(&self, _p: &ValuePointer, _shadow_in_tables: bool) -> bool {
        true
    }

    /// Puts a job's garbage and pointer counts into the edit that installs
    /// it. The returned guard, when there is one, is held until that edit
    /// is installed: no GC step installs in between, so the files the
    /// garbage was attributed to are still the ones holding the records.
    fn settle_job(
        &self,
        tally: &mut ValueTally,
        edit: &mut ValueEdit,
    ) -> Result<Option<MutexGuard<'_, ()>>> {
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
/// [`ValueAccounting::settle_job`]. The value store's bookkeeping, carried by the
/// job (`compaction::JobStats::values`).
#[derive(Debug, Default, Clone)]
pub(crate) struct ValueTally {
    /// Bytes of value records whose pointers were dropped, per file.
    pub(crate) garbage: std::collections::BTreeMap<u64, u64>,
    /// Dropped pointers whose garbage the value store attributes when the
    /// job installs ([`ValueAccounting::counts_at_once`]).
    pub(crate) deferred: Vec<Dropped>,
    /// Change in the pointer entries naming each value file, when the
    /// store counts them ([`GcProfile::counts_refs`](super::GcProfile::counts_refs)).
    pub(crate) refs: std::collections::BTreeMap<u64, i64>,
}

/// A pointer a job dropped whose garbage the store attributes when the job
/// installs ([`ValueAccounting::settle_job`]).
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
