#!/usr/bin/env python3
"""Markdown tables of the benchmark matrix (scripts/bench-matrix.sh) from `sluice bench
--out` files named REGIME.jsonl or NAME-REGIME.jsonl (mem, cap; read by matrix_rows.py).
Per regime and value size, two tables with a row per phase and a column per engine, in the
order the engines first appear:
  1. thousands of ops/s, and CPU microseconds per operation (the process's CPU time over
     the phase, settling included, divided by its operations);
  2. p99 latency in microseconds, write amplification, space amplification at the phase's
     last write, its mean and highest while the phase ran (sampled every 250 ms) and after
     settling, and peak resident memory in MiB.
Usage: scripts/matrix-table.py FILE.jsonl... > matrix.md
"""
import sys

import matrix_rows


def cells(rs, fmt):
    return [fmt(r) if r else "" for r in rs]


def main(paths):
    groups, names = matrix_rows.read(paths)
    for (regime, value), phases in groups.items():
        print(f"## {value}, {matrix_rows.REGIMES.get(regime, regime)}\n")
        print("kops/s (CPU µs per op):\n")
        print("| phase | " + " | ".join(names) + " |")
        print("|---" * (len(names) + 1) + "|")
        for phase, by in phases.items():
            rs = [by.get(e) for e in names]
            print(f"| {phase} | " + " | ".join(cells(rs, lambda r: "{:.0f}k ({:.1f})".format(
                r["ops_per_sec"] / 1e3,
                ((r["cpu_s"] or 0) + (r["settle_cpu_s"] or 0)) / r["ops"] * 1e6))) + " |")
        print("\np99 µs / write amp. / space amp. at last write (mean, max while running), after settle / peak RSS MiB:\n")
        print("| phase | " + " | ".join(names) + " |")
        print("|---" * (len(names) + 1) + "|")
        for phase, by in phases.items():
            rs = [by.get(e) for e in names]

            def second(r):
                def num(x, fmt="{:.2f}"):
                    return fmt.format(x) if x is not None else "-"
                rss = r["peak_rss_bytes"]
                return "{} / {} / {} ({}, {}), {} / {}".format(
                    num(r["latency"]["p99_us"], "{:.0f}"),
                    num(r["write_amp"]),
                    num(r["space_amp_before_settle"]),
                    num(r.get("space_amp_running_mean")),
                    num(r.get("space_amp_running_max")),
                    num(r["space_amp"]),
                    num(rss / 2**20 if rss else None, "{:.0f}"))
            print(f"| {phase} | " + " | ".join(cells(rs, second)) + " |")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
