#!/usr/bin/env python3
"""Runs one benchmark at a small size and checks that it ran (tests/bench/CMakeLists.txt).

  smoke_check.py [--name NAME] [--root] [--postgres] [--timeout S] [--env K=V ...]
                 [--json KEY ...] [--expect REGEX ...] [--reject REGEX ...]
                 -- COMMAND [ARG ...]

Passes (exit 0) when COMMAND exits 0 and its standard output holds what the benchmark
promises: with --json, a JSON object (the first line starting with "{" begins it) that has
every KEY ("a.b" looks inside "a"); with --expect, a line matching each REGEX (re.MULTILINE,
e.g. a Markdown table's header); and no line of its output matches a --reject REGEX (a
benchmark that reports a failed cell and carries on, e.g. "FAILED"). No figure is judged: a
smoke run only proves that the benchmark still runs its whole path and prints its result.

Skips (exit 77, ctest SKIP_RETURN_CODE) with a message: --root when not root (network
namespaces, FUSE, dropping caches); --postgres when no PostgreSQL server is installed, unless
GFREP_REQUIRE_POSTGRES=1 (CI, where tools/setup-deps installed it) makes that a failure.

COMMAND runs in its own session; after --timeout seconds it gets SIGINT (the scripts clean
up on it: daemons stopped, topologies down), then SIGKILL 20 s later. A process of that
session still running after COMMAND exited (a daemon the benchmark did not stop) fails the
run, and is killed.
"""

import argparse
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

SKIP = 77


def find_json(text):
    """The first JSON object that starts a line of `text`, or None."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"^\{", text, re.MULTILINE):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def has_key(obj, dotted):
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return False
        obj = obj[part]
    return True


def session_processes(sid):
    """[(pid, command line)] of the processes in session `sid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) != sid or fields[0] == "Z":  # fields[3]: session; Z: zombie
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        found.append((int(entry), cmd))
    return found


def left_behind(sid):
    """Processes of session `sid` still there 5 s after its leader exited; kills them."""
    deadline = time.monotonic() + 5
    while (procs := session_processes(sid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid, _ in procs:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return procs


def run(argv, env, timeout):
    """(exit status, stdout, stderr, timed out, processes left behind)"""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err, False, left_behind(proc.pid)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        return proc.returncode, out, err, True, left_behind(proc.pid)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--name", help="the benchmark's name in messages (default: COMMAND's)")
    p.add_argument("--root", action="store_true", help="skip unless root")
    p.add_argument("--postgres", action="store_true", help="skip unless PostgreSQL is installed")
    p.add_argument("--timeout", type=float, default=120, help="seconds before SIGINT")
    p.add_argument("--env", action="append", default=[], metavar="K=V")
    p.add_argument("--json", action="append", default=[], metavar="KEY")
    p.add_argument("--expect", action="append", default=[], metavar="REGEX")
    p.add_argument("--reject", action="append", default=[], metavar="REGEX")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    argv = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not argv:
        p.error("no command")
    name = args.name or os.path.basename(argv[0])
    if args.root and os.geteuid() != 0:
        print(f"SKIP: {name} needs root (network namespaces, FUSE or /proc/sys); CI runs as root")
        return SKIP
    if args.postgres and not glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"):
        if os.environ.get("GFREP_REQUIRE_POSTGRES") == "1":
            print(f"FAIL: {name} needs PostgreSQL, and GFREP_REQUIRE_POSTGRES=1 (tools/setup-deps)")
            return 1
        print(f"SKIP: {name} needs PostgreSQL (tools/setup-deps installs postgresql-15)")
        return SKIP
    env = dict(os.environ)
    for kv in args.env:
        k, _, v = kv.partition("=")
        env[k] = v
    print("+ " + " ".join(args.env + argv), flush=True)
    t0 = time.monotonic()
    rc, out, err, timed_out, left = run(argv, env, args.timeout)
    secs = time.monotonic() - t0
    for title, text in (("standard output", out), ("standard error", err)):
        print(f"--- {title} ---\n{text}", end="" if text.endswith("\n") or not text else "\n")
    problems = []
    if timed_out:
        problems.append(f"still running after {args.timeout:.0f} s (interrupted)")
    if rc != 0:
        problems.append(f"exit status {rc}")
    if left:
        problems.append("left processes running (killed): "
                        + ", ".join(f"{pid} {cmd[:80]}" for pid, cmd in left))
    if args.json:
        obj = find_json(out)
        if obj is None:
            problems.append("no JSON object in its output")
        else:
            missing = [k for k in args.json if not has_key(obj, k)]
            if missing:
                problems.append(f"JSON object without {', '.join(missing)}")
    for regex in args.expect:
        if not re.search(regex, out, re.MULTILINE):
            problems.append(f"no line matching {regex!r}")
    for regex in args.reject:
        m = re.search(regex, out + err, re.MULTILINE)
        if m:
            line = (out + err)[:m.start()].count("\n") + 1
            problems.append(f"a line matching {regex!r} (output line {line})")
    if problems:
        print(f"\nFAIL: {name} ({secs:.1f} s): " + "; ".join(problems))
        return 1
    print(f"\nOK: {name} ran in {secs:.1f} s and printed its result")
    return 0


if __name__ == "__main__":
    sys.exit(main())
