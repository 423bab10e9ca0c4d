"""Suspects on a real local Apache Kafka: an A/B run whose side B reaches the broker through a delay proxy (a user's
own variant file whose only setting is Kafka's ``advertised.listeners``: the proxy's port, so every client of side
B talks to the broker through it), through the pipeline's steps (validate, provision, host setup, the benchmark
group's deploy, prepare, warm-up, measure, undeploy, teardown), the Spark aggregation and the verdicts step. The
delay is between the clients and the broker, so the verdicts must call publishing slower and the suspects must
name none of the broker's own metrics and say so (docs/analytics.md, "Suspects")."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from brokerbench.metrics import Judgement
from brokerbench.pipeline import analysis, benchmark, environment_lease, setup, teardown
from brokerbench.pipeline.context import RunContext
from brokerbench.suspects import HOST_PREFIX, NOTHING_MOVED

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.delay_proxy import DelayProxy  # noqa: E402

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TRIALS = 4  # per side: the fewest the A/B interval takes
DELAY_S = 0.004  # every broker-to-client byte of side B, 4 ms later: twice Kafka's publish p50 here


def spark_submit(args: list[str], results_root: str | None) -> subprocess.CompletedProcess:
    """What the aggregation operator's submit does, on a local[2] master (operators/spark.py)."""
    sys.path.insert(0, str(ROOT / "spark_jobs"))
    from brokerbench.operators.spark import SHORT_JOB_CONF
    from brokerbench_spark import pyfiles

    bin_dir = Path(sys.executable).parent
    conf = [a for k, v in SHORT_JOB_CONF.items() for a in ("--conf", f"{k}={v}")]
    proc = subprocess.run([str(bin_dir / "spark-submit"), "--master", "local[2]", *conf, "--py-files",
                           pyfiles.build_zip(), str(ROOT / "spark_jobs" / "aggregate.py"), *args],
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                                   PYSPARK_DRIVER_PYTHON=sys.executable,
                                   PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"))
    assert proc.returncode == 0, f"spark-submit failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.timeout(500)
def test_a_delay_between_the_clients_and_kafka_slows_publishing_and_names_no_broker_metric(
        tmp_path, monkeypatch, caplog):
    state_dir = tmp_path / "run-state"
    # side B's clients reach the broker through the proxy; the broker's own port is read at each connection
    proxy = DelayProxy(lambda: json.loads((state_dir / "kafka" / "broker.json").read_text())["ports"]["kafka"],
                       DELAY_S)
    variant = tmp_path / "behind-a-delay.yaml"
    variant.write_text(json.dumps({
        "description": "fsync-off, every client behind a 4-ms proxy",
        "kafka": {"driver": {}, "broker": {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}}}))
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))  # the lease and the run's state: the test's own
    ctx = RunContext("brokerbench_smoke", f"manual__{uuid.uuid4().hex[:6]}", "smoke", {
        "results_root": str(tmp_path / "results"), "brokers": ["kafka"], "variants": ["fsync-off"],
        "trials": TRIALS, "compare_with": {"variants": [str(variant)]}, "warmup_duration_minutes": 0.02,
        "test_duration_minutes": 0.05, "rate_override_msg_s": 200, "interval_seconds": 1})
    setup.validate(ctx)
    plan = ctx.plan()
    plan.environment_settings.update({"state_dir": str(state_dir), "disk_baseline_mb": 0, "kafka_heap_mb": 256})
    ctx.plan_path.write_text(plan.to_json())
    caplog.set_level(logging.INFO, logger="brokerbench")
    assert environment_lease.acquire_environment(ctx) is None
    try:
        setup.provision(ctx)
        setup.setup_hosts(ctx)
        benchmark.deploy(ctx, "kafka", "fsync-off")
        benchmark.prepare_topics(ctx, "kafka", "fsync-off")
        benchmark.run_phase(ctx, "kafka", "fsync-off", "warmup")
        benchmark.run_phase(ctx, "kafka", "fsync-off", "measure")
        benchmark.undeploy(ctx, "kafka")
    finally:
        teardown.teardown(ctx)
        environment_lease.release_environment(ctx)
        proxy.close()
    assert caplog.text.count("side B: deploying kafka afresh (variant behind-a-delay)") == 2, caplog.text[-3000:]

    analysis.aggregate_results(ctx, spark_submit, "manual", datetime.now(timezone.utc).isoformat())
    analysis.verdicts(ctx)
    doc = json.loads((ctx.run_dir / "summary" / "regression.json").read_text())
    ab = [v for v in doc["verdicts"] if v.get("rule") == "A/B"]
    print("\n".join(f"A/B {v['metric']}: {v['verdict']}: {(v.get('suspects') or {}).get('sentence', '')}"
                    for v in ab))
    p50 = next(v for v in ab if v["metric"] == "publish_latency_p50_ms")
    assert p50["verdict"] == Judgement.REGRESSED, p50
    assert p50["interval"]["ci_low"] > 1.3, p50  # the proxy's 4 ms on a publish p50 of about 2 ms
    changed = [v for v in ab if v["verdict"] in (Judgement.REGRESSED, Judgement.IMPROVED)]
    for v in changed:  # every change the run found: none of the broker's own metrics is a suspect of it
        s = v["suspects"]
        assert [f["column"] for f in s["suspects"] if not f["column"].startswith(HOST_PREFIX)] == [], s
        assert NOTHING_MOVED in s["sentence"], s["sentence"]
        assert len(s["cleared"]) + len(s["with_it"]) >= 10, s  # the catalog was measured and compared
