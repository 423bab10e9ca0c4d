"""The reworked aggregation writes the same tables as the job before the rework.

``aggregate_reference.py`` (beside this file) is the job as it was before it became the
package spark_jobs/brokerbench_spark. Both run under a real spark-submit (local[2]) on
copies of the same runs: the reference with its ``--run-dir`` loop, the new job with every
run in one query. Every output must be the same: summary.csv, timeseries.csv and sweep.csv
byte for byte (the OMB documents: the same files; their content has changed on purpose since,
to what OMB's chart script reads); summary.parquet the same table (schema, Spark's schema
in the footer, rows, values, one part file); exit code and printed lines the same. (The new
job's driver writes its files with Python and pyarrow, so Hadoop's ``.crc`` checksum files
of the reference are not compared.) What the job writes since on purpose is left out of the new
job's outputs first: the broker metrics' files and columns (``ADDED_FILES``, ``ADDED_COLUMNS``). The new job
runs as a cluster's driver would get it: spark_jobs/aggregate.py copied alone, the package
shipped with ``--py-files`` (spark_jobs/brokerbench_spark/pyfiles.py), the runs given as one
``--run-dir`` glob.

The runs cover: the integration fixture (validity, contention, provenance, a killed
worker, a warm-up phase, a sweep beside the measured phase); a run without provenance
with three brokers, a drain interval, overflow and negative values, an empty histogram, a
worker ended with an error and an odd worker count; a sweep-only run; a run with only a
warm-up (nothing measured) and a run without worker files.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from brokerbench.operators.spark import SHORT_JOB_CONF

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fixtures_results import (  # noqa: E402
    build_synthetic_run,
    default_meta,
    host_summary,
    write_sweep_run,
    write_worker_file,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "spark_jobs"))
from brokerbench_spark.pyfiles import build_zip  # noqa: E402

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NEW_JOB = ROOT / "spark_jobs" / "aggregate.py"
REFERENCE_JOB = Path(__file__).resolve().parent / "aggregate_reference.py"
#: in the order of their names: the new job gets them as one glob
RUNS = ["a_fixture", "b_edges", "c_sweep_only", "d_warmup_only", "e_empty"]


def spark_submit(job: Path, run_dirs: list[Path], py_files: str | None = None,
                 conf: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    args = [str(bin_dir / "spark-submit"), "--master", "local[2]"]
    for k, v in (conf or {}).items():
        args += ["--conf", f"{k}={v}"]
    if py_files:
        args += ["--py-files", py_files]
    args.append(str(job))
    for d in run_dirs:
        args += ["--run-dir", str(d)]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)


def build_fixture_run(run_dir: Path) -> None:
    """The run of test_aggregate_spark.py."""
    build_synthetic_run(
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
        kinds={("pulsar", "default"): "latency", ("kafka", "fsync"): "latency"},
        target_rates={("pulsar", "default"): 100.0, ("kafka", "fsync"): 40.0},
        phases={
            ("kafka", "fsync", "measure"): {"localhost": host_summary(
                foreign_mean=43.2, foreign_max=97.5, other_runs=["/srv/bb/state/brokerbench_nightly__other"],
                other_cpu=38.0)},
            ("pulsar", "fsync", "warmup"): {"localhost": host_summary(foreign_mean=80.0, other_runs=["/x"])},
            ("pulsar", "fsync", "measure"): {"localhost": host_summary(foreign_mean=4.0)},
            ("pulsar", "default", "measure"): {"localhost": host_summary(foreign_mean=24.9)},
        },
    )
    write_sweep_run(run_dir, broker="kafka", variant="default")


def build_edge_run(run_dir: Path) -> None:
    """No provenance, three brokers, three workers, and a hand-written combination with a drain
    interval (nothing sent), overflow and negative values, an empty histogram and an error."""
    build_synthetic_run(run_dir, brokers=("kafka", "pulsar", "rabbitmq"), variants=("fsync-on",), workers=3,
                        intervals=4, warmup_intervals=1, seed=3, write_provenance=False,
                        kinds={("rabbitmq", "fsync-on"): "producer-only"})
    rng = np.random.default_rng(5)
    start = 1_700_000_000_000_000_000
    for w in range(2):
        meta = default_meta(workload="w-edge", driver="kafka-throughput", broker="kafka", variant="fsync-off",
                            worker=f"client{w + 1}-1", host=f"client{w + 1}", kind="latency", start_ns=start,
                            target_rate_msg_s=50.0)
        intervals = []
        for i in range(4):
            s = start + i * 10_000_000_000 + w * 2_000_000
            sent = 0 if i == 3 else 500
            pub = rng.lognormal(np.log(2000.0), 1.2, 0 if i == 3 else 300).astype(np.int64) + 1
            if i == 1:
                pub = np.concatenate([pub, [4_000_000_000, 5_000_000_000]])  # above the range: overflow
            e2e = (pub[pub < 3_600_000_000] * 2).astype(np.int64)
            if i == 2:
                e2e = np.concatenate([e2e, [-3, -40, -41]])
            intervals.append({"index": i, "start_ns": s, "end_ns": s + (3_000_000 if i == 3 else 10_000_000_000),
                              "sent": sent, "acked": len(pub), "received": len(e2e), "backlog": 3 - i,
                              "publish_latency_us": pub, "e2e_latency_us": e2e,
                              "publish_delay_us": [] if w == 1 else rng.exponential(90.0, 50).astype(np.int64)})
        # both files say how long their producers ran (load_s): the rates' seconds
        end = {"status": "error", "error": "broker went away", "load_s": 21.5} if w == 1 else {
            "status": "ok", "validity": {"client_bound": False, "reasons": []}, "load_s": 30.0}
        write_worker_file(run_dir / "raw" / "w-edge" / "kafka-throughput" / "fsync-off" / "measure"
                          / f"client{w + 1}-1.jsonl", meta, intervals, end=end)


def build_warmup_only_run(run_dir: Path) -> None:
    meta = default_meta(phase="warmup")
    write_worker_file(run_dir / "raw" / "w" / "kafka-latency" / "default" / "warmup" / "client1-0.jsonl", meta,
                      [{"index": 0, "start_ns": meta["start_ns"], "end_ns": meta["start_ns"] + 10**10,
                        "sent": 5, "acked": 5, "publish_latency_us": [100, 200]}])


def build_runs(root: Path) -> list[Path]:
    dirs = [root / "runs" / "brokerbench_equality" / name for name in RUNS]
    build_fixture_run(dirs[0])
    build_edge_run(dirs[1])
    write_sweep_run(dirs[2], broker="pulsar", variant="fsync-on", workers=3, unstable_from=1, drain_intervals=2)
    build_warmup_only_run(dirs[3])
    (dirs[4] / "raw").mkdir(parents=True)
    return dirs


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    base = tmp_path_factory.mktemp("equality")
    reference_dirs = build_runs(base / "reference")
    new_root = base / "new"
    shutil.copytree(base / "reference", new_root)
    new_dirs = [new_root / d.relative_to(base / "reference") for d in reference_dirs]
    reference = spark_submit(REFERENCE_JOB, reference_dirs)
    # the new job as a cluster's driver gets it: the script alone, its package in --py-files
    script_only = base / "script_only"
    script_only.mkdir()
    shutil.copy(NEW_JOB, script_only / "aggregate.py")
    # ... and the runs as one --run-dir glob
    # the new job as the Airflow operator submits it (SHORT_JOB_CONF), the reference with Spark's defaults
    new = spark_submit(script_only / "aggregate.py", [new_dirs[0].parent / "*"], py_files=build_zip(base / "py_files"),
                       conf=SHORT_JOB_CONF)
    return {"reference": reference, "new": new, "reference_dirs": reference_dirs, "new_dirs": new_dirs}


#: what the job writes since the reference on purpose (the brokers' own metrics and the hosts' figures, per
#: interval and per phase: docs/broker-metrics.md); left out of the new job's outputs before they are compared
ADDED_FILES = {"brokermetrics.csv", "brokermetrics-panels.json"}
ADDED_COLUMNS = ["broker_metrics_notes"]


def without_added(table: pa.Table) -> pa.Table:
    return table.drop_columns([c for c in ADDED_COLUMNS if c in table.column_names])


def csv_rows(path: Path, drop: list[str] = ()) -> list[list[str]]:
    """The file's rows (header first) as parsed cells, without the columns ``drop``."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    keep = [i for i, c in enumerate(rows[0]) if c not in drop] if rows else []
    return [[r[i] for i in keep] for r in rows]


def summary_files(run_dir: Path) -> list[str]:
    """Every file under summary/, part file names with their uuid masked; without Hadoop's
    checksum files (``.<name>.crc``: the reference wrote through Hadoop's local file system,
    the new job's driver writes plain files)."""
    root = run_dir / "summary"
    if not root.exists():
        return []
    return sorted(re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>",
                         str(p.relative_to(root))) for p in root.rglob("*") if p.is_file() and p.suffix != ".crc")


def printed(proc: subprocess.CompletedProcess, run_root: Path) -> list[str]:
    """The job's own lines (spark-submit passes the Python process's stderr on through its stdout)."""
    text = (proc.stdout + proc.stderr).replace(str(run_root), "<root>")
    return [line for line in text.splitlines()
            if line.startswith(("brokerbench aggregate:", "WARNING ", "workload ", "-----", "1-topic", "w-edge",
                                "w ", "w\t"))]


def test_both_jobs_ran(outputs):
    # the warm-up-only and the empty run have nothing measured: exit code 2 for both jobs
    assert outputs["reference"].returncode == 2, outputs["reference"].stdout[-3000:] + outputs["reference"].stderr[-3000:]
    assert outputs["new"].returncode == 2, outputs["new"].stdout[-3000:] + outputs["new"].stderr[-3000:]


def test_same_files(outputs):
    for ref, new in zip(outputs["reference_dirs"], outputs["new_dirs"]):
        assert [f for f in summary_files(new) if f not in ADDED_FILES] == summary_files(ref), ref.name
    assert summary_files(outputs["new_dirs"][0])  # the fixture run was written
    assert "sweep.csv" in summary_files(outputs["new_dirs"][2]) and len(summary_files(outputs["new_dirs"][2])) == 1
    assert summary_files(outputs["new_dirs"][3]) == summary_files(outputs["new_dirs"][4]) == []


@pytest.mark.parametrize("run", RUNS[:3])
def test_text_outputs_byte_for_byte(outputs, run):
    i = RUNS.index(run)
    ref, new = outputs["reference_dirs"][i] / "summary", outputs["new_dirs"][i] / "summary"
    # the OMB documents changed on purpose since the reference (10 s windows, OMB's labels, no
    # nulls: test_aggregate_spark.py and tests/unit/test_omb_*.py check them); test_same_files lists them
    names = sorted(str(p.relative_to(ref)) for p in ref.rglob("*")
                   if p.suffix in (".csv", ".json") and p.parent.name != "omb")
    assert names
    for name in names:
        if name == "summary.csv":  # the broker metrics' columns added: the reference's columns cell for cell
            assert csv_rows(new / name, ADDED_COLUMNS) == csv_rows(ref / name), f"{run}: {name}"
            assert (new / name).read_bytes().count(b"\n") == (ref / name).read_bytes().count(b"\n")
        else:
            assert (new / name).read_bytes() == (ref / name).read_bytes(), f"{run}: {name}"


@pytest.mark.parametrize("run", RUNS[:2])
def test_summary_parquet_same_table(outputs, run):
    i = RUNS.index(run)
    (ref,) = (outputs["reference_dirs"][i] / "summary" / "summary.parquet").glob("part-*.parquet")
    (new,) = (outputs["new_dirs"][i] / "summary" / "summary.parquet").glob("part-*.parquet")
    a, full = pq.read_table(ref), pq.read_table(new)
    b = without_added(full)
    assert b.schema.equals(a.schema)  # names, types, nullability, order
    # Spark's schema in the footer (Spark reads both files back with the same schema)
    key = b"org.apache.spark.sql.parquet.row.metadata"
    spark_schema = json.loads(full.schema.metadata[key])
    spark_schema["fields"] = [f for f in spark_schema["fields"] if f["name"] not in ADDED_COLUMNS]
    assert spark_schema == json.loads(a.schema.metadata[key])
    assert b.to_pylist() == a.to_pylist()
    assert b.equals(a)
    assert pq.ParquetFile(new).metadata.num_row_groups == pq.ParquetFile(ref).metadata.num_row_groups


def test_same_printed_lines(outputs):
    base_ref = outputs["reference_dirs"][0].parents[2]
    base_new = outputs["new_dirs"][0].parents[2]
    new, ref = printed(outputs["new"], base_new), printed(outputs["reference"], base_ref)
    new = [line for line in new if not line.endswith("/brokermetrics.csv")]  # the broker metrics' own line
    # stdout in order; the stderr lines (nothing measured) may interleave differently
    assert [line for line in new if "no measured data" not in line] == \
        [line for line in ref if "no measured data" not in line]
    assert sorted(line for line in new if "no measured data" in line) == \
        sorted(line for line in ref if "no measured data" in line)
    assert len([line for line in new if "no measured data" in line]) == 2
