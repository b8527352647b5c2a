//! Byte layout of table files: block handles, block trailers and the footer.
//!
//! ```text
//! [data block 0][trailer] ... [data block n][trailer]
//! [filter block][trailer] [properties block][trailer] [index block][trailer]
//! [footer: 64 bytes]
//! ```
//! Trailer: `compression: u8 (0 = none) | crc: u32` (masked CRC32C of the
//! block and the compression byte).

use std::path::Path;

use crate::coding::{masked_crc, put_u32, put_u64, u32_at, u64_at};
use crate::error::{Error, Result};

/// "sluicetb" little-endian: identifies a sluicedb table.
pub(crate) const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"sluicetb");
/// The format of plain tables this build writes.
pub(crate) const TABLE_FORMAT_VERSION: u32 = 2;
/// The format of index-decoupled tables (Scavenger (VLDB) §3.3): pointer entries in
/// pointer blocks of their own. Readers accept versions up to it.
pub(crate) const DECOUPLED_TABLE_FORMAT_VERSION: u32 = 3;
/// Bytes of the block trailer.
pub(crate) const BLOCK_TRAILER_LEN: usize = 5;
/// Bytes of the footer.
pub(crate) const FOOTER_LEN: usize = 64;
const _: () = assert!(FOOTER_LEN == 6 * 8 + 4 + 4 + 8);

/// Where a block lives: offset and size (without trailer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct BlockHandle {
    pub(crate) offset: u64,
    pub(crate) size: u64,
}

/// Encoded length of a block handle in the index block.
pub(crate) const HANDLE_LEN: usize = 16;

impl BlockHandle {
    pub(crate) fn encode_to(&self, buf: &mut Vec<u8>) {
        put_u64(buf, self.offset);
        put_u64(buf, self.size);
    }
    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        (b.len() == HANDLE_LEN).then(|| BlockHandle {
            offset: u64_at(b, 0),
            size: u64_at(b, 8),
        })
    }
}

/// The fixed-size end of a table.
///
/// ```text
/// filter handle (16) | properties handle (16) | index handle (16)
/// | format_version: u32 | footer_crc: u32 | magic: u64
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Footer {
    pub(crate) filter: BlockHandle,
    pub(crate) properties: BlockHandle,
    pub(crate) index: BlockHandle,
    pub(crate) format_version: u32,
}

impl Footer {
    pub(crate) fn encode(&self) -> Vec<u8> {
        self.encode_as(TABLE_MAGIC)
    }

    /// Encodes the footer of a file whose kind `magic` names (value tables
    /// share the layout, `docs/format/value-table.md`).
    pub(crate) fn encode_as(&self, magic: u64) -> Vec<u8> {
        let mut b = Vec::with_capacity(FOOTER_LEN);
        self.filter.encode_to(&mut b);
        self.properties.encode_to(&mut b);
        self.index.encode_to(&mut b);
        put_u32(&mut b, self.format_version);
        let crc = masked_crc(&b);
        put_u32(&mut b, crc);
        put_u64(&mut b, magic);
        debug_assert_eq!(b.len(), FOOTER_LEN);
        b
    }

    /// Decodes and checks the footer of a file of kind `kind`, read at
    /// `offset` of `file`.
    pub(crate) fn decode_as(b: &[u8], file: &Path, offset: u64, kind: FooterKind) -> Result<Self> {
        let what = kind.what;
        let bad = |why: &str| Error::corruption(file, offset, format!("{what} footer: {why}"));
        if b.len() != FOOTER_LEN {
            return Err(bad("file too short"));
        }
        if u64_at(b, 56) != kind.magic {
            return Err(bad(&format!("bad magic number (not a sluicedb {what})")));
        }
        if masked_crc(&b[..52]) != u32_at(b, 52) {
            return Err(bad("checksum mismatch"));
        }
        let version = u32_at(b, 48);
        if version == 0 || version > kind.max_version {
            return Err(Error::UnsupportedVersion {
                file: file.to_path_buf(),
                version,
            });
        }
        let h = |at: usize| BlockHandle::decode(&b[at..at + HANDLE_LEN]).expect("16 bytes");
        Ok(Footer {
            filter: h(0),
            properties: h(16),
            index: h(32),
            format_version: version,
        })
    }
}

/// Encodes a properties block: `count u32 | count × (name: u32-length-
/// prefixed | value u64)`. Readers skip names they do not know, so
/// properties can be added freely (key and value tables alike).
pub(crate) fn encode_properties(fields: &[(&str, u64)]) -> Vec<u8> {
    let mut b = Vec::new();
    put_u32(&mut b, fields.len() as u32);
    for (name, v) in fields {
        crate::coding::put_bytes(&mut b, name.as_bytes());
        put_u64(&mut b, *v);
    }
    b
}

/// Decodes a properties block, handing each (name, value) to `set`;
/// `None` when the block is malformed.
pub(crate) fn decode_properties(b: &[u8], mut set: impl FnMut(&[u8], u64)) -> Option<()> {
    let mut r = crate::coding::Reader::new(b);
    let n = r.u32()?;
    for _ in 0..n {
        let name = r.len_prefixed()?;
        set(name, r.u64()?);
    }
    Some(())
}

/// What a footer must say to be one of a given file kind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FooterKind {
    pub(crate) magic: u64,
    /// The newest format version this build reads.
    pub(crate) max_version: u32,
    /// The kind's name in error messages.
    pub(crate) what: &'static str,
}

impl FooterKind {
    /// A key table (`.sst`).
    pub(crate) const TABLE: FooterKind = FooterKind {
        magic: TABLE_MAGIC,
        max_version: DECOUPLED_TABLE_FORMAT_VERSION,
        what: "table",
    };
}

/// Appends the trailer of `block` to `out`.
pub(crate) fn block_trailer(block: &[u8]) -> [u8; BLOCK_TRAILER_LEN] {
    let crc = crate::coding::mask(crc32c::crc32c_append(crc32c::crc32c(block), &[0]));
    let mut t = [0u8; BLOCK_TRAILER_LEN];
    t[0] = 0;
    t[1..].copy_from_slice(&crc.to_le_bytes());
    t
}

/// Checks the trailer at the end of `raw` (block + trailer) and returns the
/// block bytes.
pub(crate) fn verify_block(raw: Vec<u8>, file: &Path, offset: u64) -> Result<Vec<u8>> {
    if raw.len() < BLOCK_TRAILER_LEN {
        return Err(Error::corruption(
            file,
            offset,
            "block shorter than its trailer",
        ));
    }
    let n = raw.len() - BLOCK_TRAILER_LEN;
    let expect = block_trailer(&raw[..n]);
    if raw[n..] != expect {
        let why = if raw[n] != 0 {
            format!("unknown compression type {}", raw[n])
        } else {
            "block checksum mismatch".to_string()
        };
        return Err(Error::corruption(file, offset, why));
    }
    let mut raw = raw;
    raw.truncate(n);
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footer_round_trip_and_damage() {
        let f = Footer {
            filter: BlockHandle { offset: 1, size: 2 },
            properties: BlockHandle { offset: 3, size: 4 },
            index: BlockHandle { offset: 5, size: 6 },
            format_version: TABLE_FORMAT_VERSION,
        };
        let b = f.encode();
        let p = Path::new("t.sst");
        assert_eq!(Footer::decode_as(&b, p, 0, FooterKind::TABLE).unwrap(), f);
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x10;
            assert!(
                Footer::decode_as(&d, p, 0, FooterKind::TABLE).is_err(),
                "flip at {i} accepted"
            );
        }
    }

    #[test]
    fn trailer_detects_flips() {
        let block = b"some block bytes".to_vec();
        let mut raw = block.clone();
        raw.extend_from_slice(&block_trailer(&block));
        assert_eq!(verify_block(raw.clone(), Path::new("x"), 0).unwrap(), block);
        for i in 0..raw.len() {
            let mut d = raw.clone();
            d[i] ^= 1;
            assert!(verify_block(d, Path::new("x"), 0)
                .unwrap_err()
                .is_corruption());
        }
    }
}
