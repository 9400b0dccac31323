#!/usr/bin/python3
"""Drives the gfrep dashboard in headless Chromium for the C++ dashboard test.

  dashboard_browser.py --url http://127.0.0.1:PORT/ --out DIR --phase PHASE [--timeout S]
                       [--route kek->sdsc]

Phases: moving, idle, disconnected, reconnected, detail. PHASE may also be a comma list
(e.g. "disconnected,reconnected"): the phases then run in order in one browser session, which
is what proves that the page reconnects by itself. Each phase writes DIR/<phase>.ready once the
page is loaded and it has started waiting (so a test can stop or restart the catalog then), and
DIR/<phase>.png at its end, also on failure. Prints one line of JSON on stdout (the phase's
result, or {"phases": [...]} for a list); exits 0 if every assertion held, 1 otherwise with the
reason on stderr.
"""
import argparse
import json
import shutil
import tempfile
import os
import sys
import time

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


class PhaseError(Exception):
    pass


def wait_for(what, predicate, timeout, interval=0.1):
    """Polls predicate() until it returns something truthy; browser errors count as 'not yet'."""
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except WebDriverException as e:  # stale element, page still loading, ...
            last_error = e.msg
        if time.monotonic() > deadline:
            raise PhaseError(f"timed out after {timeout:g} s waiting for {what}"
                             + (f" (last browser error: {last_error})" if last_error else ""))
        time.sleep(interval)


class Page:
    def __init__(self, driver, args):
        self.d, self.args = driver, args

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def load(self):
        """Opens the page, retrying while the server is unreachable."""
        def attempt():
            try:
                self.d.get(self.args.url)
            except WebDriverException:
                return False
            return self.status() is not None
        wait_for(f"the dashboard at {self.args.url} to load", attempt, self.args.timeout, 0.5)

    def status(self):
        return self.js("const s = document.getElementById('status'); return s && s.textContent.trim();")

    def ticks(self):
        return self.js("return window.gfdash ? window.gfdash.ticks : null;")

    def total_bytes(self):
        return int(self.js("return document.getElementById('total-bytes').dataset.bytes;") or 0)

    def graph(self, window):
        """data-* of the route's graph for one window ('0.1s', '1s', '10s'), or None."""
        return self.js("""
            const row = [...document.querySelectorAll('.route-row')]
                .find(r => r.dataset.route === arguments[0]);
            const g = row && row.querySelector('.graph[data-window="' + arguments[1] + '"]');
            return g && {points: +g.dataset.points, last_mbps: +g.dataset.lastMbps,
                         last_ms: +g.dataset.lastMs};""", self.args.route, window)

    def wait_status(self, want):
        wait_for(f"#status to say '{want}'", lambda: self.status() == want, self.args.timeout)

    def ready(self, phase):
        open(os.path.join(self.args.out, phase + ".ready"), "w").close()


def phase_moving(p):
    p.wait_status("connected")
    p.ready("moving")
    wait_for(f"the route row {p.args.route}", lambda: (p.graph("0.1s") or {}).get("points", 0) > 0,
             p.args.timeout)
    t0, ticks0, g0 = time.monotonic(), p.ticks(), p.graph("0.1s")
    samples = []
    while time.monotonic() - t0 < 3.0:
        samples.append(p.graph("0.1s")["last_mbps"])
        time.sleep(0.1)
    ticks1, g1 = p.ticks(), p.graph("0.1s")
    recent = p.js("return window.gfdash.recentMbps(arguments[0], 30);", "route:" + p.args.route)
    tps = (ticks1 - ticks0) / (time.monotonic() - t0)
    # The streams panel: the page watches the busiest node pair and draws one line per stream.
    streams = wait_for("the stream graphs", lambda: p.js("""
        const g = document.querySelector('#stream-graphs .graph[data-window="0.1s"]');
        const names = window.gfdash.streams;
        return names.length > 0 && +g.dataset.points > 0 &&
            {pair: document.getElementById('stream-pair').value, names, points: +g.dataset.points};"""),
                       p.args.timeout)
    p.js("document.getElementById('stream-graphs').scrollIntoView();")
    time.sleep(0.5)  # a few more points
    screenshot(p.d, p.args.out, "streams")
    p.js("window.scrollTo(0, 0);")
    result = {"phase": "moving", "ticks_per_s": round(tps, 2), "points_0_1s": g1["points"],
              "last_mbps": g1["last_mbps"], "max_recent_mbps": max(samples + recent),
              "total_bytes": p.total_bytes(), "stream_pair": streams["pair"],
              "streams": len(streams["names"]), "stream_points": streams["points"]}
    # Once the 5-minute window is full the count stays at 3000, but the last point still moves.
    if not (g1["points"] > g0["points"] or g1["last_ms"] > g0["last_ms"]):
        raise PhaseError(f"0.1-s graph did not grow: {g0} -> {g1}", result)
    if not max(samples + recent) > 0:
        raise PhaseError("no 0.1-s bin above 0 Mbit/s in the last 3 s while bytes move", result)
    if tps < 5:
        raise PhaseError(f"only {tps:.1f} ticks per second (want >= 5)", result)
    return result


def phase_idle(p):
    p.wait_status("connected")
    p.ready("idle")

    def idle():
        q = p.js("""
            const busy = [...document.querySelectorAll('#queue tr.request')]
                .filter(r => ['queued', 'running'].includes(r.dataset.state)).map(r => r.dataset.id);
            return {busy, queued: document.getElementById('tasks-queued').textContent.trim(),
                    leased: document.getElementById('tasks-leased').textContent.trim()};""")
        return not q["busy"] and q["queued"] == "0" and q["leased"] == "0"
    wait_for("an idle queue (no queued/running request, 0 tasks queued and leased)", idle,
             p.args.timeout, 0.25)
    routes = p.js("""return [...new Set([...document.querySelectorAll('#topology [data-route]')]
                                       .map(e => e.dataset.route))];""")
    return {"phase": "idle", "total_bytes": p.total_bytes(), "routes": routes}


def phase_disconnected(p):
    # The page starts out 'disconnected' before its first connect: see it connected first.
    p.wait_status("connected")
    ticks = p.ticks()
    p.ready("disconnected")
    p.wait_status("disconnected")
    return {"phase": "disconnected", "ticks": ticks}


def phase_reconnected(p):
    ticks0 = p.ticks() or 0
    p.ready("reconnected")
    t0 = time.monotonic()
    wait_for("#status to say 'connected' and ticks to arrive",
             lambda: p.status() == "connected" and (p.ticks() or 0) > ticks0, p.args.timeout)
    return {"phase": "reconnected", "ticks_before": ticks0, "ticks": p.ticks(),
            "waited_s": round(time.monotonic() - t0, 2)}


def phase_detail(p):
    p.wait_status("connected")
    p.ready("detail")

    def click_first():
        rows = p.d.find_elements(By.CSS_SELECTOR, "#queue tr.request")
        if not rows:
            return False
        try:
            rows[0].click()
        except WebDriverException:  # covered (e.g. by the sticky header): click it from JS
            p.js("arguments[0].click();", rows[0])  # a stale row raises and is retried
        return rows[0].get_attribute("data-id")
    request_id = wait_for("a request row to click", click_first, p.args.timeout)
    kind = wait_for("#detail to show the request",
                    lambda: p.js("const k = document.getElementById('detail').dataset.kind;"
                                 "return ['request', 'error'].includes(k) && k;"), p.args.timeout)
    text = p.d.find_element(By.ID, "detail").text
    result = {"phase": "detail", "id": request_id, "kind": kind, "text": text[:500]}
    if kind != "request" or "request" not in text.lower():
        raise PhaseError(f"detail pane for request {request_id} shows: {text[:200]!r}", result)
    return result


PHASES = {"moving": phase_moving, "idle": phase_idle, "disconnected": phase_disconnected,
          "reconnected": phase_reconnected, "detail": phase_detail}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--phase", required=True, help="one of %s, or a comma list" % ", ".join(PHASES))
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--route", default="kek->sdsc")
    args = ap.parse_args()
    phases = args.phase.split(",")
    unknown = [ph for ph in phases if ph not in PHASES]
    if unknown:
        ap.error(f"unknown phase(s) {unknown}")
    os.makedirs(args.out, exist_ok=True)

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    # A profile of its own (parallel runs must not share one), removed at the end.
    profile = tempfile.mkdtemp(prefix="gfrep-dashboard-chrome-")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,900", f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "SEVERE"})

    results, error, phase, driver = [], None, phases[0], None
    try:
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        driver.set_page_load_timeout(min(args.timeout, 30))
        page = Page(driver, args)
        page.load()
        for phase in phases:
            try:
                results.append(PHASES[phase](page))
            finally:
                screenshot(driver, args.out, phase)
    except (PhaseError, WebDriverException) as e:
        if isinstance(e, PhaseError):
            error = f"phase {phase}: {e.args[0]}"
            results.append(dict(e.args[1]) if len(e.args) > 1 else {"phase": phase})
        else:
            error = f"phase {phase}: browser error: {e.msg}"
            results.append({"phase": phase})
        results[-1].update(ok=False, error=error)
        if driver:
            screenshot(driver, args.out, phase)  # again if the page never loaded; harmless
            try:  # the page's own errors usually explain a failure
                for entry in driver.get_log("browser"):
                    print(f"browser: {entry['message']}", file=sys.stderr)
            except WebDriverException:
                pass
    finally:
        if driver:
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)

    print(json.dumps(results[0] if len(results) == 1 else {"phases": results}), flush=True)
    if error:
        print(f"dashboard_browser: FAIL: {error}", file=sys.stderr)
        return 1
    return 0


def screenshot(driver, out, phase):
    try:
        driver.save_screenshot(os.path.join(out, phase + ".png"))
    except WebDriverException as e:
        print(f"screenshot {phase}.png failed: {e.msg}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
