"""The interactive charts (Plotly) of the run report and the comparison page: hover values, zoom, legend entries
that hide a line on click.

Each page embeds plotly.js once (:func:`plotly_js`, in one inline ``<script>``) and every figure as a
``<div>`` with its own small script (:func:`figure_html`), so the page works offline: nothing is fetched.

Every line belongs to one broker x variant (or broker version, or client library: :func:`version_figure`,
the comparison's metrics by broker version). A line whose measurement is not valid
(status ``invalid`` or ``partial``) is drawn dashed and faint, and its legend name says so, e.g.
``kafka/fsync-on (invalid)``: such a figure is shown, never taken for a valid one. Legends sit below the
plot area, never over the data.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from statistics import median
from typing import Any, Mapping, Sequence

import plotly.graph_objects as go
from markupsafe import Markup
from plotly.colors import qualitative
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from brokerbench.changepoint import version_key

#: line colours, one per broker x variant of a workload (the same in every chart of that workload)
PALETTE = qualitative.Plotly + qualitative.D3
#: the statuses drawn as not valid (dashed, faint, named in the legend)
MARKED = ("invalid", "partial")
#: how a line that is not valid is drawn
MARKED_DASH = "dash"
MARKED_OPACITY = 0.45
CHANGE_POINT_COLOUR = "#c62828"
#: the mode bar: zoom, pan, reset and download as PNG; no link to plotly.com
CONFIG = {"displaylogo": False, "responsive": True,
          "modeBarButtonsToRemove": ["lasso2d", "select2d", "autoScale2d"]}


@dataclass
class Line:
    """One line of a chart: its legend name, points and the status of the measurement it shows."""

    name: str
    x: Sequence[Any]
    y: Sequence[float]
    #: "ok", "invalid", "partial" or "" (unknown); invalid and partial lines are marked
    status: str = ""
    #: picks the colour from the chart's colour map (default: the name)
    colour_key: str = ""
    #: per point, extra hover text (e.g. a sweep step and whether it was stable)
    hover: Sequence[str] | None = None
    #: per point, a marker symbol (e.g. "x" for an unstable sweep step)
    symbols: Sequence[str] | None = None
    dash: str = "solid"
    #: extra plotly trace settings
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def marked(self) -> bool:
        return self.status in MARKED

    @property
    def legend_name(self) -> str:
        return f"{self.name} ({self.status})" if self.marked else self.name


def plotly_js() -> Markup:
    """plotly.js itself (about 4.8 MB), for one inline ``<script>`` per page."""
    return Markup(get_plotlyjs())


def figure_html(fig: go.Figure, div_id: str) -> Markup:
    """One figure as a ``<div>`` and the script that draws it (plotly.js must already be on the page).
    Plotly writes ``<`` in the figure's JSON as ``\\u003c``: text from the run cannot end the script."""
    return Markup(fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=CONFIG))


def colour_map(keys: Sequence[str]) -> dict[str, str]:
    """A colour per key, in sorted order, so a broker x variant has one colour in every chart."""
    return {key: PALETTE[i % len(PALETTE)] for i, key in enumerate(sorted(set(keys)))}


def _layout(fig: go.Figure, title: str, x_title: str | None = None, y_title: str | None = None,
            height: int = 380) -> None:
    fig.update_layout(
        template="plotly_white", height=height, title={"text": title, "font": {"size": 14}, "x": 0.01},
        margin={"l": 60, "r": 20, "t": 45, "b": 10}, hovermode="closest",
        # below the plot area (under the x axis title), left aligned; it wraps onto more rows as needed
        legend={"orientation": "h", "yanchor": "top", "y": -0.2, "xanchor": "left", "x": 0, "font": {"size": 11}},
    )
    if x_title is not None:
        fig.update_xaxes(title_text=x_title)
    if y_title is not None:
        fig.update_yaxes(title_text=y_title)


def _trace(line: Line, colours: Mapping[str, str], x_title: str, y_title: str, y_format: str = ",.4~g",
           **kw: Any) -> go.Scatter:
    colour = colours.get(line.colour_key or line.name)
    hover = "<b>%{fullData.name}</b><br>" + f"{x_title}: %{{x}}<br>{y_title}: %{{y:{y_format}}}"
    if line.hover is not None:
        hover += "<br>%{text}"
    marker: dict[str, Any] = {"size": 6, "color": colour}
    if line.symbols is not None:
        marker["symbol"] = list(line.symbols)
        marker["size"] = 9
    return go.Scatter(
        x=list(line.x), y=list(line.y), name=line.legend_name, mode="lines+markers",
        text=list(line.hover) if line.hover is not None else None,
        line={"color": colour, "width": 2, "dash": MARKED_DASH if line.marked else line.dash},
        marker=marker, opacity=MARKED_OPACITY if line.marked else 1.0,
        hovertemplate=hover + "<extra></extra>", **line.extra, **kw)


def _no_data(fig: go.Figure) -> None:
    fig.add_annotation(text="no data", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)


def line_figure(title: str, x_title: str, y_title: str, lines: Sequence[Line], colours: Mapping[str, str],
                log_x: bool = False, log_y: bool = False, zero_y: bool = True) -> go.Figure:
    """A line chart, one line per :class:`Line`; the y axis starts at 0 unless it is logarithmic."""
    fig = go.Figure([_trace(line, colours, x_title, y_title) for line in lines])
    _layout(fig, title, x_title, y_title)
    xs = [float(x) for line in lines for x in line.x]
    ys = [float(y) for line in lines for y in line.y]
    if log_x:
        fig.update_xaxes(type="log", **_log_ticks(xs))
    if log_y:
        fig.update_yaxes(type="log", **_log_ticks(ys))
    elif zero_y:
        fig.update_yaxes(rangemode="tozero")
    if not lines:
        _no_data(fig)
    return fig


def percentile_axis(p: float) -> float:
    """x position of percentile p on a log-scale percentile axis: -log10(1 - p/100)."""
    return -math.log10(max(1e-7, 1.0 - p / 100.0))


#: percentile ticks of quantile charts
PERCENTILE_TICKS = [0.0, 50.0, 90.0, 99.0, 99.9, 99.99, 99.999]


def quantile_figure(title: str, y_title: str, curves: Sequence[Line], colours: Mapping[str, str]) -> go.Figure:
    """Latency at each percentile, on a percentile axis where each tick is one more nine (x of a curve: the
    percentiles; the maximum, 100, has no place on this axis and is left out)."""
    lines, top = [], 0.0
    for c in curves:
        pts = sorted((float(p), float(v)) for p, v in zip(c.x, c.y) if float(p) < 100)
        if not pts:
            continue
        xs = [percentile_axis(p) for p, _ in pts]
        top = max(top, max(xs))
        lines.append(Line(c.name, xs, [v for _, v in pts], c.status, c.colour_key,
                          hover=[f"percentile {p:g}" for p, _ in pts]))
    fig = go.Figure([_trace(line, colours, "position", y_title) for line in lines])
    # the hover shows the percentile, not its position on the axis
    fig.update_traces(hovertemplate="<b>%{fullData.name}</b><br>%{text}<br>" + y_title + ": %{y:,.4~g}<extra></extra>")
    _layout(fig, title, "percentile (log scale: each tick one more nine)", y_title)
    ticks = [t for t in PERCENTILE_TICKS if percentile_axis(t) <= top + 1e-9] or [0.0]
    fig.update_xaxes(tickvals=[percentile_axis(t) for t in ticks], ticktext=[f"{t:g}" for t in ticks])
    fig.update_yaxes(rangemode="tozero")
    if not lines:
        _no_data(fig)
    return fig


def latency_vs_throughput_figure(title: str, lines: Sequence[Line], colours: Mapping[str, str]) -> go.Figure:
    """A throughput sweep: p99 publish latency (y) at each step's achieved publish rate (x), one line per
    broker x variant. Both axes are logarithmic when their values span a factor of 10 or more (a sweep's
    rates usually do; latency rises steeply near saturation)."""
    xs = [float(x) for line in lines for x in line.x]
    ys = [float(y) for line in lines for y in line.y]
    return line_figure(title, "achieved publish rate (msg/s)", "publish latency p99 (ms)", lines, colours,
                       log_x=_spans_a_decade(xs), log_y=_spans_a_decade(ys))


def _log_ticks(values: Sequence[float]) -> dict[str, Any]:
    """Ticks of a log axis at 1, 2 and 5 times a power of ten, labelled as plain numbers (1,000 not 1k), the
    unlabelled minor digits Plotly would draw left out."""
    positive = [v for v in values if v > 0]
    if not positive:
        return {}
    lo, hi = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
    ticks = [m * 10.0 ** e for e in range(lo, hi + 1) for m in (1, 2, 5)]
    ticks = [t for t in ticks if min(positive) / 2 <= t <= max(positive) * 2]
    return {"tickvals": ticks, "ticktext": [f"{t:,.0f}" if t >= 1 else f"{t:g}" for t in ticks]}


def _spans_a_decade(values: Sequence[float]) -> bool:
    positive = [v for v in values if v > 0]
    return bool(positive) and len(positive) == len(values) and max(positive) >= 10 * min(positive)


def run_times(values: Sequence[Any]) -> list[_dt.datetime | None]:
    """Run timestamps (ISO text) as naive UTC datetimes; None where one cannot be read."""
    out: list[_dt.datetime | None] = []
    for value in values:
        try:
            t = _dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            out.append(None)
            continue
        out.append(t if t.tzinfo is None else t.astimezone(_dt.timezone.utc).replace(tzinfo=None))
    return out


def time_range(times: Sequence[_dt.datetime]) -> tuple[_dt.datetime, _dt.datetime] | None:
    """The x range of a trend: the runs plus 5 % each side, at least a day (one run never spans years)."""
    if not times:
        return None
    lo, hi = min(times), max(times)
    pad = max((hi - lo) * 0.05, _dt.timedelta(hours=12) if hi - lo < _dt.timedelta(days=1) else _dt.timedelta(0))
    return lo - pad, hi + pad


def series_key(row: dict[str, Any]) -> tuple[str, str]:
    """The line of a trend a history row belongs to: its broker version and client library (runs of one library
    are never compared with another's, as in the verdicts' baselines)."""
    return str(row.get("broker_version")), str(row.get("client_library") or "")


def series_keys(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """Each line of a track's trend and its legend name: the version, with the client library when the track
    has runs of more than one."""
    keys = sorted({series_key(r) for r in rows})
    several = len({lib for _, lib in keys}) > 1
    return {(v, lib): f"{v} ({lib})" if several and lib else v for v, lib in keys}


@dataclass
class Panel:
    """One metric of a track's trend: a line per broker version over run time, the change points found."""

    y_title: str
    #: (broker version, run times as ISO text, values)
    series: Sequence[tuple[str, Sequence[str], Sequence[float]]]
    #: (run time as ISO text, label such as "+50 %")
    changes: Sequence[tuple[str, str]] = ()
    log_y: bool = False


@dataclass
class VersionRuns:
    """One line of a by-version chart: the runs of a track through one client library, each at its version."""

    name: str
    #: (broker version, value, hover text) of each run
    runs: Sequence[tuple[str, float, str]]


def version_figure(title: str, y_title: str, versions: Sequence[str], lines: Sequence[VersionRuns],
                   log_y: bool = False) -> go.Figure:
    """A metric by broker version: the x axis the versions in the order given (older to newer), evenly spaced
    whenever each was measured; each run a small point (spread a little around its version, so runs of one
    version never hide each other; the hover names the run), and per line a line through each version's median
    of runs. Latency on a log axis when asked (and every value is positive)."""
    index = {v: i for i, v in enumerate(versions)}
    colours = colour_map([line.name for line in lines])
    fig = go.Figure()
    values: list[float] = []
    for line in lines:
        by_version: dict[str, list[tuple[float, str]]] = {}
        for version, value, hover in line.runs:
            if version in index:
                by_version.setdefault(version, []).append((float(value), hover))
        if not by_version:
            continue
        xs, ys, texts = [], [], []
        for version, runs in by_version.items():
            n = len(runs)
            for k, (value, hover) in enumerate(runs):
                xs.append(index[version] + (0.0 if n == 1 else 0.24 * (k / (n - 1) - 0.5)))
                ys.append(value)
                texts.append(f"{version}: {hover}")
        values += ys
        colour = colours[line.name]
        fig.add_trace(go.Scatter(
            x=xs, y=ys, text=texts, name=f"{line.name}: runs", legendgroup=line.name, mode="markers",
            marker={"size": 6, "color": colour, "opacity": 0.55},
            hovertemplate="<b>%{fullData.name}</b><br>%{text}<br>" + y_title + ": %{y:,.4~g}<extra></extra>"))
        medians = sorted((index[v], median([value for value, _ in runs]), v, len(runs))
                         for v, runs in by_version.items())
        fig.add_trace(go.Scatter(
            x=[m[0] for m in medians], y=[m[1] for m in medians], name=f"{line.name}: median of runs",
            legendgroup=line.name, mode="lines+markers", text=[f"{m[2]}: median of {m[3]} run(s)" for m in medians],
            line={"color": colour, "width": 2}, marker={"size": 9, "color": colour, "symbol": "diamond"},
            hovertemplate="<b>%{fullData.name}</b><br>%{text}<br>" + y_title + ": %{y:,.4~g}<extra></extra>"))
    _layout(fig, title, "broker version (older → newer)", y_title)
    fig.update_xaxes(tickvals=list(range(len(versions))), ticktext=list(versions),
                     range=[-0.5, max(len(versions), 1) - 0.5], showgrid=False)
    if log_y and values and all(v > 0 for v in values):
        fig.update_yaxes(type="log", **_log_ticks(values))
    else:
        fig.update_yaxes(rangemode="tozero")
    if not values:
        _no_data(fig)
    return fig


def track_figure(title: str, panels: Sequence[Panel]) -> go.Figure:
    """Small multiples of one track, one panel per metric over a shared run-time axis; change points as red
    dashed vertical lines labelled with their size; latency panels on a log axis (so one spiking run does not
    flatten the others)."""
    n = max(1, len(panels))
    fig = make_subplots(rows=n, cols=1, shared_xaxes=True, vertical_spacing=0.06)
    versions = sorted({name for p in panels for name, _, _ in p.series}, key=version_key)  # legend: older first
    colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(versions)}
    drawn: list[_dt.datetime] = []
    for row, panel in enumerate(panels, start=1):
        values: list[float] = []
        for name, xs, ys in panel.series:
            pts = sorted((t, float(y)) for t, y in zip(run_times(xs), ys) if t is not None and y is not None)
            if not pts:
                continue
            drawn += [t for t, _ in pts]
            values += [y for _, y in pts]
            fig.add_trace(go.Scatter(
                x=[t for t, _ in pts], y=[y for _, y in pts], name=name, legendgroup=name, showlegend=row == 1,
                mode="lines+markers", line={"color": colours[name], "width": 1.5}, marker={"size": 6},
                hovertemplate=f"<b>%{{fullData.name}}</b><br>run %{{x}}<br>{panel.y_title}: %{{y:,.4~g}}<extra></extra>"),
                row=row, col=1)
        for when, label in panel.changes:
            t = run_times([when])[0]
            if t is None:
                continue
            fig.add_vline(x=t, line={"color": CHANGE_POINT_COLOUR, "dash": "dash", "width": 1.2}, row=row, col=1)
            fig.add_annotation(x=t, y=1, yref="y domain", text=label, showarrow=False, xanchor="left",
                               yanchor="top", font={"size": 10, "color": CHANGE_POINT_COLOUR}, row=row, col=1)
        fig.update_yaxes(title_text=panel.y_title, title_font={"size": 10}, row=row, col=1)
        if panel.log_y and values and all(v > 0 for v in values):
            fig.update_yaxes(type="log", row=row, col=1)
        else:
            fig.update_yaxes(rangemode="tozero", row=row, col=1)
    x_range = time_range(drawn)
    if x_range is not None:
        fig.update_xaxes(range=list(x_range))
    fig.update_xaxes(title_text="run time (UTC)", row=n, col=1)
    height = 130 + 150 * n
    _layout(fig, title, height=height)
    # below the x axis title: about 70 px under the plot area, whatever the number of panels
    fig.update_layout(legend={"y": -70 / (height - 100)}, legend_title_text="broker version")
    if not drawn:
        _no_data(fig)
    return fig
