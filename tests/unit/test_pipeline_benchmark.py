"""brokerbench.pipeline.benchmark without a broker: retries never lose measured results, names are unique per
run, a job carries the deployed endpoint."""

import json

from brokerbench.pipeline.benchmark import completed_ok, keep_best_attempt
from brokerbench.pipeline.context import RunContext


def write(path, intervals, end_status=None):
    lines = [{"record": "meta"}] + [{"record": "interval", "index": i} for i in range(intervals)]
    if end_status:
        lines.append({"record": "end", "status": end_status})
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines))


def test_a_retry_that_measures_less_keeps_the_earlier_result(tmp_path):
    final, attempt = tmp_path / "w.jsonl", tmp_path / "w.jsonl.attempt"
    write(final, 4, "error")          # broker died after 4 intervals
    write(attempt, 0, "error")        # the retry could not even connect
    keep_best_attempt(final, attempt)
    assert final.read_text().count('"record":"interval"') == 4
    assert not attempt.exists()
    assert len(list(tmp_path.glob("w.jsonl.superseded-*"))) == 1


def test_a_complete_retry_replaces_a_partial_result_which_is_kept_aside(tmp_path):
    final, attempt = tmp_path / "w.jsonl", tmp_path / "w.jsonl.attempt"
    write(final, 4, "error")
    write(attempt, 3, "ok")
    keep_best_attempt(final, attempt)
    assert completed_ok(final)
    kept = list(tmp_path.glob("w.jsonl.superseded-*"))
    assert len(kept) == 1 and kept[0].read_text().count('"record":"interval"') == 4
    # the aggregation reads *.jsonl only: the superseded file is not double counted
    assert [p.name for p in tmp_path.glob("*.jsonl")] == ["w.jsonl"]


def test_first_attempt_becomes_the_result(tmp_path):
    final, attempt = tmp_path / "w.jsonl", tmp_path / "w.jsonl.attempt"
    write(attempt, 2)
    keep_best_attempt(final, attempt)
    assert final.exists() and not completed_ok(final)


def test_topic_and_subscription_names_are_unique_per_run(tmp_path):
    from types import SimpleNamespace

    from brokerbench.pipeline.benchmark import _names

    item = SimpleNamespace(variant="fsync-on", base_workload_id="1-topic-1-partition-100b",
                           workload=SimpleNamespace(id="1-topic-1-partition-100b", topics=2,
                                                    subscriptions_per_topic=2))
    runs = [RunContext("brokerbench_smoke", run_id, "smoke", {"results_root": str(tmp_path)})
            for run_id in ("scheduled__2026-11-20T00:00:00+00:00", "scheduled__2026-11-21T00:00:00+00:00")]
    (topics_a, subs_a), (topics_b, subs_b) = (_names(ctx, item) for ctx in runs)
    assert len(set(topics_a)) == 2 and len(set(subs_a)) == 2
    # a Kafka consumer group or RabbitMQ queue of one run is never reused by the next
    assert not set(topics_a) & set(topics_b) and not set(subs_a) & set(subs_b)
    assert _names(runs[0], item) == (topics_a, subs_a)  # a retried task finds its own names again


def test_a_job_carries_the_deployed_endpoint_as_the_deploy_task_recorded_it(tmp_path):
    from brokerbench.environments.base import BrokerEndpoint
    from brokerbench.pipeline import benchmark
    from brokerbench.spec import build_plan, load_suite

    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": str(tmp_path)})
    plan = build_plan(load_suite("smoke"), {"brokers": ["rabbitmq"], "variants": ["fsync-off"]})
    ctx.run_dir.mkdir(parents=True)
    ctx.plan_path.write_text(plan.to_json())
    deployed = BrokerEndpoint("rabbitmq", "rabbitmq", "3.10.8", amqp_uris=["amqp://127.0.0.1:5672"],
                              durability={"variant": "fsync-off", "honoured": True})
    ctx.write_json("provenance/rabbitmq__fsync-off.json", {**deployed.to_dict(), "variant_description": "x"})
    endpoint = benchmark._endpoint(ctx, "rabbitmq", "fsync-off")
    assert endpoint == deployed  # typed, the record's other fields left out
    item = plan.items[0]
    job = benchmark._job(ctx, item, endpoint, "measure", 60.0, 5.0, "localhost-0")
    assert job.to_dict()["endpoint"] == deployed.to_dict()  # the job file holds the endpoint as recorded
    assert job.endpoint.amqp_uris == deployed.amqp_uris
    assert (job.phase, job.duration_s, job.interval_s, job.broker) == ("measure", 60.0, 5.0, "rabbitmq")


def test_what_a_killed_try_measured_is_salvaged(tmp_path):
    from brokerbench.pipeline.benchmark import salvage_attempts

    phase = tmp_path / "raw" / "w" / "rabbitmq-default" / "fsync-off" / "measure"
    phase.mkdir(parents=True)
    write(phase / "localhost-0.jsonl.attempt", 3)  # the try was killed: no end record, never kept
    other = tmp_path / "raw" / "w" / "kafka-default" / "fsync-on" / "measure"
    other.mkdir(parents=True)
    write(other / "localhost-0.jsonl", 5, "ok")
    write(other / "localhost-0.jsonl.attempt", 1)  # a killed retry that measured less
    decided = salvage_attempts(tmp_path)
    assert sorted(p.parent.parent.parent.name for p in decided) == ["kafka-default", "rabbitmq-default"]
    assert (phase / "localhost-0.jsonl").read_text().count('"record":"interval"') == 3
    assert completed_ok(other / "localhost-0.jsonl") and len(list(other.glob("*.superseded-*"))) == 1
    assert not list((tmp_path / "raw").glob("*/*/*/*/*.attempt"))
    assert salvage_attempts(tmp_path) == []
