#!/usr/bin/env bash
# Random writes of the lightkv preset against the leveldb preset, two `sluice` binaries (before,
# after) in alternating runs: A, B, A, B ... (`docs/experiments.md`, "LightKV's random writes:
# tables synced together"). Each run is one invocation of
#   sluice bench --engines lightkv,leveldb --benchmarks fillrandom --num N --value-size 1024
#     --pm-fence cache
# (under MEMCAP each engine in an invocation of its own, inside `memcap MEMCAP`, since a cgroup
# limit counts the page cache the first engine left). Prints per run and engine: ops/s, CPU µs
# per write (the phase's process CPU over its writes), p99 µs, write amplification (the
# engine's own I/O counters, settle included), flushes, merges, table syncs, and the load
# average when the run began; then the lightkv / leveldb ratios per run.
# Usage: scripts/ab-lightkv-writes.sh BIN_A BIN_B [PAIRS (default 2)]
# Environment: NUM (default 1000000), DIR (default /tmp/lightkv-ab), MEMCAP (MiB; unset: in
# memory), MEMCAP_BIN (default /work/shared/tools/memcap), EXTRA (more `sluice bench` flags),
# STRACE=1 (count the syncs and the wall time spent in them, `strace -w -c`, into
# DIR/SIDE.strace.K; it slows the runs, so compare throughput only between runs without it).
set -euo pipefail
# shellcheck source=lib/ab-lightkv.sh
. "$(dirname "$0")/lib/ab-lightkv.sh"
a=$1 b=$2 pairs=${3:-2}
num=${NUM:-1000000}
dir=${DIR:-/tmp/lightkv-ab}
mkdir -p "$dir"
rm -f "$dir"/*.jsonl
run() { # side bin engines
  local side=$1 bin=$2 engines=$3 load
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  local cmd=("$bin" bench --quiet --db "$dir/db" --engines "$engines" --benchmarks fillrandom
    --num "$num" --value-size 1024 --pm-fence cache --verbose --out "$dir/$side.jsonl")
  # shellcheck disable=SC2206
  cmd+=(${EXTRA:-})
  if [ -n "${STRACE:-}" ]; then
    local k
    k=$(wc -l <"$dir/log")
    cmd=(strace -w -f -c --seccomp-bpf -e trace=fdatasync,fsync -o "$dir/$side.strace.$k" "${cmd[@]}")
  fi
  capped
  echo "== $side $engines load $load" >>"$dir/log"
  nice -n 5 "${cmd[@]}" >>"$dir/log" 2>&1
  echo "$load" >>"$dir/$side.load"
  rm -rf "$dir/db"
}
rm -f "$dir"/*.load "$dir"/*.strace.*
: >"$dir/log"
alternate "$a" "$b" "$pairs"
python3 - "$dir" <<'EOF'
import json, sys
d = sys.argv[1]
for side in "ab":
    rows = [json.loads(l) for l in open(f"{d}/{side}.jsonl")]
    rows = [r for r in rows if r["phase"] == "fillrandom"]
    loads = [l.strip() for l in open(f"{d}/{side}.load")]
    print(f"== {side} (load at each invocation: {'; '.join(loads)})")
    by = {}
    for r in rows:
        by.setdefault(r["engine"], []).append(r)
        cpu_us = (r["cpu_s"] or 0) * 1e6 / max(r["ops"], 1)
        print(f"{r['engine']:8} {r['ops_per_sec']:9.0f} ops/s  {cpu_us:5.1f} cpu-us/op  "
              f"p99 {r['latency']['p99_us']:7.1f} us  WA {r['write_amp'] or 0:.2f}  "
              f"settle {r['settle_s'] or 0:.1f} s")
    for x, y in zip(by.get("lightkv", []), by.get("leveldb", [])):
        print(f"  lightkv/leveldb: ops/s {x['ops_per_sec'] / y['ops_per_sec']:.2f}x  "
              f"WA {(x['write_amp'] or 0) / (y['write_amp'] or 1):.2f}x  "
              f"p99 {x['latency']['p99_us'] / y['latency']['p99_us']:.2f}x")
EOF
