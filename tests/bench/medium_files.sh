#!/usr/bin/env bash
# Many third-party copies of one medium file between two gfsited on loopback (destination
# spool on /dev/shm): the per-file cost that a large-file benchmark hides. Prints the wall
# clock of the N gfcp commands and the CPU ticks (1/100 s) each agent used.
#   tests/bench/medium_files.sh            (GFREP_BIN=dir to skip tools/build)
# Environment: N (150 copies), SIZE_KIB (4096), STREAMS (8).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${GFREP_BIN:-$(tools/build)/bin}
N=${N:-150}
SIZE_KIB=${SIZE_KIB:-4096}
STREAMS=${STREAMS:-8}
WORK=$(mktemp -d /tmp/gfrep-medium.XXXXXX)
SHM=$(mktemp -d /dev/shm/gfrep-medium.XXXXXX)
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
head -c "$((SIZE_KIB * 1024))" /dev/urandom >"$WORK/a/f"
chmod 644 "$WORK/a/f"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/key"
chmod 600 "$WORK/key"
start() {  # start NAME SPOOL; the daemon prints "listening on HOST:PORT"
  "$BIN/gfsited" --listen 127.0.0.1:0 --spool "$2" --key-file "$WORK/key" \
    >"$WORK/$1.out" 2>"$WORK/$1.err" &
  PIDS+=($!)
  echo $! >"$WORK/$1.pid"
  for _ in $(seq 1 200); do
    grep -q 'listening on' "$WORK/$1.out" 2>/dev/null && return
    sleep 0.05
  done
  echo "medium_files: gfsited $1 did not start: $(cat "$WORK/$1.err")" >&2
  exit 1
}
start a "$WORK/a"
start b "$SHM/b"
A=$(awk '{print $NF}' "$WORK/a.out")
B=$(awk '{print $NF}' "$WORK/b.out")
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
pa=$(cat "$WORK/a.pid")
pb=$(cat "$WORK/b.pid")
ta=$(ticks "$pa")
tb=$(ticks "$pb")
t0=$(date +%s.%N)
for i in $(seq 1 "$N"); do
  "$BIN/gfcp" --key-file "$WORK/key" -p "$STREAMS" "gf://$A/f" "gf://$B/f$i" >/dev/null
done
t1=$(date +%s.%N)
echo "$N copies of $SIZE_KIB KiB at -p $STREAMS: $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}') s wall clock;" \
  "CPU ticks: sender $(($(ticks "$pa") - ta)), receiver $(($(ticks "$pb") - tb))"
