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
                         "stable": step < 2, "reasons": "" if step < 2 else "backlog grew"})
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
