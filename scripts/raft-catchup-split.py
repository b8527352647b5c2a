#!/usr/bin/env python3
"""Splits a catch-up run of scripts/raft-catchup.sh (with SLUICE_RAFT_TRACE=1)
into its parts, from the caught-up node's log and the script's output:

    scripts/raft-catchup-split.py NODE_LOG RESTART_MS CAUGHT_UP_MS

before the transfer (process start, the log probed, the snapshot's build
or choice on the leader), the transfer (first byte to last), the install
(the last byte to the answer: syncs, open, swap), and the log after it
(entries that came by AppendEntries after the install, to the end).
Traces of both transports are read: chunks (`snapshot chunk at ...`) and
streams (`snapshot stream ...`)."""
import re
import sys

log, t0, t1 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
line = re.compile(r"^(\d{13}) raft node \d+: (.*)$")
chunk = re.compile(r"snapshot chunk at (\d+) \((\d+) bytes, last (true|false)\) answered in (\d+) ms")
stream = re.compile(r"snapshot stream \S+: (\d+) bytes in (\d+) frames received in (\d+) ms, answered (\d+) ms later")
append = re.compile(r"append \((\d+) entries after")
start = end = answered = None
nbytes = 0
tail_entries, tail_msgs, tail_last = 0, 0, None
for raw in open(log, errors="replace"):
    m = line.match(raw.strip())
    if not m:
        continue
    ts, what = int(m.group(1)), m.group(2)
    if ts < t0:
        continue
    c = chunk.search(what)
    if c:
        took = int(c.group(4))
        if start is None:
            start = ts - took
        nbytes = max(nbytes, int(c.group(1)) + int(c.group(2)))
        if c.group(3) == "true":
            answered = ts
            # The last chunk arrived when its handling began.
            end = ts - took
        continue
    s = stream.search(what)
    if s:
        nbytes = int(s.group(1))
        answered = ts
        end = ts - int(s.group(4))
        start = end - int(s.group(3))
        continue
    a = append.search(what)
    if a and answered is not None and ts >= answered and int(a.group(1)) > 0:
        tail_entries += int(a.group(1))
        tail_msgs += 1
        tail_last = ts
if start is None:
    sys.exit("no snapshot transfer traced after the restart")
mb = nbytes / 1e6
print(f"before the transfer {(start - t0) / 1000:.2f} s")
print(f"transfer {(end - start) / 1000:.2f} s ({nbytes} bytes of archive, {mb / max(end - start, 1) * 1000:.0f} MB/s)")
print(f"install after the last byte {(answered - end) / 1000:.2f} s")
if tail_last is not None:
    print(f"log after the install {(tail_last - answered) / 1000:.2f} s ({tail_entries} entries in {tail_msgs} messages)")
else:
    print("log after the install: no entries")
print(f"to caught up {(t1 - answered) / 1000:.2f} s after the install's answer; total {(t1 - t0) / 1000:.2f} s")
