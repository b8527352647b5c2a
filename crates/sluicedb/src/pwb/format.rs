//! The persistent write buffer's layout in its region: one place for it
//! (`docs/format/pwb.md` draws it).

use std::path::Path;

use crate::error::{Error, Result};
use crate::pm::{Pm, LINE_BYTES};

/// `"SLUPWB01"`: the first word of a formatted region. Zero means the
/// region was never (completely) formatted.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"SLUPWB01");
/// The format version in the header: 2 since the released word `R`;
/// version 1 regions (which hold 0 there) are read and upgraded on open.
pub(crate) const VERSION: u32 = 2;
/// The version before `R`, read and upgraded.
pub(crate) const VERSION_1: u32 = 1;
/// Header words.
pub(crate) const MAGIC_AT: u64 = 0;
pub(crate) const GEOMETRY_AT: u64 = 8;
pub(crate) const CHECK_AT: u64 = 16;
pub(crate) const WATERMARK_AT: u64 = 24;
/// The clean shutdown mark: the hash of the image a clean close wrote
/// (`docs/format/lightkv-image.md`), 0 when there is none to trust.
pub(crate) const CLEAN_AT: u64 = 32;
/// The released word `R`: the highest sequence number of a segment
/// released because every leaf naming it was flushed (0: none). Every
/// operation up to `R` was durable in the buffer when `R` was stored.
pub(crate) const RELEASED_AT: u64 = 40;
/// The header takes one line; the segment words follow.
pub(crate) const HEADER_BYTES: u64 = LINE_BYTES;
/// A record's fixed part: length and checksum, sequence number, place and
/// count.
pub(crate) const RECORD_HEADER_BYTES: u64 = 24;
/// The smallest segment: a few records.
pub(crate) const MIN_SEGMENT_BYTES: u64 = 256;
/// Segments are addressed with 32-bit offsets.
pub(crate) const MAX_SEGMENT_BYTES: u64 = 1 << 31;
const _: () =
    assert!(RECORD_HEADER_BYTES.is_multiple_of(8) && MIN_SEGMENT_BYTES.is_multiple_of(LINE_BYTES));

/// Segment size and count, fixed when the region is formatted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) segment_bytes: u32,
    pub(crate) segments: u32,
}

impl Geometry {
    /// As many segments of `segment_bytes` as a region of `len` holds.
    pub(crate) fn for_region(name: &Path, len: u64, segment_bytes: u64) -> Result<Geometry> {
        let bad = |why: &str| {
            Error::InvalidArgument(format!(
                "{}: write buffer of {len} bytes with {segment_bytes}-byte segments: {why}",
                name.display()
            ))
        };
        if !(MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&segment_bytes)
            || !segment_bytes.is_multiple_of(LINE_BYTES)
        {
            return Err(bad("segment size out of range or not a multiple of 64"));
        }
        let mut n = len.saturating_sub(HEADER_BYTES) / (segment_bytes + 8);
        while n > 0 && Self::data_start_for(n) + n * segment_bytes > len {
            n -= 1;
        }
        if n == 0 || n > u64::from(u32::MAX) {
            return Err(bad("no room for a segment"));
        }
        Ok(Geometry {
            segment_bytes: segment_bytes as u32,
            segments: n as u32,
        })
    }

    fn data_start_for(segments: u64) -> u64 {
        HEADER_BYTES + (segments * 8).div_ceil(LINE_BYTES) * LINE_BYTES
    }

    /// Where segment `i`'s word (generation and tail) lives.
    pub(crate) fn word_at(self, i: u32) -> u64 {
        HEADER_BYTES + 8 * u64::from(i)
    }

    /// Where segment `i`'s records start.
    pub(crate) fn segment_at(self, i: u32) -> u64 {
        Self::data_start_for(u64::from(self.segments))
            + u64::from(i) * u64::from(self.segment_bytes)
    }

    /// The bytes the layout needs.
    pub(crate) fn region_bytes(self) -> u64 {
        self.segment_at(self.segments)
    }

    pub(crate) fn encode(self) -> u64 {
        u64::from(self.segment_bytes) | u64::from(self.segments) << 32
    }

    pub(crate) fn decode(word: u64) -> Geometry {
        Geometry {
            segment_bytes: word as u32,
            segments: (word >> 32) as u32,
        }
    }
}

/// The header's check word: format version and a checksum of the geometry.
pub(crate) fn check_word(geometry: u64) -> u64 {
    check_word_of(geometry, VERSION)
}

/// The check word of `version`.
pub(crate) fn check_word_of(geometry: u64, version: u32) -> u64 {
    let crc = crc32c::crc32c(&geometry.to_le_bytes());
    u64::from(crc) | u64::from(version) << 32
}

/// A segment word: the generation (raised each time the segment is handed
/// out) and the tail (bytes of records published), stored together so that
/// one 8-byte store changes both.
pub(crate) fn segment_word(generation: u32, tail: u32) -> u64 {
    u64::from(tail) | u64::from(generation) << 32
}

/// (generation, tail) of a segment word.
pub(crate) fn split_segment_word(word: u64) -> (u32, u32) {
    ((word >> 32) as u32, word as u32)
}

/// A record's bytes in its segment, padded to 8.
pub(crate) fn record_bytes(payload_len: usize) -> u64 {
    RECORD_HEADER_BYTES + (payload_len as u64).div_ceil(8) * 8
}

/// The fixed part of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordHeader {
    pub(crate) len: u32,
    pub(crate) crc: u32,
    pub(crate) seq: u64,
    pub(crate) place: u32,
    pub(crate) count: u32,
}

impl RecordHeader {
    pub(crate) fn decode(b: &[u8; RECORD_HEADER_BYTES as usize]) -> RecordHeader {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        RecordHeader {
            len: u32_at(0),
            crc: u32_at(4),
            seq: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
            place: u32_at(16),
            count: u32_at(20),
        }
    }

    /// True when the header could start a record (the checksum decides).
    pub(crate) fn plausible(&self) -> bool {
        self.len > 0 && self.seq > 0 && self.count > 0 && self.place < self.count
    }
}

/// The checksum of a record: CRC-32C of the segment's generation, the
/// length, sequence number, place, count and payload. The generation makes
/// records of a segment's earlier uses fail it.
pub(crate) fn record_crc(generation: u32, h: &RecordHeader, payload: &[u8]) -> u32 {
    let mut fixed = [0u8; 24];
    fixed[0..4].copy_from_slice(&generation.to_le_bytes());
    fixed[4..8].copy_from_slice(&h.len.to_le_bytes());
    fixed[8..16].copy_from_slice(&h.seq.to_le_bytes());
    fixed[16..20].copy_from_slice(&h.place.to_le_bytes());
    fixed[20..24].copy_from_slice(&h.count.to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&fixed), payload)
}

/// Makes `out` a record ready to store: `out` holds a header's room
/// ([`RECORD_HEADER_BYTES`], any bytes) and then the payload; the header is
/// written over the room and the zero padding appended. The payload is
/// thus copied once, by whoever wrote it into `out`.
pub(crate) fn seal_record(generation: u32, seq: u64, place: u32, count: u32, out: &mut Vec<u8>) {
    let header = RECORD_HEADER_BYTES as usize;
    debug_assert!(out.len() > header, "a record has a payload");
    let payload_len = out.len() - header;
    let mut h = RecordHeader {
        len: payload_len as u32,
        crc: 0,
        seq,
        place,
        count,
    };
    h.crc = record_crc(generation, &h, &out[header..]);
    out[0..4].copy_from_slice(&h.len.to_le_bytes());
    out[4..8].copy_from_slice(&h.crc.to_le_bytes());
    out[8..16].copy_from_slice(&h.seq.to_le_bytes());
    out[16..20].copy_from_slice(&h.place.to_le_bytes());
    out[20..24].copy_from_slice(&h.count.to_le_bytes());
    out.resize(record_bytes(payload_len) as usize, 0);
}

/// What a record read at a place turned out to be; `P` is what was made
/// of its payload (by default a copy of it).
pub(crate) enum Read<P = Vec<u8>> {
    /// A whole record.
    Record(RecordHeader, P),
    /// The end word (zero): nothing was written here, or recovery ended
    /// the segment here.
    End,
    /// Bytes that are not a whole record of this generation.
    Invalid(&'static str),
}

/// Reads the record at `at` (absolute), in a segment of generation
/// `generation` that ends at `segment_end`.
pub(crate) fn read_record(pm: &dyn Pm, generation: u32, at: u64, segment_end: u64) -> Result<Read> {
    read_record_with(pm, generation, at, segment_end, <[u8]>::to_vec)
}

/// [`read_record`], making of a whole record's payload what `f` makes of
/// it, in place ([`Pm::read_with`]): no copy of the payload is made but
/// the ones `f` makes.
pub(crate) fn read_record_with<P>(
    pm: &dyn Pm,
    generation: u32,
    at: u64,
    segment_end: u64,
    f: impl FnOnce(&[u8]) -> P,
) -> Result<Read<P>> {
    if at + RECORD_HEADER_BYTES > segment_end {
        return Ok(Read::End);
    }
    let mut b = [0u8; RECORD_HEADER_BYTES as usize];
    pm.read(at, &mut b)?;
    if b[..8] == [0; 8] {
        return Ok(Read::End);
    }
    let h = RecordHeader::decode(&b);
    if !h.plausible() {
        return Ok(Read::Invalid("impossible record header"));
    }
    if at + record_bytes(h.len as usize) > segment_end {
        return Ok(Read::Invalid("record runs past its segment"));
    }
    let mut f = Some(f);
    let mut made = None;
    pm.read_with(at + RECORD_HEADER_BYTES, h.len as usize, &mut |payload| {
        if record_crc(generation, &h, payload) == h.crc {
            made = f.take().map(|f| f(payload));
        }
    })?;
    Ok(match made {
        Some(p) => Read::Record(h, p),
        None => Read::Invalid("record checksum mismatch"),
    })
}
