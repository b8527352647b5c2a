//! GC of the hash layout, one segment group at a time (HashKV, USENIX ATC '18, §3.3;
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
//! records are copied to the new head and synced; the engine's driver
//! (`crate::gc`) relocates them through the write path, and the frozen
//! files then leave the group in the manifest and are deleted once no
//! reader can need them.
//!
//! Hotness awareness (§3.4): a live record that is its key's only record in
//! the frozen files and is either its key's first version (never updated
//! since its insert) or the copy the group's last GC made (the key was not
//! updated for a whole GC period) is cold, and its copy goes to
//! the cold log instead of the group. The paper leaves a tag (key and
//! metadata) in the group so that its scan-only validity check knows the
//! key; validity here comes from the index, which points at the cold copy,
//! so no tag is needed (tags were measured: `docs/experiments.md`, "Hotness tags"). The cold log
//! is collected like a group, one file at a time: the one with the most
//! known garbage, once at least half of it is garbage.
//!
//! Files an open sealed small come first (`docs/design.md`, "Hash layout",
//! *Files per group*): a group holding more sealed files than its bytes
//! make log segments is collected before any other, and two or more small
//! cold log files are merged in one step.

use std::sync::atomic::Ordering;

use rayon::prelude::*;

use super::HashStore;
use crate::error::{Error, Result};
use crate::fs::IoClass;
use crate::gc::{Collected, GcHost, GcTrigger, GcVictim, Newest, Relocation, SeenView};
use crate::pointer::{ValuePointer, STORE_COLD, STORE_HASH};
use crate::policy::{cold_file_first, is_cold};
use crate::record::{Record, FLAG_FIRST_VERSION, FLAG_GC_COPY, KIND_PUT};
use crate::table::reader::SortedProbes;
use crate::value::hash::meta::COLD_GROUP;
use crate::value::log::reader::{checked_record, may_be_live, visit_file};
use crate::value::ValueStore;
use crate::version::{Version, VersionEdit};

/// Background GC starts when fewer than 1/this of the reserve's log
/// segments are free.
const GC_LOW_WATER_DIVISOR: u64 = 8;

/// Background GC also starts when the store is within 1/this of its
/// capacity (with a cold log, groups below their main segment leave the
/// reserve untouched while the store as a whole fills up).
const GC_HEADROOM_DIVISOR: u64 = 16;

/// Most hash bits one GC step splits its group by (16 groups from one).
const MAX_SPLIT_BITS: u32 = 4;

/// Bytes GC reads of a file at a time (scanning, and copying live records).
const GC_READ_CHUNK_BYTES: usize = 4 << 20;

/// Keys a GC thread looks up per task.
const LOOKUP_CHUNK: usize = 512;

/// A put record of a frozen file that the index may point at: where it
/// is, its version and flags, and where its key lies in the file's key
/// arena. About 40 bytes and the key's, against the 500 or so a record
/// cost as owned keys in a map of per-key lists (`docs/design.md`, "Hash
/// layout", "GC memory").
struct Put {
    offset: u64,
    seq: u64,
    record_len: u32,
    record_crc: u32,
    key_at: usize,
    key_len: u32,
    flags: u8,
}

/// One frozen file as a GC step read it.
struct ScannedFile {
    file: u64,
    store: u8,
    bytes: u64,
    records: u64,
    /// The keys of `puts`, one after another.
    keys: Vec<u8>,
    /// Its put records the index may point at, in file order.
    puts: Vec<Put>,
}

impl ScannedFile {
    fn key(&self, i: u32) -> &[u8] {
        let p = &self.puts[i as usize];
        &self.keys[p.key_at..][..p.key_len as usize]
    }

    fn pointer(&self, i: u32) -> ValuePointer {
        let p = &self.puts[i as usize];
        ValuePointer {
            store: self.store,
            file: self.file,
            offset: p.offset,
            record_len: p.record_len,
            record_crc: p.record_crc,
        }
    }
}

/// A put of a step's scan: (index of its file among the frozen ones,
/// index among the file's puts).
type PutAt = (u32, u32);

/// What one GC step collects.
#[derive(Debug, Clone)]
enum Target {
    /// Every file of a hash group but a new head.
    Group(u32),
    /// Sealed files of the cold log: (file, length). One, by its garbage,
    /// or the small ones an open sealed, merged.
    Cold(Vec<(u64, u64)>),
}

/// The frozen files of a group (or one cold log file).
struct HashVictim<'a> {
    store: &'a HashStore,
    group: u32,
    frozen: Vec<(u64, u64)>,
    /// Frozen files handed to the cold log whole instead of collected
    /// ([`HashStore::to_hand_over`]).
    to_cold: Vec<u64>,
    /// What no other step may collect until this one is done: the group
    /// and the groups split from it in this step (their heads get the
    /// copies); the cold log file it collects, and the cold log head it
    /// sealed while another step was in flight (that step's cold copies
    /// may be in it, named by no entry yet; this step ends after it).
    busy_groups: Vec<u32>,
    busy_cold: Vec<u64>,
}

/// Done (installed, or dropped on an error): its groups and files may be
/// another step's victims again.
impl Drop for HashVictim<'_> {
    fn drop(&mut self) {
        self.store.end_step(&self.busy_groups, &self.busy_cold);
    }
}

impl HashStore {
    /// What the next GC step collects: first a group over its file budget,
    /// then small cold log files to merge (`docs/design.md`, "Hash layout",
    /// *Files per group*); else the cold log file with the most known
    /// garbage (`current` knows the garbage), when [`cold_file_first`] says
    /// so against the victim group (by the policy); else that group.
    fn gc_target(&self, current: &Version) -> Option<Target> {
        if let Some(g) = self.over_budget_group() {
            return Some(Target::Group(g));
        }
        let small = self.small_cold_files();
        if !small.is_empty() {
            return Some(Target::Cold(small));
        }
        let garbage = &current.values.garbage;
        let cold = if self.hotness() {
            self.cold_victim(garbage)
        } else {
            None
        };
        let group = self.victim_candidate(garbage);
        let cold_first = cold.is_some_and(|(_, len, g)| {
            cold_file_first((len, g), group.as_ref().map(|c| (c.bytes, c.garbage)))
        });
        match (cold, group) {
            (Some((file, len, _)), _) if cold_first => Some(Target::Cold(vec![(file, len)])),
            (_, Some(c)) => Some(Target::Group(c.group)),
            _ => None,
        }
    }

    /// True when a GC step has something to collect.
    pub(super) fn gc_target_exists(&self, current: &Version) -> bool {
        self.gc_target(current).is_some()
    }

    /// True when the reserve is used up and a group can be collected:
    /// writes wait for GC then ("value store full: waiting for GC").
    pub(super) fn over_capacity_hash(&self, current: &Version, capacity: u64) -> bool {
        self.is_full(capacity) && self.gc_target(current).is_some()
    }

    /// True when background GC should run: free log segments are low, the
    /// store nears its capacity, the GC interval passed, or files piled up
    /// (a group over its file budget, small cold log files to merge).
    pub(super) fn gc_wanted_hash(&self, t: &GcTrigger<'_>) -> bool {
        // Files piled up: `gc_target` picks them first.
        if self.over_budget_group().is_some() || !self.small_cold_files().is_empty() {
            return true;
        }
        // At or past the point where writes wait (`is_full`), whatever the
        // divisors give for a small reserve.
        let low = self
            .reserve_segments()
            .is_some_and(|r| self.log_segments_in_use() >= r - r / GC_LOW_WATER_DIVISOR)
            || t.capacity_bytes
                .is_some_and(|c| self.total_bytes() >= c - c / GC_HEADROOM_DIVISOR);
        (low || t.interval_due) && self.gc_target(t.current).is_some()
    }

    /// Starts a new head file for group `g` (or the cold log), listed in
    /// the manifest before anything is written to it; returns the group's
    /// files before it.
    fn new_group_head(&self, host: &dyn GcHost, g: u32) -> Result<Vec<(u64, u64)>> {
        let (number, writer) = self.create_group_file()?;
        let mut edit = VersionEdit::default();
        edit.values.hash.added.push((g, number));
        host.install(edit)?;
        self.switch_head(g, number, writer)
    }

    /// Picks the victim group and freezes it behind a new head.
    pub(super) fn gc_victim_hash<'a>(
        &'a self,
        host: &dyn GcHost,
    ) -> Result<Option<Box<dyn GcVictim + Send + 'a>>> {
        // Only GC appends to the cold log, so its head turns over here. A
        // step in flight (`Core::gc_pipeline`) may have put cold copies in
        // the head that no entry names yet: sealed now, it is held apart
        // (sealed files may be victims) until this step, which ends after
        // that one, is done.
        let mut held = Vec::new();
        if self.cold_head_full() || self.hand_over_wants_new_cold_head(&host.current()) {
            let in_flight = self.steps_in_flight();
            let sealed = self.new_group_head(host, COLD_GROUP)?;
            if in_flight {
                held.extend(sealed.last().map(|&(f, _)| f));
                self.hold_cold(&held);
            }
        }
        let victim = self.freeze_victim(host, held.clone());
        if !matches!(victim, Ok(Some(_))) {
            self.release_cold(&held);
        }
        victim
    }

    /// True when the next victim is a group with files to hand to the
    /// cold log ([`HashStore::to_hand_over`]) newer than the cold log's
    /// head: the step starts a new cold head first. A handed-over file is
    /// always older than the cold head, because an open takes the cold
    /// log's newest file with records for the one a crash may have torn
    /// (GC appends copies to the head and syncs them later), and cuts only
    /// that one's tail.
    fn hand_over_wants_new_cold_head(&self, current: &Version) -> bool {
        let Some(Target::Group(g)) = self.gc_target(current) else {
            return false;
        };
        let head = self.cold_head();
        (self.to_hand_over(g, true, &current.values.garbage).iter()).any(|&f| f > head)
    }

    /// [`HashStore::gc_victim_hash`] once the cold log's head is settled;
    /// `held`: cold log files the victim keeps busy besides its own.
    fn freeze_victim<'a>(
        &'a self,
        host: &dyn GcHost,
        held: Vec<u64>,
    ) -> Result<Option<Box<dyn GcVictim + Send + 'a>>> {
        // Victims leave out the groups and files of steps in flight.
        let Some(target) = self.gc_target(&host.current()) else {
            return Ok(None);
        };
        // A group gets a new head, listed in the manifest before any write
        // goes to it; its older files are frozen. Cold log files are
        // sealed already.
        let groups_before = self.groups() as u32;
        let (group, frozen) = match target {
            Target::Group(g) => match self.split_bits(g, &host.current()) {
                0 => (g, self.new_group_head(host, g)?),
                bits => (g, self.split_group(host, g, bits)?),
            },
            Target::Cold(ref files) => (COLD_GROUP, files.clone()),
        };
        // Sealed now: their flags are final. Only files older than the
        // cold log's head (`hand_over_wants_new_cold_head`).
        let cold_head = self.cold_head();
        let mut to_cold = self.to_hand_over(group, false, &host.current().values.garbage);
        to_cold.retain(|&f| f < cold_head);
        let (busy_groups, mut busy_cold) = match target {
            Target::Group(g) => (
                std::iter::once(g)
                    .chain(groups_before..self.groups() as u32)
                    .collect(),
                Vec::new(),
            ),
            Target::Cold(files) => (Vec::new(), files.iter().map(|&(f, _)| f).collect()),
        };
        self.hold_cold(&busy_cold);
        busy_cold.extend(held);
        self.begin_step(&busy_groups);
        Ok(Some(Box::new(HashVictim {
            store: self,
            group,
            frozen,
            to_cold,
            busy_groups,
            busy_cold,
        })))
    }

    /// Hash bits to split group `g` by before its GC step, so that each
    /// part holds about a main segment of live data (elastic groups only;
    /// `docs/design.md`, "Hash layout: elastic groups"). Live bytes are the
    /// group's bytes less its known garbage: shadowed pointers that no
    /// compaction dropped yet count as live, so a split may come early.
    fn split_bits(&self, g: u32, current: &Version) -> u32 {
        let Some(limit) = self.split_bytes() else {
            return 0;
        };
        // Files the step will hand to the cold log leave the group whole.
        let garbage = &current.values.garbage;
        let leaving = self.to_hand_over(g, true, garbage);
        let (live, depth) = self.live_estimate(g, garbage, &leaving);
        if live <= limit {
            return 0;
        }
        let parts = live.div_ceil(limit.max(1));
        let bits = u64::BITS - (parts - 1).leading_zeros();
        bits.min(MAX_SPLIT_BITS)
            .min(super::meta::MAX_SPLIT_DEPTH.saturating_sub(depth))
    }

    /// Reads one frozen file: every put record the index may point at,
    /// keys and pointers only. The file is read a chunk at a time
    /// ([`GC_READ_CHUNK_BYTES`]), so a step's memory is the group's keys,
    /// not its bytes (the live values are read again when copied).
    fn scan_frozen(&self, file: u64, store_id: u8, buf: &mut Vec<u8>) -> Result<ScannedFile> {
        let path = self.path_of(file);
        let reader = self.reader_of(file)?;
        let len = reader.len();
        let mut records = 0;
        let mut keys = Vec::new();
        let mut puts = Vec::new();
        let end = visit_file(
            len,
            &path,
            GC_READ_CHUNK_BYTES,
            buf,
            |off, n, into| reader.read_at_into(off, n, into, IoClass::Gc),
            |offset, raw, rec| {
                records += 1;
                if !may_be_live(rec.flags) {
                    return;
                }
                let key_at = keys.len();
                keys.extend_from_slice(rec.key);
                puts.push(Put {
                    offset,
                    seq: rec.seq,
                    record_len: raw.len() as u32,
                    record_crc: crate::coding::u32_at(raw, 0),
                    key_at,
                    key_len: rec.key.len() as u32,
                    flags: rec.flags,
                });
            },
        )?;
        if let Some((off, why)) = end.damage {
            return Err(Error::corruption(&path, off, why));
        }
        // Recovery cut what a crash tore, and a frozen head was synced
        // whole: an incomplete record is damage, never garbage.
        if let Some(off) = end.torn_tail_at {
            return Err(Error::corruption(
                &path,
                off,
                "a segment group file ends in an incomplete record",
            ));
        }
        Ok(ScannedFile {
            file,
            store: store_id,
            bytes: len,
            records,
            keys,
            puts,
        })
    }
}

impl GcVictim for HashVictim<'_> {
    fn collect(&mut self, host: &dyn GcHost, view: &SeenView) -> Result<Collected> {
        let store = self.store;
        let g = self.group;
        // 1. Scan the frozen files (in parallel with `gc_threads`): every
        // put record, by key, in file order.
        // Pointers into a cold log file GC handed over from a group name
        // the group's store id (those a flush in flight installs too).
        let store_id = |file: u64| {
            if g == COLD_GROUP && !store.was_handed(file) {
                STORE_COLD
            } else {
                STORE_HASH
            }
        };
        let collected: Vec<(u64, u64)> = (self.frozen.iter().copied())
            .filter(|(f, _)| !self.to_cold.contains(f))
            .collect();
        // One read buffer per thread for all its files (`visit_file`).
        let scan_one = |buf: &mut Vec<u8>, &(file, _): &(u64, u64)| {
            store.scan_frozen(file, store_id(file), buf)
        };
        let scanned: Vec<Result<ScannedFile>> = match host.pool() {
            Some(pool) => {
                pool.install(|| collected.par_iter().map_init(Vec::new, scan_one).collect())
            }
            None => {
                let mut buf = Vec::new();
                collected.iter().map(|f| scan_one(&mut buf, f)).collect()
            }
        };
        let mut out = Collected::default();
        let files = scanned.into_iter().collect::<Result<Vec<ScannedFile>>>()?;
        for f in &files {
            out.bytes_read += f.bytes;
            out.records += f.records;
        }
        // Every put by key, then in file order (the frozen files are oldest
        // first): each key's records form a run. Sorted with `gc_threads`.
        let key_of = |&(f, i): &PutAt| files[f as usize].key(i);
        let mut order: Vec<PutAt> = (files.iter().enumerate())
            .flat_map(|(f, s)| (0..s.puts.len() as u32).map(move |i| (f as u32, i)))
            .collect();
        let by_key = |a: &PutAt, b: &PutAt| key_of(a).cmp(key_of(b)).then(a.cmp(b));
        match host.pool() {
            Some(pool) => pool.install(|| order.par_sort_unstable_by(by_key)),
            None => order.sort_unstable_by(by_key),
        }
        let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
        for (at, put) in order.iter().enumerate() {
            match runs.last_mut() {
                Some(r) if key_of(&order[r.start]) == key_of(put) => r.end = at + 1,
                _ => runs.push(at..at + 1),
            }
        }
        // 2. One lookup per key (in parallel with `gc_threads`): the record
        // the index points at is live. In key order, so that neighbouring
        // lookups meet the same index and data blocks.
        let look = |chunk: &[std::ops::Range<usize>]| {
            let _sorted = SortedProbes::start();
            // The tables and memtables of now, at the view's sequence: a
            // memtable flushed meanwhile is not kept alive by the step.
            let view = host.fresh(view);
            chunk
                .iter()
                .map(|run| host.newest_of(&view, key_of(&order[run.start])))
                .collect::<Result<Vec<Newest>>>()
        };
        let found: Vec<Result<Vec<Newest>>> = match host.pool() {
            Some(pool) => pool.install(|| runs.par_chunks(LOOKUP_CHUNK).map(look).collect()),
            None => runs.chunks(LOOKUP_CHUNK).map(look).collect(),
        };
        let mut now = Vec::with_capacity(runs.len());
        for chunk in found {
            now.extend(chunk?);
        }
        // 3. Live records copied, a frozen file at a time (read again whole:
        // one sequential read): to the group's new head, or to the cold log
        // when cold. Per file: (put, cold, the pointer the index holds).
        let mut live_in: Vec<Vec<(u32, bool, ValuePointer)>> =
            files.iter().map(|_| Vec::new()).collect();
        for (run, newest) in runs.iter().zip(now) {
            let versions = &order[run.clone()];
            let put = |&(f, i): &PutAt| &files[f as usize].puts[i as usize];
            // The record the index points at; or, while a flush that
            // appended it before the freeze has not installed its tables,
            // the record of the version the memtable holds (the step does
            // not wait for the flush: `gc_waits_for_flushes`). Its copy
            // then shadows the flush's pointer, which names a frozen file.
            let live = match newest {
                // By place: after a restart a handed-over file's pointers
                // name a store id its scan cannot know.
                Newest::Pointer(p) => versions
                    .iter()
                    .find(|&&(f, i)| files[f as usize].pointer(i).same_record(&p)),
                Newest::Inline(seq) => versions.iter().rev().find(|v| put(v).seq == seq),
                Newest::Other => None,
            };
            let Some(&(f, i)) = live else {
                continue;
            };
            let flags = put(&(f, i)).flags;
            // Cold (§3.4): see `policy::is_cold`.
            let cold = store.hotness()
                && is_cold(
                    g == COLD_GROUP,
                    versions.len(),
                    flags & FLAG_GC_COPY != 0,
                    flags & FLAG_FIRST_VERSION != 0,
                );
            let old = match newest {
                Newest::Pointer(p) => p,
                _ => files[f as usize].pointer(i),
            };
            live_in[f as usize].push((i, cold, old));
        }
        let mut cold_moved = 0;
        // Read in windows of up to a chunk (or one record), each spanning
        // the live records that fit: sequential reads, and memory of one
        // window, reused file after file.
        let mut window: Vec<u8> = Vec::new();
        for (scanned, mut live) in files.iter().zip(live_in) {
            if live.is_empty() {
                continue;
            }
            // Puts are in offset order.
            live.sort_unstable_by_key(|&(i, _, _)| i);
            let file = scanned.file;
            let path = store.path_of(file);
            let reader = store.reader_of(file)?;
            let len = reader.len();
            // No window of this file yet.
            window.clear();
            let mut window_at = 0u64;
            for (i, cold, old) in live {
                let key = scanned.key(i);
                let end = old.offset + u64::from(old.record_len);
                if end > len {
                    return Err(Error::corruption(
                        &path,
                        old.offset,
                        "a live record lies past the end of its file",
                    ));
                }
                if old.offset < window_at || end > window_at + window.len() as u64 {
                    let n = (end - old.offset).max(GC_READ_CHUNK_BYTES as u64);
                    let n = n.min(len - old.offset) as usize;
                    reader.read_at_into(old.offset, n, &mut window, IoClass::Gc)?;
                    window_at = old.offset;
                    out.bytes_read += n as u64;
                }
                let at = (old.offset - window_at) as usize;
                let raw = &window[at..at + old.record_len as usize];
                let rec = checked_record(raw, &old, key)
                    .map_err(|why| Error::corruption(&path, old.offset, why))?;
                let copy = Record {
                    seq: rec.seq,
                    flags: KIND_PUT | FLAG_GC_COPY,
                    key,
                    value: rec.value,
                };
                let new = if cold {
                    let p = store.append_cold(&copy)?;
                    cold_moved += u64::from(p.record_len);
                    p
                } else {
                    store.append(&copy)?
                };
                out.bytes_written += u64::from(new.record_len);
                out.moves.push(Relocation {
                    key: key.to_vec(),
                    old,
                    new,
                });
            }
        }
        // Copies durable before any index entry points at them: synced by
        // the driver on the thread that finishes the step, only the heads
        // they went to (the fsyncs were a seventh of a step's collection,
        // which is the pipeline's longer half: `Core::gc_pipeline`).
        out.copies_unsynced = true;
        store
            .cold_moved_bytes
            .fetch_add(cold_moved, Ordering::Relaxed);
        if g == COLD_GROUP {
            store.cold_gc_runs.fetch_add(1, Ordering::Relaxed);
        }
        // 4. The collected files leave the group; the handed-over ones go
        // to the cold log as they are.
        out.frees = collected.iter().map(|&(f, _)| f).collect();
        out.frees_bytes = collected.iter().map(|&(_, len)| len).sum();
        out.edit.values.hash.dropped = out.frees.iter().map(|&f| (g, f)).collect();
        out.edit.values.hash.to_cold = self.to_cold.iter().map(|&f| (g, f)).collect();
        Ok(out)
    }

    /// Out of the group in memory too; readable until deleted (or in the
    /// cold log, handed over).
    fn installed(self: Box<Self>) {
        let files: Vec<u64> = (self.frozen.iter().map(|&(f, _)| f))
            .filter(|f| !self.to_cold.contains(f))
            .collect();
        self.store.retire(self.group, &files);
        self.store.hand_to_cold(self.group, &self.to_cold);
    }
}
