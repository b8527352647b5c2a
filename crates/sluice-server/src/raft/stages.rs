//! Where a replicated request spends its time, per stage, summed since
//! the node started: `INFO replication` shows each stage's count and mean
//! (`raft_stage_<name>:count=..,mean_us=..`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One stage's count and total time.
#[derive(Default)]
pub struct Stage {
    count: AtomicU64,
    nanos: AtomicU64,
}

impl Stage {
    pub fn add(&self, took: Duration) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.nanos
            .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
    }

    /// (count, mean in µs).
    pub fn read(&self) -> (u64, f64) {
        let n = self.count.load(Ordering::Relaxed);
        let t = self.nanos.load(Ordering::Relaxed);
        (
            n,
            if n == 0 {
                0.0
            } else {
                t as f64 / n as f64 / 1e3
            },
        )
    }
}

/// The stages, in the order a write passes them.
#[derive(Default)]
pub struct Stages {
    /// A write request from its proposal to its entry's hand-over to
    /// openraft (waiting for an entry slot).
    pub queue: Stage,
    /// An entry from its hand-over to its reply: append and sync here,
    /// replication, the followers' syncs, commit and apply.
    pub commit: Stage,
    /// A log append's write (every node): its records written and
    /// readable; the sync runs after it, off the Raft core.
    pub append: Stage,
    /// A group of log appends synced together, from the oldest one's
    /// write to the sync's end (every node; on the leader it overlaps the
    /// entries' replication: `raft::logsync`).
    pub sync: Stage,
    /// Applying one entry to the keyspace.
    pub apply: Stage,
    /// The proposer's wait, before it takes an entry's requests, for the
    /// leader's append of the entry before (see `raft::proposer`).
    pub append_wait: Stage,
    /// Requests carried by entries (count: requests; mean: unused).
    pub requests: Stage,
    /// A read-index round (heartbeats to a quorum, then the wait for
    /// this node to apply what was committed before it).
    pub read_round: Stage,
    /// Reads answered under the lease without a round.
    pub lease_reads: Stage,
    /// Groups of log appends acknowledged so far: synced together under
    /// `appendfsync always`, each at once under `everysec` (the proposer
    /// waits on it: see `raft::proposer`).
    pub appended: tokio::sync::watch::Sender<u64>,
}

impl Stages {
    pub fn lines(&self) -> Vec<String> {
        let all = [
            ("queue", &self.queue),
            ("append_wait", &self.append_wait),
            ("commit", &self.commit),
            ("append", &self.append),
            ("sync", &self.sync),
            ("apply", &self.apply),
            ("read_round", &self.read_round),
        ];
        let mut v: Vec<String> = all
            .iter()
            .map(|(name, s)| {
                let (n, mean) = s.read();
                format!("raft_stage_{name}:count={n},mean_us={mean:.0}")
            })
            .collect();
        v.push(format!("raft_requests_proposed:{}", self.requests.read().0));
        v.push(format!("raft_lease_reads:{}", self.lease_reads.read().0));
        v
    }
}
