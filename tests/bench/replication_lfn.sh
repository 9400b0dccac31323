#!/usr/bin/env bash
# Multi-site replication over an emulated long fat network (root; see RESULTS.md
# "Multi-site replication"). Two sites a, b joined by one 1 Gbit/s 200 ms route: two nodes per
# site (tests/bench/replication_lfn.topo, the default) or one (TOPO=tools/topologies/lfn-1g.topo).
# Measures, in the same run:
#   - iperf3's best on the route (8 streams, 32 MiB buffers, cubic, 10 s, first 2 s omitted),
#   - gfrep -D b of LARGE_N files of LARGE_MIB MiB stored at the a nodes,
#   - gfrep -D b of SMALL_N files of SMALL_MIB MiB (or SMALL_KIB KiB, which wins if set),
# and prints one markdown table row per workload (aggregate Mbit/s by the wall clock of the
# gfrep command, ratio to iperf3, the transfer sessions the source agents opened, and the CPU
# time per file of gfcatalogd and of the source and destination agents, from /proc/PID/stat,
# over the gfrep command, and the time to full rate: from gfrep's start until a 1-s window of
# its goodput (gfrep --json's ramp series) first reached 90 % of iperf3's best, in seconds and
# in round trips of the route's 200 ms (RTT_MS)), and the most threads and resident memory of
# the destination agents together while it ran (sampled every 0.2 s from /proc/PID/status),
# and the wire (tests/bench/wire_ramp.py in every node's namespace, 50-ms samples): from
# gfrep's start, the first data at the destination, the end of its first 0.5 s at 90 % of
# iperf3's best, the last data, gfrep's end, the share of iperf3's best between 90 % and
# the last data (the steady part), and the TCP segments the sources re-sent.
# TUNING=self (default): no route settings and no buffer flags, what a new user gets.
# TUNING=hand: gfroute set a b --streams 8 --socket-buffer 32M --cc cubic, gfsited --buffer 32M.
# TUNING=probe: gfprobe route SRC DST --apply first (its time is printed), no other settings.
# WORKERS=N passes --workers N to gfsited; CC=cubic sets only the route's congestion control; SESSION_REUSE=false turns warm sessions off;
# STREAMS=N sets only the route's streams per copy (gfroute set replaces a route's settings:
# CC and STREAMS do not combine). ROUTE_ARGS="--streams 2 --route-rate 950M" sets the route
# with any `gfroute set` options at once; AGENT_ARGS="--initial-in-flight 8" adds gfsited options. CATALOG_FLAGS="--max-open-tasks-per-node 256" adds gfcatalogd flags.
# SOURCE_COPIES=2 gives every file a replica on two source nodes (gfrep -D SRC_SITE -N 2 inside
# the source site, before the measured gfrep). THROTTLE="NODE RATE SECONDS" (the straggler
# row) limits NODE's sending to RATE (tc tbf on its eth0, e.g. "a-n2 100mbit 10") SECONDS after
# the measured gfrep starts, until it ends. Each workload also prints (stderr) how many copies
# the destination agents gave back (stragglers, slow sources).
# JSON_OUT=DIR keeps, per workload, gfrep's --json (LABEL.json: its ramp series) and the
# daemons' logs as they were when it ended (LABEL-NAME.log).
# PERF_OUT=DIR records, over each measured gfrep command, `perf record -a -g -F 999` of the
# whole machine (DIR/LABEL.perf.data: `perf report -i ... --sort comm,dso,sym`);
# SYSCALLS_OUT=DIR counts the system calls of the destination agents (`perf trace -s`:
# DIR/LABEL.syscalls). Both cost CPU (the second much more), so such a row's figures are not
# the workload's own.
# Other topologies: SRC_SITE/DST_SITE (default a/b), PAIRS=K runs agents on the first K nodes
# of each site only, IPERF_PAIRS="jp-n1:us-n1 jp-n4:us-n4" measures iperf3 on several node
# pairs at once and sums them (the reference for a topology of several routes). A workload
# with N=0 files is skipped. IPERF_SECONDS (10) is iperf3's timed part (a smoke run uses 1).
#   sudo GFREP_BIN=build/bin TOPO=tools/topologies/transpac.topo SRC_SITE=jp DST_SITE=us \
#     PAIRS=4 IPERF_PAIRS="jp-n1:us-n1 jp-n4:us-n4" LARGE_N=4 SMALL_N=0 tests/bench/replication_lfn.sh
#   sudo GFREP_BIN=build/bin LARGE_N=4 LARGE_MIB=1024 SMALL_N=1000 tests/bench/replication_lfn.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${GFREP_BIN:-build/bin}
LARGE_N=${LARGE_N:-4}
LARGE_MIB=${LARGE_MIB:-1024}
SMALL_N=${SMALL_N:-1000}
SMALL_MIB=${SMALL_MIB:-4}
TOPO=${TOPO:-tests/bench/replication_lfn.topo}
TUNING=${TUNING:-self}
IPERF_SECONDS=${IPERF_SECONDS:-10}
SRC_SITE=${SRC_SITE:-a}
DST_SITE=${DST_SITE:-b}
# Node names from the topology: "site a nodes=2" -> a-n1 a-n2 (the first PAIRS of each site).
mapfile -t NODES < <(awk -v k="${PAIRS:-0}" '$1 == "site" { split($3, kv, "="); n = kv[2];
  if (k > 0 && k < n) n = k; for (i = 1; i <= n; i++) print $2 "-n" i }' "$TOPO")
mapfile -t SRC_NODES < <(printf '%s\n' "${NODES[@]}" | grep "^$SRC_SITE-")
FIRST_SRC=${SRC_NODES[0]}
IPERF_PAIRS=${IPERF_PAIRS:-$FIRST_SRC:$DST_SITE-n1}
[[ $(id -u) == 0 ]] || { echo "replication_lfn: needs root (network namespaces)" >&2; exit 2; }

# shellcheck source=tests/bench/netns_harness.sh
source tests/bench/netns_harness.sh
harness_init replbench
harness_up
declare -A ADDR
for n in "${NODES[@]}"; do ADDR[$n]=$("$BIN/gftopo" addr "$TOPO" "$n"); done
# shellcheck disable=SC2086
# --insecure: the namespaces are this script's own (no mutual TLS, as in the earlier figures).
start catalog "$FIRST_SRC" "$BIN/gfcatalogd" --db "$WORK/db" --listen "${ADDR[$FIRST_SRC]}:0" --insecure ${CATALOG_FLAGS:-}
CATALOG_PID=${PIDS[-1]}  # ip netns exec execs the daemon: $! is its pid
SRC_AGENT_PIDS=() DST_AGENT_PIDS=()
export GFREP_CATALOG=$LISTEN
KEY=$WORK/key
AGENT_FLAGS=()
[[ $TUNING == hand ]] && AGENT_FLAGS+=(--buffer 32M)
[[ -n ${WORKERS:-} ]] && AGENT_FLAGS+=(--workers "$WORKERS")
[[ -n ${SESSION_REUSE:-} ]] && AGENT_FLAGS+=(--session-reuse "$SESSION_REUSE")
# AGENT_ARGS: any other gfsited options (e.g. "--initial-in-flight 8").
# shellcheck disable=SC2206
[[ -n ${AGENT_ARGS:-} ]] && AGENT_FLAGS+=($AGENT_ARGS)
for n in "${NODES[@]}"; do
  start "agent-$n" "$n" "$BIN/gfsited" --listen "${ADDR[$n]}:0" --spool "$WORK/spool-$n" \
    --site "${n%-n*}" --node "$n" --catalog "$GFREP_CATALOG" --key-file "$KEY" --log-level info --insecure "${AGENT_FLAGS[@]}"
  if [[ ${n%-n*} == "$SRC_SITE" ]]; then SRC_AGENT_PIDS+=("${PIDS[-1]}"); fi
  if [[ ${n%-n*} == "$DST_SITE" ]]; then DST_AGENT_PIDS+=("${PIDS[-1]}"); fi
done
# cpu_ticks PID...: user + system clock ticks the processes have used so far.
cpu_ticks() {
  local t=0 p f
  for p in "$@"; do
    # Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    f=$(sed 's/.*) //' "/proc/$p/stat")
    read -r -a f <<<"$f"
    t=$((t + f[11] + f[12]))
  done
  echo "$t"
}
# peak_of OUT PID...: every 0.2 s, the processes' threads and VmRSS (KiB) summed; on SIGTERM
# writes the highest of each ("THREADS RSS_KIB") to OUT.
peak_of() {
  local out=$1 threads=0 rss=0 t r p k v
  shift
  trap 'echo "$threads $rss" >"$out"; exit 0' TERM
  while true; do
    t=0 r=0
    for p in "$@"; do
      while read -r k v _; do
        case $k in
          Threads:) t=$((t + v)) ;;
          VmRSS:) r=$((r + v)) ;;
        esac
      done <"/proc/$p/status"
    done
    if ((t > threads)); then threads=$t; fi
    if ((r > rss)); then rss=$r; fi
    sleep 0.2
  done
}
for _ in $(seq 100); do
  [[ $(ns "$FIRST_SRC" "$BIN/gfnode" list | wc -l) -ge ${#NODES[@]} ]] && break
  sleep 0.2
done
[[ $TUNING == hand ]] && ns "$FIRST_SRC" "$BIN/gfroute" set "$SRC_SITE" "$DST_SITE" --streams 8 --socket-buffer 32M --cc cubic
# CC=cubic|bbr|reno sets only the route's congestion control (with any tuning).
[[ -n ${CC:-} ]] && ns "$FIRST_SRC" "$BIN/gfroute" set "$SRC_SITE" "$DST_SITE" --cc "$CC"
# STREAMS=N sets only the route's streams per copy (with any tuning).
[[ -n ${STREAMS:-} ]] && ns "$FIRST_SRC" "$BIN/gfroute" set "$SRC_SITE" "$DST_SITE" --streams "$STREAMS"
# ROUTE_ARGS: any gfroute set options together (replacing those above).
# shellcheck disable=SC2086
[[ -n ${ROUTE_ARGS:-} ]] && ns "$FIRST_SRC" "$BIN/gfroute" set "$SRC_SITE" "$DST_SITE" $ROUTE_ARGS
if [[ $TUNING == probe ]]; then
  p0=$(date +%s.%N)
  ns "$FIRST_SRC" "$BIN/gfprobe" route "$SRC_SITE" "$DST_SITE" --key-file "$KEY" --apply >&2
  echo "gfprobe route took $(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$p0" "$(date +%s.%N)") s" >&2
fi
echo "topology $TOPO (${#NODES[@]} nodes), tuning $TUNING, agent flags: ${AGENT_FLAGS[*]:-none}" >&2

# iperf3's best on the route(s), same run: each pair at once, summed.
IPERF=0
IPIDS=()
i=0
for pair in $IPERF_PAIRS; do
  c=${pair%%:*} sv=${pair##*:}
  sv_addr=$("$BIN/gftopo" addr "$TOPO" "$sv")
  serve_iperf "$sv" "$sv_addr"
  ns "$c" iperf3 -c "$sv_addr" -P 8 -w 32M -C cubic -t "$IPERF_SECONDS" -O 2 -J >"$WORK/iperf-$i.json" &
  IPIDS+=($!)
  i=$((i + 1))
done
wait "${IPIDS[@]}"
for f in "$WORK"/iperf-*.json; do
  IPERF=$(python3 -c 'import json,sys; print(round(float(sys.argv[2]) + json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"]/1e6))' "$f" "$IPERF")
done
echo "iperf3 best: $IPERF Mbit/s ($IPERF_PAIRS)" >&2

run() {  # run LABEL N KIB
  local label=$1 n=$2 kib=$3
  ((n > 0)) || return 0
  # Files go round-robin to the source nodes: one directory per node, stored with one
  # gfreg -r each (8 at once), at /LABEL/f<i>.
  local node
  for i in $(seq 1 "$n"); do
    node=${SRC_NODES[$((i % ${#SRC_NODES[@]}))]}
    mkdir -p "$WORK/src-$label-$node"
    head -c "$((kib * 1024))" /dev/urandom >"$WORK/src-$label-$node/f$i"
  done
  for node in "${SRC_NODES[@]}"; do
    [[ -d $WORK/src-$label-$node ]] || continue
    ns "$node" "$BIN/gfreg" -r -j 8 "$WORK/src-$label-$node" "/$label" --node "$node" --key-file "$KEY" >/dev/null
    rm -rf "$WORK/src-$label-$node"
  done
  if [[ -n ${SOURCE_COPIES:-} ]]; then
    ns "$FIRST_SRC" "$BIN/gfrep" -D "$SRC_SITE" -N "$SOURCE_COPIES" -r "/$label" >/dev/null
  fi
  local out t0 t1 fresh warm
  fresh=$(cat "$WORK"/agent-"$SRC_SITE"-*.log | grep -c 'sending path=' || true)
  warm=$(cat "$WORK"/agent-"$SRC_SITE"-*.log | grep -c 'sending path=.*(warm session)' || true)
  sync
  local cat0 src0 dst0
  cat0=$(cpu_ticks "$CATALOG_PID") src0=$(cpu_ticks "${SRC_AGENT_PIDS[@]}") dst0=$(cpu_ticks "${DST_AGENT_PIDS[@]}")
  peak_of "$WORK/peak-$label" "${DST_AGENT_PIDS[@]}" &
  local sampler=$!
  PIDS+=("$sampler")
  # The wire: bytes received (and sent, and TCP segments retransmitted) in each node's
  # namespace every 50 ms.
  local wires=() node
  for node in "${NODES[@]}"; do
    ip netns exec "gfrep-$node" python3 tests/bench/wire_ramp.py "$WORK/wire-$label-$node" &
    wires+=($!)
    PIDS+=("$!")
  done
  sleep 0.2
  local throttler= stragglers0
  stragglers0=$(cat "$WORK"/agent-"$DST_SITE"-*.log | grep -c 'given back (' || true)
  if [[ -n ${THROTTLE:-} ]]; then
    read -r t_node t_rate t_after <<<"$THROTTLE"
    (sleep "$t_after" && ip netns exec "gfrep-$t_node" tc qdisc add dev eth0 root tbf rate "$t_rate" \
      burst 256k latency 100ms && echo "throttled $t_node to $t_rate at $t_after s" >&2) &
    throttler=$!
    PIDS+=("$throttler")
  fi
  local profilers=()
  if [[ -n ${PERF_OUT:-} ]]; then
    mkdir -p "$PERF_OUT"
    perf record -a -g -F 999 -o "$PERF_OUT/$label.perf.data" 2>/dev/null &
    profilers+=($!)
  fi
  if [[ -n ${SYSCALLS_OUT:-} ]]; then
    mkdir -p "$SYSCALLS_OUT"
    perf trace -s -p "$(IFS=,; echo "${DST_AGENT_PIDS[*]}")" -o "$SYSCALLS_OUT/$label.syscalls" 2>/dev/null &
    profilers+=($!)
  fi
  if ((${#profilers[@]})); then
    PIDS+=("${profilers[@]}")
    sleep 1
  fi
  t0=$(date +%s.%N)
  out=$(ns "$FIRST_SRC" "$BIN/gfrep" -D "$DST_SITE" -r --json "/$label")
  t1=$(date +%s.%N)
  for p in "${profilers[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "${profilers[@]}"; do wait "$p" 2>/dev/null || true; done
  kill -TERM "$sampler" "${wires[@]}"
  wait "$sampler" "${wires[@]}" || true
  if [[ -n $throttler ]]; then
    kill -TERM "$throttler" 2>/dev/null || true
    wait "$throttler" 2>/dev/null || true
    ip netns exec "gfrep-$t_node" tc qdisc del dev eth0 root 2>/dev/null || true
  fi
  echo "$label: $(($(cat "$WORK"/agent-"$DST_SITE"-*.log | grep -c 'given back (' || true) - stragglers0)) copies given back (stragglers, slow sources)" >&2
  if [[ -n ${JSON_OUT:-} ]]; then
    mkdir -p "$JSON_OUT"
    printf '%s\n' "$out" >"$JSON_OUT/$label.json"
    for f in "$WORK"/*.log; do cp "$f" "$JSON_OUT/$label-$(basename "$f")"; done
    cp "$WORK"/wire-"$label"-* "$JSON_OUT/"
  fi
  local cpu="$(($(cpu_ticks "$CATALOG_PID") - cat0)) $(($(cpu_ticks "${SRC_AGENT_PIDS[@]}") - src0)) $(($(cpu_ticks "${DST_AGENT_PIDS[@]}") - dst0)) $(getconf CLK_TCK)"
  fresh=$(($(cat "$WORK"/agent-"$SRC_SITE"-*.log | grep -c 'sending path=' || true) - fresh))
  warm=$(($(cat "$WORK"/agent-"$SRC_SITE"-*.log | grep -c 'sending path=.*(warm session)' || true) - warm))
  python3 - "$label" "$n" "$kib" "$IPERF" "$out" "$t0" "$t1" "$((fresh - warm))" "$cpu" "${RTT_MS:-200}" "$(cat "$WORK/peak-$label")" "$DST_SITE" "$WORK"/wire-"$label"-* <<'PY'
import json, sys
label, n, kib, iperf, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), json.loads(sys.argv[5])
size = f"{kib // 1024} MiB" if kib % 1024 == 0 else f"{kib} KiB"
wall = float(sys.argv[7]) - float(sys.argv[6])
sessions = int(sys.argv[8])
cat_t, src_t, dst_t, hz = (int(x) for x in sys.argv[9].split())
ms = lambda ticks: ticks * 1000 / hz / n  # CPU ms per file
# Time to full rate: the end of the first 1-s window (two 0.5-s bins) at 90 % of iperf3's best.
series = out.get("ramp", {}).get("series_mbit_s", [])
to_full = "never" if "ramp" in out else "n/a"  # n/a: a gfrep from before the ramp series
for i in range(1, len(series)):
    if (series[i - 1] + series[i]) / 2 >= 0.9 * iperf:
        t = (i + 1) * 0.5
        to_full = f"{t:.1f} s ({t * 1000 / float(sys.argv[10]):.0f} RTTs)"
        break
mbps = out["bytes_copied"] * 8 / wall / 1e6
threads, rss_kib = (int(x) for x in sys.argv[11].split())
# The wire (destination namespaces' received bytes, 50-ms samples, summed over nodes), in
# seconds from gfrep's start: the first 50 ms with data (over 1 % of iperf3's rate), the end
# of the first 0.5 s at 90 % of iperf3's best, the last 50 ms with data, and the mean rate
# between those (the steady part) as a share of iperf3's best.
t0, t1 = float(sys.argv[6]), float(sys.argv[7])
bins, retrans = {}, 0
for path in sys.argv[13:]:
    rows = [tuple(map(float, l.split())) for l in open(path) if len(l.split()) == 4]
    if f"-{sys.argv[12]}-n" not in path.rsplit("/", 1)[-1]:  # a source node: its retransmits
        retrans += int(rows[-1][3] - rows[0][3]) if rows else 0
        continue
    for (ta, ba, _, _), (tb, bb, _, _) in zip(rows, rows[1:]):
        k = round((tb - t0) / 0.05)
        bins[k] = bins.get(k, 0) + (bb - ba)
wire = "n/a"
if bins:
    ks = range(min(bins), max(bins) + 1)
    rate = {k: bins.get(k, 0) * 8 / 0.05 / 1e6 for k in ks}  # Mbit/s per 50 ms
    data = [k for k in ks if k >= 0 and rate[k] > 0.01 * iperf]
    if data:
        first, last = data[0], data[-1]
        full = next((k for k in ks if k >= 9 and sum(rate.get(j, 0) for j in range(k - 9, k + 1)) / 10 >= 0.9 * iperf), None)
        full_s = f"at {full * 0.05:.2f} s" if full is not None else "never"
        mid = [rate[k] for k in range(full, last + 1)] if full is not None else []
        steady = f"{sum(mid) / len(mid) / iperf:.2f}" if mid else "n/a"
        wire = (f"first data {first * 0.05:.2f} s, 90 % {full_s}, last data {last * 0.05:.2f} s, "
                f"end {wall:.2f} s, steady {steady}, {retrans} segments retransmitted by the sources")
print(f"| {label} | {n} x {size} | {out['state']} | {wall:.1f} | {mbps:.0f} | {iperf:.0f} | {mbps / iperf:.2f} | {sessions} | {n / wall:.0f} "
      f"| {ms(cat_t):.2f} | {ms(src_t):.2f} | {ms(dst_t):.2f} | {to_full} | {threads}, {rss_kib / 1024:.0f} MiB | {wire} |")
PY
}
echo "| workload | files | state | wall s | gfrep Mbit/s | iperf3 Mbit/s | ratio | sessions opened | files/s | catalog CPU ms/file | source agents CPU ms/file | destination agents CPU ms/file | to 90 % of iperf3 | destination agents: most threads, RSS | the wire at the destination |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
run large "$LARGE_N" "$((LARGE_MIB * 1024))"
run small "$SMALL_N" "${SMALL_KIB:-$((SMALL_MIB * 1024))}"
