//! The flush job: a memtable into an L0 table (values separated at flush
//! where the layout asks), and the unified shape's hash index checkpoint.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::compaction::{self, JobStats, MergeParams, OlderTables};
use crate::db::core::Core;
use crate::db::write::LIGHT_UNITS_PER_FLUSH;
use crate::error::Result;
use crate::filename;
use crate::fs::IoClass;
use crate::iter::{InternalIterator, MergingIterator};
use crate::memtable::{Lookup, WriteBuffer};
use crate::stats::bump;
use crate::version::{FileMeta, Version, VersionEdit};

/// A flush of a full write buffer that samples the share of its writes
/// that shadow an older version (`Core::sample_shadows`) looks up about
/// this many of its keys, evenly spread; a smaller flush looks up its
/// share of them by bytes, at least one. The share the space limit uses
/// is learned over about a buffer's worth of flushes, so over about this
/// many of the latest lookups (`SpaceMeasure::note_sampled_shadows`):
/// enough to know it within about 2 percentage points (the standard error
/// of a share is at most 0.5 / sqrt(n)).
/// One key in 32 was looked up before, about 1,100 lookups for a 64 MiB
/// memtable of 1 KiB values and some 10,000 at 128 B: under a page cache
/// capped at a quarter of the data each one read a block from the disk,
/// and they held the flush's install back (`docs/experiments.md`, "The
/// default under a memory cap: the flush's shadow sample"). And 512 for
/// every flush, whatever its size, was a lookup for one key in five of
/// the lightkv preset's flush jobs (four leaves of a 64 MiB buffer, some
/// 3 MB): 17% of its CPU under a memory cap, every lookup a block read
/// from the disk (`docs/experiments.md`, "LightKV: updates under a memory
/// cap").
pub(crate) const SHADOW_SAMPLES_PER_BUFFER: u64 = 512;

/// One key in this many of a flush of `entry_count` entries taking
/// `flush_bytes` of a write buffer of `buffer_bytes` is looked up for the
/// shadow sample: every key of a small memtable, about
/// [`SHADOW_SAMPLES_PER_BUFFER`] of a full one, and the same rate per
/// byte in a flush of part of a buffer (the lightkv preset's leaves).
fn shadow_sample_stride(entry_count: u64, flush_bytes: u64, buffer_bytes: u64) -> u64 {
    let share = u128::from(SHADOW_SAMPLES_PER_BUFFER) * u128::from(flush_bytes);
    let lookups = share
        .div_ceil(u128::from(buffer_bytes.max(1)))
        .clamp(1, u128::from(SHADOW_SAMPLES_PER_BUFFER)) as u64;
    (entry_count / lookups).max(1)
}

impl Core {
    /// Writes a memtable's entries into one L0 table. With `below`, the
    /// version whose tables hold everything older than the memtable, the
    /// flush counts the versions its entries shadow there as garbage
    /// (`compaction::write_merged`).
    /// `ahead` makes another iterator over the input, for the thread that
    /// looks the versions it shadows up ahead of the merge (with `below`).
    pub(in crate::db) fn build_tables(
        &self,
        mut iter: Box<dyn InternalIterator>,
        ahead: Option<&(dyn Fn() -> Box<dyn InternalIterator> + Sync)>,
        smallest_snapshot: u64,
        below: Option<&Version>,
        boundaries: &[Vec<u8>],
        stats: &mut JobStats,
    ) -> Result<Vec<FileMeta>> {
        let alloc = || self.new_output_number();
        let params = MergeParams {
            fs: &self.fs,
            dir: &self.dir,
            class: IoClass::Flush,
            table: self.table_opts,
            smallest_snapshot,
            target_file_size_bytes: u64::MAX,
            bottom: None,
            grandparents: &[],
            max_grandparent_overlap_bytes: u64::MAX,
            boundaries,
            new_file_number: &alloc,
            cancel: &self.shutting_down,
            separate: match (&self.values, self.separation.at_flush()) {
                (Some(v), Some(t)) => Some((v.as_ref(), t)),
                _ => None,
            },
            older: below
                .filter(|v| self.flush_looks_up(v))
                .map(|version| OlderTables {
                    version,
                    shape: self.shape.as_ref(),
                    tables: &self.tables,
                    ahead,
                }),
            values: self.values.as_deref(),
            inputs_are_tables: false,
            relocate: &[],
            by_range: None,
        };
        let out = compaction::write_merged(iter.as_mut(), &params, stats)?;
        if !out.is_empty() {
            self.fs.sync_dir(&self.dir)?;
        }
        Ok(out)
    }

    /// The write buffer a flush takes its share of: the lightkv preset's
    /// persistent write buffer, or one memtable (its size in force,
    /// `crate::memory::Sizes`).
    fn write_buffer_bytes(&self) -> u64 {
        if self.lightkv {
            self.opts.lightkv.buffer_bytes
        } else {
            self.sizes.write_buffer() as u64
        }
    }

    /// Whether a flush into `below` learns the share of its writes that
    /// shadow an older version from a sample of lookups: when its merge
    /// looks none up ([`Core::flush_looks_up`]) but the space limit
    /// measures (`Core::space_limited`: a tree of inline values under the
    /// `adaptive` preset, or the lightkv preset's partitions).
    fn samples_shadows(&self, below: &Version) -> bool {
        self.space_limited() && self.opts.gc.space_limit.is_some() && !self.flush_looks_up(below)
    }

    /// Whether a flush into `below` looks up the versions its entries
    /// shadow, to count their records as garbage: with a value store, unless
    /// `below`'s tables hold no pointer (values all inline so far, the
    /// adaptive default's small values), which leaves no record to count.
    /// An empty version is still asked (at no cost), so that a hash layout
    /// learns which records are their keys' first versions.
    fn flush_looks_up(&self, below: &Version) -> bool {
        self.values.is_some() && (below.may_hold_pointers() || below.all_files().next().is_none())
    }

    /// Looks up one in `every` of the keys of `entries` (the first
    /// included, [`shadow_sample_stride`]) in `below`'s tables: (keys looked up, keys that had a version there
    /// that was not a tombstone). It fails only when reading `entries`
    /// does. Each lookup reads a block at most per level, from the cache
    /// when it is warm.
    fn sample_shadows(
        &self,
        mut entries: Box<dyn InternalIterator>,
        every: u64,
        below: &Version,
    ) -> Result<(u64, u64)> {
        let (mut keys, mut sampled, mut shadowed) = (0u64, 0u64, 0u64);
        let mut last = Vec::new();
        entries.seek_to_first();
        while entries.valid() {
            let uk = crate::key::user_key(entries.key());
            if keys == 0 || uk != last.as_slice() {
                if keys % every == 0 {
                    // A lookup that fails (a damaged table) leaves the key
                    // out of the sample, as a flush of pointers leaves such
                    // a shadow uncounted: the flush itself reads no table,
                    // and a read of the key reports the damage.
                    let found = self.shape.get(
                        below,
                        &self.tables,
                        uk,
                        crate::key::MAX_SEQUENCE,
                        IoClass::Flush,
                    );
                    if let Ok(found) = found {
                        sampled += 1;
                        shadowed += u64::from(matches!(found, Lookup::Found(..)));
                    }
                }
                keys += 1;
                last.clear();
                last.extend_from_slice(uk);
            }
            entries.next();
        }
        entries.status()?;
        Ok((sampled, shadowed))
    }

    pub(in crate::db) fn run_flush(&self) -> Result<()> {
        let (imm, leaves, next_mark, smallest_snapshot, below) = {
            let st = self.state.lock();
            let front = st
                .imms
                .front()
                .expect("flush picked with an immutable memtable");
            let next = st.imms.get(1).map_or(st.mem_mark, |i| i.mark);
            let visible = self.visible_seq.load(Ordering::Acquire);
            // LightKV: every flush unit waiting goes into one set of
            // tables (one per table partition), so the units share the
            // tables' syncs and the manifest's edit instead of queueing
            // for them one by one. Their keys are disjoint: a partition
            // hands out its next unit only once the last is flushed, and
            // never splits while it has a chain. A unit waiting is its leaf.
            let leaves: Vec<u32> = st
                .imms
                .iter()
                .map_while(|i| i.leaf)
                .take(LIGHT_UNITS_PER_FLUSH)
                .collect();
            (
                front.mem.clone(),
                leaves,
                next,
                st.smallest_snapshot(visible),
                st.current.clone(),
            )
        };
        let batched = leaves.len().max(1);
        // LightKV: a unit in the queue is its leaf alone; its versions are
        // read out of the buffer here, off the writer's path
        // (`Light::hand_out_next`).
        let mems: Vec<Arc<dyn WriteBuffer>> = match self.light.get() {
            Some(light) if !leaves.is_empty() => leaves
                .iter()
                .map(|&leaf| {
                    light
                        .unit(leaf, smallest_snapshot)
                        .map(|v| v as Arc<dyn WriteBuffer>)
                })
                .collect::<Result<_>>()?,
            _ => vec![imm.clone()],
        };
        let input = || -> Box<dyn InternalIterator> {
            if mems.len() > 1 {
                let children = mems.iter().map(|m| m.clone().iter()).collect();
                Box::new(MergingIterator::new(children))
            } else {
                mems[0].clone().iter()
            }
        };
        // Held until the tables are installed: GC waits for it after
        // freezing files, so that the pointers to values this flush
        // appends are in the index before GC judges them (except where
        // GC judges such records by their version instead,
        // `GcProfile::waits_for_flushes`).
        let _appending = self.flush_appends.lock();
        // Its lookups of the versions it shadows go in key order (those
        // the merge makes itself, when the thread looking ahead is behind).
        let _sorted = crate::table::reader::SortedProbes::uncached();
        let mut stats = JobStats::default();
        // Flushes run one at a time, oldest memtable first, so `below` holds
        // every version older than this memtable's: a compaction running
        // meanwhile drops none of the newest ones (only shadowed versions
        // and bottom tombstones, which point at nothing).
        let outputs = self.build_tables(
            input(),
            Some(&input),
            smallest_snapshot,
            Some(&below),
            // One table per range partition (UniKV, ICDE '20, §III-D).
            &below.boundaries,
            &mut stats,
        )?;
        // Tables are not replayed like the journal, so their pointers are
        // never re-checked: the values they point at (appended at write
        // time or by this flush) must be durable before the flush makes the
        // journal obsolete.
        if let Some(v) = &self.values {
            v.sync()?;
        }
        // LightKV: a table must never hold a write the buffer could lose in
        // a crash, nor one past such a write, so the buffer is durable
        // through the units' newest operation before their tables are
        // listed: one fence for all of them, on this thread (at the
        // hand-out it was the writer's, an `msync` in the write path).
        if let (false, Some(light)) = (leaves.is_empty(), self.light.get()) {
            let newest = mems.iter().map(|m| m.last_sequence()).max();
            light.sync_through(newest.unwrap_or(0))?;
        }
        #[cfg(test)]
        if let Some(hook) = self.flush_hook.lock().take() {
            hook(self);
        }
        if self.samples_shadows(&below) {
            let entries = mems.iter().map(|m| m.len() as u64).sum();
            let bytes: u64 = mems
                .iter()
                .map(|m| m.approximate_memory_bytes() as u64)
                .sum();
            let buffer_bytes = self.write_buffer_bytes();
            let every = shadow_sample_stride(entries, bytes, buffer_bytes);
            let (sampled, shadowed) = self.sample_shadows(input(), every, &below)?;
            self.space_measure.note_sampled_shadows(
                imm.shadow_candidates(),
                sampled,
                shadowed,
                bytes as f64 / buffer_bytes.max(1) as f64,
            );
        } else {
            self.note_flushed_shadows(imm.shadow_candidates(), stats.values.garbage.values().sum());
        }
        self.shadows_uncounted
            .fetch_add(stats.shadows_uncounted, Ordering::Relaxed);
        bump(&self.counters.flush_shadow_lookups, stats.shadow_lookups);
        bump(&self.counters.flush_separated, stats.separated.0);
        bump(&self.counters.flush_separated_bytes, stats.separated.1);
        bump(&self.counters.flush_kept_inline, stats.kept_inline.0);
        bump(&self.counters.flush_kept_inline_bytes, stats.kept_inline.1);
        bump(
            &self.counters.flush_shadow_lookups_unused,
            stats.shadow_lookups_unused,
        );
        let mut edit = VersionEdit {
            values: std::mem::take(&mut stats.value_edit),
            ..VersionEdit::default()
        };
        // Held until the edit is installed (`ValueAccounting::settle_job`).
        let _settled = self.settle_job(&mut stats, &mut edit)?;
        // Replay now starts where the next memtable's records do.
        let log_number = self.journal()?.replay_from(next_mark, &mut edit);
        let numbers: Vec<u64> = outputs.iter().map(|f| f.number).collect();
        for f in outputs {
            // Indexed before it is installed, so lookups find it through
            // the shape's index at once (the unified shape's hash index).
            self.shape.index_flushed(&below, &f, input().as_mut())?;
            edit.add_file(self.shape.flush_level(), f);
        }
        let added: u64 = edit.added.iter().map(|(_, f)| f.inline_bytes()).sum();
        let above = self.inline_bytes_above_last_level();
        self.install(edit, log_number, &numbers, |st| {
            for n in 0..batched {
                let i = st.imms.pop_front().expect("flushed memtable");
                debug_assert!(n > 0 || Arc::ptr_eq(&i.mem, &imm));
                debug_assert!(leaves.get(n).is_none_or(|&leaf| i.leaf == Some(leaf)));
                st.memtables_flushed += 1;
                // Its versions are in synced tables, listed by a synced edit.
                self.durable_seq.fetch_max(i.last_seq, Ordering::AcqRel);
            }
            self.unjournaled_floor
                .store(st.unjournaled_floor(), Ordering::Release);
            // Under the state lock: a sample of the version before or after
            // sees it once (`Core::sample_shadowed_after_open`).
            if let Some(above) = above {
                self.note_inline_tables(added, 0, above, true);
            }
        })?;
        // Once after an open, after its install: the flush it delays is
        // done, and the share it learned is the one the count goes on with.
        self.sample_shadowed_after_open(0);
        bump(&self.counters.flushes, 1);
        self.fit_memory_to_separated_values();
        if let (false, Some(light)) = (leaves.is_empty(), self.light.get()) {
            // LightKV: the leaves' tables are installed; the leaves leave
            // the buffer (raising its watermark), and the next units go out.
            light.flushed(&leaves)?;
            // Splits of the buffer's partitions since the last flush.
            self.shape.flush_cuts(light.partition_cuts());
            let mut st = self.state.lock();
            self.light_hand_out(&mut st, light);
            self.cv.notify_all();
        }
        if self.shape.checkpoint_due() {
            self.write_checkpoint()?;
        }
        Ok(())
    }

    /// Writes the shape's checkpoint of its in-memory index (the unified
    /// shape's hash indexes, UniKV, ICDE '20, §III-G) to a new file, syncs it, and
    /// records it in the manifest; the previous one becomes obsolete. A
    /// crash before the record leaves an unlisted file, swept at open.
    pub(in crate::db) fn write_checkpoint(&self) -> Result<()> {
        let Some(bytes) = self.shape.checkpoint() else {
            return Ok(());
        };
        let number = self.new_output_number();
        let mut file = self
            .fs
            .create(&filename::hash_index(&self.dir, number), IoClass::Flush)?;
        file.append(&bytes)?;
        file.sync()?;
        drop(file);
        self.fs.sync_dir(&self.dir)?;
        let edit = VersionEdit {
            hash_index_checkpoint: Some(number),
            ..VersionEdit::default()
        };
        self.install(edit, None, &[number], |_| {})
    }
}

#[cfg(test)]
mod shadow_sample_tests {
    use super::{shadow_sample_stride, SHADOW_SAMPLES_PER_BUFFER};

    const BUFFER_BYTES: u64 = 64 << 20;

    /// Keys looked up in a flush of `keys` distinct keys taking
    /// `bytes` of a 64 MiB write buffer.
    fn sampled(keys: u64, bytes: u64) -> u64 {
        keys.div_ceil(shadow_sample_stride(keys, bytes, BUFFER_BYTES))
    }

    #[test]
    fn a_full_buffer_samples_a_bounded_number_of_keys_whatever_its_size() {
        for keys in [1, 7, 100, 511, 512] {
            assert_eq!(
                sampled(keys, BUFFER_BYTES),
                keys,
                "a small flush samples every key"
            );
        }
        // 64 MiB memtables of 1 KiB and of 128 B values, and a huge one.
        for keys in [513, 1023, 36_000, 400_000, 1 << 30] {
            let n = sampled(keys, BUFFER_BYTES);
            assert!(
                (SHADOW_SAMPLES_PER_BUFFER..2 * SHADOW_SAMPLES_PER_BUFFER).contains(&n),
                "{keys} keys: {n} sampled"
            );
        }
    }

    #[test]
    fn a_flush_of_part_of_a_buffer_samples_its_share_of_the_keys() {
        // A lightkv flush job: four leaves of 1 KiB values, 3 MiB of the
        // 64 MiB buffer: 24 lookups, one key in 128 as for a full buffer.
        let n = sampled(3_000, 3 << 20);
        assert!((24..=26).contains(&n), "{n} sampled");
        // Never none, nor more than a full buffer's.
        assert_eq!(sampled(1, 100), 1);
        assert_eq!(sampled(5, 0), 1);
        let n = sampled(1 << 20, 4 * BUFFER_BYTES);
        assert!((SHADOW_SAMPLES_PER_BUFFER..2 * SHADOW_SAMPLES_PER_BUFFER).contains(&n));
    }
}
