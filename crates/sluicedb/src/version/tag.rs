//! Manifest field tags (`docs/format/manifest.md`), in one list for the
//! version's own fields and each value layout's record (`crate::value::meta`):
//! a tag is never reused, and a new one bumps the manifest format version
//! (`edit::MANIFEST_FORMAT_VERSION`).

pub(crate) const FORMAT_VERSION: u32 = 1;
pub(crate) const INDEX_SHAPE: u32 = 2;
pub(crate) const LOG_NUMBER: u32 = 3;
pub(crate) const NEXT_FILE_NUMBER: u32 = 4;
pub(crate) const LAST_SEQUENCE: u32 = 5;
pub(crate) const COMPACT_POINTER: u32 = 6;
pub(crate) const DELETED_FILE: u32 = 7;
pub(crate) const NEW_FILE: u32 = 8;
pub(crate) const VALUE_LOG_TAIL: u32 = 9;
pub(crate) const VALUE_LOG_GARBAGE: u32 = 10;
pub(crate) const VALUE_LOG_JOURNAL: u32 = 11;
pub(crate) const HASH_GROUPS: u32 = 12;
pub(crate) const HASH_FILE_ADDED: u32 = 13;
pub(crate) const HASH_FILE_DROPPED: u32 = 14;
pub(crate) const PRESET: u32 = 15;
pub(crate) const VALUE_LOG_SEALED: u32 = 16;
pub(crate) const HASH_GROUP_SPLIT: u32 = 17;
pub(crate) const TABLE_LAYOUT: u32 = 18;
pub(crate) const TABLE_ADDED: u32 = 19;
pub(crate) const TABLE_REMOVED: u32 = 20;
pub(crate) const TABLE_INHERITED: u32 = 21;
pub(crate) const TABLE_REFS: u32 = 22;
pub(crate) const FILE_VALUE_BYTES: u32 = 23;
pub(crate) const PARTITION_BOUNDARY: u32 = 24;
pub(crate) const HASH_INDEX_CHECKPOINT: u32 = 25;
pub(crate) const TABLE_KEYS: u32 = 26;
pub(crate) const FILE_PAYLOAD: u32 = 27;
pub(crate) const TABLE_PENDING: u32 = 28;
pub(crate) const TABLE_SETTLED: u32 = 29;
pub(crate) const HASH_FILE_TO_COLD: u32 = 30;
pub(crate) const VALUE_LOG_DURABLE: u32 = 31;
pub(crate) const TOTALS: u32 = 32;
