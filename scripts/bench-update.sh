#!/usr/bin/env bash
# The update experiment (HashKV §4.2, USENIX ATC '18) for each preset: 24-byte keys, 992-byte
# values, NUM keys loaded then three Zipf(0.99) update phases of UPDATE_OPS updates each.
# Usage: scripts/bench-update.sh [NUM (default 2000000 = about 2 GiB)] [DIR]
# Environment: PRESETS (default "leveldb wisckey hashkv"; peers too when built with them), UPDATE_OPS (default NUM),
# EXTRA (more `sluice bench` flags, e.g. "--hotness off").
set -euo pipefail
num=${1:-2000000}
dir=${2:-sluice-data}
presets=${PRESETS:-leveldb wisckey hashkv}
ops=${UPDATE_OPS:-$num}
cargo build --release -q
# One invocation, so the comparison table covers every engine.
# shellcheck disable=SC2086
./target/release/sluice bench --db "$dir" --engines "${presets// /,}" --benchmarks update \
  --num "$num" --update-ops "$ops" --key-size 24 --value-size 992 ${EXTRA:-}
