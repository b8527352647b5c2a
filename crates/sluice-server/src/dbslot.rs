//! The keyspace's database handle, which a replicated shard replaces as a
//! whole when it installs a snapshot (`raft::swap`): the database is closed
//! and another is opened in its place, on the snapshot's files.
//!
//! Users take the handle for one operation ([`DbSlot::get`]) and drop it
//! soon after. [`DbSlot::replace`] holds every new `get` out, waits until
//! the handles given out are dropped, and only then closes the database:
//! no one writes to a database being swapped out, and none of its
//! background work outlives the close.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use sluicedb::Db;

/// How long a replacement waits, at most, for handles given out.
pub const REPLACE_WAIT_MS: u64 = 30_000;

/// The database, replaceable. Lock order: the keyspace lock, then the
/// slot's lock (a `get` never waits for the keyspace lock while it holds
/// the slot's: it holds the slot's lock only to clone the handle).
pub struct DbSlot {
    /// `None` only while [`DbSlot::replace`] holds the lock exclusively.
    cur: RwLock<Option<Arc<Db>>>,
}

impl DbSlot {
    pub fn new(db: Db) -> DbSlot {
        DbSlot {
            cur: RwLock::new(Some(Arc::new(db))),
        }
    }

    /// The database now. The handle keeps a replacement waiting until it
    /// is dropped: hold it for an operation, not across waits.
    pub fn get(&self) -> Arc<Db> {
        self.cur
            .read()
            .as_ref()
            .expect("the database slot is empty only inside replace")
            .clone()
    }

    /// Replaces the database. Holds new `get`s out; waits (up to
    /// `wait_ms`) until every handle given out is dropped; runs `last`
    /// on the old database, the only handle left (so nothing else writes
    /// it); closes it; and puts the database `open` returns (given what
    /// `last` returned) in its place.
    ///
    /// Errors: a handle still held after `wait_ms`, or `last` failing,
    /// leave the old database in place; `open` failing leaves the slot
    /// with no database to put back, which is an error the caller cannot
    /// recover from in this process (the old one is closed, its files
    /// perhaps moved): later `get`s panic, so the caller stops.
    pub fn replace<T>(
        &self,
        wait_ms: u64,
        last: impl FnOnce(&Db) -> Result<T, String>,
        open: impl FnOnce(T) -> Result<Db, String>,
    ) -> Result<(), String> {
        let mut cur = self.cur.write();
        let deadline = Instant::now() + Duration::from_millis(wait_ms);
        let carried = {
            let old = cur
                .as_ref()
                .expect("the database slot is empty only inside replace");
            while Arc::strong_count(old) > 1 {
                if Instant::now() > deadline {
                    return Err(format!(
                        "the database is still in use after {wait_ms} ms; not replaced"
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            last(old)?
        };
        // The only handle: dropping it closes the database (background
        // work stopped, journal synced, lock released).
        drop(cur.take());
        let new = open(carried)?;
        *cur = Some(Arc::new(new));
        Ok(())
    }
}
