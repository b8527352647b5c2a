//! [`ValuePointer`]: what the key index stores for a separated value
//! (`docs/format/value-pointer.md`).
//!
//! ```text
//! compact (written since 2026-11-25):
//! +--------------------+-------------+---------------+-------------------+----------------+
//! | store | 0x80 (u8)  | file varint | offset varint | record_len varint | record_crc u32 |
//! +--------------------+-------------+---------------+-------------------+----------------+
//! fixed (read only):
//! +----------+-----------+-------------+----------------+----------------+
//! | store u8 | file u64  | offset u64  | record_len u32 | record_crc u32 |
//! +----------+-----------+-------------+----------------+----------------+
//! ```

use crate::coding::{u32_at, u64_at};

/// Length of a pointer's fixed form.
pub(crate) const POINTER_LEN: usize = 1 + 8 + 8 + 4 + 4;
const _: () = assert!(POINTER_LEN == 25);

/// Which value store a pointer refers to: the log layout.
pub(crate) const STORE_LOG: u8 = 1;
/// The hash layout (HashKV segment groups).
pub(crate) const STORE_HASH: u8 = 2;
/// The hash layout's cold log (HashKV (USENIX ATC '18) §3.4).
pub(crate) const STORE_COLD: u8 = 3;
/// The table layout's value tables (Scavenger, VLDB, §3.2.1).
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
    /// The compact encoding (`docs/format/value-pointer.md`): the store id
    /// with [`COMPACT_TAG`], varints for file, offset and length, and the
    /// checksum. About 13 bytes against the fixed form's 25; index entries
    /// are mostly pointers, and the smaller index is what compactions
    /// rewrite and lookups read through the block cache.
    pub(crate) fn encode(&self) -> EncodedPointer {
        let mut e = EncodedPointer {
            bytes: [0; MAX_COMPACT_LEN],
            len: 0,
        };
        e.push(self.store | COMPACT_TAG);
        e.push_varint(self.file);
        e.push_varint(self.offset);
        e.push_varint(u64::from(self.record_len));
        for b in self.record_crc.to_le_bytes() {
            e.push(b);
        }
        e
    }

    /// The fixed form of 25 bytes, as databases wrote it until 2026-11-25
    /// (still read).
    #[cfg(test)]
    pub(crate) fn encode_fixed(&self) -> [u8; POINTER_LEN] {
        let mut b = [0u8; POINTER_LEN];
        b[0] = self.store;
        b[1..9].copy_from_slice(&self.file.to_le_bytes());
        b[9..17].copy_from_slice(&self.offset.to_le_bytes());
        b[17..21].copy_from_slice(&self.record_len.to_le_bytes());
        b[21..25].copy_from_slice(&self.record_crc.to_le_bytes());
        b
    }

    /// True if both name the same record: file, offset, length and
    /// checksum (the store id aside).
    pub(crate) fn same_record(&self, other: &ValuePointer) -> bool {
        (self.file, self.offset, self.record_len, self.record_crc)
            == (other.file, other.offset, other.record_len, other.record_crc)
    }

    /// Decodes an index entry's bytes, in either form; `None` when they
    /// are not a pointer.
    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        let &first = b.first()?;
        if first & COMPACT_TAG == 0 {
            return (b.len() == POINTER_LEN).then(|| ValuePointer {
                store: first,
                file: u64_at(b, 1),
                offset: u64_at(b, 9),
                record_len: u32_at(b, 17),
                record_crc: u32_at(b, 21),
            });
        }
        let mut at = 1;
        let file = varint_at(b, &mut at)?;
        let offset = varint_at(b, &mut at)?;
        let record_len = u32::try_from(varint_at(b, &mut at)?).ok()?;
        (b.len() == at + 4).then(|| ValuePointer {
            store: first & !COMPACT_TAG,
            file,
            offset,
            record_len,
            record_crc: u32_at(b, at),
        })
    }
}

/// Marks the compact encoding in the store byte (store ids are below it).
const COMPACT_TAG: u8 = 0x80;

/// Longest compact encoding: the store byte, three varints of up to 10
/// bytes and the checksum.
const MAX_COMPACT_LEN: usize = 1 + 10 + 10 + 5 + 4;

/// A pointer's compact encoding, on the stack.
#[derive(Clone, Copy)]
pub(crate) struct EncodedPointer {
    bytes: [u8; MAX_COMPACT_LEN],
    len: u8,
}

impl EncodedPointer {
    fn push(&mut self, b: u8) {
        self.bytes[self.len as usize] = b;
        self.len += 1;
    }

    fn push_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.push(v as u8);
    }
}

impl std::ops::Deref for EncodedPointer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// The varint at `*at` in `b` (at most 10 bytes, no bits past 64); moves
/// `*at` past it.
fn varint_at(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let byte = *b.get(*at + i)?;
        let bits = u64::from(byte & 0x7f);
        if i == 9 && bits > 1 {
            return None;
        }
        v |= bits << (7 * i);
        if byte & 0x80 == 0 {
            *at += i + 1;
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ValuePointer {
        ValuePointer {
            store: STORE_LOG,
            file: 7,
            offset: 4096,
            record_len: 1021,
            record_crc: 0xdead_beef,
        }
    }

    #[test]
    fn compact_round_trip_at_every_width() {
        for store in [STORE_LOG, STORE_HASH, STORE_COLD, STORE_TABLE] {
            for v in [0, 1, 127, 128, 16_383, 16_384, 1 << 35, u64::MAX] {
                let p = ValuePointer {
                    store,
                    file: v,
                    offset: v.rotate_left(7),
                    record_len: v as u32,
                    record_crc: !(v as u32),
                };
                let e = p.encode();
                assert_eq!(ValuePointer::decode(&e), Some(p), "{v}");
                assert!(e.len() <= MAX_COMPACT_LEN);
            }
        }
        // The common case: a small file number, an offset in the first
        // 256 MiB, a record under 16 KiB.
        assert_eq!(sample().encode().len(), 1 + 1 + 2 + 2 + 4);
    }

    #[test]
    fn the_fixed_form_still_decodes() {
        let p = sample();
        let fixed = p.encode_fixed();
        assert_eq!(fixed.len(), POINTER_LEN);
        assert_eq!(ValuePointer::decode(&fixed), Some(p));
        assert_eq!(ValuePointer::decode(&fixed[..24]), None);
        let mut long = fixed.to_vec();
        long.push(0);
        assert_eq!(ValuePointer::decode(&long), None);
    }

    #[test]
    fn damaged_compact_forms_are_not_pointers() {
        let e = sample().encode();
        assert_eq!(ValuePointer::decode(&[]), None);
        for n in 0..e.len() {
            assert_eq!(ValuePointer::decode(&e[..n]), None, "cut to {n}");
        }
        let mut long = e.to_vec();
        long.push(0);
        assert_eq!(ValuePointer::decode(&long), None);
        // A varint running past ten bytes, or past 64 bits.
        let mut overlong = vec![STORE_LOG | COMPACT_TAG];
        overlong.extend([0xff; 10]);
        overlong.extend([0; 6]);
        assert_eq!(ValuePointer::decode(&overlong), None);
        let mut wide = vec![STORE_LOG | COMPACT_TAG];
        wide.extend([0xff; 9]);
        wide.extend([0x02, 0, 0, 0, 0, 0, 0]);
        assert_eq!(ValuePointer::decode(&wide), None);
        // A record length past 32 bits.
        let mut big_len = vec![STORE_LOG | COMPACT_TAG, 1, 1];
        big_len.extend([0x80, 0x80, 0x80, 0x80, 0x10]);
        big_len.extend([0; 4]);
        assert_eq!(ValuePointer::decode(&big_len), None);
    }
}
