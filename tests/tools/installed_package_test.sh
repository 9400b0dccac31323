#!/usr/bin/env bash
# The installed package, used from outside the tree (issue 14):
#   1. cmake --install the build's "lib" and "dev" components into a scratch prefix;
#   2. no internal/ header is installed, and every installed header compiles, all in one
#      translation unit, with only the prefix and `pkg-config --cflags gfrep` (so no public
#      header includes a header that was not installed);
#   3. tools/examples/copy configures (find_package(gfrep), Ninja) and builds against it;
#   4. a second program that uses transfer, catalog and replica compiles and links with
#      nothing but `pkg-config --cflags --libs --static gfrep`;
#   5. two gfsited agents (from the build) on 127.0.0.1 port 0: the example copies local -> A,
#      A -> B (third party) and B -> local, the pkg-config program copies A -> local; every
#      copy is compared byte for byte with cmp.
# Everything lives in one temporary directory, removed on every exit; the agents are stopped
# by pid.
#
# usage: installed_package_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail

build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gfrep-installed-XXXXXX")
pids=()
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  if [[ $rc -ne 0 ]]; then
    for f in "$tmp"/*.log; do
      [[ -f $f ]] && { echo "--- $f"; tail -n 40 "$f"; }
    done
  fi
  rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
step() { echo "== $*"; }

prefix=$tmp/prefix
step "install (components lib, dev) into $prefix"
for component in lib dev; do
  cmake --install "$build" --prefix "$prefix" --component "$component" >>"$tmp/install.log"
done
pc=$(find "$prefix" -name gfrep.pc -path '*/pkgconfig/*' | head -n 1)
[[ -n $pc ]] || fail "no gfrep.pc installed"
[[ -f $(dirname "$(dirname "$pc")")/cmake/gfrep/gfrepConfig.cmake ]] || fail "no gfrepConfig.cmake beside gfrep.pc's libdir"
export PKG_CONFIG_PATH=$(dirname "$pc")
pkg-config --exists gfrep || fail "pkg-config does not accept gfrep.pc"

step "public headers only, and self-sufficient"
[[ -f $prefix/include/gfrep/transfer/copy.h ]] || fail "transfer/copy.h not installed"
[[ -f $prefix/include/gfrep/replica/client/replicate.h ]] || fail "replica/client/replicate.h not installed"
if [ -n "$(find "$prefix/include" -path '*internal*')" ]; then
  fail "internal headers installed: $(find "$prefix/include" -path '*internal*' | head -n 3)"
fi
headers=$(cd "$prefix/include/gfrep" && find . -name '*.h' | sed 's|^\./||' | sort)
[[ $(echo "$headers" | wc -l) -ge 10 ]] || fail "too few headers installed: $headers"
for h in $headers; do echo "#include \"$h\""; done >"$tmp/all_headers.cc"
echo 'int main() { return 0; }' >>"$tmp/all_headers.cc"
# -nostdinc++ is not used: the standard and Debian's dependency headers are system headers; the
# source tree is deliberately not on the path (the compile runs in $tmp).
(cd "$tmp" && g++ -std=c++20 -fsyntax-only all_headers.cc $(pkg-config --cflags gfrep) 2>"$tmp/headers.log") ||
  fail "installed headers do not compile on their own (see headers.log)"

step "tools/examples/copy against the CMake package (Ninja)"
cmake -S "$src/tools/examples/copy" -B "$tmp/example" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$tmp/example-configure.log" 2>&1 || fail "example: configure failed"
grep -q "$prefix" "$tmp/example/CMakeCache.txt" || fail "example did not find gfrep under the prefix"
cmake --build "$tmp/example" >"$tmp/example-build.log" 2>&1 || fail "example: build failed"
example=$tmp/example/copy

step "a program built with pkg-config --static only"
cat >"$tmp/pc_copy.cc" <<'EOF'
// pc_copy SRC DST KEY_FILE: Copy() with two streams, after making a catalog client and checking
// a replication option set (so transfer, catalog and replica are all linked in).
#include <cstdio>

#include "catalog/client.h"
#include "replica/client/replicate.h"
#include "transfer/auth.h"
#include "transfer/copy.h"

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  gfrep::catalog::ClientOptions c;
  c.address = "127.0.0.1:1";
  auto client = gfrep::catalog::CatalogClient::Create(c);
  if (!client.ok()) return std::fprintf(stderr, "%s\n", client.status().ToString().c_str()), 1;
  gfrep::replica::client::ReplicateOptions r;
  r.copies = 0;
  if (gfrep::replica::client::Validate(r).ok()) return std::fprintf(stderr, "0 copies accepted\n"), 1;
  gfrep::transfer::TransferOptions o;
  o.route.streams = 2;
  auto key = gfrep::transfer::LoadOrCreateSharedKey(argv[3]);
  if (!key.ok()) return std::fprintf(stderr, "%s\n", key.status().ToString().c_str()), 1;
  o.shared_key = *key;
  auto s = gfrep::transfer::Copy(argv[1], argv[2], o);
  if (!s.ok()) return std::fprintf(stderr, "%s\n", s.status().ToString().c_str()), 1;
  std::printf("pc_copy: %llu bytes\n", static_cast<unsigned long long>(s->bytes));
  return 0;
}
EOF
(cd "$tmp" && g++ -std=c++20 -o pc_copy pc_copy.cc $(pkg-config --cflags --libs --static gfrep) \
  >"$tmp/pc-build.log" 2>&1) || fail "pkg-config program: compile/link failed"

step "two gfsited agents"
key=$tmp/shared_key
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$key")
start_agent() {  # start_agent NAME: prints HOST:PORT
  local name=$1
  mkdir -p "$tmp/$name"
  "$build/bin/gfsited" --listen 127.0.0.1:0 --spool "$tmp/$name" --key-file "$key" \
    >"$tmp/$name-out.log" 2>"$tmp/$name-err.log" &
  pids+=($!)
  for _ in $(seq 1 200); do
    if grep -q '^listening on ' "$tmp/$name-out.log"; then
      sed -n 's/^listening on //p' "$tmp/$name-out.log" | head -n 1
      return 0
    fi
    kill -0 "${pids[-1]}" 2>/dev/null || fail "gfsited $name exited (see $name-err.log)"
    sleep 0.05
  done
  fail "gfsited $name did not start listening"
}
# Not in $(...): the agent must be a child of this shell, so that pids and wait work.
start_agent a >"$tmp/a.addr"
start_agent b >"$tmp/b.addr"
a=$(cat "$tmp/a.addr")
b=$(cat "$tmp/b.addr")
[[ $a == 127.0.0.1:* && $b == 127.0.0.1:* ]] || fail "bad agent addresses '$a' '$b'"

step "copies with the example (local -> A, A -> B, B -> local) and the pkg-config program"
head -c $((5 * 1024 * 1024 + 4321)) /dev/urandom >"$tmp/source.dat"
"$example" "$tmp/source.dat" "gf://$a/in/source.dat" 4 "$key" | tee "$tmp/copy1.out"
cmp "$tmp/source.dat" "$tmp/a/in/source.dat" || fail "local -> A: bytes differ"
grep -q 'MB/s' "$tmp/copy1.out" || fail "the example printed no rate"
"$example" "gf://$a/in/source.dat" "gf://$b/out/copy.dat" 4 "$key" | tee "$tmp/copy2.out"
cmp "$tmp/source.dat" "$tmp/b/out/copy.dat" || fail "A -> B (third party): bytes differ"
"$example" "gf://$b/out/copy.dat" "$tmp/back.dat" 8 "$key" >/dev/null
cmp "$tmp/source.dat" "$tmp/back.dat" || fail "B -> local: bytes differ"
"$tmp/pc_copy" "gf://$a/in/source.dat" "$tmp/pc.dat" "$key"
cmp "$tmp/source.dat" "$tmp/pc.dat" || fail "pkg-config program, A -> local: bytes differ"
# A failing copy fails the program (a missing source).
if "$example" "gf://$a/in/missing.dat" "$tmp/missing.dat" 1 "$key" 2>"$tmp/missing.log"; then
  fail "copying a missing file succeeded"
fi
grep -q NOT_FOUND "$tmp/missing.log" || fail "missing source not reported as NOT_FOUND: $(cat "$tmp/missing.log")"
echo "PASS"
