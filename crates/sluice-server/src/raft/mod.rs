//! A replicated shard: `sluice serve` nodes form one Raft group on
//! openraft 0.9, and the keyspace is its state machine
//! (`docs/design.md`, "Replication", has the protocol and its reasons).
//!
//! - The log lives in segment files of its own ([`logfile`]), synced per
//!   append; the vote and the committed id in the node's database under
//!   the `r` tag ([`log`]).
//! - An entry is a write command or a whole `EXEC` with the leader's
//!   clock; applying it runs the command and writes, in the same unsynced
//!   batch, the applied log id ([`sm`]), so recovery re-applies exactly the
//!   entries missing from the engine's prefix of history.
//! - Snapshots are checkpoints, kept as directories and sent file by file
//!   as one archive's bytes ([`snapfile`]), streamed on a connection of
//!   their own ([`net`]).
//! - Nodes talk length-prefixed postcard frames over TCP ([`net`]).
//! - A follower that sees its leader's process gone stands for election
//!   at once ([`failover`]).

pub mod batch;
pub mod failover;
pub mod log;
pub mod logfile;
pub mod logstate;
pub mod logsync;
pub mod logtail;
pub mod net;
pub mod sm;
pub mod snapfile;
pub mod stages;
pub mod swap;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{Raft, ServerState};
use serde::{Deserialize, Serialize};

use crate::server::Server;

/// The node's id in the group. Never reused: see [`sm::Applied::ids`].
pub type NodeId = u64;

/// Where a member listens: Raft traffic and Redis clients.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub raft_addr: String,
    pub redis_addr: String,
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "raft {} redis {}", self.raft_addr, self.redis_addr)
    }
}

/// One log entry's command: a write command, or the commands of an
/// `EXEC`, with what makes applying them the same on every node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// The leader's clock when it proposed the entry: expiries (`SET EX`,
    /// `EXPIRE`) and expired reads are decided by it, not by each node's.
    pub now_ms: u64,
    /// Reply in RESP3 (the client said `HELLO 3`).
    pub resp3: bool,
    /// An `EXEC`: the reply is an array of the commands' replies.
    pub multi: bool,
    #[serde(with = "args")]
    pub cmds: Vec<Vec<bytes::Bytes>>,
}
/// `Request::cmds` through serde with each argument as one byte string
/// (`serialize_bytes`) instead of a sequence of `u8`s, which serde visits
/// a byte at a time. postcard writes both the same way (a varint length,
/// then the bytes), so the log's records and the messages do not change.
mod args {
    use serde::de::{Deserialize, Deserializer, SeqAccess, Visitor};
    use serde::ser::{Serialize, SerializeSeq, Serializer};

    struct Arg<'a>(&'a [u8]);

    impl Serialize for Arg<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }

    struct Cmd<'a>(&'a [::bytes::Bytes]);

    impl Serialize for Cmd<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut seq = s.serialize_seq(Some(self.0.len()))?;
            for a in self.0 {
                seq.serialize_element(&Arg(a))?;
            }
            seq.end()
        }
    }

    pub fn serialize<S: Serializer>(cmds: &[Vec<::bytes::Bytes>], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(cmds.len()))?;
        for c in cmds {
            seq.serialize_element(&Cmd(c))?;
        }
        seq.end()
    }

    struct Buf(Vec<u8>);

    struct BufVisitor;

    impl<'de> Visitor<'de> for BufVisitor {
        type Value = Buf;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a byte string")
        }

        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Buf, E> {
            Ok(Buf(v.to_vec()))
        }

        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Buf, E> {
            Ok(Buf(v))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Buf, A::Error> {
            let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(b) = seq.next_element::<u8>()? {
                v.push(b);
            }
            Ok(Buf(v))
        }
    }

    impl<'de> Deserialize<'de> for Buf {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Buf, D::Error> {
            d.deserialize_byte_buf(BufVisitor)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<Vec<::bytes::Bytes>>, D::Error> {
        let cmds: Vec<Vec<Buf>> = Deserialize::deserialize(d)?;
        Ok(cmds
            .into_iter()
            .map(|c| c.into_iter().map(|a| a.0.into()).collect())
            .collect())
    }

    /// One `Vec<u8>` as a byte string (`#[serde(with = "args::bytes")]`).
    pub mod bytes {
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(v)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
            Ok(super::Buf::deserialize(d)?.0)
        }
    }
}

/// The reply of an applied entry, RESP-encoded for the client that sent it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Reply(pub Vec<u8>);

openraft::declare_raft_types!(
    /// The group's types. An entry holds the write requests that arrived
    /// together (one or more, in order), encoded once ([`batch`]); its
    /// response, their replies.
    pub TypeConfig:
        D = batch::Batch,
        R = Vec<Reply>,
        NodeId = NodeId,
        Node = Member,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = sm::SnapFile,
);

pub type SluiceRaft = Raft<TypeConfig>;

/// Defaults, named so that docs and code agree.
pub const DEFAULT_HEARTBEAT_MS: u64 = 250;
pub const DEFAULT_ELECTION_MIN_MS: u64 = 1000;
pub const DEFAULT_ELECTION_MAX_MS: u64 = 2000;
/// How long the leader waits for each frame of a snapshot stream to be
/// taken, and for the stream's answer, which comes once the follower
/// unpacked and swapped the snapshot in (9 s for 1.6 GB here); when this
/// ran out first (it was 2 s), the leader sent the whole snapshot again.
pub const INSTALL_SNAPSHOT_TIMEOUT_MS: u64 = 120_000;
/// Entries between snapshots; the log keeps this many more after one.
pub const DEFAULT_SNAPSHOT_ENTRIES: u64 = 20_000;
/// Bytes of log records after the last snapshot that make a snapshot too,
/// however few entries they are (an entry carries up to
/// [`BATCH_MAX_BYTES`]: 20,000 of them would be 20 GB of log).
pub const DEFAULT_SNAPSHOT_LOG_BYTES: u64 = 1 << 30;
/// Bytes of log records up to the last snapshot the log keeps at most
/// (for followers a little behind, which then need no snapshot): with
/// [`DEFAULT_SNAPSHOT_LOG_BYTES`], the log on disk stays under the sum
/// of the two, plus a segment and an entry.
pub const DEFAULT_LOG_KEEP_BYTES: u64 = 1 << 30;
/// Log records applied after the newest snapshot beyond which a follower
/// to be sent a snapshot gets a fresh one instead, which carries them as
/// files rather than leaving them to the log (`sm::StateMachine::far_behind`).
pub const DEFAULT_FRESH_SNAPSHOT_BYTES: u64 = 64 << 20;
/// How often a node checks its log's bytes against those bounds.
pub const LOG_BYTES_CHECK: Duration = Duration::from_millis(500);
/// A write not committed in this long answers `-TRYAGAIN` (a leader cut
/// off from its quorum never acknowledges; the client learns it in time).
pub const DEFAULT_WRITE_TIMEOUT_MS: u64 = 10_000;
/// Requests in one entry at most, and their bytes: every entry costs a
/// log sync on each node, so entries carry every write that arrived
/// during the sync before (the engine's group commit, one level up).
pub const BATCH_MAX_REQUESTS: usize = 1024;
pub const BATCH_MAX_BYTES: usize = 1 << 20;
/// Entries in one AppendEntries message at most. openraft 0.9 gives the
/// message the heartbeat interval to be appended and synced by the
/// follower and resends it whole when that runs out: with its default of
/// 300 entries (of up to [`BATCH_MAX_BYTES`] each) a follower behind never
/// caught up under pipelined load, and the group kept electing. 16 (up to
/// 16 MiB) since entries are copied whole instead of re-encoded request by
/// request; at 4 a follower after a snapshot took the log at ~25 MB/s.
pub const MAX_ENTRIES_PER_APPEND: u64 = 16;
/// Entries proposed and not yet answered at once.
pub const PROPOSALS_IN_FLIGHT: usize = 4;
/// How long the proposer waits for the leader's last append to be synced
/// before it takes the next entry's requests anyway (see [`proposer`]).
pub const APPEND_WAIT: Duration = Duration::from_millis(5);

/// How long a new node keeps asking to be admitted while no member answers.
pub const JOIN_RETRY_MS: u64 = 60_000;

/// The Raft settings of `sluice serve --raft-id N --raft-addr HOST:PORT`.
#[derive(Debug, Clone)]
pub struct RaftConfig {
    pub id: NodeId,
    /// Where this node listens for the group (and how others reach it).
    pub addr: String,
    /// A member's Raft address to ask for admission; none: a node without
    /// a log starts a new group of itself.
    pub join: Option<String>,
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    pub snapshot_entries: u64,
    /// See [`DEFAULT_SNAPSHOT_LOG_BYTES`].
    pub snapshot_log_bytes: u64,
    /// See [`DEFAULT_LOG_KEEP_BYTES`].
    pub log_keep_bytes: u64,
    /// See [`DEFAULT_FRESH_SNAPSHOT_BYTES`] (`u64::MAX`: never).
    pub fresh_snapshot_bytes: u64,
    /// See [`DEFAULT_WRITE_TIMEOUT_MS`]; also bounds a read barrier.
    pub write_timeout_ms: u64,
    /// Whether a confirmed read-index round lets the leader answer reads
    /// without another for [`RaftConfig::lease_ms`] (off: every read
    /// waits for a round).
    pub read_lease: bool,
}

impl RaftConfig {
    pub fn new(id: NodeId, addr: impl Into<String>) -> RaftConfig {
        RaftConfig {
            id,
            addr: addr.into(),
            join: None,
            heartbeat_ms: DEFAULT_HEARTBEAT_MS,
            election_min_ms: DEFAULT_ELECTION_MIN_MS,
            election_max_ms: DEFAULT_ELECTION_MAX_MS,
            snapshot_entries: DEFAULT_SNAPSHOT_ENTRIES,
            snapshot_log_bytes: DEFAULT_SNAPSHOT_LOG_BYTES,
            log_keep_bytes: DEFAULT_LOG_KEEP_BYTES,
            fresh_snapshot_bytes: DEFAULT_FRESH_SNAPSHOT_BYTES,
            write_timeout_ms: DEFAULT_WRITE_TIMEOUT_MS,
            read_lease: true,
        }
    }

    /// The read lease: half the shortest election timeout. openraft's
    /// followers refuse to vote for `election_max_ms` after they last
    /// heard from their leader, so the lease leaves more than three
    /// quarters of that span for clocks running at different rates.
    pub fn lease_ms(&self) -> u64 {
        if self.read_lease {
            self.election_min_ms / 2
        } else {
            0
        }
    }

    fn openraft(&self) -> Result<openraft::Config, String> {
        let c = openraft::Config {
            cluster_name: "sluice".into(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_min_ms,
            election_timeout_max: self.election_max_ms,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(self.snapshot_entries),
            max_in_snapshot_log_to_keep: self.snapshot_entries,
            snapshot_max_chunk_size: snapfile::CHUNK_BYTES,
            install_snapshot_timeout: INSTALL_SNAPSHOT_TIMEOUT_MS,
            max_payload_entries: MAX_ENTRIES_PER_APPEND,
            ..Default::default()
        };
        c.validate().map_err(|e| format!("raft settings: {e}"))
    }
}

/// Where a node keeps its Raft files besides the database: snapshots.
pub fn raft_dir(dir: &std::path::Path) -> PathBuf {
    dir.join("raft")
}

/// Where a node's engine lives under `--dir`.
pub fn db_dir(dir: &std::path::Path) -> PathBuf {
    dir.join("db")
}

/// How a node opens its engine: the preset's options, with unsynced writes
/// left out of the engine's journal (`docs/design.md`, "Replication",
/// "One write-ahead log"): the Raft log holds every applied entry durably,
/// and the applied record, written in each entry's batch, reaches the
/// disk with the rest of the batch when its memtable is flushed. The vote
/// is written synced, so it is journaled.
pub fn db_options(preset: sluicedb::Preset) -> sluicedb::Options {
    sluicedb::Options::preset(preset).skip_journal_unless_synced(true)
}

/// This node's part of the group, shared by its connections.
pub struct Replica {
    pub id: NodeId,
    pub raft: SluiceRaft,
    pub me: Member,
    /// The node's database (the log and the state machine).
    pub(crate) db: Arc<crate::dbslot::DbSlot>,
    /// Links this node drops, as a partition would (tests).
    pub blocked: Arc<net::Blocked>,
    pub write_timeout: Duration,
    proposals: tokio::sync::mpsc::UnboundedSender<Pending>,
    /// Reads waiting for the next read-index round.
    reads: tokio::sync::mpsc::UnboundedSender<ReadWaiter>,
    lease: Arc<Lease>,
    /// Standing for election because the leader's process is gone
    /// ([`failover`]).
    pub(crate) standing: std::sync::atomic::AtomicBool,
    /// Candidates' last log ids, for the same ([`failover`]).
    pub(crate) candidacies: Arc<failover::Candidacies>,
    pub(crate) heartbeat: Duration,
    /// Snapshot streams begun on this node: a stream whose number is no
    /// longer the last is given up ([`net`]).
    pub(crate) snapshot_streams: std::sync::atomic::AtomicU64,
    /// Where a test cuts this node's snapshot streams short.
    #[cfg(feature = "fault-points")]
    pub(crate) stream_faults: Arc<net::StreamFaults>,
    /// Time per stage ([`stages`]).
    pub stages: Arc<stages::Stages>,
    pub(crate) rpc_stop: tokio::sync::watch::Sender<bool>,
    /// The log store: `CONFIG SET appendfsync` reaches its sync thread
    /// here, and tests its hooks.
    pub(crate) log: log::LogStore,
    /// Where a test holds this node's next snapshot install.
    #[cfg(feature = "fault-points")]
    pub(crate) install_gate: Arc<sm::InstallGate>,
}

/// Why the group could not run a command; the client's error line.
pub fn moved(addr: &str) -> String {
    format!("MOVED 0 {addr}")
}

/// A stale read while this node installs a snapshot (what a Redis
/// replica answers while it loads the leader's data).
pub const INSTALLING: &str = "LOADING the node is installing a snapshot of the group";

pub const NO_LEADER: &str = "CLUSTERDOWN The cluster is down: no leader is known";

impl Replica {
    /// The leader's Redis address, if one is known.
    pub fn leader_redis_addr(&self) -> Option<String> {
        let m = self.raft.metrics().borrow().clone();
        let leader = m.current_leader?;
        m.membership_config
            .membership()
            .get_node(&leader)
            .map(|n| n.redis_addr.clone())
    }

    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().state == ServerState::Leader
    }

    /// Proposes a request and waits for it to be committed by a quorum and
    /// applied here (in an entry with the requests that arrived with it);
    /// returns its reply, or the error line to answer.
    pub async fn write(&self, req: Request) -> Result<Vec<u8>, String> {
        self.propose(req)
            .await
            .unwrap_or_else(|_| Err(STOPPING.to_owned()))
    }

    /// Queues a request for the log and returns where its reply will come.
    /// Requests queued one after another by one caller are proposed, and
    /// so applied, in that order: a connection pipelines its writes by
    /// queueing them all before it waits for the first reply.
    pub fn propose(&self, req: Request) -> tokio::sync::oneshot::Receiver<WriteResult> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Err(e) = self.proposals.send((req, tx, std::time::Instant::now())) {
            let _ = e.0 .1.send(Err(STOPPING.to_owned()));
        }
        rx
    }

    /// Clears a linearizable read on this node: under a valid lease at
    /// once, else by a read-index round shared with every read waiting
    /// for one (see [`reader`]); a node that does not lead answers the
    /// redirect.
    pub async fn read_barrier(&self) -> Result<(), String> {
        if self.lease.valid(&self.raft) {
            self.stages.lease_reads.add(Duration::ZERO);
            return Ok(());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.reads.send(tx).is_err() {
            return Err(STOPPING.to_owned());
        }
        rx.await.unwrap_or_else(|_| Err(STOPPING.to_owned()))
    }

    /// A snapshot of what `ROLE`, `INFO replication` and `sluice cluster
    /// status` show.
    pub fn status(&self) -> Status {
        let m = self.raft.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let members = membership
            .nodes()
            .map(|(id, n)| (*id, (n.clone(), voters.contains(id))))
            .collect();
        let matched = m
            .replication
            .as_ref()
            .map(|r| {
                r.iter()
                    .map(|(id, l)| (*id, l.map_or(0, |l| l.index)))
                    .collect()
            })
            .unwrap_or_default();
        Status {
            id: self.id,
            state: m.state,
            term: m.current_term,
            leader: m.current_leader,
            last_log_index: m.last_log_index.unwrap_or(0),
            applied_index: m.last_applied.map_or(0, |l| l.index),
            snapshot_index: m.snapshot.map(|l| l.index),
            purged_index: m.purged.map(|l| l.index),
            log_fsync: self.log.fsync_name(),
            members,
            matched,
        }
    }

    /// `appendfsync` for this node's log from now on (`CONFIG SET`; the
    /// keyspace itself never syncs on a replicated shard: "One
    /// write-ahead log" in `docs/design.md`).
    pub fn set_fsync(&self, mode: crate::Fsync) {
        self.log.set_fsync(mode);
    }
}

/// The group as one node sees it.
#[derive(Debug, Clone)]
pub struct Status {
    pub id: NodeId,
    pub state: ServerState,
    pub term: u64,
    pub leader: Option<NodeId>,
    pub last_log_index: u64,
    pub applied_index: u64,
    pub snapshot_index: Option<u64>,
    pub purged_index: Option<u64>,
    /// When this node's log acknowledges an append: `always` (synced) or
    /// `everysec` (written; synced once a second).
    pub log_fsync: &'static str,
    /// Every member: where it listens, and whether it votes.
    pub members: BTreeMap<NodeId, (Member, bool)>,
    /// On the leader: the last index each member holds.
    pub matched: BTreeMap<NodeId, u64>,
}

impl Status {
    pub fn role(&self) -> &'static str {
        match self.state {
            ServerState::Leader => "leader",
            ServerState::Candidate => "candidate",
            ServerState::Follower => "follower",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        }
    }

    /// Human-readable lines (`sluice cluster status`, `INFO replication`).
    pub fn lines(&self) -> Vec<String> {
        let mut v = vec![
            format!("raft_node_id:{}", self.id),
            format!("raft_state:{}", self.role()),
            format!("raft_term:{}", self.term),
            format!(
                "raft_leader:{}",
                self.leader.map_or("none".to_owned(), |l| l.to_string())
            ),
            format!("raft_last_log_index:{}", self.last_log_index),
            format!("raft_applied_index:{}", self.applied_index),
            format!(
                "raft_snapshot_index:{}",
                self.snapshot_index.map_or(-1, |i| i as i64)
            ),
            format!(
                "raft_purged_index:{}",
                self.purged_index.map_or(-1, |i| i as i64)
            ),
            format!("raft_log_fsync:{}", self.log_fsync),
        ];
        for (id, (m, voter)) in &self.members {
            let lag = self.matched.get(id).map_or("-1".to_owned(), |i| {
                (self.last_log_index.saturating_sub(*i)).to_string()
            });
            v.push(format!(
                "raft_member_{id}:raft={},redis={},voter={},lag={lag}",
                m.raft_addr,
                m.redis_addr,
                u8::from(*voter)
            ));
        }
        v
    }
}

/// A write's reply (RESP bytes) or the error line to answer.
pub type WriteResult = Result<Vec<u8>, String>;

/// A request waiting to be proposed, where its reply goes, and when it
/// was proposed.
type Pending = (
    Request,
    tokio::sync::oneshot::Sender<WriteResult>,
    std::time::Instant,
);

const STOPPING: &str = "CLUSTERDOWN the node is stopping";

/// The error line for a client of a node that does not lead.
fn not_leader(raft: &SluiceRaft, me: &Member, leader: Option<&Member>) -> String {
    let known = leader.map(|m| m.redis_addr.clone()).or_else(|| {
        let m = raft.metrics().borrow().clone();
        let l = m.current_leader?;
        m.membership_config
            .membership()
            .get_node(&l)
            .map(|n| n.redis_addr.clone())
    });
    match known {
        Some(a) if a != me.redis_addr => moved(&a),
        _ => NO_LEADER.to_owned(),
    }
}

fn request_bytes(r: &Request) -> usize {
    r.cmds.iter().flatten().map(|a| a.len() + 8).sum::<usize>() + 16
}

/// Gathers the write requests of all connections into entries: takes the
/// first waiting, then every other one waiting (up to a bound), proposes
/// them as one entry, and answers each. At most [`PROPOSALS_IN_FLIGHT`]
/// entries wait for their commit at once; meanwhile requests gather.
/// Each entry is synced on every node, so an entry handed over while
/// the sync before it still runs would only wait for the next sync,
/// holding what arrived until then: the next entry's requests are taken
/// once a group of the leader's log syncs completed since the last
/// hand-over (or after [`APPEND_WAIT`]), so each sync carries everything
/// that arrived during the one before.
/// Entries are handed to openraft here, one after another, so the log
/// holds requests in the order they were queued (a connection's pipelined
/// writes stay in order); only the waits for their replies run apart.
async fn proposer(
    raft: SluiceRaft,
    me: Member,
    timeout: Duration,
    stages: Arc<stages::Stages>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Pending>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(PROPOSALS_IN_FLIGHT));
    let mut appended = stages.appended.subscribe();
    let mut handed_at: Option<u64> = None;
    while let Some(first) = rx.recv().await {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        if let Some(n) = handed_at {
            let waited = std::time::Instant::now();
            let _ = tokio::time::timeout(APPEND_WAIT, appended.wait_for(|a| *a > n)).await;
            stages.append_wait.add(waited.elapsed());
        }
        let mut bytes = request_bytes(&first.0);
        let mut batch = vec![first];
        while batch.len() < BATCH_MAX_REQUESTS && bytes < BATCH_MAX_BYTES {
            match rx.try_recv() {
                Ok(p) => {
                    bytes += request_bytes(&p.0);
                    batch.push(p);
                }
                Err(_) => break,
            }
        }
        let handed = std::time::Instant::now();
        for p in &batch {
            stages.queue.add(handed.saturating_duration_since(p.2));
            stages.requests.add(Duration::ZERO);
        }
        let (reqs, txs): (Vec<Request>, Vec<_>) = batch.into_iter().map(|(r, t, _)| (r, t)).unzip();
        let entry = match batch::Batch::encode(&reqs, bytes) {
            Ok(entry) => entry,
            Err(e) => {
                for tx in txs {
                    let _ = tx.send(Err(format!("ERR {e}")));
                }
                continue;
            }
        };
        drop(reqs);
        handed_at = Some(*appended.borrow());
        let submitted = raft.client_write_ff(entry).await;
        let (raft, me, stages) = (raft.clone(), me.clone(), stages.clone());
        tokio::spawn(async move {
            let err = match submitted {
                Err(e) => format!("CLUSTERDOWN {e}"),
                Ok(reply) => match tokio::time::timeout(timeout, reply).await {
                    Ok(Ok(Ok(resp))) if resp.data.len() == txs.len() => {
                        stages.commit.add(handed.elapsed());
                        for (tx, reply) in txs.into_iter().zip(resp.data) {
                            let _ = tx.send(Ok(reply.0));
                        }
                        drop(permit);
                        return;
                    }
                    Ok(Ok(Ok(_))) => "CLUSTERDOWN an entry's replies went missing".to_owned(),
                    Err(_) => "TRYAGAIN the write was not committed in time".to_owned(),
                    Ok(Err(_)) => STOPPING.to_owned(),
                    Ok(Ok(Err(ClientWriteError::ForwardToLeader(f)))) => {
                        not_leader(&raft, &me, f.leader_node.as_ref())
                    }
                    Ok(Ok(Err(e))) => format!("CLUSTERDOWN {e}"),
                },
            };
            for tx in txs {
                let _ = tx.send(Err(err.clone()));
            }
            drop(permit);
        });
    }
}

/// A read waiting for a read-index round, and where its outcome goes.
type ReadWaiter = tokio::sync::oneshot::Sender<Result<(), String>>;

/// The leader's read lease: until `until`, in the term `term`, no other
/// node can have been elected, so this node's state holds every write
/// acknowledged before now (`docs/design.md`, "Reads").
#[derive(Default)]
pub struct Lease {
    /// (term, end); none: no lease.
    held: Mutex<Option<(u64, std::time::Instant)>>,
    /// How long a lease lasts from the start of the round that took it;
    /// zero: never (every read needs a round).
    span: Duration,
}

impl Lease {
    fn new(span: Duration) -> Lease {
        Lease {
            held: Mutex::new(None),
            span,
        }
    }

    /// Whether a read may run now without a round: the lease has not run
    /// out, and openraft still sees this node leading in the lease's term.
    fn valid(&self, raft: &SluiceRaft) -> bool {
        let Some((term, until)) = *self.held.lock() else {
            return false;
        };
        if std::time::Instant::now() >= until {
            return false;
        }
        let m = raft.metrics();
        let m = m.borrow();
        m.state == ServerState::Leader && m.current_term == term
    }

    /// A round started at `started` in `term` was confirmed by a quorum.
    fn renew(&self, term: u64, started: std::time::Instant) {
        if self.span.is_zero() {
            return;
        }
        let until = started + self.span;
        let mut h = self.held.lock();
        if h.is_none_or(|(t, u)| t != term || u < until) {
            *h = Some((term, until));
        }
    }
}

/// Runs read-index rounds: takes every read waiting, confirms leadership
/// with a quorum once for all of them (openraft's `ensure_linearizable`:
/// a heartbeat round, then a wait until this node applied what was
/// committed before it), and answers them all. Reads arriving during a
/// round wait for the next, so one round serves every read that waited at
/// its start. A confirmed round renews the lease from its start.
async fn reader(
    raft: SluiceRaft,
    me: Member,
    timeout: Duration,
    lease: Arc<Lease>,
    stages: Arc<stages::Stages>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<ReadWaiter>,
) {
    use openraft::error::CheckIsLeaderError;
    while let Some(first) = rx.recv().await {
        let mut waiting = vec![first];
        while let Ok(w) = rx.try_recv() {
            waiting.push(w);
        }
        let started = std::time::Instant::now();
        let term = raft.metrics().borrow().current_term;
        let r = match tokio::time::timeout(timeout, raft.ensure_linearizable()).await {
            Err(_) => Err("TRYAGAIN leadership was not confirmed in time".to_owned()),
            Ok(Ok(_)) => {
                stages.read_round.add(started.elapsed());
                lease.renew(term, started);
                Ok(())
            }
            Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)))) => {
                Err(not_leader(&raft, &me, f.leader_node.as_ref()))
            }
            Ok(Err(e)) => Err(format!("CLUSTERDOWN {e}")),
        };
        for w in waiting {
            let _ = w.send(r.clone());
        }
    }
}

/// `host:port` split for Redis's replies (`ROLE`, `INFO replication`).
pub fn host_port(addr: &str) -> (String, u16) {
    match addr.rsplit_once(':') {
        Some((h, p)) => (h.to_owned(), p.parse().unwrap_or(0)),
        None => (addr.to_owned(), 0),
    }
}

/// `INFO replication` on a replicated shard: Redis's fields (the leader
/// is `role:master`, its followers `slave0..`; a follower is `role:slave`
/// naming the leader), then the group's own.
pub fn info_replication(r: &Replica) -> String {
    use std::fmt::Write as _;
    let st = r.status();
    let mut s = String::from("# Replication\r\n");
    if st.state == ServerState::Leader {
        let others: Vec<_> = st.members.iter().filter(|(id, _)| **id != st.id).collect();
        let _ = write!(s, "role:master\r\nconnected_slaves:{}\r\n", others.len());
        for (i, (id, (m, _))) in others.into_iter().enumerate() {
            let (h, p) = host_port(&m.redis_addr);
            let off = st.matched.get(id).copied().unwrap_or(0);
            let lag = st.last_log_index.saturating_sub(off);
            let _ = write!(
                s,
                "slave{i}:ip={h},port={p},state=online,offset={off},lag={lag}\r\n"
            );
        }
        let _ = write!(s, "master_repl_offset:{}\r\n", st.applied_index);
    } else {
        let leader = r.leader_redis_addr();
        let (h, p) = leader.as_deref().map(host_port).unwrap_or_default();
        let _ = write!(
            s,
            "role:slave\r\nmaster_host:{h}\r\nmaster_port:{p}\r\nmaster_link_status:{}\r\nslave_repl_offset:{}\r\nslave_read_only:1\r\nconnected_slaves:0\r\n",
            if leader.is_some() { "up" } else { "down" },
            st.applied_index
        );
    }
    for line in st.lines().into_iter().chain(r.stages.lines()) {
        let _ = write!(s, "{line}\r\n");
    }
    s.push_str("\r\n");
    s
}

/// Starts this node's part of the group over `server`'s keyspace: opens
/// the log and state machine, listens on the Raft address, and either
/// starts a new group, asks to join one, or resumes.
pub async fn start(
    server: Arc<Server>,
    cfg: RaftConfig,
    dir: PathBuf,
    redis_addr: String,
    rpc_listener: std::net::TcpListener,
) -> Result<Arc<Replica>, String> {
    let db = server.ks.db_slot().clone();
    let fsync = server.config.read().appendfsync;
    let mut log_store = log::LogStore::open(db.clone(), &raft_dir(&dir), fsync)
        .map_err(|e| format!("raft log: {e}"))?;
    let stages = log_store.stages.clone();
    let fresh = log_store.is_empty();
    let mut sm = sm::StateMachine::open(server.clone(), raft_dir(&dir))
        .map_err(|e| format!("raft state: {e}"))?;
    sm.stages = stages.clone();
    sm.fresh_snapshot_bytes = cfg.fresh_snapshot_bytes;
    log_store.progress = sm.progress.clone();
    sm.log = Some(log_store.clone());
    let blocked = Arc::new(net::Blocked::default());
    let candidacies = Arc::new(failover::Candidacies::default());
    let stream_faults = Arc::new(net::StreamFaults::default());
    let network = net::Network {
        blocked: blocked.clone(),
        pool: Arc::new(net::Pool::default()),
        candidacies: candidacies.clone(),
        faults: stream_faults.clone(),
    };
    let config = Arc::new(cfg.openraft()?);
    let log_bytes = log_store.clone();
    let log_handle = log_store.clone();
    #[cfg(feature = "fault-points")]
    let install_gate = sm.gate.clone();
    let raft = Raft::new(cfg.id, config, network, log_store, sm)
        .await
        .map_err(|e| format!("starting raft: {e}"))?;
    tokio::spawn(log_bytes_policy(
        raft.clone(),
        log_bytes,
        cfg.snapshot_log_bytes,
        cfg.log_keep_bytes,
    ));
    let me = Member {
        raft_addr: cfg.addr.clone(),
        redis_addr,
    };
    let (rpc_stop, rpc_stopped) = tokio::sync::watch::channel(false);
    let (proposals, queued) = tokio::sync::mpsc::unbounded_channel();
    let write_timeout = Duration::from_millis(cfg.write_timeout_ms);
    tokio::spawn(failover::trace_roles(cfg.id, raft.clone()));
    tokio::spawn(proposer(
        raft.clone(),
        me.clone(),
        write_timeout,
        stages.clone(),
        queued,
    ));
    let lease = Arc::new(Lease::new(Duration::from_millis(cfg.lease_ms())));
    let (reads, read_queue) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(reader(
        raft.clone(),
        me.clone(),
        write_timeout,
        lease.clone(),
        stages.clone(),
        read_queue,
    ));
    let replica = Arc::new(Replica {
        id: cfg.id,
        raft: raft.clone(),
        me: me.clone(),
        db,
        blocked,
        write_timeout,
        proposals,
        reads,
        lease,
        standing: std::sync::atomic::AtomicBool::new(false),
        candidacies,
        stages,
        heartbeat: Duration::from_millis(cfg.heartbeat_ms),
        snapshot_streams: std::sync::atomic::AtomicU64::new(0),
        #[cfg(feature = "fault-points")]
        stream_faults,
        rpc_stop,
        log: log_handle,
        #[cfg(feature = "fault-points")]
        install_gate,
    });
    let listener = tokio::net::TcpListener::from_std(rpc_listener).map_err(|e| e.to_string())?;
    tokio::spawn(net::serve(replica.clone(), listener, rpc_stopped));
    if fresh {
        match &cfg.join {
            None => {
                let members = BTreeMap::from([(cfg.id, me)]);
                raft.initialize(members)
                    .await
                    .map_err(|e| format!("starting a new group: {e}"))?;
            }
            Some(addr) => {
                // Admission needs the leader to copy its state here,
                // through this node's RPC server, which runs already.
                let deadline = tokio::time::Instant::now() + Duration::from_millis(JOIN_RETRY_MS);
                loop {
                    match net::ask_to_join(addr, cfg.id, &me).await {
                        Ok(()) => {
                            // The leader committed the promotion; wait until
                            // this node applied it too, so that it starts a voter.
                            let id = cfg.id;
                            let voter = move |m: &openraft::RaftMetrics<NodeId, Member>| {
                                m.membership_config
                                    .membership()
                                    .voter_ids()
                                    .any(|v| v == id)
                            };
                            let wait = raft.wait(Some(Duration::from_millis(JOIN_RETRY_MS)));
                            if let Err(e) = wait.metrics(voter, "promoted").await {
                                stop(&replica).await;
                                return Err(format!("joining through {addr}: {e}"));
                            }
                            break;
                        }
                        Err(net::JoinError::Refused(e)) => {
                            stop(&replica).await;
                            return Err(format!("joining through {addr}: {e}"));
                        }
                        Err(net::JoinError::Retry(e)) => {
                            if tokio::time::Instant::now() >= deadline {
                                stop(&replica).await;
                                return Err(format!("joining through {addr}: {e}"));
                            }
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
            }
        }
    }
    Ok(replica)
}

/// The snapshot policy by bytes, beside openraft's by entries: every
/// [`LOG_BYTES_CHECK`], a snapshot once the records after the last one
/// reach `snapshot_bytes`, and a purge of the entries up to it beyond the
/// last `keep_bytes` of them. So the log on disk stays bounded however
/// large the entries. Ends when the core stops.
async fn log_bytes_policy(
    raft: SluiceRaft,
    log: log::LogStore,
    snapshot_bytes: u64,
    keep_bytes: u64,
) {
    let mut tick = tokio::time::interval(LOG_BYTES_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (snapshot, purged, applied, shut) = {
            let m = raft.metrics();
            let m = m.borrow();
            (
                m.snapshot.map(|l| l.index),
                m.purged.map(|l| l.index),
                m.last_applied.map(|l| l.index),
                m.state == ServerState::Shutdown || m.running_state.is_err(),
            )
        };
        if shut {
            return;
        }
        let applied_bytes = |from: u64, to: u64| log.record_bytes(from, to);
        if snapshot_due(snapshot, applied, snapshot_bytes, applied_bytes)
            && raft.trigger().snapshot().await.is_err()
        {
            return;
        }
        let Some(snapshot) = snapshot else { continue };
        if let Some(upto) = log.purge_keeping(snapshot, keep_bytes) {
            if purged.is_none_or(|p| p < upto) && raft.trigger().purge_log(upto).await.is_err() {
                return;
            }
        }
    }
}

/// Whether the byte policy takes a snapshot: once the records of the
/// entries applied after the last snapshot (`bytes(from, to)`: of entries
/// `from..to`) reach `snapshot_bytes`. A snapshot holds what was applied,
/// so entries not applied yet do not count: counting them, a node whose
/// applying lagged a GiB behind its log took a snapshot of its whole
/// database every check, each one ending where applying stood.
fn snapshot_due(
    snapshot: Option<u64>,
    applied: Option<u64>,
    snapshot_bytes: u64,
    bytes: impl Fn(u64, u64) -> u64,
) -> bool {
    let Some(applied) = applied else {
        return false;
    };
    if snapshot.is_some_and(|s| applied <= s) {
        return false;
    }
    bytes(snapshot.map_or(0, |i| i + 1), applied + 1) >= snapshot_bytes
}

/// `sluice cluster remove`: asks the member whose Raft address is `addr`
/// to remove member `id` from its group, and waits for the change.
pub fn remove_member(addr: &str, id: NodeId) -> Result<(), String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?
        .block_on(net::ask_to_remove(addr, id))
}

/// Stops the node's Raft part: its RPC server and its core.
pub async fn stop(replica: &Replica) {
    let _ = replica.rpc_stop.send(true);
    let _ = replica.raft.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::snapshot_due;

    /// Records of 1,000 bytes per entry.
    fn bytes(from: u64, to: u64) -> u64 {
        to.saturating_sub(from) * 1000
    }

    #[test]
    fn a_snapshot_is_due_by_the_bytes_applied_since_the_last() {
        // 10 entries applied since the snapshot at 100: 10,000 bytes.
        assert!(snapshot_due(Some(100), Some(110), 10_000, bytes));
        assert!(!snapshot_due(Some(100), Some(109), 10_000, bytes));
        // Nothing applied, or no snapshot yet and 5 entries applied.
        assert!(!snapshot_due(None, None, 1, bytes));
        assert!(snapshot_due(None, Some(4), 5_000, bytes));
    }

    /// Applying lags far behind the log: the log's bytes after the last
    /// snapshot are over the bound, but a snapshot would end where
    /// applying stands. None is due until applying itself passes the
    /// bound (before, one was taken every check).
    #[test]
    fn no_snapshot_over_and_over_while_applying_lags() {
        let last_log = 1_000_000;
        assert!(bytes(101, last_log + 1) >= 10_000);
        for applied in [100, 101, 105, 109] {
            assert!(
                !snapshot_due(Some(100), Some(applied), 10_000, bytes),
                "applied {applied}"
            );
        }
        assert!(snapshot_due(Some(100), Some(110), 10_000, bytes));
    }
}
