#!/usr/bin/env python3
"""The scoreboard's tables of issue 17's space benchmark (scripts/bench-space.sh).

Usage: scripts/space-table.py FILE.jsonl [FILE.jsonl ...]

For each file, a markdown table with a row per phase and a column per engine; each cell is
the phase's throughput in ops/s, then in brackets the throughput with the engine's settle
step counted (the work it left after the phase, when that took over 0.5 s), then the space
amplification at the phase end: `1.52→1.37` when the phase's last write left 1.52 and the
settle step brought it to 1.37 (files written before 2026-11-27 have only the second). Below it, each engine's throughput over rocksdb-blob's in
the same phase, by phase time and (in brackets) with the settle steps counted.
"""
import collections
import json
import sys

ORDER = ["scavenger", "hashkv", "wisckey", "unikv", "rocksdb-blob", "fjall-kv", "rocksdb"]
PEER = "rocksdb-blob"


def rank(engine):
    return ORDER.index(engine) if engine in ORDER else len(ORDER)


def table(path):
    runs = [json.loads(line) for line in open(path) if line.strip()]
    engines = sorted({r["engine"] for r in runs}, key=rank)
    cells = collections.OrderedDict()
    speed = collections.defaultdict(dict)
    for r in runs:
        phase, engine = r["phase"], r["engine"]
        if r["ops"]:
            settle = r.get("settle_s") or 0
            with_settle = r["ops"] / (r["elapsed_s"] + settle)
            cell = f"{r['ops_per_sec']:,.0f}"
            if settle > 0.5:
                cell += f" ({with_settle:,.0f})"
            cell += " / "
            before = r.get("space_amp_before_settle")
            if before is not None and abs(before - r["space_amp"]) >= 0.005:
                cell += f"{before:.2f}→"
            cell += f"{r['space_amp']:.2f}"
            speed[phase][engine] = (r["ops_per_sec"], with_settle)
        else:
            cell = f"{r['space_amp']:.2f}"
        cells.setdefault(phase, {})[engine] = cell
    print(f"\n{path}\n")
    print("| phase | " + " | ".join(engines) + " |")
    print("|---|" + "---:|" * len(engines))
    for phase, row in cells.items():
        print(f"| {phase} | " + " | ".join(row.get(e, "") for e in engines) + " |")
    print()
    for e in engines:
        if e == PEER:
            continue
        parts = []
        for phase, row in speed.items():
            if phase.endswith("P0") or PEER not in row or e not in row:
                continue
            (a, a_settled), (b, b_settled) = row[e], row[PEER]
            parts.append(f"{phase} {a / b:.2f} ({a_settled / b_settled:.2f})")
        if parts:
            print(f"- {e} / {PEER}: " + ", ".join(parts))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        table(p)
