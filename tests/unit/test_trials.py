"""Repeated trials inside one run: the plan, the param and suite field, the measured phase's order, the
combination (brokerbench.trials), the verdicts on combined rows and the report showing the trials."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from brokerbench.environments.base import BrokerEndpoint
from brokerbench.metrics import Judgement
from brokerbench.pipeline import benchmark, environment_lease
from brokerbench.pipeline.context import RunContext
from brokerbench.regression import ALL_METRICS, verdicts_for_run
from brokerbench.report.html import build_report, render_text_summary
from brokerbench.spec import SpecError, build_plan, load_suite
from brokerbench.spec.suite import Suite
from brokerbench.trials import combine, spread_columns, trials_of
from brokerbench.util import safe_name, split_trial, trial_id

SMOKE_ID = "smoke-1-topic-1-partition-100b"


# -- plan and validation ---------------------------------------------------------------------------------------


def test_a_plan_with_three_trials_has_three_items_per_workload_in_a_row():
    plan = build_plan(load_suite("smoke"), {"trials": 3, "brokers": ["rabbitmq", "kafka"]})
    assert plan.trials == 3
    assert len(plan.items) == 2 * 2 * 3  # brokers x variants x trials
    first = plan.items_for("kafka", "fsync-off")
    assert [i.workload.id for i in first] == [f"{SMOKE_ID}.trial{k}" for k in (1, 2, 3)]
    assert [(i.trial, i.trials, i.warms_up) for i in first] == [(1, 3, True), (2, 3, False), (3, 3, False)]
    assert {i.base_workload_id for i in first} == {SMOKE_ID}
    assert first[1].key == f"{SMOKE_ID}.trial2/kafka-latency/fsync-off"
    assert plan.deployments() == [("rabbitmq", "fsync-off"), ("rabbitmq", "fsync-on"),
                                  ("kafka", "fsync-off"), ("kafka", "fsync-on")]  # one deployment each
    # the plan travels as JSON between tasks
    again = type(plan).from_json(plan.to_json())
    assert [(i.workload.id, i.trial) for i in again.items] == [(i.workload.id, i.trial) for i in plan.items]


def test_one_trial_leaves_the_plan_as_it_was():
    for params in ({}, {"trials": 1}):
        plan = build_plan(load_suite("smoke"), params)
        assert plan.trials == 1
        assert [i.key for i in plan.items][:2] == [f"{SMOKE_ID}/kafka-latency/fsync-off",
                                                   f"{SMOKE_ID}/kafka-latency/fsync-on"]
        assert all(i.trial is None and i.warms_up and i.base_workload_id == SMOKE_ID for i in plan.items)


def test_the_suite_field_sets_trials_and_the_param_overrides_it():
    suite = load_suite("smoke").model_copy(update={"trials": 2})
    assert build_plan(suite, {"brokers": ["kafka"]}).trials == 2
    assert build_plan(suite, {"brokers": ["kafka"], "trials": 4}).trials == 4
    assert build_plan(suite, {"brokers": ["kafka"], "trials": None}).trials == 2  # empty = the suite's


@pytest.mark.parametrize("bad, message", [
    (0, "must be >= 1 (got 0)"), (21, "must be <= 20 (got 21)"),
    (True, "must be a whole number from 1 to 20 (got True)"), (2.5, "must be a whole number from 1 to 20"),
    ("many", "valid integer"),
])
def test_a_bad_trials_param_is_refused_naming_the_field(bad, message):
    with pytest.raises(SpecError) as e:
        build_plan(load_suite("smoke"), {"trials": bad})
    assert e.value.field == "trials" and e.value.file is None
    assert message in str(e.value) and str(e.value).startswith("field 'trials': ")


def test_a_bad_trials_field_in_a_suite_file_is_refused_naming_file_and_field(tmp_path):
    suites = tmp_path / "suites"
    suites.mkdir()
    text = (Path(load_suite("smoke").source).read_text() + "trials: 50\n")
    (suites / "many.yaml").write_text(text)
    with pytest.raises(SpecError) as e:
        load_suite(suites / "many.yaml")
    assert e.value.field == "trials" and "many.yaml" in str(e.value) and "must be <= 20 (got 50)" in str(e.value)
    with pytest.raises(Exception):
        Suite.model_validate({"name": "x", "workloads": ["w"], "brokers": {"kafka": "k"}, "variants": ["v"],
                              "trials": 2.5})


def test_a_workload_file_may_not_end_in_the_trial_suffix(tmp_path):
    from brokerbench.spec import load_workload

    src = Path(load_suite("smoke").source).parent.parent / "workloads" / f"{SMOKE_ID}.yaml"
    bad = tmp_path / "x.trial2.yaml"
    bad.write_text(src.read_text())
    with pytest.raises(SpecError, match="reserved|names one trial"):
        load_workload(bad)


def test_the_trial_suffix_survives_every_name_it_goes_through():
    wid = trial_id(SMOKE_ID, 12)
    assert wid == f"{SMOKE_ID}.trial12" and split_trial(wid) == (SMOKE_ID, 12)
    assert split_trial(SMOKE_ID) == (SMOKE_ID, None) and split_trial("x.trial0") == ("x.trial0", None)
    from brokerbench.spec.common import path_safe

    # result paths, S3 keys, phase labels (fields joined by "__") and the history's workload= partition
    assert safe_name(wid) == wid and path_safe(wid) == wid and "__" not in wid and "=" not in wid


# -- the measured phase: trials back to back after one warm-up ------------------------------------------------


class FakeEnv:
    def __init__(self):
        self.jobs = []

    def stop_workers(self):
        return []

    def health(self, broker):
        pass

    def before_phase(self, phase, label):
        return None

    def start_broker_metrics(self, label):
        return None

    def run_workers(self, jobs, outs, timeout_s):
        for job, out in zip(jobs, outs):
            self.jobs.append((job["phase"], job["workload_id"], tuple(job["topics"]), tuple(job["subscriptions"])))
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            Path(out).write_text(json.dumps({"record": "end", "status": "ok"}) + "\n")
        return [{"worker": j["worker"], "returncode": 0} for j in jobs]


def test_the_measured_phase_runs_the_trials_back_to_back_after_one_warm_up(tmp_path, monkeypatch):
    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": str(tmp_path)})
    plan = build_plan(load_suite("smoke"), {"trials": 3, "brokers": ["rabbitmq"], "variants": ["fsync-off"],
                                            "results_root": str(tmp_path)})
    ctx.plan_path.parent.mkdir(parents=True, exist_ok=True)
    ctx.plan_path.write_text(plan.to_json())
    env = FakeEnv()
    monkeypatch.setattr(ctx, "environment", lambda side=None: env)
    monkeypatch.setattr(benchmark, "_endpoint",
                        lambda *a: BrokerEndpoint("rabbitmq", "rabbitmq", "3", amqp_uris=["amqp://x"]))
    monkeypatch.setattr(environment_lease, "hold_environment", lambda ctx: None)
    monkeypatch.setattr(benchmark, "worker_processes", lambda ctx: 1)
    benchmark.run_phase(ctx, "rabbitmq", "fsync-off", "warmup")
    benchmark.run_phase(ctx, "rabbitmq", "fsync-off", "measure")
    phases = [(p, w) for p, w, _, _ in env.jobs]
    assert phases == [("warmup", f"{SMOKE_ID}.trial1")] + [("measure", f"{SMOKE_ID}.trial{k}") for k in (1, 2, 3)]
    # every trial measures on the warmed-up topics and subscriptions of the first
    assert len({(t, s) for _, _, t, s in env.jobs}) == 1
    for k in (1, 2, 3):
        assert (ctx.run_dir / "raw" / f"{SMOKE_ID}.trial{k}" / "rabbitmq-default" / "fsync-off" / "measure"
                / "localhost-0.jsonl").exists()
    minutes = plan.items[0].workload.test_duration_minutes
    warm = plan.items[0].workload.warmup_duration_minutes
    assert benchmark.phase_timeout_s(ctx, "rabbitmq", "fsync-off", "measure") == pytest.approx(
        3 * (minutes * 60 + benchmark.LEAD_IN_MAX_S + benchmark.WORKER_GRACE_S) + 300)
    assert benchmark.phase_timeout_s(ctx, "rabbitmq", "fsync-off", "warmup") == pytest.approx(
        warm * 60 + benchmark.WORKER_GRACE_S + 300)


# -- the combination ----------------------------------------------------------------------------------------


def row(k, p99, rate=1000.0, status="ok", reasons=None, run="r1", ts="2026-01-05T00:00:00", workload=SMOKE_ID,
        sent=10000):
    return {"workload": trial_id(workload, k) if k else workload, "broker": "kafka", "driver": "kafka-latency",
            "variant": "fsync-off", "broker_version": "1.0", "environment": "local", "run_key": run, "run_ts": ts,
            "target_rate_msg_s": 1000.0, "publish_rate_msg_s": rate, "consume_rate_msg_s": rate,
            "publish_latency_p99_ms": p99, "e2e_latency_p99_ms": 2 * p99, "messages_sent": sent,
            "client_hosts": "localhost", "invalid_reasons": reasons, "status": status}


def test_the_run_value_is_the_median_of_the_trials_with_their_min_and_max():
    [c] = combine([row(1, 5.0), row(2, 3.0), row(3, 40.0)])
    assert c["workload"] == SMOKE_ID and c["trials"] == 3 and c["trials_valid"] == 3 and c["status"] == "ok"
    assert c["publish_latency_p99_ms"] == 5.0 and c["e2e_latency_p99_ms"] == 10.0
    lo, hi = spread_columns("publish_latency_p99_ms")
    assert (lo, hi) == ("publish_latency_p99_trials_min_ms", "publish_latency_p99_trials_max_ms")
    assert (c[lo], c[hi]) == (3.0, 40.0)
    assert spread_columns("publish_rate_msg_s") == ("publish_rate_trials_min_msg_s", "publish_rate_trials_max_msg_s")
    assert c["messages_sent"] == 30000 and c["target_rate_msg_s"] == 1000.0
    assert c["trial_statuses"] == "trial1: ok; trial2: ok; trial3: ok"


def test_an_even_count_takes_a_trial_value_never_an_average_of_two_percentiles():
    [c] = combine([row(1, 4.0), row(2, 10.0)])
    assert c["publish_latency_p99_ms"] == 4.0  # the lower middle trial, not 7.0


def test_invalid_trials_are_left_out_of_the_median_and_named():
    rows = [row(1, 5.0), row(2, 300.0, status="invalid: foreign load: 60 % CPU", reasons="foreign load: 60 % CPU"),
            row(3, 7.0), row(4, 6.0, status="partial: worker w has no end record")]
    [c] = combine(rows)
    assert c["status"] == "ok" and c["trials"] == 4 and c["trials_valid"] == 2
    assert c["publish_latency_p99_ms"] == 5.0  # median_low of 5 and 7; 300 and 6 are not valid trials
    lo, hi = spread_columns("publish_latency_p99_ms")
    assert (c[lo], c[hi]) == (5.0, 7.0)
    assert c["messages_sent"] == 20000
    assert "trial2: invalid: foreign load" in c["trial_statuses"] and "trial4: partial" in c["trial_statuses"]


def test_no_valid_trial_makes_the_combined_row_invalid_naming_the_trials():
    rows = [row(1, 5.0, status="invalid: contended: another brokerbench run", reasons="contended: another run"),
            row(2, 9.0, status="invalid: foreign load: 60 %", reasons="foreign load: 60 %")]
    [c] = combine(rows)
    assert c["status"].startswith("invalid: no valid trial of 2 (trial1: invalid: contended")
    assert "trial2: invalid: foreign load" in c["status"]
    assert c["invalid_reasons"] == "contended: another run; foreign load: 60 %"
    assert c["trials_valid"] == 0 and c["publish_latency_p99_ms"] == 5.0  # shown, never judged
    [v] = verdicts_for_run([c], [c])
    assert v.metric == ALL_METRICS and v.verdict.startswith("not judged: invalid (no valid trial of 2")
    assert "another brokerbench run on a host" in v.evidence and "foreign load on a host" in v.evidence


def test_rows_without_trials_pass_through_and_groups_keep_apart():
    plain = row(None, 1.0)
    other_run = [row(1, 2.0, run="r2"), row(2, 4.0, run="r2")]
    out = combine([plain, row(1, 5.0), *other_run, row(2, 3.0)])
    assert out[0] == plain and "trials" not in out[0]
    assert [(r["run_key"], r["publish_latency_p99_ms"], r["trials"]) for r in out[1:]] == [("r1", 3.0, 2),
                                                                                            ("r2", 2.0, 2)]
    assert [r["workload"] for r in trials_of(out[1], [plain, row(2, 3.0), row(1, 5.0), *other_run])] == [
        f"{SMOKE_ID}.trial1", f"{SMOKE_ID}.trial2"]
    assert trials_of(plain, [plain]) == []


def test_verdicts_judge_one_combined_value_per_run_and_track():
    history = []
    for day, p99 in enumerate((5.0, 5.1, 4.9, 5.0), start=1):  # earlier runs of one trial each
        history.append(row(None, p99, run=f"old{day}", ts=f"2026-01-0{day}T00:00:00"))
    # this run: three trials, one of them far off; the median 5.05 is within the threshold
    this = [row(1, 5.05), row(2, 50.0), row(3, 5.0 + 0.2)]
    combined = combine(history + this)
    current = [r for r in combined if r["run_key"] == "r1"]
    verdicts = verdicts_for_run(current, combined)
    p99 = [v for v in verdicts if v.metric == "publish_latency_p99_ms"]
    assert len(p99) == 1 and p99[0].workload == SMOKE_ID
    assert p99[0].value == 5.2 and p99[0].verdict == "unchanged" and p99[0].baseline_n == 4
    assert "median of 3 valid of 3 trials" in p99[0].evidence
    # a later run's baseline holds this run once, with its combined value
    later = row(None, 5.0, run="r9", ts="2026-01-09T00:00:00")
    verdicts = verdicts_for_run([later], combined + [later])
    v = next(v for v in verdicts if v.metric == "publish_latency_p99_ms")
    assert v.baseline_n == 5 and "r1" in v.baseline_runs and v.verdict != Judgement.INSUFFICIENT


# -- the report -------------------------------------------------------------------------------------------------


def test_the_report_shows_the_combined_value_and_every_trial(tmp_path):
    run = tmp_path / "runs" / "brokerbench_smoke" / "manual__1"
    rows = [row(1, 5.0), row(2, 3.0), row(3, 40.0, status="invalid: foreign load: 60 %", reasons="foreign load: 60 %")]
    columns = list(rows[0])
    (run / "summary").mkdir(parents=True)
    with open(run / "summary" / "summary.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    html = build_report(run).read_text()
    assert "median of 3 trials (2 valid)" in html
    assert "3.00..5.00" in html  # the valid trials' min..max under the combined p99
    assert f"Trials of {SMOKE_ID} / kafka / fsync-off" in html
    for k in (1, 2, 3):
        assert f"{SMOKE_ID}.trial{k}" in html
    assert "trial3: invalid: foreign load" in html
    text = render_text_summary(run)
    assert "Trials combined" in text and "median of 3 trials (2 valid)" in text
