#!/usr/bin/env bash
# A/B of two `sluice` binaries on one workload, in alternating runs: this machine's speed
# drifts over the hour (the same binary ran the 2 GiB update at 150-170k and 200-225k ops/s
# in different half-hours), so only runs taken in turn compare. Prints each run's phases
# (ops/s, CPU seconds, space amplification at the end) and the mean of each side.
# Usage: scripts/ab-bench.sh BIN_A BIN_B [PAIRS (default 3)] [DIR (default /tmp/ab)]
# Environment: ENGINES (default hashkv), GIB (data size, 1), WORKLOAD (update), EXTRA (more
# `sluice bench` flags, e.g. "--space-limit 1.45,1.5"). Results go to DIR/a.jsonl, DIR/b.jsonl.
set -euo pipefail
a=$1 b=$2 pairs=${3:-3} dir=${4:-/tmp/ab}
mkdir -p "$dir"
rm -f "$dir/a.jsonl" "$dir/b.jsonl"
for i in $(seq "$pairs"); do
  for side in a b; do
    bin=$a
    [ "$side" = b ] && bin=$b
    # shellcheck disable=SC2086
    "$bin" bench --quiet --db "$dir/db" --engines "${ENGINES:-hashkv}" \
      --benchmarks "${WORKLOAD:-update}" --dataset-gib "${GIB:-1}" ${EXTRA:-} \
      --out "$dir/$side.jsonl" >/dev/null
    rm -rf "$dir/db"
    echo "pair $i: $side done" >&2
  done
done
python3 - "$dir/a.jsonl" "$dir/b.jsonl" <<'EOF'
import json, sys, collections
means = {}
for side, path in zip("ab", sys.argv[1:]):
    runs = collections.defaultdict(list)
    for line in open(path):
        r = json.loads(line)
        if r["ops"]:
            runs[(r["engine"], r["phase"])].append(r)
    print(f"== {side}: {path}")
    for (engine, phase), rs in sorted(runs.items()):
        cells = "  ".join(
            f"{r['ops_per_sec'] / 1e3:6.1f}k {r['cpu_s'] or 0:5.1f}cpu {r['space_amp']:.2f}"
            for r in rs)
        mean = sum(r["ops_per_sec"] for r in rs) / len(rs)
        means[(side, engine, phase)] = mean
        print(f"{engine:8} {phase:12} {cells}   mean {mean / 1e3:.1f}k")
print("== b / a (mean ops/s)")
for (side, engine, phase), m in sorted(means.items()):
    if side == "a" and ("b", engine, phase) in means:
        print(f"{engine:8} {phase:12} {means[('b', engine, phase)] / m:.3f}")
EOF
