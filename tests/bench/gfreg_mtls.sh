#!/bin/bash
# Wall clock of a user command against a plaintext and a mutual-TLS catalog: gfreg -r -j 8 of
# 300 x 64 KiB files to one gfsited on loopback (catalog, agent and CA made here, removed at exit).
#   tests/bench/gfreg_mtls.sh   (after tools/build; results: tests/bench/RESULTS.md)
# Environment: BIN (default build/bin), FILES (300; fewer for a smoke run).
set -euo pipefail
BIN=${BIN:-$(cd "$(dirname "$0")/../.." && pwd)/build/bin}
FILES=${FILES:-300}
W=$(mktemp -d /tmp/gfrep-mtls-wall.XXXX)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$W"' EXIT
mkdir -p "$W/small"; for i in $(seq "$FILES"); do head -c 65536 /dev/urandom > "$W/small/f$i"; done
"$BIN/gfca" init --dir "$W/ca" >/dev/null
"$BIN/gfca" issue catalog cat --dir "$W/ca" --host 127.0.0.1 >/dev/null
"$BIN/gfca" issue admin ops --dir "$W/ca" >/dev/null
"$BIN/gfca" issue node n1 --dir "$W/ca" --host 127.0.0.1 >/dev/null
for mode in plain mtls; do
  if [[ $mode == mtls ]]; then
    CF=(--tls-cert "$W/ca/cat.pem" --tls-key "$W/ca/cat.key" --tls-client-ca "$W/ca/ca.pem")
    AF=(--catalog-ca "$W/ca/ca.pem" --tls-cert "$W/ca/n1.pem" --tls-key "$W/ca/n1.key")
    export GFREP_CATALOG_CA=$W/ca/ca.pem GFREP_CERT=$W/ca/ops.pem GFREP_KEY=$W/ca/ops.key
  else
    CF=(); AF=(); unset GFREP_CATALOG_CA GFREP_CERT GFREP_KEY
  fi
  "$BIN/gfcatalogd" --db "$W/db-$mode" --listen 127.0.0.1:0 --no-planner "${CF[@]}" > "$W/cat-$mode.out" 2>"$W/cat-$mode.log" &
  PIDS+=($!)
  for _ in $(seq 100); do grep -q "listening on" "$W/cat-$mode.out" 2>/dev/null && break; sleep 0.1; done
  export GFREP_CATALOG=$(sed -n 's/^listening on //p' "$W/cat-$mode.out" | head -1)
  "$BIN/gfsite" add s1
  "$BIN/gfsited" --listen 127.0.0.1:0 --spool "$W/spool-$mode" --site s1 --node n1 --catalog "$GFREP_CATALOG" \
    --key-file "$W/key" "${AF[@]}" > "$W/agent-$mode.out" 2>"$W/agent-$mode.log" &
  PIDS+=($!)
  for _ in $(seq 100); do grep -q '^n1' <<<"$("$BIN/gfnode" list 2>/dev/null)" && break; sleep 0.1; done
  echo "$mode: load $(cut -d' ' -f1-3 /proc/loadavg)"
  s=$(date +%s.%N)
  "$BIN/gfreg" -r -j 8 "$W/small" /small --node n1 --key-file "$W/key"
  e=$(date +%s.%N)
  echo "$mode: gfreg -r -j 8 of $FILES x 64 KiB: $(awk -v a="$s" -v b="$e" 'BEGIN{printf "%.2f s", b-a}')"
done
