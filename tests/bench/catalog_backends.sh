#!/usr/bin/env bash
# tests/bench/catalog_backends.sh: the catalog's throughput on RocksDB, on PostgreSQL with one
# front end, and on PostgreSQL with two front ends (gfcatalogd --shared), one after the other
# in one run (catalog_amga_bench's throughput part; its ls part runs on a one-directory tree
# only). Needs a built tree (GFREP_BIN, default build/bin) and PostgreSQL (tools/setup-deps).
#
#   tests/bench/catalog_backends.sh [extra catalog_amga_bench flags, e.g. --seconds 3]
#
# Prints each run's tables with the 1-minute load average before it. A private PostgreSQL
# server is started in a temporary directory (tools/pg-private) and stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${GFREP_BIN:-build/bin}
[[ -x $BIN/catalog_amga_bench ]] || { echo "catalog_backends: no $BIN/catalog_amga_bench (build first)" >&2; exit 1; }
PG=$(mktemp -d /tmp/gfrep-bench-pg.XXXXXX)
cleanup() {
  tools/pg-private stop "$PG" >/dev/null 2>&1 || true
  rm -rf "$PG"
}
trap cleanup EXIT
db() { tools/pg-private start "$PG" "$1"; }
common=(--max-dirs 1 --samples 10 --baseline-samples 1 "$@")
load() { cut -d' ' -f1 /proc/loadavg; }

echo "### RocksDB (load $(load), $(date -u +%H:%M:%S) UTC)"
"$BIN/catalog_amga_bench" "${common[@]}"
echo
echo "### PostgreSQL, one front end (load $(load), $(date -u +%H:%M:%S) UTC)"
"$BIN/catalog_amga_bench" "${common[@]}" --tree-db "$(db tree1)" --db "$(db durable1)"
echo
echo "### PostgreSQL, two front ends --shared (load $(load), $(date -u +%H:%M:%S) UTC)"
"$BIN/catalog_amga_bench" "${common[@]}" --tree-db "$(db tree2)" --db "$(db durable2)" --front-ends 2
echo
echo "end: load $(load), $(date -u +%H:%M:%S) UTC"
