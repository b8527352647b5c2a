#!/usr/bin/env python3
"""The Python package against plyvel (LevelDB) and rocksdict (RocksDB), and
the binding's own overhead per call (issue 57).

Two data sets, each into a fresh database per engine: SMALL pairs of 16-byte
keys and 100-byte values (1,000,000 by default) and LARGE pairs with 4 KiB
values (100,000). Per engine and data set, in order: put (one call per pair,
keys in random order), get (every key once, random order), batched put
(1,000 pairs a batch, into another fresh database) and a full scan. Writes
are not synced (every engine's default). Prints ops/s per engine and
sluicedb's ratio over each peer (above 1: sluicedb is faster).

Then the overhead: the same get, put, batched put and scan through the
Rust API (`sluicedb._sluicedb._rust_loop`, one call for the whole loop)
and through the Python API, in the calling thread's CPU time; the
difference per call is what the binding adds.

Usage (peers that are not installed are skipped; install them as wheels,
`pip install --only-binary :all: plyvel rocksdict`):
    nice python3 scripts/bench-python.py [--small N] [--large N]
        [--presets adaptive,leveldb] [--peers plyvel,rocksdict] [--dir DIR] [--seed S]
        [--overhead-only]
"""

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

import sluicedb
from sluicedb import _sluicedb


class Sluice:
    def __init__(self, preset):
        self.preset = preset
        self.name = f"sluicedb[{preset}]"

    def open(self, path):
        self.db = sluicedb.DB(path, preset=self.preset)

    def put(self, k, v):
        self.db.put(k, v)

    def get(self, k):
        return self.db.get(k)

    def batch(self, pairs):
        wb = self.db.write_batch()
        for k, v in pairs:
            wb.put(k, v)
        wb.write()

    def scan(self):
        n = 0
        for _k, _v in self.db.iterator():
            n += 1
        return n

    def close(self):
        self.db.close()


class Plyvel:
    name = "plyvel"

    def open(self, path):
        import plyvel

        self.db = plyvel.DB(path, create_if_missing=True)

    def put(self, k, v):
        self.db.put(k, v)

    def get(self, k):
        return self.db.get(k)

    def batch(self, pairs):
        with self.db.write_batch() as wb:
            for k, v in pairs:
                wb.put(k, v)

    def scan(self):
        n = 0
        for _k, _v in self.db.iterator():
            n += 1
        return n

    def close(self):
        self.db.close()


class RocksDict:
    name = "rocksdict"

    def open(self, path):
        import rocksdict

        opts = rocksdict.Options(raw_mode=True)
        self.db = rocksdict.Rdict(path, options=opts)
        self.rocksdict = rocksdict

    def put(self, k, v):
        self.db.put(k, v)

    def get(self, k):
        return self.db.get(k)

    def batch(self, pairs):
        wb = self.rocksdict.WriteBatch(raw_mode=True)
        for k, v in pairs:
            wb.put(k, v)
        self.db.write(wb)

    def scan(self):
        n = 0
        for _k, _v in self.db.items():
            n += 1
        return n

    def close(self):
        self.db.close()


def available(engine):
    try:
        __import__(engine.name)
        return True
    except ImportError:
        print(f"{engine.name}: not installed, skipped", file=sys.stderr)
        return False


def keys_for(n, rng):
    keys = [b"%016d" % i for i in range(n)]
    rng.shuffle(keys)
    return keys


def timed(f):
    start = time.perf_counter()
    f()
    return time.perf_counter() - start


def run_engine(engine, root, keys, value):
    """ops/s of put, get, batched put, scan."""
    n = len(keys)
    out = {}
    path = os.path.join(root, engine.name)
    engine.open(path)
    out["put"] = n / timed(lambda: [engine.put(k, value) for k in keys])
    found = []
    out["get"] = n / timed(lambda: found.append(sum(engine.get(k) is not None for k in keys)))
    assert found == [n], (engine.name, found)
    scanned = []
    out["scan"] = n / timed(lambda: scanned.append(engine.scan()))
    assert scanned == [n], (engine.name, scanned)
    engine.close()
    shutil.rmtree(path)
    engine.open(path)
    pairs = [(k, value) for k in keys]
    out["batched put"] = n / timed(
        lambda: [engine.batch(pairs[i : i + 1000]) for i in range(0, n, 1000)]
    )
    engine.close()
    shutil.rmtree(path)
    return out


def cpu(f):
    start = time.thread_time()
    f()
    return time.thread_time() - start


def overhead(root, keys, value, preset):
    """Thread CPU µs per call: Rust loop, Python loop, difference."""
    path = os.path.join(root, "overhead")
    db = sluicedb.DB(path, preset=preset)
    n = len(keys)
    rows = []

    def py_batch():
        for i in range(0, n, 1000):
            wb = db.write_batch()
            for k in keys[i : i + 1000]:
                wb.put(k, value)
            wb.write()

    def py_scan():
        for _ in db.iterator():
            pass

    def py_put():
        for k in keys:
            db.put(k, value)

    def py_get():
        # Each value dropped at once, as the Rust loop does: a list of
        # them would page in fresh memory, counted as this thread's time.
        for k in keys:
            db.get(k)

    for op, py in [
        ("put", py_put),
        ("get", py_get),
        ("batched put", py_batch),
        ("scan", py_scan),
    ]:
        rust_op = {"batched put": "batch"}.get(op, op)
        # Alternating rounds, the best of each: the first put round
        # inserts where the later ones overwrite, and a busy machine
        # slows some rounds (cache misses count as CPU time).
        rust = python = float("inf")
        for _round in range(3):
            rust = min(rust, _sluicedb._rust_loop(db, rust_op, keys, value))
            python = min(python, cpu(py))
        rows.append((op, rust / n * 1e6, python / n * 1e6))
    db.close()
    shutil.rmtree(path)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", type=int, default=1_000_000)
    ap.add_argument("--large", type=int, default=100_000)
    ap.add_argument("--presets", default="adaptive")
    ap.add_argument("--peers", default="plyvel,rocksdict", help="'' for none")
    ap.add_argument("--dir", default=None, help="where the databases go (default: a temp dir)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--overhead-only", action="store_true", help="skip the comparison")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix="bench-python-", dir=args.dir)
    engines = [Sluice(p) for p in args.presets.split(",")]
    wanted = set(filter(None, args.peers.split(",")))
    peers = [e for e in (Plyvel(), RocksDict()) if e.name in wanted and available(e)]
    ops = ["put", "get", "batched put", "scan"]
    try:
        for label, n, size in [("small", args.small, 100), ("large", args.large, 4096)]:
            if n == 0:
                continue
            keys = keys_for(n, rng)
            value = bytes(rng.randrange(256) for _ in range(size))
            print(f"\n{label}: {n} pairs, 16 B keys, {size} B values (ops/s)")
            print(f"{'engine':<22}" + "".join(f"{op:>14}" for op in ops))
            results = {}
            for e in [] if args.overhead_only else engines + peers:
                results[e.name] = run_engine(e, root, keys, value)
                print(f"{e.name:<22}" + "".join(f"{results[e.name][op]:>14,.0f}" for op in ops))
                sys.stdout.flush()
            for e in [] if args.overhead_only else engines:
                for p in peers:
                    ratios = [results[e.name][op] / results[p.name][op] for op in ops]
                    print(f"{e.name + ' / ' + p.name:<34}" + "".join(f"{r:>12.2f}x" for r in ratios))
            print(f"\nbinding overhead, {label} ({engines[0].preset}): thread CPU µs per call")
            print(f"{'operation':<14}{'Rust API':>10}{'Python':>10}{'overhead':>10}")
            for op, rust, python in overhead(root, keys, value, engines[0].preset):
                print(f"{op:<14}{rust:>10.2f}{python:>10.2f}{python - rust:>10.2f}")
            sys.stdout.flush()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
