"""A/B in one run (param compare_with): the plan's ABBA order and shared topics, the refusals naming the field,
the A/B verdicts from a run's trial rows, the history leaving side B out, and the report showing the A/B table
first."""

from __future__ import annotations

import csv
import json
import random
import sys
from pathlib import Path

import pytest

from brokerbench import abtest
from brokerbench.ab_verdicts import RULE_AB, group_sides, verdicts
from brokerbench.history import read_history
from brokerbench.metrics import METRICS, Judgement
from brokerbench.report.html import build_report
from brokerbench.spec import SpecError, build_plan, load_suite
from brokerbench.spec.params import AB_DEFAULT_TRIALS, AB_MIN_TRIALS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.recording_env import RecordingEnv  # noqa: E402

SMOKE_ID = "smoke-1-topic-1-partition-100b"
SIDE_B = {"client_libraries": {"kafka": "confluent-kafka"}}


def ab_plan(**params):
    return build_plan(load_suite("smoke"), {"brokers": ["kafka"], "variants": ["fsync-off"],
                                            "compare_with": SIDE_B, **params})


def test_an_ab_plan_alternates_the_sides_in_abba_order_on_shared_topics():
    plan = ab_plan(trials=4)
    items = plan.items_for("kafka", "fsync-off")
    assert [(i.side, i.trial) for i in items] == [("A", 1), ("B", 1), ("B", 2), ("A", 2),
                                                  ("A", 3), ("B", 3), ("B", 4), ("A", 4)]
    assert [i.workload.id for i in items[:3]] == [f"{SMOKE_ID}.trial1", f"{SMOKE_ID}.B.trial1",
                                                  f"{SMOKE_ID}.B.trial2"]
    assert {i.client_library for i in items if i.side == "A"} == {"kafka-python"}
    assert {i.client_library for i in items if i.side == "B"} == {"confluent-kafka"}
    # one set of topics for both sides, each side's first trial warmed up; one deployment
    assert {i.base_workload_id for i in items} == {SMOKE_ID}
    assert [i.warms_up for i in items] == [True, True] + [False] * 6
    assert len({i.key for i in items}) == 8
    assert plan.deployments() == [("kafka", "fsync-off")]
    assert plan.compare_with == SIDE_B
    assert build_plan(load_suite("smoke"), json.loads(json.dumps(plan.params))).to_json() == plan.to_json()


def test_an_ab_run_takes_the_default_trials_and_refuses_too_few_naming_the_field():
    assert ab_plan().trials == AB_DEFAULT_TRIALS
    assert AB_MIN_TRIALS == abtest.min_trials_per_side(0.95)
    with pytest.raises(SpecError) as e:
        ab_plan(trials=AB_MIN_TRIALS - 1)
    assert e.value.field == "trials" and f"at least {AB_MIN_TRIALS} trials" in e.value.message


@pytest.mark.parametrize("side_b, field, says", [
    ({"variants": ["fsync-on"]}, "compare_with.variants", "it names 1, side A runs 2"),
    ({"variants": "fsync-on,fsync-on"}, "compare_with.variants", "names fsync-on twice"),
    ({"variants": ["no-such-variant"]}, "compare_with.variants", "variant 'no-such-variant' not found"),
    ({"variants": ["rel/fsync-on.yaml"]}, "compare_with.variants", "is a relative path"),
    ({"broker_implementations": {"kafka": "tansu"}}, "compare_with.broker_implementations",
     "compare broker implementations"),
    ({"broker_versions": {"kafka": ""}}, "compare_with.broker_versions.kafka", "is no version"),
    ({"client_libraries": {"kafka": "no-such"}}, "compare_with.client_libraries.kafka", "not a kafka client"),
    ({"driver_files": ["relative.yaml"]}, "compare_with.driver_files", "not an absolute path"),
    ({"client_libraries": {"pulsar": "pulsar-client"}}, "compare_with.client_libraries.pulsar", "not in suite"),
])
def test_a_bad_side_b_is_refused_naming_its_field(side_b, field, says):
    params = {"brokers": ["kafka"], "compare_with": side_b}
    if field.endswith("pulsar"):
        suite = load_suite("smoke").model_copy(update={"brokers": {"kafka": load_suite("smoke").brokers["kafka"]}})
    else:
        suite = load_suite("smoke")
    with pytest.raises(SpecError) as e:
        build_plan(suite, params)
    assert e.value.field == field and says in e.value.message


# -- verdicts ------------------------------------------------------------------------------------------------


def trial_rows(a_p99: list[float], b_p99: list[float], status_b: str = "ok") -> list[dict]:
    rows = []
    for side, values in (("A", a_p99), ("B", b_p99)):
        for k, p99 in enumerate(values, start=1):
            wid = f"{SMOKE_ID}{'.B' if side == 'B' else ''}.trial{k}"
            rows.append({"workload": wid, "broker": "kafka", "variant": "fsync-off", "driver": "kafka-latency",
                         "broker_version": "4.1.1", "status": "ok" if side == "A" else status_b,
                         "client_library": "kafka-python" if side == "A" else "confluent-kafka",
                         "publish_latency_p99_ms": p99, "publish_rate_msg_s": 1000.0 + k * 0.1})
    return rows


def by_metric(vs):
    return {v.metric: v for v in vs}


def test_side_b_slower_by_20_percent_is_a_regression_with_its_interval():
    rng = random.Random(7)
    a = [10 * rng.uniform(0.98, 1.02) for _ in range(5)]
    b = [12 * rng.uniform(0.98, 1.02) for _ in range(5)]
    vs = by_metric(verdicts(trial_rows(a, b)))
    v = vs["publish_latency_p99_ms"]
    assert v.rule == RULE_AB and v.verdict == Judgement.REGRESSED
    assert v.workload == SMOKE_ID and v.baseline_n == 5
    assert 1.1 < v.interval["ci_low"] <= v.interval["ratio"] <= v.interval["ci_high"] < 1.35
    assert "A: kafka 4.1.1, kafka-python" in v.evidence and "B: kafka 4.1.1, confluent-kafka" in v.evidence
    # the rates differ by a fraction of a message per second in every trial: a rank test sees it, the
    # metric's threshold (3 %) says it does not matter
    assert vs["publish_rate_msg_s"].verdict == Judgement.UNCHANGED
    # end-to-end was not measured on either side: no verdict for it
    assert "e2e_latency_p99_ms" not in vs


def test_a_difference_is_a_verdict_unless_its_whole_interval_lies_within_the_threshold():
    # the p99's threshold is 8 % (and 0.1 ms); side B is 7 % slower, its interval reaches beyond 8 %: a change of
    # the threshold's size is not ruled out, so it is a verdict (a rule on the estimate would miss it)
    a = [10.0, 10.1, 9.9, 10.05, 9.95]
    v = by_metric(verdicts(trial_rows(a, [10.7, 10.75, 10.65, 10.8, 10.6])))["publish_latency_p99_ms"]
    assert v.verdict == Judgement.REGRESSED
    assert v.interval["ratio"] < 1.08 <= v.interval["ci_high"] and v.interval["ci_low"] > 1
    # 3 % slower with every ratio in the interval below 1.08: shown smaller than the threshold, not a verdict
    v = by_metric(verdicts(trial_rows(a, [10.3, 10.35, 10.25, 10.4, 10.2])))["publish_latency_p99_ms"]
    assert v.verdict == Judgement.UNCHANGED and 1 < v.interval["ci_low"] <= v.interval["ci_high"] < 1.08
    assert "the whole interval lies within the threshold (8% and 0.1 ms)" in v.evidence


def test_equal_sides_give_no_difference_and_invalid_trials_are_left_out():
    same = [10.0, 10.4, 9.8, 10.1, 9.9]
    assert by_metric(verdicts(trial_rows(same, list(reversed(same)))))["publish_latency_p99_ms"].verdict \
        == Judgement.UNCHANGED
    v = by_metric(verdicts(trial_rows(same, same, status_b="invalid: foreign load")))["publish_latency_p99_ms"]
    assert v.verdict == "not judged: too few valid trials" and "5 valid trial(s) of A and 0 of B" in v.evidence


def test_trials_invalid_for_the_hosts_load_only_count_and_others_do_not():
    rows = trial_rows([10.0, 10.2, 9.9, 10.1], [13.0, 13.2, 12.9, 13.1])
    # the aggregation's own wording (spark phase_tables.contention_rows), "; " inside a reason included
    load = ("contended: another brokerbench run (/other/state) on localhost during the phase (its processes: mean "
            "55.9 % CPU of all cores); foreign load: mean 37.0 % CPU (of all cores) of processes not of this run on "
            "localhost during the phase (limit 25 %; max 59.9 %)")
    for r in rows[:2] + rows[4:6]:
        r["status"], r["invalid_reasons"] = f"invalid: {load}", load
    v = by_metric(verdicts(rows))["publish_latency_p99_ms"]
    assert v.verdict == Judgement.REGRESSED and "4 of them invalid for the host's load only" in v.evidence
    rows[0]["invalid_reasons"] += "; client-bound: client process CPU 99 %"
    v = by_metric(verdicts(rows))["publish_latency_p99_ms"]
    assert v.verdict == "not judged: too few valid trials" and "3 valid trial(s) of A" in v.evidence
    # and the evidence says which trial was left out and why, without the load reasons that alone would not
    assert "; A trial 1 not usable: invalid: client-bound: client process CPU 99 %" in v.evidence, v.evidence


def test_a_run_without_side_b_has_no_ab_verdicts():
    rows = [r for r in trial_rows([1, 2, 3, 4], [1, 2, 3, 4]) if ".B." not in r["workload"]]
    assert verdicts(rows) == [] and list(group_sides(rows)) == [(SMOKE_ID, "kafka", "fsync-off")]


# -- history and report ----------------------------------------------------------------------------------------


def test_the_history_keeps_side_a_only(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "spark_jobs"))
    from brokerbench_spark.history_writer import append_run

    run_dir = tmp_path / "runs" / "dag" / "run1"
    (run_dir / "summary" / "summary.parquet").mkdir(parents=True)
    rows = trial_rows([10.0] * 4, [12.0] * 4)
    pq.write_table(pa.Table.from_pylist(rows), run_dir / "summary" / "summary.parquet" / "part-0.parquet")
    meta = {"dag_id": "dag", "run_id": "run1", "run_ts": "2026-11-28T00:00:00+00:00", "environment": "local",
            "params": {"compare_with": SIDE_B}}
    (run_dir / "summary" / "run_meta.json").write_text(json.dumps(meta))
    out = append_run(str(tmp_path / "history"), str(tmp_path / "history"), str(run_dir), "now")
    assert out["rows"] == 4
    written = read_history(str(tmp_path / "history"))
    assert sorted(r["workload"] for r in written) == sorted(f"{SMOKE_ID}.trial{k}" for k in range(1, 5))


def test_the_report_shows_the_ab_table_before_the_key_figures(tmp_path: Path):
    run_dir = tmp_path / "run"
    (run_dir / "summary").mkdir(parents=True)
    rows = trial_rows([10.0, 10.2, 9.9, 10.1, 10.05], [12.0, 12.3, 11.9, 12.1, 12.2])
    with open(run_dir / "summary" / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    vs = [v.to_dict() for v in verdicts(rows, METRICS)]
    (run_dir / "summary" / "regression.json").write_text(json.dumps({"verdicts": vs, "rule": {}}))
    plan = ab_plan()
    (run_dir / "plan.json").write_text(plan.to_json())
    html = build_report(run_dir).read_text()
    assert html.index('id="ab"') < html.index('id="key-figures"')
    section = html[html.index('id="ab"'):html.index('id="key-figures"')]
    assert "B slower" in section and "publish_latency_p99_ms" in section and "confluent-kafka" in section


# -- side B on another broker version ----------------------------------------------------------------------------


def test_side_b_on_another_version_is_checked_and_refused_where_nothing_is_deployed(monkeypatch):
    from brokerbench.environments.registry import environment_kind
    from brokerbench.pipeline.setup import check_side_b

    plan = ab_plan(compare_with={"broker_versions": {"kafka": "3.9.1"}})
    assert plan.redeploys_sides("kafka") and not plan.redeploys_sides("rabbitmq")
    assert plan.side_environment_settings("B")["broker_versions"]["kafka"] == "3.9.1"
    assert "kafka" not in (plan.side_environment_settings("A").get("broker_versions") or {})
    with pytest.raises(SpecError) as e:
        ab_plan(compare_with={"broker_versions": {"pulsar": "4.0.7"}})
    assert e.value.field == "compare_with.broker_versions.pulsar"
    external = plan.model_copy(update={"environment": "external"})
    with pytest.raises(SpecError) as e:
        check_side_b(external, {})
    assert e.value.field == "compare_with.broker_versions" and "deploys no broker" in e.value.message
    # the environment checks side B's versions as side A's, the refusal naming side B's field
    kind = environment_kind("local")

    def refuse(plan, params):
        assert plan.environment_settings["broker_versions"]["kafka"] == "3.9.1"
        raise SpecError("no such release", None, "params.broker_versions.kafka")
    monkeypatch.setattr(kind, "check_plan", refuse)
    with pytest.raises(SpecError) as e:
        check_side_b(plan, {})
    assert e.value.field == "compare_with.broker_versions.kafka"


def test_side_b_on_aws_is_refused_where_its_version_does_not_fit_the_suites_settings(monkeypatch):
    """aws-seed-latency runs Kafka in ZooKeeper mode (the seed's): a side B on Kafka 4.x is refused before any
    instance, naming the setting that does not fit and that it is side B's version that does not."""
    from brokerbench.pipeline.setup import check_side_b

    monkeypatch.setenv("BROKERBENCH_AWS_SETTINGS", json.dumps({
        "ami": "ami-12345678", "controller_cidr": "10.0.0.1/32", "subnet_id": "subnet-1", "key_name": "k"}))
    params = {"brokers": ["kafka"], "variants": ["fsync-off"], "compare_with": {"broker_versions": {"kafka": "4.1.1"}}}
    plan = build_plan(load_suite("aws-seed-latency"), params)
    with pytest.raises(SpecError) as e:
        check_side_b(plan, params)
    assert e.value.field == "environmentSettings.kafka_mode", e.value
    assert e.value.message.startswith('side B of the A/B run (compare_with.broker_versions {"kafka": "4.1.1"}): '
                                      "Kafka 4.1.1 has no ZooKeeper mode"), e.value.message


class VersionedEnv(RecordingEnv):
    """Side B runs Kafka 3.9.1, side A 4.1.1; the log is shared by the objects of both sides."""

    def endpoint(self, broker, variant, driver_overrides, jvm_options):
        from brokerbench.environments.base import BrokerEndpoint

        return BrokerEndpoint(broker, "apache-kafka", "3.9.1" if self.side == "B" else "4.1.1",
                              bootstrap_servers="127.0.0.1:9092")


def test_side_b_on_another_version_is_deployed_afresh_and_warmed_up_at_every_change_of_side(tmp_path, monkeypatch):
    from brokerbench.pipeline import benchmark, environment_lease
    from brokerbench.pipeline.context import RunContext

    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": str(tmp_path)})
    plan = ab_plan(trials=4, compare_with={"broker_versions": {"kafka": "3.9.1"}}, results_root=str(tmp_path))
    ctx.plan_path.parent.mkdir(parents=True, exist_ok=True)
    ctx.plan_path.write_text(plan.to_json())
    log: list[tuple[str, str]] = []
    monkeypatch.setattr(ctx, "environment", lambda side=None: VersionedEnv(log, side))
    monkeypatch.setattr(environment_lease, "hold_environment", lambda ctx: None)
    monkeypatch.setattr(benchmark, "worker_processes", lambda ctx: 1)
    monkeypatch.setattr(benchmark, "prepare_job", lambda job: log.append(("prepare", job.workload_id)))
    benchmark.deploy(ctx, "kafka", "fsync-off")
    benchmark.prepare_topics(ctx, "kafka", "fsync-off")
    benchmark.run_phase(ctx, "kafka", "fsync-off", "warmup")
    benchmark.run_phase(ctx, "kafka", "fsync-off", "measure")
    a, b = f"{SMOKE_ID}.trial", f"{SMOKE_ID}.B.trial"
    # every deploy is a fresh broker: the one running is stopped first, whatever its settings
    stop = ("undeploy", "kafka")
    assert log == [stop, ("deploy", "A"), ("prepare", f"{a}1"), ("warmup", f"{a}1"), ("measure", f"{a}1"),
                   stop, ("deploy", "B"), ("prepare", f"{b}1"), ("warmup", f"{b}1"), ("measure", f"{b}1"),
                   ("measure", f"{b}2"),
                   stop, ("deploy", "A"), ("prepare", f"{a}1"), ("warmup", f"{a}2"), ("measure", f"{a}2"),
                   ("measure", f"{a}3"),
                   stop, ("deploy", "B"), ("prepare", f"{b}1"), ("warmup", f"{b}3"), ("measure", f"{b}3"),
                   ("measure", f"{b}4"),
                   stop, ("deploy", "A"), ("prepare", f"{a}1"), ("warmup", f"{a}4"), ("measure", f"{a}4")]
    # each side's broker is recorded where the aggregation gives each side's rows their version
    assert json.loads((ctx.run_dir / "provenance" / "kafka__fsync-off.B.json").read_text())["version"] == "3.9.1"
    assert json.loads((ctx.run_dir / "provenance" / "kafka__fsync-off.json").read_text())["version"] == "4.1.1"
    # a retried measured phase repeats nothing complete and deploys nothing
    log.clear()
    benchmark.run_phase(ctx, "kafka", "fsync-off", "measure")
    assert log == []
    # a trial killed after its side's warm-up (its warm-up file, no measured one) is deployed and warmed up again
    for f in (ctx.run_dir / "raw" / f"{b}3").glob("*/*/measure/*.jsonl"):
        f.unlink()
    benchmark.run_phase(ctx, "kafka", "fsync-off", "measure")
    assert log == [stop, ("deploy", "B"), ("prepare", f"{b}1"), ("warmup", f"{b}3"), ("measure", f"{b}3")]
    log.clear()
    warm = plan.items[0].workload.warmup_duration_minutes * 60 + benchmark.WORKER_GRACE_S
    measured = plan.items[0].workload.test_duration_minutes * 60 + benchmark.LEAD_IN_MAX_S + benchmark.WORKER_GRACE_S
    assert benchmark.phase_timeout_s(ctx, "kafka", "fsync-off", "measure") == pytest.approx(
        8 * measured + 4 * (benchmark.DEPLOY_BOUND_S + warm) + 300)


def test_a_triggered_ab_run_with_the_forms_defaults_takes_the_default_trials_per_side():
    from brokerbench.dag_factory import params_for
    from brokerbench.spec.params import ANALYSIS_PARAMS, ENVIRONMENT_PARAMS

    suite = load_suite("smoke")
    form = {k: p.value for k, p in params_for(suite).items() if k not in ANALYSIS_PARAMS + ENVIRONMENT_PARAMS}
    assert form["trials"] is None  # empty: the suite's, or an A/B run's default
    assert build_plan(suite, {**form, "compare_with": SIDE_B}).trials == AB_DEFAULT_TRIALS
    assert build_plan(suite, form).trials == suite.trials
