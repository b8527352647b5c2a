//! Fixed-width little-endian encoding helpers shared by every on-disk format.
//!
//! Formats use fixed-width integers (STYLE.md); the only variable-length
//! integers are the LevelDB-style varints inside data blocks and the value
//! pointers those blocks hold (`value::pointer`), where they save real space
//! per entry.

pub(crate) fn put_u32(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

/// Appends a u32 length followed by the bytes.
pub(crate) fn put_bytes(buf: &mut Vec<u8>, b: &[u8]) {
    put_u32(buf, b.len() as u32);
    buf.extend_from_slice(b);
}

pub(crate) fn put_varint32(buf: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Decodes a varint32 at the start of `src`; returns the value and its length.
pub(crate) fn get_varint32(src: &[u8]) -> Option<(u32, usize)> {
    // One byte: block entries' shared and unshared key lengths and most
    // value lengths, decoded at every step of a point lookup's seek.
    if let Some(&b) = src.first() {
        if b < 0x80 {
            return Some((u32::from(b), 1));
        }
    }
    let mut result: u32 = 0;
    for (i, &b) in src.iter().enumerate().take(5) {
        result |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((result, i + 1));
        }
    }
    None
}

pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A bounds-checked reader over a byte slice. Every getter returns `None` when
/// the input is too short, so decoders of on-disk data cannot panic.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }
    pub(crate) fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let out = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.bytes(1).map(|b| b[0])
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.bytes(4).map(|b| u32_at(b, 0))
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.bytes(8).map(|b| u64_at(b, 0))
    }
    /// A u32 length followed by that many bytes.
    pub(crate) fn len_prefixed(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.bytes(n)
    }
}

/// CRC32C, masked as LevelDB does so that a CRC of data containing CRCs does
/// not degenerate.
pub(crate) fn masked_crc(data: &[u8]) -> u32 {
    mask(crc32c::crc32c(data))
}
pub(crate) fn masked_crc_extend(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}
pub(crate) fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip_and_truncation() {
        for v in [0u32, 1, 127, 128, 300, 1 << 21, u32::MAX] {
            let mut b = Vec::new();
            put_varint32(&mut b, v);
            assert_eq!(get_varint32(&b), Some((v, b.len())));
            assert_eq!(get_varint32(&b[..b.len() - 1]), None);
        }
    }

    #[test]
    fn reader_refuses_short_input() {
        let mut r = Reader::new(&[1, 0, 0]);
        assert_eq!(r.u32(), None);
        let mut r = Reader::new(&[5, 0, 0, 0, 1, 2]);
        assert_eq!(r.len_prefixed(), None);
    }

    #[test]
    fn mask_changes_crc() {
        let c = crc32c::crc32c(b"foo");
        assert_ne!(mask(c), c);
        assert_eq!(masked_crc(b"foo"), mask(c));
    }
}
