//! The Raft log, vote and committed id, kept in the node's own database
//! under the `r` tag (`docs/format/raft-keys.md`):
//!
//! ```text
//! 'r' 'l' index u64 BE  -> postcard(Entry)        the log
//! 'r' 'p'               -> postcard(LogId)        last purged
//! 'r' 'v'               -> postcard(Vote)         synced when saved
//! 'r' 'c'               -> postcard(LogId)        committed (may lag)
//! ```
//!
//! Appends are synced before openraft hears they are durable. The engine's
//! one journal orders log appends and state-machine batches, so recovery's
//! prefix of history never holds an applied entry without the log before it.

use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote};
use parking_lot::Mutex;
use sluicedb::{Db, WriteBatch, WriteOptions};

use super::{NodeId, TypeConfig};
use crate::dbslot::DbSlot;

pub const RAFT_TAG: u8 = b'r';
const LOG: u8 = b'l';
const VOTE: &[u8] = b"rv";
const COMMITTED: &[u8] = b"rc";
const PURGED_KEY: &[u8] = b"rp";

type Entry = openraft::Entry<TypeConfig>;
type SResult<T> = Result<T, StorageError<NodeId>>;

pub fn log_key(index: u64) -> [u8; 10] {
    let mut k = [0u8; 10];
    k[0] = RAFT_TAG;
    k[1] = LOG;
    k[2..].copy_from_slice(&index.to_be_bytes());
    k
}

fn index_of(key: &[u8]) -> Option<u64> {
    (key.len() == 10 && key[0] == RAFT_TAG && key[1] == LOG)
        .then(|| u64::from_be_bytes(key[2..].try_into().unwrap_or_default()))
}

fn read_err(e: impl std::fmt::Display) -> StorageError<NodeId> {
    StorageIOError::read_logs(&std::io::Error::other(e.to_string())).into()
}

fn write_err(e: impl std::fmt::Display) -> StorageError<NodeId> {
    StorageIOError::write_logs(&std::io::Error::other(e.to_string())).into()
}

pub fn encode<T: serde::Serialize>(v: &T) -> Vec<u8> {
    // postcard only fails on a writer error or a type serde cannot say,
    // and a Vec grows; the raft types are plain data.
    postcard::to_stdvec(v).unwrap_or_default()
}

pub fn decode<T: serde::de::DeserializeOwned>(raw: &[u8], what: &str) -> Result<T, String> {
    postcard::from_bytes(raw).map_err(|e| format!("{what}: malformed record: {e}"))
}

/// The log's ends, kept in memory.
#[derive(Debug, Default, Clone, Copy)]
struct Ends {
    last: Option<LogId<NodeId>>,
    purged: Option<LogId<NodeId>>,
}

/// The log store; clones share the database and the ends.
#[derive(Clone)]
pub struct LogStore {
    /// The node's database: each operation takes the handle for its
    /// duration, so a snapshot install (which replaces the database)
    /// waits for it and carries its records over.
    slot: Arc<DbSlot>,
    ends: Arc<Mutex<Ends>>,
    /// Where appends note their time.
    pub stages: Arc<super::stages::Stages>,
}

impl LogStore {
    /// Opens the log in `db`, finding its last entry.
    pub fn open(slot: Arc<DbSlot>) -> Result<LogStore, String> {
        let db = slot.get();
        let purged = match db.get(PURGED_KEY).map_err(|e| e.to_string())? {
            Some(raw) => Some(decode::<LogId<NodeId>>(&raw, "raft purged id")?),
            None => None,
        };
        let mut last = purged;
        let from = log_key(purged.map_or(0, |p| p.index + 1));
        for pair in db.range(from.to_vec()..log_key(u64::MAX).to_vec()) {
            let (k, v) = pair.map_err(|e| e.to_string())?;
            if index_of(&k).is_some() {
                let e: Entry = decode(&v, "raft log entry")?;
                last = Some(e.log_id);
            }
        }
        drop(db);
        Ok(LogStore {
            slot,
            ends: Arc::new(Mutex::new(Ends { last, purged })),
            stages: Arc::default(),
        })
    }

    /// No entry and no vote: a node that never was in a group.
    pub fn is_empty(&self) -> bool {
        let e = *self.ends.lock();
        e.last.is_none() && e.purged.is_none() && matches!(self.db().get(VOTE), Ok(None))
    }

    fn db(&self) -> Arc<Db> {
        self.slot.get()
    }

    fn write_synced(&self, batch: WriteBatch) -> sluicedb::Result<()> {
        let db = self.db();
        tokio::task::block_in_place(|| db.write_opt(&WriteOptions::synced(), batch))
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> SResult<Vec<Entry>> {
        use std::ops::Bound;
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => u64::MAX,
        };
        let mut out = Vec::new();
        if start >= end {
            return Ok(out);
        }
        for pair in self
            .db()
            .range(log_key(start).to_vec()..log_key(end).to_vec())
        {
            let (k, v) = pair.map_err(read_err)?;
            if index_of(&k).is_some() {
                out.push(decode(&v, "raft log entry").map_err(read_err)?);
            }
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> SResult<LogState<TypeConfig>> {
        let e = *self.ends.lock();
        Ok(LogState {
            last_purged_log_id: e.purged,
            last_log_id: e.last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> SResult<()> {
        let mut b = WriteBatch::new();
        b.put(VOTE, encode(vote));
        self.write_synced(b)
            .map_err(|e| StorageIOError::write_vote(&std::io::Error::other(e.to_string())).into())
    }

    async fn read_vote(&mut self) -> SResult<Option<Vote<NodeId>>> {
        match self.db().get(VOTE).map_err(read_err)? {
            Some(raw) => Ok(Some(decode(&raw, "raft vote").map_err(read_err)?)),
            None => Ok(None),
        }
    }

    /// Not synced: it only spares re-applying after a restart, and the
    /// next synced append or vote carries it to disk.
    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> SResult<()> {
        self.db()
            .put(COMMITTED, encode(&committed))
            .map_err(write_err)
    }

    async fn read_committed(&mut self) -> SResult<Option<LogId<NodeId>>> {
        match self.db().get(COMMITTED).map_err(read_err)? {
            Some(raw) => decode(&raw, "raft committed id").map_err(read_err),
            None => Ok(None),
        }
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> SResult<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut b = WriteBatch::new();
        let mut last = None;
        for e in entries {
            b.put(log_key(e.log_id.index), encode(&e));
            last = Some(e.log_id);
        }
        let started = std::time::Instant::now();
        let r = self.write_synced(b).map_err(write_err);
        self.stages.append.add(started.elapsed());
        if r.is_ok() {
            if let Some(l) = last {
                self.ends.lock().last = Some(l);
            }
        }
        callback.log_io_completed(
            r.as_ref()
                .map(|_| ())
                .map_err(|e| std::io::Error::other(e.to_string())),
        );
        r
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> SResult<()> {
        let mut b = WriteBatch::new();
        for pair in self
            .db()
            .range(log_key(log_id.index).to_vec()..log_key(u64::MAX).to_vec())
        {
            let (k, _) = pair.map_err(read_err)?;
            b.delete(k);
        }
        self.write_synced(b).map_err(write_err)?;
        // What precedes the cut: the entry before it, or the purge point.
        let mut ends = self.ends.lock();
        let before = if log_id.index == 0 {
            None
        } else {
            match self.db().get(log_key(log_id.index - 1)).map_err(read_err)? {
                Some(raw) => Some(
                    decode::<Entry>(&raw, "raft log entry")
                        .map_err(read_err)?
                        .log_id,
                ),
                None => ends.purged,
            }
        };
        ends.last = before;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> SResult<()> {
        let mut b = WriteBatch::new();
        b.put(PURGED_KEY, encode(&log_id));
        let from = self.ends.lock().purged.map_or(0, |p| p.index + 1);
        for i in from..=log_id.index {
            b.delete(log_key(i));
        }
        // The purge point first, in the same batch: a crash leaves either
        // the entries or the point past them, never a hole before `last`.
        self.db().write(b).map_err(write_err)?;
        let mut ends = self.ends.lock();
        ends.purged = Some(log_id);
        if ends.last.is_none_or(|l| l.index < log_id.index) {
            ends.last = Some(log_id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_keys_sort_by_index() {
        assert!(log_key(1) < log_key(2));
        assert!(log_key(255) < log_key(256));
        assert_eq!(index_of(&log_key(77)), Some(77));
        assert_eq!(index_of(b"rv"), None);
        assert_eq!(log_key(1)[..2], [b'r', b'l']);
    }

    /// The worked example of `docs/format/raft-keys.md`.
    #[test]
    fn an_entry_encodes_as_documented() {
        assert_eq!(log_key(300), [0x72, 0x6c, 0, 0, 0, 0, 0, 0, 0x01, 0x2c]);
        let e = Entry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(2, 1), 300),
            payload: openraft::EntryPayload::Normal(vec![super::super::Request {
                now_ms: 1_700_000_000_000,
                resp3: false,
                multi: false,
                cmds: vec![vec![b"SET".to_vec(), b"a".to_vec(), b"b".to_vec()]],
            }]),
        };
        let want: Vec<u8> = vec![
            0x02, 0x01, 0xac, 0x02, 0x01, 0x01, 0x80, 0xd0, 0x95, 0xff, 0xbc, 0x31, 0x00, 0x00,
            0x01, 0x03, 0x03, b'S', b'E', b'T', 0x01, b'a', 0x01, b'b',
        ];
        assert_eq!(encode(&e), want);
        let back: Entry = decode(&want, "entry").unwrap();
        assert_eq!(back.log_id, e.log_id);
        assert!(decode::<Entry>(&want[..5], "entry").is_err());
    }
}
