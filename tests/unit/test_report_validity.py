"""Invalid rows in the run report, the verdicts table and the comparison (brokerbench.report)."""

from __future__ import annotations

import csv
import re
import sys
from html import escape
from pathlib import Path

from brokerbench.history import read_history
from brokerbench.regression import Rule, verdicts_for_run
from brokerbench.report.compare import build_comparison
from brokerbench.report.html import build_report, render_text_summary
from brokerbench.report.verdict_table import write_verdicts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fixtures_results import history_row, write_history_rows  # noqa: E402
from support.report_page import plotly_figures  # noqa: E402

REASONS = ("client-bound: client process CPU 97 % (>= 85 %: about one core is the ceiling of one Python process); "
           "contended: another brokerbench run (/srv/bb/state/other) on localhost during the phase "
           "(its processes: mean 38.0 % CPU of all cores)")
COLUMNS = ["workload", "broker", "driver", "variant", "target_rate_msg_s", "publish_rate_msg_s",
           "publish_latency_p99_ms", "client_bound", "invalid_reasons", "status"]


def _write_summary(run: Path) -> None:
    rows = [
        {"workload": "w1", "broker": "kafka", "driver": "kafka-latency", "variant": "fsync-on",
         "target_rate_msg_s": 5000.0, "publish_rate_msg_s": 4849.0, "publish_latency_p99_ms": 1458.0,
         "client_bound": True, "invalid_reasons": REASONS, "status": f"invalid: {REASONS}"},
        {"workload": "w1", "broker": "pulsar", "driver": "pulsar-latency", "variant": "fsync-on",
         "target_rate_msg_s": 5000.0, "publish_rate_msg_s": 5000.0, "publish_latency_p99_ms": 3.9,
         "client_bound": False, "invalid_reasons": "", "status": "ok"},
    ]
    path = run / "summary" / "summary.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)


def test_report_shows_invalid_rows_with_badge_reasons_and_rule(tmp_path):
    run = tmp_path / "runs" / "brokerbench_nightly" / "scheduled__2026-11-20"
    _write_summary(run)
    # verdicts as the pipeline computes them: the invalid row is not judged
    history = [history_row(d, p99=3.9) for d in range(1, 8)]
    current = [history_row(20, p99=1458.0, status=f"invalid: {REASONS}", invalid_reasons=REASONS),
               history_row(20, "pulsar", p99=3.9)]
    verdicts = verdicts_for_run(current, history + current)
    write_verdicts(run, verdicts, Rule(), "k")
    html = build_report(run).read_text()
    # the first screen: a visible badge (its tooltip the row's status), the row marked, the rules once below
    key = html.split('<section id="key-figures">')[1].split("</section>")[0]
    assert f'<span class="badge invalid" title="invalid: {escape(REASONS)}">invalid</span><sup class="note">1</sup>' in key
    assert '<span class="badge ok">ok</span>' in key and '<tr class="invalid">' in key
    assert ("<li>invalid: client-bound (the load generator limited the result), another brokerbench run on a "
            "host. Never judged nor a regression baseline.</li>") in key
    # the full results table (folded) shows the reasons; the validity evidence (folded) names the rules
    assert '<tr class="invalid">' in html.split("<h2>Results</h2>")[1]
    assert "contended: another brokerbench run (/srv/bb/state/other)" in html
    evidence = html.split('<details id="validity">')[1].split("</details>")[0]
    assert ("<strong>invalid</strong> by client-bound (the load generator limited the result), another "
            "brokerbench run on a host") in evidence
    assert "never a regression baseline and never judged" in evidence
    # the verdicts: one 'not judged' row for kafka (the reason once, in its evidence), ordinary verdicts for pulsar
    not_judged = html.split("<h3>Not judged</h3>")[1].split("</table>")[0]
    rows = re.findall(r'<tr class="verdict notjudged">(.*?)</tr>', not_judged)
    assert len(rows) == 1 and "<strong>not judged: invalid</strong>" in rows[0]
    assert rows[0].count("client-bound: client process CPU 97 %") == 1
    assert "validity rule(s): client-bound (the load generator limited the result)" in rows[0]
    assert '<tr class="verdict notjudged">' not in html.split("<h3>Not judged</h3>")[0]
    assert "not judged: invalid: 1" in html  # the counts line groups them without their reasons
    # text summary for the task log
    text = render_text_summary(run)
    assert any(line.startswith("WARNING w1 kafka fsync-on: invalid: client-bound") for line in text.splitlines())


def test_trends_and_comparison_leave_invalid_rows_out(tmp_path):
    root = tmp_path / "history"
    rows = [history_row(d, p99=3.9 + 0.01 * d) for d in range(1, 6)]
    rows += [history_row(6, p99=1458.0, status=f"invalid: {REASONS}", invalid_reasons=REASONS)]
    write_history_rows(root, rows)
    assert {r["status"] for r in read_history(root)} == {"ok", f"invalid: {REASONS}"}  # kept in the history
    out = build_comparison(root, tmp_path / "cmp")
    html = out.read_text()
    assert "5 history rows of 5 runs" in html
    assert "Left out: 1 invalid row(s)" in html
    body = html.split("</head>", 1)[1]  # (plotly.js, in the head, has the digits 1458 somewhere)
    assert "1458" not in body and "1,458" not in body
    # the run report's trends draw ok rows only and say how many runs were left out
    run = tmp_path / "runs" / "brokerbench_nightly" / "scheduled__2026-11-06"
    _write_summary(run)
    html = build_report(run, root).read_text()
    assert "(5 runs, environment any)" in html
    assert "Rows whose status is invalid or partial are not drawn (1 run(s) with such rows)" in html


def test_trends_draw_each_client_library_as_a_line_of_its_own(tmp_path):
    """Runs of one track through two client libraries are never one series (as the verdicts' baselines)."""
    root = tmp_path / "history"
    rows = [history_row(d, p99=4.0, client_library="kafka-python") for d in range(1, 4)]
    rows += [history_row(d, p99=1.0, client_library="confluent-kafka") for d in range(4, 6)]
    write_history_rows(root, rows)
    figures = plotly_figures(build_comparison(root, tmp_path / "cmp").read_text())
    by_version = [f for fid, f in figures.items() if "-by-version-" in fid]
    assert len(by_version) == 2 and all({(t["name"], len(t["y"])) for t in f["data"]} == {
        ("confluent-kafka: runs", 2), ("confluent-kafka: median of runs", 1), ("kafka-python: runs", 3),
        ("kafka-python: median of runs", 1)} for f in by_version)
    over_time = [f for fid, f in figures.items() if fid.endswith("-over-time")]
    assert len(over_time) == 1 and {(t["name"], len(t["y"])) for t in over_time[0]["data"]} == {
        ("3.8.0 (confluent-kafka)", 2), ("3.8.0 (kafka-python)", 3)}
    run = tmp_path / "runs" / "brokerbench_nightly" / "scheduled__2026-11-06"
    _write_summary(run)
    html = build_report(run, root).read_text()
    assert '"name":"3.8.0 (kafka-python)"' in html and '"name":"3.8.0 (confluent-kafka)"' in html
