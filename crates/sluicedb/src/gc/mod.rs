//! Garbage collection of the value store: what every layout's GC shares
//! (`docs/design.md`, "Garbage collection and relocation").
//!
//! A layout decides *what* to collect and *how* to read it: WiscKey's log
//! collects a chunk at its tail (WiscKey, FAST '16, §3.3.2), HashKV a whole segment
//! group (HashKV, USENIX ATC '18, §3.3). It does so through two calls of its
//! [`ValueStore`](crate::value::ValueStore): `gc_victim` picks and freezes
//! what to collect (no append reaches it afterwards), and
//! [`GcVictim::collect`] reads it, keeps the records the index still points
//! at, copies them into the store and syncs the copies. The engine's one
//! driver (`db/gc.rs`) runs the steps every layout needs, in this order:
//!
//! 1. victim frozen (layout);
//! 2. publish barrier: every write that appended to the frozen records is
//!    visible, then the view the records are judged in is taken;
//! 3. collect (layout): live records copied, copies durable (or, with
//!    [`Collected::copies_unsynced`], synced by the driver before step 4);
//! 4. relocations committed through the write path under the one rule of
//!    relocation (applied only where the key still points at the old
//!    record, with a fresh sequence number); a layout whose copies go to
//!    new files lists them first and commits within step 3
//!    (`GcHost::relocate`);
//! 5. journal synced: every write that made a collected record dead is
//!    durable before the record goes (a layout whose GC moves records
//!    without the write path judges them in the durable view instead, and
//!    a step of it that commits no relocation skips the sync);
//! 6. the layout's edit installed (the records leave the manifest);
//! 7. the freed files deleted once no registered reader is older than the
//!    barrier taken after the layout stopped serving them as live.

pub(crate) mod drop_cache;
pub(crate) mod space;

use std::sync::Arc;

use crate::error::Result;
use crate::pointer::ValuePointer;
use crate::super_version::SuperVersion;
use crate::version::{Version, VersionEdit};

/// Moving `key`'s value from `old` to `new`.
#[derive(Debug, Clone)]
pub(crate) struct Relocation {
    pub(crate) key: Vec<u8>,
    pub(crate) old: ValuePointer,
    pub(crate) new: ValuePointer,
}

/// The relocations of one GC step and the view GC found them live in.
#[derive(Debug, Clone)]
pub(crate) struct Relocations {
    pub(crate) moves: Vec<Relocation>,
    /// The view GC saw each key's newest entry point at `old` in (`None`
    /// for the barrier's empty set).
    pub(crate) seen: Option<SeenView>,
}

/// The view a GC step judged its records in, kept until its relocations
/// are committed (the commit's check for newer entries relies on it).
#[derive(Clone)]
pub(crate) struct SeenView {
    /// The sequence number GC reads at.
    pub(crate) seq: u64,
    /// `seq` is at most the durable sequence (`Core::durable_seq`): every
    /// version the step judges by is durable, and a step that commits no
    /// relocation needs no journal sync (`GcProfile::judges_durable_only`).
    pub(crate) durable: bool,
    pub(crate) sv: Arc<SuperVersion>,
    /// Memtables switched and flushed when it was taken: its active
    /// memtable is the `switched + 1`-th to be flushed.
    pub(crate) switched: u64,
    pub(crate) flushed: u64,
}

impl SeenView {
    /// The view without its immutable memtables that hold nothing newer
    /// than `seq` (usually all of them), for the rest of a step once its
    /// lookups are done: only the relocation commit's check for newer
    /// entries uses it then. Kept, a memtable flushed meanwhile stays in
    /// memory, whole, until the commit (a step that no longer waits for
    /// flushes, and two steps in flight, ran the hashkv preset out of a
    /// 512 MiB memory cgroup).
    pub(crate) fn trimmed(self) -> SeenView {
        let seq = self.seq;
        let sv = Arc::new(SuperVersion {
            mem: self.sv.mem.clone(),
            imms: (self.sv.imms.iter())
                .filter(|m| m.last_sequence() > seq)
                .cloned()
                .collect(),
            current: self.sv.current.clone(),
        });
        SeenView { sv, ..self }
    }

    /// The view without any memtable, for the rest of a step whose victim
    /// was judged already and which commits no relocation through the
    /// write path ([`GcVictim::judge`]): nothing looks into the view's
    /// memtables again. Kept, the active memtable of the view's moment
    /// stays in memory until the step ends, flushed or not: a scavenger
    /// step of several seconds held a third 64 MiB memtable beside the two
    /// write buffers (4 KiB values, 1 GiB). Its sequence number stays: the
    /// step attributes garbage by it.
    pub(crate) fn tables_only(self) -> SeenView {
        let sv = Arc::new(SuperVersion {
            mem: Arc::new(crate::memtable::MemTable::new()),
            imms: Vec::new(),
            current: self.sv.current.clone(),
        });
        SeenView { sv, ..self }
    }
}

impl std::fmt::Debug for SeenView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeenView")
            .field("seq", &self.seq)
            .field("switched", &self.switched)
            .field("flushed", &self.flushed)
            .finish_non_exhaustive()
    }
}

/// What committing a step's relocations did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Committed {
    /// Relocations applied: the index points at the copies now.
    pub(crate) applied: u64,
    /// The copies of relocations dropped (the key changed meanwhile): no
    /// entry will ever point at them, so they are garbage from the start,
    /// as (file, bytes).
    pub(crate) dropped_copies: Vec<(u64, u64)>,
}

impl Committed {
    /// Relocations submitted: applied or dropped.
    pub(crate) fn submitted(&self) -> u64 {
        self.applied + self.dropped_copies.len() as u64
    }

    /// Adds what another commit of the same step did.
    pub(crate) fn merge(&mut self, other: Committed) {
        self.applied += other.applied;
        self.dropped_copies.extend(other.dropped_copies);
    }
}

/// What a layout's GC may ask of the engine.
pub(crate) trait GcHost: Sync {
    /// The current version (the layout's manifest state is in it).
    fn current(&self) -> Arc<Version>;

    /// Makes a layout edit durable in the manifest and installs it (a new
    /// head file is listed before anything is written to it).
    fn install(&self, edit: VersionEdit) -> Result<()>;

    /// What `key`'s newest entry in `view` is.
    fn newest_of(&self, view: &SeenView, key: &[u8]) -> Result<Newest>;

    /// `view` looked up through the memtables and tables of now, at its
    /// own sequence, for a layout whose relocations are all committed
    /// through the write path ([`crate::value::GcProfile::looks_up_fresh`]),
    /// so that a step does not keep a flushed memtable alive. Entries
    /// written since the view are above its sequence and unseen; a
    /// compaction since may have dropped a version the view saw, but only
    /// for a newer one written since, and the commit finds that one (its
    /// memtables, or a full lookup) and drops the relocation.
    fn fresh(&self, view: &SeenView) -> SeenView {
        view.clone()
    }

    /// The pointer `key`'s newest entry holds in `view`; `None` when that
    /// entry is an inline value, a deletion, or absent.
    fn pointer_of(&self, view: &SeenView, key: &[u8]) -> Result<Option<ValuePointer>> {
        Ok(match self.newest_of(view, key)? {
            Newest::Pointer(p) => Some(p),
            Newest::Inline(_) | Newest::Other => None,
        })
    }

    /// Commits relocations through the write path now, under the one rule
    /// of relocation, for a layout that must list its copies' files in the
    /// manifest before the index may point at them (the table layout with
    /// pointer write-back). The step must not hold the accounting lock:
    /// the commit may run a flush (`Core::help_background`).
    fn relocate(&self, moves: Vec<Relocation>, view: &SeenView) -> Result<Committed>;

    /// Threads for a step's parallel parts (`HashOptions::gc_threads`); `None`
    /// with one thread.
    fn pool(&self) -> Option<&rayon::ThreadPool>;

    /// True when space is at the space limit's low ratio or above
    /// (Scavenger, VLDB, §3.5): a layout may collect what it otherwise would not yet.
    fn under_space_pressure(&self) -> bool;
}

/// A key's newest entry in a GC step's view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Newest {
    /// A value pointer.
    Pointer(ValuePointer),
    /// A value held inline, written at this sequence number. With values
    /// separated at flush it may be a version in a memtable being flushed
    /// whose record the flush appended before the step froze its victim,
    /// while its pointer is not yet in the index: the record of that
    /// version is live (`GcProfile::waits_for_flushes`).
    Inline(u64),
    /// A deletion, or no entry.
    Other,
}

/// What starts background GC and makes writes wait for it.
pub(crate) struct GcTrigger<'a> {
    pub(crate) current: &'a Version,
    /// `ValueOptions::capacity_bytes`.
    pub(crate) capacity_bytes: Option<u64>,
    /// `LogOptions::gc_garbage_ratio`.
    pub(crate) garbage_ratio: Option<f64>,
    /// `GcOptions::interval_ms` passed since the last step ended.
    pub(crate) interval_due: bool,
}

/// A frozen victim: records no append reaches any more.
pub(crate) trait GcVictim {
    /// Judges the victim's records in `view` ahead of [`GcVictim::collect`],
    /// for a layout that can: true when it did and `collect` will look
    /// nothing up in the view's memtables, which the driver then lets go of
    /// (`SeenView::tables_only`) while the step reads and copies.
    fn judge(&mut self, _host: &dyn GcHost, _view: &SeenView) -> Result<bool> {
        Ok(false)
    }

    /// Reads the victim, keeps the records whose key still points at them
    /// in `view`, appends their copies to the store and syncs them (or
    /// leaves that to the driver: [`Collected::copies_unsynced`]).
    fn collect(&mut self, host: &dyn GcHost, view: &SeenView) -> Result<Collected>;

    /// Called once the step's edit is installed.
    fn installed(self: Box<Self>) {}
}

/// What one GC step read, moved and frees.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    pub(crate) moves: Vec<Relocation>,
    /// Relocations the layout committed itself (`GcHost::relocate`).
    pub(crate) committed: Committed,
    pub(crate) bytes_read: u64,
    pub(crate) records: u64,
    pub(crate) bytes_written: u64,
    /// The manifest edit that lets go of the collected records; installed
    /// after the relocations are committed and the journal is synced.
    pub(crate) edit: VersionEdit,
    /// Files the edit frees: deleted once no registered reader is older
    /// than the relocations.
    pub(crate) frees: Vec<u64>,
    /// Every record before this (file, offset) is collected: its space
    /// within the file is released at the same time as `frees`.
    pub(crate) release_to: Option<(u64, u64)>,
    /// Bytes of the files in `frees` (set by layouts whose steps overlap:
    /// the space the step will free, `Core::gc_pipeline`).
    pub(crate) frees_bytes: u64,
    /// The layout left the copies in `moves` unsynced: the driver syncs
    /// their files (`ValueStore::sync_files`) before the commit, on the
    /// thread that finishes the step, while the next step is collected.
    pub(crate) copies_unsynced: bool,
}
