# Shared by scripts/raft-kill-loop.sh, scripts/raft-power-loss.sh and
# scripts/serve-power-loss.sh: two clients that log what a server or a replicated shard
# acknowledged, and the check that every node holds it. The caller sets $dir (logs go there;
# the file $dir/stop ends the clients) and the array $ports (the nodes' Redis ports).

# One command with redirects followed; tries each node until one answers.
send() {
    local p r
    for p in "${ports[@]}"; do
        if r=$(timeout 15 redis-cli -c -p "$p" "$@" 2>/dev/null) && [[ -n $r && $r != *CLUSTERDOWN* && $r != *TRYAGAIN* && $r != *"Could not connect"* ]]; then
            echo "$r"; return 0
        fi
    done
    return 1
}

# Writer $1: SET of unique keys, INCR of a counter of its own and RPUSH to a list of its own,
# each logged as acknowledged or unanswered.
writer() {
    local w=$1 i=0 r
    while [[ ! -f $dir/stop ]]; do
        i=$((i + 1))
        if r=$(send SET "w$w:$i" "v$i") && [[ $r == OK ]]; then
            echo "w$w:$i" >>"$dir/acked-keys-$w"
        else
            echo "w$w:$i" >>"$dir/unknown-keys-$w"
        fi
        if r=$(send INCR "counter:$w") && [[ $r =~ ^[0-9]+$ ]]; then
            echo 1 >>"$dir/acked-incr-$w"
        else
            echo 1 >>"$dir/unknown-incr-$w"
        fi
        if r=$(send RPUSH "list:$w" "$i") && [[ $r =~ ^[0-9]+$ ]]; then
            echo 1 >>"$dir/acked-push-$w"
        else
            echo 1 >>"$dir/unknown-push-$w"
        fi
    done
}

# Starts writers 1 and 2 in the background.
start_writers() {
    for w in 1 2; do
        : >"$dir/acked-keys-$w"; : >"$dir/acked-incr-$w"; : >"$dir/unknown-incr-$w"
        : >"$dir/acked-push-$w"; : >"$dir/unknown-push-$w"
        writer "$w" &
    done
}

# Waits until every node reports the same applied index.
wait_quiet() {
    local now
    for _ in $(seq 1 300); do
        now=$(for p in "${ports[@]}"; do redis-cli -p "$p" info replication | grep '^raft_applied_index' ; done | sort -u | wc -l)
        [[ $now == 1 ]] && return 0
        sleep 0.2
    done
    echo "nodes did not converge" >&2; return 1
}

# Every node must hold every acknowledged key, and each counter (and list length) lie between
# its acknowledged INCRs (RPUSHes) and those plus the unanswered ones. Prints a line per node
# and writer; returns 1 on a failure.
check_writes() {
    local fail=0 p w n missing acked unknown c pushed punknown len status
    for p in "${ports[@]}"; do
        for w in 1 2; do
            n=$(wc -l <"$dir/acked-keys-$w")
            missing=$({ echo READONLY; sed 's/^/GET /' "$dir/acked-keys-$w"; } | redis-cli -p "$p" | tail -n +2 | grep -c '^$' || true)
            acked=$(wc -l <"$dir/acked-incr-$w"); unknown=$(wc -l <"$dir/unknown-incr-$w")
            c=$(printf 'READONLY\nGET counter:%s\n' "$w" | redis-cli -p "$p" | tail -1)
            c=${c:-0}
            pushed=$(wc -l <"$dir/acked-push-$w"); punknown=$(wc -l <"$dir/unknown-push-$w")
            len=$(printf 'READONLY\nLLEN list:%s\n' "$w" | redis-cli -p "$p" | tail -1)
            len=${len:-0}
            status=ok
            if [[ $missing != 0 ]] || ((c < acked || c > acked + unknown)) \
                || ((len < pushed || len > pushed + punknown)); then status=FAILED; fail=1; fi
            echo "port $p writer $w: $n acknowledged keys, $missing missing; counter $c for $acked acknowledged INCRs (+$unknown unanswered); list of $len for $pushed acknowledged RPUSHes (+$punknown): $status"
        done
    done
    return $fail
}
