#!/usr/bin/env python3
"""gfcp vs iperf3 vs GridFTP on lfn-1g (200 ms RTT, 1 Gbit/s), by wall clock, same run.

  sudo GFREP_BIN=build/bin tests/bench/gfcp_lfn_vs_gridftp.py [--size 2G] [--streams 1,4,16,32]
      [--repeat 3] [--cc cubic] [--iperf-seconds 8]

Per stream count N, tuned buffers (namespace limits 128 MiB, 32 MiB per stream), and one
congestion control for every tool (--cc, default cubic: set as both namespaces' default, which
globus-url-copy and its server use, and asked for by iperf3 -C and gfcp --cc), --repeat rounds
(each round runs the three tools once per N, in turn); per tool the min/median/max over rounds:
  iperf3 -P N -w 32M, 8 s timed (--iperf-seconds), first 2 s omitted (its best: no setup, no
      slow start);
  gfcp -p N --buffer 32M of a SIZE random file from /dev/shm to a gfsited spool in /dev/shm,
      rate = file bytes / wall time of the gfcp process (setup, slow start, checksums);
  globus-url-copy -p N -tcp-bs 32M of the same file to a GridFTP server in the far namespace
      (anonymous, writing to /dev/shm), rate = file bytes / wall time of globus-url-copy.
Prints one markdown row per N (min / median / max of each tool, and the ratios of the
medians gfcp/iperf3 and gfcp/GridFTP).

--topo NAME runs on another topology of tools/topologies (lfn-1g-loss4: 1e-4 random loss each
way). --bare adds, once per round, gfcp as a new user runs it: no flag but the key, to a
second gfsited in the far namespace started without --buffer, both on the namespaces' default
congestion control (--cc) and kernel autotuning; its rate is printed beside iperf3's best (the
highest median over N).
"""

import argparse
import os
import shutil
import signal
import statistics
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lfn_testbed as tb  # noqa: E402

GFSITED_PORT = 7000
BARE_PORT = 7001  # the gfsited a new user would start: no --buffer
GRIDFTP_PORT = 7100
HOSTS_DIR = "/etc/netns/gfrep-b-n1"
TUNED = ("4096 131072 134217728", "4096 16384 134217728")


def timed(argv, node):
    t0 = time.time()
    r = subprocess.run(tb.in_ns(node, argv), capture_output=True, text=True, timeout=900)
    secs = time.time() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{argv[0]}: {(r.stderr or r.stdout).strip()[:300]}")
    return secs


def one_round(n, rnd, args, size, src, key, spool, gdst, b):
    """iperf3, gfcp and GridFTP once each at N streams; Mbit/s of each."""
    with tb.servers(tb.iperf_server("b-n1")):
        ip = tb.iperf("a-n1", b, streams=n, seconds=args.iperf_seconds, window="32M", cc=args.cc)
    secs = timed([os.path.join(tb.BIN, "gfcp"), "-p", str(n), "--buffer", "32M", "--cc", args.cc,
                  "--key-file", key, src, f"gf://{b}:{GFSITED_PORT}/f{n}"], "a-n1")
    gf = size * 8 / secs / 1e6
    for f in os.listdir(spool):
        subprocess.run(["rm", "-rf", os.path.join(spool, f)])
    try:
        gsecs = timed(["globus-url-copy", "-p", str(n), "-tcp-bs", "32M", f"file://{src}",
                       f"ftp://{b}:{GRIDFTP_PORT}{gdst}/f{n}"], "a-n1")
        gt = size * 8 / gsecs / 1e6
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"  GridFTP P{n}: FAILED {e}", flush=True)
        gt = 0.0
    for f in os.listdir(gdst):
        os.remove(os.path.join(gdst, f))
    print(f"  round {rnd + 1} P{n}: iperf3 {ip:.0f} gfcp-wall {gf:.0f} gridftp-wall {gt:.0f} "
          f"(load {tb.loadavg()})", flush=True)
    return (n, ip, gf, gt)


def bare_round(rnd, size, src, key, spool, b):
    """gfcp with no flag but the key, to the bare gfsited; Mbit/s by wall clock."""
    secs = timed([os.path.join(tb.BIN, "gfcp"), "--key-file", key, src,
                  f"gf://{b}:{BARE_PORT}/bare{rnd}"], "a-n1")
    for f in os.listdir(spool):
        subprocess.run(["rm", "-rf", os.path.join(spool, f)])
    rate = size * 8 / secs / 1e6
    print(f"  round {rnd + 1} gfcp with no flags: {rate:.0f} (load {tb.loadavg()})", flush=True)
    return rate


def spread(values):
    return f"{min(values):.0f} / {statistics.median(values):.0f} / {max(values):.0f}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="2G")
    p.add_argument("--streams", default="1,4,16,32")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cc", default="cubic")
    p.add_argument("--iperf-seconds", type=int, default=8, help="iperf3's timed part")
    p.add_argument("--topo", default="lfn-1g", help="topology of tools/topologies")
    p.add_argument("--bare", action="store_true", help="also gfcp with no flags, once a round")
    args = p.parse_args()
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    streams = [int(s) for s in args.streams.split(",")]
    print(tb.machine_notes(), flush=True)
    src = "/dev/shm/gfrep-bench-src"
    key = "/dev/shm/gfrep-bench-key"
    spool = "/dev/shm/gfrep-bench-spool"
    gdst = "/dev/shm/gfrep-bench-gridftp"
    bare_spool = "/dev/shm/gfrep-bench-spool-bare"
    rows = []
    bare = []
    # A namespace may only make a congestion control its default if the host allows it
    # (net.ipv4.tcp_allowed_congestion_control, a host-wide list; with bbr the host's
    # default, cubic is not on it). Added for the run, the list restored at the end.
    allowed_path = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
    with open(allowed_path) as f:
        allowed = f.read().split()
    try:
        if args.cc not in allowed:
            with open(allowed_path, "w") as f:
                f.write(" ".join(allowed + [args.cc]))
        subprocess.run(f"head -c {args.size} /dev/urandom > {src}", shell=True, check=True)
        size = os.path.getsize(src)
        for d in (spool, gdst, bare_spool):
            os.makedirs(d, exist_ok=True)
        os.chmod(gdst, 0o777)
        with tb.topology(args.topo):
            b = tb.addr(args.topo, "b-n1")
            for node in ("a-n1", "b-n1"):
                subprocess.run(tb.in_ns(node, ["sysctl", "-q", "-w", f"net.ipv4.tcp_rmem={TUNED[0]}",
                                               f"net.ipv4.tcp_wmem={TUNED[1]}",
                                               f"net.ipv4.tcp_congestion_control={args.cc}"]),
                               check=True)
            gfsited = [os.path.join(tb.BIN, "gfsited"), "--listen", f"{b}:{GFSITED_PORT}",
                       "--spool", spool, "--key-file", key, "--buffer", "32M", "--insecure"]
            gridftp = ["globus-gridftp-server", "-aa", "-anonymous-user", "nobody", "-p",
                       str(GRIDFTP_PORT), "-control-interface", b, "-data-interface", b]
            # The GridFTP server resolves its own address and the host name; in the far
            # namespace that needs a hosts entry (ip netns exec bind-mounts this file over
            # /etc/hosts for that namespace only). Removed at the end.
            os.makedirs(HOSTS_DIR, exist_ok=True)
            with open(os.path.join(HOSTS_DIR, "hosts"), "w") as h:
                h.write(f"127.0.0.1 localhost\n{b} b-n1 {socket.gethostname()}\n")
            plain = [os.path.join(tb.BIN, "gfsited"), "--listen", f"{b}:{BARE_PORT}",
                     "--spool", bare_spool, "--key-file", key, "--insecure"]
            specs = [("b-n1", gfsited, "listening on")]
            if args.bare:
                specs.append(("b-n1", plain, "listening on"))
            with tb.servers(*specs):
                # Its own process group: the server forks a process per session, which
                # outlived the server (one left running after every run).
                gsrv = subprocess.Popen(tb.in_ns("b-n1", gridftp), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
                try:
                    time.sleep(2)
                    for rnd in range(args.repeat):
                        for n in streams:
                            rows.append(one_round(n, rnd, args, size, src, key, spool, gdst, b))
                        if args.bare:
                            bare.append(bare_round(rnd, size, src, key, bare_spool, b))
                finally:
                    os.killpg(gsrv.pid, signal.SIGTERM)
                    gsrv.wait(timeout=10)
    finally:
        with open(allowed_path, "w") as f:
            f.write(" ".join(allowed))
        for path in (src, key):
            if os.path.exists(path):
                os.remove(path)
        for d in (spool, gdst, bare_spool, HOSTS_DIR):
            shutil.rmtree(d, ignore_errors=True)
        try:
            os.rmdir("/etc/netns")  # only if nothing else is there
        except OSError:
            pass
    print(f"\n{args.topo}: {args.repeat} rounds, congestion control {args.cc} for every tool; "
          "min / median / max")
    print("\n| streams | iperf3 Mbit/s | gfcp (wall) Mbit/s | GridFTP (wall) Mbit/s | gfcp/iperf3 | gfcp/GridFTP |")
    print("|---:|---|---|---|---:|---:|")
    for n in streams:
        mine = [r for r in rows if r[0] == n]
        ip = [r[1] for r in mine]
        gf = [r[2] for r in mine]
        gt = [r[3] for r in mine if r[3] > 0]
        ratio_g = f"{statistics.median(gf) / statistics.median(gt):.2f}" if gt else "-"
        print(f"| {n} | {spread(ip)} | {spread(gf)} | {spread(gt) if gt else 'failed'} | "
              f"{statistics.median(gf) / statistics.median(ip):.2f} | {ratio_g} |")
    if bare:
        best = max(statistics.median([r[1] for r in rows if r[0] == n]) for n in streams)
        print(f"\ngfcp with no flags (4 streams, autotuned buffers, {args.cc} until loss says "
              f"otherwise): {spread(bare)} Mbit/s; iperf3's best (highest median) {best:.0f}; "
              f"ratio of medians {statistics.median(bare) / best:.2f}")

if __name__ == "__main__":
    main()
