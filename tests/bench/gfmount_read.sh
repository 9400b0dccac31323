#!/bin/bash
# gfmount read benchmark (results in tests/bench/RESULTS.md; a small run is ctest
# bench_smoke.gfmount_read): a catalog and one node (n1 of site S) on loopback, a SIZE_MB
# file stored at n1, the namespace mounted as n1.
#   1. local read: dd bs=1M of the replica file in n1's spool (plain) against dd bs=1M of the
#      same file through the mount (FUSE, pread of the replica's descriptor), and a re-read
#      through the mount (same generation: the kernel kept its pages), best of REPEAT; with
#      DROP_CACHES=1 (root) the page cache is dropped before each cold read, else every read
#      comes from memory (the FUSE path's own cost, no disk) and each mount read is a fresh
#      mount (no pages kept from the previous one);
#   2. `ls -l` of a directory of ENTRIES entries through the mount: first (cold: one listing
#      from the catalog) and again (within the TTL: no catalog call), against `gfls -l`.
# Needs root (FUSE mount). Everything is made under a temporary directory and removed at exit
# (processes stopped by pid, the mount taken down).
#   tests/bench/gfmount_read.sh [SIZE_MB] [ENTRIES]      (after tools/build)
#   REPEAT=3 DROP_CACHES=1 tests/bench/gfmount_read.sh 1024 10000
#   GFMOUNT_FLAGS="--readahead-kb 128" ... (extra gfmount flags)
set -euo pipefail
BIN=${BIN:-$(cd "$(dirname "$0")/../.." && pwd)/build/bin}
SIZE_MB=${1:-1024}
ENTRIES=${2:-10000}
REPEAT=${REPEAT:-3}
DROP_CACHES=${DROP_CACHES:-0}
[[ $(id -u) -eq 0 && -e /dev/fuse ]] || { echo "gfmount_read: needs root and /dev/fuse" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/gfrep-gfmount-bench.XXXX")
CAT_PID= AGENT_PID= MOUNT_PID=
unmount() {
  if [[ -n $MOUNT_PID ]]; then kill -TERM "$MOUNT_PID" 2>/dev/null || true; wait "$MOUNT_PID" 2>/dev/null || true; fi
  MOUNT_PID=
  if grep -q " $W/mnt " /proc/self/mountinfo; then fusermount3 -u -z "$W/mnt" || umount -l "$W/mnt"; fi
}
cleanup() {
  unmount
  for p in $AGENT_PID $CAT_PID; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/mnt" "$W/spool"
(umask 077; od -An -tx1 -N32 /dev/urandom | tr -d " \n" >"$W/key")
"$BIN/gfcatalogd" --db "$W/db" --listen 127.0.0.1:0 --no-planner >"$W/cat.out" 2>"$W/cat.log" &
CAT_PID=$!
for _ in $(seq 100); do grep -q "listening on" "$W/cat.out" 2>/dev/null && break; sleep 0.1; done
export GFREP_CATALOG=$(sed -n 's/^listening on //p' "$W/cat.out" | head -1)
"$BIN/gfsited" --listen 127.0.0.1:0 --spool "$W/spool" --site S --node n1 --catalog "$GFREP_CATALOG" \
  --key-file "$W/key" >"$W/agent.out" 2>"$W/agent.log" &
AGENT_PID=$!
for _ in $(seq 100); do grep -q n1 <<<"$("$BIN/gfnode" list 2>/dev/null)" && break; sleep 0.1; done

head -c $((SIZE_MB << 20)) /dev/urandom >"$W/src"
"$BIN/gfreg" "$W/src" /bench/big --node n1 --key-file "$W/key" >/dev/null
rm -f "$W/src"
inode=$("$BIN/gfstat" --json /bench/big | sed -n 's/.*"inode": *\([0-9]*\).*/\1/p')
replica="$W/spool/.gfrep-data/$inode/1"
[[ -f $replica ]] || { echo "gfmount_read: no replica at $replica" >&2; exit 1; }

mount() {
  "$BIN/gfmount" "$GFREP_CATALOG" "$W/mnt" --site S --node n1 --key-file "$W/key" \
    --log-level info ${GFMOUNT_FLAGS:-} 2>>"$W/mount.log" &
  MOUNT_PID=$!
  for _ in $(seq 100); do grep -q " $W/mnt " /proc/self/mountinfo && return 0; sleep 0.05; done
  echo "gfmount_read: mount failed: $(tail -3 "$W/mount.log")" >&2; exit 1
}
drop() { [[ $DROP_CACHES == 1 ]] && { sync; echo 3 >/proc/sys/vm/drop_caches; }; return 0; }
# MB/s of dd bs=1M of $1 to /dev/null.
rate() {
  local s e
  s=$(date +%s.%N); dd if="$1" of=/dev/null bs=1M status=none; e=$(date +%s.%N)
  awk -v a="$s" -v b="$e" -v mb="$SIZE_MB" 'BEGIN{printf "%.0f", mb*1.048576/(b-a)}'
}
max() { awk -v a="$1" -v b="$2" 'BEGIN{print (a>b)?a:b}'; }

cat "$replica" >/dev/null  # warm (a no-op when the caches are dropped before each read)
best_plain=0 best_mount=0 best_reread=0
for r in $(seq "$REPEAT"); do
  drop; p=$(rate "$replica")
  mount; drop; m=$(rate "$W/mnt/bench/big"); k=$(rate "$W/mnt/bench/big"); unmount
  echo "run $r: plain $p MB/s, mount $m MB/s, mount re-read $k MB/s" >&2
  best_plain=$(max "$best_plain" "$p"); best_mount=$(max "$best_mount" "$m"); best_reread=$(max "$best_reread" "$k")
done

# A directory of ENTRIES entries (directories: gfmkdir makes them all in one call).
paths=(); for i in $(seq "$ENTRIES"); do paths+=("/bench/dir/e$((1000000 + i))"); done
"$BIN/gfmkdir" -p /bench/dir >/dev/null
printf '%s\n' "${paths[@]}" | xargs -n 5000 "$BIN/gfmkdir" >/dev/null
secs() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); awk -v a="$s" -v b="$e" 'BEGIN{printf "%.3f", b-a}'; }
mount
ls_cold=$(secs ls -l "$W/mnt/bench/dir")
ls_warm=$(secs ls -l "$W/mnt/bench/dir")
n=$(ls "$W/mnt/bench/dir" | wc -l)
unmount
gfls=$(secs "$BIN/gfls" -l /bench/dir)
counters=$(grep "unmounted" "$W/mount.log" | tail -1 | sed 's/.*: stat_calls/stat_calls/')

echo "| file MB | caches | plain MB/s | mount MB/s | ratio | mount re-read MB/s | entries | ls -l cold s | ls -l warm s | gfls -l s | gfmount catalog calls (ls) |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
ratio=$(awk -v a="$best_mount" -v b="$best_plain" 'BEGIN{printf "%.2f", a/b}')
caches=$([[ $DROP_CACHES == 1 ]] && echo dropped || echo warm)
echo "| $SIZE_MB | $caches | $best_plain | $best_mount | $ratio | $best_reread | $n | $ls_cold | $ls_warm | $gfls | $counters |"
