//! `_sluicedb._rust_loop`: runs one operation over many keys through the
//! Rust API, with the GIL released once, and returns the calling thread's
//! CPU seconds. `scripts/bench-python.py` runs the same operations through
//! the Python API and reports the difference per call: the binding's
//! overhead, without the noise of other processes (thread CPU time counts
//! neither other threads nor time spent waiting to run).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sluicedb::WriteBatch;

use crate::shared::Fail;
use crate::DB;

/// Operations in one batch of the `"batch"` loop, as the benchmark's.
const BATCH: usize = 1000;

/// One benchmark loop over the Rust API: database, keys, value; returns
/// what it counted.
type Loop = fn(&sluicedb::Db, &[Vec<u8>], &[u8]) -> sluicedb::Result<usize>;

/// The calling thread's CPU time in seconds (`time.thread_time()`).
fn thread_time(py: Python<'_>) -> PyResult<f64> {
    py.import("time")?.call_method0("thread_time")?.extract()
}

/// Runs `op` ("get", "put", "batch" or "scan") for each of `keys` (a scan
/// reads every pair once) and returns the thread CPU seconds it took.
#[pyfunction]
pub(crate) fn _rust_loop(
    py: Python<'_>,
    db: &Bound<'_, DB>,
    op: &str,
    keys: Vec<Vec<u8>>,
    value: &Bound<'_, PyBytes>,
) -> PyResult<f64> {
    let value = value.as_bytes();
    let shared = db.get().shared.clone();
    let run: Loop = match op {
        "get" => |db, keys, _| {
            let mut found = 0;
            for k in keys {
                found += usize::from(db.get(k)?.is_some());
            }
            Ok(found)
        },
        "put" => |db, keys, value| {
            for k in keys {
                db.put(k, value)?;
            }
            Ok(keys.len())
        },
        "batch" => |db, keys, value| {
            for chunk in keys.chunks(BATCH) {
                let mut b = WriteBatch::new();
                for k in chunk {
                    b.put(k, value);
                }
                db.write(b)?;
            }
            Ok(keys.len())
        },
        "scan" => |db, _, _| {
            let mut n = 0;
            for pair in db.range::<&[u8]>(..) {
                let (k, v) = pair?;
                std::hint::black_box((k, v));
                n += 1;
            }
            Ok(n)
        },
        _ => return Err(PyValueError::new_err(format!("unknown operation {op:?}"))),
    };
    let start = thread_time(py)?;
    shared.call(py, |db| run(db, &keys, value).map_err(Fail::Engine))?;
    Ok(thread_time(py)? - start)
}
