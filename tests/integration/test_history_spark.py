"""spark_jobs/history.py under a real spark-submit (local[2]): append, replace, never duplicate.

Two spark-submits for the module: the first appends runs A and B, the second
appends run A again with other numbers (a re-run of the same DAG run).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from brokerbench.history import history_run_key, read_history, run_meta, write_run_meta

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "spark_jobs" / "history.py"


INVALID = ("client-bound: client process CPU 97 % (>= 85 %: about one core is the ceiling of one Python process); "
           "foreign load: mean 43.2 % CPU (of all cores) of processes not of this run on localhost during the "
           "phase (limit 25 %; max 97.5 %)")


def write_summary(run_dir: Path, rows: list[dict]) -> None:
    out = run_dir / "summary" / "summary.parquet"
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), out / "part-00000.parquet")
    (out / "_SUCCESS").write_text("")


def summary_row(broker: str, variant: str, version: str | None, p99: float, **extra) -> dict:
    return {"workload": "w1", "broker": broker, "driver": f"{broker}-latency", "variant": variant,
            "broker_implementation": f"{broker}-impl", "broker_version": version, "durability_honoured": True,
            "client_library": "lib", "client_library_version": "1.0", "brokerbench_version": "0.1.0",
            "target_rate_msg_s": 1000.0, "publish_rate_msg_s": 999.0, "publish_latency_p99_ms": p99,
            "e2e_latency_p99_ms": p99 * 2, "status": "ok", **extra}


def spark_submit(*args: str) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run([str(bin_dir / "spark-submit"), "--master", "local[2]", str(JOB), *args],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    history = root / "history"
    run_a = root / "runs" / "brokerbench_nightly" / "scheduled__2026-11-20T00_00_00_00_00"
    run_b = root / "runs" / "brokerbench_nightly" / "scheduled__2026-11-21T00_00_00_00_00"
    write_summary(run_a, [summary_row("kafka", "fsync-on", "3.8.0", 5.0),
                          summary_row("rabbitmq", "fsync-on", None, 7.0)])
    write_run_meta(run_a, run_meta("brokerbench_nightly", "scheduled__2026-11-20T00:00:00+00:00", "scheduled",
                                   "2026-11-20T00:00:00+00:00", "local", "nightly-latency"))
    # run B's row is invalid (columns of a newer aggregation: invalid_reasons, kind, ...)
    write_summary(run_b, [summary_row("kafka", "fsync-on", "3.8.0", 6.0, status=f"invalid: {INVALID}",
                                      invalid_reasons=INVALID, kind="latency", client_bound=True,
                                      host_foreign_cpu_mean_percent=43.2)])
    write_run_meta(run_b, run_meta("brokerbench_nightly", "scheduled__2026-11-21T00:00:00+00:00", "scheduled",
                                   "2026-11-21T00:00:00+00:00", "local", "nightly-latency"))
    first = spark_submit("--history-root", str(history), "--run-dir", str(run_a), "--run-dir", str(run_b))
    assert first.returncode == 0, first.stdout + first.stderr[-4000:]
    after_first = read_history(history)
    # the same DAG run again (e.g. cleared and re-run): other numbers, and broker version now known
    write_summary(run_a, [summary_row("kafka", "fsync-on", "3.8.0", 50.0),
                          summary_row("rabbitmq", "fsync-on", "4.1.2", 70.0)])
    second = spark_submit("--history-root", str(history), "--run-dir", str(run_a))
    assert second.returncode == 0, second.stdout + second.stderr[-4000:]
    return {"history": history, "first": first, "second": second, "after_first": after_first,
            "after_second": read_history(history)}


def test_first_append_has_every_row_with_provenance(store):
    rows = store["after_first"]
    assert len(rows) == 3
    keys = {r["run_key"] for r in rows}
    assert keys == {history_run_key("brokerbench_nightly", "scheduled__2026-11-20T00:00:00+00:00"),
                    history_run_key("brokerbench_nightly", "scheduled__2026-11-21T00:00:00+00:00")}
    kafka_a = next(r for r in rows if r["broker"] == "kafka" and r["date"] == "2026-11-20")
    for col, value in (("run_type", "scheduled"), ("environment", "local"), ("suite", "nightly-latency"),
                       ("dag_id", "brokerbench_nightly"), ("run_id", "scheduled__2026-11-20T00:00:00+00:00"),
                       ("broker_implementation", "kafka-impl"), ("broker_version", "3.8.0"),
                       ("durability_honoured", True), ("client_library", "lib"),
                       ("client_library_version", "1.0"), ("brokerbench_version", "0.1.0"),
                       ("run_ts", "2026-11-20T00:00:00+00:00"), ("publish_latency_p99_ms", 5.0)):
        assert kafka_a[col] == value, col
    assert kafka_a["pipeline_brokerbench_version"]
    # an unknown broker version is a partition value, never null
    assert next(r for r in rows if r["broker"] == "rabbitmq")["broker_version"] == "unknown"


def test_partition_layout(store):
    history: Path = store["history"]
    dirs = sorted(str(p.parent.relative_to(history)) for p in history.rglob("*.parquet"))
    assert "broker=kafka/broker_version=3.8.0/workload=w1/variant=fsync-on/date=2026-11-20/run_key=" \
           "brokerbench_nightly__scheduled__2026-11-20T00_00_00_00_00" in dirs
    assert not (history / "_staging").exists() or not any((history / "_staging").iterdir())


def test_rerun_replaces_rows_never_duplicates(store):
    rows = store["after_second"]
    assert len(rows) == 3
    a = [r for r in rows if r["date"] == "2026-11-20"]
    assert sorted(r["publish_latency_p99_ms"] for r in a) == [50.0, 70.0]
    # the row that moved partition (broker version now known) left nothing behind
    assert {r["broker_version"] for r in a if r["broker"] == "rabbitmq"} == {"4.1.2"}
    assert not list(store["history"].glob("broker=rabbitmq/broker_version=unknown/*/*/*/*/*.parquet"))
    # the other run is untouched
    b = [r for r in rows if r["date"] == "2026-11-21"]
    assert [r["publish_latency_p99_ms"] for r in b] == [6.0]
    assert "1 earlier directories replaced" not in store["first"].stdout
    assert "2 earlier directories replaced" in store["second"].stdout


def test_filters(store):
    rows = read_history(store["history"], {"broker": "kafka", "broker_version": "3.8.0"})
    assert len(rows) == 2 and {r["broker"] for r in rows} == {"kafka"}
    assert read_history(store["history"] / "missing") == []


def test_status_and_reasons_kept_and_invalid_rows_never_a_baseline(store):
    from brokerbench.regression import verdicts_for_run

    rows = store["after_second"]
    b = next(r for r in rows if r["date"] == "2026-11-21")
    assert b["status"] == f"invalid: {INVALID}" and b["invalid_reasons"] == INVALID
    assert b["kind"] == "latency" and b["host_foreign_cpu_mean_percent"] == 43.2
    # rows of summaries without the newer columns read them as None; their status is kept
    a = [r for r in rows if r["date"] == "2026-11-20"]
    assert {r["status"] for r in a} == {"ok"} and {r["invalid_reasons"] for r in a} == {None}
    # the invalid run is judged by nobody and judges nobody
    (verdict,) = verdicts_for_run([b], rows)
    assert verdict.verdict == f"not judged: invalid ({INVALID})"
    later = dict(a[0], run_key="later", run_ts="2026-11-22T00:00:00+00:00")
    if later["broker"] != "kafka":
        later = dict(next(r for r in a if r["broker"] == "kafka"), run_key="later",
                     run_ts="2026-11-22T00:00:00+00:00")
    p99 = next(v for v in verdicts_for_run([later], rows) if v.metric == "publish_latency_p99_ms")
    assert p99.baseline_runs == [a[0]["run_key"]] and "1 earlier run(s) of this track not ok" in p99.evidence


def test_manifest_lists_exactly_the_run_files(store):
    import json

    history: Path = store["history"]
    key = history_run_key("brokerbench_nightly", "scheduled__2026-11-20T00:00:00+00:00")
    manifest = json.loads((history / "_manifests" / f"{key}.json").read_text())
    assert manifest["run_key"] == key and manifest["history_root"] == str(history) and manifest["rows"] == 2
    on_disk = sorted(p.relative_to(history).as_posix() for p in history.rglob(f"run_key={key}/*.parquet"))
    assert sorted(manifest["files"]) == on_disk and len(on_disk) == 2
    assert sorted(manifest["partitions"]) == sorted(f.rsplit("/", 1)[0] for f in on_disk)
    assert f"manifest {history / '_manifests' / (key + '.json')}" in store["second"].stdout
