"""A differential test: random operations on a database and on a dict
model, compared after every read. The seed is printed and named in every
failure; rerun one with SLUICEDB_SEED=<seed>."""

import os
import random

import pytest

import sluicedb
from conftest import SMALL

OPS = int(os.environ.get("SLUICEDB_MODEL_OPS", "1500"))


def expected_range(model, start, stop, prefix, reverse, include_start, include_stop):
    keys = sorted(model)
    if prefix is not None:
        keys = [k for k in keys if k.startswith(prefix)]
    if start is not None:
        keys = [k for k in keys if k > start or (include_start and k == start)]
    if stop is not None:
        keys = [k for k in keys if k < stop or (include_stop and k == stop)]
    if reverse:
        keys.reverse()
    return [(k, model[k]) for k in keys]


def random_key(rng):
    # A small key space, so that keys are overwritten and deleted often;
    # some are written as str (stored as UTF-8).
    k = b"key%03d" % rng.randrange(150)
    return k.decode() if rng.random() < 0.1 else k


def random_value(rng):
    size = rng.choice([0, 1, 10, 100, 1000, 3000, 5000])
    return rng.randbytes(size)


def as_bytes(k):
    return k.encode() if isinstance(k, str) else k


@pytest.mark.parametrize("preset", sluicedb.PRESETS)
def test_random_operations_match_a_dict(tmp_path, preset):
    seed = int(os.environ.get("SLUICEDB_SEED", random.randrange(2**32)))
    print(f"model test: preset {preset}, seed {seed} (rerun: SLUICEDB_SEED={seed})")
    rng = random.Random(seed)
    path = str(tmp_path / "db")
    db = sluicedb.DB(path, preset=preset, **SMALL)
    model: dict = {}
    snapshots: list = []  # (snapshot, copy of the model when taken)
    ctx = f"preset {preset}, seed {seed}"
    try:
        for step in range(OPS):
            op = rng.random()
            where = f"{ctx}, step {step}"
            if op < 0.35:
                k, v = random_key(rng), random_value(rng)
                db.put(k, v, sync=rng.random() < 0.01)
                model[as_bytes(k)] = v
            elif op < 0.45:
                k = random_key(rng)
                if rng.random() < 0.5:
                    db.delete(k)
                else:
                    try:
                        del db[k]
                        assert as_bytes(k) in model, where
                    except KeyError:
                        assert as_bytes(k) not in model, where
                model.pop(as_bytes(k), None)
            elif op < 0.6:
                k = random_key(rng)
                assert db.get(k) == model.get(as_bytes(k)), where
                assert (k in db) == (as_bytes(k) in model), where
            elif op < 0.68:
                transaction = rng.random() < 0.5
                fail = rng.random() < 0.3
                staged = dict(model)
                try:
                    with db.write_batch(transaction=transaction) as wb:
                        for _ in range(rng.randrange(1, 20)):
                            k = random_key(rng)
                            if rng.random() < 0.7:
                                v = random_value(rng)
                                wb.put(k, v)
                                staged[as_bytes(k)] = v
                            else:
                                wb.delete(k)
                                staged.pop(as_bytes(k), None)
                        if fail:
                            raise RuntimeError("abandon")
                except RuntimeError:
                    pass
                if not (fail and transaction):
                    model = staged
            elif op < 0.8:
                start = stop = prefix = None
                r = rng.random()
                if r < 0.3:
                    prefix = b"key%d" % rng.randrange(20)
                elif r < 0.8:
                    start = as_bytes(random_key(rng)) if rng.random() < 0.7 else None
                    stop = as_bytes(random_key(rng)) if rng.random() < 0.7 else None
                reverse = rng.random() < 0.3
                inc_start, inc_stop = rng.random() < 0.7, rng.random() < 0.3
                want = expected_range(model, start, stop, prefix, reverse, inc_start, inc_stop)
                got = list(
                    db.iterator(
                        start=start,
                        stop=stop,
                        prefix=prefix,
                        reverse=reverse,
                        include_start=inc_start,
                        include_stop=inc_stop,
                    )
                )
                assert got == want, f"{where}: iterator({start}, {stop}, {prefix}, {reverse})"
                keys = list(db.keys(start=start, stop=stop, prefix=prefix, reverse=reverse))
                want_keys = [
                    k for k, _ in expected_range(model, start, stop, prefix, reverse, True, False)
                ]
                assert keys == want_keys, where
            elif op < 0.85:
                target = as_bytes(random_key(rng))
                raw = db.raw_iterator()
                raw.seek(target)
                after = [k for k in sorted(model) if k >= target]
                assert raw.valid() == bool(after), where
                if after:
                    assert raw.item() == (after[0], model[after[0]]), where
                    raw.prev()
                    before = [k for k in sorted(model) if k < target]
                    assert raw.valid() == bool(before), where
                    if before:
                        assert raw.key() == before[-1], where
            elif op < 0.9:
                if len(snapshots) < 4 and rng.random() < 0.6:
                    snapshots.append((db.snapshot(), dict(model)))
                elif snapshots:
                    snap, frozen = snapshots.pop(rng.randrange(len(snapshots)))
                    assert list(snap) == sorted(frozen.items()), where
                    k = random_key(rng)
                    assert snap.get(k) == frozen.get(as_bytes(k)), where
                    snap.close()
            elif op < 0.91:
                # Each syncs files (about 3.5 ms an fsync here): rare.
                db.compact_range() if rng.random() < 0.5 else db.flush()
            elif op < 0.92:
                db.gc()
            elif op < 0.927:
                for s, _ in snapshots:
                    s.close()
                snapshots.clear()
                db.close()
                db = sluicedb.DB(path, **SMALL)  # the recorded preset
                assert db.preset == preset, where
            else:
                k, v = random_key(rng), random_value(rng)
                db[k] = v
                model[as_bytes(k)] = v
        assert list(db) == sorted(model.items()), ctx
        db.compact_range()
        assert db.verify() >= len(model), ctx
        for s, frozen in snapshots:
            assert list(s) == sorted(frozen.items()), ctx
    finally:
        db.close()
