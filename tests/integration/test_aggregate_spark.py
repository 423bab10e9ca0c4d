"""spark_jobs/aggregate.py under a real spark-submit (local[2]).

The job runs once per module on a synthetic run (2 brokers x 2 variants x
2 workers x 3 measured intervals, plus a warm-up phase with latencies 1000x
larger that must not leak in); every test then checks that single output
against the raw samples the files were built from.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fixtures_results import (  # noqa: E402
    build_synthetic_run,
    default_meta,
    host_summary,
    write_sweep_run,
    write_worker_file,
)
from support.omb_charts import chart_problems  # noqa: E402

from brokerbench.histogram import LogHistogram  # noqa: E402

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "spark_jobs" / "aggregate.py"
PERCENTILES = [("p50", 50.0), ("p75", 75.0), ("p95", 95.0), ("p99", 99.0), ("p999", 99.9), ("p9999", 99.99)]
#: worker file histogram field -> (summary column prefix, unit, divisor from µs)
METRICS = {
    "publish_latency_us": ("publish_latency", "ms", 1000.0),
    "e2e_latency_us": ("e2e_latency", "ms", 1000.0),
    "publish_delay_us": ("publish_delay", "us", 1.0),
}
OMB_NAMES = {"publish_latency": "PublishLatency", "publish_delay": "PublishDelayLatency", "e2e_latency": "EndToEndLatency"}
OMB_SUFFIXES = [("avg", "Avg"), ("p50", "50pct"), ("p75", "75pct"), ("p95", "95pct"), ("p99", "99pct"),
                ("p999", "999pct"), ("p9999", "9999pct"), ("max", "Max")]


def run_job(run_dir: Path) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(
        [str(bin_dir / "spark-submit"), "--master", "local[2]", str(JOB), "--run-dir", str(run_dir)],
        capture_output=True, text=True, env=env, timeout=600,
    )


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def num(value: str) -> float | None:
    return None if value == "" else float(value)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run") / "runs" / "brokerbench_synthetic" / "manual__1"
    truth = build_synthetic_run(
        run_dir,
        brokers=("kafka", "pulsar"), variants=("default", "fsync"), workers=2, intervals=3,
        warmup_intervals=2, killed=[("pulsar", "fsync", 1)],
        not_honoured={("kafka", "fsync"): "tansu keeps every message in memory; fsync has no meaning"},
        validity={("kafka", "default", 0): {"target_rate_msg_s": 45.0, "achieved_rate_msg_s": 30.0,
                                            "publish_delay_p99_us": 12000.0, "cpu_percent": 99.0,
                                            "clock_offset_ms": 0.0, "client_bound": True,
                                            "reasons": ["client CPU 99 % of one core", "achieved rate 67 % of target"]},
                  ("kafka", "default", 1): {"client_bound": False, "reasons": ["publish-delay p99 1458.0 ms > 50 ms"],
                                            "invalid_reasons": ["publish-delay p99 1,458.0 ms > 50 ms: the producers "
                                                                "did not keep their send schedule"]}},
        # pulsar/default: a fixed-rate workload at 42 % of its target; kafka/fsync: at its target
        kinds={("pulsar", "default"): "latency", ("kafka", "fsync"): "latency"},
        target_rates={("pulsar", "default"): 100.0, ("kafka", "fsync"): 40.0},
        phases={
            # kafka/fsync: another run's broker and foreign load on the host while it was measured
            ("kafka", "fsync", "measure"): {"localhost": host_summary(
                foreign_mean=43.2, foreign_max=97.5, other_runs=["/srv/bb/state/brokerbench_nightly__other"],
                other_cpu=38.0)},
            # the warm-up does not count; quiet measured phases pass
            ("pulsar", "fsync", "warmup"): {"localhost": host_summary(foreign_mean=80.0, other_runs=["/x"])},
            ("pulsar", "fsync", "measure"): {"localhost": host_summary(foreign_mean=4.0)},
            ("pulsar", "default", "measure"): {"localhost": host_summary(foreign_mean=24.9)},
        },
    )
    # a throughput sweep beside the measured phase: it must land in sweep.csv only
    sweep_truth = write_sweep_run(run_dir, broker="kafka", variant="default", drain_intervals=1)
    started = time.monotonic()
    proc = run_job(run_dir)
    wall_s = time.monotonic() - started
    assert proc.returncode == 0, f"spark-submit failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-5000:]}"
    summary = {
        (r["workload"], r["broker"], r["driver"], r["variant"]): r
        for r in read_csv(run_dir / "summary" / "summary.csv")
    }
    timeseries = read_csv(run_dir / "summary" / "timeseries.csv")
    return {"dir": run_dir, "truth": truth, "proc": proc, "summary": summary, "timeseries": timeseries,
            "wall_s": wall_s, "sweep_truth": sweep_truth}


def test_sweep_csv_one_row_per_step_with_exact_latencies(run):
    rows = read_csv(run["dir"] / "summary" / "sweep.csv")
    assert [(r["broker"], r["variant"], int(r["step"])) for r in rows] == [("kafka", "default", s) for s in range(3)]
    for row in rows:
        st = run["sweep_truth"][int(row["step"])]
        assert float(row["target_rate_msg_s"]) == pytest.approx(st.target_rate_msg_s)
        assert float(row["publish_rate_msg_s"]) == pytest.approx(st.acked / st.seconds, rel=1e-12)
        assert int(row["workers"]) == 2 and int(row["intervals"]) == 3  # 2 of load, 1 waiting for the consumers
        for hist, (prefix, unit, divisor) in METRICS.items():
            merged = LogHistogram.from_values(st.values(hist))
            for label, p in PERCENTILES:
                assert float(row[f"{prefix}_{label}_{unit}"]) * divisor == pytest.approx(merged.percentile(p)), \
                    (row["step"], hist, label)
        assert row["stable"] == str(st.stable)
        assert row["reasons"] == ("" if st.stable else "backlog grew")
        assert float(row["publish_p99_bound_ms"]) == 200.0  # the bound the workers judged the step by
        assert float(row["highest_stable_rate_msg_s"]) == 5000.0


W = "1-topic-16-partitions-1kb"


def test_validity_carried_into_summary(run):
    kafka = run["summary"][(W, "kafka", "kafka-latency", "default")]
    assert kafka["client_bound"] == "True"
    assert kafka["validity_reasons"] == ("achieved rate 67 % of target; client CPU 99 % of one core; "
                                         "publish-delay p99 1458.0 ms > 50 ms")
    other = run["summary"][(W, "pulsar", "pulsar-latency", "default")]
    assert other["client_bound"] == "" and other["validity_reasons"] == ""


def test_client_bound_and_late_schedule_make_a_row_invalid(run):
    kafka = run["summary"][(W, "kafka", "kafka-latency", "default")]
    # two workers: every reason names its worker; client1-0's file predates invalid_reasons
    # (client_bound alone, with its reasons), client2-0 reports the delay rule itself
    reasons = ("worker client1-0: client-bound: client CPU 99 % of one core; achieved rate 67 % of target; "
               "worker client2-0: publish-delay p99 1,458.0 ms > 50 ms: the producers did not keep their "
               "send schedule")
    assert kafka["status"] == "invalid: " + reasons
    assert kafka["invalid_reasons"] == reasons


def test_below_target_rate_makes_a_fixed_rate_row_invalid(run):
    row = run["summary"][(W, "pulsar", "pulsar-latency", "default")]
    combo = run["truth"][(W, "pulsar", "pulsar-latency", "default")]
    rate = combo.counters["acked"] / combo.measured_seconds
    assert float(row["target_rate_msg_s"]) == 200.0 and row["kind"] == "latency"
    assert rate < 0.95 * 200
    assert row["status"] == (f"invalid: publish rate {rate:,.0f} msg/s is {rate / 200 * 100:.1f} % of the target "
                             f"200 msg/s (minimum 95 % for a fixed-rate workload)")
    # foreign load of 24.9 % on its host is under the limit (25 %): no reason of its own


def test_contention_from_host_metrics_makes_a_row_invalid(run):
    row = run["summary"][(W, "kafka", "kafka-latency", "fsync")]
    # at its target (40 msg/s per worker): the rate rule passes
    assert float(row["publish_rate_msg_s"]) >= 0.95 * float(row["target_rate_msg_s"]) == 76.0
    assert float(row["host_foreign_cpu_mean_percent"]) == 43.2
    assert run["summary"][(W, "pulsar", "pulsar-latency", "default")]["host_foreign_cpu_mean_percent"] == "24.9"
    assert run["summary"][(W, "kafka", "kafka-latency", "default")]["host_foreign_cpu_mean_percent"] == ""
    assert row["status"] == (
        "invalid: contended: another brokerbench run (/srv/bb/state/brokerbench_nightly__other) on localhost "
        "during the phase (its processes: mean 38.0 % CPU of all cores); foreign load: mean 43.2 % CPU "
        "(of all cores) of processes not of this run on localhost during the phase (limit 25 %; max 97.5 %)")


def test_partial_wins_and_warmup_contention_is_ignored(run):
    row = run["summary"][(W, "pulsar", "pulsar-latency", "fsync")]
    assert row["status"].startswith("partial: ") and "invalid" not in row["status"]
    assert row["invalid_reasons"] == ""


def test_one_summary_row_per_combo_in_csv_and_parquet(run):
    assert set(run["summary"]) == set(run["truth"])
    table = pq.read_table(run["dir"] / "summary" / "summary.parquet").to_pylist()
    assert len(table) == 4
    by_key = {(r["workload"], r["broker"], r["driver"], r["variant"]): r for r in table}
    assert set(by_key) == set(run["truth"])
    for key, row in by_key.items():
        csv_row = run["summary"][key]
        assert list(row) == list(csv_row)  # same columns, same order
        assert row["messages_acked"] == int(csv_row["messages_acked"])
        assert row["publish_latency_p99_ms"] == pytest.approx(float(csv_row["publish_latency_p99_ms"]))


def test_merged_percentiles_match_raw_samples(run):
    for key, combo in run["truth"].items():
        row = run["summary"][key]
        for hist, (prefix, unit, divisor) in METRICS.items():
            raw = combo.values(hist)
            exact_hist = LogHistogram.from_values(raw)
            for label, p in PERCENTILES:
                got = float(row[f"{prefix}_{label}_{unit}"]) * divisor
                # the same value HdrHistogram semantics give on the merged raw samples ...
                assert got == pytest.approx(exact_hist.percentile(p), abs=1e-6), (key, hist, label)
                # ... and within 0.1 % of the exact percentile of the raw samples
                expected = float(np.percentile(raw, p, method="inverted_cdf"))
                assert abs(got - expected) <= 0.001 * expected + 1e-9, (key, hist, label, got, expected)
            assert float(row[f"{prefix}_max_{unit}"]) * divisor == pytest.approx(raw.max())
            assert float(row[f"{prefix}_min_{unit}"]) * divisor == pytest.approx(raw.min())
            assert float(row[f"{prefix}_avg_{unit}"]) * divisor == pytest.approx(raw.mean(), rel=1e-12)
            assert int(row[f"{prefix}_count"]) == raw.size


def test_units_ms_and_us(run):
    row = run["summary"][("1-topic-16-partitions-1kb", "kafka", "kafka-latency", "default")]
    combo = run["truth"][("1-topic-16-partitions-1kb", "kafka", "kafka-latency", "default")]
    p99_us = LogHistogram.from_values(combo.values("publish_latency_us")).percentile(99)
    assert float(row["publish_latency_p99_ms"]) == pytest.approx(p99_us / 1000.0)
    delay_p99_us = LogHistogram.from_values(combo.values("publish_delay_us")).percentile(99)
    assert float(row["publish_delay_p99_us"]) == pytest.approx(delay_p99_us)


def test_counts_and_rates_exact(run):
    for key, combo in run["truth"].items():
        row = run["summary"][key]
        c = combo.counters
        assert int(row["messages_sent"]) == c["sent"]
        assert int(row["messages_acked"]) == c["acked"]
        assert int(row["messages_received"]) == c["received"]
        assert int(row["send_errors"]) == c["send_errors"]
        assert int(row["backlog_end_msgs"]) == combo.backlog_end
        assert int(row["workers"]) == 2
        assert int(row["intervals"]) == 3
        seconds = combo.measured_seconds
        assert float(row["measured_seconds"]) == pytest.approx(seconds, rel=1e-12)
        assert float(row["publish_rate_msg_s"]) == pytest.approx(c["acked"] / seconds, rel=1e-12)
        assert float(row["send_rate_msg_s"]) == pytest.approx(c["sent"] / seconds, rel=1e-12)
        assert float(row["consume_rate_msg_s"]) == pytest.approx(c["received"] / seconds, rel=1e-12)
        assert float(row["publish_error_rate_msg_s"]) == pytest.approx(c["send_errors"] / seconds, rel=1e-12)
        assert float(row["target_rate_msg_s"]) == combo.target_rate_msg_s == {
            "pulsar/default": 200.0, "kafka/fsync": 80.0}.get(f"{key[1]}/{key[3]}", 90.0)
        assert int(row["e2e_negative_count"]) == 2
        assert int(row["latency_overflow_count"]) == 0
        assert row["client_library"] in ("kafka-python", "pulsar-client")
        assert int(row["message_size_bytes"]) == 1024


def test_warmup_excluded(run):
    for key, combo in run["truth"].items():
        row = run["summary"][key]
        # warm-up latencies are 1000x larger: a single one would move the max
        assert float(row["publish_latency_max_ms"]) * 1000 == combo.values("publish_latency_us").max()
        assert int(row["publish_latency_count"]) == combo.values("publish_latency_us").size
    assert all(int(r["interval_index"]) < 3 for r in run["timeseries"])


def test_timeseries_one_row_per_interval(run):
    rows = run["timeseries"]
    assert len(rows) == 4 * 3
    for key, combo in run["truth"].items():
        mine = sorted((r for r in rows if (r["workload"], r["broker"], r["driver"], r["variant"]) == key),
                      key=lambda r: int(r["interval_index"]))
        assert [int(r["interval_index"]) for r in mine] == [0, 1, 2]
        for r in mine:
            i = int(r["interval_index"])
            bounds = combo.interval_bounds[i]
            start_s = (min(s for s, _ in bounds) - combo.phase_start_ns) / 1e9
            assert float(r["interval_start_s"]) == pytest.approx(start_s, abs=1e-9)
            assert float(r["interval_start_s"]) == pytest.approx(10.0 * i, abs=0.01)
            seconds = combo.interval_seconds(i)
            counters = combo.interval_counters[i]
            assert float(r["publish_rate_msg_s"]) == pytest.approx(counters["acked"] / seconds, rel=1e-12)
            assert float(r["consume_rate_msg_s"]) == pytest.approx(counters["received"] / seconds, rel=1e-12)
            assert int(r["backlog_msgs"]) == counters["backlog"]
            assert r["drain_interval"] == str(counters["sent"] == 0)  # every interval of these files sends
            pub = LogHistogram.from_values(combo.interval_values(i, "publish_latency_us"))
            e2e = LogHistogram.from_values(combo.interval_values(i, "e2e_latency_us"))
            delay = LogHistogram.from_values(combo.interval_values(i, "publish_delay_us"))
            assert float(r["publish_latency_p99_ms"]) * 1000 == pytest.approx(pub.percentile(99))
            assert float(r["publish_latency_p50_ms"]) * 1000 == pytest.approx(pub.percentile(50))
            assert float(r["publish_latency_avg_ms"]) * 1000 == pytest.approx(pub.mean())
            assert float(r["e2e_latency_avg_ms"]) * 1000 == pytest.approx(e2e.mean())
            assert float(r["e2e_latency_p99_ms"]) * 1000 == pytest.approx(e2e.percentile(99))
            assert float(r["e2e_latency_max_ms"]) * 1000 == pytest.approx(e2e.max)
            assert float(r["publish_delay_p99_us"]) == pytest.approx(delay.percentile(99))


def test_omb_json(run):
    omb_dir = run["dir"] / "summary" / "omb"
    files = sorted(p.name for p in omb_dir.glob("*.json"))
    assert files == sorted(f"{w}__{d}__{v}.json" for (w, _, d, v) in run["truth"])
    key = ("1-topic-16-partitions-1kb", "pulsar", "pulsar-latency", "fsync")
    combo = run["truth"][key]
    doc = json.loads((omb_dir / "1-topic-16-partitions-1kb__pulsar-latency__fsync.json").read_text())
    listed = ["workload", "driver", "messageSize", "topics", "partitions", "producersPerTopic",
              "consumersPerTopic", "publishRate", "publishErrorRate", "consumeRate", "backlog",
              "aggregatedPublishLatencyQuantiles", "aggregatedEndToEndLatencyQuantiles",
              "aggregatedPublishDelayLatencyQuantiles"]
    for base in ("publishLatency", "publishDelayLatency", "endToEndLatency"):
        listed += [f"{base}{s}" for _, s in OMB_SUFFIXES]
        listed += [f"aggregated{base[0].upper()}{base[1:]}{s}" for _, s in OMB_SUFFIXES]
    missing = [f for f in listed if f not in doc]
    assert not missing
    assert doc["workload"] == key[0] and doc["driver"] == "pulsar fsync (pulsar-latency)"
    assert doc["driverId"] == "pulsar-latency" and doc["broker"] == "pulsar" and doc["variant"] == "fsync"
    # the synthetic workers report every 10 s: each window of the OMB lists is one interval
    assert doc["intervalSeconds"] == 10 and doc["workerIntervalSeconds"] == 10
    assert doc["messageSize"] == 1024 and doc["topics"] == 1 and doc["partitions"] == 16
    assert doc["producersPerTopic"] == 2 and doc["consumersPerTopic"] == 2
    for series in ("publishRate", "publishErrorRate", "consumeRate", "backlog", "publishLatency99pct",
                   "endToEndLatencyAvg", "publishDelayLatency99pct"):
        assert len(doc[series]) == 3, series
    assert doc["backlog"] == [combo.interval_counters[i]["backlog"] for i in range(3)]

    pub = LogHistogram.from_values(combo.values("publish_latency_us"))
    delay = LogHistogram.from_values(combo.values("publish_delay_us"))
    e2e = LogHistogram.from_values(combo.values("e2e_latency_us"))
    # ms for publish and end-to-end latency, µs for publish delay (as OMB)
    assert doc["aggregatedPublishLatency99pct"] == pytest.approx(pub.percentile(99) / 1000)
    assert doc["aggregatedPublishLatencyMax"] == pytest.approx(pub.max / 1000)
    assert doc["aggregatedEndToEndLatencyAvg"] == pytest.approx(e2e.mean() / 1000)
    assert doc["aggregatedPublishDelayLatency99pct"] == pytest.approx(delay.percentile(99))
    assert doc["aggregatedPublishLatencyQuantiles"]["99.0"] == pytest.approx(pub.percentile(99) / 1000)
    assert doc["aggregatedPublishLatencyQuantiles"]["99.9"] == pytest.approx(pub.percentile(99.9) / 1000)
    assert doc["aggregatedEndToEndLatencyQuantiles"]["50.0"] == pytest.approx(e2e.percentile(50) / 1000)
    assert doc["aggregatedPublishDelayLatencyQuantiles"]["95.0"] == pytest.approx(delay.percentile(95))
    assert doc["aggregatedPublishLatencyQuantiles"]["100.0"] == pytest.approx(pub.max / 1000)
    i1 = LogHistogram.from_values(combo.interval_values(1, "publish_latency_us"))
    assert doc["publishLatency99pct"][1] == pytest.approx(i1.percentile(99) / 1000)
    assert doc["status"].startswith("partial")


def test_omb_documents_are_what_omb_charts_read(run):
    """The properties bin/create_charts.py of openmessaging/benchmark relies on
    (tests/support/omb_charts.py), on every document of the run."""
    docs = [json.loads(p.read_text()) for p in sorted((run["dir"] / "summary" / "omb").glob("*.json"))]
    assert len(docs) == len(run["truth"])
    assert chart_problems(docs) == []


def test_partial_status_for_missing_end_record(run):
    statuses = {key[1:]: row["status"] for key, row in run["summary"].items()}
    bad = statuses.pop(("pulsar", "pulsar-latency", "fsync"))
    assert bad.startswith("partial: ")
    assert "client2-0" in bad and "no end record" in bad
    # every other row has an invalid measurement (tests above); none is partial
    assert not any(s.startswith("partial") for s in statuses.values())
    # the killed worker's completed intervals still count
    assert int(run["summary"][("1-topic-16-partitions-1kb", "pulsar", "pulsar-latency", "fsync")]["workers"]) == 2
    assert "partial" in run["proc"].stdout


def test_durability_and_provenance_joined(run):
    kafka_fsync = run["summary"][("1-topic-16-partitions-1kb", "kafka", "kafka-latency", "fsync")]
    assert kafka_fsync["durability_honoured"] == "False"
    assert "tansu keeps every message in memory" in kafka_fsync["durability_note"]
    assert kafka_fsync["broker_implementation"] == "kafka-impl"
    assert kafka_fsync["broker_version"] == "3.1.0"
    assert json.loads(kafka_fsync["durability_settings"]) == {"flush.messages": 1}
    pulsar_default = run["summary"][("1-topic-16-partitions-1kb", "pulsar", "pulsar-latency", "default")]
    assert pulsar_default["durability_honoured"] == "True"
    assert pulsar_default["broker_version"] == "4.0.0"


def test_stdout_table(run):
    out = run["proc"].stdout
    assert "publish_latency_p99_ms" in out
    assert out.count("1-topic-16-partitions-1kb") >= 4


def test_no_measured_data_exits_nonzero(tmp_path):
    # only a warm-up file: nothing to summarise
    meta = default_meta(phase="warmup")
    write_worker_file(tmp_path / "raw" / "w" / "kafka-latency" / "default" / "warmup" / "client1-0.jsonl", meta,
                      [{"index": 0, "start_ns": meta["start_ns"], "end_ns": meta["start_ns"] + 10**10,
                        "sent": 5, "acked": 5, "publish_latency_us": [100, 200]}])
    proc = run_job(tmp_path)
    assert proc.returncode != 0
    # spark-submit passes the Python process's stderr on through its stdout
    assert "no measured data" in proc.stdout + proc.stderr
    assert not (tmp_path / "summary" / "summary.csv").exists()


@pytest.fixture(scope="module")
def five_second_run(tmp_path_factory):
    """Two workers reporting every 5 s: 6 full sending intervals, then a 0.3 s drain that sends
    nothing (a producer-only worker beside a consumer: the drain has acks, receipts and no
    publish delay). Returns the run directory and the raw samples per interval."""
    run_dir = tmp_path_factory.mktemp("run5") / "runs" / "brokerbench_synthetic" / "manual__5s"
    rng = np.random.default_rng(5)
    start = 1_700_000_000_000_000_000
    interval_ns, drain_ns = 5_000_000_000, 300_000_000
    samples: dict[tuple[int, str], list[np.ndarray]] = {}
    counters: dict[int, dict[str, int]] = {}
    for w in range(2):
        records = []
        for i in range(7):
            drain = i == 6
            begin = start + i * interval_ns
            n = 10 if drain else 200
            values = {"publish_latency_us": rng.lognormal(8 + i % 3, 0.8, n).astype(np.int64) + 1,
                      "e2e_latency_us": rng.lognormal(9, 0.8, n).astype(np.int64) + 1,
                      "publish_delay_us": (np.array([], np.int64) if drain
                                           else rng.lognormal(5, 1.0, n).astype(np.int64) + 1)}
            c = {"sent": 0 if drain else n, "acked": n, "received": n, "send_errors": 0, "backlog": 6 - i}
            for f, v in values.items():
                samples.setdefault((i, f), []).append(v)
            for k, v in c.items():
                counters.setdefault(i, {}).setdefault(k, 0)
                counters[i][k] += v
            records.append({"index": i, "start_ns": begin, "end_ns": begin + (drain_ns if drain else interval_ns),
                            **c, **{f: v.tolist() for f, v in values.items()}})
        meta = default_meta(workload="w5", driver="kafka-latency", broker="kafka", variant="fsync-on",
                            worker=f"client1-{w}", interval_s=5, start_ns=start, kind="latency",
                            target_rate_msg_s=0)
        write_worker_file(run_dir / "raw" / "w5" / "kafka-latency" / "fsync-on" / "measure" / f"client1-{w}.jsonl",
                          meta, records)
    # 6-s phases of two workers, 5-s intervals: the second interval runs on 0.3 s into the drain (sends included).
    # "w6": both end records say the producers ran 6.0 s (load_s); "w6-killed": one worker has no end record
    for workload, loads in (("w6", (6.0, 6.0)), ("w6-killed", (6.0, None))):
        for w, load_s in enumerate(loads):
            meta = default_meta(workload=workload, driver="kafka-latency", broker="kafka", variant="fsync-on",
                                worker=f"client1-{w}", interval_s=5, start_ns=start, kind="latency",
                                target_rate_msg_s=100.0)
            records = [{"index": i, "start_ns": start + i * interval_ns,
                        "end_ns": start + (interval_ns if i == 0 else 6_300_000_000),
                        "sent": 250 if i == 0 else 50, "acked": 250 if i == 0 else 50, "received": 0,
                        "publish_latency_us": [1000] * (250 if i == 0 else 50)} for i in range(2)]
            write_worker_file(run_dir / "raw" / workload / "kafka-latency" / "fsync-on" / "measure"
                              / f"client1-{w}.jsonl", meta, records,
                              end=None if load_s is None else {"status": "ok", "load_s": load_s})
    proc = run_job(run_dir)
    assert proc.returncode == 0, f"spark-submit failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-5000:]}"
    return {"dir": run_dir, "samples": samples, "counters": counters, "interval_ns": interval_ns}


def test_omb_windows_of_5_s_intervals_merge_histograms_and_fold_the_drain(five_second_run):
    run = five_second_run
    doc = json.loads((run["dir"] / "summary" / "omb" / "w5__kafka-latency__fsync-on.json").read_text())
    assert chart_problems([doc]) == []
    assert doc["intervalSeconds"] == 10 and doc["workerIntervalSeconds"] == 5
    members = {0: [0, 1], 1: [2, 3], 2: [4, 5, 6]}  # the drain (6) joins the last window
    assert len(doc["publishRate"]) == 3
    # the drain's time does not count: every window is 10 s of load
    assert doc["intervalSecondsMeasured"] == [pytest.approx(10.0)] * 3
    for w, indexes in members.items():
        c = {k: sum(run["counters"][i][k] for i in indexes) for k in ("acked", "received")}
        assert doc["publishRate"][w] == pytest.approx(c["acked"] / 10.0)
        assert doc["consumeRate"][w] == pytest.approx(c["received"] / 10.0)
        assert doc["backlog"][w] == run["counters"][indexes[-1]]["backlog"]
        for field, name, divisor in (("publish_latency_us", "publishLatency", 1000.0),
                                     ("e2e_latency_us", "endToEndLatency", 1000.0),
                                     ("publish_delay_us", "publishDelayLatency", 1.0)):
            raw = LogHistogram.from_values(np.concatenate([v for i in indexes for v in run["samples"][(i, field)]]))
            # the window's percentiles come from the merged samples, not from the intervals' percentiles
            assert doc[f"{name}99pct"][w] == pytest.approx(raw.percentile(99) / divisor), (w, name)
            assert doc[f"{name}50pct"][w] == pytest.approx(raw.percentile(50) / divisor), (w, name)
            assert doc[f"{name}Max"][w] == pytest.approx(raw.max / divisor), (w, name)
            assert doc[f"{name}Avg"][w] == pytest.approx(raw.mean() / divisor), (w, name)
            assert doc[f"{name}Count"][w] == raw.count
    # timeseries.csv keeps every worker interval as measured, the drain flagged
    rows = [r for r in read_csv(run["dir"] / "summary" / "timeseries.csv") if r["workload"] == "w5"]
    assert [r["drain_interval"] for r in rows] == ["False"] * 6 + ["True"]


def test_rates_are_per_second_the_producers_ran_not_per_second_of_the_drain(five_second_run):
    summary = {r["workload"]: r for r in read_csv(five_second_run["dir"] / "summary" / "summary.csv")}
    # 2 workers x 300 acknowledged over the 6.0 s they sent (load_s): 100 msg/s, the target, where the intervals'
    # span (6.3 s, the last interval running on into the drain) would read 95.2
    assert float(summary["w6"]["measured_seconds"]) == pytest.approx(6.0)
    assert float(summary["w6"]["publish_rate_msg_s"]) == pytest.approx(600 / 6.0)
    # a worker without an end record (killed): its seconds are unknown, the span of the sending intervals counts
    assert float(summary["w6-killed"]["measured_seconds"]) == pytest.approx(6.3)
    assert float(summary["w6-killed"]["publish_rate_msg_s"]) == pytest.approx(600 / 6.3)
