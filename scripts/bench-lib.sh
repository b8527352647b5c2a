# Sourced by the bench scripts (not run): builds the release `sluice`, with the peer engines'
# cargo features when ENGINES names one, and sets `sluice` to its path and `memcap` to
# ../shared/tools/memcap (or $MEMCAP). CARGO_TARGET_DIR is honoured.
build_sluice() { # ENGINES
  local features=()
  case ",$1," in *,rocksdb*|*,fjall*) features=(--features rocksdb,fjall) ;; esac
  cargo build --release -q -p sluice-cli "${features[@]}"
  sluice="${CARGO_TARGET_DIR:-target}/release/sluice"
}
# each_engine OUT CMD [ARGS...]: runs `CMD ENGINE ARGS...` once per engine of $engines, each
# in its own process (a shared one left one engine's memory to the next), removes the
# engine's directory under $dir, then prints the table of OUT.
each_engine() {
  local o=$1 cmd=$2; shift 2
  for e in ${engines//,/ }; do
    "$cmd" "$e" "$@" || echo "== $e failed (exit $?; an OOM kill shows in dmesg)" >&2
    rm -rf "${dir:?}/$e"
  done
  "$sluice" bench report "$o"
}
memcap=${MEMCAP:-$(dirname "${BASH_SOURCE[0]}")/../../shared/tools/memcap}
