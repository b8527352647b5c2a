# Sourced by the bench scripts (not run): builds the release `sluice`, with the peer engines'
# cargo features when ENGINES names one, and sets `sluice` to its path and `memcap` to
# ../shared/tools/memcap (or $MEMCAP). CARGO_TARGET_DIR is honoured.
build_sluice() { # ENGINES
  local features=()
  case ",$1," in *,rocksdb*|*,fjall*) features=(--features rocksdb,fjall) ;; esac
  cargo build --release -q -p sluice-cli "${features[@]}"
  sluice="${CARGO_TARGET_DIR:-target}/release/sluice"
}
memcap=${MEMCAP:-$(dirname "${BASH_SOURCE[0]}")/../../shared/tools/memcap}
