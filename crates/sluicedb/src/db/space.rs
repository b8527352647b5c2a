//! Space accounting (`docs/design.md`, "Space accounting"): for every value
//! file the version accounts for, its bytes are the file header, the
//! records some index entry points at, and the garbage the manifest counts.
//! The database's side: it measures and recounts; what a measurement means
//! for writes and GC is `gc::space`.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::core::{Core, State};
use crate::error::Result;
use crate::fs::IoClass;
use crate::gc::space::{
    excess_floored, garbage_judged, gc_pressure_persists, layout_overhead, live_data, EarlySwitch,
    Measured, Payloads, SpacePressure, HIDDEN_GARBAGE_DIVISOR, MIN_EARLY_SWITCH_BYTES,
    MIN_RECLAIMABLE_SHARE_DIVISOR,
};
use crate::iter::{InternalIterator, MergingIterator};
use crate::key::{self, Kind};
use crate::memtable::{Lookup, ShadowCandidates, WriteBuffer};
use crate::options::IndexShapeKind;
use crate::options::{JournalMode, SpaceLimit};
use crate::pointer::ValuePointer;
use crate::stats::SpaceMismatch;
use crate::super_version::SuperVersion;
use crate::version::{Version, VersionEdit};

/// Entries [`Core::sample_shadowed_after_open`] samples: the share of
/// them that shadow an older version within about 2 percentage points
/// (the standard error of a share is at most 0.5 / sqrt(n)), as a flush's
/// full write buffer's sample (`SHADOW_SAMPLES_PER_BUFFER`).
const SHADOWED_SAMPLES_AFTER_OPEN: u64 = 512;

/// How often `Core::space_mismatches` takes its recount again when a new
/// super version came during it.
const RECOUNT_ATTEMPTS: u32 = 8;

impl Core {
    /// Live and garbage bytes of the value files `current` accounts for:
    /// garbage counted in the manifest plus what the journal wrote that no
    /// entry will point at; live is the rest of each file but its header.
    pub(crate) fn value_space(&self, current: &Version) -> (u64, u64) {
        let Some(store) = &self.values else {
            return (0, 0);
        };
        let meta = &current.values;
        let pending = self
            .journal
            .get()
            .map(|j| j.pending_garbage())
            .unwrap_or_default();
        let (mut live, mut garbage) = (0, 0);
        for (file, records) in store.record_lengths() {
            if !meta.accounts_for(file) {
                continue;
            }
            let g = meta.garbage.get(&file).copied().unwrap_or(0)
                + pending.get(&file).copied().unwrap_or(0);
            garbage += g;
            live += records.saturating_sub(g);
        }
        (live, garbage)
    }

    /// Measures space amplification, the bytes of every file in the
    /// directory over the user's live data ([`live_data`], and what the
    /// memtables hold), for the write path's throttle (`space_ratio`), and
    /// for `Stats` (a read-only open measures once, so that `sluice info`
    /// shows the ratio; it writes nothing).
    pub(crate) fn measure_space(&self) {
        if !self.space_limited() {
            return;
        }
        // Read first: what the journal writes while the files are listed
        // counts twice at worst, never not at all.
        let journal_written = self.fs.counters().written(IoClass::Journal);
        let Ok(names) = self.fs.list(&self.dir) else {
            return;
        };
        let mut used = 0;
        for name in &names {
            // A file deleted since the listing holds nothing.
            let Ok(len) = self.fs.allocated_len(&self.dir.join(name)) else {
                continue;
            };
            used += len;
        }
        let sv = self.super_version();
        let current = sv.current.clone();
        let (live_values, garbage) = self.value_space(&current);
        // What the memtables likely hide is garbage already, though no flush
        // counted it yet: the limit judges by the estimate.
        let buffers = || std::iter::once(&sv.mem).chain(sv.imms.iter());
        let hidden: u64 = buffers().map(|m| self.hidden_garbage(m.as_ref())).sum();
        let (in_tables, in_memtables) = self.shadowed_inline_garbage(&current, hidden);
        let tables_inline_garbage = self.shape.inline_garbage(&current) + in_tables;
        let inline_garbage = tables_inline_garbage + in_memtables;
        let tables = Payloads::of(&current);
        let data = live_data(&tables, live_values.saturating_sub(hidden), inline_garbage);
        // And what they hold whole is live, though only their journals
        // hold it on disk: a memtable of overwrites stands for about as
        // much live data as it hides garbage, and leaving it out judged the
        // store fuller than it is once the memtables are flushed (by
        // 14-34 MB at 1 GiB on the Mixed workload, where the early switch
        // keeps memtables small; by up to two whole memtables otherwise).
        let held: u64 = buffers().map(|m| m.held_live_bytes()).sum();
        let live = (data + held).max(1);
        let store_bytes = self.values.as_ref().map_or(0, |v| v.total_bytes());
        let milli = (used as f64 / live as f64 * 1000.0) as u64;
        self.space_ratio_milli
            .store(milli.max(1), Ordering::Relaxed);
        // The limit applies past a small slack for the manifest and small
        // files (`SpaceMeasure::pressure`). The journals count like any
        // file: the write path switches a memtable early when its journal
        // would weigh too much against a small store (`early_switch_due`),
        // and they go at the flush.
        self.space_measure.record(Measured {
            used,
            live,
            inline_garbage,
            tables_inline_garbage,
            journal_written,
            store_bytes,
            overhead: layout_overhead(&tables, live_values, garbage, store_bytes),
        });
        let share = garbage * 1000 / (live_values + garbage).max(1);
        self.garbage_share_milli.store(share, Ordering::Relaxed);
        // Why the limit cannot be held, while it cannot (for `Stats`).
        let mut st = self.state.lock();
        st.space_note = match self.space_pressure() {
            SpacePressure::High if !self.space_reclaimable(&st.current) => Some(format!(
                "space amplification {:.2} is at the limit, but GC has too little to reclaim",
                self.space_ratio()
            )),
            _ => None,
        };
    }

    /// The inline versions of a leveled tree that newer ones shadow: the
    /// count kept from a sample after the open
    /// ([`Core::sample_shadowed_after_open`]), or else the inline bytes
    /// above its last level (the partitioned shape: above each partition's
    /// oldest table) times the share of writes the flushes found shadowing
    /// an older version (each such entry leaves one older version below
    /// until a merge meets it; exact for values of one size under a steady
    /// workload, and nothing before a flush since open measured the
    /// share); and, in a tree of inline values only, the garbage the
    /// memtables likely hide (`hidden`: their puts shadow inline versions,
    /// not value records; nothing before the share is measured). Returns
    /// the two apart, the tables' and the memtables': a merge can drop only
    /// the first.
    fn shadowed_inline_garbage(&self, current: &Version, hidden: u64) -> (u64, u64) {
        let share = self.space_measure.learned_shadow_share_milli();
        let above = self.shape.inline_bytes_above_last_level(current);
        // A leveled tree keeps the count as its edits install, from a
        // sample after the open (`Core::inline_bytes_above_last_level` says
        // where it is kept): versions merges move down from above the last
        // level need not be updates, nor need a load written before the
        // open. Each dead version's newer one is above the last level
        // (which holds one version of a key), so `above` bounds the count.
        let dead = match (self.space_measure.tables_shadowed_bytes(), share) {
            (Some(n), _) => n.min(above),
            (None, Some(share)) => (u128::from(above) * u128::from(share) / 1000) as u64,
            (None, None) => 0,
        };
        if current.may_hold_pointers() || share.is_none() {
            (dead, 0)
        } else {
            (dead, hidden)
        }
    }

    /// Starts the count of a leveled tree's shadowed inline bytes
    /// (`SpaceMeasure::note_tables`) from a sample of the version current
    /// now, once after an open (flushes and merges ask once they
    /// installed, off the write path; `own_merges` is 1 from a merge, which
    /// counts itself as running), when no other merge runs or a few
    /// flushes asked; installs meanwhile are kept aside and added to it.
    ///
    /// The sample ([`SHADOWED_SAMPLES_AFTER_OPEN`] entries, spread over the
    /// levels above the last by their inline bytes, the first inline put of
    /// an evenly spread data block each) looks each entry's key up in the
    /// tree below the entry's sequence number: the share that finds a
    /// version that is not a tombstone, times the inline bytes above the
    /// last level, is the count. At most as many data block reads as
    /// samples in the tables sampled, and one lookup each (a block per
    /// level at most, behind the filters). A sample that reads nothing
    /// (every table failed) leaves the count to the old estimate.
    pub(in crate::db) fn sample_shadowed_after_open(&self, own_merges: usize) {
        if !self.keeps_shadowed_count() {
            return;
        }
        let version = {
            let st = self.state.lock();
            let merging = st.jobs.compactions_running > own_merges;
            if !self.space_measure.start_sample(merging) {
                return;
            }
            st.current.clone()
        };
        let dead = self.sample_shadowed_inline(&version);
        self.space_measure.finish_sample(dead);
    }

    /// [`Core::sample_shadowed_after_open`]'s sample of `v`: the dead
    /// inline bytes, `None` when no entry could be sampled.
    fn sample_shadowed_inline(&self, v: &Version) -> Option<u64> {
        let above = self.shape.inline_bytes_above_last_level(v);
        let last = v.levels.iter().rposition(|l| !l.is_empty())?;
        if above == 0 {
            return Some(0);
        }
        let total = u128::from(SHADOWED_SAMPLES_AFTER_OPEN);
        let (mut before, mut sampled, mut shadowed) = (0u64, 0u64, 0u64);
        for f in v.levels[..last].iter().flatten() {
            let after = before + f.inline_bytes();
            // This table's part of the samples, by its inline bytes.
            let n = total * u128::from(after) / u128::from(above)
                - total * u128::from(before) / u128::from(above);
            before = after;
            // A table that cannot be read is left out, as a flush's sample
            // leaves out a key whose lookup fails: a read reports it.
            let Ok(table) = self.tables.get(f.number, f.file_size, IoClass::Flush) else {
                continue;
            };
            let Ok(puts) = table.sample_inline_puts(n as usize, IoClass::Flush) else {
                continue;
            };
            for ik in puts {
                let below = key::sequence(&ik).saturating_sub(1);
                let uk = key::user_key(&ik);
                if let Ok(found) = self.shape.get(v, &self.tables, uk, below, IoClass::Flush) {
                    sampled += 1;
                    shadowed += u64::from(matches!(found, Lookup::Found(..)));
                }
            }
        }
        let dead = u128::from(above) * u128::from(shadowed) / u128::from(sampled.max(1));
        (sampled > 0).then_some(dead as u64)
    }

    /// Learns from a flush how much of what its memtable's writes could
    /// have made garbage (`candidates`) they did (`counted` bytes).
    pub(crate) fn note_flushed_shadows(&self, candidates: ShadowCandidates, counted: u64) {
        self.space_measure.note_flushed_shadows(candidates, counted);
    }

    /// The inline bytes of a leveled tree's levels above its last, for
    /// [`Core::note_inline_tables`]; `None` where the count is not kept
    /// (without a space limit, or another shape, which keeps the estimate).
    pub(crate) fn inline_bytes_above_last_level(&self) -> Option<u64> {
        self.keeps_shadowed_count().then(|| {
            let current = self.state.lock().current.clone();
            self.shape.inline_bytes_above_last_level(&current)
        })
    }

    /// Whether the count of shadowed inline bytes is kept: under a space
    /// limit, in a leveled tree.
    pub(in crate::db) fn keeps_shadowed_count(&self) -> bool {
        self.space_limited() && self.opts.index.shape == IndexShapeKind::Leveled
    }

    /// A flush or a whole merge installed, which `added` and `removed`
    /// tables' inline bytes, over a tree with `above` inline bytes above
    /// its last level before it (`SpaceMeasure::note_tables`).
    pub(crate) fn note_inline_tables(&self, added: u64, removed: u64, above: u64, flush: bool) {
        self.space_measure.note_tables(added, removed, above, flush);
    }

    /// The garbage a memtable likely hides
    /// (`SpaceMeasure::hidden_garbage`).
    fn hidden_garbage(&self, mem: &dyn WriteBuffer) -> u64 {
        self.space_measure.hidden_garbage(mem)
    }

    /// Whether the active memtable should be switched although it is not
    /// full (the write group's leader asks, `make_room_for_write`), because
    /// its flush would free or count enough to matter; never below
    /// [`MIN_EARLY_SWITCH_BYTES`] of memtable:
    /// - the garbage it likely hides ([`Core::hidden_garbage`]) and, with
    ///   the engine journal, the journal it keeps (about its own size)
    ///   reached `(high - 1) / `[`HIDDEN_GARBAGE_DIVISOR`] of the live bytes
    ///   (a sixteenth with the default high of 1.5). A memtable of pointers
    ///   may stand for gigabytes of values, more than a small store holds;
    ///   without this its overwrites and deletes stay uncounted until it
    ///   fills, and the limit sees them only as an estimate;
    /// - or space is at the low ratio or above and GC has too little known
    ///   garbage to reclaim: what the memtable hides may be all there is.
    ///
    /// While a flush is queued the memtable cannot switch; once it weighs
    /// twice the first reason's share (and twice the smallest switch) the
    /// writer waits for the flush ([`EarlySwitch::WaitForFlush`]): a
    /// memtable that keeps growing while a slow flush runs is a journal
    /// the limit cannot bound. (Counting a load's journal here as what the
    /// flush frees makes a young database's load wait on its flushes:
    /// `docs/experiments.md`, "The live share of writes".)
    ///
    /// Neither applies while the limit acts on inline garbage alone
    /// (`Core::limit_acts_on_values`): a flush of inline versions frees no
    /// space (its table takes what its journal held) and counts nothing,
    /// and switching early only made more, smaller L0 tables to merge (121
    /// flushes for 68 in a 1 GiB update run, `docs/experiments.md`, "The
    /// space limit over a leveled tree's inline garbage").
    pub(super) fn early_switch_due(&self, st: &State) -> EarlySwitch {
        let Some(limit) = self
            .space_limit_acting()
            .filter(|_| self.limit_acts_on_values())
        else {
            return EarlySwitch::No;
        };
        let mem = st.mem.approximate_memory_bytes();
        if mem < MIN_EARLY_SWITCH_BYTES {
            return EarlySwitch::No;
        }
        let mut hidden = self.hidden_garbage(st.mem.as_ref());
        if self.opts.journal_mode == JournalMode::Journal {
            // Its journal holds what the memtable holds, about.
            hidden += mem as u64;
        }
        let live = self.space_measure.live_bytes() as f64;
        let share = (limit.high - 1.0).max(0.0) / HIDDEN_GARBAGE_DIVISOR * live;
        let weighs = live > 0.0 && hidden as f64 >= share;
        if !st.imms.is_empty() {
            return if weighs && mem >= 2 * MIN_EARLY_SWITCH_BYTES && hidden as f64 >= 2.0 * share {
                EarlySwitch::WaitForFlush
            } else {
                EarlySwitch::No
            };
        }
        if weighs
            || (self.space_pressure() != SpacePressure::Below
                && !self.space_reclaimable(&st.current))
        {
            EarlySwitch::Switch
        } else {
            EarlySwitch::No
        }
    }

    /// The space limit, when it has something to act on: values
    /// (`Core::limit_acts_on_values`), or a leveled tree's inline garbage
    /// worth reclaiming (`Core::inline_garbage_reclaimable`), which
    /// merges drop under the limit's pressure. Without them (the
    /// `adaptive` preset while every value is small, inline, and new) there
    /// is nothing to reclaim, and slowing writes only made them slower (a
    /// 1 GiB load of 1 KiB values ran at 135k ops/s against the leveldb
    /// preset's 247k, 1.5 s of it in the limit's delays, and 52 memtables
    /// switched early).
    fn space_limit_acting(&self) -> Option<SpaceLimit> {
        let acts = self.limit_acts_on_values() || self.inline_garbage_reclaimable();
        self.opts
            .gc
            .space_limit
            .filter(|_| acts && self.space_limited())
    }

    /// Whether the engine measures space for a space limit at all: with a
    /// value store, or under the partitioned shape (the lightkv preset),
    /// whose tables hold every value inline and whose merges drop the
    /// versions newer ones shadow (`docs/design.md`, "Partition
    /// compaction", Merges for space). A leveled tree without a value
    /// store (the leveldb preset) is LevelDB as it is, unbounded.
    pub(crate) fn space_limited(&self) -> bool {
        self.values.is_some() || self.shape.merges_for_space_by_partition()
    }

    /// Whether the space limit has values a flush counts or GC collects
    /// (without them, writes at its high ratio are delayed, not stopped:
    /// `Core::wait_for_space`):
    /// a value store holding files, a value written since open that a
    /// flush will separate, or the unified shape (whose flushes count the
    /// versions they shadow in its hash index).
    pub(super) fn limit_acts_on_values(&self) -> bool {
        self.values.as_ref().is_some_and(|store| {
            store.total_bytes() > 0
                || self.separable_written.load(Ordering::Relaxed)
                || self.opts.index.shape == IndexShapeKind::Unified
        })
    }

    /// Where the space limit stands (`Options::gc.space_limit`;
    /// [`SpacePressure::of`]).
    pub(crate) fn space_pressure(&self) -> SpacePressure {
        self.limited_ratio(0)
            .map_or(SpacePressure::Below, |(r, limit)| {
                SpacePressure::of(r, limit)
            })
    }

    /// True while a run of overlapped GC steps goes on (`Core::gc_pipeline`;
    /// [`gc_pressure_persists`]), counting the `freed` bytes of the step in
    /// flight as gone.
    pub(crate) fn gc_pressure_persists_after(&self, freed: u64) -> bool {
        self.limited_ratio(freed)
            .is_some_and(|(r, limit)| gc_pressure_persists(r, limit))
    }

    /// The ratio the space limit judges, once `freed` more bytes of files
    /// are gone, with the limit; `None` without a limit or a value store.
    /// - Over inline garbage alone, the excess over the live data reads as
    ///   the high ratio only once it also passes what the write path holds
    ///   by configuration ([`Core::write_path_bytes`], [`excess_floored`]);
    ///   below that the limit would ask a merge of every flush of a small
    ///   store, and nothing it can free.
    /// - With values, the garbage beyond the layout's own bytes
    ///   (`space::layout_overhead`), which GC cannot bring space under, is
    ///   judged against the room the ratio leaves it, but at least as much
    ///   room as those bytes ([`garbage_judged`]): unikv over 104-byte
    ///   values held 1.55 times the data with no garbage, and GC copied 3.7
    ///   GB for each 1 GB of updates (`docs/experiments.md`, "A space limit
    ///   under the layout's own bytes"); wisckey's GC ran without end
    ///   ("GC's marks over the layout's own bytes").
    fn limited_ratio(&self, freed: u64) -> Option<(f64, SpaceLimit)> {
        let limit = self.space_limit_acting()?;
        let journal = self.fs.counters().written(IoClass::Journal);
        let store_bytes = self.values.as_ref().map_or(0, |v| v.total_bytes());
        let r = self.space_measure.pressure(store_bytes, journal, freed);
        let live = self.space_measure.live_bytes();
        let r = if self.limit_acts_on_values() {
            let overhead = self.space_measure.layout_overhead_bytes();
            garbage_judged(r, live, limit.high, overhead)
        } else {
            excess_floored(r, live, limit.high, self.write_path_bytes())
        };
        Some((r, limit))
    }

    /// The bytes the write path holds on disk by configuration, whatever
    /// the data: every memtable's journal and the table of the last flush;
    /// under the lightkv preset its write buffer's region (preallocated
    /// whole; its flushes' tables are a few leaves).
    fn write_path_bytes(&self) -> u64 {
        if self.light.get().is_some() {
            return self.opts.lightkv.buffer_bytes;
        }
        (self.opts.write_buffers() as u64 + 1).saturating_mul(self.sizes.write_buffer() as u64)
    }

    /// True when background work can bring space down: GC
    /// ([`Core::values_reclaimable`]), or the merges that drop the dead
    /// versions tables hold inline, once they are at least
    /// 1/[`MIN_RECLAIMABLE_SHARE_DIVISOR`] of the live data (the unified
    /// shape's UnsortedStores: under the limit's pressure a partition
    /// merge is picked, `Core::pick_job`, and writes at the high ratio
    /// wait for it as they wait for GC).
    pub(crate) fn space_reclaimable(&self, current: &Version) -> bool {
        self.values_reclaimable(current) || self.inline_garbage_reclaimable()
    }

    /// True when the tables' inline garbage
    /// (`SpaceMeasure::tables_inline_garbage_bytes`) is at least
    /// 1/[`MIN_RECLAIMABLE_SHARE_DIVISOR`] of the live data: merges can
    /// bring space down by dropping it. What the memtables hide is left
    /// out: no merge drops it, their flush does. Counted in, a memtable of
    /// updates hiding a sixteenth of a small store (100 MB under a 64 MiB
    /// write buffer, the README's benchmark) kept the limit acting on a
    /// tree with nothing to merge, and its journal kept the ratio at the
    /// high mark: writes ran at the slowest delay for whole phases (8.6k
    /// updates a second against the leveldb preset's 181k).
    pub(crate) fn inline_garbage_reclaimable(&self) -> bool {
        let m = &self.space_measure;
        m.tables_inline_garbage_bytes() * MIN_RECLAIMABLE_SHARE_DIVISOR >= m.live_bytes().max(1)
    }

    /// True when GC can bring space down: the layout has a victim, and it
    /// finds garbage by itself or the value store holds enough known
    /// garbage (at least 1/[`MIN_RECLAIMABLE_SHARE_DIVISOR`] of its record
    /// bytes). Otherwise collecting would copy
    /// live data over and over without freeing space.
    pub(crate) fn values_reclaimable(&self, current: &Version) -> bool {
        let Some(store) = &self.values else {
            return false;
        };
        let share = self.garbage_share_milli.load(Ordering::Relaxed);
        (store.gc_profile().finds_garbage || share * MIN_RECLAIMABLE_SHARE_DIVISOR >= 1000)
            && store.gc_has_victim(current)
    }

    /// The last measured space amplification (0 before the first).
    pub(crate) fn space_ratio(&self) -> f64 {
        self.space_ratio_milli.load(Ordering::Relaxed) as f64 / 1000.0
    }

    /// Bytes of records each value file holds that some index entry (any
    /// version, in a table or a memtable) points at and no one counted as
    /// garbage yet: a version right below one flagged
    /// [`key::SHADOW_COUNTED`] was counted by that one's flush.
    /// Every entry of `sv`, memtables and tables, in internal key order.
    fn every_entry(&self, sv: &SuperVersion) -> MergingIterator {
        let mut sources: Vec<Box<dyn InternalIterator>> = vec![sv.mem.clone().iter()];
        sources.extend(sv.imms.iter().map(|m| m.clone().iter()));
        sources.extend(self.shape.iterators(&sv.current, &self.tables));
        MergingIterator::new(sources)
    }

    fn referenced_value_bytes(&self, sv: &SuperVersion) -> Result<BTreeMap<u64, u64>> {
        let mut it = self.every_entry(sv);
        let mut out = BTreeMap::new();
        let mut user_key = Vec::new();
        let mut counted_above = false;
        it.seek_to_first();
        while it.valid() {
            let ik = it.key();
            if key::user_key(ik) != user_key.as_slice() {
                user_key.clear();
                user_key.extend_from_slice(key::user_key(ik));
                counted_above = false;
            }
            if !counted_above && key::kind_byte(ik) == Kind::ValuePointer as u8 {
                if let (Some(p), Some(store)) = (ValuePointer::decode(it.value()), &self.values) {
                    // Where GC moved it without rewriting the pointer.
                    if let Some(f) = store.holder_of(&p, &user_key)? {
                        *out.entry(f).or_default() += u64::from(p.record_len);
                    }
                }
            }
            counted_above = key::shadow_counted(ik);
            it.next();
        }
        it.status()?;
        Ok(out)
    }

    /// At open, before any write or background job: recounts the value
    /// files a GC step cut short (`ValueRecovery::to_recount`) by the rule of
    /// [`Core::space_mismatches`]: a record is referenced while a pointer
    /// entry names it that no newer entry of its key counted; the rest is
    /// garbage, and what the counts miss of it goes into one edit, which
    /// also settles the files (`docs/design.md`, "Crash orphans").
    pub(super) fn recount_values(&self) -> Result<()> {
        let Some(store) = &self.values else {
            return Ok(());
        };
        let sv = self.super_version();
        let files = store.to_recount(&sv.current)?;
        if files.is_empty() {
            return Ok(());
        }
        let mut edit = VersionEdit::default();
        for f in &files {
            let referenced = self.referenced_records(&sv, f.number, &f.records)?;
            let garbage = f.bytes.saturating_sub(referenced);
            let garbage_known = &sv.current.values.garbage;
            let counted = garbage_known.get(&f.number).copied().unwrap_or(0);
            if garbage > counted {
                edit.values.garbage.push((f.number, garbage - counted));
            }
        }
        let numbers: Vec<u64> = files.iter().map(|f| f.number).collect();
        store.recounted(&numbers, &mut edit.values);
        self.install(edit, None, &[], |_| {})
    }

    /// Bytes of `records` (key, offset, length) of value file `file` that
    /// some pointer entry names with no newer entry of its key having
    /// counted it: one seek per record.
    fn referenced_records(
        &self,
        sv: &SuperVersion,
        file: u64,
        records: &[(Vec<u8>, u64, u32)],
    ) -> Result<u64> {
        let Some(store) = &self.values else {
            return Ok(0);
        };
        let mut it = self.every_entry(sv);
        let mut referenced = 0;
        for (user_key, offset, len) in records {
            it.seek(&key::encode(user_key, key::MAX_SEQUENCE, key::KIND_SEEK));
            let mut counted_above = false;
            while it.valid() && key::user_key(it.key()) == user_key.as_slice() {
                let ik = it.key();
                if !counted_above && key::kind_byte(ik) == Kind::ValuePointer as u8 {
                    if let Some(p) = ValuePointer::decode(it.value()) {
                        // Through an edge (GC without write-back moved it),
                        // the offset is another file's: taken as this
                        // record, so that the recount never over-counts.
                        if store.holder_of(&p, user_key)? == Some(file)
                            && (p.file != file || p.offset == *offset)
                        {
                            referenced += u64::from(*len);
                            break;
                        }
                    }
                }
                counted_above = key::shadow_counted(ik);
                it.next();
            }
        }
        it.status()?;
        Ok(referenced)
    }

    /// The value files whose bytes are not header + referenced records +
    /// counted garbage. Exact only while nothing writes, flushes, compacts
    /// or collects (call after `wait_for_background`).
    pub(crate) fn space_mismatches(&self) -> Result<Vec<SpaceMismatch>> {
        let Some(store) = &self.values else {
            return Ok(Vec::new());
        };
        // No GC step between its copies and their relocation.
        let _gc = self.gc_lock.lock();
        // The recount and the counts must be of one moment: a flush that
        // installs between the walk and the reading of the counts adds
        // garbage the walk still found referenced (the model suite's check
        // after every step saw it). A flush or memtable switch makes a new
        // super version, so the recount is taken again until none came
        // (on a database that never rests, at most a few times: the
        // answer is exact only on a quiet one anyway).
        let mut attempts = 0;
        let (sv, referenced, pending, lengths) = loop {
            let sv = self.super_version();
            let pending = self.journal()?.pending_garbage();
            let lengths = store.record_lengths();
            let referenced = self.referenced_value_bytes(&sv)?;
            attempts += 1;
            if attempts >= RECOUNT_ATTEMPTS || Arc::ptr_eq(&sv, &self.super_version()) {
                break (sv, referenced, pending, lengths);
            }
        };
        let meta = &sv.current.values;
        let mut out = Vec::new();
        for (file, records) in lengths {
            if !meta.accounts_for(file) {
                continue;
            }
            let r = referenced.get(&file).copied().unwrap_or(0);
            let g = meta.garbage.get(&file).copied().unwrap_or(0)
                + pending.get(&file).copied().unwrap_or(0);
            if records != r + g {
                out.push(SpaceMismatch {
                    file,
                    bytes: records,
                    referenced: r,
                    garbage: g,
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::fs::MemFs;
    use crate::options::{JournalMode, Options, Preset};
    use crate::Db;

    /// Overwrites, deletes, flushes, compactions and GC steps under a
    /// preset with small files, checking after each round that every value
    /// file's bytes add up.
    fn bytes_add_up(preset: Preset, journal: JournalMode) {
        let fs = MemFs::new();
        let o = Options::preset(preset)
            .journal_mode(journal)
            .fs(Arc::new(fs.clone()))
            .write_buffer_size_bytes(16 << 10)
            .value_log_file_size_bytes(8 << 10)
            .hash_groups(4)
            .hash_main_segment_bytes(8 << 10)
            .hash_log_segment_bytes(4 << 10)
            .separation_threshold_bytes(Some(64))
            .gc_garbage_ratio(None)
            .space_limit(None)
            .background_threads(1);
        let db = Db::open("/db", o).unwrap();
        let value =
            |k: u64, round: u64| vec![b'a' + (round % 26) as u8; 40 + (k % 5) as usize * 60];
        for round in 0..6u64 {
            // Round 0 writes every key; later rounds a third of them, so
            // that old files keep live values for GC to move.
            for k in (0..200u64).filter(|k| round == 0 || k % 3 == round % 3) {
                let key = format!("key{k:04}");
                match (k + round) % 7 {
                    0 if round > 0 => db.delete(&key).unwrap(),
                    _ => db.put(&key, value(k, round)).unwrap(),
                }
            }
            match round % 3 {
                0 => db.flush().unwrap(),
                1 => db.compact_range(None, None).unwrap(),
                _ => {
                    db.flush().unwrap();
                    for _ in 0..3 {
                        db.gc().unwrap();
                    }
                }
            }
            db.wait_for_background().unwrap();
            let m = db.core().space_mismatches().unwrap();
            assert!(m.is_empty(), "{preset:?} round {round}: {m:?}");
        }
        // The rounds did make garbage and collect some of it.
        let s = db.stats();
        assert!(s.gc.runs > 0 && s.gc.relocations_applied > 0, "{s}");
        assert!(s.values.garbage_bytes > 0, "{s}");
        // Stats' live bytes are the recount, over the files the version
        // accounts for (entries shadowed by relocations still point into
        // collected files until compaction drops them).
        let core = db.core();
        let referenced = core.referenced_value_bytes(&core.super_version()).unwrap();
        let current = core.super_version().current.clone();
        let recount: u64 = core
            .values
            .as_ref()
            .unwrap()
            .file_lengths()
            .iter()
            .filter(|(f, _)| current.values.accounts_for(*f))
            .map(|(f, _)| referenced.get(f).copied().unwrap_or(0))
            .sum();
        assert_eq!(s.values.live_bytes, recount, "{s}");
    }

    #[test]
    fn value_file_bytes_add_up_wisckey() {
        bytes_add_up(Preset::WiscKey, JournalMode::ValueLog);
    }

    #[test]
    fn value_file_bytes_add_up_log_with_the_engine_journal() {
        bytes_add_up(Preset::WiscKey, JournalMode::Journal);
    }

    #[test]
    fn value_file_bytes_add_up_hashkv() {
        bytes_add_up(Preset::HashKv, JournalMode::Journal);
    }

    /// A flush counts the table version each key it writes shadows (an
    /// overwrite's or a delete's old value) at once, unless a snapshot
    /// still reads it; the compaction that later drops the versions counts
    /// each of the others exactly once.
    #[test]
    fn flushes_count_what_they_shadow_once() {
        let fs = MemFs::new();
        let o = Options::preset(Preset::WiscKey)
            .journal_mode(JournalMode::Journal)
            .fs(Arc::new(fs.clone()))
            .separation_threshold_bytes(Some(64))
            .gc_garbage_ratio(None)
            .space_limit(None)
            .l0_compaction_trigger(8)
            .background_threads(1);
        let db = Db::open("/db", o).unwrap();
        let v = |n: u8| vec![n; 100];
        let space = |db: &Db| {
            db.wait_for_background().unwrap();
            let m = db.check_space().unwrap();
            assert!(m.is_empty(), "{m:?}");
            let s = db.stats();
            (s.values.live_bytes, s.values.garbage_bytes)
        };
        db.put("a", v(1)).unwrap();
        db.put("b", v(1)).unwrap();
        db.flush().unwrap();
        let (live, garbage) = space(&db);
        assert_eq!(garbage, 0);
        // Every record has the same length.
        let r = live / 2;
        assert_eq!(live, 2 * r);
        // An overwrite and a delete: both old values are garbage once flushed.
        db.put("a", v(2)).unwrap();
        db.delete("b").unwrap();
        assert_eq!(
            space(&db),
            (3 * r, 0),
            "nothing is counted before the flush"
        );
        db.flush().unwrap();
        assert_eq!(space(&db), (r, 2 * r));
        // A snapshot reads a@2: the flush of a@3 leaves it live.
        let snap = db.snapshot();
        db.put("a", v(3)).unwrap();
        db.flush().unwrap();
        assert_eq!(space(&db), (2 * r, 2 * r));
        let at = crate::ReadOptions::at(&snap);
        assert_eq!(db.get_opt(&at, "a").unwrap(), Some(v(2)));
        drop(snap);
        // a@4 counts a@3; a@2 waits for the compaction that drops it.
        db.put("a", v(4)).unwrap();
        db.flush().unwrap();
        assert_eq!(space(&db), (2 * r, 3 * r));
        db.compact_range(None, None).unwrap();
        assert_eq!(space(&db), (r, 4 * r));
        assert_eq!(db.get("a").unwrap(), Some(v(4)));
        assert_eq!(db.get("b").unwrap(), None);
    }
}
