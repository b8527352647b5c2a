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

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::ChangeMembers;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::{Member, NodeId, Replica, TypeConfig};

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
    vote: openraft::Vote<NodeId>,
    meta: openraft::SnapshotMeta<NodeId, Member>,
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
}

#[derive(Debug, Serialize, Deserialize)]
enum RpcReply {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    Join(Result<(), String>),
    Leave(Result<(), String>),
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

/// Encodes `v` as a frame (its length, then its bytes) and sends it: one
/// buffer, the length written in place once the body is encoded.
async fn write_frame<T: Serialize>(s: &mut TcpStream, v: &T) -> std::io::Result<()> {
    let mut buf = postcard::to_extend(v, vec![0u8; 4]).map_err(std::io::Error::other)?;
    let len = u32::try_from(buf.len() - 4)
        .ok()
        .filter(|&l| l <= MAX_FRAME_BYTES)
        .ok_or_else(|| std::io::Error::other("frame too large"))?;
    buf[..4].copy_from_slice(&len.to_le_bytes());
    s.write_all(&buf).await
}

async fn read_frame(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
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
            (
                me,
                rpc.entries.len(),
                rpc.prev_log_id,
                std::time::Instant::now(),
            )
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
            // An empty AppendEntries under the chunk's vote is the
            // leader's heartbeat: no entries, no previous entry to match
            // (it truncates nothing), no commit index.
            let beat = |vote| AppendEntriesRequest {
                vote,
                prev_log_id: None,
                entries: Vec::new(),
                leader_commit: None,
            };
            if c.vote.is_committed() {
                let _ = replica.raft.append_entries(beat(c.vote)).await;
            }
            // The last chunk's answer waits for the install (unpacking
            // and the swap: 8.6 s for 1.4 GB), and the leader sends this
            // follower nothing meanwhile: its timer ran out and it stood
            // for election during the install, three terms in a row,
            // deposing the leader once it answered. So while it installs,
            // the heartbeat goes on here every heartbeat interval under
            // the chunk's vote (a newer vote refuses it). The cost: this
            // node refuses other candidates until the install ends, so a
            // leader that dies meanwhile is replaced that much later.
            let keep_alive = (c.done && c.vote.is_committed()).then(|| {
                let (raft, vote, every) = (replica.raft.clone(), c.vote, replica.heartbeat);
                tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(every).await;
                        let _ = raft.append_entries(beat(vote)).await;
                    }
                })
            });
            let got = super::failover::tracing()
                .then(|| (c.offset, c.done, c.data.len(), std::time::Instant::now()));
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
    }
}

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
