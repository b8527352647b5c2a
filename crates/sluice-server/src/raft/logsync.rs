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
//! The node's `appendfsync` ([`Syncer::set_mode`]) says when an append
//! is acknowledged (its completion runs, and the acknowledged index,
//! [`Syncer::wait_acked`], passes it):
//! - `always`: once its records and every record written before them are
//!   durable, after the group's sync;
//! - `everysec` (and `no`, which the log takes for `everysec`: see
//!   `docs/design.md`, "The log's appendfsync"): at once, when submitted,
//!   unless an append before it still waits for its sync (completions
//!   stay in log order); the thread syncs what was written once its
//!   oldest unsynced append is [`EVERYSEC_INTERVAL`] old, at once when
//!   [`Syncer::drain`] asks (a truncation) or an `always` append waits,
//!   and before the thread ends (a clean stop).
//!
//! Guarantees, in every mode: the durable index ([`Syncer::wait_durable`],
//! the state file's synced index) only ever names synced records;
//! completions run in the order of the appends; after a failed sync every
//! later completion fails too (what a failed `fdatasync` left on the disk
//! is not known), and the durable index stops: waiters get the error.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::logfile::Syncs;
use crate::Fsync;

/// Under `everysec`, how old the oldest unsynced append gets before the
/// thread syncs: at most one sync per interval while writes go on.
pub const EVERYSEC_INTERVAL: Duration = Duration::from_secs(1);

/// An append's completion: `Ok` once durable, or the sync's error.
pub type Done = Box<dyn FnOnce(Result<(), String>) + Send>;

/// Run after each group's sync with the last index it made durable.
pub type After = Box<dyn Fn(u64) -> Result<(), String> + Send + Sync>;

struct Job {
    syncs: Syncs,
    last: u64,
    /// `None`: acknowledged when submitted (`everysec`).
    done: Option<Done>,
    queued: Instant,
}

struct Queue {
    jobs: VecDeque<Job>,
    /// The thread holds a group it took and has not reported yet.
    busy: bool,
    /// Jobs queued or in the thread's group whose completion waits for
    /// their sync: a later append is not acknowledged before them.
    unreported: usize,
    mode: Fsync,
    /// A caller waits in [`Syncer::drain`]: sync now, whatever the mode.
    urgent: bool,
    stop: bool,
    failed: Option<String>,
    /// Test hooks (the `fault-points` feature): syncs wait while `hold`
    /// is set; with `fail` set the next group fails as a failed sync would.
    hold: bool,
    fail: bool,
}

impl Queue {
    fn new(mode: Fsync) -> Queue {
        Queue {
            jobs: VecDeque::new(),
            busy: false,
            unreported: 0,
            mode,
            urgent: false,
            stop: false,
            failed: None,
            hold: false,
            fail: false,
        }
    }

    /// How long the thread may still wait before it syncs what is queued
    /// (`None`: nothing to sync, or held; zero: now).
    fn sync_in(&self) -> Option<Duration> {
        let oldest = self.jobs.front()?;
        if self.hold {
            return None;
        }
        if self.mode == Fsync::Always || self.unreported > 0 || self.urgent || self.stop {
            return Some(Duration::ZERO);
        }
        Some(EVERYSEC_INTERVAL.saturating_sub(oldest.queued.elapsed()))
    }
}

/// How far the log is durable: entries below `upto` (an index plus one;
/// 0: none known), how far appends were acknowledged to openraft (`acked`:
/// `upto` under `always`, past it under `everysec`), or the error that
/// stopped the syncs.
#[derive(Clone, Debug, Default)]
pub struct Durable {
    pub upto: u64,
    pub acked: u64,
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
        mode: Fsync,
        after: After,
        stages: Arc<super::stages::Stages>,
    ) -> Result<Syncer, String> {
        let (durable, _) = tokio::sync::watch::channel(Durable {
            upto: durable_upto,
            acked: durable_upto,
            failed: None,
        });
        let shared = Arc::new(Shared {
            q: Mutex::new(Queue::new(mode)),
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

    /// The node's `appendfsync` from now on (`CONFIG SET`); appends
    /// submitted before keep the mode they were submitted under.
    pub fn set_mode(&self, mode: Fsync) {
        self.shared.q.lock().mode = mode;
        self.shared.cv.notify_all();
    }

    pub fn mode(&self) -> Fsync {
        self.shared.q.lock().mode
    }

    /// Queues the sync of an append whose records up to entry `last` are
    /// written; `done` runs once it is acknowledged (see the module's
    /// head: durable under `always`, at once under `everysec`). Appends
    /// must be submitted in log order (the log's lock orders them, and
    /// `done` runs on this thread when it runs at once).
    pub fn submit(&self, syncs: Syncs, last: u64, done: Done) {
        let mut q = self.shared.q.lock();
        if let Some(e) = q.failed.clone() {
            drop(q);
            done(Err(e));
            return;
        }
        let job = |done| Job {
            syncs,
            last,
            done,
            queued: Instant::now(),
        };
        if q.mode != Fsync::Always && q.unreported == 0 {
            // Acknowledged before its sync; no append before it waits.
            q.jobs.push_back(job(None));
            self.shared
                .durable
                .send_modify(|d| d.acked = d.acked.max(last + 1));
            self.shared.stages.appended.send_modify(|n| *n += 1);
            drop(q);
            self.shared.cv.notify_all();
            done(Ok(()));
            return;
        }
        q.jobs.push_back(job(Some(done)));
        q.unreported += 1;
        drop(q);
        self.shared.cv.notify_all();
    }

    /// Blocks until every append submitted is durable and reported (a
    /// truncation or a purge then sees no sync in flight): under
    /// `everysec` the thread syncs at once; the error of a failed sync.
    pub fn drain(&self) -> Result<(), String> {
        let mut q = self.shared.q.lock();
        while !q.jobs.is_empty() || q.busy {
            if !q.jobs.is_empty() {
                q.urgent = true;
                self.shared.cv.notify_all();
            }
            self.shared.cv.wait(&mut q);
        }
        match &q.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Waits until entry `index` is durable; the error of a failed sync.
    pub async fn wait_durable(&self, index: u64) -> Result<(), String> {
        self.wait_past(index, |d| d.upto).await
    }

    /// Waits until entry `index` was acknowledged to openraft (durable
    /// under `always`; written under `everysec`); the error of a failed
    /// sync for an entry not acknowledged before it.
    pub async fn wait_acked(&self, index: u64) -> Result<(), String> {
        self.wait_past(index, |d| d.acked).await
    }

    /// Waits until `end` (an index plus one) of the durable state passes
    /// `index`, or a sync fails before it does.
    async fn wait_past(&self, index: u64, end: impl Fn(&Durable) -> u64) -> Result<(), String> {
        let mut rx = self.shared.durable.subscribe();
        let d = rx
            .wait_for(|d| end(d) > index || d.failed.is_some())
            .await
            .map_err(|e| format!("raft log: sync thread gone: {e}"))?;
        match &d.failed {
            Some(e) if end(&d) <= index => Err(e.clone()),
            _ => Ok(()),
        }
    }

    /// Entries from `since` on were cut (a truncation, after [`Syncer::drain`]):
    /// those appended again there are not durable, nor acknowledged, until
    /// their own append.
    pub fn lower_durable(&self, since: u64) {
        self.shared.durable.send_modify(|d| {
            d.upto = d.upto.min(since);
            d.acked = d.acked.min(since);
        });
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
            match q.sync_in() {
                Some(d) if d.is_zero() => break,
                Some(d) => {
                    s.cv.wait_for(&mut q, d);
                }
                None if q.stop => {
                    // Held jobs are left unreported: their callbacks are
                    // dropped, which openraft takes for a failed flush.
                    return;
                }
                None => s.cv.wait(&mut q),
            }
        }
        let group: Vec<Job> = q.jobs.drain(..).collect();
        q.busy = true;
        q.urgent = false;
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
            dones.extend(j.done);
        }
        let r = if inject {
            Err("raft log: sync failed (injected by a test)".to_string())
        } else {
            syncs.run().and_then(|()| (s.after)(last))
        };
        s.stages.sync.add(oldest.elapsed());
        match &r {
            Ok(()) => s.durable.send_modify(|d| {
                d.upto = d.upto.max(last + 1);
                d.acked = d.acked.max(last + 1);
            }),
            Err(e) => {
                s.q.lock().failed = Some(e.clone());
                s.durable.send_modify(|d| d.failed = Some(e.clone()));
            }
        }
        let reported = dones.len();
        for done in dones {
            done(r.clone());
        }
        if reported > 0 {
            s.stages.appended.send_modify(|n| *n += 1);
        }
        let mut q = s.q.lock();
        q.busy = false;
        q.unreported -= reported;
        if let Some(e) = q.failed.clone() {
            // Whatever was queued meanwhile fails too.
            let queued: Vec<Job> = q.jobs.drain(..).collect();
            for done in queued.into_iter().filter_map(|j| j.done) {
                q.unreported -= 1;
                done(Err(e.clone()));
            }
        }
        drop(q);
        s.cv.notify_all();
    }
}
