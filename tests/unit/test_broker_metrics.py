"""The brokers' own metrics: the catalogs, the parser's edge cases, and how raw scrapes become figures per interval
and per phase (counter restarts, timers, quantiles never averaged, gaps, metrics not exposed). The exposition
texts here are written by hand only to reach the parser's edge cases; the real brokers' output is read by
tests/e2e/test_smoke_dag.py."""

from __future__ import annotations

import json

import pytest

from brokerbench.environments.brokermetrics import (
    CATALOG_BROKERS,
    Catalog,
    Target,
    _samples,
    catalog,
    extract,
    header,
    only,
    sample_names,
)
from brokerbench_spark import broker_metrics as bm


@pytest.mark.parametrize("broker", CATALOG_BROKERS)
def test_every_catalog_loads_and_names_each_metric_with_its_unit(broker):
    cat = catalog(broker)
    assert cat.broker == broker and cat.metrics
    for m in cat.metrics:
        assert m.id.startswith(f"{broker}_") and m.means and m.title


def test_a_catalog_metric_whose_id_does_not_end_with_its_unit_is_refused_naming_it():
    doc = {"broker": "kafka", "title": "t", "endpoint": "e", "panels": [{"id": "p", "title": "p"}],
           "metrics": [{"id": "kafka_flush_time", "title": "t", "unit": "ms", "kind": "gauge", "series": "x",
                        "panel": "p", "means": "m"}]}
    with pytest.raises(ValueError, match="kafka_flush_time: the id ends with its unit"):
        Catalog.model_validate(doc)


EDGE = """# TYPE jvm_gc_collection_seconds summary
jvm_gc_collection_seconds_count{gc="G1 Young Generation"} 4
jvm_gc_collection_seconds_sum{gc="G1 Young Generation"} 0.056
jvm_gc_collection_seconds_count{gc="G1 Old Generation"} 1
jvm_gc_collection_seconds_sum{gc="G1 Old Generation"} 0.5
# TYPE erlang_vm_statistics_garbage_collection_number_of_gcs counter
erlang_vm_statistics_garbage_collection_number_of_gcs 13240
# TYPE pulsar_broker_publish_latency summary
pulsar_broker_publish_latency{cluster="standalone",quantile="0.99"} NaN
pulsar_broker_publish_latency_count{cluster="standalone"} 0.0
pulsar_broker_publish_latency_sum{cluster="standalone"} 0.0
kafka_request_totaltimems_mean{request="Produce"} 2.5
kafka_request_totaltimems_count{request="Produce"} 10
kafka_request_totaltimems_mean{request="FetchConsumer"} 500
kafka_request_totaltimems_count{request="FetchConsumer"} 4
"""


def test_extract_sums_collectors_reads_counters_by_their_total_name_and_drops_nan():
    kafka = extract(EDGE, catalog("kafka").metrics)
    assert kafka["kafka_gc_time_ms_per_s"] == pytest.approx(556.0)  # both collectors, s -> ms
    assert kafka["kafka_gc_collections_per_s"] == 5
    # a JMX timer: the cumulative mean times the count is the cumulative sum; the labels pick the request
    assert kafka["kafka_produce_total_time_mean_ms"] == [25.0, 10.0]
    assert kafka["kafka_fetch_consumer_total_time_mean_ms"] == [2000.0, 4.0]
    assert "kafka_log_flush_time_p50_ms" not in kafka  # not in the text: left out, never 0
    rabbit = extract(EDGE, catalog("rabbitmq").metrics)
    # prometheus_client names a counter's sample <name>_total; the catalog names it as exposed (and as a
    # Prometheus server stores it)
    assert rabbit["rabbitmq_gc_per_s"] == 13240
    pulsar = extract(EDGE, catalog("pulsar").metrics)
    assert "pulsar_publish_latency_p99_ms" not in pulsar  # NaN: no value, never a number
    assert pulsar["pulsar_publish_latency_mean_ms"] == [0.0, 0.0]


def test_a_counter_restart_counts_from_zero_and_a_timer_is_the_mean_per_event():
    # a broker restarted between the 2nd and 3rd scrape: its counter fell from 100 to 5
    readings = [(0.0, 0.0), (1.0, 100.0), (2.0, 5.0), (3.0, 25.0)]
    assert bm.interval_values("counter", readings) == [(1.0, 100.0), (2.0, 5.0), (3.0, 20.0)]
    assert bm.phase_value("counter", "mean", readings, 0.5, 3.0) == pytest.approx((100 + 5 + 20) / 3)
    timer = [(0.0, [0.0, 0.0]), (1.0, [30.0, 10.0]), (2.0, [30.0, 10.0]), (3.0, [4.0, 1.0])]
    # 3 ms per event, no event (no value), then the restart: 4 ms for its one event
    assert bm.interval_values("timer", timer) == [(1.0, 3.0), (3.0, 4.0)]
    assert bm.phase_value("timer", "mean", timer, 0.5, 3.0) == pytest.approx(34.0 / 11.0)


def test_a_quantile_phase_figure_is_the_highest_scrape_never_an_average():
    readings = [(1.0, 2.0), (2.0, 40.0), (3.0, 3.0), (9.0, 500.0)]
    assert bm.phase_value("quantile", "mean", readings, 0.5, 3.5) == 40.0  # the scrape after the phase: outside
    assert bm.phase_value("gauge", "mean", readings, 0.5, 3.5) == pytest.approx(15.0)
    assert bm.phase_value("ratio", "max", [(1.0, [10.0, 4.0]), (2.0, [0.0, 0.0])], None, None) == 2.5


def _file(lines, targets, broker="rabbitmq"):
    head = header("localhost", 1.0, targets)
    return bm.PhaseFile(("w", "d", "v", "measure"), [json.loads(json.dumps(head)), *lines])


def test_a_target_that_stops_answering_leaves_a_gap_and_the_row_says_so():
    t = Target("rabbitmq", "node", "n1@localhost", "http://127.0.0.1:1/metrics", "rabbitmq", "3.10.8")
    lines = [{"ts": 100.0 + i, "target": t.name, "values": {"rabbitmq_io_syncs_per_s": 10.0 * i}} for i in range(3)]
    lines += [{"ts": 103.0 + i, "target": t.name, "error": "URLError: Connection refused"} for i in range(2)]
    rows, figures, columns = bm.tables([_file(lines, [t])], [], {("w", "d", "v"): {"broker": "rabbitmq",
                                                                                  "start": 100.5, "end": 104.5}})
    notes = figures[("w", "rabbitmq", "d", "v")][bm.NOTES]
    assert "gap: rabbitmq@n1@localhost did not answer 2 of 4 scrapes (URLError: Connection refused)" in notes
    assert figures[("w", "rabbitmq", "d", "v")]["rabbitmq_io_syncs_per_s"] == pytest.approx(10.0)
    # a metric the node never served: named, with what the catalog says it needs
    assert "rabbitmq_raft_commit_latency_ms: not exposed by rabbitmq rabbitmq 3.10.8 (only with quorum queues)" \
        in notes
    assert [r["t_s"] for r in rows if r["metric"] == "rabbitmq_io_syncs_per_s"] == [0.5, 1.5]
    assert "rabbitmq_io_sync_mean_ms" in columns


def test_a_role_without_an_endpoint_is_named_as_not_exposed():
    t = Target("pulsar", "broker", "127.0.0.1", "http://127.0.0.1:1/metrics", "apache-pulsar", "4.0.7")
    lines = [{"ts": 1.0, "target": t.name, "values": {"pulsar_backlog_messages": 0.0}}]
    _, figures, _ = bm.tables([_file(lines, [t])], [], {("w", "d", "v"): {"broker": "pulsar", "start": None,
                                                                         "end": None}})
    assert ("pulsar_bookie_journal_sync_mean_ms: not exposed by pulsar apache-pulsar 4.0.7: no bookie endpoint "
            "(only with a separate bookie)") in figures[("w", "pulsar", "d", "v")][bm.NOTES]


def test_a_timer_without_events_in_the_phase_is_named_not_left_blank():
    t = Target("kafka", "broker", "127.0.0.1", "http://127.0.0.1:1/metrics", "apache-kafka", "4.1.1")
    lines = [{"ts": 100.0 + i, "target": t.name,
              "values": {"kafka_fetch_follower_total_time_mean_ms": [0.0, 0.0]}} for i in range(3)]
    _, figures, _ = bm.tables([_file(lines, [t])], [], {("w", "d", "v"): {"broker": "kafka", "start": 100.5,
                                                                         "end": 102.5}})
    assert "kafka_fetch_follower_total_time_mean_ms: no events during the phase" in \
        figures[("w", "kafka", "d", "v")][bm.NOTES]


def test_a_quantile_of_fewer_events_in_the_phase_than_it_needs_is_no_figure_of_the_phase():
    """Kafka's log flush p99 is of the broker's reservoir: 3 flushes in a phase read the p99 of the flushes
    before it. A quantile that names its count gets a phase figure only from min_events events in the phase."""
    text = "kafka_log_flush_time_ms_99thpercentile 42.0\nkafka_log_flush_time_ms_count 57\n"
    assert extract(text, catalog("kafka").metrics)["kafka_log_flush_time_p99_ms"] == [42.0, 57.0]
    t = Target("kafka", "broker", "127.0.0.1", "http://127.0.0.1:1/metrics", "apache-kafka", "4.1.1")
    need = next(m.min_events for m in catalog("kafka").metrics if m.id == "kafka_log_flush_time_p99_ms")

    def phase(counts):
        lines = [{"ts": 100.0 + i, "target": t.name, "values": {"kafka_log_flush_time_p99_ms": [40.0 + i, c]}}
                 for i, c in enumerate(counts)]
        rows, figures, _ = bm.tables([_file(lines, [t])], [], {("w", "d", "v"): {"broker": "kafka", "start": 100.5,
                                                                                 "end": 103.5}})
        return rows, figures[("w", "kafka", "d", "v")]

    # the baseline (the scrape before the phase: 50) to the last inside: 3 events
    rows, few = phase([50, 51, 52, 53])
    assert "kafka_log_flush_time_p99_ms" not in few
    assert f"kafka_log_flush_time_p99_ms: too few events during the phase (3; its quantile needs {need})" \
        in few[bm.NOTES]
    assert [r["value"] for r in rows if r["metric"] == "kafka_log_flush_time_p99_ms"] == [40.0, 41.0, 42.0, 43.0]
    # enough of them (10, then a broker restart counted from 0 again: 5, then need more): the highest scrape
    _, many = phase([50, 60, 5, 5 + need])
    assert many["kafka_log_flush_time_p99_ms"] == 43.0 and "too few" not in many[bm.NOTES]


@pytest.mark.parametrize("broker", CATALOG_BROKERS)
def test_the_scraper_parses_the_catalogs_lines_alone_and_reads_the_same_values(broker):
    metrics = catalog(broker).metrics
    kept = only(EDGE, sample_names(metrics))
    assert "#" not in kept
    assert extract(_samples(kept), metrics) == extract(EDGE, metrics)


def test_the_nodes_of_a_fleet_in_files_of_their_own_are_summed_or_the_worst_taken():
    """One scraper file per broker host (an aws fleet): a rate is the sum of the nodes, a latency the highest."""
    files = []
    for i, (requests, flush_ms) in enumerate([(12.0, 2.0), (0.0, 9.0), (0.0, 1.0)]):
        t = Target("kafka", "broker", f"127.0.1.{i + 1}", f"http://127.0.1.{i + 1}:7071/metrics", "apache-kafka",
                   "3.9.1")
        lines = [{"ts": 100.0 + k, "target": t.name,
                  "values": {"kafka_produce_requests_per_s": requests * k,
                             "kafka_produce_local_time_mean_ms": [flush_ms * k, float(k)],
                             "kafka_network_processor_idle_percent": 90.0 - 10 * i}} for k in range(3)]
        files.append(_file(lines, [t]))
    _, figures, _ = bm.tables(files, [], {("w", "d", "v"): {"broker": "kafka", "start": 100.5, "end": 102.5}})
    row = figures[("w", "kafka", "d", "v")]
    assert row["kafka_produce_requests_per_s"] == pytest.approx(12.0)  # the leader's, whichever file came last
    assert row["kafka_produce_local_time_mean_ms"] == pytest.approx(9.0)
    assert row["kafka_network_processor_idle_percent"] == pytest.approx(70.0)  # lower is worse: the lowest

