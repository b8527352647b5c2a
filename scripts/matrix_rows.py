"""The reader of the benchmark matrix's JSON lines, shared by scripts/matrix-table.py and
scripts/scoreboard.py.

`sluice bench --out` writes one JSON line per phase; scripts/bench-matrix.sh collects them
in REGIME.jsonl (kept copies: NAME-REGIME.jsonl) with REGIME `mem` (the page cache
unbounded) or `cap` (capped at a quarter of the requested data). `read` returns the groups
of one or more such files: a group per (regime, value size) in the order they first
appear, each mapping phase -> engine -> row, plus the engines in the order they first
appear. Rows of no operations (a closing `.closed` measure) are left out.
"""
import collections
import json
import os

REGIMES = {"mem": "in memory", "cap": "memory capped at a quarter of the data"}


def regime_of(path):
    """`cap` for cap.jsonl and matrix-2026-11-28-cap.jsonl."""
    return os.path.basename(path).removesuffix(".jsonl").rsplit("-", 1)[-1]


def value_label(r):
    if r["workload"] == "mixed":
        return "Mixed (16 KiB and 100-512 B, 1:1)"
    pair = r["key_size"] + r["value_size"]
    for size, name in ((16384, "16 KiB"), (4096, "4 KiB"), (2048, "2 KiB"), (1024, "1 KiB"),
                       (128, "128 B")):
        if abs(pair - size) <= size // 16:
            return f"{name} pairs ({int(r['value_size'])} B values)"
    return f"{int(r['value_size'])} B values"


def read(paths):
    """(groups, engines): groups maps (regime, value label) -> phase -> engine -> row, the
    last row when a phase repeats."""
    groups = collections.OrderedDict()
    engines = collections.OrderedDict()
    for path in paths:
        regime = regime_of(path)
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    raise SystemExit(f"{path}:{number}: not a JSON line: {e}")
                if not r["ops"]:
                    continue
                engines[r["engine"]] = None
                phases = groups.setdefault((regime, value_label(r)), collections.OrderedDict())
                phases.setdefault(r["phase"], {})[r["engine"]] = r
    return groups, list(engines)
