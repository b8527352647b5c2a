#!/usr/bin/env bash
# How fast a node far behind catches up by snapshot (issue 56's target: a
# node 1 GiB behind at >= 200 MB/s on loopback).
#
#   scripts/raft-catchup.sh [MB] [DIR] [PORT]    (1100, /tmp/raft-scratch/catchup, 7700)
#
# Three nodes (scripts/cluster.sh) taking a snapshot every SNAP_ENTRIES (1000)
# entries. Node 3 is stopped; redis-benchmark writes MB million bytes of
# 1000-byte SETs of distinct keys (pipeline 16, 50 clients) to the leader;
# once the leader's snapshot covers most of it, node 3 starts again and the
# time until it applied the leader's applied index is measured. Prints the
# snapshot's size (its files), how long the leader took to build it, the
# time and the rate, node 3's own account of the install (transfer, syncs
# and swap times, from its log), the leader's own account of what it did
# after the restart (snapshots built and sent), and the bytes node 3 wrote
# and the CPU it spent since its restart (/proc/PID/io and stat).
set -euo pipefail

mb=${1:-1100}; dir=${2:-/tmp/raft-scratch/catchup}; port=${3:-7700}
here=$(cd "$(dirname "$0")/.." && pwd)
export SLUICE=${SLUICE:-$here/target/release/sluice}
export SLUICE_ARGS="${SLUICE_ARGS:-} --raft-snapshot-entries ${SNAP_ENTRIES:-1000}"
cluster=$here/scripts/cluster.sh
rm -rf "$dir"; mkdir -p "$dir"
trap '"$cluster" stop "$dir"' EXIT
"$cluster" start "$dir" "$port" >/dev/null

field() { redis-cli -p "$1" info replication | tr -d '\r' | sed -n "s/^$2://p"; }
leader=""
for p in "$port" $((port + 1)) $((port + 2)); do
    [[ $(field "$p" raft_state) == leader ]] && leader=$p
done
[[ -n $leader ]] || { echo "no leader" >&2; exit 1; }
# Node 3 must be a follower to fall behind: if it leads, stop another.
victim=3
[[ $leader == $((port + 2)) ]] && victim=2
kill "$(cat "$dir/n$victim.pid")"
sleep 1

n=$((mb * 1000))
echo "writing $n SETs of 1000 bytes to the leader on $leader"
redis-benchmark -p "$leader" -t set -n "$n" -d 1000 -r 1000000000 -c 50 -P 16 -q \
    | tr '\r' '\n' | grep -v '^$' | tail -1
target=$(field "$leader" raft_applied_index)
for _ in $(seq 1 600); do
    s=$(field "$leader" raft_snapshot_index)
    [[ -n $s && $s -ge $((target - ${SNAP_ENTRIES:-1000})) ]] && break
    sleep 0.5
done
# The leader's snapshot: a checkpoint directory, sent as an archive of its
# files; the bytes counted are the files'.
ln=$((leader - port + 1))
snap=$(ls -d "$dir/n$ln"/raft/snapshots/*.d | tail -1)
bytes=$(find "$snap" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
echo "leader applied $target, snapshot index $(field "$leader" raft_snapshot_index), $bytes bytes of files"
grep -h "built snapshot" "$dir/n$ln.log" | tail -1 || true

leader_lines=$(wc -l < "$dir/n$ln.log")
t0=$(date +%s.%N)
"$cluster" restart "$dir" "$victim" >/dev/null
vport=$((port + victim - 1))
for _ in $(seq 1 6000); do
    a=$(field "$vport" raft_applied_index 2>/dev/null || true)
    [[ -n $a && $a -ge $target ]] && break
    sleep 0.05
done
t1=$(date +%s.%N)
took=$(echo "$t1 - $t0" | bc)
echo "node $victim caught up to $target in $took s: $(echo "$bytes / $took / 1000000" | bc) MB/s of snapshot"
# Wall clock in ms, to line up with the nodes' trace (SLUICE_RAFT_TRACE=1):
# scripts/raft-catchup-split.py splits the time with it.
echo "restarted at ms $(echo "$t0 * 1000 / 1" | bc), caught up at ms $(echo "$t1 * 1000 / 1" | bc)"
grep -h "installed snapshot" "$dir/n$victim.log" || true
tail -n +$((leader_lines + 1)) "$dir/n$ln.log" | grep -E "built snapshot|sent snapshot" || true
# What the caught-up node wrote and spent since its restart: write_bytes
# (bytes it dirtied in the page cache, bound for the disk), wchar (bytes
# passed to write calls), and its CPU time (user + system).
pid=$(cat "$dir/n$victim.pid")
if [[ -r /proc/$pid/io ]]; then
    wb=$(sed -n 's/^write_bytes: //p' "/proc/$pid/io")
    wc=$(sed -n 's/^wchar: //p' "/proc/$pid/io")
    read -r ut st < <(awk '{print $14, $15}' "/proc/$pid/stat")
    cpu=$(echo "scale=2; ($ut + $st) / $(getconf CLK_TCK)" | bc)
    echo "node $victim since its restart: write_bytes $wb, wchar $wc, CPU $cpu s (snapshot files $bytes bytes); load $(cut -d' ' -f1-3 /proc/loadavg)"
fi
