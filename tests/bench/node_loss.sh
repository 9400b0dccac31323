#!/bin/bash
# Time from a node's death to every affected file back at its count (issue 40), on loopback:
# gfcatalogd (planner, repairer) and four gfsited (a1 at site A, b1 and b2 at B, c1 at C).
# FILES x SIZE stored at a1 (gfreg -r), gfrep -N 3 -r puts one copy per site; then b1's agent
# is killed (SIGKILL) for good. Printed: the kill, the moment the catalog judged b1 dead, and
# the moment every file b1 held had three complete copies on live nodes again (re-made on b2).
# The reference in the same run: the same federation's gfrep -N 3 -r, per file copied.
# MODE=drain: b1 is drained instead (gfnode drain b1 --wait), its agent running: the time from
# the command to its end, and to every file back at three copies without b1.
#   tests/bench/node_loss.sh   (after tools/build; results: tests/bench/RESULTS.md)
# Environment: BIN (default build/bin), FILES (1000), SIZE (4M), DEAD_AFTER (30 s),
# NODE_TIMEOUT (10 s), MODE (kill or drain), KEEP=1 keeps the work directory.
set -euo pipefail
BIN=${BIN:-$(cd "$(dirname "$0")/../.." && pwd)/build/bin}
FILES=${FILES:-1000}
SIZE=${SIZE:-4M}
DEAD_AFTER=${DEAD_AFTER:-30}
NODE_TIMEOUT=${NODE_TIMEOUT:-10}
MODE=${MODE:-kill}
W=$(mktemp -d /tmp/gfrep-node-loss.XXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ ${KEEP:-0} == 1 ]] || rm -rf "$W"
}
trap cleanup EXIT
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

"$BIN/gfcatalogd" --db "$W/db" --listen 127.0.0.1:0 --node-timeout "$NODE_TIMEOUT" \
  --node-dead-after "$DEAD_AFTER" >"$W/cat.out" 2>"$W/cat.log" &
PIDS+=($!)
for _ in $(seq 100); do grep -q "listening on" "$W/cat.out" 2>/dev/null && break; sleep 0.1; done
export GFREP_CATALOG=$(sed -n 's/^listening on //p' "$W/cat.out" | head -1)
for s in A B C; do "$BIN/gfsite" add "$s"; done
declare -A AGENT SITE=([a1]=A [b1]=B [b2]=B [c1]=C)
for n in a1 b1 b2 c1; do
  "$BIN/gfsited" --listen 127.0.0.1:0 --spool "$W/spool-$n" --site "${SITE[$n]}" --node "$n" \
    --catalog "$GFREP_CATALOG" --key-file "$W/key" >"$W/$n.out" 2>"$W/$n.log" &
  PIDS+=($!)
  AGENT[$n]=$!
done
for _ in $(seq 100); do
  [[ $("$BIN/gfnode" list 2>/dev/null | wc -l) -ge 4 ]] && break
  sleep 0.1
done

mkdir -p "$W/data"
(cd "$W/data" && head -c $(($(numfmt --from=iec "$SIZE") * FILES)) /dev/urandom |
  split -b "$SIZE" -a 5 -d - f)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
t=$(now)
"$BIN/gfreg" -r -j 8 "$W/data" /data --node a1 --key-file "$W/key" >/dev/null
echo "gfreg -r of $FILES x $SIZE at a1: $(since "$t" "$(now)") s"
t=$(now)
"$BIN/gfrep" -N 3 -r /data >/dev/null
copy_s=$(since "$t" "$(now)")
echo "gfrep -N 3 -r (the reference: $((2 * FILES)) copies): $copy_s s"

mapfile -t paths < <(cd "$W/data" && ls | sed 's|^|/data/|')
on_b1() {  # paths whose complete replica at B is on b1
  "$BIN/gfwhere" --json "${paths[@]}" |
    python3 -c 'import json,sys
for line in sys.stdin:
    j = json.loads(line)
    if any(r["node"] == "b1" and r["state"] == "complete" for r in j["replicas"]):
        print(j["path"])'
}
mapfile -t lost < <(on_b1)
echo "b1 holds ${#lost[@]} of the $FILES files' B copies"
load=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ $MODE == drain ]]; then
  t=$(now)
  "$BIN/gfnode" drain b1 --wait 1800
  t_drained=$(now)
  left=$("$BIN/gfwhere" --json "${lost[@]}" |
    python3 -c 'import json,sys
print(sum(len({r["node"] for r in json.loads(l)["replicas"] if r["state"] == "complete" and r["node"] != "b1"}) < 3 for l in sys.stdin))')
  echo "load at the drain: $load; after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "gfnode drain b1 --wait: $(since "$t" "$t_drained") s for ${#lost[@]} files; files short of 3 copies without b1 then: $left"
  awk -v r="$(since "$t" "$t_drained")" -v n="${#lost[@]}" -v c="$copy_s" -v f="$FILES" \
    'BEGIN { printf "per file drained: %.1f ms; per copy in gfrep -N 3 -r: %.1f ms; ratio %.2f\n", 1000 * r / n, 1000 * c / (2 * f), (r / n) / (c / (2 * f)) }'
  exit 0
fi
t_kill=$(now)
kill -KILL "${AGENT[b1]}"
t_dead=""
while :; do
  if [[ -z $t_dead && $("$BIN/gfnode" list | awk '$1 == "b1" {print $4}') == dead ]]; then
    t_dead=$(now)
  fi
  left=$("$BIN/gfwhere" --json "${lost[@]}" |
    python3 -c 'import json,sys
n = 0
for line in sys.stdin:
    j = json.loads(line)
    live = {r["node"] for r in j["replicas"] if r["state"] == "complete" and r["node"] != "b1"}
    n += len(live) < 3
print(n)')
  [[ $left == 0 && -n $t_dead ]] && break
  if (($(awk -v a="$t_kill" -v b="$(now)" 'BEGIN { print (b - a > 1800) }'))); then
    echo "not restored within 30 min: $left files short" >&2
    exit 1
  fi
  sleep 1
done
t_done=$(now)
echo "load at the kill: $load; after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "kill -> dead (gfnode list): $(since "$t_kill" "$t_dead") s (--node-dead-after $DEAD_AFTER)"
echo "kill -> every file back at 3 live copies: $(since "$t_kill" "$t_done") s"
echo "dead -> restored: $(since "$t_dead" "$t_done") s for ${#lost[@]} files (target: within 120 s)"
awk -v r="$(since "$t_dead" "$t_done")" -v n="${#lost[@]}" -v c="$copy_s" -v f="$FILES" \
  'BEGIN { printf "per file re-made: %.1f ms; per copy in gfrep -N 3 -r: %.1f ms; ratio %.2f\n", 1000 * r / n, 1000 * c / (2 * f), (r / n) / (c / (2 * f)) }'
grep -h "is dead" "$W/cat.log" | tail -1 | sed 's/^.*\] /gfcatalogd: /'
