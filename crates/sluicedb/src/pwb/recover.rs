//! Recovery of the persistent write buffer: which records survive a crash.
//!
//! Every segment is read from its start while records are whole (checksum
//! of this generation, sequence numbers rising). Below the segment's
//! published tail every record must be whole (the tail is stored only
//! after a fence made them durable): anything else there is damage. Past
//! the tail the first record that is not whole ends the segment (a write
//! the crash cut short).
//!
//! The operations kept are those above the watermark `W` found at or below
//! the released word `R` (every operation up to `R` was durable when `R` was
//! stored, so one missing there was in a released segment, durable in a
//! table), then those that form whole batches in sequence order from
//! `max(W, R) + 1` up to the first batch with an operation missing: a
//! prefix of history. (The batch holding `R` may go on above it: it was
//! durable whole, so its rest is kept as a batch's tail.) Each segment then ends after the
//! records it keeps: recovery stores an end word (zero) there and lowers the
//! tail to it, and makes both durable before the buffer takes writes. The
//! kept segments are sealed (nothing is appended to them again), so the
//! dropped records behind the end word stay unreachable after any later
//! crash; they are released once `W` passes them.

use std::collections::BTreeMap;

use super::format::{
    read_record, record_bytes, segment_word, split_segment_word, Geometry, Read, RecordHeader,
    RELEASED_AT, WATERMARK_AT,
};
use super::{corruption, Loc, Segment};
use crate::error::Result;
use crate::pm::Pm;

/// What recovery kept.
#[derive(Debug, Default)]
pub(crate) struct Recovered {
    /// Every operation up to here is durable outside the buffer.
    pub(crate) watermark: u64,
    /// The released word `R`: an operation at or below it that is not in
    /// `records` is durable outside the buffer.
    pub(crate) released: u64,
    /// The last operation kept (the watermark when the buffer kept none).
    pub(crate) last_seq: u64,
    /// The operations from `watermark + 1` to `last_seq`, in order; those
    /// at or below `released` may have gaps.
    pub(crate) records: Vec<RecoveredRecord>,
}

/// One operation recovery kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecoveredRecord {
    pub(crate) seq: u64,
    /// Place in its batch and the batch's size.
    pub(crate) place: u32,
    pub(crate) count: u32,
    pub(crate) loc: Loc,
    pub(crate) payload: Vec<u8>,
}

/// One segment as read.
struct Scanned {
    generation: u32,
    tail: u32,
    records: Vec<(RecordHeader, u32, Vec<u8>)>,
    /// Where reading stopped, and whether something other than an end word
    /// lies there.
    stop: u32,
    stopped_on_bytes: bool,
}

fn scan(pm: &dyn Pm, g: Geometry, i: u32) -> Result<Scanned> {
    let word_at = g.word_at(i);
    let (generation, tail) = split_segment_word(pm.read_u64(word_at)?);
    let size = g.segment_bytes;
    if tail > size || (generation == 0 && tail != 0) {
        return Err(corruption(pm, word_at, "segment word out of range"));
    }
    let mut out = Scanned {
        generation,
        tail,
        records: Vec::new(),
        stop: 0,
        stopped_on_bytes: false,
    };
    if generation == 0 {
        return Ok(out);
    }
    let start = g.segment_at(i);
    let end = start + u64::from(size);
    let mut pos = 0u32;
    loop {
        let at = start + u64::from(pos);
        let why = match read_record(pm, generation, at, end)? {
            Read::Record(h, _) if out.records.last().is_some_and(|r| r.0.seq >= h.seq) => {
                "sequence numbers out of order"
            }
            Read::Record(h, payload) => {
                out.records.push((h, pos, payload));
                pos += record_bytes(h.len as usize) as u32;
                continue;
            }
            Read::End if pos < tail => "records missing below the published tail",
            Read::End => break,
            Read::Invalid(why) => why,
        };
        if pos < tail {
            return Err(corruption(pm, at, why));
        }
        out.stopped_on_bytes = true;
        break;
    }
    out.stop = pos;
    Ok(out)
}

/// Reads every segment, keeps a prefix of whole batches above the
/// watermark, ends each segment after what it keeps (durably), and returns
/// the segments' states and what was kept.
pub(super) fn recover(pm: &dyn Pm, g: Geometry) -> Result<(Vec<Segment>, Recovered)> {
    let watermark = pm.read_u64(WATERMARK_AT)?;
    let released = pm.read_u64(RELEASED_AT)?;
    // Segments are read and checked in parallel, one piece per core (§V:
    // recovery scans the buffer "in parallel where it pays").
    let ids: Vec<u32> = (0..g.segments).collect();
    let mut scans = crate::parallel::in_parts(&ids, crate::parallel::cpus(), |ids, _| {
        ids.iter()
            .map(|&i| scan(pm, g, i))
            .collect::<Result<Vec<_>>>()
    })
    .into_iter()
    .collect::<Result<Vec<Vec<Scanned>>>>()?
    .into_iter()
    .flatten()
    .collect::<Vec<_>>();
    // Sequence number → (segment, index in its scan).
    let mut by_seq: BTreeMap<u64, (u32, usize)> = BTreeMap::new();
    for (i, sc) in scans.iter().enumerate() {
        for (j, (h, pos, _)) in sc.records.iter().enumerate() {
            if h.seq > watermark && by_seq.insert(h.seq, (i as u32, j)).is_some() {
                let at = g.segment_at(i as u32) + u64::from(*pos);
                return Err(corruption(pm, at, "a sequence number twice"));
            }
        }
    }
    let header = |seq: u64| {
        by_seq
            .get(&seq)
            .map(|&(i, j)| scans[i as usize].records[j].0)
    };
    // At or below `R` whatever is found is kept; above it whole batches.
    let floor = watermark.max(released);
    let mut next = floor + 1;
    while let Some(first) = header(next) {
        // Only the batch holding `R` may have begun below `next`.
        if first.place != 0 && (next != floor + 1 || released <= watermark) {
            break;
        }
        let (place, n) = (u64::from(first.place), u64::from(first.count));
        let whole = (1..n - place).all(|k| {
            header(next + k)
                .is_some_and(|h| u64::from(h.place) == place + k && h.count == first.count)
        });
        if !whole {
            break;
        }
        next += n - place;
    }
    let last_seq = next - 1;

    let mut segments = Vec::with_capacity(scans.len());
    let mut wrote = false;
    for (i, sc) in scans.iter().enumerate() {
        let i = i as u32;
        let kept = sc
            .records
            .iter()
            .take_while(|r| r.0.seq <= last_seq)
            .count();
        let kept_end = sc.records.get(kept).map_or(sc.stop, |r| r.1);
        let start = g.segment_at(i);
        let dropped = kept < sc.records.len() || sc.stopped_on_bytes;
        if dropped && u64::from(kept_end) + 8 <= u64::from(g.segment_bytes) {
            pm.write_u64(start + u64::from(kept_end), 0)?;
            pm.flush(start + u64::from(kept_end), 8);
            wrote = true;
        }
        if sc.generation != 0 && sc.tail != kept_end {
            pm.write_u64(g.word_at(i), segment_word(sc.generation, kept_end))?;
            pm.flush(g.word_at(i), 8);
            wrote = true;
        }
        let kept = &sc.records[..kept];
        segments.push(Segment {
            generation: sc.generation,
            end: kept_end,
            published: kept_end,
            max_seq: kept.last().map_or(0, |r| r.0.seq),
            min_seq: kept.first().map_or(0, |r| r.0.seq),
            in_use: kept.iter().any(|r| r.0.seq > watermark),
            // A hand-out stores and persists the next generation's word.
            prepared: false,
            word_stored: false,
        });
    }
    if wrote {
        pm.fence()?;
    }
    // Each payload moves into its record (each is kept once at most).
    let records = by_seq
        .range(watermark + 1..last_seq + 1)
        .map(|(&seq, &(i, j))| {
            let (h, pos, payload) = &mut scans[i as usize].records[j];
            RecoveredRecord {
                seq,
                place: h.place,
                count: h.count,
                loc: Loc {
                    segment: i,
                    offset: *pos,
                },
                payload: std::mem::take(payload),
            }
        })
        .collect();
    let recovered = Recovered {
        watermark,
        released,
        last_seq,
        records,
    };
    Ok((segments, recovered))
}
