"""brokerbench.report on small hand-made summary, timeseries and provenance files."""

from __future__ import annotations

import csv
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.report_page import plotly_figures  # noqa: E402

import brokerbench  # noqa: E402
from brokerbench.report.data import column_unit  # noqa: E402
from brokerbench.report.html import build_report, format_value, render_text_summary  # noqa: E402

NASTY = "<script>alert('x')</script> & \"quoted\""

SUMMARY_COLUMNS = [
    "workload", "broker", "driver", "variant", "broker_implementation", "broker_version",
    "durability_honoured", "durability_note", "durability_settings", "client_library", "client_library_version",
    "brokerbench_version", "client_hosts", "target_rate_msg_s", "publish_rate_msg_s", "consume_rate_msg_s",
    "measured_seconds", "workers", "messages_sent", "publish_latency_p50_ms", "publish_latency_p99_ms",
    "e2e_latency_avg_ms", "e2e_latency_p99_ms", "publish_delay_p99_us", "backlog_end_msgs", "status",
]


def _summary_row(broker, variant, honoured, note, p99, status="ok"):
    return {
        "workload": "1-topic-1-partition-1kb", "broker": broker, "driver": f"{broker}-latency", "variant": variant,
        "broker_implementation": "tansu" if broker == "kafka" else "pulsar-lite",
        "broker_version": "0.5.1" if broker == "kafka" else "0.2.0",
        "durability_honoured": honoured, "durability_note": note,
        "durability_settings": json.dumps({"flush.messages": 1}),
        "client_library": "kafka-python" if broker == "kafka" else "pulsar-client",
        "client_library_version": "3.0.12" if broker == "kafka" else "3.13.0",
        "brokerbench_version": "0.1.0", "client_hosts": "localhost",
        "target_rate_msg_s": 1000.0, "publish_rate_msg_s": 998.123456, "consume_rate_msg_s": 997.5,
        "measured_seconds": 30.004, "workers": 2, "messages_sent": 29950, "publish_latency_p50_ms": 0.815,
        "publish_latency_p99_ms": p99, "e2e_latency_avg_ms": 1.2345, "e2e_latency_p99_ms": 4.5,
        "publish_delay_p99_us": 181.0, "backlog_end_msgs": 3, "status": status,
    }


def _write_csv(path: Path, columns, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow(r)


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "runs" / "brokerbench_nightly" / "scheduled__2026-01-01"
    rows = [
        _summary_row("kafka", "default", True, "default settings", 3.25),
        _summary_row("kafka", "fsync", False, f"tansu stores messages in memory {NASTY}", 3.25),
        _summary_row("pulsar", "default", True, "journal sync on", 6.03,
                     status="partial: worker client2-0 has no end record"),
    ]
    _write_csv(run / "summary" / "summary.csv", SUMMARY_COLUMNS, rows)
    ts_cols = ["workload", "broker", "driver", "variant", "interval_index", "interval_start_s",
               "publish_rate_msg_s", "consume_rate_msg_s", "backlog_msgs", "publish_latency_p50_ms",
               "publish_latency_p99_ms", "publish_latency_avg_ms", "e2e_latency_p50_ms", "e2e_latency_p99_ms",
               "e2e_latency_avg_ms", "e2e_latency_max_ms", "publish_delay_p99_us"]
    ts = []
    for r in rows:
        for i in range(3):
            ts.append({"workload": r["workload"], "broker": r["broker"], "driver": r["driver"],
                       "variant": r["variant"], "interval_index": i, "interval_start_s": 10.0 * i,
                       "publish_rate_msg_s": 1000 - i, "consume_rate_msg_s": 999 - i, "backlog_msgs": i,
                       "publish_latency_p50_ms": 0.8, "publish_latency_p99_ms": 3.0 + i,
                       "publish_latency_avg_ms": 1.0, "e2e_latency_p50_ms": 1.1, "e2e_latency_p99_ms": 4.0,
                       "e2e_latency_avg_ms": 1.2 + 0.1 * i, "e2e_latency_max_ms": 9.0, "publish_delay_p99_us": 180})
    _write_csv(run / "summary" / "timeseries.csv", ts_cols, ts)
    prov = run / "provenance"
    prov.mkdir(parents=True)
    for broker, variant, honoured, note in (("kafka", "default", True, "default settings"),
                                            ("kafka", "fsync", False, f"tansu stores messages in memory {NASTY}"),
                                            ("pulsar", "default", True, "journal sync on")):
        (prov / f"{broker}__{variant}.json").write_text(json.dumps({
            "broker": broker, "implementation": "tansu" if broker == "kafka" else "pulsar-lite",
            "version": "0.5.1" if broker == "kafka" else "0.2.0", "nodes": 1,
            "durability": {"variant": variant, "honoured": honoured, "note": note,
                           "settings": {"flush.messages": 1}},
        }))
    (prov / "hosts.json").write_text(json.dumps({"hosts": [{
        "name": "bench-host-1",
        "tuned": {"profile": "latency-performance", "applied": False, "reason": "tuned-adm is not installed"},
        "time_sync": {"clock_offset_ms": 0.25, "note": "chrony tracking"},
        "description": {"cpus": 2, "kernel": "6.1.0-18-amd64", "disk": {"model": "nvme <fast>"}},
    }]}))
    (prov / "teardown.json").write_text(json.dumps({"removed": ["kafka", "pulsar"]}))
    (run / "plan.json").write_text(json.dumps({
        "format_version": 1, "suite": "nightly-latency", "description": "nightly run",
        "environment": "local", "interval_seconds": 10,
        "items": [{"workload": {"name": "1-topic-1-partition-1kb"}, "driver": {"name": "kafka-latency"},
                   "broker": "kafka", "variant": "fsync"}],
    }))
    return run


def test_report_has_title_table_and_units(run_dir):
    path = build_report(run_dir)
    assert path == run_dir / "report.html"
    text = path.read_text()
    assert text.startswith("<!DOCTYPE html>")
    title = re.search(r"<h1>(.*?)</h1>", text).group(1)
    assert "nightly-latency" in title and "brokerbench_nightly" in title and "scheduled__2026-01-01" in title
    assert '<table class="results">' in text
    # every numeric column shows its unit in the header
    for name, unit in (("publish_latency_p99_ms", "ms"), ("publish_delay_p99_us", "µs"),
                       ("publish_rate_msg_s", "msg/s"), ("backlog_end_msgs", "msgs"), ("measured_seconds", "s")):
        assert re.search(rf'<th title="{name}">[^<]*<br><span class="unit">\[{re.escape(unit)}\]</span></th>', text), name
    # numbers formatted sensibly
    assert ">998.1<" in text and ">29,950<" in text and ">0.815<" in text
    assert "partial: worker client2-0 has no end record" in text


def test_report_draws_five_interactive_time_series_charts(run_dir):
    text = build_report(run_dir).read_text()
    assert "<img " not in text  # no static images: every chart is a Plotly figure
    figures = plotly_figures(text)
    titles = [f["layout"]["title"]["text"] for f in figures.values()]
    assert titles == ["p99 publish latency over time", "p99 end-to-end latency over time",
                      "average end-to-end latency over time", "publish rate (acked) over time",
                      "consume rate over time"]
    for fig in figures.values():
        # one line per broker x variant, the drain interval left out, the partial one marked
        names = sorted(t["name"] for t in fig["data"])
        assert names == ["kafka/default", "kafka/fsync [durability NOT honoured]", "pulsar/default (partial)"]
        assert all(len(t["x"]) == 3 for t in fig["data"])
    # self-contained: plotly.js inline, nothing fetched from elsewhere
    assert "<script src" not in text and "<link" not in text
    assert not re.search(r'(src|href)="(https?:)?//', text.split("<body>")[1])


def test_durability_warning_and_marked_row(run_dir):
    text = build_report(run_dir).read_text()
    durability = text.split("<h2>Durability</h2>")[1].split("<h2>")[0]
    assert "kafka (tansu 0.5.1) cannot honour durability variant &#x27;fsync&#x27;" in durability
    assert "tansu stores messages in memory" in durability
    assert "pulsar" not in durability.split("honoured as specified")[0]  # only the failing combo is warned about
    rows = re.findall(r'<tr class="([^"]*)">(.*?)</tr>', text)
    marked = [body for cls, body in rows if "not-honoured" in cls]
    assert marked and all(">fsync" in body and "not honoured" in body for body in marked)
    assert not any(">default" in body for body in marked)
    partial = [body for cls, body in rows if "partial" in cls]
    assert partial and all(">pulsar<" in body for body in partial)


def test_text_is_escaped(run_dir):
    text = build_report(run_dir).read_text()
    assert "<script>alert" not in text and "alert('x')" not in text
    # the only scripts: plotly.js and one per figure
    assert text.count("<script") == 1 + len(plotly_figures(text))
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &quot;quoted&quot;" in text
    assert "nvme &lt;fast&gt;" in text


def test_provenance_section(run_dir):
    text = build_report(run_dir).read_text()
    # folded away: the first screen is the verdicts
    prov = text.split("<details class=\"section\"><summary>Provenance")[1].split("<summary>Plan</summary>")[0]
    for needle in ("tansu", "0.5.1", "pulsar-lite", "kafka-python", "3.0.12", "pulsar-client",
                   "latency-performance: not applied", "tuned-adm is not installed", "0.250 ms", "chrony tracking",
                   "6.1.0-18-amd64", "flush.messages", "teardown.json",
                   f"brokerbench {brokerbench.__version__}"):
        assert needle in prov, needle
    plan = text.split("<summary>Plan</summary>")[1]
    assert "nightly-latency" in plan and "local" in plan and "kafka-latency" in plan


def test_report_without_provenance_or_plan(run_dir):
    shutil.rmtree(run_dir / "provenance")
    (run_dir / "plan.json").unlink()
    # the summary still knows durability from the provenance the Spark job joined
    text = build_report(run_dir).read_text()
    assert '<table class="results">' in text
    assert len(plotly_figures(text)) == 5
    assert "No host record" in text and "No plan.json" in text
    assert "cannot honour durability variant &#x27;fsync&#x27;" in text


def test_report_without_durability_anywhere(tmp_path):
    run = tmp_path / "run1"
    row = _summary_row("rabbitmq", "default", None, None, 2.0)
    _write_csv(run / "summary" / "summary.csv", ["workload", "broker", "driver", "variant", "publish_latency_p99_ms",
                                                 "status"], [{k: row[k] for k in ("workload", "broker", "driver",
                                                              "variant", "publish_latency_p99_ms", "status")}])
    text = build_report(run).read_text()
    assert "whether the durability variant was honoured is not recorded" in text
    assert "No time series" in text


def test_report_without_summary(tmp_path):
    text = build_report(tmp_path).read_text()
    assert "No summary" in text
    assert "no summary" in render_text_summary(tmp_path)


def test_text_summary(run_dir):
    out = render_text_summary(run_dir)
    lines = out.splitlines()
    # what ran first (broker, implementation and version, client library and version), then the figures
    assert lines[1].split()[:5] == ["broker", "implementation", "client", "variant", "workload"]
    assert "publish_latency_p99_ms" in lines[1]
    assert [line.split()[:7] for line in lines[3:6]] == [
        ["kafka", "tansu", "0.5.1", "kafka-python", "3.0.12", "default", "1-topic-1-partition-1kb"],
        ["kafka", "tansu", "0.5.1", "kafka-python", "3.0.12", "fsync", "1-topic-1-partition-1kb"],
        ["pulsar", "pulsar-lite", "0.2.0", "pulsar-client", "3.13.0", "default", "1-topic-1-partition-1kb"]]
    assert any("WARNING durability" in line and "fsync" in line and "cannot honour" in line for line in lines)
    assert any(line.startswith("WARNING") and "partial" in line for line in lines)


def test_formatting_helpers():
    assert column_unit("publish_latency_p99_ms") == "ms"
    assert column_unit("publish_delay_p99_us") == "µs"
    assert column_unit("consume_rate_msg_s") == "msg/s"
    assert column_unit("messages_acked") == "msgs"
    assert column_unit("interval_start_s") == "s"
    assert column_unit("broker") is None
    assert format_value(None) == "–"
    assert format_value(12345) == "12,345"
    assert format_value(0.8151) == "0.815"
    assert format_value(1234.56) == "1,235"
    assert format_value(True) == "yes"


def test_time_series_leave_out_the_drain_interval():
    from brokerbench.report.charts import series_by_combo

    rows = [{"workload": "w", "broker": "kafka", "variant": "v", "interval_start_s": float(i),
             "publish_rate_msg_s": 1000.0, "drain_interval": False} for i in range(3)]
    # 0.2 s after the last send: 40 acks of in-flight messages would plot as 200 msg/s
    rows.append({"workload": "w", "broker": "kafka", "variant": "v", "interval_start_s": 3.0,
                 "publish_rate_msg_s": 200.0, "drain_interval": True})
    rows.append({"workload": "other", "broker": "kafka", "variant": "v", "interval_start_s": 0.0,
                 "publish_rate_msg_s": 5.0, "drain_interval": False})
    series = series_by_combo(rows, "w", "publish_rate_msg_s", lambda r: f"{r['broker']} {r['variant']}")
    assert series == [("kafka v", [0.0, 1.0, 2.0], [1000.0, 1000.0, 1000.0])]
