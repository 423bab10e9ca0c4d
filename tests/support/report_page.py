"""Reading a run report (report.html) the way a test needs it: its Plotly figures and its layout in Chromium."""

from __future__ import annotations

import html
import json
import re
import struct
from pathlib import Path
from typing import Any

from .chromium import chromium

#: measures the first screen once the page has loaded and writes the numbers into the page as JSON
#: (<pre id="layout-check">), which --dump-dom then carries out
LAYOUT_PROBE = """<script>
window.addEventListener("load", function () {
  var doc = document.documentElement;
  var box = function (el) { var r = el.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, right: r.right}; };
  var tables = Array.from(document.querySelectorAll("table.key"));
  var rows = Array.from(document.querySelectorAll("table.key tbody tr"));
  var headline = document.querySelector(".headline");
  var first = function (selector) { var el = document.querySelector(selector); return el ? box(el) : null; };
  var firstScreen = {firstTable: first("table"), firstChanges: first("ul.changes")};
  // then every folded part opened: no table of the page may need sideways scrolling either
  var folded = Array.from(document.querySelectorAll("details")).filter(function (d) { return !d.open; });
  folded.forEach(function (d) { d.open = true; });
  var overflowing = Array.from(document.querySelectorAll("div.scroll"))
    .filter(function (d) { return d.scrollWidth > d.clientWidth + 1; })
    .map(function (d) { return {scrollWidth: d.scrollWidth, clientWidth: d.clientWidth,
                                 head: (d.querySelector("thead") || d).textContent.slice(0, 120)}; });
  var pageScrollWidth = doc.scrollWidth;
  folded.forEach(function (d) { d.open = false; });  // the screenshot shows the first screen as it opens
  var out = document.createElement("pre");
  out.id = "layout-check";
  out.textContent = JSON.stringify({
    scrollWidth: doc.scrollWidth, clientWidth: doc.clientWidth, innerWidth: window.innerWidth,
    innerHeight: window.innerHeight, keyTables: tables.map(box),
    tallestRow: Math.max.apply(null, rows.map(function (r) { return r.getBoundingClientRect().height; })),
    headline: headline ? box(headline) : null, firstTable: firstScreen.firstTable,
    firstChanges: firstScreen.firstChanges, overflowing: overflowing,
    pageScrollWidth: pageScrollWidth,
    plotlyLoaded: typeof window.Plotly === "object",
    figures: document.querySelectorAll("div.plotly-graph-div").length,
    drawn: Array.from(document.querySelectorAll("div.plotly-graph-div"))
      .filter(function (d) { return d.querySelector("svg.main-svg"); }).length
  });
  document.body.appendChild(out);
});
</script>"""


def plotly_figures(page: str) -> dict[str, dict[str, Any]]:
    """div id -> {"data": [traces], "layout": {...}} of every ``Plotly.newPlot`` call in the page's body."""
    body = page.split("<body>", 1)[1]
    decoder = json.JSONDecoder()
    out = {}
    for m in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*', body):
        data, end = decoder.raw_decode(body, m.end())
        layout, _ = decoder.raw_decode(body, end + re.match(r"\s*,\s*", body[end:]).end())
        out[m.group(1)] = {"data": data, "layout": layout}
    return out


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) of a PNG file, from its header."""
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


def first_screen(report: Path, screenshot: Path, window: tuple[int, int] = (1400, 900)) -> dict[str, Any]:
    """Open a copy of the page (a run report or a comparison) with :data:`LAYOUT_PROBE` in headless Chromium at
    ``window`` and return what the probe measured: the first screen as drawn (scrollWidth, clientWidth,
    keyTables, firstTable, firstChanges, headline, tallestRow, figures drawn), then, with every ``<details>``
    opened, the ``div.scroll`` boxes whose table needs sideways scrolling (overflowing) and the page's width
    (pageScrollWidth); ``screenshot``: the window as Chromium drew it (the details folded again)."""
    probed = report.with_name(report.stem + ".probed.html")
    probed.write_text(report.read_text().replace("</body>", LAYOUT_PROBE + "\n</body>"))
    dom = chromium(probed.as_uri(), screenshot, budget_ms=5000, window=window)
    found = re.search(r'<pre id="layout-check">(.*?)</pre>', dom, re.S)
    if not found:
        raise AssertionError(f"the probe wrote nothing: {dom[-2000:]}")
    return json.loads(html.unescape(found.group(1)))
