#!/usr/bin/env bash
# `sluice serve` against redis-server with Redis's own tools (issue 20):
#
#  1. redis-benchmark: its default suite of tests (issue 54: SET GET INCR
#     LPUSH RPUSH LPOP RPOP SADD HSET SPOP ZADD ZPOPMIN LRANGE_100 MSET;
#     TESTS to change it); 1000-byte values; 50 clients; pipeline 1 and 16;
#     keys drawn from KEYSPACE (the collection tests use redis-benchmark's
#     one key each: mylist, myset, myhash, myzset).
#  2. go-ycsb's redis binding (v1.0.1 from the Go module proxy, built here
#     with only its redis and basic bindings) in its default hash mode: a
#     record is a hash of YCSB's default 10 fields of 100 bytes (`HSET`
#     to insert and update one field, `HMGET` of all ten to read). Load
#     YCSB_RECORDS records (1 GiB of field data by default), then YCSB A,
#     B, C, F, D, E with the core workloads' mixes (zipfian; latest for
#     D). The redis binding has no scans, so E's scans are errors on both
#     servers and only E's inserts count.
#  3. A redis-py smoke run (scripts/redis_py_smoke.py, RESP2 and RESP3).
#
# Servers, each on a fresh directory: redis-server 7 with `appendonly yes`,
# `appendfsync everysec` and no RDB snapshots; `sluice serve` with each of
# PRESETS, `--appendfsync everysec`. Each server's peak RSS (VmHWM) is
# read after the redis-benchmark run and after the YCSB run.
#
# Usage: scripts/bench-server.sh [DATA_DIR] [OUT_DIR]
# Env: REQUESTS (200000 per redis-benchmark test), KEYSPACE (100000),
#      TESTS (redis-benchmark -t list; the default suite above), PORT (6390),
#      SKIP_PY=1 (no redis-py smoke run),
#      YCSB_RECORDS (1048576), YCSB_OPS (500000 per workload),
#      GOYCSB (a go-ycsb binary to use instead of building one),
#      PRESETS ("leveldb hashkv"), SKIP_YCSB=1, TOOLS_DIR (where go-ycsb and
#      the redis-py venv are kept; default ~/.cache/sluicedb-bench),
#      CARGO_TARGET_DIR, SLUICE (a sluice binary to run instead of this
#      tree's release build, to compare two builds).
# Writes OUT_DIR/results.tsv (server, tool, test, pipeline, ops/s, p50 ms,
# p99 ms, and for redis-benchmark's tests the server's CPU µs per
# request), OUT_DIR/rss.tsv, OUT_DIR/summary.md and the tools' logs;
# prints the summary.
set -euo pipefail

cd "$(dirname "$0")/.."
DATA=${1:-/tmp/sluice-bench-server}
OUT=${2:-bench-server-out}
REQUESTS=${REQUESTS:-200000}
KEYSPACE=${KEYSPACE:-100000}
TESTS=${TESTS:-set,get,incr,lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,zpopmin,lrange_100,mset}
YCSB_RECORDS=${YCSB_RECORDS:-1048576}
YCSB_OPS=${YCSB_OPS:-500000}
PRESETS=${PRESETS:-leveldb hashkv}
TOOLS=${TOOLS_DIR:-$HOME/.cache/sluicedb-bench}
GOYCSB_VERSION=v1.0.1
REDIS_PY_VERSION=8.1.0
PORT=${PORT:-6390}
TARGET=${CARGO_TARGET_DIR:-target}

for tool in redis-server redis-benchmark redis-cli python3; do
    command -v "$tool" >/dev/null || { echo "bench-server: $tool is needed" >&2; exit 1; }
done
mkdir -p "$OUT" "$TOOLS" "$DATA"
OUT=$(cd "$OUT" && pwd)
: >"$OUT/results.tsv"
: >"$OUT/rss.tsv"

if [[ -z ${SLUICE:-} ]]; then
    cargo build --release --locked -p sluice-cli
    SLUICE=$TARGET/release/sluice
fi

# go-ycsb from the module proxy. `go install ...@v1.0.1` needs the
# module's version list, which this proxy refuses, so the module is
# downloaded by its exact version and built in a copy; dropping the other
# bindings' imports keeps the build to seconds.
build_goycsb() {
    if [[ -n ${GOYCSB:-} ]]; then
        return
    fi
    GOYCSB=$TOOLS/go-ycsb-$GOYCSB_VERSION
    [[ -x $GOYCSB ]] && return
    command -v go >/dev/null || { echo "bench-server: go is needed for go-ycsb (or SKIP_YCSB=1)" >&2; exit 1; }
    local dir src=$TOOLS/go-ycsb-src
    dir=$(cd "$TOOLS" && go mod download -json "github.com/pingcap/go-ycsb@$GOYCSB_VERSION" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
    rm -rf "$src"
    cp -r "$dir" "$src"
    chmod -R u+w "$src"
    sed -i -E '/"github.com\/pingcap\/go-ycsb\/db\//{/db\/(redis|basic)"/!d}' "$src/cmd/go-ycsb/main.go"
    (cd "$src" && go build -o "$GOYCSB" ./cmd/go-ycsb)
}

# redis-py in a venv of its own.
setup_redis_py() {
    PY=$TOOLS/venv/bin/python
    if ! "$PY" -c "import redis; assert redis.__version__ == '$REDIS_PY_VERSION'" 2>/dev/null; then
        python3 -m venv "$TOOLS/venv"
        "$TOOLS/venv/bin/pip" install -q "redis==$REDIS_PY_VERSION"
    fi
}

SERVER_PID=
start_server() { # name dir
    local name=$1 dir=$2
    rm -rf "$dir"
    mkdir -p "$dir"
    case $name in
    redis)
        redis-server --port $PORT --dir "$dir" --appendonly yes --appendfsync everysec \
            --save "" --logfile "$dir/redis.log" &
        ;;
    sluice-*)
        "$SLUICE" serve --db "$dir" --preset "${name#sluice-}" --port $PORT \
            --appendfsync everysec 2>"$OUT/$name-serve.log" &
        ;;
    esac
    SERVER_PID=$!
    for _ in $(seq 100); do
        redis-cli -p $PORT ping >/dev/null 2>&1 && return
        sleep 0.1
    done
    echo "bench-server: $name did not start" >&2
    exit 1
}

record_rss() { # name phase
    local kib
    kib=$(awk '/^VmHWM:/ {print $2}' "/proc/$SERVER_PID/status")
    printf '%s\t%s\t%s\n' "$1" "$2" "$kib" >>"$OUT/rss.tsv"
}

stop_server() {
    redis-cli -p $PORT shutdown >/dev/null 2>&1 || true
    wait "$SERVER_PID" || true
    SERVER_PID=
}
trap '[[ -n $SERVER_PID ]] && kill $SERVER_PID 2>/dev/null; true' EXIT

# The server's CPU time so far (user + system), in clock ticks.
CLK_TCK=$(getconf CLK_TCK)
cpu_ticks() {
    awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"
}

# redis-benchmark's CSV: "test","rps","avg_latency_ms","min_latency_ms",
# "p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms".
# One test at a time, in the suite's order on one server (SPOP pops what
# SADD added, ZPOPMIN what ZADD added), so that the server's CPU time
# around each (from /proc) gives its CPU µs per request, the figure that
# stays steady on a busy machine where throughput swings. A test's own
# set-up (LRANGE's LPUSH "needed to benchmark") is left out of the rows
# but not out of its CPU time.
run_redis_benchmark() { # name
    local name=$1 p t c0 c1
    for p in 1 16; do
        : >"$OUT/$name-redis-benchmark-P$p.csv"
        for t in ${TESTS//,/ }; do
            c0=$(cpu_ticks)
            redis-benchmark -p $PORT -c 50 -n "$REQUESTS" -r "$KEYSPACE" -d 1000 -P $p \
                -t "$t" --csv >"$OUT/$name-$t-P$p.csv"
            c1=$(cpu_ticks)
            tail -n +2 "$OUT/$name-$t-P$p.csv" | tee -a "$OUT/$name-redis-benchmark-P$p.csv" |
                tr -d '"' | grep -v needed |
                awk -F, -v s="$name" -v p="$p" -v OFS='\t' \
                    -v cpu="$(awk -v d=$((c1 - c0)) -v hz="$CLK_TCK" -v n="$REQUESTS" \
                        'BEGIN {printf "%.2f", d * 1e6 / hz / n}')" \
                    '{split($1, t, " "); print s, "redis-benchmark", t[1], p, $2, $5, $7, cpu}' \
                    >>"$OUT/results.tsv"
            rm -f "$OUT/$name-$t-P$p.csv"
        done
    done
}

# The core workloads' mixes (go-ycsb's workloads/workload[a-f]).
ycsb_mix() { # workload
    case $1 in
    a) echo readproportion=0.5 updateproportion=0.5 ;;
    b) echo readproportion=0.95 updateproportion=0.05 ;;
    c) echo readproportion=1 ;;
    d) echo readproportion=0.95 insertproportion=0.05 requestdistribution=latest ;;
    e) echo readproportion=0 scanproportion=0.95 insertproportion=0.05 maxscanlength=100 ;;
    f) echo readproportion=0.5 readmodifywriteproportion=0.5 ;;
    esac
}

run_ycsb() { # name
    local name=$1 w phase kv
    local common=(-p "redis.addr=127.0.0.1:$PORT" -p redis.pool_size=50
        -p threadcount=50 -p "recordcount=$YCSB_RECORDS" -p "operationcount=$YCSB_OPS"
        -p workload=core -p fieldcount=10 -p fieldlength=100 -p readallfields=true
        -p requestdistribution=zipfian -p updateproportion=0 -p scanproportion=0
        -p insertproportion=0 -p readmodifywriteproportion=0)
    for w in load a b c f d e; do
        local mix=()
        if [[ $w == load ]]; then phase=load; else phase=run; fi
        for kv in $(ycsb_mix "$w"); do mix+=(-p "$kv"); done
        "$GOYCSB" $phase redis "${common[@]}" "${mix[@]}" >"$OUT/$name-ycsb-$w.log" 2>&1
        # "OP - Takes(s): 10.0, Count: N, OPS: X, ..., 50th(us): A, ..., 99th(us): B, ..."
        grep -E '^[A-Z_]+ +- Takes' "$OUT/$name-ycsb-$w.log" |
            awk -v s="$name" -v w="$w" -v OFS='\t' '
                { op = $1; ops = ""; p50 = ""; p99 = ""
                  for (i = 1; i <= NF; i++) {
                      if ($i == "OPS:") ops = $(i + 1)
                      if ($i == "50th(us):") p50 = $(i + 1)
                      if ($i == "99th(us):") p99 = $(i + 1) }
                  gsub(",", "", ops); gsub(",", "", p50); gsub(",", "", p99)
                  seen[op] = s "\tycsb-" w "\t" op "\t1\t" ops "\t" p50 / 1000 "\t" p99 / 1000 "\t" }
                END { for (op in seen) print seen[op] }' >>"$OUT/results.tsv"
    done
}

[[ ${SKIP_YCSB:-} == 1 ]] || build_goycsb
[[ ${SKIP_PY:-} == 1 ]] || setup_redis_py

SERVERS=(redis)
for p in $PRESETS; do SERVERS+=("sluice-$p"); done
for s in "${SERVERS[@]}"; do
    echo "== $s: redis-benchmark, redis-py"
    start_server "$s" "$DATA/$s"
    run_redis_benchmark "$s"
    if [[ ${SKIP_PY:-} != 1 ]]; then
        "$PY" scripts/redis_py_smoke.py $PORT
        "$PY" scripts/redis_py_smoke.py $PORT --resp3
    fi
    record_rss "$s" redis-benchmark
    stop_server
    if [[ ${SKIP_YCSB:-} != 1 ]]; then
        echo "== $s: go-ycsb A-F, $YCSB_RECORDS records"
        start_server "$s" "$DATA/$s"
        run_ycsb "$s"
        record_rss "$s" ycsb
        echo "   data directory: $(du -sh "$DATA/$s" | cut -f1)"
        stop_server
    fi
    rm -rf "${DATA:?}/$s"
done

python3 - "$OUT" <<'EOF' | tee "$OUT/summary.md"
import collections, sys
out = sys.argv[1]
rows = collections.defaultdict(dict)
servers = []
for line in open(f"{out}/results.tsv"):
    s, tool, test, p, rps, p50, p99, cpu = line.rstrip("\n").split("\t")
    if s not in servers:
        servers.append(s)
    rows[(tool, test, p)][s] = (float(rps or 0), float(p50 or 0), float(p99 or 0), cpu)
head = "| tool | test | pipeline | " + " | ".join(
    f"{s} ops/s (×redis) p50/p99 ms, server CPU µs/request" for s in servers) + " |"
print(head)
print("|" + "---|" * (3 + len(servers)))
for (tool, test, p), by in rows.items():
    base = by.get("redis", (0, 0, 0, ""))[0]
    cells = []
    for s in servers:
        if s not in by:
            cells.append("")
            continue
        rps, p50, p99, cpu = by[s]
        ratio = f" ({rps / base:.2f}×)" if base and s != "redis" else ""
        cpu = f", {cpu}" if cpu else ""
        cells.append(f"{rps:,.0f}{ratio} {p50:g}/{p99:g}{cpu}")
    print(f"| {tool} | {test} | {p} | " + " | ".join(cells) + " |")
print()
print("| server | phase | peak RSS MiB |")
print("|---|---|---|")
for line in open(f"{out}/rss.tsv"):
    s, phase, kib = line.split()
    print(f"| {s} | {phase} | {int(kib) / 1024:,.0f} |")
EOF
