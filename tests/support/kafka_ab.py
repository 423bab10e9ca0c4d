"""An A/B run on a real local Apache Kafka through the pipeline's steps, as the DAG's tasks call them (validate,
provision, host setup, the benchmark group's deploy, prepare, warm-up, measure, undeploy, teardown), side A
fsync-off and side B a variant file of the test's own; then, when asked, the Spark aggregation (spark-submit on a
local[2] master, as the aggregation operator submits it) and the verdicts step. The integration tests of A/B
variants and of their suspects share it (tests/integration/test_ab_variant_kafka.py, test_suspects_kafka.py)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from brokerbench.ab_verdicts import usable as usable_trial
from brokerbench.pipeline import analysis, benchmark, environment_lease, setup, teardown
from brokerbench.pipeline.context import RunContext
from brokerbench.spec.params import AB_MIN_TRIALS

ROOT = Path(__file__).resolve().parents[2]
#: per side: one more than the fewest the A/B interval takes (4), so that a trial the machine's other load made
#: invalid (a client-bound first trial after a deploy, seen in CI) still leaves the sides judged
TRIALS = 5


def abba(trials: int = TRIALS) -> list[tuple[str, int]]:
    """The measured phases' order, (side, trial): side A first in odd trials, side B first in even ones."""
    return [(side, k) for k in range(1, trials + 1) for side in (("A", "B") if k % 2 else ("B", "A"))]


def fresh_deploys(side: str, trials: int = TRIALS) -> int:
    """How often a side is deployed afresh at a change of side (side A's first deploy is the deploy task's)."""
    order = [s for s, _ in abba(trials)]
    return sum(1 for i in range(1, len(order)) if order[i] == side and order[i - 1] != side)


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


def run_ab(tmp_path: Path, monkeypatch, name: str, side_b: dict[str, Any], rate_msg_s: int = 200,
           heap_mb: int = 256, client_library: str | None = None) -> RunContext:
    """Side A fsync-off against side B, the variant file ``<name>.yaml`` holding ``side_b``: TRIALS trials a side
    of 3 s each in ABBA order in side A's task group, every change of side a fresh broker. The run's state, lease and
    results are under ``tmp_path``; its broker state directory is ``tmp_path / "run-state"``. ``client_library``:
    the Kafka client of both sides (the ``client_libraries`` param), the suite's when None."""
    variant = tmp_path / f"{name}.yaml"  # a user's own variant, named by its file's stem
    variant.write_text(json.dumps(side_b))
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))  # the lease and the run's state: the test's own
    ctx = RunContext("brokerbench_smoke", f"manual__{uuid.uuid4().hex[:6]}", "smoke", {
        "results_root": str(tmp_path / "results"), "brokers": ["kafka"], "variants": ["fsync-off"],
        "trials": TRIALS, "compare_with": {"variants": [str(variant)]}, "warmup_duration_minutes": 0.02,
        "test_duration_minutes": 0.05, "rate_override_msg_s": rate_msg_s, "interval_seconds": 1,
        **({"client_libraries": {"kafka": client_library}} if client_library else {})})
    setup.validate(ctx)
    plan = ctx.plan()
    plan.environment_settings.update({"state_dir": str(tmp_path / "run-state"), "disk_baseline_mb": 0,
                                      "kafka_heap_mb": heap_mb})
    ctx.plan_path.write_text(plan.to_json())
    assert plan.deployments() == [("kafka", "fsync-off")]
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
    return ctx


def ab_verdicts(ctx: RunContext) -> list[dict[str, Any]]:
    """The run's A/B verdicts as regression.json holds them, after the Spark aggregation and the verdicts step;
    each printed with its suspects sentence, as the terminal summary shows them."""
    analysis.aggregate_results(ctx, spark_submit, "manual", datetime.now(timezone.utc).isoformat())
    analysis.verdicts(ctx)
    doc = json.loads((ctx.run_dir / "summary" / "regression.json").read_text())
    ab = [v for v in doc["verdicts"] if v.get("rule") == "A/B"]
    print("\n".join(f"A/B {v['metric']}: {v['verdict']}: {(v.get('suspects') or {}).get('sentence', '')}"
                    for v in ab))
    return ab


def too_few_usable(ctx: RunContext, ab: list[dict[str, Any]]) -> bool:
    """Whether another run on the machine (the other test worker's brokers, a load beyond the host's) left a side
    with fewer usable trials than the product judges with (AB_MIN_TRIALS, 4). Then the product judges nothing
    and says why, which this asserts: the test's cause is not judged in that run, and the caller ends there
    (printing so)."""
    rows = list(csv.DictReader((ctx.run_dir / "summary" / "summary.csv").open()))
    usable = {s: sum(1 for r in rows if (".B.trial" in r["workload"]) == (s == "B") and usable_trial(r))
              for s in ("A", "B")}
    if min(usable.values()) >= AB_MIN_TRIALS:  # the fewest the product judges with
        return False
    print(f"usable trials {usable}: not judged here ({[r['status'][:120] for r in rows if not usable_trial(r)]})")
    for v in ab:
        assert v["verdict"].startswith("not judged: too few valid trials"), v
    return True
