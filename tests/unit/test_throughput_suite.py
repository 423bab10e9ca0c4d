"""The throughput suites (seed 004's peak stable throughput of 1 KB messages, as a sweep of fixed rates): they
load and validate, resolve into throughput sweeps, and their report leads with the latency-vs-throughput chart.
(Their DAGs: tests/unit/test_dag_integrity.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from brokerbench import cli
from brokerbench.report.data import RunData
from brokerbench.report.html import render_html, sweep_first
from brokerbench.spec import build_plan, load_suite

SWEEPS = {"throughput-sweep": ("local", [1000, 2000, 5000, 10000, 20000, 40000]),
          "aws-seed-throughput": ("aws", [10000, 50000, 100000, 200000, 500000, 1000000])}


@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_the_throughput_suites_are_sweeps_of_1kb_messages_on_every_broker(name):
    environment, rates = SWEEPS[name]
    suite = load_suite(name)
    plan = build_plan(suite, {})
    assert suite.environment == environment and plan.environment == environment
    assert sorted({i.broker for i in plan.items}) == ["kafka", "pulsar", "rabbitmq"]
    for item in plan.items:
        w = item.workload
        assert (w.kind, w.message_size, w.partitions_per_topic) == ("throughput-sweep", 1024, 100)
        assert w.sweep_rates_msg_s == rates
        # producer batches of up to 1 MB / 10 ms (seed 004's throughput setting) where the broker batches
        if item.broker == "kafka":
            assert item.driver.producer_config["linger.ms"] == "10" and item.driver.client_library == "confluent-kafka"
        if item.broker == "pulsar":
            assert item.driver.producer.batching_max_publish_delay_ms == 10
    assert sweep_first(RunData(run_dir=Path("."), dag_id=suite.dag_id, run_id="r", summary_columns=[], summary=[],
                               timeseries=[], plan=__import__("json").loads(plan.to_json())))


def test_brokerbench_validate_passes_for_them(capsys):
    assert cli.main(["validate", *sorted(SWEEPS)]) == 0
    out = capsys.readouterr().out
    assert all(f"ok     {name}: 6 measurements" in out for name in SWEEPS), out


def _sweep_rows(workload: str) -> list[dict]:
    rows = []
    for broker in ("kafka", "rabbitmq"):
        for step, rate in enumerate((1000, 2000, 5000)):
            rows.append({"workload": workload, "broker": broker, "variant": "fsync-off", "driver": f"{broker}-d",
                         "step": step, "target_rate_msg_s": rate, "publish_rate_msg_s": rate * 0.99,
                         "consume_rate_msg_s": rate * 0.99, "publish_latency_p50_ms": 2.0 + step,
                         "publish_latency_p99_ms": 5.0 * (step + 1), "e2e_latency_p99_ms": 6.0 * (step + 1),
                         "stable": step < 2, "publish_p99_bound_ms": 200.0,
                         "reasons": "" if step < 2 else "backlog grew"})
    return rows


def _data(kind: str | None, summary: list[dict], sweep: list[dict]) -> RunData:
    workload = {"name": "w", "producersPerTopic": 4, "subscriptionsPerTopic": 1, "consumerPerSubscription": 4,
                "producerRate": 0 if kind == "throughput-sweep" else 1000, "kind": kind}
    plan = {"suite": "throughput-sweep", "environment": "local",
            "items": [{"broker": b, "variant": "fsync-off", "workload": dict(workload)} for b in ("kafka", "rabbitmq")]}
    return RunData(run_dir=Path("results/runs/brokerbench_throughput_sweep/r"), dag_id="brokerbench_throughput_sweep",
                   run_id="r", summary_columns=list(summary[0]) if summary else [], summary=summary, timeseries=[],
                   plan=plan, sweep=sweep)


def test_a_throughput_suites_report_leads_with_the_latency_vs_throughput_chart():
    page = render_html(_data("throughput-sweep", [], _sweep_rows("throughput-1-topic-100-partitions-1kb-max")))
    chart = page.index('<figure class="chart" aria-label="throughput-1-topic-100-partitions-1kb-max: latency vs '
                       'throughput"')
    # right under the outcome: before the key figures, the time-series charts and the results
    assert page.index("id='outcome'") < page.index('<h2 id="sweep">') < chart < page.index('id="key-figures"') \
        < page.index('<h2 id="charts">') < page.index("<h2>Results</h2>")
    assert page.count('<h2 id="sweep">') == 1 and chart == page.find('<figure class="chart"')
    # a sweep-only run has no summary rows, which is no failure: said so, not flagged
    assert "this run's workloads are throughput sweeps" in page and "nothing was measured" not in page


def test_a_sweeps_publish_p99_bound_is_the_param_over_the_workload_and_the_report_states_it():
    """sweep_max_publish_p99_ms replaces every workload's sweepMaxPublishP99Ms (unset: the worker's default, 200
    ms); a bad value is refused naming the param; the sweep's chart says what a stable step keeps."""
    from brokerbench.spec.errors import SpecError
    from brokerbench.spec.params import SWEEP_MAX_PUBLISH_P99_MS
    from brokerbench.worker.job import SWEEP_MAX_PUBLISH_P99_MS as WORKER_DEFAULT
    from brokerbench.worker.job import Job, JobWorkload

    suite = load_suite("throughput-sweep")
    assert {i.workload.sweep_max_publish_p99_ms for i in build_plan(suite, {}).items} == {None}
    plan = build_plan(suite, {"sweep_max_publish_p99_ms": 0.5})
    assert {i.workload.sweep_max_publish_p99_ms for i in plan.items} == {0.5}
    # what the worker judges the steps by: the workload's field in the job (the JVM engine reads the same key)
    job = Job.build(workload=JobWorkload.parse(plan.items[0].workload.to_omb_dict()), worker="w", phase="measure",
                    broker="kafka", driver={}, endpoint={}, topics=["t"], duration_s=1)
    assert job.workload.sweep_max_publish_p99_ms == 0.5
    assert JobWorkload.parse({}).sweep_max_publish_p99_ms == WORKER_DEFAULT == SWEEP_MAX_PUBLISH_P99_MS == 200.0
    java = (Path(__file__).resolve().parents[2] / "include" / "jvm-worker" / "src" / "main" / "java" / "brokerbench"
            / "jvm" / "Phase.java").read_text()
    assert f"SWEEP_MAX_PUBLISH_P99_MS = {WORKER_DEFAULT};" in java and '"sweepMaxPublishP99Ms"' in java
    for bad in (0, -1, 600_001):
        with pytest.raises(SpecError) as e:
            build_plan(suite, {"sweep_max_publish_p99_ms": bad})
        assert e.value.field == "sweep_max_publish_p99_ms", e.value
    page = render_html(_data("throughput-sweep", [], _sweep_rows("w")))
    assert "w: publish latency p99 vs achieved rate (a stable step: publish p99 at most 200 ms)" in page
    assert '<th title="stable">stable</th><th title="publish_p99_bound_ms">publish p99 bound' in page  # and the table


def test_a_sweep_only_runs_terminal_summary_shows_its_steps_and_each_highest_stable_rate_with_its_bound(tmp_path):
    import csv

    from brokerbench.report.html import render_text_summary

    rows = _sweep_rows("w")
    for r in rows:
        r["highest_stable_rate_msg_s"] = 2000.0 if r["broker"] == "kafka" else None
    (tmp_path / "summary").mkdir()
    with open(tmp_path / "summary" / "sweep.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    text = render_text_summary(tmp_path)
    assert "no summary" not in text and "Throughput sweep" in text
    assert "highest stable rate kafka fsync-off w: 2,000 msg/s (a stable step: publish p99 at most 200 ms)" in text
    assert "highest stable rate rabbitmq fsync-off w: none of its steps was stable (a stable step: publish p99 at " \
           "most 200 ms)" in text
    assert text.count("backlog grew") == 2  # the unstable steps say why


def test_a_latency_runs_report_keeps_its_order():
    summary = [{"workload": "w", "broker": "kafka", "variant": "fsync-off", "status": "ok",
                "publish_latency_p99_ms": 3.0}]
    page = render_html(_data("latency", summary, _sweep_rows("w")))
    assert page.index('id="key-figures"') < page.index('<h2 id="charts">') < page.index('<h2 id="sweep">')
    # a plan's workload without a kind is a sweep as the worker derives it: producerRate 0 with consumers
    derived = _data(None, [], _sweep_rows("w"))
    derived.plan["items"][0]["workload"]["producerRate"] = 0
    assert not sweep_first(derived)  # the other item still sends at 1,000 msg/s
    derived.plan["items"][1]["workload"]["producerRate"] = 0
    assert sweep_first(derived)
