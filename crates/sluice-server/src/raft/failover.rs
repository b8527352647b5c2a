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
//! the leader's Raft address; a refused connection, or one accepted and
//! reset at once (the process was being torn down: [`gone`]), means no
//! process listens there (on a machine that is up), so it starts an
//! election. A candidate's vote is not a leader's, so candidates ignore
//! each other's leases: every follower that saw the death stands once
//! (and they split the votes), and one heartbeat later the survivor with
//! the longest log stands again, in a term the others, having stood once,
//! grant. Each survivor tells which one that is from the vote requests of
//! the first round, which carry every candidate's last log id
//! ([`Candidacies`]): the longest log, ties to the lowest id (the lowest
//! id alone would be refused whenever the other held an entry more). A
//! connection that is accepted and held, or not answered (the machine is
//! down), changes nothing: the election timeout still covers those.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use openraft::{LogId, ServerState};
use parking_lot::Mutex;

use super::{NodeId, Replica};

/// `SLUICE_RAFT_TRACE=1` logs every step of a failover to stderr, each
/// with the wall clock in ms (to line nodes' logs up).
pub fn tracing() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("SLUICE_RAFT_TRACE").is_some_and(|v| v == "1"))
}

/// One line of the failover trace, when on.
pub fn trace(id: NodeId, what: std::fmt::Arguments<'_>) {
    if tracing() {
        eprintln!("{} raft node {id}: {what}", crate::store::now_ms());
    }
}

/// Logs this node's role changes (state, term, leader, last log) while
/// tracing is on.
pub async fn trace_roles(id: NodeId, raft: super::SluiceRaft) {
    if !tracing() {
        return;
    }
    let mut rx = raft.metrics();
    let mut seen = None;
    loop {
        let now = {
            let m = rx.borrow_and_update();
            (
                m.state,
                m.current_term,
                m.current_leader,
                m.last_log_index,
                m.vote.committed,
            )
        };
        if seen != Some(now) {
            let (state, term, leader, last, committed) = now;
            trace(
                id,
                format_args!(
                    "{state:?} term {term} leader {leader:?} last log {last:?} vote committed {committed}"
                ),
            );
            seen = Some(now);
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// The last log id each candidate announced, and when: from the vote
/// requests this node received and the ones it sent (its own). Read
/// after a death to decide which survivor stands again.
#[derive(Default)]
pub struct Candidacies {
    seen: Mutex<HashMap<NodeId, Announced>>,
}

/// When a candidate asked for votes, and its last log id then.
type Announced = (Instant, Option<LogId<NodeId>>);

impl Candidacies {
    /// `candidate` asked for votes with `last` as its last log id.
    pub fn note(&self, candidate: NodeId, last: Option<LogId<NodeId>>) {
        self.seen.lock().insert(candidate, (Instant::now(), last));
    }

    /// Whether `me` should stand again after the first round of a failover
    /// that began at `since` among `survivors`: unless another survivor
    /// that stood since then announced a longer log (or as long a log and
    /// a lower id). A survivor not heard from counts as longer if its id
    /// is lower (the rule before any log is known: the lowest id stands).
    fn stand_again(&self, me: NodeId, survivors: &[NodeId], since: Instant) -> bool {
        let seen = self.seen.lock();
        let Some(&(_, mine)) = seen.get(&me).filter(|(at, _)| *at >= since) else {
            return false;
        };
        survivors.iter().filter(|&&s| s != me).all(|s| {
            match seen.get(s).filter(|(at, _)| *at >= since) {
                Some(&(_, theirs)) => mine > theirs || (mine == theirs && me < *s),
                None => me < *s,
            }
        })
    }
}

/// How long a probe of the leader's address may take.
const PROBE: Duration = Duration::from_millis(500);

/// How long an accepted probe waits to be reset before it counts the
/// node as alive (a live node waits for a request and sends nothing).
const PROBE_HOLD: Duration = Duration::from_millis(100);

/// Whether no process serves `addr` any more, with what was seen: "gone:
/// ..." when the connection is refused, or accepted and then reset or
/// closed at once. A process being killed closes its connections before
/// its listening socket, so a probe in that gap is accepted by the kernel
/// and reset when the listener closes; taking that for a live node is
/// what left failovers to the election timeouts (2-5 s) before.
async fn gone(addr: &str) -> String {
    use tokio::io::AsyncReadExt;
    match tokio::time::timeout(PROBE, tokio::net::TcpStream::connect(addr)).await {
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => "gone: refused".into(),
        // Reset during the handshake: the same gap, seen sooner.
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {
            format!("gone: reset while connecting ({e})")
        }
        Ok(Ok(mut s)) => {
            let mut b = [0u8; 1];
            match tokio::time::timeout(PROBE_HOLD, s.read(&mut b)).await {
                Ok(Ok(0)) => "gone: accepted, then closed".into(),
                Ok(Err(e)) => format!("gone: accepted, then {e}"),
                Ok(Ok(_)) => "alive: it answered".into(),
                Err(_) => "alive: accepted and held".into(),
            }
        }
        Ok(Err(e)) => format!("unknown: {e}"),
        Err(_) => "unknown: no answer".into(),
    }
}

/// A connection from `leader` (the last node that sent entries on it)
/// closed: if it is this node's leader and its address refuses
/// connections, stand for election (see the module's text).
pub async fn connection_closed(replica: &Replica, leader: NodeId) {
    let m = replica.raft.metrics().borrow().clone();
    let id = replica.id;
    trace(
        id,
        format_args!(
            "connection from {leader} closed; {:?}, leader {:?}",
            m.state, m.current_leader
        ),
    );
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
    let gone = gone(&addr).await;
    trace(id, format_args!("probed {addr}: {gone}"));
    if !gone.starts_with("gone") {
        return;
    }
    if replica.standing.swap(true, Ordering::SeqCst) {
        trace(id, format_args!("already standing"));
        return;
    }
    let survivors: Vec<NodeId> = membership.voter_ids().filter(|&v| v != leader).collect();
    let since = Instant::now();
    trace(id, format_args!("standing"));
    let _ = replica.raft.trigger().elect().await;
    tokio::time::sleep(replica.heartbeat).await;
    let m = replica.raft.metrics().borrow().clone();
    let undecided = m.state != ServerState::Leader && m.current_leader.is_none_or(|l| l == leader);
    if undecided && replica.candidacies.stand_again(id, &survivors, since) {
        trace(id, format_args!("standing again (the longest log)"));
        let _ = replica.raft.trigger().elect().await;
    }
    // One try per death: let the election settle before another.
    tokio::time::sleep(replica.heartbeat * 4).await;
    replica.standing.store(false, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn log(term: u64, index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    /// Exactly one of two survivors stands again: the one with the longer
    /// log whatever its id, the lower id when the logs are alike; one not
    /// heard from since the death counts by its id only.
    #[test]
    fn the_survivor_with_the_longest_log_stands_again() {
        let since = Instant::now();
        let c = Candidacies::default();
        c.note(2, log(3, 10));
        c.note(3, log(3, 11));
        assert!(!c.stand_again(2, &[2, 3], since));
        assert!(c.stand_again(3, &[2, 3], since));

        let c = Candidacies::default();
        c.note(2, log(3, 11));
        c.note(3, log(3, 11));
        assert!(c.stand_again(2, &[2, 3], since));
        assert!(!c.stand_again(3, &[2, 3], since));

        // A later term outranks a longer log.
        let c = Candidacies::default();
        c.note(2, log(4, 5));
        c.note(3, log(3, 11));
        assert!(c.stand_again(2, &[2, 3], since));
        assert!(!c.stand_again(3, &[2, 3], since));

        // Node 2 was heard from before the death only.
        let c = Candidacies::default();
        c.note(2, log(3, 20));
        let after = Instant::now();
        c.note(3, log(3, 11));
        assert!(
            !c.stand_again(3, &[2, 3], after),
            "node 2 not heard from since: the lower id decides"
        );
        assert!(
            !c.stand_again(2, &[2, 3], after),
            "node 2 did not stand since"
        );
        let c4 = Candidacies::default();
        c4.note(4, log(3, 1));
        assert!(c4.stand_again(4, &[4, 5], since));
    }
}
