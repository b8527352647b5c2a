//! The engine's GC driver (`crate::gc` lists its steps) and the one rule
//! of relocation (`docs/design.md`, "Garbage collection and relocation").
//!
//! A layout's victim is frozen, the barrier makes every write that appended
//! to it visible, the layout collects it in a view taken then, and its
//! relocations are submitted through the write path. There, as a group of
//! their own, each is applied only if the key's newest entry still points
//! at the old record, with a fresh sequence number. Then the journal is
//! synced, the layout's edit installed, and the files it frees deleted once
//! no registered reader is older than the relocations.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, MutexGuard};

use super::core::{Core, PendingFree, State};
use super::queue::WriterSlot;
use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::fs::IoClass;
use crate::gc::space::SpacePressure;
use crate::gc::{
    Collected, Committed, GcHost, GcTrigger, GcVictim, Newest, Relocation, Relocations, SeenView,
};
use crate::key::Kind;
use crate::memtable::{key_digest, DigestSet, Lookup, WriteBuffer, PARALLEL_RELOCATIONS};
use crate::parallel::in_parts;
use crate::pointer::ValuePointer;
use crate::policy::GcThrottle;
use crate::stats::{bump, GcStats};
use crate::super_version::SuperVersion;
use crate::version::{Version, VersionEdit};

/// Most GC steps one pipeline runs (`Core::gc_pipeline`); it holds
/// `gc_lock` throughout, which `Db::gc` and the space check wait for.
const MAX_OVERLAPPED_STEPS: usize = 16;

/// A GC step collected (steps 1-3) and not yet finished.
struct Collecting<V: ?Sized> {
    collected: Collected,
    seen: SeenView,
    victim: Box<V>,
    started: Instant,
}

/// How `commit_relocations` tells whether a key got a newer entry.
enum NewerCheck {
    /// Entries newer than GC's view are only in these memtables: those of
    /// now and of GC's view that hold an entry newer than the view.
    Memtables(Vec<Arc<dyn WriteBuffer>>),
    /// A full lookup.
    Lookup,
}

/// The distinct memtables of `views` holding an entry newer than `seq`
/// (those written before the view need no probe).
fn memtables_newer_than<'a>(
    views: impl IntoIterator<Item = &'a SuperVersion>,
    seq: u64,
) -> Vec<Arc<dyn WriteBuffer>> {
    let mut out: Vec<Arc<dyn WriteBuffer>> = Vec::new();
    for sv in views {
        for m in std::iter::once(&sv.mem).chain(&sv.imms) {
            if m.last_sequence() > seq && !out.iter().any(|o| Arc::ptr_eq(o, m)) {
                out.push(m.clone());
            }
        }
    }
    out
}

/// True if one of `memtables` holds an entry for `key` newer than `seq`.
fn newer_in_memtables(memtables: &[Arc<dyn WriteBuffer>], key: &[u8], seq: u64) -> bool {
    memtables
        .iter()
        .any(|m| m.newest_sequence(key).is_some_and(|s| s > seq))
}

impl Core {
    /// The view a GC step judges its records in: the visible sequence
    /// number with the super version and memtable counters of that moment.
    pub(super) fn gc_view(&self) -> SeenView {
        let st = self.state.lock();
        let visible = self.visible_seq.load(Ordering::Acquire);
        let durable = self
            .values
            .as_ref()
            .is_some_and(|v| v.gc_profile().judges_durable_only);
        SeenView {
            seq: if durable {
                visible.min(self.durable_seq.load(Ordering::Acquire))
            } else {
                visible
            },
            durable,
            sv: st.sv.clone(),
            switched: st.memtables_switched,
            flushed: st.memtables_flushed,
        }
    }

    /// What `key`'s newest entry at `seq` is (GC's validity check: its
    /// table reads count as GC's).
    fn newest_at(&self, sv: &SuperVersion, key: &[u8], seq: u64) -> Result<Newest> {
        Ok(match self.lookup(sv, key, seq, IoClass::Gc)? {
            Lookup::Found(Kind::ValuePointer, bytes, _) => {
                ValuePointer::decode(&bytes).map_or(Newest::Other, Newest::Pointer)
            }
            // Sequence 0: a shape that answered without reading the entry.
            Lookup::Found(Kind::Value, _, seq) if seq > 0 => Newest::Inline(seq),
            _ => Newest::Other,
        })
    }

    /// The pointer `key`'s newest entry at `seq` holds, if it is one.
    fn pointer_at(&self, sv: &SuperVersion, key: &[u8], seq: u64) -> Result<Option<ValuePointer>> {
        Ok(match self.newest_at(sv, key, seq)? {
            Newest::Pointer(p) => Some(p),
            _ => None,
        })
    }

    /// Applies relocations as the group-commit leader (no other write can
    /// interleave): keeps those whose key still points at the old record,
    /// journals them with fresh sequence numbers (unsynced: the caller
    /// syncs the journal before the old records' files go) and inserts
    /// them.
    ///
    /// GC saw the key's newest entry point at the old record, so it still
    /// does unless an entry newer than the view's `seq` was written since.
    /// Those entries went to the memtable active in GC's view or to later ones.
    /// While none of the later ones was flushed (flushes go in order), all
    /// of them are in the memtables of now or of GC's view (kept alive by
    /// `SeenView`), so the check is a memtable probe per key, in those
    /// memtables that hold an entry newer than `seq` (usually one): the
    /// common case, since a GC step is shorter than a memtable's life.
    /// Otherwise tables may hold such entries, and it is a full lookup.
    pub(super) fn commit_relocations(
        &self,
        st: &mut MutexGuard<'_, State>,
        relocations: &Relocations,
    ) -> Result<Committed> {
        let base = st.last_sequence;
        let sv = st.sv.clone();
        let check = match &relocations.seen {
            Some(v) if st.memtables_flushed == v.flushed => {
                NewerCheck::Memtables(memtables_newer_than([&*sv], v.seq))
            }
            Some(v) if st.memtables_flushed <= v.switched + 1 => {
                NewerCheck::Memtables(memtables_newer_than([&*sv, &*v.sv], v.seq))
            }
            _ => NewerCheck::Lookup,
        };
        let seen_seq = relocations.seen.as_ref().map_or(0, |v| v.seq);
        let mem: Arc<dyn WriteBuffer> = st.mem.clone();
        let r = MutexGuard::unlocked(st, || -> Result<Committed> {
            // The digests of the keys written since the view: a key not
            // among them needs no memtable search (`MemTable::key_log`).
            let written = match &check {
                NewerCheck::Memtables(memtables) => {
                    let mut set = DigestSet::default();
                    (memtables.iter())
                        .all(|m| m.digests_newer_than(seen_seq, &mut set))
                        .then_some(set)
                }
                NewerCheck::Lookup => None,
            };
            let still_live = |moves: &[Relocation]| -> Result<Vec<bool>> {
                moves
                    .iter()
                    .map(|r| {
                        Ok(match &check {
                            NewerCheck::Memtables(_)
                                if written
                                    .as_ref()
                                    .is_some_and(|w| !w.contains(&key_digest(&r.key))) =>
                            {
                                true
                            }
                            NewerCheck::Memtables(memtables) => {
                                !newer_in_memtables(memtables, &r.key, seen_seq)
                            }
                            NewerCheck::Lookup => {
                                self.pointer_at(&sv, &r.key, base)? == Some(r.old)
                            }
                        })
                    })
                    .collect()
            };
            // The writer queue waits for the checks: a large batch is checked
            // by this thread and one more, half each.
            let moves = &relocations.moves;
            let parts = if moves.len() < PARALLEL_RELOCATIONS {
                1
            } else {
                2
            };
            let mut live = Vec::with_capacity(moves.len());
            for half in in_parts(moves, parts, |half, _| still_live(half)) {
                live.extend(half?);
            }
            #[cfg(feature = "invariants")]
            self.check_relocations(moves, &live);
            let mut batch = WriteBatch::new();
            let mut dropped_copies = Vec::new();
            for (r, live) in moves.iter().zip(live) {
                if live {
                    batch.add_raw(Kind::ValuePointer, &r.key, &r.new.encode());
                } else {
                    dropped_copies.push((r.new.file, u64::from(r.new.record_len)));
                }
            }
            let applied = batch.len() as u64;
            if applied > 0 {
                batch.set_sequence(base + 1);
                // Not synced here, with writes held: the step syncs the
                // journal before it frees the files (`finish_gc_step`,
                // step 5), and a crash before that keeps them.
                let t = Instant::now();
                let logged = self.log_group(&batch, base + 1, false)?;
                bump(
                    &self.counters.gc_commit_journal_micros,
                    t.elapsed().as_micros() as u64,
                );
                let counted = self
                    .values
                    .as_ref()
                    .is_some_and(|v| v.gc_profile().frees_whole);
                mem.insert_relocations(logged.as_ref().unwrap_or(&batch), base + 1, counted);
            }
            Ok(Committed {
                applied,
                dropped_copies,
            })
        });
        match &r {
            Ok(c) => {
                st.last_sequence += c.applied;
                self.visible_seq.store(st.last_sequence, Ordering::Release);
                bump(&self.counters.relocations_applied, c.applied);
                bump(
                    &self.counters.relocations_dropped,
                    c.dropped_copies.len() as u64,
                );
            }
            Err(e) => {
                st.poisoned
                    .get_or_insert_with(|| format!("relocation commit failed: {e}"));
            }
        }
        r
    }

    /// Relocation commits (feature `invariants`): every copy a commit
    /// is about to point the index at is the record it replaces, byte for
    /// byte (same key, sequence and value), read back through the store's
    /// checked reads. A read that fails for an injected I/O error says
    /// nothing and is skipped; damage in a copy GC just wrote is a bug.
    #[cfg(feature = "invariants")]
    fn check_relocations(&self, moves: &[Relocation], live: &[bool]) {
        let Some(store) = &self.values else {
            return;
        };
        let damaged = |e: &Error| matches!(e, Error::Corruption { .. });
        for (r, _) in moves.iter().zip(live).filter(|(_, live)| **live) {
            let new = store.read(&r.new, &r.key, IoClass::Gc);
            if let Err(e) = &new {
                assert!(
                    !damaged(e),
                    "invariants: a relocation's copy of {:?} reads as {e}",
                    r.key
                );
                continue;
            }
            let old = store.read_or_collected(&r.old, &r.key, IoClass::Gc);
            let (Ok(new), Ok(crate::value::Read::Found(old))) = (new, old) else {
                continue;
            };
            assert!(
                new.seq == old.seq && new.value == old.value,
                "invariants: a relocation of {:?} copies sequence {} to a record of sequence {} \
                 or another value",
                r.key,
                old.seq,
                new.seq
            );
        }
    }

    pub(super) fn sync_journal(&self) -> Result<()> {
        // Every visible version was appended before the sync.
        let visible = self.visible_seq.load(Ordering::Acquire);
        let r = self.journal().and_then(|j| j.sync());
        if r.is_ok() {
            self.raise_durable(visible);
            // `Db::sync`'s and GC's syncs count with the synced writes'.
            bump(&self.counters.journal_syncs, 1);
        }
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
    /// barrier also waits for a flush in progress (unless the layout's GC
    /// takes such records for live by their version,
    /// `GcProfile::waits_for_flushes`), and for merges that separate
    /// values (`Core::merge_appends`).
    pub(super) fn publish_barrier(&self) -> Result<()> {
        self.submit_relocations(Relocations {
            moves: Vec::new(),
            seen: None,
        })?;
        if self
            .values
            .as_ref()
            .is_some_and(|v| v.gc_profile().waits_for_flushes)
        {
            drop(self.flush_appends.lock());
        }
        // And for a merge separating values into the shared heads (the
        // unified shape over the log layout): the race test found a merge
        // installing pointers into records GC had judged dead.
        drop(self.merge_appends.write());
        Ok(())
    }

    /// Commits relocations as a write group of their own; returns what was
    /// applied and dropped (an empty set just passes through the queue).
    ///
    /// Sorted by key first, on GC's thread: the commit inserts them into
    /// the memtable with the writer queue held, and a skiplist insert in
    /// key order finds the nodes of the one before it in cache (in the log
    /// layout's order, random keys, the inserts were a sixth of the wisckey
    /// preset's CPU on the update benchmark).
    pub(super) fn submit_relocations(&self, mut relocations: Relocations) -> Result<Committed> {
        // Stable: a key moved twice keeps its order (a step moves a key once).
        relocations.moves.sort_by(|a, b| a.key.cmp(&b.key));
        self.enqueue(WriterSlot {
            size: 0,
            batch: Mutex::new(WriteBatch::new()),
            // Journaled unsynced (`commit_relocations`).
            sync: false,
            unjournaled: false,
            force_switch: false,
            committed: Mutex::new(Committed::default()),
            relocations: Some(relocations),
            done: Mutex::new(None),
            ready: Default::default(),
        })
    }

    /// True when the value store passed its capacity and GC can free
    /// some: writes wait for GC then.
    pub(super) fn log_over_capacity(&self, st: &State) -> bool {
        match (&self.values, self.opts.values.capacity_bytes) {
            (Some(store), Some(cap)) => store.gc_over_capacity(&st.current, cap),
            _ => false,
        }
    }

    /// True when background GC should run: the space limit's low ratio is
    /// passed and GC can reclaim space (Scavenger, VLDB, §3.5), or the layout's own
    /// triggers fire.
    pub(super) fn gc_wanted(&self, st: &State) -> bool {
        let Some(store) = self.values.as_ref().filter(|_| self.opts.gc.background) else {
            return false;
        };
        // Merges collect it (`Core::pick_gc_merge`).
        if store.merge_collection().is_some() {
            return false;
        }
        if self.space_pressure() != SpacePressure::Below && self.values_reclaimable(&st.current) {
            return true;
        }
        store.gc_wanted(&GcTrigger {
            current: &st.current,
            capacity_bytes: self.opts.values.capacity_bytes,
            garbage_ratio: self.opts.values.log.gc_garbage_ratio,
            interval_due: self.opts.gc.interval_ms.is_some_and(|ms| {
                st.jobs.last_gc.elapsed() >= std::time::Duration::from_millis(ms)
            }),
        })
    }

    /// The threads of a GC step; `None` with `gc_threads` 1.
    fn gc_threads(&self) -> Option<&rayon::ThreadPool> {
        let n = self.opts.values.hash.gc_threads;
        (n > 1).then(|| {
            self.gc_pool.get_or_init(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .thread_name(|i| format!("sluice-gc-{i}"))
                    .build()
                    .expect("GC threads start")
            })
        })
    }

    /// One GC step of the value store's layout; `Ok(None)` when it has
    /// nothing to collect. Also returns how many files the step freed.
    pub(super) fn gc_once(&self) -> Result<Option<(GcStats, usize)>> {
        let Some(store) = &self.values else {
            return Ok(None);
        };
        let _one = self.gc_lock.lock();
        match self.collect_step(|| store.gc_victim(self))? {
            Some(step) => self.finish_step(step).map(Some),
            None => Ok(None),
        }
    }

    /// GC steps under the space limit's pressure, each frozen and collected
    /// while the one before is being finished on a second thread (its
    /// relocations committed, the journal synced, its edit installed, its
    /// files deleted), for layouts that keep the two apart
    /// (`GcProfile::overlaps_steps`). Up to [`MAX_OVERLAPPED_STEPS`],
    /// while `Core::gc_pressure_persists_after` says so. Measured:
    /// finishing was about a third of a hash layout step, spent mostly
    /// waiting (the writer queue, syncs), while the next step's reads and
    /// lookups waited for it.
    pub(super) fn gc_pipeline(&self) -> Result<()> {
        let Some(store) = &self.values else {
            return Ok(());
        };
        let _one = self.gc_lock.lock();
        let victim = || store.gc_victim_overlapping(self);
        let mut pending = self.collect_step(victim)?;
        let mut steps = 1;
        while let Some(done) = pending.take() {
            // Judged as if the step in flight had freed its files already:
            // otherwise each pipeline ran a step more than the limit asked
            // for, on victims with less garbage.
            let more = steps < MAX_OVERLAPPED_STEPS
                && self.gc_pressure_persists_after(done.collected.frees_bytes)
                && !self.shutting_down.load(Ordering::SeqCst)
                && self.state.lock().check_writable().is_ok();
            if !more {
                self.finish_step(done)?;
                break;
            }
            // On a thread that lives on, not a thread per step.
            let finisher = self.gc_finisher.get_or_init(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(1)
                    .thread_name(|_| "sluice-gc-finish".into())
                    .build()
                    .expect("the GC finishing thread starts")
            });
            let mut finished = None;
            let next = finisher.in_place_scope(|s| {
                s.spawn(|_| finished = Some(self.finish_step(done)));
                self.collect_step(victim)
            });
            let finished = finished.expect("the finishing job ran");
            finished?;
            pending = next?;
            if pending.is_some() {
                bump(&self.counters.gc_overlapped, 1);
            }
            steps += 1;
        }
        Ok(())
    }

    /// Steps 1-3 of a GC step (the caller holds `gc_lock`): the victim
    /// frozen, the barrier passed, its live records copied; `None` when
    /// there is nothing to collect.
    fn collect_step<V: GcVictim + ?Sized>(
        &self,
        freeze: impl FnOnce() -> Result<Option<Box<V>>>,
    ) -> Result<Option<Collecting<V>>> {
        let Some(store) = &self.values else {
            return Ok(None);
        };
        let started = Instant::now();
        self.delete_collected_files();
        // 1. The victim, frozen.
        let Some(mut victim) = freeze()? else {
            return Ok(None);
        };
        // 2. Writes that appended to it are visible from here on.
        if store.gc_profile().needs_barrier {
            self.publish_barrier()?;
        }
        let seen = self.gc_view();
        // The view is kept until the commit, which needs only its newer
        // memtables: trimmed before the collection when the layout looks
        // keys up through fresh views, else right after it.
        let fresh = store.gc_profile().looks_up_fresh;
        let seen = if fresh { seen.trimmed() } else { seen };
        // 3. Records judged (ahead, where the layout can), live records
        // copied, copies durable.
        let seen = if victim.judge(self, &seen)? {
            seen.tables_only()
        } else {
            seen
        };
        let collected = victim.collect(self, &seen)?;
        Ok(Some(Collecting {
            collected,
            seen: if fresh { seen } else { seen.trimmed() },
            victim,
            started,
        }))
    }

    /// Steps 4-7 of a collected step, then its pause under
    /// `GcOptions::max_bytes_per_sec` and its counters.
    fn finish_step<V: GcVictim + ?Sized>(&self, step: Collecting<V>) -> Result<(GcStats, usize)> {
        let Collecting {
            collected: c,
            seen,
            victim,
            started,
        } = step;
        let (bytes_read, bytes_written) = (c.bytes_read, c.bytes_written);
        let out = self.finish_gc_step(c, seen, || victim.installed())?;
        let throttle = GcThrottle {
            max_bytes_per_sec: self.opts.gc.max_bytes_per_sec,
        };
        if let Some(rest) = throttle.pause(bytes_read, started.elapsed()) {
            std::thread::sleep(rest);
        }
        bump(&self.counters.gc_runs, 1);
        bump(&self.counters.gc_bytes_read, bytes_read);
        bump(&self.counters.gc_bytes_written, bytes_written);
        Ok(out)
    }

    /// Steps 4-7 of a GC step, once the layout collected `c` in the view
    /// `seen`; `installed` runs right after the layout's edit is installed.
    /// Returns the step's statistics and how many files it freed.
    pub(super) fn finish_gc_step(
        &self,
        c: Collected,
        seen: SeenView,
        installed: impl FnOnce(),
    ) -> Result<(GcStats, usize)> {
        // 4. Relocations through the write path (and those the layout
        // committed itself).
        let live = c.moves.len() as u64 + c.committed.submitted();
        let durable = seen.durable;
        let mut committed = c.committed;
        // Copies durable before any index entry points at them.
        if c.copies_unsynced && !c.moves.is_empty() {
            let mut files: Vec<u64> = c.moves.iter().map(|m| m.new.file).collect();
            files.sort_unstable();
            files.dedup();
            if let Some(store) = &self.values {
                store.sync_files(&files)?;
            }
        }
        if !c.moves.is_empty() {
            committed.merge(self.submit_relocations(Relocations {
                moves: c.moves,
                seen: Some(seen),
            })?);
        }
        let mut edit = c.edit;
        // Copies no entry points at are garbage from the start (exact space
        // accounting: `docs/design.md`, "Space accounting").
        edit.values.garbage.extend(committed.dropped_copies);
        // 5. Every write that made a collected record dead is durable
        // before the record goes: replay may meet the dead record's pointer
        // and relies on a later journal entry to shadow it. A step that
        // judged in the durable view and committed nothing is so already.
        if !(durable && live == 0) {
            self.sync_journal()?;
        }
        // 6. The layout lets go of the records.
        let freed = c.frees.len();
        self.install(edit, None, &[], |_| {})?;
        installed();
        // 7. Their files go once no registered reader is older than the
        // barrier, taken only now that the layout no longer serves the
        // files as live. Readers at or above it see the relocations. A step
        // that committed none (nothing live, or a layout that moves records
        // without touching the index) has no new sequence number to wait
        // for: every reader registered until now may have chosen a record
        // in the files it frees, so the barrier is one past them. Taken
        // before the install, it let a reader that registered between the
        // two, above the barrier, locate a victim as live and then find it
        // deleted (table layout: its pointers name victims until pruned;
        // the model test hit it about once in 100 runs under load).
        if !c.frees.is_empty() || c.release_to.is_some() {
            let mut st = self.state.lock();
            let visible = self.visible_seq.load(Ordering::Acquire);
            st.jobs.pending_deletes.push(PendingFree {
                files: c.frees,
                release_to: c.release_to,
                barrier: visible + u64::from(committed.applied == 0),
            });
        }
        self.delete_collected_files();
        self.measure_space();
        self.state.lock().jobs.last_gc = Instant::now();
        let stats = GcStats {
            chunks: 1,
            bytes_read: c.bytes_read,
            records: c.records,
            live_records: live,
            relocations_applied: committed.applied,
            relocations_dropped: live - committed.applied,
        };
        Ok((stats, freed))
    }

    /// Collects until a file is freed (`Db::gc`): the log's oldest file,
    /// or one hash group.
    pub(super) fn gc_file(&self) -> Result<GcStats> {
        if self.opts.read_only {
            return Err(Error::ReadOnly);
        }
        let mut total = GcStats::default();
        let Some(store) = &self.values else {
            return Ok(total);
        };
        let current = self.state.lock().current.clone();
        if store.gc_needs_flush(&current) {
            self.flush()?;
        }
        loop {
            self.state.lock().check_writable()?;
            let Some((s, freed)) = self.gc_once()? else {
                break;
            };
            total.chunks += s.chunks;
            total.bytes_read += s.bytes_read;
            total.records += s.records;
            total.live_records += s.live_records;
            total.relocations_applied += s.relocations_applied;
            total.relocations_dropped += s.relocations_dropped;
            if freed > 0 {
                break;
            }
        }
        Ok(total)
    }

    /// Deletes value store files GC freed once every registered reader
    /// (snapshot or iterator) is at least as new as the relocations that
    /// moved their live records.
    pub(super) fn delete_collected_files(&self) {
        let Some(store) = &self.values else {
            return;
        };
        // A checkpoint is linking or copying files: they wait in
        // `pending_deletes` for the next call.
        let Some(_deleting) = self.file_deletion.try_read() else {
            return;
        };
        let (doomed, release) = {
            let mut st = self.state.lock();
            let oldest = st.snapshots.keys().next().copied().unwrap_or(u64::MAX);
            let mut doomed = Vec::new();
            let mut release = None;
            st.jobs.pending_deletes.retain(|free| {
                if oldest >= free.barrier {
                    doomed.extend(free.files.iter().copied());
                    release = release.max(free.release_to);
                    false
                } else {
                    true
                }
            });
            (doomed, release)
        };
        if !doomed.is_empty() {
            store.delete_collected(&doomed);
        }
        if let Some(to) = release {
            // A failed punch leaves the space allocated until the file goes.
            let _ = store.release_collected(to);
        }
    }
}

impl GcHost for Core {
    fn current(&self) -> Arc<Version> {
        self.state.lock().current.clone()
    }

    fn install(&self, edit: VersionEdit) -> Result<()> {
        Core::install(self, edit, None, &[], |_| {})
    }

    fn newest_of(&self, view: &SeenView, key: &[u8]) -> Result<Newest> {
        self.newest_at(&view.sv, key, view.seq)
    }

    fn fresh(&self, view: &SeenView) -> SeenView {
        SeenView {
            sv: self.super_version(),
            ..view.clone()
        }
    }

    fn relocate(&self, moves: Vec<Relocation>, view: &SeenView) -> Result<Committed> {
        self.submit_relocations(Relocations {
            moves,
            seen: Some(view.clone()),
        })
    }

    fn pool(&self) -> Option<&rayon::ThreadPool> {
        self.gc_threads()
    }

    fn under_space_pressure(&self) -> bool {
        self.space_pressure() != SpacePressure::Below
    }
}

#[cfg(test)]
mod tests;
