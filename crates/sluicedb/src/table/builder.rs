//! Writes a table file from entries in increasing internal-key order.
//!
//! An index-decoupled table (format version 3, Scavenger (VLDB) §3.3) keeps the
//! pointer entries of separated values apart from the records (inline
//! values and tombstones): records go to data blocks under the pinned data
//! index, pointers to pointer blocks under a pinned pointer index, so that
//! the validity check of GC (GetKey, §3.3.2) reads only small pointer
//! blocks, never a data block full of inline values.

use std::sync::Arc;

use super::block::BlockBuilder;
use super::bloom;
use super::format::{
    block_trailer, decode_properties, encode_properties, BlockHandle, Footer,
    DECOUPLED_TABLE_FORMAT_VERSION, TABLE_FORMAT_VERSION,
};
use super::leaf::TableLeaf;
use crate::error::Result;
use crate::fs::{CountedWriter, FileSyncer};
use crate::key::{self, Kind};

/// Knobs a table is built with (from `Options`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TableOptions {
    pub(crate) block_size_bytes: usize,
    pub(crate) restart_interval: usize,
    pub(crate) bloom_bits_per_key: u32,
    /// Write index-decoupled tables (format version 3).
    pub(crate) decoupled: bool,
    /// Write a hash leaf (LightKV's on-disk leaf, [`super::leaf`]); plain
    /// tables only, an index-decoupled one ignores it.
    pub(crate) hash_leaf: bool,
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
    /// Pointer blocks of an index-decoupled table.
    pub(crate) pointer_blocks: u64,
    /// Where an index-decoupled table's pointer index is (size 0: none).
    pub(crate) pointer_index: BlockHandle,
    /// Where the filter of its pointer keys is (size 0: none); the
    /// footer's filter then covers only the keys in the data blocks.
    pub(crate) pointer_filter: BlockHandle,
    /// The hash leaf's block (size 0: none).
    pub(crate) leaf: BlockHandle,
}

impl TableProperties {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut fields = vec![
            ("entries", self.entries),
            ("deletions", self.deletions),
            ("value_pointers", self.value_pointers),
            ("raw_key_bytes", self.raw_key_bytes),
            ("raw_value_bytes", self.raw_value_bytes),
            ("data_blocks", self.data_blocks),
        ];
        if self.pointer_index.size > 0 {
            fields.extend([
                ("pointer_blocks", self.pointer_blocks),
                ("pointer_index_offset", self.pointer_index.offset),
                ("pointer_index_size", self.pointer_index.size),
                ("pointer_filter_offset", self.pointer_filter.offset),
                ("pointer_filter_size", self.pointer_filter.size),
            ]);
        }
        if self.leaf.size > 0 {
            fields.extend([
                ("leaf_offset", self.leaf.offset),
                ("leaf_size", self.leaf.size),
            ]);
        }
        encode_properties(&fields)
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
            b"pointer_blocks" => p.pointer_blocks = v,
            b"pointer_index_offset" => p.pointer_index.offset = v,
            b"pointer_index_size" => p.pointer_index.size = v,
            b"pointer_filter_offset" => p.pointer_filter.offset = v,
            b"pointer_filter_size" => p.pointer_filter.size = v,
            b"leaf_offset" => p.leaf.offset = v,
            b"leaf_size" => p.leaf.size = v,
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

/// Blocks of one kind being cut, with the index entries naming them and
/// the hashes of their user keys (for the run's filter) and, for a hash
/// leaf, where each block's keys end among them.
struct BlockRun {
    block: BlockBuilder,
    index: BlockBuilder,
    blocks: u64,
    hashes: Vec<u64>,
    handles: Vec<BlockHandle>,
    block_ends: Vec<usize>,
}

impl BlockRun {
    fn new(restart_interval: usize) -> Self {
        BlockRun {
            block: BlockBuilder::new(restart_interval),
            index: BlockBuilder::new(1),
            blocks: 0,
            hashes: Vec::new(),
            handles: Vec::new(),
            block_ends: Vec::new(),
        }
    }
}

/// The file being written, and where the next block goes.
struct BlockWriter {
    file: CountedWriter,
    offset: u64,
    handle_buf: Vec<u8>,
}

impl BlockWriter {
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

    /// Adds an entry to `run`'s pending block, cutting it when full.
    fn add(&mut self, run: &mut BlockRun, block_size: usize, k: &[u8], v: &[u8]) -> Result<()> {
        run.block.add(k, v);
        if run.block.size_estimate() >= block_size {
            self.cut(run)?;
        }
        Ok(())
    }

    /// Writes the run's pending block and indexes it under its last key:
    /// every key in the block is <= it and every key in later blocks of the
    /// run is > it.
    fn cut(&mut self, run: &mut BlockRun) -> Result<()> {
        if run.block.is_empty() {
            return Ok(());
        }
        let last = run.block.last_key().to_vec();
        let block = run.block.finish();
        let handle = self.write_block(&block)?;
        let mut hb = std::mem::take(&mut self.handle_buf);
        hb.clear();
        handle.encode_to(&mut hb);
        run.index.add(&last, &hb);
        self.handle_buf = hb;
        run.blocks += 1;
        // A key's hash is pushed before its first entry is added, so every
        // hash so far belongs to this block or an earlier one.
        run.handles.push(handle);
        run.block_ends.push(run.hashes.len());
        Ok(())
    }
}

pub(crate) struct TableBuilder {
    out: BlockWriter,
    opts: TableOptions,
    /// Data blocks: every entry of a plain table; the records of a decoupled one.
    records: BlockRun,
    /// Pointer blocks of a decoupled table.
    pointers: Option<BlockRun>,
    /// A decoupled table's entries of the current user key, held until the
    /// key ends: they all go to the pointer blocks if none is a record, else
    /// all to the data blocks (`docs/format/sstable.md`, "Index-decoupled
    /// tables": one stream per user key keeps point lookups exact).
    group: Vec<(Vec<u8>, Vec<u8>)>,
    group_has_record: bool,
    last_key: Vec<u8>,
    smallest: Vec<u8>,
    props: TableProperties,
}

impl TableBuilder {
    pub(crate) fn new(file: CountedWriter, opts: TableOptions) -> Self {
        TableBuilder {
            out: BlockWriter {
                file,
                offset: 0,
                handle_buf: Vec::with_capacity(16),
            },
            opts,
            records: BlockRun::new(opts.restart_interval),
            pointers: opts.decoupled.then(|| BlockRun::new(opts.restart_interval)),
            group: Vec::new(),
            group_has_record: false,
            last_key: Vec::new(),
            smallest: Vec::new(),
            props: TableProperties::default(),
        }
    }

    /// Adds an entry; `ikey` must be greater than every key added before.
    pub(crate) fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        let first = self.props.entries == 0;
        #[cfg(any(debug_assertions, feature = "invariants"))]
        assert!(
            first || key::compare(&self.last_key, ikey).is_lt(),
            "table keys out of order"
        );
        if first {
            self.smallest = ikey.to_vec();
        }
        let uk = key::user_key(ikey);
        let new_user_key = first || uk != key::user_key(&self.last_key);
        if new_user_key && self.pointers.is_none() {
            self.records.hashes.push(bloom::key_hash(uk));
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(ikey);
        self.props.entries += 1;
        self.props.raw_key_bytes += uk.len() as u64;
        self.props.raw_value_bytes += value.len() as u64;
        let kind = Kind::from_u8(key::kind_byte(ikey));
        match kind {
            Some(Kind::Delete) => self.props.deletions += 1,
            Some(Kind::ValuePointer) => self.props.value_pointers += 1,
            _ => {}
        }
        if self.pointers.is_none() {
            let size = self.opts.block_size_bytes;
            return self.out.add(&mut self.records, size, ikey, value);
        }
        if new_user_key {
            self.flush_group()?;
        }
        self.group_has_record |= kind != Some(Kind::ValuePointer);
        self.group.push((ikey.to_vec(), value.to_vec()));
        Ok(())
    }

    /// Sends the held entries of a decoupled table's last user key to their
    /// blocks, and its hash to their filter.
    fn flush_group(&mut self) -> Result<()> {
        let Some((first, _)) = self.group.first() else {
            return Ok(());
        };
        let hash = bloom::key_hash(key::user_key(first));
        let run = match (&mut self.pointers, self.group_has_record) {
            (Some(p), false) => p,
            _ => &mut self.records,
        };
        run.hashes.push(hash);
        for (k, v) in self.group.drain(..) {
            self.out.add(run, self.opts.block_size_bytes, &k, &v)?;
        }
        self.group_has_record = false;
        Ok(())
    }

    /// Bytes written so far plus the pending blocks.
    pub(crate) fn estimated_size(&self) -> u64 {
        let held: usize = self.group.iter().map(|(k, v)| k.len() + v.len()).sum();
        self.out.offset
            + self.records.block.size_estimate() as u64
            + self
                .pointers
                .as_ref()
                .map_or(0, |p| p.block.size_estimate() as u64)
            + held as u64
    }

    /// Writes filter, properties, indexes and footer, and syncs the file.
    #[cfg(test)]
    pub(crate) fn finish(self) -> Result<BuiltTable> {
        let (built, syncer) = self.finish_unsynced()?;
        syncer.sync()?;
        Ok(built)
    }

    /// [`TableBuilder::finish`] without the sync: the file's bytes are
    /// handed to the file system and their writeback started, and the
    /// returned handle makes them durable. The caller syncs it before the
    /// table is named anywhere durable (a manifest edit), so that a job
    /// writing several tables syncs them together at its end
    /// (`compaction::write_merged`) rather than one after each.
    pub(crate) fn finish_unsynced(mut self) -> Result<(BuiltTable, Arc<dyn FileSyncer>)> {
        self.flush_group()?;
        let out = &mut self.out;
        out.cut(&mut self.records)?;
        self.props.data_blocks = self.records.blocks;
        let bits = self.opts.bloom_bits_per_key;
        let filter = out.write_block(&bloom::build(&self.records.hashes, bits))?;
        if self.opts.hash_leaf && self.pointers.is_none() {
            let r = &mut self.records;
            let leaf = TableLeaf::build(&r.hashes, &r.block_ends, std::mem::take(&mut r.handles));
            self.props.leaf = out.write_block(&leaf.encode())?;
        }
        let mut version = TABLE_FORMAT_VERSION;
        if let Some(p) = self.pointers.as_mut() {
            out.cut(p)?;
            self.props.pointer_blocks = p.blocks;
            self.props.pointer_filter = out.write_block(&bloom::build(&p.hashes, bits))?;
            self.props.pointer_index = out.write_block(&p.index.finish())?;
            version = DECOUPLED_TABLE_FORMAT_VERSION;
        }
        let properties = out.write_block(&self.props.encode())?;
        let index = out.write_block(&self.records.index.finish())?;
        let footer = Footer {
            filter,
            properties,
            index,
            format_version: version,
        };
        self.out.file.append(&footer.encode())?;
        self.out.file.flush()?;
        self.out.file.start_writeback();
        let syncer = self.out.file.syncer()?;
        let built = BuiltTable {
            file_size: self.out.file.len(),
            smallest: self.smallest,
            largest: self.last_key,
            properties: self.props,
        };
        Ok((built, syncer))
    }
}
