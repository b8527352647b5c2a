//! The server's keyspace on one sluicedb database, and how commands
//! touch it atomically (`docs/format/server-keyspace.md` has the layout).
//!
//! Engine keys: `k` + xxh3-64(key) big-endian + key holds a Redis key's
//! value, `x` + expiry (ms, big-endian) + key indexes expiries for the
//! reaper. Keys are kept in hash order so that `SCAN`'s cursor can be a
//! plain integer that needs no server state: the hash to resume at.
//!
//! Atomicity: a command that writes locks the stripes of its keys (sorted,
//! so two commands never wait on each other in a cycle), reads, stages its
//! writes in a [`Txn`], commits them as one `WriteBatch` and unlocks.
//! Reads take no lock: each engine read is atomic, and `MGET` reads at one
//! snapshot. `MULTI`/`EXEC` runs its commands in one `Txn` under the locks
//! of all their keys. `FLUSHDB` takes the keyspace lock exclusively; every
//! other command holds it shared.
//!
//! `WATCH` is exact, as in redis-server: a watched key has an entry in its
//! stripe, and every commit that writes the key bumps the entry's version
//! under the stripe lock; `EXEC` compares versions under the same locks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use sluicedb::{Db, ReadOptions, WriteBatch, WriteOptions};
use xxhash_rust::xxh3::xxh3_64;

/// Tag of a data key.
pub const DATA_TAG: u8 = b'k';
/// Tag of an expiry index key.
pub const EXPIRY_TAG: u8 = b'x';
/// Value encoding: a string without expiry.
pub const VALUE_PLAIN: u8 = 0;
/// Value encoding: a string with an expiry (u64 LE ms) before it.
pub const VALUE_EXPIRING: u8 = 1;

/// Stripes of the key lock table.
const STRIPES: usize = 1024;

/// Deletes per batch when `FLUSHDB` empties a large keyspace.
const FLUSH_BATCH_KEYS: usize = 10_000;

pub type Result<T> = std::result::Result<T, sluicedb::Error>;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub fn key_hash(key: &[u8]) -> u64 {
    xxh3_64(key)
}

/// The engine key holding `key`'s value.
pub fn data_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + key.len());
    k.push(DATA_TAG);
    k.extend_from_slice(&key_hash(key).to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// The first engine key at or after hash `h`.
pub fn data_key_at_hash(h: u64) -> Vec<u8> {
    let mut k = vec![DATA_TAG];
    k.extend_from_slice(&h.to_be_bytes());
    k
}

/// The Redis key and its hash of a data key; `None` if it is not one.
pub fn split_data_key(k: &[u8]) -> Option<(u64, &[u8])> {
    if k.len() < 9 || k[0] != DATA_TAG {
        return None;
    }
    let h = u64::from_be_bytes(k[1..9].try_into().ok()?);
    Some((h, &k[9..]))
}

fn expiry_key(at_ms: u64, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + key.len());
    k.push(EXPIRY_TAG);
    k.extend_from_slice(&at_ms.to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// A string value with its expiry (ms since the epoch), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub value: Vec<u8>,
    pub expire_at_ms: Option<u64>,
}

impl Entry {
    pub fn plain(value: Vec<u8>) -> Entry {
        Entry {
            value,
            expire_at_ms: None,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        match self.expire_at_ms {
            None => {
                let mut v = Vec::with_capacity(1 + self.value.len());
                v.push(VALUE_PLAIN);
                v.extend_from_slice(&self.value);
                v
            }
            Some(at) => {
                let mut v = Vec::with_capacity(9 + self.value.len());
                v.push(VALUE_EXPIRING);
                v.extend_from_slice(&at.to_le_bytes());
                v.extend_from_slice(&self.value);
                v
            }
        }
    }

    /// Decodes a stored value; a clear error naming the key if it is not
    /// one this server wrote.
    pub fn decode(mut raw: Vec<u8>, key: &[u8]) -> Result<Entry> {
        let bad = || {
            sluicedb::Error::InvalidArgument(format!(
                "the value of {:?} is not in the server's encoding",
                String::from_utf8_lossy(key)
            ))
        };
        match raw.first() {
            Some(&VALUE_PLAIN) => {
                raw.remove(0);
                Ok(Entry::plain(raw))
            }
            Some(&VALUE_EXPIRING) if raw.len() >= 9 => {
                let at = u64::from_le_bytes(raw[1..9].try_into().map_err(|_| bad())?);
                raw.drain(..9);
                Ok(Entry {
                    value: raw,
                    expire_at_ms: Some(at),
                })
            }
            _ => Err(bad()),
        }
    }

    pub fn expired(&self, now: u64) -> bool {
        self.expire_at_ms.is_some_and(|at| at <= now)
    }
}

#[derive(Debug, Default)]
pub struct Stripe {
    /// Watched keys: (version, clients watching).
    watched: HashMap<Vec<u8>, (u64, u32)>,
}

/// How writes reach the disk (redis-server's `appendfsync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fsync {
    /// Every write is synced before it is acknowledged (group commit
    /// shares one sync between the clients writing at that moment).
    Always,
    /// The journal is synced once a second.
    EverySec,
    /// The engine syncs when its journals fill or rotate.
    No,
}

/// The keyspace; shared by every connection.
pub struct Keyspace {
    pub db: Db,
    stripes: Box<[Mutex<Stripe>]>,
    global: RwLock<()>,
    sync_always: AtomicBool,
    /// A write happened since the last `everysec` sync.
    pub dirty: AtomicBool,
}

/// The locks a command holds while it runs.
pub enum Held<'a> {
    None,
    Shared {
        _global: RwLockReadGuard<'a, ()>,
        stripes: Vec<(usize, MutexGuard<'a, Stripe>)>,
    },
    Exclusive {
        _global: RwLockWriteGuard<'a, ()>,
    },
}

impl Keyspace {
    pub fn new(db: Db, fsync: Fsync) -> Keyspace {
        let stripes = (0..STRIPES)
            .map(|_| Mutex::new(Stripe::default()))
            .collect();
        Keyspace {
            db,
            stripes,
            global: RwLock::new(()),
            sync_always: AtomicBool::new(fsync == Fsync::Always),
            dirty: AtomicBool::new(false),
        }
    }

    pub fn set_fsync(&self, fsync: Fsync) {
        self.sync_always
            .store(fsync == Fsync::Always, Ordering::Relaxed);
    }

    /// `appendfsync always`: every write waits for a journal sync.
    pub fn syncs_every_write(&self) -> bool {
        self.sync_always.load(Ordering::Relaxed)
    }

    fn stripe_of(key: &[u8]) -> usize {
        (key_hash(key) as usize) % STRIPES
    }

    /// Locks the stripes of `keys` (sorted, deduplicated) under the shared
    /// keyspace lock.
    pub fn lock_keys<'a>(&'a self, keys: &[&[u8]]) -> Held<'a> {
        let g = self.global.read();
        let mut idx: Vec<usize> = keys.iter().map(|k| Self::stripe_of(k)).collect();
        idx.sort_unstable();
        idx.dedup();
        let stripes = idx
            .into_iter()
            .map(|i| (i, self.stripes[i].lock()))
            .collect();
        Held::Shared {
            _global: g,
            stripes,
        }
    }

    pub fn lock_all(&self) -> Held<'_> {
        Held::Exclusive {
            _global: self.global.write(),
        }
    }

    /// Registers a client's watch of `key`; returns the version to compare.
    pub fn watch(&self, key: &[u8]) -> u64 {
        let mut s = self.stripes[Self::stripe_of(key)].lock();
        let e = s.watched.entry(key.to_vec()).or_insert((0, 0));
        e.1 += 1;
        e.0
    }

    pub fn unwatch(&self, key: &[u8]) {
        let mut s = self.stripes[Self::stripe_of(key)].lock();
        if let Some(e) = s.watched.get_mut(key) {
            e.1 -= 1;
            if e.1 == 0 {
                s.watched.remove(key);
            }
        }
    }

    /// The version of a watched key; called with its stripe held by `held`.
    pub fn watched_version(&self, held: &Held<'_>, key: &[u8]) -> Option<u64> {
        let i = Self::stripe_of(key);
        match held {
            Held::Shared { stripes, .. } => stripes
                .iter()
                .find(|(j, _)| *j == i)
                .and_then(|(_, s)| s.watched.get(key).map(|e| e.0)),
            Held::Exclusive { .. } => self.stripes[i].lock().watched.get(key).map(|e| e.0),
            Held::None => None,
        }
    }

    /// Reads `key` (expired entries read as absent).
    pub fn read(&self, key: &[u8], now: u64) -> Result<Option<Entry>> {
        self.read_at(&ReadOptions::default(), key, now)
    }

    pub fn read_at(&self, opts: &ReadOptions<'_>, key: &[u8], now: u64) -> Result<Option<Entry>> {
        match self.db.get_opt(opts, data_key(key))? {
            Some(raw) => {
                let e = Entry::decode(raw, key)?;
                Ok((!e.expired(now)).then_some(e))
            }
            None => Ok(None),
        }
    }

    /// Writes a batch, synced when `appendfsync always`.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        if self.sync_always.load(Ordering::Relaxed) {
            self.db.write_opt(&WriteOptions::synced(), batch)
        } else {
            self.dirty.store(true, Ordering::Relaxed);
            self.db.write(batch)
        }
    }

    /// Bumps the version of every watched key among `keys`; with the
    /// keyspace held exclusively (`FLUSHDB`), of every watched key.
    fn touch(&self, held: &mut Held<'_>, keys: impl Iterator<Item = Vec<u8>>, all: bool) {
        match held {
            Held::Exclusive { .. } => {
                if all {
                    for s in self.stripes.iter() {
                        for e in s.lock().watched.values_mut() {
                            e.0 += 1;
                        }
                    }
                } else {
                    for k in keys {
                        if let Some(e) =
                            self.stripes[Self::stripe_of(&k)].lock().watched.get_mut(&k)
                        {
                            e.0 += 1;
                        }
                    }
                }
            }
            Held::Shared { stripes, .. } => {
                for k in keys {
                    let i = Self::stripe_of(&k);
                    if let Some((_, s)) = stripes.iter_mut().find(|(j, _)| *j == i) {
                        if let Some(e) = s.watched.get_mut(&k) {
                            e.0 += 1;
                        }
                    }
                }
            }
            Held::None => {}
        }
    }

    /// Every Redis key present now (not expired), in hash order, from hash
    /// `from`: `f` gets (hash, key, entry) and returns false to stop.
    pub fn scan_from(
        &self,
        from: u64,
        now: u64,
        mut f: impl FnMut(u64, &[u8], &Entry) -> bool,
    ) -> Result<()> {
        let lo = data_key_at_hash(from);
        let hi = vec![DATA_TAG + 1];
        for pair in self.db.range(lo..hi) {
            let (k, v) = pair?;
            let Some((h, key)) = split_data_key(&k) else {
                continue;
            };
            let e = Entry::decode(v, key)?;
            if e.expired(now) {
                continue;
            }
            if !f(h, key, &e) {
                break;
            }
        }
        Ok(())
    }

    /// Deletes every key (`FLUSHDB`), in batches; needs the keyspace
    /// held exclusively.
    fn delete_everything(&self) -> Result<()> {
        for tag in [DATA_TAG, EXPIRY_TAG] {
            loop {
                let mut batch = WriteBatch::new();
                for pair in self
                    .db
                    .range(vec![tag]..vec![tag + 1])
                    .limit(FLUSH_BATCH_KEYS)
                {
                    let (k, _) = pair?;
                    batch.delete(k);
                }
                if batch.is_empty() {
                    break;
                }
                self.write(batch)?;
            }
        }
        Ok(())
    }

    /// One reaper round: deletes keys whose expiry passed, by the expiry
    /// index, at most `max` index entries; returns how many keys it
    /// deleted and whether entries remain due.
    pub fn reap(&self, max: usize) -> Result<(u64, bool)> {
        let now = now_ms();
        let hi = expiry_key(now.saturating_add(1), b"");
        let due: Vec<Vec<u8>> = self
            .db
            .range(vec![EXPIRY_TAG]..hi)
            .limit(max + 1)
            .map(|p| p.map(|(k, _)| k))
            .collect::<Result<_>>()?;
        let more = due.len() > max;
        let mut deleted = 0;
        for ik in due.iter().take(max) {
            let key = &ik[9..];
            let mut held = self.lock_keys(&[key]);
            let mut batch = WriteBatch::new();
            batch.delete(ik);
            if let Some(raw) = self.db.get(data_key(key))? {
                let e = Entry::decode(raw, key)?;
                if e.expired(now_ms()) {
                    batch.delete(data_key(key));
                    deleted += 1;
                    self.touch(&mut held, std::iter::once(key.to_vec()), false);
                }
            }
            self.write(batch)?;
        }
        Ok((deleted, more))
    }
}

/// The writes of one command or one `EXEC`, staged over the keyspace:
/// reads see them, and `commit` applies them as one batch.
pub struct Txn<'a> {
    ks: &'a Keyspace,
    /// Reads of a multi-key read command go to one snapshot (`MGET` and
    /// `EXISTS` see no half of an `EXEC`).
    snapshot: Option<sluicedb::Snapshot>,
    pub now: u64,
    /// Staged writes by Redis key; `None` deletes.
    writes: HashMap<Vec<u8>, Option<Entry>>,
    /// Order of first writes, so the batch is deterministic.
    order: Vec<Vec<u8>>,
    /// `FLUSHDB` ran: the keyspace reads as empty under the staged writes.
    flushed: bool,
}

impl<'a> Txn<'a> {
    pub fn new(ks: &'a Keyspace) -> Txn<'a> {
        Txn {
            ks,
            snapshot: None,
            now: now_ms(),
            writes: HashMap::new(),
            order: Vec::new(),
            flushed: false,
        }
    }

    /// A read-only transaction reading at one snapshot.
    pub fn at_snapshot(ks: &'a Keyspace) -> Txn<'a> {
        let mut t = Txn::new(ks);
        t.snapshot = Some(ks.db.snapshot());
        t
    }

    pub fn keyspace(&self) -> &'a Keyspace {
        self.ks
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Entry>> {
        if let Some(w) = self.writes.get(key) {
            return Ok(w.clone().filter(|e| !e.expired(self.now)));
        }
        if self.flushed {
            return Ok(None);
        }
        match &self.snapshot {
            Some(s) => self.ks.read_at(&ReadOptions::at(s), key, self.now),
            None => self.ks.read(key, self.now),
        }
    }

    pub fn exists(&self, key: &[u8]) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    pub fn set(&mut self, key: &[u8], e: Entry) {
        self.stage(key, Some(e));
    }

    pub fn delete(&mut self, key: &[u8]) {
        self.stage(key, None);
    }

    fn stage(&mut self, key: &[u8], e: Option<Entry>) {
        if self.writes.insert(key.to_vec(), e).is_none() {
            self.order.push(key.to_vec());
        }
    }

    /// Empties the keyspace (`FLUSHDB`): needs it held exclusively.
    pub fn flush_all(&mut self) {
        self.flushed = true;
        self.writes.clear();
        self.order.clear();
    }

    pub fn has_writes(&self) -> bool {
        self.flushed || !self.writes.is_empty()
    }

    /// Applies the staged writes as one batch and bumps the watched keys
    /// among them. After `FLUSHDB` the deletes go first, in their own
    /// batches (the keyspace is held exclusively, so no one sees between).
    pub fn commit(self, held: &mut Held<'_>) -> Result<()> {
        if self.flushed {
            self.ks.delete_everything()?;
        }
        let mut batch = WriteBatch::new();
        for key in &self.order {
            match &self.writes[key] {
                Some(e) => {
                    batch.put(data_key(key), e.encode());
                    if let Some(at) = e.expire_at_ms {
                        batch.put(expiry_key(at, key), []);
                    }
                }
                None => {
                    batch.delete(data_key(key));
                }
            }
        }
        self.ks.write(batch)?;
        self.ks.touch(held, self.order.into_iter(), self.flushed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of `docs/format/server-keyspace.md`.
    #[test]
    fn the_worked_example_encodes_as_documented() {
        let e = Entry {
            value: b"hi".to_vec(),
            expire_at_ms: Some(1_700_000_010_000),
        };
        assert_eq!(
            e.encode(),
            [0x01, 0x10, 0x8f, 0xe5, 0xcf, 0x8b, 0x01, 0x00, 0x00, b'h', b'i']
        );
        assert_eq!(Entry::decode(e.encode(), b"user:1").unwrap(), e);
        assert_eq!(
            expiry_key(1_700_000_010_000, b"user:1"),
            [
                &[0x78, 0, 0, 0x01, 0x8b, 0xcf, 0xe5, 0x8f, 0x10][..],
                b"user:1"
            ]
            .concat()
        );
        let k = data_key(b"user:1");
        assert_eq!(k[0], b'k');
        assert_eq!(
            split_data_key(&k),
            Some((xxh3_64(b"user:1"), &b"user:1"[..]))
        );
        assert_eq!(Entry::plain(b"hi".to_vec()).encode(), [0x00, b'h', b'i']);
        assert!(
            Entry::decode(vec![7, 1, 2], b"k").is_err(),
            "an unknown tag is an error"
        );
    }
}
