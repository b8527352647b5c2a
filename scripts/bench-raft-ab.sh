#!/usr/bin/env bash
# Builds alternated under scripts/bench-raft.sh (A/B on a shared machine):
# each argument NAME=BINARY is one round (one node, then the group) with
# that `sluice` binary, in the order given, with the load average printed
# before and after each:
#
#   scripts/bench-raft-ab.sh base=/tmp/sluice-base new=target/release/sluice \
#       base=/tmp/sluice-base new=target/release/sluice
#
# Env as bench-raft.sh; defaults here: STAGES=1 TESTS=set,incr N1=20000
# N16=100000 (ROUNDS is 1: the alternation is the rounds), DIR and PORT
# (/tmp/raft-scratch/bench, 7600).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
export STAGES=${STAGES:-1} TESTS=${TESTS:-set,incr} N1=${N1:-20000} N16=${N16:-100000} ROUNDS=1
for arg in "$@"; do
    name=${arg%%=*} bin=${arg#*=}
    echo "=== $name $(date -u +%H:%M:%S) loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
    SLUICE=$bin "$here/scripts/bench-raft.sh" "${DIR:-/tmp/raft-scratch/bench}" "${PORT:-7600}"
    echo "=== end $name $(date -u +%H:%M:%S) loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
done
