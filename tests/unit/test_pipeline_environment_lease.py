"""brokerbench.pipeline.environment_lease: one run at a time on an environment, for as long as its longest phase
plus a margin."""

from brokerbench import lease
from brokerbench.pipeline import environment_lease, setup
from brokerbench.pipeline.context import RunContext


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
    assert environment_lease.lease_scope(ctx) == (lease.scope_for("local"), 1)


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


def test_a_run_stops_what_a_dead_run_left_before_it_deploys(tmp_path, monkeypatch):
    """The first run's process died holding the lease, its 'broker' and 'worker' still running: the next run
    takes the lease, stops them before anything is deployed, and says so in its provenance."""
    import json
    import os
    import subprocess
    import sys

    from brokerbench.environments.processes import MARKER_BROKER, MARKER_STATE

    dead = _validated(tmp_path, "manual__dead", monkeypatch)
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
        # each dead run is recovered once
        assert environment_lease.recover_dead_runs(nxt) == []
    finally:
        for p in left + [runner]:
            if p.poll() is None:
                p.kill()
                p.wait()
