//! A layout's garbage collection, as the engine's GC driver
//! (`db/gc.rs`) and jobs see it: the layout picks and collects victims
//! (`crate::gc::GcVictim`), says when GC is wanted, and describes how its
//! steps must be run with one value, [`GcProfile`]. Merge-time collection
//! (the unified shape over value tables) is an optional capability,
//! [`MergeCollection`] (`docs/design.md`, "Garbage collection").

use parking_lot::MutexGuard;

use super::accounting::{Dropped, ValueAccounting, ValueTally};
use super::meta::ValueEdit;
use crate::error::Result;
use crate::gc::{GcHost, GcTrigger, GcVictim};
use crate::version::Version;

/// How a layout's GC behaves, in one value: what the engine's GC driver
/// (`db/gc.rs`), the jobs and space control must do for it. Each layout
/// states its own ([`ValueGc::gc_profile`]); the engine asks nothing else
/// about the layout's quirks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GcProfile {
    /// A GC step must wait, before judging its victim, for the writes
    /// that appended to it to become visible (the publish barrier,
    /// `Core::publish_barrier`). A layout whose victims only hold records
    /// of installed flushes needs no wait.
    pub(crate) needs_barrier: bool,
    /// The publish barrier also waits for a flush in progress: with values
    /// separated at flush, the records a flush appended before the victim
    /// was frozen have no pointer in the index until its tables are
    /// installed. A layout whose GC takes such a record for live by its
    /// version ([`Newest::Inline`](crate::gc::Newest)) need not wait.
    pub(crate) waits_for_flushes: bool,
    /// A GC step may be frozen and collected while the previous one is
    /// still being finished (its relocations committed, its edit
    /// installed; `Core::gc_pipeline`): the layout keeps the victims of
    /// steps in flight, and the files their copies go to, from being
    /// another step's victim ([`ValueGc::gc_victim_overlapping`]).
    pub(crate) overlaps_steps: bool,
    /// The layout's `GcVictim::collect` looks keys up through views of the
    /// moment (`GcHost::fresh`), not through the view it is given: the
    /// driver may trim that view before the collection, so that a step
    /// keeps no memtable a flush finishes meanwhile.
    pub(crate) looks_up_fresh: bool,
    /// GC judges records in the durable view (`Core::durable_seq`) rather
    /// than the visible one: a layout whose GC commits no relocation
    /// through the write path, so that a record dead only by a version not
    /// yet durable is kept (copied, and counted as garbage once that
    /// version is flushed) and the step needs no journal sync. The others
    /// must sync their relocations anyway.
    pub(crate) judges_durable_only: bool,
    /// GC finds garbage by itself (it reads what it collects and keeps
    /// only what the index points at, choosing victims by writes since
    /// their last GC), rather than relying on the garbage flushes and
    /// compactions report. Space pressure then lets it run before that
    /// garbage is known.
    pub(crate) finds_garbage: bool,
    /// A GC step frees its victims whole and their garbage counts go with
    /// them: the version a relocation shadows needs no count, so
    /// relocations enter the memtable flagged as counted and their flush
    /// looks nothing up for them.
    pub(crate) frees_whole: bool,
    /// Jobs count the pointer entries naming each value file (the table
    /// layout prunes inheritance edges by them).
    pub(crate) counts_refs: bool,
}

/// The GC part of a value store layout.
pub(crate) trait ValueGc {
    /// How the engine must run this layout's GC steps.
    fn gc_profile(&self) -> GcProfile;

    /// The layout's merge-time collection, when the key index's merges
    /// collect its files (the unified shape over the table layout, UniKV
    /// (ICDE '20), §III-C): the store's own GC step never runs then;
    /// merges move the records of the files
    /// [`MergeCollection::freeze_merge_victims`] chose, and a file leaves
    /// the manifest once no pointer names it.
    fn merge_collection(&self) -> Option<&dyn MergeCollection> {
        None
    }

    /// Picks what the next GC step collects and freezes it (no append
    /// reaches it afterwards); `None` when there is nothing to collect.
    /// The engine's driver runs the step (`crate::gc`).
    fn gc_victim<'a>(&'a self, _host: &dyn GcHost) -> Result<Option<Box<dyn GcVictim + 'a>>> {
        Ok(None)
    }

    /// [`ValueGc::gc_victim`] of a layout whose steps overlap
    /// ([`GcProfile::overlaps_steps`]): a victim that can be finished
    /// on another thread.
    fn gc_victim_overlapping<'a>(
        &'a self,
        _host: &dyn GcHost,
    ) -> Result<Option<Box<dyn GcVictim + Send + 'a>>> {
        Ok(None)
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
}

/// Collection by the key index's merges: an optional capability of a
/// layout ([`ValueGc::merge_collection`]).
pub(crate) trait MergeCollection: ValueAccounting {
    /// Chooses and freezes the files a merge over user keys `lo..=hi`
    /// moves the records of: those whose key range meets it and whose
    /// garbage ratio calls for GC (a lower ratio under space pressure,
    /// Scavenger (VLDB), §3.5), the highest ratio first, until their garbage
    /// reaches `reclaim` bytes or their live bytes `budget` (one at
    /// least). `first`, a GC merge's target, comes first whatever its
    /// ratio: the merge was chosen to collect it. None when another job is
    /// between settling its garbage and installing (its garbage names
    /// files whose records this merge would move).
    #[allow(clippy::too_many_arguments)]
    fn freeze_merge_victims(
        &self,
        current: &Version,
        lo: &[u8],
        hi: &[u8],
        first: Option<u64>,
        pressure: bool,
        reclaim: u64,
        budget: u64,
    ) -> Vec<u64>;

    /// Files whose garbage ratio calls for GC and that no merge is
    /// collecting, with their key ranges, the most garbage bytes first:
    /// where a merge would reclaim the most space.
    fn merge_gc_targets(&self, current: &Version, pressure: bool) -> Vec<(u64, Vec<u8>, Vec<u8>)>;

    /// [`ValueAccounting::settle_job`] for a merge that moved the records of
    /// `victims`: garbage found in them while it ran (by this job or
    /// another) is attributed to the file `locate` says holds the record
    /// now (one of the merge's copies), or to the victim when the merge
    /// did not move it.
    fn settle_relocating_job(
        &self,
        victims: &[u64],
        tally: &mut ValueTally,
        edit: &mut ValueEdit,
        locate: &mut dyn FnMut(&Dropped) -> Result<Option<u64>>,
    ) -> Result<Option<MutexGuard<'_, ()>>>;

    /// A relocating merge installed or failed: its victims thaw.
    fn thaw(&self, victims: &[u64]);
}
