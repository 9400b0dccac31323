#!/usr/bin/env bash
# tools/check-layering: the checkout keeps the layout's rules, and each kind of broken
# include, planted in a copy of the sources, is found and named (file, line, rule).
#   check_layering_test.sh SOURCE_DIR
set -euo pipefail
src=$1
work=$(mktemp -d /tmp/gfrep-layering-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
check="$src/tools/check-layering"

out=$("$check" --root "$src") || fail "the checkout breaks the rules: $out"
echo "$out"

# plant FILE LINE: copies the library and tool sources, adds LINE to FILE (created if new)
# and expects check-layering to fail naming FILE and the included path.
plant() {
  local file=$1 line=$2 want=$3
  rm -rf "$work/tree"
  mkdir -p "$work/tree"
  (cd "$src" && find transfer catalog netprobe replica tools \( -name '*.h' -o -name '*.cc' \) \
     -exec cp --parents -t "$work/tree" {} +)
  mkdir -p "$(dirname "$work/tree/$file")"
  printf '%s\n' "$line" >>"$work/tree/$file"
  local status=0 got
  got=$("$check" --root "$work/tree" 2>&1) || status=$?
  [ "$status" -eq 1 ] || fail "planted '$line' in $file: exit $status, not 1: $got"
  echo "$got" | grep -F "$file:" | grep -F "$want" >/dev/null ||
    fail "planted '$line' in $file: the report does not name it with '$want': $got"
  echo "found: $(echo "$got" | grep -F "$file:" | head -n 1)"
}
plant transfer/copy.cc '#include "replica/client/reader.h"' "dependencies point one way"
plant catalog/catalog.h '#include "netprobe/topology.h"' "dependencies point one way"
plant replica/client/reader.cc '#include "tools/internal/cli.h"' "nothing includes tools/"
plant tools/gfls.cc '#include "catalog/internal/codec.h"' "catalog/internal/ is private to catalog/"
plant replica/core/planted.h '#include "replica/agent/site_agent.h"' "replica/core/ never includes replica/agent/"
plant replica/client/planted.cc '#include "replica/web/dashboard.h"' "replica/client/ never includes replica/web/"
plant replica/agent/planted.cc '#include "replica/plan/planner.h"' "replica/agent/ never includes replica/plan/"
plant replica/plan/planted.cc '#include "replica/daemon/sited.h"' "replica/plan/ never includes replica/daemon/"
plant replica/web/planted.cc '#include "replica/agent/internal/x.h"' "replica/agent/internal/ is private to replica/agent/"
echo "check-layering finds every planted break"
