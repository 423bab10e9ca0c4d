"""The cross-check's parsers on the vendor tools' real output, and its agreement table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from brokerbench import crosscheck as xc
from brokerbench.histogram import LogHistogram

DATA = Path(__file__).parent / "data" / "crosscheck"


def test_kafka_producer_performance_summary_line_is_parsed():
    # Kafka 4.1.1's ProducerPerformance, 5,000 records of 100 B at 1,000 msg/s against a local broker
    f = xc.parse_kafka_producer_performance((DATA / "kafka-producer-performance-4.1.1.txt").read_text())
    assert f.records == 5000
    assert f.achieved_msg_s == pytest.approx(994.4)
    assert (f.publish_p50_ms, f.publish_p99_ms, f.publish_p999_ms) == (5.0, 111.0, 115.0)
    assert f.e2e_p50_ms is None
    assert "whole ms" in f.note


def test_kafka_producer_performance_steady_state_after_its_warmup():
    # Kafka 4.2.1's ProducerPerformance with --warmup-records 5000 at 1,000 msg/s: the whole run's p99 is 89 ms,
    # the steady state's 8 ms
    f = xc.parse_kafka_producer_performance((DATA / "kafka-producer-performance-4.2.1-warmup.txt").read_text())
    assert (f.records, f.achieved_msg_s) == (10000, pytest.approx(996.512207))
    assert (f.publish_p50_ms, f.publish_p99_ms, f.publish_p999_ms) == (2.0, 8.0, 18.0)


def test_kafka_producer_performance_stopped_before_its_summary_uses_its_windows():
    text = ("249301 records sent, 49850.2 records/sec (4.75 MB/sec), 3.1 ms avg latency, 40.0 ms max latency.\n"
            "250120 records sent, 50014.0 records/sec (4.77 MB/sec), 2.9 ms avg latency, 35.0 ms max latency.\n")
    f = xc.parse_kafka_producer_performance(text)
    assert f.records == 499421
    assert f.achieved_msg_s == pytest.approx((49850.2 + 50014.0) / 2)
    assert f.publish_p99_ms is None


def test_perf_test_summary_is_parsed_in_ms():
    # RabbitMQ PerfTest 2.22.1, 1 producer / 1 consumer, 100 B at 1,000 msg/s, confirms, 4 s
    f = xc.parse_perf_test((DATA / "perftest-2.22.1.txt").read_text())
    assert f.achieved_msg_s == 1056
    assert (f.publish_p50_ms, f.publish_p99_ms) == (pytest.approx(0.235), pytest.approx(49.146))
    assert (f.e2e_p50_ms, f.e2e_p99_ms) == (pytest.approx(0.315), pytest.approx(44.524))
    assert f.publish_p999_ms is None and f.e2e_p999_ms is None


def test_pulsar_perf_aggregated_lines_are_parsed():
    # the layout of PerformanceProducer's closing lines (Pulsar 3.x / 4.x)
    text = ("Aggregated throughput stats --- 10001 records sent --- 999.912 msg/s --- 0.763 Mbit/s\n"
            "Aggregated latency stats --- Latency: mean:   2.310 ms - med:   2.101 - 95pct:   3.360 - "
            "99pct:   5.523 - 99.9pct:  12.991 - 99.99pct:  20.031 - 99.999pct:  20.031 - Max:  20.031\n")
    f = xc.parse_pulsar_perf(text)
    assert (f.records, f.achieved_msg_s) == (10001, pytest.approx(999.912))
    assert (f.publish_p50_ms, f.publish_p99_ms, f.publish_p999_ms) == (2.101, 5.523, 12.991)


def test_pulsar_perf_output_captured_from_the_tool():
    # pulsar-perf produce of pulsar-testclient 4.0.6 on the 4.0.7 libraries, 1,000 msg/s, 1 s warm-up + 3 s
    f = xc.parse_pulsar_perf((DATA / "pulsar-perf-produce-4.0.6.txt").read_text())
    assert f.records == 4001 and f.achieved_msg_s == pytest.approx(399.787)  # over its 10 s report period
    assert (f.publish_p50_ms, f.publish_p99_ms, f.publish_p999_ms) == (3.891, 26.92, 36.252)


def test_kafka_end_to_end_latency_output_captured_from_the_tool():
    """EndToEndLatency 4.1.1 against Apache Kafka 4.1.1 (900 messages): whole-ms percentiles, and one message
    per average latency as its rate (it sends the next only when the last was received)."""
    f = xc.parse_kafka_end_to_end_latency((DATA / "kafka-end-to-end-latency-4.1.1.txt").read_text())
    assert (f.e2e_p50_ms, f.e2e_p99_ms, f.e2e_p999_ms) == (9.0, 104.0, 1637.0)
    assert f.achieved_msg_s == pytest.approx(1000 / 17.8498)
    assert f.publish_p50_ms is None
    assert xc.parse_kafka_end_to_end_latency("Exception in thread main").note.startswith("no EndToEndLatency")


def test_the_end_to_end_phase_runs_the_drivers_with_a_consumer_at_the_tools_rate(monkeypatch, tmp_path):
    from brokerbench.environments.machine import distributions as d

    monkeypatch.setattr(xc, "tool_distribution",
                        lambda b, v: d.Distribution(xc.TOOLS[b], "4.1.1", tmp_path, "maven", "log4j2", {}))
    monkeypatch.setattr(xc, "run_vendor_e2e", lambda *a, **k: (xc.ToolFigures(
        achieved_msg_s=437.4, e2e_p50_ms=2.0, e2e_p99_ms=4.0, e2e_p999_ms=9.0), ""))
    jobs = []

    def run_worker(job, work, seconds, warmup_s=0.0, processes=1):
        jobs.append(job)
        return xc.ToolFigures(achieved_msg_s=437.0, e2e_p50_ms=2.2, e2e_p99_ms=3.0, e2e_p999_ms=9.0)

    monkeypatch.setattr(xc, "run_worker", run_worker)
    monkeypatch.setattr(xc, "library_version", lambda lib: "1")
    out = xc.crosscheck("kafka", {"bootstrap_servers": "127.0.0.1:1"}, "4.1.1", rates=(), sizes=(100,), seconds=5,
                        max_probe=False, work_dir=tmp_path, say=lambda *_: None)
    assert [(r["side"], r["phase"], r["rate_msg_s"]) for r in out["rows"]] == [
        (xc.VENDOR, "e2e", 437.0)] + [(xc.BROKERBENCH, "e2e", 437.0)] * len(xc.CLIENT_LIBRARIES["kafka"])
    assert all(j.rate_msg_s == 437.0 and j.consumers_per_subscription == 1 and j.kind == "latency"
               for j in jobs)
    ours = out["rows"][1]
    assert (ours["ratio_e2e_p50"], ours["ratio_e2e_p99"], ours["ratio_e2e_p999"]) == (1.1, 0.75, 1.0)
    assert out["settings"]["e2e_phase"] is True
    # brokers without such a tool get no end-to-end phase
    assert not xc.crosscheck("rabbitmq", {"amqp_uris": ["amqp://x"]}, None, rates=(), sizes=(100,), seconds=5,
                             max_probe=False, work_dir=tmp_path, say=lambda *_: None)["rows"]


def test_output_without_figures_says_so():
    assert xc.parse_pulsar_perf("Exception in thread main").note.startswith("no PerformanceProducer")
    stopped = xc.parse_pulsar_perf(  # pulsar-perf stopped on an error prints its summary with zeros
        "java.lang.IllegalArgumentException: rate must be positive\n"
        "Aggregated throughput stats --- 0 records sent --- 0.000 msg/s --- 0.000 Mbit/s\n"
        "Aggregated latency stats --- Latency: mean:   0.000 ms - med:   0.000 - 95pct:   0.000 - 99pct:   0.000 - "
        "99.9pct:   0.000 - 99.99pct:   0.000 - 99.999pct:   0.000 - Max:   0.000\n")
    assert (stopped.achieved_msg_s, stopped.publish_p50_ms) == (None, None)
    assert xc.parse_kafka_producer_performance("").achieved_msg_s is None
    assert xc.parse_perf_test("").publish_p50_ms is None


def _interval(i: int, latencies_us: list[int], acked: int, seconds: float = 1.0) -> str:
    h = LogHistogram()
    h.record_many(latencies_us)
    start = 10**12 + int(i * seconds * 1e9)
    return json.dumps({"record": "interval", "index": i, "start_ns": start, "end_ns": start + int(seconds * 1e9),
                       "acked": acked, "publish_latency_us": h.to_dict(), "e2e_latency_us": None})


def _worker_lines(latencies_us: list[int], acked: int, load_s: float) -> list[str]:
    return [_interval(0, latencies_us, acked, load_s),
            json.dumps({"record": "end", "status": "ok", "error": None, "totals": {"acked": acked},
                        "load_s": load_s})]


def test_the_warmup_is_left_out_of_the_worker_figures():
    # 3 s of warm-up with 400 ms latencies and a slow start, then 5 s at 1 ms and 1,000 msg/s
    lines = [_interval(i, [400_000] * 10, 200) for i in range(3)]
    lines += [_interval(i, [1000] * 100, 1000) for i in range(3, 8)]
    lines.append(json.dumps({"record": "end", "status": "ok", "totals": {"acked": 5600}, "load_s": 8.0}))
    whole = xc.summarise_worker_output(lines)
    assert whole.publish_p99_ms == pytest.approx(400, rel=0.05) and whole.achieved_msg_s == 700
    steady = xc.summarise_worker_output(lines, warmup_s=3)
    assert steady.publish_p99_ms == pytest.approx(1.0, rel=0.05) and steady.achieved_msg_s == 1000
    assert steady.note == "worker ok, first 3 s left out"


def test_the_vendor_tools_leave_out_their_warmup_where_they_can(tmp_path):
    from brokerbench.environments.machine import distributions as d

    def argv(broker, version, warmup_s):
        dist = d.Distribution(xc.TOOLS[broker], version, tmp_path, "maven", "log4j2", {})
        ep = {"bootstrap_servers": "127.0.0.1:9092", "service_url": "pulsar://127.0.0.1:6650",
              "amqp_uris": ["amqp://127.0.0.1"]}
        return xc.vendor_argv(broker, dist, ep, "t", 1000, 100, 10, tmp_path, warmup_s)

    k42 = argv("kafka", "4.2.0", 5)  # KIP-1052: Kafka 4.2's ProducerPerformance has --warmup-records
    assert k42[k42.index("--num-records") + 1] == "15000" and k42[k42.index("--warmup-records") + 1] == "5000"
    k41 = argv("kafka", "4.1.1", 5)  # 4.1 has none: the whole 15 s count, and the row's note says so
    assert "--warmup-records" not in k41 and k41[k41.index("--num-records") + 1] == "15000"
    pulsar = argv("pulsar", "4.0.6", 5)
    assert pulsar[pulsar.index("--warmup-time") + 1] == "5" and pulsar[pulsar.index("--test-duration") + 1] == "15"
    assert argv("pulsar", "4.0.6", 0)[pulsar.index("--warmup-time") + 1] == "0"  # not its default of 1 s
    unthrottled = xc.vendor_argv("pulsar", d.Distribution("pulsar-testclient", "4.0.6", tmp_path, "maven", "log4j2",
                                                          {}), {"service_url": "pulsar://x"}, "t", 0, 100, 10, tmp_path)
    assert int(unthrottled[unthrottled.index("--rate") + 1]) > 0  # pulsar-perf refuses 0
    perftest = argv("rabbitmq", xc.PERF_TEST_VERSION, 5)
    assert perftest[perftest.index("--time") + 1] == "15"


def test_worker_processes_side_by_side_are_merged_and_their_rates_summed():
    fast = [_interval(0, [1000] * 99, 6000, 5.0),
            json.dumps({"record": "end", "status": "ok", "totals": {"acked": 6000}, "load_s": 5.0})]
    slow = [_interval(0, [9000] * 99, 4000, 5.0),
            json.dumps({"record": "end", "status": "error", "error": "boom", "totals": {"acked": 4000}, "load_s": 5.0})]
    f = xc.summarise_worker_outputs([fast, slow])
    assert f.achieved_msg_s == 2000  # 1,200 + 800 msg/s
    assert f.records == 10000  # acknowledged messages of both
    assert f.publish_p50_ms == pytest.approx(1.0, rel=0.05) and f.publish_p99_ms == pytest.approx(9.0, rel=0.05)
    assert f.note == "2 worker processes: ok, error: boom"


def test_worker_output_is_merged_into_the_same_figures():
    f = xc.summarise_worker_output(_worker_lines([1000] * 99 + [50_000], acked=5000, load_s=5.0))
    assert f.achieved_msg_s == 1000
    assert f.publish_p50_ms == pytest.approx(1.0, rel=0.05)
    assert f.e2e_p50_ms is None
    assert f.note == "worker ok"


def test_agreement_table_has_units_and_ratios_to_the_vendor_row():
    vendor = xc.ToolFigures(achieved_msg_s=1000, publish_p50_ms=2.0, publish_p99_ms=10.0)
    ours = xc.ToolFigures(achieved_msg_s=990, publish_p50_ms=2.2, publish_p99_ms=9.0, publish_p999_ms=12.0)
    rows = xc.agreement_table([xc.Measurement("kafka", xc.VENDOR, "ProducerPerformance 4.1.1", "fixed", 1000.0, 100,
                                              5, vendor),
                               xc.Measurement("kafka", xc.BROKERBENCH, "confluent-kafka 2.x", "fixed", 1000.0, 100, 5,
                                              ours)])
    assert list(rows[0]) == xc.COLUMNS
    assert rows[0]["ratio_publish_p50"] is None
    assert rows[1]["ratio_publish_p50"] == 1.1
    assert rows[1]["ratio_publish_p99"] == 0.9
    assert rows[1]["ratio_publish_p999"] is None  # the vendor did not report it
    assert rows[1]["ratio_achieved"] == 0.99
    text = xc.format_table(rows)
    assert "publish_p99_ms" in text and "achieved_msg_s" in text


def test_results_are_written_as_csv_and_json(tmp_path):
    rows = xc.agreement_table([xc.Measurement("rabbitmq", xc.VENDOR, "PerfTest 2.22.1", "fixed", 1000.0, 100, 5,
                                              xc.ToolFigures(achieved_msg_s=1000))])
    files = xc.write_results({"rows": rows, "settings": {"x": 1}, "provenance": {"tool_version": "2.22.1"}},
                             xc.calibration_dir(tmp_path, "rabbitmq", when=0))
    assert files["csv"].endswith("calibration/rabbitmq/19700101T000000Z/agreement.csv")
    assert Path(files["csv"]).read_text().splitlines()[0].split(",") == xc.COLUMNS
    assert json.loads(Path(files["json"]).read_text())["provenance"]["tool_version"] == "2.22.1"


def test_calibrate_refuses_an_s3_results_root(capsys, monkeypatch):
    from brokerbench import cli

    monkeypatch.setattr(cli.local_airflow, "apply_defaults", lambda: None)
    assert cli.main(["calibrate", "--broker", "rabbitmq", "--results-root", "s3://bucket/results"]) == cli.EXIT_REFUSED
    assert "local results root" in capsys.readouterr().err


def test_calibrate_against_a_given_endpoint_writes_the_table(tmp_path, monkeypatch, capsys):
    from brokerbench import cli

    monkeypatch.setattr(cli.local_airflow, "apply_defaults", lambda: None)
    seen = {}

    def fake(broker, ep, version, **kw):
        seen.update(broker=broker, ep=ep, version=version, **kw)
        rows = xc.agreement_table([xc.Measurement(broker, xc.VENDOR, "PerfTest 2.22.1", "fixed", 1000.0, 100, 2,
                                                  xc.ToolFigures(achieved_msg_s=1000))])
        return {"rows": rows, "settings": {}, "provenance": {"broker_version": version}}

    monkeypatch.setattr(xc, "crosscheck", fake)
    rc = cli.main(["calibrate", "--broker", "rabbitmq", "--endpoint", '{"amqp_uris": ["amqp://h:1/%2F"]}',
                   "--version", "3.10.8", "--seconds", "2", "--rates", "1000", "--sizes", "100", "--no-max",
                   "--results-root", str(tmp_path)])
    assert rc == 0
    assert (seen["version"], seen["seconds"], seen["rates"], seen["max_probe"]) == ("3.10.8", 2.0, (1000.0,), False)
    written = list((tmp_path / "calibration" / "rabbitmq").glob("*/agreement.csv"))
    assert len(written) == 1
    assert "agreement table:" in capsys.readouterr().out


def test_tool_versions_follow_the_broker_with_a_neighbouring_patch_as_fallback(monkeypatch):
    from brokerbench.environments.machine import distributions as d

    served = {("kafka-tools", "4.1.1"), ("pulsar-testclient", "4.0.6"), ("perf-test", xc.PERF_TEST_VERSION)}
    asked = []

    def resolve(tool, version, libraries=None):
        asked.append((tool, version, libraries))
        if (tool, version) not in served:
            raise d.DistributionError(tool, version, f"Could not find artifact {tool}:{version}")
        return d.Distribution(tool, version, Path("/x"), "maven", "log4j2",
                              {"libraries_version": libraries or version})

    monkeypatch.setattr(d, "resolve", resolve)
    assert xc.tool_distribution("kafka", "4.1.1").version == "4.1.1"
    assert xc.tool_distribution("rabbitmq", "3.10.8").version == xc.PERF_TEST_VERSION
    pulsar = xc.tool_distribution("pulsar", "4.0.7")
    # the neighbour's perf tool jar, on the client and broker libraries of the broker's own version
    assert (pulsar.version, pulsar.manifest["libraries_version"]) == ("4.0.6", "4.0.7")
    assert asked[-2:] == [("pulsar-testclient", "4.0.7", None), ("pulsar-testclient", "4.0.6", "4.0.7")]
    with pytest.raises(d.DistributionError) as e:
        xc.tool_distribution("kafka", "3.9.9")
    assert "3.9.8" in str(e.value) and "3.9.9" in str(e.value)


@pytest.mark.parametrize("broker,version,left_out", [("kafka", "4.2.1", 5.0), ("kafka", "4.1.1", 0.0),
                                                      ("rabbitmq", xc.PERF_TEST_VERSION, 0.0)])
def test_both_sides_measure_the_same_window(monkeypatch, tmp_path, broker, version, left_out):
    """The worker leaves the warm-up out only where the vendor tool can; otherwise both keep the whole run."""
    from brokerbench.environments.machine import distributions as d

    monkeypatch.setattr(xc, "tool_distribution",
                        lambda b, v: d.Distribution(xc.TOOLS[b], version, tmp_path, "maven", "log4j2", {}))
    monkeypatch.setattr(xc, "run_vendor", lambda *a, **k: (xc.ToolFigures(achieved_msg_s=1000.0), ""))
    worker_calls = []

    def run_worker(job, work, seconds, warmup_s=0.0, processes=1):
        worker_calls.append((job.duration_s, job.interval_s, warmup_s, processes))
        return xc.ToolFigures(achieved_msg_s=1000.0)

    monkeypatch.setattr(xc, "run_worker", run_worker)
    monkeypatch.setattr(xc, "library_version", lambda lib: "1")
    out = xc.crosscheck(broker, {}, version, rates=(1000.0,), sizes=(100,), seconds=10, max_probe=True,
                        drivers=(xc.CLIENT_LIBRARIES[broker][0],), work_dir=tmp_path, say=lambda *_: None,
                        warmup_s=5.0, max_processes=3, e2e=False)
    assert worker_calls[0][0] == 15.0 and worker_calls[0][2] == left_out  # always the same length as the tool's
    assert {r["seconds"] for r in out["rows"]} == {15.0 - left_out}
    assert out["settings"]["vendor_leaves_out_warmup"] is (left_out > 0)
    # the fixed phase in one worker process, the max probe in one and then in three
    assert [c[3] for c in worker_calls] == [1, 1, 3]
    assert [r["client"] for r in out["rows"]][-1].endswith(" x3 processes")
