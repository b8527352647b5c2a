//! Writes a value table from records in internal-key order (Scavenger, VLDB,
//! §3.2.1, Fig. 7: records, then a dense index of every record).

use super::format::{
    header, RecordHandle, ValueTableProperties, VT_FORMAT_VERSION, VT_HEADER_LEN, VT_MAGIC,
};
use crate::error::{Error, Result};
use crate::fs::CountedWriter;
use crate::key::{self, Kind};
use crate::record::{encode_record, kind_of, Record, KIND_PUT};
use crate::table::block::BlockBuilder;
use crate::table::bloom;
use crate::table::format::{block_trailer, BlockHandle, Footer};

/// Knobs a value table is built with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ValueTableOptions {
    /// An index partition is cut when it reaches this size: a point lookup
    /// reads one partition (through the block cache).
    pub(crate) index_block_bytes: usize,
    pub(crate) restart_interval: usize,
    pub(crate) bloom_bits_per_key: u32,
}

/// What a finished value table looks like, for its manifest entry.
#[derive(Debug, Clone)]
pub(crate) struct BuiltValueTable {
    pub(crate) file_size: u64,
    pub(crate) hot: bool,
    pub(crate) properties: ValueTableProperties,
}

pub(crate) struct ValueTableBuilder {
    file: CountedWriter,
    opts: ValueTableOptions,
    hot: bool,
    offset: u64,
    record_buf: Vec<u8>,
    ikey: Vec<u8>,
    partition: BlockBuilder,
    /// Finished partitions, written after the records: (last key, block).
    partitions: Vec<(Vec<u8>, Vec<u8>)>,
    hashes: Vec<u64>,
    last: Vec<u8>,
    props: ValueTableProperties,
    last_crc: u32,
}

impl ValueTableBuilder {
    /// Starts a table in `file` (empty) by writing its header.
    pub(crate) fn new(mut file: CountedWriter, opts: ValueTableOptions, hot: bool) -> Result<Self> {
        file.append(&header())?;
        Ok(ValueTableBuilder {
            file,
            opts,
            hot,
            offset: VT_HEADER_LEN as u64,
            record_buf: Vec::new(),
            ikey: Vec::new(),
            partition: BlockBuilder::new(opts.restart_interval),
            partitions: Vec::new(),
            hashes: Vec::new(),
            last: Vec::new(),
            props: ValueTableProperties {
                smallest_seq: u64::MAX,
                hot: u64::from(hot),
                ..Default::default()
            },
            last_crc: 0,
        })
    }

    /// Appends a put record; its internal key (key, seq) must be greater
    /// than every one added before. Returns where it is.
    pub(crate) fn add(&mut self, r: &Record<'_>) -> Result<RecordHandle> {
        if kind_of(r.flags) != KIND_PUT {
            return Err(Error::InvalidArgument(format!(
                "a value table holds puts only, not record kind {}",
                kind_of(r.flags)
            )));
        }
        key::encode_into(&mut self.ikey, r.key, r.seq, Kind::Value as u8);
        if self.props.records > 0 && !key::compare(&self.last, &self.ikey).is_lt() {
            return Err(Error::InvalidArgument(
                "value table records must arrive in increasing internal-key order".into(),
            ));
        }
        self.record_buf.clear();
        let (len, crc) = encode_record(&mut self.record_buf, r);
        self.last_crc = crc;
        self.file.append(&self.record_buf)?;
        let handle = RecordHandle {
            offset: self.offset,
            len,
        };
        self.offset += u64::from(len);
        if self.props.records == 0 || key::user_key(&self.last) != r.key {
            self.hashes.push(bloom::key_hash(r.key));
        }
        self.partition.add(&self.ikey, &handle.encode());
        std::mem::swap(&mut self.last, &mut self.ikey);
        let p = &mut self.props;
        p.records += 1;
        p.raw_key_bytes += r.key.len() as u64;
        p.raw_value_bytes += r.value.len() as u64;
        p.smallest_seq = p.smallest_seq.min(r.seq);
        p.largest_seq = p.largest_seq.max(r.seq);
        if self.partition.size_estimate() >= self.opts.index_block_bytes {
            self.cut_partition();
        }
        Ok(handle)
    }

    fn cut_partition(&mut self) {
        if !self.partition.is_empty() {
            let last = self.partition.last_key().to_vec();
            self.partitions.push((last, self.partition.finish()));
        }
    }

    /// The stored checksum of the record added last (what a pointer to it
    /// carries).
    pub(crate) fn last_crc(&self) -> u32 {
        self.last_crc
    }

    /// Records added so far.
    #[cfg(test)]
    pub(crate) fn records(&self) -> u64 {
        self.props.records
    }

    /// Bytes the table would have if finished now (records and index).
    pub(crate) fn estimated_size(&self) -> u64 {
        let index: usize = self.partitions.iter().map(|(_, b)| b.len()).sum();
        self.offset + (index + self.partition.size_estimate()) as u64
    }

    fn write_block(&mut self, block: &[u8]) -> Result<BlockHandle> {
        let handle = BlockHandle {
            offset: self.offset,
            size: block.len() as u64,
        };
        self.file.append(block)?;
        self.file.append(&block_trailer(block))?;
        self.offset += (block.len() + crate::table::format::BLOCK_TRAILER_LEN) as u64;
        Ok(handle)
    }

    /// Writes the index partitions, top index, filter, properties and
    /// footer, and syncs the file. A table needs at least one record.
    pub(crate) fn finish(mut self) -> Result<BuiltValueTable> {
        if self.props.records == 0 {
            return Err(Error::InvalidArgument(
                "a value table needs at least one record".into(),
            ));
        }
        self.cut_partition();
        self.props.records_end = self.offset;
        self.props.index_partitions = self.partitions.len() as u64;
        let mut top = BlockBuilder::new(1);
        let mut handle_buf = Vec::with_capacity(16);
        for (last, block) in std::mem::take(&mut self.partitions) {
            let h = self.write_block(&block)?;
            handle_buf.clear();
            h.encode_to(&mut handle_buf);
            top.add(&last, &handle_buf);
        }
        let top = self.write_block(&top.finish())?;
        let filter = bloom::build(&self.hashes, self.opts.bloom_bits_per_key);
        let filter = self.write_block(&filter)?;
        let properties = self.write_block(&self.props.encode())?;
        let footer = Footer {
            filter,
            properties,
            index: top,
            format_version: VT_FORMAT_VERSION,
        };
        self.file.append(&footer.encode_as(VT_MAGIC))?;
        self.file.sync()?;
        Ok(BuiltValueTable {
            file_size: self.file.len(),
            hot: self.hot,
            properties: self.props,
        })
    }
}
