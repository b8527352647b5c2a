#!/usr/bin/env bash
# A replicated shard of three `sluice serve` nodes on loopback.
#
#   scripts/cluster.sh start DIR PORT   nodes 1-3: Redis ports PORT..PORT+2, Raft ports
#                                       PORT+10000..PORT+10002, data in DIR/n1..n3
#   scripts/cluster.sh kill-leader DIR  SIGKILL the leader; prints its Redis port
#   scripts/cluster.sh restart DIR ID   start node ID again (after a kill)
#   scripts/cluster.sh status DIR       each node's view of the group
#   scripts/cluster.sh stop DIR         stop every node (SIGTERM)
#
# SLUICE (default: target/release/sluice, else target/debug/sluice) names the
# binary; SLUICE_ARGS adds flags to every node (e.g. "--preset hashkv").
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
sluice=${SLUICE:-}
if [[ -z $sluice ]]; then
    for b in "$here/target/release/sluice" "$here/target/debug/sluice"; do
        if [[ -x $b ]]; then sluice=$b; break; fi
    done
fi
[[ -n $sluice ]] || { echo "no sluice binary: cargo build --release -p sluice-cli" >&2; exit 1; }

usage() { sed -n '2,12p' "$0" >&2; exit 2; }

# Starts node $2 of the group in $1 (ports from $1/port); $3: --join address.
start_node() {
    local dir=$1 id=$2 join=${3:-}
    local base; base=$(cat "$dir/port")
    local rport=$((base + id - 1)) aport=$((base + 10000 + id - 1))
    local args=(serve --db "$dir/n$id" --port "$rport" --raft-id "$id"
        --raft-addr "127.0.0.1:$aport")
    [[ -n $join ]] && args+=(--join "$join")
    # shellcheck disable=SC2086
    nohup "$sluice" "${args[@]}" ${SLUICE_ARGS:-} >>"$dir/n$id.log" 2>&1 &
    echo $! >"$dir/n$id.pid"
}

# Waits until the Redis port $1 answers PING.
wait_port() {
    for _ in $(seq 1 600); do
        if redis-cli -p "$1" ping >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    echo "port $1 did not answer" >&2
    return 1
}

# Prints the Redis port of the node that leads, if any answers so.
leader_port() {
    local dir=$1 base; base=$(cat "$dir/port")
    for id in 1 2 3; do
        local p=$((base + id - 1))
        if redis-cli -p "$p" info replication 2>/dev/null | grep -q '^raft_state:leader'; then
            echo "$p"; return 0
        fi
    done
    return 1
}

cmd=${1:-}; dir=${2:-}
[[ -n $cmd && -n $dir ]] || usage
case $cmd in
start)
    port=${3:-}; [[ -n $port ]] || usage
    mkdir -p "$dir"
    echo "$port" >"$dir/port"
    start_node "$dir" 1
    wait_port "$port"
    # Nodes 2 and 3 return from their start once admitted as voters.
    start_node "$dir" 2 "127.0.0.1:$((port + 10000))"
    start_node "$dir" 3 "127.0.0.1:$((port + 10000))"
    wait_port $((port + 1))
    wait_port $((port + 2))
    echo "nodes on $port $((port + 1)) $((port + 2)); leader on $(leader_port "$dir")"
    ;;
kill-leader)
    lp=$(leader_port "$dir") || { echo "no leader" >&2; exit 1; }
    id=$((lp - $(cat "$dir/port") + 1))
    kill -9 "$(cat "$dir/n$id.pid")"
    echo "$lp"
    ;;
restart)
    id=${3:-}; [[ -n $id ]] || usage
    start_node "$dir" "$id"
    wait_port $(($(cat "$dir/port") + id - 1))
    ;;
status)
    base=$(cat "$dir/port")
    for id in 1 2 3; do
        p=$((base + id - 1))
        echo "== node $id (port $p)"
        "$sluice" cluster status --addr "127.0.0.1:$p" 2>/dev/null | grep -E '^(role|raft_)' \
            || echo "down"
    done
    ;;
stop)
    for id in 1 2 3; do
        f=$dir/n$id.pid
        if [[ -f $f ]]; then kill "$(cat "$f")" 2>/dev/null || true; rm -f "$f"; fi
    done
    ;;
*) usage ;;
esac
