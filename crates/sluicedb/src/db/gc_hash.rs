//! GC of the hash layout, one segment group at a time (seed 000 §3.3;
//! `docs/design.md`, "Hash layout").
//!
//! A step picks the group with the most bytes written since its last GC,
//! gives it a new head file (listed in the manifest before any write goes
//! there), and scans the frozen files. The scan narrows each key to the
//! records of its own versions; one index lookup per key then says which
//! record, if any, is live. The paper decides validity from the scan alone;
//! here that is unsafe, because a group can hold records the index never
//! got (their journal records were lost in a crash) and the index can hold
//! newer inline values the group never saw (selective separation). Live
//! records are copied to the new head, synced and relocated through the
//! write path (the one rule of relocation); the frozen files then leave the
//! group in the manifest and are deleted once no reader can need them.
//!
//! Hotness awareness (§3.4): a live record that is its key's only record in
//! the frozen files and is itself the copy the group's last GC made (the
//! key was not updated for a whole GC period) is cold, and its copy goes to
//! the cold log instead of the group. The paper leaves a tag (key and
//! metadata) in the group so that its scan-only validity check knows the
//! key; validity here comes from the index, which points at the cold copy,
//! so no tag is needed (tags were measured: `docs/design.md`). The cold log
//! is collected like a group, one file at a time: the one with the most
//! known garbage, once at least half of it is garbage.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use rayon::prelude::*;

use super::gc::{Relocation, Relocations};
use super::{bump, Core, State};
use crate::error::{Error, Result};
use crate::key::Kind;
use crate::memtable::Lookup;
use crate::stats::GcStats;
use crate::value::hash::HashStore;
use crate::value::log::format::{Record, FLAG_GC_COPY, KIND_PUT};
use crate::value::log::reader::{scan_file, OwnedRecord};
use crate::value::pointer::{ValuePointer, STORE_COLD, STORE_HASH};
use crate::value::ValueStore;
use crate::version::version::COLD_GROUP;
use crate::version::{Version, VersionEdit};

/// Background GC starts when fewer than 1/this of the reserve's log
/// segments are free.
const GC_LOW_WATER_DIVISOR: u64 = 8;

/// Background GC also starts when the store is within 1/this of its
/// capacity (with a cold log, groups below their main segment leave the
/// reserve untouched while the store as a whole fills up).
const GC_HEADROOM_DIVISOR: u64 = 16;

/// Keys a GC thread looks up per task.
const LOOKUP_CHUNK: usize = 512;

/// A key's put records in the frozen files, in file order.
type Versions = Vec<(ValuePointer, OwnedRecord)>;

/// One frozen file as a GC step read it.
struct ScannedFile {
    bytes: u64,
    records: u64,
    /// Its put records the index may point at, in file order.
    puts: Versions,
}

/// What one GC step collects.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// Every file of a hash group but a new head.
    Group(u32),
    /// One sealed file of the cold log: (file, length).
    Cold(u64, u64),
}

/// What the next GC step collects: a cold log file once at least half of
/// it is known garbage (`current` knows the garbage), else the victim group
/// (by the policy), else any cold log file with garbage.
fn hash_gc_target(store: &HashStore, current: &Version) -> Option<Target> {
    let cold = if store.hotness() {
        store.cold_victim(&current.value_log.garbage)
    } else {
        None
    };
    match cold {
        Some((file, len, garbage)) if garbage.saturating_mul(2) >= len => {
            Some(Target::Cold(file, len))
        }
        _ => store.victim().map(Target::Group).or_else(|| {
            cold.filter(|&(_, _, garbage)| garbage > 0)
                .map(|(file, len, _)| Target::Cold(file, len))
        }),
    }
}

impl Core {
    /// The threads of a hash GC step; `None` with `gc_threads` 1.
    fn gc_pool(&self) -> Option<&rayon::ThreadPool> {
        let n = self.opts.gc_threads;
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

    /// True when the reserve is used up and a group can be collected:
    /// writes wait for GC then ("value store full: waiting for GC").
    pub(super) fn hash_over_capacity(&self, store: &HashStore, st: &State) -> bool {
        self.opts
            .value_store_capacity_bytes
            .is_some_and(|cap| store.is_full(cap))
            && hash_gc_target(store, &st.current).is_some()
    }

    /// Starts a new head file for group `g` (or the cold log), listed in
    /// the manifest before anything is written to it; returns the group's
    /// files before it.
    fn new_group_head(&self, store: &HashStore, g: u32) -> Result<Vec<(u64, u64)>> {
        let (number, writer) = store.create_group_file()?;
        let added = VersionEdit {
            hash_files_added: vec![(g, number)],
            ..VersionEdit::default()
        };
        self.install(added, None, &[], |_| {})?;
        store.switch_head(g, number, writer)
    }

    /// True when background GC should run: free log segments are low, or
    /// the GC interval passed.
    pub(super) fn hash_gc_wanted(&self, store: &HashStore, st: &State) -> bool {
        // At or past the point where writes wait (`is_full`), whatever the
        // divisors give for a small reserve.
        let low = store
            .reserve_segments()
            .is_some_and(|r| store.log_segments_in_use() >= r - r / GC_LOW_WATER_DIVISOR)
            || self
                .opts
                .value_store_capacity_bytes
                .is_some_and(|c| store.total_bytes() >= c - c / GC_HEADROOM_DIVISOR);
        let by_time = self
            .opts
            .gc_interval_ms
            .is_some_and(|ms| st.last_gc.elapsed() >= std::time::Duration::from_millis(ms));
        (low || by_time) && hash_gc_target(store, &st.current).is_some()
    }

    /// One GC step: collects the victim group. `Ok(None)` when no group
    /// holds records.
    pub(super) fn gc_group(&self, store: &HashStore) -> Result<Option<GcStats>> {
        let _one = self.gc_lock.lock();
        self.delete_collected_files();
        // Only GC appends to the cold log, so its head turns over here.
        if store.cold_head_full() {
            self.new_group_head(store, COLD_GROUP)?;
        }
        let current = self.state.lock().current.clone();
        let Some(target) = hash_gc_target(store, &current) else {
            return Ok(None);
        };
        // 1. A group gets a new head, listed in the manifest before any
        // write goes to it; its older files are frozen. A cold log file is
        // sealed already.
        let (g, frozen) = match target {
            Target::Group(g) => (g, self.new_group_head(store, g)?),
            Target::Cold(file, len) => (COLD_GROUP, vec![(file, len)]),
        };
        // Writes that appended to the frozen files are visible from here on.
        self.publish_barrier()?;
        // 2. Scan the frozen files (in parallel with `gc_threads`): every
        // put record, by key, in file order.
        let store_id = if g == COLD_GROUP {
            STORE_COLD
        } else {
            STORE_HASH
        };
        let scan_one = |&(file, _): &(u64, u64)| -> Result<ScannedFile> {
            let path = store.path_of(file);
            let data = store.read_file(file)?;
            let scan = scan_file(&data, &path)?;
            if let Some((off, why)) = scan.damage {
                return Err(Error::corruption(&path, off, why));
            }
            // Recovery cut what a crash tore, and a frozen head was synced
            // whole: an incomplete record is damage, never garbage.
            if let Some(off) = scan.torn_tail_at {
                return Err(Error::corruption(
                    &path,
                    off,
                    "a segment group file ends in an incomplete record",
                ));
            }
            let records = scan.records.len() as u64;
            let puts = scan
                .records
                .into_iter()
                .filter(|(_, _, rec)| rec.may_be_live())
                .map(|(offset, len, rec)| {
                    let p = ValuePointer {
                        store: store_id,
                        file,
                        offset,
                        record_len: len,
                        record_crc: crate::coding::u32_at(&data, offset as usize),
                    };
                    (p, rec)
                })
                .collect();
            Ok(ScannedFile {
                bytes: data.len() as u64,
                records,
                puts,
            })
        };
        let scanned: Vec<Result<ScannedFile>> = match self.gc_pool() {
            Some(pool) => pool.install(|| frozen.par_iter().map(scan_one).collect()),
            None => frozen.iter().map(scan_one).collect(),
        };
        let mut by_key: HashMap<Vec<u8>, Versions> = HashMap::new();
        let mut bytes_read = 0;
        let mut records = 0;
        for file in scanned {
            let file = file?;
            bytes_read += file.bytes;
            records += file.records;
            for (p, rec) in file.puts {
                by_key.entry(rec.key.clone()).or_default().push((p, rec));
            }
        }
        // 3. One lookup per key (in parallel with `gc_threads`): the record
        // the index points at is live.
        let seen = self.gc_view();
        let (seq, sv) = (seen.seq, &seen.sv);
        let keyed: Vec<(&Vec<u8>, &Versions)> = by_key.iter().collect();
        let look = |chunk: &[(&Vec<u8>, &Versions)]| {
            chunk
                .iter()
                .map(|(key, _)| match self.lookup(sv, key, seq)? {
                    Lookup::Found(Kind::ValuePointer, bytes) => Ok(ValuePointer::decode(&bytes)),
                    _ => Ok(None),
                })
                .collect::<Result<Vec<Option<ValuePointer>>>>()
        };
        let found: Vec<Result<Vec<Option<ValuePointer>>>> = match self.gc_pool() {
            Some(pool) => pool.install(|| keyed.par_chunks(LOOKUP_CHUNK).map(look).collect()),
            None => keyed.chunks(LOOKUP_CHUNK).map(look).collect(),
        };
        let mut now = Vec::with_capacity(keyed.len());
        for chunk in found {
            now.extend(chunk?);
        }
        let mut moves = Vec::new();
        let mut written = 0;
        let mut cold_moved = 0;
        for (&(key, versions), old) in keyed.iter().zip(now) {
            let Some(old) = old else {
                continue;
            };
            let Some((_, rec)) = versions.iter().find(|(p, _)| *p == old) else {
                continue;
            };
            let copy = Record {
                seq: rec.seq,
                flags: KIND_PUT | FLAG_GC_COPY,
                key,
                value: &rec.value,
            };
            // Cold (§3.4): the key's only record here is the copy the
            // group's last GC made, so it was not updated for a whole GC
            // period. A record written since then is hot at least once
            // more: keys updated about once a period would otherwise move
            // to the cold log and back each time (measured; see
            // `docs/design.md`, "Hotness awareness").
            let cold =
                store.hotness() && (g == COLD_GROUP || (versions.len() == 1 && rec.is_gc_copy()));
            let new = if cold {
                let p = store.append_cold(&copy)?;
                cold_moved += u64::from(p.record_len);
                p
            } else {
                store.append(&copy)?
            };
            written += u64::from(new.record_len);
            moves.push(Relocation {
                key: key.clone(),
                old,
                new,
            });
        }
        // 4. Copies durable, then relocations through the write path.
        store.sync()?;
        let live = moves.len() as u64;
        let applied = if moves.is_empty() {
            0
        } else {
            self.submit_relocations(Relocations {
                moves,
                seen: Some(seen),
            })?
        };
        let barrier = self.visible_seq.load(Ordering::Acquire);
        // Writes that made frozen records dead must be durable before the
        // records go: replay may meet their pointers (as for the log).
        self.sync_journal()?;
        // 5. The frozen files leave the group; deleted when no reader is
        // older than the relocations.
        let files: Vec<u64> = frozen.iter().map(|&(f, _)| f).collect();
        let dropped = VersionEdit {
            hash_files_dropped: files.iter().map(|&f| (g, f)).collect(),
            ..VersionEdit::default()
        };
        let pending = files.clone();
        self.install(dropped, None, &[], |st| {
            st.pending_segment_deletes.push((pending, barrier));
        })?;
        store.retire(g, &files);
        self.delete_collected_files();
        self.state.lock().last_gc = std::time::Instant::now();
        bump(&self.counters.gc_runs, 1);
        bump(&self.counters.gc_bytes_read, bytes_read);
        bump(&self.counters.gc_bytes_written, written);
        bump(&self.counters.cold_moved_bytes, cold_moved);
        if g == COLD_GROUP {
            bump(&self.counters.cold_gc_runs, 1);
        }
        Ok(Some(GcStats {
            chunks: 1,
            bytes_read,
            records,
            live_records: live,
            relocations_applied: applied,
            relocations_dropped: live - applied,
        }))
    }

    /// Deletes retired group files whose barrier every registered reader
    /// has passed.
    pub(super) fn delete_retired_segments(&self, store: &HashStore) {
        let doomed: Vec<u64> = {
            let mut st = self.state.lock();
            let oldest = st.snapshots.keys().next().copied().unwrap_or(u64::MAX);
            let mut doomed = HashSet::new();
            st.pending_segment_deletes.retain(|(files, barrier)| {
                if oldest >= *barrier {
                    doomed.extend(files.iter().copied());
                    false
                } else {
                    true
                }
            });
            doomed.into_iter().collect()
        };
        if !doomed.is_empty() {
            store.delete_retired(&doomed);
        }
    }
}
