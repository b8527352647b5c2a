//! The writer queue's slot (`docs/design.md`, "Write path"): what a writer,
//! a `flush` asking for a memtable switch, or a GC step's relocations hand
//! to the group's leader, and where the leader leaves the outcome.

use std::sync::atomic::AtomicBool;

use parking_lot::Mutex;

use crate::batch::WriteBatch;
use crate::error::Result;
use crate::gc::{Committed, Relocations};

/// One writer's place in the queue (`State::writers`).
pub(super) struct WriterSlot {
    /// Taken by the leader when the group is committed.
    pub(super) batch: Mutex<WriteBatch>,
    /// Size and sync flag, readable without taking the batch.
    pub(super) size: usize,
    pub(super) sync: bool,
    /// Left out of the journal (`Options::skip_journal_unless_synced`, where the
    /// engine honours it): a group holds only writers alike in this.
    pub(super) unjournaled: bool,
    /// Switch the memtable (for `flush`); carries no batch.
    pub(super) force_switch: bool,
    /// GC relocations, committed as a group of their own.
    pub(super) relocations: Option<Relocations>,
    /// What committing the relocations did.
    pub(super) committed: Mutex<Committed>,
    pub(super) done: Mutex<Option<Result<()>>>,
    /// Set, under the state lock, when `done` is filled or the slot comes
    /// to the front of the queue: what a waiting writer spins on before it
    /// sleeps (`Core::enqueue`).
    pub(super) ready: AtomicBool,
}
