"""brokerbench.pipeline.analysis: the regression gate's three outcomes, what counts as measured, and what the Spark
steps submit."""

import json

import pytest

from brokerbench.metrics import Judgement
from brokerbench.pipeline import analysis
from brokerbench.pipeline.context import RunContext


def _run(tmp_path, verdicts, gate=None):
    params = {"results_root": str(tmp_path), **({"regression_gate": gate} if gate else {})}
    ctx = RunContext("brokerbench_nightly", "scheduled__1", "smoke", params)
    (ctx.run_dir / "summary").mkdir(parents=True)
    (ctx.run_dir / "summary" / "regression.json").write_text(json.dumps({"verdicts": verdicts}))
    return ctx


def _verdict(verdict):
    return {"workload": "w", "broker": "kafka", "variant": "fsync-on", "metric": "publish_latency_p99_ms",
            "verdict": verdict, "evidence": "e"}


def test_a_scheduled_run_with_a_regression_fails_the_gate(tmp_path):
    ctx = _run(tmp_path, [_verdict(Judgement.REGRESSED), _verdict(Judgement.UNCHANGED)])
    with pytest.raises(analysis.RegressionFound, match="1 metric"):
        analysis.regression_gate(ctx, "scheduled")
    assert analysis.regression_gate(ctx, "manual") == {"regressed": 1, "judged": 2, "gated": False,
                                                        "mode": "auto", "run_type": "manual"}


def test_never_gates_and_nothing_judged_is_said(tmp_path, caplog):
    ctx = _run(tmp_path, [_verdict(Judgement.REGRESSED)], gate="never")
    assert analysis.regression_gate(ctx, "scheduled")["gated"] is False
    ctx = _run(tmp_path / "b", [_verdict(Judgement.INSUFFICIENT)])
    with caplog.at_level("WARNING", logger="brokerbench"):
        assert analysis.regression_gate(ctx, "scheduled")["judged"] == 0
    assert "not judged: no baseline yet (1 of 1 track(s)" in caplog.text


def test_measured_means_a_measure_or_sweep_file(tmp_path):
    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": str(tmp_path)})
    warmup = ctx.run_dir / "raw" / "w" / "d" / "fsync-on" / "warmup"
    warmup.mkdir(parents=True)
    (warmup / "localhost-0.jsonl").write_text("{}\n")
    assert not analysis.has_measurements(ctx)
    measure = warmup.parent / "measure"
    measure.mkdir()
    (measure / "localhost-0.jsonl").write_text("{}\n")
    assert analysis.has_measurements(ctx)


@pytest.mark.parametrize("gate", ["never", "auto", "always"])
def test_the_gate_never_fails_a_run_without_verdicts(tmp_path, caplog, gate):
    ctx = RunContext("brokerbench_nightly", "scheduled__1", "smoke", {"results_root": str(tmp_path),
                                                                      "regression_gate": gate})
    with caplog.at_level("WARNING", logger="brokerbench"):
        checked = analysis.regression_gate(ctx, "scheduled")
    assert checked["not_judged"] == "no measurements" and checked["regressed"] == 0
    assert "not judged: no measurements" in caplog.text


def test_run_outcome_writes_the_outcome_and_says_it_last(tmp_path, caplog):
    ctx = _run(tmp_path, [_verdict("not judged: invalid (foreign load)")])
    measured = ctx.run_dir / "raw" / "w" / "kafka" / "fsync-on" / "measure"
    measured.mkdir(parents=True)
    (measured / "client-0.jsonl").write_text("{}\n")
    with caplog.at_level("INFO", logger="brokerbench"):
        result = analysis.run_outcome(ctx, [])
    assert result.outcome == "not judged"
    assert json.loads((ctx.run_dir / "summary" / "outcome.json").read_text())["exit_code"] == 4
    assert caplog.records[-1].getMessage() == ("OUTCOME: NOT JUDGED: no valid measurement (1 of 1 track(s) "
                                               "invalid, partial or without data)")
    stopped = analysis.run_outcome(ctx, [], stopped=True)
    assert stopped.outcome == "failed" and "(the run was stopped)" in stopped.reason


def test_run_outcome_asks_an_s3_stores_listing_whether_the_run_measured(tmp_path):
    """A task on another worker than the phases' has no raw/ of an s3:// store (not downloaded): the store's listing,
    held by the synced block as ctx.sync, says the run measured."""
    ctx = _run(tmp_path, [_verdict("not judged: invalid (foreign load)")])
    # no local raw/ and no store: as if nothing was measured
    assert analysis.run_outcome(ctx, []).headline == "NOT JUDGED: no measurements (no measured phase wrote a result)"

    class Listing:
        def listing(self, prefix):
            return [f"{prefix}w/kafka/fsync-on/measure/client-0.jsonl"]

    ctx.sync = Listing()
    result = analysis.run_outcome(ctx, [])
    assert result.headline == ("NOT JUDGED: no valid measurement (1 of 1 track(s) invalid, partial or without "
                               "data)"), result.headline


def test_the_spark_steps_decide_what_is_submitted(tmp_path):
    """aggregate_results submits the run's raw results into summary/, or refuses a run with nothing measured;
    append_history refuses a run without a summary, skips a sweep-only one, else writes run_meta.json and submits."""
    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": str(tmp_path)})
    calls = []

    def submit(args, results_root):
        calls.append((args, results_root))
        return "done"

    with pytest.raises(analysis.NothingToDo, match="nothing to aggregate"):
        analysis.aggregate_results(ctx, submit)
    (ctx.run_dir / "raw" / "w" / "d" / "v" / "measure").mkdir(parents=True)
    (ctx.run_dir / "raw" / "w" / "d" / "v" / "measure" / "h-0.jsonl").write_text("{}\n")
    assert analysis.aggregate_results(ctx, submit) == "done"
    assert calls.pop() == (["--run-dir", str(ctx.run_dir), "--out-dir", str(ctx.run_dir / "summary")], str(tmp_path))

    (ctx.run_dir / "summary").mkdir()
    with pytest.raises(analysis.NothingToDo, match="no summary"):
        analysis.append_history(ctx, "manual", "2026-11-02T00:00:00+00:00", submit)
    (ctx.run_dir / "summary" / "sweep.csv").write_text("step\n0\n")
    with pytest.raises(analysis.SweepOnly, match="sweep.csv"):
        analysis.append_history(ctx, "manual", "2026-11-02T00:00:00+00:00", submit)
    (ctx.run_dir / "summary" / "summary.parquet").write_bytes(b"PAR1")
    assert analysis.append_history(ctx, "manual", "2026-11-02T00:00:00+00:00", submit) == "done"
    assert calls == [(["--history-root", str(tmp_path / "history"), "--run-dir", str(ctx.run_dir)], None)]
    assert json.loads((ctx.run_dir / "summary" / "run_meta.json").read_text())["run_type"] == "manual"
