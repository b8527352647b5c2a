#!/usr/bin/env bash
# The update experiment (HashKV §4.2, seed 000) for each preset (leveldb, wisckey, hashkv): 24-byte keys,
# 992-byte values, NUM keys loaded then three Zipf(0.99) update phases.
# Usage: scripts/bench-update.sh [NUM (default 2000000 = about 2 GiB)] [DIR]
set -euo pipefail
num=${1:-2000000}
dir=${2:-sluice-data}
cargo build --release -q
for preset in leveldb wisckey hashkv; do
  ./target/release/sluice bench --db "$dir" --preset "$preset" --benchmarks update \
    --num "$num" --key-size 24 --value-size 992
done
