//! The Raft log store. Entries live in segment files of their own under
//! `DIR/raft/log` ([`super::logfile`], `docs/format/raft-log.md`), written
//! by each append and synced by the sync thread ([`super::logsync`]); the
//! vote and the committed id live in the node's database under the `r` tag
//! (`docs/format/raft-keys.md`):
//!
//! ```text
//! 'r' 'v'               -> postcard(Vote)         synced when saved
//! 'r' 'c'               -> postcard(LogId)        committed (may lag)
//! ```
//!
//! The state machine's batches are not journaled (the database is opened
//! with `skip_journal_unless_synced`), so they reach the disk with their
//! memtable's flush, and the log must never let go of an entry the
//! database's prefix of history may still need: a purge first makes sure
//! a flush covered the purge point ([`ApplyProgress`]). The log is not in the
//! database, so a snapshot (a checkpoint of the database) does not carry
//! the leader's log.

use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote};
use parking_lot::Mutex;
use sluicedb::{Db, WriteBatch, WriteOptions};

use super::logfile::LogFile;
use super::logstate::StateFile;
use super::logsync::Syncer;
use super::logtail::LogTail;
use super::{NodeId, TypeConfig};
use crate::dbslot::DbSlot;
use crate::Fsync;

pub const RAFT_TAG: u8 = b'r';
/// The tag of log records kept in the database before the log had files
/// of its own; a database holding any is refused.
const LOG: u8 = b'l';
const VOTE: &[u8] = b"rv";
const COMMITTED: &[u8] = b"rc";
const PURGED_KEY: &[u8] = b"rp";

type Entry = openraft::Entry<TypeConfig>;
type SResult<T> = Result<T, StorageError<NodeId>>;

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

/// How far the state machine applied the log, and how far of that its
/// database holds durably (a flush covered it): a purge never passes the
/// second. Indexes plus one; 0: nothing.
#[derive(Debug, Default)]
pub struct ApplyProgress {
    pub applied: AtomicU64,
    pub flushed: AtomicU64,
}

impl ApplyProgress {
    /// ApplyProgress of a database whose applied record names `last`, flushed
    /// (just opened, a snapshot installed).
    pub fn set_flushed(&self, last: Option<LogId<NodeId>>) {
        let n = last.map_or(0, |l| l.index + 1);
        self.applied.store(n, Ordering::Release);
        self.flushed.store(n, Ordering::Release);
    }
}

/// The log's ends, kept in memory.
#[derive(Debug, Default, Clone, Copy)]
struct Ends {
    last: Option<LogId<NodeId>>,
    purged: Option<LogId<NodeId>>,
}

/// The log store; clones share the log, the database and the ends.
#[derive(Clone)]
pub struct LogStore {
    /// The node's database (vote, committed id; synced before a purge):
    /// each operation takes the handle for its duration, so a snapshot
    /// install (which replaces the database) waits for it and carries
    /// its records over.
    slot: Arc<DbSlot>,
    log: Arc<Mutex<LogFile>>,
    /// The newest entries as appended ([`super::logtail`]); changed under
    /// the log's lock, after it.
    tail: Arc<Mutex<LogTail>>,
    /// The committed id and the last entry known synced
    /// ([`super::logstate`]).
    state: Arc<Mutex<StateFile>>,
    ends: Arc<Mutex<Ends>>,
    /// Where appends encode their entries (reused).
    scratch: Arc<Mutex<Vec<u8>>>,
    /// Where appends note their time; the node's stages (made here: the
    /// sync thread reports to them).
    pub stages: Arc<super::stages::Stages>,
    /// The sync thread: appends return once written, and are reported
    /// durable from there ([`super::logsync`]).
    syncer: Arc<Syncer>,
    /// A committed id not yet written to the state file because it names
    /// an entry not yet synced (see `save_committed`). Locked after
    /// `state`.
    pending_committed: Arc<Mutex<Option<LogId<NodeId>>>>,
    /// The state machine's (shared with it).
    pub progress: Arc<ApplyProgress>,
    /// A purge openraft asked for past what the state machine applied
    /// (a snapshot being installed), held back until the install is
    /// durable: see [`LogStore::purge`].
    deferred: Arc<(Mutex<Option<LogId<NodeId>>>, parking_lot::Condvar)>,
}

/// How long an append that must follow a held-back purge waits for the
/// snapshot install that lets it run.
const DEFERRED_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

impl LogStore {
    /// Opens the log in `dir` (the node's raft directory) beside the vote
    /// and committed id in `slot`'s database, finding its ends; appends
    /// are acknowledged as `mode` says ([`super::logsync`]).
    pub fn open(slot: Arc<DbSlot>, dir: &Path, mode: Fsync) -> Result<LogStore, String> {
        let db = slot.get();
        let old = db
            .range(vec![RAFT_TAG, LOG]..vec![RAFT_TAG, LOG + 1])
            .next()
            .is_some()
            || db.get(PURGED_KEY).map_err(|e| e.to_string())?.is_some();
        if old {
            return Err(format!(
                "{}: the database holds a Raft log (the layout before the log moved to raft/log); \
                 start this node afresh under a new id",
                dir.display()
            ));
        }
        // The state file names the committed id and the last entry an
        // append synced, each only ever an entry this log synced: the
        // synced index is written after the sync it reports, and
        // `save_committed` holds back an id naming an entry written but
        // not yet synced (the leader's sync runs beside replication) until
        // the sync thread covers it. So records up to either are damage
        // when they do not check, not a torn tail. A node from before the
        // state file has its committed id in the database, saved when
        // every append returned only once synced: it names a synced entry
        // too.
        let log_dir = dir.join("log");
        std::fs::create_dir_all(&log_dir).map_err(|e| format!("{}: {e}", log_dir.display()))?;
        let mut state = StateFile::open(&log_dir.join(super::logstate::FILE))?;
        let legacy = match db.get(COMMITTED).map_err(|e| e.to_string())? {
            Some(raw) => decode::<Option<LogId<NodeId>>>(&raw, "raft committed id")?,
            None => None,
        };
        let known = state.state();
        if known.committed.is_none() && legacy.is_some() {
            state.set_committed(legacy)?;
        }
        let committed = state.state().committed;
        let synced = committed.map(|c| c.index).max(known.synced);
        let (file, marker) = LogFile::open(&log_dir, synced, |raw| {
            decode::<LogId<NodeId>>(raw, "raft purged id").map(|l| l.index)
        })?;
        let purged = match marker {
            Some(raw) => Some(decode::<LogId<NodeId>>(&raw, "raft purged id")?),
            None => None,
        };
        let (lo, hi) = file.bounds();
        let last = if hi > lo {
            let p = file.locate(hi - 1, hi);
            let raw = p.first().ok_or("raft log: last entry not found")?;
            Some(raw.read(|b| decode::<Entry>(b, "raft log entry"))??.log_id)
        } else {
            purged
        };
        drop(db);
        // Records a killed process wrote but did not sync are readable (in
        // the page cache) and not yet durable: synced now, so that all
        // this log holds counts as durable (openraft takes the log as
        // opened for this node's progress).
        file.sync_all().run()?;
        if let Some(l) = last.filter(|l| purged.is_none_or(|p| p.index < l.index)) {
            state.set_synced(l.index)?;
        }
        let state = Arc::new(Mutex::new(state));
        let stages: Arc<super::stages::Stages> = Arc::default();
        let pending_committed: Arc<Mutex<Option<LogId<NodeId>>>> = Arc::default();
        let after = {
            let state = state.clone();
            let pending = pending_committed.clone();
            Box::new(move |last: u64| {
                // After the sync: whatever of it reaches the disk names
                // synced entries only.
                let mut st = state.lock();
                st.set_synced(last)?;
                let mut p = pending.lock();
                if let Some(c) = p.filter(|c| c.index <= last) {
                    st.set_committed(Some(c))?;
                    *p = None;
                }
                Ok(())
            })
        };
        let syncer = Syncer::start(last.map_or(0, |l| l.index + 1), mode, after, stages.clone())?;
        Ok(LogStore {
            slot,
            log: Arc::new(Mutex::new(file)),
            tail: Arc::default(),
            state,
            ends: Arc::new(Mutex::new(Ends { last, purged })),
            scratch: Arc::default(),
            stages,
            syncer: Arc::new(syncer),
            pending_committed,
            progress: Arc::default(),
            deferred: Arc::default(),
        })
    }

    /// Waits until entry `index` is durable in this log.
    pub async fn wait_durable(&self, index: u64) -> Result<(), String> {
        self.syncer.wait_durable(index).await
    }

    /// Waits until this log acknowledged entry `index` to openraft: durable
    /// under `appendfsync always`, written under `everysec`
    /// ([`super::logsync`]).
    pub async fn wait_acked(&self, index: u64) -> Result<(), String> {
        self.syncer.wait_acked(index).await
    }

    /// The node's `appendfsync` for appends from now on (`CONFIG SET`).
    pub fn set_fsync(&self, mode: Fsync) {
        self.syncer.set_mode(mode);
    }

    /// When an append is acknowledged: `always` or `everysec` (`no`
    /// acknowledges as `everysec` does: `docs/design.md`, "The log's
    /// appendfsync").
    pub fn fsync_name(&self) -> &'static str {
        match self.syncer.mode() {
            Fsync::Always => "always",
            Fsync::EverySec | Fsync::No => "everysec",
        }
    }

    /// The sync thread's test hooks ([`Syncer::hold`], [`Syncer::fail_next`]).
    #[cfg(any(test, feature = "fault-points"))]
    pub fn syncer(&self) -> &Syncer {
        &self.syncer
    }

    /// The purge held back until a snapshot install is durable, if any.
    pub fn deferred_purge(&self) -> Option<LogId<NodeId>> {
        *self.deferred.0.lock()
    }

    /// Runs the purge held back by [`LogStore::purge`] once the state
    /// machine durably applied its point (the install's swap committed);
    /// called by the state machine after an install, and by appends.
    pub fn finish_deferred_purge(&self) -> Result<(), String> {
        let mut d = self.deferred.0.lock();
        let Some(id) = *d else { return Ok(()) };
        if self.progress.flushed.load(Ordering::Acquire) < id.index + 1 {
            return Ok(());
        }
        self.purge_now(id)?;
        *d = None;
        self.deferred.1.notify_all();
        Ok(())
    }

    /// Removes the entries up to `log_id`: the purge point written
    /// durably, then the segments behind it.
    fn purge_now(&self, log_id: LogId<NodeId>) -> Result<(), String> {
        let mut log = self.log.lock();
        tokio::task::block_in_place(|| log.purge(log_id.index, &encode(&log_id)))?;
        self.tail.lock().purge(log_id.index);
        let mut ends = self.ends.lock();
        if ends.purged.is_some_and(|p| p.index >= log_id.index) {
            return Ok(());
        }
        ends.purged = Some(log_id);
        if ends.last.is_none_or(|l| l.index < log_id.index) {
            ends.last = Some(log_id);
        }
        Ok(())
    }

    /// Before an append: a held-back purge whose install is durable runs
    /// now; one whose install is still running is waited for when the
    /// entries would not follow the log's last (they follow the
    /// snapshot, which the log does not hold yet).
    fn settle_deferred(&self, first: u64) -> Result<(), String> {
        if self.deferred.0.lock().is_none() {
            return Ok(());
        }
        self.finish_deferred_purge()?;
        let started = std::time::Instant::now();
        let mut d = self.deferred.0.lock();
        if d.is_some() && self.log.lock().bounds().1 != first {
            eprintln!(
                "sluice serve: entry {first} waits for the purge to {:?}, held back until a snapshot install is durable",
                *d
            );
        }
        while d.is_some() && self.log.lock().bounds().1 != first {
            if started.elapsed() > DEFERRED_WAIT {
                return Err(format!(
                    "entry {first} waits for a snapshot install that does not end (purge to {:?} held back)",
                    *d
                ));
            }
            tokio::task::block_in_place(|| {
                self.deferred
                    .1
                    .wait_for(&mut d, std::time::Duration::from_millis(100))
            });
            drop(d);
            self.finish_deferred_purge()?;
            d = self.deferred.0.lock();
        }
        Ok(())
    }

    /// No entry and no vote: a node that never was in a group.
    pub fn is_empty(&self) -> bool {
        let e = *self.ends.lock();
        e.last.is_none() && e.purged.is_none() && matches!(self.db().get(VOTE), Ok(None))
    }

    /// Bytes of the log's records of entries `from..to`.
    pub fn record_bytes(&self, from: u64, to: u64) -> u64 {
        self.log.lock().record_bytes(from, to)
    }

    /// See [`LogFile::purge_keeping`].
    pub fn purge_keeping(&self, upto: u64, keep_bytes: u64) -> Option<u64> {
        self.log.lock().purge_keeping(upto, keep_bytes)
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
        if start >= end {
            return Ok(Vec::new());
        }
        if let Some(held) = self.tail.lock().get(start, end) {
            return Ok(held);
        }
        self.read_records(start, end).map_err(read_err)
    }
}

impl LogStore {
    /// Entries `start..end` read from the log's records.
    fn read_records(&self, start: u64, end: u64) -> Result<Vec<Entry>, String> {
        let found = self.log.lock().locate(start, end);
        let mut out = Vec::with_capacity(found.len());
        for p in &found {
            out.push(p.read(|b| decode::<Entry>(b, "raft log entry"))??);
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

    /// Written to the state file, not synced: a killed process leaves it
    /// in the page cache, so a restarted node re-applies every committed
    /// entry before it hears from a leader ([`super::logstate`]).
    ///
    /// Never names an entry this log holds unsynced: such an id waits for
    /// the sync thread, which writes it after the sync that covers it (the
    /// id is a lower bound; an older one is still right).
    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> SResult<()> {
        let mut state = self.state.lock();
        let synced = state.state().synced;
        let ends = *self.ends.lock();
        let (written, purged) = (ends.last.map(|l| l.index), ends.purged.map(|p| p.index));
        // Entries up to the purge point are durable in the database.
        let unsynced = |i: u64| synced < Some(i) && purged < Some(i) && Some(i) <= written;
        if let Some(c) = committed.filter(|c| unsynced(c.index)) {
            // Written here and not yet synced (the leader's own sync runs
            // beside replication, and its followers can make a quorum
            // first): the file would name an entry a machine's crash can
            // take. Written by the sync thread once it covers it.
            *self.pending_committed.lock() = Some(c);
            return Ok(());
        }
        // An id held back before this one is older: it must not be
        // written over this one later.
        let mut p = self.pending_committed.lock();
        if p.is_some_and(|h| committed.is_some_and(|c| h.index <= c.index)) {
            *p = None;
        }
        drop(p);
        state.set_committed(committed).map_err(write_err)
    }

    async fn read_committed(&mut self) -> SResult<Option<LogId<NodeId>>> {
        Ok(self.state.lock().state().committed)
    }

    /// Returns once the entries are written (readable by the replication
    /// streams); `callback` runs once they are durable, from the sync
    /// thread, in log order ([`super::logsync`]). openraft's core awaits
    /// the callback for a follower's entries (it answers the leader only
    /// then) and not for the leader's own (patched openraft,
    /// `vendor/openraft/PATCH.md`: the leader counts them toward the
    /// quorum once the callback came).
    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> SResult<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let started = std::time::Instant::now();
        let mut entries = entries.into_iter().peekable();
        if let Some(first) = entries.peek() {
            self.settle_deferred(first.log_id.index)
                .map_err(write_err)?;
        }
        // The entries are encoded one after another into one buffer kept
        // from append to append (an entry is up to a MiB: a fresh buffer
        // each time is page faults).
        let mut scratch = self.scratch.lock();
        let mut buf = std::mem::take(&mut *scratch);
        buf.clear();
        let mut ends = Vec::new();
        let mut last = None;
        let mut kept = Vec::new();
        for e in entries {
            buf = postcard::to_extend(&e, buf).map_err(write_err)?;
            ends.push((e.log_id.index, buf.len()));
            last = Some(e.log_id);
            kept.push(e);
        }
        let mut at = 0;
        let records: Vec<(u64, &[u8])> = ends
            .iter()
            .map(|&(index, end)| {
                let r = (index, &buf[at..end]);
                at = end;
                r
            })
            .collect();
        // Written and submitted under the log's lock, so that syncs are
        // queued in log order; synced by the sync thread.
        let mut log = self.log.lock();
        let written = log.append(&records);
        let mut tail = self.tail.lock();
        if written.is_ok() {
            let mut at = 0;
            for (e, &(_, end)) in kept.into_iter().zip(&ends) {
                tail.push(e, end - at);
                at = end;
            }
        } else {
            // What the log holds now is not known here.
            tail.clear();
        }
        drop(tail);
        let r = match (written, last) {
            (Ok(syncs), Some(l)) => {
                self.ends.lock().last = Some(l);
                let done = Box::new(move |r: Result<(), String>| {
                    callback.log_io_completed(r.map_err(std::io::Error::other));
                });
                self.syncer.submit(syncs, l.index, done);
                Ok(())
            }
            (Ok(_), None) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            (Err(e), _) => {
                callback.log_io_completed(Err(std::io::Error::other(e.clone())));
                Err(write_err(e))
            }
        };
        drop(log);
        drop(records);
        *scratch = buf;
        self.stages.append.add(started.elapsed());
        r
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> SResult<()> {
        // No sync in flight: one ending after the cut would raise the
        // synced index past it again.
        let syncer = self.syncer.clone();
        tokio::task::block_in_place(|| syncer.drain()).map_err(write_err)?;
        syncer.lower_durable(log_id.index);
        let mut p = self.pending_committed.lock();
        if p.is_some_and(|c| c.index >= log_id.index) {
            // Cannot happen (openraft never cuts a committed entry); the
            // id would name a cut entry.
            *p = None;
        }
        drop(p);
        // The synced index leaves the cut first (synced), or a restart
        // would take the zeroed record for damage.
        let mut state = self.state.lock();
        tokio::task::block_in_place(|| state.lower_synced(log_id.index)).map_err(write_err)?;
        drop(state);
        let mut log = self.log.lock();
        let cut = tokio::task::block_in_place(|| log.truncate(log_id.index));
        let mut tail = self.tail.lock();
        match cut {
            Ok(()) => tail.truncate(log_id.index),
            Err(_) => tail.clear(),
        }
        drop(tail);
        cut.map_err(write_err)?;
        // What precedes the cut: the entry before it, or the purge point.
        let mut ends = self.ends.lock();
        let before = match log_id.index.checked_sub(1) {
            None => None,
            Some(i) => match log.locate(i, i + 1).first() {
                Some(p) => Some(
                    p.read(|b| decode::<Entry>(b, "raft log entry"))
                        .and_then(|r| r)
                        .map_err(read_err)?
                        .log_id,
                ),
                None => ends.purged,
            },
        };
        ends.last = before;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> SResult<()> {
        // The database's applied record must reach the purge point on disk
        // before the entries go (its batches reach it when flushed). Up to
        // a snapshot this node built, its checkpoint flushed; else a flush
        // now covers what was applied.
        let upto = log_id.index + 1;
        let applied = self.progress.applied.load(Ordering::Acquire);
        if self.progress.flushed.load(Ordering::Acquire) < upto && applied >= upto {
            let db = self.db();
            tokio::task::block_in_place(|| db.flush()).map_err(write_err)?;
            self.progress.flushed.fetch_max(applied, Ordering::AcqRel);
        }
        if self.progress.flushed.load(Ordering::Acquire) < upto {
            // Applied short of the purge point: a snapshot being installed
            // covers it. openraft 0.9 purges as it hands the install to
            // the state machine, without waiting for it; purged now, a
            // crash before the install's swap committed would leave the
            // old database behind a log purged past its applied record.
            // So the purge waits for the install to be durable (the state
            // machine runs it then), and a crash before that leaves the
            // old database and the whole log: openraft asks for the
            // snapshot again. openraft's own view already counts the
            // entries purged and reads none of them.
            let mut d = self.deferred.0.lock();
            if d.is_none_or(|p| p.index < log_id.index) {
                *d = Some(log_id);
            }
            return Ok(());
        }
        self.purge_now(log_id).map_err(write_err)?;
        let mut d = self.deferred.0.lock();
        if d.is_some_and(|p| p.index <= log_id.index) {
            *d = None;
            self.deferred.1.notify_all();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of `docs/format/raft-log.md`.
    #[test]
    fn an_entry_encodes_as_documented() {
        let e = Entry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(2, 1), 300),
            payload: openraft::EntryPayload::Normal(
                super::super::batch::Batch::encode(
                    &[super::super::Request {
                        now_ms: 1_700_000_000_000,
                        resp3: false,
                        multi: false,
                        cmds: vec![vec![
                            bytes::Bytes::from_static(b"SET"),
                            bytes::Bytes::from_static(b"a"),
                            bytes::Bytes::from_static(b"b"),
                        ]],
                    }],
                    0,
                )
                .unwrap(),
            ),
        };
        let want: Vec<u8> = vec![
            0x02, 0x01, 0xac, 0x02, 0x01, 0x13, 0x01, 0x80, 0xd0, 0x95, 0xff, 0xbc, 0x31, 0x00,
            0x00, 0x01, 0x03, 0x03, b'S', b'E', b'T', 0x01, b'a', 0x01, b'b',
        ];
        assert_eq!(encode(&e), want);
        let back: Entry = decode(&want, "entry").unwrap();
        assert_eq!(back.log_id, e.log_id);
        assert!(decode::<Entry>(&want[..5], "entry").is_err());
    }

    fn id(index: u64) -> LogId<NodeId> {
        LogId::new(openraft::CommittedLeaderId::new(1, 1), index)
    }

    /// A database and a log of ten blank entries (indexes 0-9), all
    /// reported synced, under a temporary directory.
    struct TenEntryLog {
        _dir: tempfile::TempDir,
        raft: std::path::PathBuf,
        log_dir: std::path::PathBuf,
        slot: Arc<DbSlot>,
        payloads: Vec<(u64, Vec<u8>)>,
    }

    /// [`TenEntryLog`], with `state` setting more in the state file before
    /// the log is opened.
    /// The runtime the log's tests drive its async calls on.
    fn two_thread_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    fn ten_entry_log(state: impl FnOnce(&mut StateFile)) -> TenEntryLog {
        let t = tempfile::tempdir().unwrap();
        let raft = t.path().join("raft");
        let log_dir = raft.join("log");
        let db = Db::open(t.path().join("db"), sluicedb::Options::default()).unwrap();
        let slot = Arc::new(DbSlot::new(db));
        let payloads: Vec<(u64, Vec<u8>)> = (0..10)
            .map(|i| {
                let e = Entry {
                    log_id: id(i),
                    payload: openraft::EntryPayload::Blank,
                };
                (i, encode(&e))
            })
            .collect();
        let (mut f, _) = LogFile::open(&log_dir, None, |_| Ok(0)).unwrap();
        f.append(&payloads).unwrap().run().unwrap();
        let mut st = StateFile::open(&log_dir.join(super::super::logstate::FILE)).unwrap();
        st.set_synced(9).unwrap();
        state(&mut st);
        TenEntryLog {
            _dir: t,
            raft,
            log_dir,
            slot,
            payloads,
        }
    }

    /// The torn-tail rule with the state file: a record that does not
    /// check, after the committed id but at or before the last entry an
    /// append reported synced, is damage (a `Corruption` error naming the
    /// segment and offset); after the synced index it is a torn tail and
    /// the log ends before it.
    #[test]
    fn damage_between_the_committed_id_and_the_synced_end_is_an_error() {
        let TenEntryLog {
            _dir,
            raft,
            log_dir,
            slot,
            payloads,
        } = ten_entry_log(|st| st.set_committed(Some(id(3))).unwrap());
        let store = LogStore::open(slot.clone(), &raft, Fsync::Always).unwrap();
        assert_eq!(store.ends.lock().last, Some(id(9)));
        drop(store);
        // Damage entry 6's payload: after the committed id, before the
        // synced end.
        let seg = log_dir.join(format!("{:020}.seg", 0));
        let at: u64 = 32
            + payloads[..6]
                .iter()
                .map(|(_, p)| 8 + p.len() as u64)
                .sum::<u64>();
        let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(b"\xff", at + 8 + 1).unwrap();
        let e = LogStore::open(slot.clone(), &raft, Fsync::Always)
            .err()
            .expect("damage must be reported");
        assert!(e.starts_with("Corruption"), "{e}");
        assert!(e.contains(&seg.display().to_string()), "{e}");
        assert!(e.contains(&format!("at offset {at}")), "{e}");
        // Had the slot naming entry 9 synced not reached the disk (the
        // one before names entry 5), the same bytes are a torn tail.
        let st_path = log_dir.join(super::super::logstate::FILE);
        let mut st = StateFile::open(&st_path).unwrap();
        st.lower_synced(6).unwrap();
        let store = LogStore::open(slot, &raft, Fsync::Always).unwrap();
        assert_eq!(store.ends.lock().last, Some(id(5)));
    }

    /// Reads answered from the tail of entries held in memory
    /// ([`super::super::logtail`]) are those the records hold, through
    /// appends, a truncation with appends after it, and a purge.
    #[test]
    fn the_tail_in_memory_reads_as_the_records_do() {
        use openraft::storage::RaftLogStorageExt;
        let TenEntryLog {
            _dir, raft, slot, ..
        } = ten_entry_log(|_| {});
        let rt = two_thread_runtime();
        let mut store = LogStore::open(slot, &raft, Fsync::Always).unwrap();
        let normal = |term: u64, i: u64| Entry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(term, 1), i),
            payload: openraft::EntryPayload::Normal(
                super::super::batch::Batch::encode(
                    &[super::super::Request {
                        now_ms: i,
                        resp3: false,
                        multi: false,
                        cmds: vec![vec![
                            bytes::Bytes::from_static(b"SET"),
                            bytes::Bytes::from(format!("k{i}")),
                            bytes::Bytes::from(vec![term as u8; 100 + i as usize]),
                        ]],
                    }],
                    0,
                )
                .unwrap(),
            ),
        };
        let check = |store: &mut LogStore, ranges: &[(u64, u64)], held: bool| {
            for &(a, b) in ranges {
                let tail = store.tail.lock().get(a, b);
                assert_eq!(tail.is_some(), held, "{a}..{b} held in memory");
                let mut s = store.clone();
                let read = rt.block_on(s.try_get_log_entries(a..b)).unwrap();
                let files = store.read_records(a, b).unwrap();
                let enc = |v: &[Entry]| v.iter().map(encode).collect::<Vec<_>>();
                assert_eq!(enc(&read), enc(&files), "{a}..{b}");
            }
        };
        // Opened: nothing held; reads go to the records.
        check(&mut store, &[(0, 10), (3, 7)], false);
        rt.block_on(store.blocking_append((10..20).map(|i| normal(1, i))))
            .unwrap();
        check(&mut store, &[(10, 20), (12, 30), (19, 20), (25, 30)], true);
        check(&mut store, &[(0, 20), (9, 11)], false);
        rt.block_on(store.truncate(id(15))).unwrap();
        check(&mut store, &[(10, 20), (14, 16)], true);
        rt.block_on(store.blocking_append((15..18).map(|i| normal(2, i))))
            .unwrap();
        check(&mut store, &[(10, 18), (15, 30), (17, 18)], true);
        store.progress.flushed.store(u64::MAX, Ordering::Release);
        rt.block_on(store.purge(id(12))).unwrap();
        check(&mut store, &[(13, 18), (13, 30)], true);
        check(&mut store, &[(12, 18)], false);
        assert_eq!(
            rt.block_on(store.try_get_log_entries(13..18))
                .unwrap()
                .iter()
                .map(|e| (e.log_id.leader_id.term, e.log_id.index))
                .collect::<Vec<_>>(),
            [(1, 13), (1, 14), (2, 15), (2, 16), (2, 17)]
        );
    }

    /// The sync off the Raft core (`raft::logsync`): an append returns
    /// with its entries written and readable while their sync is held
    /// (the leader replicates them meanwhile); its completion, the durable
    /// index, the state file's synced index and a committed id naming
    /// them all wait for the sync. Had the machine crashed meanwhile (the
    /// unsynced records lost: zeroed here, as their preallocated blocks
    /// read), the log reopens at the synced entries with no damage
    /// reported: no file names an entry that was not durable.
    #[test]
    fn an_append_is_readable_before_its_sync_and_durable_only_after() {
        use openraft::storage::RaftLogStorageExt;
        let TenEntryLog {
            _dir,
            raft,
            log_dir,
            slot,
            payloads,
        } = ten_entry_log(|_| {});
        let rt = two_thread_runtime();
        let store = LogStore::open(slot.clone(), &raft, Fsync::Always).unwrap();
        assert_eq!(store.syncer().durable().upto, 10);
        store.syncer().hold(true);
        let more: Vec<Entry> = (10..13)
            .map(|i| Entry {
                log_id: id(i),
                payload: openraft::EntryPayload::Blank,
            })
            .collect();
        let (tx, rx) = std::sync::mpsc::channel();
        let mut s = store.clone();
        rt.spawn(async move {
            let _ = tx.send(s.blocking_append(more).await);
        });
        let started = std::time::Instant::now();
        while store.ends.lock().last != Some(id(12)) {
            assert!(started.elapsed().as_secs() < 60, "the append never wrote");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut s = store.clone();
        let got = rt
            .block_on(async move { s.try_get_log_entries(10..13).await })
            .unwrap();
        assert_eq!(
            got.iter().map(|e| e.log_id).collect::<Vec<_>>(),
            vec![id(10), id(11), id(12)]
        );
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(300))
                .is_err(),
            "an append was reported durable while its sync was held"
        );
        assert_eq!(store.syncer().durable().upto, 10);
        let mut s = store.clone();
        rt.block_on(async move { s.save_committed(Some(id(11))).await })
            .unwrap();
        assert_eq!(store.state.lock().state().committed, None);
        assert_eq!(store.state.lock().state().synced, Some(9));

        // The machine's crash now: the disk holds what was synced, and
        // the state file as written; the three records are lost.
        let crash = raft.parent().unwrap().join("crash");
        std::fs::create_dir_all(crash.join("log")).unwrap();
        for f in std::fs::read_dir(&log_dir).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, crash.join("log").join(f.file_name().unwrap())).unwrap();
        }
        let end9: u64 = 32
            + payloads
                .iter()
                .map(|(_, p)| 8 + p.len() as u64)
                .sum::<u64>();
        let lost: u64 = got.iter().map(|e| 8 + encode(e).len() as u64).sum();
        let seg = crash.join("log").join(format!("{:020}.seg", 0));
        let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(&vec![0; lost as usize], end9).unwrap();
        let reopened = LogStore::open(slot.clone(), &crash, Fsync::Always).unwrap();
        assert_eq!(reopened.ends.lock().last, Some(id(9)));
        assert_eq!(reopened.syncer().durable().upto, 10);
        drop(reopened);

        // Released: the append completes, and the held committed id is
        // written after the sync that covers it.
        store.syncer().hold(false);
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("the append completes once synced")
            .unwrap();
        assert_eq!(store.syncer().durable().upto, 13);
        assert_eq!(store.state.lock().state().synced, Some(12));
        assert_eq!(store.state.lock().state().committed, Some(id(11)));
    }

    /// `appendfsync everysec` (`raft::logsync`): an append is acknowledged
    /// (its callback, the acknowledged index the state machine waits for)
    /// while its sync is held, and nothing reports it durable: the state
    /// file's synced index, the durable index and a committed id naming
    /// it wait for the sync. Released, the timer syncs it with nothing
    /// else asking; a later append waits the interval for its sync; a
    /// switch to `always` makes the next append wait for its own sync;
    /// and a clean stop syncs what is left.
    #[test]
    fn under_everysec_an_append_is_acknowledged_before_its_sync_and_synced_by_the_timer() {
        use openraft::storage::RaftLogStorageExt;
        let TenEntryLog {
            _dir,
            raft,
            log_dir,
            slot,
            ..
        } = ten_entry_log(|_| {});
        let rt = two_thread_runtime();
        let store = LogStore::open(slot, &raft, Fsync::EverySec).unwrap();
        let patience = std::time::Duration::from_secs(60);
        let blank = |i| Entry {
            log_id: id(i),
            payload: openraft::EntryPayload::Blank,
        };
        // Acknowledged while its sync is held.
        store.syncer().hold(true);
        let append = |entries: Vec<Entry>| {
            let (tx, rx) = std::sync::mpsc::channel();
            let mut s = store.clone();
            rt.spawn(async move {
                let _ = tx.send(s.blocking_append(entries).await);
            });
            rx
        };
        append((10..13).map(blank).collect())
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("acknowledged with its sync held")
            .unwrap();
        let s = store.clone();
        rt.block_on(async move { s.wait_acked(12).await }).unwrap();
        let mut s = store.clone();
        rt.block_on(async move { s.save_committed(Some(id(11))).await })
            .unwrap();
        std::thread::sleep(2 * super::super::logsync::EVERYSEC_INTERVAL);
        assert_eq!(
            store.syncer().durable().upto,
            10,
            "reported durable while held"
        );
        assert_eq!(store.state.lock().state().synced, Some(9));
        assert_eq!(store.state.lock().state().committed, None);

        // Released: the timer syncs it, nothing else asking.
        store.syncer().hold(false);
        let s = store.clone();
        rt.block_on(async move { tokio::time::timeout(patience, s.wait_durable(12)).await })
            .expect("synced by the timer")
            .unwrap();
        assert_eq!(store.state.lock().state().synced, Some(12));
        assert_eq!(store.state.lock().state().committed, Some(id(11)));

        // A later append is acknowledged at once and synced an interval
        // after it was written.
        let written = std::time::Instant::now();
        append(vec![blank(13)])
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("acknowledged")
            .unwrap();
        let s = store.clone();
        rt.block_on(async move { tokio::time::timeout(patience, s.wait_durable(13)).await })
            .expect("synced by the timer")
            .unwrap();
        assert!(
            written.elapsed() >= super::super::logsync::EVERYSEC_INTERVAL,
            "synced {:?} after its write: not by the timer",
            written.elapsed()
        );

        // `always` from now on: an append waits for its own sync.
        store.set_fsync(Fsync::Always);
        store.syncer().hold(true);
        let rx = append(vec![blank(14)]);
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(300))
                .is_err(),
            "acknowledged under always with its sync held"
        );
        store.syncer().hold(false);
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("acknowledged once synced")
            .unwrap();
        assert_eq!(store.syncer().durable().upto, 15);
        // The thread reports its group before it counts it reported: an
        // append before that would wait for a sync as if behind one.
        store.syncer().drain().unwrap();

        // Back to everysec; a clean stop (the last handle dropped) syncs.
        store.set_fsync(Fsync::EverySec);
        append(vec![blank(15)])
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("acknowledged")
            .unwrap();
        assert_eq!(store.syncer().durable().upto, 15);
        drop(store);
        drop(rt);
        let st = StateFile::open(&log_dir.join(super::super::logstate::FILE)).unwrap();
        assert_eq!(st.state().synced, Some(15), "a clean stop left it unsynced");
    }

    /// A failed sync fails its append and every one after it (what the
    /// disk kept is not known), and whoever waits for the durable index.
    #[test]
    fn a_failed_sync_fails_its_append_and_every_later_one() {
        use openraft::storage::RaftLogStorageExt;
        let TenEntryLog {
            _dir, raft, slot, ..
        } = ten_entry_log(|_| {});
        let rt = two_thread_runtime();
        let mut store = LogStore::open(slot, &raft, Fsync::Always).unwrap();
        store.syncer().fail_next();
        let blank = |i| Entry {
            log_id: id(i),
            payload: openraft::EntryPayload::Blank,
        };
        let s = &mut store;
        rt.block_on(async {
            assert!(s.blocking_append([blank(10)]).await.is_err());
            assert!(s.blocking_append([blank(11)]).await.is_err());
            assert!(s.wait_durable(10).await.is_err());
            assert!(s.wait_durable(9).await.is_ok());
        });
        assert_eq!(store.state.lock().state().synced, Some(9));
    }

    /// An append of entries after a snapshot the log does not reach yet
    /// (a new leader's, while the install that asked for the purge up to
    /// that snapshot is in flight: "Snapshots", 4, in `docs/design.md`)
    /// waits for the held-back purge; once the install is durable the
    /// state machine runs the purge, and the entries follow it: the log
    /// never holds a gap, and never lets go of entries the old database
    /// still lacks while the install could yet fail.
    #[test]
    fn an_append_past_a_held_back_purge_waits_for_the_install() {
        let TenEntryLog {
            _dir, raft, slot, ..
        } = ten_entry_log(|_| {});
        let store = LogStore::open(slot, &raft, Fsync::Always).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        // Nothing applied: a purge up to 30 (an install's) is held back,
        // and the log keeps every entry.
        let mut s = store.clone();
        rt.block_on(async move { s.purge(id(30)).await }).unwrap();
        assert_eq!(store.deferred_purge(), Some(id(30)));
        assert_eq!(store.log.lock().bounds(), (0, 10));
        // Entry 31 would not follow the log's last (9): its append waits.
        let (tx, rx) = std::sync::mpsc::channel();
        let s = store.clone();
        rt.spawn(async move {
            let _ = tx.send(s.settle_deferred(31));
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(300))
                .is_err(),
            "an append past a held-back purge went ahead of the install"
        );
        assert_eq!(store.log.lock().bounds(), (0, 10));
        // The install's swap committed: the state machine runs the purge,
        // and the append goes on right after the snapshot.
        store.progress.set_flushed(Some(id(30)));
        store.finish_deferred_purge().unwrap();
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("the append goes on once the purge ran")
            .unwrap();
        assert_eq!(store.log.lock().bounds(), (31, 31));
        assert_eq!(store.deferred_purge(), None);
        assert_eq!(store.ends.lock().purged, Some(id(30)));
    }
}
