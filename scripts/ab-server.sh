#!/usr/bin/env bash
# A/B of two `sluice` binaries as servers, in alternating runs (A, B, A, B...): each run
# starts a fresh `sluice serve` (PRESET, `appendfsync everysec`), runs the redis-benchmark
# TESTS in order on it (`-c 50 -n REQUESTS -r 100000 -d 1000 -P PIPELINE`), and prints per
# test the ops/s, p99 ms and the server's CPU µs per request (utime + stime from /proc),
# with the load average.
# Usage: scripts/ab-server.sh BIN_A BIN_B [PAIRS (default 2)]
# Env: TESTS (set,get,incr,zadd), REQUESTS (200000), PIPELINE (16), PRESET (adaptive),
#      PORT (6393).
set -euo pipefail
# shellcheck source=lib/server.sh
. "$(dirname "$0")/lib/server.sh"
a=$1 b=$2 pairs=${3:-2}
TESTS=${TESTS:-set,get,incr,zadd}
REQUESTS=${REQUESTS:-200000}
PIPELINE=${PIPELINE:-16}
PRESET=${PRESET:-adaptive}
PORT=${PORT:-6393}
HZ=$(getconf CLK_TCK)
for i in $(seq "$pairs"); do
    for side in A B; do
        bin=$a
        [[ $side == B ]] && bin=$b
        dir=$(mktemp -d)
        "$bin" serve --db "$dir/db" --preset "$PRESET" --port "$PORT" \
            --appendfsync everysec 2>/dev/null &
        pid=$!
        wait_for_server "$PORT"
        for t in ${TESTS//,/ }; do
            c0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
            row=$(redis-benchmark -p "$PORT" -c 50 -n "$REQUESTS" -r 100000 -d 1000 \
                -P "$PIPELINE" -t "$t" --csv | tail -n 1 | tr -d '"')
            c1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
            echo "$row" | awk -F, -v s="$side" -v i="$i" -v d=$((c1 - c0)) -v hz="$HZ" \
                -v n="$REQUESTS" -v load="$(cut -d' ' -f1 /proc/loadavg)" \
                '{printf "pair %s %s %-8s %9.0f ops/s  p99 %7.3f ms  %6.2f us CPU/req  load %s\n",
                  i, s, $1, $2, $7, d * 1e6 / hz / n, load}'
        done
        redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
        wait "$pid" || true
        rm -rf "$dir"
    done
done
