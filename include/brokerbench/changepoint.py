"""Change points over a track's history, their significance, and version comparisons.

docs/analytics.md states the method in words; bench/detection_power.py measures it.

Library: ``ruptures`` (PELT search, ``l1`` cost = sum of absolute deviations
from the segment median, so one outlier run moves a segment's cost little) finds
candidate change points; every candidate is then tested with the statistic used
everywhere here (:func:`significance`): Student's t test (pooled variance) on the logarithm of the
values of the two adjacent segments, plus a practical minimum effect per metric.
A candidate that fails either is dropped and the rest re-tested.

Why logarithms: latencies and rates vary multiplicatively (a 10 % step is the
same distance at 1 ms and at 300 ms), and a latency spike of 100x becomes a
distance of 4.6 instead of dominating the whole series.

The series is scaled by its own noise before the search: the robust standard
deviation of successive differences (1.4826 x MAD / sqrt 2), which a step does
not inflate; the PELT penalty is then in units of that noise and one setting
serves every metric.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import asdict, dataclass
from statistics import median
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from brokerbench.metrics import METRICS, Direction, number

MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class Detector:
    """The shipped settings of change-point detection (measured by bench/detection_power.py)."""

    #: PELT penalty per log(n) of the series, in units of the noise (see module doc)
    penalty: float = 3.0
    #: fewest runs in a segment
    min_size: int = 2
    #: two-sided p value at or below which a change is significant
    alpha: float = 0.01
    #: a change whose new segment started at most this many runs ago is the verdict of the current run
    recent: int = 3
    #: fewest runs in a series before change points are searched (else the window rule alone)
    min_points: int = 6
    #: the noise estimate is never below this relative amount (a flat series is not infinitely precise)
    min_noise: float = 0.005
    #: runs of the track's history that are searched (the most recent ones)
    history_runs: int = 30
    #: a run further than this many noise units (log scale) from its segment's median is an outlier:
    #: it stays in the search (whose l1 cost barely feels it) but not in the significance test
    outlier: float = 5.0


def _log(values: Sequence[float]) -> np.ndarray:
    return np.log(np.maximum(np.asarray(values, dtype=float), 1e-12))


def noise_scale(y: np.ndarray, min_noise: float = 0.005) -> float:
    """Robust standard deviation of a log series from its successive differences (a step barely moves it)."""
    floor = math.log1p(min_noise)
    if len(y) < 3:
        return floor
    d = np.diff(y)
    s = MAD_TO_SIGMA * float(np.median(np.abs(d - np.median(d)))) / math.sqrt(2)
    return max(s, floor)


def drop_outliers(values: Sequence[float], scale: float, limit: float) -> list[float]:
    """The values whose log lies within ``limit`` x ``scale`` of the log of their median."""
    centre = math.log(max(median(values), 1e-12))
    return [v for v in values if abs(math.log(max(v, 1e-12)) - centre) <= limit * scale]


def significance(before: Sequence[float], after: Sequence[float]) -> float:
    """Two-sided p value of Student's t test (pooled variance) on the logarithms of two groups of positive values.

    1.0 when a group has fewer than 2 values; with no spread in either group, 0.0
    when the groups differ and 1.0 when they do not.
    """
    a, b = _log(before), _log(after)
    if len(a) < 2 or len(b) < 2:
        return 1.0
    va, vb = float(np.var(a, ddof=1)), float(np.var(b, ddof=1))
    if va <= 1e-20 and vb <= 1e-20:  # no spread (up to rounding) in either group
        return 0.0 if abs(float(np.mean(a)) - float(np.mean(b))) > 1e-9 else 1.0

    from scipy import stats  # scipy: only when two sides are compared

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # nearly identical values: the p value is still defined
        p = float(stats.ttest_ind(a, b, equal_var=True).pvalue)
    return p if math.isfinite(p) else 1.0


def relative_change(before: Sequence[float], after: Sequence[float]) -> float | None:
    """median(after) / median(before) - 1 (None when the earlier median is 0)."""
    mb = median(before)
    return None if mb == 0 else median(after) / mb - 1.0


@dataclass
class Change:
    """One change point: ``index`` is the first run of the new level."""

    index: int
    before: tuple[int, int]  # [start, end) of the segment before
    after: tuple[int, int]   # [start, end) of the segment after
    before_median: float
    after_median: float
    change_percent: float | None
    p_value: float
    #: runs of the two segments left out of the test as outliers
    outliers: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _candidates(y: np.ndarray, detector: Detector) -> list[int]:
    import ruptures  # ruptures: only when a series is searched for change points

    n = len(y)
    z = (y / noise_scale(y, detector.min_noise)).reshape(-1, 1)
    algo = ruptures.Pelt(model="l1", min_size=detector.min_size, jump=1).fit(z)
    return [b for b in algo.predict(pen=detector.penalty * math.log(n)) if b < n]


def change_points(values: Sequence[float], min_effect: float, detector: Detector = Detector()) -> list[Change]:
    """Significant change points of a series (oldest first, positive values).

    A candidate of the search is kept when the p value of :func:`significance`
    between its two adjacent segments (outliers left out: :func:`drop_outliers`) is at most ``detector.alpha`` and the
    medians differ by at least ``min_effect`` (relative); otherwise the worst
    candidate is dropped (the largest p value) and the others re-tested against
    their new neighbours.
    """
    vals = [float(v) for v in values]
    n = len(vals)
    if n < max(detector.min_points, 2 * detector.min_size):
        return []
    y = _log(vals)
    scale = noise_scale(y, detector.min_noise)
    bkps = _candidates(y, detector)
    while True:
        bounds = [0] + bkps + [n]
        changes, failing = [], []
        for i in range(1, len(bounds) - 1):
            before, after = vals[bounds[i - 1]:bounds[i]], vals[bounds[i]:bounds[i + 1]]
            kept_b = drop_outliers(before, scale, detector.outlier)
            kept_a = drop_outliers(after, scale, detector.outlier)
            p = significance(kept_b, kept_a)
            rel = relative_change(before, after)
            changes.append(Change(bounds[i], (bounds[i - 1], bounds[i]), (bounds[i], bounds[i + 1]),
                                  median(before), median(after), None if rel is None else 100.0 * rel, p,
                                  len(before) + len(after) - len(kept_b) - len(kept_a)))
            if p > detector.alpha or rel is None or abs(rel) < min_effect:
                failing.append((p, -abs(rel or 0.0), bounds[i]))
        if not failing:
            return changes
        bkps.remove(max(failing)[2])


# --- the runs on each side of a change ---------------------------------------------------------

#: what a side of a change says about its runs (history columns)
SIDE_FIELDS = (("broker_version", "broker version"), ("pipeline_brokerbench_version", "brokerbench"),
               ("client_hosts", "client hosts"))


def describe_runs(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Runs, first and last run time and the distinct broker versions, brokerbench versions and hosts."""
    out: dict[str, Any] = {"runs": len(rows),
                           "first": str(rows[0].get("run_ts")) if rows else None,
                           "last": str(rows[-1].get("run_ts")) if rows else None,
                           "run_keys": [str(r.get("run_key")) for r in rows]}
    for col, _ in SIDE_FIELDS:
        out[col] = sorted({str(r.get(col)) for r in rows if r.get(col) not in (None, "")})
    return out


def side_text(side: Mapping[str, Any]) -> str:
    bits = [f"{side['runs']} run(s) {str(side['first'])[:16]} .. {str(side['last'])[:16]}"]
    for col, label in SIDE_FIELDS:
        if side.get(col):
            bits.append(f"{label} {', '.join(side[col])}")
    return "; ".join(bits)


def change_record(change: Change, rows: Sequence[Mapping[str, Any]], metric: str) -> dict[str, Any]:
    """A change with the runs on each side (``rows`` = the series' history rows, oldest first)."""
    at = rows[change.index]
    return {**change.to_dict(), "metric": metric, "run_key": str(at.get("run_key")), "run_ts": str(at.get("run_ts")),
            "before_runs": describe_runs(rows[change.before[0]:change.before[1]]),
            "after_runs": describe_runs(rows[change.after[0]:change.after[1]])}


# --- versions ------------------------------------------------------------------------------------

@dataclass
class VersionDiff:
    broker: str
    workload: str
    variant: str
    environment: str | None
    metric: str
    better: Direction
    version_a: str
    version_b: str
    runs_a: int
    runs_b: int
    median_a: float | None
    median_b: float | None
    change_percent: float | None
    p_value: float | None
    #: "significantly worse" / "significantly better" / "not significant" / "too few runs"
    label: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: a version number: an optional "v", dot-separated numbers, then anything (a pre-release, a package revision)
_RELEASE = re.compile(r"[vV]?(\d+(?:\.\d+)*)(.*)", re.S)
#: what makes the rest of a version a pre-release of its numbers (4.0.0-rc1, 3.0.0.dev2, 2.8.0-SNAPSHOT)
_PRE_RELEASE = re.compile(r"[-_.+~]?(dev|alpha|a|beta|b|c|pre|preview|rc|m|milestone|snapshot)(?![a-z])", re.I)
_TOKENS = re.compile(r"\d+|[A-Za-z]+")


def version_key(version: object) -> tuple:
    """Sort key of a broker version, older to newer whatever order they were measured in: release numbers
    compared as numbers (3.9.1 < 3.10.0 < 4.1.1; 4.1 = 4.1.0), a pre-release before its release
    (4.0.0-rc1 < 4.0.0), a package revision after it (3.10.8 < 3.10.8-1); a version that is not a number
    ("unknown", "package") after every number, by its text; None (not recorded) first.

    spark_jobs/brokerbench_spark/phase_tables.version_key is the same function (the Spark package imports
    nothing of brokerbench); a unit test keeps the two the same."""
    if version is None:
        return (0,)
    text = str(version).strip()
    m = _RELEASE.fullmatch(text)
    if m is None:
        return (2, text.lower(), text)
    release = tuple(int(x) for x in m.group(1).split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    rest = m.group(2)
    rank = 1 if not rest else 0 if _PRE_RELEASE.match(rest) else 2
    tokens = tuple((0, int(t), "") if t.isdigit() else (1, 0, t.lower()) for t in _TOKENS.findall(rest))
    return (1, release, rank, tokens, text)


def version_order(versions: Iterable[object]) -> list[str]:
    """The distinct versions (as text), older to newer (:func:`version_key`)."""
    return sorted({str(v) for v in versions}, key=version_key)


def _version_order(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The versions of ``rows`` in version order, older to newer (not in the order they were measured: a
    backfill may measure 4.1.1 before 3.9.1, and the question is still how 4.1.1 compares with 3.9.1)."""
    return version_order(r.get("broker_version") for r in rows)


def compare_versions(rows: Sequence[Mapping[str, Any]], metrics: Sequence[Any] | None = None,
                     detector: Detector = Detector()) -> list[VersionDiff]:
    """Each broker version against the version before it in version order (older to newer, :func:`version_key`;
    ``version_a`` the older, ``version_b`` the newer, ``change_percent`` from a to b), per broker x workload x
    variant x environment and metric, labelled by the statistic of :func:`change_points` (t test on logs,
    ``alpha``, the metric's minimum effect). Rows should be status ``ok`` history rows."""

    metrics = METRICS if metrics is None else metrics
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r.get("broker"), r.get("workload"), r.get("variant"), r.get("environment")), []).append(r)
    out = []
    for (b, w, x, e), grows in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        order = _version_order(grows)
        for va, vb in zip(order, order[1:]):
            for m in metrics:
                a = [v for v in (number(r.get(m.column)) for r in grows if str(r.get("broker_version")) == va)
                     if v is not None and v > 0]
                c = [v for v in (number(r.get(m.column)) for r in grows if str(r.get("broker_version")) == vb)
                     if v is not None and v > 0]
                if not a or not c:
                    continue
                rel = relative_change(a, c)
                if len(a) < 2 or len(c) < 2:
                    p, label = None, "too few runs"
                else:
                    p = significance(a, c)
                    if p <= detector.alpha and rel is not None and abs(rel) >= m.relative:
                        worse = rel > 0 if m.better == "lower" else rel < 0
                        label = "significantly worse" if worse else "significantly better"
                    else:
                        label = "not significant"
                out.append(VersionDiff(str(b), str(w), str(x), None if e is None else str(e), m.column, m.better,
                                       va, vb, len(a), len(c), median(a), median(c),
                                       None if rel is None else 100.0 * rel, p, label))
    return out


__all__ = ["Detector", "Change", "VersionDiff", "change_points", "change_record", "compare_versions",
           "describe_runs", "noise_scale", "relative_change", "side_text", "significance", "version_key",
           "version_order"]
