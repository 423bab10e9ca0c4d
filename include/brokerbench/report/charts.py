"""Time-series charts as base64 PNG (matplotlib, Agg canvas, no pyplot state)."""

from __future__ import annotations

import base64
import datetime as _dt
import io
import math
from typing import Any, Callable, Sequence

import matplotlib.dates as mdates
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator

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


def _finish(fig, ax, title: str, x_label: str, y_label: str, has_data: bool, legend_loc: str = "best") -> str:
    """Titles, labels, grid and legend (or "no data"); the chart as base64-encoded PNG."""
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    _legend_or_no_data(ax, has_data, legend_loc)
    return _png(fig)


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


def _times(xs: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for x in xs:
        try:
            t = _dt.datetime.fromisoformat(str(x).replace("Z", "+00:00"))
            out.append(t.replace(tzinfo=None) if t.tzinfo is None else t.astimezone(_dt.timezone.utc).replace(tzinfo=None))
        except ValueError:
            out.append(None)
    return out


def time_axis(ax, times: Sequence[Any]) -> None:
    """A run-time x axis that spans the runs (at least a day: one run never stretches it over years)."""
    times = [t for t in times if t is not None]
    if not times:
        return
    lo, hi = min(times), max(times)
    pad = max((hi - lo) * 0.05, _dt.timedelta(hours=12) if hi - lo < _dt.timedelta(days=1) else _dt.timedelta(0))
    ax.set_xlim(lo - pad, hi + pad)
    locator = mdates.AutoDateLocator(minticks=3, maxticks=7)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))


#: a trend panel: (y label, [(name, x run times, y values)], [(run time, label)] change points, log y axis)
Panel = tuple[str, Sequence[tuple[str, list[str], list[float]]], Sequence[tuple[str, str]], bool]


def _draw_panel(ax, y_label: str, series, changes, log_y: bool, highlight: str | None = None) -> list[Any]:
    drawn = []
    for name, xs, ys in series:
        pts = sorted((t, y) for t, y in zip(_times(xs), ys) if t is not None and y is not None)
        if not pts:
            continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3.5, linewidth=1.3,
                label=name + (" (this run's track)" if name == highlight else ""))
        drawn += [p[0] for p in pts]
    for when, label in changes:
        t = _times([when])[0]
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


def track_panels_png(title: str, panels: Sequence[Panel]) -> str:
    """Small multiples of one track: one panel per metric, sharing the run-time axis (latency panels on a
    log axis, so one spiking run does not flatten the others)."""
    fig = Figure(figsize=(8.0, 1.2 + 1.55 * max(1, len(panels))), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(max(1, len(panels)), 1, sharex=True, squeeze=False)[:, 0]
    drawn: list[Any] = []
    for ax, (y_label, series, changes, log_y) in zip(axes, panels):
        drawn += _draw_panel(ax, y_label, series, changes, log_y)
    time_axis(axes[-1], drawn)
    names = {name for _, series, _, _ in panels for name, _, _ in series}
    if len(names) > 1:
        axes[0].legend(fontsize=7, loc="best")
    if not drawn:
        axes[0].text(0.5, 0.5, "no data", ha="center", va="center", transform=axes[0].transAxes)
    axes[-1].set_xlabel("run time (UTC)", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return _png(fig)
