#!/bin/bash
# Wall clock of user commands against a mutual-TLS catalog, as an admin (no permission
# checks) and as a user (every call checks owner/group/mode): gfmkdir of 300 directories in
# one command, gfstat of those 300, gfls -R of the tree, in /home/u/a/b (owned by the user).
# Catalog and CA made here, removed at exit.
#   tests/bench/permissions_wall.sh [pairs]   (after tools/build; results: tests/bench/RESULTS.md)
set -euo pipefail
BIN=${BIN:-$(cd "$(dirname "$0")/../.." && pwd)/build/bin}
PAIRS=${1:-3}
W=$(mktemp -d /tmp/gfrep-perm-wall.XXXX)
PID=
trap '[[ -n $PID ]] && kill "$PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
"$BIN/gfca" init --dir "$W/ca" >/dev/null
"$BIN/gfca" issue catalog cat --dir "$W/ca" --host 127.0.0.1 >/dev/null
"$BIN/gfca" issue admin ops --dir "$W/ca" >/dev/null
"$BIN/gfca" issue user u --dir "$W/ca" >/dev/null
"$BIN/gfcatalogd" --db "$W/db" --listen 127.0.0.1:0 --no-planner --tls-cert "$W/ca/cat.pem" \
  --tls-key "$W/ca/cat.key" --tls-client-ca "$W/ca/ca.pem" >"$W/cat.out" 2>"$W/cat.log" &
PID=$!
for _ in $(seq 100); do grep -q "listening on" "$W/cat.out" 2>/dev/null && break; sleep 0.1; done
export GFREP_CATALOG=$(sed -n 's/^listening on //p' "$W/cat.out" | head -1) GFREP_CATALOG_CA=$W/ca/ca.pem
as() { GFREP_CERT=$W/ca/$1.pem GFREP_KEY=$W/ca/$1.key "${@:2}"; }
as ops "$BIN/gfmkdir" -p /home/u/a/b
as ops "$BIN/gfchown" -R u /home/u
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); awk -v a="$s" -v b="$e" 'BEGIN{printf "%.3f", b-a}'; }
echo "| pair | who | load | gfmkdir 300 s | gfstat 300 s | gfls -R s |"
echo "|---:|---|---:|---:|---:|---:|"
for pair in $(seq "$PAIRS"); do
  for who in ops u; do
    d=/home/u/a/b/$who$pair
    paths=(); for i in $(seq 300); do paths+=("$d-$i"); done
    load=$(cut -d' ' -f1 /proc/loadavg)
    mk=$(t as "$who" "$BIN/gfmkdir" "${paths[@]}")
    st=$(t as "$who" "$BIN/gfstat" "${paths[@]}")
    ls=$(t as "$who" "$BIN/gfls" -R /home/u)
    echo "| $pair | $who | $load | $mk | $st | $ls |"
  done
done
