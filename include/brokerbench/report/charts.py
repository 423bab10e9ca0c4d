"""Chart data: the run report's time series per broker x variant (its charts are Plotly figures, drawn by
:mod:`brokerbench.report.figures`, as the comparison's are).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

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
