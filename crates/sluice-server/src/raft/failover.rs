//! Elections at once when the leader's process is gone, instead of after
//! the election timeout (`docs/design.md`, "Failover").
//!
//! openraft 0.9's followers refuse to vote for `election_max_ms` after
//! they last heard from their leader (its lease), and a follower's
//! election timer fires before that (between `election_min_ms` and
//! `election_max_ms`): the first election after a leader died is refused
//! by the other follower, and only a second one, a timeout later, wins.
//! With the defaults that took 2 to 4 s.
//!
//! A follower learns of the death sooner: the dead process's connections
//! close. When a connection the leader sent on closes, the follower tries
//! the leader's Raft address; a refused connection means no process
//! listens there (on a machine that is up), so it starts an election. A
//! candidate's vote is not a leader's, so candidates ignore each other's
//! leases: every follower that saw the death stands once, and then the
//! voter with the lowest id stands again one heartbeat later, in a term
//! the others, having stood once, grant (if its log is as long as
//! theirs; else a timeout decides, as before). A connection that is
//! accepted, or not answered (the machine is down), changes nothing: the
//! election timeout still covers those.

use std::sync::atomic::Ordering;
use std::time::Duration;

use openraft::ServerState;

use super::{NodeId, Replica};

/// How long a probe of the leader's address may take.
const PROBE: Duration = Duration::from_millis(500);

/// A connection from `leader` (the last node that sent entries on it)
/// closed: if it is this node's leader and its address refuses
/// connections, stand for election (see the module's text).
pub async fn connection_closed(replica: &Replica, leader: NodeId) {
    let m = replica.raft.metrics().borrow().clone();
    if m.current_leader != Some(leader) || leader == replica.id || m.state == ServerState::Leader {
        return;
    }
    let membership = m.membership_config.membership();
    if !membership.voter_ids().any(|v| v == replica.id) {
        return;
    }
    let Some(addr) = membership.get_node(&leader).map(|n| n.raft_addr.clone()) else {
        return;
    };
    match tokio::time::timeout(PROBE, tokio::net::TcpStream::connect(&addr)).await {
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
        _ => return,
    }
    if replica.standing.swap(true, Ordering::SeqCst) {
        return;
    }
    let lowest = membership
        .voter_ids()
        .filter(|&v| v != leader)
        .min()
        .is_some_and(|v| v == replica.id);
    let _ = replica.raft.trigger().elect().await;
    if lowest {
        tokio::time::sleep(replica.heartbeat).await;
        let m = replica.raft.metrics().borrow().clone();
        if m.state != ServerState::Leader && m.current_leader.is_none_or(|l| l == leader) {
            let _ = replica.raft.trigger().elect().await;
        }
    }
    // One try per death: let the election settle before another.
    tokio::time::sleep(replica.heartbeat * 4).await;
    replica.standing.store(false, Ordering::SeqCst);
}
