"""Process control shared by every environment: state directories, the pid registry, stopping.

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

State directory of a run: the setting ``state_dir``, else
``$BROKERBENCH_HOME/state/<run_key>`` (``BROKERBENCH_HOME`` defaults to
``<repository>/.brokerbench``): :func:`state_dir_for`.

Used by the local environment, by the broker implementations of
:mod:`brokerbench.environments.machine`, by the host metrics sampler and by the
aws environment (its controller-side state directory).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
from pathlib import Path
from typing import Any, Iterable

import psutil

from ..resources import brokerbench_home
from ..util import write_json_atomic

MARKER_STATE = "BROKERBENCH_STATE_DIR"
MARKER_BROKER = "BROKERBENCH_BROKER"
STOP_GRACE_S = 20.0


# -- state directories --------------------------------------------------------

def state_dir_for(run_key: str, state_dir: str | None = None) -> Path:
    """Where a run's state lives: ``state_dir`` (the environment's setting of that name), else the default
    under ``BROKERBENCH_HOME`` (see the module docstring)."""
    if state_dir:
        return Path(state_dir).resolve()
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", run_key).strip("._") or "run"
    return (brokerbench_home() / "state" / safe).resolve()


# -- files ---------------------------------------------------------------------

def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a reader never sees half a file)."""
    write_json_atomic(path, data)


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


@contextlib.contextmanager
def locked(path: Path):
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
    with locked(path.with_suffix(".lock")):
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


def same_process(entry: dict[str, Any]) -> psutil.Process | None:
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
    return same_process(entry) is not None


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
        p = same_process(entry)
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


def stop_phase_process(out: str, module: str) -> dict[str, Any]:
    """Stop the detached process of a phase (the host sampler, the broker metrics scraper) whose pid
    ``<out>.pid`` holds, if its command line still runs ``module`` (a reused pid is not it); idempotent."""
    pid_file = Path(out + ".pid")
    stopped = None
    if pid_file.exists():
        pid = int(pid_file.read_text().strip() or 0)
        try:
            p = psutil.Process(pid)
            if module in " ".join(p.cmdline()):
                p.send_signal(signal.SIGTERM)
                p.wait(10)
                stopped = pid
        except (psutil.NoSuchProcess, psutil.TimeoutExpired):
            pass
        pid_file.unlink(missing_ok=True)
    return {"stopped": stopped, "out": out}
