//! Public iterators: [`DbIterator`], a bidirectional cursor with seek, and
//! [`Range`], a standard (double-ended) iterator over a key range.
//!
//! Both read a consistent view: the snapshot given, or the state when they
//! were created. They pin the memtables and tables they read, so files they
//! need are not deleted while they live.

use std::ops::Bound;
use std::sync::Arc;

use std::cell::OnceCell;

use crate::db::SuperVersion;
use crate::error::Result;
use crate::fs::IoClass;
use crate::iter::DbIter;
use crate::key::Kind;
use crate::value::log::store::LogStore;

/// A cursor over key-value pairs in a key range, in both directions.
///
/// A new cursor is unpositioned: call one of the `seek*` methods first.
/// `key`/`value` may be called only while [`DbIterator::valid`]; once it
/// turns invalid, [`DbIterator::status`] tells whether that was the end of
/// the range or an error.
pub struct DbIterator {
    inner: DbIter,
    _pinned: Arc<SuperVersion>,
    _registered: Box<crate::db::ReadGuard>,
    values: Option<Arc<LogStore>>,
    /// The separated value at the current position, once read.
    fetched: OnceCell<Vec<u8>>,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    status: Result<()>,
}

impl DbIterator {
    pub(crate) fn new(
        inner: DbIter,
        pinned: Arc<SuperVersion>,
        values: Option<Arc<LogStore>>,
        registered: Box<crate::db::ReadGuard>,
        lower: Bound<Vec<u8>>,
        upper: Bound<Vec<u8>>,
    ) -> Self {
        DbIterator {
            inner,
            _pinned: pinned,
            _registered: registered,
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

    fn current(&self) -> Option<Result<(Vec<u8>, Vec<u8>)>> {
        if self.valid() {
            return Some(self.value().map(|v| (self.key().to_vec(), v.to_vec())));
        }
        self.status().err().map(Err)
    }
}

/// The pairs of a key range as a standard iterator; `next_back` (and so
/// `.rev()`) walks from the end. Yields `Err` once if reading fails.
pub struct Range {
    front: DbIterator,
    back: DbIterator,
    front_started: bool,
    back_started: bool,
    /// Last keys returned from each end; the ends stop when they meet.
    front_key: Option<Vec<u8>>,
    back_key: Option<Vec<u8>>,
    done: bool,
}

impl Range {
    /// `front` and `back` are two cursors over the same pinned view.
    pub(crate) fn new(front: DbIterator, back: DbIterator) -> Self {
        Range {
            front,
            back,
            front_started: false,
            back_started: false,
            front_key: None,
            back_key: None,
            done: false,
        }
    }
}

impl Iterator for Range {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.front_started {
            self.front.next();
        } else {
            self.front.seek_to_first();
            self.front_started = true;
        }
        let item = self.front.current();
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
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.back_started {
            self.back.prev();
        } else {
            self.back.seek_to_last();
            self.back_started = true;
        }
        let item = self.back.current();
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
