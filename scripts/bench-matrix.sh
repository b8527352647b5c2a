#!/usr/bin/env bash
# The benchmark matrix (issue 53): every value size, workload and engine, in memory and
# under a memory cap of a quarter of the data, each engine in its own process. Results go
# to OUTDIR/mem.jsonl and OUTDIR/cap.jsonl (one JSON line per phase, as `sluice bench
# --out` writes them) and the tables to OUTDIR/matrix.md (scripts/matrix-table.py).
#
# Usage: scripts/bench-matrix.sh [OUTDIR (default matrix)]
# Environment:
#   ENGINES    sluicedb presets and peers (default: `default`, sluicedb as
#              Options::default() opens it, and the five presets; with PEERS=1 also
#              rocksdb, rocksdb-blob and fjall-kv, whose first build compiles RocksDB's
#              C++, about 25 minutes here)
#   VALUES     value sizes in bytes, or `mixed` for Scavenger's Mixed workload (values 1:1
#              of 16 KiB and 100-512 B): default "104 1000 4072 16360 mixed", pairs of
#              128 B, 1 KiB, 4 KiB and 16 KiB with the 24-byte keys
#   WORKLOADS  default "update churn ycsb scan" (each loads first: load is their P0 /
#              ycsb.load phase); scans are `scan` (100 pairs each)
#   REGIMES    default "mem cap": the page cache unbounded, then capped at a quarter of the
#              data with ../shared/tools/memcap (or $MEMCAP)
#   GIB        data size in GiB (default 1); OPS operations of the YCSB and scan phases
#              (default 300000)
#   DIR        where the databases go (default OUTDIR/db)
# A full run (8 engines, 5 sizes, 4 workloads, 2 regimes) takes hours at 1 GiB; narrow it
# with the variables above, e.g. VALUES=1000 WORKLOADS=update REGIMES=mem for one row.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench-lib.sh
out=${1:-matrix}
mkdir -p "$out"
engines=${ENGINES:-default,leveldb,wisckey,hashkv,scavenger,unikv}
if [ "${PEERS:-0}" = 1 ] && [ -z "${ENGINES:-}" ]; then
  engines+=",rocksdb,rocksdb-blob,fjall-kv"
fi
dir=${DIR:-$out/db}
gib=${GIB:-1}
ops=${OPS:-300000}
cap_mib=$(python3 -c "print(int($gib * 1024 / 4))")
build_sluice "$engines"

run() { # REGIME ENGINE VALUE WORKLOAD
  local regime=$1 engine=$2 value=$3 workload=$4 args=()
  case $value in
    mixed) args=(--benchmarks mixed) ;;
    *) args=(--benchmarks "$workload" --value-size "$value") ;;
  esac
  case $workload in ycsb|scan) args+=(--ops "$ops") ;; esac
  local cmd=("$sluice" bench --quiet --db "$dir" --engines "$engine" --dataset-gib "$gib"
    --out "$out/$regime.jsonl" "${args[@]}")
  echo "== $regime $engine value=$value $workload ($(date +%H:%M:%S))" >&2
  if [ "$regime" = cap ]; then
    "$memcap" "$cap_mib" "${cmd[@]}" >/dev/null || echo "== $engine failed (exit $?)" >&2
  else
    "${cmd[@]}" >/dev/null || echo "== $engine failed (exit $?)" >&2
  fi
  rm -rf "${dir:?}"
}

for regime in ${REGIMES:-mem cap}; do
  for value in ${VALUES:-104 1000 4072 16360 mixed}; do
    for workload in ${WORKLOADS:-update churn ycsb scan}; do
      # Mixed is a workload of its own (load and three update phases).
      if [ "$value" = mixed ] && [ "$workload" != update ]; then continue; fi
      for e in ${engines//,/ }; do
        run "$regime" "$e" "$value" "$workload"
      done
    done
  done
done
python3 scripts/matrix-table.py "$out"/*.jsonl > "$out/matrix.md"
echo "tables: $out/matrix.md" >&2
