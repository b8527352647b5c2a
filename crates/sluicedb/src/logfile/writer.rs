//! Appends records to a log file (journal or manifest).

use super::format::{fragment_crc, FragmentType, BLOCK_SIZE, HEADER_SIZE};
use crate::error::{Error, Result};
use smallvec::SmallVec;
use std::sync::Arc;

use crate::fs::{CountedWriter, FileSyncer};

/// Writes logical records as block-framed fragments. Each `add_record` issues
/// one append (of its parts), so a crash tears at most the last record.
pub(crate) struct LogWriter {
    file: CountedWriter,
    block_offset: usize,
    /// Length made durable by the last sync.
    synced: u64,
    /// An append, flush or sync failed: the file holds an unknown part of
    /// the last record (its framing position is lost too), so every later
    /// call fails. A record appended after it could make replay read a
    /// record the engine never applied, and then one that contradicts it
    /// (issue 50: after a failed manifest sync, a second GC edit removed
    /// a value table the first had removed, and the database no longer
    /// opened).
    failed: bool,
}

/// One piece of a framed record, in file order.
enum Span<'a> {
    /// Zeros that fill a block's end too short for a header.
    Zeros(usize),
    /// A fragment's header.
    Header([u8; HEADER_SIZE]),
    Payload(&'a [u8]),
}

impl LogWriter {
    /// A writer at the start of a new, empty file.
    pub(crate) fn new(file: CountedWriter) -> Self {
        let block_offset = (file.len() % BLOCK_SIZE as u64) as usize;
        LogWriter {
            file,
            block_offset,
            synced: 0,
            failed: false,
        }
    }

    /// Refuses once an earlier append, flush or sync failed.
    fn check(&self) -> Result<()> {
        if self.failed {
            return Err(Error::Poisoned(
                "an earlier write to this log file failed".into(),
            ));
        }
        Ok(())
    }

    /// Runs `op` unless an earlier one failed; remembers a failure.
    fn guarded<T>(&mut self, op: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.check()?;
        let r = op(self);
        self.failed = r.is_err();
        r
    }

    /// Frames and appends one record (not yet durable).
    pub(crate) fn add_record(&mut self, data: &[u8]) -> Result<()> {
        self.guarded(|w| w.frame_and_append(data))
    }

    fn frame_and_append(&mut self, mut data: &[u8]) -> Result<()> {
        // The fragments' headers, and the zeros that pad a block's end, go
        // to the file between slices of `data` itself: a record of a
        // group commit (hundreds of KiB under many writers) is not copied
        // here on its way to the file.
        const ZEROS: [u8; HEADER_SIZE] = [0; HEADER_SIZE];
        let mut spans: SmallVec<[Span<'_>; 8]> = SmallVec::new();
        let mut first = true;
        loop {
            let left = BLOCK_SIZE - self.block_offset;
            if left < HEADER_SIZE {
                spans.push(Span::Zeros(left));
                self.block_offset = 0;
                continue;
            }
            let avail = left - HEADER_SIZE;
            let n = data.len().min(avail);
            let last = n == data.len();
            let ty = match (first, last) {
                (true, true) => FragmentType::Full,
                (true, false) => FragmentType::First,
                (false, true) => FragmentType::Last,
                (false, false) => FragmentType::Middle,
            } as u8;
            let payload = &data[..n];
            let mut header = [0u8; HEADER_SIZE];
            header[..4].copy_from_slice(&fragment_crc(ty, payload).to_le_bytes());
            header[4..6].copy_from_slice(&(n as u16).to_le_bytes());
            header[6] = ty;
            spans.push(Span::Header(header));
            spans.push(Span::Payload(payload));
            self.block_offset += HEADER_SIZE + n;
            data = &data[n..];
            first = false;
            if last {
                break;
            }
        }
        let parts: SmallVec<[&[u8]; 8]> = spans
            .iter()
            .map(|s| match s {
                Span::Zeros(n) => &ZEROS[..*n],
                Span::Header(h) => &h[..],
                Span::Payload(p) => *p,
            })
            .collect();
        self.file.append_parts(&parts)
    }

    /// Makes all records durable.
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.guarded(|w| w.file.sync())?;
        self.synced = self.file.len();
        Ok(())
    }

    /// Notes that a sync run through a [`LogWriter::syncer`] failed: what
    /// the file holds past the last good sync is unknown from here on.
    pub(crate) fn sync_failed(&mut self) {
        self.failed = true;
    }

    /// Notes that a sync made the first `len` bytes durable (a syncer's,
    /// run without this writer).
    pub(crate) fn mark_synced(&mut self, len: u64) {
        self.synced = self.synced.max(len);
    }

    /// True when records were added since the last sync.
    pub(crate) fn is_dirty(&self) -> bool {
        self.file.len() > self.synced
    }

    /// Hands buffered records to the file system (not durable), so that a
    /// process crash keeps them in order with later files' appends.
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.guarded(|w| w.file.flush())
    }

    /// A handle that syncs this file after the writer is gone.
    pub(crate) fn syncer(&self) -> Result<Arc<dyn FileSyncer>> {
        self.check()?;
        self.file.syncer()
    }

    /// Bytes in the file.
    pub(crate) fn len(&self) -> u64 {
        self.file.len()
    }
}
