#!/usr/bin/env bash
# tools/run-tests refuses at once, before installing or building anything, when the disk
# cannot hold a whole run, and says how much is free and how much is needed; with enough room
# it goes on to set-up. (A full disk used to show as a PostgreSQL that would not start and a
# linker error 16 minutes into CI.)
#   run_tests_disk_test.sh SOURCE_DIR
set -euo pipefail
src=$1
work=$(mktemp -d /tmp/gfrep-run-tests-disk.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -p "$work/tools"
cp "$src/tools/run-tests" "$work/tools/run-tests"
# A stand-in for setup-deps that only leaves a mark: the refused run must not reach it.
printf '#!/bin/sh\ntouch "%s/setup-ran"\nexit 3\n' "$work" >"$work/tools/setup-deps"
chmod +x "$work/tools/setup-deps" "$work/tools/run-tests"

status=0
out=$(GFREP_RUN_NEEDS_GIB=1000000 "$work/tools/run-tests" 2>&1) || status=$?
[ "$status" -eq 28 ] || fail "a disk far too small: exit $status, not 28: $out"
echo "$out" | grep -E "[0-9]+ MiB free on .* a whole run needs about 1024000000 MiB" >/dev/null ||
  fail "the refusal does not say what is free and what is needed: $out"
[ ! -e "$work/setup-ran" ] || fail "set-up ran although the disk was refused"
[ ! -e "$work/build" ] || fail "a build directory was made although the disk was refused"
echo "refused: $out"

status=0
out=$(GFREP_RUN_NEEDS_GIB=0 "$work/tools/run-tests" 2>&1) || status=$?
[ -e "$work/setup-ran" ] || fail "with room enough set-up did not run (exit $status): $out"
[ "$status" -eq 3 ] || fail "the stand-in set-up's failure was not passed on: exit $status: $out"
echo "with room enough: set-up ran"
