"""cpu_pinning: the broker processes and the clients each on CPUs of their own (brokerbench.environments.cpus).

A CPU list in taskset's syntax is checked when the settings are read, and against the CPUs this machine
offers in the validate task (refused naming the param, no plan written); a broker deployment's processes
start on the broker side's CPUs and keep them (a process started through BrokerProcess.spawn is asked its
affinity); host setup records what was applied."""

import os
import time

import psutil
import pytest

from brokerbench.environments import cpus
from brokerbench.environments.local.environment import LocalEnvironment, LocalSettingsError
from brokerbench.environments.machine import make_broker
from brokerbench.pipeline import setup
from brokerbench.pipeline.context import RunContext
from brokerbench.spec import SpecError

OFFERED = sorted(os.sched_getaffinity(0))


def test_cpu_lists_in_tasksets_syntax():
    assert cpus.parse_cpu_list("0") == [0]
    assert cpus.parse_cpu_list("0,2-3") == [0, 2, 3]
    assert cpus.parse_cpu_list("3-3,1") == [1, 3]
    for bad in ("", "a", "1-", "2-1", "0;1"):
        with pytest.raises(ValueError):
            cpus.parse_cpu_list(bad)
    assert cpus.pinned(["java", "-jar", "x"], {"broker": "0-1"}, "broker") == ["taskset", "-c", "0,1", "java", "-jar",
                                                                               "x"]
    assert cpus.pinned(["python"], {"broker": "0"}, "client") == ["python"]


def test_a_bad_list_or_side_is_refused_naming_the_setting(tmp_path):
    for value in ({"broker": "zero"}, {"brokers": "0"}):
        with pytest.raises(LocalSettingsError, match="cpu_pinning") as e:
            LocalEnvironment("brokerbench_smoke/manual__1", {"state_dir": str(tmp_path), "cpu_pinning": value})
        assert e.value.setting == "cpu_pinning"


def test_a_cpu_the_machine_does_not_offer_is_refused_by_the_validate_task(tmp_path):
    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke",
                     {"brokers": ["rabbitmq"], "variants": ["fsync-off"], "results_root": str(tmp_path),
                      "cpu_pinning": {"broker": str(OFFERED[0]), "client": "999"}})
    with pytest.raises(SpecError, match=r"cpu_pinning\.client: CPU\(s\) 999 not available on host") as e:
        setup.validate(ctx)
    assert e.value.field == "params.cpu_pinning.client"
    assert not ctx.plan_path.exists()
    bad = RunContext("brokerbench_smoke", "manual__2", "smoke", {"results_root": str(tmp_path),
                                                                 "cpu_pinning": {"broker": "0 and 1"}})
    with pytest.raises(SpecError) as e:
        setup.validate(bad)
    assert e.value.field == "params.cpu_pinning" and "'0and1' is not a CPU list" in str(e.value)


def test_a_broker_process_starts_and_stays_on_the_broker_sides_cpus_and_host_setup_records_it(tmp_path):
    env = LocalEnvironment("brokerbench_smoke/manual__1", {
        "state_dir": str(tmp_path), "disk_baseline_mb": 0,
        "cpu_pinning": {"broker": str(OFFERED[-1]), "client": str(OFFERED[0])}})
    broker = make_broker("rabbitmq", env.state_dir, env.settings, for_start=True)
    entry = broker.spawn(["sleep", "30"], "pinning-probe")
    try:
        proc = psutil.Process(entry["pid"])
        # taskset execs the command: the recorded process becomes the broker's own, on the broker side's CPUs (its
        # command line reads empty while the exec is under way)
        deadline = time.monotonic() + 5
        while (proc.cmdline() or [""])[0] != "sleep" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.cmdline()[0] == "sleep"
        assert proc.cpu_affinity() == [OFFERED[-1]]
    finally:
        psutil.Process(entry["pid"]).kill()
        psutil.Process(entry["pid"]).wait(5)
    record = env.setup_hosts()["hosts"][0]["cpu_pinning"]
    assert record == {"pinned": True, "broker": [OFFERED[-1]], "client": [OFFERED[0]], "available_cpus": OFFERED}
    unpinned = LocalEnvironment("brokerbench_smoke/manual__2", {"state_dir": str(tmp_path / "u"),
                                                                "disk_baseline_mb": 0})
    assert unpinned.setup_hosts()["hosts"][0]["cpu_pinning"]["pinned"] is False
