//! Public iterators: [`DbIterator`], a bidirectional cursor with seek, and
//! [`Range`], a standard (double-ended) iterator over a key range.
//!
//! Both read a consistent view: the snapshot given, or the state when they
//! were created. They pin the memtables and tables they read, so files they
//! need are not deleted while they live.

use std::cell::OnceCell;
use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use crate::error::Result;
use crate::fs::IoClass;
use crate::iter::DbIter;
use crate::key::Kind;
use crate::pointer::ValuePointer;
use crate::value::ValueStore;

/// A cursor over key-value pairs in a key range, in both directions.
///
/// A new cursor is unpositioned: call one of the `seek*` methods first.
/// `key`/`value` may be called only while [`DbIterator::valid`]; once it
/// turns invalid, [`DbIterator::status`] tells whether that was the end of
/// the range or an error.
pub struct DbIterator {
    inner: DbIter,
    /// What the cursor reads, kept alive while it lives: the memtables and
    /// tables, and its registration as a reader (so GC keeps the value
    /// files its pointers may need).
    _pinned: Box<dyn Send + Sync>,
    values: Option<Arc<dyn ValueStore>>,
    /// The separated value at the current position, once read.
    fetched: OnceCell<Vec<u8>>,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    status: Result<()>,
}

impl DbIterator {
    pub(crate) fn new(
        inner: DbIter,
        pinned: Box<dyn Send + Sync>,
        values: Option<Arc<dyn ValueStore>>,
        lower: Bound<Vec<u8>>,
        upper: Bound<Vec<u8>>,
    ) -> Self {
        DbIterator {
            inner,
            _pinned: pinned,
            values,
            fetched: OnceCell::new(),
            lower,
            upper,
            status: Ok(()),
        }
    }

    fn above_lower(&self, k: &[u8]) -> bool {
        match &self.lower {
            Bound::Unbounded => true,
            Bound::Included(l) => k >= l.as_slice(),
            Bound::Excluded(l) => k > l.as_slice(),
        }
    }

    fn below_upper(&self, k: &[u8]) -> bool {
        match &self.upper {
            Bound::Unbounded => true,
            Bound::Included(u) => k <= u.as_slice(),
            Bound::Excluded(u) => k < u.as_slice(),
        }
    }

    /// True while positioned on a pair inside the range.
    pub fn valid(&self) -> bool {
        self.inner.valid()
            && self.status.is_ok()
            && self.above_lower(self.inner.key())
            && self.below_upper(self.inner.key())
    }

    /// Positions at the first pair of the range.
    pub fn seek_to_first(&mut self) {
        match self.lower.clone() {
            Bound::Unbounded => self.inner.seek_to_first(),
            Bound::Included(k) => self.inner.seek(&k),
            Bound::Excluded(k) => {
                self.inner.seek(&k);
                if self.inner.valid() && self.inner.key() == k.as_slice() {
                    self.inner.next();
                }
            }
        }
        self.check_value();
    }

    /// Positions at the last pair of the range.
    pub fn seek_to_last(&mut self) {
        match self.upper.clone() {
            Bound::Unbounded => self.inner.seek_to_last(),
            Bound::Excluded(k) => self.inner.seek_before(&k),
            Bound::Included(mut k) => {
                k.push(0); // the smallest key after k
                self.inner.seek_before(&k);
            }
        }
        self.check_value();
    }

    /// Positions at the first pair with key `>= key` (and in the range).
    pub fn seek(&mut self, key: impl AsRef<[u8]>) {
        let key = key.as_ref();
        if self.above_lower(key) {
            self.inner.seek(key);
            self.check_value();
        } else {
            self.seek_to_first();
        }
    }

    /// Positions at the last pair with key `<= key` (and in the range).
    pub fn seek_for_prev(&mut self, key: impl AsRef<[u8]>) {
        let key = key.as_ref();
        if self.below_upper(key) {
            let mut k = key.to_vec();
            k.push(0);
            self.inner.seek_before(&k);
            self.check_value();
        } else {
            self.seek_to_last();
        }
    }

    /// Moves to the next pair. Requires `valid()`.
    pub fn next(&mut self) {
        if self.valid() {
            self.inner.next();
            self.check_value();
        }
    }

    /// Moves to the previous pair. Requires `valid()`.
    pub fn prev(&mut self) {
        if self.valid() {
            self.inner.prev();
            self.check_value();
        }
    }

    /// The current key.
    ///
    /// # Panics
    /// If the cursor is not `valid()`.
    pub fn key(&self) -> &[u8] {
        assert!(self.valid(), "key() on an invalid iterator");
        self.inner.key()
    }

    /// The current value. A value kept in the value store is read on the
    /// first call at each position (so key-only scans read no values); that
    /// read can fail, hence the `Result`.
    ///
    /// # Panics
    /// If the cursor is not `valid()`.
    pub fn value(&self) -> Result<&[u8]> {
        assert!(self.valid(), "value() on an invalid iterator");
        let (kind, raw) = self.inner.entry();
        if kind != Kind::ValuePointer {
            return Ok(raw);
        }
        if let Some(v) = self.fetched.get() {
            return Ok(v);
        }
        let v = crate::value::resolve(
            self.values.as_deref(),
            self.inner.key(),
            raw,
            IoClass::UserRead,
        )?;
        Ok(self.fetched.get_or_init(|| v))
    }

    /// `Ok` unless reading failed (I/O error or corruption).
    pub fn status(&self) -> Result<()> {
        self.status.clone()?;
        self.inner.status()
    }

    /// Called after every move: the cached value belongs to the old position.
    fn check_value(&mut self) {
        self.fetched = OnceCell::new();
    }

    /// The current entry as stored in the index: a value or a pointer.
    fn raw_entry(&self) -> (Kind, &[u8]) {
        self.inner.entry()
    }

    fn current(&self) -> Option<Result<(Vec<u8>, Vec<u8>)>> {
        if self.valid() {
            return Some(self.value().map(|v| (self.key().to_vec(), v.to_vec())));
        }
        self.status().err().map(Err)
    }
}

/// One `next()` or `next_back()` result.
type Item = Result<(Vec<u8>, Vec<u8>)>;

/// Pairs returned in a row from one end before read-ahead starts (WiscKey, FAST '16,
/// §3.3.1: "after a few Next() calls").
const READAHEAD_AFTER: usize = 2;
/// First read-ahead window, in pairs; it doubles up to the maximum.
const READAHEAD_FIRST: usize = 16;
const READAHEAD_MAX: usize = 256;
/// Separated value bytes one window may read.
const READAHEAD_MAX_BYTES: u64 = 4 << 20;

/// The pairs of a key range as a standard iterator; `next_back` (and so
/// `.rev()`) walks from the end. Yields `Err` once if reading fails.
///
/// Scans read separated values ahead (WiscKey, FAST '16, §3.3.1): once an end has
/// returned a few pairs in a row, it gathers the next pairs of the index
/// (16, doubling to 256, at most 4 MiB of values) and reads their values
/// together with `ValueStore::read_many`: nearby records with one read,
/// the reads in parallel ([`crate::ValueOptions::scan_prefetch_threads`]).
/// A caller that knows how many pairs it wants says so with
/// [`Range::limit`]: the windows then cover exactly those pairs (growing
/// windows read up to twice what a short scan takes).
pub struct Range {
    front: End,
    back: End,
    /// Last keys returned from each end; the ends stop when they meet.
    front_key: Option<Vec<u8>>,
    back_key: Option<Vec<u8>>,
    done: bool,
    /// Pairs still to return, if the caller set a [`Range::limit`].
    remaining: Option<usize>,
}

/// One end of a [`Range`]: a cursor and the pairs it has read ahead.
struct End {
    cursor: DbIterator,
    forward: bool,
    started: bool,
    /// Values may be read ahead (there is a value store and threads).
    prefetch: bool,
    ahead: VecDeque<Item>,
    /// Pairs returned so far; read-ahead starts after a few.
    returned: usize,
    window: usize,
}

impl End {
    fn new(cursor: DbIterator, forward: bool, prefetch: bool) -> Self {
        let prefetch = prefetch && cursor.values.is_some();
        End {
            cursor,
            forward,
            started: false,
            prefetch,
            ahead: VecDeque::new(),
            returned: 0,
            window: READAHEAD_FIRST,
        }
    }

    fn step(&mut self) {
        match (self.started, self.forward) {
            (true, true) => self.cursor.next(),
            (true, false) => self.cursor.prev(),
            (false, true) => self.cursor.seek_to_first(),
            (false, false) => self.cursor.seek_to_last(),
        }
        self.started = true;
    }

    /// The next pair from this end; `stop_at` is the other end's last key
    /// (read-ahead does not go past it), `budget` the most pairs the range
    /// will still return if the caller set a [`Range::limit`].
    fn pull(&mut self, stop_at: Option<&[u8]>, budget: Option<usize>) -> Option<Item> {
        if let Some(item) = self.ahead.pop_front() {
            return Some(item);
        }
        self.returned += 1;
        // Without a limit, a range read for one or two pairs (a point
        // lookup by seek) should not pay for a window; with one, the
        // window is exactly what the caller will take.
        let window = match budget {
            Some(b) => b.min(READAHEAD_MAX),
            None if self.returned > READAHEAD_AFTER => self.window,
            None => 1,
        };
        if !self.prefetch || window <= 1 {
            self.step();
            return self.cursor.current();
        }
        self.read_ahead(stop_at, window);
        if budget.is_none() {
            self.window = (self.window * 2).min(READAHEAD_MAX);
        }
        self.ahead.pop_front()
    }

    /// Gathers the next `window` pairs and reads their separated values in
    /// one batch.
    fn read_ahead(&mut self, stop_at: Option<&[u8]>, window: usize) {
        let mut entries: Vec<(Vec<u8>, Kind, Vec<u8>)> = Vec::new();
        let mut bytes = 0u64;
        while entries.len() < window && bytes < READAHEAD_MAX_BYTES {
            self.step();
            if !self.cursor.valid() {
                break;
            }
            let key = self.cursor.key();
            let met = stop_at.is_some_and(|b| if self.forward { key >= b } else { key <= b });
            if met {
                break;
            }
            let (kind, raw) = self.cursor.raw_entry();
            bytes += match kind {
                Kind::ValuePointer => ValuePointer::decode(raw).map_or(0, |p| p.record_len.into()),
                _ => raw.len() as u64,
            };
            entries.push((key.to_vec(), kind, raw.to_vec()));
        }
        let mut values = self.resolve(&entries).into_iter();
        for (key, kind, raw) in entries {
            let value = match kind {
                Kind::ValuePointer => values.next().expect("one value per pointer"),
                _ => Ok(raw),
            };
            let failed = value.is_err();
            self.ahead.push_back(value.map(|v| (key, v)));
            if failed {
                return; // the range ends at its first error
            }
        }
        if let Err(e) = self.cursor.status() {
            self.ahead.push_back(Err(e));
        }
    }

    /// The values of the pointer entries among `entries`, in order.
    fn resolve(&self, entries: &[(Vec<u8>, Kind, Vec<u8>)]) -> Vec<Result<Vec<u8>>> {
        let mut requests = Vec::new();
        let mut malformed = None;
        for (key, kind, raw) in entries {
            if *kind != Kind::ValuePointer {
                continue;
            }
            match ValuePointer::decode(raw) {
                Some(p) => requests.push((p, key.as_slice())),
                None => {
                    malformed = Some(requests.len());
                    break;
                }
            }
        }
        let store = self
            .cursor
            .values
            .as_ref()
            .expect("read-ahead needs a value store");
        let mut out = store.read_many(&requests, IoClass::UserRead);
        if malformed.is_some() {
            out.push(Err(crate::error::Error::corruption(
                std::path::Path::new(""),
                0,
                "malformed value pointer in the index",
            )));
        }
        out
    }
}

impl Range {
    /// `front` and `back` are two cursors over the same pinned view.
    pub(crate) fn new(front: DbIterator, back: DbIterator, prefetch: bool) -> Self {
        Range {
            front: End::new(front, true, prefetch),
            back: End::new(back, false, prefetch),
            front_key: None,
            back_key: None,
            done: false,
            remaining: None,
        }
    }

    /// Returns at most `n` pairs (from both ends together), like
    /// [`Iterator::take`], and tells the read-ahead: it then reads the
    /// values of exactly the pairs still wanted, in one batch from the
    /// first pair on, instead of growing windows that may read far past
    /// what a short scan takes.
    #[must_use]
    pub fn limit(mut self, n: usize) -> Self {
        self.remaining = Some(n);
        self
    }

    /// Counts a pair about to be returned against the limit; false once
    /// the limit is reached.
    fn take_one(&mut self) -> bool {
        match &mut self.remaining {
            Some(0) => {
                self.done = true;
                false
            }
            Some(n) => {
                *n -= 1;
                true
            }
            None => true,
        }
    }
}

impl Iterator for Range {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        if self.done || !self.take_one() {
            return None;
        }
        let budget = self.remaining.map(|n| n + 1);
        let item = self.front.pull(self.back_key.as_deref(), budget);
        match &item {
            Some(Ok((k, _))) => {
                if self.back_key.as_ref().is_some_and(|b| k >= b) {
                    self.done = true;
                    return None;
                }
                self.front_key = Some(k.clone());
            }
            _ => self.done = true,
        }
        item
    }
}

impl DoubleEndedIterator for Range {
    fn next_back(&mut self) -> Option<Item> {
        if self.done || !self.take_one() {
            return None;
        }
        let budget = self.remaining.map(|n| n + 1);
        let item = self.back.pull(self.front_key.as_deref(), budget);
        match &item {
            Some(Ok((k, _))) => {
                if self.front_key.as_ref().is_some_and(|f| k <= f) {
                    self.done = true;
                    return None;
                }
                self.back_key = Some(k.clone());
            }
            _ => self.done = true,
        }
        item
    }
}
