//! The state machine: the server's keyspace. An entry is applied as one
//! unsynced `WriteBatch` that also holds the applied record
//! ([`APPLIED_KEY`]: the entry's log id, the membership, every node id
//! ever admitted), so the engine's prefix of history after a crash holds
//! exactly the entries applied before it, and openraft re-applies the
//! rest: an `INCR` is never applied twice, nor lost.
//!
//! Snapshots: under the apply lock, read the applied record and make a
//! checkpoint (hard links, a fraction of a second), kept as the node's
//! snapshot directory and sent as an archive's bytes read from its files
//! ([`super::snapfile`]). A received one is unpacked as it comes into a
//! staging directory, then moved to `raft/install`, where this node's
//! own Raft records take the place of the leader's, and swapped in as
//! the node's database ([`super::swap`]: a crash leaves the old database
//! or the new).

use std::collections::BTreeSet;
use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    EntryPayload, LogId, RaftSnapshotBuilder, StorageError, StorageIOError, StoredMembership,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sluicedb::{Db, WriteBatch};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

use super::log::{decode, encode, ApplyProgress, RAFT_TAG};
use super::{snapfile, swap, Member, NodeId, Reply, TypeConfig};
use crate::server::Server;

/// The applied record.
pub const APPLIED_KEY: &[u8] = b"ra";

type SResult<T> = Result<T, StorageError<NodeId>>;

/// What the state machine has applied.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Applied {
    pub last: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, Member>,
    /// Every node id ever admitted: a join with one of them that is not
    /// the same member coming back is refused, so ids are never reused.
    pub ids: BTreeSet<NodeId>,
}

pub fn read_applied(db: &Db) -> Result<Applied, String> {
    match db.get(APPLIED_KEY).map_err(|e| e.to_string())? {
        Some(raw) => decode(&raw, "raft applied record"),
        None => Ok(Applied::default()),
    }
}

fn snap_err(e: impl std::fmt::Display) -> StorageError<NodeId> {
    StorageIOError::write_snapshot(None, &std::io::Error::other(e.to_string())).into()
}

/// A snapshot as openraft sees it: the archive's bytes
/// (`docs/format/raft-snapshot.md`), read from this node's checkpoint
/// directory as they are sent, or written by the sender straight into the
/// directory being installed as they are received. Neither side keeps the
/// archive itself.
pub struct SnapFile {
    inner: Side,
}

enum Side {
    /// This node's snapshot, being sent.
    Sending(snapfile::Packer),
    /// A snapshot being received.
    Receiving(Receiving),
}

/// A snapshot being received. openraft writes its chunks in order; a
/// chunk sent again (its answer was lost) is written again at its offset,
/// and what of it was taken already is skipped. Each chunk goes to a
/// thread that unpacks it ([`snapfile::Unpacker`]: every file written in
/// place and checked against its checksum; all synced once the archive
/// ended) into a directory of its own under the staging directory, while
/// the next chunks arrive.
struct Receiving {
    /// Where the next write goes.
    pos: u64,
    /// Bytes of the archive handed to the thread.
    taken: u64,
    /// Chunks to the thread; `None` once closed.
    tx: Option<std::sync::mpsc::SyncSender<Vec<u8>>>,
    /// Tells the thread to stop at once (the stream was given up).
    abandoned: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<snapfile::Unpacked, String>>>,
    /// Where it unpacks: a directory of its own under the staging
    /// directory (a stream given up may still be stopping when the next
    /// one begins), which `swap::recover` removes whole at start.
    unpack_dir: PathBuf,
    /// When the first byte came.
    started: std::time::Instant,
}

/// Chunks waiting for the unpacking thread: beyond them a write waits
/// (the disk is slower than the network).
const CHUNKS_QUEUED: usize = 4;

/// What a received snapshot left: its files, where, and the time spent.
struct Received {
    unpacked: snapfile::Unpacked,
    dir: PathBuf,
    /// From the first chunk to the last file synced.
    took: std::time::Duration,
}

impl Receiving {
    fn start(staging: &Path) -> Result<Receiving, String> {
        std::fs::create_dir_all(staging).map_err(|e| format!("{}: {e}", staging.display()))?;
        let unpack_dir = staging.join(stamp().to_string());
        let name = PathBuf::from(format!("the snapshot stream into {}", unpack_dir.display()));
        let mut unpacker = snapfile::Unpacker::new(&name, &unpack_dir)?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(CHUNKS_QUEUED);
        let abandoned: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let stop = abandoned.clone();
        let thread = std::thread::Builder::new()
            .name("raft-snapshot-unpack".into())
            .spawn(move || {
                for chunk in rx {
                    if stop.load(Ordering::Acquire) {
                        return Err(format!("{}: the stream was given up", name.display()));
                    }
                    unpacker.feed(&chunk)?;
                }
                if stop.load(Ordering::Acquire) {
                    return Err(format!("{}: the stream was given up", name.display()));
                }
                unpacker.finish()
            })
            .map_err(|e| format!("starting a thread: {e}"))?;
        Ok(Receiving {
            pos: 0,
            taken: 0,
            tx: Some(tx),
            abandoned,
            thread: Some(thread),
            unpack_dir,
            started: std::time::Instant::now(),
        })
    }

    /// Takes the bytes written at `pos`. Blocks while the thread is
    /// `CHUNKS_QUEUED` chunks behind (as a write to a file would block).
    fn write(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let end = self.pos + buf.len() as u64;
        if self.pos > self.taken {
            return Err(std::io::Error::other(format!(
                "a snapshot chunk at offset {} leaves a gap after {}",
                self.pos, self.taken
            )));
        }
        if end > self.taken {
            let fresh = buf[(self.taken - self.pos) as usize..].to_vec();
            let sent = self.tx.as_ref().is_some_and(|tx| tx.send(fresh).is_ok());
            if !sent {
                // The thread stopped: on damage (its error says where).
                return Err(std::io::Error::other(self.failure()));
            }
            self.taken = end;
        }
        self.pos = end;
        Ok(())
    }

    /// Takes the archive's next bytes as a buffer of their own (a
    /// snapshot stream's frame), handed to the thread without a copy.
    /// Blocks as [`Receiving::write`] does.
    fn push(&mut self, chunk: Vec<u8>) -> std::io::Result<()> {
        if self.pos != self.taken {
            return self.write(&chunk);
        }
        let n = chunk.len() as u64;
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(chunk).is_ok());
        if !sent {
            return Err(std::io::Error::other(self.failure()));
        }
        self.taken += n;
        self.pos += n;
        Ok(())
    }

    /// Why the thread stopped early.
    fn failure(&mut self) -> String {
        self.tx = None;
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(Err(e))) => e,
            _ => "the snapshot's unpacking thread stopped".to_owned(),
        }
    }

    /// Every chunk is written: waits for the unpacking, and returns what
    /// it unpacked and where, or why it could not.
    fn finish(mut self) -> Result<Received, String> {
        self.tx = None;
        let r = match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(r)) => r,
            _ => Err("the unpacking thread failed".to_owned()),
        };
        r.map(|unpacked| Received {
            unpacked,
            dir: std::mem::take(&mut self.unpack_dir),
            took: self.started.elapsed(),
        })
    }
}

impl Drop for Receiving {
    /// A stream given up (or whose unpacking failed): its thread stops
    /// and its files go.
    fn drop(&mut self) {
        self.abandoned.store(true, Ordering::Release);
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if !self.unpack_dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.unpack_dir);
        }
    }
}

impl SnapFile {
    /// This node's snapshot being sent: the reader of its archive (a
    /// snapshot stream reads it on a thread of its own, `raft::net`).
    pub(crate) fn into_packer(self) -> Option<snapfile::Packer> {
        match self.inner {
            Side::Sending(p) => Some(p),
            Side::Receiving(_) => None,
        }
    }

    /// A snapshot being received: takes the archive's next bytes, in
    /// order. Blocks while the unpacking thread is `CHUNKS_QUEUED`
    /// chunks behind (the caller runs it where blocking is allowed).
    pub(crate) fn push(&mut self, chunk: Vec<u8>) -> std::io::Result<()> {
        match &mut self.inner {
            Side::Receiving(r) => r.push(chunk),
            Side::Sending(_) => Err(not_received()),
        }
    }
}

fn not_received() -> std::io::Error {
    std::io::Error::other("a snapshot being sent is not written")
}

// The reads and writes below run on the runtime's thread: a read is
// from the page cache (the checkpoint's files were just written or are
// the database's, read by it too), a write a hand-over to the unpacking
// thread, which waits only while that thread is `CHUNKS_QUEUED` chunks
// behind, that is for the disk, as a file's write would.
impl AsyncRead for SnapFile {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().inner {
            Side::Sending(p) => {
                let n = p.read(buf.initialize_unfilled())?;
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Side::Receiving(_) => Poll::Ready(Err(std::io::Error::other(
                "a snapshot being received is not read",
            ))),
        }
    }
}

impl AsyncWrite for SnapFile {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().inner {
            Side::Receiving(r) => Poll::Ready(r.write(buf).map(|_| buf.len())),
            Side::Sending(_) => Poll::Ready(Err(not_received())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncSeek for SnapFile {
    fn start_seek(self: Pin<&mut Self>, position: SeekFrom) -> std::io::Result<()> {
        match &mut self.get_mut().inner {
            Side::Receiving(r) => {
                r.pos = match position {
                    SeekFrom::Start(p) => p,
                    SeekFrom::Current(d) => r.pos.checked_add_signed(d).unwrap_or(0),
                    SeekFrom::End(_) => {
                        return Err(std::io::Error::other(
                            "a snapshot being received seeks from its start only",
                        ))
                    }
                };
                Ok(())
            }
            Side::Sending(p) => {
                let to = match position {
                    SeekFrom::Start(at) => Some(at),
                    SeekFrom::Current(d) => p.position().checked_add_signed(d),
                    SeekFrom::End(d) => p.archive_len().checked_add_signed(d),
                };
                let to = to.ok_or_else(|| std::io::Error::other("a seek before the start"))?;
                p.seek(to).map(|_| ())
            }
        }
    }

    fn poll_complete(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<u64>> {
        Poll::Ready(Ok(match &self.get_mut().inner {
            Side::Receiving(r) => r.pos,
            Side::Sending(p) => p.position(),
        }))
    }
}

/// Snapshot and archive names are unique within a node.
static STAMP: AtomicU64 = AtomicU64::new(0);

fn stamp() -> u64 {
    crate::store::now_ms() * 1000 + STAMP.fetch_add(1, Ordering::Relaxed) % 1000
}

fn snapshots_dir(dir: &Path) -> PathBuf {
    dir.join("snapshots")
}

/// The state machine over the server's keyspace.
pub struct StateMachine {
    server: Arc<Server>,
    /// The node's raft directory.
    dir: PathBuf,
    applied: Applied,
    /// Held while an entry is applied and while a snapshot's checkpoint is
    /// made: a checkpoint holds whole entries and its applied record.
    lock: Arc<Mutex<()>>,
    /// Where applies note their time.
    pub stages: Arc<super::stages::Stages>,
    /// How far it applied, and how far of that is flushed (shared with
    /// the log store, which purges no further).
    pub progress: Arc<ApplyProgress>,
    /// The log store, whose purge up to an installed snapshot waits until
    /// the install is durable ([`super::log::LogStore::purge`]).
    pub log: Option<super::log::LogStore>,
    /// Where a test holds an install before its swap.
    pub gate: Arc<InstallGate>,
    /// Whether openraft's start read the snapshot already.
    started: bool,
    /// See [`super::DEFAULT_FRESH_SNAPSHOT_BYTES`].
    pub fresh_snapshot_bytes: u64,
}

/// Holds the next snapshot install, unpacked and opened, before its swap,
/// until released: a test writes to the group meanwhile, so that entries
/// are committed while a follower installs. Only the `fault-points`
/// feature (this crate's own tests) can close it; otherwise every install
/// passes at once.
#[derive(Default)]
pub struct InstallGate {
    #[cfg(feature = "fault-points")]
    state: Mutex<GateState>,
    #[cfg(feature = "fault-points")]
    moved: parking_lot::Condvar,
}

#[cfg(feature = "fault-points")]
#[derive(Default)]
struct GateState {
    /// The next install waits.
    closed: bool,
    /// An install is waiting.
    waiting: bool,
}

impl InstallGate {
    /// Waits while the gate is closed.
    fn pass(&self) {
        #[cfg(feature = "fault-points")]
        {
            let mut st = self.state.lock();
            if st.closed {
                st.waiting = true;
                self.moved.notify_all();
                while st.closed {
                    self.moved.wait(&mut st);
                }
                st.waiting = false;
            }
        }
    }

    /// Closes the gate for the next install (`true`) or opens it.
    #[cfg(feature = "fault-points")]
    pub fn close(&self, closed: bool) {
        let mut st = self.state.lock();
        st.closed = closed;
        self.moved.notify_all();
    }

    /// Whether an install is waiting at the gate.
    #[cfg(feature = "fault-points")]
    pub fn waiting(&self) -> bool {
        self.state.lock().waiting
    }
}

/// Where a test makes a node die inside a snapshot install
/// (`SLUICE_RAFT_CRASH_INSTALL`, read at each install): `unpacked`, with
/// the snapshot unpacked in `raft/install` and the swap not begun (before
/// its commit point: the old database stays); `commit`, just
/// after the swap's commit point (the mark written, nothing renamed);
/// `swapped`, after the swap and before the log's purge up to the
/// snapshot. Either way openraft has asked for that purge before the
/// node dies. The process aborts, as a kill would stop it.
///
/// Compiled only with the `fault-points` feature, which only this crate's
/// own tests enable: a server built for use never reads the variable.
#[cfg(feature = "fault-points")]
const CRASH_ENV: &str = "SLUICE_RAFT_CRASH_INSTALL";

/// Whether a test asked for a crash at `at` (never, without the
/// `fault-points` feature).
fn crash_requested(at: &str) -> bool {
    #[cfg(feature = "fault-points")]
    return std::env::var(CRASH_ENV).ok().as_deref() == Some(at);
    #[cfg(not(feature = "fault-points"))]
    {
        let _ = at;
        false
    }
}

fn crash_point(at: &str, log: Option<&super::log::LogStore>, upto: Option<LogId<NodeId>>) {
    if !crash_requested(at) {
        return;
    }
    // Die only once openraft asked for the purge the install covers (it
    // does so as it hands the install over, from another task).
    let started = std::time::Instant::now();
    while let Some(log) = log {
        if log.deferred_purge() >= upto || started.elapsed().as_secs() > 10 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    eprintln!("sluice serve: {at}: aborting inside a snapshot install (fault point)");
    std::process::abort();
}

impl StateMachine {
    /// Opens the state machine (a swap a crash cut was finished by
    /// [`swap::recover`] before the database was opened).
    pub fn open(server: Arc<Server>, dir: PathBuf) -> Result<StateMachine, String> {
        std::fs::create_dir_all(snapshots_dir(&dir))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let lock = Arc::new(Mutex::new(()));
        let applied = read_applied(&server.ks.db())?;
        tidy_snapshots(&dir)?;
        drop_uncommitted_installs(&dir, applied.last)?;
        // Whatever the database holds after its open is durable.
        let progress = Arc::new(ApplyProgress::default());
        progress.set_flushed(applied.last);
        Ok(StateMachine {
            server,
            dir,
            applied,
            lock,
            stages: Arc::default(),
            progress,
            log: None,
            gate: Arc::default(),
            started: false,
            fresh_snapshot_bytes: super::DEFAULT_FRESH_SNAPSHOT_BYTES,
        })
    }

    fn apply_one(&mut self, entry: openraft::Entry<TypeConfig>) -> Result<Vec<Reply>, String> {
        let _g = self.lock.lock();
        self.applied.last = Some(entry.log_id);
        if let EntryPayload::Membership(m) = &entry.payload {
            self.applied.ids.extend(m.nodes().map(|(id, _)| *id));
            self.applied.membership = StoredMembership::new(Some(entry.log_id), m.clone());
        }
        let mark = (APPLIED_KEY.to_vec(), encode(&self.applied));
        match entry.payload {
            EntryPayload::Normal(batch) => {
                let reqs = batch.requests()?;
                crate::cmd::apply_entry(&self.server, reqs, mark, entry.log_id.index)
                    .map(|replies| replies.into_iter().map(Reply).collect())
                    .map_err(|e| e.to_string())
            }
            _ => {
                let mut b = WriteBatch::new();
                b.put(mark.0, mark.1);
                self.server.ks.db().write(b).map_err(|e| e.to_string())?;
                Ok(Vec::new())
            }
        }
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Builder;

    async fn applied_state(
        &mut self,
    ) -> SResult<(Option<LogId<NodeId>>, StoredMembership<NodeId, Member>)> {
        Ok((self.applied.last, self.applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> SResult<Vec<Vec<Reply>>>
    where
        I: IntoIterator<Item = openraft::Entry<TypeConfig>> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let mut out = Vec::new();
        for e in entries {
            let id = e.log_id;
            // Never past what this node's log acknowledged: under
            // `appendfsync always` its durable log (the leader's own sync
            // runs beside replication, and a flush of the database would
            // make the applied record durable: "Applying an entry" and
            // "Where the log lives" in docs/design.md); under `everysec`
            // its written log ("The log's appendfsync": a power cut can
            // then leave the applied record past the log's end, which
            // openraft's start purges up to).
            if let Some(log) = &self.log {
                log.wait_acked(id.index).await.map_err(|err| {
                    StorageError::from(StorageIOError::apply(id, &std::io::Error::other(err)))
                })?;
            }
            let started = std::time::Instant::now();
            // A failed engine write stops this node's state machine (it
            // must not apply the entries after a hole); openraft stops.
            let r = self.apply_one(e).map_err(|err| {
                StorageError::from(StorageIOError::apply(id, &std::io::Error::other(err)))
            })?;
            self.progress.applied.store(id.index + 1, Ordering::Release);
            self.stages.apply.add(started.elapsed());
            out.push(r);
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Builder {
        Builder {
            server: self.server.clone(),
            dir: self.dir.clone(),
            lock: self.lock.clone(),
            progress: self.progress.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> SResult<Box<SnapFile>> {
        let staging = swap::staging_dir(node_dir(&self.dir).map_err(snap_err)?);
        let recv = tokio::task::spawn_blocking(move || Receiving::start(&staging))
            .await
            .map_err(snap_err)?
            .map_err(snap_err)?;
        Ok(Box::new(SnapFile {
            inner: Side::Receiving(recv),
        }))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Member>,
        snapshot: Box<SnapFile>,
    ) -> SResult<()> {
        let Side::Receiving(recv) = snapshot.inner else {
            return Err(snap_err("installing a snapshot that was not received"));
        };
        // Every file was unpacked while it came; what is left is their
        // syncs.
        let received = tokio::task::spawn_blocking(move || recv.finish())
            .await
            .map_err(snap_err)?
            .map_err(snap_err)?;
        let (server, dir, lock, meta2, log, gate) = (
            self.server.clone(),
            self.dir.clone(),
            self.lock.clone(),
            meta.clone(),
            self.log.clone(),
            self.gate.clone(),
        );
        let applied = tokio::task::spawn_blocking(move || {
            install(&server, &dir, &lock, &meta2, received, log.as_ref(), &gate)
        })
        .await
        .map_err(snap_err)?
        .map_err(snap_err)?;
        self.progress.set_flushed(applied.last);
        self.applied = applied;
        // The database now durably holds the snapshot: the log may go.
        if let Some(log) = &self.log {
            crash_point("swapped", Some(log), meta.last_log_id);
            log.finish_deferred_purge().map_err(snap_err)?;
        }
        Ok(())
    }

    /// The newest snapshot; for a follower being sent one, a fresh one
    /// when the newest is far behind what this node applied
    /// ([`StateMachine::far_behind`]).
    async fn get_current_snapshot(&mut self) -> SResult<Option<Snapshot<TypeConfig>>> {
        // openraft's start reads the snapshot first, before any follower
        // can be sent one: that read takes what is there.
        let at_start = !std::mem::replace(&mut self.started, true);
        let mut found = newest(&self.dir).map_err(snap_err)?;
        if !at_start && self.far_behind(found.as_ref()) {
            let (server, dir, lock) = (self.server.clone(), self.dir.clone(), self.lock.clone());
            let (meta, path) =
                tokio::task::spawn_blocking(move || build(&server.ks.db(), &dir, &lock))
                    .await
                    .map_err(snap_err)?
                    .map_err(snap_err)?;
            let n = meta.last_log_id.map_or(0, |l| l.index + 1);
            self.progress.flushed.fetch_max(n, Ordering::AcqRel);
            found = Some((meta, path));
        }
        let Some((meta, path)) = found else {
            return Ok(None);
        };
        let packer = tokio::task::spawn_blocking(move || snapfile::Packer::open(&path))
            .await
            .map_err(snap_err)?
            .map_err(snap_err)?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(SnapFile {
                inner: Side::Sending(packer),
            }),
        }))
    }
}

impl StateMachine {
    /// Whether the entries this node applied after `snapshot` (the newest
    /// kept) hold at least `fresh_snapshot_bytes` of log records. A
    /// follower sent that snapshot would then take all of them by log
    /// after it, at one AppendEntries round trip per 16 entries (about 25-50
    /// MB/s measured, and applied one by one), where a snapshot built now
    /// carries their effect as files, at the stream's rate. A build
    /// flushes the memtable and links the files (a fraction of a second,
    /// during which this state machine applies nothing); a follower that
    /// is retried while unreachable causes at most one per
    /// `fresh_snapshot_bytes` of writes.
    fn far_behind(&self, snapshot: Option<&Stored>) -> bool {
        let (Some(log), Some(applied)) = (&self.log, self.applied.last) else {
            return false;
        };
        let from = snapshot
            .and_then(|(m, _)| m.last_log_id)
            .map_or(0, |l| l.index + 1);
        let to = applied.index + 1;
        to > from && log.record_bytes(from, to) >= self.fresh_snapshot_bytes
    }
}

/// Builds snapshots: a checkpoint under the apply lock, then its archive.
pub struct Builder {
    server: Arc<Server>,
    dir: PathBuf,
    lock: Arc<Mutex<()>>,
    progress: Arc<ApplyProgress>,
}

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    async fn build_snapshot(&mut self) -> SResult<Snapshot<TypeConfig>> {
        let (server, dir, lock) = (self.server.clone(), self.dir.clone(), self.lock.clone());
        let (meta, packer) = tokio::task::spawn_blocking(move || {
            let (meta, path) = build(&server.ks.db(), &dir, &lock)?;
            let packer = snapfile::Packer::open(&path).map_err(|e| e.to_string())?;
            Ok::<_, String>((meta, packer))
        })
        .await
        .map_err(snap_err)?
        .map_err(snap_err)?;
        // The checkpoint flushed everything applied up to the snapshot.
        let n = meta.last_log_id.map_or(0, |l| l.index + 1);
        self.progress.flushed.fetch_max(n, Ordering::AcqRel);
        Ok(Snapshot {
            meta,
            snapshot: Box::new(SnapFile {
                inner: Side::Sending(packer),
            }),
        })
    }
}

/// Makes a snapshot: a checkpoint of the database, under the apply lock,
/// kept as this node's snapshot directory. Returns its meta and path.
fn build(
    db: &Db,
    dir: &Path,
    lock: &Mutex<()>,
) -> Result<(SnapshotMeta<NodeId, Member>, PathBuf), String> {
    let snaps = snapshots_dir(dir);
    let st = stamp();
    let started = std::time::Instant::now();
    // Most of what the checkpoint must flush first (the state machine's
    // batches are not journaled), flushed before applying stops for it.
    db.flush().map_err(|e| format!("flush: {e}"))?;
    let _g = lock.lock();
    let applied = read_applied(db)?;
    let last = applied.last.map_or((0, 0), |l| (l.leader_id.term, l.index));
    let meta = SnapshotMeta {
        last_log_id: applied.last,
        last_membership: applied.membership,
        snapshot_id: format!("{}-{}-{st}", last.0, last.1),
    };
    let path = publish(&snaps, &meta, |tmp| {
        db.checkpoint(tmp)
            .map(|_| ())
            .map_err(|e| format!("checkpoint: {e}"))
    })?;
    eprintln!(
        "sluice serve: built snapshot {} in {} ms",
        meta.snapshot_id,
        started.elapsed().as_millis()
    );
    Ok((meta, path))
}

/// The directory of a kept snapshot, beside its meta file.
const SNAP_DIR_EXT: &str = "d";

/// Makes a snapshot's directory (by `write`, into a temporary name it
/// must create) and then its meta file, each renamed into place once
/// whole and synced; removes older snapshots. Returns the directory.
fn publish(
    snaps: &Path,
    meta: &SnapshotMeta<NodeId, Member>,
    write: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<PathBuf, String> {
    let data = snaps.join(format!("{}.{SNAP_DIR_EXT}", meta.snapshot_id));
    let tmp = snaps.join(format!("{}.{SNAP_DIR_EXT}.tmp", meta.snapshot_id));
    write(&tmp)?;
    std::fs::rename(&tmp, &data).map_err(|e| e.to_string())?;
    let meta_path = snaps.join(format!("{}.meta", meta.snapshot_id));
    let meta_tmp = snaps.join(format!("{}.meta.tmp", meta.snapshot_id));
    std::fs::write(&meta_tmp, encode(meta)).map_err(|e| e.to_string())?;
    std::fs::File::open(&meta_tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| e.to_string())?;
    std::fs::rename(&meta_tmp, &meta_path).map_err(|e| e.to_string())?;
    std::fs::File::open(snaps)
        .and_then(|f| f.sync_all())
        .map_err(|e| e.to_string())?;
    // Older snapshots go; one being sent goes on being read through the
    // files its sender opened.
    for e in std::fs::read_dir(snaps).map_err(|e| e.to_string())? {
        let p = e.map_err(|e| e.to_string())?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let ours = name.starts_with(&meta.snapshot_id);
        let ext = p.extension().and_then(|x| x.to_str());
        if !ours && ext == Some("meta") {
            let _ = std::fs::remove_file(&p);
        } else if !ours && ext == Some(SNAP_DIR_EXT) {
            let _ = std::fs::remove_dir_all(&p);
        }
    }
    Ok(data)
}

/// A snapshot's meta and the path of its directory.
type Stored = (SnapshotMeta<NodeId, Member>, PathBuf);

/// The newest whole snapshot: its meta and directory.
fn newest(dir: &Path) -> Result<Option<Stored>, String> {
    let snaps = snapshots_dir(dir);
    let mut best: Option<Stored> = None;
    for e in std::fs::read_dir(&snaps).map_err(|e| e.to_string())? {
        let p = e.map_err(|e| e.to_string())?.path();
        if p.extension().and_then(|x| x.to_str()) != Some("meta") {
            continue;
        }
        let raw = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        let meta: SnapshotMeta<NodeId, Member> =
            decode(&raw, &format!("snapshot meta {}", p.display()))?;
        let data = p.with_extension(SNAP_DIR_EXT);
        if !data.is_dir() {
            continue;
        }
        if best
            .as_ref()
            .is_none_or(|(b, _)| b.last_log_id < meta.last_log_id)
        {
            best = Some((meta, data));
        }
    }
    Ok(best)
}

/// Tidies the snapshots directory at start: what a build, a receive or a
/// publish cut short left (temporary names, the engine's checkpoint
/// staging), and the archives nodes of earlier versions kept as their
/// snapshots, each unpacked into the directory that replaces it.
fn tidy_snapshots(dir: &Path) -> Result<(), String> {
    let snaps = snapshots_dir(dir);
    for e in std::fs::read_dir(&snaps).map_err(|e| e.to_string())? {
        let p = e.map_err(|e| e.to_string())?.path();
        let ext = p.extension().and_then(|x| x.to_str()).unwrap_or("");
        let gone = match ext {
            "meta" | SNAP_DIR_EXT => continue,
            "snap" => {
                let data = p.with_extension(SNAP_DIR_EXT);
                if p.with_extension("meta").exists() && !data.exists() {
                    let tmp = p.with_extension("d.tmp");
                    let _ = std::fs::remove_dir_all(&tmp);
                    snapfile::unpack(&p, &tmp)?;
                    std::fs::rename(&tmp, &data).map_err(|e| format!("{}: {e}", tmp.display()))?;
                    std::fs::File::open(&snaps)
                        .and_then(|f| f.sync_all())
                        .map_err(|e| format!("{}: {e}", snaps.display()))?;
                }
                std::fs::remove_file(&p)
            }
            _ if p.is_dir() => std::fs::remove_dir_all(&p),
            _ => std::fs::remove_file(&p),
        };
        gone.map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

/// Removes the snapshots past `applied`: a received snapshot is kept as
/// this node's snapshot before its swap, so a crash before the swap's
/// commit point leaves one the database never took (a snapshot this node
/// built is never past its database's applied record: its checkpoint
/// flushed). openraft refuses to start with a snapshot past what it
/// counts committed, and the leader sends it again.
fn drop_uncommitted_installs(dir: &Path, applied: Option<LogId<NodeId>>) -> Result<(), String> {
    while let Some((meta, data)) = newest(dir)? {
        if meta.last_log_id <= applied {
            break;
        }
        eprintln!(
            "sluice serve: snapshot {} was received but never swapped in (the database applied {:?}); removing it",
            meta.snapshot_id, applied
        );
        let m = data.with_extension("meta");
        std::fs::remove_file(&m).map_err(|e| format!("{}: {e}", m.display()))?;
        std::fs::remove_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    }
    Ok(())
}

/// The node's directory, whose `raft` directory is `dir`.
fn node_dir(dir: &Path) -> Result<&Path, String> {
    dir.parent()
        .ok_or_else(|| format!("{}: no parent directory", dir.display()))
}

/// Installs a received snapshot, unpacked as it came and synced: opens
/// it, keeps a checkpoint of it as this node's snapshot, and swaps it in
/// as the node's database ([`super::swap`]).
fn install(
    server: &Server,
    dir: &Path,
    lock: &Mutex<()>,
    meta: &SnapshotMeta<NodeId, Member>,
    received: Received,
    log: Option<&super::log::LogStore>,
    gate: &InstallGate,
) -> Result<Applied, String> {
    let snaps = snapshots_dir(dir);
    let node_dir = node_dir(dir)?;
    let target = swap::install_dir(node_dir);
    let started = std::time::Instant::now();
    if target.exists() {
        std::fs::remove_dir_all(&target).map_err(|e| format!("{}: {e}", target.display()))?;
    }
    let Received {
        unpacked,
        dir: unpacked_dir,
        took: received_in,
    } = received;
    std::fs::rename(&unpacked_dir, &target).map_err(|e| e.to_string())?;
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| e.to_string())?;
    let ks = &server.ks;
    let preset = ks.db().created_with();
    let preset = match preset {
        Some(p) => p,
        None => Db::recorded_preset(&target)
            .ok()
            .flatten()
            .unwrap_or_default(),
    };
    let snap = Db::open(&target, super::db_options(preset))
        .map_err(|e| format!("opening the snapshot {}: {e}", target.display()))?;
    let applied = read_applied(&snap)?;
    if applied.last != meta.last_log_id {
        return Err(format!(
            "snapshot {}: its database applied {:?}, its meta says {:?}",
            meta.snapshot_id, applied.last, meta.last_log_id
        ));
    }
    // The leader's log, vote and committed id are not this node's.
    rewrite_raft_records(&snap, None)?;
    // This node's own snapshot from now on (it sends it should it lead):
    // a checkpoint of what it installs, hard links into `raft/install`,
    // whose files the swap keeps. Kept before the swap's commit point: a
    // crash before it leaves a snapshot past the old database's applied
    // record, which the next start removes (`drop_uncommitted_installs`).
    publish(&snaps, meta, |tmp| {
        snap.checkpoint(tmp)
            .map(|_| ())
            .map_err(|e| format!("checkpoint of the snapshot: {e}"))
    })?;
    let bytes = unpacked.file_bytes;
    let db_dir = super::db_dir(node_dir);
    let opened = started.elapsed();
    crash_point("unpacked", log, meta.last_log_id);
    gate.pass();
    let _g = lock.lock();
    let held = ks.lock_for_replace();
    let r = ks.db_slot().replace(
        crate::dbslot::REPLACE_WAIT_MS,
        move |old| {
            rewrite_raft_records(&snap, Some(old))?;
            // Unsynced writes are not journaled here: a flush makes them
            // durable before the swap's commit point.
            snap.flush().map_err(|e| e.to_string())?;
            snap.sync().map_err(|e| e.to_string())?;
            Ok(snap)
        },
        |snap| {
            drop(snap);
            if crash_requested("commit") {
                swap::commit(node_dir, swap::CrashAt(Some(2)))?;
                crash_point("commit", log, meta.last_log_id);
            }
            swap::commit(node_dir, swap::CrashAt(None))?;
            Db::open(&db_dir, super::db_options(preset))
                .map_err(|e| format!("opening {} after a snapshot swap: {e}", db_dir.display()))
        },
    );
    let after = ks.replaced();
    drop(held);
    r?;
    after.map_err(|e| e.to_string())?;
    // The node's `maxmemory` holds for the database swapped in too.
    let maxmemory = server.config.read().maxmemory_bytes;
    ks.db().set_memory_budget(crate::memory_budget(maxmemory));
    eprintln!(
        "sluice serve: installed snapshot {} ({bytes} bytes of files): received in {} ms \
         ({} ms of it syncing files), opened and kept in {} ms, swapped in {} ms",
        meta.snapshot_id,
        received_in.as_millis(),
        unpacked.sync.as_millis(),
        opened.as_millis(),
        (started.elapsed() - opened).as_millis()
    );
    Ok(applied)
}

/// Records of a snapshot's database deleted or written per batch.
const RECORDS_PER_BATCH: usize = 10_000;

/// Deletes `snap`'s Raft records but its applied record; then, with
/// `from`, copies `from`'s (this node's log, vote, committed id and purge
/// point) in. Unsynced; the caller syncs.
fn rewrite_raft_records(snap: &Db, from: Option<&Db>) -> Result<(), String> {
    let lo = vec![RAFT_TAG];
    let hi = vec![RAFT_TAG + 1];
    let source = from.unwrap_or(snap);
    let mut batch = WriteBatch::new();
    let mut n = 0;
    for pair in source.range(lo..hi) {
        let (k, v) = pair.map_err(|e| format!("reading raft records: {e}"))?;
        if k == APPLIED_KEY {
            continue;
        }
        if from.is_some() {
            batch.put(k, v);
        } else {
            batch.delete(k);
        }
        n += 1;
        if n % RECORDS_PER_BATCH == 0 {
            snap.write(std::mem::take(&mut batch))
                .map_err(|e| e.to_string())?;
        }
    }
    snap.write(batch).map_err(|e| e.to_string())
}
