"""A/B in one run: does the candidate side B differ from the baseline side A?

A run measures A and B alternately, N trials each; every trial gives one value
per metric (a rate in msg/s, a latency percentile in ms, ...). :func:`compare`
judges one metric from the two sides' per-trial values. Values are never
averaged: each side is summarised by its lower median (always one trial's
measured value, as brokerbench.trials.combine does), and the two sides are
compared by ranks only (a trial's p99 is compared with the other side's p99s,
never averaged with them). docs/analytics.md, "A/B in one run: the statistics".

On the log scale (latencies and rates vary multiplicatively):

* **estimate** ``ratio`` (B / A, no unit): the Hodges-Lehmann estimate,
  exp(median over all pairs (i, j) of log b_j - log a_i), R's estimate (the
  median of an even count of differences is the mean of the middle two, a
  distance between log values, not an averaged percentile);
  ``ratio_of_medians`` = median_b / median_a is given beside it;
* **interval** ``ci_low`` .. ``ci_high`` (B / A, no unit): the distribution-free
  interval that inverts the exact two-sided Wilcoxon rank-sum (Mann-Whitney)
  test, i.e. the k-th smallest and the k-th largest pairwise difference (Bauer
  1972; what R's ``wilcox.test(log(b), log(a), conf.int=TRUE, exact=TRUE)``
  returns). k is R's ``qwilcox((1 - confidence) / 2, n_b, n_a)`` (at least 1);
  the interval's exact coverage ``achieved_confidence`` = 1 - 2 P(U <= k - 1)
  is at least the requested ``confidence`` (4 vs 4 trials: 97.1 % for 95 %);
* **p value** (two-sided): ``scipy.stats.mannwhitneyu(b, a, method="exact")``,
  or scipy's default method when values are tied;
* **verdict**: the interval excludes 1 -> ``slower`` or ``faster`` (B's
  direction, read with ``higher_is_better``); it contains 1 -> ``no difference
  at this power``; the sample sizes allow no interval at the requested
  confidence (even [min, max] of the pairwise differences covers less, e.g. 3 vs
  3 trials: 90 %) -> ``too few trials``, and the message names
  :func:`min_trials_per_side`.

The exact null distribution of U (the number of pairs (a_i, b_j) with b_j >
a_i when both sides come from one distribution) is computed here by a short
dynamic programme over the counts of rank arrangements (:func:`u_counts`), in
exact integers. scipy has it only in a private module
(``scipy.stats._mannwhitneyu``), which may change without notice between
releases; the programme is a dozen lines and is checked against a brute-force
enumeration in tests/unit/test_abtest.py. With tied values the same closed
order-statistic interval is used (where R falls back to a normal approximation).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from functools import lru_cache
from statistics import median, median_low
from typing import Literal, Sequence

Verdict = Literal["faster", "slower", "no difference at this power", "too few trials"]
FASTER: Verdict = "faster"
SLOWER: Verdict = "slower"
NO_DIFFERENCE: Verdict = "no difference at this power"
TOO_FEW: Verdict = "too few trials"

#: slack when comparing a tail probability with alpha / 2 (R's qwilcox uses 10 x DBL_EPSILON)
_FUZZ = 1e-12


def _pct(fraction: float) -> str:
    """0.9714 -> '97.1 %'."""
    return f"{100 * fraction:.1f} %"


@dataclass(frozen=True)
class Comparison:
    """One metric's A/B comparison. Medians are in the metric's own unit (that of the values given);
    ratios are B / A (no unit); confidences and the p value are fractions (0.95 = 95 %)."""

    n_a: int  #: trials of side A
    n_b: int  #: trials of side B
    median_a: float  #: lower median of A's per-trial values (one trial's value), metric unit
    median_b: float  #: lower median of B's per-trial values (one trial's value), metric unit
    ratio: float  #: Hodges-Lehmann estimate of B / A (log scale)
    ratio_of_medians: float  #: median_b / median_a
    ci_low: float | None  #: lower bound of the interval for B / A; None with too few trials
    ci_high: float | None  #: upper bound of the interval for B / A; None with too few trials
    confidence: float  #: requested confidence, fraction
    achieved_confidence: float | None  #: exact coverage of [ci_low, ci_high], fraction; None with too few trials
    p_value: float  #: two-sided Mann-Whitney p value, fraction
    higher_is_better: bool  #: True for rates, False for latencies
    verdict: Verdict
    message: str  #: the verdict in a sentence


@lru_cache(maxsize=256)
def u_counts(n_a: int, n_b: int) -> tuple[int, ...]:
    """counts[u] = how many of the C(n_a + n_b, n_a) orderings of n_a A values and n_b B values
    (all distinct) have exactly u pairs (a, b) with b > a: the exact null distribution of U."""
    # row[j] = the counts for i A values and j B values; i = 0: one ordering, U = 0
    row: list[list[int]] = [[1] for _ in range(n_b + 1)]
    for i in range(1, n_a + 1):
        new = [[1]]  # j = 0: one ordering, U = 0
        for j in range(1, n_b + 1):
            counts = [0] * (i * j + 1)
            for u, c in enumerate(new[j - 1]):  # the largest value is a B: it beats all i A values
                counts[u + i] += c
            for u, c in enumerate(row[j]):  # the largest value is an A: no new pair
                counts[u] += c
            new.append(counts)
        row = new
    return tuple(row[n_b])


def _achievable(n_a: int, n_b: int, confidence: float) -> bool:
    """The widest interval (min to max pairwise difference) covers 1 - 2 / C(n_a + n_b, n_a)."""
    return 2 / math.comb(n_a + n_b, n_a) <= (1 - confidence) + _FUZZ


def interval_rank(n_a: int, n_b: int, confidence: float) -> tuple[int, float] | None:
    """(k, exact coverage) of the interval [k-th smallest, k-th largest pairwise difference] for the
    requested two-sided confidence (R's choice of k), or None when no interval reaches it."""
    if not _achievable(n_a, n_b, confidence):
        return None
    counts, total = u_counts(n_a, n_b), math.comb(n_a + n_b, n_a)
    half_alpha = (1 - confidence) / 2
    below = 0  # orderings with U <= q - 1
    for q, c in enumerate(counts):
        if (below + c) / total >= half_alpha - _FUZZ:  # q = qwilcox(alpha / 2)
            k = max(q, 1)
            return k, 1 - 2 * sum(counts[:k]) / total  # 1 - 2 P(U <= k - 1)
        below += c
    raise AssertionError("unreachable: the cumulative distribution reaches 1")


def min_trials_per_side(confidence: float = 0.95) -> int:
    """The fewest trials per side (both sides equal) for which an interval at ``confidence`` exists."""
    _check_confidence(confidence)
    n = 1
    while not _achievable(n, n, confidence):
        n += 1
    return n


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be a fraction between 0 and 1, got {confidence!r}")


def _checked(values: Sequence[float], side: str) -> list[float]:
    """The side's values as floats; refuses an empty side and any value that is not a positive finite number."""
    if len(values) == 0:
        raise ValueError(f"side {side} has no trials")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (math.isfinite(v) and v > 0):
            raise ValueError(f"side {side}: {v!r} is not a positive finite value (latencies and rates are > 0)")
    return [float(v) for v in values]


def _p_value(a: Sequence[float], b: Sequence[float]) -> float:
    from scipy.stats import mannwhitneyu  # scipy: only when two sides are compared

    tied = len(set(a) | set(b)) < len(a) + len(b)
    result = mannwhitneyu(b, a, alternative="two-sided") if tied else \
        mannwhitneyu(b, a, alternative="two-sided", method="exact")
    return float(result.pvalue)


def _verdict(lo: float, hi: float, higher_is_better: bool) -> Verdict:
    """lo, hi: the interval's bounds for log(B / A)."""
    if lo <= 0 <= hi:
        return NO_DIFFERENCE
    b_higher = lo > 0
    return FASTER if b_higher == higher_is_better else SLOWER


def compare(a: Sequence[float], b: Sequence[float], *, higher_is_better: bool,
            confidence: float = 0.95) -> Comparison:
    """Judge whether B differs from A (one value per trial each, positive, in the metric's unit)."""
    _check_confidence(confidence)
    a, b = _checked(a, "A"), _checked(b, "B")
    diffs = sorted(math.log(y) - math.log(x) for x in a for y in b)  # log(b_j) - log(a_i)
    rank = interval_rank(len(a), len(b), confidence)
    lo = hi = achieved = None
    if rank is None:
        verdict, message = TOO_FEW, _too_few(len(a), len(b), confidence)
    else:
        k, achieved = rank
        lo, hi = diffs[k - 1], diffs[len(diffs) - k]
        verdict = _verdict(lo, hi, higher_is_better)
        where = "contains" if verdict == NO_DIFFERENCE else "excludes"
        message = (f"the {_pct(achieved)} interval for B/A ({math.exp(lo):.3g} to {math.exp(hi):.3g}) {where} 1 "
                   f"at {len(a)} vs {len(b)} trials: " + (verdict if verdict == NO_DIFFERENCE else f"B {verdict}"))
    return Comparison(
        n_a=len(a), n_b=len(b), median_a=float(median_low(a)), median_b=float(median_low(b)),
        ratio=math.exp(median(diffs)), ratio_of_medians=float(median_low(b) / median_low(a)),
        ci_low=None if lo is None else math.exp(lo), ci_high=None if hi is None else math.exp(hi),
        confidence=confidence, achieved_confidence=achieved, p_value=_p_value(a, b),
        higher_is_better=higher_is_better, verdict=verdict, message=message)


def _too_few(n_a: int, n_b: int, confidence: float) -> str:
    best = 1 - 2 / math.comb(n_a + n_b, n_a)
    return (f"{n_a} vs {n_b} trials allow at most {_pct(best)} confidence; {_pct(confidence)} needs at least "
            f"{min_trials_per_side(confidence)} trials per side")


def describe(comparison: Comparison, metric: str, unit: str = "") -> str:
    """One line, e.g. ``publish_latency_p99_ms: B/A 1.23 (97.1 % CI 1.10 to 1.41), p 0.029, B slower;
    medians A 12.1 ms, B 14.9 ms, 4 vs 4 trials``."""
    c = comparison
    head = f"{metric}: B/A {c.ratio:.2f}"
    if c.achieved_confidence is not None and c.ci_low is not None and c.ci_high is not None:
        head += f" ({_pct(c.achieved_confidence)} CI {c.ci_low:.2f} to {c.ci_high:.2f})"
    said = {SLOWER: "B slower", FASTER: "B faster", NO_DIFFERENCE: NO_DIFFERENCE,
            TOO_FEW: f"{TOO_FEW} ({c.message})"}[c.verdict]
    suffix = f" {unit}" if unit else ""
    return (f"{head}, p {c.p_value:.2g}, {said}; medians A {c.median_a:.4g}{suffix}, B {c.median_b:.4g}{suffix}, "
            f"{c.n_a} vs {c.n_b} trials")


def confidence_table(sizes: Sequence[int] = (3, 4, 5, 6), requested: Sequence[float] = (0.90, 0.95, 0.99)) -> str:
    """The achievable confidence per trials per side (both sides equal), as a markdown table: the widest
    interval's coverage, and the exact coverage of the interval :func:`compare` uses at each requested
    confidence (``-``: too few trials)."""
    head = ["trials per side", "widest interval"] + [f"at {_pct(r)} requested" for r in requested]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in sizes:
        cells = [str(n), _pct(1 - 2 / math.comb(2 * n, n))]
        for r in requested:
            rank = interval_rank(n, n, r)
            cells.append("-" if rank is None else f"{_pct(rank[1])} (k = {rank[0]})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(confidence_table())
