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
    """One series per broker x variant (x driver) of one workload, sorted by time."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for row in timeseries:
        if row.get("workload") != workload:
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
    fig = Figure(figsize=(8.0, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    colours: dict[str, Any] = {}
    for name, x, y in series:
        (line,) = ax.plot(x, y, marker="o", markersize=3, linewidth=1.5, label=name + solid_suffix)
        colours[name] = line.get_color()
    for name, x, y in dashed:
        ax.plot(x, y, linestyle="--", linewidth=1.2, color=colours.get(name), label=name + dashed_suffix)
    ax.set_title(title, fontsize=11)
    ax.set_xlabel("time since start of measured phase (s)")
    ax.set_ylabel(y_label)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if series or dashed:
        ax.legend(fontsize=8, loc="best")
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")
