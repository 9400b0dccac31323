# Sourced by the network-namespace benchmarks (replication_lfn.sh, remote_read_lfn.sh): a
# work directory in /dev/shm, daemons started inside the topology's namespaces and stopped by
# pid on exit, the topology torn down on exit. REQUIRES: BIN and TOPO set, root.
#   harness_init NAME        WORK=/dev/shm/gfrep-NAME.XXXXXX, traps set
#   harness_up               gftopo up "$TOPO" (down again on exit); a topology whose `cc`
#                            the host does not allow namespaces to make their default (cubic
#                            where the host's default is bbr) gets it added to
#                            net.ipv4.tcp_allowed_congestion_control for the run, restored on exit
#   ns NODE CMD...           runs CMD in NODE's namespace
#   start NAME NODE CMD...   starts a daemon in NODE's namespace, waits for "listening on"
#                            and sets LISTEN=HOST:PORT (not in $(...): the pid is recorded here)
# KEEP_WORK=1 keeps the work directory (logs) for inspection.
harness_init() {
  WORK=$(mktemp -d "/dev/shm/gfrep-$1.XXXXXX")
  PIDS=()
  TOPO_UP=0
  trap harness_cleanup EXIT
  trap 'exit 130' INT TERM
}
harness_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if ((${#PIDS[@]})); then
    kill -TERM "${PIDS[@]}" 2>/dev/null || true
    sleep 1
    kill -KILL "${PIDS[@]}" 2>/dev/null || true
    wait "${PIDS[@]}" 2>/dev/null || true
  fi
  ((TOPO_UP)) && "$BIN/gftopo" down "$TOPO" >/dev/null 2>&1
  [[ -n ${ALLOWED_CC_BEFORE:-} ]] && echo "$ALLOWED_CC_BEFORE" >/proc/sys/net/ipv4/tcp_allowed_congestion_control
  if [[ -n ${KEEP_WORK:-} ]]; then echo "logs kept in $WORK" >&2; else rm -rf "$WORK"; fi
  exit "$rc"
}
harness_up() {
  local file=$TOPO cc allowed
  [[ -f $file ]] || file=tools/topologies/$TOPO.topo
  cc=$(awk '$1 == "cc" { print $2 }' "$file" 2>/dev/null || true)
  allowed=$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control)
  if [[ -n $cc && " $allowed " != *" $cc "* ]]; then
    ALLOWED_CC_BEFORE=$allowed
    echo "$allowed $cc" >/proc/sys/net/ipv4/tcp_allowed_congestion_control
  fi
  TOPO_UP=1
  "$BIN/gftopo" up "$TOPO" >&2
}
ns() { local n=$1; shift; ip netns exec "gfrep-$n" "$@"; }
start() {
  local name=$1 node=$2; shift 2
  ip netns exec "gfrep-$node" "$@" >"$WORK/$name.out" 2>"$WORK/$name.log" &
  PIDS+=($!)
  for _ in $(seq 300); do
    if grep -q '^listening on ' "$WORK/$name.out" 2>/dev/null; then
      LISTEN=$(sed -n 's/^listening on //p' "$WORK/$name.out" | head -1)
      return 0
    fi
    sleep 0.1
  done
  cat "$WORK/$name.log" >&2
  return 1
}
# serve_iperf NODE ADDR: starts a one-shot iperf3 server in NODE's namespace on ADDR and waits
# until it listens (ss, so that no probe uses up its one test); a fixed sleep raced with the
# client under load.
serve_iperf() {
  local node=$1 addr=$2 pid
  # ip netns exec execs iperf3: $! is iperf3's pid (through the ns function it was a subshell's).
  ip netns exec "gfrep-$node" iperf3 -s -1 -B "$addr" >/dev/null 2>&1 &
  pid=$!
  PIDS+=("$pid")
  for _ in $(seq 300); do
    # The namespace is this run's own: a listener on the address is the iperf3 just started.
    if ns "$node" ss -Hltn "src $addr:5201" | grep -q .; then return 0; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "error: iperf3 -s did not listen on $addr:5201 in $node" >&2
  return 1
}
