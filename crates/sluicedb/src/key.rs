//! Internal keys: a user key followed by an 8-byte trailer
//! `(sequence << 8) | kind`, little-endian.
//!
//! Ordering: user key ascending, then sequence descending (newest first), then
//! kind descending — so a lookup seeks to `(key, snapshot_seq, KIND_SEEK)` and
//! lands on the newest version visible at the snapshot.

use std::cmp::Ordering;

use crate::coding::u64_at;

/// Sequence numbers are 56 bits.
pub(crate) const MAX_SEQUENCE: u64 = (1 << 56) - 1;

/// Length of the internal-key trailer.
pub(crate) const TRAILER_LEN: usize = 8;

/// The kind of an index entry. The numbering is part of the table and journal
/// formats (`docs/format/sstable.md`): never renumber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// The key was deleted.
    Delete = 0,
    /// The value is stored inline after the key.
    Value = 1,
    /// The value lives in the value store; the entry holds a value pointer
    /// (WiscKey, FAST '16, §3.2, `docs/format/value-pointer.md`).
    ValuePointer = 2,
}

/// Flag bit of the kind byte (table format version 2, never in a memtable
/// or journal): the version this entry shadows has been counted as
/// garbage already. A flush sets it on the oldest version it writes of a
/// key when it counted the tables' newest version of that key (the value
/// that version points at is garbage from then on); a compaction that drops
/// a version shadowed by a flagged one does not count it again, and a
/// version that survives the drop of the one below it takes over that
/// one's flag (`compaction::write_merged`; `docs/design.md`, "Space
/// accounting").
pub(crate) const SHADOW_COUNTED: u8 = 0x80;

/// The kind bits of the kind byte.
const KIND_MASK: u8 = 0x7f;

/// The largest kind byte: seeks use it so that they land before every entry
/// with the same user key and sequence, whatever its flags.
pub(crate) const KIND_SEEK: u8 = 0xff;

impl Kind {
    pub(crate) fn from_u8(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::Delete),
            1 => Some(Kind::Value),
            2 => Some(Kind::ValuePointer),
            _ => None,
        }
    }
}

pub(crate) fn pack_trailer(seq: u64, kind: u8) -> u64 {
    debug_assert!(seq <= MAX_SEQUENCE);
    (seq << 8) | u64::from(kind)
}

/// Builds an internal key into `buf` (cleared first).
pub(crate) fn encode_into(buf: &mut Vec<u8>, user_key: &[u8], seq: u64, kind: u8) {
    buf.clear();
    buf.reserve(user_key.len() + TRAILER_LEN);
    buf.extend_from_slice(user_key);
    buf.extend_from_slice(&pack_trailer(seq, kind).to_le_bytes());
}

pub(crate) fn encode(user_key: &[u8], seq: u64, kind: u8) -> Vec<u8> {
    let mut b = Vec::new();
    encode_into(&mut b, user_key, seq, kind);
    b
}

/// The user key of a valid internal key. Callers validate lengths of keys
/// read from disk with [`is_valid`] first.
pub(crate) fn user_key(ikey: &[u8]) -> &[u8] {
    &ikey[..ikey.len() - TRAILER_LEN]
}

pub(crate) fn trailer(ikey: &[u8]) -> u64 {
    u64_at(ikey, ikey.len() - TRAILER_LEN)
}

pub(crate) fn sequence(ikey: &[u8]) -> u64 {
    trailer(ikey) >> 8
}

/// The entry's kind, without its flags.
pub(crate) fn kind_byte(ikey: &[u8]) -> u8 {
    trailer(ikey) as u8 & KIND_MASK
}

/// True when the entry carries [`SHADOW_COUNTED`].
pub(crate) fn shadow_counted(ikey: &[u8]) -> bool {
    trailer(ikey) as u8 & SHADOW_COUNTED != 0
}

/// Sets or clears [`SHADOW_COUNTED`] on a valid internal key in place.
pub(crate) fn set_shadow_counted(ikey: &mut [u8], counted: bool) {
    let at = ikey.len() - TRAILER_LEN;
    if counted {
        ikey[at] |= SHADOW_COUNTED;
    } else {
        ikey[at] &= !SHADOW_COUNTED;
    }
}

/// True when `ikey` is long enough and carries a known kind (flags aside).
pub(crate) fn is_valid(ikey: &[u8]) -> bool {
    ikey.len() >= TRAILER_LEN && Kind::from_u8(kind_byte(ikey)).is_some()
}

/// The total order of internal keys.
pub(crate) fn compare(a: &[u8], b: &[u8]) -> Ordering {
    match compare_bytes(user_key(a), user_key(b)) {
        Ordering::Equal => trailer(b).cmp(&trailer(a)),
        o => o,
    }
}

/// `a.cmp(b)` for byte strings, 8 bytes at a time and inlined: keys are
/// short, and a call of the C library's `memcmp` per comparison was most
/// of a memtable search's cost with keys whose first bytes are all alike
/// (`sluice bench`'s zero-padded numbers, where every comparison reaches
/// past the skiplist's 8-byte key prefix).
#[inline]
pub(crate) fn compare_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    let (mut a8, mut b8) = (a[..n].chunks_exact(8), b[..n].chunks_exact(8));
    for (x, y) in (&mut a8).zip(&mut b8) {
        let x = u64::from_be_bytes(x.try_into().expect("8 bytes"));
        let y = u64::from_be_bytes(y.try_into().expect("8 bytes"));
        if x != y {
            return x.cmp(&y);
        }
    }
    for (x, y) in a8.remainder().iter().zip(b8.remainder()) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

/// The smallest key strictly greater than every key with prefix `p`, or
/// `None` when no such key exists (`p` is empty or all 0xff).
pub fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
    let mut s = p.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xff {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `compare_bytes` is the slices' own order: random strings of 0-40
    /// bytes from a small alphabet (so that long shared prefixes, one
    /// string a prefix of the other, and differences in each of the
    /// 8-byte words and in the tail all occur).
    #[test]
    fn compare_bytes_is_the_order_of_byte_strings() {
        use rand::{Rng, SeedableRng};
        let seed: u64 = rand::random();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let gen = |rng: &mut rand::rngs::StdRng| -> Vec<u8> {
            let len = rng.gen_range(0..=40);
            (0..len)
                .map(|_| [0u8, b'0', b'1', 0x80, 0xff][rng.gen_range(0..5)])
                .collect()
        };
        for _ in 0..100_000 {
            let a = gen(&mut rng);
            let mut b = if rng.gen_bool(0.5) {
                a.clone()
            } else {
                gen(&mut rng)
            };
            if rng.gen_bool(0.5) && !b.is_empty() {
                let i = rng.gen_range(0..b.len());
                b[i] = b[i].wrapping_add(1);
                if rng.gen_bool(0.3) {
                    b.truncate(i + 1);
                }
            }
            assert_eq!(compare_bytes(&a, &b), a.cmp(&b), "seed {seed}: {a:?} {b:?}");
            assert_eq!(compare_bytes(&b, &a), b.cmp(&a), "seed {seed}: {b:?} {a:?}");
        }
    }

    #[test]
    fn order_is_user_key_then_newest_first() {
        let a = encode(b"a", 5, 1);
        let a_old = encode(b"a", 3, 1);
        let b = encode(b"b", 9, 1);
        assert_eq!(compare(&a, &a_old), Ordering::Less);
        assert_eq!(compare(&a_old, &b), Ordering::Less);
        let seek = encode(b"a", 5, KIND_SEEK);
        assert_ne!(compare(&seek, &a), Ordering::Greater);
        assert_eq!(sequence(&a), 5);
        // A flagged entry keeps its kind and sequence, and a seek at its
        // sequence still lands before it.
        let mut flagged = encode(b"a", 5, Kind::ValuePointer as u8);
        set_shadow_counted(&mut flagged, true);
        assert!(shadow_counted(&flagged) && is_valid(&flagged));
        assert_eq!(kind_byte(&flagged), Kind::ValuePointer as u8);
        assert_eq!(sequence(&flagged), 5);
        assert_eq!(compare(&seek, &flagged), Ordering::Less);
        set_shadow_counted(&mut flagged, false);
        assert!(!shadow_counted(&flagged));
        assert!(!is_valid(&encode(b"a", 5, 3)));
        assert_eq!(user_key(&a), b"a");
        // A user key that is a prefix of another sorts first.
        assert_eq!(
            compare(&encode(b"a", 1, 1), &encode(b"ab", 9, 1)),
            Ordering::Less
        );
    }

    #[test]
    fn prefix_successor_cases() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_successor(b"\xff\xff"), None);
        assert_eq!(prefix_successor(b""), None);
    }
}
