"""This machine's part of a run: brokers, workers and teardown in one state directory.

:class:`Machine` is what the local environment does on this machine and what
the aws agent (:mod:`brokerbench.environments.aws.agent`) does on each fleet
host: deploy / health / undeploy a broker (:func:`.make_broker`), run workers
(``python -m brokerbench.worker run`` processes, each recorded in the state
directory's pid registry, output relayed line by line, killed at the
timeout), stop them, and tear down everything the state directory recorded.
Every call finds what it needs in the state directory, so it works from a
fresh object in any process.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from .. import cpus
from ..base import BrokerEndpoint, EnvironmentFailure, LocalHost
from ..brokermetrics import Target
from ..processes import (
    MARKER_BROKER,
    MARKER_STATE,
    marked_processes,
    process_entry,
    record_processes,
    state_dir_for,
    stop_all,
    terminate,
    write_json,
)
from ..settings import LocalSettings
from . import BROKERS, make_broker

log = logging.getLogger("brokerbench")


class Machine:
    """Brokers and workers as processes on this machine, kept in the run's state directory.

    Settings (all optional, :class:`~brokerbench.environments.settings.LocalSettings`; given as a mapping, as
    the aws agent has them from its spec file, they are validated here): ``state_dir``; ``broker_versions`` /
    ``broker_implementations`` / ``kafka_home`` / ``pulsar_home`` (which broker runs); ``start_timeout_s``.
    """

    #: the environment name records carry (the aws agent's host records say "local" too: it is this code)
    name = "local"

    def __init__(self, run_key: str, settings: LocalSettings | Mapping[str, Any] | None = None):
        self.run_key = run_key
        self.settings = settings if isinstance(settings, LocalSettings) else \
            LocalSettings.model_validate(dict(settings or {}))
        self.state_dir = state_dir_for(run_key, self.settings.state_dir)
        self.host = LocalHost("localhost", "all")

    # -- brokers ------------------------------------------------------------------
    def _broker(self, broker: str, for_start: bool = False):
        if broker not in BROKERS:
            raise EnvironmentFailure(f"unknown broker {broker!r}; the local environment runs {', '.join(BROKERS)}")
        return make_broker(broker, self.state_dir, self.settings, for_start=for_start)

    def deploy(self, broker: str, broker_settings: dict[str, Any], variant: str,
               driver_overrides: dict[str, Any], *, jvm_options: list[str] | None = None) -> BrokerEndpoint:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        return self._broker(broker, for_start=True).start(broker_settings, variant, driver_overrides, jvm_options)

    def health(self, broker: str) -> dict[str, Any]:
        """Raise a clear error (naming the broker) unless ``broker`` runs and serves."""
        state = self._broker(broker).check()
        return {"broker": broker, "implementation": state.get("implementation"), "status": "serving",
                "address": state.get("address")}

    def metrics_targets(self) -> list[Target]:
        """The brokers' own metrics endpoints of every broker running from this state directory."""
        targets: list[Target] = []
        for broker in BROKERS:
            b = self._broker(broker)
            state = b.state()
            if state and state.get("status") == "running":
                targets += b.metrics_targets(state)
        return targets

    def undeploy(self, broker: str) -> None:
        stopped = self._broker(broker).stop()
        if stopped:
            log.info("%s stopped: %s", broker, ", ".join(f"{s['role']} (pid {s['pid']})" for s in stopped))

    # -- workers ----------------------------------------------------------------------
    def run_workers(self, jobs: list[dict[str, Any]], out_paths: list[str],
                    timeout_s: float) -> list[dict[str, Any]]:
        """One ``python -m brokerbench.worker run`` process per job, all at once.

        Each job is written to ``<state>/jobs/``; each stdout line is relayed to
        the ``brokerbench`` logger as ``[<worker>] line`` as it arrives (and kept
        in ``<state>/workers/<worker>.log``). A worker still running after
        ``timeout_s`` is killed. Result files are never deleted, so what a
        killed worker wrote is kept.
        """
        if len(jobs) != len(out_paths):
            raise ValueError(f"{len(jobs)} jobs but {len(out_paths)} output paths")
        jobs_dir, logs_dir = self.state_dir / "jobs", self.state_dir / "workers"
        jobs_dir.mkdir(parents=True, exist_ok=True)
        logs_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        env = dict(os.environ, PYTHONUNBUFFERED="1", **{MARKER_STATE: str(self.state_dir), MARKER_BROKER: "worker"})
        running: list[dict[str, Any]] = []
        for i, (job, out) in enumerate(zip(jobs, out_paths)):
            worker = str(job.get("worker") or f"worker-{i}")
            job_path = jobs_dir / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', worker)}-{stamp}-{i}.json"
            job_path.write_text(json.dumps(job, indent=2, default=str))
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            argv = [sys.executable, "-m", "brokerbench.worker", "run", "--job", str(job_path), "--out", str(out)]
            # on the client side's CPUs when the setting cpu_pinning names them (the JVM engine inherits them)
            proc = subprocess.Popen(cpus.pinned(argv, self.settings.cpu_pinning, "client"), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True, text=True, errors="replace", bufsize=1)
            record_processes(self.state_dir, [{**process_entry(psutil.Process(proc.pid), "worker", worker),
                                               "log": str(logs_dir / f"{worker}.log")}])
            tail: list[str] = []
            relay = threading.Thread(target=self._relay, args=(proc, worker, logs_dir / f"{worker}.log", tail),
                                     daemon=True)
            relay.start()
            running.append({"worker": worker, "proc": proc, "path": str(out), "relay": relay, "tail": tail})

        deadline = time.monotonic() + timeout_s
        results = []
        for r in running:
            proc = r["proc"]
            error = None
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                error = f"timed out after {timeout_s:.0f} s: killed"
                log.warning("[%s] %s", r["worker"], error)
                self._kill_group(proc)
            r["relay"].join(timeout=10)
            if error is None and proc.returncode != 0:
                last = next((l for l in reversed(r["tail"]) if l.strip()), "")
                error = f"exit {proc.returncode}" + (f": {last}" if last else "")
            if error is None and not Path(r["path"]).exists():
                error = "the worker exited 0 but wrote no result file"
            results.append({"worker": r["worker"], "returncode": proc.returncode, "path": r["path"], "error": error})
        return results

    def stop_workers(self) -> list[str]:
        """SIGTERM (SIGKILL after 5 s) every worker process carrying this run's marker, whoever started it."""
        procs = marked_processes(self.state_dir, "worker")
        described = []
        for p in procs:
            try:
                described.append(f"pid {p.pid}: {' '.join(p.cmdline())[:160]}")
            except psutil.Error:
                described.append(f"pid {p.pid}")
        if procs:
            terminate(procs, signal.SIGTERM, 5.0)
        return described

    @staticmethod
    def _relay(proc: subprocess.Popen, worker: str, log_path: Path, tail: list[str]) -> None:
        with open(log_path, "a") as f:
            for line in proc.stdout:  # type: ignore[union-attr]
                line = line.rstrip("\n")
                # the worker's progress lines already name it
                log.info("%s", line if line.startswith(f"[{worker}]") else f"[{worker}] {line}")
                f.write(line + "\n")
                f.flush()
                tail.append(line)
                del tail[:-20]

    @staticmethod
    def _kill_group(proc: subprocess.Popen) -> None:
        """SIGTERM the worker's process group, SIGKILL after 10 s."""
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)

    # -- teardown --------------------------------------------------------------------
    def teardown(self) -> dict[str, Any]:
        """Stop everything this run started; idempotent, works from a fresh object.

        1. each broker's graceful stop (SIGTERM to each RabbitMQ node, epmd -kill, SIGINT...);
        2. :func:`stop_all`: every pid ever recorded and every process carrying
           this state dir's marker;
        3. a last scan for processes whose command line names the state dir.
        """
        record: dict[str, Any] = {"environment": self.name, "state_dir": str(self.state_dir), "stopped": [],
                                  "errors": []}
        if not self.state_dir.exists():
            record["note"] = "nothing to stop: the state directory does not exist (provision never ran)"
            return record
        for broker in BROKERS:
            if (self.state_dir / broker / "broker.json").exists():
                try:
                    record["stopped"] += self._broker(broker).stop()
                except Exception as e:  # noqa: BLE001 - teardown goes on whatever fails
                    record["errors"].append(f"{broker}: {type(e).__name__}: {e}")
        record["stopped"] += stop_all(self.state_dir)
        leftovers = self._processes_naming_state_dir()
        if leftovers:
            pids = terminate(leftovers, signal.SIGTERM, 10.0)
            record["stopped"] += [{"pid": pid, "broker": "?", "role": "named the state dir", "cmd": ""}
                                  for pid in pids]
        remaining = [p.pid for p in marked_processes(self.state_dir)] + \
                    [p.pid for p in self._processes_naming_state_dir()]
        record["remaining"] = remaining
        if remaining:
            record["errors"].append(f"processes still running after teardown: {remaining}")
        write_json(self.state_dir / "teardown.json", record)
        return record

    def _processes_naming_state_dir(self) -> list[psutil.Process]:
        """Processes (not us, not our ancestors) whose command line mentions the state dir."""
        state = str(self.state_dir)
        me = {os.getpid()} | {p.pid for p in psutil.Process().parents()}
        found = []
        for p in psutil.process_iter(["pid", "cmdline", "status"]):
            if p.pid in me or p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmd = p.info["cmdline"] or []
            if any(arg == state or arg.startswith(state + os.sep) or f"={state}{os.sep}" in arg or
                   arg.endswith(f"={state}") for arg in cmd):
                found.append(p)
        return found
