"""Chart data and the comparison report's trend charts as base64 PNG (matplotlib, Agg canvas, no pyplot state).

The run report draws its charts with Plotly (:mod:`brokerbench.report.figures`); :func:`series_by_combo` gives
them their time series.
"""

from __future__ import annotations

import base64
import io
from typing import Any, Callable, Sequence

import matplotlib.dates as mdates
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator

from .figures import run_times, time_range

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


def _legend_or_no_data(ax, has_data: bool, loc: str = "best", fontsize: int = 8) -> None:
    if has_data:
        ax.legend(fontsize=fontsize, loc=loc)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)


def _png(fig) -> str:
    """The laid-out figure as base64-encoded PNG."""
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def time_axis(ax, times: Sequence[Any]) -> None:
    """A run-time x axis that spans the runs (at least a day: one run never stretches it over years)."""
    span = time_range([t for t in times if t is not None])
    if span is None:
        return
    ax.set_xlim(*span)
    locator = mdates.AutoDateLocator(minticks=3, maxticks=7)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))


def _draw_panel(ax, y_label: str, series, changes, log_y: bool, highlight: str | None = None) -> list[Any]:
    drawn = []
    for name, xs, ys in series:
        pts = sorted((t, y) for t, y in zip(run_times(xs), ys) if t is not None and y is not None)
        if not pts:
            continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3.5, linewidth=1.3,
                label=name + (" (this run's track)" if name == highlight else ""))
        drawn += [p[0] for p in pts]
    for when, label in changes:
        t = run_times([when])[0]
        if t is None:
            continue
        ax.axvline(t, color="#c62828", linestyle="--", linewidth=1.2)
        ax.annotate(label, xy=(t, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -10),
                    textcoords="offset points", fontsize=7, color="#c62828", va="top")
    ax.set_ylabel(y_label, fontsize=8)
    ax.grid(True, alpha=0.3, which="both")
    if log_y and drawn and all(y > 0 for _, _, ys in series for y in ys if y is not None):
        ax.set_yscale("log")
        # plain numbers at evenly spread values (not 3.2 x 10^1), no unlabelled minor ticks
        ax.yaxis.set_major_locator(MaxNLocator(5))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        ax.yaxis.set_minor_locator(NullLocator())
    elif drawn:
        ax.set_ylim(bottom=0)
    return drawn


def trend_chart_png(title: str, y_label: str, series: Sequence[tuple[str, list[str], list[float]]],
                    highlight: str | None = None, changes: Sequence[tuple[str, str]] = (),
                    log_y: bool = False) -> str:
    """Values over runs (x = run time), one line per series (e.g. broker version); change points as red
    dashed lines; the time axis spans the runs (at least a day)."""
    fig, ax = _new_chart()
    drawn = _draw_panel(ax, y_label, series, changes, log_y, highlight)
    time_axis(ax, drawn)
    ax.set_title(title, fontsize=11)
    ax.set_xlabel("run time (UTC)")
    _legend_or_no_data(ax, bool(drawn))
    return _png(fig)
