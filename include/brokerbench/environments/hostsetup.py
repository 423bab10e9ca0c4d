"""Host setup: tuned profile, time sync, disk baseline, host description.

Every function takes a :class:`~brokerbench.environments.base.Host` (this
machine, or an EC2 instance over SSH: the commands are plain shell) and
returns a JSON-serialisable record of what was applied or measured. Nothing
here raises because something is *not available* on the host: the record says
what could not be done and why, and the benchmark goes on (the record ends up
in the run's provenance next to the numbers).

The text parsing lives in small pure functions (``parse_*``) so that it can
be tested on captured command output.
"""

from __future__ import annotations

import re
import time
from typing import Any

from .base import Host


def _first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


# -- tuned ----------------------------------------------------------------------

def tuned_failure_reason(output: str) -> str:
    """A one-line reason from the output of a failed ``tuned-adm`` call."""
    line = _first_line(output) or "no output"
    low = output.lower()
    if any(w in low for w in ("dbus", "d-bus", "daemon", "cannot talk to tuned", "not running")):
        return f"tuned daemon not available: {line}"
    if "not found" in low and "command" in low:
        return "tuned-adm is not installed"
    return f"tuned-adm failed: {line}"


def apply_tuned_profile(host: Host, profile: str = "latency-performance") -> dict[str, Any]:
    """Switch the host to a tuned profile (the reference benchmarks used latency-performance).

    Returns {"profile", "applied": bool, "reason"}; ``reason`` says why not
    when it could not be applied (tuned not installed, daemon not on D-Bus...).
    """
    record: dict[str, Any] = {"profile": profile, "applied": False, "reason": ""}
    if not host.run("command -v tuned-adm", timeout=10).ok:
        record["reason"] = "tuned-adm is not installed"
        return record
    res = host.run(f"tuned-adm profile {profile}", timeout=60)
    if not res.ok:
        record["reason"] = tuned_failure_reason(res.stderr + "\n" + res.stdout)
        return record
    active = host.run("tuned-adm active", timeout=30)
    m = re.search(r"Current active profile:\s*(\S+)", active.stdout)
    if m and m.group(1) == profile:
        record.update(applied=True, reason="active")
    else:
        record["reason"] = f"tuned-adm accepted the profile but reports: {_first_line(active.stdout + active.stderr)}"
    return record


# -- time sync ----------------------------------------------------------------------------

def parse_chronyc_tracking(text: str) -> dict[str, Any]:
    """Parse ``chronyc tracking`` output.

    ``System time : 0.000012345 seconds fast of NTP time`` means the local clock
    is ahead: the offset is positive (ms). Returns clock_offset_ms,
    last_offset_ms, rms_offset_ms, reference, stratum and leap_status (each None
    when the line is missing).
    """
    out: dict[str, Any] = {"clock_offset_ms": None, "last_offset_ms": None, "rms_offset_ms": None,
                           "reference": None, "stratum": None, "leap_status": None}
    m = re.search(r"^System time\s*:\s*([\d.eE+-]+)\s+seconds\s+(fast|slow)", text, re.M)
    if m:
        value = float(m.group(1)) * 1000.0
        out["clock_offset_ms"] = value if m.group(2) == "fast" else -value
    m = re.search(r"^Last offset\s*:\s*([+-]?[\d.eE+-]+)\s+seconds", text, re.M)
    if m:
        out["last_offset_ms"] = float(m.group(1)) * 1000.0
    m = re.search(r"^RMS offset\s*:\s*([+-]?[\d.eE+-]+)\s+seconds", text, re.M)
    if m:
        out["rms_offset_ms"] = float(m.group(1)) * 1000.0
    m = re.search(r"^Reference ID\s*:\s*(.+)$", text, re.M)
    if m:
        out["reference"] = m.group(1).strip()
    m = re.search(r"^Stratum\s*:\s*(\d+)", text, re.M)
    if m:
        out["stratum"] = int(m.group(1))
    m = re.search(r"^Leap status\s*:\s*(.+)$", text, re.M)
    if m:
        out["leap_status"] = m.group(1).strip()
    return out


def time_sync(host: Host, single_host: bool, wait_s: float = 30.0, poll_s: float = 2.0) -> dict[str, Any]:
    """The host's clock offset, for judging end-to-end latency across hosts.

    On a single host (the local environment) producers and consumers share
    one clock: the offset is 0 by construction. Otherwise ``chronyc tracking``
    is read until it reports ``Leap status : Normal`` (at most ``wait_s``).
    Returns {"clock_offset_ms", "source", "synchronised", "note", ...};
    clock_offset_ms is None when it could not be measured.
    """
    if single_host:
        return {"clock_offset_ms": 0.0, "source": "single host", "synchronised": True,
                "note": "producers, consumers and brokers run on this one host and read the same clock, so "
                        "end-to-end latency has no clock offset (0 by construction, not measured)."}
    deadline = time.monotonic() + wait_s
    while True:
        res = host.run("chronyc tracking", timeout=15)
        parsed = parse_chronyc_tracking(res.stdout) if res.ok else {}
        synced = parsed.get("leap_status") == "Normal"
        if synced or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    if not res.ok:
        return {"clock_offset_ms": None, "source": "chronyc", "synchronised": False,
                "note": f"chronyc tracking failed: {_first_line(res.stderr + res.stdout) or 'no output'}"}
    record = {**parsed, "source": f"chrony ({parsed.get('reference') or 'unknown reference'})",
              "synchronised": synced}
    record["note"] = ("chrony is synchronised; offset from 'System time'" if synced else
                      f"chrony did not reach 'Leap status : Normal' within {wait_s:.0f} s "
                      f"(leap status {parsed.get('leap_status')}): the offset may be unreliable")
    return record


# -- disk baseline ----------------------------------------------------------------------

_DD_RE = re.compile(r"(\d+)\s+bytes\b.*?copied,\s*([\d.,eE+-]+)\s*s", re.S)


def parse_dd(text: str) -> tuple[int, float] | None:
    """(bytes, seconds) from dd's summary line, e.g.
    ``67108864 bytes (67 MB, 64 MiB) copied, 0.123 s, 545 MB/s``."""
    m = _DD_RE.search(text or "")
    if not m:
        return None
    return int(m.group(1)), float(m.group(2).replace(",", "."))


def disk_baseline(host: Host, directory: str, size_mb: int = 64, fsync_writes: int = 200) -> dict[str, Any]:
    """Write throughput with direct I/O and a per-write fsync latency estimate.

    * throughput: ``dd bs=1M count=size_mb oflag=direct conv=fsync`` (falls
      back to buffered + fsync when the filesystem refuses O_DIRECT, and says so);
    * fsync latency: ``fsync_writes`` 4 KiB writes with ``oflag=dsync`` (each
      write synced): elapsed time / writes.

    The test file is removed afterwards. Returns a record; failures are
    recorded, not raised.
    """
    d = directory.rstrip("/") or "/"
    f = f"{d}/.brokerbench-dd-{int(time.time() * 1000)}"
    rec: dict[str, Any] = {"directory": directory, "size_mb": size_mb, "direct_io": True,
                           "write_mb_s": None, "fsync_latency_ms": None, "fsync_writes": fsync_writes, "note": ""}
    try:
        res = host.run(f"dd if=/dev/zero of={f} bs=1M count={size_mb} oflag=direct conv=fsync 2>&1", timeout=300)
        if not res.ok:
            rec["direct_io"] = False
            rec["note"] = f"O_DIRECT refused ({_first_line(res.stdout + res.stderr)}); buffered write + fsync used. "
            res = host.run(f"dd if=/dev/zero of={f} bs=1M count={size_mb} conv=fsync 2>&1", timeout=300)
        parsed = parse_dd(res.stdout)
        if res.ok and parsed and parsed[1] > 0:
            rec["write_mb_s"] = round(parsed[0] / parsed[1] / 1e6, 1)
        else:
            rec["note"] += f"write test failed: {_first_line(res.stdout + res.stderr)}. "
        res = host.run(f"dd if=/dev/zero of={f} bs=4k count={fsync_writes} oflag=dsync 2>&1", timeout=300)
        parsed = parse_dd(res.stdout)
        if res.ok and parsed:
            rec["fsync_latency_ms"] = round(parsed[1] / fsync_writes * 1000.0, 3)
        else:
            rec["note"] += f"fsync test failed: {_first_line(res.stdout + res.stderr)}. "
        fs = host.run(f"df -PT {d} | tail -1", timeout=30)
        if fs.ok and fs.stdout.split():
            parts = fs.stdout.split()
            rec["device"], rec["filesystem"] = parts[0], parts[1] if len(parts) > 1 else None
    finally:
        host.run(f"rm -f {f}", timeout=30)
    rec["note"] = rec["note"].strip() or "dd with O_DIRECT; fsync latency from 4 KiB dsync writes"
    return rec


# -- host description -----------------------------------------------------------------------

DESCRIBE_COMMAND = (
    "echo '## kernel'; uname -r; "
    "echo '## os'; (. /etc/os-release 2>/dev/null && echo \"$PRETTY_NAME\") || uname -s; "
    "echo '## nproc'; nproc; "
    "echo '## cpuinfo'; grep -m1 'model name' /proc/cpuinfo; "
    "echo '## meminfo'; grep -m1 MemTotal /proc/meminfo; "
    "echo '## hostname'; hostname"
)


def parse_describe(text: str) -> dict[str, Any]:
    """Parse the sectioned output of :data:`DESCRIBE_COMMAND`."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in (text or "").splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        elif current is not None and line.strip():
            sections[current].append(line.strip())

    def first(name: str) -> str | None:
        return sections.get(name, [None])[0] if sections.get(name) else None

    cpu = first("cpuinfo")
    mem = first("meminfo")
    mem_kb = re.search(r"(\d+)\s*kB", mem or "")
    cores = first("nproc")
    return {
        "hostname": first("hostname"),
        "cpu_model": cpu.split(":", 1)[1].strip() if cpu and ":" in cpu else cpu,
        "cores": int(cores) if cores and cores.isdigit() else None,
        "memory_gb": round(int(mem_kb.group(1)) / 1024 / 1024, 1) if mem_kb else None,
        "kernel": first("kernel"),
        "os": first("os"),
    }


def describe_host(host: Host) -> dict[str, Any]:
    """CPU model, cores, memory, kernel and OS of the host."""
    res = host.run(DESCRIBE_COMMAND, timeout=30)
    record = parse_describe(res.stdout)
    record["name"] = host.name
    if not res.ok and not any(record.get(k) for k in ("kernel", "cores")):
        record["error"] = _first_line(res.stderr) or f"exit {res.returncode}"
    return record
