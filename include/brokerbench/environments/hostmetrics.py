"""Host metrics during a phase: CPU, memory, disk throughput and utilisation, network.

One sampler process per host writes one JSON line per interval (system-wide
figures from psutil, i.e. /proc). Every environment uses it the same way:
``local`` samples this machine, ``aws`` every broker, metadata and client
instance (started and stopped over SSH). ``summarise`` turns the lines into
the per-host figures stored next to the results::

    python -m brokerbench.environments.hostmetrics sample --out F [--interval 1] [--host NAME]

Fields of a line: ``ts`` (s since epoch), ``host``, ``cpu_percent`` (all
cores, 100 = every core busy), ``cpu_count``, ``mem_used_mb``,
``mem_total_mb``, ``disk_read_mb_s``, ``disk_write_mb_s``,
``disk_util_percent`` (busiest disk, time busy / interval), ``net_rx_mb_s``,
``net_tx_mb_s`` (all interfaces but loopback, except when only loopback
carries traffic), ``loadavg_1m``.

Who used the CPU (same scale as ``cpu_percent``: 100 = every core busy),
from each process's user + system CPU time since the previous sample:

- ``own_cpu_percent``: processes of this run: those whose environment
  carries ``BROKERBENCH_STATE_DIR=<this run's state dir>`` (brokers, workers,
  the sampler itself) and the process that started the phase with its
  ancestors (``--own-pid``, the Airflow task);
- ``foreign_cpu_percent``: every other process whose environment could be
  read: other users of the machine, including the Airflow scheduler and
  processes of other brokerbench runs;
- ``unattributed_cpu_percent``: processes whose environment cannot be read
  (another user's, when the sampler is not root) and kernel threads (their
  environment is empty): softirq and I/O work done for the benchmark itself
  lands here, so it is never counted as foreign;
- ``other_runs``: ``{state dir: CPU %}`` of processes carrying the marker
  of ANOTHER brokerbench run (the state dirs under ``--run-root`` are this
  run's: a fleet's hosts that share one machine) (their CPU is also in ``foreign_cpu_percent``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable

MB = 1e6


def _disk():
    try:
        return __import__("psutil").disk_io_counters(perdisk=True) or {}
    except Exception:  # noqa: BLE001 - some containers have no /proc/diskstats
        return {}


def _net():
    import psutil

    return psutil.net_io_counters(pernic=True) or {}


#: the environment variable that marks every process of a run (processes.MARKER_STATE)
MARKER_STATE = "BROKERBENCH_STATE_DIR"

OWN, FOREIGN, UNATTRIBUTED = "own", "foreign", "unattributed"


#: the busiest foreign processes (by name) recorded per sample
FOREIGN_TOP = 3


class ProcessCpu:
    """CPU of every process since the previous call, split by who it belongs to.

    One ``psutil.process_iter`` per call (cpu_times and create_time); a
    process's environment is read once, when it is first seen, and its class
    is cached by (pid, create time), so a sample costs a few ms even with
    hundreds of processes.
    """

    def __init__(self, state_dir: str | None, own_pids: Iterable[int] = (), run_root: str | None = None):
        import psutil

        self.state_dir = str(Path(state_dir).resolve()) if state_dir else None
        #: state dirs under this directory are the same run's (the other hosts of a fleet that share this
        #: machine: static hosts, the loopback test fleet): their processes are the benchmark's own load
        self.run_root = str(Path(run_root).resolve()) + os.sep if run_root else None
        self.own_pids = {int(p) for p in own_pids} | {os.getpid()}
        self.ncpu = psutil.cpu_count() or 1
        self.classes: dict[tuple[int, float], tuple[str, str | None]] = {}
        self.prev: dict[tuple[int, float], float] = {}
        self.prev_wall = time.time()
        self.prev_mono = time.monotonic()
        self.measure()  # the first call only sets the starting point

    def _classify(self, proc) -> tuple[str, str | None]:
        import psutil

        if proc.pid in self.own_pids:
            return OWN, None
        try:
            env = proc.environ()
        except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
            return UNATTRIBUTED, None
        except psutil.NoSuchProcess:
            return UNATTRIBUTED, None
        if not env:  # kernel threads (and processes that cleared their environment)
            return UNATTRIBUTED, None
        marker = env.get(MARKER_STATE)
        if marker and self.state_dir and marker == self.state_dir:
            return OWN, None
        if marker and self.run_root and marker.startswith(self.run_root):
            return OWN, None
        if marker:
            return FOREIGN, marker
        return FOREIGN, None

    def measure(self) -> dict[str, Any]:
        import psutil

        now_wall, now_mono = time.time(), time.monotonic()
        dt = max(now_mono - self.prev_mono, 1e-6)
        used = {OWN: 0.0, FOREIGN: 0.0, UNATTRIBUTED: 0.0}
        runs: dict[str, float] = {}
        foreign_by_name: dict[str, float] = {}
        seen: dict[tuple[int, float], float] = {}
        for p in psutil.process_iter(["cpu_times", "create_time", "name"]):
            ct, times = p.info.get("create_time"), p.info.get("cpu_times")
            if ct is None or times is None:
                continue
            key = (p.pid, ct)
            total = float(times.user + times.system)
            seen[key] = total
            if key in self.prev:
                delta = total - self.prev[key]
            elif ct >= self.prev_wall - 0.05:
                delta = total  # started since the previous sample: all its CPU is new
            else:
                delta = 0.0  # first sight of an older process (the very first call)
            cls = self.classes.get(key)
            if cls is None:
                cls = self.classes[key] = self._classify(p)
            if delta <= 0:
                continue
            used[cls[0]] += delta
            if cls[1] is not None:
                runs[cls[1]] = runs.get(cls[1], 0.0) + delta
            elif cls[0] == FOREIGN:
                name = p.info.get("name") or "?"
                foreign_by_name[name] = foreign_by_name.get(name, 0.0) + delta
        for key in [k for k in self.classes if k not in seen]:
            del self.classes[key]
        self.prev, self.prev_wall, self.prev_mono = seen, now_wall, now_mono
        scale = 100.0 / (dt * self.ncpu)

        def pct(seconds: float) -> float:
            # CPU of processes that started just before the previous sample may be counted
            # in full here: never report more than every core
            return round(min(100.0, seconds * scale), 2)

        # who the foreign load is (process names, the busiest first), so a user can act on it
        top = sorted(foreign_by_name.items(), key=lambda kv: -kv[1])[:FOREIGN_TOP]
        return {"own_cpu_percent": pct(used[OWN]), "foreign_cpu_percent": pct(used[FOREIGN]),
                "unattributed_cpu_percent": pct(used[UNATTRIBUTED]),
                "other_runs": {k: pct(v) for k, v in sorted(runs.items())},
                "foreign_top": {k: pct(v) for k, v in top if pct(v) >= 1.0}}


def sample_forever(out: str, interval: float, host: str, state_dir: str | None = None,
                   own_pids: Iterable[int] = (), run_root: str | None = None, watch_pid: int | None = None) -> None:
    """Append one sample per ``interval`` to ``out`` until SIGTERM, or until the process ``watch_pid`` (the task
    that started the sampler and will stop it) is gone: a task killed outright leaves no sampler behind."""
    import psutil

    from brokerbench.environments.processes import alive, process_entry

    stop = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(flag=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(flag=True))
    watched = None
    if watch_pid:
        try:  # its pid and start time: a reused pid is not it
            watched = process_entry(psutil.Process(watch_pid), "hostmetrics", "phase task")
        except psutil.Error:
            return  # the starter is gone already
    state_dir = state_dir or os.environ.get(MARKER_STATE)
    procs = ProcessCpu(state_dir, own_pids, run_root)
    psutil.cpu_percent(None)
    d0, n0, t0 = _disk(), _net(), time.monotonic()
    with open(out, "a") as f:
        while not stop["flag"]:
            time.sleep(interval)
            if stop["flag"] or (watched is not None and not alive(watched)):
                break
            d1, n1, t1 = _disk(), _net(), time.monotonic()
            dt = max(t1 - t0, 1e-6)
            read = sum(max(0, d1[k].read_bytes - d0[k].read_bytes) for k in d1 if k in d0)
            write = sum(max(0, d1[k].write_bytes - d0[k].write_bytes) for k in d1 if k in d0)
            busy = [max(0, getattr(d1[k], "busy_time", 0) - getattr(d0[k], "busy_time", 0)) for k in d1 if k in d0]
            nics = [k for k in n1 if k in n0 and k != "lo"]
            if not any(n1[k].bytes_recv - n0[k].bytes_recv for k in nics):
                nics = [k for k in n1 if k in n0]
            rx = sum(max(0, n1[k].bytes_recv - n0[k].bytes_recv) for k in nics)
            tx = sum(max(0, n1[k].bytes_sent - n0[k].bytes_sent) for k in nics)
            vm = psutil.virtual_memory()
            rec = {"ts": round(time.time(), 3), "host": host, "cpu_percent": psutil.cpu_percent(None),
                   "cpu_count": psutil.cpu_count(), "mem_used_mb": round((vm.total - vm.available) / MB, 1),
                   "mem_total_mb": round(vm.total / MB, 1), "disk_read_mb_s": round(read / dt / MB, 3),
                   "disk_write_mb_s": round(write / dt / MB, 3),
                   "disk_util_percent": round(min(100.0, max(busy or [0]) / (dt * 1000) * 100), 1),
                   "net_rx_mb_s": round(rx / dt / MB, 3), "net_tx_mb_s": round(tx / dt / MB, 3),
                   "loadavg_1m": round(os.getloadavg()[0], 2)}
            try:
                rec.update(procs.measure())
            except Exception as e:  # noqa: BLE001 - the system-wide figures are still worth writing
                rec["process_error"] = f"{type(e).__name__}: {e}"
            f.write(json.dumps(rec) + "\n")
            f.flush()
            d0, n0, t0 = d1, n1, t1


def parse_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in (text or "").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def summarise(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Average and maximum of every figure over the phase."""
    if not samples:
        return {"samples": 0}
    keys = ["cpu_percent", "mem_used_mb", "disk_read_mb_s", "disk_write_mb_s", "disk_util_percent",
            "net_rx_mb_s", "net_tx_mb_s", "loadavg_1m"]
    out: dict[str, Any] = {"samples": len(samples), "first_ts": samples[0]["ts"], "last_ts": samples[-1]["ts"],
                           "cpu_count": samples[-1].get("cpu_count"), "mem_total_mb": samples[-1].get("mem_total_mb")}
    for k in keys:
        vals = [s[k] for s in samples if isinstance(s.get(k), (int, float))]
        if vals:
            out[f"{k}_avg"] = round(sum(vals) / len(vals), 3)
            out[f"{k}_max"] = round(max(vals), 3)
    # who used the CPU (samples of older samplers have no such fields)
    for k in ("own_cpu", "foreign_cpu", "unattributed_cpu"):
        vals = [s[f"{k}_percent"] for s in samples if isinstance(s.get(f"{k}_percent"), (int, float))]
        if vals:
            out[f"{k}_mean_percent"] = round(sum(vals) / len(vals), 3)
            out[f"{k}_max_percent"] = round(max(vals), 3)
    attributed = [s for s in samples if isinstance(s.get("other_runs"), dict)]
    if attributed:
        runs: dict[str, list[float]] = {}
        for s in attributed:
            for state, cpu in s["other_runs"].items():
                runs.setdefault(state, []).append(float(cpu or 0.0))
        out["other_runs"] = sorted(runs)
        # mean over every sample of the phase (0 where the other run was not seen)
        out["other_runs_cpu_mean_percent"] = round(sum(sum(v) for v in runs.values()) / len(attributed), 3)
        out["other_runs_samples"] = sum(1 for s in attributed if s["other_runs"])
    named = [s["foreign_top"] for s in samples if isinstance(s.get("foreign_top"), dict)]
    if named:
        # mean over the phase's samples, % of all cores, the busiest first
        totals: dict[str, float] = {}
        for top in named:
            for name, cpu in top.items():
                totals[name] = totals.get(name, 0.0) + float(cpu)
        out["foreign_top_mean_percent"] = {k: round(v / len(named), 1) for k, v in
                                           sorted(totals.items(), key=lambda kv: -kv[1])[:5]}
    return out


def own_chain(pid: int | None = None) -> list[int]:
    """``pid`` (default: this process) and its ancestors, without init (pid 1)."""
    import psutil

    try:
        p = psutil.Process(pid or os.getpid())
        return [p.pid] + [a.pid for a in p.parents() if a.pid > 1]
    except psutil.Error:
        return [pid or os.getpid()]


def start(state_dir: str, out: str, host: str, interval: float,
          own_pids: Iterable[int] | None = None, run_root: str | None = None,
          watch_pid: int | None = None) -> dict[str, Any]:
    """Start a detached sampler writing to ``out``; recorded (and marked) in
    ``state_dir`` like every process of a run, so a teardown stops it.

    ``own_pids``: processes that belong to the run without carrying its
    marker (default: the caller and its ancestors, i.e. the task that
    starts the phase). ``watch_pid``: the sampler also ends when this process
    is gone (the task that stops it, where that task is on this machine)."""
    import psutil

    from brokerbench.environments.processes import MARKER_BROKER, MARKER_STATE, process_entry, record_processes

    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(state_dir).mkdir(parents=True, exist_ok=True)
    state = str(Path(state_dir).resolve())
    env = dict(os.environ, **{MARKER_STATE: state, MARKER_BROKER: "hostmetrics"})
    own = sorted(set(own_chain() if own_pids is None else own_pids))
    argv = [sys.executable, "-m", "brokerbench.environments.hostmetrics", "sample", "--out", out,
            "--interval", str(interval), "--host", host, "--state-dir", state]
    for pid in own:
        argv += ["--own-pid", str(pid)]
    if run_root:
        argv += ["--run-root", run_root]
    if watch_pid:
        argv += ["--watch-pid", str(watch_pid)]
    proc = subprocess.Popen(argv, env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    record_processes(Path(state_dir).resolve(), [process_entry(psutil.Process(proc.pid), "hostmetrics", "sampler")])
    Path(out + ".pid").write_text(str(proc.pid))
    return {"pid": proc.pid, "out": out}


def stop(out: str) -> dict[str, Any]:
    """Stop the sampler started for ``out`` (idempotent)."""
    from brokerbench.environments.processes import stop_phase_process

    return stop_phase_process(out, "brokerbench.environments.hostmetrics")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m brokerbench.environments.hostmetrics")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample", help="append one JSON line per interval to --out until SIGTERM")
    s.add_argument("--out", required=True)
    s.add_argument("--interval", type=float, default=1.0)
    s.add_argument("--host", default=socket.gethostname())
    s.add_argument("--state-dir", help="this run's state dir (default: $BROKERBENCH_STATE_DIR)")
    s.add_argument("--own-pid", type=int, action="append", default=[],
                   help="a process of this run without the marker (repeatable)")
    s.add_argument("--run-root", help="state dirs under this directory are this run's too (a fleet's other "
                                      "hosts on the same machine)")
    s.add_argument("--watch-pid", type=int, help="end when this process is gone (the task that started it)")
    a = ap.parse_args(argv)
    if a.cmd == "sample":
        sample_forever(a.out, a.interval, a.host, a.state_dir, a.own_pid, a.run_root, a.watch_pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
