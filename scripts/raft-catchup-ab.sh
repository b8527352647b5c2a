#!/usr/bin/env bash
# Builds alternated under scripts/raft-catchup.sh (A/B on a shared machine):
# each argument NAME=BINARY is one run with that `sluice` binary, in the
# order given, the load average printed before and after each:
#
#   scripts/raft-catchup-ab.sh base=/tmp/sluice-base new=target/release/sluice \
#       base=/tmp/sluice-base new=target/release/sluice
#
# NAME=BINARY@ARGS adds ARGS (words, commas for spaces) to every node's
# flags in that run, e.g. nofresh=target/release/sluice@--raft-fresh-snapshot-bytes,0.
# Env: MB (1100), DIR and PORT (/tmp/raft-scratch/catchup-ab, 7700), and
# SLUICE_RAFT_TRACE (1) as raft-catchup.sh reads them. Each run's node logs
# (with the trace) are kept as LOGS/RUN-NAME-nID.log (LOGS: DIR.logs).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
export SLUICE_RAFT_TRACE=${SLUICE_RAFT_TRACE:-1}
dir=${DIR:-/tmp/raft-scratch/catchup-ab}
logs=${LOGS:-$dir.logs}
mkdir -p "$logs"
run=0
for arg in "$@"; do
    run=$((run + 1))
    name=${arg%%=*} rest=${arg#*=}
    bin=${rest%%@*} extra=""
    if [[ $rest == *@* ]]; then extra=${rest#*@}; extra=${extra//,/ }; fi
    echo "=== $run $name ($bin $extra) $(date -u +%H:%M:%S) loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
    out=$logs/$run-$name.out
    SLUICE=$bin SLUICE_ARGS="$extra" nice -n 5 "$here/scripts/raft-catchup.sh" "${MB:-1100}" \
        "$dir" "${PORT:-7700}" 2>&1 | tee "$out" || echo "(run failed)"
    for id in 1 2 3; do
        cp "$dir/n$id.log" "$logs/$run-$name-n$id.log" 2>/dev/null || true
    done
    victim=$(sed -n 's/^node \([0-9]\) caught up.*/\1/p' "$out")
    ms=$(sed -n 's/^restarted at ms \([0-9]*\), caught up at ms \([0-9]*\)/\1 \2/p' "$out")
    if [[ -n $victim && -n $ms ]]; then
        # shellcheck disable=SC2086
        "$here/scripts/raft-catchup-split.py" "$logs/$run-$name-n$victim.log" $ms || true
    fi
    echo "=== end $run $name $(date -u +%H:%M:%S) loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
done
