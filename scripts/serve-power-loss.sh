#!/usr/bin/env bash
# Power cuts under one `sluice serve` with `appendfsync always` (root and loop devices
# needed): every write a client saw acknowledged must survive the loss of whatever the
# machine had not synced.
#
#   scripts/serve-power-loss.sh [CUTS] [DIR] [PORT] [PRESET]   (20, /tmp/serve-power-loss, 7700, the default)
#
# The database lives on an ext4 image mounted through a loop device. Two clients write SET,
# INCR and RPUSH (scripts/lib/redis-writes.sh). Every 1-3 s the power is cut: the server is
# stopped (SIGSTOP, waited for), its file system shut down without flushing its journal
# (EXT4_IOC_SHUTDOWN with EXT4_GOING_FLAGS_NOLOGFLUSH), the server SIGKILLed, the image
# mounted again and the server restarted. At the end the server must hold every acknowledged
# key, and each counter and list length lie between its acknowledged writes and those plus
# the unanswered ones.
set -euo pipefail

cuts=${1:-20}; dir=${2:-/tmp/serve-power-loss}; port=${3:-7700}; preset=${4:-}
here=$(cd "$(dirname "$0")/.." && pwd)
sluice=${SLUICE:-$here/target/release/sluice}
[[ -x $sluice ]] || { echo "no $sluice: cargo build --release -p sluice-cli" >&2; exit 1; }
ports=("$port")
# shellcheck source=lib/redis-writes.sh
source "$here/scripts/lib/redis-writes.sh"
# shellcheck source=lib/power-cut.sh
source "$here/scripts/lib/power-cut.sh"

cleanup() {
    touch "$dir/stop"
    [[ -f $dir/pid ]] && kill -9 "$(cat "$dir/pid")" 2>/dev/null
    kill $(jobs -p) 2>/dev/null || true
    sleep 1
    umount "$dir/m" 2>/dev/null || true
}
umount "$dir/m" 2>/dev/null || true
rm -rf "$dir"; mkdir -p "$dir/m"
trap cleanup EXIT
truncate -s 2G "$dir/disk.img"
mkfs.ext4 -q -F "$dir/disk.img"
mount -o loop "$dir/disk.img" "$dir/m"

start() {
    local args=(serve --db "$dir/m/db" --port "$port" --appendfsync always)
    [[ -n $preset ]] && args+=(--preset "$preset")
    nohup "$sluice" "${args[@]}" >>"$dir/serve.log" 2>&1 &
    echo $! >"$dir/pid"
    disown
    for _ in $(seq 1 600); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "the server did not answer" >&2; return 1
}

start
start_writers
for k in $(seq 1 "$cuts"); do
    sleep "$((1 + RANDOM % 3))"
    pid=$(cat "$dir/pid")
    stop_process "$pid"
    cut_fs "$dir/m"
    kill -9 "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    umount "$dir/m"
    mount -o loop "$dir/disk.img" "$dir/m"
    t0=$(date +%s.%N)
    start
    echo "cut $k: restarted in $(echo "$(date +%s.%N) - $t0" | bc) s"
done
touch "$dir/stop"
sleep 2
check_writes
