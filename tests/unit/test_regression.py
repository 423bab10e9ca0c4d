"""The regression rule on synthetic histories (include/brokerbench/regression.py)."""

from __future__ import annotations

import random

import pytest

from brokerbench.regression import (
    IMPROVED,
    INSUFFICIENT,
    METRICS,
    NO_DATA,
    REGRESSED,
    UNCHANGED,
    Metric,
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
    assert j["verdict"] == REGRESSED
    assert j["baseline_n"] == 10 and j["change"] > j["threshold"] > 0
    assert "median" in j["evidence"] and "threshold" in j["evidence"]


def test_noise_only_is_unchanged_for_every_seed():
    # values drawn from the same distribution as the baseline: never a verdict
    for seed in range(200):
        base = noisy(5.0, 0.08, 10, seed)
        value = noisy(5.0, 0.08, 1, seed + 1000)[0]
        assert judge(value, base, P99)["verdict"] == UNCHANGED, seed


def test_noisy_history_widens_the_threshold():
    # a very noisy track: +40 % is within k x spread, so it is not called a regression
    base = [5.0, 8.0, 3.5, 7.0, 4.0, 6.5, 3.0, 7.5]
    j = judge(7.0, base, P99)
    assert j["verdict"] == UNCHANGED
    assert j["threshold"] == pytest.approx(noise_multiplier(3.0, 8) * robust_spread(base))
    assert noise_multiplier(3.0, 9) == pytest.approx(4.0)


def test_improvement_latency_down_and_rate_up():
    assert judge(2.0, noisy(5.0, 0.05, 8, seed=3), P99)["verdict"] == IMPROVED
    assert judge(1300.0, noisy(1000.0, 0.01, 8, seed=4), RATE)["verdict"] == IMPROVED


def test_rate_down_is_a_regression():
    j = judge(800.0, noisy(1000.0, 0.01, 8, seed=5), RATE)
    assert j["verdict"] == REGRESSED and j["change"] < 0


def test_too_little_history():
    j = judge(100.0, [5.0, 5.1], P99)
    assert j["verdict"] == INSUFFICIENT and j["baseline_n"] == 2
    assert "3 needed" in j["evidence"]
    assert judge(5.0, [5.0, 5.0, 5.0], P99, Rule(min_runs=5))["verdict"] == INSUFFICIENT
    assert judge(None, [5.0] * 5, P99)["verdict"] == NO_DATA


def test_relative_threshold_and_floor():
    # identical baseline: spread 0, so the relative threshold (25 %) decides
    assert judge(6.2, [5.0] * 5, P99)["verdict"] == UNCHANGED
    assert judge(6.3, [5.0] * 5, P99)["verdict"] == REGRESSED
    # tiny latencies: the absolute floor (0.1 ms) keeps sub-floor changes unchanged
    assert judge(0.15, [0.05] * 5, P99)["verdict"] == UNCHANGED


def test_baseline_is_the_last_n_runs():
    # old runs were slow, the last 10 are fast: today's fast value is unchanged
    base = [50.0] * 20 + [5.0] * 10
    assert judge(5.1, base, P99, Rule(baseline_runs=10))["verdict"] == UNCHANGED
    assert judge(5.1, base, P99, Rule(baseline_runs=30))["verdict"] == IMPROVED


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
    assert p99.verdict == REGRESSED and p99.baseline_n == 7
    assert p99.baseline_runs == [f"dag__scheduled__{i:03d}" for i in range(1, 8)]
    assert out["publish_rate_msg_s"].verdict == UNCHANGED
    # metrics the history does not carry: no data for this run
    assert out["e2e_latency_p99_ms"].verdict == NO_DATA


def test_first_runs_of_a_new_version_have_insufficient_history():
    history = [history_row(i, 5.0) for i in range(1, 8)]
    current = history_row(8, 5.0, version="4.0.0")
    out = {v.metric: v for v in verdicts_for_run([current], history + [current])}
    assert out["publish_latency_p99_ms"].verdict == INSUFFICIENT


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
    assert p99.verdict == UNCHANGED
    assert "2 earlier run(s) of this track not ok" in p99.evidence
    # three ok runs and four invalid ones: too little valid history
    short = [history_row(i, 3.9) for i in (1, 2)] + history[5:]
    out = {v.metric: v for v in verdicts_for_run([current], short + [current])}
    assert out["publish_latency_p99_ms"].verdict == INSUFFICIENT


def test_an_invalid_current_row_gets_no_verdict():
    history = [history_row(i, 3.9) for i in range(1, 8)]
    reasons = CLIENT_BOUND + "; contended: another brokerbench run (/srv/state/other) on localhost during the phase"
    current = history_row(8, 1458.0, status=f"invalid: {reasons}", invalid_reasons=reasons)
    out = verdicts_for_run([current], history + [current])
    assert len(out) == 1
    v = out[0]
    assert v.verdict == f"not judged: invalid ({reasons})"
    assert v.metric == "(all metrics)" and v.value is None and v.baseline_n == 0
    assert not any(x.verdict == REGRESSED for x in out)  # 1,458 ms vs 3.9 ms is not called a regression
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
