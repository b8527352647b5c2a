#!/usr/bin/env bash
# System calls, wake-ups and CPU per request of one server under redis-benchmark
# tests (issue 54): starts a fresh `sluice serve` (or, with REDIS=1, a
# redis-server with `appendonly yes`, `appendfsync everysec`, no RDB), then for
# each TEST runs `redis-benchmark -c 50 -n REQUESTS -r 100000 -d 1000 -P
# PIPELINE -t TEST` with `perf stat` attached to the server, and prints per
# request: its CPU (utime + stime from /proc, all threads), context switches,
# CPU migrations, system calls, and the reads, writes, recvfroms, sendtos,
# epoll_waits, futexes and preads among them, with the load average.
# The tests run in order on one server (GET after SET finds its keys).
#
# Usage: scripts/stat-server.sh TEST[,TEST...]
# Env: SLUICE (the binary; default this tree's release build), REDIS (1: run
#      redis-server instead), PRESET (adaptive), REQUESTS (100000), PIPELINE
#      (1), PORT (6394).
set -euo pipefail
# shellcheck source=lib/server.sh
. "$(dirname "$0")/lib/server.sh"

cd "$(dirname "$0")/.."
TESTS=${1:?usage: scripts/stat-server.sh TEST[,TEST...]}
SLUICE=${SLUICE:-${CARGO_TARGET_DIR:-target}/release/sluice}
PRESET=${PRESET:-adaptive}
REQUESTS=${REQUESTS:-100000}
PIPELINE=${PIPELINE:-1}
PORT=${PORT:-6394}
HZ=$(getconf CLK_TCK)
DIR=$(mktemp -d)
if [[ ${REDIS:-0} == 1 ]]; then
    redis-server --port "$PORT" --dir "$DIR" --appendonly yes --appendfsync everysec \
        --save '' >/dev/null 2>&1 &
else
    "$SLUICE" serve --db "$DIR/db" --preset "$PRESET" --port "$PORT" \
        --appendfsync everysec 2>/dev/null &
fi
PID=$!
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true; wait $PID 2>/dev/null; rm -rf "$DIR"' EXIT
wait_for_server "$PORT"
events=task-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter
for s in read write recvfrom sendto epoll_wait futex pread64; do
    events+=",syscalls:sys_enter_$s"
done
for t in ${TESTS//,/ }; do
    perf stat -x, -e "$events" -p "$PID" -o "$DIR/stat" &
    STAT=$!
    sleep 0.3
    c0=$(awk '{print $14 + $15}' "/proc/$PID/stat")
    row=$(redis-benchmark -p "$PORT" -c 50 -n "$REQUESTS" -r 100000 -d 1000 -P "$PIPELINE" \
        -t "$t" --csv | tail -n 1 | tr -d '"')
    c1=$(awk '{print $14 + $15}' "/proc/$PID/stat")
    kill -INT $STAT
    wait $STAT || true
    echo "$row" | awk -F, -v d=$((c1 - c0)) -v hz="$HZ" -v n="$REQUESTS" \
        -v load="$(cut -d' ' -f1-3 /proc/loadavg)" \
        '{printf "%-6s P%s %9.0f ops/s  p99 %7.3f ms  %6.2f us CPU/req  load %s\n",
          $1, "'"$PIPELINE"'", $2, $7, d * 1e6 / hz / n, load}'
    awk -F, -v n="$REQUESTS" '$1 ~ /^[0-9.]+$/ && $3 != "task-clock" {
        name = $3; sub(/^(raw_)?syscalls:sys_enter_?/, "", name);
        if (name == "") name = "syscalls";
        printf "  %s %.3f", name, $1 / n } END { print "  (per request)" }' "$DIR/stat"
done
