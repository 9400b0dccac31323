#!/usr/bin/env python3
"""HighSpeed TCP against reno, cubic and bbr on lossy long fat routes (issue 16).

  sudo GFREP_BIN=build/bin tests/bench/highspeed_lfn.py [--seconds 15] [--repeat 3]
                                                       [--topos lfn-1g-loss,lfn-1g-loss4]
                                                       [--streams 1,8] [--gfcp-mib 1024]

On lfn-1g-loss (200 ms, 1 Gbit/s, loss 1e-5 each way) and lfn-1g-loss4 (1e-4), one stream
and eight, for each congestion control: iperf3 -C CC (timed, slow start left out) and gfcp
--cc CC (a 1 GiB file from /dev/shm to a gfsited spool in /dev/shm; rate = bytes / wall time
of the whole gfcp command, connection set-up and slow start included).
highspeed is this machine's gfrep BPF program (the kernel has no tcp_highspeed): a
`gfprobe cc --provide highspeed --hold` holds its registration for iperf3; gfcp's own --json
says which algorithm its sockets really used, and a cell whose sender did not use the one
asked for is marked. Socket buffers: namespace limits 128 MiB, 32 MiB per stream (the
tuned rows of lfn_1g.py). Random loss makes single runs noisy (one early loss in slow start
costs Reno a whole run): --repeat N runs every cell N times, the algorithms in turn within
each round, and the table shows the median with the range. Prints a markdown table against
the bottleneck.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lfn_testbed as tb  # noqa: E402

BOTTLENECK = 1000.0  # Mbit/s
CCS = ["reno", "cubic", "bbr", "highspeed"]
PORT = 7000
BUFFER = "32M"
SYSCTLS = ("4096 131072 134217728", "4096 16384 134217728")


def set_buffers(nodes):
    for node in nodes:
        subprocess.run(tb.in_ns(node, ["sysctl", "-q", "-w", f"net.ipv4.tcp_rmem={SYSCTLS[0]}",
                                       f"net.ipv4.tcp_wmem={SYSCTLS[1]}"]), check=True)


def gfcp(dst, path, streams, cc, key, name):
    argv = [os.path.join(tb.BIN, "gfcp"), "-p", str(streams), "--buffer", BUFFER, "--cc", cc,
            "--key-file", key, "--json", path, f"gf://{dst}:{PORT}/{name}"]
    t0 = time.time()
    r = subprocess.run(tb.in_ns("a-n1", argv), capture_output=True, text=True, timeout=900)
    secs = time.time() - t0
    if r.returncode != 0:
        raise RuntimeError(f"gfcp: {r.stderr.strip()[:300]}")
    used = json.loads(r.stdout).get("congestion", "")
    return os.path.getsize(path) * 8 / secs / 1e6, used, secs


def run_topology(topo, args, key, rows):
    with tb.topology(topo):
        b = tb.addr(topo, "b-n1")
        set_buffers(["a-n1", "b-n1"])
        spool = f"/dev/shm/gfrep-bench-hs-{topo}"
        os.makedirs(spool, exist_ok=True)
        src = "/dev/shm/gfrep-bench-hs-src"
        if not args.no_gfcp:
            subprocess.run(f"head -c {args.gfcp_mib}M /dev/urandom > {src}", shell=True, check=True)
        holder = tb.Server("a-n1", [os.path.join(tb.BIN, "gfprobe"), "cc", "--provide", "highspeed",
                                    "--hold"], "holding")
        agent = tb.Server("b-n1", [os.path.join(tb.BIN, "gfsited"), "--listen", f"{b}:{PORT}",
                                   "--spool", spool, "--key-file", key, "--buffer", BUFFER,
                                   "--insecure"], "listening on")
        try:
            cells = [(r, n, cc) for n in args.streams for r in range(args.repeat) for cc in CCS]
            for rnd, n, cc in cells:
                with tb.servers(tb.iperf_server("b-n1")):
                    try:
                        mbps = tb.iperf("a-n1", b, streams=n, seconds=args.seconds,
                                        window=BUFFER, cc=cc, omit=2)
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        print(f"  {topo} iperf3 {cc} P{n}: FAILED {e}", flush=True)
                        mbps = None
                rows.append((topo, "iperf3", cc, n, mbps, cc))
                print(f"  {topo} iperf3 {cc} P{n} round {rnd + 1}: {mbps or 0:.0f} Mbit/s "
                      f"(load {tb.loadavg()})", flush=True)
                if args.no_gfcp:
                    continue
                try:
                    g, used, secs = gfcp(b, src, n, cc, key, f"f{n}{cc}")
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    print(f"  {topo} gfcp {cc} P{n}: FAILED {e}", flush=True)
                    continue
                finally:
                    for f in os.listdir(spool):
                        subprocess.run(["rm", "-rf", os.path.join(spool, f)])
                rows.append((topo, "gfcp", cc, n, g, used))
                print(f"  {topo} gfcp {cc} P{n} round {rnd + 1}: {g:.0f} Mbit/s ({args.gfcp_mib} MiB in "
                      f"{secs:.1f} s, sender used {used}) (load {tb.loadavg()})", flush=True)
        finally:
            agent.stop()
            holder.stop()
            subprocess.run(["rm", "-rf", spool, src])


def table(rows, topo, streams):
    print(f"\n{topo}: Mbit/s (share of the {BOTTLENECK:.0f} Mbit/s bottleneck) [range over runs]\n")
    print("| tool | streams | " + " | ".join(CCS) + " |")
    print("|---|---|" + "---|" * len(CCS))
    for tool in ("iperf3", "gfcp"):
        for n in streams:
            cells = []
            for cc in CCS:
                v = [r for r in rows if r[0] == topo and r[1] == tool and r[2] == cc and r[3] == n
                     and r[4] is not None]
                if not v:
                    cells.append("-")
                    continue
                rates = sorted(r[4] for r in v)
                med = statistics.median(rates)
                spread = f" [{rates[0]:.0f}-{rates[-1]:.0f}]" if len(rates) > 1 else ""
                wrong = sorted({r[5] for r in v if r[5] != cc})
                mark = f" (ran {','.join(wrong)}!)" if wrong else ""
                cells.append(f"{med:.0f} ({med / BOTTLENECK:.2f}){spread}{mark}")
            print(f"| {tool} | {n} | " + " | ".join(cells) + " |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=int, default=15, help="iperf3 measured seconds per cell")
    p.add_argument("--gfcp-mib", type=int, default=1024, help="file size of a gfcp cell, MiB")
    p.add_argument("--topos", default="lfn-1g-loss,lfn-1g-loss4")
    p.add_argument("--no-gfcp", action="store_true")
    p.add_argument("--repeat", type=int, default=1, help="runs per cell (median and range shown)")
    p.add_argument("--streams", default="1,8", help="stream counts, comma-separated")
    args = p.parse_args()
    args.streams = [int(s) for s in args.streams.split(",")]
    print(tb.machine_notes(), flush=True)
    key = "/dev/shm/gfrep-bench-hs-key"
    rows = []
    topos = args.topos.split(",")
    try:
        for topo in topos:
            run_topology(topo, args, key, rows)
    finally:
        subprocess.run(["rm", "-f", key])
        for topo in topos:
            table(rows, topo, args.streams)


if __name__ == "__main__":
    main()
