#!/usr/bin/env bash
# Issue 19's benchmark (UniKV, ICDE '20, §IV), scaled to this machine: 24-byte keys, 1 KiB
# values, Zipf(0.99) where the workload draws keys, the page cache capped at about a sixth
# of the data (../shared/tools/memcap), every engine opened with its defaults.
#   exp1:  load GIB (fillrandom), then random reads, the update experiment's phases and
#          scans (Exp. 1); `sluice bench report` gives ops/s, write and space amplification.
#   mix:   read:write 30:70, 50:50 and 70:30 on GIB of loaded data (Exp. 2, `readwrite`).
#   ycsb:  YCSB A-F on GIB of loaded data (Exp. 3).
# Exp. 10 (memory): every phase's peak resident memory and the most the hash indexes (for
# RocksDB: its table readers) held, in the report's memory table (`docs/bench.md`).
# Usage: scripts/bench-unikv.sh [exp1|mix|ycsb] [DIR (default sluice-data)] [OUT (default
# unikv.jsonl)]. Environment: ENGINES (default unikv,leveldb,hashkv,rocksdb,rocksdb-blob,fjall;
# the peers need the cargo features), GIB (default 5), CAP_MIB (default GIB/6), MEMCAP (path
# of memcap), OPS (operations per readwrite phase, default 1000000), READ_OPS (reads and
# scans of exp1, default 100000), UPDATE_OPS (updates per phase of exp1, default 2000000),
# YCSB_OPS (operations per YCSB workload, default 200000), EXTRA (more `sluice bench`
# flags). CARGO_TARGET_DIR is honoured.
set -euo pipefail
mode=${1:-exp1}
dir=${2:-sluice-data}
out=${3:-unikv.jsonl}
engines=${ENGINES:-unikv,leveldb,hashkv,rocksdb,rocksdb-blob,fjall}
gib=${GIB:-5}
cap_mib=${CAP_MIB:-$(python3 -c "print(int($gib * 1024 / 6))")}
source "$(dirname "$0")/bench-lib.sh"
build_sluice "$engines"
read -ra extra <<< "${EXTRA:-}"
num=$(python3 -c "print(int($gib * 2**30 / (24 + 1000)))")
# One process per engine, each under its own cap: an engine the cgroup kills (fjall's
# load once went past 853 MiB of anonymous memory) leaves the others to run, and no
# engine starts with memory the one before it left to the allocator.
run() { local e=$1; shift; "$memcap" "$cap_mib" "$sluice" bench --quiet --db "$dir" \
  --engines "$e" --num "$num" --value-size 1000 --key-size 24 --out "$out" "${extra[@]}" "$@"; }
exp1() {
  run "$1" --benchmarks fillrandom,readrandom,scan --scan-length 50 --ops "${READ_OPS:-100000}" &&
    run "$1" --benchmarks update --dataset-gib "$gib" --update-ops "${UPDATE_OPS:-2000000}"
}
mix() { run "$1" --benchmarks readwrite --dataset-gib "$gib" --ops "${OPS:-1000000}"; }
ycsb() { run "$1" --benchmarks ycsb --dataset-gib "$gib" --ops "${YCSB_OPS:-200000}"; }
case $mode in
  exp1|mix|ycsb)
    echo "== $mode, $gib GiB, memcap $cap_mib MiB, engines $engines" >&2
    each_engine "$out" "$mode" ;;
  *) echo "unknown mode $mode (exp1, mix, ycsb)" >&2; exit 2 ;;
esac
