//! Opens a value table: point lookups through the dense index, the whole
//! index in one read for lazy GC, and coalesced reads of chosen records
//! (Scavenger, VLDB, §3.2.2).

use std::path::PathBuf;
use std::sync::Arc;

use super::format::{
    check_header, RecordHandle, ValueTableProperties, ENTRY_VALUE_LEN, VT_FOOTER, VT_HEADER_LEN,
};
use crate::error::{Error, Result};
use crate::fs::{CountedReader, CountingFs, IoClass};
use crate::iter::InternalIterator;
use crate::key::{self, Kind};
use crate::record::{decode_record, Bad, Record, KIND_PUT};
use crate::table::block::Block;
use crate::table::bloom;
use crate::table::format::{verify_block, BlockHandle, BLOCK_TRAILER_LEN};
use crate::table::reader::{open_footer, read_raw};
use crate::table::BlockCache;

/// Most bytes one coalesced read of records covers.
pub(crate) const MAX_COALESCED_READ: u64 = 4 << 20;

/// Fewest bytes a dense index entry takes in its partition: three one-byte
/// varints, the internal key's trailer and the record handle.
const MIN_INDEX_ENTRY_BYTES: usize = 3 + key::TRAILER_LEN + ENTRY_VALUE_LEN;

/// One entry of the dense index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub(crate) key: Vec<u8>,
    pub(crate) seq: u64,
    pub(crate) handle: RecordHandle,
}

/// An open value table. The top index, filter and properties stay in
/// memory; index partitions go through the block cache.
pub(crate) struct ValueTable {
    number: u64,
    path: Arc<PathBuf>,
    file: CountedReader,
    file_size: u64,
    top: Arc<Block>,
    /// Where the top index block starts: the partitions end there.
    top_at: u64,
    filter: Vec<u8>,
    properties: ValueTableProperties,
    hot: bool,
    cache: Arc<BlockCache>,
    /// GC's reads go around the page cache (`with_uncached_gc_reads`).
    uncached_gc_reads: bool,
}

impl ValueTable {
    pub(crate) fn open(
        fs: &CountingFs,
        path: PathBuf,
        number: u64,
        file_size: u64,
        cache: Arc<BlockCache>,
    ) -> Result<ValueTable> {
        // Opened by the store, when it opens or when a job hands it a
        // table it wrote: the value store's own reads.
        let class = IoClass::ValueStore;
        let (file, path, footer) =
            open_footer(fs, path, file_size, VT_FOOTER, VT_HEADER_LEN, class)?;
        let bad = |at: u64, why: String| Error::corruption(path.as_path(), at, why);
        check_header(&file.read_at(0, VT_HEADER_LEN, class)?).map_err(|why| bad(0, why))?;
        let read = |h: BlockHandle| read_raw(&file, &path, file_size, h, class);
        let top = Arc::new(Block::new(
            read(footer.index)?,
            path.clone(),
            footer.index.offset,
        )?);
        let filter = read(footer.filter)?;
        let properties = ValueTableProperties::decode(&read(footer.properties)?)
            .ok_or_else(|| bad(footer.properties.offset, "bad properties block".into()))?;
        if properties.hot > 1 {
            return Err(bad(
                footer.properties.offset,
                format!("hot property {} is neither 0 nor 1", properties.hot),
            ));
        }
        if properties.records_end < VT_HEADER_LEN as u64
            || properties.records_end > footer.index.offset
        {
            return Err(bad(
                footer.properties.offset,
                format!(
                    "records end at {} outside the file's record area",
                    properties.records_end
                ),
            ));
        }
        Ok(ValueTable {
            number,
            path,
            file,
            file_size,
            top,
            top_at: footer.index.offset,
            filter,
            hot: properties.hot == 1,
            properties,
            cache,
            uncached_gc_reads: false,
        })
    }

    /// GC's reads of this table, which it deletes once emptied, go around
    /// the page cache (`TableLayoutOptions::direct_io`).
    pub(crate) fn with_uncached_gc_reads(mut self, on: bool) -> ValueTable {
        self.uncached_gc_reads = on;
        self
    }

    pub(crate) fn number(&self) -> u64 {
        self.number
    }

    pub(crate) fn file_size(&self) -> u64 {
        self.file_size
    }

    /// Bytes of its records: from the header to the first index
    /// partition (what live and garbage bytes are shares of).
    pub(crate) fn record_bytes(&self) -> u64 {
        self.properties.records_end - VT_HEADER_LEN as u64
    }

    pub(crate) fn properties(&self) -> &ValueTableProperties {
        &self.properties
    }

    /// True for a table of hot values (Scavenger, VLDB, §3.4.2).
    pub(crate) fn is_hot(&self) -> bool {
        self.hot
    }

    fn corruption(&self, at: u64, why: impl Into<String>) -> Error {
        Error::corruption(self.path.as_path(), at, why.into())
    }

    fn handle_at(&self, v: &[u8]) -> Result<BlockHandle> {
        BlockHandle::decode(v)
            .ok_or_else(|| self.corruption(self.top_at, "bad partition handle in the top index"))
    }

    fn partition(&self, h: BlockHandle, class: IoClass) -> Result<Arc<Block>> {
        self.cache.get_or_read(self.number, h.offset, true, || {
            let data = read_raw(&self.file, &self.path, self.file_size, h, class)?;
            Ok(Arc::new(Block::new(data, self.path.clone(), h.offset)?))
        })
    }

    /// Where the record of `key` at sequence `seq` is, if the table holds
    /// it: the filter answers most misses, then one partition (cached).
    #[cfg(test)]
    pub(crate) fn find(
        &self,
        key: &[u8],
        seq: u64,
        class: IoClass,
    ) -> Result<Option<RecordHandle>> {
        if !bloom::may_contain(&self.filter, bloom::key_hash(key)) {
            return Ok(None);
        }
        let target = key::encode(key, seq, key::KIND_SEEK);
        let mut top = self.top.iter();
        top.seek(&target);
        top.status()?;
        if !top.valid() {
            return Ok(None);
        }
        let h = self.handle_at(top.value())?;
        let block = self.partition(h, class)?;
        let mut it = block.iter();
        it.seek(&target);
        it.status()?;
        if !it.valid() || key::user_key(it.key()) != key || key::sequence(it.key()) != seq {
            return Ok(None);
        }
        RecordHandle::decode(it.value())
            .map(Some)
            .ok_or_else(|| self.corruption(h.offset, "bad record handle in the dense index"))
    }

    /// Every record of `key` the table holds, newest first (a read that
    /// knows the record's length and checksum but not its sequence, after
    /// following an inheritance edge). Usually one; the filter answers most
    /// misses.
    pub(crate) fn find_all(&self, key: &[u8], class: IoClass) -> Result<Vec<IndexEntry>> {
        let mut out = Vec::new();
        if !bloom::may_contain(&self.filter, bloom::key_hash(key)) {
            return Ok(out);
        }
        let target = key::encode(key, key::MAX_SEQUENCE, key::KIND_SEEK);
        let mut top = self.top.iter();
        top.seek(&target);
        // A key's entries may run on into the next partition.
        while top.valid() {
            let h = self.handle_at(top.value())?;
            let block = self.partition(h, class)?;
            let mut it = block.iter();
            it.seek(&target);
            while it.valid() && key::user_key(it.key()) == key {
                let handle = RecordHandle::decode(it.value()).ok_or_else(|| {
                    self.corruption(h.offset, "bad record handle in the dense index")
                })?;
                out.push(IndexEntry {
                    key: key.to_vec(),
                    seq: key::sequence(it.key()),
                    handle,
                });
                it.next();
            }
            it.status()?;
            if it.valid() {
                break;
            }
            top.next();
        }
        top.status()?;
        Ok(out)
    }

    /// Every entry of the dense index, in key order, from one sequential
    /// read of the partitions (lazy read's first step, Scavenger, VLDB, §3.2.2).
    /// Returns the entries and the bytes read.
    pub(crate) fn index_entries(&self, class: IoClass) -> Result<(Vec<IndexEntry>, u64)> {
        let start = self.properties.records_end;
        let len = (self.top_at - start) as usize;
        let mut buf = Vec::new();
        let at = self.read_once(start, len, class, &mut buf)?;
        let raw = &buf[at..at + len];
        // The properties' record count is a claim checked below, not a size
        // to reserve by: the partitions just read bound what they can hold.
        let most = raw.len() / MIN_INDEX_ENTRY_BYTES;
        let claimed = usize::try_from(self.properties.records).unwrap_or(usize::MAX);
        let mut out = Vec::with_capacity(claimed.min(most));
        let mut top = self.top.iter();
        top.seek_to_first();
        let mut expect_at = start;
        while top.valid() {
            let h = self.handle_at(top.value())?;
            if h.offset != expect_at {
                return Err(self.corruption(
                    h.offset,
                    format!(
                        "index partition at {} where {expect_at} was expected",
                        h.offset
                    ),
                ));
            }
            let end = h
                .offset
                .checked_add(h.size)
                .and_then(|e| e.checked_add(BLOCK_TRAILER_LEN as u64))
                .unwrap_or(u64::MAX);
            if end > self.top_at {
                return Err(self.corruption(h.offset, "index partition runs past the top index"));
            }
            let slice = raw[(h.offset - start) as usize..(end - start) as usize].to_vec();
            let block = Arc::new(Block::new(
                verify_block(slice, &self.path, h.offset)?,
                self.path.clone(),
                h.offset,
            )?);
            let mut it = block.iter();
            it.seek_to_first();
            while it.valid() {
                let ik = it.key();
                let handle = RecordHandle::decode(it.value()).ok_or_else(|| {
                    self.corruption(h.offset, "bad record handle in the dense index")
                })?;
                if key::kind_byte(ik) != Kind::Value as u8 {
                    return Err(self.corruption(h.offset, "dense index entry of a kind not a put"));
                }
                out.push(IndexEntry {
                    key: key::user_key(ik).to_vec(),
                    seq: key::sequence(ik),
                    handle,
                });
                it.next();
            }
            it.status()?;
            expect_at = end;
            top.next();
        }
        top.status()?;
        if expect_at != self.top_at {
            return Err(self.corruption(expect_at, "the index partitions end before the top index"));
        }
        if out.len() as u64 != self.properties.records {
            return Err(self.corruption(
                self.properties.records_end,
                format!(
                    "the dense index lists {} records, the properties {}",
                    out.len(),
                    self.properties.records
                ),
            ));
        }
        Ok((out, self.top_at - start))
    }

    /// A read of bytes the caller needs once: GC's reads of a victim, which
    /// it deletes once emptied, go around the page cache when the table was
    /// opened so (Scavenger, VLDB, §4 reads with direct I/O) and push out nothing
    /// the engine still reads.
    /// Into `buf`, which the caller keeps from read to read (a GC step's
    /// runs: fresh multi-megabyte buffers cost page faults and zeroing, 5%
    /// of the scavenger preset's CPU time); returns where in `buf` the bytes
    /// start.
    fn read_once(
        &self,
        offset: u64,
        len: usize,
        class: IoClass,
        buf: &mut Vec<u8>,
    ) -> Result<usize> {
        if self.uncached_gc_reads && class == IoClass::Gc {
            self.file.read_at_uncached_into(offset, len, buf, class)
        } else {
            *buf = self.file.read_at(offset, len, class)?;
            Ok(0)
        }
    }

    /// Reads the record `e` names and checks it is intact and is `e`'s.
    #[cfg(test)]
    pub(crate) fn read(
        &self,
        e: &IndexEntry,
        class: IoClass,
    ) -> Result<crate::value::log::reader::OwnedRecord> {
        let mut out = None;
        self.read_coalesced(std::slice::from_ref(e), 0, class, |_, _, r| {
            out = Some(crate::value::log::reader::owned(r));
            Ok(())
        })?;
        Ok(out.expect("one record visited"))
    }

    /// Visits the records of `entries` (in increasing offset order): runs
    /// of records with gaps of at most `gap` bytes come from one read of up
    /// to [`MAX_COALESCED_READ`] (Scavenger, VLDB, §3.2.2: GC reads only valid
    /// values). Each record is checked against its entry and handed over
    /// with its stored checksum. Returns the bytes read.
    pub(crate) fn read_coalesced(
        &self,
        entries: &[IndexEntry],
        gap: u64,
        class: IoClass,
        mut f: impl FnMut(&IndexEntry, u32, Record<'_>) -> Result<()>,
    ) -> Result<u64> {
        let mut cursor = CoalescedReader::new(self, entries, gap, class);
        while let Some((e, crc, r)) = cursor.next()? {
            f(e, crc, r)?;
        }
        Ok(cursor.bytes_read)
    }

    fn check<'a>(&self, raw: &'a [u8], e: &IndexEntry) -> Result<Record<'a>> {
        let bad = |why: String| self.corruption(e.handle.offset, why);
        let (r, len) = decode_record(raw).map_err(|b| match b {
            Bad::Incomplete => bad("value record shorter than its index entry says".into()),
            Bad::Damaged(why) => bad(why),
        })?;
        if len != raw.len() {
            return Err(bad("value record shorter than its index entry says".into()));
        }
        if r.key != e.key.as_slice() || r.seq != e.seq || r.kind() != KIND_PUT {
            return Err(bad("value record does not match its index entry".into()));
        }
        Ok(r)
    }

    /// Reads the whole table and checks every block, every record against
    /// its index entry (the records tile the record area exactly, in
    /// order), the filter and the properties. Returns the records checked.
    pub(crate) fn verify(&self) -> Result<u64> {
        let (entries, _) = self.index_entries(IoClass::UserRead)?;
        let mut at = VT_HEADER_LEN as u64;
        let mut prev: Option<&IndexEntry> = None;
        let (mut keys, mut values) = (0u64, 0u64);
        for e in &entries {
            if e.handle.offset != at {
                return Err(self.corruption(
                    e.handle.offset,
                    format!(
                        "dense index entry at {} where a record starts at {at}",
                        e.handle.offset
                    ),
                ));
            }
            if let Some(p) = prev {
                let a = key::encode(&p.key, p.seq, Kind::Value as u8);
                let b = key::encode(&e.key, e.seq, Kind::Value as u8);
                if !key::compare(&a, &b).is_lt() {
                    return Err(self.corruption(e.handle.offset, "dense index out of key order"));
                }
            }
            if !bloom::may_contain(&self.filter, bloom::key_hash(&e.key)) {
                return Err(
                    self.corruption(e.handle.offset, "the filter does not hold a record's key")
                );
            }
            at = e.handle.end();
            prev = Some(e);
        }
        if at != self.properties.records_end {
            return Err(self.corruption(at, "records do not end where the properties say"));
        }
        self.read_coalesced(&entries, 0, IoClass::UserRead, |_, _, r| {
            keys += r.key.len() as u64;
            values += r.value.len() as u64;
            Ok(())
        })?;
        let p = &self.properties;
        if keys != p.raw_key_bytes || values != p.raw_value_bytes {
            return Err(self.corruption(
                p.records_end,
                "record key or value bytes differ from the properties",
            ));
        }
        Ok(entries.len() as u64)
    }
}

/// The records of some of a value table's entries (in increasing offset
/// order), read as [`ValueTable::read_coalesced`] reads them but pulled
/// one at a time, with one run (at most `max_read` bytes,
/// [`MAX_COALESCED_READ`] unless [`CoalescedReader::with_max_read`] says
/// less) in memory: GC merges its victims' live records through one cursor
/// each instead of holding them all.
pub(crate) struct CoalescedReader<'a> {
    table: &'a ValueTable,
    entries: &'a [IndexEntry],
    gap: u64,
    max_read: u64,
    class: IoClass,
    /// The next entry to hand out.
    next: usize,
    /// `entries[next..run_end]` are in `buf`, whose byte `buf_start` is the
    /// table's byte `buf_offset`. The buffer is reused run after run.
    run_end: usize,
    buf: Vec<u8>,
    buf_start: usize,
    buf_offset: u64,
    /// Bytes read so far.
    pub(crate) bytes_read: u64,
}

impl<'a> CoalescedReader<'a> {
    pub(crate) fn new(
        table: &'a ValueTable,
        entries: &'a [IndexEntry],
        gap: u64,
        class: IoClass,
    ) -> Self {
        CoalescedReader {
            table,
            entries,
            gap,
            max_read: MAX_COALESCED_READ,
            class,
            next: 0,
            run_end: 0,
            buf: Vec::new(),
            buf_start: 0,
            buf_offset: 0,
            bytes_read: 0,
        }
    }

    /// Runs of at most `bytes` (a single record may still be longer).
    pub(crate) fn with_max_read(mut self, bytes: u64) -> Self {
        self.max_read = bytes;
        self
    }

    /// The entry the next record is read for.
    pub(crate) fn peek(&self) -> Option<&'a IndexEntry> {
        self.entries.get(self.next)
    }

    /// The index in `entries` of the entry the next record is read for.
    pub(crate) fn position(&self) -> usize {
        self.next
    }

    /// The next record, checked against its entry, with its entry and
    /// stored checksum; `None` after the last.
    pub(crate) fn next(&mut self) -> Result<Option<(&'a IndexEntry, u32, Record<'_>)>> {
        let Some(e) = self.entries.get(self.next) else {
            return Ok(None);
        };
        if self.next == self.run_end {
            self.fill()?;
        }
        self.next += 1;
        let at = self.buf_start + (e.handle.offset - self.buf_offset) as usize;
        let raw = &self.buf[at..at + e.handle.len as usize];
        let r = self.table.check(raw, e)?;
        Ok(Some((e, crate::coding::u32_at(raw, 0), r)))
    }

    /// Reads the run that starts at the next entry: the entries after it
    /// with gaps of at most `gap` bytes, up to `max_read` bytes.
    fn fill(&mut self) -> Result<()> {
        let (entries, i) = (self.entries, self.next);
        let limit = self.table.properties.records_end;
        let first = entries[i].handle;
        let mut end = first.end();
        let mut j = i + 1;
        while j < entries.len() {
            let h = entries[j].handle;
            if h.offset < end || h.offset - end > self.gap || h.end() - first.offset > self.max_read
            {
                break;
            }
            end = h.end();
            j += 1;
        }
        if first.offset < VT_HEADER_LEN as u64 || end > limit {
            return Err(self.table.corruption(
                first.offset,
                "a record handle points outside the table's records",
            ));
        }
        // One run in memory at a time, in the buffer of the run before.
        let len = (end - first.offset) as usize;
        self.buf_start = self
            .table
            .read_once(first.offset, len, self.class, &mut self.buf)?;
        self.bytes_read += len as u64;
        self.buf_offset = first.offset;
        self.run_end = j;
        Ok(())
    }
}
