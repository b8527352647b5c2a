//! Clients blocked in `BLPOP`, `BRPOP`, `BLMOVE`, `BRPOPLPUSH`: one FIFO
//! queue of waiters per key. A command that finds nothing to pop parks its
//! client while it still holds its keys' stripe locks, so a write to those
//! keys cannot slip in between its look and its parking. The writer, once
//! it has committed and unlocked, serves the waiters of the keys it wrote
//! in the order they blocked (`cmd::serve_blocked`): each one's command
//! runs again, on the writer's thread, and its reply goes to the waiting
//! connection. A waiter is served or cancelled (timeout, disconnection,
//! shutdown) under its own lock, never both.
//!
//! Lock order: a waiter's state, then stripe locks, then the queues.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::oneshot;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitState {
    Waiting,
    Served,
    Cancelled,
}

/// One blocked client's command.
#[derive(Debug)]
pub struct Waiter {
    /// The database its keys are in (the client's `SELECT` when it
    /// blocked): its command runs again there.
    pub db: u8,
    pub keys: Vec<Vec<u8>>,
    pub args: Vec<Bytes>,
    pub resp3: bool,
    /// Guards serving against cancelling.
    pub state: Mutex<WaitState>,
    reply: Mutex<Option<oneshot::Sender<Vec<u8>>>>,
}

impl Waiter {
    /// Hands the reply to the waiting connection; called with `state`
    /// held and set to `Served`.
    pub fn send(&self, reply: Vec<u8>) {
        if let Some(tx) = self.reply.lock().take() {
            let _ = tx.send(reply);
        }
    }
}

/// A parked client's side: its waiter and where its reply arrives.
#[derive(Debug)]
pub struct Parked {
    pub waiter: Arc<Waiter>,
    pub reply: oneshot::Receiver<Vec<u8>>,
    /// Seconds to wait (0: forever).
    pub timeout_secs: f64,
}

/// A key of one database: (database, key).
type DbKey = (u8, Vec<u8>);

/// The queues of blocked clients, by database and key.
#[derive(Debug, Default)]
pub struct Blocking {
    queues: Mutex<HashMap<DbKey, VecDeque<Arc<Waiter>>>>,
    /// Clients blocked now (`INFO`'s `blocked_clients`).
    pub blocked: AtomicUsize,
}

impl Blocking {
    /// Whether any client is blocked (a cheap check for every write).
    pub fn any(&self) -> bool {
        self.blocked.load(Ordering::Relaxed) > 0
    }

    /// Parks a command at the end of its keys' queues; called with the
    /// keys' stripe locks held.
    pub fn park(
        &self,
        db: u8,
        keys: Vec<Vec<u8>>,
        args: Vec<Bytes>,
        resp3: bool,
        timeout_secs: f64,
    ) -> Parked {
        let (tx, rx) = oneshot::channel();
        let waiter = Arc::new(Waiter {
            db,
            keys,
            args,
            resp3,
            state: Mutex::new(WaitState::Waiting),
            reply: Mutex::new(Some(tx)),
        });
        let mut q = self.queues.lock();
        for k in &waiter.keys {
            let queue = q.entry((db, k.clone())).or_default();
            if !queue.iter().any(|w| Arc::ptr_eq(w, &waiter)) {
                queue.push_back(waiter.clone());
            }
        }
        self.blocked.fetch_add(1, Ordering::Relaxed);
        Parked {
            waiter,
            reply: rx,
            timeout_secs,
        }
    }

    /// The first waiter on `key` of database `db`.
    pub fn front(&self, db: u8, key: &[u8]) -> Option<Arc<Waiter>> {
        let q = self.queues.lock();
        q.get(&(db, key.to_vec())).and_then(|q| q.front().cloned())
    }

    /// The keys of database `db` that clients are blocked on.
    pub fn keys_in(&self, db: u8) -> Vec<Vec<u8>> {
        let q = self.queues.lock();
        (q.keys().filter(|(d, _)| *d == db))
            .map(|(_, k)| k.clone())
            .collect()
    }

    /// Takes a waiter out of all its queues.
    pub fn remove(&self, w: &Arc<Waiter>) {
        let mut q = self.queues.lock();
        let mut found = false;
        for k in &w.keys {
            let qk = (w.db, k.clone());
            if let Some(queue) = q.get_mut(&qk) {
                let before = queue.len();
                queue.retain(|x| !Arc::ptr_eq(x, w));
                found |= queue.len() != before;
                if queue.is_empty() {
                    q.remove(&qk);
                }
            }
        }
        if found {
            self.blocked.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Cancels a waiter (timeout, disconnection); false if it was served
    /// first (its reply is then on its way).
    pub fn cancel(&self, w: &Arc<Waiter>) -> bool {
        let mut st = w.state.lock();
        let cancelled = *st == WaitState::Waiting;
        if cancelled {
            *st = WaitState::Cancelled;
        }
        drop(st);
        self.remove(w);
        cancelled
    }
}
