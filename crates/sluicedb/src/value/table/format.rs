//! Byte layout of value tables (`docs/format/value-table.md`).
//!
//! ```text
//! header (16 B)  : magic "sluicevt" | format_version u32 | reserved u32 (0)
//! record*        : value-log records (docs/format/value-log.md), internal-key order
//! index partition: block of (internal key -> offset u64 | record_len u32) + trailer
//! ...
//! top index      : block of (partition's last internal key -> handle) + trailer
//! filter         : bloom over user keys + trailer
//! properties     : named u64 counters + trailer
//! footer (64 B)  : filter | properties | top index | version | crc | magic
//! ```
//! The index partitions are written back to back, so GC reads every key of
//! a table in one sequential read of `[first partition, top index)`
//! (Scavenger, VLDB, §3.2.2, lazy read), without touching a value.

use crate::coding::{u32_at, u64_at};
use crate::table::format::{decode_properties, encode_properties, FooterKind};

/// "sluicevt": the first eight bytes of a value table.
pub(crate) const VT_HEADER_MAGIC: [u8; 8] = *b"sluicevt";
/// The same bytes as the footer's little-endian magic.
pub(crate) const VT_MAGIC: u64 = u64::from_le_bytes(VT_HEADER_MAGIC);
/// The value table format this build writes; readers accept up to it.
pub(crate) const VT_FORMAT_VERSION: u32 = 1;
/// Bytes of the file header.
pub(crate) const VT_HEADER_LEN: usize = 16;
/// Bytes of an index entry's value: offset u64 | record_len u32.
pub(crate) const ENTRY_VALUE_LEN: usize = 12;

/// The footer kind of value tables.
pub(crate) const VT_FOOTER: FooterKind = FooterKind {
    magic: VT_MAGIC,
    max_version: VT_FORMAT_VERSION,
    what: "value table",
};

/// The file header. (What a table is, hot or cold, is in its
/// checksummed properties, not here: a flipped header bit would go unseen.)
pub(crate) fn header() -> [u8; VT_HEADER_LEN] {
    let mut h = [0u8; VT_HEADER_LEN];
    h[..8].copy_from_slice(&VT_HEADER_MAGIC);
    h[8..12].copy_from_slice(&VT_FORMAT_VERSION.to_le_bytes());
    h
}

/// Checks a header; the error says what is wrong.
pub(crate) fn check_header(h: &[u8]) -> Result<(), String> {
    if h.len() < VT_HEADER_LEN || h[..8] != VT_HEADER_MAGIC {
        return Err("not a sluicedb value table (bad header magic)".into());
    }
    let v = u32_at(h, 8);
    if v == 0 || v > VT_FORMAT_VERSION {
        return Err(format!("value table format version {v} is unknown"));
    }
    if u32_at(h, 12) != 0 {
        return Err("value table header: reserved bytes are not zero".into());
    }
    Ok(())
}

/// Where a record is, as the dense index says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordHandle {
    pub(crate) offset: u64,
    pub(crate) len: u32,
}

impl RecordHandle {
    pub(crate) fn encode(&self) -> [u8; ENTRY_VALUE_LEN] {
        let mut b = [0u8; ENTRY_VALUE_LEN];
        b[..8].copy_from_slice(&self.offset.to_le_bytes());
        b[8..].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        (b.len() == ENTRY_VALUE_LEN).then(|| RecordHandle {
            offset: u64_at(b, 0),
            len: u32_at(b, 8),
        })
    }

    /// One past the record's last byte (saturating: a handle from a
    /// damaged file must fail the bounds checks, not overflow).
    pub(crate) fn end(&self) -> u64 {
        self.offset.saturating_add(u64::from(self.len))
    }
}

/// Counters in the properties block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ValueTableProperties {
    pub(crate) records: u64,
    pub(crate) raw_key_bytes: u64,
    pub(crate) raw_value_bytes: u64,
    /// Where the records end and the first index partition starts.
    pub(crate) records_end: u64,
    pub(crate) index_partitions: u64,
    pub(crate) smallest_seq: u64,
    pub(crate) largest_seq: u64,
    /// 1 when the table holds hot values (Scavenger, VLDB, §3.4.2), else 0.
    pub(crate) hot: u64,
}

impl ValueTableProperties {
    /// The key table's properties encoding (`table::format::encode_properties`).
    pub(crate) fn encode(&self) -> Vec<u8> {
        encode_properties(&[
            ("records", self.records),
            ("raw_key_bytes", self.raw_key_bytes),
            ("raw_value_bytes", self.raw_value_bytes),
            ("records_end", self.records_end),
            ("index_partitions", self.index_partitions),
            ("smallest_seq", self.smallest_seq),
            ("largest_seq", self.largest_seq),
            ("hot", self.hot),
        ])
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        let mut p = ValueTableProperties::default();
        decode_properties(b, |name, v| match name {
            b"records" => p.records = v,
            b"raw_key_bytes" => p.raw_key_bytes = v,
            b"raw_value_bytes" => p.raw_value_bytes = v,
            b"records_end" => p.records_end = v,
            b"index_partitions" => p.index_partitions = v,
            b"smallest_seq" => p.smallest_seq = v,
            b"largest_seq" => p.largest_seq = v,
            b"hot" => p.hot = v,
            _ => {}
        })?;
        Some(p)
    }
}
