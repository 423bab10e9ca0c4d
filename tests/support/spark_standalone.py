"""A Spark standalone cluster on loopback from the installed PySpark: one master, one worker.

    cluster = SparkStandalone(tmp_path / "spark")
    cluster.start(timeout_s=120)
    try:
        ... spark-submit --master cluster.master_url ...
        cluster.applications()["completedapps"]
    finally:
        cluster.stop()

Master and worker run ``<pyspark>/bin/spark-class`` (``org.apache.spark.deploy.master.Master``
and ``...deploy.worker.Worker``) with ``SPARK_LOCAL_IP=127.0.0.1``, each in its own directory
under ``root`` (``master/``, ``worker/``: logs ``<name>.log``, the worker's ``--work-dir``
``worker/work``) and its own process group, on free ports. ``stop()`` sends SIGTERM to each
process group, SIGKILL after a grace period, and waits until no process of either is left.
The worker gets 1 core and 1 GB (``cores``, ``memory`` to change).

Command line, for a cluster by hand::

    .venv/bin/python tests/support/spark_standalone.py /tmp/spark-cluster   # prints the master URL, Ctrl-C stops
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    """The installed PySpark's directory (it holds bin/spark-class and jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkStandalone:
    """A standalone master and one worker on 127.0.0.1 (see the module's docstring)."""

    HOST = "127.0.0.1"

    def __init__(self, root: Path, cores: int = 1, memory: str = "1g"):
        self.root = Path(root)
        self.cores = cores
        self.memory = memory
        self.port = _free_port()
        self.webui_port = _free_port()
        self.worker_webui_port = _free_port()
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs: dict[str, object] = {}

    @property
    def master_url(self) -> str:
        return f"spark://{self.HOST}:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://{self.HOST}:{self.webui_port}"

    def _env(self, name: str) -> dict[str, str]:
        bin_dir = Path(sys.executable).parent
        env = dict(os.environ)
        for key in ("SPARK_HOME", "SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS"):
            env.pop(key, None)
        env.update(SPARK_LOCAL_IP=self.HOST, SPARK_LOCAL_DIRS=str(self.root / name / "tmp"),
                   SPARK_LOG_DIR=str(self.root / name), SPARK_PID_DIR=str(self.root / name),
                   PYSPARK_PYTHON=sys.executable, PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
        return env

    def _spawn(self, name: str, args: list[str]) -> None:
        d = self.root / name
        (d / "tmp").mkdir(parents=True, exist_ok=True)
        log = open(d / f"{name}.log", "ab")
        self._logs[name] = log
        self.procs[name] = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args], cwd=d, env=self._env(name),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def log(self, name: str) -> str:
        p = self.root / name / f"{name}.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def applications(self) -> dict:
        """The master's JSON status (``activeapps``, ``completedapps``, ``workers``, ...)."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=10) as resp:
            return json.load(resp)

    def start(self, timeout_s: float = 120.0) -> "SparkStandalone":
        """Start master and worker; return when the master lists the worker ALIVE (else stop and raise)."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", self.HOST,
                               "--port", str(self.port), "--webui-port", str(self.webui_port)])
        self._spawn("worker", ["org.apache.spark.deploy.worker.Worker", self.master_url, "--host", self.HOST,
                               "--cores", str(self.cores), "--memory", self.memory,
                               "--work-dir", str(self.root / "worker" / "work"),
                               "--webui-port", str(self.worker_webui_port)])
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"spark {name} exited with {proc.returncode}:\n{self.log(name)[-3000:]}")
            try:
                status = self.applications()
                if any(w.get("state") == "ALIVE" for w in status.get("workers", [])):
                    return self
                last = status
            except (OSError, ValueError, http.client.HTTPException) as exc:
                # not answering yet, or answering before its JSON is ready (an empty or partial body)
                last = exc
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"no ALIVE worker after {timeout_s} s (last: {last});\nmaster log:\n"
                           f"{self.log('master')[-2000:]}\nworker log:\n{self.log('worker')[-2000:]}")

    def wait_completed(self, app_name: str | None = None, timeout_s: float = 60.0) -> list[dict]:
        """The completed applications (named ``app_name`` if given), once there is one and none
        is active any more."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.applications()
            done = [a for a in status.get("completedapps", []) if app_name in (None, a.get("name"))]
            if done and not status.get("activeapps"):
                return done
            if time.monotonic() > deadline:
                raise TimeoutError(f"applications after {timeout_s} s: {status.get('activeapps')} active, "
                                   f"{status.get('completedapps')} completed")
            time.sleep(0.5)

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM to each process group (worker first), SIGKILL after ``grace_s``; no process is left."""
        for name in ("worker", "master"):
            proc = self.procs.get(name)
            if proc is not None:
                _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for name in ("worker", "master"):
            proc = self.procs.get(name)
            if proc is None:
                continue
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)  # whatever is left of the group (executors included)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for name in list(self.procs):
            _wait_group_gone(self.procs[name].pid, 10)
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        self.procs.clear()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while _group_alive(pgid) and time.monotonic() < deadline:
        _signal_group_id(pgid, signal.SIGKILL)
        time.sleep(0.1)
    if _group_alive(pgid):
        raise RuntimeError(f"processes of group {pgid} still alive")


def _signal_group_id(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


if __name__ == "__main__":
    cluster = SparkStandalone(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/brokerbench-spark-standalone"))
    cluster.start()
    print(cluster.master_url, cluster.webui_url, flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
