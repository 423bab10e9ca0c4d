"""The OMB result documents (spark_jobs/brokerbench_spark/outputs.py, omb_document) hold what
OMB's chart script relies on (tests/support/omb_charts.py): no null in a plotted list, one
label per broker x variant, one entry per 10 s, every TestResult key."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "spark_jobs"))
sys.path.insert(0, str(ROOT / "tests"))

from support.omb_charts import TEST_RESULT_LISTS, chart_problems  # noqa: E402

from brokerbench_spark.outputs import omb_document  # noqa: E402
from brokerbench_spark.schema import METRICS  # noqa: E402

PCTS = [50.0, 99.0, 99.999, 100.0]
STATS = ["avg", "min", "p50", "p75", "p95", "p99", "p999", "p9999", "max"]


def summary_row(broker: str, variant: str, **changes) -> dict:
    row = {"workload": "w1", "broker": broker, "driver": f"{broker}-latency", "variant": variant,
           "broker_implementation": "x", "broker_version": "1", "durability_honoured": True, "status": "ok",
           "message_size_bytes": 100, "topics": 1, "partitions_per_topic": 1, "producers": 1, "consumers": 1,
           "target_rate_msg_s": 1000.0, "interval_s": 5.0}
    for prefix, unit, _ in METRICS.values():
        for stat in STATS:
            row[f"{prefix}_{stat}_{unit}"] = 1.5
        row[f"{prefix}_count"] = 30000
    row.update(changes)
    return row


def window(n: int, e2e_samples: int = 10000) -> dict:
    """One 10 s window of phase_tables._omb_rows; a window without end-to-end samples has null
    end-to-end latencies, as the merge gives them."""
    s = {"window": n, "window_seconds": 10.0, "intervals": 2, "publish_rate_msg_s": 1000.0,
         "consume_rate_msg_s": 1000.0, "publish_error_rate_msg_s": 0.0, "backlog_msgs": 3}
    for prefix, unit, _ in METRICS.values():
        empty = prefix == "e2e_latency" and not e2e_samples
        for stat in STATS:
            s[f"{prefix}_{stat}_{unit}"] = None if empty else 2.0 + n
        s[f"{prefix}_count"] = 0 if empty else 10000
    return s


def quantiles() -> list[dict]:
    return [{"metric": metric, "count": 30000, **{f"q{i}": 1000.0 * (i + 1) for i in range(len(PCTS))}}
            for metric in METRICS]


def test_fsync_on_and_off_are_two_labelled_series_at_10_s():
    docs = [omb_document(summary_row(b, v), [window(0), window(1), window(2)], quantiles(), PCTS)
            for b in ("kafka", "pulsar") for v in ("fsync-on", "fsync-off")]
    assert chart_problems(docs) == []
    assert sorted(d["driver"] for d in docs) == [
        "kafka fsync-off (kafka-latency)", "kafka fsync-on (kafka-latency)",
        "pulsar fsync-off (pulsar-latency)", "pulsar fsync-on (pulsar-latency)"]
    # brokerbench's own names stay beside OMB's label
    assert {(d["broker"], d["variant"], d["driverId"]) for d in docs} == {
        (b, v, f"{b}-latency") for b in ("kafka", "pulsar") for v in ("fsync-on", "fsync-off")}
    doc = docs[0]
    assert doc["intervalSeconds"] == 10 and doc["workerIntervalSeconds"] == 5.0
    assert doc["intervalSecondsMeasured"] == [10.0, 10.0, 10.0]
    assert doc["publishLatency99pct"] == [2.0, 3.0, 4.0]
    assert all(len(doc[k]) == 3 for k in TEST_RESULT_LISTS)


def test_a_window_without_samples_gives_zero_and_a_zero_count_not_null():
    doc = omb_document(summary_row("kafka", "fsync-on", e2e_latency_count=0,
                                   **{f"e2e_latency_{s}_ms": None for s in STATS}),
                       [window(0, e2e_samples=0), window(1, e2e_samples=0)],
                       [q for q in quantiles() if q["metric"] != "e2e_latency_us"], PCTS)
    assert doc["endToEndLatency95pct"] == [0, 0] and doc["endToEndLatencyCount"] == [0, 0]
    assert doc["aggregatedEndToEndLatency99pct"] == 0 and doc["aggregatedEndToEndLatencyCount"] == 0
    assert doc["publishLatencyCount"] == [10000, 10000]
    assert doc["aggregatedEndToEndLatencyQuantiles"] == {}  # no samples: an empty map, as OMB's
    assert chart_problems([doc]) == []


def test_quantile_maps_in_the_metric_units_keyed_by_percentile():
    doc = omb_document(summary_row("kafka", "fsync-on"), [window(0)], quantiles(), PCTS)
    # ms for publish and end-to-end latency, µs for publish delay
    assert doc["aggregatedPublishLatencyQuantiles"] == {"50.0": 1.0, "99.0": 2.0, "99.999": 3.0, "100.0": 4.0}
    assert doc["aggregatedPublishDelayLatencyQuantiles"]["99.0"] == 2000.0


def test_the_check_finds_what_stopped_the_chart_script():
    """The documents brokerbench wrote before: a null in the drain interval, one label for
    fsync on and off, a 5 s interval."""
    old = [omb_document(summary_row("kafka", v), [window(0), window(1)], quantiles(), PCTS) for v in ("a", "b")]
    for doc in old:
        doc["driver"] = doc["driverId"]
        doc["intervalSeconds"] = 5.0
        doc["publishDelayLatency99pct"][-1] = None
    problems = chart_problems(old)
    assert any("publishDelayLatency99pct has no number at entries [1]" in p for p in problems)
    assert any("used twice: kafka-latency" in p for p in problems)
    assert any("intervalSeconds is 5.0" in p for p in problems)
