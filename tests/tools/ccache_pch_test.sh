#!/usr/bin/env bash
# The build's compiler launcher (CMakeLists.txt: ccache) never hands out a precompiled header
# made from other headers: a header whose comments changed since the cached PCH was made must
# give a new PCH. (With ccache's preprocessor mode the comment-only change hashed the same, the
# old PCH came back, and GCC, whose PCH remembers each #pragma once header by size and
# checksum, took the header for another file and included it a second time: "redefinition"
# in a fresh clone of a commit that only changed comments in catalog/types.h.)
#   ccache_pch_test.sh CXX [LAUNCHER ARGS...]   (no launcher: skipped, exit 77)
set -euo pipefail
cxx=$1
shift
if [ $# -eq 0 ]; then
  echo "no compiler launcher in this build: nothing to test"
  exit 77
fi
launcher=("$@")
work=$(mktemp -d /tmp/gfrep-ccache-pch.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
export CCACHE_DIR="$work/cache"  # a cache of its own: the build's is left alone
fail() { echo "FAIL: $*" >&2; exit 1; }

printf '#pragma once\n// first version of a comment\nstruct Thing { int x; };\n' >h.h
echo '#include "h.h"' >pch.hxx
printf '#include "h.h"\nint main() { Thing t{1}; return t.x - 1; }\n' >main.cc
pch() { "${launcher[@]}" "$cxx" -std=c++20 -x c++-header -I. pch.hxx -MD -MF pch.d -o pch.hxx.gch; }

pch || fail "the first PCH did not compile"
sed -i 's/first version of a comment/second, longer version of the comment/' h.h
pch || fail "the second PCH did not compile"
"${launcher[@]}" "$cxx" -std=c++20 -Winvalid-pch -I. -include pch.hxx -c main.cc -o main.o 2>compile.log ||
  fail "a source that includes the changed header failed against the PCH: $(head -n 5 compile.log)"
# And the cache still serves what did not change.
rm -f pch.hxx.gch
pch || fail "the third PCH did not compile"
stats=$(ccache --print-stats 2>/dev/null || true)
hits=$(echo "$stats" | awk -F'\t' '$1 == "direct_cache_hit" {print $2}')
[ "${hits:-0}" -ge 1 ] || fail "the unchanged PCH was not served from the cache: $stats"
echo "a comment-only change makes a new PCH; an unchanged one comes from the cache"
