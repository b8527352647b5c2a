//! Appends records at the head of the value log through a user-space write
//! buffer (seed 001 §3.4.1): small appends cost no system call, and reads of
//! bytes still in the buffer are served from it.

use std::sync::Arc;

use super::format::{encode_record, file_header, Record, FILE_HEADER_LEN};
use crate::error::Result;
use crate::fs::{CountedWriter, FileSyncer};
use crate::value::pointer::{ValuePointer, STORE_LOG};

pub(crate) struct VlogWriter {
    file: CountedWriter,
    number: u64,
    /// Bytes of the file handed to the file system.
    written: u64,
    buf: Vec<u8>,
    buffer_limit: usize,
    /// The store id its pointers carry.
    store: u8,
    /// Length made durable by the last sync.
    synced: u64,
}

impl VlogWriter {
    /// Starts a new log file (writing its header into the buffer).
    pub(crate) fn new(file: CountedWriter, number: u64, buffer_limit: usize) -> Self {
        Self::for_store(file, number, buffer_limit, STORE_LOG)
    }

    /// Like [`VlogWriter::new`], for a file of the store `store` (layouts
    /// share the record format).
    pub(crate) fn for_store(
        file: CountedWriter,
        number: u64,
        buffer_limit: usize,
        store: u8,
    ) -> Self {
        let mut buf = Vec::with_capacity(buffer_limit.max(FILE_HEADER_LEN) + 1024);
        buf.extend_from_slice(&file_header());
        VlogWriter {
            file,
            number,
            written: 0,
            buf,
            buffer_limit,
            store,
            synced: 0,
        }
    }

    /// True when bytes were appended since the last sync.
    pub(crate) fn is_dirty(&self) -> bool {
        self.len() > self.synced
    }

    pub(crate) fn number(&self) -> u64 {
        self.number
    }

    /// Bytes handed to the file system (readable through the file).
    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// Logical length of the file (written plus buffered bytes).
    pub(crate) fn len(&self) -> u64 {
        self.written + self.buf.len() as u64
    }

    /// Appends a record and returns its pointer. Not durable until `sync`.
    pub(crate) fn append(&mut self, r: &Record<'_>) -> Result<ValuePointer> {
        let offset = self.len();
        let (record_len, record_crc) = encode_record(&mut self.buf, r);
        let p = ValuePointer {
            store: self.store,
            file: self.number,
            offset,
            record_len,
            record_crc,
        };
        if self.buf.len() >= self.buffer_limit {
            self.write_out()?;
        }
        Ok(p)
    }

    /// Hands the buffer to the file system (readable by others, not durable).
    pub(crate) fn write_out(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            self.file.append(&self.buf)?;
            self.written += self.buf.len() as u64;
            self.buf.clear();
        }
        self.file.flush()
    }

    /// Makes every appended record durable.
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.write_out()?;
        self.file.sync()?;
        self.synced = self.written;
        Ok(())
    }

    /// First half of a sync run outside the lock that guards this writer:
    /// writes the buffer out and returns a syncer for the file with the
    /// length it will make durable. Hand that length to
    /// [`VlogWriter::end_sync`] once the syncer returned.
    pub(crate) fn begin_sync(&mut self) -> Result<(Arc<dyn FileSyncer>, u64)> {
        self.write_out()?;
        Ok((self.file.syncer()?, self.written))
    }

    /// Records that the first `len` bytes are durable.
    pub(crate) fn end_sync(&mut self, len: u64) {
        self.synced = self.synced.max(len);
    }

    /// Bytes `[offset, offset + len)` if they are still in the buffer.
    pub(crate) fn read_buffered(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        let start = offset.checked_sub(self.written)? as usize;
        self.buf
            .get(start..start.checked_add(len)?)
            .map(<[u8]>::to_vec)
    }
}
