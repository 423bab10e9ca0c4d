"""What the brokers and hosts did during each measured phase, on the latency charts' time axis.

One figure per measured broker x variant (workload by workload): the phase's publish and end-to-end p99 on
top, then one panel per panel of the broker's catalog (include/metrics/<broker>.yaml: where Kafka's produce time
went, its parts stacked; Pulsar's broker against the bookie; RabbitMQ's sync time; GC pauses), then the
hosts' CPU and disk, every panel on one shared x axis (seconds since the first interval of the phase's
workers, as in the latency charts). Read from ``summary/brokermetrics.csv`` and
``summary/brokermetrics-panels.json`` (the Spark job's, from the scraper files' own catalog).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .figures import PALETTE, figure_html

#: the hosts' panels: (title, [(metric, legend name)])
HOST_PANELS = [("Hosts: CPU and disk busy (%)", [("host_cpu_percent", "CPU"), ("host_disk_util_percent", "disk busy")]),
               ("Hosts: disk written and network sent (MB/s)",
                [("host_disk_write_mb_per_s", "disk written"), ("host_net_tx_mb_per_s", "network sent")])]
#: the latencies drawn on top: (timeseries.csv column, legend name)
LATENCY_LINES = [("publish_latency_p99_ms", "publish p99"), ("e2e_latency_p99_ms", "end-to-end p99")]
PANEL_HEIGHT_PX = 190
#: a trial's workload id (``<workload>.trial<k>``; side B of an A/B run: ``<workload>.B.trial<k>``)
TRIAL = re.compile(r"^(?P<base>.+?)(?:\.(?P<side>B))?\.trial(?P<k>\d+)$")


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f else None


def _series(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(metric, target) -> [(t_s, value)] sorted by time."""
    out: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        t, v = _num(r.get("t_s")), _num(r.get("value"))
        if t is not None and v is not None:
            out[(str(r.get("metric")), str(r.get("target")))].append((t, v))
    for pts in out.values():
        pts.sort()
    return out


def combo_figure(title: str, latency_rows: Sequence[Mapping[str, Any]],
                 metric_rows: Sequence[Mapping[str, Any]], catalog: Mapping[str, Any]) -> go.Figure | None:
    """The figure of one broker x variant's measured phase; None when it has no broker or host series."""
    series = _series(metric_rows)
    if not series:
        return None
    metrics: dict[str, dict] = catalog.get("metrics", {})
    panels: list[tuple[str, bool, list[tuple[str, str]]]] = []
    for p in catalog.get("panels", []):
        ids = [(mid, m.get("title", mid)) for mid, m in metrics.items() if m.get("panel") == p["id"]]
        if any(mid == key[0] for mid, _ in ids for key in series):
            panels.append((p["title"], bool(p.get("stacked")), ids))
    panels += [(t, False, ids) for t, ids in HOST_PANELS if any(mid == k[0] for mid, _ in ids for k in series)]
    rows = 1 + len(panels)
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.35 / rows,
                        subplot_titles=["Latency p99 (ms), the workers'"] + [p[0] for p in panels])
    for i, (column, name) in enumerate(LATENCY_LINES):
        pts = sorted((t, v) for t, v in ((_num(r.get("interval_start_s")), _num(r.get(column)))
                                         for r in latency_rows) if t is not None and v is not None)
        if pts:
            fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], name=name, mode="lines",
                                     line={"color": PALETTE[i]}, legendgroup="latency"), row=1, col=1)
    colour = 2
    for row, (_, stacked, ids) in enumerate(panels, start=2):
        for mid, label in ids:
            for (metric, target), pts in sorted(series.items()):
                if metric != mid:
                    continue
                unit = (metrics.get(mid) or {}).get("unit") or ("%" if mid.endswith("_percent") else "")
                name = f"{label} ({target})" if "@" in target else label
                fig.add_trace(go.Scatter(
                    x=[p[0] for p in pts], y=[p[1] for p in pts], name=name, mode="lines",
                    line={"color": PALETTE[colour % len(PALETTE)]}, hovertemplate=f"%{{y:.4g}} {unit}<extra>{name}</extra>",
                    **({"stackgroup": "parts"} if stacked else {})), row=row, col=1)
                colour += 1
    fig.update_layout(title={"text": title}, height=PANEL_HEIGHT_PX * rows + 120, template="plotly_white",
                      margin={"l": 60, "r": 20, "t": 70, "b": 40}, legend={"orientation": "h", "y": -0.04},
                      hovermode="x unified")
    fig.update_xaxes(title_text="time since start of measured phase (s)", row=rows, col=1)
    return fig


def broker_panels_section(timeseries: Sequence[Mapping[str, Any]], metric_rows: Sequence[Mapping[str, Any]],
                          catalogs: Mapping[str, Any], label) -> list[dict[str, Any]] | None:
    """Per workload: {"workload", "charts": [{"title", "html"}]}, one chart per broker x variant measured; None
    when the run has no broker or host series (older runs, or no scraper ran)."""
    measured = [r for r in metric_rows if r.get("phase") in ("measure", "sweep")]
    if not measured:
        return None
    by_combo: dict[tuple, list] = defaultdict(list)
    for r in measured:
        by_combo[(r.get("workload"), r.get("broker"), r.get("driver"), r.get("variant"))].append(r)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    trials: dict[str, int] = defaultdict(int)
    two_sides = set()  # the workloads of an A/B run
    for key in by_combo:
        m = TRIAL.match(str(key[0]))
        if m:
            trials[m.group("base")] = max(trials[m.group("base")], int(m.group("k")))
            if m.group("side"):
                two_sides.add(m.group("base"))
    for n, (key, rows) in enumerate(sorted(by_combo.items(), key=lambda kv: tuple(str(k) for k in kv[0]))):
        workload, broker, driver, variant = key
        m = TRIAL.match(str(workload))
        if m and m.group("k") != "1":
            continue  # trials (and an A/B run's two sides): the first trial of each side, side by side
        section = m.group("base") if m else str(workload)
        lat = [r for r in timeseries if (r.get("workload"), r.get("broker"), r.get("driver"), r.get("variant")) == key]
        name = label({"workload": workload, "broker": broker, "driver": driver, "variant": variant})
        if m:
            name = (f"side {m.group('side') or 'A'}: " if section in two_sides else "") + \
                f"{name} (trial 1 of {trials[section]})"
        fig = combo_figure(f"{name}: what the broker and hosts did", lat, rows,
                           catalogs.get(str(broker), {}))
        if fig is not None:
            out[section].append({"title": name, "html": figure_html(fig, f"bm{n}")})
    return [{"workload": w, "charts": charts, "wide": w not in trials} for w, charts in sorted(out.items())] or None


