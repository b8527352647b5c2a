#!/usr/bin/env python3
"""Markdown tables of the benchmark matrix (scripts/bench-matrix.sh) from `sluice bench
--out` files named REGIME.jsonl or NAME-REGIME.jsonl (mem, cap). Per regime and value size, two tables with a
row per phase and a column per engine, in the order the engines first appear:
  1. thousands of ops/s, and CPU microseconds per operation (the process's CPU time over
     the phase, settling included, divided by its operations);
  2. p99 latency in microseconds, write amplification, space amplification at the phase's
     last write and after settling, and peak resident memory in MiB.
Usage: scripts/matrix-table.py FILE.jsonl... > matrix.md
"""
import collections
import json
import os
import sys


def value_label(r):
    if r["workload"] == "mixed":
        return "Mixed (16 KiB and 100-512 B, 1:1)"
    pair = r["key_size"] + r["value_size"]
    for size, name in ((16384, "16 KiB"), (4096, "4 KiB"), (2048, "2 KiB"), (1024, "1 KiB"),
                       (128, "128 B")):
        if abs(pair - size) <= size // 16:
            return f"{name} pairs ({int(r['value_size'])} B values)"
    return f"{int(r['value_size'])} B values"


def cells(rs, fmt):
    return [fmt(r) if r else "" for r in rs]


def main(paths):
    # (regime, value) -> phase -> engine -> last row
    groups = collections.OrderedDict()
    engines = collections.OrderedDict()
    for path in paths:
        # REGIME.jsonl, or NAME-REGIME.jsonl for kept copies.
        regime = os.path.basename(path).removesuffix(".jsonl").rsplit("-", 1)[-1]
        for line in open(path):
            r = json.loads(line)
            if not r["ops"]:
                continue
            engines[r["engine"]] = None
            key = (regime, value_label(r))
            groups.setdefault(key, collections.OrderedDict())
            groups[key].setdefault(r["phase"], {})[r["engine"]] = r
    names = list(engines)
    regimes = {"mem": "in memory", "cap": "memory capped at a quarter of the data"}
    for (regime, value), phases in groups.items():
        print(f"## {value}, {regimes.get(regime, regime)}\n")
        print("kops/s (CPU µs per op):\n")
        print("| phase | " + " | ".join(names) + " |")
        print("|---" * (len(names) + 1) + "|")
        for phase, by in phases.items():
            rs = [by.get(e) for e in names]
            print(f"| {phase} | " + " | ".join(cells(rs, lambda r: "{:.0f}k ({:.1f})".format(
                r["ops_per_sec"] / 1e3,
                ((r["cpu_s"] or 0) + (r["settle_cpu_s"] or 0)) / r["ops"] * 1e6))) + " |")
        print("\np99 µs / write amp. / space amp. at last write, after settle / peak RSS MiB:\n")
        print("| phase | " + " | ".join(names) + " |")
        print("|---" * (len(names) + 1) + "|")
        for phase, by in phases.items():
            rs = [by.get(e) for e in names]

            def second(r):
                def num(x, fmt="{:.2f}"):
                    return fmt.format(x) if x is not None else "-"
                rss = r["peak_rss_bytes"]
                return "{} / {} / {}, {} / {}".format(
                    num(r["latency"]["p99_us"], "{:.0f}"),
                    num(r["write_amp"]),
                    num(r["space_amp_before_settle"]),
                    num(r["space_amp"]),
                    num(rss / 2**20 if rss else None, "{:.0f}"))
            print(f"| {phase} | " + " | ".join(cells(rs, second)) + " |")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
