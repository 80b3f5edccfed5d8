#!/usr/bin/env python3
"""Opens an `attnlab report` page in headless Chromium and checks what a reader would see:
every plot the page lists is in the rendered DOM as an <svg> with a drawn data mark for each of its series, the
page is not an error page, and a screenshot renders to a non-empty PNG (DIR/report.png).

  python3 tests/report_browser_test.py DIR      exit 0 pass, 1 fail, 77 skip (no Chromium here)

Chromium comes from the Debian package `chromium` (scripts/setup.sh installs it when ATTNLAB_WITH_BROWSER=1).
"""
import os
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser

SKIP = 77


class Dom(HTMLParser):
    """Collects the plot list, the <svg> plots and the data marks inside each."""

    def __init__(self):
        super().__init__()
        self.listed = []      # data-plot of the page's plot list
        self.svgs = {}        # id -> declared series count
        self.marks = {}       # id -> set of series names with a drawn mark
        self.errors = []      # elements marked as errors
        self.current = None   # id of the <svg> being parsed

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "li" and "plot-link" in classes:
            self.listed.append(a.get("data-plot"))
        if "error" in classes:
            self.errors.append(tag)
        if tag == "svg" and (a.get("id") or "").startswith("plot-"):
            self.current = a["id"][len("plot-"):]
            self.svgs[self.current] = int(a.get("data-series-count", "0"))
            self.marks[self.current] = set()
        elif self.current and tag in ("path", "polyline", "rect", "circle") and "mark" in classes:
            self.marks[self.current].add(a.get("data-series"))

    def handle_endtag(self, tag):
        if tag == "svg":
            self.current = None


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium(browser, profile, *args):
    cmd = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = os.path.abspath(sys.argv[1])
    page = os.path.join(out, "report.html")
    browser = find_chromium()
    if not browser:
        print("SKIP: no Chromium found (install it with ATTNLAB_WITH_BROWSER=1 scripts/setup.sh)")
        return SKIP
    if not os.path.isfile(page):
        print(f"FAIL: {page} is missing (the report CLI test writes it)")
        return 1
    url = "file://" + page
    failures = []
    with tempfile.TemporaryDirectory() as profile:
        dump = chromium(browser, profile, "--dump-dom", url)
        if dump.returncode != 0 or "<html" not in dump.stdout:
            print(f"FAIL: chromium --dump-dom exited {dump.returncode}\n{dump.stderr[-2000:]}")
            return 1
        dom = Dom()
        dom.feed(dump.stdout)
        if "chrome-error://" in dump.stdout or "ERR_" in dump.stdout[:2000]:
            failures.append("the browser shows an error page")
        if dom.errors:
            failures.append(f"the page shows {len(dom.errors)} error element(s)")
        if not dom.listed:
            failures.append("the page lists no plots")
        for plot in dom.listed:
            if plot not in dom.svgs:
                failures.append(f"plot {plot}: listed but no <svg id=plot-{plot}> in the page")
                continue
            drawn = {s for s in dom.marks[plot] if s}
            if dom.svgs[plot] < 1 or len(drawn) < dom.svgs[plot]:
                failures.append(f"plot {plot}: {len(drawn)} of {dom.svgs[plot]} series drawn")
            if not os.path.isfile(os.path.join(out, "plots", plot + ".svg")):
                failures.append(f"plot {plot}: plots/{plot}.svg missing")

        png = os.path.join(out, "report.png")
        if os.path.exists(png):
            os.remove(png)
        shot = chromium(browser, profile, "--window-size=1200,4000", "--hide-scrollbars", f"--screenshot={png}", url)
        if shot.returncode != 0 or not os.path.isfile(png):
            failures.append(f"screenshot failed (exit {shot.returncode}): {shot.stderr[-500:]}")
        else:
            with open(png, "rb") as f:
                data = f.read()
            if not data.startswith(b"\x89PNG\r\n\x1a\n") or len(data) < 10000:
                failures.append(f"screenshot {png} is not a rendered PNG ({len(data)} bytes)")

    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print(f"ok: {len(dom.listed)} plots rendered with every series drawn; screenshot {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
