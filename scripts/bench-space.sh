#!/usr/bin/env bash
# Issue 17's space benchmark: the update workload (HashKV §4.2) and the delete-heavy churn
# workload, every separated preset opened with its defaults (no capacity) and the peers, in
# one invocation per workload, first with the whole page cache, then under memcap at a
# quarter of the data size (../shared/tools/memcap: the cgroup bounds the page cache, so
# GC and lookups meet the disk as in the papers, whose data was 10-100x their memory).
# Results are appended to OUT, the capped runs' to OUT with `-memcap` before `.jsonl`;
# `sluice bench report FILE` prints a table; `scripts/space-table.py FILE` the scoreboard's (ops/s with
# the settle step, space at each phase end, and each engine over rocksdb-blob).
# Usage: scripts/bench-space.sh [DIR (default sluice-data)] [OUT (default space.jsonl)]
# Environment: ENGINES (default wisckey,hashkv,rocksdb-blob,fjall-kv,rocksdb; the peers need
# the cargo features, whose first build compiles RocksDB's C++), GIB (data size, 2),
# WORKLOADS (update,churn), CAPPED (both | capped | uncapped), SPACE_LIMIT (passed to
# --space-limit, e.g. 1.3; default the presets'), MEMCAP (path of memcap).
# CARGO_TARGET_DIR is honoured, so a peer build kept apart from the default one is reused.
set -euo pipefail
dir=${1:-sluice-data}
out=${2:-space.jsonl}
engines=${ENGINES:-wisckey,hashkv,rocksdb-blob,fjall-kv,rocksdb}
gib=${GIB:-2}
capped=${CAPPED:-both}
source "$(dirname "$0")/bench-lib.sh"
build_sluice "$engines"
extra=()
[ -n "${SPACE_LIMIT:-}" ] && extra=(--space-limit "$SPACE_LIMIT")
# A quarter of the data: keys and values of --dataset-gib.
cap_mib=$(python3 -c "print(int($gib * 1024 / 4))")
IFS=, read -ra workloads <<< "${WORKLOADS:-update,churn}"
for w in "${workloads[@]}"; do
  run=("$sluice" bench --quiet --db "$dir" --engines "$engines" \
    --benchmarks "$w" --dataset-gib "$gib" "${extra[@]}")
  if [ "$capped" != capped ]; then
    echo "== $w, $gib GiB, page cache unbounded" >&2
    "${run[@]}" --out "$out"
  fi
  if [ "$capped" != uncapped ]; then
    echo "== $w, $gib GiB, memcap $cap_mib MiB" >&2
    "$memcap" "$cap_mib" "${run[@]}" --out "${out%.jsonl}-memcap.jsonl"
  fi
done
[ "$capped" = capped ] || "$sluice" bench report "$out"
[ "$capped" = uncapped ] || "$sluice" bench report "${out%.jsonl}-memcap.jsonl"
