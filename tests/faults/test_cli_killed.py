"""A crash, not a failure: the command line is killed with SIGKILL (its whole process group, as a closed
terminal or a killed parent would) in the middle of the measured phase. Its run must not live on: the guard
stops it, tears it down, gives the lease back and marks the DAG run failed; what was measured is kept."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
BROKERBENCH = str(Path(sys.executable).parent / "brokerbench")


def processes_mentioning(path: Path) -> list[str]:
    """Processes whose command line or environment mentions ``path`` (brokers, workers, the run, the guard)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            text = " ".join(p.info["cmdline"] or [])
            if str(path) not in text:
                text = " ".join(p.environ().values())
            if str(path) in text and p.pid != os.getpid():
                found.append(f"{p.pid} {' '.join(p.info['cmdline'] or [])[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"not within {timeout_s:.0f} s: {what}")


@pytest.mark.timeout(600)
def test_a_killed_command_line_takes_its_run_down_with_it(tmp_path):
    home, results, out = tmp_path / "home", tmp_path / "results", tmp_path / "cli.out"
    env = dict(os.environ, BROKERBENCH_HOME=str(home))
    with open(out, "w") as f:
        cli = subprocess.Popen([BROKERBENCH, "bench", "--suite", "smoke", "--brokers", "rabbitmq", "--variants",
                                "fsync-off", "--duration", "3", "--conf", json.dumps({"results_root": str(results)})],
                               cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: "== benchmark.rabbitmq__fsync_off.measure" in out.read_text(), 400,
                 "the measured phase started")
        run_dir = next((results / "runs" / "brokerbench_smoke").iterdir())
        # the worker connects and probes before it measures: kill once it reported 10 s of the measured phase
        # (its result file is written as it goes, buffered; the intervals are flushed when it is stopped)
        wait_for(lambda: re.search(r"\] measure +(1\d|[2-9]\d)\.\d/\d+ s \|", out.read_text()), 200,
                 "10 s of the measured phase")
    finally:
        os.killpg(cli.pid, signal.SIGKILL)  # the command line and its process group; the run is in another
        cli.wait()

    log = next((results / "logs").glob("*.log"))
    wait_for(lambda: processes_mentioning(home) == [], 120,
             f"nothing of the run left running: {processes_mentioning(home)}")
    said = [ln for ln in log.read_text().splitlines() if ln.startswith("brokerbench guard: ")]
    assert said[0].startswith(f"brokerbench guard: the command line (pid {cli.pid}) is gone"), said
    teardown = next(ln for ln in said if ln.startswith("brokerbench guard: run "))
    assert "lease released" in teardown and f"results kept in {run_dir}" in teardown, said
    assert re.search(r"DAG run \S+: running -> failed, \d+ unfinished task\(s\) marked failed$", said[-1]), said
    # what was measured before the crash is kept
    measured = list((run_dir / "raw").glob("*/*/*/measure/*.jsonl"))
    assert measured and any('"record":"interval"' in f.read_text() for f in measured)
    # the environment is free: the lease store holds no holder
    from brokerbench import lease
    from brokerbench.pipeline import environment_lease
    from brokerbench.pipeline.context import RunContext

    ctx = RunContext(dag_id="brokerbench_smoke", run_id="x", suite="smoke", params={"results_root": str(results)})
    assert lease.holders(environment_lease.lease_scope(ctx)[0], environment_lease.lease_store(ctx)) == {}
