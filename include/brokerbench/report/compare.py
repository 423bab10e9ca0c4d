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

from .charts import trend_chart_png
from .html import CSS, esc, format_value, header_cell

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


def _table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    head = "".join(header_cell(c) for c in columns)
    body = []
    for r in rows:
        cells = []
        for c in columns:
            value = r.get(c)
            text = esc(format_value(value))
            if c == "broker" and r.get("durability_honoured") is False:
                text += ' <span class="marker">&#9888; durability not honoured</span>'
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            cells.append(f'<td class="num">{text}</td>' if numeric else f"<td>{text}</td>")
        cls = ' class="not-honoured"' if r.get("durability_honoured") is False else ""
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


DIFF_CLASS = {"significantly worse": "verdict bad", "significantly better": "verdict good",
              "not significant": "", "too few runs": "verdict meta"}


def version_diff_table(rows: list[dict[str, Any]]) -> str:
    """Each version against the previous one (by first run time), per metric, labelled by the t test on log
    values (p <= alpha and at least the metric's minimum effect); significant differences first."""
    diffs = compare_versions(rows)
    if not diffs:
        return "<p class='meta'>One broker version only: no version difference to test.</p>"
    order = {"significantly worse": 0, "significantly better": 1, "not significant": 2, "too few runs": 3}
    diffs.sort(key=lambda d: (order.get(d.label, 4), d.version_a, d.version_b))
    body = []
    for d in diffs:
        cells = [d.version_a + " \u2192 " + d.version_b, d.metric, f"{d.runs_a} / {d.runs_b}",
                 format_value(d.median_a), format_value(d.median_b),
                 "–" if d.change_percent is None else f"{d.change_percent:+.1f} %",
                 "–" if d.p_value is None else f"{d.p_value:.2g}", d.label]
        body.append(f"<tr class='{DIFF_CLASS.get(d.label, '')}'>" + "".join(
            f"<td>{'<strong>' + esc(c) + '</strong>' if i == 7 else esc(c)}</td>" for i, c in enumerate(cells))
            + "</tr>")
    n_sig = sum(d.label.startswith("significantly") for d in diffs)
    return ("<details open><summary>Version differences: " + esc(f"{n_sig} significant of {len(diffs)} "
            "(each version against the one measured before it; t test on log values of the runs, p <= 0.01 and "
            "the metric's minimum effect, as for change points)") + "</summary><div class='scroll'>"
            "<table class='versions'><thead><tr><th>versions</th><th>metric</th><th>runs</th><th>median before</th>"
            "<th>median after</th><th>change</th><th>p</th><th>label</th></tr></thead><tbody>"
            + "".join(body) + "</tbody></table></div></details>")


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


def render_comparison(rows: list[dict[str, Any]], title: str = "brokerbench comparison",
                      excluded: dict[str, int] | None = None) -> str:
    versions = version_rows(rows)
    brokers = side_by_side(rows)
    left_out = ""
    if excluded:
        left_out = (" Left out: " + ", ".join(f"{n} {k} row(s)" for k, n in sorted(excluded.items()))
                    + " (status not ok: an invalid measurement or an incomplete result).")
    parts = [f"<h1>{esc(title)}</h1>",
             f"<p class='meta'>{len(rows)} history rows of {len({r.get('run_key') for r in rows})} runs "
             f"(status ok); generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} UTC. Each figure of a run is a "
             f"percentile of that run's merged histograms; 'median over runs' is the median of run results."
             f"{esc(left_out)}</p>",
             "<h2>Versions of one broker</h2>"]
    if not versions:
        parts.append("<p>No valid history yet: every row in the history was left out (above).</p>" if excluded
                     else "<p>No history yet.</p>")
    for (b, w, v, e), vrows in versions.items():
        parts.append(f"<h3>{esc(b)} — {esc(w)} — {esc(v)} — {esc(e)}</h3>")
        cols = ["broker_version", "broker_implementation", "runs", "run_ts", "publish_rate_msg_s",
                *[f"publish_latency_{s}_ms" for s in STATS], *[f"e2e_latency_{s}_ms" for s in STATS],
                "median_over_runs_publish_latency_p99_ms", "median_over_runs_e2e_latency_p99_ms"]
        parts.append(_table(vrows, cols))
        parts.append(version_diff_table([r for r in rows if (r.get("broker"), r.get("workload"), r.get("variant"),
                                                            r.get("environment")) == (b, w, v, e)]))
        track = [r for r in rows if (r.get("broker"), r.get("workload"), r.get("variant"), r.get("environment"))
                 == (b, w, v, e)]
        for col, label in (("publish_latency_p99_ms", "p99 publish latency (ms)"),
                           ("e2e_latency_p99_ms", "p99 end-to-end latency (ms)")):
            series = []
            for version in sorted({str(r.get("broker_version")) for r in track}):
                pts = sorted((str(r.get("run_ts")), r.get(col)) for r in track
                             if str(r.get("broker_version")) == version and isinstance(r.get(col), (int, float)))
                series.append((f"{b} {version}", [p[0] for p in pts], [p[1] for p in pts]))
            png = trend_chart_png(f"{b} {w} {v}: {label} by version", label, series)
            parts.append(f'<img class="chart" alt="{esc(b + " " + label)}" src="data:image/png;base64,{png}">')
    parts.append("<h2>Brokers side by side at the same durability level</h2>")
    for (w, v, e), brows in brokers.items():
        parts.append(f"<h3>{esc(w)} — variant {esc(v)} — {esc(e)}</h3>")
        not_honoured = [r.get("broker") for r in brows if r.get("durability_honoured") is False]
        if not_honoured:
            parts.append(f"<div class='warn'>&#9888; {esc(', '.join(map(str, not_honoured)))}: the implementation "
                         f"did not honour variant '{esc(v)}', so its figures are not at this durability level.</div>")
        ident = ["broker", "broker_implementation", "broker_version", "run_ts", "target_rate_msg_s",
                 "publish_rate_msg_s"]
        for prefix, label in LATENCY_TABLES:
            parts.append(f"<p>{esc(label)}</p>")
            parts.append(_table(brows, ident + [f"{prefix}_{s}_ms" for s in STATS]))
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n")


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
    everything = read_history(history_root)
    rows = _ok(everything, environment, brokers)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "comparison.html"
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(render_comparison(rows, excluded=excluded_rows(everything, environment, brokers)),
                   encoding="utf-8")
    tmp.replace(path)
    return path
