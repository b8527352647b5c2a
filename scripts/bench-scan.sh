#!/usr/bin/env bash
# Range scans over separated values (WiscKey, FAST '16, §3.3.1): load NUM pairs of
# 4 KiB values in random order, then scan them all (`readseq`, a `Range`)
# from a cold page cache, without and with value read-ahead, and the same
# scan on the leveldb preset (values inline, sorted).
# Usage: scripts/bench-scan.sh [NUM (default 250000 = about 1 GiB)] [DIR]
set -euo pipefail
num=${1:-250000}
dir=${2:-sluice-data}
cargo build --release -q
bench() { ./target/release/sluice bench --db "$dir" --num "$num" --value-size 4096 "$@"; }
for preset in leveldb wisckey; do
  bench --engines "$preset" --benchmarks fillrandom | grep -E ' fillrandom +:'
  for threads in 0 4 16; do
    scripts/evict-page-cache.py "$dir/$preset"
    echo -n "preset $preset, cold cache, scan-prefetch-threads $threads: "
    bench --engines "$preset" --benchmarks readseq --use-existing \
      --scan-prefetch-threads "$threads" | grep -E ' readseq +:'
  done
done
