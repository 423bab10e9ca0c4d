"""Verdict step, regression gate, report sections and the comparison report, on synthetic histories."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fixtures_results import history_row, write_history_rows  # noqa: E402
from support.report_page import plotly_figures  # noqa: E402

from brokerbench.history import read_history  # noqa: E402
from brokerbench.pipeline import analysis, setup  # noqa: E402
from brokerbench.pipeline.context import RunContext
from brokerbench.report.compare import build_comparison, side_by_side, version_rows  # noqa: E402
from brokerbench.report.html import build_report, render_text_summary  # noqa: E402


def ctx_for(results: Path, day: int, **params) -> RunContext:
    return RunContext(dag_id="brokerbench_nightly", run_id=f"scheduled__2026-11-{day:02d}",
                               suite="nightly-latency", params={"results_root": str(results), **params})


@pytest.fixture
def results(tmp_path):
    history = tmp_path / "history"
    rows = [history_row(d, p99=5.0 + 0.1 * (d % 3)) for d in range(1, 8)]
    rows.append(history_row(8, p99=12.0))  # today's run: a clear p99 regression
    rows += [history_row(d, broker="rabbitmq", version="4.1.2", p99=9.0) for d in (7, 8)]
    rows += [history_row(d, version="3.9.0", p99=4.0) for d in (9, 10)]  # a newer version, later
    write_history_rows(history, rows)
    return tmp_path


def test_verdicts_step_writes_json_csv_and_gate_fails_scheduled_runs(results):
    ctx = ctx_for(results, 8)
    counts = analysis.verdicts(ctx)
    doc = json.loads((ctx.run_dir / "summary" / "regression.json").read_text())
    by = {(v["broker"], v["metric"]): v for v in doc["verdicts"]}
    assert by[("kafka", "publish_latency_p99_ms")]["verdict"] == "regressed"
    assert by[("kafka", "publish_latency_p99_ms")]["baseline_n"] == 7
    assert by[("kafka", "publish_rate_msg_s")]["verdict"] == "unchanged"
    # rabbitmq has one earlier run: too little history
    assert by[("rabbitmq", "publish_latency_p99_ms")]["verdict"] == "insufficient history"
    assert counts["regressed"] >= 1
    assert (ctx.run_dir / "summary" / "regression.csv").read_text().startswith("workload,broker,variant")
    with pytest.raises(analysis.RegressionFound, match="publish_latency_p99_ms"):
        analysis.regression_gate(ctx, "scheduled")
    # manual and backfill runs are reported, not gated, unless asked to
    assert analysis.regression_gate(ctx, "manual")["gated"] is False
    assert analysis.regression_gate(ctx, "backfill")["regressed"] >= 1
    with pytest.raises(analysis.RegressionFound):
        analysis.regression_gate(ctx_for(results, 8, regression_gate="always"), "manual")
    assert analysis.regression_gate(ctx_for(results, 8, regression_gate="never"), "scheduled")["gated"] is False


def test_a_run_where_nothing_was_judged_does_not_read_no_regression(tmp_path, caplog):
    import logging

    ctx = RunContext(dag_id="brokerbench_smoke", run_id="manual__n", suite="smoke",
                              params={"results_root": str(tmp_path)})
    (ctx.run_dir / "summary").mkdir(parents=True)
    verdicts = [{"workload": "w", "broker": b, "variant": "fsync-off", "metric": "(all metrics)",
                 "verdict": "not judged: invalid (foreign load: mean 43.6 % CPU)", "evidence": ""}
                for b in ("kafka", "pulsar")]
    (ctx.run_dir / "summary" / "regression.json").write_text(json.dumps({"verdicts": verdicts}))
    with caplog.at_level(logging.INFO, logger="brokerbench"):
        out = analysis.regression_gate(ctx, "manual")
    assert (out["regressed"], out["judged"]) == (0, 0)
    said = [r.getMessage() for r in caplog.records if r.name == "brokerbench"]
    assert "not judged: no valid measurement (2 of 2 track(s) invalid, partial or without data); this run says " \
           "nothing about regressions" in said
    assert not any("no regression" in m for m in said)


def test_min_runs_param_and_missing_run(results):
    analysis.verdicts(ctx_for(results, 8, regression_min_runs=1))
    doc = json.loads((ctx_for(results, 8).run_dir / "summary" / "regression.json").read_text())
    rabbit = [v for v in doc["verdicts"] if v["broker"] == "rabbitmq"]
    assert doc["rule"]["min_runs"] == 1
    assert {v["verdict"] for v in rabbit} <= {"unchanged", "improved", "regressed"}
    with pytest.raises(RuntimeError, match="did not append"):
        analysis.verdicts(ctx_for(results, 20))


def test_validate_accepts_analysis_params(tmp_path):
    # the plan's params model forbids unknown keys: the analysis params must not reach it
    ctx = RunContext(dag_id="brokerbench_smoke", run_id="manual__x", suite="smoke",
                              params={"results_root": str(tmp_path), "regression_min_runs": 2,
                                      "regression_gate": "never",
                                      # validate resolves Apache versions; a unit test stays off the network
                                      "broker_implementations": {"kafka": "tansu", "pulsar": "pulsar-lite"}})
    assert setup.validate(ctx)["items"] >= 1
    assert "regression_gate" not in json.loads(ctx.plan_path.read_text())["params"]


def run_with_verdicts(results):
    """The 8th run of the history with its verdicts and its summary.csv (its history rows), as the report
    step finds them."""
    ctx = ctx_for(results, 8)
    analysis.verdicts(ctx)
    summary = ctx.run_dir / "summary"
    rows = [r for r in read_history(results / "history") if r["run_key"].endswith("2026-11-08")]
    cols = list(rows[0])
    (summary / "summary.csv").write_text(",".join(cols) + "\n" + "\n".join(
        ",".join("" if r[c] is None else str(r[c]) for c in cols) for r in rows) + "\n")
    return ctx, summary


def test_report_shows_regression_table_quantile_curves_and_trends(results):
    ctx, summary = run_with_verdicts(results)
    (summary / "omb").mkdir()
    quantiles = {"50.0": 1.5, "90.0": 3.0, "99.0": 5.0, "99.9": 7.5, "99.99": 9.0, "100.0": 15.0}
    (summary / "omb" / "w1__kafka-latency__fsync-on.json").write_text(json.dumps({
        "workload": "w1", "driver": "kafka-latency", "broker": "kafka", "variant": "fsync-on",
        "aggregatedPublishLatencyQuantiles": quantiles, "aggregatedEndToEndLatencyQuantiles": quantiles}))
    text = build_report(ctx.run_dir, history_root=results / "history").read_text()
    assert "<h2>Regression verdicts</h2>" in text and '<table class="regression">' in text
    assert re.search(r'<tr class="verdict bad">.*?publish_latency_p99_ms.*?<strong>regressed</strong>', text)
    assert "insufficient history" in text
    figures = plotly_figures(text)
    quantiles = figures["w0-publish-quantiles"]
    assert quantiles["layout"]["title"]["text"] == "publish latency by percentile"
    assert quantiles["layout"]["xaxis"]["ticktext"] == ["0", "50", "90", "99", "99.9", "99.99"]
    assert [t["y"] for t in quantiles["data"]] == [[1.5, 3.0, 5.0, 7.5, 9.0]]  # the maximum has no place
    assert "end-to-end latency by percentile" in text
    assert "w1: trend kafka/fsync-on: publish_latency_p99_ms, e2e_latency_p99_ms" in text
    assert "w1: trend rabbitmq/fsync-on" in text
    trend = figures["trend-kafka-fsync-on-w1"]
    assert sorted({t["name"] for t in trend["data"]}) == ["3.8.0", "3.9.0"]  # one line per broker version
    assert trend["layout"]["yaxis"]["type"] == "log" and trend["layout"]["yaxis4"].get("type") != "log"
    assert "<img " not in text
    log = render_text_summary(ctx.run_dir)
    assert "Regression verdicts" in log and "REGRESSION w1 kafka fsync-on publish_latency_p99_ms" in log
    # the task log: regressions first, insufficient history as one line
    table = log.split("regressed and improved first:")[1]
    assert table.index("regressed") < table.index("unchanged")
    assert "insufficient history: 11 verdict(s) of 1 track(s)" in log
    assert log.count("insufficient history") == 1


def test_report_first_screen_regressions_first_insufficient_one_line_provenance_folded(results):
    ctx = ctx_for(results, 8)
    analysis.verdicts(ctx)
    rows = [r for r in read_history(results / "history") if r["run_key"].endswith("2026-11-08")]
    cols = list(rows[0])
    (ctx.run_dir / "summary" / "summary.csv").write_text(",".join(cols) + "\n" + "\n".join(
        ",".join("" if r[c] is None else str(r[c]) for c in cols) for r in rows) + "\n")
    (ctx.run_dir / "provenance").mkdir()
    (ctx.run_dir / "provenance" / "hosts.json").write_text(json.dumps({"hosts": [{"name": "h", "description": "x" * 5000}]}))
    text = build_report(ctx.run_dir, history_root=results / "history").read_text()
    # the outcome first, right under the title, then the key figures of each workload
    body = text.split("<body>")[1]
    assert re.match(r"\s*<h1>[^<]*</h1>\s*<p class=\"meta\">[^\n]*</p>\s*<div class='headline bad' id='outcome'>"
                    r"<strong>REGRESSION</strong>: \d+ metric\(s\) regressed in 1 of 2 track\(s\)", body)
    key = text.split('<section id="key-figures">')[1].split("</section>")[0]
    assert '<span class="chip bad">regressed: publish p99 +' in key
    # then what changed: the regression with its evidence
    first = text.split('<h2 id="what-changed">What changed</h2>')[1].split('<h2 id="charts">')[0]
    findings = first.split("<h3>Regressions</h3>")[1]
    assert "kafka / fsync-on / w1 (3.8.0)</th>" in findings and "<td>publish_latency_p99_ms</td>" in findings
    assert "threshold in this run" in findings and "vs median" in findings and "<summary>evidence<" in findings
    # insufficient history (the rabbitmq track, 1 earlier run): one line, not a table
    assert "Insufficient history: 11 verdict(s) of 1 track(s) without enough earlier ok runs" in first
    assert "rabbitmq / fsync-on / w1 (4.1.2): 1 earlier ok run(s)" in first
    assert 'class="verdict meta"' not in first and "<strong>insufficient history</strong>" not in first
    # the trend of the changed track is near the top, the other one below
    assert "w1: trend kafka/fsync-on" in first and "w1: trend rabbitmq" not in first
    # the full verdict table folds insufficient history away; provenance and plan are folded
    verdicts = text.split("<h2>Regression verdicts</h2>")[1].split("<h2>Trends")[0]
    assert re.search(r"<details><summary>11 verdict\(s\) <strong>insufficient history</strong>", verdicts)
    assert verdicts.index("<strong>regressed</strong>") < verdicts.index("<strong>unchanged</strong>")
    assert '<details class="section"><summary>Provenance' in text and "x" * 5000 in text.split(
        '<details class="section"><summary>Provenance')[1]


def test_trend_time_axis_spans_the_runs_and_marks_change_points():
    import datetime as dt

    from brokerbench.report.figures import Panel, track_figure
    from brokerbench.report.trends import _changes_for

    one = track_figure("t", [Panel("p99", [("3.8.0", ["2026-11-08T00:00:00+00:00"], [5.0])])])
    lo, hi = one.layout.xaxis.range
    assert (lo, hi) == (dt.datetime(2026, 11, 7, 12), dt.datetime(2026, 11, 8, 12))  # a day, not four years
    rows = [history_row(d, p99=5.0 * (1 + 0.01 * (d % 3)) * (1.5 if d > 14 else 1.0)) for d in range(1, 21)]
    changes = _changes_for(rows, "publish_latency_p99_ms")
    assert changes == [("2026-11-15T00:00:00+00:00", "+50 %")]
    fig = track_figure("t", [Panel("p99", [("3.8.0", [r["run_ts"] for r in rows],
                                                [r["publish_latency_p99_ms"] for r in rows])], changes, True)])
    assert fig.layout.yaxis.type == "log"
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    assert [(s.x0, s.line.dash) for s in lines] == [(dt.datetime(2026, 11, 15), "dash")]
    assert [a.text for a in fig.layout.annotations] == ["+50 %"]


def test_comparison_versions_and_brokers_side_by_side(results):
    rows = [r for r in read_history(results / "history") if r["status"] == "ok"]
    versions = version_rows(rows)
    kafka = versions[("kafka", "w1", "fsync-on", "local")]
    assert [(r["broker_version"], r["runs"]) for r in kafka] == [("3.8.0", 8), ("3.9.0", 2)]
    assert kafka[0]["publish_latency_p99_ms"] == 12.0  # the latest 3.8.0 run, exact
    sbs = side_by_side(rows)[("w1", "fsync-on", "local")]
    assert [(r["broker"], r["broker_version"]) for r in sbs] == [("kafka", "3.9.0"), ("rabbitmq", "4.1.2")]
    path = build_comparison(results / "history", results / "comparisons" / "x")
    text = path.read_text()
    for stat in ("avg", "p50", "p75", "p95", "p99", "p999", "p9999", "max"):
        assert f'title="publish_latency_{stat}_ms"' in text and f'title="e2e_latency_{stat}_ms"' in text
    assert "Versions of one broker" in text and "Brokers side by side" in text
    # interactive charts per broker track: p99 publish and e2e by version, and by run time (runs over days)
    assert "<img " not in text
    assert sorted(plotly_figures(text)) == [f"t{i}-{c}" for i in (0, 1) for c in (
        "by-version-e2e_latency_p99_ms", "by-version-publish_latency_p99_ms", "over-time")]


def test_comparison_labels_version_differences_significant_or_not(tmp_path):
    # a backfill over four kafka versions, 4 runs each: 3.7.2 = 3.8.0; 3.9.0 is 30 % slower; 4.0.0 = 3.9.0
    levels = {"3.7.2": 5.0, "3.8.0": 5.0, "3.9.0": 6.5, "4.0.0": 6.5}
    rows, day = [], 1
    for version, p99 in levels.items():
        for i in range(4):
            rows.append(history_row(day, version=version, p99=p99 * (1 + 0.01 * ((day * 7) % 5 - 2))))
            day += 1
    write_history_rows(tmp_path / "history", rows)
    text = build_comparison(tmp_path / "history", tmp_path / "out").read_text()
    table = text.split("<table class='versions'>")[1].split("</table>")[0]
    lines = re.findall(r"<tr class='([^']*)'><td>([^<]+)</td><td>publish_latency_p99_ms</td>.*?<strong>([^<]+)</strong>",
                       table)
    assert sorted((v, label) for _, v, label in lines) == [
        ("3.7.2 \u2192 3.8.0", "not significant"), ("3.8.0 \u2192 3.9.0", "significantly worse"),
        ("3.9.0 \u2192 4.0.0", "not significant")]
    assert "Version differences: " in text


def test_comparison_marks_durability_not_honoured(tmp_path):
    write_history_rows(tmp_path / "history", [history_row(1), history_row(1, broker="rabbitmq", version="4.1.2",
                                                                          durability_honoured=False)])
    text = build_comparison(tmp_path / "history", tmp_path / "out").read_text()
    assert "did not honour variant" in text and "durability not honoured" in text


def test_the_reports_headline_says_nothing_was_judged_when_no_verdict_compared_anything(results):
    ctx, summary = run_with_verdicts(results)
    doc = json.loads((summary / "regression.json").read_text())
    for v in doc["verdicts"]:  # as on a busy host: every row invalid, so no figure was compared
        v["verdict"] = "not judged: invalid (foreign load: mean 43.6 % CPU)"
    (summary / "regression.json").write_text(json.dumps(doc))
    text = build_report(ctx.run_dir, history_root=results / "history").read_text()
    assert re.search(r"<div class='headline unjudged' id='outcome'><strong>NOT JUDGED</strong>: no valid "
                     r"measurement \(\d+ of \d+ track\(s\) invalid, partial or without data\)", text)
    assert "NO REGRESSION" not in text and "No regression" not in text
