//! Writes a table file from entries in increasing internal-key order.

use super::block::BlockBuilder;
use super::bloom;
use super::format::{
    block_trailer, decode_properties, encode_properties, BlockHandle, Footer, TABLE_FORMAT_VERSION,
};
use crate::error::Result;
use crate::fs::CountedWriter;
use crate::key::{self, Kind};

/// Knobs a table is built with (from `Options`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TableOptions {
    pub(crate) block_size_bytes: usize,
    pub(crate) restart_interval: usize,
    pub(crate) bloom_bits_per_key: u32,
}

/// Counters kept in the properties block and returned by `finish`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TableProperties {
    pub(crate) entries: u64,
    pub(crate) deletions: u64,
    pub(crate) value_pointers: u64,
    pub(crate) raw_key_bytes: u64,
    pub(crate) raw_value_bytes: u64,
    pub(crate) data_blocks: u64,
}

impl TableProperties {
    pub(crate) fn encode(&self) -> Vec<u8> {
        encode_properties(&[
            ("entries", self.entries),
            ("deletions", self.deletions),
            ("value_pointers", self.value_pointers),
            ("raw_key_bytes", self.raw_key_bytes),
            ("raw_value_bytes", self.raw_value_bytes),
            ("data_blocks", self.data_blocks),
        ])
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        let mut p = TableProperties::default();
        decode_properties(b, |name, v| match name {
            b"entries" => p.entries = v,
            b"deletions" => p.deletions = v,
            b"value_pointers" => p.value_pointers = v,
            b"raw_key_bytes" => p.raw_key_bytes = v,
            b"raw_value_bytes" => p.raw_value_bytes = v,
            b"data_blocks" => p.data_blocks = v,
            _ => {}
        })?;
        Some(p)
    }
}

/// What a finished table looks like, for its manifest entry.
#[derive(Debug, Clone)]
pub(crate) struct BuiltTable {
    pub(crate) file_size: u64,
    pub(crate) smallest: Vec<u8>,
    pub(crate) largest: Vec<u8>,
    pub(crate) properties: TableProperties,
}

pub(crate) struct TableBuilder {
    file: CountedWriter,
    opts: TableOptions,
    data: BlockBuilder,
    index: BlockBuilder,
    offset: u64,
    hashes: Vec<u64>,
    last_user_key: Vec<u8>,
    smallest: Vec<u8>,
    props: TableProperties,
    handle_buf: Vec<u8>,
}

impl TableBuilder {
    pub(crate) fn new(file: CountedWriter, opts: TableOptions) -> Self {
        TableBuilder {
            file,
            opts,
            data: BlockBuilder::new(opts.restart_interval),
            index: BlockBuilder::new(1),
            offset: 0,
            hashes: Vec::new(),
            last_user_key: Vec::new(),
            smallest: Vec::new(),
            props: TableProperties::default(),
            handle_buf: Vec::with_capacity(16),
        }
    }

    /// Adds an entry; `ikey` must be greater than every key added before.
    pub(crate) fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        #[cfg(any(debug_assertions, feature = "invariants"))]
        assert!(
            self.props.entries == 0 || key::compare(self.data_last_or_index(), ikey).is_lt(),
            "table keys out of order"
        );
        if self.props.entries == 0 {
            self.smallest = ikey.to_vec();
        }
        let uk = key::user_key(ikey);
        if self.props.entries == 0 || uk != self.last_user_key.as_slice() {
            self.hashes.push(bloom::key_hash(uk));
            self.last_user_key.clear();
            self.last_user_key.extend_from_slice(uk);
        }
        self.props.entries += 1;
        self.props.raw_key_bytes += uk.len() as u64;
        self.props.raw_value_bytes += value.len() as u64;
        match Kind::from_u8(key::kind_byte(ikey)) {
            Some(Kind::Delete) => self.props.deletions += 1,
            Some(Kind::ValuePointer) => self.props.value_pointers += 1,
            _ => {}
        }
        self.data.add(ikey, value);
        if self.data.size_estimate() >= self.opts.block_size_bytes {
            self.flush_data_block()?;
        }
        Ok(())
    }

    #[cfg(any(debug_assertions, feature = "invariants"))]
    fn data_last_or_index(&self) -> &[u8] {
        if self.data.is_empty() {
            self.index.last_key()
        } else {
            self.data.last_key()
        }
    }

    /// Bytes written so far plus the pending block.
    pub(crate) fn estimated_size(&self) -> u64 {
        self.offset + self.data.size_estimate() as u64
    }

    fn write_block(&mut self, block: &[u8]) -> Result<BlockHandle> {
        let handle = BlockHandle {
            offset: self.offset,
            size: block.len() as u64,
        };
        let trailer = block_trailer(block);
        self.file.append(block)?;
        self.file.append(&trailer)?;
        self.offset += (block.len() + trailer.len()) as u64;
        Ok(handle)
    }

    fn flush_data_block(&mut self) -> Result<()> {
        if self.data.is_empty() {
            return Ok(());
        }
        // The index key is the block's last key: every key in the block is
        // <= it and every key in later blocks is > it.
        let last = self.data.last_key().to_vec();
        let block = self.data.finish();
        let handle = self.write_block(&block)?;
        self.handle_buf.clear();
        handle.encode_to(&mut self.handle_buf);
        let hb = std::mem::take(&mut self.handle_buf);
        self.index.add(&last, &hb);
        self.handle_buf = hb;
        self.props.data_blocks += 1;
        Ok(())
    }

    /// Writes filter, properties, index and footer, and syncs the file.
    pub(crate) fn finish(mut self) -> Result<BuiltTable> {
        let largest = if self.data.is_empty() {
            self.index.last_key().to_vec()
        } else {
            self.data.last_key().to_vec()
        };
        self.flush_data_block()?;
        let filter = bloom::build(&self.hashes, self.opts.bloom_bits_per_key);
        let filter = self.write_block(&filter)?;
        let properties = self.write_block(&self.props.encode())?;
        let index_block = self.index.finish();
        let index = self.write_block(&index_block)?;
        let footer = Footer {
            filter,
            properties,
            index,
            format_version: TABLE_FORMAT_VERSION,
        };
        self.file.append(&footer.encode())?;
        self.file.sync()?;
        Ok(BuiltTable {
            file_size: self.file.len(),
            smallest: self.smallest,
            largest,
            properties: self.props,
        })
    }
}
