//! sluicedb: a persistent, embeddable key-value storage engine for
//! update-heavy workloads with real values.
//!
//! ```no_run
//! use sluicedb::{Db, Options, WriteBatch, WriteOptions};
//! # fn main() -> sluicedb::Result<()> {
//! let db = Db::open("/tmp/example-db", Options::default())?;
//! db.put("hello", "world")?;
//! let mut batch = WriteBatch::new();
//! batch.put("a", "1").delete("hello");
//! db.write_opt(&WriteOptions::synced(), batch)?;
//! assert_eq!(db.get("a")?, Some(b"1".to_vec()));
//! for pair in db.prefix("a") {
//!     let (key, value) = pair?;
//!     println!("{key:?} = {value:?}");
//! }
//! # Ok(()) }
//! ```
//!
//! The design is in `docs/design.md`; file formats in `docs/format/`.

mod batch;
mod coding;
mod compaction;
mod db;
pub mod dump;
mod error;
mod filename;
pub mod fs;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod gc;
mod index;
mod iter;
mod journal;
mod key;
mod memtable;
mod options;
mod parallel;
mod policy;
mod stats;
mod table;
mod value;
mod version;

pub use batch::{WriteBatch, MAX_KEY_BYTES, MAX_VALUE_BYTES};
pub use db::{Db, Snapshot};
pub use error::{Error, Result};
pub use iter::{DbIterator, Range};
pub use options::*;
pub use stats::{
    GcStats, GcTotals, HashStats, LevelStats, ShapeStats, SpaceMismatch, StallMicros, Stats,
    TableStats, ValueStats,
};
