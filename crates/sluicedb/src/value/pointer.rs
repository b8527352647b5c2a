//! [`ValuePointer`]: what the key index stores for a separated value
//! (`docs/format/value-pointer.md`).
//!
//! ```text
//! +----------+-----------+-------------+---------------+--------------+
//! | store u8 | file u64  | offset u64  | record_len u32| record_crc u32|
//! +----------+-----------+-------------+---------------+--------------+
//! ```

use crate::coding::{u32_at, u64_at};

/// Encoded length of a pointer.
pub(crate) const POINTER_LEN: usize = 1 + 8 + 8 + 4 + 4;
const _: () = assert!(POINTER_LEN == 25);

/// Which value store a pointer refers to: the log layout.
pub(crate) const STORE_LOG: u8 = 1;
/// The hash layout (HashKV segment groups).
pub(crate) const STORE_HASH: u8 = 2;
/// The hash layout's cold log (HashKV §3.4).
pub(crate) const STORE_COLD: u8 = 3;
/// The table layout's value tables (Scavenger, seed 003 §3.2.1).
pub(crate) const STORE_TABLE: u8 = 4;

/// The location of one value record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ValuePointer {
    pub(crate) store: u8,
    /// File number of the value log file (or segment, for other layouts).
    pub(crate) file: u64,
    /// Byte offset of the record in the file.
    pub(crate) offset: u64,
    /// Length of the whole record (header, key and value).
    pub(crate) record_len: u32,
    /// The record's stored checksum: a read checks it matches.
    pub(crate) record_crc: u32,
}

impl ValuePointer {
    pub(crate) fn encode(&self) -> [u8; POINTER_LEN] {
        let mut b = [0u8; POINTER_LEN];
        b[0] = self.store;
        b[1..9].copy_from_slice(&self.file.to_le_bytes());
        b[9..17].copy_from_slice(&self.offset.to_le_bytes());
        b[17..21].copy_from_slice(&self.record_len.to_le_bytes());
        b[21..25].copy_from_slice(&self.record_crc.to_le_bytes());
        b
    }

    /// Decodes an index entry's bytes; `None` when they are not a pointer.
    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        (b.len() == POINTER_LEN).then(|| ValuePointer {
            store: b[0],
            file: u64_at(b, 1),
            offset: u64_at(b, 9),
            record_len: u32_at(b, 17),
            record_crc: u32_at(b, 21),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_wrong_lengths() {
        let p = ValuePointer {
            store: STORE_LOG,
            file: 7,
            offset: 4096,
            record_len: 1021,
            record_crc: 0xdead_beef,
        };
        assert_eq!(ValuePointer::decode(&p.encode()), Some(p));
        assert_eq!(ValuePointer::decode(&p.encode()[..24]), None);
        assert_eq!(ValuePointer::decode(&[0; 26]), None);
    }
}
