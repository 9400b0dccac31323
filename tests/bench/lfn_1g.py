#!/usr/bin/env python3
"""Benchmark 1 of issue 3: gfcp vs iperf3 on the lfn-1g route (200 ms RTT, 1 Gbit/s).

  sudo GFREP_BIN=build/bin tests/bench/lfn_1g.py [--quick] [--size 2G] [--seconds 8]
                                                [--streams 1,4,8,16,32] [--ccs cubic,bbr]

Matrix: streams x buffers (default = Linux default tcp_rmem/wmem limits and autotuning;
gfcp is reported twice: "gfcp" = its own --json mbit_per_s, "gfcp-wall" = file bytes / wall
time of the whole gfcp process incl. connection setup and checksums;
tuned = 32 MiB socket buffer per stream, namespace limits 128 MiB) x cc (cubic, bbr), for
iperf3 (timed runs, first 2 s omitted) and gfcp (a 2 GiB file from /dev/shm to a gfsited
spool in /dev/shm, rate = bytes / wall time of the whole gfcp run); then the same on
lfn-1g-loss (loss 1e-5 each way). Prints markdown tables and gfcp/iperf3-best ratios.
--streams and --ccs keep only those cells of the matrix (e.g. one cell of each part for a
smoke run); --seconds is iperf3's timed part.
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lfn_testbed as tb  # noqa: E402

BOTTLENECK = 1000.0  # Mbit/s
DEFAULT_SYSCTLS = ("4096 131072 6291456", "4096 16384 4194304")  # Linux defaults
TUNED_SYSCTLS = ("4096 131072 134217728", "4096 16384 134217728")
TUNED_BUFFER = "32M"
PORT = 7000


def set_buffers(nodes, mode):
    rmem, wmem = DEFAULT_SYSCTLS if mode == "default" else TUNED_SYSCTLS
    for node in nodes:
        subprocess.run(tb.in_ns(node, ["sysctl", "-q", "-w", f"net.ipv4.tcp_rmem={rmem}",
                                       f"net.ipv4.tcp_wmem={wmem}"]), check=True)


def gfcp(src_node, dst_addr, path, streams, mode, cc, key, name):
    argv = [os.path.join(tb.BIN, "gfcp"), "-p", str(streams), "--cc", cc, "--key-file", key,
            "--json", path, f"gf://{dst_addr}:{PORT}/{name}"]
    if mode == "tuned":
        argv[1:1] = ["--buffer", TUNED_BUFFER]
    size = os.path.getsize(path)
    t0 = time.time()
    r = subprocess.run(tb.in_ns(src_node, argv), capture_output=True, text=True, timeout=900)
    secs = time.time() - t0
    if r.returncode != 0:
        raise RuntimeError(f"gfcp: {r.stderr.strip()[:300]}")
    own = json.loads(r.stdout).get("mbit_per_s", 0.0)
    return own, size * 8 / secs / 1e6


class Gfsited:
    def __init__(self, node, addr, spool, key, mode):
        argv = [os.path.join(tb.BIN, "gfsited"), "--listen", f"{addr}:{PORT}", "--spool", spool,
                "--key-file", key, "--insecure"]
        if mode == "tuned":
            argv += ["--buffer", TUNED_BUFFER]
        self.server = tb.Server(node, argv, "listening on")

    def stop(self):
        self.server.stop()


def run_topology(topo, streams_list, ccs, modes, src, key, gfcp_ok, gfcp_streams, rows,
                 seconds):
    with tb.topology(topo):
        b = tb.addr(topo, "b-n1")
        spool = f"/dev/shm/gfrep-bench-spool-{topo}"
        os.makedirs(spool, exist_ok=True)
        try:
            for mode in modes:
                set_buffers(["a-n1", "b-n1"], mode)
                for cc in ccs:
                    for n in streams_list:
                        w = TUNED_BUFFER if mode == "tuned" else None
                        # A fresh server per cell: a client that timed out can leave
                        # iperf3 -s stuck in its test, failing every later cell.
                        with tb.servers(tb.iperf_server("b-n1")):
                            try:
                                mbps = tb.iperf("a-n1", b, streams=n, seconds=seconds, window=w,
                                                cc=cc)
                            except (RuntimeError, subprocess.TimeoutExpired) as e:
                                print(f"  {topo} iperf3 {mode} {cc} P{n}: FAILED {e}")
                                continue
                            rows.append((topo, "iperf3", mode, cc, n, mbps))
                            print(f"  {topo} iperf3 {mode} {cc} P{n}: {mbps:.0f} Mbit/s "
                                  f"(load {tb.loadavg()})", flush=True)
                if not gfcp_ok:
                    continue
                server = Gfsited("b-n1", b, spool, key, mode)
                try:
                    for cc in ccs:
                        for n in gfcp_streams.get(mode, streams_list):
                            try:
                                mbps, wall = gfcp("a-n1", b, src, n, mode, cc, key,
                                                  f"f{n}{cc}")
                            except (RuntimeError, subprocess.TimeoutExpired) as e:
                                print(f"  {topo} gfcp {mode} {cc} P{n}: FAILED {e}")
                                continue
                            for f in os.listdir(spool):
                                subprocess.run(["rm", "-rf", os.path.join(spool, f)])
                            rows.append((topo, "gfcp", mode, cc, n, mbps))
                            rows.append((topo, "gfcp-wall", mode, cc, n, wall))
                            print(f"  {topo} gfcp {mode} {cc} P{n}: {mbps:.0f} Mbit/s, "
                                  f"wall {wall:.0f} "
                                  f"(load {tb.loadavg()})", flush=True)
                finally:
                    server.stop()
        finally:
            subprocess.run(["rm", "-rf", spool])


def table(rows, topo):
    print(f"\n{topo}: received Mbit/s (bottleneck {BOTTLENECK:.0f})\n")
    print("| tool | buffers | cc | " + " | ".join(f"P{n}" for n in (1, 4, 8, 16, 32)) + " |")
    print("|---|---|---|" + "---|" * 5)
    keys = sorted({(r[1], r[2], r[3]) for r in rows if r[0] == topo})
    for tool, mode, cc in keys:
        cells = []
        for n in (1, 4, 8, 16, 32):
            v = [r[5] for r in rows if r[0] == topo and r[1:5] == (tool, mode, cc, n)]
            cells.append(f"{v[0]:.0f}" if v else "-")
        print(f"| {tool} | {mode} | {cc} | " + " | ".join(cells) + " |")
    best = {t: max([r[5] for r in rows if r[0] == topo and r[1] == t] or [0])
            for t in ("iperf3", "gfcp", "gfcp-wall")}
    for t in ("gfcp", "gfcp-wall"):
        if best["iperf3"] and best[t]:
            print(f"\nbest {t} {best[t]:.0f} / best iperf3 {best['iperf3']:.0f} = "
                  f"{best[t] / best['iperf3']:.3f}")
    for t in ("iperf3", "gfcp"):
        multi = max([r[5] for r in rows if r[0] == topo and r[1] == t and r[4] > 1] or [0])
        print(f"best multi-stream {t} {multi:.0f} = {multi / BOTTLENECK:.3f} of the bottleneck")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="fewer cells (see the script)")
    p.add_argument("--no-gfcp", action="store_true")
    p.add_argument("--size", default="2G", help="gfcp file size (head -c syntax)")
    p.add_argument("--seconds", type=int, default=8, help="iperf3's timed part per cell")
    p.add_argument("--streams", default="1,4,8,16,32", help="only these stream counts")
    p.add_argument("--ccs", default="cubic,bbr", help="only these congestion controls")
    args = p.parse_args()
    chosen = {int(s) for s in args.streams.split(",")}
    ccs = args.ccs.split(",")

    def only(ns):
        return [n for n in ns if n in chosen]
    print(tb.machine_notes(), flush=True)
    gfcp_ok = not args.no_gfcp and os.path.exists(os.path.join(tb.BIN, "gfcp"))
    src = "/dev/shm/gfrep-bench-src"
    key = "/dev/shm/gfrep-bench-key"
    rows = []
    try:
        if gfcp_ok:
            subprocess.run(f"head -c {args.size} /dev/urandom > {src}", shell=True, check=True)
        streams = only([1, 4, 8, 16, 32])
        gfcp_streams = {"tuned": streams, "default": only([1, 8, 32])}
        if args.quick:
            gfcp_streams = {"tuned": only([1, 8, 32]), "default": only([8])}
        run_topology("lfn-1g", streams, ccs, ["default", "tuned"], src, key,
                     gfcp_ok, gfcp_streams, rows, args.seconds)
        run_topology("lfn-1g-loss", only([1, 8, 32]), ccs, ["tuned"], src, key, gfcp_ok,
                     {"tuned": only([8, 32])}, rows, args.seconds)
    finally:
        subprocess.run(["rm", "-f", src, key])
        table(rows, "lfn-1g")
        table(rows, "lfn-1g-loss")


if __name__ == "__main__":
    main()
