#!/usr/bin/env bash
# The LightKV paper's experiments, scaled to this machine, on the lightkv and leveldb presets
# in one invocation each (`docs/experiments.md`, "LightKV"). The write buffer is a mapped file
# whose fence is an `msync` (FenceMode::Msync, the only mode a file-backed region has); the
# page cache holds every file (in memory). Fig. 9: write amplification against data size,
# 1 KiB values. Fig. 10a/b/c: random writes, random reads and 100-pair scans against value
# size. Results: one JSON line per phase in $OUT. Recovery (§V): reopen time against the
# buffer's size, from the ignored test `recovery_time_against_buffer_size` (printed).
# Table I / Fig. 11: read latency (p99, p99.9) under concurrent random writes, one writer and
# READERS reader threads (`readwhilewriting`).
# YCSB A-F (`ycsb`): the six workloads after a load of YCSB_NUM pairs (1 KiB values), YCSB_OPS
# operations each. Fig. 13a/c (`fig13`): lightkv alone, fillrandom then readrandom of FIG13_NUM
# pairs of 1 KiB, once per MAX_LEAF_NODES in FIG13_LEAVES (`--lightkv-max-leaf-nodes`) and once
# per compaction size CS in FIG13_CS (`--lightkv-cs`), the other knob at the preset's default.
# Usage: scripts/bench-lightkv.sh [fig9|fig10|latency|recovery|ycsb|fig13|all] ; environment:
# SLUICE (binary, default target/release/sluice), DIR (default /tmp/lightkv-scratch/bench), OUT
# (default $DIR/lightkv.jsonl), FIG9_GIB (sizes, default "0.25 0.5 1"), FIG10_NUM (pairs per
# value size, default 100000), LAT_NUM (pairs loaded, default 100000), READERS (default 2),
# YCSB_NUM and YCSB_OPS (default 100000 each), FIG13_NUM (default 100000), FIG13_LEAVES
# (default "16 32 64 128"), FIG13_CS (default "2 3 4 6 8"), ENGINES (default lightkv,leveldb;
# the fig13 sweeps run lightkv alone), PM_FENCE (msync or cache, default msync: what a fence of the
# buffer's mapped file does; cache stands in for real PM and survives a process crash only).
set -euo pipefail
what=${1:-all}
bin=${SLUICE:-target/release/sluice}
dir=${DIR:-/tmp/lightkv-scratch/bench}
out=${OUT:-$dir/lightkv.jsonl}
engines=${ENGINES:-lightkv,leveldb}
fence=(--pm-fence "${PM_FENCE:-msync}")
mkdir -p "$dir"
if [ "$what" = fig9 ] || [ "$what" = all ]; then
  for gib in ${FIG9_GIB:-0.25 0.5 1}; do
    nice "$bin" bench --quiet --db "$dir/db" --engines "$engines" --benchmarks fillrandom \
      --dataset-gib "$gib" --value-size 1024 --out "$out" "${fence[@]}"
    rm -rf "$dir/db"
  done
fi
if [ "$what" = fig10 ] || [ "$what" = all ]; then
  for size in 256 1024 4096; do
    nice "$bin" bench --quiet --db "$dir/db" --engines "$engines" \
      --benchmarks fillrandom,readrandom,scan --num "${FIG10_NUM:-100000}" \
      --value-size "$size" --scan-length 100 --out "$out" "${fence[@]}"
    rm -rf "$dir/db"
  done
fi
if [ "$what" = latency ] || [ "$what" = all ]; then
  nice "$bin" bench --quiet --db "$dir/db" --engines "$engines" --benchmarks readwhilewriting \
    --num "${LAT_NUM:-100000}" --value-size 1024 --threads $((${READERS:-2} + 1)) \
    --out "$out" "${fence[@]}"
  rm -rf "$dir/db"
fi
if [ "$what" = ycsb ] || [ "$what" = all ]; then
  nice "$bin" bench --quiet --db "$dir/db" --engines "$engines" --benchmarks ycsb \
    --num "${YCSB_NUM:-100000}" --ops "${YCSB_OPS:-100000}" --value-size 1024 \
    --out "$out" "${fence[@]}"
  rm -rf "$dir/db"
fi
if [ "$what" = fig13 ] || [ "$what" = all ]; then
  for leaves in ${FIG13_LEAVES:-16 32 64 128}; do
    echo "fig13a: --lightkv-max-leaf-nodes $leaves"
    nice "$bin" bench --quiet --db "$dir/db" --engines lightkv --benchmarks fillrandom,readrandom \
      --num "${FIG13_NUM:-100000}" --value-size 1024 --lightkv-max-leaf-nodes "$leaves" \
      --out "$out" "${fence[@]}"
    rm -rf "$dir/db"
  done
  for cs in ${FIG13_CS:-2 3 4 6 8}; do
    echo "fig13c: --lightkv-cs $cs"
    nice "$bin" bench --quiet --db "$dir/db" --engines lightkv --benchmarks fillrandom,readrandom \
      --num "${FIG13_NUM:-100000}" --value-size 1024 --lightkv-cs "$cs" --out "$out" "${fence[@]}"
    rm -rf "$dir/db"
  done
fi
if [ "$what" = recovery ] || [ "$what" = all ]; then
  LIGHTKV_RECOVERY_DIR="$dir/recovery" LIGHTKV_RECOVERY_MIB="${RECOVERY_MIB:-16 64 256}" \
    nice cargo test -q -p sluicedb --test lightkv -- --ignored --nocapture \
    recovery_time_against_buffer_size
fi
