"""The run report: one self-contained HTML file (charts embedded as PNG).

Inputs (all under the run directory, every one optional):
``summary/summary.csv``, ``summary/timeseries.csv``, ``provenance/*.json``,
``plan.json``. The page is the Jinja2 template ``templates/report.html.j2``
(autoescape: every piece of text from those files is escaped); this module
gathers what each section shows.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

import brokerbench
from brokerbench.changepoint import side_text
from brokerbench.metrics import JUDGED, METRICS, Judgement
from brokerbench.regression import split_status, track_changes, validity_rules, verdict_category
from brokerbench.report import verdict_table
from brokerbench.trials import spread_columns, trials_of
from brokerbench.util import text_table, write_atomic

from .charts import line_chart_png, quantile_chart_png, series_by_combo, track_panels_png
from .data import RunData, load_run
from .templating import format_value, render

__all__ = ["build_report", "format_value", "render_html", "render_text_summary"]

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


def charts_section(data: RunData) -> list[tuple[str, list[dict[str, str]]]] | None:
    """Per workload, its charts as (alt text, base64 PNG); None without time series and OMB documents."""
    if not data.timeseries and not data.omb:
        return None
    workloads = sorted({str(r.get("workload")) for r in data.timeseries} | {str(d.get("workload")) for d in data.omb})
    drivers_per_combo: dict[tuple[str, str], set] = {}
    for r in data.timeseries:
        drivers_per_combo.setdefault((str(r.get("broker")), str(r.get("variant"))), set()).add(r.get("driver"))
    with_driver = any(len(d) > 1 for d in drivers_per_combo.values())

    def label(row: dict[str, Any]) -> str:
        return _combo_label(data, row, with_driver)

    out = []
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
        images = []
        if not any(r.get("workload") == workload for r in data.timeseries):
            charts = []
        for title, y_label, solid, dashed, s_suffix, d_suffix in charts:
            png = line_chart_png(f"{workload}: {title}", y_label, solid, dashed, s_suffix, d_suffix)
            images.append({"alt": f"{workload}: {title}", "png": png})
        for key, title, unit in (("aggregatedPublishLatencyQuantiles", "publish latency by percentile", "ms"),
                                 ("aggregatedEndToEndLatencyQuantiles", "end-to-end latency by percentile", "ms")):
            curves = quantile_curves(data, workload, key, with_driver)
            if curves:
                png = quantile_chart_png(f"{workload}: {title}", f"latency ({unit})", curves)
                images.append({"alt": f"{workload}: {title}", "png": png})
        out.append((workload, images))
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


#: the CSS class of each verdict category (regression.verdict_category)
VERDICT_CSS = {Judgement.REGRESSED: "bad", Judgement.IMPROVED: "good", Judgement.UNCHANGED: "",
               Judgement.INSUFFICIENT: "meta", Judgement.NO_DATA: "meta",
               f"{Judgement.NOT_JUDGED}: invalid": "notjudged", f"{Judgement.NOT_JUDGED}: partial": "notjudged"}


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
    """Verdicts with the class of their table row."""
    return [{"cls": VERDICT_CSS.get(verdict_category(v.get("verdict")), ""), "row": v} for v in verdicts]


def regression_section(data: RunData) -> dict[str, Any] | None:
    """Every verdict: regressed and improved first, then the rest; insufficient history folded to one line."""
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
    shown = sorted((v for v in verdicts if verdict_category(v.get("verdict")) != Judgement.INSUFFICIENT),
                   key=lambda v: order.get(verdict_category(v.get("verdict")), 4))
    insufficient = [v for v in verdicts if verdict_category(v.get("verdict")) == Judgement.INSUFFICIENT]
    return {"alpha": det.get("alpha"), "recent": det.get("recent"), "baseline_runs": rule.get("baseline_runs"),
            "k": rule.get("k"), "min_runs": rule.get("min_runs"),
            "counts": ", ".join(f"{k}: {n}" for k, n in sorted(counts.items())),
            "shown": verdict_rows(shown), "insufficient": verdict_rows(insufficient),
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
                             "value": v.get("value"), "rule": rule, "evidence": v.get("evidence")})
        out.append({"track": track, "sides": sides, "findings": findings})
    return out


def what_matters_section(data: RunData) -> dict[str, Any]:
    """The first screen: regressions and improvements with their evidence, one line for the rest."""
    if data.regression is None:
        return {"headline": None}
    verdicts = _verdicts(data)
    regressed = [v for v in verdicts if v.get("verdict") == Judgement.REGRESSED]
    improved = [v for v in verdicts if v.get("verdict") == Judgement.IMPROVED]
    classes: dict[str, int] = {}
    for v in verdicts:
        classes[verdict_category(v.get("verdict"))] = classes.get(verdict_category(v.get("verdict")), 0) + 1
    rest = ", ".join(f"{n} {k}" for k, n in sorted(classes.items()) if k not in (Judgement.REGRESSED, Judgement.IMPROVED))
    insufficient = [v for v in verdicts if v.get("verdict") == Judgement.INSUFFICIENT]
    judged = [v for v in verdicts if v.get("verdict") in JUDGED]
    return {"headline": {"regressed": len(regressed), "tracks": len({_track_label(v) for v in regressed}),
                         "improved": len(improved), "judged": len(judged), "rest": rest},
            "findings": [(title, findings_groups(rows)) for title, rows
                         in (("Regressions", regressed), ("Improvements", improved)) if rows],
            "insufficient_n": len(insufficient),
            "insufficient": _insufficient_line(insufficient) if insufficient else ""}


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


def track_trends(data: RunData, only: set[tuple[str, str, str]] | None = None) -> list[dict[str, str]]:
    """Small multiples per broker / variant / workload (ok rows; one line per broker version), change points
    of each version's series marked; latency panels on a log axis. One chart (alt text, base64 PNG) per track."""
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
        parts.append({"alt": f"{w}: trend {b}/{x}: " + ", ".join(c for c, _ in TREND_METRICS), "png": png})
    return parts


def trends_section(data: RunData) -> dict[str, Any] | None:
    if not data.history:
        return None
    env = _environment(data)
    rows = [r for r in data.history if env is None or r.get("environment") in (env, None)]
    not_ok = {r.get("run_key") for r in rows if r.get("status") not in (None, "ok")}
    ok_runs = {r.get("run_key") for r in rows if r.get("status") in (None, "ok")}
    return {"ok_runs": len(ok_runs), "environment": env or "any", "not_ok": len(not_ok),
            "charts": track_trends(data)}


SWEEP_COLUMNS = ["workload", "broker", "variant", "step", "target_rate_msg_s", "publish_rate_msg_s",
                 "consume_rate_msg_s", "publish_latency_p50_ms", "publish_latency_p99_ms", "e2e_latency_p99_ms",
                 "publish_delay_p99_us", "stable", "reasons"]


def sweep_section(data: RunData) -> dict[str, Any] | None:
    if not data.sweep:
        return None
    return {"columns": [c for c in SWEEP_COLUMNS if c in data.sweep[0]], "rows": data.sweep}


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


def render_html(data: RunData) -> str:
    env = _environment(data)
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    meta_bits = [f"run directory: {data.run_dir}", f"generated {generated}"]
    if env:
        meta_bits.insert(0, f"environment: {env}")
    results = None
    if data.summary:
        results = {"warnings": [w for w in durability_warnings(data) if "cannot honour" in w],
                   "key": results_table(data, KEY_COLUMNS, data.combined),
                   "all": results_table(data, data.summary_columns), "trials": trials_section(data)}
    changed = _changed_tracks(data)
    return render(
        "report.html.j2", title=_title(data), meta_bits=meta_bits, what=what_matters_section(data),
        status=status_section(data), changed_trends=track_trends(data, changed) if changed and data.history else [],
        results=results, regression=regression_section(data), verdict_columns=VERDICT_COLUMNS,
        trends=trends_section(data), charts=charts_section(data), sweep=sweep_section(data),
        durability=durability_section(data), provenance=provenance_section(data), client_columns=CLIENT_COLUMNS,
        version=brokerbench.__version__, plan=plan_section(data))


def build_report(run_dir: str | Path, history_root: str | Path | None = None) -> Path:
    """Write ``<run_dir>/report.html`` and return its path (trend lines when ``history_root`` is given)."""
    run_dir = Path(run_dir)
    data = load_run(run_dir, history_root)
    return write_atomic(run_dir / "report.html", render_html(data).encode("utf-8"))


def render_text_summary(run_dir: str | Path) -> str:
    """The summary as plain text for task logs: key columns, then warnings."""
    data = load_run(run_dir)
    if not data.summary:
        return f"brokerbench: no summary in {Path(run_dir) / 'summary' / 'summary.csv'}"
    columns = [c for c in TEXT_COLUMNS if c in data.summary_columns]
    out = [_title(data), text_table(columns, [[format_value(r.get(c)) for c in columns] for r in data.summary])]
    with_trials = [r for r in data.combined if r.get("trials")]
    if with_trials:
        out.append("Trials combined (the run's value per metric: median of the valid trials; docs/analytics.md):")
        out.append(text_table(columns + ["trials"], [[format_value(r.get(c)) for c in columns] + [trials_text(r)]
                                                     for r in with_trials]))
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
        for v in verdicts:
            if v.get("verdict") == Judgement.REGRESSED:
                out.append(f"REGRESSION {v.get('workload')} {v.get('broker')} {v.get('variant')} "
                           f"{v.get('metric')}: {v.get('evidence')}")
    return "\n".join(out)
