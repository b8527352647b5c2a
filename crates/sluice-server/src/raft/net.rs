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

#[derive(Debug, Serialize, Deserialize)]
enum Rpc {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// A node asks to be admitted: first as a learner, then as a voter.
    Join {
        id: NodeId,
        member: Member,
    },
}

#[derive(Debug, Serialize, Deserialize)]
enum RpcReply {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    Join(Result<(), String>),
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

async fn write_frame(s: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&l| l <= MAX_FRAME_BYTES)
        .ok_or_else(|| std::io::Error::other("frame too large"))?;
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(body);
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

/// One request and its reply on `conn`, connecting first if needed.
async fn call(conn: &mut Option<TcpStream>, addr: &str, req: &Rpc) -> std::io::Result<RpcReply> {
    if conn.is_none() {
        let s = TcpStream::connect(addr).await?;
        let _ = s.set_nodelay(true);
        *conn = Some(s);
    }
    let Some(s) = conn.as_mut() else {
        return Err(std::io::Error::other("not connected"));
    };
    let body = postcard::to_stdvec(req).map_err(std::io::Error::other)?;
    let r = async {
        write_frame(s, &body).await?;
        let raw = read_frame(s).await?;
        postcard::from_bytes::<RpcReply>(&raw).map_err(std::io::Error::other)
    }
    .await;
    if r.is_err() {
        *conn = None;
    }
    r
}

/// Makes a client per target node.
pub struct Network {
    pub blocked: Arc<Blocked>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &Member) -> Peer {
        Peer {
            target,
            addr: node.raft_addr.clone(),
            blocked: self.blocked.clone(),
            conn: None,
        }
    }
}

/// A client of one node.
pub struct Peer {
    target: NodeId,
    addr: String,
    blocked: Arc<Blocked>,
    conn: Option<TcpStream>,
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
        match tokio::time::timeout(option.hard_ttl(), call(&mut self.conn, &self.addr, &req)).await
        {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(_) => {
                self.conn = None;
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
        match self.send(Rpc::Append(rpc), &option).await? {
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
        match self.send(Rpc::Snapshot(rpc), &option).await? {
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
            let applied = super::sm::read_applied(&replica.db)?;
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

async fn handle(replica: &Replica, req: Rpc) -> RpcReply {
    match req {
        Rpc::Append(r) => RpcReply::Append(replica.raft.append_entries(r).await),
        Rpc::Vote(r) => RpcReply::Vote(replica.raft.vote(r).await),
        Rpc::Snapshot(r) => RpcReply::Snapshot(replica.raft.install_snapshot(r).await),
        Rpc::Join { id, member } => RpcReply::Join(admit(replica, id, member).await),
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
            loop {
                let raw = tokio::select! {
                    r = read_frame(&mut s) => r,
                    _ = stopped.wait_for(|s| *s) => return,
                };
                let Ok(raw) = raw else { return };
                let Ok(req) = postcard::from_bytes::<Rpc>(&raw) else {
                    return;
                };
                let reply = handle(&replica, req).await;
                let Ok(body) = postcard::to_stdvec(&reply) else {
                    return;
                };
                if write_frame(&mut s, &body).await.is_err() {
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
    }
}
