//! The state machine: the server's keyspace. An entry is applied as one
//! unsynced `WriteBatch` that also holds the applied record
//! ([`APPLIED_KEY`]: the entry's log id, the membership, every node id
//! ever admitted), so the engine's prefix of history after a crash holds
//! exactly the entries applied before it, and openraft re-applies the
//! rest: an `INCR` is never applied twice, nor lost.
//!
//! Snapshots: under the apply lock, read the applied record and make a
//! checkpoint (hard links, a fraction of a second); then pack the
//! checkpoint into an archive ([`super::snapfile`]). Installing one
//! unpacks it to `raft/install`, puts this node's own Raft records in
//! place of the leader's, and swaps the directory in as the node's
//! database ([`super::swap`]: a crash leaves the old database or the new).

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

/// A snapshot archive on disk, open for reading or being received.
pub struct SnapFile {
    pub path: PathBuf,
    file: tokio::fs::File,
    /// Being received: written here, and unpacked as it comes.
    recv: Option<Receiving>,
}

/// A snapshot being received. openraft writes its chunks in order (a chunk
/// sent again is written again at its offset); each write goes to the
/// archive at once (`pwrite`), and a thread unpacks the archive's bytes
/// written without a gap from its start into the staging directory
/// ([`snapfile::Unpacker`]) while the next chunks arrive.
struct Receiving {
    file: std::fs::File,
    /// Where the next write goes.
    pos: u64,
    progress: Arc<(Mutex<Progress>, parking_lot::Condvar)>,
    thread: Option<std::thread::JoinHandle<Result<u64, String>>>,
    /// Where it unpacks: a directory of its own under the staging
    /// directory (a stream given up may still be stopping when the next
    /// one begins), which `swap::recover` removes whole at start.
    unpack_dir: PathBuf,
}

/// What the unpacking thread may read, and whether more will come.
#[derive(Default)]
struct Progress {
    /// Bytes from the archive's start written without a gap.
    written: u64,
    /// No more bytes will come: unpack what is written and finish.
    closed: bool,
    /// Stop at once (the stream was given up).
    abandoned: bool,
}

impl Receiving {
    fn start(archive: &Path, file: std::fs::File, staging: &Path) -> Result<Receiving, String> {
        std::fs::create_dir_all(staging).map_err(|e| format!("{}: {e}", staging.display()))?;
        let unpack_dir = staging.join(stamp().to_string());
        let mut unpacker = snapfile::Unpacker::new(archive, &unpack_dir)?;
        let progress: Arc<(Mutex<Progress>, parking_lot::Condvar)> = Arc::default();
        let (p, reader) = (
            progress.clone(),
            file.try_clone().map_err(|e| e.to_string())?,
        );
        let name = archive.display().to_string();
        let thread = std::thread::Builder::new()
            .name("raft-snapshot-unpack".into())
            .spawn(move || {
                use std::os::unix::fs::FileExt;
                let mut buf = vec![0u8; snapfile::CHUNK_BYTES as usize];
                loop {
                    let upto = {
                        let mut g = p.0.lock();
                        while g.written <= unpacker.offset() && !g.closed && !g.abandoned {
                            p.1.wait(&mut g);
                        }
                        if g.abandoned {
                            return Err(format!("{name}: the stream was given up"));
                        }
                        if g.written <= unpacker.offset() {
                            break;
                        }
                        g.written
                    };
                    while unpacker.offset() < upto {
                        if p.0.lock().abandoned {
                            return Err(format!("{name}: the stream was given up"));
                        }
                        let at = unpacker.offset();
                        let n = ((upto - at).min(buf.len() as u64)) as usize;
                        reader
                            .read_exact_at(&mut buf[..n], at)
                            .map_err(|e| format!("{name}: {e}"))?;
                        unpacker.feed(&buf[..n])?;
                    }
                }
                unpacker.finish()
            })
            .map_err(|e| format!("starting a thread: {e}"))?;
        Ok(Receiving {
            file,
            pos: 0,
            progress,
            thread: Some(thread),
            unpack_dir,
        })
    }

    fn write(&mut self, buf: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(buf, self.pos)?;
        let end = self.pos + buf.len() as u64;
        let mut g = self.progress.0.lock();
        if self.pos <= g.written && end > g.written {
            g.written = end;
            self.progress.1.notify_one();
        }
        drop(g);
        self.pos = end;
        Ok(())
    }

    /// Every chunk is written: waits for the unpacking, and returns the
    /// bytes of files it unpacked and where, or why it could not.
    fn finish(mut self) -> Result<(u64, PathBuf), String> {
        self.progress.0.lock().closed = true;
        self.progress.1.notify_one();
        let r = match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(r)) => r,
            _ => Err("the unpacking thread failed".to_owned()),
        };
        r.map(|b| (b, std::mem::take(&mut self.unpack_dir)))
    }
}

impl Drop for Receiving {
    /// A stream given up (or whose unpacking failed): its thread stops
    /// and its files go.
    fn drop(&mut self) {
        self.progress.0.lock().abandoned = true;
        self.progress.1.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if !self.unpack_dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.unpack_dir);
        }
    }
}

impl AsyncRead for SnapFile {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().file).poll_read(cx, buf)
    }
}

impl AsyncWrite for SnapFile {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let me = self.get_mut();
        match me.recv.as_mut() {
            // A chunk's write into the page cache: a fraction of a ms.
            Some(r) => Poll::Ready(r.write(buf).map(|_| buf.len())),
            None => Pin::new(&mut me.file).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        match me.recv {
            Some(_) => Poll::Ready(Ok(())),
            None => Pin::new(&mut me.file).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        match me.recv {
            Some(_) => Poll::Ready(Ok(())),
            None => Pin::new(&mut me.file).poll_shutdown(cx),
        }
    }
}

impl AsyncSeek for SnapFile {
    fn start_seek(self: Pin<&mut Self>, position: SeekFrom) -> std::io::Result<()> {
        let me = self.get_mut();
        match me.recv.as_mut() {
            Some(r) => {
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
            None => Pin::new(&mut me.file).start_seek(position),
        }
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<u64>> {
        let me = self.get_mut();
        match me.recv.as_ref() {
            Some(r) => Poll::Ready(Ok(r.pos)),
            None => Pin::new(&mut me.file).poll_complete(cx),
        }
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
}

/// Where a test makes a node die inside a snapshot install
/// (`SLUICE_RAFT_CRASH_INSTALL`, read at each install): `unpacked`, with
/// the snapshot unpacked in `raft/install` and the swap not begun (before
/// its commit point: the old database stays); `commit`, just
/// after the swap's commit point (the mark written, nothing renamed);
/// `swapped`, after the swap and before the log's purge up to the
/// snapshot. Either way openraft has asked for that purge before the
/// node dies. The process aborts, as a kill would stop it.
const CRASH_ENV: &str = "SLUICE_RAFT_CRASH_INSTALL";

fn crash_point(at: &str, log: Option<&super::log::LogStore>, upto: Option<LogId<NodeId>>) {
    if std::env::var(CRASH_ENV).ok().as_deref() != Some(at) {
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
    eprintln!("sluice serve: {CRASH_ENV}={at}: aborting inside a snapshot install");
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
        let path = snapshots_dir(&self.dir).join(format!("incoming-{}.part", stamp()));
        let std_file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(snap_err)?;
        let file = tokio::fs::File::from_std(std_file.try_clone().map_err(snap_err)?);
        let staging = swap::staging_dir(node_dir(&self.dir).map_err(snap_err)?);
        let (p, s) = (path.clone(), staging);
        let recv = tokio::task::spawn_blocking(move || Receiving::start(&p, std_file, &s))
            .await
            .map_err(snap_err)?
            .map_err(snap_err)?;
        Ok(Box::new(SnapFile {
            path,
            file,
            recv: Some(recv),
        }))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Member>,
        snapshot: Box<SnapFile>,
    ) -> SResult<()> {
        let SnapFile { path, file, recv } = *snapshot;
        file.sync_all().await.map_err(snap_err)?;
        drop(file);
        // Unpacked while it came; else (an archive that was not received
        // here) it is unpacked from the file.
        let unpacked = match recv {
            Some(r) => tokio::task::spawn_blocking(move || r.finish())
                .await
                .map_err(snap_err)?,
            None => Err("not received".to_owned()),
        };
        let (server, dir, lock, meta2, log) = (
            self.server.clone(),
            self.dir.clone(),
            self.lock.clone(),
            meta.clone(),
            self.log.clone(),
        );
        let applied = tokio::task::spawn_blocking(move || {
            install(&server, &dir, &lock, &meta2, &path, unpacked, log.as_ref())
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

    async fn get_current_snapshot(&mut self) -> SResult<Option<Snapshot<TypeConfig>>> {
        let Some((meta, path)) = newest(&self.dir).map_err(snap_err)? else {
            return Ok(None);
        };
        let file = tokio::fs::File::open(&path).await.map_err(snap_err)?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(SnapFile {
                path,
                file,
                recv: None,
            }),
        }))
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
        let (meta, path) = tokio::task::spawn_blocking(move || build(&server.ks.db(), &dir, &lock))
            .await
            .map_err(snap_err)?
            .map_err(snap_err)?;
        // The checkpoint flushed everything applied up to the snapshot.
        let n = meta.last_log_id.map_or(0, |l| l.index + 1);
        self.progress.flushed.fetch_max(n, Ordering::AcqRel);
        let file = tokio::fs::File::open(&path).await.map_err(snap_err)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(SnapFile {
                path,
                file,
                recv: None,
            }),
        })
    }
}

fn build(
    db: &Db,
    dir: &Path,
    lock: &Mutex<()>,
) -> Result<(SnapshotMeta<NodeId, Member>, PathBuf), String> {
    let snaps = snapshots_dir(dir);
    let st = stamp();
    let ckpt = snaps.join(format!("checkpoint-{st}"));
    // Most of what the checkpoint must flush first (the state machine's
    // batches are not journaled), flushed before applying stops for it.
    db.flush().map_err(|e| format!("flush: {e}"))?;
    let applied = {
        let _g = lock.lock();
        let a = read_applied(db)?;
        db.checkpoint(&ckpt)
            .map_err(|e| format!("checkpoint: {e}"))?;
        a
    };
    let last = applied.last.map_or((0, 0), |l| (l.leader_id.term, l.index));
    let meta = SnapshotMeta {
        last_log_id: applied.last,
        last_membership: applied.membership,
        snapshot_id: format!("{}-{}-{st}", last.0, last.1),
    };
    let r = publish(&snaps, &meta, |tmp| {
        snapfile::pack(&ckpt, tmp)
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    let _ = std::fs::remove_dir_all(&ckpt);
    r.map(|p| (meta, p))
}

/// Writes a snapshot's archive (by `write`) and then its meta file, each
/// under a temporary name renamed when whole; removes older snapshots.
/// Returns the archive's path.
fn publish(
    snaps: &Path,
    meta: &SnapshotMeta<NodeId, Member>,
    write: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<PathBuf, String> {
    let archive = snaps.join(format!("{}.snap", meta.snapshot_id));
    let tmp = snaps.join(format!("{}.snap.tmp", meta.snapshot_id));
    write(&tmp)?;
    std::fs::rename(&tmp, &archive).map_err(|e| e.to_string())?;
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
    // Older snapshots go; one being sent stays readable until closed.
    for e in std::fs::read_dir(snaps).map_err(|e| e.to_string())? {
        let p = e.map_err(|e| e.to_string())?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let ours = name.starts_with(&meta.snapshot_id);
        let finished = name.ends_with(".snap") || name.ends_with(".meta");
        if finished && !ours {
            let _ = std::fs::remove_file(&p);
        }
    }
    Ok(archive)
}

/// The newest whole snapshot: its meta and archive.
/// A snapshot's meta and the path of its archive.
type Stored = (SnapshotMeta<NodeId, Member>, PathBuf);

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
        let archive = p.with_extension("snap");
        if !archive.exists() {
            continue;
        }
        if best
            .as_ref()
            .is_none_or(|(b, _)| b.last_log_id < meta.last_log_id)
        {
            best = Some((meta, archive));
        }
    }
    Ok(best)
}

/// Removes the snapshots past `applied`: a received archive is kept as
/// this node's snapshot before its swap, so a crash before the swap's
/// commit point leaves one the database never took (a snapshot this node
/// built is never past its database's applied record: its checkpoint
/// flushed). openraft refuses to start with a snapshot past what it
/// counts committed, and the leader sends it again.
fn drop_uncommitted_installs(dir: &Path, applied: Option<LogId<NodeId>>) -> Result<(), String> {
    while let Some((meta, archive)) = newest(dir)? {
        if meta.last_log_id <= applied {
            break;
        }
        eprintln!(
            "sluice serve: snapshot {} was received but never swapped in (the database applied {:?}); removing it",
            meta.snapshot_id, applied
        );
        for p in [archive.with_extension("meta"), archive] {
            std::fs::remove_file(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    Ok(())
}

/// The node's directory, whose `raft` directory is `dir`.
fn node_dir(dir: &Path) -> Result<&Path, String> {
    dir.parent()
        .ok_or_else(|| format!("{}: no parent directory", dir.display()))
}

/// Installs a received archive: keeps it as this node's snapshot, unpacks
/// it (unless `unpacked` says it was, into the staging directory, while it
/// was received: the bytes of its files), and swaps it in as the node's
/// database ([`super::swap`]).
fn install(
    server: &Server,
    dir: &Path,
    lock: &Mutex<()>,
    meta: &SnapshotMeta<NodeId, Member>,
    received: &Path,
    unpacked: Result<(u64, PathBuf), String>,
    log: Option<&super::log::LogStore>,
) -> Result<Applied, String> {
    let snaps = snapshots_dir(dir);
    let archive = publish(&snaps, meta, |tmp| {
        std::fs::rename(received, tmp).map_err(|e| e.to_string())
    })?;
    let node_dir = node_dir(dir)?;
    let target = swap::install_dir(node_dir);
    let staging = swap::staging_dir(node_dir);
    let started = std::time::Instant::now();
    if target.exists() {
        std::fs::remove_dir_all(&target).map_err(|e| format!("{}: {e}", target.display()))?;
    }
    let (bytes, unpacked_dir) = match unpacked {
        Ok(b) => b,
        Err(why) => {
            eprintln!(
                "sluice serve: snapshot {} was not unpacked as it came ({why}); unpacking it now",
                meta.snapshot_id
            );
            std::fs::create_dir_all(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
            let d = staging.join(stamp().to_string());
            (snapfile::unpack(&archive, &d)?, d)
        }
    };
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
    let db_dir = super::db_dir(node_dir);
    let unpacked = started.elapsed();
    crash_point("unpacked", log, meta.last_log_id);
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
            if std::env::var(CRASH_ENV).ok().as_deref() == Some("commit") {
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
    eprintln!(
        "sluice serve: installed snapshot {} ({bytes} bytes of files): unpacked in {} ms, swapped in {} ms",
        meta.snapshot_id,
        unpacked.as_millis(),
        (started.elapsed() - unpacked).as_millis()
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
