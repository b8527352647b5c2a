#!/usr/bin/env bash
# Builds `sluice` with the peer engines (RocksDB, fjall) and runs every workload tiny on
# each of them and on the hashkv preset, then checks the JSON lines: every engine has
# every phase, writing phases have a write amplification from /proc/self/io, and fjall-kv
# and rocksdb-blob really separated values (their directories hold blob files).
# The first build compiles RocksDB's C++ (about 25 minutes here).
# Usage: scripts/peer-smoke.sh [DIR (default /tmp/sluice-peer-smoke)]
set -euo pipefail
dir=${1:-/tmp/sluice-peer-smoke}
cargo build --release -q -p sluice-cli --features rocksdb,fjall
sluice="${CARGO_TARGET_DIR:-target}/release/sluice"
rm -rf "$dir" && mkdir -p "$dir"
"$sluice" bench --quiet --db "$dir" --out "$dir/results.jsonl" \
  --engines hashkv,rocksdb,rocksdb-blob,fjall,fjall-kv \
  --benchmarks fillrandom,readrandom,readseq,seekrandom,scan,update,ycsb,mixed \
  --num 3000 --ops 1000 --key-size 24 --value-size 992 > "$dir/stdout.txt"
"$sluice" bench report "$dir/results.jsonl" --svg "$dir/report.svg" > /dev/null
python3 - "$dir" <<'PY'
import json, os, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(d, "results.jsonl"))]
engines = ["hashkv", "rocksdb", "rocksdb-blob", "fjall", "fjall-kv"]
phases = {r["phase"] for r in rows if r["engine"] == "hashkv"}
bad = []
for e in engines:
    mine = {r["phase"]: r for r in rows if r["engine"] == e}
    if set(mine) != phases:
        bad.append(f"{e}: phases {sorted(set(mine) ^ phases)} differ")
    for p, r in mine.items():
        if r["user_bytes_written"] > 0 and not (r.get("proc_write_amp") or 0) > 0:
            bad.append(f"{e} {p}: no write amplification from /proc/self/io")
        if p == "readrandom" and r["found"] != r["ops"]:
            bad.append(f"{e} readrandom found {r['found']} of {r['ops']}")
def has_blobs(sub):
    for root, _, files in os.walk(os.path.join(d, sub)):
        if any(f.endswith(".blob") or "blob" in root for f in files):
            return True
    return False
for e in ["rocksdb-blob", "fjall-kv"]:
    if not has_blobs(e):
        bad.append(f"{e}: no blob files, values were not separated")
if bad:
    print("peer smoke test FAILED:\n  " + "\n  ".join(bad))
    sys.exit(1)
print(f"peer smoke test ok: {len(rows)} results from {len(engines)} engines; report in {d}/report.svg")
PY
