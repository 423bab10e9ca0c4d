"""A crash in the broker: the RabbitMQ node is killed with SIGKILL during the measured phase. The phase fails
naming the broker, the run fails, the intervals measured before are kept and summarised (the row is marked),
and the teardown leaves nothing running."""

from __future__ import annotations

import json
import signal
import threading
import time

import psutil

from tests.e2e.test_smoke_dag import dags_test, processes_under, read_summary, run_dir_of


def test_broker_killed_mid_measurement_fails_the_run_keeps_results_and_tears_down(tmp_path):
    """A real fault: the RabbitMQ node dies during the measured phase."""
    results, home, log = tmp_path / "results", tmp_path / "home", tmp_path / "dags-test.log"
    conf = {"results_root": str(results), "brokers": ["rabbitmq"], "variants": ["fsync-off"],
            "test_duration_minutes": 0.5, "warmup_duration_minutes": 0.05}
    proc = dags_test("brokerbench_smoke", conf, home, log)
    killed: list[int] = []

    def kill_broker_once_measuring():
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            measure = list(results.glob("runs/*/*/raw/*/*/*/measure/*.jsonl*"))  # an attempt in progress
            if measure and sum(1 for _ in open(measure[0])) >= 3:  # meta + 2 intervals written
                for p in psutil.process_iter(["pid", "name", "cmdline"]):
                    try:
                        cmd = " ".join(p.info["cmdline"] or [])
                        if "beam" in (p.info["name"] or "") and str(home) in cmd:
                            p.send_signal(signal.SIGKILL)
                            killed.append(p.pid)
                    except (psutil.NoSuchProcess, psutil.AccessDenied):
                        pass
                return
            time.sleep(0.5)

    killer = threading.Thread(target=kill_broker_once_measuring)
    killer.start()
    rc = proc.wait(timeout=900)
    killer.join()
    output = log.read_text()
    assert killed, "the broker was never seen measuring"
    assert rc != 0, "a run whose broker died must fail"
    run_dir = run_dir_of(results, "brokerbench_smoke")
    # the intervals measured before the broker died are kept and summarised
    measure = list(run_dir.glob("raw/*/*/*/measure/*.jsonl"))
    intervals = [json.loads(line) for line in open(measure[0]) if '"record":"interval"' in line]
    assert len(intervals) >= 2 and intervals[0]["acked"] > 0
    rows = read_summary(run_dir)
    assert len(rows) == 1 and rows[0]["status"] != "ok"
    assert float(rows[0]["publish_latency_p50_ms"]) > 0
    # the error names the broker, and teardown ran and left nothing behind
    assert "rabbitmq" in output.lower()
    assert (run_dir / "provenance" / "teardown.json").exists()
    assert processes_under(home) == []
