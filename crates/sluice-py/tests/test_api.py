"""Every call of the API, one behaviour per test."""

import os

import pytest

import sluicedb
from conftest import SMALL


def test_put_get_delete(db):
    assert db.get(b"k") is None
    assert db.get(b"k", b"dflt") == b"dflt"
    db.put(b"k", b"v")
    assert db.get(b"k") == b"v"
    db.put(b"k", b"w", sync=True)
    assert db.get(b"k", b"dflt") == b"w"
    db.delete(b"k")
    assert db.get(b"k") is None
    db.delete(b"never-there", sync=True)  # absent keys are fine


def test_dict_sugar(db):
    db[b"a"] = b"1"
    assert db[b"a"] == b"1"
    assert b"a" in db and b"b" not in db
    with pytest.raises(KeyError) as e:
        db[b"b"]
    assert e.value.args == (b"b",)
    del db[b"a"]
    assert b"a" not in db
    with pytest.raises(KeyError):
        del db[b"a"]


def test_str_is_utf8_and_values_are_bytes(db):
    db["clé"] = "valeur"
    assert db["clé".encode()] == "valeur".encode()
    assert db.get("clé") == b"valeur"
    db[b"a"] = b"1"
    assert db["a"] == b"1"


@pytest.mark.parametrize("bad", [1, None, bytearray(b"x"), memoryview(b"x"), ["x"]])
def test_other_key_types_raise_type_error(db, bad):
    with pytest.raises(TypeError, match="bytes or str"):
        db.put(bad, b"v")
    with pytest.raises(TypeError):
        db.put(b"k", bad)
    with pytest.raises(TypeError):
        db.get(bad)


def test_empty_key_and_value(db):
    db[b""] = b""
    assert db[b""] == b""
    assert list(db) == [(b"", b"")]


def test_oversized_key_is_invalid_argument(db):
    with pytest.raises(sluicedb.InvalidArgumentError) as e:
        db.put(b"k" * (sluicedb_max_key() + 1), b"v")
    assert isinstance(e.value, ValueError)
    assert isinstance(e.value, sluicedb.Error)


def sluicedb_max_key() -> int:
    return 64 << 10  # MAX_KEY_BYTES of the engine (batch.rs)


def test_write_batch(db):
    db[b"gone"] = b"x"
    with db.write_batch() as wb:
        wb.put(b"a", b"1")
        wb.put("b", "2")
        wb.delete(b"gone")
        assert len(wb) == 3
        assert b"a" not in db  # nothing before the block ends
    assert len(wb) == 0
    assert list(db) == [(b"a", b"1"), (b"b", b"2")]
    wb = db.write_batch(sync=True)
    wb.put(b"c", b"3")
    wb.clear()
    wb.put(b"d", b"4")
    wb.write()
    assert list(db.keys()) == [b"a", b"b", b"d"]


def test_batch_exception_transaction_discards(db):
    with pytest.raises(RuntimeError):
        with db.write_batch(transaction=True) as wb:
            wb.put(b"t", b"1")
            raise RuntimeError("boom")
    assert b"t" not in db


def test_batch_exception_without_transaction_writes(db):
    with pytest.raises(RuntimeError):
        with db.write_batch() as wb:
            wb.put(b"t", b"1")
            raise RuntimeError("boom")
    assert db[b"t"] == b"1"


def fill(db, n=10):
    for i in range(n):
        db.put(b"k%02d" % i, b"v%02d" % i)


def keys(it):
    return [k for k, _ in it]


def test_iterator_ranges(db):
    fill(db)
    assert keys(db.iterator()) == [b"k%02d" % i for i in range(10)]
    assert keys(db.iterator(start=b"k03", stop=b"k06")) == [b"k03", b"k04", b"k05"]
    assert keys(db.iterator(start=b"k03", stop=b"k06", include_start=False, include_stop=True)) == [
        b"k04",
        b"k05",
        b"k06",
    ]
    assert keys(db.iterator(start=b"k08")) == [b"k08", b"k09"]
    assert keys(db.iterator(stop=b"k02")) == [b"k00", b"k01"]
    assert keys(db.iterator(start=b"k03", stop=b"k06", reverse=True)) == [b"k05", b"k04", b"k03"]
    assert keys(db.iterator(reverse=True))[:2] == [b"k09", b"k08"]
    assert keys(db.iterator(start=b"z")) == []


def test_iterator_prefix(db):
    for k in [b"a", b"ab", b"abc", b"ab\xff", b"ac", b"b", b"\xff", b"\xff\xff"]:
        db[k] = k
    assert list(db.keys(prefix=b"ab")) == [b"ab", b"abc", b"ab\xff"]
    assert list(db.keys(prefix=b"ab", reverse=True)) == [b"ab\xff", b"abc", b"ab"]
    assert list(db.keys(prefix=b"\xff")) == [b"\xff", b"\xff\xff"]
    assert len(list(db.keys(prefix=b""))) == 8
    with pytest.raises(TypeError):
        db.iterator(prefix=b"a", start=b"a")


def test_iterator_include_flags(db):
    fill(db, 3)
    assert list(db.iterator(include_value=False)) == [b"k00", b"k01", b"k02"]
    assert list(db.iterator(include_key=False)) == [b"v00", b"v01", b"v02"]
    assert list(db.keys()) == [b"k00", b"k01", b"k02"]
    assert list(db.values(reverse=True)) == [b"v02", b"v01", b"v00"]
    assert list(db.items(start=b"k01")) == [(b"k01", b"v01"), (b"k02", b"v02")]
    with pytest.raises(TypeError):
        db.iterator(include_key=False, include_value=False)


def test_iterator_reads_the_state_it_was_made_at(db):
    fill(db, 3)
    it = db.iterator()
    assert next(it) == (b"k00", b"v00")
    db[b"k01"] = b"new"
    db[b"k015"] = b"inserted"
    assert list(it) == [(b"k01", b"v01"), (b"k02", b"v02")]
    assert next(it, None) is None


def test_iterator_close_and_context(db):
    fill(db, 3)
    with db.iterator() as it:
        assert next(it) == (b"k00", b"v00")
    with pytest.raises(sluicedb.ClosedError):
        next(it)


def test_raw_iterator(db):
    fill(db, 5)
    r = db.raw_iterator()
    assert not r.valid()
    with pytest.raises(sluicedb.IteratorInvalidError):
        r.key()
    r.seek_to_first()
    assert r.valid() and r.key() == b"k00" and r.value() == b"v00"
    r.next()
    assert r.item() == (b"k01", b"v01")
    r.seek(b"k025")
    assert r.key() == b"k03"
    r.seek_for_prev(b"k025")
    assert r.key() == b"k02"
    r.prev()
    r.prev()
    assert r.key() == b"k00"
    r.prev()
    assert not r.valid()
    r.status()
    with pytest.raises(sluicedb.IteratorInvalidError):
        r.next()
    r.seek_to_last()
    assert r.key() == b"k04"
    r.next()
    assert not r.valid()
    r.close()
    with pytest.raises(sluicedb.ClosedError):
        r.valid()


def test_snapshot(db):
    db[b"a"] = b"1"
    db[b"b"] = b"1"
    with db.snapshot() as snap:
        db[b"a"] = b"2"
        del db[b"b"]
        db[b"c"] = b"2"
        assert snap[b"a"] == b"1" and snap.get(b"b") == b"1"
        assert b"c" not in snap and snap.get(b"c", b"d") == b"d"
        assert list(snap) == [(b"a", b"1"), (b"b", b"1")]
        assert list(snap.keys(reverse=True)) == [b"b", b"a"]
        r = snap.raw_iterator()
        r.seek_to_last()
        assert r.item() == (b"b", b"1")
        it = snap.iterator()
    # Iterators made from a snapshot outlive it.
    assert list(it) == [(b"a", b"1"), (b"b", b"1")]
    with pytest.raises(sluicedb.ClosedError):
        snap.get(b"a")
    assert list(db) == [(b"a", b"2"), (b"c", b"2")]
    s = db.snapshot()
    s.release()
    with pytest.raises(sluicedb.ClosedError):
        s.iterator()


def test_stats(db):
    fill(db, 10)
    s = db.stats()
    assert s["created_with"] == "adaptive"
    assert s["writes"]["user_ops_written"] == 10
    assert isinstance(s["index"], dict) and isinstance(s["space"], dict)
    assert s["poisoned"] is None


def test_maintenance_calls(db):
    for i in range(2000):
        db.put(b"k%05d" % i, os.urandom(100))
    db.flush()
    db.sync()
    db.compact_range()
    db.compact_range(start=b"k00100", stop=b"k00200")
    assert db.verify() >= 2000
    assert set(db.gc()) >= {"chunks", "bytes_read", "records"}
    assert db.path.endswith("db")
    assert db.preset == "adaptive"


@pytest.mark.parametrize("preset", ["adaptive", "hashkv"])
def test_checkpoint_is_an_openable_copy(tmp_path, preset):
    src, copy = str(tmp_path / "src"), tmp_path / "copy"
    with sluicedb.DB(src, preset=preset) as db:
        for i in range(500):
            db.put(b"k%04d" % i, b"v%d" % i * 300)
        db.delete(b"k0007")
        made = db.checkpoint(copy)
        assert set(made) == {"files_linked", "files_copied", "bytes_copied"}
        assert made["files_linked"] + made["files_copied"] > 0
        # Writes after the call stay out of the copy.
        db.put(b"later", b"x")
        with pytest.raises(sluicedb.AlreadyExistsError):
            db.checkpoint(copy)
    with sluicedb.DB(str(copy), create_if_missing=False) as c:
        assert c.preset == preset
        assert c[b"k0499"] == b"v499" * 300
        assert b"k0007" not in c and b"later" not in c
        assert len(list(c.keys())) == 499
        assert c.verify() >= 499


@pytest.mark.parametrize("preset", sluicedb.PRESETS)
def test_presets_round_trip_and_are_remembered(path, preset):
    with sluicedb.DB(path, preset=preset, **SMALL) as db:
        db[b"k"] = b"v" * 3000  # separated where the preset separates
        db.flush()
        assert db.preset == preset
    with sluicedb.DB(path) as db:  # no preset: the recorded one
        assert db.preset == preset
        assert db[b"k"] == b"v" * 3000


def test_open_errors(path, tmp_path):
    with pytest.raises(sluicedb.NotFoundError):
        sluicedb.DB(path, create_if_missing=False)
    with pytest.raises(sluicedb.InvalidArgumentError, match="unknown preset"):
        sluicedb.DB(path, preset="nope")
    with pytest.raises(TypeError, match="no_such_option"):
        sluicedb.DB(path, no_such_option=1)
    with pytest.raises(TypeError):
        sluicedb.DB(path, write_buffer_size_bytes="big")
    with sluicedb.DB(path) as db:
        with pytest.raises(sluicedb.LockedError) as e:
            sluicedb.DB(path)
        assert isinstance(e.value, sluicedb.IOError) and isinstance(e.value, OSError)
    with pytest.raises(sluicedb.AlreadyExistsError):
        sluicedb.DB(path, error_if_exists=True)
    file = tmp_path / "file"
    file.write_bytes(b"")
    with pytest.raises(sluicedb.Error):
        sluicedb.DB(str(file))


def test_read_only(path):
    with sluicedb.DB(path) as db:
        db[b"a"] = b"1"
    with sluicedb.DB(path, read_only=True) as db:
        assert db[b"a"] == b"1"
        with pytest.raises(sluicedb.ReadOnlyError):
            db[b"b"] = b"2"


def test_pathlike(tmp_path):
    with sluicedb.DB(tmp_path / "p") as db:
        db[b"a"] = b"1"
        assert db.path == str(tmp_path / "p")


def test_corruption_is_reported(path):
    with sluicedb.DB(path, preset="leveldb", **SMALL) as db:
        for i in range(3000):
            db.put(b"k%05d" % i, b"%0100d" % i)
        db.compact_range()
    tables = [f for f in os.listdir(path) if f.endswith((".sst", ".ldb", ".table"))]
    assert tables, os.listdir(path)
    victim = os.path.join(path, max(tables, key=lambda f: os.path.getsize(os.path.join(path, f))))
    with open(victim, "r+b") as f:
        f.seek(100)
        f.write(b"\x00garbage\xff" * 8)
    with sluicedb.DB(path, preset="leveldb") as db:
        with pytest.raises(sluicedb.CorruptionError, match=os.path.basename(victim)):
            db.verify()
