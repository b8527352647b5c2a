#!/usr/bin/env bash
# Kills a replicated shard's leader again and again under load, then checks
# that every write a client saw acknowledged is on every node, each
# acknowledged INCR counted exactly once.
#
#   scripts/raft-kill-loop.sh [KILLS] [DIR] [PORT]     (100, /tmp/raft-kill-loop, 7400)
#
# Three nodes (scripts/cluster.sh). Two writers run SET of unique keys and INCR
# of a counter of their own through redis-cli -c (which follows -MOVED), and
# log what was acknowledged and what got no answer; redis-benchmark adds SET
# load, and with GOYCSB (a go-ycsb binary) so does go-ycsb's workload A in
# hash mode (HSET/HMGET of 10 fields of 100 bytes) against each node in turn
# (it follows no -MOVED: its errors are ignored; it is load, not checked). Every 2-4 s the leader is SIGKILLed and restarted; the time from the
# kill to the first write the survivors acknowledge is noted, and its median,
# 90th percentile and maximum printed. At the end each node must hold every
# acknowledged key, and each counter must lie between its acknowledged INCRs
# and those plus the unanswered ones.
set -euo pipefail

kills=${1:-100}; dir=${2:-/tmp/raft-kill-loop}; port=${3:-7400}
here=$(cd "$(dirname "$0")/.." && pwd)
cluster=$here/scripts/cluster.sh
rm -rf "$dir"; mkdir -p "$dir"
trap '"$cluster" stop "$dir"; kill $(jobs -p) 2>/dev/null || true' EXIT
"$cluster" start "$dir" "$port" >/dev/null

ports=("$port" $((port + 1)) $((port + 2)))

# shellcheck source=lib/redis-writes.sh
source "$here/scripts/lib/redis-writes.sh"

: >"$dir/failover-seconds"
start_writers
(while [[ ! -f $dir/stop ]]; do
    for p in "${ports[@]}"; do
        timeout 10 redis-benchmark -p "$p" -t set -n 2000 -d 1000 -c 10 -q >/dev/null 2>&1 || true
    done
done) &

if [[ -n ${GOYCSB:-} ]]; then
    (while [[ ! -f $dir/stop ]]; do
        for p in "${ports[@]}"; do
            timeout 10 "$GOYCSB" run redis -p "redis.addr=127.0.0.1:$p" -p threadcount=16 \
                -p recordcount=10000 -p operationcount=5000 -p fieldcount=10 -p fieldlength=100 \
                -p workload=core -p readproportion=0.5 -p updateproportion=0.5 \
                -p requestdistribution=zipfian >>"$dir/ycsb.log" 2>&1 || true
        done
    done) &
fi

for k in $(seq 1 "$kills"); do
    sleep "$((2 + RANDOM % 3))"
    if lp=$("$cluster" kill-leader "$dir" 2>/dev/null); then
        id=$((lp - port + 1))
        t0=$(date +%s.%N); np=""
        # Failover ends at the first write the survivors acknowledge (a
        # client trying each of them, following redirects).
        for _ in $(seq 1 600); do
            for p in "${ports[@]}"; do
                [[ $p == "$lp" ]] && continue
                if [[ $(timeout 5 redis-cli -c -p "$p" SET "failover:$k" x 2>/dev/null) == OK ]]; then np=$p; break; fi
            done
            [[ -n $np ]] && break
            sleep 0.02
        done
        t1=$(date +%s.%N)
        took=$(echo "$t1 - $t0" | bc)
        echo "$took" >>"$dir/failover-seconds"
        echo "kill $k: leader on $lp (node $id) killed at $(echo "$t0 * 1000 / 1" | bc) ms; first write acknowledged through ${np:-none} after $took s"
        "$cluster" restart "$dir" "$id"
    else
        echo "kill $k: no leader to kill; waiting"
    fi
done
touch "$dir/stop"
sort -n "$dir/failover-seconds" | awk '{ v[NR] = $1 } END { if (NR) printf "failover (kill to first acknowledged write) over %d kills: median %.2f s, 90th percentile %.2f s, max %.2f s\n", NR, v[int((NR + 1) / 2)], v[int(NR * 0.9 + 0.999)], v[NR] }'
sleep 3
wait_quiet

check_writes
