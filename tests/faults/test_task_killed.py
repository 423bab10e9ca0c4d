"""A crash, not a failure: the process running the measured phase's task is killed with SIGKILL 10 s into the
phase. Under `brokerbench bench` that process is `airflow dags test` itself (it runs every task in its own
process), so none of the run's teardown tasks can run: the command line sees it killed, tears the run down
(broker and the load generator the task left sending), releases the lease, marks the DAG run failed and writes
the outcome `failed`; the intervals measured before are kept."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.faults.test_cli_killed import processes_mentioning, wait_for

ROOT = Path(__file__).resolve().parents[2]
BROKERBENCH = str(Path(sys.executable).parent / "brokerbench")


def worker_process(home: Path, marker: str = "worker") -> psutil.Process | None:
    """The run's load generator (or, ``marker="brokermetrics"``, its scraper of the broker's own metrics): the
    process started with that broker marker under ``home``."""
    for p in psutil.process_iter(["pid"]):
        try:
            env = p.environ()
        except (psutil.Error, OSError):
            continue
        if env.get("BROKERBENCH_BROKER") == marker and str(home) in env.get("BROKERBENCH_STATE_DIR", ""):
            return p
    return None


@pytest.mark.timeout(900)
def test_a_killed_task_process_is_torn_down_by_the_command_line(tmp_path):
    home, results, out = tmp_path / "home", tmp_path / "results", tmp_path / "cli.out"
    env = dict(os.environ, BROKERBENCH_HOME=str(home))
    with open(out, "w") as f:
        cli = subprocess.Popen([BROKERBENCH, "bench", "--suite", "smoke", "--brokers", "rabbitmq", "--variants",
                                "fsync-off", "--duration", "1", "--conf",
                                json.dumps({"results_root": str(results), "warmup_duration_minutes": 0.05})],
                               cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: re.search(r"\] measure +(1\d|[2-9]\d)\.\d/\d+ s \|", out.read_text()), 500,
                 "10 s of the measured phase")
        worker = wait_for(lambda: worker_process(home), 30, "the worker process")
        # the phase's scraper of RabbitMQ's own metrics runs beside it, detached from the task
        scraper = wait_for(lambda: worker_process(home, "brokermetrics"), 30, "the broker metrics scraper")
        task = worker.parent()
        assert task is not None and "airflow" in " ".join(task.cmdline()), task
        os.kill(task.pid, signal.SIGKILL)  # the task's process; the worker it started goes on sending
        rc = cli.wait(timeout=300)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
            cli.wait()
    text = out.read_text()
    wait_for(lambda: processes_mentioning(home) == [], 60, f"nothing left running: {processes_mentioning(home)}")
    assert not scraper.is_running(), f"the scraper (pid {scraper.pid}) outlived its run"
    assert rc == 1, text[-3000:]
    assert "brokerbench: airflow dags test was killed (SIGKILL); tearing the run down" in text
    assert re.search(r"teardown: [1-9]\d* process\(es\) stopped; lease released", text), text[-3000:]
    assert re.search(r"DAG run \S+: running -> failed", text), text[-3000:]
    assert text.strip().splitlines()[-1] == ("brokerbench: OUTCOME: FAILED: the process running the tasks (airflow "
                                             "dags test) was killed by SIGKILL; the run was torn down")
    run_dir = next((results / "runs" / "brokerbench_smoke").iterdir())
    measured = list((run_dir / "raw").glob("*/*/*/measure/*.jsonl"))
    assert measured and any('"record":"interval"' in f.read_text() for f in measured)
