"""The run report: one self-contained HTML file (charts embedded as PNG).

Inputs (all under the run directory, every one optional):
``summary/summary.csv``, ``summary/timeseries.csv``, ``provenance/*.json``,
``plan.json``. Every piece of text from those files is escaped.
"""

from __future__ import annotations

import html
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

import brokerbench
from brokerbench.regression import METRICS, split_status, track_changes, validity_rules, verdict_class

from .charts import line_chart_png, quantile_chart_png, series_by_combo, track_panels_png
from .data import RunData, column_label, column_unit, load_run

#: the compact results table (full table below it has every column)
KEY_COLUMNS = [
    "workload", "broker", "variant", "broker_implementation", "broker_version", "target_rate_msg_s",
    "publish_rate_msg_s", "consume_rate_msg_s", "publish_error_rate_msg_s",
    "publish_latency_p50_ms", "publish_latency_p99_ms", "publish_latency_p999_ms", "publish_latency_max_ms",
    "e2e_latency_avg_ms", "e2e_latency_p50_ms", "e2e_latency_p99_ms", "e2e_latency_max_ms",
    "publish_delay_p99_us", "backlog_end_msgs", "status",
]

TEXT_COLUMNS = [
    "workload", "broker", "variant", "target_rate_msg_s", "publish_rate_msg_s", "consume_rate_msg_s",
    "publish_latency_p50_ms", "publish_latency_p99_ms", "e2e_latency_avg_ms", "e2e_latency_p99_ms",
    "publish_delay_p99_us", "status",
]

CSS = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 1.5em 2em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1.05em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 3px 6px; vertical-align: top; }
th { background: #f3f3f3; text-align: center; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.unit { color: #666; font-weight: normal; }
.scroll { overflow-x: auto; max-width: 100%; }
tr.not-honoured td { background: #fff1e0; }
tr.partial td { background: #fde8e8; }
tr.invalid td { background: #f3e5f5; }
.badge { display: inline-block; padding: 0 0.4em; border-radius: 3px; font-weight: bold; font-size: 0.9em; }
.badge.ok { background: #e6f4ea; color: #1b5e20; } .badge.invalid { background: #6a1b9a; color: #fff; }
.badge.partial { background: #c62828; color: #fff; }
.reasons { font-size: 0.9em; color: #444; min-width: 24em; }
.invalidbox { background: #f3e5f5; border-left: 4px solid #6a1b9a; padding: 0.5em 0.8em; margin: 0.5em 0; }
tr.verdict.notjudged td { background: #f3e5f5; color: #444; }
.warn { background: #fff1e0; border-left: 4px solid #e07b00; padding: 0.5em 0.8em; margin: 0.5em 0; }
.bad { background: #fde8e8; border-left: 4px solid #c62828; padding: 0.5em 0.8em; margin: 0.5em 0; }
.marker { color: #b35c00; font-weight: bold; }
table.kv th { text-align: left; background: #fafafa; }
.meta { color: #555; }
img.chart { display: block; margin: 0.5em 0 1em 0; max-width: 100%; }
tr.verdict.bad td { background: #fde8e8; } tr.verdict.good td { background: #e6f4ea; } tr.verdict.meta td { color: #666; }
.headline { font-size: 1.05em; padding: 0.5em 0.8em; margin: 0.5em 0; border-left: 4px solid #888; background: #f6f6f6; }
.headline.bad { border-left-color: #c62828; background: #fde8e8; } .headline.good { border-left-color: #2e7d32; background: #e6f4ea; }
details { margin: 0.4em 0; } details > summary { cursor: pointer; color: #333; }
details.section > summary { font-size: 1.2em; font-weight: bold; margin-top: 1.2em; border-bottom: 1px solid #ccc; }
.ok { color: #1b5e20; }
td.evidence { font-size: 0.85em; color: #333; max-width: 48em; }
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def format_value(value: Any) -> str:
    """A cell value as display text (not yet escaped)."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        if value == 0:
            return "0"
        if value.is_integer() and abs(value) >= 1000:
            return f"{value:,.0f}"
        magnitude = abs(value)
        if magnitude >= 1000:
            return f"{value:,.0f}"
        if magnitude >= 100:
            return f"{value:.1f}"
        if magnitude >= 1:
            return f"{value:.2f}"
        if magnitude >= 0.001:
            return f"{value:.3f}"
        return f"{value:.2e}"
    return str(value)


def header_cell(name: str) -> str:
    unit = column_unit(name)
    unit_html = f'<br><span class="unit">[{esc(unit)}]</span>' if unit else ""
    return f'<th title="{esc(name)}">{esc(column_label(name))}{unit_html}</th>'


def render_value(value: Any, depth: int = 0) -> str:
    """Any JSON value as escaped HTML (nested tables for objects)."""
    if depth > 6:
        return esc(value)
    if isinstance(value, dict):
        if not value:
            return "<em>none</em>"
        rows = "".join(f"<tr><th>{esc(k)}</th><td>{render_value(v, depth + 1)}</td></tr>" for k, v in value.items())
        return f'<table class="kv">{rows}</table>'
    if isinstance(value, list):
        if not value:
            return "<em>none</em>"
        if all(not isinstance(v, (dict, list)) for v in value):
            return esc(", ".join(format_value(v) for v in value))
        return "".join(f"<div>{render_value(v, depth + 1)}</div>" for v in value)
    if isinstance(value, (bool, int, float)) or value is None:
        return esc(format_value(value))
    return esc(value)


def _combo_label(data: RunData, row: dict[str, Any], with_driver: bool) -> str:
    label = f"{row.get('broker')}/{row.get('variant')}"
    if with_driver:
        label += f" ({row.get('driver')})"
    if data.durability(str(row.get("broker")), str(row.get("variant"))).get("honoured") is False:
        label += " [durability NOT honoured]"
    return label


def _not_honoured(data: RunData, row: dict[str, Any]) -> bool:
    return data.durability(str(row.get("broker")), str(row.get("variant")), row).get("honoured") is False


def _is_partial(row: dict[str, Any]) -> bool:
    """Any status but ok (partial or invalid): the row is marked and never a baseline."""
    status = row.get("status")
    return status is not None and status != "" and status != "ok"


def status_kind(row: dict[str, Any]) -> str:
    """"ok", "invalid", "partial" (also when invalid as well) or "" (no status)."""
    status = str(row.get("status") or "")
    if not status:
        return ""
    return split_status(status)[0]


def status_cell(row: dict[str, Any]) -> str:
    """The status as a badge, with the reasons after it (escaped HTML)."""
    status = str(row.get("status") or "")
    kind, rest = split_status(status)
    if not status:
        return esc(format_value(None))
    if kind == "ok":
        return '<span class="badge ok">ok</span>'
    cls = kind if kind in ("invalid", "partial") else "partial"
    return (f'<span class="badge {cls}" title="{esc(status)}">{esc(kind)}</span>'
            + (f' <span class="reasons">{esc(rest)}</span>' if rest else ""))


def results_table(data: RunData, columns: Sequence[str]) -> str:
    columns = [c for c in columns if not data.summary_columns or c in data.summary_columns]
    head = "".join(header_cell(c) for c in columns)
    body = []
    for row in data.summary:
        classes = []
        if _not_honoured(data, row):
            classes.append("not-honoured")
        if _is_partial(row):
            classes.append("invalid" if status_kind(row) == "invalid" else "partial")
        cells = []
        for c in columns:
            value = row.get(c)
            if c == "status":
                cells.append(f'<td class="status">{status_cell(row)}</td>')
                continue
            text = esc(format_value(value))
            if c == "variant" and _not_honoured(data, row):
                text += ' <span class="marker" title="durability variant not honoured">&#9888; not honoured</span>'
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            cells.append(f'<td class="num">{text}</td>' if numeric else f"<td>{text}</td>")
        cls = f' class="{" ".join(classes)}"' if classes else ""
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return f'<div class="scroll"><table class="results"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def charts_section(data: RunData) -> str:
    if not data.timeseries and not data.omb:
        return "<p>No time series (summary/timeseries.csv is missing or empty).</p>"
    workloads = sorted({str(r.get("workload")) for r in data.timeseries} | {str(d.get("workload")) for d in data.omb})
    drivers_per_combo: dict[tuple[str, str], set] = {}
    for r in data.timeseries:
        drivers_per_combo.setdefault((str(r.get("broker")), str(r.get("variant"))), set()).add(r.get("driver"))
    with_driver = any(len(d) > 1 for d in drivers_per_combo.values())

    def label(row: dict[str, Any]) -> str:
        return _combo_label(data, row, with_driver)

    parts = []
    for workload in workloads:
        charts = [
            ("p99 publish latency over time", "publish latency p99 (ms)",
             series_by_combo(data.timeseries, workload, "publish_latency_p99_ms", label), [], "", ""),
            ("average end-to-end latency over time", "end-to-end latency avg (ms)",
             series_by_combo(data.timeseries, workload, "e2e_latency_avg_ms", label), [], "", ""),
            ("p99 end-to-end latency over time", "end-to-end latency p99 (ms)",
             series_by_combo(data.timeseries, workload, "e2e_latency_p99_ms", label), [], "", ""),
            ("throughput over time (solid: publish (acked), dashed: consume)", "rate (msg/s)",
             series_by_combo(data.timeseries, workload, "publish_rate_msg_s", label),
             series_by_combo(data.timeseries, workload, "consume_rate_msg_s", label), " publish", " consume"),
        ]
        parts.append(f"<h3>{esc(workload)}</h3>")
        if not any(r.get("workload") == workload for r in data.timeseries):
            charts = []
        for title, y_label, solid, dashed, s_suffix, d_suffix in charts:
            png = line_chart_png(f"{workload}: {title}", y_label, solid, dashed, s_suffix, d_suffix)
            parts.append(f'<img class="chart" alt="{esc(workload + ": " + title)}" src="data:image/png;base64,{png}">')
        for key, title, unit in (("aggregatedPublishLatencyQuantiles", "publish latency by percentile", "ms"),
                                 ("aggregatedEndToEndLatencyQuantiles", "end-to-end latency by percentile", "ms")):
            curves = quantile_curves(data, workload, key, with_driver)
            if curves:
                png = quantile_chart_png(f"{workload}: {title}", f"latency ({unit})", curves)
                parts.append(f'<img class="chart" alt="{esc(workload + ": " + title)}" '
                             f'src="data:image/png;base64,{png}">')
    return "\n".join(parts)


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
            row = {"broker": doc.get("broker"), "variant": doc.get("variant"), "driver": doc.get("driver")}
            out.append((_combo_label(data, row, with_driver), points))
    return sorted(out, key=lambda c: c[0])


VERDICT_CLASS = {"regressed": "bad", "improved": "good", "unchanged": "", "insufficient history": "meta",
                 "no data": "meta", "not judged: invalid": "notjudged", "not judged: partial": "notjudged"}


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


def verdict_table(verdicts: Sequence[dict[str, Any]], columns: Sequence[str] = VERDICT_COLUMNS) -> str:
    head = "".join(f"<th>{esc(c.replace('_', ' '))}</th>" for c in columns)
    body = []
    for v in verdicts:
        cls = VERDICT_CLASS.get(verdict_class(v.get("verdict")), "")
        cells = []
        for c in columns:
            value = v.get(c)
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            text = esc(format_value(value))
            if c == "verdict":
                text = f"<strong>{text}</strong>"
            if c == "evidence":
                cells.append(f'<td class="evidence">{text}</td>')
            else:
                cells.append(f'<td class="num">{text}</td>' if numeric else f"<td>{text}</td>")
        body.append(f'<tr class="verdict {esc(cls)}">{"".join(cells)}</tr>')
    return (f'<div class="scroll"><table class="regression"><thead><tr>{head}</tr></thead><tbody>'
            + "".join(body) + "</tbody></table></div>")


def regression_section(data: RunData) -> str:
    """Every verdict: regressed and improved first, then the rest; insufficient history folded to one line."""
    if data.regression is None:
        return "<p>No regression verdicts (summary/regression.json is missing: the history or verdict step did not run).</p>"
    rule = data.regression.get("rule") or {}
    det = rule.get("detector") or {}
    verdicts = _verdicts(data)
    counts: dict[str, int] = {}
    for v in verdicts:
        k = verdict_class(v.get("verdict"))
        counts[k] = counts.get(k, 0) + 1
    intro = (f"<p class='meta'>Each metric against its track's history (same broker, broker version, workload, "
             f"variant, environment and target rate; runs with status ok only). Rule <em>change point</em>: a "
             f"significant change point (ruptures PELT; t test on log values, p &le; {esc(det.get('alpha'))}; at "
             f"least the metric's minimum effect) whose new level started at most {esc(det.get('recent'))} runs "
             f"ago. Rule <em>threshold</em>: this run against the current level (runs since the last change point, "
             f"at most {esc(rule.get('baseline_runs'))}): change beyond max(relative x median, k x (1 + 1/&radic;n) x "
             f"robust spread, floor), k = {esc(rule.get('k'))}. Fewer than {esc(rule.get('min_runs'))} earlier ok "
             f"runs: insufficient history. docs/analytics.md. Counts: "
             + esc(", ".join(f"{k}: {n}" for k, n in sorted(counts.items()))) + "</p>")
    order = {"regressed": 0, "improved": 1, "unchanged": 2, "no data": 3}
    shown = sorted((v for v in verdicts if verdict_class(v.get("verdict")) != "insufficient history"),
                   key=lambda v: order.get(verdict_class(v.get("verdict")), 4))
    insufficient = [v for v in verdicts if verdict_class(v.get("verdict")) == "insufficient history"]
    out = intro + (verdict_table(shown) if shown else "")
    if insufficient:
        out += (f"<details><summary>{len(insufficient)} verdict(s) <strong>insufficient history</strong> "
                f"({esc(_insufficient_line(insufficient))})</summary>{verdict_table(insufficient)}</details>")
    return out


def _insufficient_line(insufficient: Sequence[dict[str, Any]]) -> str:
    tracks: dict[str, int] = {}
    for v in insufficient:
        tracks[_track_label(v)] = max(tracks.get(_track_label(v), 0), int(v.get("baseline_n") or 0))
    need = ""
    shown = "; ".join(f"{t}: {n} earlier ok run(s)" for t, n in sorted(tracks.items())[:6])
    more = f"; and {len(tracks) - 6} more track(s)" if len(tracks) > 6 else ""
    return f"{len(tracks)} track(s) without enough earlier ok runs{need}: {shown}{more}"


def _sides(v: dict[str, Any]) -> str:
    from brokerbench.changepoint import side_text

    cp = v.get("change_point") or {}
    if not cp:
        return ""
    return (f"change point at run {str(cp.get('run_ts'))[:16]}; before: {side_text(cp['before_runs'])}; "
            f"after: {side_text(cp['after_runs'])}")


def findings_table(rows: Sequence[dict[str, Any]]) -> str:
    """Regressed or improved verdicts grouped by track: the runs on each side of a change point once per
    track and change, then one line per metric (change, baseline -> this run, rule, p) with its evidence
    folded."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for v in rows:
        groups.setdefault((_track_label(v), _sides(v)), []).append(v)
    body = []
    for (track, sides), vs in groups.items():
        body.append(f"<tr class='track'><th colspan='5' style='text-align:left'>{esc(track)}"
                    + (f"<br><span class='meta'>{esc(sides)}</span>" if sides else "") + "</th></tr>")
        for v in vs:
            cp = v.get("change_point") or {}
            when = f" since {str(cp.get('run_ts'))[:16]}" if cp.get("run_ts") else " in this run"
            p = v.get("p_value")
            rule = (v.get("rule") or "") + when + (f", p = {p:.2g}" if isinstance(p, (int, float)) else "")
            body.append(
                f"<tr class='verdict {'bad' if v.get('verdict') == 'regressed' else 'good'}'>"
                f"<td>{esc(v.get('metric'))}</td><td class='num'><strong>{esc(_change_text(v))}</strong></td>"
                f"<td class='num'>{esc(format_value(v.get('baseline_median')))} &rarr; "
                f"{esc(format_value(v.get('value')))}</td><td>{esc(rule)}</td>"
                f"<td class='evidence'><details><summary>evidence</summary>{esc(v.get('evidence'))}</details></td></tr>")
    return ("<div class='scroll'><table class='findings'><thead><tr><th>metric</th><th>change</th>"
            "<th>baseline &rarr; this run</th><th>rule</th><th>evidence</th></tr></thead><tbody>"
            + "".join(body) + "</tbody></table></div>")


def what_matters_section(data: RunData) -> str:
    """The first screen: regressions and improvements with their evidence, one line for the rest."""
    verdicts = _verdicts(data)
    parts = []
    if data.regression is None:
        parts.append("<div class='headline'>No regression verdicts for this run (the history or verdict step "
                     "did not run).</div>")
    else:
        regressed = [v for v in verdicts if v.get("verdict") == "regressed"]
        improved = [v for v in verdicts if v.get("verdict") == "improved"]
        classes: dict[str, int] = {}
        for v in verdicts:
            classes[verdict_class(v.get("verdict"))] = classes.get(verdict_class(v.get("verdict")), 0) + 1
        rest = ", ".join(f"{n} {k}" for k, n in sorted(classes.items()) if k not in ("regressed", "improved"))
        if regressed:
            head = (f"<div class='headline bad'><strong>{len(regressed)} regression(s)</strong> in "
                    f"{len({_track_label(v) for v in regressed})} track(s)"
                    + (f", {len(improved)} improvement(s)" if improved else "") + f"; {esc(rest)}.</div>")
        elif improved:
            head = (f"<div class='headline good'><strong>No regression</strong>; {len(improved)} improvement(s); "
                    f"{esc(rest)}.</div>")
        else:
            head = f"<div class='headline'><strong>No regression or improvement</strong>: {esc(rest)}.</div>"
        parts.append(head)
        for title, rows in (("Regressions", regressed), ("Improvements", improved)):
            if rows:
                parts.append(f"<h3>{title}</h3>" + findings_table(rows))
        insufficient = [v for v in verdicts if v.get("verdict") == "insufficient history"]
        if insufficient:
            parts.append(f"<p class='meta'>Insufficient history: {len(insufficient)} verdict(s) of "
                         f"{esc(_insufficient_line(insufficient))}.</p>")
    parts.append(status_section(data))
    return "\n".join(p for p in parts if p)


TREND_METRICS = [("publish_latency_p99_ms", "p99 publish latency (ms)"),
                 ("e2e_latency_p99_ms", "p99 end-to-end latency (ms)"),
                 ("e2e_latency_avg_ms", "average end-to-end latency (ms)"),
                 ("publish_rate_msg_s", "publish rate (msg/s)")]


TREND_LOG = {"publish_latency_p99_ms": True, "e2e_latency_p99_ms": True, "e2e_latency_avg_ms": True,
             "publish_rate_msg_s": False}


def _changes_for(rows: Sequence[dict[str, Any]], column: str) -> list[tuple[str, str]]:
    metric = next((m for m in METRICS if m.column == column), None)
    if metric is None:
        return []
    out = []
    for c in track_changes(rows, metric):
        pct = c.get("change_percent")
        out.append((str(c.get("run_ts")), "" if pct is None else f"{pct:+.0f} %"))
    return out


def track_trends(data: RunData, only: set[tuple[str, str, str]] | None = None) -> list[str]:
    """Small multiples per broker / variant / workload (ok rows; one line per broker version), change points
    of each version's series marked; latency panels on a log axis."""
    env = _environment(data)
    rows = [r for r in data.history if (env is None or r.get("environment") in (env, None))
            and r.get("status") in (None, "ok")]
    tracks = sorted({(str(r.get("broker")), str(r.get("variant")), str(r.get("workload"))) for r in rows})
    parts = []
    for b, x, w in tracks:
        if only is not None and (b, x, w) not in only:
            continue
        t_rows = [r for r in rows if (str(r.get("broker")), str(r.get("variant")), str(r.get("workload"))) == (b, x, w)]
        versions = sorted({str(r.get("broker_version")) for r in t_rows})
        panels = []
        for column, y_label in TREND_METRICS:
            series, changes = [], []
            for version in versions:
                v_rows = sorted((r for r in t_rows if str(r.get("broker_version")) == version
                                 and isinstance(r.get(column), (int, float)) and not isinstance(r.get(column), bool)),
                                key=lambda r: str(r.get("run_ts")))
                if v_rows:
                    series.append((f"{version}", [str(r.get("run_ts")) for r in v_rows],
                                   [float(r[column]) for r in v_rows]))
                    changes += _changes_for(v_rows, column)
            log_y = TREND_LOG.get(column, False)
            panels.append(((y_label + (", log" if log_y else "")).replace(" (", "\n("), series, changes, log_y))
        runs = len({r.get("run_key") for r in t_rows})
        png = track_panels_png(f"{b} / {x} / {w}: {runs} ok run(s)", panels)
        parts.append(f'<img class="chart" alt="{esc(w + ": trend " + b + "/" + x + ": " + ", ".join(c for c, _ in TREND_METRICS))}" '
                     f'src="data:image/png;base64,{png}">')
    return parts


def trends_section(data: RunData) -> str:
    if not data.history:
        return "<p>No history for this run's tracks yet (it fills as runs are appended).</p>"
    env = _environment(data)
    rows = [r for r in data.history if env is None or r.get("environment") in (env, None)]
    not_ok = {r.get("run_key") for r in rows if r.get("status") not in (None, "ok")}
    ok_runs = {r.get("run_key") for r in rows if r.get("status") in (None, "ok")}
    parts = [f"<p class='meta'>Per track (broker / variant / workload), from the history store ({len(ok_runs)} runs, "
             f"environment {esc(env or 'any')}): one line per broker version, change points (red dashed, with "
             f"their size) of each version's series; latency on a log axis. Rows whose status is invalid or "
             f"partial are not drawn ({len(not_ok)} run(s) with such rows).</p>"]
    return "\n".join(parts + track_trends(data))


SWEEP_COLUMNS = ["workload", "broker", "variant", "step", "target_rate_msg_s", "publish_rate_msg_s",
                 "consume_rate_msg_s", "publish_latency_p50_ms", "publish_latency_p99_ms", "e2e_latency_p99_ms",
                 "publish_delay_p99_us", "stable", "reasons"]


def sweep_section(data: RunData) -> str:
    if not data.sweep:
        return ""
    cols = [c for c in SWEEP_COLUMNS if c in data.sweep[0]]
    head = "".join(header_cell(c) for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{esc(format_value(r.get(c)))}</td>" for c in cols) + "</tr>"
                   for r in data.sweep)
    return (f"<h2>Throughput sweep</h2><p class='meta'>One row per sweep step; latencies merged exactly per step.</p>"
            f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>')


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


def durability_section(data: RunData) -> str:
    parts = []
    warnings = durability_warnings(data)
    for w in warnings:
        parts.append(f'<div class="warn">&#9888; {esc(w)}</div>')
    honoured = []
    for broker, variant, row in _combos(data):
        d = data.durability(broker, variant, row)
        if d["honoured"] is True:
            honoured.append(f"{broker} / {variant}" + (f": {d['note']}" if d.get("note") else ""))
    if honoured:
        items = "".join(f"<li>{esc(h)}</li>" for h in honoured)
        parts.append(f"<p>Durability variants honoured as specified:</p><ul>{items}</ul>")
    if not parts:
        parts.append("<p>No durability information recorded.</p>")
    return "\n".join(parts)


def provenance_section(data: RunData) -> str:
    parts = []
    # brokers
    rows = []
    for broker, variant, row in _combos(data):
        d = data.durability(broker, variant, row)
        prov = data.broker_provenance.get((broker, variant), {})
        honoured = {True: "yes", False: "NO", None: "unknown"}[d["honoured"]]
        rows.append(
            "<tr>"
            f"<td>{esc(broker)}</td><td>{esc(variant)}</td><td>{esc(d.get('implementation') or '–')}</td>"
            f"<td>{esc(d.get('version') or '–')}</td><td>{esc(prov.get('nodes', '–'))}</td>"
            f"<td>{esc(honoured)}</td><td>{esc(d.get('note') or '')}</td>"
            f"<td>{render_value(d.get('settings'))}</td>"
            f"<td>{esc(prov.get('variant_description', ''))}</td>"
            "</tr>"
        )
    if rows:
        parts.append(
            "<h3>Brokers</h3><div class='scroll'><table><thead><tr><th>broker</th><th>variant</th>"
            "<th>implementation</th><th>version</th><th>nodes</th><th>durability honoured</th><th>note</th>"
            "<th>durability settings</th><th>variant description</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></div>"
        )
    # clients
    client_rows = []
    for row in data.summary:
        client_rows.append(
            "<tr>" + "".join(f"<td>{esc(format_value(row.get(c)))}</td>" for c in (
                "workload", "broker", "variant", "client_library", "client_library_version", "client_hosts",
                "workers", "brokerbench_version")) + "</tr>"
        )
    if client_rows:
        parts.append(
            "<h3>Clients</h3><div class='scroll'><table><thead><tr><th>workload</th><th>broker</th><th>variant</th>"
            "<th>client library</th><th>client library version</th><th>client hosts</th><th>worker processes</th>"
            "<th>brokerbench version (worker)</th></tr></thead><tbody>" + "".join(client_rows)
            + "</tbody></table></div>"
        )
    # hosts
    hosts = (data.hosts or {}).get("hosts") if isinstance(data.hosts, dict) else None
    if isinstance(hosts, list) and hosts:
        host_rows = []
        for h in hosts:
            if not isinstance(h, dict):
                host_rows.append(f"<tr><td colspan='6'>{render_value(h)}</td></tr>")
                continue
            tuned = h.get("tuned") if isinstance(h.get("tuned"), dict) else {}
            sync = h.get("time_sync") if isinstance(h.get("time_sync"), dict) else {}
            applied = as_text_bool(tuned.get("applied"))
            offset = sync.get("clock_offset_ms")
            offset_text = "–" if offset is None else f"{format_value(offset)} ms"
            extra = {k: v for k, v in h.items() if k not in ("name", "tuned", "time_sync", "description")}
            host_rows.append(
                "<tr>"
                f"<td>{esc(h.get('name', '–'))}</td>"
                f"<td>{esc(tuned.get('profile', '–'))}: {esc(applied)}"
                + (f"<br><span class='meta'>{esc(tuned.get('reason'))}</span>" if tuned.get("reason") else "")
                + "</td>"
                f"<td>{esc(offset_text)}"
                + (f"<br><span class='meta'>{esc(sync.get('note'))}</span>" if sync.get("note") else "")
                + "</td>"
                f"<td>{render_value(h.get('description'))}</td>"
                f"<td>{render_value(extra) if extra else ''}</td>"
                "</tr>"
            )
        parts.append(
            "<h3>Hosts</h3><div class='scroll'><table><thead><tr><th>host</th><th>tuned profile</th>"
            "<th>clock offset</th><th>description</th><th>other</th></tr></thead><tbody>"
            + "".join(host_rows) + "</tbody></table></div>"
        )
    elif data.hosts is not None:
        parts.append(f"<h3>Hosts</h3>{render_value(data.hosts)}")
    else:
        parts.append("<h3>Hosts</h3><p>No host record (provenance/hosts.json is missing).</p>")
    # everything else
    for name, record in sorted(data.other_provenance.items()):
        parts.append(f"<details><summary>{esc(name)}</summary>{render_value(record)}</details>")
    parts.append(f"<p class='meta'>Report written by brokerbench {esc(brokerbench.__version__)}.</p>")
    return "\n".join(parts)


def as_text_bool(value: Any) -> str:
    if value is True:
        return "applied"
    if value is False:
        return "not applied"
    return "unknown"


def plan_section(data: RunData) -> str:
    plan = data.plan
    if not plan:
        return "<p>No plan.json.</p>"
    shown = {k: v for k, v in plan.items() if k != "items"}
    items = plan.get("items")
    parts = [render_value(shown)]
    if isinstance(items, list) and items:
        rows = []
        for item in items:
            if not isinstance(item, dict):
                continue
            workload = item.get("workload")
            driver = item.get("driver")
            wname = workload.get("name") if isinstance(workload, dict) else workload
            dname = driver.get("name") if isinstance(driver, dict) else driver
            rows.append(f"<tr><td>{esc(wname)}</td><td>{esc(item.get('broker'))}</td><td>{esc(dname)}</td>"
                        f"<td>{esc(item.get('variant'))}</td><td>{esc(item.get('durability_level') or '')}</td></tr>")
        parts.append("<p>Measurements planned:</p><table><thead><tr><th>workload</th><th>broker</th><th>driver</th>"
                     "<th>variant</th><th>durability level</th></tr></thead><tbody>" + "".join(rows)
                     + "</tbody></table>")
    return "\n".join(parts)


def _suite_name(data: RunData) -> str | None:
    plan = data.plan or {}
    suite = plan.get("suite")
    if isinstance(suite, dict):
        suite = suite.get("name")
    return str(suite) if suite else None


def _environment(data: RunData) -> str | None:
    env = (data.plan or {}).get("environment")
    if isinstance(env, dict):
        env = env.get("name") or env.get("kind")
    return str(env) if env else None


def _title(data: RunData) -> str:
    suite = _suite_name(data)
    dag_id = data.dag_id or (data.plan or {}).get("dag_id")
    parts = ["brokerbench report"]
    if suite:
        parts.append(suite)
    run = f"{dag_id} / {data.run_id}" if dag_id else data.run_id
    parts.append(run)
    return " — ".join(parts)


def status_section(data: RunData) -> str:
    out = []
    invalid = [r for r in data.summary if status_kind(r) == "invalid"]
    partial = [r for r in data.summary if _is_partial(r) and status_kind(r) != "invalid"]
    if invalid:
        items = []
        for r in invalid:
            rules = validity_rules(r.get("invalid_reasons") or split_status(r.get("status"))[1])
            items.append(f"<li>{esc(r.get('workload'))} / {esc(r.get('broker'))} / {esc(r.get('variant'))}: "
                         f"<strong>invalid</strong> by {esc(', '.join(rules) or 'a validity rule')}: "
                         f"{esc(split_status(r.get('status'))[1])}</li>")
        out.append('<div class="invalidbox">Invalid measurements (rows marked purple): kept here and in the '
                   'history, but never a regression baseline and never judged (docs/results-format.md, '
                   f'"Status"):<ul>{"".join(items)}</ul></div>')
    if partial:
        items = "".join(
            f"<li>{esc(r.get('workload'))} / {esc(r.get('broker'))} / {esc(r.get('variant'))}: "
            f"{esc(r.get('status'))}</li>" for r in partial)
        out.append(f'<div class="bad">Incomplete results (rows marked red):<ul>{items}</ul></div>')
    return "".join(out)


def _changed_tracks(data: RunData) -> set[tuple[str, str, str]]:
    return {(str(v.get("broker")), str(v.get("variant")), str(v.get("workload"))) for v in _verdicts(data)
            if v.get("verdict") in ("regressed", "improved")}


def render_html(data: RunData) -> str:
    title = _title(data)
    env = _environment(data)
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    meta_bits = [f"run directory: {data.run_dir}", f"generated {generated}"]
    if env:
        meta_bits.insert(0, f"environment: {env}")
    if data.summary:
        body_results = (
            ("".join(f'<div class="warn">&#9888; {esc(w)}</div>' for w in durability_warnings(data)
                     if "cannot honour" in w))
            + "<h3>Key results</h3>" + results_table(data, KEY_COLUMNS)
            + "<details><summary>All columns</summary>" + results_table(data, data.summary_columns) + "</details>"
        )
    else:
        body_results = '<div class="bad">No summary (summary/summary.csv is missing or empty): nothing was measured or the aggregation did not run.</div>'
    changed = _changed_tracks(data)
    changed_trends = track_trends(data, changed) if changed and data.history else []
    first_trends = ("<h3>Trends of the tracks that changed</h3>" + "\n".join(changed_trends)) if changed_trends else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{esc(title)}</title>
<style>{CSS}</style>
</head>
<body>
<h1>{esc(title)}</h1>
<p class="meta">{' &middot; '.join(esc(b) for b in meta_bits)}</p>
<h2 id="what-changed">What changed</h2>
{what_matters_section(data)}
{first_trends}
<h2>Results</h2>
<p class="meta">Measured phase only (warm-up excluded). Percentiles are read from histograms merged across all
workers and intervals, never averaged. Rates are messages over the measured wall-clock span.</p>
{body_results}
<h2>Regression verdicts</h2>
{regression_section(data)}
<h2>Trends across runs and versions</h2>
{trends_section(data)}
<h2>Charts</h2>
{charts_section(data)}
{sweep_section(data)}
<h2>Durability</h2>
{durability_section(data)}
<details class="section"><summary>Provenance (brokers, clients, hosts, records)</summary>
{provenance_section(data)}
</details>
<details class="section"><summary>Plan</summary>
{plan_section(data)}
</details>
</body>
</html>
"""


def build_report(run_dir: str | Path, history_root: str | Path | None = None) -> Path:
    """Write ``<run_dir>/report.html`` and return its path (trend lines when ``history_root`` is given)."""
    run_dir = Path(run_dir)
    data = load_run(run_dir, history_root)
    path = run_dir / "report.html"
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(render_html(data), encoding="utf-8")
    tmp.replace(path)
    return path


def _text_table(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> str:
    body = [[format_value(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(line[i]) for line in body]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(line, widths)) for line in body]
    return "\n".join(lines)


def render_text_summary(run_dir: str | Path) -> str:
    """The summary as plain text for task logs: key columns, then warnings."""
    data = load_run(run_dir)
    if not data.summary:
        return f"brokerbench: no summary in {Path(run_dir) / 'summary' / 'summary.csv'}"
    columns = [c for c in TEXT_COLUMNS if c in data.summary_columns]
    out = [_title(data), _text_table(data.summary, columns)]
    for w in durability_warnings(data):
        out.append(f"WARNING durability: {w}")
    for r in data.summary:
        if _is_partial(r):
            out.append(f"WARNING {r.get('workload')} {r.get('broker')} {r.get('variant')}: {r.get('status')}")
    if data.regression is not None:
        from .regression import text_table as verdict_table

        verdicts = data.regression.get("verdicts") or []
        order = {"regressed": 0, "improved": 1}
        shown = sorted((v for v in verdicts if v.get("verdict") != "insufficient history"),
                       key=lambda v: order.get(str(v.get("verdict")), 2))
        insufficient = [v for v in verdicts if v.get("verdict") == "insufficient history"]
        out.append("Regression verdicts (docs/analytics.md), regressed and improved first:")
        if shown:
            out.append(verdict_table(shown))
        if insufficient:
            out.append(f"insufficient history: {len(insufficient)} verdict(s) of {_insufficient_line(insufficient)}")
        for v in verdicts:
            if v.get("verdict") == "regressed":
                out.append(f"REGRESSION {v.get('workload')} {v.get('broker')} {v.get('variant')} "
                           f"{v.get('metric')}: {v.get('evidence')}")
    return "\n".join(out)
