#!/usr/bin/env bash
# Seeks and 100-pair scans of the lightkv preset against the leveldb preset, two `sluice`
# binaries (before, after) in alternating runs over the same databases: A, B, A, B ...
# (`docs/experiments.md`, "LightKV: scans by partition"). The databases are filled once, by
# BIN_A, and each run gets a fresh copy of them (a run's scan merges change its copy):
#   sluice bench --engines lightkv,leveldb --benchmarks fillrandom --num N --value-size 1024
#     --pm-fence cache
# then each run is one invocation of
#   sluice bench --engines lightkv,leveldb --benchmarks PHASES --use-existing
#     --num N --ops OPS --scan-length 100 --value-size 1024 --pm-fence cache
# (under MEMCAP inside `memcap MEMCAP`, each engine in an invocation of its own). Prints per
# run and engine: ops/s, CPU µs per operation, p50 and p99 µs, and the lightkv / leveldb
# ratios per run, with the load average when the run began.
# Usage: scripts/ab-lightkv-scans.sh BIN_A BIN_B [PAIRS (default 2)]
# Environment: PHASES (default seekrandom,scan; e.g. five seekrandom phases before the scan warm
# the store up: its scan merges run), NUM (default 1000000), OPS (default 30000), DIR (default /tmp/lightkv-scan-ab;
# the filled databases in DIR/seed are kept when KEEP=1), MEMCAP (MiB; unset: in memory), MEMCAP_BIN
# (default /work/shared/tools/memcap), EXTRA (more `sluice bench` flags, for every run and the
# fill).
set -euo pipefail
# shellcheck source=lib/ab-lightkv.sh
. "$(dirname "$0")/lib/ab-lightkv.sh"
a=$1 b=$2 pairs=${3:-2}
num=${NUM:-1000000}
ops=${OPS:-30000}
dir=${DIR:-/tmp/lightkv-scan-ab}
mkdir -p "$dir"
rm -f "$dir"/*.jsonl "$dir"/*.load "$dir"/*.merges
: >"$dir/log"
common=(--num "$num" --value-size 1024 --pm-fence cache)
if [ "${KEEP:-}" != 1 ] || [ ! -d "$dir/seed" ]; then
  rm -rf "$dir/seed"
  # shellcheck disable=SC2206
  nice -n 5 "$a" bench --quiet --db "$dir/seed" "${common[@]}" --engines lightkv,leveldb \
    --benchmarks fillrandom ${EXTRA:-} >>"$dir/log" 2>&1
fi
run() { # side bin engines
  local side=$1 bin=$2 engines=$3 load
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  rm -rf "$dir/db"
  cp -a "$dir/seed" "$dir/db"
  local cmd=("$bin" bench --quiet --db "$dir/db" "${common[@]}" --engines "$engines" --use-existing
    --benchmarks "${PHASES:-seekrandom,scan}" --ops "$ops" --scan-length 100 --verbose
    --out "$dir/$side.jsonl")
  # shellcheck disable=SC2206
  cmd+=(${EXTRA:-})
  capped
  echo "== $side $engines load $load" >>"$dir/log"
  nice -n 5 "${cmd[@]}" >>"$dir/log" 2>&1
  echo "$load" >>"$dir/$side.load"
  grep -h "scan merges" "$dir/log" | tail -n 1 >>"$dir/$side.merges" || true
}
alternate "$a" "$b" "$pairs"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
for side in "ab":
    rows = [json.loads(l) for l in open(f"{d}/{side}.jsonl")]
    loads = [l.strip() for l in open(f"{d}/{side}.load")]
    print(f"== {side} (load at each invocation: {'; '.join(loads)})")
    for phase in ("seekrandom", "scan"):
        by = {}
        for r in rows:
            if r["phase"] != phase:
                continue
            by.setdefault(r["engine"], []).append(r)
            cpu_us = (r["cpu_s"] or 0) * 1e6 / max(r["ops"], 1)
            lat = r["latency"]
            print(f"{phase:10} {r['engine']:8} {r['ops_per_sec']:9.0f} ops/s  {cpu_us:6.1f} cpu-us/op  "
                  f"p50 {lat['p50_us']:7.1f} us  p99 {lat['p99_us']:7.1f} us")
        for x, y in zip(by.get("lightkv", []), by.get("leveldb", [])):
            print(f"  {phase} lightkv/leveldb: {x['ops_per_sec'] / y['ops_per_sec']:.2f}x")
PY
