#!/usr/bin/env python3
"""Measures gfwanem's ceiling and CPU cost on this machine.

  sudo tests/bench/lfn_emulator_ceiling.py [--seconds 6]   (GFREP_BIN=build-x/bin to pick a build)

Topology: two sites, 1 ms RTT, rate far above anything reachable (100 Gbit/s), so the
emulator itself is the bottleneck; iperf3 with 1 and 4 streams (the endpoints run on the
same 2 cores). Reference in the same run: two nodes of one site over the bridge, no
emulator. Then the lfn-1g route (200 ms, 1 Gbit/s) at full load: the emulator's CPU there.
Each iperf3 run is timed for --seconds (6), the lfn-1g one for twice that.
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lfn_testbed as tb  # noqa: E402

CEILING_TOPO = """topology gfrep-ceil
buffer 64M
site ca nodes=2
site cb nodes=1
route wan ca cb rtt=1ms rate=100G queue=16M
"""


def measure(topo_name, client, server_addr, streams, window, seconds, cc="cubic"):
    pid = tb.emulator_pids(topo_name)["wan"]
    c0, t0 = tb.cpu_seconds(pid), time.time()
    mbps = tb.iperf(client, server_addr, streams=streams, seconds=seconds, window=window, cc=cc,
                    omit=1)
    cpu = 100 * (tb.cpu_seconds(pid) - c0) / (time.time() - t0)
    return mbps, cpu


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=int, default=6, help="iperf3's timed part (lfn-1g: twice)")
    secs = p.parse_args().seconds
    print(tb.machine_notes())
    rows = []
    with tempfile.NamedTemporaryFile("w", suffix=".topo") as f:
        f.write(CEILING_TOPO)
        f.flush()
        with tb.topology(f.name):
            b = tb.addr(f.name, "cb-n1")
            a2 = tb.addr(f.name, "ca-n2")
            with tb.servers(tb.iperf_server("cb-n1"), tb.iperf_server("ca-n2")):
                ref = tb.iperf("ca-n1", a2, streams=4, seconds=secs, window="8M", omit=1)
                rows.append(("bridge, no emulator (reference)", 4, f"{ref:.0f}", "-"))
                for streams in (1, 4):
                    mbps, cpu = measure("gfrep-ceil", "ca-n1", b, streams, "8M", secs)
                    rows.append((f"through gfwanem, 1 ms, uncapped", streams, f"{mbps:.0f}",
                                 f"{cpu:.0f}"))
    with tb.topology("lfn-1g"):
        b = tb.addr("lfn-1g", "b-n1")
        with tb.servers(tb.iperf_server("b-n1")):
            mbps, cpu = measure("lfn-1g", "a-n1", b, 8, "32M", 2 * secs)
            rows.append(("lfn-1g (200 ms, 1 Gbit/s)", 8, f"{mbps:.0f}", f"{cpu:.0f}"))
    print("| path | streams | iperf3 Mbit/s | gfwanem CPU % of one core |")
    print("|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")


if __name__ == "__main__":
    main()
