//! The log's syncs, off the Raft core: one thread makes appends durable
//! in the order they were written, a group at a time, and reports each.
//!
//! An append ([`super::log::LogStore`]) writes its records under the
//! log's lock and returns: the entries are readable at once by the
//! replication streams. Its segments to sync and its completion go to
//! [`Syncer::submit`]. The thread takes every append queued, syncs the
//! segments they wrote (each file once: appends that overlap share one
//! `fdatasync`), then, in order: `after` (the state file's synced index,
//! the proposer's wake-up), the durable index ([`Syncer::wait_durable`]),
//! and each append's completion (openraft's `LogFlushed` callback).
//!
//! Guarantees: an append's completion runs only once its records and
//! every record written before them are durable; completions run in the
//! order of the appends; after a failed sync every later completion fails
//! too (what a failed `fdatasync` left on the disk is not known), and the
//! durable index stops: waiters get the error.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use super::logfile::Syncs;

/// An append's completion: `Ok` once durable, or the sync's error.
pub type Done = Box<dyn FnOnce(Result<(), String>) + Send>;

/// Run after each group's sync with the last index it made durable.
pub type After = Box<dyn Fn(u64) -> Result<(), String> + Send + Sync>;

struct Job {
    syncs: Syncs,
    last: u64,
    done: Done,
    queued: Instant,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// The thread holds a group it took and has not reported yet.
    busy: bool,
    stop: bool,
    failed: Option<String>,
    /// Test hooks (the `fault-points` feature): syncs wait while `hold`
    /// is set; with `fail` set the next group fails as a failed sync would.
    hold: bool,
    fail: bool,
}

/// How far the log is durable: entries below `upto` (an index plus one;
/// 0: none known), or the error that stopped the syncs.
#[derive(Clone, Debug, Default)]
pub struct Durable {
    pub upto: u64,
    pub failed: Option<String>,
}

struct Shared {
    q: Mutex<Queue>,
    cv: Condvar,
    durable: tokio::sync::watch::Sender<Durable>,
    after: After,
    stages: Arc<super::stages::Stages>,
}

/// The sync thread and its queue; dropping it lets the thread finish
/// what is queued and joins it.
pub struct Syncer {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Syncer {
    /// Starts the thread; entries below `durable_upto` are durable
    /// already (the log as opened, synced).
    pub fn start(
        durable_upto: u64,
        after: After,
        stages: Arc<super::stages::Stages>,
    ) -> Result<Syncer, String> {
        let (durable, _) = tokio::sync::watch::channel(Durable {
            upto: durable_upto,
            failed: None,
        });
        let shared = Arc::new(Shared {
            q: Mutex::new(Queue::default()),
            cv: Condvar::new(),
            durable,
            after,
            stages,
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("raft-log-sync".into())
            .spawn(move || run(&s))
            .map_err(|e| format!("raft log: starting the sync thread: {e}"))?;
        Ok(Syncer {
            shared,
            thread: Some(thread),
        })
    }

    /// Queues the sync of an append whose records up to entry `last` are
    /// written; `done` runs once they are durable. Appends must be
    /// submitted in log order (the log's lock orders them).
    pub fn submit(&self, syncs: Syncs, last: u64, done: Done) {
        let mut q = self.shared.q.lock();
        if let Some(e) = q.failed.clone() {
            drop(q);
            done(Err(e));
            return;
        }
        q.jobs.push_back(Job {
            syncs,
            last,
            done,
            queued: Instant::now(),
        });
        self.shared.cv.notify_all();
    }

    /// Blocks until every append submitted is durable and reported (a
    /// truncation or a purge then sees no sync in flight); the error of a
    /// failed sync.
    pub fn drain(&self) -> Result<(), String> {
        let mut q = self.shared.q.lock();
        while !q.jobs.is_empty() || q.busy {
            self.shared.cv.wait(&mut q);
        }
        match &q.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Waits until entry `index` is durable; the error of a failed sync.
    pub async fn wait_durable(&self, index: u64) -> Result<(), String> {
        let mut rx = self.shared.durable.subscribe();
        let d = rx
            .wait_for(|d| d.upto > index || d.failed.is_some())
            .await
            .map_err(|e| format!("raft log: sync thread gone: {e}"))?;
        match &d.failed {
            Some(e) if d.upto <= index => Err(e.clone()),
            _ => Ok(()),
        }
    }

    /// Entries from `since` on were cut (a truncation, after [`Syncer::drain`]):
    /// those appended again there are not durable until synced.
    pub fn lower_durable(&self, since: u64) {
        self.shared
            .durable
            .send_modify(|d| d.upto = d.upto.min(since));
    }

    /// How far the log is durable now.
    pub fn durable(&self) -> Durable {
        self.shared.durable.borrow().clone()
    }

    /// Test hook: while held, no sync runs (appends are written and
    /// readable, none is reported durable).
    #[cfg(any(test, feature = "fault-points"))]
    pub fn hold(&self, on: bool) {
        self.shared.q.lock().hold = on;
        self.shared.cv.notify_all();
    }

    /// Test hook: the next group's sync fails.
    #[cfg(any(test, feature = "fault-points"))]
    pub fn fail_next(&self) {
        self.shared.q.lock().fail = true;
        self.shared.cv.notify_all();
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.shared.q.lock().stop = true;
        self.shared.cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(s: &Shared) {
    loop {
        let mut q = s.q.lock();
        loop {
            let ready = !q.jobs.is_empty() && !q.hold;
            if ready {
                break;
            }
            if q.stop {
                // Held jobs are left unreported: their callbacks are
                // dropped, which openraft takes for a failed flush.
                return;
            }
            s.cv.wait(&mut q);
        }
        let group: Vec<Job> = q.jobs.drain(..).collect();
        q.busy = true;
        let inject = std::mem::take(&mut q.fail);
        drop(q);

        let mut syncs = Syncs::none();
        let mut dones = Vec::with_capacity(group.len());
        let mut last = 0;
        let mut oldest = Instant::now();
        for j in group {
            syncs.absorb(j.syncs);
            last = j.last;
            oldest = oldest.min(j.queued);
            dones.push(j.done);
        }
        let r = if inject {
            Err("raft log: sync failed (injected by a test)".to_string())
        } else {
            syncs.run().and_then(|()| (s.after)(last))
        };
        s.stages.sync.add(oldest.elapsed());
        match &r {
            Ok(()) => s.durable.send_modify(|d| d.upto = d.upto.max(last + 1)),
            Err(e) => {
                s.q.lock().failed = Some(e.clone());
                s.durable.send_modify(|d| d.failed = Some(e.clone()));
            }
        }
        for done in dones {
            done(r.clone());
        }
        let mut q = s.q.lock();
        q.busy = false;
        if let Some(e) = q.failed.clone() {
            // Whatever was queued meanwhile fails too.
            for j in q.jobs.drain(..) {
                (j.done)(Err(e.clone()));
            }
        }
        drop(q);
        s.cv.notify_all();
    }
}
