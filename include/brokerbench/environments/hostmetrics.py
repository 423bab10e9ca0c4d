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
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
from pathlib import Path
import sys
import time
from typing import Any

MB = 1e6


def _disk():
    try:
        return __import__("psutil").disk_io_counters(perdisk=True) or {}
    except Exception:  # noqa: BLE001 - some containers have no /proc/diskstats
        return {}


def _net():
    import psutil

    return psutil.net_io_counters(pernic=True) or {}


def sample_forever(out: str, interval: float, host: str) -> None:
    import psutil

    stop = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(flag=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(flag=True))
    psutil.cpu_percent(None)
    d0, n0, t0 = _disk(), _net(), time.monotonic()
    with open(out, "a") as f:
        while not stop["flag"]:
            time.sleep(interval)
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
    return out


def start(state_dir: str, out: str, host: str, interval: float) -> dict[str, Any]:
    """Start a detached sampler writing to ``out``; recorded (and marked) in
    ``state_dir`` like every process of a run, so a teardown stops it."""
    from brokerbench.environments.local_brokers import MARKER_BROKER, MARKER_STATE, process_entry, record_processes
    import psutil

    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(state_dir).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **{MARKER_STATE: str(Path(state_dir).resolve()), MARKER_BROKER: "hostmetrics"})
    proc = subprocess.Popen([sys.executable, "-m", "brokerbench.environments.hostmetrics", "sample", "--out", out,
                             "--interval", str(interval), "--host", host], env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    record_processes(Path(state_dir).resolve(), [process_entry(psutil.Process(proc.pid), "hostmetrics", "sampler")])
    Path(out + ".pid").write_text(str(proc.pid))
    return {"pid": proc.pid, "out": out}


def stop(out: str) -> dict[str, Any]:
    """Stop the sampler started for ``out`` (idempotent)."""
    import psutil

    pid_file = Path(out + ".pid")
    stopped = None
    if pid_file.exists():
        pid = int(pid_file.read_text().strip() or 0)
        try:
            p = psutil.Process(pid)
            if "brokerbench.environments.hostmetrics" in " ".join(p.cmdline()):
                p.send_signal(signal.SIGTERM)
                p.wait(10)
                stopped = pid
        except (psutil.NoSuchProcess, psutil.TimeoutExpired):
            pass
        pid_file.unlink(missing_ok=True)
    return {"stopped": stopped, "out": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m brokerbench.environments.hostmetrics")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample", help="append one JSON line per interval to --out until SIGTERM")
    s.add_argument("--out", required=True)
    s.add_argument("--interval", type=float, default=1.0)
    s.add_argument("--host", default=socket.gethostname())
    a = ap.parse_args(argv)
    if a.cmd == "sample":
        sample_forever(a.out, a.interval, a.host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
