//! Persistent memory (PM) as a seam: the [`Pm`] trait and its two backends.
//!
//! PM is byte-addressable memory whose content survives a power loss once
//! it has left the CPU caches. A store lands in a cache line; `flush` asks
//! for the lines of a range to be written back (CLWB); `fence` waits until
//! every flush issued before it is durable (SFENCE). Until then a dirty line
//! may be written back at any moment, whole or not at all, so after a crash
//! each 8-byte word of it may hold its old value or any value stored since.
//! Only an aligned 8-byte store ([`Pm::write_u64`]) is failure-atomic, and
//! nothing orders the write-back of two lines but a flush and a fence.
//!
//! This machine has no PM, so it is emulated:
//! - [`MmapPm`]: a preallocated file mapped into memory; a fence `msync`s
//!   the flushed pages, group-committed (one `msync` serves every thread
//!   whose flush returned before it began). [`FenceMode::Cache`] skips the
//!   `msync`: the data then survives a process crash, not a power loss,
//!   and fences cost what they would on real PM.
//! - [`SimPm`]: the crash model itself, in memory. It keeps, per word, every
//!   value a crash may leave, and makes crash images from them, enumerated
//!   or sampled by seed. Crash suites run on it.
//!
//! The model and what it assumes are in `docs/design.md`, "LightKV:
//! persistent memory and its crash model".

mod mmap;
mod sim;

pub use mmap::{FenceMode, MmapPm};
pub use sim::{PmEvent, PmHook, SimPm};

use std::path::Path;

use crate::error::{Error, Result};

/// The write-back unit of the caches: a flush covers whole lines.
pub const LINE_BYTES: u64 = 64;
/// The failure-atomic unit: an aligned 8-byte store survives whole or not.
pub const WORD_BYTES: u64 = 8;

/// A region of persistent memory, addressed by byte offset from 0 to
/// [`Pm::len`].
///
/// Thread safety: all methods take `&self` and may be called from any
/// thread. A caller must not read or write bytes another thread is writing
/// at the same time, except through [`Pm::read_u64`] and [`Pm::write_u64`],
/// which are atomic with respect to each other (a reader sees the old or
/// the new word, never a mix).
///
/// Durability: a store is durable once a [`Pm::flush`] covering it
/// returned, after the store, and a [`Pm::fence`] began after that flush
/// returned and has returned (from any thread). Before that, after a crash,
/// each aligned 8-byte word of a stored range may hold its durable value or
/// any value stored to it since.
pub trait Pm: Send + Sync {
    /// The file (or name) this region lives in, for errors.
    fn name(&self) -> &Path;
    /// Size of the region in bytes (a multiple of [`LINE_BYTES`]).
    fn len(&self) -> u64;
    /// True for an empty region (never, for a region that was opened).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `buf.len()` bytes at `offset` into `buf`.
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Calls `f` with the `len` bytes at `offset`, borrowed in place where
    /// the backend can (a mapped region), so that a caller copying parts of
    /// them out copies once and fills no buffer with zeros first. `f` must
    /// not call into the region (a backend may hold a lock while it runs).
    fn read_with(&self, offset: u64, len: usize, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        let mut buf = vec![0; len];
        self.read(offset, &mut buf)?;
        f(&buf);
        Ok(())
    }
    /// Reads the aligned 8-byte word at `offset` (little-endian), atomically.
    fn read_u64(&self, offset: u64) -> Result<u64>;
    /// Stores `data` at `offset`. Not failure-atomic: after a crash each
    /// word of it may be old or new, independently.
    fn write(&self, offset: u64, data: &[u8]) -> Result<()>;
    /// Stores the aligned 8-byte word at `offset` (little-endian),
    /// atomically and failure-atomically.
    fn write_u64(&self, offset: u64, value: u64) -> Result<()>;
    /// Starts writing back the lines overlapping `offset..offset + len`;
    /// durable after the next [`Pm::fence`].
    fn flush(&self, offset: u64, len: u64);
    /// Waits until every flush that returned before the call is durable.
    /// An error means some flushed data may not be durable, now or later:
    /// the caller must stop relying on this region (it stays failed).
    fn fence(&self) -> Result<()>;
    /// [`Pm::flush`] then [`Pm::fence`].
    fn persist(&self, offset: u64, len: u64) -> Result<()> {
        self.flush(offset, len);
        self.fence()
    }
    /// Bytes of the process's own memory the backend keeps the region in
    /// besides the page cache (an emulation's copy of it), for
    /// `Stats::memory`; 0 by default.
    fn memory_bytes(&self) -> u64 {
        0
    }
}

/// Checks that `offset..offset + len` lies inside a region of `size` bytes.
pub(crate) fn check_range(name: &Path, size: u64, offset: u64, len: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::InvalidArgument(format!(
            "{}: bytes {offset}..+{len} outside a persistent memory region of {size} bytes",
            name.display()
        ))),
    }
}

/// Checks that `offset` is a word inside a region of `size` bytes.
pub(crate) fn check_word(name: &Path, size: u64, offset: u64) -> Result<()> {
    if !offset.is_multiple_of(WORD_BYTES) {
        return Err(Error::InvalidArgument(format!(
            "{}: 8-byte access at unaligned offset {offset}",
            name.display()
        )));
    }
    check_range(name, size, offset, WORD_BYTES)
}

/// Checks a size asked of a new region.
pub(crate) fn check_size(name: &Path, size: u64) -> Result<()> {
    if size == 0 || !size.is_multiple_of(LINE_BYTES) {
        return Err(Error::InvalidArgument(format!(
            "{}: a persistent memory region of {size} bytes (must be a positive multiple of {LINE_BYTES})",
            name.display()
        )));
    }
    Ok(())
}
