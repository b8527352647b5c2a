//! WiscKey's value log (WiscKey, FAST '16, §3.3.2) as a series of files
//! (`docs/format/value-log.md`): records `(key, value)` with sequence
//! number, flags and CRC, appended at the head; GC reads from the tail.

mod gc;
pub(crate) mod journal;
pub(crate) mod meta;
pub(crate) mod reader;
pub(crate) mod replay;
pub(crate) mod store;
pub(crate) mod writer;
