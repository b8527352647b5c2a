# Sourced by scripts/ab-lightkv-writes.sh and scripts/ab-lightkv-scans.sh, which define
# `run SIDE BIN ENGINES` (one invocation of BIN's `sluice bench` on ENGINES).

# The command in "${cmd[@]}" inside `memcap MEMCAP` when MEMCAP is set.
capped() {
  if [ -n "${MEMCAP:-}" ]; then
    cmd=("${MEMCAP_BIN:-/work/shared/tools/memcap}" "$MEMCAP" "${cmd[@]}")
  fi
}

# PAIRS runs of BIN_A then BIN_B; under MEMCAP each engine in an invocation of its own (a
# cgroup limit counts the page cache the first engine left), both in one otherwise.
alternate() { # BIN_A BIN_B PAIRS
  local i side bin
  for i in $(seq "$3"); do
    for side in a b; do
      bin=$1
      [ "$side" = b ] && bin=$2
      if [ -n "${MEMCAP:-}" ]; then
        run "$side" "$bin" lightkv
        run "$side" "$bin" leveldb
      else
        run "$side" "$bin" lightkv,leveldb
      fi
      echo "pair $i: $side done" >&2
    done
  done
}
