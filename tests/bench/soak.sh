#!/usr/bin/env bash
# One-hour soak of a whole federation (the hour is not in CI, a 20-s run is: ctest -L bench_smoke;
# results: tests/bench/RESULTS.md "Soak"):
# three sites on loopback with mutual TLS, a client loop storing, replicating, reading,
# rewriting and deleting files continuously, the catalog restarted every 10 minutes (SIGTERM
# and SIGKILL in turn), every daemon's RSS sampled each minute. Pass: flat memory (under 5 %
# growth after the first 10 minutes), 0 files lost, 0 wrong bytes served. Details and flags:
# tests/bench/soak.py --help.
#   tests/bench/soak.sh [--minutes 60] [--restart-every 10] [--files 300] [--json-out F]
# Environment: GFREP_BIN (default: tools/build).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${GFREP_BIN:-$(tools/build)/bin}
exec python3 tests/bench/soak.py --bin "$BIN" "$@"
