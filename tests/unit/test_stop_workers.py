"""Stopping a phase stops its load: every worker of the run goes, whoever started it."""

import os
import subprocess
import sys
import time

import psutil

from brokerbench.environments.local import LocalEnvironment
from brokerbench.environments.processes import MARKER_BROKER, MARKER_STATE


def _fake_worker(state_dir, role="worker"):
    # a worker as run_workers starts it: its own session, the run's marker in its environment;
    # it ignores SIGTERM for a while, as a busy worker flushing its file might
    code = "import signal, time; signal.signal(signal.SIGTERM, lambda *a: None); time.sleep(120)"
    env = dict(os.environ, **{MARKER_STATE: str(state_dir), MARKER_BROKER: role})
    return subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)


def test_stop_workers_ends_every_worker_of_the_run_and_nothing_else(tmp_path):
    env = LocalEnvironment("dag/run-1", {"state_dir": str(tmp_path / "run-1")})
    other = LocalEnvironment("dag/run-2", {"state_dir": str(tmp_path / "run-2")})
    mine = [_fake_worker(env.state_dir) for _ in range(2)]
    broker = _fake_worker(env.state_dir, role="rabbitmq")
    theirs = _fake_worker(other.state_dir)
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        stopped = env.stop_workers()
        took = time.monotonic() - t0
        assert len(stopped) == 2 and all(f"pid {p.pid}" in " ".join(stopped) for p in mine)
        assert took < 10, took
        for p in mine:
            assert p.wait(timeout=5) is not None
        # the broker (undeploy's business) and another run's worker are left alone
        assert broker.poll() is None and theirs.poll() is None
        assert env.stop_workers() == []
    finally:
        for p in (*mine, broker, theirs):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_phase_operator_on_kill_stops_the_workers(tmp_path, monkeypatch):
    from brokerbench.operators.benchmark import RunPhaseOperator
    from brokerbench.pipeline.context import RunContext

    state = tmp_path / "state"
    monkeypatch.setattr(RunContext, "environment",
                        lambda self: LocalEnvironment(self.run_key, {"state_dir": str(state)}))
    op = RunPhaseOperator(task_id="measure", phase="measure", broker="rabbitmq", variant="fsync-off", suite="smoke")
    op._ctx = RunContext(dag_id="d", run_id="r", suite="smoke")
    workers = [_fake_worker(state.resolve()) for _ in range(2)]
    try:
        time.sleep(0.5)
        op.on_kill()
        assert all(w.wait(timeout=10) is not None for w in workers)
        assert not [p for p in psutil.process_iter(["pid"]) if p.pid in {w.pid for w in workers}
                    and p.status() != psutil.STATUS_ZOMBIE]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()


def test_the_aws_agent_stops_the_workers_on_its_host(tmp_path):
    """What AwsEnvironment.stop_workers runs on each client host over SSH."""
    import json

    state = (tmp_path / "host" / "local").resolve()
    state.mkdir(parents=True)
    workers = [_fake_worker(state) for _ in range(2)]
    try:
        time.sleep(0.5)
        out = subprocess.run([sys.executable, "-m", "brokerbench.environments.aws.agent", "stop-workers",
                              "--state-dir", str(state), "--run-key", "dag/run"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        assert all(w.wait(timeout=10) is not None for w in workers)
        from brokerbench.environments.aws.agent import RESULT_PREFIX

        line = next(l for l in out.stdout.splitlines() if l.startswith(RESULT_PREFIX))
        result = json.loads(line[len(RESULT_PREFIX):])
        assert len(result.get("stopped", [])) == 2, out.stdout
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()


def test_the_local_environment_state_follows_the_hosts_state_root(tmp_path, monkeypatch):
    """Workers of one host with homes of their own find a run's state in the host's directory."""
    from brokerbench.environments.local import LocalEnvironment

    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "worker-a"))
    monkeypatch.delenv("BROKERBENCH_LOCAL_STATE_ROOT", raising=False)
    assert LocalEnvironment("dag/run:1").state_dir == (tmp_path / "worker-a" / "state" / "dag_run_1").resolve()
    monkeypatch.setenv("BROKERBENCH_LOCAL_STATE_ROOT", str(tmp_path / "host"))
    a = LocalEnvironment("dag/run:1").state_dir
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "worker-b"))
    assert LocalEnvironment("dag/run:1").state_dir == a == tmp_path / "host" / "dag_run_1"
    assert LocalEnvironment("dag/run:1", {"state_dir": str(tmp_path / "x")}).state_dir == tmp_path / "x"
