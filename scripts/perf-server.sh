#!/usr/bin/env bash
# Where `sluice serve` spends its CPU under one redis-benchmark test (issue
# 54): starts a fresh server, runs the tests before TEST that fill its keys
# (ZPOPMIN pops what ZADD added, SPOP what SADD added), then records the
# server with `perf record -g` through TEST alone and prints the report's
# top entries, with the server's CPU µs per request (utime + stime from
# /proc) for that test.
#
# Usage: scripts/perf-server.sh TEST [OUT_DIR]
# Env: SLUICE (the binary; default this tree's release build, which wants
#      debug info: CARGO_PROFILE_RELEASE_DEBUG=true cargo build --release
#      -p sluice-cli), PRESET (adaptive), REQUESTS (300000), KEYSPACE
#      (100000), PIPELINE (16), FILL (the tests run before TEST; default
#      zadd before zpopmin, sadd before spop), PORT (6391).
set -euo pipefail
# shellcheck source=lib/server.sh
. "$(dirname "$0")/lib/server.sh"

cd "$(dirname "$0")/.."
TEST=${1:?usage: scripts/perf-server.sh TEST [OUT_DIR]}
OUT=${2:-perf-server-out}
SLUICE=${SLUICE:-${CARGO_TARGET_DIR:-target}/release/sluice}
PRESET=${PRESET:-adaptive}
REQUESTS=${REQUESTS:-300000}
KEYSPACE=${KEYSPACE:-100000}
PIPELINE=${PIPELINE:-16}
PORT=${PORT:-6391}
case $TEST in
zpopmin) FILL=${FILL-zadd} ;;
spop) FILL=${FILL-sadd} ;;
*) FILL=${FILL-} ;;
esac
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
DIR=$(mktemp -d)
"$SLUICE" serve --db "$DIR/db" --preset "$PRESET" --port "$PORT" \
    --appendfsync everysec 2>"$OUT/serve.log" &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DIR"' EXIT
wait_for_server "$PORT"
bench() { # test
    redis-benchmark -p "$PORT" -c 50 -n "$REQUESTS" -r "$KEYSPACE" -d 1000 -P "$PIPELINE" \
        -t "$1" --csv | tail -n +2
}
for t in ${FILL//,/ }; do bench "$t" >/dev/null; done
ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
c0=$(ticks)
perf record -g -p "$PID" -o "$OUT/$TEST.perf" 2>"$OUT/perf-record.log" &
PERF=$!
sleep 0.5
bench "$TEST" | tee "$OUT/$TEST.csv"
kill -INT $PERF
wait $PERF || true
c1=$(ticks)
echo "loadavg: $(cat /proc/loadavg)"
awk -v d=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v n="$REQUESTS" \
    'BEGIN {printf "server CPU: %.2f us/request (perf running)\n", d * 1e6 / hz / n}'
perf report -i "$OUT/$TEST.perf" --no-children --percent-limit 1.5 --stdio 2>/dev/null |
    grep -E '^ +[0-9]' | head -40
