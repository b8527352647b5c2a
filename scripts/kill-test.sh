#!/usr/bin/env bash
# The kill test at length: SIGKILLs a real `sluice kill-writer` process
# ROUNDS times per preset on one database each, checking after every kill
# that the database opens, holds a prefix of history with every synced
# write, keeps earlier rounds' keys, and passes `verify`
# (crates/sluice-cli/tests/kill.rs). The databases live under TMPDIR
# (default: ./target/kill-test, on the same disk as the build).
#
#   scripts/kill-test.sh [ROUNDS] [SEED] [PRESET]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-200}
export SLUICE_KILL_ROUNDS=$rounds
[ -n "${2:-}" ] && export SLUICE_KILL_SEED=$2
[ -n "${3:-}" ] && export SLUICE_KILL_PRESET=$3
export TMPDIR=${TMPDIR:-$PWD/target/kill-test}
mkdir -p "$TMPDIR"
cargo test --release -p sluice-cli --test kill -- --nocapture
