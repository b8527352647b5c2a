//! The log framing shared by the journal and the manifest.
//!
//! The file is a sequence of 32 KiB blocks. A logical record is split into
//! physical records (fragments) so that none crosses a block boundary. Each
//! fragment is:
//!
//! ```text
//! +---------+-----------+--------+-----------------+
//! | crc: u32| len: u16  | type:u8| payload (len B) |
//! +---------+-----------+--------+-----------------+
//! ```
//!
//! `crc` is the masked CRC32C of the type byte and the payload. A block tail
//! shorter than a header is zero-filled. This is LevelDB's log format
//! (`doc/log_format.md`), kept so its recovery reasoning carries over.

/// Size of a log block.
pub(crate) const BLOCK_SIZE: usize = 32 * 1024;
/// Size of a fragment header.
pub(crate) const HEADER_SIZE: usize = 4 + 2 + 1;
const _: () = assert!(HEADER_SIZE == 7 && BLOCK_SIZE <= u16::MAX as usize + 1);

/// Fragment types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum FragmentType {
    /// The whole record.
    Full = 1,
    /// The first fragment of a record.
    First = 2,
    /// A fragment in the middle.
    Middle = 3,
    /// The last fragment.
    Last = 4,
}

impl FragmentType {
    pub(crate) fn from_u8(b: u8) -> Option<Self> {
        match b {
            1 => Some(FragmentType::Full),
            2 => Some(FragmentType::First),
            3 => Some(FragmentType::Middle),
            4 => Some(FragmentType::Last),
            _ => None,
        }
    }
}

/// The checksum stored in a fragment header.
pub(crate) fn fragment_crc(ty: u8, payload: &[u8]) -> u32 {
    let c = crc32c::crc32c(&[ty]);
    crate::coding::mask(crate::coding::masked_crc_extend(c, payload))
}
