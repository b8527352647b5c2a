//! The block-framed log file format (LevelDB's: 32 KiB blocks of
//! checksummed fragments, `docs/format/journal.md`): written and read
//! record by record. The engine journal frames its write batches in it and
//! the manifest its version edits, so it sits below both.

pub(crate) mod format;
pub(crate) mod reader;
pub(crate) mod writer;

pub(crate) use reader::read_log;
pub(crate) use writer::LogWriter;
