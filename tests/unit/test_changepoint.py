"""Change points (include/brokerbench/changepoint.py) and the verdicts built on them, on synthetic series:
a clear step, noise only, a slow drift, an outlier run; version comparisons."""

from __future__ import annotations

import math
import random

from brokerbench.changepoint import Detector, change_points, compare_versions, significance
from brokerbench.metrics import Judgement, Metric
from brokerbench.regression import (
    RULE_CHANGE_POINT,
    RULE_NONE,
    RULE_THRESHOLD,
    RULE_THRESHOLD_SHORT,
    RULE_VALIDITY,
    judge_series,
    track_changes,
    verdicts_for_run,
)

P99 = Metric("publish_latency_p99_ms", "lower", 0.08, 0.1)
RATE = Metric("publish_rate_msg_s", "higher", 0.03, 0.0)


def series(levels: list[tuple[float, int]], cv: float, seed: int) -> list[float]:
    """Log-normal noise of relative size ``cv`` around each (level, runs)."""
    rng = random.Random(seed)
    return [level * math.exp(rng.gauss(0.0, cv)) for level, n in levels for _ in range(n)]


def rows(values: list[float], column: str = P99.column, versions: list[str] | None = None) -> list[dict]:
    return [{"run_key": f"run{i:03d}", "run_ts": f"2026-10-{1 + i // 24:02d}T{i % 24:02d}:00:00+00:00",
             column: v, "status": "ok", "broker_version": (versions[i] if versions else "3.9.1"),
             "pipeline_brokerbench_version": "0.1.0", "client_hosts": "localhost"} for i, v in enumerate(values)]


def verdicts_over(rs: list[dict], metric: Metric, start: int) -> list[dict]:
    return [judge_series(rs[:i], rs[i], metric) for i in range(start, len(rs))]


# --- a clear step ----------------------------------------------------------------------------------

def test_clear_step_is_one_change_point_with_size_and_significance():
    values = series([(10.0, 20), (12.0, 8)], 0.03, seed=1)
    changes = change_points(values, P99.relative)
    assert [c.index for c in changes] == [20]
    c = changes[0]
    assert 15 < c.change_percent < 25 and c.p_value < 1e-6
    assert c.before == (0, 20) and c.after == (20, 28)


def test_clear_step_is_regressed_at_once_then_by_its_change_point_with_the_runs_on_each_side():
    versions = ["3.9.0"] * 20 + ["3.9.1"] * 3
    rs = rows(series([(10.0, 20), (12.0, 3)], 0.03, seed=1), versions=versions)
    first = judge_series(rs[:20], rs[20], P99)
    assert first["verdict"] == Judgement.REGRESSED and first["rule"] == RULE_THRESHOLD
    last = judge_series(rs[:22], rs[22], P99)
    assert last["verdict"] == Judgement.REGRESSED and last["rule"] == RULE_CHANGE_POINT
    cp = last["change_point"]
    assert cp["index"] == 20 and cp["run_key"] == "run020" and cp["p_value"] <= Detector().alpha
    assert cp["before_runs"]["broker_version"] == ["3.9.0"] and cp["after_runs"]["broker_version"] == ["3.9.1"]
    assert cp["before_runs"]["runs"] == 20 and cp["after_runs"]["runs"] == 3
    assert "change point at run 2026-10-01T20:00" in last["evidence"] and "3.9.0" in last["evidence"]


def test_a_step_down_in_latency_or_up_in_rate_is_improved_and_a_rate_drop_regressed():
    rs = rows(series([(10.0, 20), (7.0, 3)], 0.03, seed=2))
    assert judge_series(rs[:22], rs[22], P99)["verdict"] == Judgement.IMPROVED
    up = rows(series([(1000.0, 20), (1100.0, 3)], 0.01, seed=3), RATE.column)
    assert judge_series(up[:22], up[22], RATE)["verdict"] == Judgement.IMPROVED
    down = rows(series([(1000.0, 20), (900.0, 3)], 0.01, seed=3), RATE.column)
    assert judge_series(down[:22], down[22], RATE)["verdict"] == Judgement.REGRESSED


def test_a_change_below_the_minimum_effect_is_not_a_change_point():
    # a 4 % step, very significant with 0.5 % noise, but below the p99's 8 % minimum effect
    values = series([(10.0, 20), (10.4, 10)], 0.005, seed=4)
    assert change_points(values, P99.relative) == []
    assert [c.index for c in change_points(values, 0.02)] == [20]


# --- noise only ------------------------------------------------------------------------------------

def test_noise_only_has_no_change_point_and_no_regression():
    found = 0
    regressed = 0
    for seed in range(20):
        values = series([(10.0, 40)], 0.05, seed=100 + seed)
        found += len(change_points(values, P99.relative))
        regressed += [v["verdict"] for v in verdicts_over(rows(values), P99, 20)].count(Judgement.REGRESSED)
    assert found == 0
    # 20 histories x 20 runs judged after 20 earlier runs: at most 1 in 100 a false alarm
    assert regressed <= 4, regressed


# --- a slow drift ----------------------------------------------------------------------------------

def test_slow_drift_is_marked_in_the_series_but_does_not_flood_the_verdicts():
    # +0.5 % per run for 60 runs (35 % in all) under 2 % noise
    rng = random.Random(3)
    values = [10.0 * 1.005 ** i * math.exp(rng.gauss(0.0, 0.02)) for i in range(60)]
    rs = rows(values)
    changes = track_changes(rs, P99)
    assert changes and all(c["change_percent"] > 0 for c in changes)
    verdicts = [v["verdict"] for v in verdicts_over(rs, P99, 10)]
    assert Judgement.IMPROVED not in verdicts
    assert verdicts.count(Judgement.REGRESSED) <= 5, verdicts


# --- an outlier run ----------------------------------------------------------------------------------

def test_one_outlier_run_is_its_own_regression_but_neither_a_change_point_nor_in_later_verdicts():
    values = series([(10.0, 20)], 0.03, seed=5)
    values[15] = 50.0
    rs = rows(values)
    assert change_points(values, P99.relative) == []
    assert judge_series(rs[:15], rs[15], P99)["verdict"] == Judgement.REGRESSED
    later = [judge_series(rs[:i], rs[i], P99) for i in range(16, 20)]
    assert [v["verdict"] for v in later] == [Judgement.UNCHANGED] * 4
    assert all(v["rule"] == RULE_THRESHOLD for v in later)


def test_an_outlier_run_in_each_segment_does_not_hide_a_step():
    values = series([(10.0, 20), (13.0, 10)], 0.03, seed=6)
    values[5], values[25] = 60.0, 1.0
    assert [c.index for c in change_points(values, P99.relative)] == [20]


# --- which rule -------------------------------------------------------------------------------------

def test_each_verdict_names_its_rule():
    rs = rows(series([(10.0, 8)], 0.03, seed=7))
    assert judge_series(rs[:2], rs[2], P99)["rule"] == RULE_NONE
    assert judge_series(rs[:2], rs[2], P99)["verdict"] == Judgement.INSUFFICIENT
    short = judge_series(rs[:4], rs[4], P99)
    assert short["rule"] == RULE_THRESHOLD_SHORT and "no change-point search" in short["evidence"]
    assert judge_series(rs[:7], rs[7], P99)["rule"] == RULE_THRESHOLD


def test_verdicts_for_run_carry_rule_p_value_and_change_point():
    hist = rows(series([(10.0, 20), (13.0, 3)], 0.03, seed=8))
    for r in hist:
        r.update(broker="kafka", workload="w", variant="fsync-off", environment="local", driver="kafka",
                 target_rate_msg_s=1000)
    bad = dict(hist[-1], run_key="other", status="invalid: foreign load on localhost: 80 %")
    out = verdicts_for_run([hist[-1], bad], hist, rule=__import__("brokerbench.regression").regression.Rule(
        metrics=(P99,)))
    by_rule = {v.rule: v for v in out}
    assert by_rule[RULE_CHANGE_POINT].verdict == Judgement.REGRESSED and by_rule[RULE_CHANGE_POINT].p_value < 0.01
    assert by_rule[RULE_CHANGE_POINT].change_point["index"] == 20
    assert by_rule[RULE_VALIDITY].verdict.startswith("not judged: invalid")


def test_significance_of_identical_and_of_distinct_groups():
    assert significance([5.0, 5.0, 5.0], [5.0, 5.0]) == 1.0
    assert significance([5.0, 5.0, 5.0], [6.0, 6.0]) == 0.0
    assert significance([5.0], [6.0, 6.0]) == 1.0
    assert significance([10, 10.2, 9.9, 10.1], [12, 12.1, 11.9]) < 1e-4


# --- versions ---------------------------------------------------------------------------------------

def test_version_comparison_labels_two_versions_that_differ_and_two_that_do_not():
    # a backfill over four versions, 5 runs each: 3.7 = 3.8, 3.9 is 20 % slower, 4.0 = 3.9
    levels = [(10.0, 5), (10.0, 5), (12.0, 5), (12.0, 5)]
    versions = ["3.7.2"] * 5 + ["3.8.1"] * 5 + ["3.9.1"] * 5 + ["4.0.0"] * 5
    rs = rows(series(levels, 0.03, seed=9), versions=versions)
    for r in rs:
        r.update(broker="kafka", workload="w", variant="fsync-off", environment="aws")
    diffs = {(d.version_a, d.version_b): d for d in compare_versions(rs, metrics=(P99,))}
    assert list(diffs) == [("3.7.2", "3.8.1"), ("3.8.1", "3.9.1"), ("3.9.1", "4.0.0")]
    assert diffs[("3.7.2", "3.8.1")].label == "not significant"
    assert diffs[("3.8.1", "3.9.1")].label == "significantly worse"
    assert diffs[("3.8.1", "3.9.1")].p_value < 0.01 and 15 < diffs[("3.8.1", "3.9.1")].change_percent < 25
    assert diffs[("3.9.1", "4.0.0")].label == "not significant"


def test_version_comparison_rate_up_is_better_and_one_run_is_too_few():
    rs = rows(series([(1000.0, 4), (1200.0, 4), (1200.0, 1)], 0.01, seed=10), RATE.column,
              versions=["1"] * 4 + ["2"] * 4 + ["3"])
    for r in rs:
        r.update(broker="rabbitmq", workload="w", variant="fsync-on", environment="aws")
    labels = [(d.version_a, d.version_b, d.label) for d in compare_versions(rs, metrics=(RATE,))]
    assert labels == [("1", "2", "significantly better"), ("2", "3", "too few runs")]


def test_versions_are_compared_older_to_newer_whatever_order_they_were_measured_in():
    # a backfill measured 4.1.1 first (days 1-4), then 3.9.1 (days 5-8): 3.9.1 is twice as slow
    rs = rows(series([(10.0, 4), (20.0, 4)], 0.02, seed=11), versions=["4.1.1"] * 4 + ["3.9.1"] * 4)
    for r in rs:
        r.update(broker="kafka", workload="w", variant="fsync-off", environment="local")
    (d,) = compare_versions(rs, metrics=(P99,))
    assert (d.version_a, d.version_b) == ("3.9.1", "4.1.1")  # older -> newer
    assert d.median_a > d.median_b and d.change_percent < -40 and d.label == "significantly better"


def test_version_order_is_numeric_with_pre_releases_first_and_text_last():
    from brokerbench.changepoint import version_order

    measured = ["4.1.1", "unknown", "3.10.0", "3.9.1", "4.0.0", "4.0.0-rc1", "3.10.8-1.1", "3.10.8", "package"]
    assert version_order(measured) == ["3.9.1", "3.10.0", "3.10.8", "3.10.8-1.1", "4.0.0-rc1", "4.0.0", "4.1.1",
                                       "package", "unknown"]
