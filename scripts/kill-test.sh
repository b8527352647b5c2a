#!/usr/bin/env bash
# The kill test at length: SIGKILLs a real `sluice kill-writer` process
# ROUNDS times per preset on one database each, checking after every kill
# that the database opens, holds a prefix of history with every synced
# write, keeps earlier rounds' keys, and passes `verify`
# (crates/sluice-cli/tests/kill.rs). The databases live under TMPDIR
# (default: ./target/kill-test, on the same disk as the build).
# With --power-loss (root and loop devices needed) each kill is a power cut:
# the databases live on an ext4 image mounted through a loop device, shut
# down without flushing its journal before each SIGKILL, so that whatever
# was not synced is lost (SLUICE_KILL_POWER_LOSS=1; crates/sluice-cli/tests/kill.rs).
#
#   scripts/kill-test.sh [--power-loss] [ROUNDS] [SEED] [PRESET]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --power-loss ]; then
  export SLUICE_KILL_POWER_LOSS=1
  shift
fi
rounds=${1:-200}
export SLUICE_KILL_ROUNDS=$rounds
[ -n "${2:-}" ] && export SLUICE_KILL_SEED=$2
[ -n "${3:-}" ] && export SLUICE_KILL_PRESET=$3
export TMPDIR=${TMPDIR:-$PWD/target/kill-test}
mkdir -p "$TMPDIR"
cargo test --release -p sluice-cli --test kill -- --nocapture
