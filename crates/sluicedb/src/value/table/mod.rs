//! Value tables: Scavenger's RecordBasedTable (Scavenger, VLDB, §3.2.1, Fig. 7),
//! the files of the `table` value layout (issue 18).
//!
//! A value table holds key-value records sorted by internal key and a
//! *dense* index with an entry per record (internal key → offset, length),
//! unlike a key table's sparse index of blocks. GC reads only the index to
//! learn every key of a victim, checks validity, then reads just the live
//! records (lazy read, §3.2.2); a point read finds its record through one
//! cached index partition and reads exactly the record. The format is in
//! `docs/format/value-table.md`.
//!
//! The layout that writes them at flush, follows inheritance edges and
//! collects them is `store.rs` and `gc.rs`; its manifest record `meta.rs`.

pub(crate) mod builder;
pub(crate) mod format;
mod gc;
pub(crate) use store::PendingTable;
pub(crate) mod meta;
pub(crate) mod reader;
pub(crate) mod store;

#[cfg(test)]
mod tests;
