#!/usr/bin/env python3
"""Relocations per update of a circular value log collected from its tail (WiscKey,
FAST '16, §3.3.2), in a model: N keys, each update appends a record at the head; while
the log holds more than S x N records, the tail's record is dropped if a newer version
of its key exists and copied to the head if not. Prints, for each space ratio S, the
relocations per update over the last half of the run (steady state), for keys drawn
uniformly and from a scrambled Zipf(0.99), the `update` benchmark's distribution.

Usage: scripts/vlog-gc-model.py [S ...]   (default: 1.15 1.2 1.27 1.35 1.45)
Environment: KEYS (default 100000), SEED (default 1).
(docs/experiments.md, "WiscKey's CPU per update: a log collected from its tail under Zipf")
"""
import bisect
import collections
import itertools
import os
import random
import sys


def run(space, draw, keys):
    log = collections.deque((k, 0) for k in range(keys))
    newest = [0] * keys
    relocations = updates = 0
    for step in range(6 * keys):
        k = draw()
        newest[k] += 1
        log.append((k, newest[k]))
        updates += 1
        while len(log) > space * keys:
            key, version = log.popleft()
            if newest[key] == version:
                log.append((key, version))
                relocations += 1
        if step == 3 * keys:
            relocations = updates = 0
    return relocations / updates


def main():
    keys = int(os.environ.get("KEYS", 100000))
    rng = random.Random(int(os.environ.get("SEED", 1)))
    weights = itertools.accumulate(1 / (i + 1) ** 0.99 for i in range(keys))
    cumulative = list(weights)
    scramble = list(range(keys))
    rng.shuffle(scramble)

    def uniform():
        return rng.randrange(keys)

    def zipf():
        return scramble[bisect.bisect_left(cumulative, rng.random() * cumulative[-1])]

    print("space ratio  uniform  zipf(0.99)")
    for s in [float(a) for a in sys.argv[1:]] or [1.15, 1.2, 1.27, 1.35, 1.45]:
        print(f"{s:11.2f}  {run(s, uniform, keys):7.2f}  {run(s, zipf, keys):10.2f}")


if __name__ == "__main__":
    main()
