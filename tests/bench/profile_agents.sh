#!/usr/bin/env bash
# perf profile of both agents during one third-party copy (the figures behind the profile
# tables in RESULTS.md): two gfsited with gfca certificates on loopback, a SIZE_GIB page-cached
# source at A, destination spool on /dev/shm at B, one warm-up copy, then `perf record -g` on
# each agent while gfcp copies A -> B with the given options. Prints gfcp's --json and, per
# agent, the CPU seconds per GB perf sampled and its top shared objects and symbols.
#   tests/bench/profile_agents.sh [gfcp options...]     e.g. --tls -p 8, or -p 4
# Environment: GFREP_BIN (default: tools/build), SIZE_GIB (2), SIZE_MIB (wins over SIZE_GIB if
# set: a smaller file, e.g. for a smoke run), PROFILE_OUT (a directory to keep the perf.data
# files in; default: removed with the rest).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${GFREP_BIN:-$(tools/build)/bin}
SIZE_GIB=${SIZE_GIB:-2}
SIZE_MIB=${SIZE_MIB:-$((SIZE_GIB * 1024))}
GB=$(awk -v m="$SIZE_MIB" 'BEGIN {printf "%.9f", m * 1.048576 / 1000}')  # the file in 10^9 bytes
command -v perf >/dev/null || { echo "profile_agents: perf not found (tools/setup-deps installs linux-perf)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/gfrep-profile.XXXXXX)
SHM=$(mktemp -d /dev/shm/gfrep-profile.XXXXXX)
OUT=${PROFILE_OUT:-$WORK}
mkdir -p "$OUT"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK" "$SHM"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
chmod 755 "$WORK" "$SHM"
mkdir -p "$WORK/a" "$SHM/b"
chmod 755 "$WORK/a"
head -c "$((SIZE_MIB * 1024 * 1024))" /dev/urandom >"$WORK/a/big.dat"
chmod 644 "$WORK/a/big.dat"
cat "$WORK/a/big.dat" >/dev/null
"$BIN/gfca" init --dir "$WORK/ca" >/dev/null
"$BIN/gfca" issue node agent --host 127.0.0.1 --dir "$WORK/ca" >/dev/null
TLS=(--tls-cert "$WORK/ca/agent.pem" --tls-key "$WORK/ca/agent.key" --tls-ca "$WORK/ca/ca.pem")
start() {  # start NAME SPOOL; the daemon prints "listening on HOST:PORT"
  "$BIN/gfsited" --listen 127.0.0.1:0 --spool "$2" --key-file "$WORK/key" "${TLS[@]}" \
    >"$WORK/$1.out" 2>"$WORK/$1.err" &
  PIDS+=($!)
  echo $! >"$WORK/$1.pid"
  for _ in $(seq 1 200); do
    grep -q 'listening on' "$WORK/$1.out" 2>/dev/null && return
    sleep 0.05
  done
  echo "profile_agents: gfsited $1 did not start" >&2
  exit 1
}
start a "$WORK/a"
start b "$SHM/b"
A=$(awk '{print $NF}' "$WORK/a.out")
B=$(awk '{print $NF}' "$WORK/b.out")
GFCP=("$BIN/gfcp" --key-file "$WORK/key" --tls-ca "$WORK/ca/ca.pem" "$@" --json "gf://$A/big.dat" "gf://$B/big.dat")
"${GFCP[@]}" >/dev/null
rm -f "$SHM/b/big.dat"
PERFS=()
for n in a b; do
  perf record -F 999 -g -p "$(cat "$WORK/$n.pid")" -o "$OUT/$n.perf.data" 2>/dev/null &
  PERFS+=($!)
done
sleep 0.5
t0=$(date +%s.%N)
"${GFCP[@]}"
t1=$(date +%s.%N)
kill -INT "${PERFS[@]}"
# The user's view: the gfcp command from start to exit (process start, sessions, checksum
# exchange included), not only the engine's own "seconds" in its --json.
awk -v a="$t0" -v b="$t1" -v g="$GB" \
  'BEGIN {printf "== gfcp wall clock: %.3f s = %.0f MB/s\n", b - a, g * 1000 / (b - a)}'
for p in "${PERFS[@]}"; do wait "$p" 2>/dev/null || true; done
set +o pipefail  # `| head` below ends perf report early on purpose
for n in a b; do
  samples=$(perf report -i "$OUT/$n.perf.data" --stdio -n --sort pid -g none 2>/dev/null |
            awk '/^ +[0-9.]+%/ {s += $3} END {print s + 0}')
  role=$([ "$n" = a ] && echo sender || echo receiver)
  echo "== agent $n ($role): $samples samples at 999 Hz = $(awk -v s="$samples" -v g="$GB" 'BEGIN {printf "%.2f", s / 999 / g}') CPU s/GB"
  perf report -i "$OUT/$n.perf.data" --no-children --sort dso --stdio -g none 2>/dev/null | grep '%' | head -6
  perf report -i "$OUT/$n.perf.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null | grep '%' | head -12 | cut -c1-120
done
