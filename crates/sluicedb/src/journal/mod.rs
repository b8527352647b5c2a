//! The write-ahead journal: a block-framed log of write batches
//! (`docs/format/journal.md`). The same framing carries the manifest.

pub(crate) mod control;
pub(crate) mod format;
pub(crate) mod reader;
pub(crate) mod writer;

pub(crate) use control::Control;
pub(crate) use reader::read_log;
pub(crate) use writer::LogWriter;
