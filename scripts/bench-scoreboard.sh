#!/usr/bin/env bash
# The scoreboard of issue 5: `update` at 2 GiB and YCSB A-F at 1 GiB, every preset and
# every peer engine in one invocation each, results appended to OUT and drawn as SVG.
# Needs the peers: the first build compiles RocksDB's C++ (about 25 minutes here).
# Usage: scripts/bench-scoreboard.sh [DIR (default sluice-data)] [OUT (default
# scoreboard.jsonl)]. Environment: ENGINES (default all), UPDATE_GIB (2), YCSB_GIB (1).
set -euo pipefail
dir=${1:-sluice-data}
out=${2:-scoreboard.jsonl}
engines=${ENGINES:-leveldb,wisckey,hashkv,rocksdb,rocksdb-blob,fjall,fjall-kv}
cargo build --release -q -p sluice-cli --features rocksdb,fjall
./target/release/sluice bench --db "$dir" --out "$out" --engines "$engines" \
  --benchmarks update --dataset-gib "${UPDATE_GIB:-2}"
./target/release/sluice bench --db "$dir" --out "$out" --engines "$engines" \
  --benchmarks ycsb --dataset-gib "${YCSB_GIB:-1}"
./target/release/sluice bench report "$out" --svg "${out%.jsonl}.svg"
