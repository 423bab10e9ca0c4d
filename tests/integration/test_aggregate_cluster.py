"""The jobs on a Spark standalone cluster, their input on S3 (moto's server), no shared disk needed.

One master and one worker from the installed PySpark (tests/support/spark_standalone.py);
the integration fixture run is uploaded to a bucket of moto's server. spark_jobs/aggregate.py
runs under ``spark-submit --master spark://...`` (script alone, package in ``--py-files``) with
``--run-dir s3://...`` and ``--out-dir`` a local directory: the executors fetch the worker
files with boto3 (credentials and endpoint from the driver's environment), the driver writes
the outputs. They must equal those of the same run aggregated under ``local[2]`` from its local
directory. spark_jobs/history.py then appends the run (its summary uploaded to S3) into a local
``--history-out`` with its manifest. The master must list both applications as completed;
everything is stopped at the end (explicit timeouts everywhere).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from aws_fixtures import free_port, wait_port  # noqa: E402
from support.spark_standalone import SparkStandalone  # noqa: E402
from test_aggregate_equality import build_fixture_run  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "spark_jobs"))
from brokerbench.history import read_history, run_meta, write_run_meta  # noqa: E402
from brokerbench_spark.pyfiles import build_zip  # noqa: E402

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "bb-results"
PREFIX = "results/runs/brokerbench_nightly/scheduled__2026-11-22T00_00_00_00_00"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def spark_submit(master: str, script: Path, args: list[str], env_extra: dict[str, str] | None = None,
                 py_files: str | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", **(env_extra or {}))
    cmd = [str(bin_dir / "spark-submit"), "--master", master, "--conf", "spark.ui.enabled=false"]
    if py_files:
        cmd += ["--py-files", py_files]
    return subprocess.run([*cmd, str(script), *args], capture_output=True, text=True, env=env, timeout=timeout)


def upload(client, local: Path, prefix: str) -> int:
    n = 0
    for p in sorted(local.rglob("*")):
        if p.is_file() and p.suffix != ".crc":
            client.upload_file(str(p), BUCKET, f"{prefix}/{p.relative_to(local).as_posix()}")
            n += 1
    return n


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        wait_port(port)
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield {"endpoint": endpoint, "client": client, "env": {"AWS_ENDPOINT_URL": endpoint, **CREDENTIALS}}
    finally:
        server.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = SparkStandalone(tmp_path_factory.mktemp("spark-standalone"), cores=1, memory="1g")
    c.start(timeout_s=180)
    try:
        yield c
    finally:
        c.stop()
        assert not c.procs


@pytest.fixture(scope="module")
def runs(tmp_path_factory, s3, cluster):
    base = tmp_path_factory.mktemp("cluster")
    local_run = base / "local" / "runs" / "brokerbench_nightly" / "scheduled__2026-11-22T00_00_00_00_00"
    build_fixture_run(local_run)
    uploaded = upload(s3["client"], local_run, PREFIX)
    local = spark_submit("local[2]", ROOT / "spark_jobs" / "aggregate.py", ["--run-dir", str(local_run)])
    # the driver as a cluster's client gets it: the script alone, the package in --py-files
    script_dir = base / "script_only"
    script_dir.mkdir()
    shutil.copy(ROOT / "spark_jobs" / "aggregate.py", script_dir / "aggregate.py")
    shutil.copy(ROOT / "spark_jobs" / "history.py", script_dir / "history.py")
    py_files = build_zip(base / "py_files")
    out = base / "driver_out" / "summary"
    remote = spark_submit(cluster.master_url, script_dir / "aggregate.py",
                          ["--run-dir", f"s3://{BUCKET}/{PREFIX}", "--out-dir", str(out)],
                          env_extra=s3["env"], py_files=py_files)
    return {"local_run": local_run, "local": local, "remote": remote, "out": out, "uploaded": uploaded,
            "script_dir": script_dir, "py_files": py_files, "base": base}


def test_both_ran(runs):
    assert runs["uploaded"] > 10
    assert runs["local"].returncode == 0, runs["local"].stdout[-3000:] + runs["local"].stderr[-3000:]
    assert runs["remote"].returncode == 0, runs["remote"].stdout[-3000:] + runs["remote"].stderr[-3000:]
    assert f"-> {runs['out']}" in runs["remote"].stdout


def test_outputs_equal_local(runs):
    local, remote = runs["local_run"] / "summary", runs["out"]
    names = sorted(str(p.relative_to(local)) for p in local.rglob("*") if p.suffix in (".csv", ".json"))
    assert "summary.csv" in names and "sweep.csv" in names and any(n.startswith("omb/") for n in names)
    assert names == sorted(str(p.relative_to(remote)) for p in remote.rglob("*") if p.suffix in (".csv", ".json"))
    for name in names:
        assert (remote / name).read_bytes() == (local / name).read_bytes(), name
    a = pq.read_table(local / "summary.parquet")
    b = pq.read_table(remote / "summary.parquet")
    assert b.equals(a) and b.schema.equals(a.schema, check_metadata=True)


def test_history_on_cluster_from_s3(runs, s3, cluster):
    # the run's summary as the pipeline leaves it in S3, with its run_meta.json
    summary = runs["out"]
    write_run_meta(summary.parent, run_meta("brokerbench_nightly", "scheduled__2026-11-22T00:00:00+00:00",
                                            "scheduled", "2026-11-22T00:00:00+00:00", "local", "nightly-latency"))
    upload(s3["client"], summary, f"{PREFIX}/summary")
    history_out = runs["base"] / "history_out"
    proc = spark_submit(cluster.master_url, runs["script_dir"] / "history.py",
                        ["--history-root", f"s3://{BUCKET}/results/history", "--run-dir", f"s3://{BUCKET}/{PREFIX}",
                         "--history-out", str(history_out)],
                        env_extra=s3["env"], py_files=runs["py_files"], timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    key = "brokerbench_nightly__scheduled__2026-11-22T00_00_00_00_00"
    manifest = json.loads((history_out / "_manifests" / f"{key}.json").read_text())
    assert manifest["run_key"] == key and manifest["history_root"] == f"s3://{BUCKET}/results/history"
    written = sorted(p.relative_to(history_out).as_posix() for p in history_out.rglob("*.parquet"))
    assert sorted(manifest["files"]) == written and len(written) == manifest["partitions"].__len__() == 4
    rows = read_history(history_out)
    assert len(rows) == manifest["rows"] == 4
    assert {r["run_key"] for r in rows} == {key} and {r["date"] for r in rows} == {"2026-11-22"}
    assert {r["results_run_dir"] for r in rows} == {f"s3://{BUCKET}/{PREFIX}"}


def test_master_lists_the_applications(runs, cluster):
    apps = cluster.wait_completed(timeout_s=60)
    names = [a["name"] for a in apps]
    assert "brokerbench-aggregate" in names, apps
    assert not cluster.applications()["activeapps"]
    assert [w for w in cluster.applications()["workers"] if w["state"] == "ALIVE"]
