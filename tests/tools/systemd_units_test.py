#!/usr/bin/python3
"""The systemd units (tools/packaging/systemd/*.service): each parses as a unit file, runs
its daemon as the gfrep user from /etc/gfrep/<daemon>.toml, and keeps the sandbox the issue
asks for. With systemd-analyze present: `verify` has nothing to say (unknown keys, bad
values) and `security --offline` rates the exposure at most 2.5 (of 10).

  systemd_units_test.py SOURCE_DIR BIN_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SRC, BIN = sys.argv[1], sys.argv[2]
UNITS = os.path.join(SRC, "tools", "packaging", "systemd")
failures = []


def check(cond, message):
    if not cond:
        failures.append(message)


def parse(path):
    """{section: {key: [values]}}; a line that is neither is a failure."""
    sections, current = {}, None
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            if re.fullmatch(r"\[[A-Za-z]+\]", line):
                current = sections.setdefault(line[1:-1], {})
                continue
            m = re.fullmatch(r"([A-Za-z][A-Za-z0-9]*)=(.*)", line)
            check(m is not None and current is not None, f"{path}:{number}: not KEY=VALUE in a section: {line}")
            if m and current is not None:
                current.setdefault(m.group(1), []).append(m.group(2))
    return sections


def one(service, key):
    values = service.get(key, [])
    check(len(values) == 1, f"{key}: expected exactly one, got {values}")
    return values[0] if values else None


for daemon in ("gfsited", "gfcatalogd"):
    path = os.path.join(UNITS, f"{daemon}.service")
    unit = parse(path)
    check(set(unit) == {"Unit", "Service", "Install"}, f"{daemon}: sections {sorted(unit)}")
    s = unit.get("Service", {})
    expected = {
        "Type": "simple",
        "User": "gfrep",
        "Group": "gfrep",
        "ExecStart": f"/usr/bin/{daemon} --config /etc/gfrep/{daemon}.toml",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "CapabilityBoundingSet": "",
        "AmbientCapabilities": "",
        "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
        "ConfigurationDirectory": "gfrep",
    }
    for key, value in expected.items():
        got = one(s, key)
        check(got == value, f"{daemon}.service {key}={got!r}, want {value!r}")
    check("gfrep" in one(s, "StateDirectory").split(), f"{daemon}: StateDirectory lacks gfrep")
    check("/var/lib/gfrep" in one(s, "ReadWritePaths").split(), f"{daemon}: /var/lib/gfrep not writable")
    check(unit.get("Install", {}).get("WantedBy") == ["multi-user.target"], f"{daemon}: WantedBy")
    # The settings file ExecStart reads is shipped as an example.
    check(os.path.exists(os.path.join(SRC, "tools", "packaging", f"{daemon}.toml")), f"{daemon}.toml example missing")

analyze = shutil.which("systemd-analyze")
if analyze is None:
    print("systemd-analyze not installed: unit keys checked by the parser above only")
else:
    with tempfile.TemporaryDirectory(prefix="gfrep-units-") as tmp:
        copies = []
        for daemon in ("gfsited", "gfcatalogd"):
            with open(os.path.join(UNITS, f"{daemon}.service"), encoding="utf-8") as f:
                text = f.read().replace("/usr/bin/", BIN.rstrip("/") + "/")
            copy = os.path.join(tmp, f"{daemon}.service")
            with open(copy, "w", encoding="utf-8") as f:
                f.write(text)
            copies.append(copy)
        # verify exits 0 on unknown keys too: any message is a failure.
        r = subprocess.run([analyze, "verify", *copies], capture_output=True, text=True)
        check(r.returncode == 0 and not (r.stdout + r.stderr).strip(),
              f"systemd-analyze verify: rc={r.returncode} {r.stdout}{r.stderr}")
        for copy in copies:
            r = subprocess.run([analyze, "security", "--offline=yes", "--threshold=25", "--no-pager", copy],
                               capture_output=True, text=True)
            level = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout)
            print(f"{os.path.basename(copy)}: exposure {level.group(1) if level else '?'}")
            check(r.returncode == 0, f"systemd-analyze security {copy}: rc={r.returncode}\n{r.stdout[-2000:]}{r.stderr}")

for f in failures:
    print("FAIL:", f)
if failures:
    sys.exit(1)
print("PASS")
