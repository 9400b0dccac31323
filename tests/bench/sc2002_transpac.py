#!/usr/bin/env python3
"""Benchmark 2 of issue 3: the SC2002 TransPAC file-transfer table, on `transpac`.

  sudo GFREP_BIN=build/bin tests/bench/sc2002_transpac.py [--size 1G] [--paper-cc highspeed --paper-only]

Japan -> US, each node pair copying its own file (gfcp jp-nI -> gfsited us-nI) at the same
time. Paper settings: north pairs (jp-n1..3 over the 622 Mbit/s, 199 ms route) 16 streams,
610 KB socket buffers, 50 Mbit/s per stream; the south pair (jp-n4, 271 Mbit/s, 222 ms)
8 streams, 250 KB, 28.5 Mbit/s per stream; cc cubic. Then "tuned": same pairs, no caps,
16 MiB buffers, bbr. Reports the aggregate average (total bytes / time until the last pair
finishes) and the best 10-s average of the bytes the emulators forwarded (sampled each
second), next to the paper's columns. --paper-cc sets the paper rows' congestion control
(highspeed, as SC2002 ran them: gfrep's BPF HighSpeed TCP where the kernel lacks the module,
held by `gfprobe cc --provide highspeed --hold` for the run); --paper-only skips the tuned rows.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lfn_testbed as tb  # noqa: E402

TOPO = "transpac"
PORT = 7000
NORTH = {"streams": 16, "buffer": "610K", "rate": "50M"}
SOUTH = {"streams": 8, "buffer": "250K", "rate": "28.5M"}
# pairs: (10-s average max Mbit/s, average Mbit/s, average transfer time s) from the slides
PAPER = {1: (None, 152, 113.0), 2: (419, 297, 115.9), 3: (593, 369, 139.6), 4: (741, 458, 150.0)}
THEORETICAL = 893


class Sampler(threading.Thread):
    """Samples the emulators' forwarded bytes (jp -> us) once a second."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples = []
        self.stop_flag = threading.Event()

    def run(self):
        while not self.stop_flag.is_set():
            s = tb.stats(TOPO)
            total = sum(v["a_to_b"]["bytes_forwarded"] for v in s.values())
            self.samples.append((time.time(), total))
            self.stop_flag.wait(1.0)

    def best_10s_mbps(self):
        best = 0.0
        for i, (t0, b0) in enumerate(self.samples):
            for t1, b1 in self.samples[i + 1:]:
                if t1 - t0 >= 10:
                    best = max(best, (b1 - b0) * 8 / (t1 - t0) / 1e6)
                    break
        return best


def run_case(pairs, tuned, src, key, paper_cc="cubic"):
    specs = []
    for i in range(1, pairs + 1):
        south = i == 4
        p = dict(SOUTH if south else NORTH)
        if tuned:
            p.update(buffer="16M", rate=None)
        specs.append((i, p))
    spools = []
    daemons = []
    try:
        for i, p in specs:
            spool = f"/dev/shm/gfrep-sc2002-us{i}"
            os.makedirs(spool, exist_ok=True)
            spools.append(spool)
            addr = tb.addr(TOPO, f"us-n{i}")
            daemons.append(tb.Server(f"us-n{i}", [
                os.path.join(tb.BIN, "gfsited"), "--listen", f"{addr}:{PORT}", "--spool", spool,
                "--key-file", key, "--buffer", p["buffer"], "--insecure"], "listening on"))
        sampler = Sampler()
        sampler.start()
        procs = []
        t0 = time.time()
        for i, p in specs:
            argv = [os.path.join(tb.BIN, "gfcp"), "-p", str(p["streams"]), "--buffer",
                    p["buffer"], "--cc", "bbr" if tuned else paper_cc, "--key-file", key, "--json",
                    src, f"gf://{tb.addr(TOPO, f'us-n{i}')}:{PORT}/pair{i}"]
            if p["rate"]:
                argv[1:1] = ["--rate", p["rate"]]
            procs.append((i, subprocess.Popen(tb.in_ns(f"jp-n{i}", argv), stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True)))
        times = {}
        used = set()
        for i, proc in procs:
            out, err = proc.communicate(timeout=1800)
            if proc.returncode != 0:
                raise RuntimeError(f"gfcp pair {i}: {err.strip()[:300]}")
            times[i] = time.time() - t0
            used.add(json.loads(out).get("congestion", "?"))  # what the senders really ran
        sampler.stop_flag.set()
        sampler.join()
        size = os.path.getsize(src)
        makespan = max(times.values())
        avg = pairs * size * 8 / makespan / 1e6
        per_pair = {i: size * 8 / t / 1e6 for i, t in times.items()}
        return avg, sampler.best_10s_mbps(), makespan, per_pair, used
    finally:
        for d in daemons:
            d.stop()
        for s in spools:
            subprocess.run(["rm", "-rf", s])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="1G", help="file per pair (head -c syntax)")
    p.add_argument("--paper-cc", default="cubic", help="congestion control of the paper rows")
    p.add_argument("--paper-only", action="store_true", help="only the paper rows")
    args = p.parse_args()
    print(tb.machine_notes(), flush=True)
    src = "/dev/shm/gfrep-sc2002-src"
    key = "/dev/shm/gfrep-sc2002-key"
    rows = []
    try:
        subprocess.run(f"head -c {args.size} /dev/urandom > {src}", shell=True, check=True)
        with tb.topology(TOPO), tb.servers(*[
                (f"jp-n{i}", [os.path.join(tb.BIN, "gfprobe"), "cc", "--provide", args.paper_cc,
                              "--hold"], "holding")
                for i in ([1] if args.paper_cc not in tb.available_cc() else [])]):
            for tuned in ((False,) if args.paper_only else (False, True)):
                for pairs in ((1, 2, 3, 4) if not tuned else (1, 4)):
                    avg, best10, secs, per_pair, used = run_case(pairs, tuned, src, key, args.paper_cc)
                    rows.append((pairs, tuned, avg, best10, secs, per_pair))
                    print(f"  pairs={pairs} tuned={tuned}: avg {avg:.0f} Mbit/s, best 10-s "
                          f"{best10:.0f}, {secs:.1f} s, per pair "
                          + ", ".join(f"{v:.0f}" for v in per_pair.values())
                          + f"; senders used {','.join(sorted(used))} (load {tb.loadavg()})", flush=True)
    finally:
        subprocess.run(["rm", "-f", src, key])
    print(f"\nSC2002 TransPAC, Japan -> US, {args.size} per pair (theoretical "
          f"{THEORETICAL} Mbit/s = 622 north + 271 south)\n")
    print("| pairs (north+south) | streams | settings | ours: avg Mbit/s | ours: best 10-s "
          "Mbit/s | ours: time s | paper: avg Mbit/s | paper: best 10-s Mbit/s | paper: time s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for pairs, tuned, avg, best10, secs, _ in rows:
        north = min(pairs, 3)
        south = 1 if pairs == 4 else 0
        streams = f"{16 * north + 8 * south}"
        paper = PAPER[pairs] if not tuned else (None, None, None)
        cells = ["-" if v is None else f"{v}" for v in paper]
        settings = "tuned: no caps, 16M, bbr" if tuned else f"paper: caps, 610K/250K, {args.paper_cc}"
        print(f"| {pairs} ({north}+{south}) | {streams} | {settings} | {avg:.0f} | {best10:.0f} | "
              f"{secs:.1f} | {cells[1]} | {cells[0]} | {cells[2]} |")


if __name__ == "__main__":
    main()
