"""An A/B run of a variant on a real local Apache Kafka through the pipeline's steps (validate, provision, host
setup, the benchmark group's deploy, prepare, warm-up, measure, undeploy, teardown: what the DAG's tasks call):
side A fsync-off, side B a variant file of the user's own named fsync-on (Kafka's flush per message, broker
settings and a 64 MB heap on the serial collector), 4 trials a side in ABBA order in side A's task group. Each
change of side stops the broker and starts a new JVM with that side's settings; side B's topics carry
flush.messages=1 on the broker; the aggregation's own functions give side B's summary rows their variant and
their own provenance; and a setting Kafka refuses at start fails that deploy, naming it and quoting Kafka."""

from __future__ import annotations

import json
import logging
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from brokerbench.pipeline import benchmark, environment_lease, setup, teardown
from brokerbench.pipeline.context import RunContext

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "spark_jobs"))
from brokerbench_spark.entry import read_provenance, side_provenance  # noqa: E402
from brokerbench_spark.phase_tables import finish_summary, phase_rows  # noqa: E402

pytestmark = pytest.mark.integration

BASE = "smoke-1-topic-1-partition-100b"
TRIALS = 4  # per side: the fewest the A/B interval takes
#: side B's JVM: a small heap on the serial collector (over brokerbench's 1 GB G1 defaults)
SIDE_B_JVM = "-Xms64m -Xmx64m -XX:+UseSerialGC"
#: side B's broker settings: fewer I/O threads, and a log cleaner's buffer that fits the small heap (Kafka's default,
#: 128 MB, is allocated at start: "OutOfMemoryError: Java heap space" starting the LogManager on a 64 or 128 MB heap)
SIDE_B_BROKER = {"num.io.threads": "4", "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024)}


def kafka_process(state_dir: Path) -> psutil.Process:
    state = json.loads((state_dir / "kafka" / "broker.json").read_text())
    return psutil.Process(next(e["pid"] for e in state["processes"] if e.get("main")))


def topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("topic", topic)
    return {k: v.value for k, v in admin.describe_configs([resource])[resource].result(timeout=30).items()}


@pytest.mark.timeout(400)
def test_side_b_of_another_variant_runs_on_a_fresh_broker_of_its_own_settings_at_every_change_of_side(
        tmp_path, monkeypatch, caplog, local_env):
    variant = tmp_path / "fsync-on.yaml"  # a user's own variant, named as the shipped one (its file's stem)
    variant.write_text(json.dumps({
        "description": "fsync per message, a small heap on the serial collector",
        "kafka": {"driver": {"topicConfig": {"flush.messages": "1", "flush.ms": "0"}},
                  "broker": SIDE_B_BROKER, "jvmOptions": SIDE_B_JVM}}))
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))  # the lease and the run's state: the test's own
    state_dir = tmp_path / "run-state"  # (the local_env fixture has tmp_path / "state")
    ctx = RunContext("brokerbench_smoke", f"manual__{uuid.uuid4().hex[:6]}", "smoke", {
        "results_root": str(tmp_path / "results"), "brokers": ["kafka"], "variants": ["fsync-off"],
        "trials": TRIALS, "compare_with": {"variants": [str(variant)]}, "warmup_duration_minutes": 0.02,
        "test_duration_minutes": 0.05, "rate_override_msg_s": 200, "interval_seconds": 1})
    setup.validate(ctx)
    plan = ctx.plan()
    plan.environment_settings.update({"state_dir": str(state_dir), "disk_baseline_mb": 0, "kafka_heap_mb": 256})
    ctx.plan_path.write_text(plan.to_json())
    assert plan.deployments() == [("kafka", "fsync-off")]

    seen: list[dict] = []
    run_item = benchmark._run_item

    def watched(ctx_, env, item, endpoint, phase):
        """What runs during each phase: the broker's process, its JVM flags and configuration, the topic's."""
        proc = kafka_process(state_dir)
        cmd = proc.cmdline()
        topic = benchmark._names(ctx_, item)[0][0]
        seen.append({"side": item.side, "trial": item.trial, "phase": phase, "variant": item.variant,
                     "pid": proc.pid, "serial": "-XX:+UseSerialGC" in cmd, "g1": "-XX:+UseG1GC" in cmd,
                     "xmx": [f for f in cmd if f.startswith("-Xmx")],
                     "io_threads": "num.io.threads=4" in (state_dir / "kafka" / "server.properties").read_text(),
                     "flush": topic_config(endpoint.bootstrap_servers, topic).get("flush.messages")})
        return run_item(ctx_, env, item, endpoint, phase)

    monkeypatch.setattr(benchmark, "_run_item", watched)
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
    print("\n".join(json.dumps(s) for s in seen))

    measured = [s for s in seen if s["phase"] == "measure"]
    assert [(s["side"], s["trial"]) for s in measured] == [("A", 1), ("B", 1), ("B", 2), ("A", 2), ("A", 3),
                                                           ("B", 3), ("B", 4), ("A", 4)]
    # a new JVM at every change of side (A, B, A, B, A: five), the same one between the trials of one side
    pids = [s["pid"] for s in measured]
    assert pids[1] == pids[2] and pids[3] == pids[4] and pids[5] == pids[6]
    assert len({pids[0], pids[1], pids[3], pids[5], pids[7]}) == 5, pids
    for s in seen:  # each side's broker as its variant says: JVM flags, broker setting, the topics' flush
        b = s["side"] == "B"
        assert (s["variant"], s["serial"], s["g1"], s["io_threads"]) == \
            (("fsync-on", True, False, True) if b else ("fsync-off", False, True, False)), s
        assert s["xmx"] == (["-Xmx64m"] if b else ["-Xmx256m"]), s
        assert s["flush"] == ("1" if b else "9223372036854775807"), s  # Kafka's default: no flush per message
    said = caplog.text
    assert said.count("side B: deploying kafka afresh (variant fsync-on)") == 2, said[-3000:]
    assert said.count("side A: deploying kafka afresh (variant fsync-off)") == 2
    assert "already running with these settings: reused" not in said
    assert said.count("serving after") == 5

    # the summary rows, by the aggregation's own functions (its executors' phase_rows, its driver's provenance)
    run_dir = ctx.run_dir
    files = sorted(str(p) for p in (run_dir / "raw").glob("*/*/*/measure/*.jsonl"))
    assert len(files) == 2 * TRIALS
    provenance = read_provenance(str(run_dir))
    rows = [finish_summary(part, side_provenance(provenance, part), None)
            for table, _, part in phase_rows([(0, files)]) if table == "summary"]
    by_side = {side: [r for r in rows if (".B." in r["workload"]) == (side == "B")] for side in "AB"}
    assert sorted(r["workload"] for r in by_side["B"]) == [f"{BASE}.B.trial{k}" for k in range(1, TRIALS + 1)]
    for side, variant_name, flush in (("A", "fsync-off", False), ("B", "fsync-on", True)):
        for r in by_side[side]:
            assert r["variant"] == variant_name and r["broker_version"] == "4.1.1", r
            assert ("flush.messages" in (r["durability_settings"] or "")) is flush, r["durability_settings"]
            assert r["messages_acked"] > 0 and r["send_errors"] == 0, r
    record = json.loads((run_dir / "provenance" / "kafka__fsync-on.B.json").read_text())
    assert record["variant_jvm_options"] == SIDE_B_JVM.split() and "-XX:+UseSerialGC" in record["jvm_options"]
    assert record["deployment_of"] == "fsync-off" and record["side"] == "B"

    # a setting Kafka refuses at start fails the deploy, naming it and quoting Kafka's own message
    from brokerbench.environments.base import EnvironmentFailure

    with pytest.raises(EnvironmentFailure) as e:
        local_env.deploy("kafka", {"num.io.threads": "abc"}, "bad-io-threads", {})
    print(str(e.value)[:600])
    assert str(e.value).startswith("kafka (apache-kafka): refused the setting num.io.threads='abc' at start: ")
    assert "Invalid value abc for configuration num.io.threads" in str(e.value).splitlines()[0]
