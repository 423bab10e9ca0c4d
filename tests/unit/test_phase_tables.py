"""Every table's rows of one phase, as the executors build them (spark_jobs/brokerbench_spark/phase_tables.py),
without Spark: records read as Spark's JSON reader reads them, counters and rates, merged percentiles, the drain
interval, OMB windows, sweep steps, and the summary's status on the driver."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "spark_jobs"))
sys.path.insert(0, str(ROOT / "include"))

from brokerbench.histogram import LogHistogram  # noqa: E402
from brokerbench_spark.phase_tables import (  # noqa: E402
    SUMMARY_COLUMNS,
    SUMMARY_SCHEMA,
    contention_rows,
    finish_summary,
    parse_record,
    phase_label,
    phase_rows,
    provenance_row,
)
from brokerbench_spark.schema import METRIC_NAMES  # noqa: E402

S = 1_000_000_000


def meta(worker: str, phase: str = "measure", **extra) -> dict:
    return {"record": "meta", "workload": "w", "broker": "kafka", "driver": "d", "variant": "fsync-off",
            "phase": phase, "worker": worker, "host": worker.split("-")[0], "interval_s": 5, "kind": "latency",
            "target_rate_msg_s": 100, "topics": 1, "producers": 1, "consumers": 1, **extra}


def interval(index: int, sent: int, publish: np.ndarray, start_s: float = None, seconds: float = 5.0,
             **extra) -> dict:
    start = int(((index * 5.0) if start_s is None else start_s) * S)
    return {"record": "interval", "index": index, "start_ns": start, "end_ns": start + int(seconds * S),
            "sent": sent, "acked": sent, "received": sent, "send_errors": 0, "backlog": index,
            "publish_latency_us": LogHistogram.from_values(publish).to_dict(), **extra}


def write(path: Path, records: list, tail: str = "") -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n" + tail)
    return str(path)


def tables(run: int, files: list[str]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for table, r, row in phase_rows([(run, files)]):
        assert r == run
        out.setdefault(table, []).append(row)
    return out


def test_records_are_read_as_sparks_json_reader_reads_them():
    r = parse_record(json.dumps({"record": "interval", "index": 3, "sent": "12", "interval_s": 5,
                                 "workload": 7, "extra": 1}))
    assert r["index"] == 3 and r["sent"] is None  # a string is no long: null
    assert r["workload"] == "7"  # a number in a string column keeps its text
    assert r["interval_s"] == 5.0 and isinstance(r["interval_s"], float)  # an int read as a double
    assert "extra" not in r  # unknown fields are ignored
    assert parse_record('{"record": "interv') is None  # a line cut short: a record of nulls
    assert parse_record("[1, 2]") is None


def test_a_phase_gives_counters_rates_and_percentiles_of_its_merged_histograms(tmp_path):
    rng = np.random.default_rng(1)
    samples = {(w, i): rng.integers(100, 50_000, 300) for w in range(2) for i in range(3)}
    files = []
    for w in range(2):
        records = [meta(f"c{w}-0", lead_in_s=1.0 + w)]
        records += [interval(i, 0 if i == 2 else 500, samples[(w, i)], seconds=5.0 if i < 2 else 0.2)
                    for i in range(3)]
        records.append({"record": "end", "status": "ok", "cpu_percent": 10.0 + w})
        files.append(write(tmp_path / "raw/w/d/fsync-off/measure" / f"c{w}.jsonl", records))
    out = tables(0, files)

    [part] = out["summary"]
    assert part["workers"] == 2 and part["intervals"] == 3
    assert part["messages_sent"] == 2_000 and part["client_cpu_max_percent"] == 11.0
    assert part["target_rate_msg_s"] == 200.0  # summed over the workers
    assert part["measured_seconds"] == 10.0  # the seconds of load: the drain interval sent nothing
    assert part["backlog_end_msgs"] == 4  # each worker's last interval
    assert part["lead_in_s"] == 2.0  # the longest of the workers' lead-ins
    every = LogHistogram.from_values(np.concatenate(list(samples.values())))
    assert part["publish_latency_p99_ms"] == min(every.percentile(99.0), every.max) / 1000.0
    assert part["publish_latency_count"] == 1_800
    assert part["e2e_latency_count"] == 0 and part["e2e_latency_avg_ms"] is None

    series = out["timeseries"]
    assert [r["interval_index"] for r in series] == [0, 1, 2]
    assert [r["drain_interval"] for r in series] == [False, False, True]
    assert series[0]["publish_rate_msg_s"] == 1_000 / 5.0
    first = LogHistogram.from_values(np.concatenate([samples[(0, 0)], samples[(1, 0)]]))
    assert series[0]["publish_latency_p50_ms"] == min(first.percentile(50.0), first.max) / 1000.0

    # 5 s intervals: two per 10 s window; the drain joins the last window without its time
    [window] = out["omb"]
    assert window["window"] == 0 and window["intervals"] == 3 and window["window_seconds"] == 10.0
    assert window["publish_latency_count"] == 1_800 and window["e2e_latency_count"] == 0
    assert {q["metric"] for q in out["quantiles"]} == set(METRIC_NAMES)

    row = finish_summary(part, None, None)
    assert list(row) == ["run", *SUMMARY_COLUMNS] == ["run", *[f.name for f in SUMMARY_SCHEMA.fields]]
    assert row["status"] == "ok" and row["publish_rate_msg_s"] == 200.0 and row["e2e_negative_count"] == 0


def test_the_status_names_a_missing_end_a_low_rate_and_contention(tmp_path):
    records = [meta("c0-0", target_rate_msg_s=1000), interval(0, 500, np.arange(1, 100))]
    f = write(tmp_path / "raw/w/d/fsync-off/measure/c0.jsonl", records, tail='{"record": "end", "stat')
    [part] = tables(0, [f])["summary"]
    assert part["partial"] == "partial: worker c0-0 has no end record"
    assert part["lead_in_s"] is None  # a file of a worker before the lead-in: empty
    label = phase_label("w", "d", "fsync-off")
    contention = contention_rows([json.dumps({"phase": "measure", "label": label, "hosts": {
        "client1": {"foreign_cpu_mean_percent": 43.21, "foreign_cpu_max_percent": 97.5,
                    "other_runs": ["/srv/x"], "other_runs_cpu_mean_percent": 38.0}}})])
    row = finish_summary(part, None, contention[label])
    assert row["status"] == (
        "partial: worker c0-0 has no end record | invalid: publish rate 100 msg/s is 10.0 % of the target "
        "1,000 msg/s (minimum 95 % for a fixed-rate workload); contended: another brokerbench run (/srv/x) on "
        "client1 during the phase (its processes: mean 38.0 % CPU of all cores); foreign load: mean 43.2 % CPU "
        "(of all cores) of processes not of this run on client1 during the phase (limit 25 %; max 97.5 %)")
    assert row["host_foreign_cpu_mean_percent"] == 43.21


def test_several_workers_name_their_invalid_reasons(tmp_path):
    files = []
    for w in range(2):
        end = {"record": "end", "status": "ok",
               "validity": {"client_bound": w == 0, "reasons": [f"cpu {w}"],
                            **({"invalid_reasons": ["late"]} if w else {})}}
        files.append(write(tmp_path / f"raw/w/d/fsync-off/measure/c{w}.jsonl",
                           [meta(f"c{w}-0"), interval(0, 500, np.arange(1, 100)), end]))
    [part] = tables(0, files)["summary"]
    row = finish_summary(part, None, None)
    assert row["invalid_reasons"] == "worker c0-0: client-bound: cpu 0; worker c1-0: late"
    assert row["client_bound"] is True and row["validity_reasons"] == "cpu 0; cpu 1"


def test_sweep_steps_are_rows_of_their_own_with_the_highest_stable_rate(tmp_path):
    records = [meta("c0-0", phase="sweep", client_library="pulsar-client-java", client_library_version="4.0.7")]
    for step, rate in enumerate((100.0, 200.0)):
        records += [interval(step * 2 + i, 500, np.arange(1, 100) * (step + 1), start_s=10.0 * step + 5 * i,
                             step=step, step_target_rate_msg_s=rate) for i in range(2)]
    records.append({"record": "end", "status": "ok", "sweep_steps": [
        {"step": 0, "stable": True}, {"step": 1, "stable": False, "reason": "backlog grew"}]})
    out = tables(0, [write(tmp_path / "raw/w/d/fsync-off/sweep/c0.jsonl", records)])
    assert set(out) == {"sweep"}  # a sweep alone has no summary, time series or OMB rows
    steps = out["sweep"]
    assert [(s["step"], s["target_rate_msg_s"], s["stable"], s["reasons"]) for s in steps] == [
        (0, 100.0, True, None), (1, 200.0, False, "backlog grew")]
    assert all(s["highest_stable_rate_msg_s"] == 100.0 for s in steps)
    assert steps[1]["publish_latency_max_ms"] == 198 / 1000.0
    # each step says what generated its load, as the meta records do
    assert {(s["client_library"], s["client_library_version"]) for s in steps} == {("pulsar-client-java", "4.0.7")}


def test_provenance_keeps_the_settings_text_on_one_line():
    text = '{"implementation": "apache-kafka", "version": "4.1.1", "durability": {"honoured": true,\n' \
           ' "settings": {"a": 1,\n   "b": 2}}}'
    broker, variant, cols = provenance_row("/r/provenance/kafka__fsync-on.json", text, '{"a": 1,\n   "b": 2}')
    assert (broker, variant) == ("kafka", "fsync-on")
    assert cols["durability_settings"] == '{"a": 1, "b": 2}' and cols["durability_honoured"] is True
