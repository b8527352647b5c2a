//! `Iterator` (plyvel's `DB.iterator()`: pairs, keys or values of a key
//! range, forwards or backwards) and `RawIterator` (a cursor with seek).
//!
//! `Iterator` takes pairs from the engine in chunks with the GIL released
//! (1 pair, doubling to 256 or 1 MiB), so that one release of the GIL
//! serves many `__next__` calls; the chunks read a consistent view, so
//! buffering them changes nothing a caller can see. Before each chunk it
//! lets Python handle pending signals: Ctrl-C stops even a scan consumed
//! in C (`list(db.iterator())`), which runs no bytecode between pairs.

use std::collections::VecDeque;
use std::ops::Bound as End;
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use sluicedb::{Db, DbIterator, ReadOptions};

use crate::shared::{bytes_arg, Fail, OrRaise, Res, Shared};

/// The largest chunk, in pairs and in bytes.
const CHUNK_PAIRS: usize = 256;
const CHUNK_BYTES: usize = 1 << 20;

/// What `Iterator` yields.
#[derive(Clone, Copy)]
pub(crate) struct Include {
    pub(crate) key: bool,
    pub(crate) value: bool,
}

/// The key range of an iterator, from plyvel's arguments.
pub(crate) struct Bounds {
    pub(crate) lower: End<Vec<u8>>,
    pub(crate) upper: End<Vec<u8>>,
}

impl Bounds {
    pub(crate) fn new(
        start: Option<Vec<u8>>,
        stop: Option<Vec<u8>>,
        prefix: Option<Vec<u8>>,
        include_start: bool,
        include_stop: bool,
    ) -> PyResult<Self> {
        if let Some(p) = prefix {
            if start.is_some() || stop.is_some() {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "prefix cannot be combined with start or stop",
                ));
            }
            let upper = match sluicedb::prefix_successor(&p) {
                Some(s) => End::Excluded(s),
                None => End::Unbounded,
            };
            return Ok(Bounds {
                lower: End::Included(p),
                upper,
            });
        }
        let lower = match start {
            Some(k) if include_start => End::Included(k),
            Some(k) => End::Excluded(k),
            None => End::Unbounded,
        };
        let upper = match stop {
            Some(k) if include_stop => End::Included(k),
            Some(k) => End::Excluded(k),
            None => End::Unbounded,
        };
        Ok(Bounds { lower, upper })
    }
}

/// A pair as the engine gave it; `value` is empty when not wanted.
type Pair = (Vec<u8>, Vec<u8>);

enum Source {
    /// Values wanted: the engine's range, which reads separated values
    /// ahead in batches.
    Pairs(Box<sluicedb::Range>),
    /// Keys only: a cursor, which reads no value.
    Keys {
        cursor: Box<DbIterator>,
        started: bool,
    },
}

pub(crate) struct Scan {
    source: Source,
    reverse: bool,
    buffered: VecDeque<Pair>,
    /// An error met after the pairs in `buffered`: raised once they are out.
    failed: Option<sluicedb::Error>,
    done: bool,
    chunk: usize,
}

impl Scan {
    pub(crate) fn open(
        db: &Db,
        opts: &ReadOptions<'_>,
        bounds: Bounds,
        reverse: bool,
        include: Include,
    ) -> Scan {
        let range = (bounds.lower, bounds.upper);
        let source = if include.value {
            Source::Pairs(Box::new(db.range_opt(opts, range)))
        } else {
            Source::Keys {
                cursor: Box::new(db.iter_range(opts, range)),
                started: false,
            }
        };
        Scan {
            source,
            reverse,
            buffered: VecDeque::new(),
            failed: None,
            done: false,
            chunk: 1,
        }
    }

    /// The next pair from the engine.
    fn pull(&mut self) -> Option<sluicedb::Result<Pair>> {
        match &mut self.source {
            Source::Pairs(range) => {
                if self.reverse {
                    range.next_back()
                } else {
                    range.next()
                }
            }
            Source::Keys { cursor, started } => {
                match (*started, self.reverse) {
                    (false, false) => cursor.seek_to_first(),
                    (false, true) => cursor.seek_to_last(),
                    (true, false) => cursor.next(),
                    (true, true) => cursor.prev(),
                }
                *started = true;
                if cursor.valid() {
                    Some(Ok((cursor.key().to_vec(), Vec::new())))
                } else {
                    cursor.status().err().map(Err)
                }
            }
        }
    }

    /// Reads the next chunk into `buffered` (GIL released).
    fn fill(&mut self) {
        let mut bytes = 0;
        while !self.done && self.buffered.len() < self.chunk && bytes < CHUNK_BYTES {
            match self.pull() {
                Some(Ok(pair)) => {
                    bytes += pair.0.len() + pair.1.len();
                    self.buffered.push_back(pair);
                }
                Some(Err(e)) => {
                    self.failed = Some(e);
                    self.done = true;
                }
                None => self.done = true,
            }
        }
        self.chunk = (self.chunk * 2).min(CHUNK_PAIRS);
    }

    /// The next pair, `None` at the end; reads a chunk when the buffer is
    /// empty.
    fn next_pair(&mut self) -> Res<Option<Pair>> {
        if self.buffered.is_empty() && !self.done {
            self.fill();
        }
        if let Some(pair) = self.buffered.pop_front() {
            return Ok(Some(pair));
        }
        match self.failed.take() {
            Some(e) => Err(Fail::Engine(e)),
            None => Ok(None),
        }
    }

    /// True when the next pair is already buffered: no engine call needed.
    fn ready(&self) -> bool {
        !self.buffered.is_empty()
    }
}

/// Pairs, keys or values of a key range, in order (plyvel's
/// `DB.iterator()`); made by `DB.iterator()`, `keys()`, `values()` and
/// `items()`, and by the same methods of a snapshot.
#[pyclass(frozen, module = "sluicedb")]
pub(crate) struct Iterator {
    pub(crate) shared: Arc<Shared>,
    pub(crate) scan: Arc<Mutex<Option<Scan>>>,
    pub(crate) include: Include,
}

impl Iterator {
    fn item<'py>(&self, py: Python<'py>, (k, v): Pair) -> PyResult<Bound<'py, PyAny>> {
        Ok(match (self.include.key, self.include.value) {
            (true, true) => {
                PyTuple::new(py, [PyBytes::new(py, &k), PyBytes::new(py, &v)])?.into_any()
            }
            (true, false) => PyBytes::new(py, &k).into_any(),
            _ => PyBytes::new(py, &v).into_any(),
        })
    }
}

#[pymethods]
impl Iterator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        // A buffered pair needs no engine call, so no GIL release; and the
        // database cannot have closed since (close() empties `scan`).
        // Another thread reading a chunk holds the lock: take the slow
        // path rather than wait for it holding the GIL.
        let buffered = self
            .scan
            .try_lock()
            .and_then(|mut scan| match scan.as_mut() {
                Some(s) if s.ready() => s.next_pair().ok().flatten(),
                _ => None,
            });
        if let Some(pair) = buffered {
            return self.item(py, pair).map(Some);
        }
        py.check_signals()?;
        let pair = py
            .detach(|| {
                self.shared.with(|_| match self.scan.lock().as_mut() {
                    Some(s) => s.next_pair(),
                    None => Err(Fail::Closed("iterator")),
                })
            })
            .or_raise(py)?;
        match pair {
            Some(pair) => self.item(py, pair).map(Some),
            None => Ok(None),
        }
    }

    /// Releases the iterator's view of the database; later use raises
    /// `ClosedError`.
    fn close(&self) {
        let scan = self.scan.lock().take();
        drop(scan);
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.close();
        false
    }
}

/// A cursor over a key range with seek, in both directions (plyvel's
/// `RawIterator`, RocksDB's `Iterator`). New, it is not positioned: call a
/// `seek*` method first.
#[pyclass(frozen, module = "sluicedb")]
pub(crate) struct RawIterator {
    pub(crate) shared: Arc<Shared>,
    pub(crate) cursor: Arc<Mutex<Option<DbIterator>>>,
}

impl RawIterator {
    /// Runs `f` on the cursor with the GIL released.
    fn on<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut DbIterator) -> Res<R> + Send,
    ) -> PyResult<R> {
        py.detach(|| {
            self.shared.with(|_| match self.cursor.lock().as_mut() {
                Some(c) => f(c),
                None => Err(Fail::Closed("iterator")),
            })
        })
        .or_raise(py)
    }
}

/// `Ok` while the cursor is on a pair, else why not.
fn on_pair(c: &DbIterator, what: &'static str) -> Res<()> {
    if c.valid() {
        return Ok(());
    }
    c.status()?;
    Err(Fail::InvalidIterator(what))
}

#[pymethods]
impl RawIterator {
    /// True while positioned on a pair. False at either end; after a read
    /// error too, which `status()` then raises.
    fn valid(&self, py: Python<'_>) -> PyResult<bool> {
        self.on(py, |c| Ok(c.valid()))
    }

    /// Raises the error that ended the iteration, if one did.
    fn status(&self, py: Python<'_>) -> PyResult<()> {
        self.on(py, |c| Ok(c.status()?))
    }

    fn seek_to_first(&self, py: Python<'_>) -> PyResult<()> {
        self.on(py, |c| {
            c.seek_to_first();
            Ok(())
        })
    }

    fn seek_to_last(&self, py: Python<'_>) -> PyResult<()> {
        self.on(py, |c| {
            c.seek_to_last();
            Ok(())
        })
    }

    /// Positions at the first key `>= target`.
    fn seek(&self, py: Python<'_>, target: &Bound<'_, PyAny>) -> PyResult<()> {
        let target = bytes_arg(target, "target")?;
        self.on(py, |c| {
            c.seek(&target);
            Ok(())
        })
    }

    /// Positions at the last key `<= target`.
    fn seek_for_prev(&self, py: Python<'_>, target: &Bound<'_, PyAny>) -> PyResult<()> {
        let target = bytes_arg(target, "target")?;
        self.on(py, |c| {
            c.seek_for_prev(&target);
            Ok(())
        })
    }

    fn next(&self, py: Python<'_>) -> PyResult<()> {
        self.on(py, |c| {
            on_pair(c, "next")?;
            c.next();
            Ok(())
        })
    }

    fn prev(&self, py: Python<'_>) -> PyResult<()> {
        self.on(py, |c| {
            on_pair(c, "prev")?;
            c.prev();
            Ok(())
        })
    }

    fn key<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let k = self.on(py, |c| {
            on_pair(c, "key")?;
            Ok(c.key().to_vec())
        })?;
        Ok(PyBytes::new(py, &k))
    }

    fn value<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let v = self.on(py, |c| {
            on_pair(c, "value")?;
            Ok(c.value()?.to_vec())
        })?;
        Ok(PyBytes::new(py, &v))
    }

    /// `(key(), value())`.
    fn item<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let (k, v) = self.on(py, |c| {
            on_pair(c, "item")?;
            Ok((c.key().to_vec(), c.value()?.to_vec()))
        })?;
        PyTuple::new(py, [PyBytes::new(py, &k), PyBytes::new(py, &v)])
    }

    fn close(&self) {
        let cursor = self.cursor.lock().take();
        drop(cursor);
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.close();
        false
    }
}
