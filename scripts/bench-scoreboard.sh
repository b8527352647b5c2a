#!/usr/bin/env bash
# The scoreboard of issue 5: `update` at 2 GiB and YCSB A-F at 1 GiB, every preset and
# every peer engine in one invocation each, results appended to OUT and drawn as SVG.
# Needs the peers: the first build compiles RocksDB's C++ (about 25 minutes here).
# Usage: scripts/bench-scoreboard.sh [DIR (default sluice-data)] [OUT (default
# scoreboard.jsonl)]. Environment: ENGINES (default all), UPDATE_GIB (2), YCSB_GIB (1),
# YCSB_OPS (300000 operations per YCSB workload; E's scans dominate the run time).
# CARGO_TARGET_DIR is honoured, so a peer build kept apart from the default one is reused.
set -euo pipefail
dir=${1:-sluice-data}
out=${2:-scoreboard.jsonl}
engines=${ENGINES:-leveldb,wisckey,hashkv,rocksdb,rocksdb-blob,fjall,fjall-kv}
cargo build --release -q -p sluice-cli --features rocksdb,fjall
sluice="${CARGO_TARGET_DIR:-target}/release/sluice"
"$sluice" bench --db "$dir" --out "$out" --engines "$engines" \
  --benchmarks update --dataset-gib "${UPDATE_GIB:-2}"
"$sluice" bench --db "$dir" --out "$out" --engines "$engines" \
  --benchmarks ycsb --dataset-gib "${YCSB_GIB:-1}" --ops "${YCSB_OPS:-300000}"
"$sluice" bench report "$out" --svg "${out%.jsonl}.svg"
