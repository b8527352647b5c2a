//! Control records of the journal (`docs/format/journal.md`, "Control
//! records"; `docs/design.md`, "Journal rotation"). They let a memtable
//! switch leave the old journal unsynced and still keep recovery to a prefix
//! of history:
//!
//! - a **link**, the first record of every journal a rotation starts, names
//!   the previous journal and the length it had when it was closed; recovery
//!   knows from it whether that journal lost its tail, even one that ends
//!   cleanly on a record boundary;
//! - a **seal**, appended before a sync whenever older journals were synced
//!   first, says that every older journal is complete and durable. A short
//!   older journal with a seal after it lost synced writes: `Corruption`,
//!   not a crash point.
//!
//! Both use the write batch header with the sequence number `u64::MAX` (no
//! batch can have it: sequences are 56-bit) and a count of zero, then a tag.

use crate::batch::HEADER_LEN;

const CONTROL_SEQ: [u8; 8] = [0xff; 8];
const TAG_LINK: u8 = 1;
const TAG_SEAL: u8 = 2;

/// A decoded control record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Control {
    /// The previous journal `journal` was `len` bytes long when closed.
    Link { journal: u64, len: u64 },
    /// Every older journal is complete and synced.
    Seal,
}

impl Control {
    pub(crate) fn encode(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + 17);
        out.extend_from_slice(&CONTROL_SEQ);
        out.extend_from_slice(&0u32.to_le_bytes());
        match self {
            Control::Link { journal, len } => {
                out.push(TAG_LINK);
                out.extend_from_slice(&journal.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
            }
            Control::Seal => out.push(TAG_SEAL),
        }
        out
    }

    /// `None` when `rec` is not a control record (a write batch);
    /// `Some(Err)` for a control header with a malformed body.
    pub(crate) fn decode(rec: &[u8]) -> Option<Result<Control, String>> {
        if rec.len() <= HEADER_LEN || rec[..8] != CONTROL_SEQ || rec[8..12] != [0; 4] {
            return None;
        }
        let body = &rec[HEADER_LEN + 1..];
        let u64_at = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().expect("8 bytes"));
        Some(match (rec[HEADER_LEN], body.len()) {
            (TAG_LINK, 16) => Ok(Control::Link {
                journal: u64_at(0),
                len: u64_at(8),
            }),
            (TAG_SEAL, 0) => Ok(Control::Seal),
            (tag, n) => Err(format!(
                "journal control record with tag {tag} and {n} body bytes"
            )),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::WriteBatch;

    #[test]
    fn control_records_round_trip_and_batches_are_not_control_records() {
        for c in [
            Control::Seal,
            Control::Link {
                journal: 7,
                len: 1 << 40,
            },
        ] {
            assert_eq!(Control::decode(&c.encode()), Some(Ok(c)));
        }
        let mut b = WriteBatch::new();
        b.put(b"k", b"v");
        b.set_sequence(5);
        assert_eq!(Control::decode(b.data()), None);
        assert_eq!(Control::decode(WriteBatch::new().data()), None);
        let mut bad = Control::Seal.encode();
        bad.push(0);
        assert!(matches!(Control::decode(&bad), Some(Err(_))));
        bad[HEADER_LEN] = 9;
        assert!(matches!(Control::decode(&bad), Some(Err(_))));
    }
}
