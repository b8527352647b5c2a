#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ (docs/fuzzing.md) for a set time, one
# after the other, and prints per target the executions libFuzzer made and
# whether it found a crash (a panic, a hang past the timeout, or running
# out of memory). Not part of CI.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# SECONDS_PER_TARGET defaults to 60; the targets default to all of them.
# Needs the nightly toolchain (cargo-fuzz builds with sanitizer flags only
# nightly has); installs cargo-fuzz if it is missing. Corpora grow in
# fuzz/corpus/<target>/ (only the seed-* files are tracked); crashes are
# written to fuzz/artifacts/<target>/ and logs to fuzz/logs/<target>.log.
# Exits 1 if any target found a crash.
set -euo pipefail

secs=${1:-60}
shift || true
if ! [[ $secs =~ ^[0-9]+$ ]] || ((secs == 0)); then
    echo "usage: $0 [SECONDS_PER_TARGET] [TARGET...]" >&2
    exit 2
fi

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/fuzz"

if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

if (($# > 0)); then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi

# One build of every target first, so the timed runs are fuzzing only.
cargo +nightly fuzz build

mkdir -p logs
found=0
summary=()
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    log="logs/$t.log"
    echo "== $t: ${secs}s" >&2
    set +e
    # -timeout: a single input running this long is a hang (a decoder that
    # never ends); -print_final_stats prints the number of executions.
    cargo +nightly fuzz run "$t" -- \
        -max_total_time="$secs" -timeout=20 -print_final_stats=1 >"$log" 2>&1
    rc=$?
    set -e
    execs=$(awk '/stat::number_of_executed_units/ {n = $2} END {print n + 0}' "$log")
    corpus=$(find "corpus/$t" -type f | wc -l)
    if ((rc == 0)); then
        result="no crash"
    else
        found=1
        what=$(grep -m1 -oE 'ERROR: libFuzzer: [a-z-]+|panicked at [^ ]+' "$log" || echo "exit $rc")
        input=$(grep -m1 -oE "Test unit written to [^ ]+" "$log" | sed 's/Test unit written to //' || true)
        result="CRASH ($what) ${input:-see $log}"
    fi
    summary+=("$(printf '%-22s %6ss %12s execs %6s corpus files  %s' "$t" "$secs" "$execs" "$corpus" "$result")")
done

echo
printf '%s\n' "${summary[@]}"
exit "$found"
