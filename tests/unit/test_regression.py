"""The regression rule on synthetic histories (include/brokerbench/regression.py)."""

from __future__ import annotations

import math
import random

import pytest

from brokerbench.metrics import METRICS, Judgement, Metric
from brokerbench.regression import (
    Rule,
    counts,
    judge,
    noise_multiplier,
    robust_spread,
    validity_rules,
    verdicts_for_run,
)

P99 = Metric("publish_latency_p99_ms", "lower", 0.25, 0.1)
RATE = Metric("publish_rate_msg_s", "higher", 0.05, 0.0)


def noisy(centre: float, rel_sd: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [centre * (1 + rng.gauss(0, rel_sd)) for _ in range(n)]


def test_robust_spread_ignores_one_outlier():
    values = [10.0, 10.2, 9.8, 10.1, 9.9, 10.0, 400.0]
    assert robust_spread(values) < 0.5
    assert robust_spread([5.0, 5.0, 5.0]) == 0


def test_clear_regression():
    base = noisy(5.0, 0.05, 10, seed=1)
    j = judge(9.0, base, P99)
    assert j["verdict"] == Judgement.REGRESSED
    assert j["baseline_n"] == 10 and j["change"] > j["threshold"] > 0
    assert j["scale"] == "log"
    assert j["evidence"].startswith("9 ms vs median 5.012 ms (+79.6 %) of 10 runs; threshold +32.6 % = max(25 % "
                                    "relative, 3.95 x spread of log values 0.0714, floor 0.1 ms) [noise]")


def test_noise_only_is_unchanged_for_every_seed():
    # values drawn from the same distribution as the baseline: never a verdict
    for seed in range(200):
        base = noisy(5.0, 0.08, 10, seed)
        value = noisy(5.0, 0.08, 1, seed + 1000)[0]
        assert judge(value, base, P99)["verdict"] == Judgement.UNCHANGED, seed


def test_noisy_history_widens_the_threshold():
    # a very noisy track: +40 % is within k x spread, so it is not called a regression
    base = [5.0, 8.0, 3.5, 7.0, 4.0, 6.5, 3.0, 7.5]
    j = judge(7.0, base, P99)
    assert j["verdict"] == Judgement.UNCHANGED
    level = math.sqrt(5.0 * 6.5)  # exp(median of the logs): geometric mean of the middle two
    assert j["baseline_median"] == pytest.approx(level)
    log_spread = robust_spread([math.log(b) for b in base])
    assert j["threshold"] == pytest.approx(level * (math.exp(noise_multiplier(3.0, 8) * log_spread) - 1))
    assert noise_multiplier(3.0, 9) == pytest.approx(4.0)


def test_improvement_latency_down_and_rate_up():
    assert judge(2.0, noisy(5.0, 0.05, 8, seed=3), P99)["verdict"] == Judgement.IMPROVED
    assert judge(1300.0, noisy(1000.0, 0.01, 8, seed=4), RATE)["verdict"] == Judgement.IMPROVED


def test_rate_down_is_a_regression():
    j = judge(800.0, noisy(1000.0, 0.01, 8, seed=5), RATE)
    assert j["verdict"] == Judgement.REGRESSED and j["change"] < 0


def test_too_little_history():
    j = judge(100.0, [5.0, 5.1], P99)
    assert j["verdict"] == Judgement.INSUFFICIENT and j["baseline_n"] == 2
    assert "3 needed" in j["evidence"]
    assert judge(5.0, [5.0, 5.0, 5.0], P99, Rule(min_runs=5))["verdict"] == Judgement.INSUFFICIENT
    assert judge(None, [5.0] * 5, P99)["verdict"] == Judgement.NO_DATA


def test_relative_threshold_and_floor():
    # identical baseline: spread 0, so the relative threshold (25 %) decides
    assert judge(6.2, [5.0] * 5, P99)["verdict"] == Judgement.UNCHANGED
    assert judge(6.3, [5.0] * 5, P99)["verdict"] == Judgement.REGRESSED
    # tiny latencies: the absolute floor (0.1 ms) keeps sub-floor changes unchanged
    assert judge(0.15, [0.05] * 5, P99)["verdict"] == Judgement.UNCHANGED


def test_baseline_is_the_last_n_runs():
    # old runs were slow, the last 10 are fast: today's fast value is unchanged
    base = [50.0] * 20 + [5.0] * 10
    assert judge(5.1, base, P99, Rule(baseline_runs=10))["verdict"] == Judgement.UNCHANGED
    assert judge(5.1, base, P99, Rule(baseline_runs=30))["verdict"] == Judgement.IMPROVED


def history_row(run: int, p99: float, version: str = "3.8.0", status: str = "ok", **kw) -> dict:
    row = {"run_key": f"dag__scheduled__{run:03d}", "run_ts": f"2026-11-{run:02d}T00:00:00+00:00",
           "broker": "kafka", "broker_version": version, "workload": "w", "variant": "fsync-on",
           "driver": "kafka-latency", "environment": "local", "target_rate_msg_s": 1000.0, "status": status,
           "publish_latency_p99_ms": p99, "publish_rate_msg_s": 1000.0}
    row.update(kw)
    return row


def test_verdicts_for_run_uses_only_earlier_ok_runs_of_the_same_track():
    history = [history_row(i, 5.0 + 0.1 * (i % 3)) for i in range(1, 8)]
    history += [
        history_row(8, 500.0, status="partial: worker x has no end record"),  # not ok: never a baseline
        history_row(9, 500.0, version="4.0.0"),  # another version: another track
        history_row(10, 500.0, environment="aws"),  # another environment
        history_row(11, 500.0, target_rate_msg_s=5000.0),  # another rate
        history_row(20, 1.0),  # later run: never a baseline of an earlier one
    ]
    current = history_row(12, 9.0)
    history.append(current)  # the run itself is in the history: ignored as baseline
    out = {v.metric: v for v in verdicts_for_run([current], history)}
    assert set(out) == {m.column for m in METRICS}
    p99 = out["publish_latency_p99_ms"]
    assert p99.verdict == Judgement.REGRESSED and p99.baseline_n == 7
    assert p99.baseline_runs == [f"dag__scheduled__{i:03d}" for i in range(1, 8)]
    assert out["publish_rate_msg_s"].verdict == Judgement.UNCHANGED
    # metrics the history does not carry: no data for this run
    assert out["e2e_latency_p99_ms"].verdict == Judgement.NO_DATA


def test_another_client_library_is_never_the_baseline():
    # seven runs through kafka-python, whose p99 is its own per-message Python work; then confluent-kafka
    history = [history_row(i, 50.0 + i % 3, client_library="kafka-python") for i in range(1, 8)]
    history += [history_row(i, 5.0 + 0.1 * (i % 2), client_library="confluent-kafka") for i in range(8, 12)]
    current = history_row(12, 5.0, client_library="confluent-kafka")
    p99 = {v.metric: v for v in verdicts_for_run([current], history + [current])}["publish_latency_p99_ms"]
    assert p99.baseline_runs == [f"dag__scheduled__{i:03d}" for i in range(8, 12)]
    assert p99.verdict == Judgement.UNCHANGED  # not "improved" against the kafka-python runs
    first = history_row(8, 5.0, client_library="confluent-kafka")
    out = {v.metric: v for v in verdicts_for_run([first], history[:7] + [first])}
    assert out["publish_latency_p99_ms"].verdict == Judgement.INSUFFICIENT


def test_first_runs_of_a_new_version_have_insufficient_history():
    history = [history_row(i, 5.0) for i in range(1, 8)]
    current = history_row(8, 5.0, version="4.0.0")
    out = {v.metric: v for v in verdicts_for_run([current], history + [current])}
    assert out["publish_latency_p99_ms"].verdict == Judgement.INSUFFICIENT


# -- validity: invalid rows are never a baseline and never judged ---------------------------

CLIENT_BOUND = ("client-bound: client process CPU 97 % (>= 85 %: about one core is the ceiling of one Python "
                "process); publish-delay p99 1,458.0 ms > 50 ms: the producers did not keep their send schedule")


def test_invalid_runs_are_excluded_from_the_baseline():
    # five quiet runs at 3.9 ms, then two overlapping runs at 1,458 ms that were flagged invalid
    history = [history_row(i, 3.9 + 0.05 * (i % 2)) for i in range(1, 6)]
    history += [history_row(i, 1458.0, status=f"invalid: {CLIENT_BOUND}", invalid_reasons=CLIENT_BOUND,
                            publish_rate_msg_s=4849.0) for i in (6, 7)]
    current = history_row(8, 4.0)
    out = {v.metric: v for v in verdicts_for_run([current], history + [current])}
    p99 = out["publish_latency_p99_ms"]
    # had the invalid runs been in the baseline, the median of 7 would still be 3.9-ish, but
    # the spread would be huge; here it is computed from the five ok runs only
    assert p99.baseline_n == 5 and p99.baseline_runs == [f"dag__scheduled__{i:03d}" for i in range(1, 6)]
    assert p99.baseline_median == pytest.approx(3.95) and p99.baseline_spread < 0.1
    assert p99.verdict == Judgement.UNCHANGED
    assert "2 earlier run(s) of this track not ok" in p99.evidence
    # three ok runs and four invalid ones: too little valid history
    short = [history_row(i, 3.9) for i in (1, 2)] + history[5:]
    out = {v.metric: v for v in verdicts_for_run([current], short + [current])}
    assert out["publish_latency_p99_ms"].verdict == Judgement.INSUFFICIENT


def test_an_invalid_current_row_gets_no_verdict():
    history = [history_row(i, 3.9) for i in range(1, 8)]
    reasons = CLIENT_BOUND + "; contended: another brokerbench run (/srv/state/other) on localhost during the phase"
    current = history_row(8, 1458.0, status=f"invalid: {reasons}", invalid_reasons=reasons)
    out = verdicts_for_run([current], history + [current])
    assert len(out) == 1
    v = out[0]
    assert v.verdict == f"not judged: invalid ({reasons})"
    assert v.metric == "(all metrics)" and v.value is None and v.baseline_n == 0
    assert not any(x.verdict == Judgement.REGRESSED for x in out)  # 1,458 ms vs 3.9 ms is not called a regression
    assert ("validity rule(s): client-bound (the load generator limited the result), publish delay above the "
            "schedule rule, another brokerbench run on a host") in v.evidence
    assert counts(out) == {"not judged: invalid": 1}


def test_a_partial_current_row_gets_no_verdict_and_rules_are_named_per_worker():
    history = [history_row(i, 3.9) for i in range(1, 8)]
    status = ("partial: worker w2 has no end record | invalid: worker w1: publish rate 10 msg/s is 1.0 % of "
              "the target 1,000 msg/s (minimum 95 % for a fixed-rate workload)")
    current = history_row(8, 3.9, status=status)
    (v,) = verdicts_for_run([current], history + [current])
    assert v.verdict.startswith("not judged: partial (worker w2 has no end record | invalid: ")
    assert "incomplete" in v.evidence and "validity rule(s): publish rate below target" in v.evidence
    assert validity_rules("worker w1: publish rate 10 msg/s is 1.0 %; worker w2: foreign load: mean 43 %") == [
        "publish rate below target", "foreign load on a host"]


# -- the threshold rule on log values --------------------------------------------------------

SHIPPED_P99 = next(m for m in METRICS if m.column == "publish_latency_p99_ms")
SHIPPED_RATE = next(m for m in METRICS if m.column == "publish_rate_msg_s")


def lognormal(level: float, sigma: float, n: int, rng: random.Random) -> list[float]:
    return [level * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]


def linear_rule_regressed(value: float, base: list[float], metric: Metric, rule: Rule = Rule()) -> bool:
    """The former threshold rule, on the values themselves: value - median > max(relative x median,
    k x (1 + 1/sqrt n) x 1.4826 x MAD, floor)."""
    centre = sorted(base)[len(base) // 2] if len(base) % 2 else median_of(base)
    threshold = max(metric.relative * abs(centre), noise_multiplier(rule.k, len(base)) * robust_spread(base),
                    metric.floor)
    return value - centre > threshold


def median_of(values: list[float]) -> float:
    s = sorted(values)
    return (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def test_lognormal_noise_without_change_false_alarms_below_the_linear_rule():
    # the p99 noise measured under load (robust CV 63 %: sigma = ln 1.631), no change: every
    # `regressed` is a false alarm; the former linear rule on the same draws for comparison
    sigma = math.log1p(0.631)
    runs = 4000
    for n in (10, 20):
        rng = random.Random(20261123)
        log_alarms = linear_alarms = 0
        verdicts: dict[str, int] = {}
        for _ in range(runs):
            base = lognormal(40.0, sigma, n, rng)
            value = lognormal(40.0, sigma, 1, rng)[0]
            j = judge(value, base, SHIPPED_P99)
            assert j["scale"] == "log"
            verdicts[j["verdict"]] = verdicts.get(j["verdict"], 0) + 1
            log_alarms += j["verdict"] == Judgement.REGRESSED
            linear_alarms += linear_rule_regressed(value, base, SHIPPED_P99)
        # at seed 20261123: n = 10 -> 44 (log) vs 172 (linear) of 4000; n = 20 -> 21 vs 142
        assert log_alarms < linear_alarms / 3, (n, log_alarms, linear_alarms)
        assert 100.0 * linear_alarms / runs > 3.0, (n, log_alarms, linear_alarms)  # what the log rule fixes
        assert verdicts.get(Judgement.UNCHANGED, 0) >= 0.97 * runs, (n, verdicts)
        if n == 20:  # baselines as long as in bench/detection_power.py: the goal of at most 1 per 100 runs
            assert 100.0 * log_alarms / runs <= 1.0, (n, log_alarms, linear_alarms)
    # at 2 % noise (where the goal of issue 10 holds): one series of 2,020 runs, each judged against the
    # 20 before it: no verdict but unchanged at all
    rng = random.Random(7)
    series = lognormal(10.0, math.log1p(0.02), 2020, rng)
    out = [judge(series[i], series[i - 20:i], SHIPPED_P99)["verdict"] for i in range(20, len(series))]
    assert out == [Judgement.UNCHANGED] * 2000


def test_lognormal_step_of_25_percent_is_regressed():
    rng = random.Random(11)
    base = lognormal(10.0, math.log1p(0.03), 10, rng)
    j = judge(10.0 * 1.25, base, SHIPPED_P99)
    assert j["verdict"] == Judgement.REGRESSED and j["scale"] == "log"
    assert j["change_percent"] == pytest.approx(100.0 * (12.5 / j["baseline_median"] - 1))
    assert j["change"] > j["threshold"] > 0
    assert " ms vs median " in j["evidence"] and "spread of log values" in j["evidence"]
    # the same step at 1 ms and at 300 ms: the same verdict (the rule is scale-free above the floor)
    for scale in (0.1, 30.0):
        assert judge(12.5 * scale, [b * scale for b in base], SHIPPED_P99)["verdict"] == Judgement.REGRESSED


def test_rate_drop_of_20_percent_is_regressed_and_a_rise_improved():
    rng = random.Random(12)
    base = lognormal(50_000.0, math.log1p(0.02), 10, rng)
    down = judge(40_000.0, base, SHIPPED_RATE)
    assert down["verdict"] == Judgement.REGRESSED and down["change"] < 0 and down["change_percent"] < -15
    assert "msg/s vs median" in down["evidence"] and "threshold -" in down["evidence"]
    assert judge(60_000.0, base, SHIPPED_RATE)["verdict"] == Judgement.IMPROVED
    # the same +20 % / -20 % on a latency: the other way round (direction per metric)
    assert judge(8.0, [10.0] * 5, SHIPPED_P99)["verdict"] == Judgement.IMPROVED
    assert judge(12.0, [10.0] * 5, SHIPPED_P99)["verdict"] == Judgement.REGRESSED


def test_relative_term_keeps_its_linear_meaning_in_both_directions():
    # identical baseline (no noise): the relative term alone decides, as a fraction of the level
    assert judge(10.0 * 0.93, [10.0] * 5, SHIPPED_P99)["verdict"] == Judgement.UNCHANGED   # -7 % < 8 %
    assert judge(10.0 * 0.91, [10.0] * 5, SHIPPED_P99)["verdict"] == Judgement.IMPROVED    # -9 %
    assert judge(1000.0 * 0.98, [1000.0] * 5, SHIPPED_RATE)["verdict"] == Judgement.UNCHANGED
    assert judge(1000.0 * 0.96, [1000.0] * 5, SHIPPED_RATE)["verdict"] == Judgement.REGRESSED


def test_floor_applies_to_the_absolute_difference():
    # 0.05 ms -> 0.12 ms is +140 % but only 0.07 ms: below the p99 floor of 0.1 ms
    j = judge(0.12, [0.05] * 5, SHIPPED_P99)
    assert j["verdict"] == Judgement.UNCHANGED and "[floor]" in j["evidence"]
    assert j["threshold"] == pytest.approx(0.1)
    assert judge(0.16, [0.05] * 5, SHIPPED_P99)["verdict"] == Judgement.REGRESSED
    # downwards a floor above the level can never be crossed
    low = judge(0.01, [0.05] * 5, SHIPPED_P99)
    assert low["verdict"] == Judgement.UNCHANGED and "-100 % (never)" in low["evidence"]


def test_series_with_zeros_falls_back_to_the_linear_rule():
    count = Metric("errors_total", "lower", 0.10, 1.0)
    base = [0.0, 1.0, 0.0, 2.0, 1.0, 0.0, 1.0]
    j = judge(2.0, base, count)
    assert j["scale"] == "linear" and j["verdict"] == Judgement.UNCHANGED
    assert "linear rule: 3 value(s) <= 0 in the series, so no log values" in j["evidence"]
    assert j["baseline_median"] == 1.0 and j["threshold"] == pytest.approx(
        noise_multiplier(3.0, 7) * robust_spread(base))
    assert judge(20.0, base, count)["verdict"] == Judgement.REGRESSED
    # a current value of 0 against a positive baseline: linear too (no log of 0)
    z = judge(0.0, [1000.0, 1010.0, 990.0, 1000.0], SHIPPED_RATE)
    assert z["scale"] == "linear" and z["verdict"] == Judgement.REGRESSED
    assert "1 value(s) <= 0" in z["evidence"]
    # missing and non-finite baseline values are left out, not zeros
    m = judge(10.0, [10.0, None, float("nan"), 10.0, "x", 10.0], SHIPPED_P99)
    assert m["scale"] == "log" and m["baseline_n"] == 3 and m["verdict"] == Judgement.UNCHANGED


def test_series_with_zeros_in_verdicts_for_run_says_why_no_change_point():
    history = [history_row(i, 5.0, publish_rate_msg_s=0.0 if i % 2 else 1000.0) for i in range(1, 10)]
    current = history_row(10, 5.0, publish_rate_msg_s=1000.0)
    out = {v.metric: v for v in verdicts_for_run([current], history + [current])}
    rate = out["publish_rate_msg_s"]
    assert rate.rule == "threshold"
    assert "linear rule" in rate.evidence and "no change-point search" in rate.evidence
    assert out["publish_latency_p99_ms"].verdict == Judgement.UNCHANGED
