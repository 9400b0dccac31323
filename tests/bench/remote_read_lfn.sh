#!/usr/bin/env bash
# Streaming remote reads over an emulated long fat network (root; RESULTS.md "Streaming
# remote reads", issue 14). Topology lfn-1g (sites a and b, one node each, 200 ms RTT,
# 1 Gbit/s): a file of SIZE_MIB MiB stored at a-n1, read at b-n1 with gfexport (b-n1 has
# no replica: the remote read path). Measures, in the same run:
#   - iperf3 a-n1 -> b-n1, 8 streams, 32 MiB buffers, cubic, 10 s (first 2 s omitted),
#   - gfexport, streamed (the default): wall clock of the command, its open and first-byte
#     times (--stats; from the program's start: catalog lookups, session set-up, first piece),
#   - gfexport --length 4096: time to the first 4 KiB by the wall clock of the command,
#   - gfexport --no-stream: the whole file fetched and verified before the first byte.
# The route is set to 8 streams, 32 MiB socket buffers, cubic (TUNING=hand of
# replication_lfn.sh); gfsited --buffer 32M.
#   sudo GFREP_BIN=build/bin SIZE_MIB=1024 tests/bench/remote_read_lfn.sh
# Environment: SIZE_MIB (1024), RUNS (2), IPERF_SECONDS (10; a smoke run uses 1), TOPO.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${GFREP_BIN:-build/bin}
SIZE_MIB=${SIZE_MIB:-1024}
RUNS=${RUNS:-2}
IPERF_SECONDS=${IPERF_SECONDS:-10}
TOPO=${TOPO:-tools/topologies/lfn-1g.topo}
[[ $(id -u) == 0 ]] || { echo "remote_read_lfn: needs root (network namespaces)" >&2; exit 2; }

# shellcheck source=tests/bench/netns_harness.sh
source tests/bench/netns_harness.sh
harness_init readbench
harness_up
A=$("$BIN/gftopo" addr "$TOPO" a-n1)
B=$("$BIN/gftopo" addr "$TOPO" b-n1)
# The catalog at the reader's site, as a federation would run one per region; the route's
# 200 ms is then between the reader and the source only.
start catalog b-n1 "$BIN/gfcatalogd" --db "$WORK/db" --listen "$B:0" --insecure
export GFREP_CATALOG=$LISTEN
KEY=$WORK/key
for n in a-n1 b-n1; do
  addr=$A; [[ $n == b-n1 ]] && addr=$B
  start "agent-$n" "$n" "$BIN/gfsited" --listen "$addr:0" --spool "$WORK/spool-$n" \
    --site "${n%-n*}" --node "$n" --catalog "$GFREP_CATALOG" --key-file "$KEY" --log-level info \
    --insecure --buffer 32M
done
for _ in $(seq 100); do
  [[ $(ns b-n1 "$BIN/gfnode" list | wc -l) -ge 2 ]] && break
  sleep 0.2
done
ns b-n1 "$BIN/gfroute" set a b --streams 8 --socket-buffer 32M --cc cubic
ns b-n1 "$BIN/gfroute" set b a --streams 8 --socket-buffer 32M --cc cubic
head -c "$((SIZE_MIB * 1024 * 1024))" /dev/urandom >"$WORK/src"
ns a-n1 "$BIN/gfreg" "$WORK/src" /bench/f --node a-n1 --site a --key-file "$KEY" >/dev/null
rm -f "$WORK/src"

# iperf3 a -> b: the data flows as it does for the read (source a, reader b).
serve_iperf b-n1 "$B"
ns a-n1 iperf3 -c "$B" -P 8 -w 32M -C cubic -t "$IPERF_SECONDS" -O 2 -J >"$WORK/iperf.json"
IPERF=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]/1e6))' "$WORK/iperf.json")
echo "iperf3 a-n1 -> b-n1 (8 x 32M, cubic): $IPERF Mbit/s; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

export GFREP_SITE=b GFREP_NODE=b-n1
read_once() {  # read_once LABEL [gfexport flags...]
  local label=$1; shift
  local t0 t1 stats
  t0=$(date +%s.%N)
  ns b-n1 "$BIN/gfexport" /bench/f --key-file "$KEY" --stats "$@" >/dev/null 2>"$WORK/export.err" ||
    { cat "$WORK/export.err" >&2; return 1; }
  t1=$(date +%s.%N)
  stats=$(grep '^{' "$WORK/export.err" | tail -1)
  python3 - "$label" "$IPERF" "$stats" "$t0" "$t1" <<'PY'
import json, sys
label, iperf, st = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3])
wall = float(sys.argv[5]) - float(sys.argv[4])
mbps = st["bytes"] * 8 / wall / 1e6
print(f"| {label} | {st['bytes'] / 2**20:.0f} MiB | {wall:.2f} | {st['open_s']:.2f} | {st['first_byte_s']:.2f} | "
      f"{mbps:.0f} | {iperf:.0f} | {mbps / iperf:.2f} | {st['streaming']} | {st['whole_file_verified']} |")
PY
}
echo "| read | bytes | wall s | open s | first byte s | Mbit/s (wall) | iperf3 Mbit/s | ratio | streamed | whole-file verified |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"
for _ in $(seq "$RUNS"); do
  read_once "gfexport (stream)"
  read_once "gfexport --length 4096 (stream)" --length 4096
done
read_once "gfexport --no-stream (whole file first)" --no-stream
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
