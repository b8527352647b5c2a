#!/usr/bin/env bash
# Issue 18's benchmark (Scavenger, VLDB, §4), scaled to this machine: 24-byte keys,
# Zipf(0.99) updates, the page cache capped at a quarter of the data (../shared/tools/memcap),
# every engine opened with its defaults (the separated presets' space limit is 1.4/1.5).
#   main:    (a) the Mixed workload (values 1:1 of 16 KiB and uniform 100-512 B): load GIB,
#            then UPDATE_FACTOR x GIB of updates in one phase; (b) 1 KiB values (the update
#            workload: load GIB, then three phases of GIB of updates each); then YCSB A-F.
#            One process per engine and workload, each under its own memcap.
#   ablate:  scavenger on the Mixed workload with each mechanism off in turn (Table 1,
#            Figs. 14-15): GetKey on index-decoupled key tables, lazy read, DropCache hot/cold,
#            and inheritance edges (replaced by pointer write-back); then three of our own:
#            direct I/O for value tables off, greedy victims instead of cost-benefit, and
#            every record judged by lookups instead of by the garbage counts.
#   sweep:   scavenger on the Mixed workload under space limits 1.25, 1.5, 2.0 and none
#            (Fig. 18).
# Usage: scripts/bench-scavenger.sh [main|ablate|sweep] [DIR (default sluice-data)] [OUT
# (default scavenger.jsonl)]; `sluice bench report OUT` prints a table.
# Environment: ENGINES (default scavenger,hashkv,wisckey,rocksdb,rocksdb-blob,fjall-kv; the
# peers need the cargo features), GIB (data size, default 4), UPDATE_FACTOR (default 3),
# WORKLOADS (main's, default mixed,update,ycsb), YCSB_OPS (operations per YCSB workload,
# default 1000000), MEMCAP (path of memcap), CAP_MIB (default a quarter of GIB), EXTRA
# (more `sluice bench` flags for every run, e.g. "--drop-cache-bytes 1048576").
# CARGO_TARGET_DIR is honoured.
set -euo pipefail
mode=${1:-main}
dir=${2:-sluice-data}
out=${3:-scavenger.jsonl}
engines=${ENGINES:-scavenger,hashkv,wisckey,rocksdb,rocksdb-blob,fjall-kv}
gib=${GIB:-4}
factor=${UPDATE_FACTOR:-3}
cap_mib=${CAP_MIB:-$(python3 -c "print(int($gib * 1024 / 4))")}
source "$(dirname "$0")/bench-lib.sh"
build_sluice "$engines"
# Keys of the Mixed workload: GIB over 24-byte keys and the mean value, (16384 + 306) / 2.
read -ra extra <<< "${EXTRA:-}"
mixed_num=$(python3 -c "print(int($gib * 2**30 / (24 + 8345)))")
mixed() { # ENGINES OUT [flags...]
  local e=$1 o=$2; shift 2
  "$memcap" "$cap_mib" "$sluice" bench --quiet --db "$dir" --engines "$e" --benchmarks mixed \
    --num "$mixed_num" --update-ops $((mixed_num * factor)) --key-size 24 --out "$o" "${extra[@]}" "$@"
}
run() { # ENGINE WORKLOAD-FLAGS...
  local e=$1; shift
  "$memcap" "$cap_mib" "$sluice" bench --quiet --db "$dir" --engines "$e" \
    --dataset-gib "$gib" --value-size 1000 --key-size 24 --out "$out" "${extra[@]}" "$@"
}
case $mode in
  main)
    IFS=, read -ra workloads <<< "${WORKLOADS:-mixed,update,ycsb}"
    for w in "${workloads[@]}"; do
      echo "== $w, $gib GiB, memcap $cap_mib MiB, engines $engines" >&2
      case $w in
        mixed) each_engine "$out" mixed "$out" ;;
        update) each_engine "$out" run --benchmarks update ;;
        ycsb) each_engine "$out" run --benchmarks ycsb --ops "${YCSB_OPS:-1000000}" ;;
        *) echo "unknown workload $w (mixed, update, ycsb)" >&2; exit 2 ;;
      esac
    done ;;
  ablate)
    mixed scavenger "${out%.jsonl}-all.jsonl"
    mixed scavenger "${out%.jsonl}-no-getkey.jsonl" --index-decoupled off
    mixed scavenger "${out%.jsonl}-no-lazy-read.jsonl" --lazy-read off
    mixed scavenger "${out%.jsonl}-no-dropcache.jsonl" --drop-cache-bytes 0
    mixed scavenger "${out%.jsonl}-write-back.jsonl" --write-back on
    mixed scavenger "${out%.jsonl}-buffered-io.jsonl" --direct-io off
    mixed scavenger "${out%.jsonl}-greedy.jsonl" --victims greedy
    mixed scavenger "${out%.jsonl}-by-lookup.jsonl" --judge-by-counts off ;;
  sweep)
    for l in 1.25 1.5 2.0 off; do
      mixed scavenger "${out%.jsonl}-limit-$l.jsonl" --space-limit "$l"
    done ;;
  *) echo "unknown mode $mode (main, ablate, sweep)" >&2; exit 2 ;;
esac
