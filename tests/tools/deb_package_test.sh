#!/usr/bin/env bash
# The Debian package (tools/packaging/cpack.cmake): built by cpack from the built tree into a
# temporary directory, inspected with dpkg-deb, unpacked into a scratch root with dpkg -x,
# and its contents checked: every tool, the units, the example settings, the libraries,
# headers and CMake package; an unpacked binary runs and reads the packaged settings.
#   deb_package_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d /tmp/gfrep-deb-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
for tool in cpack dpkg-deb dpkg dpkg-shlibdeps; do
  command -v "$tool" >/dev/null || fail "$tool not found (tools/setup-deps installs dpkg-dev)"
done

version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
[ -n "$version" ] || fail "no CPACK_PACKAGE_VERSION in $build/CPackConfig.cmake"

# 1. Build the package (reuses the built tree: nothing is compiled).
start=$(date +%s)
cpack --config "$build/CPackConfig.cmake" -B "$work/out" >"$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log" >&2; fail "cpack -G DEB failed"; }
debs=("$work"/out/*.deb)
[ ${#debs[@]} -eq 1 ] && [ -f "${debs[0]}" ] || fail "expected one .deb in $work/out: ${debs[*]}"
deb=${debs[0]}
echo "built $(basename "$deb") ($(du -h "$deb" | cut -f1)) in $(($(date +%s) - start)) s"
[ "$(basename "$deb")" = "gfrep_${version}_$(dpkg --print-architecture).deb" ] || fail "file name $(basename "$deb")"

# zstd members (tools/packaging/cpack.cmake), which dpkg -x below must read.
members=$(ar t "$deb")
grep -qx 'data.tar.zst' <<<"$members" || fail "data member is not zstd: $(tr '\n' ' ' <<<"$members")"

# 2. Control data.
info=$(dpkg-deb -I "$deb")
grep -q "^ Package: gfrep$" <<<"$info" || fail "Package: $info"
grep -q "^ Version: ${version}$" <<<"$info" || fail "Version: $info"
depends=$(echo "$info" | sed -n 's/^ Depends: //p')
for dep in adduser libc6 libstdc++6 'libgrpc++1.51' libprotobuf32 libssl3; do
  grep -q "^ *${dep}\b" <<<"${depends//,/$'\n'}" || fail "Depends lacks $dep (dpkg-shlibdeps): $depends"
done
for script in postinst prerm postrm; do
  grep -Eq "^ +[0-9]+ bytes, +[0-9]+ lines +\* +$script " <<<"$info" ||
    fail "maintainer script $script missing or not executable: $info"
done
dpkg-deb -e "$deb" "$work/control"
for script in postinst prerm postrm; do
  sh -n "$work/control/$script" || fail "$script: shell syntax"
done
grep -q "adduser --system" "$work/control/postinst" || fail "postinst does not create the system user"

# 3. Contents: every tool (tools/*.cc is one program each), nothing from tests/.
listing=$(dpkg-deb -c "$deb" | awk '{print $6}')
# Every check reads the listing from a here-string, never `echo | grep -q`: under pipefail
# that pipe fails when grep quits at its match before echo's last write (bash writes 4096 bytes,
# then line by line), and three clean-clone CI runs reported /usr/bin/gfprobe, /usr/bin/gfauth
# and gfrepConfig.cmake missing, each in the listing's first 4096 bytes. A file missing from the
# package says what cpack did and what /usr/bin held.
has() {
  grep -qx "\./$1" <<<"$listing" && return 0
  echo "--- /usr/bin in the package:" >&2
  echo "$listing" | grep '^\./usr/bin/' >&2 || true
  echo "--- the end of cpack's log:" >&2
  tail -n 40 "$work/cpack.log" >&2
  ls -l "$build/bin" >&2 || true
  fail "not in the package: /$1"
}
tools=0
for cc in "$src"/tools/*.cc; do
  has "usr/bin/$(basename "$cc" .cc)"
  tools=$((tools + 1))
done
[ "$tools" -ge 20 ] || fail "only $tools tools found in $src/tools"
grep -E '_test|_tests|/bench' <<<"$listing" && fail "test programs are packaged"
has usr/lib/systemd/system/gfsited.service
has usr/lib/systemd/system/gfcatalogd.service
has usr/share/gfrep/examples/gfsited.toml
has usr/share/gfrep/examples/gfcatalogd.toml
for lib in transfer catalog netprobe replica_core replica_plan replica_agent replica_client replica_web replica_daemon; do
  grep -Eq "^\./usr/lib/([^/]+/)?libgfrep_${lib}\.a$" <<<"$listing" || fail "libgfrep_${lib}.a not packaged"
done
# Public headers (tools/packaging/library.cmake puts them under include/gfrep/), never internal/.
grep -Eq '^\./usr/include/(gfrep/)?transfer/client\.h$' <<<"$listing" || fail "transfer/client.h not packaged"
grep -Eq '^\./usr/include/(gfrep/)?catalog/client\.h$' <<<"$listing" || fail "catalog/client.h not packaged"
grep -q '^\./usr/include/.*/internal/.' <<<"$listing" && fail "internal headers are packaged"
grep -Eq '^\./usr/lib/([^/]+/)?cmake/gfrep/gfrepConfig\.cmake$' <<<"$listing" || fail "CMake package not packaged"

# 4. Unpacked into a scratch root: binaries run, read the packaged settings, units match.
root="$work/root"
dpkg -x "$deb" "$root"
for daemon in gfsited gfcatalogd gfcp gfls; do
  out=$("$root/usr/bin/$daemon" --version) || fail "$daemon --version failed"
  [ "$out" = "$version" ] || fail "$daemon --version printed '$out', not $version"
done
for daemon in gfsited gfcatalogd; do
  "$root/usr/bin/$daemon" --config "$root/usr/share/gfrep/examples/$daemon.toml" --print-config >"$work/$daemon.conf" ||
    fail "$daemon refuses its packaged example settings"
  grep -q '^listen=' "$work/$daemon.conf" || fail "$daemon --print-config shows no listen"
  cmp "$root/usr/lib/systemd/system/$daemon.service" "$src/tools/packaging/systemd/$daemon.service" ||
    fail "packaged $daemon.service differs from the source"
  grep -q "^ExecStart=/usr/bin/$daemon --config /etc/gfrep/$daemon.toml$" "$root/usr/lib/systemd/system/$daemon.service" ||
    fail "$daemon.service ExecStart"
done
if command -v systemd-analyze >/dev/null; then
  mkdir "$work/units"
  for daemon in gfsited gfcatalogd; do
    sed "s|/usr/bin/|$root/usr/bin/|" "$root/usr/lib/systemd/system/$daemon.service" >"$work/units/$daemon.service"
  done
  msgs=$(systemd-analyze verify "$work"/units/*.service 2>&1) || fail "systemd-analyze verify: $msgs"
  [ -z "$msgs" ] || fail "systemd-analyze verify complained: $msgs"
fi
echo "PASS: $(grep -vc '/$' <<<"$listing") files, $tools tools"
