//! The super version: what a reader needs, the memtables and the version,
//! pinned together (RocksDB's `SuperVersion`). The database installs a new
//! one whenever a memtable is switched or flushed or a version installed
//! (`docs/design.md`, "Threads and locks"); readers and GC steps hold one
//! for as long as they read. It sits above both the memtables and the
//! versions, which know nothing of each other.

use std::sync::Arc;

use crate::memtable::WriteBuffer;
use crate::version::Version;

/// The active memtable, the immutable ones newest first, and the version.
pub(crate) struct SuperVersion {
    pub(crate) mem: Arc<dyn WriteBuffer>,
    pub(crate) imms: Vec<Arc<dyn WriteBuffer>>,
    pub(crate) current: Arc<Version>,
}
