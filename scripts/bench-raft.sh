#!/usr/bin/env bash
# One `sluice serve` against a replicated shard of three (issue 56), with
# redis-benchmark: TESTS (set,get,incr), 1000-byte values, 50 clients,
# pipeline 1 and 16, against the one node and against the group's leader.
# Setups alternate (one node, group, one node, group... ROUNDS times each,
# fresh data each time), so that a busy machine's drift hits both alike.
# For each run: requests/s, and the servers' CPU time per request (user +
# system of every node's process, from /proc) in µs, summed and then per
# process (the group's in node order).
#
#   scripts/bench-raft.sh [DIR] [PORT]        (/tmp/raft-scratch/bench, 7600)
#
# With GOYCSB (a go-ycsb binary with its redis binding), also YCSB A (50%
# reads, 50% updates, zipfian) after a load of YCSB_RECORDS (20000) records
# in go-ycsb's hash mode (10 fields of 100 bytes: HSET, HMGET): YCSB_OPS
# (50000) operations, 50 threads.
#
# Env: N1 (requests per test at pipeline 1: 50000), N16 (at pipeline 16:
# 200000), ROUNDS (2), TESTS, KEYSPACE (100000), SLUICE (the binary;
# default target/release/sluice), SLUICE_ARGS (flags for every server, the one
# node and each group node alike: `--appendfsync always|everysec` compares like
# durability, since a group node's appendfsync is its Raft log's),
# STAGES (set: print each node's stage timings from INFO after the group's
# runs: entries committed, requests they carried, mean append (the write),
# sync (from the write to its sync's end) and apply),
# SWITCHES (set: also each process's context switches per request, from
# `perf stat -e context-switches` attached for the run).
# Prints one line per run: setup pipeline test req/s cpu-µs/req, then
# cpu-µs/req per process, then redis-benchmark's p50 and p99 latency (and
# with SWITCHES, switches per request per process) (YCSB: setup
# ycsb-load|ycsb-a OPS ops/s cpu-µs/op).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/tmp/raft-scratch/bench}; port=${2:-7600}
N1=${N1:-50000}; N16=${N16:-200000}; ROUNDS=${ROUNDS:-2}
TESTS=${TESTS:-set,get,incr}; KEYSPACE=${KEYSPACE:-100000}
export SLUICE=${SLUICE:-$here/target/release/sluice}
cluster=$here/scripts/cluster.sh
[[ -x $SLUICE ]] || { echo "no $SLUICE: cargo build --release -p sluice-cli" >&2; exit 1; }
command -v redis-benchmark >/dev/null ||
    { echo "bench-raft.sh needs redis-benchmark (Debian: apt-get install redis-tools)" >&2; exit 1; }
hz=$(getconf CLK_TCK)

# CPU ticks (user + system) of the processes whose pids are in files $@.
ticks() {
    local t=0 f s
    for f in "$@"; do
        s=$(cut -d' ' -f14,15 "/proc/$(cat "$f")/stat")
        t=$((t + ${s% *} + ${s#* }))
    done
    echo "$t"
}

# Runs the tests against port $2 at pipeline $3 with $4 requests; $1 names
# the setup; the rest are the servers' pid files.
run() {
    local setup=$1 p=$2 pipe=$3 n=$4; shift 4
    local t
    for t in ${TESTS//,/ }; do
        local c0 c1 out rps f each=() per=""
        c0=$(ticks "$@")
        for f in "$@"; do each+=("$(ticks "$f")"); done
        local sw=() pf
        if [[ -n ${SWITCHES:-} ]]; then
            for f in "$@"; do
                pf=$(mktemp)
                perf stat -e context-switches -x, -o "$pf" -p "$(cat "$f")" &
                sw+=("$!:$pf")
            done
        fi
        out=$(nice redis-benchmark -p "$p" -t "$t" -n "$n" -r "$KEYSPACE" -d 1000 -c 50 -P "$pipe" --csv 2>/dev/null | tail -1 || true)
        c1=$(ticks "$@")
        local switches=""
        if [[ -n ${SWITCHES:-} ]]; then
            local s
            for s in "${sw[@]}"; do
                kill -INT "${s%%:*}"; wait "${s%%:*}" 2>/dev/null || true
                switches+=" $(awk -F, -v n="$n" '$3 == "context-switches" { printf "%.2f", $1 / n }' "${s#*:}")"
                rm -f "${s#*:}"
            done
            switches=" switches/req$switches"
        fi
        local i=0
        for f in "$@"; do
            per+=" $(awk -v d=$(($(ticks "$f") - each[i])) -v hz="$hz" -v n="$n" 'BEGIN { printf "%.1f", d / hz * 1e6 / n }')"
            i=$((i + 1))
        done
        # --csv: "test","rps","avg_latency_ms","min","p50","p95","p99","max"
        rps=$(awk -F'"' '{ print $4 }' <<<"$out")
        local lat
        lat=$(awk -F'"' '{ printf "p50 %s p99 %s ms", $10, $14 }' <<<"$out")
        echo "$setup P$pipe $t ${rps:-?} $(awk -v d=$((c1 - c0)) -v hz="$hz" -v n="$n" 'BEGIN { printf "%.1f", d / hz * 1e6 / n }')$per $lat$switches"
    done
}

YCSB_RECORDS=${YCSB_RECORDS:-20000}; YCSB_OPS=${YCSB_OPS:-50000}
# go-ycsb load, then workload A, against port $2; $1 names the setup; the
# rest are the servers' pid files.
ycsb() {
    [[ -n ${GOYCSB:-} ]] || return 0
    local setup=$1 p=$2; shift 2
    local common=(-p "redis.addr=127.0.0.1:$p" -p redis.pool_size=50
        -p threadcount=50 -p "recordcount=$YCSB_RECORDS" -p "operationcount=$YCSB_OPS"
        -p fieldcount=10 -p fieldlength=100 -p readallfields=true -p workload=core -p readproportion=0.5
        -p updateproportion=0.5 -p scanproportion=0 -p insertproportion=0
        -p requestdistribution=zipfian)
    local phase c0 c1 ops n
    for phase in load run; do
        c0=$(ticks "$@")
        ops=$(nice "$GOYCSB" "$phase" redis "${common[@]}" 2>&1 | grep -E '^TOTAL +- Takes' | tail -1 |
            awk '{ for (i = 1; i <= NF; i++) if ($i == "OPS:") { gsub(",", "", $(i + 1)); print $(i + 1) } }' || true)
        c1=$(ticks "$@")
        n=$YCSB_OPS; [[ $phase == load ]] && n=$YCSB_RECORDS
        echo "$setup ycsb-${phase/run/a} OPS ${ops:-?} $(awk -v d=$((c1 - c0)) -v hz="$hz" -v n="$n" 'BEGIN { printf "%.1f", d / hz * 1e6 / n }')"
    done
}

for r in $(seq 1 "$ROUNDS"); do
    d=$dir/one; rm -rf "$d"; mkdir -p "$d"
    # shellcheck disable=SC2086
    "$SLUICE" serve --db "$d/db" --port "$port" ${SLUICE_ARGS:-} >"$d/log" 2>&1 &
    echo $! >"$d/pid"
    for _ in $(seq 1 300); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    run one "$port" 1 "$N1" "$d/pid"
    run one "$port" 16 "$N16" "$d/pid"
    ycsb one "$port" "$d/pid"
    kill "$(cat "$d/pid")"; wait "$(cat "$d/pid")" 2>/dev/null || true

    g=$dir/group; rm -rf "$g"
    gp=$((port + 1))
    "$cluster" start "$g" "$gp" >/dev/null
    lp=$(for q in $gp $((gp + 1)) $((gp + 2)); do
        if redis-cli -p "$q" info replication | grep -q '^raft_state:leader'; then echo "$q"; fi
    done | head -1)
    run group "$lp" 1 "$N1" "$g"/n1.pid "$g"/n2.pid "$g"/n3.pid
    run group "$lp" 16 "$N16" "$g"/n1.pid "$g"/n2.pid "$g"/n3.pid
    ycsb group "$lp" "$g"/n1.pid "$g"/n2.pid "$g"/n3.pid
    if [[ -n ${STAGES:-} ]]; then
        for q in $gp $((gp + 1)) $((gp + 2)); do
            echo "stages of the node on $q: $(redis-cli -p "$q" info replication | tr -d '\r' |
                grep -E '^raft_(state|stage_(queue|commit|append|sync|apply)|requests_proposed)' | tr '\n' ' ')"
        done
    fi
    "$cluster" stop "$g" >/dev/null
    for q in $gp $((gp + 1)) $((gp + 2)); do
        for _ in $(seq 1 300); do redis-cli -p "$q" ping >/dev/null 2>&1 || break; sleep 0.1; done
    done
done
