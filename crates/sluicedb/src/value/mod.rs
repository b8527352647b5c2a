//! The value store: where separated values live (DESIGN.md axis 2).
//!
//! Values at or above the separation threshold are written here and the key
//! index keeps a [`ValuePointer`] (entry kind 2). Layouts: `log` (WiscKey,
//! seed 001 §3.3.2) first; HashKV's `hash` and Scavenger's `table` later.
//! The write path, GC and the log as journal live in `crate::db`
//! (`docs/design.md`, "Value store" and "Value log as journal").

pub(crate) mod log;
pub(crate) mod pointer;

use std::path::Path;

use crate::error::{Error, Result};
use crate::fs::IoClass;
use log::store::LogStore;
use pointer::ValuePointer;

/// The value that the pointer entry `pointer` of `key` refers to.
pub(crate) fn resolve(
    store: Option<&LogStore>,
    key: &[u8],
    pointer: &[u8],
    class: IoClass,
) -> Result<Vec<u8>> {
    let p = ValuePointer::decode(pointer).ok_or_else(|| {
        Error::corruption(Path::new(""), 0, "malformed value pointer in the index")
    })?;
    match store {
        Some(s) => Ok(s.read(&p, key, class)?.value),
        None => Err(missing_store()),
    }
}

/// The error for an index entry pointing into a value store that the
/// options did not open.
pub(crate) fn missing_store() -> Error {
    Error::InvalidArgument(
        "the database holds separated values; open it with a value store \
         (separation_threshold_bytes)"
            .into(),
    )
}
