#!/usr/bin/env bash
# Selective KV separation, the threshold search of HashKV §3.5 (USENIX ATC '18,
# Fig. 5 / Experiment 8) on this machine: the update workload at several value
# sizes, with the values kept in the LSM tree (no separation) and separated
# into the hash layout. Where the separated line passes the other is the
# threshold worth setting. Total data per size about TOTAL bytes.
# Usage: scripts/bench-threshold-sweep.sh [TOTAL (default 268435456)] [DIR]
set -euo pipefail
total=${1:-268435456}
dir=${2:-sluice-data}
cargo build --release -q
for size in 64 128 192 256 512 1024; do
  num=$(( total / (24 + size) ))
  for threshold in none 0; do
    echo -n "value $size B, separation threshold $threshold: "
    ./target/release/sluice bench --db "$dir" --engines hashkv --benchmarks update \
      --num "$num" --key-size 24 --value-size "$size" --separation-threshold "$threshold" \
      | grep -E ' update.P3 +:'
  done
done
