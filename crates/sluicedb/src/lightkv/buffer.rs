//! The persistent write buffer under its RH-Tree (LightKV, ICDE, §III-A..D):
//! the buffer holds the records, the tree's leaves hold their places.
//!
//! - **Write**: each operation goes to its partition's lane (the top leaf's
//!   segment chain in the buffer); the batch is appended as one, then each
//!   record's place is put into its partition's top leaf.
//! - **Versions**: a record names the key's previous version in the same
//!   top leaf (its place and sequence number), or in its own batch. A read
//!   at a snapshot walks that chain down to the snapshot, leaf by leaf,
//!   newest first, confirming the full key of every record it reaches. A link
//!   at or below the watermark `W` is not followed: that version is in a
//!   table, and its segment may be reused.
//! - **Segments**: each leaf names the segments it indexes (a leaf split off
//!   another inherits its names) and each segment counts the leaves naming
//!   it. The buffer releases segments by raising `W` (rule 5 of "The
//!   persistent write buffer"): `W` rises to the last batch end below every
//!   live leaf's oldest operation, so a segment some leaf names always holds
//!   an operation above `W` and is never released.
//! - **Flush units**: the oldest linked leaf of a partition, its entries
//!   sorted, with every version a snapshot at or above the oldest one may
//!   need; the leaf serves reads until [`LightBuffer::flushed`].
//! - **Recovery**: the tree is rebuilt by putting the recovered records in
//!   sequence order, skipping versions the tables already hold.
//!
//! Not thread-safe: the owner serializes calls (a read and a watermark raise
//! must not interleave, or a read could follow a link into a reused segment).
//! A write's first two steps ([`LightBuffer::plan`], [`LightBuffer::store`])
//! take `&self` and may run beside reads, provided nothing changes the tree
//! until its last ([`LightBuffer::index_stored`]).
//! Record payload: `docs/format/pwb.md`, "LightKV payload".

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::index::rh::{LeafId, RhParams, RhTree};
use crate::pm::Pm;
use crate::pwb::{Appended, Lane, Loc, Pwb, RecoveredRecord, SegmentUse};

/// The first word of a clean shutdown's image ("LKVIMG02": since the
/// released word and each segment's oldest operation; an image of the first
/// layout fails it and the buffer is scanned).
const IMAGE_MAGIC: u64 = u64::from_le_bytes(*b"LKVIMG02");

/// Payload header: kind (1), previous version's sequence number (8) and
/// place (8), key length (4).
const PAYLOAD_HEADER: usize = 21;
const KIND_PUT: u8 = 1;
const KIND_DELETE: u8 = 2;

/// One operation of a write: a put, or a delete when `value` is `None`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Op<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) value: Option<&'a [u8]>,
}

/// What the buffer says of a key at a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    Value(Vec<u8>),
    Deleted,
    /// No version at or below the snapshot here: ask the tables.
    NotHere,
}

/// One version in a flush unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FlushEntry {
    pub(crate) key: Vec<u8>,
    pub(crate) seq: u64,
    pub(crate) value: Option<Vec<u8>>,
}

/// A linked leaf's versions, sorted by key, then newest first; handed to a
/// flush job, which calls [`LightBuffer::flushed`] with `leaf` once its
/// table is installed.
#[derive(Debug, Clone)]
pub(crate) struct FlushUnit {
    pub(crate) leaf: u32,
    pub(crate) entries: Vec<FlushEntry>,
    /// The newest operation among `entries`.
    pub(crate) newest: u64,
}

/// A batch's lanes and version links, taken from the tree before its
/// records are stored ([`LightBuffer::plan`]).
/// Its lists hold a few operations inline: most batches are one put, and
/// five allocations per write were measurable.
pub(crate) struct Plan {
    /// Per operation, its partition, while the tree has `partitions`
    /// partitions (a split may move a key to another).
    parts: SmallVec<[LeafId; PLAN_INLINE]>,
    partitions: usize,
    /// Per operation, its lane and payload length.
    lanes: SmallVec<[(Lane, usize); PLAN_INLINE]>,
    /// Per operation, the key's previous version in its top leaf
    /// (sequence number, place; (0, 0): none).
    prevs: SmallVec<[(u64, u64); PLAN_INLINE]>,
    /// Per operation, the same key's last earlier operation in the batch.
    earlier: SmallVec<[Option<usize>; PLAN_INLINE]>,
}

/// Operations a [`Plan`] holds without allocating.
const PLAN_INLINE: usize = 4;

/// Batches up to this many operations find a key's earlier operation in
/// the batch by looking back over them, without a map.
const PLAN_SCAN_OPS: usize = 16;

/// A decoded record.
struct Record {
    seq: u64,
    kind: u8,
    prev_seq: u64,
    prev: u64,
    key: Vec<u8>,
    value: Vec<u8>,
}

/// Appends `op`'s payload, naming its previous version, to `p`.
fn encode(op: &Op<'_>, prev_seq: u64, prev: u64, p: &mut Vec<u8>) {
    let value = op.value.unwrap_or(&[]);
    p.push(if op.value.is_some() {
        KIND_PUT
    } else {
        KIND_DELETE
    });
    p.extend_from_slice(&prev_seq.to_le_bytes());
    p.extend_from_slice(&prev.to_le_bytes());
    p.extend_from_slice(&(op.key.len() as u32).to_le_bytes());
    p.extend_from_slice(op.key);
    p.extend_from_slice(value);
}

fn payload_len(op: &Op<'_>) -> usize {
    PAYLOAD_HEADER + op.key.len() + op.value.map_or(0, <[u8]>::len)
}

/// Key and value are copied out of the payload `p` into allocations of
/// their own, sized to them: no zero-filled buffer, no second copy.
fn parse(p: &[u8], seq: u64) -> std::result::Result<Record, &'static str> {
    if p.len() < PAYLOAD_HEADER {
        return Err("record shorter than its header");
    }
    let u64_at = |i: usize| u64::from_le_bytes(p[i..i + 8].try_into().expect("8 bytes"));
    let kind = p[0];
    let (prev_seq, prev) = (u64_at(1), u64_at(9));
    let key_len = u32::from_le_bytes(p[17..21].try_into().expect("4 bytes")) as usize;
    if !(kind == KIND_PUT || kind == KIND_DELETE) || PAYLOAD_HEADER + key_len > p.len() {
        return Err("record payload out of range");
    }
    // Room for an internal key's trailer, which a flush unit appends.
    let mut key = Vec::with_capacity(key_len + 8);
    key.extend_from_slice(&p[PAYLOAD_HEADER..PAYLOAD_HEADER + key_len]);
    let value = p[PAYLOAD_HEADER + key_len..].to_vec();
    Ok(Record {
        seq,
        kind,
        prev_seq,
        prev,
        key,
        value,
    })
}

/// A record's payload as `sluice dump` shows it: (delete, key, value,
/// previous version's sequence number); `None` when it does not decode.
pub(crate) fn describe_payload(p: &[u8]) -> Option<(bool, &[u8], &[u8], u64)> {
    if p.len() < PAYLOAD_HEADER || !(p[0] == KIND_PUT || p[0] == KIND_DELETE) {
        return None;
    }
    let prev_seq = u64::from_le_bytes(p[1..9].try_into().ok()?);
    let key_len = u32::from_le_bytes(p[17..21].try_into().ok()?) as usize;
    let key = p.get(PAYLOAD_HEADER..PAYLOAD_HEADER.checked_add(key_len)?)?;
    let value = &p[PAYLOAD_HEADER + key_len..];
    Some((p[0] == KIND_DELETE, key, value, prev_seq))
}

/// The key of recovered record `r`, in place.
fn record_key<'a>(pwb: &Pwb, r: &'a RecoveredRecord) -> Result<&'a [u8]> {
    describe_payload(&r.payload)
        .map(|(_, key, _, _)| key)
        .ok_or_else(|| pwb.damage(r.loc, "record payload out of range"))
}

/// The clean shutdown mark naming `image`: its hash, never 0.
pub(crate) fn image_mark(image: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(image) | 1
}

fn record(pwb: &Pwb, offset: u64) -> Result<Record> {
    let loc = Loc::from_u64(offset);
    let (seq, parsed) = pwb.read_with(loc, |p| parse(p, 0))?;
    let mut r = parsed.map_err(|why| pwb.damage(loc, why))?;
    r.seq = seq;
    Ok(r)
}

/// The key of the record at `offset`, for the tree; an error is kept in
/// `err` (and no key matches).
fn key_at(pwb: &Pwb, offset: u64, err: &RefCell<Option<Error>>) -> Vec<u8> {
    match record(pwb, offset) {
        Ok(r) => r.key,
        Err(e) => {
            err.borrow_mut().get_or_insert(e);
            Vec::new()
        }
    }
}

/// True when the record at `offset` is `key`'s: only its key is read when
/// it is (the caller reads the record in full, checked, for its value or
/// sequence number). One that is not is read in full, so that damage is
/// told from a signature collision: damage goes to `err` (and no key
/// matches), never taken for another key, which would let a read fall
/// through to an older version.
fn is_key_at(pwb: &Pwb, offset: u64, key: &[u8], err: &RefCell<Option<Error>>) -> bool {
    let want = PAYLOAD_HEADER + key.len();
    if let Ok(Some(true)) = pwb.peek_with(Loc::from_u64(offset), want, |p| payload_is_key(p, key)) {
        return true;
    }
    match record(pwb, offset) {
        Ok(r) => r.key == key,
        Err(e) => {
            err.borrow_mut().get_or_insert(e);
            false
        }
    }
}

/// True when payload `p` (whole, or its first bytes) is a record of `key`.
fn payload_is_key(p: &[u8], key: &[u8]) -> bool {
    let key_len = p
        .get(17..21)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize);
    key_len == Some(key.len()) && p.get(PAYLOAD_HEADER..PAYLOAD_HEADER + key.len()) == Some(key)
}

/// The sequence number of the record at `offset`, which must be `key`'s:
/// read whole and checked, without copying it (a write naming its key's
/// previous version needs only this).
fn seq_of(pwb: &Pwb, offset: u64, key: &[u8]) -> Result<u64> {
    let loc = Loc::from_u64(offset);
    match pwb.read_with(loc, |p| payload_is_key(p, key))? {
        (seq, true) => Ok(seq),
        (_, false) => Err(pwb.damage(loc, "the index's record of a key holds another key")),
    }
}

/// A leaf as the buffer tracks it, in the same order as its partition's
/// chain (top leaf first).
#[derive(Debug, Clone)]
struct LeafMeta {
    /// Unique; also the lane a top leaf appends to.
    uid: u32,
    /// Segments holding records it indexes (or that a leaf it was split
    /// from indexed).
    segments: BTreeSet<u32>,
    /// Its oldest operation (`u64::MAX`: none).
    min_seq: u64,
    /// Handed out in a flush unit.
    handed_out: bool,
    /// Raised whenever what the leaf indexes may have changed (a put into
    /// it, a split of its partition): a cursor's sorted copy of the leaf
    /// ([`LightBuffer::leaf_versions`]) is current while this is.
    version: u64,
}

/// A leaf a cursor reads: its partition and place in the chain, with the
/// leaf's uid and version, which name its sorted copy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeafRef {
    pub(crate) id: LeafId,
    pub(crate) depth: usize,
    pub(crate) uid: u32,
    pub(crate) version: u64,
}

/// The write buffer and its RH-Tree.
pub(crate) struct LightBuffer {
    /// Shared with the owner, which fences through it without holding the
    /// buffer (`Pwb`'s fences need no lock of ours).
    pwb: Arc<Pwb>,
    tree: RhTree,
    /// Per partition, its leaves' metadata, top leaf first.
    leaves: Vec<Vec<LeafMeta>>,
    /// Per segment, the leaves naming it.
    counts: HashMap<u32, u32>,
    next_uid: u32,
    next_seq: u64,
    /// Last operations of the batches above the watermark.
    batch_ends: BTreeSet<u64>,
    /// Mean payload bytes of the records written since open (a running
    /// mean; 0 before the first), for [`LightBuffer::make_room_early`].
    mean_record: u64,
}

impl LightBuffer {
    /// Opens the buffer in `pm` (formatting it with segments of
    /// `segment_bytes` if new) and rebuilds the tree from the records it
    /// keeps, in sequence order; `in_tables(key, seq)` says whether the
    /// tables hold that version or a newer one of the key, which is then not
    /// indexed (a stale record that outlived its leaf's flush must not
    /// shadow a newer version in a table). It is asked from several threads
    /// at once (`LightBuffer::scan`).
    pub(crate) fn open(
        pm: Arc<dyn Pm>,
        segment_bytes: u64,
        params: RhParams,
        in_tables: impl Fn(&[u8], u64) -> Result<bool> + Sync,
    ) -> Result<LightBuffer> {
        Ok(Self::open_with_image(pm, segment_bytes, params, None, in_tables)?.0)
    }

    /// Like [`LightBuffer::open`], trying first the image a clean shutdown
    /// left (`image`, read by the caller) when the region's clean mark
    /// names it (its hash); true when it was loaded. The mark is cleared,
    /// durably, before anything else is written: from then on the image no
    /// longer describes the buffer, and a crash reopens it by scanning.
    pub(crate) fn open_with_image(
        pm: Arc<dyn Pm>,
        segment_bytes: u64,
        params: RhParams,
        image: Option<&[u8]>,
        in_tables: impl Fn(&[u8], u64) -> Result<bool> + Sync,
    ) -> Result<(LightBuffer, bool)> {
        let mark = Pwb::clean_mark(&*pm)?;
        if mark != 0 {
            Pwb::clear_clean_mark(&*pm)?;
            let loaded = image
                .filter(|i| image_mark(i) == mark)
                .and_then(|i| Self::from_image(pm.clone(), params, i));
            if let Some(buf) = loaded {
                return Ok((buf, true));
            }
        }
        Ok((Self::scan(pm, segment_bytes, params, in_tables)?, false))
    }

    /// Opens the buffer by reading every record (§V, after a crash). The
    /// segments are read and checked in parallel (`Pwb::open`), and so are
    /// the recovered records' keys and their lookups in the tables
    /// (`in_tables`, a table read per record); only putting them into the
    /// tree, in sequence order, is one thread's work.
    fn scan(
        pm: Arc<dyn Pm>,
        segment_bytes: u64,
        params: RhParams,
        in_tables: impl Fn(&[u8], u64) -> Result<bool> + Sync,
    ) -> Result<LightBuffer> {
        let (pwb, recovered) = Pwb::open(pm, segment_bytes)?;
        let pwb = Arc::new(pwb);
        let tree = RhTree::new(params);
        let mut buf = LightBuffer {
            pwb,
            leaves: Vec::new(),
            counts: HashMap::new(),
            next_uid: 0,
            next_seq: recovered.last_seq + 1,
            batch_ends: BTreeSet::new(),
            tree,
            mean_record: 0,
        };
        for _ in 0..buf.tree.partitions() {
            let meta = buf.new_meta();
            buf.leaves.push(vec![meta]);
        }
        let pwb = &buf.pwb;
        let in_tables = &in_tables;
        // Per record, whether the tables hold its version (or a newer one),
        // one piece per core.
        let held =
            crate::parallel::in_parts(&recovered.records, crate::parallel::cpus(), |rs, _| {
                rs.iter()
                    .map(|r| in_tables(record_key(pwb, r)?, r.seq))
                    .collect::<Result<Vec<bool>>>()
            })
            .into_iter()
            .collect::<Result<Vec<Vec<bool>>>>()?
            .concat();
        for (r, held) in recovered.records.iter().zip(held) {
            if r.place + 1 == r.count {
                buf.batch_ends.insert(r.seq);
            }
            if !held {
                let key = record_key(&buf.pwb, r)?;
                buf.index(key, None, r.seq, r.loc)?;
            }
        }
        // Segments whose kept records the tables all hold are named by no
        // leaf: released now (by `R`) rather than once the watermark
        // passes them.
        let unnamed: Vec<SegmentUse> = buf
            .pwb
            .in_use()
            .into_iter()
            .filter(|(s, _)| !buf.counts.contains_key(s))
            .collect();
        if !unnamed.is_empty() {
            buf.pwb.persist_marks(None, &unnamed)?;
            buf.pwb.release_segments(&unnamed);
        }
        Ok(buf)
    }

    /// The image a clean shutdown leaves (`docs/format/lightkv-image.md`):
    /// the buffer's segments, the tree, and the leaves' metadata, so that
    /// [`LightBuffer::from_image`] can rebuild all of it without reading a
    /// record. Flush units handed out and not flushed go back to waiting.
    pub(crate) fn encode_image(&self) -> Vec<u8> {
        use crate::coding::{put_u32, put_u64};
        let mut out = Vec::new();
        put_u64(&mut out, IMAGE_MAGIC);
        self.pwb.encode_state(&mut out);
        self.tree.encode_into(&mut out);
        put_u32(&mut out, self.next_uid);
        put_u64(&mut out, self.next_seq);
        put_u32(&mut out, self.batch_ends.len() as u32);
        for &e in &self.batch_ends {
            put_u64(&mut out, e);
        }
        for chain in &self.leaves {
            put_u32(&mut out, chain.len() as u32);
            for m in chain {
                put_u32(&mut out, m.uid);
                put_u64(&mut out, m.min_seq);
                put_u32(&mut out, m.segments.len() as u32);
                for &seg in &m.segments {
                    put_u32(&mut out, seg);
                }
            }
        }
        out
    }

    /// The buffer in `pm` as `image` describes it; `None` when the image
    /// does not decode or does not hold together with the region or with
    /// itself (the caller then scans the buffer).
    fn from_image(pm: Arc<dyn Pm>, params: RhParams, image: &[u8]) -> Option<LightBuffer> {
        let mut r = crate::coding::Reader::new(image);
        if r.u64()? != IMAGE_MAGIC {
            return None;
        }
        let pwb = Arc::new(Pwb::from_image(pm, &mut r)?);
        let tree = RhTree::decode(params, &mut r)?;
        let next_uid = r.u32()?;
        let next_seq = r.u64()?;
        let ends = r.u32()? as usize;
        let mut batch_ends = BTreeSet::new();
        for _ in 0..ends {
            batch_ends.insert(r.u64()?);
        }
        let mut leaves = Vec::with_capacity(tree.partitions());
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for id in 0..tree.partitions() {
            let n = r.u32()? as usize;
            if n != tree.partition(id).1 {
                return None;
            }
            let mut chain = Vec::with_capacity(n);
            for _ in 0..n {
                let uid = r.u32()?;
                let min_seq = r.u64()?;
                let segs = r.u32()? as usize;
                let mut segments = BTreeSet::new();
                for _ in 0..segs {
                    let seg = r.u32()?;
                    if !pwb.holds(seg) {
                        return None;
                    }
                    segments.insert(seg);
                    *counts.entry(seg).or_default() += 1;
                }
                if uid > next_uid {
                    return None;
                }
                chain.push(LeafMeta {
                    uid,
                    segments,
                    min_seq,
                    handed_out: false,
                    version: 0,
                });
            }
            leaves.push(chain);
        }
        let last = next_seq.checked_sub(1)?;
        if !r.is_empty()
            || batch_ends.last().is_some_and(|&e| e > last)
            || pwb.next_seq() != next_seq
        {
            return None;
        }
        Some(LightBuffer {
            pwb,
            tree,
            leaves,
            counts,
            next_uid,
            next_seq,
            batch_ends,
            mean_record: 0,
        })
    }

    fn new_meta(&mut self) -> LeafMeta {
        self.next_uid += 1;
        LeafMeta {
            uid: self.next_uid,
            segments: BTreeSet::new(),
            min_seq: u64::MAX,
            handed_out: false,
            version: 0,
        }
    }

    /// The last operation written (0: none).
    pub(crate) fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// The buffer's watermark: every operation up to it is in tables.
    pub(crate) fn watermark(&self) -> u64 {
        self.pwb.watermark()
    }

    /// The tree (for its statistics).
    pub(crate) fn tree(&self) -> &RhTree {
        &self.tree
    }

    /// The buffer's records, for fences (`sync`, `sync_through`,
    /// `persist_watermark`, `prepare_released`) made without the owner's lock.
    pub(crate) fn pwb(&self) -> Arc<Pwb> {
        Arc::clone(&self.pwb)
    }

    /// Makes every write so far durable (one fence).
    pub(crate) fn sync(&self) -> Result<()> {
        self.pwb.sync()
    }

    fn record(&self, offset: u64) -> Result<Record> {
        record(&self.pwb, offset)
    }

    /// Writes one batch; its operations take the sequence numbers after
    /// [`LightBuffer::last_seq`]. Returns the first one, or `None` having
    /// written nothing when the buffer is full: the caller flushes units
    /// ([`LightBuffer::make_room`]) and tries again.
    pub(crate) fn write(&mut self, ops: &[Op<'_>]) -> Result<Option<u64>> {
        let plan = self.plan(ops)?;
        let Some(stored) = self.store(ops, &plan)? else {
            return Ok(None);
        };
        self.index_stored(ops, &plan, stored).map(Some)
    }

    /// The first step of [`LightBuffer::write`], reading only: each
    /// operation's lane and the version its record will name. The owner
    /// may hold its lock shared for this step and the next
    /// ([`LightBuffer::store`]), so that reads go on meanwhile, provided
    /// nothing changes the tree before [`LightBuffer::index_stored`].
    pub(crate) fn plan(&self, ops: &[Op<'_>]) -> Result<Plan> {
        let mut parts = SmallVec::with_capacity(ops.len());
        let mut lanes = SmallVec::with_capacity(ops.len());
        let mut prevs = SmallVec::with_capacity(ops.len());
        let mut last_in_batch: HashMap<&[u8], usize> = HashMap::new();
        let mut earlier = SmallVec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            let id = self.tree.partition_of(op.key);
            parts.push(id);
            lanes.push((self.leaves[id][0].uid as Lane, payload_len(op)));
            earlier.push(if ops.len() <= PLAN_SCAN_OPS {
                ops[..i].iter().rposition(|o| o.key == op.key)
            } else {
                last_in_batch.insert(op.key, i)
            });
            // The previous version in the top leaf only: a version in an
            // older leaf is found by going down the chain.
            let err = RefCell::new(None);
            let prev = self
                .tree
                .get_in(id, 0, op.key, |o| is_key_at(&self.pwb, o, op.key, &err));
            if let Some(e) = err.into_inner() {
                return Err(e);
            }
            prevs.push(match prev {
                Some(o) => (seq_of(&self.pwb, o, op.key)?, o),
                None => (0, 0),
            });
        }
        Ok(Plan {
            parts,
            partitions: self.tree.partitions(),
            lanes,
            prevs,
            earlier,
        })
    }

    /// The second step: stores the records (no fence), or returns `None`,
    /// having stored nothing, when the buffer has no room for them.
    pub(crate) fn store(&self, ops: &[Op<'_>], plan: &Plan) -> Result<Option<Appended>> {
        let first_seq = self.next_seq;
        let appended = self.pwb.append_with(&plan.lanes, |i, locs, out| {
            let (prev_seq, prev) = match plan.earlier[i] {
                Some(j) => (first_seq + j as u64, locs[j].to_u64()),
                None => plan.prevs[i],
            };
            encode(&ops[i], prev_seq, prev, out)
        })?;
        debug_assert!(appended.as_ref().is_none_or(|a| a.first_seq == first_seq));
        Ok(appended)
    }

    /// The last step: puts the stored records into the tree (splitting and
    /// linking leaves as they fill); returns the batch's first sequence
    /// number.
    pub(crate) fn index_stored(
        &mut self,
        ops: &[Op<'_>],
        plan: &Plan,
        stored: Appended,
    ) -> Result<u64> {
        let first_seq = stored.first_seq;
        if first_seq != self.next_seq {
            return Err(Error::InvalidArgument(format!(
                "write buffer stored a batch at {first_seq}, the tree expected {}",
                self.next_seq
            )));
        }
        let bytes: usize = ops.iter().map(payload_len).sum();
        let mean = (bytes / ops.len().max(1)) as u64;
        self.mean_record = if self.mean_record == 0 {
            mean
        } else {
            (self.mean_record * 7 + mean) / 8
        };
        self.next_seq = first_seq + ops.len() as u64;
        self.batch_ends.insert(self.next_seq - 1);
        for (i, op) in ops.iter().enumerate() {
            // The plan's partition, unless a split since moved keys.
            let part = (self.tree.partitions() == plan.partitions).then_some(plan.parts[i]);
            self.index(op.key, part, first_seq + i as u64, stored.locs[i])?;
        }
        Ok(first_seq)
    }

    /// Puts record `loc` (operation `seq` on `key`) into its partition's top
    /// leaf (`part` when the caller knows it), keeping leaf metadata in step
    /// with splits and links.
    fn index(&mut self, key: &[u8], part: Option<LeafId>, seq: u64, loc: Loc) -> Result<()> {
        let from = part.unwrap_or_else(|| self.tree.partition_of(key));
        // The put (or a split it makes) changes the top leaf.
        self.leaves[from][0].version += 1;
        let (parts, links) = (self.tree.partitions(), self.tree.stats().links);
        let err = RefCell::new(None);
        let pwb = &self.pwb;
        let id = self.tree.put_with(
            key,
            loc.to_u64(),
            |o| is_key_at(pwb, o, key, &err),
            |o| key_at(pwb, o, &err),
        );
        if let Some(e) = err.into_inner() {
            return Err(e);
        }
        // Splits cut only a partition of one leaf, and only `from`; each new
        // partition's leaf may index records `from`'s leaf named.
        for _ in parts..self.tree.partitions() {
            let mut meta = self.new_meta();
            meta.segments = self.leaves[from][0].segments.clone();
            meta.min_seq = self.leaves[from][0].min_seq;
            self.count(&meta.segments, true);
            self.leaves.push(vec![meta]);
        }
        if self.tree.stats().links > links {
            let meta = self.new_meta();
            self.leaves[id].insert(0, meta);
        }
        let top = &mut self.leaves[id][0];
        top.version += 1;
        top.min_seq = top.min_seq.min(seq);
        if top.segments.insert(loc.segment) {
            *self.counts.entry(loc.segment).or_default() += 1;
        }
        Ok(())
    }

    fn count(&mut self, segments: &BTreeSet<u32>, up: bool) {
        for s in segments {
            let c = self.counts.entry(*s).or_default();
            if up {
                *c += 1;
            } else {
                *c -= 1;
                if *c == 0 {
                    self.counts.remove(s);
                }
            }
        }
    }

    /// Whether a version link to (`prev_seq`, `prev`) leads to a record
    /// still in the buffer: none at or below the watermark does (that
    /// version is in a table, its segment perhaps reused), nor one whose
    /// segment was released since the link was made (every leaf naming it
    /// was flushed: the version is in a table) and perhaps handed out again
    /// (the generation then holding it starts above `prev_seq`).
    fn follows(&self, prev_seq: u64, prev: u64, watermark: u64) -> bool {
        prev_seq > watermark && self.pwb.holds_version(Loc::from_u64(prev), prev_seq)
    }

    /// The newest version of `key` at or below `snapshot` (a batch end) in
    /// the buffer.
    pub(crate) fn get(&self, key: &[u8], snapshot: u64) -> Result<Lookup> {
        Ok(match self.get_versioned(key, snapshot)? {
            Some((_, Some(v))) => Lookup::Value(v),
            Some((_, None)) => Lookup::Deleted,
            None => Lookup::NotHere,
        })
    }

    /// Like [`LightBuffer::get`], with the version's sequence number:
    /// `Some((seq, None))` is a tombstone, `None` sends the read to the
    /// tables.
    pub(crate) fn get_versioned(
        &self,
        key: &[u8],
        snapshot: u64,
    ) -> Result<Option<(u64, Option<Vec<u8>>)>> {
        let id = self.tree.partition_of(key);
        let watermark = self.pwb.watermark();
        for depth in 0..self.leaves[id].len() {
            let err = RefCell::new(None);
            let found = self
                .tree
                .get_in(id, depth, key, |o| is_key_at(&self.pwb, o, key, &err));
            if let Some(e) = err.into_inner() {
                return Err(e);
            }
            let Some(mut offset) = found else { continue };
            loop {
                let r = self.record(offset)?;
                if r.key != key {
                    return Err(self
                        .pwb
                        .damage(Loc::from_u64(offset), "a version link leads to another key"));
                }
                if r.seq <= snapshot {
                    let value = (r.kind == KIND_PUT).then_some(r.value);
                    return Ok(Some((r.seq, value)));
                }
                if !self.follows(r.prev_seq, r.prev, watermark) {
                    break;
                }
                offset = r.prev;
            }
        }
        Ok(None)
    }

    /// The smallest key of every partition but the first, in key order: the
    /// keys at which flush units are cut (a leaf's keys lie between two of
    /// them). Splits only add cuts.
    pub(crate) fn partition_cuts(&self) -> Vec<Vec<u8>> {
        let order = self.tree.in_key_order();
        order
            .iter()
            .skip(1)
            .map(|&id| self.tree.partition(id).0.lower_bound())
            .collect()
    }

    /// Every partition's leaves, partitions in key order (each one's keys
    /// all sort before the next one's: zero padding keeps partitions
    /// contiguous ranges), each with its lower bound and its chain, newest
    /// first. For cursors, which merge each partition's leaves lazily
    /// ([`LightBuffer::leaf_versions`] gives a leaf's sorted versions).
    pub(crate) fn partition_leaves(&self) -> Vec<(Vec<u8>, Vec<LeafRef>)> {
        self.tree
            .in_key_order()
            .into_iter()
            .map(|id| {
                let chain = self.leaves[id]
                    .iter()
                    .enumerate()
                    .map(|(depth, m)| LeafRef {
                        id,
                        depth,
                        uid: m.uid,
                        version: m.version,
                    })
                    .collect();
                (self.tree.partition(id).0.lower_bound(), chain)
            })
            .collect()
    }

    /// Every version leaf `leaf` holds above the watermark (its entries and
    /// the versions their links reach while still in the buffer), sorted by
    /// key, newest first. A version whose leaf was flushed but that a newer
    /// record still links to may come too (the tables hold the same key,
    /// sequence number and value).
    pub(crate) fn leaf_versions(&self, leaf: LeafRef) -> Result<Vec<FlushEntry>> {
        let watermark = self.pwb.watermark();
        let mut entries = Vec::new();
        for mut offset in self.tree.offsets_in(leaf.id, leaf.depth) {
            loop {
                let r = self.record(offset)?;
                let (prev, prev_seq, seq) = (r.prev, r.prev_seq, r.seq);
                let value = (r.kind == KIND_PUT).then_some(r.value);
                entries.push(FlushEntry {
                    key: r.key,
                    seq,
                    value,
                });
                if !self.follows(prev_seq, prev, watermark) {
                    break;
                }
                offset = prev;
            }
        }
        entries.sort_by(|a, b| a.key.cmp(&b.key).then(b.seq.cmp(&a.seq)));
        entries.dedup_by(|a, b| a.key == b.key && a.seq == b.seq);
        Ok(entries)
    }

    /// Links every top leaf that indexes something, so that each can be
    /// flushed (a full flush of the buffer); returns how many.
    pub(crate) fn link_all(&mut self) -> usize {
        let mut n = 0;
        for id in 0..self.leaves.len() {
            if self.leaves[id][0].min_seq != u64::MAX {
                self.tree.link(id);
                let meta = self.new_meta();
                self.leaves[id].insert(0, meta);
                n += 1;
            }
        }
        n
    }

    /// Segments in the buffer, and how many are free.
    pub(crate) fn segments(&self) -> (u32, u32) {
        self.pwb.segments()
    }

    /// Operations above the watermark (written, not yet all in tables).
    pub(crate) fn operations(&self) -> u64 {
        self.last_seq().saturating_sub(self.pwb.watermark())
    }

    /// Leaves per partition chain, in key order (for `sluice info`).
    pub(crate) fn chain_lengths(&self) -> Vec<usize> {
        self.tree
            .in_key_order()
            .into_iter()
            .map(|id| self.leaves[id].len())
            .collect()
    }

    /// A flushable leaf: the oldest leaf of a chain of two or more, not yet
    /// handed out, the one holding the oldest operation first.
    /// True when a linked leaf waits to be handed out.
    pub(crate) fn unit_waiting(&self) -> bool {
        self.flushable().is_some()
    }

    fn flushable(&self) -> Option<LeafId> {
        (0..self.leaves.len())
            .filter(|&id| self.leaves[id].len() > 1)
            .filter(|&id| !self.leaves[id].last().expect("a chain").handed_out)
            .min_by_key(|&id| self.leaves[id].last().expect("a chain").min_seq)
    }

    /// Hands out the next flush unit: the leaf's entries, with every
    /// version a snapshot at or above `oldest_snapshot` may need, once every
    /// operation up to the newest of them is durable (a table must never
    /// hold a write the buffer could lose, nor one past a write it could
    /// lose). `None` when no linked leaf waits.
    #[cfg(test)]
    pub(crate) fn flush_unit(&mut self, oldest_snapshot: u64) -> Result<Option<FlushUnit>> {
        let unit = self.take_unit(oldest_snapshot)?;
        if let Some(u) = &unit {
            self.pwb.sync_through(u.newest)?;
        }
        Ok(unit)
    }

    /// Like [`LightBuffer::flush_unit`] without the sync: the caller makes
    /// every operation up to the unit's `newest` durable
    /// (`Pwb::sync_through`) before a table may hold any of it (the engine's
    /// flush job, before it lists the unit's table: `Core::run_flush`).
    pub(crate) fn take_unit(&mut self, oldest_snapshot: u64) -> Result<Option<FlushUnit>> {
        let Some(leaf) = self.next_unit_leaf() else {
            return Ok(None);
        };
        self.hand_out(leaf);
        let offsets = self.unit_offsets(leaf).expect("a leaf just handed out");
        let mut entries = Vec::with_capacity(offsets.len());
        self.unit_collect(&offsets, oldest_snapshot, &mut entries)?;
        Ok(Some(Self::unit_finish(leaf, entries)))
    }

    /// The next flushable leaf (the oldest linked leaf not yet handed out).
    pub(crate) fn next_unit_leaf(&self) -> Option<u32> {
        let id = self.flushable()?;
        Some(self.leaves[id].last().expect("a chain").uid)
    }

    /// The places handed-out leaf `uid` indexes; `None` when no chain ends
    /// in it. [`LightBuffer::take_unit`] in steps: the owner may let its
    /// lock go between [`LightBuffer::unit_collect`]s, since a handed-out
    /// leaf neither changes nor leaves its chain until it is flushed, and
    /// its segments stay in use while it is in the chain; each step walks
    /// its links under the lock, with the watermark of then.
    pub(crate) fn unit_offsets(&self, uid: u32) -> Option<Vec<u64>> {
        let id = (0..self.leaves.len()).find(|&id| {
            let chain = &self.leaves[id];
            chain.len() > 1 && chain.last().is_some_and(|m| m.uid == uid && m.handed_out)
        })?;
        Some(self.tree.offsets_in(id, self.leaves[id].len() - 1))
    }

    /// Appends to `entries` the versions of the records at `offsets` (of
    /// the leaf [`LightBuffer::unit_offsets`] named) with every older version
    /// a snapshot at or above `oldest_snapshot` may need.
    pub(crate) fn unit_collect(
        &self,
        offsets: &[u64],
        oldest_snapshot: u64,
        entries: &mut Vec<FlushEntry>,
    ) -> Result<()> {
        let watermark = self.pwb.watermark();
        for &first in offsets {
            let mut offset = first;
            loop {
                let r = self.record(offset)?;
                let older = r.seq > oldest_snapshot && self.follows(r.prev_seq, r.prev, watermark);
                let (prev, seq) = (r.prev, r.seq);
                let key = r.key;
                let value = (r.kind == KIND_PUT).then_some(r.value);
                entries.push(FlushEntry { key, seq, value });
                if !older {
                    break;
                }
                offset = prev;
            }
        }
        Ok(())
    }

    /// Leaf `leaf`'s unit from the versions collected for it.
    pub(crate) fn unit_finish(leaf: u32, mut entries: Vec<FlushEntry>) -> FlushUnit {
        let newest = entries.iter().map(|e| e.seq).max().unwrap_or(0);
        entries.sort_by(|a, b| a.key.cmp(&b.key).then(b.seq.cmp(&a.seq)));
        entries.dedup_by(|a, b| a.key == b.key && a.seq == b.seq);
        FlushUnit {
            leaf,
            entries,
            newest,
        }
    }

    /// Marks leaf `uid`, the oldest of its chain, handed out.
    pub(crate) fn hand_out(&mut self, uid: u32) {
        let meta = self
            .leaves
            .iter_mut()
            .filter(|chain| chain.len() > 1)
            .filter_map(|chain| chain.last_mut())
            .find(|m| m.uid == uid)
            .expect("a unit's leaf stays the oldest of its chain until handed out");
        debug_assert!(!meta.handed_out);
        meta.handed_out = true;
    }

    /// Leaf `uid`'s table is installed: the leaf leaves the tree, its
    /// segments lose a count, and the watermark rises as far as the
    /// remaining leaves allow (releasing segments). Returns how many
    /// segments were released.
    #[cfg(test)]
    pub(crate) fn flushed(&mut self, uid: u32) -> Result<usize> {
        let (target, segments) = self.drop_flushed(uid)?;
        if target.is_none() && segments.is_empty() {
            return Ok(0);
        }
        self.pwb.persist_marks(target, &segments)?;
        let mut released = self.pwb.release_segments(&segments);
        if let Some(target) = target {
            released += self.release_through(target);
        }
        Ok(released)
    }

    /// The first half of [`LightBuffer::flushed`]: the leaf leaves the
    /// tree and its segments lose a count; returns the watermark the
    /// remaining leaves allow, if above the current one, and the segments
    /// (with their generations) no leaf names any more, whose records are
    /// all in tables now. The caller persists both (`Pwb::persist_marks`,
    /// one fence it need not hold the buffer for: until the release nothing
    /// reads or reuses what they cover differently) and then releases the
    /// segments (`Pwb::release_segments`) and through the watermark.
    pub(crate) fn drop_flushed(&mut self, uid: u32) -> Result<(Option<u64>, Vec<SegmentUse>)> {
        let id = (0..self.leaves.len())
            .find(|&id| {
                let chain = &self.leaves[id];
                chain.len() > 1 && chain.last().is_some_and(|m| m.uid == uid && m.handed_out)
            })
            .ok_or_else(|| Error::InvalidArgument(format!("leaf {uid} was not handed out")))?;
        assert!(self.tree.drop_oldest(id), "the chain has two leaves");
        let meta = self.leaves[id].pop().expect("a chain");
        self.count(&meta.segments, false);
        // A leaf names every segment holding a record it indexes, and a top
        // leaf appends only to segments it names: a segment no leaf names
        // takes no appends and holds only versions now in tables.
        let unnamed = meta
            .segments
            .iter()
            .filter(|s| !self.counts.contains_key(s))
            .filter_map(|&s| Some((s, self.pwb.generation(s)?)))
            .collect();
        Ok((self.watermark_target(), unnamed))
    }

    /// The last batch end below every live leaf's oldest operation, if
    /// above the watermark: how far the watermark may rise.
    fn watermark_target(&self) -> Option<u64> {
        let target = self
            .leaves
            .iter()
            .flatten()
            .map(|m| m.min_seq)
            .min()
            .unwrap_or(u64::MAX)
            .saturating_sub(1)
            .min(self.last_seq());
        let &watermark = self.batch_ends.range(..=target).next_back()?;
        (watermark > self.pwb.watermark()).then_some(watermark)
    }

    /// Releases the segments wholly at or below `watermark`, which the
    /// caller persisted (`Pwb::persist_watermark`); returns how many. A
    /// watermark a concurrent release already passed releases nothing.
    pub(crate) fn release_through(&mut self, watermark: u64) -> usize {
        let released = self.pwb.release_through(watermark);
        let now = self.pwb.watermark();
        self.batch_ends = self.batch_ends.split_off(&(now + 1));
        released
    }

    /// Raises the watermark as far as the leaves allow (its fence under
    /// the owner's lock: only [`LightBuffer::make_room`] does this, when no
    /// leaf indexes anything).
    fn raise_watermark(&mut self) -> Result<usize> {
        let Some(target) = self.watermark_target() else {
            return Ok(0);
        };
        self.pwb.persist_watermark(target)?;
        Ok(self.release_through(target))
    }

    /// Makes a flush unit available if none is: links the fullest top leaf
    /// (the one holding the oldest operation among equals). False when no
    /// leaf indexes anything.
    ///
    /// The fullest, not the oldest: a flushed leaf's segments come back by
    /// `R` whatever its age, and the oldest top leaf may hold a handful of
    /// entries. Linking the oldest made, once every partition's oldest
    /// leaf was out, one leaf per write group, each holding the few writes
    /// since its partition's last link and each flushed into a table of its
    /// own (`docs/experiments.md`, "LightKV: the 16-leaf stall").
    pub(crate) fn make_room(&mut self) -> Result<bool> {
        self.link_fullest(0)
    }

    /// Like [`LightBuffer::make_room`] ahead of need (the buffer has room
    /// still, flushes may be under way): links only a top leaf holding a
    /// quarter of a leaf's slots, or a quarter of its partition's share
    /// of the buffer. False when none does (or nothing is indexed).
    pub(crate) fn make_room_early(&mut self) -> Result<bool> {
        let (segments, segment_bytes) = self.pwb.geometry();
        let region = u64::from(segments) * u64::from(segment_bytes);
        let share = region / (4 * self.leaves.len() as u64).max(1);
        let entries = share / self.mean_record.max(1);
        self.link_fullest(entries.max(1) as usize)
    }

    /// Links the top leaf with the most entries if it holds at least
    /// `min_entries` (or a quarter of its slots), unless a unit waits.
    fn link_fullest(&mut self, min_entries: usize) -> Result<bool> {
        if self.flushable().is_some() {
            return Ok(true);
        }
        let Some((id, entries, capacity)) = (0..self.leaves.len())
            .filter(|&id| self.leaves[id][0].min_seq != u64::MAX)
            .map(|id| {
                let (n, cap) = self.tree.top_fill(id);
                (id, n, cap)
            })
            .max_by_key(|&(id, n, _)| (n, std::cmp::Reverse(self.leaves[id][0].min_seq)))
        else {
            // Nothing to flush; records recovery found in tables may
            // still hold segments below a watermark never raised past
            // them.
            self.raise_watermark()?;
            return Ok(false);
        };
        if min_entries > 0 && entries < min_entries && entries * 4 < capacity {
            return Ok(false);
        }
        self.tree.link(id);
        let meta = self.new_meta();
        self.leaves[id].insert(0, meta);
        Ok(true)
    }

    /// Checks the leaves against the tree and the segment counts against the
    /// leaves and the buffer; `Err` says what is wrong.
    #[cfg(test)]
    pub(crate) fn check(&self) -> std::result::Result<(), String> {
        if self.leaves.len() != self.tree.partitions() {
            return Err("a partition without metadata".into());
        }
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for (id, chain) in self.leaves.iter().enumerate() {
            if chain.len() != self.tree.partition(id).1 {
                return Err(format!("partition {id}: chain length out of step"));
            }
            for (depth, m) in chain.iter().enumerate() {
                for s in &m.segments {
                    *counts.entry(*s).or_default() += 1;
                }
                for o in self.tree.offsets_in(id, depth) {
                    let loc = Loc::from_u64(o);
                    if !m.segments.contains(&loc.segment) {
                        return Err(format!(
                            "leaf {} does not name segment {}",
                            m.uid, loc.segment
                        ));
                    }
                    let seq = self.record(o).map_err(|e| e.to_string())?.seq;
                    if seq < m.min_seq {
                        return Err(format!("leaf {} indexes {seq} below its oldest", m.uid));
                    }
                }
            }
        }
        if counts != self.counts {
            return Err("segment counts out of step with the leaves".into());
        }
        for s in counts.keys() {
            if !self.pwb.is_in_use(*s) {
                return Err(format!("segment {s} released while a leaf names it"));
            }
        }
        Ok(())
    }
}
