#!/usr/bin/env python3
"""A redis-py smoke run against a server (sluice serve or redis-server).

Usage: redis_py_smoke.py PORT [--resp3]

Exercises what a Python application does with redis-py: strings, counters,
pipelines, a WATCH/MULTI transaction, expiry, SCAN, and INFO; every step
asserts its result. Exits non-zero on the first mismatch. Works in a key
prefix of its own and deletes it at the end.
"""

import sys
import time

import redis


def main() -> int:
    port = int(sys.argv[1])
    protocol = 3 if "--resp3" in sys.argv[2:] else 2
    r = redis.Redis(host="127.0.0.1", port=port, protocol=protocol)
    p = "pysmoke:"
    assert r.ping() is True
    assert r.set(p + "a", b"x" * 1000) is True
    assert r.get(p + "a") == b"x" * 1000
    assert r.get(p + "missing") is None
    assert r.set(p + "a", "y", nx=True) is None
    assert r.set(p + "a", "y", xx=True, get=True) == b"x" * 1000
    assert r.incr(p + "n") == 1
    assert r.incrby(p + "n", 41) == 42
    assert abs(r.incrbyfloat(p + "n", 0.5) - 42.5) < 1e-9
    assert r.append(p + "s", "ab") == 2 and r.append(p + "s", "cd") == 4
    assert r.getrange(p + "s", 1, 2) == b"bc"
    assert r.mset({p + "m1": "1", p + "m2": "2"}) is True
    assert r.mget([p + "m1", p + "m2", p + "nope"]) == [b"1", b"2", None]

    # A pipeline of 1000 writes, then 1000 reads.
    with r.pipeline(transaction=False) as pipe:
        for i in range(1000):
            pipe.set(f"{p}k{i}", i)
        assert all(pipe.execute())
    with r.pipeline(transaction=False) as pipe:
        for i in range(1000):
            pipe.get(f"{p}k{i}")
        assert pipe.execute() == [str(i).encode() for i in range(1000)]

    # WATCH/MULTI/EXEC: a transfer that retries when the key changes.
    r.set(p + "bal", 100)

    def transfer(pipe):
        bal = int(pipe.get(p + "bal"))
        pipe.multi()
        pipe.set(p + "bal", bal - 30)
        pipe.incrby(p + "other", 30)

    r.transaction(transfer, p + "bal")
    assert r.get(p + "bal") == b"70" and r.get(p + "other") == b"30"

    # A transaction aborted by a write to a watched key.
    with r.pipeline() as pipe:
        pipe.watch(p + "bal")
        r.set(p + "bal", 1)  # another connection writes
        pipe.multi()
        pipe.set(p + "bal", 999)
        try:
            pipe.execute()
            raise AssertionError("EXEC should have been aborted")
        except redis.WatchError:
            pass
    assert r.get(p + "bal") == b"1"

    # Expiry.
    assert r.set(p + "t", "v", px=200) is True
    assert 0 < r.pttl(p + "t") <= 200
    time.sleep(0.3)
    assert r.get(p + "t") is None and r.ttl(p + "t") == -2
    assert r.expire(p + "a", 100) is True and 90 < r.ttl(p + "a") <= 100
    assert r.persist(p + "a") is True and r.ttl(p + "a") == -1

    # SCAN sees every key of the prefix exactly as they are.
    keys = set(r.scan_iter(match=p + "k*", count=100))
    assert keys == {f"{p}k{i}".encode() for i in range(1000)}, len(keys)

    info = r.info()
    assert "redis_version" in info and "connected_clients" in info

    # Clean up: every key of the prefix.
    doomed = list(r.scan_iter(match=p + "*", count=500))
    assert r.delete(*doomed) == len(doomed)
    assert not list(r.scan_iter(match=p + "*"))
    print(f"redis-py {redis.__version__} smoke (RESP{protocol}) on port {port}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
