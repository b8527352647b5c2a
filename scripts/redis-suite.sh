#!/usr/bin/env bash
# Redis's own test suite against `sluice serve` and against redis-server,
# per unit: tests passed by each (issue 54's measure).
#
#   WORK=/tmp/redis-suite scripts/redis-suite.sh [unit ...]
#
# SLUICE=path/to/sluice runs that binary instead of building this tree's
# release build (to compare two builds on the same suite).
# The suite comes from the Debian source package of the installed
# redis-server (a deb-src entry for Debian's main archive is added if
# missing, then `apt-get source --download-only redis`); it is unpacked under
# $WORK and never enters the repository. Each unit runs once per server, as
# an external server (`runtest --host --port`: the suite selects database 9,
# sluice serve has 16; SINGLEDB=1 adds `--singledb`, database 0 only, as the
# runs before sluice serve had databases), with the tests that need DEBUG,
# replication or a restart of the server skipped by their tags.
# Needs tclsh, redis-server and apt-get source (root for the deb-src entry).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
WORK=${WORK:-/tmp/redis-suite}
SINGLEDB_FLAG=()
if [ "${SINGLEDB:-0}" = 1 ]; then
  SINGLEDB_FLAG=(--singledb)
fi
UNITS=("$@")
if [ ${#UNITS[@]} -eq 0 ]; then
  UNITS=(type/string type/incr type/hash type/list type/list-2 type/list-3 type/set
         type/zset keyspace expire multi scan bitops info-command introspection
         introspection-2 protocol pubsub)
fi
mkdir -p "$WORK"

# 1. The suite's sources.
if [ ! -x "$WORK/src/runtest" ]; then
  if ! grep -rqs '^Types: deb deb-src\|^Types: deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    cat > /etc/apt/sources.list.d/redis-suite-src.sources <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt-get update -qq
  fi
  (cd "$WORK" && apt-get source --download-only -qq redis)
  tarball=$(ls "$WORK"/redis_*.orig.tar.gz | head -n1)
  rm -rf "$WORK/src" && mkdir -p "$WORK/src"
  tar -xzf "$tarball" -C "$WORK/src" --strip-components=1
  # The external-server mode still looks for the binaries under src/.
  mkdir -p "$WORK/src/src"
  for b in redis-server redis-cli redis-benchmark; do
    ln -sf "$(command -v "$b")" "$WORK/src/src/$b"
  done
fi

# 2. The server under test.
if [ -z "${SLUICE:-}" ]; then
  cargo build --release -q -p sluice-cli
  SLUICE="$REPO/target/release/sluice"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Runs one unit against the server on $1 and prints "passed failed".
# An exception (a command the server does not have, say) ends a unit's test
# client, which would count every later test as failed: the unit is run
# again with the test that threw skipped (so it does not pass), until it
# runs through or the throw is outside any test. Passes are counted on the
# last run; "failed" counts its failures plus the skipped tests.
run_unit() {
  local port=$1 unit=$2 log=$3
  local skips=() thrown=0 plain="$log.txt"
  for _ in $(seq 20); do
    (cd "$WORK/src" && timeout 600 tclsh tests/test_helper.tcl --host 127.0.0.1 --port "$port" \
        --single "unit/$unit" "${SINGLEDB_FLAG[@]}" --tags -needs:debug --tags -needs:repl --tags -needs:save \
        --tags -needs:config-maxmemory --tags -needs:reset --timeout 60 --clients 1 \
        "${skips[@]}" >"$log" 2>&1) || true
    # The log is coloured: strip the escape sequences before counting.
    sed 's/\x1b\[[0-9;]*m//g' "$log" >"$plain"
    grep -q '^\[exception\]' "$plain" || break
    # The innermost test of the stack trace; a name built from variables
    # ("$cmd command ...") becomes a pattern matching every expansion.
    local pattern
    pattern=$(python3 - "$plain" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
text = text[text.index("[exception]"):]
m = re.search(r'\(procedure "test" line \d+\)\s*invoked from within\s*"test [{"]([^}"\n]*)', text)
if not m:
    sys.exit(0)
name = m.group(1)
parts = re.split(r'\$\w+|\[[^\]]*\]', name)
print("/^" + ".*".join(re.escape(p) for p in parts) + "$")
PY
)
    [ -n "$pattern" ] || break
    case " ${skips[*]} " in *" $pattern "*) break ;; esac
    skips+=(--skiptest "$pattern")
    thrown=$((thrown + 1))
  done
  echo "$(grep -c '^\[ok\]' "$plain" || true) $(( $(grep -c '^\[err\]\|^\[exception\]' "$plain" || true) + thrown ))"
}

printf '%-16s %8s %8s %8s %7s\n' unit redis sluice failed share
for unit in "${UNITS[@]}"; do
  name=${unit//\//-}
  rport=$(free_port)
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$WORK" --daemonize no >/dev/null 2>&1 &
  rpid=$!
  sport=$(free_port)
  rm -rf "$WORK/db-$name"
  "$SLUICE" serve --db "$WORK/db-$name" --port "$sport" >/dev/null 2>&1 &
  spid=$!
  sleep 1
  read -r rok rerr < <(run_unit "$rport" "$unit" "$WORK/redis-$name.log")
  read -r sok serr < <(run_unit "$sport" "$unit" "$WORK/sluice-$name.log")
  # A server that does not stop within 10 s of SIGTERM (a command that
  # never ends) is killed.
  kill "$rpid" "$spid" 2>/dev/null || true
  for _ in $(seq 100); do
    kill -0 "$rpid" 2>/dev/null || kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$rpid" "$spid" 2>/dev/null || true
  wait "$rpid" "$spid" 2>/dev/null || true
  share=$(python3 -c "print(f'{100*$sok/max($rok,1):.0f}%')")
  printf '%-16s %8s %8s %8s %7s\n' "$unit" "$rok" "$sok" "$serr" "$share"
done
echo "logs: $WORK/{redis,sluice}-<unit>.log"
