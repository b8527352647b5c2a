"""Iterators, snapshots and batches keep the database open after the DB
object is gone; close() ends all of them, and any use afterwards raises
ClosedError instead of crashing."""

import gc

import pytest

import sluicedb
from conftest import SMALL


def filled(path, n=500):
    db = sluicedb.DB(path, **SMALL)
    for i in range(n):
        db.put(b"k%04d" % i, b"v%04d" % i)
    return db


def test_iterator_outlives_db_object(path):
    db = filled(path)
    it = db.iterator()
    keys = db.keys(reverse=True)
    raw = db.raw_iterator()
    del db
    gc.collect()
    # The database is still open: nobody else may open it.
    with pytest.raises(sluicedb.LockedError):
        sluicedb.DB(path)
    assert len(list(it)) == 500
    assert next(keys) == b"k0499"
    raw.seek(b"k0250")
    assert raw.item() == (b"k0250", b"v0250")
    del it, keys, raw
    gc.collect()
    # The last holder gone, the database closed and released its lock.
    with sluicedb.DB(path) as db:
        assert db[b"k0000"] == b"v0000"


def test_iterator_from_a_temporary_db(path):
    filled(path).close()
    it = sluicedb.DB(path).iterator(start=b"k0490")
    gc.collect()
    assert [k for k, _ in it] == [b"k%04d" % i for i in range(490, 500)]


def test_snapshot_and_batch_outlive_db_object(path):
    db = filled(path, 10)
    snap = db.snapshot()
    wb = db.write_batch()
    db.put(b"k0000", b"changed")
    del db
    gc.collect()
    assert snap[b"k0000"] == b"v0000"
    wb.put(b"new", b"1")
    wb.write()
    it = snap.iterator()
    snap.close()
    assert next(it) == (b"k0000", b"v0000")
    del snap, wb, it
    gc.collect()
    with sluicedb.DB(path) as db:
        assert db[b"k0000"] == b"changed" and db[b"new"] == b"1"


def test_everything_after_close_raises_closed_error(path):
    db = filled(path, 10)
    it = db.iterator()
    assert next(it) == (b"k0000", b"v0000")  # mid-scan, pairs buffered
    raw = db.raw_iterator()
    raw.seek_to_first()
    snap = db.snapshot()
    wb = db.write_batch()
    wb.put(b"x", b"y")
    db.close()
    assert db.closed
    db.close()  # twice is fine
    calls = [
        lambda: db.get(b"k"),
        lambda: db.put(b"k", b"v"),
        lambda: db.delete(b"k"),
        lambda: db[b"k"],
        lambda: db.__setitem__(b"k", b"v"),
        lambda: db.__delitem__(b"k"),
        lambda: b"k" in db,
        lambda: db.iterator(),
        lambda: db.keys(),
        lambda: iter(db),
        lambda: db.raw_iterator(),
        lambda: db.snapshot(),
        lambda: db.stats(),
        lambda: db.compact_range(),
        lambda: db.gc(),
        lambda: db.verify(),
        lambda: db.flush(),
        lambda: db.sync(),
        lambda: db.path,
        lambda: db.preset,
        lambda: next(it),
        lambda: raw.valid(),
        lambda: raw.key(),
        lambda: raw.next(),
        lambda: raw.seek(b"a"),
        lambda: snap.get(b"k"),
        lambda: snap.iterator(),
        lambda: wb.write(),
    ]
    for call in calls:
        with pytest.raises(sluicedb.ClosedError):
            call()
    assert "closed" in repr(db)
    # close() released the lock although the iterators still exist.
    with sluicedb.DB(path) as again:
        assert again[b"k0000"] == b"v0000"
        assert b"x" not in again
    with pytest.raises(sluicedb.ClosedError):
        next(it)


def test_context_manager_closes(path):
    with sluicedb.DB(path) as db:
        db[b"a"] = b"1"
        it = db.iterator()
    assert db.closed
    with pytest.raises(sluicedb.ClosedError):
        list(it)
    with sluicedb.DB(path) as db:
        assert db[b"a"] == b"1"


def test_many_short_lived_iterators(db):
    db[b"a"] = b"1"
    for _ in range(3000):
        assert next(db.iterator()) == (b"a", b"1")
    snaps = [db.snapshot() for _ in range(100)]
    del snaps
    gc.collect()
    assert db[b"a"] == b"1"
