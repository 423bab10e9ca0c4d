"""A throughput sweep through `brokerbench bench` (the throughput-sweep suite's DAG under `airflow dags test`) with
the run param ``sweep_max_publish_p99_ms``: a step that keeps its rate but not the publish latency bound is not
stable, and sweep.csv, the terminal's summary and the report say by which bound.

Kafka through the suite's driver (confluent-kafka, producer batches lingering 10 ms): at 1,000 msg/s over 100
partitions no batch fills, so nearly every message waits its linger before it is sent, and a publish p99 under 5
ms cannot happen. The run has an Airflow database of its own (a copy of the project's) and a brokerbench home of its
own (its environment lease), so it runs beside the other DAG tests (tests/conftest.py)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.airflow_db import private_airflow_db  # noqa: E402

BROKERBENCH = str(Path(sys.executable).parent / "brokerbench")
BOUND_MS = 5


@pytest.mark.timeout(900)
def test_a_sweep_step_within_its_rate_but_over_the_publish_p99_bound_is_not_stable(tmp_path):
    results = tmp_path / "results"
    env = {**os.environ, **private_airflow_db(tmp_path / "airflow"), "BROKERBENCH_HOME": str(tmp_path / "home")}
    conf = {"results_root": str(results), "sweep_max_publish_p99_ms": BOUND_MS, "test_duration_minutes": 0.2,
            "warmup_duration_minutes": 0.05, "interval_seconds": 1}
    p = subprocess.run([BROKERBENCH, "bench", "--suite", "throughput-sweep", "--brokers", "kafka", "--variants",
                        "fsync-off", "--conf", json.dumps(conf)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=850)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    run_dir = next((results / "runs" / "brokerbench_throughput_sweep").iterdir())
    with open(run_dir / "summary" / "sweep.csv") as f:
        steps = list(csv.DictReader(f))
    print("\n".join(f"STEP {s['step']}: target {s['target_rate_msg_s']} msg/s, publish {s['publish_rate_msg_s']} "
                    f"msg/s, publish p99 {s['publish_latency_p99_ms']} ms, stable {s['stable']}: {s['reasons']}"
                    for s in steps))
    # the first step (1,000 msg/s) is unstable by the bound, and the sweep stopped after it: no stable rate
    (step,) = steps
    assert (step["broker"], step["step"], float(step["target_rate_msg_s"])) == ("kafka", "0", 1000.0), step
    assert step["stable"] == "False" and float(step["publish_p99_bound_ms"]) == BOUND_MS, step
    assert float(step["publish_latency_p99_ms"]) > BOUND_MS, step
    assert f"ms > {BOUND_MS} ms (the step's latency bound)" in step["reasons"], step
    assert step["highest_stable_rate_msg_s"] == "", step
    # so do the terminal's summary and the report, beside the sweep's table and chart
    assert ("highest stable rate kafka fsync-off throughput-1-topic-100-partitions-1kb-max: none of its steps was "
            f"stable (a stable step: publish p99 at most {BOUND_MS} ms)") in p.stdout, p.stdout[-3000:]
    report = (run_dir / "report.html").read_text()
    assert f"publish latency p99 vs achieved rate (a stable step: publish p99 at most {BOUND_MS} ms)" in report
    # the plan carries the param into every workload, as validate accepted it
    plan = json.loads((run_dir / "plan.json").read_text())
    assert {i["workload"]["sweepMaxPublishP99Ms"] for i in plan["items"]} == {BOUND_MS}
