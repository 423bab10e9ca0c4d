"""The base of every broker implementation run as processes on one machine.

:class:`LocalBroker` handles reuse, restart, the state file, waiting, death
detection and stopping; one module per implementation subclasses it
(:mod:`.tansu`, :mod:`.apache_kafka`, :mod:`.pulsar_lite`,
:mod:`.apache_pulsar`, :mod:`.rabbitmq`); the Apache ones through
:class:`DistributionBroker`, which runs a resolved distribution's jars.
Processes are kept track of through :mod:`brokerbench.environments.processes`.

All ports are allocated free on 127.0.0.1 at start; every listener binds to
127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import psutil

from .. import cpus
from ..base import BrokerEndpoint, EnvironmentFailure
from ..brokermetrics import Target
from ..processes import (
    MARKER_BROKER,
    MARKER_STATE,
    STOP_GRACE_S,
    alive,
    locked,
    log_tail,
    marked_processes,
    process_entry,
    read_json,
    record_processes,
    same_process,
    terminate,
    write_json,
)
from ..settings import LocalSettings
from .distributions import Distribution

log = logging.getLogger("brokerbench")

LOOPBACK = "127.0.0.1"


# -- ports ----------------------------------------------------------------------

def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (all sockets held open until every one is chosen)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def require_listening(address: str) -> None:
    """Raise ConnectionRefusedError unless something accepts connections on ``host:port`` (a probe's first
    step: client libraries back off for seconds, and log noisily, when they try too early)."""
    host, port = address.rsplit(":", 1)
    if not port_open(int(port), host):
        raise ConnectionRefusedError(f"nothing listens on {address} yet")


def file_size(path: Path) -> int:
    """The size of a log file now (0 when there is none): where a start's own lines in it begin."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def port_open(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# -- the broker base class ------------------------------------------------------------

class LocalBroker(ABC):
    """One broker (possibly several processes) run from a state directory.

    Subclasses implement :meth:`_launch` (start the processes, return the
    running record), :meth:`_probe` (does it really serve?), :meth:`_endpoint`
    and :meth:`durability`. The base class handles reuse, restart, the state
    file, waiting, death detection and stopping.
    """

    broker: str = ""
    implementation: str = ""
    #: whether the broker runs in a JVM that takes a variant's ``jvmOptions`` (the Apache distributions)
    runs_jvm: bool = False

    def __init__(self, state_dir: str | os.PathLike[str], settings: LocalSettings | None = None):
        self.state_dir = Path(state_dir).resolve()
        self.settings = settings or LocalSettings()
        self.dir = self.state_dir / self.broker
        self.start_timeout_s = float(self.settings.start_timeout_s)
        #: the variant's JVM flags for the start under way (start() sets them; _launch merges them, jvm_options.py)
        self.jvm_options: list[str] = []

    # -- paths and state -------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.dir / "broker.json"

    def state(self) -> dict[str, Any] | None:
        return read_json(self.state_path)

    def _save(self, state: dict[str, Any]) -> None:
        write_json(self.state_path, state)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment every process of this broker starts with (incl. the marker)."""
        env = dict(os.environ)
        env.update({MARKER_STATE: str(self.state_dir), MARKER_BROKER: self.broker})
        env.update(extra)
        return env

    def spawn(self, argv: list[str], role: str, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> dict[str, Any]:
        """Start one long-running process in its own session, output to ``logs/<role>.log``.

        Returns the process entry (also recorded in pids.json at once, so a
        crash right after this call still leaves it findable).
        """
        logs = self.dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"{role}.log"
        with open(log_path, "ab") as f:
            offset = f.tell()  # the error tail starts at this start's header line
            f.write(f"=== brokerbench: starting {role} at {time.strftime('%Y-%m-%d %H:%M:%S')}: "
                    f"{' '.join(argv)}\n".encode())
            # on the broker side's CPUs when the setting cpu_pinning names them (threads and children inherit them)
            proc = subprocess.Popen(cpus.pinned(argv, self.settings.cpu_pinning, "broker"), stdin=subprocess.DEVNULL,
                                    stdout=f, stderr=subprocess.STDOUT,
                                    env=env or self.env(), cwd=str(cwd or self.dir), start_new_session=True)
        entry = process_entry(psutil.Process(proc.pid), self.broker, role)
        entry.update({"log": str(log_path), "log_offset": offset, "main": True})
        record_processes(self.state_dir, [entry])
        return entry

    def run_tool(self, argv: list[str], env: dict[str, str] | None = None, timeout: float = 60.0,
                 check: bool = False) -> subprocess.CompletedProcess:
        """Run a short command (e.g. rabbitmqctl) with this broker's environment."""
        try:
            p = subprocess.run(argv, env=env or self.env(), capture_output=True, text=True, timeout=timeout,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
            p = subprocess.CompletedProcess(argv, 124, out, f"timed out after {timeout:.0f} s")
        if check and p.returncode != 0:
            raise EnvironmentFailure(f"{' '.join(argv[:3])} failed (exit {p.returncode}): "
                                    f"{(p.stderr or p.stdout).strip()[-800:]}", host=self.label())
        return p

    def label(self, state: dict[str, Any] | None = None) -> str:
        state = state or self.state() or {}
        return f"{self.broker} ({state.get('implementation', self.implementation)})"

    # -- what subclasses provide -----------------------------------------------
    @abstractmethod
    def _launch(self, broker_settings: dict[str, Any]) -> dict[str, Any]:
        """Start the processes; return the state record (ports, processes, address...)."""

    @abstractmethod
    def _probe(self, state: dict[str, Any]) -> None:
        """Raise unless the broker serves clients right now (one bounded attempt)."""

    @abstractmethod
    def _endpoint(self, state: dict[str, Any]) -> BrokerEndpoint:
        """The endpoint of the running broker (durability filled in by start())."""

    @abstractmethod
    def durability(self, variant: str, broker_settings: dict[str, Any],
                   driver_overrides: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        """{"variant", "honoured", "note", "settings"} for this implementation."""

    def metrics_targets(self, state: dict[str, Any]) -> list[Target]:  # noqa: ARG002 - the default has none
        """The broker's own metrics endpoints (:mod:`..brokermetrics`) while it runs (default: none, e.g. the
        stand-ins)."""
        return []

    def _graceful_stop(self, state: dict[str, Any]) -> None:
        """Ask the broker to stop (default: SIGTERM to the main processes)."""
        procs = [p for p in (same_process(e) for e in state.get("processes", []) if e.get("main")) if p]
        terminate(procs, signal.SIGTERM, STOP_GRACE_S)

    def version(self) -> str:
        return "unknown"

    def identity(self) -> str:
        """What runs, beyond the settings: a running broker whose identity differs is restarted."""
        return self.implementation

    # -- lifecycle -------------------------------------------------------------
    @staticmethod
    def settings_key(broker_settings: dict[str, Any]) -> str:
        return hashlib.sha1(json.dumps(broker_settings or {}, sort_keys=True, default=str).encode()).hexdigest()[:12]

    def start(self, broker_settings: dict[str, Any] | None, variant_name: str,
              driver_overrides: dict[str, Any] | None, jvm_options: list[str] | None = None) -> BrokerEndpoint:
        """Start the broker for ``variant_name`` and block until it serves.

        Reuses a broker already running from this state dir with the same
        ``broker_settings`` and ``jvm_options``; restarts it when they differ. A broker recorded as
        running whose processes have died is reported as an error (once: the
        record is marked ``died`` so a retry starts afresh). A broker that exits (or never serves) at start
        fails naming the setting or JVM option its own log refuses, and quoting that line.
        """
        broker_settings = dict(broker_settings or {})
        driver_overrides = dict(driver_overrides or {})
        jvm_options = list(jvm_options or [])
        if jvm_options and not self.runs_jvm:
            raise EnvironmentFailure(f"runs no JVM of brokerbench's: the variant's jvmOptions "
                                     f"({' '.join(jvm_options)}) cannot apply", host=self.label())
        self.jvm_options = jvm_options
        key = self.settings_key({**broker_settings, "brokerbench.implementation": self.identity(),
                                 **({"brokerbench.jvm_options": jvm_options} if jvm_options else {})})
        with locked(self.dir / "start.lock"):
            state = self.state()
            if state and state.get("status") == "running":
                self.check(state)  # raises, naming the broker, if it died
                if state.get("settings_key") == key:
                    log.info("%s already running with these settings: reused", self.label(state))
                    state["reused"] = state.get("reused", 0) + 1
                    return self._finish(state, variant_name, broker_settings, driver_overrides)
                log.info("%s runs with other settings: restarting", self.label(state))
                self._stop_locked()
            t0 = time.monotonic()
            shutil.rmtree(self.dir / "data", ignore_errors=True)
            (self.dir / "data").mkdir(parents=True, exist_ok=True)
            state = {"broker": self.broker, "implementation": self.implementation, "status": "starting",
                     "settings_key": key, "broker_settings": broker_settings, "jvm_options": jvm_options,
                     "started_at": time.time()}
            self._save(state)
            try:
                state.update(self._launch(broker_settings))
                self._save(state)
                self._wait_ready(state)
                state["version"] = self.version()
            except BaseException:
                state["status"] = "failed"
                self._save(state)
                self._stop_locked()
                raise
            state["processes"] = self._discover(state)
            state["status"] = "running"
            state["startup_s"] = round(time.monotonic() - t0, 2)
            log.info("%s %s serving after %.1f s (pid %s)", self.label(state), state.get("version"), state["startup_s"],
                     ", ".join(str(e["pid"]) for e in state["processes"] if e.get("main")))
            return self._finish(state, variant_name, broker_settings, driver_overrides)

    def _finish(self, state, variant_name, broker_settings, driver_overrides) -> BrokerEndpoint:
        ep = self._endpoint(state)
        ep.durability = self.durability(variant_name, broker_settings, driver_overrides, state)
        state["endpoint"] = ep.to_dict()
        self._save(state)
        return ep

    def _discover(self, state: dict[str, Any]) -> list[dict[str, Any]]:
        """All processes of this broker now: the ones we spawned plus marked helpers."""
        entries = {e["pid"]: e for e in state.get("processes", [])}
        for p in marked_processes(self.state_dir, self.broker):
            if p.pid not in entries:
                with contextlib.suppress(psutil.Error):
                    entries[p.pid] = process_entry(p, self.broker, p.name())
        record_processes(self.state_dir, entries.values())
        return list(entries.values())

    def _wait_ready(self, state: dict[str, Any]) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        last = "no attempt yet"
        while True:
            dead = [e for e in state.get("processes", []) if e.get("main") and not alive(e)]
            if dead:
                raise self._error(state, self._refused(state) + f"exited during start-up (pid {dead[0]['pid']})")
            try:
                self._probe(state)
                return
            except Exception as e:  # noqa: BLE001 - any failure means "not yet"
                last = f"{type(e).__name__}: {e}"
            if time.monotonic() > deadline:
                raise self._error(state, self._refused(state) + f"did not come up within {self.start_timeout_s:.0f} "
                                         f"s (last probe: {last})")
            time.sleep(0.5)

    def _start_log_lines(self, state: dict[str, Any]) -> list[str]:
        """The lines this start wrote to the broker's logs (from each log's offset at the start)."""
        lines: list[str] = []
        for path, offset in self._log_files(state):
            try:
                with open(path, "rb") as f:
                    f.seek(0, os.SEEK_END)
                    f.seek(max(offset, f.tell() - 4 * 1024 * 1024))
                    lines += f.read().decode(errors="replace").splitlines()
            except OSError:
                continue
        return lines

    def _refused(self, state: dict[str, Any]) -> str:
        """What the broker's own log says it refused at start, naming the setting (or JVM option) and quoting the
        line: ``refused the setting num.io.threads='abc': "...ConfigException: Invalid value abc for configuration
        num.io.threads: ..."; `` - or "" when no line of this start names one."""
        return refusal_in(self._start_log_lines(state), state.get("broker_settings") or {},
                          state.get("jvm_options") or [])

    def _log_files(self, state: dict[str, Any]) -> list[tuple[str, int]]:
        """(path, offset) of the logs worth showing when something goes wrong."""
        return [(e["log"], e.get("log_offset", 0)) for e in state.get("processes", []) if e.get("log")]

    def _error(self, state: dict[str, Any], what: str) -> EnvironmentFailure:
        tails = [f"--- {path} (last lines) ---\n{log_tail(path, 25, offset)}"
                 for path, offset in self._log_files(state)]
        return EnvironmentFailure(f"{what}; address {state.get('address', '?')}\n" + "\n".join(tails),
                                 host=self.label(state))

    def check(self, state: dict[str, Any] | None = None) -> dict[str, Any]:
        """Raise a clear error if the broker recorded as running has died.

        Returns the state when it is healthy (processes alive and serving).
        """
        state = state or self.state()
        if not state or state.get("status") != "running":
            raise EnvironmentFailure("is not running (not deployed, or stopped)", host=self.label(state))
        dead = [e for e in state.get("processes", []) if e.get("main") and not alive(e)]
        if dead:
            err = self._error(state, f"died: process {dead[0]['pid']} ({dead[0].get('role')}) is no longer running")
            state["status"] = "died"
            state["died"] = str(err)
            self._save(state)
            self._stop_locked()  # clean up the rest of it (e.g. epmd, the other nodes)
            raise err
        try:
            self._probe(state)
        except Exception as e:  # noqa: BLE001
            raise self._error(state, f"does not answer: {type(e).__name__}: {e}") from None
        return state

    def stop(self) -> list[dict[str, Any]]:
        """Stop the broker: graceful first, then SIGKILL after a bound. Idempotent.

        Keeps logs and data (nothing measured is removed). Returns the
        processes that were still running.
        """
        with locked(self.dir / "start.lock"):
            return self._stop_locked()

    def _stop_locked(self) -> list[dict[str, Any]]:
        state = self.state()
        if state is None:
            return []
        entries = [e for e in state.get("processes", []) if alive(e)]
        stopped = [{k: e.get(k) for k in ("pid", "broker", "role", "cmd")} for e in entries]
        if entries:
            with contextlib.suppress(Exception):
                self._graceful_stop(state)
        rest = [p for p in (same_process(e) for e in state.get("processes", [])) if p]
        rest += [p for p in marked_processes(self.state_dir, self.broker) if p.pid not in {r.pid for r in rest}]
        for pid in terminate(rest, signal.SIGTERM, 5.0):
            if pid not in {s["pid"] for s in stopped}:
                stopped.append({"pid": pid, "broker": self.broker, "role": "helper", "cmd": ""})
        if state.get("status") in ("running", "starting", "failed"):
            state["status"] = "stopped"
        state["stopped_at"] = time.time()
        self._save(state)
        return stopped


def refusal_in(lines: list[str], broker_settings: dict[str, Any], jvm_options: list[str]) -> str:
    """The first of ``lines`` (a broker's or its tool's output at start) that refuses one of ``broker_settings`` (it
    names the key beside an error word) or, failing that, one of ``jvm_options`` (HotSpot's own refusal, or an
    OutOfMemoryError under the variant's heap flags), as the start of an error message: ``refused the setting
    num.io.threads='abc' at start: "<the line>"; ``; "" when none does."""
    lines = [line.strip() for line in lines]
    error = re.compile(r"(?i)exception|error|invalid|illegal|fatal|unknown|not a |failed|cannot|could not|refus")
    for key, value in broker_settings.items():
        named = re.compile(rf"(?<![\w.-]){re.escape(str(key))}(?![\w-]|\.\w)")
        for line in lines:
            if named.search(line) and error.search(line) and "brokerbench: starting" not in line:
                return f"refused the setting {key}={value!r} at start: {json.dumps(line[-600:])}; "
    if jvm_options:
        from .jvm_options import HEAP, JVM_REFUSALS, named_in

        for line in lines:
            if JVM_REFUSALS.search(line) and "brokerbench: starting" not in line:
                flags = named_in(line, jvm_options) or jvm_options
                return (f"the JVM refused the variant's jvmOptions {' '.join(flags)} at start: "
                        f"{json.dumps(line[-600:])}; ")
        heap = [f for f in jvm_options if HEAP.match(f)]
        for line in lines:
            if heap and "java.lang.OutOfMemoryError" in line:
                return (f"ran out of memory at start with the variant's jvmOptions {' '.join(heap)}: "
                        f"{json.dumps(line[-600:])}; ")
    return ""


# -- Kafka ------------------------------------------------------------------------------

def kafka_flush_requested(broker_settings: dict[str, Any], driver_overrides: dict[str, Any]) -> dict[str, Any]:
    """The per-message flush settings a variant asks for (topic or broker level)."""
    topic = driver_overrides.get("topicConfig") or {}
    if isinstance(topic, str):
        topic = dict(l.split("=", 1) for l in topic.splitlines() if "=" in l and not l.strip().startswith("#"))
    asked = {k: v for k, v in topic.items() if k in ("flush.messages", "flush.ms")}
    asked.update({k: v for k, v in broker_settings.items()
                  if k in ("log.flush.interval.messages", "log.flush.interval.ms")})
    return asked


class DistributionBroker(LocalBroker):
    """A broker run from an Apache distribution's jars (:class:`.distributions.Distribution`, resolved by
    ``make_broker``): its version and its identity are the distribution's; its JVM takes a variant's
    ``jvmOptions`` (:meth:`jvm_flags`)."""

    runs_jvm = True

    def __init__(self, state_dir: str | os.PathLike[str], settings: LocalSettings | None = None,
                 distribution: Distribution | None = None):
        super().__init__(state_dir, settings)
        if distribution is None:
            raise ValueError(f"{type(self).__name__} needs a distribution (make_broker resolves it)")
        self.dist = distribution

    def version(self) -> str:
        return self.dist.version

    def identity(self) -> str:
        return f"{self.implementation} {self.dist.version} {self.dist.lib}"

    def jvm_flags(self, heap: list[str], performance: list[str]) -> list[str]:
        """The broker JVM's flags: brokerbench's ``heap`` and ``performance`` defaults with the variant's
        ``jvmOptions`` over them (:func:`.jvm_options.merge`)."""
        from .jvm_options import merge

        return merge(heap, performance, self.jvm_options)

    def _finish(self, state, variant_name, broker_settings, driver_overrides) -> BrokerEndpoint:
        ep = super()._finish(state, variant_name, broker_settings, driver_overrides)
        if state.get("jvm_flags"):  # the provenance: the flags the JVM runs with (the variant's among them)
            ep.jvm_options = list(state["jvm_flags"])
            state["endpoint"] = ep.to_dict()
            self._save(state)
        return ep


def kafka_cluster_info(bootstrap_servers: str, client_id: str, timeout_ms: int) -> dict[str, Any]:
    """kafka-python's describe_cluster (brokers, fenced ones marked, controller_id, cluster_id). Kafka before 3.3
    answers DescribeCluster in version 0, which kafka-python 3.0 reads as if it had version 1's endpoint_type
    (KeyError): there, the brokers a Metadata request lists (serving ones only), through confluent-kafka's admin
    client, in the same shape."""
    from kafka import KafkaAdminClient  # the client libraries: only for the broker asked

    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers.split(","), client_id=client_id,
                             request_timeout_ms=timeout_ms)
    try:
        return admin.describe_cluster()
    except KeyError:
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": bootstrap_servers, "client.id": client_id}) \
            .list_topics(timeout=timeout_ms / 1000)
        return {"brokers": [{"broker_id": b} for b in md.brokers], "controller_id": md.controller_id,
                "cluster_id": md.cluster_id}
    finally:
        admin.close()


class KafkaProbeMixin:
    def _probe(self, state: dict[str, Any]) -> None:
        """A metadata request (:func:`kafka_cluster_info`)."""
        require_listening(state["address"])
        if not kafka_cluster_info(state["address"], "brokerbench-probe", 5000).get("brokers"):
            raise RuntimeError("metadata lists no brokers")

    def _endpoint(self, state: dict[str, Any]) -> BrokerEndpoint:
        return BrokerEndpoint(broker="kafka", implementation=state["implementation"],
                              version=state.get("version", "unknown"), bootstrap_servers=state["address"], nodes=1)


# -- Pulsar -------------------------------------------------------------------------------


class PulsarProbeMixin:
    def _probe(self, state: dict[str, Any]) -> None:
        """A pulsar.Client creates a producer on a throwaway topic."""
        import pulsar  # the client libraries: only for the broker probed

        require_listening(state["address"])
        auth = {"authentication": pulsar.AuthenticationToken(state["token"])} if state.get("token") else {}
        client = pulsar.Client(state["service_url"], operation_timeout_seconds=5, connection_timeout_ms=3000,
                               logger=_quiet_pulsar_logger(), **auth)
        try:
            producer = client.create_producer("persistent://public/default/brokerbench-probe",
                                              send_timeout_millis=5000)
            producer.close()
        finally:
            client.close()

    def _endpoint(self, state: dict[str, Any]) -> BrokerEndpoint:
        return BrokerEndpoint(broker="pulsar", implementation=state["implementation"],
                              version=state.get("version", "unknown"), service_url=state["service_url"],
                              http_url=state.get("http_url"), nodes=1)


def _quiet_pulsar_logger() -> logging.Logger:
    lg = logging.getLogger("brokerbench.pulsar-client")
    lg.setLevel(logging.WARNING)
    return lg


def journal_sync_requested(broker_settings: dict[str, Any]) -> bool | None:
    v = broker_settings.get("journalSyncData")
    if v is None:
        return None
    return str(v).lower() in ("true", "1", "yes")
