"""The run report: one self-contained HTML file (interactive Plotly charts, plotly.js inline once).

Inputs (all under the run directory, every one optional):
``summary/summary.csv``, ``summary/timeseries.csv``, ``provenance/*.json``,
``plan.json``. The page is the Jinja2 template ``templates/report.html.j2``
(autoescape: every piece of text from those files is escaped); this module
gathers what each section shows.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import brokerbench
from brokerbench.changepoint import side_text
from brokerbench.metrics import JUDGED, METRICS, Judgement
from brokerbench.outcome import Outcome, RunOutcome, outcome_of
from brokerbench.regression import split_status, validity_rules, verdict_category
from brokerbench.report import verdict_table
from brokerbench.trials import spread_columns, trials_of
from brokerbench.util import text_table, write_atomic

from .ab import VERDICT_CSS, ab_section
from .broker_panels import broker_panels_section
from .charts import series_by_combo
from .data import (
    RunData,
    client_text,
    column_label,
    column_unit,
    implementation_text,
    load_run,
    run_environment,
    summary_order,
)
from .figures import (
    Line,
    colour_map,
    figure_html,
    latency_vs_throughput_figure,
    line_figure,
    plotly_js,
    quantile_figure,
)
from .templating import format_value, render
from .trends import track_trends, trends_section

__all__ = ["build_report", "format_value", "render_html", "render_text_summary"]

#: the compact results table (full table below it has every column)
KEY_COLUMNS = [
    "broker", "broker_implementation", "broker_version", "client_library", "client_library_version", "variant",
    "workload", "target_rate_msg_s",
    "publish_rate_msg_s", "consume_rate_msg_s", "publish_error_rate_msg_s",
    "publish_latency_p50_ms", "publish_latency_p99_ms", "publish_latency_p999_ms", "publish_latency_max_ms",
    "e2e_latency_avg_ms", "e2e_latency_p50_ms", "e2e_latency_p99_ms", "e2e_latency_max_ms",
    "publish_delay_p99_us", "backlog_end_msgs", "status",
]

#: the headline's colour per outcome (report.css)
OUTCOME_CSS = {Outcome.NO_REGRESSION: "good", Outcome.REGRESSION: "bad", Outcome.FAILED: "bad",
               Outcome.NOT_JUDGED: "unjudged"}

#: the terminal summary's columns (render_text_summary): what ran first - broker, "implementation" (its
#: implementation and version, e.g. "apache-kafka 4.1.1") and "client" (the client library and its version) -
#: then summary.csv's columns of that name
TEXT_COLUMNS = [
    "broker", "implementation", "client", "variant", "workload", "target_rate_msg_s", "publish_rate_msg_s",
    "consume_rate_msg_s", "publish_latency_p50_ms", "publish_latency_p99_ms", "e2e_latency_avg_ms",
    "e2e_latency_p99_ms", "publish_delay_p99_us", "status",
]
#: the terminal summary's columns that are not summary.csv's own: each from the row
TEXT_DERIVED: dict[str, Callable[[Mapping[str, Any]], Any]] = {"implementation": implementation_text,
                                                                "client": client_text}


def _combo_label(data: RunData, row: dict[str, Any], with_driver: bool) -> str:
    label = f"{row.get('broker')}/{row.get('variant')}"
    if with_driver:
        label += f" ({row.get('driver')})"
    if data.durability(str(row.get("broker")), str(row.get("variant"))).get("honoured") is False:
        label += " [durability NOT honoured]"
    return label


def _not_honoured(data: RunData, row: Mapping[str, Any]) -> bool:
    return data.durability(str(row.get("broker")), str(row.get("variant")), row).get("honoured") is False


def _is_partial(row: Mapping[str, Any]) -> bool:
    """Any status but ok (partial or invalid): the row is marked and never a baseline."""
    status = row.get("status")
    return status is not None and status != "" and status != "ok"


def status_kind(row: Mapping[str, Any]) -> str:
    """"ok", "invalid", "partial" (also when invalid as well) or "" (no status)."""
    status = str(row.get("status") or "")
    if not status:
        return ""
    return split_status(status)[0]


def results_table(data: RunData, columns: Sequence[str], rows_in: Sequence[Mapping[str, Any]] | None = None
                  ) -> dict[str, Any]:
    """The results table's columns and rows (the template marks rows and formats cells). ``rows_in``: the
    rows shown (default: the summary's). A combined row (brokerbench.trials) carries ``trials``: its text
    ("median of N trials") and per judged metric the trials' min..max."""
    columns = [c for c in columns if not data.summary_columns or c in data.summary_columns]
    rows = []
    for row in (data.summary if rows_in is None else rows_in):
        classes = []
        not_honoured = _not_honoured(data, row)
        if not_honoured:
            classes.append("not-honoured")
        if _is_partial(row):
            classes.append("invalid" if status_kind(row) == "invalid" else "partial")
        rows.append({"classes": " ".join(classes), "not_honoured": not_honoured,
                     "status": str(row.get("status") or ""), "cells": {c: row.get(c) for c in columns},
                     "trials": trials_text(row), "spread": _spreads(row, columns)})
    return {"columns": columns, "rows": rows}


def trials_text(row: Mapping[str, Any]) -> str:
    """"median of N trials" (with how many were valid when not all) for a combined row, "" otherwise."""
    n = row.get("trials")
    if not n:
        return ""
    valid = row.get("trials_valid")
    text = f"median of {n} trials"
    if valid != n:
        text += f" ({valid} valid)" if valid else " (none valid: median of all, not judged)"
    return text


def _spreads(row: Mapping[str, Any], columns: Sequence[str]) -> dict[str, str]:
    """column -> "min..max" of the trials, for the judged metrics of a combined row."""
    if not row.get("trials"):
        return {}
    out = {}
    for m in METRICS:
        lo, hi = spread_columns(m.column)
        if m.column in columns and row.get(lo) is not None:
            out[m.column] = f"{format_value(row.get(lo))}..{format_value(row.get(hi))}"
    return out


#: the first screen's table of each workload: (summary column, header without the unit)
KEY_FIGURES = [("publish_latency_p50_ms", "publish p50"), ("publish_latency_p99_ms", "publish p99"),
               ("e2e_latency_p99_ms", "end-to-end p99"), ("publish_rate_msg_s", "achieved rate")]
#: the order of verdict categories in a row's verdicts; metrics are named only for regressed and improved
VERDICT_ORDER: list[str] = [Judgement.REGRESSED, Judgement.IMPROVED, Judgement.UNCHANGED, Judgement.INSUFFICIENT,
                 Judgement.NO_DATA]


def key_figures_section(data: RunData) -> list[dict[str, Any]]:
    """The first screen: per workload, one compact row per broker x variant (trials combined) saying what ran
    (the broker's implementation and version, the client library and its version) with its headline figures,
    a status badge and this run's verdicts; rows in summary order (broker, implementation, version in version
    order, variant: two versions of a broker adjacent, the older first). A reason for a status that is not ok
    is a footnote of the table, once per distinct reason (each badge's tooltip has its row's own status
    text)."""
    with_driver = _with_driver(data)
    verdicts = _verdicts(data)
    out = []
    for workload in sorted({str(r.get("workload")) for r in data.combined}):
        notes: list[str] = []
        rows = []
        for row in sorted((r for r in data.combined if str(r.get("workload")) == workload), key=summary_order):
            kind = status_kind(row)
            note = 0
            if kind not in ("ok", ""):
                text = _status_note(row)
                if text not in notes:
                    notes.append(text)
                note = notes.index(text) + 1
            d = data.durability(str(row.get("broker")), str(row.get("variant")), row)
            rows.append({
                "broker": str(row.get("broker")) + (f" ({row.get('driver')})" if with_driver else ""),
                "implementation": implementation_text({"broker_implementation": d.get("implementation"),
                                                       "broker_version": d.get("version")}),
                "client": client_text(row), "variant": row.get("variant"), "not_honoured": d.get("honoured") is False,
                "honoured_note": d.get("note") or "", "trials": trials_text(row),
                "cells": [row.get(c) for c, _ in KEY_FIGURES], "target": row.get("target_rate_msg_s"),
                "kind": kind or "unknown", "status": str(row.get("status") or ""), "note": note,
                "classes": kind if kind in ("invalid", "partial") else "",
                "verdicts": row_verdicts([v for v in verdicts if (str(v.get("workload")), str(v.get("broker")),
                                                                  str(v.get("variant"))) ==
                                          (workload, str(row.get("broker")), str(row.get("variant")))],
                                         data.regression is not None)})
        out.append({"workload": workload, "rows": rows, "notes": notes,
                    "columns": [{"name": c, "label": label, "unit": column_unit(c)} for c, label in KEY_FIGURES]})
    return out


def _status_note(row: Mapping[str, Any]) -> str:
    """The footnote of a status that is not ok: for an invalid row the validity rules it broke (rows broken
    by the same rules share the note; their own figures are in the badge's tooltip and the validity
    evidence), otherwise the status itself."""
    kind, rest = split_status(row.get("status"))
    if kind == "invalid":
        rules = validity_rules(row.get("invalid_reasons") or rest)
        if rules:
            return f"invalid: {', '.join(rules)}. Never judged nor a regression baseline."
    return str(row.get("status"))


def row_verdicts(verdicts: Sequence[Mapping[str, Any]], judged: bool) -> list[dict[str, str]]:
    """One row's verdicts as short items ({"text", "cls"}): each regressed or improved metric with its
    change, then how many metrics got each other verdict; "not judged" without its reasons (they are the
    status badge's). ``judged``: whether the run has verdicts at all (if not, the headline says so: no item)."""
    if not judged:
        return []
    if not verdicts:
        return [{"text": "no verdicts", "cls": "meta"}]
    items = []
    counts: dict[str, int] = {}
    for v in verdicts:
        category = verdict_category(v.get("verdict"))
        if category in (Judgement.REGRESSED, Judgement.IMPROVED):
            metric = column_label(str(v.get("metric"))).replace("latency ", "")
            items.append({"text": f"{category}: {metric} {_change_text(dict(v))}", "cls": VERDICT_CSS[category]})
        else:
            counts[category] = counts.get(category, 0) + 1
    for category in sorted(counts, key=lambda c: (VERDICT_ORDER.index(c) if c in VERDICT_ORDER else 9, c)):
        n = counts[category]
        if category.startswith(Judgement.NOT_JUDGED):
            items.append({"text": category, "cls": "notjudged"})
        else:
            items.append({"text": f"{category}: {n} metric{'s' if n != 1 else ''}",
                          "cls": VERDICT_CSS.get(category, "") or "plain"})
    return items


def trials_section(data: RunData) -> list[dict[str, Any]]:
    """Per combined row with trials: its label and a results table of its trials (each with its own figures)."""
    out = []
    for row in data.combined:
        trials = trials_of(row, data.summary)
        if trials:
            out.append({"label": f"{row.get('workload')} / {row.get('broker')} / {row.get('variant')}",
                        "text": trials_text(row), "statuses": row.get("trial_statuses"),
                        "table": results_table(data, KEY_COLUMNS, trials)})
    return out


def _status_of(data: RunData) -> Callable[[Mapping[str, Any]], str]:
    """The status kind ("ok", "invalid", "partial" or "") of the measurement a time-series, sweep or OMB row
    belongs to (its combined summary row: same workload, broker, variant and driver)."""
    kinds: dict[tuple[str, ...], str] = {}
    for row in data.combined:
        key = (str(row.get("workload")), str(row.get("broker")), str(row.get("variant")))
        kinds[key + (str(row.get("driver")),)] = status_kind(row)
        if kinds.get(key) not in ("invalid", "partial"):  # any driver not valid marks the combination
            kinds[key] = status_kind(row)

    def status_of(row: Mapping[str, Any]) -> str:
        key = (str(row.get("workload")), str(row.get("broker")), str(row.get("variant")))
        return kinds.get(key + (str(row.get("driver")),), kinds.get(key, ""))
    return status_of


def _with_driver(data: RunData) -> bool:
    """Whether some broker x variant ran with more than one driver (then labels name the driver)."""
    drivers: dict[tuple[str, str], set] = {}
    for r in [*data.timeseries, *data.summary, *data.sweep]:
        drivers.setdefault((str(r.get("broker")), str(r.get("variant"))), set()).add(r.get("driver"))
    return any(len(d) > 1 for d in drivers.values())


def _workload_colours(data: RunData, workload: str, label: Callable[[dict[str, Any]], str]) -> dict[str, str]:
    """A colour per line label of one workload, the same in each of its charts (time series, quantiles,
    sweep)."""
    return colour_map([label(r) for r in [*data.timeseries, *data.omb, *data.summary, *data.sweep]
                       if str(r.get("workload")) == workload])


#: the time-series charts of a workload: (chart id, title, y axis title, timeseries.csv column)
TIME_CHARTS = [
    ("publish-p99", "p99 publish latency over time", "publish latency p99 (ms)", "publish_latency_p99_ms"),
    ("e2e-p99", "p99 end-to-end latency over time", "end-to-end latency p99 (ms)", "e2e_latency_p99_ms"),
    ("e2e-avg", "average end-to-end latency over time", "end-to-end latency avg (ms)", "e2e_latency_avg_ms"),
    ("publish-rate", "publish rate (acked) over time", "publish rate (msg/s)", "publish_rate_msg_s"),
    ("consume-rate", "consume rate over time", "consume rate (msg/s)", "consume_rate_msg_s"),
]
QUANTILE_CHARTS = [("publish-quantiles", "aggregatedPublishLatencyQuantiles", "publish latency by percentile"),
                   ("e2e-quantiles", "aggregatedEndToEndLatencyQuantiles", "end-to-end latency by percentile")]


def charts_section(data: RunData) -> list[dict[str, Any]] | None:
    """Per workload, its interactive charts ({"workload", "charts": [{"title", "html"}]}): the time series of
    every broker x variant, then the quantile curves from the OMB documents; None without either."""
    if not data.timeseries and not data.omb:
        return None
    workloads = sorted({str(r.get("workload")) for r in data.timeseries} | {str(d.get("workload")) for d in data.omb})
    with_driver = _with_driver(data)
    status_of = _status_of(data)

    def label(row: dict[str, Any]) -> str:
        return _combo_label(data, row, with_driver)

    statuses = {label(r): status_of(r) for r in [*data.timeseries, *data.omb]}
    out = []
    for w_index, workload in enumerate(workloads):
        colours = _workload_colours(data, workload, label)
        charts = []
        if any(r.get("workload") == workload for r in data.timeseries):
            for chart_id, title, y_title, column in TIME_CHARTS:
                lines = [Line(name, xs, ys, statuses.get(name, ""))
                         for name, xs, ys in series_by_combo(data.timeseries, workload, column, label)]
                fig = line_figure(title, "time since start of measured phase (s)", y_title, lines, colours)
                charts.append({"title": title, "html": figure_html(fig, f"w{w_index}-{chart_id}")})
        for chart_id, key, title in QUANTILE_CHARTS:
            curves = quantile_curves(data, workload, key, with_driver)
            if curves:
                lines = [Line(name, list(points), list(points.values()), statuses.get(name, ""))
                         for name, points in curves]
                fig = quantile_figure(title, "latency (ms)", lines, colours)
                charts.append({"title": title, "html": figure_html(fig, f"w{w_index}-{chart_id}")})
        out.append({"workload": workload, "charts": charts})
    return out


def quantile_curves(data: RunData, workload: str, key: str, with_driver: bool) -> list[tuple[str, dict[float, float]]]:
    """(label, {percentile: value}) per OMB document of the workload (merged-histogram quantiles)."""
    out = []
    for doc in data.omb:
        if doc.get("workload") != workload or not isinstance(doc.get(key), dict):
            continue
        points = {}
        for p, v in doc[key].items():
            try:
                points[float(p)] = float(v)
            except (TypeError, ValueError):
                continue
        if points:
            # driverId: the driver's name (documents before it: driver; now OMB's series label)
            row = {"broker": doc.get("broker"), "variant": doc.get("variant"),
                   "driver": doc.get("driverId", doc.get("driver"))}
            out.append((_combo_label(data, row, with_driver), points))
    return sorted(out, key=lambda c: c[0])


def _verdicts(data: RunData) -> list[dict[str, Any]]:
    return list((data.regression or {}).get("verdicts") or [])


def _track_label(v: dict[str, Any]) -> str:
    return f"{v.get('broker')} / {v.get('variant')} / {v.get('workload')} ({v.get('broker_version')})"


def _change_text(v: dict[str, Any]) -> str:
    pct = v.get("change_percent")
    return "–" if not isinstance(pct, (int, float)) else f"{pct:+.1f} %"


VERDICT_COLUMNS = ["workload", "broker", "variant", "broker_version", "metric", "verdict", "rule", "value",
                   "baseline_median", "baseline_spread", "change_percent", "threshold", "p_value", "baseline_n",
                   "evidence"]


def verdict_rows(verdicts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Verdicts with the class of their table row. The verdict cell shows the verdict without its reasons
    ("not judged: invalid"): the reasons are in the evidence, once."""
    return [{"cls": VERDICT_CSS.get(verdict_category(v.get("verdict")), ""), "row": v,
             "verdict": verdict_category(v.get("verdict"))} for v in verdicts]


def _is_not_judged(v: Mapping[str, Any]) -> bool:
    return str(v.get("verdict")).startswith(Judgement.NOT_JUDGED)


#: the columns of verdicts that judged nothing (no value, baseline or threshold to show)
NOT_JUDGED_COLUMNS = ["workload", "broker", "variant", "broker_version", "metric", "verdict", "evidence"]


def regression_section(data: RunData) -> dict[str, Any] | None:
    """Every verdict: regressed and improved first, then the rest; rows not judged (their status is not ok) in
    a narrower table of their own, whose evidence states the reason once; insufficient history folded."""
    if data.regression is None:
        return None
    rule = data.regression.get("rule") or {}
    det = rule.get("detector") or {}
    verdicts = _verdicts(data)
    counts: dict[str, int] = {}
    for v in verdicts:
        k = verdict_category(v.get("verdict"))
        counts[k] = counts.get(k, 0) + 1
    order: dict[str, int] = {Judgement.REGRESSED: 0, Judgement.IMPROVED: 1, Judgement.UNCHANGED: 2, Judgement.NO_DATA: 3}
    shown = sorted((v for v in verdicts if verdict_category(v.get("verdict")) != Judgement.INSUFFICIENT
                    and not _is_not_judged(v)), key=lambda v: order.get(verdict_category(v.get("verdict")), 4))
    insufficient = [v for v in verdicts if verdict_category(v.get("verdict")) == Judgement.INSUFFICIENT]
    return {"alpha": det.get("alpha"), "recent": det.get("recent"), "baseline_runs": rule.get("baseline_runs"),
            "k": rule.get("k"), "min_runs": rule.get("min_runs"),
            "counts": ", ".join(f"{k}: {n}" for k, n in sorted(counts.items())),
            "shown": verdict_rows(shown), "insufficient": verdict_rows(insufficient),
            "not_judged": verdict_rows([v for v in verdicts if _is_not_judged(v)]),
            "insufficient_line": _insufficient_line(insufficient) if insufficient else ""}


def _insufficient_line(insufficient: Sequence[dict[str, Any]]) -> str:
    tracks: dict[str, int] = {}
    for v in insufficient:
        tracks[_track_label(v)] = max(tracks.get(_track_label(v), 0), int(v.get("baseline_n") or 0))
    need = ""
    shown = "; ".join(f"{t}: {n} earlier ok run(s)" for t, n in sorted(tracks.items())[:6])
    more = f"; and {len(tracks) - 6} more track(s)" if len(tracks) > 6 else ""
    return f"{len(tracks)} track(s) without enough earlier ok runs{need}: {shown}{more}"


def _sides(v: dict[str, Any]) -> str:
    cp = v.get("change_point") or {}
    if not cp:
        return ""
    return (f"change point at run {str(cp.get('run_ts'))[:16]}; before: {side_text(cp['before_runs'])}; "
            f"after: {side_text(cp['after_runs'])}")


def findings_groups(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Regressed or improved verdicts grouped by track: the runs on each side of a change point once per
    track and change, then one line per metric (change, baseline -> this run, rule, p) with its evidence
    folded."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for v in rows:
        groups.setdefault((_track_label(v), _sides(v)), []).append(v)
    out = []
    for (track, sides), vs in groups.items():
        findings = []
        for v in vs:
            cp = v.get("change_point") or {}
            when = f" since {str(cp.get('run_ts'))[:16]}" if cp.get("run_ts") else " in this run"
            p = v.get("p_value")
            rule = (v.get("rule") or "") + when + (f", p = {p:.2g}" if isinstance(p, (int, float)) else "")
            findings.append({"cls": "bad" if v.get("verdict") == Judgement.REGRESSED else "good", "metric": v.get("metric"),
                             "change": _change_text(v), "baseline": v.get("baseline_median"),
                             "value": v.get("value"), "rule": rule, "evidence": v.get("evidence"),
                             "suspects": (v.get("suspects") or {}).get("sentence")})
        out.append({"track": track, "sides": sides, "findings": findings})
    return out


def run_outcome(data: RunData, failed_tasks: Sequence[str] = ()) -> RunOutcome:
    """The run's outcome as far as the report knows it (the run_outcome task writes the final one)."""
    return outcome_of(None if data.regression is None else _verdicts(data), failed_tasks,
                      has_measurements=bool(data.summary))


def what_matters_section(data: RunData, failed_tasks: Sequence[str] = ()) -> dict[str, Any]:
    """The first screen: the outcome in one line, regressions and improvements with their evidence, one line
    for the rest."""
    outcome = run_outcome(data, failed_tasks)
    if data.regression is None:
        return {"outcome": outcome, "headline": None}
    verdicts = _verdicts(data)
    regressed = [v for v in verdicts if v.get("verdict") == Judgement.REGRESSED]
    improved = [v for v in verdicts if v.get("verdict") == Judgement.IMPROVED]
    classes: dict[str, int] = {}
    for v in verdicts:
        classes[verdict_category(v.get("verdict"))] = classes.get(verdict_category(v.get("verdict")), 0) + 1
    rest = ", ".join(f"{n} {k}" for k, n in sorted(classes.items()) if k not in (Judgement.REGRESSED, Judgement.IMPROVED))
    insufficient = [v for v in verdicts if v.get("verdict") == Judgement.INSUFFICIENT]
    judged = [v for v in verdicts if v.get("verdict") in JUDGED]
    return {"outcome": outcome,
            "headline": {"regressed": len(regressed), "tracks": len({_track_label(v) for v in regressed}),
                         "improved": len(improved), "judged": len(judged), "rest": rest},
            "sentences": verdict_table.suspect_sentences(regressed + improved),
            "findings": [(title, findings_groups(rows)) for title, rows
                         in (("Regressions", regressed), ("Improvements", improved)) if rows],
            "insufficient_n": len(insufficient),
            "insufficient": _insufficient_line(insufficient) if insufficient else ""}


SWEEP_COLUMNS = ["workload", "broker", "client_library", "variant", "step", "target_rate_msg_s", "publish_rate_msg_s",
                 "consume_rate_msg_s", "publish_latency_p50_ms", "publish_latency_p99_ms", "e2e_latency_p99_ms",
                 "publish_delay_p99_us", "stable", "publish_p99_bound_ms", "reasons"]


def sweep_section(data: RunData) -> dict[str, Any] | None:
    """The sweep's steps as a table, and per workload a latency-vs-throughput chart: each step's p99 publish
    latency at its achieved publish rate, one line per broker x variant (unstable steps drawn as crosses)."""
    if not data.sweep:
        return None
    with_driver = _with_driver(data)
    status_of = _status_of(data)
    charts = []
    for w_index, workload in enumerate(sorted({str(r.get("workload")) for r in data.sweep})):
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in data.sweep:
            if str(r.get("workload")) == workload and is_number(r.get("publish_rate_msg_s")) \
                    and is_number(r.get("publish_latency_p99_ms")):
                groups.setdefault(_combo_label(data, r, with_driver), []).append(r)
        lines = []
        for name, steps in sorted(groups.items()):
            steps.sort(key=lambda r: float(r["publish_rate_msg_s"]))
            lines.append(Line(name, [float(r["publish_rate_msg_s"]) for r in steps],
                              [float(r["publish_latency_p99_ms"]) for r in steps], status_of(steps[0]),
                              hover=[_step_text(r) for r in steps],
                              symbols=["circle" if r.get("stable") is not False else "x" for r in steps]))
        if lines:
            bound = _bound_text([r for r in data.sweep if str(r.get("workload")) == workload])
            fig = latency_vs_throughput_figure(f"{workload}: publish latency p99 vs achieved rate{bound}", lines,
                                               _workload_colours(data, workload,
                                                                 lambda r: _combo_label(data, r, with_driver)))
            charts.append({"title": f"{workload}: latency vs throughput",
                           "html": figure_html(fig, f"sweep-{w_index}")})
    return {"columns": [c for c in SWEEP_COLUMNS if c in data.sweep[0]], "rows": data.sweep, "charts": charts}


def _bound_text(steps: Sequence[Mapping[str, Any]]) -> str:
    """The publish p99 bound the steps were judged by, as the sweep's chart and terminal lines state it ("" when
    their workers' files predate it)."""
    bounds = sorted({float(r["publish_p99_bound_ms"]) for r in steps if is_number(r.get("publish_p99_bound_ms"))})
    return f" (a stable step: publish p99 at most {' / '.join(f'{b:g}' for b in bounds)} ms)" if bounds else ""


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _step_text(row: Mapping[str, Any]) -> str:
    """Hover text of one sweep step: its number and target, and whether it was stable (and why not)."""
    text = f"step {row.get('step')}, target {format_value(row.get('target_rate_msg_s'))} msg/s"
    if row.get("stable") is False:
        text += ": unstable" + (f" ({row['reasons']})" if row.get("reasons") else "")
    elif row.get("stable") is True:
        text += ": stable"
    return text


def _combos(data: RunData) -> list[tuple[str, str, dict[str, Any] | None]]:
    """(broker, variant, a summary row or None) for every combination the run knows of."""
    seen: dict[tuple[str, str], dict[str, Any] | None] = {}
    for row in data.summary:
        seen.setdefault((str(row.get("broker")), str(row.get("variant"))), row)
    for key in data.broker_provenance:
        seen.setdefault(key, None)
    return [(b, v, r) for (b, v), r in sorted(seen.items())]


def durability_warnings(data: RunData) -> list[str]:
    """Plain-text warnings, one per broker x variant whose durability is not honoured or unknown."""
    out = []
    for broker, variant, row in _combos(data):
        d = data.durability(broker, variant, row)
        impl = " ".join(str(x) for x in (d.get("implementation"), d.get("version")) if x)
        impl = f" ({impl})" if impl else ""
        if d["honoured"] is False:
            out.append(
                f"{broker}{impl} cannot honour durability variant '{variant}': "
                f"{(d.get('note') or 'no reason recorded').rstrip('.')}. Its results under '{variant}' do not measure "
                f"that durability level; they may equal another variant's numbers."
            )
        elif d["honoured"] is None:
            out.append(f"{broker} / '{variant}': whether the durability variant was honoured is not recorded.")
    return out


def durability_section(data: RunData) -> dict[str, list[str]]:
    honoured = []
    for broker, variant, row in _combos(data):
        d = data.durability(broker, variant, row)
        if d["honoured"] is True:
            honoured.append(f"{broker} / {variant}" + (f": {d['note']}" if d.get("note") else ""))
    return {"warnings": durability_warnings(data), "honoured": honoured}


CLIENT_COLUMNS = ["workload", "broker", "variant", "client_library", "client_library_version", "client_hosts",
                  "workers", "brokerbench_version"]


def provenance_section(data: RunData) -> dict[str, Any]:
    brokers = []
    for broker, variant, row in _combos(data):
        d = data.durability(broker, variant, row)
        prov = data.broker_provenance.get((broker, variant), {})
        brokers.append({"broker": broker, "variant": variant, "implementation": d.get("implementation") or "–",
                        "version": d.get("version") or "–", "nodes": prov.get("nodes", "–"),
                        "honoured": {True: "yes", False: "NO", None: "unknown"}[d["honoured"]],
                        "note": d.get("note") or "", "settings": d.get("settings"),
                        "description": prov.get("variant_description", "")})
    hosts = (data.hosts or {}).get("hosts") if isinstance(data.hosts, dict) else None
    host_rows = []
    if isinstance(hosts, list):
        for h in hosts:
            if not isinstance(h, dict):
                host_rows.append({"raw": h})
                continue
            tuned: dict[str, Any] = h["tuned"] if isinstance(h.get("tuned"), dict) else {}
            sync: dict[str, Any] = h["time_sync"] if isinstance(h.get("time_sync"), dict) else {}
            offset = sync.get("clock_offset_ms")
            host_rows.append({
                "name": h.get("name", "–"), "profile": tuned.get("profile", "–"),
                "applied": as_text_bool(tuned.get("applied")), "reason": tuned.get("reason"),
                "offset": "–" if offset is None else f"{format_value(offset)} ms", "sync_note": sync.get("note"),
                "description": h.get("description"),
                "extra": {k: v for k, v in h.items() if k not in ("name", "tuned", "time_sync", "description")},
            })
    return {"brokers": brokers, "clients": data.summary, "hosts": host_rows, "hosts_record": data.hosts,
            "other": sorted(data.other_provenance.items())}


def as_text_bool(value: Any) -> str:
    if value is True:
        return "applied"
    if value is False:
        return "not applied"
    return "unknown"


def plan_section(data: RunData) -> dict[str, Any] | None:
    plan = data.plan
    if not plan:
        return None
    items = plan.get("items")
    planned = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        workload = item.get("workload")
        driver = item.get("driver")
        planned.append({"workload": workload.get("name") if isinstance(workload, dict) else workload,
                        "broker": item.get("broker"),
                        "driver": driver.get("name") if isinstance(driver, dict) else driver,
                        "variant": item.get("variant"), "level": item.get("durability_level") or ""})
    return {"shown": {k: v for k, v in plan.items() if k != "items"}, "planned": planned}


def _suite_name(data: RunData) -> str | None:
    plan = data.plan or {}
    suite = plan.get("suite")
    if isinstance(suite, dict):
        suite = suite.get("name")
    return str(suite) if suite else None


def _title(data: RunData) -> str:
    suite = _suite_name(data)
    dag_id = data.dag_id or (data.plan or {}).get("dag_id")
    parts = ["brokerbench report"]
    if suite:
        parts.append(suite)
    run = f"{dag_id} / {data.run_id}" if dag_id else data.run_id
    parts.append(run)
    return " — ".join(parts)


def status_section(data: RunData) -> dict[str, list[dict[str, Any]]]:
    invalid = []
    for r in data.summary:
        if status_kind(r) == "invalid":
            rules = validity_rules(r.get("invalid_reasons") or split_status(r.get("status"))[1])
            invalid.append({"workload": r.get("workload"), "broker": r.get("broker"), "variant": r.get("variant"),
                            "rules": ", ".join(rules) or "a validity rule",
                            "reasons": split_status(r.get("status"))[1]})
    partial = [r for r in data.summary if _is_partial(r) and status_kind(r) != "invalid"]
    return {"invalid": invalid, "partial": partial}


def _changed_tracks(data: RunData) -> set[tuple[str, str, str]]:
    return {(str(v.get("broker")), str(v.get("variant")), str(v.get("workload"))) for v in _verdicts(data)
            if v.get("verdict") in (Judgement.REGRESSED, Judgement.IMPROVED)}


def _is_sweep(workload: dict[str, Any]) -> bool:
    """A plan item's workload is a throughput sweep: its kind says so, or (no kind) producers and consumers at
    producerRate 0 without a backlog, as the worker derives it (docs/worker.md, "Workload kinds")."""
    kind = workload.get("kind")
    if kind:
        return kind == "throughput-sweep"
    consumers = (workload.get("subscriptionsPerTopic") or 0) * (workload.get("consumerPerSubscription") or 0)
    return bool(workload.get("producersPerTopic")) and bool(consumers) and \
        not workload.get("consumerBacklogSizeGB") and float(workload.get("producerRate") or 0) == 0


def sweep_first(data: RunData) -> bool:
    """Whether the report leads with the throughput sweep (its latency-vs-throughput charts right under the
    outcome): a throughput suite's run, every workload of its plan a sweep; without a plan, a run with sweep
    steps and no summary rows."""
    items = (data.plan or {}).get("items") or []
    if items:
        return all(_is_sweep(i.get("workload") or {}) for i in items)
    return bool(data.sweep) and not data.summary


def render_html(data: RunData, failed_tasks: Sequence[str] = ()) -> str:
    env = run_environment(data)
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    meta_bits = [f"run directory: {data.run_dir}", f"generated {generated}"]
    if env:
        meta_bits.insert(0, f"environment: {env}")
    results = None
    if data.summary:
        results = {"key": results_table(data, KEY_COLUMNS, data.combined),
                   "all": results_table(data, data.summary_columns), "trials": trials_section(data)}
    changed = _changed_tracks(data)
    charts, sweep = charts_section(data), sweep_section(data)
    with_driver = _with_driver(data)
    brokers = broker_panels_section(data.timeseries, data.broker_series, data.broker_catalogs,
                                    lambda row: _combo_label(data, row, with_driver))
    changed_trends = track_trends(data, changed, "changed") if changed and data.history else []
    trends = trends_section(data)
    any_chart = bool(charts or brokers or (sweep and sweep["charts"]) or changed_trends or
                     (trends and trends["charts"]))
    return render(
        "report.html.j2", title=_title(data), meta_bits=meta_bits, what=what_matters_section(data, failed_tasks),
        ab=ab_section(_verdicts(data), data.plan or {}),
        key_figures=key_figures_section(data), status=status_section(data), changed_trends=changed_trends,
        results=results, regression=regression_section(data), verdict_columns=VERDICT_COLUMNS,
        not_judged_columns=NOT_JUDGED_COLUMNS,
        trends=trends, charts=charts, brokers=brokers, sweep=sweep, sweep_first=sweep_first(data),
        plotly_js=plotly_js() if any_chart else "",
        durability=durability_section(data), provenance=provenance_section(data), client_columns=CLIENT_COLUMNS,
        version=brokerbench.__version__, plan=plan_section(data), outcome_css=OUTCOME_CSS)


def build_report(run_dir: str | Path, history_root: str | Path | None = None,
                 failed_tasks: Sequence[str] = ()) -> Path:
    """Write ``<run_dir>/report.html`` and return its path (trend lines when ``history_root`` is given;
    ``failed_tasks``: the run's tasks that failed before the report, for its headline)."""
    run_dir = Path(run_dir)
    data = load_run(run_dir, history_root)
    return write_atomic(run_dir / "report.html", render_html(data, failed_tasks).encode("utf-8"))


SWEEP_TEXT_COLUMNS = ["workload", "broker", "variant", "step", "target_rate_msg_s", "publish_rate_msg_s",
                      "publish_latency_p99_ms", "stable", "reasons"]


def _sweep_text(data: RunData) -> list[str]:
    """A throughput sweep for the terminal: its steps, then each combination's highest stable rate with the
    publish p99 bound a stable step kept."""
    if not data.sweep:
        return []
    columns = [c for c in SWEEP_TEXT_COLUMNS if c in data.sweep[0]]
    out = ["Throughput sweep (docs/results-format.md: a step is stable when it kept its rate and schedule, left no "
           "backlog growing, and its publish p99 stayed within the bound):",
           text_table(columns, [[format_value(r.get(c)) for c in columns] for r in data.sweep])]
    combos: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for r in data.sweep:
        combos.setdefault((str(r.get("workload")), str(r.get("broker")), str(r.get("variant"))), []).append(r)
    for (workload, broker, variant), steps in sorted(combos.items()):
        highest = steps[0].get("highest_stable_rate_msg_s")
        rate = f"{format_value(highest)} msg/s" if is_number(highest) else "none of its steps was stable"
        out.append(f"highest stable rate {broker} {variant} {workload}: {rate}{_bound_text(steps)}")
    return out


def render_text_summary(run_dir: str | Path) -> str:
    """The summary as plain text for task logs and the command line's end of a run: one line per row in summary
    order, what ran first (:data:`TEXT_COLUMNS`: broker, implementation and version, client library and
    version), then the key figures and the status; then warnings and verdicts."""
    data = load_run(run_dir)
    if not data.summary:
        if data.sweep:  # a sweep-only run (a throughput suite): its steps are the result
            return "\n".join([_title(data), *_sweep_text(data)])
        return f"brokerbench: no summary in {Path(run_dir) / 'summary' / 'summary.csv'}"
    columns = [c for c in TEXT_COLUMNS if c in TEXT_DERIVED or c in data.summary_columns]

    def cells(row: Mapping[str, Any]) -> list[str]:
        return [format_value(TEXT_DERIVED[c](row) if c in TEXT_DERIVED else row.get(c)) for c in columns]

    out = [_title(data), text_table(columns, [cells(r) for r in data.summary]), *_sweep_text(data)]
    with_trials = [r for r in data.combined if r.get("trials")]
    if with_trials:
        out.append("Trials combined (the run's value per metric: median of the valid trials; docs/analytics.md):")
        out.append(text_table(columns + ["trials"], [cells(r) + [trials_text(r)] for r in with_trials]))
    for w in durability_warnings(data):
        out.append(f"WARNING durability: {w}")
    for r in data.summary:
        if _is_partial(r):
            out.append(f"WARNING {r.get('workload')} {r.get('broker')} {r.get('variant')}: {r.get('status')}")
    if data.regression is not None:
        verdicts = data.regression.get("verdicts") or []
        order: dict[str, int] = {Judgement.REGRESSED: 0, Judgement.IMPROVED: 1}
        shown = sorted((v for v in verdicts if v.get("verdict") != Judgement.INSUFFICIENT),
                       key=lambda v: order.get(str(v.get("verdict")), 2))
        insufficient = [v for v in verdicts if v.get("verdict") == Judgement.INSUFFICIENT]
        out.append("Regression verdicts (docs/analytics.md), regressed and improved first:")
        if shown:
            out.append(verdict_table.text_table(shown))
        if insufficient:
            out.append(f"insufficient history: {len(insufficient)} verdict(s) of {_insufficient_line(insufficient)}")
        sentences = verdict_table.suspect_sentences(verdicts)
        if sentences:
            out.append('What moved with each change (suspects; docs/analytics.md, "Suspects"):')
            out += [f"  {line}" for line in sentences]
        for v in verdicts:
            if v.get("verdict") == Judgement.REGRESSED:
                out.append(f"REGRESSION {v.get('workload')} {v.get('broker')} {v.get('variant')} "
                           f"{v.get('metric')}: {v.get('evidence')}")
    return "\n".join(out)
