"""Regression verdicts: one run's metrics against the history of its track.

docs/analytics.md states the rules in words; bench/detection_power.py measures
how often they cry wolf and how fast they find a step.

A *track* is broker x broker version x workload x variant x environment (and
the same target rate: a rate override is a different experiment). For every
metric of :data:`METRICS`, over the track's earlier runs whose status is ``ok``
followed by this run (the *series*), each verdict names the rule that made it:

- ``change point``: a significant change point of the series
  (:mod:`brokerbench.changepoint`: ruptures' PELT search, Student's t test on log
  values, the metric's minimum effect) whose new level started at most
  ``detector.recent`` runs ago, this run included -> ``regressed`` or
  ``improved`` by its direction, with when, how large, how significant and the
  runs on each side.
- ``threshold``: otherwise this run against the current level (the runs since
  the last change point, at most ``baseline_runs`` = 30, at least ``min_runs`` = 3),
  on log values (noise of latencies and rates is multiplicative): level =
  exp(median of the log baseline), s = 1.4826 x MAD of the log baseline; the
  ratio value / level is a verdict only beyond the farthest, in its direction, of
  1 +- relative, exp(+-k x (1 + 1/sqrt n) x s) and 1 +- floor / level (the floor
  in the column's unit, on the absolute difference) -> ``regressed`` (latency up,
  rate down) / ``improved``, else ``unchanged``. A series with a value <= 0 (a
  count can be 0) has no logs: the linear rule (value - median against
  max(relative x |median|, k' x 1.4826 x MAD, floor)), named in the evidence.
  ``threshold (short history)`` when the series is too short for change points.
- ``too little history``: fewer than ``min_runs`` earlier ok runs ->
  ``insufficient history``. A missing value -> ``no data``.

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

from brokerbench.changepoint import Detector, change_points, change_record, side_text
from brokerbench.metrics import METRICS, Judgement, Metric, number, unit_of

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

#: which rule produced a verdict
RULE_CHANGE_POINT = "change point"
RULE_THRESHOLD = "threshold"
RULE_THRESHOLD_SHORT = "threshold (short history)"
RULE_NONE = "too little history"
RULE_VALIDITY = "validity"

#: MAD x 1.4826 estimates the standard deviation of normally distributed values
MAD_TO_SIGMA = 1.4826

#: fields that identify a track (history columns)
TRACK = ("broker", "broker_version", "workload", "variant", "environment")


@dataclass(frozen=True)
class Rule:
    min_runs: int = 3
    #: at most this many runs of the current level (since the last change point) are the baseline
    baseline_runs: int = 30
    #: noise multiplier: the threshold's noise term is k x (1 + 1/sqrt(n)) x spread for n baseline runs
    #: (the MAD of few runs is itself uncertain; bench/detection_power.py measures the false alarms)
    k: float = 3.0
    metrics: tuple[Metric, ...] = METRICS
    detector: Detector = Detector()


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
    #: which rule produced the verdict (RULE_*)
    rule: str = ""
    #: p value of the change point (rule ``change point``)
    p_value: float | None = None
    #: the change point behind the verdict, with the runs on each side (rule ``change point``)
    change_point: dict[str, Any] | None = None
    #: side B against side A of an A/B run (rule ``A/B``, brokerbench.ab_verdicts): ratio B/A, its interval
    #: (ci_low, ci_high) and the interval's confidence, trials per side (n_a, n_b)
    interval: dict[str, Any] | None = None
    #: a regressed or improved verdict: what else moved (brokerbench.suspects.Suspects.to_dict: its sentence,
    #: the suspects ranked, the cleared candidates; brokerbench.suspects.attach_history adds them to the verdicts
    #: against history); None for other verdicts
    suspects: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def robust_spread(values: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation from the median."""
    centre = median(values)
    return MAD_TO_SIGMA * median(abs(v - centre) for v in values)


def noise_multiplier(k: float, n: int) -> float:
    """k x (1 + 1/sqrt(n)): a wider threshold when the spread comes from few runs."""
    return k * (1.0 + 1.0 / math.sqrt(max(n, 1)))


def _signed(x: float, digits: str = ".1f") -> str:
    return f"{'+' if x >= 0 else ''}{x:{digits}}"


def _judge_linear(v: float, base: list[float], metric: Metric, rule: Rule, out: dict[str, Any],
                  why: str) -> dict[str, Any]:
    """The linear rule: value - median against max(relative x |median|, k x spread, floor)."""
    centre = median(base)
    spread = robust_spread(base)
    k = noise_multiplier(rule.k, len(base))
    threshold = max(metric.relative * abs(centre), k * spread, metric.floor)
    change = v - centre
    worse = change if metric.better == "lower" else -change
    verdict = (Judgement.REGRESSED if worse > threshold else Judgement.IMPROVED if worse < -threshold
               else Judgement.UNCHANGED)
    pct = 100.0 * change / centre if centre else None
    which = ("relative" if threshold == metric.relative * abs(centre) else
             "noise" if threshold == k * spread else "floor")
    evidence = (f"{v:.4g} vs median {centre:.4g} of {len(base)} runs "
                f"({_signed(change, '.4g')}{'' if pct is None else f', {pct:+.1f} %'}); "
                f"threshold {threshold:.4g} = max({metric.relative:.0%} x median, {k:.3g} x spread {spread:.4g}, "
                f"floor {metric.floor:g}) [{which}]; linear rule: {why}")
    return {**out, "verdict": verdict, "baseline_median": centre, "baseline_spread": spread, "scale": "linear",
            "change": change, "change_percent": pct, "threshold": threshold, "evidence": evidence}


def judge(value: Any, baseline: Sequence[Any], metric: Metric, rule: Rule = Rule()) -> dict[str, Any]:
    """The verdict of one value against baseline values (oldest first).

    Missing or non-finite values are left out of the baseline (a missing current value: ``no data``).
    When the value and every baseline value are > 0, the rule works on logarithms (noise of latencies
    and rates is multiplicative): level = exp(median of log baseline), s = 1.4826 x MAD of the log
    baseline, and the change, as a ratio value / level, is a verdict only past all three terms in its
    direction: the relative term (ratio 1 +- relative), the noise term (ratio exp(+-k' x s), k' =
    k x (1 + 1/sqrt n)) and the floor (|value - level| > floor, in the column's unit). Otherwise (a value
    <= 0, e.g. a count that can be 0) the linear rule of :func:`_judge_linear`, and the evidence says so.
    """
    v = number(value)
    base = [b for b in (number(x) for x in baseline) if b is not None][-rule.baseline_runs:]
    out: dict[str, Any] = {"value": v, "baseline_n": len(base)}
    if v is None:
        return {**out, "verdict": Judgement.NO_DATA, "evidence": "this run has no value"}
    if len(base) < rule.min_runs:
        return {**out, "verdict": Judgement.INSUFFICIENT,
                "evidence": f"{len(base)} earlier run(s) of this track, {rule.min_runs} needed"}
    if v <= 0 or any(b <= 0 for b in base):
        nonpos = sum(b <= 0 for b in base) + (v <= 0)
        return _judge_linear(v, base, metric, rule, out,
                             f"{nonpos} value(s) <= 0 in the series, so no log values")
    logs = [math.log(b) for b in base]
    ordered = sorted(base)
    mid = len(ordered) // 2  # exp(median of logs): the middle value, or the geometric mean of the middle two
    level = ordered[mid] if len(ordered) % 2 else math.sqrt(ordered[mid - 1] * ordered[mid])
    s = robust_spread(logs)
    k = noise_multiplier(rule.k, len(base))
    ratio = v / level
    up = v >= level
    # each term as a ratio to the level in the direction of the change; the threshold is the farthest
    terms = {
        "relative": 1.0 + metric.relative if up else 1.0 - metric.relative,
        "noise": math.exp(k * s) if up else math.exp(-k * s),
        "floor": 1.0 + metric.floor / level if up else 1.0 - metric.floor / level,
    }
    which = max(terms, key=lambda t: terms[t]) if up else min(terms, key=lambda t: terms[t])
    bound = terms[which]
    beyond = ratio > bound if up else ratio < bound
    worse_up = metric.better == "lower"
    verdict = Judgement.UNCHANGED if not beyond else Judgement.REGRESSED if up == worse_up else Judgement.IMPROVED
    change = v - level
    pct = 100.0 * (ratio - 1.0)
    threshold = abs(bound - 1.0) * level
    unit = unit_of(metric.column)
    u = f" {unit}" if unit else ""
    floor = f"floor {metric.floor:g}{u}" if metric.floor else "floor 0"
    bound_text = (f"{_signed(100.0 * (bound - 1.0))} %" if bound > 0 else "-100 % (never)")
    evidence = (f"{v:.4g}{u} vs median {level:.4g}{u} ({pct:+.1f} %) of {len(base)} runs; "
                f"threshold {bound_text} = max({100 * metric.relative:g} % relative, {k:.3g} x spread of log values "
                f"{s:.3g}, {floor}) [{which}]")
    return {**out, "verdict": verdict, "baseline_median": level, "baseline_spread": robust_spread(base),
            "scale": "log", "change": change, "change_percent": pct, "threshold": threshold, "evidence": evidence}


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
    verdict = f"{Judgement.NOT_JUDGED}: {kind} ({rest})" if rest else f"{Judgement.NOT_JUDGED}: {kind}"
    evidence = f"status {row.get('status')!s}: a row whose status is not ok is never judged nor a baseline"
    if rules:
        evidence += "; validity rule(s): " + ", ".join(rules)
    if kind == "partial":
        evidence += "; a worker's result file is incomplete"
    return verdict, evidence


def _figures(rows: Sequence[Mapping[str, Any]], column: str) -> list[float]:
    """The column's figure of every row, in order; the rows were chosen for having one."""
    values = []
    for r in rows:
        v = number(r.get(column))
        if v is None:
            raise ValueError(f"{column}: a row without a figure among rows chosen for having one")
        values.append(v)
    return values


def track_of(row: Mapping[str, Any]) -> tuple:
    return tuple(row.get(k) for k in TRACK) + (number(row.get("target_rate_msg_s")),)


def _order_key(row: Mapping[str, Any]) -> tuple:
    return (str(row.get("run_ts") or ""), str(row.get("run_key") or ""))


def judge_series(rows: Sequence[Mapping[str, Any]], current: Mapping[str, Any], metric: Metric,
                 rule: Rule = Rule()) -> dict[str, Any]:
    """The verdict of ``current`` given the earlier ok rows of its track (oldest first).

    Returns the fields of :func:`judge` plus ``rule`` (which rule produced it),
    ``baseline_runs`` (run keys), and for a change point ``p_value`` and
    ``change_point`` (:func:`brokerbench.changepoint.change_record`).
    """

    det = rule.detector
    usable = [h for h in rows if number(h.get(metric.column)) is not None][-det.history_runs:]
    value = number(current.get(metric.column))
    if value is None or len(usable) < rule.min_runs:
        j = judge(value, [h.get(metric.column) for h in usable], metric, rule)
        return {**j, "rule": RULE_NONE if j["verdict"] == Judgement.INSUFFICIENT else "",
                "baseline_runs": [str(h.get("run_key")) for h in usable]}
    series_rows = list(usable) + [current]
    values = _figures(series_rows, metric.column)
    positive = all(v > 0 for v in values)
    searched = len(values) >= det.min_points and positive
    changes = change_points(values, metric.relative, det) if searched else []
    n = len(values)
    recent = [c for c in changes if n - c.index <= det.recent]
    if recent:
        c = recent[-1]
        record = change_record(c, series_rows, metric.column)
        before = values[c.before[0]:c.before[1]]
        change = value - c.before_median
        worse = (c.after_median - c.before_median) * (1 if metric.better == "lower" else -1)
        evidence = (f"change point at run {record['run_ts'][:16]} ({n - c.index} run(s) on the new level, this one "
                    f"included): median {c.before_median:.4g} -> {c.after_median:.4g} "
                    f"({'' if c.change_percent is None else f'{c.change_percent:+.1f} %'}), p = {c.p_value:.2g} "
                    f"(t test on log values, alpha {det.alpha:g}); before: {side_text(record['before_runs'])}; "
                    f"after: {side_text(record['after_runs'])}")
        verdict = Judgement.REGRESSED if worse > 0 else Judgement.IMPROVED
        return {"value": value, "verdict": verdict, "rule": RULE_CHANGE_POINT,
                "baseline_median": c.before_median, "baseline_spread": robust_spread(before),
                "baseline_n": len(before), "change": change,
                "change_percent": 100.0 * change / c.before_median if c.before_median else None,
                "threshold": None, "p_value": c.p_value, "change_point": record,
                "baseline_runs": record["before_runs"]["run_keys"], "evidence": evidence}
    # the threshold rule against the current level: the runs since the last change point
    start = changes[-1].index if changes else 0
    level = usable[start:] if len(usable) - start >= rule.min_runs else usable
    base = level[-rule.baseline_runs:]
    j = judge(value, [h.get(metric.column) for h in base], metric, rule)
    long_enough = len(values) >= det.min_points
    j["rule"] = RULE_THRESHOLD if long_enough else RULE_THRESHOLD_SHORT
    if start and level is not usable:
        j["evidence"] += f"; level since the change point at run {str(series_rows[start].get('run_ts'))[:16]}"
    elif long_enough and not positive:
        j["evidence"] += "; no change-point search (it works on log values: the series has values <= 0)"
    elif not searched:
        j["evidence"] += f"; no change-point search ({len(values)} runs, {det.min_points} needed)"
    j["baseline_runs"] = [str(h.get("run_key")) for h in base]
    return j


def verdicts_for_run(
    current: Iterable[Mapping[str, Any]],
    history: Iterable[Mapping[str, Any]],
    rule: Rule = Rule(),
) -> list[Verdict]:
    """Verdicts for every row of the current run x metric.

    ``current``: the run's history rows (one per workload x broker x driver x
    variant, with ``run_key`` and ``run_ts``). ``history``: every history row
    (it may contain the current run's rows; they are never their own
    baseline). The series of a row is the earlier (``run_ts``) runs of the same
    track with status ``ok`` (:func:`judge_series`). A current row whose status
    is not ``ok`` gets a single ``not judged: ...`` verdict (metric
    :data:`ALL_METRICS`).
    """
    history = list(history)
    out: list[Verdict] = []
    for row in sorted(current, key=lambda r: (str(r.get("workload")), str(r.get("broker")), str(r.get("variant")))):
        if not is_valid(row):
            verdict, evidence = not_judged(row)
            out.append(Verdict(
                workload=str(row.get("workload")), broker=str(row.get("broker")), variant=str(row.get("variant")),
                broker_version=row.get("broker_version"), metric=ALL_METRICS, better="", verdict=verdict,
                value=None, evidence=evidence, rule=RULE_VALIDITY))
            continue
        base_rows, excluded = earlier_rows(row, history)
        for metric in rule.metrics:
            j = judge_series(base_rows, row, metric, rule)
            if row.get("trials"):  # brokerbench.trials.combine: this run's value is the median of its trials
                j["evidence"] += (f"; this run's value: median of {row.get('trials_valid')} valid of "
                                  f"{row.get('trials')} trials")
            if excluded:
                j["evidence"] += f"; {excluded} earlier run(s) of this track not ok (invalid or partial): not used"
            out.append(Verdict(
                workload=str(row.get("workload")), broker=str(row.get("broker")), variant=str(row.get("variant")),
                broker_version=row.get("broker_version"), metric=metric.column, better=metric.better,
                verdict=j["verdict"], value=j["value"], baseline_median=j.get("baseline_median"),
                baseline_spread=j.get("baseline_spread"), baseline_n=j["baseline_n"], change=j.get("change"),
                change_percent=j.get("change_percent"), threshold=j.get("threshold"),
                baseline_runs=j.get("baseline_runs") or [], evidence=j["evidence"], rule=j.get("rule", ""),
                p_value=j.get("p_value"), change_point=j.get("change_point"),
            ))
    return out


def earlier_rows(row: Mapping[str, Any], history: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], int]:
    """(the earlier ok rows of the row's track, driver and client library, oldest first; how many earlier runs
    were not ok). Another client library measures another client: never this row's baseline."""
    key = track_of(row)
    this_run = row.get("run_key")
    this_ts = str(row.get("run_ts") or "")
    earlier = [h for h in history
               if track_of(h) == key and h.get("run_key") != this_run and str(h.get("run_ts") or "") < this_ts
               and h.get("driver") == row.get("driver") and h.get("client_library") == row.get("client_library")]
    base_rows = sorted((h for h in earlier if is_valid(h)), key=_order_key)
    excluded = len({h.get("run_key") for h in earlier if not is_valid(h)})
    return base_rows, excluded


def track_changes(rows: Iterable[Mapping[str, Any]], metric: Metric, rule: Rule = Rule()) -> list[dict[str, Any]]:
    """Every significant change point of one track's ok rows (any order) for ``metric`` (report charts)."""

    series = sorted((r for r in rows if is_valid(r) and number(r.get(metric.column)) is not None), key=_order_key)
    values = _figures(series, metric.column)
    if not values or any(v <= 0 for v in values):
        return []
    return [change_record(c, series, metric.column)
            for c in change_points(values, metric.relative, rule.detector)]


def verdict_category(verdict: str | None) -> str:
    """A verdict without its reasons: ``not judged: invalid (...)`` -> ``not judged: invalid``."""
    text = str(verdict)
    return text.split(" (", 1)[0] if text.startswith(Judgement.NOT_JUDGED) else text


def counts(verdicts: Iterable[Verdict]) -> dict[str, int]:
    """Verdicts per class (``not judged`` ones without their reasons)."""
    c: dict[str, int] = {}
    for v in verdicts:
        k = verdict_category(v.verdict)
        c[k] = c.get(k, 0) + 1
    return c
