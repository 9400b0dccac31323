#!/usr/bin/env bash
# tools/check-thread-safety: the libraries pass clang's thread-safety analysis, and a planted
# read of a guarded field without its lock is found and named (file and line).
#   check_thread_safety_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
check="$src/tools/check-thread-safety"
if ! command -v clang++ >/dev/null; then
  echo "no clang++ (tools/setup-deps installs it for the fuzz build): nothing to run"
  exit 77
fi
work=$(mktemp -d /tmp/gfrep-tsa-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$check" --build "$build" 2>&1) || fail "the libraries have findings: $out"
echo "$out"

cat >"$work/planted.cc" <<'CC'
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

class Counter {
 public:
  int Read() const { return value_; }  // planted: no lock held
  void Add() {
    absl::MutexLock lock(&mu_);
    ++value_;
  }

 private:
  mutable absl::Mutex mu_;
  int value_ ABSL_GUARDED_BY(mu_) = 0;
};
int Use(Counter& c) { c.Add(); return c.Read(); }
CC
status=0
got=$("$check" --build "$build" --file "$work/planted.cc" 2>&1) || status=$?
[ "$status" -eq 1 ] || fail "the planted unlocked read: exit $status, not 1: $got"
grep -q "planted.cc:6:.*value_" <<<"$got" || fail "the report does not name planted.cc:6 and value_: $got"
echo "found: $(echo "$got" | grep -m1 'planted.cc:6')"
