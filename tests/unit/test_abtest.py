"""A/B in one run (include/brokerbench/abtest.py): the interval against an independent brute force of what
R's ``wilcox.test(log(b), log(a), conf.int=TRUE, exact=TRUE)`` computes, the verdicts, refused values, and the
false-positive rate of A/A comparisons by simulation."""

from __future__ import annotations

import math
import re
from collections import Counter
from itertools import combinations
from statistics import median, median_low

import numpy as np
import pytest

from brokerbench.abtest import (
    FASTER,
    NO_DIFFERENCE,
    SLOWER,
    TOO_FEW,
    compare,
    confidence_table,
    describe,
    interval_rank,
    min_trials_per_side,
    u_counts,
)


def enumerated_u(m: int, n: int) -> Counter:
    """The null distribution of U by enumeration: every choice of the m ranks (of m + n) held by one side;
    U = that side's rank sum - m (m + 1) / 2 = pairs in which it is the larger."""
    return Counter(sum(r + 1 for r in ranks) - m * (m + 1) // 2 for ranks in combinations(range(m + n), m))


def r_wilcox_interval(a: list[float], b: list[float], conf_level: float) -> tuple[float, float, float, float]:
    """What R's wilcox.test(x = log(b), y = log(a), conf.int=TRUE, exact=TRUE) computes, step by step
    (stats:::wilcox.test.default): diffs = sort(outer(x, y, "-")); qu = qwilcox(alpha/2, n.x, n.y), 1 if 0;
    interval diffs[qu], diffs[n.x n.y - qu + 1]; estimate median(diffs); achieved alpha 2 pwilcox(qu - 1).
    Returns (estimate, low, high, achieved confidence) as ratios B / A."""
    x, y = [math.log(v) for v in b], [math.log(v) for v in a]
    diffs = sorted(xi - yj for xi in x for yj in y)
    dist = enumerated_u(len(x), len(y))
    total = sum(dist.values())
    alpha = 1 - conf_level
    qu, cdf = 0, dist[0] / total
    while cdf < alpha / 2 - 10 * 2.2e-16:  # qwilcox: the smallest q with P(W <= q) >= p (R's fuzz)
        qu += 1
        cdf += dist[qu] / total
    qu = max(qu, 1)
    achieved_alpha = 2 * sum(dist[w] for w in range(qu)) / total
    ql = len(diffs) - qu
    return (math.exp(median(diffs)), math.exp(diffs[qu - 1]), math.exp(diffs[ql]), 1 - achieved_alpha)


# hand-made per-trial values (a latency in ms), no ties within or across sides
DATA_SETS = [
    ([10.2, 11.5, 9.8, 12.1, 10.9], [12.4, 13.9, 11.7, 14.2, 12.8, 13.1]),
    ([5.1, 4.7, 5.6, 4.9, 5.3, 5.0, 4.8], [5.2, 5.95, 5.4, 6.1, 5.45, 5.7, 4.85]),
    ([101.0, 97.0, 99.5, 103.0], [98.0, 104.5, 100.5, 96.0, 102.0]),
]


@pytest.mark.parametrize("m,n", [(1, 1), (2, 3), (3, 3), (4, 5), (6, 6), (7, 4)])
def test_the_u_distribution_equals_the_enumeration(m, n):
    dist = enumerated_u(m, n)
    assert list(u_counts(m, n)) == [dist[u] for u in range(m * n + 1)]


@pytest.mark.parametrize("a,b", DATA_SETS)
@pytest.mark.parametrize("confidence", [0.90, 0.95])
def test_the_interval_equals_r_wilcox_test(a, b, confidence):
    c = compare(a, b, higher_is_better=False, confidence=confidence)
    estimate, low, high, achieved = r_wilcox_interval(a, b, confidence)
    assert c.ratio == pytest.approx(estimate, rel=1e-12)
    assert c.ci_low == pytest.approx(low, rel=1e-12)
    assert c.ci_high == pytest.approx(high, rel=1e-12)
    assert c.achieved_confidence == pytest.approx(achieved, rel=1e-12)
    assert c.achieved_confidence >= confidence
    assert (c.n_a, c.n_b, c.median_a, c.median_b) == (len(a), len(b), median_low(a), median_low(b))
    assert c.ratio_of_medians == pytest.approx(median_low(b) / median_low(a))


def test_four_against_four_separated_gives_the_widest_interval_at_97_1_percent():
    """4 vs 4 at 95 %: k = 1, the interval is min to max of b / a, coverage 1 - 2/70, and the exact
    p value of complete separation is 2/70 too."""
    a, b = [10.0, 10.4, 10.8, 11.2], [12.0, 12.5, 13.0, 13.5]
    c = compare(a, b, higher_is_better=False)
    assert c.ci_low == pytest.approx(12.0 / 11.2)
    assert c.ci_high == pytest.approx(13.5 / 10.0)
    assert c.achieved_confidence == pytest.approx(1 - 2 / 70)
    assert c.p_value == pytest.approx(2 / 70)
    assert c.verdict == SLOWER
    assert interval_rank(4, 4, 0.95) == (1, pytest.approx(1 - 2 / 70))


def latencies(level: float, n: int, seed: int, sigma: float = 0.02) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(level * np.exp(rng.normal(0.0, sigma, n)))


def test_a_clear_20_percent_increase_with_5_trials_each_is_slower_for_a_latency():
    a, b = latencies(100.0, 5, seed=1), latencies(120.0, 5, seed=2)
    c = compare(a, b, higher_is_better=False)
    assert c.verdict == SLOWER
    assert c.ci_low > 1.0 and 1.1 < c.ratio < 1.3
    assert c.p_value <= 1 - c.achieved_confidence
    assert compare(np.array(a), np.array(b), higher_is_better=False) == c  # numpy arrays and floats too


def test_direction_flips_with_higher_is_better():
    a, up = latencies(100.0, 5, seed=3), latencies(120.0, 5, seed=4)
    down = latencies(80.0, 5, seed=5)
    assert compare(a, up, higher_is_better=False).verdict == SLOWER  # latency up
    assert compare(a, up, higher_is_better=True).verdict == FASTER  # rate up
    assert compare(a, down, higher_is_better=False).verdict == FASTER  # latency down
    assert compare(a, down, higher_is_better=True).verdict == SLOWER  # rate down
    assert compare(a, down, higher_is_better=True).ci_high < 1.0


def test_identical_distributions_give_no_difference():
    a, b = [100.0, 102.0, 104.0, 106.0, 108.0], [101.0, 103.0, 105.0, 107.0, 109.0]
    c = compare(a, b, higher_is_better=False)
    assert c.verdict == NO_DIFFERENCE
    assert c.ci_low < 1.0 < c.ci_high
    assert c.p_value > 1 - c.achieved_confidence
    assert compare(a, a, higher_is_better=True).verdict == NO_DIFFERENCE  # every value tied


def test_three_against_three_is_too_few_trials_and_says_how_many_are_needed():
    c = compare([10.0, 11.0, 12.0], [20.0, 21.0, 22.0], higher_is_better=False)
    assert c.verdict == TOO_FEW
    assert (c.ci_low, c.ci_high, c.achieved_confidence) == (None, None, None)
    assert c.p_value == pytest.approx(0.1)  # the smallest two-sided exact p of 3 vs 3
    assert "at least 4 trials per side" in c.message and "90.0 %" in c.message
    assert compare([10.0, 11.0, 12.0], [20.0, 21.0, 22.0], higher_is_better=False, confidence=0.90).verdict == SLOWER


def test_min_trials_per_side():
    assert min_trials_per_side(0.95) == 4
    assert min_trials_per_side(0.90) == 3
    assert min_trials_per_side(0.99) == 5
    assert min_trials_per_side() == 4


@pytest.mark.parametrize("bad", [0.0, -3.0, math.nan, math.inf, "fast", None])
@pytest.mark.parametrize("side", ["A", "B"])
def test_bad_values_are_refused_naming_the_side_and_the_value(bad, side):
    good = [10.0, 11.0, 12.0, 13.0]
    a, b = ([*good[:3], bad], good) if side == "A" else (good, [*good[:3], bad])
    with pytest.raises(ValueError, match=rf"side {side}: {re.escape(repr(bad))} "):
        compare(a, b, higher_is_better=False)


def test_empty_sides_and_bad_confidences_are_refused():
    with pytest.raises(ValueError, match="side B has no trials"):
        compare([1.0], [], higher_is_better=True)
    with pytest.raises(ValueError, match="confidence"):
        compare([1.0, 2.0], [1.0, 2.0], higher_is_better=True, confidence=95)


def test_describe_is_one_line_with_the_ratio_interval_p_and_verdict():
    c = compare([10.0, 10.4, 10.8, 11.2], [12.0, 12.5, 13.0, 13.5], higher_is_better=False)
    line = describe(c, "publish_latency_p99_ms", "ms")
    assert line.startswith("publish_latency_p99_ms: B/A 1.20 (97.1 % CI 1.07 to 1.35), p 0.029, B slower;")
    assert "medians A 10.4 ms, B 12.5 ms, 4 vs 4 trials" in line  # lower medians: measured values and "\n" not in line
    few = describe(compare([1.0, 2.0, 3.0], [1.5, 2.5, 3.5], higher_is_better=True), "publish_rate_msg_s", "msg/s")
    assert "too few trials (3 vs 3 trials allow at most 90.0 %" in few and "CI" not in few


def test_the_confidence_table_rows():
    rows = confidence_table().splitlines()[2:]
    assert rows[0] == "| 3 | 90.0 % | 90.0 % (k = 1) | - | - |"
    assert rows[1].startswith("| 4 | 97.1 % | 94.3 % (k = 2) | 97.1 % (k = 1) | - |")


def test_the_p_value_and_the_interval_agree_without_ties():
    """The interval excludes 1 exactly when the exact test rejects at 1 - achieved confidence."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        a, b = list(np.exp(rng.normal(0, 0.2, 6))), list(np.exp(rng.normal(0.2, 0.2, 5)))
        c = compare(a, b, higher_is_better=False)
        assert (c.verdict != NO_DIFFERENCE) == (c.p_value <= 1 - c.achieved_confidence + 1e-12)


def test_a_over_a_false_positive_rate_stays_below_the_achieved_alpha():
    """2,000 A/A comparisons of 5 vs 5 log-normal trials (sigma 10 %): a difference (either way) is found in
    at most 1 - achieved confidence (8/252 = 3.2 %) of them, plus sampling tolerance."""
    rng = np.random.default_rng(20261128)
    found, achieved = 0, None
    for _ in range(2000):
        a, b = 100.0 * np.exp(rng.normal(0.0, 0.1, (2, 5)))
        c = compare(list(a), list(b), higher_is_better=False)
        found += c.verdict in (SLOWER, FASTER)
        achieved = c.achieved_confidence
    assert achieved == pytest.approx(1 - 8 / 252)
    assert found / 2000 <= (1 - achieved) + 0.012
    assert found > 0  # the test can fire at all
