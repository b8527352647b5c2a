//! Sorted string tables (`docs/format/sstable.md`): immutable files of
//! internal keys and entries, with a block index, a bloom filter and
//! properties; shared block and table caches.

pub(crate) mod block;
pub(crate) mod block_cache;
pub(crate) mod bloom;
pub(crate) mod builder;
pub(crate) mod cache;
pub(crate) mod format;
pub(crate) mod leaf;
pub(crate) mod reader;

pub(crate) use block_cache::BlockCache;
pub(crate) use builder::TableBuilder;
pub(crate) use cache::TableCache;
pub(crate) use reader::TableIter;
