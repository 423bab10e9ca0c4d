"""Comparison report from the history store: versions of one broker, brokers side by side.

- **Versions**: per broker x workload x variant x environment, one row per
  broker version, **in version order** (older to newer, :func:`brokerbench.changepoint.version_key`,
  whatever order a backfill measured them in): the latest run of that version
  (its exact merged figures), what ran (implementation, client library), the
  number of runs and the median over runs of p99 publish and end-to-end
  latency; **each change said from the older version to the newer**
  ("3.9.1 → 4.1.1: e2e latency p99 50.4 → 18.3 ms (-63.6 %), significantly
  better"), labelled significantly worse / better or not significant by the
  statistic of the change points (:func:`brokerbench.changepoint.compare_versions`);
  interactive charts (Plotly, offline, as the run report's): each metric **by
  version** (every run a point, a line through each version's median), and **by
  run time** where that is the question (a version measured on more than one
  day: did it drift?).
- **Brokers side by side**: per workload x variant (durability level) x
  environment, the latest run of every broker, with the seeds' tables: avg,
  p50, p75, p95, p99, p99.9, p99.99 and max of publish and end-to-end latency.
  A broker whose implementation did not honour the variant is marked: it is
  not at that durability level.

Only runs with status ``ok`` are compared: rows whose status is ``invalid:
...`` (the measurement broke a validity rule, docs/results-format.md) or
``partial: ...`` stay in the history but are left out, and the report says
how many. Figures of one run are the exact
percentiles of that run's merged histograms; across runs only medians of run
results are shown, and labelled so.

At 1,400 px the page needs no sideways scrolling (tests/unit/test_compare_versions.py): the
first screen is a track's change lines, its version table and its charts; every percentile of each
version is folded below them.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from statistics import median
from typing import Any, Iterable, Sequence

from brokerbench import suspects
from brokerbench.changepoint import VersionDiff, compare_versions, version_key
from brokerbench.history import latest_per, read_history
from brokerbench.metrics import METRICS, unit_of
from brokerbench.regression import track_changes
from brokerbench.trials import combine
from brokerbench.util import write_atomic

from .data import client_text, column_label
from .figures import (
    Panel,
    VersionRuns,
    figure_html,
    plotly_js,
    run_times,
    series_key,
    series_keys,
    track_figure,
    version_figure,
)
from .templating import format_value, render

STATS = ["avg", "p50", "p75", "p95", "p99", "p999", "p9999", "max"]
LATENCY_TABLES = [("publish_latency", "publish latency (ms)"), ("e2e_latency", "end-to-end latency (ms)")]


def _ok(rows: Iterable[dict[str, Any]], environment: str | None, brokers: Sequence[str] | None) -> list[dict]:
    return [r for r in rows if r.get("status") == "ok"
            and (environment is None or r.get("environment") == environment)
            and (not brokers or r.get("broker") in brokers)]


def _latest_run(row: dict[str, Any]) -> str | None:
    """A run's time as shown in a table: "2026-11-20 03:00" (UTC)."""
    ts = row.get("run_ts")
    if ts is None:
        return None
    t = run_times([ts])[0]
    return str(ts) if t is None else f"{t:%Y-%m-%d %H:%M}"


def version_rows(rows: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """(broker, workload, variant, environment) -> one row per broker version (latest run + run stats), the
    versions in version order (older to newer, whatever order they were measured in)."""
    out: dict[tuple, list[dict[str, Any]]] = {}
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r.get("broker"), r.get("workload"), r.get("variant"), r.get("environment"),
                           r.get("broker_version")), []).append(r)
    for (b, w, v, e, version), runs in sorted(groups.items(), key=lambda kv: (tuple(str(x) for x in kv[0][:4]),
                                                                              version_key(kv[0][4]))):
        latest = max(runs, key=lambda r: str(r.get("run_ts")))
        row = dict(latest)
        row["runs"] = len(runs)
        row["latest_run"] = _latest_run(latest)
        row["client"] = client_text(latest)
        for col in ("publish_latency_p99_ms", "e2e_latency_p99_ms"):
            values = [x[col] for x in runs if isinstance(x.get(col), (int, float))]
            row[f"median_over_runs_{col}"] = median(values) if values else None
        out.setdefault((b, w, v, e), []).append(row)
    return out


def side_by_side(rows: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """(workload, variant, environment) -> latest run of every broker."""
    out: dict[tuple, list[dict[str, Any]]] = {}
    for r in latest_per(rows, ["workload", "variant", "environment", "broker"]):
        out.setdefault((r.get("workload"), r.get("variant"), r.get("environment")), []).append(
            {**r, "latest_run": _latest_run(r)})
    return out


DIFF_CLASS = {"significantly worse": "verdict bad", "significantly better": "verdict good",
              "not significant": "", "too few runs": "verdict meta"}


#: the metrics a change line always names (the others only when their change is significant)
HEADLINE_METRICS = ("publish_latency_p99_ms", "e2e_latency_p99_ms")
METRIC_ORDER = {m.column: i for i, m in enumerate(METRICS)}


def _diff_order(d: VersionDiff) -> tuple:
    """Tracks as they are listed, each version step older to newer, metrics in report order."""
    return (d.broker, d.workload, d.variant, str(d.environment), version_key(d.version_a), version_key(d.version_b),
            METRIC_ORDER.get(d.metric, len(METRIC_ORDER)), d.metric)


def version_diffs(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each version against the one before it in version order (older to newer), per metric, labelled by the t
    test on log values (p <= alpha and at least the metric's minimum effect); in version order, metrics in
    report order. ``rows``: the table's rows (``cells``: versions "older → newer", metric, runs, medians, change
    from the older to the newer, p, label), ``significant``: how many are, ``changes``: :func:`version_changes`."""
    diffs = sorted(compare_versions(rows), key=_diff_order)
    table = [{"cls": DIFF_CLASS.get(d.label, ""),
              "cells": [d.version_a + " \u2192 " + d.version_b, d.metric, f"{d.runs_a} / {d.runs_b}",
                        format_value(d.median_a), format_value(d.median_b),
                        "–" if d.change_percent is None else f"{d.change_percent:+.1f} %",
                        "–" if d.p_value is None else f"{d.p_value:.2g}", d.label]} for d in diffs]
    return {"rows": table, "significant": sum(d.label.startswith("significantly") for d in diffs),
            "changes": _changes(diffs, rows=rows)}


def _metric_change(d: VersionDiff, arrow: str) -> str:
    """"e2e latency p99 50.4 → 18.3 ms (-63.6 %), significantly better": the medians over runs, older first."""
    unit = unit_of(d.metric)
    return (f"{column_label(d.metric)} {format_value(d.median_a)} {arrow} {format_value(d.median_b)}"
            f"{' ' + unit if unit else ''} ({_percent(d)}), {d.label}")


def _changes(diffs: Sequence[VersionDiff], arrow: str = "\u2192",
             rows: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """One entry per track and version step, older to newer: the step ("3.9.1 → 4.1.1"), the headline metrics
    in words (both medians, the change, the label), the other metrics whose change is significant (named with
    their change), and how many others were compared with which label."""
    steps: dict[tuple, list[VersionDiff]] = {}
    for d in diffs:
        steps.setdefault((d.broker, d.workload, d.variant, d.environment, d.version_a, d.version_b), []).append(d)
    out = []
    for (b, w, x, e), step_diffs in _by_track(steps).items():
        for (older, newer), ds in step_diffs:
            headline = [d for d in ds if d.metric in HEADLINE_METRICS]
            metrics = [_metric_change(d, arrow) for d in headline]
            others: dict[str, list[VersionDiff]] = {}
            for d in ds:
                if d not in headline:
                    others.setdefault(d.label, []).append(d)
            for label in ("significantly worse", "significantly better"):
                if label in others:
                    metrics.append(f"also {label}: " + ", ".join(
                        f"{column_label(d.metric)} ({_percent(d)})" for d in others.pop(label)))
            rest = "; ".join(f"{len(ds_)} other metric(s) {label}" for label, ds_ in sorted(others.items()))
            if rows and any(d.label.startswith("significantly") for d in headline):
                # what moved with it on the brokers and hosts: the same statistic over the catalog's figures
                track = [r for r in rows if (r.get("broker"), r.get("workload"), r.get("variant"),
                                             r.get("environment")) == (b, w, x, e)]
                said = suspects.from_versions(str(b), track, older, newer).suspects("what moved").sentence
                metrics.append(said.replace("what moved: ", "what moved with it: ", 1))
            out.append({"broker": b, "workload": w, "variant": x, "environment": e, "older": older, "newer": newer,
                        "step": f"{older} {arrow} {newer}", "metrics": metrics, "rest": rest,
                        "cls": ("worse" if any(d.label == "significantly worse" for d in ds) else
                                "better" if any(d.label == "significantly better" for d in ds) else ""),
                        "significant": sum(d.label.startswith("significantly") for d in ds)})
    return out


def _by_track(steps: dict[tuple, list[VersionDiff]]) -> dict[tuple, list[tuple[tuple[str, str], list[VersionDiff]]]]:
    out: dict[tuple, list[tuple[tuple[str, str], list[VersionDiff]]]] = {}
    for (b, w, x, e, older, newer), ds in steps.items():
        out.setdefault((b, w, x, e), []).append(((older, newer), ds))
    return out


def _percent(d: VersionDiff) -> str:
    return "–" if d.change_percent is None else f"{d.change_percent:+.1f} %"


def version_changes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every version step of every track (ok history rows), older to newer, in words: dicts with broker,
    workload, variant, environment, older, newer, step ("3.9.1 → 4.1.1"), metrics (one text per named
    metric: "e2e latency p99 50.4 → 18.3 ms (-63.6 %), significantly better"), rest (the other metrics'
    labels counted) and cls ("worse" when a metric got significantly worse, else "better" when one got
    better)."""
    return _changes(sorted(compare_versions(rows), key=_diff_order), rows=rows)


def version_changes_text(rows: list[dict[str, Any]]) -> str:
    """:func:`version_changes` as plain text, one line per version step ("kafka / w / fsync-off / local:
    3.9.1 -> 4.1.1: ..."), for logs and terminals."""
    lines = []
    for c in _changes(sorted(compare_versions(rows), key=_diff_order), "->", rows):
        parts = c["metrics"] + ([c["rest"]] if c["rest"] else [])
        lines.append(f"{c['broker']} / {c['workload']} / {c['variant']} / {c['environment']}: {c['step']}: "
                     + "; ".join(parts))
    return "\n".join(lines) or "no broker with two versions in the history"


def excluded_rows(rows: Iterable[dict[str, Any]], environment: str | None = None,
                  brokers: Sequence[str] | None = None) -> dict[str, int]:
    """How many history rows (of the environment and brokers compared) are left out, per status kind."""
    out: dict[str, int] = {}
    for r in rows:
        if r.get("status") == "ok" or (environment is not None and r.get("environment") != environment) \
                or (brokers and r.get("broker") not in brokers):
            continue
        kind = str(r.get("status") or "no status").split(":", 1)[0]
        out[kind] = out.get(kind, 0) + 1
    return out


#: the version table (first screen: narrow enough for 1,400 px)
VERSION_COLUMNS = ["broker_version", "broker_implementation", "client", "runs", "latest_run", "publish_rate_msg_s",
                   "publish_latency_p50_ms", "publish_latency_p99_ms", "e2e_latency_p50_ms", "e2e_latency_p99_ms",
                   "median_over_runs_publish_latency_p99_ms", "median_over_runs_e2e_latency_p99_ms"]
#: every percentile of each version's latest run (folded), one table per latency
VERSION_STAT_COLUMNS = ["broker_version", "runs", "latest_run"]
SIDE_BY_SIDE_COLUMNS = ["broker", "broker_implementation", "broker_version", "latest_run", "target_rate_msg_s",
                        "publish_rate_msg_s"]
#: the charts of a track: (column, axis title, log axis)
CHART_METRICS = [("publish_latency_p99_ms", "p99 publish latency (ms)", True),
                 ("e2e_latency_p99_ms", "p99 end-to-end latency (ms)", True)]
#: a track's runs through one version span at least this long: whether it drifted over time is a question
OVER_TIME = timedelta(days=1)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def over_time_is_a_question(track: Sequence[dict[str, Any]]) -> bool:
    """Whether a track's chart by run time says something its chart by version does not: some version has runs
    at least :data:`OVER_TIME` apart (nightly runs of one version; not a backfill's runs of an hour)."""
    times: dict[str, list[datetime]] = {}
    for r, t in zip(track, run_times([r.get("run_ts") for r in track])):
        if t is not None:
            times.setdefault(str(r.get("broker_version")), []).append(t)
    return any(max(ts) - min(ts) >= OVER_TIME for ts in times.values() if len(ts) > 1)


def track_charts(track: Sequence[dict[str, Any]], versions: Sequence[str], title: str, id_prefix: str
                 ) -> list[dict[str, Any]]:
    """A track's interactive charts ({"title", "html"}): each metric of :data:`CHART_METRICS` by version (one
    line per client library: runs of one library are never compared with another's), then, when
    :func:`over_time_is_a_question`, the metrics by run time (one line per version, change points marked)."""
    charts = []
    libraries = sorted({lib for _, lib in series_keys(track)})
    by_time = sorted(track, key=lambda r: str(r.get("run_ts")))
    for col, label, log_y in CHART_METRICS:
        lines = []
        for lib in libraries:
            runs = [(str(r.get("broker_version")), float(r[col]), f"run {_latest_run(r)} ({r.get('run_id')})")
                    for r in by_time if str(r.get("client_library") or "") == lib and _is_number(r.get(col))]
            lines.append(VersionRuns(lib or "client library not recorded", runs))
        fig = version_figure(f"{label.split(' (')[0]} by version", label, versions, lines, log_y)
        charts.append({"title": f"{title}: {label} by version",
                       "html": figure_html(fig, f"{id_prefix}-by-version-{col}")})
    if over_time_is_a_question(track):
        keys = series_keys(track)
        panels = []
        for col, label, log_y in CHART_METRICS:
            metric = next(m for m in METRICS if m.column == col)
            series, changes = [], []
            for key, name in sorted(keys.items(), key=lambda kv: (version_key(kv[0][0]), kv[0][1])):
                v_rows = sorted((r for r in track if series_key(r) == key and _is_number(r.get(col))),
                                key=lambda r: str(r.get("run_ts")))
                if v_rows:
                    series.append((name, [str(r.get("run_ts")) for r in v_rows], [float(r[col]) for r in v_rows]))
                    changes += [(str(c.get("run_ts")), "" if c.get("change_percent") is None
                                 else f"{c['change_percent']:+.0f} %") for c in track_changes(v_rows, metric)]
            panels.append(Panel(label.replace(" (", "<br>(") + (", log" if log_y else ""), series, changes, log_y))
        fig = track_figure("by run time, one line per version", panels)
        charts.append({"title": f"{title}: by run time", "html": figure_html(fig, f"{id_prefix}-over-time")})
    return charts


def render_comparison(rows: list[dict[str, Any]], title: str = "brokerbench comparison",
                      excluded: dict[str, int] | None = None) -> str:
    """The comparison page (template ``templates/compare.html.j2``) of ok history rows."""
    left_out = ""
    if excluded:
        left_out = (" Left out: " + ", ".join(f"{n} {k} row(s)" for k, n in sorted(excluded.items()))
                    + " (status not ok: an invalid measurement or an incomplete result).")
    versions = []
    for i, ((b, w, v, e), vrows) in enumerate(version_rows(rows).items()):
        track = [r for r in rows if (r.get("broker"), r.get("workload"), r.get("variant"), r.get("environment"))
                 == (b, w, v, e)]
        order = [str(r.get("broker_version")) for r in vrows]
        versions.append({"broker": b, "workload": w, "variant": v, "environment": e, "rows": vrows,
                         "diffs": version_diffs(track), "charts": track_charts(track, order, f"{b} / {w} / {v}",
                                                                               f"t{i}")})
    brokers = []
    for (w, v, e), brows in side_by_side(rows).items():
        not_honoured = [str(r.get("broker")) for r in brows if r.get("durability_honoured") is False]
        brokers.append({"workload": w, "variant": v, "environment": e, "rows": brows,
                        "not_honoured": ", ".join(not_honoured)})
    any_chart = any(t["charts"] for t in versions)
    return render("compare.html.j2", title=title, n_rows=len(rows), n_runs=len({r.get("run_key") for r in rows}),
                  generated=f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S}", left_out=left_out,
                  any_excluded=bool(excluded), plotly_js=plotly_js() if any_chart else "",
                  versions=versions, version_columns=VERSION_COLUMNS, brokers=brokers,
                  version_stat_tables=[(label, VERSION_STAT_COLUMNS + [f"{prefix}_{s}_ms" for s in STATS])
                                       for prefix, label in LATENCY_TABLES],
                  latency_tables=[(label, SIDE_BY_SIDE_COLUMNS + [f"{prefix}_{s}_ms" for s in STATS])
                                  for prefix, label in LATENCY_TABLES])


def text_summary(rows: list[dict[str, Any]]) -> str:
    lines = []
    for (w, v, e), brows in side_by_side(rows).items():
        lines.append(f"{w} / {v} / {e}:")
        for r in brows:
            lines.append(f"  {r.get('broker'):<9} {str(r.get('broker_version')):<24} "
                         + " ".join(f"p{s[1:] if s.startswith('p') else s}={format_value(r.get(f'publish_latency_{s}_ms'))}"
                                    for s in ("p50", "p99", "max")) + " ms publish; "
                         + f"e2e p99={format_value(r.get('e2e_latency_p99_ms'))} ms"
                         + (" [durability NOT honoured]" if r.get("durability_honoured") is False else ""))
    return "\n".join(lines) or "no history"


def build_comparison(history_root: str | Path, out_dir: str | Path, environment: str | None = None,
                     brokers: Sequence[str] | None = None) -> Path:
    """Write ``<out_dir>/comparison.html`` from the history store; returns its path."""
    everything = combine(read_history(history_root))  # one row per run and track, trials combined
    rows = _ok(everything, environment, brokers)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    page = render_comparison(rows, excluded=excluded_rows(everything, environment, brokers))
    return write_atomic(out / "comparison.html", page.encode("utf-8"))
