"""Host setup: parsing of captured command output, and the records built from it."""

from __future__ import annotations

import re

import pytest

from brokerbench.environments import hostsetup
from brokerbench.environments.base import CommandResult, Host

CHRONY_SYNCED = """\
Reference ID    : A9FEA97B (169.254.169.123)
Stratum         : 4
Ref time (UTC)  : Sat Nov 21 10:20:31 2026
System time     : 0.000012345 seconds fast of NTP time
Last offset     : -0.000004567 seconds
RMS offset      : 0.000021000 seconds
Frequency       : 7.123 ppm slow
Residual freq   : +0.001 ppm
Skew            : 0.045 ppm
Root delay      : 0.000412 seconds
Root dispersion : 0.000355 seconds
Update interval : 16.2 seconds
Leap status     : Normal
"""

CHRONY_UNSYNCED = """\
Reference ID    : 00000000 ()
Stratum         : 0
Ref time (UTC)  : Thu Jan 01 00:00:00 1970
System time     : 0.002500000 seconds slow of NTP time
Last offset     : +0.000000000 seconds
RMS offset      : 0.000000000 seconds
Frequency       : 0.000 ppm slow
Leap status     : Not synchronised
"""

DD_DIRECT = """\
64+0 records in
64+0 records out
67108864 bytes (67 MB, 64 MiB) copied, 0.2 s, 336 MB/s
"""

DD_DSYNC = """\
200+0 records in
200+0 records out
819200 bytes (819 kB, 800 KiB) copied, 0.5 s, 1.6 MB/s
"""

DESCRIBE = """\
## kernel
6.1.0-26-cloud-amd64
## os
Debian GNU/Linux 12 (bookworm)
## nproc
2
## cpuinfo
model name	: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
## meminfo
MemTotal:       24684144 kB
## hostname
bench-client-1
"""


class FakeHost(Host):
    """A host whose commands answer from a script: list of (regex, returncode, stdout, stderr)."""

    def __init__(self, script):
        self.name, self.role = "fake", "all"
        self.script = script
        self.commands: list[str] = []

    def run(self, command, timeout=60.0):
        self.commands.append(command)
        for i, (pattern, rc, out, err) in enumerate(self.script):
            if re.search(pattern, command):
                if isinstance(out, list):  # successive answers
                    out = out.pop(0) if len(out) > 1 else out[0]
                return CommandResult(self.name, command, rc, out, err)
        return CommandResult(self.name, command, 0, "", "")


# -- parsing ---------------------------------------------------------------------------

def test_parse_chronyc_tracking_synchronised():
    p = hostsetup.parse_chronyc_tracking(CHRONY_SYNCED)
    assert p["clock_offset_ms"] == pytest.approx(0.012345)  # fast = local clock ahead = positive
    assert p["last_offset_ms"] == pytest.approx(-0.004567)
    assert p["rms_offset_ms"] == pytest.approx(0.021)
    assert p["reference"] == "A9FEA97B (169.254.169.123)"
    assert p["stratum"] == 4 and p["leap_status"] == "Normal"


def test_parse_chronyc_tracking_slow_and_unsynchronised():
    p = hostsetup.parse_chronyc_tracking(CHRONY_UNSYNCED)
    assert p["clock_offset_ms"] == pytest.approx(-2.5)
    assert p["leap_status"] == "Not synchronised"


def test_parse_chronyc_tracking_of_garbage_gives_nones():
    p = hostsetup.parse_chronyc_tracking("506 Cannot talk to daemon\n")
    assert set(p.values()) == {None}


def test_parse_dd():
    assert hostsetup.parse_dd(DD_DIRECT) == (67108864, 0.2)
    assert hostsetup.parse_dd("1048576 bytes (1,0 MB, 1,0 MiB) copied, 0,5 s, 2,1 MB/s") == (1048576, 0.5)
    assert hostsetup.parse_dd("dd: failed to open 'x': Invalid argument") is None


def test_parse_describe():
    d = hostsetup.parse_describe(DESCRIBE)
    assert d == {"hostname": "bench-client-1", "cpu_model": "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz",
                 "cores": 2, "memory_gb": 23.5, "kernel": "6.1.0-26-cloud-amd64",
                 "os": "Debian GNU/Linux 12 (bookworm)"}


def test_tuned_failure_reason():
    out = ("Cannot talk to TuneD daemon via DBus. Is TuneD daemon running?\n"
           "Trying to (re)start tuned...\n")
    assert hostsetup.tuned_failure_reason(out) == (
        "tuned daemon not available: Cannot talk to TuneD daemon via DBus. Is TuneD daemon running?")
    assert hostsetup.tuned_failure_reason("Requested profile 'x' doesn't exist.") == \
        "tuned-adm failed: Requested profile 'x' doesn't exist."


# -- records -------------------------------------------------------------------------------

def test_tuned_not_installed():
    host = FakeHost([(r"command -v tuned-adm", 1, "", "")])
    rec = hostsetup.apply_tuned_profile(host)
    assert rec == {"profile": "latency-performance", "applied": False, "reason": "tuned-adm is not installed"}


def test_tuned_daemon_missing_is_recorded_not_raised():
    host = FakeHost([(r"command -v", 0, "/usr/sbin/tuned-adm\n", ""),
                     (r"tuned-adm profile", 1, "", "Cannot talk to TuneD daemon via DBus.\nmore\n")])
    rec = hostsetup.apply_tuned_profile(host)
    assert rec["applied"] is False
    assert rec["reason"] == "tuned daemon not available: Cannot talk to TuneD daemon via DBus."


def test_tuned_applied_when_active_profile_matches():
    host = FakeHost([(r"command -v", 0, "/usr/sbin/tuned-adm\n", ""), (r"tuned-adm profile", 0, "", ""),
                     (r"tuned-adm active", 0, "Current active profile: latency-performance\n", "")])
    assert hostsetup.apply_tuned_profile(host) == {"profile": "latency-performance", "applied": True,
                                                   "reason": "active"}


def test_time_sync_single_host_is_zero_by_construction():
    host = FakeHost([])
    rec = hostsetup.time_sync(host, single_host=True)
    assert rec["clock_offset_ms"] == 0.0 and rec["synchronised"] is True and "one host" in rec["note"]
    assert host.commands == []  # nothing is measured


def test_time_sync_waits_for_leap_status_normal():
    host = FakeHost([(r"chronyc tracking", 0, [CHRONY_UNSYNCED, CHRONY_SYNCED], "")])
    rec = hostsetup.time_sync(host, single_host=False, wait_s=5, poll_s=0.01)
    assert rec["synchronised"] is True and rec["clock_offset_ms"] == pytest.approx(0.012345)
    assert "169.254.169.123" in rec["source"]
    assert len(host.commands) == 2


def test_time_sync_gives_up_after_the_bound():
    host = FakeHost([(r"chronyc tracking", 0, [CHRONY_UNSYNCED], "")])
    rec = hostsetup.time_sync(host, single_host=False, wait_s=0.05, poll_s=0.01)
    assert rec["synchronised"] is False and "Not synchronised" in rec["note"]
    assert rec["clock_offset_ms"] == pytest.approx(-2.5)


def test_time_sync_without_chrony():
    host = FakeHost([(r"chronyc tracking", 127, "", "sh: 1: chronyc: not found\n")])
    rec = hostsetup.time_sync(host, single_host=False, wait_s=0)
    assert rec["clock_offset_ms"] is None and rec["synchronised"] is False
    assert "chronyc: not found" in rec["note"]


def test_disk_baseline_from_dd_output():
    host = FakeHost([(r"oflag=direct", 0, DD_DIRECT, ""), (r"oflag=dsync", 0, DD_DSYNC, ""),
                     (r"df -PT", 0, "/dev/nvme1n1 xfs 100 1 99 1% /data\n", "")])
    rec = hostsetup.disk_baseline(host, "/data", size_mb=64, fsync_writes=200)
    assert rec["write_mb_s"] == pytest.approx(335.5, abs=0.1)  # 67108864 B / 0.2 s
    assert rec["fsync_latency_ms"] == pytest.approx(2.5)  # 0.5 s / 200 writes
    assert rec["direct_io"] is True and rec["filesystem"] == "xfs"
    assert any(c.startswith("rm -f /data/.brokerbench-dd-") for c in host.commands)


def test_disk_baseline_falls_back_when_o_direct_is_refused():
    host = FakeHost([(r"oflag=direct", 1, "dd: failed to open '/x': Invalid argument\n", ""),
                     (r"count=64 conv=fsync", 0, DD_DIRECT, ""), (r"oflag=dsync", 0, DD_DSYNC, "")])
    rec = hostsetup.disk_baseline(host, "/x")
    assert rec["direct_io"] is False and "O_DIRECT refused" in rec["note"]
    assert rec["write_mb_s"] == pytest.approx(335.5, abs=0.1)
