//! Appends records at the head of the value log through a user-space write
//! buffer (WiscKey, FAST '16, §3.4.1): small appends cost no system call, and reads of
//! bytes still in the buffer are served from it.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::fs::{CountedWriter, FileSyncer};
use crate::pointer::{ValuePointer, STORE_LOG};
use crate::record::{encode_record, file_header, Record, FILE_HEADER_LEN};

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
    /// A write, flush or sync of the file failed: what the file holds is
    /// unknown from here on, so every later write-out and sync fails too
    /// (a later success must never vouch for bytes a failure may have
    /// dropped).
    failed: bool,
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
            failed: false,
        }
    }

    /// True when bytes were appended since the last sync.
    pub(crate) fn is_dirty(&self) -> bool {
        self.len() > self.synced
    }

    pub(crate) fn number(&self) -> u64 {
        self.number
    }

    /// Bytes made durable by syncs so far.
    pub(crate) fn synced(&self) -> u64 {
        self.synced
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

    /// Fails when an earlier operation on the file failed; otherwise runs
    /// `op`, remembering its failure.
    fn guarded<T>(&mut self, op: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        if self.failed {
            return Err(Error::Poisoned(format!(
                "an earlier write to value file {} failed",
                self.number
            )));
        }
        let r = op(self);
        self.failed = r.is_err();
        r
    }

    /// Hands the buffer to the file system (readable by others, not durable).
    pub(crate) fn write_out(&mut self) -> Result<()> {
        self.guarded(|w| {
            if !w.buf.is_empty() {
                w.file.append(&w.buf)?;
                w.written += w.buf.len() as u64;
                w.buf.clear();
            }
            w.file.flush()
        })
    }

    /// Makes every appended record durable.
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.write_out()?;
        self.guarded(|w| w.file.sync())?;
        self.synced = self.written;
        Ok(())
    }

    /// First half of a sync run outside the lock that guards this writer:
    /// writes the buffer out and returns a syncer for the file with the
    /// length it will make durable. Hand that length to
    /// [`VlogWriter::end_sync`] once the syncer returned.
    pub(crate) fn begin_sync(&mut self) -> Result<(Arc<dyn FileSyncer>, u64)> {
        self.write_out()?;
        let syncer = self.guarded(|w| w.file.syncer())?;
        Ok((syncer, self.written))
    }

    /// Records that a sync begun with [`VlogWriter::begin_sync`] failed:
    /// the file's unsynced bytes may be lost, so the writer fails from here
    /// on.
    pub(crate) fn sync_failed(&mut self) {
        self.failed = true;
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
