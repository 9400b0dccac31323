#!/usr/bin/env bash
# Loopback benchmark of the transfer engine, in one run:
#   gfcp third-party copy between two gfsited agents (SIZE_GIB, default 4 GiB, page-cached
#   source on disk, destination spool on /dev/shm so no disk writeback is timed) with
#   1/4/8/16 streams; iperf3 -P N (same N, memory to memory); GridFTP (globus-gridftp-server
#   anonymous on 127.0.0.1, globus-url-copy -p N, same source and a /dev/shm destination);
#   gfcp --tls against `openssl speed -evp aes-256-gcm`; gfcp --tls-ca (mutual TLS on the
#   control connections only, data in clear: what agents use between them by default);
#   dd of the same source to a new /dev/shm file (the destination's own cost); a put from the
#   local file to a third agent spooling on the root file system (fsync included) against
#   dd bs=16M conv=fsync there.
# Prints a Markdown table: MB/s, CPU seconds per GB (all cores, from /proc/stat: sender +
# receiver + everything else running, so run it on a quiet machine; and each agent's own from
# /proc/PID/stat), and the ratios.
#   tests/bench/transfer_loopback.sh            (GFREP_BIN=dir to skip tools/build)
#   TLS_ONLY=1 TLS_REPEAT=3 tests/bench/transfer_loopback.sh   (only the TLS rows, each N times,
#   with each agent's CPU and who encrypted the records: gfcp --json "tls")
# Environment: SIZE_GIB (4), SIZE_MIB (wins over SIZE_GIB if set: a smaller file, e.g. for a
# smoke run), STREAMS_LIST ("1 4 8 16"), IPERF_SECONDS (4), TLS_ONLY, TLS_REPEAT, GFREP_BIN.
set -euo pipefail
cd "$(dirname "$0")/../.."
SIZE_GIB=${SIZE_GIB:-4}
SIZE_MIB=${SIZE_MIB:-$((SIZE_GIB * 1024))}
IPERF_SECONDS=${IPERF_SECONDS:-4}
TLS_ONLY=${TLS_ONLY:-0}
TLS_REPEAT=${TLS_REPEAT:-1}
STREAMS_LIST=${STREAMS_LIST:-"1 4 8 16"}
BIN=${GFREP_BIN:-$(tools/build)/bin}
WORK=$(mktemp -d /tmp/gfrep-bench.XXXXXX)
SHM=$(mktemp -d /dev/shm/gfrep-bench.XXXXXX)
chmod 755 "$WORK" "$SHM"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK" "$SHM"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "# generating ${SIZE_MIB} MiB source and caching it" >&2
mkdir -p "$WORK/a" "$SHM/b" "$SHM/g"
chmod 755 "$WORK/a"
head -c "$((SIZE_MIB * 1024 * 1024))" /dev/urandom >"$WORK/a/big.dat"
chmod 644 "$WORK/a/big.dat"
cat "$WORK/a/big.dat" >/dev/null

# TLS material: a throwaway gfca CA and a node certificate for 127.0.0.1 (the agents present
# it to each other when one pulls from the other).
"$BIN/gfca" init --dir "$WORK/ca" >/dev/null
"$BIN/gfca" issue node agent --host 127.0.0.1 --dir "$WORK/ca" >/dev/null
cp "$WORK/ca/ca.pem" "$WORK/ca.pem"; cp "$WORK/ca/agent.pem" "$WORK/agent.pem"; cp "$WORK/ca/agent.key" "$WORK/agent.key"

start() {  # start NAME ARGS... ; the daemon prints "listening on HOST:PORT"
  local name=$1; shift
  "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  PIDS+=($!)
  echo $! >"$WORK/$name.pid"
  for _ in $(seq 1 200); do
    grep -q 'listening on' "$WORK/$name.out" 2>/dev/null && break
    sleep 0.05
  done
}
TLS_ARGS=(--tls-cert "$WORK/agent.pem" --tls-key "$WORK/agent.key" --tls-ca "$WORK/ca.pem")
start a "$BIN/gfsited" --listen 127.0.0.1:0 --spool "$WORK/a" --key-file "$WORK/key" "${TLS_ARGS[@]}"
start b "$BIN/gfsited" --listen 127.0.0.1:0 --spool "$SHM/b" --key-file "$WORK/key" "${TLS_ARGS[@]}"
mkdir -p "$WORK/c" "$WORK/d"
start c "$BIN/gfsited" --listen 127.0.0.1:0 --spool "$WORK/c" --key-file "$WORK/key" "${TLS_ARGS[@]}"
# serve NAME BASE CMD... : starts CMD (in which @PORT@ stands for the port) on a random port
# above BASE and waits until that process listens on it (ss, so that no probe connection
# reaches the server); a server that exits (the port was taken) is started again on another
# port. Sets PORT. A fixed sleep was not enough under load
# (CI: GridFTP's "connection refused" after a second).
serve() {
  local name=$1 base=$2; shift 2
  local try pid arg args
  for try in 1 2 3 4 5; do
    PORT=$((base + RANDOM % 20000))
    args=(); for arg in "$@"; do args+=("${arg//@PORT@/$PORT}"); done
    "${args[@]}" >"$WORK/$name.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    for _ in $(seq 1 300); do
      if grep -q "pid=$pid," <<<"$(ss -Hltnp "sport = :$PORT")"; then return 0; fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  echo "error: $name did not listen on 127.0.0.1 (try $try, port $PORT); its log:" >&2
  cat "$WORK/$name.log" >&2
  exit 1
}
serve iperf 20000 iperf3 -s -p @PORT@
IPERF_PORT=$PORT
serve gridftp 40000 globus-gridftp-server -aa -anonymous-user nobody -p @PORT@ \
  -control-interface 127.0.0.1 -data-interface 127.0.0.1
GFTP_PORT=$PORT

python3 - "$BIN" "$WORK" "$SHM" "$IPERF_PORT" "$GFTP_PORT" "$STREAMS_LIST" "$TLS_ONLY" "$TLS_REPEAT" "$IPERF_SECONDS" <<'PY'
import json, os, re, subprocess, sys, time
bin_dir, work, shm, iperf_port, gftp_port, streams_list, tls_only, tls_repeat, iperf_seconds = sys.argv[1:10]
streams = [int(s) for s in streams_list.split()]
tck = os.sysconf("SC_CLK_TCK")
size = os.path.getsize(f"{work}/a/big.dat")
size_text = f"{size/2**30:.0f} GiB" if size % 2**30 == 0 else f"{size/2**20:.0f} MiB"
a = open(f"{work}/a.out").read().split()[-1]
b = open(f"{work}/b.out").read().split()[-1]
c_addr = open(f"{work}/c.out").read().split()[-1]
pids = [int(open(f"{work}/{n}.pid").read()) for n in ("a", "b")]
pid_c = int(open(f"{work}/c.pid").read())

def busy():
    f = open("/proc/stat").readline().split()
    return sum(int(x) for x in (f[1], f[2], f[3], f[6], f[7])) / tck  # user nice system irq softirq

def proc_cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tck

def timed(cmd):
    c0, t0 = busy(), time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    t, c = time.monotonic() - t0, busy() - c0
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr}")
    return t, c, r.stdout

def gfcp(n, tls=False, tls_control=False):
    key = ["--key-file", f"{work}/key"]
    extra = ["--tls", "--tls-ca", f"{work}/ca.pem"] if tls else []
    if tls_control:
        extra = ["--tls-ca", f"{work}/ca.pem"]
    p0 = [proc_cpu(p) for p in pids]
    t, c, out = timed([f"{bin_dir}/gfcp", *key, *extra, "-p", str(n), "--json",
                       f"gf://{a}/big.dat", f"gf://{b}/big.dat"])
    sender, receiver = (proc_cpu(p) - q for p, q in zip(pids, p0))
    j = json.loads(out)
    os.remove(f"{shm}/b/big.dat")
    gb = size / 1e9
    return size / t / 1e6, c / gb, (sender + receiver) / gb, j["seconds"], sender / gb, receiver / gb, j.get("tls", "")

def dd(dst, *args):
    t, c, _ = timed(["dd", f"if={work}/a/big.dat", f"of={dst}", *args])
    os.remove(dst)
    return size / t / 1e6, c / (size / 1e9)

def put(n):
    """gfcp -p N FILE gf://C/...: a local file into agent C's spool on disk (fsync included)."""
    c0 = proc_cpu(pid_c)
    t, c, _ = timed([f"{bin_dir}/gfcp", "--key-file", f"{work}/key", "-p", str(n),
                     f"{work}/a/big.dat", f"gf://{c_addr}/put.dat"])
    receiver = proc_cpu(pid_c) - c0
    os.remove(f"{work}/c/put.dat")
    return size / t / 1e6, c / (size / 1e9), receiver / (size / 1e9)

def iperf(n):
    t, c, out = timed(["iperf3", "-c", "127.0.0.1", "-p", iperf_port, "-P", str(n), "-t", iperf_seconds, "-J"])
    s = json.loads(out)["end"]["sum_received"]
    return s["bytes"] / s["seconds"] / 1e6, c / (s["bytes"] / 1e9)

def gridftp(n):
    dst = f"{shm}/g/big.dat"
    t, c, _ = timed(["globus-url-copy", "-p", str(n), "-fast",
                     f"ftp://127.0.0.1:{gftp_port}{work}/a/big.dat", f"file://{dst}"])
    assert os.path.getsize(dst) == size
    os.remove(dst)
    return size / t / 1e6, c / (size / 1e9)

def aes_speed():
    speed = subprocess.run(["openssl", "speed", "-evp", "aes-256-gcm", "-seconds", "2", "-bytes", "16384"],
                           capture_output=True, text=True).stdout
    m = re.search(r"(?im)^aes-256-gcm\s+([\d.]+)k", speed)
    return float(m.group(1)) * 1000 / 1e6 if m else float("nan")

# One copy first, not counted: on this VM the first 2 GiB written into /dev/shm after boot
# lands on guest memory never touched before, which the host faults in page by page (the first
# 1-stream row measured 399 MB/s at 2.99 receiver CPU s/GB, the next two 1,336-1,377 MB/s at
# 0.73); later copies reuse the freed pages. profile_agents.sh warms up the same way.
gfcp(4)

if tls_only == "1":
    aes = aes_speed()
    print(f"TLS only (TLS 1.3, AES-256-GCM), {size_text} A -> B on /dev/shm, wall clock of gfcp; openssl speed -evp aes-256-gcm (16 KiB, one core) = {aes:.0f} MB/s")
    print("| streams | gfcp --tls MB/s | x AES-GCM | CPU s/GB machine | sender (A) | receiver (B) | records by |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for _ in range(int(tls_repeat)):
        for n in (4, 8):
            g = gfcp(n, tls=True)
            print(f"| {n} | {g[0]:.0f} | {g[0]/aes:.2f} | {g[1]:.2f} | {g[4]:.2f} | {g[5]:.2f} | {g[6] or '?'} |", flush=True)
    sys.exit(0)

rows = []
for n in streams:
    g = gfcp(n); i = iperf(n); f = gridftp(n)
    rows.append((n, g, i, f))
    print(f"# streams={n} gfcp={g[0]:.0f} MB/s iperf3={i[0]:.0f} gridftp={f[0]:.0f}", file=sys.stderr)

# References for the destinations: dd from the same page-cached source to a new file on
# /dev/shm (what writing the copy there costs, no network), and to the disk with fsync.
dd_shm = dd(f"{shm}/g/dd.dat", "bs=4M")
dd_disk = dd(f"{work}/d/dd.dat", "bs=16M", "conv=fsync")
puts = [(n, put(n)) for n in (1, 8)]

aes = aes_speed()
tls = [(n, gfcp(n, tls=True)) for n in (4, 8)]
control = [(n, gfcp(n, tls_control=True), gfcp(n)) for n in (4, 8)]

print(f"File: {size_text}, page-cached source on disk, destinations on /dev/shm.")
print()
print("| streams | gfcp MB/s | iperf3 MB/s | GridFTP MB/s | gfcp/iperf3 | gfcp/GridFTP | gfcp/dd to /dev/shm | CPU s/GB gfcp | CPU s/GB iperf3 | CPU s/GB GridFTP | sender (A) CPU s/GB | receiver (B) CPU s/GB |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for n, g, i, f in rows:
    print(f"| {n} | {g[0]:.0f} | {i[0]:.0f} | {f[0]:.0f} | {g[0]/i[0]:.2f} | {g[0]/f[0]:.2f} | {g[0]/dd_shm[0]:.2f} | {g[1]:.2f} | {i[1]:.2f} | {f[1]:.2f} | {g[4]:.2f} | {g[5]:.2f} |")
print()
print(f"dd from the page-cached source to a new file on /dev/shm (bs=4M): {dd_shm[0]:.0f} MB/s, CPU {dd_shm[1]:.2f} s/GB (the destination's floor: no network, one copy)")
print()
print(f"Put to disk (gfcp -p N FILE gf://agent-C/..., C's spool on the root file system, fsync included) against dd bs=16M conv=fsync to the same file system: {dd_disk[0]:.0f} MB/s, CPU {dd_disk[1]:.2f} s/GB")
for n, p in puts:
    print(f"- gfcp -p {n}: {p[0]:.0f} MB/s = {p[0]/dd_disk[0]:.2f}x dd; CPU {p[1]:.2f} s/GB machine, {p[2]:.2f} s/GB receiver")
print()
print(f"TLS (TLS 1.3, AES-256-GCM): openssl speed -evp aes-256-gcm (16 KiB blocks, one core) = {aes:.0f} MB/s")
for n, g in tls:
    print(f"- gfcp --tls -p {n}: {g[0]:.0f} MB/s = {g[0]/aes:.2f}x AES-GCM speed, CPU {g[1]:.2f} s/GB (sender {g[4]:.2f}, receiver {g[5]:.2f}; records by {g[6] or '?'})")
print()
print("Mutual TLS on the control connections only (gfcp --tls-ca; agent B pulls from A with its node certificate), against shared-key in clear measured right after:")
for n, c, k in control:
    print(f"- -p {n}: {c[0]:.0f} MB/s vs {k[0]:.0f} MB/s shared key = {c[0]/k[0]:.2f}x; CPU {c[1]:.2f} vs {k[1]:.2f} s/GB")
PY
