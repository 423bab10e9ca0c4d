"""brokerbench.outcome: every way a run ends is one outcome, with its own exit code, never misread."""

import pytest

from brokerbench.metrics import Judgement
from brokerbench.outcome import (
    EXIT_CODES,
    FAIL_ON,
    Outcome,
    RunOutcome,
    exit_code_for,
    outcome_of,
    read_outcome,
    write_outcome,
)


def _v(verdict, broker="kafka", variant="fsync-on", metric="publish_latency_p99_ms"):
    return {"workload": "w", "broker": broker, "variant": variant, "metric": metric, "verdict": verdict}


INVALID = "not judged: invalid (foreign load 40 % of a core)"


def test_every_row_invalid_is_not_judged_never_no_regression():
    verdicts = [_v(INVALID, b, v, "all") for b in ("kafka", "rabbitmq") for v in ("fsync-on", "fsync-off")]
    o = outcome_of(verdicts)
    assert o.outcome == Outcome.NOT_JUDGED and o.exit_code == 4
    assert o.headline == "NOT JUDGED: no valid measurement (4 of 4 track(s) invalid, partial or without data)"
    assert (o.tracks, o.tracks_judged, o.regressed) == (4, 0, 0)


def test_no_baseline_yet_is_not_judged_and_says_why():
    o = outcome_of([_v(Judgement.INSUFFICIENT), _v(Judgement.INSUFFICIENT, metric="e2e_latency_p99_ms")])
    assert o.outcome == Outcome.NOT_JUDGED
    assert o.reason == "no baseline yet (1 of 1 track(s) have too few earlier valid runs)"
    mixed = outcome_of([_v(Judgement.INSUFFICIENT), _v(INVALID, broker="pulsar")])
    assert mixed.reason.startswith("no valid measurement with a baseline (1 of 2 track(s) invalid")


def test_one_judged_track_is_no_regression_with_the_count():
    o = outcome_of([_v(Judgement.UNCHANGED), _v(Judgement.IMPROVED, metric="e2e_latency_p99_ms"),
                    _v(INVALID, broker="pulsar")])
    assert o.outcome == Outcome.NO_REGRESSION and o.exit_code == 0
    assert o.reason == "1 of 2 track(s) judged, none regressed, 1 metric(s) improved"


def test_a_regression_is_found_whatever_else_was_judged():
    o = outcome_of([_v(Judgement.REGRESSED), _v(Judgement.UNCHANGED, broker="rabbitmq")])
    assert o.outcome == Outcome.REGRESSION and o.exit_code == 3
    assert o.reason == "1 metric(s) regressed in 1 of 2 track(s) (2 judged)"


def test_a_failed_step_wins_and_names_the_regressions_too():
    o = outcome_of([_v(Judgement.REGRESSED)], ["benchmark.pulsar__fsync_on.measure", "analysis.regression_gate"])
    assert o.outcome == Outcome.FAILED and o.exit_code == 1
    # the gate fails because of the regression: not a failed step
    assert o.failed_tasks == ["benchmark.pulsar__fsync_on.measure"]
    assert o.reason == ("1 task(s) failed: benchmark.pulsar__fsync_on.measure; also 1 metric(s) regressed in "
                        "1 track(s)")
    assert outcome_of([_v(Judgement.REGRESSED)], ["analysis.regression_gate"]).outcome == Outcome.REGRESSION


def test_no_measurements_and_no_verdicts_are_not_judged():
    assert outcome_of(None, has_measurements=False).reason == "no measurements (no measured phase wrote a result)"
    assert outcome_of(None).reason == "no verdicts (the history or verdicts step did not write them)"


def test_a_run_of_sweeps_only_is_not_judged_and_says_why():
    o = outcome_of(None, sweep_only=True)
    assert o.outcome == Outcome.NOT_JUDGED and o.exit_code == 4
    assert o.reason == ("throughput sweeps only: a sweep is not judged against the history (its steps are in "
                        "summary/sweep.csv)")
    assert outcome_of(None, ["benchmark.kafka__fsync_off.measure"], sweep_only=True).outcome == Outcome.FAILED


def test_exit_codes_are_distinct():
    assert sorted(EXIT_CODES.values()) == [0, 1, 3, 4]


def test_the_command_lines_exit_codes_by_default_and_strict():
    """By default a run that was not judged (a first run: no baseline yet) exits 0; --fail-on not-judged gives
    the strict table, which is EXIT_CODES (outcome.json's exit_code)."""
    assert FAIL_ON == ("regression", "not-judged")
    default = {o: exit_code_for(o) for o in Outcome}
    strict = {o: exit_code_for(o, "not-judged") for o in Outcome}
    assert default == {Outcome.NO_REGRESSION: 0, Outcome.NOT_JUDGED: 0, Outcome.REGRESSION: 3, Outcome.FAILED: 1}
    assert strict == EXIT_CODES == {Outcome.NO_REGRESSION: 0, Outcome.NOT_JUDGED: 4, Outcome.REGRESSION: 3,
                                    Outcome.FAILED: 1}
    assert default == {o: exit_code_for(o, "regression") for o in Outcome}
    with pytest.raises(ValueError, match="fail_on must be one of regression, not-judged"):
        exit_code_for(Outcome.NOT_JUDGED, "never")


@pytest.mark.parametrize("verdicts", [[_v(Judgement.REGRESSED)], [_v(INVALID)], [_v(Judgement.UNCHANGED)]])
def test_outcome_file_round_trip(tmp_path, verdicts):
    o = outcome_of(verdicts)
    write_outcome(tmp_path, o)
    back = read_outcome(tmp_path)
    assert back == o and isinstance(back, RunOutcome)
    assert read_outcome(tmp_path / "nothing") is None
