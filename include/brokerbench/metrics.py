"""The metrics brokerbench judges, the verdicts it gives them and how a figure is read from a row.

A leaf module: ``regression``, ``changepoint``, ``trials`` and ``report`` import it, it imports nothing of
brokerbench, so those modules never need each other for a definition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

#: which way a metric gets better: "lower" (latency) or "higher" (rates)
Direction = Literal["lower", "higher"]


class Judgement(StrEnum):
    """The verdict of one metric of one run against its track's history, as written in regression.json/csv.

    A run that could not be judged at all gets ``"not judged: <reason>"`` (``regression.not_judged``), so a
    verdict field holds one of these values or a text starting with :attr:`NOT_JUDGED`.
    """

    REGRESSED = "regressed"
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    INSUFFICIENT = "insufficient history"
    NO_DATA = "no data"
    NOT_JUDGED = "not judged"


#: the verdicts that compared a figure with a baseline
JUDGED = (Judgement.REGRESSED, Judgement.IMPROVED, Judgement.UNCHANGED)


@dataclass(frozen=True)
class Metric:
    column: str
    better: Direction
    #: relative threshold: a change smaller than this fraction of the baseline is never a verdict
    #: (the threshold rule's relative term and the change points' minimum effect)
    relative: float
    #: absolute floor in the column's unit: a smaller change is never a verdict
    floor: float


#: metrics judged, in report order; thresholds stated in docs/analytics.md
METRICS: tuple[Metric, ...] = (
    Metric("publish_rate_msg_s", "higher", 0.03, 0.0),
    Metric("consume_rate_msg_s", "higher", 0.03, 0.0),
    Metric("publish_latency_avg_ms", "lower", 0.05, 0.05),
    Metric("publish_latency_p50_ms", "lower", 0.05, 0.05),
    Metric("publish_latency_p99_ms", "lower", 0.08, 0.1),
    Metric("publish_latency_p999_ms", "lower", 0.12, 0.2),
    Metric("e2e_latency_avg_ms", "lower", 0.05, 0.05),
    Metric("e2e_latency_p50_ms", "lower", 0.05, 0.05),
    Metric("e2e_latency_p99_ms", "lower", 0.08, 0.1),
    Metric("e2e_latency_p999_ms", "lower", 0.12, 0.2),
    Metric("publish_delay_p99_us", "lower", 0.30, 100.0),
)


def number(value: Any) -> float | None:
    """A finite float from a row's field, or None (missing, not a number, infinite, NaN, a bool)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def unit_of(column: str) -> str:
    """The unit of a metric column, from its name (``_ms``, ``_us``, ``_msg_s``); "" when unknown."""
    for suffix, unit in (("_msg_s", "msg/s"), ("_ms", "ms"), ("_us", "µs")):
        if column.endswith(suffix):
            return unit
    return ""
