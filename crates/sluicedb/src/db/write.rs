//! The write path: writers queue, the leader commits a group (journal,
//! value separation, memtable), and memtables switch when full; writes
//! slow down or stall while background work is behind.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

use super::core::{Core, Immutable, State};
use super::delays::sleep_precisely;
use super::light::{Light, Versions};
use super::queue::WriterSlot;
use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::gc::space::{EarlySwitch, SpacePressure};
use crate::gc::Committed;
use crate::index::WritePressure;
use crate::stats::bump;
use crate::value;

/// How long a GC group waits in the writer queue before it checks for a
/// flush it could run itself (`Core::help_background`).
const GC_HELP_AFTER: Duration = Duration::from_millis(10);

/// The most 1 s slices a write waits at the space limit's high ratio.
const MAX_SPACE_WAIT_SLICES: usize = 10;

/// The longest delay a write gets between the space limit's low and high
/// ratios (in proportion to how far the ratio is toward high).
const MAX_SPACE_DELAY_MICROS: f64 = 250.0;

/// LightKV's high-water mark: once fewer than this share of the buffer's
/// segments (in percent) is free, each group links the fullest top leaf
/// if it holds a quarter of a leaf or of its share of the buffer (while no
/// unit waits: `LightBuffer::make_room_early`) and flush units go out. A
/// flushed leaf's segments come back once no other leaf names them.
/// Flushing from half full leaves the other half to write meanwhile (at a
/// quarter, writers waited for room for seconds at 4 KiB values:
/// `docs/experiments.md`, "LightKV's write path").
const LIGHT_FLUSH_FREE_PERCENT: u64 = 50;

/// LightKV's flush units handed out at once (each a copy of one leaf's
/// versions in memory).
const LIGHT_UNITS_IN_FLIGHT: usize = 8;

/// LightKV's flush units one flush writes together (`Core::run_flush`):
/// half of those in flight, so that the other half is handed out while
/// the batch is written and the flush thread always has its next batch.
pub(super) const LIGHT_UNITS_PER_FLUSH: usize = LIGHT_UNITS_IN_FLIGHT / 2;

/// How long a writer behind a group spins for its turn or its outcome
/// before it sleeps on the state's condition variable: a group of one
/// small write took 2-5 µs here (a journal `write` and a memtable insert),
/// a sleep and a wake-up a futex call on each side and the scheduler's
/// latency, during which a server's runtime thread serves none of its
/// connections.
const WRITER_SPIN: Duration = Duration::from_micros(20);

/// Spins until `ready` is set or [`WRITER_SPIN`] passed; true when set.
/// With one CPU the group ahead cannot run while this one spins.
fn spin_until_ready(ready: &std::sync::atomic::AtomicBool) -> bool {
    if ready.load(Ordering::Acquire) {
        return true;
    }
    if crate::parallel::cpus() < 2 {
        return false;
    }
    let start = Instant::now();
    loop {
        for _ in 0..64 {
            if ready.load(Ordering::Acquire) {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= WRITER_SPIN {
            return false;
        }
    }
}

impl Core {
    /// Separates the group's values the policy picks at write time
    /// (`policy::Separation::at_write`, the one place that decides it for
    /// writes) and journals the group (synced when `sync`); returns the
    /// batch for the memtable when it differs from the group (pointers in
    /// place of separated values).
    pub(super) fn log_group(
        &self,
        group: &WriteBatch,
        seq: u64,
        sync: bool,
    ) -> Result<Option<WriteBatch>> {
        let journal = self.journal()?;
        let threshold = self.separation.at_write();
        let separated = match (&self.values, threshold) {
            (Some(store), Some(t)) if !journal.holds_values() => {
                value::separate(store.as_ref(), t, group, seq)?
            }
            _ => None,
        };
        let record = separated.as_ref().unwrap_or(group);
        let out = journal.append(record, seq, sync, threshold)?.or(separated);
        if sync {
            bump(&self.counters.journal_syncs, 1);
            // A sync covers every record appended before it.
            let last = seq + (group.len() as u64).saturating_sub(1);
            self.raise_durable(last);
        }
        Ok(out)
    }

    /// Whether this engine leaves writes out of the journal when asked
    /// (`Options::skip_journal_unless_synced`): only where losing an unflushed
    /// write loses nothing else. The memtable must hold the values whole
    /// (no separation at write, no value log as journal, no LightKV
    /// buffer), so that no value store record, nor a GC relocation of one,
    /// outlives a lost write; and GC must judge records in the durable
    /// view (`Core::raise_durable` keeps it below such writes), so that
    /// no record goes whose only newer version is an unflushed one.
    fn honours_skip_journal(&self) -> bool {
        self.light.get().is_none()
            && self.separation.at_write().is_none()
            && self.journal().is_ok_and(|j| !j.holds_values())
            && self
                .values
                .as_ref()
                .is_none_or(|v| v.gc_profile().judges_durable_only)
    }

    /// Records that every version up to `seq` is in a synced journal,
    /// below the first unflushed unjournaled write: those are durable only
    /// once flushed (a flush's install raises `durable_seq` itself).
    pub(super) fn raise_durable(&self, seq: u64) {
        let floor = self.unjournaled_floor.load(Ordering::Acquire);
        self.durable_seq
            .fetch_max(seq.min(floor.saturating_sub(1)), Ordering::AcqRel);
    }

    // ---- write path ----

    /// Holds a writer back while space is short, before it queues up: GC's
    /// relocations go through the queue and must never wait behind a
    /// writer waiting for them. Waits are bounded (1 s), so a store of all
    /// live data cannot stop writes for good.
    ///
    /// - Over `value_store_capacity_bytes` while GC can free some: waits.
    /// - Space amplification between the space limit's low and high ratios:
    ///   a delay in proportion, up to [`MAX_SPACE_DELAY_MICROS`] a write
    ///   (Scavenger, VLDB, §3.5 slows writes there), owed until the delays add up
    ///   to a lump and then slept by one write (what it oversleeps credited
    ///   to the next; the lump follows the rate of delays, `db::delays`).
    /// - At the high ratio while GC can reclaim space: waits. When it
    ///   cannot (too little garbage, or no victim), writes go on and
    ///   `Stats::space.space_limit_note` says why.
    pub(super) fn wait_for_space(&self) {
        self.wait_for_capacity();
        let pressure = match self.space_pressure() {
            // Inline garbage alone: merges reclaim it, a table or more at a
            // time, while writes go on at the slowest delay rather than
            // wait for each (under a memory cap a 1 GiB tree's writes
            // waited 30-47 s a phase for merges, and ran at a fifth of the
            // speed; `docs/experiments.md`, "The space limit over a
            // leveled tree's inline garbage"). Between the ratios they
            // are not delayed at all: the merges picked from the low ratio
            // run at their own pace, and the delays only took time from
            // the writes ("No delays between the ratios over inline
            // garbage"; a phase may end a little over high).
            // (Merges for space that take one partition are short: writes
            // wait for them as for GC, `IndexShape::merges_for_space_by_partition`.)
            SpacePressure::High
                if !self.limit_acts_on_values() && !self.shape.merges_for_space_by_partition() =>
            {
                SpacePressure::Between(1.0)
            }
            SpacePressure::Between(_) if !self.limit_acts_on_values() => SpacePressure::Below,
            p => p,
        };
        match pressure {
            SpacePressure::Below => {}
            SpacePressure::Between(f) => {
                let delay = Duration::from_nanos((f * MAX_SPACE_DELAY_MICROS * 1000.0) as u64);
                let ops = self.counters.user_ops.load(Ordering::Relaxed);
                let Some(owed) = self.space_delays.ask(delay, ops) else {
                    return;
                };
                // GC takes priority: wake the background work to run it.
                self.bg_cv.notify_one();
                let slept = sleep_precisely(owed);
                self.space_delays.slept(owed, slept);
                let us = slept.as_micros() as u64;
                bump(&self.counters.slowdowns, 1);
                bump(&self.counters.stall_micros, us);
                bump(&self.counters.stall_space_micros, us);
            }
            SpacePressure::High => {
                self.flush_for_gc();
                self.wait_for_space_limit();
            }
        }
    }

    /// With the value log as the journal, GC cannot collect files from the
    /// replay start on, and a memtable of pointers may take the whole store
    /// to fill: at the space limit, a flush moves the replay start to the
    /// head so that GC can reach the files (below it, writes take no lock
    /// here). A flush already under way does.
    fn flush_for_gc(&self) {
        let Some(store) = &self.values else {
            return;
        };
        let (needed, flushing) = {
            let st = self.state.lock();
            (store.gc_needs_flush(&st.current), !st.imms.is_empty())
        };
        if needed && !flushing {
            // An error here is the database's (poisoned or closed): the
            // write that follows reports it.
            let _ = self.flush();
        }
    }

    /// At the high ratio writes pause (Scavenger, VLDB, §3.5) while GC makes
    /// progress: in slices of at most 1 s, for as long as each slice brought
    /// the ratio down, finished a GC step, or ended with one still running
    /// (on a busy machine a step can outlast a slice, and the ratio is
    /// measured only between steps), up to [`MAX_SPACE_WAIT_SLICES`].
    /// When GC cannot reclaim or stops gaining, writes go on
    /// (`measure_space` notes why). (A slice that saw a step end and the
    /// next not yet begun counted as no progress: on a starved machine
    /// writes went on past the high ratio, issue 50.)
    fn wait_for_space_limit(&self) {
        let mut st = self.state.lock();
        for _ in 0..MAX_SPACE_WAIT_SLICES {
            let before = self.space_ratio();
            let steps_before = self.counters.gc_runs.load(Ordering::Relaxed);
            self.wait_for_gc(
                &mut st,
                |st| {
                    self.space_pressure() == SpacePressure::High
                        && self.space_reclaimable(&st.current)
                },
                &self.counters.stall_space_micros,
            );
            let still_high = self.space_pressure() == SpacePressure::High;
            // A merge for space that takes a partition is under way, or
            // one ended (the ratio is measured after it): as a GC step.
            let merging =
                self.shape.merges_for_space_by_partition() && st.jobs.compactions_running > 0;
            let gained = self.space_ratio() < before
                || st.jobs.gc_running
                || merging
                || self.counters.gc_runs.load(Ordering::Relaxed) > steps_before;
            if !still_high || !gained || st.check_writable().is_err() {
                break;
            }
        }
    }

    /// Waits while the value store is over its capacity and GC can free
    /// some.
    fn wait_for_capacity(&self) {
        let (Some(store), Some(cap)) = (&self.values, self.opts.values.capacity_bytes) else {
            return;
        };
        // The common case, under capacity, takes no lock.
        if !store.is_full(cap) {
            return;
        }
        let mut st = self.state.lock();
        self.wait_for_gc(
            &mut st,
            |st| self.log_over_capacity(st),
            &self.counters.stall_store_micros,
        );
    }

    /// Waits, waking background GC, while `short(state)` holds, at most
    /// 1 s; counts the stall under `reason`.
    fn wait_for_gc(
        &self,
        st: &mut MutexGuard<'_, State>,
        short: impl Fn(&State) -> bool,
        reason: &AtomicU64,
    ) {
        let start = Instant::now();
        let mut stalled = false;
        while short(st) && st.check_writable().is_ok() && start.elapsed() < Duration::from_secs(1) {
            stalled = true;
            self.bg_cv.notify_all();
            self.cv.wait_for(st, Duration::from_millis(10));
        }
        if stalled {
            let us = start.elapsed().as_micros() as u64;
            bump(&self.counters.stalls, 1);
            bump(&self.counters.stall_micros, us);
            bump(reason, us);
        }
    }

    pub(super) fn write(&self, sync: bool, force_switch: bool, batch: WriteBatch) -> Result<()> {
        if self.opts.read_only {
            return Err(Error::ReadOnly);
        }
        if !force_switch {
            self.wait_for_space();
        }
        self.enqueue(WriterSlot {
            size: batch.approximate_size(),
            batch: Mutex::new(batch),
            sync,
            unjournaled: !sync
                && self.opts.skip_journal_unless_synced
                && self.honours_skip_journal(),
            force_switch,
            relocations: None,
            committed: Mutex::new(Committed::default()),
            done: Mutex::new(None),
            ready: Default::default(),
        })?;
        // The first value a flush will separate: GC's memory comes, before
        // the first memtable of the old size is full.
        self.fit_memory_if_separable_written();
        Ok(())
    }

    /// Queues a writer and waits until its group is committed; returns what
    /// committing its relocations did (for relocation slots).
    pub(super) fn enqueue(&self, slot: WriterSlot) -> Result<Committed> {
        let slot = Arc::new(slot);
        let mut st = self.state.lock();
        st.writers.push_back(slot.clone());
        let gc = slot.relocations.is_some();
        let mut spun = false;
        loop {
            if let Some(r) = slot.done.lock().take() {
                return r.map(|()| std::mem::take(&mut *slot.committed.lock()));
            }
            if st.writers.front().is_some_and(|w| Arc::ptr_eq(w, &slot)) {
                break;
            }
            if !spun && !gc {
                // The group ahead is most often a journal append and a
                // memtable insert, shorter than a sleep and a wake-up
                // (RocksDB's write thread spins likewise before it blocks,
                // `WriteThread::AwaitState`). Once; then the condition is
                // checked again under the lock, so no wake-up is lost.
                spun = true;
                MutexGuard::unlocked(&mut st, || spin_until_ready(&slot.ready));
                continue;
            }
            if gc {
                // The writer ahead may wait for a flush or compaction that
                // only this thread is free to run (`Core::help_background`).
                if self.cv.wait_for(&mut st, GC_HELP_AFTER).timed_out() {
                    self.help_background(&mut st);
                }
            } else {
                self.cv.wait(&mut st);
            }
        }
        // This writer leads a group.
        let result = self.lead_group(&mut st, &slot);
        if let Some(next) = st.writers.front() {
            next.ready.store(true, Ordering::Release);
        }
        self.cv.notify_all();
        result.map(|()| std::mem::take(&mut *slot.committed.lock()))
    }

    pub(super) fn lead_group(
        &self,
        st: &mut MutexGuard<'_, State>,
        leader: &Arc<WriterSlot>,
    ) -> Result<()> {
        if let Err(e) =
            self.make_room_for_write(st, leader.force_switch, leader.relocations.is_some())
        {
            st.writers.pop_front();
            return Err(e);
        }
        if leader.force_switch {
            st.writers.pop_front();
            return Ok(());
        }
        if let Some(relocations) = &leader.relocations {
            let t = Instant::now();
            let r = self.commit_relocations(st, relocations);
            bump(
                &self.counters.gc_commit_micros,
                t.elapsed().as_micros() as u64,
            );
            st.writers.pop_front();
            return r.map(|c| *leader.committed.lock() = c);
        }
        // The leader's own batch becomes the group (no copy when alone).
        let mut group = std::mem::take(&mut *leader.batch.lock());
        let mut members = 1usize;
        let mut sync = leader.sync;
        let limit = self.opts.max_write_group_bytes;
        for w in st.writers.iter().skip(1) {
            if w.force_switch
                || w.relocations.is_some()
                || (w.sync && !leader.sync)
                || w.unjournaled != leader.unjournaled
            {
                break;
            }
            if group.approximate_size() + w.size > limit {
                break;
            }
            group.append(&w.batch.lock());
            sync |= w.sync;
            members += 1;
        }
        let seq = st.last_sequence + 1;
        let count = group.len() as u64;
        group.set_sequence(seq);
        st.last_sequence += count;
        let unjournaled = leader.unjournaled;
        if unjournaled && st.mem_unjournaled_from.is_none() {
            // Before the sequence can be published: no journal sync that
            // follows raises the durable sequence past it.
            st.mem_unjournaled_from = Some(seq);
            self.unjournaled_floor
                .store(st.unjournaled_floor(), Ordering::Release);
        }
        let result = if let Some(light) = self.light.get().cloned() {
            self.light_append(st, &light, &group, seq, sync)
        } else {
            let mem = st.mem.clone();
            MutexGuard::unlocked(st, || {
                // Unjournaled: nothing is separated at write either
                // (`honours_skip_journal`).
                let logged = if unjournaled {
                    None
                } else {
                    self.log_group(&group, seq, sync)?
                };
                mem.insert_batch(logged.as_ref().unwrap_or(&group), seq);
                Ok(())
            })
        };
        match &result {
            Ok(()) => {
                self.visible_seq.store(seq + count - 1, Ordering::Release);
                let (bytes, largest) = group.user_bytes_and_largest_value();
                bump(&self.counters.user_bytes, bytes);
                // Once a value a flush will separate is written, the space
                // limit acts (`Core::space_limit_acting`).
                if self.separation.at_flush().is_some_and(|t| largest >= t) {
                    self.separable_written.store(true, Ordering::Relaxed);
                }
                bump(&self.counters.user_ops, count);
                bump(&self.counters.write_groups, 1);
            }
            Err(e) => {
                st.poisoned
                    .get_or_insert_with(|| format!("journal write failed: {e}"));
            }
        }
        for _ in 0..members {
            let w = st.writers.pop_front().expect("group member");
            if !Arc::ptr_eq(&w, leader) {
                *w.done.lock() = Some(result.clone());
                w.ready.store(true, Ordering::Release);
            }
        }
        result
    }

    /// Ensures the active memtable has room, switching it (and the journal)
    /// when full or when `force` asks; delays or stalls writes while
    /// background work is behind.
    ///
    /// A GC group (`gc`: relocations or the publish barrier) runs a pending
    /// flush or compaction itself rather than wait for one
    /// (`Core::help_background`).
    pub(super) fn make_room_for_write(
        &self,
        st: &mut MutexGuard<'_, State>,
        mut force: bool,
        gc: bool,
    ) -> Result<()> {
        if let Some(light) = self.light.get().cloned() {
            return self.light_room(st, &light, force);
        }
        let mut allow_delay = !force;
        loop {
            st.check_writable()?;
            // The shape says how far compaction is behind (L0 for leveled).
            let pressure = self.shape.write_pressure(&st.current);
            let stop = pressure == WritePressure::Stop;
            if allow_delay && pressure != WritePressure::None {
                self.slow_down_for_l0(st);
                allow_delay = false;
                continue;
            }
            if !force && !stop && st.mem.is_empty() {
                // A write always goes into an empty memtable: switching it
                // frees nothing, and a memtable that counted itself full
                // from the start (a key filter counted as its own, tried
                // 2026-11-27) was switched for ever with the write never in.
                return Ok(());
            }
            if !force && st.mem.approximate_memory_bytes() < self.sizes.write_buffer() {
                // Switching early never waits for compaction.
                match if stop {
                    EarlySwitch::No
                } else {
                    self.early_switch_due(st)
                } {
                    EarlySwitch::No => return Ok(()),
                    EarlySwitch::Switch => bump(&self.counters.discovery_flushes, 1),
                    EarlySwitch::WaitForFlush => {
                        self.stall_for_background(st, gc, &self.counters.stall_space_micros);
                        continue;
                    }
                }
            }
            if force && st.mem.is_empty() {
                return Ok(());
            }
            if st.imms.len() + 1 >= self.opts.max_write_buffers || stop {
                let reason = if stop {
                    &self.counters.stall_l0_micros
                } else {
                    &self.counters.stall_memtable_micros
                };
                self.stall_for_background(st, gc, reason);
                continue;
            }
            self.switch_memtable(st)?;
            force = false;
        }
    }

    /// A writer's one slowdown while the index's compaction is behind
    /// (its L0, for leveled): 1 ms with `state` released, counted as an L0
    /// stall. Each write takes at most one.
    fn slow_down_for_l0(&self, st: &mut MutexGuard<'_, State>) {
        let t = Instant::now();
        MutexGuard::unlocked(st, || std::thread::sleep(Duration::from_millis(1)));
        let us = t.elapsed().as_micros() as u64;
        bump(&self.counters.slowdowns, 1);
        bump(&self.counters.stall_micros, us);
        bump(&self.counters.stall_l0_micros, us);
    }

    /// LightKV's room for a group (`db/light.rs`): waits while the index
    /// is too far behind (its L0), links the top leaf holding the oldest
    /// operation past the high-water mark ([`LIGHT_FLUSH_FREE_PERCENT`];
    /// every top leaf when
    /// `force`, a full flush), and hands out the flush units that wait.
    fn light_room(
        &self,
        st: &mut MutexGuard<'_, State>,
        light: &Arc<Light>,
        force: bool,
    ) -> Result<()> {
        let mut allow_delay = !force;
        loop {
            st.check_writable()?;
            let pressure = match &st.light_pressure {
                Some((v, p)) if std::ptr::eq(v.as_ptr(), Arc::as_ptr(&st.current)) => *p,
                _ => {
                    let p = self.shape.write_pressure(&st.current);
                    st.light_pressure = Some((Arc::downgrade(&st.current), p));
                    p
                }
            };
            match pressure {
                WritePressure::Stop => {
                    self.stall_for_background(st, false, &self.counters.stall_l0_micros);
                    continue;
                }
                WritePressure::None => {}
                _ if allow_delay => {
                    self.slow_down_for_l0(st);
                    allow_delay = false;
                    continue;
                }
                _ => {}
            }
            break;
        }
        if force {
            light.link_all();
        } else {
            let (segments, free) = light.segments();
            if u64::from(free) * 100 < u64::from(segments) * LIGHT_FLUSH_FREE_PERCENT {
                light.make_room_early()?;
            }
        }
        self.light_hand_out(st, light);
        Ok(())
    }

    /// Hands out waiting flush units as immutable memtables, at most
    /// [`LIGHT_UNITS_IN_FLIGHT`] at once; returns how many.
    ///
    /// A unit here is its leaf only (`Light::hand_out_next`): its flush job
    /// reads the leaf's versions (`Light::unit`). Hand-outs take
    /// `Light::hand_outs`, without the engine's state lock (its lock order),
    /// one at a time, so that units are queued in the order they were
    /// taken.
    pub(super) fn light_hand_out(
        &self,
        st: &mut MutexGuard<'_, State>,
        light: &Arc<Light>,
    ) -> usize {
        if st.imms.len() >= LIGHT_UNITS_IN_FLIGHT || !light.unit_waiting() {
            return 0;
        }
        MutexGuard::unlocked(st, || {
            let _hand_outs = light.hand_outs.lock();
            // Only hand-outs, one at a time, add a unit: `imms` can only
            // shrink until this one queues its units.
            let room = LIGHT_UNITS_IN_FLIGHT.saturating_sub(self.state.lock().imms.len());
            let units: Vec<u32> = std::iter::from_fn(|| light.hand_out_next())
                .take(room)
                .collect();
            if !units.is_empty() {
                let mut st = self.state.lock();
                for &leaf in &units {
                    let mark = st.mem_mark;
                    st.imms.push_back(Immutable {
                        mem: Arc::new(Versions::waiting_unit()),
                        mark,
                        since: Instant::now(),
                        // Its flush syncs the buffer through the unit
                        // before listing its table (`Core::run_flush`).
                        last_seq: 0,
                        leaf: Some(leaf),
                        unjournaled_from: None,
                    });
                    st.memtables_switched += 1;
                }
                st.refresh_sv();
                self.bg_cv.notify_all();
            }
            units.len()
        })
    }

    /// Appends a group to LightKV's buffer; while it has no room, hands
    /// out flush units (linking the leaf holding the oldest operation when
    /// none waits) and waits for their flushes, which free segments.
    fn light_append(
        &self,
        st: &mut MutexGuard<'_, State>,
        light: &Arc<Light>,
        group: &WriteBatch,
        seq: u64,
        sync: bool,
    ) -> Result<()> {
        // Rounds in a row that found nothing to flush and no flush under way.
        let mut idle = 0;
        loop {
            if MutexGuard::unlocked(st, || light.append(group, seq, sync))? {
                if sync {
                    bump(&self.counters.journal_syncs, 1);
                    let last = seq + (group.len() as u64).saturating_sub(1);
                    self.durable_seq.fetch_max(last, Ordering::AcqRel);
                }
                return Ok(());
            }
            st.check_writable()?;
            let mut handed = self.light_hand_out(st, light);
            if handed == 0 && st.imms.is_empty() {
                light.make_room()?;
                handed = self.light_hand_out(st, light);
            }
            // A flushed unit's table may be installed (no longer among
            // `imms`) with its leaf not yet out of the buffer: its flush
            // job is about to free segments, and may have done so since
            // the append above, which is then tried again at once.
            if handed == 0 && st.imms.is_empty() && light.linked() == 0 {
                idle += 1;
                if idle > 1 {
                    return Err(Error::InvalidArgument(format!(
                        "a write group of {} operations does not fit the empty write buffer",
                        group.len()
                    )));
                }
                continue;
            }
            idle = 0;
            self.stall_for_background(st, false, &self.counters.stall_memtable_micros);
        }
    }

    /// Waits (up to 100 ms) for background work to make room, counting the
    /// stall under `reason`; a GC group runs pending work itself instead
    /// (`Core::help_background`).
    fn stall_for_background(&self, st: &mut MutexGuard<'_, State>, gc: bool, reason: &AtomicU64) {
        if gc && self.help_background(st) {
            return;
        }
        let t = Instant::now();
        bump(&self.counters.stalls, 1);
        self.bg_cv.notify_all();
        self.cv.wait_for(st, Duration::from_millis(100));
        let us = t.elapsed().as_micros() as u64;
        bump(&self.counters.stall_micros, us);
        bump(reason, us);
    }

    pub(super) fn switch_memtable(&self, st: &mut MutexGuard<'_, State>) -> Result<()> {
        let mark = match self.journal().and_then(|j| j.rotate(st.mem_mark)) {
            Ok(m) => m,
            Err(e) => {
                st.poisoned
                    .get_or_insert_with(|| format!("journal rotation failed: {e}"));
                return Err(e);
            }
        };
        let old = std::mem::replace(&mut st.mem, self.new_write_buffer());
        let old_mark = std::mem::replace(&mut st.mem_mark, mark);
        let last_seq = st.last_sequence;
        let unjournaled_from = st.mem_unjournaled_from.take();
        st.imms.push_back(Immutable {
            mem: old,
            mark: old_mark,
            since: Instant::now(),
            last_seq,
            leaf: None,
            unjournaled_from,
        });
        st.memtables_switched += 1;
        st.refresh_sv();
        self.bg_cv.notify_all();
        Ok(())
    }

    pub(super) fn flush(&self) -> Result<()> {
        self.write(false, true, WriteBatch::new())?;
        let mut st = self.state.lock();
        if let Some(light) = self.light.get() {
            // Every leaf was linked; units are handed out as others flush.
            while !st.imms.is_empty() || light.linked() > 0 {
                st.check_writable()?;
                self.bg_cv.notify_all();
                self.cv.wait_for(&mut st, Duration::from_millis(100));
            }
            return Ok(());
        }
        let target = st.memtables_switched;
        while st.memtables_flushed < target {
            st.check_writable()?;
            self.bg_cv.notify_all();
            self.cv.wait_for(&mut st, Duration::from_millis(100));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use crate::fs::MemFs;
    use crate::options::{Options, Preset};
    use crate::Db;

    /// A writer stalled on GC wakes the background loops only on its own
    /// timeouts (10 ms, for at most 1 s) and on jobs' ends, of which an
    /// idle database has none: so the loops look for work at most once per
    /// loop and wake-up, about a hundred times each. Until 2026-11-29 a
    /// parking loop woke the writer, which woke the loops again, thousands
    /// of looks a second for the whole stall (`docs/design.md`, "Background
    /// work", *Who wakes whom*). A slower machine only makes fewer looks.
    /// A database of one pair with its background work at rest: two
    /// loops and the hashkv preset's pressure GC thread.
    fn idle_db() -> Db {
        let o = Options::preset(Preset::HashKv)
            .fs(Arc::new(MemFs::new()))
            .background_threads(2);
        let db = Db::open("/db", o).unwrap();
        db.put(b"k", b"v").unwrap();
        db.wait_for_background().unwrap();
        db
    }

    /// Under the default memory budget (the write buffer plus the block
    /// cache), an immutable memtable takes its bytes out of the block
    /// cache's capacity from the switch until its flush is installed, and
    /// the cache has its full size again after (`docs/design.md`,
    /// "Memory").
    #[test]
    fn the_block_cache_gives_way_to_an_immutable_memtable_until_it_is_flushed() {
        let cache = 4 << 20;
        let o = Options::preset(Preset::LevelDb)
            .fs(Arc::new(MemFs::new()))
            .write_buffer_size_bytes(1 << 20)
            .block_cache_bytes(cache);
        let db = Db::open("/db", o).unwrap();
        for i in 0..500u32 {
            db.put(i.to_be_bytes(), [7u8; 1000]).unwrap();
        }
        let capacity = |db: &Db| db.stats().index.block_cache_capacity_bytes;
        assert_eq!(capacity(&db), cache as u64);
        let core = db.core();
        let mut st = core.state.lock();
        let held = st.mem.approximate_memory_bytes() as u64;
        assert!(held > 400_000, "{held} bytes in the memtable");
        // The flush cannot install while this thread holds the lock.
        core.switch_memtable(&mut st).unwrap();
        assert_eq!(st.block_cache.capacity_bytes(), cache as u64 - held);
        drop(st);
        db.flush().unwrap();
        assert_eq!(capacity(&db), cache as u64);
        // Off: the cache keeps its size.
        let o = Options::preset(Preset::LevelDb)
            .fs(Arc::new(MemFs::new()))
            .write_buffer_size_bytes(1 << 20)
            .block_cache_bytes(cache)
            .memory_budget_bytes(Some(usize::MAX));
        let db = Db::open("/db", o).unwrap();
        db.put(b"k", [7u8; 1000]).unwrap();
        let core = db.core();
        let mut st = core.state.lock();
        core.switch_memtable(&mut st).unwrap();
        assert_eq!(st.block_cache.capacity_bytes(), cache as u64);
    }

    /// A leveldb-preset database in memory with a `buffer`-byte write
    /// buffer and a `cache`-byte block cache, sharing the default budget.
    fn budget_db(cache: u64, buffer: usize) -> Db {
        let o = Options::preset(Preset::LevelDb)
            .fs(Arc::new(MemFs::new()))
            .write_buffer_size_bytes(buffer)
            .block_cache_bytes(cache as usize);
        Db::open("/db", o).unwrap()
    }

    #[test]
    fn a_flushed_memtables_blocks_pass_to_the_next_inside_the_budget() {
        let (cache, buffer) = (8u64 << 20, 4usize << 20);
        let db = budget_db(cache, buffer);
        let fill = |from: u32| {
            for i in from..from + 3000 {
                db.put(i.to_be_bytes(), [7u8; 1000]).unwrap();
            }
        };
        fill(0);
        let pooled = |db: &Db| db.stats().flush.memtable_pool_bytes;
        assert_eq!(pooled(&db), 0);
        db.flush().unwrap();
        // The flush job lets go of the memtable just after it installs.
        let start = std::time::Instant::now();
        while pooled(&db) == 0 && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let after_flush = pooled(&db);
        assert!(
            (1 << 20..=buffer as u64).contains(&after_flush),
            "{after_flush} bytes pooled"
        );
        // Inside the active memtable's charge (a whole write buffer, and it
        // is empty): the cache keeps its size. Before, it gave way to them
        // as to an immutable, and an idle database that had been written
        // kept its block cache at the floor.
        let capacity = |db: &Db| db.stats().index.block_cache_capacity_bytes;
        assert_eq!(capacity(&db), cache);
        // The next memtable takes the blocks back.
        fill(3000);
        let now = pooled(&db);
        assert!(
            now < after_flush,
            "{now} bytes pooled, {after_flush} before"
        );
        assert_eq!(capacity(&db), cache);
        for i in (0..6000u32).step_by(7) {
            assert_eq!(db.get(i.to_be_bytes()).unwrap().unwrap(), [7u8; 1000]);
        }
    }

    #[test]
    fn a_running_database_takes_a_new_memory_budget() {
        let (cache, buffer) = (8u64 << 20, 4usize << 20);
        let db = budget_db(cache, buffer);
        for i in 0..20_000u32 {
            db.put(i.to_be_bytes(), [7u8; 1000]).unwrap();
        }
        db.flush().unwrap();
        let capacity = |db: &Db| db.stats().index.block_cache_capacity_bytes;
        let usage = |db: &Db| db.stats().index.block_cache_bytes;
        let read_all = |db: &Db| {
            for i in 0..20_000u32 {
                assert_eq!(db.get(i.to_be_bytes()).unwrap().unwrap(), [7u8; 1000]);
            }
        };
        assert_eq!(capacity(&db), cache);
        // 36 MiB: the write buffer's 4 and a cache of 32, which the reads
        // fill past the 8 it was opened with.
        db.set_memory_budget(Some(36 << 20));
        assert_eq!(capacity(&db), 32 << 20);
        read_all(&db);
        assert!(usage(&db) > cache, "{} bytes cached", usage(&db));
        // Less than the write buffer: the least cache, evicted at once.
        db.set_memory_budget(Some(2 << 20));
        assert_eq!(capacity(&db), crate::db::MIN_CACHE_BYTES as u64);
        assert!(usage(&db) <= crate::db::MIN_CACHE_BYTES as u64);
        read_all(&db);
        // Back to the options it was opened with.
        db.set_memory_budget(None);
        assert_eq!(capacity(&db), cache);
    }

    /// Under a memory limit with no budget given, the default budget is
    /// fitted to the limit (`crate::memory`), and it holds at its worst:
    /// two full memtables, one of them waiting for its flush, beside the
    /// block cache at its floor. Before, the default budget (the write
    /// buffer plus the cache) could not: an 8 MiB write buffer beside an
    /// 8 MiB cache held 16 MiB of memtables and the cache's floor of 1 MiB
    /// in a budget of 16 MiB, whatever the limit. (5/8 of 24 MiB is 15:
    /// the write buffers shrink to 7 MiB.)
    #[test]
    fn two_full_memtables_and_the_cache_stay_within_a_budget_fitted_to_the_memory_limit() {
        let (buffer, cache, limit) = (8usize << 20, 8usize << 20, 24u64 << 20);
        let mut o = Options::preset(Preset::LevelDb)
            .fs(Arc::new(MemFs::new()))
            .write_buffer_size_bytes(buffer)
            .block_cache_bytes(cache);
        o.memory_limit = crate::memory::MemoryLimit::Given(Some(limit));
        let db = Db::open("/db", o).unwrap();
        let m = db.stats().memory;
        let budget = m.budget_bytes.unwrap();
        let fitted = m.write_buffer_bytes as usize;
        // Fills the active memtable up to one record short of its switch.
        let fill = move |db: &Db, from: u32| {
            let mut i = from;
            while db.core().state.lock().mem.approximate_memory_bytes() + (4 << 10) < fitted {
                db.put(i.to_be_bytes(), [7u8; 1000]).unwrap();
                i += 1;
            }
        };
        fill(&db, 0);
        // While the first memtable's flush is held, the next one fills.
        let held = Arc::new(AtomicU64::new(0));
        let (writer, seen) = (db.clone(), held.clone());
        *db.core().flush_hook.lock() = Some(Box::new(move |_: &super::super::core::Core| {
            fill(&writer, 1 << 20);
            let s = writer.stats();
            assert_eq!(s.flush.immutable_memtables, 1);
            seen.store(
                s.flush.memtable_bytes + s.index.block_cache_capacity_bytes,
                Ordering::Relaxed,
            );
        }));
        db.flush().unwrap();
        let held = held.load(Ordering::Relaxed);
        assert!(held > 2 * fitted as u64 - (64 << 10), "{held} bytes held");
        assert!(held <= budget, "{held} bytes held in a budget of {budget}");
        assert_eq!(m.limit_bytes, Some(limit));
        assert_eq!(budget, limit / 8 * crate::memory::INLINE_BUDGET_EIGHTHS);
        assert!(fitted < buffer, "{fitted}-byte write buffer");
        assert!(!m.fitted_for_separated_values);
        // No limit: the sizes as set, the default budget.
        let mut o = Options::preset(Preset::LevelDb)
            .fs(Arc::new(MemFs::new()))
            .write_buffer_size_bytes(buffer)
            .block_cache_bytes(cache);
        o.memory_limit = crate::memory::MemoryLimit::Given(None);
        let m = Db::open("/db", o).unwrap().stats().memory;
        assert_eq!(m.limit_bytes, None);
        assert_eq!(m.write_buffer_bytes, buffer as u64);
        assert_eq!(m.budget_bytes, Some((buffer + cache) as u64));
    }

    /// A writer behind a group spins until its slot is marked ready, and
    /// gives up after the spin's bound, to sleep instead.
    #[test]
    fn a_waiting_writer_spins_until_ready_or_its_bound() {
        use std::sync::atomic::AtomicBool;
        let ready = Arc::new(AtomicBool::new(false));
        let t = std::time::Instant::now();
        assert!(!super::spin_until_ready(&ready));
        // With one CPU it does not spin at all.
        assert!(crate::parallel::cpus() < 2 || t.elapsed() >= super::WRITER_SPIN);
        ready.store(true, Ordering::Release);
        assert!(super::spin_until_ready(&ready));
        // Set by another thread while it spins (a spin cut short by the
        // bound on a busy machine is retried: the outcome is what counts).
        let found = (0..100).any(|_| {
            let [ready, started, go] = [(); 3].map(|()| Arc::new(AtomicBool::new(false)));
            let setter = {
                let (ready, started, go) = (ready.clone(), started.clone(), go.clone());
                std::thread::spawn(move || {
                    started.store(true, Ordering::Release);
                    while !go.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    ready.store(true, Ordering::Release);
                })
            };
            while !started.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            go.store(true, Ordering::Release);
            let seen = super::spin_until_ready(&ready);
            setter.join().unwrap();
            seen
        });
        assert!(found || crate::parallel::cpus() < 2);
    }

    /// Under a memory limit, an adaptive store keeps the sizes an inline
    /// store fits (5/8 of the limit) while its values are small, and fits
    /// them into 3/8 at the first write of a value a flush will separate,
    /// for GC's memory; reopened, it fits them at open. A store with no
    /// value store never does.
    #[test]
    fn the_first_separated_value_fits_the_memory_to_room_for_gc() {
        let (buffer, cache, limit) = (8usize << 20, 8usize << 20, 32u64 << 20);
        let fs = Arc::new(MemFs::new());
        let open = |preset: Preset| {
            // No early switches for space: the count below is the size's.
            let mut o = Options::preset(preset)
                .fs(fs.clone())
                .write_buffer_size_bytes(buffer)
                .block_cache_bytes(cache)
                .space_limit(None);
            o.memory_limit = crate::memory::MemoryLimit::Given(Some(limit));
            Db::open(format!("/{}", preset.name()), o).unwrap()
        };
        // 3/8 of 32 MiB is 12: (12 - 1) / 2 write buffers of 5 MiB and a
        // cache of 12 - 5.
        let separated = (5u64 << 20, 12u64 << 20);
        let sizes = |db: &Db| {
            let m = db.stats().memory;
            assert_eq!(m.limit_bytes, Some(limit));
            (
                m.write_buffer_bytes,
                m.budget_bytes.unwrap(),
                m.fitted_for_separated_values,
            )
        };
        let db = open(Preset::Adaptive);
        // 2 x 8 + 1 MiB fit 5/8 of 32 (20): the sizes as set, the default
        // budget.
        let inline = (buffer as u64, (buffer + cache) as u64, false);
        assert_eq!(sizes(&db), inline);
        for i in 0..1000u32 {
            db.put(i.to_be_bytes(), [1u8; 100]).unwrap();
        }
        db.flush().unwrap();
        assert_eq!(db.stats().flush.separation.separated, 0);
        assert_eq!(sizes(&db), inline);
        // The write of a value a flush will separate fits them at once.
        db.put(b"large", [2u8; 4096]).unwrap();
        assert_eq!(sizes(&db), (separated.0, separated.1, true));
        db.flush().unwrap();
        assert_eq!(db.stats().flush.separation.separated, 1);
        assert_eq!(sizes(&db), (separated.0, separated.1, true));
        assert_eq!(
            db.stats().index.block_cache_size_bytes,
            separated.1 - separated.0
        );
        // Memtables switch at the new size: 6 MB of writes, one switch (at
        // 8 MiB, none).
        let switched = db.core().state.lock().memtables_switched;
        for i in 0..6000u32 {
            db.put(i.to_be_bytes(), [3u8; 1000]).unwrap();
        }
        assert_eq!(db.core().state.lock().memtables_switched, switched + 1);
        assert_eq!(db.get(b"large").unwrap().unwrap(), [2u8; 4096]);
        drop(db);
        let db = open(Preset::Adaptive);
        assert_eq!(sizes(&db), (separated.0, separated.1, true));
        drop(db);
        // leveldb: no value store, whatever the values.
        let db = open(Preset::LevelDb);
        for i in 0..100u32 {
            db.put(i.to_be_bytes(), [4u8; 4096]).unwrap();
        }
        db.flush().unwrap();
        assert_eq!(sizes(&db), inline);
    }

    #[test]
    fn an_idle_database_frees_the_pools_excess_to_the_block_cache() {
        let (cache, buffer) = (32u64 << 20, 16usize << 20);
        let db = budget_db(cache, buffer);
        let fill = |db: &Db, from: u32| {
            for i in from..from + 12_000 {
                db.put(i.to_be_bytes(), [7u8; 1000]).unwrap();
            }
        };
        fill(&db, 0);
        // While the first memtable is flushed the next one grows, on fresh
        // blocks (the pool is empty): its flushed blocks come back beyond
        // what the active memtable can still take.
        let writer = db.clone();
        *db.core().flush_hook.lock() = Some(Box::new(move |_: &super::super::core::Core| {
            fill(&writer, 12_000)
        }));
        db.flush().unwrap();
        let pool = db.core().block_pool.clone();
        let start = std::time::Instant::now();
        while pool.excess_bytes() == 0 && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let excess = pool.excess_bytes();
        assert!(excess >= 1 << 20, "{excess} bytes of excess");
        let capacity = |db: &Db| db.stats().index.block_cache_capacity_bytes;
        assert_eq!(capacity(&db), cache - excess);
        // Writes stop; a read that misses the cache once the blocks sat
        // unused frees the excess, and the cache has its size back.
        pool.set_idle(Duration::ZERO);
        assert_eq!(db.get(7u32.to_be_bytes()).unwrap().unwrap(), [7u8; 1000]);
        assert_eq!(pool.excess_bytes(), 0);
        assert_eq!(capacity(&db), cache);
        for i in (0..24_000u32).step_by(7) {
            assert_eq!(db.get(i.to_be_bytes()).unwrap().unwrap(), [7u8; 1000]);
        }
    }

    #[test]
    fn a_stalled_writer_and_idle_loops_do_not_wake_each_other() {
        let db = idle_db();
        let core = db.core();
        let mut st = core.state.lock();
        let loops = st.jobs.bg_loops as u64;
        let looks_before = st.jobs.bg_looks;
        let stalled = AtomicU64::new(0);
        core.wait_for_gc(&mut st, |_| true, &stalled);
        let looks = st.jobs.bg_looks - looks_before;
        // 1 s of 10 ms waits, each followed by one wake-up of every loop
        // (and one more each to begin with).
        let bound = loops * (1000 / 10 + 2);
        assert!(
            looks <= bound,
            "{looks} looks of {loops} loops in a 1 s stall (at most {bound})"
        );
        // The stall lasted its whole second (the condition never let go).
        assert!(stalled.load(Ordering::Relaxed) >= 1_000_000);
    }

    /// A thread waiting for background work to come to rest while a job
    /// runs is woken by the job's end and by loops that park; it wakes the
    /// loops only once all of them are parked. Until 2026-11-29 it woke
    /// them on every turn of its loop, and each parking loop woke it back:
    /// tens of thousands of looks a second for as long as the job ran,
    /// most of the CPU of a benchmark's settle (`docs/design.md`,
    /// "Background work", *Who wakes whom*). A slower machine only makes
    /// fewer looks.
    #[test]
    fn a_waiter_for_rest_and_parked_loops_do_not_wake_each_other_while_a_job_runs() {
        let db = idle_db();
        let core = db.core();
        let (loops, looks_before) = {
            let mut st = core.state.lock();
            // A GC step that runs for 500 ms, as far as the waiter and the
            // loops can tell (no loop starts another while it "runs").
            st.jobs.gc_running = true;
            (st.jobs.bg_loops as u64, st.jobs.bg_looks)
        };
        let ender = {
            let core = core.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(500));
                core.state.lock().jobs.gc_running = false;
                core.cv.notify_all();
                core.bg_cv.notify_all();
            })
        };
        db.wait_for_background().unwrap();
        ender.join().unwrap();
        let looks = core.state.lock().jobs.bg_looks - looks_before;
        // While the job "ran" nothing woke the loops but the pressure GC
        // thread's own polls, which do not wake a background loop; after
        // it, the job's end and the rest's check wake each loop a few
        // times.
        let bound = loops * 8;
        assert!(
            looks <= bound,
            "{looks} looks of {loops} loops while a 500 ms job ran (at most {bound})"
        );
    }
}
