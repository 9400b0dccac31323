#!/usr/bin/env bash
# The project's shell scripts that set pipefail never pipe into `grep -q`: grep quits at its
# first match, a writer still writing gets SIGPIPE, and under pipefail the whole pipeline
# fails although the line was there. bash's echo writes 4096 bytes and then line by line, so
# `echo "$listing" | grep -q X` fails now and then for an X in the first 4096 bytes (three
# clean-clone CI runs of deb_package_test). A here-string (`grep -q X <<<"$listing"`) has no
# writer to kill. Checks tools/, tests/ and .ci/, and that a planted pipe is found.
#   shell_pipes_test.sh SOURCE_DIR
set -euo pipefail
src=$1
work=$(mktemp -d /tmp/gfrep-shell-pipes-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# scan ROOT: prints FILE:LINE: TEXT for each pipe into grep -q (or --quiet) in a shell script
# under ROOT's tools/, tests/ and .ci/ that sets pipefail; comment lines are skipped.
scan() {
  local root=$1 f first
  while IFS= read -r -d '' f; do
    first=
    IFS= read -r first <"$f" || true
    [[ $first =~ ^\#!.*(^|[/ ])(ba)?sh($|[[:space:]]) ]] || continue
    grep -q 'pipefail' "$f" || continue
    grep -nE '\|[[:space:]]*grep[[:space:]]+(-[A-Za-z]*q|--quiet)' "$f" |
      grep -vE '^[0-9]+:[[:space:]]*#' | sed "s|^|${f#"$root"/}:|" || true
  done < <(find "$root/tools" "$root/tests" "$root/.ci" -type f -print0 2>/dev/null)
}

found=$(scan "$src")
[ -z "$found" ] || fail "pipes into grep -q under pipefail (use a here-string):
$found"
echo "no pipe into grep -q in the scripts that set pipefail"

mkdir -p "$work/tree/tests" "$work/tree/tools"
bar='|'  # the planted lines are built so that this file does not hold them
printf '%s\n' '#!/usr/bin/env bash' 'set -euo pipefail' 'x=$(ls)' \
  "# echo \"\$x\" $bar grep -q skipped-comment" "echo \"\$x\" $bar grep -Eq ^a || exit 1" \
  >"$work/tree/tests/planted.sh"
printf '%s\n' '#!/bin/sh' "echo \"\$x\" $bar grep -q b" >"$work/tree/tools/no-pipefail"
got=$(scan "$work/tree")
[ "$got" = "tests/planted.sh:5:echo \"\$x\" $bar grep -Eq ^a || exit 1" ] ||
  fail "the planted pipe was not found alone: '$got'"
echo "found: $got"
