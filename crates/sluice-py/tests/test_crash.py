"""Processes killed with SIGKILL while writing with sync=True: reopening
finds every write they were told was durable, and history is a prefix
(no later write without the earlier ones)."""

import signal

import pytest

import sluicedb
from conftest import run_python

WRITER = r"""
import sys
import sluicedb

db = sluicedb.DB(sys.argv[1], preset=sys.argv[2], write_buffer_size_bytes=64 << 10)
i = 0
while True:
    value = b"%08d" % i * (1 + i % 600)  # 8 B to 4.8 KiB: inline and separated
    if i % 2:
        db.put(b"k%08d" % i, value, sync=True)
        i += 1
    else:
        with db.write_batch(sync=True) as wb:
            wb.put(b"k%08d" % i, value)
            wb.put(b"k%08d" % (i + 1), b"%08d" % (i + 1) * (1 + (i + 1) % 600))
        i += 2
    print(i, flush=True)  # keys below i are acknowledged as synced
"""


@pytest.mark.parametrize("preset", ["adaptive", "leveldb", "wisckey"])
def test_synced_writes_survive_sigkill(path, preset):
    acknowledged = 0
    for _round in range(2):  # a second crash on the recovered database
        child = run_python(WRITER, path, preset)
        start = acknowledged
        while acknowledged < start + 150:
            line = child.stdout.readline()
            assert line, child.stderr.read().decode()
            acknowledged = int(line)
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate()
        for line in out.split():
            acknowledged = int(line)  # printed before it died: acknowledged too
        assert child.returncode == -signal.SIGKILL
        with sluicedb.DB(path, preset=preset) as db:
            keys = list(db.keys())
            assert len(keys) >= acknowledged
            assert keys == [b"k%08d" % i for i in range(len(keys))], "not a prefix of history"
            for i in range(0, len(keys), 7):
                assert db[b"k%08d" % i] == b"%08d" % i * (1 + i % 600)
            acknowledged = len(keys)
            db.put(b"k%08d" % acknowledged, b"%08d" % acknowledged * (1 + acknowledged % 600))
            acknowledged += 1
        # The next writer starts from key 0 again, rewriting the same
        # values, and is killed once past what this round acknowledged.
