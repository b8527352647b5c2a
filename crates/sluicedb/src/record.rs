//! The value record every layout stores (`docs/format/value-log.md`): the
//! value log's records, the hash layout's segment records and the records
//! of value tables are all this one format, and the value log and hash
//! segment files share its file header.
//!
//! ```text
//! file:   header (16 B) | record*
//! header: magic "sluicevl" (8) | format_version u32 | reserved u32 (0)
//! record: crc u32 | seq u64 | flags u8 | key_len u32 | value_len u32 | key | value
//! ```
//! `crc` is the masked CRC32C of everything after it in the record. `flags`
//! holds the operation kind (bits 0..2: 0 delete, 1 put, 2 relocation, 3
//! relocation run) and
//! four flags: [`FLAG_GC_COPY`] (a record GC copied to the head, which
//! replay never applies), [`FLAG_INLINE`] (the index keeps this value
//! inline; the record exists only for replay), [`FLAG_GROUP_END`] (the
//! last record of a write group) and [`FLAG_FIRST_VERSION`] (the flush that
//! separated it found no older version of the key). Deletes, inline puts,
//! relocations, relocation runs and the group flag appear only when the
//! value log is the journal (`docs/design.md`, "Value log as journal").
//! Format version 2 added the relocation run; files of version 1 read as
//! before.

use crate::coding::{masked_crc, put_u32, put_u64, u32_at, u64_at};

pub(crate) const LOG_MAGIC: [u8; 8] = *b"sluicevl";
pub(crate) const LOG_FORMAT_VERSION: u32 = 2;
pub(crate) const FILE_HEADER_LEN: usize = 16;
pub(crate) const RECORD_HEADER_LEN: usize = 4 + 8 + 1 + 4 + 4;
const _: () = assert!(RECORD_HEADER_LEN == 21 && FILE_HEADER_LEN == 8 + 4 + 4);

/// Record kind: the key was deleted (value log as journal only).
pub(crate) const KIND_DELETE: u8 = 0;
/// Record kind: a put.
pub(crate) const KIND_PUT: u8 = 1;
/// Record kind: GC moved the key's value; the record's value is the new
/// [`crate::pointer::ValuePointer`] (value log as journal only).
pub(crate) const KIND_RELOCATE: u8 = 2;
/// Record kind: the relocations of one GC commit, by the new pointers
/// alone ([`relocation_run`]); the key is empty, the record's sequence the
/// first of the commit's. Replay reads each copy for its key. Written from
/// format version 2 on, in place of one [`KIND_RELOCATE`] record per key
/// (value log as journal only).
pub(crate) const KIND_RELOCATE_RUN: u8 = 3;
const KIND_MASK: u8 = 0x07;
/// A copy made by GC: data only, never applied by replay.
pub(crate) const FLAG_GC_COPY: u8 = 0x80;
/// A put whose value the index keeps inline (below the separation
/// threshold): GC never copies it.
pub(crate) const FLAG_INLINE: u8 = 0x40;
/// The last record of a write group: replay applies a group only once it
/// has read this record, so a batch is all or nothing.
pub(crate) const FLAG_GROUP_END: u8 = 0x20;
/// A put the flush that separated it found to be its key's first version
/// (no older version in the memtable or the tables, or only a delete):
/// HashKV's insert, which GC treats as cold until it is updated (HashKV, USENIX ATC '18,
/// §3.4). Readers before this flag ignore it (the bit was always 0).
pub(crate) const FLAG_FIRST_VERSION: u8 = 0x10;

pub(crate) fn file_header() -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[..8].copy_from_slice(&LOG_MAGIC);
    h[8..12].copy_from_slice(&LOG_FORMAT_VERSION.to_le_bytes());
    h
}

/// Checks a file header; the error says what is wrong.
pub(crate) fn check_file_header(h: &[u8]) -> Result<(), String> {
    if h.len() < FILE_HEADER_LEN || h[..8] != LOG_MAGIC {
        return Err("not a sluicedb value log (bad magic)".into());
    }
    let v = u32_at(h, 8);
    if v == 0 || v > LOG_FORMAT_VERSION {
        return Err(format!("value log format version {v} is unknown"));
    }
    Ok(())
}

/// One decoded record, borrowing its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record<'a> {
    pub(crate) seq: u64,
    pub(crate) flags: u8,
    pub(crate) key: &'a [u8],
    pub(crate) value: &'a [u8],
}

impl Record<'_> {
    pub(crate) fn kind(&self) -> u8 {
        self.flags & KIND_MASK
    }
}

/// The kind bits of a record's flags.
pub(crate) fn kind_of(flags: u8) -> u8 {
    flags & KIND_MASK
}

/// Appends an encoded record to `out`; returns (record length, crc).
pub(crate) fn encode_record(out: &mut Vec<u8>, r: &Record<'_>) -> (u32, u32) {
    let start = out.len();
    put_u32(out, 0);
    put_u64(out, r.seq);
    out.push(r.flags);
    put_u32(out, r.key.len() as u32);
    put_u32(out, r.value.len() as u32);
    out.extend_from_slice(r.key);
    out.extend_from_slice(r.value);
    let crc = masked_crc(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    ((out.len() - start) as u32, crc)
}

/// Why bytes are not a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Bad {
    /// The bytes end before the record does (a torn tail, or a short read).
    Incomplete,
    /// The record is damaged.
    Damaged(String),
}

/// The length a record starting at `b` claims, once its header is present.
pub(crate) fn claimed_len(b: &[u8]) -> Option<usize> {
    if b.len() < RECORD_HEADER_LEN {
        return None;
    }
    let k = u32_at(b, 13) as usize;
    let v = u32_at(b, 17) as usize;
    RECORD_HEADER_LEN.checked_add(k)?.checked_add(v)
}

/// Decodes and checks the record at the start of `b`.
pub(crate) fn decode_record(b: &[u8]) -> Result<(Record<'_>, usize), Bad> {
    let len = claimed_len(b).ok_or(Bad::Incomplete)?;
    if b.len() < len {
        return Err(Bad::Incomplete);
    }
    let rec = &b[..len];
    if masked_crc(&rec[4..]) != u32_at(rec, 0) {
        return Err(Bad::Damaged("value record checksum mismatch".into()));
    }
    let k = u32_at(rec, 13) as usize;
    let r = Record {
        seq: u64_at(rec, 4),
        flags: rec[12],
        key: &rec[RECORD_HEADER_LEN..RECORD_HEADER_LEN + k],
        value: &rec[RECORD_HEADER_LEN + k..],
    };
    if r.kind() > KIND_RELOCATE_RUN {
        return Err(Bad::Damaged(format!(
            "unknown value record kind {}",
            r.kind()
        )));
    }
    Ok((r, len))
}

/// The value of a [`KIND_RELOCATE_RUN`] record: each encoded pointer
/// (`docs/format/value-pointer.md`) behind a one-byte length.
pub(crate) fn relocation_run<'a>(pointers: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pointers {
        let len = u8::try_from(p.len()).expect("an encoded pointer is under 256 bytes");
        out.push(len);
        out.extend_from_slice(p);
    }
    out
}

/// The encoded pointers of a [`KIND_RELOCATE_RUN`] record's value; `None`
/// when a length runs past its end.
pub(crate) fn run_pointers(value: &[u8]) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < value.len() {
        let len = usize::from(value[at]);
        let p = value.get(at + 1..at + 1 + len)?;
        out.push(p);
        at += 1 + len;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_flip_detected() {
        let r = Record {
            seq: 42,
            flags: KIND_PUT,
            key: b"key",
            value: b"some value",
        };
        let mut b = Vec::new();
        let (len, _) = encode_record(&mut b, &r);
        assert_eq!(len as usize, b.len());
        assert_eq!(decode_record(&b).unwrap(), (r, b.len()));
        for cut in 0..b.len() {
            assert_eq!(decode_record(&b[..cut]).unwrap_err(), Bad::Incomplete);
        }
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 1 << (i % 8);
            // A flip in a length field may make the record look longer
            // (incomplete); anything else fails the checksum.
            assert!(decode_record(&d).is_err(), "flip at {i} accepted");
        }
        check_file_header(&file_header()).unwrap();
        assert!(check_file_header(b"sluicevX\x01\0\0\0\0\0\0\0").is_err());
        // Version 1 (before relocation runs) still reads; a later one does not.
        check_file_header(b"sluicevl\x01\0\0\0\0\0\0\0").unwrap();
        assert!(check_file_header(b"sluicevl\x03\0\0\0\0\0\0\0").is_err());
    }

    #[test]
    fn a_relocation_run_round_trips_and_a_cut_one_is_refused() {
        let pointers: Vec<Vec<u8>> = (0..40u64)
            .map(|i| {
                crate::pointer::ValuePointer {
                    store: crate::pointer::STORE_LOG,
                    file: 7 + i / 20,
                    offset: 16 + i * 173,
                    record_len: 173,
                    record_crc: i as u32 * 7919,
                }
                .encode()
                .to_vec()
            })
            .collect();
        let run = relocation_run(pointers.iter().map(Vec::as_slice));
        // A length byte and a compact pointer each: a sixth of a relocate
        // record's bytes for a 24-byte key.
        assert!(run.len() <= pointers.len() * 16, "{}", run.len());
        let back = run_pointers(&run).unwrap();
        assert_eq!(back, pointers.iter().map(Vec::as_slice).collect::<Vec<_>>());
        assert_eq!(run_pointers(&run[..run.len() - 1]), None);
        assert_eq!(run_pointers(&[]), Some(vec![]));
    }
}
