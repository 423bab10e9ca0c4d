"""Time-series charts as base64 PNG (matplotlib, Agg canvas, no pyplot state)."""

from __future__ import annotations

import base64
import io
from typing import Any, Callable, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

Series = tuple[str, list[float], list[float]]  # label, x (s), y


def series_by_combo(
    timeseries: Sequence[dict[str, Any]],
    workload: str,
    column: str,
    label: Callable[[dict[str, Any]], str],
) -> list[Series]:
    """One series per broker x variant (x driver) of one workload, sorted by time.

    Drain intervals (a fraction of a second after the last send, with the
    in-flight messages only) are left out: a rate or percentile over them
    would be a point of a different kind.
    """
    groups: dict[str, list[tuple[float, float]]] = {}
    for row in timeseries:
        if row.get("workload") != workload or row.get("drain_interval") is True:
            continue
        x, y = row.get("interval_start_s"), row.get(column)
        if not isinstance(x, (int, float)) or not isinstance(y, (int, float)) or isinstance(y, bool):
            continue
        groups.setdefault(label(row), []).append((float(x), float(y)))
    out = []
    for name in sorted(groups):
        points = sorted(groups[name])
        out.append((name, [p[0] for p in points], [p[1] for p in points]))
    return out


def _new_chart():
    """A figure of the report's size with one axes (Agg canvas, no display)."""
    fig = Figure(figsize=(8.0, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def _finish(fig, ax, title: str, x_label: str, y_label: str, has_data: bool, legend_loc: str = "best") -> str:
    """Titles, labels, grid and legend (or "no data"); the chart as base64-encoded PNG."""
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if has_data:
        ax.legend(fontsize=8, loc=legend_loc)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def line_chart_png(
    title: str,
    y_label: str,
    series: Sequence[Series],
    dashed: Sequence[Series] = (),
    solid_suffix: str = "",
    dashed_suffix: str = "",
) -> str:
    """A line chart as base64-encoded PNG.

    ``dashed`` series are drawn dashed in the colour of the solid series of
    the same name; the suffixes tell the two apart in the legend.
    """
    fig, ax = _new_chart()
    colours: dict[str, Any] = {}
    for name, x, y in series:
        (line,) = ax.plot(x, y, marker="o", markersize=3, linewidth=1.5, label=name + solid_suffix)
        colours[name] = line.get_color()
    for name, x, y in dashed:
        ax.plot(x, y, linestyle="--", linewidth=1.2, color=colours.get(name), label=name + dashed_suffix)
    return _finish(fig, ax, title, "time since start of measured phase (s)", y_label, bool(series or dashed))


def percentile_axis(p: float) -> float:
    """x position of percentile p on a log-scale percentile axis: -log10(1 - p/100)."""
    import math

    return -math.log10(max(1e-7, 1.0 - p / 100.0))


#: percentile ticks of quantile charts
PERCENTILE_TICKS = [0.0, 50.0, 90.0, 99.0, 99.9, 99.99, 99.999]


def quantile_chart_png(title: str, y_label: str, curves: Sequence[tuple[str, dict[float, float]]]) -> str:
    """Latency quantile curves (value at each percentile) with a log-scale percentile axis.

    ``curves``: (label, {percentile: value}); the maximum (100) is left out
    (it has no position on this axis).
    """
    fig, ax = _new_chart()
    top = 0.0
    for name, points in curves:
        pts = sorted((p, v) for p, v in points.items() if p < 100 and v is not None)
        if not pts:
            continue
        xs = [percentile_axis(p) for p, _ in pts]
        top = max(top, max(xs))
        ax.plot(xs, [v for _, v in pts], marker="o", markersize=3, linewidth=1.5, label=name)
    ticks = [t for t in PERCENTILE_TICKS if percentile_axis(t) <= top + 1e-9] or [0.0]
    ax.set_xticks([percentile_axis(t) for t in ticks])
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    return _finish(fig, ax, title, "percentile (log scale: each tick one more nine)", y_label, bool(curves),
                   legend_loc="upper left")


def trend_chart_png(title: str, y_label: str, series: Sequence[tuple[str, list[str], list[float]]],
                    highlight: str | None = None) -> str:
    """Values over runs (x = run date/time text, in order), one line per series (e.g. broker version)."""
    import datetime as _dt

    fig, ax = _new_chart()
    for name, xs, ys in series:
        times = []
        for x in xs:
            try:
                times.append(_dt.datetime.fromisoformat(str(x).replace("Z", "+00:00")))
            except ValueError:
                times.append(None)
        pts = [(t, y) for t, y in zip(times, ys) if t is not None and y is not None]
        if not pts:
            continue
        pts.sort(key=lambda p: p[0])
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=4, linewidth=1.5,
                label=name + (" (this run's track)" if name == highlight else ""))
    if series:
        fig.autofmt_xdate()
    return _finish(fig, ax, title, "run time (UTC)", y_label, bool(series))
