"""The aws-seed-latency DAG under `airflow dags test` against loopback endpoints (moto server for EC2 and S3, one
real sshd standing in for every instance) when the whole Airflow process is killed mid-run: the teardown task,
retried from a fresh process with nothing but the run's id, finds the run's instances by tag and leaves none.

A whole run on clusters, its S3 layout and teardown are tests/e2e/test_aws_cluster_dag.py; a broker killed
mid-phase failing the run and still tearing down is tests/faults/test_broker_killed.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from aws_fixtures import aws_settings, instances_in_state, moto_server, s3_client, sshd  # noqa: F401,E402

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).parent / "airflow")
DAG = "brokerbench_aws_seed_latency"
BUCKET = "bb-results"


def start_dag(conf: dict, env: dict, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen([AIRFLOW, "dags", "test", DAG, "-c", json.dumps(conf)], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def remote_processes(remote: Path, role: str | None = None) -> list[psutil.Process]:
    """Processes the agent started under ``remote`` (their BROKERBENCH_STATE_DIR marker)."""
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            env = p.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if env.get("BROKERBENCH_STATE_DIR", "").startswith(str(remote)) and \
                (role is None or env.get("BROKERBENCH_BROKER") == role):
            found.append(p)
    return found


def result_files(remote: Path) -> list[Path]:
    """The workers' result files on the hosts, oldest first (the warm-up's, then the measured phase's)."""
    return sorted(remote.glob("state/*/*/results/*"), key=lambda p: p.stat().st_mtime)


@pytest.fixture
def run_env(moto_server, sshd, tmp_path):
    s3_client(moto_server).create_bucket(Bucket=BUCKET)
    settings = aws_settings(moto_server, sshd, tmp_path)
    for k in ("instance_types", "counts", "cost_cap_usd", "state_dir"):
        settings.pop(k)  # from the suite and the params, as a real run
    env = {**os.environ, "BROKERBENCH_HOME": str(tmp_path / "home"),
           "BROKERBENCH_AWS_SETTINGS": json.dumps(settings)}
    conf = {"brokers": ["rabbitmq"], "variants": ["fsync-off"], "test_duration_minutes": 0.5,
            "warmup_duration_minutes": 0.05, "rate_override_msg_s": 500, "interval_seconds": 2,
            "results_root": f"s3://{BUCKET}/e2e-{tmp_path.name}", "regression_gate": "never",
            "instance_counts": {"broker": 1, "client": 1},
            "instance_types": {"broker": "t3.micro", "client": "t3.micro"}, "cost_cap_usd": 2}
    return {"env": env, "conf": conf, "remote": Path(settings["remote_dir"]), "tmp": tmp_path}


def test_aws_dag_killed_mid_run_is_cleaned_up_by_tag_from_a_fresh_process(run_env, moto_server):
    remote = run_env["remote"]
    conf = run_env["conf"]
    proc = start_dag(conf, run_env["env"], run_env["tmp"] / "dags-test.log")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        files = result_files(remote)
        if len(files) >= 2 and sum(1 for _ in open(files[1])) >= 2:  # inside the measured phase
            break
        assert proc.poll() is None, (run_env["tmp"] / "dags-test.log").read_text()[-4000:]
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)  # Airflow dies: no teardown task runs
    proc.wait(30)
    running = instances_in_state(moto_server, "running")
    tagged = [i for i in running if i]  # the run's instances are still up: the leak to close
    ec2 = __import__("aws_fixtures").ec2_client(moto_server)
    res = ec2.describe_instances(InstanceIds=tagged)["Reservations"]
    runs = {t["Value"] for r in res for i in r["Instances"] for t in i.get("Tags", []) if t["Key"] == "brokerbench:run"}
    run_key = next(r for r in runs if r.startswith(DAG + "/"))
    assert instances_in_state(moto_server, "running", run_key)
    dag_id, run_id = run_key.split("/", 1)

    # the teardown task, retried in a new process with nothing but the run's id: found by tag
    code = ("import json; from brokerbench.pipeline import teardown\n"
            "from brokerbench.pipeline.context import RunContext\n"
            f"ctx = RunContext({dag_id!r}, {run_id!r}, 'aws-seed-latency', "
            f"params={{'results_root': {conf['results_root']!r}}})\n"
            "with ctx.synced():\n    print(json.dumps(teardown.teardown(ctx), default=str))\n")
    out = subprocess.run([sys.executable, "-c", code], env=run_env["env"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert instances_in_state(moto_server, "running", run_key) == []
    assert remote_processes(remote) == []
