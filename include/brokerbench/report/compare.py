"""Comparison report from the history store: versions of one broker, brokers side by side.

- **Versions**: per broker x workload x variant x environment, one row per
  broker version: the latest run of that version (its exact merged figures),
  the number of runs and the median over runs of p99 publish and end-to-end
  latency; every version against the one measured before it, per metric,
  labelled significantly worse / better or not significant by the statistic of
  the change points (:func:`brokerbench.changepoint.compare_versions`); a trend
  chart of p99 publish latency per version over time.
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
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from statistics import median
from typing import Any, Iterable, Sequence

from brokerbench.changepoint import compare_versions
from brokerbench.history import latest_per, read_history
from brokerbench.trials import combine
from brokerbench.util import write_atomic

from .charts import trend_chart_png
from .figures import series_key, series_keys
from .templating import format_value, render

STATS = ["avg", "p50", "p75", "p95", "p99", "p999", "p9999", "max"]
LATENCY_TABLES = [("publish_latency", "publish latency (ms)"), ("e2e_latency", "end-to-end latency (ms)")]


def _ok(rows: Iterable[dict[str, Any]], environment: str | None, brokers: Sequence[str] | None) -> list[dict]:
    return [r for r in rows if r.get("status") == "ok"
            and (environment is None or r.get("environment") == environment)
            and (not brokers or r.get("broker") in brokers)]


def version_rows(rows: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """(broker, workload, variant, environment) -> one row per broker version (latest run + run stats)."""
    out: dict[tuple, list[dict[str, Any]]] = {}
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r.get("broker"), r.get("workload"), r.get("variant"), r.get("environment"),
                           r.get("broker_version")), []).append(r)
    for (b, w, v, e, version), runs in sorted(groups.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        latest = max(runs, key=lambda r: str(r.get("run_ts")))
        row = dict(latest)
        row["runs"] = len(runs)
        for col in ("publish_latency_p99_ms", "e2e_latency_p99_ms"):
            values = [x[col] for x in runs if isinstance(x.get(col), (int, float))]
            row[f"median_over_runs_{col}"] = median(values) if values else None
        out.setdefault((b, w, v, e), []).append(row)
    return out


def side_by_side(rows: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """(workload, variant, environment) -> latest run of every broker."""
    out: dict[tuple, list[dict[str, Any]]] = {}
    for r in latest_per(rows, ["workload", "variant", "environment", "broker"]):
        out.setdefault((r.get("workload"), r.get("variant"), r.get("environment")), []).append(r)
    return out


DIFF_CLASS = {"significantly worse": "verdict bad", "significantly better": "verdict good",
              "not significant": "", "too few runs": "verdict meta"}


def version_diffs(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each version against the previous one (by first run time), per metric, labelled by the t test on log
    values (p <= alpha and at least the metric's minimum effect); significant differences first."""
    diffs = compare_versions(rows)
    order = {"significantly worse": 0, "significantly better": 1, "not significant": 2, "too few runs": 3}
    diffs.sort(key=lambda d: (order.get(d.label, 4), d.version_a, d.version_b))
    table = [{"cls": DIFF_CLASS.get(d.label, ""),
              "cells": [d.version_a + " \u2192 " + d.version_b, d.metric, f"{d.runs_a} / {d.runs_b}",
                        format_value(d.median_a), format_value(d.median_b),
                        "–" if d.change_percent is None else f"{d.change_percent:+.1f} %",
                        "–" if d.p_value is None else f"{d.p_value:.2g}", d.label]} for d in diffs]
    return {"rows": table, "significant": sum(d.label.startswith("significantly") for d in diffs)}


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


VERSION_COLUMNS = ["broker_version", "broker_implementation", "runs", "run_ts", "publish_rate_msg_s",
                   *[f"publish_latency_{s}_ms" for s in STATS], *[f"e2e_latency_{s}_ms" for s in STATS],
                   "median_over_runs_publish_latency_p99_ms", "median_over_runs_e2e_latency_p99_ms"]
SIDE_BY_SIDE_COLUMNS = ["broker", "broker_implementation", "broker_version", "run_ts", "target_rate_msg_s",
                        "publish_rate_msg_s"]


def render_comparison(rows: list[dict[str, Any]], title: str = "brokerbench comparison",
                      excluded: dict[str, int] | None = None) -> str:
    """The comparison page (template ``templates/compare.html.j2``) of ok history rows."""
    left_out = ""
    if excluded:
        left_out = (" Left out: " + ", ".join(f"{n} {k} row(s)" for k, n in sorted(excluded.items()))
                    + " (status not ok: an invalid measurement or an incomplete result).")
    versions = []
    for (b, w, v, e), vrows in version_rows(rows).items():
        track = [r for r in rows if (r.get("broker"), r.get("workload"), r.get("variant"), r.get("environment"))
                 == (b, w, v, e)]
        charts = []
        for col, label in (("publish_latency_p99_ms", "p99 publish latency (ms)"),
                           ("e2e_latency_p99_ms", "p99 end-to-end latency (ms)")):
            series = []
            for key, name in series_keys(track).items():
                pts = sorted((str(r.get("run_ts")), float(r[col])) for r in track
                             if series_key(r) == key and isinstance(r.get(col), (int, float)))
                series.append((f"{b} {name}", [p[0] for p in pts], [p[1] for p in pts]))
            charts.append({"alt": f"{b} {label}",
                           "png": trend_chart_png(f"{b} {w} {v}: {label} by version", label, series)})
        versions.append({"broker": b, "workload": w, "variant": v, "environment": e, "rows": vrows,
                         "diffs": version_diffs(track), "charts": charts})
    brokers = []
    for (w, v, e), brows in side_by_side(rows).items():
        not_honoured = [str(r.get("broker")) for r in brows if r.get("durability_honoured") is False]
        brokers.append({"workload": w, "variant": v, "environment": e, "rows": brows,
                        "not_honoured": ", ".join(not_honoured)})
    return render("compare.html.j2", title=title, n_rows=len(rows), n_runs=len({r.get("run_key") for r in rows}),
                  generated=f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S}", left_out=left_out,
                  any_excluded=bool(excluded),
                  versions=versions, version_columns=VERSION_COLUMNS, brokers=brokers,
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
