//! Value log garbage collection (seed 001 §3.3.2) and the one rule of
//! relocation (DESIGN.md; `docs/design.md`, "Value store").
//!
//! A GC step reads a chunk at the tail, keeps the records the index still
//! points at, copies them to the head (marked as GC copies, which replay
//! never applies), syncs the log, and submits the relocations through the
//! write path. There, as a group of its own, each is applied only if the
//! key's newest entry still points at the old record, with a fresh sequence
//! number. Then the tail advances in the manifest, and files behind it are
//! deleted once no registered reader is older than the relocations.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::{bump, Core, State, SuperVersion, WriterSlot};
use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::key::Kind;
use crate::memtable::{Lookup, WriteBuffer};
use crate::stats::GcStats;
use crate::value::log::format::{Record, FLAG_GC_COPY, KIND_PUT};
use crate::value::log::store::LogStore;
use crate::value::pointer::ValuePointer;
use crate::value::ValueStore;
use crate::version::VersionEdit;

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
/// are committed (see `commit_relocations`).
#[derive(Clone)]
pub(crate) struct SeenView {
    /// The sequence number GC reads at.
    pub(crate) seq: u64,
    pub(crate) sv: Arc<SuperVersion>,
    /// Memtables switched and flushed when it was taken: its active
    /// memtable is the `switched + 1`-th to be flushed.
    pub(crate) switched: u64,
    pub(crate) flushed: u64,
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

/// How `commit_relocations` tells whether a key got a newer entry.
enum NewerCheck {
    /// Entries newer than `seq` only in the memtables of now and of GC's
    /// view (`then`, when it holds memtables flushed since), which together
    /// hold every entry written since.
    Memtables {
        seq: u64,
        then: Option<Arc<SuperVersion>>,
    },
    /// A full lookup.
    Lookup,
}

/// True if a memtable of `sv` holds an entry for `key` newer than `seq`.
fn newer_in_memtables(sv: &SuperVersion, key: &[u8], seq: u64) -> bool {
    std::iter::once(&sv.mem)
        .chain(&sv.imms)
        .any(|m| m.newest_sequence(key).is_some_and(|s| s > seq))
}

/// Background GC runs once the log is within 1/this of its capacity.
const GC_HEADROOM_DIVISOR: u64 = 16;

impl Core {
    /// The view a GC step judges its records in: the visible sequence
    /// number with the super version and memtable counters of that moment.
    pub(super) fn gc_view(&self) -> SeenView {
        let st = self.state.lock();
        SeenView {
            seq: self.visible_seq.load(Ordering::Acquire),
            sv: st.sv.clone(),
            switched: st.memtables_switched,
            flushed: st.memtables_flushed,
        }
    }

    /// True if `key`'s newest entry at `seq` is a pointer to exactly `p`.
    fn points_at(&self, sv: &SuperVersion, key: &[u8], seq: u64, p: &ValuePointer) -> Result<bool> {
        Ok(match self.lookup(sv, key, seq)? {
            Lookup::Found(Kind::ValuePointer, bytes) => ValuePointer::decode(&bytes) == Some(*p),
            _ => false,
        })
    }

    /// Applies relocations as the group-commit leader (no other write can
    /// interleave): keeps those whose key still points at the old record,
    /// journals them with fresh sequence numbers (synced) and inserts them.
    ///
    /// GC saw the key's newest entry point at the old record, so it still
    /// does unless an entry newer than the view's `seq` was written since.
    /// Those entries went to the memtable active in GC's view or to later ones.
    /// While none of the later ones was flushed (flushes go in order), all
    /// of them are in the memtables of now or of GC's view (kept alive by
    /// `SeenView`), so the check is a memtable probe per key: the common
    /// case, since a GC step is shorter than a memtable's life. Otherwise
    /// tables may hold such entries, and it is a full lookup.
    pub(super) fn commit_relocations(
        &self,
        st: &mut MutexGuard<'_, State>,
        relocations: &Relocations,
    ) -> Result<u64> {
        let base = st.last_sequence;
        let sv = st.sv.clone();
        let check = match &relocations.seen {
            Some(v) if st.memtables_flushed == v.flushed => NewerCheck::Memtables {
                seq: v.seq,
                then: None,
            },
            Some(v) if st.memtables_flushed <= v.switched + 1 => NewerCheck::Memtables {
                seq: v.seq,
                then: Some(v.sv.clone()),
            },
            _ => NewerCheck::Lookup,
        };
        let mem: Arc<dyn WriteBuffer> = st.mem.clone();
        let r = MutexGuard::unlocked(st, || -> Result<u64> {
            let mut batch = WriteBatch::new();
            for r in &relocations.moves {
                let live = match &check {
                    NewerCheck::Memtables { seq, then } => {
                        !newer_in_memtables(&sv, &r.key, *seq)
                            && !then
                                .as_ref()
                                .is_some_and(|t| newer_in_memtables(t, &r.key, *seq))
                    }
                    NewerCheck::Lookup => self.points_at(&sv, &r.key, base, &r.old)?,
                };
                if live {
                    batch.add_raw(Kind::ValuePointer, &r.key, &r.new.encode());
                }
            }
            if batch.is_empty() {
                return Ok(0);
            }
            batch.set_sequence(base + 1);
            let logged = self.log_group(&batch, base + 1, true)?;
            mem.insert_batch(logged.as_ref().unwrap_or(&batch), base + 1);
            Ok(batch.len() as u64)
        });
        match &r {
            Ok(n) => {
                st.last_sequence += n;
                self.visible_seq.store(st.last_sequence, Ordering::Release);
                bump(&self.counters.relocations_applied, *n);
                bump(
                    &self.counters.relocations_dropped,
                    relocations.moves.len() as u64 - n,
                );
            }
            Err(e) => {
                st.poisoned
                    .get_or_insert_with(|| format!("relocation commit failed: {e}"));
            }
        }
        r
    }

    pub(super) fn sync_journal(&self) -> Result<()> {
        let r = self.journal().and_then(|j| j.sync());
        if let Err(e) = &r {
            self.state
                .lock()
                .poisoned
                .get_or_insert_with(|| format!("journal sync failed: {e}"));
        }
        r
    }

    /// Waits until every write that appended to the value store before this
    /// call is visible: it passes through the writer queue behind them. GC
    /// calls it between reading records and taking the view it judges them
    /// in; otherwise a record appended by a group still being committed
    /// would look dead and be collected (the hash GC race test found this).
    ///
    /// With separation at flush, a flush appends values too, and its
    /// pointers become visible only when its tables are installed: the
    /// barrier also waits for a flush in progress.
    pub(super) fn publish_barrier(&self) -> Result<()> {
        self.submit_relocations(Relocations {
            moves: Vec::new(),
            seen: None,
        })?;
        drop(self.flush_appends.lock());
        Ok(())
    }

    /// Commits relocations as a write group of their own; returns how many
    /// were applied (an empty set just passes through the queue).
    pub(super) fn submit_relocations(&self, relocations: Relocations) -> Result<u64> {
        let sync = !relocations.moves.is_empty();
        self.enqueue(WriterSlot {
            size: 0,
            batch: Mutex::new(WriteBatch::new()),
            sync,
            force_switch: false,
            relocated: AtomicU64::new(0),
            relocations: Some(relocations),
            done: Mutex::new(None),
        })
    }

    /// True when the value log passed its capacity and GC has a file it
    /// can collect: writes wait for GC then.
    pub(super) fn log_over_capacity(&self, st: &State) -> bool {
        if let Some(h) = self.hash_store() {
            return self.hash_over_capacity(h, st);
        }
        let (Some(store), Some(cap)) = (self.log_store(), self.opts.value_store_capacity_bytes)
        else {
            return false;
        };
        store.total_bytes() > cap && self.gc_start(store, st).is_some()
    }

    /// True when background GC should run: the known garbage reached the
    /// configured share of the value log, or the log outgrew its capacity.
    pub(super) fn gc_wanted(&self, st: &State) -> bool {
        if let Some(h) = self.hash_store() {
            return self.hash_gc_wanted(h, st);
        }
        let Some(store) = self.log_store() else {
            return false;
        };
        let total = store.total_bytes();
        let garbage: u64 = st.current.value_log.garbage.values().sum();
        let by_ratio = self
            .opts
            .gc_garbage_ratio
            .is_some_and(|r| total > 0 && garbage as f64 >= r * total as f64);
        // GC starts a little before the capacity, so that writes seldom
        // reach it and wait.
        let by_size = self
            .opts
            .value_store_capacity_bytes
            .is_some_and(|c| total > c - c / GC_HEADROOM_DIVISOR);
        let by_time = self
            .opts
            .gc_interval_ms
            .is_some_and(|ms| st.last_gc.elapsed() >= std::time::Duration::from_millis(ms));
        (by_ratio || by_size || by_time) && self.gc_start(store, st).is_some()
    }

    /// Where GC would start. When the value log is the journal, files from
    /// the replay start on are out of its reach: recovery reads them.
    fn gc_start(&self, store: &LogStore, st: &State) -> Option<(u64, u64)> {
        let meta = &st.current.value_log;
        store.gc_start(meta.tail, meta.journal_from.map(|j| j.0))
    }

    /// One GC step: one chunk from the tail. `Ok(None)` when there is
    /// nothing to collect (only the head file exists).
    pub(super) fn gc_once(&self) -> Result<Option<GcStats>> {
        if let Some(h) = self.hash_store() {
            return self.gc_group(h);
        }
        let Some(store) = self.log_store() else {
            return Ok(None);
        };
        let _one = self.gc_lock.lock();
        let started = std::time::Instant::now();
        self.delete_collected_files();
        let start = self.gc_start(store, &self.state.lock());
        let Some((file, offset)) = start else {
            return Ok(None);
        };
        let chunk = store.read_chunk(file, offset, self.opts.gc_chunk_bytes)?;
        self.publish_barrier()?;
        let seen = self.gc_view();
        let (seq, sv) = (seen.seq, &seen.sv);
        let mut relocations = Vec::new();
        let mut written = 0;
        for (p, rec) in &chunk.records {
            if !rec.may_be_live() || !self.points_at(sv, &rec.key, seq, p)? {
                continue;
            }
            let new = store.append(&Record {
                seq: rec.seq,
                flags: KIND_PUT | FLAG_GC_COPY,
                key: &rec.key,
                value: &rec.value,
            })?;
            written += u64::from(new.record_len);
            relocations.push(Relocation {
                key: rec.key.clone(),
                old: *p,
                new,
            });
        }
        // The copies are durable before any index entry points at them.
        store.sync()?;
        let applied = if relocations.is_empty() {
            0
        } else {
            self.submit_relocations(Relocations {
                moves: relocations.clone(),
                seen: Some(seen),
            })?
        };
        let barrier = self.visible_seq.load(Ordering::Acquire);
        // Every write that made a record of this chunk dead must be durable
        // before the tail moves past it: replay may meet the dead record's
        // pointer and relies on a later journal entry to shadow it.
        self.sync_journal()?;
        let edit = VersionEdit {
            value_log_tail: Some(chunk.next),
            ..VersionEdit::default()
        };
        let next_file = chunk.next.0;
        self.install(edit, None, &[], |st| {
            if next_file > file {
                st.pending_log_deletes.push((next_file, barrier));
            }
        })?;
        self.delete_collected_files();
        self.state.lock().last_gc = std::time::Instant::now();
        if let Some(rate) = self.opts.gc_max_bytes_per_sec {
            // Throttle: this step may take no less than bytes / rate.
            let floor = std::time::Duration::from_secs_f64(chunk.bytes as f64 / rate as f64);
            if let Some(rest) = floor.checked_sub(started.elapsed()) {
                std::thread::sleep(rest);
            }
        }
        bump(&self.counters.gc_runs, 1);
        bump(&self.counters.gc_bytes_read, chunk.bytes);
        bump(&self.counters.gc_bytes_written, written);
        Ok(Some(GcStats {
            chunks: 1,
            bytes_read: chunk.bytes,
            records: chunk.records.len() as u64,
            live_records: relocations.len() as u64,
            relocations_applied: applied,
            relocations_dropped: relocations.len() as u64 - applied,
        }))
    }

    /// Collects the whole oldest value log file (`Db::gc`).
    pub(super) fn gc_file(&self) -> Result<GcStats> {
        if self.opts.read_only {
            return Err(Error::ReadOnly);
        }
        let mut total = GcStats::default();
        if let Some(h) = self.hash_store() {
            // One segment group: the greedy victim.
            return Ok(self.gc_group(h)?.unwrap_or_default());
        }
        let Some(store) = self.log_store() else {
            return Ok(total);
        };
        // With the value log as the journal, files the replay start has not
        // passed cannot be collected: a flush moves it to the head.
        let blocked = {
            let st = self.state.lock();
            let meta = &st.current.value_log;
            store.gc_start(meta.tail, None).is_some() && self.gc_start(store, &st).is_none()
        };
        if blocked {
            self.flush()?;
        }
        let start = self.gc_start(store, &self.state.lock());
        let Some((file, _)) = start else {
            return Ok(total);
        };
        loop {
            self.state.lock().check_writable()?;
            let Some(s) = self.gc_once()? else { break };
            total.chunks += s.chunks;
            total.bytes_read += s.bytes_read;
            total.records += s.records;
            total.live_records += s.live_records;
            total.relocations_applied += s.relocations_applied;
            total.relocations_dropped += s.relocations_dropped;
            let tail = self.state.lock().current.value_log.tail;
            if tail.is_some_and(|t| t.0 > file) {
                break;
            }
        }
        Ok(total)
    }

    /// Deletes value store files GC collected (log files behind the tail,
    /// retired segment group files) once every registered reader (snapshot
    /// or iterator) is at least as new as the relocations that moved their
    /// live records.
    pub(super) fn delete_collected_files(&self) {
        if let Some(h) = self.hash_store() {
            self.delete_retired_segments(h);
            return;
        }
        let Some(store) = self.log_store() else {
            return;
        };
        let below = {
            let mut st = self.state.lock();
            let oldest = st.snapshots.keys().next().copied().unwrap_or(u64::MAX);
            let mut below = 0;
            st.pending_log_deletes.retain(|&(file, barrier)| {
                if oldest >= barrier {
                    below = below.max(file);
                    false
                } else {
                    true
                }
            });
            below
        };
        if below > 0 {
            // A failed delete leaves a file that the next open removes.
            let _ = store.delete_below(below);
        }
    }
}
