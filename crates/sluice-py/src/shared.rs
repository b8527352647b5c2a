//! What every Python object of the module shares: the open database behind
//! a lock that `close()` takes, the objects `close()` must release, the
//! mapping of engine errors to exception classes, and argument conversion.
//!
//! Locking (so that no thread ever waits for a lock while holding the GIL,
//! and a thread inside the engine never needs the GIL):
//! - every engine call runs with the GIL released (`Python::detach`) and
//!   takes `Shared::db` for reading inside that closure, so a thread
//!   waiting for the lock never holds the GIL another thread needs;
//! - `close()` takes `Shared::db` for writing, then each child's lock;
//!   operations on a child take `Shared::db` for reading, then the
//!   child's lock: one order, no deadlock.

use std::borrow::Cow;
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyModule, PyString, PyType};
use sluicedb::Db;

/// Why a call failed, turned into a Python exception once the GIL is back.
#[derive(Debug)]
pub(crate) enum Fail {
    Engine(sluicedb::Error),
    /// The database, snapshot or iterator named was closed.
    Closed(&'static str),
    /// A raw iterator's accessor or step while it is not positioned.
    InvalidIterator(&'static str),
}

impl From<sluicedb::Error> for Fail {
    fn from(e: sluicedb::Error) -> Self {
        Fail::Engine(e)
    }
}

pub(crate) type Res<T> = Result<T, Fail>;

/// `sluicedb._errors`, imported once.
static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// An instance of the exception class `name` of `sluicedb._errors`.
fn error_of(py: Python<'_>, name: &str, message: String) -> PyErr {
    let class = ERRORS
        .get_or_try_init(py, || {
            PyModule::import(py, "sluicedb._errors").map(Bound::unbind)
        })
        .and_then(|m| m.bind(py).getattr(name))
        .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
    match class {
        Ok(class) => PyErr::from_type(class, message),
        Err(e) => PyRuntimeError::new_err(format!("{message} (sluicedb._errors: {e})")),
    }
}

impl Fail {
    pub(crate) fn into_py(self, py: Python<'_>) -> PyErr {
        use sluicedb::Error as E;
        let message = match &self {
            Fail::Engine(e) => e.to_string(),
            Fail::Closed(what) => format!("{what} is closed"),
            Fail::InvalidIterator(what) => format!("{what}: the iterator is not on a pair"),
        };
        let class = match self {
            Fail::Closed(_) => "ClosedError",
            Fail::InvalidIterator(_) => "IteratorInvalidError",
            Fail::Engine(e) => match e {
                E::Io { .. } => "IOError",
                E::Corruption { .. } => "CorruptionError",
                E::InvalidArgument(_) => "InvalidArgumentError",
                E::Poisoned(_) => "PoisonedError",
                E::Locked(_) => "LockedError",
                E::NotFound(_) => "NotFoundError",
                E::AlreadyExists(_) => "AlreadyExistsError",
                E::UnsupportedVersion { .. } => "UnsupportedVersionError",
                E::Closed => "ClosedError",
                E::ReadOnly => "ReadOnlyError",
                _ => "Error",
            },
        };
        error_of(py, class, message)
    }
}

/// Turns a failed call's [`Fail`] into its exception.
pub(crate) trait OrRaise<T> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> OrRaise<T> for Res<T> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|f| f.into_py(py))
    }
}

impl<T> OrRaise<T> for sluicedb::Result<T> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| Fail::Engine(e).into_py(py))
    }
}

/// Something `close()` must let go of before the database closes: an
/// iterator's cursor or a snapshot, each in its own `Mutex<Option<_>>`.
pub(crate) trait Release: Send + Sync {
    fn release(&self);
}

impl<T: Send> Release for Mutex<Option<T>> {
    fn release(&self) {
        let taken = self.lock().take();
        drop(taken);
    }
}

/// The open database, shared by the `DB` object and every iterator,
/// snapshot and batch made from it: they keep it open after the `DB`
/// object is gone, and `close()` closes it for all of them.
pub(crate) struct Shared {
    db: RwLock<Option<Db>>,
    children: Mutex<Children>,
}

struct Children {
    live: Vec<Weak<dyn Release>>,
    /// The length at which dead entries are next swept out.
    sweep_at: usize,
}

impl Shared {
    pub(crate) fn new(db: Db) -> Self {
        Shared {
            db: RwLock::new(Some(db)),
            children: Mutex::new(Children {
                live: Vec::new(),
                sweep_at: 64,
            }),
        }
    }

    /// Runs `f` on the open database (call it with the GIL released).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Db) -> Res<R>) -> Res<R> {
        match self.db.read().as_ref() {
            Some(db) => f(db),
            None => Err(Fail::Closed("database")),
        }
    }

    /// Runs `f` on the open database with the GIL released.
    pub(crate) fn call<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Db) -> Res<R> + Send,
    ) -> PyResult<R> {
        py.detach(|| self.with(f)).or_raise(py)
    }

    /// Runs `make` on the open database and registers what it made, so
    /// that `close()` releases it; both under the lock `close()` takes.
    pub(crate) fn adopt<T: Release + 'static>(
        &self,
        py: Python<'_>,
        make: impl FnOnce(&Db) -> Res<T> + Send,
    ) -> PyResult<Arc<T>> {
        py.detach(|| {
            self.with(|db| {
                let child = Arc::new(make(db)?);
                let weak: Weak<dyn Release> = Arc::downgrade(&child) as Weak<dyn Release>;
                let mut children = self.children.lock();
                children.live.push(weak);
                if children.live.len() >= children.sweep_at {
                    children.live.retain(|c| c.strong_count() > 0);
                    children.sweep_at = (children.live.len() * 2).max(64);
                }
                Ok(child)
            })
        })
        .or_raise(py)
    }

    /// Closes the database: releases every iterator and snapshot made
    /// from it, then drops the engine's handle (background work stopped,
    /// journal synced, lock released). Waits for calls under way.
    pub(crate) fn close(&self, py: Python<'_>) {
        py.detach(|| {
            let mut db = self.db.write();
            let children = std::mem::take(&mut self.children.lock().live);
            for child in children.iter().filter_map(Weak::upgrade) {
                child.release();
            }
            drop(db.take());
        });
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.db.read().is_none()
    }
}

/// A key or value argument: `bytes` as it is, `str` as its UTF-8 encoding.
/// Nothing mutable (`bytearray`, `memoryview`): the engine reads the bytes
/// with the GIL released, when another thread could change them.
pub(crate) fn bytes_arg<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Cow::Borrowed(b.as_bytes()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(match s.to_cow()? {
            Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
            Cow::Owned(s) => Cow::Owned(s.into_bytes()),
        });
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be bytes or str, not {}",
        obj.get_type().name()?
    )))
}

/// Like [`bytes_arg`] for an optional argument (`None`: absent).
pub(crate) fn opt_bytes_arg(
    obj: Option<&Bound<'_, PyAny>>,
    what: &str,
) -> PyResult<Option<Vec<u8>>> {
    match obj {
        Some(o) if !o.is_none() => Ok(Some(bytes_arg(o, what)?.into_owned())),
        _ => Ok(None),
    }
}
