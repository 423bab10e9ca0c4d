"""The comparison page reads the way people ask: a broker's versions in version order (older to newer) whatever
order a backfill measured them in, each change said from the older version to the newer, interactive charts by
version (and by run time where a version was measured over days), and at 1,400 px no sideways scrolling.

The history is built with the product's own writers (tests/support/aggregation.py): each run's worker files and
provenance, the aggregation job's code, run_meta.json and the history job's append. A backfill measured Apache
Kafka 4.1.1 first (three runs in an hour), then 3.9.1 (three runs, about 2.7 times the latency), then 4.1.1 once
more two days later; Apache Pulsar 4.0.7 beside it in every run."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.aggregation import append_to_history, measured_run  # noqa: E402
from support.report_page import first_screen, plotly_figures  # noqa: E402

from brokerbench.history import read_history  # noqa: E402
from brokerbench.report.compare import (  # noqa: E402
    build_comparison,
    track_charts,
    version_changes,
    version_changes_text,
    version_rows,
)
from brokerbench.trials import combine  # noqa: E402

#: (kafka version, latency scale, run time) in the order they were measured
BACKFILL = [("4.1.1", 1.0, "2026-11-01T10:00:00+00:00"), ("4.1.1", 1.0, "2026-11-01T10:20:00+00:00"),
            ("4.1.1", 1.0, "2026-11-01T10:40:00+00:00"), ("3.9.1", 2.7, "2026-11-01T11:00:00+00:00"),
            ("3.9.1", 2.7, "2026-11-01T11:20:00+00:00"), ("3.9.1", 2.7, "2026-11-01T11:40:00+00:00"),
            ("4.1.1", 1.05, "2026-11-03T10:00:00+00:00")]
WORKLOAD = "1-topic-16-partitions-1kb"
KAFKA = ("kafka", WORKLOAD, "fsync-off", "local")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("results")
    for i, (version, scale, ts) in enumerate(BACKFILL):
        run = measured_run(root / "runs" / "brokerbench_smoke" / f"manual__{ts[:16].replace(':', '_')}",
                           {("kafka", "fsync-off"): ("apache-kafka", version),
                            ("pulsar", "fsync-off"): ("apache-pulsar", "4.0.7")},
                           workload=WORKLOAD, latency_scale=scale, seed=i + 1)
        append_to_history(root, run, ts)
    return root


@pytest.fixture(scope="module")
def rows(results) -> list[dict]:
    return [r for r in combine(read_history(results / "history")) if r.get("status") == "ok"]


@pytest.fixture(scope="module")
def page(results) -> Path:
    return build_comparison(results / "history", results / "comparisons" / "x")


def test_versions_are_in_version_order_though_the_newer_was_measured_first(rows, page):
    kafka = version_rows(rows)[KAFKA]
    assert [(r["broker_version"], r["runs"]) for r in kafka] == [("3.9.1", 3), ("4.1.1", 4)]
    assert kafka[1]["latest_run"] == "2026-11-03 10:00" and kafka[1]["client"] == "kafka-python 3.0.12"
    track = page.read_text().split(f"<h3>kafka — {WORKLOAD} — fsync-off — local</h3>")[1].split("<h3>")[0]
    table = track.split('<table class="compare">')[1].split("</table>")[0]
    assert re.findall(r"<tr><td>([\d.]+)</td><td>apache-kafka</td><td>kafka-python 3.0.12</td>", table) == \
        ["3.9.1", "4.1.1"]


def test_each_change_is_said_from_the_older_version_to_the_newer(rows, page):
    (change,) = [c for c in version_changes(rows) if c["broker"] == "kafka"]
    assert (change["older"], change["newer"], change["step"]) == ("3.9.1", "4.1.1", "3.9.1 \u2192 4.1.1")
    # 4.1.1 is faster: from 3.9.1 to 4.1.1 the latency goes down, significantly
    e2e = next(m for m in change["metrics"] if m.startswith("e2e latency p99 "))
    older, newer, pct = re.match(r"e2e latency p99 ([\d.]+) \u2192 ([\d.]+) ms \(([-+][\d.]+) %\), "
                                 r"significantly better$", e2e).groups()
    assert float(older) > 2 * float(newer) and -70 < float(pct) < -50
    assert change["cls"] == "better"
    text = page.read_text()
    assert "<strong>3.9.1 \u2192 4.1.1</strong>: publish latency p99 " in text
    assert "4.1.1 \u2192 3.9.1" not in text and "4.1.1 -&gt; 3.9.1" not in text
    # the version differences' table (folded): the same direction, row by row
    diffs = text.split("<table class='versions'>")[1].split("</table>")[0]
    assert set(re.findall(r"<tr class='[^']*'><td>([^<]+)</td>", diffs)) == {"3.9.1 \u2192 4.1.1"}
    # and as text, for logs and terminals
    line = next(x for x in version_changes_text(rows).splitlines() if x.startswith("kafka"))
    assert line.startswith(f"kafka / {WORKLOAD} / fsync-off / local: 3.9.1 -> 4.1.1: publish latency p99 ")


def test_charts_are_interactive_by_version_and_by_run_time_where_a_version_ran_over_days(rows, page):
    text = page.read_text()
    head, body = text.split("</head>", 1)
    # plotly.js once, inline; no picture, nothing fetched from elsewhere
    assert head.count("<script") == 1 and "plotly.js v" in head and "<img " not in body
    assert not re.search(r'(src|href)="(https?:)?//', body)
    figures = plotly_figures(text)
    kafka = {fid: f for fid, f in figures.items() if fid.startswith("t0-")}
    assert sorted(kafka) == ["t0-by-version-e2e_latency_p99_ms", "t0-by-version-publish_latency_p99_ms",
                             "t0-over-time"]
    by_version = kafka["t0-by-version-e2e_latency_p99_ms"]
    assert by_version["layout"]["xaxis"]["ticktext"] == ["3.9.1", "4.1.1"]
    runs, medians = by_version["data"]
    assert runs["name"] == "kafka-python: runs" and len(runs["y"]) == 7 and "%{text}" in runs["hovertemplate"]
    assert medians["x"] == [0, 1] and medians["y"][0] > 2 * medians["y"][1]  # the older version at the left
    over_time = kafka["t0-over-time"]
    assert [t["name"] for t in over_time["data"] if t.get("showlegend") is not False] == ["3.9.1", "4.1.1"]
    # the backfill's first hour alone: runs of one hour are no question of time, only the charts by version
    hour = [r for r in rows if r["run_ts"] < "2026-11-02" and r["broker"] == "kafka"]
    assert [c["title"].rsplit(": ", 1)[1] for c in track_charts(hour, ["3.9.1", "4.1.1"], "kafka", "h")] == [
        "p99 publish latency (ms) by version", "p99 end-to-end latency (ms) by version"]


def test_at_1400_px_the_first_screen_answers_and_nothing_scrolls_sideways(page, tmp_path):
    shot = tmp_path / "comparison.png"
    seen = first_screen(page, shot, window=(1400, 900))
    print(f"screenshot: {shot}")
    assert seen["innerWidth"] == 1400 and seen["scrollWidth"] <= seen["clientWidth"], seen
    # the first track's changes and its version table on the first screen
    assert seen["firstChanges"]["bottom"] <= seen["firstTable"]["top"], seen
    assert seen["firstTable"]["bottom"] <= seen["innerHeight"] and seen["firstTable"]["right"] <= seen["clientWidth"]
    # no table needs sideways scrolling, the folded ones opened included
    assert seen["overflowing"] == [] and seen["pageScrollWidth"] <= seen["clientWidth"], seen
    assert seen["plotlyLoaded"] and seen["figures"] == seen["drawn"] == 6, seen
