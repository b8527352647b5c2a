#!/usr/bin/env bash
# Runs every test binary of the workspace RUNS times on a loaded machine:
# a second copy of the whole suite runs in a loop beside it, so that a
# test depending on timing (background work finishing before a check)
# shows up as the flake it is. A test that fails one run in twenty is a
# failing test (issue 50).
#
#   scripts/stress-tests.sh [RUNS] [FILTER]
#
# FILTER (an extended regular expression matched against the binary's
# name, e.g. 'space_limit|^gc-') limits the binaries run RUNS times; the
# load is always the whole suite. Prints each
# binary's failures and the first failing output, and exits non-zero if
# any run failed. Logs go to target/stress/.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
filter=${2:-}
out=target/stress
mkdir -p "$out"
# Build once; list the test executables cargo made.
cargo test --workspace --locked --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["executable"])
' | sort -u >"$out/binaries"
mapfile -t bins <"$out/binaries"
echo "${#bins[@]} test binaries; $runs runs each, with the suite looping beside them"

# The load: the whole suite, again and again, until we are done.
(
  while :; do
    for b in "${bins[@]}"; do "$b" -q >/dev/null 2>&1 || true; done
  done
) &
load=$!
trap 'kill $load 2>/dev/null || true; wait $load 2>/dev/null || true' EXIT

failed=0
for b in "${bins[@]}"; do
  name=$(basename "$b")
  [[ -n "$filter" && ! "$name" =~ $filter ]] && continue
  fails=0
  for ((i = 1; i <= runs; i++)); do
    if ! "$b" -q >"$out/$name.$i.log" 2>&1; then
      fails=$((fails + 1))
      [[ $fails -eq 1 ]] && cp "$out/$name.$i.log" "$out/$name.first-failure.log"
    else
      rm -f "$out/$name.$i.log"
    fi
  done
  printf '%-70s %2d of %d failed\n' "$name" "$fails" "$runs"
  if [[ $fails -gt 0 ]]; then
    failed=1
    grep -m5 -E 'panicked|FAILED|SEED|seed' "$out/$name.first-failure.log" | sed 's/^/    /' || true
  fi
done
exit $failed
