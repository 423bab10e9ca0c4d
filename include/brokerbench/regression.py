"""Regression verdicts: one run's metrics against the history of its track.

Pure Python (no Airflow, no Spark, no numpy), so the rule is easy to read and
to test on synthetic histories. docs/analytics.md states the rule in words.

A *track* is broker x broker version x workload x variant x environment (and
the same target rate: a rate override is a different experiment). For every
metric of :data:`METRICS`:

1. **baseline** = the values of that metric in the last ``baseline_runs``
   (default 10) earlier runs of the track whose status is ``ok``;
   fewer than ``min_runs`` (default 3) -> verdict ``insufficient history``.
2. **centre** = median of the baseline; **spread** = 1.4826 x MAD (median
   absolute deviation from the median), a robust estimate of the standard
   deviation that one outlier run cannot inflate.
3. **threshold** = max(relative threshold x |centre|, k x spread, absolute
   floor) with per-metric relative threshold and floor, k = 3.
4. change = value - centre, signed so that positive = worse (latency up,
   rate down). change > threshold -> ``regressed``; change < -threshold ->
   ``improved``; otherwise ``unchanged``. A missing value -> ``no data``.

Validity: a row whose status is not ``ok`` (``invalid: <reasons>`` - the
measurement broke a validity rule of docs/results-format.md - or
``partial: ...``) is never part of a baseline, and is never judged itself:
it gets one verdict ``not judged: invalid (<reasons>)`` (or ``not judged:
partial (...)``) for all metrics, whose evidence names the rules that
produced it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import median
from typing import Any, Iterable, Mapping, Sequence

REGRESSED = "regressed"
IMPROVED = "improved"
UNCHANGED = "unchanged"
INSUFFICIENT = "insufficient history"
NO_DATA = "no data"
#: prefix of the verdict of a row that is not valid: "not judged: invalid (<reasons>)"
NOT_JUDGED = "not judged"
#: the metric name of that single verdict
ALL_METRICS = "(all metrics)"

#: the validity rules, by how their reason starts (spark_jobs/aggregate.py, worker/runner.py)
VALIDITY_RULES = (
    ("client-bound", "client-bound (the load generator limited the result)"),
    ("publish-delay", "publish delay above the schedule rule"),
    ("clock offset", "clock offset between hosts"),
    ("publish rate", "publish rate below target"),
    ("contended", "another brokerbench run on a host"),
    ("foreign load", "foreign load on a host"),
)

#: MAD x 1.4826 estimates the standard deviation of normally distributed values
MAD_TO_SIGMA = 1.4826

#: fields that identify a track (history columns)
TRACK = ("broker", "broker_version", "workload", "variant", "environment")


@dataclass(frozen=True)
class Metric:
    column: str
    #: "lower" = lower is better (latency), "higher" = higher is better (rates)
    better: str
    #: relative threshold: a change smaller than this fraction of the baseline is never a verdict
    relative: float
    #: absolute floor in the column's unit: a smaller change is never a verdict
    floor: float


#: metrics judged, in report order; thresholds stated in docs/analytics.md
METRICS: tuple[Metric, ...] = (
    Metric("publish_rate_msg_s", "higher", 0.05, 0.0),
    Metric("consume_rate_msg_s", "higher", 0.05, 0.0),
    Metric("publish_latency_avg_ms", "lower", 0.20, 0.05),
    Metric("publish_latency_p50_ms", "lower", 0.20, 0.05),
    Metric("publish_latency_p99_ms", "lower", 0.25, 0.1),
    Metric("publish_latency_p999_ms", "lower", 0.30, 0.2),
    Metric("e2e_latency_avg_ms", "lower", 0.20, 0.05),
    Metric("e2e_latency_p50_ms", "lower", 0.20, 0.05),
    Metric("e2e_latency_p99_ms", "lower", 0.25, 0.1),
    Metric("e2e_latency_p999_ms", "lower", 0.30, 0.2),
    Metric("publish_delay_p99_us", "lower", 0.50, 100.0),
)


@dataclass(frozen=True)
class Rule:
    min_runs: int = 3
    baseline_runs: int = 10
    k: float = 3.0
    metrics: tuple[Metric, ...] = METRICS


@dataclass
class Verdict:
    workload: str
    broker: str
    variant: str
    broker_version: str | None
    metric: str
    better: str
    verdict: str
    value: float | None
    baseline_median: float | None = None
    baseline_spread: float | None = None
    baseline_n: int = 0
    change: float | None = None
    change_percent: float | None = None
    threshold: float | None = None
    baseline_runs: list[str] = field(default_factory=list)
    evidence: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def robust_spread(values: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation from the median."""
    centre = median(values)
    return MAD_TO_SIGMA * median(abs(v - centre) for v in values)


def judge(value: Any, baseline: Sequence[Any], metric: Metric, rule: Rule = Rule()) -> dict[str, Any]:
    """The verdict of one value against baseline values (oldest first)."""
    v = _number(value)
    base = [b for b in (_number(x) for x in baseline) if b is not None][-rule.baseline_runs:]
    out: dict[str, Any] = {"value": v, "baseline_n": len(base)}
    if v is None:
        return {**out, "verdict": NO_DATA, "evidence": "this run has no value"}
    if len(base) < rule.min_runs:
        return {**out, "verdict": INSUFFICIENT,
                "evidence": f"{len(base)} earlier run(s) of this track, {rule.min_runs} needed"}
    centre = median(base)
    spread = robust_spread(base)
    threshold = max(metric.relative * abs(centre), rule.k * spread, metric.floor)
    change = v - centre
    worse = change if metric.better == "lower" else -change
    if worse > threshold:
        verdict = REGRESSED
    elif worse < -threshold:
        verdict = IMPROVED
    else:
        verdict = UNCHANGED
    pct = 100.0 * change / centre if centre else None
    which = ("relative" if threshold == metric.relative * abs(centre) else
             "noise" if threshold == rule.k * spread else "floor")
    evidence = (f"{v:.4g} vs median {centre:.4g} of {len(base)} runs "
                f"({'+' if change >= 0 else ''}{change:.4g}{'' if pct is None else f', {pct:+.1f} %'}); "
                f"threshold {threshold:.4g} = max({metric.relative:.0%} x median, {rule.k:g} x spread {spread:.4g}, "
                f"floor {metric.floor:g}) [{which}]")
    return {**out, "verdict": verdict, "baseline_median": centre, "baseline_spread": spread,
            "change": change, "change_percent": pct, "threshold": threshold, "evidence": evidence}


def is_valid(row: Mapping[str, Any]) -> bool:
    """True for a row that may be judged and may serve as a baseline: status ``ok``."""
    return row.get("status") == "ok"


def split_status(status: Any) -> tuple[str, str]:
    """("invalid" | "partial" | "ok" | ..., the rest) of a status value.

    A status ``partial: ... | invalid: ...`` (both) gives ("partial", the whole text after ``partial: ``).
    """
    text = "" if status is None else str(status)
    kind, _, rest = text.partition(": ")
    return (kind or "unknown"), rest


def validity_rules(reasons: str | None) -> list[str]:
    """The names of the validity rules that produced ``reasons`` ("; "-separated, each maybe
    prefixed ``worker <w>: ``), in :data:`VALIDITY_RULES` order."""
    found = set()
    for part in (reasons or "").split("; "):
        part = part.strip()
        if part.startswith("worker ") and ": " in part:
            part = part.split(": ", 1)[1]
        for prefix, name in VALIDITY_RULES:
            if part.startswith(prefix):
                found.add(name)
    return [name for _, name in VALIDITY_RULES if name in found]


def not_judged(row: Mapping[str, Any]) -> tuple[str, str]:
    """(verdict, evidence) of a row that is not valid."""
    kind, rest = split_status(row.get("status"))
    reasons = row.get("invalid_reasons") or (rest if kind == "invalid" else
                                             rest.partition(" | invalid: ")[2] or None)
    rules = validity_rules(reasons)
    verdict = f"{NOT_JUDGED}: {kind} ({rest})" if rest else f"{NOT_JUDGED}: {kind}"
    evidence = f"status {row.get('status')!s}: a row whose status is not ok is never judged nor a baseline"
    if rules:
        evidence += "; validity rule(s): " + ", ".join(rules)
    if kind == "partial":
        evidence += "; a worker's result file is incomplete"
    return verdict, evidence


def track_of(row: Mapping[str, Any]) -> tuple:
    return tuple(row.get(k) for k in TRACK) + (_number(row.get("target_rate_msg_s")),)


def _order_key(row: Mapping[str, Any]) -> tuple:
    return (str(row.get("run_ts") or ""), str(row.get("run_key") or ""))


def verdicts_for_run(
    current: Iterable[Mapping[str, Any]],
    history: Iterable[Mapping[str, Any]],
    rule: Rule = Rule(),
) -> list[Verdict]:
    """Verdicts for every row of the current run x metric.

    ``current``: the run's history rows (one per workload x broker x driver x
    variant, with ``run_key`` and ``run_ts``). ``history``: every history row
    (it may contain the current run's rows; they are never their own
    baseline). Baseline rows are earlier (``run_ts``) runs of the same track
    with status ``ok``. A current row whose status is not ``ok`` gets a
    single ``not judged: ...`` verdict (metric :data:`ALL_METRICS`).
    """
    history = list(history)
    out: list[Verdict] = []
    for row in sorted(current, key=lambda r: (str(r.get("workload")), str(r.get("broker")), str(r.get("variant")))):
        if not is_valid(row):
            verdict, evidence = not_judged(row)
            out.append(Verdict(
                workload=str(row.get("workload")), broker=str(row.get("broker")), variant=str(row.get("variant")),
                broker_version=row.get("broker_version"), metric=ALL_METRICS, better="", verdict=verdict,
                value=None, evidence=evidence))
            continue
        key = track_of(row)
        this_run = row.get("run_key")
        this_ts = str(row.get("run_ts") or "")
        earlier = [h for h in history
                   if track_of(h) == key and h.get("run_key") != this_run and str(h.get("run_ts") or "") < this_ts
                   and h.get("driver") == row.get("driver")]
        base_rows = sorted((h for h in earlier if is_valid(h)), key=_order_key)
        excluded = len({h.get("run_key") for h in earlier if not is_valid(h)})
        for metric in rule.metrics:
            usable = [h for h in base_rows if _number(h.get(metric.column)) is not None][-rule.baseline_runs:]
            j = judge(row.get(metric.column), [h.get(metric.column) for h in usable], metric, rule)
            if excluded:
                j["evidence"] += f"; {excluded} earlier run(s) of this track not ok (invalid or partial): not used"
            out.append(Verdict(
                workload=str(row.get("workload")), broker=str(row.get("broker")), variant=str(row.get("variant")),
                broker_version=row.get("broker_version"), metric=metric.column, better=metric.better,
                verdict=j["verdict"], value=j["value"], baseline_median=j.get("baseline_median"),
                baseline_spread=j.get("baseline_spread"), baseline_n=j["baseline_n"], change=j.get("change"),
                change_percent=j.get("change_percent"), threshold=j.get("threshold"),
                baseline_runs=[str(h.get("run_key")) for h in usable], evidence=j["evidence"],
            ))
    return out


def verdict_class(verdict: str | None) -> str:
    """A verdict without its reasons: ``not judged: invalid (...)`` -> ``not judged: invalid``."""
    text = str(verdict)
    return text.split(" (", 1)[0] if text.startswith(NOT_JUDGED) else text


def counts(verdicts: Iterable[Verdict]) -> dict[str, int]:
    """Verdicts per class (``not judged`` ones without their reasons)."""
    c: dict[str, int] = {}
    for v in verdicts:
        k = verdict_class(v.verdict)
        c[k] = c.get(k, 0) + 1
    return c
