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

use std::collections::{BTreeMap, VecDeque};

use crate::fasthash::{FastMap, FastSet};
use std::ops::Bound::{Excluded, Included, Unbounded};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Buf, Bytes};
use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use sluicedb::{Db, ReadOptions, ValueRef, WriteBatch, WriteOptions};
use xxhash_rust::xxh3::xxh3_64;

use crate::dbslot::DbSlot;

/// Tag of a data key.
pub const DATA_TAG: u8 = b'k';
/// Tag of an expiry index key.
pub const EXPIRY_TAG: u8 = b'x';
/// Tag of a data key of a database other than 0:
/// `'d' | db u8 | xxh3-64(key) BE | key` (database 0 keeps [`DATA_TAG`]).
pub const DB_DATA_TAG: u8 = b'd';
/// Tag of a time index key of a database other than 0:
/// `'y' | expiry u64 BE | db u8 | key` (database 0 keeps [`EXPIRY_TAG`]).
pub const DB_EXPIRY_TAG: u8 = b'y';
/// Databases (`SELECT 0` to `SELECT 15`), as redis-server's default
/// `databases 16`.
pub const DATABASES: u8 = 16;
/// Value encoding: a string without expiry.
pub const VALUE_PLAIN: u8 = 0;
/// Value encoding: a string with an expiry (u64 LE ms) before it.
pub const VALUE_EXPIRING: u8 = 1;
/// Value encoding: a collection's metadata (hash, list, set, sorted set).
pub const VALUE_COLLECTION: u8 = 2;
/// Tag of a collection element key: `'e' | n | version's n significant
/// bytes BE | suffix` ([`element_prefix`]).
pub const ELEMENT_TAG: u8 = b'e';
/// Bytes of the name hash ([`name_hash`]) before the name of a hash
/// field, a set member or a sorted-set member record in its element key.
pub const NAME_HASH_BYTES: usize = 4;
/// Present once every element key is in the layout of
/// [`element_prefix`]; its value is [`KEYSPACE_FORMAT`]. Written with
/// every version reservation, so a database that reserved versions but
/// lacks it was written before that layout (the version as 8 bytes, names
/// unhashed) and is converted at open ([`crate::migrate`]).
pub const KEYSPACE_FORMAT_KEY: &[u8] = b"f";
/// The keyspace format this build writes.
pub const KEYSPACE_FORMAT: u8 = 1;
/// Tag of a garbage record: `'g' | version u64 BE`, the elements of a
/// collection that no key holds any more, reclaimed in the background.
pub const GARBAGE_TAG: u8 = b'g';
/// The one key holding the first collection version not yet reserved.
pub const VERSION_KEY: &[u8] = b"v";
/// The database map, written by `SWAPDB`, `FLUSHDB` and `FLUSHALL`
/// ([`DbMap`]): byte `i` of its first 16 is the stored database (the data
/// and time index keys under `'k'`/`'x'` for 0, `'d' | s`/`'y' … s` for
/// another `s`, any byte) that database `i` (`SELECT i`) names, 16
/// distinct bytes; a 17th, once a flush handed out a stored database, is
/// the last one handed out. Absent: each names its own.
pub const DB_MAP_KEY: &[u8] = b"m";
/// Tag of a collection bucket key, `'c' | bucket u32 BE`: a collection
/// was stored, at some time, under a key whose hash falls in the bucket
/// (the hash's top [`COLL_BUCKET_BITS`] bits). Deleted only by a
/// `FLUSHALL` that finds at most [`FLUSHALL_BUCKET_KEYS_MAX`], in its one
/// batch; a plain `SET` reads what it overwrites only in such buckets.
pub const COLL_BUCKET_TAG: u8 = b'c';
/// Present (empty value) once the bucket keys are kept: a database written
/// before them has collections but no bucket keys, and is scanned once.
pub const COLL_BUCKETS_KEPT_KEY: &[u8] = b"c";
/// Buckets: 2^20, a 128 KiB bitmap in memory.
pub const COLL_BUCKET_BITS: u32 = 20;
/// Versions reserved at a time (one engine write per block).
const VERSION_BLOCK: u64 = 1024;
/// Element deletes per batch when garbage is reclaimed.
const RECLAIM_BATCH_KEYS: usize = 1000;
/// Most collection bucket keys `FLUSHALL` deletes in its batch; with more
/// marked it leaves them all marked.
const FLUSHALL_BUCKET_KEYS_MAX: usize = 4096;
/// The error of a command given a key of another type.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Stripes of the key lock table.
const STRIPES: usize = 1024;

pub type Result<T> = std::result::Result<T, sluicedb::Error>;

/// A Redis key of one database: (database, key).
pub type DbKey = (u8, Vec<u8>);

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub fn key_hash(key: &[u8]) -> u64 {
    xxh3_64(key)
}

/// What every data key of stored database `db` starts with: `'k'` for
/// 0 (the layout before there were others), `'d' | db` for the others.
pub fn data_prefix(db: u8) -> Vec<u8> {
    if db == 0 {
        vec![DATA_TAG]
    } else {
        vec![DB_DATA_TAG, db]
    }
}

/// One past the last data key of stored database `db`.
pub fn data_end(db: u8) -> Vec<u8> {
    match db {
        0 => vec![DATA_TAG + 1],
        u8::MAX => vec![DB_DATA_TAG + 1],
        _ => vec![DB_DATA_TAG, db + 1],
    }
}

/// The engine key holding `key`'s value in stored database `db`.
pub fn data_key(db: u8, key: &[u8]) -> Vec<u8> {
    // One allocation: this is every command's first step.
    let mut k = Vec::with_capacity(10 + key.len());
    if db == 0 {
        k.push(DATA_TAG);
    } else {
        k.extend_from_slice(&[DB_DATA_TAG, db]);
    }
    k.extend_from_slice(&key_hash(key).to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// The first engine key of database `db` at or after hash `h`.
pub fn data_key_at_hash(db: u8, h: u64) -> Vec<u8> {
    let mut k = data_prefix(db);
    k.extend_from_slice(&h.to_be_bytes());
    k
}

/// The Redis key and its hash of a data key of database `db`; `None` if
/// it is not one.
pub fn split_data_key(db: u8, k: &[u8]) -> Option<(u64, &[u8])> {
    // No allocation: scans (`DBSIZE`, `KEYS`, `SCAN`) split every key.
    let p = match (db, k) {
        (0, [DATA_TAG, ..]) => 1,
        (_, [DB_DATA_TAG, d, ..]) if *d == db && db != 0 => 2,
        _ => return None,
    };
    let h = u64::from_be_bytes(k.get(p..p + 8)?.try_into().ok()?);
    Some((h, &k[p + 8..]))
}

/// The stored database, hash and Redis key of any data key; `None` if it
/// is not one.
pub fn split_any_data_key(k: &[u8]) -> Option<(u8, u64, &[u8])> {
    let db = match k.first() {
        Some(&DATA_TAG) => 0,
        Some(&DB_DATA_TAG) => *k.get(1).filter(|&&d| d > 0)?,
        _ => return None,
    };
    split_data_key(db, k).map(|(h, key)| (db, h, key))
}

fn expiry_key(db: u8, at_ms: u64, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(10 + key.len());
    k.push(if db == 0 { EXPIRY_TAG } else { DB_EXPIRY_TAG });
    k.extend_from_slice(&at_ms.to_be_bytes());
    if db != 0 {
        k.push(db);
    }
    k.extend_from_slice(key);
    k
}

/// A time index entry due: its engine key (`'x' | expiry | key`, or
/// `'y' | expiry | db | key`), its database and the expiry it holds.
pub struct DueExpiry {
    index_key: Vec<u8>,
    /// The database number of its key when it was found (see
    /// [`Keyspace::stored_db`]).
    pub db: u8,
    /// The stored database its index key is in.
    stored: u8,
    pub at_ms: u64,
}

impl DueExpiry {
    /// The Redis key.
    pub fn key(&self) -> &[u8] {
        &self.index_key[if self.stored == 0 { 9 } else { 10 }..]
    }
}

/// A time index key too short to hold its expiry: not one this server
/// wrote.
fn corrupt_index_key(k: &[u8]) -> Damage {
    Damage(format!(
        "the time index key {} is not in the server's encoding",
        hex(k)
    ))
}

/// Bytes read back from the engine that are not in the server's encoding
/// (a record, an element key, a score): damage on disk, never a client's
/// bad input. What it holds names what did not decode and the key.
/// [`Damage::in_db`] makes it the engine's [`sluicedb::Error::Corruption`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage(pub String);

impl Damage {
    /// The damage as a [`sluicedb::Error::Corruption`] of `db`: the file
    /// is the database's directory, offset 0, since the engine does not
    /// say which of its files held the bytes; the reason names the key.
    pub fn in_db(self, db: &Db) -> sluicedb::Error {
        sluicedb::Error::Corruption {
            file: db.path().to_path_buf(),
            offset: 0,
            reason: format!("server keyspace: {}", self.0),
        }
    }
}

/// `b` in hex, for an engine key in an error.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A Redis key as an error names it.
fn key_name(key: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(key))
}

/// A string value with its expiry (ms since the epoch), if any. The value
/// is shared, not copied: a `SET`'s is the request's argument, a read's
/// the engine's buffer past the record's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub value: Bytes,
    pub expire_at_ms: Option<u64>,
}

/// Longest string record header: the tag and an expiry.
pub const ENTRY_HEAD_MAX_BYTES: usize = 9;

impl Entry {
    pub fn plain(value: impl Into<Bytes>) -> Entry {
        Entry {
            value: value.into(),
            expire_at_ms: None,
        }
    }

    /// The record's header (its bytes before the value) into `head`;
    /// returns its length.
    pub fn encode_head(&self, head: &mut [u8; ENTRY_HEAD_MAX_BYTES]) -> usize {
        match self.expire_at_ms {
            None => {
                head[0] = VALUE_PLAIN;
                1
            }
            Some(at) => {
                head[0] = VALUE_EXPIRING;
                head[1..9].copy_from_slice(&at.to_le_bytes());
                9
            }
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut head = [0u8; ENTRY_HEAD_MAX_BYTES];
        let n = self.encode_head(&mut head);
        let mut v = Vec::with_capacity(n + self.value.len());
        v.extend_from_slice(&head[..n]);
        v.extend_from_slice(&self.value);
        v
    }

    /// Decodes a stored value (the value is not copied); [`Damage`]
    /// naming the key if it is not one this server wrote.
    pub fn decode(raw: Vec<u8>, key: &[u8]) -> std::result::Result<Entry, Damage> {
        let bad = || {
            Damage(format!(
                "the value of {} is not in the server's encoding",
                key_name(key)
            ))
        };
        // `advance`, not `slice`: a slice of a `Bytes` made from a `Vec`
        // allocates a shared header and counts references.
        let past = |raw: Vec<u8>, n: usize| {
            let mut b = Bytes::from(raw);
            b.advance(n);
            b
        };
        match raw.first() {
            Some(&VALUE_PLAIN) => Ok(Entry::plain(past(raw, 1))),
            Some(&VALUE_EXPIRING) if raw.len() >= 9 => {
                let at = u64::from_le_bytes(raw[1..9].try_into().map_err(|_| bad())?);
                Ok(Entry {
                    value: past(raw, 9),
                    expire_at_ms: Some(at),
                })
            }
            _ => Err(bad()),
        }
    }
}

/// The type of a collection, as its metadata records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollKind {
    Hash = 1,
    List = 2,
    Set = 3,
    ZSet = 4,
}

impl CollKind {
    fn from_byte(b: u8) -> Option<CollKind> {
        Some(match b {
            1 => CollKind::Hash,
            2 => CollKind::List,
            3 => CollKind::Set,
            4 => CollKind::ZSet,
            _ => return None,
        })
    }

    /// The name `TYPE` answers.
    pub fn name(self) -> &'static str {
        match self {
            CollKind::Hash => "hash",
            CollKind::List => "list",
            CollKind::Set => "set",
            CollKind::ZSet => "zset",
        }
    }
}

/// Bytes of a collection's metadata record; a list's adds head and tail.
pub const META_BYTES: usize = 26;
pub const LIST_META_BYTES: usize = META_BYTES + 16;
/// Longest pop bound a record keeps ([`Meta::pop_lo`]): a longer start is
/// cut to this many bytes (a prefix of a bound sorts before it, so it is
/// still a bound), a longer end is not kept.
pub const POP_BOUND_MAX_BYTES: usize = 255;
/// Longest collection record: a set's or sorted set's with both pop
/// bounds at their longest.
pub const META_MAX_BYTES: usize = META_BYTES + 2 * (1 + POP_BOUND_MAX_BYTES);
const _: () = assert!(LIST_META_BYTES < META_MAX_BYTES && POP_BOUND_MAX_BYTES <= u8::MAX as usize);

/// A collection's metadata: the record at its data key. Its elements are
/// engine keys `'e' | version | suffix`; `version` is never reused, so a
/// collection that is deleted or replaced leaves elements no record can
/// reach, which the reclaimer deletes (`docs/format/server-keyspace.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub kind: CollKind,
    pub expire_at_ms: Option<u64>,
    pub version: u64,
    /// Elements (for a sorted set: members).
    pub count: u64,
    /// Lists only: the position of the first element and one past the last.
    pub head: i64,
    pub tail: i64,
    /// Sets and sorted sets: where the live members (a sorted set's live
    /// score index entries) begin, as an element suffix, learnt from the
    /// pops; `None`: at the collection's start. Every live one is at or
    /// after it, so a pop or an index walk starts there, past the
    /// tombstones of those popped before, also after a restart. Kept in
    /// the record, so that the batch of a pop narrows it and the batch of
    /// an insert widens it ([`Txn::put_meta`]).
    pub pop_lo: Option<Vec<u8>>,
    /// As [`Meta::pop_lo`], the end (exclusive); `None`: the collection's end.
    pub pop_hi: Option<Vec<u8>>,
}

impl Meta {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(LIST_META_BYTES);
        v.push(VALUE_COLLECTION);
        v.push(self.kind as u8);
        v.extend_from_slice(&self.expire_at_ms.unwrap_or(0).to_le_bytes());
        v.extend_from_slice(&self.version.to_le_bytes());
        v.extend_from_slice(&self.count.to_le_bytes());
        if self.kind == CollKind::List {
            v.extend_from_slice(&self.head.to_le_bytes());
            v.extend_from_slice(&self.tail.to_le_bytes());
        }
        // An empty bound is the collection's own end: not kept.
        let lo = self.pop_lo.as_deref().filter(|b| !b.is_empty());
        let hi =
            (self.pop_hi.as_deref()).filter(|b| !b.is_empty() && b.len() <= POP_BOUND_MAX_BYTES);
        if lo.is_some() || hi.is_some() {
            debug_assert!(matches!(self.kind, CollKind::Set | CollKind::ZSet));
            let lo = lo.map_or(&[][..], |b| &b[..b.len().min(POP_BOUND_MAX_BYTES)]);
            let hi = hi.unwrap_or_default();
            v.push(lo.len() as u8);
            v.extend_from_slice(lo);
            v.push(hi.len() as u8);
            v.extend_from_slice(hi);
        }
        v
    }

    /// The record in `raw`; `None` unless it is one this server writes:
    /// a known type, the type's length (a set's or sorted set's may add
    /// its pop bounds, a sorted set's in its score index), at least one
    /// element (collections are never empty), and a list's count equal to
    /// `tail - head`.
    fn decode(raw: &[u8]) -> Option<Meta> {
        let kind = CollKind::from_byte(*raw.get(1)?)?;
        let want = if kind == CollKind::List {
            LIST_META_BYTES
        } else {
            META_BYTES
        };
        let (pop_lo, pop_hi) = match raw.len() {
            n if n == want => (None, None),
            n if n > want && matches!(kind, CollKind::Set | CollKind::ZSet) => {
                decode_pop_bounds(&raw[want..], kind)?
            }
            _ => return None,
        };
        let u = |at: usize| u64::from_le_bytes(raw[at..at + 8].try_into().expect("8 bytes"));
        let (head, tail) = if kind == CollKind::List {
            (u(26) as i64, u(34) as i64)
        } else {
            (0, 0)
        };
        let count = u(18);
        let spans_count = tail
            .checked_sub(head)
            .is_some_and(|n| u64::try_from(n) == Ok(count));
        if count == 0 || (kind == CollKind::List && !spans_count) {
            return None;
        }
        Some(Meta {
            kind,
            expire_at_ms: Some(u(2)).filter(|&at| at != 0),
            version: u(10),
            count,
            head,
            tail,
            pop_lo,
            pop_hi,
        })
    }

    /// The engine key of its pop bound, the start ([`Meta::pop_lo`],
    /// `max` false) or the end.
    pub fn pop_bound_key(&self, max: bool) -> Option<Vec<u8>> {
        let b = if max { &self.pop_hi } else { &self.pop_lo };
        b.as_deref().map(|s| self.elem(s))
    }

    fn set_pop_bound(&mut self, max: bool, suffix: Option<Vec<u8>>) {
        if max {
            self.pop_hi = suffix;
        } else {
            self.pop_lo = suffix;
        }
    }

    /// Widens its pop bounds to take in the element `suffix`, being
    /// inserted.
    fn widen_pop_bounds(&mut self, suffix: &[u8]) {
        if self.pop_lo.as_deref().is_some_and(|lo| suffix < lo) {
            self.pop_lo = Some(suffix.to_vec());
        }
        if self.pop_hi.as_deref().is_some_and(|hi| suffix >= hi) {
            let mut past = suffix.to_vec();
            past.push(0);
            self.pop_hi = Some(past);
        }
    }

    /// The first engine key of its elements.
    pub fn prefix(&self) -> Vec<u8> {
        element_prefix(self.version)
    }

    /// Bytes of [`Meta::prefix`].
    pub fn prefix_len(&self) -> usize {
        element_prefix_len(self.version)
    }

    /// The suffix of `ekey`, one of its element keys.
    pub fn suffix_of<'a>(&self, ekey: &'a [u8]) -> &'a [u8] {
        &ekey[self.prefix_len()..]
    }

    /// The engine key of a hash field (its name hash, then the name) or a
    /// set member (the name alone: see [`hashes_names`]).
    pub fn named(&self, name: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix_len() + NAME_HASH_BYTES + name.len());
        k.extend_from_slice(&element_prefix(self.version));
        if hashes_names(self.kind) {
            k.extend_from_slice(&name_hash(name));
        }
        k.extend_from_slice(name);
        k
    }

    /// The name in `suffix`, the suffix of one of its named elements (past
    /// a sorted set's sub-tag); `None` if its name hash is not the name's.
    pub fn name_in<'a>(&self, suffix: &'a [u8]) -> Option<&'a [u8]> {
        if hashes_names(self.kind) {
            name_of(suffix)
        } else {
            Some(suffix)
        }
    }

    /// The engine key of the element with `suffix`.
    pub fn elem(&self, suffix: &[u8]) -> Vec<u8> {
        let mut k = element_prefix(self.version);
        k.extend_from_slice(suffix);
        k
    }

    /// One past the last engine key of its elements.
    pub fn end(&self) -> Vec<u8> {
        element_end(self.version)
    }
}

/// A start and an end of the live members ([`Meta::pop_lo`], [`Meta::pop_hi`]).
type PopBoundPair = (Option<Vec<u8>>, Option<Vec<u8>>);

/// The pop bounds at the end of a set's or sorted set's record:
/// `lo_len u8 | lo | hi_len u8 | hi` (length 0: none); `None` unless the
/// bytes are exactly that and a sorted set's bounds are in its score
/// index (a walk from them reads index entries only).
fn decode_pop_bounds(b: &[u8], kind: CollKind) -> Option<PopBoundPair> {
    let lo_len = usize::from(*b.first()?);
    let lo = b.get(1..1 + lo_len)?;
    let hi_len = usize::from(*b.get(1 + lo_len)?);
    let hi = b.get(2 + lo_len..2 + lo_len + hi_len)?;
    if b.len() != 2 + lo_len + hi_len || (lo.is_empty() && hi.is_empty()) {
        return None;
    }
    let in_index = |x: &[u8]| x.is_empty() || kind != CollKind::ZSet || x[0] == ZSET_INDEX;
    if !in_index(lo) || !in_index(hi) {
        return None;
    }
    let some = |x: &[u8]| (!x.is_empty()).then(|| x.to_vec());
    Some((some(lo), some(hi)))
}

/// Significant bytes of `version` (1 for 0).
fn version_bytes(version: u64) -> usize {
    (8 - version.leading_zeros() as usize / 8).max(1)
}

/// Bytes of [`element_prefix`]`(version)`.
pub fn element_prefix_len(version: u64) -> usize {
    2 + version_bytes(version)
}

/// `'e' | n | the version's n significant bytes, big-endian` (n in 1..=8).
/// A longer encoding sorts after a shorter one, so the prefixes are in
/// version order and each is a prefix of its own version's keys only.
/// Short, so that the skiplist's 8-byte inline key prefix holds bytes
/// that differ between one collection's elements
/// (`docs/format/server-keyspace.md`).
pub fn element_prefix(version: u64) -> Vec<u8> {
    let n = version_bytes(version);
    let mut k = Vec::with_capacity(24);
    k.push(ELEMENT_TAG);
    k.push(n as u8);
    k.extend_from_slice(&version.to_be_bytes()[8 - n..]);
    k
}

/// One past the last engine key of `version`'s elements: the smallest
/// key that does not start with its prefix.
pub fn element_end(version: u64) -> Vec<u8> {
    let mut k = element_prefix(version);
    while k.last() == Some(&0xff) {
        k.pop();
    }
    *k.last_mut().expect("the tag is not 0xff") += 1;
    k
}

/// The version of an element key and the length of its prefix; `None`
/// if `k` is not an element key of [`element_prefix`]'s layout.
pub fn split_element_key(k: &[u8]) -> Option<(u64, usize)> {
    if k.first() != Some(&ELEMENT_TAG) {
        return None;
    }
    let n = usize::from(*k.get(1)?);
    let b = k.get(2..2 + n).filter(|_| (1..=8).contains(&n))?;
    if n > 1 && b[0] == 0 {
        return None; // not the shortest encoding
    }
    let v = b.iter().fold(0u64, |v, &x| (v << 8) | u64::from(x));
    Some((v, 2 + n))
}

/// Whether the named elements of `kind` carry a name hash: hash fields and
/// sorted-set member records do; set members do not. A set's random picks
/// (`SPOP`, `SRANDMEMBER`) seek between its live members, and with hashed
/// members they walked far more tombstones of popped ones (measured:
/// `docs/experiments.md`, "Short element-key versions and hashed names").
pub fn hashes_names(kind: CollKind) -> bool {
    matches!(kind, CollKind::Hash | CollKind::ZSet)
}

/// The name hash of a hash field or sorted-set member: the
/// top 4 bytes of `xxh3_64(name)` (seed 0), big-endian. On disk: it may
/// never change. It puts differing bytes early in element keys whose
/// names share a long prefix; the name follows it whole, so two names
/// with one hash only cost a longer compare.
pub fn name_hash(name: &[u8]) -> [u8; NAME_HASH_BYTES] {
    ((xxh3_64(name) >> 32) as u32).to_be_bytes()
}

/// The name in a named suffix (name hash, then name); `None` if it is
/// too short to hold the hash or the hash is not the name's.
pub fn name_of(suffix: &[u8]) -> Option<&[u8]> {
    let name = suffix.get(NAME_HASH_BYTES..)?;
    (suffix[..NAME_HASH_BYTES] == name_hash(name)).then_some(name)
}

/// An element key whose suffix is not in the server's encoding (the
/// engine key names its collection's version).
pub fn malformed_element(ekey: &[u8]) -> Damage {
    Damage(format!(
        "the element key {} is not in the server's encoding",
        hex(ekey)
    ))
}

/// The engine key `ekey` where list `m`'s position `want` belongs (a
/// position missing, or a key between two).
pub fn misplaced_list_element(m: &Meta, ekey: &[u8], want: i64) -> Damage {
    Damage(format!(
        "list element key {} where position {want} of the list at version {} belongs",
        hex(ekey),
        m.version
    ))
}

/// List `m`'s position `seq`, which its record promises, is missing.
pub fn missing_list_element(m: &Meta, seq: i64) -> Damage {
    Damage(format!(
        "the list at version {} has no element at position {seq} (its record says {}..{})",
        m.version, m.head, m.tail
    ))
}

/// The end of the versions reserved so far (the version record), `None`
/// if no collection was ever made.
pub fn reserved_versions(db: &Db) -> Result<Option<u64>> {
    db.get(VERSION_KEY)?
        .map(|raw| {
            raw.as_slice()
                .try_into()
                .map(u64::from_le_bytes)
                .map_err(|_| {
                    Damage(format!("the version record {} is malformed", hex(&raw))).in_db(db)
                })
        })
        .transpose()
}

fn garbage_key(version: u64) -> Vec<u8> {
    let mut k = vec![GARBAGE_TAG];
    k.extend_from_slice(&version.to_be_bytes());
    k
}

/// What a data key holds: a string or a collection's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rec {
    Str(Entry),
    Coll(Meta),
}

impl Rec {
    pub fn expire_at_ms(&self) -> Option<u64> {
        match self {
            Rec::Str(e) => e.expire_at_ms,
            Rec::Coll(m) => m.expire_at_ms,
        }
    }

    pub fn set_expire_at_ms(&mut self, at: Option<u64>) {
        match self {
            Rec::Str(e) => e.expire_at_ms = at,
            Rec::Coll(m) => m.expire_at_ms = at,
        }
    }

    pub fn expired(&self, now: u64) -> bool {
        self.expire_at_ms().is_some_and(|at| at <= now)
    }

    /// The collection version it holds, if any.
    pub fn version(&self) -> Option<u64> {
        match self {
            Rec::Str(_) => None,
            Rec::Coll(m) => Some(m.version),
        }
    }

    /// The name `TYPE` answers.
    pub fn type_name(&self) -> &'static str {
        match self {
            Rec::Str(_) => "string",
            Rec::Coll(m) => m.kind.name(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        match self {
            Rec::Str(e) => e.encode(),
            Rec::Coll(m) => m.encode(),
        }
    }

    /// The record `raw` read at `key`'s data key; [`Damage`] naming the
    /// key if it is not one this server writes.
    pub fn decode(raw: Vec<u8>, key: &[u8]) -> std::result::Result<Rec, Damage> {
        if raw.first() == Some(&VALUE_COLLECTION) {
            return Meta::decode(&raw).map(Rec::Coll).ok_or_else(|| {
                Damage(format!(
                    "the collection record of {} is malformed ({})",
                    key_name(key),
                    hex(&raw)
                ))
            });
        }
        Entry::decode(raw, key).map(Rec::Str)
    }
}

#[derive(Debug, Default)]
pub struct Stripe {
    /// Watched keys, by data key (so by database): (version, clients
    /// watching).
    watched: FastMap<Vec<u8>, (u64, u32)>,
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

/// The database map ([`DB_MAP_KEY`]): which stored database each
/// database number names, and where the next flush looks for a fresh one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbMap {
    /// Byte `n`: the stored database of number `n`; 16 distinct bytes.
    pub stored: [u8; DATABASES as usize],
    /// The stored database a flush handed out last ([`DATABASES`] - 1
    /// before any): the next flush takes the first byte after it, round
    /// the 256, that no number names ([`Keyspace::fresh_db`]).
    pub last_fresh: u8,
}

impl DbMap {
    /// Each number names its own stored database (no map key).
    pub fn identity() -> DbMap {
        DbMap {
            stored: std::array::from_fn(|i| i as u8),
            last_fresh: DATABASES - 1,
        }
    }

    /// Whether a number names stored database `s`.
    pub fn names(&self, s: u8) -> bool {
        self.stored.contains(&s)
    }

    /// The key's value: the 16 bytes alone while they are a permutation
    /// of 0..16 and no flush handed out a stored database (what a build
    /// before flushes by the map wrote, and reads), else 17.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = self.stored.to_vec();
        if self.last_fresh != DATABASES - 1 || v.iter().any(|&s| s >= DATABASES) {
            v.push(self.last_fresh);
        }
        v
    }

    /// The map `raw` encodes; `None` if it is not one (damage).
    pub fn decode(raw: &[u8]) -> Option<DbMap> {
        let (stored, last_fresh) = match raw.len() {
            16 => (raw, DATABASES - 1),
            17 => (&raw[..16], raw[16]),
            _ => return None,
        };
        let stored = <[u8; DATABASES as usize]>::try_from(stored).ok()?;
        if (1..stored.len()).any(|i| stored[..i].contains(&stored[i])) {
            return None;
        }
        if raw.len() == 16 && stored.iter().any(|&s| s >= DATABASES) {
            return None;
        }
        Some(DbMap { stored, last_fresh })
    }
}

/// The keyspace; shared by every connection.
pub struct Keyspace {
    /// The database; a replicated shard's snapshot install replaces it.
    db: Arc<DbSlot>,
    stripes: Box<[Mutex<Stripe>]>,
    /// Connections waiting for a stripe without blocking their thread
    /// ([`Keyspace::wait_for_stripe`]), one entry per stripe.
    waiters: Box<[StripeWaiters]>,
    global: RwLock<()>,
    sync_always: AtomicBool,
    /// A write happened since the last `everysec` sync.
    pub dirty: AtomicBool,
    /// Keys written since the last save (`INFO`'s
    /// `rdb_changes_since_last_save`).
    pub changes: AtomicU64,
    /// (next version to hand out, first version not reserved on disk).
    versions: Mutex<(u64, u64)>,
    /// The collection buckets ([`COLL_BUCKET_TAG`]), one bit each: a plain
    /// `SET` looks at what it replaces (so that a collection's elements
    /// become garbage) only when its key's bit is set, and otherwise
    /// writes blind. Invariant: every collection record's bucket bit is
    /// set here, and its bucket key is in the engine. A bit is set under
    /// the key's stripe lock before the batch with the record is written
    /// (the batch carries the bucket key), so a `SET` of the key, which
    /// holds the same lock, sees it; bits are cleared only by `FLUSHALL`
    /// (the keyspace held exclusively, [`BucketsCleared`]) and reloaded
    /// after a replacement. (Stored databases a flush left behind are
    /// outside the invariant: no command reads them.)
    coll_buckets: Box<[AtomicU64]>,
    /// Where a sorted set's live index entries (or a set's members) begin
    /// and end, learnt from its pops (by version): `ZPOPMIN` and `SPOP`
    /// start their walks there instead of skipping the tombstones of every
    /// member popped before (until a compaction drops them). Invariant: every live index entry of the
    /// version is in `lo .. hi`; an insert widens the bounds first, a pop
    /// narrows them only once committed. Entries of dropped versions go
    /// when the map is full; the record's own bounds ([`Meta::pop_lo`],
    /// written with each pop) tighten these, and are all that is known
    /// after a restart.
    pop_bounds: Mutex<FastMap<u64, PopBounds>>,
    /// Holes of all sets in `pop_bounds` (at most [`HOLES_MAX`]).
    holes_total: AtomicUsize,
    /// Times any bound in `pop_bounds` was narrowed (or all dropped), counted
    /// under its lock: a reader at a snapshot may use the bounds only while
    /// none was narrowed since it took the snapshot ([`Txn::index_bounds`]).
    narrowings: AtomicU64,
    /// A replicated shard is replacing the keyspace with a snapshot's
    /// (under the keyspace lock held exclusively): stale reads answer
    /// `-LOADING` instead of waiting for it.
    replacing: AtomicBool,
    /// Where the reclaimer goes on in the garbage version it last left
    /// unfinished: (version, first element key not yet deleted). Every
    /// element of that version below the key is deleted, and none is
    /// written again (no record names the version), so a round starts
    /// there instead of walking the tombstones of those before it (which
    /// made reclaiming a collection of n elements take n² / 2,000 steps).
    /// Dropped when the keyspace is replaced.
    reclaim_from: Mutex<Option<(u64, Vec<u8>)>>,
    /// The database map ([`DB_MAP_KEY`]) in memory: the stored database
    /// each database number names. Everything above the engine keys
    /// (clients' `SELECT`, `Txn::db`, watches, blocked clients, events)
    /// speaks database numbers; the keys are built from the stored
    /// database ([`Keyspace::stored_db`]). Changed only by `SWAPDB`,
    /// `FLUSHDB` and `FLUSHALL`, with the keyspace held exclusively.
    db_map: [AtomicU8; DATABASES as usize],
    /// [`DbMap::last_fresh`] of the map in memory (changed with `db_map`).
    last_fresh: AtomicU8,
    /// Changes of `db_map`, counted twice each (odd while one runs): a
    /// read holding no lock, which may have built its keys from the map
    /// before a swap and read after it, runs again if this moved
    /// ([`Keyspace::swaps`]).
    swaps: AtomicU64,
    /// Stored databases no number names that may still hold data keys:
    /// what a flush left behind, reclaimed in the background
    /// ([`Keyspace::reclaim`]). Found again at open by looking into every
    /// stored database the map does not name.
    garbage_dbs: Mutex<std::collections::BTreeSet<u8>>,
    /// Where the reclaiming of a garbage stored database goes on: (stored
    /// database, first data key not yet deleted). Every key of it below is
    /// deleted and none is written again (no number names it), so the
    /// next round starts there instead of walking the tombstones.
    db_reclaim_from: Mutex<Option<(u8, Vec<u8>)>>,
}

/// Collection buckets whose bits a `FLUSHALL` cleared before its commit
/// ([`Keyspace::clear_buckets_for_flushall`]): unless the commit is
/// written, their bits are set again when this is dropped (a bit set
/// without its collection costs a read; a clear one over a collection
/// would lose its elements).
struct BucketsCleared<'a> {
    ks: &'a Keyspace,
    buckets: Vec<usize>,
    committed: bool,
}

impl BucketsCleared<'_> {
    /// Deletes, in the commit's `batch`, the bucket keys whose bits are
    /// still clear (the commit's own collections set theirs again, and
    /// put their keys in the batch): call it after staging every record.
    fn stage_deletes(&self, batch: &mut WriteBatch) {
        for &b in &self.buckets {
            if self.ks.coll_buckets[b / 64].load(Ordering::Relaxed) & (1 << (b % 64)) == 0 {
                batch.delete(Keyspace::coll_bucket_key(b));
            }
        }
    }
}

impl Drop for BucketsCleared<'_> {
    fn drop(&mut self) {
        if !self.committed {
            for &b in &self.buckets {
                self.ks.coll_buckets[b / 64].fetch_or(1 << (b % 64), Ordering::Relaxed);
            }
        }
    }
}

/// Bounds of a sorted set's live index entries, or of a set's members
/// (engine keys): `lo` inclusive, `hi` exclusive; `None` is the
/// collection's own end.
#[derive(Debug, Clone, Default)]
pub struct PopBounds {
    pub lo: Option<Vec<u8>>,
    pub hi: Option<Vec<u8>>,
    /// Sets: members popped by seeking since the server started (how
    /// dense the tombstones among the members are).
    pub popped: u64,
    /// Sets: stretches of the members' key space known to hold no live
    /// member (start inclusive -> end exclusive, disjoint), learnt from
    /// the walks of committed pops; a seek that lands in one starts at its
    /// end instead of walking the tombstones again. Not copied by
    /// [`Keyspace::pop_bounds`]; read through [`Txn::past_holes`].
    holes: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// Most holes all sets together remember before they start over.
const HOLES_MAX: usize = 65_536;

/// Most versions `pop_bounds` remembers before it starts over.
const POP_BOUNDS_MAX: usize = 10_000;

/// The locks a command holds while it runs. Releasing a stripe wakes a
/// connection waiting for it ([`Keyspace::wait_for_stripe`]).
pub enum Held<'a> {
    None,
    Shared {
        _global: RwLockReadGuard<'a, ()>,
        stripes: Vec<(usize, MutexGuard<'a, Stripe>)>,
        waiters: &'a [StripeWaiters],
    },
    Exclusive {
        _global: RwLockWriteGuard<'a, ()>,
    },
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Held::Shared {
            stripes, waiters, ..
        } = self
        {
            for (i, guard) in stripes.drain(..) {
                drop(guard);
                waiters[i].released();
            }
        }
    }
}

/// The connections waiting for one stripe to be free. A connection's task
/// that finds its next write's stripe locked waits here, so that its
/// runtime thread serves other connections meanwhile instead of sleeping
/// in the lock (under redis-benchmark's one hot key, two runtime threads
/// meeting in one stripe spent a fifth of the server's CPU parking and
/// waking each other: `docs/experiments.md`, "Waiting for a hot key's
/// stripe without blocking a runtime thread").
#[derive(Default)]
pub struct StripeWaiters {
    count: AtomicUsize,
    notify: tokio::sync::Notify,
}

impl StripeWaiters {
    /// After its stripe was unlocked: wakes one waiter, if any. The fence
    /// pairs with the waiter's ([`Keyspace::wait_for_stripe`]): either the
    /// waiter sees the stripe unlocked, or this sees the waiter counted.
    fn released(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.count.load(Ordering::Relaxed) > 0 {
            self.notify.notify_one();
        }
    }
}

/// How [`Keyspace::wait_for_stripe`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StripeWait {
    /// The stripe was free when looked at.
    Free,
    /// An unlock woke the waiter.
    Woken,
    /// The waiter looked again after [`STRIPE_WAIT_RECHECK`] and found it free.
    Rechecked,
}

/// A waiter counted on its stripe; uncounted when dropped (the wait may be
/// cancelled with its connection).
struct Counted<'a>(&'a AtomicUsize);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How long a waiter sleeps at most before it looks at its stripe again:
/// a safety net only, for a wake-up that went to a connection that then
/// took no lock, and for the short stripe locks of `WATCH`'s bookkeeping,
/// which do not wake waiters.
const STRIPE_WAIT_RECHECK: std::time::Duration = std::time::Duration::from_millis(2);

impl Keyspace {
    pub fn new(db: Db, fsync: Fsync) -> Result<Keyspace> {
        let stripes = (0..STRIPES)
            .map(|_| Mutex::new(Stripe::default()))
            .collect();
        crate::migrate::ensure_format(&db)?;
        let reserved = reserved_versions(&db)?.unwrap_or(0);
        let ks = Keyspace {
            db: Arc::new(DbSlot::new(db)),
            stripes,
            waiters: (0..STRIPES).map(|_| StripeWaiters::default()).collect(),
            global: RwLock::new(()),
            sync_always: AtomicBool::new(fsync == Fsync::Always),
            dirty: AtomicBool::new(false),
            changes: AtomicU64::new(0),
            versions: Mutex::new((reserved, reserved)),
            coll_buckets: (0..(1usize << COLL_BUCKET_BITS) / 64)
                .map(|_| AtomicU64::new(0))
                .collect(),
            pop_bounds: Mutex::new(FastMap::default()),
            holes_total: AtomicUsize::new(0),
            narrowings: AtomicU64::new(0),
            replacing: AtomicBool::new(false),
            reclaim_from: Mutex::new(None),
            db_map: std::array::from_fn(|i| AtomicU8::new(i as u8)),
            last_fresh: AtomicU8::new(DATABASES - 1),
            swaps: AtomicU64::new(0),
            garbage_dbs: Mutex::new(Default::default()),
            db_reclaim_from: Mutex::new(None),
        };
        ks.load_db_map()?;
        ks.load_coll_buckets(reserved)?;
        Ok(ks)
    }

    fn coll_bucket(key: &[u8]) -> usize {
        (key_hash(key) >> (64 - COLL_BUCKET_BITS)) as usize
    }

    fn coll_bucket_key(bucket: usize) -> [u8; 5] {
        let mut k = [COLL_BUCKET_TAG, 0, 0, 0, 0];
        k[1..].copy_from_slice(&(bucket as u32).to_be_bytes());
        k
    }

    /// Whether `key` may hold a collection: false means it surely does not
    /// (no collection was ever stored in its bucket since the last flush).
    pub fn may_hold_collection(&self, key: &[u8]) -> bool {
        let b = Self::coll_bucket(key);
        self.coll_buckets[b / 64].load(Ordering::Relaxed) & (1 << (b % 64)) != 0
    }

    /// Sets `key`'s bucket bit before a collection record of it is
    /// written, adding the bucket key to `batch` if the bit was clear.
    fn note_collection(&self, key: &[u8], batch: &mut WriteBatch) {
        let b = Self::coll_bucket(key);
        let bit = 1 << (b % 64);
        if self.coll_buckets[b / 64].fetch_or(bit, Ordering::Relaxed) & bit == 0 {
            batch.put(Self::coll_bucket_key(b), []);
            batch.put(COLL_BUCKETS_KEPT_KEY, []);
        }
    }

    /// `FLUSHALL`, the keyspace held exclusively, before its commit stages
    /// any record: if at most [`FLUSHALL_BUCKET_KEYS_MAX`] buckets are
    /// marked, clears their bits, to be deleted in the commit's batch
    /// ([`BucketsCleared::stage_deletes`]); none otherwise.
    fn clear_buckets_for_flushall(&self) -> Result<BucketsCleared<'_>> {
        let mut buckets = Vec::new();
        let lo = [COLL_BUCKET_TAG, 0, 0, 0, 0];
        let db = self.db();
        let keys = db.range(lo.to_vec()..vec![COLL_BUCKET_TAG + 1]);
        for pair in keys.limit(FLUSHALL_BUCKET_KEYS_MAX + 1) {
            let (k, _) = pair?;
            // A malformed one fails the open; here it is left alone.
            if let Ok(b) = <[u8; 4]>::try_from(&k[1..]) {
                buckets.push(u32::from_be_bytes(b) as usize);
            }
        }
        if buckets.len() > FLUSHALL_BUCKET_KEYS_MAX {
            buckets.clear();
        }
        buckets.retain(|&b| b < 1 << COLL_BUCKET_BITS);
        for &b in &buckets {
            self.coll_buckets[b / 64].fetch_and(!(1 << (b % 64)), Ordering::Relaxed);
        }
        Ok(BucketsCleared {
            ks: self,
            buckets,
            committed: false,
        })
    }

    /// Loads the bucket bits from the engine. A database that reserved
    /// collection versions but keeps no bucket keys was written before
    /// them: its records are scanned once and its bucket keys written.
    fn load_coll_buckets(&self, reserved: u64) -> Result<()> {
        for w in self.coll_buckets.iter() {
            w.store(0, Ordering::Relaxed);
        }
        if self.db().get(COLL_BUCKETS_KEPT_KEY)?.is_none() {
            if reserved == 0 {
                return Ok(()); // no collection was ever made here
            }
            let mut batch = WriteBatch::new();
            // Written before there were other databases: all in 0.
            self.scan_from(0, 0, 0, |_, key, rec| {
                if matches!(rec, Rec::Coll(_)) {
                    self.note_collection(key, &mut batch);
                }
                true
            })?;
            batch.put(COLL_BUCKETS_KEPT_KEY, []);
            return self.db().write(batch);
        }
        let lo = [COLL_BUCKET_TAG, 0, 0, 0, 0];
        for pair in self.db().range(lo.to_vec()..vec![COLL_BUCKET_TAG + 1]) {
            let (k, _) = pair?;
            let b = <[u8; 4]>::try_from(&k[1..]).map_err(|_| {
                Damage(format!(
                    "the collection bucket key {} is malformed",
                    hex(&k)
                ))
                .in_db(&self.db())
            })?;
            let b = u32::from_be_bytes(b) as usize;
            if b >= 1 << COLL_BUCKET_BITS {
                return Err(Damage(format!(
                    "the collection bucket key {} names no bucket",
                    hex(&k)
                ))
                .in_db(&self.db()));
            }
            self.coll_buckets[b / 64].fetch_or(1 << (b % 64), Ordering::Relaxed);
        }
        Ok(())
    }

    /// The database now (see [`DbSlot::get`]: hold it for an operation).
    pub fn db(&self) -> Arc<Db> {
        self.db.get()
    }

    /// The database's slot, for a snapshot install that replaces it.
    pub fn db_slot(&self) -> &Arc<DbSlot> {
        &self.db
    }

    /// The stored database that database number `db` names now (the
    /// database map, [`DB_MAP_KEY`]): where its engine keys are.
    pub fn stored_db(&self, db: u8) -> u8 {
        self.db_map[usize::from(db)].load(Ordering::Acquire)
    }

    /// The database number that names stored database `stored`; `None`
    /// if none does (a flush left it behind: garbage).
    fn db_of_stored(&self, stored: u8) -> Option<u8> {
        (0..DATABASES).find(|&d| self.stored_db(d) == stored)
    }

    /// How many times the database map was changed, twice per `SWAPDB`
    /// (odd while one runs). A command holding no lock reads it before and
    /// after: if it moved, or was odd, its keys may name another database
    /// than it meant, and it runs again.
    pub fn swaps(&self) -> u64 {
        self.swaps.load(Ordering::Acquire)
    }

    /// Reads the database map from the engine (identity if absent), and
    /// finds the stored databases it leaves holding keys: garbage of
    /// flushes not yet reclaimed.
    fn load_db_map(&self) -> Result<()> {
        let map = match self.db().get(DB_MAP_KEY)? {
            None => DbMap::identity(),
            Some(raw) => match DbMap::decode(&raw) {
                Some(m) => m,
                None => {
                    return Err(Damage(format!(
                        "the database map {} is not 16 distinct stored databases",
                        hex(&raw)
                    ))
                    .in_db(&self.db()))
                }
            },
        };
        self.set_db_map(map);
        let mut garbage = self.stored_dbs_present()?;
        garbage.retain(|&s| !map.names(s));
        *self.garbage_dbs.lock() = garbage;
        *self.db_reclaim_from.lock() = None;
        Ok(())
    }

    /// The stored databases that hold a data key: one seek per stored
    /// database present, and one more.
    fn stored_dbs_present(&self) -> Result<std::collections::BTreeSet<u8>> {
        let db = self.db();
        let first = |lo: Vec<u8>, hi: Vec<u8>| db.range(lo..hi).next().transpose();
        let mut present = std::collections::BTreeSet::new();
        if first(data_prefix(0), data_end(0))?.is_some() {
            present.insert(0);
        }
        let mut from = data_prefix(1);
        while let Some((k, _)) = first(from, vec![DB_DATA_TAG + 1])? {
            let Some(&s) = k.get(1) else {
                return Err(Damage(format!("the data key {} is malformed", hex(&k))).in_db(&db));
            };
            present.insert(s);
            if s == u8::MAX {
                break;
            }
            from = data_prefix(s + 1);
        }
        Ok(present)
    }

    /// `SWAPDB a b`: databases `a` and `b` trade contents, for every
    /// client at once, by swapping their entries in the database map: one
    /// engine write of one key, so a crash leaves either map and no key
    /// is copied. Needs the keyspace held exclusively (`held`). Touches the
    /// watched keys of either database that exist in either (redis-server's
    /// rule); the caller then serves the clients blocked in either.
    pub fn swap_databases(&self, held: &mut Held<'_>, a: u8, b: u8) -> Result<()> {
        debug_assert!(matches!(held, Held::Exclusive { .. }));
        if a == b {
            return Ok(());
        }
        let (sa, sb) = (self.stored_db(a), self.stored_db(b));
        let present = self.watched_in_either(a, b)?;
        let mut map = self.db_map_now();
        map.stored.swap(usize::from(a), usize::from(b));
        let mut batch = WriteBatch::new();
        batch.put(DB_MAP_KEY, map.encode());
        self.swaps.fetch_add(1, Ordering::AcqRel);
        let written = self.write(batch);
        if written.is_ok() {
            self.db_map[usize::from(a)].store(sb, Ordering::Release);
            self.db_map[usize::from(b)].store(sa, Ordering::Release);
        }
        self.swaps.fetch_add(1, Ordering::AcqRel);
        written?;
        self.changes.fetch_add(1, Ordering::Relaxed);
        self.touch(held, present.into_iter());
        Ok(())
    }

    /// The watched keys of databases `a` and `b` that exist (expired or
    /// not) in either: those a swap of the two touches.
    fn watched_in_either(&self, a: u8, b: u8) -> Result<Vec<DbKey>> {
        let (sa, sb) = (self.stored_db(a), self.stored_db(b));
        let mut watched = Vec::new();
        for s in self.stripes.iter() {
            for dk in s.lock().watched.keys() {
                if let Some((d, _, key)) = split_any_data_key(dk) {
                    if d == a || d == b {
                        watched.push((d, key.to_vec()));
                    }
                }
            }
        }
        let mut present = Vec::new();
        for (d, key) in watched {
            if self.db().get(data_key(sa, &key))?.is_some()
                || self.db().get(data_key(sb, &key))?.is_some()
            {
                present.push((d, key));
            }
        }
        Ok(present)
    }

    /// The database map in memory.
    fn db_map_now(&self) -> DbMap {
        DbMap {
            stored: std::array::from_fn(|i| self.stored_db(i as u8)),
            last_fresh: self.last_fresh.load(Ordering::Acquire),
        }
    }

    fn set_db_map(&self, map: DbMap) {
        for (slot, s) in self.db_map.iter().zip(map.stored) {
            slot.store(s, Ordering::Release);
        }
        self.last_fresh.store(map.last_fresh, Ordering::Release);
    }

    /// A stored database for a flush to map a number to: the first byte
    /// after `map`'s last one handed out, round the 256, that neither
    /// `map` (the map being made) nor `committed` (the map on disk, which
    /// a transaction that remapped numbers in memory may still put back)
    /// names. Chosen from the maps alone, so every node of a replicated
    /// shard, applying the same entries to the same map, chooses the
    /// same. Any keys it still holds (garbage of a flush not yet reclaimed
    /// on this node, which the round through 224 or more bytes makes rare)
    /// are deleted first, here. Needs the keyspace held exclusively.
    fn fresh_db(&self, map: &DbMap, committed: &DbMap) -> Result<u8> {
        let s = (1..=u16::from(u8::MAX) + 1)
            .map(|i| map.last_fresh.wrapping_add(i as u8))
            .find(|&s| !map.names(s) && !committed.names(s))
            .expect("32 numbers name at most 32 of 256 stored databases");
        // Without a bound on the keys, it returns once `s` is empty.
        self.reclaim_db(s, usize::MAX)?;
        Ok(s)
    }

    /// A collection version no collection had before, nor will have again.
    /// Versions are reserved a block at a time by writing the block's end
    /// to `VERSION_KEY` before any is handed out: every batch that uses one
    /// is sequenced after that write, so recovery, which yields a prefix
    /// of history, never keeps a use without its reservation.
    pub fn new_version(&self) -> Result<u64> {
        let mut v = self.versions.lock();
        if v.0 == v.1 {
            let limit = v.1 + VERSION_BLOCK;
            // The format key with it: a database that reserved versions
            // without it was written before keyspace format 1.
            let mut batch = WriteBatch::new();
            batch.put(VERSION_KEY, limit.to_le_bytes());
            batch.put(KEYSPACE_FORMAT_KEY, [KEYSPACE_FORMAT]);
            self.db().write(batch)?;
            v.1 = limit;
        }
        v.0 += 1;
        Ok(v.0 - 1)
    }

    /// The keyspace held exclusively for replacing all of it (a replicated
    /// shard installing a snapshot); stale reads meanwhile answer
    /// `-LOADING` ([`Keyspace::hold_for_stale_read`]). Call
    /// [`Keyspace::replaced`] before dropping the guard.
    pub fn lock_for_replace(&self) -> Held<'_> {
        self.replacing.store(true, Ordering::SeqCst);
        self.lock_all()
    }

    /// Keeps a replacement of the keyspace out while a stale read
    /// (`READONLY` on a replica) runs, so that it sees the state before
    /// or after, never one half copied; `None` while a replacement runs.
    /// Reads on a single server and the leader's need no lock: their
    /// keyspace is never replaced.
    pub fn hold_for_stale_read(&self) -> Option<Held<'_>> {
        let g = match self.global.try_read() {
            Some(g) => g,
            None if self.replacing.load(Ordering::SeqCst) => return None,
            // A `FLUSHDB` or a whole-keyspace `EXEC` being applied: short.
            None => self.global.read(),
        };
        Some(Held::Shared {
            _global: g,
            stripes: Vec::new(),
            waiters: &self.waiters,
        })
    }

    /// Forgets what memory knew of the keyspace after it was replaced
    /// underneath (a replicated shard installed a snapshot): rereads the
    /// version reservation and the collection buckets, and drops the
    /// sorted sets' pop bounds, which were learnt under versions the
    /// snapshot may use for other sets.
    pub fn replaced(&self) -> Result<()> {
        {
            let mut all = self.pop_bounds.lock();
            all.clear();
            self.narrowings.fetch_add(1, Ordering::AcqRel);
        }
        self.holes_total.store(0, Ordering::Relaxed);
        *self.reclaim_from.lock() = None;
        // A snapshot from a node of an earlier build holds the old layout.
        let r = crate::migrate::ensure_format(&self.db())
            .and_then(|_| self.load_db_map())
            .and_then(|_| self.reload_versions())
            .and_then(|reserved| self.load_coll_buckets(reserved));
        self.replacing.store(false, Ordering::SeqCst);
        r
    }

    /// Rereads the version reservation after the keyspace was replaced
    /// underneath (a replicated shard installed a snapshot); returns it.
    fn reload_versions(&self) -> Result<u64> {
        let reserved = reserved_versions(&self.db())?.unwrap_or(0);
        let mut v = self.versions.lock();
        // Past both: versions handed out here before stay unused.
        let next = reserved.max(v.1);
        *v = (next, next);
        Ok(reserved)
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

    /// Waits until the stripe of `key` is unlocked, yielding the thread to
    /// other tasks meanwhile. Only a hint: the caller then locks as usual
    /// ([`Keyspace::lock_keys`]) and may still find the stripe taken. A
    /// connection that finds the stripe free takes it even when others
    /// wait (they were woken, or will be at the next unlock): waiters that
    /// came first went first in a version that made it so, and the stripe
    /// then sat idle while a woken waiter's thread came round to it.
    pub async fn wait_for_stripe(&self, key: &[u8]) -> StripeWait {
        self.wait_for_stripe_rechecking(key, STRIPE_WAIT_RECHECK)
            .await
    }

    async fn wait_for_stripe_rechecking(
        &self,
        key: &[u8],
        recheck: std::time::Duration,
    ) -> StripeWait {
        let i = Self::stripe_of(key);
        let (stripe, w) = (&self.stripes[i], &self.waiters[i]);
        while stripe.is_locked() {
            w.count.fetch_add(1, Ordering::Relaxed);
            let _counted = Counted(&w.count);
            let notified = w.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // Pairs with the fence of `StripeWaiters::released`.
            std::sync::atomic::fence(Ordering::SeqCst);
            if !stripe.is_locked() {
                break;
            }
            let how = match tokio::time::timeout(recheck, notified).await {
                Ok(()) => StripeWait::Woken,
                Err(_) => StripeWait::Rechecked,
            };
            if !stripe.is_locked() {
                return how;
            }
        }
        StripeWait::Free
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
            waiters: &self.waiters,
        }
    }

    pub fn lock_all(&self) -> Held<'_> {
        Held::Exclusive {
            _global: self.global.write(),
        }
    }

    /// The known bounds of `version`'s live index entries.
    pub fn pop_bounds(&self, version: u64) -> PopBounds {
        match self.pop_bounds.lock().get(&version) {
            Some(b) => PopBounds {
                lo: b.lo.clone(),
                hi: b.hi.clone(),
                popped: b.popped,
                holes: BTreeMap::new(),
            },
            None => PopBounds::default(),
        }
    }

    /// Widens `version`'s bounds to take the index entry `key` in, and
    /// takes it out of the holes.
    fn widen_pop_bounds(&self, version: u64, key: &[u8]) {
        let mut all = self.pop_bounds.lock();
        if let Some(b) = all.get_mut(&version) {
            widen(b, key);
            let before = b.holes.len();
            split_hole(&mut b.holes, key);
            self.count_holes(before, b.holes.len());
        }
    }

    /// The end of the committed hole of set `version` holding `key`, if
    /// one does.
    fn hole_end(&self, version: u64, key: &[u8]) -> Option<Vec<u8>> {
        let all = self.pop_bounds.lock();
        let b = all.get(&version)?;
        let (_, end) = b
            .holes
            .range::<[u8], _>((Unbounded, Included(key)))
            .next_back()?;
        (key < end.as_slice()).then(|| end.clone())
    }

    /// Records that `start .. end` of set `version` holds no live member
    /// (a committed pop walked it).
    fn add_hole(&self, version: u64, start: Vec<u8>, end: Vec<u8>) {
        let mut all = self.pop_bounds.lock();
        if self.holes_total.load(Ordering::Relaxed) >= HOLES_MAX {
            for b in all.values_mut() {
                b.holes.clear();
            }
            self.holes_total.store(0, Ordering::Relaxed);
        }
        let b = Self::bounds_entry(&mut all, version);
        let before = b.holes.len();
        merge_hole(&mut b.holes, start, end);
        self.count_holes(before, b.holes.len());
    }

    fn count_holes(&self, before: usize, after: usize) {
        if after >= before {
            self.holes_total
                .fetch_add(after - before, Ordering::Relaxed);
        } else {
            // Saturating: a reset of the whole map may have zeroed it.
            let _ = self
                .holes_total
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                    Some(t.saturating_sub(before - after))
                });
        }
    }

    /// Narrows `version`'s bounds after a committed pop: the new start
    /// (`max` false) or end (`max` true).
    fn narrow_pop_bounds(&self, version: u64, max: bool, key: Vec<u8>) {
        let mut all = self.pop_bounds.lock();
        // Counted before the bound changes, under the lock that guards it.
        self.narrowings.fetch_add(1, Ordering::AcqRel);
        let b = Self::bounds_entry(&mut all, version);
        if max {
            b.hi = Some(key);
        } else {
            b.lo = Some(key);
        }
    }

    fn bounds_entry(all: &mut FastMap<u64, PopBounds>, version: u64) -> &mut PopBounds {
        if all.len() >= POP_BOUNDS_MAX && !all.contains_key(&version) {
            // The holes go with them (the count is then an over-estimate
            // until the next reset, which only resets sooner).
            all.clear();
        }
        all.entry(version).or_default()
    }

    /// Registers a client's watch of `key`; returns the version to compare.
    /// Watches `key` of database `db`: its version now.
    pub fn watch(&self, db: u8, key: &[u8]) -> u64 {
        let mut s = self.stripes[Self::stripe_of(key)].lock();
        let e = s.watched.entry(data_key(db, key)).or_insert((0, 0));
        e.1 += 1;
        e.0
    }

    pub fn unwatch(&self, db: u8, key: &[u8]) {
        let mut s = self.stripes[Self::stripe_of(key)].lock();
        let dk = data_key(db, key);
        if let Some(e) = s.watched.get_mut(&dk) {
            e.1 -= 1;
            if e.1 == 0 {
                s.watched.remove(&dk);
            }
        }
    }

    /// The version of a watched key of database `db`; called with its
    /// stripe held by `held`.
    pub fn watched_version(&self, held: &Held<'_>, db: u8, key: &[u8]) -> Option<u64> {
        let i = Self::stripe_of(key);
        let dk = data_key(db, key);
        match held {
            Held::Shared { stripes, .. } => stripes
                .iter()
                .find(|(j, _)| *j == i)
                .and_then(|(_, s)| s.watched.get(&dk).map(|e| e.0)),
            Held::Exclusive { .. } => self.stripes[i].lock().watched.get(&dk).map(|e| e.0),
            Held::None => None,
        }
    }

    /// The record `raw` read at `key`'s data key; damage is the engine's
    /// [`sluicedb::Error::Corruption`].
    pub fn decode(&self, raw: Vec<u8>, key: &[u8]) -> Result<Rec> {
        Rec::decode(raw, key).map_err(|d| d.in_db(&self.db()))
    }

    /// Reads `key` of database `db` (expired records read as absent).
    pub fn read(&self, db: u8, key: &[u8], now: u64) -> Result<Option<Rec>> {
        Ok(self
            .read_raw(&ReadOptions::default(), db, key)?
            .filter(|r| !r.expired(now)))
    }

    /// Reads `key`'s record in database `db`, expired or not.
    pub fn read_raw(&self, opts: &ReadOptions<'_>, db: u8, key: &[u8]) -> Result<Option<Rec>> {
        match self.db().get_opt(opts, data_key(self.stored_db(db), key))? {
            Some(raw) => self.decode(raw, key).map(Some),
            None => Ok(None),
        }
    }

    /// [`Keyspace::read_raw`] of each of `keys`, all at one point in time
    /// (one engine multi-key read).
    pub fn read_raw_many(
        &self,
        opts: &ReadOptions<'_>,
        db: u8,
        keys: &[&[u8]],
    ) -> Result<Vec<Option<Rec>>> {
        let stored = self.stored_db(db);
        let data_keys: Vec<Vec<u8>> = keys.iter().map(|k| data_key(stored, k)).collect();
        let raws = self.db().multi_get_opt(opts, &data_keys)?;
        (raws.into_iter().zip(keys))
            .map(|(raw, key)| raw.map(|r| self.decode(r, key)).transpose())
            .collect()
    }

    /// The collection version `key` holds in the engine (expired or not),
    /// asked of the index alone: a collection's record is small, from
    /// [`META_BYTES`] to [`META_MAX_BYTES`] long (a set's or sorted set's
    /// pop bounds vary it), so a separated value of another size is a
    /// string and is not read (the blind `SET` over a large string pays
    /// one index lookup, no value read).
    pub fn replaced_version(&self, db: u8, key: &[u8]) -> Result<Option<u64>> {
        let opts = ReadOptions::default();
        let db = self.stored_db(db);
        let raw = match self.db().peek_opt(&opts, data_key(db, key))? {
            None => return Ok(None),
            Some(ValueRef::Inline(raw)) => raw,
            Some(ValueRef::Separated { value_bytes })
                if (META_BYTES as u64..=META_MAX_BYTES as u64).contains(&value_bytes) =>
            {
                match self.db().get_opt(&opts, data_key(db, key))? {
                    Some(raw) => raw,
                    None => return Ok(None),
                }
            }
            Some(_) => return Ok(None),
        };
        if raw.first() != Some(&VALUE_COLLECTION) {
            return Ok(None);
        }
        Ok(self.decode(raw, key)?.version())
    }

    /// Writes a batch, synced when `appendfsync always`.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        if self.sync_always.load(Ordering::Relaxed) {
            self.db().write_opt(&WriteOptions::synced(), batch)
        } else {
            self.dirty.store(true, Ordering::Relaxed);
            self.db().write(batch)
        }
    }

    /// The watched keys that exist in the engine (expired or not), of
    /// database `db` (`None`: of every database), as (database, key).
    fn watched_present(&self, db: Option<u8>) -> Result<Vec<(u8, Vec<u8>)>> {
        let mut keys = Vec::new();
        for s in self.stripes.iter() {
            keys.extend(s.lock().watched.keys().cloned());
        }
        let mut present = Vec::new();
        for dk in keys {
            let Some((d, _, key)) = split_any_data_key(&dk) else {
                continue;
            };
            if db.is_none_or(|db| db == d)
                && self.db().get(data_key(self.stored_db(d), key))?.is_some()
            {
                present.push((d, key.to_vec()));
            }
        }
        Ok(present)
    }

    /// Bumps the version of every watched key among `keys` (database,
    /// key).
    fn touch(&self, held: &mut Held<'_>, keys: impl Iterator<Item = (u8, Vec<u8>)>) {
        match held {
            Held::Exclusive { .. } => {
                for (db, k) in keys {
                    let mut s = self.stripes[Self::stripe_of(&k)].lock();
                    if s.watched.is_empty() {
                        continue;
                    }
                    if let Some(e) = s.watched.get_mut(&data_key(db, &k)) {
                        e.0 += 1;
                    }
                }
            }
            Held::Shared { stripes, .. } => {
                for (db, k) in keys {
                    let i = Self::stripe_of(&k);
                    let Some((_, s)) = stripes.iter_mut().find(|(j, _)| *j == i) else {
                        continue;
                    };
                    // Nothing watched here (the common case): no key built.
                    if s.watched.is_empty() {
                        continue;
                    }
                    if let Some(e) = s.watched.get_mut(&data_key(db, &k)) {
                        e.0 += 1;
                    }
                }
            }
            Held::None => {}
        }
    }

    /// Every Redis key of database `db` present now (not expired), in
    /// hash order, from hash `from`: `f` gets (hash, key, entry) and
    /// returns false to stop.
    pub fn scan_from(
        &self,
        db: u8,
        from: u64,
        now: u64,
        f: impl FnMut(u64, &[u8], &Rec) -> bool,
    ) -> Result<()> {
        self.scan_seeing_expired(db, from, now, f, |_| {})
    }

    /// [`Keyspace::scan_from`], with `expired` given each key passed over
    /// because its expiry is past (a command that expires it lazily, as
    /// `SCAN` and `RANDOMKEY` do, notes it: [`Txn::note_expired`]).
    pub fn scan_seeing_expired(
        &self,
        db: u8,
        from: u64,
        now: u64,
        mut f: impl FnMut(u64, &[u8], &Rec) -> bool,
        mut expired: impl FnMut(&[u8]),
    ) -> Result<()> {
        let db = self.stored_db(db);
        let lo = data_key_at_hash(db, from);
        for pair in self.db().range(lo..data_end(db)) {
            let (k, v) = pair?;
            let Some((h, key)) = split_data_key(db, &k) else {
                continue;
            };
            let e = self.decode(v, key)?;
            if e.expired(now) {
                expired(key);
                continue;
            }
            if !f(h, key, &e) {
                break;
            }
        }
        Ok(())
    }

    /// One reaper round: deletes keys whose expiry passed, by the expiry
    /// index, at most `max` index entries; returns the keys it deleted,
    /// as (database, key), and whether entries remain due.
    pub fn reap(&self, max: usize) -> Result<(Vec<DbKey>, bool)> {
        let (due, more) = self.due_expiries(now_ms(), max)?;
        let mut deleted = Vec::new();
        for d in &due {
            let key = d.key();
            let mut held = self.lock_keys(&[key]);
            let mut batch = WriteBatch::new();
            batch.delete(&d.index_key);
            // Under the lock: no swap or flush now until the delete is
            // written. One since the entry was found may have left its
            // stored database to no number: the entry alone goes.
            let Some(db) = self.db_of_stored(d.stored) else {
                self.db().write(batch)?;
                continue;
            };
            if self.stage_expired_delete(db, key, &mut batch)?.is_some() {
                deleted.push((db, key.to_vec()));
                self.touch(&mut held, std::iter::once((db, key.to_vec())));
            }
            self.write(batch)?;
        }
        Ok((deleted, more))
    }

    /// The time index entries due at `now`, database 0's first, then the
    /// others', each oldest first, at most `max`, and whether more are due.
    /// Entries of stored databases no number names (a flush left them
    /// behind) are deleted here, on this node alone, and count toward
    /// `max`: they name no key of any database, and left in place they
    /// would come first in every round.
    pub fn due_expiries(&self, now: u64, max: usize) -> Result<(Vec<DueExpiry>, bool)> {
        // Held shared: the map stays as it is until the stale entries
        // are deleted (a stored database named again could hold an entry
        // of the same bytes).
        let _held = self.lock_keys(&[]);
        let mut due = Vec::new();
        let mut stale = WriteBatch::new();
        for (db_tag, end) in [
            (EXPIRY_TAG, expiry_key(0, now.saturating_add(1), b"")),
            (
                DB_EXPIRY_TAG,
                expiry_key(1, now.saturating_add(1), b"")[..9].to_vec(),
            ),
        ] {
            for p in self
                .db()
                .range(vec![db_tag]..end)
                .limit(max + 1 - due.len() - stale.len())
            {
                let (k, _) = p?;
                let at = k
                    .get(1..9)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_be_bytes);
                let stored = if db_tag == EXPIRY_TAG {
                    Some(0)
                } else {
                    k.get(9).copied().filter(|&d| d > 0)
                };
                let (Some(at), Some(stored)) = (at, stored) else {
                    return Err(corrupt_index_key(&k).in_db(&self.db()));
                };
                match self.db_of_stored(stored) {
                    Some(db) => due.push(DueExpiry {
                        index_key: k,
                        db,
                        stored,
                        at_ms: at,
                    }),
                    None => {
                        stale.delete(k);
                    }
                }
            }
            if due.len() + stale.len() > max {
                break;
            }
        }
        let more = due.len() + stale.len() > max;
        if !stale.is_empty() {
            self.db().write(stale)?;
        }
        due.truncate(max);
        Ok((due, more))
    }

    /// Deletes `key` if its record is past its expiry, as the reaper
    /// would (with its time index entry): redis-server's lazy expiry, for
    /// a key a command found expired. True if it deleted it; false if the
    /// key is gone or was written again meanwhile (whoever did that
    /// reports it). Takes `key`'s stripe lock: call it holding none.
    pub fn expire_if_due(&self, db: u8, key: &[u8]) -> Result<bool> {
        let mut held = self.lock_keys(&[key]);
        let mut batch = WriteBatch::new();
        let Some(at) = self.stage_expired_delete(db, key, &mut batch)? else {
            return Ok(false);
        };
        batch.delete(expiry_key(self.stored_db(db), at, key));
        self.write(batch)?;
        self.touch(&mut held, std::iter::once((db, key.to_vec())));
        Ok(true)
    }

    /// Stages the deletion of `key` (and of its collection's elements, as
    /// garbage) if its record is past its expiry; returns that expiry.
    /// The caller holds `key`'s stripe lock.
    fn stage_expired_delete(
        &self,
        db: u8,
        key: &[u8],
        batch: &mut WriteBatch,
    ) -> Result<Option<u64>> {
        let db = self.stored_db(db);
        let Some(raw) = self.db().get(data_key(db, key))? else {
            return Ok(None);
        };
        let e = self.decode(raw, key)?;
        if !e.expired(now_ms()) {
            return Ok(None);
        }
        batch.delete(data_key(db, key));
        if let Some(v) = e.version() {
            batch.put(garbage_key(v), []);
        }
        Ok(e.expire_at_ms())
    }
}

impl Keyspace {
    /// One reclaimer round: deletes the elements of collections no key
    /// holds any more, at most about `max` element keys; returns how many
    /// it deleted. No record names a garbage version, so no command reads
    /// or writes its elements; the round still holds the keyspace lock
    /// shared, because a replicated shard installing a snapshot replaces
    /// the keyspace (exclusively) with one whose versions were numbered by
    /// another node: a version garbage here before may be a live
    /// collection there, whose elements a round listed before and deleting
    /// after would destroy.
    ///
    /// First the stored databases flushes left behind
    /// ([`Keyspace::reclaim_db`]), whose collections' versions become
    /// garbage keys as they go; then the garbage versions' elements.
    pub fn reclaim(&self, max: usize) -> Result<u64> {
        let _held = self.lock_keys(&[]);
        let mut deleted = 0u64;
        let dbs: Vec<u8> = self.garbage_dbs.lock().iter().copied().collect();
        for s in dbs {
            let (n, done) = self.reclaim_db(s, max.saturating_sub(deleted as usize))?;
            deleted += n;
            if !done {
                return Ok(deleted);
            }
        }
        let garbage: Vec<Vec<u8>> = self
            .db()
            .range(vec![GARBAGE_TAG]..vec![GARBAGE_TAG + 1])
            .limit(16)
            .map(|p| p.map(|(k, _)| k))
            .collect::<Result<_>>()?;
        for g in garbage {
            let Some(version) = g.get(1..9).and_then(|b| b.try_into().ok()) else {
                self.db().delete(&g)?;
                continue;
            };
            let version = u64::from_be_bytes(version);
            let mut from = match self.reclaim_from.lock().take() {
                Some((v, from)) if v == version => from,
                _ => element_prefix(version),
            };
            loop {
                let mut batch = WriteBatch::new();
                let mut last = None;
                for pair in self
                    .db()
                    .range(from.clone()..element_end(version))
                    .limit(RECLAIM_BATCH_KEYS)
                {
                    let (k, _) = pair?;
                    batch.delete(&k);
                    last = Some(k);
                }
                let Some(mut last) = last else {
                    self.db().delete(&g)?;
                    break;
                };
                deleted += batch.len() as u64;
                self.db().write(batch)?;
                // The next key after the last deleted.
                last.push(0);
                from = last;
                if deleted as usize >= max {
                    *self.reclaim_from.lock() = Some((version, from));
                    return Ok(deleted);
                }
            }
        }
        Ok(deleted)
    }

    /// Deletes the data keys of stored database `s`, which no number
    /// names, in batches of [`RECLAIM_BATCH_KEYS`], with the time index
    /// entry each record names and, for a collection, its version's
    /// garbage key in the same batch (its elements go as a `DEL`'s do), so
    /// a crash anywhere leaves every element owned by a record or by
    /// garbage. Stops once about `max` keys went; returns how many, and
    /// whether `s` is empty (then it is no longer garbage). Time index
    /// entries its records did not name (left behind by a later write)
    /// are dropped by the reaper when due ([`Keyspace::due_expiries`]). A
    /// record that does not decode is deleted all the same: no number can
    /// read it. Needs the keyspace lock, shared or exclusive (the map
    /// holds still); writes unsynced (the keys are unreachable already).
    fn reclaim_db(&self, s: u8, max: usize) -> Result<(u64, bool)> {
        debug_assert!((0..DATABASES).all(|d| self.stored_db(d) != s));
        let mut from = {
            let mut cursor = self.db_reclaim_from.lock();
            match cursor.take() {
                Some((d, from)) if d == s => from,
                // Another's place: kept for it.
                other => {
                    *cursor = other;
                    data_prefix(s)
                }
            }
        };
        let mut deleted = 0u64;
        loop {
            let mut batch = WriteBatch::new();
            let mut last = None;
            let db = self.db();
            for pair in db
                .range(from.clone()..data_end(s))
                .limit(RECLAIM_BATCH_KEYS)
            {
                let (k, v) = pair?;
                if let Some((_, key)) = split_data_key(s, &k) {
                    if let Ok(r) = Rec::decode(v, key) {
                        if let Some(version) = r.version() {
                            batch.put(garbage_key(version), []);
                        }
                        if let Some(at) = r.expire_at_ms() {
                            batch.delete(expiry_key(s, at, key));
                        }
                    }
                }
                batch.delete(&k);
                last = Some(k);
            }
            let Some(mut last) = last else {
                self.garbage_dbs.lock().remove(&s);
                return Ok((deleted, true));
            };
            deleted += batch.len() as u64;
            db.write(batch)?;
            last.push(0);
            from = last;
            if deleted as usize >= max {
                *self.db_reclaim_from.lock() = Some((s, from));
                return Ok((deleted, false));
            }
        }
    }

    /// Whether any garbage record, or stored database left behind by a
    /// flush, is left.
    pub fn garbage_left(&self) -> Result<bool> {
        if !self.garbage_dbs.lock().is_empty() {
            return Ok(true);
        }
        Ok(self
            .db()
            .range(vec![GARBAGE_TAG]..vec![GARBAGE_TAG + 1])
            .next()
            .transpose()?
            .is_some())
    }

    /// Checks that every collection's metadata agrees with its elements
    /// and that every element belongs to a collection or to garbage;
    /// returns what disagrees (empty: consistent). Reads at one snapshot,
    /// so it may run while the server serves.
    pub fn check(&self) -> Result<Vec<String>> {
        let snap = self.db().snapshot();
        let opts = ReadOptions::at(&snap);
        let mut problems = Vec::new();
        let mut owned = std::collections::BTreeSet::new();
        // Versions held by records of stored databases no number names:
        // garbage as their database is reclaimed, so no key may hold them.
        let mut left_behind = Vec::new();
        let data = (self
            .db()
            .range_opt(&opts, vec![DATA_TAG]..vec![DATA_TAG + 1]))
        .chain(
            self.db()
                .range_opt(&opts, vec![DB_DATA_TAG]..vec![DB_DATA_TAG + 1]),
        );
        for pair in data {
            let (k, v) = pair?;
            let Some((stored, h, key)) = split_any_data_key(&k) else {
                problems.push(format!("data key {k:?} is malformed"));
                continue;
            };
            if h != key_hash(key) {
                problems.push(format!("{key:?} is stored under another key's hash"));
            }
            if self.db_of_stored(stored).is_none() {
                if !self.garbage_dbs.lock().contains(&stored) {
                    problems.push(format!(
                        "stored database {stored} is named by no number and not reclaimed"
                    ));
                }
                if let Ok(Rec::Coll(m)) = Rec::decode(v, key) {
                    left_behind.push(m.version);
                }
                continue;
            }
            let Rec::Coll(m) = self.decode(v, key)? else {
                continue;
            };
            let bucket = Self::coll_bucket_key(Self::coll_bucket(key));
            if !self.may_hold_collection(key) || self.db().get_opt(&opts, bucket)?.is_none() {
                problems.push(format!(
                    "{:?}: its collection bucket is not marked",
                    String::from_utf8_lossy(key)
                ));
            }
            if !owned.insert(m.version) {
                problems.push(format!("version {} is held by two keys", m.version));
            }
            let name = String::from_utf8_lossy(key);
            let (mut members, mut index, mut seqs) = (0u64, 0u64, Vec::new());
            for e in self.db().range_opt(&opts, m.prefix()..m.end()) {
                let (ek, ev) = e?;
                let suffix = m.suffix_of(&ek);
                let bounded = match m.kind {
                    CollKind::Set => true,
                    CollKind::ZSet => suffix.first() == Some(&ZSET_INDEX),
                    _ => false,
                };
                if bounded
                    && (m.pop_lo.as_deref().is_some_and(|lo| suffix < lo)
                        || m.pop_hi.as_deref().is_some_and(|hi| suffix >= hi))
                {
                    problems.push(format!("{name}: a live member is outside its pop bounds"));
                }
                match m.kind {
                    CollKind::ZSet => match suffix.first() {
                        Some(&ZSET_MEMBER) => {
                            members += 1;
                            let Some(member) = name_of(&suffix[1..]) else {
                                problems
                                    .push(format!("{name}: a member record's name hash is wrong"));
                                continue;
                            };
                            let Some(score) = decode_score(&ev) else {
                                problems.push(format!("{name}: a member's score is malformed"));
                                continue;
                            };
                            let want = m.elem(&zset_index_suffix(score, member));
                            if self.db().get_opt(&opts, &want)?.is_none() {
                                problems.push(format!("{name}: a member has no score index entry"));
                            }
                        }
                        Some(&ZSET_INDEX) if suffix.len() >= 9 => {
                            index += 1;
                            let score = self
                                .db()
                                .get_opt(&opts, zset_member_key(&m, &suffix[9..]))?;
                            let sortable = u64::from_be_bytes(suffix[1..9].try_into().expect("8"));
                            if score.and_then(|s| decode_score(&s)).map(score_sortable)
                                != Some(sortable)
                            {
                                problems.push(format!(
                                    "{name}: a score index entry disagrees with its member"
                                ));
                            }
                        }
                        _ => problems.push(format!("{name}: a malformed sorted-set element")),
                    },
                    CollKind::List => match <[u8; 8]>::try_from(suffix) {
                        Ok(b) => seqs.push(list_seq_decode(b)),
                        Err(_) => problems.push(format!("{name}: a malformed list element")),
                    },
                    CollKind::Hash | CollKind::Set => {
                        members += 1;
                        if m.name_in(suffix).is_none() {
                            problems.push(format!("{name}: an element's name hash is wrong"));
                        }
                    }
                }
            }
            let counted = match m.kind {
                CollKind::List => {
                    let contiguous = seqs
                        .iter()
                        .enumerate()
                        .all(|(i, &s)| s == m.head + i as i64);
                    if !contiguous || m.head + seqs.len() as i64 != m.tail {
                        problems.push(format!(
                            "{name}: elements are not exactly positions {}..{}",
                            m.head, m.tail
                        ));
                    }
                    seqs.len() as u64
                }
                CollKind::ZSet => {
                    if index != members {
                        problems.push(format!(
                            "{name}: {members} members but {index} score index entries"
                        ));
                    }
                    members
                }
                _ => members,
            };
            if counted != m.count || counted == 0 {
                problems.push(format!(
                    "{name}: metadata counts {} elements, found {counted}",
                    m.count
                ));
            }
        }
        for v in &left_behind {
            if owned.contains(v) {
                problems.push(format!(
                    "version {v} is held by a key and by a flushed database's record"
                ));
            }
        }
        owned.extend(left_behind);
        for pair in self
            .db()
            .range_opt(&opts, vec![GARBAGE_TAG]..vec![GARBAGE_TAG + 1])
        {
            let (k, _) = pair?;
            if let Some(b) = k.get(1..9).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
                owned.insert(u64::from_be_bytes(b));
            }
        }
        // Every element's version is owned by a key or by garbage: walk
        // the versions present by seeking past each one.
        let mut at = vec![ELEMENT_TAG];
        loop {
            let Some(pair) = self
                .db()
                .range_opt(&opts, at.clone()..vec![ELEMENT_TAG + 1])
                .next()
            else {
                break;
            };
            let (k, _) = pair?;
            let Some((v, _)) = split_element_key(&k) else {
                problems.push(format!("element key {k:?} is malformed"));
                break;
            };
            if !owned.contains(&v) {
                problems.push(format!("elements of version {v} belong to no key"));
            }
            at = element_end(v);
        }
        Ok(problems)
    }
}

/// Sorted-set element suffixes: the member's score by member, and the
/// score-ordered index (`docs/format/server-keyspace.md`).
pub const ZSET_MEMBER: u8 = 0;
pub const ZSET_INDEX: u8 = 1;

/// A score as its member record holds it (f64 LE).
pub fn decode_score(raw: &[u8]) -> Option<f64> {
    Some(f64::from_le_bytes(raw.try_into().ok()?))
}

/// The score of the member record `ekey` holding `raw`; [`Damage`] if it
/// is not 8 bytes.
pub fn stored_score(ekey: &[u8], raw: &[u8]) -> std::result::Result<f64, Damage> {
    decode_score(raw).ok_or_else(|| {
        Damage(format!(
            "the score of sorted-set member record {} is malformed ({})",
            hex(ekey),
            hex(raw)
        ))
    })
}

/// A score as a big-endian u64 that sorts as the scores do (-0 as 0).
pub fn score_sortable(score: f64) -> u64 {
    let bits = if score == 0.0 { 0u64 } else { score.to_bits() };
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

pub fn score_from_sortable(s: u64) -> f64 {
    let bits = if s >> 63 == 1 { s & !(1 << 63) } else { !s };
    f64::from_bits(bits)
}

/// A sorted-set member's record: `ZSET_MEMBER | name hash | member`.
pub fn zset_member_key(m: &Meta, member: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(m.prefix_len() + 1 + NAME_HASH_BYTES + member.len());
    k.extend_from_slice(&m.prefix());
    k.push(ZSET_MEMBER);
    k.extend_from_slice(&name_hash(member));
    k.extend_from_slice(member);
    k
}

/// The member and score of a sorted set's score index entry `ekey`;
/// [`Damage`] if it is too short to hold a score.
pub fn zset_index_entry<'a>(
    m: &Meta,
    ekey: &'a [u8],
) -> std::result::Result<(&'a [u8], f64), Damage> {
    let suffix = m.suffix_of(ekey);
    let Some(s) = suffix.get(1..9).and_then(|b| <[u8; 8]>::try_from(b).ok()) else {
        return Err(malformed_element(ekey));
    };
    Ok((&suffix[9..], score_from_sortable(u64::from_be_bytes(s))))
}

/// `ZSET_INDEX | sortable score u64 BE | member`.
pub fn zset_index_suffix(score: f64, member: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + member.len());
    k.push(ZSET_INDEX);
    k.extend_from_slice(&score_sortable(score).to_be_bytes());
    k.extend_from_slice(member);
    k
}

/// A list position as a key suffix that sorts as positions do.
pub fn list_seq(seq: i64) -> [u8; 8] {
    ((seq as u64) ^ (1 << 63)).to_be_bytes()
}

pub fn list_seq_decode(b: [u8; 8]) -> i64 {
    (u64::from_be_bytes(b) ^ (1 << 63)) as i64
}

/// An engine key and its value.
type Pair = (Vec<u8>, Vec<u8>);

/// Which a walk takes next, the staged write or the engine's pair (true:
/// the staged one; a staged write of the same key replaces the engine's);
/// `None` when both are done.
fn staged_first(
    staged: Option<&(&Vec<u8>, &Option<Vec<u8>>)>,
    engine_key: Option<&[u8]>,
    rev: bool,
) -> Option<bool> {
    Some(match (staged, engine_key) {
        (None, None) => return None,
        (Some(_), None) => true,
        (None, Some(_)) => false,
        (Some((sk, _)), Some(ek)) => {
            if rev {
                sk.as_slice() >= ek
            } else {
                sk.as_slice() <= ek
            }
        }
    })
}

/// Takes `key` out of the hole holding it, if one does (splitting it).
fn split_hole(holes: &mut BTreeMap<Vec<u8>, Vec<u8>>, key: &[u8]) {
    let Some((start, end)) = holes
        .range::<[u8], _>((Unbounded, Included(key)))
        .next_back()
    else {
        return;
    };
    if key >= end.as_slice() {
        return;
    }
    let start = start.clone();
    let end = holes.remove(&start).expect("just found");
    let mut past = key.to_vec();
    past.push(0);
    if start.as_slice() < key {
        holes.insert(start, key.to_vec());
    }
    if past < end {
        holes.insert(past, end);
    }
}

/// Adds the hole `start .. end`, merged with those it overlaps or touches.
fn merge_hole(holes: &mut BTreeMap<Vec<u8>, Vec<u8>>, mut start: Vec<u8>, mut end: Vec<u8>) {
    if start >= end {
        return;
    }
    if let Some((s, e)) = holes
        .range::<[u8], _>((Unbounded, Included(start.as_slice())))
        .next_back()
    {
        if *e >= start {
            let s = s.clone();
            let e = holes.remove(&s).expect("just found");
            start = s;
            end = end.max(e);
        }
    }
    while let Some((s, _)) = holes
        .range::<[u8], _>((Included(start.as_slice()), Unbounded))
        .next()
    {
        if *s > end {
            break;
        }
        let s = s.clone();
        let e = holes.remove(&s).expect("just found");
        end = end.max(e);
    }
    holes.insert(start, end);
}

/// The tighter of two starts (`max` false) or two ends of the same live
/// entries, each holding all of them (`None`: the collection's own end).
pub fn tighter(a: Option<Vec<u8>>, b: Option<Vec<u8>>, max: bool) -> Option<Vec<u8>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if (a < b) == max { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// Whether start (`max` false) or end `a` is tighter than `b`.
fn tighter_suffix(a: &[u8], b: &[u8], max: bool) -> bool {
    if max {
        a < b
    } else {
        a > b
    }
}

/// Widens bounds so that `key` is inside them.
fn widen(b: &mut PopBounds, key: &[u8]) {
    if b.lo.as_deref().is_some_and(|lo| key < lo) {
        b.lo = Some(key.to_vec());
    }
    if b.hi.as_deref().is_some_and(|hi| key >= hi) {
        let mut past = key.to_vec();
        past.push(0);
        b.hi = Some(past);
    }
}

/// Adds the put of record `r` at `data_key`: a string's value is copied
/// once, from the request (or the record read) into the batch.
fn put_rec(batch: &mut WriteBatch, data_key: Vec<u8>, r: &Rec) {
    match r {
        Rec::Str(e) => {
            let mut head = [0u8; ENTRY_HEAD_MAX_BYTES];
            let n = e.encode_head(&mut head);
            batch.put_parts(data_key, &[&head[..n], &e.value]);
        }
        Rec::Coll(m) => {
            batch.put(data_key, m.encode());
        }
    }
}

/// The writes of one command or one `EXEC`, staged over the keyspace:
/// reads see them, and `commit` applies them as one batch.
pub struct Txn<'a> {
    ks: &'a Keyspace,
    /// The database its keys are in (`SELECT`; 0 unless set).
    pub db: u8,
    /// A replicated shard's entry: its log carries no database, so the
    /// commands stay in database 0 (`MOVE` and `COPY ... DB` to another
    /// are refused; the leader's reaper walks only what 0 can hold).
    pub one_db: bool,
    /// Reads of a multi-key read command go to one snapshot (`MGET` and
    /// `EXISTS` see no half of an `EXEC`).
    snapshot: Option<sluicedb::Snapshot>,
    pub now: u64,
    /// Staged writes by Redis key; `None` deletes.
    writes: FastMap<Vec<u8>, Option<Rec>>,
    /// Order of first writes, so the batch is deterministic.
    order: Vec<Vec<u8>>,
    /// Staged element writes by engine key; `None` deletes.
    elems: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// The collection version each key held in the engine when first read
    /// (`None`: none), expired or not.
    base: FastMap<Vec<u8>, Option<u64>>,
    /// Versions a staged write replaced within this transaction.
    replaced: Vec<u64>,
    /// Versions whose last element this transaction deleted
    /// ([`Txn::put_meta`] of a count of 0): they hold no live element, so
    /// they need no garbage key (its reclaiming would only walk their
    /// tombstones).
    emptied_versions: Vec<u64>,
    /// Keys whose elements changed without a new record (`HSET` of an
    /// existing field, `LSET`): their watchers are touched all the same.
    modified: Vec<Vec<u8>>,
    /// Time index entries to delete ([`Txn::reap`]), as engine keys.
    index_deletes: Vec<Vec<u8>>,
    /// `FLUSHDB` or `FLUSHALL` ran: the database reads as empty under the
    /// staged writes.
    flushed: bool,
    /// It was `FLUSHALL`: every database is emptied at the commit.
    flushed_all: bool,
    /// Runs inside `EXEC`: a blocking command does not block.
    pub in_multi: bool,
    /// A replicated entry: the random picks (`SPOP`) come from this seed,
    /// the same on every node.
    pub seed: Option<u64>,
    /// A replicated entry: a record written in the same batch as the
    /// staged writes (the applied log id), even when there are none.
    pub mark: Option<(Vec<u8>, Vec<u8>)>,
    /// A blocking command found nothing and wrote no reply: the caller
    /// parks the client until a write to one of its keys.
    pub would_block: bool,
    /// Pops' narrowings of sorted-set bounds, applied once committed:
    /// (version, the max end, new bound).
    pop_narrowings: Vec<(u64, bool, Vec<u8>)>,
    /// At a snapshot: [`Keyspace::narrowings`] read before it was taken.
    narrowings_seen: Option<u64>,
    /// Versions of the sets popped by seeking, once per pop.
    pops: Vec<u64>,
    /// Sorted-set index entries a pop read past what it took, for the
    /// pops after it in the same pipelined run: (version, from the max
    /// end, engine keys in walk order). They follow the pop's bound with no
    /// live entry between them as this transaction sees them: an index
    /// insert into the version drops them ([`Txn::index_inserted`]), and a
    /// staged delete of one is skipped when taken ([`Txn::take_popped_ahead`]).
    pop_ahead: Vec<(u64, bool, VecDeque<Vec<u8>>)>,
    /// Commands after the running one in its pipelined run (0 alone): how
    /// far ahead a pop reads ([`Txn::pop_ahead`]).
    pub run_left: usize,
    /// Holes of sets learnt by this transaction's pops, added to the
    /// committed ones once it commits: (version, start, end).
    holes: Vec<(u64, Vec<u8>, Vec<u8>)>,
    /// Runs a parked client's command again after a write to its keys: a
    /// key to pop from that holds another type is nothing to pop yet (the
    /// client keeps waiting, as in redis-server), not an error.
    pub serving_blocked: bool,
    /// A read command's: it stages nothing, so what its reads found is
    /// not noted for a commit ([`Txn::rec`]'s `base`, a key copy each).
    pub reads_only: bool,
    /// The keyspace notification classes enabled (`crate::notify`): 0,
    /// the default, records no event.
    pub notify: u32,
    /// A lookup that finds no key records `keymiss` (class `m`): set per
    /// command for the lookups redis-server makes as reads
    /// (`crate::cmd::misses_of`).
    pub misses: bool,
    /// Keys whose engine record a lookup found past its expiry (once
    /// each), recorded only when `expired` events are enabled: their
    /// `expired` event is recorded where they were found, and the caller
    /// deletes them after the commit ([`crate::cmd::publish_committed`]).
    found_expired: Vec<Vec<u8>>,
    /// The events recorded, published once the writes are committed.
    events: Vec<crate::notify::Event>,
    /// Collections emptied by [`Txn::put_meta`] whose `del` event waits
    /// for the command's own event (redis-server sends it after).
    emptied: Vec<Vec<u8>>,
    /// Records staged at keys of other databases (`MOVE`, `COPY ... DB`):
    /// (database, key, record, the collection version it replaces there).
    /// A database with a stage in `parked` takes them there instead.
    foreign: Vec<(u8, Vec<u8>, Rec, Option<u64>)>,
    /// The staged writes of the other databases this transaction selected
    /// (`SELECT` inside `MULTI`, [`Txn::select`]), one stage each; the
    /// selected database's are the fields above.
    parked: Vec<DbStage>,
    /// A `SWAPDB`, `FLUSHDB` or `FLUSHALL` ran in this transaction
    /// ([`Txn::swap_databases`], [`Txn::flush`]): the database map before
    /// it, restored if the commit fails. The map in memory is the changed
    /// one meanwhile, and [`Keyspace::swaps`] odd until the commit writes
    /// it or restores this.
    map_before: Option<DbMap>,
    /// Watched keys its swaps and flushes touch, as (database, key).
    swap_touched: Vec<DbKey>,
    /// Data keys to delete in the stored databases its `FLUSHDB`s left
    /// behind: the keys it had staged deletes of there (`MOVE` out of the
    /// database, then `FLUSHDB`), so that no record left there holds a
    /// collection version a record elsewhere holds now.
    left_behind: Vec<Vec<u8>>,
}

impl Drop for Txn<'_> {
    /// A transaction that swapped databases and is dropped without its
    /// commit (which takes `map_before`) puts the map back.
    fn drop(&mut self) {
        if let Some(before) = self.map_before.take() {
            self.ks.set_db_map(before);
            self.ks.swaps.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// What a transaction staged in one database: [`Txn`]'s fields of the
/// same names, kept while another database is selected.
#[derive(Default)]
struct DbStage {
    db: u8,
    writes: FastMap<Vec<u8>, Option<Rec>>,
    order: Vec<Vec<u8>>,
    base: FastMap<Vec<u8>, Option<u64>>,
    modified: Vec<Vec<u8>>,
    flushed: bool,
}

impl<'a> Txn<'a> {
    /// A blocking command found nothing: parks the client
    /// ([`Txn::would_block`]) and returns true, or, inside `EXEC`, where
    /// nothing blocks, returns false for the caller to reply nil.
    pub fn block(&mut self) -> bool {
        self.would_block = !self.in_multi;
        self.would_block
    }

    pub fn new(ks: &'a Keyspace) -> Txn<'a> {
        Txn::new_at(ks, now_ms())
    }

    /// A transaction whose clock reads `now` (ms since the epoch): a
    /// replicated entry runs at its leader's time.
    pub fn new_at(ks: &'a Keyspace, now: u64) -> Txn<'a> {
        Txn {
            ks,
            db: 0,
            one_db: false,
            snapshot: None,
            now,
            writes: FastMap::default(),
            order: Vec::new(),
            elems: BTreeMap::new(),
            base: FastMap::default(),
            replaced: Vec::new(),
            emptied_versions: Vec::new(),
            modified: Vec::new(),
            index_deletes: Vec::new(),
            pop_narrowings: Vec::new(),
            narrowings_seen: None,
            pops: Vec::new(),
            pop_ahead: Vec::new(),
            run_left: 0,
            holes: Vec::new(),
            flushed: false,
            flushed_all: false,
            in_multi: false,
            seed: None,
            mark: None,
            would_block: false,
            serving_blocked: false,
            reads_only: false,
            notify: 0,
            misses: false,
            found_expired: Vec::new(),
            events: Vec::new(),
            emptied: Vec::new(),
            foreign: Vec::new(),
            parked: Vec::new(),
            map_before: None,
            swap_touched: Vec::new(),
            left_behind: Vec::new(),
        }
    }

    /// `SWAPDB a b` inside `EXEC`, which holds the keyspace exclusively:
    /// swaps the two in the database map in memory now (the commands
    /// after it read the databases swapped), leaving
    /// [`Keyspace::swaps`] odd so that reads holding no lock wait, and
    /// relabels what this transaction staged in either, which stays with
    /// its stored database. The commit writes the map in its batch, or
    /// restores the map before (and a transaction dropped uncommitted
    /// restores it too).
    pub fn swap_databases(&mut self, a: u8, b: u8) -> Result<()> {
        if a == b {
            return Ok(());
        }
        let touched = self.ks.watched_in_either(a, b)?;
        self.swap_touched.extend(touched);
        self.map_changes();
        let mut map = self.ks.db_map_now();
        map.stored.swap(usize::from(a), usize::from(b));
        self.ks.set_db_map(map);
        self.park();
        let other = |d: &mut u8| {
            if *d == a {
                *d = b;
            } else if *d == b {
                *d = a;
            }
        };
        for st in &mut self.parked {
            if st.db == a || st.db == b {
                // Written there before the swap: touched under both.
                for k in st.order.iter().chain(&st.modified) {
                    self.swap_touched.push((a, k.clone()));
                    self.swap_touched.push((b, k.clone()));
                }
            }
            other(&mut st.db);
        }
        for f in &mut self.foreign {
            other(&mut f.0);
        }
        self.unpark(self.db);
        Ok(())
    }

    /// The database map in memory is about to change: keeps the map before
    /// the transaction's first change, and makes [`Keyspace::swaps`] odd
    /// (reads holding no lock wait) until the commit.
    fn map_changes(&mut self) {
        if self.map_before.is_none() {
            self.map_before = Some(self.ks.db_map_now());
            self.ks.swaps.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Sets the current database's stage aside, with the `del` events
    /// waiting for their command's own (this database's).
    fn park(&mut self) {
        for key in std::mem::take(&mut self.emptied) {
            self.push_event(crate::notify::GENERIC, "del", key);
        }
        let now = self.take_stage();
        self.parked.push(now);
    }

    /// Makes database `db`'s stage the transaction's own: the one parked
    /// for it, or a fresh one.
    fn unpark(&mut self, db: u8) {
        let next = match self.parked.iter().position(|st| st.db == db) {
            Some(i) => self.parked.swap_remove(i),
            None => DbStage {
                db,
                flushed: self.flushed_all,
                ..DbStage::default()
            },
        };
        self.db = next.db;
        self.writes = next.writes;
        self.order = next.order;
        self.base = next.base;
        self.modified = next.modified;
        self.flushed = next.flushed;
    }

    /// Runs the commands after it in database `db` (`SELECT` inside
    /// `MULTI`): what was staged in the database selected so far is kept
    /// for the commit, and what was staged in `db` before (by an earlier
    /// `SELECT` of it, or `MOVE`/`COPY ... DB` into it) is read again.
    /// One batch still commits every database's writes.
    pub fn select(&mut self, db: u8) {
        if db == self.db {
            return;
        }
        self.park();
        self.unpark(db);
        let foreign = std::mem::take(&mut self.foreign);
        for (d, key, r, replaced) in foreign {
            if d == db {
                self.replaced.extend(replaced);
                self.put_staged(key, Some(r));
            } else {
                self.foreign.push((d, key, r, replaced));
            }
        }
    }

    /// The selected database's stage, taken out of the transaction.
    fn take_stage(&mut self) -> DbStage {
        DbStage {
            db: self.db,
            writes: std::mem::take(&mut self.writes),
            order: std::mem::take(&mut self.order),
            base: std::mem::take(&mut self.base),
            modified: std::mem::take(&mut self.modified),
            flushed: self.flushed,
        }
    }

    /// Stages `r` at `key` of the selected database with no lookup or
    /// event (a record staged elsewhere first, as `MOVE` does).
    fn put_staged(&mut self, key: Vec<u8>, r: Option<Rec>) {
        match self.writes.insert(key.clone(), r) {
            None => self.order.push(key),
            Some(old) => self.replaced.extend(old.and_then(|o| o.version())),
        }
    }

    /// Records a keyspace event of `class` for `key`, if that class is
    /// enabled, then the `del` of `key` if the command emptied it.
    pub fn notify(&mut self, class: u32, name: &'static str, key: &[u8]) {
        if self.notify & class != 0 {
            self.events.push(crate::notify::Event {
                class,
                name,
                db: self.db,
                key: key.to_vec(),
            });
        }
        if let Some(i) = self.emptied.iter().position(|k| k == key) {
            self.emptied.remove(i);
            self.push_event(crate::notify::GENERIC, "del", key.to_vec());
        }
    }

    fn push_event(&mut self, class: u32, name: &'static str, key: Vec<u8>) {
        if self.notify & class != 0 {
            self.events.push(crate::notify::Event {
                class,
                name,
                db: self.db,
                key,
            });
        }
    }

    /// How many events are recorded (to drop a failed command's).
    pub fn events_len(&self) -> usize {
        self.events.len()
    }

    /// Moves the events recorded from `from` to `to` after those
    /// recorded since.
    pub fn events_after(&mut self, from: usize, to: usize) {
        self.events[from..].rotate_left(to - from);
    }

    pub fn truncate_events(&mut self, len: usize) {
        self.events.truncate(len);
        self.emptied.clear();
    }

    /// The recorded events, with the `del` of every collection emptied
    /// whose command recorded no event of its own.
    pub fn take_events(&mut self) -> Vec<crate::notify::Event> {
        for key in std::mem::take(&mut self.emptied) {
            self.push_event(crate::notify::GENERIC, "del", key);
        }
        std::mem::take(&mut self.events)
    }

    /// A read-only transaction reading at one snapshot.
    pub fn at_snapshot(ks: &'a Keyspace, now: u64) -> Txn<'a> {
        let mut t = Txn::new_at(ks, now);
        // Read first: a pop committed before the snapshot narrows its
        // bound after its commit, so after this read or before it.
        t.narrowings_seen = Some(ks.narrowings.load(Ordering::Acquire));
        t.snapshot = Some(ks.db().snapshot());
        t
    }

    pub fn keyspace(&self) -> &'a Keyspace {
        self.ks
    }

    fn opts(&self) -> ReadOptions<'_> {
        match &self.snapshot {
            Some(s) => ReadOptions::at(s),
            None => ReadOptions::default(),
        }
    }

    /// `key`'s record as this transaction sees it (expired: absent): a
    /// command's lookup, recording `expired` for a record found past its
    /// expiry and `keymiss` for no record ([`Txn::misses`]).
    pub fn rec(&mut self, key: &[u8]) -> Result<Option<Rec>> {
        let r = self.lookup(key)?;
        self.note_miss(key, &r);
        Ok(r)
    }

    /// Records `keymiss` for a lookup of `key` that found nothing, when
    /// this command's lookups are reads ([`Txn::misses`]).
    fn note_miss(&mut self, key: &[u8], found: &Option<Rec>) {
        if found.is_none() {
            self.note_keymiss(key);
        }
    }

    /// Records `keymiss` for `key`, which a read lookup did not find,
    /// when this command's lookups are reads ([`Txn::misses`]).
    pub fn note_keymiss(&mut self, key: &[u8]) {
        if self.misses {
            self.push_event(crate::notify::KEY_MISS, "keymiss", key.to_vec());
        }
    }

    /// [`Txn::rec`] without `keymiss`: a write command's look at the key
    /// it writes (a store's destination), which redis-server makes as a
    /// write lookup even in commands whose other lookups are reads.
    pub fn peek(&mut self, key: &[u8]) -> Result<Option<Rec>> {
        self.lookup(key)
    }

    fn lookup(&mut self, key: &[u8]) -> Result<Option<Rec>> {
        if let Some(w) = self.writes.get(key) {
            return Ok(w.clone().filter(|e| !e.expired(self.now)));
        }
        if self.flushed {
            return Ok(None);
        }
        let r = self.ks.read_raw(&self.opts(), self.db, key)?;
        if !self.reads_only && !self.base.contains_key(key) {
            self.base
                .insert(key.to_vec(), r.as_ref().and_then(Rec::version));
        }
        Ok(self.unexpired(key, r))
    }

    /// An engine record as this transaction sees it: absent past its
    /// expiry, which records the `expired` event (once per key).
    fn unexpired(&mut self, key: &[u8], r: Option<Rec>) -> Option<Rec> {
        match r {
            Some(e) if e.expired(self.now) => {
                self.note_expired(key);
                None
            }
            r => r,
        }
    }

    /// Records the `expired` event (once per key) of a key this command
    /// found past its expiry: once the command commits, the key is deleted
    /// and the event published (`cmd::publish_committed`), Redis's lazy
    /// expiry.
    pub fn note_expired(&mut self, key: &[u8]) {
        if self.notify & crate::notify::EXPIRED != 0 && !self.found_expired.iter().any(|k| k == key)
        {
            self.found_expired.push(key.to_vec());
            self.push_event(crate::notify::EXPIRED, "expired", key.to_vec());
        }
    }

    /// [`Txn::rec`] of each of `keys`; those not staged are read from the
    /// engine together ([`Keyspace::read_raw_many`]).
    pub fn recs(&mut self, keys: &[&[u8]]) -> Result<Vec<Option<Rec>>> {
        let unstaged: Vec<&[u8]> = if self.flushed {
            Vec::new()
        } else {
            (keys.iter().copied())
                .filter(|k| !self.writes.contains_key(*k))
                .collect()
        };
        let mut read = (self.ks.read_raw_many(&self.opts(), self.db, &unstaged)?).into_iter();
        let mut out = Vec::with_capacity(keys.len());
        for &key in keys {
            let r = if let Some(w) = self.writes.get(key) {
                w.clone()
            } else if self.flushed {
                None
            } else {
                let r = read.next().expect("one read per unstaged key");
                if !self.reads_only && !self.base.contains_key(key) {
                    self.base
                        .insert(key.to_vec(), r.as_ref().and_then(Rec::version));
                }
                self.unexpired(key, r)
            };
            let r = r.filter(|e| !e.expired(self.now));
            self.note_miss(key, &r);
            out.push(r);
        }
        Ok(out)
    }

    /// `key`'s string; `WRONGTYPE` if it holds a collection.
    pub fn get(&mut self, key: &[u8]) -> std::result::Result<Option<Entry>, String> {
        match self.rec(key).map_err(crate::data::engine)? {
            None => Ok(None),
            Some(Rec::Str(e)) => Ok(Some(e)),
            Some(Rec::Coll(_)) => Err(WRONGTYPE.to_owned()),
        }
    }

    /// `key`'s collection of `kind`; `WRONGTYPE` if it holds another type.
    pub fn coll(
        &mut self,
        key: &[u8],
        kind: CollKind,
    ) -> std::result::Result<Option<Meta>, String> {
        match self.rec(key).map_err(crate::data::engine)? {
            None => Ok(None),
            Some(Rec::Coll(m)) if m.kind == kind => Ok(Some(m)),
            Some(_) => Err(WRONGTYPE.to_owned()),
        }
    }

    /// The collection a blocking command pops from: as [`Txn::coll`], but
    /// another type reads as absent while serving a parked client.
    pub fn pop_source(
        &mut self,
        key: &[u8],
        kind: CollKind,
    ) -> std::result::Result<Option<Meta>, String> {
        match self.coll(key, kind) {
            Err(e) if self.serving_blocked && e == WRONGTYPE => Ok(None),
            r => r,
        }
    }

    /// Notes a sorted-set index entry (or a set member) staged for `m`:
    /// the bounds its record keeps, the known bounds, and this
    /// transaction's pending narrowings, take it in before anything can
    /// walk past it.
    pub fn index_inserted(&mut self, m: &mut Meta, key: &[u8]) {
        let suffix = &key[m.prefix_len()..];
        m.widen_pop_bounds(suffix);
        let version = m.version;
        self.ks.widen_pop_bounds(version, key);
        self.pop_ahead.retain(|(v, _, _)| *v != version);
        if self.holes.iter().any(|(v, _, _)| *v == version) {
            let mut own = BTreeMap::new();
            for (v, start, end) in std::mem::take(&mut self.holes) {
                if v == version {
                    own.insert(start, end);
                } else {
                    self.holes.push((v, start, end));
                }
            }
            split_hole(&mut own, key);
            self.holes
                .extend(own.into_iter().map(|(start, end)| (version, start, end)));
        }
        for (v, max, bound) in &mut self.pop_narrowings {
            if *v == version {
                let mut b = PopBounds::default();
                if *max {
                    b.hi = Some(std::mem::take(bound));
                    widen(&mut b, key);
                    *bound = b.hi.unwrap_or_default();
                } else {
                    b.lo = Some(std::mem::take(bound));
                    widen(&mut b, key);
                    *bound = b.lo.unwrap_or_default();
                }
            }
        }
    }

    /// Narrows `version`'s bounds once this transaction commits (a pop
    /// deleted every index entry before `bound`, or from `bound` on with
    /// `max`).
    pub fn popped_to(&mut self, version: u64, max: bool, bound: Vec<u8>) {
        self.pop_narrowings.push((version, max, bound));
    }

    /// Keeps `keys`, the index entries of `version` a pop read past what
    /// it took (in walk order, from the `max` end), for the next pops.
    pub fn keep_popped_ahead(&mut self, version: u64, max: bool, keys: VecDeque<Vec<u8>>) {
        self.pop_ahead
            .retain(|(v, m, _)| (*v, *m) != (version, max));
        if !keys.is_empty() {
            self.pop_ahead.push((version, max, keys));
        }
    }

    /// Up to `n` of the index entries of `version` kept by
    /// [`Txn::keep_popped_ahead`], in walk order, without those this
    /// transaction deleted since; removed from those kept.
    pub fn take_popped_ahead(&mut self, version: u64, max: bool, n: usize) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let Some(i) = (self.pop_ahead.iter()).position(|(v, m, _)| (*v, *m) == (version, max))
        else {
            return got;
        };
        let keys = &mut self.pop_ahead[i].2;
        while got.len() < n {
            let Some(k) = keys.pop_front() else { break };
            if !matches!(self.elems.get(&k), Some(None)) {
                got.push(k);
            }
        }
        if keys.is_empty() {
            self.pop_ahead.swap_remove(i);
        }
        got
    }

    /// Counts a pop of set `version` once this transaction commits.
    pub fn count_pop(&mut self, version: u64) {
        self.pops.push(version);
    }

    /// Records that `start .. end` of set `version` holds no live member
    /// as this transaction sees it (a pop walked it), for the seeks of
    /// later pops, once this transaction commits.
    pub fn learn_hole(&mut self, version: u64, start: Vec<u8>, end: Vec<u8>) {
        if start < end {
            self.holes.push((version, start, end));
        }
    }

    /// Where a seek for the first member of set `version` at or after
    /// `key` can start: past every hole (this transaction's or committed)
    /// that holds it.
    pub fn past_holes(&self, version: u64, mut key: Vec<u8>) -> Vec<u8> {
        loop {
            let own = self
                .holes
                .iter()
                .find(|(v, start, end)| *v == version && *start <= key && key < *end)
                .map(|(_, _, end)| end.clone());
            match own.or_else(|| self.ks.hole_end(version, &key)) {
                Some(end) => key = end,
                None => return key,
            }
        }
    }

    /// Where `version`'s live index entries begin (`max` false) or end
    /// as this transaction sees them: its own pops' narrowing, else the
    /// committed bound. A run of pipelined pops starts each past those
    /// before it instead of walking over their staged deletes.
    /// The record's bound ([`Meta::pop_lo`]) tightens either: after a
    /// restart it is the only one known.
    pub fn pop_bound(&self, m: &Meta, max: bool) -> Option<Vec<u8>> {
        let own = self.own_narrowing(m.version, max).cloned();
        let learnt = own.or_else(|| {
            let b = self.ks.pop_bounds(m.version);
            if max {
                b.hi
            } else {
                b.lo
            }
        });
        let kept = if max { &m.pop_hi } else { &m.pop_lo };
        match (learnt, kept.as_deref()) {
            (learnt, None) => learnt,
            (Some(l), Some(k)) if !tighter_suffix(k, &l[m.prefix_len()..], max) => Some(l),
            (_, Some(k)) => Some(m.elem(k)),
        }
    }

    /// This transaction's latest narrowing of `version`'s start (`max`
    /// false) or end.
    fn own_narrowing(&self, version: u64, max: bool) -> Option<&Vec<u8>> {
        self.pop_narrowings
            .iter()
            .rev()
            .find(|(v, m, _)| *v == version && *m == max)
            .map(|(_, _, b)| b)
    }

    /// Where a walk of sorted set `version`'s score index may start and
    /// end: the bounds its pops learnt ([`Keyspace::pop_bounds`], and this
    /// transaction's own), `None` at an end to walk from the index's own
    /// end. Every live index entry is inside them, so a walk from the
    /// lowest score skips the tombstones of the members popped before
    /// (`ZRANGE key 0 0` after many `ZPOPMIN`s read them all each time).
    /// At a snapshot the bounds in memory hold only while no pop narrowed
    /// one since it was taken (a pop committed after it may have narrowed
    /// past entries the snapshot still holds); otherwise only the
    /// record's, read at the snapshot, are used.
    pub fn index_bounds(&self, m: &Meta) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        if let Some(seen) = self.narrowings_seen {
            let all = self.ks.pop_bounds.lock();
            if self.ks.narrowings.load(Ordering::Acquire) != seen {
                return (m.pop_bound_key(false), m.pop_bound_key(true));
            }
            drop(all);
        }
        (self.pop_bound(m, false), self.pop_bound(m, true))
    }

    /// A new, empty collection of `kind` (staged once it gets elements).
    pub fn new_coll(&mut self, kind: CollKind) -> std::result::Result<Meta, String> {
        Ok(Meta {
            kind,
            expire_at_ms: None,
            version: self.ks.new_version().map_err(crate::data::engine)?,
            count: 0,
            head: 0,
            tail: 0,
            pop_lo: None,
            pop_hi: None,
        })
    }

    pub fn exists(&mut self, key: &[u8]) -> std::result::Result<bool, String> {
        Ok(self.rec(key).map_err(crate::data::engine)?.is_some())
    }

    pub fn set(&mut self, key: &[u8], e: Entry) {
        self.stage(key, Some(Rec::Str(e)));
    }

    pub fn put(&mut self, key: &[u8], r: Rec) {
        self.stage(key, Some(r));
    }

    /// Stages a collection's metadata, or its deletion once it is empty
    /// (Redis has no empty collections).
    /// A set's or sorted set's record keeps the bounds of this
    /// transaction's pops ([`Txn::popped_to`]), in the batch that deletes
    /// what they popped.
    pub fn put_meta(&mut self, key: &[u8], mut m: Meta) {
        if matches!(m.kind, CollKind::Set | CollKind::ZSet) && m.count > 0 {
            for max in [false, true] {
                if let Some(b) = self.own_narrowing(m.version, max) {
                    let suffix = &b[m.prefix_len()..];
                    let kept = if max { &m.pop_hi } else { &m.pop_lo };
                    if kept
                        .as_deref()
                        .is_none_or(|k| tighter_suffix(suffix, k, max))
                    {
                        let suffix = suffix.to_vec();
                        m.set_pop_bound(max, Some(suffix));
                    }
                }
            }
        }
        if m.count == 0 {
            // (A collection created empty and dropped at once, by
            // `ZADD XX` say, was never there: no event.)
            if self.notify & crate::notify::GENERIC != 0
                && !self.emptied.iter().any(|k| k == key)
                && self.lookup(key).ok().flatten().is_some()
            {
                self.emptied.push(key.to_vec());
            }
            self.stage(key, None);
            // Elements staged for it (none should remain) go with it.
            self.replaced.push(m.version);
            self.emptied_versions.push(m.version);
        } else {
            self.stage(key, Some(Rec::Coll(m)));
        }
    }

    pub fn delete(&mut self, key: &[u8]) {
        self.stage(key, None);
    }

    /// A replicated shard's reaping, applied from the log at the entry's
    /// clock ([`Txn::now`]): deletes the time index entry (`at`, `key`)
    /// the leader's reaper found due, and `key` itself if its record is
    /// past its expiry at this clock (an entry staged earlier in this
    /// transaction counts as its record). True if it deleted the key.
    pub fn reap(&mut self, at: u64, key: &[u8]) -> Result<bool> {
        if at <= self.now {
            self.index_deletes
                .push(expiry_key(self.ks.stored_db(self.db), at, key));
        }
        let expired = match self.writes.get(key) {
            Some(w) => w.as_ref().is_some_and(|r| r.expired(self.now)),
            None if self.flushed => false,
            None => {
                let r = self.ks.read_raw(&self.opts(), self.db, key)?;
                let expired = r.as_ref().is_some_and(|r| r.expired(self.now));
                if expired && !self.base.contains_key(key) {
                    self.base
                        .insert(key.to_vec(), r.as_ref().and_then(Rec::version));
                }
                expired
            }
        };
        if expired {
            self.delete(key);
        }
        Ok(expired)
    }

    fn stage(&mut self, key: &[u8], r: Option<Rec>) {
        // A blind write (`SET`) looks too when `expired` is enabled: the
        // key it replaces may be past its expiry, which redis-server
        // reports before the write's own events.
        if self.notify & (crate::notify::NEW | crate::notify::EXPIRED) != 0 {
            let absent = self.lookup(key).ok().flatten().is_none();
            if self.notify & crate::notify::NEW != 0 && r.is_some() && absent {
                self.push_event(crate::notify::NEW, "new", key.to_vec());
            }
        }
        match self.writes.insert(key.to_vec(), r) {
            None => self.order.push(key.to_vec()),
            Some(old) => {
                if let Some(v) = old.and_then(|o| o.version()) {
                    self.replaced.push(v);
                }
            }
        }
    }

    /// Notes that `key`'s elements changed while its record did not.
    pub fn modified(&mut self, key: &[u8]) {
        self.modified.push(key.to_vec());
    }

    /// `d`, damage this transaction read, as the engine's
    /// [`sluicedb::Error::Corruption`].
    pub fn damage(&self, d: Damage) -> sluicedb::Error {
        d.in_db(&self.ks.db())
    }

    /// [`Txn::damage`] as a command's error reply.
    pub fn damaged(&self, d: Damage) -> String {
        crate::data::engine(self.damage(d))
    }

    /// An element's value as this transaction sees it.
    pub fn elem(&self, ekey: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.elems.get(ekey) {
            return Ok(v.clone());
        }
        if self.flushed {
            return Ok(None);
        }
        self.ks.db().get_opt(&self.opts(), ekey)
    }

    /// [`Txn::elem`] of each of `ekeys`; those not staged are read from
    /// the engine together (one multi-key read, at one point in time).
    pub fn elems(&self, ekeys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let unstaged: Vec<&[u8]> = if self.flushed {
            Vec::new()
        } else {
            (ekeys.iter())
                .filter(|k| !self.elems.contains_key(k.as_slice()))
                .map(Vec::as_slice)
                .collect()
        };
        let mut read = self
            .ks
            .db()
            .multi_get_opt(&self.opts(), &unstaged)?
            .into_iter();
        Ok((ekeys.iter())
            .map(|k| match self.elems.get(k) {
                Some(v) => v.clone(),
                None if self.flushed => None,
                None => read.next().expect("one read per unstaged element"),
            })
            .collect())
    }

    pub fn elem_put(&mut self, ekey: Vec<u8>, value: Vec<u8>) {
        self.elems.insert(ekey, Some(value));
    }

    pub fn elem_del(&mut self, ekey: Vec<u8>) {
        self.elems.insert(ekey, None);
    }

    /// The elements in `lo..hi` as this transaction sees them, in key
    /// order (descending with `rev`): `f` gets (engine key, value) and
    /// returns false to stop.
    pub fn elems_in(
        &self,
        lo: &[u8],
        hi: &[u8],
        rev: bool,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        if lo >= hi {
            return Ok(());
        }
        let mut staged = self.staged_in(lo, hi, rev).into_iter().peekable();
        let mut engine: Box<dyn Iterator<Item = sluicedb::Result<Pair>>> = if self.flushed {
            Box::new(std::iter::empty())
        } else if rev {
            Box::new(self.ks.db().range_opt(&self.opts(), lo..hi).rev())
        } else {
            Box::new(self.ks.db().range_opt(&self.opts(), lo..hi))
        };
        let mut next_engine = engine.next().transpose()?;
        loop {
            let engine_key = next_engine.as_ref().map(|(ek, _)| ek.as_slice());
            let Some(take_staged) = staged_first(staged.peek(), engine_key, rev) else {
                return Ok(());
            };
            if take_staged {
                let (sk, sv) = staged.next().expect("peeked");
                if next_engine.as_ref().is_some_and(|(ek, _)| ek == sk) {
                    next_engine = engine.next().transpose()?;
                }
                if let Some(v) = sv {
                    if !f(sk, v) {
                        return Ok(());
                    }
                }
            } else {
                let (ek, ev) = next_engine.take().expect("present");
                if !f(&ek, &ev) {
                    return Ok(());
                }
                next_engine = engine.next().transpose()?;
            }
        }
    }

    /// This transaction's staged element writes in `lo..hi`, in walk order.
    fn staged_in(&self, lo: &[u8], hi: &[u8], rev: bool) -> Vec<(&Vec<u8>, &Option<Vec<u8>>)> {
        let staged = self.elems.range::<[u8], _>((Included(lo), Excluded(hi)));
        if rev {
            staged.rev().collect()
        } else {
            staged.collect()
        }
    }

    /// As [`Txn::elems_in`], for a walk that stops after a few elements
    /// (a pop, a seek for one member): one engine cursor and no value
    /// read-ahead, where `elems_in`'s range opens two cursors and may read
    /// values ahead of what a short walk takes.
    pub fn walk(
        &self,
        lo: &[u8],
        hi: &[u8],
        rev: bool,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        if lo >= hi {
            return Ok(());
        }
        let mut staged = self.staged_in(lo, hi, rev).into_iter().peekable();
        let mut c = (!self.flushed).then(|| self.ks.db().iter_range(&self.opts(), lo..hi));
        if let Some(c) = &mut c {
            if rev {
                c.seek_to_last();
            } else {
                c.seek_to_first();
            }
        }
        let step = |c: &mut sluicedb::DbIterator| if rev { c.prev() } else { c.next() };
        loop {
            let engine_key = match &c {
                Some(c) if c.valid() => Some(c.key()),
                Some(c) => {
                    c.status()?;
                    None
                }
                None => None,
            };
            let Some(take_staged) = staged_first(staged.peek(), engine_key, rev) else {
                return Ok(());
            };
            if take_staged {
                let (sk, sv) = staged.next().expect("peeked");
                if let Some(c) = c.as_mut().filter(|c| c.valid() && c.key() == sk.as_slice()) {
                    step(c);
                }
                if let Some(v) = sv {
                    if !f(sk, v) {
                        return Ok(());
                    }
                }
            } else {
                let c = c.as_mut().expect("an engine pair");
                if !f(c.key(), c.value()?) {
                    return Ok(());
                }
                step(c);
            }
        }
    }

    /// Every element of a collection, in key order: (suffix, value). An
    /// element key not in the encoding, or a list whose positions are not
    /// exactly `head .. tail`, is damage.
    pub fn all_elems(&self, m: &Meta) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut v = Vec::with_capacity(m.count as usize);
        let mut bad = None;
        self.elems_in(&m.prefix(), &m.end(), false, |k, val| {
            let suffix = m.suffix_of(k);
            let fits = match m.kind {
                CollKind::List => suffix == list_seq(m.head + v.len() as i64),
                CollKind::ZSet => match suffix.first() {
                    Some(&ZSET_MEMBER) => name_of(&suffix[1..]).is_some() && val.len() == 8,
                    Some(&ZSET_INDEX) => suffix.len() >= 9,
                    _ => false,
                },
                CollKind::Hash | CollKind::Set => m.name_in(suffix).is_some(),
            };
            if !fits {
                bad = Some(if m.kind == CollKind::List {
                    misplaced_list_element(m, k, m.head + v.len() as i64)
                } else {
                    malformed_element(k)
                });
                return false;
            }
            v.push((suffix.to_vec(), val.to_vec()));
            true
        })?;
        if bad.is_none() && m.kind == CollKind::List && v.len() as u64 != m.count {
            bad = Some(missing_list_element(m, m.head + v.len() as i64));
        }
        match bad {
            Some(d) => Err(self.damage(d)),
            None => Ok(v),
        }
    }

    /// The fields of a hash, the members of a set or the member records
    /// of a sorted set (score f64 LE), as (name, value), in key order
    /// (name hash order, but a set's in name order); an error names an
    /// element key not in the encoding.
    pub fn names(&self, m: &Meta) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        debug_assert!(m.kind != CollKind::List, "list elements have no names");
        let (lo, hi) = match m.kind {
            CollKind::ZSet => (m.elem(&[ZSET_MEMBER]), m.elem(&[ZSET_MEMBER + 1])),
            _ => (m.prefix(), m.end()),
        };
        let skip = lo.len() - m.prefix_len();
        let mut v = Vec::with_capacity(m.count as usize);
        let mut bad = None;
        self.elems_in(&lo, &hi, false, |k, val| {
            match m.name_in(&m.suffix_of(k)[skip..]) {
                Some(name) => {
                    v.push((name.to_vec(), val.to_vec()));
                    true
                }
                None => {
                    bad = Some(self.damage(malformed_element(k)));
                    false
                }
            }
        })?;
        match bad {
            Some(e) => Err(e),
            None => Ok(v),
        }
    }

    /// Empties the database (`FLUSHDB`), or every database (`all`:
    /// `FLUSHALL`), by mapping its number (every number) to a fresh,
    /// empty stored database ([`Keyspace::fresh_db`]) in the map in memory
    /// now: the commands after it write there, and the commit writes the
    /// map in its one batch. The stored databases left behind are
    /// reclaimed in the background once committed. Touches the watched
    /// keys that exist in what it empties. Needs the keyspace held
    /// exclusively.
    pub fn flush(&mut self, all: bool) -> Result<()> {
        let ks = self.ks;
        let touched = ks.watched_present((!all).then_some(self.db))?;
        self.map_changes();
        let committed = self.map_before.expect("kept by map_changes");
        let mut map = ks.db_map_now();
        let stored = map.stored[usize::from(self.db)];
        let numbers = if all {
            0..DATABASES
        } else {
            self.db..self.db + 1
        };
        for n in numbers {
            let fresh = ks.fresh_db(&map, &committed)?;
            map.stored[usize::from(n)] = fresh;
            map.last_fresh = fresh;
        }
        // Nothing fails from here: a command that fails stages nothing.
        self.swap_touched.extend(touched);
        let other_dbs = !self.parked.is_empty() || !self.foreign.is_empty();
        if !all && other_dbs {
            // Staged elements may be other databases' collections', so
            // they stay; this database's new collections become garbage
            // (the engine's records here do so as their stored database
            // is reclaimed). A staged delete may be of a record moved to
            // another database with its version: it is deleted where it
            // was all the same, and the version it held is garbage unless
            // a record the commit writes holds it.
            for (key, w) in &self.writes {
                match (w, self.base.get(key)) {
                    (Some(r), _) => self.replaced.extend(r.version()),
                    (None, Some(base)) => {
                        self.left_behind.push(data_key(stored, key));
                        self.replaced.extend(*base);
                    }
                    (None, None) => {}
                }
            }
        } else {
            self.elems.clear();
            self.replaced.clear();
            self.emptied_versions.clear();
            self.parked.clear();
            self.foreign.clear();
        }
        self.flushed = true;
        self.flushed_all |= all;
        self.writes.clear();
        self.order.clear();
        self.base.clear();
        self.pop_ahead.clear();
        ks.set_db_map(map);
        Ok(())
    }

    pub fn has_writes(&self) -> bool {
        self.flushed
            || !self.writes.is_empty()
            || !self.elems.is_empty()
            || !self.foreign.is_empty()
            || (self.parked.iter()).any(|st| st.flushed || !st.order.is_empty())
            || self.map_before.is_some()
    }

    /// `key`'s record in database `db`, another than this transaction's,
    /// expired or not: one staged there by [`Txn::put_in_db`], else the
    /// engine's. The caller holds `key`'s stripe (one name's stripe is
    /// the same in every database).
    pub fn rec_in_db(&self, db: u8, key: &[u8]) -> Result<Option<Rec>> {
        debug_assert_ne!(db, self.db);
        if let Some(st) = self.parked.iter().find(|st| st.db == db) {
            if let Some(w) = st.writes.get(key) {
                return Ok(w.clone());
            }
            if st.flushed {
                return Ok(None);
            }
        }
        if let Some((.., r, _)) = (self.foreign.iter().rev()).find(|f| f.0 == db && f.1 == key) {
            return Ok(Some(r.clone()));
        }
        self.ks.read_raw(&self.opts(), db, key)
    }

    /// Stages `r` at `key` of database `db`, another than this
    /// transaction's (`MOVE`, `COPY ... DB`), over `prior`, what
    /// [`Txn::rec_in_db`] found there: its collection version becomes
    /// garbage. A collection record keeps its version: its elements are
    /// shared by every database. Records `new` in that database.
    pub fn put_in_db(&mut self, db: u8, key: &[u8], r: Rec, prior: Option<Rec>) {
        debug_assert_ne!(db, self.db);
        if self.notify & crate::notify::NEW != 0 {
            self.events.push(crate::notify::Event {
                class: crate::notify::NEW,
                name: "new",
                db,
                key: key.to_vec(),
            });
        }
        let replaced = prior.and_then(|p| p.version());
        if let Some(st) = self.parked.iter_mut().find(|st| st.db == db) {
            self.replaced.extend(replaced);
            match st.writes.insert(key.to_vec(), Some(r)) {
                None => st.order.push(key.to_vec()),
                Some(old) => self.replaced.extend(old.and_then(|o| o.version())),
            }
            return;
        }
        self.foreign.push((db, key.to_vec(), r, replaced));
    }

    /// [`Txn::notify`] of an event on `key` of database `db`.
    pub fn notify_in(&mut self, db: u8, class: u32, name: &'static str, key: &[u8]) {
        if self.notify & class != 0 {
            self.events.push(crate::notify::Event {
                class,
                name,
                db,
                key: key.to_vec(),
            });
        }
    }

    /// The versions this transaction emptied ([`Txn::emptied_versions`])
    /// and stages no element put for: every element they had is deleted,
    /// so they need no garbage key. (One with a put staged anyway keeps
    /// the garbage key, which reclaims it.)
    fn emptied_clean(&self) -> FastSet<u64> {
        (self.emptied_versions.iter().copied())
            .filter(|&v| {
                let prefix = element_prefix(v);
                !(self
                    .elems
                    .range::<[u8], _>((Included(prefix.as_slice()), Unbounded)))
                .take_while(|(k, _)| k.starts_with(&prefix))
                .any(|(_, val)| val.is_some())
            })
            .collect()
    }

    /// The keys this transaction writes.
    /// About the bytes of the batch [`Txn::commit`] writes: the data
    /// keys' records and the elements (a pipelined run of 16 `SET`s of
    /// 1 KiB grew its batch from empty through a dozen reallocations,
    /// copying its values again each time).
    fn batch_bytes_hint(&self) -> usize {
        /// A put's kind byte and two lengths, plus a data key's tag, hash
        /// and database byte.
        const PUT_OVERHEAD_BYTES: usize = 1 + 4 + 4 + 10;
        let records: usize = (self.order.iter())
            .map(|k| {
                let value = match &self.writes[k] {
                    Some(Rec::Str(e)) => ENTRY_HEAD_MAX_BYTES + e.value.len(),
                    Some(Rec::Coll(_)) => 64,
                    None => 0,
                };
                PUT_OVERHEAD_BYTES + k.len() + value
            })
            .sum();
        let elems: usize = (self.elems.iter())
            .map(|(k, v)| PUT_OVERHEAD_BYTES + k.len() + v.as_ref().map_or(0, Vec::len))
            .sum();
        records + elems
    }

    pub fn written_keys(&self) -> &[Vec<u8>] {
        &self.order
    }

    /// The keys this transaction writes in every database it selected, by
    /// database.
    pub fn written_by_db(&self) -> Vec<(u8, Vec<Vec<u8>>)> {
        let mut v = vec![(self.db, self.order.clone())];
        v.extend(self.parked.iter().map(|st| (st.db, st.order.clone())));
        v
    }

    /// Applies the staged writes as one batch and bumps the watched keys
    /// among them. A database map changed by `SWAPDB`, `FLUSHDB` or
    /// `FLUSHALL` is written in the same batch, so the flush and every
    /// other write commit together or not at all.
    ///
    /// A collection version that a key held before and no key holds after
    /// becomes garbage in the same batch (`'g' | version`), so deleting or
    /// replacing a collection of any size is one small batch.
    pub fn commit(mut self, held: &mut Held<'_>) -> Result<()> {
        let Some(before) = self.map_before.take() else {
            return self.commit_batch(held, None);
        };
        let ks = self.ks;
        let after = ks.db_map_now();
        let r = self.commit_batch(held, Some(after));
        match &r {
            Ok(()) => {
                ks.changes.fetch_add(1, Ordering::Relaxed);
                let mut garbage = ks.garbage_dbs.lock();
                garbage.extend(before.stored.iter().filter(|&&s| !after.names(s)));
            }
            Err(_) => ks.set_db_map(before),
        }
        ks.swaps.fetch_add(1, Ordering::AcqRel);
        r
    }

    /// [`Txn::commit`], writing the database `map` in the batch if given.
    fn commit_batch(mut self, held: &mut Held<'_>, map: Option<DbMap>) -> Result<()> {
        let mut batch = WriteBatch::with_capacity(self.batch_bytes_hint());
        let mut stages = std::mem::take(&mut self.parked);
        stages.push(self.take_stage());
        if let Some(map) = map {
            batch.put(DB_MAP_KEY, map.encode());
        }
        for k in std::mem::take(&mut self.left_behind) {
            batch.delete(k);
        }
        let mut cleared = if self.flushed_all {
            Some(self.ks.clear_buckets_for_flushall()?)
        } else {
            None
        };
        let mut dead = std::mem::take(&mut self.replaced);
        let mut live = FastSet::default();
        for st in &stages {
            self.stage_records(st, &mut batch, &mut dead, &mut live)?;
        }
        let mut foreign_keys = Vec::new();
        for (db, key, r, replaced) in std::mem::take(&mut self.foreign) {
            if let Rec::Coll(m) = &r {
                self.ks.note_collection(&key, &mut batch);
                live.insert(m.version);
            }
            dead.extend(replaced);
            let stored = self.ks.stored_db(db);
            put_rec(&mut batch, data_key(stored, &key), &r);
            if let Some(at) = r.expire_at_ms() {
                batch.put(expiry_key(stored, at, &key), []);
            }
            foreign_keys.push((db, key));
        }
        let emptied = self.emptied_clean();
        for (k, v) in std::mem::take(&mut self.elems) {
            match v {
                Some(v) => {
                    batch.put(k, v);
                }
                None => {
                    batch.delete(k);
                }
            }
        }
        dead.sort_unstable();
        dead.dedup();
        for v in dead {
            if !live.contains(&v) && !emptied.contains(&v) {
                batch.put(garbage_key(v), []);
            }
        }
        for k in std::mem::take(&mut self.index_deletes) {
            batch.delete(k);
        }
        if let Some((k, v)) = self.mark.take() {
            batch.put(k, v);
        }
        if let Some(c) = &cleared {
            c.stage_deletes(&mut batch);
        }
        self.ks.write(batch)?;
        if let Some(c) = &mut cleared {
            c.committed = true;
        }
        for (v, max, bound) in std::mem::take(&mut self.pop_narrowings) {
            self.ks.narrow_pop_bounds(v, max, bound);
        }
        if !self.pops.is_empty() {
            let mut all = self.ks.pop_bounds.lock();
            for v in std::mem::take(&mut self.pops) {
                Keyspace::bounds_entry(&mut all, v).popped += 1;
            }
        }
        for (v, start, end) in std::mem::take(&mut self.holes) {
            self.ks.add_hole(v, start, end);
        }
        let changed: usize = (stages.iter())
            .map(|st| st.order.len() + st.modified.len() + usize::from(st.flushed))
            .sum();
        self.ks.changes.fetch_add(changed as u64, Ordering::Relaxed);
        self.ks.touch(
            held,
            (stages.into_iter())
                .flat_map(|st| {
                    let db = st.db;
                    st.order
                        .into_iter()
                        .chain(st.modified)
                        .map(move |k| (db, k))
                })
                .chain(foreign_keys)
                .chain(std::mem::take(&mut self.swap_touched)),
        );
        Ok(())
    }

    /// Adds the records staged in one database to `batch`, noting the
    /// versions they hold (`live`) and replace (`dead`).
    fn stage_records(
        &self,
        st: &DbStage,
        batch: &mut WriteBatch,
        dead: &mut Vec<u64>,
        live: &mut FastSet<u64>,
    ) -> Result<()> {
        let stored = self.ks.stored_db(st.db);
        for key in &st.order {
            let rec = &st.writes[key];
            if let Some(v) = rec.as_ref().and_then(Rec::version) {
                live.insert(v);
            }
            let base = match st.base.get(key) {
                Some(b) => *b,
                None if st.flushed || !self.ks.may_hold_collection(key) => None,
                // Written blind (a plain `SET`): what did it replace?
                None => self.ks.replaced_version(st.db, key)?,
            };
            dead.extend(base);
            match rec {
                Some(r) => {
                    if let Rec::Coll(_) = r {
                        self.ks.note_collection(key, batch);
                    }
                    put_rec(batch, data_key(stored, key), r);
                    if let Some(at) = r.expire_at_ms() {
                        batch.put(expiry_key(stored, at, key), []);
                    }
                }
                None => {
                    batch.delete(data_key(stored, key));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The collection example of `docs/format/server-keyspace.md`.
    #[test]
    fn a_collection_encodes_as_documented() {
        let mut m = Meta {
            kind: CollKind::Hash,
            expire_at_ms: None,
            version: 0,
            count: 1,
            head: 0,
            tail: 0,
            pop_lo: None,
            pop_hi: None,
        };
        let mut want = vec![0x02, 0x01];
        want.extend([0u8; 16]);
        want.extend([1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(m.encode(), want);
        assert_eq!(Meta::decode(&want), Some(m.clone()));
        assert_eq!(name_hash(b"name"), [0x0c, 0x35, 0x4e, 0xcd]);
        assert_eq!(
            m.named(b"name"),
            [&[0x65, 1, 0][..], &name_hash(b"name"), b"name"].concat()
        );
        m.kind = CollKind::List;
        m.version = 1;
        m.tail = 1;
        assert_eq!(m.encode().len(), LIST_META_BYTES);
        assert_eq!(&m.encode()[34..], [1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            m.elem(&list_seq(0)),
            [0x65, 1, 1, 0x80, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(garbage_key(0), [0x67, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(list_seq_decode(list_seq(-5)), -5);
        assert!(list_seq(-1) < list_seq(0));
        for (a, b) in [
            (-2.5, -1.0),
            (-1.0, -0.0),
            (0.0, 1e-300),
            (1.0, f64::INFINITY),
        ] {
            assert!(score_sortable(a) < score_sortable(b), "{a} < {b}");
        }
        assert_eq!(score_sortable(-0.0), score_sortable(0.0));
        assert_eq!(score_from_sortable(score_sortable(-2.5)), -2.5);
        assert!(
            Meta::decode(&want[..20]).is_none(),
            "a short record is refused"
        );
    }

    /// Holes merge with those they overlap or touch, and a key taken out
    /// splits the hole holding it.
    #[test]
    fn holes_merge_and_split() {
        let mut h = BTreeMap::new();
        let k = |s: &str| s.as_bytes().to_vec();
        merge_hole(&mut h, k("b"), k("d"));
        merge_hole(&mut h, k("f"), k("h"));
        merge_hole(&mut h, k("d"), k("e"));
        assert_eq!(h, BTreeMap::from([(k("b"), k("e")), (k("f"), k("h"))]));
        merge_hole(&mut h, k("a"), k("g"));
        assert_eq!(h, BTreeMap::from([(k("a"), k("h"))]));
        split_hole(&mut h, b"c");
        assert_eq!(h, BTreeMap::from([(k("a"), k("c")), (k("c\0"), k("h"))]));
        split_hole(&mut h, b"a");
        split_hole(&mut h, b"z");
        assert_eq!(h, BTreeMap::from([(k("a\0"), k("c")), (k("c\0"), k("h"))]));
        merge_hole(&mut h, k("x"), k("x"));
        assert_eq!(h.len(), 2, "an empty hole is no hole");
    }

    /// Holes added at random are kept as the maximal runs of what they
    /// cover, disjoint and never touching, whichever holes each add meets
    /// (none, one before, several after): one-byte keys, checked against
    /// the covered points.
    #[test]
    fn added_holes_are_the_runs_they_cover() {
        use rand::{Rng, SeedableRng};
        let seed: u64 = rand::random();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for _ in 0..200 {
            let mut h = BTreeMap::new();
            let mut covered = [false; 64];
            for _ in 0..rng.gen_range(1..40) {
                let a: u8 = rng.gen_range(0..64);
                let b: u8 = rng.gen_range(0..64);
                merge_hole(&mut h, vec![a], vec![b]);
                for p in a..b {
                    covered[p as usize] = true;
                }
                let mut runs = Vec::new();
                let mut p = 0;
                while p < 64 {
                    if covered[p] {
                        let from = p;
                        while p < 64 && covered[p] {
                            p += 1;
                        }
                        runs.push((vec![from as u8], vec![p as u8]));
                    }
                    p += 1;
                }
                let got: Vec<(Vec<u8>, Vec<u8>)> = h.clone().into_iter().collect();
                assert_eq!(got, runs, "seed {seed}");
            }
        }
    }

    fn one_thread_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    /// A connection whose next write's stripe is locked waits without
    /// blocking its thread, and the unlock wakes it (not the recheck).
    #[test]
    fn a_wait_for_a_locked_stripe_yields_and_the_unlock_wakes_it() {
        let ks = crate::testutil::keyspace();
        let rt = one_thread_runtime();
        let forever = std::time::Duration::from_secs(10);
        assert_eq!(
            rt.block_on(ks.wait_for_stripe_rechecking(b"hot", forever)),
            StripeWait::Free
        );
        let (locked_tx, locked_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let ks = &ks;
            s.spawn(move || {
                let held = ks.lock_keys(&[b"hot"]);
                locked_tx.send(()).unwrap();
                release_rx.recv().unwrap();
                drop(held);
            });
            locked_rx.recv().unwrap();
            let how = rt.block_on(async {
                let wait = ks.wait_for_stripe_rechecking(b"hot", forever);
                tokio::pin!(wait);
                // The thread runs other work while the wait is pending.
                for _ in 0..3 {
                    tokio::select! {
                        biased;
                        _ = &mut wait => panic!("the stripe is still locked"),
                        _ = tokio::task::yield_now() => {}
                    }
                }
                assert_eq!(
                    ks.waiters[Keyspace::stripe_of(b"hot")]
                        .count
                        .load(Ordering::Relaxed),
                    1
                );
                release_tx.send(()).unwrap();
                wait.await
            });
            assert_eq!(how, StripeWait::Woken);
        });
        assert_eq!(
            ks.waiters[Keyspace::stripe_of(b"hot")]
                .count
                .load(Ordering::Relaxed),
            0
        );
    }

    /// A wait dropped with its connection uncounts itself, so that later
    /// connections do not queue behind it.
    #[test]
    fn a_cancelled_wait_leaves_no_waiter_behind() {
        let ks = crate::testutil::keyspace();
        let rt = one_thread_runtime();
        let held = ks.lock_keys(&[b"hot"]);
        rt.block_on(async {
            let r = tokio::time::timeout(
                std::time::Duration::from_millis(1),
                ks.wait_for_stripe(b"hot"),
            )
            .await;
            assert!(r.is_err(), "the stripe is locked");
        });
        drop(held);
        let i = Keyspace::stripe_of(b"hot");
        assert_eq!(ks.waiters[i].count.load(Ordering::Relaxed), 0);
        assert_eq!(rt.block_on(ks.wait_for_stripe(b"hot")), StripeWait::Free);
    }

    fn open_keyspace(fs: &sluicedb::fs::MemFs) -> Keyspace {
        let o = sluicedb::Options::default().fs(Arc::new(fs.clone()));
        Keyspace::new(Db::open("/db", o).unwrap(), Fsync::No).unwrap()
    }

    /// Stages and commits `f`'s writes to `key` alone.
    fn write_key(ks: &Keyspace, key: &[u8], f: impl FnOnce(&mut Txn<'_>)) {
        let mut held = ks.lock_keys(&[key]);
        let mut txn = Txn::new(ks);
        f(&mut txn);
        txn.commit(&mut held).unwrap();
    }

    fn make_hash(ks: &Keyspace, key: &[u8]) {
        write_key(ks, key, |txn| {
            let mut m = txn.new_coll(CollKind::Hash).unwrap();
            for f in [&b"a"[..], b"b", b"c"] {
                txn.elem_put(m.named(f), b"v".to_vec());
                m.count += 1;
            }
            txn.put_meta(key, m);
        });
    }

    /// A collection emptied by deleting its last element leaves no garbage
    /// key (nothing of it is left to reclaim); one emptied while a put of
    /// its elements is staged keeps it, and the reclaimer deletes that
    /// element. The keyspace check passes either way.
    #[test]
    fn an_emptied_collection_is_not_garbage() {
        let fs = sluicedb::fs::MemFs::new();
        let ks = open_keyspace(&fs);
        let empty = |ks: &Keyspace, stray: bool| {
            let rec = ks.read(0, b"h", now_ms()).unwrap();
            let Some(Rec::Coll(mut m)) = rec else {
                panic!("a hash")
            };
            write_key(ks, b"h", |txn| {
                for f in [&b"a"[..], b"b", b"c"] {
                    txn.elem_del(m.named(f));
                    m.count -= 1;
                }
                if stray {
                    txn.elem_put(m.named(b"stray"), b"v".to_vec());
                }
                txn.put_meta(b"h", m);
            });
        };
        make_hash(&ks, b"h");
        empty(&ks, false);
        assert!(!ks.garbage_left().unwrap());
        assert_eq!(ks.check().unwrap(), Vec::<String>::new());
        make_hash(&ks, b"h");
        empty(&ks, true);
        assert!(ks.garbage_left().unwrap());
        assert_eq!(ks.check().unwrap(), Vec::<String>::new());
        assert_eq!(ks.reclaim(100).unwrap(), 1);
        assert!(!ks.garbage_left().unwrap());
    }

    /// A plain `SET` reads what it overwrites only in a bucket that held
    /// a collection: the bucket keys survive a reopen, a database written
    /// before them is scanned for its collections once, and an overwritten
    /// collection's elements become garbage either way.
    #[test]
    fn a_blind_set_finds_the_collection_it_overwrites_by_its_bucket() {
        let fs = sluicedb::fs::MemFs::new();
        let ks = open_keyspace(&fs);
        assert!(!ks.may_hold_collection(b"h"));
        make_hash(&ks, b"h");
        make_hash(&ks, b"h2");
        assert!(ks.may_hold_collection(b"h"));
        let lonely = (0..1000)
            .map(|i| format!("s{i}").into_bytes())
            .find(|k| !ks.may_hold_collection(k))
            .expect("most buckets are clear");
        drop(ks);
        let ks = open_keyspace(&fs);
        assert!(ks.may_hold_collection(b"h") && ks.may_hold_collection(b"h2"));
        assert!(!ks.may_hold_collection(&lonely));
        write_key(&ks, b"h", |txn| txn.set(b"h", Entry::plain(b"x".to_vec())));
        assert!(
            ks.garbage_left().unwrap(),
            "the hash's elements are garbage"
        );
        ks.reclaim(100).unwrap();
        assert!(!ks.garbage_left().unwrap());
        assert_eq!(ks.check().unwrap(), Vec::<String>::new());

        // As written before bucket keys: none, and no marker.
        let bucket = Keyspace::coll_bucket_key(Keyspace::coll_bucket(b"h2"));
        ks.db().delete(bucket).unwrap();
        ks.db().delete(COLL_BUCKETS_KEPT_KEY).unwrap();
        assert!(!ks.check().unwrap().is_empty(), "the check sees it");
        drop(ks);
        let ks = open_keyspace(&fs);
        assert!(ks.may_hold_collection(b"h2"), "found by the scan");
        assert_eq!(ks.check().unwrap(), Vec::<String>::new());
        write_key(&ks, b"h2", |txn| {
            txn.set(b"h2", Entry::plain(b"x".to_vec()))
        });
        assert!(ks.garbage_left().unwrap());

        // FLUSHALL clears the buckets in its batch, and they stay clear
        // after a reopen; a collection its transaction makes is marked.
        let mut held = ks.lock_all();
        let mut txn = Txn::new(&ks);
        txn.flush(true).unwrap();
        let mut m = txn.new_coll(CollKind::Hash).unwrap();
        txn.elem_put(m.named(b"f"), b"v".to_vec());
        m.count += 1;
        txn.put_meta(b"h3", m);
        txn.commit(&mut held).unwrap();
        drop(held);
        assert!(!ks.may_hold_collection(b"h2") && !ks.may_hold_collection(b"h"));
        assert!(ks.may_hold_collection(b"h3"));
        drop(ks);
        let ks = open_keyspace(&fs);
        assert!(!ks.may_hold_collection(b"h2"));
        assert!(ks.may_hold_collection(b"h3"));
        assert_eq!(ks.check().unwrap(), Vec::<String>::new());
        make_hash(&ks, b"h2");
        assert!(ks.may_hold_collection(b"h2"));
        assert_eq!(ks.check().unwrap(), Vec::<String>::new());
    }

    /// Rounds that stop inside a garbage version go on where they
    /// stopped, and every element of every garbage version goes, none of
    /// a live one.
    #[test]
    fn reclaim_rounds_go_on_where_the_last_stopped() {
        let fs = sluicedb::fs::MemFs::new();
        let ks = open_keyspace(&fs);
        let big = |ks: &Keyspace, key: &[u8], n: usize| {
            write_key(ks, key, |txn| {
                let mut m = txn.new_coll(CollKind::Set).unwrap();
                for i in 0..n {
                    txn.elem_put(m.named(format!("m{i:05}").as_bytes()), Vec::new());
                    m.count += 1;
                }
                txn.put_meta(key, m);
            })
        };
        big(&ks, b"a", 2_500);
        big(&ks, b"b", 1_700);
        big(&ks, b"live", 300);
        for key in [&b"a"[..], b"b"] {
            write_key(&ks, key, |txn| txn.delete(key));
        }
        let mut rounds = Vec::new();
        loop {
            let n = ks.reclaim(700).unwrap();
            if n == 0 && !ks.garbage_left().unwrap() {
                break;
            }
            rounds.push(n);
            assert!(rounds.len() < 20, "reclaiming never ends: {rounds:?}");
        }
        assert_eq!(rounds.iter().sum::<u64>(), 4_200, "{rounds:?}");
        assert!(rounds.len() >= 4, "each round stops past 700: {rounds:?}");
        assert_eq!(ks.check().unwrap(), Vec::<String>::new());
        let live = ks.read(0, b"live", now_ms()).unwrap().unwrap();
        let m = match live {
            Rec::Coll(m) => m,
            Rec::Str(_) => panic!("a set"),
        };
        assert_eq!(Txn::new(&ks).all_elems(&m).unwrap().len(), 300);
    }

    /// Element prefixes sort as their versions do, none is a prefix of
    /// another's, each version's keys lie in `prefix .. end`, and the
    /// version reads back from a key.
    #[test]
    fn element_prefixes_keep_version_order() {
        let mut versions = vec![
            0,
            1,
            255,
            256,
            65_535,
            65_536,
            1 << 56,
            u64::MAX - 1,
            u64::MAX,
        ];
        versions.extend((0..64).map(|b| 1u64 << b).flat_map(|v| [v - 1, v, v + 1]));
        versions.sort_unstable();
        versions.dedup();
        for w in versions.windows(2) {
            let (a, b) = (element_prefix(w[0]), element_prefix(w[1]));
            assert!(a < b && !b.starts_with(&a), "{} < {}", w[0], w[1]);
            assert!(element_end(w[0]) <= b, "{} ends before {}", w[0], w[1]);
        }
        for &v in &versions {
            let mut k = element_prefix(v);
            assert_eq!(k.len(), element_prefix_len(v));
            k.extend_from_slice(&[0xff; 12]);
            assert!(k < element_end(v), "{v}: a key past its end");
            assert_eq!(split_element_key(&k), Some((v, element_prefix_len(v))));
        }
        assert_eq!(element_prefix(300), [0x65, 2, 0x01, 0x2c]);
        assert_eq!(element_end(255), [0x65, 2]);
        // The layout before keyspace format 1, and a non-shortest one.
        assert_eq!(split_element_key(&[0x65, 0, 0, 0, 0, 0, 0, 0, 0, 7]), None);
        assert_eq!(split_element_key(&[0x65, 2, 0, 7]), None);
        assert_eq!(split_element_key(&[0x65, 3, 1]), None, "too short");
        // Names sharing a long prefix differ within an element key's
        // first 8 bytes (the memtable's inline key prefix).
        let mut m = Meta {
            kind: CollKind::Hash,
            expire_at_ms: None,
            version: 1234,
            count: 2,
            head: 0,
            tail: 0,
            pop_lo: None,
            pop_hi: None,
        };
        let (a, b) = (m.named(b"element:000000001"), m.named(b"element:000000002"));
        assert_ne!(a[..8], b[..8]);
        assert_eq!(name_of(m.suffix_of(&a)), Some(&b"element:000000001"[..]));
        let mut forged = m.suffix_of(&a).to_vec();
        forged[0] ^= 1;
        assert_eq!(name_of(&forged), None, "a wrong name hash is refused");
        m.kind = CollKind::Set;
        assert_eq!(m.named(b"x"), [0x65, 2, 0x04, 0xd2, b'x']);
    }

    /// The worked example of `docs/format/server-keyspace.md`.
    /// The database example of `docs/format/server-keyspace.md`.
    #[test]
    fn a_key_of_database_9_encodes_as_documented() {
        let k = data_key(9, b"user:1");
        let want = [
            &[0x64, 0x09][..],
            &xxh3_64(b"user:1").to_be_bytes(),
            b"user:1",
        ]
        .concat();
        assert_eq!(k, want);
        assert_eq!(
            split_data_key(9, &k),
            Some((xxh3_64(b"user:1"), &b"user:1"[..]))
        );
        assert_eq!(split_data_key(0, &k), None);
        assert_eq!(
            split_any_data_key(&k).map(|(db, _, key)| (db, key)),
            Some((9, &b"user:1"[..]))
        );
        assert_eq!(
            expiry_key(9, 1_700_000_010_000, b"user:1"),
            [
                &[0x79, 0, 0, 0x01, 0x8b, 0xcf, 0xe5, 0x8f, 0x10, 0x09][..],
                b"user:1"
            ]
            .concat()
        );
        // Database 9's keys are one range, between database 8's and 10's.
        assert!(data_end(8) <= data_prefix(9) && k < data_end(9));
        assert!(data_end(9) <= data_prefix(10));
    }

    #[test]
    fn the_worked_example_encodes_as_documented() {
        let e = Entry {
            value: Bytes::from_static(b"hi"),
            expire_at_ms: Some(1_700_000_010_000),
        };
        assert_eq!(
            e.encode(),
            [0x01, 0x10, 0x8f, 0xe5, 0xcf, 0x8b, 0x01, 0x00, 0x00, b'h', b'i']
        );
        assert_eq!(Entry::decode(e.encode(), b"user:1").unwrap(), e);
        assert_eq!(
            expiry_key(0, 1_700_000_010_000, b"user:1"),
            [
                &[0x78, 0, 0, 0x01, 0x8b, 0xcf, 0xe5, 0x8f, 0x10][..],
                b"user:1"
            ]
            .concat()
        );
        let k = data_key(0, b"user:1");
        assert_eq!(k[0], b'k');
        assert_eq!(
            split_data_key(0, &k),
            Some((xxh3_64(b"user:1"), &b"user:1"[..]))
        );
        assert_eq!(Entry::plain(b"hi".to_vec()).encode(), [0x00, b'h', b'i']);
        // The commit puts a string as its header and value in parts.
        for e in [e.clone(), Entry::plain(b"hi".to_vec())] {
            let (mut parts, mut whole) = (WriteBatch::new(), WriteBatch::new());
            put_rec(&mut parts, k.clone(), &Rec::Str(e.clone()));
            whole.put(&k, e.encode());
            assert_eq!(parts, whole);
        }
        assert!(
            Entry::decode(vec![7, 1, 2], b"k").is_err(),
            "an unknown tag is an error"
        );
    }
}
