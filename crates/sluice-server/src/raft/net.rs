//! The group's transport: length-prefixed postcard frames over TCP,
//! one request and its reply at a time per connection
//! (`docs/format/raft-rpc.md`):
//!
//! ```text
//! len u32 LE | postcard(Rpc)        request
//! len u32 LE | postcard(RpcReply)   its reply
//! ```
//!
//! Each openraft network client keeps one connection and reconnects after
//! an error. [`Blocked`] drops the links to chosen nodes, as a partition
//! would, without touching the sockets (tests).
//!
//! A snapshot goes on a connection of its own as one stream
//! ([`Peer::full_snapshot`]): a head, then the archive's bytes in frames
//! sent back to back (the leader reads the next while the socket carries
//! the last, the follower unpacks them as they arrive), then one answer
//! once the follower installed it. openraft 0.9's own transport waited for
//! each 4 MiB chunk's answer before it read the next, so the two sides'
//! per-byte work never overlapped (`docs/design.md`, "Snapshots").

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{
    Fatal, InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed,
    StreamingError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{ChangeMembers, Snapshot, SnapshotMeta, Vote};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::{snapfile, Member, NodeId, Replica, TypeConfig};

/// The largest frame accepted: a snapshot chunk or an append batch with
/// room to spare.
pub const MAX_FRAME_BYTES: u32 = 256 << 20;
/// How long a join may take: the new node is copied a snapshot first.
const JOIN_TIMEOUT: Duration = Duration::from_secs(120);

/// openraft's `InstallSnapshotRequest` as it goes on the wire: the same
/// fields in the same order, the chunk as one byte string (serde's
/// derived `Vec<u8>` is a sequence visited a byte at a time, which capped
/// a snapshot's transfer at tens of MB/s). postcard writes both alike.
#[derive(Debug, Serialize, Deserialize)]
struct SnapshotChunk {
    vote: Vote<NodeId>,
    meta: SnapshotMeta<NodeId, Member>,
    offset: u64,
    #[serde(with = "super::args::bytes")]
    data: Vec<u8>,
    done: bool,
}

impl From<InstallSnapshotRequest<TypeConfig>> for SnapshotChunk {
    fn from(r: InstallSnapshotRequest<TypeConfig>) -> SnapshotChunk {
        SnapshotChunk {
            vote: r.vote,
            meta: r.meta,
            offset: r.offset,
            data: r.data,
            done: r.done,
        }
    }
}

impl From<SnapshotChunk> for InstallSnapshotRequest<TypeConfig> {
    fn from(c: SnapshotChunk) -> InstallSnapshotRequest<TypeConfig> {
        InstallSnapshotRequest {
            vote: c.vote,
            meta: c.meta,
            offset: c.offset,
            data: c.data,
            done: c.done,
        }
    }
}

/// The head of a snapshot stream: what openraft hands `full_snapshot`
/// (the leader's vote, the snapshot's meta) and the archive's length. The
/// archive's bytes follow it on the same connection in raw frames
/// (`len u32 LE | bytes`, no postcard), `archive_len` bytes in all.
#[derive(Debug, Serialize, Deserialize)]
struct StreamHead {
    vote: Vote<NodeId>,
    meta: SnapshotMeta<NodeId, Member>,
    archive_len: u64,
}

#[derive(Debug, Serialize, Deserialize)]
enum Rpc {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(SnapshotChunk),
    /// A node asks to be admitted: first as a learner, then as a voter.
    Join {
        id: NodeId,
        member: Member,
    },
    /// An operator asks to remove a member (`sluice cluster remove`).
    Leave {
        id: NodeId,
    },
    /// A whole snapshot on this connection: the head, then the archive's
    /// frames; answered once, after the install (or sooner: refused).
    SnapshotStream(StreamHead),
}

#[derive(Debug, Serialize, Deserialize)]
enum RpcReply {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    Join(Result<(), String>),
    Leave(Result<(), String>),
    /// The follower's vote once the snapshot is installed; or, before the
    /// archive's end, a vote higher than the stream's (the stream is
    /// refused). An error: nothing was installed.
    SnapshotStream(Result<SnapshotResponse<NodeId>, String>),
}

/// Nodes whose links this node drops.
#[derive(Debug, Default)]
pub struct Blocked(Mutex<BTreeSet<NodeId>>);

impl Blocked {
    pub fn set(&self, ids: impl IntoIterator<Item = NodeId>) {
        *self.0.lock() = ids.into_iter().collect();
    }

    pub fn contains(&self, id: NodeId) -> bool {
        self.0.lock().contains(&id)
    }
}

/// Where a test cuts this node's snapshot streams short (the
/// `fault-points` feature; without it nothing is ever cut).
#[derive(Debug, Default)]
pub struct StreamFaults {
    /// Each stream sends at most this many bytes of its archive, then
    /// drops its connection.
    #[cfg(feature = "fault-points")]
    cut_after: Mutex<Option<u64>>,
    /// Streams cut so far.
    #[cfg(feature = "fault-points")]
    cuts: std::sync::atomic::AtomicU64,
}

impl StreamFaults {
    fn cut_at(&self) -> Option<u64> {
        #[cfg(feature = "fault-points")]
        return *self.cut_after.lock();
        #[cfg(not(feature = "fault-points"))]
        None
    }

    fn note_cut(&self) {
        #[cfg(feature = "fault-points")]
        self.cuts.fetch_add(1, Ordering::AcqRel);
    }

    /// Cuts every later stream after `bytes` of its archive (`None`: no
    /// more cuts).
    #[cfg(feature = "fault-points")]
    pub fn cut_after(&self, bytes: Option<u64>) {
        *self.cut_after.lock() = bytes;
    }

    /// Streams cut so far.
    #[cfg(feature = "fault-points")]
    pub fn cuts(&self) -> u64 {
        self.cuts.load(Ordering::Acquire)
    }
}

/// Encodes `v` as a frame (its length, then its bytes) and sends it: one
/// buffer, the length written in place once the body is encoded.
async fn write_frame<T: Serialize>(
    s: &mut (impl AsyncWrite + Unpin),
    v: &T,
) -> std::io::Result<()> {
    let mut buf = postcard::to_extend(v, vec![0u8; 4]).map_err(std::io::Error::other)?;
    let len = u32::try_from(buf.len() - 4)
        .ok()
        .filter(|&l| l <= MAX_FRAME_BYTES)
        .ok_or_else(|| std::io::Error::other("frame too large"))?;
    buf[..4].copy_from_slice(&len.to_le_bytes());
    s.write_all(&buf).await
}

async fn read_frame(s: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Vec<u8>> {
    let mut l = [0u8; 4];
    s.read_exact(&mut l).await?;
    let len = u32::from_le_bytes(l);
    if len > MAX_FRAME_BYTES {
        return Err(std::io::Error::other(format!("a frame of {len} bytes")));
    }
    let mut body = vec![0u8; len as usize];
    s.read_exact(&mut body).await?;
    Ok(body)
}

/// One request and its reply on `conn`, connecting first if needed. The
/// connection is held by this call while it runs: a call dropped halfway
/// (a timeout) drops the connection with it, so no later call reads the
/// reply meant for this one.
async fn call(conn: &mut Option<TcpStream>, addr: &str, req: &Rpc) -> std::io::Result<RpcReply> {
    let mut s = match conn.take() {
        Some(s) => s,
        None => {
            let s = TcpStream::connect(addr).await?;
            let _ = s.set_nodelay(true);
            s
        }
    };
    write_frame(&mut s, req).await?;
    let raw = read_frame(&mut s).await?;
    let reply = postcard::from_bytes::<RpcReply>(&raw).map_err(std::io::Error::other)?;
    *conn = Some(s);
    Ok(reply)
}

/// Idle connections to each node, kept by clients that are done with
/// them: openraft makes a client for every read-index round, and one
/// connection each would cost a connect per round.
#[derive(Debug, Default)]
pub struct Pool(Mutex<std::collections::HashMap<String, Vec<TcpStream>>>);

/// Idle connections kept per node.
const POOL_PER_NODE: usize = 8;

impl Pool {
    fn take(&self, addr: &str) -> Option<TcpStream> {
        self.0.lock().get_mut(addr).and_then(|v| v.pop())
    }

    fn put(&self, addr: &str, s: TcpStream) {
        let mut m = self.0.lock();
        let v = m.entry(addr.to_owned()).or_default();
        if v.len() < POOL_PER_NODE {
            v.push(s);
        }
    }
}

/// Makes a client per target node.
pub struct Network {
    pub blocked: Arc<Blocked>,
    pub pool: Arc<Pool>,
    /// Where this node's own vote requests are noted.
    pub candidacies: Arc<super::failover::Candidacies>,
    /// Where a test cuts snapshot streams.
    pub faults: Arc<StreamFaults>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &Member) -> Peer {
        Peer {
            target,
            addr: node.raft_addr.clone(),
            blocked: self.blocked.clone(),
            pool: self.pool.clone(),
            candidacies: self.candidacies.clone(),
            faults: self.faults.clone(),
            conn: None,
        }
    }
}

/// A client of one node.
pub struct Peer {
    target: NodeId,
    addr: String,
    blocked: Arc<Blocked>,
    pool: Arc<Pool>,
    candidacies: Arc<super::failover::Candidacies>,
    faults: Arc<StreamFaults>,
    conn: Option<TcpStream>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(s) = self.conn.take() {
            self.pool.put(&self.addr, s);
        }
    }
}

type RpcErr<E = RaftError<NodeId>> = RPCError<NodeId, Member, E>;

impl Peer {
    async fn send<E: std::error::Error>(
        &mut self,
        req: Rpc,
        option: &RPCOption,
    ) -> Result<RpcReply, RpcErr<E>> {
        if self.blocked.contains(self.target) {
            let e = std::io::Error::other("link dropped (partition)");
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        }
        let pooled = self.conn.is_none();
        if pooled {
            self.conn = self.pool.take(&self.addr);
        }
        let reused = self.conn.is_some();
        let deadline = tokio::time::Instant::now() + option.hard_ttl();
        let mut r = tokio::time::timeout_at(deadline, call(&mut self.conn, &self.addr, &req)).await;
        if pooled && reused && matches!(r, Ok(Err(_))) {
            // An idle connection the other end closed (it restarted):
            // once more on a new one.
            r = tokio::time::timeout_at(deadline, call(&mut self.conn, &self.addr, &req)).await;
        }
        match r {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(_) => {
                let e = std::io::Error::other("timed out");
                Err(RPCError::Unreachable(Unreachable::new(&e)))
            }
        }
    }

    fn unexpected<E: std::error::Error>(&self) -> RpcErr<E> {
        let e = std::io::Error::other("a reply of another kind");
        RPCError::Network(NetworkError::new(&e))
    }

    /// Sends `snapshot` as one stream on a connection of its own and
    /// returns the follower's answer (see [`StreamHead`]). The archive is
    /// read on a thread of its own, [`STREAM_READ_AHEAD`] chunks ahead of
    /// the socket; the follower's answer is read while the frames go, so
    /// a refusal stops the stream at once. Each frame's write and the
    /// final answer get `option`'s hard TTL (openraft's install timeout).
    /// Dropped (`cancel`: the leader's replication stream ended, a newer
    /// snapshot or term), it drops the connection, and the follower
    /// throws away what it unpacked.
    async fn stream_snapshot(
        &mut self,
        vote: Vote<NodeId>,
        snapshot: Snapshot<TypeConfig>,
        cancel: impl Future<Output = ReplicationClosed>,
        option: RPCOption,
    ) -> Result<SnapshotResponse<NodeId>, StreamingError<TypeConfig, Fatal<NodeId>>> {
        let io = |e: std::io::Error| StreamingError::Network(NetworkError::new(&e));
        let timed_out = |what: &str| io(std::io::Error::other(format!("{what}: timed out")));
        if self.blocked.contains(self.target) {
            let e = std::io::Error::other("link dropped (partition)");
            return Err(StreamingError::Unreachable(Unreachable::new(&e)));
        }
        let Snapshot { meta, snapshot } = snapshot;
        let packer = snapshot.into_packer().ok_or_else(|| {
            io(std::io::Error::other(
                "a snapshot being received is not sent",
            ))
        })?;
        let archive_len = packer.archive_len();
        let ttl = option.hard_ttl();
        let started = Instant::now();
        let s = match tokio::time::timeout(ttl, TcpStream::connect(&self.addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(StreamingError::Unreachable(Unreachable::new(&e))),
            Err(_) => return Err(timed_out("connecting")),
        };
        let _ = s.set_nodelay(true);
        let (mut rd, mut wr) = s.into_split();
        let cut = self.faults.cut_at().filter(|&c| c < archive_len);
        let (tx, mut chunks) = tokio::sync::mpsc::channel(STREAM_READ_AHEAD);
        let stop_at = cut.unwrap_or(archive_len);
        // Stops once `chunks` is dropped (the stream ended or was given up).
        let _reader = tokio::task::spawn_blocking(move || read_chunks(packer, stop_at, &tx));
        let head = Rpc::SnapshotStream(StreamHead {
            vote,
            meta: meta.clone(),
            archive_len,
        });
        let (blocked, target) = (self.blocked.clone(), self.target);
        let send = async {
            let frame = |r: Result<std::io::Result<()>, tokio::time::error::Elapsed>| {
                r.map_err(|_| std::io::Error::other("a frame's write timed out"))?
            };
            frame(tokio::time::timeout(ttl, write_frame(&mut wr, &head)).await)?;
            let mut frames = 0u64;
            while let Some(chunk) = chunks.recv().await {
                let chunk = chunk?;
                if blocked.contains(target) {
                    return Err(std::io::Error::other("link dropped (partition)"));
                }
                frame(tokio::time::timeout(ttl, write_raw_frame(&mut wr, &chunk)).await)?;
                frames += 1;
            }
            Ok::<_, std::io::Error>(frames)
        };
        let answer = async {
            let raw = read_frame(&mut rd).await?;
            match postcard::from_bytes::<RpcReply>(&raw).map_err(std::io::Error::other)? {
                RpcReply::SnapshotStream(r) => Ok::<_, std::io::Error>(r),
                _ => Err(std::io::Error::other("a reply of another kind")),
            }
        };
        let mut cancel = std::pin::pin!(cancel);
        let mut answer = std::pin::pin!(answer);
        let sent = tokio::select! {
            r = send => r,
            r = &mut answer => {
                // Before the archive's end: only a higher vote (a
                // refusal) or an error is a valid answer.
                return match r.map_err(io)? {
                    Ok(resp) if resp.vote > vote => Ok(resp),
                    Ok(_) => Err(io(std::io::Error::other(
                        "the follower answered before the archive's end",
                    ))),
                    Err(e) => Err(io(std::io::Error::other(e))),
                };
            }
            c = &mut cancel => return Err(StreamingError::Closed(c)),
        };
        let frames = sent.map_err(io)?;
        if cut.is_some() {
            // A test's cut: the connection goes with the archive unsent.
            self.faults.note_cut();
            return Err(io(std::io::Error::other(
                "the stream was cut (fault point)",
            )));
        }
        let sent_in = started.elapsed();
        let r = tokio::select! {
            r = tokio::time::timeout(ttl, &mut answer) => r,
            c = &mut cancel => return Err(StreamingError::Closed(c)),
        };
        let resp = r
            .map_err(|_| timed_out("the install's answer"))?
            .map_err(io)?
            .map_err(|e| io(std::io::Error::other(e)))?;
        eprintln!(
            "sluice serve: sent snapshot {} to node {} ({archive_len} bytes in {frames} frames) in {} ms, installed {} ms later",
            meta.snapshot_id,
            self.target,
            sent_in.as_millis(),
            (started.elapsed() - sent_in).as_millis()
        );
        Ok(resp)
    }
}

/// Chunks of an archive a snapshot stream's sender reads ahead of its
/// socket: one being read while one waits and one is written.
const STREAM_READ_AHEAD: usize = 2;

/// Reads `packer`'s archive up to `stop_at` in chunks of
/// [`snapfile::CHUNK_BYTES`] into `tx` (a thread's loop: it blocks while
/// the socket is behind). Stops early when the stream is gone.
fn read_chunks(
    mut packer: snapfile::Packer,
    stop_at: u64,
    tx: &tokio::sync::mpsc::Sender<std::io::Result<Vec<u8>>>,
) {
    while packer.position() < stop_at {
        let n = (stop_at - packer.position()).min(snapfile::CHUNK_BYTES) as usize;
        let mut buf = vec![0u8; n];
        let r = packer.read(&mut buf).and_then(|got| {
            if got == n {
                Ok(buf)
            } else {
                Err(std::io::Error::other("the snapshot's archive ended early"))
            }
        });
        let failed = r.is_err();
        if tx.blocking_send(r).is_err() || failed {
            return;
        }
    }
}

/// Sends `data` as one raw frame of a snapshot stream: its length, then
/// the bytes as they are (no copy into an encoding buffer).
async fn write_raw_frame(s: &mut (impl AsyncWrite + Unpin), data: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(data.len())
        .ok()
        .filter(|&l| l <= MAX_FRAME_BYTES)
        .ok_or_else(|| std::io::Error::other("frame too large"))?;
    s.write_all(&len.to_le_bytes()).await?;
    s.write_all(data).await
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcErr> {
        // Traced: what the leader sends each follower (heartbeats and
        // entries) and what comes back, to line up with the follower's
        // election timer around a snapshot install.
        let sent = super::failover::tracing().then(|| {
            let me = rpc.vote.leader_id().voted_for().unwrap_or_default();
            (me, rpc.entries.len(), rpc.prev_log_id, Instant::now())
        });
        let r = self.send(Rpc::Append(rpc), &option).await;
        if let Some((me, n, prev, at)) = sent {
            super::failover::trace(
                me,
                format_args!(
                    "append to {} ({n} entries after {prev:?}): {} in {} ms",
                    self.target,
                    match &r {
                        Ok(RpcReply::Append(Ok(a))) => format!("{a:?}"),
                        Ok(_) => "an error reply".to_owned(),
                        Err(e) => format!("{e}"),
                    },
                    at.elapsed().as_millis()
                ),
            );
        }
        match r? {
            RpcReply::Append(Ok(r)) => Ok(r),
            RpcReply::Append(Err(e)) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            _ => Err(self.unexpected()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RpcErr<RaftError<NodeId, InstallSnapshotError>>>
    {
        match self.send(Rpc::Snapshot(rpc.into()), &option).await? {
            RpcReply::Snapshot(Ok(r)) => Ok(r),
            RpcReply::Snapshot(Err(e)) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            _ => Err(self.unexpected()),
        }
    }

    /// A snapshot as one stream on a connection of its own, in place of
    /// openraft's one chunk per round trip ([`Peer::stream_snapshot`]).
    async fn full_snapshot(
        &mut self,
        vote: Vote<NodeId>,
        snapshot: Snapshot<TypeConfig>,
        cancel: impl Future<Output = ReplicationClosed> + openraft::OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<NodeId>, StreamingError<TypeConfig, Fatal<NodeId>>> {
        self.stream_snapshot(vote, snapshot, cancel, option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcErr> {
        if let Some(me) = rpc.vote.leader_id().voted_for() {
            self.candidacies.note(me, rpc.last_log_id);
        }
        match self.send(Rpc::Vote(rpc), &option).await? {
            RpcReply::Vote(Ok(r)) => Ok(r),
            RpcReply::Vote(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            _ => Err(self.unexpected()),
        }
    }
}

/// Why a join did not succeed.
#[derive(Debug)]
pub enum JoinError {
    /// The group said no (an id used before): asking again will not help.
    Refused(String),
    /// No answer, or no leader yet: ask again.
    Retry(String),
}

/// A refusal's reply starts with this.
const REFUSED: &str = "refused: ";

/// Asks the member at `addr` to admit this node; it forwards to the
/// leader. Returns once this node is a voter.
pub async fn ask_to_join(addr: &str, id: NodeId, member: &Member) -> Result<(), JoinError> {
    let mut conn = None;
    let req = Rpc::Join {
        id,
        member: member.clone(),
    };
    match tokio::time::timeout(JOIN_TIMEOUT, call(&mut conn, addr, &req)).await {
        Ok(Ok(RpcReply::Join(Ok(())))) => Ok(()),
        Ok(Ok(RpcReply::Join(Err(e)))) => match e.strip_prefix(REFUSED) {
            Some(why) => Err(JoinError::Refused(why.to_owned())),
            None => Err(JoinError::Retry(e)),
        },
        Ok(Ok(_)) => Err(JoinError::Retry("a reply of another kind".to_owned())),
        Ok(Err(e)) => Err(JoinError::Retry(format!("{addr}: {e}"))),
        Err(_) => Err(JoinError::Retry(format!(
            "{addr}: no answer in {JOIN_TIMEOUT:?}"
        ))),
    }
}

/// Admits `id` at the leader: a learner first (openraft copies it the log
/// or a snapshot), then a voter. The same member coming back is let in
/// again; an id the group ever admitted for another member is refused.
async fn admit(replica: &Replica, id: NodeId, member: Member) -> Result<(), String> {
    if !replica.is_leader() {
        let m = replica.raft.metrics().borrow().clone();
        let leader = m
            .current_leader
            .filter(|&l| l != replica.id)
            .and_then(|l| m.membership_config.membership().get_node(&l).cloned());
        return match leader {
            Some(l) => match Box::pin(ask_to_join(&l.raft_addr, id, &member)).await {
                Ok(()) => Ok(()),
                Err(JoinError::Refused(e)) => Err(format!("{REFUSED}{e}")),
                Err(JoinError::Retry(e)) => Err(e),
            },
            None => Err("no leader yet".to_owned()),
        };
    }
    let m = replica.raft.metrics().borrow().clone();
    let membership = m.membership_config.membership().clone();
    match membership.get_node(&id) {
        Some(n) if *n != member => {
            return Err(format!(
                "{REFUSED}node id {id} belongs to another member ({n}): node ids are never reused"
            ));
        }
        Some(_) if membership.voter_ids().any(|v| v == id) => return Ok(()),
        Some(_) => {}
        None => {
            let applied = super::sm::read_applied(&replica.db.get())?;
            if applied.ids.contains(&id) {
                return Err(format!(
                    "{REFUSED}node id {id} was a member before: node ids are never reused"
                ));
            }
            replica
                .raft
                .add_learner(id, member, true)
                .await
                .map_err(|e| format!("adding learner {id}: {e}"))?;
        }
    }
    replica
        .raft
        .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
        .await
        .map_err(|e| format!("promoting {id}: {e}"))?;
    Ok(())
}

/// Asks the member at `addr` (its Raft address) to remove member `id`
/// from the group; it forwards to the leader. Returns once the group's
/// membership without it is committed.
pub async fn ask_to_remove(addr: &str, id: NodeId) -> Result<(), String> {
    let mut conn = None;
    match tokio::time::timeout(JOIN_TIMEOUT, call(&mut conn, addr, &Rpc::Leave { id })).await {
        Ok(Ok(RpcReply::Leave(r))) => r,
        Ok(Ok(_)) => Err(format!("{addr}: a reply of another kind")),
        Ok(Err(e)) => Err(format!("{addr}: {e}")),
        Err(_) => Err(format!("{addr}: no answer in {JOIN_TIMEOUT:?}")),
    }
}

/// Removes member `id` at the leader: a voter by a joint-consensus
/// change, a learner at once; either leaves the membership, and its id
/// stays among those ever admitted, so it is never reused. The leader
/// itself is not removed (ask again once another leads).
async fn remove(replica: &Replica, id: NodeId) -> Result<(), String> {
    let m = replica.raft.metrics().borrow().clone();
    if !replica.is_leader() {
        let leader = m
            .current_leader
            .filter(|&l| l != replica.id)
            .and_then(|l| m.membership_config.membership().get_node(&l).cloned());
        return match leader {
            Some(l) => Box::pin(ask_to_remove(&l.raft_addr, id)).await,
            None => Err("no leader yet".to_owned()),
        };
    }
    let membership = m.membership_config.membership().clone();
    if membership.get_node(&id).is_none() {
        return Err(format!("node {id} is not a member"));
    }
    if id == replica.id {
        return Err(format!(
            "node {id} leads: it is not removed while it leads (stop it, or ask again once another leads)"
        ));
    }
    let voter = membership.voter_ids().any(|v| v == id);
    let change = if voter {
        if membership.voter_ids().count() < 2 {
            return Err(format!("node {id} is the last voter"));
        }
        ChangeMembers::RemoveVoters(BTreeSet::from([id]))
    } else {
        ChangeMembers::RemoveNodes(BTreeSet::from([id]))
    };
    replica
        .raft
        .change_membership(change, false)
        .await
        .map_err(|e| format!("removing {id}: {e}"))?;
    Ok(())
}

async fn handle(replica: &Replica, req: Rpc) -> RpcReply {
    match req {
        Rpc::Append(r) => {
            let got = super::failover::tracing().then_some((r.entries.len(), r.prev_log_id));
            let reply = replica.raft.append_entries(r).await;
            if let Some((n, prev)) = got {
                super::failover::trace(
                    replica.id,
                    format_args!("append ({n} entries after {prev:?}) answered {reply:?}"),
                );
            }
            RpcReply::Append(reply)
        }
        Rpc::Vote(r) => {
            if let Some(candidate) = r.vote.leader_id().voted_for() {
                replica.candidacies.note(candidate, r.last_log_id);
            }
            let asked = super::failover::tracing().then(|| r.clone());
            let reply = replica.raft.vote(r).await;
            if let Some(r) = asked {
                super::failover::trace(
                    replica.id,
                    format_args!(
                        "vote asked by {:?} (last log {:?}): {:?}",
                        r.vote, r.last_log_id, reply
                    ),
                );
            }
            RpcReply::Vote(reply)
        }
        Rpc::Snapshot(c) => {
            // openraft 0.9 sends a follower no heartbeat while it streams
            // it a snapshot (one replication stream per follower), and a
            // chunk does not reset the follower's election timer: a
            // transfer longer than the election timeout made the
            // follower stand and depose its leader (measured: 1.6 GB).
            // So each chunk beats the leader's heartbeat here.
            beat(&replica.raft, c.vote).await;
            // The last chunk's answer waits for the install (unpacking
            // and the swap: 8.6 s for 1.4 GB), and the leader sends this
            // follower nothing meanwhile: its timer ran out and it stood
            // for election during the install, three terms in a row,
            // deposing the leader once it answered. So while it installs,
            // the heartbeat goes on here ([`keep_alive`]).
            let keep_alive =
                (c.done && c.vote.is_committed()).then(|| keep_alive(replica, c.vote).0);
            let got = super::failover::tracing()
                .then(|| (c.offset, c.done, c.data.len(), Instant::now()));
            let reply = replica.raft.install_snapshot(c.into()).await;
            if let Some(t) = keep_alive {
                t.abort();
            }
            if let Some((offset, done, len, at)) = got {
                super::failover::trace(
                    replica.id,
                    format_args!(
                        "snapshot chunk at {offset} ({len} bytes, last {done}) answered in {} ms: {}",
                        at.elapsed().as_millis(),
                        if reply.is_ok() { "ok" } else { "error" }
                    ),
                );
            }
            RpcReply::Snapshot(reply)
        }
        Rpc::Join { id, member } => RpcReply::Join(admit(replica, id, member).await),
        Rpc::Leave { id } => RpcReply::Leave(remove(replica, id).await),
        Rpc::SnapshotStream(_) => {
            RpcReply::SnapshotStream(Err("a snapshot stream outside its connection".to_owned()))
        }
    }
}

/// An empty AppendEntries under `vote`, the leader's heartbeat: no
/// entries, no previous entry to match (it truncates nothing), no commit
/// index; it resets this node's election timer. Returns this node's vote
/// when it is higher than `vote` (the sender's leader is deposed). Nothing
/// is beaten under a vote not yet committed.
async fn beat(raft: &super::SluiceRaft, vote: Vote<NodeId>) -> Option<Vote<NodeId>> {
    if !vote.is_committed() {
        return None;
    }
    let req = AppendEntriesRequest {
        vote,
        prev_log_id: None,
        entries: Vec::new(),
        leader_commit: None,
    };
    match raft.append_entries(req).await {
        Ok(AppendEntriesResponse::HigherVote(v)) => Some(v),
        _ => None,
    }
}

/// Beats the leader's heartbeat under `vote` every heartbeat interval
/// while a snapshot is received or installed (the leader sends this node
/// nothing meanwhile), until the task is aborted or this node holds a
/// higher vote, which it then sends on the returned channel. The cost:
/// this node refuses other candidates until then, so a leader that dies
/// meanwhile is replaced that much later.
fn keep_alive(
    replica: &Replica,
    vote: Vote<NodeId>,
) -> (
    tokio::task::JoinHandle<()>,
    watch::Receiver<Option<Vote<NodeId>>>,
) {
    let (higher_tx, higher) = watch::channel(None);
    let (raft, every) = (replica.raft.clone(), replica.heartbeat);
    let task = tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            if let Some(v) = beat(&raft, vote).await {
                let _ = higher_tx.send(Some(v));
                return;
            }
        }
    });
    (task, higher)
}

/// How a snapshot stream ended on the receiving side.
struct StreamEnd {
    /// The answer to send, if any (none: the connection broke).
    reply: Option<RpcReply>,
    /// Whether every frame was read: otherwise the sender may still be
    /// sending, and its frames are read and dropped until it closes, so
    /// that the answer is not lost to a reset.
    whole: bool,
}

/// Receives a snapshot stream whose head came on `s`: its frames go to
/// the state machine's unpacker as they arrive ([`super::sm::SnapFile::push`],
/// on this task, blocking while the unpacking thread is behind, which
/// holds the sender back through the socket), then openraft installs it
/// under the stream's vote (`Raft::install_full_snapshot`, which checks
/// the vote again). While it runs, the leader's heartbeat is beaten here
/// every heartbeat interval under the stream's vote: openraft 0.9 sends a
/// follower nothing else while it streams it a snapshot, and without it
/// the follower stood for election during a long transfer or install and
/// deposed the leader (measured: `docs/experiments.md`). The cost: this
/// node refuses other candidates until the stream ends.
///
/// Nothing is installed unless the whole archive came: a stream cut
/// short (the connection broke, a newer stream began on this node, the
/// vote was found stale, the unpacking failed) drops what it unpacked.
async fn receive_stream(replica: &Replica, s: &mut TcpStream, head: StreamHead) -> StreamEnd {
    let StreamHead {
        vote,
        meta,
        archive_len,
    } = head;
    let end = |r, whole| StreamEnd {
        reply: Some(RpcReply::SnapshotStream(r)),
        whole,
    };
    if let Some(higher) = beat(&replica.raft, vote).await {
        return end(Ok(SnapshotResponse::new(higher)), false);
    }
    // A newer stream on this node supersedes this one.
    let stream = replica.snapshot_streams.fetch_add(1, Ordering::AcqRel) + 1;
    let mut data = match replica.raft.begin_receiving_snapshot().await {
        Ok(d) => d,
        Err(e) => return end(Err(format!("receiving a snapshot: {e}")), false),
    };
    // `higher` is set (once) when this node holds a higher vote.
    let (keep_alive, mut higher) = keep_alive(replica, vote);
    let started = Instant::now();
    let (mut taken, mut frames) = (0u64, 0u64);
    let failed = loop {
        if taken == archive_len {
            break None;
        }
        let frame = tokio::select! {
            f = read_frame(s) => f,
            Ok(()) = higher.changed() => {
                let v = (*higher.borrow()).unwrap_or_default();
                break Some(end(Ok(SnapshotResponse::new(v)), false));
            }
        };
        let Ok(frame) = frame else {
            // Cut short: nothing to answer on a broken connection.
            break Some(StreamEnd {
                reply: None,
                whole: false,
            });
        };
        if replica.snapshot_streams.load(Ordering::Acquire) != stream {
            break Some(end(Err("a newer snapshot stream began".to_owned()), false));
        }
        let len = frame.len() as u64;
        if taken + len > archive_len {
            break Some(end(Err("a frame past the archive's end".to_owned()), false));
        }
        if let Err(e) = tokio::task::block_in_place(|| data.push(frame)) {
            break Some(end(Err(e.to_string()), false));
        }
        taken += len;
        frames += 1;
    };
    let received_in = started.elapsed();
    if let Some(e) = failed {
        keep_alive.abort();
        // Its unpacking thread stops and its directory goes.
        tokio::task::block_in_place(|| drop(data));
        super::failover::trace(
            replica.id,
            format_args!(
                "snapshot stream {} given up after {taken} of {archive_len} bytes",
                meta.snapshot_id
            ),
        );
        return e;
    }
    let id = meta.snapshot_id.clone();
    let r = replica
        .raft
        .install_full_snapshot(
            vote,
            Snapshot {
                meta,
                snapshot: data,
            },
        )
        .await;
    keep_alive.abort();
    super::failover::trace(
        replica.id,
        format_args!(
            "snapshot stream {id}: {archive_len} bytes in {frames} frames received in {} ms, answered {} ms later: {}",
            received_in.as_millis(),
            (started.elapsed() - received_in).as_millis(),
            if r.is_ok() { "ok" } else { "error" }
        ),
    );
    end(r.map_err(|e| e.to_string()), true)
}

/// How long a refused stream's frames are read and dropped at most,
/// waiting for its sender to close.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves the group's requests until `stopped`.
pub async fn serve(
    replica: Arc<Replica>,
    listener: TcpListener,
    mut stopped: watch::Receiver<bool>,
) {
    while let Some((mut s, _)) = crate::conn::accept(&listener, &mut stopped).await {
        let _ = s.set_nodelay(true);
        let (replica, mut stopped) = (replica.clone(), stopped.clone());
        tokio::spawn(async move {
            // The leader that last sent on this connection: when it closes
            // (the process died), the leader may be gone.
            let mut from = None;
            loop {
                let raw = tokio::select! {
                    r = read_frame(&mut s) => r,
                    _ = stopped.wait_for(|s| *s) => return,
                };
                let Ok(raw) = raw else {
                    if let Some(leader) = from {
                        super::failover::connection_closed(&replica, leader).await;
                    }
                    return;
                };
                let Ok(req) = postcard::from_bytes::<Rpc>(&raw) else {
                    return;
                };
                if let Rpc::Append(a) = &req {
                    from = a.vote.leader_id().voted_for();
                }
                if let Rpc::SnapshotStream(head) = req {
                    // The connection carries this stream only.
                    let end = receive_stream(&replica, &mut s, head).await;
                    if let Some(reply) = end.reply {
                        if write_frame(&mut s, &reply).await.is_ok() && !end.whole {
                            let mut sink = vec![0u8; 64 << 10];
                            let drain =
                                async { while s.read(&mut sink).await.is_ok_and(|n| n > 0) {} };
                            let _ = tokio::time::timeout(DRAIN_TIMEOUT, drain).await;
                        }
                    }
                    return;
                }
                let reply = handle(&replica, req).await;
                if write_frame(&mut s, &reply).await.is_err() {
                    return;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of `docs/format/raft-rpc.md`.
    #[test]
    fn a_join_encodes_as_documented() {
        let req = Rpc::Join {
            id: 4,
            member: Member {
                raft_addr: "127.0.0.1:7004".into(),
                redis_addr: "127.0.0.1:6382".into(),
            },
        };
        let body = postcard::to_stdvec(&req).unwrap();
        let mut want = vec![0x03, 0x04, 0x0e];
        want.extend_from_slice(b"127.0.0.1:7004");
        want.push(0x0e);
        want.extend_from_slice(b"127.0.0.1:6382");
        assert_eq!(body, want);
        assert_eq!(body.len(), 32);
        let reply = postcard::to_stdvec(&RpcReply::Join(Ok(()))).unwrap();
        assert_eq!(reply, [0x03, 0x00]);
        let leave = postcard::to_stdvec(&Rpc::Leave { id: 2 }).unwrap();
        assert_eq!(leave, [0x04, 0x02]);
        let reply = postcard::to_stdvec(&RpcReply::Leave(Ok(()))).unwrap();
        assert_eq!(reply, [0x04, 0x00]);
    }
}
