"""The run report's first screen (one compact table per workload under a one-line headline) and its
interactive charts (Plotly, plotly.js inline once), on a run as the aggregation and the verdict step leave it
(tests/fixtures_results.py: write_report_run); the layout as headless Chromium draws it at 1,400 px."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fixtures_results import FOREIGN_LOAD, PARTIAL, write_report_run  # noqa: E402
from support.report_page import first_screen, plotly_figures, png_size  # noqa: E402

from brokerbench.report.html import build_report  # noqa: E402


@pytest.fixture
def report(tmp_path) -> Path:
    run = write_report_run(tmp_path / "runs" / "brokerbench_nightly" / "scheduled__2026-11-20")
    return build_report(run)


def _key_table(page: str) -> str:
    return page.split('<section id="key-figures">')[1].split("</section>")[0]


def test_the_headline_comes_first_then_one_compact_table_per_workload(report):
    page = report.read_text()
    body = page.split("<body>")[1]
    # title, meta line, the headline (outcome first), then the key figures; nothing else in between
    assert re.match(r'\s*<h1>[^<]*</h1>\s*<p class="meta">[^\n]*</p>\s*<div class=\'headline bad\' id=\'outcome\'>'
                    r"<strong>REGRESSION</strong>: 1 metric\(s\) regressed in 1 of 6 track\(s\) \(3 judged\)\.</div>"
                    r"\s*<section id=\"key-figures\">", body), body[:1500]
    key = _key_table(page)
    assert key.count('<table class="key">') == 1 and '<h2 class="workload">1-topic-16-partitions-1kb</h2>' in key
    headers = re.findall(r"<th[^>]*>(.*?)</th>", key.split("</thead>")[0])
    assert [re.sub(r"<[^>]+>", " ", h).split() for h in headers] == [
        ["broker"], ["implementation,", "version"], ["client", "library"], ["variant"], ["publish", "p50", "[ms]"],
        ["publish", "p99", "[ms]"], ["end-to-end", "p99", "[ms]"], ["achieved", "rate", "[msg/s]"], ["status"],
        ["verdicts", "of", "this", "run"]]
    # each row says what ran: the broker's implementation and version, the client library
    rows = re.findall(r'<tr(?: class="(\w+)")?><td>(\w+)</td>\s*<td class="what">([^<]*)</td>'
                      r'<td class="what">([^<]*)</td>\s*<td>([\w-]+)', key)
    assert [(b, impl, client, v, cls) for cls, b, impl, client, v in rows] == [
        ("kafka", "apache-kafka 4.1.1", "kafka-python 3.0.12", "fsync-off", ""),
        ("kafka", "apache-kafka 4.1.1", "kafka-python 3.0.12", "fsync-on", "invalid"),
        ("pulsar", "apache-pulsar 4.0.7", "pulsar-client 3.13.0", "fsync-off", "partial"),
        ("pulsar", "apache-pulsar 4.0.7", "pulsar-client 3.13.0", "fsync-on", ""),
        ("rabbitmq", "rabbitmq 3.10.8", "pika 1.4.4", "fsync-off", ""),
        ("rabbitmq", "rabbitmq 3.10.8", "pika 1.4.4", "fsync-on", "")]
    # figures with their units' precision, the achieved rate of its target
    assert '<td class="num">3.60</td>' in key and '1,000 <span class="of">of 1,000</span>' in key


def test_a_reason_appears_once_and_the_verdicts_are_this_runs(report):
    key = _key_table(report.read_text())
    # the badge: its kind; its tooltip: the row's own status; one footnote per distinct reason
    assert f'<span class="badge invalid" title="invalid: {FOREIGN_LOAD}">invalid</span><sup class="note">1</sup>' in key
    assert f'<span class="badge partial" title="{PARTIAL}">partial</span><sup class="note">2</sup>' in key
    notes = re.findall(r"<li>(.*?)</li>", key.split('<ol class="notes">')[1].split("</ol>")[0])
    assert notes == ["invalid: foreign load on a host. Never judged nor a regression baseline.", PARTIAL]
    visible = re.sub(r'title="[^"]*"', "", key)  # what the screen shows, tooltips aside
    assert visible.count("foreign load") == 1 and visible.count("has no end record") == 1
    chips = {(b, v): re.findall(r'<span class="chip (\w+)">([^<]+)</span>', c)
             for b, v, c in re.findall(r"<tr[^>]*><td>(\w+)</td>.*?<td>(fsync-\w+).*?<td class=\"verdicts\">(.*?)</td>",
                                       key, re.S)}
    assert chips[("kafka", "fsync-off")] == [("bad", "regressed: publish p99 +32.0 %"), ("plain", "unchanged: 3 metrics")]
    assert chips[("kafka", "fsync-on")] == [("notjudged", "not judged: invalid")]
    assert chips[("pulsar", "fsync-off")] == [("notjudged", "not judged: partial")]
    assert chips[("pulsar", "fsync-on")] == [("meta", "insufficient history: 4 metrics")]
    # the long evidence is folded below: every key column, the validity evidence, the provenance
    page = report.read_text()
    assert re.search(r"<details><summary>Key results: \d+ columns per broker x variant</summary>", page)
    assert '<details id="validity"><summary>Validity evidence: 1 invalid, 1 partial</summary>' in page
    # the verdict table says "not judged: invalid" and gives the reason once, in the evidence
    not_judged = page.split("<h3>Not judged</h3>")[1].split("</table>")[0]
    row = re.search(r'<tr class="verdict notjudged">(.*?)</tr>', not_judged).group(1)
    assert "<strong>not judged: invalid</strong>" in row and row.count("foreign load: mean 43.6 %") == 1


def test_charts_are_plotly_with_the_library_inline_once_and_invalid_lines_marked(report):
    page = report.read_text()
    head, body = page.split("<body>", 1)
    # plotly.js once, inline, in the head; every figure a div of its own; nothing fetched from elsewhere
    assert head.count("<script") == 1 and "plotly.js v" in head
    assert "<script src" not in page and "<link" not in page and "<img " not in body
    assert not re.search(r'(src|href)="(https?:)?//', body)
    figures = plotly_figures(page)
    assert sorted(figures) == sorted([*(f"w0-{c}" for c in ("publish-p99", "e2e-p99", "e2e-avg", "publish-rate",
                                                             "consume-rate", "publish-quantiles", "e2e-quantiles")),
                                      "sweep-0"])
    for fid, fig in figures.items():
        legend = fig["layout"]["legend"]
        assert legend["orientation"] == "h" and legend["y"] < 0, fid  # below the plot area, not over it
        for trace in fig["data"]:
            assert "%{y" in trace["hovertemplate"], fid
    traces = {t["name"]: t for t in figures["w0-publish-p99"]["data"]}
    assert sorted(traces) == ["kafka/fsync-off", "kafka/fsync-on (invalid)", "pulsar/fsync-off (partial)",
                              "pulsar/fsync-on", "rabbitmq/fsync-off", "rabbitmq/fsync-on"]
    for name, trace in traces.items():
        marked = "(" in name
        assert (trace["line"]["dash"] == "dash") is marked and (trace["opacity"] < 1) is marked, name
    # one colour per broker x variant in every chart of the workload
    quantiles = {t["name"]: t["line"]["color"] for t in figures["w0-publish-quantiles"]["data"]}
    assert quantiles == {name: t["line"]["color"] for name, t in traces.items()}


def test_a_sweep_gets_a_latency_vs_throughput_chart(report):
    fig = plotly_figures(report.read_text())["sweep-0"]
    assert fig["layout"]["xaxis"]["title"]["text"] == "achieved publish rate (msg/s)"
    assert fig["layout"]["yaxis"]["title"]["text"] == "publish latency p99 (ms)"
    assert fig["layout"]["xaxis"]["type"] == "log" and fig["layout"]["yaxis"]["type"] == "log"
    lines = {t["name"]: t for t in fig["data"]}
    assert sorted(lines) == ["kafka/fsync-off", "rabbitmq/fsync-off"]
    kafka = lines["kafka/fsync-off"]
    assert kafka["x"] == [990.0, 4950.0, 19800.0, 30000.0] and kafka["y"] == [3.0, 9.0, 27.0, 81.0]
    assert kafka["marker"]["symbol"] == ["circle", "circle", "circle", "x"]  # the unstable step
    assert kafka["text"][3] == "step 3, target 50,000 msg/s: unstable (backlog grew)"


def test_at_1400_px_the_key_table_is_on_the_first_screen_without_sideways_scrolling(report, tmp_path):
    shot = tmp_path / "first-screen.png"
    seen = first_screen(report, shot, window=(1400, 900))
    print(f"screenshot: {shot}")
    # the window's viewport: 1,400 px wide (its height is the window's less Chromium's own bars)
    assert seen["innerWidth"] == 1400 and seen["innerHeight"] > 700, seen
    assert seen["scrollWidth"] <= seen["clientWidth"], seen  # nothing sticks out sideways
    assert len(seen["keyTables"]) == 1
    table = seen["keyTables"][0]
    assert table["bottom"] <= seen["innerHeight"] and table["right"] <= seen["clientWidth"], seen
    assert seen["headline"]["bottom"] <= table["top"]  # the headline above the table
    assert seen["headline"]["bottom"] - seen["headline"]["top"] < 50  # one line
    assert seen["tallestRow"] < 40, seen  # compact rows (one line each)
    # plotly.js ran from the page itself (no network here): every figure drawn
    assert seen["plotlyLoaded"] and seen["figures"] == 8 and seen["drawn"] == 8, seen
    assert png_size(shot) == (1400, 900)
