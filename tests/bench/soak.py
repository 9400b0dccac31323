#!/usr/bin/env python3
"""Soak run of a whole federation (tests/bench/soak.sh; the hour not in CI; RESULTS.md "Soak").

Three sites of one node each on loopback (127.0.0.11/21/31), one gfcatalogd (RocksDB, planner,
repairer, one continuous policy), mutual TLS as the README teaches. For --minutes, one client
loop keeps the federation busy as users would: stores new files (gfreg at a random node),
asks for copies (gfrep -N 2|3), reads files at random nodes (gfexport, the local replica
first), rewrites files with new bytes and deletes them, with the live population held near
--files. Every --restart-every minutes the catalog is restarted (SIGTERM and SIGKILL in turn)
on the same database and address. Every minute (--sample-seconds) the RSS of every daemon is
sampled, and from the catalog's /metrics (gfcatalogd --http) the bytes RocksDB holds in memory
that grow until their bound: memtables (flushed at 64 MiB per column family), the block cache
(256 MiB) and the index and filter blocks of open tables.
Beside each RSS sample, every daemon's heap as its allocator counts it (gfrep_process_heap_*
on /metrics, replica/core/heap.h): bytes in use and bytes freed but kept, to tell a leak
(in use grows) from an allocator keeping a burst's peak (free grows); printed, not judged.

At the end every file the model holds is read at every node and checked.

Pass:
  * memory flat: for each daemon, the highest RSS in the last --restart-every minutes is at most
    5 % (--max-rss-growth) above the highest RSS in minutes [restart-every, 2 x restart-every)
    (the window after the first catalog life; for the catalog both windows are one whole life
    each). For the catalog the RSS judged is less RocksDB's bounded memory above: a memtable
    filling towards its flush is a cache with a bound, not a leak (both figures are printed,
    and the medians of each window beside the highest samples);
  * 0 files lost: every file whose last store was acknowledged is readable with its bytes;
  * 0 wrong bytes served: no read ever returned bytes other than an acknowledged version of the
    file (a version whose store was cut by a catalog restart counts as possibly acknowledged).

Prints one JSON object (--json-out FILE also writes it) and a Markdown summary; exit 0 on
pass, 1 on a failed criterion, 2 on a set-up error.

A smoke run (seconds, not an hour; tests/bench/CMakeLists.txt) takes fractions of a minute,
samples every few seconds and does not judge memory, which says nothing at that length:
  soak.py --bin DIR --minutes 0.35 --restart-every 0.15 --sample-seconds 3 --files 20 \
          --max-rss-growth 1000
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import socket
import statistics
import tempfile
import threading
import time
import urllib.request

NODES = {"a1": ("a", "127.0.0.11"), "b1": ("b", "127.0.0.21"), "c1": ("c", "127.0.0.31")}
SIZES = [4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 8 << 20]


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Daemon:
    def __init__(self, name, argv, work, env):
        self.name, self.argv, self.work, self.env = name, argv, work, env
        self.proc = None
        self.listen = None

    def start(self, timeout=30):
        out = open(os.path.join(self.work, f"{self.name}.out"), "a")
        err = open(os.path.join(self.work, f"{self.name}.log"), "a")
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=err, env=self.env,
                                     text=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            out.write(line)
            out.flush()
            if line.startswith("listening on "):
                self.listen = line.split()[-1]
                # Keep draining stdout so the daemon never blocks on a full pipe.
                self._drain(out)
                return
        raise RuntimeError(f"{self.name} did not start: see {self.work}/{self.name}.log")

    def _drain(self, out):
        import threading

        def run(p=self.proc):
            for line in p.stdout:
                out.write(line)
            out.close()

        threading.Thread(target=run, daemon=True).start()

    def rss_kib(self):
        if self.proc is None or self.proc.poll() is not None:
            return None
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Soak:
    def __init__(self, args):
        self.args = args
        self.bin = args.bin
        self.rng = random.Random(args.seed)
        self.work = tempfile.mkdtemp(prefix="gfrep-soak.")
        os.chmod(self.work, 0o755)
        self.daemons = {}
        # path -> set of sha256 hex digests of versions a reader may get (acknowledged, or
        # possibly acknowledged when a store was cut by a restart); "" in the set: the file
        # may have been removed (an unacknowledged gfrm).
        self.model = {}
        self.sure = {}  # path -> True when the last store/rm of the path was acknowledged
        self.counter = 0
        self.stats = {k: 0 for k in ("stores", "store_errors", "rewrites", "rewrite_errors",
                                     "reads", "read_errors", "wrong_bytes", "replicates",
                                     "replicate_errors", "removes", "remove_errors",
                                     "catalog_restarts")}
        self.wrong = []
        self.rss = []  # (minute, {daemon: kib})
        self.heap = []  # (minute, {daemon: {"in_use_kib", "free_kib"} or None})
        self.rocks = []  # (minute, {memtable|block_cache|table_readers: kib}) of the catalog
        self.env = dict(os.environ)

    # -- set-up ------------------------------------------------------------------------

    def tool(self, argv, timeout=120, node=None, stdout=subprocess.PIPE):
        env = dict(self.env)
        if node:
            env["GFREP_SITE"], env["GFREP_NODE"] = NODES[node][0], node
        try:
            return subprocess.run([os.path.join(self.bin, argv[0])] + argv[1:], env=env,
                                  stdout=stdout, stderr=subprocess.PIPE, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return subprocess.CompletedProcess(e.cmd, 124, b"", b"timeout")

    def setup(self):
        ca = os.path.join(self.work, "ca")
        run = lambda *a: subprocess.run([os.path.join(self.bin, a[0])] + list(a[1:]), check=True,
                                        stdout=subprocess.DEVNULL)
        run("gfca", "init", "--dir", ca)
        run("gfca", "issue", "catalog", "catalog", "--dir", ca, "--host", "127.0.0.1")
        run("gfca", "issue", "admin", "soak", "--dir", ca)
        for n, (_, addr) in NODES.items():
            run("gfca", "issue", "node", n, "--dir", ca, "--host", addr)
        with open(os.path.join(self.work, "policies.yaml"), "w") as f:
            f.write('rules:\n  - name: pol-two\n    paths: ["/soak/pol/**"]\n    copies: 2\n'
                    '    sites: "*"\n')
        self.catalog_argv = [
            os.path.join(self.bin, "gfcatalogd"), "--db", os.path.join(self.work, "db"),
            "--listen", "127.0.0.1:0", "--policies", os.path.join(self.work, "policies.yaml"),
            "--tls-cert", f"{ca}/catalog.pem", "--tls-key", f"{ca}/catalog.key",
            "--tls-client-ca", f"{ca}/ca.pem", "--token-key", f"{ca}/token.key",
            "--log-level", "warn", "--http", f"127.0.0.1:{free_port()}"]
        self.metrics_url = f"http://{self.catalog_argv[-1]}/metrics"
        cat = Daemon("catalog", self.catalog_argv, self.work, self.env)
        cat.metrics_url = self.metrics_url
        cat.start()
        # Restarts reuse the first address.
        self.catalog_argv[self.catalog_argv.index("127.0.0.1:0")] = cat.listen
        self.daemons["catalog"] = cat
        self.env.update(GFREP_CATALOG=cat.listen, GFREP_CATALOG_CA=f"{ca}/ca.pem",
                        GFREP_CERT=f"{ca}/soak.pem", GFREP_KEY=f"{ca}/soak.key")
        key = os.path.join(self.work, "shared_key")
        self.env["GFREP_KEY_FILE"] = key
        self.key = key
        for s in ("a", "b", "c"):
            if self.tool(["gfsite", "add", s]).returncode != 0:
                raise RuntimeError(f"gfsite add {s} failed")
        for n, (site, addr) in NODES.items():
            d = Daemon(n, [os.path.join(self.bin, "gfsited"), "--listen", f"{addr}:0",
                           "--spool", os.path.join(self.work, f"spool-{n}"), "--site", site,
                           "--node", n, "--catalog", cat.listen, "--key-file", key,
                           "--catalog-ca", f"{ca}/ca.pem", "--tls-cert", f"{ca}/{n}.pem",
                           "--tls-key", f"{ca}/{n}.key", "--tls-ca", f"{ca}/ca.pem",
                           "--log-level", "warn", "--http", f"127.0.0.1:{free_port()}"],
                       self.work, self.env)
            d.metrics_url = f"http://{d.argv[-1]}/metrics"
            d.start()
            self.daemons[n] = d
        deadline = time.time() + 60
        while time.time() < deadline:
            r = self.tool(["gfnode", "list"])
            if r.returncode == 0 and all(n.encode() in r.stdout for n in NODES):
                break
            time.sleep(0.5)
        else:
            raise RuntimeError("the nodes did not register")
        for d in ("/soak", "/soak/pol", "/soak/usr"):
            self.tool(["gfmkdir", "-p", d])

    # -- operations --------------------------------------------------------------------

    def new_bytes(self):
        size = self.rng.choice(SIZES)
        data = self.rng.randbytes(size)
        path = os.path.join(self.work, "upload")
        with open(path, "wb") as f:
            f.write(data)
        return path, hashlib.sha256(data).hexdigest()

    def store(self, path, rewrite):
        local, digest = self.new_bytes()
        node = self.rng.choice(list(NODES))
        r = self.tool(["gfreg", "--key-file", self.key, local, path, "--site", NODES[node][0],
                       "--node", node])
        kind = "rewrites" if rewrite else "stores"
        self.stats[kind] += 1
        if r.returncode == 0:
            self.model[path] = {digest}
            self.sure[path] = True
        else:
            self.stats[kind[:-1] + "_errors"] += 1
            # Maybe committed before the error reached us (a catalog restart): either version.
            self.model.setdefault(path, {""}).add(digest)
            self.sure[path] = False

    def read(self, path, node, verify=False):
        argv = ["gfexport", "--key-file", self.key, path]
        if verify:
            argv.insert(1, "--verify")
        r = self.tool(argv, node=node)
        self.stats["reads"] += 1
        if r.returncode != 0:
            self.stats["read_errors"] += 1
            return None
        digest = hashlib.sha256(r.stdout).hexdigest()
        if digest not in self.model.get(path, set()):
            self.stats["wrong_bytes"] += 1
            self.wrong.append({"path": path, "node": node, "bytes": len(r.stdout),
                               "at": time.strftime("%H:%M:%S")})
            log(f"WRONG BYTES: {path} at {node} ({len(r.stdout)} bytes)")
        return digest

    def replicate(self, path):
        n = self.rng.choice(["2", "3"])
        r = self.tool(["gfrep", "-N", n, path, "--wait-timeout", "120"], timeout=150)
        self.stats["replicates"] += 1
        if r.returncode != 0:
            self.stats["replicate_errors"] += 1

    def remove(self, path):
        r = self.tool(["gfrm", path])
        self.stats["removes"] += 1
        if r.returncode == 0:
            del self.model[path]
            self.sure.pop(path, None)
        else:
            self.stats["remove_errors"] += 1
            self.model[path].add("")
            self.sure[path] = False

    def step(self):
        live = sorted(self.model)
        ops = ["store"] * 3 + ["read"] * 4 + ["replicate"] * 2 + ["rewrite"] + ["remove"]
        if len(live) >= self.args.files:
            ops += ["remove"] * 3
        op = self.rng.choice(ops) if live else "store"
        if op == "store":
            self.counter += 1
            sub = self.rng.choice(["pol", "usr"])
            self.store(f"/soak/{sub}/f{self.counter:06d}", rewrite=False)
        elif op == "read":
            self.read(self.rng.choice(live), self.rng.choice(list(NODES)))
        elif op == "replicate":
            self.replicate(self.rng.choice(live))
        elif op == "rewrite":
            self.store(self.rng.choice(live), rewrite=True)
        else:
            self.remove(self.rng.choice(live))

    def restart_catalog(self):
        sig = signal.SIGKILL if self.stats["catalog_restarts"] % 2 else signal.SIGTERM
        log(f"restarting the catalog ({signal.Signals(sig).name})")
        cat = self.daemons["catalog"]
        cat.stop(sig)
        cat.start(timeout=120)
        self.stats["catalog_restarts"] += 1

    def rocksdb_kib(self):
        """The catalog's RocksDB memory with a bound, in KiB, from its /metrics; None if unknown."""
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=10) as r:
                text = r.read().decode()
        except OSError:
            return None
        out = {}
        for line in text.splitlines():
            for name in ("memtable", "block_cache", "table_readers"):
                prefix = f"gfrep_catalog_rocksdb_{name}_bytes "
                if line.startswith(prefix):
                    out[name] = int(float(line[len(prefix):]) / 1024)
        return out if len(out) == 3 else None

    @staticmethod
    def heap_kib(daemon):
        """The daemon's heap from its /metrics in KiB (in use, freed but kept); None if unknown."""
        try:
            with urllib.request.urlopen(daemon.metrics_url, timeout=10) as r:
                text = r.read().decode()
        except (OSError, AttributeError):
            return None
        out = {}
        for line in text.splitlines():
            for name in ("in_use", "free"):
                prefix = f"gfrep_process_heap_{name}_bytes "
                if line.startswith(prefix):
                    out[name + "_kib"] = int(float(line[len(prefix):]) / 1024)
        return out if len(out) == 2 else None

    def sample(self, minute):
        row = {name: d.rss_kib() for name, d in self.daemons.items()}
        self.rss.append((minute, row))
        rocks = self.rocksdb_kib()
        self.rocks.append((minute, rocks))
        heap = {name: self.heap_kib(d) for name, d in self.daemons.items()}
        self.heap.append((minute, heap))
        log(f"minute {minute}: RSS KiB {row}; catalog RocksDB KiB {rocks}; heap KiB {heap}; "
            f"files {len(self.model)}; {self.stats}")

    # -- the run -----------------------------------------------------------------------

    def run(self):
        start = time.time()
        end = start + self.args.minutes * 60
        # Samples on their own thread, on time: in the loop they waited for the step or the
        # catalog restart under way, and one that took 15-18 s (a restart on a loaded CI
        # machine, main's tree too) left the second window without a sample, so the smoke
        # run judged nothing and failed.
        done = threading.Event()

        def sampler():
            samples = 0
            while not done.is_set():
                next_sample = number(round(samples * self.args.sample_seconds / 60, 6))
                if next_sample < self.args.minutes and (time.time() - start) / 60 >= next_sample:
                    self.sample(next_sample)
                    samples += 1
                else:
                    done.wait(0.2)

        thread = threading.Thread(target=sampler, daemon=True)
        thread.start()
        next_restart = self.args.restart_every
        try:
            while time.time() < end:
                if (time.time() - start) / 60 >= next_restart:
                    self.restart_catalog()
                    next_restart += self.args.restart_every
                self.step()
        finally:
            done.set()
            thread.join()
        self.sample(self.args.minutes)
        return self.final_check()

    def final_check(self):
        log("final check: every file at every node")
        # Let queued copies settle first, so the reads exercise local replicas too.
        time.sleep(5)
        lost = []
        for path in sorted(self.model):
            ok_somewhere = False
            for node in NODES:
                d = self.read(path, node, verify=True)
                if d is not None and d != "":
                    ok_somewhere = True
            if not ok_somewhere and self.sure.get(path) and "" not in self.model[path]:
                lost.append(path)
        return lost

    def verdict(self, lost):
        w = self.args.restart_every
        # The catalog's RSS less RocksDB's bounded memory, where both were sampled.
        judged = []
        for (minute, row), (_, rocks) in zip(self.rss, self.rocks):
            row = dict(row)
            cat = row.get("catalog")
            row["catalog"] = cat - sum(rocks.values()) if cat is not None and rocks else None
            judged.append((minute, row))

        def window(samples, lo, hi, pick):
            values = {}
            for minute, row in samples:
                if lo <= minute < hi:
                    for k, v in row.items():
                        if v is not None:
                            values.setdefault(k, []).append(v)
            return {k: pick(v) for k, v in values.items()}

        def growth_of(samples, pick):
            base = window(samples, w, 2 * w, pick)
            last = window(samples, self.args.minutes - w, self.args.minutes + 1, pick)
            return base, last, {k: (last[k] / base[k] - 1) * 100
                                for k in base if k in last and base[k]}

        base, last, raw_growth = growth_of(self.rss, max)
        _, _, median_growth = growth_of(self.rss, statistics.median)
        jbase, jlast, growth = growth_of(judged, max)
        # The heap as the allocator counts it (printed, not judged).
        heap = {}
        for part in ("in_use_kib", "free_kib"):
            samples = [(m, {k: (v or {}).get(part) for k, v in row.items()}) for m, row in self.heap]
            hb, hl, _ = growth_of(samples, max)
            heap[part] = {"window_2_max": hb, "last_window_max": hl}
        flat = bool(growth) and all(g <= self.args.max_rss_growth for g in growth.values())
        result = {
            "minutes": self.args.minutes, "restart_every": w, "seed": self.args.seed,
            "load_before": self.load_before, "load_after": os.getloadavg()[0],
            "rss_kib_window_2": base, "rss_kib_last_window": last,
            "rss_growth_pct": {k: round(v, 2) for k, v in raw_growth.items()},
            "rss_median_growth_pct": {k: round(v, 2) for k, v in median_growth.items()},
            "judged_kib_window_2": jbase, "judged_kib_last_window": jlast,
            "judged_growth_pct": {k: round(v, 2) for k, v in growth.items()},
            "catalog_rocksdb_kib_samples": self.rocks,
            "files_at_end": len(self.model), "files_lost": lost,
            "wrong_bytes_served": self.wrong, "stats": self.stats,
            "rss_samples": self.rss,
            "heap_kib": heap,
            "heap_samples": self.heap,
            "pass": flat and not lost and not self.wrong,
        }
        return result

    def cleanup(self):
        for d in self.daemons.values():
            d.stop()
        if not self.args.keep:
            shutil.rmtree(self.work, ignore_errors=True)
        else:
            log(f"work directory kept: {self.work}")


def free_port():
    """A TCP port free on 127.0.0.1 now (the catalog's --http; restarts reuse it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def number(x):
    """An int when x (text or a number) is whole, else a float: the JSON shows 60, not 60.0."""
    f = float(x)
    return int(f) if f.is_integer() else f


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", required=True, help="directory of the built gfrep programs")
    p.add_argument("--minutes", type=number, default=60)
    p.add_argument("--restart-every", type=number, default=10,
                   help="minutes between catalog restarts")
    p.add_argument("--sample-seconds", type=number, default=60, help="seconds between RSS samples")
    p.add_argument("--max-rss-growth", type=number, default=5,
                   help="percent of RSS growth that still counts as flat memory")
    p.add_argument("--files", type=int, default=300, help="live files to hold near")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json-out", help="also write the result here")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    args = p.parse_args()
    if args.minutes < 2 * args.restart_every:
        p.error("--minutes must be at least twice --restart-every (two memory windows)")
    soak = Soak(args)
    soak.load_before = os.getloadavg()[0]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    try:
        try:
            soak.setup()
        except (RuntimeError, subprocess.CalledProcessError) as e:
            print(f"soak: set-up failed: {e}", file=sys.stderr)
            return 2
        lost = soak.run()
        result = soak.verdict(lost)
    finally:
        soak.cleanup()
    text = json.dumps(result, indent=1)
    print(text)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(text)
    print("\n| daemon | RSS KiB, minutes %g-%g (max) | RSS KiB, last %g min (max) | growth "
          "| growth of medians | judged growth |" % (
              args.restart_every, 2 * args.restart_every, args.restart_every))
    print("|---|---:|---:|---:|---:|---:|")
    for k in result["rss_kib_window_2"]:
        print(f"| {k} | {result['rss_kib_window_2'][k]} | {result['rss_kib_last_window'].get(k)} "
              f"| {result['rss_growth_pct'].get(k)} % | {result['rss_median_growth_pct'].get(k)} % "
              f"| {result['judged_growth_pct'].get(k)} % |")
    print("(judged: the catalog's RSS less RocksDB's memtables, block cache and table readers; "
          "the agents' RSS as it is)")
    heap = result["heap_kib"]
    print("\n| daemon | heap in use KiB, minutes %g-%g / last (max) | freed but kept KiB, "
          "minutes %g-%g / last (max) |" % ((args.restart_every, 2 * args.restart_every) * 2))
    print("|---|---:|---:|")
    for k in result["rss_kib_window_2"]:
        u, f = heap["in_use_kib"], heap["free_kib"]
        print(f"| {k} | {u['window_2_max'].get(k)} / {u['last_window_max'].get(k)} "
              f"| {f['window_2_max'].get(k)} / {f['last_window_max'].get(k)} |")
    print(f"\nfiles lost: {len(result['files_lost'])}; wrong bytes served: "
          f"{len(result['wrong_bytes_served'])}; operations: {result['stats']}; "
          f"pass: {result['pass']}")
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
