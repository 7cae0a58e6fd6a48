#!/usr/bin/env python3
"""Open the demo report in a real headless browser (Debian's chromium) and
check that every chart rendered (issue 23).

1. The page itself is self-contained: no <script>, no http(s) or
   protocol-relative reference, every chart an inline <svg>.
2. A copy of the page gets a probe script at the end of its body; chromium
   --dump-dom runs it after layout: for every svg.chart it reports each
   <g data-series> with its rendered bounding box (getBBox: the browser laid
   it out) and the number of drawn shapes, and any error the page raised.
   Checked: each expected chart is there, each expected series of it has a
   non-empty box and at least one drawn shape, no errors, and the browser's
   log (--enable-logging=stderr) shows no console error.
3. A screenshot of the real page (--screenshot) is written next to it: a PNG
   of the requested size, and large enough to hold pictures, not a blank.

Usage: check_report.py PAGE --expect CHART=SERIES,SERIES ... [--screenshot PNG]
Exit 0 pass, 1 fail, 77 when chromium is missing or cannot start here (the
ctest registers 77 as SKIP, so it shows as skipped, not passed)."""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

SKIP = 77
PROBE = r"""
<script>
(function () {
  var out = {charts: [], errors: window.__probeErrors || []};
  var svgs = document.querySelectorAll('svg.chart');
  for (var i = 0; i < svgs.length; i++) {
    var s = svgs[i], c = {name: s.getAttribute('data-chart'), series: []};
    var r = s.getBoundingClientRect();
    c.width = r.width; c.height = r.height;
    var gs = s.querySelectorAll('g[data-series]');
    for (var j = 0; j < gs.length; j++) {
      var b = gs[j].getBBox();
      var shapes = gs[j].querySelectorAll('path,rect,line,polyline,circle').length;
      c.series.push({label: gs[j].getAttribute('data-series'), w: b.width, h: b.height, shapes: shapes});
    }
    out.charts.push(c);
  }
  var pre = document.createElement('pre');
  pre.id = 'render-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""
ERR_HOOK = "<script>window.__probeErrors=[];window.addEventListener('error',function(e){window.__probeErrors.push(String(e.message));});</script>"


def find_chromium():
    for n in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(n)
        if p:
            return p
    return None


def browser(chromium, args, timeout=90):
    base = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--hide-scrollbars", "--enable-logging=stderr", "--v=0"]
    with tempfile.TemporaryDirectory() as prof:
        return subprocess.run(base + [f"--user-data-dir={prof}"] + args, capture_output=True, text=True,
                              timeout=timeout)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", head[16:24])


def console_errors(log):
    return [l for l in log.splitlines() if "CONSOLE" in l and ("ERROR" in l or "Uncaught" in l)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("page")
    ap.add_argument("--expect", action="append", default=[], help="CHART=SERIES,SERIES")
    ap.add_argument("--screenshot", default=None)
    a = ap.parse_args()
    fails = []
    with open(a.page) as f:
        page = f.read()
    if re.search(r"<script", page, re.I):
        fails.append("the report contains a <script> (it must need none)")
    if re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page, re.I) or "@import" in page:
        fails.append("the report references the network")
    chromium = find_chromium()
    if not chromium:
        print("check_report: SKIP: no chromium on PATH (tools/install-deps.sh installs Debian's chromium)")
        return SKIP

    probe_dir = tempfile.mkdtemp(prefix="report-probe-")
    probe = os.path.join(probe_dir, "probe.html")
    with open(probe, "w") as f:
        f.write(page.replace("<head>", "<head>" + ERR_HOOK, 1).replace("</body>", PROBE + "</body>", 1))
    try:
        r = browser(chromium, ["--dump-dom", "file://" + probe])
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"check_report: SKIP: chromium could not run here: {e}")
        return SKIP
    m = re.search(r'<pre id="render-check">(.*?)</pre>', r.stdout, re.S)
    if not m:
        if r.returncode != 0 and not r.stdout.strip():
            print(f"check_report: SKIP: chromium exited {r.returncode} without a page:\n{r.stderr[-2000:]}")
            return SKIP
        fails.append(f"the probe did not run (chromium exit {r.returncode}): {r.stderr[-1500:]}")
        res = {"charts": [], "errors": []}
    else:
        import html as _h
        res = json.loads(_h.unescape(m.group(1)))
    for e in res.get("errors", []):
        fails.append(f"page error: {e}")
    for l in console_errors(r.stderr):
        fails.append(f"console: {l}")
    charts = {c["name"]: c for c in res["charts"]}
    for c in res["charts"]:
        if c["width"] <= 0 or c["height"] <= 0:
            fails.append(f"chart {c['name']}: laid out with no size")
    for ex in a.expect:
        name, _, series = ex.partition("=")
        c = charts.get(name)
        if not c:
            fails.append(f"chart {name}: missing (have {sorted(charts)})")
            continue
        got = {s["label"]: s for s in c["series"]}
        for lab in filter(None, series.split(",")):
            s = got.get(lab)
            if not s:
                fails.append(f"chart {name}: no series '{lab}' (have {sorted(got)})")
            elif s["w"] <= 0 or s["h"] <= 0 or s["shapes"] == 0:
                fails.append(f"chart {name}: series '{lab}' drew nothing (bbox {s['w']}x{s['h']}, {s['shapes']} shapes)")
        if not c["series"]:
            fails.append(f"chart {name}: empty")
    print(f"check_report: {len(charts)} charts rendered: " +
          ", ".join(f"{n} ({len(c['series'])} series)" for n, c in charts.items()))

    if a.screenshot:
        try:
            r = browser(chromium, ["--window-size=1300,2400", f"--screenshot={os.path.abspath(a.screenshot)}",
                                   "file://" + os.path.abspath(a.page)])
        except (OSError, subprocess.TimeoutExpired) as e:
            fails.append(f"screenshot: {e}")
        else:
            size = png_size(a.screenshot) if os.path.exists(a.screenshot) else None
            if size != (1300, 2400):
                fails.append(f"screenshot: not a 1300x2400 PNG ({size}; chromium: {r.stderr[-800:]})")
            elif os.path.getsize(a.screenshot) < 50000:
                fails.append(f"screenshot: {os.path.getsize(a.screenshot)} bytes, too small to hold the charts")
            else:
                print(f"check_report: screenshot {a.screenshot} ({os.path.getsize(a.screenshot)} bytes)")
            for l in console_errors(r.stderr):
                fails.append(f"console (screenshot): {l}")
    shutil.rmtree(probe_dir, ignore_errors=True)
    for f in fails:
        print("FAIL:", f)
    print("check_report:", "PASS" if not fails else f"{len(fails)} FAILURES")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
