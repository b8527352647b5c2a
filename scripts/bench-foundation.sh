#!/usr/bin/env bash
# The measurement of issue 2: fillrandom then readrandom (single thread) at
# 1,000,000 pairs of 16-byte keys and 1000-byte values (about 1 GiB), plus
# the same at 100-byte values. Usage: scripts/bench-foundation.sh [DB_DIR]
set -euo pipefail
dir=${1:-sluice-data}
cargo build --release -q
for v in 1000 100; do
  ./target/release/sluice bench --db "$dir" --engines leveldb --benchmarks fillrandom,readrandom \
    --num 1000000 --value-size "$v" --key-size 16
done
