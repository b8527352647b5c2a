//! The persistent write buffer (PWB) of LightKV (ICDE, §III-A): records
//! appended to segments in persistent memory ([`crate::pm`]), durable
//! without any journal.
//!
//! Each write lane (a top leaf of the Radix-Hash-Tree, in the preset to
//! come) appends to a segment of its own. A record carries its sequence
//! number, its place in its batch and the batch's size, and a checksum that
//! includes the segment's generation. Protocol (`docs/design.md`, "The
//! persistent write buffer"):
//! - append: store and flush the record, no fence;
//! - sync: one fence (group-committed by the region), then each segment's
//!   tail is published with one 8-byte store, flushed for the next fence;
//! - room: a segment leaves the buffer once a persisted watermark `W`
//!   (every operation at or below it is durable elsewhere) has passed all
//!   its records, or once the owner says its records are all durable
//!   elsewhere and the released word `R` (the highest sequence number of a
//!   segment released that way) is persisted at or above its newest;
//! - recovery ([`Pwb::open`]): keeps every operation above `W` found at or
//!   below `R` (a missing one was released, durable elsewhere) and those
//!   above `R` that form a prefix of whole batches in sequence order, ends each segment
//!   after what it kept with a durable end word, and seals the segments it
//!   kept: nothing is appended to them again, so nothing it dropped can
//!   come back after a second crash.
//!
//! Format: `docs/format/pwb.md`.

pub(crate) mod format;
mod recover;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::pm::Pm;
use format::{
    check_word, read_record_with, record_bytes, segment_word, Geometry, Read, CHECK_AT,
    GEOMETRY_AT, MAGIC, MAGIC_AT, RECORD_HEADER_BYTES, RELEASED_AT, WATERMARK_AT,
};
pub(crate) use recover::{Recovered, RecoveredRecord};

/// Which segment chain a record goes to (a top leaf, in the preset).
pub(crate) type Lane = u32;

/// The hasher of the map from lanes to their open segments, looked up
/// for every record appended: a lane is a small integer, spread over the
/// hash's bits by one multiplication (SipHash's cost was measurable).
#[derive(Default)]
pub(crate) struct LaneHasher(u64);

impl Hasher for LaneHasher {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n);
    }
}

/// A segment and the generation it is handed out in: names one use of it,
/// so that a release meant for that use skips a later one.
pub(crate) type SegmentUse = (u32, u32);

/// Where a record lives: segment and byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Loc {
    pub(crate) segment: u32,
    pub(crate) offset: u32,
}

impl Loc {
    /// The 8-byte form an index slot holds.
    pub(crate) fn to_u64(self) -> u64 {
        u64::from(self.segment) << 32 | u64::from(self.offset)
    }

    /// The inverse of [`Loc::to_u64`].
    pub(crate) fn from_u64(v: u64) -> Loc {
        Loc {
            segment: (v >> 32) as u32,
            offset: v as u32,
        }
    }
}

/// A batch placed in the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Appended {
    /// The first operation's sequence number; the others follow.
    pub(crate) first_seq: u64,
    /// Where each operation's record went, in batch order.
    pub(crate) locs: SmallVec<[Loc; 4]>,
}

/// A segment as the buffer sees it in memory.
#[derive(Debug, Clone, Default)]
struct Segment {
    generation: u32,
    /// Bytes of records stored.
    end: u32,
    /// The tail last stored to the segment word.
    published: u32,
    /// Largest sequence number in it (0: none).
    max_seq: u64,
    /// Smallest sequence number in it, of this generation (0: none): a
    /// version link into the segment names a record of this generation
    /// only if its sequence number lies in `min_seq..=max_seq` (numbers
    /// rise, so a generation handed out after the link was made starts
    /// above it).
    min_seq: u64,
    /// Handed out and not yet released.
    in_use: bool,
    /// Free, with the word of its next generation (tail 0) already
    /// durable: handing it out needs no fence.
    prepared: bool,
    /// Free, with the word of its next generation stored and flushed but
    /// perhaps not yet fenced ([`Pwb::prepare_released`] fences it outside
    /// the state lock); a hand-out meanwhile fences it itself.
    word_stored: bool,
}

#[derive(Debug)]
struct State {
    segments: Vec<Segment>,
    free: Vec<u32>,
    /// The segment each lane appends to.
    open: HashMap<Lane, u32, BuildHasherDefault<LaneHasher>>,
    next_seq: u64,
    watermark: u64,
}

/// A step the crash suite makes the buffer skip ([`Pwb::inject`]) to prove
/// it catches the omission; outside tests none is ever skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Fault {
    /// The flush of each appended record.
    RecordFlush = 1,
    /// The fence of a sync.
    SyncFence = 2,
    /// The fence between a watermark raise and the release of segments.
    WatermarkFence = 3,
}

/// The persistent write buffer. Thread safety: all methods take `&self`;
/// appends are serialized by the append lock (the engine's group commit
/// calls it from its leader), and store their records without the state
/// lock, which reads take; syncs, watermark raises and the preparation of
/// released segments run their fences outside it (only a hand-out that
/// finds its segment unprepared fences under it).
pub(crate) struct Pwb {
    pm: Arc<dyn Pm>,
    geometry: Geometry,
    /// Held by the append under way, for all of it: its records are
    /// stored under this lock alone (places reserved and published under
    /// `state`). Taken before `state`; a copy of the region
    /// ([`Pwb::image`]) takes both, so that no record is half stored in it.
    /// Held by an append; the record it encodes, kept between appends.
    append: Mutex<Vec<u8>>,
    /// Segments, free list, lanes, next sequence number and watermark.
    /// Taken before the region's own locks (a hand-out fences under it); a
    /// sync's fence runs without it.
    state: Mutex<State>,
    /// `State::watermark`, readable without the state lock (every read
    /// of the buffer asks for it); stored under the state lock.
    watermark: AtomicU64,
    /// The injected [`Fault`] as its number; 0 for none.
    fault: AtomicU8,
    /// Every operation up to this one is durable (a sync's fence covered
    /// it).
    durable_seq: AtomicU64,
    /// The watermark and the released word as persisted (the watermark
    /// at or above `State::watermark`, which follows it once segments are
    /// released). Its lock serializes their stores and fence without the
    /// state lock, so appends and reads do not wait for that fence.
    persisted: Mutex<Marks>,
}

/// The header's two room words as persisted.
#[derive(Debug, Clone, Copy, Default)]
struct Marks {
    watermark: u64,
    /// `R`: every segment released by [`Pwb::release_segments`] holds
    /// nothing above it, and every operation up to it was durable in the
    /// buffer when it was stored.
    released: u64,
}

impl Pwb {
    /// Opens the buffer in `pm`: formats a region that was never formatted
    /// (into segments of `segment_bytes`), otherwise recovers it (its own
    /// segment size wins) and returns what it kept.
    pub(crate) fn open(pm: Arc<dyn Pm>, segment_bytes: u64) -> Result<(Pwb, Recovered)> {
        if pm.read_u64(MAGIC_AT)? == 0 {
            let geometry = format(&*pm, segment_bytes)?;
            let pwb = Pwb::new(
                pm,
                geometry,
                Marks::default(),
                1,
                vec![Segment::default(); geometry.segments as usize],
            );
            return Ok((pwb, Recovered::default()));
        }
        let geometry = read_geometry(&*pm)?;
        let (segments, recovered) = recover::recover(&*pm, geometry)?;
        let marks = Marks {
            watermark: recovered.watermark,
            released: recovered.released,
        };
        let pwb = Pwb::new(pm, geometry, marks, recovered.last_seq + 1, segments);
        Ok((pwb, recovered))
    }

    fn new(
        pm: Arc<dyn Pm>,
        geometry: Geometry,
        marks: Marks,
        next_seq: u64,
        segments: Vec<Segment>,
    ) -> Pwb {
        let free = (0..geometry.segments)
            .rev()
            .filter(|&i| !segments[i as usize].in_use)
            .collect();
        Pwb {
            pm,
            geometry,
            append: Mutex::new(Vec::new()),
            state: Mutex::new(State {
                segments,
                free,
                open: HashMap::default(),
                next_seq,
                watermark: marks.watermark,
            }),
            watermark: AtomicU64::new(marks.watermark),
            fault: AtomicU8::new(0),
            durable_seq: AtomicU64::new(next_seq.saturating_sub(1)),
            persisted: Mutex::new(marks),
        }
    }

    /// Makes the buffer skip one step from now on (crash suite only).
    #[cfg(test)]
    pub(crate) fn inject(&self, fault: Fault) {
        self.fault.store(fault as u8, Ordering::Relaxed);
    }

    /// True when `fault` was injected: the step it names is skipped.
    fn skips(&self, fault: Fault) -> bool {
        self.fault.load(Ordering::Relaxed) == fault as u8
    }

    /// The process memory the region's backend keeps it in
    /// ([`Pm::memory_bytes`]).
    pub(crate) fn memory_bytes(&self) -> u64 {
        self.pm.memory_bytes()
    }

    /// Segments in the region and their size in bytes.
    pub(crate) fn geometry(&self) -> (u32, u32) {
        (self.geometry.segments, self.geometry.segment_bytes)
    }

    /// The largest payload a record can carry.
    pub(crate) fn max_payload(&self) -> usize {
        (u64::from(self.geometry.segment_bytes) - RECORD_HEADER_BYTES) as usize
    }

    /// Segments in the region, and how many are free.
    pub(crate) fn segments(&self) -> (u32, u32) {
        let s = self.state.lock();
        (self.geometry.segments, s.free.len() as u32)
    }

    /// The persisted watermark.
    pub(crate) fn watermark(&self) -> u64 {
        self.watermark.load(Ordering::Acquire)
    }

    /// The persisted released word `R` (0: none).
    pub(crate) fn released(&self) -> u64 {
        self.persisted.lock().released
    }

    /// Appends one batch, operation `i` to lane `ops[i].0`, with sequence
    /// numbers following the last batch's. Not durable before
    /// [`Pwb::sync`]. Returns `None`, having stored nothing, when the free
    /// segments cannot hold the batch: the caller makes room (moves data
    /// elsewhere and [`Pwb::raise_watermark`]s) and tries again.
    pub(crate) fn append(&self, ops: &[(Lane, &[u8])]) -> Result<Option<Appended>> {
        let sizes: Vec<(Lane, usize)> = ops.iter().map(|(l, p)| (*l, p.len())).collect();
        self.append_with(&sizes, |i, _, out| out.extend_from_slice(ops[i].1))
    }

    /// Like [`Pwb::append`], with operation `i`'s payload (of the length
    /// `ops[i].1` announces) built once the places of the operations before
    /// it are known (`payload(i, &locs[..i], out)` appends it to `out`): a
    /// record may name an earlier record of its own batch. The payload is
    /// written straight after the record's header room, so the caller's
    /// bytes are copied once before they are stored.
    pub(crate) fn append_with(
        &self,
        ops: &[(Lane, usize)],
        mut payload: impl FnMut(usize, &[Loc], &mut Vec<u8>),
    ) -> Result<Option<Appended>> {
        if ops.is_empty() || ops.len() > u32::MAX as usize {
            return Err(Error::InvalidArgument(format!(
                "a batch of {} operations",
                ops.len()
            )));
        }
        if let Some((_, len)) = ops
            .iter()
            .find(|(_, len)| *len == 0 || *len > self.max_payload())
        {
            return Err(Error::InvalidArgument(format!(
                "a write buffer record of {len} bytes (1 to {} fit a segment)",
                self.max_payload()
            )));
        }
        // One append at a time; its records are stored without the state
        // lock, which reads, syncs and releases take: places are reserved
        // under it, the records stored, and then published under it (ends,
        // sequence numbers), so a sync never covers a record not yet
        // stored, and a read never reaches one (the index learns its place
        // only after this returns).
        let mut rec = self.append.lock();
        let (first_seq, plan) = {
            let mut s = self.state.lock();
            if self.segments_needed(&s, ops) > s.free.len() {
                return Ok(None);
            }
            // Each segment's end as this append reserves it (a batch
            // touches few segments: a list, not a map).
            let mut ends: SmallVec<[(u32, u32); 4]> = SmallVec::new();
            let mut plan: SmallVec<[(u32, u32, u32); 4]> = SmallVec::with_capacity(ops.len());
            for (lane, len) in ops {
                let bytes = record_bytes(*len) as u32;
                let seg = self.segment_for(&mut s, *lane, bytes, &ends)?;
                let sg = &s.segments[seg as usize];
                let at = match ends.iter_mut().find(|e| e.0 == seg) {
                    Some(e) => {
                        let at = e.1;
                        e.1 += bytes;
                        at
                    }
                    None => {
                        ends.push((seg, sg.end + bytes));
                        sg.end
                    }
                };
                plan.push((seg, at, sg.generation));
            }
            (s.next_seq, plan)
        };
        let locs: SmallVec<[Loc; 4]> = plan
            .iter()
            .map(|&(segment, offset, _)| Loc { segment, offset })
            .collect();
        let header = RECORD_HEADER_BYTES as usize;
        for (place, &(seg, at, generation)) in plan.iter().enumerate() {
            let seq = first_seq + place as u64;
            rec.clear();
            rec.resize(header, 0);
            payload(place, &locs[..place], &mut rec);
            assert_eq!(
                rec.len() - header,
                ops[place].1,
                "a payload of the announced length"
            );
            format::seal_record(generation, seq, place as u32, ops.len() as u32, &mut rec);
            let abs = self.geometry.segment_at(seg) + u64::from(at);
            self.pm.write(abs, &rec)?;
            if !self.skips(Fault::RecordFlush) {
                self.pm.flush(abs, rec.len() as u64);
            }
        }
        let mut s = self.state.lock();
        for (place, &(seg, at, _)) in plan.iter().enumerate() {
            let seq = first_seq + place as u64;
            let sg = &mut s.segments[seg as usize];
            sg.end = at + record_bytes(ops[place].1) as u32;
            sg.max_seq = seq;
            if sg.min_seq == 0 {
                sg.min_seq = seq;
            }
        }
        s.next_seq = first_seq + ops.len() as u64;
        Ok(Some(Appended { first_seq, locs }))
    }

    /// New segments `ops` would take, given the lanes' open segments.
    fn segments_needed(&self, s: &State, ops: &[(Lane, usize)]) -> usize {
        let size = u64::from(self.geometry.segment_bytes);
        // Room left per lane (a batch touches few lanes: a list).
        let mut room: SmallVec<[(Lane, u64); 4]> = SmallVec::new();
        let mut needed = 0;
        for (lane, len) in ops {
            let need = record_bytes(*len);
            let at = match room.iter().position(|r| r.0 == *lane) {
                Some(at) => at,
                None => {
                    let left = match s.open.get(lane) {
                        Some(&seg) => size - u64::from(s.segments[seg as usize].end),
                        None => 0,
                    };
                    room.push((*lane, left));
                    room.len() - 1
                }
            };
            let left = &mut room[at].1;
            if *left < need {
                needed += 1;
                *left = size;
            }
            *left -= need;
        }
        needed
    }

    /// The segment `lane` appends a record of `bytes` bytes to, handing
    /// out a new one (its word persisted) when the open one is full; `ends`
    /// holds the ends the append under way reserved so far.
    fn segment_for(
        &self,
        s: &mut State,
        lane: Lane,
        bytes: u32,
        ends: &[(u32, u32)],
    ) -> Result<u32> {
        let size = u64::from(self.geometry.segment_bytes);
        if let Some(&seg) = s.open.get(&lane) {
            let end = ends
                .iter()
                .find(|e| e.0 == seg)
                .map_or(s.segments[seg as usize].end, |e| e.1);
            if u64::from(end) + u64::from(bytes) <= size {
                return Ok(seg);
            }
        }
        let next = *s.free.last().expect("append checked the free segments");
        if !s.segments[next as usize].prepared {
            self.prepare_free(s)?;
        }
        let seg = s.free.pop().expect("append checked the free segments");
        let sg = &mut s.segments[seg as usize];
        debug_assert!(sg.prepared, "segment {seg} handed out unprepared");
        sg.prepared = false;
        sg.word_stored = false;
        sg.end = 0;
        sg.published = 0;
        sg.max_seq = 0;
        sg.min_seq = 0;
        sg.in_use = true;
        s.open.insert(lane, seg);
        Ok(seg)
    }

    /// Stores the next generation's word (tail 0) of every free segment
    /// not prepared yet, and makes them durable with one fence (rule 2 of
    /// `docs/design.md`, "The persistent write buffer": a segment's word
    /// is durable before any record of its generation can be, or a crash
    /// could pair the old tail with new records, which would read as
    /// damage below the tail). A free segment holds nothing above the
    /// watermark, so what its old records become does not matter: under
    /// the new generation they fail their checksum past tail 0. This runs
    /// under the state lock only when a hand-out finds its segment not
    /// prepared ([`Pwb::prepare_released`] usually did it without the lock).
    fn prepare_free(&self, s: &mut State) -> Result<()> {
        self.store_free_words(s)?;
        self.pm.fence()?;
        for &i in &s.free {
            s.segments[i as usize].prepared = true;
        }
        Ok(())
    }

    /// Stores and flushes the next generation's word of every free segment
    /// whose word is not stored yet; returns them with their generations.
    fn store_free_words(&self, s: &mut State) -> Result<Vec<(u32, u32)>> {
        let mut stored = Vec::new();
        for &i in &s.free {
            let sg = &mut s.segments[i as usize];
            if sg.prepared || sg.word_stored {
                continue;
            }
            // Generation 0 marks a segment never handed out.
            sg.generation = sg.generation.wrapping_add(1).max(1);
            sg.word_stored = true;
            let word = self.geometry.word_at(i);
            self.pm.write_u64(word, segment_word(sg.generation, 0))?;
            self.pm.flush(word, 8);
            stored.push((i, sg.generation));
        }
        Ok(stored)
    }

    /// Prepares the free segments (their next generation's word durable,
    /// as [`Pwb::prepare_free`]) with the fence outside the state lock, so
    /// that appends and reads do not wait for it; the engine calls it after
    /// releasing segments. A segment handed out meanwhile was fenced by its
    /// hand-out.
    pub(crate) fn prepare_released(&self) -> Result<()> {
        let stored = self.store_free_words(&mut self.state.lock())?;
        if stored.is_empty() {
            return Ok(());
        }
        self.pm.fence()?;
        let mut s = self.state.lock();
        for (i, generation) in stored {
            let sg = &mut s.segments[i as usize];
            // Released and stored again since: that later word is not
            // covered by this fence.
            if !sg.in_use && sg.word_stored && sg.generation == generation {
                sg.prepared = true;
            }
        }
        Ok(())
    }

    /// Makes every batch appended before the call durable: one fence, then
    /// the segments' tails are published (durable with the next fence).
    pub(crate) fn sync(&self) -> Result<()> {
        let (ends, last): (Vec<(u32, u32, u32)>, u64) = {
            let s = self.state.lock();
            let ends = (0..self.geometry.segments)
                .filter_map(|i| {
                    let sg = &s.segments[i as usize];
                    (sg.end > sg.published).then_some((i, sg.generation, sg.end))
                })
                .collect();
            (ends, s.next_seq.saturating_sub(1))
        };
        if ends.is_empty() {
            // Every record lies under a published tail, stored only after
            // a fence made it durable.
            self.durable_seq.fetch_max(last, Ordering::AcqRel);
            return Ok(());
        }
        if !self.skips(Fault::SyncFence) {
            self.pm.fence()?;
        }
        // The fence covered every record stored before it began, and every
        // operation up to `last` was stored then (appends store under the
        // state lock before numbering on).
        self.durable_seq.fetch_max(last, Ordering::AcqRel);
        let mut s = self.state.lock();
        for (i, generation, end) in ends {
            let sg = &mut s.segments[i as usize];
            if sg.generation != generation || !sg.in_use || sg.published >= end {
                continue;
            }
            let word = self.geometry.word_at(i);
            self.pm.write_u64(word, segment_word(generation, end))?;
            self.pm.flush(word, 8);
            sg.published = end;
        }
        Ok(())
    }

    /// Makes every operation up to `seq` durable: nothing to do when a
    /// sync already covered it, else [`Pwb::sync`].
    pub(crate) fn sync_through(&self, seq: u64) -> Result<()> {
        if self.durable_seq.load(Ordering::Acquire) >= seq {
            return Ok(());
        }
        self.sync()
    }

    /// Declares every operation up to `watermark` durable elsewhere (in
    /// tables): persists it, then releases the segments holding nothing
    /// above it. `watermark` must end a batch. Returns how many segments
    /// were released.
    pub(crate) fn raise_watermark(&self, watermark: u64) -> Result<usize> {
        self.persist_watermark(watermark)?;
        Ok(self.release_through(watermark))
    }

    /// Makes `watermark` the persisted watermark (one store, flush and
    /// fence) unless it or a higher one already is (two flushes may raise it
    /// at once, in either order); the state lock is not held
    /// across the fence. Nothing is released: [`Pwb::release_through`]
    /// does that once this returned.
    pub(crate) fn persist_watermark(&self, watermark: u64) -> Result<()> {
        self.persist_marks(Some(watermark), &[])
    }

    /// Persists, with one fence, the watermark `watermark` (as
    /// [`Pwb::persist_watermark`]) and the released word `R` raised to the
    /// newest operation of `segments` (segment, generation; those no longer
    /// handed out in that generation are skipped), after making every
    /// operation up to that one durable in the buffer (usually a sync did).
    /// Only then may [`Pwb::release_segments`] release them: `R` tells
    /// recovery that a missing operation at or below it was released, not
    /// lost, which is true only if every operation up to it was durable
    /// when `R` was.
    pub(crate) fn persist_marks(
        &self,
        watermark: Option<u64>,
        segments: &[SegmentUse],
    ) -> Result<()> {
        let released = {
            let s = self.state.lock();
            if let Some(w) = watermark.filter(|&w| w >= s.next_seq) {
                return Err(Error::InvalidArgument(format!(
                    "write buffer watermark {w} past the last operation {}",
                    s.next_seq.saturating_sub(1)
                )));
            }
            segments
                .iter()
                .filter_map(|&(i, g)| {
                    let sg = s.segments.get(i as usize)?;
                    (sg.in_use && sg.generation == g).then_some(sg.max_seq)
                })
                .max()
                .unwrap_or(0)
        };
        if released > 0 {
            self.sync_through(released)?;
        }
        let mut persisted = self.persisted.lock();
        let mut stored = false;
        if let Some(w) = watermark.filter(|&w| w > persisted.watermark) {
            self.pm.write_u64(WATERMARK_AT, w)?;
            self.pm.flush(WATERMARK_AT, 8);
            stored = true;
        }
        if released > persisted.released {
            self.pm.write_u64(RELEASED_AT, released)?;
            self.pm.flush(RELEASED_AT, 8);
            stored = true;
        }
        if !stored {
            return Ok(());
        }
        if !self.skips(Fault::WatermarkFence) {
            self.pm.fence()?;
        }
        persisted.watermark = persisted.watermark.max(watermark.unwrap_or(0));
        persisted.released = persisted.released.max(released);
        Ok(())
    }

    /// Releases `segments` (segment, generation), whose records the owner
    /// holds elsewhere, for reuse: [`Pwb::persist_marks`] made `R` durable
    /// at or above their newest operation (never before: a segment reused
    /// first would lose, after a crash, records recovery needs to see or to
    /// know released). A segment no longer handed out in that generation
    /// is skipped. Returns how many were released. No fence, as
    /// [`Pwb::release_through`].
    pub(crate) fn release_segments(&self, segments: &[SegmentUse]) -> usize {
        let released = self.persisted.lock().released;
        let mut s = self.state.lock();
        let mut n = 0;
        for &(i, g) in segments {
            let Some(sg) = s.segments.get_mut(i as usize) else {
                continue;
            };
            if !sg.in_use || sg.generation != g {
                continue;
            }
            assert!(
                sg.max_seq <= released,
                "segment {i} released holding {} above R {released}",
                sg.max_seq
            );
            sg.in_use = false;
            sg.prepared = false;
            sg.word_stored = false;
            s.free.push(i);
            s.open.retain(|_, seg| *seg != i);
            n += 1;
        }
        n
    }

    /// Every segment handed out, with its generation.
    pub(crate) fn in_use(&self) -> Vec<SegmentUse> {
        let s = self.state.lock();
        (0..self.geometry.segments)
            .filter(|&i| s.segments[i as usize].in_use)
            .map(|i| (i, s.segments[i as usize].generation))
            .collect()
    }

    /// The generation segment `seg` is handed out in, if it is.
    pub(crate) fn generation(&self, seg: u32) -> Option<u32> {
        let s = self.state.lock();
        s.segments
            .get(seg as usize)
            .filter(|sg| sg.in_use)
            .map(|sg| sg.generation)
    }

    /// True when the record at `loc` with sequence number `seq` is still
    /// in the buffer: its segment is handed out in the generation that
    /// holds `seq`. A version link made before its segment was released
    /// (and perhaps handed out again) fails this, and the version is then
    /// in a table.
    pub(crate) fn holds_version(&self, loc: Loc, seq: u64) -> bool {
        let s = self.state.lock();
        s.segments.get(loc.segment as usize).is_some_and(|sg| {
            sg.in_use && sg.min_seq <= seq && seq <= sg.max_seq && loc.offset < sg.end
        })
    }

    /// Releases the segments holding nothing above `watermark`, which
    /// [`Pwb::persist_watermark`] made durable (rule 5: never before);
    /// returns how many. No fence: the released segments are prepared for
    /// reuse by [`Pwb::prepare_released`] or at their hand-out.
    pub(crate) fn release_through(&self, watermark: u64) -> usize {
        let persisted = self.persisted.lock().watermark;
        assert!(
            watermark <= persisted,
            "segments released below watermark {watermark}, persisted {persisted}"
        );
        let mut s = self.state.lock();
        if watermark <= s.watermark {
            return 0;
        }
        s.watermark = watermark;
        self.watermark.store(watermark, Ordering::Release);
        let mut released = 0;
        for i in 0..self.geometry.segments {
            let sg = &mut s.segments[i as usize];
            if sg.in_use && sg.max_seq != 0 && sg.max_seq <= watermark {
                sg.in_use = false;
                sg.prepared = false;
                sg.word_stored = false;
                s.free.push(i);
                s.open.retain(|_, seg| *seg != i);
                released += 1;
            }
        }
        released
    }

    /// The whole region as it stands between two of the buffer's steps
    /// (for a checkpoint): taken under the watermark's lock and the state
    /// lock, which every store to the region holds (appends, tail
    /// publications, segment words, the watermark), so the copy is what a
    /// crash would leave if every store so far were durable. The caller
    /// holds the owner's lock too, so no batch is half indexed.
    pub(crate) fn image(&self) -> Result<Vec<u8>> {
        let _append = self.append.lock();
        let _marks = self.persisted.lock();
        let _state = self.state.lock();
        let mut data = vec![0; self.pm.len() as usize];
        self.pm.read(0, &mut data)?;
        Ok(data)
    }

    /// True when `seg` is a segment of the region.
    pub(crate) fn holds(&self, seg: u32) -> bool {
        seg < self.geometry.segments
    }

    /// The sequence number the next operation takes.
    pub(crate) fn next_seq(&self) -> u64 {
        self.state.lock().next_seq
    }

    /// The clean shutdown mark (0: none), from a region that may not be
    /// formatted yet.
    pub(crate) fn clean_mark(pm: &dyn Pm) -> Result<u64> {
        if pm.read_u64(MAGIC_AT)? == 0 {
            return Ok(0);
        }
        pm.read_u64(format::CLEAN_AT)
    }

    /// Clears the clean shutdown mark durably (one fence), before anything
    /// else is written: once the buffer changes, the image no longer
    /// describes it.
    pub(crate) fn clear_clean_mark(pm: &dyn Pm) -> Result<()> {
        pm.write_u64(format::CLEAN_AT, 0)?;
        pm.persist(format::CLEAN_AT, 8)
    }

    /// Sets the clean shutdown mark to `mark` (not 0), durably: one store
    /// and one fence, which also makes the tails a sync stored durable.
    /// The caller wrote and synced the image `mark` names first, and
    /// writes nothing to the buffer after.
    pub(crate) fn set_clean_mark(&self, mark: u64) -> Result<()> {
        debug_assert_ne!(mark, 0);
        let _state = self.state.lock();
        self.pm.write_u64(format::CLEAN_AT, mark)?;
        self.pm.flush(format::CLEAN_AT, 8);
        self.pm.fence()
    }

    /// Appends the buffer's state to a clean shutdown's image
    /// (`docs/format/lightkv-image.md`, "Buffer"): geometry, watermark,
    /// next sequence number, and per segment its generation, end, newest
    /// operation and whether it is in use.
    pub(crate) fn encode_state(&self, out: &mut Vec<u8>) {
        use crate::coding::{put_u32, put_u64};
        let released = self.persisted.lock().released;
        let s = self.state.lock();
        put_u64(out, self.geometry.encode());
        put_u64(out, s.watermark);
        put_u64(out, released);
        put_u64(out, s.next_seq);
        put_u32(out, s.segments.len() as u32);
        for sg in &s.segments {
            put_u32(out, sg.generation);
            put_u32(out, sg.end);
            put_u64(out, sg.min_seq);
            put_u64(out, sg.max_seq);
            out.push(u8::from(sg.in_use));
        }
    }

    /// The buffer in `pm` as a clean shutdown's image describes it
    /// ([`Pwb::encode_state`]), without reading its records; `None` when
    /// the image does not decode or does not fit the region (its geometry
    /// or watermark differ, a segment's end is past its size). As after a
    /// recovery, no segment is open: new writes go to fresh ones.
    pub(crate) fn from_image(pm: Arc<dyn Pm>, r: &mut crate::coding::Reader<'_>) -> Option<Pwb> {
        let geometry = read_geometry(&*pm).ok()?;
        if r.u64()? != geometry.encode() {
            return None;
        }
        let watermark = r.u64()?;
        let released = r.u64()?;
        let next_seq = r.u64()?;
        if pm.read_u64(WATERMARK_AT).ok()? != watermark
            || pm.read_u64(RELEASED_AT).ok()? != released
            || next_seq <= watermark
            || next_seq <= released
        {
            return None;
        }
        if r.u32()? != geometry.segments {
            return None;
        }
        let mut segments = Vec::with_capacity(geometry.segments as usize);
        for _ in 0..geometry.segments {
            let generation = r.u32()?;
            let end = r.u32()?;
            let min_seq = r.u64()?;
            let max_seq = r.u64()?;
            let in_use = match r.u8()? {
                0 => false,
                1 => true,
                _ => return None,
            };
            if end > geometry.segment_bytes || max_seq >= next_seq || min_seq > max_seq {
                return None;
            }
            segments.push(Segment {
                generation,
                end,
                published: end,
                max_seq,
                min_seq,
                in_use,
                prepared: false,
                word_stored: false,
            });
        }
        let marks = Marks {
            watermark,
            released,
        };
        Some(Pwb::new(pm, geometry, marks, next_seq, segments))
    }

    /// A `Corruption` naming the region and the offset of `loc`.
    pub(crate) fn damage(&self, loc: Loc, reason: &str) -> Error {
        let at = self.geometry.segment_at(loc.segment) + u64::from(loc.offset);
        corruption(&*self.pm, at, reason)
    }

    /// Whether segment `seg` is handed out (tests check the index's counts
    /// against it).
    #[cfg(test)]
    pub(crate) fn is_in_use(&self, seg: u32) -> bool {
        self.state.lock().segments[seg as usize].in_use
    }

    /// What `f` makes of the first `n` payload bytes (fewer when the
    /// payload is shorter), seen in place, of the record at `loc`, which the caller's index holds (it lies below
    /// its segment's end, and its segment is not released while the index
    /// holds it), read without the state lock and without its checksum:
    /// for telling keys apart, where a mismatch is then read in full with
    /// [`Pwb::read`] (a damaged record must not pass for another key's).
    /// `None` when the bytes there cannot start a record.
    pub(crate) fn peek_with<P>(
        &self,
        loc: Loc,
        n: usize,
        f: impl FnOnce(&[u8]) -> P,
    ) -> Result<Option<P>> {
        let size = u64::from(self.geometry.segment_bytes);
        let offset = u64::from(loc.offset);
        if loc.segment >= self.geometry.segments || offset + RECORD_HEADER_BYTES > size {
            return Ok(None);
        }
        let at = self.geometry.segment_at(loc.segment) + offset;
        let mut b = [0u8; RECORD_HEADER_BYTES as usize];
        self.pm.read(at, &mut b)?;
        let h = format::RecordHeader::decode(&b);
        if !h.plausible() || offset + record_bytes(h.len as usize) > size {
            return Ok(None);
        }
        let mut f = Some(f);
        let mut made = None;
        self.pm
            .read_with(at + RECORD_HEADER_BYTES, n.min(h.len as usize), &mut |p| {
                made = f.take().map(|f| f(p));
            })?;
        Ok(made)
    }

    /// The record at `loc`: (sequence number, payload). A record that is
    /// not whole is a `Corruption` naming the region and offset.
    #[cfg(test)]
    pub(crate) fn read(&self, loc: Loc) -> Result<(u64, Vec<u8>)> {
        self.read_with(loc, <[u8]>::to_vec)
    }

    /// The record at `loc`: its sequence number and what `f` makes of its
    /// payload, which `f` sees in place (no zero-filled copy is made for
    /// it: the flush units' reads allocated and zeroed one per record,
    /// 6% of the writer's samples). A record that is not whole is a
    /// `Corruption` naming the region and offset (`f` is not called).
    pub(crate) fn read_with<P>(&self, loc: Loc, f: impl FnOnce(&[u8]) -> P) -> Result<(u64, P)> {
        let generation = match self.state.lock().segments.get(loc.segment as usize) {
            Some(sg) if sg.in_use && loc.offset < sg.end => sg.generation,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "write buffer location {loc:?} holds no record"
                )))
            }
        };
        let start = self.geometry.segment_at(loc.segment);
        let at = start + u64::from(loc.offset);
        let end = start + u64::from(self.geometry.segment_bytes);
        match read_record_with(&*self.pm, generation, at, end, f)? {
            Read::Record(h, made) => Ok((h.seq, made)),
            Read::End => Err(corruption(
                &*self.pm,
                at,
                "no record where the index points",
            )),
            Read::Invalid(why) => Err(corruption(&*self.pm, at, why)),
        }
    }
}

pub(crate) fn corruption(pm: &dyn Pm, offset: u64, reason: &str) -> Error {
    Error::Corruption {
        file: pm.name().to_path_buf(),
        offset,
        reason: format!("write buffer: {reason}"),
    }
}

/// Formats a zeroed region: geometry and check word first, made durable,
/// then the magic word, so a crash leaves either no buffer or a whole one.
fn format(pm: &dyn Pm, segment_bytes: u64) -> Result<Geometry> {
    let geometry = Geometry::for_region(pm.name(), pm.len(), segment_bytes)?;
    pm.write_u64(GEOMETRY_AT, geometry.encode())?;
    pm.write_u64(CHECK_AT, check_word(geometry.encode()))?;
    pm.write_u64(WATERMARK_AT, 0)?;
    pm.write_u64(RELEASED_AT, 0)?;
    pm.persist(0, format::HEADER_BYTES)?;
    pm.write_u64(MAGIC_AT, MAGIC)?;
    pm.persist(MAGIC_AT, 8)?;
    Ok(geometry)
}

fn read_geometry(pm: &dyn Pm) -> Result<Geometry> {
    if pm.read_u64(MAGIC_AT)? != MAGIC {
        return Err(corruption(pm, MAGIC_AT, "not a write buffer (bad magic)"));
    }
    let word = pm.read_u64(GEOMETRY_AT)?;
    let check = pm.read_u64(CHECK_AT)?;
    let version = (check >> 32) as u32;
    if version != format::VERSION && version != format::VERSION_1 {
        return Err(Error::UnsupportedVersion {
            file: pm.name().to_path_buf(),
            version,
        });
    }
    if check != format::check_word_of(word, version) {
        return Err(corruption(pm, GEOMETRY_AT, "header checksum mismatch"));
    }
    if version == format::VERSION_1 {
        // Version 1 never stored `R` (its word is 0, none). Upgraded before
        // anything can store it, so that a binary that knows no `R`
        // refuses the region rather than recovering it without `R`.
        pm.write_u64(CHECK_AT, check_word(word))?;
        pm.persist(CHECK_AT, 8)?;
    }
    let geometry = Geometry::decode(word);
    if geometry.segments == 0
        || u64::from(geometry.segment_bytes) < format::MIN_SEGMENT_BYTES
        || geometry.region_bytes() > pm.len()
    {
        return Err(corruption(
            pm,
            GEOMETRY_AT,
            "geometry does not fit the region",
        ));
    }
    Ok(geometry)
}
