"""brokerbench.pipeline.environment_lease: one run at a time on an environment, for as long as its longest phase
plus a margin."""

import os
import socket
import sys
from pathlib import Path

import pytest

from brokerbench import lease
from brokerbench.pipeline import environment_lease, setup
from brokerbench.pipeline.context import RunContext

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.airflow_db import private_airflow_db  # noqa: E402

DB_CONN = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"


@pytest.fixture
def airflow_db(tmp_path):
    """Airflow's ORM on a copy of the project's migrated SQLite database (tests/support/airflow_db.py), for the
    test only: the engine is made again on the copy, and on the project's database after the test."""
    from airflow import settings

    before = os.environ.get(DB_CONN)
    os.environ.update(private_airflow_db(tmp_path / "airflow"))
    settings.configure_vars()
    settings.reconfigure_orm()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(DB_CONN, None)
        else:
            os.environ[DB_CONN] = before
        settings.configure_vars()
        settings.reconfigure_orm()


def add_dag_run(dag_id: str, run_id: str, tasks: dict[str, str | None]) -> None:
    """A DAG run in the running state with task instances in the given states, as `airflow dags test` leaves
    one it was running when it was killed."""
    import uuid

    import pendulum
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import insert

    now = pendulum.now("UTC")
    with create_session() as session:
        session.add(DagRun(dag_id=dag_id, run_id=run_id, run_type="manual", state="running", run_after=now,
                           start_date=now))
        session.flush()
        session.execute(insert(TaskInstance.__table__), [
            {"id": uuid.uuid4(), "task_id": task, "dag_id": dag_id, "run_id": run_id, "map_index": -1,
             "try_number": 1, "max_tries": 0, "pool": "default_pool", "pool_slots": 1, "state": state}
            for task, state in tasks.items()])


def dag_run_states(dag_id: str, run_id: str) -> tuple[str, dict[str, str | None]]:
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        tis = session.execute(select(TaskInstance.task_id, TaskInstance.state).where(
            TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)).all()
        return str(run.state), {t: (None if s is None else str(s)) for t, s in tis}


def _validated(tmp_path, run_id, monkeypatch):
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))
    ctx = RunContext("brokerbench_smoke", run_id, "smoke",
                     {"brokers": ["rabbitmq"], "variants": ["fsync-off"], "results_root": str(tmp_path / "r")})
    setup.validate(ctx)
    return ctx


def test_the_lease_lasts_the_longest_phase_plus_half_an_hour(tmp_path, monkeypatch):
    ctx = _validated(tmp_path, "manual__1", monkeypatch)
    longest = max(max(i.workload.warmup_duration_minutes or 0, i.workload.test_duration_minutes or 0)
                  for i in ctx.plan().items)
    assert environment_lease.lease_ttl_s(ctx) == longest * 60.0 + 1800.0
    assert environment_lease.lease_scope(ctx) == (f"local@{socket.gethostname()}", 1)


def test_a_second_run_waits_until_the_first_releases(tmp_path, monkeypatch):
    first = _validated(tmp_path, "manual__1", monkeypatch)
    second = _validated(tmp_path, "manual__2", monkeypatch)
    assert environment_lease.acquire_environment(first) is None
    busy = environment_lease.acquire_environment(second)
    assert isinstance(busy, lease.Busy)
    environment_lease.hold_environment(first)  # the holder renews
    assert environment_lease.release_environment(first) is True
    assert environment_lease.acquire_environment(second) is None
    assert environment_lease.release_environment(second) is True


def test_a_run_stops_what_a_dead_run_left_before_it_deploys(tmp_path, monkeypatch, airflow_db):
    """The first run's process died holding the lease, its 'broker' and 'worker' still running: the next run
    takes the lease, stops them before anything is deployed, marks the dead run's DAG run and its unfinished
    task instances failed in Airflow's database, and says so in its provenance."""
    import json
    import subprocess

    from brokerbench.environments.processes import MARKER_BROKER, MARKER_STATE

    # a run id as Airflow makes it: its run key (results, state, lease) is the path-safe form
    dead_run_id = "manual__2026-11-27T21:03:05.092215+00:00"
    dead = _validated(tmp_path, dead_run_id, monkeypatch)
    assert dead.run_key != f"{dead.dag_id}/{dead_run_id}"
    add_dag_run(dead.dag_id, dead_run_id, {"setup.acquire_environment": "success",
                                          "benchmark.rabbitmq__fsync_off.measure": "running",
                                          "teardown.teardown": "queued", "analysis.report": None})
    add_dag_run(dead.dag_id, "manual__next", {"setup.acquire_environment": "running"})  # the run recovering
    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # the dead run's process
    monkeypatch.setenv("BROKERBENCH_LEASE_BOUND_TO_PROCESS", "1")
    monkeypatch.setattr(os, "getpid", lambda: runner.pid)
    assert environment_lease.acquire_environment(dead) is None
    monkeypatch.undo()
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))
    state = dead.environment().state_dir
    state.mkdir(parents=True)
    left = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                             env=dict(os.environ, **{MARKER_STATE: str(state), MARKER_BROKER: role}))
            for role in ("rabbitmq", "worker")]
    try:
        runner.kill()
        runner.wait()
        nxt = _validated(tmp_path, "manual__next", monkeypatch)
        assert environment_lease.acquire_environment(nxt) is None  # the dead run's lease was dropped
        recovered = environment_lease.recover_dead_runs(nxt)
        assert [r["run"] for r in recovered] == [dead.run_key]
        assert "is gone" in recovered[0]["why"]
        assert sorted(p["pid"] for p in recovered[0]["stopped"]) == sorted(p.pid for p in left)
        assert all(p.wait(timeout=30) is not None for p in left)
        doc = json.loads((nxt.run_dir / "provenance" / "recovered.json").read_text())
        assert doc["dead_runs"][0]["run"] == dead.run_key
        # the dead run is failed in Airflow's database: its unfinished tasks failed, the others as they were
        assert recovered[0]["airflow"]["marked"] and recovered[0]["airflow"]["run_id"] == dead_run_id
        assert doc["dead_runs"][0]["airflow"]["said"].endswith("running -> failed, 2 unfinished task(s) marked failed")
        assert dag_run_states(dead.dag_id, dead_run_id) == ("failed", {
            "setup.acquire_environment": "success", "benchmark.rabbitmq__fsync_off.measure": "failed",
            "teardown.teardown": "failed", "analysis.report": None})
        assert dag_run_states(dead.dag_id, "manual__next") == ("running", {"setup.acquire_environment": "running"})
        # each dead run is recovered once
        assert environment_lease.recover_dead_runs(nxt) == []
    finally:
        for p in left + [runner]:
            if p.poll() is None:
                p.kill()
                p.wait()
