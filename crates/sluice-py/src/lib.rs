//! The Python package `sluicedb` (built by maturin from `pyproject.toml`):
//! plyvel's API shape with dict sugar over [`sluicedb::Db`].
//!
//! - Every engine call runs with the GIL released, so Python threads
//!   using one database run in parallel (`shared.rs` has the locking).
//! - Iterators, snapshots and batches hold the open database
//!   ([`shared::Shared`]): it stays open after the `DB` object is gone and
//!   closes when the last of them goes, or at `DB.close()`, which releases
//!   them all; using any of them afterwards raises `ClosedError`.
//! - Keys and values are `bytes`; `str` is stored as UTF-8 (see
//!   [`shared::bytes_arg`] and the README's Python section for why).
//! - Engine errors raise the classes of `python/sluicedb/_errors.py`.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::exceptions::{PyKeyError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use pyo3::PyClassInitializer;
use sluicedb::{Db, Options, Preset, ReadOptions, WriteOptions};

mod bench;
mod debug;
mod iter;
mod shared;

use iter::{Bounds, Include, Iterator, RawIterator, Scan};
use shared::{bytes_arg, opt_bytes_arg, Fail, OrRaise, Res, Shared};

/// The engine's allocator: mimalloc, as the `sluice` binary installs it
/// (`docs/design.md`, "Allocator"): memtable nodes and flushed and
/// collected records are allocated one by one, which glibc's malloc
/// serves slowly. Only this module's Rust allocations use it; whatever
/// crosses into Python is copied into Python's own objects.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (see `crates/sluice-cli/src/allocator.rs`).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed memory goes back to the system after 50 ms instead of mimalloc's
/// 1 s, as in the binary: flushes and GC free buffers in bursts.
fn bound_retention() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets a plain option value; mimalloc reads it at its next
        // purge decision.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 50) };
    }
}

/// The snapshot a reader reads at, `None` for the latest state.
type SnapshotSlot = Arc<Mutex<Option<sluicedb::Snapshot>>>;

/// What `DB` and `Snapshot` share: reads (`get`, `db[key]`, `key in db`)
/// and iterators, at the latest state or at the snapshot.
#[pyclass(subclass, frozen, module = "sluicedb", name = "_Reader")]
struct Reader {
    shared: Arc<Shared>,
    snapshot: Option<SnapshotSlot>,
}

/// Runs `f` with the read options of `snapshot` (closed: `ClosedError`).
fn at_snapshot<R>(
    snapshot: Option<&SnapshotSlot>,
    f: impl FnOnce(&ReadOptions<'_>) -> Res<R>,
) -> Res<R> {
    match snapshot {
        None => f(&ReadOptions::default()),
        Some(slot) => match slot.lock().as_ref() {
            Some(s) => f(&ReadOptions::at(s)),
            None => Err(Fail::Closed("snapshot")),
        },
    }
}

impl Reader {
    fn read<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Db, &ReadOptions<'_>) -> Res<R> + Send,
    ) -> PyResult<R> {
        self.shared
            .call(py, |db| at_snapshot(self.snapshot.as_ref(), |o| f(db, o)))
    }

    fn lookup(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u8>>> {
        let key = bytes_arg(key, "key")?;
        self.read(py, |db, o| Ok(db.get_opt(o, &key)?))
    }

    fn scan(
        &self,
        py: Python<'_>,
        bounds: Bounds,
        reverse: bool,
        include: Include,
    ) -> PyResult<Iterator> {
        let snapshot = self.snapshot.clone();
        let scan = self.shared.adopt(py, move |db| {
            let scan = at_snapshot(snapshot.as_ref(), |o| {
                Ok(Scan::open(db, o, bounds, reverse, include))
            })?;
            Ok(Mutex::new(Some(scan)))
        })?;
        Ok(Iterator {
            shared: self.shared.clone(),
            scan,
            include,
        })
    }
}

#[pymethods]
impl Reader {
    /// The value of `key`, or `default` if it has none.
    #[pyo3(signature = (key, default = None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        Ok(match self.lookup(py, key)? {
            Some(v) => Some(PyBytes::new(py, &v).into_any()),
            None => default,
        })
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        match self.lookup(py, key)? {
            Some(v) => Ok(PyBytes::new(py, &v)),
            None => Err(PyKeyError::new_err(key.clone().unbind())),
        }
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.lookup(py, key)?.is_some())
    }

    /// The pairs (or keys, or values) of a key range, in order: plyvel's
    /// `iterator()`. `start`/`stop` bound the range (`include_start`,
    /// `include_stop` say whether they belong to it); `prefix` selects the
    /// keys that start with it instead.
    #[pyo3(signature = (start = None, stop = None, prefix = None, reverse = false,
        include_key = true, include_value = true, include_start = true, include_stop = false))]
    #[allow(clippy::too_many_arguments)]
    fn iterator(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        include_key: bool,
        include_value: bool,
        include_start: bool,
        include_stop: bool,
    ) -> PyResult<Iterator> {
        if !include_key && !include_value {
            return Err(PyTypeError::new_err(
                "include_key and include_value cannot both be False",
            ));
        }
        let bounds = Bounds::new(
            opt_bytes_arg(start, "start")?,
            opt_bytes_arg(stop, "stop")?,
            opt_bytes_arg(prefix, "prefix")?,
            include_start,
            include_stop,
        )?;
        let include = Include {
            key: include_key,
            value: include_value,
        };
        self.scan(py, bounds, reverse, include)
    }

    /// The keys of a range, in order (reads no value).
    #[pyo3(signature = (start = None, stop = None, prefix = None, reverse = false))]
    fn keys(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
        reverse: bool,
    ) -> PyResult<Iterator> {
        self.iterator(py, start, stop, prefix, reverse, true, false, true, false)
    }

    /// The values of a range, in key order.
    #[pyo3(signature = (start = None, stop = None, prefix = None, reverse = false))]
    fn values(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
        reverse: bool,
    ) -> PyResult<Iterator> {
        self.iterator(py, start, stop, prefix, reverse, false, true, true, false)
    }

    /// The `(key, value)` pairs of a range, in key order.
    #[pyo3(signature = (start = None, stop = None, prefix = None, reverse = false))]
    fn items(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
        reverse: bool,
    ) -> PyResult<Iterator> {
        self.iterator(py, start, stop, prefix, reverse, true, true, true, false)
    }

    /// `for key, value in db`: every pair, in key order (as plyvel).
    fn __iter__(&self, py: Python<'_>) -> PyResult<Iterator> {
        self.iterator(py, None, None, None, false, true, true, true, false)
    }

    /// A cursor with `seek`, `next` and `prev`, not positioned yet.
    fn raw_iterator(&self, py: Python<'_>) -> PyResult<RawIterator> {
        let snapshot = self.snapshot.clone();
        let cursor = self.shared.adopt(py, move |db| {
            let cursor = at_snapshot(snapshot.as_ref(), |o| Ok(db.iter_opt(o)))?;
            Ok(Mutex::new(Some(cursor)))
        })?;
        Ok(RawIterator {
            shared: self.shared.clone(),
            cursor,
        })
    }
}

/// Sets the options named in `DB(**options)`; an unknown name is a
/// `TypeError`, as for any unexpected keyword argument.
fn apply_options(mut o: Options, options: Option<&Bound<'_, PyDict>>) -> PyResult<Options> {
    macro_rules! setters {
        ($name:expr, $value:expr, $($setter:ident),* $(,)?) => {
            match $name {
                $(stringify!($setter) => o.$setter($value.extract()?),)*
                other => {
                    return Err(PyTypeError::new_err(format!(
                        "DB() got an unexpected keyword argument '{other}'"
                    )))
                }
            }
        };
    }
    for (name, value) in options.into_iter().flatten() {
        let name: String = name.extract()?;
        o = setters!(
            name.as_str(),
            value,
            error_if_exists,
            read_only,
            write_buffer_size_bytes,
            max_write_buffers,
            memory_budget_bytes,
            background_threads,
            max_write_group_bytes,
            block_size_bytes,
            bloom_bits_per_key,
            block_cache_bytes,
            max_open_tables,
            l0_compaction_trigger,
            l0_slowdown_trigger,
            l0_stop_trigger,
            l0_read_compaction_trigger,
            base_level_size_bytes,
            target_file_size_bytes,
            separation_threshold_bytes,
            value_log_file_size_bytes,
            scan_prefetch_threads,
            gc_background,
        );
    }
    Ok(o)
}

/// An open database (plyvel's `DB`, with dict sugar).
#[pyclass(extends = Reader, frozen, module = "sluicedb")]
struct DB {
    shared: Arc<Shared>,
}

#[pymethods]
impl DB {
    /// Opens (by default creating) the database in directory `path`.
    /// `preset` names the engine's configuration (`sluicedb.PRESETS`);
    /// without it an existing database opens with the preset it was
    /// created with, a new one with "adaptive".
    #[new]
    #[pyo3(signature = (path, preset = None, create_if_missing = true, **options))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        preset: Option<&str>,
        create_if_missing: bool,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let preset = match preset {
            Some(name) => Some(Preset::from_name(name).ok_or_else(|| {
                Fail::Engine(sluicedb::Error::InvalidArgument(format!(
                    "unknown preset {name:?} (known: {})",
                    Preset::all()
                        .iter()
                        .map(|p| p.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
                .into_py(py)
            })?),
            None => None,
        };
        // Absent or unreadable: the open says what is wrong.
        let preset = preset.unwrap_or_else(|| {
            Db::recorded_preset(&path)
                .ok()
                .flatten()
                .unwrap_or_default()
        });
        // The options given apply over the preset's.
        let opts = Options::preset(preset).create_if_missing(create_if_missing);
        let opts = apply_options(opts, options)?;
        let db = py.detach(|| Db::open(&path, opts)).or_raise(py)?;
        let shared = Arc::new(Shared::new(db));
        Ok(PyClassInitializer::from(Reader {
            shared: shared.clone(),
            snapshot: None,
        })
        .add_subclass(DB { shared }))
    }

    /// Sets `key` to `value`; with `sync=True` the write is durable
    /// (survives a crash of the machine) when this returns.
    #[pyo3(signature = (key, value, sync = false))]
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        sync: bool,
    ) -> PyResult<()> {
        let (key, value) = (bytes_arg(key, "key")?, bytes_arg(value, "value")?);
        self.shared.call(py, |db| {
            Ok(db.put_opt(&WriteOptions { sync }, &key, &value)?)
        })
    }

    /// Deletes `key` (an absent key is fine).
    #[pyo3(signature = (key, sync = false))]
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>, sync: bool) -> PyResult<()> {
        let key = bytes_arg(key, "key")?;
        self.shared
            .call(py, |db| Ok(db.delete_opt(&WriteOptions { sync }, &key)?))
    }

    fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.put(py, key, value, false)
    }

    /// `del db[key]`: raises `KeyError` if `key` has no value, as a dict
    /// does (`delete()` does not).
    fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = bytes_arg(key, "key")?;
        let existed = self.shared.call(py, |db| {
            // Another thread may delete it in between: then both succeed,
            // as if this delete came first.
            let existed = db.get(&key)?.is_some();
            if existed {
                db.delete(&key)?;
            }
            Ok(existed)
        })?;
        if existed {
            Ok(())
        } else {
            Err(PyKeyError::new_err(PyBytes::new(py, &key).unbind()))
        }
    }

    /// A batch of puts and deletes applied atomically by `write()` or at
    /// the end of a `with` block. With `transaction=True` an exception in
    /// the block discards the batch; without, what was added is written.
    #[pyo3(signature = (transaction = false, sync = false))]
    fn write_batch(&self, transaction: bool, sync: bool) -> WriteBatch {
        WriteBatch {
            shared: self.shared.clone(),
            batch: Mutex::new(sluicedb::WriteBatch::new()),
            transaction,
            sync,
        }
    }

    /// A consistent view of the database as it is now: reads through it
    /// do not see later writes. Release it with `close()` or `with`.
    fn snapshot(&self, py: Python<'_>) -> PyResult<Py<Snapshot>> {
        let slot = self
            .shared
            .adopt(py, |db| Ok(Mutex::new(Some(db.snapshot()))))?;
        let init = PyClassInitializer::from(Reader {
            shared: self.shared.clone(),
            snapshot: Some(slot.clone()),
        })
        .add_subclass(Snapshot { slot });
        Py::new(py, init)
    }

    /// The engine's counters and the shape of its index, as nested dicts
    /// named like the fields of the Rust `sluicedb::Stats`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (text, preset) = self.shared.call(py, |db| {
            let s = db.stats();
            Ok((format!("{s:?}"), s.created_with.map(Preset::name)))
        })?;
        let stats = debug::to_py(py, &text)?;
        stats.set_item("created_with", preset)?;
        Ok(stats)
    }

    /// Compacts the tables overlapping `[start, stop]` (`None`: unbounded)
    /// down the levels, dropping overwritten versions and tombstones.
    /// Flushes the memtable first; returns when done.
    #[pyo3(signature = (start = None, stop = None))]
    fn compact_range(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let start = opt_bytes_arg(start, "start")?;
        let stop = opt_bytes_arg(stop, "stop")?;
        self.shared.call(py, |db| {
            Ok(db.compact_range(start.as_deref(), stop.as_deref())?)
        })
    }

    /// Garbage-collects the oldest file of the value store; returns what
    /// it did as a dict (all zero without a value store).
    fn gc<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = self.shared.call(py, |db| Ok(format!("{:?}", db.gc()?)))?;
        debug::to_py(py, &text)
    }

    /// Checks every checksum and every live pair; returns how many entries,
    /// records and pairs it checked. Damage raises `CorruptionError`.
    fn verify(&self, py: Python<'_>) -> PyResult<u64> {
        self.shared.call(py, |db| Ok(db.verify()?))
    }

    /// Makes a consistent copy of the database in the new directory `path`
    /// while writes go on (hard links to immutable files, copies of what
    /// is still written), holding every write made before the call;
    /// returns `{"files_linked": n, "files_copied": n, "bytes_copied": n}`.
    /// `path` must not exist.
    fn checkpoint<'py>(&self, py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
        let s = self.shared.call(py, |db| Ok(db.checkpoint(&path)?))?;
        let out = PyDict::new(py);
        out.set_item("files_linked", s.files_linked)?;
        out.set_item("files_copied", s.files_copied)?;
        out.set_item("bytes_copied", s.bytes_copied)?;
        Ok(out)
    }

    /// Writes the memtable to a table and waits for it.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.shared.call(py, |db| Ok(db.flush()?))
    }

    /// Makes every write so far durable, as if each had been `sync=True`.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.shared.call(py, |db| Ok(db.sync()?))
    }

    /// Closes the database: waits for calls under way, releases every
    /// iterator and snapshot, stops background work, syncs the journal
    /// and releases the directory's lock. Closing twice is fine.
    fn close(&self, py: Python<'_>) {
        self.shared.close(py);
    }

    #[getter]
    fn closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// The database directory.
    #[getter]
    fn path(&self, py: Python<'_>) -> PyResult<std::ffi::OsString> {
        self.shared
            .call(py, |db| Ok(db.path().as_os_str().to_owned()))
    }

    /// The preset the database was created with (`None` if it predates
    /// the record).
    #[getter]
    fn preset(&self, py: Python<'_>) -> PyResult<Option<&'static str>> {
        self.shared
            .call(py, |db| Ok(db.created_with().map(Preset::name)))
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.path(py) {
            Ok(p) => format!("<sluicedb.DB {:?}>", p.to_string_lossy()),
            Err(_) => "<sluicedb.DB (closed)>".to_owned(),
        }
    }
}

/// A consistent view of the database ([`DB::snapshot`]); reads and
/// iterators made from it see the database as it was when it was taken.
#[pyclass(extends = Reader, frozen, module = "sluicedb")]
struct Snapshot {
    slot: SnapshotSlot,
}

#[pymethods]
impl Snapshot {
    /// Releases the snapshot (the engine may then drop the versions only
    /// it needed); later reads through it raise `ClosedError`. Iterators
    /// made from it stay valid.
    fn close(&self) {
        let s = self.slot.lock().take();
        drop(s);
    }

    /// plyvel's name for `close()`.
    fn release(&self) {
        self.close();
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

/// Puts and deletes applied atomically ([`DB::write_batch`]).
#[pyclass(frozen, module = "sluicedb")]
struct WriteBatch {
    shared: Arc<Shared>,
    batch: Mutex<sluicedb::WriteBatch>,
    transaction: bool,
    sync: bool,
}

#[pymethods]
impl WriteBatch {
    fn put(&self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let (key, value) = (bytes_arg(key, "key")?, bytes_arg(value, "value")?);
        self.batch.lock().put(&*key, &*value);
        Ok(())
    }

    fn delete(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = bytes_arg(key, "key")?;
        self.batch.lock().delete(&*key);
        Ok(())
    }

    /// Drops what the batch holds.
    fn clear(&self) {
        self.batch.lock().clear();
    }

    /// Operations in the batch.
    fn __len__(&self) -> usize {
        self.batch.lock().len()
    }

    /// Applies the batch atomically and empties it.
    fn write(&self, py: Python<'_>) -> PyResult<()> {
        let batch = std::mem::take(&mut *self.batch.lock());
        let opts = WriteOptions { sync: self.sync };
        self.shared.call(py, |db| Ok(db.write_opt(&opts, batch)?))
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let raised = exc_type.is_some_and(|t| !t.is_none());
        if raised && self.transaction {
            self.clear();
        } else {
            self.write(py)?;
        }
        Ok(false)
    }
}

#[pymodule]
fn _sluicedb(m: &Bound<'_, PyModule>) -> PyResult<()> {
    bound_retention();
    m.add_class::<Reader>()?;
    m.add_class::<DB>()?;
    m.add_class::<Snapshot>()?;
    m.add_class::<WriteBatch>()?;
    m.add_class::<Iterator>()?;
    m.add_class::<RawIterator>()?;
    let presets = Preset::all().iter().map(|p| p.name());
    m.add("PRESETS", PyTuple::new(m.py(), presets)?)?;
    m.add_function(wrap_pyfunction!(bench::_rust_loop, m)?)?;
    Ok(())
}
