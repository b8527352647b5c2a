"""Ctrl-C (SIGINT) during a long scan raises KeyboardInterrupt, also when
the scan is consumed in C (collections.deque, list), which runs no Python
bytecode between pairs where the interpreter would look for signals."""

import signal

import sluicedb
from conftest import SMALL, run_python

SCANNER = r"""
import collections
import sys
import sluicedb

db = sluicedb.DB(sys.argv[1])
it = iter(())
try:
    print("ready", flush=True)
    while True:
        it = db.iterator()
        collections.deque(it, maxlen=0)
except KeyboardInterrupt:
    where = "between scans" if next(it, None) is None else "mid-scan"
    print("interrupted", where, flush=True)
    db.close()
"""


def test_ctrl_c_stops_a_scan(path):
    with sluicedb.DB(path, **SMALL) as db:
        with db.write_batch() as wb:
            for i in range(50000):
                wb.put(b"%08d" % i, b"v" * 20)
    child = run_python(SCANNER, path)
    assert child.stdout.readline() == b"ready\n", child.stderr.read()
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    assert out.startswith(b"interrupted"), err.decode()
    print(out.decode().strip())  # shown with -s: where the signal landed
    assert child.returncode == 0
