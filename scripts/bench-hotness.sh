#!/usr/bin/env bash
# HashKV's Experiment 6 (HashKV, USENIX ATC '18, §4.3): the update workload under the hashkv preset with
# hotness awareness (the cold log) on and off, in one invocation.
# Usage: scripts/bench-hotness.sh [NUM (default 2000000 = about 2 GiB)] [DIR]
set -euo pipefail
num=${1:-2000000}
dir=${2:-sluice-data}
cargo build --release -q
for h in on off; do
  ./target/release/sluice bench --db "$dir" --engines hashkv --benchmarks update \
    --num "$num" --key-size 24 --value-size 992 --hotness "$h"
done
