"""The report's trends: small multiples of each track's history (p99 publish and end-to-end latency, average
end-to-end latency, publish rate), one line per broker version and client library, change points marked."""

from __future__ import annotations

import re
from typing import Any, Sequence

from brokerbench.metrics import METRICS
from brokerbench.regression import track_changes

from .data import RunData, run_environment
from .figures import Panel, figure_html, series_key, series_keys, track_figure


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


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


def track_trends(data: RunData, only: set[tuple[str, str, str]] | None = None,
                 id_prefix: str = "trend") -> list[dict[str, Any]]:
    """Small multiples per broker / variant / workload (ok rows; one line per broker version and client library),
    change points of each line marked; latency panels on a log axis. One chart ({"title", "html"}) per track."""
    env = run_environment(data)
    rows = [r for r in data.history if (env is None or r.get("environment") in (env, None))
            and r.get("status") in (None, "ok")]
    tracks = sorted({(str(r.get("broker")), str(r.get("variant")), str(r.get("workload"))) for r in rows})
    parts = []
    for b, x, w in tracks:
        if only is not None and (b, x, w) not in only:
            continue
        t_rows = [r for r in rows if (str(r.get("broker")), str(r.get("variant")), str(r.get("workload"))) == (b, x, w)]
        keys = series_keys(t_rows)
        panels = []
        for column, y_label in TREND_METRICS:
            series, changes = [], []
            for key, name in keys.items():
                v_rows = sorted((r for r in t_rows if series_key(r) == key
                                 and isinstance(r.get(column), (int, float)) and not isinstance(r.get(column), bool)),
                                key=lambda r: str(r.get("run_ts")))
                if v_rows:
                    series.append((name, [str(r.get("run_ts")) for r in v_rows], [float(r[column]) for r in v_rows]))
                    changes += _changes_for(v_rows, column)
            log_y = TREND_LOG.get(column, False)
            panels.append(Panel(y_label.replace(" (", "<br>(") + (", log" if log_y else ""), series, changes, log_y))
        runs = len({r.get("run_key") for r in t_rows})
        if runs < 2:
            continue  # one point per panel draws nothing: trends_section says so in a line
        fig = track_figure(f"{b} / {x} / {w}: {runs} ok run(s)", panels)
        parts.append({"title": f"{w}: trend {b}/{x}: " + ", ".join(c for c, _ in TREND_METRICS),
                      "html": figure_html(fig, f"{id_prefix}-{_slug(f'{b}-{x}-{w}')}")})
    return parts


def trends_section(data: RunData) -> dict[str, Any] | None:
    if not data.history:
        return None
    env = run_environment(data)
    rows = [r for r in data.history if env is None or r.get("environment") in (env, None)]
    not_ok = {r.get("run_key") for r in rows if r.get("status") not in (None, "ok")}
    ok_runs = {r.get("run_key") for r in rows if r.get("status") in (None, "ok")}
    charts = track_trends(data)
    return {"ok_runs": len(ok_runs), "environment": env or "any", "not_ok": len(not_ok), "charts": charts,
            "waiting": None if charts else (f"{len(ok_runs)} ok run(s) of this run's tracks in the history: a "
                                            "trend is drawn once a track has two")}
