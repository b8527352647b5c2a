#!/usr/bin/env bash
# Power cuts under a replicated shard (root and loop devices needed): every write a client
# saw acknowledged must survive the loss of whatever the machines had not synced.
#
#   scripts/raft-power-loss.sh [CUTS] [DIR] [PORT]     (20, /tmp/raft-power-loss, 7500)
#
# Three nodes (scripts/cluster.sh), each with its data on an ext4 image of its own mounted
# through a loop device. Two clients write as in scripts/raft-kill-loop.sh. Every 2-4 s power
# is cut: on odd cuts to the whole group at once, on even cuts to the leader's machine alone.
# A cut shuts the machine's file system down without flushing its journal
# (EXT4_IOC_SHUTDOWN with EXT4_GOING_FLAGS_NOLOGFLUSH, what xfstests' godown does: nothing
# more reaches the disk and nothing unsynced survives) once the node is stopped (SIGSTOP),
# SIGKILLs the node, mounts the file system again and restarts the node. The time from the cut to the first write the group
# acknowledges is printed. At the end every node must hold every acknowledged key, and each
# counter lie between its acknowledged INCRs and those plus the unanswered ones.
# The nodes run under `--appendfsync ${APPENDFSYNC:-always}` (SLUICE_ARGS adds to it): under
# everysec a cut of the whole group may lose the last second of acknowledged writes
# (docs/design.md, "The log's appendfsync"), which this script then reports.
set -euo pipefail
export SLUICE_ARGS="--appendfsync ${APPENDFSYNC:-always} ${SLUICE_ARGS:-}"

cuts=${1:-20}; dir=${2:-/tmp/raft-power-loss}; port=${3:-7500}
here=$(cd "$(dirname "$0")/.." && pwd)
cluster=$here/scripts/cluster.sh
ports=("$port" $((port + 1)) $((port + 2)))
# shellcheck source=lib/redis-writes.sh
source "$here/scripts/lib/redis-writes.sh"
# shellcheck source=lib/power-cut.sh
source "$here/scripts/lib/power-cut.sh"

unmount_all() {
    for i in 1 2 3; do umount "$dir/m$i" 2>/dev/null || true; done
}
cleanup() {
    touch "$dir/stop"
    "$cluster" stop "$dir" 2>/dev/null || true
    kill $(jobs -p) 2>/dev/null || true
    sleep 1
    unmount_all
}
unmount_all
rm -rf "$dir"; mkdir -p "$dir"
trap cleanup EXIT
for i in 1 2 3; do
    truncate -s 1G "$dir/disk$i.img"
    mkfs.ext4 -q -F "$dir/disk$i.img"
    mkdir -p "$dir/m$i"
    mount -o loop "$dir/disk$i.img" "$dir/m$i"
    mkdir "$dir/m$i/db"
    ln -s "$dir/m$i/db" "$dir/n$i"
done
"$cluster" start "$dir" "$port" >/dev/null

# Power back on for node $1: the file system mounted again, the node restarted.
restore() {
    local i=$1 pid; pid=$(cat "$dir/n$i.pid")
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    umount "$dir/m$i"
    mount -o loop "$dir/disk$i.img" "$dir/m$i"
    "$cluster" restart "$dir" "$i"
}
leader_id() {
    local p
    for p in "${ports[@]}"; do
        if redis-cli -p "$p" info replication 2>/dev/null | grep -q '^raft_state:leader'; then
            echo $((p - port + 1)); return 0
        fi
    done
    return 1
}

start_writers
: >"$dir/recovery-seconds"
for k in $(seq 1 "$cuts"); do
    sleep "$((2 + RANDOM % 3))"
    if ((k % 2)); then
        ids=(1 2 3); what="the whole group"
    elif id=$(leader_id); then
        ids=("$id"); what="the leader's machine (node $id)"
    else
        echo "cut $k: no leader; waiting"; continue
    fi
    t0=$(date +%s.%N)
    for i in "${ids[@]}"; do stop_process "$(cat "$dir/n$i.pid")"; done
    for i in "${ids[@]}"; do cut_fs "$dir/m$i"; done
    for i in "${ids[@]}"; do kill -9 "$(cat "$dir/n$i.pid")" 2>/dev/null || true; done
    for i in "${ids[@]}"; do restore "$i" >/dev/null; done
    ok=""
    for _ in $(seq 1 1500); do
        if [[ $(send SET "cut:$k" x) == OK ]]; then ok=1; break; fi
        sleep 0.02
    done
    took=$(echo "$(date +%s.%N) - $t0" | bc)
    echo "$took" >>"$dir/recovery-seconds"
    if [[ -n $ok ]]; then
        echo "cut $k: $what lost power; first write acknowledged after $took s"
    else
        echo "cut $k: $what lost power; no write acknowledged within 30 s"
    fi
done
touch "$dir/stop"
sort -n "$dir/recovery-seconds" | awk '{ v[NR] = $1 } END { if (NR) printf "cut to first acknowledged write over %d cuts (restarts included): median %.2f s, max %.2f s\n", NR, v[int((NR + 1) / 2)], v[NR] }'
sleep 3
wait_quiet
check_writes
