"""Shared helpers of the long-fat-network benchmarks (lfn_*.py, sc2002_*.py).

Runs as root. Brings topologies up with gftopo, starts iperf3 / gfsited inside the node
namespaces, runs clients there, and always cleans up (servers by pid, topology down).
"""

import json
import os
import re
import subprocess
import time
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("GFREP_BIN", os.path.join(ROOT, "build", "bin"))


def gftopo(*args, check=True):
    r = subprocess.run([os.path.join(BIN, "gftopo"), *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"gftopo {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def addr(topo, node):
    return gftopo("addr", topo, node).strip()


def netns(node):
    return f"gfrep-{node}"


def in_ns(node, argv):
    return ["ip", "netns", "exec", netns(node), *argv]


@contextmanager
def topology(topo):
    gftopo("down", topo, check=False)
    gftopo("up", topo)
    try:
        yield
    finally:
        gftopo("down", topo, check=False)


class Server:
    """A daemon started in a namespace, stopped by pid."""

    def __init__(self, node, argv, ready):
        self.proc = subprocess.Popen(in_ns(node, argv), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 20
        for line in self.proc.stdout:
            if ready in line:
                break
            if time.time() > deadline:
                break
        if self.proc.poll() is not None:
            raise RuntimeError(f"{argv[0]} in {node} exited: {self.proc.returncode}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@contextmanager
def servers(*specs):
    started = []
    try:
        for node, argv, ready in specs:
            started.append(Server(node, argv, ready))
        yield started
    finally:
        for s in started:
            s.stop()


def iperf_server(node):
    return (node, ["iperf3", "-s", "--forceflush"], "Server listening")


def iperf(node, server_addr, streams=1, seconds=10, window=None, cc="cubic", omit=2,
          extra=()):
    """Runs an iperf3 client; returns received Mbit/s (after `omit` seconds of ramp-up)."""
    argv = ["iperf3", "-c", server_addr, "-J", "-t", str(seconds), "-O", str(omit),
            "-P", str(streams), "-C", cc, *extra]
    if window:
        argv += ["-w", window]
    # Generous: with many streams on a full drop-tail queue, a lost SYN or control message
    # costs RTO backoff (seconds each) before and after the timed part.
    r = subprocess.run(in_ns(node, argv), capture_output=True, text=True, timeout=seconds + 60)
    j = json.loads(r.stdout) if r.stdout.strip() else {}
    if "error" in j or r.returncode != 0:
        raise RuntimeError(f"iperf3: {j.get('error', r.stderr)}")
    return j["end"]["sum_received"]["bits_per_second"] / 1e6


def available_cc():
    """The congestion controls this host's kernel offers now."""
    return open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()


def emulator_pids(topo_name):
    d = f"/run/gfrep-topo/{topo_name}"
    pids = {}
    for f in os.listdir(d):
        if f.endswith(".pid"):
            pids[f[:-4]] = int(open(os.path.join(d, f)).read())
    return pids


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stats(topo):
    return json.loads(gftopo("stats", topo))


def machine_notes():
    load = open("/proc/loadavg").read().split()[:3]
    return (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, kernel {os.uname().release}, "
            f"{os.cpu_count()} cores, load avg {' '.join(load)} before the run")


def loadavg():
    return open("/proc/loadavg").read().split()[0]
