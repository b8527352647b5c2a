//! [`WriteBatch`]: a group of puts and deletes applied atomically.
//!
//! The encoded batch is also the journal record (`docs/format/journal.md`):
//!
//! ```text
//! +------------+-----------+--------------------------------------------+
//! | seq: u64   | count: u32| count × ( kind: u8 | key_len: u32 | key |   |
//! |            |           |          [value_len: u32 | value] if put ) |
//! +------------+-----------+--------------------------------------------+
//! ```
//!
//! The batch's i-th operation gets sequence number `seq + i`.

use crate::coding::{put_bytes, put_u32, u32_at, u64_at, Reader};
use crate::error::{Error, Result};
use crate::key::Kind;

/// Size of the batch header (sequence and count).
pub(crate) const HEADER_LEN: usize = 12;

/// Largest key accepted (bytes). Keys are length-prefixed with a u32 on disk,
/// but keys this large are a mistake; the limit gives a clear error instead.
pub const MAX_KEY_BYTES: usize = 64 * 1024;
/// Largest value accepted (bytes).
pub const MAX_VALUE_BYTES: usize = 256 * 1024 * 1024;

/// An ordered group of puts and deletes that the database applies
/// atomically: after a crash either all of them are visible or none.
/// Later operations on the same key win.
#[derive(Clone, PartialEq, Eq)]
pub struct WriteBatch {
    rep: Vec<u8>,
}

impl Default for WriteBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for WriteBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteBatch")
            .field("count", &self.len())
            .field("bytes", &self.rep.len())
            .finish()
    }
}

/// One decoded operation of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchOp<'a> {
    pub(crate) kind: Kind,
    pub(crate) key: &'a [u8],
    pub(crate) value: &'a [u8],
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        WriteBatch {
            rep: vec![0; HEADER_LEN],
        }
    }

    /// An empty batch with room for `bytes` of operations.
    pub fn with_capacity(bytes: usize) -> Self {
        let mut rep = Vec::with_capacity(HEADER_LEN + bytes);
        rep.resize(HEADER_LEN, 0);
        WriteBatch { rep }
    }

    /// Adds a put of `key` to `value`. Panics never; over-long keys or values
    /// are rejected when the batch is written.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> &mut Self {
        self.put_parts(key, &[value.as_ref()])
    }

    /// Adds a put of `key` to the concatenation of `value_parts`, each
    /// copied once, straight into the batch (a value made of a header and
    /// a payload the caller holds apart need not be gathered first).
    pub fn put_parts(&mut self, key: impl AsRef<[u8]>, value_parts: &[&[u8]]) -> &mut Self {
        self.rep.push(Kind::Value as u8);
        put_bytes(&mut self.rep, key.as_ref());
        let len: usize = value_parts.iter().map(|p| p.len()).sum();
        // An over-long value is refused when the batch is written, as by `put`.
        put_u32(&mut self.rep, u32::try_from(len).unwrap_or(u32::MAX));
        for p in value_parts {
            self.rep.extend_from_slice(p);
        }
        self.bump();
        self
    }

    /// Adds a delete of `key`.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> &mut Self {
        self.rep.push(Kind::Delete as u8);
        put_bytes(&mut self.rep, key.as_ref());
        self.bump();
        self
    }

    /// Adds an operation of any kind (value pointers are internal: only the
    /// write path creates them, when it separates values).
    pub(crate) fn add_raw(&mut self, kind: Kind, key: &[u8], value: &[u8]) {
        self.rep.push(kind as u8);
        put_bytes(&mut self.rep, key);
        if kind != Kind::Delete {
            put_bytes(&mut self.rep, value);
        }
        self.bump();
    }

    /// Removes every operation.
    pub fn clear(&mut self) {
        self.rep.truncate(HEADER_LEN);
        self.rep[..HEADER_LEN].fill(0);
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        u32_at(&self.rep, 8) as usize
    }

    /// True when the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the encoded batch (about what the journal will receive).
    pub fn approximate_size(&self) -> usize {
        self.rep.len()
    }

    fn bump(&mut self) {
        let n = u32_at(&self.rep, 8) + 1;
        self.rep[8..12].copy_from_slice(&n.to_le_bytes());
    }

    pub(crate) fn set_sequence(&mut self, seq: u64) {
        self.rep[..8].copy_from_slice(&seq.to_le_bytes());
    }

    pub(crate) fn sequence(&self) -> u64 {
        u64_at(&self.rep, 0)
    }

    pub(crate) fn data(&self) -> &[u8] {
        &self.rep
    }

    /// Appends all operations of `other` (used by group commit).
    pub(crate) fn append(&mut self, other: &WriteBatch) {
        self.rep.extend_from_slice(&other.rep[HEADER_LEN..]);
        let n = (self.len() + other.len()) as u32;
        self.rep[8..12].copy_from_slice(&n.to_le_bytes());
    }

    /// Rebuilds a batch from a journal record, checking its structure.
    pub(crate) fn from_record(rep: Vec<u8>) -> std::result::Result<Self, String> {
        if rep.len() < HEADER_LEN {
            return Err(format!("batch record of {} bytes is too short", rep.len()));
        }
        let b = WriteBatch { rep };
        let mut n = 0usize;
        for op in b.iter() {
            op?;
            n += 1;
        }
        if n != b.len() {
            return Err(format!("batch says {} operations, holds {n}", b.len()));
        }
        Ok(b)
    }

    /// Checks the sequence numbers of a batch read back from a journal:
    /// each of its operations' must be a real one (1 to
    /// [`crate::key`]'s 56-bit maximum). Fuzzing found batches past it
    /// panicking in the memtable.
    pub(crate) fn check_sequences(&self) -> std::result::Result<(), String> {
        let last = self
            .sequence()
            .checked_add((self.len() as u64).saturating_sub(1));
        match last {
            _ if self.sequence() == 0 && !self.is_empty() => Err("batch at sequence 0".to_string()),
            Some(last) if last <= crate::key::MAX_SEQUENCE => Ok(()),
            _ => Err(format!(
                "batch at sequence {} of {} operations passes the largest sequence number",
                self.sequence(),
                self.len()
            )),
        }
    }

    /// Checks keys and values against the size limits.
    pub(crate) fn validate(&self) -> Result<()> {
        for op in self.iter() {
            let op = op.map_err(Error::InvalidArgument)?;
            if op.key.len() > MAX_KEY_BYTES {
                return Err(Error::InvalidArgument(format!(
                    "key of {} bytes exceeds MAX_KEY_BYTES ({MAX_KEY_BYTES})",
                    op.key.len()
                )));
            }
            if op.value.len() > MAX_VALUE_BYTES {
                return Err(Error::InvalidArgument(format!(
                    "value of {} bytes exceeds MAX_VALUE_BYTES ({MAX_VALUE_BYTES})",
                    op.value.len()
                )));
            }
        }
        Ok(())
    }

    /// Bytes of keys and values (for amplification figures), and the length of the largest value, in
    /// one pass (the write path counts the first and the space limit
    /// watches the second).
    pub(crate) fn user_bytes_and_largest_value(&self) -> (u64, usize) {
        self.iter()
            .filter_map(|op| op.ok())
            .fold((0, 0), |(bytes, largest), op| {
                let bytes = bytes + (op.key.len() + op.value.len()) as u64;
                (bytes, largest.max(op.value.len()))
            })
    }

    /// The operations in order; an error describes a malformed record.
    pub(crate) fn iter(&self) -> impl Iterator<Item = std::result::Result<BatchOp<'_>, String>> {
        let mut r = Reader::new(&self.rep[HEADER_LEN..]);
        let mut failed = false;
        std::iter::from_fn(move || {
            if failed || r.is_empty() {
                return None;
            }
            let at = r.pos() + HEADER_LEN;
            let op = (|| {
                let kind = r.u8().and_then(Kind::from_u8)?;
                let key = r.len_prefixed()?;
                let value = match kind {
                    Kind::Value | Kind::ValuePointer => r.len_prefixed()?,
                    Kind::Delete => &[],
                };
                Some(BatchOp { kind, key, value })
            })();
            if op.is_none() {
                failed = true;
            }
            Some(op.ok_or_else(|| format!("malformed batch operation at byte {at}")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_put_of_parts_encodes_as_the_put_of_their_concatenation() {
        let mut parts = WriteBatch::new();
        parts.put_parts("k", &[b"\x00", b"", b"value"]);
        let mut whole = WriteBatch::new();
        whole.put("k", b"\x00value");
        assert_eq!(parts, whole);
    }

    /// A batch read back from a journal must hold real sequence numbers
    /// (fuzzing found batches past the 56-bit maximum panicking in the
    /// memtable, and an empty one at 0 underflowing recovery's count).
    #[test]
    fn recovered_sequences_are_checked() {
        let at = |seq: u64, ops: usize| {
            let mut b = WriteBatch::new();
            for i in 0..ops {
                b.put(format!("k{i}"), "v");
            }
            b.set_sequence(seq);
            b.check_sequences()
        };
        assert!(at(1, 3).is_ok());
        assert!(at(crate::key::MAX_SEQUENCE - 2, 3).is_ok());
        assert!(at(crate::key::MAX_SEQUENCE - 1, 3).is_err());
        assert!(at(1 << 56, 1).is_err());
        assert!(at(u64::MAX, 2).is_err());
        assert!(at(0, 1).is_err());
        assert!(at(0, 0).is_ok(), "empty: nothing to apply");
    }

    #[test]
    fn encode_decode_and_append() {
        let mut b = WriteBatch::new();
        b.put("k1", "v1").delete("k2").put("", "");
        assert_eq!(b.len(), 3);
        let ops: Vec<_> = b.iter().map(|o| o.unwrap()).collect();
        assert_eq!(ops[1].kind, Kind::Delete);
        assert_eq!(ops[1].key, b"k2");
        let mut c = WriteBatch::new();
        c.put("x", "y");
        c.append(&b);
        c.set_sequence(42);
        let round = WriteBatch::from_record(c.data().to_vec()).unwrap();
        assert_eq!(round.len(), 4);
        assert_eq!(round.sequence(), 42);
        // "x"+"y", "k1"+"v1", "k2" (delete), ""+"": 2 + 4 + 2 bytes.
        assert_eq!(round.user_bytes_and_largest_value(), (8, 2));
    }

    #[test]
    fn malformed_records_are_rejected() {
        let mut b = WriteBatch::new();
        b.put("key", "value");
        let mut rep = b.data().to_vec();
        rep.truncate(rep.len() - 1);
        assert!(WriteBatch::from_record(rep).is_err());
        let mut rep = b.data().to_vec();
        rep[8] = 2; // count lies
        assert!(WriteBatch::from_record(rep).is_err());
        assert!(WriteBatch::from_record(vec![1, 2]).is_err());
    }
}

/// The worked example of `docs/format/journal.md`, byte for byte.
#[cfg(test)]
mod doc_example {
    use super::*;
    use crate::fs::{CountingFs, Fs, IoClass, MemFs};
    use crate::logfile::LogWriter;
    use std::sync::Arc;

    #[test]
    fn journal_md_worked_example() {
        let mut b = WriteBatch::new();
        b.put("k", "v");
        b.set_sequence(1);
        let payload: Vec<u8> = [
            &[1, 0, 0, 0, 0, 0, 0, 0][..],
            &[1, 0, 0, 0],
            &[1],
            &[1, 0, 0, 0, 0x6b],
            &[1, 0, 0, 0, 0x76],
        ]
        .concat();
        assert_eq!(b.data(), payload.as_slice());
        assert_eq!(payload.len(), 23);
        let mem = MemFs::new();
        let fs = CountingFs::new(Arc::new(mem.clone()));
        let p = std::path::Path::new("/j");
        let mut w = LogWriter::new(fs.create(p, IoClass::Journal).unwrap());
        w.add_record(b.data()).unwrap();
        let file = mem.read_all(p).unwrap();
        assert_eq!(file.len(), 30);
        assert_eq!(&file[4..7], &[0x17, 0x00, 0x01]);
        assert_eq!(&file[7..], payload.as_slice());
    }
}
